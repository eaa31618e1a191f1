//! What the state core asks the outside world to do. Core methods decide under one
//! lock and return effects; the server executes them after the lock is released (no
//! file I/O, logging or network in the core). Variants marked "reserved" are not
//! emitted yet: they fix the shape the delegation and layout work will use.

use bytes::Bytes;

use crate::grace::GraceEnd;
use crate::session::SessionId;
use crate::types::{ClientId, FileId, Stateid};

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
    /// Reserved: send a callback on the back channel of `session`.
    Callback {
        /// The session whose back channel carries the call.
        session: SessionId,
        /// The call.
        call: Callback,
    },
    /// Reserved: a state was revoked (its holder did not answer a recall in time).
    Revoke {
        /// The holder.
        client: ClientId,
        /// The revoked state.
        stateid: Stateid,
    },
    /// Reserved: a blocked request (e.g. a blocking lock) may proceed now.
    Wake {
        /// Whom to wake.
        waiter: WaiterId,
    },
}

/// A snapshot of the client owners to persist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientList {
    /// Increases with every snapshot the core makes.
    pub generation: u64,
    /// The owners (`co_ownerid`), sorted.
    pub owners: Vec<Bytes>,
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

/// Reserved: a callback the core wants sent (RFC 8881 §20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callback {
    /// CB_RECALL of a delegation.
    Recall {
        /// The delegation stateid.
        stateid: Stateid,
        /// The file.
        file: FileId,
        /// Whether the file is being truncated.
        truncate: bool,
    },
    /// CB_LAYOUTRECALL of the layouts of a file.
    LayoutRecall {
        /// The file.
        file: FileId,
    },
}

/// Reserved: identifies a waiting request.
pub type WaiterId = u64;

/// The kinds of state the core keeps or will keep (RFC 8881 §8.2.1); delegations and
/// layouts are reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// An open (share reservation).
    Open,
    /// A lock-owner's byte-range locks on a file.
    Lock,
    /// Reserved: a delegation.
    Delegation,
    /// Reserved: a pNFS layout.
    Layout,
}
