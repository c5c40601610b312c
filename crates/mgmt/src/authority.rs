//! The pool's certificate authority (docs/security.md). The first daemon
//! of a pool makes it; a server that joins receives it from the server
//! that enrols it, over a connection pinned by the joiner's token. Every
//! server keeps it and issues its own certificates from it.
//!
//! On disk, under `STATE_DIR/tls/` (all but `ca.pem` of mode 0600):
//! - `ca.pem`, `ca.key`: the CA's certificate and key;
//! - `server.pem`: this server's credential (its daemon and its bricks);
//! - `admin.pem`: the administrator's credential, which the CLI and
//!   mounts on this server use without being told;
//! - `join-token`: the secret of this server's join token, while it is
//!   not yet in a pool of several (a new one after every join).

use mortar_protocol::tls::{self, hex, Credential, ADMIN_NAME, SERVER_NAME};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};
use std::path::{Path, PathBuf};

/// Certificates are valid for this many years from the start of this one.
const VALID_YEARS: i32 = 10;

fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("tls")
}

/// This server's credential file.
pub fn server_credential(state_dir: &Path) -> PathBuf {
    dir(state_dir).join("server.pem")
}

/// The administrator credential file of this server.
pub fn admin_credential(state_dir: &Path) -> PathBuf {
    dir(state_dir).join("admin.pem")
}

fn this_year() -> i32 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    1970 + (secs / 31_556_952) as i32
}

fn random(n: usize) -> Vec<u8> {
    use ring::rand::SecureRandom;
    let mut b = vec![0u8; n];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .expect("the system's random numbers");
    b
}

/// Why the authority could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {what} {}: {source}", path.display())]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("making a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the CA's key: {0}")]
    CaKey(#[source] rcgen::Error),
    #[error(transparent)]
    Credential(#[from] tls::Error),
    #[error("{token:?} is not a join token (run `mortar peer token` on the server to add, and copy its line)")]
    NotAToken { token: String },
}

impl Error {
    fn file(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::File { what, path, source }
    }
}

/// For the callers that still speak in strings (the daemon's operations).
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// Writes a file only its owner reads, atomically.
fn write_secret(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(Error::file("write", path))
}

/// The pool's CA: its certificate and key.
pub struct Authority {
    cert_pem: String,
    key: KeyPair,
}

impl Authority {
    /// A new CA for a new pool.
    fn create() -> Result<Authority, Error> {
        let key = KeyPair::generate()?;
        let cert = Self::params(&key)?.self_signed(&key)?;
        Ok(Authority {
            cert_pem: cert.pem(),
            key,
        })
    }

    /// The CA's parameters, the same every time for its key: certificates
    /// are issued under a copy made again from them (its name and key
    /// identifier are what a signed certificate refers to).
    fn params(key: &KeyPair) -> Result<CertificateParams, Error> {
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        let id = tls::fingerprint(key.public_key_raw());
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "mortar");
        dn.push(
            DnType::CommonName,
            format!("mortar pool CA {}", hex(&id[..8])),
        );
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let year = this_year();
        p.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
        p.not_after = rcgen::date_time_ymd(year + VALID_YEARS, 1, 1);
        Ok(p)
    }

    fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Authority, Error> {
        let key = KeyPair::from_pem(key_pem).map_err(Error::CaKey)?;
        Ok(Authority {
            cert_pem: cert_pem.to_string(),
            key,
        })
    }

    fn load(state_dir: &Path) -> Result<Authority, Error> {
        let d = dir(state_dir);
        let read =
            |f: &str| std::fs::read_to_string(d.join(f)).map_err(Error::file("read", &d.join(f)));
        Authority::from_pem(&read("ca.pem")?, &read("ca.key")?)
    }

    fn save(&self, state_dir: &Path) -> Result<(), Error> {
        let d = dir(state_dir);
        std::fs::create_dir_all(&d).map_err(Error::file("make", &d))?;
        write_secret(&d.join("ca.key"), self.key.serialize_pem().as_bytes())?;
        write_secret(&d.join("ca.pem"), self.cert_pem.as_bytes())
    }

    /// The CA's certificate and key in PEM, to hand to a joining server.
    pub fn to_pem(&self) -> (String, String) {
        (self.cert_pem.clone(), self.key.serialize_pem())
    }

    /// Issues a credential (PEM) valid for `name`: a server's can also
    /// open connections, an administrator's only that.
    pub fn issue(&self, name: &str, label: &str) -> Result<String, Error> {
        let year = this_year();
        self.issue_for(name, label, year - 1, year + VALID_YEARS)
    }

    /// `issue`, valid from the start of one year to the start of another.
    fn issue_for(&self, name: &str, label: &str, from: i32, to: i32) -> Result<String, Error> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(vec![name.to_string()])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "mortar");
        dn.push(DnType::CommonName, label);
        p.distinguished_name = dn;
        p.serial_number = Some(SerialNumber::from_slice(&random(16)));
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = if name == SERVER_NAME {
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ]
        } else {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        };
        p.use_authority_key_identifier_extension = true;
        p.not_before = rcgen::date_time_ymd(from, 1, 1);
        p.not_after = rcgen::date_time_ymd(to, 1, 1);
        let issuer = Self::params(&self.key)?.self_signed(&self.key)?;
        let cert = p.signed_by(&key, &issuer, &self.key)?;
        Ok(format!(
            "{}{}{}",
            cert.pem(),
            self.cert_pem,
            key.serialize_pem()
        ))
    }

    /// Makes this CA this server's: writes it, issues this server's
    /// credentials and a new join token from it, and returns the server's
    /// credential.
    fn take(&self, state_dir: &Path, host: &str) -> Result<Credential, Error> {
        self.save(state_dir)?;
        self.issue_local(state_dir, host)?;
        Ok(Credential::load(&server_credential(state_dir))?)
    }

    /// Issues this server's credentials (server and administrator) and a
    /// new join token secret, and writes them.
    fn issue_local(&self, state_dir: &Path, host: &str) -> Result<(), Error> {
        self.issue_own(host)?.save(state_dir)?;
        write_secret(
            &dir(state_dir).join("join-token"),
            hex(&random(16)).as_bytes(),
        )
    }

    /// New credentials for this server, not written yet.
    fn issue_own(&self, host: &str) -> Result<OwnCredentials, Error> {
        Ok(OwnCredentials {
            server: self.issue(SERVER_NAME, &format!("server {host}"))?,
            admin: self.issue(ADMIN_NAME, &format!("administrator on {host}"))?,
        })
    }
}

