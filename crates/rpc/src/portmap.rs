//! Registration with the host's portmapper (rpcbind; RFC 1833, XDR in
//! `crates/proto/spec/portmap.x`).
//!
//! NFSv4 clients do not need the portmapper, but clients built on libtirpc/libntirpc
//! (nfs4fs, some Ganesha tools) ask it for the NFS port anyway. A server therefore
//! registers what it serves when it starts and removes the entries when it stops.
//!
//! Two ways in, tried in this order:
//! 1. rpcbind's local socket `/run/rpcbind.sock` with RPCBPROC_SET/UNSET (version 3),
//!    the way libtirpc's own `rpcb_set` goes. rpcbind takes SET/UNSET only from callers
//!    it counts as local; an AF_UNIX caller always is one (and is recorded with its uid
//!    as the owner), while whether a TCP caller on 127.0.0.1 is depends on the version
//!    and its flags (`-i`, `-L`; Debian 12's 1.2.6 accepts it).
//! 2. PMAP version 2 SET/UNSET over TCP to 127.0.0.1:111, for portmappers without the
//!    local socket (the classic portmap) or where it cannot be reached.
//!
//! Each attempt is one short connection with a timeout, so a host without a portmapper
//! costs a failed connect, not a start-up delay.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use txnfs_xdr::{get_bool, get_u32, put_opaque, put_u32};

use crate::msg::{encode_call, record, Credential};
use crate::{decode_reply, read_record, RpcError};

/// The portmapper's program number and well-known port.
pub const PMAP_PROG: u32 = 100000;
pub const PMAP_PORT: u16 = 111;
/// PMAP version 2 (the portmapper proper) and rpcbind version 3.
pub const PMAP_VERS: u32 = 2;
pub const RPCB_VERS: u32 = 3;
/// Procedure numbers; SET and UNSET have the same numbers in versions 2, 3 and 4.
pub const PMAPPROC_SET: u32 = 1;
pub const PMAPPROC_UNSET: u32 = 2;
pub const PMAPPROC_GETPORT: u32 = 3;
pub const PMAPPROC_DUMP: u32 = 4;
pub const IPPROTO_TCP: u32 = 6;
pub const IPPROTO_UDP: u32 = 17;

/// rpcbind's local socket (Debian: `/run/rpcbind.sock`, also reachable as
/// `/var/run/rpcbind.sock`).
pub const RPCBIND_SOCKET: &str = "/run/rpcbind.sock";

/// Replies of the portmapper are small (a DUMP of a busy host is a few KiB).
const MAX_REPLY: usize = 1 << 20;

/// Why a portmapper call failed.
#[derive(Debug, thiserror::Error)]
pub enum PortmapError {
    /// Nothing listens (no socket file, connection refused): no portmapper runs.
    #[error("no portmapper at {0}")]
    NotRunning(String),
    #[error("portmapper at {0} did not answer within {1:?}")]
    Timeout(String, Duration),
    #[error("portmapper at {at}: {err}")]
    Rpc { at: String, err: RpcError },
    /// The portmapper answered SET/UNSET with FALSE (e.g. an entry of another owner).
    #[error("portmapper at {0} refused the request")]
    Refused(String),
}

/// One entry of the PMAP version 2 table (`struct mapping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub prog: u32,
    pub vers: u32,
    /// IPPROTO_TCP or IPPROTO_UDP.
    pub prot: u32,
    pub port: u32,
}

impl Mapping {
    fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(16);
        for v in [self.prog, self.vers, self.prot, self.port] {
            put_u32(&mut out, v);
        }
        out.freeze()
    }
}

/// Where the portmapper is reached.
#[derive(Debug, Clone)]
pub enum Portmapper {
    /// rpcbind's AF_UNIX socket, spoken to with rpcbind version 3.
    Local(PathBuf),
    /// A portmapper's TCP port, spoken to with PMAP version 2.
    Tcp(SocketAddr),
}

impl std::fmt::Display for Portmapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Portmapper::Local(p) => write!(f, "{}", p.display()),
            Portmapper::Tcp(a) => write!(f, "{a}"),
        }
    }
}

