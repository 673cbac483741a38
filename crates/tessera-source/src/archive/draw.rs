//! A vector archive's tiles drawn into a window with the layer's rules (a
//! PNG tile in another grid, a WMS map): each tile's features decoded from
//! their protobuf, taken from tile coordinates to the window's pixels
//! (through the window's CRS when it is not the archive's), each tile
//! drawn within its own area only (its buffer is the next tile's area).

use bytes::Bytes;
use geozero::mvt::tile::{GeomType, Value};
use geozero::mvt::{Message, Tile};
use tessera_grid::{TileCoord, TileMatrixSet};
use tessera_image::Raster;

use crate::{Crs, WindowRequest};
use tessera_carto::draw::{Canvas, Shapes};
use tessera_carto::style::{Attribute, Rule};

/// The rules a vector archive is drawn with when its layer names none:
/// Leaflet's default path style, as `tessera serve` draws vector files.
pub fn default_rules() -> Vec<Rule> {
    serde_json::from_value(serde_json::json!([{
        "fill": "#3388ff", "fill_opacity": 0.2, "stroke": "#3388ff", "stroke_width": 2,
    }]))
    .expect("the default rule parses")
}

/// Draws `tiles` (gzip-compressed MVT, coordinates of `grid` in `crs`)
/// into `request`'s window with `rules` at `zoom`.
pub fn draw(
    tiles: &[(TileCoord, Bytes)],
    grid: &TileMatrixSet,
    crs: &Crs,
    request: &WindowRequest<'_>,
    rules: &[Rule],
    zoom: f64,
) -> Result<Raster, String> {
    let mut canvas = Canvas::new(request.width, request.height).ok_or_else(|| {
        format!(
            "a {}x{} window cannot be drawn",
            request.width, request.height
        )
    })?;
    let b = request.bbox;
    let (sx, sy) = (
        f64::from(request.width) / b.width(),
        f64::from(request.height) / b.height(),
    );
    let same = crs.wkt == request.crs.wkt;
    // Points of the archive's CRS as the window's pixels.
    let to_pixels = |xs: &mut Vec<f64>, ys: &mut Vec<f64>| -> Result<(), String> {
        if !same {
            crs.transform_points(request.crs, xs, ys)
                .map_err(|e| e.to_string())?;
        }
        for (x, y) in xs.iter_mut().zip(ys.iter_mut()) {
            *x = (*x - b.min_x) * sx;
            *y = (b.max_y - *y) * sy;
        }
        Ok(())
    };
    let rules: Vec<&Rule> = rules.iter().filter(|r| r.draws_at(zoom)).collect();
    for (coord, packed) in tiles {
        let raw = gunzip(packed)?;
        let tile = Tile::decode(&raw[..])
            .map_err(|e| format!("a vector tile that does not decode: {e}"))?;
        let area = grid.tile_bbox(*coord);
        // The tile's own area in pixels (exact in the same CRS; its
        // corners' box in another, where seams matter less).
        let mut xs = vec![area.min_x, area.max_x, area.min_x, area.max_x];
        let mut ys = vec![area.max_y, area.max_y, area.min_y, area.min_y];
        to_pixels(&mut xs, &mut ys)?;
        let (x0, x1) = (
            xs.iter().copied().fold(f64::MAX, f64::min),
            xs.iter().copied().fold(f64::MIN, f64::max),
        );
        let (y0, y1) = (
            ys.iter().copied().fold(f64::MAX, f64::min),
            ys.iter().copied().fold(f64::MIN, f64::max),
        );
        canvas.clip_to(Some((
            x0 as f32,
            y0 as f32,
            (x1 - x0) as f32,
            (y1 - y0) as f32,
        )));
        for layer in &tile.layers {
            let extent = f64::from(layer.extent.unwrap_or(4096).max(1));
            for feature in &layer.features {
                let attribute = |name: &str| -> Attribute {
                    let Some(k) = layer.keys.iter().position(|k| k == name) else {
                        return Attribute::Null;
                    };
                    feature
                        .tags
                        .chunks_exact(2)
                        .find(|t| t[0] as usize == k)
                        .and_then(|t| layer.values.get(t[1] as usize))
                        .map_or(Attribute::Null, value)
                };
                let chosen: Vec<&&Rule> = rules
                    .iter()
                    .filter(|r| {
                        r.filter
                            .as_ref()
                            .is_none_or(|f| f.matches(&attribute(&f.field)))
                    })
                    .collect();
                if chosen.is_empty() {
                    continue;
                }
                let parts = decode(&feature.geometry);
                let mut xs = Vec::new();
                let mut ys = Vec::new();
                for part in &parts {
                    for &(x, y) in part {
                        xs.push(area.min_x + f64::from(x) / extent * area.width());
                        ys.push(area.max_y - f64::from(y) / extent * area.height());
                    }
                }
                to_pixels(&mut xs, &mut ys)?;
                let mut at = 0;
                let parts: Vec<Vec<(f32, f32)>> = parts
                    .iter()
                    .map(|part| {
                        let p = (at..at + part.len())
                            .map(|i| (xs[i] as f32, ys[i] as f32))
                            .collect();
                        at += part.len();
                        p
                    })
                    .collect();
                let shapes = match feature.r#type() {
                    GeomType::Point => Shapes::Points(parts.into_iter().flatten().collect()),
                    GeomType::Linestring => Shapes::Lines(parts),
                    // Every ring of the feature in one path: even-odd
                    // filling keeps holes holes.
                    GeomType::Polygon => Shapes::Polygons(vec![parts]),
                    GeomType::Unknown => continue,
                };
                for rule in chosen {
                    canvas.draw(&shapes, rule);
                }
            }
        }
    }
    Ok(canvas.into_raster())
}

