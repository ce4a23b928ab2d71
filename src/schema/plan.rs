//! The upgrade plan: the statements one database still needs to reach PgQueuer 1.6.0's
//! catalog, computed from its catalog without changing anything (`pgq upgrade --plan`).
//!
//! [`super::upgrade_with`] runs the idempotent migration script, whose every step checks
//! the catalog itself; this module instead compares the database's catalog facts
//! ([`super::describe_schema`]) with those of a fresh 1.6.0 install
//! (`src/sql/catalog_1_6_0.txt`) and writes one statement per difference, in the order
//! the script would make the change, as PgQueuer's own planner does. The tests hold the
//! two to each other: from every fixture, applying the plan ends in the catalog the
//! script ends in, and a plan made after either is empty.

use std::collections::BTreeMap;

use postgres::Client;
use postgres::types::Type;

use crate::connect::query_one_alone;
use crate::error::Result;
use crate::settings::Settings;
use crate::sql;

/// What [`upgrade_plan`](crate::upgrade_plan) found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpgradePlan {
    /// The statements to run, in order, each on its own (an enum label added by one must
    /// be committed before a later one uses it). Empty when the schema is up to date.
    pub statements: Vec<String>,
    /// Differences no statement fixes, as PgQueuer leaves them too (a table's durability,
    /// a retired column kept with its data, a column type with no safe conversion).
    pub notes: Vec<String>,
}

impl UpgradePlan {
    /// True when nothing needs to run.
    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }
}

/// Catalog facts by object: `("column", "pgqueuer.slot")` to its line.
struct Facts(BTreeMap<(String, String), String>);

impl Facts {
    fn new(lines: &[String]) -> Facts {
        Facts(lines.iter().map(|l| (key_of(l), l.clone())).collect())
    }

    fn get(&self, kind: &str, name: &str) -> Option<&str> {
        self.0
            .get(&(kind.to_owned(), name.to_owned()))
            .map(String::as_str)
    }

    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.0
            .iter()
            .filter(move |((k, _), _)| k == kind)
            .map(|((_, name), line)| (name.as_str(), line.as_str()))
    }
}

/// The object a fact line is about: its kind and name.
fn key_of(line: &str) -> (String, String) {
    let words: Vec<&str> = line.split(' ').collect();
    let kind = words[0].to_owned();
    let name = match kind.as_str() {
        // index CREATE [UNIQUE] INDEX name ON ...
        "index" => words
            .iter()
            .position(|w| *w == "INDEX")
            .and_then(|i| words.get(i + 1))
            .copied()
            .unwrap_or_default()
            .to_owned(),
        // trigger CREATE TRIGGER name ...
        "trigger" => words.get(3).copied().unwrap_or_default().to_owned(),
        // constraint table name definition
        "constraint" => format!(
            "{} {}",
            words.get(1).copied().unwrap_or_default(),
            words.get(2).copied().unwrap_or_default()
        ),
        _ => words.get(1).copied().unwrap_or_default().to_owned(),
    };
    (kind, name)
}

/// A column fact's parts: `(type, not_null, default)`.
fn column_parts(line: &str) -> (String, bool, Option<String>) {
    // column t.c TYPE (null|not null)[ default EXPR][ identity=X]
    let rest = line.splitn(3, ' ').nth(2).unwrap_or_default();
    let rest = rest.split(" identity=").next().unwrap_or(rest);
    let (before, default) = match rest.split_once(" default ") {
        Some((before, default)) => (before, Some(default.to_owned())),
        None => (rest, None),
    };
    if let Some(ty) = before.strip_suffix(" not null") {
        (ty.to_owned(), true, default)
    } else {
        let ty = before.strip_suffix(" null").unwrap_or(before);
        (ty.to_owned(), false, default)
    }
}

/// Builds the plan. See [`crate::upgrade_plan`].
pub(crate) fn plan(client: &mut Client, settings: &Settings) -> Result<UpgradePlan> {
    settings.validate()?;
    let schema: String = match &settings.schema {
        Some(schema) => schema.clone(),
        None => query_one_alone(client, sql::CURRENT_SCHEMA, &[])?.get(0),
    };
    let mut out = UpgradePlan::default();
    if settings.schema.is_some() {
        let lower = schema.to_ascii_lowercase();
        let exists =
            query_one_alone(client, sql::SCHEMA_EXISTS, &[(&lower, Type::TEXT)])?.get::<_, bool>(0);
        if !exists {
            out.statements.push(sql::schema_create(&schema));
        }
    }
    let have = Facts::new(&super::describe_schema(client, settings)?);
    let want = Facts::new(&sql::catalog_1_6_0(settings, &schema));
    Planner {
        settings,
        have,
        want,
        created: Vec::new(),
        out,
    }
    .run()
}

