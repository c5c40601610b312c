//! Wire format (see docs/protocol.md). Every message is one frame:
//!
//! ```text
//! u32 BE frame length | u32 BE header length | header (postcard) | payload
//! ```
//!
//! The header is the message encoded with postcard (varint integers;
//! version 9 on; versions up to 8 spoke bincode 1, and a client of those is
//! refused in its own encoding, `legacy`). Bulk
//! data (a write's bytes, a read's answer) travels as the payload, outside
//! the encoded header: the sender writes the same buffer to every replica
//! without copying it, and the receiver hands a slice of the frame it read
//! to the file system. A frame longer than `MAX_FRAME`, or one that does not
//! decode as a `Msg`, ends the connection: a hostile or corrupt peer can cost
//! a connection but never a byte of data.

use bytes::Bytes;
use mortar_core::{Ctx, Fop, FsError, Reply};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// "MRTR": the first word of every handshake.
pub const MAGIC: u32 = 0x4d52_5452;
pub const VERSION: u32 = 13;
/// Largest frame accepted: a 16 MiB write plus headers.
pub const MAX_FRAME: u32 = 17 << 20;

/// Notice: another client waits for a lock on `gfid` that this one holds.
pub const NOTICE_CONTENTION: &str = "contention";
/// Notice: the identity or rights the brick gives this client changed
/// (`server.root-squash`, a credential's grant): drop every cache.
pub const NOTICE_RULES: &str = "rules";

#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Client → brick, first message: who we are and which brick we want.
    Hello {
        magic: u32,
        version: u32,
        brick: String,
        /// The volume's key, from the pool's own clients (self-heal,
        /// rebalance): `auth.allow` and `auth.reject` do not apply to them.
        key: Option<String>,
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
    /// Brick → client, unasked: a notice of kind `NOTICE_*`. Clients
    /// ignore kinds they do not know.
    Notice {
        kind: String,
        gfid: Option<mortar_core::Gfid>,
    },
    /// Brick → client: drop what you cache of object `gfid` (`name` None)
    /// or of `name` in directory `gfid`, then answer `Recalled { id }`;
    /// another client's change waits for that (docs/caching.md).
    Recall {
        id: u64,
        gfid: mortar_core::Gfid,
        name: Option<mortar_core::Name>,
        /// It ends the client's claim on the object: answer once the
        /// writes closed behind have landed.
        claim: bool,
    },
    /// Client → brick: recall `id` is done.
    Recalled {
        id: u64,
    },
    /// Client → brick: `fop` (a create or an open), then, where it
    /// succeeded, `Fop::Lock { gfid: fop.gfid(), wait: false, mark:
    /// Some(mark) }`, in one request: answered as two calls, `id` (the fop)
    /// and `id + 1` (the lock; ECANCELED when the fop failed).
    CallLocked {
        id: u64,
        cx: Ctx,
        fop: Fop,
        mark: u32,
    },
}

/// One encoded message: its frame header and encoded message in `head`,
/// its bulk data (shared, not copied) in `payload`.
pub struct Frame {
    pub head: Vec<u8>,
    pub payload: Bytes,
}

impl Frame {
    /// The frame as one buffer (for tests and tools; the data path never
    /// joins them).
    pub fn to_vec(&self) -> Vec<u8> {
        [&self.head[..], &self.payload[..]].concat()
    }
}

/// The bulk data of a message, carried beside its encoded header.
fn payload_of(msg: &Msg) -> Bytes {
    match msg {
        Msg::Call {
            fop: Fop::Write { data, .. },
            ..
        } => data.clone(),
        Msg::Answer {
            result: Ok(Reply::Data(d)),
            ..
        } => d.clone(),
        _ => Bytes::new(),
    }
}

pub fn encode(msg: &Msg) -> Frame {
    let head = postcard::to_extend(msg, vec![0u8; 8]).expect("encoding into a Vec cannot fail");
    let payload = payload_of(msg);
    frame(head, payload)
}