fn gunzip(packed: &[u8]) -> Result<Vec<u8>, String> {
    if !packed.starts_with(&[0x1f, 0x8b]) {
        return Ok(packed.to_vec());
    }
    crate::inflate::gunzip_capped(packed, crate::complete::MOST_MVT_BYTES)
        .map_err(|e| format!("a vector tile that does not gunzip: {e}"))
}

fn value(v: &Value) -> Attribute {
    if let Some(t) = &v.string_value {
        return Attribute::Text(t.clone());
    }
    let number = v
        .double_value
        .or(v.float_value.map(f64::from))
        .or(v.int_value.map(|n| n as f64))
        .or(v.uint_value.map(|n| n as f64))
        .or(v.sint_value.map(|n| n as f64))
        .or(v.bool_value.map(|b| f64::from(u8::from(b))));
    number.map_or(Attribute::Null, Attribute::Number)
}

/// The parts (rings, lines or points) of an MVT geometry, in tile
/// coordinates (MoveTo, LineTo and ClosePath commands, zigzag deltas).
fn decode(commands: &[u32]) -> Vec<Vec<(i32, i32)>> {
    let mut parts: Vec<Vec<(i32, i32)>> = Vec::new();
    let mut current: Vec<(i32, i32)> = Vec::new();
    let (mut x, mut y) = (0i32, 0i32);
    let mut i = 0;
    let zigzag = |n: u32| ((n >> 1) as i32) ^ -((n & 1) as i32);
    while i < commands.len() {
        let (id, count) = (commands[i] & 7, (commands[i] >> 3) as usize);
        i += 1;
        match id {
            1 | 2 => {
                for _ in 0..count {
                    let (Some(&dx), Some(&dy)) = (commands.get(i), commands.get(i + 1)) else {
                        return parts;
                    };
                    i += 2;
                    x = x.wrapping_add(zigzag(dx));
                    y = y.wrapping_add(zigzag(dy));
                    if id == 1 && !current.is_empty() {
                        parts.push(std::mem::take(&mut current));
                    }
                    current.push((x, y));
                }
            }
            7 => {
                if let Some(&first) = current.first() {
                    current.push(first);
                }
            }
            _ => return parts,
        }
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_commands_become_parts() {
        // MoveTo(2,2) LineTo(+2,0 +0,2) ClosePath; MoveTo(+5,+5) LineTo(+1,0)
        let zz = |n: i32| ((n << 1) ^ (n >> 31)) as u32;
        let commands = [
            (1 << 3) | 1,
            zz(2),
            zz(2),
            (2 << 3) | 2,
            zz(2),
            zz(0),
            zz(0),
            zz(2),
            (1 << 3) | 7,
            (1 << 3) | 1,
            zz(5),
            zz(5),
            (1 << 3) | 2,
            zz(1),
            zz(0),
        ];
        let parts = decode(&commands);
        assert_eq!(
            parts,
            vec![vec![(2, 2), (4, 2), (4, 4), (2, 2)], vec![(9, 9), (10, 9)]]
        );
        assert!(
            decode(&[(1 << 3) | 1, 4]).is_empty(),
            "a command cut short ends the geometry"
        );
    }
}