struct Planner<'a> {
    settings: &'a Settings,
    have: Facts,
    want: Facts,
    /// Tables the plan creates whole (their columns, keys and sequences come with them).
    created: Vec<String>,
    out: UpgradePlan,
}

impl Planner<'_> {
    fn run(mut self) -> Result<UpgradePlan> {
        let s = self.settings;
        let steps = super::upgrade_sql(s)?;
        let statements: Vec<Vec<String>> = steps.iter().map(|step| split(step)).collect();
        // The script's steps, by name, to borrow their statements.
        let step = |prefix: &str| -> &[String] {
            let skip = usize::from(s.schema.is_some());
            super::MIGRATIONS
                .iter()
                .position(|(name, _)| name.starts_with(prefix))
                .map_or(&[][..], |i| &statements[i + skip][..])
        };
        self.enum_labels();
        let tables = [
            (&s.queue_table, "002"),
            (&s.queue_table_log, "003"),
            (&s.statistics_table, "004"),
            (&s.schedules_table, "005"),
        ];
        for (table, migration) in tables {
            let table = table.to_ascii_lowercase();
            if self.have.get("table", &table).is_none() {
                let create = step(migration)
                    .iter()
                    .find(|st| st.contains("TABLE IF NOT EXISTS"))
                    .cloned()
                    .unwrap_or_default();
                self.out.statements.push(create);
                self.created.push(table);
            } else {
                self.columns(&table);
            }
        }
        for (table, _) in tables {
            let table = table.to_ascii_lowercase();
            if !self.created.contains(&table) {
                self.sequences(&table);
                self.constraints(&table);
            }
            self.persistence(&table);
        }
        self.retired_column();
        self.indexes();
        let routines = step("008");
        if self.have.get("function", &s.function.to_ascii_lowercase())
            != self.want.get("function", &s.function.to_ascii_lowercase())
        {
            self.out.statements.extend(routines.first().cloned());
        }
        if self.have.get("trigger", &s.trigger.to_ascii_lowercase())
            != self.want.get("trigger", &s.trigger.to_ascii_lowercase())
        {
            self.out.statements.extend(routines.get(1).cloned());
        }
        let retired_type = format!("{}_status", s.statistics_table).to_ascii_lowercase();
        if self.have.get("enum", &retired_type).is_some() {
            self.out
                .statements
                .push(sql::schema::type_drop(&s.qualify(&retired_type)));
        }
        Ok(self.out)
    }

    fn enum_labels(&mut self) {
        let s = self.settings;
        let name = s.queue_status_type.to_ascii_lowercase();
        let wanted: Vec<&str> = self
            .want
            .get("enum", &name)
            .and_then(|l| l.split(' ').nth(2))
            .map(|labels| labels.split(',').collect())
            .unwrap_or_default();
        let type_name = s.qualify(&s.queue_status_type);
        match self.have.get("enum", &name) {
            None => {
                self.out
                    .statements
                    .push(sql::schema::enum_create(&type_name, &wanted));
            }
            Some(line) => {
                let present: Vec<&str> = line
                    .split(' ')
                    .nth(2)
                    .map(|labels| labels.split(',').collect())
                    .unwrap_or_default();
                for label in wanted.iter().filter(|l| !present.contains(l)) {
                    self.out
                        .statements
                        .push(sql::schema::enum_add_label(&type_name, label));
                }
            }
        }
    }

    fn columns(&mut self, table: &str) {
        let s = self.settings;
        let qualified = s.qualify(table);
        let status_type = s.qualify(&s.queue_status_type);
        let prefix = format!("{table}.");
        let wanted: Vec<(String, String)> = self
            .want
            .of_kind("column")
            .filter(|(name, _)| name.starts_with(&prefix))
            .map(|(name, line)| (name.to_owned(), line.to_owned()))
            .collect();
        for (name, line) in wanted {
            let column = &name[prefix.len()..];
            let (ty, not_null, default) = column_parts(&line);
            let Some(present) = self.have.get("column", &name) else {
                if column == "id" {
                    self.out.notes.push(format!(
                        "{qualified} has no id column; it is not added (PgQueuer adds no \
                         serial or identity column either)"
                    ));
                    continue;
                }
                self.out.statements.push(sql::schema::column_add(
                    &qualified,
                    column,
                    &ty,
                    not_null,
                    default.as_deref(),
                ));
                continue;
            };
            let (have_ty, have_not_null, have_default) = column_parts(present);
            if have_ty != ty {
                if column == "id" && have_ty == "integer" && ty == "bigint" {
                    self.out
                        .statements
                        .push(sql::schema::column_widen_id(&qualified));
                } else if column == "status" {
                    self.out
                        .statements
                        .push(sql::schema::column_retype_status(&qualified, &status_type));
                } else {
                    self.out.notes.push(format!(
                        "{qualified}.{column} is {have_ty} in the database but {ty} in \
                         PgQueuer 1.6.0; no conversion is attempted"
                    ));
                }
            }
            if have_not_null != not_null {
                self.out
                    .statements
                    .push(sql::schema::column_not_null(&qualified, column, not_null));
            }
            if have_default != default && column != "id" {
                self.out.statements.push(sql::schema::column_default(
                    &qualified,
                    column,
                    default.as_deref(),
                ));
            }
        }
    }

    /// Widens a serial table's id sequence from integer, as the script's step 006 does.
    fn sequences(&mut self, table: &str) {
        let sequence = format!("{table}_id_seq");
        let Some(present) = self.have.get("sequence", &sequence) else {
            return;
        };
        if present.split(' ').nth(2) == Some("integer") {
            let qualified = self.settings.qualify(table);
            self.out
                .statements
                .push(sql::schema::sequence_widen(&qualified));
        }
    }

    fn constraints(&mut self, table: &str) {
        let qualified = self.settings.qualify(table);
        let prefix = format!("{table} ");
        let wanted: Vec<(String, String)> = self
            .want
            .of_kind("constraint")
            .filter(|(name, _)| name.starts_with(&prefix))
            .map(|(name, line)| (name.to_owned(), line.to_owned()))
            .collect();
        for (name, line) in wanted {
            if self.have.get("constraint", &name).is_some() {
                continue;
            }
            let definition = line.splitn(4, ' ').nth(3).unwrap_or_default();
            if definition.starts_with("UNIQUE") {
                self.out
                    .statements
                    .push(sql::schema::constraint_add(&qualified, definition));
            } else {
                self.out.notes.push(format!(
                    "{qualified} lacks its {definition}; it is not added"
                ));
            }
        }
    }

    fn persistence(&mut self, table: &str) {
        let (Some(have), Some(want)) =
            (self.have.get("table", table), self.want.get("table", table))
        else {
            return;
        };
        if have != want {
            self.out.notes.push(format!(
                "{table} is {} but the configured durability ({}) makes it {}; \
                 'pgq durability' changes it",
                logged_word(have),
                self.settings.durability.as_str(),
                logged_word(want)
            ));
        }
    }

    /// PgQueuer keeps the retired `time_in_queue` statistics column, relaxed to NULL.
    fn retired_column(&mut self) {
        let s = self.settings;
        let name = format!("{}.time_in_queue", s.statistics_table.to_ascii_lowercase());
        if let Some(line) = self.have.get("column", &name) {
            if column_parts(line).1 {
                self.out.statements.push(sql::schema::column_not_null(
                    &s.qualify(&s.statistics_table),
                    "time_in_queue",
                    false,
                ));
            }
            self.out.notes.push(format!(
                "{name} is retired; it is kept with its data (drop it by hand when no \
                 reader needs it)"
            ));
        }
        let retired = format!("{}_heartbeat_id_id1_idx", s.queue_table).to_ascii_lowercase();
        if self.have.get("index", &retired).is_some() {
            self.out
                .statements
                .push(sql::schema::index_drop(&s.qualify(&retired)));
        }
    }

    fn indexes(&mut self) {
        let s = self.settings;
        let statistics_index = format!("{}_unique_count", s.statistics_table).to_ascii_lowercase();
        let wanted: Vec<(String, String)> = self
            .want
            .of_kind("index")
            .map(|(name, line)| (name.to_owned(), line.to_owned()))
            .collect();
        for (name, line) in wanted {
            let have = self.have.get("index", &name);
            if have == Some(line.as_str()) {
                continue;
            }
            let table = line
                .split(" ON ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .map(|t| t.rsplit('.').next().unwrap_or(t).to_owned())
                .unwrap_or_default();
            // A key's index comes and goes with its table or its constraint.
            if self
                .want
                .get("constraint", &format!("{table} {name}"))
                .is_some()
            {
                continue;
            }
            if have.is_some() {
                self.out
                    .statements
                    .push(sql::schema::index_drop(&s.qualify(&name)));
            }
            if name == statistics_index && !self.created.contains(&table) {
                self.out.statements.push(sql::statistics_fold(s));
            }
            // The definition as pg_get_indexdef wrote it, on the table as the settings
            // name it (`ON pgqueuer`, not `ON public.pgqueuer`).
            let definition = line.trim_start_matches("index ");
            self.out
                .statements
                .push(sql::schema::index_create_on(definition, &s.qualify(&table)));
        }
    }
}

