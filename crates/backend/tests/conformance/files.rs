//! Regular files: create, read and write, setattr, create modes and their attributes,
//! clone_range; and the root and statfs every backend answers.

use bytes::Bytes;
use txnfs_backend::{
    Backend, BackendError, CloneMethod, CreateMode, Created, FileType, NodeKind, OpCtx, SetAttrs,
    SetTime, Timestamp, MAX_KEY_LEN,
};

use crate::common::*;

pub fn check_root<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    assert!(!root.is_empty() && root.len() <= MAX_KEY_LEN);
    let a = b.getattr(&user(), &root).unwrap();
    assert_eq!(a.ftype, FileType::Directory);
    assert_eq!(
        b.lookup_parent(&user(), &root).unwrap_err(),
        BackendError::NotFound
    );
    assert_eq!(b.root().unwrap(), root, "root key is stable");
}

pub fn check_create_write_read<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let Created {
        key: k,
        attrs: a,
        created,
        ..
    } = create_file(b, &root, b"f", CreateMode::Unchecked, &set_mode(0o640)).unwrap();
    assert!(created);
    assert_eq!(a.mode, 0o640);
    assert_eq!(a.uid, 1234);
    assert_eq!(a.gid, 5678);
    assert_eq!(a.nlink, 1);
    assert_eq!(a.size, 0);
    let a = b
        .write(&OpCtx::default(), &k, 0, b"hello world", false)
        .unwrap();
    assert_eq!(a.size, 11);
    let (data, eof) = b.read(&user(), &k, 0, 100).unwrap();
    assert_eq!(&data[..], b"hello world");
    assert!(eof);
    let (data, eof) = b.read(&user(), &k, 0, 5).unwrap();
    assert_eq!(&data[..], b"hello");
    assert!(!eof);
    let (data, eof) = b.read(&user(), &k, 6, 5).unwrap();
    assert_eq!(&data[..], b"world");
    assert!(eof, "a read ending exactly at EOF reports eof");
    let (data, eof) = b.read(&user(), &k, 11, 5).unwrap();
    assert!(data.is_empty());
    assert!(eof);
    let (data, eof) = b.read(&user(), &k, 1000, 5).unwrap();
    assert!(data.is_empty());
    assert!(eof);
    // (the local backend answers small reads without a stat, large ones with one)
    let (data, eof) = b.read(&user(), &k, 6, 1 << 20).unwrap();
    assert_eq!(&data[..], b"world");
    assert!(eof, "a large read past EOF");
    let (data, eof) = b.read(&user(), &k, 3, 0).unwrap();
    assert!(data.is_empty());
    assert!(!eof, "reading nothing inside the file is not its end");
    let (data, eof) = b.read(&user(), &k, u64::MAX - 1, 5).unwrap();
    assert!(data.is_empty());
    assert!(eof, "an offset no file reaches");
    // a hole
    b.write(&OpCtx::default(), &k, 20, b"x", false).unwrap();
    let (data, _) = b.read(&user(), &k, 0, 100).unwrap();
    assert_eq!(data.len(), 21);
    assert_eq!(&data[11..20], &[0u8; 9]);
    // lookup finds the same key
    let (k2, a2) = b.lookup(&user(), &root, b"f").unwrap();
    assert_eq!(k2, k);
    assert_eq!(a2.fileid, b.getattr(&user(), &k).unwrap().fileid);
    assert_eq!(
        b.lookup(&user(), &root, b"nope").unwrap_err(),
        BackendError::NotFound
    );
    // unchecked create of an existing file opens it, applies only the size
    let Created {
        key: k3,
        attrs: a3,
        created,
        ..
    } = create_file(
        b,
        &root,
        b"f",
        CreateMode::Unchecked,
        &SetAttrs {
            mode: Some(0o600),
            size: Some(3),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!created);
    assert_eq!(k3, k);
    assert_eq!(a3.size, 3);
    assert_eq!(a3.mode, 0o640);
    // reading a directory
    assert_eq!(
        b.read(&user(), &root, 0, 10).unwrap_err(),
        BackendError::IsDir
    );
    assert_eq!(
        b.write(&OpCtx::default(), &root, 0, b"x", false)
            .unwrap_err(),
        BackendError::IsDir
    );
}

pub fn check_sync_write_commit<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "s");
    let a = b.write(&OpCtx::default(), &k, 0, b"stable", true).unwrap();
    assert_eq!(a.size, 6);
    b.commit(&OpCtx::default(), &k).unwrap();
    b.write(&OpCtx::default(), &k, 6, b" more", false).unwrap();
    b.commit(&OpCtx::default(), &k).unwrap();
    assert_eq!(&b.read(&user(), &k, 0, 64).unwrap().0[..], b"stable more");
}

