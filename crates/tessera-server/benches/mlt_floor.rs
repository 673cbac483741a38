//! What a MapLibre Tile of given features can weigh at the least, against
//! the Mapbox Vector Tiles tessera made of them: for a directory of MVT
//! tiles (gzip or not, one per file), the bytes of
//!
//! - the MVT tiles, and their geometry fields alone;
//! - the MLT tiles tessera makes of them ([`tessera_server::mlt::encode`]);
//! - the MLT tiles of the same geometries with no properties and no ids,
//!   by the same encoder (every geometry encoding MLT has tried, the
//!   smallest kept per stream): what MLT's geometry costs;
//! - the property values' own bytes (strings' lengths, integers as
//!   varints, floats at their width), each distinct value of a column
//!   once a layer a tile: what any encoding that keeps each value whole
//!   must still write (a dictionary holds a repeated value once), before
//!   names, lengths, indexes or headers;
//! - the column names' own bytes, once a layer a tile (MVT writes them as
//!   its keys, MLT in its layer's header);
//! - the vertices' coordinate deltas as varints, and as the fewest bits
//!   each needs (the bound of any bit-packing, which MLT's FastPFOR
//!   reaches only in streams of at least 256 values).
//!
//! The sum of the third, fourth and fifth lines over the MVT bytes is a
//! floor for the ratio any MLT encoder that writes its column names in
//! every tile reaches on those tiles (without the names: any encoder).
//!
//!     cargo bench -p tessera-server --bench mlt_floor -- DIR

use std::collections::HashSet;
use std::io::Read;

use flate2::read::GzDecoder;
use mlt_core::encoder::EncoderConfig;
use mlt_core::geo_types::{Coord, Geometry, LineString};
use mlt_core::{PropValue, TileFeature, TileLayer};

/// Byte counts over every tile of a directory.
#[derive(Default)]
struct Counts {
    tiles: usize,
    layers: usize,
    mvt: usize,
    mvt_geometry: usize,
    mlt: usize,
    mlt_geometry: usize,
    values: usize,
    names: usize,
    vertices: usize,
    delta_varint: usize,
    delta_bits: usize,
}

fn main() {
    let Some(dir) = std::env::args().skip(1).find(|a| !a.starts_with("--")) else {
        eprintln!("usage: mlt_floor DIR");
        std::process::exit(2);
    };
    let mut counts = Counts::default();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("the directory can be read")
        .map(|e| e.expect("an entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let bytes = std::fs::read(&path).expect("a tile can be read");
        let raw = unpacked(&bytes);
        let layers = mlt_core::mvt::mvt_to_tile_layers(&raw).expect("an MVT tile");
        if layers.is_empty() {
            continue;
        }
        counts.tiles += 1;
        counts.mvt += raw.len();
        counts.mvt_geometry += mvt_geometry_bytes(&raw);
        counts.mlt += tessera_server::mlt::encode(&raw)
            .expect("the tile encodes")
            .len();
        for layer in &layers {
            counts.layers += 1;
            counts.names += layer
                .property_names()
                .iter()
                .map(String::len)
                .sum::<usize>();
            let mut bare = TileLayer::builder(layer.name(), layer.extent().get()).expect("a layer");
            let mut cursor = (0i32, 0i32);
            let mut distinct: Vec<HashSet<String>> =
                vec![HashSet::new(); layer.property_names().len()];
            for feature in layer.features() {
                for (column, value) in distinct.iter_mut().zip(feature.properties()) {
                    if column.insert(format!("{value:?}")) {
                        counts.values += value_bytes(value);
                    }
                }
                for ring in vertex_runs(feature.geometry()) {
                    for c in ring {
                        let (dx, dy) = (c.x - cursor.0, c.y - cursor.1);
                        cursor = (c.x, c.y);
                        counts.vertices += 1;
                        for d in [dx, dy] {
                            let z = zigzag(i64::from(d));
                            counts.delta_varint += varint_len(z);
                            counts.delta_bits += (64 - z.leading_zeros()).max(1) as usize;
                        }
                    }
                }
                bare.push_feature(TileFeature::new(feature.geometry().clone()))
                    .expect("a bare feature");
            }
            counts.mlt_geometry += bare
                .finish()
                .encode(EncoderConfig::default())
                .expect("the bare layer encodes")
                .len();
        }
    }
    report(&counts);
}

/// The tile's bytes, gunzipped if they are gzip.
fn unpacked(bytes: &[u8]) -> Vec<u8> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return bytes.to_vec();
    }
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("the gzip stream is whole");
    out
}

