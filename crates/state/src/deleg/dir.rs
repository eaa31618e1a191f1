//! Directory delegations (RFC 8881 §10.9, §18.39) and their notification queues
//! (CB_NOTIFY, §20.4), the sans-IO part.
//!
//! A directory delegation lives in the same table as file delegations (same stateid
//! space, same life cycle: active, recalling, revoked; same counters) with
//! [`super::DelegType::Directory`] and a [`DirState`]: the notification types the
//! holder asked for and was granted, the attributes it wants with them, the batching
//! delay, and the queue of notifications not yet sent.
//!
//! The server (which can read the file system and encode XDR) builds each
//! notification as an opaque [`Notice`]; the core queues it per delegation and asks
//! for a flush once per batch ([`crate::Effect::NotifyDue`]); the server takes the
//! batch ([`super::DelegTable::take_notices`]) and sends it. A change the holder did
//! not ask to be notified of, a queue that grows past its bound, or a notification
//! that cannot be delivered recalls the delegation instead.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;

use crate::types::{ClientId, FileId, Stateid};

/// `notify_type4` values (RFC 8881 §20.4.2), as bit numbers of a notification mask.
pub mod notify_type {
    /// NOTIFY4_CHANGE_CHILD_ATTRS.
    pub const CHANGE_CHILD_ATTRS: u32 = 0;
    /// NOTIFY4_CHANGE_DIR_ATTRS.
    pub const CHANGE_DIR_ATTRS: u32 = 1;
    /// NOTIFY4_REMOVE_ENTRY.
    pub const REMOVE_ENTRY: u32 = 2;
    /// NOTIFY4_ADD_ENTRY.
    pub const ADD_ENTRY: u32 = 3;
    /// NOTIFY4_RENAME_ENTRY.
    pub const RENAME_ENTRY: u32 = 4;
    /// NOTIFY4_CHANGE_COOKIE_VERIFIER.
    pub const CHANGE_COOKIE_VERIFIER: u32 = 5;
}

/// The notification types txnfs sends: entries added, removed and renamed, the
/// attributes of children and of the directory changed. CHANGE_COOKIE_VERIFIER is
/// never granted (txnfs's cookie verifiers never change).
pub const SUPPORTED_NOTIFICATIONS: u32 = (1 << notify_type::ADD_ENTRY)
    | (1 << notify_type::REMOVE_ENTRY)
    | (1 << notify_type::RENAME_ENTRY)
    | (1 << notify_type::CHANGE_CHILD_ATTRS)
    | (1 << notify_type::CHANGE_DIR_ATTRS);

/// Not a `notify_type4`: a change of a directory that cannot be described to any
/// holder (a change made outside the server that was seen only in part, ADR 0047).
/// No delegation covers it, so [`crate::Access::DirChange`] of it recalls every
/// directory delegation of the directory.
pub const UNDESCRIBED_CHANGE: u32 = 32;

/// Children a directory delegation with CHANGE_CHILD_ATTRS tracks at most (its
/// entries' names and objects, to know which directory a changed file is in). A
/// larger directory is granted without CHANGE_CHILD_ATTRS; one that grows past it is
/// recalled.
pub const MAX_CHILDREN: usize = 4096;

/// The longest a notification waits for others to share its CB_NOTIFY, whatever
/// delay the client asked for: a holder must not act on a stale directory for long.
pub const MAX_BATCH_DELAY: Duration = Duration::from_millis(50);

/// Notifications queued for one delegation at most; beyond, it is recalled.
pub const MAX_PENDING: usize = 1024;

/// Bytes of queued notifications for one delegation at most; beyond, it is recalled.
pub const MAX_PENDING_BYTES: usize = 256 << 10;

/// The XDR bytes a `notify4` adds around its value: the one-word bitmap (length and
/// word), the value's length, and at most 3 bytes of padding.
pub const NOTIFY4_OVERHEAD: usize = 15;

