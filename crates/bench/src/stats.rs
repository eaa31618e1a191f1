//! Summary statistics of repeated runs: mean, sample standard deviation and
//! the half-width of the 95% confidence interval of the mean (Student t).

use serde::{Deserialize, Serialize};

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

/// `mean ± ci95` over `n` repeats (`ci95` is null for a single run).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub mean: f64,
    pub ci95: Option<f64>,
    pub n: usize,
}

impl Summary {
    /// Summary of the finite values; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        Some(Summary {
            mean: mean(&v)?,
            ci95: ci95(&v),
            n: v.len(),
        })
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
}
