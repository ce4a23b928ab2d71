//! Live pages: one LISTEN connection on the queue's channel, and a Server-Sent Events
//! stream per open page that says when the queue changed (debounced), so the page
//! fetches itself again. Where LISTEN cannot work (a transaction pooler without
//! `listen_dsn`) the stream says `polling` and pages refresh on a timer instead.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};
use fallible_iterator::FallibleIterator;

use crate::connect::Pool;
use crate::sql::quote_identifier;

/// Changes closer together than this become one event.
const DEBOUNCE: Duration = Duration::from_millis(250);
/// A comment line this often keeps proxies from closing an idle stream, and tells the
/// server when a page went away.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Open streams at most (each holds a thread); more get 503.
pub(super) const MAX_STREAMS: usize = 64;

/// Whether the feed hears the database, for the streams to tell their pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Listening,
    Polling,
}

pub(super) struct Feed {
    /// Each stream's sender, and a weak handle on its token: a stream that ended has
    /// dropped its token, and its sender goes at the next subscription or change.
    subscribers: Mutex<Vec<(Sender<()>, Weak<()>)>>,
    mode: Mutex<Mode>,
    /// Streams being served (each on a thread of its own).
    open: AtomicUsize,
    stop: Arc<AtomicBool>,
}

impl Feed {
    /// Starts the LISTEN thread on a connection like the pool's.
    pub(super) fn start(
        pool: Pool,
        channel: String,
        stop: Arc<AtomicBool>,
    ) -> (Arc<Feed>, JoinHandle<()>) {
        let feed = Arc::new(Feed {
            subscribers: Mutex::new(Vec::new()),
            mode: Mutex::new(Mode::Listening),
            open: AtomicUsize::new(0),
            stop,
        });
        let thread = {
            let feed = Arc::clone(&feed);
            std::thread::Builder::new()
                .name("pgqueuer-web-listen".into())
                .spawn(move || feed.listen(&pool, &channel))
                .expect("spawn the dashboard's listener thread")
        };
        (feed, thread)
    }

    /// A receiver of change ticks and the stream's token (held while it is served), or
    /// `None` when [`MAX_STREAMS`] are open.
    pub(super) fn subscribe(&self) -> Option<Subscription> {
        let open = self.open.load(Ordering::Relaxed);
        if open >= MAX_STREAMS {
            return None;
        }
        let (tx, rx) = bounded(1);
        let token = Arc::new(());
        let mut subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.retain(|(_, alive)| alive.strong_count() > 0);
        subscribers.push((tx, Arc::downgrade(&token)));
        Some(Subscription { ticks: rx, token })
    }

    /// Event streams being served.
    pub(super) fn open_streams(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    fn polling(&self) -> bool {
        *self.mode.lock().unwrap_or_else(PoisonError::into_inner) == Mode::Polling
    }

    fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap_or_else(PoisonError::into_inner) = mode;
    }

    /// Tells every stream; a full channel already has a tick waiting, a closed one is a
    /// page that went away.
    fn broadcast(&self) {
        let mut subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.retain(|(s, alive)| {
            alive.strong_count() > 0
                && !matches!(s.try_send(()), Err(TrySendError::Disconnected(())))
        });
    }

    fn listen(&self, pool: &Pool, channel: &str) {
        let mut warned = false;
        while !self.stop.load(Ordering::Relaxed) {
            let config = match pool.get_timeout(Duration::from_secs(2)) {
                Ok(conn) => conn.listen_target(),
                Err(_) => {
                    self.sleep(Duration::from_secs(2));
                    continue;
                }
            };
            let Some(config) = config else {
                log::info!(
                    "pgqueuer web: a transaction pooler without listen_dsn cannot LISTEN; \
                     pages refresh every 5 s"
                );
                self.set_mode(Mode::Polling);
                self.broadcast();
                return;
            };
            match config.connect() {
                Ok(mut client) => {
                    if let Err(e) =
                        client.batch_execute(&format!("LISTEN {}", quote_identifier(channel)))
                    {
                        log::warn!("pgqueuer web: LISTEN failed: {e}");
                    } else {
                        warned = false;
                        self.set_mode(Mode::Listening);
                        // Pages may have missed changes while the feed was down.
                        self.broadcast();
                        self.pump(&mut client);
                    }
                }
                Err(e) if !warned => {
                    warned = true;
                    log::warn!("pgqueuer web: cannot open the LISTEN connection: {e}; retrying");
                }
                Err(_) => {}
            }
            self.sleep(Duration::from_secs(1));
        }
    }

