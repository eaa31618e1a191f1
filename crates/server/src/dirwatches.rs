//! Delegated directories watched for changes from outside the server (ADR 0047): a
//! process on the host creating, removing or renaming an entry in a directory of a
//! local export that an NFS client holds a directory delegation on is notified to the
//! holders (CB_NOTIFY, RFC 8881 §20.4) as another client's change would be, or, when
//! a holder did not ask for that kind of notification or the change cannot be
//! described, recalls the delegation (revoked if not returned within `recall_wait`).
//!
//! When a directory delegation is granted, the export's backend is asked to watch the
//! directory (`Backend::watch_dir`; the local backend adds an inotify watch); a
//! directory the backend cannot watch gets no delegation. One watch serves every
//! delegation of a directory and goes with the last of them. The backend leaves the
//! server's own changes out (they are notified by the ops, `crate::ops::notify`) and
//! rings SIGIO when it has something; the service then has the server look
//! (`Server::lease_breaks`, the tick too), and the changes are turned into
//! notifications on a blocking-pool thread, one look at a time so that they reach the
//! holders in the order they happened.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use txnfs_backend::{Attrs, BackendError, DirEvent, DirWatch, FileKey, OpCtx};
use txnfs_state::deleg::dir::{notify_type, UNDESCRIBED_CHANGE};
use txnfs_state::deleg::{EntryUpdate, Notice, NotifyTarget};
use txnfs_state::{Access, FileId};
use txnfs_xdr::Encode;

use crate::dirnotify::{no_attrs, remove_entry};
use crate::export::Export;
use crate::nfs::*;
use crate::recall::Recall;
use crate::statecore::CoreAccess;

/// Encodes the attributes a mask asks for of an object of an export (the export, the
/// object's key, the mask, the attributes already read): the server's encoding.
pub type EncodeIn<'a> = dyn Fn(&Arc<Export>, &FileKey, &[u32], &Attrs) -> Option<fattr4> + 'a;

/// The watches of delegated directories, by directory.
#[derive(Debug, Default)]
pub struct DirWatches {
    map: Mutex<HashMap<FileId, Watched>>,
    /// A look at the watches is scheduled and has not started.
    scheduled: AtomicBool,
    /// Held while changes are taken and notified: one look at a time.
    looking: Mutex<()>,
    /// What outside changes did.
    pub stats: OutsideStats,
}

struct Watched {
    export: Arc<Export>,
    key: FileKey,
    watch: DirWatch,
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("export", &self.export.id)
            .field("watch", &self.watch)
            .finish_non_exhaustive()
    }
}

/// Counters of changes made outside the server in delegated directories.
#[derive(Debug, Default)]
pub struct OutsideStats {
    /// Changes reported by the watches (one per entry added, removed or renamed, or
    /// per loss of events).
    pub changes: AtomicU64,
    /// Notifications queued for holders because of them (one per holder and change).
    pub notified: AtomicU64,
    /// Directory delegations recalled because of them.
    pub recalled: AtomicU64,
}

