//! The data path of a dispersed set (`cluster/disperse`, docs/disperse.md).
//!
//! A disperse set is this translator with a code: names, attributes,
//! locks, transactions and blame are replicate's, kept the same on every
//! brick, and only file data differs. Each brick holds one fragment of
//! each file (`mortar_ec`): data fragments 0..K hold the file's own bytes
//! unit by unit, parity fragments K..K+R the code of them, and every
//! fragment is, as a file, as long as the file, so any brick answers its
//! attributes.
//!
//! - A read (`coded_reads`) asks the data fragments that hold the bytes wanted, each for
//!   one piece, and decodes nothing; with one of them away or blamed, it
//!   reads the stripes from K good fragments and rebuilds.
//! - A write, under the file's lock, reads the old bytes its partial
//!   stripes need (`mortar_ec::Write`), then sends each fragment one write.
//!   A fragment that misses it is blamed, as a replica is; the change
//!   stands if K good fragments took it.
//! - A truncation cuts every fragment and updates the parity of the stripe
//!   the new end falls in.
//!
//! Appends (`O_APPEND`) are placed here at the file's size: the bricks'
//! files are opened without it.

use super::*;
use mortar_core::fop::ANON_FH;
use mortar_ec::{Codec, Geometry};
use std::ops::Range;

/// The stripe unit: bytes of a file each data fragment holds in a row.
/// Files up to this size are in one data fragment and the parity.
pub const UNIT: u64 = 16 << 10;

/// The code of a `K + R` set and where a file's bytes go in it.
pub struct Coding {
    pub g: Geometry,
    pub codec: Codec,
    /// Our handles opened with `O_APPEND` (the bricks' are not).
    appending: Mutex<std::collections::HashSet<u64>>,
    /// Whether the bricks were seen full lately (`room`).
    pub room: super::room::Room,
    /// How quickly each brick answers reads (`pace`).
    pub pace: super::pace::Pace,
    /// ...and writes: a disk may write slowly and read quickly.
    pub write_pace: super::pace::Pace,
}

impl Coding {
    pub fn new(k: usize, r: usize, unit: u64) -> Result<Coding, mortar_ec::CodecError> {
        Ok(Coding {
            g: Geometry::new(k, unit),
            codec: Codec::new(k, r)?,
            appending: Mutex::default(),
            room: Default::default(),
            pace: super::pace::Pace::new(k + r),
            write_pace: super::pace::Pace::new(k + r),
        })
    }

    pub(super) fn k(&self) -> usize {
        self.g.k()
    }

    fn r(&self) -> usize {
        self.codec.r()
    }
}

/// A change of a dispersed file under way (`Replicate::coded_begin`).
pub(super) struct Started {
    pub(super) _claim: txn::Claim,
    pub(super) tickets: Vec<txn::Ticket>,
    /// The fragments locked.
    pub(super) targets: Vec<usize>,
    /// Of those, the ones no other blames.
    pub(super) good: Vec<usize>,
    /// The file's size before the change.
    pub(super) size: u64,
}

pub(super) fn eio(what: String) -> FsError {
    FsError::new(libc::EIO, what)
}

impl Replicate {
    /// Makes this a disperse set of `k` data and `r` parity fragments
    /// (`k + r` children): changes need K good fragments (the quorum).
    pub fn with_disperse(mut self, k: usize, r: usize) -> Result<Self, String> {
        if k + r != self.children.len() || r == 0 || 2 * r >= k + r {
            return Err(format!(
                "{}: a disperse set of {} bricks cannot keep {k} + {r}",
                self.name,
                self.children.len()
            ));
        }
        self.coding = Some(Coding::new(k, r, UNIT).map_err(|e| e.to_string())?);
        self.txns.set_quorum(Quorum::Fixed(k));
        Ok(self)
    }

