//! Upstream tile services as sources: an XYZ/TMS URL template, or a WMTS
//! layer read from its capabilities, whose tiles are fetched over HTTP
//! ([`UrlTiles`], a [`TileFetch`]) for a [`TiledSource`] to plan, stitch,
//! warp and pass through.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use tessera_grid::{BBox, TileCoord, TileFormat, TileMatrixSet};

use super::answer::{fetch_error, refuse_non_image};
use super::client::{FetchError, Fetched, NetworkPolicy, Prefetched, UpstreamClient, redacted};
pub use super::spec::{WmtsSourceSpec, XyzSourceSpec};
use crate::tiled::{Pyramid, TileFetch, TiledSource, lonlat_of};
use crate::{Crs, SourceError};

/// An XYZ/TMS upstream as a source.
pub fn open_xyz(spec: &XyzSourceSpec, policy: NetworkPolicy) -> Result<TiledSource, SourceError> {
    let (tiles, pyramid) = xyz_tiles(spec, policy)?;
    Ok(TiledSource::new(
        spec.url.clone(),
        Arc::new(tiles),
        pyramid,
        spec.resampling,
    ))
}

/// An XYZ/TMS upstream's tiles and what its pyramid is.
fn xyz_tiles(
    spec: &XyzSourceSpec,
    policy: NetworkPolicy,
) -> Result<(UrlTiles, Pyramid), SourceError> {
    let open_err = |message: String| SourceError::Open {
        path: spec.url.clone(),
        source: message.into(),
    };
    // GDAL's spelling (`${z}`, written `$${z}` past env substitution)
    // means the same.
    let template = ["z", "x", "y", "-y"].iter().fold(spec.url.clone(), |u, k| {
        u.replace(&format!("${{{k}}}"), &format!("{{{k}}}"))
    });
    let has = |k: &str| template.contains(k);
    if !(has("{z}") && has("{x}") && (has("{y}") || has("{-y}"))) {
        return Err(open_err(
            "the URL template needs {z}, {x} and {y} (or {-y} for rows from the bottom)".into(),
        ));
    }
    let (grid, crs) = match &spec.grid {
        None => (TileMatrixSet::web_mercator_quad(), Crs::parse("EPSG:3857")?),
        Some(g) => {
            let crs = Crs::parse(&g.crs)?;
            let grid = TileMatrixSet::from_spec(g, crs.meters_per_unit)
                .map_err(|e| open_err(e.to_string()))?;
            (grid, crs)
        }
    };
    if spec.min_zoom > spec.max_zoom {
        return Err(open_err("min_zoom is above max_zoom".into()));
    }
    let format = spec.format.unwrap_or_else(|| {
        let path = spec.url.split('?').next().unwrap_or_default();
        std::path::Path::new(path)
            .extension()
            .and_then(|e| e.to_str())
            .and_then(TileFormat::from_extension)
            .unwrap_or(TileFormat::Png)
    });
    if format == TileFormat::Mlt {
        return Err(open_err(
            "MapLibre Tiles (mlt) are not read from upstreams: use their mvt tiles (tessera makes mlt from them)".into(),
        ));
    }
    let sample = fill(&template, &grid, TileCoord::restored(0, 0, 0));
    let url = reqwest::Url::parse(&sample).map_err(|e| open_err(format!("not a URL: {e}")))?;
    let auth = spec.basic_auth.as_ref();
    let client =
        UpstreamClient::shared(&url, &spec.http, policy, &spec.headers, auth).map_err(open_err)?;
    let lonlat = match spec.bounds {
        Some([w, s, e, n]) => {
            BBox::new(w, s, e, n).map_err(|e| open_err(format!("bounds: {e}")))?
        }
        None => lonlat_of(&grid, &crs)?,
    };
    Ok((
        UrlTiles::new(template, client, Vec::new()),
        Pyramid {
            grid,
            crs,
            zooms: (spec.min_zoom, spec.max_zoom),
            format,
            lonlat,
        },
    ))
}

