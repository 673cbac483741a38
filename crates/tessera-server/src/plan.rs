//! The plan of tiles a batch command works on: a layer's tiles in one grid
//! and format over a zoom range, limited to its extent and optionally to a
//! bbox or to polygons. Seed, truncate and export share it, so the three
//! always agree on which tiles an area holds.

use std::ops::RangeInclusive;
use std::sync::Arc;

use tessera_grid::TileFormat;
use tessera_grid::mercator;
use tessera_grid::{BBox, Curve, Polygon, TileRange, order_for};
use tessera_source::{Crs, SourceError};
use tessera_store::{AreaRange, TileArea};

use crate::metatile::Metatile;
use crate::model::{Grid, Layer};
use crate::registry::Registry;
use crate::suggest::Unknown;

/// Side, in metatiles, of the blocks a plan's metatiles are walked in
/// ([`TilePlan::metatiles`]): along the Hilbert curve inside a block, every
/// aligned square of 2, 4, 8 or 16 metatiles a side comes in one run.
pub const BLOCK: u32 = 1 << BLOCK_ORDER;
const BLOCK_ORDER: u8 = 4;

/// The tiles a batch command works on.
#[derive(Debug, Clone)]
pub struct TilePlan {
    /// The layer.
    pub layer: Arc<Layer>,
    /// The grid.
    pub grid: Arc<Grid>,
    /// The tile format.
    pub format: TileFormat,
    /// Tile ranges, zoom by zoom, already clipped to the layer's extent: one
    /// per zoom for a bbox, one per row span for a polygon.
    pub ranges: Vec<TileRange>,
    /// The part of the plan this process works on (`--shard I/N`); `None`:
    /// all of it.
    pub shard: Option<Shard>,
}

impl TilePlan {
    /// The plan at the dimension values of each of `layers` (from
    /// [`layers_at`]): the same tiles, each value's own.
    pub fn at_each(&self, layers: Vec<Arc<Layer>>) -> Vec<TilePlan> {
        layers
            .into_iter()
            .map(|layer| TilePlan {
                layer,
                ..self.clone()
            })
            .collect()
    }
}

/// The layer drawn with each style `styles` names (`all`: every one of
/// them; none: its default), at each combination of the values `specs`
/// name ([`layers_at`]).
pub fn styled_layers_at(
    layer: &Arc<Layer>,
    styles: &[&str],
    specs: &[&str],
) -> Result<Vec<Arc<Layer>>, PlanError> {
    let mut styled: Vec<Arc<Layer>> = Vec::new();
    for name in styles {
        if name.eq_ignore_ascii_case("all") {
            styled.push(layer.clone());
            styled.extend(layer.other_styles.iter().map(|(_, l)| l.clone()));
        } else {
            styled.push(
                layer
                    .styled(Some(name))
                    .map_err(|e| PlanError::Refused(e.to_string()))?,
            );
        }
    }
    if styled.is_empty() {
        styled.push(layer.clone());
    }
    styled.dedup_by(|a, b| Arc::ptr_eq(a, b));
    let mut layers = Vec::new();
    for l in &styled {
        layers.extend(layers_at(l, specs)?);
    }
    Ok(layers)
}

