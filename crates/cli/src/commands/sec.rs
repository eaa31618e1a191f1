//! The file commands' `--sec` option: AUTH_SYS (the default) or Kerberos v5 with the
//! caller's ticket (`KRB5CCNAME`, as after `kinit`) and the service none, integrity
//! or privacy (RPCSEC_GSS, ADR 0051).

use txnfs_rpc::gss::{GssClientConfig, GssService};

/// `--sec` values, named as in exports(5) and `mount -o sec=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sec {
    /// AUTH_SYS: the uid/gid of --uid/--gid or the calling user.
    Sys,
    /// Kerberos v5, the call headers signed.
    Krb5,
    /// Kerberos v5, every call and reply signed.
    Krb5i,
    /// Kerberos v5, every call and reply encrypted.
    Krb5p,
}

/// The RPCSEC_GSS configuration for the server `host` (service principal
/// `nfs@host`), or `None` for AUTH_SYS.
pub fn client_gss(sec: Option<Sec>, host: &str) -> Option<GssClientConfig> {
    let service = match sec? {
        Sec::Sys => return None,
        Sec::Krb5 => GssService::None,
        Sec::Krb5i => GssService::Integrity,
        Sec::Krb5p => GssService::Privacy,
    };
    Some(GssClientConfig {
        target: format!("nfs@{host}"),
        service,
        ccache: None,
        program: txnfs_server::service::NFS_PROGRAM,
        version: 4,
    })
}
