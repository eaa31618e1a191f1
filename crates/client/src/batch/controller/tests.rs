//! The controller's rules, the seed's and ours (ADR 0044 and its addenda).

use super::*;

/// The seed's fixed 3 % threshold (no noise factor), for the rule tests.
fn ctl(max: u32) -> Controller {
    Controller::new(ControllerSettings {
        max_level: max,
        noise_factor: 0.0,
        ..ControllerSettings::default()
    })
}

/// A deterministic ±`amp` relative noise (a linear congruential generator).
fn noise(seed: &mut u64, amp: f64) -> f64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let u = (*seed >> 11) as f64 / (1u64 << 53) as f64;
    1.0 + amp * (2.0 * u - 1.0)
}

/// Feed the `first_probe_after` intervals that follow the first climb at the level it
/// chose, each moving `x`.
fn verify(c: &mut Controller, x: f64, out: f64) {
    let level = c.level();
    for i in 0..c.settings().first_probe_after {
        assert!(c.probing(), "verify interval {i}");
        assert_eq!(c.on_interval(x, out), c.level());
        if i + 1 < c.settings().first_probe_after {
            assert_eq!(c.level(), level, "verify interval {i} holds");
        }
    }
}

/// With a noise factor the first climb starts after the first interval; the noise is
/// measured after it, at the level it chose, and that level is kept if it beat level
/// 1's one interval by more than the noise; if not, level 1 is measured as long, and
/// the better mean of the two is kept.
#[test]
fn the_noise_is_measured_at_the_level_the_first_climb_chose() {
    let mut c = Controller::new(ControllerSettings::default());
    assert_eq!(c.on_interval(1000.0, 64.0), 2, "the climb starts at once");
    assert!(c.probing());
    assert_eq!(c.on_interval(1080.0, 64.0), 4);
    assert_eq!(c.on_interval(1100.0, 64.0), 8);
    // -36 % against the best so far: more than the start's tolerance, 25 %. Judged
    // with its neighbours, 2 is the best (1,065 against 995 for 4).
    assert_eq!(c.on_interval(700.0, 64.0), 2);
    assert!(c.probing(), "measuring the noise at 2");
    assert_eq!(c.threshold(), 0.03, "no noise measured yet");
    // ±6 % swings at 2: only measured. Their mean, +3 % over level 1's interval, is
    // within twice the noise: level 1 is measured as long as 2 was.
    for (i, x) in [1060.0, 1000.0, 1060.0].into_iter().enumerate() {
        assert_eq!(c.on_interval(x, 64.0), 2, "interval {i}");
    }
    assert_eq!(c.on_interval(1000.0, 64.0), 1);
    assert!(c.probing(), "level 1 measured again");
    assert!(c.threshold() > 0.10, "threshold {}", c.threshold());
    let compared = c.clone();
    // Level 1 moves more over as many intervals: back to level 1.
    for _ in 1..c.settings().first_probe_after {
        assert_eq!(c.on_interval(1050.0, 64.0), 1);
    }
    assert_eq!(c.on_interval(1050.0, 64.0), 1);
    assert!(!c.probing());
    // Level 1 moves less (1,000 against 2's 1,030): 2 is kept, though below the
    // threshold (one interval of level 1 alone could not tell).
    let mut c = compared;
    for _ in 1..c.settings().first_probe_after {
        assert_eq!(c.on_interval(1000.0, 64.0), 1);
    }
    assert_eq!(c.on_interval(1000.0, 64.0), 2);
    assert!(!c.probing());
    // With the same swings but +20 %, 2 would have been kept.
    let mut c = Controller::new(ControllerSettings::default());
    c.on_interval(1000.0, 64.0);
    c.on_interval(1080.0, 64.0);
    c.on_interval(1100.0, 64.0);
    c.on_interval(700.0, 64.0);
    for x in [1260.0, 1200.0, 1260.0, 1200.0] {
        c.on_interval(x, 64.0);
    }
    assert_eq!(c.level(), 2);
    assert!(!c.probing());
}

