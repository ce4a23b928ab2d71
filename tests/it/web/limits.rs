//! The serving limits that have options (`WebOptions`' timeouts and allowed hosts, `pgq
//! web --allowed-host`), each seen acting on a client, and their checks.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pgqueuer::web::{Dashboard, WebOptions};
use pgqueuer::{NewJob, Queue};

use super::hostile::{exchange, quick_options};
use super::{PgqWeb, dashboard, get, request};
use crate::harness::{TestDb, eventually};

/// The kernel's state of the TCP connection from `local` to `remote` (`01`
/// established), `None` once it is gone (reset) — read from `/proc/net/tcp`, so that a
/// test can wait for the server to close a connection without reading from it.
fn tcp_state(local: SocketAddr, remote: SocketAddr) -> Option<String> {
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(a) => format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(a.ip().octets()),
            a.port()
        ),
        SocketAddr::V6(_) => unreachable!("the tests use 127.0.0.1"),
    };
    let (local, remote) = (hex(local), hex(remote));
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[1] == local && f[2] == remote)
        .map(|f| f[3].to_owned())
}

/// A body announced but never sent gets 408 after the body timeout (2 s here), and the
/// form is not acted on.
#[test]
fn a_body_that_does_not_arrive_gets_408() {
    let db = TestDb::new();
    let server = dashboard(&db, quick_options());
    let addr = server.addr();
    let raw = format!(
        "POST /jobs/requeue HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nids=1"
    );
    let started = Instant::now();
    assert_eq!(
        exchange(addr, raw.as_bytes(), Duration::from_secs(10)),
        Some(408)
    );
    assert!(started.elapsed() >= Duration::from_millis(1900));
    assert_eq!(get(addr, "/healthz").status, 200);
}

/// A client that sends requests and never reads the answers is disconnected once a
/// write has waited the write timeout (2 s here): its connection does not stay open
/// with the server's buffers full.
#[test]
fn a_client_that_never_reads_is_dropped_after_the_write_timeout() {
    let db = TestDb::new();
    let server = dashboard(&db, quick_options());
    let addr = server.addr();
    let stream = TcpStream::connect(addr).unwrap();
    let local = stream.local_addr().unwrap();
    // 20,000 pipelined requests of the 4 KiB stylesheet: 80 MB of answers, far more than
    // the sockets' buffers hold.
    let one = format!("GET /static/style.css HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let all = one.repeat(20_000);
    let mut writer = stream.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Timed from before the requests go out: a stall of this thread after them would
    // otherwise shorten what the server is seen to have waited.
    let began = Instant::now();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(all.as_bytes());
    });
    assert_eq!(tcp_state(local, addr).as_deref(), Some("01"));
    eventually(
        Duration::from_secs(20),
        "the server to drop the connection",
        || tcp_state(local, addr).as_deref() != Some("01"),
    );
    let waited = began.elapsed();
    assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    let mut reader = stream;
    reader
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    let _ = reader.read_to_end(&mut got);
    assert!(got.len() < 40 << 20, "{} bytes", got.len());
    sender.join().unwrap();
    assert_eq!(get(addr, "/healthz").status, 200);
}

/// Past `max_connections` the connection idle the longest makes room for a newcomer;
/// when every one is busy (eight event streams), the newcomer is answered 503 and
/// closed at once; once they go, new ones are served again.
#[test]
fn connections_beyond_the_cap_make_room_or_are_told_and_closed() {
    let db = TestDb::new();
    let mut options = quick_options();
    options.max_connections = 8;
    let server = dashboard(&db, options);
    let addr = server.addr();
    let mut idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // The server counts a connection once it has accepted it: a ninth that asks is
    // served, the oldest idle one closed for it.
    super::hostile::healthy_within(addr, Duration::from_secs(5), "eight idle connections");
    let first = idle.remove(0);
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert!(
        matches!((&first).read(&mut buf), Ok(0) | Err(_)),
        "the oldest idle connection was closed to make room"
    );
    drop(idle);
    let streams: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
            let mut head = [0u8; 12];
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.read_exact(&mut head).unwrap();
            assert!(
                head.ends_with(b"200"),
                "{:?}",
                String::from_utf8_lossy(&head)
            );
            s
        })
        .collect();
    eventually(
        Duration::from_secs(5),
        "a ninth connection told 503 while eight stream",
        || {
            exchange(
                addr,
                format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
                Duration::from_secs(2),
            ) == Some(503)
        },
    );
    drop(streams);
    super::hostile::healthy_within(addr, Duration::from_secs(5), "the cap");
}

