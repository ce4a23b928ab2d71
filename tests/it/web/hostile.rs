//! Hostile clients against a real `pgq web` process and an embedded `Dashboard`: huge
//! declared lengths, an endless header, slowloris, a connection flood, exhausted file
//! descriptors, foreign `Host` names (DNS rebinding) and broken parameters. After each
//! attack `/healthz` answers 200 within a second and the `pgq web` process stays under
//! 50 MB of resident memory.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pgqueuer::web::{WebOptions, WebServer};
use pgqueuer::{NewJob, Queue};

use super::{PgqWeb, dashboard, parse_answer, request};
use crate::harness::TestDb;

/// The most resident memory a `pgq web` process may have after (or during) an attack.
const MAX_RSS_MIB: f64 = 50.0;

/// A dashboard under attack.
pub struct Target {
    pub name: &'static str,
    pub addr: SocketAddr,
    kind: Kind,
}

enum Kind {
    Process(PgqWeb),
    /// Held: dropping it stops the server.
    Embedded(#[allow(dead_code)] WebServer),
}

/// The embedded dashboard's options: short timeouts, so that the tests see them act.
pub fn quick_options() -> WebOptions {
    let mut options = WebOptions::default();
    options.header_read_timeout = Duration::from_secs(2);
    options.body_read_timeout = Duration::from_secs(2);
    options.write_timeout = Duration::from_secs(2);
    options
}

impl Target {
    pub fn process(db: &TestDb) -> Target {
        let pgq = PgqWeb::start(db, &[]);
        Target {
            name: "pgq web",
            addr: pgq.addr,
            kind: Kind::Process(pgq),
        }
    }

    pub fn embedded(db: &TestDb, options: WebOptions) -> Target {
        let server = dashboard(db, options);
        Target {
            name: "embedded Dashboard",
            addr: server.addr(),
            kind: Kind::Embedded(server),
        }
    }

    /// Both kinds, on `db`.
    pub fn both(db: &TestDb) -> [Target; 2] {
        [Target::process(db), Target::embedded(db, quick_options())]
    }

    /// The process's resident memory, for a process.
    fn rss_mib(&self) -> Option<f64> {
        let Kind::Process(pgq) = &self.kind else {
            return None;
        };
        let status = std::fs::read_to_string(format!("/proc/{}/status", pgq.pid()))
            .unwrap_or_else(|e| panic!("pgq web is gone ({e})"));
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/<pid>/status");
        Some(kib / 1024.0)
    }

    /// The process (if one) runs and holds less than [`MAX_RSS_MIB`].
    #[track_caller]
    pub fn small(&mut self, what: &str) {
        if let Kind::Process(pgq) = &mut self.kind {
            assert!(pgq.alive(), "{}: the process died during {what}", self.name);
        }
        if let Some(rss) = self.rss_mib() {
            eprintln!("{}: {rss:.1} MiB resident after {what}", self.name);
            assert!(
                rss < MAX_RSS_MIB,
                "{}: {rss:.1} MiB resident during/after {what}",
                self.name
            );
        }
    }

    /// After an attack: still small, and `/healthz` answers 200 within a second.
    #[track_caller]
    pub fn check(&mut self, what: &str) {
        self.small(what);
        healthy_within(
            self.addr,
            Duration::from_secs(1),
            &format!("{}: {what}", self.name),
        );
    }
}

/// `/healthz` answers 200 within `limit` (retrying: a connection the server has not yet
/// seen close may hold a place for a moment).
#[track_caller]
pub fn healthy_within(addr: SocketAddr, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    let mut last = None;
    while Instant::now() < deadline {
        last = exchange(
            addr,
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
            deadline.saturating_duration_since(Instant::now()),
        );
        if last == Some(200) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("after {what}: /healthz did not answer 200 within {limit:?} (last: {last:?})");
}

/// Sends `raw` on a new connection and reads until the server closes it, for at most
/// `limit` (connect included): the answer's status, or `None` when none came.
pub fn exchange(addr: SocketAddr, raw: &[u8], limit: Duration) -> Option<u16> {
    let answer = exchange_raw(addr, raw, limit)?;
    status_of(&answer)
}

/// As [`exchange`], the whole answer.
pub fn exchange_raw(addr: SocketAddr, raw: &[u8], limit: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + limit;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let mut stream = TcpStream::connect_timeout(&addr, left()).ok()?;
    stream.set_write_timeout(Some(left())).ok()?;
    // The server may answer (and close) before it has read all of `raw`.
    let _ = stream.write_all(raw);
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        stream.set_read_timeout(Some(left())).ok()?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            // Reset after the answer: what came is the answer.
            Err(_) if !answer.is_empty() => break,
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    Some(answer)
}

pub fn status_of(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|b| *b == b'\n').next()?;
    std::str::from_utf8(line)
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// A held (`failed`) job and a queued one, to see that refused actions change nothing.
fn two_jobs(db: &TestDb) -> (i64, i64) {
    let queue = Queue::new(db.pool(1));
    let held = queue.enqueue(NewJob::new("held", b"x".to_vec())).unwrap();
    let queued = queue
        .enqueue(NewJob::new("waiting", b"y".to_vec()))
        .unwrap();
    db.client()
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&held],
        )
        .unwrap();
    (held, queued)
}

