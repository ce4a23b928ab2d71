//! Schema and maintenance commands: install, upgrade, verify, uninstall, sql,
//! durability, autovac, prune-log.

use std::time::Duration;

use pgqueuer::ops::{self, Autovacuum};
use pgqueuer::{Durability, Error, Settings};

use crate::args::{AutovacArgs, Expect, SqlCommand, format_span};
use crate::{Context, Outcome, fail, with_durability};

pub(crate) fn install(ctx: &Context, durability: Option<Durability>) -> Outcome {
    let settings = with_durability(&ctx.settings, durability);
    let mut conn = ctx.connect()?;
    let present = pgqueuer::describe_schema(&mut conn, &settings)?;
    let table = format!("table {} ", settings.queue_table);
    if present.iter().any(|l| l.starts_with(&table)) {
        return Err(fail(format!(
            "PgQueuer is already installed in {} ({} exists); run 'pgq upgrade' to bring it \
             up to date",
            conn.target(),
            settings.queue_table
        )));
    }
    let report = pgqueuer::upgrade_with(&mut conn, &settings)?;
    println!(
        "Installed PgQueuer schema (durability={}, {} objects).",
        settings.durability.as_str(),
        report.changes.len()
    );
    Ok(())
}

/// The whole upgrade script, one step per paragraph, with a header line.
fn upgrade_script(settings: &Settings) -> Result<String, Error> {
    let mut out = format!(
        "-- pgqueuer-rs {}: idempotent steps converging to PgQueuer 1.6.0; run each as its own transaction\n",
        env!("CARGO_PKG_VERSION")
    );
    for step in pgqueuer::upgrade_sql(settings)? {
        out.push_str(step.trim_end());
        out.push_str("\n\n");
    }
    Ok(out)
}

pub(crate) fn upgrade(ctx: &Context, plan: bool) -> Outcome {
    let mut conn = ctx.connect()?;
    if plan {
        let plan = pgqueuer::upgrade_plan(&mut conn, &ctx.settings)?;
        for note in &plan.notes {
            eprintln!("pgq: note: {note}");
        }
        let statements = plan.statements;
        if statements.is_empty() {
            println!(
                "-- PgQueuer schema in {} is up to date: nothing to apply.",
                conn.target()
            );
            return Ok(());
        }
        println!(
            "-- pgqueuer-rs {}: the {} statements {} needs to match PgQueuer 1.6.0.\n\
             -- Computed from this database's catalog; for a script that suits any\n\
             -- installation, use 'pgq sql upgrade'. Run each as its own transaction.\n",
            env!("CARGO_PKG_VERSION"),
            statements.len(),
            conn.target()
        );
        for statement in statements {
            println!("{};\n", statement.trim_end().trim_end_matches(';'));
        }
        return Ok(());
    }
    let report = pgqueuer::upgrade_with(&mut conn, &ctx.settings)?;
    if report.is_noop() {
        println!("PgQueuer schema is already up to date.");
    } else {
        for change in &report.changes {
            println!("{change}");
        }
        println!("Upgraded: {} catalog changes.", report.changes.len());
    }
    if !report.statement_functions.is_empty() {
        println!(
            "Created {} statement functions (for connections through a transaction pooler).",
            report.statement_functions.len()
        );
    }
    Ok(())
}

