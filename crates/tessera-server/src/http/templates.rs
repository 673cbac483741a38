//! XML documents from templates: the capabilities documents are written as
//! the XML they produce (`templates/*.xml`), filled by `minijinja` from a
//! serializable context.
//!
//! Every string a template prints is XML-escaped ([`escape`]); numbers are
//! handed to templates already formatted (Rust's shortest round-trip form,
//! as before templates: `-180`, `85.0511287798066`), so a document never
//! depends on the template engine's own number formatting.

use std::sync::OnceLock;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;
use tessera_grid::BBox;

use super::error::ApiError;
use super::xml::escape;

/// WMS 1.3.0 GetCapabilities.
pub const WMS_1_3_0: &str = "wms_1_3_0.xml";
/// WMS 1.1.1 GetCapabilities.
pub const WMS_1_1_1: &str = "wms_1_1_1.xml";
/// WMTS 1.0.0 GetCapabilities.
pub const WMTS_1_0_0: &str = "wmts_1_0_0.xml";

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(true);
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_formatter(|out, state, value| match value.as_str() {
            Some(text) if !value.is_safe() => {
                out.write_str(&escape(text)).map_err(minijinja::Error::from)
            }
            _ => minijinja::escape_formatter(out, state, value),
        });
        for (name, source) in [
            (WMS_1_3_0, include_str!("templates/wms_1_3_0.xml")),
            (WMS_1_1_1, include_str!("templates/wms_1_1_1.xml")),
            (WMTS_1_0_0, include_str!("templates/wmts_1_0_0.xml")),
            // The `service:` section's abstract/keywords and contact/fees
            // blocks, the same in WMS 1.1.1 and 1.3.0.
            (
                "wms_service_abstract.xml",
                include_str!("templates/wms_service_abstract.xml"),
            ),
            (
                "wms_service_contact.xml",
                include_str!("templates/wms_service_contact.xml"),
            ),
        ] {
            env.add_template(name, source)
                .expect("the built-in templates are valid");
        }
        env
    })
}

/// Renders template `name` with `context` as an XML response.
pub fn xml_response(
    name: &str,
    context: &impl Serialize,
    content_type: &'static str,
) -> Result<Response, ApiError> {
    let body = environment()
        .get_template(name)
        .and_then(|t| t.render(context))
        .map_err(|e| ApiError::internal(&e))?;
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(r)
}

/// A bounding box with its edges formatted for a document.
#[derive(Debug, Clone, Serialize)]
pub struct Extent {
    /// Minimum x (longitude).
    pub west: String,
    /// Minimum y (latitude).
    pub south: String,
    /// Maximum x (longitude).
    pub east: String,
    /// Maximum y (latitude).
    pub north: String,
}

impl From<&BBox> for Extent {
    fn from(b: &BBox) -> Extent {
        Extent {
            west: b.min_x.to_string(),
            south: b.min_y.to_string(),
            east: b.max_x.to_string(),
            north: b.max_y.to_string(),
        }
    }
}

impl Extent {
    /// A longitude/latitude box clamped to the world.
    pub fn lonlat(b: &BBox) -> Extent {
        Extent::from(&BBox {
            min_x: b.min_x.max(-180.0),
            min_y: b.min_y.max(-90.0),
            max_x: b.max_x.min(180.0),
            max_y: b.max_y.min(90.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_renders_and_strings_are_escaped() {
        for name in [WMS_1_3_0, WMS_1_1_1, WMTS_1_0_0] {
            assert!(environment().get_template(name).is_ok(), "{name}");
        }
        let env = environment();
        let out = env
            .render_str("<a>{{ t }}</a>", minijinja::context! { t => "x<y&\"z\"" })
            .unwrap();
        assert_eq!(out, "<a>x&lt;y&amp;&quot;z&quot;</a>");
    }
}
