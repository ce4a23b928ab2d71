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
