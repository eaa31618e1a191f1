//! All-or-nothing variants of the vectorized metadata calls: `vmkdir_atomic`,
//! `vremove_atomic`, `vrename_atomic`. Each plans with the ordinary (read-only)
//! vectorized calls, then sends the changes as ONE [`Transaction`] (one COMPOUND, or
//! several of one transaction when they do not fit one): either every item happens or
//! none does, and the error names the item that failed. They need a server that runs
//! transactions (txnfs); there is no non-atomic fallback.

use super::{components, Fs};
use crate::txn::Transaction;
use crate::ClientError;
use std::collections::BTreeSet;
use txnfs_proto::nfs4::nfsstat4;

impl Fs {
    /// A transaction on this session (see [`crate::Client::transaction`]).
    /// It keeps this `Fs`'s cache of directory handles right: what a committed
    /// transaction renamed or removed is forgotten.
    pub fn transaction(&self) -> Transaction {
        self.client.transaction().for_fs(self)
    }

    /// [`Fs::vmkdir`] as one transaction. With `parents`, ancestors and requested
    /// directories that exist already are left alone (found with one vgetattrs before
    /// the transaction; one created meanwhile by someone else makes the transaction
    /// fail with NFS4ERR_EXIST, nothing changed).
    pub async fn vmkdir_atomic<S: AsRef<str>>(
        &self,
        paths: &[S],
        mode: u32,
        parents: bool,
    ) -> Result<(), ClientError> {
        // Every directory to make, parents before children (sorted by depth, then name).
        let mut wanted: BTreeSet<(usize, String)> = BTreeSet::new();
        for p in paths {
            let c = components(p.as_ref())?;
            if c.is_empty() {
                return Err(ClientError::BadPath(p.as_ref().into()));
            }
            let from = if parents { 1 } else { c.len() };
            for d in from..=c.len() {
                wanted.insert((d, c[..d].join("/")));
            }
        }
        let mut skip = BTreeSet::new();
        if parents {
            let all: Vec<&str> = wanted.iter().map(|(_, p)| p.as_str()).collect();
            for (p, a) in all.iter().zip(self.vgetattrs(&all).await) {
                match a {
                    // mkdir -p: an existing directory is fine; anything else there
                    // makes the transaction fail on it (NOTDIR / EXIST), as it should.
                    Ok(a) if a.is_dir() => {
                        skip.insert(p.to_string());
                    }
                    Ok(_) => {}
                    Err(e) if e.status() == Some(nfsstat4::NFS4ERR_NOENT) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let mut t = self.transaction();
        for (_, p) in wanted.iter().filter(|(_, p)| !skip.contains(p)) {
            t.mkdir(p, mode);
        }
        t.commit().await.map(|_| ())
    }

    /// [`Fs::vremove`] as one transaction. With `recursive`, the trees are listed first
    /// (vlistdir, read-only) and removed depth-first: everything in a directory before
    /// the directory. What appears in a tree between the listing and the transaction
    /// makes its directory's REMOVE fail (NFS4ERR_NOTEMPTY): nothing is removed then.
    pub async fn vremove_atomic<S: AsRef<str>>(
        &self,
        paths: &[S],
        recursive: bool,
    ) -> Result<(), ClientError> {
        let mut order: Vec<(usize, String)> = Vec::new();
        if recursive {
            let roots: Vec<&str> = paths.iter().map(|p| p.as_ref()).collect();
            let attrs = self.vgetattrs(&roots).await;
            let mut dirs = Vec::new();
            for (p, a) in roots.iter().zip(attrs) {
                if a?.is_dir() {
                    dirs.push(*p);
                }
            }
            for listing in self.vlistdir(&dirs, true).await {
                for e in listing? {
                    order.push((components(&e.path)?.len(), e.path));
                }
            }
        }
        for p in paths {
            let c = components(p.as_ref())?;
            if c.is_empty() {
                return Err(ClientError::BadPath(p.as_ref().into()));
            }
            order.push((c.len(), c.join("/")));
        }
        // Deepest first: a directory's entries are one level below it.
        order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        order.dedup();
        let mut t = self.transaction();
        for (_, p) in &order {
            t.remove(p);
        }
        t.commit().await.map(|_| ())
    }

    /// [`Fs::vrename`] as one transaction: the pairs are renamed in order.
    pub async fn vrename_atomic<S: AsRef<str>, T: AsRef<str>>(
        &self,
        pairs: &[(S, T)],
    ) -> Result<(), ClientError> {
        let mut t = self.transaction();
        for (from, to) in pairs {
            t.rename(from.as_ref(), to.as_ref());
        }
        t.commit().await.map(|_| ())
    }
}
