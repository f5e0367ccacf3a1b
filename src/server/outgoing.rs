//! An answer on its way out: what it holds until its last byte is written.
//!
//! Why: an answer lives in memory until the client reads it. When the
//! router returned, the request's slot, its in-flight mark on the
//! connection and its charges used to be released, and an answer nobody read
//! stayed outside every budget for the connection's idle timeout (100 such
//! answers took the pod down). Now the body holds them ([`Hold`]: the
//! request slot and the answer's bytes charged to the answer budget; the
//! connection's in-flight mark and its "writing" entry, whose age the write
//! deadline watches), and gives them back only when the last frame has been
//! taken or the body is dropped (connection closed). The data goes out in
//! [`CHUNK`]-byte frames, so hyper and rustls buffer at most a frame or two
//! of it per connection; the rest stays here, charged.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, SizeHint};

use super::conns::{InFlight, Writing};

/// Largest data frame handed to hyper.
pub const CHUNK: usize = 16 * 1024;

/// What an admission answer holds until it is written (its answer-budget
/// charge), carried from the router to the connection in the response's
/// extensions.
#[derive(Clone, Default)]
pub struct Hold(pub Arc<Vec<Box<dyn std::any::Any + Send + Sync>>>);

impl Hold {
    pub fn of(held: Vec<Box<dyn std::any::Any + Send + Sync>>) -> Self {
        Self(Arc::new(held))
    }
}

/// The response body: `inner` in frames of at most [`CHUNK`] bytes, holding
/// the connection's marks and the request's [`Hold`] until it ends.
pub struct Outgoing {
    inner: Body,
    /// The rest of a data frame larger than [`CHUNK`].
    rest: Bytes,
    _in_flight: InFlight,
    _writing: Writing,
    _hold: Option<Hold>,
}

impl Outgoing {
    pub fn new(inner: Body, in_flight: InFlight, writing: Writing, hold: Option<Hold>) -> Self {
        Self { inner, rest: Bytes::new(), _in_flight: in_flight, _writing: writing, _hold: hold }
    }

    fn next_chunk(&mut self) -> Frame<Bytes> {
        let n = self.rest.len().min(CHUNK);
        Frame::data(self.rest.split_to(n))
    }
}

impl HttpBody for Outgoing {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if !self.rest.is_empty() {
            return Poll::Ready(Some(Ok(self.next_chunk())));
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if data.len() > CHUNK => {
                    self.rest = data;
                    Poll::Ready(Some(Ok(self.next_chunk())))
                }
                Ok(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}
