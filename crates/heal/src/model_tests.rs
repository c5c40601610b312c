//! The reference-model test over the real brick stack: random runs of
//! changes from two clients in three directories (creates, writes,
//! renames, hard links, unlinks) while bricks go down and come back, one
//! at a time, each answer checked against a model of the file system;
//! then the real healer settles the bricks, and every copy and every
//! client must show what the model holds. proptest shrinks a failing run
//! to the fewest steps that still fail.

use crate::Healer;
use mortar_core::{Ctx, Fop, FsResult, Gfid, Reply};
use mortar_graph::stacked::{stack_bricks, stack_env, StackBrick};
use mortar_graph::testkit::{desc_over, n};
use mortar_graph::Graph;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const DIRS: usize = 3;
const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Clone, Debug)]
enum Step {
    Create {
        client: usize,
        dir: usize,
        name: usize,
    },
    Write {
        client: usize,
        dir: usize,
        name: usize,
        block: u64,
        byte: u8,
    },
    Rename {
        client: usize,
        from: (usize, usize),
        to: (usize, usize),
    },
    Link {
        client: usize,
        from: (usize, usize),
        to: (usize, usize),
    },
    Unlink {
        client: usize,
        dir: usize,
        name: usize,
    },
    Down(usize),
    Up,
    Heal,
}

fn place() -> impl Strategy<Value = (usize, usize)> {
    (0..DIRS, 0..NAMES.len())
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..2usize, place()).prop_map(|(client, (dir, name))| Step::Create { client, dir, name }),
        3 => (0..2usize, place(), 0..3u64, any::<u8>()).prop_map(|(client, (dir, name), block, byte)| {
            Step::Write { client, dir, name, block, byte }
        }),
        2 => (0..2usize, place(), place()).prop_map(|(client, from, to)| Step::Rename { client, from, to }),
        1 => (0..2usize, place(), place()).prop_map(|(client, from, to)| Step::Link { client, from, to }),
        1 => (0..2usize, place()).prop_map(|(client, (dir, name))| Step::Unlink { client, dir, name }),
        1 => (0..3usize).prop_map(Step::Down),
        1 => Just(Step::Up),
        1 => Just(Step::Heal),
    ]
}

/// What the file system should hold: each directory's names, each
/// file's data.
#[derive(Default)]
struct Model {
    names: BTreeMap<(usize, usize), Gfid>,
    data: BTreeMap<Gfid, Vec<u8>>,
}

struct World {
    bricks: Vec<Arc<StackBrick>>,
    clients: Vec<Graph>,
    dirs: Vec<Gfid>,
    down: Option<usize>,
    /// A brick back from down and not healed since.
    unhealed: bool,
    model: Model,
}

async fn call(g: &Graph, fop: Fop) -> FsResult<Reply> {
    g.top().call(&Ctx::root(), fop).await
}

fn errno(r: FsResult<Reply>) -> i32 {
    r.err().map_or(0, |e| e.errno)
}

impl World {
    async fn new() -> World {
        let bricks = stack_bricks(3);
        let mut clients = Vec::new();
        for _ in 0..2 {
            let g = Graph::build(&desc_over(1, 3), &stack_env(&bricks)).unwrap();
            assert_eq!(g.wait_up(Duration::from_secs(3)).await, 3);
            clients.push(g);
        }
        let mut dirs = vec![Gfid::ROOT];
        for d in 1..DIRS {
            let gfid = Gfid::random();
            let fop = Fop::Mkdir {
                parent: Gfid::ROOT,
                name: n(&format!("d{d}")),
                gfid,
                mode: 0o755,
                umask: 0,
            };
            call(&clients[0], fop).await.unwrap();
            dirs.push(gfid);
        }
        World {
            bricks,
            clients,
            dirs,
            down: None,
            unhealed: false,
            model: Model::default(),
        }
    }

    /// Runs one step, checking its answer against the model.
    async fn run(&mut self, s: &Step) -> Result<(), String> {
        match *s {
            Step::Down(i) => {
                // One brick down at a time, and the one before healed
                // first (a rolling restart waits for heal): with two
                // copies behind, a change reaches one good copy only and
                // is refused for want of quorum (EROFS), as GlusterFS's is.
                if self.down.is_none() {
                    if self.unhealed {
                        self.heal().await?;
                    }
                    self.bricks[i].set_down(true);
                    self.down = Some(i);
                }
            }
            Step::Up => {
                if let Some(i) = self.down.take() {
                    self.bricks[i].set_down(false);
                    self.unhealed = true;
                    for g in &self.clients {
                        g.wait_up(Duration::from_secs(3)).await;
                    }
                }
            }
            Step::Heal => {
                if self.down.is_none() {
                    self.heal().await?;
                }
            }
            _ => self.change(s).await?,
        }
        Ok(())
    }

