//! The delegation cache (ADR 0018): what the server delegated to this client and what
//! the client may therefore answer without asking.
//!
//! - A **read delegation** (from OPEN) lets the file's data and attributes be served from
//!   here: the server recalls it before another client may change the file.
//! - A **write delegation** also lets writes be buffered here (whole-file contents, as
//!   the vectorized API writes them) and flushed later: on [`Fs::vflush`](crate::Fs),
//!   `Client::close`, recall, or CB_RECALL_ANY. CB_GETATTR is answered from the buffered
//!   size and a change attribute moved on by every local write.
//! - A **directory delegation** (GET_DIR_DELEGATION) lets the directory's listing, and
//!   lookups of names in it, be served from here; CB_NOTIFY keeps it current, and a
//!   notification that cannot be applied drops the listing (never the correctness).
//!
//! Delegations outlive CLOSE. Cached bytes (file data and listings) share one budget,
//! evicting the least recently used clean data first; buffered (dirty) data is never
//! evicted, a write that does not fit is written through instead.
//!
//! Returning a delegation (flush, then DELEGRETURN) is serialised by one async lock, so a
//! flush never races a write-through of the same file.

mod dirs;
mod files;
mod returns;
#[cfg(test)]
mod tests;

pub(crate) use dirs::{covers, needed_entry_bits};
pub(crate) use files::granted;

use crate::attrs::Attributes;
use crate::callback::CallbackOps;
use crate::Client;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use txnfs_proto::nfs4::*;

/// Default byte budget of cached data and listings.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;
/// Recalls of delegations we did not know yet (the CB_RECALL overtook the OPEN reply),
/// remembered so the grant is returned at once when its reply arrives.
const EARLY_RECALLS: usize = 256;

/// What the cache did (for tests and benchmarks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub read_delegations: u64,
    pub write_delegations: u64,
    pub dir_delegations: u64,
    /// Reads answered from the cache.
    pub read_hits: u64,
    /// GETATTRs answered from the cache (file delegations and delegated listings).
    pub attr_hits: u64,
    /// Listings answered from the cache.
    pub list_hits: u64,
    /// Whole-file writes kept in the cache instead of being sent.
    pub buffered_writes: u64,
    /// Flushes of buffered data to the server.
    pub flushes: u64,
    /// Whole-file writes sent under a write delegation (no OPEN or CLOSE).
    pub delegated_writes: u64,
    /// Delegations the server revoked (found by TEST_STATEID or refused DELEGRETURN),
    /// dropped with what was cached under them.
    pub revoked: u64,
    /// Recalls received (CB_RECALL) and delegations returned (DELEGRETURN sent).
    pub recalls: u64,
    pub returns: u64,
    /// CB_NOTIFY changes applied to a listing, and listings dropped because one could
    /// not be applied.
    pub notify_applied: u64,
    pub notify_dropped: u64,
    pub getattr_answered: u64,
}

#[derive(Debug, Clone)]
struct FileDeleg {
    stateid: stateid4,
    write: bool,
    path: Option<String>,
    /// Attributes as the server last reported them.
    attrs: Option<Attributes>,
    /// The whole content, when known.
    data: Option<Bytes>,
    /// `data` is newer than the server's copy.
    dirty: bool,
    /// The size the server has (for the truncation a flush may need).
    server_size: Option<u64>,
    /// Local modifications not yet flushed (moves the change attribute on).
    local_changes: u64,
    returning: bool,
    last_use: u64,
}

#[derive(Debug, Clone)]
struct DirDeleg {
    stateid: stateid4,
    path: String,
    /// name -> attributes (with the file handle), when the whole listing is known.
    entries: Option<BTreeMap<String, Attributes>>,
    bytes: usize,
    returning: bool,
    last_use: u64,
    /// Moved on by every CB_NOTIFY (a listing read meanwhile may miss a change).
    generation: u64,
    /// The server notifies every change a listing shows (adds, removes, renames, child
    /// attributes with all the attributes a listing carries): only then is a listing
    /// kept.
    listable: bool,
}

#[derive(Default)]
struct State {
    files: HashMap<Bytes, FileDeleg>,
    paths: HashMap<String, Bytes>,
    dirs: HashMap<Bytes, DirDeleg>,
    dir_paths: HashMap<String, Bytes>,
    early_recalls: VecDeque<[u8; 12]>,
    /// Directories notified before their delegation was registered.
    early_notified: VecDeque<Bytes>,
    bytes: usize,
    tick: u64,
    stats: CacheStats,
}

/// The delegation cache of one client (all `Fs` of a client share it).
pub(crate) struct DelegCache {
    pub(crate) enabled: bool,
    budget: usize,
    st: Mutex<State>,
    client: OnceLock<Weak<crate::client::Inner>>,
    returns: tokio::sync::Mutex<()>,
    /// OPEN replies in a row that granted nothing.
    misses: std::sync::atomic::AtomicU32,
    /// A check for revoked delegations is running.
    checking: std::sync::atomic::AtomicBool,
    /// Returns running in their own tasks (after a CB_RECALL, CB_RECALL_ANY, or a
    /// grant that arrived after its recall): [`DelegCache::return_all`] waits for them,
    /// so a closing client does not leave with a DELEGRETURN still unsent.
    background_returns: std::sync::atomic::AtomicUsize,
    returns_done: tokio::sync::Notify,
}

