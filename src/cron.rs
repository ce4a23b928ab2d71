//! Cron expressions read the way PgQueuer reads them (through Python's `croniter`).
//!
//! A schedule row is shared by Python and Rust schedulers through its `expression`
//! column, so both must store the same text for the same schedule and agree on when it
//! fires. [`Cron::parse`] accepts what croniter accepts for PgQueuer (with the few
//! exceptions listed on [`Cron`]), [`Cron::normalized`] is the text Python stores, and
//! [`Cron::next_after`] is croniter's `get_next()` in UTC. The test table
//! `tests/fixtures/cron_cases.json` was captured from the real croniter.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::time::{
    civil_from_days, days_from_civil, days_in_month, from_epoch_seconds, weekday_of,
};

/// A parsed cron expression: when a schedule fires, in UTC.
///
/// Five fields, `minute hour day-of-month month day-of-week`, or six with the seconds
/// field **last** (`* * * * * */10` fires every ten seconds), as croniter and PgQueuer
/// read them. The aliases `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
/// `@midnight` and `@hourly` stand for their five-field forms.
///
/// Each field is a comma-separated list of items: `*`, a number, a range `a-b`, a step
/// `*/n`, `a-b/n` or `a/n` (from `a` to the end of the field). Months and weekdays may be
/// given by their three-letter English names in any case (`jan`, `MON`); Sunday is 0 or
/// 7; `?` means `*` in the two day fields; `L` in the day-of-month field is the last day
/// of the month. When both the day-of-month and the day-of-week fields are restricted, a
/// day matching **either** fires (classic cron). croniter's own readings are kept where
/// they surprise: a range written with equal ends (`5-5`) means the whole field, a range
/// whose end is below its start wraps around (`22-2` in the hour field), and a day field
/// listing every value without `*` still counts as restricted.
///
/// Not supported, though croniter accepts them (each is rejected with an error naming
/// the field): a seventh (year) field, `#` and `L<n>` in the day-of-week field, `W` in
/// the day-of-month field, and croniter's hashed and random values (`H`, `R`). An
/// expression that can never fire (`0 0 30 2 *`) is rejected too, where croniter fails
/// only when asked for the next fire.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use pgqueuer::Cron;
///
/// let cron = Cron::parse("0 9 * * MON-FRI")?;
/// assert_eq!(cron.normalized(), "0 9 * * mon-fri");
/// // 2024-02-29 00:00:00 UTC was a Thursday; the next fire is at 09:00 that day.
/// let start = UNIX_EPOCH + Duration::from_secs(1_709_164_800);
/// assert_eq!(cron.next_after(start), start + Duration::from_secs(9 * 3600));
/// # Ok::<(), pgqueuer::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Cron {
    /// The text PgQueuer stores: the fields, lower-cased, joined by single spaces.
    text: String,
    seconds: u64,
    minutes: u64,
    hours: u32,
    /// Bit d for day d of the month (1-31).
    days: u32,
    /// `L`: the last day of the month.
    last_day: bool,
    /// Bit m for month m (1-12).
    months: u16,
    /// Bit w for weekday w, 0 = Sunday.
    weekdays: u8,
    /// The day-of-month field places no restriction (croniter reads it as `*`).
    any_day: bool,
    /// The day-of-week field places no restriction.
    any_weekday: bool,
    /// Six fields: fires on seconds, not just on minutes.
    with_seconds: bool,
}

/// The fields of an expression, in croniter's order (seconds last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Minute,
    Hour,
    Day,
    Month,
    Weekday,
    Second,
}

impl Field {
    const ORDER: [Field; 6] = [
        Field::Minute,
        Field::Hour,
        Field::Day,
        Field::Month,
        Field::Weekday,
        Field::Second,
    ];

