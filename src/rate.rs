//! Fleet-wide rate limits: at most `starts` jobs of an entrypoint start in any window of
//! length `per`, across every worker that declares it.
//!
//! A limit is kept in the database, by `starts` rows of the rates table for each
//! (entrypoint, window), one per *unit*. A claim spends a unit by stamping it with the
//! moment it takes a job, and may spend only a unit whose stamp is at least `per` old: so
//! a unit starts at most one job in any window of `per`, and `starts` units at most
//! `starts` jobs. That is a sliding window on the database clock, exact under races: a
//! claim locks the units it spends as it reads them, skipping those another claim holds,
//! and the lock re-checks a unit that changed since the claim's snapshot. A dead worker
//! holds nothing: a stamp ages out by itself. A stale re-pick (a dead worker's job taken
//! over) starts its handler again, so it spends a unit too, and waits for one.
//!
//! A handler starts a moment after its claim (the claim's commit, then the hand-over to a
//! thread). So that handler starts keep the limit too, a unit waits a little longer than
//! `per` before it is spent again (its *guard*: a fiftieth of `per`, at most 20 ms),
//! which absorbs the difference between two claims' delays; workers that keep a rate
//! limit never claim ahead of their idle threads.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};

/// Most units (starts per window) one window may have: each is a row of the rates table.
pub(crate) const MAX_STARTS: u32 = 100_000;

/// The shortest window: shorter ones would be spent by a single claim's latency.
pub(crate) const MIN_PER: Duration = Duration::from_millis(10);

/// The longest window.
pub(crate) const MAX_PER: Duration = Duration::from_secs(366 * 24 * 3600);

/// Most windows one entrypoint may stack.
pub(crate) const MAX_WINDOWS: usize = 8;

/// The most a unit waits beyond its window (see the module docs).
const MAX_GUARD: Duration = Duration::from_millis(20);

/// At most [`RateLimit::starts`] jobs of an entrypoint start in any window of
/// [`RateLimit::per`], across every worker of the fleet that declares it. Several may be
/// stacked on one entrypoint (100 per second and 1,000 per hour), and with a concurrency
/// limit.
///
/// ```
/// use std::time::Duration;
/// use pgqueuer::RateLimit;
///
/// let quota = RateLimit::new(100, Duration::from_secs(1));
/// assert_eq!(quota, RateLimit::parse("100/s").unwrap());
/// assert_eq!(quota.to_string(), "100/s");
/// assert_eq!(RateLimit::parse("5/250ms").unwrap().per(), Duration::from_millis(250));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    starts: u32,
    per: Duration,
}

impl RateLimit {
    /// At most `starts` starts in any window of `per`. Checked when the worker (or
    /// claimer) is built: `starts` in `1..=100000`, `per` from 10 ms to 366 days.
    pub fn new(starts: u32, per: Duration) -> RateLimit {
        RateLimit { starts, per }
    }

    /// At most `starts` starts in any second.
    pub fn per_second(starts: u32) -> RateLimit {
        RateLimit::new(starts, Duration::from_secs(1))
    }

    /// At most `starts` starts in any minute.
    pub fn per_minute(starts: u32) -> RateLimit {
        RateLimit::new(starts, Duration::from_secs(60))
    }

    /// At most `starts` starts in any hour.
    pub fn per_hour(starts: u32) -> RateLimit {
        RateLimit::new(starts, Duration::from_secs(3600))
    }

    /// How many jobs may start in one window.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The window's length.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// Reads `N/WINDOW`: `100/s`, `1000/h`, `5/250ms`, `30/10m`, `2/1d` (units `ms`, `s`,
    /// `m`, `h`, `d`; a bare unit means one of it).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong, for text of another form or a limit
    /// out of range.
    pub fn parse(text: &str) -> Result<RateLimit> {
        let bad = |why: String| Error::invalid("rate limit", format!("{text:?}: {why}"));
        let (count, window) = text
            .trim()
            .split_once('/')
            .ok_or_else(|| bad("expected N/WINDOW, such as 100/s or 1000/1h".into()))?;
        let starts: u32 = count
            .trim()
            .parse()
            .map_err(|_| bad(format!("{count:?} is not a whole number of starts")))?;
        let window = window.trim();
        let digits = window.bytes().take_while(u8::is_ascii_digit).count();
        let (amount, unit) = window.split_at(digits);
        let amount: u64 = if amount.is_empty() {
            1
        } else {
            amount
                .parse()
                .map_err(|_| bad(format!("{amount:?} is too large")))?
        };
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => {
                return Err(bad(format!(
                    "{unit:?} is not a unit of time (ms, s, m, h or d)"
                )));
            }
        };
        let ms = amount
            .checked_mul(unit_ms)
            .ok_or_else(|| bad("the window is too long".into()))?;
        let limit = RateLimit::new(starts, Duration::from_millis(ms));
        limit.check(&format!("rate limit {text:?}"))?;
        Ok(limit)
    }

    /// Checks the range of both numbers; `field` names the limit in the error.
    pub(crate) fn check(&self, field: &str) -> Result<()> {
        if self.starts == 0 || self.starts > MAX_STARTS {
            return Err(Error::invalid(
                field,
                format!(
                    "{} starts per window is not in 1..={MAX_STARTS} (each start of a window \
                     is a row of the rates table)",
                    self.starts
                ),
            ));
        }
        if self.per < MIN_PER || self.per > MAX_PER {
            return Err(Error::invalid(
                field,
                format!(
                    "a window of {:?} is not between {MIN_PER:?} and 366 days",
                    self.per
                ),
            ));
        }
        Ok(())
    }

    /// The window in microseconds (its key in the rates table).
    pub(crate) fn per_us(&self) -> i64 {
        i64::try_from(self.per.as_micros()).unwrap_or(i64::MAX)
    }

    /// How long a unit rests after it is spent: the window and its guard.
    pub(crate) fn cooldown_us(&self) -> i64 {
        let guard = (self.per / 50).min(MAX_GUARD);
        self.per_us()
            .saturating_add(i64::try_from(guard.as_micros()).unwrap_or(0))
    }
}