/// Closed loops on a noisy machine (±4 % per interval), 20 noise seeds: where
/// batching costs 2 % per level, where it gains up to 25 % (flat from 32 on), and
/// where it gains up to 18 % at 8 and loses beyond,
/// the throughput of intervals 10 to 60 is within 5 % of the best level's (the
/// issue's "dynamic ≥ best static − 5 %").
#[test]
fn with_noise_throughput_stays_within_five_percent_of_the_best_level() {
    let hurts = |level: u32| 100_000.0 * (1.0 - 0.02 * (level.min(20) - 1) as f64);
    let helps = |level: u32| 100_000.0 * (1.0 + 0.25 * (level.min(32) as f64 / 32.0));
    type Model = fn(u32) -> f64;
    // Helps up to 8, hurts beyond (64 threads here: static:8 best, static:64 worse
    // than none).
    let peaked = |level: u32| {
        100_000.0
            * (1.0 + 0.18 * level.min(8) as f64 / 8.0 - 0.006 * level.saturating_sub(8) as f64)
    };
    // (name, model, outstanding, best throughput, share of it required): the peaked
    // model's band within 5 % of its best is narrow (levels 6 to 17) and the noise
    // as wide as its slopes; 92 % there.
    // What randread 4 KiB with 64 threads measured here in stop 26 (static levels,
    // 8-10 s cells): best at 16, level 32 barely above none.
    let measured = |level: u32| {
        const AT: [(u32, f64); 9] = [
            (1, 125e3),
            (2, 160e3),
            (4, 210e3),
            (8, 295e3),
            (12, 311e3),
            (16, 320e3),
            (24, 268e3),
            (32, 178e3),
            (64, 120e3),
        ];
        let i = AT
            .iter()
            .position(|(l, _)| *l >= level)
            .unwrap_or(AT.len() - 1);
        if i == 0 || AT[i].0 <= level {
            return AT[i].1;
        }
        let ((l0, x0), (l1, x1)) = (AT[i - 1], AT[i]);
        x0 + (x1 - x0) * f64::from(level - l0) / f64::from(l1 - l0)
    };
    // And at 16 threads: levels 1 to 4 alike within the noise, worse beyond.
    let flat = |level: u32| 110e3 * (1.0 - 0.025 * f64::from(level.saturating_sub(4)));
    let cases: [(&str, Model, f64, f64, f64); 5] = [
        ("hurts", hurts, 16.0, hurts(1), 0.95),
        ("helps", helps, 128.0, helps(32), 0.95),
        ("peaked", peaked, 64.0, peaked(8), 0.92),
        ("measured", measured, 64.0, measured(16), 0.95),
        ("flat", flat, 16.0, flat(1), 0.95),
    ];
    for (name, f, out, best, required) in cases {
        for first in 1..=20u64 {
            let mut seed = first;
            let mut c = Controller::new(ControllerSettings::default());
            let (mut level, mut sum, mut seen) = (1, 0.0, Vec::new());
            for i in 0..60 {
                if i >= 10 {
                    sum += f(level);
                }
                level = c.on_interval(f(level) * noise(&mut seed, 0.04), out);
                seen.push(level);
            }
            let share = sum / 50.0 / best;
            assert!(
                share >= required,
                "{name}, seed {first}: {share:.3} of the best: {seen:?}"
            );
        }
    }
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

/// A controller of `max` settled at `level` with `level` outstanding, after nine
/// unchanged intervals (the tenth probes), and the throughput it settled at.
fn one_interval_before_a_probe(max: u32, level: u32) -> (Controller, f64) {
    let mut c = ctl(max);
    at_level(&mut c, level);
    let x = c.previous.unwrap();
    for _ in 0..9 {
        c.on_interval(x, level as f64);
    }
    (c, x)
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
    let (mut c, x) = one_interval_before_a_probe(64, 8);
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
    // With 1 outstanding the first climb tries 2 and no more.
    let mut c = Controller::new(ControllerSettings::default());
    assert_eq!(c.on_interval(1000.0, 1.0), 2);
    assert_eq!(c.on_interval(1100.0, 1.0), 2, "the climb ends at 2");
    verify(&mut c, 1100.0, 1.0);
    assert_eq!(c.level(), 1, "2 is above the outstanding count: 1 is tried");
    for _ in 1..c.settings().first_probe_after {
        assert_eq!(c.on_interval(1000.0, 1.0), 1, "as long as 2 was measured");
    }
    assert_eq!(
        c.on_interval(1000.0, 1.0),
        2,
        "+10 % at 2 with 1 outstanding: kept"
    );
    assert!(!c.probing());
}

#[test]
fn the_first_probe_climbs_after_first_probe_after_intervals() {
    let mut c = ctl(64);
    assert_eq!(c.on_interval(1000.0, 64.0), 1, "the first interval");
    for i in 2..c.settings().first_probe_after {
        assert_eq!(c.on_interval(1000.0, 64.0), 1, "unchanged {i}");
    }
    // Then the first probe climbs: 2, 4, 8, ... while no level loses.
    assert_eq!(c.on_interval(1000.0, 64.0), 2);
    assert!(c.probing());
    assert_eq!(c.on_interval(1200.0, 64.0), 4);
    assert_eq!(c.on_interval(1300.0, 64.0), 8);
    // 8 loses against 4 by more than 3 %: the climb ends at the best level, 4.
    assert_eq!(c.on_interval(1000.0, 64.0), 4);
    assert!(!c.probing());
    // Settled now: the next probe waits the seed's ten unchanged intervals, and is
    // the seed's step of one.
    for i in 0..9 {
        assert_eq!(c.on_interval(1300.0, 64.0), 4, "interval {i} holds");
    }
    assert_eq!(c.on_interval(1300.0, 64.0), 5);
}

/// A controller with the default settings whose first probe (the climb, at 2)
/// has just begun, after a first interval of 1000 with 64 outstanding.
fn climbing() -> Controller {
    let mut c = Controller::new(ControllerSettings::default());
    assert_eq!(c.on_interval(1000.0, 64.0), 2);
    c
}

#[test]
fn with_a_noise_factor_only_more_load_applies_the_rise_rule() {
    let mut c = climbing();
    // The climb: 2, 4, then 8 loses; 4 stays.
    assert_eq!(c.on_interval(1200.0, 64.0), 4);
    assert_eq!(c.on_interval(1500.0, 64.0), 8);
    assert_eq!(c.on_interval(1000.0, 64.0), 4);
    verify(&mut c, 1500.0, 64.0);
    assert_eq!(c.level(), 4);
    // +20 % at the same 64 outstanding: noise to this rule, the level holds.
    assert_eq!(c.on_interval(1800.0, 64.0), 4);
    // +20 % with twice the requests outstanding: ⌈(4 + 64) / 2⌉ (max 64).
    assert_eq!(c.on_interval(2200.0, 128.0), 34);
}

#[test]
fn with_a_noise_factor_only_less_load_applies_the_fall_rule() {
    let mut c = climbing();
    assert_eq!(c.on_interval(1200.0, 64.0), 4);
    assert_eq!(c.on_interval(1500.0, 64.0), 8);
    assert_eq!(c.on_interval(1600.0, 64.0), 16);
    assert_eq!(
        c.on_interval(1150.0, 64.0),
        8,
        "the climb keeps its best, 8"
    );
    verify(&mut c, 1600.0, 64.0);
    assert_eq!(c.level(), 8);
    // -28 % at the same 64 outstanding: noise to this rule, the level holds.
    assert_eq!(c.on_interval(1150.0, 64.0), 8);
    // -25 % again with a quarter of the requests outstanding: ⌊(1 + 8) / 2⌋.
    assert_eq!(c.on_interval(860.0, 16.0), 4);
}

#[test]
fn intervals_are_short_until_the_first_probe_ends() {
    let mut c = Controller::new(ControllerSettings::default());
    let short = c.settings().start_interval;
    assert_eq!(short, Duration::from_millis(100));
    assert_eq!(c.interval(), short);
    c.on_interval(1000.0, 64.0);
    assert!(c.probing());
    assert_eq!(c.interval(), short, "the climb runs short intervals too");
    c.on_interval(1200.0, 64.0);
    c.on_interval(800.0, 64.0);
    assert_eq!(c.interval(), short, "and so does the noise's measurement");
    verify(&mut c, 1200.0, 64.0);
    assert!(!c.probing());
    assert_eq!(
        c.interval(),
        Duration::from_secs(1),
        "settled: the seed's interval"
    );
}

#[test]
fn the_climb_stops_at_the_outstanding_count_and_at_max() {
    let mut c = ctl(64);
    for _ in 1..c.settings().first_probe_after {
        c.on_interval(1000.0, 5.0);
    }
    assert_eq!(c.on_interval(1000.0, 5.0), 2);
    assert_eq!(c.on_interval(1100.0, 5.0), 4);
    // 8 callers would be more than the 5 outstanding: the climb ends at its best.
    assert_eq!(c.on_interval(1200.0, 5.0), 4);
    assert!(!c.probing());
    let mut c = ctl(4);
    for _ in 1..c.settings().first_probe_after {
        c.on_interval(1000.0, 64.0);
    }
    assert_eq!(c.on_interval(1000.0, 64.0), 2);
    assert_eq!(c.on_interval(1100.0, 64.0), 4);
    assert_eq!(c.on_interval(1200.0, 64.0), 4, "max_level 4");
    assert!(!c.probing());
}

#[test]
fn a_won_probe_with_few_outstanding_moves_by_one() {
    let mut c = ctl(64);
    c.on_interval(1000.0, 2.0);
    for _ in 2..c.settings().first_probe_after {
        assert_eq!(c.on_interval(1000.0, 2.0), 1);
    }
    assert_eq!(c.on_interval(1000.0, 2.0), 2);
    // ⌈(1 + 2) / 2⌉ = 2: the probe's own level, no further.
    assert_eq!(c.on_interval(1100.0, 2.0), 2);
}

/// A steady closed-loop load that starts at full speed: 64 outstanding requests,
/// throughput growing with the batch level up to 16 (fewer messages per request)
/// and flat beyond. The controller must batch within a few intervals, where the
/// seed's rules alone stay at level 1 for ten and then move by one.
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
    // Reference, three intervals of noise, then the climb: 2, 4, 8, 16.
    assert!(at <= 7, "level 16 reached at interval {at}");
    assert!(level >= 15, "stayed batched: level {level}");
}

