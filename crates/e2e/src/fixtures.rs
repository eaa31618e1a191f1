//! Shared set-up and assertion steps for the end-to-end tests, so that each
//! test file states only what it checks: start-and-mount, "this call must
//! succeed / must fail" (with a timeout and the server log on failure),
//! expected NFSv4 error codes, and two clients holding one file open.

use std::fmt::Debug;
use std::future::Future;

use bytes::Bytes;
use nfs_rs::{Mount, Nfs4ErrorCode, NfsError, OPEN_BOTH};

use crate::{create_with, err, is_nfs4, ok, timed, ServerGuard};

/// A default server (see [`ServerGuard::start_default`]) and one mount of
/// its export.
pub async fn start_and_mount() -> (ServerGuard, Box<dyn Mount>) {
    let server = ServerGuard::start_default();
    let mount = server.mount().await;
    (server, mount)
}

/// Await the NFS call `fut` (with [`crate::OP_TIMEOUT`]) and return its
/// result; panic with `what` and the server log tail if it fails.
pub async fn must<T>(
    server: &ServerGuard,
    what: &str,
    fut: impl Future<Output = nfs_rs::Result<T>>,
) -> T {
    ok(server, what, timed(what, fut).await)
}

/// Await the NFS call `fut` (with [`crate::OP_TIMEOUT`]) and return its
/// error; panic with `what` and the server log tail if it succeeds.
pub async fn must_fail<T: Debug>(
    server: &ServerGuard,
    what: &str,
    fut: impl Future<Output = nfs_rs::Result<T>>,
) -> NfsError {
    err(server, what, timed(what, fut).await)
}

/// Assert that `e` is one of the NFSv4 status codes in `want`.
pub fn expect_code(server: &ServerGuard, what: &str, e: &NfsError, want: &[Nfs4ErrorCode]) {
    assert!(
        want.iter().any(|w| is_nfs4(e, *w)),
        "{what}: want one of {want:?}, got {e:?}\nserver log tail:\n{}",
        server.log_tail(20)
    );
}

/// Two clients of one server, each with `path` open for reading and
/// writing: the usual stage for lock and lease conflicts.
pub struct TwoOpeners {
    pub a: Box<dyn Mount>,
    pub b: Box<dyn Mount>,
    /// The file handle as opened by `a` (its open stateid lives in `a`).
    pub fa: Bytes,
    /// The file handle as opened by `b`.
    pub fb: Bytes,
}

/// Mount `server` twice, create `path` holding `data` through the first
/// mount, and open it (OPEN_BOTH) from both.
pub async fn two_openers(server: &ServerGuard, path: &str, data: &[u8]) -> TwoOpeners {
    let a = server.mount().await;
    let b = server.mount().await;
    create_with(server, &*a, path, 0o644, data).await;
    let fa = must(server, "open a", a.open_path(path, OPEN_BOTH))
        .await
        .fh;
    let fb = must(server, "open b", b.open_path(path, OPEN_BOTH))
        .await
        .fh;
    TwoOpeners { a, b, fa, fb }
}
