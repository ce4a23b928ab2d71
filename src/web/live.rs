//! Live pages: one LISTEN connection on the queue's channel, and a Server-Sent Events
//! stream per open page that says when the queue changed (debounced), so the page
//! fetches itself again. Where LISTEN cannot work (a transaction pooler without
//! `listen_dsn`) the stream says `polling` and pages refresh on a timer instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fallible_iterator::FallibleIterator;
use tokio::sync::{mpsc, watch};

use crate::connect::Pool;
use crate::sql::channel_listen;

/// Changes closer together than this become one event.
const DEBOUNCE: Duration = Duration::from_millis(250);
/// A comment line this long after the last write keeps proxies from closing an idle
/// stream, and finds pages that went away (writing to a closed connection fails).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Open streams at most; more get 503 (and their pages poll).
pub(super) const MAX_STREAMS: usize = 64;
/// Events a stream holds for a client that reads slowly; past them the stream waits
/// (and the write timeout ends a client that reads nothing).
const STREAM_BUFFER: usize = 4;

/// Whether the feed hears the database, for the streams to tell their pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Listening,
    Polling,
}

/// What the streams watch: every change of it (a queue change is a change with the
/// same value) is an event for every page.
#[derive(Debug, Clone, Copy)]
struct State {
    mode: Mode,
    /// The server is stopping: streams say so and end.
    closing: bool,
}

pub(super) struct Feed {
    /// Written by the LISTEN thread (and by [`Feed::close`]); each stream's task holds
    /// a receiver.
    state: watch::Sender<State>,
    /// Streams being served, at most [`MAX_STREAMS`]: counted up by [`Feed::stream`],
    /// down by the stream's task when it ends.
    open: Arc<AtomicUsize>,
    /// Ends the LISTEN thread; set by the server when it stops.
    stop: Arc<AtomicBool>,
}

impl Feed {
    /// Starts the LISTEN thread on a connection like the pool's.
    ///
    /// # Errors
    /// When the thread cannot start.
    pub(super) fn start(
        pool: Pool,
        channel: String,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<(Arc<Feed>, JoinHandle<()>)> {
        let (state, _) = watch::channel(State {
            mode: Mode::Listening,
            closing: false,
        });
        let feed = Arc::new(Feed {
            state,
            open: Arc::new(AtomicUsize::new(0)),
            stop,
        });
        let thread = {
            let feed = Arc::clone(&feed);
            std::thread::Builder::new()
                .name("pgqueuer-web-listen".into())
                .spawn(move || feed.listen(&pool, &channel))?
        };
        Ok((feed, thread))
    }

    /// A page's event stream, served by a task on the runtime (so this must be called
    /// there): the body's pieces. `None` when [`MAX_STREAMS`] are open.
    pub(super) fn stream(&self) -> Option<mpsc::Receiver<Bytes>> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_STREAMS).then_some(n + 1)
            })
            .ok()?;
        let slot = Slot(Arc::clone(&self.open));
        let (pieces, body) = mpsc::channel(STREAM_BUFFER);
        let changes = self.state.subscribe();
        tokio::spawn(async move {
            serve_stream(changes, &pieces).await;
            drop(slot);
        });
        Some(body)
    }

    /// Tells every stream the server stops (each says `closing` to its page and ends).
    pub(super) fn close(&self) {
        self.state.send_modify(|s| s.closing = true);
    }

    fn set_mode(&self, mode: Mode) {
        self.state.send_if_modified(|s| {
            let changed = s.mode != mode;
            s.mode = mode;
            changed
        });
    }

    /// Tells every stream the queue changed.
    fn broadcast(&self) {
        self.state.send_modify(|_| {});
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
                    if let Err(e) = client.batch_execute(&channel_listen(channel)) {
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

/// A stream's place among the [`MAX_STREAMS`], given back when it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

const RETRY: &[u8] = b"retry: 3000\n\n";
const QUEUE_CHANGE: &[u8] = b"event: queue-change\ndata: {}\n\n";
const POLLING: &[u8] = b"event: polling\ndata: {}\n\n";
const CLOSING: &[u8] = b"event: closing\ndata: {}\n\n";
const KEEPALIVE_LINE: &[u8] = b": keepalive\n\n";

/// Writes one page's events until the page goes away (its body is dropped, so a send
/// fails) or the server stops.
async fn serve_stream(mut changes: watch::Receiver<State>, pieces: &mpsc::Sender<Bytes>) {
    let put = |piece: &'static [u8]| pieces.send(Bytes::from_static(piece));
    if put(RETRY).await.is_err() {
        return;
    }
    let mut told_polling = false;
    let state = *changes.borrow_and_update();
    if state.mode == Mode::Polling {
        told_polling = true;
        if put(POLLING).await.is_err() {
            return;
        }
    }
    loop {
        let piece = tokio::select! {
            changed = changes.changed() => {
                let state = *changes.borrow_and_update();
                if changed.is_err() || state.closing {
                    // The page is told, rather than left waiting on a stream that says
                    // nothing.
                    let _ = put(CLOSING).await;
                    return;
                }
                match state.mode {
                    Mode::Polling if told_polling => continue,
                    Mode::Polling => {
                        told_polling = true;
                        POLLING
                    }
                    Mode::Listening => {
                        told_polling = false;
                        QUEUE_CHANGE
                    }
                }
            }
            () = tokio::time::sleep(KEEPALIVE) => KEEPALIVE_LINE,
        };
        if put(piece).await.is_err() {
            return;
        }
    }
}
