//! `pgq limits`, `pgq explain` and `pgq audit`.

use pgqueuer::{Claimer, NewJob, Queue};
use serde_json::Value;

use super::pgq;
use crate::harness::TestDb;

/// `limits` shows the slots a worker with limit 3 holds and the limit they imply;
/// `explain` says why a fourth job waits, naming that worker; `audit` finds the three
/// picked at once in the log.
#[test]
fn limits_explain_and_audit_read_the_slots_and_the_log() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let jobs: Vec<NewJob> = (0..4)
        .map(|i| NewJob::new("render", format!("{i}")))
        .collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    let claimer = Claimer::builder().entrypoint("render", 3).build().unwrap();
    let pool = db.pool(1);
    assert_eq!(
        claimer
            .claim(&mut pool.get().unwrap(), 10)
            .unwrap()
            .jobs
            .len(),
        3
    );

    let table = pgq(&db, &["limits"]).ok();
    assert!(
        table.contains("| render     |          3 | 2            | >= 3"),
        "{table}"
    );
    let json = pgq(&db, &["limits", "--json"]).json();
    assert_eq!(json[0]["slots_in_use"], 3);
    assert_eq!(json[0]["highest_slot"], 2);
    assert_eq!(json[0]["smallest_limit_that_took_it"], 3);

    let waiting = ids[3].to_string();
    let text = pgq(&db, &["explain", &waiting]).ok();
    assert!(
        text.contains("is due and waiting")
            && text.contains("3 concurrency slots of \"render\" are held")
            && text.contains(&claimer.worker_id().to_string()),
        "{text}"
    );
    let json: Value =
        serde_json::from_str(&pgq(&db, &["explain", &waiting, "--json"]).ok()).unwrap();
    assert_eq!(json["kind"], "waiting");
    assert_eq!(json["holders"].as_array().unwrap().len(), 3);
    let unknown = pgq(&db, &["explain", "999999"]).ok();
    assert!(unknown.contains("job 999999 is unknown"), "{unknown}");

    let audit = pgq(&db, &["audit", "--since", "10m"]).ok();
    assert!(audit.contains("log rows read"), "{audit}");
    assert!(
        audit.contains("| render     |                   3 |"),
        "{audit}"
    );
    let json: Value = serde_json::from_str(&pgq(&db, &["audit", "--json", "render"]).ok()).unwrap();
    assert_eq!(json["entrypoints"][0]["peak"], 3);
    assert_eq!(json["entrypoints"][0]["highest_slot"], 2);
    assert_eq!(json["rows_read"], 7, "4 queued and 3 picked rows");
    assert_eq!(
        pgq(&db, &["audit", "--since", "7"]).code,
        2,
        "a span needs a unit"
    );
}

