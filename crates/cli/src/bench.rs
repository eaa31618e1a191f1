//! `txnfs bench ARGS`: runs the separate `txnfs-bench` binary with ARGS, so the product
//! binary links no benchmark code, no nfs-rs and no test harness (ADR 0031).
//!
//! `txnfs-bench` is `$TXNFS_BENCH_BIN`, else the one beside this executable, else the
//! first on `PATH`. It runs with `argv[0]` "txnfs bench" (its usage lines then read
//! `txnfs bench ...`), with `$TXNFS_BIN` set to this executable unless already set (so
//! `txnfs bench compare` serves with this txnfs), and with the global `--vers` passed on.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The benchmark binary's file name.
pub const BENCH_BIN: &str = "txnfs-bench";

/// `txnfs bench`'s arguments: everything after `bench`, handed on unparsed.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct BenchArgs {
    /// `run`, `list`, `ganesha-conf`, `compare`, `sweep` or `seeds` and their arguments
    /// (`txnfs bench --help`); they are those of the txnfs-bench binary.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// Why `txnfs bench` could not run `txnfs-bench`.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(
        "`txnfs bench` runs the separate {BENCH_BIN} binary, which is not beside {me} nor \
         on PATH: build it with `cargo build --release --bin txnfs --bin {BENCH_BIN}` (or \
         set TXNFS_BENCH_BIN)"
    )]
    NotFound { me: String },
    #[error("TXNFS_BENCH_BIN={0} is not a file")]
    BadEnv(String),
    #[error("running {path}: {source}")]
    Exec {
        path: String,
        source: std::io::Error,
    },
}

/// Where `txnfs-bench` is: `$TXNFS_BENCH_BIN`, beside `me`, or on `PATH`.
pub fn find_bench_bin(me: Option<&Path>) -> Result<PathBuf, BenchError> {
    if let Some(p) = std::env::var_os("TXNFS_BENCH_BIN").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(BenchError::BadEnv(p.display().to_string()))
        };
    }
    let beside = me.and_then(Path::parent).map(|d| d.join(BENCH_BIN));
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join(BENCH_BIN));
    beside
        .into_iter()
        .chain(on_path)
        .find(|p| p.is_file())
        .ok_or_else(|| BenchError::NotFound {
            me: me.map_or_else(|| "txnfs".into(), |m| m.display().to_string()),
        })
}

/// Replace this process with `txnfs-bench ARGS`; returns only on failure.
pub fn exec(a: BenchArgs, vers: Option<u32>) -> BenchError {
    let me = std::env::current_exe().ok();
    let bin = match find_bench_bin(me.as_deref()) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let mut cmd = Command::new(&bin);
    cmd.arg0("txnfs bench");
    if let Some(v) = vers {
        cmd.arg("--vers").arg(format!("4.{v}"));
    }
    cmd.args(&a.args);
    if std::env::var_os("TXNFS_BIN").is_none() {
        if let Some(me) = &me {
            cmd.env("TXNFS_BIN", me);
        }
    }
    let source = cmd.exec();
    BenchError::Exec {
        path: bin.display().to_string(),
        source,
    }
}
