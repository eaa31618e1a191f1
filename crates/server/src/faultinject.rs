//! Test-only fault injection (cargo feature `fault-injection`, never in a production
//! build): make the next handler of a given op panic while it holds the state core's
//! lock, to show that a panicking request leaves the server serving (ADR 0029).

use std::sync::atomic::{AtomicU32, Ordering};

use crate::nfs::nfs_opnum4;
use crate::server::Server;

/// No op armed.
const NONE: u32 = u32::MAX;

/// The faults armed on a server.
pub struct FaultInjection {
    /// The opnum whose next execution panics under the core's lock, or `NONE`.
    panic_in: AtomicU32,
}

impl Default for FaultInjection {
    fn default() -> Self {
        FaultInjection {
            panic_in: AtomicU32::new(NONE),
        }
    }
}

impl FaultInjection {
    /// The next time the executor runs `op`'s handler, it panics holding the state
    /// core's lock instead (once).
    pub fn panic_once_under_core_lock(&self, op: nfs_opnum4) {
        self.panic_in.store(op as u32, Ordering::Release);
    }

    /// Called by the executor right before an op's handler.
    pub(crate) fn before_op(&self, srv: &Server, op: u32) {
        if self
            .panic_in
            .compare_exchange(op, NONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let _core = srv.lock_core("fault injection");
            panic!("fault injection: op {op} panics while holding the state core's lock");
        }
    }
}
