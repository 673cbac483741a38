//! A tile read alone, under a render slot, not cut from a metatile: what
//! the pass-through path (`passthrough`) renders for a tile of its source's
//! own pixels and what the background reader (`idle`) reads for the rest of
//! that tile's metatile. Counts nothing; its callers do.

use bytes::Bytes;
use tessera_source::partial::Partial;

use super::{BACKGROUND, TileError, TileRequest};
use crate::render::{Demand, ImageRequest, Renderer};

/// Renders `req`'s tile alone under a render slot: its bytes and the limit
/// its source stopped at, if any. Counts nothing.
pub(super) async fn read_alone(
    renderer: &Renderer,
    req: &TileRequest,
) -> Result<(Bytes, Option<Partial>), TileError> {
    let tms = &req.grid.tms;
    Ok(renderer
        .render_partial(
            ImageRequest {
                layers: vec![req.layer.clone()],
                bbox: tms.tile_bbox(req.coord),
                crs: req.grid.crs.clone(),
                width: tms.tile_width,
                height: tms.tile_height,
                format: req.format,
                transparent: true,
                background: BACKGROUND,
                keep_alpha: false,
            },
            Demand::Tiles,
        )
        .await?)
}
