//! A cron schedule shared by several processes: each fire runs in exactly one of them.
//!
//! Registers one schedule (every second unless told otherwise), records each fire it
//! runs as a row of `scheduler_example_fires` (which process, the schedule id, when the
//! row was claimed, and `clock_timestamp()` when the handler ran), and stops after a
//! number of seconds through its `ShutdownHandle`. Start it in three terminals at once
//! and count the rows per second: one each.
//!
//! ```text
//! cargo run --example scheduler -- postgres://postgres@127.0.0.1/app 30 '* * * * * *'
//! ```
//!
//! Arguments: the DSN (empty for `PGQUEUER_DSN`/libpq variables), how many seconds to
//! run (default 30), the cron expression (default `* * * * * *`) and the entrypoint
//! (default `example_tick`). The schema is installed or upgraded first.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgqueuer::{ConnectOptions, Scheduler};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let mut args = std::env::args().skip(1);
    let dsn = args.next().unwrap_or_default();
    let seconds: u64 = match args.next() {
        Some(s) => s
            .parse()
            .map_err(|_| format!("not a number of seconds: {s:?}"))?,
        None => 30,
    };
    let expression = args.next().unwrap_or_else(|| "* * * * * *".to_owned());
    let entrypoint = args.next().unwrap_or_else(|| "example_tick".to_owned());

    // Claiming loop + heartbeat + one handler thread + the handler's own insert.
    let options = ConnectOptions {
        max_size: 4,
        ..ConnectOptions::from_env()?
    };
    let pool = pgqueuer::connect_with(&dsn, &options)?;
    {
        let mut conn = pool.get()?;
        pgqueuer::upgrade(conn.client())?;
        conn.batch_execute(
            "CREATE TABLE IF NOT EXISTS scheduler_example_fires (
                 process text NOT NULL,
                 schedule_id bigint NOT NULL,
                 picked_at timestamptz NOT NULL,
                 next_run timestamptz NOT NULL,
                 fired_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        )?;
    }

    let process = format!("pid-{}", std::process::id());
    let handler_pool = pool.clone();
    let scheduler = Scheduler::builder(pool)
        .threads(1)
        .schedule(&entrypoint, &expression, move |schedule| {
            let mut conn = handler_pool.get()?;
            conn.execute(
                "INSERT INTO scheduler_example_fires (process, schedule_id, picked_at, next_run)
             VALUES ($1, $2, $3, $4)",
                &[
                    &process,
                    &schedule.id,
                    &schedule.updated,
                    &schedule.next_run,
                ],
            )?;
            let at = schedule.updated.duration_since(UNIX_EPOCH)?;
            log::info!("{process} fired schedule {} claimed at {at:?}", schedule.id);
            Ok(())
        })
        .build()?;

    let stop = scheduler.shutdown_handle();
    let timer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(seconds));
        stop.shutdown();
    });
    let started = SystemTime::now();
    scheduler.run()?;
    timer.join().map_err(|_| "the timer thread panicked")?;
    log::info!("stopped after {:?}", started.elapsed()?);
    Ok(())
}
