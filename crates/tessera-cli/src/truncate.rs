//! `tessera truncate`: removes a layer's cached tiles by zoom, bbox or
//! polygon, deleting computed keys only (nothing is listed).

use std::time::Instant;

use clap::Args;
use tessera_server::Service;
use tessera_server::plan::TilePlan;

use crate::area::AreaArgs;
use crate::runtime::{CliResult, runtime};

/// Arguments of `tessera truncate`.
#[derive(Debug, Args)]
pub struct TruncateArgs {
    #[command(flatten)]
    area: AreaArgs,
    /// Tile format (png, jpg, webp) [default: the layer's first format].
    #[arg(long)]
    format: Option<String>,
}

/// Runs a truncation; returns the process exit status.
pub fn truncate(args: &TruncateArgs) -> CliResult {
    let (service, plans) = args.area.plans(args.format.as_deref())?;
    for plan in &plans {
        let status = truncate_plan(&service, plan, args)?;
        if status != 0 {
            return Ok(status);
        }
    }
    Ok(0)
}

/// Truncates one plan (one dimension value's tiles).
fn truncate_plan(service: &Service, plan: &TilePlan, args: &TruncateArgs) -> CliResult {
    let cache = plan
        .layer
        .cache
        .as_ref()
        .ok_or_else(|| format!("layer {:?} has no cache", plan.layer.name))?;
    let area = plan.tile_area();
    let tiles: u64 = area.ranges.iter().map(|r| r.range.count()).sum();
    eprintln!(
        "truncating {} in {} at zoom {}..{} as {}: {tiles} tiles in {} ranges, store {:?}",
        plan.layer.label(),
        plan.grid.tms.id,
        args.area.zoom.start(),
        args.area.zoom.end(),
        plan.format.extension(),
        area.ranges.len(),
        cache.store_name,
    );
    let start = Instant::now();
    let node = service.config.cluster.node();
    let done = runtime()?.block_on(tessera_server::truncate::truncate(plan, &node))?;
    println!(
        "truncate complete: {} objects deleted, {} rewritten without the area's tiles, in {:.1} s",
        done.report.objects_deleted,
        done.report.objects_rewritten,
        start.elapsed().as_secs_f64()
    );
    match done.announced {
        Ok(true) => println!(
            "serving nodes sharing the store drop their copies within cluster.generation_check_secs"
        ),
        Ok(false) => {}
        Err(e) => {
            eprintln!(
                "warning: the tiles are deleted, but serving nodes could not be told (they may serve copies from memory until restarted): {e}"
            );
            return Ok(1);
        }
    }
    Ok(0)
}
