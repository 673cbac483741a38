//! Contour lines made from a DEM as they are asked for (`type:
//! contours`): the DEM is read on the asked map's own pixel grid, with a
//! margin, and traced by marching squares (the `contour` crate) at the
//! zoom's interval. Neighbouring tiles read the same pixels where their
//! margins overlap, so their lines meet at the shared edge. The lines are
//! the features of one data layer, `contours`, with the attributes `ele`
//! (the level) and `level` (1 major, 0 minor, as maplibre-contour names
//! them), drawn, cut into vector tiles and queried as any vector layer's.

use std::collections::BTreeMap;
use std::sync::Arc;

use contour::ContourBuilder;
use gdal::vector::{FieldValue, Geometry, OGRwkbGeometryType};
use serde::Deserialize;
use tessera_carto::style::Rule;
use tessera_grid::BBox;

use super::spec::MvtSettings;
use crate::{Crs, GdalSourceSpec, Source, SourceError, WindowRequest};

/// Feet in a metre.
const FEET_PER_METRE: f64 = 1.0 / 0.3048;

/// Pixels read beyond each side of the asked window: lines reach its edge
/// whole, and the artificial ring the tracer closes along the border of
/// what it reads stays outside.
const READ_MARGIN: u32 = 4;

/// Most pixels one read traces (a 4096 x 4096 window).
const MOST_PIXELS: u64 = 1 << 24;

/// The name of the data layer of contour lines.
pub const CONTOUR_LAYER: &str = "contours";

/// The attributes of a contour line: its elevation and whether it is major.
pub const CONTOUR_FIELDS: [&str; 2] = ["ele", "level"];

/// `source: { type: contours, dem: { path: ... }, interval: 10, ... }`:
/// contour lines of a DEM as a vector source of one data layer.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContourSpec {
    /// The DEM: a single-band raster, with the keys of a `gdal` source
    /// (`path`, `resampling`, `bands` to pick one band).
    pub dem: GdalSourceSpec,
    /// Elevation between lines (in `units`) at zooms `zooms` does not set
    /// (default 10).
    #[serde(default = "default_interval")]
    pub interval: f64,
    /// Lines at multiples of it are major (`level` 1), others minor
    /// (`level` 0); default five intervals.
    #[serde(default)]
    pub major: Option<f64>,
    /// An interval per zoom range, as maplibre-contour's thresholds:
    /// `{"9": 100, "11": 50, "13": 10}` draws lines every 100 from zoom 9,
    /// every 50 from zoom 11 and every 10 from zoom 13, and none below
    /// zoom 9. Without it, `interval` at every zoom.
    #[serde(default)]
    pub zooms: BTreeMap<u8, f64>,
    /// The unit of `ele` and of the intervals: `metres` (the DEM's values)
    /// or `feet` (the DEM's metres converted).
    #[serde(default)]
    pub units: Units,
    /// Passes of Chaikin's corner cutting over each line (0 to 3, default
    /// 1): lines without the steps of the DEM's pixels, within half a
    /// pixel of the traced ones.
    #[serde(default = "default_smoothing")]
    pub smoothing: u8,
    /// Most levels one tile (or map) draws (default 200): where the DEM
    /// spans more, the tile is drawn at the smallest multiple of the
    /// interval that fits, so a cliff or a broken DEM costs a bounded time.
    #[serde(default = "default_max_levels")]
    pub max_levels: u32,
    /// Elevations outside this range (in the DEM's unit) are no data:
    /// default [-12000, 12000], so fill values such as 1e38 or -32767
    /// draw no lines.
    #[serde(default = "default_valid_range")]
    pub valid_range: [f64; 2],
    /// Drawing rules over `ele` and `level`, in order (none: the layer is
    /// served as vector tiles only).
    #[serde(default)]
    pub style: Vec<Rule>,
    /// Vector tile settings.
    #[serde(default)]
    pub mvt: MvtSettings,
}

/// The unit of contour elevations.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Units {
    /// The DEM's values as they are (metres).
    #[default]
    #[serde(alias = "meters")]
    Metres,
    /// The DEM's metres in feet.
    Feet,
}

fn default_interval() -> f64 {
    10.0
}

fn default_smoothing() -> u8 {
    1
}

fn default_max_levels() -> u32 {
    200
}

fn default_valid_range() -> [f64; 2] {
    [-12_000.0, 12_000.0]
}

