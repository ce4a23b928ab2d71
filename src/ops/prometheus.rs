//! The queue's figures in the Prometheus text format: PgQueuer's two series, then ours.

use std::time::Duration;

use postgres::types::Type;
use postgres::{GenericClient, Row};

use super::{SlotUse, count_of, micros_of, rates_in_use, slots_in_use};
use crate::connect;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::settings::Settings;
use crate::sql::ops as sql;

/// The most entrypoints [`prometheus_text`] writes series of (the busiest); the rest are
/// added up under `entrypoint="(others)"`, so that a queue of many thousand entrypoints
/// costs a scrape a bounded text.
pub(crate) const METRICS_ENTRYPOINTS: usize = 200;

/// The label the entrypoints beyond [`METRICS_ENTRYPOINTS`] are added up under.
const OTHERS: &str = "(others)";

/// How long back [`prometheus_text`] counts log transitions (`pgqueuer_logs_count`):
/// PgQueuer's five minutes.
pub(crate) const PROMETHEUS_LOG_WINDOW: Duration = Duration::from_secs(300);

/// The queue's figures in the Prometheus text format (version 0.0.4), for a `/metrics`
/// endpoint of a program's own (`pgq web` serves the same text).
///
/// PgQueuer's two series come first, with its names and labels, so that dashboards and
/// alerts written against a Python fleet keep working: `pgqueuer_queue_count` (jobs in
/// the queue table per entrypoint and status) and `pgqueuer_logs_count` (transitions
/// logged over the last five minutes, as PgQueuer's). PgQueuer aggregates the log before
/// reading it; this reads the statistics plus the log rows not yet aggregated, which
/// gives the same counts without writing, so a scrape never changes the database.
/// Then the figures no peer exports: slots held and the highest slot per limited
/// entrypoint (`pgqueuer_slots_in_use`, `pgqueuer_slot_limit_evidence`: the smallest
/// limit the worker holding that slot can have declared), the rate in use against each
/// rate limit (`pgqueuer_rate_starts`, `pgqueuer_rate_limit_starts`), the longest wait of an
/// eligible queued job (`pgqueuer_oldest_queued_age_seconds`), picked jobs without a
/// heartbeat for `stale_after` (`pgqueuer_stale_picked_jobs`), and log rows awaiting
/// aggregation (`pgqueuer_unaggregated_log_rows`).
///
/// Per-entrypoint series are written for the 200 busiest entrypoints
/// (most jobs, most transitions, longest waits); the rest are added up under
/// `entrypoint="(others)"` and counted by `pgqueuer_metrics_entrypoints_left_out`.
/// Every series has `# HELP` and `# TYPE` lines; label values are escaped as the format
/// requires. Counting the queue reads every row of the queue table, as PgQueuer's does.
///
/// # Errors
/// [`Error::InvalidInput`] naming `stale_after` when it does not fit an interval;
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn prometheus_text<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    stale_after: Duration,
) -> Result<String> {
    use std::fmt::Write as _;
    settings.validate()?;
    let stale_us = micros_of("stale_after", stale_after)?;
    let window_us = micros_of("window", PROMETHEUS_LOG_WINDOW)?;
    let busiest = |series: String| sql::busiest_series(&series, METRICS_ENTRYPOINTS);
    let queue = connect::query_alone(client, &busiest(sql::queue_count_by_status(settings)), &[])?;
    let priorities: Vec<i32> =
        connect::query_one_alone(client, &sql::statistics_priorities(settings), &[])?
            .try_get("priorities")?;
    let logs = connect::query_alone(
        client,
        &busiest(sql::log_count_since_by_status(settings)),
        &[(&window_us, Type::INT8), (&priorities, Type::INT4_ARRAY)],
    )?;
    let slots = slots_in_use(client, settings)?;
    let rates = rates_in_use(client, settings)?;
    let health = connect::query_one_alone(
        client,
        &sql::queue_health(settings),
        &[(&stale_us, Type::INT8)],
    )?;

    fn series(out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    }
    /// PgQueuer's form: one sample per (entrypoint, status) row, labelled as it labels.
    /// The rest of the entrypoints beyond the busiest come as one `entrypoint="(others)"`
    /// sample per status, so that sums over the series stay whole.
    fn by_status(out: &mut String, name: &str, help: &str, rows: &[Row]) -> Result<()> {
        series(out, name, help);
        for row in rows {
            let (entrypoint, status): (Option<String>, String) = (row.try_get(0)?, row.try_get(1)?);
            let n = count_of(row, "n")?;
            let _ = writeln!(
                out,
                "{name}{{aggregation=\"sum\",entrypoint=\"{}\",status=\"{}\"}} {n}",
                label_value(entrypoint.as_deref().unwrap_or(OTHERS)),
                label_value(&status)
            );
        }
        Ok(())
    }
    let mut out = String::new();
    by_status(
        &mut out,
        "pgqueuer_queue_count",
        "Jobs in the queue table, by entrypoint and status.",
        &queue,
    )?;
    by_status(
        &mut out,
        "pgqueuer_logs_count",
        "Job transitions logged over the last 5 minutes, by entrypoint and status.",
        &logs,
    )?;
    series(
        &mut out,
        "pgqueuer_metrics_entrypoints_left_out",
        &format!(
            "Entrypoints beyond the {METRICS_ENTRYPOINTS} busiest, whose jobs and \
             transitions the two series above add up under entrypoint=\"{OTHERS}\"."
        ),
    );
    let left_out = |rows: &[Row]| -> Result<u64> {
        rows.first().map_or(Ok(0), |row| count_of(row, "left_out"))
    };
    let _ = writeln!(
        out,
        "pgqueuer_metrics_entrypoints_left_out {}",
        left_out(&queue)?.max(left_out(&logs)?)
    );
    let limited: Vec<&SlotUse> = slots.iter().filter(|s| s.highest.is_some()).collect();
    series(
        &mut out,
        "pgqueuer_slots_in_use",
        "Concurrency slots in use by picked jobs, per entrypoint with a limit.",
    );
    for slot in &limited {
        let _ = writeln!(
            out,
            "pgqueuer_slots_in_use{{entrypoint=\"{}\"}} {}",
            label_value(&slot.entrypoint),
            slot.in_use
        );
    }
    series(
        &mut out,
        "pgqueuer_slot_limit_evidence",
        "The highest slot held plus one: the smallest concurrency limit the worker holding \
         it can have declared. Above a worker's own limit, another declares a larger one.",
    );
    for slot in &limited {
        let _ = writeln!(
            out,
            "pgqueuer_slot_limit_evidence{{entrypoint=\"{}\"}} {}",
            label_value(&slot.entrypoint),
            slot.highest.unwrap_or(-1) + 1
        );
    }
    series(
        &mut out,
        "pgqueuer_rate_starts",
        "Starts within the last window of a rate limit, by every worker declaring it, per \
         entrypoint and window length.",
    );
    for rate in &rates {
        let _ = writeln!(
            out,
            "pgqueuer_rate_starts{{entrypoint=\"{}\",window_seconds=\"{}\"}} {}",
            label_value(&rate.entrypoint),
            rate.per.as_secs_f64(),
            rate.starts_in_window
        );
    }
    series(
        &mut out,
        "pgqueuer_rate_limit_starts",
        "The starts a rate limit allows in its window, per entrypoint and window length: the \
         limit in force (stored, or declared by running workers), else its units (the largest \
         limit declared since they were made).",
    );
    for rate in &rates {
        let _ = writeln!(
            out,
            "pgqueuer_rate_limit_starts{{entrypoint=\"{}\",window_seconds=\"{}\"}} {}",
            label_value(&rate.entrypoint),
            rate.per.as_secs_f64(),
            rate.limit.unwrap_or(rate.units)
        );
    }
    series(
        &mut out,
        "pgqueuer_oldest_queued_age_seconds",
        "How long the longest-waiting eligible queued job has waited, by entrypoint.",
    );
    let entrypoints: Vec<String> = health.try_get("entrypoints")?;
    let ages: Vec<f64> = health.try_get("ages")?;
    // The longest waits, at most as many series as the counts have.
    let mut waits: Vec<(&String, &f64)> = entrypoints.iter().zip(&ages).collect();
    waits.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
    waits.truncate(METRICS_ENTRYPOINTS);
    waits.sort_by(|a, b| a.0.cmp(b.0));
    for (entrypoint, age) in waits {
        let _ = writeln!(
            out,
            "pgqueuer_oldest_queued_age_seconds{{entrypoint=\"{}\"}} {}",
            label_value(entrypoint),
            age.max(0.0)
        );
    }
    series(
        &mut out,
        "pgqueuer_stale_picked_jobs",
        &format!(
            "Picked jobs without a heartbeat for {} s (their worker may be gone).",
            stale_after.as_secs_f64()
        ),
    );
    let _ = writeln!(
        out,
        "pgqueuer_stale_picked_jobs {}",
        count_of(&health, "stale")?
    );
    let holders = crate::horizon::holders(client)?;
    series(
        &mut out,
        "pgqueuer_horizon_held_seconds",
        "How long the oldest open transaction of this database (a session's, or a prepared \
         one) has held the MVCC horizon: no row version that died since can be removed.",
    );
    let held = holders
        .iter()
        .filter_map(|h| h.held_for)
        .max()
        .unwrap_or_default();
    let _ = writeln!(out, "pgqueuer_horizon_held_seconds {}", held.as_secs_f64());
    series(
        &mut out,
        "pgqueuer_horizon_xid_age",
        "How many transactions old the oldest row version kept for a session, replication \
         slot, prepared transaction or standby is.",
    );
    let _ = writeln!(
        out,
        "pgqueuer_horizon_xid_age {}",
        holders.iter().map(|h| h.xid_age).max().unwrap_or(0)
    );
    series(
        &mut out,
        "pgqueuer_queue_dead_tuples",
        "Dead row versions in the queue table, as the statistics count them.",
    );
    let dead: i64 = connect::query_one_alone(
        client,
        sql::TABLE_DEAD_TUPLES,
        &[(&settings.qualify(&settings.queue_table), Type::TEXT)],
    )?
    .try_get("n")?;
    let _ = writeln!(out, "pgqueuer_queue_dead_tuples {dead}");
    series(
        &mut out,
        "pgqueuer_unaggregated_log_rows",
        "Log rows not yet folded into the statistics table.",
    );
    let _ = writeln!(
        out,
        "pgqueuer_unaggregated_log_rows {}",
        count_of(&health, "unaggregated")?
    );
    Ok(out)
}

/// A label value as the Prometheus text format writes it: backslash, double quote and
/// line feed escaped.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
