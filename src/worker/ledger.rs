//! The ledger of a job's life inside a worker, in the order a job lives it. Each thread
//! calls only its own steps:
//!
//! 1. **reserved** (the dispatcher): room for the job before a claim is sent, so that a
//!    claim never takes more than threads can start ([`Ledger::reserve`]);
//! 2. **claimed** (the dispatcher): owned from now on, heartbeated and cancellable
//!    ([`Ledger::claimed`]), then handed over ([`Ledger::hand_over`]) or kept by the
//!    claiming thread ([`Ledger::keep_one`]);
//! 3. **started** (a runner thread): a run grant taken with the job ([`Ledger::take`]), so
//!    that at most `threads` jobs run at once;
//! 4. **finished** (the executor): its outcome waits to be written and its room and run
//!    grant are given back ([`Ledger::finished`] and its kin, [`Ledger::run_ended`]);
//! 5. **written** (the completer, or the claim that folded the outcome in): no longer
//!    held ([`Ledger::written`]).
//!
//! The pieces it is made of keep one count each (`room::Room`, `handoff::Handoff`,
//! `owned::Owned`, `outcomes::Outcomes`); the ledger is the one place that moves a job
//! from one to the next, and its tests hold the invariants.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::handoff::Handoff;
use super::outcomes::{Outcomes, Requeue};
use super::owned::{Owned, Ownership, Stop};
use super::room::Room;
use crate::claim::Outcome;
use crate::job::{Job, JobId};

/// The ledger (see the module docs).
pub(crate) struct Ledger {
    room: Room,
    handoff: Handoff,
    owned: Owned,
    outcomes: Outcomes,
}

impl Ledger {
    /// A ledger for `threads` runs at once, up to `ahead` jobs claimed beyond them (from
    /// the start when `ahead_allowed`, else once [`Ledger::allow_ahead`] says so), whose
    /// claims take finished jobs' ends along when `fold`.
    pub(crate) fn new(threads: usize, ahead: usize, ahead_allowed: bool, fold: bool) -> Ledger {
        Ledger {
            room: Room::new(threads, ahead, ahead_allowed),
            handoff: Handoff::new(threads),
            owned: Owned::default(),
            outcomes: Outcomes::new(fold),
        }
    }

    // 1. Reserved.

    /// The room a claim would find now.
    pub(crate) fn room(&self) -> usize {
        self.room.room()
    }

    /// The most room there can be now (see [`Room::most`]).
    pub(crate) fn most_room(&self) -> usize {
        self.room.most()
    }

    /// The least room worth a claim of up to `batch`.
    pub(crate) fn enough(&self, batch: usize) -> usize {
        self.room.enough(batch)
    }

    /// Reserves room for up to `want` jobs; returns how many.
    pub(crate) fn reserve(&self, want: usize) -> usize {
        self.room.reserve(want)
    }

    /// Gives back room a claim did not fill.
    pub(crate) fn unreserve(&self, n: usize) {
        self.room.release(n);
    }

    /// Whether claims may take jobs ahead of free threads from now on (limits far from
    /// binding).
    pub(crate) fn allow_ahead(&self, allowed: bool) {
        self.room.allow_ahead(allowed);
    }

    /// Room threads with no job waiting for them.
    pub(crate) fn idle_threads(&self) -> usize {
        self.room.idle_threads()
    }

    /// True when handlers have lately run for less than `limit` on average.
    pub(crate) fn handlers_shorter_than(&self, limit: Duration) -> bool {
        self.room.recent_below(limit)
    }

    /// True when the `n` jobs just claimed are all the worker has.
    pub(crate) fn only(&self, n: usize) -> bool {
        self.room.only(n)
    }

    /// True when the worker holds nothing: no job owned (running, waiting for a thread or
    /// for its write) and no room reserved, so no claim in flight either (see
    /// [`Ledger::rest_mark`]).
    pub(crate) fn at_rest(&self) -> bool {
        self.rest_mark().is_some()
    }

    /// A mark of the worker at rest now, or `None` when it holds something.
    /// [`Ledger::rested_since`] then says whether it has stayed so. A claim keeps the room
    /// it reserved from before its statement until its jobs have run, and its jobs are
    /// owned before any of that room is given back, so a claim that has committed but not
    /// yet handed its jobs over is seen here though none of them is owned yet. The room is
    /// read before the owned jobs: a job moves from reserved room to owned, then gives its
    /// room back, and stops being owned once written.
    pub(crate) fn rest_mark(&self) -> Option<u64> {
        let claims = self.room.reservations();
        (self.room.only(0) && self.owned() == 0).then_some(claims)
    }

