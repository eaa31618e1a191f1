//! The session back channel (RFC 8881 §2.10.3.1, §18.33, §18.34, §18.36, §20; ADR 0016):
//! which connections of a session carry callbacks, the callback program and security,
//! the back-channel slot, whether the path works, and a small callback client
//! (CB_NULL, CB_COMPOUND with CB_SEQUENCE first).
//!
//! This is I/O (it sends on [`BackChannel`]s and waits with timeouts), so it lives in the
//! server, not in the sans-IO state core: the core keeps the session's callback program
//! and which connections are bound; this registry keeps the transport handles and the
//! probe results, and SEQUENCE asks it for the status flags.

// (foldhash: every SEQUENCE looks its session up here; ids are the server's own.)
use foldhash::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_rpc::{AuthSys, BackChannel, CallbackError, Credential};
use txnfs_state::session::{CallbackParams, CallbackSec, SessionId};
use txnfs_state::ClientId;
use txnfs_xdr::{Decode, Encode, XdrError};

use crate::session::Hex;

/// Version of the callback program NFSv4.1 clients serve (RFC 8881 §20: `NFS4_CALLBACK`
/// version 1; knfsd calls version 1 too).
pub const CB_VERSION: u32 = 1;
const CB_NULL: u32 = 0;
const CB_COMPOUND: u32 = 1;

/// Whether a session's back channel works, as the last probe or callback found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathState {
    /// A probe is on its way (or the executor runs without a runtime, as the
    /// simulation does). Not reported as down: a working channel must never be called
    /// down to the Linux client just because its answer has not arrived yet.
    Probing,
    /// The client answered.
    Up,
    /// No connection for callbacks, or the client did not answer in time.
    Down,
}

