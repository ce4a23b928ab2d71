//! Schema and maintenance commands: install, upgrade, verify, uninstall, sql,
//! durability, autovac, prune-log.

use pgqueuer::ops::{self, Autovacuum};
use pgqueuer::{Durability, Error, Settings};

use crate::args::{Args, durability_arg, format_span, parse_span, switch, valued};
use crate::{Context, Failure, Outcome, usage};

pub(crate) fn install(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("install", &[valued("--durability", Some("-d"))], argv)?;
    args.none()?;
    let mut settings = ctx.settings.clone();
    if let Some(level) = args.parsed("--durability", |v| {
        Durability::parse(v).map_err(|e| e.to_string())
    })? {
        settings.durability = level;
    }
    let mut conn = ctx.connect()?;
    let present = pgqueuer::describe_with(&mut conn, &settings)?;
    let table = format!("table {} ", settings.queue_table);
    if present.iter().any(|l| l.starts_with(&table)) {
        eprintln!(
            "pgq: PgQueuer is already installed ({} exists). Run 'pgq upgrade' to bring it up to date.",
            settings.queue_table
        );
        return Err(Failure::Reported);
    }
    let report = pgqueuer::upgrade_with(&mut conn, &settings)?;
    println!(
        "Installed PgQueuer schema (durability={}, {} objects).",
        settings.durability.as_str(),
        report.changes.len()
    );
    Ok(())
}

/// The upgrade script, one step per paragraph, with a header line.
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

pub(crate) fn upgrade(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("upgrade", &[switch("--plan")], argv)?;
    args.none()?;
    if args.switch("--plan") {
        print!("{}", upgrade_script(&ctx.settings)?);
        return Ok(());
    }
    let mut conn = ctx.connect()?;
    let report = pgqueuer::upgrade_with(&mut conn, &ctx.settings)?;
    if report.is_noop() {
        println!("PgQueuer schema is already up to date.");
    } else {
        for change in &report.changes {
            println!("{change}");
        }
        println!("Upgraded: {} catalog changes.", report.changes.len());
    }
    Ok(())
}

pub(crate) fn verify(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("verify", &[valued("--expect", None)], argv)?;
    args.none()?;
    let expect = args.value("--expect").unwrap_or("present");
    if expect != "present" && expect != "absent" {
        return Err(args.bad(&format!("--expect {expect:?}: expected present or absent")));
    }
    let settings = &ctx.settings;
    let mut conn = ctx.connect()?;
    if expect == "present" {
        return match pgqueuer::verify_with(&mut conn, settings) {
            Ok(()) => {
                println!("All required PgQueuer database objects are present.");
                Ok(())
            }
            Err(Error::Schema { missing }) => {
                for object in missing {
                    println!("missing {object}");
                }
                eprintln!("pgq: run 'pgq upgrade' to create the missing objects");
                Err(Failure::Reported)
            }
            Err(e) => Err(e.into()),
        };
    }
    let facts = pgqueuer::describe_with(&mut conn, settings)?;
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
    for line in ours {
        println!(
            "unexpected {}",
            line.split(" persistence=").next().unwrap_or(line)
        );
    }
    Err(Failure::Reported)
}

pub(crate) fn uninstall(ctx: &Context, argv: Vec<String>) -> Outcome {
    Args::parse("uninstall", &[], argv)?.none()?;
    let mut conn = ctx.connect()?;
    pgqueuer::uninstall_with(&mut conn, &ctx.settings)?;
    println!("Removed every PgQueuer object.");
    Ok(())
}

pub(crate) fn sql(ctx: &Context, mut argv: Vec<String>) -> Outcome {
    if argv.is_empty() || argv[0].starts_with('-') {
        return Err(usage(
            "sql",
            "missing what to print: install, upgrade, uninstall, durability or autovac",
        ));
    }
    let what = argv.remove(0);
    let mut settings = ctx.settings.clone();
    let script = match what.as_str() {
        "install" | "upgrade" => {
            let args = Args::parse("sql", &[valued("--durability", Some("-d"))], argv)?;
            args.none()?;
            if let Some(level) = args.parsed("--durability", |v| {
                Durability::parse(v).map_err(|e| e.to_string())
            })? {
                settings.durability = level;
            }
            upgrade_script(&settings)?
        }
        "uninstall" => {
            Args::parse("sql", &[], argv)?.none()?;
            pgqueuer::uninstall_sql(&settings)?
        }
        "durability" => {
            let args = Args::parse("sql", &[], argv)?;
            ops::durability_sql(&settings, durability_arg(&args)?)?
        }
        "autovac" => {
            let args = Args::parse(
                "sql",
                &[switch("--rollback"), switch("--no-rollback")],
                argv,
            )?;
            args.none()?;
            ops::autovacuum_sql(&settings, autovacuum_mode(&args))?
        }
        other => {
            return Err(usage(
                "sql",
                format!(
                    "unknown SQL {other:?}: expected install, upgrade, uninstall, durability or autovac"
                ),
            ));
        }
    };
    print!("{script}");
    Ok(())
}

pub(crate) fn durability(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("durability", &[], argv)?;
    let level = durability_arg(&args)?;
    let mut conn = ctx.connect()?;
    ops::set_durability(&mut *conn, &ctx.settings, level)?;
    println!("Set PgQueuer durability to {}.", level.as_str());
    Ok(())
}

fn autovacuum_mode(args: &Args) -> Autovacuum {
    // The last of --rollback / --no-rollback wins, as with any repeated flag.
    let rollback = args
        .switches
        .iter()
        .rev()
        .find(|s| **s == "--rollback" || **s == "--no-rollback");
    if rollback == Some(&"--rollback") {
        Autovacuum::Reset
    } else {
        Autovacuum::Tune
    }
}

pub(crate) fn autovac(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "autovac",
        &[switch("--rollback"), switch("--no-rollback")],
        argv,
    )?;
    args.none()?;
    let mode = autovacuum_mode(&args);
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

pub(crate) fn prune_log(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("prune-log", &[valued("--older-than", None)], argv)?;
    args.none()?;
    let Some(older_than) = args.parsed("--older-than", parse_span)? else {
        return Err(args.bad("--older-than DURATION is required (e.g. --older-than 7d)"));
    };
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
