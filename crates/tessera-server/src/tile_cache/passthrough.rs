//! Tiles not cut from a metatile: a layer without a cache (rendered alone),
//! vector tiles (made one by one by the source), and tiles an upstream
//! tile service passes through unchanged.

use std::time::SystemTime;

use bytes::Bytes;
use tessera_grid::TileFormat;
use tessera_store::TileKey;

use super::types::miss;
use super::{Tile, TileCache, TileError, TileRequest, put_or_keep, run_blocking};
use crate::encode_pool::Job;
use crate::locks::KeyGuard;
use crate::model::LayerCache;
use crate::render::RenderError;

/// What [`tessera_source::Source::passthrough`] answers.
type Passed = Option<Result<Option<Bytes>, tessera_source::SourceError>>;

/// A tile of a layer without a cache: a vector tile or a tile the
/// source passes through as it has it (an archive's, an upstream's), or
/// rendered alone.
pub(super) async fn render_uncached(
    tile_cache: &TileCache,
    req: &TileRequest,
) -> Result<Tile, TileError> {
    if req.format.is_vector() {
        let bytes = vector_tile(tile_cache, req).await?;
        return Ok(miss(bytes));
    }
    if req.layer.passthrough && asks(req) {
        match source_tile(req).await? {
            Some(Ok(Some(bytes))) => return Ok(miss(bytes)),
            Some(Err(e)) => return Err(TileError::Render(RenderError::Source(e))),
            // None there: rendered alone (transparent).
            Some(Ok(None)) | None => {}
        }
    }
    render_alone(tile_cache, req).await
}

/// Whether the source may pass `req`'s tile through.
fn asks(req: &TileRequest) -> bool {
    req.layer
        .source
        .may_pass_through(&req.grid.tms, req.coord.z(), req.format)
}

/// The source's own tile for `req` (its `passthrough`): read on this
/// thread when the source reads only local files and they are in the
/// page cache (a page-cache read costs less than a hand-off to a
/// blocking thread), on a blocking thread otherwise: a read that would
/// wait for the disk never holds this thread (a connection's).
async fn source_tile(req: &TileRequest) -> Result<Passed, RenderError> {
    let source = &req.layer.source;
    if source.passthrough_is_local()
        && let Some(read) = tessera_source::archive::without_waiting(|| {
            source.passthrough(&req.grid.tms, req.coord, req.format, None)
        })
    {
        return Ok(read);
    }
    let (source, tms, coord, format) =
        (source.clone(), req.grid.tms.clone(), req.coord, req.format);
    run_blocking(move || {
        let read = source.passthrough(&tms, coord, format, None);
        // A read that joined one tried without waiting (a directory
        // both needed) took its refusal: read again, waiting.
        match &read {
            Some(Err(e))
                if tessera_source::error_chain(e)
                    .contains(tessera_source::archive::WOULD_WAIT_MESSAGE) =>
            {
                source.passthrough(&tms, coord, format, None)
            }
            _ => read,
        }
    })
    .await
}

/// A raster tile rendered alone, not cut from a metatile, with the limit
/// its source stopped at, if any; counted as a render.
async fn render_alone(tile_cache: &TileCache, req: &TileRequest) -> Result<Tile, TileError> {
    let (bytes, partial) = super::alone::read_alone(&tile_cache.renderer, req).await?;
    tile_cache.metrics.metatile_rendered(&req.layer.name);
    tile_cache.metrics.tiles_encoded(&req.layer.name, 1);
    Ok(Tile {
        partial,
        ..miss(bytes)
    })
}

/// A vector tile made by the layer's source (on a blocking thread); a
/// MapLibre Tile is made from the source's MVT of the same tile (see
/// [`crate::mlt`]), on a blocking thread too.
pub(super) async fn vector_tile(
    tile_cache: &TileCache,
    req: &TileRequest,
) -> Result<Bytes, TileError> {
    if req.format == TileFormat::Mlt {
        let mvt = TileRequest {
            format: TileFormat::Mvt,
            ..req.clone()
        };
        let bytes = made_vector_tile(tile_cache, &mvt).await?;
        let layer = req.layer.name.clone();
        return run_blocking(move || crate::mlt::from_mvt(&bytes))
            .await?
            .map_err(|e| {
                TileError::Render(RenderError::Source(tessera_source::SourceError::Read {
                    path: layer,
                    source: Box::new(e),
                }))
            });
    }
    made_vector_tile(tile_cache, req).await
}

