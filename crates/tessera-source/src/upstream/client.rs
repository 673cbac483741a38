//! The bounded HTTP client of upstream sources: connect and read timeouts,
//! a limit of requests in flight per source, retries with backoff on
//! connection errors and 5xx, a circuit that fails fast while the upstream
//! is down, and the private-network guard on every connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::excerpt;
use crate::location::{host_is_allowed, is_public};

pub use crate::http_settings::{HttpSettings, NetworkPolicy};

/// A response that came back with a status below 500.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type`, lower case, without parameters (empty when absent).
    pub content_type: String,
    /// The body.
    pub body: Bytes,
    /// `ETag`, when the answer has one.
    pub etag: Option<String>,
}

/// Why an upstream request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// The upstream failed (after the retries): a connection error, a
    /// timeout, a 5xx, a body too large.
    #[error("{0}")]
    Failed(String),
    /// The circuit is open: the upstream failed too often lately.
    #[error(
        "the upstream failed {failures} times in a row; not asking it again for {retry_after_secs} s"
    )]
    CircuitOpen {
        /// Failures that opened it.
        failures: u32,
        /// Seconds until it may be asked again.
        retry_after_secs: u64,
    },
    /// The destination is not allowed (a private address).
    #[error("{0}")]
    NotAllowed(String),
    /// The caller gave up.
    #[error("cancelled")]
    Cancelled,
}

#[derive(Debug, Default)]
struct Circuit {
    failures: u32,
    open_until: Option<Instant>,
    /// A trial request is out while the circuit is half open.
    trial: bool,
}

/// A GET started ahead of its reader ([`UpstreamClient::prefetch`]).
#[derive(Debug)]
pub struct Prefetch {
    rx: std::sync::mpsc::Receiver<Result<Fetched, FetchError>>,
    stop: Arc<AtomicBool>,
    started: Instant,
}

impl Prefetch {
    /// Waits for the answer, as [`UpstreamClient::get`] does; raising
    /// `cancel` stops retries and a request not yet sent.
    pub fn wait(self, cancel: Option<&AtomicBool>) -> Result<Fetched, FetchError> {
        wait_for(&self.rx, cancel, &self.stop).unwrap_or_else(|| Err(task_failed()))
    }

    /// How long ago it was started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A prefetched answer older than this is dropped unread and asked again:
/// its reader gave up, and the upstream may have changed since.
pub const PREFETCH_MAX_AGE: Duration = Duration::from_secs(30);

/// Requests started ahead of their reads, by URL (what a source keeps for
/// [`crate::Source::prefetch`]): at most `most`, oldest dropped first (a
/// dropped one stops), none older than [`PREFETCH_MAX_AGE`].
#[derive(Debug)]
pub struct Prefetched {
    ahead: Mutex<std::collections::VecDeque<(reqwest::Url, Prefetch)>>,
    most: usize,
}

impl Prefetched {
    /// An empty table of at most `most` requests.
    pub fn new(most: usize) -> Prefetched {
        Prefetched {
            ahead: Mutex::new(std::collections::VecDeque::new()),
            most: most.max(1),
        }
    }

    /// Starts GETting `url` with `client` unless it is already started.
    pub fn start(&self, client: &Arc<UpstreamClient>, url: reqwest::Url) {
        let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        if ahead.iter().any(|(u, _)| *u == url) {
            return;
        }
        let started = client.prefetch(url.clone());
        ahead.push_back((url, started));
        while ahead.len() > self.most {
            ahead.pop_front();
        }
    }

    /// The request for `url`, if one was started lately.
    pub fn take(&self, url: &reqwest::Url) -> Option<Prefetch> {
        self.take_all(std::slice::from_ref(url)).pop().flatten()
    }

    /// The requests for `urls` (in their order) started lately, under one
    /// look at the table.
    fn take_all(&self, urls: &[reqwest::Url]) -> Vec<Option<Prefetch>> {
        let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        ahead.retain(|(_, p)| p.age() < PREFETCH_MAX_AGE);
        urls.iter()
            .map(|url| {
                let at = ahead.iter().position(|(u, _)| u == url)?;
                ahead.remove(at).map(|(_, p)| p)
            })
            .collect()
    }

