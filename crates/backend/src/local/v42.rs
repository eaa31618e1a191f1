//! The NFSv4.2 calls of the local backend (RFC 7862, RFC 8276): space reservation and
//! hole punching with `fallocate`, SEEK_DATA / SEEK_HOLE with `lseek`, and the `user.`
//! extended attributes with the `f*xattr` calls.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use bytes::Bytes;
use rustix::fs::{self as rfs, FallocateFlags, OFlags, SeekFrom, XattrFlags};
use rustix::io::Errno;

use super::attrs::ftype_of;
use super::descriptors::proc_path;
use super::errors::{map_errno, retry};
use super::LocalBackend;
use crate::{
    check_xattr_name, Advice, Attrs, BackendError, DirChange, FileKey, FileType, Result, SeekWhat,
    XattrSet, XATTR_SIZE_MAX,
};

/// The namespace RFC 8276 extended attributes live in; the protocol names them without
/// it (knfsd adds the same prefix).
const USER: &[u8] = b"user.";

/// The full `user.` name of a protocol name (checked by `check_xattr_name`).
fn user_name(name: &[u8]) -> Result<Vec<u8>> {
    check_xattr_name(name)?;
    let mut full = USER.to_vec();
    full.extend_from_slice(name);
    Ok(full)
}

fn map_xattr_errno(e: Errno) -> BackendError {
    match e {
        Errno::NODATA => BackendError::NoXattr,
        Errno::RANGE | Errno::TOOBIG => BackendError::XattrTooBig,
        other => map_errno(other),
    }
}

impl LocalBackend {
    /// `fallocate(mode)` on the regular file `key`, whose I/O descriptor is `fd`, then
    /// its attributes.
    fn fallocate(
        &self,
        fd: &OwnedFd,
        flags: FallocateFlags,
        offset: u64,
        len: u64,
    ) -> Result<Attrs> {
        let end = offset.checked_add(len).ok_or(BackendError::FileTooBig)?;
        if len == 0 {
            return Err(BackendError::Inval);
        }
        if end > i64::MAX as u64 {
            return Err(BackendError::FileTooBig);
        }
        retry(|| rfs::fallocate(fd, flags, offset, len)).map_err(map_errno)?;
        let st = rfs::fstat(fd).map_err(map_errno)?;
        Ok(self.attrs(&st, true))
    }

    pub(super) fn allocate_range(&self, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        let (fd, _) = self.io_fd(key, true)?;
        self.fallocate(&fd, FallocateFlags::empty(), offset, len)
    }

    pub(super) fn deallocate_range(&self, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        let (fd, st) = self.io_fd(key, true)?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        // Nothing to punch at or past the end of file (fallocate would accept it and
        // change nothing); a range crossing it is cut there.
        if offset >= size || len == 0 {
            return Ok(self.attrs(&st, false));
        }
        let len = len.min(size - offset);
        self.fallocate(
            &fd,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            offset,
            len,
        )
    }

    pub(super) fn seek_in(&self, key: &FileKey, offset: u64, what: SeekWhat) -> Result<u64> {
        let (fd, st) = self.io_fd(key, false)?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if offset >= size || offset > i64::MAX as u64 {
            return Err(BackendError::Nxio);
        }
        let pos = match what {
            SeekWhat::Data => SeekFrom::Data(offset),
            SeekWhat::Hole => SeekFrom::Hole(offset),
        };
        match retry(|| rfs::seek(&*fd, pos)) {
            Ok(p) => Ok(p),
            Err(Errno::NXIO) => Err(BackendError::Nxio),
            Err(e) => Err(map_errno(e)),
        }
    }

    pub(super) fn advise_range(
        &self,
        key: &FileKey,
        offset: u64,
        len: u64,
        advice: Advice,
    ) -> Result<bool> {
        let (fd, _) = self.io_fd(key, false)?;
        let advice = match advice {
            Advice::WillNeed => rfs::Advice::WillNeed,
            Advice::DontNeed => rfs::Advice::DontNeed,
        };
        retry(|| rfs::fadvise(&*fd, offset, std::num::NonZeroU64::new(len), advice))
            .map_err(map_errno)?;
        Ok(true)
    }