/// A server's two credentials (PEM): its own, its administrator's.
pub struct OwnCredentials {
    server: String,
    admin: String,
}

impl OwnCredentials {
    /// Their certificates as the pool records them (as `fingerprints`).
    pub fn fingerprints(&self) -> Result<Vec<String>, Error> {
        [&self.server, &self.admin]
            .iter()
            .map(|pem| Ok(Credential::from_pem(pem.as_bytes())?.fingerprint_hex()))
            .collect()
    }

    /// Writes them in place of the server's (each file replaced at once:
    /// a process watching it reads the old or the new, whole).
    pub fn save(&self, state_dir: &Path) -> Result<(), Error> {
        write_secret(&server_credential(state_dir), self.server.as_bytes())?;
        write_secret(&admin_credential(state_dir), self.admin.as_bytes())
    }
}

/// New credentials for this server from the pool's CA, for a rotation:
/// written by the caller (`OwnCredentials::save`) once the pool has them
/// on record.
pub fn issue_own(state_dir: &Path, host: &str) -> Result<OwnCredentials, Error> {
    Authority::load(state_dir)?.issue_own(host)
}

/// Makes this server's CA and credentials if it has none (its first
/// start: a pool of its own); returns its credential.
pub fn ensure(state_dir: &Path, host: &str) -> Result<Credential, Error> {
    let d = dir(state_dir);
    let ready = ["ca.pem", "ca.key", "server.pem", "admin.pem", "join-token"]
        .iter()
        .all(|f| d.join(f).exists());
    if ready {
        return Ok(Credential::load(&server_credential(state_dir))?);
    }
    let ca = match Authority::load(state_dir) {
        Ok(ca) => ca,
        Err(_) => {
            tracing::info!(
                "making a certificate authority for a new pool in {}",
                d.display()
            );
            Authority::create()?
        }
    };
    ca.take(state_dir, host)
}

