//! The local backend's directory watches are inotify watches (ADR 0047): entries
//! created, removed and renamed in a watched directory by another process are
//! reported, in order; the backend's own changes (create, mkdir, link, remove,
//! rename, within and between watched directories) are not; an outside change and
//! one of the backend's on the same name at once is reported as `Lost`. One test
//! function: the SIGIO disposition is process-wide, and the first check is that no
//! watch is taken without a handler.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use txnfs_backend::local::{sigio_handled, LocalBackend};
use txnfs_backend::{Backend, BackendError, DirEvent, DirWatch, OpCtx};

static SIGIOS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_sigio(_: libc::c_int) {
    SIGIOS.fetch_add(1, Ordering::SeqCst);
}

fn install_sigio_handler() {
    // SAFETY: all-zero is a valid `sigaction`; the handler only touches an atomic
    // (async-signal-safe), and the kernel copies `act` before returning.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigio as extern "C" fn(libc::c_int) as libc::sighandler_t;
        act.sa_flags = libc::SA_RESTART;
        assert_eq!(libc::sigaction(libc::SIGIO, &act, std::ptr::null_mut()), 0);
    }
}

fn ctx() -> OpCtx {
    OpCtx::default()
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The events of `w` once at least `n` arrived (within 2 s), and none after 50 ms more.
fn events(w: &DirWatch, n: usize) -> Vec<DirEvent> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(w.take_events());
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    got.extend(w.take_events());
    got
}

#[test]
fn directory_watches_report_outside_changes_only() {
    let dir = tempfile::tempdir().unwrap();
    let be = LocalBackend::open(dir.path()).unwrap();
    let root = be.root().unwrap();
    let d = mkdir(&be, &root, "d");
    let e = mkdir(&be, &root, "e");
    let (dp, ep) = (dir.path().join("d"), dir.path().join("e"));

    // No SIGIO handler: nothing would tell the server, so no watch.
    assert!(!sigio_handled());
    assert_eq!(be.watch_dir(&ctx(), &d).unwrap_err(), BackendError::NotSupp);
    install_sigio_handler();
    let wd = be.watch_dir(&ctx(), &d).unwrap().expect("a watch of d");
    let we = be.watch_dir(&ctx(), &e).unwrap().expect("a watch of e");
    assert!(wd.take_events().is_empty());

    // Outside: create, rename within, rename out, remove; each reported, in order,
    // and SIGIO rang.
    let rang = SIGIOS.load(Ordering::SeqCst);
    std::fs::File::create(dp.join("x")).unwrap();
    std::fs::rename(dp.join("x"), dp.join("y")).unwrap();
    std::fs::create_dir(dp.join("sub")).unwrap();
    std::fs::rename(dp.join("sub"), ep.join("sub2")).unwrap();
    std::fs::remove_file(dp.join("y")).unwrap();
    assert_eq!(
        events(&wd, 5),
        vec![
            DirEvent::Added(b("x")),
            DirEvent::Renamed {
                from: b("x"),
                to: b("y")
            },
            DirEvent::Added(b("sub")),
            DirEvent::Removed(b("sub")),
            DirEvent::Removed(b("y")),
        ]
    );
    assert_eq!(events(&we, 1), vec![DirEvent::Added(b("sub2"))]);
    assert!(SIGIOS.load(Ordering::SeqCst) > rang, "SIGIO rang");

    // The backend's own changes: none reported.
    let f = create(&be, &d, "own");
    make_node(
        &be,
        &d,
        b"own-dir",
        &txnfs_backend::NodeKind::Directory,
        &Default::default(),
    )
    .unwrap();
    be.link(&ctx(), &f, &d, b"own-link").unwrap();
    be.rename(&ctx(), &d, b"own-link", &d, b"own-renamed")
        .unwrap();
    be.rename(&ctx(), &d, b"own-renamed", &e, b"moved-over")
        .unwrap();
    be.remove(&ctx(), &d, b"own").unwrap();
    be.remove(&ctx(), &e, b"moved-over").unwrap();
    // Failed own changes make nothing and hide nothing.
    assert!(be.remove(&ctx(), &d, b"never-there").is_err());
    assert_eq!(events(&wd, 0), vec![]);
    assert_eq!(events(&we, 0), vec![]);

    // An own create that found the name there already (UNCHECKED) made no event: an
    // outside create of the same name just before is still reported.
    std::fs::File::create(dp.join("raced")).unwrap();
    let c = create_file(
        &be,
        &d,
        b"raced",
        txnfs_backend::CreateMode::Unchecked,
        &Default::default(),
    )
    .unwrap();
    assert!(!c.created);
    assert_eq!(events(&wd, 1), vec![DirEvent::Added(b("raced"))]);

    // An outside change and an own change of one name at once: the outside rename
    // onto "own2" and the backend's create of "own2" meet; whichever wins, the watch
    // reports the outside change or `Lost`, never nothing.
    let mover = {
        let (from, to) = (dp.join("raced"), dp.join("own2"));
        std::thread::spawn(move || std::fs::rename(from, to).unwrap())
    };
    let _ = create_file(
        &be,
        &d,
        b"own2",
        txnfs_backend::CreateMode::Guarded,
        &Default::default(),
    );
    mover.join().unwrap();
    let seen = events(&wd, 1);
    assert!(
        seen.iter()
            .any(|e| matches!(e, DirEvent::Lost | DirEvent::Renamed { .. })),
        "{seen:?}"
    );

    // Dropped, the watch reports nothing more (another watch of e still does).
    drop(wd);
    std::fs::File::create(dp.join("after")).unwrap();
    std::fs::File::create(ep.join("after")).unwrap();
    assert_eq!(events(&we, 1), vec![DirEvent::Added(b("after"))]);
    // Watched again, d starts afresh.
    let wd = be.watch_dir(&ctx(), &d).unwrap().expect("watched again");
    assert!(wd.take_events().is_empty());
    // A second watch of one directory shares it; the first dropped, it goes on.
    let wd2 = be.watch_dir(&ctx(), &d).unwrap().expect("shared");
    drop(wd);
    std::fs::remove_file(dp.join("after")).unwrap();
    assert_eq!(events(&wd2, 1), vec![DirEvent::Removed(b("after"))]);
}
