//! The pages' handlers: each reads what its page shows in one transaction
//! ([`App::read`]) and renders it (`pages/`).

use std::time::{Duration, SystemTime};

use super::app::{App, Handled, Incoming, Problem};
use super::server::Reply;
use super::{data, http, pages};
use crate::job::{JobId, Status};

impl App {
    pub(super) fn overview(&self) -> Handled {
        let s = &self.settings;
        let (entrypoints, buckets, workers, horizon, now) = self.read(|tx| {
            let options = crate::ops::HealthOptions::default();
            Ok((
                data::entrypoint_counts(tx, &self.sql, None, None, data::SHOWN_ENTRYPOINTS)?,
                self.buckets(tx, None)?,
                crate::ops::active_workers(tx, s)?.len(),
                crate::horizon::long_held(
                    crate::horizon::holders(tx)?,
                    self.options.horizon_after,
                    options.horizon_xid_after,
                ),
                SystemTime::now(),
            ))
        })?;
        self.page(
            "Overview",
            "/",
            &pages::overview(&pages::Overview {
                entrypoints: &entrypoints,
                buckets: &buckets,
                workers,
                horizon: &horizon,
                now,
            }),
        )
    }

    pub(super) fn entrypoints(&self, r: &Incoming<'_>) -> Handled {
        let window = r.param("window").unwrap_or("1h");
        let Some((label, secs)) = pages::WINDOWS.iter().find(|(l, _)| *l == window) else {
            return Err(Problem::BadRequest(format!(
                "window={window} is not one of 1h, 6h, 24h"
            )));
        };
        let span = Duration::from_secs(*secs);
        let filter = r.param("filter").filter(|f| !f.is_empty());
        let (rows, durations, mut buckets) = self.read(|tx| {
            Ok((
                data::entrypoint_counts(tx, &self.sql, None, filter, data::SHOWN_ENTRYPOINTS)?,
                data::durations(tx, &self.sql, span, None)?,
                self.buckets(tx, None)?,
            ))
        })?;
        let since = SystemTime::now() - span;
        buckets.retain(|b| b.minute >= since);
        self.page(
            "Entrypoints",
            "/entrypoints",
            &pages::entrypoints(&pages::EntrypointsPage {
                rows: &rows,
                durations: &durations,
                buckets: &buckets,
                window: label,
                filter,
                now: SystemTime::now(),
            }),
        )
    }

    pub(super) fn entrypoint(&self, name: &str) -> Handled {
        let name = http::decode(name).map_err(|why| http::BadParam {
            name: "the entrypoint name in the path".into(),
            why,
        })?;
        let day = Duration::from_secs(86_400);
        let (counts, slots, durations, exceptions, buckets, mut rates) = self.read(|tx| {
            Ok((
                data::entrypoint_counts(tx, &self.sql, Some(&name), None, 1)?,
                data::picked_slots(tx, &self.sql, &name)?,
                data::durations(tx, &self.sql, day, Some(&name))?,
                data::exceptions(tx, &self.sql, Some(&name), 20)?,
                self.buckets(tx, Some(&name))?,
                crate::ops::rates_in_use(tx, &self.settings)?,
            ))
        })?;
        rates.retain(|r| r.entrypoint == name);
        if counts.shown.is_empty() && buckets.is_empty() && exceptions.is_empty() {
            return Err(Problem::NotFound(format!(
                "No entrypoint {name} has jobs in the queue or log rows in the last 24 h."
            )));
        }
        self.page(
            &format!("Entrypoint {name}"),
            "/entrypoints",
            &pages::entrypoint(&pages::EntrypointPage {
                name: &name,
                counts: counts.shown.first(),
                slots: &slots,
                durations: durations.first(),
                exceptions: &exceptions,
                buckets: &buckets,
                rates: &rates,
                now: SystemTime::now(),
            }),
        )
    }

