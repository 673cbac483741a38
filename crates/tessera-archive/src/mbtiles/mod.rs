//! MBTiles 1.3: an SQLite database of a `tiles` table (or view: rows
//! from the bottom, as TMS counts them) and a `metadata` table of names
//! and values. This module owns the schema, the metadata rows (`name`,
//! `format`, `type`, `version`, `bounds`, `center`, `minzoom`, `maxzoom`,
//! `description`, `attribution`, and `json` with `vector_layers` for
//! vector tiles) read and written, and the row order. [`read`] reads
//! archives, [`write`] writes them; the MBTiles tile store keeps its tiles
//! in the same schema.

pub mod read;
pub(crate) mod write;

use rusqlite::{Connection, OptionalExtension as _};
use tessera_grid::{BBox, TileFormat};

use crate::{MAX_METADATA_BYTES, TileMetadata, format_named, quoted};

/// The tables and indexes of an MBTiles database, created when missing.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS metadata (name TEXT, value TEXT);
     CREATE UNIQUE INDEX IF NOT EXISTS metadata_name ON metadata (name);
     CREATE TABLE IF NOT EXISTS tiles (zoom_level INTEGER, tile_column INTEGER, tile_row INTEGER, tile_data BLOB);
     CREATE UNIQUE INDEX IF NOT EXISTS tile_index ON tiles (zoom_level, tile_column, tile_row);";

/// The specification version written in the `version` row.
pub const VERSION: &str = "1.3";

/// The MBTiles `tile_row` of XYZ row `y` at zoom `z` (rows from the
/// bottom), and back: the flip is its own inverse. `y` must be below 2^z.
pub fn flipped_row(z: u8, y: u32) -> u32 {
    ((1u64 << z) - 1 - u64::from(y)) as u32
}

/// The metadata rows written for `meta`.
pub fn metadata_rows(meta: &TileMetadata) -> Vec<(&'static str, String)> {
    let [w, s, e, n] = meta.bounds_or_world();
    let (lon, lat, zoom) = meta.center_or_middle();
    let mut rows = vec![
        ("name", meta.name.clone().unwrap_or_default()),
        ("format", meta.format.archive_name().to_string()),
        ("type", meta.layer_type().to_string()),
        ("version", VERSION.to_string()),
        ("bounds", format!("{w},{s},{e},{n}")),
        ("center", format!("{lon},{lat},{zoom}")),
        ("minzoom", meta.min_zoom.to_string()),
        ("maxzoom", meta.max_zoom.to_string()),
    ];
    if let Some(d) = &meta.description {
        rows.push(("description", d.clone()));
    }
    if let Some(a) = &meta.attribution {
        rows.push(("attribution", a.clone()));
    }
    if let Some(encoding) = meta.format.elevation() {
        // What terrain tools read (tileserver-gl, MapLibre's `raster-dem`
        // `encoding`): `terrarium` or `mapbox`.
        rows.push(("encoding", encoding.maplibre_name().to_string()));
    }
    if let Some(layers) = &meta.vector_layers {
        rows.push((
            "json",
            serde_json::json!({ "vector_layers": layers }).to_string(),
        ));
    }
    rows
}

