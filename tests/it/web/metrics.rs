//! `/metrics` (and `ops::prometheus_text`) read by the reference Prometheus parser
//! (Python's prometheus_client), every value checked against the database.

use std::collections::BTreeMap;
use std::time::Duration;

use pgqueuer::ops;
use pgqueuer::web::WebOptions;
use pgqueuer::{NewJob, Queue, Settings};
use serde_json::{Value, json};

use super::{dashboard, get, populate};
use crate::harness::TestDb;
use crate::python;

/// (family name, sorted labels) -> value, parsed by prometheus_client.
type Samples = BTreeMap<(String, Vec<(String, String)>), f64>;

fn parse(db: &TestDb, text: &str) -> (Samples, Vec<Value>) {
    let answer = python::script(db, "parse_metrics.py", &json!({ "text": text }));
    let families = answer["families"].as_array().unwrap().clone();
    let mut samples = Samples::new();
    for family in &families {
        for s in family["samples"].as_array().unwrap() {
            let mut labels: Vec<(String, String)> = s["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            labels.sort();
            samples.insert(
                (s["name"].as_str().unwrap().to_owned(), labels),
                s["value"].as_f64().unwrap(),
            );
        }
    }
    (samples, families)
}

fn by_labels(samples: &Samples, name: &str) -> BTreeMap<Vec<(String, String)>, f64> {
    samples
        .iter()
        .filter(|((n, _), _)| n == name)
        .map(|((_, l), v)| (l.clone(), *v))
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

/// The same counts by SQL: (entrypoint, status) -> n.
fn expected(db: &TestDb, sql: &str) -> BTreeMap<Vec<(String, String)>, f64> {
    db.client()
        .query(sql, &[])
        .unwrap()
        .iter()
        .map(|r| {
            let (e, s, n): (String, String, i64) = (r.get(0), r.get(1), r.get(2));
            #[allow(clippy::cast_precision_loss)]
            (
                labels(&[("aggregation", "sum"), ("entrypoint", &e), ("status", &s)]),
                n as f64,
            )
        })
        .collect()
}

#[test]
fn metrics_parse_with_the_reference_parser_and_match_the_database() {
    let db = TestDb::new();
    let f = populate(&db);
    // An entrypoint whose name needs escaping in a label.
    let odd = "we\"ird\\name\nline2";
    let queue = Queue::new(db.pool(2));
    queue.enqueue(NewJob::new(odd, b"x".to_vec())).unwrap();
    // Some of the log in the statistics, some not: the counts must add both.
    ops::aggregate_log(&mut db.client(), &Settings::default()).unwrap();
    queue
        .enqueue(NewJob::new("mail", b"after".to_vec()))
        .unwrap();

    let server = dashboard(&db, WebOptions::default());
    let answer = get(server.addr(), "/metrics");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer
            .header("Content-Type")
            .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        answer.headers
    );
    let (samples, families) = parse(&db, &answer.body);
    for family in &families {
        assert_eq!(family["type"], "gauge", "{family}");
        assert!(!family["help"].as_str().unwrap().is_empty(), "{family}");
    }

    assert_eq!(
        by_labels(&samples, "pgqueuer_queue_count"),
        expected(
            &db,
            "SELECT entrypoint, status::text, count(*) FROM pgqueuer GROUP BY 1, 2"
        )
    );
    let logs = by_labels(&samples, "pgqueuer_logs_count");
    assert_eq!(
        logs,
        expected(
            &db,
            "SELECT entrypoint, status::text, count(*) FROM pgqueuer_log \
             WHERE created > now() - interval '5 minutes' GROUP BY 1, 2"
        )
    );
    assert_eq!(
        logs.get(&labels(&[
            ("aggregation", "sum"),
            ("entrypoint", "mail"),
            ("status", "queued")
        ])),
        Some(&3.0),
        "two aggregated queued rows of mail and one not"
    );
    assert!(
        samples.contains_key(&(
            "pgqueuer_queue_count".into(),
            labels(&[
                ("aggregation", "sum"),
                ("entrypoint", odd),
                ("status", "queued")
            ])
        )),
        "the odd name round-trips through escaping"
    );

    let slots = by_labels(&samples, "pgqueuer_slots_in_use");
    assert_eq!(
        slots,
        BTreeMap::from([(labels(&[("entrypoint", "limited")]), 1.0)])
    );
    let evidence = by_labels(&samples, "pgqueuer_slot_limit_evidence");
    assert_eq!(
        evidence,
        BTreeMap::from([(labels(&[("entrypoint", "limited")]), 1.0)])
    );
    let ages = by_labels(&samples, "pgqueuer_oldest_queued_age_seconds");
    let mut with_waiting: Vec<String> = ages.keys().map(|l| l[0].1.clone()).collect();
    with_waiting.sort();
    let mut want = vec![
        "blobs".to_owned(),
        "from_python".to_owned(),
        "mail".to_owned(),
        odd.to_owned(),
    ];
    want.sort();
    assert_eq!(with_waiting, want, "entrypoints with eligible queued jobs");
    assert!(ages.values().all(|a| (0.0..600.0).contains(a)), "{ages:?}");
    let unaggregated: i64 = crate::harness::scalar(
        &mut db.client(),
        "SELECT count(*) FROM pgqueuer_log WHERE NOT aggregated",
    );
    #[allow(clippy::cast_precision_loss)]
    let unaggregated = unaggregated as f64;
    assert!(unaggregated > 0.0);
    assert_eq!(
        samples.get(&("pgqueuer_unaggregated_log_rows".into(), vec![])),
        Some(&unaggregated)
    );
    assert_eq!(
        samples.get(&("pgqueuer_stale_picked_jobs".into(), vec![])),
        Some(&0.0)
    );

    // The picked job's worker goes quiet: stale by the library function's threshold.
    db.client()
        .execute(
            "UPDATE pgqueuer SET heartbeat = now() - interval '2 minutes' WHERE id = $1",
            &[&f.picked],
        )
        .unwrap();
    let text = ops::prometheus_text(
        &mut db.client(),
        &Settings::default(),
        Duration::from_secs(60),
    )
    .unwrap();
    let (samples, _) = parse(&db, &text);
    assert_eq!(
        samples.get(&("pgqueuer_stale_picked_jobs".into(), vec![])),
        Some(&1.0)
    );
    // Reading changed nothing: the log is as unaggregated as before.
    let after: i64 = crate::harness::scalar(
        &mut db.client(),
        "SELECT count(*) FROM pgqueuer_log WHERE NOT aggregated",
    );
    #[allow(clippy::cast_precision_loss)]
    let after = after as f64;
    assert_eq!(after, unaggregated, "a scrape does not aggregate");
    server.join();
}
