//! The producer's statements: enqueue, cancel, inspect, clear and requeue jobs.
//!
//! Rendered once per [`Settings`] into a [`QueueSql`], which a `Queue` keeps in an `Arc`.
//! Bind parameters are typed arrays; every multi-row change is one statement whose
//! data-modifying CTEs write the queue row and its log row together, as PgQueuer does.

use super::JOB_COLUMNS;
use crate::settings::Settings;

/// Every statement of the producer API for one set of object names.
#[derive(Debug)]
pub(crate) struct QueueSql {
    /// `queue_insert_many` with no ON CONFLICT clause.
    pub(crate) insert_many_raise: String,
    /// `queue_insert_many` skipping keys already held.
    pub(crate) insert_many_skip: String,
    /// `queue_insert_many` raising the held job's priority instead.
    pub(crate) insert_many_update_priority: String,
    /// `queue_cancel`: delete queued/picked rows of `$1`, log `canceled`, return the ids.
    pub(crate) cancel: String,
    /// `queue_count`: rows per entrypoint, priority and status.
    pub(crate) count: String,
    /// `queue_clear`: delete the rows of the entrypoints `$1`, log `deleted`.
    pub(crate) clear: String,
    /// `queue_select_failed`: held (`failed`) rows with their latest failure's
    /// traceback, oldest first, at most `$1`.
    pub(crate) select_failed: String,
    /// `log_select_job`: every log row of the job `$1`, oldest first.
    pub(crate) log_select_job: String,
    /// `queue_explain_job`: the row `$1` with its heartbeat age and whether it is due.
    pub(crate) explain_job: String,
    /// `queue_count_ahead`: due queued jobs a claim takes before `($1, $2, $3)`.
    pub(crate) count_ahead: String,
    /// `queue_select_holders`: the picked jobs of entrypoint `$1`, by slot.
    pub(crate) select_holders: String,
    /// `rates_next_start`: how long until entrypoint `$1`'s rate limits allow a start.
    pub(crate) rate_next_start: String,
    /// The rates table's bare name and schema (to see whether it exists).
    pub(crate) rates_table: String,
    pub(crate) rates_schema: Option<String>,
    /// `queue_select`: the rows with ids `$1`.
    pub(crate) select: String,
    /// `queue_requeue_failed`: put held rows of `$1` back in the queue, log `queued`.
    pub(crate) requeue_failed: String,
    /// `log_select_latest`: the latest logged status of each job of `$1`.
    pub(crate) log_select_latest: String,
    /// `LISTEN` on the channel, quoted as an identifier.
    pub(crate) listen: String,
    /// The channel (for event payloads).
    pub(crate) channel: String,
    /// The bare queue table name (for `table_changed_event` payloads).
    pub(crate) queue_table: String,
    /// The unique index a dedupe-key conflict is reported on.
    pub(crate) dedupe_index: String,
    /// The capacity-slot index (for error classification).
    pub(crate) slot_index: String,
}

impl QueueSql {
    /// Renders every statement for `s`, which must have passed `Settings::validate`.
    pub(crate) fn new(s: &Settings) -> QueueSql {
        QueueSql {
            insert_many_raise: queue_insert_many(s, Arbiter::None),
            insert_many_skip: queue_insert_many(s, Arbiter::DoNothing),
            insert_many_update_priority: queue_insert_many(s, Arbiter::RaisePriority),
            cancel: queue_cancel(s),
            count: queue_count(s),
            clear: queue_clear(s),
            select_failed: queue_select_failed(s),
            log_select_job: log_select_job(s),
            explain_job: queue_explain_job(s),
            count_ahead: queue_count_ahead(s),
            select_holders: queue_select_holders(s),
            rate_next_start: super::rates::rates_next_start(s),
            rates_table: s.rates_table(),
            rates_schema: s.schema.clone(),
            select: queue_select(s),
            requeue_failed: queue_requeue_failed(s),
            log_select_latest: log_select_latest(s),
            listen: super::channel_listen(&s.channel),
            channel: s.channel.clone(),
            // The DDL names objects unquoted, so PostgreSQL folds them to lower case; the
            // trigger's table name and the index names in errors come back folded.
            queue_table: s.queue_table.to_ascii_lowercase(),
            dedupe_index: format!("{}_unique_dedupe_key", s.queue_table).to_ascii_lowercase(),
            slot_index: s.slot_index_name().to_ascii_lowercase(),
        }
    }
}

/// Sends one notification per element of `$2` on the channel `$1`, in one statement.
pub(crate) const CHANNEL_NOTIFY_MANY: &str =
    "SELECT pg_notify($1::text, payload) FROM unnest($2::text[]) AS payload";

/// What an insert does with a row whose dedupe key a queued or picked job holds (the
/// statement's side of `OnConflict`).
#[derive(Debug, Clone, Copy)]
enum Arbiter {
    /// No ON CONFLICT clause: the unique index raises.
    None,
    /// `DO NOTHING`: the row is left out.
    DoNothing,
    /// `DO UPDATE`: the held row's priority becomes the larger of the two.
    RaisePriority,
}

