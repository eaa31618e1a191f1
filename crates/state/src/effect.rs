//! What the state core asks the outside world to do. Core methods decide under one
//! lock and return effects; the server executes them after the lock is released (no
//! file I/O, logging or network in the core).

use bytes::Bytes;
use std::time::Duration;

use crate::grace::GraceEnd;
use crate::types::{ClientId, Stateid};

/// One thing for the server to do on the core's behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The set of clients a restarted server must wait for changed: write it to
    /// stable storage. Snapshots carry an increasing generation; the server may skip
    /// a snapshot older than one it already wrote.
    PersistClients(ClientList),
    /// A client incarnation and all its opens and locks are gone (for logging and
    /// statistics).
    ClientReleased {
        /// The client.
        client: ClientId,
        /// Why.
        reason: ReleaseReason,
        /// Open and lock stateids freed with it.
        states: usize,
    },
    /// The grace period is over.
    GraceEnded(GraceEnd),
    /// Send a callback to `client` (on a session of it whose back channel works).
    Callback {
        /// The client.
        client: ClientId,
        /// The call.
        call: Callback,
    },
    /// A delegation was revoked (its holder did not return it in time, or could not
    /// be reached when another client needed the file).
    Revoke {
        /// The holder.
        client: ClientId,
        /// The revoked delegation.
        stateid: Stateid,
        /// Why.
        reason: crate::deleg::RevokeReason,
    },
    /// Delegations went away (returned, revoked, or with their client): requests held
    /// for them may proceed, and the watches of `files` may go. Only these files: a
    /// server holding thousands of delegations must not look at all of them each time
    /// one is returned.
    DelegationsReleased {
        /// The files whose delegations went away (a file may still hold others).
        files: Vec<crate::FileId>,
    },
    /// Directory notifications were queued for a delegation whose queue was idle:
    /// after `after` (the batching delay), take the queue
    /// ([`crate::StateCore::take_dir_notices`]) and send it as CB_NOTIFY; if it cannot
    /// be delivered, recall the delegation ([`crate::StateCore::recall_dir_delegation`]).
    NotifyDue {
        /// The holder.
        client: ClientId,
        /// The directory delegation (internal id).
        id: u64,
        /// The batching delay.
        after: Duration,
    },
}

/// A snapshot of the client owners to persist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientList {
    /// Increases with every snapshot the core makes.
    pub generation: u64,
    /// The owners (`co_ownerid`) of the clients a restart waits for (they hold, or
    /// held before the last restart and have not reclaimed, opens, locks or file
    /// delegations; ADR 0036), sorted.
    pub owners: Vec<Bytes>,
    /// The owners of the other confirmed clients that hold a persistent session
    /// (restored after a restart, not waited for), sorted.
    pub sessions_only: Vec<Bytes>,
}

/// Why a client's state was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// The lease (plus a courtesy lease) ran out.
    LeaseExpired,
    /// The client rebooted and confirmed a new incarnation (RFC 8881 §18.35.4).
    Replaced,
    /// DESTROY_CLIENTID.
    Destroyed,
    /// The lease had run out and another client's OPEN or LOCK conflicted with the
    /// state the server was still keeping as a courtesy (RFC 8881 §8.4.3).
    CourtesyConflict,
}

/// A callback the core wants sent (RFC 8881 §20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callback {
    /// CB_RECALL of a delegation (§20.2).
    Recall {
        /// The delegation stateid.
        stateid: Stateid,
        /// The file's wire filehandle.
        fh: Bytes,
        /// Whether the file is being truncated.
        truncate: bool,
    },
}
