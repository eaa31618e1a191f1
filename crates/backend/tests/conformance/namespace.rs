//! The namespace: special nodes, links, rename, remove, name checks, symlinks and
//! set-group-ID directories.

use bytes::Bytes;
use txnfs_backend::{
    Backend, BackendError, CreateMode, Creds, FileType, Made, NodeKind, OpCtx, SetAttrs, Timestamp,
};

use crate::common::*;

pub fn check_make_node<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let root_nlink = b.getattr(&user(), &root).unwrap().nlink;
    let Made {
        key: dk, attrs: da, ..
    } = make_node(b, &root, b"dir", &NodeKind::Directory, &set_mode(0o750)).unwrap();
    assert_eq!(da.ftype, FileType::Directory);
    assert_eq!(da.mode, 0o750);
    assert_eq!(da.nlink, 2);
    assert_eq!((da.uid, da.gid), (1234, 5678));
    assert_eq!(b.getattr(&user(), &root).unwrap().nlink, root_nlink + 1);
    let (pk, _) = b.lookup_parent(&user(), &dk).unwrap();
    assert_eq!(pk, root);
    let Made {
        key: sk, attrs: sa, ..
    } = make_symlink(b, &dk, "sym", b"../target/x");
    assert_eq!(sa.ftype, FileType::Symlink);
    assert_eq!(sa.size, 11);
    assert_eq!(&b.readlink(&user(), &sk).unwrap()[..], b"../target/x");
    assert_eq!(
        b.readlink(&user(), &dk).unwrap_err(),
        BackendError::NotSymlink
    );
    let Made {
        key: fk, attrs: fa, ..
    } = make_node(b, &dk, b"fifo", &NodeKind::Fifo, &set_mode(0o600)).unwrap();
    assert_eq!(fa.ftype, FileType::Fifo);
    assert_eq!(fa.mode, 0o600);
    assert_eq!(b.getattr(&user(), &fk).unwrap().ftype, FileType::Fifo);
    assert_eq!(b.read(&user(), &fk, 0, 1).unwrap_err(), BackendError::Inval);
    let e = make_node(b, &dk, b"fifo", &NodeKind::Directory, &SetAttrs::default()).unwrap_err();
    assert_eq!(e, BackendError::Exists);
    let Made {
        key: ck, attrs: ca, ..
    } = make_node(
        b,
        &dk,
        b"null",
        &NodeKind::CharDev(1, 3),
        &SetAttrs::default(),
    )
    .unwrap();
    assert_eq!(ca.ftype, FileType::CharDev);
    assert_eq!(ca.rdev, (1, 3));
    assert_eq!(b.read(&user(), &ck, 0, 1).unwrap_err(), BackendError::Inval);
    // a key of a non-directory used as a directory
    let e = b.lookup(&user(), &fk, b"x").unwrap_err();
    assert_eq!(e, BackendError::NotDir);
}

pub fn check_link<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "orig");
    let d = mkdir(b, &root, "sub");
    let a = b.link(&OpCtx::default(), &k, &d, b"alias").unwrap().attrs;
    assert_eq!(a.nlink, 2);
    let (k2, a2) = b.lookup(&user(), &d, b"alias").unwrap();
    assert_eq!(a2.fileid, a.fileid);
    assert_eq!(b.getattr(&user(), &k2).unwrap().nlink, 2);
    assert_eq!(
        b.link(&OpCtx::default(), &k, &d, b"alias").unwrap_err(),
        BackendError::Exists
    );
    assert_eq!(
        b.link(&OpCtx::default(), &d, &root, b"dirlink")
            .unwrap_err(),
        BackendError::IsDir
    );
    b.remove(&OpCtx::default(), &root, b"orig").unwrap();
    assert_eq!(
        b.getattr(&user(), &k2).unwrap().nlink,
        1,
        "still alive via the other link"
    );
    b.write(&OpCtx::default(), &k2, 0, b"ok", false).unwrap();
}

