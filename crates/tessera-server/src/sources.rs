//! Sources uploaded through the admin API: where their objects live, the
//! path GDAL reads them by, the layer each becomes, and the file that lists
//! them so a restarted server serves them again.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use object_store::ObjectStore;
use object_store::path::Path;
use tessera_store::object::open_url;
use tessera_store::option_strings;
use tessera_store::upload::UploadOptions;

use crate::assemble::{self, WrapSource};
use crate::config::{AdminConfig, Config, ConfigError, LayerConfig};
use crate::registry::Registry;

/// The admin API's view of uploaded sources.
#[derive(Debug)]
pub struct Uploads {
    /// The `admin:` section.
    pub config: AdminConfig,
    /// The store sources go to.
    pub store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// `/vsis3/bucket/prefix` (or `/vsigs/`, `/vsiaz/`).
    vsi_prefix: String,
    /// `sources_url`.
    url: String,
    file: PathBuf,
    /// Writers of the sources file take turns.
    file_lock: Mutex<()>,
}

impl Uploads {
    /// Opens the sources store named by `config.sources_url`; `None` when
    /// uploads are off (no `sources_url` and `sources_file`).
    pub fn open(config: &AdminConfig) -> Result<Option<Uploads>, ConfigError> {
        let Some((sources_url, sources_file)) = config.uploads() else {
            return Ok(None);
        };
        let invalid = |m: String| ConfigError::Invalid(format!("admin: {m}"));
        let url = url::Url::parse(sources_url)
            .map_err(|e| invalid(format!("sources_url {sources_url:?}: {e}")))?;
        let vsi = match url.scheme() {
            "s3" => "vsis3",
            "gs" => "vsigs",
            "az" => "vsiaz",
            other => {
                return Err(invalid(format!(
                    "sources_url scheme {other:?}: use s3://, gs:// or az://, which GDAL can read"
                )));
            }
        };
        let location =
            open_url(sources_url, &option_strings(&config.options)).map_err(|source| {
                ConfigError::SourcesStore {
                    url: sources_url.to_string(),
                    source: Box::new(source),
                }
            })?;
        let bucket = url.host_str().unwrap_or_default();
        let mut vsi_prefix = format!("/{vsi}/{bucket}");
        if !location.prefix.as_ref().is_empty() {
            vsi_prefix = format!("{vsi_prefix}/{}", location.prefix);
        }
        Ok(Some(Uploads {
            config: config.clone(),
            store: location.store,
            prefix: location.prefix,
            vsi_prefix,
            url: sources_url.to_string(),
            file: PathBuf::from(sources_file),
            file_lock: Mutex::new(()),
        }))
    }

    /// Where uploads go (`sources_url`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How uploads are sent.
    pub fn upload_options(&self) -> UploadOptions {
        UploadOptions {
            part_size: usize::try_from(self.config.part_size_bytes()).unwrap_or(usize::MAX),
            parts_in_flight: self.config.parts_in_flight,
        }
    }

    /// The object holding `file` (`<name>.<version>.<ext>`).
    pub fn object_path(&self, file: &str) -> Path {
        self.prefix.clone().join(file)
    }

    /// The path GDAL opens `file` by.
    pub fn gdal_path(&self, file: &str) -> String {
        format!("{}/{file}", self.vsi_prefix)
    }

    /// The layer an uploaded source becomes: every default, cached into
    /// `cache_store` (or `default` when that store exists).
    pub fn layer_config(
        &self,
        name: &str,
        file: &str,
        stores: &[&str],
    ) -> Result<LayerConfig, ConfigError> {
        let store = self.config.cache_store.clone().unwrap_or_else(|| {
            if stores.contains(&"default") {
                "default".into()
            } else {
                crate::config::NO_STORE.into()
            }
        });
        // Each upload is its own object (`<name>.<version>.<ext>`) and its
        // tiles are kept under its own key, so a replaced source never
        // serves the old one's tiles.
        let key = file.rsplit_once('.').map_or(file, |(stem, _)| stem);
        let value = serde_json::json!({
            "name": name,
            "source": { "path": self.gdal_path(file) },
            "cache": { "store": store, "key": key },
        });
        serde_json::from_value(value)
            .map_err(|e| ConfigError::Invalid(format!("uploaded layer {name:?}: {e}")))
    }

    /// Serves uploaded source `name` (stored as `file`) as a layer of
    /// `registry`, replacing an uploaded layer of that name. GDAL's cache of
    /// the object is dropped first, so a replaced object is read again.
    pub fn serve_as_layer(
        &self,
        registry: &Registry,
        name: &str,
        file: &str,
        config: &Config,
        wrap_source: &Arc<WrapSource>,
    ) -> Result<(), ConfigError> {
        let stores: Vec<&str> = registry.store_names().collect();
        let layer = self.layer_config(name, file, &stores)?;
        tessera_source::forget_network_cache(layer.source.location());
        assemble::add_layer(registry, &layer, config, wrap_source)
    }

    /// Sources recorded in the sources file, name → file (none when it
    /// does not exist).
    pub fn recorded(&self) -> Result<BTreeMap<String, String>, ConfigError> {
        match std::fs::read_to_string(&self.file) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| self.file_error(e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(self.file_error(e)),
        }
    }

    fn file_error(&self, e: impl std::error::Error + Send + Sync + 'static) -> ConfigError {
        ConfigError::SourcesFile {
            path: self.file.display().to_string(),
            source: Box::new(e),
        }
    }

    /// Records source `name` as `file` in the sources file (written to a
    /// temporary file, synced, renamed over the old one and the directory
    /// synced, so a crash leaves the old list or the new one). Returns the
    /// file it replaced, if any.
    pub fn record(&self, name: &str, file: &str) -> Result<Option<String>, ConfigError> {
        let _turn = self
            .file_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut names = self.recorded()?;
        let old = names.insert(name.to_string(), file.to_string());
        if old.as_deref() == Some(file) {
            return Ok(old);
        }
        let failed = |e: std::io::Error| self.file_error(e);
        let dir = self
            .file
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        std::fs::create_dir_all(dir).map_err(failed)?;
        let tmp = self.file.with_extension("tmp");
        {
            let mut f = std::fs::File::create(&tmp).map_err(failed)?;
            f.write_all(
                serde_json::to_string_pretty(&names)
                    .expect("names serialise")
                    .as_bytes(),
            )
            .map_err(failed)?;
            f.sync_all().map_err(failed)?;
        }
        std::fs::rename(&tmp, &self.file).map_err(failed)?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(failed)?;
        Ok(old)
    }
}

/// The file extension of a raster from its first bytes (GeoTIFF and
/// BigTIFF, JPEG 2000, PNG, JPEG, GeoPackage, netCDF), or `None`.
pub fn sniff_extension(head: &[u8]) -> Option<&'static str> {
    const SIGNATURES: [(&[u8], &str); 10] = [
        (b"II*\0", "tif"),
        (b"MM\0*", "tif"),
        (b"II+\0", "tif"),
        (b"MM\0+", "tif"),
        (b"\0\0\0\x0cjP  ", "jp2"),
        (b"\x89PNG\r\n\x1a\n", "png"),
        (b"\xff\xd8\xff", "jpg"),
        (b"SQLite format 3\0", "gpkg"),
        (b"CDF", "nc"),
        (b"\x89HDF\r\n\x1a\n", "nc"),
    ];
    SIGNATURES
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, ext)| *ext)
}
