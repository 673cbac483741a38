//! `GET /elevation/{layer}?lon=&lat=` and `POST /elevation/{layer}` (a
//! GeoJSON LineString: a profile): a single-band layer's value at points,
//! interpolated bilinearly between the four nearest pixels of the source's
//! own grid (no overview, no warp), as `gdallocationinfo -r bilinear`.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_grid::BBox;
use tessera_source::{Crs, Source, WindowRequest};

use super::error::ApiError;
use super::state::Maps;
use crate::auth::Caller;
use crate::model::Layer;

/// The manual's page on terrain.
const DOCS: &str = "terrain#elevation-at-a-point";

/// Mean radius of the Earth (metres), for profile distances.
const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// The query of `GET /elevation/{layer}`.
#[derive(Debug, Deserialize)]
pub struct PointQuery {
    /// Longitude (WGS 84).
    lon: Option<f64>,
    /// Latitude (WGS 84).
    lat: Option<f64>,
}

/// The query of `POST /elevation/{layer}`.
#[derive(Debug, Deserialize)]
pub struct ProfileQuery {
    /// Samples along the line, ends included (default 100).
    samples: Option<usize>,
}

/// `GET /elevation/{layer}?lon=&lat=`: `{"lon", "lat", "elevation"}`,
/// `elevation` null where the layer has no data. 400 without a valid
/// point or for a layer not of one band.
pub async fn point(
    State(state): State<Maps>,
    caller: Caller,
    Path(name): Path<String>,
    Query(query): Query<PointQuery>,
) -> Result<Json<Value>, ApiError> {
    let layer = elevation_layer(&state, &caller, &name)?;
    let (Some(lon), Some(lat)) = (query.lon, query.lat) else {
        return Err(bad("give the point as ?lon=...&lat=... (WGS 84 degrees)"));
    };
    check_lonlat(lon, lat)?;
    let found = sample(&state, layer, vec![(lon, lat)]).await?;
    Ok(Json(json!({
        "layer": name,
        "lon": lon,
        "lat": lat,
        "elevation": found[0],
    })))
}

/// `POST /elevation/{layer}[?samples=N]` with a GeoJSON LineString (or a
/// Feature of one): N points evenly spaced along it (great-circle
/// distance), each with its distance from the start in metres and its
/// elevation. Bounded: at most `limits.profile_max_samples` samples and
/// `limits.profile_max_vertices` vertices (400 beyond), a body of at most
/// 64 bytes per vertex allowed (413 beyond).
pub async fn profile(
    State(state): State<Maps>,
    caller: Caller,
    Path(name): Path<String>,
    Query(query): Query<ProfileQuery>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let layer = elevation_layer(&state, &caller, &name)?;
    let limits = &state.config.limits;
    let samples = query.samples.unwrap_or(100);
    if !(2..=limits.profile_max_samples).contains(&samples) {
        return Err(bad(&format!(
            "samples={samples}: a profile has 2 to {} samples (limits.profile_max_samples)",
            limits.profile_max_samples
        )));
    }
    let most_bytes = limits.profile_max_vertices.saturating_mul(64).max(4096);
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "InvalidParameterValue",
            format!(
                "a profile's line of more than {most_bytes} bytes (limits.profile_max_vertices: {})",
                limits.profile_max_vertices
            ),
        )
        .documented(DOCS)
    };
    let bytes = super::transport::body::small_body(&headers, body, most_bytes)
        .await
        .ok_or_else(too_large)?;
    let doc: Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(&format!("the body is not JSON: {e}")))?;
    let line = line_of(&doc)?;
    if line.len() > limits.profile_max_vertices {
        return Err(bad(&format!(
            "the line has {} vertices; at most {} (limits.profile_max_vertices)",
            line.len(),
            limits.profile_max_vertices
        )));
    }
    for &(lon, lat) in &line {
        check_lonlat(lon, lat)?;
    }
    let (points, distances) = along(&line, samples);
    let found = sample(&state, layer, points.clone()).await?;
    let samples: Vec<Value> = points
        .iter()
        .zip(distances)
        .zip(found)
        .map(|((&(lon, lat), distance), elevation)| {
            json!({"lon": lon, "lat": lat, "distance": distance, "elevation": elevation})
        })
        .collect();
    Ok(Json(json!({"layer": name, "samples": samples})))
}

