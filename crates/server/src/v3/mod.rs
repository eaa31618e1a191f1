//! The NFSv3 front end (RFC 1813; ADR 0038): program 100003 version 3 on the NFSv4
//! port, over the same exports, backend layers, file handles and state core as
//! NFSv4, so a file seen through both is one object and a v3 change recalls the v4
//! delegations it conflicts with.
//!
//! `dispatch` (the service's entry: reply cache, placement, execution state) →
//! `procs` (the procedure table) → one file per group of procedures: `attr`
//! (GETATTR, SETATTR, ACCESS), `dir` (LOOKUP, READLINK, REMOVE, RMDIR, RENAME, LINK),
//! `create` (CREATE, MKDIR, SYMLINK, MKNOD), `file` (READ, WRITE, COMMIT), `readdir`
//! (READDIR, READDIRPLUS), `fs` (FSSTAT, FSINFO, PATHCONF); `common` holds what they
//! share (handles, `fattr3`, `wcc_data`, `sattr3`), `drc` the duplicate request cache
//! (ADR 0039). MOUNT is `crate::mount`.

pub mod attr;
pub mod common;
pub mod create;
pub mod dir;
pub mod dispatch;
pub mod drc;
pub mod file;
pub mod fs;
pub mod procs;
pub mod readdir;

pub use dispatch::V3;

/// NFS version 3 of program 100003.
pub const NFS_V3: u32 = 3;