    /// An open or create of a dispersed file. The bricks' files are opened
    /// without `O_APPEND` (appends are placed here) and without `O_TRUNC`:
    /// a truncation is a change of the file's fragments under its lock
    /// (`coded_truncate`), made right after the open. An open for writing
    /// needs K fragments up (ENOTCONN): its lock would otherwise record the
    /// fragments away as missing a change none could make.
    pub(super) async fn coded_open(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let gfid = fop.gfid();
        let mut fop = fop;
        let (appends, truncates) = match &mut fop {
            Fop::Open { flags, .. } => {
                let (up, k) = (self.up().len(), self.coding().k());
                if *flags & libc::O_ACCMODE != libc::O_RDONLY && up < k {
                    return Err(FsError::notconn(format!(
                        "{}: {gfid}: {up} of {} fragments are up, {k} are needed to write",
                        self.name,
                        self.children.len()
                    )));
                }
                let t = *flags & libc::O_TRUNC != 0 && *flags & libc::O_ACCMODE != libc::O_RDONLY;
                let a = *flags & libc::O_APPEND != 0;
                *flags &= !(libc::O_APPEND | libc::O_TRUNC);
                (a, t)
            }
            Fop::Create { flags, .. } => {
                let a = *flags & libc::O_APPEND != 0;
                *flags &= !libc::O_APPEND;
                (a, false)
            }
            _ => unreachable!("opens only"),
        };
        let r = match fop {
            Fop::Create { .. } => self.create(cx, fop).await,
            _ => self.open_all(cx, fop).await,
        };
        let fh = match &r {
            Ok(Reply::Opened { fh }) | Ok(Reply::Created { fh, .. }) => *fh,
            _ => return r,
        };
        if truncates {
            let set = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            if let Err(e) = self.coded_truncate(cx, Fop::Setattr { gfid, set }).await {
                self.release(cx, Fop::Release { gfid, fh }).await;
                return Err(e);
            }
        }
        if appends {
            self.coding().appending.lock().unwrap().insert(fh);
        }
        r
    }

    pub(super) fn appending_ends(&self, fh: u64) {
        if let Some(c) = &self.coding {
            c.appending.lock().unwrap().remove(&fh);
        }
    }

    pub(super) fn coding(&self) -> &Coding {
        self.coding.as_ref().expect("a disperse set")
    }

    /// Of `among`, the fragments of `gfid` no other blames; EIO when fewer
    /// than K.
    pub(super) async fn good_fragments(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        among: &[usize],
    ) -> FsResult<Vec<usize>> {
        let k = self.coding().k();
        let good = |me: &Self| {
            let bad = me.stale_copies(gfid);
            among
                .iter()
                .copied()
                .filter(|&i| bad & (1 << i) == 0)
                .collect::<Vec<usize>>()
        };
        let mut g = good(self);
        if g.len() < k {
            self.refresh(cx, gfid).await;
            g = good(self);
        }
        if g.len() < k {
            // Fragments that no longer know the file (a rebalance moved it
            // to another set and removed it here, one brick after
            // another): ESTALE, so that distribute looks for it there.
            let others: Vec<usize> = among.iter().copied().filter(|i| !g.contains(i)).collect();
            let asked = others.iter().map(|&i| async move {
                self.children[i]
                    .call(&Ctx::root(), Fop::Getattr { gfid })
                    .await
            });
            let gone = futures_util::future::join_all(asked)
                .await
                .iter()
                .any(|r| matches!(r, Err(e) if e.is(libc::ESTALE)));
            if gone {
                return Err(FsError::new(
                    libc::ESTALE,
                    format!("{}: {gfid}: gone from some fragments", self.name),
                ));
            }
            return Err(if among.len() < k {
                FsError::notconn(format!(
                    "{}: {gfid}: {} of {} fragments are up, {k} are needed",
                    self.name,
                    among.len(),
                    self.children.len()
                ))
            } else {
                eio(format!(
                    "{}: {gfid}: {} good fragments are up (others missed changes and are not healed yet), {k} are needed",
                    self.name,
                    g.len()
                ))
            });
        }
        Ok(g)
    }