    /// True when the worker, at rest at `mark`, has begun no claim since: it has held
    /// nothing in between, so nothing it ran can have changed the queue.
    pub(crate) fn rested_since(&self, mark: Option<u64>) -> bool {
        mark.is_some_and(|claims| self.room.reservations() == claims)
    }

    // 2. Claimed.

    /// Holds the jobs a claim took (`index` gives each one's entrypoint position) and
    /// returns those to run: a job already owned (a stale re-pick of a job this worker
    /// still runs) is left to its run, and its room given back.
    pub(crate) fn claimed(&self, jobs: Vec<Job>, index: impl Fn(&str) -> usize) -> Vec<Job> {
        let claimed = jobs.len();
        let fresh = self.owned.add(jobs, index);
        self.room.release(claimed - fresh.len());
        fresh
    }

    /// Hands claimed jobs to the runners (one idle thread is woken for them).
    pub(crate) fn hand_over(&self, jobs: Vec<Job>) {
        self.handoff.push(jobs);
    }

    /// Takes a run grant for a job the claiming thread keeps to run itself; false when
    /// `threads` jobs run already.
    pub(crate) fn keep_one(&self) -> bool {
        self.handoff.start_own()
    }

    /// Jobs handed over and not yet started.
    pub(crate) fn waiting(&self) -> usize {
        self.handoff.len()
    }

    /// Wakes one idle runner (for a job, or for the lead).
    pub(crate) fn wake_one(&self) {
        self.handoff.wake_one();
    }

    /// At shutdown: the jobs handed over and not started are finished unstarted, to go
    /// back to the queue; returns how many.
    pub(crate) fn release_unstarted(&self) -> usize {
        let jobs = self.handoff.drain();
        self.room.release(jobs.len());
        for job in &jobs {
            self.outcomes.release(job.id);
        }
        jobs.len()
    }

    // 3. Started.

    /// A handed-over job with its run grant, if one waits and a grant is free.
    pub(crate) fn take(&self) -> Option<Job> {
        self.handoff.take()
    }

    /// Sleeps until woken for a job or the lead, or until `done` disconnects (false).
    pub(crate) fn wait(&self, done: &Receiver<()>) -> bool {
        self.handoff.wait(done)
    }

    /// The stop flag of an owned job.
    pub(crate) fn stop_of(&self, id: JobId) -> Option<Arc<Stop>> {
        self.owned.stop_of(id)
    }

    // 4. Finished.

    /// A job ended after running `took`: its outcome waits to be written, its room is free.
    pub(crate) fn finished(&self, outcome: Outcome, took: Duration) {
        self.outcomes.finished(outcome);
        self.freed(took);
    }

    /// A job is to run again later.
    pub(crate) fn requeued(&self, requeue: Requeue, took: Duration) {
        self.outcomes.requeue(requeue);
        self.freed(took);
    }

    /// A job whose handler stopped because it was cancelled, after running `took`: its
    /// row is given back if it is still this worker's, and nothing more. Every
    /// cancellation that reaches a handler found the row deleted (`cancel` deletes it
    /// and logs `canceled`) or another worker's; a row that is this worker's again by the
    /// time the outcome is written was re-picked by it since, and nobody cancelled that
    /// claim: ending it `canceled` would delete a job that must still run.
    pub(crate) fn cancelled(&self, id: JobId, took: Duration) {
        self.outcomes.release(id);
        self.freed(took);
    }

    /// A job a thread took after shutdown goes back to the queue unstarted.
    pub(crate) fn released(&self, id: JobId) {
        self.outcomes.release(id);
        self.room.release(1);
    }

    fn freed(&self, took: Duration) {
        self.room.ran(took);
        self.room.release(1);
    }

    /// The run grant of a job that ended (whatever its outcome) goes back.
    pub(crate) fn run_ended(&self) {
        self.handoff.finished();
    }

    // 5. Written.

    /// These jobs' outcomes are written (or no longer this worker's): they are not owned.
    pub(crate) fn written(&self, ids: impl IntoIterator<Item = JobId>) {
        self.owned.remove(ids);
    }

    /// The ends the next claim takes along (none unless claims fold outcomes).
    pub(crate) fn for_claim(&self) -> Vec<Outcome> {
        self.outcomes.for_claim()
    }

    /// After a claim that took `taken` along: those in `written` are written; the others
    /// go back to the completer.
    pub(crate) fn after_claim(&self, taken: Vec<Outcome>, written: &[JobId]) {
        if taken.is_empty() {
            return;
        }
        let (done, rest): (Vec<Outcome>, Vec<Outcome>) =
            taken.into_iter().partition(|o| written.contains(&o.id));
        self.written(done.iter().map(|o| o.id));
        self.outcomes.not_folded(rest);
    }

