//! The delegation grant policy, in one place (RFC 8881 §10.4, §18.16.3, §18.49).
//!
//! Pure: [`decide`] sees a [`GrantInput`] the table filled in and answers which
//! delegation to grant or why none. Everything a reviewer needs to know about when
//! txnfs hands out a delegation is this function.

use std::time::Duration;

/// A delegation's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DelegType {
    /// OPEN_DELEGATE_READ: the holder may cache data and attributes and open for
    /// reading locally.
    Read,
    /// OPEN_DELEGATE_WRITE: the holder may also write locally (and cache size and
    /// change); no other client may have the file open.
    Write,
    /// A directory delegation (GET_DIR_DELEGATION, RFC 8881 §18.39): the holder may
    /// cache the directory's entries; changes by other clients are notified
    /// (CB_NOTIFY) or recall it. Never the answer of [`decide`] (see [`decide_dir`]).
    Directory,
}

/// What the client asked for with the `OPEN4_SHARE_ACCESS_WANT_*` bits of OPEN or
/// WANT_DELEGATION (RFC 8881 §18.16.3 table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// `WANT_NO_PREFERENCE` (0): the server's choice; a refusal is plain
    /// OPEN_DELEGATE_NONE.
    NoPreference,
    /// `WANT_READ_DELEG`.
    Read,
    /// `WANT_WRITE_DELEG`.
    Write,
    /// `WANT_ANY_DELEG`.
    Any,
    /// `WANT_NO_DELEG`: never grant.
    NoDeleg,
    /// `WANT_CANCEL`: cancel an earlier want (txnfs queues none).
    Cancel,
}

impl Want {
    /// Decode the want bits (`share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK`);
    /// `None` for a value the RFC does not define.
    pub fn from_bits(bits: u32) -> Option<Want> {
        Some(match bits & 0xff00 {
            0x0000 => Want::NoPreference,
            0x0100 => Want::Read,
            0x0200 => Want::Write,
            0x0300 => Want::Any,
            0x0400 => Want::NoDeleg,
            0x0500 => Want::Cancel,
            _ => return None,
        })
    }
}

/// Why no delegation was granted (`why_no_delegation4`, RFC 8881 §18.16.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoDeleg {
    /// WND4_NOT_WANTED: the client said WANT_NO_DELEG.
    NotWanted,
    /// WND4_CONTENTION: other clients use the file (an open, a lock, another
    /// delegation, a recall in progress, or a recent conflict).
    Contention,
    /// WND4_RESOURCE: the delegation limit, a back channel that does not work, the
    /// grace period, or delegations turned off.
    Resource,
    /// WND4_NOT_SUPP_UPGRADE: the client holds a read delegation and asked for a
    /// write one.
    NotSuppUpgrade,
    /// WND4_CANCELLED: WANT_CANCEL.
    Cancelled,
}

/// Everything [`decide`] looks at, filled in by the table under the core's lock.
#[derive(Debug, Clone, Copy)]
pub struct GrantInput {
    /// Delegations are enabled on this server.
    pub enabled: bool,
    /// What the client asked for.
    pub want: Want,
    /// The share access of the OPEN (`OPEN4_SHARE_ACCESS_*` 1..=3); for
    /// WANT_DELEGATION the access the wanted type implies.
    pub access: u32,
    /// The client's back channel answered its probe (no recall could reach it
    /// otherwise).
    pub callback_up: bool,
    /// The server is in its grace period (and this is not a reclaim).
    pub in_grace: bool,
    /// Another client has the file open, and whether with write access.
    pub others_open: bool,
    /// Another client has the file open for writing.
    pub others_open_write: bool,
    /// Another client holds byte-range locks on the file.
    pub others_locks: bool,
    /// Another client holds a delegation on the file, and of which strongest type.
    pub others_deleg: Option<DelegType>,
    /// A delegation of the file is being recalled.
    pub recall_pending: bool,
    /// This client lost a delegation of the file to a conflict less than
    /// [`COOL_DOWN`] ago.
    pub recent_conflict: bool,
    /// The client already holds a delegation on the file.
    pub own_deleg: Option<DelegType>,
    /// The server holds as many delegations as it allows.
    pub at_limit: bool,
}