    /// The field's name in errors (`Error::InvalidInput::field`).
    fn label(self) -> &'static str {
        match self {
            Field::Minute => "cron minute field",
            Field::Hour => "cron hour field",
            Field::Day => "cron day-of-month field",
            Field::Month => "cron month field",
            Field::Weekday => "cron day-of-week field",
            Field::Second => "cron second field",
        }
    }

    /// The smallest and largest value (weekday 7 is folded to 0 before this applies).
    fn bounds(self) -> (u32, u32) {
        match self {
            Field::Minute | Field::Second => (0, 59),
            Field::Hour => (0, 23),
            Field::Day => (1, 31),
            Field::Month => (1, 12),
            Field::Weekday => (0, 6),
        }
    }

    /// How many values the field has (croniter compares a list's size with this to
    /// decide whether it names every value).
    fn size(self) -> usize {
        let (low, high) = self.bounds();
        (high - low + 1) as usize
    }
}

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// A value of one list item: a number, `*` or `L`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    Number(u32),
    Star,
    Last,
}

/// One field after parsing.
#[derive(Debug, Default)]
struct FieldSet {
    bits: u64,
    star: bool,
    last: bool,
}

impl FieldSet {
    /// croniter's size of the expanded list: distinct values, `*` and `L` each counting one.
    fn len(&self) -> usize {
        self.bits.count_ones() as usize + usize::from(self.star) + usize::from(self.last)
    }
}

/// Everything needed to report a bad field.
struct Context<'a> {
    field: Field,
    expression: &'a str,
}

impl Context<'_> {
    fn error(&self, reason: impl fmt::Display) -> Error {
        Error::InvalidInput {
            field: self.field.label().to_owned(),
            reason: format!("{reason} (in cron expression {:?})", self.expression),
        }
    }
}

impl Cron {
    /// Parses a cron expression (see [`Cron`] for the syntax).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] whose `field` names the offending part (`cron expression`
    /// for the number of fields or an unknown alias, else `cron minute field`, `cron hour
    /// field`, `cron day-of-month field`, `cron month field`, `cron day-of-week field` or
    /// `cron second field`) and whose reason quotes the bad text and the expression.
    pub fn parse(expression: &str) -> Result<Cron> {
        let lowered = expression.to_lowercase();
        let text = match lowered.as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        // croniter splits on ASCII whitespace only (vertical tab included).
        let fields: Vec<&str> = text
            .split([' ', '\t', '\n', '\r', '\x0b', '\x0c'])
            .filter(|f| !f.is_empty())
            .collect();
        match fields.len() {
            5 | 6 => {}
            7 => {
                return Err(Error::InvalidInput {
                    field: "cron expression".into(),
                    reason: format!(
                        "a seventh (year) field is not supported: {expression:?} (use 5 fields, \
                         or 6 with seconds last)"
                    ),
                });
            }
            n => {
                let reason = if text.starts_with('@') && n == 1 {
                    format!(
                        "unknown alias {expression:?} (known: @yearly, @annually, @monthly, \
                         @weekly, @daily, @midnight, @hourly)"
                    )
                } else {
                    format!(
                        "{expression:?} has {n} fields; expected 5 (minute hour day-of-month \
                         month day-of-week) or 6 (the same, then seconds)"
                    )
                };
                return Err(Error::InvalidInput {
                    field: "cron expression".into(),
                    reason,
                });
            }
        }
        let mut sets = Vec::with_capacity(6);
        for (field, raw) in Field::ORDER.into_iter().zip(&fields) {
            let context = Context { field, expression };
            sets.push(parse_field(raw, &context)?);
        }
        let with_seconds = fields.len() == 6;
        let (day, weekday) = (&sets[2], &sets[4]);
        // croniter reads a day field as `*` when it holds `*`, or when it lists every
        // value and the other day field's text contains a `*`.
        let any_day = day.star || (day.len() == Field::Day.size() && fields[4].contains('*'));
        let any_weekday =
            weekday.star || (weekday.len() == Field::Weekday.size() && fields[2].contains('*'));
        let full = |set: &FieldSet, field: Field| {
            if set.star {
                let (low, high) = field.bounds();
                (low..=high).fold(0u64, |bits, v| bits | 1 << v)
            } else {
                set.bits
            }
        };
        let cron = Cron {
            text: fields.join(" "),
            seconds: if with_seconds {
                full(&sets[5], Field::Second)
            } else {
                1
            },
            minutes: full(&sets[0], Field::Minute),
            hours: u32::try_from(full(&sets[1], Field::Hour)).unwrap_or(u32::MAX),
            days: u32::try_from(full(&sets[2], Field::Day)).unwrap_or(u32::MAX),
            last_day: sets[2].last,
            months: u16::try_from(full(&sets[3], Field::Month)).unwrap_or(u16::MAX),
            weekdays: u8::try_from(full(&sets[4], Field::Weekday)).unwrap_or(u8::MAX),
            any_day,
            any_weekday,
            with_seconds,
        };
        cron.check_fires(expression)?;
        Ok(cron)
    }

