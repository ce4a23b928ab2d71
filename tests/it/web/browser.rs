//! The dashboard as a person sees it (`pgq web`), in a real headless Chromium: every page against a
//! queue with jobs in every state (some enqueued by Python PgQueuer 1.6.0), a requeue
//! pressed on the Failures page, the Overview updating by itself, and a page telling
//! that its server went away. Each page's screenshot is saved under
//! `target/web-screenshots/` for review.

use std::time::Duration;

use pgqueuer::{NewJob, Queue};

use super::webdriver::{Browser, screenshot_dir};
use super::{HELD_REASON, PgqWeb, populate};
use crate::harness::TestDb;

#[test]
fn a_person_sees_and_works_the_queue_in_a_real_browser() {
    let db = TestDb::new();
    let f = populate(&db);
    // `pgq web` itself, so that its death can be shown to the page.
    let mut server = PgqWeb::start(&db, &[]);
    let base = format!("http://{}", server.addr);
    let browser = Browser::start();
    let shots = screenshot_dir();

    let pages: Vec<(String, &str, Vec<String>)> = vec![
        (
            "/".into(),
            "overview",
            vec![
                "Overview".into(),
                "queued".into(),
                "picked (running)".into(),
                "failed (held)".into(),
                "Throughput".into(),
                "Backlog by entrypoint".into(),
                "from_python".into(),
                "mail".into(),
            ],
        ),
        (
            "/entrypoints?window=24h".into(),
            "entrypoints",
            vec![
                "Entrypoints".into(),
                "fragile".into(),
                "failure rate".into(),
                "p95".into(),
            ],
        ),
        (
            "/entrypoints/limited".into(),
            "entrypoint",
            vec![
                "Entrypoint limited".into(),
                "slots in use".into(),
                f.picked.to_string(),
                f.claimer.worker_id().to_string(),
            ],
        ),
        (
            "/jobs".into(),
            "jobs",
            vec![
                "Jobs".into(),
                f.queued.to_string(),
                f.python[0].to_string(),
                "from_python".into(),
            ],
        ),
        (
            format!("/jobs/{}", f.held),
            "job",
            vec![
                format!("Job {}", f.held),
                HELD_REASON.into(),
                "\"invoice\": 42".into(),
                "History".into(),
            ],
        ),
        (
            format!("/jobs/{}", f.raised),
            "finished-job",
            vec![
                "no longer in the queue table".into(),
                "upstream said 502".into(),
            ],
        ),
        (
            "/failures".into(),
            "failures",
            vec![
                "Held jobs (1)".into(),
                HELD_REASON.into(),
                "Requeue selected".into(),
                "upstream said 502".into(),
            ],
        ),
        (
            "/workers".into(),
            "workers",
            vec![f.claimer.worker_id().to_string()],
        ),
        ("/schedules".into(), "schedules", vec!["Schedules".into()]),
        (
            "/system".into(),
            "system",
            vec![
                "PostgreSQL".into(),
                "verify passed".into(),
                "pgqueuer_log".into(),
            ],
        ),
    ];
    for (path, name, expect) in &pages {
        browser.goto(&format!("{base}{path}"));
        let text =
            browser.wait_for_text(Duration::from_secs(10), &format!("{path} rendered"), |t| {
                // Table headings are upper-cased by the stylesheet.
                let t = t.to_lowercase();
                expect.iter().all(|e| t.contains(&e.to_lowercase()))
            });
        assert!(!text.contains("Server error"), "{path}: {text}");
        browser.screenshot(&shots.join(format!("{name}.png")));
    }

    // The live badge says the page hears the server.
    browser.goto(&format!("{base}/"));
    browser.wait_for_text(Duration::from_secs(10), "the live badge", |t| {
        t.contains("live")
    });

    // Requeue a held job from the Failures page.
    browser.goto(&format!("{base}/failures"));
    browser.wait_for_text(Duration::from_secs(10), "live", |t| t.contains("live"));
    browser.click(&format!("input[name=ids][value=\"{}\"]", f.held));
    browser.click("#requeue-selected");
    browser.wait_for_text(Duration::from_secs(10), "the held list emptied", |t| {
        t.contains("Held jobs (0)")
    });
    let status: String = db
        .client()
        .query_one(
            "SELECT status::text FROM pgqueuer WHERE id = $1",
            &[&f.held],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "queued", "the requeue reached the database");
    browser.goto(&format!("{base}/jobs/{}", f.held));
    browser.wait_for_text(Duration::from_secs(10), "the job shows queued", |t| {
        t.contains("queued") && !t.contains("Requeue")
    });

    // The Overview updates by itself after an enqueue: no reload (a mark set on the
    // window survives), the queued figure grows.
    browser.goto(&format!("{base}/"));
    browser.wait_for_text(Duration::from_secs(10), "live", |t| t.contains("live"));
    let before = queued_figure(&browser);
    browser.run("window.__pgqMark = 'still here'; return true;");
    Queue::new(db.pool(1))
        .enqueue_many(&[
            NewJob::new("mail", b"a".to_vec()),
            NewJob::new("mail", b"b".to_vec()),
        ])
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while queued_figure(&browser) != before + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the overview did not update by itself: {} queued, {before} before",
            queued_figure(&browser)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        browser.run("return window.__pgqMark || null;"),
        serde_json::json!("still here"),
        "the page was not reloaded"
    );
    browser.screenshot(&shots.join("overview-updated.png"));

    // The server dies: the page says so.
    server.kill();
    browser.wait_for_text(
        Duration::from_secs(15),
        "the page to say its server is gone",
        |t| t.contains("server unreachable"),
    );
    browser.screenshot(&shots.join("server-gone.png"));
    assert!(browser.url().starts_with(&base));
}

fn queued_figure(browser: &Browser) -> i64 {
    browser
        .run("var n = document.querySelector('#queued .n'); return n ? n.textContent : null;")
        .as_str()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(-1)
}
