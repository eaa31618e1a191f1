//! The security flavour a client asks for (`--sec` of `txnfs cp …` and of `txnfs bench
//! run`): AUTH_SYS, or Kerberos v5 with the caller's ticket (`KRB5CCNAME`, as after
//! `kinit`) and the service none, integrity or privacy (RPCSEC_GSS, ADR 0051). Named as
//! in exports(5) and `mount -o sec=`.

use std::fmt;
use std::str::FromStr;

use txnfs_rpc::gss::{GssClientConfig, GssService};

/// The ONC RPC program number of NFS, which the RPCSEC_GSS context is made for.
const NFS_PROGRAM: u32 = 100003;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sec {
    /// AUTH_SYS.
    #[default]
    Sys,
    /// Kerberos v5, the call headers signed.
    Krb5,
    /// Kerberos v5, every call and reply signed.
    Krb5i,
    /// Kerberos v5, every call and reply encrypted.
    Krb5p,
}

impl Sec {
    /// The RPCSEC_GSS configuration for the NFSv4 server `host` (service principal
    /// `nfs@host`), or `None` for AUTH_SYS.
    pub fn gss_config(self, host: &str) -> Option<GssClientConfig> {
        let service = match self {
            Sec::Sys => return None,
            Sec::Krb5 => GssService::None,
            Sec::Krb5i => GssService::Integrity,
            Sec::Krb5p => GssService::Privacy,
        };
        Some(GssClientConfig {
            target: format!("nfs@{host}"),
            service,
            ccache: None,
            program: NFS_PROGRAM,
            version: 4,
        })
    }
}

/// A `--sec` value that is none of sys, krb5, krb5i, krb5p.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown security flavour {0:?}: sys, krb5, krb5i or krb5p")]
pub struct BadSec(pub String);

impl FromStr for Sec {
    type Err = BadSec;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sys" => Ok(Sec::Sys),
            "krb5" => Ok(Sec::Krb5),
            "krb5i" => Ok(Sec::Krb5i),
            "krb5p" => Ok(Sec::Krb5p),
            _ => Err(BadSec(s.to_string())),
        }
    }
}

impl fmt::Display for Sec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sec::Sys => "sys",
            Sec::Krb5 => "krb5",
            Sec::Krb5i => "krb5i",
            Sec::Krb5p => "krb5p",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_map_to_services() {
        for s in [Sec::Sys, Sec::Krb5, Sec::Krb5i, Sec::Krb5p] {
            assert_eq!(s.to_string().parse::<Sec>(), Ok(s));
        }
        assert!("krb6".parse::<Sec>().is_err());
        assert!(Sec::Sys.gss_config("10.0.0.1").is_none());
        let g = Sec::Krb5p.gss_config("10.0.0.1").expect("krb5p is GSS");
        assert_eq!(g.target, "nfs@10.0.0.1");
        assert!(matches!(g.service, GssService::Privacy));
        assert_eq!((g.program, g.version), (NFS_PROGRAM, 4));
    }
}
