//! Rendering the report, the SVG plots and compare.json from two sample
//! results files (txnfs and Ganesha), without running anything.

use std::path::{Path, PathBuf};

use txnfs_benchreport::compare::Comparison;
use txnfs_benchreport::report;
use txnfs_benchreport::results::{BenchResult, Metric};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn sample_comparison() -> Comparison {
    let mut results = Vec::new();
    for (name, file) in [("txnfs", "txnfs.json"), ("ganesha", "ganesha.json")] {
        for r in BenchResult::read_file(&data(file)).unwrap() {
            results.push((name.to_string(), Some(file.to_string()), r));
        }
    }
    Comparison::from_results(results)
}

#[test]
fn ratios_from_sample_results() {
    let cmp = sample_comparison();
    assert_eq!(cmp.server_names(), vec!["txnfs", "ganesha"]);
    assert_eq!(cmp.settings.baseline, "ganesha");
    assert_eq!(cmp.delays(), vec![10.0]);
    let ops = cmp
        .ratio("txnfs", 10.0, "smallfile-read", Metric::OpsPerS)
        .and_then(|r| r.ratio.clone())
        .unwrap();
    assert!((ops.value - 1.24).abs() < 1e-12);
    // 1.24 * sqrt((24.84/1240)^2 + (24.84/1000)^2)
    let expect = 1.24 * ((24.84f64 / 1240.0).powi(2) + (24.84f64 / 1000.0).powi(2)).sqrt();
    assert!((ops.ci95.unwrap() - expect).abs() < 1e-9);
    assert!(ops.significant());
    // Ganesha's ctx switches summary is null: computed from its two repeats.
    let ctx = cmp
        .ratio("txnfs", 10.0, "smallfile-read", Metric::CtxSwitchesPerOp)
        .unwrap();
    let base = ctx.baseline_estimate.unwrap();
    assert!((base.mean - 6.0).abs() < 1e-9);
    assert_eq!(base.n, 2);
    assert!((ctx.ratio.as_ref().unwrap().value - 2.5 / 6.0).abs() < 1e-9);
    let table = cmp.text_table();
    assert!(table.contains("1240 ± 24.84"), "{table}");
    assert!(table.contains("1.240 ± 0.040"), "{table}");
}

#[test]
fn renders_report_json_and_svgs() {
    let cmp = sample_comparison();
    let dir = tempfile::tempdir().unwrap();
    let written = report::write_all(&cmp, dir.path()).unwrap();

    // compare.json: all results (raw fields too) and the ratios.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&written.json).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 2);
    assert_eq!(json["settings"]["baseline"], "ganesha");
    let ratios = json["ratios"].as_array().unwrap();
    let ops = ratios
        .iter()
        .find(|r| r["metric"] == "ops_per_s")
        .expect("ops_per_s ratio");
    assert!((ops["ratio"]["value"].as_f64().unwrap() - 1.24).abs() < 1e-12);
    assert!(json["ratio_ci_method"]
        .as_str()
        .unwrap()
        .contains("delta method"));

    // Plots: one bar chart for the one delay, one per-second chart for the one workload.
    assert_eq!(written.bar_charts.len(), 1);
    assert_eq!(written.line_charts.len(), 1);
    let bar = std::fs::read_to_string(dir.path().join("ops_10ms.svg")).unwrap();
    assert!(bar.starts_with("<svg"), "{}", &bar[..100.min(bar.len())]);
    for needle in [
        "smallfile-read",
        "txnfs",
        "ganesha",
        "1240",
        "1000",
        "<rect",
    ] {
        assert!(bar.contains(needle), "{needle} missing in the bar chart");
    }
    let line = std::fs::read_to_string(dir.path().join("persec_smallfile-read_10ms.svg")).unwrap();
    assert!(
        line.contains("<polyline") || line.contains("<path"),
        "no line drawn"
    );
    assert!(line.contains("txnfs") && line.contains("ganesha"));

    // report.md: settings, machine, table with means ± CI, ratios, costs, links.
    let md = std::fs::read_to_string(&written.report).unwrap();
    for needle in [
        "## Settings",
        "## Machine",
        "## Delay 10 ms",
        "| workload | metric | txnfs | ganesha | txnfs/ganesha |",
        "1240 ± 24.84",
        "1000 ± 24.84",
        "**1.240 ± 0.040**",
        "41.00 ± 1.24",
        "78.00 ± 12.71",
        "server ctx switches/op",
        "2.50 ± 0.248",
        "6.00 ± 1.27",
        "![ops/s at 10 ms](ops_10ms.svg)",
        "persec_smallfile-read_10ms.svg",
        "## Failed checks",
        "short read at offset 8192",
        "| `smallfile-read` | txnfs | READ | 7440 |",
    ] {
        assert!(
            md.contains(needle),
            "{needle:?} missing in report.md:\n{md}"
        );
    }
    if std::path::Path::new("/proc/cpuinfo").exists() {
        assert!(md.contains("* CPU: "), "{md}");
    }
}

#[test]
fn cli_from_results_writes_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // Ganesha's file has "server": null: its name comes from the file name.
    let g = dir.path().join("ganesha.json");
    std::fs::copy(data("ganesha.json"), &g).unwrap();
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: txnfs_benchreport::CompareArgs,
    }
    let cli = Cli::try_parse_from([
        "txnfs-bench".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
        "--from-results".as_ref(),
        data("txnfs.json").as_os_str(),
        g.as_os_str(),
    ])
    .unwrap();
    txnfs_benchreport::main(cli.args).unwrap();
    for f in ["compare.json", "report.md", "ops_10ms.svg"] {
        assert!(out.join(f).is_file(), "{f} not written");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("txnfs/ganesha"), "{md}");
}

#[test]
fn cli_parses_the_matrix_arguments() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: txnfs_benchreport::CompareArgs,
    }
    let cli = Cli::try_parse_from([
        "txnfs-bench",
        "smallfile-read",
        "seqread",
        "--delay-ms",
        "0,10",
        "--repeat",
        "3",
        "--",
        "--threads",
        "4",
    ])
    .unwrap();
    let a = cli.args;
    assert_eq!(a.workloads, vec!["smallfile-read", "seqread"]);
    assert_eq!(a.servers, vec!["txnfs", "ganesha"]);
    assert_eq!(a.delay_ms, vec![0.0, 10.0]);
    assert_eq!(a.repeat, Some(3));
    assert_eq!(a.bench_args, vec!["--threads", "4"]);
    assert!(Cli::try_parse_from(["txnfs-bench"]).is_err());
}