/// One notification, encoded by the server: its `notify_type4` and the XDR of the
/// matching `notify_*4` structure (the `notify_vals` of a `notify4` whose mask has
/// that one bit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The `notify_type4`.
    pub kind: u32,
    /// XDR of `notify_add4`, `notify_remove4`, `notify_rename4`, `notify_attr4`.
    pub body: Bytes,
    /// An attribute notice of this object and name replaces a queued one of the same
    /// kind, object and name (the newer attributes are all the holder needs).
    pub coalesce: Option<(FileId, Bytes)>,
}

/// How an entry change updates the children a delegation tracks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryUpdate {
    /// `name` now names `child` (added, linked, renamed to, replaced).
    Add(Bytes, FileId),
    /// `name` is gone.
    Remove(Bytes),
}

/// Names and objects of a directory's entries (CHANGE_CHILD_ATTRS).
#[derive(Debug, Clone, Default)]
pub(super) struct Children {
    by_name: HashMap<Bytes, FileId>,
    by_child: HashMap<FileId, Vec<Bytes>>,
}

impl Children {
    /// Applies `u`; returns the child that lost its last name here and the child that
    /// got its first (for the table's reverse index).
    fn apply(&mut self, u: &EntryUpdate) -> (Option<FileId>, Option<FileId>) {
        let (name, new) = match u {
            EntryUpdate::Add(n, c) => (n, Some(*c)),
            EntryUpdate::Remove(n) => (n, None),
        };
        let mut gone = None;
        if let Some(old) = self.by_name.remove(name) {
            if let Some(v) = self.by_child.get_mut(&old) {
                v.retain(|x| x != name);
                if v.is_empty() {
                    self.by_child.remove(&old);
                    gone = Some(old);
                }
            }
        }
        let mut first = None;
        if let Some(c) = new {
            self.by_name.insert(name.clone(), c);
            let v = self.by_child.entry(c).or_default();
            if v.is_empty() {
                first = Some(c);
            }
            v.push(name.clone());
        }
        match (gone, first) {
            // Renamed over itself, or a name moved between links of one object.
            (Some(g), Some(f)) if g == f => (None, None),
            x => x,
        }
    }

    fn len(&self) -> usize {
        self.by_name.len()
    }
}

/// What a client asked for in GET_DIR_DELEGATION, as far as the core cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirParams {
    /// The notification types asked for (bit n = `notify_type4` n).
    pub types: u32,
    /// The attributes wanted with child entries (a `bitmap4`).
    pub child_attrs: Vec<u32>,
    /// The attributes wanted with directory attribute changes.
    pub dir_attrs: Vec<u32>,
    /// The delay the client accepts before it hears of a change (the larger of
    /// `gdda_child_attr_delay` and `gdda_dir_attr_delay`).
    pub delay: Duration,
}

/// A directory delegation's notification state.
#[derive(Debug, Clone)]
pub struct DirState {
    /// Granted notification types (asked ∩ [`SUPPORTED_NOTIFICATIONS`]).
    pub types: u32,
    /// Attributes sent with entries.
    pub child_attrs: Vec<u32>,
    /// Attributes sent with directory attribute changes.
    pub dir_attrs: Vec<u32>,
    /// Batching delay (at most [`MAX_BATCH_DELAY`]).
    pub delay: Duration,
    pub(super) pending: Vec<Notice>,
    pub(super) pending_bytes: usize,
    /// A flush was asked for and has not taken the queue yet.
    pub(super) scheduled: bool,
    /// The entries, while CHANGE_CHILD_ATTRS is granted.
    pub(super) children: Option<Children>,
}

impl DirState {
    pub(super) fn new(p: DirParams) -> Self {
        DirState {
            types: p.types & SUPPORTED_NOTIFICATIONS,
            child_attrs: p.child_attrs,
            dir_attrs: p.dir_attrs,
            delay: p.delay.min(MAX_BATCH_DELAY),
            pending: Vec::new(),
            pending_bytes: 0,
            scheduled: false,
            children: None,
        }
    }

