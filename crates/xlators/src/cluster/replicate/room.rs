//! Room on the bricks for a dispersed write (docs/disperse.md, "Full
//! bricks"): every fragment takes a write or none does, so a full brick
//! fails the write with ENOSPC and leaves the file as it was.
//!
//! Each brick keeps some room free (`storage.reserve`) and refuses, with
//! ENOSPC and no change, a write that would reach into it. While the set
//! has room (`Room::tight` false), a write goes out as one request per
//! fragment, as before; a fragment that refuses it is sent it again
//! allowed to use the reserve, so that it finishes what the others took,
//! and the set turns tight for `TIGHT_FOR`. While tight, a write first sets
//! aside its room on every fragment (`Fallocate`, which the reserve
//! refuses like a write): one refusal fails the write with ENOSPC before
//! any fragment is written; then the writes go out allowed to use the
//! reserve, into the room set aside.

use super::*;
use std::time::{Duration, Instant};

/// How long a set stays tight after a brick refused a write.
const TIGHT_FOR: Duration = Duration::from_secs(5);

/// Whether the set's bricks were seen full lately.
#[derive(Default)]
pub struct Room {
    tight_until: Mutex<Option<Instant>>,
}

impl Room {
    pub fn tight(&self) -> bool {
        let mut t = self.tight_until.lock().unwrap();
        match *t {
            Some(until) if Instant::now() < until => true,
            Some(_) => {
                *t = None;
                false
            }
            None => false,
        }
    }

    fn tighten(&self) {
        *self.tight_until.lock().unwrap() = Some(Instant::now() + TIGHT_FOR);
    }
}

/// Each fragment's part of a write: where, and the bytes (None: it only
/// lengthens the fragment, `grow`).
pub(super) type Parts = Vec<Option<(u64, bytes::Bytes)>>;

impl Replicate {
    /// A fragment's write of its `part`, through handle `fh`.
    fn fragment_write(
        gfid: Gfid,
        fh: u64,
        part: &Option<(u64, bytes::Bytes)>,
        grow: u64,
        reserve: bool,
    ) -> Fop {
        let (offset, data) = part.clone().unwrap_or_default();
        Fop::Write {
            gfid,
            fh,
            offset,
            data,
            grow,
            reserve,
        }
    }

    /// Sets aside room for `parts` on the fragments `send`; ENOSPC if one
    /// has none (nothing written anywhere). A fragment that fails for
    /// another reason is left to fail the write itself (and be blamed).
    async fn set_aside(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: impl Fn(usize) -> u64,
        send: &[usize],
        parts: &Parts,
    ) -> FsResult<()> {
        let asked = self
            .fan_out(cx, send, |i| {
                let (offset, data) = parts[i].as_ref()?;
                Some(Fop::Fallocate {
                    gfid,
                    fh: fh(i),
                    mode: libc::FALLOC_FL_KEEP_SIZE,
                    offset: *offset,
                    len: data.len() as u64,
                })
            })
            .await;
        match asked
            .into_iter()
            .find(|(_, r)| r.as_ref().is_err_and(no_room))
        {
            Some((i, Err(e))) => Err(FsError::new(
                e.errno,
                format!(
                    "{}: {gfid}: no room on {} for this write: {}",
                    self.name,
                    self.children[i].name(),
                    e.msg
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Sends the writes of `parts` to the fragments `send` and collects
    /// their answers: tight, into room set aside first; else plainly, and
    /// again, allowed to use the reserve, to those that had no room, so
    /// that they take what the others took.
    pub(super) async fn send_parts(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: impl Fn(usize) -> u64,
        send: &[usize],
        (parts, grow): (&Parts, u64),
    ) -> FsResult<Vec<(usize, FsResult<Reply>)>> {
        let room = &self.coding().room;
        let tight = room.tight();
        if tight {
            self.set_aside(cx, gfid, &fh, send, parts).await?;
        }
        // Each fragment's write of bytes timed: a brick that keeps
        // answering late is written around (`written_around`). A write
        // that only lengthens its fragment is not (those of a small file,
        // to every fragment but the first and the parity, answer at once).
        let start = Instant::now();
        let answers = futures_util::future::join_all(send.iter().map(|&i| {
            let fop = Self::fragment_write(gfid, fh(i), &parts[i], grow, tight);
            let timed = parts[i].as_ref().is_some_and(|(_, b)| !b.is_empty());
            async move {
                let r = self.children[i].call(cx, fop).await;
                let took = (r.is_ok() && timed).then(|| start.elapsed());
                ((i, r), took.map(|t| (i, t)))
            }
        }))
        .await;
        let (mut res, took): (Vec<(usize, FsResult<Reply>)>, Vec<_>) = answers.into_iter().unzip();
        let took: Vec<(usize, std::time::Duration)> = took.into_iter().flatten().collect();
        self.coding().write_pace.record_write(&took);
        let full: Vec<usize> = res
            .iter()
            .filter(|(_, r)| r.as_ref().is_err_and(no_room))
            .map(|(i, _)| *i)
            .collect();
        if full.is_empty() {
            return Ok(res);
        }
        room.tighten();
        tracing::warn!(
            "{}: {gfid}: {} of {} fragments had no room for a write; it goes into their reserve, and writes set room aside first for {}s",
            self.name,
            full.len(),
            send.len(),
            TIGHT_FOR.as_secs()
        );
        let again = self
            .fan_out(cx, &full, |i| {
                Some(Self::fragment_write(gfid, fh(i), &parts[i], grow, true))
            })
            .await;
        for (i, r) in again {
            if let Some(slot) = res.iter_mut().find(|(j, _)| *j == i) {
                slot.1 = r;
            }
        }
        Ok(res)
    }
}
