//! Delegated files watched for access from outside the server (ADR 0027): a process
//! on the host writing a file of a local export recalls the NFS clients' delegations
//! of it, as a conflicting NFS client does.
//!
//! When a file delegation is granted, the export's backend is asked to watch the file
//! (`Backend::watch_file`; the local backend takes a kernel lease). A file the backend
//! cannot protect gets no delegation (the grant is withdrawn before the reply goes
//! out). One watch serves every delegation of a file, and it is dropped when the last
//! of them ends (returned, revoked, or gone with its client) *before* requests held
//! for the delegation are woken, so the server's own I/O for them never meets its own
//! lease.
//!
//! An outside access that conflicts with a watch waits in the kernel and rings SIGIO;
//! the service then looks for broken watches (`Server::lease_breaks`; the tick does
//! too, in case a signal was missed) and recalls the file's delegations on a
//! blocking-pool thread, waiting at most `recall_wait`, but never longer than the
//! kernel lets the outside opener wait (`lease-break-time`, less a second): then the
//! delegations are revoked. Either way the watch is dropped and the opener proceeds.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use txnfs_backend::{BackendError, FileKey, OpCtx, Watch, WatchKind};
use txnfs_state::{Access, DelegType, FileId};

use crate::export::Export;
use crate::recall::Recall;
use crate::statecore::CoreAccess;
use crate::waitmode::WaitMode;

/// The watches of delegated files, by file.
#[derive(Debug, Default)]
pub struct FileWatches {
    map: Mutex<HashMap<FileId, Entry>>,
}

#[derive(Debug)]
struct Entry {
    watch: Watch,
    /// A recall for a broken watch is under way.
    recalling: bool,
}

impl Entry {
    /// Whether this watch also protects another delegation of `kind` (another
    /// client's read delegation: the same lease serves both).
    fn serves(&self, kind: WatchKind) -> Result<(), WatchRefused> {
        if self.recalling || self.watch.kind() != kind || self.watch.broken() {
            return Err(WatchRefused::Contention);
        }
        Ok(())
    }
}

impl FileWatches {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FileId, Entry>> {
        // Entries hold no invariant a panic could break half-way.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Files watched now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no file is watched.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Watch `key` of `export` (the state core's `file`) for a delegation of `kind`
    /// just granted. Called without the core's lock: taking a kernel lease is a
    /// syscall, made with no lock held (ADR 0029). Two grants of one file may race
    /// here; the first watch recorded serves both, and a watch taken for a delegation
    /// that ended meanwhile is let go at once (checked under the core's lock, which
    /// [`FileWatches::unwatch_released`] takes first too).
    pub(crate) fn watch(
        &self,
        core: &dyn CoreAccess,
        cx: &OpCtx,
        export: &Export,
        key: &FileKey,
        file: FileId,
        kind: DelegType,
    ) -> Result<(), WatchRefused> {
        let kind = match kind {
            DelegType::Read => WatchKind::Read,
            DelegType::Write => WatchKind::Write,
            DelegType::Directory => return Ok(()),
        };
        if let Some(shared) = self.lock().get(&file).map(|e| e.serves(kind)) {
            return shared;
        }
        let watch = match export.backend.watch_file(cx, key, kind) {
            Ok(Some(watch)) => watch,
            // Nothing but the server reaches this backend's files.
            Ok(None) => return Ok(()),
            Err(BackendError::Conflict) => return Err(WatchRefused::Contention),
            Err(e) => return Err(WatchRefused::Backend(e)),
        };
        let (unused, result) = {
            let core = core.lock_core("watching a delegated file");
            let mut map = self.lock();
            if let Some(e) = map.get(&file) {
                // Another grant of the file watched it first.
                (Some(watch), e.serves(kind))
            } else if !core.delegations().is_delegated(file) {
                // The delegation ended (withdrawn) before its watch was recorded.
                (Some(watch), Ok(()))
            } else {
                let recalling = false;
                map.insert(file, Entry { watch, recalling });
                (None, Ok(()))
            }
        };
        // Releasing a lease is a syscall: after the locks.
        drop(unused);
        result
    }

