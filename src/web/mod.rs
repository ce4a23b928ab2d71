//! The web dashboard and Prometheus endpoint: `pgq web`, or a thread of an application's
//! own serving its pool's queue (an embedded admin page). Feature `web`.
//!
//! A blocking HTTP server (tiny_http) with a few handler threads; pages rendered on the
//! server (maud), every asset compiled in. Pages keep themselves current through one
//! LISTEN connection on the queue's channel and a Server-Sent Events stream per open page
//! (`/events`), polling where LISTEN cannot work. Reading a page never writes to the
//! database; the two actions (requeue, cancel) are POSTs from a page of this server only,
//! written by the same [`Queue`] functions as `pgq requeue` and `pgq cancel`.
//!
//! ```no_run
//! # fn main() -> Result<(), pgqueuer::Error> {
//! use pgqueuer::web::{Dashboard, WebOptions};
//!
//! let pool = pgqueuer::connect("postgres://postgres@127.0.0.1/app")?;
//! let server = Dashboard::new(pool, &pgqueuer::Settings::default())?
//!     .options(WebOptions::from_env()?)
//!     .serve("127.0.0.1:8080")?;
//! println!("dashboard on http://{}", server.addr());
//! server.join(); // or keep `server` and call `server.shutdown()` when the program stops
//! # Ok(())
//! # }
//! ```
//!
//! Paths are PgQueuer 1.6.0's where a page exists in both (`/`, `/entrypoints`, `/jobs`,
//! `/jobs/goto?id=`, `/jobs/{id}`, `/failures`, `/workers`, `/schedules`, `/system`,
//! `/healthz`, `/events`, `POST /jobs/{id}/cancel`, `POST /jobs/requeue` with repeated
//! `ids`), plus `/entrypoints/{name}` and `/metrics` ([`crate::ops::prometheus_text`]).

mod assets;
mod data;
mod http;
mod live;
mod pages;

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use maud::Markup;
use postgres::Transaction;
use tiny_http::{Header, Method, Request, Response, Server};

use crate::connect::Pool;
use crate::error::{Error, Result};
use crate::job::{JobId, Status};
use crate::queue::Queue;
use crate::settings::Settings;

/// How the dashboard serves: credentials, timeouts, threads.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WebOptions {
    /// HTTP Basic credentials (user, password) every request must carry; none means no
    /// authentication (a warning is logged when the address is not loopback).
    pub credentials: Option<(String, String)>,
    /// How long a page waits for a pool connection before it answers 503.
    pub checkout_timeout: Duration,
    /// The statement timeout of every page's reads (`SET LOCAL statement_timeout`); a
    /// slower read answers 503.
    pub statement_timeout: Duration,
    /// A picked job whose heartbeat is older than this is stale (Workers page,
    /// `pgqueuer_stale_picked_jobs`), unless the request says `?stale_after=seconds`.
    pub stale_after: Duration,
    /// Threads answering requests (event streams have threads of their own).
    pub threads: usize,
}

impl Default for WebOptions {
    fn default() -> Self {
        WebOptions {
            credentials: None,
            checkout_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            stale_after: Duration::from_secs(300),
            threads: 4,
        }
    }
}

impl WebOptions {
    /// The defaults, with credentials from `PGQUEUER_WEB_USER` and
    /// `PGQUEUER_WEB_PASSWORD` (PgQueuer's variables) when both are set.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] when only one of the two is set, or one is empty.
    pub fn from_env() -> Result<WebOptions> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// [`WebOptions::from_env`] over any lookup (tests, a configuration file).
    ///
    /// # Errors
    /// As [`WebOptions::from_env`].
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<WebOptions> {
        let user = get("PGQUEUER_WEB_USER");
        let password = get("PGQUEUER_WEB_PASSWORD");
        let credentials = match (user, password) {
            (None, None) => None,
            (Some(u), Some(p)) if !u.is_empty() && !p.is_empty() => Some((u, p)),
            (u, p) => {
                let (setting, value) = if u.as_deref().is_none_or(str::is_empty) {
                    ("PGQUEUER_WEB_USER", u)
                } else {
                    ("PGQUEUER_WEB_PASSWORD", p.map(|_| String::new()))
                };
                return Err(Error::InvalidSetting {
                    setting,
                    value: value.unwrap_or_default(),
                    reason: "is unset or empty while the other of PGQUEUER_WEB_USER and \
                             PGQUEUER_WEB_PASSWORD is set; set both for Basic authentication, \
                             or neither"
                        .into(),
                });
            }
        };
        Ok(WebOptions {
            credentials,
            ..WebOptions::default()
        })
    }
}

