//! File delegations (RFC 8881 §10.2, §10.4): who holds which delegation on which
//! file, recalls in progress, revoked delegations waiting for FREE_STATEID, the
//! cool-down after a conflict, and the counters of [`DelegStats`].
//!
//! Sans-IO like the rest of the core: the table decides, the server sends the
//! CB_RECALLs the core's [`crate::Effect::Callback`] asks for and holds the
//! conflicting request until the delegation comes back ([`crate::StateCore`] glues
//! the two). Delegation stateids share the open table's `other` layout (boot epoch +
//! counter) with the top bit of the counter set, so the two id spaces never meet.

mod check;
pub mod dir;
pub mod policy;

use std::collections::HashSet;

use foldhash::{HashMap, HashMapExt};
use std::time::{Duration, Instant};

use bytes::Bytes;

pub use dir::{
    AttrTarget, DirGranted, DirParams, EntryUpdate, FlushDue, Notice, NoticeBatch, NotifyTarget,
};
pub use policy::{DelegType, NoDeleg, Want};

use crate::types::{ClientId, FileId, StateError, Stateid};

/// Counter bit that marks a delegation stateid.
const DELEG_BIT: u64 = 1 << 63;

/// What another client's request does to a file, for the conflict check
/// (RFC 8881 §10.4.4 ... a delegation is recalled when another client's operation
/// conflicts with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// OPEN with this share access (1..=3) and deny (0..=3).
    Open {
        /// `OPEN4_SHARE_ACCESS_*`.
        access: u32,
        /// `OPEN4_SHARE_DENY_*`.
        deny: u32,
    },
    /// READ (and GETATTR of size/change under a write delegation is CB_GETATTR's
    /// business, not a conflict).
    Read,
    /// WRITE, or SETATTR of size, mode, owner or times: the holder's cached data or
    /// attributes would be wrong.
    Modify,
    /// REMOVE, RENAME (from or over), LINK of the file: its names change.
    Namespace,
    /// A change of the directory's entries or attributes, of this `notify_type4`
    /// ([`dir::notify_type`]): conflicts with a directory delegation whose holder is
    /// not notified of such changes (or that is being recalled already).
    DirChange(u32),
}

impl Access {
    /// Whether this access conflicts with a delegation of `kind` held by another
    /// client.
    fn conflicts(self, kind: DelegType) -> bool {
        match (kind, self) {
            // Directory delegations: see `Delegation::conflicts_with`.
            (DelegType::Directory, _) | (_, Access::DirChange(_)) => false,
            (DelegType::Write, _) => true,
            // A read delegation lets its holder open for reading locally: an open that
            // writes, or that denies reading to others, takes that away (RFC 8881
            // §10.4: "requests to open a file for reading that do not deny
            // OPEN4_SHARE_ACCESS_READ access to others").
            (DelegType::Read, Access::Open { access, deny }) => {
                access & crate::types::SHARE_ACCESS_WRITE != 0
                    || deny & crate::types::SHARE_DENY_READ != 0
            }
            (DelegType::Read, Access::Read) => false,
            (DelegType::Read, Access::Modify | Access::Namespace) => true,
        }
    }
}

/// Where a delegation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Active,
    /// CB_RECALL asked for; the delegation is still valid until DELEGRETURN.
    Recalling {
        since: Instant,
    },
    /// The holder did not return it in time. Kept (for NFS4ERR_DELEG_REVOKED and
    /// SEQ4_STATUS_RECALLABLE_STATE_REVOKED) until FREE_STATEID or the client goes.
    Revoked,
}

#[derive(Debug, Clone)]
struct Delegation {
    client: ClientId,
    file: FileId,
    kind: DelegType,
    seqid: u32,
    /// The wire filehandle, opaque here: CB_RECALL and CB_GETATTR name the file by it.
    fh: Bytes,
    /// The file's change attribute when granted (CB_GETATTR compares with it).
    change: u64,
    /// Granted with delegated timestamps (RFC 9754, `OPEN_DELEGATE_*_ATTRS_DELEG`): the
    /// holder keeps the file's access time (and, writing, its modify time) and sets
    /// them with SETATTR of `time_deleg_*` on this stateid.
    timestamps: bool,
    phase: Phase,
    /// A directory delegation's notification state.
    dir: Option<Box<dir::DirState>>,
}