    /// Whether the holder is notified of changes of `kind` (`notify_type4`).
    pub fn covers(&self, kind: u32) -> bool {
        kind < 32 && self.types & (1 << kind) != 0
    }

    pub(super) fn clear(&mut self) {
        self.pending.clear();
        self.pending_bytes = 0;
        self.scheduled = false;
    }
}

/// A directory delegation granted by GET_DIR_DELEGATION.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGranted {
    /// Its internal id (for [`super::DelegTable::track_children`]).
    pub id: u64,
    /// Its stateid.
    pub stateid: Stateid,
    /// The notification types the server will send (`gddr_notification`).
    pub types: u32,
    /// The child attributes it will send (`gddr_child_attributes`).
    pub child_attrs: Vec<u32>,
    /// The directory attributes it will send (`gddr_dir_attributes`).
    pub dir_attrs: Vec<u32>,
}

/// A holder to notify of a change ([`super::DelegTable::notify_targets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyTarget {
    /// The delegation (internal id, for [`super::DelegTable::queue_notices`]).
    pub id: u64,
    /// The attributes it wants with entries.
    pub child_attrs: Vec<u32>,
    /// The attributes it wants with directory changes, if it asked for those.
    pub dir_attrs: Option<Vec<u32>>,
}

/// A batch of notifications to send in one CB_NOTIFY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeBatch {
    /// The holder.
    pub client: ClientId,
    /// The directory delegation's stateid (`cna_stateid`).
    pub stateid: Stateid,
    /// The directory's wire filehandle (`cna_fh`).
    pub fh: Bytes,
    /// The notifications, oldest first.
    pub notices: Vec<Notice>,
    /// More are queued (the sender takes again after this one).
    pub more: bool,
}

/// An attribute notification to build ([`super::DelegTable::attr_targets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrTarget {
    /// The delegation.
    pub id: u64,
    /// CHANGE_CHILD_ATTRS or CHANGE_DIR_ATTRS.
    pub kind: u32,
    /// The entry's name in the delegated directory (empty for the directory itself).
    pub name: Bytes,
    /// The attributes the holder wants.
    pub attrs: Vec<u32>,
}

/// A flush the server must schedule: send the queue of delegation `id` after `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushDue {
    /// The delegation.
    pub id: u64,
    /// The batching delay.
    pub after: Duration,
}

impl super::DelegTable {
    /// GET_DIR_DELEGATION's decision ([`super::policy::decide_dir`]) and, when it
    /// grants, the new directory delegation of `client` on `dir` (wire handle `fh`).
    #[allow(clippy::too_many_arguments)]
    pub fn grant_dir(
        &mut self,
        now: std::time::Instant,
        client: ClientId,
        dir: crate::types::FileId,
        params: DirParams,
        callback_up: bool,
        in_grace: bool,
        fh: Bytes,
    ) -> Result<DirGranted, super::NoDeleg> {
        let mut own = false;
        let mut recall_pending = false;
        for d in self.live_on(dir).filter(|d| d.dir.is_some()) {
            own |= d.client == client;
            recall_pending |= matches!(d.phase, super::Phase::Recalling { .. });
        }
        super::policy::decide_dir(&super::policy::DirGrantInput {
            enabled: self.limits.enabled,
            callback_up,
            in_grace,
            at_limit: self.delegs.len() >= self.limits.max_delegations,
            own_deleg: own,
            recall_pending,
            recent_conflict: self
                .cool_down
                .get(&(dir, client))
                .is_some_and(|t| now.saturating_duration_since(*t) < super::policy::COOL_DOWN),
        })?;
        let mut state = DirState::new(params);
        if state.covers(notify_type::CHANGE_CHILD_ATTRS) {
            // Tracked from now on; the listing follows (`track_children`).
            state.children = Some(Children::default());
        }
        let (types, child_attrs, dir_attrs) = (
            state.types,
            state.child_attrs.clone(),
            state.dir_attrs.clone(),
        );
        let id = super::DELEG_BIT | self.next;
        self.next += 1;
        self.delegs.insert(
            id,
            super::Delegation {
                client,
                file: dir,
                kind: super::DelegType::Directory,
                seqid: 1,
                fh,
                change: 0,
                timestamps: false,
                phase: super::Phase::Active,
                dir: Some(Box::new(state)),
            },
        );
        self.dirs += 1;
        self.by_file.entry(dir).or_default().push(id);
        self.by_client.entry(client).or_default().insert(id);
        self.count(client, |s| {
            s.granted += 1;
            s.outstanding += 1;
        });
        Ok(DirGranted {
            id,
            stateid: self.stateid(id, 1),
            types,
            child_attrs,
            dir_attrs,
        })
    }