    /// Parses `expression` and returns the text PgQueuer stores for it (see
    /// [`Cron::normalized`]).
    ///
    /// # Errors
    /// As [`Cron::parse`].
    pub fn normalize(expression: &str) -> Result<String> {
        Cron::parse(expression).map(|cron| cron.text)
    }

    /// The text Python PgQueuer stores in the schedules table for this expression:
    /// croniter's fields (aliases expanded, lower-cased) joined by single spaces, e.g.
    /// `@daily` is `0 0 * * *` and `0 9 * * MON` is `0 9 * * mon`. Schedules are keyed
    /// by this text, so Rust and Python registrations of one schedule share one row.
    pub fn normalized(&self) -> &str {
        &self.text
    }

    /// True for six-field expressions, which fire on seconds.
    pub fn has_seconds(&self) -> bool {
        self.with_seconds
    }

    /// The first fire strictly after `t`, in UTC, as croniter computes it: the search
    /// starts at the next whole second (six fields) or minute (five fields) after `t`.
    pub fn next_after(&self, t: SystemTime) -> SystemTime {
        let now = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2),
            // Before 1970: floor towards minus infinity.
            Err(e) => {
                let d = e.duration();
                let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2);
                if d.subsec_nanos() > 0 {
                    -whole - 1
                } else {
                    -whole
                }
            }
        };
        let unit = if self.with_seconds { 1 } else { 60 };
        let start = (now.div_euclid(unit) + 1) * unit;
        from_epoch_seconds(self.first_at_or_after(start))
    }

    /// The first fire at or after `start` (seconds since the epoch).
    fn first_at_or_after(&self, start: i64) -> i64 {
        let mut day = start.div_euclid(86_400);
        let mut time_of_day = start.rem_euclid(86_400);
        // `check_fires` proved that some day matches; the longest gap between matching
        // days is 8 years (Feb 29 across a skipped leap year such as 2100).
        let limit = day + 9 * 366;
        while day <= limit {
            let (year, month, dom) = civil_from_days(day);
            if self.months & (1 << month) == 0 {
                day = days_from_civil(year, month, 1) + i64::from(days_in_month(year, month));
                time_of_day = 0;
                continue;
            }
            if self.day_matches(year, month, dom, weekday_of(day))
                && let Some(seconds) = self.first_time_at_or_after(time_of_day)
            {
                return day * 86_400 + seconds;
            }
            day += 1;
            time_of_day = 0;
        }
        debug_assert!(false, "no fire within 9 years for {:?}", self.text);
        limit * 86_400
    }

    /// Whether a date fires (ignoring the time of day).
    fn day_matches(&self, year: i64, month: u32, dom: u32, weekday: u32) -> bool {
        let by_day =
            self.days & (1 << dom) != 0 || (self.last_day && dom == days_in_month(year, month));
        let by_weekday = self.weekdays & (1 << weekday) != 0;
        if !self.any_day && !self.any_weekday {
            // Both restricted: either one fires (croniter's day_or).
            by_day || by_weekday
        } else {
            (self.any_day || by_day) && (self.any_weekday || by_weekday)
        }
    }

    /// The first firing time of day at or after `from` seconds past midnight.
    fn first_time_at_or_after(&self, from: i64) -> Option<i64> {
        let from = u32::try_from(from).ok()?;
        let (h0, m0, s0) = (from / 3600, from / 60 % 60, from % 60);
        for hour in h0..24 {
            if self.hours & (1 << hour) == 0 {
                continue;
            }
            let first_minute = if hour == h0 { m0 } else { 0 };
            for minute in first_minute..60 {
                if self.minutes & (1 << minute) == 0 {
                    continue;
                }
                let first_second = if hour == h0 && minute == m0 { s0 } else { 0 };
                if let Some(second) = (first_second..60).find(|s| self.seconds & (1 << s) != 0) {
                    return Some(i64::from(hour * 3600 + minute * 60 + second));
                }
            }
        }
        None
    }

    /// Rejects expressions that can never fire: only a day-of-month restriction (the
    /// weekday side, when restricted, always fires somewhere) naming days that none of
    /// the months has.
    fn check_fires(&self, expression: &str) -> Result<()> {
        if self.any_day || !self.any_weekday || self.last_day {
            return Ok(());
        }
        // Leap years give February 29 days.
        let longest = |month: u32| {
            if month == 2 {
                29
            } else {
                days_in_month(2023, month)
            }
        };
        let fires = (1..=12u32)
            .filter(|m| self.months & (1 << m) != 0)
            .any(|m| (1..=longest(m)).any(|d| self.days & (1 << d) != 0));
        if fires {
            Ok(())
        } else {
            Err(Error::InvalidInput {
                field: Field::Day.label().to_owned(),
                reason: format!(
                    "no month of the month field has any of these days, so {expression:?} \
                     never fires"
                ),
            })
        }
    }
}

