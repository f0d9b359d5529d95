//! Summary statistics of benchmark samples: median and spread of a set of
//! measurements. Pure functions only; benchmarks decide what to measure and
//! print, this module only reduces numbers.

use std::fmt;
use std::time::Duration;

/// Lower percentile reported beside the median.
pub const LOW_PERCENTILE: f64 = 10.0;
/// Upper percentile reported beside the median.
pub const HIGH_PERCENTILE: f64 = 90.0;

/// The spread of a set of samples (all in the same unit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Smallest sample.
    pub min: f64,
    /// [`LOW_PERCENTILE`]th percentile (nearest rank).
    pub p10: f64,
    /// Median (mean of the two middle samples when the count is even).
    pub median: f64,
    /// [`HIGH_PERCENTILE`]th percentile (nearest rank).
    pub p90: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none or any is not a
    /// finite number.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() || samples.iter().any(|value| !value.is_finite()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let count = sorted.len();
        let middle = count / 2;
        let median = if count.is_multiple_of(2) {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        } else {
            sorted[middle]
        };
        Some(Self {
            count,
            min: sorted[0],
            p10: nearest_rank(&sorted, LOW_PERCENTILE),
            median,
            p90: nearest_rank(&sorted, HIGH_PERCENTILE),
            max: sorted[count - 1],
            mean: sorted.iter().sum::<f64>() / count as f64,
        })
    }

    /// Summarises durations in milliseconds.
    pub fn of_millis(samples: &[Duration]) -> Option<Self> {
        let millis: Vec<f64> = samples.iter().map(|d| millis(*d)).collect();
        Self::of(&millis)
    }
}

impl fmt::Display for Summary {
    /// `median 1.234 (p10 1.100, p90 1.500, min 1.000, max 2.000, n 30)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "median {:.3} (p10 {:.3}, p90 {:.3}, min {:.3}, max {:.3}, n {})",
            self.median, self.p10, self.p90, self.min, self.max, self.count
        )
    }
}

/// The `percent`th percentile of ascending `sorted` by the nearest-rank
/// method (the smallest sample with at least `percent`% of samples at or below
/// it). `sorted` must not be empty.
fn nearest_rank(sorted: &[f64], percent: f64) -> f64 {
    let rank = ((percent / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A duration in milliseconds, with sub-millisecond precision.
pub fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_count_median_is_the_middle_sample() {
        let summary = Summary::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!(summary.median, 3.0);
        assert_eq!(summary.min, 1.0);
        assert_eq!(summary.max, 5.0);
        assert_eq!(summary.mean, 3.0);
        assert_eq!(summary.count, 3);
    }

    #[test]
    fn even_count_median_is_the_mean_of_the_middle_pair() {
        let summary = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(summary.median, 2.5);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<f64> = (1..=20).map(f64::from).collect();
        let summary = Summary::of(&samples).unwrap();
        assert_eq!(summary.p10, 2.0);
        assert_eq!(summary.p90, 18.0);
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!((one.p10, one.median, one.p90), (7.0, 7.0, 7.0));
    }

    #[test]
    fn empty_or_non_finite_samples_have_no_summary() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
        assert_eq!(Summary::of(&[f64::INFINITY]), None);
    }

    #[test]
    fn durations_become_milliseconds() {
        assert_eq!(millis(Duration::from_micros(1_500)), 1.5);
        let summary =
            Summary::of_millis(&[Duration::from_millis(2), Duration::from_millis(4)]).unwrap();
        assert_eq!(summary.median, 3.0);
        assert_eq!(
            summary.to_string(),
            "median 3.000 (p10 2.000, p90 4.000, min 2.000, max 4.000, n 2)"
        );
    }
}
