//! Directories as a whole: readdir paging, the change attribute of directories and
//! files, and concurrent mutations.

use std::collections::HashSet;

use txnfs_backend::{
    Backend, BackendError, CreateMode, DirChange, FileKey, FileType, NodeKind, OpCtx, SetAttrs,
};

use crate::common::*;

pub fn check_readdir_paging<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let d = mkdir(b, &root, "big");
    let names: Vec<String> = (0..1000).map(|i| format!("entry-{i:04}")).collect();
    for n in &names {
        create(b, &d, n);
    }
    // plain paging
    let mut seen = Vec::new();
    let mut cookie = 0;
    loop {
        let (ents, eof) = b.readdir(&user(), &d, cookie, 7).unwrap();
        assert!(ents.len() <= 7);
        for e in &ents {
            assert_ne!(e.cookie, 0);
            assert_eq!(e.attrs.ftype, FileType::Regular);
            let (k, _) = b.lookup(&user(), &d, &e.name).unwrap();
            assert_eq!(k, e.key);
            seen.push(String::from_utf8(e.name.to_vec()).unwrap());
        }
        if eof {
            break;
        }
        assert!(!ents.is_empty(), "no progress without eof");
        cookie = ents.last().unwrap().cookie;
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, names, "every name exactly once");

    // paging while entries are removed between pages
    let mut seen = HashSet::new();
    let mut removed = HashSet::new();
    let mut cookie = 0;
    let mut victim = 999usize;
    loop {
        let (ents, eof) = b.readdir(&user(), &d, cookie, 7).unwrap();
        for e in &ents {
            let name = String::from_utf8(e.name.to_vec()).unwrap();
            assert!(!removed.contains(&name), "removed entry {name} returned");
            assert!(seen.insert(name.clone()), "{name} returned twice");
        }
        if eof {
            break;
        }
        cookie = ents.last().unwrap().cookie;
        // remove one already-seen entry and one not yet seen
        if let Some(e) = ents.first() {
            b.remove(&OpCtx::default(), &d, &e.name).unwrap();
        }
        while victim > 0 {
            let n = &names[victim];
            victim -= 1;
            if !seen.contains(n) && !removed.contains(n) {
                b.remove(&OpCtx::default(), &d, n.as_bytes()).unwrap();
                removed.insert(n.clone());
                break;
            }
        }
    }
    for n in &names {
        assert!(
            seen.contains(n) || removed.contains(n),
            "{n} neither seen nor removed"
        );
    }
    // max_entries 0 and empty dir
    let e = mkdir(b, &root, "empty");
    let (ents, eof) = b.readdir(&user(), &e, 0, 10).unwrap();
    assert!(ents.is_empty());
    assert!(eof);
    let plain = create(b, &root, "plain");
    assert_eq!(
        b.readdir(&user(), &plain, 0, 1).unwrap_err(),
        BackendError::NotDir
    );
}

pub fn check_change<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "c");
    let mut last = b.getattr(&user(), &k).unwrap().change;
    for i in 0..100u32 {
        let a = b
            .write(&OpCtx::default(), &k, 0, &i.to_be_bytes(), false)
            .unwrap();
        assert!(a.change > last, "write {i}: change {} !> {last}", a.change);
        assert_eq!(
            b.getattr(&user(), &k).unwrap().change,
            a.change,
            "stable without mutation"
        );
        last = a.change;
    }
    let a = b.setattr(&OpCtx::default(), &k, &set_mode(0o600)).unwrap();
    assert!(a.change > last);
    // directory change moves on create/remove/rename
    let d0 = b.getattr(&user(), &root).unwrap().change;
    create(b, &root, "c2");
    let d1 = b.getattr(&user(), &root).unwrap().change;
    assert!(d1 > d0);
    b.rename(&OpCtx::default(), &root, b"c2", &root, b"c3")
        .unwrap();
    let d2 = b.getattr(&user(), &root).unwrap().change;
    assert!(d2 > d1);
    b.remove(&OpCtx::default(), &root, b"c3").unwrap();
    let d3 = b.getattr(&user(), &root).unwrap().change;
    assert!(d3 > d2);
    b.link(&OpCtx::default(), &k, &root, b"c4").unwrap();
    assert!(b.getattr(&user(), &root).unwrap().change > d3);
}

/// Several threads at once on one backend: no deadlock, no lost entries.
pub fn check_concurrent<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let root = root.clone();
            s.spawn(move || {
                let d = mkdir(b, &root, &format!("t{t}"));
                for i in 0..50 {
                    let name = format!("f{i}");
                    let k = create(b, &d, &name);
                    b.write(&OpCtx::default(), &k, 0, name.as_bytes(), i % 2 == 0)
                        .unwrap();
                    assert_eq!(&b.read(&user(), &k, 0, 16).unwrap().0[..], name.as_bytes());
                    if i % 3 == 0 {
                        b.remove(&OpCtx::default(), &d, name.as_bytes()).unwrap();
                        assert_eq!(b.getattr(&user(), &k).unwrap_err(), BackendError::Stale);
                    }
                    let _ = b.readdir(&user(), &root, 0, 3).unwrap();
                }
                let mut n = 0;
                let mut cookie = 0;
                loop {
                    let (ents, eof) = b.readdir(&user(), &d, cookie, 10).unwrap();
                    n += ents.len();
                    if eof {
                        break;
                    }
                    cookie = ents.last().unwrap().cookie;
                }
                assert_eq!(n, 50 - 17);
            });
        }
    });
}

/// Directory mutators report the directory's change exactly: `after` moved past
/// `before`, equals what getattr says afterwards, and never goes back across calls.
pub fn check_dir_change<B: Backend>(b: &B) {
    let cx = user();
    let root = b.root().unwrap();
    let change = |k: &FileKey| b.getattr(&user(), k).unwrap().change;
    let mut last_root = change(&root);
    let step = |d: DirChange, dir: &FileKey, last: &mut u64| {
        assert!(
            d.before >= *last,
            "before {} < previous {}",
            d.before,
            *last
        );
        assert!(
            d.after > d.before,
            "after {} <= before {}",
            d.after,
            d.before
        );
        assert_eq!(d.after, change(dir), "after is what getattr reports");
        *last = d.after;
    };
    let f = b
        .create_file(&cx, &root, b"f", CreateMode::Guarded, &SetAttrs::default())
        .unwrap();
    step(f.dir, &root, &mut last_root);
    let d = b
        .make_node(&cx, &root, b"d", &NodeKind::Directory, &SetAttrs::default())
        .unwrap();
    step(d.dir, &root, &mut last_root);
    let mut last_d = change(&d.key);
    let l = b.link(&cx, &f.key, &d.key, b"l").unwrap();
    step(l.dir, &d.key, &mut last_d);
    let r = b.rename(&cx, &root, b"f", &d.key, b"g").unwrap();
    step(r.from, &root, &mut last_root);
    step(r.to, &d.key, &mut last_d);
    let r = b.rename(&cx, &d.key, b"g", &d.key, b"h").unwrap();
    assert_eq!(r.from, r.to, "one directory: one change");
    step(r.to, &d.key, &mut last_d);
    step(b.remove(&cx, &d.key, b"h").unwrap(), &d.key, &mut last_d);
    // Opening an existing file changes nothing.
    let again = b
        .create_file(
            &cx,
            &d.key,
            b"l",
            CreateMode::Unchecked,
            &SetAttrs::default(),
        )
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.dir.before, again.dir.after);
    assert_eq!(again.dir.after, change(&d.key));
}
