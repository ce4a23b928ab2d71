//! Time: the proleptic Gregorian calendar (for cron schedules) and the timestamp and
//! duration texts PgQueuer's payloads and tracebacks use, in one place.
//!
//! PgQueuer's JSON carries times as ISO 8601 strings written by two different writers
//! (PostgreSQL's `json_build_object` in the trigger and pydantic in Python), and its
//! retry tracebacks carry Python's `str(timedelta)`. This crate reads and writes each
//! exactly, without a date-time dependency: the calendar is H. Hinnant's day-count
//! arithmetic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest delay the crate accepts anywhere a job is put off (`execute_after`,
/// `Retry::after`, a retry policy's delays): 1,000 years. A job due later would be
/// past the year 9999 within a few thousand years, where Python's `datetime` (PgQueuer's
/// readers, its dashboard and CLI) cannot read its `execute_after`; PostgreSQL itself
/// would take up to the year 294276.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(1_000 * 31_557_600);

/// Checks that `value` of option `option` lies in `min..=max`; the error names the option,
/// the value and the range, so that no out-of-range duration reaches the arithmetic (an
/// `Instant + Duration` that overflows panics).
pub(crate) fn check_duration(
    option: &str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> crate::Result<()> {
    if value < min || value > max {
        return Err(crate::Error::invalid(
            option,
            format!("{value:?} is outside the allowed range {min:?} to {max:?}"),
        ));
    }
    Ok(())
}

/// A positive ISO 8601 duration in PgQueuer's MCP grammar: `P[nD][T[nH][nM][nS]]`,
/// whole numbers, case-insensitive (`PT1H`, `P7D`, `P1DT12H`).
///
/// # Errors
/// What is wrong, in words, for an error that names the argument.
#[cfg(any(test, feature = "mcp"))]
pub(crate) fn parse_iso_period(text: &str) -> Result<Duration, String> {
    let upper = text.trim().to_ascii_uppercase();
    let bad = || format!("cannot read {text:?} as an ISO-8601 duration such as PT1H or P7D");
    let rest = upper.strip_prefix('P').ok_or_else(bad)?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) => {
            if time.is_empty() {
                return Err(bad());
            }
            (date, time)
        }
        None => (rest, ""),
    };
    let mut total: u64 = 0;
    let mut add = |part: &str, units: &[(char, u64)]| -> Result<(), String> {
        let mut number = String::new();
        let mut next = 0;
        for c in part.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let at = units[next..]
                .iter()
                .position(|(u, _)| *u == c)
                .ok_or_else(bad)?;
            let (_, secs) = units[next + at];
            let n: u64 = number.parse().map_err(|_| bad())?;
            total = n
                .checked_mul(secs)
                .and_then(|s| total.checked_add(s))
                .ok_or_else(|| format!("{text:?} is too long a duration"))?;
            number.clear();
            next += at + 1;
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err(bad())
        }
    };
    add(date, &[('D', 86_400)])?;
    add(time, &[('H', 3_600), ('M', 60), ('S', 1)])?;
    if total == 0 {
        return Err(format!("{text:?} is not a positive duration"));
    }
    Ok(Duration::from_secs(total))
}

/// The current time, truncated to the microsecond.
pub(crate) fn now_micros() -> SystemTime {
    let now = SystemTime::now();
    match now.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => SystemTime::UNIX_EPOCH + Duration::new(d.as_secs(), d.subsec_micros() * 1000),
        Err(_) => now,
    }
}

/// `t` in UTC as Python's pydantic writes an aware datetime in JSON
/// (`2026-11-29T19:18:23.097731Z`; no fraction when it is zero).
pub(crate) fn python_time(t: SystemTime) -> String {
    format_time(t, TimeStyle::Python)
}

/// How a timestamp is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeStyle {
    /// PostgreSQL's JSON rendering of a timestamptz in a UTC session: fraction without
    /// trailing zeros (none when zero), `+00:00`.
    Postgres,
    /// Python pydantic's: six fraction digits (none when zero), `Z`.
    Python,
}

const SECS_PER_DAY: i64 = 86_400;

