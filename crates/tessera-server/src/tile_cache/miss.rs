//! The miss path: under the metatile and tile locks, render the metatile
//! once, cut and encode the requested tile on the request path, and save
//! its siblings on the encode pool (or in one batch).

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use tessera_grid::{TileCoord, TileFormat};
use tessera_image::{EncodeOptions, ImageView, RgbaImage, encode};
use tessera_store::{Durability, HeldTile, MemoryStore, StoreError, TileKey, TileStore};

use super::lease::Leased;
use super::types::miss;
use super::{BACKGROUND, Tile, TileCache, TileError, TileRequest, put_or_keep, run_blocking};
use crate::cluster::LeaseHolder;
use crate::encode_pool::Job;
use crate::locks::KeyGuard;
use crate::metatile::Metatile;
use crate::metrics::Metrics;
use crate::model::{Grid, LayerCache};
use crate::render::RenderError;
use tessera_source::partial::Partial;

/// A sibling tile whose lock is held until it is saved (and, with leases,
/// the metatile's lease, deleted when the last of its tiles is saved).
pub(super) struct Owned {
    pub(super) coord: TileCoord,
    pub(super) key: TileKey,
    pub(super) guard: KeyGuard<TileKey>,
    pub(super) lease: Option<Arc<LeaseHolder>>,
}

/// A metatile's encoded tiles, and the store's verdict on saving them (a
/// seed fails on it, a request still answers with its tile).
type Saved = (Vec<(TileCoord, Bytes)>, Result<(), StoreError>);

/// Encodes a metatile's tiles and stores them in one `put_many`, then
/// releases their locks (and lease): the seeding path, and the serving path
/// for stores that prefer batches.
pub(super) struct BatchSaver {
    pub(super) metrics: Arc<Metrics>,
    pub(super) layer: String,
    pub(super) unsaved: Arc<MemoryStore>,
    pub(super) store: Arc<dyn TileStore>,
    pub(super) durability: Durability,
}

impl BatchSaver {
    /// Encodes `tiles` (`known`: one tile already encoded) and stores them;
    /// returns the encoded tiles and the store's verdict. A failed write
    /// keeps the tiles in memory before their locks go (see `save_job`).
    pub(super) fn save(
        &self,
        cutter: &Cutter,
        tiles: Vec<Owned>,
        known: Option<&(TileCoord, Bytes)>,
    ) -> Result<Saved, TileError> {
        let (batch, encoded, guards) = self.encode(cutter, tiles, known)?;
        let stored = self.store.put_many(batch.clone(), self.durability);
        if stored.is_err() {
            let _ = self.unsaved.put_many(batch, Durability::Buffered);
        }
        drop(guards);
        Ok((encoded, stored))
    }

    /// Encodes `tiles` (`known`: one tile already encoded): the batch to
    /// store, the tiles by coordinate, and the locks (and leases) to
    /// release once they are stored.
    #[allow(clippy::type_complexity)] // three plain parts of one step
    pub(super) fn encode(
        &self,
        cutter: &Cutter,
        tiles: Vec<Owned>,
        known: Option<&(TileCoord, Bytes)>,
    ) -> Result<
        (
            Vec<(TileKey, Bytes)>,
            Vec<(TileCoord, Bytes)>,
            Vec<(KeyGuard<TileKey>, Option<Arc<LeaseHolder>>)>,
        ),
        TileError,
    > {
        let mut batch = Vec::with_capacity(tiles.len());
        let mut encoded = Vec::with_capacity(tiles.len());
        let mut guards = Vec::with_capacity(tiles.len());
        let mut made = 0;
        for Owned {
            coord,
            key,
            guard,
            lease,
        } in tiles
        {
            let bytes = match known {
                Some((c, b)) if *c == coord => b.clone(),
                _ => {
                    made += 1;
                    cutter.encode(coord)?
                }
            };
            batch.push((key, bytes.clone()));
            encoded.push((coord, bytes));
            guards.push((guard, lease));
        }
        self.metrics.tiles_encoded(&self.layer, made);
        Ok((batch, encoded, guards))
    }
}

/// Everything a pool job needs to cut, encode and save tiles.
#[derive(Clone)]
pub(super) struct Cutter {
    image: Arc<RgbaImage>,
    /// The limit the source stopped at, when it drew from part of its data.
    pub(super) partial: Option<Partial>,
    meta: Metatile,
    grid: Arc<Grid>,
    format: TileFormat,
    encoding: EncodeOptions,
}