/// The local socket, then 127.0.0.1:111.
pub fn local_portmappers() -> Vec<Portmapper> {
    vec![
        Portmapper::Local(PathBuf::from(RPCBIND_SOCKET)),
        Portmapper::Tcp(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::LOCALHOST,
            PMAP_PORT,
        ))),
    ]
}

/// What a server registers: program `prog`, each of `versions`, over TCP at `addr`.
#[derive(Debug, Clone)]
pub struct Registration {
    pub prog: u32,
    pub versions: Vec<u32>,
    pub addr: SocketAddr,
}

impl Portmapper {
    /// Registers `reg` (first removing stale entries of the same program and versions,
    /// left by a server that did not stop cleanly: SET fails over an existing entry).
    pub async fn set(&self, reg: &Registration, timeout: Duration) -> Result<(), PortmapError> {
        for &vers in &reg.versions {
            let _ = self.change(PMAPPROC_UNSET, reg, vers, timeout).await?;
            if !self.change(PMAPPROC_SET, reg, vers, timeout).await? {
                return Err(PortmapError::Refused(self.to_string()));
            }
        }
        Ok(())
    }

    /// Removes the entries of `reg`: over the local socket the TCP entry of each
    /// version; PMAP version 2 has no finer UNSET than every transport of a version.
    pub async fn unset(&self, reg: &Registration, timeout: Duration) -> Result<(), PortmapError> {
        let mut all = true;
        for &vers in &reg.versions {
            all &= self.change(PMAPPROC_UNSET, reg, vers, timeout).await?;
        }
        if all {
            Ok(())
        } else {
            Err(PortmapError::Refused(self.to_string()))
        }
    }

    /// SET or UNSET of one version; the portmapper's boolean answer.
    async fn change(
        &self,
        proc_num: u32,
        reg: &Registration,
        vers: u32,
        timeout: Duration,
    ) -> Result<bool, PortmapError> {
        let at = self.to_string();
        let (pmap_vers, args) = match self {
            Portmapper::Local(_) => (RPCB_VERS, rpcb_args(proc_num, reg, vers)),
            Portmapper::Tcp(_) => {
                let m = Mapping {
                    prog: reg.prog,
                    vers,
                    prot: IPPROTO_TCP,
                    port: u32::from(reg.addr.port()),
                };
                (PMAP_VERS, m.encode())
            }
        };
        let mut reply = self.call(pmap_vers, proc_num, args, timeout).await?;
        get_bool(&mut reply).map_err(|e| PortmapError::Rpc {
            at,
            err: RpcError::Xdr(e),
        })
    }

    /// PMAP version 2 GETPORT over TCP: the port of `prog`/`vers` over `prot`, 0 if
    /// nothing is registered.
    pub async fn getport(
        &self,
        prog: u32,
        vers: u32,
        prot: u32,
        timeout: Duration,
    ) -> Result<u32, PortmapError> {
        let m = Mapping {
            prog,
            vers,
            prot,
            port: 0,
        };
        let mut reply = self
            .call(PMAP_VERS, PMAPPROC_GETPORT, m.encode(), timeout)
            .await?;
        get_u32(&mut reply).map_err(|e| PortmapError::Rpc {
            at: self.to_string(),
            err: RpcError::Xdr(e),
        })
    }

    /// One call on a connection of its own, the whole exchange bounded by `timeout`.
    async fn call(
        &self,
        vers: u32,
        proc_num: u32,
        args: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, PortmapError> {
        let at = self.to_string();
        let exchange = async {
            match self {
                Portmapper::Local(path) => {
                    let s = connect_local(path, &at).await?;
                    call_on(s, vers, proc_num, &args, &at).await
                }
                Portmapper::Tcp(addr) => {
                    let s = tokio::net::TcpStream::connect(addr)
                        .await
                        .map_err(|e| not_running_or(e, &at))?;
                    call_on(s, vers, proc_num, &args, &at).await
                }
            }
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(PortmapError::Timeout(at, timeout)),
        }
    }
}

async fn connect_local(path: &Path, at: &str) -> Result<tokio::net::UnixStream, PortmapError> {
    tokio::net::UnixStream::connect(path)
        .await
        .map_err(|e| not_running_or(e, at))
}

/// A missing socket file or a refused connection means no portmapper; anything else is
/// an error worth reporting.
fn not_running_or(e: std::io::Error, at: &str) -> PortmapError {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotFound | ConnectionRefused => PortmapError::NotRunning(at.to_string()),
        _ => PortmapError::Rpc {
            at: at.to_string(),
            err: RpcError::Io(e),
        },
    }
}

