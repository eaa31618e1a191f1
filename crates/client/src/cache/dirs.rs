//! Directory delegations (GET_DIR_DELEGATION): the listings they let the cache keep, and
//! CB_NOTIFY, which keeps a listing current or drops it.

use super::{evict, path_key, DelegCache, DirDeleg, State, EARLY_RECALLS};
use crate::attrs::{self, Attributes};
use bytes::Bytes;
use std::collections::BTreeMap;
use txnfs_proto::nfs4::*;
use txnfs_xdr::Decode;

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
            // Recalled before its grant arrived, and already returned (`cb_recall`).
            g.early_recalls.remove(i);
            return;
        }
        if g.dirs.get(fh).is_some_and(|d| d.returning) {
            // The delegation before is on its way back (its entry goes with it): the
            // new one goes back too rather than be held unknown.
            drop(g);
            self.spawn_return_stateid(fh.clone(), stateid);
            return;
        }
        let mut entries = entries.filter(|_| listable);
        if let Some(i) = g.early_notified.iter().position(|f| f == fh) {
            g.early_notified.remove(i);
            entries = None;
        }
        let tick = g.touch();
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
        let g = self.lock_enabled()?;
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
        let tick = g.touch();
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
        let mut g = self.lock_enabled()?;
        let fh = g.dir_paths.get(&path_key(path))?.clone();
        let tick = g.touch();
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

    /// CB_NOTIFY of a delegated directory: apply the changes to its listing, or drop the
    /// listing when one cannot be applied exactly.
    pub(super) fn cb_notify(
        &self,
        stateid: &stateid4,
        fh: &Bytes,
        changes: &[notify4],
    ) -> nfsstat4 {
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
