//! The smallest worker program: one entrypoint, the DSN from the environment, the schema
//! managed elsewhere (`pgq upgrade`, or `pgqueuer::upgrade()` in a deploy step), logs
//! through `env_logger`, Ctrl-C for a clean stop.
//!
//! Run: `PGQUEUER_DSN=postgres://postgres@127.0.0.1/app cargo run --example minimal_worker`
//! (then `pgq queue hello world` from another terminal).
//!
//! `main` returns `pgqueuer::Error`, so a failure prints the error's message and advice:
//! against a database without the schema it names every missing object and says to run
//! the upgrade. With logging off (`RUST_LOG=off`, or no logger at all) the worker still
//! prints each job failure on stderr.

use pgqueuer::Worker;

fn main() -> Result<(), pgqueuer::Error> {
    // Handler failures are logged at `warn` with the job id, entrypoint and cause chain.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    // "" reads PGQUEUER_DSN, PGDSN, DATABASE_URL, then the libpq PG* variables.
    let pool = pgqueuer::connect("")?;
    let worker = Worker::builder(pool)
        .entrypoint("hello", |job, _ctx| {
            // A failure is recorded in the log table (`pgq failed`, `pgq job ID`) and logged.
            let name = job.payload_str().ok_or("the payload is not UTF-8 text")?;
            println!("job {}: hello {name}", job.id);
            Ok(())
        })
        .build()?;
    let stop = worker.shutdown_handle();
    ctrlc::set_handler(move || stop.shutdown()).expect("install a Ctrl-C handler");
    let summary = worker.run()?;
    println!("stopped: {summary:?}");
    Ok(())
}
