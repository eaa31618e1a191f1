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

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use rustix::io::Errno;

use super::errors::{map_errno, retry};
use super::LocalBackend;
use crate::Result;

/// Reads of up to this many bytes may block inline where `RWF_NOWAIT` is missing: one
/// small disk read costs less than moving the runtime's other work away.
const SMALL_READ: usize = 64 << 10;

/// Small reads share a buffer of this size per thread ([`LocalBackend::read_small`]).
const ARENA_BYTES: usize = 32 << 10;

thread_local! {
    /// Where this thread's small reads land: each read's bytes are split off it, so
    /// a 4 KiB READ costs no allocation of its own. The buffer is reused whole once
    /// every read split off it has been dropped (sent), and replaced by a new one
    /// while some are still held; a held read keeps at most `ARENA_BYTES` alive.
    static ARENA: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

impl LocalBackend {
    /// Reads into `buf`'s spare capacity from `fd` at `offset` until it is full or the
    /// file ends (`buf` starts empty; its length is then the bytes read). The buffer is
    /// never zero-filled first: on a 1 MiB READ that pass cost about 5 % of the server's
    /// CPU.
    pub(super) fn read_into(&self, fd: &OwnedFd, buf: &mut Vec<u8>, offset: u64) -> Result<()> {
        let n = self.read_window(fd, buf.spare_capacity_mut(), offset)?;
        // SAFETY: `read_window` initialised the first `n` bytes of the spare capacity
        // (`n` is at most its length), and `buf` was empty.
        unsafe { buf.set_len(n) };
        Ok(())
    }

    /// Up to `count` bytes at `offset` (`count` at most a quarter of [`ARENA_BYTES`]),
    /// read into this thread's shared buffer, and whether the read reached the end of
    /// the file: it asks for one byte more instead of an `fstat`, and getting it says
    /// the file goes on past this read.
    pub(super) fn read_small(
        &self,
        fd: &OwnedFd,
        count: usize,
        offset: u64,
    ) -> Result<(Bytes, bool)> {
        ARENA.with_borrow_mut(|arena| {
            arena.clear();
            if arena.capacity() < count + 1 {
                // Reclaims the whole buffer when no read split off it is held any
                // more, else allocates a new one of the first one's size.
                arena.reserve(ARENA_BYTES.max(count + 1));
            }
            let n = self.read_window(fd, &mut arena.spare_capacity_mut()[..count + 1], offset)?;
            // SAFETY: `read_window` initialised the first `n` bytes of the spare
            // capacity, and the arena was empty.
            unsafe { arena.set_len(n) };
            let data = arena.split_to(n.min(count)).freeze();
            Ok((data, n <= count))
        })
    }

    /// Reads into `window` from `fd` at `offset` until it is full or the file ends;
    /// returns how many bytes it initialised, from its start.
    fn read_window(
        &self,
        fd: &OwnedFd,
        window: &mut [MaybeUninit<u8>],
        offset: u64,
    ) -> Result<usize> {
        let mut got = 0;
        if self.nowait_reads.load(Ordering::Relaxed) {
            while got < window.len() {
                match pread_nowait(fd, &mut window[got..], offset + got as u64) {
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
            if got == window.len() {
                return Ok(got);
            }
        } else if window.len() <= SMALL_READ {
            return read_plain(fd, window, offset, got);
        }
        crate::blocking::may_block(|| read_plain(fd, window, offset, got))
    }
}

/// One `preadv2(RWF_NOWAIT)` into `window`; returns the bytes read (initialised from
/// the window's start).
fn pread_nowait(
    fd: &OwnedFd,
    window: &mut [MaybeUninit<u8>],
    pos: u64,
) -> rustix::io::Result<usize> {
    let iov = libc::iovec {
        iov_base: window.as_mut_ptr().cast(),
        iov_len: window.len(),
    };
    // SAFETY: `iov` describes `window`, memory we hold exclusively (`&mut`) through the
    // call. The kernel writes at most `iov_len` bytes there and returns how many, or -1
    // having written nothing we count.
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
    Ok(n as usize)
}

/// Fills the rest of `window` after its first `got` (initialised) bytes with plain
/// (blocking) reads; returns the bytes initialised from its start.
fn read_plain(
    fd: &OwnedFd,
    window: &mut [MaybeUninit<u8>],
    offset: u64,
    mut got: usize,
) -> Result<usize> {
    while got < window.len() {
        let pos = offset + got as u64;
        match retry(|| rustix::io::pread(fd, &mut window[got..], pos).map(|(read, _)| read.len())) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(map_errno(e)),
        }
    }
    Ok(got)
}
