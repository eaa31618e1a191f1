//! What the session operations take and return: CREATE_SESSION's arguments and
//! outcome, EXCHANGE_ID's and SEQUENCE's results, the connection directions of
//! BIND_CONN_TO_SESSION, and the errors of the client and session table.

use std::sync::Arc;

use super::{CallbackParams, ChannelAttrs, Session, SessionId};
use crate::slots::SlotVerdict;
use crate::types::ClientId;

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
