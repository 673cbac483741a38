//! Each format written and read back by this crate gives the same tiles,
//! byte for byte, and the same metadata; and the reference tools accept
//! what is written: go-pmtiles' `pmtiles verify` (its path in
//! `TESSERA_PMTILES_BIN`, set by `scripts/test`) and the sqlite3 shell,
//! which must find the MBTiles 1.3 schema and metadata rows.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use tessera_archive::bytes::LocalBytes;
use tessera_archive::mbtiles::read::Mbtiles;
use tessera_archive::pmtiles::read::Pmtiles;
use tessera_archive::{ArchiveFormat, ArchiveWriter, TileArchive, TileMetadata, packed_once};
use tessera_grid::{BBox, TileCoord, TileFormat};

/// What the archive says about itself, as an export writes it.
fn metadata(format: TileFormat) -> TileMetadata {
    TileMetadata {
        format,
        min_zoom: 1,
        max_zoom: 2,
        bounds: Some(BBox::new(-10.5, -20.25, 30.0, 40.125).unwrap()),
        center: Some((10.0, 10.0, 2)),
        name: Some("relief".into()),
        description: Some("Shaded relief".into()),
        attribution: Some("<a href=\"https://example.org\">Example</a>".into()),
        vector_layers: format.is_vector().then(|| {
            serde_json::json!([{"id": "roads", "fields": {"kind": "String"}, "minzoom": 1, "maxzoom": 2}])
        }),
        version: None,
    }
}

/// Distinct tiles at zooms 1 and 2: each the bytes an archive holds
/// (vector tiles gzip-packed once).
fn tiles(format: TileFormat) -> Vec<(TileCoord, Vec<u8>)> {
    let mut out = Vec::new();
    for z in 1..=2u8 {
        for y in 0..(1u32 << z) {
            for x in 0..(1u32 << z) {
                let body = format!("tile {z}/{x}/{y}").into_bytes();
                let bytes = if format.is_vector() {
                    packed_once(body.into(), flate2::Compression::default())
                        .unwrap()
                        .to_vec()
                } else {
                    // Not a real PNG: archives hold bytes, whatever they are.
                    body
                };
                out.push((TileCoord::restored(z, x, y), bytes));
            }
        }
    }
    out
}

fn write(format: ArchiveFormat, path: &Path, meta: &TileMetadata, tiles: &[(TileCoord, Vec<u8>)]) {
    let mut writer = ArchiveWriter::create(format, path, meta).unwrap();
    for (coord, bytes) in tiles {
        writer.add(*coord, bytes).unwrap();
    }
    writer.finish().unwrap();
}

fn read(format: ArchiveFormat, path: &Path) -> Arc<dyn TileArchive> {
    let name = path.to_str().unwrap();
    match format {
        ArchiveFormat::Pmtiles => {
            Arc::new(Pmtiles::open(Arc::new(LocalBytes::open(name).unwrap()), 1 << 20).unwrap())
        }
        ArchiveFormat::Mbtiles => Arc::new(Mbtiles::open(path, name, None).unwrap()),
    }
}

/// Bounds as PMTiles holds them: degrees in 1e-7 steps.
fn close(a: &BBox, b: &BBox) -> bool {
    let near = |x: f64, y: f64| (x - y).abs() < 1e-6;
    near(a.min_x, b.min_x)
        && near(a.min_y, b.min_y)
        && near(a.max_x, b.max_x)
        && near(a.max_y, b.max_y)
}

