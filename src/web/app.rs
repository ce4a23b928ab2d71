//! The request plumbing behind the server: what every handler thread shares ([`App`]),
//! the checks a request meets before any page (host, credentials, the origin of an
//! action), routing, the transaction every page reads in, and how a [`Problem`] becomes
//! a reply. The pages' handlers are in `handlers.rs`.

use std::sync::{Arc, Mutex, PoisonError};

use maud::Markup;
use postgres::Transaction;

use super::server::{self, Admit, Head, Reply, Request, Streaming, Verb};
use super::{WebOptions, assets, data, http, live, pages};
use crate::connect::Pool;
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::queue::Queue;
use crate::settings::Settings;
use crate::sql::web::WebSql;

/// What every handler thread shares.
pub(super) struct App {
    pub(super) pool: Pool,
    pub(super) settings: Settings,
    pub(super) options: WebOptions,
    /// The names requests may be for (from the bound address and the options).
    pub(super) hosts: http::Hosts,
    /// The actions' writer (requeue, cancel).
    pub(super) queue: Queue,
    /// The pages' statements, rendered once.
    pub(super) sql: WebSql,
    /// `SET LOCAL statement_timeout` of [`WebOptions::statement_timeout`], rendered once.
    pub(super) set_timeout: String,
    pub(super) feed: Arc<live::Feed>,
    /// Transitions per minute, kept between requests (one reader for every viewer).
    pub(super) minutes: Mutex<data::Minutes>,
}

impl Reply {
    pub(super) fn html(status: u16, page: &Markup) -> Reply {
        Reply {
            status,
            content_type: "text/html; charset=utf-8",
            body: page.0.clone().into_bytes(),
            headers: Vec::new(),
        }
    }

    pub(super) fn redirect(to: &str) -> Reply {
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
pub(super) enum Problem {
    NotFound(String),
    BadRequest(String),
    Forbidden(String),
    /// The database did not answer in time, or is down.
    Unavailable(String),
    Internal(String),
}

impl Problem {
    pub(super) fn reply(&self) -> Reply {
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

impl Problem {
    /// The problem's text alone, for the plain and JSON answers of `/healthz`.
    pub(super) fn detail(self) -> String {
        match self {
            Problem::Unavailable(d) | Problem::Internal(d) => d,
            other => format!("{other:?}"),
        }
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

/// What a page handler answers.
pub(super) type Handled = std::result::Result<Reply, Problem>;

/// A request's parts the routes read.
pub(super) struct Incoming<'a> {
    head: &'a Head,
    /// The query string, decoded.
    query: Vec<(String, String)>,
    /// The body (a form), read already.
    body: &'a [u8],
}

impl Incoming<'_> {
    pub(super) fn param(&self, key: &str) -> Option<&str> {
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
            (_, ["healthz"]) if read && r.param("probe").is_some() => {
                let kind = r.param("probe").unwrap_or_default();
                match crate::ops::Probe::parse(kind) {
                    Some(probe) => Ok(self.deep_health(Some(probe))),
                    None => Err(Problem::BadRequest(format!(
                        "probe={kind} is not liveness or readiness"
                    ))),
                }
            }
            (_, ["healthz"]) if read && r.param("deep").is_some_and(|d| d != "0") => {
                Ok(self.deep_health(None))
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
    pub(super) fn read<T>(
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
        tx.batch_execute(&self.set_timeout)?;
        let value = read(&mut tx)?;
        tx.commit()?;
        Ok(value)
    }

    /// The transitions of the last day per minute, from the shared [`data::Minutes`].
    pub(super) fn buckets(
        &self,
        tx: &mut Transaction<'_>,
        only: Option<&str>,
    ) -> Result<Vec<data::Bucket>> {
        self.minutes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .read(tx, &self.sql, only)
    }

    pub(super) fn page(&self, title: &str, here: &str, body: &Markup) -> Handled {
        Ok(Reply::html(200, &pages::layout(title, here, body)))
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