/// Writes `t` (truncated to the microsecond) in UTC.
pub(crate) fn format_time(t: SystemTime, style: TimeStyle) -> String {
    let (secs, micros) = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_micros(),
        ),
        Err(e) => {
            // Before 1970: step back to the whole second at or before `t`.
            let d = e.duration();
            let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            match d.subsec_micros() {
                0 => (-whole, 0),
                us => (-whole - 1, 1_000_000 - us),
            }
        }
    };
    let days = secs.div_euclid(SECS_PER_DAY);
    let rem = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    if micros != 0 {
        let fraction = format!("{micros:06}");
        out.push('.');
        out.push_str(match style {
            TimeStyle::Postgres => fraction.trim_end_matches('0'),
            TimeStyle::Python => &fraction,
        });
    }
    out.push_str(match style {
        TimeStyle::Postgres => "+00:00",
        TimeStyle::Python => "Z",
    });
    out
}

/// Parses an ISO-8601 timestamp that carries a UTC offset:
/// `YYYY-MM-DD[T ]HH:MM:SS[.fraction](Z|±HH[:MM[:SS]]|±HHMM)`. A naive (offset-less)
/// time is rejected, as Python's receivers reject it.
pub(crate) fn parse_time(text: &str) -> Result<SystemTime, String> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = b.get(range).ok_or("too short")?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err("expected digits".to_owned());
        }
        Ok(part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let expect = |at: usize, what: &[u8]| -> Result<(), String> {
        match b.get(at) {
            Some(c) if what.contains(c) => Ok(()),
            _ => Err(format!("expected {:?} at byte {at}", what[0] as char)),
        }
    };
    let year = digits(0..4)?;
    expect(4, b"-")?;
    let month = digits(5..7)?;
    expect(7, b"-")?;
    let day = digits(8..10)?;
    expect(10, b"Tt ")?;
    let hour = digits(11..13)?;
    expect(13, b":")?;
    let minute = digits(14..16)?;
    expect(16, b":")?;
    let second = digits(17..19)?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > i64::from(days_in_month(year, u32::try_from(month).unwrap_or(1)))
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err("date or time out of range".into());
    }
    let mut at = 19;
    let mut nanos = 0u32;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return Err("empty fraction".into());
        }
        for (i, d) in b[start..at].iter().take(9).enumerate() {
            let place = 10u32.pow(8 - u32::try_from(i).unwrap_or(8));
            nanos += u32::from(d - b'0') * place;
        }
    }
    let offset_secs = match b.get(at) {
        Some(b'Z' | b'z') if at + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let rest = &text[at + 1..];
            let parts: Vec<&str> = if rest.contains(':') {
                rest.split(':').collect()
            } else if rest.len() == 4 {
                vec![&rest[..2], &rest[2..]]
            } else {
                vec![rest]
            };
            if parts.is_empty()
                || parts.len() > 3
                || parts
                    .iter()
                    .any(|p| p.len() != 2 || !p.bytes().all(|c| c.is_ascii_digit()))
            {
                return Err("malformed UTC offset".into());
            }
            let mut secs = 0i64;
            for (part, unit) in parts.iter().zip([3600, 60, 1]) {
                secs += part.parse::<i64>().map_err(|e| e.to_string())? * unit;
            }
            if sign == b'-' { -secs } else { secs }
        }
        None => return Err("no UTC offset (a naive time is not accepted)".into()),
        Some(_) => return Err(format!("unexpected text after the time at byte {at}")),
    };
    let days = days_from_civil(
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    );
    let secs = days * SECS_PER_DAY + hour * 3600 + minute * 60 + second - offset_secs;
    let micros_only = Duration::from_micros(u64::from(nanos / 1000));
    Ok(if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs()) + micros_only
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + micros_only
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    // Count years from March, so that the leap day ends a year.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day counted from 1970-01-01.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both are small and positive by construction.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

pub(crate) fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// 0 = Sunday; 1970-01-01 was a Thursday.
pub(crate) fn weekday_of(days: i64) -> u32 {
    u32::try_from((days + 4).rem_euclid(7)).unwrap_or(0)
}

pub(crate) fn from_epoch_seconds(seconds: i64) -> SystemTime {
    if seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs())
    }
}

