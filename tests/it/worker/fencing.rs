//! Fencing tokens: one per run of a job.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use pgqueuer::postgres::Client;
use pgqueuer::{Claimer, FencingToken, NewJob, Outcome, Queue, Status, Worker};

use crate::harness::TestDb;

/// The fencing token of a run is the job, the worker and the time of the pick: a
/// heartbeat leaves the row's `updated` (the token's time) alone, and a re-pick after the
/// first worker was presumed dead gives the new run a later token, while the first
/// worker's outcome is fenced off.
#[test]
fn fencing_tokens_change_on_a_repick_and_not_on_a_heartbeat() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(NewJob::new("fenced", "x")).unwrap();
    let mut client = db.client();
    let updated = |c: &mut Client| -> SystemTime {
        c.query_one("SELECT updated FROM pgqueuer WHERE id = $1", &[&id])
            .unwrap()
            .get(0)
    };
    let dead = Claimer::builder()
        .entrypoint("fenced", 0)
        .heartbeat_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let pool = db.pool(1);
    let mut conn = pool.get().unwrap();
    let job = dead.claim(&mut conn, 1).unwrap().jobs.remove(0);
    let first = FencingToken {
        job_id: id,
        worker_id: dead.worker_id(),
        picked_at: job.updated,
    };
    assert_eq!(updated(&mut client), first.picked_at);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(dead.heartbeat(&mut conn, &[id]).unwrap(), [id]);
    assert_eq!(
        updated(&mut client),
        first.picked_at,
        "a heartbeat moved the token"
    );

    client
        .execute(
            "UPDATE pgqueuer SET heartbeat = now() - interval '1 minute' WHERE id = $1",
            &[&id],
        )
        .unwrap();
    let seen: Arc<Mutex<Option<FencingToken>>> = Arc::default();
    let record = seen.clone();
    let worker = Worker::builder(db.pool(4))
        .threads(1)
        .heartbeat_timeout(Duration::from_secs(1))
        .entrypoint("fenced", move |_job, ctx| {
            *record.lock().unwrap() = Some(ctx.fencing_token());
            Ok(())
        })
        .build()
        .unwrap();
    let worker_id = worker.id();
    worker.run_until_empty().unwrap();
    let second = seen.lock().unwrap().expect("the handler ran");
    assert_eq!(second.job_id, id);
    assert_eq!(second.worker_id, worker_id);
    assert!(second.picked_at > first.picked_at, "{first} then {second}");
    assert_ne!(second.to_string(), first.to_string());
    let written = dead
        .complete(
            &mut conn,
            &[Outcome {
                id,
                status: Status::Successful,
                traceback: None,
            }],
        )
        .unwrap();
    assert!(
        written.is_empty(),
        "the presumed-dead worker wrote over the new run"
    );
}