impl ContourSpec {
    /// Checks the numbers: intervals and `major` finite and above 0,
    /// `max_levels` at least 1, `smoothing` at most 3, a valid range
    /// whose low end is below its high end.
    pub fn check(&self) -> Result<(), String> {
        let positive = |what: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "contours: {what} must be a number above 0, not {v}"
                ))
            }
        };
        positive("interval", self.interval)?;
        for (zoom, interval) in &self.zooms {
            positive(&format!("the interval of zoom {zoom}"), *interval)?;
        }
        if let Some(major) = self.major {
            positive("major", major)?;
        }
        if self.max_levels == 0 {
            return Err("contours: max_levels must be at least 1".into());
        }
        if self.smoothing > 3 {
            return Err("contours: smoothing is 0 to 3 passes".into());
        }
        let [low, high] = self.valid_range;
        if low.partial_cmp(&high) != Some(std::cmp::Ordering::Less) {
            return Err(format!(
                "contours: valid_range [{low}, {high}] must go from low to high"
            ));
        }
        Ok(())
    }

    /// The lowest zoom that has lines.
    pub fn min_zoom(&self) -> u8 {
        self.zooms.keys().next().copied().unwrap_or(0)
    }

    /// The interval at (fractional) `zoom`; `None` below the lowest zoom
    /// `zooms` names.
    fn interval_at(&self, zoom: f64) -> Option<f64> {
        if self.zooms.is_empty() {
            return Some(self.interval);
        }
        self.zooms
            .iter()
            .rev()
            .find(|(z, _)| f64::from(**z) <= zoom + 1e-9)
            .map(|(_, interval)| *interval)
    }
}

/// One level's lines, in the asked map's CRS.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Level {
    /// The elevation, in the spec's units.
    pub ele: f64,
    /// Whether it is a multiple of the major interval.
    pub major: bool,
    /// Its lines (a closed one ends where it starts).
    pub lines: Vec<Vec<(f64, f64)>>,
}

/// The contour lines of a DEM.
#[derive(Debug)]
pub(super) struct Contours {
    dem: Arc<dyn Source>,
    spec: ContourSpec,
}

impl Contours {
    /// Lines of `spec` from `dem` (checked to have one band).
    pub(super) fn new(dem: Arc<dyn Source>, spec: ContourSpec) -> Result<Contours, String> {
        spec.check()?;
        let bands = dem.info().band_count;
        if bands != 1 {
            return Err(format!(
                "contours: the DEM {:?} has {bands} bands; pick its elevations with `dem: {{ bands: [n] }}`",
                spec.dem.path
            ));
        }
        Ok(Contours { dem, spec })
    }

    /// The DEM.
    pub(super) fn dem(&self) -> &Arc<dyn Source> {
        &self.dem
    }