impl Cutter {
    fn view(&self, coord: TileCoord) -> ImageView<'_> {
        let tms = &self.grid.tms;
        let (x, y) = self.meta.pixel_offset(tms, coord);
        self.image
            .sub_view(x, y, tms.tile_width, tms.tile_height)
            .expect("a metatile's tiles lie inside its image")
    }

    pub(super) fn encode(&self, coord: TileCoord) -> Result<Bytes, RenderError> {
        Ok(Bytes::from(encode(
            self.view(coord),
            self.format,
            &self.encoding,
            BACKGROUND,
        )?))
    }
}

pub(super) async fn get_cached(
    tile_cache: &TileCache,
    req: &TileRequest,
    cache: &LayerCache,
) -> Result<Tile, TileError> {
    let key = req.key_of(req.coord);
    let fresh = |held: &HeldTile| cache.freshness.is_fresh(held.stored_at, SystemTime::now());
    if let Some(held) = super::lookup::lookup(tile_cache, &cache.store, &key).await
        && fresh(&held)
    {
        return Ok(Tile::hit(held));
    }
    if req.layer.passthrough
        && let Some(tile) = super::passthrough::pass_through(tile_cache, req, cache, &key).await?
    {
        return Ok(tile);
    }
    let meta = Metatile::containing(&req.grid.tms, req.coord, cache.metatile);
    let meta_guard = super::lookup::lock_metatile(tile_cache, req, &meta).await?;
    let own_guard = super::lookup::lock_tile(tile_cache, key.clone()).await?;
    // A stale tile is rendered again, like a missing one.
    if let Some(held) = super::lookup::lookup(tile_cache, &cache.store, &key).await
        && fresh(&held)
    {
        return Ok(Tile::hit(held));
    }
    let lease = match super::lease::lease(tile_cache, req, cache, &meta, Some(&key)).await? {
        Leased::Render(lease) => lease,
        Leased::Stored(held) => {
            // Another node stored the metatile: its other tiles are
            // read once (one GET per pack) into this node's memory, so
            // the requests that follow for them are hits.
            let keys: Vec<TileKey> = meta
                .tiles(&req.grid.tms)
                .filter(|c| *c != req.coord)
                .map(|c| req.key_of(c))
                .collect();
            let store = cache.store.clone();
            let _ = run_blocking(move || store.get_many(&keys)).await;
            return Ok(Tile::hit(held));
        }
    };
    let cutter = render_metatile(tile_cache, req, meta).await?;
    if let Some(partial) = cutter.partial.filter(|p| !p.lasts()) {
        // Drawn from what could be read in time: answered, not stored, so
        // a later request reads again.
        drop((meta_guard, own_guard, lease));
        let coord = req.coord;
        let bytes = run_blocking(move || cutter.encode(coord)).await??;
        return Ok(Tile {
            partial: Some(partial),
            ..miss(bytes)
        });
    }
    let partial = cutter.partial;
    let mut siblings = Vec::with_capacity(meta.tiles(&req.grid.tms).count());
    for coord in meta.tiles(&req.grid.tms) {
        if coord != req.coord {
            let key = req.key_of(coord);
            let guard = super::lookup::lock_tile(tile_cache, key.clone()).await?;
            siblings.push(Owned {
                coord,
                key,
                guard,
                lease: lease.clone(),
            });
        }
    }
    drop(meta_guard);
    siblings.push(Owned {
        coord: req.coord,
        key,
        guard: own_guard,
        lease,
    });

    if tile_cache.pool.threads() == 0 {
        let (encoded, stored) = encode_and_store(
            tile_cache,
            &req.layer.name,
            cutter,
            siblings,
            cache.store.clone(),
            cache.durability,
        )
        .await?;
        if let Err(e) = stored
            && let Some(held_back) = tile_cache.warnings.allow()
        {
            tracing::warn!(tile = %req.key_of(req.coord), error = &e as &dyn std::error::Error, held_back, "saving a metatile failed; its tiles are kept in memory");
        }
        let own = encoded.into_iter().find(|(c, _)| *c == req.coord);
        return Ok(Tile {
            partial,
            ..miss(
                own.map(|(_, b)| b)
                    .expect("the requested tile is in its metatile"),
            )
        });
    }

    let own = siblings.pop().expect("the requested tile was pushed last");
    let own_bytes = {
        let cutter = cutter.clone();
        let coord = own.coord;
        run_blocking(move || cutter.encode(coord)).await??
    };
    tile_cache.metrics.tiles_encoded(&req.layer.name, 1);

    let mut leftovers: Vec<Job> = Vec::new();
    let mut submit = |job: Job| {
        if let Err(job) = tile_cache.pool.try_submit(job) {
            leftovers.push(job);
        }
    };
    if cache.store.prefers_batches() {
        // One write for the metatile (tiles grouped in objects: one PUT
        // instead of a conditional merge per tile).
        let saver = BatchSaver {
            metrics: tile_cache.metrics.clone(),
            layer: req.layer.name.clone(),
            unsaved: tile_cache.unsaved.clone(),
            store: cache.store.clone(),
            durability: cache.durability,
        };
        let (warnings, first) = (tile_cache.warnings.clone(), req.key_of(req.coord));
        let known = Some((own.coord, own_bytes.clone()));
        let cutter = cutter.clone();
        let mut tiles = siblings;
        tiles.push(own);
        submit(Box::new(move || {
            match saver.save(&cutter, tiles, known.as_ref()) {
                Ok((_, Ok(()))) => {}
                Ok((_, Err(e))) => {
                    if let Some(held_back) = warnings.allow() {
                        tracing::warn!(tile = %first, error = &e as &dyn std::error::Error, held_back, "saving a metatile failed; its tiles are kept in memory");
                    }
                }
                Err(e) => {
                    if let Some(held_back) = warnings.allow() {
                        tracing::warn!(tile = %first, error = &e as &dyn std::error::Error, held_back, "encoding a metatile's tiles failed");
                    }
                }
            }
        }));
    } else {
        submit(save_job(
            tile_cache,
            cache,
            own,
            Some(own_bytes.clone()),
            &cutter,
            req,
        ));
        for sibling in siblings {
            submit(save_job(tile_cache, cache, sibling, None, &cutter, req));
        }
    }
    if !leftovers.is_empty() {
        // The pool is saturated: this request does the work itself.
        run_blocking(move || leftovers.into_iter().for_each(|job| job())).await?;
    }
    Ok(Tile {
        partial,
        ..miss(own_bytes)
    })
}

