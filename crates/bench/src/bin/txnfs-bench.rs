//! Standalone `txnfs bench`: `txnfs-bench run <workload> --target nfs://host:port/path ...`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "txnfs-bench", about = "NFSv4.1 benchmarks (Benchmaster-style)")]
struct Cli {
    #[command(flatten)]
    bench: txnfs_bench::cli::BenchArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    txnfs_bench::cli::main(Cli::parse().bench).await
}
