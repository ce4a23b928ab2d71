//! A queue with a prefix and a schema.

use std::time::Duration;

use pgqueuer::events::Event;
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{Error, OnConflict, Queue, Settings, Status};

use super::job;
use crate::harness::{TestDb, scalar};

/// A queue with a prefix and a schema enqueues, dedupes, cancels, waits and notifies
/// through its own tables and channel only; a bad channel name is refused.
#[test]
fn a_queue_with_prefix_and_schema_uses_its_own_objects() {
    let db = TestDb::new();
    let settings = Settings::with_prefix("app_").schema("myq");
    let mut client = db.client();
    pgqueuer::upgrade_with(&mut client, &settings).unwrap();
    let queue = Queue::with_settings(db.pool(2), &settings).unwrap();
    client.batch_execute("LISTEN \"app_ch_pgqueuer\"").unwrap();
    let ids = queue
        .enqueue_deduplicated(
            &[job("p").dedupe_key("k"), job("p").dedupe_key("k")],
            OnConflict::Skip,
        )
        .unwrap();
    assert!(ids[0].is_some() && ids[1].is_none());
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM myq.app_pgqueuer"),
        1
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        0
    );
    let err = queue.enqueue(job("p").dedupe_key("k")).unwrap_err();
    assert!(err.is_duplicate(), "{err:?}");
    let id = ids[0].unwrap();
    assert_eq!(queue.cancel(&[id]).unwrap(), [id]);
    let statuses = queue.wait_for(&[id], Duration::from_secs(5)).unwrap();
    assert_eq!(statuses[&id], Status::Canceled);
    let mut kinds = Vec::new();
    let mut notes = client.notifications();
    let mut it = notes.timeout_iter(Duration::from_millis(300));
    while let Some(n) = it.next().unwrap() {
        let event = Event::parse(n.payload()).unwrap();
        assert_eq!(event.channel(), "app_ch_pgqueuer");
        kinds.push(event.kind());
    }
    assert!(kinds.contains(&"cancellation_event"), "{kinds:?}");
    let bad = Settings {
        channel: "no good".into(),
        ..Settings::default()
    };
    assert!(matches!(
        Queue::with_settings(db.pool(1), &bad),
        Err(Error::InvalidSetting { .. })
    ));
}
