//! Object names (tables, enum, function, trigger, channel) and their validation.

use crate::error::{Error, Result};

/// Table persistence chosen at install time, as PgQueuer's `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every table is UNLOGGED: fastest, lost on a server crash.
    Volatile,
    /// The queue and schedules tables are logged; the log and statistics are UNLOGGED.
    Balanced,
    /// Every table is logged (PgQueuer's default).
    #[default]
    Durable,
}

impl Durability {
    /// Whether the queue and schedules tables, and the log and statistics tables, are
    /// logged (WAL-written) at this level.
    pub(crate) fn logged(self) -> (bool, bool) {
        match self {
            Durability::Durable => (true, true),
            Durability::Balanced => (true, false),
            Durability::Volatile => (false, false),
        }
    }

    /// Parses `volatile`, `balanced` or `durable` (case-insensitive).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `durability` for any other text.
    pub fn parse(text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "volatile" => Ok(Durability::Volatile),
            "balanced" => Ok(Durability::Balanced),
            "durable" => Ok(Durability::Durable),
            _ => Err(Error::InvalidSetting {
                setting: "durability",
                value: text.to_owned(),
                reason: "expected volatile, balanced or durable".into(),
            }),
        }
    }

    /// The level's name as PgQueuer spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Volatile => "volatile",
            Durability::Balanced => "balanced",
            Durability::Durable => "durable",
        }
    }
}

/// The names of every database object PgQueuer uses, with PgQueuer's defaults.
///
/// Python PgQueuer and this crate must use the same names to share a queue. Build one
/// with [`Settings::default`], [`Settings::with_prefix`] or [`Settings::from_env`] (which
/// reads the same `PGQUEUER_*` variables as Python), then adjust fields as needed. Names
/// are checked by [`Settings::validate`] before any SQL is built from them: each must be a
/// plain SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`), short enough that the index names
/// derived from it fit PostgreSQL's 63-byte limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The prefix that [`Settings::with_prefix`] put in front of every default name.
    /// Informational once the names are set. Defaults to "".
    pub prefix: String,
    /// The schema holding every object, or `None` for the connection's `current_schema()`.
    /// Defaults to `None`.
    pub schema: Option<String>,
    /// The queue table. Defaults to `pgqueuer`.
    pub queue_table: String,
    /// The append-only transition log. Defaults to `pgqueuer_log`.
    pub queue_table_log: String,
    /// The per-second statistics rollup. Defaults to `pgqueuer_statistics`.
    pub statistics_table: String,
    /// The cron schedules table. Defaults to `pgqueuer_schedules`.
    pub schedules_table: String,
    /// The status enum type. Defaults to `pgqueuer_status`.
    pub queue_status_type: String,
    /// The trigger function. Defaults to `fn_pgqueuer_changed`.
    pub function: String,
    /// The statement trigger on the queue table. Defaults to `tg_pgqueuer_changed`.
    pub trigger: String,
    /// The NOTIFY channel (never schema-qualified). Defaults to `ch_pgqueuer`.
    pub channel: String,
    /// Table persistence used when tables are created. Defaults to [`Durability::Durable`].
    pub durability: Durability,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::with_prefix("")
    }
}

