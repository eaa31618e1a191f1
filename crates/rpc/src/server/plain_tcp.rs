//! What only a plain TCP connection's reader can do, through the socket itself: the
//! receive low-water mark for large records and busy polling's non-blocking `recv`
//! (ADR 0057 addenda). Each `unsafe` block here is a socket call, argued beside it.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;

use tokio::net::TcpStream;

use super::Touching;

/// A non-blocking read of a plain TCP connection (busy polling), noting activity as
/// `Touching` does.
fn try_read_now(
    rd: &Touching<tokio::net::tcp::OwnedReadHalf>,
    buf: &mut bytes::BytesMut,
) -> std::io::Result<usize> {
    use bytes::BufMut;
    // Not tokio's `try_read`: it answers `WouldBlock` without a system call until the
    // reactor (which a spinning worker does not run) sees the socket readable again.
    let stream: &TcpStream = rd.io.as_ref();
    let spare = buf.spare_capacity_mut();
    if spare.is_empty() {
        return Err(std::io::ErrorKind::WouldBlock.into());
    }
    // SAFETY: `recv` writes at most `spare.len()` bytes into the buffer's spare
    // capacity, which `spare` borrows mutably for the call; the descriptor is borrowed
    // from the live stream.
    let got = unsafe {
        libc::recv(
            stream.as_fd().as_raw_fd(),
            spare.as_mut_ptr().cast(),
            spare.len(),
            libc::MSG_DONTWAIT,
        )
    };
    let n = usize::try_from(got).map_err(|_| std::io::Error::last_os_error())?;
    // SAFETY: the kernel initialized the first `n` bytes of the spare capacity.
    unsafe { buf.advance_mut(n) };
    if n > 0 {
        rd.state.touch(&rd.shared);
    }
    Ok(n)
}

/// Whether the connection has nothing in progress (busy polling spins only then).
fn connection_idle<R>(rd: &Touching<R>) -> bool {
    !rd.state.busy(rd.shared.max_in_flight)
}

/// Takes one of the server's places for a spinning reader (busy polling holds a
/// runtime worker while it spins: at most half the cores' worth spin at once).
fn claim_spinner<R>(rd: &Touching<R>) -> bool {
    let max = rd.shared.max_spinners;
    rd.shared
        .spinners
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

fn release_spinner<R>(rd: &Touching<R>) {
    rd.shared.spinners.fetch_sub(1, Ordering::AcqRel);
}

/// What only a plain TCP connection's reader can do.
pub(super) struct PlainTcp<R> {
    pub(super) lowat: crate::record::SetLowat<R>,
    pub(super) try_read: crate::record::TryRead<R>,
    pub(super) idle: fn(&R) -> bool,
    pub(super) claim: fn(&R) -> bool,
    pub(super) release: fn(&R),
}

pub(super) const PLAIN_TCP: PlainTcp<Touching<tokio::net::tcp::OwnedReadHalf>> = PlainTcp {
    lowat: set_lowat,
    try_read: try_read_now,
    idle: connection_idle,
    claim: claim_spinner,
    release: release_spinner,
};

/// `SO_RCVLOWAT` of a plain TCP connection's socket (a failure only costs wakeups).
fn set_lowat(rd: &Touching<tokio::net::tcp::OwnedReadHalf>, bytes: usize) {
    set_rcvlowat(rd.io.as_ref(), bytes);
}

/// `SO_RCVLOWAT` of the client's side of a plain TCP connection (ADR 0063: a 1 MiB
/// reply wakes its reader once, not for every few segments).
pub(crate) fn set_client_lowat(rd: &tokio::net::tcp::OwnedReadHalf, bytes: usize) {
    set_rcvlowat(rd.as_ref(), bytes);
}

/// `SO_RCVLOWAT` of `stream` (a failure only costs wakeups).
fn set_rcvlowat(stream: &TcpStream, bytes: usize) {
    let fd = stream.as_fd();
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fd` is borrowed from the live stream for the call; the option value
    // points to a c_int on this stack frame and its exact size is passed.
    let _ = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}
