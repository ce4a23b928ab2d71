//! Rate limits: units spent by claims (one claimer, then a fleet of worker processes),
//! stacked windows with a concurrency limit, re-picks, and a killed worker.

use std::time::{Duration, Instant, SystemTime};

use pgqueuer::postgres::Client;
use pgqueuer::{Claimer, Explanation, RateLimit};

use crate::claim::{insert_jobs, success};
use crate::faults::process::Proc;
use crate::harness::{TestDb, captured, eventually, scalar, timing_lock};

/// A claim takes no more jobs than the rate's units allow, spends one per job, and says
/// how long until the next start; once the window has passed, the units are spent again.
#[test]
fn claims_spend_units_and_say_when_the_next_start_is_allowed() {
    let db = TestDb::new();
    let mut client = db.client();
    let ids = insert_jobs(&mut client, "api", 0, 12);
    let pool = db.pool(1);
    let per = Duration::from_millis(600);
    let claimer = Claimer::builder()
        .entrypoint("api", 0)
        .rate_limit("api", RateLimit::new(5, per))
        .build()
        .unwrap();
    assert!(claimer.is_rate_limited());
    claimer.provision_rate_limits(&mut client).unwrap();
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_rs_rates"),
        5
    );
    let mut conn = pool.get().unwrap();
    let first = Instant::now();
    let claim = claimer.claim(&mut conn, 10).unwrap();
    assert_eq!(claim.jobs.len(), 5, "five units, five jobs");
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_rs_rates WHERE started > now() - interval '1 minute'"
        ),
        5,
        "each job spent a unit"
    );
    // Finishing the jobs frees nothing: a rate counts starts, not running jobs.
    claimer
        .complete(&mut conn, &success(ids[..5].to_vec()))
        .unwrap();
    let claim = claimer.claim(&mut conn, 10).unwrap();
    assert!(claim.jobs.is_empty(), "every unit is resting");
    let wait = claim.rate_wait.expect("due jobs wait for the rate");
    assert!(
        wait > Duration::ZERO && wait <= per + Duration::from_millis(12),
        "the next start is within a window and its guard: {wait:?}"
    );
    // A start later than the allowance spends units of its own; none is free now.
    assert_eq!(
        claimer.start_allowance("api"),
        Some(Duration::from_millis(12))
    );
    let late = claimer
        .spend_late_start(&mut client, "api")
        .unwrap()
        .expect("no unit is free for a late start");
    assert!(
        late > Duration::ZERO && late <= wait,
        "{late:?} (claim: {wait:?})"
    );
    std::thread::sleep(wait);
    let claim = claimer.claim(&mut conn, 10).unwrap();
    assert!(
        first.elapsed() >= per,
        "no unit is spent twice within {per:?}"
    );
    assert_eq!(claim.jobs.len(), 5, "the units rested: five more starts");
    assert_eq!(claim.rate_wait.map(|w| w > Duration::ZERO), Some(true));
    // With nothing left to start there is nothing to wait for.
    claimer
        .complete(&mut conn, &success(ids[5..10].to_vec()))
        .unwrap();
    std::thread::sleep(per + Duration::from_millis(20));
    // A late start spends one unit: four are left for the claim.
    assert_eq!(claimer.spend_late_start(&mut client, "api").unwrap(), None);
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_rs_rates WHERE started > now() - interval '300 ms'"
        ),
        1,
        "the late start stamped one unit"
    );
    let claim = claimer.claim(&mut conn, 10).unwrap();
    assert_eq!(claim.jobs.len(), 2);
    assert_eq!(claim.rate_wait, None, "no due job is left behind");
    assert_eq!(claimer.start_allowance("mail"), None);
}