    /// GETs every one of `urls` as [`UpstreamClient::get_all`] does,
    /// taking those started ahead instead of asking again.
    pub fn get_all(
        &self,
        client: &Arc<UpstreamClient>,
        urls: &[reqwest::Url],
        cancel: Option<&AtomicBool>,
    ) -> Vec<Result<Fetched, FetchError>> {
        let ahead = self.take_all(urls);
        let rest: Vec<reqwest::Url> = urls
            .iter()
            .zip(&ahead)
            .filter(|(_, p)| p.is_none())
            .map(|(u, _)| u.clone())
            .collect();
        let mut fetched = if rest.is_empty() {
            Vec::new()
        } else {
            client.get_all(rest, cancel)
        }
        .into_iter();
        ahead
            .into_iter()
            .map(|p| match p {
                Some(p) => p.wait(cancel),
                None => fetched.next().unwrap_or_else(|| Err(task_failed())),
            })
            .collect()
    }
}

/// Waits for what the request task sends on `rx`, raising `stop` once
/// `cancel` is raised; `None` when the task ended without sending.
fn wait_for<T>(
    rx: &std::sync::mpsc::Receiver<T>,
    cancel: Option<&AtomicBool>,
    stop: &AtomicBool,
) -> Option<T> {
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(answer) => return Some(answer),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
        }
    }
}

fn task_failed() -> FetchError {
    FetchError::Failed("the upstream request task failed".into())
}

/// What is asked of an upstream.
#[derive(Debug, Clone)]
enum Ask {
    /// A GET, of a byte range when given (offset, length).
    Get(Option<(u64, u64)>),
    /// A POST of a JSON body.
    Post(Bytes),
}

/// One upstream's client (shared by every read of one source).
#[derive(Debug)]
pub struct UpstreamClient {
    /// One HTTP client per destination port: the resolver that guards a
    /// client's connections checks `gdal.allowed_private_hosts` entries
    /// against the port the request is for, and reqwest tells a resolver
    /// only the name.
    clients: Mutex<std::collections::HashMap<u16, reqwest::Client>>,
    policy: NetworkPolicy,
    settings: HttpSettings,
    permits: Arc<tokio::sync::Semaphore>,
    circuit: Mutex<Circuit>,
    headers: reqwest::header::HeaderMap,
    basic_auth: Option<(String, String)>,
}

/// The runtime every upstream request runs on (two threads, started on
/// first use); callers are blocking threads.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tessera-upstream")
            .enable_all()
            .build()
            .expect("the upstream I/O runtime starts")
    })
}

/// Resolves names for the client and refuses private addresses that the
/// policy does not allow, on every connection (redirects are not followed,
/// and a name that changes its address is checked again).
#[derive(Debug)]
struct GuardedResolver {
    policy: NetworkPolicy,
    /// The port of the configured URL (the only one connected to).
    port: u16,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let port = self.port;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|a| address_allowed(&policy, &host, port, a.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(format!(
                    "{host} resolves only to private addresses; allow it with gdal.allowed_private_hosts or gdal.allow_private_network"
                )
                .into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

fn address_allowed(policy: &NetworkPolicy, host: &str, port: u16, ip: std::net::IpAddr) -> bool {
    policy.allow_private_network
        || is_public(&ip)
        || host_is_allowed(host, port, &policy.allowed_private_hosts)
}

/// Distinct ports one upstream's URLs may use (each has its own client).
const MOST_PORTS: usize = 8;

/// Checks a URL before it is asked: http or https, a host, and a host
/// written as an address literal that the policy allows at that port (names
/// are checked by the resolver on every connection, against the same port).
fn check_destination(url: &reqwest::Url, policy: &NetworkPolicy) -> Result<(), String> {
    match url.scheme() {
        "http" | "https" => {}
        s => {
            return Err(format!(
                "{}: only http and https upstreams are supported, not {s}",
                redacted(url)
            ));
        }
    }
    let host = url
        .host_str()
        .ok_or_else(|| format!("{} has no host", redacted(url)))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let literal = host.trim_matches(|c| c == '[' || c == ']');
    if let Ok(ip) = literal.parse::<std::net::IpAddr>()
        && !address_allowed(policy, literal, port, ip)
    {
        return Err(format!(
            "{} is a private address; allow it with gdal.allowed_private_hosts (\"{host}:{port}\") or gdal.allow_private_network",
            redacted(url)
        ));
    }
    Ok(())
}

/// An HTTP client whose connections go only to addresses the policy allows
/// for `port`; redirects are never followed.
fn build_client(
    settings: &HttpSettings,
    policy: &NetworkPolicy,
    port: u16,
) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs_f64(settings.connect_timeout_secs))
        .timeout(Duration::from_secs_f64(settings.timeout_secs))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("tessera/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(GuardedResolver {
            policy: policy.clone(),
            port,
        }))
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))
}

