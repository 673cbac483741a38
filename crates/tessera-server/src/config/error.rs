//! Why a configuration cannot start a service.

/// Errors that stop start-up, each saying what to change; the cause, where
/// there is one beneath, is kept as the error's source.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}")]
    Read {
        /// Path of the file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A file named on the command line (`tessera serve FILE`) cannot be
    /// opened: said first, in the system's words.
    #[error("cannot open {path}: {reason}")]
    Open {
        /// The path as given.
        path: String,
        /// Why not (`No such file or directory`).
        reason: std::io::Error,
    },
    /// `${NAME}` is used but the variable is not set and has no default.
    #[error(
        "config uses ${{{name}}} but the environment variable {name} is not set (write ${{{name}:-default}} to give a default{})",
        tile_template_hint(name)
    )]
    MissingEnv {
        /// Variable name.
        name: String,
    },
    /// A `${` in a value has no closing `}`.
    #[error("config value {value:?} has a ${{ without a closing }} (write $${{ for a literal ${{)")]
    UnterminatedVariable {
        /// The value as written.
        value: String,
    },
    /// The text is not YAML.
    #[error("config is not valid YAML: {0}")]
    Yaml(String),
    /// The YAML does not match the schema (names the unknown or bad key and
    /// where it is).
    #[error("invalid config{at}: {message}")]
    Schema {
        /// Where in the document (` at layers[0].cache`), empty at the top.
        at: String,
        /// The deserializer's message.
        message: String,
    },
    /// Values are individually valid but do not fit together.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// GDAL refused a setting of the `gdal:` section.
    #[error("cannot apply the gdal settings")]
    Gdal(#[source] gdal::errors::GdalError),
    /// A grid's CRS is unknown.
    #[error("grid {grid:?}: unknown CRS")]
    GridCrs {
        /// Grid identifier.
        grid: String,
        /// Why PROJ refused it.
        source: tessera_source::SourceError,
    },
    /// A grid definition is inconsistent.
    #[error("grid {grid:?} cannot be built")]
    Grid {
        /// Grid identifier.
        grid: String,
        /// What is wrong.
        source: tessera_grid::GridError,
    },
    /// A layer's source cannot be opened.
    #[error("layer {layer:?}: its source cannot be opened")]
    Source {
        /// Layer name.
        layer: String,
        /// Why.
        source: tessera_source::SourceError,
    },
    /// A layer's style does not fit its source.
    #[error("layer {layer:?}: its style does not fit its source")]
    Style {
        /// Layer name.
        layer: String,
        /// Why.
        source: tessera_image::StyleError,
    },
    /// A CRS in a layer's `wms_crs` is unknown.
    #[error("layer {layer:?}: wms_crs {crs:?} is unknown")]
    LayerCrs {
        /// Layer name.
        layer: String,
        /// The CRS as written.
        crs: String,
        /// Why PROJ refused it.
        source: tessera_source::SourceError,
    },
    /// A store cannot be opened.
    #[error("store {store:?} cannot be opened")]
    Store {
        /// Store name.
        store: String,
        /// Why.
        source: tessera_store::StoreError,
    },
    /// The admin API's sources store cannot be opened.
    #[error("admin: cannot open sources_url {url:?}")]
    SourcesStore {
        /// The URL as configured.
        url: String,
        /// The client's error.
        source: Box<object_store::Error>,
    },
    /// The admin API's sources file cannot be read or written.
    #[error("admin: cannot use the sources file {path}")]
    SourcesFile {
        /// Its path.
        path: String,
        /// The I/O or JSON error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// For `${z}`, `${x}`, `${y}` and `${-y}` (GDAL's spelling of tile URL
/// placeholders), how to write them in a tile source's template.
fn tile_template_hint(name: &str) -> String {
    if matches!(name, "z" | "x" | "y" | "-y") {
        format!("; in a tile URL template write {{{name}}}")
    } else {
        String::new()
    }
}
