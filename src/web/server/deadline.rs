//! The write deadline of a connection: a client that reads nothing of its response is
//! dropped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Read, ReadBufCursor, Write};
use tokio::time::{Instant, Sleep};

/// A connection whose writes fail with `TimedOut` once one has waited
/// [`Limits::write_timeout`] without the client taking a byte (a client that never
/// reads its response would otherwise hold the connection, and what hyper buffered for
/// it, for ever). Reads pass through: hyper bounds the wait for a request head, and the
/// server the wait for a body. An event stream, which writes a few bytes now and then,
/// meets the limit only when its client stops reading.
pub(super) struct WriteDeadline<T> {
    io: T,
    timeout: Duration,
    /// Armed when a write first waits, disarmed when one makes progress.
    deadline: Pin<Box<Sleep>>,
    armed: bool,
}

impl<T> WriteDeadline<T> {
    pub(super) fn new(io: T, timeout: Duration) -> Self {
        WriteDeadline {
            io,
            timeout,
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: false,
        }
    }

    fn watch<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match poll {
            Poll::Ready(result) => {
                self.armed = false;
                Poll::Ready(result)
            }
            Poll::Pending => {
                if !self.armed {
                    self.armed = true;
                    // The options cap timeouts at a day, so this cannot overflow.
                    self.deadline.as_mut().reset(Instant::now() + self.timeout);
                }
                match self.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the client read nothing for {} ms",
                            self.timeout.as_millis()
                        ),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: Read + Unpin> Read for WriteDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for WriteDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_flush(cx);
        this.watch(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_shutdown(cx);
        this.watch(cx, poll)
    }
}
