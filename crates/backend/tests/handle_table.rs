//! The local backend in table mode (ADR 0050): keys from the persistent handle table
//! stay valid across a restart, across renames through the backend and behind its back,
//! and turn stale once their object is gone, even when its inode number is reused.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;
use txnfs_backend::local::{HandleMode, LocalBackend, HANDLE_TABLE_FILE};
use txnfs_backend::{Backend, BackendError, FileType, OpCtx};

/// An export directory and a state directory beside it.
struct Dirs {
    _tmp: tempfile::TempDir,
    export: PathBuf,
    state: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let export = tmp.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let state = tmp.path().join("state");
    Dirs {
        export,
        state,
        _tmp: tmp,
    }
}

fn open_table(d: &Dirs) -> LocalBackend {
    let b = LocalBackend::open_with(&d.export, HandleMode::Table, Some(&d.state)).unwrap();
    assert_eq!(b.handle_mode(), HandleMode::Table);
    b
}

fn read_all(b: &LocalBackend, key: &txnfs_backend::FileKey) -> Vec<u8> {
    b.read(&user(), key, 0, 1 << 20).unwrap().0.to_vec()
}

fn write(b: &LocalBackend, key: &txnfs_backend::FileKey, data: &[u8]) {
    b.write(&OpCtx::default(), key, 0, data, true).unwrap();
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().ino()
}

#[test]
fn keys_survive_restart_and_renames_through_the_backend() {
    let d = dirs();
    let (root, sub, file, moved) = {
        let b = open_table(&d);
        let root = b.root().unwrap();
        let sub = mkdir(&b, &root, "sub");
        let file = create(&b, &sub, "file");
        write(&b, &file, b"first bytes");
        let moved = create(&b, &root, "moved");
        write(&b, &moved, b"moved bytes");
        // Renamed through the backend into another directory, then into a new one.
        b.rename(&user(), &root, b"moved", &sub, b"moved2").unwrap();
        let deeper = mkdir(&b, &sub, "deeper");
        b.rename(&user(), &sub, b"moved2", &deeper, b"moved3")
            .unwrap();
        assert_eq!(read_all(&b, &moved), b"moved bytes");
        (root, sub, file, moved)
    };
    assert!(d.state.join(HANDLE_TABLE_FILE).is_file());
    assert!(d.export.join("sub/deeper/moved3").is_file());

    // A new backend on the same state directory: no descriptor is cached any more.
    let b = open_table(&d);
    assert_eq!(b.root().unwrap(), root);
    assert_eq!(read_all(&b, &file), b"first bytes");
    assert_eq!(read_all(&b, &moved), b"moved bytes");
    assert_eq!(b.getattr(&user(), &sub).unwrap().ftype, FileType::Directory);
    assert_eq!(b.lookup(&user(), &sub, b"file").unwrap().0, file);
    assert_eq!(b.lookup_parent(&user(), &sub).unwrap().0, root);
    // READDIR hands out the same keys as LOOKUP and CREATE did.
    let (entries, eof) = b.readdir(&user(), &sub, 0, 100).unwrap();
    assert!(eof);
    let file_entry = entries.iter().find(|e| &e.name[..] == b"file").unwrap();
    assert_eq!(file_entry.key, file);
    // root, sub, file, moved, deeper.
    assert_eq!(b.handle_table_len().unwrap(), 5);
}

#[test]
fn a_file_moved_behind_the_backends_back_is_found_by_its_key() {
    let d = dirs();
    let (file, dir_key) = {
        let b = open_table(&d);
        let root = b.root().unwrap();
        let a = mkdir(&b, &root, "a");
        let dir_key = mkdir(&b, &a, "inner");
        let file = create(&b, &dir_key, "data");
        write(&b, &file, b"still here");
        mkdir(&b, &root, "z");
        (file, dir_key)
    };
    // Outside the server: the file moves within its directory, then the directory
    // moves to another branch of the tree.
    std::fs::rename(
        d.export.join("a/inner/data"),
        d.export.join("a/inner/renamed"),
    )
    .unwrap();
    {
        let b = open_table(&d);
        assert_eq!(read_all(&b, &file), b"still here");
    }
    std::fs::rename(d.export.join("a/inner"), d.export.join("z/elsewhere")).unwrap();
    let b = open_table(&d);
    assert_eq!(read_all(&b, &file), b"still here");
    assert_eq!(
        b.lookup(&user(), &dir_key, b"renamed").unwrap().0,
        file,
        "the moved directory's key reaches it too"
    );
    // The search recorded the new place: a later backend reaches it without one, and
    // a rename by the same inode number but not the same object is not confused.
    drop(b);
    let b = open_table(&d);
    assert_eq!(read_all(&b, &file), b"still here");
}

