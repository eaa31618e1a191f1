//! A simulated client: its session and slot table, and what it knows from replies it
//! received (open and lock stateids, the ranges it holds).

use crate::wire::Fh;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;
use txnfs_proto::nfs4::{sessionid4, stateid4};

/// What one COMPOUND was meant to do; the oracle judges its reply by this.
#[derive(Debug, Clone)]
pub enum Intent {
    Renew,
    OpenCreate {
        dir: Fh,
        name: Bytes,
    },
    Open {
        file: Fh,
    },
    /// OPEN for reading by a fresh owner with `deny` (DENY_BOTH or DENY_NONE), closed
    /// in the same COMPOUND; a read delegation it gets outlives the CLOSE.
    DenyProbe {
        file: Fh,
        deny: u32,
    },
    Write {
        file: Fh,
        offset: u64,
        data: Bytes,
        commit: bool,
        /// Written with this delegation stateid instead of the open's.
        deleg: Option<stateid4>,
    },
    Read {
        file: Fh,
        offset: u64,
        count: u32,
        /// Read with the anonymous stateid (the client has no open).
        anon: bool,
        /// Read with this delegation stateid.
        deleg: Option<stateid4>,
    },
    Close {
        file: Fh,
    },
    Lock {
        file: Fh,
        owner: usize,
        offset: u64,
        length: u64,
        write: bool,
    },
    Locku {
        file: Fh,
        owner: usize,
        offset: u64,
        length: u64,
        write: bool,
    },
    Lockt {
        file: Fh,
        owner: usize,
        offset: u64,
        length: u64,
        write: bool,
    },
    Mkdir {
        dir: Fh,
        name: Bytes,
    },
    Remove {
        obj: Fh,
    },
    Rename {
        obj: Fh,
        to_dir: Fh,
        name: Bytes,
    },
    Truncate {
        file: Fh,
        size: u64,
    },
    Getattr {
        obj: Fh,
    },
    /// A WRITE with an open stateid of the client's previous, dead session.
    StaleWrite {
        file: Fh,
        data: Bytes,
        after_restart: bool,
    },
    /// DELEGRETURN of a delegation of `file` (recalled or not).
    DelegReturn {
        file: Fh,
        sid: stateid4,
    },
    /// TEST_STATEID of the client's delegation stateids (after
    /// SEQ4_STATUS_RECALLABLE_STATE_REVOKED).
    TestStateids {
        sids: Vec<stateid4>,
    },
    /// FREE_STATEID of a revoked delegation.
    FreeStateid {
        sid: stateid4,
    },
}

impl Intent {
    /// A short code for the trace digest.
    pub fn code(&self) -> u8 {
        match self {
            Intent::Renew => 0,
            Intent::OpenCreate { .. } => 1,
            Intent::Open { .. } => 2,
            Intent::DenyProbe { .. } => 3,
            Intent::Write { .. } => 4,
            Intent::Read { .. } => 5,
            Intent::Close { .. } => 6,
            Intent::Lock { .. } => 7,
            Intent::Locku { .. } => 8,
            Intent::Lockt { .. } => 9,
            Intent::Mkdir { .. } => 10,
            Intent::Remove { .. } => 11,
            Intent::Rename { .. } => 12,
            Intent::Truncate { .. } => 13,
            Intent::Getattr { .. } => 14,
            Intent::StaleWrite { .. } => 15,
            Intent::DelegReturn { .. } => 16,
            Intent::TestStateids { .. } => 17,
            Intent::FreeStateid { .. } => 18,
        }
    }

    /// The objects this request names (its result may change what the client knows
    /// about them).
    pub fn objects(&self) -> Vec<&Fh> {
        match self {
            Intent::Renew | Intent::TestStateids { .. } | Intent::FreeStateid { .. } => vec![],
            Intent::OpenCreate { dir, .. } | Intent::Mkdir { dir, .. } => vec![dir],
            Intent::Open { file }
            | Intent::DenyProbe { file, .. }
            | Intent::Write { file, .. }
            | Intent::Read { file, .. }
            | Intent::Close { file }
            | Intent::Lock { file, .. }
            | Intent::Locku { file, .. }
            | Intent::Lockt { file, .. }
            | Intent::Truncate { file, .. }
            | Intent::StaleWrite { file, .. }
            | Intent::DelegReturn { file, .. } => vec![file],
            Intent::Remove { obj } | Intent::Getattr { obj } => vec![obj],
            Intent::Rename { obj, to_dir, .. } => vec![obj, to_dir],
        }
    }

    /// Whether this request may be sent while `pending` ones are unanswered: it must
    /// not use a stateid or a name that a lost reply may have changed.
    pub fn may_pipeline(&self, pending: &[Pending]) -> bool {
        match self {
            Intent::Getattr { .. }
            | Intent::Lockt { .. }
            | Intent::Mkdir { .. }
            | Intent::OpenCreate { .. } => true,
            Intent::Read { file, .. } | Intent::Write { file, .. } => {
                pending.iter().all(|p| !p.intent.objects().contains(&file))
            }
            _ => false,
        }
    }