/// The layer at each combination of the values `specs` name, one spec per
/// dimension: `NAME=V1,V2`, `NAME=all`, or `NAME=A/B` (the layer's values
/// from A to B); a dimension no spec names is at its default value.
/// Combinations the layer has no data for are left out (a forecast hour a
/// run lacks); none at all is an error. Without specs, the layer at its
/// default values (a layer without dimensions is itself).
pub fn layers_at(layer: &Arc<Layer>, specs: &[&str]) -> Result<Vec<Arc<Layer>>, PlanError> {
    let err = PlanError::Refused;
    let mut chosen: Vec<(String, Vec<String>)> = Vec::new();
    for spec in specs {
        let (name, values) = spec_values(layer, spec)?;
        if chosen.iter().any(|(n, _)| *n == name) {
            return Err(err(format!("dimension {name:?} is named twice")));
        }
        chosen.push((name, values));
    }
    if chosen.is_empty() {
        return Ok(vec![layer.at(|_| None).map_err(|e| err(e.to_string()))?]);
    }
    // Every combination of the chosen values.
    let lens: Vec<usize> = chosen.iter().map(|(_, values)| values.len()).collect();
    let mut at = vec![0usize; chosen.len()];
    let mut layers = Vec::new();
    let mut first_error = None;
    loop {
        let value_of = |name: &str| {
            chosen
                .iter()
                .zip(&at)
                .find(|((n, _), _)| n == name)
                .map(|((_, values), i)| values[*i].clone())
        };
        match layer.at(value_of) {
            Ok(l) => layers.push(l),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        if !crate::dimension::next_combination(&mut at, &lens) {
            return if layers.is_empty() {
                Err(err(first_error.map_or_else(
                    || "no combination of those values".to_string(),
                    |e| e.to_string(),
                )))
            } else {
                Ok(layers)
            };
        }
    }
}

/// The dimension a spec names and the canonical values it names.
fn spec_values(layer: &Layer, spec: &str) -> Result<(String, Vec<String>), PlanError> {
    let err = PlanError::Refused;
    let (name, text) = spec
        .split_once('=')
        .ok_or_else(|| err(format!("--dimension {spec:?}: write NAME=VALUES")))?;
    let name = name.trim().to_ascii_lowercase();
    let Some(dimension) = layer.dimensions.iter().find(|d| d.name == name) else {
        return Err(err(format!(
            "layer {:?} has no dimension {name:?}",
            layer.name
        )));
    };
    let values: Vec<String> = if text.trim() == "all" {
        dimension.values.clone()
    } else if let Some((from, to)) = text.split_once('/') {
        let bound = |t: &str| {
            crate::dimension::canonical(dimension.kind, &name, t).map_err(|e| err(e.to_string()))
        };
        let (from, to) = (bound(from)?, bound(to)?);
        let (low, high) = if dimension.order(&from, &to).is_gt() {
            (to, from)
        } else {
            (from, to)
        };
        dimension
            .values
            .iter()
            .filter(|v| dimension.order(&low, v).is_le() && dimension.order(v, &high).is_le())
            .cloned()
            .collect()
    } else {
        text.split(',')
            .map(|t| dimension.resolve(Some(t)).map_err(|e| err(e.to_string())))
            .collect::<Result<_, _>>()?
    };
    if values.is_empty() {
        return Err(err(format!(
            "--dimension {spec:?} names none of the layer's values"
        )));
    }
    Ok((name, values))
}

/// One of `count` parts of a plan: the metatiles, zoom by zoom and along
/// the Hilbert curve within a zoom, cut into `count` contiguous runs of
/// (nearly) equal numbers of metatiles; part `index` is the run this
/// process renders. The parts never overlap and together are the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This part, from 0.
    pub index: u64,
    /// How many parts.
    pub count: u64,
}

impl Shard {
    /// Parses `I/N` (0 <= I < N); `auto/N` takes `I` from `env("JOB_COMPLETION_INDEX")`
    /// (a Kubernetes Indexed Job) or else `env("SLURM_ARRAY_TASK_ID")` (a
    /// Slurm job array, whose ids must run from 0).
    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let (i, n) = text
            .split_once('/')
            .ok_or_else(|| format!("--shard {text:?}: write I/N (for example 0/4) or auto/N"))?;
        let count: u64 =
            n.trim().parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                format!("--shard {text:?}: N must be a whole number of at least 1")
            })?;
        let (index_text, from) = if i.trim() == "auto" {
            ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID"]
                .iter()
                .find_map(|v| env(v).map(|value| (value, format!(" (from {v})"))))
                .ok_or_else(|| {
                    format!("--shard {text:?}: neither JOB_COMPLETION_INDEX nor SLURM_ARRAY_TASK_ID is set")
                })?
        } else {
            (i.trim().to_string(), String::new())
        };
        let index: u64 = index_text
            .trim()
            .parse()
            .map_err(|_| format!("--shard {text:?}: {index_text:?}{from} is not a whole number"))?;
        if index >= count {
            return Err(format!(
                "--shard {text:?}: part {index}{from} does not exist: parts run from 0 to {}",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }
}

/// Which part of the layer's extent.
#[derive(Debug, Clone)]
pub enum PlanArea {
    /// The layer's whole extent.
    Extent,
    /// A box in the given CRS.
    BBox(BBox, String),
    /// Polygons in lon/lat (GeoJSON, RFC 7946).
    Polygons(Vec<Polygon>),
}

/// Reads the polygons of a GeoJSON text: a Polygon or MultiPolygon
/// geometry, a Feature holding one, or a FeatureCollection of them.
pub fn polygons_from_geojson(text: &str) -> Result<Vec<Polygon>, PlanError> {
    let err = |m: &str| PlanError::Refused(format!("GeoJSON: {m}"));
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| err(&e.to_string()))?;
    let mut out = Vec::new();
    collect_polygons(&v, &mut out).map_err(|m| err(&m))?;
    if out.is_empty() {
        return Err(err("no Polygon or MultiPolygon found"));
    }
    Ok(out)
}