fn logged_word(table_fact: &str) -> &'static str {
    if table_fact.ends_with("persistence=u") {
        "UNLOGGED"
    } else {
        "LOGGED"
    }
}

/// Splits a script into its statements at top-level semicolons (outside quotes, dollar
/// quotes and comments), dropping comment-only pieces.
fn split(script: &str) -> Vec<String> {
    let bytes = script.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    let mut has_code = false;
    while i < bytes.len() {
        match bytes[i] {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'\'' => {
                has_code = true;
                i += 1;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
            }
            b'$' => {
                has_code = true;
                let tag_end = script[i + 1..].find('$').map(|e| i + 1 + e);
                if let Some(end) = tag_end.filter(|&e| {
                    script[i + 1..e]
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                }) {
                    let tag = &script[i..=end];
                    match script[end + 1..].find(tag) {
                        Some(close) => i = end + 1 + close + tag.len() - 1,
                        None => i = bytes.len(),
                    }
                }
            }
            b';' => {
                if has_code {
                    out.push(strip_comments(&script[start..i]));
                }
                start = i + 1;
                has_code = false;
            }
            b if !b.is_ascii_whitespace() => has_code = true,
            _ => {}
        }
        i += 1;
    }
    if has_code {
        out.push(strip_comments(&script[start..]));
    }
    out
}