    /// The entries of the directory of delegation `id` just granted, read after the
    /// grant (`None`: unreadable). They are merged with the changes seen since the
    /// grant. A directory with more than [`MAX_CHILDREN`] entries is not tracked and
    /// CHANGE_CHILD_ATTRS is withdrawn. Returns the notification types granted in the
    /// end.
    pub fn track_children(&mut self, id: u64, entries: Option<Vec<(Bytes, FileId)>>) -> u32 {
        let Some(st) = self.delegs.get_mut(&id).and_then(|d| d.dir.as_deref_mut()) else {
            return 0;
        };
        let Some(children) = st.children.as_mut() else {
            return st.types;
        };
        let mut added = Vec::new();
        let fits = entries
            .as_ref()
            .is_some_and(|e| e.len() + children.len() <= MAX_CHILDREN);
        if fits {
            for (name, child) in entries.into_iter().flatten() {
                if !children.by_name.contains_key(&name) {
                    added.extend(children.apply(&EntryUpdate::Add(name, child)).1);
                }
            }
        } else {
            st.types &= !(1 << notify_type::CHANGE_CHILD_ATTRS);
            st.children = None;
        }
        let types = st.types;
        if fits {
            for c in added {
                self.watched.entry(c).or_default().insert(id);
            }
        } else {
            self.unwatch(id);
        }
        types
    }

