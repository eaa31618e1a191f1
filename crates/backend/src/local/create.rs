//! Creating a regular file: exclusive create, or opening what is already there as the
//! create mode says, and finishing a new file (size, owner, mode, verifier).

use std::ffi::CStr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::attrs::ftype_of;
use super::errors::map_errno;
use super::{lock, LocalBackend};
use crate::memory::verifier_times;
use crate::{Attrs, BackendError, CreateMode, Creds, FileKey, FileType, Result, SetAttrs};

impl LocalBackend {
    /// Creates or opens `name` in `dfd` (directory `dir`) as `mode` says; the flag is
    /// true when the file is new.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_inner(
        &self,
        dir: &FileKey,
        dfd: &OwnedFd,
        dst: &Stat,
        name: &CStr,
        mode: CreateMode,
        attrs: &SetAttrs,
        owner: &Creds,
    ) -> Result<(FileKey, Attrs, bool)> {
        // A few rounds in case the name is removed or created concurrently.
        for _ in 0..8 {
            let created = self.fds(|| {
                rfs::openat(
                    dfd,
                    name,
                    OFlags::RDWR
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC
                        | OFlags::NOCTTY,
                    Mode::from_raw_mode(0o600),
                )
            });
            match created {
                Ok(fd) => return self.finish_created(dir, dfd, dst, name, fd, mode, attrs, owner),
                Err(Errno::EXIST) => {}
                Err(e) => return Err(map_errno(e)),
            }
            let pfd = match self.open_child(dfd, name) {
                Ok(fd) => fd,
                Err(BackendError::NotFound) => continue,
                Err(e) => return Err(e),
            };
            let st = rfs::fstat(&pfd).map_err(map_errno)?;
            match ftype_of(&st) {
                FileType::Regular => {}
                FileType::Directory => return Err(BackendError::IsDir),
                FileType::Symlink if mode == CreateMode::Unchecked => {
                    return Err(BackendError::SymlinkLoop)
                }
                _ => return Err(BackendError::Exists),
            }
            let key = self.key_in_export(&pfd, &st, Some((dir, name)))?;
            match mode {
                CreateMode::Guarded => return Err(BackendError::Exists),
                CreateMode::Exclusive(verf) => {
                    let (a, m) = verifier_times(&verf);
                    if st.st_atime as i64 == a && st.st_mtime as i64 == m {
                        return Ok((key, self.attrs(&st, false), false));
                    }
                    return Err(BackendError::Exists);
                }
                CreateMode::Unchecked => {
                    let pfd = Arc::new(pfd);
                    lock(&self.paths).insert(key.clone(), pfd.clone());
                    let st = match attrs.size {
                        Some(size) => {
                            let (fd, _) = self.io_fd(&key, true)?;
                            rfs::ftruncate(&*fd, size).map_err(map_errno)?;
                            rfs::fstat(&*fd).map_err(map_errno)?
                        }
                        None => st,
                    };
                    let a = self.attrs(&st, attrs.size.is_some());
                    return Ok((key, a, false));
                }
            }
        }
        Err(BackendError::Io("create: name keeps changing".into()))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish_created(
        &self,
        dir: &FileKey,
        dfd: &OwnedFd,
        dst: &Stat,
        name: &CStr,
        fd: OwnedFd,
        mode: CreateMode,
        attrs: &SetAttrs,
        owner: &Creds,
    ) -> Result<(FileKey, Attrs, bool)> {
        let result = (|| {
            let exclusive = matches!(mode, CreateMode::Exclusive(_));
            // Size first: truncating sets mtime, which explicit times then override.
            if let Some(size) = attrs.size {
                rfs::ftruncate(&fd, size).map_err(map_errno)?;
            }
            let st = self.init_new(&fd, dst, owner, attrs, 0o644, !exclusive)?;
            if let CreateMode::Exclusive(verf) = mode {
                let (a, m) = verifier_times(&verf);
                let t = rfs::Timestamps {
                    last_access: rfs::Timespec {
                        tv_sec: a as _,
                        tv_nsec: 0,
                    },
                    last_modification: rfs::Timespec {
                        tv_sec: m as _,
                        tv_nsec: 0,
                    },
                };
                rfs::futimens(&fd, &t).map_err(map_errno)?;
            }
            let st = if exclusive {
                rfs::fstat(&fd).map_err(map_errno)?
            } else {
                st
            };
            let key = self.key_in_export(&fd, &st, Some((dir, name)))?;
            Ok((key, st))
        })();
        match result {
            Ok((key, st)) => {
                // Only the I/O cache: the key cache holds `O_PATH` descriptors alone, which
                // never stand in the way of a lease (`Backend::hold` keeps one of those for
                // as long as the file is open; a read-write one would refuse every lease).
                lock(&self.rw).insert(key.clone(), Arc::new(fd));
                let _ = self.dir_mutated(dfd);
                Ok((key, self.attrs(&st, true), true))
            }
            Err(e) => {
                let _ = rfs::unlinkat(dfd, name, AtFlags::empty());
                Err(e)
            }
        }
    }
}
