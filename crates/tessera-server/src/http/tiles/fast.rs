//! The short way for the request a tile cache answers most: a `GET` of an
//! XYZ, TMS or OGC API (`?f=` or an `Accept` of one type naming its
//! format) raster tile that the
//! layer's store holds and can answer without blocking (its memory LRU, or
//! a file in the page cache).
//!
//! It skips the router's matching, path captures and middleware stack but
//! answers exactly what the router would: the headers of
//! [`super::serve_tile`], the read endpoints' CORS headers (when they do
//! not depend on the request's `Origin`), the request metrics and the
//! access-log line (conditional requests get their 304 here too).
//! Everything else (a miss, a vector tile, `HEAD`, a path with
//! percent-escapes, CORS by a list of origins) goes to the router.

use axum::extract::FromRef;
use axum::http::{HeaderName, HeaderValue, Method, Request, StatusCode, header};
use axum::response::Response;
use tessera_grid::TileFormat;
use tessera_store::{HeldFile, Peeked};

use super::address::{TileAddress, query_params};
use super::tile_response;
use crate::config::auth::Grant;
use crate::http::AppState;
use crate::http::guard::{CallerId, Guard};
use crate::http::state::{Requests, Tiles};
use crate::http::transport::access::Record;
use crate::http::transport::cors;
use crate::http::transport::sendfile::FileBodies;
use crate::tile_cache::{CacheStatus, Tile};

/// What the short way needs, taken once per router: the tile endpoints'
/// state, the request counting's, and the read endpoints' CORS headers.
#[derive(Debug, Clone)]
pub struct FastTiles {
    tiles: Tiles,
    requests: Requests,
    /// The CORS headers of every read, or `None` when they depend on the
    /// request (the short way is then off).
    cors: Option<Vec<(HeaderName, HeaderValue)>>,
    /// The access rules (the router's guard, asked here the same way).
    guard: Guard,
}

impl FastTiles {
    /// The short way for `state`'s configuration.
    pub fn new(state: &AppState) -> FastTiles {
        FastTiles {
            tiles: Tiles::from_ref(state),
            requests: Requests::from_ref(state),
            cors: cors::fixed_read_headers(&state.service.config.server.cors),
            guard: Guard::from_ref(state),
        }
    }

    /// The response when `request` is a tile hit the short way can answer,
    /// else `None` (nothing was counted; the router serves it).
    ///
    /// With `files`, the connection's queue of file bodies, a tile kept as
    /// a file the page cache holds is answered with the file itself (sent
    /// by `sendfile`, see [`crate::http::transport::sendfile`]) instead of its bytes.
    pub fn serve<B>(&self, request: &Request<B>, files: Option<&FileBodies>) -> Option<Response> {
        let cors = self.cors.as_ref()?;
        if request.method() != Method::GET {
            return None;
        }
        let (address, rows, ogcapi) = match TileAddress::from_tile_path(request.uri().path()) {
            Some((mut address, rows)) => {
                address.params = query_params(request.uri().query());
                (address, rows, false)
            }
            None => (
                crate::http::ogcapi::fast_address(
                    request.uri().path(),
                    request.uri().query(),
                    request
                        .headers()
                        .get(header::ACCEPT)
                        .and_then(|a| a.to_str().ok())
                        .filter(|a| !a.contains(',')),
                )?,
                super::address::Rows::FromTop,
                true,
            ),
        };
        let record = Record::begin(&self.requests, request.method(), request.uri());
        let tile = address
            .resolve(&self.tiles.registry, rows, &|_| false)
            .ok()?;
        if tile.format.is_vector() {
            return None;
        }
        // A caller the router would refuse is left to it (it says why).
        let caller = match &self.guard.access {
            None => None,
            Some(access) => {
                // An address held back for bad credentials is the
                // router's to refuse.
                if let Some(address) = request.extensions().get::<crate::http::guard::ClientAddr>()
                {
                    access.admit_address(address.0).ok()?;
                }
                let caller = access
                    .identify(request.headers(), request.uri().query())
                    .ok()?;
                caller.may(&tile.layer.name, Grant::Tiles).ok()?;
                Some(caller)
            }
        };
        // A mixed-format tile's media type is read from its bytes.
        let (found, file) = match files {
            Some(_) if tile.format != TileFormat::Mixed => {
                match self.tiles.cache.peek_hit_file(&tile)? {
                    Peeked::Held(held) => (Tile::hit(held), None),
                    Peeked::File(held) => match FileBodies::stand_in(held.len) {
                        Some(stand_in) => (file_hit(&held, stand_in), Some(held)),
                        // Too large for a stand-in: its cached pages are read
                        // here.
                        None => {
                            let bytes = read_whole(&held).ok()?;
                            (file_hit(&held, bytes), None)
                        }
                    },
                }
            }
            _ => (self.tiles.cache.peek_hit(&tile)?, None),
        };
        if let Some(caller) = &caller {
            caller.admit().ok()?;
        }
        // Counted only now: a request refused for its rate is no hit.
        self.tiles.cache.count_hit(&tile.layer.name);
        let private = caller
            .as_ref()
            .is_some_and(|c| c.protects(&tile.layer.name));
        let mut response = tile_response(tile, found, request.headers(), private).ok()?;
        let length = axum::body::HttpBody::size_hint(response.body()).exact();
        let headers = response.headers_mut();
        if let Some(length) = length {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        }
        for (name, value) in cors {
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(header::X_CONTENT_TYPE_OPTIONS, crate::http::NOSNIFF);
        if ogcapi {
            crate::http::ogcapi::vary_on_accept(&mut response);
        }
        if let Some(caller) = &caller {
            crate::http::guard::count(&self.guard.metrics, caller, &response);
            response
                .extensions_mut()
                .insert(CallerId(caller.id().to_string()));
        }
        record.finish(&self.requests, &response);
        // Last, when nothing can fail any more: the file waits for the
        // stand-in body that only a 200 carries (a 304 has none).
        if let (Some(files), Some(held)) = (files, file)
            && response.status() == StatusCode::OK
        {
            files.queue(held.file, held.len);
            self.requests.metrics.file_sent();
        }
        Some(response)
    }
}

/// The hit on the tile in `held`, answered with `bytes`.
fn file_hit(held: &HeldFile, bytes: bytes::Bytes) -> Tile {
    Tile {
        bytes,
        hash: held.hash,
        status: CacheStatus::Hit,
        stored_at: held.stored_at,
        partial: None,
    }
}

/// The whole of `held`'s file, read at its offsets (the open file may be
/// shared with other hits).
fn read_whole(held: &HeldFile) -> std::io::Result<bytes::Bytes> {
    let len = usize::try_from(held.len).map_err(std::io::Error::other)?;
    let mut data = vec![0; len];
    std::os::unix::fs::FileExt::read_exact_at(&*held.file, &mut data, 0)?;
    Ok(data.into())
}
