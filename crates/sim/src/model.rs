//! The oracle: what the server must have done, built from every executed reply (the
//! simulation sees replies even when the client "loses" them). It holds the expected
//! file contents, the namespace, the open and lock state of live clients, and the last
//! change counter seen per directory.

use crate::wire::Fh;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;
use txnfs_proto::nfs4::stateid4;

/// One byte of expected file content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// Written by an acknowledged stable write (FILE_SYNC, or UNSTABLE + COMMIT with the
    /// same verifier), or a hole / truncation zero: must read back, also after restarts.
    Durable(u8),
    /// Written UNSTABLE and not committed yet: must read back until the server restarts.
    Volatile(u8),
    /// The model does not know (an unstable write lost in a restart, a failed call).
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Obj {
    pub fh: Fh,
    pub parent: Fh,
    pub name: Bytes,
    pub is_dir: bool,
    pub alive: bool,
    pub data: Vec<Cell>,
    /// Whether `data.len()` is the file size for sure.
    pub size_known: bool,
}

impl Obj {
    /// An object just created as `name` in `parent`: alive and empty.
    pub fn created(fh: Fh, parent: Fh, name: Bytes, is_dir: bool) -> Obj {
        Obj {
            fh,
            parent,
            name,
            is_dir,
            alive: true,
            data: Vec::new(),
            size_known: true,
        }
    }
}

/// A lock owner: (client index, client incarnation, owner index).
pub type LockOwner = (usize, u32, usize);
/// An open owner: (client index, client incarnation, owner name).
pub type OpenOwner = (usize, u32, Bytes);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRec {
    pub file: Fh,
    pub owner: LockOwner,
    pub start: u64,
    /// Exclusive; `u64::MAX` means to the end of all files.
    pub end: u64,
    pub write: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRec {
    pub file: Fh,
    pub owner: OpenOwner,
    pub access: u32,
    pub deny: u32,
}

/// A client incarnation: (client index, incarnation).
pub type Holder = (usize, u32);

/// What a request of another client does to a file, for the delegation conflict rule
/// (RFC 8881 §10.4: a read delegation lets the holder cache data and open for reading
/// locally, a write delegation also to write; another client's request that would make
/// that cache wrong, or that the holder's local opens would have to deny, must wait
/// for the delegation to come back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// OPEN with this share access and deny (`OPEN4_SHARE_ACCESS_*`, `_DENY_*`).
    Open { access: u32, deny: u32 },
    /// READ, and GETATTR of size or change (which a write holder may have changed).
    Read,
    /// WRITE, SETATTR.
    Modify,
    /// REMOVE, RENAME.
    Namespace,
}

