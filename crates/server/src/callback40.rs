//! The NFSv4.0 back channel (RFC 7530 §3.3.3 callback path, §10.2.1, §16.33, §16.34):
//! a separate TCP connection from the server to the address a client gave in
//! SETCLIENTID (`cb_client4`: program and universal address), probed with CB_NULL
//! once SETCLIENTID_CONFIRM made it current; CB_COMPOUND of minor version 0 carries
//! the client's `callback_ident` and no CB_SEQUENCE.
//!
//! The callback client ([`txnfs_rpc::RpcClient`]) is connected on first use and again
//! after the connection failed. A v4.0 client is granted delegations only while its
//! probe (or last callback) found the path up ([`V40Callbacks::up`]); recalls
//! (`crate::recall`) go here when the holder has no v4.1 session.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_rpc::{AuthSys, CallbackError, Credential, RpcClient, RpcError};
use txnfs_state::session::V40Callback;
use txnfs_state::ClientId;
use txnfs_xdr::{Decode, Encode};

use crate::callback::{CallbackFailure, PathState, CB_VERSION};

const CB_NULL: u32 = 0;
const CB_COMPOUND: u32 = 1;

/// Parses a TCP universal address (RFC 5665 §5.2.3.3: "h1.h2.h3.h4.p1.p2" for
/// "tcp", "x:...:x.p1.p2" for "tcp6").
pub fn parse_uaddr(netid: &str, addr: &str) -> Option<SocketAddr> {
    if netid != "tcp" && netid != "tcp6" {
        return None;
    }
    let mut parts = addr.rsplitn(3, '.');
    let p2: u16 = parts.next()?.parse().ok()?;
    let p1: u16 = parts.next()?.parse().ok()?;
    let host: IpAddr = parts.next()?.parse().ok()?;
    if p1 > 255 || p2 > 255 {
        return None;
    }
    Some(SocketAddr::new(host, p1 * 256 + p2))
}

/// One v4.0 client's callback path.
pub struct V40Target {
    client: ClientId,
    addr: Option<SocketAddr>,
    program: u32,
    ident: u32,
    conn: tokio::sync::Mutex<Option<Arc<RpcClient>>>,
    state: Mutex<TargetState>,
}

#[derive(Debug)]
struct TargetState {
    path: PathState,
    unreachable: bool,
    generation: u64,
}

impl std::fmt::Debug for V40Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V40Target")
            .field("client", &self.client)
            .field("addr", &self.addr)
            .field("program", &self.program)
            .field("path", &self.path())
            .finish()
    }
}

impl V40Target {
    fn lock(&self) -> MutexGuard<'_, TargetState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The path state the last probe or callback found.
    pub fn path(&self) -> PathState {
        self.lock().path
    }

    /// The client this path belongs to.
    pub fn client(&self) -> ClientId {
        self.client
    }

    /// The connection to call on: the open one, or a new one.
    async fn connection(&self, timeout: Duration) -> Result<Arc<RpcClient>, CallbackFailure> {
        let addr = self.addr.ok_or(CallbackFailure::NoBackChannel)?;
        let mut g = self.conn.lock().await;
        if let Some(c) = g.as_ref() {
            return Ok(c.clone());
        }
        // The Linux client accepts AUTH_NULL for CB_NULL only; AUTH_SYS as root for
        // everything (knfsd calls with its machine credential the same way).
        let cred = Credential::Sys(AuthSys {
            stamp: 0,
            machinename: Bytes::from_static(b"txnfs"),
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        });
        let c = match tokio::time::timeout(timeout, RpcClient::connect(addr, cred)).await {
            Ok(Ok(c)) => Arc::new(c),
            Ok(Err(e)) => {
                tracing::debug!(%addr, "v4.0 callback connection failed: {e}");
                return Err(CallbackFailure::Rpc(CallbackError::ConnectionClosed));
            }
            Err(_) => return Err(CallbackFailure::Rpc(CallbackError::Timeout)),
        };
        *g = Some(c.clone());
        Ok(c)
    }