#[test]
fn a_probe_at_max_tries_only_below() {
    let (mut c, x) = one_interval_before_a_probe(4, 4);
    assert_eq!(c.on_interval(x, 4.0), 3);
    assert_eq!(c.on_interval(x * 1.1, 4.0), 3, "+10 % at 3: kept");
}

/// A first climb misled by one noisy interval ends low (level 4 of a curve whose
/// best is 16, as 128 callers did in stop 29's sweep); the next probe doubles while
/// it wins and finds the best, where probes of ± 1 gained less than the noise.
#[test]
fn a_later_probe_climbs_out_of_a_level_the_start_left_too_low() {
    let curve = |level: u32| match level {
        0..=1 => 125e3,
        2..=3 => 160e3,
        4..=7 => 210e3,
        8..=15 => 295e3,
        16..=31 => 320e3,
        _ => 178e3,
    };
    let mut c = Controller::new(ControllerSettings::default());
    assert_eq!(c.on_interval(125e3, 128.0), 2, "the first climb starts");
    assert_eq!(c.on_interval(curve(2), 128.0), 4);
    assert_eq!(c.on_interval(curve(4), 128.0), 8);
    // A noisy interval at 8: the climb ends at the best level measured, 4, which
    // beats level 1.
    assert_eq!(c.on_interval(150e3, 128.0), 4);
    verify(&mut c, curve(4), 128.0);
    assert_eq!(c.level(), 4);
    let mut seed = 7;
    let mut seen = Vec::new();
    for _ in 0..30 {
        let level = c.level();
        seen.push(c.on_interval(curve(level) * noise(&mut seed, 0.02), 128.0));
    }
    let last = *seen.last().expect("levels");
    assert!((16..32).contains(&last), "ends at {last}: {seen:?}");
    let at_best = seen.iter().filter(|l| (16..32).contains(*l)).count();
    assert!(
        at_best >= 15,
        "{at_best} of 30 intervals at the best: {seen:?}"
    );
}

