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
        let (n, mid) = (v.len(), v.len() / 2);
        let median = if n % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        let (min, max) = (v[0], v[n - 1]);
        Some(Summary {
            median,
            min,
            max,
            samples: n,
        })
    }
}

/// The ratio of two medians of one metric, above 1 when evd is better: `evd / value` when more is
/// better (throughput: evd ÷ peer), `value / evd` when less is (latency, time, instructions: peer
/// ÷ evd). `None` when the denominator is zero or either median is not finite.
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