/// What the archive open on `conn` says about itself, at `version`: its
/// metadata rows (values over [`MAX_METADATA_BYTES`] refused unread), and
/// where they are silent, its tiles (zooms from the `tiles` table, the
/// format from the first tile's bytes).
pub fn read_metadata(conn: &Connection, version: Option<String>) -> Result<TileMetadata, String> {
    let kinds: Vec<(String, String)> = conn
        .prepare("SELECT name, type FROM sqlite_master WHERE name IN ('tiles', 'metadata')")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()
        })
        .map_err(|e| format!("not an MBTiles database: {e}"))?;
    for table in ["tiles", "metadata"] {
        if !kinds.iter().any(|(n, _)| n == table) {
            return Err(format!(
                "not an MBTiles database: it has no `{table}` table"
            ));
        }
    }
    // A value past the cap is not read (SQLite knows a value's length
    // without loading it).
    let rows: Vec<(String, Option<String>, i64)> = conn
        .prepare(
            "SELECT name, CASE WHEN length(CAST(value AS BLOB)) <= ?1 THEN value END, \
             length(CAST(value AS BLOB)) FROM metadata",
        )
        .and_then(|mut s| {
            s.query_map([MAX_METADATA_BYTES as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                ))
            })?
            .collect::<Result<_, _>>()
        })
        .map_err(|e| format!("its metadata table cannot be read: {e}"))?;
    if let Some((key, _, len)) = rows
        .iter()
        .find(|(_, v, _)| v.is_none())
        .filter(|(_, _, len)| *len > 0)
    {
        return Err(format!(
            "metadata {} holds {len} bytes, more than {MAX_METADATA_BYTES}",
            quoted(key)
        ));
    }
    let rows: Vec<(String, String)> = rows
        .into_iter()
        .map(|(k, v, _)| (k, v.unwrap_or_default()))
        .collect();
    let meta = |k: &str| {
        rows.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let numbers = |k: &str, n: usize| -> Result<Option<Vec<f64>>, String> {
        let Some(text) = meta(k) else { return Ok(None) };
        let v: Option<Vec<f64>> = text
            .split(',')
            .map(|p| p.trim().parse::<f64>().ok().filter(|x| x.is_finite()))
            .collect();
        match v {
            Some(v) if v.len() == n => Ok(Some(v)),
            _ => Err(format!("metadata {k} {} is not {n} numbers", quoted(&text))),
        }
    };
    let zoom = |k: &str| -> Result<Option<u8>, String> {
        meta(k)
            .map(|t| {
                t.parse::<u8>()
                    .ok()
                    .filter(|z| *z <= 30)
                    .ok_or_else(|| format!("metadata {k} {} is not a zoom level", quoted(&t)))
            })
            .transpose()
    };
    let (min_zoom, max_zoom) = match (zoom("minzoom")?, zoom("maxzoom")?) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            let (a, b): (Option<i64>, Option<i64>) = conn
                .query_row(
                    "SELECT min(zoom_level), max(zoom_level) FROM tiles",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .map_err(|e| format!("its tiles table cannot be read: {e}"))?;
            let level = |z: Option<i64>| z.and_then(|z| u8::try_from(z).ok()).unwrap_or(0);
            (level(a), level(b))
        }
    };
    if min_zoom > max_zoom || max_zoom > 30 {
        return Err(format!("zooms {min_zoom}..{max_zoom} are not a zoom range"));
    }
    let format = match meta("format") {
        Some(f) => format_named(&f)
            .ok_or_else(|| format!("metadata format {}: png, jpg, webp or pbf", quoted(&f)))?,
        None => {
            let first: Option<Vec<u8>> = conn
                .query_row(
                    "SELECT substr(tile_data, 1, 64) FROM tiles LIMIT 1",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| format!("its tiles table cannot be read: {e}"))?;
            first
                .as_deref()
                .and_then(sniff)
                .ok_or_else(|| String::from("metadata names no format and no tile tells it"))?
        }
    };
    let bounds = numbers("bounds", 4)?.and_then(|b| {
        BBox::new(
            b[0].max(-180.0),
            b[1].max(-90.0),
            b[2].min(180.0),
            b[3].min(90.0),
        )
        .ok()
    });
    let center = numbers("center", 3)?.map(|c| (c[0], c[1], c[2].clamp(0.0, 30.0) as u8));
    let json: Option<serde_json::Value> = meta("json")
        .map(|t| serde_json::from_str(&t).map_err(|e| format!("metadata json is not JSON: {e}")))
        .transpose()?;
    Ok(TileMetadata {
        format,
        min_zoom,
        max_zoom,
        bounds,
        center,
        name: meta("name"),
        description: meta("description"),
        attribution: meta("attribution"),
        vector_layers: json.and_then(|j| j.get("vector_layers").cloned()),
        version,
    })
}

/// The format a tile's first bytes say.
fn sniff(bytes: &[u8]) -> Option<TileFormat> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return Some(TileFormat::Mvt);
    }
    TileFormat::sniff(bytes)
}
