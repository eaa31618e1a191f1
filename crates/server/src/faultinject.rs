//! Test-only fault injection (cargo feature `fault-injection`, never in a production
//! build): make the next handler of a given op panic while it holds the state core's
//! lock, to show that a panicking request leaves the server serving; make every
//! COMPOUND slow, to fill the transport's in-flight budget (ADR 0029).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::nfs::nfs_opnum4;
use crate::statecore::CoreAccess;

/// No op armed.
const NONE: u32 = u32::MAX;

/// The faults armed on a server.
pub struct FaultInjection {
    /// The opnum whose next execution panics under the core's lock, or `NONE`.
    panic_in: AtomicU32,
    /// Every COMPOUND sleeps this long before it runs (0: not at all).
    compound_delay_us: AtomicU64,
}

impl Default for FaultInjection {
    fn default() -> Self {
        FaultInjection {
            panic_in: AtomicU32::new(NONE),
            compound_delay_us: AtomicU64::new(0),
        }
    }
}

impl FaultInjection {
    /// The next time the executor runs `op`'s handler, it panics holding the state
    /// core's lock instead (once).
    pub fn panic_once_under_core_lock(&self, op: nfs_opnum4) {
        self.panic_in.store(op as u32, Ordering::Release);
    }

    /// Every COMPOUND from now on sleeps `d` before it runs.
    pub fn delay_compounds(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.compound_delay_us.store(us, Ordering::Release);
    }

    /// Called by the executor before a COMPOUND.
    pub(crate) fn before_compound(&self) {
        let us = self.compound_delay_us.load(Ordering::Acquire);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
    }

    /// Called by the executor right before an op's handler.
    pub(crate) fn before_op(&self, srv: &dyn CoreAccess, op: u32) {
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
