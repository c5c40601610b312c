//! TLS 1.3 with mutual authentication on every connection: the brick
//! protocol, the management requests of the CLI, of mounts and bricks, and
//! the Raft messages between daemons (docs/security.md).
//!
//! Every process holds one **credential** (a PEM file: its certificate,
//! the pool CA's certificate, its private key), installed at start
//! (`install_file`, read again when the file changes) and used for every
//! connection it opens (`connect`) or accepts (`Acceptor`). A certificate
//! says what its holder is by the name it is valid for: a server of the
//! pool (`server.mortar`: daemons and bricks), an administrator
//! (`admin.mortar`: the CLI and mounts on a server) or a volume's client
//! (`client.mortar`). Clients check that a server's certificate is the
//! pool's, a server's, and on the pool's record once they know it
//! (`set_record`); servers check that a client's is the pool's, and learn
//! its role from it. Certificates are made by the pool's authority
//! (`mgmt::authority`).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

mod conn;
mod read_ahead;
pub use conn::{Conn, Stream, TLS_HANDSHAKE};
pub use read_ahead::ReadAhead;

/// The name every server certificate is valid for: clients check it
/// instead of a host name, which a pool's servers are reached by many of.
pub const SERVER_NAME: &str = "server.mortar";
/// The name of an administrator's certificate.
pub const ADMIN_NAME: &str = "admin.mortar";
/// The name of a read-only administrator's certificate (`pool credentials
/// create NAME ro`): it may look, not change.
pub const READER_NAME: &str = "reader.mortar";
/// The name of a volume's client credential (`volume credentials`): which
/// volume, and whether read-only, the pool's state says by its
/// fingerprint.
pub const CLIENT_NAME: &str = "client.mortar";

/// Where the CLI and mounts on a server find its administrator credential,
/// unless told otherwise (`--credential`, `MORTAR_CREDENTIAL`).
pub const DEFAULT_CREDENTIAL: &str = "/var/lib/mortar/tls/admin.pem";
/// The environment variable naming a credential file.
pub const CREDENTIAL_ENV: &str = "MORTAR_CREDENTIAL";

/// What a certificate's holder is to the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A daemon or a brick of the pool.
    Server,
    /// An administrator: the CLI, a mount on a server.
    Admin,
    /// A client of one volume (`volume credentials VOL create NAME`): it
    /// may mount that volume and nothing else.
    Client,
    /// A read-only administrator (`pool credentials create NAME ro`): it
    /// may ask what the CLI shows, change nothing, mount nothing.
    Reader,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Admin => "admin",
            Role::Client => "client",
            Role::Reader => "reader",
        }
    }
}

/// Who is at the other end of a connection, by its certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub role: Role,
    /// SHA-256 of its certificate: how the pool's state names a client
    /// credential.
    pub fingerprint: [u8; 32],
}

/// A fingerprint as the pool's state and the CLI write it.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string (None: not hex).
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The role a certificate (already verified to be the pool's) is valid for.
pub fn role_of(cert: &CertificateDer<'_>) -> Option<Role> {
    let ee = webpki::EndEntityCert::try_from(cert).ok()?;
    let valid = |name: &'static str| {
        ServerName::try_from(name)
            .ok()
            .is_some_and(|n| ee.verify_is_valid_for_subject_name(&n).is_ok())
    };
    if valid(SERVER_NAME) {
        Some(Role::Server)
    } else if valid(ADMIN_NAME) {
        Some(Role::Admin)
    } else if valid(CLIENT_NAME) {
        Some(Role::Client)
    } else if valid(READER_NAME) {
        Some(Role::Reader)
    } else {
        None
    }
}

/// SHA-256 of a certificate.
pub fn fingerprint(cert: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, cert);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// One holder's certificate, the pool CA's, and the holder's key.
pub struct Credential {
    pub cert: CertificateDer<'static>,
    pub ca: CertificateDer<'static>,
    pub key: PrivateKeyDer<'static>,
}

