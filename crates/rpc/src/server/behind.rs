//! Whether calls wait behind the one running on its connection's reader (ADR 0062
//! addendum). A call that runs inline (ADR 0057) and must wait — a request held for a
//! recall — keeps everything after it on its connection unread. It can ask whether
//! anything has arrived on the socket since, and give way (NFS4ERR_DELAY) so that the
//! calls behind it are read, instead of holding them for the whole recall wait.

use std::cell::Cell;
use std::os::fd::RawFd;

thread_local! {
    /// The socket of the connection whose reader is polling a call on this thread.
    static READER_SOCKET: Cell<Option<RawFd>> = const { Cell::new(None) };
}

/// Restores the thread's previous socket when a poll ends, also by a panic.
struct Restore(Option<RawFd>);

impl Drop for Restore {
    fn drop(&mut self) {
        READER_SOCKET.with(|s| s.set(self.0));
    }
}

/// Run `f` (one synchronous poll of a call on its connection's reader) with `sock`, the
/// connection's socket, known to [`calls_waiting_behind`].
pub(crate) fn polling<T>(sock: RawFd, f: impl FnOnce() -> T) -> T {
    let _restore = Restore(READER_SOCKET.with(|s| s.replace(Some(sock))));
    f()
}

/// Whether the current call runs on its connection's reader (where a wait keeps the
/// calls behind it unread), without looking at the socket.
pub fn on_connection_reader() -> bool {
    READER_SOCKET.with(|s| s.get()).is_some()
}

/// Whether bytes have arrived on the socket of the connection whose reader runs the
/// current call, unread: another call waits behind this one (or the peer closed).
/// `None` when the current call does not run on its connection's reader (a task of its
/// own, the blocking pool), where waiting delays no other call.
pub fn calls_waiting_behind() -> Option<bool> {
    let fd = READER_SOCKET.with(|s| s.get())?;
    let mut byte = 0u8;
    // SAFETY: `fd` is set only during the synchronous poll of a call on the reader task
    // of the connection that owns it (`polling`, called from `Connection::serve`, which
    // holds the connection's read half across that poll, and the descriptor closes
    // only when both halves are dropped), so it names that live socket for this call.
    // `recv` writes at most one byte into `byte`, a local, and with MSG_PEEK consumes
    // nothing from the stream; MSG_DONTWAIT keeps it from blocking.
    let got = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    // 0 is the peer's close: nothing more will come, and a held call delays no one.
    Some(got > 0)
}