/// The name fields, for validation and environment lookup: (setting, getter).
type NameField = (&'static str, fn(&Settings) -> &str);

const NAME_FIELDS: [NameField; 8] = [
    ("queue_table", |s| &s.queue_table),
    ("queue_table_log", |s| &s.queue_table_log),
    ("statistics_table", |s| &s.statistics_table),
    ("schedules_table", |s| &s.schedules_table),
    ("queue_status_type", |s| &s.queue_status_type),
    ("function", |s| &s.function),
    ("trigger", |s| &s.trigger),
    ("channel", |s| &s.channel),
];

/// The longest suffix appended to the queue table's name to name an index.
const LONGEST_INDEX_SUFFIX: &str = "_picked_heartbeat_idx";

impl Settings {
    /// PgQueuer's default names, each preceded by `prefix` (as `PGQUEUER_PREFIX` does).
    pub fn with_prefix(prefix: &str) -> Self {
        let p = |name: &str| format!("{prefix}{name}");
        Settings {
            prefix: prefix.to_owned(),
            schema: None,
            queue_table: p("pgqueuer"),
            queue_table_log: p("pgqueuer_log"),
            statistics_table: p("pgqueuer_statistics"),
            schedules_table: p("pgqueuer_schedules"),
            queue_status_type: p("pgqueuer_status"),
            function: p("fn_pgqueuer_changed"),
            trigger: p("tg_pgqueuer_changed"),
            channel: p("ch_pgqueuer"),
            durability: Durability::Durable,
        }
    }

    /// Sets the schema. Builder-style convenience for `settings.schema = Some(..)`.
    #[must_use]
    pub fn schema(mut self, schema: &str) -> Self {
        self.schema = Some(schema.to_owned());
        self
    }

    /// Reads the settings from the environment the way Python PgQueuer does.
    ///
    /// `PGQUEUER_PREFIX` first (prepended to every default), then `PGQUEUER_SCHEMA`
    /// (or the legacy `DB_SCHEMA`; lower-cased like Python), then one variable per name:
    /// `PGQUEUER_QUEUE_TABLE`, `PGQUEUER_QUEUE_TABLE_LOG`, `PGQUEUER_STATISTICS_TABLE`,
    /// `PGQUEUER_SCHEDULES_TABLE`, `PGQUEUER_QUEUE_STATUS_TYPE`, `PGQUEUER_FUNCTION`,
    /// `PGQUEUER_TRIGGER`, `PGQUEUER_CHANNEL` (each also under its legacy bare name such as
    /// `QUEUE_TABLE`), and `PGQUEUER_DURABILITY`.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming the first variable whose value is not acceptable.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// [`Settings::from_env`] over any variable lookup: `get("PGQUEUER_PREFIX")` and so on.
    /// Lets a program put its own values in front of the environment (as `pgq --prefix`
    /// does) while names set explicitly still win over the prefix, as in Python.
    ///
    /// # Errors
    /// As [`Settings::from_env`].
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let prefix = get("PGQUEUER_PREFIX").unwrap_or_default();
        let mut settings = Settings::with_prefix(&prefix);
        if let Some(schema) = get("PGQUEUER_SCHEMA").or_else(|| get("DB_SCHEMA")) {
            let schema = schema.trim().to_lowercase();
            settings.schema = (!schema.is_empty()).then_some(schema);
        }
        for (name, _) in NAME_FIELDS {
            let upper = name.to_ascii_uppercase();
            if let Some(value) = get(&format!("PGQUEUER_{upper}")).or_else(|| get(&upper)) {
                *settings.name_mut(name) = value;
            }
        }
        if let Some(level) = get("PGQUEUER_DURABILITY") {
            settings.durability = Durability::parse(&level)?;
        }
        settings.validate()?;
        Ok(settings)
    }

    fn name_mut(&mut self, field: &str) -> &mut String {
        match field {
            "queue_table" => &mut self.queue_table,
            "queue_table_log" => &mut self.queue_table_log,
            "statistics_table" => &mut self.statistics_table,
            "schedules_table" => &mut self.schedules_table,
            "queue_status_type" => &mut self.queue_status_type,
            "function" => &mut self.function,
            "trigger" => &mut self.trigger,
            "channel" => &mut self.channel,
            other => unreachable!("unknown name field {other}"),
        }
    }

    /// Checks every name.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming the first setting that is not a plain SQL
    /// identifier, is empty, or is so long that a derived index name would be cut off.
    pub fn validate(&self) -> Result<()> {
        check_identifier("prefix", &self.prefix, true)?;
        if let Some(schema) = &self.schema {
            check_identifier("schema", schema, false)?;
        }
        for (name, get) in NAME_FIELDS {
            check_identifier(name, get(self), false)?;
        }
        let longest = self.queue_table.len() + LONGEST_INDEX_SUFFIX.len();
        if longest > 63 {
            return Err(Error::InvalidSetting {
                setting: "queue_table",
                value: self.queue_table.clone(),
                reason: format!(
                    "too long: the index name {}{LONGEST_INDEX_SUFFIX} would exceed PostgreSQL's 63-byte limit",
                    self.queue_table
                ),
            });
        }
        Ok(())
    }

    /// `schema.name` when a schema is set, else `name`.
    pub(crate) fn qualify(&self, name: &str) -> String {
        match &self.schema {
            Some(schema) => format!("{schema}.{name}"),
            None => name.to_owned(),
        }
    }

    /// The unqualified name of the capacity-slot unique index.
    pub fn slot_index_name(&self) -> String {
        format!("{}_picked_slot_idx", self.queue_table)
    }

    /// The unqualified name of the rates table, this crate's own (PgQueuer has none): the
    /// units of every entrypoint's rate limits (`crate::RateLimit`).
    pub(crate) fn rates_table(&self) -> String {
        format!("{}_rs_rates", self.queue_table)
    }

    /// The stored limits' table (`pgq limits set`), this crate's own.
    pub(crate) fn limits_table(&self) -> String {
        format!("{}_rs_limits", self.queue_table)
    }

    /// The change log of the stored limits.
    pub(crate) fn limits_log_table(&self) -> String {
        format!("{}_rs_limits_log", self.queue_table)
    }

    /// What each running worker declares (`pgq limits`), this crate's own.
    pub(crate) fn declared_table(&self) -> String {
        format!("{}_rs_declared", self.queue_table)
    }

    /// The channel that tells running workers the stored limits changed: the queue's
    /// channel with `_rs_limits` appended (PgQueuer's listeners never see it), or, where
    /// that is longer than PostgreSQL's 63 bytes, `pgqueuer_rs_limits_` and the CRC-32 of
    /// the queue's channel (every worker and `pgq` derive the same).
    pub(crate) fn limits_channel(&self) -> String {
        let name = format!("{}_rs_limits", self.channel);
        if name.len() <= 63 {
            name
        } else {
            format!("pgqueuer_rs_limits_{:08x}", crc32(self.channel.as_bytes()))
        }
    }

    /// The key of PgQueuer's schema-upgrade advisory lock: CRC-32 of the qualified queue
    /// table name (for `pgqueuer`, 2389487409).
    pub fn upgrade_lock_key(&self) -> i64 {
        i64::from(crc32(self.qualify(&self.queue_table).as_bytes()))
    }
}

