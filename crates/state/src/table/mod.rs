//! The NFSv4.1 open / byte-range-lock state table (RFC 8881 §8, §9).
//!
//! Sans-IO: no wire types, no clocks, no randomness. The state core
//! ([`crate::StateCore`]) owns one [`StateTable`]; the server maps the plain
//! Rust types here to and from the XDR of RFC 8881 §18:
//!
//! | operation                    | method                         |
//! |------------------------------|--------------------------------|
//! | OPEN (§18.16)                | [`StateTable::open`]           |
//! | OPEN_DOWNGRADE (§18.18)      | [`StateTable::open_downgrade`] |
//! | CLOSE (§18.2)                | [`StateTable::close`]          |
//! | READ/WRITE/SETATTR (§8.2.2)  | [`StateTable::check_io`]       |
//! | LOCK (§18.10)                | [`StateTable::lock`]           |
//! | LOCKT (§18.11)               | [`StateTable::lockt`]          |
//! | LOCKU (§18.12)               | [`StateTable::locku`]          |
//! | TEST_STATEID (§18.48)        | [`StateTable::test_stateid`]   |
//! | FREE_STATEID (§18.38)        | [`StateTable::free_stateid`]   |
//! | lease expiry, DESTROY_CLIENTID (§8.3, §18.50) | [`StateTable::expire_client`], [`StateTable::client_has_state`] |
//!
//! Stateids (§8.2): the 12-byte `other` field is the 4-byte big-endian
//! boot epoch followed by an 8-byte big-endian counter that is never
//! reused within an epoch, so a stateid handed out by an earlier server
//! instance is recognised as stale. `seqid` starts at 1, is incremented by
//! every state-changing operation and wraps from `u32::MAX` to 1, never 0.
//!
//! Costs: stateids are found by hash of `other`; opens by hash of
//! (client, owner, file); share checks are O(1) (per-file counters); a
//! LOCK/LOCKT conflict check visits the lock-owners holding locks on that
//! file only (O(holders × log ranges), bounded by
//! [`StateLimits::max_locks_per_file`]); expiring a client is linear in that
//! client's state.
//!
//! Simplifications of RFC 8881 (deliberate):
//! * Byte-range locks are advisory (§9.4 allows either):
//!   [`StateTable::check_io`] checks stateids and share reservations, not
//!   byte-range locks.
//! * OPEN_DOWNGRADE requires a subset of the current access/deny instead of
//!   tracking every access/deny combination previously opened (§18.18.3).
//! * Delegations are [`crate::deleg`]'s; no layouts or revoked open/lock
//!   statuses (`NFS4ERR_EXPIRED`, `NFS4ERR_ADMIN_REVOKED`): expiring a client
//!   deletes its state, so its stateids become `NFS4ERR_BAD_STATEID`.
//! * No blocking locks: `READW_LT`/`WRITEW_LT` are plain lock attempts
//!   (allowed by §18.10.3; no CB_NOTIFY_LOCK).
//! * v4.1 only: seqid 0 is accepted everywhere as "current" (§8.2.2) and the
//!   v4.0 open/lock-owner seqids are not modelled.
//!
//! The grace period (reclaims) is the core's business ([`crate::StateCore`]),
//! not this table's.

mod check;
mod locks;
mod nlm;

pub use nlm::{is_nlm_client, nlm_client};
mod v40;

use std::collections::{BTreeSet, HashSet};

use foldhash::{HashMap, HashMapExt};

use crate::range::Range;
use crate::types::*;

/// State shared by open and lock stateids.
#[derive(Debug)]
struct Common {
    client: ClientId,
    file: FileId,
    seqid: u32,
}

#[derive(Debug)]
struct OpenState {
    owner: Vec<u8>,
    access: u32,
    deny: u32,
    /// Lock stateids derived from this open (§8.2.1: a lock stateid's
    /// lifetime is bounded by its open's).
    lock_states: BTreeSet<u64>,
}