    /// The outcomes waiting, for the completer (its rounds) and the dispatcher (what a
    /// claim would fold).
    pub(crate) fn outcomes(&self) -> &Outcomes {
        &self.outcomes
    }

    // Reading the owned jobs.

    /// Every owned job: from its claim until its outcome is written.
    #[cfg(test)]
    pub(crate) fn owned_ids(&self) -> Vec<JobId> {
        self.owned.ids()
    }

    /// Every owned job with the claim that took it last, for the heartbeat: what it
    /// finds lost is cancelled through [`Ledger::cancel_lost`].
    pub(crate) fn ownerships(&self) -> Vec<Ownership> {
        self.owned.ownerships()
    }

    /// Stops as cancelled the handlers of the jobs among `seen` whose rows a heartbeat
    /// found gone or not ours, unless a claim of this worker has re-picked them since
    /// (see `Owned::cancel_unclaimed`); returns how many.
    pub(crate) fn cancel_lost(&self, seen: &[Ownership]) -> usize {
        self.owned.cancel_unclaimed(seen)
    }

    /// How many jobs are owned.
    pub(crate) fn owned(&self) -> usize {
        self.owned.len()
    }

    /// Owned jobs per entrypoint position (of `n`), leaving out those whose ends the next
    /// claim takes along: that claim frees their slots before it takes any.
    pub(crate) fn owned_per_entrypoint(&self, n: usize) -> Vec<usize> {
        self.owned.per_entrypoint(n, &self.outcomes.foldable_ids())
    }

    /// The owned jobs among `ids`.
    pub(crate) fn owned_among(&self, ids: &[JobId]) -> Vec<JobId> {
        self.owned.owned_among(ids)
    }

