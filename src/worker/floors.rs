//! How a claim lane reads the queue: from where it left off, and now and then from the
//! top. Pure: no I/O, no lock, no clock of its own.
//!
//! A claim reads queued rows in claim order (highest priority first, then lowest id)
//! through the `(entrypoint, priority DESC, id)` index. Every job run leaves its entry
//! there, dead, and while another session holds a snapshot open (a report, `pg_dump`, a
//! forgotten `BEGIN`) PostgreSQL can neither remove those entries nor mark them dead:
//! a claim that starts at the top visits every one, and its cost grows with every job run
//! since the snapshot was taken (a claim took 26 ms after three minutes at 800 jobs/s).
//! So a lane claims from its floors (`Floors`: per entrypoint, the last job it took),
//! which skips them.
//!
//! A row can come to lie behind a floor: an enqueue that committed after newer jobs ran,
//! a retry or requeue (it keeps its id), a deferred job coming due, a row another claim
//! held locked and gave back, a job of a higher priority. A sweep (a claim without
//! floors) finds them: one runs at least every [`SWEEP_EVERY`], and no more often than
//! [`SWEEP_SHARE`] of the time allows given what the last one cost, so that sweeps take
//! at most a twentieth of the lane's time however long the snapshot is held; a job behind
//! a floor starts within that period. Where the worker has a second lane, that lane sweeps,
//! so that no sweep delays the jobs the first lane claims. Stale jobs (another worker presumed dead) are looked
//! for in the same way, every half heartbeat timeout (every 5 s at most) rather than in
//! every claim: that search reads the heartbeat index's entries of every picked row
//! version.

use std::time::{Duration, Instant};

use crate::claim::{Floors, Reading};
use crate::job::Job;

/// The longest time between two sweeps while they are cheap.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The longest time between two looks for stale jobs: a job of a dead worker is re-picked
/// within this of going stale (the look reads the heartbeat index's entries of every
/// picked version, a few milliseconds even under a long-held horizon at this pace).
pub(crate) const STALE_LOOK_EVERY: Duration = Duration::from_secs(5);

/// Sweeps take at most this share of the time: one that took `d` is followed by the next
/// no sooner than `d / SWEEP_SHARE` later.
pub(crate) const SWEEP_SHARE: f64 = 0.05;

/// One lane's way of reading (see the module docs).
#[derive(Debug)]
pub(crate) struct Reader {
    /// Whether this lane sweeps and looks for stale jobs: where a worker has a second
    /// lane, that lane does both, so that a sweep's or a stale look's cost, which a long
    /// hold makes tens of milliseconds, never delays the jobs the first lane claims.
    sweeps: bool,
    floors: Floors,
    next_sweep: Instant,
    stale_every: Duration,
    next_stale: Instant,
}

/// What the next claim is to be, from [`Reader::plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Read from the top (no floors).
    pub(crate) sweep: bool,
    /// Look for stale jobs too.
    pub(crate) stale: bool,
}

impl Reader {
    /// A reader whose first claim is a sweep that looks for stale jobs; it looks for them
    /// every `heartbeat_interval` (half the heartbeat timeout), or [`STALE_LOOK_EVERY`] if
    /// that is sooner. A reader that does not `sweeps` reads from the top only while it
    /// has no floor, and never looks for stale jobs.
    pub(crate) fn new(now: Instant, heartbeat_interval: Duration, sweeps: bool) -> Reader {
        Reader {
            sweeps,
            floors: Floors::default(),
            next_sweep: now,
            stale_every: heartbeat_interval.min(STALE_LOOK_EVERY),
            next_stale: now,
        }
    }

    /// What the claim about to be sent is.
    pub(crate) fn plan(&self, now: Instant) -> Plan {
        Plan {
            sweep: self.floors.is_empty() || (self.sweeps && now >= self.next_sweep),
            stale: self.sweeps && now >= self.next_stale,
        }
    }

