//! Reloading the Kerberos principal map without a restart (ADR 0048 addendum), against
//! a private MIT KDC: `txnfs serve --keytab --gss-map FILE` with a krb5i-only export,
//! the map file rewritten, then `txnfs reload`.
//!
//! Asserted: a file written before the reload belongs to the uid/gid of the first map;
//! the reload's answer names the map and how many principals it holds; a file written
//! after it belongs to the new uid/gid; a map with a bad line makes `txnfs reload` exit
//! 1 naming the file and line, and files written afterwards still get the map loaded
//! before. The KDC needs Debian's krb5-kdc, krb5-admin-server and krb5-user.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{bin, free_port, s, terminate, wait_listening, Serving};
use txnfs_testbed::kdc::{Kdc, REALM, USER};

/// A command of `txnfs` with the KDC's environment (and the user's ticket).
fn txnfs(kdc: &Kdc, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args).env("TXNFS_LOG", "warn");
    for (k, v) in kdc.env() {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// `cp --sec krb5i` of `src` to `/krb/name`: the written file's (uid, gid).
fn write_as_alice(kdc: &Kdc, port: u16, src: &Path, export: &Path, name: &str) -> (u32, u32) {
    let url = format!("nfs://127.0.0.1:{port}/krb/{name}");
    let out = txnfs(kdc, &["cp", "--sec", "krb5i", s(src), &url]);
    assert!(out.status.success(), "cp --sec krb5i {name}: {out:?}");
    let md = std::fs::metadata(export.join(name)).unwrap();
    (md.uid(), md.gid())
}

/// `txnfs serve --keytab KEYTAB --gss-map MAP` of `dir/export` as `/krb` (krb5i only).
fn serve(kdc: &Kdc, dir: &Path, keytab: &Path, map: &Path) -> (Serving, u16) {
    let export = dir.join("export");
    std::fs::create_dir_all(&export).unwrap();
    // Writable by every mapped user.
    std::fs::set_permissions(&export, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let port = free_port();
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--no-rpcbind", "--no-grace", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--keytab", s(keytab), "--gss-map", s(map)])
        .args(["--client", "127.0.0.1(rw,no_root_squash,sec=krb5i)"])
        .arg("--export")
        .arg(format!("/krb={}", export.display()))
        .env("TXNFS_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in kdc.env() {
        cmd.env(k, v);
    }
    let server = Serving(cmd.spawn().unwrap());
    wait_listening(port);
    (server, port)
}

#[test]
fn a_reload_changes_which_uid_a_principal_acts_as() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let kdc_dir = d.join("kdc");
    std::fs::create_dir(&kdc_dir).unwrap();
    let kdc = Kdc::start(&kdc_dir).unwrap_or_else(|e| panic!("cannot start the test KDC: {e}"));
    let map = kdc.write_gss_map(&d.join("gss-map"), 1000, 1000);
    let export = d.join("export");
    std::fs::create_dir(&export).unwrap();
    // Writable by every mapped user.
    std::fs::set_permissions(&export, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let src = d.join("source.bin");
    std::fs::write(&src, b"written by alice\n").unwrap();

    let (mut server, port) = serve(&kdc, d, &kdc.service_keytab, &map);
    let reload = || txnfs(&kdc, &["reload", "--state-dir", s(&d.join("state"))]);

    assert_eq!(
        write_as_alice(&kdc, port, &src, &export, "before.txt"),
        (1000, 1000)
    );

    // The map now gives alice other ids.
    kdc.write_gss_map(&map, 2000, 2001);
    let out = reload();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "reload: {out:?}");
    assert_eq!(
        answer,
        format!(
            "gss map reloaded: 1 principal(s) from {}\n1 export(s) unchanged\n",
            map.display()
        )
    );
    assert_eq!(
        write_as_alice(&kdc, port, &src, &export, "after.txt"),
        (2000, 2001),
        "{USER}@{REALM} after the reload"
    );

    // A bad line: refused, the map loaded before stays.
    std::fs::write(&map, format!("{USER}@{REALM} 3000\n")).unwrap();
    let out = reload();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a bad map was taken: {out:?}");
    assert!(err.contains("reload refused"), "{err}");
    assert!(
        err.contains(&format!("principal map {} line 1", map.display())),
        "{err}"
    );
    assert_eq!(
        write_as_alice(&kdc, port, &src, &export, "refused.txt"),
        (2000, 2001)
    );

    let (status, log) = terminate(&mut server.0);
    assert!(status.success(), "{log}");
    assert!(
        log.contains("INFO txnfs_server::reload: gss map reloaded: 1 principal(s)"),
        "{log}"
    );
}

#[test]
fn a_rekeyed_keytab_at_the_same_path_is_used_without_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let kdc_dir = d.join("kdc");
    std::fs::create_dir(&kdc_dir).unwrap();
    let kdc = Kdc::start(&kdc_dir).unwrap_or_else(|e| panic!("cannot start the test KDC: {e}"));
    let map = kdc.write_gss_map(&d.join("gss-map"), 1000, 1000);
    // The server starts with a key the KDC does not know.
    let keytab = d.join("nfs.keytab");
    std::fs::copy(&kdc.wrong_keytab, &keytab).unwrap();
    let (mut server, port) = serve(&kdc, d, &keytab, &map);
    let src = d.join("source.bin");
    std::fs::write(&src, b"written by alice\n").unwrap();
    let url = format!("nfs://127.0.0.1:{port}/krb/f.txt");
    let out = txnfs(&kdc, &["cp", "--sec", "krb5i", s(&src), &url]);
    assert!(!out.status.success(), "a stale key was accepted: {out:?}");
    // The current keys at the same path: the next context uses them.
    std::fs::copy(&kdc.service_keytab, &keytab).unwrap();
    let out = txnfs(&kdc, &["cp", "--sec", "krb5i", s(&src), &url]);
    assert!(
        out.status.success(),
        "the rekeyed keytab was not used: {out:?}"
    );
    terminate(&mut server.0);
}
