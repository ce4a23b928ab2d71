//! The web dashboard and Prometheus endpoint: `pgq web`, or a thread of an application's
//! own serving its pool's queue (an embedded admin page). Feature `web`.
//!
//! An HTTP/1 server (hyper, on a tokio runtime that lives on one thread of the
//! dashboard's own and never leaves it) with a few handler threads for the pages'
//! blocking reads; pages rendered on the server (maud), every asset compiled in. Pages
//! keep themselves current through one LISTEN connection on the queue's channel and a
//! Server-Sent Events stream per open page (`/events`), polling where LISTEN cannot
//! work. Reading a page never writes to the database; the two actions (requeue, cancel)
//! are POSTs from a page of this server only, written by the same [`Queue`] functions as
//! `pgq requeue` and `pgq cancel`.
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
//!
//! # Hostile clients
//!
//! Whoever can reach the port is assumed hostile until checked. A request head is at
//! most 32 KiB and 64 fields (431), a body 256 KiB (413, refused from its declared
//! length before a byte is read); a head must arrive within
//! [`WebOptions::header_read_timeout`] (which also closes idle keep-alive connections),
//! a body within [`WebOptions::body_read_timeout`] (408), and a client that reads
//! nothing of its response is dropped after [`WebOptions::write_timeout`]. At most
//! [`WebOptions::max_connections`] connections are served at once (more get 503 and are
//! closed); when the process runs out of file descriptors, accepting backs off and goes
//! on. A handler that panics answers 500 and its thread serves on.
//!
//! Only requests for the names in the allowlist are answered (421 otherwise, on every
//! method): the bound address and `localhost`, `127.0.0.1` and `[::1]` on the bound
//! port, plus [`WebOptions::allowed_hosts`] (`PGQUEUER_WEB_ALLOWED_HOSTS`). This stops
//! DNS rebinding (a page of another name pointed at this address). Behind a reverse
//! proxy, or bound to `0.0.0.0` and reached by a name or another address, list the
//! names clients use. Actions also need an `Origin` (or `Referer`) of an allowed name.

mod assets;
mod data;
mod http;
mod live;
mod pages;
mod server;

/// The dashboard's parsers of outside input, for [`crate::fuzzing`].
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz {
    use super::{http, pages};

    /// A query string, form body, header value or host name as a client sends it: no
    /// parser panics; a decoded parameter never holds NUL; `encode` round-trips; a host
    /// allowed by name is allowed again on the port it was allowed with.
    pub(crate) fn request_text(text: &str) {
        if let Ok(pairs) = http::pairs(text) {
            for (name, value) in pairs {
                assert!(!name.contains('\0') && !value.contains('\0'), "{text:?}");
            }
        }
        if !text.contains('\0') {
            assert_eq!(http::decode(&http::encode(text)).as_deref(), Ok(text));
        }
        let _ = http::basic_credentials(text);
        let bound = std::net::SocketAddr::from(([127, 0, 0, 1], 8080));
        let hosts = http::Hosts::new(bound, &[text.to_owned()]);
        assert!(hosts.allows("127.0.0.1:8080") && hosts.allows("localhost:8080"));
        let _ = hosts.allows(text);
        let _ = http::check_allowed_host(text);
        let _ = http::same_origin(&hosts, Some(text), Some(text), Some(text));
        let _ = http::same_origin(&hosts, None, Some(text), None);
    }

    /// A payload (its first bytes, of `whole` in all) and headers text written by any
    /// program: rendering never panics and stays bounded.
    pub(crate) fn payload(shown: &[u8], extra: usize) {
        pages::fuzz_views(shown, shown.len() + extra % 1_000_000);
    }
}

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use maud::Markup;
use postgres::Transaction;

use self::server::{Admit, Head, Reply, Request, Streaming, Verb};
use crate::connect::Pool;
use crate::error::{Error, Result};
use crate::job::{JobId, Status};
use crate::queue::Queue;
use crate::settings::Settings;

