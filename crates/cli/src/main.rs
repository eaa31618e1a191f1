//! `txnfs`: the one binary. `txnfs serve DIR` exports DIR over NFSv4.1.

mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "txnfs",
    version,
    about = "A user-space NFSv4.1 server",
    long_about = "txnfs is a user-space NFSv4.1 server.\n\n\
                  Quick start:  txnfs serve /srv/data\n\
                  then, on a Linux client:  mount -t nfs -o vers=4.1 SERVER:/ /mnt"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve directories over NFSv4.1 (listens on 127.0.0.1:2049 by default).
    Serve(serve::ServeArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TXNFS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let r = match cli.cmd {
        Cmd::Serve(a) => serve::run(a),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("txnfs: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
