//! Clients and sessions (RFC 8881 §2.4, §2.10, §18.35-§18.37, §18.46-§18.51):
//! EXCHANGE_ID's client records, CREATE_SESSION's sessions with their slot tables
//! and bound connections, and lease renewal. Owned by [`crate::StateCore`], which
//! adds the cross-table decisions (releasing opens and locks, grace, effects).
//!
//! Sans-IO: every method takes `now` and returns a decision; the server turns the
//! decisions into wire results.

use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::slots::{SlotTable, SlotVerdict};
use crate::types::ClientId;

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

/// CREATE_SESSION's result (replayed verbatim for a retransmission).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionOutcome {
    /// The new session.
    pub id: SessionId,
    /// `csr_sequence`.
    pub seq: u32,
    /// `csr_flags`.
    pub flags: u32,
    /// Negotiated fore channel.
    pub fore: ChannelAttrs,
    /// Negotiated back channel.
    pub back: ChannelAttrs,
}

/// A CREATE_SESSION request (RFC 8881 §18.36.1), wire types mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateSessionArgs {
    /// `csa_clientid`.
    pub clientid: ClientId,
    /// `csa_sequence`.
    pub seq: u32,
    /// `csa_flags`.
    pub flags: u32,
    /// Requested fore channel.
    pub fore: ChannelAttrs,
    /// Requested back channel.
    pub back: ChannelAttrs,
    /// The connection the request arrived on (bound to the new session).
    pub conn: u64,
}

/// EXCHANGE_ID's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangeIdOk {
    /// `eir_clientid`.
    pub clientid: ClientId,
    /// `eir_sequenceid`.
    pub sequenceid: u32,
    /// Whether the record is confirmed (`EXCHGID4_FLAG_CONFIRMED_R`).
    pub confirmed: bool,
}

/// A SEQUENCE request (RFC 8881 §18.46.1) plus what the executor knows of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceArgs {
    /// `sa_sessionid`.
    pub session: SessionId,
    /// `sa_slotid`.
    pub slot: u32,
    /// `sa_sequenceid`.
    pub seqid: u32,
    /// Hash of the request (false-retry detection).
    pub request_hash: u64,
    /// Operations in the COMPOUND.
    pub nops: u32,
    /// Size of the COMPOUND request in bytes.
    pub request_len: usize,
    /// The connection the request arrived on.
    pub conn: u64,
    /// When the client asked for the reply to be cached (`sa_cachethis`): the size of
    /// the reply up to and including SEQUENCE's own result. A reply cache smaller than
    /// that cannot hold any reply: SEQUENCE fails with NFS4ERR_REP_TOO_BIG_TO_CACHE
    /// before the slot is touched (RFC 8881 §18.46.3, §15.1.3.5; knfsd does the same).
    pub cache_reply: Option<usize>,
}

/// SEQUENCE's decision for a known session.
#[derive(Debug, Clone)]
pub struct SequenceOk {
    /// The session, for the rest of the COMPOUND.
    pub session: Arc<Session>,
    /// What to do with the request (execute, replay, or an error status).
    pub verdict: SlotVerdict,
    /// `sr_highest_slotid`.
    pub highest_slot: u32,
    /// The client has delegations revoked and not yet freed
    /// (SEQ4_STATUS_RECALLABLE_STATE_REVOKED); filled in by the core.
    pub delegations_revoked: bool,
    /// The client was restored after a server restart and has not sent its global
    /// RECLAIM_COMPLETE yet (SEQ4_STATUS_RESTART_RECLAIM_NEEDED, RFC 8881 §18.46.3).
    pub reclaim_needed: bool,
    /// The session was restored with a back channel and this is its first request
    /// since: bind the request's connection as the back channel with these
    /// parameters (as CREATE_SESSION did).
    pub rebind_back_channel: Option<CallbackParams>,
}

/// The direction a client asks BIND_CONN_TO_SESSION for (`channel_dir_from_client4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnDirRequest {
    /// `CDFC4_FORE`.
    Fore,
    /// `CDFC4_BACK`.
    Back,
    /// `CDFC4_FORE_OR_BOTH`.
    ForeOrBoth,
    /// `CDFC4_BACK_OR_BOTH`.
    BackOrBoth,
}

/// The direction a connection was bound for (`channel_dir_from_server4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnDir {
    /// `CDFS4_FORE`.
    Fore,
    /// `CDFS4_BACK` (only with a back channel).
    Back,
    /// `CDFS4_BOTH` (only with a back channel).
    Both,
}

