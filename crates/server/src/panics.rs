//! A panicking request is one failed request, not a failed server (ADR 0029).
//!
//! The executor runs each op's handler (and, as a backstop, the whole COMPOUND) under
//! [`std::panic::catch_unwind`]. A caught panic is logged with its message, counted in
//! [`crate::server::Stats::panics`] and answered `NFS4ERR_SERVERFAULT` as the failing
//! op's result, in a well-formed COMPOUND4res whose slot is completed as usual. If the
//! panic happened under the state core's lock, the lock is poisoned: the core is
//! rechecked (`StateCore::check_invariants`) and the poison cleared right here, so the
//! next request finds a usable core ([`crate::server::Server::core`] does the same for
//! a panic on any other thread).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use crate::server::Server;

/// A request's handler panicked (reported and counted already).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request panicked")]
pub struct Panicked;

/// Run `f` (one op's handler, or a whole COMPOUND) and turn a panic into `Err` after
/// reporting it (`what` names the op or the COMPOUND in the log).
///
/// `AssertUnwindSafe` is sound enough here: what `f` can leave half-updated is the
/// request's own execution state (the current filehandle, its `CompoundScope`), which
/// the executor stops using at the failing op and finishes as failed (a transaction
/// rolls back); the shared state it reaches is behind mutexes, whose poisoning is
/// handled (the state core is rechecked before it is used again, the other tables
/// recover their guard: they hold plain maps updated in single statements), and the
/// backends are `Sync` objects that must stay consistent across any error return.
/// `what` names the request in the log; it is asked only after a panic (an op's name is
/// looked up per op otherwise).
pub fn catch<'a, T>(
    srv: &Server,
    what: impl FnOnce() -> &'a str,
    f: impl FnOnce() -> T,
) -> Result<T, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        report(srv, what(), payload.as_ref());
        Panicked
    })
}

/// Log and count a caught panic, then make sure the state core is usable again.
fn report(srv: &Server, what: &str, payload: &(dyn Any + Send)) {
    let n = srv.stats.panics.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::error!(
        panics = n,
        during = what,
        message = message(payload),
        "a request panicked: answered NFS4ERR_SERVERFAULT, the server carries on"
    );
    if srv.core.is_poisoned() {
        // Recheck and clear now, with this panic's log line next to the result.
        drop(srv.lock_core("the panicking request"));
    }
}

/// A panic's message, when it has one.
fn message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}