impl Delegation {
    /// Whether another client's `access` must wait for this delegation.
    fn conflicts_with(&self, access: Access) -> bool {
        match (&self.dir, access) {
            (Some(d), Access::DirChange(kind)) => {
                !d.covers(kind) || matches!(self.phase, Phase::Recalling { .. })
            }
            (Some(_), _) => false,
            (None, _) => access.conflicts(self.kind),
        }
    }
}

/// Per-client or server-wide delegation counters (ADR 0017).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelegStats {
    /// Delegations granted.
    pub granted: u64,
    /// CB_RECALLs asked for.
    pub recalled: u64,
    /// DELEGRETURNs.
    pub returned: u64,
    /// Delegations revoked, for any reason (the sum of `revoked_unreachable` and
    /// `revoked_timeout`).
    pub revoked: u64,
    /// Recalls that ended with the delegation revoked at once because its holder
    /// could not be reached: no back channel left (its connections closed, its sessions
    /// destroyed), a CB_COMPOUND that failed at the transport or session level, or a
    /// lease that had run out. The conflicting request proceeds without waiting.
    pub revoked_unreachable: u64,
    /// Recalls that ended with the delegation revoked because a reachable holder did
    /// not return it within the recall wait (or, when nobody waited, within a lease).
    pub revoked_timeout: u64,
    /// Delegations that went with their client (DESTROY_CLIENTID, lease expiry, a new
    /// incarnation) rather than being returned or revoked.
    pub released: u64,
    /// Returns of recalled delegations, and the sum and maximum of their recall
    /// latency (recall asked → DELEGRETURN), in microseconds.
    pub recall_returns: u64,
    /// Sum of recall latencies (µs).
    pub recall_latency_us_sum: u64,
    /// Largest recall latency (µs).
    pub recall_latency_us_max: u64,
    /// Delegations held now (active or recalling).
    pub outstanding: u64,
    /// Requests the server held for recalls (recall-and-wait), by how the wait ended:
    /// the delegations came back (returned, or released with their client) ...
    pub held_returned: u64,
    /// ... a holder could not be reached and lost its delegation at once ...
    pub held_unreachable: u64,
    /// ... or the recall wait ran out (the request is answered NFS4ERR_DELAY) ...
    pub held_timeout: u64,
    /// ... or, held on its connection's reader, the request gave way (answered
    /// NFS4ERR_DELAY; see `HoldOutcome::GaveWay`).
    pub held_gave_way: u64,
    /// The longest a request was held (µs).
    pub held_us_max: u64,
}

impl DelegStats {
    fn returned_after_recall(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.recall_returns += 1;
        self.recall_latency_us_sum = self.recall_latency_us_sum.saturating_add(us);
        self.recall_latency_us_max = self.recall_latency_us_max.max(us);
    }
}

/// A recall the caller must send (CB_RECALL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    /// The holder.
    pub client: ClientId,
    /// The delegation stateid.
    pub stateid: Stateid,
    /// The file's wire filehandle.
    pub fh: Bytes,
}

/// Why a delegation was revoked (counted in [`DelegStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeReason {
    /// Its holder cannot be reached: the recall could never be answered.
    Unreachable,
    /// Its holder was reachable but did not return it in time.
    Timeout,
}

/// How a request held for recalls stopped waiting (counted in [`DelegStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldOutcome {
    /// The delegations were returned (or went with their client).
    Returned,
    /// A holder could not be reached: its delegation was revoked at once.
    Unreachable,
    /// The recall wait ran out.
    Timeout,
    /// The request waited on its connection's reader, where nothing more of that
    /// connection is read, and stopped waiting (NFS4ERR_DELAY, nothing revoked): its
    /// own client's delegations were recalled meanwhile, whose DELEGRETURNs must come
    /// in, or its connection had other calls lately, which would wait behind it.
    GaveWay,
}

