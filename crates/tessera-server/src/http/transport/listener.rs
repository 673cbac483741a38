//! The listening socket and its connections, bounded so that slow or idle
//! clients cannot take every file descriptor:
//!
//! - each connection must send a request's headers within
//!   `server.header_timeout_secs` (hyper's header-read timeout);
//! - a connection with no request in flight for `server.idle_timeout_secs`
//!   is closed;
//! - at most `server.max_connections` are open; when a new one arrives at
//!   the limit, the connection idle for longest is closed first (a new
//!   client is served, an attacker's idle sockets go), and when none is idle
//!   the new one is closed at once;
//! - when `accept` fails for lack of descriptors, the oldest idle
//!   connection is closed and the error is logged at most every few
//!   seconds;
//! - the soft open-file limit is raised to the hard limit at start.
//!
//! Each accepted connection is served, from then on, by one of the
//! [`ConnectionThreads`] (in turn), each with an event loop of its own.
//!
//! On shutdown the listener stops accepting, every connection finishes its
//! request in flight and closes, and what is still open after the grace
//! period is dropped.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::sendfile::{FileBodies, SendfileIo};
use crate::http::App;
use hyper::body::Incoming;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use crate::throttle::Throttle;

/// How connections are bounded.
#[derive(Debug, Clone, Copy)]
pub struct ListenerSettings {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Longest wait for a request's headers.
    pub header_timeout: Duration,
    /// Longest time a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// How long shutdown waits for requests in flight.
    pub shutdown_grace: Duration,
    /// Threads that serve connections, each with its own runtime (at
    /// least one).
    pub connection_threads: usize,
}

/// Threads that each serve connections on a runtime of their own, with its
/// own IO driver, as nginx's workers each have their own event loop: a
/// connection's socket is read, its tile hits answered and its responses
/// written by one thread, and a thread held up (by the scheduler, on a busy
/// machine) holds up only its own connections. Requests the short way does
/// not answer are handed to the main runtime (see [`App::call_with`]).
struct ConnectionThreads {
    handles: Vec<tokio::runtime::Handle>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    next: AtomicUsize,
}

impl ConnectionThreads {
    fn start(count: usize) -> std::io::Result<ConnectionThreads> {
        let mut threads = ConnectionThreads {
            handles: Vec::new(),
            stops: Vec::new(),
            threads: Vec::new(),
            next: AtomicUsize::new(0),
        };
        for i in 0..count.max(1) {
            let (handle_tx, handle_rx) = std::sync::mpsc::channel();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("tessera-conn-{i}"))
                .spawn(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => {
                            let _ = handle_tx.send(Ok(runtime.handle().clone()));
                            runtime.block_on(async {
                                let _ = stopped.await;
                            });
                        }
                        Err(e) => {
                            let _ = handle_tx.send(Err(e));
                        }
                    }
                })?;
            threads.threads.push(thread);
            threads.stops.push(stop);
            let handle = handle_rx
                .recv()
                .map_err(|_| std::io::Error::other("a connection thread ended at start"))??;
            threads.handles.push(handle);
        }
        Ok(threads)
    }

    /// The runtime of the thread to serve the next connection (in turn).
    fn next(&self) -> &tokio::runtime::Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }
}

