//! Tile files sent from the page cache to the socket without passing
//! through the process (`sendfile`), under hyper's HTTP/1 framing.
//!
//! hyper writes a response through its connection's IO: the head from its
//! own buffer, then the body's buffers as they are, without copying them
//! (the listener turns vectored writes on, so hyper queues body buffers
//! instead of flattening them into its head buffer). A file's body is
//! therefore a stand-in: a [`Bytes`] of the file's length pointing into
//! [`STAND_IN`], a static zeroed region nothing reads, and the open file
//! waits in the connection's [`FileBodies`] queue. When a write reaches a
//! stand-in slice, [`SendfileIo`] sends the same range of the queue's first
//! file instead (its offset in the file is its offset in `STAND_IN`), and
//! drops the file once its last byte is sent. The head before it is sent
//! with `MSG_MORE` so that head and body leave in the same packets.
//!
//! hyper answers one request of a connection at a time, so the queue holds
//! at most one file in practice; it is a queue so that order would still
//! hold if that changed. A stand-in slice with no file queued is an error
//! on the connection (it closes), never zeros sent as a tile. A file that
//! shrinks while it is sent ends the connection the same way, so the
//! client sees a short body, not a wrong one.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Longest file sent this way; larger ones are read into memory.
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// What a file's body points at: zeros in the process's zero-filled data
/// (no page of it is ever touched, so it costs no memory).
static STAND_IN: [u8; MAX_FILE_BYTES] = [0; MAX_FILE_BYTES];

/// The offset in [`STAND_IN`] where `slice` starts, when it lies in it.
fn stand_in_offset(slice: &[u8]) -> Option<usize> {
    let start = STAND_IN.as_ptr() as usize;
    let at = slice.as_ptr() as usize;
    (!slice.is_empty() && at >= start && at + slice.len() <= start + MAX_FILE_BYTES)
        .then(|| at - start)
}

/// A file waiting to be sent as a response body.
#[derive(Debug)]
struct Pending {
    /// Sent at explicit offsets: the store may hold the same open file for
    /// other hits.
    file: Arc<File>,
    len: usize,
}

/// The files of one connection's responses, in the order hyper writes them.
#[derive(Debug, Default)]
pub struct FileBodies {
    queue: Mutex<VecDeque<Pending>>,
}

impl FileBodies {
    /// The body that stands for a file of `len` bytes (see
    /// [`FileBodies::queue`]), or `None` when `len` is 0, above
    /// [`MAX_FILE_BYTES`], or the system has no `sendfile` (not Linux).
    pub fn stand_in(len: u64) -> Option<Bytes> {
        let len = usize::try_from(len).ok()?;
        (cfg!(target_os = "linux") && len > 0 && len <= MAX_FILE_BYTES)
            .then(|| Bytes::from_static(&STAND_IN[..len]))
    }

    /// Queues `file` for the next stand-in body the connection writes. Call
    /// it only once a response with the body [`FileBodies::stand_in`] gave
    /// for `len` is certain to be handed to hyper, and nothing else.
    pub fn queue(&self, file: Arc<File>, len: u64) {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        self.lock().push_back(Pending { file, len });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Pending>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A TCP connection as hyper sees it, sending stand-in bodies from their
/// files.
#[derive(Debug)]
pub struct SendfileIo {
    inner: TokioIo<TcpStream>,
    bodies: Arc<FileBodies>,
}

impl SendfileIo {
    /// Wraps `stream`, whose responses' file bodies wait in `bodies`.
    pub fn new(stream: TcpStream, bodies: Arc<FileBodies>) -> SendfileIo {
        SendfileIo {
            inner: TokioIo::new(stream),
            bodies,
        }
    }

    fn stream(&self) -> &TcpStream {
        self.inner.inner()
    }

    /// Runs `op` on the socket when it is writable, as tokio's own writes
    /// do: a `WouldBlock` clears the readiness and waits again.
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        mut op: impl FnMut(&TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream().poll_write_ready(cx))?;
            match self
                .stream()
                .try_io(Interest::WRITABLE, || op(self.stream()))
            {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return Poll::Ready(other),
            }
        }
    }

    /// Sends at most `len` bytes of the first queued file from `offset`.
    fn poll_send_file(
        &self,
        cx: &mut Context<'_>,
        offset: usize,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        let sent = ready!(self.poll_write_with(cx, |stream| {
            let queue = self.bodies.lock();
            let Some(pending) = queue.front() else {
                return Err(io::Error::other("a file body with no file queued"));
            };
            if offset + len > pending.len {
                return Err(io::Error::other("a file body longer than its file"));
            }
            send_file(stream, &pending.file, offset, len)
        }))?;
        if sent == 0 {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a tile file shrank while it was sent",
            )));
        }
        let mut queue = self.bodies.lock();
        if queue.front().is_some_and(|p| offset + sent == p.len) {
            queue.pop_front();
        }
        Poll::Ready(Ok(sent))
    }
}

