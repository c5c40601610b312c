//! ONC RPC version 2 (RFC 5531) over TCP: record marking, the call
//! header with its credential, and the replies. Programs are served by
//! `server`; this module knows no program.

use crate::xdr::{Garbage, Reader, Writer};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The last fragment of a record.
pub(crate) const LAST_FRAGMENT: u32 = 1 << 31;
/// An AUTH_SYS body is at most 400 bytes (RFC 5531).
const MAX_AUTH: usize = 400;
/// AUTH_SYS carries at most 16 supplementary groups.
const MAX_GROUPS: u32 = 16;

pub const AUTH_NULL: u32 = 0;
pub const AUTH_SYS: u32 = 1;

/// Memory held by records in flight, in KiB: what `read_record` takes
/// before it reads a fragment, given back when its `Held` goes.
pub type Budget = std::sync::Arc<tokio::sync::Semaphore>;
pub type Held = Vec<tokio::sync::OwnedSemaphorePermit>;

/// Reads one record (all its fragments): None at a clean end of the
/// stream. A record longer than `max` is an error (the connection ends);
/// each fragment waits for its share of `budget` before it is read, so
/// that however many clients send at once, the memory their records hold
/// stays bounded.
pub async fn read_record<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
    budget: &Budget,
) -> std::io::Result<Option<(Bytes, Held)>> {
    let mut record = BytesMut::new();
    let mut held = Vec::new();
    loop {
        let mut head = [0u8; 4];
        match r.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && record.is_empty() => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
        let head = u32::from_be_bytes(head);
        let len = (head & !LAST_FRAGMENT) as usize;
        if record.len() + len > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("an RPC record of more than {max} bytes"),
            ));
        }
        let kib = (len / 1024 + 1) as u32;
        held.push(
            budget
                .clone()
                .acquire_many_owned(kib)
                .await
                .map_err(std::io::Error::other)?,
        );
        let at = record.len();
        record.resize(at + len, 0);
        r.read_exact(&mut record[at..]).await?;
        if head & LAST_FRAGMENT != 0 {
            return Ok(Some((record.freeze(), held)));
        }
    }
}

/// The fragment header of a reply of `len` bytes, sent as one fragment.
pub fn record_mark(len: usize) -> [u8; 4] {
    (len as u32 | LAST_FRAGMENT).to_be_bytes()
}

/// Who a call is made by, as its credential says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cred {
    /// AUTH_NULL: nobody in particular.
    Null,
    /// AUTH_SYS: the caller's ids as its machine states them.
    Sys {
        machine: String,
        uid: u32,
        gid: u32,
        groups: Vec<u32>,
    },
}

impl Cred {
    fn decode(flavor: u32, body: Bytes) -> Result<Cred, AuthStat> {
        match flavor {
            AUTH_NULL => Ok(Cred::Null),
            AUTH_SYS => {
                let mut r = Reader::new(body);
                let sys = (|| -> crate::xdr::Result<Cred> {
                    let _stamp = r.u32()?;
                    let machine = r.opaque(255)?;
                    let (uid, gid) = (r.u32()?, r.u32()?);
                    let n = r.u32()?;
                    if n > MAX_GROUPS {
                        return Err(Garbage);
                    }
                    let groups = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
                    Ok(Cred::Sys {
                        machine: String::from_utf8_lossy(&machine).into_owned(),
                        uid,
                        gid,
                        groups,
                    })
                })();
                sys.map_err(|_| AuthStat::BadCred)
            }
            // Kerberos (RPCSEC_GSS) and the rest: not served.
            _ => Err(AuthStat::TooWeak),
        }
    }
}

/// Why a credential is refused (RFC 5531's auth_stat).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthStat {
    BadCred = 1,
    RejectedCred = 2,
    TooWeak = 5,
}

/// A call, its header read; `args` holds the procedure's arguments.
pub struct Call {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: Cred,
    pub args: Reader,
}

/// What a record that is not a call to serve gets.
#[derive(Debug, PartialEq, Eq)]
pub enum NotCall {
    /// Not even a call header (or a reply): nothing is answered.
    Ignore,
    /// Answered with this reply.
    Answer(Bytes),
}

/// Reads the call header of `record`.
pub fn parse_call(record: Bytes) -> Result<Call, NotCall> {
    let mut r = Reader::new(record);
    let (Ok(xid), Ok(0)) = (r.u32(), r.u32()) else {
        return Err(NotCall::Ignore);
    };
    let head = (|| -> crate::xdr::Result<_> {
        let rpcvers = r.u32()?;
        let (prog, vers, proc_) = (r.u32()?, r.u32()?, r.u32()?);
        let flavor = r.u32()?;
        let body = r.opaque(MAX_AUTH)?;
        let _verf_flavor = r.u32()?;
        let _verf = r.opaque(MAX_AUTH)?;
        Ok((rpcvers, prog, vers, proc_, flavor, body))
    })();
    let Ok((rpcvers, prog, vers, proc_, flavor, body)) = head else {
        return Err(NotCall::Answer(denied_auth(xid, AuthStat::BadCred)));
    };
    if rpcvers != 2 {
        let mut w = reply_head(xid, 1);
        w.u32(0).u32(2).u32(2); // RPC_MISMATCH, low and high: 2
        return Err(NotCall::Answer(w.into_bytes()));
    }
    let cred = Cred::decode(flavor, body).map_err(|s| NotCall::Answer(denied_auth(xid, s)))?;
    Ok(Call {
        xid,
        prog,
        vers,
        proc_,
        cred,
        args: r,
    })
}