/// Why a credential cannot be read or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the credential {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// What is wrong with the credential in file `path`.
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<Error>,
    },
    #[error("not a credential: {0}")]
    NotACredential(String),
    #[error("the pool CA's certificate is not usable: {0}")]
    UnusableCa(#[source] rustls::Error),
    #[error("the credential's key does not fit its certificate: {0}")]
    KeyMismatch(#[source] rustls::Error),
    /// The pool CA's certificate cannot verify peers.
    #[error("{0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("{0}")]
    Tls(#[from] rustls::Error),
}

/// For the callers that still speak in strings (the management daemon).
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

impl Credential {
    /// Reads a credential from PEM: the holder's certificate first, the
    /// CA's last, and one private key.
    pub fn from_pem(pem: &[u8]) -> Result<Credential, Error> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|e| Error::NotACredential(e.to_string()))?;
        if certs.len() < 2 {
            return Err(Error::NotACredential(format!(
                "{} certificate(s), where its own and the pool CA's are needed",
                certs.len()
            )));
        }
        let key = PrivateKeyDer::from_pem_slice(pem)
            .map_err(|e| Error::NotACredential(format!("no private key ({e})")))?;
        Ok(Credential {
            cert: certs[0].clone(),
            ca: certs[certs.len() - 1].clone(),
            key,
        })
    }

    /// Reads a credential file, with an error that says which and why.
    pub fn load(path: &Path) -> Result<Credential, Error> {
        let pem = std::fs::read(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Credential::from_pem(&pem).map_err(|e| Error::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    }

    pub fn role(&self) -> Option<Role> {
        role_of(&self.cert)
    }

    /// The SHA-256 of its certificate, in hex: how the pool's state and
    /// the CLI name it.
    pub fn fingerprint_hex(&self) -> String {
        hex(&fingerprint(&self.cert))
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, Error> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone()).map_err(Error::UnusableCa)?;
        Ok(Arc::new(roots))
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configurations made from the installed credential.
struct Context {
    /// Takes a server whose certificate is on the pool's record, if this
    /// process knows it (`set_record`), else any of the pool's CA.
    client: Arc<ClientConfig>,
    /// Takes any server certificate of the pool's CA.
    client_ca: Arc<ClientConfig>,
    /// Accepts only clients with a certificate of the pool.
    server: Option<Arc<ServerConfig>>,
    /// Also accepts clients without a certificate (the daemon's port,
    /// where a server joining the pool introduces itself).
    server_open: Option<Arc<ServerConfig>>,
}

impl Context {
    fn new(cred: &Credential) -> Result<Context, Error> {
        let roots = cred.roots()?;
        let webpki =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
                .build()?;
        let client = |verifier: Arc<dyn ServerCertVerifier>| {
            ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(&[&rustls::version::TLS13])?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_client_auth_cert(vec![cred.cert.clone()], cred.key.clone_key())
                .map(|mut c| {
                    // Every handshake checks the server against the record
                    // as it is then (a resumed session would skip it); a
                    // connection lives long, a full handshake is cheap.
                    c.resumption = rustls::client::Resumption::disabled();
                    Arc::new(c)
                })
                .map_err(Error::KeyMismatch)
        };
        let client_ca = client(webpki.clone())?;
        let client = client(Arc::new(OnRecord { pool: webpki }))?;
        let (server, server_open) = if cred.role() == Some(Role::Server) {
            let make = |open: bool| -> Result<Arc<ServerConfig>, Error> {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
                let verifier = if open {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                }
                .build()?;
                let cfg = ServerConfig::builder_with_provider(provider())
                    .with_protocol_versions(&[&rustls::version::TLS13])?
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(vec![cred.cert.clone()], cred.key.clone_key())?;
                Ok(Arc::new(cfg))
            };
            (Some(make(false)?), Some(make(true)?))
        } else {
            (None, None)
        };
        Ok(Context {
            client,
            client_ca,
            server,
            server_open,
        })
    }
}

/// A client configuration for `cred`, for callers that run TLS
/// themselves (tests that speak the brick protocol by hand).
pub fn client_config(cred: &Credential) -> Result<Arc<ClientConfig>, Error> {
    Ok(Context::new(cred)?.client)
}

static CONTEXT: RwLock<Option<Arc<Context>>> = RwLock::new(None);

/// The credential file installed, watched for a new credential in it.
static WATCHED: Mutex<Option<Watched>> = Mutex::new(None);

/// How often a credential file is looked at again, at most: before a
/// connection is opened or accepted, not more than once in this time.
const RECHECK: Duration = Duration::from_secs(1);

struct Watched {
    path: PathBuf,
    stamp: Option<Stamp>,
    checked: Instant,
}

/// What tells that a file was replaced or written: its inode (a rename
/// over it), its size and its modification time.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp(u64, u64, i64, i64);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp(m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// Makes `cred` this process's credential, for every connection from now
/// on. No file is watched.
pub fn install(cred: &Credential) -> Result<(), Error> {
    let ctx = Context::new(cred)?;
    *WATCHED.lock().unwrap() = None;
    *CONTEXT.write().unwrap() = Some(Arc::new(ctx));
    Ok(())
}

/// Installs the credential at `path`, and watches it: a new credential
/// written there (a rotation, docs/security.md) is used for the
/// connections opened or accepted after, within a second; those open go
/// on.
pub fn install_file(path: &Path) -> Result<(), Error> {
    let mut watched = WATCHED.lock().unwrap();
    let before = stamp(path);
    let ctx = Context::new(&Credential::load(path)?)?;
    *CONTEXT.write().unwrap() = Some(Arc::new(ctx));
    *watched = Some(Watched {
        path: path.to_path_buf(),
        stamp: before,
        checked: Instant::now(),
    });
    Ok(())
}

/// Takes the watched credential file's new contents, if it has any. A
/// file that cannot be used (half written by hand, another pool's key)
/// leaves the credential in use as it is, with a warning.
fn reload_if_changed() {
    let mut guard = WATCHED.lock().unwrap();
    let Some(w) = guard.as_mut() else { return };
    if w.checked.elapsed() < RECHECK {
        return;
    }
    w.checked = Instant::now();
    let now = stamp(&w.path);
    if now == w.stamp || now.is_none() {
        return;
    }
    w.stamp = now;
    match Credential::load(&w.path).and_then(|c| Context::new(&c)) {
        Ok(ctx) => {
            *CONTEXT.write().unwrap() = Some(Arc::new(ctx));
            tracing::info!(credential = %w.path.display(), "the credential file changed: new connections use the new one");
        }
        Err(e) => tracing::warn!(
            credential = %w.path.display(),
            "the credential file changed but cannot be used; the one read before stays in use: {e}"
        ),
    }
}

/// The credential file a client uses: `given`, else `$MORTAR_CREDENTIAL`,
/// else the server's administrator credential.
pub fn credential_path(given: Option<&Path>) -> std::path::PathBuf {
    match given {
        Some(p) => p.to_path_buf(),
        None => std::env::var_os(CREDENTIAL_ENV)
            .filter(|v| !v.is_empty())
            .map(Into::into)
            .unwrap_or_else(|| DEFAULT_CREDENTIAL.into()),
    }
}

fn context() -> io::Result<Arc<Context>> {
    reload_if_changed();
    CONTEXT.read().unwrap().clone().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "no credential: this process cannot open a connection to the pool",
        )
    })
}

