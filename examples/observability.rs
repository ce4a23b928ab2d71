//! A worker that an operator can see into: its figures served to Prometheus, each job's
//! trace printed on stdout, and a snapshot of the same figures every few seconds for
//! programs without a metrics stack.
//!
//! Run: `PGQUEUER_DSN=postgres://postgres@127.0.0.1/app cargo run --example observability`
//! then `curl -s localhost:9898/metrics | grep pgqueuer_`. It enqueues a few jobs every
//! second inside a `request` span, so each job's trace runs from that span through
//! `send` to `process`. `--port N` serves elsewhere; `--jobs N` stops after that many
//! (the example's own test runs it so); Ctrl-C stops it.
//!
//! Both features this needs (`metrics`, `opentelemetry`) are enabled for the examples
//! and tests. In a program of yours: `pgqueuer = { version = "…", features = ["metrics",
//! "opentelemetry"] }`, an exporter for each (here `metrics-exporter-prometheus` without
//! its HTTP listener, served by `tiny_http`, and `opentelemetry-stdout`), and the
//! recorder installed *before* the worker is built: the worker registers its metrics
//! when built.

use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use opentelemetry::global;
use opentelemetry::trace::{TraceContextExt, Tracer};
use opentelemetry_sdk::trace::SdkTracerProvider;
use pgqueuer::{Entrypoint, NewJob, Queue, Worker};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let mut port = 9898u16;
    let mut stop_after: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--port" => port = value("--port")?.parse()?,
            "--jobs" => stop_after = Some(value("--jobs")?.parse()?),
            "-h" | "--help" => {
                println!("usage: observability [--port N] [--jobs N]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}; try --help").into()),
        }
    }

    // 1. Metrics: a Prometheus recorder behind the `metrics` facade, served over HTTP.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let server = tiny_http::Server::http(("127.0.0.1", port))
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    println!("metrics on http://127.0.0.1:{port}/metrics");
    std::thread::spawn(move || {
        for request in server.incoming_requests() {
            let response = if request.url() == "/metrics" {
                tiny_http::Response::from_string(prometheus.render()).with_header(
                    "Content-Type: text/plain; version=0.0.4"
                        .parse::<tiny_http::Header>()
                        .expect("a valid header"),
                )
            } else {
                tiny_http::Response::from_string("not found; try /metrics").with_status_code(404)
            };
            let _ = request.respond(response);
        }
    });

    // 2. Traces: every finished span printed on stdout.
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    global::set_tracer_provider(provider.clone());

    // 3. The worker, built after the recorder is installed.
    let pool = pgqueuer::connect("")?;
    pgqueuer::upgrade(pool.get()?.client())?;
    let worker = Worker::builder(pool.clone())
        .threads(4)
        .entrypoint("greet", |job, _ctx| {
            std::thread::sleep(Duration::from_millis(5));
            println!(
                "job {} (greet): hello {}",
                job.id,
                job.payload_str().unwrap_or("?")
            );
            Ok(())
        })
        .entrypoint(
            Entrypoint::new("report").concurrency_limit(1),
            |job, _ctx| {
                if job.payload_str() == Some("broken") {
                    return Err("the report source is unavailable".into());
                }
                Ok(())
            },
        )
        .build()?;
    let stats = worker.stats_handle();
    let stop = worker.shutdown_handle();
    ctrlc::set_handler({
        let stop = stop.clone();
        move || stop.shutdown()
    })?;
    let running = worker.start()?;

    // 4. A producer: a few jobs a second, each batch inside a request's span.
    let queue = Queue::new(pool);
    let tracer = global::tracer("observability-example");
    let mut enqueued = 0u64;
    let mut round = 0u64;
    let mut last_report = Instant::now();
    while !stop.is_shutdown() {
        let span = tracer.start("request");
        let cx = opentelemetry::Context::current_with_span(span);
        {
            let _attached = cx.clone().attach();
            queue.enqueue(NewJob::new("greet", format!("visitor {enqueued}")))?;
            // Every other report fails: its `process` span ends in error.
            let payload = if round % 2 == 1 { "broken" } else { "daily" };
            queue.enqueue_many(&[
                NewJob::new("report", payload),
                NewJob::new("greet", "again"),
            ])?;
        }
        cx.span().end();
        enqueued += 3;
        round += 1;
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            let s = stats.snapshot();
            println!(
                "snapshot: {} succeeded, {} failed, {} claims, {} running",
                s.jobs.succeeded, s.jobs.failed, s.claims, s.running
            );
        }
        if stop_after.is_some_and(|n| enqueued >= n) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    // Let the last jobs run, then stop.
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.snapshot().jobs.succeeded + stats.snapshot().jobs.failed < enqueued
        && Instant::now() < deadline
        && !stop.is_shutdown()
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.shutdown();
    let summary = running.join()?;
    println!("stopped: {summary:?}");
    if stop_after.is_some() {
        // For the example's test: the metrics as Prometheus would scrape them at the end.
        let body = scrape(port)?;
        println!("--- final scrape ---\n{body}");
    }
    provider.shutdown()?;
    Ok(())
}

/// One plain HTTP GET of `/metrics` (the test reads the scrape from our stdout).
fn scrape(port: u16) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map_or(response.clone(), |(_, body)| body.to_owned()))
}