/// Why a callback failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackFailure {
    /// The session has no (open) connection bound to its back channel.
    #[error("no back channel for this session")]
    NoBackChannel,
    /// The RPC failed (timeout, closed connection, RPC-level rejection).
    #[error("callback RPC failed: {0}")]
    Rpc(#[from] CallbackError),
    /// The CB_COMPOUND reply could not be decoded.
    #[error("malformed CB_COMPOUND reply: {0}")]
    Decode(#[from] XdrError),
    /// The client answered an operation of the CB_COMPOUND after CB_SEQUENCE with an
    /// error status: the path works.
    #[error("CB_COMPOUND failed: {0:?}")]
    Status(nfsstat4),
    /// The client refused the CB_COMPOUND itself: its CB_SEQUENCE failed (e.g.
    /// NFS4ERR_BADSESSION: it does not know the session, or not in this minor
    /// version), or the whole CB_COMPOUND did. See [`session_level`] for which of
    /// these mean the back channel cannot deliver.
    #[error("CB_SEQUENCE failed: {0:?}")]
    Sequence(nfsstat4),
    /// The CB_SEQUENCE result does not match what was sent (session, slot, sequence).
    #[error("CB_SEQUENCE reply does not match the request")]
    Mismatch,
}

/// One session's back channel.
#[derive(Debug)]
pub struct SessionCallback {
    client: ClientId,
    id: SessionId,
    inner: Mutex<Inner>,
    /// The one back-channel slot (slot 0, as knfsd): the sequence id the next
    /// CB_SEQUENCE carries. Held across a CB_COMPOUND so callbacks on the session go
    /// one at a time, as a one-slot table requires (RFC 8881 §2.10.6.1).
    slot: tokio::sync::Mutex<u32>,
}

#[derive(Debug)]
struct Inner {
    params: CallbackParams,
    /// The minor version the client speaks on this session (that of the COMPOUND that
    /// bound the back channel): every CB_COMPOUND carries it (RFC 8881 §20, RFC 7862
    /// §1). The Linux client finds the session of a callback by its minor version and
    /// rejects any other, so a 4.2 mount must get 4.2 callbacks.
    minor: u32,
    /// Connections bound for the back channel, oldest first.
    conns: Vec<BackChannel>,
    path: PathState,
    /// A recall cannot be delivered on this session: its back-channel connections
    /// closed, or the last callback failed otherwise than by a timeout (connection
    /// closed, refused at the RPC or session level). A timeout alone marks the path
    /// down but not this: the client may be slow, not gone.
    unreachable: bool,
    /// Incremented by every probe, so a late result of an older probe cannot overwrite
    /// a newer one.
    generation: u64,
}

impl SessionCallback {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Plain data; a panic elsewhere leaves it consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session's path state.
    pub fn path(&self) -> PathState {
        self.lock().path
    }

    /// The sequence id the next CB_SEQUENCE will carry.
    pub async fn next_seqid(&self) -> u32 {
        *self.slot.lock().await
    }

    /// The open connection to call on, with the program, credential and minor version:
    /// the one bound last. A client binds a new connection when it lost one, and the
    /// server may not have seen the old one close yet: a callback sent there is lost.
    fn target(&self) -> Option<(BackChannel, u32, Credential, u32)> {
        let mut g = self.lock();
        g.conns.retain(|c| !c.is_closed());
        let bc = g.conns.last()?.clone();
        Some((bc, g.params.program, credential(&g.params.sec), g.minor))
    }
}

/// The AUTH_NONE / AUTH_SYS credential the client asked callbacks to carry.
fn credential(sec: &CallbackSec) -> Credential {
    match sec {
        CallbackSec::None => Credential::None,
        CallbackSec::Sys {
            stamp,
            machine,
            uid,
            gid,
            gids,
        } => Credential::Sys(AuthSys {
            stamp: *stamp,
            machinename: machine.clone(),
            uid: *uid,
            gid: *gid,
            gids: gids.clone(),
        }),
    }
}

/// All back channels of the server, and the transport handle of every open connection.
#[derive(Debug, Default)]
pub struct Callbacks {
    conns: Mutex<HashMap<u64, BackChannel>>,
    /// Read by every SEQUENCE (its status flags), written only when a back channel is
    /// bound or forgotten: a read-write lock keeps SEQUENCEs from queueing on each other.
    sessions: RwLock<HashMap<SessionId, Arc<SessionCallback>>>,
    /// NFSv4.0 clients' callback paths (a separate connection each, `crate::callback40`).
    pub v40: crate::callback40::V40Callbacks,
}

impl Callbacks {
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, BackChannel>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sessions(&self) -> RwLockReadGuard<'_, HashMap<SessionId, Arc<SessionCallback>>> {
        self.sessions.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn sessions_mut(&self) -> RwLockWriteGuard<'_, HashMap<SessionId, Arc<SessionCallback>>> {
        self.sessions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The transport accepted connection `conn`.
    pub fn connection_opened(&self, conn: u64, bc: &BackChannel) {
        self.conns().insert(conn, bc.clone());
    }

    /// Connection `conn` closed: sessions whose last back connection it was go down
    /// (SEQUENCE on another connection then reports it, and the client binds a new one).
    /// Returns whether any did (their clients' delegations may now be unreachable).
    pub fn connection_closed(&self, conn: u64) -> bool {
        self.conns().remove(&conn);
        let mut down = false;
        for s in self.sessions().values() {
            let mut g = s.lock();
            let before = g.conns.len();
            g.conns.retain(|c| c.conn_id() != conn && !c.is_closed());
            if before > 0 && g.conns.is_empty() {
                g.path = PathState::Down;
                g.unreachable = true;
                g.generation += 1;
                down = true;
            }
        }
        down
    }

    /// Bind connection `conn` to the back channel of `session` (CREATE_SESSION with
    /// CONN_BACK_CHAN, BIND_CONN_TO_SESSION for BACK or BOTH) and probe it; callbacks
    /// carry `minor`, the minor version of the COMPOUND that bound it. Without a
    /// transport handle for `conn` (the simulation runs the executor without sockets)
    /// the session is recorded as asking for callbacks but left `Probing`.
    pub fn bind(
        &self,
        client: ClientId,
        session: SessionId,
        params: CallbackParams,
        minor: u32,
        conn: u64,
        timeout: Duration,
    ) {
        let bc = self.conns().get(&conn).cloned();
        let s = self
            .sessions_mut()
            .entry(session)
            .or_insert_with(|| {
                Arc::new(SessionCallback {
                    client,
                    id: session,
                    inner: Mutex::new(Inner {
                        params: params.clone(),
                        minor,
                        conns: Vec::new(),
                        path: PathState::Probing,
                        unreachable: false,
                        generation: 0,
                    }),
                    // RFC 8881 §2.10.6.1: a slot's first request carries sequence id 1.
                    slot: tokio::sync::Mutex::new(1),
                })
            })
            .clone();
        {
            let mut g = s.lock();
            g.params = params;
            g.minor = minor;
            if let Some(bc) = bc {
                if !g.conns.iter().any(|c| c.conn_id() == conn) {
                    g.conns.push(bc);
                }
                // A fresh connection: reachable until a callback on it says otherwise.
                g.unreachable = false;
            }
        }
        probe(s, timeout);
    }

    /// BACKCHANNEL_CTL: new program and security for `session`; probed again if the
    /// session has a back channel.
    pub fn set_params(&self, session: &SessionId, params: CallbackParams, timeout: Duration) {
        let s = self.sessions().get(session).cloned();
        if let Some(s) = s {
            s.lock().params = params;
            probe(s, timeout);
        }
    }

    /// The session is gone (DESTROY_SESSION, client expiry): forget its back channel.
    pub fn forget(&self, session: &SessionId) {
        self.sessions_mut().remove(session);
    }

    /// Keep only the sessions `alive` says still exist.
    pub fn retain(&self, alive: impl Fn(&SessionId) -> bool) {
        self.sessions_mut().retain(|id, _| alive(id));
    }

    /// A session of `client` to send a callback on: one whose path is up, else one
    /// still probing, else any with a back channel.
    pub fn session_of(&self, client: ClientId) -> Option<Arc<SessionCallback>> {
        let sessions = self.sessions();
        let mine = || sessions.values().filter(|s| s.client == client);
        mine()
            .find(|s| s.path() == PathState::Up)
            .or_else(|| mine().find(|s| s.path() == PathState::Probing))
            .or_else(|| mine().next())
            .cloned()
    }

    /// Whether a recall could reach `client`: some session of it has a back channel
    /// not known to be unable to deliver. False for a client whose back-channel
    /// connections all closed, whose last callback failed at the transport or session
    /// level (a timeout aside: a slow client is waited for), or that has no session
    /// with a back channel left: a recall it holds is revoked at once rather than
    /// waited for.
    pub fn client_reachable(&self, client: ClientId) -> bool {
        self.v40.reachable(client)
            || self
                .sessions()
                .values()
                .any(|s| s.client == client && !s.lock().unreachable)
    }

    /// Whether some session of `client` has a back channel that answered (no
    /// delegation is granted otherwise).
    pub fn client_up(&self, client: ClientId) -> bool {
        self.v40.up(client)
            || self
                .sessions()
                .values()
                .any(|s| s.client == client && s.path() == PathState::Up)
    }

    /// The simulation only: set the path state of `session`'s back channel (bound by
    /// CREATE_SESSION with CONN_BACK_CHAN or BIND_CONN_TO_SESSION, which leave it
    /// `Probing` without a transport) to `Up`, as if its CB_NULL probe had been
    /// answered, or to `Down`, as if its connection had closed. The simulation
    /// delivers the recalls it then takes from `Server::take_undelivered_callbacks`.
    /// False if the session has no back channel.
    #[doc(hidden)]
    pub fn assume_path(&self, session: &SessionId, up: bool) -> bool {
        let Some(s) = self.session(session) else {
            return false;
        };
        let mut g = s.lock();
        g.generation += 1;
        g.path = if up { PathState::Up } else { PathState::Down };
        g.unreachable = !up;
        true
    }

    /// The back channel of `session`, if it asked for one.
    pub fn session(&self, session: &SessionId) -> Option<Arc<SessionCallback>> {
        self.sessions().get(session).cloned()
    }

    /// SEQUENCE's callback status flags for `session` of `client` (RFC 8881 §18.46.3):
    /// CB_PATH_DOWN_SESSION when this session asked for a back channel and it is down;
    /// CB_PATH_DOWN as well when no session of the client has a working one. A session
    /// that never asked for callbacks gets no flags (as knfsd, which only reports a
    /// callback path it tried to use), and neither does one whose probe is pending.
    pub fn status_flags(&self, session: &SessionId, client: ClientId) -> u32 {
        let sessions = self.sessions();
        let Some(s) = sessions.get(session) else {
            return 0;
        };
        if s.path() != PathState::Down {
            return 0;
        }
        let mut flags = SEQ4_STATUS_CB_PATH_DOWN_SESSION;
        let any_up = sessions
            .values()
            .any(|o| o.client == client && o.path() == PathState::Up);
        if !any_up {
            flags |= SEQ4_STATUS_CB_PATH_DOWN;
        }
        flags
    }
}

/// Probe `s` with CB_NULL in the background: the request that bound the channel is
/// answered at once (the executor is synchronous and must not wait on the client).
/// Without a tokio runtime (the simulation) nothing is sent and the state stays
/// `Probing`.
fn probe(s: Arc<SessionCallback>, timeout: Duration) {
    let generation = {
        let mut g = s.lock();
        g.generation += 1;
        g.path = PathState::Probing;
        g.generation
    };
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let result = cb_null(&s, timeout).await;
        let mut g = s.lock();
        if g.generation != generation {
            return;
        }
        g.path = match &result {
            Ok(()) => PathState::Up,
            Err(_) => PathState::Down,
        };
        g.unreachable = result
            .as_ref()
            .is_err_and(CallbackFailure::proves_unreachable);
        drop(g);
        match result {
            Ok(()) => tracing::debug!(session = %Hex(&s.id), "back channel up"),
            Err(e) => tracing::info!(session = %Hex(&s.id), "back channel down: {e}"),
        }
    });
}

