//! Argument parsing: a command's flags and positionals, and the value parsers.

use std::time::Duration;

use pgqueuer::Durability;

use crate::{Failure, usage};

/// One option of a command.
pub(crate) struct Flag {
    long: &'static str,
    short: Option<&'static str>,
    /// Whether it takes a value (`--limit 5`) or is a switch (`--json`).
    takes_value: bool,
}

pub(crate) const fn switch(long: &'static str) -> Flag {
    Flag {
        long,
        short: None,
        takes_value: false,
    }
}

pub(crate) const fn valued(long: &'static str, short: Option<&'static str>) -> Flag {
    Flag {
        long,
        short,
        takes_value: true,
    }
}

/// A command's arguments, parsed against its flags.
pub(crate) struct Args {
    command: String,
    values: Vec<(&'static str, String)>,
    pub(crate) switches: Vec<&'static str>,
    pub(crate) positionals: Vec<String>,
}

impl Args {
    pub(crate) fn parse(command: &str, flags: &[Flag], argv: Vec<String>) -> Result<Args, Failure> {
        let mut args = Args {
            command: command.to_owned(),
            values: Vec::new(),
            switches: Vec::new(),
            positionals: Vec::new(),
        };
        let mut it = argv.into_iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                args.positionals.extend(it.by_ref());
                break;
            }
            if !arg.starts_with('-') || arg == "-" {
                args.positionals.push(arg);
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
                _ => (arg.as_str(), None),
            };
            let Some(flag) = flags
                .iter()
                .find(|f| f.long == name || f.short == Some(name))
            else {
                return Err(usage(
                    command,
                    format!("unknown option {name} for 'pgq {command}'"),
                ));
            };
            if flag.takes_value {
                let value = match inline {
                    Some(value) => value,
                    None => it
                        .next()
                        .ok_or_else(|| usage(command, format!("{name} needs a value")))?,
                };
                args.values.push((flag.long, value));
            } else if inline.is_some() {
                return Err(usage(command, format!("{name} takes no value")));
            } else {
                args.switches.push(flag.long);
            }
        }
        Ok(args)
    }

    /// The last value given for `long`.
    pub(crate) fn value(&self, long: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(name, _)| *name == long)
            .map(|(_, v)| v.as_str())
    }

    /// Every value given for `long`, in order (for repeatable options).
    pub(crate) fn values(&self, long: &str) -> Vec<&str> {
        self.values
            .iter()
            .filter(|(name, _)| *name == long)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub(crate) fn switch(&self, long: &str) -> bool {
        self.switches.contains(&long)
    }

    /// Parses the value of `long` with `parse`, naming the flag in a usage error.
    pub(crate) fn parsed<T>(
        &self,
        long: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, Failure> {
        self.value(long)
            .map(|v| parse(v).map_err(|why| self.bad(&format!("{long} {v:?}: {why}"))))
            .transpose()
    }

    pub(crate) fn bad(&self, message: &str) -> Failure {
        usage(&self.command, message)
    }

    /// Exactly `min..=max` positional arguments, named `what` in the error.
    pub(crate) fn positionals(
        &self,
        min: usize,
        max: usize,
        what: &str,
    ) -> Result<&[String], Failure> {
        let n = self.positionals.len();
        if n < min {
            return Err(self.bad(&format!("missing {what}")));
        }
        if n > max {
            return Err(self.bad(&format!("unexpected argument {:?}", self.positionals[max])));
        }
        Ok(&self.positionals)
    }

    pub(crate) fn none(&self) -> Result<(), Failure> {
        self.positionals(0, 0, "").map(|_| ())
    }

    /// Positional job ids, at least one.
    pub(crate) fn ids(&self) -> Result<Vec<i64>, Failure> {
        let ids = self.positionals(1, usize::MAX, "job ids")?;
        ids.iter()
            .map(|id| {
                id.parse::<i64>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| self.bad(&format!("{id:?} is not a job id")))
            })
            .collect()
    }
}

pub(crate) fn parse_count(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| "expected a whole number, 0 or more".to_owned())
}

