//! A layer's `dimensions:` section: for each dimension (`time`,
//! `elevation`, or any name), where its values come from, its default and
//! whether a value the layer lacks snaps to the nearest.
//!
//! ```yaml
//! dimensions:
//!   time:
//!     from_path: 'ndvi_(\d{4}-\d{2}-\d{2})\.tif'   # mosaic pieces: first group = value
//!     default: latest                             # earliest, or a value
//!     nearest: false
//!   scenario:
//!     values:                                     # each value its own file
//!       - { value: low, path: low.tif }
//!       - { value: high, path: high.tif }
//! ```
//!
//! The values of all of a layer's dimensions come from one place: the
//! pieces' paths (`from_path`), the bands of one file (`from_bands`: a band
//! metadata item such as `NETCDF_DIM_time` or `GRIB_VALID_TIME`), a
//! mosaic index's fields or STAC items' properties (`from_field`), or, for
//! one dimension, `values:` each with its file. A layer of an upstream WMS
//! passes each value on (`TIME=`, `ELEVATION=`, `DIM_<NAME>=`): its values
//! are listed (`values:` without paths) or read from the upstream's
//! capabilities (nothing listed).

use serde::Deserialize;

/// One dimension of a layer.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DimensionConfig {
    /// How values are read: `time` (ISO 8601), `number` or `text`; by
    /// default `time` for `time` and `*_time`, `number` for `elevation`,
    /// `text` otherwise.
    #[serde(default)]
    pub kind: Option<KindConfig>,
    /// Values listed, each with the raster it is read from (a layer with
    /// this dimension has a GDAL source, whose settings each value keeps).
    #[serde(default)]
    pub values: Vec<ValueConfig>,
    /// A regular expression over each mosaic piece's path whose first group
    /// is the piece's value (a layer with this has a mosaic source of a
    /// directory or a list of paths).
    #[serde(default)]
    pub from_path: Option<String>,
    /// A band metadata item of the layer's one raster whose value is each
    /// band's value (`NETCDF_DIM_time`, `NETCDF_DIM_level`,
    /// `GRIB_VALID_TIME`): the bands with one value are served together.
    /// netCDF times are read with the axis' `units` (`days since ...`),
    /// GRIB times are seconds since 1970.
    #[serde(default)]
    pub from_bands: Option<String>,
    /// A field of the layer's mosaic `index`, or a property of its `stac`
    /// items (`datetime`), whose value is each piece's value.
    #[serde(default)]
    pub from_field: Option<String>,
    /// The item property whose values a STAC search layer (`type: stac`)
    /// is served at: `datetime`, one value per `resolution` with items.
    #[serde(default)]
    pub from_items: Option<String>,
    /// The period of each `from_items` value (default `day`): `hour`,
    /// `day`, `month` or `year`.
    #[serde(default)]
    pub resolution: Option<tessera_source::pgstac::Period>,
    /// The value of a request that names none: `latest` (the default),
    /// `earliest`, or a value.
    #[serde(default)]
    pub default: Option<String>,
    /// Whether a value the layer lacks is answered with the nearest one it
    /// has (else it is refused, `InvalidDimensionValue`).
    #[serde(default)]
    pub nearest: bool,
    /// Most values a capabilities document lists; beyond, evenly spaced
    /// values are written as `start/end/period`, others as the latest
    /// ones (default 1000).
    #[serde(default = "default_max_values")]
    pub max_values: usize,
    /// Seconds between two looks at where the values come from (a
    /// mosaic's directory, the listed files): when they changed, the
    /// configuration is loaded again, so new values are served without a
    /// restart. None: at start and on reload only.
    #[serde(default, deserialize_with = "super::optional_seconds")]
    #[schemars(with = "Option<super::Seconds>")]
    pub refresh_secs: Option<f64>,
}

/// Values a capabilities document lists at most by default.
pub const DEFAULT_MAX_VALUES: usize = 1000;

fn default_max_values() -> usize {
    DEFAULT_MAX_VALUES
}

/// A listed value, with its raster for a GDAL source.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValueConfig {
    /// The value as written (made canonical when the layer is built; an
    /// upstream WMS is asked with it as written).
    pub value: String,
    /// The raster of this value (relative paths from the config file's
    /// directory); none for a layer of an upstream WMS, which is asked for
    /// the value.
    #[serde(default)]
    pub path: Option<String>,
}

/// `kind:` of a dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KindConfig {
    /// ISO 8601 times.
    Time,
    /// Numbers.
    Number,
    /// Words.
    Text,
}