/// `explain` says when a rate limit holds a due job back: "waiting for the rate limit,
/// next start in X ms", from the units in the rates table; nothing of the kind while a
/// unit is free.
#[test]
fn explain_says_when_the_rate_allows_the_next_start() {
    let db = TestDb::new();
    let mut client = db.client();
    let ids = insert_jobs(&mut client, "api", 0, 3);
    let queue = pgqueuer::Queue::new(db.pool(1));
    let claimer = Claimer::builder()
        .entrypoint("api", 0)
        .rate_limit("api", RateLimit::new(2, Duration::from_secs(60)))
        .build()
        .unwrap();
    claimer.provision_rate_limits(&mut client).unwrap();
    let said = queue.explain(ids[0]).unwrap().to_string();
    assert!(!said.contains("rate limit"), "{said}");
    let pool = db.pool(1);
    assert_eq!(
        claimer
            .claim(&mut pool.get().unwrap(), 10)
            .unwrap()
            .jobs
            .len(),
        2
    );
    let explained = queue.explain(ids[2]).unwrap();
    let said = explained.to_string();
    let Explanation::Waiting { rate_wait, .. } = explained else {
        panic!("{said}");
    };
    let wait = rate_wait.expect("the rate holds the job back");
    assert!(
        wait > Duration::from_secs(55) && wait <= Duration::from_millis(60_020),
        "{wait:?}"
    );
    assert!(
        said.contains(&format!(
            "waiting for the rate limit, next start in {} ms",
            wait.as_millis()
        )),
        "{said}"
    );
    // A schema without the rates table (PgQueuer's alone) explains as before.
    client
        .batch_execute("DROP TABLE pgqueuer_rs_rates")
        .unwrap();
    let said = queue.explain(ids[2]).unwrap().to_string();
    assert!(
        said.contains("is due and waiting") && !said.contains("rate"),
        "{said}"
    );
}

/// Bad limits are refused when the claimer or worker is built, naming what is wrong.
#[test]
fn bad_rate_limits_are_refused_at_build() {
    let e = Claimer::builder()
        .entrypoint("api", 0)
        .rate_limit("mail", RateLimit::per_second(5))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("not a registered entrypoint"), "{e}");
    let e = Claimer::builder()
        .entrypoint("api", 0)
        .rate_limit("api", RateLimit::per_second(0))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("not in 1..=100000"), "{e}");
    let db = TestDb::new();
    let Err(e) = pgqueuer::Worker::builder(db.pool(4))
        .entrypoint(
            pgqueuer::Entrypoint::new("api")
                .rate_limit(5, Duration::from_secs(1))
                .rate_limit(9, Duration::from_secs(1)),
            |_, _| Ok(()),
        )
        .build()
    else {
        panic!("two limits of one window were accepted");
    };
    assert!(e.to_string().contains("share the window"), "{e}");
}

/// A worker that declares a rate limit refuses to start where the rates table is missing,
/// naming it.
#[test]
fn a_rate_limited_worker_needs_the_rates_table() {
    let db = TestDb::new();
    db.client()
        .batch_execute("DROP TABLE pgqueuer_rs_rates")
        .unwrap();
    let Err(e) = pgqueuer::Worker::builder(db.pool(4))
        .entrypoint(
            pgqueuer::Entrypoint::new("api").rate_limit(5, Duration::from_secs(1)),
            |_, _| Ok(()),
        )
        .build()
    else {
        panic!("a worker started without the rates table");
    };
    assert!(e.to_string().contains("pgqueuer_rs_rates"), "{e}");
    pgqueuer::upgrade(&mut db.client()).unwrap();
    pgqueuer::Worker::builder(db.pool(4))
        .entrypoint(
            pgqueuer::Entrypoint::new("api").rate_limit(5, Duration::from_secs(1)),
            |_, _| Ok(()),
        )
        .build()
        .expect("upgrade() made the table again");
}