#[test]
fn a_removed_object_is_stale() {
    let d = dirs();
    let (through, behind, linked) = {
        let b = open_table(&d);
        let root = b.root().unwrap();
        let through = create(&b, &root, "through");
        let behind = create(&b, &root, "behind");
        let linked = create(&b, &root, "linked");
        write(&b, &linked, b"two names");
        b.link(&user(), &linked, &root, b"second").unwrap();
        b.remove(&user(), &root, b"through").unwrap();
        assert_eq!(
            b.getattr(&user(), &through).unwrap_err(),
            BackendError::Stale
        );
        // One of two links gone: the object lives on.
        b.remove(&user(), &root, b"linked").unwrap();
        assert_eq!(read_all(&b, &linked), b"two names");
        (through, behind, linked)
    };
    std::fs::remove_file(d.export.join("behind")).unwrap();
    let b = open_table(&d);
    for k in [&through, &behind] {
        assert_eq!(b.getattr(&user(), k).unwrap_err(), BackendError::Stale);
    }
    // Reached again through its other name after the restart.
    assert_eq!(read_all(&b, &linked), b"two names");
}

#[test]
fn a_reused_inode_number_does_not_revive_an_old_key() {
    let d = dirs();
    let b = open_table(&d);
    let root = b.root().unwrap();
    let old = create(&b, &root, "old");
    let old_ino = ino(&d.export.join("old"));
    drop(b);
    std::fs::remove_file(d.export.join("old")).unwrap();
    // Ext4 and tmpfs hand a freed inode number to the next file made; make files until
    // one has it (bounded).
    let mut reused = None;
    for i in 0..2000 {
        let p = d.export.join(format!("new{i}"));
        std::fs::write(&p, b"new object").unwrap();
        if ino(&p) == old_ino {
            reused = Some(p);
            break;
        }
    }
    let reused = reused.expect("the file system never reused the inode number");
    let b = open_table(&d);
    assert_eq!(b.getattr(&user(), &old).unwrap_err(), BackendError::Stale);
    let name = reused.file_name().unwrap().to_str().unwrap().as_bytes();
    let (new_key, _) = b.lookup(&user(), &root, name).unwrap();
    assert_ne!(new_key, old);
    assert_eq!(read_all(&b, &new_key), b"new object");
    assert_eq!(b.getattr(&user(), &old).unwrap_err(), BackendError::Stale);
}

#[test]
fn keys_of_the_other_mode_are_stale() {
    let d = dirs();
    let kernel = LocalBackend::open_with(&d.export, HandleMode::Kernel, None);
    let b = open_table(&d);
    let root = b.root().unwrap();
    let file = create(&b, &root, "f");
    // A table key is refused by a kernel-mode backend (where one can run), and a
    // kernel key (or garbage) by the table.
    if let Ok(k) = kernel {
        assert_eq!(k.getattr(&user(), &file).unwrap_err(), BackendError::Stale);
        let kroot = k.root().unwrap();
        assert_eq!(b.getattr(&user(), &kroot).unwrap_err(), BackendError::Stale);
    }
    let forged = bytes::Bytes::from_static(b"\xfeT\x00\x00\x00\x00\x00\x00\x30\x39");
    assert_eq!(
        b.getattr(&user(), &forged).unwrap_err(),
        BackendError::Stale
    );
}

#[test]
fn mount_points_are_xdev_in_table_mode_too() {
    let d = dirs();
    let mnt = d.export.join("mnt");
    let bind = d.export.join("bind");
    let plain = d.export.join("plain");
    for p in [&mnt, &bind, &plain] {
        std::fs::create_dir(p).unwrap();
    }
    let _tmpfs = common::mounts::Mounted::new(&["-t", "tmpfs", "txnfs-test"], &mnt);
    let _bound = common::mounts::Mounted::new(&["--bind", plain.to_str().unwrap()], &bind);
    let b = open_table(&d);
    let root = b.root().unwrap();
    assert_eq!(
        b.lookup(&user(), &root, b"mnt").unwrap_err(),
        BackendError::XDev
    );
    // Same device, other mount: refused too (a bind mount could show anything).
    assert_eq!(
        b.lookup(&user(), &root, b"bind").unwrap_err(),
        BackendError::XDev
    );
    let (ents, _) = b.readdir(&user(), &root, 0, 100).unwrap();
    let mut names: Vec<_> = ents.iter().map(|e| e.name.to_vec()).collect();
    names.sort();
    assert_eq!(names, [b"plain".to_vec()]);
}

#[test]
fn two_backends_on_one_export_share_its_table() {
    // As a reload that opens an export again while the old backend still serves.
    let d = dirs();
    let old = open_table(&d);
    let root = old.root().unwrap();
    let file = create(&old, &root, "f");
    write(&old, &file, b"shared");
    let new = open_table(&d);
    assert_eq!(read_all(&new, &file), b"shared");
    let other = create(&new, &root, "g");
    assert_eq!(old.lookup(&user(), &root, b"g").unwrap().0, other);
    drop(old);
    drop(new);
    let again = open_table(&d);
    assert_eq!(again.lookup(&user(), &root, b"g").unwrap().0, other);
}
