//! `txnfs-bench`: the benchmark framework's binary (`run`, `list`, `ganesha-conf`,
//! `compare`, `sweep`, `seeds`); `txnfs bench ARGS` runs it with ARGS (ADR 0031).

use clap::Parser;

fn main() -> std::process::ExitCode {
    match txnfs_benchreport::tool_main(txnfs_benchreport::ToolArgs::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
