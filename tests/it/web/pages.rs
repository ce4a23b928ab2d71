//! Every page over HTTP against a queue with jobs in every state, hostile values shown
//! as text, and the answers to bad input.

use pgqueuer::web::WebOptions;
use pgqueuer::{NewJob, Queue};

use super::{HELD_REASON, dashboard, get, populate};
use crate::harness::TestDb;

/// What each page says about a queue with a job in every state (queued, deferred,
/// picked with a slot, held, finished, raised, enqueued by Python, binary).
#[test]
fn every_page_shows_the_queue() {
    let db = TestDb::new();
    let f = populate(&db);
    let server = dashboard(&db, WebOptions::default());
    let addr = server.addr();

    let page = get(addr, "/");
    assert_eq!(page.status, 200, "{}", page.body);
    for text in [
        "Overview",
        "mail",
        "from_python",
        "limited",
        "fragile",
        "exceptions, last hour",
        "Throughput",
    ] {
        assert!(page.body.contains(text), "overview lacks {text:?}");
    }
    // 2 mail (one deferred) + 2 Python + 1 blob queued; 1 picked; 1 held.
    assert_eq!(card(&page.body, "queued"), "5", "{}", page.body);
    assert_eq!(card(&page.body, "picked"), "1");
    assert_eq!(card(&page.body, "failed"), "1");

    let page = get(addr, "/entrypoints?window=24h");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("failure rate") && page.body.contains("/entrypoints/fragile"));

    let page = get(addr, "/entrypoints/limited");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains(&format!("/jobs/{}", f.picked)),
        "the picked job is listed"
    );
    assert!(page.body.contains("highest slot held"));
    assert!(page.body.contains(&f.claimer.worker_id().to_string()));

    let page = get(addr, "/jobs?status=queued&entrypoint=mail");
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&format!("/jobs/{}\"", f.queued)));
    assert!(page.body.contains(&format!("/jobs/{}\"", f.deferred)));
    assert!(!page.body.contains(&format!("/jobs/{}\"", f.picked)));
    // PgQueuer's page= links: 50 per page, so page 1 holds both mail jobs, page 2 none.
    let page = get(addr, "/jobs?status=queued&entrypoint=mail&page=1");
    assert!(page.body.contains(&format!("/jobs/{}\"", f.deferred)));
    let page = get(addr, "/jobs?status=queued&entrypoint=mail&page=2");
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("No jobs match"),
        "page 2 skips the first 50"
    );

    let page = get(addr, &format!("/jobs/{}", f.held));
    assert_eq!(page.status, 200);
    assert!(page.body.contains(HELD_REASON), "the held job's reason");
    assert!(
        page.body.contains("&quot;invoice&quot;: 42"),
        "JSON pretty-printed: {}",
        page.body
    );
    assert!(page.body.contains("Requeue"));

    let page = get(addr, &format!("/jobs/{}", f.binary));
    assert!(page.body.contains("hex (not UTF-8)") && page.body.contains("ff fe 00 41"));
    assert!(
        page.body.contains("&quot;trace&quot;: &quot;abc&quot;"),
        "headers shown"
    );

    let page = get(addr, &format!("/jobs/{}", f.raised));
    assert_eq!(
        page.status, 200,
        "a job that left the queue is shown from its log"
    );
    assert!(page.body.contains("no longer in the queue table"));
    assert!(page.body.contains("upstream said 502"), "its traceback");

    let page = get(addr, &format!("/jobs/{}", f.python[0]));
    assert!(page.body.contains("enqueued by PgQueuer 1.6.0"));
    let page = get(addr, &format!("/jobs/{}", f.python[1]));
    assert!(
        page.body.contains("py-key")
            && page.body.contains("&quot;source&quot;: &quot;python&quot;")
    );

    let goto = get(addr, &format!("/jobs/goto?id={}", f.done));
    assert_eq!(goto.status, 303);
    assert_eq!(goto.header("Location"), Some(&*format!("/jobs/{}", f.done)));

    let page = get(addr, "/failures");
    assert!(page.body.contains(HELD_REASON) && page.body.contains("upstream said 502"));
    assert!(
        page.body
            .contains(&format!("name=\"ids\" value=\"{}\"", f.held))
    );

    let page = get(addr, "/workers");
    assert!(page.body.contains(&f.claimer.worker_id().to_string()));
    let page = get(addr, "/workers?stale_after=1");
    assert_eq!(page.status, 200);

    db.client()
        .batch_execute(
            "INSERT INTO pgqueuer_schedules (expression, entrypoint, next_run) \
             VALUES ('*/5 * * * *', 'nightly_report', now() + interval '5 minutes')",
        )
        .unwrap();
    let page = get(addr, "/schedules");
    assert!(page.body.contains("*/5 * * * *") && page.body.contains("nightly_report"));

    let page = get(addr, "/system");
    assert!(page.body.contains("PostgreSQL 1"), "server version");
    assert!(page.body.contains("verify passed"), "{}", page.body);
    assert!(page.body.contains("pgqueuer_log"));
    assert!(
        page.body.contains("sslmode="),
        "the connection's TLS settings"
    );

    for path in ["/static/style.css", "/static/live.js"] {
        let asset = get(addr, path);
        assert_eq!(asset.status, 200, "{path}");
        assert!(asset.body.len() > 500, "{path} is embedded");
    }
    server.join();
}

