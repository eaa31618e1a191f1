//! Helpers for the txnfs benchmarks: reading a server's CPU time, context
//! switches and memory from `/proc`, and small statistics.
//!
//! The Benchmaster-style framework: [`workload::Workload`]s (one file per
//! family in [`workloads`]) run by [`runner`] on N clients × T threads, with
//! [`recorder`] per-op counts and latency histograms, [`stats`] (mean ± 95%
//! CI), [`results`] (the JSON schema) and [`cli`] (`txnfs bench run`, `list`,
//! `ganesha-conf`; the `txnfs-bench` binary of crates/benchreport). [`proxy`] is a
//! user-space TCP delay proxy (latency without netem) that also counts ONC RPC records.
//! [`wire`] (per request type RTT and queue times, transport counters), [`sysstats`]
//! (once-a-second CPU, context switches, RSS) and [`processes`] with [`gate`] (clients
//! in separate processes released together) are ADR 0053's.

pub mod cli;
pub mod driver;
pub mod gate;
pub mod nfs;
pub mod processes;
pub mod proxy;
pub mod recorder;
pub mod results;
pub mod runner;
pub mod stats;
pub mod sysstats;
pub mod wire;
pub mod workload;
pub mod workloads;

pub use proxy::{DelayProxy, ProxyStats, RecordCounter};
/// The shared deterministic data helpers (one copy, in txnfs-testbed).
pub use txnfs_testbed::data::{pattern, XorShift};

use std::collections::HashMap;
use std::path::PathBuf;

/// Clock ticks per second for `/proc/<pid>/stat` times: `getconf CLK_TCK`,
/// or the Linux default 100 when that cannot be run.
pub fn clock_ticks_per_sec() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// A process to sample: a PID, or this process (`/proc/self`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proc {
    Pid(u32),
    SelfProc,
}

impl Proc {
    fn dir(self) -> PathBuf {
        match self {
            Proc::Pid(pid) => PathBuf::from(format!("/proc/{pid}")),
            Proc::SelfProc => PathBuf::from("/proc/self"),
        }
    }

    /// Whether the process exists (and is not a zombie).
    pub fn alive(self) -> bool {
        match std::fs::read_to_string(self.dir().join("stat")) {
            Ok(s) => parse_stat_state(&s).is_some_and(|st| st != 'Z' && st != 'X'),
            Err(_) => false,
        }
    }
}

/// Counters of one thread: context switches from
/// `/proc/<pid>/task/<tid>/status`, time on CPU from `.../schedstat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxSwitches {
    pub voluntary: u64,
    pub involuntary: u64,
    /// Nanoseconds on CPU (first field of schedstat; 0 if unavailable).
    pub run_ns: u64,
}

/// One sample of a process's cost counters.
#[derive(Clone, Debug, Default)]
pub struct ProcSample {
    /// utime + stime of the whole process (all threads, live and exited),
    /// in clock ticks.
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    /// Context switches and CPU time per live thread, keyed by TID.
    pub threads: HashMap<u32, CtxSwitches>,
}

/// The difference between two [`ProcSample`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcDelta {
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    /// Nanoseconds on CPU summed over the threads (schedstat): finer than
    /// the clock ticks, but time of threads that exited is lost.
    pub run_ns: u64,
    /// Threads present in the first sample and gone in the second: their
    /// context switches since the first sample are lost (not counted).
    pub threads_exited: u32,
    /// Threads present only in the second sample: counted from zero.
    pub threads_started: u32,
}

impl ProcSample {
    /// Read `/proc/<pid>/stat` and every `/proc/<pid>/task/*/status`.
    ///
    /// `/proc/<pid>/status` alone reports the context switches of the main
    /// thread only, so the per-thread files are summed instead.
    pub fn read(p: Proc) -> std::io::Result<ProcSample> {
        let dir = p.dir();
        let stat = std::fs::read_to_string(dir.join("stat"))?;
        let (utime_ticks, stime_ticks) = parse_stat_times(&stat).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("cannot parse {}/stat", dir.display()),
            )
        })?;
        let mut threads = HashMap::new();
        for entry in std::fs::read_dir(dir.join("task"))? {
            let entry = entry?;
            let Some(tid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            // A thread may exit between read_dir and the read: skip it.
            let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            let mut c = parse_ctxt_switches(&status);
            c.run_ns = std::fs::read_to_string(entry.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0);
            threads.insert(tid, c);
        }
        Ok(ProcSample {
            utime_ticks,
            stime_ticks,
            threads,
        })
    }

    /// Counters accumulated from `self` (earlier) to `later`.
    pub fn delta_to(&self, later: &ProcSample) -> ProcDelta {
        let mut d = ProcDelta {
            utime_ticks: later.utime_ticks.saturating_sub(self.utime_ticks),
            stime_ticks: later.stime_ticks.saturating_sub(self.stime_ticks),
            ..ProcDelta::default()
        };
        for (tid, after) in &later.threads {
            let before = match self.threads.get(tid) {
                Some(b) => *b,
                None => {
                    d.threads_started += 1;
                    CtxSwitches::default()
                }
            };
            d.voluntary += after.voluntary.saturating_sub(before.voluntary);
            d.involuntary += after.involuntary.saturating_sub(before.involuntary);
            d.run_ns += after.run_ns.saturating_sub(before.run_ns);
        }
        d.threads_exited = self
            .threads
            .keys()
            .filter(|tid| !later.threads.contains_key(tid))
            .count() as u32;
        d
    }
}