    /// A change of names or data, from one client.
    async fn change(&mut self, s: &Step) -> Result<(), String> {
        let m = &mut self.model;
        match *s {
            Step::Create { client, dir, name } => {
                let gfid = Gfid::random();
                let r = call(
                    &self.clients[client],
                    Fop::Mknod {
                        parent: self.dirs[dir],
                        name: n(NAMES[name]),
                        gfid,
                        mode: libc::S_IFREG | 0o644,
                        umask: 0,
                        rdev: 0,
                        linkto: None,
                    },
                )
                .await;
                let want = if m.names.contains_key(&(dir, name)) {
                    libc::EEXIST
                } else {
                    0
                };
                check(errno(r), want, s)?;
                if want == 0 {
                    m.names.insert((dir, name), gfid);
                    m.data.insert(gfid, Vec::new());
                }
            }
            Step::Write {
                client,
                dir,
                name,
                block,
                byte,
            } => {
                let Some(&gfid) = m.names.get(&(dir, name)) else {
                    return Ok(());
                };
                let g = &self.clients[client];
                let fh = match call(
                    g,
                    Fop::Open {
                        gfid,
                        flags: libc::O_RDWR,
                    },
                )
                .await
                {
                    Ok(Reply::Opened { fh }) => fh,
                    other => return Err(format!("{s:?}: open: {other:?}")),
                };
                let data = vec![byte; 8];
                let offset = block * 8;
                let r = call(
                    g,
                    Fop::Write {
                        gfid,
                        fh,
                        offset,
                        data: data.clone().into(),
                        grow: 0,
                        reserve: false,
                    },
                )
                .await;
                let _ = call(g, Fop::Release { gfid, fh }).await;
                check(errno(r), 0, s)?;
                let d = m.data.get_mut(&gfid).unwrap();
                let end = (offset + 8) as usize;
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[offset as usize..end].copy_from_slice(&data);
            }
            Step::Rename { client, from, to } => {
                let r = call(
                    &self.clients[client],
                    Fop::Rename {
                        parent: self.dirs[from.0],
                        name: n(NAMES[from.1]),
                        newparent: self.dirs[to.0],
                        newname: n(NAMES[to.1]),
                        flags: 0,
                    },
                )
                .await;
                let Some(&moved) = m.names.get(&from) else {
                    return check(errno(r), libc::ENOENT, s);
                };
                check(errno(r), 0, s)?;
                // Two names of one file: rename does nothing.
                if m.names.get(&to) != Some(&moved) {
                    m.names.remove(&from);
                    if let Some(old) = m.names.insert(to, moved) {
                        m.forget_unless_linked(old);
                    }
                }
            }
            Step::Link { client, from, to } => {
                let target = m.names.get(&from).copied();
                let Some(gfid) = target else { return Ok(()) };
                let r = call(
                    &self.clients[client],
                    Fop::Link {
                        gfid,
                        newparent: self.dirs[to.0],
                        newname: n(NAMES[to.1]),
                    },
                )
                .await;
                let want = if m.names.contains_key(&to) {
                    libc::EEXIST
                } else {
                    0
                };
                check(errno(r), want, s)?;
                if want == 0 {
                    m.names.insert(to, gfid);
                }
            }
            Step::Unlink { client, dir, name } => {
                let r = call(
                    &self.clients[client],
                    Fop::Unlink {
                        parent: self.dirs[dir],
                        name: n(NAMES[name]),
                    },
                )
                .await;
                match m.names.remove(&(dir, name)) {
                    None => check(errno(r), libc::ENOENT, s)?,
                    Some(gone) => {
                        check(errno(r), 0, s)?;
                        m.forget_unless_linked(gone);
                    }
                }
            }
            Step::Down(_) | Step::Up | Step::Heal => {}
        }
        Ok(())
    }

    /// Every brick up, healed by the real healer until no index lists
    /// anything; then each copy and each client must hold the model.
    async fn settle_and_compare(&mut self) -> Result<(), String> {
        self.run(&Step::Up).await?;
        self.heal().await?;
        self.compare().await
    }