/// The coordinate runs MLT stores for a geometry: rings without their
/// closing vertex, lines, points.
fn vertex_runs(geometry: &Geometry<i32>) -> Vec<&[Coord<i32>]> {
    fn ring(r: &LineString<i32>) -> &[Coord<i32>] {
        let n = if r.0.len() > 1 && r.0.first() == r.0.last() {
            r.0.len() - 1
        } else {
            r.0.len()
        };
        &r.0[..n]
    }
    match geometry {
        Geometry::Point(p) => vec![std::slice::from_ref(&p.0)],
        Geometry::MultiPoint(m) => m.0.iter().map(|p| std::slice::from_ref(&p.0)).collect(),
        Geometry::LineString(l) => vec![&l.0[..]],
        Geometry::MultiLineString(m) => m.0.iter().map(|l| &l.0[..]).collect(),
        Geometry::Polygon(p) => std::iter::once(p.exterior())
            .chain(p.interiors())
            .map(ring)
            .collect(),
        Geometry::MultiPolygon(m) => {
            m.0.iter()
                .flat_map(|p| std::iter::once(p.exterior()).chain(p.interiors()))
                .map(ring)
                .collect()
        }
        _ => Vec::new(),
    }
}

/// A property value's own bytes: a string's length, an integer as a
/// varint (zigzag when signed), a float at its width.
fn value_bytes(value: &PropValue) -> usize {
    match value {
        PropValue::Str(Some(s)) => s.len(),
        PropValue::I64(Some(i)) => varint_len(zigzag(*i)),
        PropValue::I32(Some(i)) => varint_len(zigzag(i64::from(*i))),
        PropValue::U64(Some(u)) => varint_len(*u),
        PropValue::U32(Some(u)) => varint_len(u64::from(*u)),
        PropValue::F32(Some(_)) => 4,
        PropValue::F64(Some(_)) => 8,
        PropValue::Bool(Some(_)) | PropValue::I8(Some(_)) | PropValue::U8(Some(_)) => 1,
        _ => 0,
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn varint_len(v: u64) -> usize {
    ((64 - v.leading_zeros()).max(1) as usize).div_ceil(7)
}

/// One protobuf varint at `*at`, advancing it.
fn read_varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&byte) = b.get(*at) {
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            break;
        }
        shift += 7;
    }
    v
}

/// The fields of one protobuf message: (field number, payload).
fn fields(b: &[u8]) -> Vec<(u64, &[u8])> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < b.len() {
        let key = read_varint(b, &mut at);
        let start = at;
        let end = match key & 7 {
            0 => {
                read_varint(b, &mut at);
                at
            }
            1 => at + 8,
            2 => {
                let n = read_varint(b, &mut at) as usize;
                at + n
            }
            5 => at + 4,
            wire => panic!("protobuf wire type {wire} is not in vector tiles"),
        }
        .min(b.len());
        let from = if key & 7 == 2 { at } else { start };
        out.push((key >> 3, &b[from..end]));
        at = end;
    }
    out
}

/// The bytes of every feature's `geometry` field (tile.layers[3] →
/// feature[2] → geometry[4], packed varints) of a raw MVT.
fn mvt_geometry_bytes(tile: &[u8]) -> usize {
    fields(tile)
        .into_iter()
        .filter(|(n, _)| *n == 3)
        .flat_map(|(_, layer)| fields(layer))
        .filter(|(n, _)| *n == 2)
        .flat_map(|(_, feature)| fields(feature))
        .filter(|(n, _)| *n == 4)
        .map(|(_, g)| g.len())
        .sum()
}

fn report(c: &Counts) {
    let of = |n: usize| n as f64 / c.mvt as f64;
    println!("tiles with features\t{}", c.tiles);
    println!("MVT bytes\t{}\t1.000", c.mvt);
    println!(
        "MVT geometry fields\t{}\t{:.3}",
        c.mvt_geometry,
        of(c.mvt_geometry)
    );
    println!("MLT bytes\t{}\t{:.3}", c.mlt, of(c.mlt));
    println!(
        "MLT of the geometries alone\t{}\t{:.3}",
        c.mlt_geometry,
        of(c.mlt_geometry)
    );
    println!(
        "property values' own bytes\t{}\t{:.3}",
        c.values,
        of(c.values)
    );
    println!(
        "floor: MLT geometries + values\t{}\t{:.3}",
        c.mlt_geometry + c.values,
        of(c.mlt_geometry + c.values)
    );
    println!("column names' own bytes\t{}\t{:.3}", c.names, of(c.names));
    let named = c.mlt_geometry + c.values + c.names;
    println!(
        "floor with names: MLT geometries + values + names\t{}\t{:.3}",
        named,
        of(named)
    );
    println!("vertices\t{}", c.vertices);
    println!(
        "coordinate deltas as varints\t{}\t{:.3}",
        c.delta_varint,
        of(c.delta_varint)
    );
    println!(
        "coordinate deltas bit-packed exactly\t{}\t{:.3}",
        c.delta_bits.div_ceil(8),
        of(c.delta_bits.div_ceil(8))
    );
    println!(
        "mean values per vertex stream (one a layer)\t{:.0}",
        2.0 * c.vertices as f64 / c.layers as f64
    );
}
