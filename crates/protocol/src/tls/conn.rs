//! A connection, TLS or in the clear, read and written as one stream.

use std::io;
use tokio::net::TcpStream;

/// A connection after its TLS handshake, either side (its socket read
/// ahead: `ReadAhead`).
pub type Stream = tokio_rustls::TlsStream<super::ReadAhead<TcpStream>>;

/// A brick's connection: TLS, or in the clear on a volume whose
/// `server.ssl` is off.
pub enum Conn {
    Tls(Box<Stream>),
    Plain(TcpStream),
}

impl Conn {
    pub fn is_plain(&self) -> bool {
        matches!(self, Conn::Plain(_))
    }

    /// This end's address: what the brick logs as the connection's peer.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        match self {
            Conn::Tls(s) => s.get_ref().0.get_ref().local_addr(),
            Conn::Plain(s) => s.local_addr(),
        }
    }
}

/// The first byte of a TLS handshake record: what tells a client that
/// speaks TLS from one that does not, on a port that takes both.
pub const TLS_HANDSHAKE: u8 = 0x16;

impl tokio::io::AsyncRead for Conn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
            Conn::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Conn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
            Conn::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Conn::Plain(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Tls(s) => s.is_write_vectored(),
            Conn::Plain(s) => s.is_write_vectored(),
        }
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
            Conn::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
            Conn::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}
