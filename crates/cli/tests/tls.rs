//! RPC-with-TLS end to end (RFC 9289, ADR 0049): `txnfs serve --tls-cert/--tls-key`
//! and `txnfs cp --tls` through a recording TCP proxy. The capture shows the AUTH_TLS
//! probe and its STARTTLS answer, then only TLS records both ways, and never the
//! file's bytes in clear; the bytes land on the export. An untrusted server
//! certificate is refused and nothing is written. Exports with `sec=tls` and
//! `sec=mtls` refuse connections without TLS (NFS4ERR_WRONGSEC; MOUNT v3
//! MNT3ERR_ACCES) or without a client certificate, and serve those with.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{bin, free_port, s, spawn_serve, terminate, txnfs, wait_listening};
use txnfs_testbed::certs::{CertFiles, TestCa};

/// What a recording proxy saw of one connection: client→server and server→client.
#[derive(Default, Clone)]
struct Capture {
    to_server: Vec<u8>,
    to_client: Vec<u8>,
}

/// A TCP proxy on 127.0.0.1 that forwards to `target` and keeps every byte.
struct RecordingProxy {
    addr: SocketAddr,
    conns: Arc<Mutex<Vec<Arc<Mutex<Capture>>>>>,
}

fn pump(mut from: TcpStream, mut to: TcpStream, cap: Arc<Mutex<Capture>>, to_server: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut c = cap.lock().unwrap();
            let side = if to_server {
                &mut c.to_server
            } else {
                &mut c.to_client
            };
            side.extend_from_slice(&buf[..n]);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

impl RecordingProxy {
    fn start(target: SocketAddr) -> RecordingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<Arc<Mutex<Capture>>>>> = Arc::default();
        let all = conns.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let cap = Arc::new(Mutex::new(Capture::default()));
                all.lock().unwrap().push(cap.clone());
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let up = cap.clone();
                std::thread::spawn(move || pump(client, server, up, true));
                std::thread::spawn(move || pump(s2, c2, cap, false));
            }
        });
        RecordingProxy { addr, conns }
    }

    /// The captures so far, after the traffic has settled.
    fn captures(&self) -> Vec<Capture> {
        std::thread::sleep(Duration::from_millis(300));
        self.conns
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.lock().unwrap().clone())
            .collect()
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Split the first RPC record (record mark + body) off `bytes`.
fn first_record(bytes: &[u8]) -> (&[u8], &[u8]) {
    assert!(bytes.len() >= 4, "no record in {} bytes", bytes.len());
    let mark = be32(bytes, 0);
    assert!(
        mark & 0x8000_0000 != 0,
        "the first record has several fragments"
    );
    let len = (mark & 0x7fff_ffff) as usize;
    assert!(bytes.len() >= 4 + len, "the first record is cut");
    (&bytes[4..4 + len], &bytes[4 + len..])
}

/// Walk `bytes` as TLS records: every header has a content type of 20-23
/// (change_cipher_spec, alert, handshake, application_data) and version 0x0303 (the
/// client's first, its ClientHello, may say 0x0301: RFC 8446 §5.1), and the records
/// tile the bytes exactly. Returns the number of records.
fn tls_records(bytes: &[u8], what: &str) -> usize {
    let mut at = 0;
    let mut n = 0;
    while at < bytes.len() {
        assert!(
            at + 5 <= bytes.len(),
            "{what}: a TLS record header is cut at {at}"
        );
        let (kind, version) = (bytes[at], [bytes[at + 1], bytes[at + 2]]);
        assert!(
            (0x14..=0x17).contains(&kind),
            "{what}: byte {at} is not a TLS record (type {kind:#x})"
        );
        let hello = n == 0 && kind == 0x16 && version == [0x03, 0x01];
        assert!(
            version == [0x03, 0x03] || hello,
            "{what}: record {n} at {at} has version {version:?}"
        );
        let len = usize::from(u16::from_be_bytes([bytes[at + 3], bytes[at + 4]]));
        assert!(len <= (1 << 14) + 256, "{what}: record {n} of {len} bytes");
        at += 5 + len;
        n += 1;
    }
    assert_eq!(at, bytes.len(), "{what}: the last TLS record is cut");
    n
}

