//! The statistics of repeated runs, shared by `txnfs bench run` (summaries
//! in the results file) and `txnfs bench compare` (ratios between servers):
//! mean, sample standard deviation, the half-width of the 95% confidence
//! interval of the mean (Student t), and ratios of means.
//!
//! A confidence interval is given as a half-width (`ci95`): the mean is
//! `mean ± ci95`, with `ci95 = t(0.975, n-1) · s / √n`.
//!
//! ## Ratio of two means
//!
//! For servers A (e.g. txnfs) and B (the baseline, e.g. Ganesha) with means
//! `a ± h_a` and `b ± h_b` from independent runs, the ratio is `R = a / b` and
//! its 95 % half-width comes from the **delta method** (first-order error
//! propagation): the relative standard errors add in quadrature,
//!
//! ```text
//! h_R = |R| · sqrt((h_a / a)² + (h_b / b)²)
//! ```
//!
//! This treats each `h` as `t·se` with similar t quantiles on both sides
//! (same repeat count), and is accurate while `h_b / b` is small (say < 0.2);
//! with a noisy baseline the true interval is skewed upward. As a
//! conservative cross-check [`Ratio`] also carries the interval obtained by
//! dividing the CI bounds, `[(a − h_a)/(b + h_b), (a + h_a)/(b − h_b)]`
//! (unbounded above when `b − h_b ≤ 0`), which is wider than the delta
//! interval.

use serde::{Deserialize, Deserializer, Serialize};

/// Two-sided 95% critical values of Student's t for 1..=30 degrees of freedom.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// Two-sided 95% critical value of Student's t with `df` degrees of freedom
/// (table up to 30, then the usual steps 40/60/120 and the normal 1.960).
pub fn t_critical_95(df: usize) -> f64 {
    match df {
        0 => f64::INFINITY,
        1..=30 => T95[df - 1],
        31..=40 => 2.021,
        41..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

pub fn mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        None
    } else {
        Some(v.iter().sum::<f64>() / v.len() as f64)
    }
}

/// Sample standard deviation (n - 1 in the denominator); `None` below 2 values.
pub fn sample_std_dev(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let m = mean(v)?;
    let ss: f64 = v.iter().map(|x| (x - m) * (x - m)).sum();
    Some((ss / (v.len() - 1) as f64).sqrt())
}

/// Half-width of the 95% confidence interval of the mean: t(n-1) * s / sqrt(n).
pub fn ci95(v: &[f64]) -> Option<f64> {
    let s = sample_std_dev(v)?;
    Some(t_critical_95(v.len() - 1) * s / (v.len() as f64).sqrt())
}

/// `mean ± ci95` over `n` repeats (`ci95` is null below two values). Read
/// leniently: a null or missing mean is NaN, a missing `n` is 0.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    #[serde(default = "nan", deserialize_with = "lenient_f64")]
    pub mean: f64,
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub ci95: Option<f64>,
    #[serde(default)]
    pub n: u64,
}

fn nan() -> f64 {
    f64::NAN
}

fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn lenient_opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.filter(|v| v.is_finite()))
}

impl Summary {
    pub fn new(mean: f64, ci95: Option<f64>, n: u64) -> Summary {
        Summary { mean, ci95, n }
    }

    /// Summary of the finite values; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        Some(Summary {
            mean: mean(&v)?,
            ci95: ci95(&v),
            n: v.len() as u64,
        })
    }

    /// `mean ± ci95`, decimals chosen by size ([`fmt_num`]).
    pub fn display(&self) -> String {
        match self.ci95 {
            Some(h) => format!("{} ± {}", fmt_num(self.mean), fmt_num(h)),
            None => fmt_num(self.mean),
        }
    }

    /// Relative half-width `ci95 / |mean|`.
    pub fn rel_ci(&self) -> Option<f64> {
        let h = self.ci95?;
        (self.mean != 0.0).then(|| h / self.mean.abs())
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ci95 {
            Some(c) => write!(f, "{:.2} ± {:.2} (n={})", self.mean, c, self.n),
            None => write!(f, "{:.2} (n={})", self.mean, self.n),
        }
    }
}

/// `a / b` with its propagated 95 % interval (see the module docs).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Ratio {
    pub value: f64,
    /// Delta-method half-width (`None` when either side has no CI).
    pub ci95: Option<f64>,
    /// Conservative interval from dividing the CI bounds; `hi` is `None`
    /// (unbounded) when the baseline's lower bound is ≤ 0.
    pub bounds: Option<(f64, Option<f64>)>,
}

impl Ratio {
    /// The ratio of the means of `a` and `b`; `None` when `b`'s mean is 0 or
    /// either mean is not finite.
    pub fn of(a: &Summary, b: &Summary) -> Option<Ratio> {
        if !a.mean.is_finite() || !b.mean.is_finite() || b.mean == 0.0 {
            return None;
        }
        let value = a.mean / b.mean;
        let ci95 = match (a.ci95, b.ci95) {
            (Some(ha), Some(hb)) if a.mean != 0.0 => {
                let ra = ha / a.mean;
                let rb = hb / b.mean;
                Some(value.abs() * (ra * ra + rb * rb).sqrt())
            }
            // a = 0: only a's spread matters to first order, h_R = h_a / |b|.
            (Some(ha), Some(_)) => Some((ha / b.mean).abs()),
            _ => None,
        };
        let bounds = match (a.ci95, b.ci95) {
            (Some(ha), Some(hb)) if b.mean > 0.0 && a.mean >= 0.0 => {
                let lo = ((a.mean - ha).max(0.0)) / (b.mean + hb);
                let hi = (b.mean - hb > 0.0).then(|| (a.mean + ha) / (b.mean - hb));
                Some((lo, hi))
            }
            _ => None,
        };
        Some(Ratio {
            value,
            ci95,
            bounds,
        })
    }

