//! The memory a brick process lets frames in flight take (docs/security.md):
//! a connection's bytes are read only as far as the budget allows, so that
//! no number of peers announcing large frames and sending them slowly can
//! make it hold more than `BUDGET` of them.
//!
//! `Metered` sits between a connection's TLS stream and its frame reader
//! (`wire::Frames`) and follows the frame lengths in the bytes that pass.
//! A frame of at most `UNMETERED` bytes is read freely (most requests: a
//! lookup, a 4 KiB write); a longer one is read only once its length has
//! been granted from the process's budget, which gets it back when the
//! frame's last byte is read (the frame then goes to the file system).
//! Reads are cut at `UNMETERED` outside a granted frame, so a connection
//! holds at most that much of a frame not granted yet.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::PollSemaphore;

/// Bytes of large frames a brick process holds at once, over all its
/// connections.
pub const BUDGET: usize = 64 << 20;
/// Frames up to this long are read without asking the budget, and reads
/// outside a granted frame are cut at this length.
pub const UNMETERED: usize = 256 << 10;

/// The budget of this process.
pub fn process_budget() -> Arc<Semaphore> {
    static B: OnceLock<Arc<Semaphore>> = OnceLock::new();
    B.get_or_init(|| Arc::new(Semaphore::new(BUDGET))).clone()
}

/// A connection's reader that reads large frames only within the budget.
pub struct Metered<R> {
    inner: R,
    budget: PollSemaphore,
    /// The grant of the large frame being read.
    permit: Option<OwnedSemaphorePermit>,
    /// The length bytes of the next frame seen so far.
    head: [u8; 4],
    head_len: usize,
    /// Bytes of the current frame's body not read yet.
    left: usize,
    /// The length of the current frame when it needs a grant.
    large: Option<usize>,
}

impl<R> Metered<R> {
    pub fn new(inner: R, budget: Arc<Semaphore>) -> Metered<R> {
        Metered {
            inner,
            budget: PollSemaphore::new(budget),
            permit: None,
            head: [0; 4],
            head_len: 0,
            left: 0,
            large: None,
        }
    }

    /// Follows the frames in bytes just read.
    fn follow(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = self.left.min(bytes.len());
                self.left -= n;
                bytes = &bytes[n..];
                if self.left == 0 {
                    // The frame is in: the budget has it back.
                    self.permit = None;
                    self.large = None;
                }
                continue;
            }
            let n = (4 - self.head_len).min(bytes.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
            self.head_len += n;
            bytes = &bytes[n..];
            if self.head_len == 4 {
                self.head_len = 0;
                let len = u32::from_be_bytes(self.head) as usize;
                self.left = len;
                if len > UNMETERED {
                    self.large = Some(len);
                }
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Metered<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        let cap = match me.large {
            Some(len) if me.permit.is_none() => {
                // (A frame longer than the budget, which `wire` refuses
                // anyway, asks for all of it.)
                match ready!(me.budget.poll_acquire_many(cx, len.min(BUDGET) as u32)) {
                    Some(p) => me.permit = Some(p),
                    None => {
                        return Poll::Ready(Err(std::io::Error::other(
                            "the frame budget is closed",
                        )))
                    }
                }
                me.left
            }
            Some(_) => me.left,
            None => UNMETERED,
        };
        let cap = cap.min(buf.remaining());
        let mut part = buf.take(cap);
        ready!(Pin::new(&mut me.inner).poll_read(cx, &mut part))?;
        let n = part.filled().len();
        // `take` lends the unfilled part of `buf`: what was read is there.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        let start = buf.filled().len() - n;
        me.follow(&buf.filled()[start..]);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn frame(len: usize) -> Vec<u8> {
        let mut f = (len as u32).to_be_bytes().to_vec();
        f.resize(4 + len, 7);
        f
    }

    #[tokio::test]
    async fn small_frames_pass_without_the_budget() {
        let budget = Arc::new(Semaphore::new(0));
        let bytes: Vec<u8> = (0..100).flat_map(|_| frame(1000)).collect();
        let mut m = Metered::new(&bytes[..], budget);
        let mut got = Vec::new();
        m.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, bytes);
    }

    #[tokio::test]
    async fn a_large_frame_waits_for_the_budget_and_gives_it_back() {
        let budget = Arc::new(Semaphore::new(BUDGET));
        let len = 4 << 20;
        let (mut w, r) = tokio::io::duplex(1 << 20);
        let mut m = Metered::new(r, budget.clone());
        let writer = tokio::spawn(async move {
            w.write_all(&frame(len)).await.unwrap();
            w.write_all(&frame(10)).await.unwrap();
        });
        let mut got = vec![0u8; 4 + len + 14];
        m.read_exact(&mut got[..UNMETERED]).await.unwrap();
        // Past the unmetered start, the frame holds its length.
        m.read_exact(&mut got[UNMETERED..UNMETERED + 1])
            .await
            .unwrap();
        assert_eq!(budget.available_permits(), BUDGET - len);
        m.read_exact(&mut got[UNMETERED + 1..]).await.unwrap();
        assert_eq!(budget.available_permits(), BUDGET);
        writer.await.unwrap();
        assert_eq!(&got[4 + len..], &frame(10)[..]);
    }

    #[tokio::test]
    async fn large_frames_beyond_the_budget_wait_for_room() {
        let budget = Arc::new(Semaphore::new(BUDGET));
        let len = (BUDGET / 2) + 1;
        // Two peers' frames each need more than half the budget: the second
        // is read only once the first is in.
        let first = budget.clone().acquire_many_owned(len as u32).await.unwrap();
        let data = frame(len);
        let mut m = Metered::new(std::io::Cursor::new(data.clone()), budget.clone());
        let read = tokio::spawn(async move {
            let mut got = Vec::new();
            m.read_to_end(&mut got).await.map(|_| got)
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!read.is_finished(), "read past the budget");
        drop(first);
        assert_eq!(read.await.unwrap().unwrap(), data);
        assert_eq!(budget.available_permits(), BUDGET);
    }
}
