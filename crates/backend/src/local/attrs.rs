//! Attributes: `struct stat` to [`Attrs`] (with the `change` value and the directory
//! change of a mutation), and ownership, mode and times applied to an object.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{self as rfs, AtFlags, FileType as RFileType, Mode, Stat, CWD};

use super::descriptors::proc_path;
use super::errors::map_errno;
use super::{lock, LocalBackend};
use crate::{Attrs, Creds, DirChange, FileType, Result, SetAttrs, SetTime, Timestamp};

pub(super) fn ftype_of(st: &Stat) -> FileType {
    match RFileType::from_raw_mode(st.st_mode as _) {
        RFileType::RegularFile => FileType::Regular,
        RFileType::Directory => FileType::Directory,
        RFileType::Symlink => FileType::Symlink,
        RFileType::BlockDevice => FileType::BlockDev,
        RFileType::CharacterDevice => FileType::CharDev,
        RFileType::Fifo => FileType::Fifo,
        RFileType::Socket => FileType::Socket,
        RFileType::Unknown => FileType::Regular,
    }
}

pub(super) fn ts(sec: i64, nsec: i64) -> Timestamp {
    Timestamp {
        sec,
        nsec: u32::try_from(nsec).unwrap_or(0).min(999_999_999),
    }
}

pub(super) fn ctime_ns(st: &Stat) -> u64 {
    let sec = u64::try_from(st.st_ctime).unwrap_or(0);
    let nsec = u64::try_from(st.st_ctime_nsec).unwrap_or(0);
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

pub(super) fn to_rts(t: Option<SetTime>) -> rfs::Timespec {
    match t {
        None => rfs::Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_OMIT,
        },
        Some(SetTime::ServerNow) => rfs::Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_NOW,
        },
        Some(SetTime::Client(t)) => rfs::Timespec {
            tv_sec: t.sec as _,
            tv_nsec: i64::from(t.nsec.min(999_999_999)) as _,
        },
    }
}

impl LocalBackend {
    pub(super) fn attrs(&self, st: &Stat, mutated: bool) -> Attrs {
        let fileid = st.st_ino as u64;
        let change = lock(&self.changes).value(fileid, ctime_ns(st), mutated);
        Attrs {
            ftype: ftype_of(st),
            mode: (st.st_mode as u32) & 0o7777,
            nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
            uid: st.st_uid,
            gid: st.st_gid,
            size: u64::try_from(st.st_size).unwrap_or(0),
            space_used: u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512),
            rdev: (rfs::major(st.st_rdev as _), rfs::minor(st.st_rdev as _)),
            fsid: self.fsid,
            fileid,
            atime: ts(st.st_atime as i64, st.st_atime_nsec as i64),
            mtime: ts(st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: ts(st.st_ctime as i64, st.st_ctime_nsec as i64),
            change,
        }
    }

    /// Records a mutation of a directory done through the backend (moves its `change`);
    /// returns the new change value (0 if the directory cannot be stat'ed).
    pub(super) fn dir_mutated(&self, dirfd: &OwnedFd) -> u64 {
        rfs::fstat(dirfd).map_or(0, |st| self.attrs(&st, true).change)
    }

    /// A directory's change value before a mutation (0 if it cannot be stat'ed).
    pub(super) fn dir_before(&self, dirfd: &OwnedFd) -> u64 {
        rfs::fstat(dirfd).map_or(0, |st| self.attrs(&st, false).change)
    }

    /// The change of a directory across a mutation through the backend.
    pub(super) fn dir_change(&self, dirfd: &OwnedFd, before: u64) -> DirChange {
        let after = self.dir_mutated(dirfd);
        DirChange {
            before,
            after,
            atomic: false,
        }
    }

    /// Applies ownership, mode and times to a new or existing object. Order matters:
    /// chown clears set-ID bits, so mode comes after it.
    pub(super) fn apply_attrs(
        &self,
        fd: &OwnedFd,
        st: &Stat,
        sa: &SetAttrs,
        times: bool,
    ) -> Result<()> {
        let is_link = ftype_of(st) == FileType::Symlink;
        if sa.uid.is_some() || sa.gid.is_some() {
            rfs::chownat(
                fd,
                c"",
                sa.uid.map(rfs::Uid::from_raw),
                sa.gid.map(rfs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(map_errno)?;
        }
        if let (Some(mode), false) = (sa.mode, is_link) {
            rfs::chmodat(
                CWD,
                proc_path(fd.as_fd()).as_str(),
                Mode::from_raw_mode((mode & 0o7777) as _),
                AtFlags::empty(),
            )
            .map_err(map_errno)?;
        }
        if times && (sa.atime.is_some() || sa.mtime.is_some()) {
            let t = rfs::Timestamps {
                last_access: to_rts(sa.atime),
                last_modification: to_rts(sa.mtime),
            };
            // The magic link resolves to the inode itself (for a symlink: the link, not
            // its target).
            rfs::utimensat(CWD, proc_path(fd.as_fd()).as_str(), &t, AtFlags::empty())
                .map_err(map_errno)?;
        }
        Ok(())
    }

    /// Ownership of a new object: the creator's, with the group of a set-group-ID parent.
    pub(super) fn new_owner(owner: &Creds, sa: &SetAttrs, parent: &Stat) -> (u32, u32) {
        let setgid_dir = parent.st_mode as u32 & 0o2000 != 0;
        let gid = sa
            .gid
            .unwrap_or(if setgid_dir { parent.st_gid } else { owner.gid });
        (sa.uid.unwrap_or(owner.uid), gid)
    }

    /// Finishes a newly made object: owner, mode, optional times. Returns its stat.
    pub(super) fn init_new(
        &self,
        fd: &OwnedFd,
        parent: &Stat,
        owner: &Creds,
        sa: &SetAttrs,
        default_mode: u32,
        times: bool,
    ) -> Result<Stat> {
        let st = rfs::fstat(fd).map_err(map_errno)?;
        let (uid, gid) = Self::new_owner(owner, sa, parent);
        let mut mode = sa.mode.unwrap_or(default_mode) & 0o7777;
        if ftype_of(&st) == FileType::Directory && parent.st_mode as u32 & 0o2000 != 0 {
            mode |= 0o2000;
        }
        let init = SetAttrs {
            mode: Some(mode),
            uid: Some(uid),
            gid: Some(gid),
            size: None,
            atime: sa.atime,
            mtime: sa.mtime,
        };
        self.apply_attrs(fd, &st, &init, times)?;
        rfs::fstat(fd).map_err(map_errno)
    }
}
