//! Calls from the server to a client machine's lockd (NLM4_GRANTED, the `_RES` of
//! the `_MSG` procedures) or statd (SM_NOTIFY): the program's port from the
//! client's portmapper (PMAP GETPORT over TCP), then one call on a connection of its
//! own, the whole exchange bounded in time.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use txnfs_rpc::portmap::{PortmapError, Portmapper, IPPROTO_TCP};
use txnfs_rpc::{AuthSys, Credential, RpcClient, RpcError};

/// One call's portmapper lookup, connect and reply, each.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a call to a client failed.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    #[error("portmapper: {0}")]
    Portmap(#[from] PortmapError),
    #[error("program {prog} version {vers} is not registered with the portmapper of {ip}")]
    NotRegistered { ip: IpAddr, prog: u32, vers: u32 },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Rpc(#[from] RpcError),
}

/// AUTH_SYS as root of this machine: lockd and statd take calls from root.
fn credential() -> Credential {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    Credential::Sys(AuthSys {
        stamp: 0,
        machinename: Bytes::from(host.trim().to_string()),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    })
}

/// Calls `prog`/`vers`/`proc_num` with `args` at the machine `ip`, whose portmapper
/// listens on `rpcbind_port`; the encoded results.
pub async fn call(
    ip: IpAddr,
    rpcbind_port: u16,
    prog: u32,
    vers: u32,
    proc_num: u32,
    args: Bytes,
) -> Result<Bytes, CallbackError> {
    let pm = Portmapper::Tcp(SocketAddr::new(ip, rpcbind_port));
    let port = pm.getport(prog, vers, IPPROTO_TCP, CALL_TIMEOUT).await?;
    let port = u16::try_from(port)
        .ok()
        .filter(|&p| p != 0)
        .ok_or(CallbackError::NotRegistered { ip, prog, vers })?;
    let exchange = async {
        let client = RpcClient::connect(SocketAddr::new(ip, port), credential()).await?;
        client.call(prog, vers, proc_num, args).await
    };
    match tokio::time::timeout(CALL_TIMEOUT, exchange).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(CallbackError::Timeout(CALL_TIMEOUT)),
    }
}

/// The address of this machine that `peer` reaches it by, as the routing table
/// chooses it (the name SM_NOTIFY gives: a client monitors the server by the address
/// it mounted).
pub fn local_addr_towards(peer: IpAddr) -> Option<IpAddr> {
    let any: SocketAddr = match peer {
        IpAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        IpAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect(SocketAddr::new(peer, 111)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}