/// A delegation granted by [`DelegTable::grant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// Its stateid.
    pub stateid: Stateid,
    /// Its type.
    pub kind: DelegType,
    /// With delegated timestamps (asked for, and the server grants them).
    pub timestamps: bool,
}

/// A write delegation another client holds, for CB_GETATTR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteHolder {
    /// The holder.
    pub client: ClientId,
    /// The file's wire filehandle.
    pub fh: Bytes,
    /// The change attribute when it was granted.
    pub change: u64,
    /// The holder keeps the file's times (CB_GETATTR asks for them too).
    pub timestamps: bool,
}

/// Bounds of the delegation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelegLimits {
    /// Delegations are granted at all.
    pub enabled: bool,
    /// Delegations held at once, server-wide (active, recalling or revoked).
    pub max_delegations: usize,
}

impl Default for DelegLimits {
    fn default() -> Self {
        DelegLimits {
            enabled: true,
            max_delegations: 1 << 16,
        }
    }
}

/// Bound of the cool-down map; when full, entries older than [`policy::COOL_DOWN`]
/// are dropped, and if none is, the whole map (a conflict storm just means fewer
/// files keep out of delegations for a moment).
const MAX_COOL_DOWN: usize = 4096;

/// The delegations of one server instance.
#[derive(Debug)]
pub struct DelegTable {
    epoch: u32,
    limits: DelegLimits,
    next: u64,
    delegs: HashMap<u64, Delegation>,
    /// Live (active or recalling) delegations per file.
    by_file: HashMap<FileId, Vec<u64>>,
    /// Revoked delegations not yet freed, per client (SEQUENCE asks on every
    /// COMPOUND: a count, not a scan of the client's delegations).
    revoked_by_client: HashMap<ClientId, usize>,
    /// All delegations (revoked included) per client.
    by_client: HashMap<ClientId, HashSet<u64>>,
    /// (file, client) -> when that client lost its delegation of the file to a conflict.
    cool_down: HashMap<(FileId, ClientId), Instant>,
    /// Objects that are entries of directories whose delegations want
    /// CHANGE_CHILD_ATTRS, and those delegations.
    watched: HashMap<FileId, HashSet<u64>>,
    /// Directory delegations in `delegs` (revoked ones included).
    dirs: usize,
    total: DelegStats,
    per_client: HashMap<ClientId, DelegStats>,
}

/// The input of [`DelegTable::grant`] the table cannot know itself.
#[derive(Debug, Clone)]
pub struct GrantRequest {
    /// The OPEN's share access, or the access a WANT_DELEGATION implies.
    pub access: u32,
    /// The want bits.
    pub want: Want,
    /// The client's back channel works.
    pub callback_up: bool,
    /// The server is in grace.
    pub in_grace: bool,
    /// Another client has the file open / open for write / locked
    /// ([`crate::StateTable::others_use`]).
    pub others: crate::table::OthersUse,
    /// The wire filehandle.
    pub fh: Bytes,
    /// The change attribute now.
    pub change: u64,
    /// The client asked for delegated timestamps (OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS
    /// on a 4.2 session, RFC 9754).
    pub timestamps: bool,
}

impl DelegTable {
    /// An empty table for boot epoch `epoch`.
    pub fn new(epoch: u32, limits: DelegLimits) -> Self {
        DelegTable {
            epoch,
            limits,
            next: 1,
            delegs: HashMap::new(),
            by_file: HashMap::new(),
            by_client: HashMap::new(),
            cool_down: HashMap::new(),
            revoked_by_client: HashMap::new(),
            watched: HashMap::new(),
            dirs: 0,
            total: DelegStats::default(),
            per_client: HashMap::new(),
        }
    }

