//! Helpers shared by the backend test suites: the test user, and short ways to make the
//! objects and attribute changes the tests need, so that each test shows only what it
//! checks.

// Each test crate uses its own subset.
#![allow(dead_code)]

pub mod mounts;

use bytes::Bytes;
use txnfs_backend::{
    Backend, CreateMode, Created, Creds, FileKey, FileType, Made, NodeKind, OpCtx, Result,
    SetAttrs, SetTime, Timestamp,
};

/// The user the tests create objects as (not root, and with a group of its own).
pub fn creds() -> Creds {
    Creds {
        uid: 1234,
        gid: 5678,
        gids: vec![5678],
    }
}

/// A call of the test user outside any COMPOUND.
pub fn user() -> OpCtx {
    OpCtx::for_creds(creds())
}

/// Creates the new regular file `name` in `dir` as the test user.
pub fn create<B: Backend>(b: &B, dir: &FileKey, name: &str) -> FileKey {
    let c = b
        .create_file(
            &user(),
            dir,
            name.as_bytes(),
            CreateMode::Guarded,
            &SetAttrs::default(),
        )
        .expect("create");
    assert!(c.created);
    assert_eq!(c.attrs.ftype, FileType::Regular);
    c.key
}

/// Makes the directory `name` in `dir` as the test user.
pub fn mkdir<B: Backend>(b: &B, dir: &FileKey, name: &str) -> FileKey {
    b.make_node(
        &user(),
        dir,
        name.as_bytes(),
        &NodeKind::Directory,
        &SetAttrs::default(),
    )
    .expect("mkdir")
    .key
}

/// Writes `data` to the new file `name` in the root; returns its key.
pub fn file_with<B: Backend>(b: &B, name: &str, data: &[u8]) -> FileKey {
    let root = b.root().expect("root");
    let k = create(b, &root, name);
    b.write(&OpCtx::default(), &k, 0, data, false)
        .expect("write");
    k
}

/// Changes only the size.
pub fn set_size(size: u64) -> SetAttrs {
    SetAttrs {
        size: Some(size),
        ..SetAttrs::default()
    }
}

/// Changes only the mode.
pub fn set_mode(mode: u32) -> SetAttrs {
    SetAttrs {
        mode: Some(mode),
        ..SetAttrs::default()
    }
}

/// [`Backend::create_file`] as the test user.
pub fn create_file<B: Backend>(
    b: &B,
    dir: &FileKey,
    name: &[u8],
    mode: CreateMode,
    attrs: &SetAttrs,
) -> Result<Created> {
    b.create_file(&user(), dir, name, mode, attrs)
}

/// [`Backend::make_node`] as the test user.
pub fn make_node<B: Backend>(
    b: &B,
    dir: &FileKey,
    name: &[u8],
    kind: &NodeKind,
    attrs: &SetAttrs,
) -> Result<Made> {
    b.make_node(&user(), dir, name, kind, attrs)
}

/// An exclusive create (NFS createmode EXCLUSIVE4) of `name` in `dir` as the test user.
pub fn exclusive<B: Backend>(b: &B, dir: &FileKey, name: &[u8], verf: [u8; 8]) -> Result<Created> {
    create_file(
        b,
        dir,
        name,
        CreateMode::Exclusive(verf),
        &SetAttrs::default(),
    )
}

/// Makes the symlink `name` to `target` in `dir` as the test user.
pub fn make_symlink<B: Backend>(b: &B, dir: &FileKey, name: &str, target: &'static [u8]) -> Made {
    let kind = NodeKind::Symlink(Bytes::from_static(target));
    make_node(b, dir, name.as_bytes(), &kind, &SetAttrs::default()).expect("symlink")
}

/// Changes only the owner.
pub fn set_uid(uid: u32) -> SetAttrs {
    SetAttrs {
        uid: Some(uid),
        ..SetAttrs::default()
    }
}

/// Sets only the modification time, to a client's time.
pub fn set_mtime(t: Timestamp) -> SetAttrs {
    SetAttrs {
        mtime: Some(SetTime::Client(t)),
        ..SetAttrs::default()
    }
}
