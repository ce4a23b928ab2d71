//! The one way this crate takes a mutex.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering from poisoning (a panicking handler never holds one, and
/// every update under these locks leaves the data consistent).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