/// How the dashboard serves: credentials, the names it answers for, timeouts, threads
/// and the bounds on what clients may send.
#[derive(Clone)]
#[non_exhaustive]
pub struct WebOptions {
    /// HTTP Basic credentials (user, password) every request must carry; none means no
    /// authentication (a warning is logged when the address is not loopback). `Debug`
    /// shows the user only. Defaults to none, or `PGQUEUER_WEB_USER` and
    /// `PGQUEUER_WEB_PASSWORD` with [`WebOptions::from_env`].
    pub credentials: Option<(String, String)>,
    /// Names (`Host` values) answered besides the bound address and `localhost`,
    /// `127.0.0.1` and `[::1]` on the bound port: `name` (any port), `name:port`,
    /// `[v6 address]:port`, or `*` to answer every name (which gives up the defence
    /// against DNS rebinding). Other names get 421. Needed behind a reverse proxy, and
    /// when bound to `0.0.0.0` for any name or address but loopback. Defaults to none,
    /// or the comma-separated `PGQUEUER_WEB_ALLOWED_HOSTS` with
    /// [`WebOptions::from_env`].
    pub allowed_hosts: Vec<String>,
    /// How long a page waits for a pool connection before it answers 503. Defaults to
    /// 2 s.
    pub checkout_timeout: Duration,
    /// The statement timeout of every page's reads (`SET LOCAL statement_timeout`); a
    /// slower read answers 503. Defaults to 5 s.
    pub statement_timeout: Duration,
    /// A picked job whose heartbeat is older than this is stale (Workers page,
    /// `pgqueuer_stale_picked_jobs`), unless the request says `?stale_after=seconds`.
    /// Defaults to 5 min.
    pub stale_after: Duration,
    /// Threads answering page requests (event streams and the HTTP work itself run on
    /// one thread of their own). Defaults to 4.
    pub threads: usize,
    /// Connections served at once; more are answered 503 and closed, so a flood of
    /// connections costs a bounded amount of memory and file descriptors. A browser
    /// opens up to six per page plus one per live page. Defaults to 256.
    pub max_connections: usize,
    /// How long a connection may take to send a request's head, counted from when it
    /// starts waiting for one: a client trickling a header a byte at a time (slowloris)
    /// is closed after it, and so is an idle keep-alive connection. Defaults to 10 s.
    pub header_read_timeout: Duration,
    /// How long a request body (a form) may take to arrive; 408 after it. Defaults to
    /// 10 s.
    pub body_read_timeout: Duration,
    /// How long a write may wait for the client to take bytes; the connection is closed
    /// after it (a client that never reads its response). Event streams write a few
    /// bytes every 15 s at least, and meet it only when their page stops reading.
    /// Defaults to 10 s.
    pub write_timeout: Duration,
}

