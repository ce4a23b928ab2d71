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

/// A cancellation that reaches a handler is never written as the end of a claim nobody
/// cancelled: the row is taken by another worker (as after a missed heartbeat) and a
/// `cancellation_event` names it, so the listener stops the handler; then the row is
/// this worker's again (as after a re-pick of its own) before the handler returns. The
/// job is not deleted as `canceled` but given back to the queue, and it runs again to
/// its end (`successful`), with no `canceled` log row.
#[test]
fn a_cancellation_for_a_row_this_worker_holds_again_does_not_delete_it() {
    let db = TestDb::new();
    let mut client = db.client();
    let queue = Queue::new(db.pool(2));
    let (cancelled_tx, cancelled_rx) = crossbeam_channel::unbounded::<()>();
    let (go_on_tx, go_on_rx) = crossbeam_channel::unbounded::<()>();
    let runs = Arc::new(Mutex::new(0));
    let worker = {
        let runs = runs.clone();
        Worker::builder(db.pool(4))
            .threads(2)
            .heartbeat_timeout(Duration::from_secs(30))
            .entrypoint("victim", move |_job, ctx| {
                let run = {
                    let mut runs = runs.lock().unwrap();
                    *runs += 1;
                    *runs
                };
                if run == 1 {
                    let until = std::time::Instant::now() + Duration::from_secs(30);
                    while !ctx.is_cancelled() && std::time::Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    cancelled_tx.send(()).unwrap();
                    go_on_rx.recv_timeout(Duration::from_secs(30)).unwrap();
                }
                Ok(())
            })
            .build()
            .unwrap()
    };
    let worker_id = worker.id();
    let running = worker.start().unwrap();
    let id = queue.enqueue(NewJob::new("victim", "x")).unwrap();
    crate::harness::eventually(Duration::from_secs(30), "the job running", || {
        *runs.lock().unwrap() == 1
    });
    crate::harness::eventually(Duration::from_secs(30), "a listening worker", || {
        !crate::harness::listener_pids(&mut client, &db.name).is_empty()
    });
    // Another worker takes the row, and a cancellation names it.
    client
        .execute(
            "UPDATE pgqueuer SET queue_manager_id = gen_random_uuid() WHERE id = $1",
            &[&id],
        )
        .unwrap();
    let event = pgqueuer::events::Event::Cancellation(pgqueuer::events::Cancellation::new(
        "ch_pgqueuer",
        vec![id],
    ))
    .to_json();
    client
        .execute("SELECT pg_notify('ch_pgqueuer', $1)", &[&event])
        .unwrap();
    cancelled_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the handler was told the job is cancelled");
    // Then the row is this worker's again before the handler returns.
    client
        .execute(
            "UPDATE pgqueuer SET queue_manager_id = $2 WHERE id = $1",
            &[&id, &worker_id],
        )
        .unwrap();
    go_on_tx.send(()).unwrap();
    crate::harness::eventually(Duration::from_secs(30), "the job ended", || {
        crate::faults::checks::unfinished(&mut client, &[id]).is_empty()
    });
    running.shutdown_handle().shutdown();
    running.join().unwrap();
    let log = crate::harness::log_of(&mut client, id);
    assert!(!log.iter().any(|s| s == "canceled"), "{log:?}");
    assert_eq!(
        log.last().map(String::as_str),
        Some("successful"),
        "{log:?}"
    );
    assert_eq!(*runs.lock().unwrap(), 2, "it ran again");
}