/// Inserts a batch of jobs given as parallel arrays, and their `queued` log rows, in one
/// statement; returns `(ord, id)` for every input position that got a job, in input order.
///
/// Binds: `$1 int[]` priority, `$2 text[]` entrypoint, `$3 bytea[]` payload,
/// `$4 bigint[]` delay in microseconds, `$5 text[]` dedupe key, `$6 text[]` headers as JSON
/// text (`null` for none, stored as jsonb `null` like Python).
///
/// Each input row gets its id from the table's sequence up front (`input` is
/// MATERIALIZED, ordered by position, so ids rise in input order); that is what ties the
/// returned ids back to input positions, also when ON CONFLICT drops rows. Only rows whose
/// id came from `input` are logged, so a job whose priority was raised is not logged
/// again. The delay is added as whole seconds plus the microsecond remainder, both exact
/// in double precision, and as a pure time span (never days), so it means the same
/// elapsed time across a daylight-saving change.
fn queue_insert_many(s: &Settings, conflict: Arbiter) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    let arbiter = format!(
        "ON CONFLICT (dedupe_key) WHERE ((status = ANY (ARRAY['queued'::{status}, 'picked'::{status}])) \
         AND (dedupe_key IS NOT NULL))"
    );
    let (on_conflict, join) = match conflict {
        Arbiter::None => (String::new(), "i.id = ins.id"),
        Arbiter::DoNothing => (format!("{arbiter} DO NOTHING"), "i.id = ins.id"),
        Arbiter::RaisePriority => (
            format!("{arbiter} DO UPDATE SET priority = GREATEST(job.priority, EXCLUDED.priority)"),
            "i.id = ins.id OR i.dedupe_key = ins.dedupe_key",
        ),
    };
    format!(
        "WITH input AS MATERIALIZED (
    SELECT nextval((SELECT pg_get_serial_sequence('{queue}', 'id'))::regclass) AS id, t.*
      FROM (SELECT *
              FROM unnest($1::int[], $2::text[], $3::bytea[], $4::bigint[], $5::text[], $6::text[]::jsonb[])
                   WITH ORDINALITY AS u(priority, entrypoint, payload, delay_us, dedupe_key, headers, ord)
             ORDER BY ord) AS t
),
inserted AS (
    INSERT INTO {queue} AS job
           (id, priority, entrypoint, payload, execute_after, dedupe_key, headers, status)
    SELECT id, priority, entrypoint, payload,
           now() + (delay_us / 1000000) * interval '1 second'
                 + (delay_us % 1000000) * interval '1 microsecond',
           dedupe_key, headers, 'queued'::{status}
      FROM input
     ORDER BY ord
    {on_conflict}
    RETURNING id, entrypoint, priority, dedupe_key
),
logged AS (
    INSERT INTO {log} (job_id, status, entrypoint, priority)
    SELECT id, 'queued'::{status}, entrypoint, priority
      FROM inserted
     WHERE id IN (SELECT id FROM input)
)
SELECT i.ord, ins.id
  FROM inserted ins
  JOIN input i ON {join}
 ORDER BY i.ord"
    )
}

/// Deletes the queued or picked rows among the ids `$1 bigint[]` and logs each as
/// `canceled`; returns the deleted ids, ascending. Held (`failed`) rows and unknown ids
/// are left alone.
fn queue_cancel(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "WITH cancelled AS (
    DELETE FROM {queue}
     WHERE id = ANY($1::bigint[])
       AND status IN ('queued'::{status}, 'picked'::{status})
    RETURNING id, entrypoint, priority
),
logged AS (
    INSERT INTO {log} (job_id, status, entrypoint, priority)
    SELECT id, 'canceled'::{status}, entrypoint, priority FROM cancelled
)
SELECT id FROM cancelled ORDER BY id"
    )
}

/// Counts rows per entrypoint, priority and status (status in the enum's order).
fn queue_count(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT entrypoint, priority, status::text AS status, count(*) AS count
  FROM {queue}
 GROUP BY entrypoint, priority, status
 ORDER BY entrypoint, priority, status"
    )
}

/// Deletes every row of the entrypoints `$1 text[]`, whatever its status, and logs each
/// as `deleted`; returns one row per job removed.
fn queue_clear(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "WITH deleted AS (
    DELETE FROM {queue} WHERE entrypoint = ANY($1::text[])
    RETURNING id, entrypoint, priority
)
INSERT INTO {log} (job_id, status, entrypoint, priority)
SELECT id, 'deleted'::{status}, entrypoint, priority FROM deleted
RETURNING job_id"
    )
}

/// Held (`failed`) rows, oldest first, at most `$1 bigint`, each with the traceback of
/// its latest `failed` log row as `failure` (NULL when there is none).
fn queue_select_failed(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT {columns}, reason.traceback AS failure
  FROM {queue} AS job
  LEFT JOIN LATERAL (
       SELECT traceback FROM {log} AS l
        WHERE l.job_id = job.id AND l.status = 'failed'::{status}
        ORDER BY l.created DESC, l.id DESC
        LIMIT 1
  ) AS reason ON true
 WHERE job.status = 'failed'::{status}
 ORDER BY job.created, job.id
 LIMIT $1::bigint",
        columns = JOB_COLUMNS
    )
}