    /// The self-heal daemon's passes, until no brick's index lists
    /// anything.
    async fn heal(&mut self) -> Result<(), String> {
        self.unhealed = false;
        let h = Healer::new(&desc_over(1, 3), |_| true, &stack_env(&self.bricks)).unwrap();
        h.wait_up(Duration::from_secs(3)).await;
        let mut settled = false;
        // Passes as the daemon makes them; one that leaves work (a lock a
        // client still holds, released when idle) is followed by another
        // a moment later.
        for _ in 0..20 {
            h.index_pass().await;
            if h.info(false).await.iter().all(|b| b.entries.is_empty()) {
                settled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !settled {
            return Err(format!(
                "heal never settled: {:?}",
                h.info(false)
                    .await
                    .iter()
                    .map(|b| &b.entries)
                    .collect::<Vec<_>>()
            ));
        }
        h.graph.fini().await;
        Ok(())
    }

    /// Each copy and each client holds what the model does.
    async fn compare(&self) -> Result<(), String> {
        for (i, b) in self.bricks.iter().enumerate() {
            for d in 0..DIRS {
                for (k, name) in NAMES.iter().enumerate() {
                    let path: Vec<String> = match d {
                        0 => vec![name.to_string()],
                        _ => vec![format!("d{d}"), name.to_string()],
                    };
                    let p: Vec<&str> = path.iter().map(String::as_str).collect();
                    let have = b.content(&p).map(|(_, data)| data);
                    let want = self
                        .model
                        .names
                        .get(&(d, k))
                        .map(|g| self.model.data[g].clone());
                    if have != want {
                        return Err(format!(
                            "brick {i}: {}: {have:?}, the model {want:?}",
                            path.join("/")
                        ));
                    }
                }
            }
        }
        for (c, g) in self.clients.iter().enumerate() {
            for (&(d, k), gfid) in &self.model.names {
                let r = match call(
                    g,
                    Fop::Open {
                        gfid: *gfid,
                        flags: libc::O_RDONLY,
                    },
                )
                .await
                {
                    Ok(Reply::Opened { fh }) => {
                        let r = call(
                            g,
                            Fop::Read {
                                gfid: *gfid,
                                fh,
                                offset: 0,
                                size: 64,
                            },
                        )
                        .await;
                        let _ = call(g, Fop::Release { gfid: *gfid, fh }).await;
                        r
                    }
                    other => other,
                };
                let want = &self.model.data[gfid];
                match r {
                    Ok(Reply::Data(data)) if data.as_ref() == want.as_slice() => {}
                    other => {
                        return Err(format!(
                            "client {c}: d{d}/{}: {other:?}, the model {want:?}",
                            NAMES[k]
                        ))
                    }
                }
            }
        }
        Ok(())
    }
}

impl Model {
    fn forget_unless_linked(&mut self, gfid: Gfid) {
        if !self.names.values().any(|&g| g == gfid) {
            self.data.remove(&gfid);
        }
    }
}

fn check(got: i32, want: i32, s: &Step) -> Result<(), String> {
    match got == want {
        true => Ok(()),
        false => Err(format!("{s:?}: errno {got}, the model says {want}")),
    }
}

fn run_steps(steps: &[Step]) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut w = World::new().await;
        for s in steps {
            w.run(s).await?;
        }
        let r = w.settle_and_compare().await;
        for g in &w.clients {
            g.fini().await;
        }
        r
    })
}

/// The suite's runs: the same 64 each time (a fixed seed), so that a
/// run that fails is a change's doing. `PROPTEST_CASES=2000
/// PROPTEST_RNG_SEED=<n>` runs others (docs/replication.md says what
/// such runs still find).
fn config() -> ProptestConfig {
    let env = ProptestConfig::default();
    ProptestConfig {
        cases: match std::env::var_os("PROPTEST_CASES") {
            Some(_) => env.cases,
            None => 64,
        },
        rng_seed: match std::env::var_os("PROPTEST_RNG_SEED") {
            Some(_) => env.rng_seed,
            None => proptest::test_runner::RngSeed::Fixed(0x6d6f_7274_6172),
        },
        failure_persistence: None,
        ..env
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn changes_from_two_clients_while_bricks_restart_match_the_model_once_healed(
        steps in prop::collection::vec(step(), 1..40)
    ) {
        if let Err(e) = run_steps(&steps) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// Runs the model test found failing, kept: changes naming what a copy
/// back from down (not healed yet) missed were refused with that copy's
/// ENOENT, ESTALE or EEXIST although the good copies took them, or made
/// on it alone.
#[test]
fn changes_a_copy_back_from_down_missed_are_made_all_the_same() {
    use Step::*;
    let c = 0;
    for steps in [
        vec![
            Down(0),
            Create {
                client: c,
                dir: 0,
                name: 1,
            },
            Up,
            Rename {
                client: c,
                from: (0, 1),
                to: (0, 0),
            },
        ],
        vec![
            Down(0),
            Create {
                client: c,
                dir: 0,
                name: 1,
            },
            Link {
                client: c,
                from: (0, 1),
                to: (2, 1),
            },
            Up,
            Rename {
                client: c,
                from: (2, 1),
                to: (2, 0),
            },
        ],
        vec![
            Down(0),
            Create {
                client: c,
                dir: 2,
                name: 1,
            },
            Up,
            Link {
                client: c,
                from: (2, 1),
                to: (0, 0),
            },
        ],
        vec![
            Down(0),
            Create {
                client: c,
                dir: 0,
                name: 0,
            },
            Up,
            Create {
                client: c,
                dir: 0,
                name: 2,
            },
            Link {
                client: c,
                from: (0, 0),
                to: (0, 2),
            },
        ],
        // A name made again on the copy that missed it (the others have
        // it: EEXIST), then renamed away: the copy must not keep another
        // object under the name, where no heal would look.
        vec![
            Down(0),
            Create {
                client: c,
                dir: 2,
                name: 1,
            },
            Up,
            Create {
                client: c,
                dir: 2,
                name: 1,
            },
            Rename {
                client: c,
                from: (2, 1),
                to: (0, 1),
            },
            Write {
                client: c,
                dir: 0,
                name: 1,
                block: 0,
                byte: 0,
            },
        ],
    ] {
        assert_eq!(run_steps(&steps), Ok(()), "{steps:?}");
    }
}