#[test]
fn garbage_measurements_do_not_break_it() {
    let mut c = ctl(64);
    c.on_interval(f64::NAN, f64::INFINITY);
    c.on_interval(-5.0, -1.0);
    let l = c.on_interval(f64::INFINITY, f64::NAN);
    assert!((1..=64).contains(&l));
}

/// The other way: one caller with 4 requests outstanding, whose start climb was misled
/// to level 4 (each batch then waits for all four: 0.78 of level 1, as measured in stop
/// 29). Above a quarter of the outstanding count a later probe tries half the level,
/// and the level comes back down to 1, where probes of ± 1 stayed at 4.
#[test]
fn a_later_probe_halves_a_level_the_start_left_too_high() {
    let curve = |level: u32| match level {
        0..=1 => 45e3,
        2 => 40e3,
        3 => 37e3,
        _ => 35e3,
    };
    let mut c = Controller::new(ControllerSettings::default());
    assert_eq!(c.on_interval(44e3, 4.0), 2, "the first climb starts");
    // Lucky intervals: the climb chooses 4, and four more at 4 keep it (one bad
    // interval of those four would have sent it back to 1).
    assert_eq!(c.on_interval(47e3, 4.0), 4);
    assert_eq!(c.on_interval(48e3, 4.0), 4);
    verify(&mut c, 48e3, 4.0);
    // Above a quarter of the outstanding count the start tries half at once (2 here);
    // the intervals at 2 do not beat the lucky mean at 4.
    assert_eq!(c.level(), 2, "the start's check of half the level");
    for _ in 1..c.settings().first_probe_after {
        assert_eq!(c.on_interval(curve(2), 4.0), 2);
    }
    assert_eq!(c.on_interval(curve(2), 4.0), 4);
    let mut seed = 11;
    let mut seen = Vec::new();
    for _ in 0..30 {
        let level = c.level();
        seen.push(c.on_interval(curve(level) * noise(&mut seed, 0.02), 4.0));
    }
    let last = *seen.last().expect("levels");
    assert!(last <= 2, "ends at {last}: {seen:?}");
    let at_one = seen.iter().filter(|l| **l == 1).count();
    assert!(
        at_one >= 10,
        "{at_one} of 30 intervals at level 1: {seen:?}"
    );
}

