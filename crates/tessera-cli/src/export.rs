//! `tessera export`: a layer's cached tiles into one PMTiles or MBTiles
//! file, on disk or streamed to object storage.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use tessera_server::export::{Destination, ExportOptions, export};
use tessera_server::tessera_archive::ArchiveFormat;
use tessera_server::tessera_store::upload::UploadOptions;

use crate::area::AreaArgs;
use crate::progress::Progress;
use crate::runtime::{CliResult, cores, runtime};
use crate::seed_command::seed_plan;

/// Arguments of `tessera export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    area: AreaArgs,
    /// Archive format: pmtiles or mbtiles.
    #[arg(long, value_parser = parse_format)]
    format: ArchiveFormat,
    /// Where to write: a file path, or s3://bucket/key, gs://bucket/key,
    /// az://container/key (streamed as a multipart upload). With several
    /// dimension values (`--dimension time=all`), one archive per value:
    /// `{time}` (each dimension's name in braces) is replaced by the value
    /// (`ndvi-{time}.pmtiles` → `ndvi-2024-01-01T000000Z.pmtiles`).
    #[arg(long)]
    to: String,
    /// Tile format (png, jpg, webp) [default: the layer's first format].
    #[arg(long)]
    tile_format: Option<String>,
    /// Render the tiles the cache lacks first (as `tessera seed` would);
    /// without it they are left out of the archive.
    #[arg(long)]
    render_missing: bool,
    /// Metatiles rendered at once with --render-missing, and threads
    /// reading tiles from the cache [default: CPU cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Object store client option KEY=VALUE (repeatable; keys as in a
    /// `type: object` store's `options`, e.g. endpoint, allow_http, region).
    #[arg(long = "option", value_parser = parse_option)]
    options: Vec<(String, String)>,
    /// Part size of an upload, MiB (at least 5).
    #[arg(long, default_value_t = 16)]
    part_size_mb: usize,
    /// Parts uploading at once (memory: parts x part size).
    #[arg(long, default_value_t = 4)]
    parts_in_flight: usize,
    /// Skip reading an uploaded archive back to compare its CRC32C.
    #[arg(long)]
    no_verify: bool,
    /// Directory for the archive while it is built, before an upload
    /// [default: the system's temporary directory].
    #[arg(long)]
    temp_dir: Option<PathBuf>,
}

/// Runs an export (one archive per dimension value named); returns the
/// process exit status.
pub fn run(args: &ExportArgs) -> CliResult {
    let (service, plans) = args.area.plans(args.tile_format.as_deref())?;
    let mut destinations = Vec::with_capacity(plans.len());
    for plan in &plans {
        let mut to = args.to.clone();
        for (name, value) in &plan.layer.values {
            to = to.replace(
                &format!("{{{name}}}"),
                &tessera_server::dimension::key_form(value),
            );
        }
        if destinations.contains(&to) {
            return Err(format!(
                "--dimension names {} values of {:?}: write each dimension's name in braces in --to \
                 ({{{}}}), so that each value has its own archive",
                plans.len(),
                plan.layer.name,
                plan.layer
                    .values
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join("}, {")
            )
            .into());
        }
        destinations.push(to);
    }
    for (plan, to) in plans.iter().zip(&destinations) {
        let code = export_one(args, &service, plan, to)?;
        if code != 0 {
            return Ok(code);
        }
    }
    Ok(0)
}

/// Exports one plan (one dimension value) to `to`.
fn export_one(
    args: &ExportArgs,
    service: &tessera_server::service::Service,
    plan: &tessera_server::plan::TilePlan,
    to: &str,
) -> CliResult {
    let destination = Destination::parse(to)?;
    let runtime = runtime()?;
    let threads = args.threads.unwrap_or_else(cores);
    if args.render_missing {
        let code = seed_plan(
            &runtime,
            service,
            plan,
            &tessera_server::seeding::SeedOptions::with_concurrency(threads),
        )?;
        if code != 0 {
            return Ok(code);
        }
    }
    let options = ExportOptions {
        format: args.format,
        read_threads: threads,
        store_options: args.options.iter().cloned().collect::<BTreeMap<_, _>>(),
        upload: UploadOptions {
            part_size: args.part_size_mb.saturating_mul(1 << 20),
            parts_in_flight: args.parts_in_flight,
        },
        verify: !args.no_verify,
        temp_dir: args.temp_dir.clone(),
    };
    let total = plan.area_tiles();
    eprintln!(
        "exporting {} in {} as {} ({}) to {}: up to {total} tiles, those of the area",
        plan.layer.label(),
        plan.grid.tms.id,
        args.format.extension(),
        plan.format.extension(),
        to,
    );
    let start = Instant::now();
    let display = Progress::new(total);
    let mut shown = display.clone();
    let done = runtime.block_on(export(plan, &destination, &options, move |n| {
        shown.update(n, start);
    }));
    display.finish();
    let done = done?;
    let upload = match done.crc32c {
        Some(crc) => format!(", {} parts, CRC32C {crc:08x}", done.parts),
        None => String::new(),
    };
    println!(
        "export complete: {} tiles ({} not in the cache, left out), {} bytes to {}{upload} in {:.1} s",
        done.tiles,
        done.missing,
        done.bytes,
        done.location,
        start.elapsed().as_secs_f64(),
    );
    Ok(0)
}

fn parse_format(text: &str) -> Result<ArchiveFormat, String> {
    ArchiveFormat::parse(text).ok_or_else(|| format!("{text:?}: use pmtiles or mbtiles"))
}

fn parse_option(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{text:?}: write KEY=VALUE"))
}