/// The dashboard of one queue, ready to serve.
#[derive(Debug)]
pub struct Dashboard {
    pool: Pool,
    settings: Settings,
    options: WebOptions,
}

impl Dashboard {
    /// A dashboard of the queue named by `settings`, reading through `pool` (an
    /// application's own pool works: each request holds one connection for its reads).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a bad name.
    pub fn new(pool: Pool, settings: &Settings) -> Result<Dashboard> {
        settings.validate()?;
        Ok(Dashboard {
            pool,
            settings: settings.clone(),
            options: WebOptions::default(),
        })
    }

    /// Replaces the options.
    #[must_use]
    pub fn options(mut self, options: WebOptions) -> Dashboard {
        self.options = options;
        self
    }

    /// Binds `addr` (`host:port`; port 0 picks a free one) and serves on threads of its
    /// own until [`WebServer::shutdown`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `addr` when it cannot be bound (in use, not an
    /// address of this host) or `threads` is 0.
    pub fn serve(self, addr: &str) -> Result<WebServer> {
        if self.options.threads == 0 {
            return Err(Error::invalid("threads", "must be at least 1"));
        }
        let server = Server::http(addr)
            .map_err(|e| Error::invalid("addr", format!("cannot listen on {addr}: {e}")))?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| Error::invalid("addr", format!("{addr} is not a TCP address")))?;
        if self.options.credentials.is_none() && !bound.ip().is_loopback() {
            log::warn!(
                "pgqueuer web: serving {bound} WITHOUT authentication: anyone who can reach \
                 it can read every job and requeue or cancel jobs. Set PGQUEUER_WEB_USER and \
                 PGQUEUER_WEB_PASSWORD, or bind 127.0.0.1"
            );
        }
        let queue = Queue::with_settings(self.pool.clone(), &self.settings)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (feed, listener) = live::Feed::start(
            self.pool.clone(),
            self.settings.channel.clone(),
            Arc::clone(&stop),
        );
        let app = Arc::new(App {
            pool: self.pool,
            settings: self.settings,
            options: self.options,
            queue,
            feed,
            minutes: Mutex::new(data::Minutes::default()),
        });
        let server = Arc::new(server);
        // Threads started so far stop again if a later one cannot start.
        let failed = |threads: Vec<JoinHandle<()>>, e: std::io::Error| {
            stop.store(true, Ordering::Relaxed);
            for thread in threads {
                let _ = thread.join();
            }
            Error::Unexpected(format!("cannot start a web thread: {e}"))
        };
        let mut threads = vec![listener];
        // The day's transitions are read once before the first page asks for them.
        let warm = Arc::clone(&app);
        match std::thread::Builder::new()
            .name("pgqueuer-web-warm".into())
            .spawn(move || {
                if let Err(e) = warm.read(|tx| warm.buckets(tx, None)) {
                    log::info!("pgqueuer web: the first read of the day's figures failed: {e:?}");
                }
            }) {
            Ok(thread) => threads.push(thread),
            Err(e) => return Err(failed(threads, e)),
        }
        for i in 0..app.options.threads {
            let (app, server, stop) = (Arc::clone(&app), Arc::clone(&server), Arc::clone(&stop));
            let spawned = std::thread::Builder::new()
                .name(format!("pgqueuer-web-{i}"))
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match server.recv_timeout(Duration::from_millis(200)) {
                            Ok(Some(request)) => app.handle(request),
                            Ok(None) => {}
                            Err(e) => {
                                log::warn!("pgqueuer web: accepting a request failed: {e}");
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        }
                    }
                });
            match spawned {
                Ok(thread) => threads.push(thread),
                Err(e) => return Err(failed(threads, e)),
            }
        }
        log::info!("pgqueuer web: serving http://{bound}");
        Ok(WebServer {
            addr: bound,
            server,
            stop,
            threads,
            feed: Arc::clone(&app.feed),
        })
    }
}