/// The start on a machine as noisy as this one, where one 100 ms interval differs from
/// the next by 10-25 % (the client and the server share two cores): 64 callers whose
/// throughput peaks at level 8, with 4 at 0.79 of it, 16 at 0.94 and 32 at 0.67 (the
/// shape of one traced run here). Judged with its neighbours' intervals, the climb
/// keeps 8 more often, and a level below it (a fifth lost) hardly ever.
#[test]
fn the_first_climb_is_not_won_by_one_lucky_interval() {
    let curve = |level: u32| {
        1e9 * match level {
            0..=1 => 0.37,
            2..=3 => 0.5,
            4..=7 => 0.79,
            8..=15 => 1.0,
            16..=31 => 0.94,
            32..=63 => 0.67,
            _ => 0.45,
        }
    };
    let settings = ControllerSettings::default();
    let mut kept = Vec::new();
    for first in 1..=200u64 {
        let mut seed = first;
        let mut c = Controller::new(settings);
        let mut level = 1;
        for _ in 0..20 {
            level = c.on_interval(curve(level) * noise(&mut seed, 0.2), 56.0);
            if c.interval() == settings.interval {
                break;
            }
        }
        assert_eq!(
            c.interval(),
            settings.interval,
            "seed {first}: the start ended"
        );
        kept.push(level);
    }
    let at_best = kept.iter().filter(|l| (8..16).contains(*l)).count();
    let below = kept.iter().filter(|l| **l < 8).count();
    // Each level judged by its own interval: 121 of 200 seeds keep 8, and 8 a level
    // below it. With the neighbours: 156, and none below (16 in the others).
    assert!(at_best >= 140, "{at_best} of 200 seeds kept 8: {kept:?}");
    assert!(
        below <= 3,
        "{below} of 200 seeds kept a level below 8: {kept:?}"
    );
    assert!(kept.iter().all(|l| *l < 32), "a level from 32: {kept:?}");
}

