//! `txnfs serve` registers NFS v3 and v4, MOUNT v3, NLM v4 and NSM v1 with the host's
//! rpcbind on start and removes the entries on SIGTERM (issue 8, item 10; issue 18).
//!
//! The one test of this file runs Debian's `rpcbind` in the foreground as its child (or
//! uses one the host already runs). rpcbind is host-wide (port 111, /run/rpcbind.sock),
//! so this test lives alone in its test binary: cargo runs test binaries one after the
//! other, so no other test's server registers while it looks.

mod common;

use common::{free_port, serve_help, spawn_serve, terminate, wait_listening};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use txnfs_rpc::portmap::{Portmapper, Registration, IPPROTO_TCP, PMAP_PORT};

const NFS_PROG: u32 = 100003;

/// The two tests share the host's one portmapper: one at a time.
static RPCBIND: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A child process (rpcbind, txnfs serve) stopped by its PID when the guard goes, also
/// when an assertion fails first: SIGTERM (rpcbind removes its socket, txnfs its
/// entry), SIGKILL after 5 s, then reaped.
struct Stopped(Option<Child>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The rpcbind this test talks to: its own child or (no child) the host's.
type Rpcbind = Stopped;

fn portmapper_answers() -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], PMAP_PORT)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// Starts `rpcbind -f` (foreground, no warm start so no stale entries come back) unless
/// the host already runs one. Fails the test when neither works: scripts/test.sh
/// installs the package, so a missing rpcbind is a broken set-up, not a reason to pass.
fn start_rpcbind() -> Rpcbind {
    if portmapper_answers() {
        eprintln!("NOTE: using the rpcbind this host already runs on 127.0.0.1:111");
        return Stopped(None);
    }
    spawn_rpcbind(&[])
}

/// `rpcbind -f` with `extra` flags as this test's child, once it answers.
fn spawn_rpcbind(extra: &[&str]) -> Rpcbind {
    let exe = ["/usr/sbin/rpcbind", "/sbin/rpcbind"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("rpcbind is not installed (apt-get install rpcbind; scripts/test.sh does)");
    let child = Command::new(exe)
        .arg("-f")
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("rpcbind starts (it needs root to bind port 111)");
    let mut rb = Stopped(Some(child));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(portmapper_answers() && std::path::Path::new("/run/rpcbind.sock").exists()) {
        if let Some(c) = &mut rb.0 {
            if let Ok(Some(st)) = c.try_wait() {
                panic!("rpcbind exited at start: {st}");
            }
        }
        assert!(Instant::now() < deadline, "rpcbind did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    rb
}

fn getport(rt: &tokio::runtime::Runtime) -> u32 {
    getport_of(rt, NFS_PROG, 4)
}

fn getport_of(rt: &tokio::runtime::Runtime, prog: u32, vers: u32) -> u32 {
    let pm = Portmapper::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], PMAP_PORT)));
    rt.block_on(pm.getport(prog, vers, IPPROTO_TCP, Duration::from_secs(2)))
        .expect("GETPORT answered")
}

/// The `rpcinfo -p` lines for programs 100003 (NFS), 100005 (MOUNT), 100021 (NLM) and
/// 100024 (NSM) as "program version proto port" (the service name rpcinfo appends is
/// left out).
fn rpcinfo_nfs_lines() -> Vec<String> {
    let out = Command::new("rpcinfo")
        .args(["-p", "127.0.0.1"])
        .output()
        .expect("rpcinfo runs (package rpcbind)");
    assert!(out.status.success(), "rpcinfo -p failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            matches!(
                l.split_whitespace().next(),
                Some("100003" | "100005" | "100021" | "100024")
            )
        })
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
        .collect()
}

/// What a test here runs with: a runtime for the GETPORT calls, the host's portmapper to
/// itself, and a running rpcbind.
fn with_rpcbind() -> (
    tokio::runtime::Runtime,
    std::sync::MutexGuard<'static, ()>,
    Rpcbind,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let one = RPCBIND.lock().unwrap_or_else(|e| e.into_inner());
    (rt, one, start_rpcbind())
}

#[test]
fn serve_registers_with_rpcbind_and_unregisters_on_sigterm() {
    let (rt, _one, _rpcbind) = with_rpcbind();
    // Nothing of ours yet (a host rpcbind may hold a kernel nfsd's entry on another port).
    let port = free_port();
    assert_ne!(getport(&rt), u32::from(port));

    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let child = spawn_serve(dir.path(), port, &[], true);
    let mut serve = Stopped(Some(child));
    let child = serve.0.as_mut().expect("just spawned");
    let deadline = Instant::now() + Duration::from_secs(10);
    // NSM is registered last.
    while getport_of(&rt, 100024, 1) != u32::from(port) {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("txnfs serve exited: {st}");
        }
        assert!(Instant::now() < deadline, "txnfs did not register");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("registered {:?} after start", t0.elapsed());
    let lines = rpcinfo_nfs_lines();
    for entry in ["100003 4", "100003 3", "100005 3", "100021 4", "100024 1"] {
        assert!(
            lines.contains(&format!("{entry} tcp {port}")),
            "rpcinfo -p lacks {entry} tcp {port}: {lines:?}"
        );
    }

    let (status, log) = terminate(child);
    assert!(status.success(), "exit {status}; log:\n{log}");
    assert!(
        log.contains("registered NFS v3 and v4, MOUNT v3, NLM v4 and NSM v1 with rpcbind"),
        "log:\n{log}"
    );
    assert_eq!(
        getport(&rt),
        0,
        "the entry is gone after SIGTERM; log:\n{log}"
    );
    let lines = rpcinfo_nfs_lines();
    assert!(
        !lines.iter().any(|l| l.ends_with(&format!(" {port}"))),
        "rpcinfo -p still lists port {port}: {lines:?}"
    );
}