pub fn check_rename<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let a = create(b, &root, "a");
    b.write(&OpCtx::default(), &a, 0, b"AAA", false).unwrap();
    let t = create(b, &root, "t");
    b.write(&OpCtx::default(), &t, 0, b"TTTTTT", false).unwrap();
    b.rename(&OpCtx::default(), &root, b"a", &root, b"t")
        .unwrap();
    assert_eq!(
        b.lookup(&user(), &root, b"a").unwrap_err(),
        BackendError::NotFound
    );
    let (k, attrs) = b.lookup(&user(), &root, b"t").unwrap();
    assert_eq!(k, a, "the key follows the object");
    assert_eq!(attrs.size, 3);
    assert_eq!(b.getattr(&user(), &t).unwrap_err(), BackendError::Stale);
    // across directories
    let d1 = mkdir(b, &root, "d1");
    let d2 = mkdir(b, &root, "d2");
    let n = b.getattr(&user(), &root).unwrap().nlink;
    let sub = mkdir(b, &d1, "sub");
    b.rename(&OpCtx::default(), &d1, b"sub", &d2, b"moved")
        .unwrap();
    assert_eq!(b.getattr(&user(), &d1).unwrap().nlink, 2);
    assert_eq!(b.getattr(&user(), &d2).unwrap().nlink, 3);
    assert_eq!(b.lookup_parent(&user(), &sub).unwrap().0, d2);
    assert_eq!(b.getattr(&user(), &root).unwrap().nlink, n);
    // dir over a non-empty dir
    let full = mkdir(b, &root, "full");
    create(b, &full, "inside");
    let e = b
        .rename(&OpCtx::default(), &root, b"d1", &root, b"full")
        .unwrap_err();
    assert_eq!(e, BackendError::NotEmpty);
    // dir over an empty dir works
    b.rename(&OpCtx::default(), &root, b"d1", &d2, b"moved")
        .unwrap();
    assert_eq!(b.lookup(&user(), &d2, b"moved").unwrap().0, d1);
    assert_eq!(b.getattr(&user(), &sub).unwrap_err(), BackendError::Stale);
    // Refused, and so changing nothing: file over dir, dir over file, into its own
    // subtree, a missing source.
    for (from_dir, from, to_dir, to, want) in [
        (&root, "t", &root, "full", BackendError::IsDir),
        (&root, "full", &root, "t", BackendError::NotDir),
        (&root, "d2", &d1, "loop", BackendError::Inval),
        (&root, "ghost", &root, "x", BackendError::NotFound),
    ] {
        let e = b
            .rename(
                &OpCtx::default(),
                from_dir,
                from.as_bytes(),
                to_dir,
                to.as_bytes(),
            )
            .unwrap_err();
        assert_eq!(e, want, "rename {from} to {to}");
    }
    // rename onto itself is a no-op
    b.rename(&OpCtx::default(), &root, b"t", &root, b"t")
        .unwrap();
    assert!(b.lookup(&user(), &root, b"t").is_ok());
}

pub fn check_remove<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "gone");
    b.write(&OpCtx::default(), &k, 0, b"data", false).unwrap();
    assert!(b.getattr(&user(), &k).is_ok());
    b.remove(&OpCtx::default(), &root, b"gone").unwrap();
    assert_eq!(b.getattr(&user(), &k).unwrap_err(), BackendError::Stale);
    assert_eq!(b.read(&user(), &k, 0, 4).unwrap_err(), BackendError::Stale);
    assert_eq!(
        b.lookup(&user(), &root, b"gone").unwrap_err(),
        BackendError::NotFound
    );
    assert_eq!(
        b.remove(&OpCtx::default(), &root, b"gone").unwrap_err(),
        BackendError::NotFound
    );
    let d = mkdir(b, &root, "d");
    create(b, &d, "f");
    assert_eq!(
        b.remove(&OpCtx::default(), &root, b"d").unwrap_err(),
        BackendError::NotEmpty
    );
    b.remove(&OpCtx::default(), &d, b"f").unwrap();
    let n = b.getattr(&user(), &root).unwrap().nlink;
    b.remove(&OpCtx::default(), &root, b"d").unwrap();
    assert_eq!(b.getattr(&user(), &root).unwrap().nlink, n - 1);
    assert_eq!(b.getattr(&user(), &d).unwrap_err(), BackendError::Stale);
    // operations inside a removed directory: its key is stale
    assert_eq!(
        b.lookup(&user(), &d, b"f").unwrap_err(),
        BackendError::Stale
    );
    assert_eq!(
        b.remove(&OpCtx::default(), &d, b"f").unwrap_err(),
        BackendError::Stale
    );
    assert_eq!(
        b.readdir(&user(), &d, 0, 10).unwrap_err(),
        BackendError::Stale
    );
    let e = create_file(b, &d, b"f", CreateMode::Unchecked, &SetAttrs::default()).unwrap_err();
    assert_eq!(e, BackendError::Stale);
}

