//! A worker with its admin page: the web dashboard served from the worker's own pool, on
//! threads of its own, in the same non-async program (feature `web`).
//!
//! Run: `PGQUEUER_DSN=postgres://postgres@127.0.0.1/app cargo run --example dashboard`,
//! open <http://127.0.0.1:8080/>, and enqueue from another terminal (`pgq queue resize
//! photo.jpg`): the Overview updates as the jobs run. `PGQUEUER_WEB_USER` and
//! `PGQUEUER_WEB_PASSWORD` turn on Basic authentication; Ctrl-C stops both.

use std::time::Duration;

use pgqueuer::Worker;
use pgqueuer::web::{Dashboard, WebOptions};

fn main() -> Result<(), pgqueuer::Error> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let pool = pgqueuer::connect("")?;
    pgqueuer::upgrade(pool.get().map_err(pgqueuer::Error::Pool)?.client())?;

    let admin = Dashboard::new(pool.clone())
        .options(WebOptions::from_env()?)
        .serve("127.0.0.1:8080")?;
    println!("dashboard on http://{}/", admin.addr());

    let worker = Worker::builder(pool)
        .entrypoint("resize", |job, _ctx| {
            // Stands in for real work, long enough to see jobs picked on the page.
            std::thread::sleep(Duration::from_millis(300));
            println!(
                "job {}: resized {}",
                job.id,
                job.payload_str().unwrap_or("?")
            );
            Ok(())
        })
        .build()?;
    let stop = worker.shutdown_handle();
    ctrlc::set_handler(move || stop.shutdown()).expect("install a Ctrl-C handler");
    worker.run()?;
    // The page says "server stopped" to whoever still has it open.
    admin.join();
    Ok(())
}