/// Replaces this server's CA and credentials with new ones (it left its
/// pool: a pool of one again).
pub fn renew(state_dir: &Path, host: &str) -> Result<Credential, Error> {
    Authority::create()?.take(state_dir, host)
}

/// The certificates this server presents (its own and its
/// administrator's), as the pool records them: SHA-256, hex.
pub fn fingerprints(state_dir: &Path) -> Result<Vec<String>, Error> {
    [server_credential(state_dir), admin_credential(state_dir)]
        .iter()
        .map(|f| Ok(Credential::load(f)?.fingerprint_hex()))
        .collect()
}

/// The pool's CA, to hand to a server that joins.
pub fn pool_ca(state_dir: &Path) -> Result<(String, String), Error> {
    Ok(Authority::load(state_dir)?.to_pem())
}

/// Issues a credential of `name` from this server's CA.
pub fn issue(state_dir: &Path, name: &str, label: &str) -> Result<String, Error> {
    Authority::load(state_dir)?.issue(name, label)
}

/// Takes the pool's CA (this server joins a pool): its own credentials
/// are issued again from it, and its join token is spent. Returns the new
/// credential.
pub fn adopt(
    state_dir: &Path,
    host: &str,
    ca_pem: &str,
    ca_key_pem: &str,
) -> Result<Credential, Error> {
    Authority::from_pem(ca_pem, ca_key_pem)?.take(state_dir, host)
}

/// This server's join token: the start of its certificate's SHA-256 (so
/// that the prober knows it reached this server) and a secret (so that
/// this server knows the prober was given the token).
pub fn join_token(state_dir: &Path) -> Result<String, Error> {
    let cred = Credential::load(&server_credential(state_dir))?;
    let path = dir(state_dir).join("join-token");
    let secret =
        std::fs::read_to_string(&path).map_err(Error::file("read the join token", &path))?;
    let fp = tls::fingerprint(&cred.cert);
    Ok(format!("{}-{}", hex(&fp[..16]), secret.trim()))
}

/// Splits a join token into its pin and its secret.
pub fn parse_token(token: &str) -> Result<(Vec<u8>, String), Error> {
    let bad = || Error::NotAToken {
        token: token.to_string(),
    };
    let (pin, secret) = token.trim().split_once('-').ok_or_else(bad)?;
    let pin = tls::unhex(pin).filter(|p| p.len() == 16).ok_or_else(bad)?;
    if tls::unhex(secret).is_none_or(|s| s.len() != 16) {
        return Err(bad());
    }
    Ok((pin, secret.to_string()))
}

