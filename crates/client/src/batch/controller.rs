//! The batch level controller of Tyche's adaptive batching (seed 004, §VI.A), pure: no
//! clock and no I/O. Once per interval it is told the throughput of the interval that
//! ended and the average number of outstanding requests in it, and answers the batch
//! level for the next one:
//! - throughput up more than `threshold` (3 %) over the previous interval: the level
//!   rises to ⌈(level + min(outstanding, max_level)) / 2⌉;
//! - down more than `threshold`: it falls to ⌊(1 + min(outstanding, level)) / 2⌋ (≥ 1);
//! - otherwise it holds;
//! - after `probe_after` (10) intervals without a change, it probes: one interval at
//!   level + 1, one at level − 1, and moves to the better of the two if it beat the
//!   stable throughput by `threshold`, else goes back.
//!
//! The seed rounds nowhere; we round the rise up and the fall down, so that a level one
//! below the outstanding count can still rise and a level of 2 can still fall to 1.
//!
//! Two departures from the seed, for a steady load that starts at full speed (a
//! benchmark's, where the seed's workloads ramped up): nothing then moves the level off
//! 1 but a probe, ten intervals in, and a won probe moved it by one, so a run of 64
//! outstanding requests took tens of seconds to batch at all (ADR 0044 addendum).
//! - The first probe comes `first_probe_after` (1) unchanged interval after the
//!   reference one, later ones every `probe_after`.
//! - A probe won at level + 1 is a rise of more than `threshold` like any other, so the
//!   rise rule applies from the probe's base: ⌈(base + min(outstanding, max)) / 2⌉
//!   (at least base + 1). A probe won at level − 1 moves by one, as in the seed.
//! - A rise of throughput in the interval right after the level fell holds the level:
//!   the seed reads every rise as more load to batch, but just after a fall it is the
//!   fall's doing, and rising again undid it (on a noisy machine the level swung between
//!   a batching level and its half for as long as the noise lasted).

use std::time::Duration;

/// The controller's settings (the seed's constants by default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControllerSettings {
    /// The most requests one batch message carries (`max_batch_level`; seed: 64).
    pub max_level: u32,
    /// The longest the first request of a batch waits for the others (seed: 5 ms).
    pub max_delay: Duration,
    /// How often the level is revised (seed: 1 s).
    pub interval: Duration,
    /// The relative throughput change that moves the level (seed: 3 %).
    pub threshold: f64,
    /// Unchanged intervals before probing level ± 1 (seed: 10).
    pub probe_after: u32,
    /// Unchanged intervals before the first probe (ours: 1; the seed's rule is 10).
    pub first_probe_after: u32,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            max_level: 64,
            max_delay: Duration::from_millis(5),
            interval: Duration::from_secs(1),
            threshold: 0.03,
            probe_after: 10,
            first_probe_after: 1,
        }
    }
}

/// Where a probe of level ± 1 stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Probe {
    Off,
    /// Running the interval at `base_level + 1`.
    Up {
        base: f64,
        base_level: u32,
    },
    /// Running the interval at `base_level - 1`; `up` is what `base_level + 1` gave.
    Down {
        base: f64,
        base_level: u32,
        up: f64,
    },
}

/// The adaptive batch level (see the module documentation).
#[derive(Debug, Clone)]
pub struct Controller {
    s: ControllerSettings,
    level: u32,
    previous: Option<f64>,
    unchanged: u32,
    /// Whether the level ever moved or a probe ended (then probes wait `probe_after`).
    settled: bool,
    /// Whether the level fell at the end of the last interval.
    fell: bool,
    probe: Probe,
}

impl Controller {
    /// Starts at level 1: no batching until throughput says otherwise.
    pub fn new(s: ControllerSettings) -> Controller {
        Controller {
            s: ControllerSettings {
                max_level: s.max_level.max(1),
                ..s
            },
            level: 1,
            previous: None,
            unchanged: 0,
            settled: false,
            fell: false,
            probe: Probe::Off,
        }
    }

    pub fn level(&self) -> u32 {
        self.level
    }

