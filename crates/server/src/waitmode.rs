//! Where the current thread may wait: a COMPOUND on a blocking-pool thread waits
//! plainly, one on a multi-threaded runtime's worker waits inside `block_in_place`
//! (the runtime moves the worker's other tasks first), and where neither is possible
//! (a current-thread runtime, the simulation without one) it must not wait at all.

use std::cell::Cell;

thread_local! {
    /// Set while a COMPOUND runs on a blocking-pool thread, where waiting is plain.
    static ON_BLOCKING_POOL: Cell<bool> = const { Cell::new(false) };
    /// Set while a call runs on its connection's reader and that connection had other
    /// calls lately (`CallInfo::alone` false): calls may be queued behind this one.
    static READER_HAS_COMPANY: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` on its connection's reader (ADR 0057), a call that was `alone` or not.
pub fn on_reader<R>(alone: bool, f: impl FnOnce() -> R) -> R {
    READER_HAS_COMPANY.with(|b| b.set(!alone));
    let r = f();
    READER_HAS_COMPANY.with(|b| b.set(false));
    r
}

/// Whether the call running here runs on a reader whose connection had other calls
/// lately (see [`on_reader`]).
pub fn reader_has_company() -> bool {
    READER_HAS_COMPANY.with(|b| b.get())
}

/// Run `f` marked as running on the blocking pool (the service's handoff).
pub fn on_blocking_pool<R>(f: impl FnOnce() -> R) -> R {
    ON_BLOCKING_POOL.with(|b| b.set(true));
    let r = f();
    ON_BLOCKING_POOL.with(|b| b.set(false));
    r
}

/// How the current thread may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// A blocking-pool thread: block.
    Plain,
    /// A multi-threaded runtime's worker: block inside `block_in_place`.
    InPlace,
    /// No way to block without stalling the runtime (or no runtime at all).
    Never,
}

/// How the current thread may wait.
pub fn wait_mode() -> WaitMode {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return WaitMode::Never;
    };
    if ON_BLOCKING_POOL.with(|b| b.get()) {
        return WaitMode::Plain;
    }
    match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => WaitMode::InPlace,
        _ => WaitMode::Never,
    }
}

/// Run `f`, which may block for a while, where the current thread may block.
pub fn may_block<R>(f: impl FnOnce() -> R) -> R {
    blocking(wait_mode(), f)
}

/// Run `f` where the thread may block for a while (see [`WaitMode`]).
pub fn blocking<R>(mode: WaitMode, f: impl FnOnce() -> R) -> R {
    match mode {
        WaitMode::InPlace => tokio::task::block_in_place(f),
        _ => f(),
    }
}