/// With `--no-rpcbind` nothing is registered (it needs the rpcbind too, hence this file).
#[test]
fn no_rpcbind_flag_registers_nothing() {
    let (rt, _one, _rpcbind) = with_rpcbind();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let child = spawn_serve(dir.path(), port, &["--no-rpcbind"], false);
    let mut serve = Stopped(Some(child));
    let child = serve.0.as_mut().expect("just spawned");
    wait_listening(port);
    // Serving now; a registration would have happened before the listener accepted.
    std::thread::sleep(Duration::from_millis(200));
    let got = getport(&rt);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert_ne!(got, u32::from(port), "--no-rpcbind registered anyway");
}

#[test]
fn help_documents_no_rpcbind() {
    let out = serve_help();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--no-rpcbind"), "{text}");
    assert!(text.contains("portmapper"), "{text}");
}

/// The fallback path: PMAP version 2 SET, GETPORT and UNSET over TCP to 127.0.0.1:111
/// (for portmappers without rpcbind's local socket; Debian 12's rpcbind 1.2.6 takes
/// them from loopback too).
#[test]
fn pmap_v2_over_tcp() {
    let _one = RPCBIND.lock().unwrap_or_else(|e| e.into_inner());
    let _rpcbind = start_rpcbind();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pm = Portmapper::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], PMAP_PORT)));
    let reg = Registration {
        prog: NFS_PROG,
        versions: vec![4],
        addr: std::net::SocketAddr::from(([127, 0, 0, 1], free_port())),
    };
    let t = Duration::from_secs(2);
    rt.block_on(pm.set(&reg, t)).expect("SET over TCP");
    assert_eq!(getport(&rt), u32::from(reg.addr.port()));
    let lines = rpcinfo_nfs_lines();
    assert!(
        lines.contains(&format!("100003 4 tcp {}", reg.addr.port())),
        "{lines:?}"
    );
    rt.block_on(pm.unset(&reg, t)).expect("UNSET over TCP");
    assert_eq!(getport(&rt), 0);
}

/// Debian's libnfs-utils (`nfs-cp`, `nfs-ls`, `nfs-cat`: libnfs, a client we did not
/// write) over NFSv3 against `txnfs serve`, finding MOUNT and NFS through rpcbind as
/// libnfs does by default: the bytes copied are on the export's disk and read back.
#[test]
fn libnfs_utils_copy_list_and_read_over_nfsv3() {
    let (rt, _one, _rpcbind) = with_rpcbind();
    for tool in ["nfs-cp", "nfs-ls", "nfs-cat"] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "{tool} is not installed (apt-get install libnfs-utils; scripts/test.sh does)"
        );
    }
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let child = spawn_serve(dir.path(), port, &[], false);
    let mut serve = Stopped(Some(child));
    let deadline = Instant::now() + Duration::from_secs(10);
    while getport_of(&rt, 100005, 3) != u32::from(port) {
        assert!(Instant::now() < deadline, "txnfs did not register MOUNT");
        std::thread::sleep(Duration::from_millis(20));
    }
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        out.stdout
    };
    // libnfs asks the portmapper for the ports; the URL names no port (as users write it).
    // Its URL is nfs://SERVER/EXPORT/FILE: `//f` is f in the export "/", `/d/f` is f in
    // a MOUNT of the subdirectory /d.
    std::fs::create_dir(dir.path().join("export/d")).unwrap();
    for (url, path) in [
        ("nfs://127.0.0.1//copied.bin", "export/copied.bin"),
        ("nfs://127.0.0.1/d/copied.bin", "export/d/copied.bin"),
    ] {
        run(&["nfs-cp", src.to_str().unwrap(), url]);
        let on_disk = std::fs::read(dir.path().join(path)).expect("on the export");
        assert!(
            on_disk == data,
            "{url}: nfs-cp wrote {} bytes",
            on_disk.len()
        );
        let back = run(&["nfs-cat", url]);
        assert!(back == data, "{url}: nfs-cat read {} bytes", back.len());
    }
    let listing = String::from_utf8(run(&["nfs-ls", "nfs://127.0.0.1/d"])).unwrap();
    assert!(listing.contains("copied.bin"), "nfs-ls:\n{listing}");
    let (status, _) = terminate(serve.0.as_mut().expect("running"));
    assert!(status.success());
}
