//! What a transaction records before each change (undo entries, backups) and how it
//! ends: commit (sync, durable record) or rollback.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::journal::{Journal, Record};
use super::locks::Owner;
use super::undo::{Backups, Saved, Undo, INLINE_MAX};
use super::{io, layer_cx, Txn, TxnLayer};
use crate::{Backend, BackendError, CreateMode, FileKey, OpCtx, Result, SetAttrs};

impl TxnLayer {
    /// Records `u` for the transaction of `owner` (journal first), before its change.
    pub(super) fn record(&self, owner: Owner, u: Undo, overwrites: bool) -> Result<()> {
        let (txid, first) = self
            .with_txn(owner, |t| {
                let first = t.txid == 0;
                if first {
                    t.txid = self.next_txid.fetch_add(1, Ordering::Relaxed);
                }
                (t.txid, first)
            })
            .ok_or(BackendError::Inval)?;
        if first {
            let begin = Record::Begin { compound: owner.id };
            self.journal.append(txid, &begin, true).map_err(io)?;
        }
        let end = self
            .journal
            .append(txid, &Record::Undo(u.clone()), false)
            .map_err(io)?;
        if overwrites && self.settings.sync_undo {
            self.journal.sync_to(end).map_err(io)?;
        }
        self.with_txn(owner, |t| t.undo.push(u));
        self.faults.hit("after-journal");
        Ok(())
    }

    pub(super) fn backup_name(&self, owner: Owner) -> Bytes {
        self.with_txn(owner, |t| {
            t.next_backup += 1;
            // The txid may not be assigned yet: name backups by the COMPOUND and count,
            // unique within the backup directory for this run (it is purged at start).
            Bytes::from(format!("{}.{}", t.owner.id, t.next_backup))
        })
        .unwrap_or_default()
    }

    /// Saves `[offset, offset+len)` of `key` (as far as it exists) before a change
    /// overwrites or cuts it, and records the undo entry. Skips files the transaction
    /// created and ranges it saved already.
    pub(super) fn save_range(
        &self,
        owner: Owner,
        key: &FileKey,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let covered = self
            .with_txn(owner, |t| {
                t.dirty.insert(key.clone());
                t.created.contains(key)
                    || t.saved
                        .get(key)
                        .is_some_and(|r| r.iter().any(|&(a, b)| a <= offset && offset + len <= b))
            })
            .unwrap_or(true);
        if covered {
            return Ok(());
        }
        // The layer's own reads and writes: what it saves is no op's business.
        let cx = layer_cx();
        let attrs = self.lower.getattr(&cx, key)?;
        let keep = attrs.size.saturating_sub(offset).min(len);
        if keep <= INLINE_MAX {
            // Small: the old bytes go into the journal entry (read in one call; a short
            // read is a file that ends sooner, and only what exists is put back).
            let data = if keep > 0 {
                self.lower.read(&cx, key, offset, keep as u32)?.0
            } else {
                Bytes::new()
            };
            self.record(
                owner,
                Undo::Data {
                    key: key.clone(),
                    offset,
                    saved: Saved::Inline(data),
                    old_size: attrs.size,
                    atime: attrs.atime,
                    mtime: attrs.mtime,
                },
                keep > 0,
            )?;
            self.note_saved(owner, key, offset, len);
            return Ok(());
        }
        // Large: cloned into a backup file (a reflink where the file system has them).
        let backup = self.backup_name(owner);
        let dir = self.backups()?;
        let mode = SetAttrs {
            mode: Some(0o600),
            ..SetAttrs::default()
        };
        let bk = self
            .lower
            .create_file(&cx, &dir, &backup, CreateMode::Guarded, &mode)?
            .key;
        self.lower.clone_range(&cx, key, offset, &bk, 0, keep)?;
        self.stats.backups.fetch_add(1, Ordering::Relaxed);
        self.record(
            owner,
            Undo::Data {
                key: key.clone(),
                offset,
                saved: Saved::Backup {
                    name: backup,
                    len: keep,
                },
                old_size: attrs.size,
                atime: attrs.atime,
                mtime: attrs.mtime,
            },
            true,
        )?;
        self.note_saved(owner, key, offset, len);
        Ok(())
    }

    /// Once saved, the original bytes of the range and the original size are
    /// restorable, whatever later changes do (undo runs backwards).
    fn note_saved(&self, owner: Owner, key: &FileKey, offset: u64, len: u64) {
        self.with_txn(owner, |t| {
            t.saved
                .entry(key.clone())
                .or_default()
                .push((offset, offset.saturating_add(len)));
        });
    }

