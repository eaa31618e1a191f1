//! Reloading the RPC-with-TLS certificate without a restart (ADR 0048 addendum):
//! `txnfs serve --tls-cert FILE --tls-key FILE`, the files overwritten with a
//! certificate of another CA, then `txnfs reload`.
//!
//! Asserted: the reload's answer names the new certificate and the old one; a new
//! `txnfs cp`/`cat --tls` trusting only the new CA writes and reads a file back, one
//! trusting only the old CA is refused (UnknownIssuer) and writes nothing; a connection
//! made in TLS before the reload still answers; a key that does not go with the
//! certificate, or a certificate file that holds no PEM, makes `txnfs reload` exit 1
//! naming the problem, and the certificate loaded before is still served. With `tls =
//! {...}` in the configuration file: other files and a client CA are taken by a reload,
//! and a file without TLS is named as waiting for a restart while TLS goes on. A
//! `sec=mtls` export admits the client certificates of the client CA a reload names,
//! and no longer those of the one before.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{bin, free_port, s, spawn_serve, terminate, txnfs, wait_listening, Serving};
use txnfs_testbed::certs::{CertFiles, TestCa};

/// `txnfs serve --config CONFIG` with its state in `dir/state`, listening.
fn serve_config(dir: &Path, config: &Path) -> (Serving, u16) {
    let port = free_port();
    let child = Command::new(bin())
        .args(["serve", "--no-rpcbind", "--no-grace", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--config")
        .arg(config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let server = Serving(child);
    wait_listening(port);
    (server, port)
}

/// `txnfs reload` of the server whose state directory is `dir/state`.
fn reload(dir: &Path) -> (bool, String, String) {
    let out = Command::new(bin())
        .arg("reload")
        .arg("--state-dir")
        .arg(dir.join("state"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Overwrite the served certificate and key files with `from`'s.
fn install(from: &CertFiles, live: &CertFiles) {
    std::fs::copy(&from.cert, &live.cert).unwrap();
    std::fs::copy(&from.key, &live.key).unwrap();
}

/// A client connection in TLS trusting `ca`; MNT of "/" on it answers its mountstat3.
struct EarlyClient {
    rt: tokio::runtime::Runtime,
    client: txnfs_rpc::RpcClient,
}

impl EarlyClient {
    fn connect(port: u16, ca: &Path) -> EarlyClient {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let tls = txnfs_rpc::ClientTls::from_pem_files(ca, None).unwrap();
        let client = rt.block_on(async {
            let cfg = txnfs_rpc::ClientConfig {
                tls: Some(tls),
                ..Default::default()
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let cred = txnfs_rawclient::tcp::auth_sys(b"reload-tls", 0, 0);
            txnfs_rpc::RpcClient::connect_with_config(addr, cred, cfg)
                .await
                .expect("TLS connect")
        });
        EarlyClient { rt, client }
    }

    fn mnt(&self) -> u32 {
        // dirpath "/": length 1, "/" and three bytes of padding.
        let args = bytes::Bytes::from_static(&[0, 0, 0, 1, b'/', 0, 0, 0]);
        let r = self
            .rt
            .block_on(self.client.call(100005, 3, 1, args))
            .expect("MNT");
        u32::from_be_bytes([r[0], r[1], r[2], r[3]])
    }
}

#[test]
fn a_reload_serves_a_renewed_certificate_at_the_same_path() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ca1, ca2) = (TestCa::new(d, "one"), TestCa::new(d, "two"));
    let (cert_a, cert_b) = (ca1.server(d, "a"), ca2.server(d, "b"));
    let live = CertFiles {
        cert: d.join("live.pem"),
        key: d.join("live-key.pem"),
    };
    install(&cert_a, &live);
    let port = free_port();
    let flags = [
        "--no-rpcbind",
        "--tls-cert",
        s(&live.cert),
        "--tls-key",
        s(&live.key),
    ];
    let mut server = Serving(spawn_serve(d, port, &flags, true));
    wait_listening(port);
    let src: PathBuf = d.join("source.bin");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let url = |name: &str| format!("nfs://127.0.0.1:{port}/{name}");

    // Certificate A (CA one) is served.
    let out = txnfs(&[
        "cp",
        "--tls",
        "--tls-ca",
        s(&ca1.cert_pem),
        s(&src),
        &url("a.bin"),
    ]);
    assert!(out.status.success(), "cp trusting CA one: {out:?}");
    let early = EarlyClient::connect(port, &ca1.cert_pem);
    assert_eq!(early.mnt(), 0);

    // Certificate B (CA two) at the same paths, then a reload.
    install(&cert_b, &live);
    let (ok, answer, err) = reload(d);
    assert!(ok, "{answer}{err}");
    let line = answer
        .lines()
        .find(|l| l.starts_with("tls certificate reloaded: CN=txnfs test server sha256:"))
        .unwrap_or_else(|| panic!("no certificate line in {answer:?}"));
    assert!(
        line.contains(" (was CN=txnfs test server sha256:"),
        "{line}"
    );
    assert!(answer.ends_with("1 export(s) unchanged\n"), "{answer}");
    assert!(!answer.contains("restart"), "{answer}");

    // A new client trusting only CA two writes and reads back ...
    let out = txnfs(&[
        "cp",
        "--tls",
        "--tls-ca",
        s(&ca2.cert_pem),
        s(&src),
        &url("b.bin"),
    ]);
    assert!(out.status.success(), "cp trusting CA two: {out:?}");
    let out = txnfs(&["cat", "--tls", "--tls-ca", s(&ca2.cert_pem), &url("b.bin")]);
    assert!(out.status.success(), "cat trusting CA two: {out:?}");
    assert!(out.stdout == data, "other bytes came back");
    // ... one trusting only CA one is refused and writes nothing ...
    let out = txnfs(&[
        "cp",
        "--tls",
        "--tls-ca",
        s(&ca1.cert_pem),
        s(&src),
        &url("c.bin"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "cp trusting only CA one: {out:?}");
    assert!(stderr.contains("UnknownIssuer"), "{stderr}");
    assert!(!d.join("export/c.bin").exists());
    // ... and the connection made before the reload goes on.
    assert_eq!(early.mnt(), 0);

    // A key that is not the certificate's: refused, and B is still served.
    std::fs::copy(&cert_a.key, &live.key).unwrap();
    let (ok, out, err) = reload(d);
    assert!(!ok, "a mismatched key was taken: {out}");
    assert!(err.contains("reload refused"), "{err}");
    assert!(err.contains("does not go with the certificate"), "{err}");
    // A certificate file without PEM: refused too.
    std::fs::copy(&cert_b.key, &live.key).unwrap();
    std::fs::write(&live.cert, "not a certificate\n").unwrap();
    let (ok, out, err) = reload(d);
    assert!(!ok, "a certificate without PEM was taken: {out}");
    assert!(err.contains("holds no PEM certificate"), "{err}");
    let out = txnfs(&["cat", "--tls", "--tls-ca", s(&ca2.cert_pem), &url("b.bin")]);
    assert!(out.status.success(), "B is no longer served: {out:?}");
    assert!(out.stdout == data);

    let (status, log) = terminate(&mut server.0);
    assert!(status.success(), "{log}");
    assert!(
        log.contains("INFO txnfs_server::reload: tls certificate reloaded: CN="),
        "{log}"
    );
    assert!(
        log.contains("reload refused, the running configuration stays: RPC-with-TLS: "),
        "{log}"
    );
    assert_eq!(std::fs::read(d.join("export/b.bin")).unwrap(), data);
}

#[test]
fn tls_of_the_config_file_reloads_and_turning_it_off_waits_for_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ca1, ca2) = (TestCa::new(d, "one"), TestCa::new(d, "two"));
    let (cert_a, cert_b) = (ca1.server(d, "a"), ca2.server(d, "b"));
    let export = d.join("export");
    std::fs::create_dir(&export).unwrap();
    let config = d.join("txnfs.toml");
    let write = |tls: &str| {
        let text = format!("{tls}[[exports]]\nname = \"/\"\npath = {export:?}\n");
        std::fs::write(&config, text).unwrap();
    };
    write(&format!(
        "tls = {{ cert = {:?}, key = {:?} }}\n",
        cert_a.cert, cert_a.key
    ));
    let (mut server, port) = serve_config(d, &config);
    let src = d.join("source.bin");
    std::fs::write(&src, b"over TLS\n").unwrap();
    let url = format!("nfs://127.0.0.1:{port}/f.txt");
    let cp = |ca: &Path| txnfs(&["cp", "--tls", "--tls-ca", s(ca), s(&src), &url]);
    assert!(cp(&ca1.cert_pem).status.success());

    // Other files, and client certificates verified from now on.
    write(&format!(
        "tls = {{ cert = {:?}, key = {:?}, client_ca = {:?} }}\n",
        cert_b.cert, cert_b.key, ca2.cert_pem
    ));
    let (ok, answer, err) = reload(d);
    assert!(ok, "{answer}{err}");
    assert!(
        answer.starts_with("tls certificate reloaded: CN="),
        "{answer}"
    );
    assert!(
        answer.contains(&format!(
            "; client certificates checked against {}\n",
            ca2.cert_pem.display()
        )),
        "{answer}"
    );
    assert!(cp(&ca2.cert_pem).status.success());
    assert!(!cp(&ca1.cert_pem).status.success());

    // Without TLS: named as waiting for a restart; B is still served meanwhile.
    write("");
    let (ok, answer, err) = reload(d);
    assert!(ok, "{answer}{err}");
    assert_eq!(
        answer,
        "tls (turning RPC-with-TLS on or off) changed: takes effect after a restart\n\
         1 export(s) unchanged; nothing to apply\n"
    );
    assert!(cp(&ca2.cert_pem).status.success());
    let (status, log) = terminate(&mut server.0);
    assert!(status.success(), "{log}");
}

#[test]
fn a_reload_changes_which_client_certificates_an_mtls_export_admits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server_ca = TestCa::new(d, "server");
    let (old_clients, new_clients) = (TestCa::new(d, "old"), TestCa::new(d, "new"));
    let cert = server_ca.server(d, "served");
    let (alice_old, alice_new) = (
        old_clients.client(d, "alice-old", "alice"),
        new_clients.client(d, "alice-new", "alice"),
    );
    let export = d.join("export");
    std::fs::create_dir(&export).unwrap();
    let config = d.join("txnfs.toml");
    let write = |client_ca: &Path| {
        let text = format!(
            "tls = {{ cert = {:?}, key = {:?}, client_ca = {client_ca:?} }}\n\
             [[exports]]\nname = \"/\"\npath = {export:?}\n\
             clients = [\"127.0.0.1(rw,no_root_squash,sec=mtls)\"]\n",
            cert.cert, cert.key
        );
        std::fs::write(&config, text).unwrap();
    };
    write(&old_clients.cert_pem);
    let (mut server, port) = serve_config(d, &config);
    let src = d.join("source.bin");
    std::fs::write(&src, b"through mutual TLS\n").unwrap();
    let cp = |who: &CertFiles, name: &str| {
        let url = format!("nfs://127.0.0.1:{port}/{name}");
        let args = [
            "cp",
            "--tls",
            "--tls-ca",
            s(&server_ca.cert_pem),
            "--tls-cert",
            s(&who.cert),
            "--tls-key",
            s(&who.key),
            s(&src),
            &url,
        ];
        txnfs(&args).status.success() && export.join(name).exists()
    };
    assert!(
        cp(&alice_old, "before-old"),
        "the old CA's client is admitted"
    );
    assert!(
        !cp(&alice_new, "before-new"),
        "the new CA's client is not yet"
    );

    write(&new_clients.cert_pem);
    let (ok, answer, err) = reload(d);
    assert!(ok, "{answer}{err}");
    assert!(
        answer.contains(&format!(
            "; client certificates checked against {}\n",
            new_clients.cert_pem.display()
        )),
        "{answer}"
    );
    assert!(
        cp(&alice_new, "after-new"),
        "the new CA's client is admitted"
    );
    assert!(
        !cp(&alice_old, "after-old"),
        "the old CA's client no longer"
    );
    let (status, log) = terminate(&mut server.0);
    assert!(status.success(), "{log}");
}