fn reply_head(xid: u32, stat: u32) -> Writer {
    let mut w = Writer::new();
    w.u32(xid).u32(1).u32(stat); // REPLY, MSG_ACCEPTED (0) or MSG_DENIED (1)
    w
}

/// A call refused for its credential.
pub fn denied_auth(xid: u32, why: AuthStat) -> Bytes {
    let mut w = reply_head(xid, 1);
    w.u32(1).u32(why as u32); // AUTH_ERROR
    w.into_bytes()
}

/// How an accepted call went (RFC 5531's accept_stat).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accept {
    Success = 0,
    ProgUnavail = 1,
    /// With the lowest and highest versions served.
    ProgMismatch = 2,
    ProcUnavail = 3,
    GarbageArgs = 4,
    SystemErr = 5,
}

/// The head of an accepted reply, up to its results (a null verifier).
pub fn accepted(xid: u32, stat: Accept) -> Writer {
    let mut w = reply_head(xid, 0);
    w.u32(AUTH_NULL).u32(0).u32(stat as u32);
    w
}

/// A program this server does not serve in `vers`: the versions it does.
pub fn prog_mismatch(xid: u32, low: u32, high: u32) -> Bytes {
    let mut w = accepted(xid, Accept::ProgMismatch);
    w.u32(low).u32(high);
    w.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(rpcvers: u32, flavor: u32, cred: &[u8]) -> Bytes {
        let mut w = Writer::new();
        w.u32(9).u32(0).u32(rpcvers).u32(100003).u32(3).u32(1);
        w.u32(flavor).opaque(cred).u32(0).u32(0);
        w.u32(42); // an argument
        w.into_bytes()
    }

    fn sys(uid: u32, groups: &[u32]) -> Bytes {
        let mut w = Writer::new();
        w.u32(1)
            .opaque(b"client")
            .u32(uid)
            .u32(100)
            .u32(groups.len() as u32);
        for g in groups {
            w.u32(*g);
        }
        w.into_bytes()
    }

    #[test]
    fn a_call_gives_its_header_credential_and_arguments() {
        let c = parse_call(call(2, AUTH_SYS, &sys(1000, &[5, 6])))
            .ok()
            .unwrap();
        assert_eq!((c.xid, c.prog, c.vers, c.proc_), (9, 100003, 3, 1));
        assert_eq!(
            c.cred,
            Cred::Sys {
                machine: "client".into(),
                uid: 1000,
                gid: 100,
                groups: vec![5, 6]
            }
        );
        let mut args = c.args;
        assert_eq!(args.u32(), Ok(42));
    }

    #[test]
    fn bad_headers_get_the_errors_rpc_names() {
        // Another RPC version: RPC_MISMATCH (denied, 0, versions 2..2).
        let Err(NotCall::Answer(a)) = parse_call(call(3, AUTH_NULL, b"")) else {
            panic!()
        };
        assert_eq!(
            &a[..],
            &[0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2]
        );
        // Kerberos: AUTH_TOOWEAK; a broken AUTH_SYS: AUTH_BADCRED.
        let denied = |b: Bytes| match parse_call(b) {
            Err(NotCall::Answer(a)) => u32::from_be_bytes(a[a.len() - 4..].try_into().unwrap()),
            _ => panic!(),
        };
        assert_eq!(denied(call(2, 6, b"")), AuthStat::TooWeak as u32);
        assert_eq!(
            denied(call(2, AUTH_SYS, &sys(0, &[0; 17]))),
            AuthStat::BadCred as u32
        );
        assert_eq!(denied(call(2, AUTH_SYS, b"\0\0")), AuthStat::BadCred as u32);
        // A reply, or four bytes: ignored.
        let mut w = Writer::new();
        w.u32(1).u32(1);
        assert_eq!(parse_call(w.into_bytes()).err(), Some(NotCall::Ignore));
        assert_eq!(
            parse_call(Bytes::from_static(b"abcd")).err(),
            Some(NotCall::Ignore)
        );
    }

    #[tokio::test]
    async fn records_are_joined_from_fragments_and_bounded() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&3u32.to_be_bytes());
        wire.extend_from_slice(b"abc");
        wire.extend_from_slice(&record_mark(2));
        wire.extend_from_slice(b"de");
        let budget: Budget = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
        let mut r = &wire[..];
        let (record, held) = read_record(&mut r, 5, &budget).await.unwrap().unwrap();
        assert_eq!(&record[..], b"abcde");
        assert_eq!(budget.available_permits(), 14, "1 KiB per fragment held");
        drop(held);
        assert_eq!(budget.available_permits(), 16);
        assert!(read_record(&mut r, 5, &budget).await.unwrap().is_none());
        let mut r = &wire[..];
        assert!(
            read_record(&mut r, 4, &budget).await.is_err(),
            "over the bound"
        );
        // A huge length, refused before anything is allocated.
        let huge = record_mark(0x7fff_ffff);
        assert!(read_record(&mut &huge[..], 1 << 20, &budget).await.is_err());
    }
}