/// `pgq limits set` and `unset` against a running worker: the worker takes each change
/// within a second, `pgq limits` shows what the worker declares beside what is stored and
/// who changed it, bad input is refused naming what is wrong and stores nothing, and a
/// stopped worker's declaration is gone.
#[test]
fn limits_set_and_unset_reach_a_running_worker_and_show_both() {
    use std::time::{Duration, Instant};

    use pgqueuer::{Entrypoint, Worker};

    use crate::harness::eventually;

    let db = TestDb::new();
    let built = Worker::builder(db.pool(6))
        .threads(2)
        .entrypoint(
            Entrypoint::new("api")
                .concurrency_limit(4)
                .rate_limit(100, Duration::from_secs(1)),
            |_, _| Ok(()),
        )
        .build()
        .unwrap();
    let id = built.id();
    let worker = built.start().unwrap();
    let in_force = |limit: u32, rate: &str| {
        let stats = worker.stats();
        stats
            .limits
            .iter()
            .any(|l| l.entrypoint == "api" && l.limit == limit)
            && stats.rates.len() == 1
            && stats.rates[0].limit.to_string() == rate
    };
    let api = |json: Vec<Value>| {
        json.into_iter()
            .find(|e| e["entrypoint"] == "api")
            .unwrap_or(Value::Null)
    };
    eventually(Duration::from_secs(15), "the worker's declaration", || {
        api(pgq(&db, &["limits", "--json"]).json())["declared"]
            .as_array()
            .is_some_and(|d| d.len() == 1)
    });
    let shown = api(pgq(&db, &["limits", "--json"]).json());
    assert_eq!(shown["declared"][0]["concurrency_limit"], 4);
    assert_eq!(shown["declared"][0]["rates"][0], "100/s");
    assert_eq!(shown["declared"][0]["worker"], id.to_string(), "{shown}");
    assert!(shown["stored"].is_null(), "{shown}");

    let set_at = Instant::now();
    let out = pgq(
        &db,
        &[
            "limits",
            "set",
            "api",
            "--concurrency",
            "2",
            "--rate",
            "5/s",
            "--by",
            "alice",
        ],
    )
    .ok();
    assert!(
        out.contains("concurrency 2") && out.contains("5/s"),
        "{out}"
    );
    eventually(
        Duration::from_secs(5),
        "the worker to take 2 and 5/s",
        || in_force(2, "5/s"),
    );
    assert!(
        set_at.elapsed() < Duration::from_secs(1),
        "the change took {:?} (pgq included) to reach the worker",
        set_at.elapsed()
    );
    let shown = api(pgq(&db, &["limits", "--json"]).json());
    assert_eq!(shown["stored"]["concurrency_limit"], 2, "{shown}");
    assert_eq!(shown["stored"]["rates"][0], "5/s");
    assert_eq!(shown["stored"]["changed_by"], "alice");
    assert_eq!(
        shown["declared"][0]["concurrency_limit"], 4,
        "declared stays declared"
    );
    let table = pgq(&db, &["limits"]).ok();
    assert!(
        table.contains("concurrency 4, 100/s (1 worker)")
            && table.contains("concurrency 2, 5/s (by alice")
            && table.contains("| concurrency 2, 5/s "),
        "{table}"
    );

    // Bad input: each refused, naming what was wrong, and nothing stored.
    for (args, says) in [
        (&["limits", "set", "api", "--rate", "0/s"][..], "\"0/s\""),
        (
            &["limits", "set", "api", "--rate", "5/fortnight"][..],
            "fortnight",
        ),
        (&["limits", "set", "api"][..], "nothing to store"),
        (
            &["limits", "set", "", "--concurrency", "1"][..],
            "must not be empty",
        ),
        (&["limits", "set", "api", "--concurrency", "-1"][..], "-1"),
    ] {
        let run = pgq(&db, args);
        assert_ne!(run.code, 0, "{args:?} was accepted: {run:?}");
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    let shown = api(pgq(&db, &["limits", "--json"]).json());
    assert_eq!(
        shown["stored"]["concurrency_limit"], 2,
        "nothing changed: {shown}"
    );

    let set_at = Instant::now();
    let out = pgq(&db, &["limits", "unset", "api", "--by", "bob"]).ok();
    assert!(out.contains("Deleted the stored limits of api"), "{out}");
    eventually(
        Duration::from_secs(5),
        "the worker back to 4 and 100/s",
        || in_force(4, "100/s"),
    );
    assert!(set_at.elapsed() < Duration::from_secs(1));
    let again = pgq(&db, &["limits", "unset", "api"]).ok();
    assert!(again.contains("api has no stored limits"), "{again}");
    let table = pgq(&db, &["limits"]).ok();
    let changes = &table[table
        .find("Latest changes")
        .expect("the changes are listed")..];
    assert!(
        changes.contains("alice (") && changes.contains("bob (") && changes.contains("unset"),
        "{table}"
    );

    worker.join().unwrap();
    let shown = api(pgq(&db, &["limits", "--json"]).json());
    assert!(
        shown.is_null() || shown["declared"].as_array().is_some_and(Vec::is_empty),
        "a stopped worker's declaration is gone: {shown}"
    );
}