/// Session-layer failures; each maps to one NFS4ERR_*.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// `NFS4ERR_STALE_CLIENTID`.
    #[error("NFS4ERR_STALE_CLIENTID")]
    StaleClientId,
    /// `NFS4ERR_SEQ_MISORDERED`.
    #[error("NFS4ERR_SEQ_MISORDERED")]
    SeqMisordered,
    /// `NFS4ERR_BADSESSION`.
    #[error("NFS4ERR_BADSESSION")]
    BadSession,
    /// `NFS4ERR_CLIENTID_BUSY`.
    #[error("NFS4ERR_CLIENTID_BUSY")]
    ClientIdBusy,
    /// `NFS4ERR_NOENT`.
    #[error("NFS4ERR_NOENT")]
    NoEnt,
    /// `NFS4ERR_NOT_SAME`.
    #[error("NFS4ERR_NOT_SAME")]
    NotSame,
    /// `NFS4ERR_RESOURCE`.
    #[error("NFS4ERR_RESOURCE")]
    Resource,
    /// `NFS4ERR_COMPLETE_ALREADY`.
    #[error("NFS4ERR_COMPLETE_ALREADY")]
    CompleteAlready,
    /// `NFS4ERR_INVAL`.
    #[error("NFS4ERR_INVAL")]
    Inval,
    /// `NFS4ERR_TOOSMALL`.
    #[error("NFS4ERR_TOOSMALL")]
    TooSmall,
    /// `NFS4ERR_TOO_MANY_OPS`.
    #[error("NFS4ERR_TOO_MANY_OPS")]
    TooManyOps,
    /// `NFS4ERR_REQ_TOO_BIG`.
    #[error("NFS4ERR_REQ_TOO_BIG")]
    ReqTooBig,
    /// `NFS4ERR_REP_TOO_BIG_TO_CACHE`.
    #[error("NFS4ERR_REP_TOO_BIG_TO_CACHE")]
    RepTooBigToCache,
    /// `NFS4ERR_PERM`: an EXCHANGE_ID update from another principal (RFC 8881
    /// §18.35.5 case 9).
    #[error("NFS4ERR_PERM")]
    Perm,
    /// `NFS4ERR_CLID_INUSE`: the owner's client id belongs to another principal
    /// (§18.35.5 case 3, §18.36.4).
    #[error("NFS4ERR_CLID_INUSE")]
    ClidInUse,
    /// `NFS4ERR_DELAY`: the reply cache has no room for even one more slot now.
    #[error("NFS4ERR_DELAY")]
    Delay,
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

/// What a restarted server needs to recognise a client that holds persistent sessions
/// (ADR 0022): written to the durable session store when such a session is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableClient {
    /// The client id (with the boot epoch of the instance that made it).
    pub id: ClientId,
    /// `co_ownerid`.
    pub owner: Bytes,
    /// `co_verifier`.
    pub verifier: [u8; 8],
    /// Who sent the EXCHANGE_ID.
    pub principal: Principal,
    /// `csa_sequence` the next CREATE_SESSION must carry.
    pub create_seq: u32,
    /// The last CREATE_SESSION's sequence id and reply, for its replay.
    pub last_create: Option<(u32, CreateSessionOutcome)>,
}

/// A persistent session as the durable session store keeps it (ADR 0022).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableSession {
    /// The session id.
    pub id: SessionId,
    /// Its client.
    pub client: ClientId,
    /// `csr_flags` as granted.
    pub flags: u32,
    /// Negotiated fore channel (its `max_requests` is the slot count).
    pub fore: ChannelAttrs,
    /// Negotiated back channel.
    pub back: ChannelAttrs,
    /// Callback program and security.
    pub callback: CallbackParams,
}

/// One slot of a persistent session as stored: the last sequence id it executed, that
/// request's hash and its reply (`None`: executed, reply not cached).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableSlot {
    /// The slot id.
    pub slot: u32,
    /// `sa_sequenceid` of the last request.
    pub seqid: u32,
    /// Its request hash.
    pub request_hash: u64,
    /// Its encoded COMPOUND4res.
    pub reply: Option<Bytes>,
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

/// Smallest `ca_maxrequestsize` we accept: a COMPOUND of SEQUENCE alone with an
/// empty tag (tag length, minor version, op count, opcode, 32 bytes of SEQUENCE4args
/// = 48) fits. Small sizes are negotiated, not refused (RFC 8881 §18.36.3); requests
/// above them are refused one by one (NFS4ERR_REQ_TOO_BIG).
const MIN_REQUEST_SIZE: u32 = 48;

