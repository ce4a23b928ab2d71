//! The scheduler's statements over the schedules table (PgQueuer's `pgqueuer_schedules`).
//!
//! Rows are keyed by `(entrypoint, expression)`, the expression being croniter's
//! normalized text, so Python and Rust schedulers registering one schedule share one
//! row. Delays travel as microseconds (`bigint`) measured on the client from "now" to
//! the next fire; the server adds them to its own `now()` and truncates to the second,
//! as PgQueuer does, so client and server clocks need not agree.

use crate::settings::Settings;

/// The columns every statement returning schedule rows returns, read by name.
pub(crate) const SCHEDULE_COLUMNS: &str = "id, expression, entrypoint, heartbeat, created, updated, next_run, \
     last_run, status::text AS status";

/// Every scheduler statement for one set of object names.
#[derive(Debug)]
pub(crate) struct ScheduleSql {
    /// `schedule_insert`: one row per registration that has none yet (`$1` expressions,
    /// `$2` entrypoints, `$3` delays in µs); existing rows keep their state.
    pub(crate) insert: String,
    /// `schedule_claim_due`: lock, mark `picked` and return the rows of the registrations
    /// (`$1` expressions, `$2` entrypoints) that are due, or picked with a heartbeat older
    /// than 30 s; their `next_run` becomes the next fire (`$3` µs from now) or, when
    /// that has already passed on the server's clock, the one after it (`$4`).
    pub(crate) claim_due: String,
    /// `schedule_release`: back to `queued` after a run (`$1` ids), stamping `last_run`.
    pub(crate) release: String,
    /// `schedule_heartbeat`: refresh the heartbeat of running schedules (`$1` ids).
    pub(crate) heartbeat: String,
    /// `schedule_select`: every row, least recently run first (never-run rows last).
    pub(crate) select: String,
    /// `schedule_delete`: rows whose id is in `$1` or entrypoint in `$2`, returning their
    /// ids.
    pub(crate) delete: String,
}

impl ScheduleSql {
    /// Renders every statement for `s`, which must have passed `Settings::validate`.
    pub(crate) fn new(s: &Settings) -> ScheduleSql {
        let table = s.qualify(&s.schedules_table);
        ScheduleSql {
            insert: format!(
                "INSERT INTO {table} (expression, next_run, entrypoint)
SELECT expression, date_trunc('seconds', now() + delay_us * interval '1 microsecond'), entrypoint
  FROM unnest($1::text[], $2::text[], $3::bigint[]) AS p(expression, entrypoint, delay_us)
ON CONFLICT (entrypoint, expression) DO NOTHING"
            ),
            claim_due: format!(
                "WITH params AS (
    SELECT *
      FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
           AS p(expression, entrypoint, next_us, following_us)
),
due AS (
    SELECT s.id,
           date_trunc('seconds', now() + p.next_us * interval '1 microsecond') AS next_fire,
           date_trunc('seconds', now() + p.following_us * interval '1 microsecond') AS following_fire
      FROM {table} s
      JOIN params p ON p.entrypoint = s.entrypoint AND p.expression = s.expression
     WHERE (s.status = 'queued' AND s.next_run <= now())
        OR (s.status = 'picked' AND now() - s.heartbeat > interval '30 seconds')
       FOR UPDATE OF s SKIP LOCKED
)
UPDATE {table} s
   SET status = 'picked',
       updated = now(),
       heartbeat = now(),
       next_run = CASE WHEN due.next_fire > now() THEN due.next_fire ELSE due.following_fire END
  FROM due
 WHERE s.id = due.id
RETURNING s.id, s.expression, s.entrypoint, s.heartbeat, s.created, s.updated, s.next_run,
          s.last_run, s.status::text AS status"
            ),
            release: format!(
                "UPDATE {table} SET status = 'queued', last_run = now(), updated = now() \
                 WHERE id = ANY($1)"
            ),
            heartbeat: format!(
                "UPDATE {table} SET heartbeat = now(), updated = now() WHERE id = ANY($1)"
            ),
            select: format!("SELECT {SCHEDULE_COLUMNS} FROM {table} ORDER BY last_run, id"),
            delete: format!(
                "DELETE FROM {table} WHERE id = ANY($1) OR entrypoint = ANY($2) RETURNING id"
            ),
        }
    }
}