    /// The reading of `plan` for the claim statement.
    pub(crate) fn reading(&self, plan: Plan) -> Reading<'_> {
        Reading {
            floors: (!plan.sweep).then_some(&self.floors),
            stale: plan.stale,
        }
    }

    /// A claim of `plan`, sent at `sent` and answered at `now`, took `jobs` (in claim
    /// order); `failed` when it was answered with an error (nothing learned).
    pub(crate) fn claimed(&mut self, plan: Plan, sent: Instant, now: Instant, jobs: &[Job]) {
        if plan.sweep {
            // Its floors stay where they were unless it took jobs: a sweep that found
            // nothing from the top found nothing behind them either.
            let took = now.saturating_duration_since(sent);
            let spacing = SWEEP_EVERY.max(took.div_f64(SWEEP_SHARE));
            self.next_sweep = now + spacing;
        }
        if plan.stale {
            self.next_stale = now + self.stale_every;
        }
        self.floors.advance(jobs);
    }

    /// The latest the lane should claim, even in a quiet spell, for its next sweep or
    /// stale look: rows may lie behind its floors (a late commit rings, and the claim it
    /// rings for finds nothing from the floors), and stale jobs ring nothing.
    /// Without floors nothing can lie behind one: every claim reads from the top, and only
    /// the stale look is waited for.
    pub(crate) fn look_by(&self) -> Option<Instant> {
        if !self.sweeps {
            None
        } else if self.floors.is_empty() {
            Some(self.next_stale)
        } else {
            Some(self.next_sweep.min(self.next_stale))
        }
    }

    #[cfg(test)]
    fn floors(&self) -> &Floors {
        &self.floors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::handoff::tests::test_job;

    fn job(entrypoint: &str, priority: i32, id: i64) -> Job {
        Job {
            entrypoint: entrypoint.into(),
            priority,
            ..test_job(id)
        }
    }

    #[test]
    fn the_first_claim_sweeps_and_looks_for_stale_jobs_and_later_ones_read_from_the_floors() {
        let t0 = Instant::now();
        let mut r = Reader::new(t0, Duration::from_secs(15), true);
        let plan = r.plan(t0);
        assert_eq!(
            plan,
            Plan {
                sweep: true,
                stale: true
            }
        );
        assert!(r.reading(plan).floors.is_none());
        r.claimed(
            plan,
            t0,
            t0 + Duration::from_millis(2),
            &[job("a", 0, 5), job("a", 0, 9)],
        );
        let t1 = t0 + Duration::from_millis(10);
        let plan = r.plan(t1);
        assert_eq!(
            plan,
            Plan {
                sweep: false,
                stale: false
            }
        );
        assert_eq!(r.reading(plan).floors.unwrap().get("a"), Some((0, 9)));
        // A claim that took nothing keeps the floor; one that took more moves it.
        r.claimed(plan, t1, t1, &[]);
        assert_eq!(r.floors().get("a"), Some((0, 9)));
        r.claimed(plan, t1, t1, &[job("a", 0, 12), job("b", 3, 4)]);
        assert_eq!(r.floors().get("a"), Some((0, 12)));
        assert_eq!(r.floors().get("b"), Some((3, 4)));
    }

    #[test]
    fn sweeps_come_every_second_while_cheap_and_take_a_twentieth_of_the_time_when_not() {
        let t0 = Instant::now();
        let mut r = Reader::new(t0, Duration::from_secs(15), true);
        let plan = r.plan(t0);
        r.claimed(plan, t0, t0 + Duration::from_millis(3), &[job("a", 0, 1)]);
        assert!(!r.plan(t0 + Duration::from_millis(900)).sweep);
        let at = t0 + Duration::from_millis(1004);
        assert!(r.plan(at).sweep, "a second after a cheap sweep");
        assert!(r.look_by().is_some_and(|by| by <= at));
        // A sweep that took 200 ms: the next no sooner than 4 s after it.
        let plan = r.plan(at);
        r.claimed(plan, at, at + Duration::from_millis(200), &[job("a", 0, 2)]);
        let end = at + Duration::from_millis(200);
        assert!(!r.plan(end + Duration::from_millis(3_900)).sweep);
        assert!(r.plan(end + Duration::from_millis(4_000)).sweep);
        // The sweep moved the floor to what it took, even back.
        assert_eq!(r.floors().get("a"), Some((0, 2)));
    }

    #[test]
    fn without_floors_every_claim_reads_from_the_top_and_only_the_stale_look_is_awaited() {
        let t0 = Instant::now();
        let mut r = Reader::new(t0, Duration::from_secs(15), true);
        let plan = r.plan(t0);
        r.claimed(plan, t0, t0, &[]);
        assert!(r.plan(t0 + Duration::from_millis(5)).sweep);
        assert_eq!(r.look_by(), Some(t0 + STALE_LOOK_EVERY));
        // A sweep that finds nothing keeps the floors it had.
        r.claimed(plan, t0, t0, &[job("a", 0, 7)]);
        let later = t0 + Duration::from_secs(2);
        let plan = r.plan(later);
        assert!(plan.sweep);
        r.claimed(plan, later, later, &[]);
        assert_eq!(r.floors().get("a"), Some((0, 7)));
    }

    #[test]
    fn a_lane_that_does_not_sweep_reads_from_its_floors_and_never_looks_for_stale_jobs() {
        let t0 = Instant::now();
        let mut r = Reader::new(t0, Duration::from_secs(15), false);
        let plan = r.plan(t0);
        assert_eq!(
            plan,
            Plan {
                sweep: true,
                stale: false
            },
            "no floor yet"
        );
        r.claimed(plan, t0, t0, &[job("a", 0, 3)]);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(
            r.plan(later),
            Plan {
                sweep: false,
                stale: false
            }
        );
        assert_eq!(r.look_by(), None);
    }

    #[test]
    fn stale_jobs_are_looked_for_every_half_heartbeat_timeout_and_every_5_s_at_most() {
        let t0 = Instant::now();
        let mut r = Reader::new(t0, Duration::from_secs(2), true);
        let plan = r.plan(t0);
        r.claimed(plan, t0, t0, &[job("a", 0, 1)]);
        assert!(!r.plan(t0 + Duration::from_millis(1_900)).stale);
        assert!(r.plan(t0 + Duration::from_secs(2)).stale);
        assert_eq!(r.look_by(), Some(t0 + SWEEP_EVERY));
        let mut r = Reader::new(t0, Duration::from_secs(15), true);
        let plan = r.plan(t0);
        r.claimed(plan, t0, t0, &[]);
        assert!(!r.plan(t0 + Duration::from_millis(4_900)).stale);
        assert!(r.plan(t0 + STALE_LOOK_EVERY).stale);
    }
}
