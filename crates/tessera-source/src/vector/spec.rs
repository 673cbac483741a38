//! What a vector source is configured with: the dataset, its layers (one,
//! or several drawn in order and served as the layers of one vector tile),
//! their filters, fields and styles, and the limits of reading them.

use serde::Deserialize;

use tessera_carto::style::Rule;

/// `source: { type: vector, ... }`: one data layer (`layer`, `where`,
/// `fields`, `style`), or several (`layers:`), from one dataset.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VectorSpec {
    /// A file GDAL reads as vector data, a `PG:` connection string or a
    /// `postgres://` URL (credentials through `${ENV}`).
    pub path: String,
    /// The layer (a table for PostGIS); the first one when absent.
    #[serde(default)]
    pub layer: Option<String>,
    /// An attribute filter in OGR SQL (pushed to the database by PostGIS).
    #[serde(default, rename = "where")]
    pub filter: Option<String>,
    /// Attributes the layer offers in vector tiles, and the only ones its
    /// feature info shows (without it, feature info shows every attribute
    /// but binary ones); the style's filter fields are read in any case.
    /// Each must exist.
    #[serde(default)]
    pub fields: Vec<String>,
    /// How features are drawn into map images: rules in drawing order
    /// (none: the layer is only served as vector tiles and feature info).
    #[serde(default)]
    pub style: Vec<Rule>,
    /// Several data layers instead of `layer`/`where`/`fields`/`style`:
    /// drawn in this order, and each a layer of the vector tiles.
    #[serde(default)]
    pub layers: Vec<VectorLayerSpec>,
    /// Vector tile settings.
    #[serde(default)]
    pub mvt: MvtSettings,
    /// Only the features a dimension value admits (set by the server for
    /// a layer at a value, never configured).
    #[serde(skip)]
    pub value_filter: Option<super::ValueFilter>,
    /// A MapLibre style document to draw with instead of the rules (set by
    /// the server from a layer's `style: { maplibre: ... }`).
    #[serde(skip)]
    pub maplibre: Option<tessera_carto::maplibre::MapLibreSpec>,
    /// Contour lines of a DEM instead of a dataset's features (set from a
    /// `type: contours` source, never configured here).
    #[serde(skip)]
    pub contours: Option<Box<super::ContourSpec>>,
    /// Most features one read may draw (default 200,000): more is an error
    /// that says to narrow the window or the `where`.
    #[serde(default = "default_max_features")]
    pub max_features: u64,
    /// Longest text value feature info shows, in characters (default
    /// 1,024): a longer one is cut and ends with `…`.
    #[serde(default = "default_info_max_chars")]
    pub info_max_chars: usize,
    /// Most handles (database connections) reads use at once (default 4).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// PostgreSQL's `statement_timeout` and the longest wait for a free
    /// connection, in milliseconds (default 10,000).
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
}

impl VectorSpec {
    /// The vector source of `lines`' contour lines: the DEM's path (whose
    /// changes the layer's fingerprint follows), the one data layer
    /// `contours` with its attributes, style and tile settings.
    pub fn of_contours(lines: super::ContourSpec) -> VectorSpec {
        VectorSpec {
            path: lines.dem.path.clone(),
            layer: Some(super::CONTOUR_LAYER.into()),
            filter: None,
            fields: super::CONTOUR_FIELDS
                .iter()
                .map(|f| (*f).to_string())
                .collect(),
            style: lines.style.clone(),
            layers: Vec::new(),
            mvt: lines.mvt,
            value_filter: None,
            maplibre: None,
            max_features: default_max_features(),
            info_max_chars: default_info_max_chars(),
            max_connections: default_max_connections(),
            statement_timeout_ms: default_statement_timeout_ms(),
            contours: Some(Box::new(lines)),
        }
    }
}

