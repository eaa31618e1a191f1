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

use crate::attrs::{self, Attributes};
use crate::callback::CallbackOps;
use crate::compound::Compound;
use crate::{Client, ClientError};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, OnceLock, Weak};
use txnfs_proto::nfs4::*;
use txnfs_xdr::Decode;

/// Default byte budget of cached data and listings.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;
/// Recalls of delegations we did not know yet (the CB_RECALL overtook the OPEN reply),
/// remembered so the grant is returned at once when its reply arrives.
const EARLY_RECALLS: usize = 256;
/// OPENs in a row without a grant after which the server is taken not to grant (reads
/// then go without the extra GETFH/GETATTR and ask for no delegation; any grant seen
/// later turns them back on).
const MISSES_BEFORE_LEAN: u32 = 16;

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
}

/// A delegation granted by OPEN: (write?, stateid).
pub(crate) fn granted(d: &open_delegation4) -> Option<(bool, stateid4)> {
    match d {
        open_delegation4::OPEN_DELEGATE_READ(r)
        | open_delegation4::OPEN_DELEGATE_READ_ATTRS_DELEG(r) => Some((false, r.stateid.clone())),
        open_delegation4::OPEN_DELEGATE_WRITE(w)
        | open_delegation4::OPEN_DELEGATE_WRITE_ATTRS_DELEG(w) => Some((true, w.stateid.clone())),
        _ => None,
    }
}

fn path_key(path: &str) -> String {
    crate::vector::components(path)
        .map(|c| c.join("/"))
        .unwrap_or_else(|_| path.to_string())
}

/// The bits a listing entry must carry to be served from the cache.
pub(crate) fn needed_entry_bits() -> Vec<u32> {
    let mut b = attrs::stat_fh_bitmap();
    b[0] &= !(1 << attrs::RDATTR_ERROR);
    b
}

pub(crate) fn covers(have: &[u32], need: &[u32]) -> bool {
    need.iter()
        .enumerate()
        .all(|(i, n)| n & !have.get(i).copied().unwrap_or(0) == 0)
}

/// Fields of `new` that are set replace those of `old`.
fn merge_attrs(old: &mut Attributes, new: Attributes) {
    macro_rules! take {
        ($($f:ident),*) => { $( if new.$f.is_some() { old.$f = new.$f; } )* };
    }
    take!(
        kind,
        change,
        size,
        fsid,
        lease_time,
        rdattr_error,
        fh,
        fileid,
        mode,
        nlink,
        owner,
        group,
        rdev,
        space_used,
        atime,
        ctime,
        mtime
    );
}