/// A payload, entrypoint and traceback holding markup are shown as text, everywhere.
#[test]
fn hostile_values_render_as_text() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let evil = "<script>alert('x')</script>";
    let id = queue
        .enqueue(NewJob::new(evil, format!("payload {evil}").into_bytes()).header("h", evil))
        .unwrap();
    let failing = queue.enqueue(NewJob::new("boom", b"x".to_vec())).unwrap();
    pgqueuer::Worker::builder(db.pool(4))
        .entrypoint("boom", |_, _| Err("<img src=x onerror=alert(1)>".into()))
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    let server = dashboard(&db, WebOptions::default());
    let addr = server.addr();
    for path in [
        "/".to_owned(),
        "/entrypoints".to_owned(),
        format!("/jobs/{id}"),
        format!("/jobs/{failing}"),
        "/failures".to_owned(),
        "/jobs".to_owned(),
        format!("/entrypoints/{}", "%3Cscript%3Ealert('x')%3C%2Fscript%3E"),
    ] {
        let page = get(addr, &path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(
            !page.body.contains("<script>alert") && !page.body.contains("<img src=x"),
            "{path} carries live markup:\n{}",
            page.body
        );
    }
    let page = get(addr, &format!("/jobs/{id}"));
    assert!(
        page.body
            .contains("&lt;script&gt;alert('x')&lt;/script&gt;"),
        "{}",
        page.body
    );
    let page = get(addr, "/failures");
    assert!(page.body.contains("&lt;img src=x onerror=alert(1)&gt;"));
    server.join();
}

/// The figure of the overview card `id`.
pub fn card(body: &str, id: &str) -> String {
    let at = body
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no card {id}"));
    let rest = &body[at..];
    let start = rest.find("<div class=\"n\">").expect("a figure") + "<div class=\"n\">".len();
    rest[start..start + rest[start..].find('<').unwrap()].to_owned()
}

/// The 1 h / 6 h / 24 h figures kept between requests stay exact as jobs finish and as
/// an aggregation moves log rows into the statistics (each transition counted once).
#[test]
fn window_figures_count_each_transition_once_across_aggregations() {
    let db = TestDb::new();
    let server = dashboard(&db, WebOptions::default());
    let addr = server.addr();
    let queue = Queue::new(db.pool(2));
    let run = |n: usize| {
        let jobs: Vec<NewJob> = (0..n)
            .map(|_| NewJob::new("tally", b"x".to_vec()))
            .collect();
        queue.enqueue_many(&jobs).unwrap();
        pgqueuer::Worker::builder(db.pool(4))
            .entrypoint("tally", |_, _| Ok(()))
            .build()
            .unwrap()
            .run_until_empty()
            .unwrap();
    };
    let successful = |body: &str| -> u64 {
        // The 1 h row of the windows table: "1 h", successful, exception, canceled.
        let at = body.find("<td>1 h</td>").expect("the 1 h row");
        let cell = &body[at..];
        let start = cell.find("<td class=\"num\">").unwrap() + "<td class=\"num\">".len();
        cell[start..start + cell[start..].find('<').unwrap()]
            .parse()
            .unwrap()
    };
    run(7);
    assert_eq!(successful(&get(addr, "/").body), 7);
    run(5);
    assert_eq!(
        successful(&get(addr, "/").body),
        12,
        "new transitions added"
    );
    pgqueuer::ops::aggregate_log(&mut db.client(), &pgqueuer::Settings::default()).unwrap();
    assert_eq!(
        successful(&get(addr, "/").body),
        12,
        "aggregated rows not counted twice"
    );
    run(3);
    pgqueuer::ops::aggregate_log(&mut db.client(), &pgqueuer::Settings::default()).unwrap();
    assert_eq!(successful(&get(addr, "/").body), 15, "nor lost");
    server.join();
}