    /// The lines of `bbox` (in `crs`) on a map of `res` units per pixel at
    /// `zoom`: the DEM read on that map's pixels and traced; lines are cut
    /// where they cross the edges of `tile` (a vector tile's own box, on
    /// the same pixels), so that a tile and its neighbour both have a
    /// vertex where a line leaves one and enters the other.
    pub(super) fn levels(
        &self,
        bbox: &BBox,
        crs: &Crs,
        (res_x, res_y): (f64, f64),
        zoom: f64,
        tile: Option<&BBox>,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<Vec<Level>, SourceError> {
        let Some(interval) = self.spec.interval_at(zoom) else {
            return Ok(Vec::new());
        };
        let margin = f64::from(READ_MARGIN);
        let read = bbox.buffered(margin * res_x, margin * res_y);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "the window is checked against MOST_PIXELS below"
        )]
        let (width, height) = (
            ((bbox.width() / res_x).round().max(1.0) as u32).saturating_add(2 * READ_MARGIN),
            ((bbox.height() / res_y).round().max(1.0) as u32).saturating_add(2 * READ_MARGIN),
        );
        if u64::from(width) * u64::from(height) > MOST_PIXELS {
            return Err(SourceError::TooLarge { width, height });
        }
        let raster = self.dem.read(&WindowRequest {
            bbox: read,
            crs,
            width,
            height,
            cancel,
            max_source_pixels: None,
            tile_rows: None,
        })?;
        let band = raster.bands.first().ok_or(SourceError::Read {
            path: self.spec.dem.path.clone(),
            source: "the DEM read gave no band".into(),
        })?;
        let [low, high] = self.spec.valid_range;
        let factor = match self.spec.units {
            Units::Metres => 1.0,
            Units::Feet => FEET_PER_METRE,
        };
        let values: Vec<f64> = (0..raster.valid.len())
            .map(|i| {
                let v = f64::from(band.get(i));
                if raster.valid[i] < 128 || !v.is_finite() || v < low || v > high {
                    f64::NAN
                } else {
                    v * factor
                }
            })
            .collect();
        let Some(thresholds) = thresholds(&values, interval, self.spec.max_levels) else {
            return Ok(Vec::new());
        };
        let major = self.spec.major.unwrap_or(interval * 5.0);
        let builder = ContourBuilder::new(width as usize, height as usize, true);
        let traced = builder
            .lines(&values, &thresholds)
            .map_err(|e| SourceError::Read {
                path: self.spec.dem.path.clone(),
                source: format!("tracing contour lines: {e:?}").into(),
            })?;
        let to_crs = |(x, y): (f64, f64)| (read.min_x + x * res_x, read.max_y - y * res_y);
        // The tile's edges in the window's pixels: on its lattice.
        let on_lattice = |v: f64| {
            if (v - v.round()).abs() < 1e-6 {
                v.round()
            } else {
                v
            }
        };
        let edges = tile.map(|t| {
            (
                [
                    on_lattice((t.min_x - read.min_x) / res_x),
                    on_lattice((t.max_x - read.min_x) / res_x),
                ],
                [
                    on_lattice((read.max_y - t.max_y) / res_y),
                    on_lattice((read.max_y - t.min_y) / res_y),
                ],
            )
        });
        let mut levels = Vec::with_capacity(traced.len());
        for line in traced {
            let (geometry, ele) = line.into_inner();
            let mut lines = Vec::new();
            for ring in geometry.0 {
                let points: Vec<(f64, f64)> = ring.0.iter().map(|c| (c.x, c.y)).collect();
                for run in inside_runs(&points, f64::from(width), f64::from(height)) {
                    let run = chaikin(run, self.spec.smoothing);
                    let pieces = match edges {
                        Some((xs, ys)) => split_at(&run, xs, ys),
                        None => vec![run],
                    };
                    lines.extend(
                        pieces
                            .into_iter()
                            .map(|p| p.into_iter().map(to_crs).collect()),
                    );
                }
            }
            if !lines.is_empty() {
                levels.push(Level {
                    ele,
                    major: (ele / major - (ele / major).round()).abs() < 1e-9,
                    lines,
                });
            }
        }
        Ok(levels)
    }
}

/// The levels `values` (NaN for no data) cross at multiples of
/// `interval`, widened to the smallest multiple of it that gives at most
/// `most`; `None` without data or without a level.
fn thresholds(values: &[f64], interval: f64, most: u32) -> Option<Vec<f64>> {
    let (low, high) = values
        .iter()
        .filter(|v| !v.is_nan())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        });
    if low > high {
        return None;
    }
    let count = |step: f64| (high / step).floor() - (low / step).ceil() + 1.0;
    let mut step = interval;
    if count(step) > f64::from(most) {
        // The multiple that fits, or about: twice it always does (a
        // multiplier of 1e36 cannot be counted up one at a time).
        let mut times = (count(step) / f64::from(most)).ceil();
        while count(interval * times) > f64::from(most) {
            times *= 2.0;
        }
        step = interval * times;
    }
    let (first, last) = ((low / step).ceil(), (high / step).floor());
    if first > last {
        return None;
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "at most `most` levels, a u32"
    )]
    let n = (last - first) as i64;
    #[allow(clippy::cast_precision_loss, reason = "n is at most `most`")]
    Some((0..=n).map(|k| (first + k as f64) * step).collect())
}

/// The parts of a traced ring (in pixels, sample `i` at `i + 0.5`) inside
/// the `width` x `height` window and where every value is known: the
/// tracer closes rings along the window's border (points on it are not
/// contour) and a point next to no data is NaN. A ring wholly inside
/// stays closed.
fn inside_runs(ring: &[(f64, f64)], width: f64, height: f64) -> Vec<Vec<(f64, f64)>> {
    let inside = |&(x, y): &(f64, f64)| x > 0.0 && x < width && y > 0.0 && y < height;
    let Some(cut) = ring.iter().position(|p| !inside(p)) else {
        return if ring.len() >= 2 {
            vec![ring.to_vec()]
        } else {
            Vec::new()
        };
    };
    // From a point outside, once round: a run across the ring's start is
    // one run. A closed ring repeats its first point last.
    let closed = ring.len() > 1 && ring.first() == ring.last();
    let body = if closed {
        &ring[..ring.len() - 1]
    } else {
        ring
    };
    let order: Box<dyn Iterator<Item = &(f64, f64)>> = if closed {
        Box::new(body[cut..].iter().chain(&body[..cut]))
    } else {
        Box::new(body.iter())
    };
    let mut runs = Vec::new();
    let mut run: Vec<(f64, f64)> = Vec::new();
    for p in order {
        if inside(p) {
            run.push(*p);
        } else if !run.is_empty() {
            if run.len() >= 2 {
                runs.push(std::mem::take(&mut run));
            }
            run.clear();
        }
    }
    if run.len() >= 2 {
        runs.push(run);
    }
    runs
}

