//! Pixels between the source and the wire: raster buffers, styles that turn
//! source bands into RGBA, and encoders that turn RGBA into PNG, JPEG or WebP.
//!
//! The data path through this crate is `Raster` (bands as read and warped by
//! a source) → [`Style::apply`] → [`RgbaImage`] → [`encode`] of an
//! [`ImageView`]. Views borrow rows of a larger image with a stride, so a
//! metatile can be cut into tiles without copying sub-images. Every gzip
//! stream tessera unpacks (vector tiles, archive sections) goes through
//! [`inflate`], bounded.

pub mod band_math;
mod buffer;
mod color;
mod decode;
mod encode;
pub mod expression;
mod indexed_png;
pub mod inflate;
mod plain_png;
mod relief;
mod style;
mod terrain;

pub use buffer::{BandData, CanvasTooLarge, ImageView, MAX_CANVAS_PIXELS, Raster, RgbaImage};
pub use color::{Color, ColorRamp, RampStop};
pub use decode::{DecodeError, declared_size, decode};
pub use encode::{EncodeError, EncodeOptions, PngCompression, encode, encode_png_with_alpha};
pub use relief::{AspectSpec, SlopeSpec};
pub use style::{
    HillshadeSpec, PixelScale, RampSpec, RgbSpec, Style, StyleError, StyleSpec, build_style,
};
pub use terrain::ElevationStyle;