    /// Tells every running handler that the shutdown deadline passed; returns how many
    /// jobs are owned.
    pub(crate) fn shut_down_all(&self) -> usize {
        self.owned.shut_down_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Status;
    use crate::worker::handoff::tests::test_job;

    fn outcome(id: JobId) -> Outcome {
        Outcome {
            id,
            status: Status::Successful,
            traceback: None,
        }
    }

    /// A job is owned from its claim until its outcome is written, whatever happens in
    /// between, so that the heartbeat (which refreshes `owned_ids`) covers it all along.
    #[test]
    fn a_job_is_heartbeated_from_its_claim_until_its_outcome_is_written() {
        let ledger = Ledger::new(2, 0, true, false);
        assert_eq!(ledger.reserve(2), 2);
        let jobs = ledger.claimed(vec![test_job(1), test_job(2)], |_| 0);
        assert_eq!(jobs.len(), 2);
        ledger.hand_over(jobs);
        assert_eq!(ledger.owned_ids().len(), 2, "claimed, not started");
        let one = ledger.take().unwrap();
        assert!(ledger.owned_ids().contains(&one.id), "running");
        ledger.finished(outcome(one.id), Duration::from_micros(5));
        ledger.run_ended();
        assert!(
            ledger.owned_ids().contains(&one.id),
            "finished, not written"
        );
        ledger.written([one.id]);
        assert_eq!(ledger.owned_ids(), [2], "written: no longer owned");
        // Shutdown: the one not started goes back, and stays owned until written.
        assert_eq!(ledger.release_unstarted(), 1);
        assert_eq!(ledger.owned_ids(), [2]);
        assert_eq!(ledger.outcomes().take_all().releases, [2]);
        ledger.written([2]);
        assert!(ledger.owned_ids().is_empty());
        assert_eq!(ledger.room(), 2, "every reservation given back");
    }

    /// The worker is at rest only when no claim is in flight and no job is held: a
    /// claim's reservation marks it busy from before its statement until its last job is
    /// written, through the moment between its commit and its jobs being owned. A mark
    /// taken at rest holds only while no claim begins, even one that ends at once.
    #[test]
    fn a_claim_in_flight_keeps_the_worker_from_rest() {
        let ledger = Ledger::new(2, 2, true, false);
        assert!(ledger.at_rest());
        let mark = ledger.rest_mark();
        assert!(ledger.rested_since(mark));
        assert_eq!(ledger.reserve(1), 1);
        ledger.unreserve(1);
        assert!(ledger.at_rest());
        assert!(
            !ledger.rested_since(mark),
            "a claim began and ended since the mark"
        );
        assert!(!ledger.rested_since(None), "not at rest at the mark");
        assert_eq!(ledger.reserve(2), 2);
        assert_eq!(ledger.rest_mark(), None);
        assert!(
            !ledger.at_rest(),
            "claiming: nothing owned yet, room reserved"
        );
        let jobs = ledger.claimed(vec![test_job(1)], |_| 0);
        assert!(!ledger.at_rest(), "claimed, not handed over");
        ledger.unreserve(1);
        ledger.hand_over(jobs);
        let job = ledger.take().unwrap();
        ledger.finished(outcome(job.id), Duration::from_micros(5));
        ledger.run_ended();
        assert!(!ledger.at_rest(), "finished, not written");
        ledger.written([job.id]);
        assert!(ledger.at_rest());
    }

    /// At most `threads` jobs run at once, counting the job the claiming thread keeps;
    /// a grant comes back when a run ends.
    #[test]
    fn no_more_jobs_run_at_once_than_threads() {
        let ledger = Ledger::new(2, 2, true, false);
        ledger.room.ran(Duration::from_micros(5));
        assert_eq!(ledger.reserve(4), 4);
        let jobs = ledger.claimed((1..=4).map(test_job).collect(), |_| 0);
        ledger.hand_over(jobs);
        assert!(ledger.keep_one(), "the claiming thread keeps one");
        assert!(ledger.take().is_some());
        assert!(ledger.take().is_none(), "a third run beside two");
        assert!(!ledger.keep_one());
        ledger.run_ended();
        assert!(ledger.take().is_some(), "a grant came back");
        assert_eq!(ledger.waiting(), 2);
    }

    /// A claim that brings back a job the worker already owns (a stale re-pick of its
    /// own running job) does not run it twice, and gives its room back.
    #[test]
    fn a_job_already_owned_is_not_claimed_twice() {
        let ledger = Ledger::new(2, 0, true, false);
        assert_eq!(ledger.reserve(1), 1);
        ledger.claimed(vec![test_job(7)], |_| 0);
        assert_eq!(ledger.reserve(1), 1);
        assert!(ledger.claimed(vec![test_job(7)], |_| 0).is_empty());
        assert_eq!(ledger.room(), 1, "the second reservation came back");
        assert_eq!(ledger.owned(), 1);
    }

    /// A job another worker re-picked (so a heartbeat cancelled it here) and this worker
    /// re-picked back is this worker's again: its stop is no longer cancelled, so it is
    /// not written `canceled` and deleted although nobody cancelled it (seen once in a
    /// 10-minute chaos soak).
    #[test]
    fn a_job_re_picked_back_is_no_longer_cancelled() {
        let ledger = Ledger::new(2, 0, true, false);
        assert_eq!(ledger.reserve(1), 1);
        ledger.claimed(vec![test_job(7)], |_| 0);
        assert_eq!(ledger.cancel_lost(&ledger.ownerships()), 1);
        let stop = ledger.stop_of(7).expect("owned");
        assert!(stop.is_cancelled());
        assert_eq!(ledger.reserve(1), 1);
        assert!(ledger.claimed(vec![test_job(7)], |_| 0).is_empty());
        assert!(!stop.is_cancelled(), "the re-pick lifts the cancellation");
        assert_eq!(ledger.owned(), 1);
    }

    /// A heartbeat that read a row as not ours before this worker's re-pick of it
    /// committed cancels nothing once that re-pick is in the ledger; without a re-pick in
    /// between, what it found lost is cancelled.
    #[test]
    fn a_heartbeat_older_than_a_re_pick_cancels_nothing() {
        let ledger = Ledger::new(2, 0, true, false);
        assert_eq!(ledger.reserve(2), 2);
        ledger.claimed(vec![test_job(7), test_job(8)], |_| 0);
        let beat = ledger.ownerships();
        assert!(ledger.claimed(vec![test_job(7)], |_| 0).is_empty());
        assert_eq!(ledger.cancel_lost(&beat), 1, "only job 8 is cancelled");
        assert!(!ledger.stop_of(7).expect("owned").is_cancelled());
        assert!(ledger.stop_of(8).expect("owned").is_cancelled());
        let next = ledger.ownerships();
        assert_eq!(ledger.cancel_lost(&next), 2, "a later beat's finding holds");
        assert!(ledger.stop_of(7).expect("owned").is_cancelled());
    }

    /// Ends a claim took along are written by it, or come back for the completer.
    #[test]
    fn folded_ends_are_written_or_come_back() {
        let ledger = Ledger::new(2, 0, true, true);
        assert_eq!(ledger.reserve(2), 2);
        ledger.claimed(vec![test_job(1), test_job(2)], |_| 0);
        ledger.finished(outcome(1), Duration::ZERO);
        ledger.finished(outcome(2), Duration::ZERO);
        let taken = ledger.for_claim();
        assert_eq!(taken.len(), 2);
        ledger.after_claim(taken, &[1]);
        assert_eq!(ledger.owned_ids(), [2]);
        assert_eq!(
            ledger.outcomes().take_all().ends.len(),
            1,
            "job 2 comes back"
        );
    }
}
