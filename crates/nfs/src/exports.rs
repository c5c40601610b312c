//! The volumes an NFS server serves, by id (every handle names one), and
//! who may reach each: its `auth.allow` and `auth.reject` applied to NFS
//! clients' addresses, `server.root-squash` and `server.all-squash` to
//! their calls, as the bricks apply them to mounts; `nfs.volume-access`.

use crate::options::NFS_VOLUME_ACCESS;
use mortar_core::desc::VolDesc;
use mortar_core::{Ctx, Xlator};
use mortar_protocol::auth::Rules;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long an address found allowed or refused is taken as such (host
/// names in the rules are resolved again after it).
const ADDRESS_KNOWN: Duration = Duration::from_secs(10);

/// A volume served over NFS.
pub struct Export {
    /// The volume's name: the export is `/NAME`.
    pub name: String,
    /// The volume's id, in every handle.
    pub id: [u8; 16],
    /// The file system id clients see (from the volume's id).
    pub fsid: u64,
    /// The volume's client graph.
    pub xl: Arc<dyn Xlator>,
    /// The volume's rules for clients (`set_rules` as they change).
    rules: RwLock<Arc<Rules>>,
    /// `nfs.volume-access read-only`.
    read_only: std::sync::atomic::AtomicBool,
    /// Addresses looked at lately: refused (with why) or not, and when.
    seen: Mutex<HashMap<IpAddr, (Option<String>, Instant)>>,
}

impl Export {
    pub fn new(name: String, id: [u8; 16], xl: Arc<dyn Xlator>, desc: &VolDesc) -> Export {
        let e = Export {
            name,
            id,
            fsid: u64::from_be_bytes(id[..8].try_into().unwrap()),
            xl,
            rules: RwLock::new(Arc::new(Rules::from_desc(desc))),
            read_only: Default::default(),
            seen: Mutex::default(),
        };
        e.follow(desc);
        e
    }

    /// The volume's description changed: its rules and options.
    pub fn follow(&self, desc: &VolDesc) {
        *self.rules.write().unwrap() = Arc::new(Rules::from_desc(desc));
        self.seen.lock().unwrap().clear();
        let ro = NFS_VOLUME_ACCESS.str(&desc.options) == "read-only";
        self.read_only.store(ro, Ordering::Relaxed);
    }

    /// Whether NFS clients may only read the volume.
    pub fn read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }

    /// Why a client at `ip` may not reach the volume, if it may not.
    pub async fn refuses(&self, ip: IpAddr) -> Option<String> {
        if let Some((why, at)) = self.seen.lock().unwrap().get(&ip) {
            if at.elapsed() < ADDRESS_KNOWN {
                return why.clone();
            }
        }
        let rules = self.rules.read().unwrap().clone();
        let why = rules.refuses(ip).await;
        if let Some(w) = &why {
            tracing::warn!(volume = %self.name, %ip, "NFS client refused: {w}");
        }
        self.seen
            .lock()
            .unwrap()
            .insert(ip, (why.clone(), Instant::now()));
        why
    }

    /// Who a call claimed by `cx` runs as: the volume's squashing applied.
    pub fn squash(&self, cx: &mut Ctx) {
        self.rules.read().unwrap().squash.apply(cx, None);
    }
}

#[derive(Default)]
pub struct Exports {
    by_id: RwLock<HashMap<[u8; 16], Arc<Export>>>,
}

impl Exports {
    /// Serves `export` (in place of one of the same volume).
    pub fn add(&self, export: Arc<Export>) {
        tracing::info!(volume = %export.name, "exported over NFS");
        self.by_id.write().unwrap().insert(export.id, export);
    }

    /// Stops serving the volume `id`.
    pub fn remove(&self, id: &[u8; 16]) {
        if let Some(e) = self.by_id.write().unwrap().remove(id) {
            tracing::info!(volume = %e.name, "no longer exported over NFS");
        }
    }

    pub fn get(&self, id: &[u8; 16]) -> Option<Arc<Export>> {
        self.by_id.read().unwrap().get(id).cloned()
    }

    pub fn named(&self, name: &str) -> Option<Arc<Export>> {
        self.by_id
            .read()
            .unwrap()
            .values()
            .find(|e| e.name == name)
            .cloned()
    }

    /// Every export, by name.
    pub fn all(&self) -> Vec<Arc<Export>> {
        let mut v: Vec<Arc<Export>> = self.by_id.read().unwrap().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }
}
