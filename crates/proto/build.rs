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

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for (path, file) in SPECS {
        println!("cargo:rerun-if-changed={path}");
        let src = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read XDR specification {path}: {e}"));
        let rust = txnfs_xdrgen::generate(&src)
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