fn collect_polygons(v: &serde_json::Value, out: &mut Vec<Polygon>) -> Result<(), String> {
    let ring = |r: &serde_json::Value| -> Result<Vec<[f64; 2]>, String> {
        r.as_array()
            .ok_or("a ring must be an array of positions")?
            .iter()
            .map(|p| match p.as_array().map(Vec::as_slice) {
                Some([x, y, ..]) => match (x.as_f64(), y.as_f64()) {
                    (Some(x), Some(y)) if x.is_finite() && y.is_finite() => Ok([x, y]),
                    _ => Err("a position must hold two finite numbers".to_string()),
                },
                _ => Err("a position must be [lon, lat]".to_string()),
            })
            .collect()
    };
    let polygon = |p: &serde_json::Value| -> Result<Polygon, String> {
        p.as_array()
            .ok_or("polygon coordinates must be an array of rings")?
            .iter()
            .map(ring)
            .collect()
    };
    match v.get("type").and_then(serde_json::Value::as_str) {
        Some("FeatureCollection") => {
            for f in v
                .get("features")
                .and_then(serde_json::Value::as_array)
                .ok_or("features missing")?
            {
                collect_polygons(f, out)?;
            }
        }
        Some("Feature") => {
            if let Some(g) = v.get("geometry").filter(|g| !g.is_null()) {
                collect_polygons(g, out)?;
            }
        }
        Some("Polygon") => out.push(polygon(v.get("coordinates").ok_or("coordinates missing")?)?),
        Some("MultiPolygon") => {
            for p in v
                .get("coordinates")
                .and_then(serde_json::Value::as_array)
                .ok_or("coordinates missing")?
            {
                out.push(polygon(p)?);
            }
        }
        Some(other) => {
            return Err(format!(
                "geometry type {other} is not an area (use Polygon or MultiPolygon)"
            ));
        }
        None => return Err("an object without \"type\"".into()),
    }
    Ok(())
}

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The layer, grid, format, zooms or area do not fit together; the
    /// message says what to change.
    #[error("{0}")]
    Refused(String),
    /// A CRS (of `--bbox-crs`) is unknown.
    #[error("{what} is not a CRS tessera knows")]
    Crs {
        /// Which argument.
        what: &'static str,
        /// PROJ's refusal.
        source: SourceError,
    },
    /// The area cannot be transformed to the grid's CRS.
    #[error("{what} cannot be transformed to {to}")]
    Transform {
        /// Which argument (`--bbox`, `--polygon`).
        what: &'static str,
        /// The grid's CRS.
        to: String,
        /// Why.
        source: SourceError,
    },
}

/// Parses zoom levels: `A..B` (inclusive, also `A..=B`) or a single `Z`.
pub fn parse_zooms(text: &str) -> Result<RangeInclusive<u8>, String> {
    let parse = |t: &str| {
        t.trim()
            .parse::<u8>()
            .map_err(|_| format!("{t:?} is not a zoom level (a whole number, 0 to 255)"))
    };
    let (a, b) = match text.split_once("..") {
        Some((a, b)) => (parse(a)?, parse(b.trim_start_matches('='))?),
        None => {
            let z = parse(text)?;
            (z, z)
        }
    };
    if a > b {
        return Err(format!(
            "zoom range {text:?} is empty: write A..B with A <= B"
        ));
    }
    Ok(a..=b)
}

