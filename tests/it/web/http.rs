//! Authentication, the same-origin rule of actions, bad input, and a database that is
//! slow or gone: each answered, and the server serving on afterwards.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pgqueuer::web::{Dashboard, WebOptions};
use pgqueuer::{NewJob, Queue, Status};

use super::{dashboard, get, populate, request};
use crate::harness::{TestDb, Throwaway, scalar};

fn status_of(db: &TestDb, id: i64) -> Option<String> {
    db.client()
        .query_opt("SELECT status::text FROM pgqueuer WHERE id = $1", &[&id])
        .unwrap()
        .map(|r| r.get(0))
}

#[test]
fn basic_auth_guards_every_path_when_configured() {
    let db = TestDb::new();
    let mut options = WebOptions::default();
    options.credentials = Some(("admin".into(), "s3cr3t".into()));
    let server = dashboard(&db, options);
    let addr = server.addr();
    // admin:s3cr3t, admin:wrong, other:s3cr3t
    let good = ("Authorization", "Basic YWRtaW46czNjcjN0");
    for path in [
        "/",
        "/metrics",
        "/healthz",
        "/jobs/1",
        "/events",
        "/static/style.css",
    ] {
        let none = get(addr, path);
        assert_eq!(none.status, 401, "{path} without credentials");
        assert!(
            none.header("WWW-Authenticate")
                .is_some_and(|h| h.starts_with("Basic")),
            "{path}: {:?}",
            none.headers
        );
        for wrong in [
            "Basic YWRtaW46d3Jvbmc=",
            "Basic b3RoZXI6czNjcjN0",
            "Bearer s3cr3t",
        ] {
            let answer = request(addr, "GET", path, &[("Authorization", wrong)], None);
            assert_eq!(answer.status, 401, "{path} with {wrong}");
        }
    }
    for path in ["/", "/metrics", "/healthz"] {
        let answer = request(addr, "GET", path, &[good], None);
        assert_eq!(
            answer.status, 200,
            "{path} with the credentials: {}",
            answer.body
        );
    }
    // The POST needs the credentials as well as the origin.
    let answer = request(
        addr,
        "POST",
        "/jobs/requeue",
        &[("Origin", &format!("http://{addr}"))],
        Some("ids=1"),
    );
    assert_eq!(answer.status, 401);
    server.join();

    // One of the two variables alone is refused with its name.
    let err = WebOptions::from_lookup(|k| (k == "PGQUEUER_WEB_USER").then(|| "admin".into()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("PGQUEUER_WEB_PASSWORD"), "{err}");
    let ok = WebOptions::from_lookup(|k| match k {
        "PGQUEUER_WEB_USER" => Some("a".into()),
        "PGQUEUER_WEB_PASSWORD" => Some("b".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(ok.credentials, Some(("a".into(), "b".into())));
}

/// Requeue and cancel: refused (403, nothing changed) from another origin, without an
/// origin, or by GET; done from the dashboard's own origin, with the same log rows and
/// NOTIFYs as `Queue::requeue_failed` / `Queue::cancel` (the CLI's functions).
#[test]
fn actions_come_only_from_the_dashboards_own_pages() {
    let db = TestDb::new();
    let f = populate(&db);
    let server = dashboard(&db, WebOptions::default());
    let addr = server.addr();
    let own = format!("http://{addr}");
    let body = format!("ids={}", f.held);

    for headers in [
        vec![("Origin", "http://evil.example")],
        vec![("Referer", "http://evil.example/failures")],
        vec![("Origin", own.as_str()), ("Sec-Fetch-Site", "cross-site")],
        vec![],
    ] {
        let answer = request(addr, "POST", "/jobs/requeue", &headers, Some(&body));
        assert_eq!(answer.status, 403, "{headers:?}: {}", answer.body);
        assert!(answer.body.contains("Nothing was changed"));
        assert_eq!(
            status_of(&db, f.held).as_deref(),
            Some("failed"),
            "{headers:?}"
        );
        let answer = request(
            addr,
            "POST",
            &format!("/jobs/{}/cancel", f.queued),
            &headers,
            None,
        );
        assert_eq!(answer.status, 403, "{headers:?}");
        assert_eq!(status_of(&db, f.queued).as_deref(), Some("queued"));
    }
    assert_eq!(get(addr, "/jobs/requeue").status, 400, "GET does not act");
    assert_eq!(get(addr, &format!("/jobs/{}/cancel", f.queued)).status, 400);
    assert_eq!(status_of(&db, f.queued).as_deref(), Some("queued"));

    // From the Failures page itself.
    let referer = format!("{own}/failures");
    let answer = request(
        addr,
        "POST",
        "/jobs/requeue",
        &[("Origin", &own), ("Referer", &referer)],
        Some(&body),
    );
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.header("Location"), Some("/failures"));
    assert_eq!(status_of(&db, f.held).as_deref(), Some("queued"));
    let logged: i64 = scalar(
        &mut db.client(),
        &format!(
            "SELECT count(*) FROM pgqueuer_log WHERE job_id = {} AND status = 'queued'",
            f.held
        ),
    );
    assert_eq!(logged, 2, "enqueued, then requeued: the library's log row");

    let answer = request(
        addr,
        "POST",
        &format!("/jobs/{}/cancel", f.queued),
        &[("Origin", &own)],
        None,
    );
    assert_eq!(answer.status, 303);
    let queue = Queue::new(db.pool(1));
    assert_eq!(
        queue.job_statuses(&[f.queued]).unwrap().get(&f.queued),
        Some(&Status::Canceled),
        "cancelled through Queue::cancel"
    );
    // Bad forms change nothing.
    for bad in ["", "ids=abc", "ids=-3", "ids=%zz"] {
        let answer = request(
            addr,
            "POST",
            "/jobs/requeue",
            &[("Origin", &own)],
            Some(bad),
        );
        assert_eq!(answer.status, 400, "{bad:?}");
    }
    assert_eq!(get(addr, "/healthz").status, 200);
    server.join();
}

#[test]
fn bad_input_gets_400_unknown_things_404_and_the_server_serves_on() {
    let db = TestDb::new();
    let server = dashboard(&db, WebOptions::default());
    let addr = server.addr();
    for (path, status, says) in [
        ("/jobs/abc", 400, "is not a job id"),
        ("/jobs/0", 400, "is not a job id"),
        ("/jobs/goto?id=x1", 400, "is not a job id"),
        ("/jobs/goto", 400, "is not a job id"),
        (
            "/jobs?status=done",
            400,
            "is not one of queued, picked, failed",
        ),
        ("/jobs?after=-1", 400, "is not a job id"),
        ("/jobs?page=0", 400, "is not a page number"),
        ("/entrypoints?window=7d", 400, "is not one of 1h, 6h, 24h"),
        (
            "/workers?stale_after=soon",
            400,
            "is not a number of seconds",
        ),
        ("/jobs?entrypoint=%ff", 400, "not valid"),
        ("/jobs/999999", 404, "No job 999999"),
        ("/entrypoints/nobody", 404, "No entrypoint nobody"),
        ("/nowhere", 404, "There is no page at /nowhere"),
        ("/static/missing.css", 404, "There is no page"),
    ] {
        let answer = get(addr, path);
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert!(
            answer.body.contains(says),
            "{path} does not say {says:?}: {}",
            answer.body
        );
        assert_eq!(
            get(addr, "/healthz").status,
            200,
            "still serving after {path}"
        );
    }
    server.join();
}

/// A slow database (a lock held past the statement timeout) and a stopped one both get
/// a 503 page within a bounded time, and pages come back once the database does.
#[test]
fn a_slow_or_dead_database_gets_503_in_bounded_time() {
    // Slow: the queue table locked.
    let db = TestDb::new();
    Queue::new(db.pool(1))
        .enqueue(NewJob::new("x", b"1".to_vec()))
        .unwrap();
    let mut options = WebOptions::default();
    options.statement_timeout = Duration::from_millis(300);
    let server = dashboard(&db, options.clone());
    let addr = server.addr();
    let mut locker = db.client();
    let mut tx = locker.transaction().unwrap();
    tx.batch_execute("LOCK TABLE pgqueuer IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let start = Instant::now();
    let answer = get(addr, "/");
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert!(
        answer.body.contains("statement timeout") || answer.body.contains("canceling"),
        "{}",
        answer.body
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(get(addr, "/metrics").status, 503);
    tx.rollback().unwrap();
    assert_eq!(
        get(addr, "/").status,
        200,
        "served again once the lock is gone"
    );
    server.join();

    // Dead: a server of the test's own, stopped.
    let own = Throwaway::new(&[]).unwrap_or_else(|e| panic!("throwaway server: {e}"));
    own.admin().batch_execute("CREATE DATABASE web").unwrap();
    let dsn = own.dsn("web");
    let mut client = pgqueuer::connect_one(&dsn, "web-test").unwrap();
    pgqueuer::upgrade(client.client()).unwrap();
    drop(client);
    let connect = pgqueuer::ConnectOptions {
        max_size: 3,
        connection_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let pool = pgqueuer::connect_with(&dsn, &connect).unwrap();
    let server = Dashboard::new(pool)
        .options(options)
        .serve("127.0.0.1:0")
        .unwrap();
    let addr = server.addr();
    assert_eq!(get(addr, "/").status, 200);
    own.stop().unwrap();
    for path in ["/", "/jobs", "/healthz", "/metrics", "/system", "/jobs/1"] {
        let start = Instant::now();
        let answer = get(addr, path);
        assert_eq!(answer.status, 503, "{path}: {}", answer.body);
        assert!(
            start.elapsed() < Duration::from_secs(6),
            "{path} took {:?}",
            start.elapsed()
        );
    }
    own.start().unwrap();
    crate::harness::eventually(Duration::from_secs(20), "pages come back", || {
        get(addr, "/").status == 200
    });
    assert_eq!(get(addr, "/healthz").status, 200);
    server.join();
}

/// `Debug` of the options (and of a dashboard holding them) shows the user, never the
/// password.
#[test]
fn debug_never_prints_the_password() {
    let mut options = WebOptions::default();
    options.credentials = Some(("admin".into(), "hunter2-pw".into()));
    for text in [format!("{options:?}"), format!("{options:#?}")] {
        assert!(!text.contains("hunter2-pw"), "{text}");
        assert!(
            text.contains("admin") && text.contains("<redacted>"),
            "{text}"
        );
    }
    let db = TestDb::new();
    let dashboard = Dashboard::new(db.pool(1)).options(options);
    let text = format!("{dashboard:?}");
    assert!(!text.contains("hunter2-pw"), "{text}");
}

/// Reads `stream` until `needle` has come (or fails after 10 s).
fn read_until(stream: &mut TcpStream, seen: &mut Vec<u8>, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(seen).contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in {:?}",
            String::from_utf8_lossy(seen)
        );
        stream
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now())))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => panic!(
                "closed before {needle:?}: {:?}",
                String::from_utf8_lossy(seen)
            ),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) => panic!("waiting for {needle:?}: {e}"),
        }
    }
}

