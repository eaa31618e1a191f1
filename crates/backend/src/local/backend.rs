//! The [`Backend`] calls of the local backend, built from the helpers of the sibling
//! modules.

use std::ffi::CString;
use std::os::fd::AsFd;
use std::sync::Arc;

use bytes::Bytes;
use rustix::fs::{self as rfs, AtFlags, FileType as RFileType, Mode, OFlags};
use rustix::io::Errno;

use super::attrs::ftype_of;
use super::descriptors::cname;
use super::errors::{map_errno, map_errno_dir, retry};
use super::{lock, LocalBackend};
use crate::memory::check_symlink_target;
use crate::reflink::{copy_range_sparse, ficlonerange};
use crate::{
    Advice, Attrs, Backend, BackendError, CloneMethod, CreateMode, Created, DirChange, DirEntry,
    FileKey, FileType, FsStats, Linked, Made, NodeKind, OpCtx, RenameChange, Result, SeekWhat,
    SetAttrs, Watch, WatchKind, XattrChange, XattrSet,
};
use crate::{DirEvent, DirWatch};

/// The event of `name` being added, as the server's own change (ADR 0047).
fn added(name: &std::ffi::CStr) -> DirEvent {
    DirEvent::Added(Bytes::copy_from_slice(name.to_bytes()))
}

/// Largest read answered in one call (a shorter read is not end of file).
const MAX_READ: u32 = 16 << 20;
/// Reads of up to this many bytes tell end of file without a stat (`read`).
const UNSIZED_READ: usize = 64 << 10;
/// Reads below this many bytes share a per-thread buffer (`LocalBackend::read_small`).
const SHARED_READ: usize = 8 << 10;

impl Backend for LocalBackend {
    fn root(&self) -> Result<FileKey> {
        Ok(self.root_key.clone())
    }

    /// Table mode: the ids the COMPOUND handed out are in the table's redo log before
    /// its reply leaves; now and then a durable commit empties the log (ADR 0050).
    fn end_compound(&self, _cx: &OpCtx, _ok: bool) -> Result<()> {
        match &self.table {
            Some(t) => t.flush(),
            None => Ok(()),
        }
    }

    fn getattr(&self, _cx: &OpCtx, key: &FileKey) -> Result<Attrs> {
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        Ok(self.attrs(&st, false))
    }

    fn identity(&self, _cx: &OpCtx, key: &FileKey) -> Result<(FileType, u64)> {
        if let Some(known) = lock(&self.paths).identity(key) {
            return Ok(known);
        }
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        let known = (ftype_of(&st), st.st_ino as u64);
        lock(&self.paths).set_identity(key, known);
        Ok(known)
    }