/// Parses a box: `minx,miny,maxx,maxy`.
pub fn parse_bbox(text: &str) -> Result<BBox, String> {
    let v: Vec<f64> = text
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .map_err(|_| format!("{p:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    let [a, b, c, d] = v[..] else {
        return Err(format!("a bbox needs 4 numbers, got {}", v.len()));
    };
    BBox::new(a, b, c, d).map_err(|e| e.to_string())
}

impl TilePlan {
    /// Plans the tiles of `layer` in `grid` for `zooms` in `format` (the
    /// layer's first when `None`), limited to `area` and always to the
    /// layer's extent. Refuses layers without a cache and layers whose store
    /// forgets its tiles when the process exits.
    pub fn new(
        registry: &Registry,
        layer: &str,
        grid: &str,
        format: Option<TileFormat>,
        zooms: RangeInclusive<u8>,
        area: &PlanArea,
    ) -> Result<TilePlan, PlanError> {
        let err = PlanError::Refused;
        let layer = registry
            .find_layer(layer, &|_| true)
            .map_err(|unknown| err(format!("unknown layer {unknown}")))?;
        let cache = layer.cache.as_ref().ok_or_else(|| {
            err(format!(
                "layer {:?} has no cache (cache.store is none): nothing to seed into",
                layer.name
            ))
        })?;
        if cache.store.is_volatile() {
            return Err(err(format!(
                "layer {:?} caches into the in-memory store {:?}: seeded tiles would be lost when this command exits; configure a file store",
                layer.name, cache.store_name
            )));
        }
        if !layer.grids.iter().any(|g| g == grid) {
            let unknown = Unknown::among(grid, "grids", layer.grids.iter().map(String::as_str));
            return Err(err(format!(
                "layer {:?} is not offered in grid {unknown}",
                layer.name,
            )));
        }
        let grid = registry
            .grid(grid)
            .ok_or_else(|| err(format!("unknown grid {grid:?}")))?
            .clone();
        let format = format.unwrap_or(layer.formats[0]);
        if !layer.formats.contains(&format) {
            let unknown = Unknown::among(
                format.extension(),
                "formats",
                layer.formats.iter().map(|f| f.extension()),
            );
            return Err(err(format!(
                "layer {:?} is not offered in format {unknown}",
                layer.name,
            )));
        }
        let max = layer.max_zoom_in(&grid);
        if *zooms.start() < layer.min_zoom || *zooms.end() > max || zooms.is_empty() {
            return Err(err(format!(
                "zoom range {}..{} is outside layer {:?}'s range {}..{max} in {}",
                zooms.start(),
                zooms.end(),
                layer.name,
                layer.min_zoom,
                grid.tms.id
            )));
        }
        let mut area_box = layer
            .extents
            .get(&grid.tms.id)
            .copied()
            .flatten()
            .unwrap_or(grid.tms.extent);
        let mut polygons = None;
        match area {
            PlanArea::Extent => {}
            PlanArea::BBox(bbox, crs) => {
                let crs = Crs::parse(crs).map_err(|source| PlanError::Crs {
                    what: "--bbox-crs",
                    source,
                })?;
                let in_grid =
                    crs.transform_bbox(bbox, &grid.crs)
                        .map_err(|source| PlanError::Transform {
                            what: "--bbox",
                            to: grid.crs.id.clone(),
                            source,
                        })?;
                area_box = area_box
                    .intersection(&in_grid)
                    .ok_or_else(|| err("--bbox does not overlap the layer's extent".to_string()))?;
            }
            PlanArea::Polygons(lonlat) => polygons = Some(polygons_in_grid(lonlat, &grid)?),
        }
        let ranges = zooms
            .filter_map(|z| Some((z, grid.tms.tiles_in_bbox(z, &area_box)?)))
            .flat_map(|(z, within)| match &polygons {
                None => vec![within],
                Some(p) => grid
                    .tms
                    .tiles_in_polygons(z, p)
                    .into_iter()
                    .filter_map(|span| clip(&span, &within))
                    .collect(),
            })
            .collect::<Vec<_>>();
        if polygons.is_some() && ranges.is_empty() {
            return Err(err(
                "--polygon does not overlap the layer's extent".to_string()
            ));
        }
        Ok(TilePlan {
            layer,
            grid,
            format,
            ranges,
            shard: None,
        })
    }

    /// The same plan restricted to `shard`.
    #[must_use]
    pub fn sharded(self, shard: Shard) -> TilePlan {
        TilePlan {
            shard: Some(shard),
            ..self
        }
    }

    /// Every metatile to render, each once: zoom by zoom, in blocks of
    /// [`BLOCK`] metatiles a side taken row by row, along the Hilbert curve
    /// inside a block (so the metatiles of one pack of a store that packs
    /// tiles come one after the other); with a shard, its run of the plan in
    /// curve order.
    pub fn metatiles(&self) -> Box<dyn Iterator<Item = Metatile> + Send + '_> {
        let all = self.metatiles_of_ranges();
        let Some(Shard { index, count }) = self.shard else {
            return Box::new(all);
        };
        let spec = self.metatile_spec();
        let (cols, rows) = (spec.cols.max(1), spec.rows.max(1));
        let tms = &self.grid.tms;
        let mut ordered: Vec<(u8, u64, Metatile)> = all
            .map(|m| {
                let z = m.range.z;
                let matrix = tms.matrix(z).expect("planned zooms are in the grid");
                let order = order_for(
                    matrix.matrix_width.div_ceil(cols),
                    matrix.matrix_height.div_ceil(rows),
                );
                let index = Curve::Hilbert.index(order, m.range.min_x / cols, m.range.min_y / rows);
                (z, index, m)
            })
            .collect();
        ordered.sort_unstable_by_key(|(z, i, _)| (*z, *i));
        let n = ordered.len() as u64;
        let (start, end) = (n * index / count, n * (index + 1) / count);
        Box::new(
            ordered
                .into_iter()
                .skip(usize::try_from(start).unwrap_or(usize::MAX))
                .take(usize::try_from(end - start).unwrap_or(usize::MAX))
                .map(|(_, _, m)| m),
        )
    }

    /// The tiles of the plan's area (its ranges), without the tiles its
    /// metatiles add around it.
    pub fn area_tiles(&self) -> u64 {
        self.ranges.iter().map(TileRange::count).sum()
    }

    /// The metatile the plan's tiles are made in: tiles across and down.
    pub fn metatile_size(&self) -> (u32, u32) {
        let spec = self.metatile_spec();
        (spec.cols.max(1), spec.rows.max(1))
    }

    fn metatile_spec(&self) -> crate::metatile::MetatileSpec {
        self.layer
            .cache
            .as_ref()
            .map(|c| c.metatile)
            .expect("a plan is only made for a cached layer")
    }

    /// The metatiles of every range, each once: a metatile that an
    /// earlier range of its zoom also reaches is left to that range (found
    /// by looking at the earlier ranges that can reach it, not by
    /// remembering every metatile: a whole-world plan to z24 holds 2^44 of
    /// them). [`TilePlan::new`] makes one range a zoom, or one-row spans
    /// top row first: the earlier ranges that can share a metatile with a
    /// range are the ones just before it ([`earlier_run`]).
    fn metatiles_of_ranges(&self) -> impl Iterator<Item = Metatile> + Send + '_ {
        let spec = self.metatile_spec();
        let tms = &self.grid.tms;
        let blocks = self.metatile_blocks();
        self.ranges.iter().enumerate().flat_map(move |(i, r)| {
            let (cols, rows) = (spec.cols.max(1), spec.rows.max(1));
            let (mx0, mx1) = (r.min_x / cols, r.max_x / cols);
            let (my0, my1) = (r.min_y / rows, r.max_y / rows);
            let earlier: std::sync::Arc<[MetatileBlock]> =
                blocks[earlier_run(&blocks, i)..i].into();
            let z = r.z;
            let curve_blocks = (my0 / BLOCK..=my1 / BLOCK)
                .flat_map(move |by| (mx0 / BLOCK..=mx1 / BLOCK).map(move |bx| (bx, by)));
            curve_blocks.flat_map(move |(bx, by)| {
                let earlier = earlier.clone();
                (0..u64::from(BLOCK * BLOCK)).filter_map(move |d| {
                    let (dx, dy) = Curve::Hilbert.coords(BLOCK_ORDER, d);
                    let (mx, my) = (bx * BLOCK + dx, by * BLOCK + dy);
                    if !(mx0..=mx1).contains(&mx)
                        || !(my0..=my1).contains(&my)
                        || earlier.iter().any(|b| b.holds(z, mx, my))
                    {
                        return None;
                    }
                    let first = tms
                        .tile(
                            u32::from(r.z),
                            u64::from((mx * cols).max(r.min_x)),
                            u64::from((my * rows).max(r.min_y)),
                        )
                        .expect("inside the range");
                    Some(Metatile::containing(tms, first, spec))
                })
            })
        })
    }

    /// The planned tiles as a store sees them (for truncation): the same
    /// ranges, each with its matrix size.
    pub fn tile_area(&self) -> TileArea {
        let tms = &self.grid.tms;
        TileArea {
            progress: std::sync::Arc::default(),
            layer: self.layer.cache_key.clone(),
            grid: tms.id.clone(),
            format: self.format,
            ranges: self
                .ranges
                .iter()
                .map(|r| {
                    let m = tms.matrix(r.z).expect("planned zooms are in the grid");
                    AreaRange {
                        range: *r,
                        matrix_width: m.matrix_width,
                        matrix_height: m.matrix_height,
                    }
                })
                .collect(),
        }
    }

    /// Each range's metatiles as a block of metatile columns and rows.
    fn metatile_blocks(&self) -> Vec<MetatileBlock> {
        let spec = self.metatile_spec();
        let (cols, rows) = (spec.cols.max(1), spec.rows.max(1));
        self.ranges
            .iter()
            .map(|r| MetatileBlock {
                z: r.z,
                x: r.min_x / cols..=r.max_x / cols,
                y: r.min_y / rows..=r.max_y / rows,
            })
            .collect()
    }

    /// Number of metatiles and of tiles they hold.
    pub fn size(&self) -> PlanSize {
        self.size_unless(&std::sync::atomic::AtomicBool::new(false))
            .unwrap_or_default()
    }

    /// [`TilePlan::size`], or `None` once `cancel` is set. Counted without
    /// walking the metatiles when no two ranges of a zoom share one (the
    /// plans of an extent or a bbox: one range a zoom) and the plan is not
    /// sharded; walked otherwise, looking at `cancel` as it goes.
    pub fn size_unless(&self, cancel: &std::sync::atomic::AtomicBool) -> Option<PlanSize> {
        use std::sync::atomic::Ordering;
        let blocks = self.metatile_blocks();
        let disjoint = blocks.iter().enumerate().all(|(i, a)| {
            blocks[earlier_run(&blocks, i)..i]
                .iter()
                .all(|b| !a.meets(b))
        });
        if disjoint && self.shard.is_none() {
            let spec = self.metatile_spec();
            let (cols, rows) = (spec.cols.max(1), spec.rows.max(1));
            let tms = &self.grid.tms;
            let mut size = PlanSize::default();
            for block in &blocks {
                let m = tms.matrix(block.z)?;
                // A metatile at the matrix's edge holds the tiles left.
                let span = |metatiles: &std::ops::RangeInclusive<u32>, side: u32, matrix: u32| {
                    let first = u64::from(*metatiles.start()) * u64::from(side);
                    let end = ((u64::from(*metatiles.end()) + 1) * u64::from(side))
                        .min(u64::from(matrix));
                    end.saturating_sub(first)
                };
                let n = |r: &std::ops::RangeInclusive<u32>| u64::from(r.end() - r.start() + 1);
                size.metatiles += n(&block.x) * n(&block.y);
                size.tiles +=
                    span(&block.x, cols, m.matrix_width) * span(&block.y, rows, m.matrix_height);
            }
            return Some(size);
        }
        let mut size = PlanSize::default();
        for meta in self.metatiles() {
            if size.metatiles % 4096 == 0 && cancel.load(Ordering::Relaxed) {
                return None;
            }
            size.metatiles += 1;
            size.tiles += u64::from(meta.cols() * meta.rows());
        }
        Some(size)
    }
}

