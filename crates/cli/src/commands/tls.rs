//! The file commands' RPC-with-TLS options (`--tls`, `--tls-ca`, `--tls-cert`,
//! `--tls-key`) to the client's TLS configuration (ADR 0049).

use std::path::Path;

use anyhow::{bail, Context};
use txnfs_rpc::ClientTls;

use super::GlobalArgs;

/// The CA bundle of Debian's ca-certificates, used when `--tls-ca` is not given.
const SYSTEM_CAS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The TLS configuration for a server at `host`, or `None` without `--tls`.
pub fn client_tls(g: &GlobalArgs, host: &str) -> anyhow::Result<Option<ClientTls>> {
    if !g.tls {
        if g.tls_ca.is_some() || g.tls_cert.is_some() || g.tls_key.is_some() {
            bail!("--tls-ca, --tls-cert and --tls-key go with --tls");
        }
        return Ok(None);
    }
    let identity = match (&g.tls_cert, &g.tls_key) {
        (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
        (None, None) => None,
        _ => bail!("--tls-cert and --tls-key go together"),
    };
    let ca = g.tls_ca.as_deref().unwrap_or(Path::new(SYSTEM_CAS));
    let tls = ClientTls::from_pem_files(ca, identity)
        .context("cannot set up TLS")?
        .with_server_name(host)
        .context("cannot set up TLS")?;
    Ok(Some(tls))
}