/// A WMTS layer as a source, from the service's capabilities (read
/// within the HTTP timeouts).
pub fn open_wmts(spec: &WmtsSourceSpec, policy: NetworkPolicy) -> Result<TiledSource, SourceError> {
    let open_err = |message: String| SourceError::Open {
        path: spec.url.clone(),
        source: message.into(),
    };
    let mut url =
        reqwest::Url::parse(&spec.url).map_err(|e| open_err(format!("not a URL: {e}")))?;
    if !url.path().to_ascii_lowercase().ends_with(".xml") {
        url.query_pairs_mut()
            .append_pair("SERVICE", "WMTS")
            .append_pair("REQUEST", "GetCapabilities");
    }
    let auth = spec.basic_auth.as_ref();
    let client =
        UpstreamClient::shared(&url, &spec.http, policy, &spec.headers, auth).map_err(open_err)?;
    let fetched = client
        .get(&url, None)
        .map_err(|e| open_err(format!("its capabilities could not be read: {e}")))?;
    if fetched.status != 200 {
        return Err(open_err(format!(
            "its capabilities answered {}",
            fetched.status
        )));
    }
    let text = String::from_utf8_lossy(&fetched.body);
    let layer = super::wmts_caps::parse(&text, spec).map_err(open_err)?;
    let crs = Crs::parse(&layer.crs)?;
    let grid = layer.grid(&crs).map_err(open_err)?;
    let template = layer.template.clone();
    // A template must be a URL the client may ask.
    reqwest::Url::parse(&template.replace(['{', '}'], ""))
        .map_err(|e| open_err(format!("tile URL {template}: {e}")))?;
    let max_zoom = grid.max_zoom();
    let lonlat = match layer.lonlat {
        Some(b) => b,
        None => lonlat_of(&grid, &crs)?,
    };
    Ok(TiledSource::new(
        format!("{} (WMTS layer {})", spec.url, spec.layer),
        Arc::new(UrlTiles::new(template, client, layer.dimensions)),
        Pyramid {
            grid,
            crs,
            zooms: (0, max_zoom),
            format: layer.format,
            lonlat,
        },
        spec.resampling,
    ))
}

/// Tiles fetched over HTTP from a URL template: `{z}`, `{x}`, `{y}`/`{-y}`,
/// and for WMTS `{TileMatrix}`, `{TileRow}`, `{TileCol}` with the matrix
/// identifiers, asked with one client (its connections, concurrency bound
/// and circuit).
#[derive(Debug)]
pub struct UrlTiles {
    template: String,
    client: Arc<UpstreamClient>,
    /// Tiles started ahead of their reads ([`TileFetch::prefetch`]).
    prefetched: Prefetched,
    /// A WMTS layer's dimensions: identifier and the values listed.
    dimensions: Vec<(String, Vec<String>)>,
}

/// Most tiles fetched ahead and kept for their reads: a few metatile
/// windows (a 4x4 metatile with its gutter covers up to 36 tiles).
const MOST_PREFETCHED: usize = 256;

impl UrlTiles {
    fn new(
        template: String,
        client: Arc<UpstreamClient>,
        dimensions: Vec<(String, Vec<String>)>,
    ) -> UrlTiles {
        UrlTiles {
            template,
            client,
            prefetched: Prefetched::new(MOST_PREFETCHED),
            dimensions,
        }
    }

    fn url_of(&self, grid: &TileMatrixSet, coord: TileCoord) -> Result<reqwest::Url, SourceError> {
        let text = fill(&self.template, grid, coord);
        reqwest::Url::parse(&text).map_err(|e| SourceError::Upstream {
            url: text.clone(),
            message: format!("not a URL: {e}"),
        })
    }

    /// The same tiles with dimension `values` in their URLs: `{name}` in
    /// the template (any case, `{Time}` as WMTS writes it), or, for a KVP
    /// template without it, added as a parameter; sharing this client.
    fn with_values(&self, values: &[(String, String)]) -> UrlTiles {
        let mut template = self.template.clone();
        for (dimension, value) in values {
            let encoded: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
            let placeholder = format!("{{{dimension}}}");
            let found = template
                .to_ascii_lowercase()
                .find(&placeholder.to_ascii_lowercase());
            match found {
                Some(at) => template.replace_range(at..at + placeholder.len(), &encoded),
                None if template.contains('?') => {
                    let id = self
                        .dimensions
                        .iter()
                        .find(|(id, _)| id.eq_ignore_ascii_case(dimension))
                        .map_or(dimension.as_str(), |(id, _)| id.as_str());
                    let _ = write!(template, "&{id}={encoded}");
                }
                None => {}
            }
        }
        UrlTiles::new(template, self.client.clone(), self.dimensions.clone())
    }
}

impl TileFetch for UrlTiles {
    /// Fetches the tiles at once (those fetched ahead taken); `None` where
    /// the upstream has no tile (404, 204).
    fn tiles(
        &self,
        grid: &TileMatrixSet,
        coords: &[TileCoord],
        cancel: Option<&AtomicBool>,
    ) -> Result<Vec<Option<Bytes>>, SourceError> {
        let urls = coords
            .iter()
            .map(|c| self.url_of(grid, *c))
            .collect::<Result<Vec<_>, _>>()?;
        let answers = self.prefetched.get_all(&self.client, &urls, cancel);
        urls.iter()
            .zip(answers)
            .map(|(url, answer)| judge(url, answer))
            .collect()
    }

    /// The tile's URL without its secrets.
    fn describe(&self, grid: &TileMatrixSet, coord: TileCoord) -> String {
        self.url_of(grid, coord)
            .map_or_else(|_| self.template.clone(), |u| redacted(&u))
    }

    fn prefetch(&self, grid: &TileMatrixSet, coords: &[TileCoord]) {
        for coord in coords {
            if let Ok(url) = self.url_of(grid, *coord) {
                self.prefetched.start(&self.client, url);
            }
        }
    }

