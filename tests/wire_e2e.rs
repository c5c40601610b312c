//! A brick faced with hostile or broken peers: every bad message costs the
//! sender its connection, never a byte of data, and the brick goes on
//! serving everyone else.

mod common;
use common::*;
use mortar::core::{Ctx, Fop, Gfid, Name};
use mortar::protocol::wire::{self, Msg};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn closed(mut s: TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn frame(msg: &Msg) -> Vec<u8> {
    wire::encode(msg).to_vec()
}

fn read_msg(s: &mut TcpStream) -> Msg {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    wire::decode(bytes::Bytes::from(body)).unwrap()
}

#[test]
fn hostile_messages_cost_a_connection_and_nothing_else() {
    let c = Cluster::start();
    let bricks = c.volume("hw", 1, &["h1"]);
    let m = c.mount("hw");
    ok(&format!("echo keep > {}", m.p("keep")));
    let st = c.volume_status_json("hw");
    let port = st[0]["bricks"][0]["port"].as_u64().unwrap();
    let addr = format!("{}:{port}", c.ip);
    let brick_path = bricks[0].display().to_string();
    let hello = |brick: &str| {
        frame(&Msg::Hello {
            magic: wire::MAGIC,
            version: wire::VERSION,
            brick: brick.into(),
        })
    };

    // Garbage instead of a handshake.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert!(closed(s));

    // A frame that claims to be huge.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&u32::MAX.to_be_bytes()).unwrap();
    assert!(closed(s));

    // The wrong brick, and the wrong protocol version, are refused with a reason.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&hello("/etc")).unwrap();
    assert!(matches!(read_msg(&mut s), Msg::Refused { reason } if reason.contains("exports")));
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&frame(&Msg::Hello {
        magic: wire::MAGIC,
        version: 99,
        brick: brick_path.clone(),
    }))
    .unwrap();
    assert!(matches!(read_msg(&mut s), Msg::Refused { reason } if reason.contains("version")));

    // After a good handshake: a name with "..", smuggled past the encoder.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&hello(&brick_path)).unwrap();
    assert!(matches!(read_msg(&mut s), Msg::Welcome { .. }));
    let mut evil = frame(&Msg::Call {
        id: 1,
        cx: Ctx::root(),
        fop: Fop::Unlink {
            parent: Gfid::ROOT,
            name: Name::new(&b"xxkeep"[..]).unwrap(),
        },
    });
    let at = evil.windows(6).position(|w| w == b"xxkeep").unwrap();
    evil[at..at + 3].copy_from_slice(b"../");
    s.write_all(&evil).unwrap();
    assert!(closed(s));

    // Well-formed requests for objects that do not exist get errors, not data.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&hello(&brick_path)).unwrap();
    assert!(matches!(read_msg(&mut s), Msg::Welcome { .. }));
    s.write_all(&frame(&Msg::Call {
        id: 7,
        cx: Ctx::root(),
        fop: Fop::Getattr {
            gfid: Gfid::random(),
        },
    }))
    .unwrap();
    s.write_all(&frame(&Msg::Call {
        id: 8,
        cx: Ctx::root(),
        fop: Fop::Read {
            gfid: Gfid::ROOT,
            fh: 12345,
            offset: 0,
            size: 10,
        },
    }))
    .unwrap();
    for _ in 0..2 {
        match read_msg(&mut s) {
            Msg::Answer {
                id: 7,
                result: Err(e),
            } => assert_eq!(e.errno, libc::ESTALE),
            Msg::Answer {
                id: 8,
                result: Err(e),
            } => assert_eq!(e.errno, libc::EBADF),
            other => panic!("{other:?}"),
        }
    }

    // The brick still serves the mount, and the data is as it was.
    assert_eq!(ok(&format!("cat {}", m.p("keep"))), "keep\n");
    assert_eq!(
        std::fs::read_to_string(bricks[0].join("keep")).unwrap(),
        "keep\n"
    );
    assert!(c.volume_status_json("hw")[0]["bricks"][0]["online"] == true);
}