pub fn check_setattr<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "a");
    b.write(&OpCtx::default(), &k, 0, b"0123456789", false)
        .unwrap();
    // truncate
    let a = b.setattr(&OpCtx::default(), &k, &set_size(4)).unwrap();
    assert_eq!(a.size, 4);
    assert_eq!(&b.read(&user(), &k, 0, 100).unwrap().0[..], b"0123");
    // extend with zeros
    let a = b.setattr(&OpCtx::default(), &k, &set_size(8)).unwrap();
    assert_eq!(a.size, 8);
    assert_eq!(&b.read(&user(), &k, 0, 100).unwrap().0[..], b"0123\0\0\0\0");
    // mode
    let a = b.setattr(&OpCtx::default(), &k, &set_mode(0o4711)).unwrap();
    assert_eq!(a.mode, 0o4711);
    assert_eq!(b.getattr(&user(), &k).unwrap().mode, 0o4711);
    // owner
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                uid: Some(42),
                gid: Some(43),
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.uid, a.gid, a.mode), (42, 43, 0o600));
    // client times
    let t1 = Timestamp {
        sec: 1_000_000_000,
        nsec: 123_456_789,
    };
    let t2 = Timestamp {
        sec: 1_100_000_000,
        nsec: 5,
    };
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                atime: Some(SetTime::Client(t1)),
                mtime: Some(SetTime::Client(t2)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.atime, t1);
    assert_eq!(a.mtime, t2);
    // server time
    let before = now_sec();
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                mtime: Some(SetTime::ServerNow),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(a.mtime.sec >= before - 1 && a.mtime.sec <= now_sec() + 1);
    assert_eq!(a.atime, t1, "atime untouched");
    // size on a directory
    assert_eq!(
        b.setattr(&OpCtx::default(), &root, &set_size(0))
            .unwrap_err(),
        BackendError::IsDir
    );
    // empty setattr is a getattr
    assert_eq!(
        b.setattr(&OpCtx::default(), &k, &SetAttrs::default())
            .unwrap()
            .size,
        8
    );
}

fn now_sec() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn check_create_modes<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "g");
    let e = create_file(b, &root, b"g", CreateMode::Guarded, &SetAttrs::default()).unwrap_err();
    assert_eq!(e, BackendError::Exists);
    let verf = *b"verifier";
    let first = exclusive(b, &root, b"x", verf).unwrap();
    assert!(first.created);
    let again = exclusive(b, &root, b"x", verf).unwrap();
    assert!(
        !again.created,
        "retry with the same verifier opens the file"
    );
    assert_eq!(first.key, again.key);
    let e = exclusive(b, &root, b"x", *b"other!!!").unwrap_err();
    assert_eq!(e, BackendError::Exists);
    // an exclusive create over a file made otherwise is Exists
    let e = exclusive(b, &root, b"g", verf).unwrap_err();
    assert_eq!(e, BackendError::Exists);
    let _ = k;
    // create over a directory
    mkdir(b, &root, "d");
    let e = create_file(b, &root, b"d", CreateMode::Unchecked, &SetAttrs::default()).unwrap_err();
    assert_eq!(e, BackendError::IsDir);
}

pub fn check_create_attrs<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let t = Timestamp {
        sec: 1_500_000_000,
        nsec: 42,
    };
    let Created {
        key: k,
        attrs: a,
        created,
        ..
    } = create_file(
        b,
        &root,
        b"sized",
        CreateMode::Guarded,
        &SetAttrs {
            size: Some(5),
            mtime: Some(SetTime::Client(t)),
            mode: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(created);
    assert_eq!((a.size, a.mtime, a.mode), (5, t, 0o600));
    assert_eq!(&b.read(&user(), &k, 0, 10).unwrap().0[..], &[0u8; 5]);
    // a write beyond any file size limit
    assert_eq!(
        b.write(&OpCtx::default(), &k, u64::MAX - 1, b"xy", false)
            .unwrap_err(),
        BackendError::FileTooBig
    );
    // empty symlink target
    let e = make_node(
        b,
        &root,
        b"empty-link",
        &NodeKind::Symlink(Bytes::new()),
        &SetAttrs::default(),
    )
    .unwrap_err();
    assert_eq!(e, BackendError::Inval);
}

pub fn check_statfs<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let s = b.statfs(&user(), &root).unwrap();
    assert!(s.total_bytes > 0);
    assert!(s.free_bytes <= s.total_bytes);
    assert!(s.max_name_len >= 255);
}

/// clone_range makes the destination range equal to the source range, by whatever
/// method, and reports `Reflink` only where the backend can share blocks.
pub fn check_clone_range<B: Backend>(b: &B) {
    let cx = OpCtx::default();
    let root = b.root().unwrap();
    let src = create(b, &root, "src");
    let dst = create(b, &root, "dst");
    let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i * 7 % 251) as u8).collect();
    b.write(&cx, &src, 0, &data, false).unwrap();
    let before = b.getattr(&user(), &dst).unwrap().change;
    // Whole file (len 0 = to the end of the source).
    let m = b.clone_range(&cx, &src, 0, &dst, 0, 0).unwrap();
    if b.clone_method() == CloneMethod::Copy {
        assert_eq!(m, CloneMethod::Copy);
    }
    assert_eq!(b.read(&user(), &dst, 0, 1 << 20).unwrap().0, &data[..]);
    assert!(
        b.getattr(&user(), &dst).unwrap().change > before,
        "dst change moves"
    );
    // An unaligned range past the destination's end grows it.
    let m = b.clone_range(&cx, &src, 10, &dst, 20_000, 333).unwrap();
    assert_eq!(m, CloneMethod::Copy, "unaligned ranges copy");
    assert_eq!(b.getattr(&user(), &dst).unwrap().size, 20_333);
    assert_eq!(
        b.read(&user(), &dst, 20_000, 333).unwrap().0,
        &data[10..343]
    );
    // A source range beyond the end of the source is refused.
    let e = b
        .clone_range(&cx, &src, data.len() as u64, &dst, 0, 1)
        .unwrap_err();
    assert_eq!(e, BackendError::Inval);
    let d = mkdir(b, &root, "dir");
    assert!(b.clone_range(&cx, &d, 0, &dst, 0, 0).is_err());
}
