//! The torture's raw NFS client: the shared one (`txnfs_rawclient`, ADR 0034) over TCP,
//! one session on slot 0, returning errors instead of panicking because the server
//! under test dies on purpose.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use txnfs_proto::nfs4::{nfs_argop4, stable_how4, stateid4};
use txnfs_rawclient::tcp::{auth_sys, Options};
pub use txnfs_rawclient::tcp::{CallError, Session};
pub use txnfs_rawclient::{
    close_current, lookup, mkdir, read, read_results, remove, rename, status_of, truncate, ANON,
    CURRENT,
};

/// Upper bound of one call: a server that is alive answers much sooner.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The open owner (and COMPOUND tag and machine name) of every torture client.
const NAME: &[u8] = b"torture";

/// A session of the client `owner`: EXCHANGE_ID, CREATE_SESSION (8 slots),
/// RECLAIM_COMPLETE.
pub async fn session(addr: SocketAddr, owner: &[u8]) -> Result<Session, String> {
    let opts = Options {
        tag: NAME,
        cred: auth_sys(NAME, 0, 0),
        timeout: Some(CALL_TIMEOUT),
        fore: txnfs_rawclient::channel(1000, 8),
        back: txnfs_rawclient::channel(1000, 1),
    };
    Session::new(addr, owner, opts).await
}

/// OPEN that creates `n` (GUARDED4: it must not exist) for reading and writing.
pub fn open_create(n: &str) -> nfs_argop4 {
    txnfs_rawclient::open_guarded(n, NAME)
}

/// WRITE `data` at `offset` with `sid`, FILE_SYNC4.
pub fn write(sid: &stateid4, offset: u64, data: Bytes) -> nfs_argop4 {
    txnfs_rawclient::write_with(sid, offset, stable_how4::FILE_SYNC4, data)
}
