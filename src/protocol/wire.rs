//! Wire format (see docs/protocol.md). Every message is one frame: a 4-byte
//! big-endian length, then the message encoded with bincode (varint
//! integers, little-endian). A frame longer than `MAX_FRAME`, or one that
//! does not decode as a `Msg`, ends the connection: a hostile or corrupt
//! peer can cost a connection but never a byte of data.

use crate::core::{Ctx, Fop, FsError, Reply};
use bincode::Options;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// "MRTR": the first word of every handshake.
pub const MAGIC: u32 = 0x4d52_5452;
pub const VERSION: u32 = 1;
/// Largest frame accepted: a 16 MiB write plus headers.
pub const MAX_FRAME: u32 = 17 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Client → brick, first message: who we are and which brick we want.
    Hello {
        magic: u32,
        version: u32,
        brick: String,
    },
    /// Brick → client: handshake accepted.
    Welcome {
        version: u32,
    },
    /// Brick → client: handshake refused, with the reason; the brick closes.
    Refused {
        reason: String,
    },
    /// Client → brick: one request. Ids are chosen by the client and may be
    /// answered in any order.
    Call {
        id: u64,
        cx: Ctx,
        fop: Fop,
    },
    /// Brick → client: the answer to `Call { id }`.
    Answer {
        id: u64,
        result: Result<Reply, FsError>,
    },
    Ping {
        id: u64,
    },
    Pong {
        id: u64,
    },
    /// Brick → client, unasked: a notice (cache invalidation, lock contention).
    /// Reserved in version 1; clients ignore kinds they do not know.
    Notice {
        kind: String,
        gfid: Option<crate::core::Gfid>,
    },
}

fn codec() -> impl Options {
    bincode::DefaultOptions::new().with_limit(MAX_FRAME as u64)
}

pub fn encode(msg: &Msg) -> Vec<u8> {
    let mut buf = vec![0u8; 4];
    codec()
        .serialize_into(&mut buf, msg)
        .expect("encoding into a Vec cannot fail");
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf
}

pub fn decode(body: &[u8]) -> std::io::Result<Msg> {
    codec().deserialize(body).map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad message: {e}"))
    })
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Msg>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds the limit of {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    decode(&body).map(Some)
}

pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, msg: &Msg) -> std::io::Result<()> {
    w.write_all(&encode(msg)).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Gfid, Name};

    #[tokio::test]
    async fn frames_round_trip() {
        let msg = Msg::Call {
            id: 7,
            cx: Ctx::root(),
            fop: Fop::Lookup {
                parent: Gfid::ROOT,
                name: Name::new(&b"a"[..]).unwrap(),
            },
        };
        let bytes = encode(&msg);
        let mut r = &bytes[..];
        match read_frame(&mut r).await.unwrap().unwrap() {
            Msg::Call {
                id: 7,
                fop: Fop::Lookup { name, .. },
                ..
            } => assert_eq!(name.as_bytes(), b"a"),
            other => panic!("{other:?}"),
        }
        assert!(read_frame(&mut r).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn hostile_frames_are_refused() {
        // Too long.
        let mut r = &(MAX_FRAME + 1).to_be_bytes()[..];
        assert!(read_frame(&mut r).await.is_err());
        // Garbage body.
        let mut bad = 5u32.to_be_bytes().to_vec();
        bad.extend_from_slice(&[0xff; 5]);
        assert!(read_frame(&mut &bad[..]).await.is_err());
        // A name with a slash, smuggled in a well-formed frame.
        let good = encode(&Msg::Call {
            id: 1,
            cx: Ctx::root(),
            fop: Fop::Lookup {
                parent: Gfid::ROOT,
                name: Name::new(&b"ab"[..]).unwrap(),
            },
        });
        let mut evil = good.clone();
        let pos = evil.windows(2).position(|w| w == b"ab").unwrap();
        evil[pos + 1] = b'/';
        assert!(read_frame(&mut &evil[..]).await.is_err());
        // Truncated frame.
        assert!(read_frame(&mut &good[..good.len() - 1]).await.is_err());
    }
}
