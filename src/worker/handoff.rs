//! Claimed jobs on their way to executors, the one-at-a-time wake chain that starts
//! them, and the count that keeps the jobs run at once within `threads`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender, select};

use crate::job::Job;

/// Claimed jobs waiting for an executor, and how idle executors are woken for them.
///
/// Nobody blocks on the job queue itself, so pushing wakes no thread. Instead one idle
/// executor is woken, and each taker wakes one more while jobs remain: a batch of short
/// jobs wakes only the few threads it keeps busy, rather than one per job (a wake of a
/// sleeping thread costs several microseconds of CPU, as much as PostgreSQL spends on a
/// good part of a short job). No job waits for a wake that never comes: an executor back
/// from a job takes the next waiting one before it sleeps.
///
/// Such a wake right after the claim's round trip is slow (the woken thread waits for a
/// core that PostgreSQL's backend still holds), so a lone job claimed by an idle worker
/// is run by the claiming thread instead (see `runner`).
pub(crate) struct Handoff {
    jobs_tx: Sender<Job>,
    jobs_rx: Receiver<Job>,
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    /// A wake token is on its way to an idle executor that has not yet come round; while
    /// it is, takers send no more (each token wakes a thread).
    waking: AtomicBool,
    /// Jobs being run now, never more than `threads`. The worker has one thread more
    /// than `threads` (the one that leads), and a thread that has just given the lead
    /// away runs its own job while the lead waits for another: this count, not the
    /// number of threads, is what keeps the jobs run at once within `threads`.
    executing: AtomicUsize,
    threads: usize,
}

impl Handoff {
    /// A hand-off for `threads` jobs at once.
    pub(crate) fn new(threads: usize) -> Handoff {
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(threads + 1);
        Handoff {
            jobs_tx,
            jobs_rx,
            wake_tx,
            wake_rx,
            waking: AtomicBool::new(false),
            executing: AtomicUsize::new(0),
            threads: threads.max(1),
        }
    }

    /// Counts a job as running if fewer than `threads` are; false otherwise.
    pub(crate) fn start_own(&self) -> bool {
        self.executing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.threads).then_some(n + 1)
            })
            .is_ok()
    }

    /// A job taken from here, or one a thread kept ([`Handoff::start_own`]), has ended.
    pub(crate) fn finished(&self) {
        self.executing.fetch_sub(1, Ordering::SeqCst);
    }

    /// Queues claimed jobs and wakes one idle executor for them.
    pub(crate) fn push(&self, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        for job in jobs {
            // Cannot fail: this struct holds a receiver.
            let _ = self.jobs_tx.send(job);
        }
        self.wake_one();
    }

    /// A waiting job, if any and if fewer than `threads` jobs run (the job counts as
    /// running until [`Handoff::finished`]); wakes one more idle thread when others still
    /// wait.
    pub(crate) fn take(&self) -> Option<Job> {
        if self.jobs_rx.is_empty() {
            // The common case for a thread looking for work: nothing to count.
            return None;
        }
        if !self.start_own() {
            // Every permitted job runs; one of their threads takes this one when it ends.
            return None;
        }
        let Ok(job) = self.jobs_rx.try_recv() else {
            self.finished();
            return None;
        };
        if !self.jobs_rx.is_empty() {
            self.wake_one();
        }
        Some(job)
    }

    /// Takes every waiting job without a run grant: at shutdown, jobs that have not
    /// started go back to the queue at once rather than wait for a thread.
    pub(crate) fn drain(&self) -> Vec<Job> {
        self.jobs_rx.try_iter().collect()
    }

    /// How many jobs wait.
    pub(crate) fn len(&self) -> usize {
        self.jobs_rx.len()
    }

    /// Wakes one idle thread (unless a wake is already on its way to one): for jobs, or
    /// for the lead (see `dispatcher`), which a woken thread looks for first.
    pub(crate) fn wake_one(&self) {
        if !self.waking.swap(true, Ordering::SeqCst) {
            let _ = self.wake_tx.try_send(());
        }
    }

    /// Sleeps until woken for jobs, or until `done` disconnects (no job can come any
    /// more); returns false then.
    pub(crate) fn wait(&self, done: &Receiver<()>) -> bool {
        select! {
            recv(self.wake_rx) -> _ => {
                self.waking.store(false, Ordering::SeqCst);
                true
            }
            recv(done) -> _ => false,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::job::JobId;

    pub(crate) fn test_job(id: JobId) -> Job {
        Job {
            id,
            priority: 0,
            queue_manager_id: None,
            created: std::time::SystemTime::UNIX_EPOCH,
            updated: std::time::SystemTime::UNIX_EPOCH,
            heartbeat: std::time::SystemTime::UNIX_EPOCH,
            execute_after: std::time::SystemTime::UNIX_EPOCH,
            status: crate::job::Status::Picked,
            entrypoint: "e".into(),
            dedupe_key: None,
            payload: None,
            headers: None,
            attempts: 0,
            slot: None,
            unreadable: None,
        }
    }

    #[test]
    fn no_more_jobs_run_at_once_than_threads() {
        let handoff = Handoff::new(2);
        handoff.push((1..=3).map(test_job).collect());
        // The thread that gave the lead away runs its own job: one left for the others.
        assert!(handoff.start_own());
        assert_eq!(handoff.take().map(|j| j.id), Some(1));
        assert!(handoff.take().is_none(), "a third job would run beside two");
        assert!(!handoff.start_own());
        assert_eq!(handoff.len(), 2, "the jobs not taken stay");
        handoff.finished();
        assert_eq!(handoff.take().map(|j| j.id), Some(2));
        handoff.finished();
        handoff.finished();
        assert_eq!(handoff.take().map(|j| j.id), Some(3));
        assert!(handoff.take().is_none());
    }

    #[test]
    fn handed_over_jobs_wake_one_thread_at_a_time() {
        let handoff = Handoff::new(4);
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
        handoff.push(vec![test_job(1), test_job(2), test_job(3)]);
        // One token for the batch, not three.
        assert_eq!(handoff.wake_rx.len(), 1);
        assert!(handoff.wait(&done_rx));
        assert_eq!(handoff.take().map(|j| j.id), Some(1));
        // The taker woke the next one, since jobs remain.
        assert_eq!(handoff.wake_rx.len(), 1);
        assert_eq!(handoff.take().map(|j| j.id), Some(2));
        assert_eq!(
            handoff.wake_rx.len(),
            1,
            "no second token while one is on its way"
        );
        assert!(handoff.wait(&done_rx));
        assert_eq!(handoff.take().map(|j| j.id), Some(3));
        assert!(handoff.take().is_none());
        drop(done_tx);
        assert!(!handoff.wait(&done_rx));
    }
}
