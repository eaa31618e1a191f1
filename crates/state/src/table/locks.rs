//! Byte-range locks in the state table: LOCK, LOCKT, LOCKU and the conflict search
//! (RFC 8881 §9.2-§9.5, §18.10-§18.12).

use super::{Kind, LockState, OwnerKey, OwnerKind, State, StateTable};
use crate::range::{self, Range};
use crate::types::*;

impl StateTable {
    /// First lock on `file` held by an owner other than `me` that conflicts
    /// with `[start, end]` of type `kind`, not counting the locks of clients for which
    /// `skip` is true (courtesy clients, whose locks yield to a conflicting request).
    fn find_conflict_where(
        &self,
        file: FileId,
        me: (ClientId, &[u8]),
        kind: LockType,
        start: u64,
        end: u64,
        skip: impl Fn(ClientId) -> bool,
    ) -> Option<LockDenied> {
        let fs = self.files.get(&file)?;
        for lid in &fs.holders {
            let Some(State {
                common,
                kind: Kind::Lock(l),
            }) = self.states.get(lid)
            else {
                continue;
            };
            if common.client != me.0 && skip(common.client) {
                continue;
            }
            // The ranges are sorted and disjoint, so their ends are sorted
            // too: skip to the first one ending at or after `start`.
            let first = l.ranges.partition_point(|r| r.end < start);
            let hit = l.ranges[first..]
                .iter()
                .take_while(|r| r.start <= end)
                .find(|r| kind == LockType::Write || r.kind == LockType::Write);
            if let Some(r) = hit {
                if common.client != me.0 || l.owner != me.1 {
                    return Some(LockDenied {
                        offset: r.offset(),
                        length: r.length(),
                        lock_type: r.kind,
                        owner: LockOwner {
                            client: common.client,
                            owner: l.owner.clone(),
                        },
                    });
                }
            }
        }
        None
    }

    /// LOCK (RFC 8881 §18.10; locking semantics §9.2-§9.5).
    ///
    /// Ranges: a zero length or an `offset + length` beyond 2^64 - 1 (other
    /// than length `u64::MAX` = to EOF) is [`StateError::Inval`]. The lock
    /// type must be allowed by the open (READ needs read access, WRITE needs
    /// write access, §18.10.4), else [`StateError::OpenMode`]. A lock of
    /// another lock-owner (same or other client) overlapping the range
    /// where at least one of the two is a write lock gives
    /// [`StateError::Denied`] with that lock; the table never waits
    /// (blocking lock types behave like the plain ones). The owner's own
    /// locks are replaced in the range POSIX style (merge, split, upgrade,
    /// downgrade). On success returns the lock stateid: a new one has seqid
    /// 1, an existing one gets seqid + 1.
    pub fn lock(&mut self, client: ClientId, req: LockRequest) -> Result<Stateid, StateError> {
        let LockRequest {
            file,
            lock_type,
            offset,
            length,
            locker,
        } = req;
        // Resolve the locker to (existing lock state or None, open id, owner).
        let (existing, open_id, owner) = match locker {
            Locker::NewOwner {
                open_stateid,
                lock_owner,
            } => {
                let open_id = self.resolve_kind(OwnerKind::Open, client, &open_stateid, file)?;
                if lock_owner.len() > self.limits.max_owner_len {
                    return Err(StateError::Inval);
                }
                let existing = self
                    .lock_index
                    .get(&(client, lock_owner.clone(), file))
                    .copied();
                (existing, open_id, lock_owner)
            }
            Locker::Existing { lock_stateid } => {
                let id = self.resolve_kind(OwnerKind::Lock, client, &lock_stateid, file)?;
                match self.states.get(&id) {
                    Some(State {
                        kind: Kind::Lock(l),
                        ..
                    }) => (Some(id), l.open, l.owner.clone()),
                    _ => return Err(StateError::BadStateid),
                }
            }
        };
        let (start, end) = range::validate(offset, length)?;
        let access = match self.states.get(&open_id) {
            Some(State {
                kind: Kind::Open(o),
                ..
            }) => o.access,
            _ => return Err(StateError::BadStateid),
        };
        let needed = match lock_type {
            LockType::Read => SHARE_ACCESS_READ,
            LockType::Write => SHARE_ACCESS_WRITE,
        };
        if access & needed == 0 {
            return Err(StateError::OpenMode);
        }
        let me = (client, owner.as_slice());
        if let Some(denied) = self.find_conflict_where(file, me, lock_type, start, end, |_| false) {
            return Err(StateError::Denied(denied));
        }
        let old_ranges: &[Range] = match existing.and_then(|id| self.states.get(&id)) {
            Some(State {
                kind: Kind::Lock(l),
                ..
            }) => &l.ranges,
            _ => &[],
        };
        let new_ranges = range::apply(old_ranges, start, end, Some(lock_type));
        let old_len = old_ranges.len();
        let file_count = self.files.get(&file).map_or(0, |f| f.lock_count);
        if file_count.saturating_sub(old_len) + new_ranges.len() > self.limits.max_locks_per_file {
            return Err(StateError::Resource);
        }
        let id = match existing {
            Some(id) => id,
            None => self.create_lock_state(client, file, open_id, owner)?,
        };
        self.set_ranges(id, file, new_ranges);
        if existing.is_some() {
            self.bump(id)
        } else {
            Ok(self.make_stateid(id, 1))
        }
    }