/// `line` cut into pieces where it crosses (or touches) the vertical
/// lines `xs` and the horizontal lines `ys`, each piece ending on the
/// line it crosses, exactly.
fn split_at(line: &[(f64, f64)], xs: [f64; 2], ys: [f64; 2]) -> Vec<Vec<(f64, f64)>> {
    let mut pieces = Vec::new();
    let mut piece: Vec<(f64, f64)> = Vec::with_capacity(line.len());
    for (i, &q) in line.iter().enumerate() {
        if let Some(&p) = i.checked_sub(1).and_then(|k| line.get(k)) {
            // Where p -> q crosses each line, in order along it.
            let mut cuts: Vec<(f64, (f64, f64))> = Vec::new();
            for x in xs {
                if (p.0 - x) * (q.0 - x) < 0.0 {
                    let t = (x - p.0) / (q.0 - p.0);
                    cuts.push((t, (x, p.1 + t * (q.1 - p.1))));
                }
            }
            for y in ys {
                if (p.1 - y) * (q.1 - y) < 0.0 {
                    let t = (y - p.1) / (q.1 - p.1);
                    cuts.push((t, (p.0 + t * (q.0 - p.0), y)));
                }
            }
            cuts.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (_, at) in cuts {
                // Through a corner: one cut.
                if piece.last() == Some(&at) {
                    continue;
                }
                piece.push(at);
                pieces.push(std::mem::replace(&mut piece, vec![at]));
            }
        }
        piece.push(q);
        // A vertex on a line ends a piece and starts the next.
        let on_edge = xs.contains(&q.0) || ys.contains(&q.1);
        if on_edge && i > 0 && i + 1 < line.len() {
            pieces.push(std::mem::replace(&mut piece, vec![q]));
        }
    }
    pieces.push(piece);
    pieces.retain(|p| p.len() >= 2);
    pieces
}

/// `passes` of Chaikin's corner cutting: each segment's points at a
/// quarter and three quarters; an open line keeps its ends, a closed one
/// (first point repeated last) stays closed.
fn chaikin(mut line: Vec<(f64, f64)>, passes: u8) -> Vec<(f64, f64)> {
    for _ in 0..passes {
        if line.len() < 3 {
            break;
        }
        let closed = line.first() == line.last();
        let mut out = Vec::with_capacity(line.len() * 2);
        if !closed {
            out.push(line[0]);
        }
        for w in line.windows(2) {
            let ((x0, y0), (x1, y1)) = (w[0], w[1]);
            out.push((0.75 * x0 + 0.25 * x1, 0.75 * y0 + 0.25 * y1));
            out.push((0.25 * x0 + 0.75 * x1, 0.25 * y0 + 0.75 * y1));
        }
        if closed {
            out.push(out[0]);
        } else {
            out.push(line[line.len() - 1]);
        }
        line = out;
    }
    line
}

/// The features of `levels` as a vector layer's: a multi-line per level
/// with the attributes `fields` (`ele`, `level`; any other is null).
pub(super) fn features(levels: Vec<Level>, fields: &[String]) -> super::Features {
    let mut out = Vec::with_capacity(levels.len());
    for level in levels {
        let Ok(mut multi) = Geometry::empty(OGRwkbGeometryType::wkbMultiLineString) else {
            continue;
        };
        for line in &level.lines {
            let Ok(mut part) = Geometry::empty(OGRwkbGeometryType::wkbLineString) else {
                continue;
            };
            for &(x, y) in line {
                part.add_point_2d((x, y));
            }
            // A part GDAL refuses is left out, not the level.
            let _ = multi.add_geometry(part);
        }
        let attributes = fields
            .iter()
            .map(|f| match f.as_str() {
                "ele" => Some(number(level.ele)),
                "level" => Some(FieldValue::IntegerValue(i32::from(level.major))),
                _ => None,
            })
            .collect();
        out.push((attributes, multi));
    }
    out
}

