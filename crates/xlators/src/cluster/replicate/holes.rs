//! Room and holes of dispersed files: `fallocate` and `lseek` with
//! `SEEK_DATA` / `SEEK_HOLE` (docs/disperse.md, "Holes and fallocate").
//!
//! Fragment `i` holds unit `i` of each stripe `s` (parity: the code of the
//! stripe's units) at its bytes `s * unit .. (s + 1) * unit`, so a range of
//! whole stripes of the file is the same range of every fragment.
//!
//! - **Allocating** (mode 0, `FALLOC_FL_KEEP_SIZE`) changes no byte: every
//!   fragment up allocates the units of the stripes the range touches;
//!   then, without `KEEP_SIZE`, a range past the end lengthens the file, in
//!   a change under the lock as a truncation's (the new bytes are zeros,
//!   which the parity already counts on).
//! - **Punching a hole, zeroing a range** (`PUNCH_HOLE`, `ZERO_RANGE`, with
//!   `KEEP_SIZE`): the bytes become zeros. The whole stripes inside the
//!   range are punched (or zeroed) on every fragment, parity too (the code
//!   is linear: zeros code to zeros), in one change with the lock and
//!   blame of a write; the parts of stripes at either end are written
//!   zeros, as any write. So a punched file keeps its holes on every brick,
//!   and heal keeps them (it writes only blocks that differ).
//! - **Seeking**: the data (or hole) after an offset is the first one any
//!   data fragment has after the same place, mapped back to the file. With
//!   a data fragment away or blamed, the answer is the one a file without
//!   holes gives (its data runs to its end): true, if coarse.
//!
//! Collapsing and inserting ranges are refused (EOPNOTSUPP), as many local
//! file systems do.

use super::disperse::Started;
use super::Replicate;
use futures_util::future::join_all;
use mortar_core::fop::ANON_FH;
use mortar_core::{Ctx, Fop, FsError, FsResult, Gfid, Reply, SetAttr};

const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;
const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;

impl Replicate {
    /// `fallocate` on a dispersed file.
    pub(super) async fn coded_fallocate(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Fallocate {
            gfid,
            fh,
            mode,
            offset,
            len,
        } = fop
        else {
            unreachable!("fallocate only")
        };
        if mode & !(KEEP_SIZE | PUNCH_HOLE | ZERO_RANGE) != 0 {
            return Err(FsError::new(
                libc::EOPNOTSUPP,
                "collapsing or inserting ranges of a dispersed file is not supported",
            ));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| len > 0 && e <= i64::MAX as u64)
            .ok_or_else(|| {
                FsError::inval("fallocate of an empty range or past the largest offset")
            })?;
        if mode & (PUNCH_HOLE | ZERO_RANGE) == 0 {
            self.allocate(cx, gfid, fh, offset..end).await?;
            if mode & KEEP_SIZE == 0 {
                self.lengthen(cx, gfid, end).await?;
            }
            return Ok(Reply::Ok);
        }
        if mode & PUNCH_HOLE != 0 && mode & KEEP_SIZE == 0 {
            return Err(FsError::inval("a hole is punched with FALLOC_FL_KEEP_SIZE"));
        }
        let zero = mode & ZERO_RANGE != 0;
        if zero && mode & KEEP_SIZE == 0 {
            // Past the end the file is lengthened by zeros, as it is.
            self.lengthen(cx, gfid, end).await?;
        }
        self.zero(cx, gfid, fh, offset..end, zero).await?;
        Ok(Reply::Ok)
    }

    /// Allocates on every fragment up the units of the stripes `range`
    /// touches (their sizes kept).
    async fn allocate(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        range: std::ops::Range<u64>,
    ) -> FsResult<()> {
        let (fhs, live) = self.live_handles(cx, gfid, fh).await?;
        let g = self.coding().g;
        let s = g.stripes(range.start, range.end - range.start);
        let units = s.start * g.unit()..s.end * g.unit();
        let res = join_all(live.iter().map(|&i| {
            let fop = Fop::Fallocate {
                gfid,
                fh: fhs.fh(i),
                mode: KEEP_SIZE,
                offset: units.start,
                len: units.end - units.start,
            };
            self.children[i].call(cx, fop)
        }))
        .await;
        // Room missing on one fragment is missing for the file.
        res.into_iter().try_for_each(|r| r.map(|_| ()))
    }

    /// Lengthens the file to `end` if it is shorter, under the lock.
    async fn lengthen(&self, cx: &Ctx, gfid: Gfid, end: u64) -> FsResult<()> {
        let Started {
            _claim,
            tickets,
            targets,
            size,
            ..
        } = self.coded_begin(cx, gfid, &self.up()).await?;
        if size >= end {
            self.finish(tickets, &[], false, false).await;
            return Ok(());
        }
        let set = SetAttr {
            size: Some(end),
            ..Default::default()
        };
        let res = join_all(targets.iter().map(|&i| {
            let fop = Fop::Setattr {
                gfid,
                set: set.clone(),
            };
            async move { (i, self.children[i].call(cx, fop).await) }
        }))
        .await;
        self.coded_end(gfid, tickets, res, end).await.map(|_| ())
    }