    /// Creates an empty lock stateid for (client, owner, file) tied to
    /// open `open_id`, enforcing the limits.
    fn create_lock_state(
        &mut self,
        client: ClientId,
        file: FileId,
        open_id: u64,
        owner: Vec<u8>,
    ) -> Result<u64, StateError> {
        if self.n_lock_states >= self.limits.max_lock_states {
            return Err(StateError::Resource);
        }
        let owner_key: OwnerKey = (client, owner.clone());
        let new_owner = self.admit_owner(&owner_key, OwnerKind::Lock)?;
        let id = self.alloc_id()?;
        self.lock_index.insert((client, owner.clone(), file), id);
        let lock = Kind::Lock(LockState {
            owner,
            open: open_id,
            ranges: Vec::new(),
        });
        self.insert_owned(id, owner_key, file, lock, new_owner);
        if let Some(State {
            kind: Kind::Open(o),
            ..
        }) = self.states.get_mut(&open_id)
        {
            o.lock_states.insert(id);
        }
        self.files.entry(file).or_default().lock_states.insert(id);
        self.n_lock_states += 1;
        Ok(id)
    }

    /// Replaces the ranges of lock state `id` on `file`, keeping counters.
    fn set_ranges(&mut self, id: u64, file: FileId, ranges: Vec<Range>) {
        let new_len = ranges.len();
        let old_len = match self.states.get_mut(&id) {
            Some(State {
                kind: Kind::Lock(l),
                ..
            }) => std::mem::replace(&mut l.ranges, ranges).len(),
            _ => return,
        };
        if let Some(fs) = self.files.get_mut(&file) {
            fs.lock_count = fs.lock_count - old_len + new_len;
            if new_len == 0 {
                fs.holders.remove(&id);
            } else {
                fs.holders.insert(id);
            }
        }
        self.n_locks = self.n_locks - old_len + new_len;
    }

    /// LOCKT (RFC 8881 §18.11): would a lock of `req.lock_type` on the range by
    /// lock-owner (`client`, `req.owner`) be granted? `Ok(())` if so, else
    /// [`StateError::Denied`] with a conflicting lock. The owner need not
    /// be known; its own locks never conflict. Bad ranges are
    /// [`StateError::Inval`].
    pub fn lockt(&self, client: ClientId, req: LocktRequest) -> Result<(), StateError> {
        let LocktRequest {
            owner,
            file,
            lock_type,
            offset,
            length,
        } = req;
        self.lockt_where(client, owner, file, lock_type, offset, length, |_| false)
    }

