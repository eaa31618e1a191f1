//! NFS changes of one file, one at a time (ADR 0038 item 7): WRITE, SETATTR,
//! ALLOCATE and DEALLOCATE of any NFS version take the file's lock around the backend
//! call, and NFSv3 holds it from the attribute read that becomes the pre-op
//! attributes of its wcc data (RFC 1813 §2.6) to the end of the change. So those
//! attributes are the state the change started from as far as every NFS client can
//! tell, as knfsd's inode lock makes them; a process on the server host writing the
//! file directly is not serialised (the local backend's change info for directories
//! is not atomic for the same reason).
//!
//! The lock is one of a fixed set of stripes chosen by a hash of the export and the
//! file key: no table to grow or clean, and two files rarely share a stripe. It is
//! never held across a wait for a delegation recall (the holder's flush would need
//! it), only across the attribute read and the backend's call.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use txnfs_backend::FileKey;

/// Stripes: enough that two of a few hundred files being written at once rarely
/// share one.
const STRIPES: usize = 256;

/// The per-file change locks of a server.
pub struct FileChangeLocks {
    stripes: Box<[Mutex<()>]>,
}

impl Default for FileChangeLocks {
    fn default() -> Self {
        FileChangeLocks {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl FileChangeLocks {
    /// The lock of `key` in export `export`, held until the guard drops.
    pub fn lock(&self, export: u16, key: &FileKey) -> MutexGuard<'_, ()> {
        let mut h = DefaultHasher::new();
        export.hash(&mut h);
        key.hash(&mut h);
        let stripe = &self.stripes[(h.finish() % STRIPES as u64) as usize];
        // The guarded value is `()`: a panic while held leaves nothing inconsistent.
        stripe.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn one_file_is_changed_by_one_caller_at_a_time() {
        let locks = Arc::new(FileChangeLocks::default());
        let key = FileKey::from_static(b"file");
        let inside = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (locks, key, inside) = (locks.clone(), key.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _g = locks.lock(1, &key);
                        assert!(!inside.swap(true, Ordering::SeqCst), "two callers inside");
                        std::thread::yield_now();
                        inside.store(false, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a caller panicked");
        }
    }
}
