//! The glyph range protocol buffer MapLibre reads (`glyphs.proto`,
//! package `mapboxgl.glyphs`, proto2): `glyphs { repeated fontstack
//! stacks = 1 }`, `fontstack { name = 1; range = 2; repeated glyph glyphs
//! = 3 }`, `glyph { id = 1; bitmap = 2; width = 3; height = 4; sint32
//! left = 5; sint32 top = 6; advance = 7 }`.

use prost::Message;

use super::sdf::SdfGlyph;

/// `glyph`.
#[derive(Clone, PartialEq, Message)]
struct Glyph {
    #[prost(uint32, required, tag = "1")]
    id: u32,
    #[prost(bytes = "vec", optional, tag = "2")]
    bitmap: Option<Vec<u8>>,
    #[prost(uint32, required, tag = "3")]
    width: u32,
    #[prost(uint32, required, tag = "4")]
    height: u32,
    #[prost(sint32, required, tag = "5")]
    left: i32,
    #[prost(sint32, required, tag = "6")]
    top: i32,
    #[prost(uint32, required, tag = "7")]
    advance: u32,
}

/// `fontstack`.
#[derive(Clone, PartialEq, Message)]
struct Fontstack {
    #[prost(string, required, tag = "1")]
    name: String,
    #[prost(string, required, tag = "2")]
    range: String,
    #[prost(message, repeated, tag = "3")]
    glyphs: Vec<Glyph>,
}

/// `glyphs`.
#[derive(Clone, PartialEq, Message)]
struct GlyphsMessage {
    #[prost(message, repeated, tag = "1")]
    stacks: Vec<Fontstack>,
}

/// A decoded range: the fontstack's name, its range and glyphs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The fontstack's name.
    pub name: String,
    /// `start-end`.
    pub range: String,
    /// Its glyphs.
    pub glyphs: Vec<SdfGlyph>,
}

/// The range starting at `start` of fontstack `name`, with `glyphs`.
pub fn encode(name: &str, start: u32, glyphs: &[SdfGlyph]) -> Vec<u8> {
    GlyphsMessage {
        stacks: vec![Fontstack {
            name: name.to_string(),
            range: format!("{start}-{}", start + super::RANGE - 1),
            glyphs: glyphs
                .iter()
                .map(|g| Glyph {
                    id: g.id,
                    bitmap: Some(g.bitmap.clone()),
                    width: g.width,
                    height: g.height,
                    left: g.left,
                    top: g.top,
                    advance: g.advance,
                })
                .collect(),
        }],
    }
    .encode_to_vec()
}

/// The first fontstack of an encoded range (for tests and tools), or why
/// there is none.
pub fn decode(bytes: &[u8]) -> Result<Range, String> {
    let message = GlyphsMessage::decode(bytes).map_err(|e| e.to_string())?;
    let stack = message
        .stacks
        .into_iter()
        .next()
        .ok_or_else(|| "no fontstack".to_string())?;
    Ok(Range {
        name: stack.name,
        range: stack.range,
        glyphs: stack
            .glyphs
            .into_iter()
            .map(|g| SdfGlyph {
                id: g.id,
                bitmap: g.bitmap.unwrap_or_default(),
                width: g.width,
                height: g.height,
                left: g.left,
                top: g.top,
                advance: g.advance,
            })
            .collect(),
    })
}
