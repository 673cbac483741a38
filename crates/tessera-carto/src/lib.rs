//! Cartography, below the sources that have features to draw: how features
//! are styled ([`style`]: rules with filters, zooms, fills, strokes,
//! markers), labelled ([`label`]: placement without overlaps, [`text`]:
//! the bundled font), drawn ([`draw`]: a window of `tiny-skia` pixels) and
//! described by MapLibre style documents ([`maplibre`]: read, with the
//! expressions it evaluates per feature). The vector source and vector
//! tile archives draw with it; the server reads styles with it. It reads
//! no data: callers hand it shapes in pixels and attributes.

pub mod draw;
pub mod geometry;
pub mod glyphs;
pub mod label;
pub mod maplibre;
pub mod sprites;
pub mod style;
pub mod text;
