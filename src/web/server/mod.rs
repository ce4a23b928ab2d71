//! The serving layer: hyper's HTTP/1 server on a tokio runtime that lives on one thread
//! of the dashboard's own, the bounds every client meets, and a fixed pool of plain
//! threads for the pages' blocking work.
//!
//! The runtime thread (`pgqueuer-web-io`) accepts connections, parses requests (hyper:
//! bounded head, no allocation from a declared length), reads bodies, writes responses
//! and serves event streams. It never blocks: the pages read the database through r2d2
//! and the `postgres` crate, which must not run on a runtime thread (it starts a runtime
//! of its own and panics inside another), so each request that needs a page goes through
//! a bounded channel to one of [`Limits::threads`] handler threads (`pgqueuer-web-N`),
//! and its reply comes back on a oneshot channel. A handler that panics answers 500 and
//! its thread takes the next request.
//!
//! Nothing here knows the dashboard: a [`Handler`] decides on each request's head
//! ([`Handler::admit`], on the runtime thread: cheap checks only) and answers it
//! ([`Handler::respond`], on a handler thread).

mod deadline;
mod places;
mod responses;

use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};
use hyper::header::HeaderMap;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::time::Instant;

use self::deadline::WriteDeadline;
use self::places::{Held, Places};
use self::responses::{Body, closing, response, streaming, too_large};

/// The most bytes of a request's head (request line and headers). hyper answers a
/// longer head with 431 and closes the connection, having buffered no more than this:
/// a client streaming an endless header line costs this much memory, not what it
/// sends. Browsers send a few KiB (cookies of other programs on `localhost` included);
/// 32 KiB is four times nginx's default line buffer. Also hyper's read buffer size, so
/// at most [`Limits::max_connections`] times this is buffered at once.
pub(super) const MAX_HEADER_BYTES: usize = 32 << 10;

/// The most header fields in a request (hyper answers 431 past it). A browser sends
/// about fifteen.
pub(super) const MAX_HEADERS: usize = 64;

/// The most bytes a request body may have: the largest form the pages send (a requeue
/// of thousands of ids) fits. A larger declared `Content-Length` is answered 413 before
/// a byte of the body is read; a chunked body is read up to this many bytes and then
/// refused the same way.
pub(super) const MAX_BODY_BYTES: usize = 256 << 10;

/// Requests waiting for a handler thread at most; more are answered 503 at once rather
/// than queued without end while the database is slow. Each waiter holds a connection
/// (bounded already) and its request (bounded by the two limits above).
pub(super) const MAX_WAITING: usize = 64;

/// After an accept fails for want of resources (descriptors exhausted, `EMFILE` or
/// `ENFILE`; no buffers), the loop waits this long before it accepts again, doubling
/// up to [`ACCEPT_BACKOFF_MAX`]: the pending connection stays in the kernel's queue, so
/// accepting at once would only fail again, spinning a core.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest wait between two accepts while they keep failing: short, so that the
/// server answers again within a fraction of a second once descriptors free up (a
/// failing `accept` is one system call, cheap at this rate).
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(200);
/// Accept failures are logged as a warning at most this often (they come in bursts
/// while descriptors run out).
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(60);

/// The kernel's queue of connections not yet accepted (`listen(2)`'s backlog).
const LISTEN_BACKLOG: u32 = 1024;

/// How long a stopping server waits for requests in flight and event streams to end
/// before it closes what is left.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What a connection beyond [`Limits::max_connections`] is told before it is closed.
const TOO_MANY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\
    Content-Type: text/plain; charset=utf-8\r\nContent-Length: 38\r\nRetry-After: 5\r\n\r\n\
    too many connections; try again soon.\n";

/// What a connection beyond [`Limits::max_connections_per_client`] is told.
const TOO_MANY_FROM_YOU: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\
    Content-Type: text/plain; charset=utf-8\r\nContent-Length: 55\r\nRetry-After: 5\r\n\r\n\
    too many connections from your address; close some.\n\n\n";

/// How long a newcomer waits for the place an idle connection gives up (it finishes what
/// it has in flight first).
const MAKE_ROOM_WAIT: Duration = Duration::from_millis(500);

/// Newcomers waiting for a place at once at most; more are answered 503 at once.
const MAX_MAKING_ROOM: usize = 64;