struct Pki {
    ca: TestCa,
    server: CertFiles,
    alice: CertFiles,
    other_ca: TestCa,
}

fn pki(dir: &Path) -> Pki {
    let ca = TestCa::new(dir, "good");
    let server = ca.server(dir, "server");
    let alice = ca.client(dir, "alice", "alice");
    let other_ca = TestCa::new(dir, "other");
    Pki {
        ca,
        server,
        alice,
        other_ca,
    }
}

/// `txnfs serve` with TLS (and `extra` flags) on a fresh export under `dir`.
fn serve_tls(dir: &Path, p: &Pki, extra: &[&str]) -> (Child, u16) {
    let port = free_port();
    let mut flags = vec![
        "--no-rpcbind",
        "--tls-cert",
        s(&p.server.cert),
        "--tls-key",
        s(&p.server.key),
    ];
    flags.extend_from_slice(extra);
    let child = spawn_serve(dir, port, &flags, true);
    wait_listening(port);
    (child, port)
}

/// A file whose bytes are easy to spot: a marker string repeated, 300 KiB.
fn distinctive(dir: &Path) -> (PathBuf, Vec<u8>) {
    let data: Vec<u8> = b"TXNFS-TLS-PLAINTEXT-MARKER-7f3a9c;"
        .iter()
        .copied()
        .cycle()
        .take(300 * 1024)
        .collect();
    let path = dir.join("source.bin");
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

const MARKER: &[u8] = b"PLAINTEXT-MARKER";

#[test]
fn cp_over_tls_shows_only_tls_records_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let (mut server, port) = serve_tls(dir.path(), &p, &[]);
    let proxy = RecordingProxy::start(SocketAddr::from(([127, 0, 0, 1], port)));
    let (src, data) = distinctive(dir.path());
    let url = format!("nfs://127.0.0.1:{}/copied.bin", proxy.addr.port());
    let started = std::time::Instant::now();
    let out = txnfs(&["cp", "--tls", "--tls-ca", s(&p.ca.cert_pem), s(&src), &url]);
    let took = started.elapsed();
    let (_, log) = terminate(&mut server);
    assert!(
        out.status.success(),
        "txnfs cp --tls: {out:?}\nserver log:\n{log}"
    );
    eprintln!("cp of {} bytes over TLS took {took:?}", data.len());
    // The bytes on the export's disk.
    let on_disk = std::fs::read(dir.path().join("export/copied.bin")).unwrap();
    assert!(
        on_disk == data,
        "the export holds {} other bytes",
        on_disk.len()
    );

    let caps = proxy.captures();
    assert!(
        !caps.is_empty(),
        "the client did not connect through the proxy"
    );
    for (i, cap) in caps.iter().enumerate() {
        // Client→server: the AUTH_TLS probe (NULL call, credential flavour 7), then TLS.
        let (probe, rest_up) = first_record(&cap.to_server);
        assert_eq!(
            be32(probe, 4),
            0,
            "connection {i}: the first record is not a CALL"
        );
        assert_eq!(
            be32(probe, 20),
            0,
            "connection {i}: the probe is not a NULL call"
        );
        assert_eq!(
            be32(probe, 24),
            7,
            "connection {i}: the probe's flavour is not AUTH_TLS"
        );
        // Server→client: the answer with the STARTTLS verifier, then TLS.
        let (answer, rest_down) = first_record(&cap.to_client);
        assert_eq!(be32(answer, 0), be32(probe, 0), "connection {i}: xid");
        assert_eq!(be32(answer, 4), 1, "connection {i}: not a REPLY");
        assert_eq!(be32(answer, 12), 0, "connection {i}: verifier flavour");
        assert_eq!(be32(answer, 16), 8, "connection {i}: verifier length");
        assert_eq!(
            &answer[20..28],
            b"STARTTLS",
            "connection {i}: verifier body"
        );
        let up = tls_records(rest_up, "client→server");
        let down = tls_records(rest_down, "server→client");
        assert!(
            up >= 3 && down >= 3,
            "connection {i}: {up} and {down} TLS records"
        );
        // The file went through this connection, and never in clear.
        for side in [&cap.to_server, &cap.to_client] {
            assert!(
                !side.windows(MARKER.len()).any(|w| w == MARKER),
                "connection {i}: the file's bytes appear in clear"
            );
        }
    }
    let carried: usize = caps.iter().map(|c| c.to_server.len()).sum();
    assert!(
        carried > data.len(),
        "only {carried} bytes went to the server"
    );
}