    /// The file's size, as one good fragment's length tells it.
    pub(super) async fn coded_size(&self, cx: &Ctx, gfid: Gfid, good: &[usize]) -> FsResult<u64> {
        let mut last = FsError::notconn("no fragment answered");
        for &i in good {
            match self.children[i].call(cx, Fop::Getattr { gfid }).await {
                Ok(r) => return Ok(r.into_attr()?.size),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The old bytes a change's plan needs, read from the good fragments
    /// (as the brick itself: the change's own rights were checked by the
    /// bricks it changes); those of a data fragment that cannot give them
    /// rebuilt from the stripes `stripes` of the others. None for a parity
    /// fragment that cannot give them.
    async fn old_bytes(
        &self,
        gfid: Gfid,
        needs: &[mortar_ec::Need],
        good: &[usize],
        stripes: Range<u64>,
    ) -> FsResult<Vec<Option<Vec<u8>>>> {
        let root = Ctx::root();
        let k = self.coding().k();
        let reads = needs.iter().map(|n| {
            let root = &root;
            async move {
                if !good.contains(&n.fragment) {
                    return None;
                }
                self.fragment_read(root, gfid, n.fragment, ANON_FH, n.range.clone())
                    .await
                    .ok()
            }
        });
        let mut old: Vec<Option<Vec<u8>>> = join_all(reads).await;
        let lost_data = needs
            .iter()
            .zip(&old)
            .any(|(n, o)| n.fragment < k && o.is_none());
        if lost_data {
            let frags = self
                .rebuilt(&root, gfid, good, |_| ANON_FH, stripes.clone())
                .await?;
            for (n, o) in needs.iter().zip(old.iter_mut()) {
                if o.is_none() && n.fragment < k {
                    let (a, b) = (
                        (n.range.start - stripes.start) as usize,
                        (n.range.end - stripes.start) as usize,
                    );
                    *o = Some(frags[n.fragment][a..b].to_vec());
                }
            }
        }
        Ok(old)
    }

    /// Whether a change of a dispersed file that the fragments answered
    /// `res` must not stand: it needs K fragments that were good before.
    fn coded_lost(&self, gfid: Gfid, res: &[(usize, FsResult<Reply>)]) -> Option<FsError> {
        let took = txn::succeeded(res);
        if took.is_empty() {
            return None;
        }
        let bad = self.stale_copies(gfid);
        let good = took.iter().filter(|&&i| bad & (1 << i) == 0).count();
        let k = self.coding().k();
        (good < k).then(|| {
            eio(format!(
                "{}: {gfid}: the change reached {good} good fragments of the {k} it needs; change refused",
                self.name
            ))
        })
    }

    /// Starts a change of dispersed file `gfid` on the fragments `among`:
    /// this client's claim on the file (one change at a time: each reads
    /// what the one before wrote), the lock, the good fragments locked and
    /// the size (kept under the lock, else asked of one of them).
    pub(super) async fn coded_begin(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        among: &[usize],
    ) -> FsResult<Started> {
        let claim = self.txns.claim(gfid, 0, u64::MAX).await;
        self.good_fragments(cx, gfid, among).await?;
        let (tickets, targets) = self.begin(&[gfid], among).await?;
        let known = tickets[0].size;
        let ready = async {
            let good = self.good_fragments(cx, gfid, &targets).await?;
            let size = match known {
                Some(s) => s,
                None => self.coded_size(cx, gfid, &good).await?,
            };
            Ok::<_, FsError>((good, size))
        };
        match ready.await {
            Ok((good, size)) => Ok(Started {
                _claim: claim,
                tickets,
                targets,
                good,
                size,
            }),
            Err(e) => Err(self.coded_abandon(tickets, e).await),
        }
    }

    /// Ends a change that sent nothing, with its error.
    async fn coded_abandon(&self, tickets: Vec<txn::Ticket>, e: FsError) -> FsError {
        self.finish(tickets, &[], false, false).await;
        e
    }

    /// Ends a change the fragments answered `res`: the size it leaves is
    /// kept under the lock if it stands, the fragments that missed it are
    /// blamed, and the answers of those that took it are handed back.
    pub(super) async fn coded_end(
        &self,
        gfid: Gfid,
        tickets: Vec<txn::Ticket>,
        res: Vec<(usize, FsResult<Reply>)>,
        new_size: u64,
    ) -> FsResult<Vec<(usize, Reply)>> {
        let judged = merge(res.clone());
        let lost = self.coded_lost(gfid, &res);
        let stands = judged.is_ok() && lost.is_none();
        self.txns
            .set_size(&tickets[0], stands.then_some(new_size))
            .await;
        self.finish(tickets, &res, judged.is_ok(), lost.is_some())
            .await;
        let ok = judged?;
        match lost {
            Some(e) => Err(e),
            None => Ok(ok),
        }
    }

    /// A write to a dispersed file.
    pub(super) async fn coded_write(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Write {
            gfid,
            fh,
            offset,
            data,
            ..
        } = fop
        else {
            unreachable!("writes only")
        };
        let appending = self.coding().appending.lock().unwrap().contains(&fh);
        self.coded_write_at(cx, (gfid, fh), offset, data, appending)
            .await
    }

    /// Writes `data` at `offset` of dispersed file `gfid` through handle
    /// `fh` (at its end, `appending`).
    pub(super) async fn coded_write_at(
        &self,
        cx: &Ctx,
        (gfid, fh): (Gfid, u64),
        offset: u64,
        data: bytes::Bytes,
        appending: bool,
    ) -> FsResult<Reply> {
        if data.is_empty() {
            return Ok(Reply::Written(0, None));
        }
        let (fhs, live) = self.live_handles(cx, gfid, fh).await?;
        let Started {
            _claim,
            tickets,
            targets,
            good,
            size,
        } = self.coded_begin(cx, gfid, &live).await?;
        let planned = async {
            let at = if appending { size } else { offset };
            let c = self.coding();
            let plan = mortar_ec::Write::new(c.g, c.r(), at, data.len() as u64, size);
            let stripes = c.g.stripe_range(at, data.len() as u64);
            let stripes = stripes.start..stripes.end.min(c.g.parity_len(size));
            let old = self.old_bytes(gfid, plan.needs(), &good, stripes).await?;
            let writes = plan
                .writes(&c.codec, &data, &old)
                .map_err(|e| eio(format!("{}: {gfid}: {e}", self.name)))?;
            let grow = if plan.new_size() > size {
                plan.new_size()
            } else {
                0
            };
            Ok::<_, FsError>((writes, grow, plan.new_size()))
        };
        let (writes, grow, new_size) = match planned.await {
            Ok(p) => p,
            Err(e) => return Err(self.coded_abandon(tickets, e).await),
        };
        let k = self.coding().k();
        let mut res: Vec<(usize, FsResult<Reply>)> = Vec::new();
        let mut send = Vec::new();
        for &i in &targets {
            match &writes[i] {
                Some(_) => send.push(i),
                None if i >= k && writes[k..].iter().any(Option::is_some) => {
                    // Its old parity could not be read: it misses this.
                    res.push((i, Err(eio("old parity unreadable".into()))));
                }
                None if grow > 0 => send.push(i),
                None => res.push((i, Ok(Reply::Ok))),
            }
        }
        for i in self.written_around(&targets) {
            if let Some(at) = send.iter().position(|&j| j == i) {
                send.remove(at);
                res.push((i, Err(FsError::notconn("answers late: written around"))));
            }
        }
        let parts: room::Parts = writes
            .into_iter()
            .map(|w| w.map(|w| (w.offset, bytes::Bytes::from(w.bytes))))
            .collect();
        let sent = self
            .send_parts(cx, gfid, |i| fhs.fh(i), &send, (&parts, grow))
            .await;
        match sent {
            Ok(sent) => res.extend(sent),
            Err(e) => return Err(self.coded_abandon(tickets, e).await),
        }
        let ok = self.coded_end(gfid, tickets, res, new_size).await?;
        let attr = ok.into_iter().find_map(|(_, r)| match r {
            Reply::Written(_, a) => a,
            _ => None,
        });
        Ok(Reply::Written(data.len() as u32, attr))
    }

    /// The fragments of `targets` a write leaves out because they keep
    /// answering late (GlusterFS's #251: one slow brick held a dispersed
    /// volume's writes to its pace): they miss it as if away, are blamed,
    /// and heal. Only while the others are K + 1 at least (the write keeps
    /// a fragment to spare), and never on one write in `pace::PROBE_EVERY`
    /// (which learns whether they are quick again).
    fn written_around(&self, targets: &[usize]) -> Vec<usize> {
        let c = self.coding();
        let slow: Vec<usize> = targets
            .iter()
            .copied()
            .filter(|&i| c.write_pace.is_slow(i))
            .collect();
        if slow.is_empty() || targets.len() - slow.len() <= c.k() || c.write_pace.probe() {
            return Vec::new();
        }
        slow
    }

    /// A truncation of a dispersed file (`Setattr` with a size): each
    /// fragment is cut where the new size ends its content, the parity of
    /// the stripe the new end falls in is updated, then every fragment is
    /// set to the new size with the rest of the change.
    pub(super) async fn coded_truncate(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Setattr {
            gfid,
            set: SetAttr {
                size: Some(new_size),
                ..
            },
            ..
        } = fop
        else {
            unreachable!("truncations only")
        };
        self.settle_opens_of(cx, &[gfid]).await;
        let Started {
            _claim,
            tickets,
            targets,
            good,
            size,
        } = self.coded_begin(cx, gfid, &self.up()).await?;
        let planned = async {
            let c = self.coding();
            let plan = mortar_ec::Truncate::new(c.g, c.r(), size, new_size);
            let stripes = c.g.stripe_range(new_size, 1);
            let stripes = stripes.start..stripes.end.min(c.g.parity_len(size));
            let old = self.old_bytes(gfid, plan.needs(), &good, stripes).await?;
            let parity = plan
                .parity_writes(&c.codec, &old)
                .map_err(|e| eio(format!("{}: {gfid}: {e}", self.name)))?;
            Ok::<_, FsError>((plan, parity))
        };
        let (plan, parity) = match planned.await {
            Ok(p) => p,
            Err(e) => return Err(self.coded_abandon(tickets, e).await),
        };
        let k = self.coding().k();
        let steps = targets.iter().map(|&i| {
            let (fop, plan, parity) = (&fop, &plan, &parity);
            async move {
                let child = &self.children[i];
                if let Some(cut) = plan.cut(i) {
                    let set = SetAttr {
                        size: Some(cut),
                        ..Default::default()
                    };
                    child.call(cx, Fop::Setattr { gfid, set }).await?;
                }
                if let Some(w) = i.checked_sub(k).and_then(|j| parity[j].as_ref()) {
                    self.parity_write(gfid, i, w).await?;
                }
                child.call(cx, fop.clone()).await
            }
        });
        let res: Vec<(usize, FsResult<Reply>)> =
            targets.iter().copied().zip(join_all(steps).await).collect();
        let ok = self.coded_end(gfid, tickets, res, new_size).await?;
        Ok(self.pick(gfid, ok))
    }

    /// Writes parity bytes to fragment `i` as the brick itself, through a
    /// handle opened for it.
    async fn parity_write(
        &self,
        gfid: Gfid,
        i: usize,
        w: &mortar_ec::FragmentWrite,
    ) -> FsResult<()> {
        let root = Ctx::root();
        let child = &self.children[i];
        let fh = child
            .call(
                &root,
                Fop::Open {
                    gfid,
                    flags: libc::O_WRONLY,
                },
            )
            .await?
            .into_fh()?;
        let wrote = child
            .call(
                &root,
                Fop::Write {
                    gfid,
                    fh,
                    offset: w.offset,
                    data: bytes::Bytes::from(w.bytes.clone()),
                    grow: 0,
                    // An overwrite of bytes the fragment holds, for a
                    // truncation: it needs no room, and frees some.
                    reserve: true,
                },
            )
            .await;
        let _ = child.call(&root, Fop::Release { gfid, fh }).await;
        wrote.map(|_| ())
    }
}
