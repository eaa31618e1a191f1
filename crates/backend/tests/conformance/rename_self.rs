//! RENAME whose source and target are one object (RFC 8881 §18.26.3): the same name in
//! the same directory, or two hard links to one file, in one directory or two. The
//! rename succeeds and changes nothing, so neither directory's change moves: the
//! returned change info has `before == after`, and the change attribute agrees.

use txnfs_backend::{Backend, DirChange, FileKey, OpCtx};

use crate::common::*;

fn unchanged(c: &DirChange, what: &str) {
    assert_eq!(c.before, c.after, "{what}: {c:?}");
}

fn rename_onto_itself<B: Backend>(
    b: &B,
    from_dir: &FileKey,
    from: &str,
    to_dir: &FileKey,
    to: &str,
) {
    let changes = (
        b.getattr(&user(), from_dir).unwrap().change,
        b.getattr(&user(), to_dir).unwrap().change,
    );
    let r = b
        .rename(
            &OpCtx::default(),
            from_dir,
            from.as_bytes(),
            to_dir,
            to.as_bytes(),
        )
        .unwrap();
    let what = format!("rename {from} to {to}");
    unchanged(&r.from, &what);
    unchanged(&r.to, &what);
    assert_eq!(r.from.before, changes.0, "{what}");
    assert_eq!(r.to.before, changes.1, "{what}");
    assert_eq!(
        (
            b.getattr(&user(), from_dir).unwrap().change,
            b.getattr(&user(), to_dir).unwrap().change
        ),
        changes,
        "{what}: the directories' change attributes"
    );
    assert!(
        b.lookup(&user(), from_dir, from.as_bytes()).is_ok(),
        "{what}"
    );
    assert!(b.lookup(&user(), to_dir, to.as_bytes()).is_ok(), "{what}");
}

pub fn check_rename_onto_itself<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let f = create(b, &root, "f");
    mkdir(b, &root, "d");
    let other = mkdir(b, &root, "other");
    b.link(&OpCtx::default(), &f, &root, b"f2").unwrap();
    b.link(&OpCtx::default(), &f, &other, b"f3").unwrap();
    let nlink = b.getattr(&user(), &f).unwrap().nlink;

    rename_onto_itself(b, &root, "f", &root, "f");
    rename_onto_itself(b, &root, "d", &root, "d");
    rename_onto_itself(b, &root, "f", &root, "f2");
    rename_onto_itself(b, &root, "f2", &other, "f3");
    assert_eq!(
        b.getattr(&user(), &f).unwrap().nlink,
        nlink,
        "no link was dropped"
    );
}