/// CB_NULL on the session's back channel.
pub async fn cb_null(s: &SessionCallback, timeout: Duration) -> Result<(), CallbackFailure> {
    let (bc, prog, cred, _) = s.target().ok_or(CallbackFailure::NoBackChannel)?;
    bc.call(prog, CB_VERSION, CB_NULL, &cred, Bytes::new(), timeout)
        .await?;
    Ok(())
}

/// Send a CB_COMPOUND of CB_SEQUENCE followed by `ops` on the session's back channel
/// and return the results after CB_SEQUENCE. The slot's sequence id advances when the
/// client answered CB_SEQUENCE with NFS4_OK (RFC 8881 §20.9.3: the reply was executed
/// in the slot); on a timeout or lost connection it is kept, so the next call retries
/// the same sequence id, which the client then treats as a retry or a new request.
pub async fn cb_compound(
    s: &SessionCallback,
    ops: Vec<nfs_cb_argop4>,
    timeout: Duration,
) -> Result<Vec<nfs_cb_resop4>, CallbackFailure> {
    let mut slot = s.slot.lock().await;
    let seqid = *slot;
    let (bc, prog, cred, minorversion) = s.target().ok_or(CallbackFailure::NoBackChannel)?;
    let mut argarray = Vec::with_capacity(ops.len() + 1);
    argarray.push(nfs_cb_argop4::OP_CB_SEQUENCE(CB_SEQUENCE4args {
        csa_sessionid: s.id,
        csa_sequenceid: seqid,
        csa_slotid: 0,
        csa_highest_slotid: 0,
        csa_cachethis: false,
        csa_referring_call_lists: Vec::new(),
    }));
    argarray.extend(ops);
    let args = CB_COMPOUND4args {
        tag: Bytes::new(),
        minorversion,
        // Ignored in NFSv4.1 (RFC 8881 §20.9); knfsd sends 0 as well.
        callback_ident: 0,
        argarray,
    }
    .to_bytes();
    let reply = bc
        .call(prog, CB_VERSION, CB_COMPOUND, &cred, args, timeout)
        .await?;
    let res = CB_COMPOUND4res::from_bytes(reply)?;
    let mut results = res.resarray.into_iter();
    match results.next() {
        Some(nfs_cb_resop4::OP_CB_SEQUENCE(CB_SEQUENCE4res::NFS4_OK(ok))) => {
            if ok.csr_sessionid != s.id || ok.csr_sequenceid != seqid || ok.csr_slotid != 0 {
                return Err(CallbackFailure::Mismatch);
            }
            *slot = seqid.wrapping_add(1);
        }
        Some(nfs_cb_resop4::OP_CB_SEQUENCE(CB_SEQUENCE4res::default(st))) => {
            return Err(CallbackFailure::Sequence(st));
        }
        _ => return Err(CallbackFailure::Sequence(res.status)),
    }
    if res.status != nfsstat4::NFS4_OK {
        return Err(CallbackFailure::Status(res.status));
    }
    Ok(results.collect())
}

