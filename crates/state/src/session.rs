//! Clients and sessions (RFC 8881 §2.4, §2.10, §18.35-§18.37, §18.46-§18.51):
//! EXCHANGE_ID's client records, CREATE_SESSION's sessions with their slot tables
//! and bound connections, and lease renewal. Owned by [`crate::StateCore`], which
//! adds the cross-table decisions (releasing opens and locks, grace, effects).
//!
//! Sans-IO: every method takes `now` and returns a decision; the server turns the
//! decisions into wire results.

use bytes::Bytes;
use std::collections::HashSet;

use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use txnfs_xdr::Gathered;

use crate::slots::{SlotTable, SlotVerdict};
use crate::types::ClientId;

mod args;
mod create_session;
mod durable;
mod exchange_id;
mod setclientid;
mod summary;

pub use args::{
    ConnDir, ConnDirRequest, CreateSessionArgs, CreateSessionOutcome, ExchangeIdOk, SequenceArgs,
    SequenceOk, SessionError,
};
pub use durable::{DurableClient, DurableSession, DurableSlot};
pub use setclientid::{ConfirmOk, SetClientIdOk, V40Callback};
pub use summary::ClientSummary;

/// A session id (RFC 8881 §18.36: `sessionid4`): client id, boot epoch, counter.
pub type SessionId = [u8; 16];

/// `CREATE_SESSION4_FLAG_PERSIST` (RFC 8881 §18.36.1): the session's reply cache
/// survives a server restart (§2.10.6.5). Granted only when the server is configured
/// to ([`SessionTable::set_persistence`]) and the client asks.
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x1;

/// `CREATE_SESSION4_FLAG_CONN_BACK_CHAN` (RFC 8881 §18.36.1).
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;

/// Every `csa_flags` bit RFC 8881 §18.36.1 defines (PERSIST, CONN_BACK_CHAN,
/// CONN_RDMA); any other bit is NFS4ERR_INVAL (§18.36.3).
pub const CREATE_SESSION4_FLAG_MASK: u32 = 0x7;

/// Who sent a request, as far as the client-record rules care (RFC 8881 §2.4,
/// §18.35.5, §18.36.4). With AUTH_SYS the principal is the credential as sent; two
/// are the same when uid, gid and groups are (what knfsd's `same_creds` compares).
/// AUTH_NONE arrives as the anonymous uid/gid and is one principal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Principal {
    /// The user id.
    pub uid: u32,
    /// The primary group id.
    pub gid: u32,
    /// The supplementary groups, in the order sent.
    pub gids: Vec<u32>,
}

/// The security a callback over the back channel is sent with (one accepted entry
/// of `callback_sec_parms4`, RFC 8881 §18.33, §18.36). RPCSEC_GSS is not offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackSec {
    /// `AUTH_NONE`.
    None,
    /// `AUTH_SYS` with these parameters.
    Sys {
        /// `stamp`.
        stamp: u32,
        /// `machinename`.
        machine: Bytes,
        /// `uid`.
        uid: u32,
        /// `gid`.
        gid: u32,
        /// `gids`.
        gids: Vec<u32>,
    },
}

/// What the server calls back with: the client's callback program number and the
/// security to use, set by CREATE_SESSION and replaced by BACKCHANNEL_CTL (RFC 8881
/// §18.33.3). The server's callback client (`txnfs_server::callback`, ADR 0016) calls
/// with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackParams {
    /// `csa_cb_program` / `bca_cb_program`.
    pub program: u32,
    /// The first acceptable entry of the client's list.
    pub sec: CallbackSec,
}

impl Default for CallbackParams {
    fn default() -> Self {
        CallbackParams {
            program: 0,
            sec: CallbackSec::None,
        }
    }
}

/// Negotiated channel limits (channel_attrs4 without RDMA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelAttrs {
    /// `ca_maxrequestsize`.
    pub max_request: u32,
    /// `ca_maxresponsesize`.
    pub max_response: u32,
    /// `ca_maxresponsesize_cached`.
    pub max_response_cached: u32,
    /// `ca_maxoperations`.
    pub max_ops: u32,
    /// `ca_maxrequests` (slots).
    pub max_requests: u32,
}