/// The start times of the recorded runs (`examples/worker --record`), sorted. The server
/// runs on this machine, so the workers' clock is the database's.
fn starts(client: &mut Client) -> Vec<SystemTime> {
    client
        .query(
            "SELECT started FROM pgqueuer_example_runs ORDER BY started",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// How much later than the worker let it start a handler may record its start. The
/// worker lets a job start only within its unit's guard (a fiftieth of the window, at
/// most 20 ms, after the claim that stamped the unit), right before it calls the handler;
/// the OS may still deschedule the thread between that check and the handler's first
/// line, which nothing in the process can prevent, and on the suite's two loaded cores it
/// did (51 recorded starts in a second of a 50/s fleet, once in a CI run). The upper
/// bounds below are read over windows this much shorter than the limit's
/// ([`most_in_a_kept_window`]); a broken limit shows far more (a lease giving back what
/// its claim took started 182 in a second).
pub(super) const PREEMPTED: Duration = Duration::from_millis(100);

/// The most starts in any window of `per` less [`PREEMPTED`]: what a rate of `per` must
/// bound, measured at the handlers.
pub(super) fn most_in_a_kept_window(starts: &[SystemTime], per: Duration) -> usize {
    most_in_any_window(starts, per - PREEMPTED)
}

/// The most starts in any window of `per` (half-open, starting at a start: the windows
/// that hold the most).
pub(super) fn most_in_any_window(starts: &[SystemTime], per: Duration) -> usize {
    let mut most = 0;
    let mut end = 0;
    for (i, start) in starts.iter().enumerate() {
        let until = *start + per;
        while end < starts.len() && starts[end] < until {
            end += 1;
        }
        most = most.max(end - i);
    }
    most
}

/// The most jobs running at once, from each run's start and finish.
fn most_running(client: &mut Client) -> i64 {
    scalar(
        client,
        "SELECT COALESCE(max(n), 0) FROM (SELECT sum(d) OVER (ORDER BY t, d) AS n FROM (\
             SELECT started AS t, 1 AS d FROM pgqueuer_example_runs \
             UNION ALL SELECT finished, -1 FROM pgqueuer_example_runs) e) s",
    )
}

/// `examples/worker` processes draining `api` with `rate` flags, each with `threads`.
fn fleet(db: &TestDb, n: usize, threads: usize, extra: &[&str]) -> Vec<Proc> {
    (0..n)
        .map(|i| {
            let mut args: Vec<String> = [
                "--threads",
                &threads.to_string(),
                "--batch",
                "10",
                "--record",
                "--quiet",
                "--drain",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            Proc::spawn(&format!("w{i}"), &db.dsn(), &args)
        })
        .collect()
}

/// Waits for every process of a drain to exit, successfully.
fn wait_all(procs: &mut [Proc], within: Duration) {
    let deadline = Instant::now() + within;
    for p in procs.iter_mut() {
        while p.running() {
            assert!(
                Instant::now() < deadline,
                "worker {} still running after {within:?}: {}",
                p.label,
                p.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !p.stderr().contains("ERROR") && !p.stderr().contains("panicked"),
            "worker {}: {}",
            p.label,
            p.stderr()
        );
    }
}

/// Creates the runs table and enqueues `jobs` jobs of `api`.
fn prepare(db: &TestDb, jobs: i64) -> Client {
    let mut client = db.client();
    client
        .batch_execute(
            "CREATE TABLE pgqueuer_example_runs (
                 job_id bigint NOT NULL, entrypoint text NOT NULL,
                 started timestamptz NOT NULL, finished timestamptz NOT NULL, pid int NOT NULL)",
        )
        .unwrap();
    insert_jobs(&mut client, "api", 0, jobs);
    client
}

/// Three worker processes of eight threads each, a rate of 50 per second, 2,000 jobs: no
/// window of a second (less [`PREEMPTED`]) holds more than 50 handler starts, and the run
/// uses at least 80% of the rate (about 40 s, not 60; each unit rests its window and a
/// 20 ms guard, and a start later than the guard spends a unit more, more often on a
/// loaded machine).
#[test]
fn a_fleet_of_three_processes_keeps_fifty_starts_per_second() {
    let _timing = timing_lock();
    let db = TestDb::new();
    let mut client = prepare(&db, 2_000);
    let mut procs = fleet(
        &db,
        3,
        8,
        &["--entrypoint", "api:0:5", "--rate", "api=50/s"],
    );
    wait_all(&mut procs, Duration::from_secs(120));
    let starts = starts(&mut client);
    assert_eq!(starts.len(), 2_000, "every job ran once");
    let most = most_in_a_kept_window(&starts, Duration::from_secs(1));
    assert!(most <= 50, "{most} starts in one second");
    // A start later than its claim's guard spends a unit more, so a second where one
    // came late holds 49 starts: "reached" is read with that room.
    let reached = most_in_any_window(&starts, Duration::from_secs(1));
    assert!(
        reached >= 45,
        "the rate was not reached: {reached} starts at most in a second"
    );
    let span = starts[1_999].duration_since(starts[0]).unwrap();
    // The first 50 start at once; the other 1,950 need 39 s at the full rate.
    let full = Duration::from_secs_f64(1_950.0 / 50.0);
    assert!(
        span.as_secs_f64() * 0.8 <= full.as_secs_f64(),
        "2,000 starts took {span:?}: less than 80% of the rate (full rate: {full:?})"
    );
    eprintln!(
        "fleet at 50/s: {span:?} for 2,000 starts ({:.1}% of the rate)",
        100.0 * full.as_secs_f64() / span.as_secs_f64()
    );
}

/// Stacked: a concurrency limit of 3, 50 per second and 1,000 per minute, three processes.
/// Every window holds, no more than three run at once, and the minute's window binds
/// (the 1,001st start waits for the first to be a minute old).
#[test]
fn stacked_windows_and_a_concurrency_limit_hold_together() {
    let _timing = timing_lock();
    let db = TestDb::new();
    let mut client = prepare(&db, 1_100);
    let mut procs = fleet(
        &db,
        3,
        8,
        &[
            "--entrypoint",
            "api:3:20",
            "--rate",
            "api=50/s",
            "--rate",
            "api=1000/m",
        ],
    );
    wait_all(&mut procs, Duration::from_secs(150));
    let starts = starts(&mut client);
    assert_eq!(starts.len(), 1_100, "every job ran once");
    let second = most_in_a_kept_window(&starts, Duration::from_secs(1));
    assert!(second <= 50, "{second} starts in one second");
    let minute = most_in_a_kept_window(&starts, Duration::from_secs(60));
    assert!(minute <= 1_000, "{minute} starts in one minute");
    let minute = most_in_any_window(&starts, Duration::from_secs(60));
    // A handler that starts later than its claim's guard spends a unit more (see
    // `Claimer::spend_late_start`): some units of the minute go to such starts, more on a
    // loaded machine (977 of 1,000 were starts in a CI run of 2026-12-06, 942 beside other
    // test processes under nextest), so the bound only says the window nearly bound.
    assert!(
        minute >= 900,
        "the minute's window was nearly reached: {minute}"
    );
    let running = most_running(&mut client);
    assert!(running <= 3, "{running} ran at once");
    let gap = starts[1_000].duration_since(starts[0]).unwrap();
    assert!(
        gap >= Duration::from_secs(60),
        "the 1,001st start came {gap:?} after the first"
    );
    let span = starts[1_099].duration_since(starts[0]).unwrap();
    assert!(
        span <= Duration::from_secs(70),
        "1,100 starts took {span:?}: the minute's window should be the only long wait"
    );
}

/// A worker killed mid-run leaks no capacity: its stamps age out, its jobs are re-picked
/// (each re-pick a start that spends a unit), and the survivor goes on at the rate (80%
/// of it at least, at the handlers).
#[test]
fn a_killed_worker_leaks_no_capacity() {
    let _timing = timing_lock();
    let db = TestDb::new();
    let mut client = prepare(&db, 300);
    let args = [
        "--entrypoint",
        "api:0:200",
        "--rate",
        "api=20/s",
        "--heartbeat-timeout",
        "1",
    ];
    let mut victim = fleet(&db, 1, 8, &args);
    eventually(
        Duration::from_secs(30),
        "the victim to start 40 jobs",
        || scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_example_runs") >= 40,
    );
    victim[0].kill9();
    let mut survivor = fleet(&db, 1, 8, &args);
    wait_all(&mut survivor, Duration::from_secs(60));
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'api'"
        ),
        0,
        "every job ran, the killed worker's re-picked"
    );
    let starts = starts(&mut client);
    let most = most_in_a_kept_window(&starts, Duration::from_secs(1));
    assert!(most <= 20, "{most} starts in one second");
    // The survivor's own starts: from its first to its last at 20 per second.
    let theirs: Vec<SystemTime> = client
        .query(
            "SELECT started FROM pgqueuer_example_runs WHERE pid = $1 ORDER BY started",
            &[&i32::try_from(survivor[0].pid()).unwrap()],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let span = theirs[theirs.len() - 1].duration_since(theirs[0]).unwrap();
    let full = Duration::from_secs_f64((theirs.len() - 20) as f64 / 20.0);
    assert!(
        span.as_secs_f64() * 0.8 <= full.as_secs_f64(),
        "the survivor's {} starts took {span:?} (full rate: {full:?})",
        theirs.len()
    );
}

/// Every unit spent, as a trigger of the test's own on the rates table keeps it (a claim
/// rolled back takes its rows with it).
const STAMPS_DDL: &str = "\
    CREATE TABLE stamps (per_us bigint NOT NULL, unit int NOT NULL, started timestamptz NOT NULL);
    CREATE FUNCTION keep_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO stamps VALUES (NEW.per_us, NEW.unit, NEW.started); RETURN NEW; END $$;
    CREATE TRIGGER keep_stamp AFTER UPDATE ON pgqueuer_rs_rates
        FOR EACH ROW EXECUTE FUNCTION keep_stamp();";

/// The most units spent in any window of `per` (on the database's clock), and how many
/// were spent in all.
fn stamps_in_window(client: &mut Client, per: Duration) -> (i64, i64) {
    let per_us = i64::try_from(per.as_micros()).unwrap();
    let row = client
        .query_one(
            "SELECT COALESCE(max(n), 0), count(*) FROM (\
                 SELECT count(*) OVER (ORDER BY started RANGE BETWEEN CURRENT ROW AND \
                 ($1::bigint - 1) * interval '1 microsecond' FOLLOWING) AS n \
                 FROM stamps WHERE per_us = $1) w",
            &[&per_us],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// A small deterministic generator for the racers' choices.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Two claim lanes (claimers on connections of their own, each holding its claim open a
/// moment before it commits or rolls back) race two worker processes for one rate, while
/// urgent jobs arrive mid-claim. In each of 20 runs, no window holds more units spent
/// than the rate allows, and the rate bound; over the runs, the lanes and the processes
/// each won units.
#[test]
fn racing_lanes_and_processes_with_urgent_arrivals_keep_the_rate() {
    let _timing = timing_lock();
    let db = TestDb::new();
    let mut client = prepare(&db, 0);
    client.batch_execute(STAMPS_DDL).unwrap();
    let per = Duration::from_millis(200);
    let limit = RateLimit::new(10, per);
    let claimer = Claimer::builder()
        .entrypoint("api", 0)
        .rate_limit("api", limit)
        .build()
        .unwrap();
    claimer.provision_rate_limits(&mut client).unwrap();
    let (mut lanes_won, mut procs_won) = (0, 0);
    for run in 0..20 {
        client
            .batch_execute("TRUNCATE stamps, pgqueuer_example_runs; DELETE FROM pgqueuer")
            .unwrap();
        insert_jobs(&mut client, "api", 0, 300);
        let mut procs = fleet(
            &db,
            2,
            4,
            &["--entrypoint", "api:0:1", "--rate", "api=10/200ms"],
        );
        let until = Instant::now() + Duration::from_millis(1_500);
        let lanes: Vec<_> = (0..2u64)
            .map(|lane| {
                let (claimer, mut c) = (claimer.clone(), db.client());
                std::thread::spawn(move || {
                    let mut dice = Dice(0x9E37_79B9 ^ (run << 8) ^ (lane + 1));
                    let mut started = 0;
                    while Instant::now() < until {
                        let mut tx = c.transaction().unwrap();
                        let n = claimer.claim_in(&mut tx, 1 + dice.below(4) as usize);
                        let n = n.unwrap().jobs.len();
                        std::thread::sleep(Duration::from_millis(dice.below(4)));
                        if dice.below(4) == 0 {
                            tx.rollback().unwrap();
                        } else {
                            tx.commit().unwrap();
                            started += n;
                        }
                    }
                    started
                })
            })
            .collect();
        let mut injector = db.client();
        while Instant::now() < until {
            insert_jobs(&mut injector, "api", 100, 1);
            std::thread::sleep(Duration::from_millis(5));
        }
        let by_lanes: Vec<usize> = lanes.into_iter().map(|l| l.join().unwrap()).collect();
        for p in &mut procs {
            let status = p.terminate();
            assert!(status.success(), "{}: {status} {}", p.label, p.stderr());
        }
        let (most, spent) = stamps_in_window(&mut client, per);
        assert!(most <= 10, "run {run}: {most} units spent in one window");
        assert!(
            spent >= 40,
            "run {run}: only {spent} units spent: the rate never bound"
        );
        lanes_won += by_lanes.iter().sum::<usize>();
        procs_won += scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_example_runs");
    }
    // Which racer wins a unit is chance (the lanes claim back to back, the processes
    // when their wait ends; in one CI run the processes took every unit of a run): over
    // the runs, each kind won some.
    assert!(lanes_won > 0, "no lane started a job in 20 runs");
    assert!(procs_won > 0, "no process started a job in 20 runs");
}

/// A server of the test's own crashes (immediate stop) and starts again under two rate-
/// limited worker processes, within the first window: the units spent before the crash
/// still count after it, so no window of handler starts holds more than the rate.
#[test]
fn a_server_crash_mid_run_keeps_the_rate() {
    let server =
        crate::harness::Throwaway::new(&[]).unwrap_or_else(|e| panic!("throwaway server: {e}"));
    server
        .admin()
        .batch_execute("CREATE DATABASE rates")
        .unwrap();
    let dsn = server.dsn("rates");
    let connect = || {
        server
            .server
            .config("rates")
            .connect(pgqueuer::postgres::NoTls)
            .unwrap()
    };
    let mut client = connect();
    pgqueuer::upgrade(&mut client).unwrap();
    client
        .batch_execute(
            "CREATE TABLE pgqueuer_example_runs (
                 job_id bigint NOT NULL, entrypoint text NOT NULL,
                 started timestamptz NOT NULL, finished timestamptz NOT NULL, pid int NOT NULL)",
        )
        .unwrap();
    insert_jobs(&mut client, "api", 0, 60);
    let args: Vec<String> = [
        "--threads",
        "4",
        "--record",
        "--quiet",
        "--drain",
        "--heartbeat-timeout",
        "5",
        "--entrypoint",
        "api:0:5",
        "--rate",
        "api=20/5s",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| Proc::spawn(&format!("w{i}"), &dsn, &args))
        .collect();
    eventually(Duration::from_secs(30), "the first window's starts", || {
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_example_runs") >= 20
    });
    drop(client);
    server.crash().unwrap();
    server.start().unwrap();
    let mut client = connect();
    let deadline = Instant::now() + Duration::from_secs(90);
    for p in &mut procs {
        while p.running() {
            assert!(
                Instant::now() < deadline,
                "{} still running: {}",
                p.label,
                p.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !p.stderr().contains("panicked"),
            "{}: {}",
            p.label,
            p.stderr()
        );
    }
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        0,
        "every job ran"
    );
    let starts = starts(&mut client);
    assert!(starts.len() >= 60, "{} runs recorded", starts.len());
    // Back within the first window: units forgotten in the crash would start a second
    // batch of 20 in it.
    let most = most_in_a_kept_window(&starts, Duration::from_secs(5));
    assert!(most <= 20, "{most} starts in five seconds");
}

/// The rate in use and a Python worker beside a rate limit. A worker of ours holding its
/// three starts of a rate of 3 a minute sees them counted, in its stats, the `metrics`
/// gauges' source and `/metrics`, and no undeclared claim; once a real PgQueuer worker
/// (which has no rate limits) picks jobs of the entrypoint too, the limit watch reports
/// it, with the numbers, in the log and the stats.
#[test]
fn the_rate_in_use_is_shown_and_a_python_worker_beside_it_is_reported() {
    crate::harness::init_logging();
    let db = TestDb::new();
    let ep = "rated";
    let mut client = db.client();
    super::create_runs_table(&mut client);
    insert_jobs(&mut client, ep, 0, 3);
    let (release_tx, release) = crossbeam_channel::bounded::<()>(0);
    let ours = pgqueuer::Worker::builder(db.pool(4))
        .threads(3)
        .dequeue_timeout(Duration::from_millis(500))
        .entrypoint(
            pgqueuer::Entrypoint::new(ep).rate_limit(3, Duration::from_secs(60)),
            move |_job, _ctx| {
                let _ = release.recv_timeout(Duration::from_secs(120));
                Ok(())
            },
        )
        .build()
        .unwrap()
        .start()
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "the three starts to be counted",
        || ours.stats().rates[0].starts_in_window == 3,
    );
    let rate = ours.stats().rates[0].clone();
    assert_eq!((rate.entrypoint.as_str(), rate.limit.starts()), (ep, 3));
    assert!(!rate.undeclared_claims, "our own claims spent units");
    let metrics = pgqueuer::ops::prometheus_text(
        &mut client,
        &pgqueuer::Settings::default(),
        Duration::from_secs(30),
    )
    .unwrap();
    for line in [
        "pgqueuer_rate_starts{entrypoint=\"rated\",window_seconds=\"60\"} 3",
        "pgqueuer_rate_limit_starts{entrypoint=\"rated\",window_seconds=\"60\"} 3",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    // Ours has spent its units; a Python worker takes the next jobs regardless.
    insert_jobs(&mut client, ep, 0, 2);
    let spec = serde_json::json!({
        "entrypoint": ep, "behaviour": "record_run", "sleep_s": 60.0, "timeout_s": 120,
        "name": "py",
    });
    let python = crate::python::spawn_script(&db, "worker.py", &spec, Duration::from_secs(150));
    eventually(
        Duration::from_secs(60),
        "the Python worker's claims to be reported",
        || ours.stats().rates[0].undeclared_claims,
    );
    let warned = captured(&format!("entrypoint {ep:?}: 2 of its running jobs"));
    assert!(
        warned
            .iter()
            .any(|l| l.contains("without declaring the limit (Python PgQueuer workers")),
        "{warned:?}"
    );
    python.kill();
    for _ in 0..3 {
        release_tx.send(()).unwrap();
    }
    ours.join().unwrap();
}

/// A rate far from binding is claimed on leased units (two workers of eight threads, a
/// rate of 1,000 a second that their claims at first leave far from full), and still holds
/// once the backlog makes it bind: no second of handler starts holds more than 500,
/// while the workers made claims on leases at first.
#[test]
fn leased_units_keep_the_rate_as_it_comes_to_bind() {
    use pgqueuer::Entrypoint;

    use super::{Starts, recording_worker};

    let _timing = timing_lock();
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "api", 0, 3_000);
    let starts = Starts::default();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let api = Entrypoint::new("api").rate_limit(500, Duration::from_secs(1));
            recording_worker(&db, api, 8, 10, &starts)
        })
        .collect();
    eventually(Duration::from_secs(60), "3,000 starts", || {
        starts.lock().unwrap().len() >= 3_000
    });
    let leased: u64 = workers.iter().map(|w| w.stats().relaxed_claims).sum();
    for w in workers {
        w.join().unwrap();
    }
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    assert_eq!(starts.len(), 3_000, "every job ran once");
    let most = most_in_a_kept_window(&starts, Duration::from_secs(1));
    assert!(most <= 500, "{most} starts in one second");
    let most = most_in_any_window(&starts, Duration::from_secs(1));
    assert!(
        most >= 450,
        "{most} starts at most in a second: the rate never bound"
    );
    assert!(leased > 0, "no claim was made on leased units");
}

