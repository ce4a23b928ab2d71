//! Web dashboard benchmark: the time to render Overview, Jobs and Job detail (and the
//! other pages) with a large queue, and the serving process's peak RSS.
//!
//! ```sh
//! cargo bench --bench web                    # 1,000,000 jobs and 1,000,000 log rows
//! PGQ_BENCH_WEB_ROWS=20000 cargo bench --bench web
//! ```
//!
//! - `PGQUEUER_BENCH_DSN` the server (default `postgres://postgres@127.0.0.1:5432/postgres`);
//!   a database `pgqbench_web_<pid>` is created and dropped.
//! - `PGQ_BENCH_WEB_ROWS` jobs in the queue table and rows in the log (default 1,000,000
//!   each). The queue holds 20 entrypoints, 98.8% queued (a tenth of them deferred),
//!   0.2% picked by 7 workers, 1% held as failed; the log has the rows a worker writes
//!   over the last 7.4 hours (aggregated, as a periodic aggregation leaves them, with
//!   the statistics to match: a bucket per row, as many entrypoints at this rate give)
//!   plus 1,000 not yet aggregated. The tables are vacuumed and analyzed, as autovacuum
//!   would.
//! - `PGQ_BENCH_WEB_KEEP=1` keeps the database (to look at its plans).
//! - `PGQ_BENCH_WEB_ROUNDS` requests per page (default 20): the table gives the median
//!   and the slowest, measured at the client over loopback.
//!
//! The server runs in this process (4 handler threads, a pool of 5); its peak RSS is
//! this process's `VmHWM`, which also counts the benchmark's own small client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pgqueuer::postgres::{Client, Config, NoTls};
use pgqueuer::web::{Dashboard, WebOptions};

#[path = "support/common.rs"]
mod common;

use common::{env_or, peak_rss_mib};

fn get(addr: SocketAddr, path: &str) -> (u16, usize) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let status = std::str::from_utf8(&raw[9..12]).unwrap().parse().unwrap();
    (status, raw.len())
}

