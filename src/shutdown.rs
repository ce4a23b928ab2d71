//! Asking a blocking loop to stop from another thread.

use std::sync::{Arc, Mutex, PoisonError};

use crossbeam_channel::{Receiver, Sender};

/// Stops a running [`Scheduler`](crate::Scheduler) from any thread.
///
/// Cloneable and `Send`; every clone stops the same loop. Stopping is done by dropping
/// the only sender of a channel that the loop's threads wait on, so every blocked wait
/// returns at once (no polling) and a stop requested before `run()` starts makes it
/// return straight away.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    /// The sender whose disconnection is the stop signal; `None` once stopped. Shared
    /// by every clone; only [`ShutdownHandle::shutdown`] takes it.
    sender: Arc<Mutex<Option<Sender<()>>>>,
}

impl ShutdownHandle {
    /// A handle and the receiver that sees it disconnect.
    pub(crate) fn new() -> (ShutdownHandle, Receiver<()>) {
        // Nothing is ever sent: the channel only carries its disconnection.
        let (sender, receiver) = crossbeam_channel::bounded(0);
        let handle = ShutdownHandle {
            sender: Arc::new(Mutex::new(Some(sender))),
        };
        (handle, receiver)
    }

    /// Asks the loop to stop. Returns at once; `run()` returns once running handlers
    /// have finished. Calling it again does nothing.
    pub fn shutdown(&self) {
        let sender = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(sender);
    }

    /// True once [`ShutdownHandle::shutdown`] was called.
    pub fn is_shutdown(&self) -> bool {
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}