/// The bounds that come from the dashboard's options.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    /// Handler threads.
    pub threads: usize,
    /// Connections served at once; past it the connection idle the longest makes room,
    /// and when none is idle, more are answered 503 and closed at once.
    pub max_connections: usize,
    /// Connections served at once from one client address; more are answered 503.
    pub max_connections_per_client: usize,
    /// From when a connection waits for a request until its head is complete (a slow
    /// head, or an idle keep-alive connection, is closed after it).
    pub header_read_timeout: Duration,
    /// The longest a request body may take to arrive (408 after it).
    pub body_read_timeout: Duration,
    /// The longest a write may wait for the client to read (the connection is closed
    /// after it).
    pub write_timeout: Duration,
}

/// The method of a request, as the routes need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Get,
    Head,
    Post,
    /// Anything else (no route takes it).
    Other,
}

/// A request's head, owned.
#[derive(Debug)]
pub(super) struct Head {
    pub verb: Verb,
    /// The path, still percent-encoded.
    pub path: String,
    /// The query string without `?`, still encoded.
    pub query: String,
    /// The authority of an absolute-form request target (`GET http://host/ HTTP/1.1`),
    /// which takes the place of `Host`.
    pub authority: Option<String>,
    pub headers: HeaderMap,
}

impl Head {
    /// The first value of header `name` when it is visible ASCII.
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A whole request, its body read (at most [`MAX_BODY_BYTES`]).
#[derive(Debug)]
pub(super) struct Request {
    pub head: Head,
    pub body: Bytes,
}

/// A response before it is sent.
#[derive(Debug)]
pub(super) struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    pub(super) fn text(status: u16, content_type: &'static str, body: String) -> Reply {
        Reply {
            status,
            content_type,
            body: body.into_bytes(),
            headers: Vec::new(),
        }
    }

    fn plain(status: u16, body: &str) -> Reply {
        Reply::text(status, "text/plain; charset=utf-8", body.to_owned())
    }
}

/// A response whose body comes piece by piece (Server-Sent Events): each piece is
/// written and flushed as it arrives; the body ends when the sender is dropped.
pub(super) struct Streaming {
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: mpsc::Receiver<Bytes>,
}

/// What to do with a request, decided from its head alone.
pub(super) enum Admit {
    /// Answer at once (a refusal, a redirect): the body is not read.
    Reply(Reply),
    /// Read the body and hand the request to a handler thread.
    Handle,
    /// Answer with a stream.
    Stream(Streaming),
}

/// The application behind the server.
pub(super) trait Handler: Send + Sync + 'static {
    /// Decides on a request from its head, on the runtime thread: it must not block
    /// (checks of headers, starting a stream with `tokio::spawn`).
    fn admit(&self, head: &Head) -> Admit;

    /// Answers a request, on a handler thread (it may block on the database). A panic
    /// is answered 500.
    fn respond(&self, request: Request) -> Reply;
}

/// A request handed to a handler thread, with where its reply goes.
struct Job {
    request: Request,
    reply: oneshot::Sender<Reply>,
}

/// What every connection task shares, on the runtime thread.
struct Shared {
    handler: Arc<dyn Handler>,
    limits: Limits,
    /// Requests for the handler threads; dropped with the runtime, which ends them.
    jobs: Sender<Job>,
    /// One permit per connection being served.
    connections: Arc<Semaphore>,
    /// Who holds the connections, and which are idle.
    places: Arc<Places>,
    /// Newcomers waiting for an idle connection to make room.
    making_room: std::sync::atomic::AtomicUsize,
    /// hyper's settings, the same for every connection.
    http: http1::Builder,
}