/// What a COMPOUND needs of its session: fixed when the session is created, so the
/// executor may hold it without a lock. The mutable parts (slots, connections) stay
/// inside the table.
#[derive(Debug)]
pub struct Session {
    /// The session id.
    pub id: SessionId,
    /// The client the session belongs to.
    pub client: ClientId,
    /// The negotiated fore-channel limits.
    pub fore: ChannelAttrs,
    /// CREATE_SESSION4_FLAG_PERSIST was granted: every cached reply must be durable
    /// before it is sent (ADR 0022).
    pub persistent: bool,
    /// What the session's client did (shared by all its sessions and its record), counted
    /// by the executor without the core's lock.
    pub activity: Arc<ClientActivity>,
}

/// What one client did through its sessions, for `txnfs stats --clients` (ADR 0045):
/// relaxed atomic adds by the executor, read when a report is made. Lives as long as
/// the client record (a new session of the same record adds to it).
#[derive(Debug, Default)]
pub struct ClientActivity {
    /// COMPOUNDs executed (SEQUENCE said execute; replays are not counted).
    pub compounds: AtomicU64,
    /// Ops executed in them, SEQUENCE included.
    pub ops: AtomicU64,
    /// READ payload bytes sent.
    pub read_bytes: AtomicU64,
    /// WRITE payload bytes written.
    pub write_bytes: AtomicU64,
}

/// A session's mutable state, only touched under the core's lock.
#[derive(Debug)]
struct SessionRecord {
    shared: Arc<Session>,
    slots: SlotTable,
    /// Connections bound to this session (by transport connection id).
    conns: HashSet<u64>,
    /// The callback program and security (CREATE_SESSION, BACKCHANNEL_CTL).
    callback: CallbackParams,
    /// Reply-cache bytes reserved for this session's slots.
    cache_reserved: usize,
    /// `csr_flags` as granted.
    flags: u32,
    /// Negotiated back channel.
    back: ChannelAttrs,
    /// Restored after a restart with a back channel and none bound yet: the first
    /// request's connection becomes it ([`SequenceOk::rebind_back_channel`]).
    rebind_back: bool,
}

/// One client incarnation (RFC 8881 §2.4).
#[derive(Debug)]
pub(crate) struct ClientRecord {
    pub(crate) owner: Bytes,
    verifier: [u8; 8],
    /// Who sent the EXCHANGE_ID that made this record.
    principal: Principal,
    pub(crate) confirmed: bool,
    /// csa_sequence the next CREATE_SESSION must carry.
    create_seq: u32,
    /// The reply to the last CREATE_SESSION, for its replay.
    last_create: Option<(u32, CreateSessionOutcome)>,
    last_renew: Instant,
    sessions: Vec<SessionId>,
    pub(crate) reclaim_complete: bool,
    /// Restored from the durable session store after a restart: until its global
    /// RECLAIM_COMPLETE, SEQUENCE says SEQ4_STATUS_RESTART_RECLAIM_NEEDED.
    restored: bool,
    /// A v4.0 client (SETCLIENTID): its callback address and confirm verifier.
    pub(crate) v40: Option<setclientid::V40Client>,
    /// What it did through its sessions (each [`Session::activity`] shares it).
    pub(crate) activity: Arc<ClientActivity>,
}

impl ClientRecord {
    /// EXCHANGE_ID's answer for this confirmed record, known as `id`, whose lease the
    /// request renews.
    fn renew_confirmed(&mut self, id: ClientId, now: Instant) -> ExchangeIdOk {
        self.last_renew = now;
        ExchangeIdOk {
            clientid: id,
            sequenceid: self.create_seq,
            confirmed: true,
        }
    }
}

/// Bounds on clients and sessions, and the channel maxima the server offers.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Client records (confirmed or not).
    pub max_clients: usize,
    /// Sessions per client.
    pub max_sessions_per_client: usize,
    /// Fore-channel maxima.
    pub server_fore: ChannelAttrs,
    /// Back-channel maxima.
    pub server_back: ChannelAttrs,
    /// Whether connections may be bound to the back channel (callbacks). Without it,
    /// CREATE_SESSION clears `CREATE_SESSION4_FLAG_CONN_BACK_CHAN` and
    /// BIND_CONN_TO_SESSION binds the fore channel only.
    pub back_channel: bool,
    /// Bytes of reply cache all sessions together may hold. CREATE_SESSION reserves
    /// slots × `ca_maxresponsesize_cached` for the session's lifetime (as knfsd's DRC
    /// memory) and grants fewer slots when the rest does not fit, so the cache is bounded
    /// however many clients and sessions come.
    pub reply_cache_bytes: usize,
}

