//! Standalone `txnfs bench compare`: see `txnfs-compare --help`.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "txnfs-compare",
    version,
    about = "Compare txnfs with NFS-Ganesha on the txnfs-bench workloads"
)]
struct Cli {
    #[command(flatten)]
    args: txnfs_benchreport::CompareArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match txnfs_benchreport::main(cli.args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
