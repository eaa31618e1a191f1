//! RPC-with-TLS (RFC 9289): the TLS configurations of server and client, loaded from
//! PEM files, and what the server records of a TLS connection. The probe and the
//! upgrade of a connection are in `starttls.rs`.
//!
//! Both ends speak TLS 1.3 only (RFC 9289 §5.1 requires 1.3 or later) with ALPN
//! "sunrpc" (§7.1), through rustls with the `ring` provider.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// The ALPN protocol id of RPC-with-TLS (RFC 9289 §7.1).
pub const ALPN_SUNRPC: &[u8] = b"sunrpc";

/// Why a TLS configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("cannot read the {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the {what} {} holds no PEM certificate", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("the TLS key {} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)", path.display())]
    NoKey { path: PathBuf },
    #[error("the {what} {} is not valid PEM: {msg}", path.display())]
    BadPem {
        what: &'static str,
        path: PathBuf,
        msg: String,
    },
    #[error("the TLS key {} does not go with the certificate {}: {msg}", key.display(), cert.display())]
    KeyMismatch {
        cert: PathBuf,
        key: PathBuf,
        msg: String,
    },
    #[error("the {what} {} was refused: {msg}", path.display())]
    Refused {
        what: &'static str,
        path: PathBuf,
        msg: String,
    },
    #[error(
        "{0:?} is not a host name or IP address the server's certificate can be checked against"
    )]
    ServerName(String),
}

fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let bad = |e: rustls::pki_types::pem::Error| match e {
        rustls::pki_types::pem::Error::Io(source) => TlsConfigError::Read {
            what,
            path: path.into(),
            source,
        },
        e => TlsConfigError::BadPem {
            what,
            path: path.into(),
            msg: e.to_string(),
        },
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(bad)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoCertificate {
            what,
            path: path.into(),
        });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    // Read first so that a missing file is reported as such, not as "no key".
    let pem = std::fs::read(path).map_err(|source| TlsConfigError::Read {
        what: "TLS key",
        path: path.into(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsConfigError::NoKey { path: path.into() },
        e => TlsConfigError::BadPem {
            what: "TLS key",
            path: path.into(),
            msg: e.to_string(),
        },
    })
}

fn roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsConfigError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(what, path)? {
        store.add(cert).map_err(|e| TlsConfigError::Refused {
            what,
            path: path.into(),
            msg: e.to_string(),
        })?;
    }
    Ok(store)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's side: its certificate chain and key, and the CAs whose client
/// certificates it verifies (mTLS) when configured. Replaceable while serving
/// ([`ServerTls::replace_with`]): a handshake takes the configuration current when it
/// starts, a connection already in TLS keeps the one it was made with.
pub struct ServerTls {
    current: RwLock<Loaded>,
}

/// One loaded configuration of [`ServerTls`].
#[derive(Clone)]
struct Loaded {
    acceptor: tokio_rustls::TlsAcceptor,
    verifies_clients: bool,
    /// The leaf certificate, for the administrator: `CN=... sha256:...`.
    certificate: String,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = self.loaded();
        f.debug_struct("ServerTls")
            .field("certificate", &l.certificate)
            .field("verifies_clients", &l.verifies_clients)
            .finish_non_exhaustive()
    }
}

/// `CN=<common name> sha256:<first 16 hex digits of the fingerprint>` of `cert`.
fn describe(cert: &CertificateDer<'_>) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.as_ref());
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    match crate::x509name::subject_common_name(cert.as_ref()) {
        Some(cn) => format!("CN={cn} sha256:{hex}"),
        None => format!("sha256:{hex}"),
    }
}