    /// Before `key` (now `old` bytes long) is set to `size`: a cut saves the tail, a
    /// growth records the old size.
    pub(super) fn save_for_size(
        &self,
        owner: Owner,
        key: &FileKey,
        size: u64,
        old: u64,
    ) -> Result<()> {
        let from = size.min(old);
        self.save_range(owner, key, from, old.saturating_sub(from).max(1))
    }

    /// Moves (`dir`, `name`) into the backups instead of deleting it, recording how to
    /// move it back.
    pub(super) fn move_to_backup(
        &self,
        owner: Owner,
        cx: &OpCtx,
        dir: &FileKey,
        name: &[u8],
    ) -> Result<crate::DirChange> {
        let backup = self.backup_name(owner);
        self.record(
            owner,
            Undo::Restore {
                dir: dir.clone(),
                name: Bytes::copy_from_slice(name),
                backup: backup.clone(),
            },
            false,
        )?;
        let ch = self
            .lower
            .rename(cx, dir, name, &self.backups()?, &backup)?;
        self.mark_dirty(owner, dir);
        Ok(ch.from)
    }

    /// Before a call that makes the name (`dir`, `name`): the undo that removes it. The
    /// name must not exist yet (under the entry's lock it cannot appear meanwhile), or
    /// the undo would remove what was there before.
    pub(super) fn record_new_name(
        &self,
        owner: Owner,
        cx: &OpCtx,
        dir: &FileKey,
        name: &[u8],
    ) -> Result<()> {
        match self.lower.lookup(cx, dir, name) {
            Ok(_) => return Err(BackendError::Exists),
            Err(BackendError::NotFound) => {}
            // Not knowing is not "absent": an undo recorded now could remove what is
            // there (found by the simulation with a failed lookup).
            Err(e) => return Err(e),
        }
        self.record(
            owner,
            Undo::Unlink {
                dir: dir.clone(),
                name: Bytes::copy_from_slice(name),
            },
            false,
        )
    }

    pub(super) fn mark_dirty(&self, owner: Owner, key: &FileKey) {
        self.with_txn(owner, |t| {
            t.dirty.insert(key.clone());
        });
    }

    pub(super) fn mutated(&self, owner: Owner) {
        if owner.is_txn() {
            self.faults.hit("between-ops");
        }
    }

    /// An object's type and whether it is an empty directory (REMOVE, RENAME checks).
    pub(super) fn is_nonempty_dir(&self, cx: &OpCtx, key: &FileKey) -> Result<bool> {
        let (entries, _) = self.lower.readdir(cx, key, 0, 1)?;
        Ok(!entries.is_empty())
    }