/// How long a client whose delegation of a file was recalled (or revoked) for a
/// conflict gets no new delegation of it: a file that several clients use alternately
/// would otherwise be granted and recalled on every open (knfsd keeps such files out
/// for 30-60 s in a bloom filter, for every client). Per client, so that other clients
/// are not held back, nor a new file that reuses a deleted file's number.
pub const COOL_DOWN: Duration = Duration::from_secs(5);

/// The grant decision.
///
/// 1. WANT_NO_DELEG and WANT_CANCEL never grant.
/// 2. No delegation while delegations are off, during grace, without a working back
///    channel, or at the limit (RESOURCE).
/// 3. At most one delegation per client and file: a second OPEN keeps the first
///    (CONTENTION), a read holder asking for write gets NOT_SUPP_UPGRADE.
/// 4. No delegation while a recall of the file is in progress, to a client shortly
///    after its own delegation of the file was recalled ([`COOL_DOWN`]), or while
///    another client holds locks (CONTENTION).
/// 5. A write delegation when the OPEN has write access (or WANT_WRITE asked for one)
///    and no other client has the file open or delegated.
/// 6. Else a read delegation when no other client has it open for writing or holds a
///    write delegation, unless the client insisted on WANT_WRITE.
pub fn decide(i: &GrantInput) -> Result<DelegType, NoDeleg> {
    match i.want {
        Want::NoDeleg => return Err(NoDeleg::NotWanted),
        Want::Cancel => return Err(NoDeleg::Cancelled),
        _ => {}
    }
    if !i.enabled || i.in_grace || !i.callback_up || i.at_limit {
        return Err(NoDeleg::Resource);
    }
    let wants_write = i.want == Want::Write
        || (i.access & crate::types::SHARE_ACCESS_WRITE != 0 && i.want != Want::Read);
    match i.own_deleg {
        Some(DelegType::Read) if wants_write && i.want == Want::Write => {
            return Err(NoDeleg::NotSuppUpgrade)
        }
        Some(_) => return Err(NoDeleg::Contention),
        None => {}
    }
    if i.recall_pending || i.recent_conflict || i.others_locks {
        return Err(NoDeleg::Contention);
    }
    if wants_write {
        if !i.others_open && i.others_deleg.is_none() {
            return Ok(DelegType::Write);
        }
        if i.want == Want::Write {
            return Err(NoDeleg::Contention);
        }
    }
    if i.others_open_write || i.others_deleg == Some(DelegType::Write) {
        return Err(NoDeleg::Contention);
    }
    Ok(DelegType::Read)
}

/// Everything [`decide_dir`] looks at (GET_DIR_DELEGATION).
#[derive(Debug, Clone, Copy)]
pub struct DirGrantInput {
    /// Delegations are enabled on this server.
    pub enabled: bool,
    /// The client's back channel answered its probe.
    pub callback_up: bool,
    /// The server is in its grace period.
    pub in_grace: bool,
    /// The server holds as many delegations as it allows.
    pub at_limit: bool,
    /// The client already holds a directory delegation on this directory.
    pub own_deleg: bool,
    /// A directory delegation of this directory is being recalled.
    pub recall_pending: bool,
    /// The directory saw a recall less than [`COOL_DOWN`] ago.
    pub recent_conflict: bool,
}

