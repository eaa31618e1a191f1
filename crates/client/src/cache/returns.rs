//! Returning delegations: DELEGRETURN (after a flush), packed many per COMPOUND and
//! serialised by one async lock; CB_RECALL and CB_RECALL_ANY; delegations the server
//! revoked (found with TEST_STATEID) and their FREE_STATEID.

use super::{path_key, BackgroundReturn, DelegCache, FileDeleg, State, EARLY_RECALLS};
use crate::compound::Compound;
use crate::{Client, ClientError};
use bytes::Bytes;
use txnfs_proto::nfs4::*;

impl DelegCache {
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
            g.remove(fh);
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

    /// Return a delegation we never recorded (recalled before its grant was seen, or
    /// granted again while the one before was being returned).
    pub(super) fn spawn_return_stateid(&self, fh: Bytes, sid: stateid4) {
        let Some(c) = self.client() else { return };
        let running = BackgroundReturn::start(c.cache().clone());
        tokio::spawn(async move {
            let _running = running;
            let cache = c.cache().clone();
            cache.delegreturn(&c, &fh, sid).await;
        });
    }

    fn spawn_return(&self, fh: Bytes, dir: bool) {
        let Some(c) = self.client() else { return };
        let running = BackgroundReturn::start(c.cache().clone());
        tokio::spawn(async move {
            let _running = running;
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
                if let Some(f) = g.remove(fh) {
                    if f.dirty {
                        tracing::warn!(path = ?f.path, "buffered writes lost with a revoked delegation");
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

    /// Return every delegation (Client::close), and wait for the returns running in
    /// the background (recalls being answered, grants that came after their recall).
    pub(crate) async fn return_all(&self) {
        let fhs: Vec<Bytes> = {
            let g = self.lock();
            g.files.keys().chain(g.dirs.keys()).cloned().collect()
        };
        self.return_many(&fhs, true).await;
        loop {
            let done = self.returns_done.notified();
            tokio::pin!(done);
            // Registered before the count is read: a return ending in between wakes us.
            done.as_mut().enable();
            if self
                .background_returns
                .load(std::sync::atomic::Ordering::Acquire)
                == 0
            {
                return;
            }
            done.await;
        }
    }

    /// CB_RECALL: return the delegation. One this cache does not hold under that
    /// stateid (its grant is still on its way, or waits in a reply this client has not
    /// processed yet) is returned at once by the recall's stateid and handle, and its
    /// grant is ignored when it arrives. Waiting for the grant instead could wait
    /// forever: the reply carrying it may be held by the server for a delegation of
    /// ours that another client's recall is waiting for, or be processed only when
    /// a request the server holds for another client's delegation completes, while
    /// that client waits the same way for us.
    pub(super) fn cb_recall(&self, stateid: &stateid4, fh: &Bytes, _truncate: bool) -> nfsstat4 {
        let mut g = self.lock();
        g.stats.recalls += 1;
        let held = |sid: &stateid4| sid.other == stateid.other;
        let file = g.files.get(fh).is_some_and(|f| held(&f.stateid));
        let dir = g.dirs.get(fh).is_some_and(|d| held(&d.stateid));
        if !file && !dir {
            if g.early_recalls.len() >= EARLY_RECALLS {
                g.early_recalls.pop_front();
            }
            g.early_recalls.push_back(stateid.other);
            drop(g);
            self.spawn_return_stateid(fh.clone(), stateid.clone());
            return nfsstat4::NFS4_OK;
        }
        drop(g);
        self.spawn_return(fh.clone(), dir && !file);
        nfsstat4::NFS4_OK
    }

    /// CB_RECALL_ANY: return all but `keep` of the delegations of the types in `mask`,
    /// least recently used first.
    pub(super) fn cb_recall_any(&self, keep: u32, mask: &[u32]) -> nfsstat4 {
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
            let running = BackgroundReturn::start(c.cache().clone());
            tokio::spawn(async move {
                let _running = running;
                let cache = c.cache().clone();
                cache.return_many(&fhs, true).await;
            });
        }
        nfsstat4::NFS4_OK
    }
}

impl State {
    /// Drop the file or directory delegation of `fh` and what was cached under it
    /// (its bytes, the path leading to it); the file delegation dropped, if any.
    fn remove(&mut self, fh: &Bytes) -> Option<FileDeleg> {
        let file = self.files.remove(fh);
        if let Some(f) = &file {
            if let Some(d) = &f.data {
                self.bytes -= d.len();
            }
            if let Some(p) = &f.path {
                if self.paths.get(p) == Some(fh) {
                    self.paths.remove(p);
                }
            }
        }
        if let Some(d) = self.dirs.remove(fh) {
            self.bytes -= d.bytes;
            if self.dir_paths.get(&d.path) == Some(fh) {
                self.dir_paths.remove(&d.path);
            }
        }
        file
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