    pub fn settings(&self) -> &ControllerSettings {
        &self.s
    }

    /// Whether a probe interval is running (for reports and tests).
    pub fn probing(&self) -> bool {
        self.probe != Probe::Off
    }

    fn better(&self, x: f64, than: f64) -> bool {
        x > than * (1.0 + self.s.threshold) || (than <= 0.0 && x > 0.0)
    }

    /// The interval that ended moved `throughput` (any unit, the same every time) with
    /// `outstanding` requests outstanding on average: the level for the next interval.
    pub fn on_interval(&mut self, throughput: f64, outstanding: f64) -> u32 {
        let x = if throughput.is_finite() {
            throughput.max(0.0)
        } else {
            0.0
        };
        let out = if outstanding.is_finite() {
            outstanding.max(0.0)
        } else {
            0.0
        };
        match self.probe {
            Probe::Up { base, base_level } if base_level > 1 => {
                self.probe = Probe::Down {
                    base,
                    base_level,
                    up: x,
                };
                self.level = base_level - 1;
                return self.level;
            }
            Probe::Up { base, base_level } => {
                self.end_probe(base, base_level, Some((base_level + 1, x)), None, out);
                return self.level;
            }
            Probe::Down {
                base,
                base_level,
                up,
            } => {
                let up = (base_level < self.s.max_level).then_some((base_level + 1, up));
                self.end_probe(base, base_level, up, Some((base_level - 1, x)), out);
                return self.level;
            }
            Probe::Off => {}
        }
        let Some(prev) = self.previous else {
            self.previous = Some(x);
            return self.level;
        };
        let before = self.level;
        let fell = std::mem::take(&mut self.fell);
        if self.better(x, prev) {
            if !fell {
                let target = (before as f64 + out.min(self.s.max_level as f64)) / 2.0;
                self.level = (target.ceil() as u32).clamp(1, self.s.max_level);
            }
        } else if prev > 0.0 && x < prev * (1.0 - self.s.threshold) {
            let target = (1.0 + out.min(before as f64)) / 2.0;
            self.level = (target.floor() as u32).clamp(1, self.s.max_level);
        }
        self.previous = Some(x);
        if self.level != before {
            self.fell = self.level < before;
            self.unchanged = 0;
            self.settled = true;
            return self.level;
        }
        self.unchanged += 1;
        let after = if self.settled {
            self.s.probe_after
        } else {
            self.s.first_probe_after
        };
        if self.unchanged >= after.max(1) {
            self.unchanged = 0;
            self.start_probe(x);
        }
        self.level
    }

    fn start_probe(&mut self, base: f64) {
        let base_level = self.level;
        if base_level < self.s.max_level {
            self.probe = Probe::Up { base, base_level };
            self.level = base_level + 1;
        } else if base_level > 1 {
            self.probe = Probe::Down {
                base,
                base_level,
                up: 0.0,
            };
            self.level = base_level - 1;
        }
        // A controller fixed at max_level = 1 has nothing to probe.
    }