/// Where the run of ranges before `blocks[i]` that can share a metatile
/// with it starts: those of its zoom whose rows reach down to its first
/// row (ranges of a zoom come top row first).
fn earlier_run(blocks: &[MetatileBlock], i: usize) -> usize {
    let block = &blocks[i];
    let mut start = i;
    while start > 0
        && blocks[start - 1].z == block.z
        && blocks[start - 1].y.end() >= block.y.start()
    {
        start -= 1;
    }
    start
}

/// The metatiles of one range: a zoom, and the metatile columns and rows.
#[derive(Debug, Clone)]
struct MetatileBlock {
    z: u8,
    x: std::ops::RangeInclusive<u32>,
    y: std::ops::RangeInclusive<u32>,
}

impl MetatileBlock {
    fn holds(&self, z: u8, mx: u32, my: u32) -> bool {
        self.z == z && self.x.contains(&mx) && self.y.contains(&my)
    }

    fn meets(&self, other: &MetatileBlock) -> bool {
        self.z == other.z
            && self.x.start() <= other.x.end()
            && other.x.start() <= self.x.end()
            && self.y.start() <= other.y.end()
            && other.y.start() <= self.y.end()
    }
}

/// How much work a plan is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanSize {
    /// Metatiles to render.
    pub metatiles: u64,
    /// Tiles they hold.
    pub tiles: u64,
}