/// Puts the lengths in `head`'s first 8 bytes, before its encoded message.
fn frame(mut head: Vec<u8>, payload: Bytes) -> Frame {
    let head_len = (head.len() - 8) as u32;
    let frame_len = 4 + head_len + payload.len() as u32;
    head[..4].copy_from_slice(&frame_len.to_be_bytes());
    head[4..8].copy_from_slice(&head_len.to_be_bytes());
    Frame { head, payload }
}

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Decodes a frame body (everything after the frame length).
pub fn decode(body: Bytes) -> std::io::Result<Msg> {
    if body.len() < 4 {
        return Err(invalid("frame too short".into()));
    }
    let head_len = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
    if head_len > body.len() - 4 {
        return Err(invalid(format!(
            "header of {head_len} bytes does not fit its frame"
        )));
    }
    let head = &body[4..4 + head_len];
    let mut msg: Msg = match postcard::take_from_bytes::<Msg>(head) {
        Ok((msg, [])) => msg,
        Ok(_) => return Err(invalid("bytes after the message".into())),
        Err(e) => match legacy::hello_version(head) {
            Some(version) => Msg::Hello {
                magic: MAGIC,
                version,
                brick: String::new(),
                key: None,
            },
            None => return Err(invalid(format!("bad message: {e}"))),
        },
    };
    let payload = body.slice(4 + head_len..);
    match &mut msg {
        Msg::Call {
            fop: Fop::Write { data, .. },
            ..
        } => *data = payload,
        Msg::Answer {
            result: Ok(Reply::Data(d)),
            ..
        } => *d = payload,
        _ if !payload.is_empty() => {
            return Err(invalid("payload on a message that takes none".into()))
        }
        _ => {}
    }
    Ok(msg)
}

/// The handshake of versions up to 8, which spoke bincode 1 (varint
/// integers): enough of it to tell such a client which version it speaks,
/// and to refuse it in words it can read. Nothing else of it is decoded.
pub mod legacy {
    use super::*;

    /// The newest version that spoke bincode.
    pub const LAST: u32 = 8;

    /// The version of an old client's `Hello`: variant 0, the magic as a
    /// 4-byte varint (marker 0xfc, little-endian), the version as a varint
    /// of one byte. (Postcard's `Hello` never starts so: its magic is a
    /// LEB128 varint whose first byte is 0xd2.)
    pub fn hello_version(head: &[u8]) -> Option<u32> {
        let magic = MAGIC.to_le_bytes();
        match head {
            [0, 0xfc, m0, m1, m2, m3, v, ..] if [*m0, *m1, *m2, *m3] == magic && *v < 251 => {
                Some(*v as u32)
            }
            _ => None,
        }
    }

    /// `Msg::Refused { reason }` as an old client decodes it: variant 2,
    /// then the string (its length as a varint, then its bytes).
    pub fn refusal(reason: &str) -> Frame {
        let mut end = reason.len().min(250);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let reason = &reason.as_bytes()[..end];
        let mut head = vec![0u8; 8];
        head.extend_from_slice(&[2, reason.len() as u8]);
        head.extend_from_slice(reason);
        frame(head, Bytes::new())
    }
}

/// Largest first message (the handshake): a peer that has not said who it
/// is gets nothing large allocated.
pub const MAX_HELLO: u32 = 64 << 10;

/// Memory a frame gets before its bytes arrive: a 1 MiB write and its
/// header in one allocation; a larger frame grows as it comes, so a peer
/// that announces a large frame and sends nothing costs little.
const FIRST_ALLOCATION: usize = (1 << 20) + (64 << 10);

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Msg>> {
    read_frame_within(r, MAX_FRAME).await
}

/// Reads one frame of at most `limit` bytes; `Ok(None)` at a clean end of
/// stream.
pub async fn read_frame_within<R: AsyncRead + Unpin>(
    r: &mut R,
    limit: u32,
) -> std::io::Result<Option<Msg>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len);
    if len > limit {
        return Err(invalid(format!(
            "frame of {len} bytes exceeds the limit of {limit}"
        )));
    }
    let len = len as usize;
    let mut body = vec![0u8; len.min(FIRST_ALLOCATION)];
    fill(r, &mut body).await?;
    while body.len() < len {
        let at = body.len();
        body.resize(len.min(2 * at), 0);
        fill(r, &mut body[at..]).await?;
    }
    decode(Bytes::from(body)).map(Some)
}

/// How long the rest of a begun frame may go without a byte arriving: a
/// peer that announces a frame and then trickles or stops costs its
/// connection, not a buffer held for ever.
pub const FRAME_STALL: std::time::Duration = std::time::Duration::from_secs(45);

/// Fills `buf` from `r`, as long as bytes keep coming (`FRAME_STALL`).
async fn fill<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match tokio::time::timeout(FRAME_STALL, r.read(&mut buf[at..])).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(n)) => at += n,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "a frame begun, then no byte of it for {} s",
                        FRAME_STALL.as_secs()
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Frame bodies cut from a connection's bytes: a frame's bytes stay in
/// the reader's buffer until the whole frame is there, so that a reader
/// may be interrupted between any two of its reads and go on later.
struct Cut;