impl fmt::Display for RateLimit {
    /// `N/WINDOW` as [`RateLimit::parse`] reads it, in the largest unit that divides the
    /// window (`100/s`, `30/10m`, `5/250ms`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.per.as_millis();
        let (amount, unit) = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1_000, "s"),
        ]
        .into_iter()
        .find(|(size, _)| ms >= *size && ms.is_multiple_of(*size))
        .map_or((ms, "ms"), |(size, unit)| (ms / size, unit));
        if amount == 1 {
            write!(f, "{}/{unit}", self.starts)
        } else {
            write!(f, "{}/{amount}{unit}", self.starts)
        }
    }
}

/// Checks an entrypoint's stacked windows: each in range, no two of the same length, at
/// most [`MAX_WINDOWS`].
pub(crate) fn check_windows(entrypoint: &str, windows: &[RateLimit]) -> Result<()> {
    let field = format!("rate_limit of {entrypoint:?}");
    if windows.len() > MAX_WINDOWS {
        return Err(Error::invalid(
            field,
            format!(
                "{} windows are stacked; at most {MAX_WINDOWS} may be",
                windows.len()
            ),
        ));
    }
    for (i, window) in windows.iter().enumerate() {
        window.check(&field)?;
        if windows[..i].iter().any(|w| w.per == window.per) {
            return Err(Error::invalid(
                field,
                format!(
                    "two limits share the window {:?}: keep the smaller one",
                    window.per
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_what_display_writes() {
        for text in [
            "100/s", "1000/h", "5/250ms", "30/10m", "2/d", "7/90s", "1/1500ms",
        ] {
            let limit = RateLimit::parse(text).unwrap();
            assert_eq!(limit.to_string(), text);
            assert_eq!(RateLimit::parse(&limit.to_string()).unwrap(), limit);
        }
        assert_eq!(
            RateLimit::parse(" 50 / 1s ").unwrap(),
            RateLimit::per_second(50)
        );
        assert_eq!(
            RateLimit::parse("3/2min").unwrap().per(),
            Duration::from_secs(120)
        );
    }

    #[test]
    fn bad_text_is_named_in_the_error() {
        for (text, says) in [
            ("100", "expected N/WINDOW"),
            ("x/s", "not a whole number"),
            ("-1/s", "not a whole number"),
            ("10/fortnight", "not a unit of time"),
            ("10/99999999999999999999s", "too large"),
            ("10/999999999999999d", "too long"),
            ("0/s", "not in 1..=100000"),
            ("100001/s", "not in 1..=100000"),
            ("1/5ms", "not between"),
            ("1/400d", "not between"),
        ] {
            let e = RateLimit::parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.contains(&format!("{text:?}")), "{text}: {e}");
        }
    }

    #[test]
    fn windows_are_checked_together() {
        let second = RateLimit::per_second(10);
        check_windows("api", &[second, RateLimit::per_hour(100)]).unwrap();
        let e = check_windows("api", &[second, RateLimit::per_second(5)]).unwrap_err();
        assert!(e.to_string().contains("share the window"), "{e}");
        let many: Vec<RateLimit> = (1..=9)
            .map(|s| RateLimit::new(1, Duration::from_secs(s)))
            .collect();
        let e = check_windows("api", &many).unwrap_err();
        assert!(e.to_string().contains("at most 8"), "{e}");
    }

    #[test]
    fn the_guard_is_a_fiftieth_of_the_window_and_at_most_20_ms() {
        assert_eq!(RateLimit::per_second(1).cooldown_us(), 1_020_000);
        assert_eq!(
            RateLimit::new(1, Duration::from_millis(100)).cooldown_us(),
            102_000
        );
        assert_eq!(RateLimit::per_hour(1).cooldown_us(), 3_600_020_000);
    }
}