/// All clients and sessions of one server instance.
#[derive(Debug)]
pub struct SessionTable {
    boot_epoch: u32,
    next_client: u32,
    next_session: u32,
    clients: HashMap<ClientId, ClientRecord>,
    /// Owner -> (confirmed id, unconfirmed id).
    by_owner: HashMap<Bytes, (Option<ClientId>, Option<ClientId>)>,
    sessions: HashMap<SessionId, SessionRecord>,
    limits: SessionLimits,
    /// Reply-cache bytes reserved by the live sessions (at most `reply_cache_bytes`).
    cache_reserved: usize,
    /// Grant CREATE_SESSION4_FLAG_PERSIST to clients that ask (ADR 0022).
    persistence: bool,
}

impl SessionTable {
    /// An empty table; `boot_epoch` goes into every client and session id so that
    /// those of an earlier server instance are stale.
    pub fn new(boot_epoch: u32, limits: SessionLimits) -> Self {
        SessionTable {
            boot_epoch,
            next_client: 1,
            next_session: 1,
            clients: HashMap::new(),
            by_owner: HashMap::new(),
            sessions: HashMap::new(),
            limits,
            cache_reserved: 0,
            persistence: false,
        }
    }

    /// Whether CREATE_SESSION grants CREATE_SESSION4_FLAG_PERSIST to clients that ask
    /// for it (off by default: the server must then make every cached reply of those
    /// sessions durable before sending it, ADR 0022).
    pub fn set_persistence(&mut self, on: bool) {
        self.persistence = on;
    }

    fn new_client_id(&mut self) -> ClientId {
        let id = (u64::from(self.boot_epoch) << 32) | u64::from(self.next_client);
        self.next_client = self.next_client.wrapping_add(1).max(1);
        id
    }

    pub(crate) fn client(&self, id: ClientId) -> Option<&ClientRecord> {
        self.clients.get(&id)
    }

    pub(crate) fn client_mut(&mut self, id: ClientId) -> Option<&mut ClientRecord> {
        self.clients.get_mut(&id)
    }

    /// Remove a session, returning its reply-cache reservation to the budget.
    fn drop_session(&mut self, id: &SessionId) -> Option<SessionRecord> {
        let s = self.sessions.remove(id)?;
        self.cache_reserved -= s.cache_reserved;
        Some(s)
    }

    /// Reply-cache bytes the live sessions have reserved.
    pub fn reply_cache_reserved(&self) -> usize {
        self.cache_reserved
    }

    /// SEQUENCE's session part (RFC 8881 §18.46.4): finds the session, checks the
    /// request against the channel limits and applies the slot rules. A request that
    /// is executed or replayed renews the client's lease and binds the connection to
    /// the session (with SP4_NONE a connection is bound by using it, §2.10.3.1).
    pub fn sequence(
        &mut self,
        args: &SequenceArgs,
        now: Instant,
    ) -> Result<SequenceOk, SessionError> {
        let rec = self
            .sessions
            .get_mut(&args.session)
            .ok_or(SessionError::BadSession)?;
        if args.nops > rec.shared.fore.max_ops {
            return Err(SessionError::TooManyOps);
        }
        if args.request_len > rec.shared.fore.max_request as usize {
            return Err(SessionError::ReqTooBig);
        }
        if args
            .cache_reply
            .is_some_and(|n| n > rec.shared.fore.max_response_cached as usize)
        {
            return Err(SessionError::RepTooBigToCache);
        }
        let verdict = rec.slots.begin(args.slot, args.seqid, args.request_hash);
        let highest_slot = rec.slots.granted() - 1;
        let session = rec.shared.clone();
        let mut rebind_back_channel = None;
        if matches!(verdict, SlotVerdict::Execute | SlotVerdict::Replay(_)) {
            rec.conns.insert(args.conn);
            if std::mem::take(&mut rec.rebind_back) {
                rebind_back_channel = Some(rec.callback.clone());
            }
            self.renew(session.client, now);
        }
        let reclaim_needed = self
            .clients
            .get(&session.client)
            .is_some_and(|c| c.restored && !c.reclaim_complete);
        Ok(SequenceOk {
            session,
            verdict,
            highest_slot,
            delegations_revoked: false,
            reclaim_needed,
            rebind_back_channel,
        })
    }

