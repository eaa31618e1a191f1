//! Shared set-up and assertion steps for the end-to-end tests, so that each
//! test file states only what it checks: protocol constants, start-and-mount,
//! "this call must succeed / must fail (with these codes) / must be denied"
//! (with a timeout and the server log tail on failure), the same as
//! recorded [`Checks`] ([`CheckCalls`]), two clients holding one file open,
//! single-attribute SETATTR calls, and reading files on the host side.

use std::fmt::Debug;
use std::future::Future;

use bytes::Bytes;
use nfs_rs::{LockToken, Mount, Nfs4ErrorCode, NfsError, Time, OPEN_BOTH};

use crate::{create_with, err, is_denied, is_nfs4, ok, timed, Checks, ServerGuard};

/// Lock types for `Mount::lock` / `lock_test` (`nfs_lock_type4`).
pub const READ_LT: u32 = 1;
pub const WRITE_LT: u32 = 2;
/// NFSv4 `nfs_ftype4` values as reported in `Attr::type_`.
pub const NF4REG: u32 = 1;
pub const NF4DIR: u32 = 2;
pub const NF4LNK: u32 = 5;
/// ACCESS4 request/reply bits.
pub const ACCESS_READ: u32 = 0x01;
pub const ACCESS_LOOKUP: u32 = 0x02;
pub const ACCESS_MODIFY: u32 = 0x04;
pub const ACCESS_EXTEND: u32 = 0x08;

/// A time stamp on a whole second (`nseconds` 0).
pub fn whole_second(seconds: u32) -> Time {
    Time {
        seconds,
        nseconds: 0,
    }
}

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

/// Two separate clients (mounts) of `server`.
pub async fn two_mounts(server: &ServerGuard) -> (Box<dyn Mount>, Box<dyn Mount>) {
    (server.mount().await, server.mount().await)
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
    let (a, b) = two_mounts(server).await;
    create_with(server, &*a, path, 0o644, data).await;
    let fa = must(server, "open a", a.open_path(path, OPEN_BOTH))
        .await
        .fh;
    let fb = must(server, "open b", b.open_path(path, OPEN_BOTH))
        .await
        .fh;
    TwoOpeners { a, b, fa, fb }
}

/// One client's open file, for the byte-range lock calls of a test (to await
/// with [`must`], [`must_fail`] or [`must_be_denied`]).
pub struct LockSide<'a> {
    m: &'a dyn Mount,
    fh: &'a Bytes,
}

impl<'a> LockSide<'a> {
    /// Lock calls of `m` on the file it opened as `fh`.
    pub fn new(m: &'a dyn Mount, fh: &'a Bytes) -> Self {
        LockSide { m, fh }
    }

    /// LOCK (stateful) of `lock_type` on [offset, offset + length).
    pub fn lock(
        &self,
        lock_type: u32,
        offset: u64,
        length: u64,
    ) -> impl Future<Output = nfs_rs::Result<LockToken>> + 'a {
        self.m
            .lock_stateful(self.fh.clone(), lock_type, offset, length)
    }

    /// LOCKT of `lock_type` on [offset, offset + length).
    pub fn lockt(
        &self,
        lock_type: u32,
        offset: u64,
        length: u64,
    ) -> impl Future<Output = nfs_rs::Result<()>> + 'a {
        self.m.lock_test(self.fh.clone(), lock_type, offset, length)
    }
}

/// SETATTR of the mode bits alone.
pub async fn set_mode(m: &dyn Mount, fh: &Bytes, mode: u32) -> nfs_rs::Result<()> {
    m.setattr(fh.clone(), None, Some(mode), None, None, None, None, None)
        .await
}

/// SETATTR of the size alone (truncate or extend).
pub async fn set_size(m: &dyn Mount, fh: &Bytes, size: u64) -> nfs_rs::Result<()> {
    m.setattr(fh.clone(), None, None, None, None, Some(size), None, None)
        .await
}

/// SETATTR of the access and modify times alone.
pub async fn set_times(m: &dyn Mount, fh: &Bytes, atime: Time, mtime: Time) -> nfs_rs::Result<()> {
    m.setattr(
        fh.clone(),
        None,
        None,
        None,
        None,
        None,
        Some(atime),
        Some(mtime),
    )
    .await
}