/// A server that runs until [`Running::stop`].
pub(super) struct Running {
    /// Set to `true` to stop: the accept loop ends and every connection shuts down
    /// gracefully. Written by [`Running::stop`] (any thread); read by the runtime's tasks.
    stop: watch::Sender<bool>,
    /// The runtime thread first, then the handler threads.
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// Tells the server to stop (it stops within [`SHUTDOWN_GRACE`] plus the longest
    /// page a handler thread is answering).
    pub(super) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Waits until every thread has ended (after [`Running::stop`], or never).
    pub(super) fn join(&mut self) {
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

/// A bound listener and the runtime it belongs to, not yet serving.
pub(super) struct Bound {
    runtime: tokio::runtime::Runtime,
    listener: TcpListener,
    addr: SocketAddr,
}

impl Bound {
    /// Binds `addr` (`host:port`) on a new runtime.
    ///
    /// # Errors
    /// When `addr` does not resolve or cannot be bound.
    pub(super) fn bind(addr: &str) -> io::Result<Bound> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .thread_name("pgqueuer-web-io")
            .build()?;
        let listener = {
            let _inside = runtime.enter();
            bind(addr)?
        };
        let addr = listener.local_addr()?;
        Ok(Bound {
            runtime,
            listener,
            addr,
        })
    }

    /// The address bound (with the port chosen when 0 was asked).
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts serving `handler`: the runtime thread and the handler threads.
    ///
    /// # Errors
    /// When a thread cannot start (those started are stopped again).
    pub(super) fn serve(self, limits: Limits, handler: Arc<dyn Handler>) -> io::Result<Running> {
        let Bound {
            runtime, listener, ..
        } = self;
        let (jobs, waiting) = bounded::<Job>(MAX_WAITING);
        let mut http = http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(MAX_HEADER_BYTES)
            .max_header_size(MAX_HEADER_BYTES)
            .max_headers(MAX_HEADERS)
            .keep_alive(true);
        let shared = Arc::new(Shared {
            handler,
            connections: Arc::new(Semaphore::new(limits.max_connections)),
            places: Arc::default(),
            making_room: std::sync::atomic::AtomicUsize::new(0),
            limits,
            jobs,
            http,
        });
        let (stop, told_to_stop) = watch::channel(false);
        let mut threads = Vec::new();
        let failed = |threads: Vec<JoinHandle<()>>, e: io::Error| {
            for thread in threads {
                let _ = thread.join();
            }
            e
        };
        for i in 0..shared.limits.threads {
            let (handler, waiting) = (Arc::clone(&shared.handler), waiting.clone());
            match std::thread::Builder::new()
                .name(format!("pgqueuer-web-{i}"))
                .spawn(move || answer_on_this_thread(&*handler, &waiting))
            {
                Ok(thread) => threads.push(thread),
                // The threads started end once `shared` (holding the channel's sender)
                // goes.
                Err(e) => {
                    drop(shared);
                    return Err(failed(threads, e));
                }
            }
        }
        drop(waiting);
        let io = std::thread::Builder::new()
            .name("pgqueuer-web-io".into())
            .spawn(move || {
                runtime.block_on(serve(listener, shared, told_to_stop));
                // Dropping the runtime drops every task left, and with them the last
                // sender of the handlers' channel: the handler threads end.
            });
        match io {
            Ok(thread) => threads.insert(0, thread),
            Err(e) => return Err(failed(threads, e)),
        }
        Ok(Running { stop, threads })
    }
}

/// A listener on the first address `addr` resolves to that can be bound.
fn bind(addr: &str) -> io::Result<TcpListener> {
    let mut last = None;
    for candidate in addr.to_socket_addrs()? {
        let socket = if candidate.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket
            .bind(candidate)
            .and_then(|()| socket.listen(LISTEN_BACKLOG))
        {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "resolves to no address")))
}

/// A handler thread: answers requests until the channel closes.
fn answer_on_this_thread(handler: &dyn Handler, waiting: &Receiver<Job>) {
    while let Ok(job) = waiting.recv() {
        // The client went away while the request waited.
        if job.reply.is_closed() {
            continue;
        }
        let reply = catch_unwind(AssertUnwindSafe(|| handler.respond(job.request))).unwrap_or_else(
            |panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                log::error!("pgqueuer web: a page handler panicked: {what}");
                Reply::plain(
                    500,
                    "Server error: this page's handler failed (a bug; the server's log says \
                     where). The server serves on.\n",
                )
            },
        );
        let _ = job.reply.send(reply);
    }
}

/// The accept loop, then the graceful end.
async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut failures = 0u64;
    let mut warned: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut stop) => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                if failures > 0 {
                    log::info!(
                        "pgqueuer web: accepting connections again after {failures} failed \
                         accepts"
                    );
                    failures = 0;
                }
                backoff = ACCEPT_BACKOFF_MIN;
                admit(stream, peer, &shared, &stop);
            }
            // The connection went before it was accepted: the next one is unaffected.
            Err(e) if is_per_connection(&e) => {}
            Err(e) => {
                if warned.is_none_or(|at| at.elapsed() >= ACCEPT_WARN_EVERY) {
                    warned = Some(Instant::now());
                    log::warn!(
                        "pgqueuer web: accepting a connection failed: {e}; retrying, backing \
                         off up to {} ms while it fails (connections wait in the kernel's \
                         queue meanwhile; said at most once a minute)",
                        ACCEPT_BACKOFF_MAX.as_millis()
                    );
                } else {
                    log::debug!("pgqueuer web: accepting a connection failed: {e}");
                }
                failures += 1;
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stopped(&mut stop) => break,
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
    drop(listener);
    // Every connection gives its permit back when it ends; they all have when every
    // permit is free again.
    let all = u32::try_from(shared.limits.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, shared.connections.acquire_many(all)).await;
}