/// Memory figures from `/proc/<pid>/status`, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Memory {
    pub vm_rss_kib: u64,
    pub vm_hwm_kib: u64,
    pub threads: u64,
}

/// Read VmRSS, VmHWM and Threads of a process.
pub fn read_memory(p: Proc) -> std::io::Result<Memory> {
    let status = std::fs::read_to_string(p.dir().join("status"))?;
    Ok(Memory {
        vm_rss_kib: status_field(&status, "VmRSS:").unwrap_or(0),
        vm_hwm_kib: status_field(&status, "VmHWM:").unwrap_or(0),
        threads: status_field(&status, "Threads:").unwrap_or(0),
    })
}

/// The fields after the command name of `/proc/<pid>/stat` (the name is in
/// parentheses and may itself contain spaces and parentheses).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let close = stat.rfind(')')?;
    Some(stat.get(close + 1..)?.split_whitespace().collect())
}

fn parse_stat_state(stat: &str) -> Option<char> {
    stat_fields(stat)?.first()?.chars().next()
}

/// utime and stime (fields 14 and 15 of `/proc/<pid>/stat`).
pub fn parse_stat_times(stat: &str) -> Option<(u64, u64)> {
    let f = stat_fields(stat)?;
    // f[0] is field 3 (state), so field n is f[n - 3].
    let utime = f.get(11)?.parse().ok()?;
    let stime = f.get(12)?.parse().ok()?;
    Some((utime, stime))
}

/// The first number after `key` on its line of a `status` file.
pub fn status_field(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

pub fn parse_ctxt_switches(status: &str) -> CtxSwitches {
    CtxSwitches {
        voluntary: status_field(status, "voluntary_ctxt_switches:").unwrap_or(0),
        involuntary: status_field(status, "nonvoluntary_ctxt_switches:").unwrap_or(0),
        run_ns: 0,
    }
}

/// Median of the finite values (mean of the two middle ones for an even
/// count); `None` when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_with_odd_command_name() {
        let stat = "1234 (we ird) (name)) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    57 21 0 0 20 0 9 0 555 1000000 300 18446744073709551615";
        assert_eq!(parse_stat_times(stat), Some((57, 21)));
        assert_eq!(parse_stat_state(stat), Some('S'));
        assert_eq!(parse_stat_times("garbage"), None);
    }

    #[test]
    fn status_fields() {
        let s = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t3\n\
                 voluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t2\n";
        assert_eq!(status_field(s, "VmRSS:"), Some(1024));
        assert_eq!(
            parse_ctxt_switches(s),
            CtxSwitches {
                voluntary: 10,
                involuntary: 2,
                run_ns: 0
            }
        );
    }

    #[test]
    fn delta_counts_new_and_exited_threads() {
        let cs = |v, i| CtxSwitches {
            voluntary: v,
            involuntary: i,
            run_ns: v * 1000,
        };
        let before = ProcSample {
            utime_ticks: 10,
            stime_ticks: 5,
            threads: HashMap::from([(1, cs(100, 10)), (2, cs(50, 5))]),
        };
        let after = ProcSample {
            utime_ticks: 30,
            stime_ticks: 6,
            threads: HashMap::from([(1, cs(150, 12)), (3, cs(7, 1))]),
        };
        let d = before.delta_to(&after);
        assert_eq!(d.utime_ticks, 20);
        assert_eq!(d.stime_ticks, 1);
        assert_eq!(d.voluntary, 57);
        assert_eq!(d.involuntary, 3);
        assert_eq!(d.run_ns, 57_000);
        assert_eq!(d.threads_exited, 1);
        assert_eq!(d.threads_started, 1);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn this_process_is_readable() {
        let s = ProcSample::read(Proc::SelfProc).expect("read /proc/self");
        assert!(!s.threads.is_empty());
        assert!(
            s.threads.values().any(|t| t.run_ns > 0),
            "schedstat readable"
        );
        assert!(read_memory(Proc::SelfProc).expect("status").vm_rss_kib > 0);
        assert!(Proc::SelfProc.alive());
    }
}