/// A running dashboard.
pub struct WebServer {
    addr: SocketAddr,
    server: Arc<Server>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    feed: Arc<live::Feed>,
}

impl std::fmt::Debug for WebServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl WebServer {
    /// The address it listens on (with the port chosen when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving: threads are joined, and open event streams (each on a thread of
    /// its own, which notices within half a second) tell their pages and end. Dropping
    /// the server does the same.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    /// Blocks until the server stops (for a program whose only job is serving; it stops
    /// when the process does).
    pub fn join(mut self) {
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.server.unblock();
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while self.feed.open_streams() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop_and_join();
        }
    }
}

/// What every handler thread shares.
struct App {
    pool: Pool,
    settings: Settings,
    options: WebOptions,
    queue: Queue,
    feed: Arc<live::Feed>,
    /// Transitions per minute, kept between requests (one reader for every viewer).
    minutes: Mutex<data::Minutes>,
}

/// A response before it is sent.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
}

impl Reply {
    fn html(status: u16, page: &Markup) -> Reply {
        Reply {
            status,
            content_type: "text/html; charset=utf-8",
            body: page.0.clone().into_bytes(),
            headers: Vec::new(),
        }
    }

    fn text(status: u16, content_type: &'static str, body: String) -> Reply {
        Reply {
            status,
            content_type,
            body: body.into_bytes(),
            headers: Vec::new(),
        }
    }

    fn redirect(to: &str) -> Reply {
        Reply {
            status: 303,
            content_type: "text/plain; charset=utf-8",
            body: format!("See {to}\n").into_bytes(),
            headers: vec![("Location", to.to_owned())],
        }
    }
}

/// Why a request got no page.
#[derive(Debug)]
enum Problem {
    NotFound(String),
    BadRequest(String),
    Forbidden(String),
    /// The database did not answer in time, or is down.
    Unavailable(String),
    Internal(String),
}

impl Problem {
    fn reply(&self) -> Reply {
        let (status, title, detail) = match self {
            Problem::NotFound(d) => (404, "Not found", d),
            Problem::BadRequest(d) => (400, "Bad request", d),
            Problem::Forbidden(d) => (403, "Forbidden", d),
            Problem::Unavailable(d) => (503, "Database unavailable", d),
            Problem::Internal(d) => (500, "Server error", d),
        };
        let mut reply = Reply::html(status, &pages::problem(status, title, detail));
        if status == 503 {
            reply.headers.push(("Retry-After", "5".into()));
        }
        reply
    }
}

impl From<Error> for Problem {
    fn from(e: Error) -> Problem {
        let unavailable = match &e {
            Error::Pool(_) | Error::Connect { .. } => true,
            Error::Db(db) => {
                db.is_closed()
                    || db.code() == Some(&postgres::error::SqlState::QUERY_CANCELED)
                    || db.as_db_error().is_none()
            }
            _ => false,
        };
        if unavailable {
            Problem::Unavailable(format!(
                "{e}. The page will load again once the database answers."
            ))
        } else {
            Problem::Internal(e.to_string())
        }
    }
}

impl From<postgres::Error> for Problem {
    fn from(e: postgres::Error) -> Problem {
        Problem::from(Error::from(e))
    }
}

type Handled = std::result::Result<Reply, Problem>;

/// A request's parts the routes read.
struct Incoming<'a> {
    method: &'a Method,
    path: &'a str,
    query: Vec<(String, String)>,
}

impl Incoming<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }
}

fn header<'r>(request: &'r Request, name: &'static str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