    /// The ledger tokens of the effects this request must apply at most once.
    pub fn tokens(&self) -> Vec<u64> {
        use crate::fault::{token, TOKEN_CREATE, TOKEN_RENAME, TOKEN_WRITE};
        match self {
            Intent::OpenCreate { name, .. } | Intent::Mkdir { name, .. } => {
                vec![token(TOKEN_CREATE, name)]
            }
            Intent::Rename { name, .. } => vec![token(TOKEN_RENAME, name)],
            Intent::Write { data, .. } | Intent::StaleWrite { data, .. } => {
                vec![token(TOKEN_WRITE, data)]
            }
            _ => Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Session {
    pub clientid: u64,
    pub sid: sessionid4,
    /// Last sequence id used per slot (moved by the replies).
    pub slots: txnfs_rawclient::Slots,
}

/// A request whose reply the client never saw: it must retransmit it (same slot,
/// same seqid, same bytes); meanwhile it may send requests on other slots that do not
/// depend on what the lost reply would have told it.
#[derive(Debug, Clone)]
pub struct Pending {
    pub slot: u32,
    pub bytes: Bytes,
    pub first_reply: Bytes,
    pub intent: Intent,
}

/// A session's back channel, as the simulation set it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CbPath {
    /// The session asked for no back channel.
    None,
    /// Bound, never answered (no delegations; not reported down either).
    Probing,
    /// Working: delegations may be granted.
    Up,
    /// Its connection was cut: SEQUENCE reports CB_PATH_DOWN, no delegations, until
    /// the client binds a new connection (BIND_CONN_TO_SESSION).
    Down,
}

#[derive(Debug, Clone, Default)]
pub struct HeldLocks {
    pub sid: Option<stateid4>,
    /// (offset, length, write) exactly as granted.
    pub ranges: Vec<(u64, u64, bool)>,
}

pub const LOCK_OWNERS: usize = 2;
pub const SLOTS: u32 = 4;

#[derive(Debug)]
pub struct SimClient {
    pub idx: usize,
    pub owner: Bytes,
    pub verifier: [u8; 8],
    pub conn: u64,
    pub session: Option<Session>,
    /// The last client id this client had, kept to try CREATE_SESSION on it after
    /// losing its session (must give STALE_CLIENTID).
    pub old_clientid: Option<u64>,
    /// Bumped on every new client id: the model keys state by (client, incarnation).
    pub incarnation: u32,
    /// The server lost (or must have lost) this client's session: restart or expiry.
    pub expect_dead: bool,
    /// Why the session is expected dead: a server restart (else lease expiry).
    pub dead_by_restart: bool,
    /// Open stateids of the lost session, to try once more (they must be refused).
    pub dead_stateids: Vec<(Fh, stateid4)>,
    /// Requests whose replies were lost, at most one per slot.
    pub pending: Vec<Pending>,
    pub opens: BTreeMap<Fh, stateid4>,
    pub locks: BTreeMap<(Fh, usize), HeldLocks>,
    /// This client's back channel works (decided per client by the seed): the
    /// simulation declares its sessions' back channels up, so it gets delegations.
    pub callback_up: bool,
    /// The state of the current session's back channel, as the server must see it.
    pub path: CbPath,
    /// Delegations the client learned from OPEN replies, by file: (stateid, write).
    pub delegs: BTreeMap<Fh, (stateid4, bool)>,
    /// Recalled delegations it will return at a later step: (step, file, stateid).
    pub returns_due: Vec<(u64, Fh, stateid4)>,
    /// Delegations the server told it are revoked (DELEGRETURN or TEST_STATEID
    /// answered DELEG_REVOKED): to be freed with FREE_STATEID.
    pub revoked: Vec<stateid4>,
    /// A SEQUENCE reply carried SEQ4_STATUS_RECALLABLE_STATE_REVOKED: find out which
    /// (TEST_STATEID).
    pub saw_revoked_flag: bool,
    /// Simulated time of the last new SEQUENCE that succeeded (the server renewed).
    pub last_renew: Duration,
    /// Simulated time of the last request of any kind (the server may have renewed).
    pub last_contact: Duration,
}

impl SimClient {
    pub fn new(idx: usize, conn: u64, callback_up: bool) -> Self {
        SimClient {
            idx,
            owner: Bytes::from(format!("sim-client-{idx}")),
            verifier: [idx as u8 + 1; 8],
            conn,
            session: None,
            old_clientid: None,
            incarnation: 0,
            expect_dead: false,
            dead_by_restart: false,
            dead_stateids: Vec::new(),
            pending: Vec::new(),
            opens: BTreeMap::new(),
            locks: BTreeMap::new(),
            callback_up,
            path: CbPath::None,
            delegs: BTreeMap::new(),
            returns_due: Vec::new(),
            revoked: Vec::new(),
            saw_revoked_flag: false,
            last_renew: Duration::ZERO,
            last_contact: Duration::ZERO,
        }
    }

    pub fn open_owner(&self) -> Bytes {
        Bytes::from(format!("oo-{}", self.idx))
    }

    pub fn probe_owner(&self) -> Bytes {
        Bytes::from(format!("probe-{}", self.idx))
    }

    pub fn lock_owner(&self, k: usize) -> Bytes {
        Bytes::from(format!("lo-{}-{k}", self.idx))
    }

    /// The session is gone: forget every stateid (the server forgot them too).
    pub fn lose_session(&mut self) {
        if let Some(s) = self.session.take() {
            self.old_clientid = Some(s.clientid);
        }
        self.pending.clear();
        // Kept to check that the server refuses them now (invariant 5).
        self.dead_stateids = std::mem::take(&mut self.opens).into_iter().collect();
        self.locks.clear();
        // Delegations go with the client's state (no reclaim in the simulation).
        self.path = CbPath::None;
        self.delegs.clear();
        self.returns_due.clear();
        self.revoked.clear();
        self.saw_revoked_flag = false;
    }

    /// Whether any lock owner of this client holds a range on `file`.
    pub fn holds_locks(&self, file: &Fh) -> bool {
        self.locks
            .iter()
            .any(|((f, _), h)| f == file && !h.ranges.is_empty())
    }
}