    /// `1.23 ± 0.05` (or just `1.23`).
    pub fn display(&self) -> String {
        match self.ci95 {
            Some(h) => format!("{:.3} ± {:.3}", self.value, h),
            None => format!("{:.3}", self.value),
        }
    }

    /// Whether the delta-method interval excludes 1 (a difference at 95 %).
    pub fn significant(&self) -> bool {
        self.ci95
            .is_some_and(|h| self.value - h > 1.0 || self.value + h < 1.0)
    }
}

/// A number with a precision that suits its size (for tables).
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, eps: f64) -> bool {
        (a - b).abs() < eps
    }

    #[test]
    fn t_table() {
        assert_eq!(t_critical_95(1), 12.706);
        assert_eq!(t_critical_95(4), 2.776);
        assert_eq!(t_critical_95(9), 2.262);
        assert_eq!(t_critical_95(30), 2.042);
        assert_eq!(t_critical_95(1000), 1.960);
        assert!(t_critical_95(0).is_infinite());
    }

    #[test]
    fn known_values() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample sd sqrt(32/7) = 2.13809.
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&v), Some(5.0));
        assert!(close(sample_std_dev(&v).unwrap(), 2.138_09, 1e-5));
        // t(7) = 2.365: 2.365 * 2.13809 / sqrt(8) = 1.78777.
        assert!(close(ci95(&v).unwrap(), 1.787_77, 1e-4));
        // n = 5: 10, 12, 14, 16, 18: mean 14, sd sqrt(10) = 3.16228;
        // ci = 2.776 * 3.16228 / sqrt(5) = 3.92590.
        let s = Summary::of(&[10.0, 12.0, 14.0, 16.0, 18.0]).unwrap();
        assert_eq!(s.mean, 14.0);
        assert!(close(s.ci95.unwrap(), 3.925_90, 1e-4));
        assert_eq!(s.n, 5);
        // n = 2: 1, 3: sd sqrt(2), ci = 12.706 * sqrt(2) / sqrt(2) = 12.706.
        assert!(close(ci95(&[1.0, 3.0]).unwrap(), 12.706, 1e-9));
    }

    #[test]
    fn degenerate() {
        assert_eq!(mean(&[]), None);
        assert_eq!(sample_std_dev(&[1.0]), None);
        let s = Summary::of(&[7.0, f64::NAN]).unwrap();
        assert_eq!((s.mean, s.ci95, s.n), (7.0, None, 1));
        assert!(Summary::of(&[]).is_none());
        assert_eq!(ci95(&[3.0, 3.0, 3.0]), Some(0.0));
    }

    #[test]
    fn ratio_delta_method() {
        // a = 1200 ± 60 (5 %), b = 1000 ± 40 (4 %): R = 1.2,
        // h_R = 1.2 · sqrt(0.05² + 0.04²) = 1.2 · 0.0640312 = 0.0768375.
        let a = Summary::new(1200.0, Some(60.0), 5);
        let b = Summary::new(1000.0, Some(40.0), 5);
        let r = Ratio::of(&a, &b).unwrap();
        assert!(close(r.value, 1.2, 1e-12));
        assert!(close(r.ci95.unwrap(), 0.0768375, 1e-6));
        assert!(r.significant());
        // Bounds: (1140/1040, 1260/960).
        let (lo, hi) = r.bounds.unwrap();
        assert!(close(lo, 1140.0 / 1040.0, 1e-12));
        assert!(close(hi.unwrap(), 1260.0 / 960.0, 1e-12));
        // The bounds interval contains the delta interval.
        assert!(lo <= r.value - r.ci95.unwrap());
        assert!(hi.unwrap() >= r.value + r.ci95.unwrap());
        assert_eq!(r.display(), "1.200 ± 0.077");
    }

    #[test]
    fn ratio_edge_cases() {
        let a = Summary::new(10.0, None, 1);
        let b = Summary::new(5.0, Some(1.0), 3);
        let r = Ratio::of(&a, &b).unwrap();
        assert_eq!(r.value, 2.0);
        assert_eq!(r.ci95, None);
        assert_eq!(r.bounds, None);
        assert!(!r.significant());
        assert!(Ratio::of(&a, &Summary::new(0.0, None, 1)).is_none());
        assert!(Ratio::of(&Summary::new(f64::NAN, None, 0), &b).is_none());
        // Noisy baseline: the bounds interval is open above.
        let noisy = Ratio::of(
            &Summary::new(10.0, Some(1.0), 3),
            &Summary::new(5.0, Some(6.0), 3),
        )
        .unwrap();
        assert_eq!(noisy.bounds.unwrap().1, None);
        // Equal means within noise: not significant.
        let same = Ratio::of(
            &Summary::new(100.0, Some(5.0), 3),
            &Summary::new(101.0, Some(5.0), 3),
        )
        .unwrap();
        assert!(!same.significant());
    }

    #[test]
    fn lenient_estimate_json() {
        let e: Summary = serde_json::from_str(r#"{"mean": 5, "ci95": null}"#).unwrap();
        assert_eq!(e, Summary::new(5.0, None, 0));
        let e: Summary = serde_json::from_str(r#"{"mean": null, "n": 0}"#).unwrap();
        assert!(e.mean.is_nan());
    }

    #[test]
    fn number_format() {
        assert_eq!(fmt_num(12345.6), "12346");
        assert_eq!(fmt_num(123.45), "123.5");
        assert_eq!(fmt_num(2.5), "2.50");
        assert_eq!(fmt_num(0.1234), "0.123");
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(f64::NAN), "–");
    }
}