    /// Ends transaction `t`: commit (sync, durable commit record) or roll back.
    pub(super) fn finish(&self, mut t: Txn, ok: bool) -> Result<()> {
        self.retry_stuck();
        let cx = layer_cx();
        let asked = ok;
        let mut ok = ok;
        let mut failure = None;
        if t.txid != 0 && ok {
            // Durable before the reply: the data and names first, then the record.
            for k in &t.dirty {
                if let Err(e) = self.lower.commit(&cx, k) {
                    if !matches!(e, BackendError::NotFound | BackendError::Stale) {
                        tracing::error!("txn {}: sync failed ({e}); rolling back", t.txid);
                        ok = false;
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if t.txid != 0 && ok {
            self.faults.hit("before-commit");
        }
        if t.txid != 0 && !ok {
            if let Err(e) = self.roll_back(&mut t) {
                // Half undone: the transaction keeps its locks (nobody may see this
                // state) and its journal records (a restart finishes the rollback);
                // every later transaction's end tries again from the failed step.
                tracing::error!(
                    "txn {}: rollback stopped at a failing step ({e}); retried later",
                    t.txid
                );
                self.stuck.lock().unwrap_or_else(|p| p.into_inner()).push(t);
                self.stats.aborted.fetch_add(1, Ordering::Relaxed);
                return if asked { Err(e) } else { Ok(()) };
            }
        }
        if let Err(e) = self.close(t, ok) {
            failure = Some(e);
        }
        match failure {
            // A commit that could not be made durable was rolled back (or its outcome
            // is left to recovery): the COMPOUND must not be reported as done.
            Some(e) if asked => Err(e),
            _ => Ok(()),
        }
    }

    /// Applies `t`'s undo entries backwards from where its rollback stands, noting each
    /// one; stops at a step that still fails after a few tries.
    fn roll_back(&self, t: &mut Txn) -> Result<()> {
        let cx = layer_cx();
        let dir = self.backup_dir_or_root();
        let backups = Backups {
            lower: &*self.lower,
            dir: &dir,
        };
        while t.undone < t.undo.len() {
            let u = &t.undo[t.undo.len() - 1 - t.undone];
            apply_retrying(u, &cx, &backups)?;
            mark_undone(
                &self.journal,
                &*self.lower,
                &cx,
                t.txid,
                u,
                self.settings.sync_undo,
            )?;
            t.undone += 1;
            self.faults.hit("during-undo");
        }
        for u in &t.undo {
            let _ = self.lower.commit(&cx, u.touches());
        }
        Ok(())
    }

    /// Carries on the rollbacks that stopped at a failing step.
    pub(super) fn retry_stuck(&self) {
        let stuck: Vec<Txn> = {
            let mut s = self.stuck.lock().unwrap_or_else(|p| p.into_inner());
            if s.is_empty() {
                return;
            }
            std::mem::take(&mut *s)
        };
        for mut t in stuck {
            match self.roll_back(&mut t) {
                Ok(()) => {
                    if let Err(e) = self.close(t, false) {
                        tracing::error!("txn: journal: {e}");
                    }
                }
                Err(_) => self.stuck.lock().unwrap_or_else(|p| p.into_inner()).push(t),
            }
        }
    }

    /// The backup directory, or (before the first backup, when no entry looks in it)
    /// the root.
    fn backup_dir_or_root(&self) -> FileKey {
        self.backup_dir
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| self.root.clone())
    }

    /// Ends `t` (committed, or rolled back completely): its durable record, its backups
    /// to the cleaner, its locks released.
    fn close(&self, t: Txn, committed: bool) -> Result<()> {
        let mut r = Ok(());
        if t.txid != 0 {
            let rec = if committed {
                Record::Commit
            } else {
                Record::Aborted
            };
            r = self
                .journal
                .append(t.txid, &rec, false)
                .and_then(|end| self.journal.sync_to(end))
                .map_err(io);
            if let Err(e) = &r {
                // The locks are released below all the same; the next start's recovery
                // decides from what reached the journal.
                tracing::error!("txn {}: journal: {e}", t.txid);
            }
            self.journal.close_txn();
            if committed {
                self.faults.hit("after-commit");
            }
            let names: Vec<Bytes> = t.undo.iter().filter_map(|u| u.backup().cloned()).collect();
            if !names.is_empty() {
                if let Some(tx) = &*self.cleanup.lock().unwrap_or_else(|p| p.into_inner()) {
                    let _ = tx.send((self.backup_dir_or_root(), names));
                }
            }
        }
        let counter = if committed {
            &self.stats.committed
        } else {
            &self.stats.aborted
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.locks.release_set(t.owner, &t.locks);
        self.gate.close_txn();
        r
    }
}

/// Applies `u`, trying again a few times: an undo step that fails must not be skipped
/// (its effect would stay while older steps are undone).
pub(super) fn apply_retrying(u: &Undo, cx: &OpCtx, b: &Backups) -> Result<()> {
    check_in_export(u, b.lower)?;
    let mut last = Ok(());
    for _ in 0..3 {
        last = u.apply(cx, b);
        if last.is_ok() {
            break;
        }
    }
    last
}

/// Notes in the journal that `u` (of `txid`) was applied. The note needs no fsync
/// against `kill -9`; with `strict` (power loss) the step's effect is synced first and
/// the note after, so a note never reaches the disk before its step.
pub(super) fn mark_undone(
    j: &Journal,
    lower: &dyn Backend,
    cx: &OpCtx,
    txid: u64,
    u: &Undo,
    strict: bool,
) -> Result<()> {
    if strict {
        let _ = lower.commit(cx, u.touches());
    }
    let end = j.append(txid, &Record::Undone, false).map_err(io)?;
    if strict {
        j.sync_to(end).map_err(io)?;
    }
    Ok(())
}

/// Refuses an undo step that would touch an object outside the export (ADR 0023): a
/// key that resolves elsewhere (a journal applied to the wrong tree, a handle of another
/// directory on the same file system) is an error, never changed. Objects that are gone
/// pass: the step skips them.
fn check_in_export(u: &Undo, lower: &dyn Backend) -> Result<()> {
    let keys: Vec<&FileKey> = match u {
        Undo::Data { key, .. } | Undo::Attrs { key, .. } => vec![key],
        Undo::Unlink { dir, .. } | Undo::Restore { dir, .. } => vec![dir],
        Undo::Unrename {
            from_dir, to_dir, ..
        } => vec![from_dir, to_dir],
    };
    for k in keys {
        match lower.contains(k) {
            Ok(true) | Err(BackendError::NotFound | BackendError::Stale) => {}
            Ok(false) => {
                tracing::error!("txn undo: an object of the journal lies outside the export");
                return Err(BackendError::Io(
                    "txn undo: the object this step would change lies outside the export; \
                     refusing to change it (is the journal of another directory?)"
                        .into(),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
