//! Helpers shared by the backend test suites: the test user, and short ways to make the
//! objects and attribute changes the tests need, so that each test shows only what it
//! checks.

// Each test crate uses its own subset.
#![allow(dead_code)]

use txnfs_backend::{Backend, CreateMode, Creds, FileKey, FileType, NodeKind, OpCtx, SetAttrs};

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
