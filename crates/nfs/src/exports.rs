//! The volumes an NFS server serves, by id (every handle names one).

use mortar_core::Xlator;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

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
}

impl Export {
    pub fn new(name: String, id: [u8; 16], xl: Arc<dyn Xlator>) -> Export {
        Export {
            name,
            id,
            fsid: u64::from_be_bytes(id[..8].try_into().unwrap()),
            xl,
        }
    }
}

#[derive(Default)]
pub struct Exports {
    by_id: RwLock<HashMap<[u8; 16], Arc<Export>>>,
}

impl Exports {
    /// Serves `export` (in place of one of the same volume).
    pub fn add(&self, export: Export) {
        tracing::info!(volume = %export.name, "exported over NFS");
        self.by_id
            .write()
            .unwrap()
            .insert(export.id, Arc::new(export));
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