/// Serves a new connection if it may have a place: its client holds fewer than its
/// share, and a place is free or an idle connection makes room. Otherwise it is told
/// why (best effort) and closed.
fn admit(stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>, stop: &watch::Receiver<bool>) {
    let per_client = shared.limits.max_connections_per_client;
    let Some(held) = shared.places.enter(peer.ip(), per_client) else {
        let _ = stream.try_write(TOO_MANY_FROM_YOU);
        return;
    };
    if let Ok(permit) = Arc::clone(&shared.connections).try_acquire_owned() {
        tokio::spawn(connection(
            stream,
            permit,
            held,
            Arc::clone(shared),
            stop.clone(),
        ));
        return;
    }
    use std::sync::atomic::Ordering;
    if shared.making_room.load(Ordering::SeqCst) >= MAX_MAKING_ROOM
        || !shared.places.make_room(&held)
    {
        let _ = stream.try_write(TOO_MANY);
        return;
    }
    shared.making_room.fetch_add(1, Ordering::SeqCst);
    let (shared, stop) = (Arc::clone(shared), stop.clone());
    tokio::spawn(async move {
        let permit = tokio::time::timeout(
            MAKE_ROOM_WAIT,
            Arc::clone(&shared.connections).acquire_owned(),
        )
        .await;
        shared.making_room.fetch_sub(1, Ordering::SeqCst);
        match permit {
            Ok(Ok(permit)) => connection(stream, permit, held, shared, stop).await,
            _ => {
                let _ = stream.try_write(TOO_MANY);
            }
        }
    });
}

/// Resolves once the server is told to stop (or its `Running` is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, not held by the caller.
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Accept errors that concern one connection only (it was reset before `accept`).
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Serves one connection until it closes, or until the server stops (then the request
/// in flight is finished and the connection closed).
async fn connection(
    stream: TcpStream,
    permit: OwnedSemaphorePermit,
    held: Held,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let _permit = permit;
    let _ = stream.set_nodelay(true);
    let io = WriteDeadline::new(TokioIo::new(stream), shared.limits.write_timeout);
    let place = Arc::clone(&held.place);
    let service = {
        let (shared, place) = (Arc::clone(&shared), Arc::clone(&place));
        hyper::service::service_fn(move |request| {
            let (shared, place) = (Arc::clone(&shared), Arc::clone(&place));
            async move {
                place.request_begins();
                let answer = shared.answer(request).await;
                place.request_answered(matches!(answer.body(), Body::Pieces(_)));
                Ok::<_, Infallible>(answer)
            }
        })
    };
    let conn = shared.http.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        () = place.give_way.notified() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    drop(held);
    if let Err(e) = result {
        // A client that sent garbage, timed out or went away: its own affair.
        log::debug!("pgqueuer web: a connection ended: {e}");
    }
}

/// Why a request body was not read.
enum BodyError {
    TooLarge,
    Broken(hyper::Error),
}

/// The body, at most [`MAX_BODY_BYTES`].
async fn read_body(mut body: Incoming) -> Result<Bytes, BodyError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Broken)?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > MAX_BODY_BYTES {
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(out))
}