impl App {
    fn handle(&self, mut request: Request) {
        let url = request.url().to_owned();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let reply = if !self.authorized(&request) {
            let mut reply = Reply::text(
                401,
                "text/plain; charset=utf-8",
                "Authentication required (HTTP Basic).\n".into(),
            );
            reply.headers.push((
                "WWW-Authenticate",
                "Basic realm=\"pgqueuer\", charset=\"UTF-8\"".into(),
            ));
            reply
        } else if path == "/events" && *request.method() == Method::Get {
            match self.feed.subscribe() {
                Some(subscription) => return live::stream(&self.feed, request, subscription),
                None => Problem::Unavailable(format!(
                    "{} live pages are open already; this one will poll.",
                    live::MAX_STREAMS
                ))
                .reply(),
            }
        } else {
            match http::pairs(query) {
                None => Problem::BadRequest(
                    "the query string is not valid (a malformed %-escape or not UTF-8)".into(),
                )
                .reply(),
                Some(query) => {
                    let method = request.method().clone();
                    let incoming = Incoming {
                        method: &method,
                        path,
                        query,
                    };
                    self.route(&incoming, &mut request)
                        .unwrap_or_else(|p| p.reply())
                }
            }
        };
        let mut response = Response::from_data(reply.body).with_status_code(reply.status);
        let mut headers = vec![
            ("Content-Type", reply.content_type.to_owned()),
            ("Cache-Control", "no-store".to_owned()),
            ("X-Content-Type-Options", "nosniff".to_owned()),
            ("X-Frame-Options", "DENY".to_owned()),
            (
                "Content-Security-Policy",
                "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
                 frame-ancestors 'none'"
                    .to_owned(),
            ),
        ];
        headers.extend(reply.headers);
        for (name, value) in headers {
            if let Ok(h) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
                response.add_header(h);
            }
        }
        if let Err(e) = request.respond(response) {
            log::debug!("pgqueuer web: a response could not be sent: {e}");
        }
    }

    fn authorized(&self, request: &Request) -> bool {
        let Some((user, password)) = &self.options.credentials else {
            return true;
        };
        let expected = format!("{user}:{password}");
        header(request, "Authorization")
            .and_then(http::basic_credentials)
            .is_some_and(|given| http::constant_time_eq(&given, expected.as_bytes()))
    }

    fn route(&self, r: &Incoming<'_>, request: &mut Request) -> Handled {
        let segments: Vec<&str> = r.path.trim_matches('/').split('/').collect();
        match (r.method, segments.as_slice()) {
            (Method::Get | Method::Head, [""]) => self.overview(),
            (Method::Get | Method::Head, ["entrypoints"]) => self.entrypoints(r),
            (Method::Get | Method::Head, ["entrypoints", name]) => self.entrypoint(name),
            (Method::Get | Method::Head, ["jobs"]) => self.jobs(r),
            (Method::Get | Method::Head, ["jobs", "goto"]) => {
                let id = job_id(r.param("id").unwrap_or(""))?;
                Ok(Reply::redirect(&format!("/jobs/{id}")))
            }
            (Method::Get | Method::Head, ["jobs", id]) => self.job(job_id(id)?),
            (Method::Post, ["jobs", "requeue"]) => {
                self.check_origin(request)?;
                let form = read_form(request)?;
                let ids = form
                    .iter()
                    .filter(|(k, _)| k == "ids")
                    .map(|(_, v)| job_id(v))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                if ids.is_empty() {
                    return Err(Problem::BadRequest(
                        "no job selected: send one or more `ids` fields".into(),
                    ));
                }
                self.queue.requeue_failed(&ids)?;
                Ok(Reply::redirect(&back_to(request, "/failures")))
            }
            (Method::Post, ["jobs", id, "cancel"]) => {
                let id = job_id(id)?;
                self.check_origin(request)?;
                self.queue.cancel(&[id])?;
                Ok(Reply::redirect(&format!("/jobs/{id}")))
            }
            (Method::Get | Method::Head, ["failures"]) => self.failures(),
            (Method::Get | Method::Head, ["workers"]) => self.workers(r),
            (Method::Get | Method::Head, ["schedules"]) => self.schedules(),
            (Method::Get | Method::Head, ["system"]) => self.system(),
            (Method::Get | Method::Head, ["healthz"]) => Ok(self.healthz()),
            (Method::Get | Method::Head, ["metrics"]) => self.metrics(),
            (Method::Get | Method::Head, ["static", "style.css"]) => Ok(Reply::text(
                200,
                "text/css; charset=utf-8",
                assets::STYLE.to_owned(),
            )),
            (Method::Get | Method::Head, ["static", "live.js"]) => Ok(Reply::text(
                200,
                "text/javascript; charset=utf-8",
                assets::SCRIPT.to_owned(),
            )),
            (_, ["jobs", "requeue"] | ["jobs", _, "cancel"]) => Err(Problem::BadRequest(format!(
                "{} changes jobs and takes POST only (from the dashboard's buttons)",
                r.path
            ))),
            _ => Err(Problem::NotFound(format!(
                "There is no page at {}.",
                r.path
            ))),
        }
    }

    fn check_origin(&self, request: &Request) -> std::result::Result<(), Problem> {
        if http::same_origin(
            header(request, "Host"),
            header(request, "Origin"),
            header(request, "Referer"),
            header(request, "Sec-Fetch-Site"),
        ) {
            Ok(())
        } else {
            Err(Problem::Forbidden(
                "This action is taken only from the dashboard's own pages (the request's \
                 Origin or Referer does not match this server). Nothing was changed."
                    .into(),
            ))
        }
    }

    /// Runs `read` in a transaction with the statement timeout, on a connection taken
    /// within the checkout timeout.
    fn read<T>(
        &self,
        read: impl FnOnce(&mut Transaction<'_>) -> Result<T>,
    ) -> std::result::Result<T, Problem> {
        let mut conn = self
            .pool
            .get_timeout(self.options.checkout_timeout)
            .map_err(|e| {
                Problem::Unavailable(format!(
                    "no database connection within {} ms ({e}). The page will load again once \
                     the database answers.",
                    self.options.checkout_timeout.as_millis()
                ))
            })?;
        let mut tx = conn.client().transaction()?;
        tx.batch_execute(&format!(
            "SET LOCAL statement_timeout = {}",
            self.options.statement_timeout.as_millis().max(1)
        ))?;
        let value = read(&mut tx)?;
        tx.commit()?;
        Ok(value)
    }

    /// The transitions of the last day per minute, from the shared [`data::Minutes`].
    fn buckets(&self, tx: &mut Transaction<'_>, only: Option<&str>) -> Result<Vec<data::Bucket>> {
        self.minutes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .read(tx, &self.settings, only)
    }

    fn page(&self, title: &str, here: &str, body: &Markup) -> Handled {
        Ok(Reply::html(200, &pages::layout(title, here, body)))
    }

    fn overview(&self) -> Handled {
        let s = &self.settings;
        let (entrypoints, buckets, workers, now) = self.read(|tx| {
            Ok((
                data::entrypoint_counts(tx, s, None)?,
                self.buckets(tx, None)?,
                crate::ops::active_workers(tx, s)?.len(),
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
                now,
            }),
        )
    }

    fn entrypoints(&self, r: &Incoming<'_>) -> Handled {
        let window = r.param("window").unwrap_or("1h");
        let Some((label, secs)) = pages::WINDOWS.iter().find(|(l, _)| *l == window) else {
            return Err(Problem::BadRequest(format!(
                "window={window} is not one of 1h, 6h, 24h"
            )));
        };
        let s = &self.settings;
        let span = Duration::from_secs(*secs);
        let (rows, durations, mut buckets) = self.read(|tx| {
            Ok((
                data::entrypoint_counts(tx, s, None)?,
                data::durations(tx, s, span, None)?,
                self.buckets(tx, None)?,
            ))
        })?;
        let since = SystemTime::now() - span;
        buckets.retain(|b| b.minute >= since);
        self.page(
            "Entrypoints",
            "/entrypoints",
            &pages::entrypoints(&rows, &durations, &buckets, label, SystemTime::now()),
        )
    }

    fn entrypoint(&self, name: &str) -> Handled {
        let name = http::pairs(&format!("n={name}"))
            .and_then(|p| p.into_iter().next())
            .map(|(_, v)| v)
            .ok_or_else(|| Problem::BadRequest("the entrypoint name is not valid".into()))?;
        let s = &self.settings;
        let day = Duration::from_secs(86_400);
        let (counts, slots, durations, exceptions, buckets) = self.read(|tx| {
            Ok((
                data::entrypoint_counts(tx, s, Some(&name))?,
                data::held_slots(tx, s, &name)?,
                data::durations(tx, s, day, Some(&name))?,
                data::exceptions(tx, s, Some(&name), 20)?,
                self.buckets(tx, Some(&name))?,
            ))
        })?;
        if counts.is_empty() && buckets.is_empty() && exceptions.is_empty() {
            return Err(Problem::NotFound(format!(
                "No entrypoint {name} has jobs in the queue or log rows in the last 24 h."
            )));
        }
        self.page(
            &format!("Entrypoint {name}"),
            "/entrypoints",
            &pages::entrypoint(&pages::EntrypointPage {
                name: &name,
                counts: counts.first(),
                slots: &slots,
                durations: durations.first(),
                exceptions: &exceptions,
                buckets: &buckets,
                now: SystemTime::now(),
            }),
        )
    }

    fn jobs(&self, r: &Incoming<'_>) -> Handled {
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
        let s = &self.settings;
        let mut rows = self.read(|tx| {
            data::jobs(
                tx,
                s,
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

    fn job(&self, id: JobId) -> Handled {
        let (job, history) = self.read(|tx| data::job(tx, &self.queue, id))?;
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

    fn failures(&self) -> Handled {
        let s = &self.settings;
        let (held, exceptions) = self.read(|tx| {
            Ok((
                data::failed(tx, &self.queue, 200)?,
                data::exceptions(tx, s, None, 50)?,
            ))
        })?;
        self.page(
            "Failures",
            "/failures",
            &pages::failures(&held, &exceptions, SystemTime::now()),
        )
    }

    fn workers(&self, r: &Incoming<'_>) -> Handled {
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

    fn schedules(&self) -> Handled {
        let s = &self.settings;
        let rows = self.read(|tx| crate::schedules::list(tx, s))?;
        self.page(
            "Schedules",
            "/schedules",
            &pages::schedules(&rows, SystemTime::now()),
        )
    }

    fn system(&self) -> Handled {
        let s = &self.settings;
        let (info, verify) = self.read(|tx| {
            let info = data::system(tx, s)?;
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
            Ok((info, verify))
        })?;
        self.page("System", "/system", &pages::system(&info, &verify))
    }

    fn healthz(&self) -> Reply {
        match self.read(|tx| Ok(tx.query_one("SELECT 1", &[])?)) {
            Ok(_) => Reply::text(200, "text/plain; charset=utf-8", "ok\n".into()),
            Err(p) => {
                let detail = match p {
                    Problem::Unavailable(d) | Problem::Internal(d) => d,
                    other => format!("{other:?}"),
                };
                Reply::text(
                    503,
                    "text/plain; charset=utf-8",
                    format!("unavailable: {detail}\n"),
                )
            }
        }
    }

    fn metrics(&self) -> Handled {
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

fn job_id(text: &str) -> std::result::Result<JobId, Problem> {
    text.trim()
        .parse::<JobId>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| {
            Problem::BadRequest(format!("`{text}` is not a job id (a positive integer)"))
        })
}

/// The most bytes a form may carry (a requeue of thousands of ids fits).
const MAX_FORM_BYTES: usize = 256 << 10;

fn read_form(request: &mut Request) -> std::result::Result<Vec<(String, String)>, Problem> {
    let mut body = Vec::new();
    request
        .as_reader()
        .take(MAX_FORM_BYTES as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| Problem::BadRequest(format!("the form could not be read: {e}")))?;
    if body.len() > MAX_FORM_BYTES {
        return Err(Problem::BadRequest(format!(
            "the form is larger than {MAX_FORM_BYTES} bytes"
        )));
    }
    let text =
        String::from_utf8(body).map_err(|_| Problem::BadRequest("the form is not UTF-8".into()))?;
    http::pairs(&text).ok_or_else(|| {
        Problem::BadRequest("the form is not valid application/x-www-form-urlencoded".into())
    })
}

/// Where to send the browser after an action: the page it came from when that is a page
/// of this server, `fallback` otherwise.
fn back_to(request: &Request, fallback: &str) -> String {
    let host = header(request, "Host").unwrap_or_default();
    header(request, "Referer")
        .and_then(|r| {
            r.strip_prefix("http://")
                .or_else(|| r.strip_prefix("https://"))
        })
        .and_then(|rest| rest.strip_prefix(host))
        // A path of this server only: `//host/...` would send the browser elsewhere.
        .filter(|path| path.starts_with('/') && !path.starts_with("//") && !path.contains('\\'))
        .map_or_else(|| fallback.to_owned(), ToOwned::to_owned)
}