/// Leases hold per job: a worker of four threads claiming one job at a time takes more
/// jobs within a lease's life than one lease holds (its margin, seven units), so each job
/// must be counted off its lease. No second of starts holds more than the rate of 100, and
/// every start has a unit stamped for it (the units stamped, kept by a trigger, are at
/// least the starts; leased units no claim took make them more).
#[test]
fn each_job_of_a_lease_has_a_unit_of_its_own() {
    use pgqueuer::Entrypoint;

    use super::{Starts, recording_worker};

    let _timing = timing_lock();
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(STAMPS_DDL).unwrap();
    insert_jobs(&mut client, "api", 0, 500);
    let starts = Starts::default();
    let api = Entrypoint::new("api").rate_limit(100, Duration::from_secs(1));
    let worker = recording_worker(&db, api, 4, 1, &starts);
    eventually(Duration::from_secs(60), "500 starts", || {
        starts.lock().unwrap().len() >= 500
    });
    let leased = worker.stats().relaxed_claims;
    worker.join().unwrap();
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    let most = most_in_a_kept_window(&starts, Duration::from_secs(1));
    assert!(most <= 100, "{most} starts in one second");
    let stamped: i64 = scalar(&mut client, "SELECT count(*) FROM stamps");
    assert!(
        stamped >= 500,
        "{stamped} units stamped for 500 starts: some job started without a unit"
    );
    assert!(leased > 0, "no claim was made on leased units");
}