/// Lucky intervals high in the first climb choose 32 for 64 callers, whose throughput
/// at 32 is 0.55 of 16's (as once in 6 runs here, for a whole 10 s run): level 32 beats
/// level 1, so the four intervals after the climb keep it; with fewer than four batches
/// in flight the start then tries half the level, in a short interval, and keeps it.
#[test]
fn a_start_that_chose_too_few_batches_in_flight_tries_half_at_once() {
    let curve = |level: u32| {
        1e9 * match level {
            0..=1 => 0.37,
            2..=3 => 0.5,
            4..=7 => 0.79,
            8..=15 => 1.0,
            16..=31 => 0.94,
            _ => 0.55,
        }
    };
    let mut c = Controller::new(ControllerSettings::default());
    assert_eq!(c.on_interval(curve(1), 64.0), 2);
    assert_eq!(c.on_interval(curve(2), 64.0), 4);
    assert_eq!(c.on_interval(0.8e9, 64.0), 8, "an unlucky interval at 4");
    assert_eq!(c.on_interval(0.8e9, 64.0), 16, "and at 8");
    assert_eq!(c.on_interval(1.0e9, 64.0), 32);
    assert_eq!(c.on_interval(1.1e9, 64.0), 64, "a lucky one at 32");
    // 64 at 0.76: within the start's tolerance of the best, but the climb's top.
    assert_eq!(
        c.on_interval(0.76e9, 64.0),
        32,
        "judged with its neighbours"
    );
    verify(&mut c, curve(32), 64.0);
    assert_eq!(c.level(), 16, "half of 32, a quarter of 64 callers");
    assert!(c.probing());
    assert_eq!(
        c.interval(),
        c.settings().start_interval,
        "a short interval"
    );
    for _ in 1..c.settings().first_probe_after {
        assert_eq!(c.on_interval(curve(16), 64.0), 16, "measured as long as 32");
        assert_eq!(c.interval(), c.settings().start_interval);
    }
    assert_eq!(c.on_interval(curve(16), 64.0), 16, "16 beat 32: kept");
    assert!(!c.probing());
    assert_eq!(c.interval(), c.settings().interval);
    // Not when more than four batches are in flight: 64 callers kept at 8.
    let mut c = Controller::new(ControllerSettings::default());
    assert_eq!(c.on_interval(1e6, 64.0), 2);
    while c.level() <= 8 {
        c.on_interval(1e6 * f64::from(c.level()), 64.0);
    }
    // The level above it loses clearly: the climb ends and chooses it.
    c.on_interval(2e6, 64.0);
    assert_eq!(c.level(), 8);
    verify(&mut c, 8e6, 64.0);
    assert_eq!(c.level(), 8, "kept at 8: no check");
    assert!(!c.probing());
}

/// With four batches in flight (64 callers at 16), half the level is measured as long
/// as the level was, and the better mean kept with no threshold for the level before:
/// 8 moved 6 % more than 16 (less than the threshold of this noise), and 64 callers
/// kept 16, 0.89 of 8, for a whole run in stop 42. Where 16 is better it stays. Half
/// is 8 also when fewer are outstanding than there are callers (52 of 64: a quarter
/// is 13).
#[test]
fn a_start_at_four_batches_in_flight_keeps_the_better_of_it_and_half() {
    for (at_8, kept, out) in [(1.06e6, 8, 64.0), (0.94e6, 16, 64.0), (1.06e6, 8, 52.0)] {
        let mut c = Controller::new(ControllerSettings::default());
        // The climb: 1, 2, 4, 8, 16, then 32 loses clearly, and 16 is chosen (judged
        // with its neighbours: 8 below, 32 above).
        for (x, next) in [
            (0.3, 2),
            (0.4, 4),
            (0.6, 8),
            (0.9, 16),
            (1.0, 32),
            (0.7, 16),
        ] {
            assert_eq!(c.on_interval(x * 1e6, out), next);
        }
        // A noisy start: the threshold is above 6 % now.
        let mut seed = 3;
        for _ in 0..c.settings().first_probe_after {
            c.on_interval(1e6 * noise(&mut seed, 0.05), out);
        }
        assert!(c.threshold() > 0.06, "threshold {}", c.threshold());
        assert_eq!(c.level(), 8, "half of 16, a quarter of 64 callers");
        for _ in 1..c.settings().first_probe_after {
            assert_eq!(c.on_interval(at_8, out), 8);
        }
        assert_eq!(c.on_interval(at_8, out), kept);
        assert!(!c.probing());
    }
}
