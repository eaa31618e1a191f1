//! Byte-range cloning for the local backend: `FICLONERANGE` where the file system shares
//! blocks (XFS, Btrfs), a plain copy elsewhere, and the probe that tells which.

use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{self as rfs, Mode, OFlags};
use rustix::io::Errno;

use crate::local::{map_errno, retry};
use crate::{BackendError, CloneMethod, Result};

/// `ioctl(dst, FICLONERANGE, {src, src_off, len, dst_off})`: share `len` bytes of `src`
/// with `dst` (XFS, Btrfs; offsets and length must be block-aligned, except a range
/// ending at the source's end of file).
pub(crate) fn ficlonerange(
    src: &OwnedFd,
    src_off: u64,
    dst: &OwnedFd,
    dst_off: u64,
    len: u64,
) -> rustix::io::Result<()> {
    let arg = libc::file_clone_range {
        src_fd: i64::from(src.as_raw_fd()),
        src_offset: src_off,
        src_length: len,
        dest_offset: dst_off,
    };
    retry(|| {
        // SAFETY: `arg` is a live, initialized `struct file_clone_range` that the kernel
        // only reads during the call; `dst` and `src` are open descriptors borrowed for
        // the call. FICLONERANGE takes exactly a pointer to that struct.
        let rc = unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONERANGE, &arg) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO))
        }
    })
}

/// Copies `len` bytes of `src` at `src_off` to `dst` at `dst_off` (the clone fallback):
/// `copy_file_range` first (the kernel copies without a trip through user space, and
/// keeps holes where the file system can), pread/pwrite for what it cannot do (another
/// file system before Linux 5.19, an old kernel).
pub(crate) fn copy_range(
    src: &OwnedFd,
    src_off: u64,
    dst: &OwnedFd,
    dst_off: u64,
    len: u64,
) -> Result<()> {
    let (mut so, mut d_o) = (src_off, dst_off);
    let mut left = len;
    while left > 0 {
        let want = usize::try_from(left.min(1 << 30)).unwrap_or(1 << 30);
        match retry(|| rustix::fs::copy_file_range(src, Some(&mut so), dst, Some(&mut d_o), want)) {
            Ok(0) => return Err(BackendError::Inval), // the source shrank meanwhile
            Ok(n) => left -= n as u64,
            Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                return copy_by_hand(src, so, dst, d_o, left);
            }
            Err(e) => return Err(map_errno(e)),
        }
    }
    Ok(())
}

/// [`copy_range`] that keeps the source's holes: only the data segments (found with
/// SEEK_DATA / SEEK_HOLE) are copied; a hole over existing bytes of the destination is
/// punched (or, where punching is refused, written as zeros), and the destination
/// reaches `dst_off + len` even when the range ends in a hole. An in-kernel copy
/// (`copy_file_range`) fills holes on ext4 and tmpfs; this is how a sparse file stays
/// sparse in a server-side COPY there.
pub(crate) fn copy_range_sparse(
    src: &OwnedFd,
    src_off: u64,
    dst: &OwnedFd,
    dst_off: u64,
    len: u64,
) -> Result<()> {
    use rustix::fs::{FallocateFlags, SeekFrom};
    let end = src_off + len;
    let dst_size = u64::try_from(rfs::fstat(dst).map_err(map_errno)?.st_size).unwrap_or(0);
    let to_dst = |at: u64| dst_off + (at - src_off);
    let mut pos = src_off;
    while pos < end {
        let data = match retry(|| rfs::seek(src, SeekFrom::Data(pos))) {
            Ok(d) => d.min(end),
            Err(Errno::NXIO) => end, // only a hole is left
            // No hole information here: copy the rest as it reads.
            Err(_) => return copy_range(src, pos, dst, to_dst(pos), end - pos),
        };
        if data > pos && to_dst(pos) < dst_size {
            // A hole over bytes the destination has: they must read as zeros.
            let at = to_dst(pos);
            let n = (data - pos).min(dst_size - at);
            let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            if retry(|| rfs::fallocate(dst, punch, at, n)).is_err() {
                copy_range(src, pos, dst, at, n)?;
            }
        }
        if data >= end {
            break;
        }
        let hole = match retry(|| rfs::seek(src, SeekFrom::Hole(data))) {
            Ok(h) => h.min(end),
            Err(e) => return Err(map_errno(e)),
        };
        copy_range(src, data, dst, to_dst(data), hole - data)?;
        pos = hole;
    }
    let want = dst_off + len;
    if want > u64::try_from(rfs::fstat(dst).map_err(map_errno)?.st_size).unwrap_or(0) {
        retry(|| rfs::ftruncate(dst, want)).map_err(map_errno)?;
    }
    Ok(())
}

/// pread/pwrite in 1 MiB pieces.
fn copy_by_hand(src: &OwnedFd, src_off: u64, dst: &OwnedFd, dst_off: u64, len: u64) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let mut buf = vec![0u8; CHUNK.min(len) as usize];
    let mut done = 0u64;
    while done < len {
        let want = (len - done).min(CHUNK) as usize;
        let n = retry(|| rustix::io::pread(src, &mut buf[..want], src_off + done))
            .map_err(map_errno)?;
        if n == 0 {
            return Err(BackendError::Inval); // the source shrank meanwhile
        }
        let mut w = 0usize;
        while w < n {
            let at = dst_off + done + w as u64;
            match retry(|| rustix::io::pwrite(dst, &buf[w..n], at)) {
                Ok(0) => return Err(BackendError::NoSpace),
                Ok(k) => w += k,
                Err(e) => return Err(map_errno(e)),
            }
        }
        done += n as u64;
    }
    Ok(())
}

/// Whether the export's file system shares blocks: clones one block between two unnamed
/// temporary files in the export root (`O_TMPFILE`: nothing is left behind). Any failure
/// (ext4 and tmpfs answer EOPNOTSUPP, a read-only export EROFS) means copying.
pub(crate) fn probe_reflink(root: &OwnedFd) -> CloneMethod {
    let tmp = || {
        rfs::openat(
            root,
            c".",
            OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
    };
    let probe = || -> rustix::io::Result<()> {
        let (a, b) = (tmp()?, tmp()?);
        let block = rfs::fstatvfs(root).map_or(4096, |v| v.f_bsize.clamp(512, 1 << 16));
        let data = vec![0x5au8; block as usize];
        let mut done = 0;
        while done < data.len() {
            done += retry(|| rustix::io::pwrite(&a, &data[done..], done as u64))?;
        }
        ficlonerange(&a, 0, &b, 0, block)
    };
    match probe() {
        Ok(()) => CloneMethod::Reflink,
        Err(e) => {
            tracing::debug!("export does not support FICLONERANGE ({e}): clone_range copies");
            CloneMethod::Copy
        }
    }
}
