//! The plain Rust types of open and lock state (RFC 8881 §8, §9): stateids, share
//! bits, lock requests, limits and errors. The server maps them to and from XDR.

/// `OPEN4_SHARE_ACCESS_READ` (RFC 8881 §18.16.1).
pub const SHARE_ACCESS_READ: u32 = 1;
/// `OPEN4_SHARE_ACCESS_WRITE` (RFC 8881 §18.16.1).
pub const SHARE_ACCESS_WRITE: u32 = 2;
/// `OPEN4_SHARE_ACCESS_BOTH` (RFC 8881 §18.16.1).
pub const SHARE_ACCESS_BOTH: u32 = 3;
/// `OPEN4_SHARE_DENY_NONE` (RFC 8881 §18.16.1).
pub const SHARE_DENY_NONE: u32 = 0;
/// `OPEN4_SHARE_DENY_READ` (RFC 8881 §18.16.1).
pub const SHARE_DENY_READ: u32 = 1;
/// `OPEN4_SHARE_DENY_WRITE` (RFC 8881 §18.16.1).
pub const SHARE_DENY_WRITE: u32 = 2;
/// `OPEN4_SHARE_DENY_BOTH` (RFC 8881 §18.16.1).
pub const SHARE_DENY_BOTH: u32 = 3;

/// A client ID as handed out by EXCHANGE_ID (RFC 8881 §18.35).
pub type ClientId = u64;

/// The identity of one file for the state table: the export id in the high 64 bits
/// and the object's `fileid` in the low 64 bits ([`file_id`]). All state is keyed by
/// it; the filehandle itself never reaches this crate. It is 128 bits wide so that
/// every (export, 64-bit inode number) pair has its own id: folding the export into a
/// 64-bit fileid (as `fileid ^ export << 48` did) made two files share opens and locks
/// whenever inode numbers use the top bits.
pub type FileId = u128;

/// The [`FileId`] of object `fileid` of export `export` (injective in both).
pub fn file_id(export: u16, fileid: u64) -> FileId {
    (u128::from(export) << 64) | u128::from(fileid)
}

/// A stateid4 (RFC 8881 §8.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stateid {
    /// Incremented on every change of the state it designates; 0 in a
    /// request means "the current one" (§8.2.2).
    pub seqid: u32,
    /// Identifies the state: boot epoch (4 bytes) + unique counter (8 bytes).
    pub other: [u8; 12],
}

impl Stateid {
    /// A special stateid: `seqid` and an `other` of twelve `fill` bytes (§8.2.3).
    const fn special(seqid: u32, fill: u8) -> Stateid {
        Stateid {
            seqid,
            other: [fill; 12],
        }
    }

    /// The anonymous special stateid: all-zero `other`, seqid 0 (§8.2.3).
    pub const ANONYMOUS: Stateid = Stateid::special(0, 0);
    /// The READ bypass special stateid: all-ones `other` and seqid (§8.2.3).
    pub const READ_BYPASS: Stateid = Stateid::special(u32::MAX, 0xff);
    /// The "current stateid" special value: all-zero `other`, seqid 1
    /// (§8.2.3, §16.2.3.1.2). The COMPOUND executor must substitute the
    /// current stateid before calling this crate; if it reaches the table it
    /// is rejected with [`StateError::BadStateid`].
    pub const CURRENT: Stateid = Stateid::special(1, 0);
    /// The "invalid" special stateid: all-zero `other`, seqid all ones
    /// (§8.2.3). Always [`StateError::BadStateid`]; RFC 8881 §18.2.4 suggests
    /// servers return it from CLOSE.
    pub const INVALID: Stateid = Stateid::special(u32::MAX, 0);

    /// The boot epoch and the counter of `other` (the layout every txnfs stateid
    /// uses, §8.2.1 leaves it to the server).
    pub fn epoch_and_id(&self) -> (u32, u64) {
        let mut epoch = [0u8; 4];
        epoch.copy_from_slice(&self.other[..4]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&self.other[4..]);
        (u32::from_be_bytes(epoch), u64::from_be_bytes(id))
    }

    /// Whether `other` is all zeros or all ones, i.e. one of the special
    /// stateids of RFC 8881 §8.2.3 (valid or not).
    pub fn is_special(&self) -> bool {
        self.other == [0; 12] || self.other == [0xff; 12]
    }

