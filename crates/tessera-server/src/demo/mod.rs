//! The embedded demo: small rasters compiled into the binary (see
//! `data/PROVENANCE.md`) and the configuration that serves them.

use tessera_source::register_static_file;

use crate::config::{Config, ConfigError};

const FILES: &[(&str, &[u8])] = &[
    (
        "/vsimem/tessera-demo/shadedrelief-5400.tif",
        include_bytes!("../../../../data/shadedrelief-5400.tif"),
    ),
    (
        "/vsimem/tessera-demo/elev.tif",
        include_bytes!("../../../../data/elev.tif"),
    ),
    (
        "/vsimem/tessera-demo/L7_ETMs.tif",
        include_bytes!("../../../../data/L7_ETMs.tif"),
    ),
];

/// The demo configuration (YAML text, also a worked example of the format).
pub const DEMO_YAML: &str = include_str!("demo.yaml");

/// Mounts the demo rasters in GDAL's memory filesystem and returns the demo
/// configuration.
pub fn demo_config() -> Result<Config, ConfigError> {
    for (path, bytes) in FILES {
        register_static_file(path, bytes).map_err(ConfigError::Invalid)?;
    }
    Config::from_yaml(DEMO_YAML, |name| std::env::var(name).ok())
}
