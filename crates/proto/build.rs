//! Generates Rust types from the XDR specifications in `spec/` into `OUT_DIR`.

use std::path::PathBuf;

const SPECS: &[&str] = &["nfs4", "nfs3", "mnt3"];

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for name in SPECS {
        let path = format!("spec/{name}.x");
        println!("cargo:rerun-if-changed={path}");
        let src = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read XDR specification {path}: {e}"));
        let rust = txnfs_xdrgen::generate(&src)
            .unwrap_or_else(|e| panic!("XDR specification {path} is invalid: {e}"));
        let dest = out_dir.join(format!("{name}.rs"));
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