fn bad(message: &str) -> ApiError {
    ApiError::bad_request("InvalidParameterValue", message.to_string()).documented(DOCS)
}

fn check_lonlat(lon: f64, lat: f64) -> Result<(), ApiError> {
    if (-180.0..=180.0).contains(&lon) && (-90.0..=90.0).contains(&lat) {
        Ok(())
    } else {
        Err(bad(&format!(
            "({lon}, {lat}) is not a longitude in [-180, 180] and a latitude in [-90, 90]"
        )))
    }
}

/// The layer `name`, visible and granted to `caller`, whose source has one
/// band of values (a DEM).
fn elevation_layer(
    state: &Maps,
    caller: &Caller,
    name: &str,
) -> Result<std::sync::Arc<Layer>, ApiError> {
    let layer = super::tile_layer(&state.registry, caller, name)?;
    let info = layer.source.info();
    if layer.source.as_features().is_some() || info.band_count != 1 {
        return Err(bad(&format!(
            "layer {name:?} is not a single-band raster (a DEM); it has {} bands",
            info.band_count
        )));
    }
    Ok(layer)
}

/// The coordinates of a GeoJSON LineString, or of a Feature's.
fn line_of(doc: &Value) -> Result<Vec<(f64, f64)>, ApiError> {
    let geometry = match doc.get("type").and_then(Value::as_str) {
        Some("Feature") => doc.get("geometry").unwrap_or(&Value::Null),
        _ => doc,
    };
    if geometry.get("type").and_then(Value::as_str) != Some("LineString") {
        return Err(bad(
            "a profile is asked with a GeoJSON LineString (or a Feature of one)",
        ));
    }
    let coordinates = geometry
        .get("coordinates")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("the LineString has no coordinates"))?;
    let line: Vec<(f64, f64)> = coordinates
        .iter()
        .map(|c| match c.as_array().map(Vec::as_slice) {
            Some([lon, lat, ..]) => lon.as_f64().zip(lat.as_f64()),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(|| bad("each coordinate of the LineString is [lon, lat]"))?;
    if line.len() < 2 {
        return Err(bad("a LineString has at least 2 positions"));
    }
    Ok(line)
}

/// The great-circle distance between two points, in metres.
fn haversine((lon0, lat0): (f64, f64), (lon1, lat1): (f64, f64)) -> f64 {
    let (p0, p1) = (lat0.to_radians(), lat1.to_radians());
    let dp = p1 - p0;
    let dl = (lon1 - lon0).to_radians();
    let a = (dp / 2.0).sin().powi(2) + p0.cos() * p1.cos() * (dl / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// `n` points evenly spaced along `line` (its ends included; between
/// vertices, linear in degrees), with their distances from its start.
fn along(line: &[(f64, f64)], n: usize) -> (Vec<(f64, f64)>, Vec<f64>) {
    let lengths: Vec<f64> = line.windows(2).map(|w| haversine(w[0], w[1])).collect();
    let total: f64 = lengths.iter().sum();
    let mut points = Vec::with_capacity(n);
    let mut distances = Vec::with_capacity(n);
    let (mut segment, mut start) = (0, 0.0);
    for i in 0..n {
        #[allow(clippy::cast_precision_loss, reason = "n is a few thousand at most")]
        let at = total * i as f64 / (n - 1) as f64;
        while segment + 1 < lengths.len() && start + lengths[segment] < at {
            start += lengths[segment];
            segment += 1;
        }
        let (a, b) = (line[segment], line[segment + 1]);
        let t = if lengths[segment] > 0.0 {
            ((at - start) / lengths[segment]).clamp(0.0, 1.0)
        } else {
            0.0
        };
        points.push((a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1)));
        distances.push(at);
    }
    (points, distances)
}

/// The layer's values at `points` (lon/lat), on a blocking thread.
async fn sample(
    state: &Maps,
    layer: std::sync::Arc<Layer>,
    points: Vec<(f64, f64)>,
) -> Result<Vec<Option<f64>>, ApiError> {
    let failed = |e: &dyn std::fmt::Display| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "NoApplicableCode",
            format!("reading layer {:?}: {e}", layer.name),
        )
    };
    let source = layer.source.clone();
    let timeout = std::time::Duration::from_secs_f64(state.config.server.render_timeout_secs);
    let task = tokio::task::spawn_blocking(move || values_at(source.as_ref(), &points));
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(Ok(values))) => Ok(values),
        Ok(Ok(Err(e))) => Err(failed(&e)),
        Ok(Err(e)) => Err(failed(&e)),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "reading the elevations took longer than server.render_timeout".to_string(),
        )),
    }
}

