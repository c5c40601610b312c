//! Registration with the machine's portmapper (rpcbind), for when it holds
//! port 111 and this server's own portmapper (`portmap`) cannot answer
//! there: PMAP version 2 SET and UNSET (RFC 1833) over TCP to the local
//! host, as GlusterFS's NFS server registered (`nfs.register-with-portmap`).
//! Clients that ask port 111 (a kernel mount without `port=`, `showmount`)
//! then find NFS and MOUNT at the NFS server's port.

use crate::portmap::{Mapping, Portmap, PROGRAM};
use crate::xdr::{Reader, Writer};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Where the machine's portmapper is asked.
const AT: ([u8; 4], u16) = ([127, 0, 0, 1], crate::portmap::PORT);
/// How long one call may take.
const WITHIN: Duration = Duration::from_secs(5);

const SET: u32 = 1;
const UNSET: u32 = 2;

/// The programs of an NFS server at `port`, as the portmapper is told
/// them (the portmapper's own left out).
fn programs(port: u16) -> Vec<Mapping> {
    let mut maps = Portmap::new(port).maps;
    maps.retain(|m| m.prog != PROGRAM);
    maps
}

/// Tells the machine's portmapper that NFS and MOUNT are at `port`, in
/// place of whatever it held for them (a former server's registration).
pub fn register(port: u16) -> std::io::Result<()> {
    let mut s = connect()?;
    unregister_on(&mut s)?;
    for m in programs(port) {
        if !call(&mut s, SET, m)? {
            return Err(std::io::Error::other(format!(
                "the portmapper refused program {} version {}",
                m.prog, m.vers
            )));
        }
    }
    Ok(())
}

/// Takes NFS and MOUNT out of the machine's portmapper.
pub fn unregister() -> std::io::Result<()> {
    unregister_on(&mut connect()?)
}

fn unregister_on(s: &mut TcpStream) -> std::io::Result<()> {
    let mut done = Vec::new();
    for m in programs(0) {
        if !done.contains(&(m.prog, m.vers)) {
            // (False: nothing was registered.)
            call(s, UNSET, Mapping { proto: 0, ..m })?;
            done.push((m.prog, m.vers));
        }
    }
    Ok(())
}

fn connect() -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&SocketAddr::from(AT), WITHIN)?;
    s.set_read_timeout(Some(WITHIN))?;
    s.set_write_timeout(Some(WITHIN))?;
    Ok(s)
}

/// PMAP 2 procedure `proc_` on mapping `m`: the portmapper's yes or no.
fn call(s: &mut TcpStream, proc_: u32, m: Mapping) -> std::io::Result<bool> {
    let xid = fastrand::u32(..);
    let mut w = Writer::new();
    // CALL, RPC 2, PMAP 2, AUTH_NULL credential and verifier.
    w.u32(xid).u32(0).u32(2).u32(PROGRAM).u32(2).u32(proc_);
    w.u32(0).u32(0).u32(0).u32(0);
    w.u32(m.prog).u32(m.vers).u32(m.proto).u32(m.port as u32);
    let body = w.into_bytes();
    s.write_all(&crate::rpc::record_mark(body.len()))?;
    s.write_all(&body)?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head)?;
    let len = (u32::from_be_bytes(head) & !crate::rpc::LAST_FRAGMENT) as usize;
    if len > 4096 {
        return Err(garbled("an overlong reply"));
    }
    let mut reply = vec![0u8; len];
    s.read_exact(&mut reply)?;
    answer(xid, reply.into()).ok_or_else(|| garbled("a reply it could not read"))
}

/// The result a reply to call `xid` carries, if it is an accepted,
/// successful reply to that call.
fn answer(xid: u32, reply: bytes::Bytes) -> Option<bool> {
    let mut r = Reader::new(reply);
    let (got, mtype, stat) = (r.u32().ok()?, r.u32().ok()?, r.u32().ok()?);
    if got != xid || mtype != 1 || stat != 0 {
        return None;
    }
    let _verifier = (r.u32().ok()?, r.opaque(400).ok()?);
    if r.u32().ok()? != 0 {
        return None;
    }
    r.bool().ok()
}

fn garbled(what: &str) -> std::io::Error {
    std::io::Error::other(format!("the portmapper at port 111 sent {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_nfs_and_mount_at_the_port() {
        let maps = programs(2049);
        assert!(maps.iter().all(|m| m.port == 2049 && m.prog != PROGRAM));
        assert!(maps.iter().any(|m| m.prog == 100003 && m.vers == 3));
        assert!(maps.iter().any(|m| m.prog == 100005 && m.vers == 3));
    }

    #[test]
    fn only_an_accepted_reply_to_the_call_is_an_answer() {
        let reply = |xid: u32, stat: u32, accept: u32| {
            let mut w = Writer::new();
            w.u32(xid)
                .u32(1)
                .u32(stat)
                .u32(0)
                .u32(0)
                .u32(accept)
                .bool(true);
            w.into_bytes()
        };
        assert_eq!(answer(7, reply(7, 0, 0)), Some(true));
        assert_eq!(answer(7, reply(8, 0, 0)), None);
        assert_eq!(answer(7, reply(7, 1, 0)), None);
        assert_eq!(answer(7, reply(7, 0, 1)), None);
        assert_eq!(answer(7, bytes::Bytes::from_static(&[0, 0])), None);
    }
}
