//! The web dashboard (`pgqueuer::web`, `pgq web`): pages and actions over HTTP, the
//! Prometheus text read by a real parser, and a real browser (Debian's chromium, driven
//! through chromedriver).

mod browser;
mod hostile;
mod http;
mod limits;
mod metrics;
mod pages;
mod webdriver;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use pgqueuer::web::{Dashboard, WebOptions, WebServer};
use pgqueuer::{Claimer, Entrypoint, JobId, NewJob, OnFailure, Queue, Worker};
use serde_json::json;

use crate::harness::TestDb;
use crate::python;

/// A dashboard of `db`'s queue on a free loopback port.
pub fn dashboard(db: &TestDb, options: WebOptions) -> WebServer {
    Dashboard::new(db.pool(4))
        .options(options)
        .serve("127.0.0.1:0")
        .unwrap()
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request (HTTP/1.1, `Connection: close`) with a form body, and reads the
/// whole answer.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Answer {
    send(
        addr,
        method,
        path,
        headers,
        body,
        "application/x-www-form-urlencoded",
    )
}

/// A JSON request and its JSON answer (WebDriver's protocol).
pub fn request_json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> serde_json::Value {
    let text = body.map(ToString::to_string);
    let answer = send(
        addr,
        method,
        path,
        &[],
        text.as_deref(),
        "application/json; charset=utf-8",
    );
    serde_json::from_str(&answer.body)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", answer.body))
}

fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    content_type: &str,
) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect to the dashboard");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    // The caller's Host, when it gives one, in place of the address.
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        head.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    if let Some(body) = body {
        stream.write_all(body.as_bytes()).unwrap();
    }
    // Read until the body is complete: by Content-Length, the last chunk, or the end of
    // the stream (chromedriver keeps connections open whatever the request says).
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            let body = raw.len() - split - 4;
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body >= n)
                || (head.contains("transfer-encoding: chunked") && raw.ends_with(b"0\r\n\r\n"))
            {
                break;
            }
        }
        let n = stream.read(&mut buf).expect("read the answer");
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    parse_answer(&raw)
}

pub fn parse_answer(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&data[..end])
                .split(';')
                .next()
                .unwrap()
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 2 + size + 2..];
    }
    out
}

/// `pgq web` on a free port, killed on drop.
pub struct PgqWeb {
    child: std::process::Child,
    pub addr: SocketAddr,
}

impl PgqWeb {
    pub fn start(db: &TestDb, env: &[(&str, &str)]) -> PgqWeb {
        Self::start_with(db, env, &[], None)
    }

    /// `pgq web --port 0` plus `args`, with `env`, and at most `fd_limit` open file
    /// descriptors (`ulimit -n`) when given.
    pub fn start_with(
        db: &TestDb,
        env: &[(&str, &str)],
        args: &[&str],
        fd_limit: Option<u32>,
    ) -> PgqWeb {
        use std::io::BufRead;
        let pgq = crate::harness::pgq_binary();
        let mut command = match fd_limit {
            None => std::process::Command::new(&pgq),
            Some(n) => {
                // The shell execs pgq, which keeps its process id and the limit.
                let mut c = std::process::Command::new("/bin/sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(&pgq);
                c
            }
        };
        let mut child = command
            .args(["web", "--port", "0"])
            .args(args)
            .env("PGQUEUER_DSN", db.dsn())
            .env_remove("PGQUEUER_WEB_USER")
            .env_remove("PGQUEUER_WEB_PASSWORD")
            .env_remove("PGQUEUER_WEB_HOST")
            .env_remove("PGQUEUER_WEB_ALLOWED_HOSTS")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start pgq web");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("pgq web did not say where it serves: {line:?}"));
        PgqWeb { child, addr }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process (as a crash or `kill -9` would).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PgqWeb {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn get(addr: SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, &[], None)
}

/// A queue with a job in every state, some enqueued by Python PgQueuer 1.6.0.
pub struct Fixture {
    pub queued: JobId,
    pub deferred: JobId,
    pub picked: JobId,
    pub held: JobId,
    pub done: JobId,
    pub raised: JobId,
    pub python: Vec<JobId>,
    pub binary: JobId,
    /// Keeps the picked job's worker id alive in the row (the claim is never ended).
    pub claimer: Claimer,
}

pub const HELD_REASON: &str = "disk full: /var/spool";

pub fn populate(db: &TestDb) -> Fixture {
    let queue = Queue::new(db.pool(2));
    let held = queue
        .enqueue(NewJob::new(
            "fragile",
            b"{\"invoice\": 42, \"lines\": [1, 2]}".to_vec(),
        ))
        .unwrap();
    let done = queue.enqueue(NewJob::new("fine", b"ok".to_vec())).unwrap();
    let raised = queue
        .enqueue(NewJob::new("flaky", b"try me".to_vec()))
        .unwrap();
    Worker::builder(db.pool(4))
        .entrypoint(
            Entrypoint::new("fragile").on_failure(OnFailure::Hold),
            |_, _| Err(HELD_REASON.into()),
        )
        .entrypoint("fine", |_, _| Ok(()))
        .entrypoint("flaky", |_, _| Err("upstream said 502".into()))
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    let queued = queue
        .enqueue(NewJob::new("mail", b"hello reader".to_vec()).priority(5))
        .unwrap();
    let deferred = queue
        .enqueue(NewJob::new("mail", b"later".to_vec()).execute_after(Duration::from_secs(3600)))
        .unwrap();
    let binary = queue
        .enqueue(NewJob::new("blobs", vec![0xff, 0xfe, 0x00, 0x41]).header("trace", "abc"))
        .unwrap();
    let picked = queue.enqueue(NewJob::without_payload("limited")).unwrap();
    let claimer = Claimer::builder().entrypoint("limited", 2).build().unwrap();
    let pool = db.pool(1);
    let claim = claimer.claim(&mut pool.get().unwrap(), 1).unwrap();
    assert_eq!(claim.jobs.len(), 1);
    let answer = python::script(
        db,
        "enqueue.py",
        &json!({"jobs": [
            {"entrypoint": "from_python", "payload_hex": hex(b"enqueued by PgQueuer 1.6.0"),
             "priority": 0, "delay_s": 0.0, "dedupe_key": null, "headers": null},
            {"entrypoint": "from_python", "payload_hex": null,
             "priority": 3, "delay_s": 0.0, "dedupe_key": "py-key", "headers": {"source": "python"}}
        ]}),
    );
    let python = answer["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    Fixture {
        queued,
        deferred,
        picked,
        held,
        done,
        raised,
        python,
        binary,
        claimer,
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
