//! Summaries of repeated measurements and the ratio to evd (above 1 = evd better).

/// Median, minimum and maximum of a set of samples (one per interleaved round).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The median (mean of the two middle samples for an even count).
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// How many samples.
    pub samples: usize,
}

impl Summary {
    /// Summarize `samples`; `None` if there are none or one is not finite.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            samples: n,
        })
    }
}

/// The ratio of two medians of one metric in the direction where above 1 means evd is better: `evd
/// / value` when more is better (throughput: evd ÷ peer) and `value / evd` when less is (latency,
/// time, instructions: peer ÷ evd). `None` when the denominator is zero or either median is not
/// finite.
///
/// ```
/// use evd_bench::stats::ratio_to_evd;
/// assert_eq!(ratio_to_evd(50.0, 100.0, true), Some(2.0)); // evd 100 M/s, peer 50 M/s
/// assert_eq!(ratio_to_evd(15.0, 10.0, false), Some(1.5)); // evd 10 µs, peer 15 µs
/// assert_eq!(ratio_to_evd(1.0, 0.0, false), None);
/// ```
pub fn ratio_to_evd(value: f64, evd: f64, higher_is_better: bool) -> Option<f64> {
    if higher_is_better {
        quotient(evd, value)
    } else {
        quotient(value, evd)
    }
}

/// `a / b`, `None` when `b` is zero or either is not finite.
pub fn quotient(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b != 0.0).then(|| a / b)
}