/// Smallest `ca_maxresponsesize` we accept: the reply to SEQUENCE alone with an empty
/// tag (status, tag length, result count, opcode, status, 36 bytes of
/// SEQUENCE4resok = 56); larger replies get NFS4ERR_REP_TOO_BIG.
const MIN_RESPONSE_SIZE: u32 = 56;

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

    /// EXCHANGE_ID (RFC 8881 §18.35.5), the nine cases of the table, as knfsd orders
    /// them. `has_state` says whether a client holds opens or locks (the caller's
    /// table); sessions are counted here. Returns the answer and, in case 3, the
    /// confirmed client of another principal that held no state and was removed to
    /// make room (the caller persists the client list). A confirmed record replaced by
    /// a client restart (case 5) stays until the new record is confirmed
    /// ([`SessionTable::create_session`]).
    pub fn exchange_id(
        &mut self,
        principal: &Principal,
        owner: &Bytes,
        verifier: [u8; 8],
        update: bool,
        now: Instant,
        has_state: impl Fn(ClientId) -> bool,
    ) -> Result<(ExchangeIdOk, Option<ClientId>), SessionError> {
        let (conf, unconf) = self.by_owner.get(owner).cloned().unwrap_or((None, None));
        let conf = conf.filter(|c| self.clients.contains_key(c));
        if update {
            // Case 7: nothing to update.
            let Some(cid) = conf else {
                return Err(SessionError::NoEnt);
            };
            let rec = self
                .clients
                .get_mut(&cid)
                .ok_or(SessionError::StaleClientId)?;
            // Case 9: only the record's own principal may update it.
            if rec.principal != *principal {
                return Err(SessionError::Perm);
            }
            // Case 8: an update names the incarnation it updates.
            if rec.verifier != verifier {
                return Err(SessionError::NotSame);
            }
            // Case 6.
            return Ok((rec.renew_confirmed(cid, now), None));
        }
        let mut removed = None;
        if let Some(cid) = conf {
            let has_sessions = self
                .clients
                .get(&cid)
                .is_some_and(|r| !r.sessions.is_empty());
            if let Some(rec) = self.clients.get_mut(&cid) {
                if rec.principal != *principal {
                    // Case 3, a collision of two clients using one owner string: the
                    // other principal's state is not ours to destroy; a record holding
                    // none is simply replaced (knfsd does the same).
                    if has_sessions || has_state(cid) {
                        return Err(SessionError::ClidInUse);
                    }
                    removed = Some(cid);
                } else if rec.verifier == verifier {
                    // Case 2: a retry or a second EXCHANGE_ID of a live client.
                    return Ok((rec.renew_confirmed(cid, now), None));
                }
                // Case 5 (same principal, new verifier: the client restarted): a new
                // unconfirmed record beside the confirmed one.
            }
        }
        if let Some(old) = removed {
            self.remove_client(old);
        }
        // Case 4: an unconfirmed record is replaced, whoever sent it (its client id
        // becomes stale); case 1: a new owner.
        if let Some(u) = unconf {
            self.remove_client(u);
        }
        if self.clients.len() >= self.limits.max_clients {
            return Err(SessionError::Resource);
        }
        let id = self.new_client_id();
        self.clients.insert(
            id,
            ClientRecord {
                owner: owner.clone(),
                verifier,
                principal: principal.clone(),
                confirmed: false,
                create_seq: 1,
                last_create: None,
                last_renew: now,
                sessions: Vec::new(),
                reclaim_complete: false,
                restored: false,
            },
        );
        let conf = conf.filter(|c| Some(*c) != removed);
        self.by_owner.insert(owner.clone(), (conf, Some(id)));
        Ok((
            ExchangeIdOk {
                clientid: id,
                sequenceid: 1,
                confirmed: false,
            },
            removed,
        ))
    }

    /// Fit the session's slots into what is left of the reply-cache budget: fewer slots
    /// than asked when they do not all fit (the client follows the granted count), DELAY
    /// when not one does. Returns the bytes to reserve (the caller commits them).
    fn reserve_reply_cache(&mut self, fore: &mut ChannelAttrs) -> Result<usize, SessionError> {
        let per_slot = (fore.max_response_cached as usize).max(1);
        let free = self
            .limits
            .reply_cache_bytes
            .saturating_sub(self.cache_reserved);
        let fits = u32::try_from(free / per_slot).unwrap_or(u32::MAX);
        if fits == 0 {
            return Err(SessionError::Delay);
        }
        fore.max_requests = fore.max_requests.min(fits);
        let bytes = fore.max_requests as usize * per_slot;
        self.cache_reserved += bytes;
        Ok(bytes)
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

    fn negotiate(req: &ChannelAttrs, max: &ChannelAttrs) -> Result<ChannelAttrs, SessionError> {
        if req.max_request < MIN_REQUEST_SIZE || req.max_response < MIN_RESPONSE_SIZE {
            return Err(SessionError::TooSmall);
        }
        Ok(ChannelAttrs {
            max_request: req.max_request.min(max.max_request),
            max_response: req.max_response.min(max.max_response),
            max_response_cached: req.max_response_cached.min(max.max_response_cached),
            max_ops: req.max_ops.clamp(1, max.max_ops),
            max_requests: req.max_requests.clamp(1, max.max_requests),
        })
    }

    /// CREATE_SESSION (RFC 8881 §18.36) sent by `principal`, recording `callback` on
    /// the new session. On success returns the outcome and, if this confirmed a
    /// client that replaced an older incarnation, that old client id (its record and
    /// sessions are gone; the caller releases its opens and locks).
    pub fn create_session(
        &mut self,
        principal: &Principal,
        args: &CreateSessionArgs,
        callback: CallbackParams,
        now: Instant,
    ) -> Result<(CreateSessionOutcome, Option<ClientId>), SessionError> {
        let clientid = args.clientid;
        let seq = args.seq;
        // §18.36.3: flags the specification does not define are an error, not ignored.
        if args.flags & !CREATE_SESSION4_FLAG_MASK != 0 {
            return Err(SessionError::Inval);
        }
        let rec = self
            .clients
            .get(&clientid)
            .ok_or(SessionError::StaleClientId)?;
        // §18.36.4: only the principal that sent EXCHANGE_ID may confirm the record
        // (a confirmed record's sessions may be created by others, as in knfsd).
        if !rec.confirmed && rec.principal != *principal {
            return Err(SessionError::ClidInUse);
        }
        if let Some((s, out)) = &rec.last_create {
            if seq == *s {
                return Ok((out.clone(), None));
            }
        }
        if seq != rec.create_seq {
            return Err(SessionError::SeqMisordered);
        }
        if rec.sessions.len() >= self.limits.max_sessions_per_client {
            return Err(SessionError::Resource);
        }
        let mut fore = Self::negotiate(&args.fore, &self.limits.server_fore)?;
        let back = Self::negotiate(&args.back, &self.limits.server_back)?;
        let cache_reserved = self.reserve_reply_cache(&mut fore)?;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&clientid.to_be_bytes());
        id[8..12].copy_from_slice(&self.boot_epoch.to_be_bytes());
        id[12..].copy_from_slice(&self.next_session.to_be_bytes());
        self.next_session = self.next_session.wrapping_add(1);
        // Persistence only when configured and asked for; never RDMA; the back-channel
        // flag only when connections may carry callbacks.
        let mut flags = if self.limits.back_channel {
            args.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        } else {
            0
        };
        if self.persistence {
            flags |= args.flags & CREATE_SESSION4_FLAG_PERSIST;
        }
        self.sessions.insert(
            id,
            SessionRecord {
                shared: Arc::new(Session {
                    id,
                    client: clientid,
                    fore,
                    persistent: flags & CREATE_SESSION4_FLAG_PERSIST != 0,
                }),
                slots: SlotTable::new(fore.max_requests),
                conns: HashSet::from([args.conn]),
                callback,
                cache_reserved,
                flags,
                back,
                rebind_back: false,
            },
        );
        let outcome = CreateSessionOutcome {
            id,
            seq,
            flags,
            fore,
            back,
        };
        let mut replaced = None;
        let owner;
        {
            let rec = self
                .clients
                .get_mut(&clientid)
                .ok_or(SessionError::StaleClientId)?;
            rec.create_seq = seq.wrapping_add(1);
            rec.last_create = Some((seq, outcome.clone()));
            rec.sessions.push(id);
            rec.last_renew = now;
            owner = rec.owner.clone();
            if !rec.confirmed {
                rec.confirmed = true;
                let (old_conf, _) = self.by_owner.get(&owner).cloned().unwrap_or((None, None));
                if let Some(old) = old_conf.filter(|o| *o != clientid) {
                    replaced = Some(old);
                }
                self.by_owner.insert(owner.clone(), (Some(clientid), None));
            }
        }
        if let Some(old) = replaced {
            self.remove_client(old);
        }
        Ok((outcome, replaced))
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
    pub fn finish_slot(&mut self, session: &SessionId, slot: u32, reply: Option<Bytes>) {
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

    // ---- durable sessions (ADR 0022) ------------------------------------------------

    /// The durable records of persistent session `id` and its client, if it is one.
    pub fn durable(&self, id: &SessionId) -> Option<(DurableClient, DurableSession)> {
        let s = self.sessions.get(id)?;
        if !s.shared.persistent {
            return None;
        }
        let client = self.durable_client(s.shared.client)?;
        Some((
            client,
            DurableSession {
                id: *id,
                client: s.shared.client,
                flags: s.flags,
                fore: s.shared.fore,
                back: s.back,
                callback: s.callback.clone(),
            },
        ))
    }

    /// The durable record of client `id` (confirmed or not).
    pub fn durable_client(&self, id: ClientId) -> Option<DurableClient> {
        let r = self.clients.get(&id)?;
        Some(DurableClient {
            id,
            owner: r.owner.clone(),
            verifier: r.verifier,
            principal: r.principal.clone(),
            create_seq: r.create_seq,
            last_create: r.last_create.clone(),
        })
    }

    /// Confirmed clients that hold a persistent session, with their owners.
    pub fn with_persistent_sessions(&self) -> Vec<(ClientId, Bytes)> {
        self.clients
            .iter()
            .filter(|(id, r)| r.confirmed && self.has_persistent_session(**id))
            .map(|(id, r)| (*id, r.owner.clone()))
            .collect()
    }

    /// Whether client `id` has a persistent session.
    pub fn has_persistent_session(&self, id: ClientId) -> bool {
        self.clients.get(&id).is_some_and(|r| {
            r.sessions
                .iter()
                .any(|s| self.sessions.get(s).is_some_and(|s| s.shared.persistent))
        })
    }

    /// Restores a confirmed client of a previous instance from the durable session
    /// store, renewed at `now`. It must reclaim its state (its opens, locks and
    /// delegations are not restored): until its global RECLAIM_COMPLETE, SEQUENCE
    /// reports SEQ4_STATUS_RESTART_RECLAIM_NEEDED. A record of the same owner already
    /// here is replaced (the store's later record wins).
    pub fn restore_client(&mut self, c: DurableClient, now: Instant) {
        if let Some((conf, unconf)) = self.by_owner.get(&c.owner).cloned() {
            for old in conf.into_iter().chain(unconf) {
                self.remove_client(old);
            }
        }
        self.remove_client(c.id);
        self.by_owner.insert(c.owner.clone(), (Some(c.id), None));
        self.clients.insert(
            c.id,
            ClientRecord {
                owner: c.owner,
                verifier: c.verifier,
                principal: c.principal,
                confirmed: true,
                create_seq: c.create_seq,
                last_create: c.last_create,
                last_renew: now,
                sessions: Vec::new(),
                reclaim_complete: false,
                restored: true,
            },
        );
    }

    /// Restores a persistent session of a restored client with its slots (each at
    /// its last sequence id and reply, so a retransmission is answered from them).
    /// Its reply cache is reserved even beyond the budget: the client was promised
    /// these slots. [`SessionError::StaleClientId`] when its client is not here.
    pub fn restore_session(
        &mut self,
        s: DurableSession,
        slots: impl IntoIterator<Item = DurableSlot>,
    ) -> Result<(), SessionError> {
        let rec = self
            .clients
            .get_mut(&s.client)
            .ok_or(SessionError::StaleClientId)?;
        if !rec.sessions.contains(&s.id) {
            rec.sessions.push(s.id);
        }
        self.drop_session(&s.id);
        let mut table = SlotTable::new(s.fore.max_requests);
        for d in slots {
            table.restore(d.slot, d.seqid, d.request_hash, d.reply);
        }
        let cache_reserved =
            s.fore.max_requests as usize * (s.fore.max_response_cached as usize).max(1);
        self.cache_reserved += cache_reserved;
        self.sessions.insert(
            s.id,
            SessionRecord {
                shared: Arc::new(Session {
                    id: s.id,
                    client: s.client,
                    fore: s.fore,
                    persistent: true,
                }),
                slots: table,
                conns: HashSet::new(),
                rebind_back: s.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0,
                callback: s.callback,
                cache_reserved,
                flags: s.flags,
                back: s.back,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests;