/// A held object outlives its last name (removed, or replaced by a rename) until the last
/// release: reads and writes by key work, a second hold needs a second release, and
/// then the key is stale.
pub fn check_hold<B: Backend>(b: &B) {
    let cx = OpCtx::default();
    let root = b.root().unwrap();
    for replace in [false, true] {
        let k = create(b, &root, "held");
        b.write(&cx, &k, 0, b"abc", false).unwrap();
        b.hold(&user(), &k).unwrap();
        b.hold(&user(), &k).unwrap();
        if replace {
            create(b, &root, "other");
            b.rename(&cx, &root, b"other", &root, b"held").unwrap();
        } else {
            b.remove(&cx, &root, b"held").unwrap();
        }
        assert_eq!(b.getattr(&user(), &k).unwrap().nlink, 0);
        b.write(&cx, &k, 3, b"def", true).unwrap();
        assert_eq!(&b.read(&user(), &k, 0, 10).unwrap().0[..], b"abcdef");
        b.release(&user(), &k);
        assert_eq!(b.getattr(&user(), &k).unwrap().size, 6, "one hold is left");
        b.release(&user(), &k);
        assert_eq!(b.getattr(&user(), &k).unwrap_err(), BackendError::Stale);
        assert_eq!(b.read(&user(), &k, 0, 4).unwrap_err(), BackendError::Stale);
        if replace {
            b.remove(&cx, &root, b"held").unwrap();
        }
    }
    // An object that keeps its name is unaffected by holds; a gone one cannot be held.
    let k = create(b, &root, "named");
    b.hold(&user(), &k).unwrap();
    b.release(&user(), &k);
    assert!(b.getattr(&user(), &k).is_ok());
    b.remove(&cx, &root, b"named").unwrap();
    assert_eq!(b.hold(&user(), &k).unwrap_err(), BackendError::Stale);
}

pub fn check_bad_names<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let c = creds();
    for bad in [&b".."[..], b".", b"a/b", b"", b"nul\0"] {
        assert_eq!(
            b.lookup(&user(), &root, bad).unwrap_err(),
            BackendError::BadName
        );
        let e = b
            .create_file(
                &OpCtx::for_creds(c.clone()),
                &root,
                bad,
                CreateMode::Unchecked,
                &SetAttrs::default(),
            )
            .unwrap_err();
        assert_eq!(e, BackendError::BadName);
        let e = b
            .make_node(
                &OpCtx::for_creds(c.clone()),
                &root,
                bad,
                &NodeKind::Directory,
                &SetAttrs::default(),
            )
            .unwrap_err();
        assert_eq!(e, BackendError::BadName);
        assert_eq!(
            b.remove(&OpCtx::default(), &root, bad).unwrap_err(),
            BackendError::BadName
        );
        assert_eq!(
            b.rename(&OpCtx::default(), &root, bad, &root, b"x")
                .unwrap_err(),
            BackendError::BadName
        );
    }
    let long = vec![b'a'; 256];
    assert_eq!(
        b.lookup(&user(), &root, &long).unwrap_err(),
        BackendError::NameTooLong
    );
    let ok = vec![b'a'; 255];
    b.create_file(
        &OpCtx::for_creds(c.clone()),
        &root,
        &ok,
        CreateMode::Guarded,
        &SetAttrs::default(),
    )
    .unwrap();
    // garbage keys are stale, not a crash
    for key in [
        Bytes::new(),
        Bytes::from_static(b"\x01"),
        Bytes::from_static(&[0xff; 88]),
        Bytes::from_static(&[0x01, 0, 0, 0, 0, 0, 0, 0, 9]),
    ] {
        assert_eq!(
            b.getattr(&user(), &key).unwrap_err(),
            BackendError::Stale,
            "{key:?}"
        );
    }
}

