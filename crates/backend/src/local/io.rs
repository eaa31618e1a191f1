//! Reads run to completion where the data is cached (seed 004, Tyche): the server
//! runs a small READ on the thread that received it (ADR 0040), and only a read that
//! would wait for the disk moves off it.
//!
//! A read first takes what the page cache holds without blocking (`preadv2` with
//! `RWF_NOWAIT`); what is left comes from the disk where the thread may block
//! ([`crate::blocking::may_block`]: on a runtime worker, `block_in_place`, so the
//! runtime moves its other work to another thread first). A file system without
//! `RWF_NOWAIT` reads plainly: inline for small reads, as before, and through
//! `may_block` for large ones.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use rustix::buffer::spare_capacity;
use rustix::io::Errno;

use super::errors::{map_errno, retry};
use super::LocalBackend;
use crate::Result;

/// Reads of up to this many bytes may block inline where `RWF_NOWAIT` is missing: one
/// small disk read costs less than moving the runtime's other work away.
const SMALL_READ: usize = 64 << 10;

impl LocalBackend {
    /// Reads into `buf`'s spare capacity from `fd` at `offset` until it is full or the
    /// file ends (`buf` starts empty; its length is then the bytes read). The buffer is
    /// never zero-filled first: on a 1 MiB READ that pass cost about 5 % of the server's
    /// CPU.
    pub(super) fn read_into(&self, fd: &OwnedFd, buf: &mut Vec<u8>, offset: u64) -> Result<()> {
        if self.nowait_reads.load(Ordering::Relaxed) {
            while buf.len() < buf.capacity() {
                let pos = offset + buf.len() as u64;
                match pread_nowait(fd, buf, pos) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(Errno::INTR) => {}
                    // The rest is not cached: read it where the thread may block.
                    Err(Errno::AGAIN) => break,
                    // No RWF_NOWAIT here (or no preadv2): plain reads from now on.
                    Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::INVAL) => {
                        self.nowait_reads.store(false, Ordering::Relaxed);
                        break;
                    }
                    Err(e) => return Err(map_errno(e)),
                }
            }
            if buf.len() == buf.capacity() {
                return Ok(());
            }
        } else if buf.capacity() <= SMALL_READ {
            return read_plain(fd, buf, offset);
        }
        crate::blocking::may_block(|| read_plain(fd, buf, offset))
    }
}

/// One `preadv2(RWF_NOWAIT)` into `buf`'s spare capacity; `buf` grows by the bytes read.
fn pread_nowait(fd: &OwnedFd, buf: &mut Vec<u8>, pos: u64) -> rustix::io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    let iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // SAFETY: `iov` describes `spare`, memory `buf` owns and nothing else can touch while
    // we hold `&mut buf`; it lives through the call. The kernel writes at most `iov_len`
    // bytes there and returns how many, or -1 having written nothing we count.
    let n = unsafe {
        libc::preadv2(
            fd.as_raw_fd(),
            &iov,
            1,
            pos as libc::off_t,
            libc::RWF_NOWAIT,
        )
    };
    if n < 0 {
        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO));
    }
    let n = n as usize;
    // SAFETY: the kernel initialised exactly the `n` bytes after the old length, and
    // `n <= spare.len()`, so the new length is within the capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Fills the rest of `buf`'s capacity with plain (blocking) reads.
fn read_plain(fd: &OwnedFd, buf: &mut Vec<u8>, offset: u64) -> Result<()> {
    while buf.len() < buf.capacity() {
        let pos = offset + buf.len() as u64;
        match retry(|| rustix::io::pread(fd, spare_capacity(buf), pos)) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Err(map_errno(e)),
        }
    }
    Ok(())
}
