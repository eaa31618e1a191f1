//! Kerberos (RPCSEC_GSS, ADR 0051) end to end against a private MIT KDC: `txnfs serve
//! --keytab --gss-map` with an export that allows only krb5p, krb5i and krb5, and
//! `txnfs cp`/`cat --sec ...` with a ticket from `kinit`.
//!
//! Asserted: krb5p writes and reads back a file whose bytes never cross in clear (a
//! recording proxy sees both directions), while the same copy with AUTH_SYS does show
//! them (so the check can fail); krb5i and krb5 round trips; the file's owner is the
//! mapped uid; AUTH_SYS is refused (NFS4ERR_WRONGSEC; MOUNT's MNT3ERR_ACCES) and
//! SECINFO lists the three RPCSEC_GSS krb5 entries, MOUNT the pseudo-flavours
//! 390005/390004/390003; a server with a stale keytab fails the client at once with a
//! clear message.
//!
//! The KDC comes from Debian's krb5-kdc, krb5-admin-server and krb5-user (CI installs
//! them); without them the test fails and says so.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{bin, free_port, s, terminate, wait_listening, Serving};
use txnfs_proto::nfs4::{
    nfs_argop4, nfs_resop4, rpc_gss_svc_t, secinfo4, SECINFO4args, SECINFO4res,
};
use txnfs_testbed::kdc::{Kdc, REALM, USER};

const MARKER: &[u8] = b"TXNFS-KRB5P-PLAINTEXT-MARKER-4e1b;";
const KRB5_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];

/// A TCP proxy that records the bytes of every connection, both directions together.
struct RecordingProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<u8>>>,
}

fn pump(mut from: TcpStream, mut to: TcpStream, seen: Arc<Mutex<Vec<u8>>>) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        seen.lock().unwrap().extend_from_slice(&buf[..n]);
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
        let seen: Arc<Mutex<Vec<u8>>> = Arc::default();
        let all = seen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (up, down) = (all.clone(), all.clone());
                std::thread::spawn(move || pump(client, server, up));
                std::thread::spawn(move || pump(s2, c2, down));
            }
        });
        RecordingProxy { addr, seen }
    }

    /// Whether `needle` crossed the proxy in clear so far.
    fn saw(&self, needle: &[u8]) -> bool {
        std::thread::sleep(Duration::from_millis(300));
        let seen = self.seen.lock().unwrap();
        assert!(!seen.is_empty(), "nothing went through the proxy");
        seen.windows(needle.len()).any(|w| w == needle)
    }
}