pub(crate) fn verify(ctx: &Context, expect: Expect) -> Outcome {
    let settings = &ctx.settings;
    let mut conn = ctx.connect()?;
    // Whether the connection is encrypted: a managed database may demand it, and
    // `sslmode=prefer` falls back to plaintext where the server offers no TLS.
    let tls = match pgqueuer::ops::connection_tls(&mut *conn) {
        Ok(tls) => tls.to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    println!(
        "Connection to {}: {tls}, {}.",
        conn.target(),
        conn.tls_settings()
    );
    if expect == Expect::Present {
        return match pgqueuer::verify_with(&mut conn, settings) {
            Ok(()) => {
                println!("All required PgQueuer database objects are present.");
                // This crate's own tables: rate limits and stored limits need them.
                let missing = pgqueuer::missing_own_tables(&mut *conn, settings)?;
                if missing.is_empty() {
                    println!("This crate's own tables (rate limits, stored limits) are present.");
                    return Ok(());
                }
                for table in &missing {
                    println!(
                        "missing table {table} (this crate's own: rate limits and 'pgq limits' need it)"
                    );
                }
                Err(fail(format!(
                    "{} of this crate's own tables are missing in {}; run 'pgq upgrade' to \
                     create them (PgQueuer's own upgrade does not)",
                    missing.len(),
                    conn.target()
                )))
            }
            Err(Error::Schema { missing, .. }) => {
                for object in &missing {
                    println!("missing {object}");
                }
                Err(fail(format!(
                    "{} objects are missing in {}; run 'pgq upgrade' to create them",
                    missing.len(),
                    conn.target()
                )))
            }
            Err(e) => Err(e.into()),
        };
    }
    let facts = pgqueuer::describe_schema(&mut conn, settings)?;
    let ours: Vec<&String> = facts
        .iter()
        .filter(|l| {
            [
                &settings.queue_table,
                &settings.queue_table_log,
                &settings.statistics_table,
                &settings.schedules_table,
            ]
            .iter()
            .any(|t| l.starts_with(&format!("table {t} ")))
                || l.starts_with(&format!("function {} ", settings.function))
        })
        .collect();
    if ours.is_empty() {
        println!("No PgQueuer database objects found.");
        return Ok(());
    }
    for line in &ours {
        println!(
            "unexpected {}",
            line.split(" persistence=").next().unwrap_or(line)
        );
    }
    Err(fail(format!(
        "{} PgQueuer objects exist in {}",
        ours.len(),
        conn.target()
    )))
}

pub(crate) fn uninstall(ctx: &Context) -> Outcome {
    let mut conn = ctx.connect()?;
    pgqueuer::uninstall_with(&mut conn, &ctx.settings)?;
    println!("Removed every PgQueuer object.");
    Ok(())
}

pub(crate) fn sql(ctx: &Context, what: SqlCommand) -> Outcome {
    let script = match what {
        SqlCommand::Install(a) | SqlCommand::Upgrade(a) => {
            upgrade_script(&with_durability(&ctx.settings, a.durability))?
        }
        SqlCommand::Uninstall => pgqueuer::uninstall_sql(&ctx.settings)?,
        SqlCommand::Durability { level } => ops::durability_sql(&ctx.settings, level)?,
        SqlCommand::Autovac(a) => ops::autovacuum_sql(&ctx.settings, autovacuum_mode(&a))?,
    };
    print!("{script}");
    Ok(())
}

pub(crate) fn durability(ctx: &Context, level: Durability) -> Outcome {
    let mut conn = ctx.connect()?;
    ops::set_durability(&mut *conn, &ctx.settings, level)?;
    println!("Set PgQueuer durability to {}.", level.as_str());
    Ok(())
}

/// `--rollback` and `--no-rollback` override each other, so the last one given wins.
fn autovacuum_mode(args: &AutovacArgs) -> Autovacuum {
    if args.rollback {
        Autovacuum::Reset
    } else {
        Autovacuum::Tune
    }
}

pub(crate) fn autovac(ctx: &Context, args: &AutovacArgs) -> Outcome {
    let mode = autovacuum_mode(args);
    let mut conn = ctx.connect()?;
    ops::autovacuum(&mut *conn, &ctx.settings, mode)?;
    println!(
        "{}",
        match mode {
            Autovacuum::Tune => "Applied recommended autovacuum settings.",
            Autovacuum::Reset => "Reset autovacuum settings to defaults.",
        }
    );
    Ok(())
}

pub(crate) fn prune_log(ctx: &Context, older_than: Duration) -> Outcome {
    let mut conn = ctx.connect()?;
    let pruned = ops::prune_log(&mut *conn, &ctx.settings, older_than)?;
    println!(
        "Aggregated {} log row(s) into the statistics; deleted {} log row(s) older than {}.",
        pruned.aggregated,
        pruned.deleted,
        format_span(older_than)
    );
    Ok(())
}
