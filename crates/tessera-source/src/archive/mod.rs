//! Tile archives as sources: PMTiles and MBTiles files, local, over HTTP(S)
//! (range requests through the egress guard) or in an object store (byte
//! ranges read by what the server opens: it holds the stores'
//! credentials).
//!
//! An archive is a [`TiledSource`] whose tiles come from the archive
//! ([`ArchiveTiles`], a [`TileFetch`]) instead of URLs: a layer tiled in
//! the archive's grid (WebMercatorQuad) in its
//! format passes the stored bytes through (vector tiles kept
//! gzip-compressed, as tessera keeps them); any other read (another grid or
//! CRS, a WMS map) decodes and warps the archive's raster tiles like an
//! upstream's. What the archive says about itself (zooms, bounds, centre,
//! attribution, `vector_layers`) is its [`TileMetadata`].

#[cfg(feature = "vector")]
mod draw;
#[cfg(feature = "upstream")]
mod http_bytes;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ::bytes::Bytes;
use serde::Deserialize;
use tessera_grid::{TileCoord, TileFormat, TileMatrixSet};

#[cfg(feature = "upstream")]
pub use self::http_bytes::HttpBytes;
use crate::tiled::{Pyramid, TileFetch, TiledSource, lonlat_of};
use crate::{Crs, HttpSettings, NetworkPolicy, Resampling, SourceError, TileMetadata};
pub use tessera_archive::bytes::{
    ArchiveBytes, LocalBytes, Ranged, WOULD_WAIT_MESSAGE, without_waiting,
};
pub use tessera_archive::{ArchiveFormat, TileArchive};
use tessera_archive::{mbtiles, pmtiles};

/// Bytes of directories a PMTiles reader keeps by default (32 MiB).
const DEFAULT_DIRECTORY_CACHE_BYTES: u64 = 32 << 20;

fn default_directory_cache_bytes() -> u64 {
    DEFAULT_DIRECTORY_CACHE_BYTES
}

/// Seconds between looks at whether an archive was replaced.
pub const DEFAULT_CHECK_SECS: f64 = 5.0;

fn default_check_secs() -> f64 {
    DEFAULT_CHECK_SECS
}

/// `source: { type: pmtiles | mbtiles, path: ... }`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveSpec {
    /// A local file, an `http(s)://` URL, or an object (`s3://bucket/key`,
    /// `gs://`, `az://`).
    pub path: String,
    /// Object store client options (as stores of `type: object` take),
    /// over the `AWS_*`/`GOOGLE_*`/`AZURE_*` environment.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// Timeouts, retries and concurrency of HTTP range requests.
    #[serde(default)]
    pub http: HttpSettings,
    /// Most bytes of PMTiles leaf directories kept in memory.
    #[serde(default = "default_directory_cache_bytes")]
    pub directory_cache_bytes: u64,
    /// How tiles are resampled when warped (another grid or CRS).
    #[serde(default)]
    pub resampling: Resampling,
    /// Where an MBTiles file that is not local is copied to be read
    /// (SQLite reads files); default the system's temporary directory.
    #[serde(default)]
    pub download_dir: Option<String>,
    /// How a vector archive is drawn into pictures (PNG tiles in another
    /// grid, maps): rules as a vector source takes them (default: a blue
    /// outline over a translucent fill). Built with the `vector` feature.
    #[cfg(feature = "vector")]
    #[serde(default)]
    pub style: Vec<tessera_carto::style::Rule>,
    /// Seconds between looks (a `stat`, or one request for an archive
    /// elsewhere) at whether the archive was replaced; a replaced archive
    /// reloads the configuration, so that its layer's cached tiles are
    /// kept under a new fingerprint and never served again. Reads of the
    /// archive notice a replacement at once whatever this is.
    #[serde(default = "default_check_secs")]
    pub check_secs: f64,
    /// Seconds a new version of the archive must hold (seen the same at
    /// looks this far apart) before it replaces the one served (default
    /// 10): an archive whose version changes at every look (an ETag that
    /// is not a version) reloads nothing.
    #[serde(default = "default_settle_secs")]
    pub settle_secs: f64,
    /// Longest MBTiles archive copied from elsewhere to be read, in bytes
    /// (default 32 GiB): a longer one is refused, its partial copy
    /// removed.
    #[serde(default = "default_max_copy_bytes")]
    pub max_copy_bytes: u64,
}

/// Seconds a new archive version must hold by default.
pub const DEFAULT_SETTLE_SECS: f64 = 10.0;

fn default_settle_secs() -> f64 {
    DEFAULT_SETTLE_SECS
}

fn default_max_copy_bytes() -> u64 {
    32 << 30
}