#[derive(Debug)]
struct LockState {
    owner: Vec<u8>,
    /// The open stateid this lock stateid was created from.
    open: u64,
    /// Canonical, sorted, non-overlapping ranges.
    ranges: Vec<Range>,
}

#[derive(Debug)]
enum Kind {
    Open(OpenState),
    Lock(LockState),
}

impl Kind {
    fn owner_kind(&self) -> OwnerKind {
        match self {
            Kind::Open(_) => OwnerKind::Open,
            Kind::Lock(_) => OwnerKind::Lock,
        }
    }
}

#[derive(Debug)]
struct State {
    common: Common,
    kind: Kind,
}

#[derive(Debug, Default)]
struct FileState {
    opens: BTreeSet<u64>,
    lock_states: BTreeSet<u64>,
    /// Lock states with at least one range: the only ones a conflict check
    /// visits. Ordered by id (creation order) so conflict reports are
    /// deterministic.
    holders: BTreeSet<u64>,
    /// Sum of the lock states' range counts.
    lock_count: usize,
    /// Share reservation counters: opens with READ access, WRITE access,
    /// DENY_READ, DENY_WRITE, so a share check is O(1).
    share: ShareCounts,
}

/// Number of opens of a file holding each share bit.
#[derive(Debug, Default, Clone, Copy)]
struct ShareCounts {
    access_read: usize,
    access_write: usize,
    deny_read: usize,
    deny_write: usize,
}

impl ShareCounts {
    fn add(&mut self, access: u32, deny: u32) {
        self.access_read += usize::from(access & SHARE_ACCESS_READ != 0);
        self.access_write += usize::from(access & SHARE_ACCESS_WRITE != 0);
        self.deny_read += usize::from(deny & SHARE_DENY_READ != 0);
        self.deny_write += usize::from(deny & SHARE_DENY_WRITE != 0);
    }

    fn sub(&mut self, access: u32, deny: u32) {
        self.access_read -= usize::from(access & SHARE_ACCESS_READ != 0);
        self.access_write -= usize::from(access & SHARE_ACCESS_WRITE != 0);
        self.deny_read -= usize::from(deny & SHARE_DENY_READ != 0);
        self.deny_write -= usize::from(deny & SHARE_DENY_WRITE != 0);
    }

    /// Whether an open with `(access, deny)` conflicts with the counted
    /// opens (RFC 8881 §9.7).
    fn conflicts(&self, access: u32, deny: u32) -> bool {
        (access & SHARE_ACCESS_READ != 0 && self.deny_read > 0)
            || (access & SHARE_ACCESS_WRITE != 0 && self.deny_write > 0)
            || (deny & SHARE_DENY_READ != 0 && self.access_read > 0)
            || (deny & SHARE_DENY_WRITE != 0 && self.access_write > 0)
    }
}

#[derive(Debug, Default)]
struct ClientState {
    states: HashSet<u64>,
    open_owners: usize,
    lock_owners: usize,
}

impl ClientState {
    fn owners(&self, kind: OwnerKind) -> usize {
        match kind {
            OwnerKind::Open => self.open_owners,
            OwnerKind::Lock => self.lock_owners,
        }
    }

    fn owners_mut(&mut self, kind: OwnerKind) -> &mut usize {
        match kind {
            OwnerKind::Open => &mut self.open_owners,
            OwnerKind::Lock => &mut self.lock_owners,
        }
    }
}

/// Open-owners and lock-owners: each kind has its own map, counts and limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerKind {
    Open,
    Lock,
}

/// Key of an open stateid or lock stateid: (client, owner, file).
type OwnerFileKey = (ClientId, Vec<u8>, FileId);
/// Key of an owner: (client, owner).
type OwnerKey = (ClientId, Vec<u8>);