impl ServerTls {
    /// Load `cert` (PEM chain, leaf first) and `key` (PEM), checking that they go
    /// together; with `client_ca`, client certificates are asked for and, when one is
    /// presented, verified against it (a client without one still connects: whether
    /// it may use an export is the export's `mtls` rule).
    pub fn from_pem_files(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<Self, TlsConfigError> {
        let chain = certificates("TLS certificate", cert)?;
        let certificate = describe(&chain[0]);
        let private = private_key(key)?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsConfigError::Refused {
                what: "TLS certificate",
                path: cert.into(),
                msg: e.to_string(),
            })?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots("client CA", ca)?),
                    provider(),
                )
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsConfigError::Refused {
                    what: "client CA",
                    path: ca.into(),
                    msg: e.to_string(),
                })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config =
            builder
                .with_single_cert(chain, private)
                .map_err(|e| TlsConfigError::KeyMismatch {
                    cert: cert.into(),
                    key: key.into(),
                    msg: e.to_string(),
                })?;
        config.alpn_protocols = vec![ALPN_SUNRPC.to_vec()];
        Ok(ServerTls {
            current: RwLock::new(Loaded {
                acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
                verifies_clients: client_ca.is_some(),
                certificate,
            }),
        })
    }

    fn loaded(&self) -> Loaded {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The acceptor for a handshake starting now (the read lock is held for the clone
    /// of one `Arc` only).
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .acceptor
            .clone()
    }

    /// Whether client certificates are asked for and verified (a client CA is set).
    pub fn verifies_clients(&self) -> bool {
        self.loaded().verifies_clients
    }

    /// The leaf certificate served now: `CN=<subject common name> sha256:<the first 16
    /// hex digits of its SHA-256 fingerprint>`.
    pub fn certificate(&self) -> String {
        self.loaded().certificate
    }

    /// Serve `next`'s certificate, key and client CAs from the next handshake on
    /// (`next` was loaded, and so checked, by [`ServerTls::from_pem_files`]).
    /// Connections already in TLS are not touched.
    pub fn replace_with(&self, next: ServerTls) {
        let next = next.current.into_inner().unwrap_or_else(|p| p.into_inner());
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = next;
    }
}

/// The client's side: the CAs it trusts for the server's certificate, its own
/// certificate for mTLS, and the name the server's certificate must carry.
#[derive(Clone)]
pub struct ClientTls {
    pub(crate) connector: tokio_rustls::TlsConnector,
    /// Checked against the server certificate's SANs; `None`: the server's IP address.
    pub(crate) server_name: Option<ServerName<'static>>,
    /// The program and version the AUTH_TLS probe (a NULL call) is addressed to.
    pub probe_program: (u32, u32),
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .field("probe_program", &self.probe_program)
            .finish_non_exhaustive()
    }
}

/// NFS version 4, the program txnfs clients probe by default.
const NFS_V4: (u32, u32) = (100003, 4);

impl ClientTls {
    /// Trust the CAs in `ca`; with `identity` (certificate chain, key), present that
    /// certificate when the server asks for one.
    pub fn from_pem_files(
        ca: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> Result<Self, TlsConfigError> {
        let roots = roots("TLS CA", ca)?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsConfigError::Refused {
                what: "TLS CA",
                path: ca.into(),
                msg: e.to_string(),
            })?
            .with_root_certificates(roots);
        let mut config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = certificates("TLS client certificate", cert)?;
                let private = private_key(key)?;
                builder.with_client_auth_cert(chain, private).map_err(|e| {
                    TlsConfigError::KeyMismatch {
                        cert: cert.into(),
                        key: key.into(),
                        msg: e.to_string(),
                    }
                })?
            }
        };
        config.alpn_protocols = vec![ALPN_SUNRPC.to_vec()];
        Ok(ClientTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name: None,
            probe_program: NFS_V4,
        })
    }

    /// Check the server's certificate against `host` (a DNS name or an IP address)
    /// instead of the address connected to.
    pub fn with_server_name(mut self, host: &str) -> Result<Self, TlsConfigError> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| TlsConfigError::ServerName(host.into()))?;
        self.server_name = Some(name);
        Ok(self)
    }
}

/// What the server knows of a TLS connection, handed to the service with every call
/// ([`crate::CallInfo::tls`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPeer {
    /// The client's certificate, verified against the client CA; `None` when the
    /// client presented none.
    pub client_identity: Option<String>,
}

impl TlsPeer {
    /// Whether the client presented a certificate the server verified (mTLS).
    pub fn mutual(&self) -> bool {
        self.client_identity.is_some()
    }
}

/// The identity of a verified client certificate: `CN=<common name>` of its subject,
/// or, without one, `sha256:<fingerprint>` of the whole certificate.
pub(crate) fn identity_of(cert: &CertificateDer<'_>) -> String {
    match crate::x509name::subject_common_name(cert.as_ref()) {
        Some(cn) => format!("CN={cn}"),
        None => {
            let digest = ring::digest::digest(&ring::digest::SHA256, cert.as_ref());
            let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
            format!("sha256:{hex}")
        }
    }
}