/// Where an archive lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A local file.
    Local,
    /// An `http(s)://` URL.
    Http,
    /// An object in an object store.
    Object,
}

impl ArchiveSpec {
    /// Where the archive lies, from its path's scheme.
    pub fn place(&self) -> Place {
        let scheme = self
            .path
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("http" | "https") => Place::Http,
            Some("s3" | "s3a" | "gs" | "az" | "azure" | "abfs" | "abfss") => Place::Object,
            _ => Place::Local,
        }
    }
}

/// Opens the archive `spec` names as a source. `object` reads an archive
/// in an object store (the server opens it with the stores' credentials);
/// an object path without it is refused.
pub fn open(
    kind: ArchiveFormat,
    spec: &ArchiveSpec,
    policy: NetworkPolicy,
    object: Option<Arc<dyn ArchiveBytes>>,
) -> Result<TiledSource, SourceError> {
    let open_err = |message: String| SourceError::Open {
        path: spec.path.clone(),
        source: message.into(),
    };
    if !(spec.check_secs.is_finite() && spec.check_secs > 0.0) {
        return Err(open_err(format!(
            "check_secs {}: a number of seconds above 0",
            spec.check_secs
        )));
    }
    if !(spec.settle_secs.is_finite() && spec.settle_secs >= 0.0) {
        return Err(open_err(format!(
            "settle_secs {}: a number of seconds, 0 or more",
            spec.settle_secs
        )));
    }
    if spec.max_copy_bytes == 0 {
        return Err(open_err("max_copy_bytes must be at least 1".into()));
    }
    let bytes: Option<Arc<dyn ArchiveBytes>> = match (spec.place(), object) {
        (_, Some(o)) => Some(o),
        #[cfg(feature = "upstream")]
        (Place::Http, None) => Some(Arc::new(
            HttpBytes::open(&spec.path, spec.http.clone(), policy).map_err(open_err)?,
        )),
        #[cfg(not(feature = "upstream"))]
        (Place::Http, None) => {
            drop(policy);
            return Err(open_err(
                "archives over HTTP are read with the `upstream` feature, not built in".into(),
            ));
        }
        (Place::Object, None) => {
            return Err(open_err(
                "an archive in an object store is opened by the server (tessera serve)".into(),
            ));
        }
        (Place::Local, None) => None,
    };
    let archive: Arc<dyn TileArchive> = match kind {
        ArchiveFormat::Pmtiles => {
            let bytes = match bytes {
                Some(b) => b,
                None => Arc::new(LocalBytes::open(&spec.path).map_err(open_err)?),
            };
            Arc::new(
                pmtiles::read::Pmtiles::open(bytes, spec.directory_cache_bytes)
                    .map_err(open_err)?,
            )
        }
        ArchiveFormat::Mbtiles => {
            let (local, remote) = match bytes {
                None => (std::path::PathBuf::from(&spec.path), None),
                Some(b) => {
                    let (copy, version) = mbtiles::read::download(
                        b.as_ref(),
                        spec.download_dir.as_deref(),
                        spec.max_copy_bytes,
                    )
                    .map_err(open_err)?;
                    (copy, Some((b, version)))
                }
            };
            Arc::new(mbtiles::read::Mbtiles::open(&local, &spec.path, remote).map_err(open_err)?)
        }
    };
    let tiles = ArchiveTiles {
        name: spec.path.clone(),
        #[cfg(feature = "vector")]
        rules: rules_of(spec).map_err(open_err)?,
        archive,
    };
    let metadata = tiles.archive.metadata().clone();
    let crs = Crs::parse("EPSG:3857")?;
    // Raster tiles of 512 pixels (or more) cut the same tiles with more
    // pixels: the HiDPI twin of the grid (`WebMercatorQuad@2x`).
    let grid = match sample_width(tiles.archive.as_ref(), &metadata) {
        Some(w) if w > 256 && w % 256 == 0 => TileMatrixSet::web_mercator_quad().scaled(w / 256),
        _ => TileMatrixSet::web_mercator_quad(),
    };
    let lonlat = match metadata.bounds {
        Some(b) => b,
        None => lonlat_of(&grid, &crs)?,
    };
    let pyramid = Pyramid {
        grid,
        crs,
        zooms: (metadata.min_zoom, metadata.max_zoom),
        format: metadata.format,
        lonlat,
    };
    Ok(
        TiledSource::new(spec.path.clone(), Arc::new(tiles), pyramid, spec.resampling)
            .with_metadata(metadata),
    )
}