/// The server's open and byte-range lock state (RFC 8881 §8, §9).
///
/// One per server instance. All lookups are hash lookups by stateid
/// `other`, by (client, owner, file) or per file; no operation scans the
/// whole table.
#[derive(Debug)]
pub struct StateTable {
    epoch: u32,
    limits: StateLimits,
    next_id: u64,
    states: HashMap<u64, State>,
    files: HashMap<FileId, FileState>,
    clients: HashMap<ClientId, ClientState>,
    open_index: HashMap<OwnerFileKey, u64>,
    lock_index: HashMap<OwnerFileKey, u64>,
    /// Open-owner -> number of open stateids.
    open_owners: HashMap<OwnerKey, usize>,
    /// Lock-owner -> number of lock stateids.
    lock_owners: HashMap<OwnerKey, usize>,
    n_opens: usize,
    n_lock_states: usize,
    n_locks: usize,
}

/// The next seqid: wraps from `u32::MAX` to 1, never 0 (§8.2.2).
fn next_seqid(s: u32) -> u32 {
    if s == u32::MAX {
        1
    } else {
        s + 1
    }
}

/// Compares a request's seqid with the state's (§8.2.2): 0 means current;
/// older => OLD_STATEID; newer => BAD_STATEID. Serial-number arithmetic
/// handles the wrap.
fn check_seqid(given: u32, current: u32) -> Result<(), StateError> {
    if given == 0 || given == current {
        Ok(())
    } else if (current.wrapping_sub(given) as i32) > 0 {
        Err(StateError::OldStateid)
    } else {
        Err(StateError::BadStateid)
    }
}

fn valid_access(access: u32) -> bool {
    (1..=3).contains(&access)
}

fn valid_deny(deny: u32) -> bool {
    deny <= 3
}

impl StateTable {
    /// Creates an empty table. `boot_epoch` must differ between server
    /// instances (e.g. boot time in seconds); it is embedded in every
    /// stateid so that stateids of earlier instances are
    /// [`StateError::StaleStateid`] (§8.2.1). It should not be 0 or
    /// `u32::MAX` (those prefixes are shared with the special stateids,
    /// though the counter never collides with them).
    pub fn new(boot_epoch: u32, limits: StateLimits) -> Self {
        StateTable {
            epoch: boot_epoch,
            limits,
            next_id: 1,
            states: HashMap::new(),
            files: HashMap::new(),
            clients: HashMap::new(),
            open_index: HashMap::new(),
            lock_index: HashMap::new(),
            open_owners: HashMap::new(),
            lock_owners: HashMap::new(),
            n_opens: 0,
            n_lock_states: 0,
            n_locks: 0,
        }
    }

    /// The boot epoch given to [`StateTable::new`].
    pub fn boot_epoch(&self) -> u32 {
        self.epoch
    }

    /// The limits given to [`StateTable::new`].
    pub fn limits(&self) -> &StateLimits {
        &self.limits
    }

