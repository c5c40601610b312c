//! A socket read in large pieces under TLS. rustls asks its socket for at
//! most 4 KiB at a time, so a 4 KiB write's record took two `recvfrom`s
//! and a 16 KiB record four; `ReadAhead` reads what the socket holds, up
//! to `AHEAD`, once, and hands it out from memory. An idle connection
//! holds no buffer: it is let go of when the socket has nothing more.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most read from the socket at once: a few TLS records.
const AHEAD: usize = 64 * 1024;

pub struct ReadAhead<S> {
    inner: S,
    /// Read from the socket and not handed out yet: `buf[pos..]`.
    buf: Vec<u8>,
    pos: usize,
}

impl<S> ReadAhead<S> {
    pub fn new(inner: S) -> ReadAhead<S> {
        ReadAhead {
            inner,
            buf: Vec::new(),
            pos: 0,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Hands out what is held; true if anything was.
    fn hand_out(&mut self, out: &mut ReadBuf<'_>) -> bool {
        let held = &self.buf[self.pos..];
        if held.is_empty() {
            return false;
        }
        let n = held.len().min(out.remaining());
        out.put_slice(&held[..n]);
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        true
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.hand_out(out) {
            return Poll::Ready(Ok(()));
        }
        if out.remaining() >= AHEAD {
            return Pin::new(&mut me.inner).poll_read(cx, out);
        }
        me.buf.reserve(AHEAD);
        let mut ahead = ReadBuf::uninit(&mut me.buf.spare_capacity_mut()[..AHEAD]);
        match Pin::new(&mut me.inner).poll_read(cx, &mut ahead) {
            Poll::Ready(Ok(())) => {
                let n = ahead.filled().len();
                // SAFETY: the inner read initialised the first `n` bytes
                // of the spare capacity, and `buf` was empty.
                unsafe { me.buf.set_len(n) };
                me.hand_out(out);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                // Nothing more for now: an idle connection keeps no buffer.
                me.buf = Vec::new();
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadAhead<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, b)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn small_reads_get_every_byte_in_order_from_one_large_one() {
        let (mut w, r) = tokio::io::duplex(256 * 1024);
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        w.write_all(&sent).await.unwrap();
        drop(w);
        let mut r = ReadAhead::new(r);
        let mut got = Vec::new();
        let mut piece = [0u8; 4096];
        loop {
            let n = r.read(&mut piece).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&piece[..n]);
        }
        assert_eq!(got, sent);
        assert!(r.buf.is_empty());
    }

    #[tokio::test]
    async fn an_idle_connection_holds_no_buffer() {
        let (mut w, r) = tokio::io::duplex(1024);
        let mut r = ReadAhead::new(r);
        w.write_all(b"abc").await.unwrap();
        let mut piece = [0u8; 2];
        assert_eq!(r.read(&mut piece).await.unwrap(), 2);
        assert_eq!(r.buf.len(), 3, "the rest is held");
        assert_eq!(r.read(&mut piece).await.unwrap(), 1);
        // Nothing more to read: the pending read lets the buffer go.
        let pending =
            tokio::time::timeout(std::time::Duration::from_millis(20), r.read(&mut piece));
        assert!(pending.await.is_err());
        assert_eq!(r.buf.capacity(), 0);
        // Writes pass through.
        let (a, mut b) = tokio::io::duplex(64);
        let mut a = ReadAhead::new(a);
        a.write_all(b"hello").await.unwrap();
        let mut five = [0u8; 5];
        b.read_exact(&mut five).await.unwrap();
        assert_eq!(&five, b"hello");
    }
}