#[test]
fn every_format_reads_back_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    for format in [ArchiveFormat::Pmtiles, ArchiveFormat::Mbtiles] {
        for tile_format in [TileFormat::Png, TileFormat::Mvt] {
            let path = dir
                .path()
                .join(format!("{tile_format:?}.{}", format.extension()));
            let meta = metadata(tile_format);
            let written = tiles(tile_format);
            write(format, &path, &meta, &written);
            let archive = read(format, &path);
            let coords: Vec<TileCoord> = written.iter().map(|(c, _)| *c).collect();
            let got = archive.tiles(&coords).unwrap();
            for ((coord, want), got) in written.iter().zip(got) {
                assert_eq!(
                    got.as_deref(),
                    Some(&want[..]),
                    "{format:?} {tile_format:?}: tile {coord:?} is not the bytes written"
                );
            }
            let missing = archive.tiles(&[TileCoord::restored(3, 0, 0)]).unwrap();
            assert_eq!(missing, vec![None], "{format:?}: a tile never written");
            let read_back = TileMetadata {
                version: None,
                ..archive.metadata().clone()
            };
            assert!(
                close(&read_back.bounds.unwrap(), &meta.bounds.unwrap()),
                "{format:?}: bounds {:?}",
                read_back.bounds
            );
            assert_eq!(
                TileMetadata {
                    bounds: meta.bounds,
                    ..read_back
                },
                meta,
                "{format:?} {tile_format:?}: the metadata read is not the metadata written"
            );
        }
    }
}

#[test]
fn pmtiles_verify_accepts_what_is_written() {
    let tool = std::env::var("TESSERA_PMTILES_BIN")
        .expect("TESSERA_PMTILES_BIN names go-pmtiles (scripts/go-pmtiles builds it)");
    let dir = tempfile::tempdir().unwrap();
    for tile_format in [TileFormat::Png, TileFormat::Mvt] {
        let path = dir.path().join(format!("{tile_format:?}.pmtiles"));
        write(
            ArchiveFormat::Pmtiles,
            &path,
            &metadata(tile_format),
            &tiles(tile_format),
        );
        run(Command::new(&tool).arg("verify").arg(&path));
        let text = run(Command::new(&tool).arg("show").arg(&path));
        let (kind, compression) = match tile_format {
            TileFormat::Mvt => ("mvt", "gzip"),
            _ => ("png", "none"),
        };
        assert!(text.contains(&format!("tile type: {kind}")), "{text}");
        assert!(
            text.contains(&format!("tile compression: {compression}")),
            "{text}"
        );
        if tile_format == TileFormat::Mvt {
            assert!(text.contains("vector_layers"), "{text}");
        }
    }
}

#[test]
fn sqlite3_finds_the_mbtiles_1_3_schema_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.mbtiles");
    write(
        ArchiveFormat::Mbtiles,
        &path,
        &metadata(TileFormat::Mvt),
        &tiles(TileFormat::Mvt),
    );
    let sql = |query: &str| {
        run(Command::new("sqlite3")
            .arg("-readonly")
            .arg(&path)
            .arg(query))
    };
    // The columns MBTiles 1.3 names, in its tables (or views).
    assert_eq!(
        sql("SELECT group_concat(name, ',') FROM pragma_table_info('metadata')").trim(),
        "name,value"
    );
    assert_eq!(
        sql("SELECT group_concat(name, ',') FROM pragma_table_info('tiles')").trim(),
        "zoom_level,tile_column,tile_row,tile_data"
    );
    let row = |name: &str| sql(&format!("SELECT value FROM metadata WHERE name = '{name}'"));
    assert_eq!(row("name").trim(), "relief");
    assert_eq!(row("format").trim(), "pbf");
    assert_eq!(row("version").trim(), "1.3");
    assert_eq!(row("minzoom").trim(), "1");
    assert_eq!(row("maxzoom").trim(), "2");
    let json: serde_json::Value = serde_json::from_str(&row("json")).unwrap();
    assert_eq!(json["vector_layers"][0]["id"], "roads", "{json}");
    // Rows from the bottom: XYZ 2/1/0 is TMS row 3.
    assert_eq!(
        sql("SELECT count(*) FROM tiles WHERE zoom_level = 2 AND tile_column = 1 AND tile_row = 3")
            .trim(),
        "1"
    );
}

/// What `command` (a reference tool) writes, once it succeeded; a failure
/// (or a missing tool) fails the test with what it said.
fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} cannot run (scripts/test installs it): {e}"));
    assert!(
        out.status.success(),
        "{command:?} refused: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