/// A whole elevation as an integer (drawn in labels as `250`, not
/// `250.0`), any other as a real.
fn number(v: f64) -> FieldValue {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "checked to be a whole number within i32"
    )]
    if v.fract() == 0.0 && v.abs() < f64::from(i32::MAX) {
        FieldValue::IntegerValue(v as i32)
    } else {
        FieldValue::RealValue(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_multiples_of_the_interval_widened_to_fit() {
        let values = [3.0, f64::NAN, 47.0];
        assert_eq!(
            thresholds(&values, 10.0, 100).unwrap(),
            vec![10.0, 20.0, 30.0, 40.0]
        );
        // Four levels do not fit in two: every 20 (two levels) does.
        assert_eq!(thresholds(&values, 10.0, 2).unwrap(), vec![20.0, 40.0]);
        assert_eq!(thresholds(&[f64::NAN], 10.0, 100), None);
        assert_eq!(thresholds(&[11.0, 12.0], 10.0, 100), None);
        // A DEM of 1e38 (kept by a wide valid range): bounded.
        let wide = thresholds(&[-1e38, 1e38], 1.0, 200).unwrap();
        assert!(wide.len() <= 200 && !wide.is_empty());
    }

    #[test]
    fn border_points_cut_rings_and_inner_rings_stay_closed() {
        let closed = vec![(1.0, 1.0), (2.0, 1.0), (2.0, 2.0), (1.0, 1.0)];
        assert_eq!(inside_runs(&closed, 4.0, 4.0), vec![closed.clone()]);
        // A ring along the border: the part inside, joined across its start.
        let ring = vec![
            (1.0, 1.0),
            (2.0, 1.0),
            (4.0, 1.0),
            (4.0, 3.0),
            (0.5, 3.0),
            (0.5, 1.5),
            (1.0, 1.0),
        ];
        assert_eq!(
            inside_runs(&ring, 4.0, 4.0),
            vec![vec![(0.5, 3.0), (0.5, 1.5), (1.0, 1.0), (2.0, 1.0)]]
        );
        // No data (NaN) breaks a line.
        let broken = vec![
            (1.0, 1.0),
            (2.0, 1.0),
            (f64::NAN, 1.0),
            (3.0, 2.0),
            (3.0, 3.0),
        ];
        assert_eq!(
            inside_runs(&broken, 4.0, 4.0),
            vec![vec![(1.0, 1.0), (2.0, 1.0)], vec![(3.0, 2.0), (3.0, 3.0)]]
        );
    }

    #[test]
    fn lines_are_cut_on_the_tile_edges() {
        let line = vec![(0.0, 1.0), (4.0, 1.0), (4.0, 5.0), (6.0, 7.0)];
        let pieces = split_at(&line, [2.0, 5.0], [-1.0, 6.0]);
        assert_eq!(
            pieces,
            vec![
                vec![(0.0, 1.0), (2.0, 1.0)],
                vec![(2.0, 1.0), (4.0, 1.0), (4.0, 5.0), (5.0, 6.0)],
                vec![(5.0, 6.0), (6.0, 7.0)],
            ]
        );
    }

    #[test]
    fn chaikin_keeps_open_ends_and_closed_rings_closed() {
        let open = chaikin(vec![(0.0, 0.0), (4.0, 0.0), (4.0, 4.0)], 1);
        assert_eq!(open.first(), Some(&(0.0, 0.0)));
        assert_eq!(open.last(), Some(&(4.0, 4.0)));
        assert!(open.contains(&(4.0, 1.0)) && open.contains(&(3.0, 0.0)));
        let ring = chaikin(vec![(0.0, 0.0), (4.0, 0.0), (4.0, 4.0), (0.0, 0.0)], 2);
        assert_eq!(ring.first(), ring.last());
    }

    #[test]
    fn intervals_follow_the_zoom_ranges() {
        let mut spec: ContourSpec = serde_json::from_value(serde_json::json!({
            "dem": {"path": "dem.tif"},
            "zooms": {"9": 100, "11": 50, "13": 10}
        }))
        .unwrap();
        assert_eq!(spec.interval_at(8.9), None);
        assert_eq!(spec.interval_at(9.0), Some(100.0));
        assert_eq!(spec.interval_at(12.5), Some(50.0));
        assert_eq!(spec.interval_at(16.0), Some(10.0));
        assert_eq!(spec.min_zoom(), 9);
        spec.zooms.clear();
        assert_eq!(spec.interval_at(0.0), Some(10.0));
        for bad in [0.0, -5.0, f64::NAN] {
            spec.interval = bad;
            assert!(spec.check().unwrap_err().contains("interval"));
        }
    }
}
