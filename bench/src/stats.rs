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

/// The ratio in the direction where above 1 means evd is better, for one
/// metric of one case: `evd / value` when more is better (throughput: evd ÷
/// peer, above 1 = evd faster) and `value / evd` when less is better (latency,
/// time and instruction cost: peer ÷ evd, above 1 = evd faster or cheaper).
/// `value` and `evd` are the two medians. `None` when the denominator is zero
/// or either median is not finite.
///
/// ```
/// use evd_bench::stats::ratio_to_evd;
/// // throughput: evd 100 M/s, peer 50 M/s: evd is 2× faster
/// assert_eq!(ratio_to_evd(50.0, 100.0, true), Some(2.0));
/// // latency: evd 10 µs, peer 15 µs: evd is 1.5× faster
/// assert_eq!(ratio_to_evd(15.0, 10.0, false), Some(1.5));
/// assert_eq!(ratio_to_evd(1.0, 0.0, false), None);
/// assert_eq!(ratio_to_evd(0.0, 1.0, true), None);
/// ```
pub fn ratio_to_evd(value: f64, evd: f64, higher_is_better: bool) -> Option<f64> {
    if !evd.is_finite() || !value.is_finite() {
        return None;
    }
    let (num, den) = if higher_is_better {
        (evd, value)
    } else {
        (value, evd)
    };
    (den != 0.0).then(|| num / den)
}

/// `a / b`, `None` when `b` is zero or either is not finite.
pub fn quotient(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b != 0.0).then(|| a / b)
}