fn main() {
    let rows: i64 = env_or("PGQ_BENCH_WEB_ROWS", 1_000_000);
    let rounds: usize = env_or("PGQ_BENCH_WEB_ROUNDS", 20);
    let admin_dsn = std::env::var("PGQUEUER_BENCH_DSN")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let config: Config = admin_dsn.parse().expect("PGQUEUER_BENCH_DSN parses");
    let mut admin = config.connect(NoTls).unwrap_or_else(|e| {
        panic!("cannot reach PostgreSQL at {admin_dsn}: {e} (start it, or set PGQUEUER_BENCH_DSN)")
    });
    let name = format!("pgqbench_web_{}", std::process::id());
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let mut db_config = config.clone();
    db_config.dbname(&name);
    let dsn = format!(
        "host=127.0.0.1 port={} user={} dbname={name}",
        config.get_ports().first().copied().unwrap_or(5432),
        config.get_user().unwrap_or("postgres")
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(&db_config, &dsn, rows, rounds);
    }));
    if std::env::var_os("PGQ_BENCH_WEB_KEEP").is_some() {
        eprintln!("web bench: kept database {name}");
    } else {
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .unwrap();
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn fill(client: &mut Client, rows: i64) {
    let started = Instant::now();
    eprintln!("web bench: filling {rows} jobs and {rows} log rows");
    client
        .batch_execute(&format!(
            "INSERT INTO pgqueuer (priority, entrypoint, status, payload, execute_after,
                                   created, updated, heartbeat, queue_manager_id, slot)
             SELECT (i % 5), 'entrypoint_' || (i % 20),
                    (CASE WHEN i % 500 = 0 THEN 'picked' WHEN i % 100 = 1 THEN 'failed'
                          ELSE 'queued' END)::pgqueuer_status,
                    convert_to('{{\"n\": ' || i || '}}', 'UTF8'),
                    now() + CASE WHEN i % 10 = 5 THEN interval '1 hour' ELSE interval '0' END
                        - (({rows} - i) * interval '1 millisecond'),
                    now() - (({rows} - i) * interval '1 millisecond'), now(), now(),
                    CASE WHEN i % 500 = 0 THEN ('00000000-0000-4000-8000-' || lpad((i % 7)::text, 12, '0'))::uuid END, NULL
               FROM generate_series(1, {rows}) AS i"
        ))
        .unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint, aggregated)
             SELECT now() - ((i / 3) * interval '80 milliseconds'), {rows} + i / 3,
                    (ARRAY['queued', 'picked', 'successful'])[1 + i % 3]::pgqueuer_status,
                    0, 'entrypoint_' || (i % 20), i > 1000
               FROM generate_series(1, {rows}) AS i;
             INSERT INTO pgqueuer_statistics (count, created, priority, status, entrypoint)
             SELECT count(*), date_trunc('sec', created), priority, status, entrypoint
               FROM pgqueuer_log WHERE aggregated
              GROUP BY 2, 3, 4, 5;"
        ))
        .unwrap();
    for table in ["pgqueuer", "pgqueuer_log", "pgqueuer_statistics"] {
        client
            .batch_execute(&format!("VACUUM ANALYZE {table}"))
            .unwrap();
    }
    eprintln!(
        "web bench: filled in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

fn run(config: &Config, dsn: &str, rows: i64, rounds: usize) {
    let mut client = config.connect(NoTls).unwrap();
    pgqueuer::upgrade(&mut client).unwrap();
    fill(&mut client, rows);
    let some_job: i64 = client
        .query_one("SELECT id FROM pgqueuer WHERE id = $1", &[&(rows / 2)])
        .unwrap()
        .get(0);
    let options = pgqueuer::ConnectOptions {
        max_size: 5,
        min_idle: 1,
        ..Default::default()
    };
    let pool = pgqueuer::connect_with(dsn, &options).unwrap();
    let before = peak_rss_mib();
    let server = Dashboard::new(pool)
        .options(WebOptions::default())
        .serve("127.0.0.1:0")
        .unwrap();
    let addr = server.addr();
    let pages = [
        ("Overview", "/".to_owned(), true),
        ("Jobs", "/jobs".to_owned(), true),
        (
            "Jobs, status=failed",
            "/jobs?status=failed".to_owned(),
            false,
        ),
        (
            "Jobs, entrypoint filter",
            "/jobs?entrypoint=entrypoint_7".to_owned(),
            false,
        ),
        ("Job detail", format!("/jobs/{some_job}"), true),
        ("Entrypoints (1 h)", "/entrypoints".to_owned(), false),
        ("Failures", "/failures".to_owned(), false),
        ("Workers", "/workers".to_owned(), false),
        ("System", "/system".to_owned(), false),
        ("/metrics", "/metrics".to_owned(), false),
    ];
    println!("| page | median ms | slowest ms | bytes | goal |");
    println!("|---|---:|---:|---:|---|");
    for (label, path, goal) in &pages {
        // One request first, so every page is measured warm (plans cached, pages in
        // shared buffers), as a dashboard left open is.
        let (status, _) = get(addr, path);
        assert_eq!(status, 200, "{path}");
        let mut times = Vec::with_capacity(rounds);
        let mut size = 0;
        for _ in 0..rounds {
            let start = Instant::now();
            let (status, bytes) = get(addr, path);
            times.push(start.elapsed());
            assert_eq!(status, 200, "{path}");
            size = bytes;
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "| {label} | {:.1} | {:.1} | {size} | {} |",
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1]),
            if *goal { "< 50 ms" } else { "" }
        );
    }
    println!(
        "| peak RSS | {:.1} MiB (before serving: {before:.1} MiB) | | | < 20 MB |",
        peak_rss_mib()
    );
    println!("\n{rows} jobs, {rows} log rows; {rounds} requests per page after one warm-up");
    server.join();
}
