//! Means, 95 % confidence intervals and ratios of means.
//!
//! A confidence interval is given as a half-width (`ci95`): the mean is
//! `mean ± ci95`, with `ci95 = t(0.975, n-1) · s / √n` (Student t, sample
//! standard deviation `s` over the `n` repeats).
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
//! interval (its coverage is at least that of both intervals at once).

use serde::{Deserialize, Deserializer, Serialize};

/// A mean over `n` repeats with its 95 % confidence half-width (`None` with
/// fewer than two repeats).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Estimate {
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

impl Estimate {
    pub fn new(mean: f64, ci95: Option<f64>, n: u64) -> Estimate {
        Estimate { mean, ci95, n }
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

/// Two-sided 95 % Student t quantile for `df` degrees of freedom.
pub fn t95(df: u64) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df as usize - 1],
        31..=40 => 2.021,
        41..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

/// Mean and 95 % half-width of `xs` (`None` when empty; no CI for one value).
pub fn estimate(xs: &[f64]) -> Option<Estimate> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let ci95 = (n >= 2).then(|| {
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        t95(n as u64 - 1) * (var / n as f64).sqrt()
    });
    Some(Estimate::new(mean, ci95, n as u64))
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
    pub fn of(a: &Estimate, b: &Estimate) -> Option<Ratio> {
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

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn mean_and_ci() {
        // 1..=5: mean 3, s = sqrt(2.5), se = sqrt(0.5), t(4) = 2.776.
        let e = estimate(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(e.mean, 3.0);
        assert_eq!(e.n, 5);
        assert!(close(e.ci95.unwrap(), 2.776 * 0.5f64.sqrt(), 1e-9));
        let one = estimate(&[7.0]).unwrap();
        assert_eq!(one.ci95, None);
        assert!(estimate(&[]).is_none());
        let same = estimate(&[2.0, 2.0, 2.0]).unwrap();
        assert_eq!(same.ci95, Some(0.0));
    }

    #[test]
    fn t_quantiles() {
        assert_eq!(t95(1), 12.706);
        assert_eq!(t95(2), 4.303);
        assert_eq!(t95(30), 2.042);
        assert_eq!(t95(1000), 1.960);
        assert!(t95(0).is_infinite());
    }

    #[test]
    fn ratio_delta_method() {
        // a = 1200 ± 60 (5 %), b = 1000 ± 40 (4 %): R = 1.2,
        // h_R = 1.2 · sqrt(0.05² + 0.04²) = 1.2 · 0.0640312 = 0.0768375.
        let a = Estimate::new(1200.0, Some(60.0), 5);
        let b = Estimate::new(1000.0, Some(40.0), 5);
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
        let a = Estimate::new(10.0, None, 1);
        let b = Estimate::new(5.0, Some(1.0), 3);
        let r = Ratio::of(&a, &b).unwrap();
        assert_eq!(r.value, 2.0);
        assert_eq!(r.ci95, None);
        assert_eq!(r.bounds, None);
        assert!(!r.significant());
        assert!(Ratio::of(&a, &Estimate::new(0.0, None, 1)).is_none());
        assert!(Ratio::of(&Estimate::new(f64::NAN, None, 0), &b).is_none());
        // Noisy baseline: the bounds interval is open above.
        let noisy = Ratio::of(
            &Estimate::new(10.0, Some(1.0), 3),
            &Estimate::new(5.0, Some(6.0), 3),
        )
        .unwrap();
        assert_eq!(noisy.bounds.unwrap().1, None);
        // Equal means within noise: not significant.
        let same = Ratio::of(
            &Estimate::new(100.0, Some(5.0), 3),
            &Estimate::new(101.0, Some(5.0), 3),
        )
        .unwrap();
        assert!(!same.significant());
    }

    #[test]
    fn lenient_estimate_json() {
        let e: Estimate = serde_json::from_str(r#"{"mean": 5, "ci95": null}"#).unwrap();
        assert_eq!(e, Estimate::new(5.0, None, 0));
        let e: Estimate = serde_json::from_str(r#"{"mean": null, "n": 0}"#).unwrap();
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