/// A queue too large to count on each view: queued, deferred and failed are estimated
/// from a sample and marked so, within a few percent; picked counts and waits are exact;
/// an entrypoint with a single queued job is listed although no sample would see it.
#[test]
fn a_large_queue_is_estimated_and_says_so() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(
            "INSERT INTO pgqueuer (priority, entrypoint, status, execute_after)
             SELECT 0, 'bulk_' || (i % 2),
                    (CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'queued' END)::pgqueuer_status,
                    now() + CASE WHEN i % 4 = 0 THEN interval '1 hour' ELSE interval '0' END
               FROM generate_series(1, 240000) AS i;
             INSERT INTO pgqueuer (priority, entrypoint, status, execute_after)
             VALUES (0, 'lonely', 'queued', now() - interval '1 minute');
             INSERT INTO pgqueuer (priority, entrypoint, status, queue_manager_id)
             SELECT 0, 'bulk_1', 'picked', gen_random_uuid() FROM generate_series(1, 3);
             ANALYZE pgqueuer;",
        )
        .unwrap();
    let server = dashboard(&db, WebOptions::default());
    let page = get(server.addr(), "/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("id=\"estimated\""),
        "the estimate is said"
    );
    let figure = card(&page.body, "queued");
    let queued: f64 = figure
        .trim_start_matches("≈ ")
        .parse()
        .unwrap_or_else(|_| panic!("{figure}"));
    // 240,000 rows: 1 in 50 failed, the rest queued (a quarter of those deferred).
    let truth = 240_000.0 * 49.0 / 50.0 + 1.0;
    assert!(
        (queued - truth).abs() / truth < 0.1,
        "estimated {queued} for {truth}"
    );
    assert!(figure.starts_with("≈ "), "{figure}");
    assert_eq!(card(&page.body, "picked"), "3", "picked counts are exact");
    assert!(
        page.body.contains("/entrypoints/lonely"),
        "the lonely entrypoint is listed"
    );
    server.join();
}

/// A job with a 10 MB payload, 100 kB of headers and a 2 MB traceback: the job and
/// failures pages read and show bounded prefixes (each page stays under 100 kB) and say
/// the whole sizes.
#[test]
fn huge_payloads_headers_and_tracebacks_are_shown_bounded() {
    let db = TestDb::new();
    let payload = vec![b'p'; 10 << 20];
    let id = Queue::new(db.pool(1))
        .enqueue(NewJob::new("bulky", payload).header("big", "h".repeat(100_000)))
        .unwrap();
    let mut client = db.client();
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&id],
        )
        .unwrap();
    client
        .execute(
            "INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint, traceback)
             VALUES ($1, 'failed', 0, 'bulky', jsonb_build_object(
                 'exception_type', 'Boom', 'exception_message', repeat('m', 1000000),
                 'traceback', repeat('t', 1000000)))",
            &[&id],
        )
        .unwrap();
    let server = dashboard(&db, WebOptions::default());
    let addr = server.addr();
    let page = get(addr, &format!("/jobs/{id}"));
    assert_eq!(page.status, 200);
    assert!(page.body.len() < 100_000, "{} bytes", page.body.len());
    assert!(
        page.body
            .contains(&format!("first 16384 of {} bytes", 10 << 20)),
        "the payload's whole size"
    );
    let headers: i32 = client
        .query_one(
            "SELECT octet_length(headers::text) FROM pgqueuer WHERE id = $1",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert!(
        page.body
            .contains(&format!("first 16384 of {headers} bytes")),
        "the headers' whole size"
    );
    assert!(page.body.contains("Boom"), "the failure");
    let page = get(addr, "/failures");
    assert_eq!(page.status, 200);
    assert!(page.body.len() < 100_000, "{} bytes", page.body.len());
    assert!(page.body.contains("Boom: mmm"));
}

/// An entrypoint's page lists its rate-limit windows: starts in the last window against
/// the starts allowed.
#[test]
fn an_entrypoint_page_shows_its_rate_in_use() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let jobs: Vec<NewJob> = (0..3)
        .map(|i| NewJob::new("rated", format!("{i}")))
        .collect();
    queue.enqueue_many(&jobs).unwrap();
    let claimer = pgqueuer::Claimer::builder()
        .entrypoint("rated", 0)
        .rate_limit(
            "rated",
            pgqueuer::RateLimit::new(5, std::time::Duration::from_secs(60)),
        )
        .build()
        .unwrap();
    let mut client = db.client();
    claimer.provision_rate_limits(&mut client).unwrap();
    let pool = db.pool(1);
    assert_eq!(
        claimer
            .claim(&mut pool.get().unwrap(), 2)
            .unwrap()
            .jobs
            .len(),
        2
    );
    let server = dashboard(&db, WebOptions::default());
    let page = get(server.addr(), "/entrypoints/rated");
    assert_eq!(page.status, 200, "{}", page.body);
    let table = page
        .body
        .split("<table id=\"rates\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no rates table: {}", page.body));
    assert!(
        table.contains("<td class=\"num\">2</td><td class=\"num\">5</td>"),
        "{table}"
    );
    // A limit stored since is the one shown (the units stay those of the larger one).
    pgqueuer::ops::set_limits(
        &mut client,
        &pgqueuer::Settings::default(),
        "rated",
        None,
        Some(&[pgqueuer::RateLimit::new(
            3,
            std::time::Duration::from_secs(60),
        )]),
        "test",
    )
    .unwrap();
    let page = get(server.addr(), "/entrypoints/rated");
    assert!(
        page.body
            .contains("<td class=\"num\">2</td><td class=\"num\">3</td>"),
        "{}",
        page.body
    );
}
