//! The portmapper (RFC 1833: PMAP version 2, RPCBIND versions 3 and 4)
//! for this server's own programs, so that clients find NFS and MOUNT
//! without being told their port: `showmount -e HOST`, a kernel mount
//! without `port=`/`mountport=`, libnfs's URLs without `nfsport`.
//!
//! It answers only for what this process serves: NFS 3 and MOUNT 1 to 3
//! over TCP at the NFS port, and itself. Registrations from others
//! (SET, UNSET) are refused: it is not the machine's rpcbind, which,
//! when it runs, holds port 111 instead (docs/nfs.md).

use crate::rpc::{self, Accept, Call};
use crate::xdr::{self, Writer};
use bytes::Bytes;
use std::net::IpAddr;

pub const PROGRAM: u32 = 100000;
pub const PORT: u16 = 111;
/// PMAP 2, RPCBIND 3 and 4.
pub const VERSIONS: (u32, u32) = (2, 4);

const TCP: u32 = 6;
const UDP: u32 = 17;
/// The longest netid, address or owner string decoded.
const MAX_STRING: usize = 256;

/// One program's version at a port (PMAP's `mapping`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub prog: u32,
    pub vers: u32,
    pub proto: u32,
    pub port: u16,
}

/// The programs of the NFS server at `port`.
pub struct Portmap {
    pub(crate) maps: Vec<Mapping>,
}

impl Portmap {
    pub fn new(nfs_port: u16) -> Portmap {
        let mut maps = Vec::new();
        for vers in VERSIONS.0..=VERSIONS.1 {
            for proto in [TCP, UDP] {
                maps.push(Mapping {
                    prog: PROGRAM,
                    vers,
                    proto,
                    port: PORT,
                });
            }
        }
        maps.push(Mapping {
            prog: crate::nfs3::PROGRAM,
            vers: crate::nfs3::VERSION,
            proto: TCP,
            port: nfs_port,
        });
        for vers in crate::mount::VERSIONS.0..=crate::mount::VERSIONS.1 {
            maps.push(Mapping {
                prog: crate::mount::PROGRAM,
                vers,
                proto: TCP,
                port: nfs_port,
            });
        }
        Portmap { maps }
    }

    /// The reply to `call`, which arrived at address `at`: the address
    /// RPCBIND's answers give for this server.
    pub fn answer(&self, mut call: Call, at: IpAddr) -> Bytes {
        let xid = call.xid;
        if call.prog != PROGRAM {
            return rpc::accepted(xid, Accept::ProgUnavail).into_bytes();
        }
        if !(VERSIONS.0..=VERSIONS.1).contains(&call.vers) {
            return rpc::prog_mismatch(xid, VERSIONS.0, VERSIONS.1);
        }
        let args = &mut call.args;
        let body = if call.vers == 2 {
            self.pmap(call.proc_, args)
        } else {
            self.rpcbind(call.vers, call.proc_, args, at)
        };
        match body {
            None => rpc::accepted(xid, Accept::ProcUnavail).into_bytes(),
            Some(Err(xdr::Garbage)) => rpc::accepted(xid, Accept::GarbageArgs).into_bytes(),
            Some(Ok(w)) => {
                let mut out = rpc::accepted(xid, Accept::Success);
                out.fixed(&w.into_bytes());
                out.into_bytes()
            }
        }
    }

    /// PMAP version 2.
    fn pmap(&self, proc_: u32, args: &mut xdr::Reader) -> Option<xdr::Result<Writer>> {
        let mut w = Writer::new();
        match proc_ {
            0 => {}
            // SET, UNSET: refused.
            1 | 2 => {
                w.bool(false);
            }
            3 => {
                let found = (|| -> xdr::Result<u32> {
                    let (prog, vers, proto) = (args.u32()?, args.u32()?, args.u32()?);
                    let _port = args.u32()?;
                    Ok(self
                        .maps
                        .iter()
                        .find(|m| (m.prog, m.vers, m.proto) == (prog, vers, proto))
                        .map_or(0, |m| m.port as u32))
                })();
                match found {
                    Ok(port) => w.u32(port),
                    Err(e) => return Some(Err(e)),
                };
            }
            4 => {
                for m in &self.maps {
                    w.bool(true);
                    w.u32(m.prog).u32(m.vers).u32(m.proto).u32(m.port as u32);
                }
                w.bool(false);
            }
            _ => return None,
        }
        Some(Ok(w))
    }

    /// RPCBIND versions 3 and 4.
    fn rpcbind(
        &self,
        vers: u32,
        proc_: u32,
        args: &mut xdr::Reader,
        at: IpAddr,
    ) -> Option<xdr::Result<Writer>> {
        let mut w = Writer::new();
        match proc_ {
            0 => {}
            1 | 2 => {
                w.bool(false);
            }
            // GETADDR; version 4's GETVERSADDR asks the same here, as
            // each program's versions are listed one by one.
            3 | 9 if proc_ == 3 || vers == 4 => {
                let asked = (|| -> xdr::Result<_> {
                    let (prog, vers) = (args.u32()?, args.u32()?);
                    let netid = args.opaque(MAX_STRING)?;
                    let _addr = args.opaque(MAX_STRING)?;
                    let _owner = args.opaque(MAX_STRING)?;
                    Ok((prog, vers, netid))
                })();
                let (prog, vers, netid) = match asked {
                    Ok(a) => a,
                    Err(e) => return Some(Err(e)),
                };
                let found = self.maps.iter().find(|m| {
                    (m.prog, m.vers) == (prog, vers) && *netid == *netid_of(m.proto, at).as_bytes()
                });
                let uaddr = found.map_or(String::new(), |m| uaddr(at, m.port));
                w.opaque(uaddr.as_bytes());
            }
            4 => {
                for m in &self.maps {
                    w.bool(true);
                    w.u32(m.prog).u32(m.vers);
                    w.opaque(netid_of(m.proto, at).as_bytes());
                    w.opaque(uaddr(at, m.port).as_bytes());
                    w.opaque(b"superuser");
                }
                w.bool(false);
            }
            // GETTIME.
            6 => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as u32);
                w.u32(now);
            }
            _ => return None,
        }
        Some(Ok(w))
    }
}

