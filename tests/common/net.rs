//! Several "hosts" on this machine: network namespaces joined by a bridge,
//! each running its own daemon, and partitions between them (blackhole
//! routes, both ways). The test process stays in the root namespace, which
//! reaches every host through the bridge, partitions or not.

use super::{ok, sh, Cluster};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct Net {
    bridge: String,
    names: Vec<String>,
    pub hosts: Vec<Cluster>,
}

impl Net {
    /// `n` hosts, each a namespace with one address and a daemon.
    pub fn new(n: usize) -> Net {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let bridge = format!("mb{}{k}", pid % 100_000);
        let prefix = format!("10.{}.{}", 100 + k, pid % 250);
        ok(&format!(
            "ip link add {bridge} type bridge && ip addr add {prefix}.254/24 dev {bridge} && ip link set {bridge} up"
        ));
        let mut net = Net {
            bridge,
            names: Vec::new(),
            hosts: Vec::new(),
        };
        for i in 1..=n {
            let ns = format!("mt{pid}-{k}-{i}");
            let veth = format!("{}v{i}", net.bridge);
            ok(&format!(
                "ip netns add {ns} && ip link add {veth} type veth peer name eth0 netns {ns} && \
                 ip link set {veth} master {b} up && \
                 nsenter --net=/run/netns/{ns} sh -c 'ip addr add {prefix}.{i}/24 dev eth0 && ip link set eth0 up && ip link set lo up'",
                b = net.bridge
            ));
            net.names.push(ns);
        }
        for i in 1..=n {
            let ns = net.names[i - 1].clone();
            net.hosts
                .push(Cluster::start_at(format!("{prefix}.{i}"), Some(ns)));
        }
        net
    }

    /// `n` hosts probed into one pool by the first, each seeing the
    /// others connected.
    pub fn pool(n: usize) -> Net {
        let net = Net::new(n);
        let a = &net.hosts[0];
        for h in &net.hosts[1..] {
            a.probe(h);
        }
        for h in &net.hosts {
            super::wait_for(
                "every server sees the pool",
                std::time::Duration::from_secs(10),
                || h.ok(&["peer", "status"]).matches("(Connected)").count() == n - 1,
            );
        }
        net
    }

    /// Host `i`'s network namespace.
    pub fn netns(&self, i: usize) -> &str {
        &self.names[i]
    }

    fn route(&self, i: usize, j: usize, verb: &str) {
        for (from, to) in [(i, j), (j, i)] {
            ok(&format!(
                "nsenter --net=/run/netns/{} ip route {verb} blackhole {}/32",
                self.names[from], self.hosts[to].ip
            ));
        }
    }

    /// Cuts host `i` off from every other host (not from the test).
    pub fn isolate(&self, i: usize) {
        for j in (0..self.hosts.len()).filter(|j| *j != i) {
            self.route(i, j, "add");
        }
    }

    /// Undoes `isolate`.
    pub fn rejoin(&self, i: usize) {
        for j in (0..self.hosts.len()).filter(|j| *j != i) {
            self.route(i, j, "del");
        }
    }

    /// Cuts the hosts in `a` off from those in `b`.
    pub fn split(&self, a: &[usize], b: &[usize]) {
        for i in a {
            for j in b {
                self.route(*i, *j, "add");
            }
        }
    }

    /// Undoes `split`.
    pub fn mend(&self, a: &[usize], b: &[usize]) {
        for i in a {
            for j in b {
                self.route(*i, *j, "del");
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.hosts.clear();
        for ns in &self.names {
            sh(&format!("ip netns del {ns}"));
        }
        sh(&format!("ip link del {}", self.bridge));
    }
}