impl Drop for ConnectionThreads {
    fn drop(&mut self) {
        self.stops.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// How often connections check their idle time.
const IDLE_TICK: Duration = Duration::from_millis(500);
/// Least time between two logged accept errors.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(5);

/// One open connection, as the table sees it.
#[derive(Debug)]
struct Entry {
    in_flight: Arc<AtomicUsize>,
    /// Milliseconds since the table started when the last request began or
    /// ended (or the connection opened).
    last_active: Arc<AtomicU64>,
    close: Arc<Notify>,
    /// Asked to close already: not a candidate any more.
    closing: AtomicBool,
}

/// The open connections.
#[derive(Debug)]
struct Connections {
    start: Instant,
    next_id: AtomicU64,
    open: Mutex<BTreeMap<u64, Entry>>,
}

impl Connections {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn len(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Asks the connection idle for longest to close; false when none is
    /// idle.
    fn close_oldest_idle(&self) -> bool {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let oldest = open
            .values()
            .filter(|e| {
                e.in_flight.load(Ordering::Acquire) == 0 && !e.closing.load(Ordering::Acquire)
            })
            .min_by_key(|e| e.last_active.load(Ordering::Acquire));
        match oldest {
            Some(e) => {
                e.closing.store(true, Ordering::Release);
                e.close.notify_one();
                true
            }
            None => false,
        }
    }

    fn close_all(&self) {
        for e in self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            e.close.notify_one();
        }
    }
}

/// Raises the soft limit of open files to the hard limit; returns both
/// (before and after) for the log.
pub fn raise_open_file_limit() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to an rlimit the call fills in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: a valid rlimit with soft <= hard.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok((before, limit.rlim_cur))
}

/// The default connection limit for an open-file limit: most of the
/// descriptors, leaving room for files, stores and GDAL.
pub fn default_max_connections(open_files: u64) -> usize {
    let room = open_files.saturating_sub(64) * 4 / 5;
    usize::try_from(room.clamp(16, 100_000)).unwrap_or(100_000)
}

/// Serves each request with the router current in `routers` on `listener`
/// until `shutdown` completes, then lets
/// requests in flight finish for at most the grace period. Fails only when
/// the connection threads cannot be started.
pub async fn serve(
    listener: TcpListener,
    routers: watch::Receiver<Arc<App>>,
    settings: ListenerSettings,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let table = Arc::new(Connections {
        start: Instant::now(),
        next_id: AtomicU64::new(0),
        open: Mutex::new(BTreeMap::new()),
    });
    let mut tasks = tokio::task::JoinSet::new();
    let main = tokio::runtime::Handle::current();
    let threads = ConnectionThreads::start(settings.connection_threads)
        .map_err(|e| std::io::Error::other(format!("cannot start the connection threads: {e}")))?;
    let accept_warnings = Throttle::new(ACCEPT_LOG_EVERY);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
            Some(_) = tasks.join_next() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (or another transient failure): make
                // room by closing an idle connection, and say so now and
                // then rather than for every attempt.
                table.close_oldest_idle();
                if let Some(held_back) = accept_warnings.allow() {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        open = table.len(),
                        held_back,
                        "accept failed; closing idle connections"
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        if table.len() >= settings.max_connections && !table.close_oldest_idle() {
            // Every connection is busy: this one cannot be served.
            drop(stream);
            continue;
        }
        let (routers, table, main) = (routers.clone(), table.clone(), main.clone());
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        tasks.spawn_on(
            async move {
                // Registered with the reactor of the thread that serves it.
                if let Ok(stream) = TcpStream::from_std(stream) {
                    connection(stream, peer.ip(), routers, table, settings, main).await;
                }
            },
            threads.next(),
        );
    }
    drop(listener);
    table.close_all();
    let drained = tokio::time::timeout(settings.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = table.len(),
            "connections still open after the shutdown grace period are dropped"
        );
    }
    // What is left is dropped with the tasks, then the threads end.
    drop(tasks);
    drop(threads);
    Ok(())
}

/// Serves one connection until the client closes it, it stays idle too
/// long, or the table asks it to close.
async fn connection(
    stream: TcpStream,
    peer: std::net::IpAddr,
    routers: watch::Receiver<Arc<App>>,
    table: Arc<Connections>,
    settings: ListenerSettings,
    main: tokio::runtime::Handle,
) {
    let _ = stream.set_nodelay(true);
    let id = table.next_id.fetch_add(1, Ordering::Relaxed);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let last_active = Arc::new(AtomicU64::new(table.now_ms()));
    let close = Arc::new(Notify::new());
    table
        .open
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            id,
            Entry {
                in_flight: in_flight.clone(),
                last_active: last_active.clone(),
                close: close.clone(),
                closing: AtomicBool::new(false),
            },
        );
    let files = Arc::new(FileBodies::default());
    let service = {
        let (in_flight, last_active, table, files) = (
            in_flight.clone(),
            last_active.clone(),
            table.clone(),
            files.clone(),
        );
        hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request
                .extensions_mut()
                .insert(crate::http::guard::ClientAddr(peer));
            in_flight.fetch_add(1, Ordering::AcqRel);
            last_active.store(table.now_ms(), Ordering::Release);
            let (in_flight, last_active, table) =
                (in_flight.clone(), last_active.clone(), table.clone());
            // The router current now serves this request to its end.
            let app = routers.borrow().clone();
            let response = app.call_with(request, Some(&files), Some(&main));
            async move {
                let response = response.await;
                last_active.store(table.now_ms(), Ordering::Release);
                in_flight.fetch_sub(1, Ordering::AcqRel);
                response
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout)
        // Header names in title case (`Content-Type`), as nginx and Apache
        // send them: HTTP/1.1 names are case-insensitive, but some clients
        // (the OGC test suites among them) compare them as text.
        .title_case_headers(true)
        // Body buffers reach the IO as they are, never copied into hyper's
        // own: file bodies are recognised there (see `sendfile`).
        .writev(true);
    let conn = builder.serve_connection(SendfileIo::new(stream, files), service);
    tokio::pin!(conn);
    let idle_ms = settings.idle_timeout.as_millis() as u64;
    let closing = loop {
        tokio::select! {
            _ = conn.as_mut() => break false,
            () = close.notified() => break true,
            () = tokio::time::sleep(IDLE_TICK) => {
                let idle = in_flight.load(Ordering::Acquire) == 0
                    && table.now_ms().saturating_sub(last_active.load(Ordering::Acquire)) >= idle_ms;
                if idle {
                    break true;
                }
            }
        }
    };
    // A connection with a request in flight finishes it; one without is
    // closed at once (dropping it closes the socket), even halfway through
    // sending a request.
    if closing && in_flight.load(Ordering::Acquire) > 0 {
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(settings.shutdown_grace, conn.as_mut()).await;
    }
    table
        .open
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_connection_limit_leaves_room_for_files() {
        assert_eq!(default_max_connections(1024), 768);
        assert_eq!(default_max_connections(10), 16);
        assert_eq!(default_max_connections(1 << 40), 100_000);
    }
}
