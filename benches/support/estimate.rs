//! The median of repeated measurements and how far it can be trusted.

/// A median of repeated ratios, with the interval that holds the true median with at
/// least `coverage` whatever the distribution of the runs (two of their order statistics,
/// chosen by the binomial law of how many runs fall below the median).
pub(crate) struct MedianEstimate {
    pub(crate) median: f64,
    pub(crate) low: f64,
    pub(crate) high: f64,
    pub(crate) coverage: f64,
    /// The coverage asked for: an interval short of it decides nothing.
    level: f64,
}

impl MedianEstimate {
    /// The estimate from `xs` (not empty), with the narrowest interval whose coverage is
    /// at least `level`, or the widest there is (all of `xs`) when too few runs reach it.
    pub(crate) fn of(xs: &[f64], level: f64) -> MedianEstimate {
        let mut sorted = xs.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        // P(at most j of n runs below the median), for j = 0, 1, ...
        let runs = u32::try_from(n).expect("fewer than 2^32 runs");
        let mut below = Vec::with_capacity(n / 2 + 1);
        let (mut term, mut sum) = (0.5f64.powf(f64::from(runs)), 0.0);
        for j in 0..=runs / 2 {
            if j > 0 {
                // C(n, j) = C(n, j - 1) (n - j + 1) / j
                term *= f64::from(runs - j + 1) / f64::from(j);
            }
            sum += term;
            below.push(sum);
        }
        // [x(k), x(n+1-k)] (1-based) covers the median with 1 - 2 P(at most k-1 below).
        let mut k = 1;
        while k < n / 2 && 1.0 - 2.0 * below[k] >= level {
            k += 1;
        }
        MedianEstimate {
            median,
            low: sorted[k - 1],
            high: sorted[n - k],
            coverage: 1.0 - 2.0 * below[k - 1],
            level,
        }
    }

    /// Whether the interval lies at or above `target` ("met"), below it ("not met"), or
    /// spans it ("undecided": more runs, or a quieter machine, can tell). Too few runs for
    /// the coverage asked (five at least for 90%) decide nothing either.
    pub(crate) fn verdict(&self, target: f64) -> &'static str {
        if self.coverage < self.level {
            "undecided (too few runs)"
        } else if self.low >= target {
            "met"
        } else if self.high < target {
            "not met"
        } else {
            "undecided"
        }
    }

    /// `median M (interval L-H at C%)`, for a table's note.
    pub(crate) fn describe(&self) -> String {
        format!(
            "median {:.3}, {:.0}% interval {:.3}-{:.3}",
            self.median,
            self.coverage * 100.0,
            self.low,
            self.high
        )
    }
}
