//! The statements of an upgrade plan (`schema/plan.rs`) that the migrations do not hold
//! as such: each brings one object of an older or drifted install to PgQueuer 1.6.0's
//! definition. Names come qualified (or bare) from validated settings; types, defaults
//! and definitions from the catalog facts of a 1.6.0 install.

/// `DROP TYPE IF EXISTS` a (qualified) type.
pub(crate) fn type_drop(name: &str) -> String {
    format!("DROP TYPE IF EXISTS {name}")
}

/// `CREATE TYPE ... AS ENUM` with `labels`, in order.
pub(crate) fn enum_create(name: &str, labels: &[&str]) -> String {
    let labels: Vec<String> = labels.iter().map(|l| format!("'{l}'")).collect();
    format!("CREATE TYPE {name} AS ENUM ({})", labels.join(", "))
}

/// Adds `label` to the enum `name` (it must be committed before a statement uses it).
pub(crate) fn enum_add_label(name: &str, label: &str) -> String {
    format!("ALTER TYPE {name} ADD VALUE IF NOT EXISTS '{label}'")
}

/// Adds `column` of type `ty` to `table`, with its NOT NULL and default.
pub(crate) fn column_add(
    table: &str,
    column: &str,
    ty: &str,
    not_null: bool,
    default: Option<&str>,
) -> String {
    let mut add = format!("ALTER TABLE {table} ADD COLUMN {column} {ty}");
    if not_null {
        add.push_str(" NOT NULL");
    }
    if let Some(default) = default {
        add.push_str(&format!(" DEFAULT {default}"));
    }
    add
}

/// Widens `table`'s integer id to bigint.
pub(crate) fn column_widen_id(table: &str) -> String {
    format!("ALTER TABLE {table} ALTER COLUMN id TYPE bigint")
}

/// Moves `table`'s status column to the enum `status_type`, by label.
pub(crate) fn column_retype_status(table: &str, status_type: &str) -> String {
    format!(
        "ALTER TABLE {table} ALTER COLUMN status TYPE {status_type} \
         USING status::TEXT::{status_type}"
    )
}

/// Sets or drops NOT NULL on `column` of `table`.
pub(crate) fn column_not_null(table: &str, column: &str, not_null: bool) -> String {
    let change = if not_null { "SET" } else { "DROP" };
    format!("ALTER TABLE {table} ALTER COLUMN {column} {change} NOT NULL")
}

/// Sets (or, with `None`, drops) the default of `column` of `table`.
pub(crate) fn column_default(table: &str, column: &str, default: Option<&str>) -> String {
    match default {
        Some(d) => format!("ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT {d}"),
        None => format!("ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT"),
    }
}

/// Widens the id sequence of the serial `table` (qualified) to bigint, as the script's
/// step 006 does.
pub(crate) fn sequence_widen(table: &str) -> String {
    format!(
        "DO $pgq$
DECLARE
    seq text := pg_get_serial_sequence('{table}', 'id');
BEGIN
    IF seq IS NOT NULL THEN
        EXECUTE format('ALTER SEQUENCE %s AS BIGINT', seq);
    END IF;
END
$pgq$"
    )
}

/// Adds a constraint (`UNIQUE (...)`, as `pg_get_constraintdef` writes it) to `table`.
pub(crate) fn constraint_add(table: &str, definition: &str) -> String {
    format!("ALTER TABLE {table} ADD {definition}")
}

/// `DROP INDEX IF EXISTS` a (qualified) index.
pub(crate) fn index_drop(name: &str) -> String {
    format!("DROP INDEX IF EXISTS {name}")
}

/// An index definition as `pg_get_indexdef` wrote it (`CREATE INDEX x ON public.t USING
/// ...`), made on `table` as the settings name it (`ON t`, not `ON public.t`).
pub(crate) fn index_create_on(definition: &str, table: &str) -> String {
    match definition.split_once(" ON ") {
        Some((head, rest)) => {
            let tail = rest.split_once(' ').map_or("", |(_, tail)| tail);
            format!("{head} ON {table} {tail}")
        }
        None => definition.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_read_as_postgres_writes_them() {
        assert_eq!(
            enum_create("s.st", &["queued", "picked"]),
            "CREATE TYPE s.st AS ENUM ('queued', 'picked')"
        );
        assert_eq!(
            column_add("t", "slot", "bigint", true, Some("0")),
            "ALTER TABLE t ADD COLUMN slot bigint NOT NULL DEFAULT 0"
        );
        assert_eq!(
            column_not_null("t", "c", false),
            "ALTER TABLE t ALTER COLUMN c DROP NOT NULL"
        );
        assert_eq!(
            index_create_on("CREATE INDEX i ON public.t USING btree (a)", "myq.t"),
            "CREATE INDEX i ON myq.t USING btree (a)"
        );
    }
}