/// The outside changes of one watched directory.
struct Changed {
    dir: FileId,
    export: Arc<Export>,
    key: FileKey,
    events: Vec<DirEvent>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The map holds no invariant a panic could break half-way.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl DirWatches {
    /// Directories watched now.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// Whether no directory is watched.
    pub fn is_empty(&self) -> bool {
        lock(&self.map).is_empty()
    }

    /// Before a directory delegation of `key` of `export` is granted: a watch of the
    /// directory, so that no outside change between the grant and the reply goes
    /// unseen. Called without the core's lock (adding a watch is a syscall).
    /// `Ok(None)`: the backend needs none. An error: the directory cannot be
    /// watched, and gets no delegation.
    pub(crate) fn prepare(
        &self,
        cx: &OpCtx,
        export: &Arc<Export>,
        key: &FileKey,
    ) -> Result<Option<DirWatch>, BackendError> {
        export.backend.watch_dir(cx, key)
    }

    /// The delegation of `key` of `export` (the state core's `dir`) was granted: keep
    /// `watch` (from [`DirWatches::prepare`]) for it, unless the directory is watched
    /// already (the backend shares one watch between the two, so nothing is missed
    /// meanwhile) or the delegation ended already (checked under the core's lock,
    /// which [`DirWatches::unwatch_released`] takes first too).
    pub(crate) fn adopt(
        &self,
        core: &dyn CoreAccess,
        export: &Arc<Export>,
        key: &FileKey,
        dir: FileId,
        watch: Option<DirWatch>,
    ) {
        let Some(watch) = watch else { return };
        let unused = {
            let core = core.lock_core("watching a delegated directory");
            let mut map = lock(&self.map);
            if map.contains_key(&dir) || !core.delegations().is_delegated(dir) {
                Some(watch)
            } else {
                let (export, key) = (export.clone(), key.clone());
                map.insert(dir, Watched { export, key, watch });
                None
            }
        };
        // Removing a watch is a syscall: after the locks.
        drop(unused);
    }

    /// Drop the watches of the directories among `released` (every watched one with
    /// `None`, the tick's sweep) that have no delegation left.
    pub fn unwatch_released(&self, core: &dyn CoreAccess, released: Option<&[FileId]>) {
        if self.is_empty() {
            return;
        }
        let dropped: Vec<Watched> = {
            let core = core.lock_core("releasing directory watches");
            let mut map = lock(&self.map);
            crate::watches::take_undelegated(&mut map, core.delegations(), released)
        };
        drop(dropped);
    }

    /// Whether a look should be scheduled now (none is waiting to start).
    pub fn schedule(&self) -> bool {
        !self.is_empty() && !self.scheduled.swap(true, Ordering::AcqRel)
    }

    /// Take every watch's outside changes and notify the holders or recall their
    /// delegations (see the module documentation). `encode` encodes a mask of an
    /// object's attributes; `cx` reads them. Returns the delegations recalled (or
    /// being recalled already), which the caller revokes unless they are returned
    /// within `recall_wait`.
    pub fn look(&self, recall: Recall<'_>, cx: &OpCtx, encode: &EncodeIn<'_>) -> Vec<u64> {
        let _one = lock(&self.looking);
        self.scheduled.store(false, Ordering::Release);
        let changed: Vec<Changed> = lock(&self.map)
            .iter()
            .filter_map(|(dir, w)| {
                let events = w.watch.take_events();
                (!events.is_empty()).then(|| Changed {
                    dir: *dir,
                    export: w.export.clone(),
                    key: w.key.clone(),
                    events,
                })
            })
            .collect();
        let mut recalled = Vec::new();
        for c in changed {
            for ev in &c.events {
                self.stats.changes.fetch_add(1, Ordering::Relaxed);
                self.outside_change(recall, cx, &c, ev, encode, &mut recalled);
            }
        }
        recalled.sort_unstable();
        recalled.dedup();
        recalled
    }

    /// One outside change `ev` of `c.dir`.
    fn outside_change(
        &self,
        recall: Recall<'_>,
        cx: &OpCtx,
        c: &Changed,
        ev: &DirEvent,
        encode: &EncodeIn<'_>,
        recalled: &mut Vec<u64>,
    ) {
        let now = recall.clock.now();
        let entry = |name: &Bytes, mask: &[u32]| entry_of(cx, c, name, mask, encode);
        match ev {
            DirEvent::Added(name) => {
                let updates = [self.add_update(cx, c, name)];
                self.notify(recall, c, notify_type::ADD_ENTRY, &updates, recalled, |t| {
                    add_entry(entry(name, &t.child_attrs)).to_bytes()
                });
            }
            DirEvent::Removed(name) => {
                let updates = [EntryUpdate::Remove(name.clone())];
                self.notify(
                    recall,
                    c,
                    notify_type::REMOVE_ENTRY,
                    &updates,
                    recalled,
                    |_| remove_entry(name).to_bytes(),
                );
            }
            DirEvent::Renamed { from, to } => {
                let updates = [
                    EntryUpdate::Remove(from.clone()),
                    self.add_update(cx, c, to),
                ];
                self.notify(
                    recall,
                    c,
                    notify_type::RENAME_ENTRY,
                    &updates,
                    recalled,
                    |t| {
                        notify_rename4 {
                            nrn_old_entry: remove_entry(from),
                            nrn_new_entry: add_entry(entry(to, &t.child_attrs)),
                        }
                        .to_bytes()
                    },
                );
            }
            DirEvent::Lost => {
                tracing::info!(
                    dir = format_args!("{:#x}", c.dir),
                    "a delegated directory changed outside the server in a way that \
                     cannot be described: recalling its delegations"
                );
                self.recall_uncovered(recall, now, c.dir, UNDESCRIBED_CHANGE, recalled);
                return;
            }
        }
        // The directory's own attributes changed too (CHANGE_DIR_ATTRS).
        let encode = |key: &FileKey, mask: &[u32], a: &Attrs| encode(&c.export, key, mask, a);
        crate::dirnotify::attrs_changed(recall.core, cx, None, now, &c.export, &c.key, &encode);
    }

    /// The update of the tracked entries for `name` now naming what it names.
    fn add_update(&self, cx: &OpCtx, c: &Changed, name: &Bytes) -> EntryUpdate {
        match c.export.backend.lookup(cx, &c.key, name) {
            Ok((_, a)) => {
                EntryUpdate::Add(name.clone(), txnfs_state::file_id(c.export.id, a.fileid))
            }
            // Gone again: at least the old name's object is no longer there.
            Err(_) => EntryUpdate::Remove(name.clone()),
        }
    }

    /// A change of `kind`: recall the holders not told of such changes, then queue a
    /// notification built by `build` for every other holder.
    fn notify(
        &self,
        recall: Recall<'_>,
        c: &Changed,
        kind: u32,
        updates: &[EntryUpdate],
        recalled: &mut Vec<u64>,
        build: impl Fn(&NotifyTarget) -> Bytes,
    ) {
        let now = recall.clock.now();
        self.recall_uncovered(recall, now, c.dir, kind, recalled);
        let targets = match recall.core.core() {
            Ok(mut core) => core.dir_notify_targets(now, None, c.dir, kind, updates),
            Err(_) => return,
        };
        if targets.is_empty() {
            return;
        }
        // Encoding reads attributes: not under the core's lock.
        let notices: Vec<(u64, Notice)> = crate::dirnotify::notices_for(&targets, kind, build);
        self.stats
            .notified
            .fetch_add(notices.len() as u64, Ordering::Relaxed);
        if let Ok(mut core) = recall.core.core() {
            core.queue_dir_notices(now, notices);
        }
    }

    /// Recall the directory delegations of `dir` whose holders are not told of
    /// changes of `kind` (all of them for [`UNDESCRIBED_CHANGE`]), adding them to
    /// `recalled`. Nobody waits for them: the change is done.
    fn recall_uncovered(
        &self,
        recall: Recall<'_>,
        now: Instant,
        dir: FileId,
        kind: u32,
        recalled: &mut Vec<u64>,
    ) {
        let ids = match recall.core.core() {
            Ok(mut core) => {
                let before = core.delegations().stats().recalled;
                let ids = core.delegation_conflicts(
                    now,
                    None,
                    dir,
                    Access::DirChange(kind),
                    recall.unreachable(),
                );
                // Counted before the guard goes and sends the CB_RECALLs.
                let fresh = core.delegations().stats().recalled - before;
                self.stats.recalled.fetch_add(fresh, Ordering::Relaxed);
                ids
            }
            Err(_) => return,
        };
        recalled.extend(ids);
    }
}

/// `notify_entry4` of `name` in the changed directory with the attributes `mask`
/// asks for (none when the entry is gone again or cannot be encoded).
fn entry_of(
    cx: &OpCtx,
    c: &Changed,
    name: &Bytes,
    mask: &[u32],
    encode: &EncodeIn<'_>,
) -> notify_entry4 {
    let attrs = if mask.is_empty() {
        None
    } else {
        c.export
            .backend
            .lookup(cx, &c.key, name)
            .ok()
            .and_then(|(key, a): (FileKey, Attrs)| encode(&c.export, &key, mask, &a))
    };
    notify_entry4 {
        ne_file: name.clone(),
        ne_attrs: attrs.unwrap_or_else(no_attrs),
    }
}

/// `notify_add4` of `entry`. Whether it replaced an entry of that name is not known
/// (inotify does not say): no old entry.
fn add_entry(entry: notify_entry4) -> notify_add4 {
    notify_add4 {
        nad_old_entry: Vec::new(),
        nad_new_entry: entry,
        nad_new_entry_cookie: Vec::new(),
        nad_prev_entry: Vec::new(),
        nad_last_entry: false,
    }
}
