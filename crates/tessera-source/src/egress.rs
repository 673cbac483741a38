//! The egress guard: every HTTP request GDAL makes passes through a small
//! forward proxy on loopback that checks where it goes.
//!
//! [`check_location`](crate::check_location) checks the URLs written in a
//! source, but GDAL (libcurl) follows redirects on its own, and a host name
//! may resolve to another address by the time GDAL connects. With
//! `GDAL_HTTP_PROXY` pointing here, each request (the first one, every
//! redirect, every range read) reaches this proxy, which resolves the host
//! itself, refuses loopback, link-local and private addresses (unless the
//! host is listed in `gdal.allowed_private_hosts`), and connects to the very
//! address it checked. HTTPS goes through as a `CONNECT` tunnel (TLS stays
//! end to end); plain HTTP is forwarded one request at a time.
//!
//! The proxy runs on a thread of its own with a single-threaded runtime,
//! started once per process; [`guard`] updates its policy. It answers only
//! clients that send its per-process credentials (GDAL does, through
//! `GDAL_HTTP_PROXYUSERPWD`), so other local programs cannot use it as an
//! open proxy.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use crate::location::{host_is_allowed, is_public};

/// What the guard lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Hosts (`name` or `name:port`) that may be reached even though they
    /// resolve to a private address.
    pub allowed_private_hosts: Vec<String>,
    /// Longest wait for a connection to the destination.
    pub connect_timeout: Duration,
}

type Body = Either<Incoming, Full<Bytes>>;

struct Guard {
    address: SocketAddr,
    credentials: String,
    policy: Arc<RwLock<EgressPolicy>>,
}

/// Where the guard listens, and the `user:password` clients must send.
#[derive(Debug, Clone)]
pub struct GuardAddress {
    /// Loopback address of the proxy.
    pub address: SocketAddr,
    /// `user:password` for `GDAL_HTTP_PROXYUSERPWD` (basic auth).
    pub credentials: String,
}

static GUARD: OnceLock<Guard> = OnceLock::new();

/// Starts the guard (once per process) or updates its policy, and returns
/// the loopback address and credentials to hand GDAL as its HTTP proxy.
pub fn guard(policy: EgressPolicy) -> std::io::Result<GuardAddress> {
    if let Some(g) = GUARD.get() {
        if let Ok(mut p) = g.policy.write() {
            *p = policy;
        }
        return Ok(GuardAddress {
            address: g.address,
            credentials: g.credentials.clone(),
        });
    }
    let credentials = format!("tessera:{:016x}{:016x}", random_u64(), random_u64());
    let expected = HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(&credentials)))
        .map_err(std::io::Error::other)?;
    let std_listener = std::net::TcpListener::bind((IpAddr::from([127, 0, 0, 1]), 0))?;
    std_listener.set_nonblocking(true)?;
    let address = std_listener.local_addr()?;
    let shared = Arc::new(RwLock::new(policy));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let serving = shared.clone();
    std::thread::Builder::new()
        .name("tessera-egress".into())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(std_listener) {
                    Ok(listener) => serve(listener, serving, expected).await,
                    Err(e) => tracing::error!(
                        error = &e as &dyn std::error::Error,
                        "the egress guard cannot listen"
                    ),
                }
            });
        })?;
    let g = GUARD.get_or_init(|| Guard {
        address,
        credentials,
        policy: shared,
    });
    Ok(GuardAddress {
        address: g.address,
        credentials: g.credentials.clone(),
    })
}

/// 64 bits from the process's randomly seeded hasher keys.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

