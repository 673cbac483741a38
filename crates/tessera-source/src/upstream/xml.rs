//! Upstream XML documents (capabilities, exception reports), parsed with
//! their cost bounded.
//!
//! No WMS or WMTS document needs entities of its own: a DOCTYPE is allowed
//! (WMS 1.1.1 documents have one, never fetched), but any `<!ENTITY`
//! declaration refuses the document, which stops billion laughs and the
//! quadratic blow-up of one large entity referenced many times. The number
//! of nodes is capped, and text kept from a document for messages is cut to
//! [`EXCERPT_CHARS`](super::client::EXCERPT_CHARS) and escaped.

use crate::excerpt;

/// Most nodes (elements, text, attributes' owners) one upstream document
/// may have; a capabilities document of a few thousand layers has far fewer.
pub const MOST_NODES: u32 = 2_000_000;

/// Parses an upstream document; the error says why it was refused.
pub(crate) fn parse(text: &str) -> Result<roxmltree::Document<'_>, String> {
    if text.contains("<!ENTITY") {
        return Err(
            "refused: it declares XML entities, which no WMS or WMTS document needs".into(),
        );
    }
    roxmltree::Document::parse_with_options(
        text,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            nodes_limit: MOST_NODES,
            ..roxmltree::ParsingOptions::default()
        },
    )
    .map_err(|e| format!("not XML tessera reads: {e}"))
}

/// Whether an answer is an XML document (an exception, whatever its status
/// or content type says).
pub(crate) fn is_xml(content_type: &str, body: &[u8]) -> bool {
    content_type.contains("xml")
        || body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'<')
}

/// The text of a ServiceException report (or the start of the body), cut
/// and escaped for the log.
pub(crate) fn exception_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if let Ok(doc) = parse(&text) {
        let messages: Vec<String> = doc
            .descendants()
            .filter(|n| {
                n.has_tag_name("ServiceException") || n.tag_name().name() == "ExceptionText"
            })
            .take(4)
            .map(|n| {
                let code = n.attribute("code").or_else(|| n.attribute("exceptionCode"));
                let t = n.text().unwrap_or_default().trim();
                match code {
                    Some(c) => format!("{c}: {t}"),
                    None => t.to_string(),
                }
            })
            .collect();
        if !messages.is_empty() {
            return excerpt(messages.join("; ").as_bytes());
        }
    }
    excerpt(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_declarations_are_refused_before_any_expansion() {
        // One 1 MB entity referenced a thousand times once expanded to 1 GB.
        let big = "x".repeat(1 << 20);
        let refs = "&e;".repeat(1000);
        let doc =
            format!("<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY e \"{big}\">]><r>{refs}</r>");
        let e = parse(&doc).unwrap_err();
        assert!(e.contains("declares XML entities"), "{e}");
        // A DOCTYPE without entities (WMS 1.1.1) is read.
        let ok = "<?xml version=\"1.0\"?><!DOCTYPE WMT_MS_Capabilities SYSTEM \
                  \"http://schemas.opengis.net/wms/1.1.1/WMS_MS_Capabilities.dtd\"><WMT_MS_Capabilities/>";
        assert!(parse(ok).is_ok());
    }

    #[test]
    fn exception_text_is_cut_and_escaped() {
        let long = format!(
            "<ServiceExceptionReport><ServiceException code=\"X\">{}\n</ServiceException></ServiceExceptionReport>",
            "y".repeat(10_000)
        );
        let t = exception_text(long.as_bytes());
        assert!(t.len() < 200, "{} chars kept", t.len());
        assert!(t.starts_with("\"X: yyy"), "{t}");
        let t = exception_text(b"<html>\n<b>oops</b>\x1b[0m");
        assert!(!t.contains('\n') && !t.contains('\u{1b}'), "{t}");
    }
}