/// Rings from lon/lat to the grid's CRS (latitudes clamped to what Web
/// Mercator can show).
fn polygons_in_grid(lonlat: &[Polygon], grid: &Grid) -> Result<Vec<Polygon>, PlanError> {
    let lonlat_crs = Crs::parse("OGC:CRS84").map_err(|source| PlanError::Crs {
        what: "OGC:CRS84",
        source,
    })?;
    let is_mercator = grid.crs.id == mercator::CRS;
    lonlat
        .iter()
        .map(|polygon| {
            polygon
                .iter()
                .map(|ring| {
                    let mut xs: Vec<f64> = ring.iter().map(|p| p[0]).collect();
                    let mut ys: Vec<f64> = ring
                        .iter()
                        .map(|p| {
                            if is_mercator {
                                mercator::clamp_latitude(p[1])
                            } else {
                                p[1]
                            }
                        })
                        .collect();
                    lonlat_crs
                        .transform_points(&grid.crs, &mut xs, &mut ys)
                        .map_err(|source| PlanError::Transform {
                            what: "--polygon",
                            to: grid.crs.id.clone(),
                            source,
                        })?;
                    Ok(xs.into_iter().zip(ys).map(|(x, y)| [x, y]).collect())
                })
                .collect()
        })
        .collect()
}