/// Counts one background return while it lives.
pub(super) struct BackgroundReturn(Arc<DelegCache>);

impl BackgroundReturn {
    pub(super) fn start(cache: Arc<DelegCache>) -> Self {
        cache
            .background_returns
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        BackgroundReturn(cache)
    }
}

impl Drop for BackgroundReturn {
    fn drop(&mut self) {
        self.0
            .background_returns
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.0.returns_done.notify_waiters();
    }
}

fn path_key(path: &str) -> String {
    crate::vector::components(path)
        .map(|c| c.join("/"))
        .unwrap_or_else(|_| path.to_string())
}

impl DelegCache {
    pub(crate) fn new(enabled: bool, budget: usize) -> Self {
        DelegCache {
            enabled,
            budget,
            st: Mutex::new(State::default()),
            client: OnceLock::new(),
            returns: tokio::sync::Mutex::new(()),
            misses: Default::default(),
            checking: Default::default(),
            background_returns: Default::default(),
            returns_done: tokio::sync::Notify::new(),
        }
    }

    pub(crate) fn attach(&self, inner: Weak<crate::client::Inner>) {
        let _ = self.client.set(inner);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, when the cache is enabled.
    fn lock_enabled(&self) -> Option<std::sync::MutexGuard<'_, State>> {
        self.enabled.then(|| self.lock())
    }

    fn client(&self) -> Option<Client> {
        self.client
            .get()
            .and_then(Weak::upgrade)
            .map(|inner| Client { inner })
    }

    pub(crate) fn stats(&self) -> CacheStats {
        self.lock().stats.clone()
    }

    /// How many delegations (files, directories) are held.
    pub(crate) fn held(&self) -> (usize, usize) {
        let g = self.lock();
        (g.files.len(), g.dirs.len())
    }
}

impl State {
    /// The next use's time stamp (for least-recently-used eviction).
    fn touch(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

// ---- the byte budget ----------------------------------------------------------------

/// Set the content of a delegated file within the budget (evicting clean data of other
/// files, least recently used first). False when it does not fit.
fn set_data(g: &mut State, budget: usize, fh: &Bytes, data: Bytes, dirty: bool) -> bool {
    let old = g
        .files
        .get(fh)
        .and_then(|f| f.data.as_ref())
        .map_or(0, |d| d.len());
    if data.len() > budget / 4 {
        return false;
    }
    g.bytes -= old;
    if let Some(f) = g.files.get_mut(fh) {
        f.data = None;
    }
    evict(g, budget, data.len());
    if g.bytes + data.len() > budget {
        return false;
    }
    let tick = g.touch();
    let Some(f) = g.files.get_mut(fh) else {
        return false;
    };
    let len = data.len();
    f.data = Some(data);
    f.last_use = tick;
    if dirty {
        f.dirty = true;
        f.local_changes += 1;
    }
    g.bytes += len;
    true
}

/// Free clean cached bytes, least recently used first, until `need` more fit.
fn evict(g: &mut State, budget: usize, need: usize) {
    if g.bytes + need <= budget {
        return;
    }
    enum K {
        File(Bytes),
        Dir(Bytes),
    }
    let mut victims: Vec<(u64, K)> = g
        .files
        .iter()
        .filter(|(_, f)| f.data.is_some() && !f.dirty)
        .map(|(fh, f)| (f.last_use, K::File(fh.clone())))
        .chain(
            g.dirs
                .iter()
                .filter(|(_, d)| d.entries.is_some())
                .map(|(fh, d)| (d.last_use, K::Dir(fh.clone()))),
        )
        .collect();
    victims.sort_by_key(|(t, _)| *t);
    for (_, k) in victims {
        if g.bytes + need <= budget {
            break;
        }
        let freed = match k {
            K::File(fh) => g
                .files
                .get_mut(&fh)
                .and_then(|f| f.data.take())
                .map_or(0, |d| d.len()),
            K::Dir(fh) => g.dirs.get_mut(&fh).map_or(0, |d| {
                d.entries = None;
                std::mem::take(&mut d.bytes)
            }),
        };
        g.bytes -= freed;
    }
}

/// The callbacks are answered by the parts of the cache they concern.
impl CallbackOps for DelegCache {
    fn recall(&self, stateid: &stateid4, fh: &Bytes, truncate: bool) -> nfsstat4 {
        self.cb_recall(stateid, fh, truncate)
    }

    fn getattr(&self, fh: &Bytes, request: &[u32]) -> Result<fattr4, nfsstat4> {
        self.cb_getattr(fh, request)
    }

    fn notify(&self, stateid: &stateid4, fh: &Bytes, changes: &[notify4]) -> nfsstat4 {
        self.cb_notify(stateid, fh, changes)
    }

    fn recall_any(&self, keep: u32, mask: &[u32]) -> nfsstat4 {
        self.cb_recall_any(keep, mask)
    }
}
