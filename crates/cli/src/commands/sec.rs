//! The file commands' `--sec` option: AUTH_SYS (the default) or Kerberos v5 with the
//! caller's ticket (`KRB5CCNAME`, as after `kinit`); the flavours are the client
//! library's (`txnfs_client::Sec`, shared with `txnfs bench run --sec`).

use txnfs_client::Sec;
use txnfs_rpc::gss::GssClientConfig;

/// The RPCSEC_GSS configuration for the server `host` (service principal
/// `nfs@host`), or `None` for AUTH_SYS.
pub fn client_gss(sec: Option<Sec>, host: &str) -> Option<GssClientConfig> {
    sec?.gss_config(host)
}
