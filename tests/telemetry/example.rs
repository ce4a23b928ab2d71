//! `examples/observability`: a worker whose metrics a Prometheus scrape reads and whose
//! traces reach stdout.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{TestDb, program};

/// Runs the example for six jobs (one of them failing) and reads its last scrape and its
/// printed spans: the counts are the workload's, each job has a `process` span, and the
/// failure's log line names the job and its entrypoint.
#[test]
fn the_example_serves_metrics_and_prints_traces() {
    let exe = program("example", "observability", &[]);
    let db = TestDb::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(exe)
        .args(["--jobs", "6", "--port", &port.to_string()])
        .env("PGQUEUER_DSN", db.dsn())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    let (printed, scrape) = stdout
        .split_once("--- final scrape ---")
        .unwrap_or_else(|| panic!("no final scrape: {stdout}"));
    for line in [
        r#"pgqueuer_jobs_ended_total{entrypoint="greet",status="successful"} 4"#,
        r#"pgqueuer_jobs_ended_total{entrypoint="report",status="successful"} 1"#,
        r#"pgqueuer_jobs_ended_total{entrypoint="report",status="exception"} 1"#,
        r#"pgqueuer_jobs_claimed_total{entrypoint="greet"} 4"#,
        r#"pgqueuer_handler_duration_seconds_count{entrypoint="greet"} 4"#,
        r#"pgqueuer_start_latency_seconds_count{entrypoint="report"} 2"#,
        "# HELP pgqueuer_jobs_ended_total Jobs ended, by final status.",
    ] {
        assert!(
            scrape.lines().any(|l| l == line),
            "no {line:?} in the scrape:\n{scrape}"
        );
    }
    let spans = |name: &str| {
        printed
            .lines()
            .filter(|l| l.trim() == format!("Name         : {name}"))
            .count()
    };
    assert_eq!(spans("process greet"), 4, "{printed}");
    assert_eq!(spans("process report"), 2, "{printed}");
    assert_eq!(spans("send greet"), 2, "{printed}");
    assert_eq!(spans("create report"), 2, "{printed}");
    assert_eq!(spans("request"), 2, "{printed}");
    let failure = stderr
        .lines()
        .find(|l| l.contains("(report) failed: Error: the report source is unavailable"))
        .unwrap_or_else(|| panic!("no failure line: {stderr}"));
    assert!(
        failure.contains("job ")
            && failure.split("job ").nth(1).is_some_and(|rest| rest
                .split(' ')
                .next()
                .is_some_and(|id| id.parse::<i64>().is_ok())),
        "the line names the job id: {failure}"
    );
}
