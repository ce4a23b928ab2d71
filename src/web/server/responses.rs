//! Replies as hyper responses: the headers every answer carries, and a body that is
//! whole or comes in pieces (an event stream).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::header::{HeaderName, HeaderValue};
use tokio::sync::mpsc;

use super::{MAX_BODY_BYTES, Reply, Streaming};

pub(super) fn too_large() -> Reply {
    Reply::plain(
        413,
        &format!("The request body is larger than {MAX_BODY_BYTES} bytes; nothing was read.\n"),
    )
}

/// `reply` with `Connection: close`: the rest of the request is never read, so the
/// connection cannot carry another.
pub(super) fn closing(mut reply: Reply) -> hyper::Response<Body> {
    reply.headers.push(("Connection", "close".into()));
    response(reply)
}

/// Headers every answer carries: nothing is cached, sniffed or framed, and pages load
/// scripts and styles from this server only.
const COMMON_HEADERS: [(&str, &str); 4] = [
    ("cache-control", "no-store"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    (
        "content-security-policy",
        "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'",
    ),
];

fn with_headers(
    status: u16,
    content_type: &'static str,
    extra: Vec<(&'static str, String)>,
    body: Body,
) -> hyper::Response<Body> {
    let mut response = hyper::Response::new(body);
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    for (name, value) in COMMON_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    for (name, value) in extra {
        // Values the handlers make from ids and paths; one that is not a valid header
        // value is left out rather than sent broken.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.insert(name, value);
        }
    }
    response
}

pub(super) fn response(reply: Reply) -> hyper::Response<Body> {
    with_headers(
        reply.status,
        reply.content_type,
        reply.headers,
        Body::Whole(Some(Bytes::from(reply.body))),
    )
}

pub(super) fn streaming(stream: Streaming) -> hyper::Response<Body> {
    with_headers(
        200,
        stream.content_type,
        stream.headers,
        Body::Pieces(stream.body),
    )
}

/// A response body: whole, or in pieces as they come.
pub(super) enum Body {
    /// `None` once sent.
    Whole(Option<Bytes>),
    Pieces(mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Whole(body) => Poll::Ready(body.take().map(|b| Ok(Frame::data(b)))),
            Body::Pieces(pieces) => pieces.poll_recv(cx).map(|p| p.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Whole(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Whole(None) => SizeHint::with_exact(0),
            Body::Pieces(_) => SizeHint::default(),
        }
    }
}
