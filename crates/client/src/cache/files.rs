//! File delegations (read and write, from OPEN): the cached content and attributes they
//! cover, whole-file writes buffered under a write delegation, their flush, and the
//! answer to CB_GETATTR.

use super::{path_key, set_data, DelegCache, FileDeleg};
use crate::attrs::{self, Attributes};
use crate::compound::Compound;
use crate::{Client, ClientError};
use bytes::{Bytes, BytesMut};
use txnfs_proto::nfs4::*;

/// OPENs in a row without a grant after which the server is taken not to grant (reads
/// then go without the extra GETFH/GETATTR and ask for no delegation; any grant seen
/// later turns them back on).
const MISSES_BEFORE_LEAN: u32 = 16;

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

impl DelegCache {
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
                // Recalled before its grant arrived, and already returned (`cb_recall`).
                g.early_recalls.remove(i);
                tracing::debug!(path, "delegation recalled before its grant arrived");
                return;
            }
        }
        let tick = g.touch();
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
                    // The delegation before is on its way back: a new one (another
                    // stateid) is not recorded, and must go back too, or it would be
                    // held unknown until its recall timed out.
                    if let Some((_, sid)) = grant.filter(|(_, s)| s.other != f.stateid.other) {
                        drop(g);
                        self.spawn_return_stateid(fh.clone(), sid);
                    }
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
        let mut g = self.lock_enabled()?;
        let fh = g.paths.get(&path_key(path))?.clone();
        let tick = g.touch();
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
        let key = path_key(path);
        let mut g = self.lock_enabled()?;
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

    /// A write delegation of `path` that a whole-file write can go under, with no OPEN:
    /// (file handle, delegation stateid, the size the server has). None while the file
    /// is being returned, has buffered data, or its attributes are not known.
    pub(crate) fn write_delegation(&self, path: &str) -> Option<(Bytes, stateid4, Option<u64>)> {
        let g = self.lock_enabled()?;
        let fh = g.paths.get(&path_key(path))?;
        let f = g.files.get(fh)?;
        (f.write && !f.returning && !f.dirty && f.attrs.is_some())
            .then(|| (fh.clone(), f.stateid.clone(), f.server_size))
    }

    /// A whole-file write of `fh` under its write delegation reached the server: keep
    /// its content (clean) and the attributes the server reported after it.
    pub(crate) fn wrote_under_delegation(
        &self,
        fh: &Bytes,
        data: Bytes,
        attrs: Option<Attributes>,
    ) {
        let mut guard = self.lock();
        let g = &mut *guard;
        let Some(f) = g.files.get_mut(fh).filter(|f| !f.returning) else {
            return;
        };
        f.server_size = Some(data.len() as u64);
        // A file with several names may change through another: cache no content.
        let several_names = attrs
            .as_ref()
            .is_some_and(|a| a.nlink.is_some_and(|n| n > 1));
        if let Some(a) = attrs {
            f.attrs = Some(a);
        }
        // The old content is stale whether or not the new one fits.
        g.bytes -= f.data.take().map_or(0, |d| d.len());
        g.stats.delegated_writes += 1;
        if !several_names {
            set_data(g, self.budget, fh, data, false);
        }
    }

    /// The file handle of a delegated file known as `path`.
    pub(crate) fn fh_of(&self, path: &str) -> Option<Bytes> {
        let g = self.lock();
        let fh = g.paths.get(&path_key(path))?;
        g.files.contains_key(fh).then(|| fh.clone())
    }

    /// Files with buffered data.
    pub(super) fn dirty_files(&self) -> Vec<Bytes> {
        self.lock()
            .files
            .iter()
            .filter(|(_, f)| f.dirty)
            .map(|(fh, _)| fh.clone())
            .collect()
    }

    /// Flush a file's buffered data (with its delegation stateid): SETATTR of the size
    /// when the server's copy is longer, WRITEs, COMMIT.
    pub(super) async fn flush_locked(&self, c: &Client, fh: &Bytes) -> Result<(), ClientError> {
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

    /// CB_GETATTR of a file under a write delegation: its buffered size and a change
    /// attribute moved on by every local write.
    pub(super) fn cb_getattr(&self, fh: &Bytes, request: &[u32]) -> Result<fattr4, nfsstat4> {
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
