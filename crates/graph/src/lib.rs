//! A client translator graph: built from a description (`desc`), stacked
//! from the translator table (`table`), joined by links that carry events
//! up (`core::xlator`). The graph calls every translator's `start`,
//! `reconfigure` and `fini` itself, sums their request counters, and
//! broadcasts what reaches its top to any number of subscribers.

pub mod active;
pub mod build;
#[cfg(test)]
mod cluster_tests;
pub mod roles;
pub mod sets;
#[cfg(any(test, feature = "testkit"))]
pub mod stacked;
pub mod table;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use build::{Env, Node};

use mortar_core::desc::VolDesc;
use mortar_core::recalls::RecallLog;
use mortar_core::xlator::Top;
use mortar_core::{Child, Event, Gfid, Options};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mortar_core::terms::{cache_time, UNLEASED};

pub struct Graph {
    /// The volume and the version of its description this graph is built from.
    pub volume: String,
    pub version: u64,
    /// Every translator, children before parents; the last is the top.
    nodes: Vec<Node>,
    events: tokio::sync::broadcast::Sender<Event>,
    recalls: Arc<RecallLog>,
    /// How long the kernel may cache names and attributes (milliseconds;
    /// `reconfigure`).
    cache_ms: AtomicU64,
}

impl Graph {
    /// Builds the graph a volume description gives, applies its options,
    /// and starts it (protocol clients begin to connect). Call within a
    /// tokio runtime.
    pub fn build(desc: &VolDesc, env: &Env) -> anyhow::Result<Graph> {
        Self::build_lazy(desc, env, |_| true)
    }

    /// As `build`, but of the bottom translators starts only those `now`
    /// picks: the others connect once waited for (`wait_leaves`). A
    /// healer connects to the other bricks of a set only when it has
    /// something to heal there.
    pub fn build_lazy(
        desc: &VolDesc,
        env: &Env,
        now: impl Fn(&Node) -> bool,
    ) -> anyhow::Result<Graph> {
        let mut nodes = Vec::new();
        build::build_into(&desc.top, env, &table::factory, &mut nodes)?;
        // Deep enough that a burst of recalls does not overtake the
        // mount reading them (it drops every cache when it does).
        let (events, _) = tokio::sync::broadcast::channel(4096);
        let recalls = Arc::new(RecallLog::default());
        nodes
            .last()
            .expect("a graph has a top")
            .child
            .link
            .attach_top(Top {
                events: events.clone(),
                recalls: recalls.clone(),
            });
        let g = Graph {
            volume: desc.volume.clone(),
            version: desc.version,
            nodes,
            events,
            recalls,
            cache_ms: AtomicU64::new(UNLEASED.as_millis() as u64),
        };
        g.reconfigure(&desc.options);
        for n in g.nodes.iter().filter(|n| !n.children.is_empty() || now(n)) {
            n.start();
        }
        Ok(g)
    }

    /// The translator requests enter by.
    pub fn top(&self) -> &Child {
        &self.nodes.last().expect("a graph has a top").child
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The translators of one kind, in graph order.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.nodes.iter().filter(move |n| n.kind == kind)
    }

    /// Events that reached the top from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Recalls as they arrived (`core::recalls`).
    pub fn recalls(&self) -> &RecallLog {
        &self.recalls
    }

    /// How long the kernel may cache a name or attributes (`cache_time`
    /// of the options in force).
    pub fn cache_time(&self) -> Duration {
        Duration::from_millis(self.cache_ms.load(Ordering::Relaxed))
    }

    /// Gives every translator the options in force.
    pub fn reconfigure(&self, options: &Options) {
        let t = cache_time(options);
        self.cache_ms.store(t.as_millis() as u64, Ordering::Relaxed);
        for n in &self.nodes {
            n.child.xl.reconfigure(options);
        }
    }

    /// Tells every translator that the kernel forgot an object.
    pub fn forget(&self, gfid: Gfid) {
        for n in &self.nodes {
            n.child.xl.forget(gfid);
        }
    }

    /// Returns once everything answered from memory is on the bricks
    /// (`Xlator::settle`), top down.
    pub async fn settle(&self) {
        for n in self.nodes.iter().rev() {
            n.child.xl.settle().await;
        }
    }

    /// Lets every translator let go of what it holds, top down.
    pub async fn fini(&self) {
        for n in self.nodes.iter().rev() {
            n.child.xl.fini().await;
        }
    }

    /// Requests sent to bricks by all translators.
    pub fn requests(&self) -> u64 {
        self.nodes.iter().map(|n| n.child.xl.requests()).sum()
    }

    /// The bottom translators (one per brick).
    pub fn leaves(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.children.is_empty())
    }

    /// Waits until every brick is connected, at most `timeout`; returns how
    /// many are.
    pub async fn wait_up(&self, timeout: Duration) -> usize {
        self.wait_leaves(|_| true, timeout).await;
        self.leaves().filter(|n| n.child.is_up()).count()
    }

    /// Waits until every bottom translator `wanted` picks is connected, at
    /// most `timeout`; true if they all are.
    /// A bottom translator not started yet (`build_lazy`) is started.
    pub async fn wait_leaves(&self, wanted: impl Fn(&Node) -> bool, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        for n in self.leaves().filter(|n| wanted(n)) {
            n.start();
        }
        loop {
            if self.leaves().filter(|n| wanted(n)).all(|n| n.child.is_up()) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The graph as an indented tree, one translator per line, with the
    /// state of each link: what `mortar.graph` shows at a mount.
    pub fn describe(&self) -> String {
        fn line(g: &Graph, i: usize, depth: usize, out: &mut String) {
            let n = &g.nodes[i];
            let state = if n.child.is_up() { "up" } else { "down" };
            out.push_str(&format!(
                "{}{} ({}) {state}\n",
                "  ".repeat(depth),
                n.name,
                n.kind
            ));
            for d in n.child.xl.dump() {
                out.push_str(&format!("{}  | {d}\n", "  ".repeat(depth)));
            }
            for &c in &n.children {
                line(g, c, depth + 1, out);
            }
        }
        let mut out = format!("volume {} version {}\n", self.volume, self.version);
        line(self, self.nodes.len() - 1, 0, &mut out);
        out
    }
}