/// `sendfile` of `len` bytes of `file` from `offset` to `stream`.
#[cfg(target_os = "linux")]
fn send_file(stream: &TcpStream, file: &File, offset: usize, len: usize) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(offset).map_err(io::Error::other)?;
    // SAFETY: both descriptors are open for the call; `off` is a live
    // offset the call updates.
    let n = unsafe { libc::sendfile(stream.as_raw_fd(), file.as_raw_fd(), &raw mut off, len) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Other systems never get a stand-in body ([`FileBodies::stand_in`]).
#[cfg(not(target_os = "linux"))]
fn send_file(_: &TcpStream, _: &File, _: usize, _: usize) -> io::Result<usize> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(not(target_os = "linux"))]
fn send_more(_: &TcpStream, _: &[IoSlice<'_>]) -> io::Result<usize> {
    Err(io::ErrorKind::Unsupported.into())
}

/// `sendmsg` of `bufs` with `MSG_MORE`: more of this response follows.
#[cfg(target_os = "linux")]
fn send_more(stream: &TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
    // SAFETY: `msg` points at `bufs`, live for the call (IoSlice has the
    // layout of iovec on Unix).
    let n = unsafe {
        libc::sendmsg(
            stream.as_raw_fd(),
            &raw const msg,
            libc::MSG_MORE | libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

impl hyper::rt::Read for SendfileIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for SendfileIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match bufs.iter().position(|b| stand_in_offset(b).is_some()) {
            None => Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            Some(0) => {
                let offset = stand_in_offset(&bufs[0]).unwrap_or_default();
                self.poll_send_file(cx, offset, bufs[0].len())
            }
            Some(body) => self.poll_write_with(cx, |stream| send_more(stream, &bufs[..body])),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test
    use super::*;
    use hyper::rt::Write as _;
    use std::collections::VecDeque;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// A connection's two ends: the server's, wrapped, and the client's.
    async fn pair() -> (SendfileIo, Arc<FileBodies>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let bodies = Arc::new(FileBodies::default());
        (SendfileIo::new(server, bodies.clone()), bodies, client)
    }

    /// Writes `bufs` as hyper does: vectored, advancing past what each
    /// write took.
    async fn write_all(io: &mut SendfileIo, bufs: Vec<Bytes>) -> io::Result<()> {
        let mut bufs: VecDeque<Bytes> = bufs.into();
        while !bufs.is_empty() {
            let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
            let mut n =
                std::future::poll_fn(|cx| Pin::new(&mut *io).poll_write_vectored(cx, &slices))
                    .await?;
            drop(slices);
            while n > 0 {
                let front = bufs.front_mut().unwrap();
                let step = n.min(front.len());
                let _ = front.split_to(step);
                n -= step;
                if front.is_empty() {
                    bufs.pop_front();
                }
            }
        }
        Ok(())
    }

    fn file_of(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
        f
    }

    fn noise(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i.wrapping_mul(31) as u8) ^ seed ^ ((i >> 9) as u8))
            .collect()
    }

    #[test]
    fn stand_ins_exist_only_for_lengths_sendfile_takes() {
        assert!(FileBodies::stand_in(0).is_none());
        assert!(FileBodies::stand_in(MAX_FILE_BYTES as u64 + 1).is_none());
        let body = FileBodies::stand_in(1000).unwrap();
        assert_eq!(stand_in_offset(&body), Some(0));
        assert_eq!(stand_in_offset(&body[10..]), Some(10));
        assert_eq!(stand_in_offset(b"a plain buffer"), None);
    }

    #[tokio::test]
    async fn file_bodies_arrive_whole_and_in_order_between_plain_bytes() {
        let (mut io, bodies, mut client) = pair().await;
        // Larger than the socket's buffers, so sendfile sends it in parts
        // while the client reads.
        let big = noise(3 << 20, 1);
        let small = noise(70_000, 2);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        });
        for (head, body) in [(&b"HEAD-1\r\n"[..], &big), (&b"HEAD-2\r\n"[..], &small)] {
            bodies.queue(Arc::new(file_of(body)), body.len() as u64);
            let stand_in = FileBodies::stand_in(body.len() as u64).unwrap();
            write_all(&mut io, vec![Bytes::from_static(head), stand_in])
                .await
                .unwrap();
        }
        write_all(&mut io, vec![Bytes::from_static(b"END")])
            .await
            .unwrap();
        assert!(bodies.lock().is_empty(), "every file sent is dropped");
        drop(io);
        let got = reader.await.unwrap();
        let mut want = b"HEAD-1\r\n".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"HEAD-2\r\n");
        want.extend_from_slice(&small);
        want.extend_from_slice(b"END");
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the bytes sent differ from the files");
    }

    #[tokio::test]
    async fn a_stand_in_without_its_file_is_an_error_not_zeros() {
        let (mut io, _bodies, _client) = pair().await;
        let e = write_all(&mut io, vec![FileBodies::stand_in(100).unwrap()])
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no file queued"), "{e}");
    }

    #[tokio::test]
    async fn a_file_that_shrank_ends_the_body_with_an_error() {
        let (mut io, bodies, mut client) = pair().await;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let _ = client.read_to_end(&mut got).await;
            got
        });
        let file = file_of(&noise(1000, 3));
        bodies.queue(Arc::new(file.try_clone().unwrap()), 5000);
        let e = write_all(&mut io, vec![FileBodies::stand_in(5000).unwrap()])
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        drop(io);
        assert_eq!(
            reader.await.unwrap(),
            noise(1000, 3),
            "what there was, then the end"
        );
    }
}