    fn make_stateid(&self, id: u64, seqid: u32) -> Stateid {
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&self.epoch.to_be_bytes());
        other[4..].copy_from_slice(&id.to_be_bytes());
        Stateid { seqid, other }
    }

    fn alloc_id(&mut self) -> Result<u64, StateError> {
        if self.next_id == u64::MAX {
            return Err(StateError::Resource);
        }
        let id = self.next_id;
        self.next_id += 1;
        Ok(id)
    }

    /// Resolves a non-special stateid of `client` to its internal id,
    /// checking epoch, existence, ownership and seqid.
    fn resolve(&self, client: ClientId, sid: &Stateid) -> Result<u64, StateError> {
        if sid.is_special() {
            return Err(StateError::BadStateid);
        }
        let (epoch, id) = sid.epoch_and_id();
        if epoch != self.epoch {
            return Err(StateError::StaleStateid);
        }
        let st = self.states.get(&id).ok_or(StateError::BadStateid)?;
        if st.common.client != client {
            return Err(StateError::BadStateid);
        }
        check_seqid(sid.seqid, st.common.seqid)?;
        Ok(id)
    }

    /// Resolves an open (`kind` Open) or lock stateid of `client` for `file`.
    fn resolve_kind(
        &self,
        kind: OwnerKind,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
    ) -> Result<u64, StateError> {
        let id = self.resolve(client, sid)?;
        match self.states.get(&id) {
            Some(st) if st.common.file == file && st.kind.owner_kind() == kind => Ok(id),
            _ => Err(StateError::BadStateid),
        }
    }

    /// Owner -> number of its stateids, for the owners of `kind`.
    fn owners_mut(&mut self, kind: OwnerKind) -> &mut HashMap<OwnerKey, usize> {
        match kind {
            OwnerKind::Open => &mut self.open_owners,
            OwnerKind::Lock => &mut self.lock_owners,
        }
    }

    /// Undoes the counting of [`Self::insert_owned`] for the removed state `id` of the
    /// owner `key`.
    fn release_owned(&mut self, id: u64, kind: OwnerKind, key: OwnerKey) {
        let client = key.0;
        let owner_gone = release_owner(self.owners_mut(kind), key);
        if let Some(cs) = self.clients.get_mut(&client) {
            cs.states.remove(&id);
            if owner_gone {
                let n = cs.owners_mut(kind);
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Whether `key` is a new owner of `kind`; Resource when its client already has as
    /// many owners of that kind as the limits allow.
    fn admit_owner(&self, key: &OwnerKey, kind: OwnerKind) -> Result<bool, StateError> {
        let (owners, max) = match kind {
            OwnerKind::Open => (&self.open_owners, self.limits.max_open_owners_per_client),
            OwnerKind::Lock => (&self.lock_owners, self.limits.max_lock_owners_per_client),
        };
        let new_owner = !owners.contains_key(key);
        if new_owner {
            let held = self.clients.get(&key.0).map_or(0, |c| c.owners(kind));
            if held >= max {
                return Err(StateError::Resource);
            }
        }
        Ok(new_owner)
    }

    /// Inserts the new state `id` (seqid 1) of the owner `key` on `file` and counts it
    /// for its owner and its client; `new_owner` as [`Self::admit_owner`] said.
    fn insert_owned(&mut self, id: u64, key: OwnerKey, file: FileId, kind: Kind, new_owner: bool) {
        let owner_kind = kind.owner_kind();
        let client = key.0;
        self.states.insert(
            id,
            State {
                common: Common {
                    client,
                    file,
                    seqid: 1,
                },
                kind,
            },
        );
        *self.owners_mut(owner_kind).entry(key).or_insert(0) += 1;
        let cs = self.clients.entry(client).or_default();
        cs.states.insert(id);
        if new_owner {
            *cs.owners_mut(owner_kind) += 1;
        }
    }

    /// Bumps the seqid of state `id` and returns its new stateid.
    fn bump(&mut self, id: u64) -> Result<Stateid, StateError> {
        let st = self.states.get_mut(&id).ok_or(StateError::BadStateid)?;
        st.common.seqid = next_seqid(st.common.seqid);
        let seqid = st.common.seqid;
        Ok(self.make_stateid(id, seqid))
    }

    /// Share reservation check (§9.7): does `(access, deny)` conflict with
    /// any open on `file` other than `except`?
    fn share_conflict(
        &self,
        file: FileId,
        access: u32,
        deny: u32,
        except: Option<(u32, u32)>,
    ) -> bool {
        let Some(fs) = self.files.get(&file) else {
            return false;
        };
        let mut counts = fs.share;
        if let Some((a, d)) = except {
            counts.sub(a, d);
        }
        counts.conflicts(access, deny)
    }

    /// The clients whose opens of `file` conflict with an OPEN of `(access, deny)` by
    /// `owner` of `client` (with what that owner already holds on the file, as
    /// [`Self::open`] upgrades), sorted and without duplicates. Empty when
    /// [`Self::open`] would not fail with [`StateError::ShareDenied`].
    pub fn share_conflicts(
        &self,
        client: ClientId,
        owner: &[u8],
        file: FileId,
        access: u32,
        deny: u32,
    ) -> Vec<ClientId> {
        let Some(fs) = self.files.get(&file) else {
            return Vec::new();
        };
        let mine = self
            .open_index
            .get(&(client, owner.to_vec(), file))
            .copied();
        let (mut access, mut deny) = (access, deny);
        if let Some(State {
            kind: Kind::Open(o),
            ..
        }) = mine.and_then(|id| self.states.get(&id))
        {
            access |= o.access;
            deny |= o.deny;
        }
        let mut out: Vec<ClientId> = fs
            .opens
            .iter()
            .filter(|id| Some(**id) != mine)
            .filter_map(|id| match self.states.get(id) {
                Some(State {
                    common,
                    kind: Kind::Open(o),
                }) => {
                    let mut one = ShareCounts::default();
                    one.add(o.access, o.deny);
                    one.conflicts(access, deny).then_some(common.client)
                }
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// OPEN (RFC 8881 §18.16, share reservations §9.7).
    ///
    /// `access` is `OPEN4_SHARE_ACCESS_*` (1, 2 or 3; the v4.1 WANT_* bits
    /// must be masked off by the caller), `deny` is `OPEN4_SHARE_DENY_*`
    /// (0..=3); anything else is [`StateError::Inval`]. An OPEN by the same
    /// (client, open-owner) of the same file upgrades the existing open: the
    /// access and deny become the unions, `other` is kept and the seqid is
    /// incremented (§9.11). Conflicts with another open's deny or access on
    /// the file (any owner, any client) give [`StateError::ShareDenied`].
    pub fn open(
        &mut self,
        client: ClientId,
        owner: &[u8],
        file: FileId,
        access: u32,
        deny: u32,
    ) -> Result<Stateid, StateError> {
        if !valid_access(access) || !valid_deny(deny) || owner.len() > self.limits.max_owner_len {
            return Err(StateError::Inval);
        }
        let key: OwnerFileKey = (client, owner.to_vec(), file);
        if let Some(&id) = self.open_index.get(&key) {
            let (old_access, old_deny) = match self.states.get(&id) {
                Some(State {
                    kind: Kind::Open(o),
                    ..
                }) => (o.access, o.deny),
                _ => return Err(StateError::BadStateid),
            };
            let (new_access, new_deny) = (old_access | access, old_deny | deny);
            if self.share_conflict(file, new_access, new_deny, Some((old_access, old_deny))) {
                return Err(StateError::ShareDenied);
            }
            self.set_share(id, file, new_access, new_deny);
            return self.bump(id);
        }
        if self.share_conflict(file, access, deny, None) {
            return Err(StateError::ShareDenied);
        }
        if self.n_opens >= self.limits.max_opens {
            return Err(StateError::Resource);
        }
        let owner_key: OwnerKey = (client, owner.to_vec());
        let new_owner = self.admit_owner(&owner_key, OwnerKind::Open)?;
        let id = self.alloc_id()?;
        let open = Kind::Open(OpenState {
            owner: owner.to_vec(),
            access,
            deny,
            lock_states: BTreeSet::new(),
        });
        self.insert_owned(id, owner_key, file, open, new_owner);
        self.open_index.insert(key, id);
        let fs = self.files.entry(file).or_default();
        fs.opens.insert(id);
        fs.share.add(access, deny);
        self.n_opens += 1;
        Ok(self.make_stateid(id, 1))
    }

    /// OPEN_DOWNGRADE (RFC 8881 §18.18) of an open stateid of `client` for
    /// `file` (the current filehandle). The new access/deny must be valid
    /// and a subset of what the open holds, else [`StateError::Inval`].
    /// Returns the stateid with the seqid incremented.
    pub fn open_downgrade(
        &mut self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
        access: u32,
        deny: u32,
    ) -> Result<Stateid, StateError> {
        let id = self.resolve_kind(OwnerKind::Open, client, sid, file)?;
        if !valid_access(access) || !valid_deny(deny) {
            return Err(StateError::Inval);
        }
        match self.states.get(&id) {
            Some(State {
                kind: Kind::Open(o),
                ..
            }) => {
                if access & !o.access != 0 || deny & !o.deny != 0 {
                    return Err(StateError::Inval);
                }
            }
            _ => return Err(StateError::BadStateid),
        }
        self.set_share(id, file, access, deny);
        self.bump(id)
    }

    /// Sets the access/deny of open `id` on `file`, keeping the file's share
    /// counters.
    fn set_share(&mut self, id: u64, file: FileId, access: u32, deny: u32) {
        let Some(State {
            kind: Kind::Open(o),
            ..
        }) = self.states.get_mut(&id)
        else {
            return;
        };
        let (old_access, old_deny) = (o.access, o.deny);
        o.access = access;
        o.deny = deny;
        if let Some(fs) = self.files.get_mut(&file) {
            fs.share.sub(old_access, old_deny);
            fs.share.add(access, deny);
        }
    }

    /// CLOSE (RFC 8881 §18.2) of an open stateid of `client` for `file`.
    ///
    /// Fails with [`StateError::LocksHeld`] if a lock stateid derived from
    /// this open still holds byte-range locks; lock stateids without locks
    /// are freed with the open. Returns the final stateid (seqid + 1); a
    /// v4.1 server may instead reply with [`Stateid::INVALID`] (§18.2.4).
    pub fn close(
        &mut self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
    ) -> Result<Stateid, StateError> {
        let id = self.resolve_kind(OwnerKind::Open, client, sid, file)?;
        let held = match self.states.get(&id) {
            Some(State {
                kind: Kind::Open(o),
                ..
            }) => o.lock_states.iter().any(|l| {
                matches!(self.states.get(l), Some(State { kind: Kind::Lock(ls), .. }) if !ls.ranges.is_empty())
            }),
            _ => return Err(StateError::BadStateid),
        };
        if held {
            return Err(StateError::LocksHeld);
        }
        let final_sid = self.bump(id)?;
        self.remove_state(id);
        Ok(final_sid)
    }

    /// Removes state `id` and, for an open, every lock stateid derived from
    /// it, with all index entries. Returns the number of stateids removed.
    fn remove_state(&mut self, id: u64) -> usize {
        let Some(st) = self.states.remove(&id) else {
            return 0;
        };
        let Common { client, file, .. } = st.common;
        let mut removed = 1;
        match st.kind {
            Kind::Open(o) => {
                for l in &o.lock_states {
                    removed += self.remove_state(*l);
                }
                self.open_index.remove(&(client, o.owner.clone(), file));
                self.release_owned(id, OwnerKind::Open, (client, o.owner));
                if let Some(fs) = self.files.get_mut(&file) {
                    fs.opens.remove(&id);
                    fs.share.sub(o.access, o.deny);
                }
                self.n_opens -= 1;
            }
            Kind::Lock(l) => {
                if let Some(State {
                    kind: Kind::Open(o),
                    ..
                }) = self.states.get_mut(&l.open)
                {
                    o.lock_states.remove(&id);
                }
                self.lock_index.remove(&(client, l.owner.clone(), file));
                self.release_owned(id, OwnerKind::Lock, (client, l.owner));
                if let Some(fs) = self.files.get_mut(&file) {
                    fs.lock_states.remove(&id);
                    fs.holders.remove(&id);
                    fs.lock_count -= l.ranges.len();
                }
                self.n_locks -= l.ranges.len();
                self.n_lock_states -= 1;
            }
        }
        if self
            .files
            .get(&file)
            .is_some_and(|fs| fs.opens.is_empty() && fs.lock_states.is_empty())
        {
            self.files.remove(&file);
        }
        if self
            .clients
            .get(&client)
            .is_some_and(|cs| cs.states.is_empty())
        {
            self.clients.remove(&client);
        }
        removed
    }

    /// Validates the stateid of a READ, WRITE or SETATTR(size) (RFC 8881
    /// §8.2.2, §8.2.3, §9.7, §18.22.3, §18.32.3).
    ///
    /// * The anonymous stateid is allowed unless an open on the file denies
    ///   the access (`write` => deny-write, else deny-read), which gives
    ///   [`StateError::Locked`]. The READ bypass stateid is allowed for reads
    ///   regardless of deny modes and treated as anonymous for writes. Other
    ///   special stateids are [`StateError::BadStateid`].
    /// * Otherwise the stateid must be an open or lock stateid of `client`
    ///   for `file` ([`StateError::BadStateid`]), of this boot epoch
    ///   ([`StateError::StaleStateid`]), with seqid 0 or current (older =>
    ///   [`StateError::OldStateid`]). A write needs the (lock stateid's) open
    ///   to have write access, else [`StateError::OpenMode`]; a read is
    ///   allowed through any open, including write-only ones (the Linux
    ///   client reads through write opens, as knfsd allows).
    pub fn check_io(
        &self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
        write: bool,
    ) -> Result<(), StateError> {
        let anonymous = *sid == Stateid::ANONYMOUS;
        let bypass = *sid == Stateid::READ_BYPASS;
        if anonymous || bypass {
            if bypass && !write {
                return Ok(());
            }
            let denied_bit = if write {
                SHARE_DENY_WRITE
            } else {
                SHARE_DENY_READ
            };
            if self.share_conflict(file, denied_bit, 0, None) {
                return Err(StateError::Locked);
            }
            return Ok(());
        }
        let id = self.resolve(client, sid)?;
        let st = self.states.get(&id).ok_or(StateError::BadStateid)?;
        if st.common.file != file {
            return Err(StateError::BadStateid);
        }
        let open_id = match &st.kind {
            Kind::Open(_) => id,
            Kind::Lock(l) => l.open,
        };
        let access = match self.states.get(&open_id) {
            Some(State {
                kind: Kind::Open(o),
                ..
            }) => o.access,
            _ => return Err(StateError::BadStateid),
        };
        if write && access & SHARE_ACCESS_WRITE == 0 {
            return Err(StateError::OpenMode);
        }
        Ok(())
    }

    /// TEST_STATEID (RFC 8881 §18.48), for one stateid of the list: `Ok` if
    /// it is a valid open or lock stateid of `client` with seqid 0 or
    /// current; otherwise [`StateError::BadStateid`] (including all special
    /// stateids), [`StateError::OldStateid`] or [`StateError::StaleStateid`].
    pub fn test_stateid(&self, client: ClientId, sid: &Stateid) -> Result<(), StateError> {
        self.resolve(client, sid).map(|_| ())
    }

    /// FREE_STATEID (RFC 8881 §18.38): frees a lock stateid of `client`
    /// that holds no locks. A lock stateid with locks, and any open stateid
    /// (an open is itself a lock, §18.38.3), give [`StateError::LocksHeld`].
    pub fn free_stateid(&mut self, client: ClientId, sid: &Stateid) -> Result<(), StateError> {
        let id = self.resolve(client, sid)?;
        match self.states.get(&id) {
            Some(State {
                kind: Kind::Lock(l),
                ..
            }) if l.ranges.is_empty() => {}
            Some(_) => return Err(StateError::LocksHeld),
            None => return Err(StateError::BadStateid),
        }
        self.remove_state(id);
        Ok(())
    }

    /// Lease expiry (RFC 8881 §8.3) or DESTROY_CLIENTID/EXCHANGE_ID client
    /// replacement: drops every open and lock stateid (and so every share
    /// reservation and byte-range lock) of `client`. Returns the number of
    /// stateids freed. Those stateids become [`StateError::BadStateid`].
    pub fn expire_client(&mut self, client: ClientId) -> usize {
        let Some(cs) = self.clients.get(&client) else {
            return 0;
        };
        let ids: Vec<u64> = cs.states.iter().copied().collect();
        let mut freed = 0;
        for id in ids {
            freed += self.remove_state(id);
        }
        self.clients.remove(&client);
        freed
    }

    /// Whether `client` holds any open or lock stateid (DESTROY_CLIENTID
    /// must fail with `NFS4ERR_CLIENTID_BUSY` if so, RFC 8881 §18.50.3).
    pub fn client_has_state(&self, client: ClientId) -> bool {
        self.clients
            .get(&client)
            .is_some_and(|c| !c.states.is_empty())
    }

    /// How clients other than `client` use `file` (the delegation grant policy).
    pub fn others_use(&self, client: ClientId, file: FileId) -> OthersUse {
        let mut out = OthersUse::default();
        let Some(fs) = self.files.get(&file) else {
            return out;
        };
        for st in fs.opens.iter().filter_map(|id| self.states.get(id)) {
            if let (true, Kind::Open(o)) = (st.common.client != client, &st.kind) {
                out.open = true;
                out.open_write |= o.access & SHARE_ACCESS_WRITE != 0;
            }
        }
        out.locks = fs
            .holders
            .iter()
            .filter_map(|id| self.states.get(id))
            .any(|st| st.common.client != client);
        out
    }

    /// Whether any client has `file` open.
    pub fn file_is_open(&self, file: FileId) -> bool {
        self.files.get(&file).is_some_and(|fs| !fs.opens.is_empty())
    }

    /// Counters of the whole table.
    pub fn stats(&self) -> StateStats {
        StateStats {
            opens: self.n_opens,
            lock_states: self.n_lock_states,
            locks: self.n_locks,
        }
    }
}

/// Whether other clients have a file open (for writing) or locked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OthersUse {
    /// Another client has an open.
    pub open: bool,
    /// Another client has an open with write access.
    pub open_write: bool,
    /// Another client holds byte-range locks.
    pub locks: bool,
}

/// Drop one state of an owner from its count; true when that was its last state (the
/// owner is gone and removed from the map).
fn release_owner(owners: &mut HashMap<OwnerKey, usize>, key: OwnerKey) -> bool {
    let gone = match owners.get_mut(&key) {
        Some(n) => {
            *n -= 1;
            *n == 0
        }
        None => false,
    };
    if gone {
        owners.remove(&key);
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqid_wraps_to_one_never_zero() {
        assert_eq!(next_seqid(1), 2);
        assert_eq!(next_seqid(u32::MAX - 1), u32::MAX);
        assert_eq!(next_seqid(u32::MAX), 1);
    }

    #[test]
    fn seqid_comparison_across_the_wrap() {
        assert_eq!(check_seqid(0, 5), Ok(()));
        assert_eq!(check_seqid(5, 5), Ok(()));
        assert_eq!(check_seqid(4, 5), Err(StateError::OldStateid));
        assert_eq!(check_seqid(6, 5), Err(StateError::BadStateid));
        // Current 1 after the wrap: u32::MAX is the previous one.
        assert_eq!(check_seqid(u32::MAX, 1), Err(StateError::OldStateid));
        assert_eq!(check_seqid(2, 1), Err(StateError::BadStateid));
        // Current u32::MAX: 1 is from the future (after the wrap).
        assert_eq!(check_seqid(1, u32::MAX), Err(StateError::BadStateid));
        assert_eq!(
            check_seqid(u32::MAX - 1, u32::MAX),
            Err(StateError::OldStateid)
        );
    }

    #[test]
    fn wrap_through_the_table() {
        let mut t = StateTable::new(1, StateLimits::default());
        let s = t.open(1, b"o", 1, 1, 0).unwrap();
        let id = u64::from_be_bytes(s.other[4..].try_into().unwrap());
        t.states.get_mut(&id).unwrap().common.seqid = u32::MAX - 1;
        let s = t.open(1, b"o", 1, 1, 0).unwrap();
        assert_eq!(s.seqid, u32::MAX);
        let s2 = t.open(1, b"o", 1, 1, 0).unwrap();
        assert_eq!(s2.seqid, 1);
        assert_eq!(t.check_io(1, &s, 1, false), Err(StateError::OldStateid));
        t.check_io(1, &s2, 1, false).unwrap();
        assert_eq!(t.close(1, &s2, 1).unwrap().seqid, 2);
    }

    #[test]
    fn other_layout() {
        let mut t = StateTable::new(0xdead_beef, StateLimits::default());
        let a = t.open(1, b"o", 1, 1, 0).unwrap();
        let b = t.open(1, b"o", 2, 1, 0).unwrap();
        assert_eq!(&a.other[..4], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(
            u64::from_be_bytes(a.other[4..].try_into().unwrap()) + 1,
            u64::from_be_bytes(b.other[4..].try_into().unwrap())
        );
    }
}
