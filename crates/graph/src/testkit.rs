//! Graphs over bricks that are the real brick stack in memory
//! (`crate::stacked`), built like a mount's (same table, same factories,
//! same links): the seam where the cluster translators are unit-tested
//! without FUSE, network or processes.

use super::{Env, Graph};
use crate::stacked::StackBrick;
use mortar_core::desc::{VolDesc, XlDesc};
use mortar_core::{Ctx, Fop, FsResult, Gfid, Name, Reply};
use std::sync::Arc;

pub struct Rig {
    pub graph: Graph,
    pub bricks: Vec<Arc<StackBrick>>,
}

/// `sets` replica sets of `replica` bricks each under distribute (plain
/// distribute when `replica` is 1), with every option at its default.
pub fn rig(sets: usize, replica: usize) -> Rig {
    Rig::over(&test_bricks(sets * replica), sets, replica)
}

/// A graph (a client) over bricks that exist already.
pub fn graph_over(bricks: &[Arc<StackBrick>], sets: usize, replica: usize) -> Graph {
    assert_eq!(bricks.len(), sets * replica);
    Graph::build(&desc_over(sets, replica), &env_over(bricks)).expect("test graph builds")
}

/// The description of `sets` replica sets of `replica` bricks each under
/// distribute, every option at its default; brick `i` is on host `h<i>`.
pub fn desc_over(sets: usize, replica: usize) -> VolDesc {
    let leaves: Vec<XlDesc> = (0..sets * replica)
        .map(|i| {
            XlDesc::new("protocol/client", format!("t-client-{i}"), vec![])
                .with("index", i.to_string())
                .with("host", format!("h{i}"))
        })
        .collect();
    let below = if replica > 1 {
        leaves
            .chunks(replica)
            .enumerate()
            .map(|(i, c)| XlDesc::new("cluster/replicate", format!("t-replicate-{i}"), c.to_vec()))
            .collect()
    } else {
        leaves
    };
    VolDesc {
        volume: "t".into(),
        id: "t".into(),
        version: 1,
        options: crate::table::all_options()
            .map(|s| (s.key.to_string(), s.default.to_string()))
            .collect(),
        top: XlDesc::new("cluster/distribute", "t-dht".into(), below),
        clients: Vec::new(),
        pool: Vec::new(),
        retired: Vec::new(),
    }
}

/// `sets` disperse sets of `k + r` bricks each under distribute.
pub fn desc_disperse(sets: usize, k: usize, r: usize) -> VolDesc {
    let mut d = desc_over(sets * (k + r), 1);
    let leaves = std::mem::take(&mut d.top.children);
    d.top.children = leaves
        .chunks(k + r)
        .enumerate()
        .map(|(i, c)| {
            XlDesc::new("cluster/disperse", format!("t-disperse-{i}"), c.to_vec())
                .with("data", k.to_string())
                .with("redundancy", r.to_string())
        })
        .collect();
    d
}

/// `desc_over` for `sets` sets of one brick whose layout commit is
/// `commit`: a volume whose set list changed since it was made.
pub fn desc_grown(sets: usize, commit: u64) -> VolDesc {
    let mut d = desc_over(sets, 1);
    d.top = d.top.with("layout-commit", commit.to_string());
    d
}

/// `count` bricks (the real stack, in memory) named b0, b1, ...
pub fn test_bricks(count: usize) -> Vec<Arc<StackBrick>> {
    (0..count)
        .map(|i| StackBrick::new(&format!("b{i}"), false))
        .collect()
}

/// Connects a description's bricks (`index`) to `bricks`.
pub fn env_over(bricks: &[Arc<StackBrick>]) -> Env {
    let b = bricks.to_vec();
    Env {
        connect: Arc::new(move |d: &XlDesc, link| {
            let i: usize = d.param("index").unwrap_or("0").parse()?;
            Ok(b[i].connect(link))
        }),
    }
}

pub fn n(s: &str) -> Name {
    Name::new(s.as_bytes().to_vec()).unwrap()
}

impl Rig {
    /// A client of `sets` replica sets over bricks that exist already.
    pub fn over(bricks: &[Arc<StackBrick>], sets: usize, replica: usize) -> Rig {
        Rig {
            graph: graph_over(bricks, sets, replica),
            bricks: bricks.to_vec(),
        }
    }

    /// A client of `sets` disperse sets of `k + r` bricks each, over new
    /// bricks.
    pub fn disperse(sets: usize, k: usize, r: usize) -> Rig {
        let bricks = test_bricks(sets * (k + r));
        let desc = desc_disperse(sets, k, r);
        Rig {
            graph: Graph::build(&desc, &env_over(&bricks)).expect("test graph builds"),
            bricks,
        }
    }

    /// A client of a distribute volume of `bricks` with layout commit
    /// `commit` (`desc_grown`).
    pub fn grown(bricks: &[Arc<StackBrick>], commit: u64) -> Rig {
        let desc = desc_grown(bricks.len(), commit);
        Rig {
            graph: Graph::build(&desc, &env_over(bricks)).expect("test graph builds"),
            bricks: bricks.to_vec(),
        }
    }

    pub async fn call(&self, fop: Fop) -> FsResult<Reply> {
        self.graph.top().call(&Ctx::root(), fop).await
    }

