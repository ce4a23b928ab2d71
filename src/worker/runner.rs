//! The worker's threads: `threads + 1` of them, each at any moment either leading (running
//! the dispatcher's primary lane, see `dispatcher`) or running handed-over jobs.
//!
//! Leading is a role, not a thread (the leader/followers pattern). A thread that looks
//! for work takes the lead first if no thread holds it, else a handed-over job, else it
//! sleeps. The leader gives the lead away only when its claim takes a lone job on an idle
//! worker: it keeps the job to run itself and leaves the lead for the next thread, so
//! that the job's start does not wait for a second thread to wake up after the claim (a
//! thread woken right after a round trip to PostgreSQL waits for a core the server's
//! backend still holds; the CHANGELOG has the figures). Everywhere else jobs are handed
//! over, one idle thread woken at a time.

use crossbeam_channel::Receiver;

use super::dispatcher::Dispatcher;
use super::executor::Executor;
use super::jitter::Jitter;
use super::ledger::Ledger;

/// What one thread of the worker uses.
pub(crate) struct Runner<'a> {
    pub(crate) dispatcher: &'a Dispatcher<'a>,
    pub(crate) executor: &'a Executor<'a>,
    pub(crate) ledger: &'a Ledger,
    /// Disconnects once every lane has stopped: no job can be handed over any more.
    pub(crate) dispatching: &'a Receiver<()>,
}

impl Runner<'_> {
    /// The loop of thread `index`: until dispatching has ended and no job is left.
    pub(crate) fn run(&self, index: usize) {
        let mut rng = Jitter::new(index + 1);
        loop {
            if let Some(lead) = self.dispatcher.take_lead() {
                if let Some(job) = self.dispatcher.lead(lead) {
                    self.execute(&job, &mut rng);
                }
                continue;
            }
            if let Some(job) = self.ledger.take() {
                self.execute(&job, &mut rng);
                continue;
            }
            if !self.ledger.wait(self.dispatching) {
                break;
            }
        }
        // Jobs handed over just before dispatching ended still run.
        while let Some(job) = self.ledger.take() {
            self.execute(&job, &mut rng);
        }
    }

    /// Runs a job this thread was granted (by [`Ledger::take`] or [`Ledger::keep_one`]),
    /// then gives the grant back.
    fn execute(&self, job: &crate::job::Job, rng: &mut Jitter) {
        self.executor.execute(job, rng);
        self.ledger.run_ended();
    }
}