/// The source's band 1 at each lon/lat point: bilinear between the
/// centres of the four nearest pixels of its own grid; pixels without data
/// are left out and the others' weights renormalised; `None` where none of
/// the four has data.
pub fn values_at(
    source: &dyn Source,
    points: &[(f64, f64)],
) -> Result<Vec<Option<f64>>, tessera_source::SourceError> {
    let info = source.info();
    let native = &info.native_crs;
    let lonlat = Crs::parse("OGC:CRS84")?;
    let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    lonlat.transform_points(native, &mut xs, &mut ys)?;
    let (res_x, res_y) = source.native_pixel();
    let (x0, y0) = (info.native_bounds.min_x, info.native_bounds.max_y);
    let mut out = Vec::with_capacity(points.len());
    for (x, y) in xs.into_iter().zip(ys) {
        if !(x.is_finite() && y.is_finite()) {
            out.push(None);
            continue;
        }
        // Pixel centres at half-integers: the one up-left of the point.
        let col = (x - x0) / res_x - 0.5;
        let row = (y0 - y) / res_y - 0.5;
        let (c0, r0) = (col.floor(), row.floor());
        let (fc, fr) = (col - c0, row - r0);
        let bbox = BBox::new(
            x0 + c0 * res_x,
            y0 - (r0 + 2.0) * res_y,
            x0 + (c0 + 2.0) * res_x,
            y0 - r0 * res_y,
        )
        .map_err(|e| tessera_source::SourceError::Read {
            path: String::new(),
            source: e.to_string().into(),
        })?;
        let raster = source.read(&WindowRequest {
            bbox,
            crs: native,
            width: 2,
            height: 2,
            cancel: None,
            max_source_pixels: None,
            tile_rows: None,
        })?;
        let Some(band) = raster.bands.first() else {
            out.push(None);
            continue;
        };
        let weights = [
            (1.0 - fc) * (1.0 - fr),
            fc * (1.0 - fr),
            (1.0 - fc) * fr,
            fc * fr,
        ];
        let (mut sum, mut weight) = (0.0, 0.0);
        for (i, w) in weights.iter().enumerate() {
            let v = f64::from(band.get(i));
            if raster.valid[i] > 0 && v.is_finite() {
                sum += w * v;
                weight += w;
            }
        }
        out.push((weight > 1e-12).then(|| sum / weight));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_evenly_spaced_with_both_ends() {
        let line = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0)];
        let (points, distances) = along(&line, 5);
        assert_eq!(points.first(), Some(&(0.0, 0.0)));
        assert_eq!(points.last(), Some(&(1.0, 1.0)));
        assert!((points[2].0 - 1.0).abs() < 1e-3 && points[2].1.abs() < 1e-3);
        let step = distances[1] - distances[0];
        assert!(
            distances
                .windows(2)
                .all(|w| ((w[1] - w[0]) - step).abs() < 1e-6)
        );
        assert!((distances[4] - 2.0 * haversine((0.0, 0.0), (1.0, 0.0))).abs() < 1.0);
    }

    #[test]
    fn lines_are_read_from_geojson_and_bad_ones_named() {
        let feature = json!({"type": "Feature", "geometry": {"type": "LineString", "coordinates": [[6.0, 49.5, 10.0], [6.1, 49.6]]}});
        assert_eq!(line_of(&feature).unwrap(), vec![(6.0, 49.5), (6.1, 49.6)]);
        assert!(line_of(&json!({"type": "Point", "coordinates": [6.0, 49.5]})).is_err());
        assert!(line_of(&json!({"type": "LineString", "coordinates": [[6.0]]})).is_err());
        assert!(line_of(&json!({"type": "LineString", "coordinates": [[6.0, 49.0]]})).is_err());
    }
}