impl CallbackFailure {
    /// Whether this failure shows that callbacks cannot reach the client on this
    /// session (as opposed to a slow client, or a refusal of one request): no
    /// connection, a closed connection or a refusal at the RPC level, a CB_COMPOUND
    /// refused at the session level ([`session_level`]).
    pub fn proves_unreachable(&self) -> bool {
        match self {
            CallbackFailure::NoBackChannel => true,
            CallbackFailure::Rpc(e) => !matches!(
                e,
                CallbackError::Timeout | CallbackError::TooManyOutstanding { .. }
            ),
            CallbackFailure::Sequence(st) => session_level(*st),
            CallbackFailure::Decode(_) | CallbackFailure::Status(_) | CallbackFailure::Mismatch => {
                false
            }
        }
    }
}

/// Whether a CB_COMPOUND refused with `status` (its CB_SEQUENCE, or the compound as
/// a whole) means this session's back channel cannot deliver callbacks — the client
/// does not know the session, the connection is not bound to it, the slot or minor
/// version is wrong — rather than that the client is busy (NFS4ERR_DELAY) or refused
/// one request (knfsd marks its callback path faulty on the same errors).
pub fn session_level(status: nfsstat4) -> bool {
    !matches!(status, nfsstat4::NFS4_OK | nfsstat4::NFS4ERR_DELAY)
}