#[test]
fn an_untrusted_server_certificate_is_refused_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let (mut server, port) = serve_tls(dir.path(), &p, &[]);
    let (src, _) = distinctive(dir.path());
    let url = format!("nfs://127.0.0.1:{port}/copied.bin");
    let out = txnfs(&[
        "cp",
        "--tls",
        "--tls-ca",
        s(&p.other_ca.cert_pem),
        s(&src),
        &url,
    ]);
    let (_, log) = terminate(&mut server);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "cp with an untrusted certificate succeeded: {out:?}"
    );
    assert!(err.contains("TLS handshake"), "{err}");
    assert!(
        err.contains("invalid peer certificate: UnknownIssuer"),
        "{err}"
    );
    assert!(
        !dir.path().join("export/copied.bin").exists(),
        "a file was written\n{log}"
    );
    // A server without TLS refuses the probe; the client says so.
    let port = free_port();
    let plain_dir = dir.path().join("plain");
    let mut plain = spawn_serve(&plain_dir, port, &["--no-rpcbind"], true);
    wait_listening(port);
    let url = format!("nfs://127.0.0.1:{port}/copied.bin");
    let out = txnfs(&["cp", "--tls", "--tls-ca", s(&p.ca.cert_pem), s(&src), &url]);
    terminate(&mut plain);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        err.contains("refused TLS") && err.contains("does not offer RPC-with-TLS"),
        "{err}"
    );
    assert!(!plain_dir.join("export/copied.bin").exists());
}

/// MNT of "/" over a plain or TLS connection: the mountstat3.
fn mnt(port: u16, tls: Option<txnfs_rpc::ClientTls>) -> u32 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let cfg = txnfs_rpc::ClientConfig {
            tls,
            ..Default::default()
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let cred = txnfs_rpc::Credential::Sys(txnfs_rpc::AuthSys {
            stamp: 1,
            machinename: bytes::Bytes::from_static(b"tls-test"),
            uid: 0,
            gid: 0,
            gids: vec![],
        });
        let c = txnfs_rpc::RpcClient::connect_with_config(addr, cred, cfg)
            .await
            .expect("connect");
        // dirpath "/": length 1, "/" and three bytes of padding.
        let args = bytes::Bytes::from_static(&[0, 0, 0, 1, b'/', 0, 0, 0]);
        let r = c.call(100005, 3, 1, args).await.expect("MNT");
        be32(&r, 0)
    })
}

fn trusting(p: &Pki, client: Option<&CertFiles>) -> txnfs_rpc::ClientTls {
    txnfs_rpc::ClientTls::from_pem_files(
        &p.ca.cert_pem,
        client.map(|c| (c.cert.as_path(), c.key.as_path())),
    )
    .unwrap()
}

#[test]
fn sec_tls_exports_refuse_plain_connections() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let (mut server, port) = serve_tls(
        dir.path(),
        &p,
        &["--client", "127.0.0.1(rw,no_root_squash,sec=tls)"],
    );
    let (src, data) = distinctive(dir.path());
    let url = format!("nfs://127.0.0.1:{port}/copied.bin");
    // NFSv4 over TCP: WRONGSEC, nothing written.
    let out = txnfs(&["cp", s(&src), &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "plain cp to a sec=tls export succeeded"
    );
    assert!(err.contains("NFS4ERR_WRONGSEC"), "{err}");
    assert!(!dir.path().join("export/copied.bin").exists());
    // MOUNT v3: refused over TCP, granted over TLS.
    const MNT3_OK: u32 = 0;
    const MNT3ERR_ACCES: u32 = 13;
    assert_eq!(mnt(port, None), MNT3ERR_ACCES);
    assert_eq!(mnt(port, Some(trusting(&p, None))), MNT3_OK);
    // NFSv4 over TLS: served.
    let out = txnfs(&["cp", "--tls", "--tls-ca", s(&p.ca.cert_pem), s(&src), &url]);
    let (_, log) = terminate(&mut server);
    assert!(
        out.status.success(),
        "cp --tls to a sec=tls export: {out:?}\n{log}"
    );
    assert!(std::fs::read(dir.path().join("export/copied.bin")).unwrap() == data);
}