/// A statement without its leading comment lines and surrounding blank space.
fn strip_comments(statement: &str) -> String {
    statement
        .lines()
        .skip_while(|l| l.trim().is_empty() || l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_keyed_by_object() {
        assert_eq!(
            key_of("column pgqueuer.slot bigint null"),
            ("column".into(), "pgqueuer.slot".into())
        );
        assert_eq!(
            key_of("index CREATE UNIQUE INDEX pgqueuer_pkey ON public.pgqueuer USING btree (id)"),
            ("index".into(), "pgqueuer_pkey".into())
        );
        assert_eq!(
            key_of("trigger CREATE TRIGGER tg AFTER INSERT ON public.pgqueuer"),
            ("trigger".into(), "tg".into())
        );
        assert_eq!(
            key_of("constraint pgqueuer pgqueuer_pkey PRIMARY KEY (id)"),
            ("constraint".into(), "pgqueuer pgqueuer_pkey".into())
        );
    }

    #[test]
    fn column_facts_split_into_type_nullness_and_default() {
        assert_eq!(
            column_parts("column t.a integer not null default 0"),
            ("integer".into(), true, Some("0".into()))
        );
        assert_eq!(
            column_parts("column t.b timestamp with time zone null"),
            ("timestamp with time zone".into(), false, None)
        );
        assert_eq!(
            column_parts("column t.id bigint not null identity=d"),
            ("bigint".into(), true, None)
        );
    }

    #[test]
    fn scripts_split_at_top_level_semicolons() {
        let script = "-- a comment; not a statement\nCREATE TABLE t (a text DEFAULT ';');\n\
                      DO $x$ BEGIN PERFORM 1; END $x$;\n-- trailing\nSELECT 2";
        assert_eq!(
            split(script),
            [
                "CREATE TABLE t (a text DEFAULT ';')",
                "DO $x$ BEGIN PERFORM 1; END $x$",
                "SELECT 2"
            ]
        );
    }

    #[test]
    fn the_target_catalog_renders_for_every_name() {
        let default = sql::catalog_1_6_0(&Settings::default(), "public");
        assert!(default.iter().all(|l| !l.contains("{{")));
        assert!(default.contains(&"table pgqueuer persistence=p".to_owned()));
        let named = sql::catalog_1_6_0(&Settings::with_prefix("app_").schema("myq"), "myq");
        assert!(
            named.contains(
                &"column app_pgqueuer.status myq.app_pgqueuer_status not null".to_owned()
            )
        );
    }
}
