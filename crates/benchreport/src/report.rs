//! Writing a [`Comparison`] out: `compare.json`, SVG plots and `report.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::compare::{fmt_delay, Comparison};
use crate::plots::{self, Line};
use crate::results::Metric;
use crate::stats::fmt_num;

/// The files written by [`write_all`].
#[derive(Clone, Debug, Default)]
pub struct Written {
    pub json: PathBuf,
    pub report: PathBuf,
    /// Bar charts of ops/s, one per delay.
    pub bar_charts: Vec<PathBuf>,
    /// Per-second throughput, one per workload and delay.
    pub line_charts: Vec<PathBuf>,
}

/// A file-name-safe version of `s`.
pub fn slug(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "_".into()
    } else {
        out
    }
}

fn bar_chart_name(delay: f64) -> String {
    format!("ops_{}ms.svg", slug(&fmt_delay(delay)))
}

fn line_chart_name(workload: &str, delay: f64) -> String {
    format!(
        "persec_{}_{}ms.svg",
        slug(workload),
        slug(&fmt_delay(delay))
    )
}

/// Write `compare.json`, the plots and `report.md` into `out`.
pub fn write_all(cmp: &Comparison, out: &Path) -> Result<Written> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = out.join("compare.json");
    std::fs::write(&json, serde_json::to_string_pretty(cmp)? + "\n")
        .with_context(|| format!("writing {}", json.display()))?;
    let mut written = Written {
        json,
        ..Written::default()
    };

    let servers = cmp.server_names();
    let workloads = cmp.workloads();
    for delay in cmp.delays() {
        if !cmp.runs.iter().any(|r| r.delay_ms == delay) {
            continue;
        }
        let path = out.join(bar_chart_name(delay));
        plots::bar_chart(
            &path,
            &format!("ops/s at {} ms delay (mean, 95% CI)", fmt_delay(delay)),
            "ops/s",
            &workloads,
            &servers,
            &|s, w| {
                cmp.run(&servers[s], delay, &workloads[w])?
                    .result
                    .estimate(Metric::OpsPerS)
            },
        )
        .with_context(|| format!("plotting {}", path.display()))?;
        written.bar_charts.push(path);

        for workload in &workloads {
            let mut lines = Vec::new();
            for (si, server) in servers.iter().enumerate() {
                let Some(run) = cmp.run(server, delay, workload) else {
                    continue;
                };
                for (ri, rep) in run.result.repeats.iter().enumerate() {
                    if rep.per_second.is_empty() {
                        continue;
                    }
                    // Only whole seconds: the runner's last bucket is usually
                    // a partial second (t counts from 0).
                    let whole: Vec<(f64, f64)> = rep
                        .per_second
                        .iter()
                        .filter(|p| p.t as f64 + 1.0 <= rep.duration_s + 0.05)
                        .map(|p| (p.t as f64, p.ops as f64))
                        .collect();
                    let points = if whole.is_empty() {
                        rep.per_second
                            .iter()
                            .map(|p| (p.t as f64, p.ops as f64))
                            .collect()
                    } else {
                        whole
                    };
                    lines.push(Line {
                        label: (ri == 0).then(|| server.clone()),
                        color: plots::color_index(server, si),
                        points,
                    });
                }
            }
            if lines.is_empty() {
                continue;
            }
            let path = out.join(line_chart_name(workload, delay));
            plots::line_chart(
                &path,
                &format!("{workload}, {} ms delay: ops per second", fmt_delay(delay)),
                "seconds",
                "ops/s",
                &lines,
            )
            .with_context(|| format!("plotting {}", path.display()))?;
            written.line_charts.push(path);
        }
    }

    let report = out.join("report.md");
    std::fs::write(&report, markdown(cmp, &written, out))
        .with_context(|| format!("writing {}", report.display()))?;
    written.report = report;
    Ok(written)
}