impl Default for WebOptions {
    fn default() -> Self {
        WebOptions {
            credentials: None,
            allowed_hosts: Vec::new(),
            checkout_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            stale_after: Duration::from_secs(300),
            threads: 4,
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for WebOptions {
    /// Every field, the password replaced by `<redacted>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let credentials = self
            .credentials
            .as_ref()
            .map(|(user, _)| (user.as_str(), "<redacted>"));
        f.debug_struct("WebOptions")
            .field("credentials", &credentials)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("checkout_timeout", &self.checkout_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("stale_after", &self.stale_after)
            .field("threads", &self.threads)
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("write_timeout", &self.write_timeout)
            .finish()
    }
}

/// The longest any of the options' timeouts may be.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

impl WebOptions {
    /// The defaults, with credentials from `PGQUEUER_WEB_USER` and
    /// `PGQUEUER_WEB_PASSWORD` (PgQueuer's variables) when both are set, and allowed
    /// host names from `PGQUEUER_WEB_ALLOWED_HOSTS` (comma-separated).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] when only one of the two credentials is set, or one is
    /// empty, or an allowed host is not a host name with an optional port.
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
        let mut allowed_hosts = Vec::new();
        if let Some(list) = get("PGQUEUER_WEB_ALLOWED_HOSTS") {
            for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                http::check_allowed_host(entry).map_err(|reason| Error::InvalidSetting {
                    setting: "PGQUEUER_WEB_ALLOWED_HOSTS",
                    value: list.clone(),
                    reason,
                })?;
                allowed_hosts.push(entry.to_owned());
            }
        }
        Ok(WebOptions {
            credentials,
            allowed_hosts,
            ..WebOptions::default()
        })
    }

    /// Rejects what cannot be served: zero threads or connections, a zero or
    /// day-long timeout, a bad allowed host.
    fn check(&self) -> Result<()> {
        if self.threads == 0 || self.threads > 1024 {
            return Err(Error::invalid("threads", "must be 1 to 1024"));
        }
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return Err(Error::invalid("max_connections", "must be 1 to 1000000"));
        }
        for (field, value) in [
            ("checkout_timeout", self.checkout_timeout),
            ("statement_timeout", self.statement_timeout),
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("write_timeout", self.write_timeout),
        ] {
            if value < Duration::from_millis(1) || value > MAX_TIMEOUT {
                return Err(Error::invalid(
                    field,
                    format!("must be 1 ms to 24 h, not {value:?}"),
                ));
            }
        }
        if self.stale_after < Duration::from_secs(1)
            || self.stale_after > Duration::from_secs(10 * 365 * 86_400)
        {
            return Err(Error::invalid(
                "stale_after",
                format!("must be 1 s to 10 years, not {:?}", self.stale_after),
            ));
        }
        for entry in &self.allowed_hosts {
            http::check_allowed_host(entry).map_err(|e| Error::invalid("allowed_hosts", e))?;
        }
        Ok(())
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
    /// address of this host), or naming the option that is out of range (`threads` 0,
    /// a zero timeout, an allowed host that is not a host name).
    pub fn serve(self, addr: &str) -> Result<WebServer> {
        self.options.check()?;
        let queue = Queue::with_settings(self.pool.clone(), &self.settings)?;
        let stop = Arc::new(AtomicBool::new(false));
        let started =
            |e: std::io::Error| Error::Unexpected(format!("cannot start a web thread: {e}"));
        let (feed, listener) = live::Feed::start(
            self.pool.clone(),
            self.settings.channel.clone(),
            Arc::clone(&stop),
        )
        .map_err(started)?;
        let mut threads = vec![listener];
        // Whatever fails from here stops the threads started so far.
        let abandon = |threads: Vec<JoinHandle<()>>| {
            stop.store(true, Ordering::Relaxed);
            for thread in threads {
                let _ = thread.join();
            }
        };
        let limits = server::Limits {
            threads: self.options.threads,
            max_connections: self.options.max_connections,
            header_read_timeout: self.options.header_read_timeout,
            body_read_timeout: self.options.body_read_timeout,
            write_timeout: self.options.write_timeout,
        };
        let listening = match server::Bound::bind(addr) {
            Ok(listening) => listening,
            Err(e) => {
                abandon(threads);
                return Err(Error::invalid(
                    "addr",
                    format!("cannot listen on {addr}: {e}"),
                ));
            }
        };
        let bound = listening.addr();
        let app = Arc::new(App {
            pool: self.pool,
            settings: self.settings,
            hosts: http::Hosts::new(bound, &self.options.allowed_hosts),
            options: self.options,
            queue,
            feed: Arc::clone(&feed),
            minutes: Mutex::new(data::Minutes::default()),
        });
        let running = match listening.serve(limits, Arc::clone(&app) as Arc<dyn server::Handler>) {
            Ok(running) => running,
            Err(e) => {
                abandon(threads);
                return Err(started(e));
            }
        };
        if app.options.credentials.is_none() && !bound.ip().is_loopback() {
            log::warn!(
                "pgqueuer web: serving {bound} WITHOUT authentication: anyone who can reach \
                 it can read every job and requeue or cancel jobs. Set PGQUEUER_WEB_USER and \
                 PGQUEUER_WEB_PASSWORD, or bind 127.0.0.1"
            );
        }
        if bound.ip().is_unspecified() && app.options.allowed_hosts.is_empty() {
            log::warn!(
                "pgqueuer web: serving {bound} on every interface, but answering only \
                 requests for localhost, 127.0.0.1 and [::1] on port {port}: requests by \
                 any other name or address get 421. List the names clients use in \
                 PGQUEUER_WEB_ALLOWED_HOSTS (pgq web --allowed-host, \
                 WebOptions::allowed_hosts)",
                port = bound.port()
            );
        }
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
            Err(e) => {
                let mut running = running;
                running.stop();
                running.join();
                abandon(threads);
                return Err(started(e));
            }
        }
        log::info!("pgqueuer web: serving http://{bound}");
        Ok(WebServer {
            addr: bound,
            running: Some(running),
            stop,
            threads,
            feed,
        })
    }
}