    fn lookup(&self, _cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<(FileKey, Attrs)> {
        let name = cname(name)?;
        let dfd = self.resolve(dir)?;
        let fd = self
            .open_child(&dfd, &name)
            .map_err(|e| self.enoent_in(dir, &dfd, e))?;
        let st = rfs::fstat(&fd).map_err(map_errno)?;
        let key = self.key_in_export(&fd, &st, Some((dir, &name)))?;
        lock(&self.paths).insert(key.clone(), Arc::new(fd));
        Ok((key, self.attrs(&st, false)))
    }

    fn lookup_parent(&self, _cx: &OpCtx, dir: &FileKey) -> Result<(FileKey, Attrs)> {
        let (dfd, st) = self.dir_fd(dir)?;
        if st.st_dev as u64 == self.root_dev && st.st_ino as u64 == self.root_ino {
            return Err(BackendError::NotFound);
        }
        let fd = self
            .fds(|| {
                rfs::openat(
                    &*dfd,
                    c"..",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            })
            .map_err(map_errno)?;
        let pst = rfs::fstat(&fd).map_err(map_errno)?;
        let key = self.key_in_export(&fd, &pst, None)?;
        lock(&self.paths).insert(key.clone(), Arc::new(fd));
        Ok((key, self.attrs(&pst, false)))
    }

    fn setattr(&self, _cx: &OpCtx, key: &FileKey, attrs: &SetAttrs) -> Result<Attrs> {
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        if attrs.is_empty() {
            return Ok(self.attrs(&st, false));
        }
        if attrs.size.is_some() {
            match ftype_of(&st) {
                FileType::Regular => {}
                FileType::Directory => return Err(BackendError::IsDir),
                _ => return Err(BackendError::Inval),
            }
        }
        let owner_mode = SetAttrs {
            size: None,
            atime: None,
            mtime: None,
            ..attrs.clone()
        };
        self.apply_attrs(&fd, &st, &owner_mode, false)?;
        if let Some(size) = attrs.size {
            let (wfd, _) = self.io_fd(key, true)?;
            retry(|| rfs::ftruncate(&*wfd, size)).map_err(map_errno)?;
        }
        if attrs.atime.is_some() || attrs.mtime.is_some() {
            let times = SetAttrs {
                atime: attrs.atime,
                mtime: attrs.mtime,
                ..SetAttrs::default()
            };
            self.apply_attrs(&fd, &st, &times, true)?;
        }
        let st = rfs::fstat(&*fd).map_err(map_errno)?;
        Ok(self.attrs(&st, true))
    }

    fn read_piped(
        &self,
        _cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        count: u32,
    ) -> Result<Option<(txnfs_xdr::Piped, bool)>> {
        self.read_into_pipe(key, offset, count.min(MAX_READ))
    }

    fn read(&self, _cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)> {
        let count = count.min(MAX_READ) as usize;
        if offset > i64::MAX as u64 {
            // Past any file's end (and an offset the kernel would refuse).
            return Ok((Bytes::new(), true));
        }
        if count > UNSIZED_READ {
            // A large read sizes its buffer by the file: a 4 KiB file read with a
            // 1 MiB count gets a 4 KiB buffer.
            let (fd, st) = self.io_fd(key, false)?;
            let size = u64::try_from(st.st_size).unwrap_or(0);
            if offset >= size {
                return Ok((Bytes::new(), true));
            }
            // want <= MAX_READ (16 MiB), fits in usize.
            let want = (count as u64).min(size - offset) as usize;
            let mut buf = Vec::with_capacity(want);
            self.read_into(&fd, &mut buf, offset)?;
            buf.truncate(want);
            let got = buf.len();
            // A short read means the file shrank meanwhile: that is end of file too.
            let eof = got < want || offset + got as u64 >= size;
            return Ok((Bytes::from(buf), eof));
        }
        let fd = self.io_fd_unchecked(key, false)?;
        if count < SHARED_READ {
            return self.read_small(&fd, count, offset);
        }
        // A small read asks for one byte more instead of an `fstat`: getting it says the
        // file goes on past this read, not getting it says the read reached the end.
        let mut buf = Vec::with_capacity(count + 1);
        self.read_into(&fd, &mut buf, offset)?;
        let eof = buf.len() <= count;
        buf.truncate(count);
        Ok((Bytes::from(buf), eof))
    }

    fn write(
        &self,
        _cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        data: &[u8],
        sync: bool,
    ) -> Result<Attrs> {
        offset
            .checked_add(data.len() as u64)
            .filter(|&end| end <= i64::MAX as u64)
            .ok_or(BackendError::FileTooBig)?;
        let fd = self.io_fd_unchecked(key, true)?;
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            match retry(|| rustix::io::pwrite(&*fd, &data[done..], pos)) {
                Ok(0) => return Err(BackendError::NoSpace),
                Ok(n) => done += n,
                Err(e) => return Err(map_errno(e)),
            }
        }
        if sync {
            retry(|| rfs::fdatasync(&*fd)).map_err(map_errno)?;
            self.table_durable()?;
        }
        let st = rfs::fstat(&*fd).map_err(map_errno)?;
        Ok(self.attrs(&st, true))
    }

    fn commit(&self, _cx: &OpCtx, key: &FileKey) -> Result<()> {
        let pfd = self.resolve(key)?;
        let st = self.stat_live(key, &pfd)?;
        match ftype_of(&st) {
            FileType::Regular => {
                let (fd, _) = self.io_fd(key, false)?;
                retry(|| rfs::fsync(&*fd)).map_err(map_errno)?;
            }
            FileType::Directory => {
                let fd = self.open_dir_for_reading(pfd.as_fd())?;
                retry(|| rfs::fsync(&fd)).map_err(map_errno)?;
            }
            _ => return Err(BackendError::Inval),
        }
        self.table_durable()
    }

    fn create_file(
        &self,
        cx: &OpCtx,
        dir: &FileKey,
        name: &[u8],
        mode: CreateMode,
        attrs: &SetAttrs,
    ) -> Result<Created> {
        let name = cname(name)?;
        let (dfd, dst) = self.dir_fd(dir)?;
        let before = self.attrs(&dst, false).change;
        let expect = self.dirs.expect(&[(dir, &name)]);
        let (key, attrs, created) =
            self.create_inner(dir, &dfd, &dst, &name, mode, attrs, &cx.creds)?;
        if created {
            expect.made(&[(dir.clone(), added(&name))]);
        }
        // `finish_created` recorded the mutation: read the value it left. Opening an
        // existing file changed nothing.
        let after = if created {
            self.dir_before(&dfd)
        } else {
            before
        };
        let dir = DirChange {
            before,
            after,
            atomic: false,
        };
        Ok(Created {
            key,
            attrs,
            created,
            dir,
        })
    }

    fn make_node(
        &self,
        cx: &OpCtx,
        dir: &FileKey,
        name: &[u8],
        kind: &NodeKind,
        attrs: &SetAttrs,
    ) -> Result<Made> {
        let owner = &cx.creds;
        let name = cname(name)?;
        if attrs.size.is_some() {
            return Err(BackendError::Inval);
        }
        let (dfd, dst) = self.dir_fd(dir)?;
        let before = self.attrs(&dst, false).change;
        let private = Mode::from_raw_mode(0o600);
        let expect = self.dirs.expect(&[(dir, &name)]);
        let (made, default_mode) = match kind {
            NodeKind::Directory => (
                rfs::mkdirat(&*dfd, &*name, Mode::from_raw_mode(0o700)),
                0o755,
            ),
            NodeKind::Symlink(target) => {
                check_symlink_target(target)?;
                let target = CString::new(target.as_ref()).map_err(|_| BackendError::Inval)?;
                (rfs::symlinkat(&*target, &*dfd, &*name), 0o777)
            }
            NodeKind::Fifo => (
                rfs::mknodat(&*dfd, &*name, RFileType::Fifo, private, 0),
                0o644,
            ),
            NodeKind::Socket => (
                rfs::mknodat(&*dfd, &*name, RFileType::Socket, private, 0),
                0o644,
            ),
            NodeKind::BlockDev(ma, mi) => (
                rfs::mknodat(
                    &*dfd,
                    &*name,
                    RFileType::BlockDevice,
                    private,
                    rfs::makedev(*ma, *mi),
                ),
                0o644,
            ),
            NodeKind::CharDev(ma, mi) => (
                rfs::mknodat(
                    &*dfd,
                    &*name,
                    RFileType::CharacterDevice,
                    private,
                    rfs::makedev(*ma, *mi),
                ),
                0o644,
            ),
        };
        made.map_err(map_errno)?;
        let is_dir = matches!(kind, NodeKind::Directory);
        let result = (|| {
            let fd = self.open_child(&dfd, &name)?;
            let st = self.init_new(&fd, &dst, owner, attrs, default_mode, true)?;
            let key = self.key_in_export(&fd, &st, Some((dir, &name)))?;
            Ok((fd, st, key))
        })();
        match result {
            Ok((fd, st, key)) => {
                expect.made(&[(dir.clone(), added(&name))]);
                lock(&self.paths).insert(key.clone(), Arc::new(fd));
                let dir = self.dir_change(&dfd, before);
                Ok(Made {
                    key,
                    attrs: self.attrs(&st, true),
                    dir,
                })
            }
            Err(e) => {
                let flags = if is_dir {
                    AtFlags::REMOVEDIR
                } else {
                    AtFlags::empty()
                };
                let _ = rfs::unlinkat(&*dfd, &*name, flags);
                Err(e)
            }
        }
    }

    fn remove(&self, _cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<DirChange> {
        let name = cname(name)?;
        let dfd = self.resolve(dir)?;
        let before = self.dir_before(&dfd);
        let victim = self.key_before_change(&dfd, &name);
        let expect = self.dirs.expect(&[(dir, &name)]);
        match retry(|| rfs::unlinkat(&*dfd, &*name, AtFlags::empty())) {
            Ok(()) => {}
            Err(Errno::ISDIR) => retry(|| rfs::unlinkat(&*dfd, &*name, AtFlags::REMOVEDIR))
                .map_err(|e| self.enoent_in(dir, &dfd, map_errno_dir(e)))?,
            Err(e) => return Err(self.enoent_in(dir, &dfd, map_errno(e))),
        }
        expect.made(&[(
            dir.clone(),
            DirEvent::Removed(Bytes::copy_from_slice(name.to_bytes())),
        )]);
        if let Some((k, fd)) = victim {
            self.after_unlink(&k, fd.as_ref());
        }
        Ok(self.dir_change(&dfd, before))
    }

    fn rename(
        &self,
        _cx: &OpCtx,
        from_dir: &FileKey,
        from: &[u8],
        to_dir: &FileKey,
        to: &[u8],
    ) -> Result<RenameChange> {
        let from = cname(from)?;
        let to = cname(to)?;
        let ffd = self.resolve(from_dir)?;
        let tfd = self.resolve(to_dir)?;
        let (from_before, to_before) = (self.dir_before(&ffd), self.dir_before(&tfd));
        let victim = self.key_before_change(&tfd, &to);
        let moved = self.key_before_change(&ffd, &from).map(|(k, _)| k);
        let expect = self.dirs.expect(&[(from_dir, &from), (to_dir, &to)]);
        retry(|| rfs::renameat(&*ffd, &*from, &*tfd, &*to)).map_err(|e| {
            let e = self.enoent_in(from_dir, &ffd, map_errno_dir(e));
            self.enoent_in(to_dir, &tfd, e)
        })?;
        let (from_name, to_name) = (
            Bytes::copy_from_slice(from.to_bytes()),
            Bytes::copy_from_slice(to.to_bytes()),
        );
        let one_object = moved.is_some() && victim.as_ref().map(|(k, _)| k) == moved.as_ref();
        if one_object {
            // (renameat made no event either.)
            expect.made(&[]);
        } else if from_dir == to_dir {
            expect.made(&[(
                from_dir.clone(),
                DirEvent::Renamed {
                    from: from_name,
                    to: to_name,
                },
            )]);
        } else {
            expect.made(&[
                (from_dir.clone(), DirEvent::Removed(from_name)),
                (to_dir.clone(), DirEvent::Added(to_name)),
            ]);
        }
        if one_object {
            // Source and target are one object (the same name, or two links to one
            // file): renameat did nothing, and RFC 8881 §18.26.3 wants NFS4_OK with
            // nothing changed. dir_change would bump the change values as after any
            // mutation, so report both directories as they were.
            let unchanged = |before| DirChange {
                before,
                after: before,
                atomic: false,
            };
            return Ok(RenameChange {
                from: unchanged(from_before),
                to: unchanged(to_before),
            });
        }
        if let Some((k, fd)) = victim {
            if Some(&k) != moved.as_ref() {
                self.after_unlink(&k, fd.as_ref());
            }
        }
        if let Some(k) = &moved {
            if let Err(e) = self.table_moved(k, to_dir, &to) {
                tracing::warn!(error = %e, "handle table: cannot record a rename");
            }
        }
        let from_change = self.dir_change(&ffd, from_before);
        let to_change = if from_dir == to_dir {
            // One directory, one mutation: both sides report the same values.
            from_change
        } else {
            self.dir_change(&tfd, to_before)
        };
        if let Some(k) = moved {
            if let Ok(fd) = self.resolve(&k) {
                if let Ok(st) = rfs::fstat(&*fd) {
                    let _ = self.attrs(&st, true);
                }
            }
        }
        Ok(RenameChange {
            from: from_change,
            to: to_change,
        })
    }

    fn link(&self, _cx: &OpCtx, file: &FileKey, dir: &FileKey, name: &[u8]) -> Result<Linked> {
        let name = cname(name)?;
        let fd = self.resolve(file)?;
        let st = self.stat_live(file, &fd)?;
        if ftype_of(&st) == FileType::Directory {
            return Err(BackendError::IsDir);
        }
        let dfd = self.resolve(dir)?;
        let before = self.dir_before(&dfd);
        let expect = self.dirs.expect(&[(dir, &name)]);
        retry(|| rfs::linkat(&*fd, c"", &*dfd, &*name, AtFlags::EMPTY_PATH)).map_err(|e| {
            let e = self.enoent_in(file, &fd, map_errno(e));
            self.enoent_in(dir, &dfd, e)
        })?;
        expect.made(&[(dir.clone(), added(&name))]);
        let dir = self.dir_change(&dfd, before);
        let st = rfs::fstat(&*fd).map_err(map_errno)?;
        Ok(Linked {
            attrs: self.attrs(&st, true),
            dir,
        })
    }

    fn readlink(&self, _cx: &OpCtx, key: &FileKey) -> Result<Bytes> {
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        if ftype_of(&st) != FileType::Symlink {
            return Err(BackendError::NotSymlink);
        }
        let target = rfs::readlinkat(&*fd, c"", Vec::new()).map_err(map_errno)?;
        Ok(Bytes::from(target.into_bytes()))
    }

    fn readdir(
        &self,
        _cx: &OpCtx,
        dir: &FileKey,
        cookie: u64,
        max_entries: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let (dfd, _) = self.dir_fd(dir)?;
        self.readdir_inner(dir, &dfd, cookie, max_entries)
    }

    fn statfs(&self, _cx: &OpCtx, key: &FileKey) -> Result<FsStats> {
        let fd = self.resolve(key)?;
        let s = rfs::fstatvfs(&*fd).map_err(map_errno)?;
        let frsize = s.f_frsize;
        Ok(FsStats {
            total_bytes: s.f_blocks.saturating_mul(frsize),
            free_bytes: s.f_bfree.saturating_mul(frsize),
            avail_bytes: s.f_bavail.saturating_mul(frsize),
            total_files: s.f_files,
            free_files: s.f_ffree,
            avail_files: s.f_favail,
            max_name_len: u32::try_from(s.f_namemax).unwrap_or(u32::MAX),
        })
    }

    fn clone_range(
        &self,
        _cx: &OpCtx,
        src: &FileKey,
        src_off: u64,
        dst: &FileKey,
        dst_off: u64,
        len: u64,
    ) -> Result<CloneMethod> {
        let (sfd, sst) = self.io_fd(src, false)?;
        let (dfd, _) = self.io_fd(dst, true)?;
        let size = u64::try_from(sst.st_size).unwrap_or(0);
        let len = if len == 0 {
            size.checked_sub(src_off).ok_or(BackendError::Inval)?
        } else {
            len
        };
        let src_end = src_off.checked_add(len).ok_or(BackendError::Inval)?;
        let dst_end = dst_off.checked_add(len).ok_or(BackendError::FileTooBig)?;
        if src_end > size || dst_end > i64::MAX as u64 {
            return Err(BackendError::Inval);
        }
        if src == dst && src_off < dst_end && dst_off < src_end {
            return Err(BackendError::Inval);
        }
        let method = if self.clone == CloneMethod::Reflink
            && ficlonerange(&sfd, src_off, &dfd, dst_off, len).is_ok()
        {
            CloneMethod::Reflink
        } else {
            // Unaligned ranges (EINVAL), another file system, or no reflink support.
            copy_range_sparse(&sfd, src_off, &dfd, dst_off, len)?;
            CloneMethod::Copy
        };
        let st = rfs::fstat(&*dfd).map_err(map_errno)?;
        let _ = self.attrs(&st, true);
        Ok(method)
    }

    fn clone_method(&self) -> CloneMethod {
        self.clone
    }

    fn hold(&self, _cx: &OpCtx, key: &FileKey) -> Result<()> {
        let fd = self.resolve(key)?;
        self.stat_live(key, &fd)?;
        let mut held = lock(&self.held);
        held.entry(key.clone()).or_insert_with(|| (fd, 0)).1 += 1;
        Ok(())
    }

    /// A directory is inside when walking `..` from it reaches the export root before
    /// the root of its file system. A handle names no parent of any other object (and a
    /// file may have names in several directories), so for those the check is that the
    /// object is on the export's file system and mount.
    fn peek_size(&self, dir: &FileKey, name: &[u8]) -> Option<u64> {
        let name = cname(name).ok()?;
        let dfd = self.resolve(dir).ok()?;
        let st = rfs::statat(&*dfd, &name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (ftype_of(&st) == FileType::Regular).then(|| u64::try_from(st.st_size).unwrap_or(0))
    }

    fn contains(&self, key: &FileKey) -> Result<bool> {
        let fd = self.resolve(key)?;
        let st = rfs::fstat(&*fd).map_err(map_errno)?;
        if !self.on_export_mount(&fd, &st) {
            return Ok(false);
        }
        if ftype_of(&st) != FileType::Directory {
            return Ok(true);
        }
        let mut at = (st.st_dev as u64, st.st_ino as u64);
        let mut dir: Option<std::os::fd::OwnedFd> = None;
        // Deeper than any real tree: a bound rather than trust in the walk ending.
        for _ in 0..4096 {
            if at == (self.root_dev, self.root_ino) {
                return Ok(true);
            }
            let from = dir.as_ref().map(|d| d.as_fd()).unwrap_or(fd.as_fd());
            let up = self
                .fds(|| {
                    rfs::openat(
                        from,
                        c"..",
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                })
                .map_err(map_errno)?;
            let ust = rfs::fstat(&up).map_err(map_errno)?;
            let next = (ust.st_dev as u64, ust.st_ino as u64);
            if next == at || ust.st_dev as u64 != self.root_dev {
                // The root of the file system (or of the process) or another device,
                // and the export root not met on the way.
                return Ok(false);
            }
            at = next;
            dir = Some(up);
        }
        Ok(false)
    }

    fn release(&self, _cx: &OpCtx, key: &FileKey) {
        let last = {
            let mut held = lock(&self.held);
            match held.get_mut(key) {
                Some((_, n)) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => held.remove(key).is_some(),
                None => false,
            }
        };
        if last {
            // An unlinked object is freed once its last descriptor closes: the caches'.
            self.forget_if_unlinked(key);
        }
    }

    fn watch_file(&self, _cx: &OpCtx, key: &FileKey, kind: WatchKind) -> Result<Option<Watch>> {
        self.watch(key, kind)
    }

    fn watch_dir(&self, _cx: &OpCtx, key: &FileKey) -> Result<Option<DirWatch>> {
        self.watch_directory(key)
    }

    fn allocate(&self, _cx: &OpCtx, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        self.allocate_range(key, offset, len)
    }

    fn deallocate(&self, _cx: &OpCtx, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        self.deallocate_range(key, offset, len)
    }

    fn seek(&self, _cx: &OpCtx, key: &FileKey, offset: u64, what: SeekWhat) -> Result<u64> {
        self.seek_in(key, offset, what)
    }

    fn advise(
        &self,
        _cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        len: u64,
        advice: Advice,
    ) -> Result<bool> {
        self.advise_range(key, offset, len, advice)
    }

    fn xattr_support(&self) -> bool {
        self.xattrs
    }

    fn getxattr(&self, _cx: &OpCtx, key: &FileKey, name: &[u8]) -> Result<Bytes> {
        self.get_xattr(key, name)
    }

    fn setxattr(
        &self,
        _cx: &OpCtx,
        key: &FileKey,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<XattrChange> {
        self.set_xattr(key, name, value, how)
    }

    fn listxattrs(&self, _cx: &OpCtx, key: &FileKey) -> Result<Vec<Bytes>> {
        self.list_xattrs(key)
    }

    fn removexattr(&self, _cx: &OpCtx, key: &FileKey, name: &[u8]) -> Result<XattrChange> {
        self.remove_xattr(key, name)
    }
}