    /// Both neighbours measured: keep the better one if it beat `base` by the
    /// threshold (from above: by the rise rule), else go back to `base_level`.
    fn end_probe(
        &mut self,
        base: f64,
        base_level: u32,
        up: Option<(u32, f64)>,
        down: Option<(u32, f64)>,
        out: f64,
    ) {
        self.probe = Probe::Off;
        self.settled = true;
        let best = [up, down]
            .into_iter()
            .flatten()
            .filter(|(l, x)| *l >= 1 && self.better(*x, base))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            Some((l, x)) => {
                self.level = if l > base_level {
                    let target = (base_level as f64 + out.min(self.s.max_level as f64)) / 2.0;
                    (target.ceil() as u32).clamp(l, self.s.max_level)
                } else {
                    l
                };
                self.fell = l < base_level;
                self.previous = Some(x);
            }
            None => {
                self.level = base_level;
                self.previous = Some(base);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(max: u32) -> Controller {
        Controller::new(ControllerSettings {
            max_level: max,
            ..ControllerSettings::default()
        })
    }

    /// Drive `c` to `level` by rising steps with plenty outstanding.
    fn at_level(c: &mut Controller, level: u32) {
        let mut x = 1000.0;
        c.on_interval(x, 0.0);
        while c.level() < level {
            x *= 1.1;
            let out = (2 * level - c.level()) as f64;
            c.on_interval(x, out);
        }
        assert_eq!(c.level(), level, "setup overshot");
    }

    #[test]
    fn the_first_interval_only_sets_the_reference() {
        let mut c = ctl(64);
        assert_eq!(c.on_interval(1000.0, 50.0), 1);
    }

    #[test]
    fn rises_on_more_than_three_percent() {
        let mut c = ctl(64);
        c.on_interval(1000.0, 40.0);
        // ⌈(1 + 40) / 2⌉ = 21
        assert_eq!(c.on_interval(1031.0, 40.0), 21);
        // ⌈(21 + 40) / 2⌉ = 31
        assert_eq!(c.on_interval(1100.0, 40.0), 31);
    }

    #[test]
    fn holds_within_three_percent() {
        let mut c = ctl(64);
        at_level(&mut c, 8);
        let x = c.previous.unwrap();
        assert_eq!(c.on_interval(x * 1.029, 40.0), 8);
        assert_eq!(c.on_interval(x * 1.029 * 0.971, 40.0), 8);
    }

    #[test]
    fn falls_on_more_than_three_percent_down() {
        let mut c = ctl(64);
        at_level(&mut c, 16);
        let x = c.previous.unwrap();
        // ⌊(1 + min(10, 16)) / 2⌋ = 5
        assert_eq!(c.on_interval(x * 0.96, 10.0), 5);
        // ⌊(1 + min(40, 5)) / 2⌋ = 3
        assert_eq!(c.on_interval(x * 0.9, 40.0), 3);
        // and never below 1
        assert_eq!(c.on_interval(x * 0.5, 0.0), 1);
        assert_eq!(c.on_interval(x * 0.1, 0.0), 1);
    }

    #[test]
    fn a_rise_right_after_a_fall_holds_the_level() {
        let mut c = ctl(64);
        at_level(&mut c, 16);
        let x = c.previous.unwrap();
        // ⌊(1 + min(40, 16)) / 2⌋ = 8
        assert_eq!(c.on_interval(x * 0.9, 40.0), 8);
        // +10 % at the lower level: the fall helped, keep it (the seed: ⌈(8 + 40) / 2⌉).
        assert_eq!(c.on_interval(x, 40.0), 8);
        // A rise one interval later is more load again: the rise rule.
        assert_eq!(c.on_interval(x * 1.1, 40.0), 24);
    }

    #[test]
    fn never_exceeds_max() {
        let mut c = ctl(8);
        let mut x = 100.0;
        c.on_interval(x, 1000.0);
        for _ in 0..20 {
            x *= 1.5;
            assert!(c.on_interval(x, 1000.0) <= 8);
        }
        assert_eq!(c.level(), 8);
    }

    #[test]
    fn probes_after_ten_unchanged_intervals_and_keeps_a_better_neighbour() {
        let mut c = ctl(64);
        at_level(&mut c, 8);
        let x = c.previous.unwrap();
        for i in 0..9 {
            assert_eq!(c.on_interval(x, 8.0), 8, "interval {i} holds");
            assert!(!c.probing());
        }
        // The tenth unchanged interval starts the probe at level + 1.
        assert_eq!(c.on_interval(x, 8.0), 9);
        assert!(c.probing());
        // level + 1 gave +5 %; now level − 1 is tried.
        assert_eq!(c.on_interval(x * 1.05, 8.0), 7);
        // level − 1 gave −10 %: keep level + 1.
        assert_eq!(c.on_interval(x * 0.9, 8.0), 9);
        assert!(!c.probing());
    }

    #[test]
    fn a_probe_without_a_better_neighbour_goes_back() {
        let mut c = ctl(64);
        at_level(&mut c, 8);
        let x = c.previous.unwrap();
        for _ in 0..9 {
            c.on_interval(x, 8.0);
        }
        assert_eq!(c.on_interval(x, 8.0), 9);
        assert_eq!(c.on_interval(x * 1.02, 8.0), 7);
        assert_eq!(c.on_interval(x * 0.99, 8.0), 8);
        assert!(!c.probing());
        // and counts ten unchanged intervals again before the next probe
        for _ in 0..9 {
            assert_eq!(c.on_interval(x, 8.0), 8);
        }
        assert_eq!(c.on_interval(x, 8.0), 9);
    }

    #[test]
    fn a_probe_at_level_one_tries_only_two() {
        // The seed's rule from the start: ten unchanged intervals before the first probe.
        let mut c = Controller::new(ControllerSettings {
            first_probe_after: 10,
            ..ControllerSettings::default()
        });
        c.on_interval(1000.0, 1.0);
        for _ in 0..9 {
            assert_eq!(c.on_interval(1000.0, 1.0), 1);
        }
        assert_eq!(c.on_interval(1000.0, 1.0), 2);
        assert_eq!(
            c.on_interval(1100.0, 1.0),
            2,
            "+10 % at 2 with 1 outstanding: kept"
        );
        assert!(!c.probing());
    }

    #[test]
    fn the_first_probe_comes_one_unchanged_interval_after_the_reference() {
        let mut c = ctl(64);
        assert_eq!(c.on_interval(1000.0, 64.0), 1, "reference");
        assert_eq!(
            c.on_interval(1000.0, 64.0),
            2,
            "unchanged once: probe level 2"
        );
        assert!(c.probing());
        // Level 2 gave +20 % with 64 outstanding: the rise rule from the base,
        // ⌈(1 + 64) / 2⌉ = 33, not the seed's single step.
        assert_eq!(c.on_interval(1200.0, 64.0), 33);
        assert!(!c.probing());
        // Settled now: the next probe waits the seed's ten unchanged intervals.
        for i in 0..9 {
            assert_eq!(c.on_interval(1200.0, 64.0), 33, "interval {i} holds");
        }
        assert_eq!(c.on_interval(1200.0, 64.0), 34);
    }

    #[test]
    fn a_won_probe_with_few_outstanding_moves_by_one() {
        let mut c = ctl(64);
        c.on_interval(1000.0, 2.0);
        assert_eq!(c.on_interval(1000.0, 2.0), 2);
        // ⌈(1 + 2) / 2⌉ = 2: the probe's own level, no further.
        assert_eq!(c.on_interval(1100.0, 2.0), 2);
    }

    /// A steady closed-loop load that starts at full speed: 64 outstanding requests,
    /// throughput growing with the batch level up to 16 (fewer messages per request)
    /// and flat beyond. The controller must batch within a few intervals, where the
    /// seed's rules alone stay at level 1 for ten.
    #[test]
    fn a_steady_load_is_batched_within_a_few_intervals() {
        let throughput = |level: u32| 10_000.0 * (1.0 + level.min(16) as f64 / 4.0);
        let mut c = ctl(64);
        let mut level = 1;
        let mut reached = None;
        for i in 0..30 {
            level = c.on_interval(throughput(level), 64.0);
            if reached.is_none() && level >= 16 {
                reached = Some(i);
            }
        }
        let at = reached.expect("reached level 16");
        assert!(at <= 4, "level 16 reached at interval {at}");
        assert!(level >= 15, "stayed batched: level {level}");
    }

    #[test]
    fn a_probe_at_max_tries_only_below() {
        let mut c = ctl(4);
        at_level(&mut c, 4);
        let x = c.previous.unwrap();
        for _ in 0..9 {
            c.on_interval(x, 4.0);
        }
        assert_eq!(c.on_interval(x, 4.0), 3);
        assert_eq!(c.on_interval(x * 1.1, 4.0), 3, "+10 % at 3: kept");
    }

    #[test]
    fn garbage_measurements_do_not_break_it() {
        let mut c = ctl(64);
        c.on_interval(f64::NAN, f64::INFINITY);
        c.on_interval(-5.0, -1.0);
        let l = c.on_interval(f64::INFINITY, f64::NAN);
        assert!((1..=64).contains(&l));
    }
}
