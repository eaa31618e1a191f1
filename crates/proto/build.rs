//! Generates Rust types from the XDR specifications in `spec/` into `OUT_DIR`.

use std::path::PathBuf;

/// (specification, generated file name)
const SPECS: &[(&str, &str)] = &[
    ("spec/nfs4.x", "nfs4.rs"),
    ("spec/nfs3.x", "nfs3.rs"),
    ("spec/mnt3.x", "mnt3.rs"),
    ("spec/nlm4.x", "nlm4.rs"),
    ("spec/sm.x", "sm.rs"),
    // Only included by tests/codegen.rs: covers mappings nfs4.x does not use.
    ("tests/xdrgen_test.x", "xdrgen_test.rs"),
];

/// Union arms carried boxed (`txnfs_xdrgen::Options::boxed_arms`, ADR 0066): the
/// arguments and results of NFSv4 ops larger than 64 bytes. An `nfs_argop4` or
/// `nfs_resop4` is then at most 72 bytes instead of about 200, and a COMPOUND of small
/// ops (SEQUENCE, PUTFH, READ) no longer moves OPEN's size with each op it decodes,
/// runs and encodes.
const NFS4_BOXED_ARMS: &[&str] = &[
    // nfs_argop4
    "CREATE4args",
    "LOCK4args",
    "OPEN4args",
    "SETATTR4args",
    "SETCLIENTID4args",
    "EXCHANGE_ID4args",
    "CREATE_SESSION4args",
    "GET_DIR_DELEGATION4args",
    "LAYOUTCOMMIT4args",
    "LAYOUTRETURN4args",
    "COPY4args",
    "COPY_NOTIFY4args",
    "LAYOUTSTATS4args",
    "WRITE_SAME4args",
    "SETXATTR4args",
    // nfs_resop4, or the success arm of an op's result
    "OPEN4resok",
    "EXCHANGE_ID4resok",
    "CREATE_SESSION4resok",
    "SETCLIENTID4res",
    "GET_DIR_DELEGATION4resok",
    "WANT_DELEGATION4res",
];

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for (path, file) in SPECS {
        println!("cargo:rerun-if-changed={path}");
        let src = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read XDR specification {path}: {e}"));
        let options = txnfs_xdrgen::Options {
            boxed_arms: match *file {
                "nfs4.rs" => NFS4_BOXED_ARMS.iter().map(|s| s.to_string()).collect(),
                _ => Vec::new(),
            },
        };
        let rust = txnfs_xdrgen::generate_with(&src, &options)
            .unwrap_or_else(|e| panic!("XDR specification {path} is invalid: {e}"));
        let dest = out_dir.join(file);
        std::fs::write(&dest, rust)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
        // Best effort: make the generated file readable for humans.
        let rustfmt = std::env::var_os("RUSTFMT").unwrap_or_else(|| "rustfmt".into());
        let _ = std::process::Command::new(rustfmt)
            .args(["--edition", "2021"])
            .arg(&dest)
            .status();
    }
    println!("cargo:rerun-if-changed=build.rs");
}