/// Why a handshake failed, in words an operator can act on.
fn handshake_error(side: &str, e: io::Error) -> io::Error {
    let text = e.to_string();
    let why = if text.contains("UnknownIssuer")
        || text.contains("UnknownCA")
        || text.contains("unknown ca")
    {
        format!("{text} (the certificates are of different pools)")
    } else if text.contains("CertificateRequired") || text.contains("certificate required") {
        format!("{text} (a credential of the pool is needed)")
    } else if text.contains("NotValidForName") {
        format!("{text} (the peer's certificate is not a server's)")
    } else {
        text
    };
    io::Error::new(
        if e.kind() == io::ErrorKind::InvalidData {
            io::ErrorKind::PermissionDenied
        } else {
            e.kind()
        },
        format!("TLS handshake {side} failed: {why}"),
    )
}

/// Opens TLS on a new connection to a server of the pool, with this
/// process's credential: a server whose certificate is on the pool's
/// record, if this process knows it.
pub async fn connect(tcp: TcpStream) -> io::Result<Stream> {
    connect_with(tcp, |ctx| ctx.client.clone()).await
}

/// `connect`, taking any server certificate of the pool's CA: for what
/// gives a client the record (a mount's volume description), so that one
/// that missed a rotation learns the new one; and to tell a server that
/// it left the pool.
pub async fn connect_any_of_ca(tcp: TcpStream) -> io::Result<Stream> {
    connect_with(tcp, |ctx| ctx.client_ca.clone()).await
}

async fn connect_with(
    tcp: TcpStream,
    config: impl Fn(&Context) -> Arc<ClientConfig>,
) -> io::Result<Stream> {
    let ctx = context()?;
    let name = ServerName::try_from(SERVER_NAME).expect("a valid name");
    tokio_rustls::TlsConnector::from(config(&ctx))
        .connect(name, ReadAhead::new(tcp))
        .await
        .map(Stream::Client)
        .map_err(|e| handshake_error("with the server", e))
}

/// Opens TLS to a server that is not of the pool yet, without a
/// certificate of our own: the server's certificate must be the one whose
/// SHA-256 starts with `pin` (from its join token).
pub async fn connect_pinned(tcp: TcpStream, pin: Vec<u8>) -> io::Result<Stream> {
    let provider = provider();
    let cfg = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| io::Error::other(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { pin, provider }))
        .with_no_client_auth();
    let name = ServerName::try_from(SERVER_NAME).expect("a valid name");
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, ReadAhead::new(tcp))
        .await
        .map(Stream::Client)
        .map_err(|e| handshake_error("with the joining server", e))
}

/// Who may connect to a server's port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clients {
    /// Only holders of a certificate of the pool.
    Pool,
    /// Anyone; `accept` says whether the client showed a certificate.
    Anyone,
}