impl Access {
    /// Whether this access by another client conflicts with a delegation (`write`:
    /// a write delegation).
    pub fn conflicts(self, write: bool) -> bool {
        write
            || match self {
                Access::Open { access, deny } => {
                    access & txnfs_proto::nfs4::OPEN4_SHARE_ACCESS_WRITE != 0
                        || deny & txnfs_proto::nfs4::OPEN4_SHARE_DENY_READ != 0
                }
                Access::Read => false,
                Access::Modify | Access::Namespace => true,
            }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelegPhase {
    Active,
    /// A conflicting request was answered DELAY at `since` (simulated time) and the
    /// server asked for a CB_RECALL.
    Recalling {
        since: Duration,
    },
    /// Not returned within a lease of the recall: revoked, kept until FREE_STATEID.
    Revoked,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegRec {
    pub file: Fh,
    pub holder: Holder,
    pub write: bool,
    pub sid: stateid4,
    pub phase: DelegPhase,
}

impl DelegRec {
    pub fn live(&self) -> bool {
        self.phase != DelegPhase::Revoked
    }
}

pub fn range_end(offset: u64, length: u64) -> u64 {
    if length == u64::MAX {
        u64::MAX
    } else {
        offset.saturating_add(length)
    }
}

#[derive(Debug, Default)]
pub struct Model {
    pub root: Fh,
    pub objs: Vec<Obj>,
    pub locks: Vec<LockRec>,
    pub opens: Vec<OpenRec>,
    /// Directory -> the largest `after` change value any reply showed.
    pub last_after: BTreeMap<Fh, u64>,
    /// The write verifier of the running server instance, once a reply showed it.
    pub boot_verf: Option<[u8; 8]>,
    /// Directories that may hold an entry the model never saw (a create that the
    /// backend applied but whose OPEN then failed).
    pub uncertain_dirs: Vec<Fh>,
    /// Delegations of live clients, from OPEN replies, until returned or freed.
    pub delegs: Vec<DelegRec>,
    /// (File, holder) -> the simulated time a request was last DELAY'd for that
    /// holder's delegation of the file (the grant policy's per-client cool-down).
    pub last_conflict: BTreeMap<(Fh, Holder), Duration>,
}

impl Model {
    pub fn obj(&self, fh: &Fh) -> Option<&Obj> {
        self.objs.iter().find(|o| o.fh == *fh)
    }

    pub fn obj_mut(&mut self, fh: &Fh) -> Option<&mut Obj> {
        self.objs.iter_mut().find(|o| o.fh == *fh)
    }

    pub fn live_files(&self) -> Vec<Fh> {
        self.objs
            .iter()
            .filter(|o| o.alive && !o.is_dir)
            .map(|o| o.fh.clone())
            .collect()
    }

    /// The root and every live directory.
    pub fn live_dirs(&self) -> Vec<Fh> {
        let mut v = vec![self.root.clone()];
        v.extend(
            self.objs
                .iter()
                .filter(|o| o.alive && o.is_dir)
                .map(|o| o.fh.clone()),
        );
        v
    }

    pub fn children(&self, dir: &Fh) -> usize {
        self.objs
            .iter()
            .filter(|o| o.alive && o.parent == *dir)
            .count()
    }

    /// A lock held by another owner that conflicts with the request.
    pub fn lock_conflict(
        &self,
        file: &Fh,
        me: Option<&LockOwner>,
        start: u64,
        end: u64,
        write: bool,
    ) -> Option<&LockRec> {
        self.locks.iter().find(|l| {
            l.file == *file
                && Some(&l.owner) != me
                && l.start < end
                && start < l.end
                && (write || l.write)
        })
    }

    /// Whether an OPEN with `access`/`deny` by `me` conflicts with another owner's open.
    pub fn share_conflict(&self, file: &Fh, me: &OpenOwner, access: u32, deny: u32) -> bool {
        self.opens.iter().any(|o| {
            o.file == *file && &o.owner != me && (o.access & deny != 0 || o.deny & access != 0)
        })
    }

    pub fn add_open(&mut self, file: &Fh, owner: OpenOwner, access: u32, deny: u32) {
        if let Some(o) = self
            .opens
            .iter_mut()
            .find(|o| o.file == *file && o.owner == owner)
        {
            o.access |= access;
            o.deny |= deny;
        } else {
            self.opens.push(OpenRec {
                file: file.clone(),
                owner,
                access,
                deny,
            });
        }
    }

    pub fn remove_open(&mut self, file: &Fh, owner: &OpenOwner) {
        self.opens
            .retain(|o| !(o.file == *file && &o.owner == owner));
        // Lock stateids derived from the open go with it (the client closes only
        // files it holds no locks on, so there are no ranges to drop).
    }

    /// Everything a client incarnation held is gone (lease expiry, restart).
    pub fn forget_client(&mut self, client: usize, incarnation: u32) {
        self.locks
            .retain(|l| !(l.owner.0 == client && l.owner.1 == incarnation));
        self.opens
            .retain(|o| !(o.owner.0 == client && o.owner.1 == incarnation));
        self.delegs.retain(|d| d.holder != (client, incarnation));
    }

    /// Live delegations of clients other than `me` on `file` that `access` conflicts
    /// with (indices into `delegs`).
    pub fn deleg_conflicts(&self, file: &Fh, me: Holder, access: Access) -> Vec<usize> {
        (0..self.delegs.len())
            .filter(|&i| {
                let d = &self.delegs[i];
                d.file == *file && d.holder != me && d.live() && access.conflicts(d.write)
            })
            .collect()
    }

    /// The delegation whose stateid is `sid` (any seqid).
    pub fn deleg(&self, sid: &stateid4) -> Option<usize> {
        self.delegs.iter().position(|d| d.sid.other == sid.other)
    }

    /// Whether `holder` has a revoked delegation it has not freed.
    pub fn has_revoked(&self, holder: Holder) -> bool {
        self.delegs
            .iter()
            .any(|d| d.holder == holder && d.phase == DelegPhase::Revoked)
    }

    /// The lease timer at `now`: recalls older than a lease are revoked. Returns how
    /// many.
    pub fn revoke_overdue(&mut self, now: Duration, lease: Duration) -> u64 {
        let mut n = 0;
        for d in &mut self.delegs {
            if let DelegPhase::Recalling { since } = d.phase {
                if now.saturating_sub(since) >= lease {
                    d.phase = DelegPhase::Revoked;
                    n += 1;
                }
            }
        }
        n
    }

    /// A server restart: all open and lock state is gone, uncommitted data may be.
    pub fn restart(&mut self) {
        self.locks.clear();
        self.opens.clear();
        self.delegs.clear();
        self.last_conflict.clear();
        self.boot_verf = None;
        for o in &mut self.objs {
            let mut had_volatile = false;
            for c in &mut o.data {
                if matches!(c, Cell::Volatile(_)) {
                    *c = Cell::Unknown;
                    had_volatile = true;
                }
            }
            if had_volatile {
                o.size_known = false;
            }
        }
    }

    /// Apply an acknowledged write.
    pub fn write(&mut self, file: &Fh, offset: u64, data: &[u8], stable: bool) {
        let Some(o) = self.obj_mut(file) else { return };
        let end = offset as usize + data.len();
        if o.data.len() < end {
            o.data.resize(end, Cell::Durable(0));
        }
        for (i, b) in data.iter().enumerate() {
            o.data[offset as usize + i] = if stable {
                Cell::Durable(*b)
            } else {
                Cell::Volatile(*b)
            };
        }
    }

    /// A write whose outcome is unknown: forget what the range holds.
    pub fn write_unknown(&mut self, file: &Fh, offset: u64, len: usize) {
        let Some(o) = self.obj_mut(file) else { return };
        let end = offset as usize + len;
        if o.data.len() < end {
            o.size_known = false;
            o.data.resize(end, Cell::Unknown);
        }
        for c in &mut o.data[offset as usize..end] {
            *c = Cell::Unknown;
        }
    }

    pub fn commit(&mut self, file: &Fh) {
        if let Some(o) = self.obj_mut(file) {
            for c in &mut o.data {
                if let Cell::Volatile(b) = *c {
                    *c = Cell::Durable(b);
                }
            }
        }
    }

    pub fn truncate(&mut self, file: &Fh, size: u64, known: bool) {
        let Some(o) = self.obj_mut(file) else { return };
        let keep = (size as usize).min(o.data.len());
        if known {
            o.data.resize(size as usize, Cell::Durable(0));
        } else {
            for c in &mut o.data[keep..] {
                *c = Cell::Unknown;
            }
            o.size_known = false;
        }
    }

    /// Invariant 4: a directory's change counter never goes backwards.
    pub fn check_cinfo(&mut self, dir: &Fh, before: u64, after: u64) -> Result<(), String> {
        let last = self.last_after.get(dir).copied().unwrap_or(0);
        if after < before {
            return Err(format!("cinfo after {after} < before {before}"));
        }
        if after < last {
            return Err(format!("cinfo after {after} < an earlier after {last}"));
        }
        self.last_after.insert(dir.clone(), after);
        Ok(())
    }

    /// Invariant 2: `data` read at `offset` agrees with every byte the model knows.
    /// Returns how many bytes were compared.
    pub fn check_read(
        &self,
        file: &Fh,
        offset: u64,
        count: u32,
        data: &[u8],
        eof: bool,
    ) -> Result<u64, String> {
        let Some(o) = self.obj(file) else {
            return Ok(0);
        };
        let mut verified = 0;
        for (i, b) in data.iter().enumerate() {
            let at = offset as usize + i;
            match o.data.get(at) {
                Some(Cell::Durable(x)) | Some(Cell::Volatile(x)) if x != b => {
                    return Err(format!(
                        "byte {at} reads {b:#04x}, the model expects {x:#04x} ({:?})",
                        o.data[at]
                    ))
                }
                None if o.size_known => {
                    return Err(format!(
                        "read returned byte {at} beyond the size {}",
                        o.data.len()
                    ))
                }
                Some(Cell::Durable(_)) | Some(Cell::Volatile(_)) => verified += 1,
                _ => {}
            }
        }
        let end = offset as usize + data.len();
        if eof && o.size_known && end < o.data.len() && data.len() < count as usize {
            // Missing bytes the model knows must exist.
            let known = o.data[end..(offset as usize + count as usize).min(o.data.len())]
                .iter()
                .any(|c| !matches!(c, Cell::Unknown));
            if known {
                return Err(format!(
                    "read at {offset} ended (eof) at {end}, the model's size is {}",
                    o.data.len()
                ));
            }
        }
        Ok(verified)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fh(n: u8) -> Fh {
        Bytes::from(vec![n; 4])
    }

    /// `check_read` of the file of [`model_with_file`].
    fn read_f(m: &Model, offset: u64, count: u32, data: &[u8], eof: bool) -> Result<u64, String> {
        m.check_read(&fh(1), offset, count, data, eof)
    }

    fn model_with_file() -> Model {
        let mut m = Model {
            root: fh(0),
            ..Model::default()
        };
        m.objs
            .push(Obj::created(fh(1), fh(0), Bytes::from_static(b"f"), false));
        m
    }

    #[test]
    fn reads_must_match_acknowledged_bytes() {
        let mut m = model_with_file();
        m.write(&fh(1), 2, b"abc", true);
        assert_eq!(read_f(&m, 0, 10, b"\0\0abc", true), Ok(5));
        assert!(read_f(&m, 2, 3, b"abX", false).is_err());
        assert!(read_f(&m, 0, 10, b"\0\0abc!", true).is_err(), "beyond size");
        assert!(read_f(&m, 0, 10, b"\0\0a", true).is_err(), "early eof");
    }

    #[test]
    fn restart_forgets_only_uncommitted_bytes() {
        let mut m = model_with_file();
        m.write(&fh(1), 0, b"ab", true);
        m.write(&fh(1), 2, b"cd", false);
        m.restart();
        assert_eq!(read_f(&m, 0, 4, b"abXY", true), Ok(2));
        assert!(read_f(&m, 0, 4, b"Xb", true).is_err());
        m.write(&fh(1), 0, b"zz", false);
        m.commit(&fh(1));
        m.restart();
        assert!(
            read_f(&m, 0, 2, b"ab", true).is_err(),
            "commit made zz durable"
        );
    }

    #[test]
    fn change_info_never_goes_back() {
        let mut m = model_with_file();
        assert!(m.check_cinfo(&fh(0), 3, 5).is_ok());
        assert!(m.check_cinfo(&fh(0), 5, 4).is_err());
        assert!(
            m.check_cinfo(&fh(0), 1, 4).is_err(),
            "behind the last after"
        );
        assert!(m.check_cinfo(&fh(9), 0, 1).is_ok(), "per directory");
    }

    #[test]
    fn lock_conflicts_follow_owners_and_types() {
        let mut m = model_with_file();
        m.locks.push(LockRec {
            file: fh(1),
            owner: (0, 1, 0),
            start: 10,
            end: 20,
            write: false,
        });
        let other = (1, 1, 0);
        assert!(m
            .lock_conflict(&fh(1), Some(&other), 15, 30, true)
            .is_some());
        assert!(m
            .lock_conflict(&fh(1), Some(&other), 15, 30, false)
            .is_none());
        assert!(m
            .lock_conflict(&fh(1), Some(&other), 20, 30, true)
            .is_none());
        assert!(m
            .lock_conflict(&fh(1), Some(&(0, 1, 0)), 0, u64::MAX, true)
            .is_none());
        m.forget_client(0, 1);
        assert!(m
            .lock_conflict(&fh(1), Some(&other), 0, u64::MAX, true)
            .is_none());
    }

    #[test]
    fn delegation_conflicts_follow_types_and_holders() {
        let mut m = model_with_file();
        let sid = |n: u8| stateid4 {
            seqid: 1,
            other: [n; 12],
        };
        m.delegs.push(DelegRec {
            file: fh(1),
            holder: (0, 1),
            write: false,
            sid: sid(1),
            phase: DelegPhase::Active,
        });
        let other = (1, 1);
        assert!(m.deleg_conflicts(&fh(1), other, Access::Read).is_empty());
        assert!(m
            .deleg_conflicts(&fh(1), other, Access::Open { access: 1, deny: 0 })
            .is_empty());
        assert_eq!(
            m.deleg_conflicts(&fh(1), other, Access::Open { access: 3, deny: 0 }),
            vec![0]
        );
        assert_eq!(m.deleg_conflicts(&fh(1), other, Access::Namespace), vec![0]);
        assert!(
            m.deleg_conflicts(&fh(1), (0, 1), Access::Modify).is_empty(),
            "own delegation"
        );
        m.delegs[0].write = true;
        assert_eq!(m.deleg_conflicts(&fh(1), other, Access::Read), vec![0]);
        m.delegs[0].phase = DelegPhase::Recalling {
            since: Duration::from_secs(1),
        };
        assert_eq!(
            m.revoke_overdue(Duration::from_secs(20), Duration::from_secs(20)),
            0
        );
        assert_eq!(
            m.revoke_overdue(Duration::from_secs(21), Duration::from_secs(20)),
            1
        );
        assert!(m.has_revoked((0, 1)));
        assert!(m.deleg_conflicts(&fh(1), other, Access::Read).is_empty());
        m.forget_client(0, 1);
        assert!(m.delegs.is_empty());
    }

    #[test]
    fn share_reservations() {
        let mut m = model_with_file();
        let a = (0, 1, Bytes::from_static(b"a"));
        let b = (1, 1, Bytes::from_static(b"b"));
        m.add_open(&fh(1), a.clone(), 3, 0);
        assert!(m.share_conflict(&fh(1), &b, 1, 3));
        assert!(!m.share_conflict(&fh(1), &b, 3, 0));
        assert!(
            !m.share_conflict(&fh(1), &a, 1, 3),
            "own opens never conflict"
        );
        m.remove_open(&fh(1), &a);
        assert!(!m.share_conflict(&fh(1), &b, 1, 3));
    }
}