fn status_in_db(db: &TestDb, id: i64) -> String {
    db.client()
        .query_one("SELECT status::text FROM pgqueuer WHERE id = $1", &[&id])
        .unwrap()
        .get(0)
}

/// A `Content-Length` of 9e18 or 2^64-1, on GET and on POST, is refused (413, or hyper's
/// 431 for a length it cannot hold) without reading or allocating it, and the form is
/// not acted on.
#[test]
fn a_huge_declared_length_is_refused_before_reading() {
    let db = TestDb::new();
    let (held, _) = two_jobs(&db);
    for mut target in Target::both(&db) {
        let addr = target.addr;
        // hyper's limit: a length it cannot represent is a head too large (431); one
        // it can, ours (413). Neither is read, or allocated.
        for (length, want) in [("9000000000000000000", 413), ("18446744073709551615", 431)] {
            for (method, path) in [("GET", "/healthz"), ("POST", "/jobs/requeue")] {
                let raw = format!(
                    "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\n\
                     Content-Type: application/x-www-form-urlencoded\r\n\
                     Content-Length: {length}\r\n\r\nids={held}"
                );
                let status = exchange(addr, raw.as_bytes(), Duration::from_secs(5));
                assert_eq!(
                    status,
                    Some(want),
                    "{}: {method} {path} with Content-Length {length}",
                    target.name
                );
                target.check(&format!("{method} {path} with Content-Length {length}"));
            }
        }
        assert_eq!(status_in_db(&db, held), "failed", "nothing was requeued");
    }
}

/// A client streaming a 1 GiB header line is answered 431 or cut off after a few MiB at
/// most (hyper buffers 32 KiB of head).
#[test]
fn an_endless_header_line_is_cut_off_early() {
    let db = TestDb::new();
    const GIB: u64 = 1 << 30;
    // hyper buffers 32 KiB of head; what the kernel's socket buffers take on top of it
    // is all a client gets written.
    const ENOUGH: u64 = 64 << 20;
    for mut target in Target::both(&db) {
        let addr = target.addr;
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
            .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nX-Filler: ").as_bytes())
            .unwrap();
        let chunk = vec![b'a'; 64 << 10];
        let mut sent = 0u64;
        // Up to 1 GiB; once ENOUGH has gone the server has plainly taken the line, and
        // the rest is not worth sending to fail the test.
        while sent < GIB {
            match stream.write(&chunk) {
                Ok(n) => sent += n as u64,
                Err(_) => break,
            }
            if sent >= ENOUGH {
                break;
            }
        }
        assert!(
            sent < ENOUGH,
            "{}: the server took {sent} bytes of one header line",
            target.name
        );
        // The answer, when it got through before the reset: 431.
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let status = status_of(&answer);
        assert!(
            matches!(status, None | Some(431)),
            "{}: {status:?}",
            target.name
        );
        target.check("a 1 GiB header line");
    }
}

/// Connections to `addr` from the loopback address `local` (127.0.0.2, say), so that a
/// test can attack from one address and ask from another.
pub fn connect_from(local: IpAddr, addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut out = Vec::new();
        for _ in 0..n {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(local, 0)).unwrap();
            if let Ok(Ok(stream)) =
                tokio::time::timeout(Duration::from_secs(2), socket.connect(addr)).await
            {
                let stream = stream.into_std().unwrap();
                stream.set_nonblocking(false).unwrap();
                out.push(stream);
            }
        }
        out
    })
}