/// The row `$1 bigint` with `heartbeat_age` (seconds, by the server's clock) and
/// `due_in` (seconds until `execute_after`, negative once due).
fn queue_explain_job(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT {columns},
       {heartbeat_age} AS heartbeat_age,
       -{due_age} AS due_in
  FROM {queue} WHERE id = $1::bigint",
        columns = JOB_COLUMNS,
        heartbeat_age = super::age_seconds("heartbeat"),
        due_age = super::age_seconds("execute_after"),
    )
}

/// How many due queued jobs of entrypoint `$1 text` a claim takes before a job of
/// priority `$2 int` and id `$3 bigint` (higher priority first, then lower id), through
/// the `(entrypoint, priority DESC, id)` index.
fn queue_count_ahead(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT count(*) FROM {queue}
 WHERE entrypoint = $1::text AND status = 'queued'::{status} AND execute_after < now()
   AND (priority > $2::int OR (priority = $2::int AND id < $3::bigint))"
    )
}

/// The picked jobs of entrypoint `$1 text` (at most 1,000), by slot then id, with their
/// worker and heartbeat age in seconds.
fn queue_select_holders(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT id, slot, queue_manager_id,
       {heartbeat_age} AS heartbeat_age
  FROM {queue}
 WHERE entrypoint = $1::text AND status = 'picked'::{status}
 ORDER BY slot NULLS LAST, id LIMIT 1000",
        heartbeat_age = super::age_seconds("heartbeat"),
    )
}

/// Every log row of the job `$1 bigint`, oldest first (through the log's
/// `(job_id, created DESC)` index).
fn log_select_job(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    format!(
        "SELECT id, created, status::text AS status, priority, entrypoint, traceback
  FROM {log}
 WHERE job_id = $1::bigint
 ORDER BY created, id"
    )
}

/// The rows with ids `$1 bigint[]`, ascending by id.
fn queue_select(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT {columns} FROM {queue} WHERE id = ANY($1::bigint[]) ORDER BY id",
        columns = JOB_COLUMNS
    )
}

/// Puts the held (`failed`) rows among `$1 bigint[]` back in the queue (due now, attempts
/// reset, no owner) and logs each as `queued`; returns their ids, ascending. Other ids
/// are ignored.
fn queue_requeue_failed(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "WITH requeued AS (
    UPDATE {queue}
       SET status = 'queued'::{status}, execute_after = now(), updated = now(),
           attempts = 0, queue_manager_id = NULL
     WHERE id = ANY($1::bigint[]) AND status = 'failed'::{status}
    RETURNING id, entrypoint, priority
),
logged AS (
    INSERT INTO {log} (job_id, status, entrypoint, priority)
    SELECT id, 'queued'::{status}, entrypoint, priority FROM requeued
)
SELECT id FROM requeued ORDER BY id"
    )
}

/// The latest logged status of each job among `$1 bigint[]` (jobs never logged are
/// absent).
fn log_select_latest(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    format!(
        "SELECT DISTINCT ON (job_id) job_id, status::text AS status
  FROM {log}
 WHERE job_id = ANY($1::bigint[])
 ORDER BY job_id, created DESC, id DESC"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prefix_and_schema() {
        let s = Settings::with_prefix("app_").schema("myq");
        let sql = QueueSql::new(&s);
        assert!(
            sql.insert_many_raise
                .contains("INSERT INTO myq.app_pgqueuer AS job")
        );
        assert!(
            sql.insert_many_raise
                .contains("INSERT INTO myq.app_pgqueuer_log")
        );
        assert!(
            sql.insert_many_raise
                .contains("'queued'::myq.app_pgqueuer_status")
        );
        assert!(!sql.insert_many_raise.contains("ON CONFLICT"));
        assert!(sql.insert_many_skip.contains("DO NOTHING"));
        assert!(sql.insert_many_update_priority.contains("GREATEST"));
        assert_eq!(sql.dedupe_index, "app_pgqueuer_unique_dedupe_key");
        assert_eq!(sql.listen, "LISTEN \"app_ch_pgqueuer\"");
        assert_eq!(sql.channel, "app_ch_pgqueuer");
        assert_eq!(sql.queue_table, "app_pgqueuer");
    }

    #[test]
    fn the_arbiter_restates_the_dedupe_index_predicate() {
        // PostgreSQL infers the partial unique index only when the predicate matches it.
        let sql = QueueSql::new(&Settings::default());
        assert!(sql.insert_many_skip.contains(
            "ON CONFLICT (dedupe_key) WHERE ((status = ANY (ARRAY['queued'::pgqueuer_status, \
             'picked'::pgqueuer_status])) AND (dedupe_key IS NOT NULL)) DO NOTHING"
        ));
    }

    #[test]
    fn names_reported_by_the_server_are_folded() {
        let s = Settings {
            queue_table: "MyJobs".into(),
            ..Settings::default()
        };
        let sql = QueueSql::new(&s);
        assert_eq!(sql.dedupe_index, "myjobs_unique_dedupe_key");
        assert_eq!(sql.queue_table, "myjobs");
    }
}