/// Whether `secret` is this server's join token secret (their hashes are
/// compared, so that the time taken tells nothing of the secret).
pub fn secret_matches(state_dir: &Path, secret: &str) -> bool {
    let Ok(mine) = std::fs::read_to_string(dir(state_dir).join("join-token")) else {
        return false;
    };
    tls::fingerprint(mine.trim().as_bytes()) == tls::fingerprint(secret.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_protocol::tls::{self, Clients, Role};

    #[test]
    fn a_pool_issues_credentials_that_say_their_role() {
        let d = tempfile::tempdir().unwrap();
        let server = ensure(d.path(), "a").unwrap();
        assert_eq!(server.role(), Some(Role::Server));
        let admin = Credential::load(&admin_credential(d.path())).unwrap();
        assert_eq!(admin.role(), Some(Role::Admin));
        assert_eq!(server.ca, admin.ca);
        // A second start keeps them.
        let again = ensure(d.path(), "a").unwrap();
        assert_eq!(again.cert, server.cert);
        use std::os::unix::fs::PermissionsExt;
        for f in ["ca.key", "server.pem", "admin.pem", "join-token"] {
            let mode = std::fs::metadata(dir(d.path()).join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{f} is private");
        }
    }

    #[test]
    fn join_tokens_pin_the_server_and_carry_its_secret() {
        let d = tempfile::tempdir().unwrap();
        let cred = ensure(d.path(), "a").unwrap();
        let token = join_token(d.path()).unwrap();
        let (pin, secret) = parse_token(&token).unwrap();
        assert!(tls::fingerprint(&cred.cert).starts_with(&pin));
        assert!(secret_matches(d.path(), &secret));
        assert!(!secret_matches(
            d.path(),
            "00000000000000000000000000000000"
        ));
        assert!(parse_token("nonsense").is_err());
        assert!(parse_token("abcd-ef").is_err());
        // Joining another pool spends the token and changes the certificate.
        let other = tempfile::tempdir().unwrap();
        ensure(other.path(), "b").unwrap();
        let (ca, key) = pool_ca(other.path()).unwrap();
        let joined = adopt(d.path(), "a", &ca, &key).unwrap();
        assert_ne!(joined.ca, cred.ca);
        assert!(!secret_matches(d.path(), &secret));
    }

    /// A real handshake over loopback: a pool's admin reaches its server,
    /// another pool's does not, and an admin cannot pose as a server.
    #[tokio::test]
    async fn handshakes_check_the_pool_and_the_role() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let server = ensure(a.path(), "a").unwrap();
        ensure(b.path(), "b").unwrap();
        tls::install(&server).unwrap();
        let acceptor = tls::acceptor(Clients::Pool).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    if let Ok((mut s, peer)) = acceptor.accept(tcp).await {
                        let peer = peer.unwrap();
                        let said =
                            format!("{} {}", peer.role.as_str(), tls::hex(&peer.fingerprint));
                        let _ = s.write_all(said.as_bytes()).await;
                        let _ = s.shutdown().await;
                    }
                });
            }
        });
        async fn ask(addr: std::net::SocketAddr) -> std::io::Result<String> {
            use tokio::io::AsyncReadExt;
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            let mut s = tls::connect(tcp).await?;
            let mut out = String::new();
            s.read_to_string(&mut out).await?;
            Ok(out.split(' ').next().unwrap_or_default().to_string())
        }
        async fn fingerprint_seen(addr: std::net::SocketAddr) -> String {
            use tokio::io::AsyncReadExt;
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut s = tls::connect(tcp).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out.split(' ').nth(1).unwrap().to_string()
        }
        // The server's own credential is a client too.
        assert_eq!(ask(addr).await.unwrap(), "server");
        tls::install_file(&admin_credential(a.path())).unwrap();
        assert_eq!(ask(addr).await.unwrap(), "admin");
        // Another pool's administrator is refused.
        tls::install_file(&admin_credential(b.path())).unwrap();
        assert!(ask(addr).await.is_err());
        // So is this pool's, expired.
        let expired = Authority::load(a.path())
            .unwrap()
            .issue_for(ADMIN_NAME, "expired", 2000, 2001)
            .unwrap();
        tls::install(&Credential::from_pem(expired.as_bytes()).unwrap()).unwrap();
        assert!(ask(addr).await.is_err());

        // A credential file written anew (a rotation) is read again for
        // the next connection; one that cannot be used is not.
        let ca = Authority::load(a.path()).unwrap();
        let file = a.path().join("mine.pem");
        let write = |pem: &str| {
            std::fs::write(file.with_extension("new"), pem).unwrap();
            std::fs::rename(file.with_extension("new"), &file).unwrap();
        };
        let fp = |pem: &str| {
            tls::hex(&tls::fingerprint(
                &Credential::from_pem(pem.as_bytes()).unwrap().cert,
            ))
        };
        let first = ca.issue(ADMIN_NAME, "first").unwrap();
        write(&first);
        tls::install_file(&file).unwrap();
        assert_eq!(fingerprint_seen(addr).await, fp(&first));
        let second = ca.issue(ADMIN_NAME, "second").unwrap();
        write(&second);
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        assert_eq!(fingerprint_seen(addr).await, fp(&second));
        write("not a credential");
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        assert_eq!(fingerprint_seen(addr).await, fp(&second));

        // With the pool's record known, a server must be on it: one that
        // left the pool is refused though its certificate is the CA's.
        let server_fp = server.fingerprint_hex();
        tls::set_record(Some(&[fp(&first)]));
        let e = ask(addr).await.unwrap_err().to_string();
        assert!(e.contains("not on the pool's record"), "{e}");
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(
            tls::connect_any_of_ca(tcp).await.is_ok(),
            "the CA's check only"
        );
        tls::set_record(Some(&[fp(&first), server_fp]));
        assert_eq!(ask(addr).await.unwrap(), "admin");
        tls::set_record(None);
        assert_eq!(ask(addr).await.unwrap(), "admin");
    }
}