    /// Makes bytes `range` of the file (within its size) zeros: the whole
    /// stripes punched (`zero`: zeroed, their blocks kept) on every
    /// fragment in one change, the ends written zeros.
    async fn zero(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        range: std::ops::Range<u64>,
        zero: bool,
    ) -> FsResult<()> {
        let (fhs, live) = self.live_handles(cx, gfid, fh).await?;
        let g = self.coding().g;
        let sb = g.stripe_bytes();
        let Started {
            _claim,
            tickets,
            targets,
            size,
            ..
        } = self.coded_begin(cx, gfid, &live).await?;
        let range = range.start..range.end.min(size);
        // The whole stripes inside the range.
        let inner = range.start.div_ceil(sb)..range.end / sb;
        let ends: Vec<std::ops::Range<u64>> = if inner.start < inner.end {
            vec![range.start..inner.start * sb, inner.end * sb..range.end]
        } else {
            vec![range.clone()]
        };
        if inner.start < inner.end {
            let mode = KEEP_SIZE | if zero { ZERO_RANGE } else { PUNCH_HOLE };
            let (offset, len) = (inner.start * g.unit(), (inner.end - inner.start) * g.unit());
            let res = join_all(targets.iter().map(|&i| {
                let fop = Fop::Fallocate {
                    gfid,
                    fh: fhs.fh(i),
                    mode,
                    offset,
                    len,
                };
                async move { (i, self.children[i].call(cx, fop).await) }
            }))
            .await;
            self.coded_end(gfid, tickets, res, size).await?;
        } else {
            self.finish(tickets, &[], false, false).await;
        }
        drop(_claim);
        // The parts of stripes at the ends: zeros written as any write
        // (each a change of its own, which takes the claim again).
        for r in ends.into_iter().filter(|r| r.start < r.end) {
            let zeros = bytes::Bytes::from(vec![0u8; (r.end - r.start) as usize]);
            self.coded_write_at(cx, (gfid, fh), r.start, zeros, false)
                .await?;
        }
        Ok(())
    }

    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE` on a dispersed file.
    pub(super) async fn coded_seek(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Lseek {
            gfid,
            fh,
            offset,
            whence,
        } = fop
        else {
            unreachable!("lseek only")
        };
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return Err(FsError::errno(libc::EINVAL));
        }
        let fhs = self.handles(cx, gfid, fh).await?;
        let live = fhs.live(&self.children);
        let good = self.good_fragments(cx, gfid, &self.up()).await?;
        let size = self.coded_size(cx, gfid, &good).await?;
        if offset >= size {
            return Err(FsError::errno(libc::ENXIO));
        }
        let g = self.coding().g;
        let k = g.k();
        if !(0..k).all(|i| good.contains(&i)) {
            // A data fragment away: no holes to tell of.
            return Ok(Reply::Offset(match whence {
                libc::SEEK_DATA => offset,
                _ => size,
            }));
        }
        let (unit, sb) = (g.unit(), g.stripe_bytes());
        let (stripe, within) = (offset / sb, offset % sb);
        let (at, o) = ((within / unit) as usize, within % unit);
        // Where fragment `i` holds the first byte at or after `offset`.
        let start = |i: usize| match i.cmp(&at) {
            std::cmp::Ordering::Less => (stripe + 1) * unit,
            std::cmp::Ordering::Equal => stripe * unit + o,
            std::cmp::Ordering::Greater => stripe * unit,
        };
        // The file's byte at `f` of fragment `i`.
        let file_offset = |i: usize, f: u64| (f / unit) * sb + i as u64 * unit + f % unit;
        let asked = join_all((0..k).map(|i| {
            let fh = if live.contains(&i) {
                fhs.fh(i)
            } else {
                ANON_FH
            };
            let fop = Fop::Lseek {
                gfid,
                fh,
                offset: start(i),
                whence,
            };
            async move { (i, self.children[i].call(cx, fop).await) }
        }))
        .await;
        let mut first: Option<u64> = None;
        for (i, r) in asked {
            let found = match r {
                Ok(Reply::Offset(f)) => Some(file_offset(i, f)),
                // Past the fragment's end: no data there; a hole at once.
                Err(e) if e.is(libc::ENXIO) => {
                    (whence == libc::SEEK_HOLE).then(|| file_offset(i, start(i)))
                }
                Ok(other) => return Err(mortar_core::fop::unexpected(other)),
                Err(e) => return Err(e),
            };
            if let Some(f) = found.filter(|&f| f < size) {
                first = Some(first.map_or(f, |x| x.min(f)));
            }
        }
        match (whence, first) {
            (libc::SEEK_HOLE, f) => Ok(Reply::Offset(f.unwrap_or(size).max(offset))),
            (_, Some(f)) => Ok(Reply::Offset(f.max(offset))),
            (_, None) => Err(FsError::errno(libc::ENXIO)),
        }
    }
}
