//! The volumes an NFS server serves, by id (every handle names one), and
//! who may reach each: its `auth.allow` and `auth.reject` applied to NFS
//! clients' addresses, `server.root-squash` and `server.all-squash` to
//! their calls, as the bricks apply them to mounts; `nfs.volume-access`;
//! and what of it may be mounted: `nfs.export-volumes`,
//! `nfs.export-dirs`, `nfs.export-dir`.

use crate::options::{NFS_EXPORT_DIR, NFS_EXPORT_DIRS, NFS_EXPORT_VOLUMES, NFS_VOLUME_ACCESS};
use crate::status::{stat, status_of};
use mortar_core::addrs::DirExport;
use mortar_core::desc::VolDesc;
use mortar_core::fop::{Attr, FileKind};
use mortar_core::{Ctx, Fop, Gfid, Name, Reply, Xlator};
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
    /// What of the volume may be mounted.
    mountable: RwLock<Arc<Mountable>>,
    /// The listed directories' gfids (index in `Mountable::listed`), and
    /// when they were found, for the `Mountable` of that generation.
    roots: Mutex<Option<Found>>,
    /// Addresses looked at lately for a listed directory (of a
    /// generation): taken or not.
    dir_seen: Mutex<HashMap<DirClient, (bool, Instant)>>,
}

/// The listed directories' gfids, each with its index in the list of a
/// generation, and when they were found.
struct Found {
    generation: u64,
    at: Instant,
    roots: HashMap<Gfid, usize>,
}

/// A client's address, a generation, a listed directory's index.
type DirClient = (IpAddr, u64, usize);

/// What of a volume NFS clients may mount.
#[derive(Default)]
struct Mountable {
    /// Moves on with every description: what was found for an older one
    /// (the list's indexes) is not taken for this one.
    generation: u64,
    /// `nfs.export-volumes`: the whole volume.
    volume: bool,
    /// `nfs.export-dirs`: directories in it.
    dirs: bool,
    /// `nfs.export-dir`: only these directories, if any.
    listed: Vec<DirExport>,
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
            mountable: Default::default(),
            roots: Mutex::default(),
            dir_seen: Mutex::default(),
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
        let o = &desc.options;
        let generation = self.mountable.read().unwrap().generation + 1;
        let mountable = Mountable {
            generation,
            volume: NFS_EXPORT_VOLUMES.bool(o),
            dirs: NFS_EXPORT_DIRS.bool(o),
            listed: DirExport::parse_list(NFS_EXPORT_DIR.str(o)).unwrap_or_default(),
        };
        *self.mountable.write().unwrap() = Arc::new(mountable);
        *self.roots.lock().unwrap() = None;
        self.dir_seen.lock().unwrap().clear();
    }

    /// What `showmount -e` lists: each export's path and the clients it
    /// is for (none named: every client the volume takes).
    pub fn listed(&self) -> Vec<(String, Vec<String>)> {
        let m = self.mountable.read().unwrap().clone();
        let mut out = Vec::new();
        if m.volume {
            out.push((format!("/{}", self.name), Vec::new()));
        }
        if m.dirs {
            for d in &m.listed {
                let hosts = d.hosts.as_ref().map(|h| h.canonical());
                let groups = hosts.map(|h| h.split(',').map(str::to_string).collect());
                out.push((
                    format!("/{}{}", self.name, d.path),
                    groups.unwrap_or_default(),
                ));
            }
        }
        out
    }

    /// Whether a client at `ip` may use the export whose root is `root`
    /// (the volume's root, or the directory it mounted): Err(nfsstat3)
    /// if not. The volume's own rules (`refuses`) are apart.
    pub async fn admits(&self, root: Gfid, ip: IpAddr) -> Result<(), u32> {
        let m = self.mountable.read().unwrap().clone();
        if root == Gfid::ROOT {
            return if m.volume { Ok(()) } else { Err(stat::ACCES) };
        }
        if !m.dirs {
            return Err(stat::ACCES);
        }
        if m.listed.is_empty() {
            return Ok(());
        }
        let i = self.listed_at(root, &m).await.ok_or(stat::ACCES)?;
        let Some(hosts) = &m.listed[i].hosts else {
            return Ok(());
        };
        let key = (ip, m.generation, i);
        let known = self.dir_seen.lock().unwrap().get(&key).copied();
        let taken = match known {
            Some((taken, at)) if at.elapsed() < ADDRESS_KNOWN => taken,
            _ => {
                let taken = mortar_protocol::auth::matches(hosts, ip).await;
                if !taken {
                    let path = &m.listed[i].path;
                    tracing::warn!(volume = %self.name, %ip, "NFS client refused: not among the clients of {path} in nfs.export-dir");
                }
                self.dir_seen
                    .lock()
                    .unwrap()
                    .insert(key, (taken, Instant::now()));
                taken
            }
        };
        if taken {
            Ok(())
        } else {
            Err(stat::ACCES)
        }
    }

    /// Which listed directory `root` is: looked up again when not known
    /// (at most once a second) and every ADDRESS_KNOWN (directories are
    /// renamed and made anew).
    async fn listed_at(&self, root: Gfid, m: &Mountable) -> Option<usize> {
        {
            let roots = self.roots.lock().unwrap();
            if let Some(f) = roots.as_ref().filter(|f| f.generation == m.generation) {
                let age = f.at.elapsed();
                match f.roots.get(&root) {
                    Some(i) if age < ADDRESS_KNOWN => return Some(*i),
                    None if age < Duration::from_secs(1) => return None,
                    _ => {}
                }
            }
        }
        let mut found = HashMap::new();
        for (i, d) in m.listed.iter().enumerate() {
            if let Ok(a) = self.walk(&Ctx::root(), &d.path).await {
                found.insert(a.gfid, i);
            }
        }
        let i = found.get(&root).copied();
        *self.roots.lock().unwrap() = Some(Found {
            generation: m.generation,
            at: Instant::now(),
            roots: found,
        });
        i
    }

    /// The directory at `path` (`/a/b`) in the volume, as `cx` finds it:
    /// its attributes, or the nfsstat3 of why not.
    pub async fn walk(&self, cx: &Ctx, path: &str) -> Result<Attr, u32> {
        let mut at = self
            .xl
            .call(cx, Fop::Getattr { gfid: Gfid::ROOT })
            .await
            .and_then(Reply::into_attr)
            .map_err(|e| status_of(&e))?;
        for p in path.split('/').filter(|p| !p.is_empty()) {
            if p == "." || p == ".." {
                return Err(stat::INVAL);
            }
            let name = Name::new(p.as_bytes().to_vec()).map_err(|_| stat::INVAL)?;
            at = self
                .xl
                .call(
                    cx,
                    Fop::Lookup {
                        parent: at.gfid,
                        name,
                    },
                )
                .await
                .and_then(Reply::into_attr)
                .map_err(|e| status_of(&e))?;
            if at.kind != FileKind::Dir {
                return Err(stat::NOTDIR);
            }
        }
        Ok(at)
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
