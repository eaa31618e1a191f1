//! The results of `txnfs bench run`: the one results type of crates/bench
//! (`txnfs_bench::results`), read back leniently.

pub use txnfs_bench::results::{
    Latency, Metric, PerSecond, Repeat, Results, ServerCost, SummaryBlock,
};
pub use txnfs_bench::workload::Expectation as Check;

/// The name this crate has always used for one result.
pub type BenchResult = Results;
