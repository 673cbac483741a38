//! [`BodyReader`]: a request body pulled from hyper one frame at a time, in
//! order, with a size limit and a per-frame stall timeout. The caller asks
//! for the next frame only when it has room for it, so nothing is buffered
//! ahead and no task or queue sits between the socket and the consumer.
//! Frames are handed on as hyper produced them (`Bytes`), never copied.

use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body_util::BodyExt;

/// A small request body read whole, at most `most` bytes: `None` when its
/// `Content-Length` says more (refused before anything is read) or more
/// arrives, or it cannot be read.
pub async fn small_body(headers: &axum::http::HeaderMap, body: Body, most: usize) -> Option<Bytes> {
    let said = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if said.is_some_and(|n| n > most) {
        return None;
    }
    axum::body::to_bytes(body, most).await.ok()
}

/// Why a body could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// No frame arrived within the stall timeout.
    #[error("no part of the body arrived for {} s", .0.as_secs())]
    Stalled(Duration),
    /// The body passed the size limit.
    #[error("the body is larger than {0} bytes")]
    TooLarge(u64),
    /// The connection failed or the body ended before its declared length.
    #[error("the body ended early ({0})")]
    Incomplete(String),
}

/// Pulls the data frames of one request body.
#[derive(Debug)]
pub struct BodyReader {
    body: Body,
    stall: Duration,
    max: u64,
    received: u64,
}

impl BodyReader {
    /// Reads `body`, refusing more than `max` bytes or a wait of more than
    /// `stall` for any frame.
    pub fn new(body: Body, max: u64, stall: Duration) -> BodyReader {
        BodyReader {
            body,
            stall,
            max,
            received: 0,
        }
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The next data frame (trailers are skipped), `None` at the end.
    pub async fn next(&mut self) -> Result<Option<Bytes>, BodyError> {
        loop {
            let frame = match tokio::time::timeout(self.stall, self.body.frame()).await {
                Err(_) => return Err(BodyError::Stalled(self.stall)),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(BodyError::Incomplete(e.to_string())),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            self.received += data.len() as u64;
            if self.received > self.max {
                return Err(BodyError::TooLarge(self.max));
            }
            return Ok(Some(data));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn body(chunks: Vec<Result<&'static [u8], std::io::Error>>) -> Body {
        Body::from_stream(futures::stream::iter(
            chunks.into_iter().map(|c| c.map(Bytes::from_static)),
        ))
    }

    #[tokio::test]
    async fn frames_come_in_order_and_unchanged() {
        let mut r = BodyReader::new(
            body(vec![Ok(b"ab"), Ok(b""), Ok(b"cde")]),
            10,
            Duration::from_secs(5),
        );
        let mut got = Vec::new();
        while let Some(f) = r.next().await.unwrap() {
            got.push(f);
        }
        assert_eq!(got.concat(), b"abcde");
        assert_eq!(r.received(), 5);
    }

    #[tokio::test]
    async fn limits_and_failures_are_errors() {
        let mut r = BodyReader::new(
            body(vec![Ok(b"abc"), Ok(b"def")]),
            5,
            Duration::from_secs(5),
        );
        assert!(r.next().await.unwrap().is_some());
        assert!(matches!(r.next().await, Err(BodyError::TooLarge(5))));

        let mut r = BodyReader::new(
            body(vec![Ok(b"abc"), Err(std::io::Error::other("reset"))]),
            100,
            Duration::from_secs(5),
        );
        assert!(r.next().await.unwrap().is_some());
        assert!(matches!(r.next().await, Err(BodyError::Incomplete(_))));

        let stalled =
            Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let mut r = BodyReader::new(stalled, 100, Duration::from_millis(50));
        assert!(matches!(r.next().await, Err(BodyError::Stalled(_))));
    }
}