async fn call_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    vers: u32,
    proc_num: u32,
    args: &[u8],
    at: &str,
) -> Result<Bytes, PortmapError> {
    let rpc = |err: RpcError| PortmapError::Rpc {
        at: at.to_string(),
        err,
    };
    // A fixed xid is enough: one call per connection.
    let xid = 0x7078_6e66;
    let msg = encode_call(xid, PMAP_PROG, vers, proc_num, &Credential::None, args);
    s.write_all(&record(&msg))
        .await
        .map_err(|e| rpc(RpcError::Io(e)))?;
    let rec = read_record(&mut s, MAX_REPLY).await.map_err(rpc)?;
    let (got, result) = decode_reply(rec).map_err(rpc)?;
    if got != xid {
        return Err(rpc(RpcError::Disconnected));
    }
    result.map_err(rpc)
}

/// `struct rpcb` of rpcbind version 3: program, version, netid, universal address,
/// owner (rpcbind fills in the owner from the local socket's peer credentials).
fn rpcb_args(proc_num: u32, reg: &Registration, vers: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(96);
    put_u32(&mut out, reg.prog);
    put_u32(&mut out, vers);
    let netid = if reg.addr.is_ipv4() { "tcp" } else { "tcp6" };
    put_opaque(&mut out, netid.as_bytes());
    // UNSET names the entry by program, version and netid only (rpcbind ignores the
    // address): only our transport's entry goes, not, say, another server's UDP one.
    let uaddr = if proc_num == PMAPPROC_UNSET {
        String::new()
    } else {
        universal_address(reg.addr)
    };
    put_opaque(&mut out, uaddr.as_bytes());
    put_opaque(&mut out, b"txnfs");
    out.freeze()
}

/// RFC 5665 universal address: the host, then the port as two decimal octets
/// ("127.0.0.1.8.1" is port 2049).
pub fn universal_address(addr: SocketAddr) -> String {
    let p = addr.port();
    format!("{}.{}.{}", addr.ip(), p >> 8, p & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_addresses() {
        assert_eq!(
            universal_address("127.0.0.1:2049".parse().unwrap()),
            "127.0.0.1.8.1"
        );
        assert_eq!(universal_address("[::1]:111".parse().unwrap()), "::1.0.111");
    }

    #[test]
    fn rpcb_set_args_layout() {
        let reg = Registration {
            prog: 100003,
            versions: vec![4],
            addr: "127.0.0.1:2049".parse().unwrap(),
        };
        let mut b = rpcb_args(PMAPPROC_SET, &reg, 4);
        assert_eq!(get_u32(&mut b).unwrap(), 100003);
        assert_eq!(get_u32(&mut b).unwrap(), 4);
        assert_eq!(&txnfs_xdr::get_opaque(&mut b, 64).unwrap()[..], b"tcp");
        assert_eq!(
            &txnfs_xdr::get_opaque(&mut b, 64).unwrap()[..],
            b"127.0.0.1.8.1"
        );
        assert_eq!(&txnfs_xdr::get_opaque(&mut b, 64).unwrap()[..], b"txnfs");
        assert!(b.is_empty());
    }

    #[tokio::test]
    async fn nothing_listening_is_not_running() {
        let p = Portmapper::Local(PathBuf::from("/nonexistent/rpcbind.sock"));
        let reg = Registration {
            prog: 100003,
            versions: vec![4],
            addr: "127.0.0.1:2049".parse().unwrap(),
        };
        let r = p.set(&reg, Duration::from_millis(200)).await;
        assert!(matches!(r, Err(PortmapError::NotRunning(_))), "{r:?}");
    }
}