/// Parses one field into its set of values.
fn parse_field(raw: &str, context: &Context<'_>) -> Result<FieldSet> {
    let field = context.field;
    let raw = if raw.contains('?') {
        if raw != "?" {
            return Err(context.error(format!(
                "{raw:?}: `?` cannot be combined with other characters"
            )));
        }
        if !matches!(field, Field::Day | Field::Weekday) {
            return Err(
                context.error("`?` is only allowed in the day-of-month and day-of-week fields")
            );
        }
        "*"
    } else {
        raw
    };
    let mut set = FieldSet::default();
    for item in raw.split(',') {
        for value in parse_item(item, context)? {
            match value {
                Value::Star => set.star = true,
                Value::Last => set.last = true,
                Value::Number(n) => set.bits |= 1 << n,
            }
        }
    }
    Ok(set)
}

/// Parses one list item into the values it names, as croniter expands it.
fn parse_item(item: &str, context: &Context<'_>) -> Result<Vec<Value>> {
    let field = context.field;
    let (min, max) = field.bounds();
    reject_unsupported(item, context)?;
    // `*/n` is `min-max/n`.
    let rewritten = match item.strip_prefix("*/") {
        Some(rest) if !rest.is_empty() => format!("{min}-{max}/{rest}"),
        _ => item.to_owned(),
    };
    let (range, start_with_step) = if let Some(range) = split_range(&rewritten) {
        (Some(range), false)
    } else if let Some((start, step)) = item
        .rsplit_once('/')
        .filter(|(start, step)| !start.is_empty() && !step.is_empty())
    {
        // `a/n` is `a-max/n` (but only `a` itself when `a` is the maximum, below).
        let range = split_range(&format!("{start}-{max}/{step}"));
        let matched = range.is_some();
        (range, matched)
    } else {
        (None, false)
    };
    let Some((low, high, step)) = range else {
        return single_value(item, context).map(|v| vec![v]);
    };
    let high = if field == Field::Day && high == "l" {
        "31".to_owned()
    } else {
        high
    };
    let bound = |text: &str| -> Result<u32> {
        let number = if is_digits(text) {
            Some(parse_saturating(text))
        } else {
            match name_value(field, text) {
                Some(Value::Number(n)) => Some(n),
                Some(_) => None,
                None => {
                    return Err(context.error(format!(
                        "{item:?}: {text:?} is not a number{}",
                        name_hint(field)
                    )));
                }
            }
        };
        let number = number
            .ok_or_else(|| context.error(format!("{item:?}: {text:?} cannot bound a range")))?;
        Ok(fold_sunday(field, number))
    };
    let step = match step {
        None => 1,
        Some(step) => match parse_saturating(&step) {
            0 => return Err(context.error(format!("{item:?}: a step of 0 is not allowed"))),
            n => n,
        },
    };
    let (mut low, mut high) = (bound(&low)?, bound(&high)?);
    if low.max(high) > max {
        return Err(context.error(format!(
            "{item:?} goes beyond the field's range {min}-{max}"
        )));
    }
    let start_at_max = start_with_step && low == high;
    if low == high && !start_with_step {
        // croniter: a range written with equal ends is the whole field.
        (low, high) = (min, max);
    }
    let step_usize = usize::try_from(step).unwrap_or(usize::MAX);
    let numbers: Vec<u32> = if start_at_max {
        vec![low]
    } else if low > high {
        // Wrapping range: low..max, then on from the field's start, continuing the
        // step the way croniter does.
        let mut numbers: Vec<u32> = (low..=max).step_by(step_usize).collect();
        let last = u64::from(*numbers.last().unwrap_or(&low));
        let (step64, max64) = (u64::from(step), u64::from(max));
        let skip = if last + step64 > max64 + 1 {
            step64 - (max64 - last)
        } else {
            0
        };
        let restart = u64::from(min) + skip;
        if restart <= u64::from(high) {
            let restart = u32::try_from(restart).unwrap_or(u32::MAX);
            numbers.extend((restart..=high).step_by(step_usize));
        }
        numbers
    } else {
        (low..=high).step_by(step_usize).collect()
    };
    numbers
        .into_iter()
        .map(|n| {
            let n = fold_sunday(field, n);
            if n < min || n > max {
                Err(context.error(format!(
                    "{item:?} reaches {n}, outside the field's range {min}-{max}"
                )))
            } else {
                Ok(Value::Number(n))
            }
        })
        .collect()
}