    /// Records the reply of the request executing in `slot` of `session` (the cache
    /// entry SEQUENCE marked in progress). A session destroyed meanwhile is ignored.
    pub fn finish_slot(&mut self, session: &SessionId, slot: u32, reply: Option<Gathered>) {
        if let Some(rec) = self.sessions.get_mut(session) {
            rec.slots.finish(slot, reply);
        }
    }

    /// BIND_CONN_TO_SESSION (RFC 8881 §18.34). With a back channel
    /// ([`SessionLimits::back_channel`]) the server grants what was asked (`*_OR_BOTH`
    /// gets [`ConnDir::Both`]). Without one the connection is bound to the fore
    /// channel only: `*_OR_BOTH` requests get [`ConnDir::Fore`] and a request for the
    /// back channel alone is refused with [`SessionError::Inval`] (the server cannot
    /// do what was asked).
    pub fn bind_conn(
        &mut self,
        session: &SessionId,
        dir: ConnDirRequest,
        conn: u64,
        now: Instant,
    ) -> Result<ConnDir, SessionError> {
        let rec = self
            .sessions
            .get_mut(session)
            .ok_or(SessionError::BadSession)?;
        let granted = match (dir, self.limits.back_channel) {
            (ConnDirRequest::Fore, _) => ConnDir::Fore,
            (ConnDirRequest::ForeOrBoth | ConnDirRequest::BackOrBoth, true) => ConnDir::Both,
            (ConnDirRequest::ForeOrBoth | ConnDirRequest::BackOrBoth, false) => ConnDir::Fore,
            (ConnDirRequest::Back, true) => ConnDir::Back,
            (ConnDirRequest::Back, false) => return Err(SessionError::Inval),
        };
        rec.conns.insert(conn);
        if matches!(granted, ConnDir::Back | ConnDir::Both) {
            // A restored session's back channel is bound now: not again by SEQUENCE.
            rec.rebind_back = false;
        }
        let client = rec.shared.client;
        self.renew(client, now);
        Ok(granted)
    }

    /// BACKCHANNEL_CTL (RFC 8881 §18.33): the session's callback program and security
    /// from now on.
    pub fn set_callback(
        &mut self,
        session: &SessionId,
        callback: CallbackParams,
    ) -> Result<(), SessionError> {
        let rec = self
            .sessions
            .get_mut(session)
            .ok_or(SessionError::BadSession)?;
        rec.callback = callback;
        Ok(())
    }

    /// The callback program and security of session `id`.
    pub fn callback(&self, id: &SessionId) -> Option<&CallbackParams> {
        self.sessions.get(id).map(|r| &r.callback)
    }

    /// Whether client `id` is an unconfirmed record last renewed more than `lease`
    /// before `now`. Such a record is dead even before [`SessionTable::expire_unconfirmed`]
    /// runs: an unconfirmed client id is only good for one lease (no courtesy time, as
    /// in knfsd), so whether CREATE_SESSION may use it must not depend on when the
    /// timer last ran.
    pub fn unconfirmed_expired(&self, id: ClientId, lease: Duration, now: Instant) -> bool {
        self.clients
            .get(&id)
            .is_some_and(|r| !r.confirmed && now.saturating_duration_since(r.last_renew) > lease)
    }

    /// The session `id`, if it exists.
    pub fn session(&self, id: &SessionId) -> Option<Arc<Session>> {
        self.sessions.get(id).map(|r| r.shared.clone())
    }

    /// Whether client `id` exists (confirmed or not).
    pub fn client_exists(&self, id: ClientId) -> bool {
        self.clients.contains_key(&id)
    }

    /// Renews `client`'s lease.
    pub fn renew(&mut self, client: ClientId, now: Instant) {
        if let Some(r) = self.clients.get_mut(&client) {
            r.last_renew = now;
        }
    }

    /// Removes `client` and its sessions now (a courtesy client whose state another
    /// client's request needs); whether it was confirmed, `None` if unknown.
    pub fn remove_expired(&mut self, client: ClientId) -> Option<bool> {
        let confirmed = self.clients.get(&client)?.confirmed;
        self.remove_client(client);
        Some(confirmed)
    }

    /// When `client` last renewed its lease, if it exists.
    pub fn last_renewal(&self, client: ClientId) -> Option<Instant> {
        self.clients.get(&client).map(|r| r.last_renew)
    }