    /// One call; a failed connection is dropped so the next call connects again.
    async fn call(
        &self,
        proc_num: u32,
        args: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, CallbackFailure> {
        let c = self.connection(timeout).await?;
        let r =
            tokio::time::timeout(timeout, c.call(self.program, CB_VERSION, proc_num, args)).await;
        let e = match r {
            Ok(Ok(b)) => return Ok(b),
            Ok(Err(e)) => rpc_failure(e),
            Err(_) => CallbackError::Timeout,
        };
        if e != CallbackError::Timeout {
            *self.conn.lock().await = None;
        }
        Err(CallbackFailure::Rpc(e))
    }

    /// Records what a probe or callback found (as `SessionCallback::observe`).
    fn observe(&self, ok: bool, unreachable: bool) {
        let mut g = self.lock();
        g.generation += 1;
        g.path = if ok { PathState::Up } else { PathState::Down };
        g.unreachable = unreachable;
    }
}

fn rpc_failure(e: RpcError) -> CallbackError {
    match e {
        RpcError::RpcMismatch { low, high } => CallbackError::RpcMismatch { low, high },
        RpcError::AuthError(a) => CallbackError::AuthError(a),
        RpcError::ProgUnavail => CallbackError::ProgUnavail,
        RpcError::ProgMismatch { low, high } => CallbackError::ProgMismatch { low, high },
        RpcError::ProcUnavail => CallbackError::ProcUnavail,
        RpcError::GarbageArgs => CallbackError::GarbageArgs,
        RpcError::SystemErr => CallbackError::SystemErr,
        RpcError::Xdr(x) => CallbackError::MalformedReply(x),
        RpcError::RecordTooLarge { size, max } => CallbackError::ArgsTooLarge { size, max },
        // v4.0 callback connections are plain TCP with AUTH_SYS (the server never
        // asks for TLS or Kerberos).
        RpcError::Io(_)
        | RpcError::Disconnected
        | RpcError::TlsRefused { .. }
        | RpcError::TlsHandshake { .. }
        | RpcError::Gss { .. } => CallbackError::ConnectionClosed,
    }
}

/// The callback paths of all v4.0 clients.
#[derive(Debug, Default)]
pub struct V40Callbacks {
    targets: RwLock<HashMap<ClientId, Arc<V40Target>>>,
}

impl V40Callbacks {
    fn targets(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ClientId, Arc<V40Target>>> {
        self.targets.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// SETCLIENTID_CONFIRM made `cb` the callback path of `client`: replace the old one
    /// and probe it with CB_NULL in the background. Without a runtime (the simulation)
    /// the path stays `Probing`.
    pub fn set(&self, client: ClientId, cb: &V40Callback, timeout: Duration) {
        let addr = parse_uaddr(&cb.netid, &cb.addr);
        if addr.is_none() {
            tracing::debug!(client = format_args!("{client:#x}"), netid = %cb.netid, addr = %cb.addr, "v4.0 callback address not usable");
        }
        let t = Arc::new(V40Target {
            client,
            addr,
            program: cb.program,
            ident: cb.ident,
            conn: tokio::sync::Mutex::new(None),
            state: Mutex::new(TargetState {
                path: if addr.is_some() {
                    PathState::Probing
                } else {
                    PathState::Down
                },
                unreachable: addr.is_none(),
                generation: 0,
            }),
        });
        self.targets
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(client, t.clone());
        if addr.is_some() {
            probe(t, timeout);
        }
    }

    /// The path of `client`, if it is a v4.0 client that gave one.
    pub fn get(&self, client: ClientId) -> Option<Arc<V40Target>> {
        self.targets().get(&client).cloned()
    }

    /// Whether `client`'s probe or last callback found its path up.
    pub fn up(&self, client: ClientId) -> bool {
        self.get(client).is_some_and(|t| t.path() == PathState::Up)
    }

    /// Whether a recall could reach `client` on its v4.0 path.
    pub fn reachable(&self, client: ClientId) -> bool {
        self.get(client).is_some_and(|t| !t.lock().unreachable)
    }

    /// Keep only the paths of clients `alive` says exist.
    pub fn retain(&self, alive: impl Fn(ClientId) -> bool) {
        self.targets
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|c, _| alive(*c));
    }
}

fn probe(t: Arc<V40Target>, timeout: Duration) {
    let generation = t.lock().generation;
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let r = t.call(CB_NULL, Bytes::new(), timeout).await;
        let mut g = t.lock();
        if g.generation != generation {
            return;
        }
        g.generation += 1;
        g.path = if r.is_ok() {
            PathState::Up
        } else {
            PathState::Down
        };
        g.unreachable = r.as_ref().is_err_and(CallbackFailure::proves_unreachable);
        drop(g);
        match r {
            Ok(_) => tracing::debug!(
                client = format_args!("{:#x}", t.client),
                "v4.0 callback path up"
            ),
            Err(e) => tracing::info!(
                client = format_args!("{:#x}", t.client),
                "v4.0 callback path down: {e}"
            ),
        }
    });
}

/// A CB_COMPOUND of minor version 0 (RFC 7530 §16.2.3 of the callback program: no
/// CB_SEQUENCE, the client's `callback_ident`) of `ops` to `t`; the results.
pub async fn cb_compound(
    t: &V40Target,
    ops: Vec<nfs_cb_argop4>,
    timeout: Duration,
) -> Result<Vec<nfs_cb_resop4>, CallbackFailure> {
    let args = CB_COMPOUND4args {
        tag: Bytes::new(),
        minorversion: 0,
        callback_ident: t.ident,
        argarray: ops,
    }
    .to_bytes();
    let r = async {
        let reply = t.call(CB_COMPOUND, args, timeout).await?;
        let res = CB_COMPOUND4res::from_bytes(reply)?;
        if res.status != nfsstat4::NFS4_OK {
            return Err(CallbackFailure::Status(res.status));
        }
        Ok(res.resarray)
    }
    .await;
    let unreachable = r.as_ref().is_err_and(CallbackFailure::proves_unreachable);
    let down = matches!(
        r,
        Err(CallbackFailure::Rpc(_) | CallbackFailure::NoBackChannel)
    );
    t.observe(!down, unreachable);
    r
}

/// CB_RECALL (RFC 7530 §16.2 of the callback program) of `stateid` on `t`.
pub async fn recall(
    t: &V40Target,
    stateid: stateid4,
    fh: Bytes,
    truncate: bool,
    timeout: Duration,
) -> Result<(), CallbackFailure> {
    let op = nfs_cb_argop4::OP_CB_RECALL(CB_RECALL4args {
        stateid,
        truncate,
        fh,
    });
    match cb_compound(t, vec![op], timeout).await?.into_iter().next() {
        Some(nfs_cb_resop4::OP_CB_RECALL(CB_RECALL4res { status }))
            if status != nfsstat4::NFS4_OK =>
        {
            Err(CallbackFailure::Status(status))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_addresses_parse() {
        assert_eq!(
            parse_uaddr("tcp", "10.0.2.15.3.232"),
            Some("10.0.2.15:1000".parse().unwrap())
        );
        assert_eq!(
            parse_uaddr("tcp6", "::1.0.80"),
            Some("[::1]:80".parse().unwrap())
        );
        assert_eq!(parse_uaddr("udp", "10.0.2.15.3.232"), None);
        assert_eq!(parse_uaddr("tcp", "10.0.2.15.300.1"), None);
        assert_eq!(parse_uaddr("tcp", "garbage"), None);
    }
}
