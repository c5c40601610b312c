//! READDIR and READDIRPLUS, and the listings kept open between them.
//!
//! A client reads a large directory in chunks, each from the cookie the
//! last one ended at. The first chunk opens the directory through the
//! volume and the listing stays open under the cookie verifier given to
//! the client, so that each later chunk continues it where it ended
//! instead of listing the directory again (which would make reading a
//! directory cost the square of its size). A listing idle for
//! `data::IDLE` is closed; a chunk asked of it later opens the directory
//! again.

use super::attrs::stale;
use super::*;
use crate::exports::Export;
use mortar_core::fop::DirEntry;
use mortar_core::{Fop, Reply};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

struct Listing {
    export: Arc<Export>,
    gfid: Gfid,
    /// Who opened it: only they continue it.
    uid: u32,
    fh: u64,
    used: Instant,
}

#[derive(Default)]
pub struct Listings {
    open: Mutex<HashMap<u64, Listing>>,
}

impl Listings {
    pub fn close_idle(&self) {
        let now = Instant::now();
        let idle: Vec<(u64, Listing)> = self
            .open
            .lock()
            .unwrap()
            .extract_if(|_, l| now.duration_since(l.used) >= data::IDLE)
            .collect();
        for (_, l) in idle {
            tokio::spawn(async move {
                let fop = Fop::Releasedir {
                    gfid: l.gfid,
                    fh: l.fh,
                };
                let _ = l.export.xl.call(&Ctx::root(), fop).await;
            });
        }
    }

    /// The listing `verf` of `gfid` that `uid` opened, if it is open.
    fn find(&self, verf: u64, volume: [u8; 16], gfid: Gfid, uid: u32) -> Option<u64> {
        let mut open = self.open.lock().unwrap();
        let l = open.get_mut(&verf)?;
        if l.gfid != gfid || l.export.id != volume || l.uid != uid {
            return None;
        }
        l.used = Instant::now();
        Some(l.fh)
    }
}

/// The bytes an entry takes in the reply: READDIR's (fileid, name,
/// cookie, the list's flag) and, for READDIRPLUS, what its attributes and
/// handle add.
fn entry_size(name: usize, plus: bool) -> usize {
    let base = 8 + 4 + crate::xdr::padded(name) + 8 + 4;
    match plus {
        true => base + 4 + 84 + 4 + 4 + crate::handle::LEN.next_multiple_of(4),
        false => base,
    }
}

impl Op<'_> {
    /// The listing to continue at `cookie` (opened now if it is not).
    async fn listing(&self, dir: Gfid, verf: u64) -> mortar_core::FsResult<(u64, u64)> {
        let listings = &self.service.listings;
        if verf != 0 {
            if let Some(fh) = listings.find(verf, self.export.id, dir, self.cx.uid) {
                return Ok((verf, fh));
            }
        }
        let fh = self.call(Fop::Opendir { gfid: dir }).await?.into_fh()?;
        let verf = fastrand::u64(1..);
        listings.open.lock().unwrap().insert(
            verf,
            Listing {
                export: self.export.clone(),
                gfid: dir,
                uid: self.cx.uid,
                fh,
                used: Instant::now(),
            },
        );
        Ok((verf, fh))
    }

    pub(super) async fn readdir(&self, dir: Gfid, args: &mut Reader, plus: bool) -> Answer {
        let cookie = args.u64()?;
        let verf = u64::from_be_bytes(args.fixed(8)?[..].try_into().unwrap());
        let max = match plus {
            // dircount (the names alone), then maxcount (all of it).
            true => {
                let _dircount = args.u32()?;
                args.u32()?
            }
            false => args.u32()?,
        } as usize;
        let max = max.min(crate::MAX_IO);
        let (verf, fh) = self
            .listing(dir, if cookie == 0 { 0 } else { verf })
            .await
            .map_err(stale)?;
        let d = self.attr_opt(dir).await;
        // Status, attributes, verifier, the list's end and eof.
        let mut used = 4 + 4 + 84 + 8 + 4 + 4;
        let mut entries: Vec<DirEntry> = Vec::new();
        let mut at = cookie;
        let mut eof = false;
        'fill: loop {
            // With attributes also for READDIR: its file ids are the
            // objects' inode numbers, as GETATTR gives them.
            let fop = Fop::Readdir {
                gfid: dir,
                fh,
                offset: at,
                plus: true,
            };
            let batch = match self.call(fop).await.map_err(stale)? {
                Reply::Entries(e) | Reply::Listed(e, _) => e,
                other => return Err(mortar_core::fop::unexpected(other).into()),
            };
            if batch.is_empty() {
                eof = true;
                break;
            }
            for e in batch {
                let size = entry_size(e.name.len(), plus);
                if used + size > max {
                    break 'fill;
                }
                used += size;
                at = e.next;
                entries.push(e);
            }
        }
        if entries.is_empty() && !eof {
            return Err(Fail::Status(stat::TOOSMALL));
        }
        let mut b = Body::ok();
        self.post_op(&mut b.w, d.as_ref());
        b.w.u64(verf);
        for e in &entries {
            let gfid = e.attr.as_ref().map(|a| a.gfid);
            b.w.bool(true)
                .u64(gfid.map(|g| g.ino()).unwrap_or(e.next))
                .opaque(&e.name)
                .u64(e.next);
            if plus {
                self.post_op(&mut b.w, e.attr.as_ref());
                b.w.bool(gfid.is_some());
                if let Some(g) = gfid {
                    b.w.opaque(&self.handle(g));
                }
            }
        }
        b.w.bool(false).bool(eof);
        Ok(b)
    }
}