/// A duration as people read it in a message: `45s`, `7m12s`, `2h03m`, `3d04h`.
pub(crate) fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// A duration as Python's `str(timedelta)`: `0:00:30`, `1 day, 2:03:04.500000`.
pub(crate) fn python_timedelta(d: Duration) -> String {
    let total = d.as_secs();
    let (days, rem) = (total / 86_400, total % 86_400);
    let mut out = String::new();
    if days > 0 {
        out.push_str(&format!("{days} day{}, ", if days == 1 { "" } else { "s" }));
    }
    out.push_str(&format!(
        "{}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    ));
    let micros = d.subsec_micros();
    if micros > 0 {
        out.push_str(&format!(".{micros:06}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_read_them() {
        for (secs, text) in [
            (0, "0s"),
            (45, "45s"),
            (432, "7m12s"),
            (7_380, "2h03m"),
            (273_600, "3d04h"),
        ] {
            assert_eq!(human_duration(Duration::from_secs(secs)), text);
        }
    }

    #[test]
    fn iso_periods_read_as_pgqueuer_reads_them() {
        for (text, secs) in [
            ("PT1H", 3_600),
            ("p7d", 604_800),
            ("P1DT12H", 129_600),
            ("PT90S", 90),
            ("PT1H30M", 5_400),
        ] {
            assert_eq!(
                parse_iso_period(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
        for text in [
            "", "P", "PT", "1H", "PT1X", "PT0S", "P1H", "PT1M1H", "PT-1S", "PT1.5S",
        ] {
            assert!(parse_iso_period(text).is_err(), "{text}");
        }
        assert!(parse_iso_period("P99999999999999999D").is_err());
    }

    fn at(text: &str) -> SystemTime {
        parse_time(text).unwrap()
    }

    #[test]
    fn times_keep_their_offsets_and_precision() {
        // PostgreSQL in another session TimeZone, and its trimmed fractions.
        assert_eq!(
            at("2026-11-29T20:18:00.82063+01:00"),
            at("2026-11-29T19:18:00.820630Z")
        );
        assert_eq!(at("2026-11-29T14:48:00-04:30"), at("2026-11-29T19:18:00Z"));
        assert_eq!(at("2026-11-29T19:18:00+0000"), at("2026-11-29T19:18:00Z"));
        assert_eq!(at("2026-11-29 19:18:00+00"), at("2026-11-29T19:18:00Z"));
        assert_eq!(
            at("1969-12-31T23:59:59.5Z"),
            SystemTime::UNIX_EPOCH - Duration::from_millis(500)
        );
        let t = at("2024-02-29T00:00:00.000001Z");
        assert_eq!(
            format_time(t, TimeStyle::Python),
            "2024-02-29T00:00:00.000001Z"
        );
        assert_eq!(
            format_time(t, TimeStyle::Postgres),
            "2024-02-29T00:00:00.000001+00:00"
        );
        let whole = at("2026-11-29T19:18:00Z");
        assert_eq!(
            format_time(whole, TimeStyle::Python),
            "2026-11-29T19:18:00Z"
        );
        assert_eq!(
            format_time(whole, TimeStyle::Postgres),
            "2026-11-29T19:18:00+00:00"
        );
        let before = at("1969-12-31T23:59:59.25Z");
        assert_eq!(
            format_time(before, TimeStyle::Postgres),
            "1969-12-31T23:59:59.25+00:00"
        );
    }

    #[test]
    fn naive_and_malformed_times_are_rejected() {
        for bad in [
            "2026-11-29T19:18:00.820631",
            "2026-11-29T19:18:00",
            "2026-11-29",
            "2026-02-30T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T19:18:00.Z",
            "2026-11-29T19:18:00+1",
            "2026-11-29T19:18:00Zjunk",
            "",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn calendar_conversions_agree() {
        for days in [-719_468, -1, 0, 1, 11_016, 20_786, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
    }
    #[test]
    fn civil_dates_round_trip() {
        for days in (-800_000..800_000).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m));
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
        assert_eq!(weekday_of(19_782), 4); // a Thursday
    }

    #[test]
    fn timedeltas_print_like_python() {
        assert_eq!(python_timedelta(Duration::ZERO), "0:00:00");
        assert_eq!(python_timedelta(Duration::from_secs(30)), "0:00:30");
        assert_eq!(python_timedelta(Duration::from_secs(3_725)), "1:02:05");
        assert_eq!(
            python_timedelta(Duration::from_millis(1_500)),
            "0:00:01.500000"
        );
        assert_eq!(
            python_timedelta(Duration::from_secs(86_400 + 61)),
            "1 day, 0:01:01"
        );
        assert_eq!(
            python_timedelta(Duration::from_secs(2 * 86_400)),
            "2 days, 0:00:00"
        );
    }
}