/// Splits `low-high[/step]` as croniter's range pattern does: exactly one `-`, a
/// non-empty `low`, a non-empty `high` without `/`, and an optional all-digit step.
fn split_range(text: &str) -> Option<(String, String, Option<String>)> {
    let (low, rest) = text.split_once('-')?;
    if low.is_empty() || rest.contains('-') {
        return None;
    }
    let (high, step) = match rest.split_once('/') {
        Some((high, step)) => {
            if !is_digits(step) {
                return None;
            }
            (high, Some(step.to_owned()))
        }
        None => (rest, None),
    };
    if high.is_empty() {
        return None;
    }
    Some((low.to_owned(), high.to_owned(), step))
}

/// One value that is not a range: a number, `*`, a name, or `L`.
fn single_value(item: &str, context: &Context<'_>) -> Result<Value> {
    let field = context.field;
    let (min, max) = field.bounds();
    if item.starts_with('-') {
        return Err(context.error(format!("{item:?}: negative numbers are not allowed")));
    }
    let value = if item == "*" {
        Value::Star
    } else if is_digits(item) {
        Value::Number(fold_sunday(field, parse_saturating(item)))
    } else {
        name_value(field, item).ok_or_else(|| {
            context.error(format!(
                "{item:?} is not a number, a range or a step{}",
                name_hint(field)
            ))
        })?
    };
    if let Value::Number(n) = value
        && (n < min || n > max)
    {
        let (min, max) = if field == Field::Weekday {
            (0, 7)
        } else {
            (min, max)
        };
        return Err(context.error(format!("{item:?} is outside the field's range {min}-{max}")));
    }
    Ok(value)
}