fn open_events(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    stream
}

/// The live feed: a stream opens with its retry line, says `queue-change` when a job is
/// enqueued, takes at most 64 pages (the 65th gets 503, and polls), and says `closing`
/// and ends when the server stops.
#[test]
fn event_streams_tell_changes_take_64_and_say_closing() {
    let db = TestDb::new();
    let server = dashboard(&db, WebOptions::default());
    let addr = server.addr();
    let mut stream = open_events(addr);
    let mut seen = Vec::new();
    read_until(&mut stream, &mut seen, "retry: 3000");
    assert!(String::from_utf8_lossy(&seen).contains("text/event-stream"));
    Queue::new(db.pool(1))
        .enqueue(NewJob::new("x", b"1".to_vec()))
        .unwrap();
    read_until(&mut stream, &mut seen, "event: queue-change");

    let mut others: Vec<(TcpStream, Vec<u8>)> = (1..64)
        .map(|_| {
            let mut s = open_events(addr);
            let mut seen = Vec::new();
            read_until(&mut s, &mut seen, "retry: 3000");
            (s, seen)
        })
        .collect();
    let answer = get(addr, "/events");
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert!(answer.body.contains("will poll"), "{}", answer.body);
    // A stream that ends frees its place.
    drop(others.pop());
    crate::harness::eventually(Duration::from_secs(20), "a place for a new stream", || {
        let mut s = open_events(addr);
        let mut head = [0u8; 12];
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_exact(&mut head).is_ok() && head.ends_with(b"200")
    });

    server.join();
    read_until(&mut stream, &mut seen, "event: closing");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    stream
        .read_to_end(&mut rest)
        .expect("the stream ends after closing");
    for (mut s, mut seen) in others {
        read_until(&mut s, &mut seen, "event: closing");
    }
}
