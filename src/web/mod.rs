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
//! let server = Dashboard::new(pool)
//!     .options(WebOptions::from_env()?)
//!     .serve("127.0.0.1:8080")?;
//! println!("dashboard on http://{}", server.addr());
//! server.wait(); // serves until the process stops; `server.join()` stops it and waits
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
//! on. At most [`WebOptions::max_connections_per_client`] of them come from one address,
//! and past the cap the connection idle the longest makes room for a newcomer, so a
//! flood of idle sockets cannot answer everyone else 503. A handler that panics answers
//! 500 and its thread serves on.
//!
//! Only requests for the names in the allowlist are answered (421 otherwise, on every
//! method): the bound address and `localhost`, `127.0.0.1` and `[::1]` on the bound
//! port, plus [`WebOptions::allowed_hosts`] (`PGQUEUER_WEB_ALLOWED_HOSTS`). This stops
//! DNS rebinding (a page of another name pointed at this address). Behind a reverse
//! proxy, or bound to `0.0.0.0` and reached by a name or another address, list the
//! names clients use. Actions also need an `Origin` (or `Referer`) of an allowed name.

mod app;
mod assets;
mod data;
mod handlers;
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
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use self::app::App;
use crate::connect::Pool;
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::settings::Settings;
use crate::sql::web::{self as sql, WebSql};

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
    /// A session or prepared transaction that has held the MVCC horizon this long is
    /// named in a banner on the overview (see `pgq health`'s `horizon_held`). Defaults to
    /// 5 min.
    pub horizon_after: Duration,
    /// Threads answering page requests (event streams and the HTTP work itself run on
    /// one thread of their own). Defaults to 4.
    pub threads: usize,
    /// Connections served at once, so a flood of connections costs a bounded amount of
    /// memory and file descriptors. Past it the connection idle the longest (no request
    /// in flight, no event stream) is closed to make room for the newcomer; when none is
    /// idle, more are answered 503 and closed. A browser opens up to six per page plus
    /// one per live page. Defaults to 256.
    pub max_connections: usize,
    /// Connections served at once from one client address (at most `max_connections`);
    /// more are answered 503 and closed, so that one client cannot hold every place.
    /// Behind a reverse proxy every client has the proxy's address: raise it to
    /// `max_connections` there. Defaults to 128.
    pub max_connections_per_client: usize,
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
            horizon_after: Duration::from_secs(300),
            threads: 4,
            max_connections: 256,
            max_connections_per_client: 128,
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
            .field("horizon_after", &self.horizon_after)
            .field("threads", &self.threads)
            .field("max_connections", &self.max_connections)
            .field(
                "max_connections_per_client",
                &self.max_connections_per_client,
            )
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
        if self.max_connections_per_client == 0 {
            return Err(Error::invalid(
                "max_connections_per_client",
                "must be at least 1 (it is bounded by max_connections)",
            ));
        }
        for (field, value) in [
            ("checkout_timeout", self.checkout_timeout),
            ("statement_timeout", self.statement_timeout),
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("write_timeout", self.write_timeout),
            ("horizon_after", self.horizon_after),
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
    /// A dashboard of the queue with PgQueuer's default object names, reading through
    /// `pool` (an application's own pool works: each request holds one connection for
    /// its reads).
    pub fn new(pool: Pool) -> Dashboard {
        Dashboard {
            pool,
            settings: Settings::default(),
            options: WebOptions::default(),
        }
    }

    /// As [`Dashboard::new`], for the queue named by `settings`.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a bad name.
    pub fn with_settings(pool: Pool, settings: &Settings) -> Result<Dashboard> {
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
    /// own until [`WebServer::join`].
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
            max_connections_per_client: self
                .options
                .max_connections_per_client
                .min(self.options.max_connections),
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
            sql: WebSql::new(&self.settings),
            settings: self.settings,
            hosts: http::Hosts::new(bound, &self.options.allowed_hosts),
            set_timeout: sql::statement_timeout(self.options.statement_timeout),
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

    /// Stops serving and waits until it has: open event streams tell their pages and
    /// end, requests in flight are answered (for up to two seconds), and every thread is
    /// joined. Dropping the server does the same.
    pub fn join(mut self) {
        self.stop_and_join();
    }

    /// Blocks until the server stops, without stopping it (for a program whose only
    /// job is serving; it stops when the process does).
    pub fn wait(mut self) {
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