/// Names listed in `allowed_hosts` are answered (pages and actions); others still get
/// 421; the option and the environment variable are checked.
#[test]
fn allowed_hosts_are_answered_and_checked() {
    let db = TestDb::new();
    let held = Queue::new(db.pool(1))
        .enqueue(NewJob::new("held", b"x".to_vec()))
        .unwrap();
    db.client()
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&held],
        )
        .unwrap();
    let mut options = WebOptions::default();
    options.allowed_hosts = vec!["dash.test".into(), "Other.Test:1234".into()];
    let server = dashboard(&db, options);
    let addr = server.addr();
    let port = addr.port();
    for (host, want) in [
        (format!("dash.test:{port}"), 200),
        ("dash.test".to_owned(), 200),
        ("DASH.TEST.".to_owned(), 200),
        ("other.test:1234".to_owned(), 200),
        (format!("other.test:{port}"), 421),
        (format!("localhost:{port}"), 200),
        (format!("[::1]:{port}"), 200),
        ("localhost".to_owned(), 421),
        (format!("dash.test.evil.test:{port}"), 421),
    ] {
        let answer = request(addr, "GET", "/healthz", &[("Host", &host)], None);
        assert_eq!(answer.status, want, "Host: {host}");
    }
    let host = format!("dash.test:{port}");
    let answer = request(
        addr,
        "POST",
        "/jobs/requeue",
        &[("Host", &host), ("Origin", &format!("http://{host}"))],
        Some(&format!("ids={held}")),
    );
    assert_eq!(answer.status, 303, "{}", answer.body);
    server.join();

    let options = WebOptions::from_lookup(|k| {
        (k == "PGQUEUER_WEB_ALLOWED_HOSTS").then(|| " a.test, b.test:81 ,, [fd00::1]:80".into())
    })
    .unwrap();
    assert_eq!(
        options.allowed_hosts,
        ["a.test", "b.test:81", "[fd00::1]:80"]
    );
    let err = WebOptions::from_lookup(|k| {
        (k == "PGQUEUER_WEB_ALLOWED_HOSTS").then(|| "ok.test,http://x".into())
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("PGQUEUER_WEB_ALLOWED_HOSTS") && err.contains("http://x"),
        "{err}"
    );

    // Bad options are refused at serve(), naming the field.
    let serve = |options: WebOptions| {
        Dashboard::new(db.pool(1))
            .options(options)
            .serve("127.0.0.1:0")
            .map(drop)
            .unwrap_err()
            .to_string()
    };
    let mut bad = WebOptions::default();
    bad.allowed_hosts = vec!["a b".into()];
    assert!(serve(bad).contains("allowed_hosts"));
    for field in ["header_read_timeout", "write_timeout"] {
        let mut bad = WebOptions::default();
        match field {
            "header_read_timeout" => bad.header_read_timeout = Duration::ZERO,
            _ => bad.write_timeout = Duration::MAX,
        }
        let err = serve(bad);
        assert!(err.contains(field), "{err}");
    }
    let mut bad = WebOptions::default();
    bad.max_connections = 0;
    assert!(serve(bad).contains("max_connections"));
}

/// `pgq web` answers the names of `--allowed-host` and `PGQUEUER_WEB_ALLOWED_HOSTS`
/// (and still the loopback ones), refuses others, and exits with the option named when
/// one is not a host name.
#[test]
fn pgq_web_takes_allowed_hosts_from_its_flag_and_the_environment() {
    let db = TestDb::new();
    let pgq = PgqWeb::start_with(
        &db,
        &[("PGQUEUER_WEB_ALLOWED_HOSTS", "env.test")],
        &["--allowed-host", "flag.test,second.test"],
        None,
    );
    let addr = pgq.addr;
    for (host, want) in [
        ("env.test", 200),
        ("flag.test", 200),
        ("second.test", 200),
        ("elsewhere.test", 421),
    ] {
        let answer = request(addr, "GET", "/healthz", &[("Host", host)], None);
        assert_eq!(answer.status, want, "Host: {host}");
    }
    assert_eq!(get(addr, "/healthz").status, 200);
    drop(pgq);
    let out = std::process::Command::new(crate::harness::pgq_binary())
        .args(["web", "--port", "0", "--allowed-host", "not a host"])
        .env("PGQUEUER_DSN", db.dsn())
        .env_remove("PGQUEUER_WEB_ALLOWED_HOSTS")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("allowed_hosts"), "{stderr}");
}
