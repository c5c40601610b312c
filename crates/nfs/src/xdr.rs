//! XDR (RFC 4506), read from a received record and written into a reply.
//!
//! Every length a peer sends is checked against what the record still
//! holds before anything is taken, so a hostile length costs nothing: no
//! allocation is ever sized by the peer. Opaque data (a WRITE's bytes) is
//! a slice of the record, not a copy.

use bytes::{BufMut, Bytes, BytesMut};

/// The arguments could not be decoded (RPC's GARBAGE_ARGS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Garbage;

pub type Result<T> = std::result::Result<T, Garbage>;

/// The bytes of `n` rounded up to XDR's 4-byte unit.
pub fn padded(n: usize) -> usize {
    (n + 3) & !3
}

/// Reads XDR items from a record.
pub struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    pub fn new(buf: Bytes) -> Reader {
        Reader { buf, pos: 0 }
    }

    /// What is left unread.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.remaining() {
            return Err(Garbage);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }

    pub fn bool(&mut self) -> Result<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Garbage),
        }
    }

    /// `n` bytes of fixed-length opaque data (and their padding).
    pub fn fixed(&mut self, n: usize) -> Result<Bytes> {
        if padded(n) > self.remaining() {
            return Err(Garbage);
        }
        let b = self.buf.slice(self.pos..self.pos + n);
        self.pos += padded(n);
        Ok(b)
    }

    /// Variable-length opaque data of at most `max` bytes.
    pub fn opaque(&mut self, max: usize) -> Result<Bytes> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(Garbage);
        }
        self.fixed(n)
    }

    /// An optional item: a boolean, then the item if true.
    pub fn optional<T>(
        &mut self,
        item: impl FnOnce(&mut Reader) -> Result<T>,
    ) -> Result<Option<T>> {
        match self.bool()? {
            true => item(self).map(Some),
            false => Ok(None),
        }
    }
}

/// Writes XDR items into a reply.
#[derive(Default)]
pub struct Writer {
    buf: BytesMut,
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            buf: BytesMut::with_capacity(256),
        }
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.put_u32(v);
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.put_u64(v);
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u32(v as u32)
    }

    /// Fixed-length opaque data, padded.
    pub fn fixed(&mut self, b: &[u8]) -> &mut Self {
        self.buf.put_slice(b);
        self.buf.put_bytes(0, padded(b.len()) - b.len());
        self
    }

    /// Variable-length opaque data (or a string).
    pub fn opaque(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.fixed(b)
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn into_bytes(self) -> Bytes {
        self.buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_written_read_back() {
        let mut w = Writer::new();
        w.u32(7)
            .u64(1 << 40)
            .bool(true)
            .opaque(b"hello")
            .fixed(b"abc");
        let b = w.into_bytes();
        assert_eq!(b.len(), 4 + 8 + 4 + 4 + 8 + 4);
        let mut r = Reader::new(b);
        assert_eq!(r.u32(), Ok(7));
        assert_eq!(r.u64(), Ok(1 << 40));
        assert_eq!(r.bool(), Ok(true));
        assert_eq!(&r.opaque(5).unwrap()[..], b"hello");
        assert_eq!(&r.fixed(3).unwrap()[..], b"abc");
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.u32(), Err(Garbage));
    }

    #[test]
    fn a_hostile_length_is_refused_before_anything_is_taken() {
        let mut w = Writer::new();
        w.u32(u32::MAX).u32(1);
        let mut r = Reader::new(w.into_bytes());
        assert_eq!(r.opaque(usize::MAX).map(|_| ()), Err(Garbage));
        let mut w = Writer::new();
        w.u32(10).fixed(b"0123456789");
        assert_eq!(
            Reader::new(w.into_bytes()).opaque(9).map(|_| ()),
            Err(Garbage)
        );
        // A boolean is 0 or 1.
        let mut w = Writer::new();
        w.u32(2);
        assert_eq!(Reader::new(w.into_bytes()).bool(), Err(Garbage));
    }
}