    /// Whether `sid` names a delegation (of any epoch).
    pub fn is_deleg(sid: &Stateid) -> bool {
        !sid.is_special() && sid.other[4] & 0x80 != 0
    }

    fn stateid(&self, id: u64, seqid: u32) -> Stateid {
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&self.epoch.to_be_bytes());
        other[4..].copy_from_slice(&id.to_be_bytes());
        Stateid { seqid, other }
    }

    /// Resolves a delegation stateid of `client`: epoch, existence, owner, seqid.
    fn resolve(&self, client: ClientId, sid: &Stateid) -> Result<u64, StateError> {
        if !Self::is_deleg(sid) {
            return Err(StateError::BadStateid);
        }
        let (epoch, id) = sid.epoch_and_id();
        if epoch != self.epoch {
            return Err(StateError::StaleStateid);
        }
        let d = self.delegs.get(&id).ok_or(StateError::BadStateid)?;
        if d.client != client {
            return Err(StateError::BadStateid);
        }
        // A delegation's seqid never changes in txnfs (no upgrades or downgrades), so
        // anything but 0 or 1 is not ours.
        if sid.seqid != 0 && sid.seqid != d.seqid {
            return Err(StateError::BadStateid);
        }
        Ok(id)
    }

    fn live_on(&self, file: FileId) -> impl Iterator<Item = &Delegation> {
        self.by_file
            .get(&file)
            .into_iter()
            .flatten()
            .filter_map(|id| self.delegs.get(id))
    }

    /// The grant decision ([`policy::decide`]) and, when it grants, the new
    /// delegation.
    pub fn grant(
        &mut self,
        now: Instant,
        client: ClientId,
        file: FileId,
        req: GrantRequest,
    ) -> Result<Granted, NoDeleg> {
        let mut own = None;
        let mut others = None;
        let mut recall_pending = false;
        for d in self.live_on(file).filter(|d| d.dir.is_none()) {
            recall_pending |= matches!(d.phase, Phase::Recalling { .. });
            let slot = if d.client == client {
                &mut own
            } else {
                &mut others
            };
            *slot = Some(match (*slot, d.kind) {
                (Some(DelegType::Write), _) | (_, DelegType::Write) => DelegType::Write,
                _ => DelegType::Read,
            });
        }
        let input = policy::GrantInput {
            enabled: self.limits.enabled,
            want: req.want,
            access: req.access,
            callback_up: req.callback_up,
            in_grace: req.in_grace,
            others_open: req.others.open,
            others_open_write: req.others.open_write,
            others_locks: req.others.locks,
            others_deleg: others,
            recall_pending,
            recent_conflict: self
                .cool_down
                .get(&(file, client))
                .is_some_and(|t| now.saturating_duration_since(*t) < policy::COOL_DOWN),
            own_deleg: own,
            at_limit: self.delegs.len() >= self.limits.max_delegations,
        };
        let kind = policy::decide(&input)?;
        let id = DELEG_BIT | self.next;
        self.next += 1;
        self.delegs.insert(
            id,
            Delegation {
                client,
                file,
                kind,
                seqid: 1,
                fh: req.fh,
                change: req.change,
                timestamps: req.timestamps,
                phase: Phase::Active,
                dir: None,
            },
        );
        self.by_file.entry(file).or_default().push(id);
        self.by_client.entry(client).or_default().insert(id);
        self.count(client, |s| {
            s.granted += 1;
            s.outstanding += 1;
        });
        Ok(Granted {
            stateid: self.stateid(id, 1),
            kind,
            timestamps: req.timestamps,
        })
    }

    fn count(&mut self, client: ClientId, f: impl Fn(&mut DelegStats)) {
        f(&mut self.total);
        f(self.per_client.entry(client).or_default());
    }

    /// The delegations of other clients than `client` on `file` that `access`
    /// conflicts with, split into those to recall now (they were active: now they
    /// are recalling) and whether any recall is already under way. `unreachable` says
    /// whether a holder cannot answer a recall (its lease ran out, it has no back
    /// channel left): such a delegation is revoked at once
    /// ([`RevokeReason::Unreachable`]).
    pub fn conflicts(
        &mut self,
        now: Instant,
        client: Option<ClientId>,
        file: FileId,
        access: Access,
        unreachable: impl Fn(ClientId) -> bool,
    ) -> Conflicts {
        let mut out = Conflicts::default();
        let ids: Vec<u64> = self
            .by_file
            .get(&file)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        for id in ids {
            let Some(d) = self.delegs.get(&id) else {
                continue;
            };
            if Some(d.client) == client || !d.conflicts_with(access) {
                continue;
            }
            let (holder, active, fh, seqid) =
                (d.client, d.phase == Phase::Active, d.fh.clone(), d.seqid);
            self.note_conflict(now, file, holder);
            if unreachable(holder) {
                let sid = self.stateid(id, seqid);
                self.revoke(id, RevokeReason::Unreachable);
                out.revoked.push((holder, sid, file));
                continue;
            }
            out.waiting.push(id);
            if active {
                if let Some(d) = self.delegs.get_mut(&id) {
                    d.phase = Phase::Recalling { since: now };
                }
                self.count(holder, |s| s.recalled += 1);
                out.recalls.push(Recall {
                    client: holder,
                    stateid: self.stateid(id, seqid),
                    fh,
                });
            }
        }
        out
    }

    /// `client` lost its delegation of `file` to a conflict: it gets none of that file
    /// for [`policy::COOL_DOWN`]. Per client, not per file: other clients may still get
    /// one, and a file whose number is reused after a delete is not held against them.
    fn note_conflict(&mut self, now: Instant, file: FileId, client: ClientId) {
        if self.cool_down.len() >= MAX_COOL_DOWN {
            self.cool_down
                .retain(|_, t| now.saturating_duration_since(*t) < policy::COOL_DOWN);
            if self.cool_down.len() >= MAX_COOL_DOWN {
                self.cool_down.clear();
            }
        }
        self.cool_down.insert((file, client), now);
    }

    /// Whether a live delegation of another client than `client` on `file` conflicts
    /// with `access` (no recall is started: see [`DelegTable::conflicts`]).
    pub fn has_conflict(&self, client: ClientId, file: FileId, access: Access) -> bool {
        self.live_on(file)
            .any(|d| d.client != client && d.conflicts_with(access))
    }

    /// Whether any of `ids` is still live (not returned, not revoked).
    pub fn any_live(&self, ids: &[u64]) -> bool {
        ids.iter().any(|id| {
            self.delegs
                .get(id)
                .is_some_and(|d| d.phase != Phase::Revoked)
        })
    }

    /// Revoke those of `ids` still live, for `reason`; returns their holders and
    /// stateids.
    pub fn revoke_ids(
        &mut self,
        ids: &[u64],
        reason: RevokeReason,
    ) -> Vec<(ClientId, Stateid, FileId)> {
        let mut out = Vec::new();
        for &id in ids {
            if let Some(d) = self.delegs.get(&id) {
                if d.phase != Phase::Revoked {
                    let r = (d.client, self.stateid(id, d.seqid), d.file);
                    self.revoke(id, reason);
                    out.push(r);
                }
            }
        }
        out
    }

    /// Revoke recalls outstanding for longer than `after` (the holder had a lease to
    /// return them); returns what was revoked.
    pub fn revoke_overdue(
        &mut self,
        now: Instant,
        after: Duration,
    ) -> Vec<(ClientId, Stateid, FileId)> {
        let overdue: Vec<u64> = self
            .delegs
            .iter()
            .filter(|(_, d)| {
                matches!(d.phase, Phase::Recalling { since } if now.saturating_duration_since(since) >= after)
            })
            .map(|(id, _)| *id)
            .collect();
        self.revoke_ids(&overdue, RevokeReason::Timeout)
    }

    /// Those of `ids` still live whose holder `unreachable` says cannot answer a
    /// recall.
    pub fn unreachable_of(&self, ids: &[u64], unreachable: impl Fn(ClientId) -> bool) -> Vec<u64> {
        ids.iter()
            .copied()
            .filter(|id| {
                self.delegs
                    .get(id)
                    .is_some_and(|d| d.phase != Phase::Revoked && unreachable(d.client))
            })
            .collect()
    }

    fn revoke(&mut self, id: u64, reason: RevokeReason) {
        let Some(d) = self.delegs.get_mut(&id) else {
            return;
        };
        if d.phase == Phase::Revoked {
            return;
        }
        d.phase = Phase::Revoked;
        *self.revoked_by_client.entry(d.client).or_default() += 1;
        if let Some(dir) = &mut d.dir {
            dir.clear();
        }
        let (client, file, is_dir) = (d.client, d.file, d.dir.is_some());
        if is_dir {
            self.unwatch(id);
        }
        self.unlink_file(id, file);
        self.count(client, |s| {
            s.revoked += 1;
            match reason {
                RevokeReason::Unreachable => s.revoked_unreachable += 1,
                RevokeReason::Timeout => s.revoked_timeout += 1,
            }
            s.outstanding = s.outstanding.saturating_sub(1);
        });
    }

    fn unlink_file(&mut self, id: u64, file: FileId) {
        if let Some(v) = self.by_file.get_mut(&file) {
            v.retain(|x| *x != id);
            if v.is_empty() {
                self.by_file.remove(&file);
            }
        }
    }

    fn remove(&mut self, id: u64) -> Option<Delegation> {
        if self.delegs.get(&id)?.dir.is_some() {
            self.unwatch(id);
            self.dirs -= 1;
        }
        let d = self.delegs.remove(&id)?;
        if d.phase == Phase::Revoked {
            if let Some(n) = self.revoked_by_client.get_mut(&d.client) {
                *n -= 1;
                if *n == 0 {
                    self.revoked_by_client.remove(&d.client);
                }
            }
        }
        self.unlink_file(id, d.file);
        if let Some(s) = self.by_client.get_mut(&d.client) {
            s.remove(&id);
            if s.is_empty() {
                self.by_client.remove(&d.client);
            }
        }
        Some(d)
    }

    /// DELEGRETURN (RFC 8881 §18.6) of `sid` by `client` for `file`. A revoked
    /// delegation answers [`StateError::DelegRevoked`] and stays until FREE_STATEID.
    pub fn delegreturn(
        &mut self,
        now: Instant,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
    ) -> Result<(), StateError> {
        let (id, d) = self.live(client, sid, file)?;
        let phase = d.phase;
        self.remove(id);
        self.count(client, |s| {
            s.returned += 1;
            s.outstanding = s.outstanding.saturating_sub(1);
        });
        if let Phase::Recalling { since } = phase {
            let latency = now.saturating_duration_since(since);
            self.total.returned_after_recall(latency);
            self.per_client
                .entry(client)
                .or_default()
                .returned_after_recall(latency);
        }
        Ok(())
    }

    /// Take back the delegation `sid` just granted to `client` on `file`, before its
    /// holder learnt of it (the server could not protect it: ADR 0027). It counts as
    /// never granted. False when there is no such live delegation.
    pub fn withdraw(&mut self, client: ClientId, sid: &Stateid, file: FileId) -> bool {
        let Ok((id, _)) = self.live(client, sid, file) else {
            return false;
        };
        self.remove(id);
        self.count(client, |s| {
            s.granted = s.granted.saturating_sub(1);
            s.outstanding = s.outstanding.saturating_sub(1);
        });
        true
    }

    /// The type of `client`'s live delegation `sid` on `file` (an OPEN with
    /// CLAIM_DELEG_CUR_FH, I/O with a delegation stateid): revoked ones are
    /// [`StateError::DelegRevoked`].
    pub fn check(
        &self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
    ) -> Result<DelegType, StateError> {
        let d = self.live(client, sid, file)?.1;
        // A directory delegation's stateid is good for DELEGRETURN, TEST_STATEID and
        // FREE_STATEID only.
        if d.dir.is_some() {
            return Err(StateError::BadStateid);
        }
        Ok(d.kind)
    }

    /// The file of `client`'s delegation `sid` (DELEGRETURN of a delegation whose file
    /// is gone: its handle is stale, but the delegation must still be returnable).
    pub fn file_of(&self, client: ClientId, sid: &Stateid) -> Option<FileId> {
        let id = self.resolve(client, sid).ok()?;
        self.delegs.get(&id).map(|d| d.file)
    }

    /// `client`'s delegation `sid` on `file`, not revoked.
    fn live(
        &self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
    ) -> Result<(u64, &Delegation), StateError> {
        let id = self.resolve(client, sid)?;
        let d = self.delegs.get(&id).ok_or(StateError::BadStateid)?;
        if d.file != file {
            return Err(StateError::BadStateid);
        }
        if d.phase == Phase::Revoked {
            return Err(StateError::DelegRevoked);
        }
        Ok((id, d))
    }

    /// The type of `client`'s live delegation `sid` on `file` if it carries delegated
    /// timestamps (RFC 9754: only its holder sets `time_deleg_*`, with its stateid).
    pub fn timestamps_holder(
        &self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
    ) -> Result<DelegType, StateError> {
        let id = self.resolve(client, sid)?;
        match self.delegs.get(&id) {
            Some(d) if d.file == file && d.timestamps && d.phase != Phase::Revoked => Ok(d.kind),
            Some(d) if d.phase == Phase::Revoked => Err(StateError::DelegRevoked),
            _ => Err(StateError::BadStateid),
        }
    }

    /// TEST_STATEID of a delegation stateid.
    pub fn test(&self, client: ClientId, sid: &Stateid) -> Result<(), StateError> {
        let id = self.resolve(client, sid)?;
        match self.delegs.get(&id).map(|d| d.phase) {
            Some(Phase::Revoked) => Err(StateError::DelegRevoked),
            Some(_) => Ok(()),
            None => Err(StateError::BadStateid),
        }
    }

    /// FREE_STATEID of a delegation stateid: frees a revoked one; a live delegation
    /// is still held ([`StateError::LocksHeld`], as knfsd).
    pub fn free(&mut self, client: ClientId, sid: &Stateid) -> Result<(), StateError> {
        let id = self.resolve(client, sid)?;
        match self.delegs.get(&id).map(|d| d.phase) {
            Some(Phase::Revoked) => {
                self.remove(id);
                Ok(())
            }
            Some(_) => Err(StateError::LocksHeld),
            None => Err(StateError::BadStateid),
        }
    }

    /// Whether `client` has a revoked delegation not yet freed
    /// (SEQ4_STATUS_RECALLABLE_STATE_REVOKED).
    pub fn has_revoked(&self, client: ClientId) -> bool {
        self.revoked_by_client.contains_key(&client)
    }

    /// The write delegation another client than `client` holds on `file`.
    pub fn write_holder(&self, client: Option<ClientId>, file: FileId) -> Option<WriteHolder> {
        self.live_on(file)
            .find(|d| d.kind == DelegType::Write && Some(d.client) != client)
            .map(|d| WriteHolder {
                client: d.client,
                fh: d.fh.clone(),
                change: d.change,
                timestamps: d.timestamps,
            })
    }

    /// The holder of delegation `id`.
    pub fn holder(&self, id: u64) -> Option<ClientId> {
        self.delegs.get(&id).map(|d| d.client)
    }

    /// Whether any live delegation exists (the cheap test before a conflict check).
    pub fn is_empty(&self) -> bool {
        self.by_file.is_empty()
    }

    /// Whether any directory delegation exists (the cheap test before attribute
    /// notifications, which need the object's attributes read first).
    pub fn has_dir_delegations(&self) -> bool {
        self.dirs > 0
    }

    /// Whether a delegation of `client` is being recalled.
    pub fn client_is_recalled(&self, client: ClientId) -> bool {
        self.by_client.get(&client).is_some_and(|ids| {
            ids.iter().any(|id| {
                self.delegs
                    .get(id)
                    .is_some_and(|d| matches!(d.phase, Phase::Recalling { .. }))
            })
        })
    }

    /// Whether `client` holds any delegation (DESTROY_CLIENTID is refused then).
    pub fn client_has_delegations(&self, client: ClientId) -> bool {
        self.by_client.contains_key(&client)
    }

    /// Whether `client` holds a file delegation, which it could reclaim after a restart
    /// (directory delegations are not reclaimed: RFC 8881 §10.9 lets the server drop
    /// them, and a client asks for them again).
    pub fn client_has_file_delegations(&self, client: ClientId) -> bool {
        self.by_client.get(&client).is_some_and(|ids| {
            ids.iter()
                .any(|id| self.delegs.get(id).is_some_and(|d| d.dir.is_none()))
        })
    }

    /// The client went (lease expiry, replacement, DESTROY_CLIENTID): its delegations
    /// go with it. Returns the files that had live ones (waiters may proceed).
    pub fn expire_client(&mut self, client: ClientId) -> Vec<FileId> {
        let ids: Vec<u64> = self
            .by_client
            .get(&client)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        let mut files = Vec::new();
        for id in ids {
            if let Some(d) = self.remove(id) {
                if d.phase != Phase::Revoked {
                    files.push(d.file);
                    self.count(client, |s| {
                        s.released += 1;
                        s.outstanding = s.outstanding.saturating_sub(1);
                    });
                }
            }
        }
        self.per_client.remove(&client);
        files
    }

    /// A request held for recalls stopped waiting after `waited`.
    pub fn note_hold(&mut self, outcome: HoldOutcome, waited: Duration) {
        let s = &mut self.total;
        match outcome {
            HoldOutcome::Returned => s.held_returned += 1,
            HoldOutcome::Unreachable => s.held_unreachable += 1,
            HoldOutcome::Timeout => s.held_timeout += 1,
            HoldOutcome::GaveWay => s.held_gave_way += 1,
        }
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        s.held_us_max = s.held_us_max.max(us);
    }

    /// Server-wide counters.
    pub fn stats(&self) -> DelegStats {
        self.total
    }

    /// One client's counters (zero for a client that never had a delegation).
    pub fn client_stats(&self, client: ClientId) -> DelegStats {
        self.per_client.get(&client).copied().unwrap_or_default()
    }

    /// Live delegations on `file`: (holder, type), for invariant checks.
    pub fn on_file(&self, file: FileId) -> Vec<(ClientId, DelegType)> {
        self.live_on(file).map(|d| (d.client, d.kind)).collect()
    }

    /// Whether `file` has a delegation in the table (what [`DelegTable::on_file`] lists),
    /// without building the list.
    pub fn is_delegated(&self, file: FileId) -> bool {
        self.live_on(file).next().is_some()
    }

    /// The files `client` holds delegations on (revoked ones too).
    pub fn client_files(&self, client: ClientId) -> Vec<FileId> {
        self.by_client
            .get(&client)
            .into_iter()
            .flatten()
            .filter_map(|id| self.delegs.get(id))
            .map(|d| d.file)
            .collect()
    }

    /// Every file with a live delegation (invariant checks in the simulation).
    pub fn files(&self) -> Vec<FileId> {
        self.by_file.keys().copied().collect()
    }
}

/// What [`DelegTable::conflicts`] found.
#[derive(Debug, Default)]
pub struct Conflicts {
    /// Delegations the request must wait for (recalling).
    pub waiting: Vec<u64>,
    /// Recalls to send now.
    pub recalls: Vec<Recall>,
    /// Delegations of unreachable holders revoked at once: (holder, stateid, file).
    pub revoked: Vec<(ClientId, Stateid, FileId)>,
}

#[cfg(test)]
mod tests;
