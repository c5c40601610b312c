//! Fuzzing by property (docs/security.md): inputs grown by random
//! mutations from the corpus in `tests/fuzz/` (valid frames of the brick
//! protocol, management request lines, names) are fed to the brick
//! protocol's decoder, the management daemon's line reader and request
//! parser, and name validation. None may panic or hang, and what each
//! accepts must keep its promises (a name never leaves its directory).
//!
//! A short run is part of every `cargo test`; a long one by hand:
//!
//!     FUZZ_CASES=200000 cargo test --release --test fuzz
//!
//! An input that fails is shrunk by proptest and kept in
//! `tests/fuzz.proptest-regressions`, which is run first every time;
//! `cargo test --test fuzz -- --ignored` writes the corpus again from the
//! messages below.

use bytes::Bytes;
use mortar::core::{Ctx, Fop, FsError, Gfid, Name, Reply};
use mortar::mgmt::rpc::{self, Request};
use mortar::protocol::wire::{self, Msg};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn corpus_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(kind)
}

/// The corpus of one kind: every file of its directory.
fn corpus(kind: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir(kind))
        .unwrap_or_else(|e| panic!("tests/fuzz/{kind}: {e}"))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let out: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!out.is_empty(), "tests/fuzz/{kind} is empty");
    out
}

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

/// One change to an input. Positions are taken modulo the input's length
/// when applied.
#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    Truncate(usize),
    /// A 32-bit big-endian value (frame and header lengths) or
    /// little-endian one written over the input.
    Word(usize, u32, bool),
    /// A span repeated.
    Repeat(usize, usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let words = prop_oneof![
        Just(0u32),
        Just(u32::MAX),
        Just(1 << 24),
        Just(17 << 20),
        Just(0x7fff_ffff),
        any::<u32>()
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1..64usize).prop_map(|(i, n)| Mutation::Remove(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), words, any::<bool>()).prop_map(|(i, w, be)| Mutation::Word(i, w, be)),
        (any::<usize>(), 1..32usize, 1..8u8).prop_map(|(i, n, k)| Mutation::Repeat(i, n, k)),
    ]
}