/// SETATTR of the mode bits alone, by path (no guard).
pub async fn set_mode_at(m: &dyn Mount, path: &str, mode: u32) -> nfs_rs::Result<()> {
    m.setattr_path(path, false, Some(mode), None, None, None, None, None)
        .await
}

/// SETATTR of the size alone, by path (no guard).
pub async fn set_size_at(m: &dyn Mount, path: &str, size: u64) -> nfs_rs::Result<()> {
    m.setattr_path(path, false, None, None, None, Some(size), None, None)
        .await
}

/// [`Checks`] for NFS calls: await the call (with [`crate::OP_TIMEOUT`])
/// and record a failure instead of panicking, so one test reports every
/// wrong outcome at once.
// `async fn` in a public trait has no `Send` bound on its futures; these
// run directly on the test's own task, never spawned.
#[allow(async_fn_in_trait)]
pub trait CheckCalls {
    /// Record a failure if the call fails; else return its value.
    async fn call_ok<T>(
        &mut self,
        what: &str,
        fut: impl Future<Output = nfs_rs::Result<T>>,
    ) -> Option<T>;

    /// Record a failure unless the call fails with one of the NFSv4 codes
    /// in `want`.
    async fn call_err<T: Debug>(
        &mut self,
        what: &str,
        fut: impl Future<Output = nfs_rs::Result<T>>,
        want: &[Nfs4ErrorCode],
    );
}

impl CheckCalls for Checks<'_> {
    async fn call_ok<T>(
        &mut self,
        what: &str,
        fut: impl Future<Output = nfs_rs::Result<T>>,
    ) -> Option<T> {
        self.expect_ok(what, timed(what, fut).await)
    }

    async fn call_err<T: Debug>(
        &mut self,
        what: &str,
        fut: impl Future<Output = nfs_rs::Result<T>>,
        want: &[Nfs4ErrorCode],
    ) {
        self.expect_err(what, timed(what, fut).await, want)
    }
}

/// READ the first bytes of `path` and record a failure in `c` unless the
/// call succeeds and returns exactly `want`.
pub async fn check_read_path(
    c: &mut Checks<'_>,
    m: &dyn Mount,
    what: &str,
    path: &str,
    want: &[u8],
) {
    let back = c.call_ok(what, m.read_path(path, 0, 100)).await;
    c.check(
        back.as_deref() == Some(want),
        format!("{what}: want {want:?}, got {back:?}"),
    );
}

/// CREATE `path` (mode 0644) and return the handle of the still-open file.
pub async fn create_open(server: &ServerGuard, m: &dyn Mount, path: &str) -> Bytes {
    let what = format!("create {path}");
    must(server, &what, m.create_path(path, Some(0o644)))
        .await
        .fh
}

/// The bytes of `name` (relative to the export) read directly on the host.
pub fn host_file(server: &ServerGuard, name: impl AsRef<std::path::Path>) -> Vec<u8> {
    let path = server.export_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("host file {}: {e}", path.display()))
}

/// Await the NFS call `fut` (with [`crate::OP_TIMEOUT`]) and assert that it
/// fails with one of the NFSv4 codes in `want`; returns the error.
pub async fn must_fail_with<T: Debug>(
    server: &ServerGuard,
    what: &str,
    fut: impl Future<Output = nfs_rs::Result<T>>,
    want: &[Nfs4ErrorCode],
) -> NfsError {
    let e = must_fail(server, what, fut).await;
    expect_code(server, what, &e, want);
    e
}

/// Await the lock call `fut` (LOCK or LOCKT) and assert that it is refused
/// as a conflict with another owner's lock (see [`is_denied`]).
pub async fn must_be_denied<T: Debug>(
    server: &ServerGuard,
    what: &str,
    fut: impl Future<Output = nfs_rs::Result<T>>,
) {
    let e = must_fail(server, what, fut).await;
    assert!(is_denied(&e), "{what}: want a lock conflict, got {e:?}");
}

/// CLOSE the file `fa` opened by `a` and `fb` opened by `b`.
pub async fn close_both(server: &ServerGuard, a: &dyn Mount, fa: Bytes, b: &dyn Mount, fb: Bytes) {
    must(server, "close a", a.close(fa)).await;
    must(server, "close b", b.close(fb)).await;
}