#[test]
fn sec_mtls_exports_want_a_verified_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let (mut server, port) = serve_tls(
        dir.path(),
        &p,
        &[
            "--tls-client-ca",
            s(&p.ca.cert_pem),
            "--client",
            "127.0.0.1(rw,no_root_squash,sec=mtls)",
        ],
    );
    let (src, data) = distinctive(dir.path());
    let url = format!("nfs://127.0.0.1:{port}/copied.bin");
    let ca = s(&p.ca.cert_pem);
    // TLS without a client certificate: WRONGSEC; MNT refused.
    let out = txnfs(&["cp", "--tls", "--tls-ca", ca, s(&src), &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "cp without a client certificate succeeded"
    );
    assert!(err.contains("NFS4ERR_WRONGSEC"), "{err}");
    assert!(!dir.path().join("export/copied.bin").exists());
    assert_eq!(mnt(port, Some(trusting(&p, None))), 13);
    // A certificate of another CA: the handshake fails.
    let mallory = p.other_ca.client(dir.path(), "mallory", "mallory");
    let out = txnfs(&[
        "cp",
        "--tls",
        "--tls-ca",
        ca,
        "--tls-cert",
        s(&mallory.cert),
        "--tls-key",
        s(&mallory.key),
        s(&src),
        &url,
    ]);
    assert!(
        !out.status.success(),
        "cp with an untrusted client certificate succeeded"
    );
    assert!(!dir.path().join("export/copied.bin").exists());
    // Alice's certificate, signed by the client CA: served.
    assert_eq!(mnt(port, Some(trusting(&p, Some(&p.alice)))), 0);
    let out = txnfs(&[
        "cp",
        "--tls",
        "--tls-ca",
        ca,
        "--tls-cert",
        s(&p.alice.cert),
        "--tls-key",
        s(&p.alice.key),
        s(&src),
        &url,
    ]);
    let (_, log) = terminate(&mut server);
    assert!(
        out.status.success(),
        "cp with alice's certificate: {out:?}\n{log}"
    );
    assert!(std::fs::read(dir.path().join("export/copied.bin")).unwrap() == data);
}

#[test]
fn serve_names_the_bad_tls_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let export = dir.path().join("export");
    std::fs::create_dir_all(&export).unwrap();
    let run = |cert: &Path, key: &Path| {
        let out = Command::new(bin())
            .args([
                "serve",
                "--no-rpcbind",
                "--listen",
                "127.0.0.1:0",
                "--state-dir",
            ])
            .arg(dir.path().join("state"))
            .args(["--tls-cert", s(cert), "--tls-key", s(key)])
            .arg(&export)
            .output()
            .unwrap();
        assert!(!out.status.success(), "serve started with a bad TLS file");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&dir.path().join("nope.pem"), &p.server.key);
    assert!(
        err.contains("cannot read the TLS certificate") && err.contains("nope.pem"),
        "{err}"
    );
    let err = run(&p.server.key, &p.server.key);
    assert!(err.contains("holds no PEM certificate"), "{err}");
    let err = run(&p.server.cert, &p.alice.key);
    assert!(err.contains("does not go with the certificate"), "{err}");
    // --tls-key alone is refused by the flag parser.
    let out = Command::new(bin())
        .args(["serve", "--tls-key", s(&p.server.key)])
        .arg(&export)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert"));
}