    /// Whether this is the "current stateid" marker (§16.2.3.1.2) that the
    /// COMPOUND executor has to replace.
    pub fn is_current(&self) -> bool {
        *self == Self::CURRENT
    }
}

/// Byte-range lock type (RFC 8881 §18.10.1 `nfs_lock_type4`). The server maps
/// `READW_LT`/`WRITEW_LT` to `Read`/`Write`: this table never blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockType {
    /// `READ_LT` / `READW_LT`: shared.
    Read,
    /// `WRITE_LT` / `WRITEW_LT`: exclusive.
    Write,
}

/// A lock-owner: the client plus the opaque owner bytes (RFC 8881 §18.10.1
/// `lock_owner4`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockOwner {
    /// The owning client.
    pub client: ClientId,
    /// The opaque owner bytes chosen by the client.
    pub owner: Vec<u8>,
}

/// The conflicting lock reported by `NFS4ERR_DENIED` (RFC 8881 §18.10.2
/// `LOCK4denied`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockDenied {
    /// Start of the conflicting lock.
    pub offset: u64,
    /// Length of the conflicting lock (`u64::MAX` = to EOF).
    pub length: u64,
    /// Type of the conflicting lock.
    pub lock_type: LockType,
    /// Holder of the conflicting lock.
    pub owner: LockOwner,
}

/// Who is locking (RFC 8881 §18.10.1 `locker4`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Locker {
    /// `new_lock_owner = TRUE` (`open_to_lock_owner4`): the open stateid and
    /// the lock-owner. The seqids of the v4.0 variant are ignored in v4.1
    /// (§18.10.3). If the lock-owner already has a lock stateid for the file
    /// it is reused (as knfsd does).
    NewOwner {
        /// An open stateid of this client for the file.
        open_stateid: Stateid,
        /// The lock-owner bytes.
        lock_owner: Vec<u8>,
    },
    /// `new_lock_owner = FALSE` (`exist_lock_owner4`): a lock stateid.
    Existing {
        /// The lock stateid.
        lock_stateid: Stateid,
    },
}

/// A LOCK request (RFC 8881 §18.10.1 `LOCK4args`), with the file the
/// current filehandle designates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRequest {
    /// The file of the current filehandle; the stateid must belong to it.
    pub file: FileId,
    /// Lock type (blocking variants mapped to the plain ones).
    pub lock_type: LockType,
    /// Start of the range.
    pub offset: u64,
    /// Length of the range; `u64::MAX` = to EOF; 0 is invalid.
    pub length: u64,
    /// New or existing lock-owner.
    pub locker: Locker,
}

/// An OPEN's share reservation (RFC 8881 §18.16.1 `OPEN4args`), with the file
/// it opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenRequest<'a> {
    /// The open-owner.
    pub owner: &'a [u8],
    /// The file opened.
    pub file: FileId,
    /// Share access (`OPEN4_SHARE_ACCESS_*`).
    pub access: u32,
    /// Share deny (`OPEN4_SHARE_DENY_*`).
    pub deny: u32,
}

/// A LOCKT request (RFC 8881 §18.11.1 `LOCKT4args`), with the file the current
/// filehandle designates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocktRequest<'a> {
    /// The lock-owner testing (its own locks never conflict; it need not be known).
    pub owner: &'a [u8],
    /// The file of the current filehandle.
    pub file: FileId,
    /// Lock type.
    pub lock_type: LockType,
    /// Start of the range.
    pub offset: u64,
    /// Length of the range; `u64::MAX` = to EOF; 0 is invalid.
    pub length: u64,
}

/// A lock held in the table, as reported by [`crate::table::StateTable::locks`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLock {
    /// The holder.
    pub owner: LockOwner,
    /// The type.
    pub lock_type: LockType,
    /// Start of the range.
    pub offset: u64,
    /// Length of the range (`u64::MAX` = to EOF).
    pub length: u64,
}

/// Bounds on the table's size; exceeding one gives [`StateError::Resource`]
/// (the server must not let clients grow its memory without bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateLimits {
    /// Distinct open-owners (with at least one open) per client.
    pub max_open_owners_per_client: usize,
    /// Distinct lock-owners (with at least one lock stateid) per client.
    pub max_lock_owners_per_client: usize,
    /// Open stateids, server-wide.
    pub max_opens: usize,
    /// Lock stateids, server-wide.
    pub max_lock_states: usize,
    /// Locked ranges (after merging) on one file, all owners together.
    pub max_locks_per_file: usize,
    /// Maximum length of open-owner / lock-owner bytes (NFS4_OPAQUE_LIMIT
    /// is 1024, RFC 8881 §2.2); longer owners are [`StateError::Inval`].
    pub max_owner_len: usize,
}

