//! A private MIT Kerberos KDC for the RPCSEC_GSS tests: its own realm, database and
//! configuration in a temporary directory, service keys `nfs/localhost` and
//! `nfs/127.0.0.1` (for URLs that name the address) in a keytab,
//! a user `alice` with a ticket in her own credential cache, and `krb5kdc` on a free
//! loopback port, stopped (by its PID) when the value is dropped.
//!
//! Nothing of the machine's Kerberos setup is read or changed: every tool and the
//! GSS-API library in the test process find the realm through `KRB5_CONFIG` and
//! `KRB5_KDC_PROFILE`, which [`Kdc::env`] lists.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REALM: &str = "TXNFS.TEST";
pub const USER: &str = "alice";
/// The Debian packages that hold the KDC and its tools.
pub const PACKAGES: &str = "krb5-kdc krb5-admin-server krb5-user";

/// Why the KDC could not be set up.
#[derive(Debug)]
pub struct KdcError(pub String);

impl std::fmt::Display for KdcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KdcError {}

/// A running KDC and the files the tests use.
pub struct Kdc {
    dir: PathBuf,
    /// `krb5kdc`, once started.
    child: Option<Child>,
    pub port: u16,
    /// The keytab with `nfs/localhost@TXNFS.TEST` and `nfs/127.0.0.1@TXNFS.TEST`
    /// (the server's).
    pub service_keytab: PathBuf,
    /// A keytab with a key of the same principal that the KDC does not know (a
    /// server configured with the wrong keytab).
    pub wrong_keytab: PathBuf,
    /// `alice`'s credential cache, with a ticket-granting ticket.
    pub ccache: PathBuf,
}

fn tool(name: &str) -> Result<PathBuf, KdcError> {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Ok(p);
        }
    }
    Err(KdcError(format!(
        "{name} not found: install the Debian packages {PACKAGES}"
    )))
}

impl Kdc {
    /// The environment every Kerberos user (tool, library, child process) of this
    /// realm needs.
    pub fn env(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("KRB5_CONFIG", self.dir.join("krb5.conf")),
            ("KRB5_KDC_PROFILE", self.dir.join("kdc.conf")),
            (
                "KRB5CCNAME",
                PathBuf::from(format!("FILE:{}", self.ccache.display())),
            ),
        ]
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), KdcError> {
        let mut cmd = Command::new(tool(program)?);
        cmd.args(args).stdin(Stdio::null());
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        let out = cmd
            .output()
            .map_err(|e| KdcError(format!("{program}: {e}")))?;
        if !out.status.success() {
            return Err(KdcError(format!(
                "{program} {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// Set up the realm in `dir` (which must exist and stay until the drop) and start
    /// the KDC.
    pub fn start(dir: &Path) -> Result<Kdc, KdcError> {
        let krb5kdc = tool("krb5kdc")?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| KdcError(format!("no free port: {e}")))?
            .port();
        let d = dir.display();
        let krb5_conf = format!(
            "[libdefaults]\n default_realm = {REALM}\n dns_lookup_kdc = false\n \
             dns_lookup_realm = false\n rdns = false\n dns_canonicalize_hostname = false\n \
             udp_preference_limit = 1\n\n\
             [realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n\n\
             [domain_realm]\n localhost = {REALM}\n"
        );
        let kdc_conf = format!(
            "[kdcdefaults]\n kdc_listen = 127.0.0.1:{port}\n kdc_tcp_listen = 127.0.0.1:{port}\n\n\
             [realms]\n {REALM} = {{\n  database_name = {d}/principal\n  \
             key_stash_file = {d}/stash\n  acl_file = {d}/kadm5.acl\n  \
             kdc_listen = 127.0.0.1:{port}\n  kdc_tcp_listen = 127.0.0.1:{port}\n }}\n\n\
             [logging]\n kdc = FILE:{d}/kdc.log\n"
        );
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text)
                .map_err(|e| KdcError(format!("writing {name}: {e}")))
        };
        write("krb5.conf", &krb5_conf)?;
        write("kdc.conf", &kdc_conf)?;
        write("kadm5.acl", "")?;
        let mut kdc = Kdc {
            dir: dir.to_path_buf(),
            child: None,
            port,
            service_keytab: dir.join("nfs.keytab"),
            wrong_keytab: dir.join("wrong.keytab"),
            ccache: dir.join("alice.ccache"),
        };
        let services = [
            format!("nfs/localhost@{REALM}"),
            format!("nfs/127.0.0.1@{REALM}"),
        ];
        let user = format!("{USER}@{REALM}");
        let user_keytab = dir.join("alice.keytab");
        let (skt, wkt, ukt) = (
            kdc.service_keytab.display().to_string(),
            kdc.wrong_keytab.display().to_string(),
            user_keytab.display().to_string(),
        );
        kdc.run(
            "kdb5_util",
            &["-r", REALM, "create", "-s", "-P", "txnfs-test-master"],
        )?;
        let q = |s: String| kdc.run("kadmin.local", &["-r", REALM, "-q", &s]);
        for svc in &services {
            q(format!("addprinc -randkey {svc}"))?;
            // The wrong keytab first: its key is replaced by the next ktadd (randkey).
            q(format!("ktadd -k {wkt} {svc}"))?;
            q(format!("ktadd -k {skt} {svc}"))?;
        }
        q(format!("addprinc -randkey {user}"))?;
        q(format!("ktadd -k {ukt} {user}"))?;
        let mut cmd = Command::new(krb5kdc);
        cmd.args(["-n", "-r", REALM])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in kdc.env() {
            cmd.env(k, v);
        }
        kdc.child = Some(cmd.spawn().map_err(|e| KdcError(format!("krb5kdc: {e}")))?);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(KdcError(format!("krb5kdc did not listen on port {port}")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        kdc.run("kinit", &["-kt", &ukt, &user])?;
        Ok(kdc)
    }
}

impl Kdc {
    /// A test's KDC in `dir`, whose realm this process's own Kerberos calls use: its
    /// environment is set here, so call it before any thread of the test uses the
    /// library (one Kerberos test per test binary). Panics when the KDC cannot start:
    /// a Kerberos test without its KDC must fail, not pass.
    pub fn start_for_this_process(dir: &Path) -> Kdc {
        let kdc = Kdc::start(dir).unwrap_or_else(|e| panic!("cannot start the test KDC: {e}"));
        for (k, v) in kdc.env() {
            std::env::set_var(k, v);
        }
        kdc
    }

    /// Write a `--gss-map` file at `path` that gives the test user `uid` and `gid`.
    pub fn write_gss_map(&self, path: &Path, uid: u32, gid: u32) -> PathBuf {
        std::fs::write(path, format!("{USER}@{REALM} {uid} {gid}\n"))
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path.to_path_buf()
    }
}

impl Kdc {
    /// Leave the KDC running after this value is gone (a shell script stops it by the
    /// PID returned).
    pub fn detach(mut self) -> u32 {
        self.child.take().map_or(0, |c| c.id())
    }
}

impl Drop for Kdc {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
