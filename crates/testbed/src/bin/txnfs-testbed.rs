//! The test bed's pieces for measurements run from a shell:
//!
//! `txnfs-testbed security DIR` sets up in DIR (created if missing) a private MIT KDC
//! (realm `TXNFS.TEST`, the service keys of `nfs/127.0.0.1` and `nfs/localhost` in a
//! keytab, the user `alice` with a ticket), a test CA with a server certificate for
//! 127.0.0.1, and a principal map giving `alice` this process's uid and gid. It prints
//! shell assignments (`KRB5_CONFIG=…`, `KEYTAB=…`, `KDC_PID=…`) to `eval` and leaves
//! the KDC running: the caller stops it by `KDC_PID`.

use std::path::PathBuf;
use std::process::ExitCode;

use txnfs_testbed::certs::TestCa;
use txnfs_testbed::kdc::Kdc;

const USAGE: &str = "usage: txnfs-testbed security DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [cmd, dir] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if cmd != "security" {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let dir = PathBuf::from(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let kdc = match Kdc::start(&dir) {
        Ok(kdc) => kdc,
        Err(e) => {
            eprintln!("cannot start the KDC: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ca = TestCa::new(&dir, "measure");
    let server = ca.server(&dir, "server");
    // The principal acts as whoever runs the measurement.
    let (uid, gid) = ids();
    let map = kdc.write_gss_map(&dir.join("gss.map"), uid, gid);
    let mut out = String::new();
    for (k, v) in kdc.env() {
        out += &format!("export {k}='{}'\n", v.display());
    }
    let files = [
        ("KEYTAB", &kdc.service_keytab),
        ("GSS_MAP", &map),
        ("TLS_CERT", &server.cert),
        ("TLS_KEY", &server.key),
        ("TLS_CA", &ca.cert_pem),
    ];
    for (k, v) in files {
        out += &format!("{k}='{}'\n", v.display());
    }
    out += &format!("KDC_PID={}\n", kdc.detach());
    print!("{out}");
    ExitCode::SUCCESS
}

/// This process's real uid and gid, from `/proc/self/status` (no libc call needed).
fn ids() -> (u32, u32) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("Uid:"), field("Gid:"))
}