impl UpstreamClient {
    /// A client for `url`'s upstream as a source configures it (`http:`,
    /// `headers:`, `basic_auth:`), to be shared by the source's reads (see
    /// [`UpstreamClient::new`]).
    pub fn shared(
        url: &reqwest::Url,
        settings: &HttpSettings,
        policy: NetworkPolicy,
        headers: &std::collections::BTreeMap<String, String>,
        basic_auth: Option<&super::spec::BasicAuth>,
    ) -> Result<Arc<UpstreamClient>, String> {
        let auth = basic_auth.map(|a| (a.user.clone(), a.password.clone()));
        UpstreamClient::new(url, settings.clone(), policy, headers, auth).map(Arc::new)
    }

    /// A client for `url`'s upstream. Refuses a URL whose host is a private
    /// address literal the policy does not allow (names are checked on
    /// every connection).
    pub fn new(
        url: &reqwest::Url,
        settings: HttpSettings,
        policy: NetworkPolicy,
        headers: &std::collections::BTreeMap<String, String>,
        basic_auth: Option<(String, String)>,
    ) -> Result<UpstreamClient, String> {
        settings.validate()?;
        check_destination(url, &policy)?;
        let mut header_map = reqwest::header::HeaderMap::new();
        for (k, v) in headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| format!("header {k:?}: {e}"))?;
            let value = reqwest::header::HeaderValue::from_str(v)
                .map_err(|e| format!("header {k:?}: {e}"))?;
            header_map.insert(name, value);
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let client = build_client(&settings, &policy, port)?;
        Ok(UpstreamClient {
            clients: Mutex::new(std::collections::HashMap::from([(port, client)])),
            policy,
            permits: Arc::new(tokio::sync::Semaphore::new(settings.max_concurrent)),
            settings,
            circuit: Mutex::new(Circuit::default()),
            headers: header_map,
            basic_auth,
        })
    }

    /// The settings it was built with.
    pub fn settings(&self) -> &HttpSettings {
        &self.settings
    }

    /// GETs `url`, blocking: waits for a permit, retries connection errors,
    /// timeouts and 5xx with backoff, and keeps the circuit. A response
    /// below 500 (a 4xx too) is returned for the caller to judge.
    pub fn get(
        self: &Arc<Self>,
        url: &reqwest::Url,
        cancel: Option<&AtomicBool>,
    ) -> Result<Fetched, FetchError> {
        self.get_all(vec![url.clone()], cancel)
            .pop()
            .unwrap_or(Err(FetchError::Cancelled))
    }

    /// POSTs `body` (JSON) to `url`, blocking, as [`UpstreamClient::get`]
    /// asks (permits, retries of connection errors, timeouts and 5xx, the
    /// circuit, `max_body_bytes`): a STAC API's `POST /search`.
    pub fn post_json(
        self: &Arc<Self>,
        url: &reqwest::Url,
        body: &serde_json::Value,
        cancel: Option<&AtomicBool>,
    ) -> Result<Fetched, FetchError> {
        let stop = Arc::new(AtomicBool::new(
            cancel.is_some_and(|c| c.load(Ordering::Relaxed)),
        ));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (this, flag, url) = (self.clone(), stop.clone(), url.clone());
        let body = Bytes::from(body.to_string());
        runtime().spawn(async move {
            let _ = tx.send(this.ask_with_retries(url, flag, Ask::Post(body)).await);
        });
        wait_for(&rx, cancel, &stop).unwrap_or_else(|| Err(task_failed()))
    }

    /// GETs every one of `urls` at once (as [`UpstreamClient::get`] each,
    /// at most `max_concurrent` in flight), blocking until all are answered;
    /// the results are in the order of `urls`. Raising `cancel` stops
    /// retries and requests not yet sent.
    pub fn get_all(
        self: &Arc<Self>,
        urls: Vec<reqwest::Url>,
        cancel: Option<&AtomicBool>,
    ) -> Vec<Result<Fetched, FetchError>> {
        let n = urls.len();
        let stop = Arc::new(AtomicBool::new(
            cancel.is_some_and(|c| c.load(Ordering::Relaxed)),
        ));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (this, flag) = (self.clone(), stop.clone());
        runtime().spawn(async move {
            let asked = urls.into_iter().map(|u| {
                this.clone()
                    .ask_with_retries(u, flag.clone(), Ask::Get(None))
            });
            let _ = tx.send(futures::future::join_all(asked).await);
        });
        wait_for(&rx, cancel, &stop).unwrap_or_else(|| (0..n).map(|_| Err(task_failed())).collect())
    }

    /// Starts GETting `url` (as [`UpstreamClient::get`], under the same
    /// permits and circuit) without waiting: [`Prefetch::wait`] takes the
    /// answer. A prefetch dropped unread stops its retries and, if it has
    /// not been sent yet, its request.
    pub fn prefetch(self: &Arc<Self>, url: reqwest::Url) -> Prefetch {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (this, flag) = (self.clone(), stop.clone());
        runtime().spawn(async move {
            let _ = tx.send(this.ask_with_retries(url, flag, Ask::Get(None)).await);
        });
        Prefetch {
            rx,
            stop,
            started: Instant::now(),
        }
    }

    /// GETs `len` bytes of `url` from `offset` (a `Range` request; an
    /// answer of the whole body is cut to the range, a 416 is no bytes) as
    /// [`UpstreamClient::get`] does, on the upstream runtime: the future
    /// may be awaited on any executor.
    pub fn get_range(
        self: &Arc<Self>,
        url: reqwest::Url,
        offset: u64,
        len: u64,
    ) -> impl std::future::Future<Output = Result<Fetched, FetchError>> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let this = self.clone();
        let stop = Arc::new(AtomicBool::new(false));
        runtime().spawn(async move {
            let _ = tx.send(
                this.ask_with_retries(url, stop, Ask::Get(Some((offset, len))))
                    .await,
            );
        });
        async move { rx.await.unwrap_or_else(|_| Err(task_failed())) }
    }

    async fn ask_with_retries(
        self: Arc<Self>,
        url: reqwest::Url,
        stop: Arc<AtomicBool>,
        ask: Ask,
    ) -> Result<Fetched, FetchError> {
        self.enter_circuit()?;
        let mut attempt = 0;
        loop {
            if stop.load(Ordering::Relaxed) {
                self.leave_circuit(None);
                return Err(FetchError::Cancelled);
            }
            match self.ask_once(url.clone(), &ask).await {
                Ok(f) => {
                    self.leave_circuit(Some(true));
                    return Ok(f);
                }
                Err(e)
                    if attempt < self.settings.retries
                        && !matches!(e, FetchError::NotAllowed(_)) =>
                {
                    attempt += 1;
                    let base = self
                        .settings
                        .retry_backoff_ms
                        .saturating_mul(1 << (attempt - 1).min(10));
                    let jitter = random_below(base / 2 + 1);
                    tokio::time::sleep(Duration::from_millis(base + jitter)).await;
                }
                Err(e) => {
                    // A refused destination says nothing about the upstream.
                    let refused = matches!(e, FetchError::NotAllowed(_));
                    self.leave_circuit((!refused).then_some(false));
                    return Err(e);
                }
            }
        }
    }

    /// The client for `url`'s port, after checking `url` as the configured
    /// URL was checked: every URL derived from an upstream's documents (a
    /// WMTS `ResourceURL`, a KVP `href`) passes here before it is asked.
    fn client_for(&self, url: &reqwest::Url) -> Result<reqwest::Client, FetchError> {
        check_destination(url, &self.policy).map_err(FetchError::NotAllowed)?;
        let port = url.port_or_known_default().unwrap_or(80);
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = clients.get(&port) {
            return Ok(client.clone());
        }
        if clients.len() >= MOST_PORTS {
            return Err(FetchError::NotAllowed(format!(
                "{}: the upstream's documents name more than {MOST_PORTS} ports",
                redacted(url)
            )));
        }
        let client =
            build_client(&self.settings, &self.policy, port).map_err(FetchError::Failed)?;
        clients.insert(port, client.clone());
        Ok(client)
    }

    async fn ask_once(&self, url: reqwest::Url, ask: &Ask) -> Result<Fetched, FetchError> {
        let client = self.client_for(&url)?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| FetchError::Failed("the client is closed".into()))?;
        let (mut request, range) = match ask {
            Ask::Get(range) => (client.get(url.clone()), *range),
            Ask::Post(body) => (
                client
                    .post(url.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone()),
                None,
            ),
        };
        request = request.headers(self.headers.clone());
        if let Some((user, password)) = &self.basic_auth {
            request = request.basic_auth(user, Some(password));
        }
        if let Some((offset, len)) = range {
            let last = offset.saturating_add(len.max(1)) - 1;
            request = request.header(reqwest::header::RANGE, format!("bytes={offset}-{last}"));
        }
        let response = request.send().await.map_err(|e| describe(&url, &e))?;
        let status = response.status().as_u16();
        let etag = response
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        let body = read_capped(response, self.settings.max_body_bytes)
            .await
            .map_err(|e| match e {
                CappedReadError::TooLarge => FetchError::Failed(format!(
                    "{url} answered more than http.max_body_bytes ({})",
                    self.settings.max_body_bytes
                )),
                CappedReadError::Transport(e) => describe(&url, &e),
            })?;
        if status >= 500 {
            return Err(FetchError::Failed(format!(
                "{} answered {status}: {}",
                redacted(&url),
                excerpt(&body)
            )));
        }
        let mut body = Bytes::from(body);
        let mut status = status;
        if let Some((offset, len)) = range {
            match status {
                // The whole body: the range is cut from it.
                200 => {
                    let start = usize::try_from(offset)
                        .unwrap_or(usize::MAX)
                        .min(body.len());
                    let end = usize::try_from(offset.saturating_add(len))
                        .unwrap_or(usize::MAX)
                        .min(body.len());
                    body = body.slice(start..end);
                    status = 206;
                }
                // Past the end: no bytes.
                416 => {
                    body = Bytes::new();
                    status = 206;
                }
                _ => {}
            }
        }
        Ok(Fetched {
            status,
            content_type,
            body,
            etag,
        })
    }

    /// Fails at once while the circuit is open; lets one trial request
    /// through once the open period is over.
    fn enter_circuit(&self) -> Result<(), FetchError> {
        let mut c = self.circuit.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(until) = c.open_until {
            let now = Instant::now();
            if now < until || c.trial {
                let left = until
                    .saturating_duration_since(now)
                    .as_secs_f64()
                    .ceil()
                    .max(1.0);
                return Err(FetchError::CircuitOpen {
                    failures: c.failures,
                    retry_after_secs: left as u64,
                });
            }
            c.trial = true;
        }
        Ok(())
    }

    /// Records the outcome: `Some(true)` a success (closes the circuit),
    /// `Some(false)` a failure, `None` no verdict (cancelled).
    fn leave_circuit(&self, ok: Option<bool>) {
        let mut c = self.circuit.lock().unwrap_or_else(PoisonError::into_inner);
        let was_trial = std::mem::take(&mut c.trial);
        match ok {
            Some(true) => *c = Circuit::default(),
            Some(false) => {
                c.failures += 1;
                if was_trial || c.failures >= self.settings.circuit_failures {
                    c.open_until = Some(
                        Instant::now() + Duration::from_secs_f64(self.settings.circuit_open_secs),
                    );
                }
            }
            None => {}
        }
    }
}

