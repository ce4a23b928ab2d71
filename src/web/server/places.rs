//! Who holds the server's connection places: at most
//! [`Limits::max_connections_per_client`](super::Limits) from one address, and, when every
//! place is taken, the connection idle the longest makes room for a new one.
//!
//! A flood of idle sockets (opened and never used, or reopened as the head timeout
//! closes them) would otherwise hold every place and answer everyone else 503,
//! `/healthz` included: one address can hold only its share, and idle holders give way
//! to clients that come to ask something. A connection with a request in flight or an
//! event stream is never made to give way.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

/// The connections being served, by client address and by idleness.
#[derive(Default)]
pub(super) struct Places {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Connections held per client address.
    per_client: HashMap<IpAddr, usize>,
    /// Every connection being served, by its number.
    open: HashMap<u64, Arc<Place>>,
    next: u64,
}

/// One connection's place: whether it is busy, since when it is idle, and how it is told
/// to give way.
pub(super) struct Place {
    number: u64,
    client: IpAddr,
    /// Requests in flight, plus one for good once it serves an event stream.
    busy: AtomicUsize,
    /// When it last became idle (or opened).
    idle_since: Mutex<Instant>,
    /// Notified to make room: the connection finishes what it has in flight and closes.
    pub(super) give_way: Notify,
}

impl Place {
    /// A request arrived.
    pub(super) fn request_begins(&self) {
        self.busy.fetch_add(1, Ordering::SeqCst);
    }

    /// A request was answered; `streaming` when the answer is an event stream, which
    /// keeps the connection busy until it ends.
    pub(super) fn request_answered(&self, streaming: bool) {
        if streaming {
            return;
        }
        *self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.busy.fetch_sub(1, Ordering::SeqCst);
    }

    fn idle_since(&self) -> Option<Instant> {
        (self.busy.load(Ordering::SeqCst) == 0).then(|| {
            *self
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        })
    }
}

/// A connection's hold on its place, given back when dropped.
pub(super) struct Held {
    places: Arc<Places>,
    pub(super) place: Arc<Place>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut inner = self.places.lock();
        inner.open.remove(&self.place.number);
        if let Some(n) = inner.per_client.get_mut(&self.place.client) {
            *n -= 1;
            if *n == 0 {
                inner.per_client.remove(&self.place.client);
            }
        }
    }
}

impl Places {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a connection from `client`, unless it holds `per_client` already.
    pub(super) fn enter(self: &Arc<Places>, client: IpAddr, per_client: usize) -> Option<Held> {
        let mut inner = self.lock();
        let held = inner.per_client.entry(client).or_insert(0);
        if *held >= per_client {
            return None;
        }
        *held += 1;
        inner.next += 1;
        let place = Arc::new(Place {
            number: inner.next,
            client,
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            give_way: Notify::new(),
        });
        inner.open.insert(place.number, Arc::clone(&place));
        Some(Held {
            places: Arc::clone(self),
            place,
        })
    }

    /// Tells the connection idle the longest (none in flight, no event stream) to close,
    /// leaving `spare` out (the newcomer's own); false when every one is busy.
    pub(super) fn make_room(&self, spare: &Held) -> bool {
        let inner = self.lock();
        let oldest = inner
            .open
            .values()
            .filter(|p| p.number != spare.place.number)
            .filter_map(|p| p.idle_since().map(|since| (since, p)))
            .min_by_key(|(since, _)| *since);
        match oldest {
            Some((_, place)) => {
                // Stored if the connection is not waiting yet: it closes once it looks.
                place.give_way.notify_one();
                // Not chosen again while it closes.
                place.busy.fetch_add(1, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    fn open(&self) -> usize {
        self.lock().open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    #[test]
    fn one_client_holds_at_most_its_share_and_gives_its_places_back() {
        let places = Arc::new(Places::default());
        let held: Vec<Held> = (0..3).map(|_| places.enter(ip(2), 3).unwrap()).collect();
        assert!(places.enter(ip(2), 3).is_none(), "a fourth from one client");
        let other = places
            .enter(ip(1), 3)
            .expect("another client is unaffected");
        drop(held);
        assert!(places.enter(ip(2), 3).is_some());
        drop(other);
        assert_eq!(places.open(), 0);
    }

    #[test]
    fn the_longest_idle_connection_makes_room_and_busy_ones_never_do() {
        let places = Arc::new(Places::default());
        let streaming = places.enter(ip(1), 10).unwrap();
        streaming.place.request_begins();
        streaming.place.request_answered(true);
        let busy = places.enter(ip(1), 10).unwrap();
        busy.place.request_begins();
        let idle = places.enter(ip(2), 10).unwrap();
        let newcomer = places.enter(ip(3), 10).unwrap();
        newcomer.place.request_begins();
        assert!(places.make_room(&newcomer));
        // The idle one was told (a stored permit), and is not chosen twice.
        assert!(!places.make_room(&newcomer), "only busy ones are left");
        let told = idle.place.give_way.notified();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), told)
                .await
                .expect("the idle connection was told to give way");
        });
        busy.place.request_answered(false);
        assert!(places.make_room(&newcomer), "busy became idle");
    }
}