impl tokio_util::codec::Decoder for Cut {
    type Item = Msg;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut bytes::BytesMut) -> std::io::Result<Option<Msg>> {
        let Some(len) = src.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(len.try_into().unwrap());
        if len > MAX_FRAME {
            return Err(invalid(format!(
                "frame of {len} bytes exceeds the limit of {MAX_FRAME}"
            )));
        }
        let whole = 4 + len as usize;
        if src.len() < whole {
            // Room for the rest, at most doubling what has come: a frame
            // announced large costs memory only as its bytes arrive.
            let rest = whole - src.len();
            src.reserve(rest.min(src.len().max(FIRST_ALLOCATION)));
            return Ok(None);
        }
        let mut frame = src.split_to(whole);
        let body = frame.split_off(4);
        decode(body.freeze()).map(Some)
    }
}

/// The frames arriving on a connection once its handshake is done.
/// Unlike `read_frame`, `next` may be given up (a branch of a `select!`
/// that lost, a timer that fired) and called again without losing a byte:
/// a reader that dropped half a frame would take the rest of its bytes
/// for the next frame's length. Many frames come in with one read system
/// call (the buffer starts at 256 KiB); a frame begun whose bytes stop
/// coming for `FRAME_STALL` ends the connection.
pub struct Frames<R> {
    framed: tokio_util::codec::FramedRead<R, Cut>,
    /// When the buffer was last seen to grow (or be empty), and its length.
    progress: (tokio::time::Instant, usize),
}

impl<R: AsyncRead + Unpin> Frames<R> {
    pub fn new(r: R) -> Frames<R> {
        Frames {
            framed: tokio_util::codec::FramedRead::with_capacity(r, Cut, 256 << 10),
            progress: (tokio::time::Instant::now(), 0),
        }
    }

    /// The next frame; `Ok(None)` at a clean end of stream.
    pub async fn next(&mut self) -> std::io::Result<Option<Msg>> {
        use futures_util::StreamExt;
        loop {
            let deadline = self.progress.0 + FRAME_STALL;
            match tokio::time::timeout_at(deadline, self.framed.next()).await {
                Ok(frame) => {
                    self.progress = (tokio::time::Instant::now(), self.framed.read_buffer().len());
                    return frame.transpose();
                }
                Err(_) => {
                    let len = self.framed.read_buffer().len();
                    if len != 0 && len == self.progress.1 {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "a frame begun, then no byte of it for {} s",
                                FRAME_STALL.as_secs()
                            ),
                        ));
                    }
                    self.progress = (tokio::time::Instant::now(), len);
                }
            }
        }
    }
}

pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, msg: &Msg) -> std::io::Result<()> {
    write_encoded(w, &encode(msg)).await
}

/// Writes a frame encoded already.
pub async fn write_encoded<W: AsyncWrite + Unpin>(w: &mut W, f: &Frame) -> std::io::Result<()> {
    w.write_all(&f.head).await?;
    w.write_all(&f.payload).await?;
    w.flush().await
}