/// 100 connections from one address sending a byte a second do not keep `/healthz`
/// (asked from another address) from answering; those beyond the address's share are
/// told 503 at once, and (embedded, head timeout 2 s) the rest are closed by the server.
#[test]
fn slowloris_does_not_starve_healthz_and_is_cut_off() {
    let db = TestDb::new();
    for mut target in Target::both(&db) {
        let addr = target.addr;
        let head = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
        let mut slow = connect_from(IpAddr::from([127, 0, 0, 2]), addr, 100);
        assert_eq!(slow.len(), 100);
        // One byte a second on each, for three seconds, while /healthz must answer.
        for byte in head.as_bytes().iter().take(3) {
            for stream in &mut slow {
                // The server may have closed it already (its head timeout).
                let _ = stream.write_all(&[*byte]);
            }
            target.check("100 connections sending a byte a second");
            std::thread::sleep(Duration::from_secs(1));
        }
        if let Kind::Embedded(_) = target.kind {
            // Its head timeout is 2 s: every slow connection is closed by the server,
            // which a read sees as the end of the stream (or a reset).
            for stream in &mut slow {
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut buf = [0u8; 512];
                match stream.read(&mut buf) {
                    Ok(n) => assert!(
                        n == 0 || matches!(status_of(&buf[..n]), Some(408 | 503)),
                        "a slow head got {:?}",
                        String::from_utf8_lossy(&buf[..n])
                    ),
                    Err(e) => assert!(
                        !matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ),
                        "a slow head is still open after the head timeout"
                    ),
                }
            }
        }
        drop(slow);
        target.check("100 slowloris connections");
    }
}

/// 2,000 connections opened at once: the server stays small, those beyond its cap are
/// told 503 and closed, and it serves once they go.
#[test]
fn two_thousand_connections_at_once() {
    let db = TestDb::new();
    for mut target in Target::both(&db) {
        let addr = target.addr;
        let flood: Vec<TcpStream> = (0..2000)
            .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
            .collect();
        assert!(
            flood.len() > 1000,
            "{}: {} connected",
            target.name,
            flood.len()
        );
        target.small("2000 open connections");
        // Beyond the connection cap (256) a connection is told so and closed.
        let mut last = flood.last().unwrap();
        last.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answer = Vec::new();
        let _ = last.read_to_end(&mut answer);
        assert_eq!(
            status_of(&answer),
            Some(503),
            "{}: {:?}",
            target.name,
            String::from_utf8_lossy(&answer)
        );
        drop(flood);
        target.check("2000 connections at once");
    }
}

