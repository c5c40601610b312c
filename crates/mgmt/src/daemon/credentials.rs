//! Credentials: a volume's clients' (`volume credentials`) and the
//! pool's administrators' (`pool credentials`), issued from this server's
//! CA, listed, revoked and rotated.

use super::*;
use crate::error::Error;

use mortar_core::options::valid_name;

impl Daemon {
    /// `volume credentials NAME create|revoke|rotate`.
    pub(super) async fn volume_credentials(
        self: &Arc<Self>,
        name: String,
        op: rpc::CredentialOp,
    ) -> Result<String, Error> {
        match op {
            rpc::CredentialOp::Create {
                name: cred,
                read_only,
                identity,
            } => {
                let v = self.volume(&name)?;
                if v.credentials.iter().any(|c| c.name == cred) {
                    return Err(
                        format!("Volume {name} already has a credential named {cred}").into(),
                    );
                }
                let (pem, credential) = self.issue_credential(
                    &cred,
                    mortar_protocol::tls::CLIENT_NAME,
                    &format!("client {cred} of volume {name}"),
                    read_only,
                    identity,
                )?;
                self.execute(Command::AddCredential {
                    volume: name.clone(),
                    credential,
                })
                .await?;
                tracing::info!(volume = %name, credential = %cred, read_only, ?identity, "client credential issued");
                Ok(pem)
            }
            rpc::CredentialOp::Revoke { name: cred } => {
                self.volume(&name)?;
                self.execute(Command::RevokeCredential {
                    volume: name.clone(),
                    name: cred.clone(),
                })
                .await?;
                tracing::info!(volume = %name, credential = %cred, "client credential revoked");
                Ok(String::new())
            }
            rpc::CredentialOp::Rotate { name: cred } => {
                self.rotate_credential(Some(name), cred).await
            }
            rpc::CredentialOp::List => Err("not a change".into()),
        }
    }

    /// `pool credentials create|revoke|rotate`.
    pub(super) async fn pool_credentials(
        self: &Arc<Self>,
        op: rpc::CredentialOp,
    ) -> Result<String, Error> {
        match op {
            rpc::CredentialOp::Create {
                name,
                read_only,
                identity,
            } => {
                if identity.is_some() {
                    return Err("--as is for a volume's client credentials".into());
                }
                if self
                    .state
                    .lock()
                    .unwrap()
                    .operators
                    .iter()
                    .any(|c| c.name == name)
                {
                    return Err(format!("The pool already has a credential named {name}").into());
                }
                use mortar_protocol::tls;
                let (role, what) = match read_only {
                    true => (tls::READER_NAME, "read-only administrator"),
                    false => (tls::ADMIN_NAME, "administrator"),
                };
                let (pem, credential) =
                    self.issue_credential(&name, role, &format!("{what} {name}"), read_only, None)?;
                self.execute(Command::AddOperator(credential)).await?;
                tracing::info!(credential = %name, read_only, "administrator credential issued");
                Ok(pem)
            }
            rpc::CredentialOp::Revoke { name } => {
                self.execute(Command::RevokeOperator { name: name.clone() })
                    .await?;
                tracing::info!(credential = %name, "administrator credential revoked");
                Ok(String::new())
            }
            rpc::CredentialOp::Rotate { name } => self.rotate_credential(None, name).await,
            rpc::CredentialOp::List => Err("not a change".into()),
        }
    }

    /// Issues a credential named `name` (checked) for `role` from this
    /// server's CA: its PEM, for the caller only, and what the pool's
    /// state keeps of it.
    fn issue_credential(
        &self,
        name: &str,
        role: &str,
        label: &str,
        read_only: bool,
        identity: Option<(u32, u32)>,
    ) -> Result<(String, crate::state::IssuedCredential), Error> {
        use mortar_protocol::tls;
        if !valid_name(name) {
            return Err(format!(
                "{name:?} is not a credential name: letters, digits, - and _, at most 64"
            )
            .into());
        }
        let pem = crate::authority::issue(&self.cfg.state_dir, role, label)?;
        let issued = tls::Credential::from_pem(pem.as_bytes())?;
        let record = crate::state::IssuedCredential {
            name: name.to_string(),
            fingerprint: issued.fingerprint_hex(),
            read_only,
            identity,
            issued: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            retired: Vec::new(),
        };
        Ok((pem, record))
    }

    /// `credentials rotate`: issues credential `cred` of `volume` (of the
    /// pool's administrators if None) again, for the same grant, and
    /// retires the certificate it replaces. Returns the new one's PEM.
    async fn rotate_credential(
        self: &Arc<Self>,
        volume: Option<String>,
        cred: String,
    ) -> Result<String, Error> {
        use mortar_protocol::tls;
        let old = match &volume {
            Some(v) => self.volume(v)?.credentials.clone(),
            None => self.state.lock().unwrap().operators.clone(),
        }
        .into_iter()
        .find(|c| c.name == cred)
        .ok_or_else(|| match &volume {
            Some(v) => format!("Volume {v} has no credential named {cred}"),
            None => format!("The pool has no credential named {cred}"),
        })?;
        let (role, label) = match (&volume, old.read_only) {
            (Some(v), _) => (tls::CLIENT_NAME, format!("client {cred} of volume {v}")),
            (None, true) => (tls::READER_NAME, format!("read-only administrator {cred}")),
            (None, false) => (tls::ADMIN_NAME, format!("administrator {cred}")),
        };
        let (pem, new) = self.issue_credential(&cred, role, &label, old.read_only, old.identity)?;
        self.execute(Command::RotateCredential {
            volume: volume.clone(),
            name: cred.clone(),
            fingerprint: new.fingerprint,
            issued: new.issued,
        })
        .await?;
        tracing::info!(volume = ?volume, credential = %cred, "credential rotated: the certificate it replaces is retired");
        Ok(pem)
    }
}
