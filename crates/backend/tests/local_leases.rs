//! The local backend's watches are kernel leases (ADR 0027): an outside opener waits
//! until the watch is dropped, the watch reports itself broken meanwhile and SIGIO
//! rings; the backend's own I/O never breaks its own lease; a file open for writing
//! elsewhere cannot be watched. One test function: the SIGIO disposition is
//! process-wide, and the first check is that no lease is taken without a handler.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use txnfs_backend::local::{sigio_handled, LocalBackend};
use txnfs_backend::{Backend, BackendError, OpCtx, Watch, WatchKind};

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

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Opens `path` from another thread (`write`: for writing, else reading), writing
/// `data` if for writing; the receiver gets the time the open took once the file is
/// closed again.
fn open_elsewhere(
    path: std::path::PathBuf,
    write: bool,
    data: &'static [u8],
) -> mpsc::Receiver<Duration> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let t = Instant::now();
        let mut f = OpenOptions::new()
            .read(!write)
            .write(write)
            .open(&path)
            .expect("open elsewhere");
        let took = t.elapsed();
        if write {
            f.write_all(data).expect("write elsewhere");
        }
        // Closed before the caller hears of it: a file still open for writing here
        // would refuse the caller's next lease.
        drop(f);
        let _ = tx.send(took);
    });
    rx
}

fn ctx() -> OpCtx {
    OpCtx::default()
}

#[test]
fn leases_back_watches() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    let key = create(&b, &root, "f");
    b.write(&ctx(), &key, 0, b"hello", true).unwrap();
    let path = dir.path().join("f");

    // No SIGIO handler: a break would end the process, so no lease.
    assert!(!sigio_handled());
    assert_eq!(
        b.watch_file(&ctx(), &key, WatchKind::Read).unwrap_err(),
        BackendError::NotSupp
    );
    install_sigio_handler();
    assert!(sigio_handled());

    // A read lease, although the backend's cache held the file open read-write.
    let w: Watch = b
        .watch_file(&ctx(), &key, WatchKind::Read)
        .unwrap()
        .expect("a lease");
    assert!(!w.broken());
    // Reads through the backend (and outside readers) do not break it.
    assert_eq!(&b.read(&ctx(), &key, 0, 10).unwrap().0[..], b"hello");
    assert_eq!(std::fs::read(&path).unwrap(), b"hello");
    assert!(!w.broken());
    // A second read watch of the file shares the lease.
    let w2 = b
        .watch_file(&ctx(), &key, WatchKind::Read)
        .unwrap()
        .expect("shared");
    drop(w2);
    assert!(!w.broken());

    // An outside writer waits, the watch is broken, SIGIO rang.
    let before = SIGIOS.load(Ordering::SeqCst);
    let done = open_elsewhere(path.clone(), true, b"HELLO");
    wait_until("the break", || w.broken());
    wait_until("SIGIO", || SIGIOS.load(Ordering::SeqCst) > before);
    assert!(done.recv_timeout(Duration::from_millis(300)).is_err());
    drop(w);
    let took = done
        .recv_timeout(Duration::from_secs(2))
        .expect("writer ran");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(&b.read(&ctx(), &key, 0, 10).unwrap().0[..], b"HELLO");

    // Open for writing elsewhere: no lease of either kind.
    {
        let _writer = OpenOptions::new().write(true).open(&path).unwrap();
        for kind in [WatchKind::Read, WatchKind::Write] {
            assert_eq!(
                b.watch_file(&ctx(), &key, kind).unwrap_err(),
                BackendError::Conflict,
                "{kind:?}"
            );
        }
    }
    // Open for reading elsewhere: a read lease, not a write lease.
    {
        let _reader = std::fs::File::open(&path).unwrap();
        assert_eq!(
            b.watch_file(&ctx(), &key, WatchKind::Write).unwrap_err(),
            BackendError::Conflict
        );
        let w = b.watch_file(&ctx(), &key, WatchKind::Read).unwrap();
        assert!(w.is_some_and(|w| !w.broken()));
    }

    // A write lease: the backend's own reads and writes go through its descriptor.
    let w = b
        .watch_file(&ctx(), &key, WatchKind::Write)
        .unwrap()
        .expect("a write lease");
    b.write(&ctx(), &key, 5, b" world", true).unwrap();
    assert_eq!(&b.read(&ctx(), &key, 0, 20).unwrap().0[..], b"HELLO world");
    assert!(!w.broken());
    // An outside reader waits for it.
    let done = open_elsewhere(path.clone(), false, b"");
    wait_until("the break of the write lease", || w.broken());
    assert!(done.recv_timeout(Duration::from_millis(300)).is_err());
    drop(w);
    done.recv_timeout(Duration::from_secs(2))
        .expect("reader ran");

    // A write through the backend under a read lease gives the lease up (the write is
    // not held up by it) and rings, so the server can recall.
    let w = b
        .watch_file(&ctx(), &key, WatchKind::Read)
        .unwrap()
        .expect("a read lease");
    let before = SIGIOS.load(Ordering::SeqCst);
    let t = Instant::now();
    b.write(&ctx(), &key, 0, b"j", true).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(w.broken());
    wait_until("SIGIO", || SIGIOS.load(Ordering::SeqCst) > before);
    drop(w);
    // And after it, with the backend's read-write descriptor cached again, a new lease
    // is still possible.
    let w = b
        .watch_file(&ctx(), &key, WatchKind::Read)
        .unwrap()
        .expect("a read lease again");
    assert!(!w.broken());
    assert_eq!(std::fs::read(&path).unwrap(), b"jELLO world");
    drop(w);

    // A write lease on a file just created: it takes over the read-write descriptor
    // the create left in the backend's cache (no second open), and works as any.
    let new = create(&b, &root, "g");
    let w = b
        .watch_file(&ctx(), &new, WatchKind::Write)
        .unwrap()
        .expect("a write lease on a new file");
    b.write(&ctx(), &new, 0, b"fresh", true).unwrap();
    assert_eq!(&b.read(&ctx(), &new, 0, 10).unwrap().0[..], b"fresh");
    assert!(!w.broken());
    let done = open_elsewhere(dir.path().join("g"), false, b"");
    wait_until("the break of the adopted write lease", || w.broken());
    drop(w);
    done.recv_timeout(Duration::from_secs(2))
        .expect("reader ran");
    assert_eq!(std::fs::read(dir.path().join("g")).unwrap(), b"fresh");
}