    /// DESTROY_SESSION (RFC 8881 §18.37).
    pub fn destroy_session(&mut self, id: &SessionId) -> Result<(), SessionError> {
        let s = self.drop_session(id).ok_or(SessionError::BadSession)?;
        if let Some(r) = self.clients.get_mut(&s.shared.client) {
            r.sessions.retain(|x| x != id);
        }
        Ok(())
    }

    /// DESTROY_CLIENTID's session part: refused while the client has sessions. The
    /// caller ([`crate::StateCore::destroy_client`]) checks opens and locks in the
    /// same critical section.
    pub fn destroy_client(&mut self, id: ClientId) -> Result<(), SessionError> {
        let r = self.clients.get(&id).ok_or(SessionError::StaleClientId)?;
        if !r.sessions.is_empty() {
            return Err(SessionError::ClientIdBusy);
        }
        self.remove_client(id);
        Ok(())
    }

    pub(crate) fn remove_client(&mut self, id: ClientId) {
        if let Some(r) = self.clients.remove(&id) {
            for s in &r.sessions {
                self.drop_session(s);
            }
            if let Some((c, u)) = self.by_owner.get_mut(&r.owner) {
                if *c == Some(id) {
                    *c = None;
                }
                if *u == Some(id) {
                    *u = None;
                }
                if c.is_none() && u.is_none() {
                    self.by_owner.remove(&r.owner);
                }
            }
        }
    }

    /// Clients whose lease ran out (`now - last renewal > lease`); they and their
    /// sessions are removed and returned with whether they were confirmed, so the
    /// caller can free their state.
    pub fn expire(&mut self, lease: Duration, now: Instant) -> Vec<(ClientId, bool)> {
        let mut dead: Vec<(ClientId, bool)> = self
            .clients
            .iter()
            .filter(|(_, r)| now.saturating_duration_since(r.last_renew) > lease)
            .map(|(id, r)| (*id, r.confirmed))
            .collect();
        // Deterministic order (the simulation replays runs).
        dead.sort_unstable();
        for (id, _) in &dead {
            self.remove_client(*id);
        }
        dead
    }

    /// Unconfirmed records whose lease ran out (no courtesy time: nothing of theirs
    /// needs keeping); removed and returned, sorted.
    pub fn expire_unconfirmed(&mut self, lease: Duration, now: Instant) -> Vec<ClientId> {
        let mut dead: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, r)| !r.confirmed && now.saturating_duration_since(r.last_renew) > lease)
            .map(|(id, _)| *id)
            .collect();
        dead.sort_unstable();
        for id in &dead {
            self.remove_client(*id);
        }
        dead
    }

    /// Owners of confirmed clients (persisted so a restarted server knows whom to wait
    /// for during its grace period), sorted.
    pub fn confirmed_owners(&self) -> Vec<Bytes> {
        let mut v: Vec<Bytes> = self
            .clients
            .values()
            .filter(|r| r.confirmed)
            .map(|r| r.owner.clone())
            .collect();
        v.sort_unstable();
        v
    }

    /// Connection closed: unbind it from every session.
    /// Returns the sessions it was the last connection of (a transaction open on one of
    /// them has nobody left to finish it: the server rolls it back at once).
    pub fn connection_closed(&mut self, conn: u64) -> Vec<SessionId> {
        let mut orphaned = Vec::new();
        for (id, s) in self.sessions.iter_mut() {
            if s.conns.remove(&conn) && s.conns.is_empty() {
                orphaned.push(*id);
            }
        }
        orphaned
    }

    /// Connections bound to `session` (diagnostics and tests).
    pub fn connections(&self, session: &SessionId) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .sessions
            .get(session)
            .map(|r| r.conns.iter().copied().collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// (clients, sessions).
    pub fn counts(&self) -> (usize, usize) {
        (self.clients.len(), self.sessions.len())
    }

    /// Fore-channel slots of all sessions: (in use, granted). In use: executing a
    /// request now ([`SlotTable::in_use`]).
    pub fn slot_counts(&self) -> (u64, u64) {
        self.sessions.values().fold((0, 0), |(u, g), s| {
            (
                u + u64::from(s.slots.in_use()),
                g + u64::from(s.slots.granted()),
            )
        })
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod v40_tests;