/// The directory delegation decision (GDD4_UNAVAIL when refused; the reason is
/// for the counters and the log, the wire has none).
///
/// 1. No delegation while delegations are off, during grace, without a working back
///    channel (CB_NOTIFY and CB_RECALL could not reach the holder), or at the limit.
/// 2. One per client and directory.
/// 3. None while one of the directory is being recalled or shortly after
///    ([`COOL_DOWN`]): a directory whose changes the holders cannot follow by
///    notification would be granted and recalled in a loop.
///
/// Other clients' directory delegations do not conflict: each holder is notified.
pub fn decide_dir(i: &DirGrantInput) -> Result<(), NoDeleg> {
    if !i.enabled || i.in_grace || !i.callback_up || i.at_limit {
        return Err(NoDeleg::Resource);
    }
    if i.own_deleg || i.recall_pending || i.recent_conflict {
        return Err(NoDeleg::Contention);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_delegations() {
        let ok = DirGrantInput {
            enabled: true,
            callback_up: true,
            in_grace: false,
            at_limit: false,
            own_deleg: false,
            recall_pending: false,
            recent_conflict: false,
        };
        assert_eq!(decide_dir(&ok), Ok(()));
        for (f, why) in [
            (
                (|i: &mut DirGrantInput| i.callback_up = false) as fn(&mut DirGrantInput),
                NoDeleg::Resource,
            ),
            (|i: &mut DirGrantInput| i.enabled = false, NoDeleg::Resource),
            (|i: &mut DirGrantInput| i.in_grace = true, NoDeleg::Resource),
            (|i: &mut DirGrantInput| i.at_limit = true, NoDeleg::Resource),
            (
                |i: &mut DirGrantInput| i.own_deleg = true,
                NoDeleg::Contention,
            ),
            (
                |i: &mut DirGrantInput| i.recall_pending = true,
                NoDeleg::Contention,
            ),
            (
                |i: &mut DirGrantInput| i.recent_conflict = true,
                NoDeleg::Contention,
            ),
        ] {
            let mut i = ok;
            f(&mut i);
            assert_eq!(decide_dir(&i), Err(why));
        }
    }

    fn quiet(access: u32) -> GrantInput {
        GrantInput {
            enabled: true,
            want: Want::NoPreference,
            access,
            callback_up: true,
            in_grace: false,
            others_open: false,
            others_open_write: false,
            others_locks: false,
            others_deleg: None,
            recall_pending: false,
            recent_conflict: false,
            own_deleg: None,
            at_limit: false,
        }
    }

    #[test]
    fn read_open_gets_read_write_open_gets_write() {
        assert_eq!(decide(&quiet(1)), Ok(DelegType::Read));
        assert_eq!(decide(&quiet(2)), Ok(DelegType::Write));
        assert_eq!(decide(&quiet(3)), Ok(DelegType::Write));
    }

    #[test]
    fn want_flags() {
        let mut i = quiet(3);
        i.want = Want::Read;
        assert_eq!(decide(&i), Ok(DelegType::Read));
        i.want = Want::NoDeleg;
        assert_eq!(decide(&i), Err(NoDeleg::NotWanted));
        i.want = Want::Cancel;
        assert_eq!(decide(&i), Err(NoDeleg::Cancelled));
        let mut i = quiet(1);
        i.want = Want::Write;
        assert_eq!(decide(&i), Ok(DelegType::Write));
        i.others_open = true;
        assert_eq!(decide(&i), Err(NoDeleg::Contention));
        assert_eq!(Want::from_bits(0x0600), None);
        assert_eq!(Want::from_bits(0x10301), Some(Want::Any));
    }

    #[test]
    fn conflicts_refuse_or_downgrade() {
        let mut i = quiet(3);
        i.others_open = true;
        // Another reader: no write delegation, a read one still.
        assert_eq!(decide(&i), Ok(DelegType::Read));
        i.others_open_write = true;
        assert_eq!(decide(&i), Err(NoDeleg::Contention));
        let mut i = quiet(1);
        i.others_deleg = Some(DelegType::Read);
        assert_eq!(decide(&i), Ok(DelegType::Read));
        i.others_deleg = Some(DelegType::Write);
        assert_eq!(decide(&i), Err(NoDeleg::Contention));
        for f in [
            |i: &mut GrantInput| i.recall_pending = true,
            |i: &mut GrantInput| i.recent_conflict = true,
            |i: &mut GrantInput| i.others_locks = true,
            |i: &mut GrantInput| i.own_deleg = Some(DelegType::Write),
        ] {
            let mut i = quiet(1);
            f(&mut i);
            assert_eq!(decide(&i), Err(NoDeleg::Contention));
        }
        for f in [
            |i: &mut GrantInput| i.enabled = false,
            |i: &mut GrantInput| i.in_grace = true,
            |i: &mut GrantInput| i.callback_up = false,
            |i: &mut GrantInput| i.at_limit = true,
        ] {
            let mut i = quiet(1);
            f(&mut i);
            assert_eq!(decide(&i), Err(NoDeleg::Resource));
        }
        let mut i = quiet(3);
        i.own_deleg = Some(DelegType::Read);
        i.want = Want::Write;
        assert_eq!(decide(&i), Err(NoDeleg::NotSuppUpgrade));
    }
}