fn rel(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The Markdown report.
pub fn markdown(cmp: &Comparison, written: &Written, out: &Path) -> String {
    let servers = cmp.server_names();
    let workloads = cmp.workloads();
    let baseline = &cmp.settings.baseline;
    let others: Vec<&String> = servers.iter().filter(|s| *s != baseline).collect();
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmark comparison: {}\n", servers.join(" vs "));
    if let Some(date) = &cmp.machine.date {
        let _ = writeln!(md, "Generated {date} by `txnfs bench compare`.\n");
    }

    md.push_str("## Settings\n\n");
    let _ = writeln!(md, "* Workloads: {}", list_code(&workloads));
    let _ = writeln!(
        md,
        "* Delays (ms, added per direction by the runner): {}",
        cmp.delays()
            .iter()
            .map(|d| fmt_delay(*d))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(r) = cmp.settings.repeat {
        let _ = writeln!(md, "* Repeats per run: {r}");
    }
    if !cmp.settings.extra_args.is_empty() {
        let _ = writeln!(
            md,
            "* Runner arguments: `{}`",
            cmp.settings.extra_args.join(" ")
        );
    }
    if let Some(b) = &cmp.settings.bench_bin {
        let _ = writeln!(md, "* Runner: `{b}`");
    }
    for s in &cmp.servers {
        let _ = writeln!(
            md,
            "* Server **{}**: {}{}",
            s.name,
            s.version.as_deref().unwrap_or("version unknown"),
            s.url
                .as_deref()
                .map(|u| format!(", `{u}`"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(md, "* Baseline for ratios: **{baseline}**");
    if let Some(c) = &cmp.machine.git_commit {
        let _ = writeln!(md, "* txnfs commit: `{c}`");
    }
    let _ = writeln!(
        md,
        "* Ratios are ratios of means; their 95 % CI comes from the delta method, \
         `R·sqrt((ci_a/a)² + (ci_b/b)²)` (independent runs; `compare.json` also has the \
         conservative interval from dividing the CI bounds). **Bold**: the CI excludes 1.\n"
    );

    md.push_str("## Machine\n\n");
    let m = &cmp.machine;
    let _ = writeln!(
        md,
        "* CPU: {}{}",
        m.cpu_model.as_deref().unwrap_or("unknown"),
        m.cpus
            .map(|n| format!(" ({n} CPUs available)"))
            .unwrap_or_default()
    );
    if let Some(mem) = &m.mem_total {
        let _ = writeln!(md, "* Memory: {mem}");
    }
    if let Some(u) = &m.uname {
        let _ = writeln!(md, "* `uname -a`: `{u}`");
    }
    md.push('\n');

    for delay in cmp.delays() {
        if !cmp.runs.iter().any(|r| r.delay_ms == delay) {
            continue;
        }
        let _ = writeln!(md, "## Delay {} ms\n", fmt_delay(delay));
        if let Some(p) = written
            .bar_charts
            .iter()
            .find(|p| p.file_name().is_some_and(|f| *f == *bar_chart_name(delay)))
        {
            let r = rel(p, out);
            let _ = writeln!(md, "![ops/s at {} ms]({r})\n", fmt_delay(delay));
        }
        // Header.
        let mut header = vec!["workload".to_string(), "metric".to_string()];
        header.extend(servers.iter().cloned());
        header.extend(others.iter().map(|s| format!("{s}/{baseline}")));
        let _ = writeln!(md, "| {} |", header.join(" | "));
        let _ = writeln!(
            md,
            "|{}",
            header
                .iter()
                .enumerate()
                .map(|(i, _)| if i < 2 { "---|" } else { "---:|" })
                .collect::<String>()
        );
        for workload in &workloads {
            let mut first = true;
            for metric in Metric::ALL {
                let ests: Vec<Option<String>> = servers
                    .iter()
                    .map(|s| {
                        cmp.run(s, delay, workload)
                            .and_then(|r| r.result.estimate(metric))
                            .map(|e| e.display())
                    })
                    .collect();
                if ests.iter().all(Option::is_none) {
                    continue;
                }
                let mut row = vec![
                    if first {
                        format!("`{}`", cell(workload))
                    } else {
                        String::new()
                    },
                    metric.label().to_string(),
                ];
                first = false;
                row.extend(ests.into_iter().map(|e| e.unwrap_or_else(|| "–".into())));
                for s in &others {
                    row.push(
                        cmp.ratio(s, delay, workload, metric)
                            .and_then(|r| r.ratio.as_ref())
                            .map(|r| {
                                if r.significant() {
                                    format!("**{}**", r.display())
                                } else {
                                    r.display()
                                }
                            })
                            .unwrap_or_else(|| "–".into()),
                    );
                }
                let _ = writeln!(md, "| {} |", row.join(" | "));
            }
        }
        md.push_str(
            "\nServer CPU and context switches are per workload op (an op of `ops/s`): a \
             client may send one server two requests where it sends another one. The \
             processes table below has them per request.\n\n",
        );

        // Latencies.
        let mut lat_rows = Vec::new();
        for workload in &workloads {
            for server in &servers {
                let Some(run) = cmp.run(server, delay, workload) else {
                    continue;
                };
                let mut per_op: BTreeMap<&str, Vec<&crate::results::Latency>> = BTreeMap::new();
                for rep in &run.result.repeats {
                    for (op, l) in &rep.latency_us {
                        per_op.entry(op.as_str()).or_default().push(l);
                    }
                }
                for (op, ls) in per_op {
                    let avg = |f: fn(&crate::results::Latency) -> f64| {
                        let v: Vec<f64> = ls.iter().map(|l| f(l)).collect();
                        if v.is_empty() {
                            "–".to_string()
                        } else {
                            fmt_num(v.iter().sum::<f64>() / v.len() as f64)
                        }
                    };
                    let max = ls
                        .iter()
                        .map(|l| l.max)
                        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
                    let count: f64 = ls.iter().map(|l| l.count as f64).sum();
                    lat_rows.push(format!(
                        "| `{}` | {} | {} | {:.0} | {} | {} | {} | {} | {} |",
                        cell(workload),
                        server,
                        cell(op),
                        count,
                        avg(|l| l.mean),
                        avg(|l| l.p50),
                        avg(|l| l.p90),
                        avg(|l| l.p99),
                        max.map(fmt_num).unwrap_or_else(|| "–".into())
                    ));
                }
            }
        }
        if !lat_rows.is_empty() {
            md.push_str(
                "Latency per operation, µs (mean of the repeats' figures; max over repeats; count summed):\n\n",
            );
            md.push_str("| workload | server | op | count | mean | p50 | p90 | p99 | max |\n");
            md.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|\n");
            for r in lat_rows {
                md.push_str(&r);
                md.push('\n');
            }
            md.push('\n');
        }

        md.push_str(&crate::wire_report::wire_section(cmp, delay));
        md.push_str(&crate::wire_report::system_section(cmp, delay));

        let lines: Vec<&PathBuf> = written
            .line_charts
            .iter()
            .filter(|p| {
                workloads.iter().any(|w| {
                    p.file_name()
                        .is_some_and(|f| *f == *line_chart_name(w, delay))
                })
            })
            .collect();
        if !lines.is_empty() {
            md.push_str("Throughput per second (one line per repeat, whole seconds only):\n\n");
            for p in lines {
                let r = rel(p, out);
                let _ = writeln!(md, "![per-second throughput]({r})\n");
            }
        }
    }

    // Failed checks and runs.
    let mut failed = String::new();
    for run in &cmp.runs {
        for (rep, check) in run.result.failed() {
            let detail = &check.detail;
            let _ = writeln!(
                failed,
                "* {} `{}` delay {} ms, repeat {}: check `{}` failed {}",
                run.server,
                run.workload,
                fmt_delay(run.delay_ms),
                rep + 1,
                check.rule,
                detail
            );
        }
    }
    if !failed.is_empty() {
        md.push_str("## Failed checks\n\n");
        md.push_str(&failed);
        md.push('\n');
    }
    if !cmp.errors.is_empty() {
        md.push_str("## Failed runs\n\n");
        for e in &cmp.errors {
            let _ = writeln!(
                md,
                "* {} `{}` delay {} ms:\n\n```text\n{}\n```\n",
                e.server,
                e.workload,
                fmt_delay(e.delay_ms),
                e.error.trim_end()
            );
        }
    }

    md.push_str("## Files\n\n* `compare.json`: settings, machine, every result as written by the runner, ratios\n");
    for p in written.bar_charts.iter().chain(&written.line_charts) {
        let r = rel(p, out);
        let _ = writeln!(md, "* [{r}]({r})");
    }
    if cmp.runs.iter().any(|r| r.file.is_some()) {
        md.push_str(
            "* `runs/<server>/<delay>ms/<workload>/`: each run's results, command and log\n",
        );
    }
    md
}

fn list_code(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slug("smallfile-read"), "smallfile-read");
        assert_eq!(slug("a/b c"), "a_b_c");
        assert_eq!(slug(""), "_");
        assert_eq!(bar_chart_name(10.0), "ops_10ms.svg");
        assert_eq!(line_chart_name("x y", 0.5), "persec_x_y_0.5ms.svg");
    }
}
