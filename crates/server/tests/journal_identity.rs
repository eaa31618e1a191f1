//! Journals bound to what they protect (issue 21 item 2, ADR 0023): the exact A/B
//! scenario — a transaction on export A cut off by a crash, then a server of export B
//! on the same state directory — leaves A untouched, and A's own restart rolls the
//! transaction back; a journal that records another export is refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use txnfs_backend::layer::LayerRegistry;
use txnfs_backend::{Backend, CreateMode, Creds, OpCtx, SetAttrs};
use txnfs_server::export::{export_identity, layer_state_dir, Exports};
use txnfs_server::{BackendKind, Config, ExportConfig, Server};

fn export(path: &Path) -> ExportConfig {
    ExportConfig {
        name: "/".into(),
        path: path.to_path_buf(),
        backend: BackendKind::Local,
        read_only: false,
        clients: Vec::new(),
        prebuilt: None,
    }
}

fn config(path: &Path, state: &Path) -> Config {
    Config {
        exports: vec![export(path)],
        state_dir: Some(state.to_path_buf()),
        grace: false,
        ..Config::default()
    }
}

/// The names under `dir`, sorted (the layer's hidden `.txnfs` left out).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".txnfs")
        .collect();
    v.sort();
    v
}

struct Dirs {
    _tmp: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
    state: PathBuf,
}

/// Export A with 40 files in `d/`, an empty export B, both on one file system, and a
/// state directory.
fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, state) = (
        tmp.path().join("A"),
        tmp.path().join("B"),
        tmp.path().join("S"),
    );
    std::fs::create_dir_all(a.join("d")).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    for i in 0..40 {
        std::fs::write(a.join(format!("d/old{i}")), b"kept").unwrap();
    }
    Dirs {
        _tmp: tmp,
        a,
        b,
        state,
    }
}

/// A server of A that dies (as `kill -9` would stop it) in the middle of a transaction
/// that created 30 files in `d/`: its layer is never closed, its journal keeps the
/// unfinished transaction.
fn crash_in_a_transaction(d: &Dirs) {
    let exports = Exports::open(
        &[export(&d.a)],
        &LayerRegistry::builtin(),
        Some(&d.state),
        true,
    )
    .unwrap();
    let id = exports.root_export().unwrap();
    let backend: Arc<dyn Backend> = exports.get(id).unwrap().backend.clone();
    let cx = OpCtx {
        creds: Creds::default(),
        client: Some(1),
        compound: 7,
        txn: true,
        span: Default::default(),
        waited: Default::default(),
    };
    backend.begin_compound(&cx).unwrap();
    let root = backend.root().unwrap();
    let (dir, _) = backend.lookup(&cx, &root, b"d").unwrap();
    for i in 0..30 {
        backend
            .create_file(
                &cx,
                &dir,
                format!("new{i}").as_bytes(),
                CreateMode::Unchecked,
                &SetAttrs::default(),
            )
            .unwrap();
    }
    std::mem::forget(exports);
}

#[test]
fn a_server_of_another_directory_leaves_a_crashed_transaction_alone() {
    let d = dirs();
    crash_in_a_transaction(&d);
    let during = names(&d.a.join("d"));
    assert_eq!(during.len(), 70, "the transaction's files are there");

    // B on the same state directory: starts, and touches nothing of A.
    let b = Server::new(config(&d.b, &d.state)).expect("B starts");
    assert_eq!(names(&d.a.join("d")), during, "A untouched by B");
    assert!(b.exports.rolled_back_at_start().is_empty());
    drop(b);
    assert_eq!(names(&d.a.join("d")), during, "A untouched by B");

    // A's own restart rolls its transaction back.
    let a = Server::new(config(&d.a, &d.state)).expect("A starts");
    assert_eq!(a.exports.rolled_back_at_start(), vec![7]);
    let after = names(&d.a.join("d"));
    assert_eq!(after.len(), 40, "{after:?}");
    assert!(after.iter().all(|n| n.starts_with("old")), "{after:?}");
}

#[test]
fn a_journal_that_records_another_export_is_refused() {
    let d = dirs();
    crash_in_a_transaction(&d);
    let during = names(&d.a.join("d"));
    // A's journal, put where B's would be (a copied state directory, a hash collision).
    let from = layer_state_dir(&d.state, &export_identity(&export(&d.a)));
    let to = layer_state_dir(&d.state, &export_identity(&export(&d.b)));
    assert_ne!(from, to, "each export has its own place");
    std::fs::create_dir_all(&to).unwrap();
    std::fs::copy(from.join("txn.journal"), to.join("txn.journal")).unwrap();
    let err = match Server::new(config(&d.b, &d.state)) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("B started over A's journal"),
    };
    assert!(err.contains("protects another export"), "{err}");
    assert!(err.contains(&d.a.display().to_string()), "names A: {err}");
    assert_eq!(names(&d.a.join("d")), during, "A untouched");
    // A still recovers from its own.
    let a = Server::new(config(&d.a, &d.state)).expect("A starts");
    assert_eq!(a.exports.rolled_back_at_start(), vec![7]);
    assert_eq!(names(&d.a.join("d")).len(), 40);
}

/// A journal of the first format at the older place (`layers/<4 hex of the export's
/// name>/`), with one record: the `Begin` of transaction 1, and its `Commit` if
/// `committed`.
fn legacy_journal(state: &Path, committed: bool) -> PathBuf {
    fn fnv(b: &[u8]) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &x in b {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    }
    let mut f = b"TXNFSJ01".to_vec();
    f.extend_from_slice(&1u64.to_be_bytes());
    let mut record = |kind: u8, extra: &[u8]| {
        let mut p = 1u64.to_be_bytes().to_vec(); // generation
        p.extend_from_slice(&1u64.to_be_bytes()); // txid
        p.push(kind);
        p.extend_from_slice(extra);
        f.extend_from_slice(&(p.len() as u32).to_be_bytes());
        f.extend_from_slice(&fnv(&p).to_be_bytes());
        f.extend_from_slice(&p);
    };
    record(4, &9u64.to_be_bytes());
    if committed {
        record(1, &[]);
    }
    // The id of export "/" (FNV-1a of the name, folded to 16 bits).
    let dir = state.join("layers").join("bd52");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("txn.journal");
    std::fs::write(&p, f).unwrap();
    p
}

#[test]
fn an_older_journal_is_refused_while_it_holds_an_unfinished_transaction() {
    let d = dirs();
    let p = legacy_journal(&d.state, false);
    let err = match Server::new(config(&d.a, &d.state)) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("started over a journal that names no directory"),
    };
    assert!(err.contains(&p.display().to_string()), "{err}");
    assert!(err.contains("1 unfinished transaction"), "{err}");
    assert!(err.contains("move the file aside"), "{err}");
    assert!(p.exists(), "kept for the administrator");
    // Finished: nothing to recover, it goes.
    legacy_journal(&d.state, true);
    let _a = Server::new(config(&d.a, &d.state)).expect("starts");
    assert!(!p.exists(), "removed");
}