    /// A descriptor whose `f*xattr` calls reach the object: regular files and
    /// directories (the kernel refuses `user.` attributes on other types).
    fn xattr_fd(&self, key: &FileKey) -> Result<Arc<OwnedFd>> {
        let pfd = self.resolve(key)?;
        let st = self.stat_live(key, &pfd)?;
        match ftype_of(&st) {
            FileType::Regular => Ok(self.io_fd(key, false)?.0),
            FileType::Directory => {
                let fd = self
                    .fds(|| {
                        rfs::open(
                            proc_path(std::os::fd::AsFd::as_fd(&*pfd)).as_str(),
                            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                            rfs::Mode::empty(),
                        )
                    })
                    .map_err(map_errno)?;
                Ok(Arc::new(fd))
            }
            _ => Err(BackendError::Perm),
        }
    }

    pub(super) fn get_xattr(&self, key: &FileKey, name: &[u8]) -> Result<Bytes> {
        let full = user_name(name)?;
        let fd = self.xattr_fd(key)?;
        let mut buf = vec![0u8; XATTR_SIZE_MAX];
        let n = retry(|| rfs::fgetxattr(&*fd, full.as_slice(), &mut buf[..]))
            .map_err(map_xattr_errno)?;
        buf.truncate(n);
        Ok(Bytes::from(buf))
    }

    pub(super) fn set_xattr(
        &self,
        key: &FileKey,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<DirChange> {
        let full = user_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(BackendError::XattrTooBig);
        }
        let flags = match how {
            XattrSet::Either => XattrFlags::empty(),
            XattrSet::Create => XattrFlags::CREATE,
            XattrSet::Replace => XattrFlags::REPLACE,
        };
        self.xattr_change(key, |fd| rfs::fsetxattr(fd, full.as_slice(), value, flags))
    }

    pub(super) fn list_xattrs(&self, key: &FileKey) -> Result<Vec<Bytes>> {
        let fd = self.xattr_fd(key)?;
        // Sized by a query; grown and retried if names were added in between.
        loop {
            let want = retry(|| rfs::flistxattr_query(&*fd)).map_err(map_xattr_errno)?;
            let mut buf = vec![0u8; want.max(1)];
            match retry(|| rfs::flistxattr(&*fd, &mut buf[..])) {
                Ok(n) => {
                    buf.truncate(n);
                    let mut names: Vec<Bytes> = buf
                        .split(|&b| b == 0)
                        .filter_map(|n| n.strip_prefix(USER))
                        .filter(|n| !n.is_empty())
                        .map(Bytes::copy_from_slice)
                        .collect();
                    names.sort();
                    return Ok(names);
                }
                Err(Errno::RANGE) => continue,
                Err(e) => return Err(map_xattr_errno(e)),
            }
        }
    }

    pub(super) fn remove_xattr(&self, key: &FileKey, name: &[u8]) -> Result<DirChange> {
        let full = user_name(name)?;
        self.xattr_change(key, |fd| rfs::fremovexattr(fd, full.as_slice()))
    }

    /// Runs `change` on the object's xattr descriptor: the object's change before and
    /// after (not atomic: another process may change the file in between).
    fn xattr_change(
        &self,
        key: &FileKey,
        change: impl Fn(&OwnedFd) -> rustix::io::Result<()>,
    ) -> Result<DirChange> {
        let fd = self.xattr_fd(key)?;
        let change_of = |mutated| -> Result<u64> {
            Ok(self
                .attrs(&rfs::fstat(&*fd).map_err(map_errno)?, mutated)
                .change)
        };
        let before = change_of(false)?;
        retry(|| change(&fd)).map_err(map_xattr_errno)?;
        let after = change_of(true)?;
        Ok(DirChange {
            before,
            after,
            atomic: false,
        })
    }

    /// Whether the export's file system keeps `user.` attributes: probed once at open
    /// on an unnamed temporary file in the export root (nothing is left behind).
    pub(super) fn probe_xattrs(root: &OwnedFd) -> bool {
        let Ok(tmp) = rfs::openat(
            root,
            c".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            rfs::Mode::from_raw_mode(0o600),
        ) else {
            // No O_TMPFILE (or a read-only export): assume the common case.
            return true;
        };
        !matches!(
            rfs::fsetxattr(&tmp, "user.txnfs-probe", b"1", XattrFlags::empty()),
            Err(Errno::OPNOTSUPP)
        )
    }
}
