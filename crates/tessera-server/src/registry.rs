//! Layers and grids as loaded from the configuration, and the cache of CRSs
//! that requests name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tessera_grid::{BBox, TileMatrixSet};
use tessera_image::{Format, Style, build_style};
use tessera_source::{Crs, GdalSource, Source, SourceError};

use crate::config::{Config, ConfigError};

/// CRSs remembered from requests; further distinct CRSs are parsed per request.
const MAX_CACHED_CRS: usize = 256;

/// A grid with its parsed CRS.
#[derive(Debug)]
pub struct Grid {
    /// The tile matrix set.
    pub tms: TileMatrixSet,
    /// Its CRS.
    pub crs: Arc<Crs>,
}

/// A servable layer: a source, a style and where it may be tiled.
#[derive(Debug)]
pub struct Layer {
    /// URL name.
    pub name: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: Option<String>,
    /// Attribution.
    pub attribution: Option<String>,
    /// Pixel source.
    pub source: Arc<dyn Source>,
    /// Style.
    pub style: Box<dyn Style>,
    /// Grids this layer is tiled in, in configuration order.
    pub grids: Vec<String>,
    /// Lowest tile zoom.
    pub min_zoom: u8,
    /// Highest tile zoom (per grid it is also capped by the grid).
    pub max_zoom: u8,
    /// Offered formats; the first is the default.
    pub formats: Vec<Format>,
    /// Extra WMS CRSs to advertise.
    pub wms_crs: Vec<String>,
    /// The layer's extent in each grid's CRS (`None`: could not be transformed).
    pub extents: HashMap<String, Option<BBox>>,
}

impl Layer {
    /// Highest zoom of this layer in `grid`.
    pub fn max_zoom_in(&self, grid: &Grid) -> u8 {
        self.max_zoom.min(grid.tms.max_zoom())
    }
}

/// Everything the server can serve.
#[derive(Debug)]
pub struct Registry {
    /// Layers by name, in configuration order.
    pub layers: Vec<Arc<Layer>>,
    by_name: HashMap<String, usize>,
    /// Grids by identifier.
    pub grids: HashMap<String, Arc<Grid>>,
    crs_cache: Mutex<HashMap<String, Arc<Crs>>>,
}

impl Registry {
    /// Opens every source and builds every grid. Fails with a message that
    /// names the layer or grid at fault.
    pub fn load(config: &Config) -> Result<Registry, ConfigError> {
        let mut grids = HashMap::new();
        for tms in [
            TileMatrixSet::web_mercator_quad(),
            TileMatrixSet::world_crs84_quad(),
        ] {
            let crs =
                Arc::new(Crs::parse(&tms.crs).map_err(|e| ConfigError::Invalid(e.to_string()))?);
            grids.insert(tms.id.clone(), Arc::new(Grid { tms, crs }));
        }
        for spec in &config.grids {
            let crs = Crs::parse(&spec.crs)
                .map_err(|e| ConfigError::Invalid(format!("grid {:?}: {e}", spec.id)))?;
            let tms = TileMatrixSet::from_spec(spec, crs.meters_per_unit)
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
            if grids.contains_key(&tms.id) {
                return Err(ConfigError::Invalid(format!(
                    "grid {:?} is defined twice",
                    tms.id
                )));
            }
            grids.insert(
                tms.id.clone(),
                Arc::new(Grid {
                    tms,
                    crs: Arc::new(crs),
                }),
            );
        }
        let mut layers = Vec::new();
        let mut by_name = HashMap::new();
        for lc in &config.layers {
            let in_layer = |e: &dyn std::fmt::Display| {
                ConfigError::Invalid(format!("layer {:?}: {e}", lc.name))
            };
            let source = GdalSource::open(&lc.source, &config.gdal).map_err(|e| in_layer(&e))?;
            let style =
                build_style(&lc.style, source.info().band_count).map_err(|e| in_layer(&e))?;
            let mut extents = HashMap::new();
            for g in &lc.grids {
                let grid = grids.get(g).ok_or_else(|| {
                    in_layer(&format!("unknown grid {g:?} (define it under `grids:`)"))
                })?;
                extents.insert(g.clone(), layer_extent(&source, grid));
            }
            for c in &lc.wms_crs {
                Crs::parse(c).map_err(|e| in_layer(&e))?;
            }
            by_name.insert(lc.name.clone(), layers.len());
            layers.push(Arc::new(Layer {
                name: lc.name.clone(),
                title: lc.title.clone().unwrap_or_else(|| lc.name.clone()),
                description: lc.description.clone(),
                attribution: lc.attribution.clone(),
                source: Arc::new(source),
                style,
                grids: lc.grids.clone(),
                min_zoom: lc.min_zoom,
                max_zoom: lc.max_zoom,
                formats: lc.formats.clone(),
                wms_crs: lc.wms_crs.clone(),
                extents,
            }));
        }
        Ok(Registry {
            layers,
            by_name,
            grids,
            crs_cache: Mutex::new(HashMap::new()),
        })
    }

    /// A layer by name.
    pub fn layer(&self, name: &str) -> Option<&Arc<Layer>> {
        self.by_name.get(name).map(|i| &self.layers[*i])
    }

    /// A grid by identifier.
    pub fn grid(&self, id: &str) -> Option<&Arc<Grid>> {
        self.grids.get(id)
    }

    /// Parses a CRS named in a request, remembering a bounded number of them.
    pub fn crs(&self, text: &str) -> Result<Arc<Crs>, SourceError> {
        let key = text.to_ascii_uppercase();
        if let Ok(cache) = self.crs_cache.lock()
            && let Some(c) = cache.get(&key)
        {
            return Ok(c.clone());
        }
        let crs = Arc::new(Crs::parse(text)?);
        if let Ok(mut cache) = self.crs_cache.lock()
            && cache.len() < MAX_CACHED_CRS
        {
            cache.insert(key, crs.clone());
        }
        Ok(crs)
    }
}

fn layer_extent(source: &GdalSource, grid: &Grid) -> Option<BBox> {
    let info = source.info();
    let direct = info
        .native_crs
        .transform_bbox(&info.native_bounds, &grid.crs)
        .ok();
    // Sources reaching the poles cannot be transformed to Web Mercator as a
    // whole: clip their lon/lat extent to the latitudes it can represent.
    let b = direct.or_else(|| {
        let ll = info.lonlat_bounds;
        let clipped = BBox::new(
            ll.min_x,
            ll.min_y.max(-85.051_128_78),
            ll.max_x,
            ll.max_y.min(85.051_128_78),
        )
        .ok()?;
        Crs::parse("OGC:CRS84")
            .ok()?
            .transform_bbox(&clipped, &grid.crs)
            .ok()
    })?;
    b.intersection(&grid.tms.extent)
}