fn entry_bytes(name: &str, a: &Attributes) -> usize {
    128 + name.len() + a.fh.as_ref().map_or(0, |f| f.len())
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
        }
    }

    pub(crate) fn attach(&self, inner: Weak<crate::client::Inner>) {
        let _ = self.client.set(inner);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
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

    // ---- files ------------------------------------------------------------------

    /// Record what an OPEN reply granted for `fh` (known as `path`), with the attributes
    /// and, when the whole file was read or written in the same COMPOUND, its content.
    /// A grant already recalled is returned at once.
    pub(crate) fn open_reply(
        &self,
        path: &str,
        fh: &Bytes,
        deleg: &open_delegation4,
        attrs: Option<Attributes>,
        data: Option<Bytes>,
    ) {
        if !self.enabled {
            return;
        }
        // A file with several names can change through a name the cache does not know
        // (by this client: no recall): hold its delegation, cache nothing of it.
        let (attrs, data) = match &attrs {
            Some(a) if a.nlink.is_some_and(|n| n > 1) => (None, None),
            _ => (attrs, data),
        };
        let key = path_key(path);
        let mut g = self.lock();
        let grant = granted(deleg);
        use std::sync::atomic::Ordering::Relaxed;
        if grant.is_some() {
            self.misses.store(0, Relaxed);
        } else if !g.files.contains_key(fh) {
            let _ = self
                .misses
                .fetch_update(Relaxed, Relaxed, |m| Some(m.saturating_add(1)));
        }
        if let Some((_, sid)) = &grant {
            if let Some(i) = g.early_recalls.iter().position(|o| *o == sid.other) {
                g.early_recalls.remove(i);
                drop(g);
                tracing::debug!(path, "delegation recalled before its grant arrived");
                self.spawn_return_stateid(fh.clone(), sid.clone());
                return;
            }
        }
        g.tick += 1;
        let tick = g.tick;
        let existing = g.files.contains_key(fh);
        match (grant, existing) {
            (None, false) => return,
            (Some((write, stateid)), false) => {
                if write {
                    g.stats.write_delegations += 1;
                } else {
                    g.stats.read_delegations += 1;
                }
                let server_size = attrs.as_ref().and_then(|a| a.size);
                g.files.insert(
                    fh.clone(),
                    FileDeleg {
                        stateid,
                        write,
                        path: Some(key.clone()),
                        attrs,
                        data: None,
                        dirty: false,
                        server_size,
                        local_changes: 0,
                        returning: false,
                        last_use: tick,
                    },
                );
            }
            (grant, true) => {
                let Some(f) = g.files.get_mut(fh) else { return };
                if f.returning {
                    return;
                }
                if let Some((write, stateid)) = grant {
                    f.write |= write;
                    f.stateid = stateid;
                }
                if let Some(a) = attrs {
                    f.server_size = a.size;
                    f.attrs = Some(a);
                }
                f.path = Some(key.clone());
                f.last_use = tick;
            }
        }
        if let Some(old) = g.paths.insert(key, fh.clone()) {
            if old != *fh {
                // The name now leads to another file: the old one is no longer reachable
                // by this path.
                if let Some(f) = g.files.get_mut(&old) {
                    f.path = None;
                }
            }
        }
        if let Some(d) = data {
            set_data(&mut g, self.budget, fh, d, false);
        }
    }

    /// Whether the server has granted delegations lately (see [`MISSES_BEFORE_LEAN`]).
    pub(crate) fn expect_grants(&self) -> bool {
        self.enabled && self.misses.load(std::sync::atomic::Ordering::Relaxed) < MISSES_BEFORE_LEAN
    }

    /// The cached content of `path`, if a delegation covers it.
    pub(crate) fn read(&self, path: &str) -> Option<Bytes> {
        if !self.enabled {
            return None;
        }
        let mut g = self.lock();
        let fh = g.paths.get(&path_key(path))?.clone();
        g.tick += 1;
        let tick = g.tick;
        // Not while returning: once the server has the DELEGRETURN, another client may
        // change the file before our entry is gone.
        let f = g.files.get_mut(&fh).filter(|f| !f.returning)?;
        let d = f.data.clone()?;
        f.last_use = tick;
        g.stats.read_hits += 1;
        Some(d)
    }

    /// Store the whole content read under a delegation (after several READs).
    pub(crate) fn store_read(&self, path: &str, data: Bytes) {
        if !self.enabled {
            return;
        }
        let mut g = self.lock();
        let Some(fh) = g.paths.get(&path_key(path)).cloned() else {
            return;
        };
        if g.files.get(&fh).is_some_and(|f| !f.returning && !f.dirty) {
            set_data(&mut g, self.budget, &fh, data, false);
        }
    }

    /// Cached attributes of `path`: from its file delegation (size and change moved on
    /// by buffered writes) or from its parent's delegated listing; `Err(NOENT)` when the
    /// delegated listing has no such name.
    pub(crate) fn cached_attrs(&self, path: &str) -> Option<Result<Attributes, ClientError>> {
        if !self.enabled {
            return None;
        }
        let key = path_key(path);
        let mut g = self.lock();
        if let Some(fh) = g.paths.get(&key).cloned() {
            if let Some(f) = g.files.get(&fh).filter(|f| !f.returning) {
                if let Some(mut a) = f.attrs.clone() {
                    if let Some(d) = &f.data {
                        a.size = Some(d.len() as u64);
                    }
                    a.change = a.change.map(|c| c.wrapping_add(f.local_changes));
                    g.stats.attr_hits += 1;
                    return Some(Ok(a));
                }
            }
        }
        let (parent, name) = crate::vector::split_parent(&key).ok()?;
        let dfh = g.dir_paths.get(&parent)?.clone();
        let d = g.dirs.get(&dfh).filter(|d| !d.returning)?;
        let entries = d.entries.as_ref()?;
        let r = match entries.get(&name) {
            Some(a) => Ok(a.clone()),
            None => Err(ClientError::nfs("LOOKUP", 0, nfsstat4::NFS4ERR_NOENT)),
        };
        g.stats.attr_hits += 1;
        Some(r)
    }

    /// Keep a whole-file write of `path` here instead of sending it, when a write
    /// delegation covers the file and the data fits the budget. False: write it through.
    pub(crate) fn buffer_write(&self, path: &str, data: &Bytes) -> bool {
        if !self.enabled {
            return false;
        }
        let key = path_key(path);
        let mut g = self.lock();
        let Some(fh) = g.paths.get(&key).cloned() else {
            return false;
        };
        match g.files.get(&fh) {
            Some(f) if f.write && !f.returning && f.attrs.is_some() => {}
            _ => return false,
        }
        if !set_data(&mut g, self.budget, &fh, data.clone(), true) {
            return false;
        }
        g.stats.buffered_writes += 1;
        drop(g);
        self.invalidate_parent_listing(&key);
        true
    }

    /// The file handle of a delegated file known as `path`.
    pub(crate) fn fh_of(&self, path: &str) -> Option<Bytes> {
        let g = self.lock();
        let fh = g.paths.get(&path_key(path))?;
        g.files.contains_key(fh).then(|| fh.clone())
    }

    /// Files with buffered data.
    fn dirty_files(&self) -> Vec<Bytes> {
        self.lock()
            .files
            .iter()
            .filter(|(_, f)| f.dirty)
            .map(|(fh, _)| fh.clone())
            .collect()
    }

    // ---- directories --------------------------------------------------------------

    /// Record a directory delegation granted for `path` with its complete listing; the
    /// listing is kept only when no notification for it arrived before (`entries` would
    /// miss that change) and it fits the budget.
    pub(crate) fn dir_granted(
        &self,
        path: &str,
        fh: &Bytes,
        stateid: stateid4,
        listable: bool,
        entries: Option<BTreeMap<String, Attributes>>,
    ) {
        if !self.enabled {
            return;
        }
        let key = path_key(path);
        let mut g = self.lock();
        if let Some(i) = g.early_recalls.iter().position(|o| *o == stateid.other) {
            g.early_recalls.remove(i);
            drop(g);
            self.spawn_return_stateid(fh.clone(), stateid);
            return;
        }
        let mut entries = entries.filter(|_| listable);
        if let Some(i) = g.early_notified.iter().position(|f| f == fh) {
            g.early_notified.remove(i);
            entries = None;
        }
        g.tick += 1;
        let tick = g.tick;
        let bytes = entries
            .as_ref()
            .map_or(0, |e| e.iter().map(|(n, a)| entry_bytes(n, a)).sum());
        if bytes > 0 {
            evict(&mut g, self.budget, bytes);
            if g.bytes + bytes > self.budget {
                entries = None;
            }
        }
        let bytes = if entries.is_some() { bytes } else { 0 };
        if let Some(old) = g.dirs.remove(fh) {
            g.bytes -= old.bytes;
        } else {
            g.stats.dir_delegations += 1;
        }
        g.bytes += bytes;
        g.dirs.insert(
            fh.clone(),
            DirDeleg {
                stateid,
                path: key.clone(),
                entries,
                bytes,
                returning: false,
                last_use: tick,
                generation: 0,
                listable,
            },
        );
        g.dir_paths.insert(key, fh.clone());
    }

    /// The notification generation of the delegated directory `path` (None when it is
    /// not delegated): pass it to [`store_listing`](Self::store_listing).
    pub(crate) fn dir_generation(&self, path: &str) -> Option<u64> {
        if !self.enabled {
            return None;
        }
        let g = self.lock();
        let fh = g.dir_paths.get(&path_key(path))?;
        g.dirs
            .get(fh)
            .filter(|d| !d.returning && d.listable)
            .map(|d| d.generation)
    }

    /// Keep a complete listing of a delegated directory read while no notification
    /// arrived (`generation` as before the READDIR was sent).
    pub(crate) fn store_listing(
        &self,
        path: &str,
        generation: u64,
        entries: BTreeMap<String, Attributes>,
    ) {
        let mut g = self.lock();
        let Some(fh) = g.dir_paths.get(&path_key(path)).cloned() else {
            return;
        };
        let bytes: usize = entries.iter().map(|(n, a)| entry_bytes(n, a)).sum();
        match g.dirs.get(&fh) {
            Some(d) if d.generation == generation && !d.returning && d.entries.is_none() => {}
            _ => return,
        }
        evict(&mut g, self.budget, bytes);
        if g.bytes + bytes > self.budget {
            return;
        }
        g.tick += 1;
        let tick = g.tick;
        if let Some(d) = g.dirs.get_mut(&fh) {
            d.entries = Some(entries);
            d.bytes = bytes;
            d.last_use = tick;
        }
        g.bytes += bytes;
    }

    /// Whether `path` is a delegated directory.
    pub(crate) fn dir_delegated(&self, path: &str) -> bool {
        let g = self.lock();
        g.dir_paths
            .get(&path_key(path))
            .is_some_and(|fh| g.dirs.contains_key(fh))
    }

    /// The cached listing of the delegated directory `path`: (name, attributes).
    pub(crate) fn listing(&self, path: &str) -> Option<Vec<(String, Attributes)>> {
        if !self.enabled {
            return None;
        }
        let mut g = self.lock();
        let fh = g.dir_paths.get(&path_key(path))?.clone();
        g.tick += 1;
        let tick = g.tick;
        let d = g.dirs.get_mut(&fh).filter(|d| !d.returning)?;
        let e = d.entries.as_ref()?;
        let out = e.iter().map(|(n, a)| (n.clone(), a.clone())).collect();
        d.last_use = tick;
        g.stats.list_hits += 1;
        Some(out)
    }

    /// Our own change in the directory holding `path`: its cached listing is no longer
    /// exact (the server does not notify a client of its own changes); the delegation
    /// stays, the next listing reads it again.
    pub(crate) fn invalidate_parent_listing(&self, path: &str) {
        if let Ok((parent, _)) = crate::vector::split_parent(&path_key(path)) {
            self.drop_listing(&parent);
        }
    }

    /// Drop the cached listing of directory `path` (keeping its delegation).
    pub(crate) fn drop_listing(&self, path: &str) {
        let mut g = self.lock();
        let Some(fh) = g.dir_paths.get(&path_key(path)).cloned() else {
            return;
        };
        let mut freed = 0;
        if let Some(d) = g.dirs.get_mut(&fh) {
            d.entries = None;
            freed = std::mem::take(&mut d.bytes);
        }
        g.bytes -= freed;
    }

    /// Forget everything cached under `path` (a removed, renamed or replaced name): the
    /// file and directory delegations reached through it are returned, their buffered
    /// data flushed first when `flush`.
    pub(crate) async fn forget_paths(&self, paths: &[&str], flush: bool) {
        let mut fhs = Vec::new();
        {
            let g = self.lock();
            if g.files.is_empty() && g.dirs.is_empty() {
                return;
            }
            for path in paths {
                let key = path_key(path);
                let prefix = format!("{key}/");
                let under = |p: &String| p == &key || p.starts_with(&prefix);
                fhs.extend(
                    g.paths
                        .iter()
                        .filter(|(p, _)| under(p))
                        .map(|(_, f)| f.clone()),
                );
                fhs.extend(
                    g.dir_paths
                        .iter()
                        .filter(|(p, _)| under(p))
                        .map(|(_, f)| f.clone()),
                );
            }
        }
        if !fhs.is_empty() {
            self.return_many(&fhs, flush).await;
        }
        for path in paths {
            self.invalidate_parent_listing(path);
        }
    }

    // ---- returning ----------------------------------------------------------------

    /// Flush a file's buffered data (with its delegation stateid): SETATTR of the size
    /// when the server's copy is longer, WRITEs, COMMIT.
    async fn flush_locked(&self, c: &Client, fh: &Bytes) -> Result<(), ClientError> {
        let (sid, data, server_size) = {
            let g = self.lock();
            match g.files.get(fh) {
                Some(f) if f.dirty => match &f.data {
                    Some(d) => (f.stateid.clone(), d.clone(), f.server_size),
                    None => return Ok(()),
                },
                _ => return Ok(()),
            }
        };
        let chunk = (c.limits().max_request as usize)
            .saturating_sub(4096)
            .clamp(4096, 1 << 20);
        let mut off = 0usize;
        let mut first = true;
        loop {
            let mut q = Compound::new();
            q.putfh(fh);
            if first && server_size.is_some_and(|s| s > data.len() as u64) {
                q.setattr(
                    sid.clone(),
                    &crate::SetAttributes {
                        size: Some(data.len() as u64),
                        ..Default::default()
                    },
                );
            }
            let end = (off + chunk).min(data.len());
            if end > off {
                q.write(sid.clone(), off as u64, data.slice(off..end), false);
            }
            let last = end >= data.len();
            if last {
                q.commit();
            }
            let r = c.compound(&q).await?;
            if let Some((i, st)) = r.failed() {
                return Err(ClientError::nfs("flush", i, st));
            }
            first = false;
            off = end;
            if last {
                break;
            }
        }
        let mut g = self.lock();
        g.stats.flushes += 1;
        if let Some(f) = g.files.get_mut(fh) {
            if f.data.as_ref() == Some(&data) {
                f.dirty = false;
            }
            f.server_size = Some(data.len() as u64);
        }
        Ok(())
    }

    /// Flush every file's buffered data, keeping the delegations.
    pub(crate) async fn flush_all(&self) -> Result<(), ClientError> {
        let Some(c) = self.client() else {
            return Ok(());
        };
        let _g = self.returns.lock().await;
        let mut first_err = None;
        for fh in self.dirty_files() {
            if let Err(e) = self.flush_locked(&c, &fh).await {
                tracing::warn!("flush of buffered writes failed: {e}");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Flush and return the delegation of file `fh` (idempotent).
    pub(crate) async fn return_file(&self, fh: &Bytes) {
        self.return_many(std::slice::from_ref(fh), true).await;
    }

    /// Return the delegation of directory `fh` (idempotent).
    pub(crate) async fn return_dir(&self, fh: &Bytes) {
        self.return_many(std::slice::from_ref(fh), false).await;
    }

    /// Return the delegations of the files and directories `fhs` (idempotent): buffered
    /// data first when `flush` (else it is dropped: the file is being removed or
    /// replaced), then DELEGRETURNs, packed many per COMPOUND.
    pub(crate) async fn return_many(&self, fhs: &[Bytes], flush: bool) {
        let Some(c) = self.client() else { return };
        let _g = self.returns.lock().await;
        let mut todo: Vec<(Bytes, stateid4)> = Vec::new();
        {
            let mut g = self.lock();
            for fh in fhs {
                if let Some(f) = g.files.get_mut(fh) {
                    f.returning = true;
                    todo.push((fh.clone(), f.stateid.clone()));
                } else if let Some(d) = g.dirs.get_mut(fh) {
                    d.returning = true;
                    todo.push((fh.clone(), d.stateid.clone()));
                }
            }
        }
        if todo.is_empty() {
            return;
        }
        if flush {
            for (fh, _) in &todo {
                if let Err(e) = self.flush_locked(&c, fh).await {
                    // The data cannot reach the server (the delegation may be revoked):
                    // log it, the caller's earlier write already returned success.
                    tracing::warn!("flush before DELEGRETURN failed: {e}");
                }
            }
        }
        let items = todo
            .iter()
            .map(|(fh, sid)| crate::vector::Item {
                ops: vec![
                    nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
                    nfs_argop4::OP_DELEGRETURN(DELEGRETURN4args {
                        deleg_stateid: sid.clone(),
                    }),
                ],
                reply_estimate: 32,
                optional_from: None,
            })
            .collect();
        let mut revoked = Vec::new();
        for (r, (_, sid)) in crate::Fs::new(c.clone())
            .run(items)
            .await
            .into_iter()
            .zip(&todo)
        {
            if let Err(e) = r {
                tracing::debug!("DELEGRETURN: {e}");
                if e.status() == Some(nfsstat4::NFS4ERR_DELEG_REVOKED) {
                    revoked.push(sid.clone());
                }
            }
        }
        free_stateids(&c, &revoked).await;
        let mut g = self.lock();
        g.stats.returns += (todo.len() - revoked.len()) as u64;
        g.stats.revoked += revoked.len() as u64;
        for (fh, _) in &todo {
            if let Some(f) = g.files.remove(fh) {
                if let Some(d) = &f.data {
                    g.bytes -= d.len();
                }
                if let Some(p) = f.path {
                    if g.paths.get(&p) == Some(fh) {
                        g.paths.remove(&p);
                    }
                }
            }
            if let Some(d) = g.dirs.remove(fh) {
                g.bytes -= d.bytes;
                if g.dir_paths.get(&d.path) == Some(fh) {
                    g.dir_paths.remove(&d.path);
                }
            }
        }
    }

    async fn delegreturn(&self, c: &Client, fh: &Bytes, sid: stateid4) {
        let mut q = Compound::new();
        q.putfh(fh);
        q.op(nfs_argop4::OP_DELEGRETURN(DELEGRETURN4args {
            deleg_stateid: sid,
        }));
        match c.compound(&q).await {
            Ok(r) => {
                if let Some((_, st)) = r.failed() {
                    tracing::debug!(?st, "DELEGRETURN refused");
                }
            }
            Err(e) => tracing::warn!("DELEGRETURN failed: {e}"),
        }
        self.lock().stats.returns += 1;
    }

    /// Return a delegation we never recorded (its grant came after its recall).
    fn spawn_return_stateid(&self, fh: Bytes, sid: stateid4) {
        let Some(c) = self.client() else { return };
        tokio::spawn(async move {
            let cache = c.cache().clone();
            cache.delegreturn(&c, &fh, sid).await;
        });
    }

    fn spawn_return(&self, fh: Bytes, dir: bool) {
        let Some(c) = self.client() else { return };
        tokio::spawn(async move {
            let cache = c.cache().clone();
            if dir {
                cache.return_dir(&fh).await;
            } else {
                cache.return_file(&fh).await;
            }
        });
    }

    /// SEQUENCE said some recallable state was revoked: find which delegations with
    /// TEST_STATEID, drop them and what was cached under them (buffered data is lost:
    /// the server no longer takes it under that stateid), and FREE_STATEID them. One
    /// check at a time.
    pub(crate) fn spawn_revocation_check(&self) {
        use std::sync::atomic::Ordering::{AcqRel, Release};
        let Some(c) = self.client() else { return };
        if self.checking.swap(true, AcqRel) {
            return;
        }
        tokio::spawn(async move {
            let cache = c.cache().clone();
            if let Err(e) = cache.check_revoked(&c).await {
                tracing::info!("checking for revoked delegations failed: {e}");
            }
            cache.checking.store(false, Release);
        });
    }

    async fn check_revoked(&self, c: &Client) -> Result<(), ClientError> {
        // Delegations being returned are left to the return (it frees them).
        let held: Vec<(Bytes, stateid4)> = {
            let g = self.lock();
            g.files
                .iter()
                .filter(|(_, f)| !f.returning)
                .map(|(fh, f)| (fh.clone(), f.stateid.clone()))
                .chain(
                    g.dirs
                        .iter()
                        .filter(|(_, d)| !d.returning)
                        .map(|(fh, d)| (fh.clone(), d.stateid.clone())),
                )
                .collect()
        };
        if held.is_empty() {
            return Ok(());
        }
        let mut gone = Vec::new();
        for chunk in held.chunks(512) {
            let mut q = Compound::new();
            let i = q.op(nfs_argop4::OP_TEST_STATEID(TEST_STATEID4args {
                ts_stateids: chunk.iter().map(|(_, s)| s.clone()).collect(),
            }));
            let r = c.compound(&q).await?;
            let codes = match r.results.get(i) {
                Some(nfs_resop4::OP_TEST_STATEID(TEST_STATEID4res::NFS4_OK(ok))) => {
                    ok.tsr_status_codes.clone()
                }
                _ => return Err(ClientError::nfs("TEST_STATEID", i, r.status)),
            };
            for ((fh, sid), st) in chunk.iter().zip(codes) {
                if st != nfsstat4::NFS4_OK {
                    gone.push((fh.clone(), sid.clone(), st));
                }
            }
        }
        let mut to_free = Vec::new();
        {
            let mut g = self.lock();
            for (fh, sid, st) in &gone {
                // Still ours to drop (not returned meanwhile)?
                let ours = g
                    .files
                    .get(fh)
                    .is_some_and(|f| !f.returning && f.stateid == *sid)
                    || g.dirs
                        .get(fh)
                        .is_some_and(|d| !d.returning && d.stateid == *sid);
                if !ours {
                    continue;
                }
                tracing::warn!(
                    ?st,
                    "delegation revoked by the server; its cache is dropped"
                );
                g.stats.revoked += 1;
                if let Some(f) = g.files.remove(fh) {
                    if f.dirty {
                        tracing::warn!(path = ?f.path, "buffered writes lost with a revoked delegation");
                    }
                    if let Some(d) = &f.data {
                        g.bytes -= d.len();
                    }
                    if let Some(p) = f.path {
                        if g.paths.get(&p) == Some(fh) {
                            g.paths.remove(&p);
                        }
                    }
                }
                if let Some(d) = g.dirs.remove(fh) {
                    g.bytes -= d.bytes;
                    if g.dir_paths.get(&d.path) == Some(fh) {
                        g.dir_paths.remove(&d.path);
                    }
                }
                if *st == nfsstat4::NFS4ERR_DELEG_REVOKED {
                    to_free.push(sid.clone());
                }
            }
        }
        free_stateids(c, &to_free).await;
        Ok(())
    }

    /// Return every delegation (Client::close).
    pub(crate) async fn return_all(&self) {
        let fhs: Vec<Bytes> = {
            let g = self.lock();
            g.files.keys().chain(g.dirs.keys()).cloned().collect()
        };
        self.return_many(&fhs, true).await;
    }
}

/// FREE_STATEID of revoked delegation stateids (the server keeps them until then, and
/// keeps saying so in SEQUENCE's flags).
async fn free_stateids(c: &Client, sids: &[stateid4]) {
    if sids.is_empty() {
        return;
    }
    let items = sids
        .iter()
        .map(|sid| crate::vector::Item {
            ops: vec![nfs_argop4::OP_FREE_STATEID(FREE_STATEID4args {
                fsa_stateid: sid.clone(),
            })],
            reply_estimate: 16,
            optional_from: None,
        })
        .collect();
    for r in crate::Fs::new(c.clone()).run(items).await {
        if let Err(e) = r {
            tracing::debug!("FREE_STATEID: {e}");
        }
    }
}

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
    g.tick += 1;
    let tick = g.tick;
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

/// CB_GETATTR's answer: the requested change (3) and size (4) attributes.
fn encode_change_size(request: &[u32], change: u64, size: u64) -> fattr4 {
    let word = request.first().copied().unwrap_or(0);
    let mask = word & ((1 << attrs::CHANGE) | (1 << attrs::SIZE));
    let mut vals = BytesMut::new();
    if mask & (1 << attrs::CHANGE) != 0 {
        txnfs_xdr::put_u64(&mut vals, change);
    }
    if mask & (1 << attrs::SIZE) != 0 {
        txnfs_xdr::put_u64(&mut vals, size);
    }
    fattr4 {
        attrmask: if mask == 0 { vec![] } else { vec![mask] },
        attr_vals: vals.freeze(),
    }
}

/// One change of a CB_NOTIFY, decoded.
enum Change {
    Add(notify_add4),
    Remove(notify_remove4),
    Rename(notify_rename4),
    ChildAttrs(notify_attr4),
    Ignore,
}

fn decode_changes(n: &notify4) -> Option<Vec<Change>> {
    let mut vals = n.notify_vals.clone();
    let mut out = Vec::new();
    for (w, word) in n.notify_mask.iter().enumerate() {
        for bit in 0..32 {
            if word & (1 << bit) == 0 {
                continue;
            }
            let c = match w as u32 * 32 + bit {
                0 => Change::ChildAttrs(notify_attr4::decode(&mut vals).ok()?),
                1 => {
                    notify_attr4::decode(&mut vals).ok()?;
                    Change::Ignore
                }
                2 => Change::Remove(notify_remove4::decode(&mut vals).ok()?),
                3 => Change::Add(notify_add4::decode(&mut vals).ok()?),
                4 => Change::Rename(notify_rename4::decode(&mut vals).ok()?),
                5 => {
                    notify_verifier4::decode(&mut vals).ok()?;
                    Change::Ignore
                }
                _ => return None,
            };
            out.push(c);
        }
    }
    Some(out)
}

fn name_of(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A new entry's attributes, when they are all a listing needs.
fn full_entry(e: &notify_entry4) -> Option<Attributes> {
    if !covers(&e.ne_attrs.attrmask, &needed_entry_bits()) {
        return None;
    }
    attrs::decode(&e.ne_attrs).ok()
}

fn apply_add(entries: &mut BTreeMap<String, Attributes>, a: &notify_add4) -> bool {
    if let Some(old) = a.nad_old_entry.first() {
        entries.remove(&name_of(&old.nrm_old_entry.ne_file));
    }
    match full_entry(&a.nad_new_entry) {
        Some(attrs) => {
            entries.insert(name_of(&a.nad_new_entry.ne_file), attrs);
            true
        }
        None => false,
    }
}

/// Apply one decoded change; false when it cannot be applied exactly.
fn apply(entries: &mut BTreeMap<String, Attributes>, c: &Change) -> bool {
    match c {
        Change::Add(a) => apply_add(entries, a),
        Change::Remove(r) => {
            entries.remove(&name_of(&r.nrm_old_entry.ne_file));
            true
        }
        Change::Rename(r) => {
            entries.remove(&name_of(&r.nrn_old_entry.nrm_old_entry.ne_file));
            apply_add(entries, &r.nrn_new_entry)
        }
        Change::ChildAttrs(a) => {
            let name = name_of(&a.na_changed_entry.ne_file);
            match (
                entries.get_mut(&name),
                attrs::decode(&a.na_changed_entry.ne_attrs),
            ) {
                (Some(old), Ok(new)) => {
                    merge_attrs(old, new);
                    true
                }
                (None, _) => true, // an entry we do not list (yet): nothing to change
                (_, Err(_)) => false,
            }
        }
        Change::Ignore => true,
    }
}

impl CallbackOps for DelegCache {
    fn recall(&self, stateid: &stateid4, fh: &Bytes, _truncate: bool) -> nfsstat4 {
        let mut g = self.lock();
        g.stats.recalls += 1;
        let file = g.files.contains_key(fh);
        let dir = g.dirs.contains_key(fh);
        if !file && !dir {
            // Not granted yet as far as we know: the OPEN (or GET_DIR_DELEGATION) reply
            // is still on its way; return it as soon as it arrives.
            if g.early_recalls.len() >= EARLY_RECALLS {
                g.early_recalls.pop_front();
            }
            g.early_recalls.push_back(stateid.other);
            return nfsstat4::NFS4_OK;
        }
        drop(g);
        self.spawn_return(fh.clone(), dir && !file);
        nfsstat4::NFS4_OK
    }

    fn getattr(&self, fh: &Bytes, request: &[u32]) -> Result<fattr4, nfsstat4> {
        let mut g = self.lock();
        let f = g.files.get(fh).ok_or(nfsstat4::NFS4ERR_BADHANDLE)?;
        if !f.write {
            return Err(nfsstat4::NFS4ERR_BADHANDLE);
        }
        // Nothing is buffered without attributes; without them we know neither value,
        // and the server's own are right (it recalls or uses them).
        let base = f
            .attrs
            .as_ref()
            .and_then(|a| a.change)
            .ok_or(nfsstat4::NFS4ERR_BADHANDLE)?;
        let size = match &f.data {
            Some(d) => d.len() as u64,
            None => f.server_size.ok_or(nfsstat4::NFS4ERR_BADHANDLE)?,
        };
        let change = base.wrapping_add(f.local_changes);
        g.stats.getattr_answered += 1;
        Ok(encode_change_size(request, change, size))
    }

    fn notify(&self, stateid: &stateid4, fh: &Bytes, changes: &[notify4]) -> nfsstat4 {
        let mut g = self.lock();
        let State {
            dirs,
            stats,
            early_notified,
            bytes,
            ..
        } = &mut *g;
        let Some(d) = dirs.get_mut(fh) else {
            if early_notified.len() >= EARLY_RECALLS {
                early_notified.pop_front();
            }
            early_notified.push_back(fh.clone());
            return nfsstat4::NFS4_OK;
        };
        if d.stateid.other != stateid.other {
            return nfsstat4::NFS4ERR_BAD_STATEID;
        }
        d.generation += 1;
        let Some(entries) = d.entries.as_mut() else {
            return nfsstat4::NFS4_OK;
        };
        let ok = changes
            .iter()
            .map(decode_changes)
            .collect::<Option<Vec<_>>>()
            .is_some_and(|all| all.iter().flatten().all(|c| apply(entries, c)));
        if ok {
            stats.notify_applied += 1;
            let new: usize = entries.iter().map(|(n, a)| entry_bytes(n, a)).sum();
            *bytes = *bytes - d.bytes + new;
            d.bytes = new;
        } else {
            stats.notify_dropped += 1;
            d.entries = None;
            *bytes -= std::mem::take(&mut d.bytes);
        }
        nfsstat4::NFS4_OK
    }

    fn recall_any(&self, keep: u32, mask: &[u32]) -> nfsstat4 {
        let bit = |b: u32| mask.first().is_some_and(|w| w & (1 << b) != 0);
        let g = self.lock();
        let mut held: Vec<(u64, Bytes, bool)> = g
            .files
            .iter()
            .filter(|(_, f)| {
                !f.returning
                    && ((f.write && bit(RCA4_TYPE_MASK_WDATA_DLG))
                        || (!f.write && bit(RCA4_TYPE_MASK_RDATA_DLG)))
            })
            .map(|(fh, f)| (f.last_use, fh.clone(), false))
            .collect();
        if bit(RCA4_TYPE_MASK_DIR_DLG) {
            held.extend(
                g.dirs
                    .iter()
                    .filter(|(_, d)| !d.returning)
                    .map(|(fh, d)| (d.last_use, fh.clone(), true)),
            );
        }
        drop(g);
        held.sort_by_key(|(t, ..)| *t);
        let n = held.len().saturating_sub(keep as usize);
        let fhs: Vec<Bytes> = held.into_iter().take(n).map(|(_, fh, _)| fh).collect();
        if let (Some(c), false) = (self.client(), fhs.is_empty()) {
            tokio::spawn(async move {
                let cache = c.cache().clone();
                cache.return_many(&fhs, true).await;
            });
        }
        nfsstat4::NFS4_OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use txnfs_xdr::Encode;

    fn sid(n: u8) -> stateid4 {
        stateid4 {
            seqid: 1,
            other: [n; 12],
        }
    }

    fn read_deleg(n: u8) -> open_delegation4 {
        open_delegation4::OPEN_DELEGATE_READ(open_read_delegation4 {
            stateid: sid(n),
            recall: false,
            permissions: Default::default(),
        })
    }

    fn write_deleg(n: u8) -> open_delegation4 {
        open_delegation4::OPEN_DELEGATE_WRITE(open_write_delegation4 {
            stateid: sid(n),
            recall: false,
            space_limit: nfs_space_limit4::NFS_LIMIT_SIZE(0),
            permissions: Default::default(),
        })
    }

    fn attrs(size: u64, change: u64) -> Attributes {
        Attributes {
            kind: Some(crate::FileKind::Regular),
            size: Some(size),
            change: Some(change),
            ..Default::default()
        }
    }

    #[test]
    fn read_delegation_serves_data_and_attributes_within_the_budget() {
        let c = DelegCache::new(true, 400);
        let fh = Bytes::from_static(b"fh1");
        c.open_reply(
            "d/a",
            &fh,
            &read_deleg(1),
            Some(attrs(3, 9)),
            Some(Bytes::from_static(b"abc")),
        );
        assert_eq!(c.read("d/./a"), Some(Bytes::from_static(b"abc")));
        assert_eq!(
            c.cached_attrs("d/a").map(|r| r.ok()),
            Some(Some(attrs(3, 9)))
        );
        // No delegation: nothing cached, whatever the reply carried.
        c.open_reply(
            "d/b",
            &Bytes::from_static(b"fh2"),
            &open_delegation4::OPEN_DELEGATE_NONE,
            Some(attrs(1, 1)),
            Some(Bytes::from_static(b"x")),
        );
        assert_eq!(c.read("d/b"), None);
        // A read delegation does not take writes.
        assert!(!c.buffer_write("d/a", &Bytes::from_static(b"new")));
        // LRU within the budget: 100 bytes per file at most (budget / 4).
        for i in 0..8u8 {
            let fh = Bytes::from(vec![b'f', i]);
            c.open_reply(
                &format!("e/{i}"),
                &fh,
                &read_deleg(10 + i),
                Some(attrs(90, 1)),
                Some(Bytes::from(vec![i; 90])),
            );
        }
        assert!(c.lock().bytes <= 400);
        assert_eq!(c.read("e/7"), Some(Bytes::from(vec![7; 90])));
        assert_eq!(c.read("e/0"), None, "least recently used data evicted");
        assert_eq!(c.held().0, 9, "delegations are kept when data is evicted");
    }

    #[test]
    fn write_delegation_buffers_and_answers_cb_getattr() {
        let c = DelegCache::new(true, 1 << 20);
        let fh = Bytes::from_static(b"w");
        c.open_reply("f", &fh, &write_deleg(2), Some(attrs(5, 100)), None);
        assert!(c.buffer_write("f", &Bytes::from_static(b"0123456789")));
        assert_eq!(c.read("f"), Some(Bytes::from_static(b"0123456789")));
        let a = c.cached_attrs("f").and_then(|r| r.ok()).expect("attrs");
        assert_eq!((a.size, a.change), (Some(10), Some(101)));
        let f = c
            .getattr(&fh, &attrs::bitmap(&[attrs::CHANGE, attrs::SIZE]))
            .expect("answer");
        let back = attrs::decode(&f).expect("decodes");
        assert_eq!((back.size, back.change), (Some(10), Some(101)));
        assert_eq!(c.dirty_files(), vec![fh.clone()]);
        // Unknown handle, or a read delegation: BADHANDLE.
        assert_eq!(
            c.getattr(&Bytes::from_static(b"zz"), &[1 << 4]),
            Err(nfsstat4::NFS4ERR_BADHANDLE)
        );
    }

    #[test]
    fn a_recall_that_overtakes_its_grant_is_remembered() {
        let c = DelegCache::new(true, 1 << 20);
        let fh = Bytes::from_static(b"r");
        assert_eq!(c.recall(&sid(3), &fh, false), nfsstat4::NFS4_OK);
        // No runtime client attached: the grant is dropped, not cached.
        c.open_reply("r", &fh, &read_deleg(3), Some(attrs(1, 1)), None);
        assert_eq!(c.held(), (0, 0));
        assert!(c.lock().early_recalls.is_empty());
    }

    fn entry(name: &str, fh: &str, size: u64) -> notify_entry4 {
        let mut vals = BytesMut::new();
        // Every bit of needed_entry_bits, in bit order.
        txnfs_xdr::put_u32(&mut vals, 1); // type
        txnfs_xdr::put_u64(&mut vals, 7); // change
        txnfs_xdr::put_u64(&mut vals, size); // size
        txnfs_xdr::put_u64(&mut vals, 1); // fsid
        txnfs_xdr::put_u64(&mut vals, 1);
        txnfs_xdr::put_opaque(&mut vals, fh.as_bytes()); // filehandle
        txnfs_xdr::put_u64(&mut vals, 42); // fileid
        txnfs_xdr::put_u32(&mut vals, 0o644); // mode
        txnfs_xdr::put_u32(&mut vals, 1); // numlinks
        txnfs_xdr::put_opaque(&mut vals, b"0"); // owner
        txnfs_xdr::put_opaque(&mut vals, b"0"); // group
        txnfs_xdr::put_u32(&mut vals, 0); // rawdev
        txnfs_xdr::put_u32(&mut vals, 0);
        txnfs_xdr::put_u64(&mut vals, 0); // space used
        for _ in 0..3 {
            txnfs_xdr::put_i64(&mut vals, 1); // times
            txnfs_xdr::put_u32(&mut vals, 0);
        }
        notify_entry4 {
            ne_file: Bytes::copy_from_slice(name.as_bytes()),
            ne_attrs: fattr4 {
                attrmask: needed_entry_bits(),
                attr_vals: vals.freeze(),
            },
        }
    }

    fn notify(kind: u32, vals: Bytes) -> notify4 {
        notify4 {
            notify_mask: attrs::bitmap(&[kind]),
            notify_vals: vals,
        }
    }

    #[test]
    fn notifications_keep_a_listing_current_or_drop_it() {
        let c = DelegCache::new(true, 1 << 20);
        let dfh = Bytes::from_static(b"dir");
        let mut listing = BTreeMap::new();
        listing.insert(
            "old".to_string(),
            attrs::decode(&entry("old", "h-old", 1).ne_attrs).expect("attrs"),
        );
        c.dir_granted("d", &dfh, sid(5), true, Some(listing));
        assert_eq!(c.listing("d").map(|l| l.len()), Some(1));
        let add = notify_add4 {
            nad_old_entry: vec![],
            nad_new_entry: entry("new", "h-new", 3),
            nad_new_entry_cookie: vec![],
            nad_prev_entry: vec![],
            nad_last_entry: false,
        };
        let rename = notify_rename4 {
            nrn_old_entry: notify_remove4 {
                nrm_old_entry: notify_entry4 {
                    ne_file: Bytes::from_static(b"old"),
                    ne_attrs: fattr4::default(),
                },
                nrm_old_entry_cookie: 0,
            },
            nrn_new_entry: notify_add4 {
                nad_new_entry: entry("moved", "h-old", 1),
                ..add.clone()
            },
        };
        let st = c.notify(
            &sid(5),
            &dfh,
            &[
                notify(notify_type4::NOTIFY4_ADD_ENTRY as u32, add.to_bytes()),
                notify(notify_type4::NOTIFY4_RENAME_ENTRY as u32, rename.to_bytes()),
            ],
        );
        assert_eq!(st, nfsstat4::NFS4_OK);
        let names: Vec<String> = c
            .listing("d")
            .expect("kept")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, vec!["moved", "new"]);
        // Lookups: a listed name, and a name the delegated listing does not have.
        assert_eq!(
            c.cached_attrs("d/new")
                .and_then(|r| r.ok())
                .and_then(|a| a.size),
            Some(3)
        );
        assert_eq!(
            c.cached_attrs("d/nope")
                .and_then(|r| r.err())
                .and_then(|e| e.status()),
            Some(nfsstat4::NFS4ERR_NOENT)
        );
        // A removal, then an addition without the attributes a listing needs: dropped.
        let rm = notify_remove4 {
            nrm_old_entry: entry("new", "h-new", 3),
            nrm_old_entry_cookie: 0,
        };
        let thin = notify_add4 {
            nad_new_entry: notify_entry4 {
                ne_file: Bytes::from_static(b"thin"),
                ne_attrs: fattr4::default(),
            },
            ..add
        };
        c.notify(
            &sid(5),
            &dfh,
            &[
                notify(notify_type4::NOTIFY4_REMOVE_ENTRY as u32, rm.to_bytes()),
                notify(notify_type4::NOTIFY4_ADD_ENTRY as u32, thin.to_bytes()),
            ],
        );
        assert_eq!(c.listing("d"), None);
        assert_eq!(c.stats().notify_dropped, 1);
        assert_eq!(c.lock().bytes, 0);
        // Another stateid is refused.
        assert_eq!(c.notify(&sid(6), &dfh, &[]), nfsstat4::NFS4ERR_BAD_STATEID);
        // A notification before the grant: the listing that follows is not trusted.
        let d2 = Bytes::from_static(b"dir2");
        c.notify(&sid(7), &d2, &[]);
        c.dir_granted("e", &d2, sid(7), true, Some(BTreeMap::new()));
        assert_eq!(c.listing("e"), None);
        assert!(c.dir_delegated("e"));
    }
}