    fn dimension_values(&self, name: &str) -> Option<&[String]> {
        self.dimensions
            .iter()
            .find(|(id, _)| id.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Whether the template has `{name}` (any case) or is a KVP query it
    /// can join.
    fn takes_value(&self, name: &str) -> bool {
        self.template.contains('?')
            || self
                .template
                .to_ascii_lowercase()
                .contains(&format!("{{{}}}", name.to_ascii_lowercase()))
    }

    fn at_values(&self, values: &[(String, String)]) -> Option<Arc<dyn TileFetch>> {
        Some(Arc::new(self.with_values(values)))
    }
}

/// What an upstream tile answer means: bytes, no tile, or an error.
fn judge(
    url: &reqwest::Url,
    answer: Result<Fetched, FetchError>,
) -> Result<Option<Bytes>, SourceError> {
    let fetched = answer.map_err(|e| fetch_error(url, e))?;
    if matches!(fetched.status, 404 | 204) {
        return Ok(None);
    }
    refuse_non_image(url, &fetched, "a tile")?;
    Ok(Some(fetched.body))
}

/// The template with the tile's numbers (and WMTS matrix identifier) in.
fn fill(template: &str, grid: &TileMatrixSet, c: TileCoord) -> String {
    let matrix = grid.matrix(c.z());
    let flipped = matrix.map_or(0, |m| {
        m.matrix_height.saturating_sub(1).saturating_sub(c.y())
    });
    let matrix_id = matrix.map_or_else(|| c.z().to_string(), |m| m.id.clone());
    template
        .replace("{z}", &c.z().to_string())
        .replace("{x}", &c.x().to_string())
        .replace("{-y}", &flipped.to_string())
        .replace("{y}", &c.y().to_string())
        .replace("{TileMatrix}", &matrix_id)
        .replace("{TileCol}", &c.x().to_string())
        .replace("{TileRow}", &c.y().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_take_rows_from_the_top_or_the_bottom_and_wmts_matrix_ids() {
        let g = TileMatrixSet::web_mercator_quad();
        let c = TileCoord::restored(3, 5, 1);
        assert_eq!(
            fill("http://h/{z}/{x}/{y}.png", &g, c),
            "http://h/3/5/1.png"
        );
        assert_eq!(
            fill("http://h/{z}/{x}/{-y}.png", &g, c),
            "http://h/3/5/6.png"
        );
        assert_eq!(
            fill("http://h/{TileMatrix}/{TileRow}/{TileCol}.png", &g, c),
            "http://h/3/1/5.png"
        );
    }

    #[test]
    fn gdal_style_placeholders_mean_the_same() {
        let spec: XyzSourceSpec =
            serde_json::from_str(r#"{"url": "http://tiles.example/${z}/${x}/${-y}.png"}"#).unwrap();
        let (tiles, pyramid) = xyz_tiles(&spec, NetworkPolicy::default()).unwrap();
        assert_eq!(
            tiles
                .url_of(&pyramid.grid, TileCoord::restored(3, 5, 1))
                .unwrap()
                .as_str(),
            "http://tiles.example/3/5/6.png"
        );
        let bad: XyzSourceSpec =
            serde_json::from_str(r#"{"url": "http://tiles.example/{z}/{x}.png"}"#).unwrap();
        let e = open_xyz(&bad, NetworkPolicy::default()).unwrap_err();
        let cause = std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(cause.contains("needs {z}, {x} and {y}"), "{cause}");
    }

    #[test]
    fn values_fill_their_placeholder_in_any_case_or_join_a_kvp_query() {
        let open = |url: &str| {
            let spec: XyzSourceSpec =
                serde_json::from_str(&format!(r#"{{"url": "{url}"}}"#)).unwrap();
            xyz_tiles(&spec, NetworkPolicy::default()).unwrap().0
        };
        let c = TileCoord::restored(1, 0, 1);
        let grid = TileMatrixSet::web_mercator_quad();
        let at = |s: &UrlTiles| s.url_of(&grid, c).unwrap().as_str().to_string();
        let values = [("time".to_string(), "2024-01-01T00:00:00Z".to_string())];
        let rest = open("http://h/{Time}/{z}/{x}/{y}.png").with_values(&values);
        assert_eq!(at(&rest), "http://h/2024-01-01T00%3A00%3A00Z/1/0/1.png");
        let kvp = open("http://h/tile?z={z}&x={x}&y={y}").with_values(&values);
        assert_eq!(
            at(&kvp),
            "http://h/tile?z=1&x=0&y=1&time=2024-01-01T00%3A00%3A00Z"
        );
        assert!(open("http://h/{TIME}/{z}/{x}/{y}.png").takes_value("time"));
        assert!(open("http://h/t?z={z}&x={x}&y={y}").takes_value("time"));
        assert!(!open("http://h/{z}/{x}/{y}.png").takes_value("time"));
    }
}