    /// Forget the children delegation `id` tracked (it is returned or revoked).
    pub(super) fn unwatch(&mut self, id: u64) {
        let Some(children) = self
            .delegs
            .get_mut(&id)
            .and_then(|d| d.dir.as_deref_mut())
            .and_then(|st| st.children.take())
        else {
            // Not tracking (or tracking was withdrawn): drop any stray reference.
            self.watched.retain(|_, ids| {
                ids.remove(&id);
                !ids.is_empty()
            });
            return;
        };
        for child in children.by_child.keys() {
            if let Some(ids) = self.watched.get_mut(child) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.watched.remove(child);
                }
            }
        }
    }

    /// Apply `updates` to the children tracked by every directory delegation on
    /// `dir` (the holder's own changes included: its later attribute changes by
    /// others must still be found). Returns the delegations that outgrew
    /// [`MAX_CHILDREN`].
    fn update_children(&mut self, dir: FileId, updates: &[EntryUpdate]) -> Vec<u64> {
        let mut too_big = Vec::new();
        if updates.is_empty() {
            return too_big;
        }
        let ids: Vec<u64> = self
            .by_file
            .get(&dir)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        for id in ids {
            let Some(children) = self
                .delegs
                .get_mut(&id)
                .and_then(|d| d.dir.as_deref_mut())
                .and_then(|st| st.children.as_mut())
            else {
                continue;
            };
            let mut changes = Vec::new();
            for u in updates {
                changes.push(children.apply(u));
            }
            if children.len() > MAX_CHILDREN {
                too_big.push(id);
            }
            for (gone, first) in changes {
                if let Some(g) = gone {
                    if let Some(ids) = self.watched.get_mut(&g) {
                        ids.remove(&id);
                        if ids.is_empty() {
                            self.watched.remove(&g);
                        }
                    }
                }
                if let Some(f) = first {
                    self.watched.entry(f).or_default().insert(id);
                }
            }
        }
        too_big
    }

    /// After a change of `kind` to `dir` by `client` (`None`: anonymous) that did
    /// `updates` to its entries: the other clients' active directory delegations to
    /// notify. Those not notified of such changes are recalled now (returned as
    /// [`super::Recall`]s): a grant that slipped in between the conflict check before
    /// the change and the change itself must not keep a stale directory. So is one
    /// whose tracked children outgrew [`MAX_CHILDREN`].
    pub fn notify_targets(
        &mut self,
        now: std::time::Instant,
        client: Option<ClientId>,
        dir: crate::types::FileId,
        kind: u32,
        updates: &[EntryUpdate],
    ) -> (Vec<NotifyTarget>, Vec<super::Recall>) {
        let mut targets = Vec::new();
        let mut recall = self.update_children(dir, updates);
        for &id in self.by_file.get(&dir).into_iter().flatten() {
            let Some(d) = self.delegs.get(&id) else {
                continue;
            };
            let Some(st) = &d.dir else { continue };
            if Some(d.client) == client || d.phase != super::Phase::Active {
                continue;
            }
            if st.covers(kind) {
                targets.push(NotifyTarget {
                    id,
                    child_attrs: st.child_attrs.clone(),
                    dir_attrs: st
                        .covers(notify_type::CHANGE_DIR_ATTRS)
                        .then(|| st.dir_attrs.clone()),
                });
            } else {
                recall.push(id);
            }
        }
        targets.retain(|t| !recall.contains(&t.id));
        recall.sort_unstable();
        recall.dedup();
        let recalls = recall
            .into_iter()
            .filter_map(|id| self.recall_id(now, id))
            .collect();
        (targets, recalls)
    }

    /// Queue `notices` (delegation id, notice). Returns the flushes to schedule (one
    /// per delegation whose queue was idle) and the recalls of delegations whose
    /// queue overflowed.
    pub fn queue_notices(
        &mut self,
        now: std::time::Instant,
        notices: Vec<(u64, Notice)>,
    ) -> (Vec<FlushDue>, Vec<super::Recall>) {
        let mut due = Vec::new();
        let mut overflow = Vec::new();
        for (id, n) in notices {
            let Some(d) = self.delegs.get_mut(&id) else {
                continue;
            };
            if d.phase != super::Phase::Active {
                continue;
            }
            let Some(st) = d.dir.as_deref_mut() else {
                continue;
            };
            if n.coalesce.is_some() {
                if let Some(i) = st
                    .pending
                    .iter()
                    .position(|p| p.kind == n.kind && p.coalesce == n.coalesce)
                {
                    let old = st.pending.remove(i);
                    st.pending_bytes -= old.body.len();
                }
            }
            if st.pending.len() >= MAX_PENDING
                || st.pending_bytes + n.body.len() > MAX_PENDING_BYTES
            {
                overflow.push(id);
                continue;
            }
            st.pending_bytes += n.body.len();
            st.pending.push(n);
            if !st.scheduled {
                st.scheduled = true;
                due.push(FlushDue {
                    id,
                    after: st.delay,
                });
            }
        }
        overflow.sort_unstable();
        overflow.dedup();
        let recalls = overflow
            .into_iter()
            .filter_map(|id| self.recall_id(now, id))
            .collect();
        (due, recalls)
    }

    /// The next batch of delegation `id`'s queue: notices whose `notify4` list
    /// encodes to at most `max_bytes` ([`NOTIFY4_OVERHEAD`] per notice plus its body),
    /// at least one. `None` when the delegation is gone, not active, or has nothing
    /// queued; then no flush is scheduled any more.
    pub fn take_notices(&mut self, id: u64, max_bytes: usize) -> Option<NoticeBatch> {
        let d = self.delegs.get_mut(&id)?;
        let active = d.phase == super::Phase::Active;
        let st = d.dir.as_deref_mut()?;
        if !active || st.pending.is_empty() {
            st.clear();
            return None;
        }
        let mut bytes = 0;
        let mut encoded = 0;
        let mut n = 0;
        for x in &st.pending {
            let cost = x.body.len() + NOTIFY4_OVERHEAD;
            if n > 0 && encoded + cost > max_bytes {
                break;
            }
            encoded += cost;
            bytes += x.body.len();
            n += 1;
        }
        let notices: Vec<Notice> = st.pending.drain(..n).collect();
        st.pending_bytes -= bytes;
        let more = !st.pending.is_empty();
        st.scheduled = more;
        let (client, fh, seqid) = (d.client, d.fh.clone(), d.seqid);
        Some(NoticeBatch {
            client,
            stateid: self.stateid(id, seqid),
            fh,
            notices,
            more,
        })
    }

    /// Recall delegation `id` if it is active (a notification could not be
    /// delivered, or its queue overflowed): it turns recalling, its queue is dropped.
    pub fn recall_id(&mut self, now: std::time::Instant, id: u64) -> Option<super::Recall> {
        let d = self.delegs.get_mut(&id)?;
        if d.phase != super::Phase::Active {
            return None;
        }
        d.phase = super::Phase::Recalling { since: now };
        if let Some(st) = &mut d.dir {
            st.clear();
        }
        let (client, fh, seqid, file) = (d.client, d.fh.clone(), d.seqid, d.file);
        self.count(client, |s| s.recalled += 1);
        self.note_conflict(now, file, client);
        Some(super::Recall {
            client,
            stateid: self.stateid(id, seqid),
            fh,
        })
    }

    /// After `client` changed the attributes of `obj`: the attribute notifications to
    /// build — CHANGE_DIR_ATTRS for other clients' delegations of `obj` itself,
    /// CHANGE_CHILD_ATTRS (one per name) for those of directories `obj` is an entry
    /// of. Only active delegations that asked for them.
    pub fn attr_targets(&self, client: Option<ClientId>, obj: FileId) -> Vec<AttrTarget> {
        let mut out = Vec::new();
        let wanted = |d: &super::Delegation, kind: u32| {
            Some(d.client) != client
                && d.phase == super::Phase::Active
                && d.dir.as_deref().is_some_and(|st| st.covers(kind))
        };
        for &id in self.by_file.get(&obj).into_iter().flatten() {
            let Some(d) = self.delegs.get(&id) else {
                continue;
            };
            if wanted(d, notify_type::CHANGE_DIR_ATTRS) {
                out.push(AttrTarget {
                    id,
                    kind: notify_type::CHANGE_DIR_ATTRS,
                    name: Bytes::new(),
                    attrs: d
                        .dir
                        .as_deref()
                        .map(|st| st.dir_attrs.clone())
                        .unwrap_or_default(),
                });
            }
        }
        let mut watchers: Vec<u64> = self
            .watched
            .get(&obj)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        watchers.sort_unstable();
        for id in watchers {
            let Some(d) = self.delegs.get(&id) else {
                continue;
            };
            if !wanted(d, notify_type::CHANGE_CHILD_ATTRS) {
                continue;
            }
            let Some(st) = d.dir.as_deref() else { continue };
            let names = st
                .children
                .as_ref()
                .and_then(|c| c.by_child.get(&obj))
                .cloned()
                .unwrap_or_default();
            for name in names {
                out.push(AttrTarget {
                    id,
                    kind: notify_type::CHANGE_CHILD_ATTRS,
                    name,
                    attrs: st.child_attrs.clone(),
                });
            }
        }
        out
    }

    /// Whether delegation `id` is a directory delegation still live (active or
    /// recalling).
    pub fn dir_live(&self, id: u64) -> bool {
        self.delegs
            .get(&id)
            .is_some_and(|d| d.dir.is_some() && d.phase != super::Phase::Revoked)
    }

    /// The notification state of `client`'s directory delegation `sid` (tests,
    /// diagnostics).
    pub fn dir_state(&self, client: ClientId, sid: &Stateid) -> Option<&DirState> {
        let id = self.resolve(client, sid).ok()?;
        self.delegs.get(&id)?.dir.as_deref()
    }
}