fn check_identifier(setting: &'static str, value: &str, allow_empty: bool) -> Result<()> {
    let reject = |reason: &str| {
        Err(Error::InvalidSetting {
            setting,
            value: value.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if value.is_empty() {
        return if allow_empty {
            Ok(())
        } else {
            reject("must not be empty")
        };
    }
    let mut chars = value.chars();
    let first = chars.next().unwrap_or('0');
    if !(first.is_ascii_alphabetic() || first == '_') {
        return reject("must start with a letter or underscore");
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return reject(
            "must contain only letters, digits and underscores (a plain SQL identifier)",
        );
    }
    if value.len() > 63 {
        return reject("longer than PostgreSQL's 63-byte identifier limit");
    }
    if setting != "prefix" && is_reserved(value) {
        return Err(Error::InvalidSetting {
            setting,
            value: value.to_owned(),
            reason: format!(
                "is a reserved SQL keyword, which PostgreSQL takes as a name only quoted, and \
                 PgQueuer (like this crate) writes names unquoted: choose another, such as \
                 {}_jobs",
                value.to_ascii_lowercase()
            ),
        });
    }
    Ok(())
}

/// PostgreSQL's reserved keywords (`pg_get_keywords()` categories `R` and `T`, as of
/// PostgreSQL 15), sorted: none can be a table, schema, function or channel name
/// unquoted.
const RESERVED: [&str; 100] = [
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

/// Whether `name` is one of [`RESERVED`], in any case.
pub(crate) fn is_reserved(name: &str) -> bool {
    RESERVED
        .binary_search(&name.to_ascii_lowercase().as_str())
        .is_ok()
}

/// CRC-32 (IEEE 802.3, as zlib.crc32), bitwise; only used for a short name.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn reserved_words_are_refused_as_names_in_any_case_but_not_as_a_prefix() {
        assert!(
            RESERVED.windows(2).all(|w| w[0] < w[1]),
            "sorted for the search"
        );
        for (key, value) in [
            ("PGQUEUER_QUEUE_TABLE", "order"),
            ("PGQUEUER_QUEUE_TABLE", "Select"),
            ("PGQUEUER_SCHEMA", "user"),
            ("PGQUEUER_CHANNEL", "table"),
        ] {
            let e = Settings::from_lookup(env(&[(key, value)]))
                .and_then(|s| s.validate().map(|()| s))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("reserved SQL keyword") && e.contains(value),
                "{key}={value}: {e}"
            );
        }
        assert!(!is_reserved("orders") && !is_reserved("pgqueuer") && !is_reserved("users"));
        let prefixed = Settings::from_lookup(env(&[("PGQUEUER_PREFIX", "order")])).unwrap();
        prefixed.validate().unwrap();
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_match_pgqueuer() {
        let s = Settings::default();
        assert_eq!(s.queue_table, "pgqueuer");
        assert_eq!(s.queue_table_log, "pgqueuer_log");
        assert_eq!(s.statistics_table, "pgqueuer_statistics");
        assert_eq!(s.schedules_table, "pgqueuer_schedules");
        assert_eq!(s.queue_status_type, "pgqueuer_status");
        assert_eq!(s.function, "fn_pgqueuer_changed");
        assert_eq!(s.trigger, "tg_pgqueuer_changed");
        assert_eq!(s.channel, "ch_pgqueuer");
        assert_eq!(s.durability, Durability::Durable);
        assert_eq!(s.slot_index_name(), "pgqueuer_picked_slot_idx");
    }

    #[test]
    fn lock_key_is_pgqueuers() {
        assert_eq!(Settings::default().upgrade_lock_key(), 2_389_487_409);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn prefix_and_schema_from_env() {
        let s = Settings::from_lookup(env(&[
            ("PGQUEUER_PREFIX", "app_"),
            ("PGQUEUER_SCHEMA", "MyQ"),
        ]))
        .unwrap();
        assert_eq!(s.queue_table, "app_pgqueuer");
        assert_eq!(s.channel, "app_ch_pgqueuer");
        assert_eq!(s.schema.as_deref(), Some("myq"));
        assert_eq!(s.qualify(&s.queue_table), "myq.app_pgqueuer");
    }

    #[test]
    fn explicit_names_and_legacy_variables_win_over_the_prefix() {
        let s = Settings::from_lookup(env(&[
            ("PGQUEUER_PREFIX", "app_"),
            ("PGQUEUER_QUEUE_TABLE", "jobs"),
            ("CHANNEL", "wake"),
            ("PGQUEUER_DURABILITY", "balanced"),
        ]))
        .unwrap();
        assert_eq!(s.queue_table, "jobs");
        assert_eq!(s.queue_table_log, "app_pgqueuer_log");
        assert_eq!(s.channel, "wake");
        assert_eq!(s.durability, Durability::Balanced);
    }

    #[test]
    fn injection_is_rejected_naming_the_setting() {
        let err =
            Settings::from_lookup(env(&[("PGQUEUER_QUEUE_TABLE", "x; drop table y")])).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("queue_table"), "{text}");
        assert!(text.contains("x; drop table y"), "{text}");
        let s = Settings {
            schema: Some("a.b".into()),
            ..Settings::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("schema"));
        let err = Settings::from_lookup(env(&[("PGQUEUER_PREFIX", "1x")])).unwrap_err();
        assert!(err.to_string().contains("prefix"));
    }

    #[test]
    fn bad_durability_and_long_names_are_rejected() {
        let err = Settings::from_lookup(env(&[("PGQUEUER_DURABILITY", "forever")])).unwrap_err();
        assert!(err.to_string().contains("durability"));
        let mut s = Settings {
            queue_table: "q".repeat(50),
            ..Settings::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("63-byte"));
        s.queue_table = String::new();
        assert!(s.validate().unwrap_err().to_string().contains("empty"));
    }

    #[test]
    fn the_limits_channel_fits_postgres_names() {
        let mut s = Settings::default();
        assert_eq!(s.limits_channel(), "ch_pgqueuer_rs_limits");
        s.channel = "c".repeat(63);
        let long = s.limits_channel();
        assert!(
            long.len() <= 63 && long.starts_with("pgqueuer_rs_limits_"),
            "{long}"
        );
        s.channel = "d".repeat(63);
        assert_ne!(s.limits_channel(), long, "another channel, another name");
    }
}