/// Idle sockets that hold every place: one address opens 300 (128 are served, the rest
/// told 503), five others 64 each, more than the server's 256 places, and every socket
/// the server closes is opened again at once. `/healthz`, asked from yet another
/// address, answers 200 fifteen times in a row meanwhile: an idle holder gives way to a
/// client that asks something.
#[test]
fn idle_sockets_holding_every_place_do_not_shut_healthz_out() {
    let db = TestDb::new();
    for mut target in Target::both(&db) {
        let addr = target.addr;
        let flooder = IpAddr::from([127, 0, 0, 2]);
        let first = connect_from(flooder, addr, 300);
        // Beyond its share, the flooder is told so at once.
        let mut last = first.last().unwrap();
        last.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answer = Vec::new();
        let _ = last.read_to_end(&mut answer);
        assert_eq!(status_of(&answer), Some(503), "{}", target.name);
        assert!(
            String::from_utf8_lossy(&answer).contains("from your address"),
            "{}: {:?}",
            target.name,
            String::from_utf8_lossy(&answer)
        );
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reopener = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut held: Vec<(IpAddr, TcpStream)> = Vec::new();
                for last in 3..8u8 {
                    let ip = IpAddr::from([127, 0, 0, last]);
                    held.extend(connect_from(ip, addr, 64).into_iter().map(|s| (ip, s)));
                }
                let mut reopened = 0usize;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    // A socket the server closed reads as ended: open another in its place.
                    let mut i = 0;
                    while i < held.len() {
                        let (ip, stream) = &held[i];
                        stream.set_nonblocking(true).unwrap();
                        let mut byte = [0u8; 1];
                        // Anything read (an answer before closing, the end, a reset)
                        // means the server let it go; only "nothing yet" is still held.
                        let closed = match stream.peek(&mut byte) {
                            Ok(_) => true,
                            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                        };
                        if closed {
                            let ip = *ip;
                            held.swap_remove(i);
                            held.extend(connect_from(ip, addr, 1).into_iter().map(|s| (ip, s)));
                            reopened += 1;
                        } else {
                            i += 1;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                (held.len(), reopened)
            })
        };
        std::thread::sleep(Duration::from_millis(500));
        for i in 0..15 {
            healthy_within(
                addr,
                Duration::from_secs(1),
                &format!("{}: idle flood, /healthz {i} of 15", target.name),
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let (held, reopened) = reopener.join().unwrap();
        eprintln!(
            "{}: idle flood of {held} sockets, {reopened} reopened",
            target.name
        );
        assert!(
            held >= 256,
            "{}: the flood held {held} sockets",
            target.name
        );
        drop(first);
        target.check("an idle flood holding every place");
    }
}

/// `pgq web` under `ulimit -n 128` flooded past its descriptors keeps its accept loop
/// (backing off on EMFILE) and serves again once the flood goes, twice.
#[test]
fn exhausted_file_descriptors_do_not_stop_accepting() {
    let db = TestDb::new();
    let pgq = PgqWeb::start_with(&db, &[], &[], Some(128));
    let mut target = Target {
        name: "pgq web with ulimit -n 128",
        addr: pgq.addr,
        kind: Kind::Process(pgq),
    };
    let addr = target.addr;
    healthy_within(addr, Duration::from_secs(5), "start");
    // More than the process may open: accepting fails with EMFILE for a while, and the
    // rest wait in the kernel's queue.
    let flood: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
        .collect();
    assert!(
        flood.len() > 128,
        "only {} connected: not more than the process's descriptors",
        flood.len()
    );
    target.small("400 connections with 128 descriptors");
    drop(flood);
    target.check("running out of file descriptors");
    // And again: the loop did not end on the errors.
    let again: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
        .collect();
    drop(again);
    target.check("running out of file descriptors twice");
}

/// A foreign `Host` (or absolute-form target), the DNS-rebinding POST among them, gets
/// 421 on GET and POST with a body saying how to allow the name, and no job changes.
#[test]
fn foreign_host_names_get_421_and_change_nothing() {
    let db = TestDb::new();
    let (held, queued) = two_jobs(&db);
    for mut target in Target::both(&db) {
        let addr = target.addr;
        let port = addr.port();
        let evil = format!("evil.test:{port}");
        let evil_origin = format!("http://{evil}");
        for (method, path, body) in [
            ("GET", "/".to_owned(), None),
            ("GET", "/healthz".to_owned(), None),
            (
                "POST",
                "/jobs/requeue".to_owned(),
                Some(format!("ids={held}")),
            ),
            ("POST", format!("/jobs/{queued}/cancel"), None),
        ] {
            // DNS rebinding: the page's own name as Host and as Origin.
            let answer = request(
                addr,
                method,
                &path,
                &[("Host", &evil), ("Origin", &evil_origin)],
                body.as_deref(),
            );
            assert_eq!(answer.status, 421, "{}: {method} {path}", target.name);
            assert!(
                answer.body.contains("PGQUEUER_WEB_ALLOWED_HOSTS"),
                "the refusal says how to allow the name: {}",
                answer.body
            );
        }
        // An allowed Host but an Origin of another name: refused, as before.
        let answer = request(
            addr,
            "POST",
            "/jobs/requeue",
            &[("Origin", &evil_origin)],
            Some(&format!("ids={held}")),
        );
        assert_eq!(answer.status, 403, "{}", target.name);
        // An absolute-form target names the host too.
        let raw = format!(
            "POST http://{evil}/jobs/requeue HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\nids={held}",
            format!("ids={held}").len()
        );
        let answer = exchange_raw(addr, raw.as_bytes(), Duration::from_secs(5)).unwrap();
        assert_eq!(parse_answer(&answer).status, 421, "{}", target.name);
        assert_eq!(
            status_in_db(&db, held),
            "failed",
            "{}: not requeued",
            target.name
        );
        assert_eq!(
            status_in_db(&db, queued),
            "queued",
            "{}: not cancelled",
            target.name
        );
        target.check("foreign Host names");
    }
}

/// NUL and broken %-escapes in query, path and form parameters get 400 naming the
/// parameter (NUL: why no stored name has one), never 500, and change nothing.
#[test]
fn broken_escapes_and_nul_in_parameters_get_400_naming_them() {
    let db = TestDb::new();
    let (held, _) = two_jobs(&db);
    for mut target in Target::both(&db) {
        let addr = target.addr;
        for (path, names) in [
            ("/jobs?entrypoint=%00", "`entrypoint`"),
            ("/jobs?entrypoint=ab%00cd", "`entrypoint`"),
            ("/jobs?entrypoint=%zz", "`entrypoint`"),
            ("/jobs?entrypoint=%", "`entrypoint`"),
            ("/jobs?status=%e2%82", "`status`"),
            ("/jobs?%zz=1", "`%zz`"),
            ("/entrypoints/%00", "entrypoint name in the path"),
            ("/entrypoints/a%2", "entrypoint name in the path"),
            ("/workers?stale_after=%00", "`stale_after`"),
        ] {
            let answer = request(addr, "GET", path, &[], None);
            assert_eq!(
                answer.status, 400,
                "{}: {path}: {}",
                target.name, answer.body
            );
            assert!(
                answer.body.contains(names),
                "{path}: the answer names {names}: {}",
                answer.body
            );
        }
        let nul = request(addr, "GET", "/jobs?entrypoint=%00", &[], None);
        assert!(
            nul.body.contains("NUL") && nul.body.contains("PostgreSQL text"),
            "{}",
            nul.body
        );
        let own = format!("http://{addr}");
        for form in ["ids=%00", "ids=1%2", format!("ids={held}&ids=%zz").as_str()] {
            let answer = request(
                addr,
                "POST",
                "/jobs/requeue",
                &[("Origin", &own)],
                Some(form),
            );
            assert_eq!(
                answer.status, 400,
                "{}: {form}: {}",
                target.name, answer.body
            );
            assert!(answer.body.contains("`ids`"), "{form}: {}", answer.body);
        }
        assert_eq!(status_in_db(&db, held), "failed");
        target.check("broken parameters");
    }
}

/// 200,000 distinct entrypoints, each with a queued job and its log row, and one with 50
/// running (its count exact, where the others' are estimated from a sample): the overview,
/// the entrypoints page and `/metrics` each answer within seconds in under 512 KiB, list
/// the busiest and say how many are left out (the pages; `/metrics` adds them up under
/// `entrypoint="(others)"`), and the filter finds one that was left out.
#[test]
fn two_hundred_thousand_entrypoints_cost_a_page_a_few_rows() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status) \
             SELECT 0, 'ep-' || g, 'x', 'queued' FROM generate_series(1, 200000) g;
             INSERT INTO pgqueuer (priority, entrypoint, payload, status, queue_manager_id) \
             SELECT 0, 'ep-busy', 'x', 'picked', gen_random_uuid() FROM generate_series(1, 50) g;
             INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint) \
             SELECT id, 'queued', 0, entrypoint FROM pgqueuer;
             ANALYZE pgqueuer;",
        )
        .unwrap();
    let mut options = quick_options();
    options.statement_timeout = Duration::from_secs(30);
    let server = dashboard(&db, options);
    let addr = server.addr();
    for path in ["/", "/entrypoints", "/metrics"] {
        let started = Instant::now();
        let answer = super::get(addr, path);
        let took = started.elapsed();
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert!(
            answer.body.len() < 512 << 10,
            "{path}: {} bytes",
            answer.body.len()
        );
        assert!(took < Duration::from_secs(20), "{path} took {took:?}");
        eprintln!("{path}: {} bytes in {took:?}", answer.body.len());
        if path == "/metrics" {
            assert!(answer.body.contains("entrypoint=\"(others)\""), "{path}");
            assert!(
                answer
                    .body
                    .contains("pgqueuer_metrics_entrypoints_left_out 199801"),
                "{path}"
            );
            assert!(answer.body.contains("entrypoint=\"ep-busy\""), "{path}");
        } else {
            assert!(
                answer.body.contains("ep-busy"),
                "{path}: the busiest is shown"
            );
            assert!(
                answer.body.contains("199901 more are not"),
                "{path}: the rest are counted"
            );
        }
    }
    let filtered = super::get(addr, "/entrypoints?filter=ep-199999");
    assert_eq!(filtered.status, 200);
    assert!(filtered.body.contains("ep-199999"), "the filter finds it");
    assert!(!filtered.body.contains("ep-busy"));
}