/// Rejects croniter syntax this crate does not implement, with a clear reason.
fn reject_unsupported(item: &str, context: &Context<'_>) -> Result<()> {
    let field = context.field;
    let unsupported = |what: &str| {
        context.error(format!(
            "{item:?}: {what} is not supported by pgqueuer (Rust)"
        ))
    };
    if field == Field::Weekday && item.contains('#') {
        return Err(unsupported("the nth weekday of the month (`#`)"));
    }
    if field == Field::Weekday && item.len() > 1 && item.starts_with('l') && is_digits(&item[1..]) {
        return Err(unsupported("the last weekday of the month (`L<n>`)"));
    }
    if field == Field::Day {
        let digits = item
            .strip_suffix('w')
            .or_else(|| item.strip_prefix('w'))
            .filter(|d| is_digits(d));
        if digits.is_some() {
            return Err(unsupported("the nearest weekday (`W`)"));
        }
    }
    let head = item.split(['(', '/']).next().unwrap_or("");
    if head == "h" || head == "r" {
        return Err(unsupported("a hashed or random value (`H`, `R`)"));
    }
    Ok(())
}

/// The value of a name in a field: month and weekday names, `L` in the day field.
fn name_value(field: Field, name: &str) -> Option<Value> {
    let position = |names: &[&str]| names.iter().position(|n| *n == name);
    match field {
        Field::Month => position(&MONTH_NAMES)
            .and_then(|i| u32::try_from(i + 1).ok())
            .map(Value::Number),
        Field::Weekday => position(&WEEKDAY_NAMES)
            .and_then(|i| u32::try_from(i).ok())
            .map(Value::Number),
        Field::Day if name == "l" => Some(Value::Last),
        _ => None,
    }
}

fn name_hint(field: Field) -> &'static str {
    match field {
        Field::Month => " or a month name (jan..dec)",
        Field::Weekday => " or a weekday name (sun..sat)",
        Field::Day => " or L",
        _ => "",
    }
}