/// The TLS side of a server's port: the process's server credential at
/// each connection (a new one written to its file is taken,
/// `install_file`), or the one it was made with while the process holds
/// none (a test that is also a client).
#[derive(Clone)]
pub struct Acceptor {
    clients: Clients,
    made_with: Arc<ServerConfig>,
}

/// The acceptor of a server's port; fails if this process holds no
/// server credential.
pub fn acceptor(clients: Clients) -> io::Result<Acceptor> {
    let made_with = Acceptor::config(clients)?
        .ok_or_else(|| io::Error::other("this process holds no server credential"))?;
    Ok(Acceptor { clients, made_with })
}

impl Acceptor {
    fn config(clients: Clients) -> io::Result<Option<Arc<ServerConfig>>> {
        let ctx = context()?;
        Ok(match clients {
            Clients::Pool => ctx.server.clone(),
            Clients::Anyone => ctx.server_open.clone(),
        })
    }

    /// Completes TLS on an accepted connection; returns who the client is
    /// (None: no certificate, with `Clients::Anyone`).
    pub async fn accept(&self, tcp: TcpStream) -> io::Result<(Stream, Option<Peer>)> {
        let cfg = Acceptor::config(self.clients)
            .ok()
            .flatten()
            .unwrap_or_else(|| self.made_with.clone());
        let s = tokio_rustls::TlsAcceptor::from(cfg)
            .accept(ReadAhead::new(tcp))
            .await
            .map_err(|e| handshake_error("with a client", e))?;
        let peer = s
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| {
                Some(Peer {
                    role: role_of(c)?,
                    fingerprint: fingerprint(c),
                })
            });
        if self.clients == Clients::Pool && peer.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the client's certificate is the pool's but names no role",
            ));
        }
        Ok((Stream::Server(s), peer))
    }
}

/// The server certificates this process takes (SHA-256): those on the
/// pool's record, once it knows them (the daemon from the pool's state, a
/// mount from its volume's description); None: any of the pool's CA.
static RECORD: RwLock<Option<Arc<std::collections::BTreeSet<[u8; 32]>>>> = RwLock::new(None);

/// Sets the record of the pool's certificates (hex SHA-256s, as the
/// pool's state keeps them) that servers must be on; None or an empty
/// list: none is known (any server of the pool's CA is taken).
pub fn set_record(certs: Option<&[String]>) {
    let parsed = certs
        .filter(|c| !c.is_empty())
        .map(|c| c.iter().filter_map(|h| unhex(h)?.try_into().ok()).collect())
        .map(Arc::new);
    *RECORD.write().unwrap() = parsed;
}

/// Whether a certificate (its SHA-256) is on the record; None while no
/// record is known.
pub fn on_record(fingerprint: &[u8; 32]) -> Option<bool> {
    RECORD
        .read()
        .unwrap()
        .as_ref()
        .map(|r| r.contains(fingerprint))
}

/// A server verifier for the pool: the CA's checks, then the record's (a
/// server that left the pool keeps the CA's key, and could make itself
/// certificates the CA's checks alone would take).
#[derive(Debug)]
struct OnRecord {
    pool: Arc<rustls::client::WebPkiServerVerifier>,
}

impl ServerCertVerifier for OnRecord {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ok = self.pool.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let record = RECORD.read().unwrap().clone();
        match record {
            Some(r) if !r.contains(&fingerprint(end_entity)) => Err(rustls::Error::General(
                "the server's certificate is not on the pool's record (a server that left the pool?)"
                    .into(),
            )),
            _ => Ok(ok),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.pool.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.pool.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.pool.supported_verify_schemes()
    }
}

/// Accepts one server certificate: the one of the pin.
#[derive(Debug)]
struct Pinned {
    pin: Vec<u8>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let fp = fingerprint(end_entity);
        if !self.pin.is_empty() && fp.starts_with(&self.pin) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "the server's certificate is not the one its join token names".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.2 is not spoken".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A credential that cannot be used says which file and why, in the
    /// words the CLI prints.
    #[test]
    fn a_credential_that_cannot_be_read_says_which_and_why() {
        let dir = std::env::temp_dir().join(format!("mortar-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let Err(e) = Credential::load(&missing) else {
            panic!("a missing file read")
        };
        assert!(matches!(e, Error::Read { .. }), "{e:?}");
        assert!(
            e.to_string().starts_with(&format!(
                "cannot read the credential {}: ",
                missing.display()
            )),
            "{e}"
        );
        let garbage = dir.join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let Err(e) = Credential::load(&garbage) else {
            panic!("garbage taken")
        };
        assert!(
            e.to_string()
                .starts_with(&format!("{}: not a credential: ", garbage.display())),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