    /// Makes a directory under `parent` (mode 0755); returns its gfid.
    pub async fn mkdir(&self, parent: Gfid, name: &str) -> FsResult<Gfid> {
        let gfid = Gfid::random();
        self.call(Fop::Mkdir {
            parent,
            name: n(name),
            gfid,
            mode: 0o755,
            umask: 0,
        })
        .await?;
        Ok(gfid)
    }

    /// Requests the bricks have answered so far, all together.
    pub fn calls(&self) -> u64 {
        self.bricks.iter().map(|b| b.calls()).sum()
    }

    /// Creates a file under `parent` with `data`; returns its gfid.
    pub async fn create(&self, parent: Gfid, name: &str, data: &[u8]) -> FsResult<Gfid> {
        let gfid = Gfid::random();
        let fh = self
            .call(Fop::Create {
                parent,
                name: n(name),
                gfid,
                mode: 0o644,
                umask: 0o022,
                flags: libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            })
            .await?
            .into_fh()?;
        if !data.is_empty() {
            self.call(Fop::Write {
                gfid,
                fh,
                offset: 0,
                data: bytes::Bytes::copy_from_slice(data),
                grow: 0,
                reserve: false,
            })
            .await?;
        }
        self.call(Fop::Release { gfid, fh }).await?;
        Ok(gfid)
    }

    /// Overwrites `gfid` from `offset` through a handle of its own.
    pub async fn write(&self, gfid: Gfid, offset: u64, data: &[u8]) -> FsResult<()> {
        let fh = self
            .call(Fop::Open {
                gfid,
                flags: libc::O_WRONLY,
            })
            .await?
            .into_fh()?;
        let r = self
            .call(Fop::Write {
                gfid,
                fh,
                offset,
                data: bytes::Bytes::copy_from_slice(data),
                grow: 0,
                reserve: false,
            })
            .await;
        self.call(Fop::Release { gfid, fh }).await?;
        r.map(|_| ())
    }

    /// The whole content of `gfid`, read through the graph.
    pub async fn read(&self, gfid: Gfid) -> FsResult<Vec<u8>> {
        let fh = self
            .call(Fop::Open {
                gfid,
                flags: libc::O_RDONLY,
            })
            .await?
            .into_fh()?;
        let r = self
            .call(Fop::Read {
                gfid,
                fh,
                offset: 0,
                size: 1 << 20,
            })
            .await;
        self.call(Fop::Release { gfid, fh }).await?;
        match r? {
            Reply::Data(d) => Ok(d.to_vec()),
            other => Err(mortar_core::fop::unexpected(other)),
        }
    }

    /// Every name in directory `dir`, read through the graph.
    pub async fn list(&self, dir: Gfid) -> FsResult<Vec<String>> {
        let fh = self.call(Fop::Opendir { gfid: dir }).await?.into_fh()?;
        let mut out = Vec::new();
        let mut offset = 0;
        loop {
            let Reply::Entries(ents) = self
                .call(Fop::Readdir {
                    gfid: dir,
                    fh,
                    offset,
                    plus: false,
                })
                .await?
            else {
                break;
            };
            let Some(last) = ents.last() else { break };
            offset = last.next;
            out.extend(
                ents.iter()
                    .map(|e| String::from_utf8_lossy(&e.name).into_owned()),
            );
        }
        self.call(Fop::Releasedir { gfid: dir, fh }).await?;
        Ok(out)
    }
}

/// The errno of a result that must be an error.
pub fn errno<T: std::fmt::Debug>(r: mortar_core::FsResult<T>) -> i32 {
    r.expect_err("expected an error").errno
}

/// `count` seeds for a model test, from `MORTAR_MODEL_SEED` (1 unless set).
pub fn model_seeds(count: u64) -> std::ops::Range<u64> {
    let base = std::env::var("MORTAR_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    base..base + count
}

/// Opens `gfid` for writing through the rig's graph: one handle kept
/// across bricks going down and coming back, as an application's fd.
pub async fn open_for_writing(r: &Rig, gfid: Gfid) -> u64 {
    r.call(Fop::Open {
        gfid,
        flags: libc::O_RDWR,
    })
    .await
    .unwrap()
    .into_fh()
    .unwrap()
}

pub async fn write_at(r: &Rig, gfid: Gfid, fh: u64, offset: usize, data: &[u8]) -> FsResult<()> {
    r.call(Fop::Write {
        gfid,
        fh,
        offset: offset as u64,
        data: bytes::Bytes::copy_from_slice(data),
        grow: 0,
        reserve: false,
    })
    .await
    .map(|_| ())
}

/// A file written "aaaa", then "bbbb" while brick 0 was down (it stays
/// down): its handle open for writing.
pub async fn written_while_brick_0_was_down(r: &Rig) -> (Gfid, u64) {
    let f = r.create(Gfid::ROOT, "f", b"").await.unwrap();
    let fh = open_for_writing(r, f).await;
    write_at(r, f, fh, 0, b"aaaa").await.unwrap();
    r.bricks[0].set_down(true);
    write_at(r, f, fh, 4, b"bbbb").await.unwrap();
    (f, fh)
}