    /// Drop the watches of `released` (every watched file with `None`, the tick's
    /// sweep) that have no delegation left. Called when delegations went away, before
    /// the requests held for them are woken: those may open the file.
    pub fn unwatch_released(&self, core: &dyn CoreAccess, released: Option<&[FileId]>) {
        if self.is_empty() {
            return;
        }
        let dropped: Vec<Entry> = {
            let core = core.lock_core("releasing watches");
            let mut map = self.lock();
            take_undelegated(&mut map, core.delegations(), released)
        };
        // Releasing a lease is a syscall: after the locks.
        drop(dropped);
    }

    /// Watches an outside access broke (looked for on SIGIO and on every tick), marked
    /// as being recalled: the server recalls each file's delegations
    /// ([`FileWatches::recall_for_outside`]) on a blocking-pool thread.
    pub fn take_broken(&self) -> Vec<FileId> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut map = self.lock();
        map.iter_mut()
            .filter(|(_, e)| !e.recalling && e.watch.broken())
            .map(|(f, e)| {
                e.recalling = true;
                *f
            })
            .collect()
    }

    /// Recall every delegation of `file` for an outside access waiting on its broken
    /// watch, wait for their return (see the module documentation for the bound),
    /// revoke the rest, and drop the watch.
    pub fn recall_for_outside(&self, recall: Recall<'_>, file: FileId, mode: WaitMode) {
        tracing::info!(
            file = format_args!("{file:#x}"),
            "a process outside the server wants a delegated file: recalling"
        );
        let wait = outside_recall_wait(recall.cfg.recall_wait());
        let now = recall.clock.now();
        let ids = match recall.core.core() {
            Ok(mut core) => {
                core.delegation_conflicts(now, None, file, Access::Modify, recall.unreachable())
            }
            Err(_) => Vec::new(),
        };
        if mode == WaitMode::Never {
            // The recalls went out; the watch goes with the last delegation.
            return;
        }
        if !ids.is_empty() {
            let start = Instant::now();
            if recall
                .wait_for_return(&ids, mode, start, start + wait)
                .is_err()
            {
                tracing::info!(
                    file = format_args!("{file:#x}"),
                    "delegation revoked: not returned before the outside access"
                );
            }
        }
        // Normally gone already with the last delegation.
        let entry = {
            let _core = recall.core.lock_core("dropping a watch");
            self.lock().remove(&file)
        };
        drop(entry);
    }
}

/// How long a recall for an outside access may take: `recall_wait`, but at least a
/// second less than the kernel lets the outside opener wait.
fn outside_recall_wait(wait: Duration) -> Duration {
    match txnfs_backend::local::lease_break_time() {
        Some(kernel) => wait.min(kernel.saturating_sub(Duration::from_secs(1))),
        None => wait,
    }
}

/// Why a delegation could not be protected.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchRefused {
    /// The file is open elsewhere in a way that conflicts, or a break of its watch is
    /// under way.
    #[error("the file is in use outside the server")]
    Contention,
    /// The backend cannot watch it (no SIGIO handler, no lease permission, an error).
    #[error("the file cannot be watched: {0}")]
    Backend(BackendError),
}

/// Take out of `watched` the watches of `released` (every watched file with `None`, the
/// tick's sweep) whose file has no delegation left in `delegs`: the file and the
/// directory watches let go the same way.
pub(crate) fn take_undelegated<W>(
    watched: &mut HashMap<FileId, W>,
    delegs: &txnfs_state::deleg::DelegTable,
    released: Option<&[FileId]>,
) -> Vec<W> {
    let gone: Vec<FileId> = match released {
        Some(files) => files
            .iter()
            .filter(|f| watched.contains_key(f) && !delegs.is_delegated(**f))
            .copied()
            .collect(),
        None => watched
            .keys()
            .filter(|f| !delegs.is_delegated(**f))
            .copied()
            .collect(),
    };
    gone.iter().filter_map(|f| watched.remove(f)).collect()
}