impl Shared {
    async fn answer(&self, request: hyper::Request<Incoming>) -> hyper::Response<Body> {
        let (parts, body) = request.into_parts();
        // The declared length (`Content-Length`) is known from the head: a body that
        // cannot fit is refused before any of it is read.
        if body.size_hint().lower() > MAX_BODY_BYTES as u64 {
            return closing(too_large());
        }
        let verb = match parts.method {
            hyper::Method::GET => Verb::Get,
            hyper::Method::HEAD => Verb::Head,
            hyper::Method::POST => Verb::Post,
            _ => Verb::Other,
        };
        let head = Head {
            verb,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            authority: parts.uri.authority().map(|a| a.as_str().to_owned()),
            headers: parts.headers,
        };
        match self.handler.admit(&head) {
            Admit::Reply(reply) => return response(reply),
            Admit::Stream(stream) => return streaming(stream),
            Admit::Handle => {}
        }
        let body = match tokio::time::timeout(self.limits.body_read_timeout, read_body(body)).await
        {
            Ok(Ok(body)) => body,
            Ok(Err(BodyError::TooLarge)) => return closing(too_large()),
            Ok(Err(BodyError::Broken(e))) => {
                return closing(Reply::plain(
                    400,
                    &format!("The request body could not be read: {e}.\n"),
                ));
            }
            Err(_) => {
                return closing(Reply::plain(
                    408,
                    &format!(
                        "The request body did not arrive within {} ms.\n",
                        self.limits.body_read_timeout.as_millis()
                    ),
                ));
            }
        };
        let (reply, replied) = oneshot::channel();
        let job = Job {
            request: Request { head, body },
            reply,
        };
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let mut busy = Reply::plain(
                    503,
                    &format!(
                        "The dashboard is busy: {MAX_WAITING} requests wait for its {} \
                         threads already (the database may be slow). Try again soon.\n",
                        self.limits.threads
                    ),
                );
                busy.headers.push(("Retry-After", "2".into()));
                return response(busy);
            }
            Err(TrySendError::Disconnected(_)) => {
                return closing(Reply::plain(503, "The dashboard is stopping.\n"));
            }
        }
        match replied.await {
            Ok(reply) => response(reply),
            Err(_) => closing(Reply::plain(503, "The dashboard is stopping.\n")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;

    use super::*;

    /// Panics on `/panic`, answers 200 elsewhere.
    struct Fragile;

    impl Handler for Fragile {
        fn admit(&self, _: &Head) -> Admit {
            Admit::Handle
        }

        fn respond(&self, request: Request) -> Reply {
            assert!(request.head.path != "/panic", "a bug in a page");
            Reply::plain(200, "fine\n")
        }
    }

    fn limits() -> Limits {
        Limits {
            threads: 1,
            max_connections: 16,
            max_connections_per_client: 16,
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
        }
    }

    fn answer(addr: SocketAddr, raw: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _ = stream.write_all(raw.as_bytes());
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn get(addr: SocketAddr, path: &str) -> String {
        answer(
            addr,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        )
    }

    /// A handler that panics answers 500, and its thread (the only one) answers the next
    /// request; the server stops when told.
    #[test]
    fn a_panic_is_answered_500_and_the_thread_serves_on() {
        let bound = Bound::bind("127.0.0.1:0").unwrap();
        let addr = bound.addr();
        let mut running = bound.serve(limits(), Arc::new(Fragile)).unwrap();
        for _ in 0..3 {
            let text = get(addr, "/panic");
            assert!(text.starts_with("HTTP/1.1 500"), "{text}");
            assert!(text.contains("serves on"), "{text}");
            let text = get(addr, "/ok");
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        }
        running.stop();
        running.join();
        assert!(TcpStream::connect(addr).is_err(), "stopped listening");
    }

    /// The head and body bounds, without a database: a long head gets 431, a declared
    /// body over the limit 413 (unread), a chunked one 413 once it passes the limit.
    #[test]
    fn heads_and_bodies_are_bounded() {
        let bound = Bound::bind("127.0.0.1:0").unwrap();
        let addr = bound.addr();
        let mut running = bound.serve(limits(), Arc::new(Fragile)).unwrap();
        let long = "a".repeat(MAX_HEADER_BYTES);
        let text = answer(
            addr,
            &format!("GET / HTTP/1.1\r\nHost: x\r\nX-Long: {long}\r\n\r\n"),
        );
        assert!(text.starts_with("HTTP/1.1 431"), "{text}");
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: 1\r\n")).collect();
        let text = answer(addr, &format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n"));
        assert!(text.starts_with("HTTP/1.1 431"), "{text}");
        let text = answer(
            addr,
            &format!(
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY_BYTES + 1
            ),
        );
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
        let chunk = "b".repeat(64 << 10);
        let chunks: String = (0..5).map(|_| format!("10000\r\n{chunk}\r\n")).collect();
        let text = answer(
            addr,
            &format!(
                "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}0\r\n\r\n"
            ),
        );
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
        let text = answer(
            addr,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nids=1",
        );
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        running.stop();
        running.join();
    }
}