impl Default for StateLimits {
    fn default() -> Self {
        StateLimits {
            max_open_owners_per_client: 4096,
            max_lock_owners_per_client: 4096,
            max_opens: 1 << 16,
            max_lock_states: 1 << 16,
            max_locks_per_file: 4096,
            max_owner_len: 1024,
        }
    }
}

/// Counters, for monitoring and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateStats {
    /// Open stateids.
    pub opens: usize,
    /// Lock stateids (with or without locks).
    pub lock_states: usize,
    /// Locked ranges (after merging).
    pub locks: usize,
}

/// Errors, each mapping to one NFSv4 status (RFC 8881 §15).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// `NFS4ERR_BAD_STATEID` (§15.1.5.2): unknown stateid, a stateid of
    /// another client or another file, a seqid newer than the current one,
    /// the wrong kind of stateid for the operation, or a special stateid
    /// where none is allowed.
    #[error("bad stateid")]
    BadStateid,
    /// `NFS4ERR_OLD_STATEID` (§15.1.5.5): the seqid is older than the
    /// current one (and not 0).
    #[error("old stateid")]
    OldStateid,
    /// `NFS4ERR_STALE_STATEID` (§15.1.16.7): issued by an earlier server
    /// instance (boot epoch differs).
    #[error("stale stateid")]
    StaleStateid,
    /// `NFS4ERR_SHARE_DENIED` (§15.1.8.4): OPEN conflicts with another
    /// open's share access/deny.
    #[error("share reservation conflict")]
    ShareDenied,
    /// `NFS4ERR_LOCKED` (§15.1.8.3): I/O with a special stateid conflicts
    /// with a share deny (§9.7, as knfsd).
    #[error("locked by a share reservation")]
    Locked,
    /// `NFS4ERR_OPENMODE` (§15.1.8.5): WRITE through an open without write
    /// access, or a lock type the open's access does not allow (§18.10.4).
    #[error("open mode does not allow the operation")]
    OpenMode,
    /// `NFS4ERR_LOCKS_HELD` (§15.1.8.2): CLOSE while byte-range locks are
    /// held, or FREE_STATEID of a stateid that still holds locks (an open
    /// stateid always does, §18.38.3).
    #[error("locks held")]
    LocksHeld,
    /// `NFS4ERR_DENIED` (§15.1.8.1) with the `LOCK4denied` conflict.
    #[error("lock denied")]
    Denied(LockDenied),
    /// `NFS4ERR_INVAL` (§15.1.1.4): bad share bits, OPEN_DOWNGRADE to a
    /// non-subset, zero length or overflowing byte range, oversized owner.
    #[error("invalid argument")]
    Inval,
    /// `NFS4ERR_STALE_CLIENTID` (§15.1.13.5): the client no longer exists (its lease
    /// expired or it was destroyed while the request was on its way).
    #[error("stale client id")]
    StaleClientId,
    /// `NFS4ERR_GRACE` (§15.1.9.2): a non-reclaim OPEN or LOCK (or a LOCKT)
    /// during the grace period.
    #[error("in grace period")]
    Grace,
    /// `NFS4ERR_NO_GRACE` (§15.1.9.3): a reclaim outside the grace period.
    #[error("not in grace period")]
    NoGrace,
    /// `NFS4ERR_RESOURCE` for v4.0; a v4.1 server may prefer
    /// `NFS4ERR_DELAY` (§15.1.1.3): a [`StateLimits`] bound was reached.
    #[error("state table limit reached")]
    Resource,
    /// `NFS4ERR_DELEG_REVOKED` (§15.1.5.3): the delegation stateid was revoked (its
    /// holder did not return it in time); FREE_STATEID clears it.
    #[error("delegation revoked")]
    DelegRevoked,
    /// `NFS4ERR_DELAY` (§15.1.1.3): another client was granted a conflicting delegation
    /// between this request's recall check and its OPEN; the retry recalls it.
    #[error("a conflicting delegation appeared; try again")]
    Delay,
}
