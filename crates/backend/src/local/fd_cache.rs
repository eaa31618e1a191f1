//! Bounded caches of open descriptors (`O_PATH` and read-write), sized to the process's
//! descriptor limit, so that hot keys are not reopened on every call.

use foldhash::{HashMap, HashMapExt};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::{FileKey, FileType};

/// Capacity of the `O_PATH` descriptor cache.
const PATH_CACHE_CAP: usize = 4096;
/// Capacity of the read-write descriptor cache.
const RW_CACHE_CAP: usize = 128;

/// A cached descriptor, when it was last used, (once known) its object's type and
/// fileid, which never change while the object lives, and (once asked) whether the
/// descriptor was opened for writing.
struct Entry {
    fd: Arc<OwnedFd>,
    used: u64,
    identity: Option<(FileType, u64)>,
    writes: Option<bool>,
}

pub(super) struct FdCache {
    map: HashMap<FileKey, Entry>,
    tick: u64,
    cap: usize,
}

impl FdCache {
    pub(super) fn new(cap: usize) -> Self {
        FdCache {
            map: HashMap::new(),
            tick: 0,
            cap,
        }
    }

    pub(super) fn get(&mut self, key: &FileKey) -> Option<Arc<OwnedFd>> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|e| {
            e.used = tick;
            e.fd.clone()
        })
    }

    /// The descriptor cached for `key` if it serves I/O that writes (`need_write`) or
    /// only reads: every one reads; whether it writes is asked of the kernel once per
    /// entry (`writes`), not once per WRITE.
    pub(super) fn get_for_io(
        &mut self,
        key: &FileKey,
        need_write: bool,
        writes: impl FnOnce(&OwnedFd) -> bool,
    ) -> Option<Arc<OwnedFd>> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.map.get_mut(key)?;
        e.used = tick;
        if need_write && !*e.writes.get_or_insert_with(|| writes(&e.fd)) {
            return None;
        }
        Some(e.fd.clone())
    }

    /// The type and fileid of `key`'s object, if its entry has them.
    pub(super) fn identity(&mut self, key: &FileKey) -> Option<(FileType, u64)> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.map.get_mut(key)?;
        e.used = tick;
        e.identity
    }

    /// Records the type and fileid of `key`'s object, read through the descriptor
    /// cached for it (nothing happens if that entry has gone meanwhile).
    pub(super) fn set_identity(&mut self, key: &FileKey, identity: (FileType, u64)) {
        if let Some(e) = self.map.get_mut(key) {
            e.identity = Some(identity);
        }
    }

    pub(super) fn insert(&mut self, key: FileKey, fd: Arc<OwnedFd>) {
        if self.map.len() >= self.cap && !self.map.contains_key(&key) {
            // Drop the least recently used eighth in one go (amortized O(1) per insert).
            let mut ticks: Vec<u64> = self.map.values().map(|e| e.used).collect();
            let k = (self.cap / 8).max(1).min(ticks.len() - 1);
            let (_, &mut cut, _) = ticks.select_nth_unstable(k);
            self.map.retain(|_, e| e.used > cut);
        }
        self.tick += 1;
        let e = Entry {
            fd,
            used: self.tick,
            identity: None,
            writes: None,
        };
        self.map.insert(key, e);
    }

    /// Drops the least recently used half.
    pub(super) fn shrink_to_half(&mut self) {
        if self.map.is_empty() {
            return;
        }
        let mut ticks: Vec<u64> = self.map.values().map(|e| e.used).collect();
        let k = ticks.len() / 2;
        let (_, &mut cut, _) = ticks.select_nth_unstable(k);
        self.map.retain(|_, e| e.used > cut);
    }

    pub(super) fn remove(&mut self, key: &FileKey) -> Option<Arc<OwnedFd>> {
        self.map.remove(key).map(|e| e.fd)
    }
}

/// Descriptor cache capacities that fit the process's descriptor limit, after raising
/// its soft limit to the hard limit (as file servers usually do).
pub(super) fn cache_caps() -> (usize, usize) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let mut soft = lim.current.unwrap_or(u64::MAX);
    if let Some(want) = lim.maximum.map(|m| m.min(1 << 20)) {
        if soft < want
            && setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(want),
                    maximum: lim.maximum,
                },
            )
            .is_ok()
        {
            soft = want;
        }
    }
    let soft = usize::try_from(soft).unwrap_or(usize::MAX);
    // Leave half of the descriptors (and at least 256) to sockets and everything else.
    let spare = soft.saturating_sub(256) / 2;
    let rw = (spare / 16).clamp(8, RW_CACHE_CAP);
    let paths = spare.saturating_sub(rw).clamp(32, PATH_CACHE_CAP);
    (paths, rw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use rustix::fs::{self as rfs, Mode, OFlags};

    #[test]
    fn fd_cache_evicts_least_recent() {
        let mut c = FdCache::new(16);
        let fd = |_: u32| Arc::new(rfs::open("/", OFlags::PATH, Mode::empty()).unwrap());
        for i in 0..16u32 {
            c.insert(Bytes::from(i.to_be_bytes().to_vec()), fd(i));
        }
        // touch key 0 so it survives
        assert!(c.get(&Bytes::from(0u32.to_be_bytes().to_vec())).is_some());
        c.insert(Bytes::from(99u32.to_be_bytes().to_vec()), fd(99));
        assert!(c.map.len() <= 16);
        assert!(c.get(&Bytes::from(0u32.to_be_bytes().to_vec())).is_some());
        assert!(c.get(&Bytes::from(1u32.to_be_bytes().to_vec())).is_none());
        assert!(c.get(&Bytes::from(99u32.to_be_bytes().to_vec())).is_some());
        c.shrink_to_half();
        assert!(c.map.len() <= 8);
    }
}
