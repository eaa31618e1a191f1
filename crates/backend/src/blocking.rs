//! Where a backend call may block: backend calls are synchronous, and the server
//! runs quick requests to completion on the thread that received them — a tokio
//! worker (ADR 0004, ADR 0033). A call that finds it must wait (for another
//! transaction's lock, for the disk) does so through [`may_block`].

/// Runs `f`, which may block, where the thread may: on a worker of a multi-threaded
/// tokio runtime inside `block_in_place` (the runtime moves its other work to another
/// thread first), anywhere else (the blocking pool, no runtime) as is.
pub(crate) fn may_block<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