/// Weekday 7 is Sunday, 0.
fn fold_sunday(field: Field, n: u32) -> u32 {
    if field == Field::Weekday && n == 7 {
        0
    } else {
        n
    }
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Parses ASCII digits, saturating at `u32::MAX` (any such value is out of range or a
/// step longer than the field, as in Python).
fn parse_saturating(digits: &str) -> u32 {
    digits.bytes().fold(0u32, |n, b| {
        n.saturating_mul(10).saturating_add(u32::from(b - b'0'))
    })
}

impl FromStr for Cron {
    type Err = Error;

    fn from_str(s: &str) -> Result<Cron> {
        Cron::parse(s)
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Cron").field(&self.text).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;
    use std::time::Duration;

    fn fixture() -> Json {
        serde_json::from_str(include_str!("../tests/fixtures/cron_cases.json"))
            .expect("tests/fixtures/cron_cases.json is JSON")
    }

    fn at_us(epoch_us: i64) -> SystemTime {
        let us = epoch_us.unsigned_abs();
        let d = Duration::from_micros(us);
        if epoch_us >= 0 {
            UNIX_EPOCH + d
        } else {
            UNIX_EPOCH - d
        }
    }

    fn epoch(t: SystemTime) -> i64 {
        i64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_secs()).unwrap()
    }

    /// Every case croniter was asked about: same verdict, same stored text, same fires.
    #[test]
    fn agrees_with_croniter_fixture() {
        let fixture = fixture();
        let starts: Vec<SystemTime> = fixture["starts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| at_us(s["epoch_us"].as_i64().unwrap()))
            .collect();
        let cases = fixture["cases"].as_array().unwrap();
        assert!(cases.len() > 90, "fixture has {} cases", cases.len());
        let mut checked_fires = 0;
        for case in cases {
            let input = case["input"].as_str().unwrap();
            let parsed = Cron::parse(input);
            match case["rust"].as_str().unwrap() {
                "ok" => {
                    let cron = parsed.unwrap_or_else(|e| panic!("{input:?} rejected: {e}"));
                    assert_eq!(
                        cron.normalized(),
                        case["normalized"].as_str().unwrap(),
                        "stored text of {input:?}"
                    );
                    for (start, run) in starts.iter().zip(case["next"].as_array().unwrap()) {
                        let expected: Vec<i64> = run["epoch"]
                            .as_array()
                            .unwrap_or_else(|| panic!("{input:?}: croniter found no fire"))
                            .iter()
                            .map(|v| v.as_i64().unwrap())
                            .collect();
                        let mut t = *start;
                        let mut got = Vec::new();
                        for _ in &expected {
                            t = cron.next_after(t);
                            got.push(epoch(t));
                        }
                        assert_eq!(
                            got, expected,
                            "fires of {input:?} from {start:?} (croniter: {})",
                            run["iso"]
                        );
                        checked_fires += got.len();
                    }
                }
                "unsupported" => {
                    let err = parsed.expect_err(input).to_string();
                    assert!(err.contains("not supported"), "{input:?}: {err}");
                }
                "never" => {
                    let err = parsed.expect_err(input).to_string();
                    assert!(err.contains("never fires"), "{input:?}: {err}");
                }
                "invalid" => {
                    assert!(
                        parsed.is_err(),
                        "{input:?} is invalid for croniter, accepted as {:?}",
                        parsed.unwrap()
                    );
                }
                other => panic!("unknown expectation {other}"),
            }
        }
        assert!(checked_fires > 1000, "{checked_fires}");
    }

    #[test]
    fn errors_name_the_field_and_the_text() {
        let cases = [
            ("61 * * * *", "cron minute field", "\"61\""),
            ("* 24 * * *", "cron hour field", "\"24\""),
            ("0 0 32 * *", "cron day-of-month field", "\"32\""),
            ("0 0 1 janu *", "cron month field", "\"janu\""),
            ("0 0 * * funday", "cron day-of-week field", "\"funday\""),
            ("* * * * * 99", "cron second field", "\"99\""),
            ("* * *", "cron expression", "3 fields"),
            ("@often", "cron expression", "unknown alias"),
            ("*/0 * * * *", "cron minute field", "step of 0"),
            ("0 0 * * 5#2", "cron day-of-week field", "not supported"),
        ];
        for (text, field, fragment) in cases {
            match Cron::parse(text) {
                Err(Error::InvalidInput { field: f, reason }) => {
                    assert_eq!(f, field, "{text:?}: {reason}");
                    assert!(reason.contains(fragment), "{text:?}: {reason}");
                    assert!(reason.contains(text), "{text:?}: {reason}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn normalize_matches_python_examples() {
        assert_eq!(Cron::normalize("@daily").unwrap(), "0 0 * * *");
        assert_eq!(Cron::normalize("0 9 * * MON").unwrap(), "0 9 * * mon");
        assert_eq!(Cron::normalize(" */5\t* * * * ").unwrap(), "*/5 * * * *");
        assert_eq!("@hourly".parse::<Cron>().unwrap().to_string(), "0 * * * *");
    }

    #[test]
    fn next_after_before_1970_and_far_ahead() {
        let cron = Cron::parse("0 0 29 2 *").unwrap();
        // From 2096-03-01 the next leap day is 2104-02-29 (2100 is not a leap year).
        let start = from_epoch_seconds(days_from_civil(2096, 3, 1) * 86_400);
        assert_eq!(
            epoch(cron.next_after(start)),
            days_from_civil(2104, 2, 29) * 86_400
        );
        let every_minute = Cron::parse("* * * * *").unwrap();
        let before = UNIX_EPOCH - Duration::from_millis(90_500);
        assert_eq!(
            every_minute.next_after(before),
            UNIX_EPOCH - Duration::from_secs(60)
        );
    }
}