    /// [`Self::lockt`], not counting the locks of clients for which `skip` is true.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lockt_where(
        &self,
        client: ClientId,
        owner: &[u8],
        file: FileId,
        lock_type: LockType,
        offset: u64,
        length: u64,
        skip: impl Fn(ClientId) -> bool,
    ) -> Result<(), StateError> {
        let (start, end) = range::validate(offset, length)?;
        match self.find_conflict_where(file, (client, owner), lock_type, start, end, skip) {
            Some(d) => Err(StateError::Denied(d)),
            None => Ok(()),
        }
    }

    /// The first lock conflicting with `req` of `client` that is held by a client for
    /// which `skip` is false; `None` also when the request is invalid (the LOCK itself
    /// reports that).
    pub(crate) fn lock_conflict_where(
        &self,
        client: ClientId,
        req: &LockRequest,
        skip: impl Fn(ClientId) -> bool,
    ) -> Option<LockDenied> {
        let owner = match &req.locker {
            Locker::NewOwner { lock_owner, .. } => lock_owner.clone(),
            Locker::Existing { lock_stateid } => {
                let id = self
                    .resolve_kind(OwnerKind::Lock, client, lock_stateid, req.file)
                    .ok()?;
                match self.states.get(&id) {
                    Some(State {
                        kind: Kind::Lock(l),
                        ..
                    }) => l.owner.clone(),
                    _ => return None,
                }
            }
        };
        let (start, end) = range::validate(req.offset, req.length).ok()?;
        self.find_conflict_where(req.file, (client, &owner), req.lock_type, start, end, skip)
    }

    /// LOCKU (RFC 8881 §18.12): unlocks the range for the lock stateid
    /// `sid` of `client` on `file`. Unlocking ranges that are not locked is
    /// not an error; a partially covered lock is split. The lock stateid
    /// stays valid with no locks (§8.2.4) until FREE_STATEID or CLOSE.
    /// Returns the lock stateid with seqid + 1. Splitting one range into two
    /// can hit `max_locks_per_file` ([`StateError::Resource`]).
    pub fn locku(
        &mut self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
        offset: u64,
        length: u64,
    ) -> Result<Stateid, StateError> {
        let id = self.resolve_kind(OwnerKind::Lock, client, sid, file)?;
        let (start, end) = range::validate(offset, length)?;
        let (old_len, new_ranges) = match self.states.get(&id) {
            Some(State {
                kind: Kind::Lock(l),
                ..
            }) => (l.ranges.len(), range::apply(&l.ranges, start, end, None)),
            _ => return Err(StateError::BadStateid),
        };
        let file_count = self.files.get(&file).map_or(0, |f| f.lock_count);
        if new_ranges.len() > old_len
            && file_count.saturating_sub(old_len) + new_ranges.len()
                > self.limits.max_locks_per_file
        {
            return Err(StateError::Resource);
        }
        self.set_ranges(id, file, new_ranges);
        self.bump(id)
    }

    /// The byte-range locks held on `file` (all owners), sorted by owner
    /// then offset. For diagnostics and tests.
    pub fn locks(&self, file: FileId) -> Vec<HeldLock> {
        let mut out = Vec::new();
        let Some(fs) = self.files.get(&file) else {
            return out;
        };
        for lid in &fs.holders {
            if let Some(State {
                common,
                kind: Kind::Lock(l),
            }) = self.states.get(lid)
            {
                for r in &l.ranges {
                    out.push(HeldLock {
                        owner: LockOwner {
                            client: common.client,
                            owner: l.owner.clone(),
                        },
                        lock_type: r.kind,
                        offset: r.offset(),
                        length: r.length(),
                    });
                }
            }
        }
        out.sort_by(|a, b| {
            (a.owner.client, &a.owner.owner, a.offset).cmp(&(
                b.owner.client,
                &b.owner.owner,
                b.offset,
            ))
        });
        out
    }
}