/// `txnfs serve` of `dir/export` as `/krb`, with the KDC's environment and `flags`.
fn serve(kdc: &Kdc, dir: &Path, flags: &[&str]) -> (Serving, u16) {
    let port = free_port();
    std::fs::create_dir_all(dir.join("export")).unwrap();
    // Writable by the mapped user (uid 1000).
    std::fs::set_permissions(
        dir.join("export"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .args(["--no-rpcbind", "--no-grace", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(flags)
        .arg("--export")
        .arg(format!("/krb={}", dir.join("export").display()))
        .env("TXNFS_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in kdc.env() {
        cmd.env(k, v);
    }
    let child = Serving(cmd.spawn().unwrap());
    wait_listening(port);
    (child, port)
}

/// A file command with the user's ticket.
fn txnfs(kdc: &Kdc, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args).env("TXNFS_LOG", "warn");
    for (k, v) in kdc.env() {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn marker_file(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let data: Vec<u8> = MARKER.iter().copied().cycle().take(200 * 1024).collect();
    let path = dir.join("source.bin");
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

/// Copy `src` to `url` and read it back, both with `--sec sec`; how long it took.
fn round_trip(kdc: &Kdc, sec: &str, src: &Path, url: &str, data: &[u8]) -> Duration {
    let started = Instant::now();
    let out = txnfs(kdc, &["cp", "--sec", sec, s(src), url]);
    assert!(out.status.success(), "cp --sec {sec}: {out:?}");
    let out = txnfs(kdc, &["cat", "--sec", sec, url]);
    assert!(out.status.success(), "cat --sec {sec}: {out:?}");
    assert!(out.stdout == data, "cat --sec {sec}: other bytes came back");
    let took = started.elapsed();
    eprintln!("--sec {sec}: cp + cat of {} bytes in {took:?}", data.len());
    took
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// MNT of `path` with AUTH_SYS root, or with Kerberos (krb5): the mountstat3 and
/// the flavours of a granted mount.
fn mnt(port: u16, path: &str, kerberos: Option<&Kdc>) -> (u32, Vec<u32>) {
    rt().block_on(async move {
        let cfg = txnfs_rpc::ClientConfig {
            gss: kerberos.map(|kdc| txnfs_rpc::gss::GssClientConfig {
                target: "nfs@localhost".into(),
                service: txnfs_rpc::gss::GssService::None,
                ccache: Some(format!("FILE:{}", kdc.ccache.display())),
                program: 100005,
                version: 3,
            }),
            ..Default::default()
        };
        let cred = txnfs_rawclient::tcp::auth_sys(b"krb-test", 0, 0);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let c = txnfs_rpc::RpcClient::connect_with_config(addr, cred, cfg)
            .await
            .expect("connect");
        let mut args = bytes::BytesMut::new();
        txnfs_rpc::gss::wire::put_opaque(&mut args, path.as_bytes());
        let r = c.call(100005, 3, 1, args.freeze()).await.expect("MNT");
        let word = |i: usize| u32::from_be_bytes(r[i * 4..i * 4 + 4].try_into().unwrap());
        let status = word(0);
        if status != 0 {
            return (status, Vec::new());
        }
        // fhandle3 (length, bytes padded), then the flavour list.
        let fh_words = (word(1) as usize).div_ceil(4);
        let at = 2 + fh_words;
        let n = word(at) as usize;
        (status, (0..n).map(|i| word(at + 1 + i)).collect())
    })
}

/// SECINFO of `name` in the pseudo root (NFSv4.0 COMPOUND, AUTH_SYS).
fn secinfo(port: u16, name: &str) -> Vec<secinfo4> {
    rt().block_on(async move {
        let cred = txnfs_rawclient::tcp::auth_sys(b"krb-test", 0, 0);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let c = txnfs_rpc::RpcClient::connect(addr, cred)
            .await
            .expect("connect");
        let ops = vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_SECINFO(SECINFO4args {
                name: bytes::Bytes::copy_from_slice(name.as_bytes()),
            }),
        ];
        let args = txnfs_rawclient::compound(b"secinfo", 0, ops);
        let r = txnfs_rawclient::tcp::call_proc(&c, 1, args, Some(Duration::from_secs(10)))
            .await
            .expect("COMPOUND");
        match r.resarray.last() {
            Some(nfs_resop4::OP_SECINFO(SECINFO4res::NFS4_OK(list))) => list.clone(),
            other => panic!("SECINFO: {:?} {other:?}", r.status),
        }
    })
}

#[test]
fn kerberos_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let kdc_dir = dir.path().join("kdc");
    std::fs::create_dir(&kdc_dir).unwrap();
    // This process's Kerberos calls use the test realm: before any thread exists.
    let kdc = Kdc::start_for_this_process(&kdc_dir);
    let map = kdc.write_gss_map(&dir.path().join("gss-map"), 1000, 1000);
    let (src, data) = marker_file(dir.path());

    // A krb5-only export.
    let krb_dir = dir.path().join("krb");
    let (mut server, port) = serve(
        &kdc,
        &krb_dir,
        &[
            "--keytab",
            s(&kdc.service_keytab),
            "--gss-map",
            s(&map),
            "--client",
            "127.0.0.1(rw,no_root_squash,sec=krb5p:krb5i:krb5)",
        ],
    );

    // (a) krb5p through the recording proxy: written, read back, never in clear.
    let proxy = RecordingProxy::start(SocketAddr::from(([127, 0, 0, 1], port)));
    let url = format!("nfs://127.0.0.1:{}/krb/p.bin", proxy.addr.port());
    round_trip(&kdc, "krb5p", &src, &url, &data);
    let on_disk = krb_dir.join("export/p.bin");
    assert!(std::fs::read(&on_disk).unwrap() == data);
    assert_eq!(
        std::fs::metadata(&on_disk).unwrap().uid(),
        1000,
        "the file belongs to the mapped uid of {USER}@{REALM}"
    );
    assert!(
        !proxy.saw(MARKER),
        "krb5p: the file's bytes crossed in clear"
    );

    // (b) krb5i and krb5: round trips (signed, not sealed).
    for sec in ["krb5i", "krb5"] {
        let url = format!("nfs://127.0.0.1:{port}/krb/{sec}.bin");
        round_trip(&kdc, sec, &src, &url, &data);
    }

    // (d) AUTH_SYS refused; SECINFO and MOUNT name the Kerberos flavours.
    let url = format!("nfs://127.0.0.1:{port}/krb/sys.bin");
    let out = txnfs(&kdc, &["cp", s(&src), &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "AUTH_SYS cp to a krb5 export succeeded"
    );
    assert!(err.contains("NFS4ERR_WRONGSEC"), "{err}");
    assert!(!krb_dir.join("export/sys.bin").exists());
    let list = secinfo(port, "krb");
    let services: Vec<rpc_gss_svc_t> = list
        .iter()
        .map(|e| match e {
            secinfo4::RPCSEC_GSS(i) => {
                assert_eq!((&i.oid[..], i.qop), (KRB5_OID, 0), "{e:?}");
                i.service
            }
            other => panic!("SECINFO lists {other:?}"),
        })
        .collect();
    assert_eq!(
        services,
        [
            rpc_gss_svc_t::RPC_GSS_SVC_PRIVACY,
            rpc_gss_svc_t::RPC_GSS_SVC_INTEGRITY,
            rpc_gss_svc_t::RPC_GSS_SVC_NONE
        ]
    );
    const MNT3ERR_ACCES: u32 = 13;
    assert_eq!(mnt(port, "/krb", None), (MNT3ERR_ACCES, vec![]));
    assert_eq!(
        mnt(port, "/krb", Some(&kdc)),
        (0, vec![390005, 390004, 390003])
    );
    let (_, log) = terminate(&mut server.0);
    assert!(log.contains("RPCSEC_GSS (Kerberos v5) enabled"), "{log}");

    // The same copy with AUTH_SYS on a sec=sys export: the marker is on the wire.
    let sys_dir = dir.path().join("sys");
    let (mut plain, port) = serve(
        &kdc,
        &sys_dir,
        &["--client", "127.0.0.1(rw,no_root_squash)"],
    );
    let proxy = RecordingProxy::start(SocketAddr::from(([127, 0, 0, 1], port)));
    let url = format!("nfs://127.0.0.1:{}/krb/plain.bin", proxy.addr.port());
    round_trip(&kdc, "sys", &src, &url, &data);
    terminate(&mut plain.0);
    assert!(proxy.saw(MARKER), "AUTH_SYS: the marker should be visible");

    // (c) A server whose keytab holds a stale key: the client fails at once, saying why.
    let stale_dir = dir.path().join("stale");
    let (mut stale, port) = serve(
        &kdc,
        &stale_dir,
        &[
            "--keytab",
            s(&kdc.wrong_keytab),
            "--client",
            "127.0.0.1(rw,no_root_squash,sec=krb5p)",
        ],
    );
    let url = format!("nfs://127.0.0.1:{port}/krb/stale.bin");
    let started = Instant::now();
    let out = txnfs(&kdc, &["cp", "--sec", "krb5p", s(&src), &url]);
    let took = started.elapsed();
    terminate(&mut stale.0);
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("stale keytab, after {took:?}: {err}");
    assert!(
        !out.status.success(),
        "cp to a server with a stale key succeeded"
    );
    assert!(
        err.contains("could not accept our Kerberos ticket"),
        "unclear error: {err}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(!stale_dir.join("export/stale.bin").exists());
}