/// The rules a vector archive is drawn with: its `style:` checked, or the
/// default.
#[cfg(feature = "vector")]
fn rules_of(spec: &ArchiveSpec) -> Result<Vec<tessera_carto::style::Rule>, String> {
    tessera_carto::style::check_rules(&spec.style)?;
    if spec.style.iter().any(|r| r.label.is_some()) {
        return Err(
            "labels are drawn for vector sources only, not for tile archives drawn as images"
                .into(),
        );
    }
    Ok(if spec.style.is_empty() {
        draw::default_rules()
    } else {
        spec.style.clone()
    })
}

/// An archive's tiles for a [`TiledSource`]: read by coordinates of
/// WebMercatorQuad (or its `@2x` twin: the same tiles), vector tiles drawn
/// with the layer's rules.
#[derive(Debug)]
pub struct ArchiveTiles {
    /// The archive's path, for messages.
    name: String,
    archive: Arc<dyn TileArchive>,
    /// How vector tiles are drawn into pictures.
    #[cfg(feature = "vector")]
    rules: Vec<tessera_carto::style::Rule>,
}

impl TileFetch for ArchiveTiles {
    fn tiles(
        &self,
        _grid: &TileMatrixSet,
        coords: &[TileCoord],
        _cancel: Option<&AtomicBool>,
    ) -> Result<Vec<Option<Bytes>>, SourceError> {
        self.archive
            .tiles(coords)
            // A 502 for the tile: the archive failed, as an upstream may.
            .map_err(|e| SourceError::Upstream {
                url: e.archive,
                message: e.message,
            })
    }

    fn describe(&self, _grid: &TileMatrixSet, coord: TileCoord) -> String {
        self.archive.describe(coord)
    }

    fn is_local(&self) -> bool {
        self.archive.is_local()
    }

    fn version_now(&self) -> Option<Result<Option<String>, SourceError>> {
        Some(
            self.archive
                .version_now()
                .map_err(|message| SourceError::Upstream {
                    url: self.name.clone(),
                    message,
                }),
        )
    }

    #[cfg(feature = "vector")]
    fn rules(&self) -> Option<&[tessera_carto::style::Rule]> {
        Some(&self.rules)
    }

    #[cfg(feature = "vector")]
    fn draw(
        &self,
        tiles: &[(TileCoord, Bytes)],
        grid: &TileMatrixSet,
        crs: &Crs,
        request: &crate::WindowRequest<'_>,
        zoom: f64,
    ) -> Option<Result<tessera_image::Raster, SourceError>> {
        Some(
            draw::draw(tiles, grid, crs, request, &self.rules, zoom).map_err(|message| {
                SourceError::Upstream {
                    url: self.name.clone(),
                    message,
                }
            }),
        )
    }
}

/// The width in pixels of a raster archive's tile at its centre (or the
/// middle of its bounds) at its lowest zoom; `None` for vector tiles, or
/// when there is no tile there or it says no size.
fn sample_width(archive: &dyn TileArchive, meta: &TileMetadata) -> Option<u32> {
    if meta.format == TileFormat::Mvt {
        return None;
    }
    let (lon, lat) = match (meta.center, meta.bounds) {
        (Some((lon, lat, _)), _) => (lon, lat),
        (None, Some(b)) => (
            f64::midpoint(b.min_x, b.max_x),
            f64::midpoint(b.min_y, b.max_y),
        ),
        (None, None) => (0.0, 0.0),
    };
    let z = meta.min_zoom;
    let n = f64::from(1u32 << z);
    let lat = lat.clamp(-85.0511, 85.0511).to_radians();
    let (x, y) = (
        (((lon + 180.0) / 360.0 * n).floor().clamp(0.0, n - 1.0)) as u32,
        (((1.0 - lat.tan().asinh() / std::f64::consts::PI) / 2.0 * n)
            .floor()
            .clamp(0.0, n - 1.0)) as u32,
    );
    let tile = archive
        .tiles(&[TileCoord::restored(z, x, y)])
        .ok()?
        .pop()??;
    tessera_image::declared_size(&tile, TileFormat::sniff(&tile).unwrap_or(meta.format))
        .ok()
        .map(|(w, _)| w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_come_from_the_path() {
        let spec = |path: &str| ArchiveSpec {
            path: path.into(),
            options: BTreeMap::new(),
            http: HttpSettings::default(),
            directory_cache_bytes: 1,
            resampling: Resampling::default(),
            download_dir: None,
            #[cfg(feature = "vector")]
            style: Vec::new(),
            check_secs: DEFAULT_CHECK_SECS,
            settle_secs: DEFAULT_SETTLE_SECS,
            max_copy_bytes: default_max_copy_bytes(),
        };
        assert_eq!(spec("/data/x.pmtiles").place(), Place::Local);
        assert_eq!(spec("HTTPS://h/x.pmtiles").place(), Place::Http);
        assert_eq!(spec("s3://b/x.pmtiles").place(), Place::Object);
    }
}