/// A running dashboard.
pub struct WebServer {
    addr: SocketAddr,
    /// The HTTP server; `None` once stopped.
    running: Option<server::Running>,
    /// Ends the LISTEN and warm-up threads (the feed's loops read it).
    stop: Arc<AtomicBool>,
    /// The LISTEN and warm-up threads.
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

    /// Stops serving: open event streams tell their pages and end, requests in flight
    /// are answered (for up to two seconds), and every thread is joined. Dropping the
    /// server does the same.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    /// Blocks until the server stops (for a program whose only job is serving; it stops
    /// when the process does).
    pub fn join(mut self) {
        if let Some(running) = self.running.as_mut() {
            running.join();
        }
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }

    fn stop_and_join(&mut self) {
        self.feed.close();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(mut running) = self.running.take() {
            running.stop();
            running.join();
        }
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        if self.running.is_some() || !self.threads.is_empty() {
            self.stop_and_join();
        }
    }
}

/// What every handler thread shares.
struct App {
    pool: Pool,
    settings: Settings,
    options: WebOptions,
    /// The names requests may be for (from the bound address and the options).
    hosts: http::Hosts,
    queue: Queue,
    feed: Arc<live::Feed>,
    /// Transitions per minute, kept between requests (one reader for every viewer).
    minutes: Mutex<data::Minutes>,
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

impl From<http::BadParam> for Problem {
    fn from(e: http::BadParam) -> Problem {
        Problem::BadRequest(format!("{e}. Nothing was read or changed."))
    }
}

type Handled = std::result::Result<Reply, Problem>;

/// A request's parts the routes read.
struct Incoming<'a> {
    head: &'a Head,
    /// The query string, decoded.
    query: Vec<(String, String)>,
    /// The body (a form), read already.
    body: &'a [u8],
}

impl Incoming<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }
}

impl server::Handler for App {
    /// The checks that need no database, in order: the host (421), the credentials
    /// (401); then an event stream starts here, and every other request goes to a
    /// handler thread.
    fn admit(&self, head: &Head) -> Admit {
        if let Some(refused) = self.misdirected(head) {
            return Admit::Reply(refused);
        }
        if !self.authorized(head) {
            let mut reply = Reply::text(
                401,
                "text/plain; charset=utf-8",
                "Authentication required (HTTP Basic).\n".into(),
            );
            reply.headers.push((
                "WWW-Authenticate",
                "Basic realm=\"pgqueuer\", charset=\"UTF-8\"".into(),
            ));
            return Admit::Reply(reply);
        }
        if head.path == "/events" && head.verb == Verb::Get {
            return match self.feed.stream() {
                Some(body) => Admit::Stream(Streaming {
                    content_type: "text/event-stream",
                    headers: vec![("X-Accel-Buffering", "no".into())],
                    body,
                }),
                None => Admit::Reply(
                    Problem::Unavailable(format!(
                        "{} live pages are open already; this one will poll.",
                        live::MAX_STREAMS
                    ))
                    .reply(),
                ),
            };
        }
        Admit::Handle
    }

