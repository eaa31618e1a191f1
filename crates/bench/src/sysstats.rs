//! Once a second during the timed part, what the server process and this (client)
//! process cost: CPU time in user and system mode, context switches (voluntary and
//! involuntary, summed over every thread's `/proc/PID/task/TID/status`) and resident
//! memory — the vmstat/procfs series Benchmaster collects (seed 001 §3).
//!
//! The sampler is a plain thread, not a task of the runtime it measures, so it never
//! delays a worker; it wakes once a second and costs one context switch then.

use crate::{read_memory, Proc, ProcDelta, ProcSample};
use serde::{Deserialize, Serialize};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the sampler reads `/proc`.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// One process over one interval.
#[derive(Clone, Default, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ProcSecond {
    /// CPU time in user mode during the interval, ms.
    pub user_ms: f64,
    /// CPU time in system mode, ms.
    pub system_ms: f64,
    pub ctx_voluntary: u64,
    pub ctx_involuntary: u64,
    /// Resident memory at the end of the interval, KiB.
    pub rss_kib: u64,
}

/// One interval of the series: `t` is its end in seconds since the timed part began
/// (the last interval may be shorter than a second).
#[derive(Clone, Default, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SysSecond {
    pub t: f64,
    pub client: ProcSecond,
    pub server: Option<ProcSecond>,
    /// The highest batch level of the run's clients at the interval's end (batching on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_level: Option<u32>,
}

/// Reads the clients' batch level for the series (`None`: no batching).
pub type LevelProbe = Box<dyn Fn() -> Option<u32> + Send>;

impl ProcSecond {
    fn of(d: &ProcDelta, rss_kib: u64, ticks_per_s: u64) -> ProcSecond {
        let ms = |ticks: u64| ticks as f64 * 1000.0 / ticks_per_s.max(1) as f64;
        ProcSecond {
            user_ms: ms(d.utime_ticks),
            system_ms: ms(d.stime_ticks),
            ctx_voluntary: d.voluntary,
            ctx_involuntary: d.involuntary,
            rss_kib,
        }
    }
}

/// Totals of a series for one process.
pub fn totals(series: &[ProcSecond]) -> ProcSecond {
    series.iter().fold(ProcSecond::default(), |mut a, s| {
        a.user_ms += s.user_ms;
        a.system_ms += s.system_ms;
        a.ctx_voluntary += s.ctx_voluntary;
        a.ctx_involuntary += s.ctx_involuntary;
        a.rss_kib = a.rss_kib.max(s.rss_kib);
        a
    })
}

/// One line on the series: its length, and per process the CPU used (user + system
/// as a share of one core), context switches per second and peak memory.
pub fn summary_line(series: &[SysSecond]) -> String {
    let Some(last) = series.last() else {
        return String::new();
    };
    let secs = last.t.max(1e-9);
    let line = |who: &str, p: ProcSecond| {
        format!(
            " {who} {:.0}% CPU ({:.0}% user), {:.0} ctx/s, {} MiB",
            (p.user_ms + p.system_ms) / secs / 10.0,
            p.user_ms / secs / 10.0,
            (p.ctx_voluntary + p.ctx_involuntary) as f64 / secs,
            p.rss_kib / 1024
        )
    };
    let mut s = format!("  system ({} samples over {secs:.1} s):", series.len());
    s += &line(
        "client",
        totals(&series.iter().map(|x| x.client).collect::<Vec<_>>()),
    );
    let server: Vec<ProcSecond> = series.iter().filter_map(|x| x.server).collect();
    if !server.is_empty() {
        s += ";";
        s += &line("server", totals(&server));
    }
    s + "\n"
}

/// A running sampler; [`Sampler::finish`] stops it and returns the series.
pub struct Sampler {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Vec<SysSecond>>,
}

struct Point {
    client: Option<ProcSample>,
    server: Option<ProcSample>,
}

fn read(server: Option<u32>) -> Point {
    Point {
        client: ProcSample::read(Proc::SelfProc).ok(),
        server: server.and_then(|p| ProcSample::read(Proc::Pid(p)).ok()),
    }
}

fn interval(
    from: &Point,
    to: &Point,
    server: Option<u32>,
    t: f64,
    ticks: u64,
) -> Option<SysSecond> {
    let rss = |p: Proc| read_memory(p).map(|m| m.vm_rss_kib).unwrap_or(0);
    let client = ProcSecond::of(
        &from.client.as_ref()?.delta_to(to.client.as_ref()?),
        rss(Proc::SelfProc),
        ticks,
    );
    let server = match (server, &from.server, &to.server) {
        (Some(pid), Some(a), Some(b)) => {
            Some(ProcSecond::of(&a.delta_to(b), rss(Proc::Pid(pid)), ticks))
        }
        _ => None,
    };
    Some(SysSecond {
        t,
        client,
        server,
        batch_level: None,
    })
}

impl Sampler {
    /// Start sampling this process and, if given, the server process `server`.
    pub fn start(server: Option<u32>) -> Sampler {
        Sampler::start_with(server, None)
    }

    /// [`Sampler::start`], also recording the batch level `level` reads each second.
    pub fn start_with(server: Option<u32>, level: Option<LevelProbe>) -> Sampler {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let ticks = crate::clock_ticks_per_sec();
            let t0 = Instant::now();
            let mut last = read(server);
            let mut series = Vec::new();
            loop {
                let done = !matches!(
                    stopped.recv_timeout(SAMPLE_INTERVAL),
                    Err(mpsc::RecvTimeoutError::Timeout)
                );
                let now = read(server);
                let t = t0.elapsed().as_secs_f64();
                if let Some(mut s) = interval(&last, &now, server, t, ticks) {
                    s.batch_level = level.as_ref().and_then(|l| l());
                    series.push(s);
                }
                last = now;
                if done {
                    return series;
                }
            }
        });
        Sampler { stop, thread }
    }

    /// Stop (taking a last, shorter interval) and return the series.
    pub fn finish(self) -> Vec<SysSecond> {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_process_until_stopped() {
        let me = std::process::id();
        let s = Sampler::start(Some(me));
        // Burn some CPU so the interval has user time in it.
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(1200) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        assert_ne!(x, 7);
        let series = s.finish();
        assert_eq!(series.len(), 2, "one full second and the rest: {series:?}");
        assert!(series[0].t >= 1.0 && series[1].t > series[0].t);
        let c = totals(&series.iter().map(|s| s.client).collect::<Vec<_>>());
        // The machine may be shared: any CPU time at all, not a share of the 1.2 s.
        assert!(c.user_ms > 0.0, "{c:?}");
        assert!(c.rss_kib > 0);
        assert!(series.iter().all(|s| s.server.is_some()));
    }

    #[test]
    fn totals_add_and_keep_peak_memory() {
        let a = ProcSecond {
            user_ms: 1.0,
            system_ms: 2.0,
            ctx_voluntary: 3,
            ctx_involuntary: 4,
            rss_kib: 100,
        };
        let b = ProcSecond { rss_kib: 50, ..a };
        let t = totals(&[a, b]);
        assert_eq!(t.user_ms, 2.0);
        assert_eq!(t.ctx_voluntary + t.ctx_involuntary, 14);
        assert_eq!(t.rss_kib, 100);
    }
}