/// RPCBIND's name for a transport at an address of `at`'s family.
fn netid_of(proto: u32, at: IpAddr) -> &'static str {
    match (proto, at.is_ipv6()) {
        (TCP, false) => "tcp",
        (TCP, true) => "tcp6",
        (_, false) => "udp",
        (_, true) => "udp6",
    }
}

/// A universal address (RFC 1833): the address, then the port's two
/// bytes, dotted.
fn uaddr(at: IpAddr, port: u16) -> String {
    format!("{at}.{}.{}", port >> 8, port & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdr::Reader;

    fn call(vers: u32, proc_: u32, args: Writer) -> Call {
        let mut w = Writer::new();
        w.u32(7).u32(0).u32(2).u32(PROGRAM).u32(vers).u32(proc_);
        w.u32(0).u32(0).u32(0).u32(0);
        w.fixed(&args.into_bytes());
        rpc::parse_call(w.into_bytes()).ok().unwrap()
    }

    /// The results of a successful reply.
    fn results(reply: Bytes) -> Reader {
        let mut r = Reader::new(reply);
        let head: Vec<u32> = (0..6).map(|_| r.u32().unwrap()).collect();
        assert_eq!(head, [7, 1, 0, 0, 0, 0]);
        r
    }

    const AT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 2, 3));

    #[test]
    fn getport_names_nfs_and_mount_over_tcp_and_nothing_else() {
        let pm = Portmap::new(2049);
        let port = |prog, vers, proto| {
            let mut a = Writer::new();
            a.u32(prog).u32(vers).u32(proto).u32(0);
            results(pm.answer(call(2, 3, a), AT)).u32().unwrap()
        };
        assert_eq!(port(100003, 3, TCP), 2049);
        assert_eq!(port(100005, 1, TCP), 2049);
        assert_eq!(port(100005, 3, TCP), 2049);
        assert_eq!(port(100000, 2, UDP), 111);
        // Not served: NFS over UDP, NFS 4, NLM.
        assert_eq!(port(100003, 3, UDP), 0);
        assert_eq!(port(100003, 4, TCP), 0);
        assert_eq!(port(100021, 4, TCP), 0);
    }

    #[test]
    fn getaddr_gives_universal_addresses_at_the_address_asked() {
        let pm = Portmap::new(2049);
        let addr = |vers, proc_, prog, netid: &str, at| {
            let mut a = Writer::new();
            a.u32(prog)
                .u32(3)
                .opaque(netid.as_bytes())
                .opaque(b"")
                .opaque(b"");
            let mut r = results(pm.answer(call(vers, proc_, a), at));
            String::from_utf8(r.opaque(64).unwrap().to_vec()).unwrap()
        };
        assert_eq!(addr(3, 3, 100003, "tcp", AT), "10.1.2.3.8.1");
        assert_eq!(addr(4, 9, 100005, "tcp", AT), "10.1.2.3.8.1");
        assert_eq!(addr(4, 3, 100003, "udp", AT), "");
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(addr(4, 3, 100003, "tcp6", v6), "fd00::1.8.1");
        // Version 3 has no GETVERSADDR.
        let mut a = Writer::new();
        a.u32(1);
        let reply = pm.answer(call(3, 9, a), AT);
        assert_eq!(
            &reply[..],
            &rpc::accepted(7, Accept::ProcUnavail).into_bytes()[..]
        );
    }

    #[test]
    fn dumps_list_every_mapping_and_registrations_are_refused() {
        let pm = Portmap::new(2049);
        let mut r = results(pm.answer(call(2, 4, Writer::new()), AT));
        let mut maps = Vec::new();
        while r.bool().unwrap() {
            let m: Vec<u32> = (0..4).map(|_| r.u32().unwrap()).collect();
            maps.push(m);
        }
        assert_eq!(maps.len(), pm.maps.len());
        assert!(maps.contains(&vec![100003, 3, TCP, 2049]));
        let mut r = results(pm.answer(call(4, 4, Writer::new()), AT));
        assert!(r.bool().unwrap());
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (PROGRAM, 2));
        assert_eq!(&r.opaque(64).unwrap()[..], b"tcp");
        assert_eq!(&r.opaque(64).unwrap()[..], b"10.1.2.3.0.111");
        let mut set = Writer::new();
        set.u32(100021).u32(4).u32(TCP).u32(4045);
        assert!(!results(pm.answer(call(2, 1, set), AT)).bool().unwrap());
    }

    #[test]
    fn bad_calls_get_rpc_errors() {
        let pm = Portmap::new(2049);
        let reply = pm.answer(call(5, 0, Writer::new()), AT);
        assert_eq!(reply, rpc::prog_mismatch(7, 2, 4));
        // GETPORT cut short.
        let mut a = Writer::new();
        a.u32(100003);
        let reply = pm.answer(call(2, 3, a), AT);
        assert_eq!(reply, rpc::accepted(7, Accept::GarbageArgs).into_bytes());
        let reply = pm.answer(call(2, 5, Writer::new()), AT);
        assert_eq!(reply, rpc::accepted(7, Accept::ProcUnavail).into_bytes());
    }
}