    /// Forwards notifications until the connection fails or the server stops.
    fn pump(&self, client: &mut postgres::Client) {
        let mut pending: Option<Instant> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let wait = pending.map_or(Duration::from_millis(250), |due| {
                due.saturating_duration_since(Instant::now())
            });
            let next = client.notifications().timeout_iter(wait).next();
            match next {
                Ok(Some(_)) => {
                    pending.get_or_insert_with(|| Instant::now() + DEBOUNCE);
                }
                Ok(None) => {
                    if client.is_closed() {
                        return;
                    }
                }
                Err(e) => {
                    log::warn!("pgqueuer web: the LISTEN connection failed: {e}; reconnecting");
                    return;
                }
            }
            if pending.is_some_and(|due| Instant::now() >= due) {
                pending = None;
                self.broadcast();
            }
        }
    }

    fn sleep(&self, total: Duration) {
        let until = Instant::now() + total;
        while !self.stop.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Serves one page's event stream on `request`'s connection until the page goes away
/// or the server stops. The response head is written by hand: tiny_http buffers a
/// chunked body in 8 KiB pieces, which would hold events back.
/// One page's place in the feed.
pub(super) struct Subscription {
    ticks: Receiver<()>,
    /// Dropped when the stream ends, which tells the feed to forget it.
    token: Arc<()>,
}

pub(super) fn stream(feed: &Arc<Feed>, request: tiny_http::Request, subscription: Subscription) {
    feed.open.fetch_add(1, Ordering::Relaxed);
    let thread_feed = Arc::clone(feed);
    let spawned = std::thread::Builder::new()
        .name("pgqueuer-web-events".into())
        .spawn(move || {
            let feed = thread_feed;
            serve_stream(&feed, request, &subscription.ticks);
            drop(subscription.token);
            feed.open.fetch_sub(1, Ordering::Relaxed);
        });
    if let Err(e) = spawned {
        feed.open.fetch_sub(1, Ordering::Relaxed);
        log::warn!("pgqueuer web: cannot start an event stream: {e}");
    }
}

fn serve_stream(feed: &Feed, request: tiny_http::Request, ticks: &Receiver<()>) {
    let mut out = request.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n\
                Connection: close\r\n\r\nretry: 3000\n\n";
    if out
        .write_all(head.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return;
    }
    let mut told_polling = false;
    let mut last_write = Instant::now();
    while !feed.stop.load(Ordering::Relaxed) {
        let message: &[u8] = if feed.polling() && !told_polling {
            told_polling = true;
            b"event: polling\ndata: {}\n\n"
        } else {
            match ticks.recv_timeout(Duration::from_millis(500)) {
                Ok(()) => b"event: queue-change\ndata: {}\n\n",
                Err(RecvTimeoutError::Timeout) if last_write.elapsed() >= KEEPALIVE => {
                    b": keepalive\n\n"
                }
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        if out.write_all(message).and_then(|()| out.flush()).is_err() {
            return;
        }
        last_write = Instant::now();
    }
    // The connection may outlive the server's threads: the page is told, rather than
    // left waiting on a stream that says nothing.
    let _ = out
        .write_all(b"event: closing\ndata: {}\n\n")
        .and_then(|()| out.flush());
}