impl Mutation {
    fn apply(&self, b: &mut Vec<u8>) {
        let at = |i: usize, b: &Vec<u8>| if b.is_empty() { 0 } else { i % b.len() };
        match self {
            Mutation::Flip(i, x) if !b.is_empty() => {
                let i = at(*i, b);
                b[i] ^= x | 1;
            }
            Mutation::Insert(i, bytes) => {
                let i = at(*i, b);
                b.splice(i..i, bytes.iter().copied());
            }
            Mutation::Remove(i, n) if !b.is_empty() => {
                let i = at(*i, b);
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            Mutation::Truncate(i) => {
                let i = at(*i, b);
                b.truncate(i);
            }
            Mutation::Word(i, w, be) if b.len() >= 4 => {
                let i = at(*i, b).min(b.len() - 4);
                let w = if *be {
                    w.to_be_bytes()
                } else {
                    w.to_le_bytes()
                };
                b[i..i + 4].copy_from_slice(&w);
            }
            Mutation::Repeat(i, n, k) if !b.is_empty() => {
                let i = at(*i, b);
                let span: Vec<u8> = b[i..(i + n).min(b.len())].to_vec();
                for _ in 0..*k {
                    b.splice(i..i, span.iter().copied());
                }
            }
            _ => {}
        }
    }
}

/// An input of the corpus `kind`, mutated up to eight times.
fn mutated(kind: &str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = corpus(kind);
    (0..seeds.len(), proptest::collection::vec(mutation(), 0..8)).prop_map(move |(i, ms)| {
        let mut b = seeds[i].clone();
        for m in &ms {
            m.apply(&mut b);
        }
        b
    })
}

/// A name the brick may use: it cannot leave the directory it is in.
fn name_is_safe(b: &[u8]) -> bool {
    !b.is_empty()
        && b != b"."
        && b != b".."
        && b.len() <= mortar::core::fop::NAME_MAX
        && !b.contains(&b'/')
        && !b.contains(&0)
}

/// Every name a decoded request carries.
fn names_of(fop: &Fop) -> Vec<&Name> {
    match fop {
        Fop::Lookup { name, .. }
        | Fop::Mknod { name, .. }
        | Fop::Create { name, .. }
        | Fop::Mkdir { name, .. }
        | Fop::Unlink { name, .. }
        | Fop::Rmdir { name, .. }
        | Fop::Symlink { name, .. } => vec![name],
        Fop::Rename { name, newname, .. } => vec![name, newname],
        Fop::Link { newname, .. } => vec![newname],
        _ => vec![],
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    /// The brick protocol: a frame as a brick reads it from a connection,
    /// and a body as it decodes it.
    #[test]
    fn the_wire_decoder_takes_any_bytes(input in mutated("wire")) {
        let rt = runtime();
        for limit in [wire::MAX_HELLO, wire::MAX_FRAME] {
            let mut r = &input[..];
            let read = rt.block_on(wire::read_frame_within(&mut r, limit));
            if let Ok(Some(Msg::Call { fop, .. })) = &read {
                for n in names_of(fop) {
                    prop_assert!(name_is_safe(n.as_bytes()), "{n:?}");
                }
            }
        }
        if input.len() >= 4 {
            if let Ok(Msg::Call { fop, .. }) = wire::decode(Bytes::copy_from_slice(&input[4..])) {
                for n in names_of(&fop) {
                    prop_assert!(name_is_safe(n.as_bytes()), "{n:?}");
                }
                // What was accepted encodes again.
                let _ = wire::encode(&Msg::Call { id: 1, cx: Ctx::root(), fop });
            }
        }
    }

    /// The management daemon: a request line as it reads and parses it.
    #[test]
    fn the_management_parser_takes_any_line(input in mutated("mgmt")) {
        let rt = runtime();
        let mut r = tokio::io::BufReader::new(&input[..]);
        let line = rt.block_on(rpc::read_line_within(&mut r, 4096, std::time::Duration::from_secs(1)));
        if let Ok(Some(line)) = line {
            prop_assert!(line.len() <= 4096);
            let _ = serde_json::from_str::<Request>(&line);
        }
        let _ = serde_json::from_slice::<Request>(&input);
    }

    /// Names: accepted only when they stay in their directory, whether made
    /// directly or decoded off the wire.
    #[test]
    fn names_never_leave_their_directory(input in mutated("names")) {
        let made = Name::new(input.clone());
        prop_assert_eq!(made.is_ok(), name_is_safe(&input), "{:?}", input);
        let encoded = postcard::to_allocvec(&serde_bytes::ByteBuf::from(input.clone())).unwrap();
        let decoded: Result<Name, _> = postcard::from_bytes(&encoded);
        prop_assert_eq!(decoded.is_ok(), name_is_safe(&input));
    }
}

/// Writes the corpus again from the messages below (run by hand when the
/// protocol changes: `cargo test --test fuzz -- --ignored`).
#[test]
#[ignore]
fn write_the_corpus() {
    let n = |s: &str| Name::new(s).unwrap();
    let g = Gfid::ROOT;
    let child = Gfid::random();
    let calls = vec![
        Fop::Lookup {
            parent: g,
            name: n("file.txt"),
        },
        Fop::Getattr { gfid: child },
        Fop::Create {
            parent: g,
            name: n("new"),
            gfid: child,
            mode: 0o100644,
            umask: 0o022,
            flags: libc::O_RDWR,
        },
        Fop::Mkdir {
            parent: g,
            name: n("dir"),
            gfid: child,
            mode: 0o40755,
            umask: 0o022,
        },
        Fop::Rename {
            parent: g,
            name: n("a"),
            newparent: child,
            newname: n("b"),
            flags: 0,
        },
        Fop::Symlink {
            parent: g,
            name: n("link"),
            gfid: child,
            target: serde_bytes::ByteBuf::from(b"../target".to_vec()),
        },
        Fop::Open {
            gfid: child,
            flags: libc::O_RDONLY,
        },
        Fop::Read {
            gfid: child,
            fh: 7,
            offset: 4096,
            size: 131072,
        },
        Fop::Write {
            gfid: child,
            fh: 7,
            offset: 0,
            data: Bytes::from_static(b"hello, bricks"),
            grow: 0,
            reserve: false,
        },
        Fop::Readdir {
            gfid: g,
            fh: 3,
            offset: 0,
            plus: true,
        },
        Fop::Setxattr {
            gfid: child,
            name: "user.k".into(),
            value: serde_bytes::ByteBuf::from(b"v".to_vec()),
            flags: 0,
        },
        Fop::Lock {
            gfid: child,
            wait: true,
            mark: Some(1),
        },
    ];
    let mut msgs: Vec<Msg> = vec![
        Msg::Hello {
            magic: wire::MAGIC,
            version: wire::VERSION,
            brick: "/data/brick1/gv0".into(),
            key: None,
        },
        Msg::Ping { id: 9 },
        Msg::Answer {
            id: 3,
            result: Err(FsError::new(libc::ENOENT, "no such file")),
        },
        Msg::Answer {
            id: 4,
            result: Ok(Reply::Data(Bytes::from_static(b"some data"))),
        },
    ];
    msgs.extend(calls.into_iter().enumerate().map(|(i, fop)| Msg::Call {
        id: i as u64 + 1,
        cx: Ctx::root(),
        fop,
    }));
    let write = |kind: &str, i: usize, bytes: &[u8]| {
        let d = corpus_dir(kind);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("{i:02}")), bytes).unwrap();
    };
    for (i, m) in msgs.iter().enumerate() {
        let f = wire::encode(m);
        write("wire", i, &[f.head.as_slice(), &f.payload].concat());
    }
    let requests = [
        Request::VolumeInfo {
            name: Some("gv0".into()),
        },
        Request::VolumeStop { name: "gv0".into() },
        Request::VolumeSet {
            name: "gv0".into(),
            key: "auth.allow".into(),
            value: "10.0.0.0/8".into(),
        },
        Request::GetVolDesc { name: "gv0".into() },
        Request::PeerProbe {
            host: "server2".into(),
            token: Some("00-11".into()),
        },
        Request::Portmap {
            path: "/data/brick1/gv0".into(),
        },
        Request::Fresh(Box::new(Request::PeerList)),
    ];
    for (i, r) in requests.iter().enumerate() {
        let mut line = serde_json::to_vec(r).unwrap();
        line.push(b'\n');
        write("mgmt", i, &line);
    }
    for (i, name) in [
        "file.txt",
        "..",
        ".",
        "a/b",
        "x".repeat(255).as_str(),
        "ünïcødé",
        ".hidden",
    ]
    .iter()
    .enumerate()
    {
        write("names", i, name.as_bytes());
    }
}