    fn respond(&self, request: Request) -> Reply {
        let answer = http::pairs(&request.head.query)
            .map_err(Problem::from)
            .and_then(|query| {
                self.route(&Incoming {
                    head: &request.head,
                    query,
                    body: &request.body,
                })
            });
        answer.unwrap_or_else(|p| p.reply())
    }
}

impl App {
    /// The 421 answer of a request for a name the dashboard does not answer for (and the
    /// 400 of one naming several).
    fn misdirected(&self, head: &Head) -> Option<Reply> {
        // An absolute-form target's authority stands for `Host` (RFC 9112 3.2.2); both
        // must be allowed when both are sent.
        if head.headers.get_all("host").iter().count() > 1 {
            // Which one is meant is the question request smuggling asks (RFC 9112 3.2).
            return Some(Reply::text(
                400,
                "text/plain; charset=utf-8",
                "A request carries one Host header, not several. Nothing was read or \
                 changed.\n"
                    .into(),
            ));
        }
        let host = head.header("host");
        let named = [head.authority.as_deref(), host];
        if host.is_some() && named.iter().flatten().all(|h| self.hosts.allows(h)) {
            return None;
        }
        let shown: String = named
            .iter()
            .flatten()
            .find(|h| !self.hosts.allows(h))
            .map_or("(no Host header)", |h| *h)
            .chars()
            .take(100)
            .collect();
        log::debug!("pgqueuer web: refused a request for host {shown:?} (not in the allowlist)");
        Some(Reply::text(
            421,
            "text/plain; charset=utf-8",
            format!(
                "Misdirected request: this dashboard does not answer for the host name \
                 `{shown}`. It answers for its own address and localhost, 127.0.0.1 and \
                 [::1] on its port; a request by any other name could come from a page \
                 of that name pointed at this server (DNS rebinding). To allow a name, \
                 add it to PGQUEUER_WEB_ALLOWED_HOSTS (comma-separated: name or \
                 name:port), or pass pgq web --allowed-host NAME, or set \
                 WebOptions::allowed_hosts. Nothing was read or changed.\n"
            ),
        ))
    }

    fn authorized(&self, head: &Head) -> bool {
        let Some((user, password)) = &self.options.credentials else {
            return true;
        };
        let expected = format!("{user}:{password}");
        head.header("authorization")
            .and_then(http::basic_credentials)
            .is_some_and(|given| http::constant_time_eq(&given, expected.as_bytes()))
    }