pub(super) async fn render_metatile(
    tile_cache: &TileCache,
    req: &TileRequest,
    meta: Metatile,
) -> Result<Cutter, TileError> {
    let tms = &req.grid.tms;
    let (image, partial) = tile_cache
        .renderer
        .render_image(
            req.layer.clone(),
            req.layer.style_for(req.format),
            meta.render_bbox(tms),
            req.grid.crs.clone(),
            meta.render_size(tms),
            meta.tile_rows(tms),
        )
        .await?;
    tile_cache.metrics.metatile_rendered(&req.layer.name);
    Ok(Cutter {
        image: Arc::new(image),
        partial,
        meta,
        grid: req.grid.clone(),
        format: req.format,
        encoding: *tile_cache.renderer.encoding(),
    })
}

/// Encodes every tile and stores them in one batch, then releases their
/// locks. Returns the encoded tiles, and the store's verdict separately:
/// a seed fails on it, a request still answers with its tile.
pub(super) async fn encode_and_store(
    tile_cache: &TileCache,
    layer: &str,
    cutter: Cutter,
    tiles: Vec<Owned>,
    store: Arc<dyn TileStore>,
    durability: Durability,
) -> Result<Saved, TileError> {
    let saver = BatchSaver {
        metrics: tile_cache.metrics.clone(),
        layer: layer.to_string(),
        unsaved: tile_cache.unsaved.clone(),
        store,
        durability,
    };
    run_blocking(move || saver.save(&cutter, tiles, None)).await?
}

/// A pool job that encodes (unless `bytes` is given) and saves one tile,
/// then releases its lock.
pub(super) fn save_job(
    tile_cache: &TileCache,
    cache: &LayerCache,
    tile: Owned,
    bytes: Option<Bytes>,
    cutter: &Cutter,
    req: &TileRequest,
) -> Job {
    let store = cache.store.clone();
    let durability = cache.durability;
    let cutter = cutter.clone();
    let metrics = tile_cache.metrics.clone();
    let layer = req.layer.name.clone();
    let (unsaved, warnings) = (tile_cache.unsaved.clone(), tile_cache.warnings.clone());
    Box::new(move || {
        let Owned {
            coord,
            key,
            guard,
            lease,
        } = tile;
        let bytes = match bytes {
            Some(b) => b,
            None => match cutter.encode(coord) {
                Ok(b) => {
                    metrics.tiles_encoded(&layer, 1);
                    b
                }
                Err(e) => {
                    if let Some(held_back) = warnings.allow() {
                        tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, held_back, "encoding a sibling tile failed");
                    }
                    return;
                }
            },
        };
        // Kept in memory before the lock goes if the store refuses it.
        put_or_keep(&*store, &unsaved, &warnings, &key, bytes, durability);
        drop(guard);
        drop(lease);
    })
}