impl SessionCallback {
    /// Record what a callback found out about the path: an answer proves it works, a
    /// transport failure, or a refusal at the session level ([`session_level`]), that
    /// it does not. A client's NFS error on an operation says nothing about the path.
    /// Returns whether the session is now known unable to deliver callbacks
    /// ([`CallbackFailure::proves_unreachable`]).
    pub(crate) fn observe(&self, result: &Result<Vec<nfs_cb_resop4>, CallbackFailure>) -> bool {
        let path = match result {
            Ok(_) | Err(CallbackFailure::Status(_) | CallbackFailure::Mismatch) => PathState::Up,
            Err(CallbackFailure::Sequence(st)) if !session_level(*st) => PathState::Up,
            Err(
                CallbackFailure::Rpc(_)
                | CallbackFailure::NoBackChannel
                | CallbackFailure::Sequence(_),
            ) => PathState::Down,
            Err(CallbackFailure::Decode(_)) => return self.lock().unreachable,
        };
        let unreachable = result
            .as_ref()
            .is_err_and(CallbackFailure::proves_unreachable);
        if path == PathState::Down {
            tracing::info!(
                session = %Hex(&self.id),
                unreachable,
                "back channel down: {}",
                result.as_ref().err().map(|e| e.to_string()).unwrap_or_default()
            );
        }
        let mut g = self.lock();
        g.generation += 1;
        g.path = path;
        g.unreachable = unreachable;
        unreachable
    }
}
