//! Comparison of txnfs with NFS-Ganesha: `txnfs bench compare`.
//!
//! * [`servers`]: start/stop txnfs and Ganesha on 127.0.0.1 (free port, fresh
//!   export in a temporary directory, RPC NULL readiness probe, stop by PID).
//! * [`results`]: the results JSON of `txnfs-bench run` (crates/bench).
//! * [`stats`]: means, 95 % CIs and ratios of means (delta-method CI).
//! * [`compare`]: the server × delay × workload matrix driver and ratios.
//! * [`plots`] and [`report`]: SVG plots (plotters, SVG backend only),
//!   `compare.json` and `report.md`.
//! * [`sweep`], [`sweep_plot`], [`seeds`], [`wire_report`]: threads × delay × batch
//!   sweeps with CI line plots, the seeds' rerunnable figures, and the report's
//!   mountstats and process-cost sections (ADR 0053).
//! * [`cli`]: the `clap` arguments and `main` of the `txnfs-bench` binary (`run`,
//!   `list`, `ganesha-conf` from crates/bench, and `compare`), which `txnfs bench`
//!   runs (ADR 0031).

pub mod cli;
pub mod compare;
pub mod plots;
pub mod report;
pub mod results;
pub mod seeds;
pub mod servers;
pub mod sweep;
pub mod sweep_plot;
pub mod wire_report;
pub use txnfs_bench::stats;

pub use cli::{main, tool_main, CompareArgs, ToolArgs};