pub(crate) fn parse_positive(text: &str) -> Result<u64, String> {
    match parse_count(text)? {
        0 => Err("expected a whole number, 1 or more".into()),
        n => Ok(n),
    }
}

pub(crate) fn parse_priority(text: &str) -> Result<i32, String> {
    text.trim()
        .parse::<i32>()
        .map_err(|_| format!("expected a whole number from {} to {}", i32::MIN, i32::MAX))
}

/// Seconds as a decimal number, 0 or more.
pub(crate) fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_owned())?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err("expected a number of seconds, 0 or more".into());
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| "too long".into())
}

/// A span such as `7d`, `12h`, `30m`, `90s`, `1h30m` or `1.5h`: numbers, each with a
/// unit (`w`, `d`, `h`, `m`, `s`). A bare number is refused, as its unit would be a
/// guess.
pub(crate) fn parse_span(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty".into());
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or("each number needs a unit: w, d, h, m or s (e.g. 7d, 12h, 90s)")?;
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{:?} is not a number", &rest[..digits]))?;
        let unit_len = rest[digits..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len() - digits);
        let unit = &rest[digits..digits + unit_len];
        let seconds = match unit {
            "w" => 604_800.0,
            "d" => 86_400.0,
            "h" => 3_600.0,
            "m" | "min" => 60.0,
            "s" => 1.0,
            other => return Err(format!("unknown unit {other:?}; use w, d, h, m or s")),
        };
        total += number * seconds;
        rest = &rest[digits + unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| "too long".into())
}

/// `1d2h3m4s`-style text of a span (whole seconds), for messages.
pub(crate) fn format_span(d: Duration) -> String {
    let mut s = d.as_secs();
    if s == 0 {
        return format!("{}ms", d.as_millis());
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if s >= size {
            out.push_str(&format!("{}{unit}", s / size));
            s %= size;
        }
    }
    out
}

pub(crate) fn durability_arg(args: &Args) -> Result<Durability, Failure> {
    let level = args.positionals(1, 1, "LEVEL (volatile, balanced or durable)")?;
    Durability::parse(&level[0]).map_err(|e| args.bad(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn spans_need_units() {
        assert_eq!(parse_span("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse_span("12h").unwrap(), Duration::from_secs(12 * 3_600));
        assert_eq!(parse_span("30m").unwrap(), Duration::from_secs(1_800));
        assert_eq!(parse_span("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_span("1h30m").unwrap(), Duration::from_secs(5_400));
        assert_eq!(parse_span("1.5h").unwrap(), Duration::from_secs(5_400));
        assert!(parse_span("7").unwrap_err().contains("unit"));
        assert!(parse_span("7y").unwrap_err().contains("unknown unit"));
        assert!(parse_span("").is_err());
        assert!(parse_span("d").is_err());
        assert_eq!(format_span(Duration::from_secs(93_784)), "1d2h3m4s");
    }

    #[test]
    fn seconds_must_be_finite_and_not_negative() {
        assert_eq!(parse_seconds("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("inf").is_err());
        assert!(parse_seconds("NaN").is_err());
        assert!(parse_seconds("soon").is_err());
    }

    #[test]
    fn flags_take_values_inline_or_next_and_dashes_end_them() {
        let flags = [valued("--limit", Some("-n")), switch("--json")];
        let args = Args::parse(
            "failed",
            &flags,
            strings(&["-n", "3", "--json", "--limit=4", "--", "--json"]),
        )
        .unwrap();
        assert_eq!(args.value("--limit"), Some("4"));
        assert!(args.switch("--json"));
        assert_eq!(args.positionals, ["--json"]);
        assert!(matches!(
            Args::parse("failed", &flags, strings(&["--nope"])),
            Err(Failure::Usage { .. })
        ));
        assert!(matches!(
            Args::parse("failed", &flags, strings(&["--limit"])),
            Err(Failure::Usage { .. })
        ));
        assert!(matches!(
            Args::parse("failed", &flags, strings(&["--json=1"])),
            Err(Failure::Usage { .. })
        ));
    }
}