/// The source's own vector tile for `req`: [`tessera_grid::EMPTY_MVT`]
/// when no feature reaches it.
async fn made_vector_tile(tile_cache: &TileCache, req: &TileRequest) -> Result<Bytes, TileError> {
    let made = source_tile(req).await?;
    let bytes = made
        .ok_or_else(|| {
            TileError::Render(RenderError::Source(tessera_source::SourceError::Read {
                path: req.layer.name.clone(),
                source: "the layer's source does not make vector tiles".into(),
            }))
        })?
        .map_err(|e| TileError::Render(RenderError::Source(e)))?;
    tile_cache.metrics.metatile_rendered(&req.layer.name);
    tile_cache.metrics.tiles_encoded(&req.layer.name, 1);
    Ok(bytes.unwrap_or_else(|| Bytes::from_static(tessera_grid::EMPTY_MVT)))
}

/// Serves the source's own tile when it passes tiles through for this
/// grid and format (an upstream tile service with the same tiles, a
/// COG's blocks): one tile, under the tile lock only, stored as it came;
/// or, where the tile is the source's own pixels
/// ([`tessera_source::Source::own_pixels`]), renders it alone. `None`
/// when the source can do neither; a tile the upstream lacks is rendered
/// alone (transparent) and stored.
pub(super) async fn pass_through(
    tile_cache: &TileCache,
    req: &TileRequest,
    cache: &LayerCache,
    key: &TileKey,
) -> Result<Option<Tile>, TileError> {
    let (asks, alone) = (
        asks(req),
        req.layer.source.own_pixels(&req.grid.tms, req.coord.z()),
    );
    if !asks && !alone && !req.format.is_vector() {
        return Ok(None);
    }
    let guard = super::lookup::lock_tile(tile_cache, key.clone()).await?;
    if let Some(held) = super::lookup::lookup(tile_cache, &cache.store, key).await
        && cache.freshness.is_fresh(held.stored_at, SystemTime::now())
    {
        return Ok(Some(Tile::hit(held)));
    }
    if req.format.is_vector() {
        let bytes = vector_tile(tile_cache, req).await?;
        save_passed(tile_cache, cache, key, bytes.clone(), guard).await?;
        return Ok(Some(miss(bytes)));
    }
    let fetched = if asks { source_tile(req).await? } else { None };
    let fetched_none = fetched.is_none();
    let tile = match fetched {
        None if !alone => return Ok(None),
        Some(Err(e)) => return Err(TileError::Render(RenderError::Source(e))),
        Some(Ok(Some(bytes))) => miss(bytes),
        // The source's own pixels, or a tile the upstream lacks.
        None | Some(Ok(None)) => render_alone(tile_cache, req).await?,
    };
    if tile.partial.is_some_and(|p| !p.lasts()) {
        // Drawn from what could be read in time: answered, not stored.
        return Ok(Some(tile));
    }
    save_passed(tile_cache, cache, key, tile.bytes.clone(), guard).await?;
    if alone && fetched_none {
        super::idle::read_siblings(tile_cache, req, cache);
    }
    Ok(Some(tile))
}

/// Stores a tile that was not cut from a metatile on the encode pool,
/// after the response (as a metatile's tiles are), releasing its lock
/// once stored, so a request for it meanwhile waits and finds it; on this
/// request's blocking thread when the pool is full. A failed write keeps
/// it in memory and is logged (throttled), as for metatiles.
pub(super) async fn save_passed(
    tile_cache: &TileCache,
    cache: &LayerCache,
    key: &TileKey,
    bytes: Bytes,
    guard: KeyGuard<TileKey>,
) -> Result<(), TileError> {
    let (store, k, b, durability) = (cache.store.clone(), key.clone(), bytes, cache.durability);
    let (unsaved, warnings) = (tile_cache.unsaved.clone(), tile_cache.warnings.clone());
    let job: Job = Box::new(move || {
        put_or_keep(&*store, &unsaved, &warnings, &k, b, durability);
        drop(guard);
    });
    if let Err(job) = tile_cache.pool.try_submit(job) {
        run_blocking(job).await?;
    }
    Ok(())
}