pub fn check_symlink_not_followed<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let d = mkdir(b, &root, "real");
    create(b, &d, "inner");
    let sk = make_symlink(b, &root, "link", b"real").key;
    let (k, a) = b.lookup(&user(), &root, b"link").unwrap();
    assert_eq!(k, sk);
    assert_eq!(a.ftype, FileType::Symlink);
    assert_eq!(
        b.lookup(&user(), &sk, b"inner").unwrap_err(),
        BackendError::NotDir
    );
    assert_eq!(
        b.readdir(&user(), &sk, 0, 10).unwrap_err(),
        BackendError::NotDir
    );
    // creating through a symlink name does not follow it
    let e = create_file(b, &root, b"link", CreateMode::Guarded, &SetAttrs::default()).unwrap_err();
    assert_eq!(e, BackendError::Exists);
    assert!(b.read(&user(), &sk, 0, 10).is_err());
    // setattr mode on a symlink leaves the target alone
    let before = b.getattr(&user(), &d).unwrap().mode;
    let _ = b.setattr(&OpCtx::default(), &sk, &set_mode(0o700));
    assert_eq!(b.getattr(&user(), &d).unwrap().mode, before);
    // times on a symlink apply to the link
    let t = Timestamp {
        sec: 1_234_567_890,
        nsec: 0,
    };
    let dt = b.getattr(&user(), &d).unwrap().mtime;
    let a = b.setattr(&OpCtx::default(), &sk, &set_mtime(t)).unwrap();
    assert_eq!(a.mtime, t);
    assert_eq!(b.getattr(&user(), &d).unwrap().mtime, dt);
    // readdir reports it as a symlink
    let (ents, _) = b.readdir(&user(), &root, 0, 100).unwrap();
    let e = ents.iter().find(|e| &e.name[..] == b"link").unwrap();
    assert_eq!(e.attrs.ftype, FileType::Symlink);
}

pub fn check_setgid_dirs<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    // Another user, whose own group is not the directory's.
    let other = OpCtx::for_creds(Creds {
        uid: 1000,
        gid: 1000,
        gids: vec![],
    });
    let d = b
        .make_node(
            &other,
            &root,
            b"shared",
            &NodeKind::Directory,
            &SetAttrs {
                mode: Some(0o2775),
                gid: Some(777),
                ..Default::default()
            },
        )
        .unwrap()
        .key;
    let a = b.getattr(&user(), &d).unwrap();
    assert_eq!((a.mode, a.uid, a.gid), (0o2775, 1000, 777));
    let fa = b
        .create_file(&other, &d, b"f", CreateMode::Guarded, &SetAttrs::default())
        .unwrap()
        .attrs;
    assert_eq!((fa.uid, fa.gid, fa.mode), (1000, 777, 0o644));
    let sa = b
        .make_node(
            &other,
            &d,
            b"sub",
            &NodeKind::Directory,
            &SetAttrs::default(),
        )
        .unwrap()
        .attrs;
    assert_eq!((sa.gid, sa.mode), (777, 0o2755));
    // mode is exact, whatever the umask
    let ua = b
        .create_file(
            &other,
            &root,
            b"wide",
            CreateMode::Guarded,
            &set_mode(0o777),
        )
        .unwrap()
        .attrs;
    assert_eq!(ua.mode, 0o777);
}
