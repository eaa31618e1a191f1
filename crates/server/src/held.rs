//! Open files outlive their names (ADR 0015): while a client has a file open,
//! a REMOVE or a RENAME over it by anyone must not make the client's later READ, WRITE
//! or CLOSE fail with NFS4ERR_STALE — the open state keeps the object alive, as an open
//! descriptor does in POSIX. The server asks the backend to hold each file that has
//! opens (`Backend::hold`, once per file) and gives the hold back once the state core
//! says no open of it is left: after a CLOSE, and in a sweep after clients are released
//! (lease expiry, courtesy conflicts, DESTROY_CLIENTID).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use txnfs_backend::{FileKey, OpCtx};
use txnfs_state::{FileId, StateCore};

use crate::export::Export;

/// The files the server holds for their opens.
#[derive(Default)]
pub struct HeldFiles {
    files: Mutex<HashMap<FileId, (Arc<Export>, FileKey)>>,
}

impl HeldFiles {
    /// `file` (of `export`, named by `key`) has an open now: hold it unless it is held.
    /// A failure means the object went away between the OPEN's decision and now (a
    /// concurrent REMOVE): the open stands, unprotected, as before this existed.
    ///
    /// The backend is asked with no lock held (ADR 0004, ADR 0029): the map is checked,
    /// the hold taken, and the map checked again; if another OPEN of the file held it
    /// meanwhile, this hold is given back. True when this call added the file: the
    /// caller then asks [`HeldFiles::release_closed`] once more under the core's lock,
    /// in case the file's last CLOSE ran between its OPEN and this.
    #[must_use = "a new hold must be checked against a CLOSE that raced with it"]
    pub fn hold(&self, cx: &OpCtx, file: FileId, export: &Arc<Export>, key: &FileKey) -> bool {
        if self.lock().contains_key(&file) {
            return false;
        }
        if let Err(e) = export.backend.hold(cx, key) {
            tracing::debug!(?file, "cannot hold a file just opened: {e}");
            return false;
        }
        let added = {
            let mut files = self.lock();
            match files.entry(file) {
                Entry::Occupied(_) => false,
                Entry::Vacant(v) => {
                    v.insert((export.clone(), key.clone()));
                    true
                }
            }
        };
        if !added {
            // Another OPEN of the file won the race: one hold per file.
            export.backend.release(cx, key);
        }
        added
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FileId, (Arc<Export>, FileKey)>> {
        // The map is updated in single statements: a poisoned guard is still whole.
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take out the holds of the files in `which` (all held files when `None`) that
    /// `core` says nobody has open any more. They are given back to the backends, with
    /// `cx` (the COMPOUND that closed them, or a context outside any COMPOUND for a
    /// sweep), when the result is dropped: drop it after the core's lock, since no lock
    /// is held across a backend call (ADR 0004).
    #[must_use = "the holds are given back when this is dropped"]
    pub fn release_closed(&self, core: &StateCore, which: Option<FileId>, cx: &OpCtx) -> Released {
        let mut files = self.lock();
        let closed: Vec<FileId> = match which {
            Some(f) => vec![f],
            None => files.keys().copied().collect(),
        };
        Released(
            cx.clone(),
            closed
                .into_iter()
                .filter(|f| !core.table().file_is_open(*f))
                .filter_map(|f| files.remove(&f))
                .collect(),
        )
    }

    /// How many files are held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Holds taken out of [`HeldFiles`], given back to their backends on drop.
pub struct Released(OpCtx, Vec<(Arc<Export>, FileKey)>);

impl Drop for Released {
    fn drop(&mut self) {
        for (export, key) in self.1.drain(..) {
            export.backend.release(&self.0, &key);
        }
    }
}