/// One data layer of a vector source.
#[derive(Debug, Clone, Deserialize, PartialEq, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VectorLayerSpec {
    /// Its name in vector tiles and feature info (default: the data
    /// layer's name).
    #[serde(default)]
    pub name: Option<String>,
    /// The data layer (a table for PostGIS); the dataset's first when absent.
    #[serde(default)]
    pub layer: Option<String>,
    /// An attribute filter in OGR SQL (SQL of the database for PostGIS).
    #[serde(default, rename = "where")]
    pub filter: Option<String>,
    /// Attributes offered in vector tiles; feature info shows only these
    /// when given, else every attribute but binary ones.
    #[serde(default)]
    pub fields: Vec<String>,
    /// Drawing rules, in order.
    #[serde(default)]
    pub style: Vec<Rule>,
    /// The lowest zoom whose vector tiles hold this layer (default 0).
    #[serde(default)]
    pub min_zoom: Option<u8>,
    /// The highest zoom whose vector tiles hold this layer (default all).
    #[serde(default)]
    pub max_zoom: Option<u8>,
}

/// How vector tiles are cut.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MvtSettings {
    /// Tile coordinates per tile side (default 4096).
    #[serde(default = "default_extent")]
    pub extent: u32,
    /// Tile coordinates kept beyond each edge (default 64), so that lines
    /// and outlines do not end at the tile's edge.
    #[serde(default = "default_buffer")]
    pub buffer: u32,
    /// For PostGIS, let the database cut the tiles (`ST_AsMVT`), as
    /// Martin does (default true); else features are read and cut here.
    #[serde(default = "yes")]
    pub in_database: bool,
}

impl Default for MvtSettings {
    fn default() -> MvtSettings {
        MvtSettings {
            extent: default_extent(),
            buffer: default_buffer(),
            in_database: true,
        }
    }
}

fn default_extent() -> u32 {
    4096
}

fn default_buffer() -> u32 {
    64
}

fn yes() -> bool {
    true
}

fn default_max_features() -> u64 {
    200_000
}

fn default_info_max_chars() -> usize {
    1024
}

fn default_max_connections() -> usize {
    4
}

fn default_statement_timeout_ms() -> u64 {
    10_000
}

impl VectorSpec {
    /// The data layers: `layers`, or the one written at the top level.
    /// Fails when both are written.
    pub fn data_layers(&self) -> Result<Vec<VectorLayerSpec>, String> {
        if self.layers.is_empty() {
            return Ok(vec![VectorLayerSpec {
                name: None,
                layer: self.layer.clone(),
                filter: self.filter.clone(),
                fields: self.fields.clone(),
                style: self.style.clone(),
                min_zoom: None,
                max_zoom: None,
            }]);
        }
        if self.layer.is_some()
            || self.filter.is_some()
            || !self.fields.is_empty()
            || !self.style.is_empty()
        {
            return Err(
                "give either `layers:` or `layer`/`where`/`fields`/`style`, not both".into(),
            );
        }
        Ok(self.layers.clone())
    }

    /// The text GDAL opens: a `postgres://` URL becomes a `PG:` string,
    /// and PostgreSQL sources get a connect timeout and the statement
    /// timeout.
    pub(super) fn gdal_path(&self) -> String {
        let secs = self.statement_timeout_ms.div_ceil(1000).max(1);
        let ms = self.statement_timeout_ms;
        let timeouts = format!("connect_timeout={secs} options='-c statement_timeout={ms}'");
        if self.path.starts_with("postgres://") || self.path.starts_with("postgresql://") {
            // GDAL appends `application_name=...` to the string, which a
            // URL cannot take: the URL is written as key=value pairs.
            return match conninfo_of_url(&self.path) {
                Some(conninfo) => format!("PG:{conninfo} {timeouts}"),
                None => format!("PG:{}", self.path),
            };
        }
        if let Some(conn) = self.path.strip_prefix("PG:") {
            return format!("PG:{conn} {timeouts}");
        }
        self.path.clone()
    }

    /// Whether the data is in PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.path.starts_with("PG:")
            || self.path.starts_with("postgres://")
            || self.path.starts_with("postgresql://")
    }

    /// The path with any password replaced by `***`, for messages.
    pub fn shown_path(&self) -> String {
        redact(&self.path)
    }
}