/// The part of `span` inside `within` (same zoom).
fn clip(span: &TileRange, within: &TileRange) -> Option<TileRange> {
    let r = TileRange {
        z: span.z,
        min_x: span.min_x.max(within.min_x),
        max_x: span.max_x.min(within.max_x),
        min_y: span.min_y.max(within.min_y),
        max_y: span.max_y.min(within.max_y),
    };
    (r.min_x <= r.max_x && r.min_y <= r.max_y).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geojson_areas_are_read_and_other_input_is_named() {
        let fc = r#"{"type":"FeatureCollection","features":[
            {"type":"Feature","properties":{},"geometry":{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,0]]]}},
            {"type":"Feature","properties":{},"geometry":{"type":"MultiPolygon","coordinates":[[[[20,20],[30,20],[30,30]]],[[[40,40],[50,40],[50,50]]]]}},
            {"type":"Feature","properties":{},"geometry":null}]}"#;
        let p = polygons_from_geojson(fc).unwrap();
        assert_eq!(p.len(), 3);
        assert!((p[0][0][1][0] - 10.0).abs() < 1e-12 && p[0][0][1][1].abs() < 1e-12);
        for (bad, needle) in [
            (r#"{"type":"Point","coordinates":[1,2]}"#, "Point"),
            (r#"{"type":"Polygon","coordinates":[[[1,"a"]]]}"#, "finite"),
            (
                r#"{"type":"FeatureCollection","features":[]}"#,
                "no Polygon",
            ),
            ("not json", "GeoJSON"),
        ] {
            let e = polygons_from_geojson(bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }
}