    pub(super) fn jobs(&self, r: &Incoming<'_>) -> Handled {
        let status = match r.param("status") {
            None => None,
            Some(text) => match Status::parse(text) {
                Some(s @ (Status::Queued | Status::Picked | Status::Failed)) => Some(s),
                _ => {
                    return Err(Problem::BadRequest(format!(
                        "status={text} is not one of queued, picked, failed (the statuses of \
                         jobs in the queue table)"
                    )));
                }
            },
        };
        let entrypoint = r.param("entrypoint");
        let after = match r.param("after") {
            None => 0,
            Some(text) => text
                .parse::<JobId>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| Problem::BadRequest(format!("after={text} is not a job id")))?,
        };
        // PgQueuer's `page=N` (from 1), so its links carry over.
        let offset = match r.param("page") {
            None => 0,
            Some(text) => text
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=1_000_000).contains(n))
                .map(|n| (n - 1) * pages::PAGE_SIZE)
                .ok_or_else(|| Problem::BadRequest(format!("page={text} is not a page number")))?,
        };
        let mut rows = self.read(|tx| {
            data::jobs(
                tx,
                &self.sql,
                status,
                entrypoint,
                (after, offset),
                pages::PAGE_SIZE + 1,
            )
        })?;
        let more = rows.len() > usize::try_from(pages::PAGE_SIZE).unwrap_or(50);
        rows.truncate(usize::try_from(pages::PAGE_SIZE).unwrap_or(50));
        self.page(
            "Jobs",
            "/jobs",
            &pages::jobs(&pages::JobsPage {
                rows: &rows,
                status,
                entrypoint,
                after,
                more,
                now: SystemTime::now(),
            }),
        )
    }

    pub(super) fn job(&self, id: JobId) -> Handled {
        let (job, history) = self.read(|tx| data::job(tx, &self.sql, id))?;
        if job.is_none() && history.is_empty() {
            return Err(Problem::NotFound(format!(
                "No job {id}: it is not in the queue table and the log has no row of it \
                 (an unknown id, or one whose log rows were pruned)."
            )));
        }
        self.page(
            &format!("Job {id}"),
            "/jobs",
            &pages::job(id, job.as_ref(), &history, SystemTime::now()),
        )
    }

    pub(super) fn failures(&self) -> Handled {
        let (held, exceptions) = self.read(|tx| {
            Ok((
                data::failed(tx, &self.sql, 200)?,
                data::exceptions(tx, &self.sql, None, 50)?,
            ))
        })?;
        self.page(
            "Failures",
            "/failures",
            &pages::failures(&held, &exceptions, SystemTime::now()),
        )
    }

    pub(super) fn workers(&self, r: &Incoming<'_>) -> Handled {
        let stale_after = match r.param("stale_after") {
            None => self.options.stale_after,
            Some(text) => text
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0 && *n < 10 * 365 * 86_400)
                .map(Duration::from_secs)
                .ok_or_else(|| {
                    Problem::BadRequest(format!(
                        "stale_after={text} is not a number of seconds (1 or more)"
                    ))
                })?,
        };
        let s = &self.settings;
        let (active, stale) = self.read(|tx| {
            Ok((
                crate::ops::active_workers(tx, s)?,
                crate::ops::stale_jobs(tx, s, stale_after, 200)?,
            ))
        })?;
        self.page(
            "Workers",
            "/workers",
            &pages::workers(&active, &stale, stale_after, SystemTime::now()),
        )
    }

    pub(super) fn schedules(&self) -> Handled {
        let s = &self.settings;
        let rows = self.read(|tx| crate::schedules::list(tx, s))?;
        self.page(
            "Schedules",
            "/schedules",
            &pages::schedules(&rows, SystemTime::now()),
        )
    }

    pub(super) fn system(&self) -> Handled {
        let s = &self.settings;
        let info = self.read(|tx| {
            let info = data::system(tx, &self.sql)?;
            let facts = crate::schema::describe_in(tx, s)?;
            let missing = crate::schema::missing_objects(&facts, s);
            let verify = if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "missing: {}. Run `pgq upgrade` (or pgqueuer::upgrade()).",
                    missing.join(", ")
                ))
            };
            let tls = crate::ops::connection_tls(tx)?;
            Ok((info, verify, tls))
        })?;
        // How this dashboard's connections are set: a page's own says whether it is
        // encrypted (`sslmode=prefer` may fall back to plaintext).
        let settings = self
            .pool
            .get_timeout(self.options.checkout_timeout)
            .map_or_else(|e| format!("unknown ({e})"), |c| c.tls_settings());
        let connection = format!("{}, {settings}", info.2);
        let (info, verify) = (info.0, info.1);
        self.page(
            "System",
            "/system",
            &pages::system(&info, &verify, &connection),
        )
    }

    pub(super) fn healthz(&self) -> Reply {
        match self.read(|tx| Ok(tx.query_one(crate::sql::web::PING, &[])?)) {
            Ok(_) => Reply::text(200, "text/plain; charset=utf-8", "ok\n".into()),
            Err(p) => {
                let detail = p.detail();
                Reply::text(
                    503,
                    "text/plain; charset=utf-8",
                    format!("unavailable: {detail}\n"),
                )
            }
        }
    }

    /// `/healthz?deep=1`: the queue's health verdict ([`crate::ops::health`]) as JSON;
    /// 200 for OK and DEGRADED (the queue works), 503 for STALLED and when the database
    /// cannot say, so a load balancer or an uptime check can act on the status alone.
    /// With `?probe=liveness` or `?probe=readiness`, 503 where the probe fails
    /// ([`crate::ops::Health::passes`]).
    pub(super) fn deep_health(&self, probe: Option<crate::ops::Probe>) -> Reply {
        let s = &self.settings;
        let options = crate::ops::HealthOptions::default();
        match self.read(|tx| crate::ops::health(tx, s, &options)) {
            Ok(health) => {
                let fails = match probe {
                    Some(probe) => !health.passes(probe),
                    None => health.verdict == crate::ops::Verdict::Stalled,
                };
                let status = if fails { 503 } else { 200 };
                Reply::text(
                    status,
                    "application/json",
                    format!("{}\n", health.to_json()),
                )
            }
            Err(p) => {
                let detail = p.detail();
                Reply::text(
                    503,
                    "application/json",
                    format!(
                        "{}\n",
                        serde_json::json!({ "verdict": "UNKNOWN", "error": detail })
                    ),
                )
            }
        }
    }

    pub(super) fn metrics(&self) -> Handled {
        let s = &self.settings;
        let stale_after = self.options.stale_after;
        let text = self.read(|tx| crate::ops::prometheus_text(tx, s, stale_after))?;
        Ok(Reply::text(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            text,
        ))
    }
}