/// A `postgres://user:password@host:port/dbname?key=value` URL as libpq
/// key=value pairs (values quoted); `None` when it does not parse.
fn conninfo_of_url(text: &str) -> Option<String> {
    let url = url::Url::parse(text).ok()?;
    let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let decode = |v: &str| {
        url::form_urlencoded::parse(format!("v={v}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let mut pairs = Vec::new();
    if let Some(host) = url.host_str() {
        pairs.push(format!(
            "host={}",
            quote(host.trim_start_matches('[').trim_end_matches(']'))
        ));
    }
    if let Some(port) = url.port() {
        pairs.push(format!("port={port}"));
    }
    if !url.username().is_empty() {
        pairs.push(format!("user={}", quote(&decode(url.username()))));
    }
    if let Some(password) = url.password() {
        pairs.push(format!("password={}", quote(&decode(password))));
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() {
        pairs.push(format!("dbname={}", quote(&decode(db))));
    }
    for (k, v) in url.query_pairs() {
        pairs.push(format!("{k}={}", quote(&v)));
    }
    Some(pairs.join(" "))
}

/// `text` with the password of a `PG:` string (`password=...`) or of a
/// URL's user information replaced by `***`.
pub(super) fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("password=") {
        out.push_str(&rest[..at + "password=".len()]);
        out.push_str("***");
        rest = &rest[at + "password=".len()..];
        let end = rest.find([' ', '&']).unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    if let Some(scheme) = out.find("://") {
        let after = scheme + 3;
        if let Some(at) = out[after..].find('@').map(|i| i + after)
            && let Some(colon) = out[after..at].find(':').map(|i| i + after)
        {
            out.replace_range(colon + 1..at, "***");
        }
    }
    out
}

/// A spec of `path` with one connection and a 2.5 s statement timeout,
/// for unit tests.
#[cfg(test)]
pub(super) fn spec_for_tests(path: &str) -> VectorSpec {
    VectorSpec {
        path: path.into(),
        layer: None,
        filter: None,
        fields: vec![],
        style: vec![],
        layers: vec![],
        mvt: MvtSettings::default(),
        value_filter: None,
        maplibre: None,
        max_features: 1,
        info_max_chars: default_info_max_chars(),
        max_connections: 1,
        statement_timeout_ms: 2500,
        contours: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec_for_tests as spec;

    #[test]
    fn passwords_are_hidden_in_connection_strings_and_urls() {
        assert_eq!(
            redact("PG:host=db user=u password=s3cret dbname=x"),
            "PG:host=db user=u password=*** dbname=x"
        );
        assert_eq!(
            redact("postgres://u:s3cret@db:5432/x"),
            "postgres://u:***@db:5432/x"
        );
        assert_eq!(redact("data/countries.gpkg"), "data/countries.gpkg");
    }

    #[test]
    fn postgres_sources_get_connect_and_statement_timeouts() {
        assert_eq!(
            spec("postgres://u:p%40ss@h:5433/db?sslmode=disable").gdal_path(),
            "PG:host='h' port=5433 user='u' password='p@ss' dbname='db' sslmode='disable' \
             connect_timeout=3 options='-c statement_timeout=2500'"
        );
        assert_eq!(
            spec("PG:host=h dbname=db").gdal_path(),
            "PG:host=h dbname=db connect_timeout=3 options='-c statement_timeout=2500'"
        );
        assert_eq!(spec("a.gpkg").gdal_path(), "a.gpkg");
        assert!(spec("PG:host=h").is_postgres() && !spec("a.gpkg").is_postgres());
    }

    #[test]
    fn one_layer_or_a_list_but_not_both() {
        let mut s = spec("a.gpkg");
        s.layer = Some("countries".into());
        assert_eq!(
            s.data_layers().unwrap()[0].layer.as_deref(),
            Some("countries")
        );
        s.layers = vec![VectorLayerSpec::default(), VectorLayerSpec::default()];
        assert!(s.data_layers().unwrap_err().contains("not both"));
        s.layer = None;
        assert_eq!(s.data_layers().unwrap().len(), 2);
    }
}
