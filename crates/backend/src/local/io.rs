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

use std::io::IoSliceMut;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use rustix::io::{Errno, ReadWriteFlags};

use super::errors::{map_errno, retry};
use super::LocalBackend;
use crate::Result;

/// Reads of up to this many bytes may block inline where `RWF_NOWAIT` is missing: one
/// small disk read costs less than moving the runtime's other work away.
const SMALL_READ: usize = 64 << 10;

impl LocalBackend {
    /// Fills `buf` from `fd` at `offset`; the bytes read (fewer at end of file).
    pub(super) fn read_into(&self, fd: &OwnedFd, buf: &mut [u8], offset: u64) -> Result<usize> {
        let mut got = 0usize;
        if self.nowait_reads.load(Ordering::Relaxed) {
            while got < buf.len() {
                let pos = offset + got as u64;
                let mut iov = [IoSliceMut::new(&mut buf[got..])];
                match rustix::io::preadv2(fd, &mut iov, pos, ReadWriteFlags::NOWAIT) {
                    Ok(0) => return Ok(got),
                    Ok(n) => got += n,
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
            if got == buf.len() {
                return Ok(got);
            }
        } else if buf.len() <= SMALL_READ {
            return read_plain(fd, buf, offset, 0);
        }
        crate::blocking::may_block(|| read_plain(fd, buf, offset, got))
    }
}

/// Fills `buf[got..]` with plain (blocking) reads: the bytes read in all.
fn read_plain(fd: &OwnedFd, buf: &mut [u8], offset: u64, mut got: usize) -> Result<usize> {
    while got < buf.len() {
        let pos = offset + got as u64;
        match retry(|| rustix::io::pread(fd, &mut buf[got..], pos)) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(map_errno(e)),
        }
    }
    Ok(got)
}
