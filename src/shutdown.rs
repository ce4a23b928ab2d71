//! Asking a blocking loop (a [`Worker`](crate::Worker) or a
//! [`Scheduler`](crate::Scheduler)) to stop from another thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crossbeam_channel::{Receiver, Sender};

/// Stops a running [`Worker`](crate::Worker) or [`Scheduler`](crate::Scheduler) from any
/// thread.
///
/// Cloneable and `Send`; every clone stops the same loop. Stopping drops the only sender
/// of a channel that the loop's threads wait on, so every blocked wait returns at once (no
/// polling), and a stop requested before `run()` starts makes it return straight away.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    /// Set once by `shutdown()`; read by the loop's threads between waits.
    requested: AtomicBool,
    /// The sender whose disconnection is the stop signal; `None` once stopped. Only
    /// [`ShutdownHandle::shutdown`] takes it.
    sender: Mutex<Option<Sender<()>>>,
    /// A receiver that disconnects on shutdown, for threads that wait through the handle.
    receiver: Receiver<()>,
}

impl ShutdownHandle {
    /// A handle and a receiver that sees it disconnect.
    pub(crate) fn new() -> (ShutdownHandle, Receiver<()>) {
        // Nothing is ever sent: the channel only carries its disconnection.
        let (sender, receiver) = crossbeam_channel::bounded(0);
        let handle = ShutdownHandle {
            state: Arc::new(State {
                requested: AtomicBool::new(false),
                sender: Mutex::new(Some(sender)),
                receiver: receiver.clone(),
            }),
        };
        (handle, receiver)
    }

    /// Asks the loop to stop. Returns at once; `run()` returns once running handlers have
    /// finished. Calling it again does nothing.
    pub fn shutdown(&self) {
        self.state.requested.store(true, Ordering::SeqCst);
        let sender = self
            .state
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(sender);
    }

    /// True once [`ShutdownHandle::shutdown`] was called.
    pub fn is_shutdown(&self) -> bool {
        self.state.requested.load(Ordering::SeqCst)
    }

    /// Sleeps for `d`, or less if shutdown comes first.
    pub(crate) fn sleep(&self, d: std::time::Duration) {
        let _ = self.state.receiver.recv_timeout(d);
    }

    /// A receiver that is disconnected once shutdown is requested (for `select!`).
    pub(crate) fn receiver(&self) -> &Receiver<()> {
        &self.state.receiver
    }
}