/// The URL without its query's credentials-looking values, for messages.
pub fn redacted(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_password(None);
    u.set_query(None);
    u.to_string()
}

/// Why [`read_capped`] gave up.
#[derive(Debug)]
pub enum CappedReadError {
    /// The body (declared or as read) is longer than the cap.
    TooLarge,
    /// The transfer failed.
    Transport(reqwest::Error),
}

/// The body of `response`, read chunk by chunk and refused as soon as it
/// would pass `cap` bytes (a declared `Content-Length` over it is refused
/// before anything is read), so that no answer costs more memory than its
/// cap. The one bounded read of every HTTP body tessera fetches.
pub async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, CappedReadError> {
    if response
        .content_length()
        .is_some_and(|len| len > cap as u64)
    {
        return Err(CappedReadError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(CappedReadError::Transport)? {
        if body.len() + chunk.len() > cap {
            return Err(CappedReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn describe(url: &reqwest::Url, e: &reqwest::Error) -> FetchError {
    let what = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "could not be connected to".to_string()
    } else {
        "failed".to_string()
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.contains("private addresses") {
        return FetchError::NotAllowed(format!("{}: {cause}", redacted(url)));
    }
    FetchError::Failed(format!(
        "{} {what}: {}",
        redacted(url),
        if cause.is_empty() {
            e.to_string()
        } else {
            cause
        }
    ))
}

fn random_below(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    h.finish() % n.max(1)
}
