//! `tessera check`: opens every layer of a configuration as the server
//! would and says what it found (source kind, extent, dimensions, what the
//! source reports), or why it cannot.

use std::path::PathBuf;

use tessera_server::{Config, Service, demo};

use crate::area;
use crate::runtime::{CliError, CliResult};

/// Checks the configuration named (positionally or with `-c`): parsed and
/// validated, then, unless `no_open`, every layer opened as `serve` would.
pub fn check(config_file: Option<&PathBuf>, config: Option<&PathBuf>, no_open: bool) -> CliResult {
    let config = load(Some(area::config_path(config_file, config)?))?;
    if no_open {
        tessera_server::assemble::check_names(&config)?;
        println!("ok: {} layer(s), sources not opened", config.layers.len());
        return Ok(0);
    }
    let service = Service::serving(config)?;
    for layer in service.registry.layers() {
        let b = layer.source.info().lonlat_bounds;
        println!(
            "layer {}: {} source, [{:.4}, {:.4}, {:.4}, {:.4}] (lon/lat)",
            layer.name, layer.kind, b.min_x, b.min_y, b.max_x, b.max_y
        );
        for d in &layer.dimensions {
            println!("  {}", dimension_line(d));
        }
        // A layer with dimensions reports its source at the
        // default values.
        let indent = if layer.dimensions.is_empty() {
            "  "
        } else {
            println!("  at the default value(s):");
            "    "
        };
        for line in layer.source.report() {
            println!("{indent}{line}");
        }
    }
    println!("ok: {} layer(s)", service.registry.layers().len());
    Ok(0)
}

/// The configuration at `config`, or the demo's.
fn load(config: Option<&PathBuf>) -> Result<Config, CliError> {
    Ok(match config {
        Some(path) => Config::from_file(path)?,
        None => demo::demo_config()?,
    })
}

/// Values `check` lists of a dimension; past them, a count.
const LISTED_VALUES: usize = 12;

/// What `check` says of a dimension: its values (the first few) and the
/// value a request that names none gets.
fn dimension_line(d: &tessera_server::dimension::Dimension) -> String {
    let listed = d
        .values
        .iter()
        .take(LISTED_VALUES)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    let values = match d.values.len().checked_sub(LISTED_VALUES) {
        Some(more) if more > 0 => format!("{listed} and {more} more"),
        _ => listed,
    };
    let default = d.resolve(None).unwrap_or_else(|e| format!("none ({e})"));
    format!(
        "dimension {}: {} value(s): {values}; default {default}",
        d.name,
        d.values.len()
    )
}