/// Writes frames from a channel to a connection, gathering what is ready
/// into one flush. The payload goes straight from the shared buffer to the
/// socket.
pub async fn pump<W: AsyncWrite + Unpin>(
    wr: W,
    mut rx: tokio::sync::mpsc::Receiver<Frame>,
) -> std::io::Result<()> {
    let mut w = tokio::io::BufWriter::with_capacity(256 << 10, wr);
    while let Some(f) = rx.recv().await {
        w.write_all(&f.head).await?;
        w.write_all(&f.payload).await?;
        while let Ok(f) = rx.try_recv() {
            w.write_all(&f.head).await?;
            w.write_all(&f.payload).await?;
        }
        w.flush().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::{Gfid, Name};

    /// A client of version 8 (bincode, varint integers) is recognised by
    /// its `Hello`, and refused in words it decodes: variant 2 (`Refused`),
    /// the reason's length, its bytes.
    #[test]
    fn an_old_clients_hello_is_known_and_refused_in_its_encoding() {
        // Hello { magic, version: 8, brick: "/b", key: None } as bincode
        // 1.3 with varint integers wrote it.
        let mut old = vec![0u8, 0xfc];
        old.extend_from_slice(&MAGIC.to_le_bytes());
        old.extend_from_slice(&[8, 2, b'/', b'b', 0]);
        let mut body = (old.len() as u32).to_be_bytes().to_vec();
        body.extend_from_slice(&old);
        match decode(Bytes::from(body)).unwrap() {
            Msg::Hello { magic, version, .. } => assert_eq!((magic, version), (MAGIC, 8)),
            other => panic!("{other:?}"),
        }
        let f = legacy::refusal("upgrade");
        assert_eq!(
            &f.head[8..],
            &[2, 7, b'u', b'p', b'g', b'r', b'a', b'd', b'e']
        );
        assert_eq!(
            f.head[..4],
            13u32.to_be_bytes(),
            "frame length: the header length and the header"
        );
        // A long reason is cut at a character's boundary, within a
        // one-byte length.
        let f = legacy::refusal(&"é".repeat(200));
        assert_eq!(f.head[9], 250);
        assert!(std::str::from_utf8(&f.head[10..]).is_ok());
        // This version's Hello is never taken for an old one.
        let hello = encode(&Msg::Hello {
            magic: MAGIC,
            version: VERSION,
            brick: "/b".into(),
            key: None,
        });
        assert_eq!(legacy::hello_version(&hello.head[8..]), None);
        match decode(Bytes::from(hello.to_vec()[4..].to_vec())).unwrap() {
            Msg::Hello { version, .. } => assert_eq!(version, VERSION),
            other => panic!("{other:?}"),
        }
    }

    /// Bytes after a message's end are refused, as bincode refused them.
    #[test]
    fn bytes_after_a_message_are_refused() {
        let mut f = encode(&Msg::Ping { id: 1 });
        f.head.push(0);
        let n = (f.head.len() - 8) as u32;
        f.head[4..8].copy_from_slice(&n.to_be_bytes());
        let body = f.to_vec()[4..].to_vec();
        assert!(decode(Bytes::from(body)).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_begun_and_left_unfinished_ends_its_connection() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        // Announces 1 KiB, sends ten bytes of it, then nothing.
        client.write_all(&1024u32.to_be_bytes()).await.unwrap();
        client.write_all(&[0u8; 10]).await.unwrap();
        let t = tokio::time::Instant::now();
        let e = read_frame(&mut server).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= FRAME_STALL, "{:?}", t.elapsed());
        // A slow peer that keeps sending is waited for.
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        let msg = encode(&Msg::Ping { id: 9 }).to_vec();
        let slow = tokio::spawn(async move {
            for b in msg {
                tokio::time::sleep(FRAME_STALL / 2).await;
                client.write_all(&[b]).await.unwrap();
            }
            client
        });
        assert!(matches!(
            read_frame(&mut server).await.unwrap(),
            Some(Msg::Ping { id: 9 })
        ));
        drop(slow.await);
    }

    /// A reader given up between two reads (a timer fired in its
    /// `select!`) goes on where it was: the bytes of a frame half read are
    /// kept, and the next frame is read whole.
    #[tokio::test]
    async fn frames_survive_a_reader_given_up_halfway() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut frames = Frames::new(server);
        let data = Bytes::from(vec![5u8; 300_000]);
        let msg = Msg::Answer {
            id: 1,
            result: Ok(Reply::Data(data.clone())),
        };
        let bytes = encode(&msg).to_vec();
        let (first, rest) = bytes.split_at(100_000);
        client.write_all(first).await.unwrap();
        for _ in 0..3 {
            let r = tokio::time::timeout(std::time::Duration::from_millis(20), frames.next());
            assert!(r.await.is_err(), "a frame half sent is not read");
        }
        client.write_all(rest).await.unwrap();
        client
            .write_all(&encode(&Msg::Pong { id: 2 }).to_vec())
            .await
            .unwrap();
        match frames.next().await.unwrap() {
            Some(Msg::Answer {
                id: 1,
                result: Ok(Reply::Data(d)),
            }) => assert_eq!(d, data),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            frames.next().await.unwrap(),
            Some(Msg::Pong { id: 2 })
        ));
        drop(client);
        assert!(frames.next().await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn frames_begun_and_left_unfinished_end_their_connection() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut frames = Frames::new(server);
        client.write_all(&1024u32.to_be_bytes()).await.unwrap();
        client.write_all(&[0u8; 10]).await.unwrap();
        let t = tokio::time::Instant::now();
        let e = frames.next().await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= FRAME_STALL, "{:?}", t.elapsed());
        // A slow peer that keeps sending is waited for; an idle one too.
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut frames = Frames::new(server);
        let msg = encode(&Msg::Ping { id: 9 }).to_vec();
        let slow = tokio::spawn(async move {
            tokio::time::sleep(FRAME_STALL * 3).await;
            for b in msg {
                tokio::time::sleep(FRAME_STALL / 2).await;
                client.write_all(&[b]).await.unwrap();
            }
            client
        });
        assert!(matches!(
            frames.next().await.unwrap(),
            Some(Msg::Ping { id: 9 })
        ));
        drop(slow.await);
        // Hostile lengths are refused as by `read_frame`.
        let huge = (MAX_FRAME + 1).to_be_bytes();
        let mut frames = Frames::new(&huge[..]);
        assert!(frames.next().await.is_err());
        // A stream that ends inside a frame is an error, not a clean end.
        let bytes = encode(&Msg::Pong { id: 1 }).to_vec();
        let mut frames = Frames::new(&bytes[..bytes.len() - 1]);
        assert!(frames.next().await.is_err());
    }

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
        let f = encode(&msg);
        let bytes = [f.head, f.payload.to_vec()].concat();
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
    async fn a_frame_larger_than_its_first_allocation_grows_as_it_comes() {
        let data: Bytes = (0..(5u32 << 20) + 3).map(|i| (i % 253) as u8).collect();
        let msg = Msg::Call {
            id: 1,
            cx: Ctx::root(),
            fop: Fop::Write {
                gfid: Gfid::ROOT,
                fh: 1,
                offset: 0,
                data: data.clone(),
                grow: 0,
                reserve: false,
            },
        };
        let f = encode(&msg);
        let bytes = [f.head, f.payload.to_vec()].concat();
        match read_frame(&mut &bytes[..]).await.unwrap().unwrap() {
            Msg::Call {
                fop: Fop::Write { data: got, .. },
                ..
            } => assert!(got == data),
            other => panic!("{other:?}"),
        }
        // Cut short: an error, not a frame.
        assert!(read_frame(&mut &bytes[..bytes.len() - 1]).await.is_err());
        // Within a smaller limit (a handshake's), refused.
        assert!(read_frame_within(&mut &bytes[..], MAX_HELLO).await.is_err());
    }

    #[tokio::test]
    async fn hostile_frames_are_refused() {
        // Too long.
        let mut r = &(MAX_FRAME + 1).to_be_bytes()[..];
        assert!(read_frame(&mut r).await.is_err());
        // Garbage body, and a header that claims more than the frame holds.
        let mut bad = 9u32.to_be_bytes().to_vec();
        bad.extend_from_slice(&5u32.to_be_bytes());
        bad.extend_from_slice(&[0xff; 5]);
        assert!(read_frame(&mut &bad[..]).await.is_err());
        let mut bad = 5u32.to_be_bytes().to_vec();
        bad.extend_from_slice(&99u32.to_be_bytes());
        bad.push(0);
        assert!(read_frame(&mut &bad[..]).await.is_err());
        // A name with a slash, smuggled in a well-formed frame.
        let good = encode(&Msg::Call {
            id: 1,
            cx: Ctx::root(),
            fop: Fop::Lookup {
                parent: Gfid::ROOT,
                name: Name::new(&b"ab"[..]).unwrap(),
            },
        })
        .to_vec();
        let mut evil = good.clone();
        let pos = evil.windows(2).position(|w| w == b"ab").unwrap();
        evil[pos + 1] = b'/';
        assert!(read_frame(&mut &evil[..]).await.is_err());
        // Truncated frame.
        assert!(read_frame(&mut &good[..good.len() - 1]).await.is_err());
    }

    #[tokio::test]
    async fn bulk_data_travels_as_payload() {
        let data = Bytes::from(vec![7u8; 100_000]);
        let msg = Msg::Call {
            id: 3,
            cx: Ctx::root(),
            fop: Fop::Write {
                gfid: Gfid::ROOT,
                fh: 1,
                offset: 4096,
                data: data.clone(),
                grow: 0,
                reserve: false,
            },
        };
        let f = encode(&msg);
        assert!(f.head.len() < 100, "data must not be in the header");
        assert_eq!(
            f.payload.as_ptr(),
            data.as_ptr(),
            "the payload is the caller's buffer"
        );
        let bytes = [f.head, f.payload.to_vec()].concat();
        match read_frame(&mut &bytes[..]).await.unwrap().unwrap() {
            Msg::Call {
                fop:
                    Fop::Write {
                        data: d,
                        offset: 4096,
                        ..
                    },
                ..
            } => assert_eq!(d, data),
            other => panic!("{other:?}"),
        }
        // A payload on a message that takes none is refused.
        let mut f = encode(&Msg::Ping { id: 1 });
        f.payload = Bytes::from_static(b"junk");
        let len = (f.head.len() - 4 + 4) as u32;
        f.head[..4].copy_from_slice(&len.to_be_bytes());
        let bytes = [f.head, f.payload.to_vec()].concat();
        assert!(read_frame(&mut &bytes[..]).await.is_err());
    }
}
