//! Tiles of a source whose data changes (a STAC catalogue) are cached
//! under its state over their metatile: the layer key gains
//! `~items=<hash>` of [`tessera_source::Source::state`] over the metatile's
//! render area, so a new or changed item makes the metatiles it covers
//! new keys (rendered again) and leaves every other cached tile alone.

use std::sync::Arc;

use tessera_grid::TileCoord;

use super::{TileError, TileRequest, run_blocking};
use crate::metatile::Metatile;
use crate::model::{Grid, Layer, LayerCache};
use crate::render::RenderError;

/// Whether `layer`'s tiles are keyed by its source's state: then the
/// request's own key is never stored, and a peek at it must not answer.
pub fn keyed_by_state(layer: &Layer) -> bool {
    layer.source.changes_while_open()
}

/// `layer` as its tiles in the metatile of `coord` are cached now: the
/// layer itself when its source's data does not change, else a copy whose
/// cache key names the source's state over that metatile (one blocking
/// query, off the runtime).
pub async fn layer_at_state(
    layer: &Arc<Layer>,
    grid: &Grid,
    cache: &LayerCache,
    coord: TileCoord,
) -> Result<Arc<Layer>, TileError> {
    if !keyed_by_state(layer) {
        return Ok(layer.clone());
    }
    let meta = Metatile::containing(&grid.tms, coord, cache.metatile);
    let bbox = meta.render_bbox(&grid.tms);
    let (source, crs) = (layer.source.clone(), grid.crs.clone());
    let state = run_blocking(move || source.state(&bbox, &crs).transpose()).await?;
    let Some(state) = state.map_err(RenderError::Source)? else {
        return Ok(layer.clone());
    };
    Ok(Arc::new(Layer {
        cache_key: state_key(&layer.cache_key, &state),
        ..Layer::clone(layer)
    }))
}

/// `req` with its layer at the state of its tile's metatile
/// ([`layer_at_state`]).
pub async fn at_state(req: &TileRequest, cache: &LayerCache) -> Result<TileRequest, TileError> {
    Ok(TileRequest {
        layer: layer_at_state(&req.layer, &req.grid, cache, req.coord).await?,
        ..req.clone()
    })
}

/// The layer key `base` at source state `state`: 64 bits of its hash, in
/// hex (the state itself can be long: every item's id).
fn state_key(base: &str, state: &str) -> String {
    let hash = tessera_store::content_hash(state.as_bytes());
    format!("{}{:016x}", state_prefix(base), hash as u64)
}

/// What every key of layer key `base` at some state of its source starts
/// with (truncation lists them, past states included).
pub fn state_prefix(base: &str) -> String {
    format!("{base}~items=")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_key_apart_and_stay_under_the_layer() {
        let a = state_key("scenes", "s1@100,s2@101");
        let b = state_key("scenes", "s1@100,s2@102");
        assert_ne!(a, b);
        assert_eq!(a, state_key("scenes", "s1@100,s2@101"));
        assert!(tessera_store::quota::is_key_of(&a, "scenes"));
        assert_eq!(a.len(), "scenes~items=".len() + 16);
    }
}