async fn serve(listener: TcpListener, policy: Arc<RwLock<EgressPolicy>>, expected: HeaderValue) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let policy = policy.clone();
        let expected = expected.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let authorized = req.headers().get(header::PROXY_AUTHORIZATION) == Some(&expected);
                let policy = policy.read().ok().map(|p| p.clone());
                async move {
                    Ok::<_, std::convert::Infallible>(match policy {
                        _ if !authorized => unauthorized(),
                        Some(policy) => handle(req, &policy).await,
                        None => refusal(StatusCode::INTERNAL_SERVER_ERROR, "policy unavailable"),
                    })
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

/// A reply from the guard itself, with the reason as its body.
fn refusal(status: StatusCode, reason: &str) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(format!(
        "tessera egress guard: {reason}\n"
    )))));
    *response.status_mut() = status;
    response
}

/// 407: the client did not send the guard's credentials.
fn unauthorized() -> Response<Body> {
    let mut response = refusal(
        StatusCode::PROXY_AUTHENTICATION_REQUIRED,
        "this proxy serves tessera's GDAL only",
    );
    response.headers_mut().insert(
        header::PROXY_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"tessera\""),
    );
    response
}

async fn handle(req: Request<Incoming>, policy: &EgressPolicy) -> Response<Body> {
    let Some((host, port)) = destination(req.uri(), req.method()) else {
        return refusal(
            StatusCode::BAD_REQUEST,
            "no destination host in the request",
        );
    };
    let stream = match connect(&host, port, policy).await {
        Ok(s) => s,
        Err(Refused(reason)) => {
            tracing::warn!(host, port, reason, "refused a request GDAL made");
            return refusal(StatusCode::FORBIDDEN, &reason);
        }
    };
    if req.method() == Method::CONNECT {
        tunnel(req, stream)
    } else {
        forward(req, stream, &host, port).await
    }
}

/// The host and port a proxied request is for.
fn destination(uri: &Uri, method: &Method) -> Option<(String, u16)> {
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let default_port = if method == Method::CONNECT || uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    Some((host.to_string(), uri.port_u16().unwrap_or(default_port)))
}

struct Refused(String);

/// Resolves `host` once, checks every address, and connects to a checked
/// one: what is checked is what is reached.
async fn connect(host: &str, port: u16, policy: &EgressPolicy) -> Result<TcpStream, Refused> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Refused(format!("cannot resolve {host}: {e}")))?
        .collect();
    if !host_is_allowed(host, port, &policy.allowed_private_hosts)
        && let Some(bad) = addresses.iter().find(|a| !is_public(&a.ip()))
    {
        return Err(Refused(format!(
            "{host} resolves to {}, a loopback, link-local or private address \
             (list the host in gdal.allowed_private_hosts, or set \
             gdal.allow_private_network: true)",
            bad.ip()
        )));
    }
    let mut last = format!("{host} has no address");
    for address in addresses {
        match tokio::time::timeout(policy.connect_timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("cannot connect to {address}: {e}"),
            Err(_) => last = format!("connecting to {address} timed out"),
        }
    }
    Err(Refused(last))
}

/// Answers a `CONNECT` with 200 and copies bytes both ways once the client
/// takes over the connection.
fn tunnel(req: Request<Incoming>, mut upstream: TcpStream) -> Response<Body> {
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
            Err(e) => tracing::debug!(
                error = &e as &dyn std::error::Error,
                "tunnel not taken over"
            ),
        }
    });
    Response::new(Either::Right(Full::new(Bytes::new())))
}

/// Sends one plain-HTTP request on to the destination over `upstream`.
async fn forward(
    req: Request<Incoming>,
    upstream: TcpStream,
    host: &str,
    port: u16,
) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    parts.uri = match parts.uri.path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    };
    parts.headers.remove("proxy-connection");
    parts.headers.remove(header::PROXY_AUTHORIZATION);
    if !parts.headers.contains_key(header::HOST) {
        let value = if port == 80 {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
            parts.headers.insert(header::HOST, v);
        }
    }
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return refusal(StatusCode::BAD_GATEWAY, &format!("{host}: {e}")),
        };
    tokio::spawn(connection);
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => response.map(Either::Left),
        Err(e) => refusal(StatusCode::BAD_GATEWAY, &format!("{host}: {e}")),
    }
}