    fn route(&self, r: &Incoming<'_>) -> Handled {
        let segments: Vec<&str> = r.head.path.trim_matches('/').split('/').collect();
        let read = matches!(r.head.verb, Verb::Get | Verb::Head);
        match (r.head.verb, segments.as_slice()) {
            (_, [""]) if read => self.overview(),
            (_, ["entrypoints"]) if read => self.entrypoints(r),
            (_, ["entrypoints", name]) if read => self.entrypoint(name),
            (_, ["jobs"]) if read => self.jobs(r),
            (_, ["jobs", "goto"]) if read => {
                let id = job_id(r.param("id").unwrap_or(""))?;
                Ok(Reply::redirect(&format!("/jobs/{id}")))
            }
            (_, ["jobs", id]) if read => self.job(job_id(id)?),
            (Verb::Post, ["jobs", "requeue"]) => {
                self.check_origin(r.head)?;
                let form = read_form(r.body)?;
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
                Ok(Reply::redirect(&back_to(r.head, "/failures")))
            }
            (Verb::Post, ["jobs", id, "cancel"]) => {
                let id = job_id(id)?;
                self.check_origin(r.head)?;
                self.queue.cancel(&[id])?;
                Ok(Reply::redirect(&format!("/jobs/{id}")))
            }
            (_, ["failures"]) if read => self.failures(),
            (_, ["workers"]) if read => self.workers(r),
            (_, ["schedules"]) if read => self.schedules(),
            (_, ["system"]) if read => self.system(),
            (_, ["healthz"]) if read && r.param("deep").is_some_and(|d| d != "0") => {
                Ok(self.deep_health())
            }
            (_, ["healthz"]) if read => Ok(self.healthz()),
            (_, ["metrics"]) if read => self.metrics(),
            (_, ["static", "style.css"]) if read => Ok(Reply::text(
                200,
                "text/css; charset=utf-8",
                assets::STYLE.to_owned(),
            )),
            (_, ["static", "live.js"]) if read => Ok(Reply::text(
                200,
                "text/javascript; charset=utf-8",
                assets::SCRIPT.to_owned(),
            )),
            (_, ["jobs", "requeue"] | ["jobs", _, "cancel"]) => Err(Problem::BadRequest(format!(
                "{} changes jobs and takes POST only (from the dashboard's buttons)",
                r.head.path
            ))),
            _ => Err(Problem::NotFound(format!(
                "There is no page at {}.",
                r.head.path
            ))),
        }
    }

    fn check_origin(&self, head: &Head) -> std::result::Result<(), Problem> {
        if http::same_origin(
            &self.hosts,
            head.header("origin"),
            head.header("referer"),
            head.header("sec-fetch-site"),
        ) {
            Ok(())
        } else {
            Err(Problem::Forbidden(
                "This action is taken only from the dashboard's own pages (the request's \
                 Origin or Referer is not a name this server answers for). Nothing was \
                 changed."
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
        let name = http::decode(name).map_err(|why| http::BadParam {
            name: "the entrypoint name in the path".into(),
            why,
        })?;
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
        let info = self.read(|tx| {
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

    /// `/healthz?deep=1`: the queue's health verdict ([`crate::ops::health`]) as JSON;
    /// 200 for OK and DEGRADED (the queue works), 503 for STALLED and when the database
    /// cannot say, so a load balancer or an uptime check can act on the status alone.
    fn deep_health(&self) -> Reply {
        let s = &self.settings;
        let options = crate::ops::HealthOptions::default();
        match self.read(|tx| crate::ops::health(tx, s, &options)) {
            Ok(health) => {
                let status = if health.verdict == crate::ops::Verdict::Stalled {
                    503
                } else {
                    200
                };
                Reply::text(
                    status,
                    "application/json",
                    format!("{}\n", health.to_json()),
                )
            }
            Err(p) => {
                let detail = match p {
                    Problem::Unavailable(d) | Problem::Internal(d) => d,
                    other => format!("{other:?}"),
                };
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

/// The form fields of a body (read already, at most [`server::MAX_BODY_BYTES`]).
fn read_form(body: &[u8]) -> std::result::Result<Vec<(String, String)>, Problem> {
    let text = std::str::from_utf8(body)
        .map_err(|_| Problem::BadRequest("the form is not UTF-8".into()))?;
    Ok(http::pairs(text)?)
}

/// Where to send the browser after an action: the page it came from when that is a page
/// of this server, `fallback` otherwise.
fn back_to(head: &Head, fallback: &str) -> String {
    let host = head.header("host").unwrap_or_default();
    head.header("referer")
        .and_then(|r| {
            r.strip_prefix("http://")
                .or_else(|| r.strip_prefix("https://"))
        })
        .and_then(|rest| rest.strip_prefix(host))
        // A path of this server only: `//host/...` would send the browser elsewhere.
        .filter(|path| path.starts_with('/') && !path.starts_with("//") && !path.contains('\\'))
        .map_or_else(|| fallback.to_owned(), ToOwned::to_owned)
}
