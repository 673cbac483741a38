//! The arguments that name a layer's tiles (layer, grid, zooms, bbox or
//! polygon), shared by `tessera seed`, `truncate` and `export`.

use std::ops::RangeInclusive;
use std::path::PathBuf;

use clap::Args;
use tessera_server::plan::{PlanArea, TilePlan, polygons_from_geojson, styled_layers_at};
use tessera_server::suggest::Unknown;
use tessera_server::tessera_grid::{BBox, TileFormat};
use tessera_server::{Config, Service};

use crate::runtime::CliError;

/// Which tiles of which layer.
#[derive(Debug, Args)]
pub struct AreaArgs {
    /// YAML configuration file (or give it as the first argument).
    #[arg(short, long, env = "TESSERA_CONFIG")]
    pub config: Option<PathBuf>,
    /// YAML configuration file, as with `-c`.
    #[arg(value_name = "CONFIG")]
    pub config_file: Option<PathBuf>,
    /// Layer.
    #[arg(long)]
    pub layer: String,
    /// Grid [default: the layer's first grid].
    #[arg(long)]
    pub grid: Option<String>,
    /// Zoom levels: `A..B` (inclusive) or a single `Z`.
    #[arg(long, value_parser = tessera_server::plan::parse_zooms)]
    pub zoom: RangeInclusive<u8>,
    /// Limit to `minx,miny,maxx,maxy` (in --bbox-crs); always limited to the layer's extent.
    #[arg(long, value_parser = tessera_server::plan::parse_bbox, allow_hyphen_values = true)]
    pub bbox: Option<BBox>,
    /// CRS of --bbox.
    #[arg(long, default_value = "EPSG:4326")]
    pub bbox_crs: String,
    /// Limit to the Polygon/MultiPolygon areas of a GeoJSON file (lon/lat).
    #[arg(long, conflicts_with = "bbox")]
    pub polygon: Option<PathBuf>,
    /// The values of one of the layer's dimensions: `NAME=V1,V2`,
    /// `NAME=all` or `NAME=FROM/TO`; once per dimension (each combination
    /// of the values is planned) [default: each dimension's default value].
    #[arg(long)]
    pub dimension: Vec<String>,
    /// A named style of the layer, or `all`; once per style [default: the
    /// layer's default style].
    #[arg(long)]
    pub style: Vec<String>,
}

/// The configuration file given positionally or with `-c` (the
/// positional one first: `TESSERA_CONFIG` fills `-c` too), or a message
/// saying how to give one.
pub fn config_path<'a>(
    positional: Option<&'a PathBuf>,
    option: Option<&'a PathBuf>,
) -> Result<&'a PathBuf, CliError> {
    positional.or(option).ok_or_else(|| {
        "no configuration file: give it as the first argument or with -c FILE \
         (or set TESSERA_CONFIG)"
            .into()
    })
}

impl AreaArgs {
    /// Loads the configuration, opens the layer's source and store (no
    /// other layer's) and plans the tiles named in tile format `format`
    /// (png, png8, jpg, webp; `None`: the layer's first): one plan per
    /// dimension value named by `--dimension` and style named by `--style`.
    pub fn plans(&self, format: Option<&str>) -> Result<(Service, Vec<TilePlan>), CliError> {
        let config = Config::from_file(config_path(
            self.config_file.as_ref(),
            self.config.as_ref(),
        )?)?;
        let service = Service::batch(config, &self.layer)?;
        let format = match format {
            Some(f) => {
                Some(TileFormat::from_extension(f).ok_or_else(|| format!("unknown format {f:?}"))?)
            }
            None => None,
        };
        let grid = match &self.grid {
            Some(g) => g.clone(),
            None => service
                .registry
                .layer(&self.layer)
                .and_then(|l| l.grids.first().cloned())
                .ok_or_else(|| {
                    // Only this layer was opened: the hint comes from the
                    // configuration's names.
                    let names = service.config.layers.iter().map(|l| l.name.as_str());
                    format!(
                        "unknown layer {}",
                        Unknown::among(&self.layer, "layers", names)
                    )
                })?,
        };
        let area = match (&self.bbox, &self.polygon) {
            (Some(b), _) => PlanArea::BBox(*b, self.bbox_crs.clone()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                PlanArea::Polygons(polygons_from_geojson(&text)?)
            }
            (None, None) => PlanArea::Extent,
        };
        let plan = TilePlan::new(
            &service.registry,
            &self.layer,
            &grid,
            format,
            self.zoom.clone(),
            &area,
        )?;
        let specs: Vec<&str> = self.dimension.iter().map(String::as_str).collect();
        let styles: Vec<&str> = self.style.iter().map(String::as_str).collect();
        let layers = styled_layers_at(&plan.layer, &styles, &specs)?;
        Ok((service, plan.at_each(layers)))
    }
}
