//! What a WMTS capabilities document says about one layer: its tile URL
//! template, format, extent and tile matrix set.

use tessera_grid::{BBox, TileFormat, TileMatrix, TileMatrixSet};

use super::spec::WmtsSourceSpec;
use crate::Crs;

/// OGC's standardized rendering pixel size, in metres.
const PIXEL_SIZE: f64 = 0.000_28;

/// One matrix as the document gives it.
#[derive(Debug, Clone)]
struct Matrix {
    id: String,
    scale_denominator: f64,
    /// As written: in the CRS's axis order.
    top_left: (f64, f64),
    tile_width: u32,
    tile_height: u32,
    columns: u32,
    rows: u32,
}

/// The layer, ready to be asked for tiles.
#[derive(Debug, Clone)]
pub struct WmtsLayer {
    /// The CRS of its tile matrix set, as written.
    pub crs: String,
    /// Tile URL template with `{TileMatrix}`, `{TileRow}` and `{TileCol}`.
    pub template: String,
    /// The tile format.
    pub format: TileFormat,
    /// Its WGS84BoundingBox.
    pub lonlat: Option<BBox>,
    /// Its dimensions: identifier (`Time`) and the values listed.
    pub dimensions: Vec<(String, Vec<String>)>,
    matrix_set: String,
    matrices: Vec<Matrix>,
}

/// Largest tile side read from an upstream's capabilities, in pixels:
/// tiles are stitched into canvases sized from it, so it is checked before
/// anything is allocated (real servers use 256 or 512).
pub const MAX_TILE_SIDE: u32 = 4096;

impl WmtsLayer {
    /// The tile matrix set as a grid (matrices sharing one tile size and
    /// one top-left corner, as tessera's grids do).
    pub fn grid(&self, crs: &Crs) -> Result<TileMatrixSet, String> {
        let first = self
            .matrices
            .first()
            .ok_or_else(|| format!("tile matrix set {} has no matrix", self.matrix_set))?;
        let (ox, oy) = if crs.authority_yx {
            (first.top_left.1, first.top_left.0)
        } else {
            first.top_left
        };
        if !(1..=MAX_TILE_SIDE).contains(&first.tile_width)
            || !(1..=MAX_TILE_SIDE).contains(&first.tile_height)
        {
            return Err(format!(
                "tile matrix set {}: tiles of {}x{} pixels (at most {MAX_TILE_SIDE} a side is read)",
                self.matrix_set, first.tile_width, first.tile_height
            ));
        }
        let mut matrices = Vec::with_capacity(self.matrices.len());
        for m in &self.matrices {
            if (m.tile_width, m.tile_height) != (first.tile_width, first.tile_height)
                || (m.top_left.0 - first.top_left.0).abs() > 1e-6 * first.top_left.0.abs().max(1.0)
                || (m.top_left.1 - first.top_left.1).abs() > 1e-6 * first.top_left.1.abs().max(1.0)
            {
                return Err(format!(
                    "tile matrix set {}: matrices of different tile sizes or corners are not supported",
                    self.matrix_set
                ));
            }
            matrices.push(TileMatrix {
                id: m.id.clone(),
                resolution: m.scale_denominator * PIXEL_SIZE / crs.meters_per_unit,
                scale_denominator: m.scale_denominator,
                matrix_width: m.columns,
                matrix_height: m.rows,
            });
        }
        if matrices
            .windows(2)
            .any(|w| w[1].resolution >= w[0].resolution)
        {
            return Err(format!(
                "tile matrix set {}: scale denominators must decrease",
                self.matrix_set
            ));
        }
        let m0 = &matrices[0];
        let extent = BBox::new(
            ox,
            oy - f64::from(m0.matrix_height) * f64::from(first.tile_height) * m0.resolution,
            ox + f64::from(m0.matrix_width) * f64::from(first.tile_width) * m0.resolution,
            oy,
        )
        .map_err(|e| format!("tile matrix set {}: {e}", self.matrix_set))?;
        Ok(TileMatrixSet {
            id: self.matrix_set.clone(),
            title: self.matrix_set.clone(),
            crs: crs.id.clone(),
            crs_urn: self.crs.clone(),
            well_known_scale_set: None,
            meters_per_unit: crs.meters_per_unit,
            extent,
            origin_x: ox,
            origin_y: oy,
            tile_width: first.tile_width,
            tile_height: first.tile_height,
            matrices,
        })
    }
}

fn child<'a>(n: roxmltree::Node<'a, 'a>, name: &str) -> Option<roxmltree::Node<'a, 'a>> {
    n.children().find(|c| c.tag_name().name() == name)
}

fn text<'a>(n: roxmltree::Node<'a, 'a>, name: &str) -> Option<&'a str> {
    child(n, name).and_then(|c| c.text()).map(str::trim)
}

/// Finds `spec.layer` in a WMTS capabilities document.
pub fn parse(doc_text: &str, spec: &WmtsSourceSpec) -> Result<WmtsLayer, String> {
    let doc = super::xml::parse(doc_text).map_err(|e| format!("its capabilities are {e}"))?;
    let contents = doc
        .descendants()
        .find(|n| n.tag_name().name() == "Contents")
        .ok_or("its capabilities have no Contents (is it a WMTS?)")?;
    let layers: Vec<_> = contents
        .children()
        .filter(|n| n.tag_name().name() == "Layer")
        .collect();
    let layer = layers
        .iter()
        .find(|l| text(**l, "Identifier") == Some(spec.layer.as_str()))
        .ok_or_else(|| {
            let known: Vec<&str> = layers
                .iter()
                .filter_map(|l| text(*l, "Identifier"))
                .collect();
            format!(
                "it has no layer {:?} (it has: {})",
                spec.layer,
                known.join(", ")
            )
        })?;
    let styles: Vec<(String, bool)> = layer
        .children()
        .filter(|n| n.tag_name().name() == "Style")
        .filter_map(|s| {
            Some((
                text(s, "Identifier")?.to_string(),
                s.attribute("isDefault") == Some("true"),
            ))
        })
        .collect();
    let style = match &spec.style {
        Some(s) if styles.iter().any(|(id, _)| id == s) => s.clone(),
        Some(s) => {
            return Err(format!(
                "layer {} has no style {s:?} (it has: {})",
                spec.layer,
                styles
                    .iter()
                    .map(|(id, _)| id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        None => styles
            .iter()
            .find(|(_, d)| *d)
            .or(styles.first())
            .map_or_else(|| "default".to_string(), |(id, _)| id.clone()),
    };
    let formats: Vec<&str> = layer
        .children()
        .filter(|n| n.tag_name().name() == "Format")
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    let format_name = match &spec.format {
        Some(f) => f.clone(),
        None => formats
            .iter()
            .find(|f| f.eq_ignore_ascii_case("image/png"))
            .or(formats.first())
            .map_or_else(|| "image/png".to_string(), ToString::to_string),
    };
    let format = TileFormat::from_mime(&format_name)
        .filter(|f| *f != TileFormat::Mlt)
        .ok_or_else(|| {
            format!("format {format_name} is not one tessera decodes (PNG, JPEG, WebP)")
        })?;
    let links: Vec<&str> = layer
        .children()
        .filter(|n| n.tag_name().name() == "TileMatrixSetLink")
        .filter_map(|n| text(n, "TileMatrixSet"))
        .collect();
    // A tessera upstream names a set of some of a grid's zooms
    // `{grid}:{min}-{max}`: asked for the grid, take it.
    let of_grid = |m: &str, link: &str| {
        link.strip_prefix(m)
            .and_then(|rest| rest.strip_prefix(':'))
            .and_then(|range| range.split_once('-'))
            .is_some_and(|(a, b)| a.parse::<u8>().is_ok() && b.parse::<u8>().is_ok())
    };
    let matrix_set = match &spec.matrix_set {
        Some(m) => links
            .iter()
            .find(|l| **l == m.as_str())
            .or_else(|| links.iter().find(|l| of_grid(m, l)))
            .map(ToString::to_string)
            .ok_or_else(|| {
                format!(
                    "layer {} is not in tile matrix set {m:?} (it is in: {})",
                    spec.layer,
                    links.join(", ")
                )
            })?,
        None => links
            .first()
            .map(ToString::to_string)
            .ok_or_else(|| format!("layer {} links no tile matrix set", spec.layer))?,
    };
    let set = contents
        .children()
        .filter(|n| n.tag_name().name() == "TileMatrixSet")
        .find(|n| text(*n, "Identifier") == Some(matrix_set.as_str()))
        .ok_or_else(|| format!("tile matrix set {matrix_set} is not defined"))?;
    let crs = text(set, "SupportedCRS")
        .ok_or_else(|| format!("tile matrix set {matrix_set} has no SupportedCRS"))?
        .to_string();
    let number = |n: roxmltree::Node<'_, '_>, name: &str| -> Result<f64, String> {
        text(n, name)
            .and_then(|t| t.parse::<f64>().ok())
            .ok_or_else(|| format!("tile matrix set {matrix_set}: a TileMatrix lacks {name}"))
    };
    let mut matrices = Vec::new();
    for m in set
        .children()
        .filter(|n| n.tag_name().name() == "TileMatrix")
    {
        let corner: Vec<f64> = text(m, "TopLeftCorner")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        if corner.len() != 2 {
            return Err(format!(
                "tile matrix set {matrix_set}: a TopLeftCorner is not two numbers"
            ));
        }
        matrices.push(Matrix {
            id: text(m, "Identifier").unwrap_or_default().to_string(),
            scale_denominator: number(m, "ScaleDenominator")?,
            top_left: (corner[0], corner[1]),
            // Saturating: a negative or huge size stays out of range for
            // `grid` to refuse.
            tile_width: number(m, "TileWidth")? as u32,
            tile_height: number(m, "TileHeight")? as u32,
            columns: number(m, "MatrixWidth")? as u32,
            rows: number(m, "MatrixHeight")? as u32,
        });
    }
    let resource = layer
        .children()
        .filter(|n| {
            n.tag_name().name() == "ResourceURL" && n.attribute("resourceType") == Some("tile")
        })
        .find(|n| {
            n.attribute("format")
                .is_some_and(|f| f.eq_ignore_ascii_case(&format_name))
        })
        .and_then(|n| n.attribute("template"));
    let template = match resource {
        Some(t) => t.replace("{Style}", &style).replace("{style}", &style).replace("{TileMatrixSet}", &matrix_set),
        None => kvp_template(&doc, &spec.layer, &style, &matrix_set, &format_name)
            .ok_or("the layer has no tile ResourceURL for its format and the service advertises no KVP GetTile")?,
    };
    let lonlat = child(*layer, "WGS84BoundingBox").and_then(|b| {
        let corner = |name: &str| -> Option<(f64, f64)> {
            let v: Vec<f64> = text(b, name)?
                .split_whitespace()
                .filter_map(|t| t.parse().ok())
                .collect();
            (v.len() == 2).then(|| (v[0], v[1]))
        };
        let (w, s) = corner("LowerCorner")?;
        let (e, n) = corner("UpperCorner")?;
        BBox::new(w, s, e, n).ok()
    });
    let dimensions = layer
        .children()
        .filter(|n| n.tag_name().name() == "Dimension")
        .filter_map(|d| {
            let id = text(d, "Identifier")?.trim().to_string();
            let values = d
                .children()
                .filter(|n| n.tag_name().name() == "Value")
                .filter_map(|n| n.text())
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            Some((id, values))
        })
        .collect();
    Ok(WmtsLayer {
        crs,
        template,
        format,
        lonlat,
        dimensions,
        matrix_set,
        matrices,
    })
}

/// A KVP GetTile template from the document's OperationsMetadata.
fn kvp_template(
    doc: &roxmltree::Document<'_>,
    layer: &str,
    style: &str,
    matrix_set: &str,
    format: &str,
) -> Option<String> {
    let op = doc
        .descendants()
        .find(|n| n.tag_name().name() == "Operation" && n.attribute("name") == Some("GetTile"))?;
    let href = op
        .descendants()
        .filter(|n| n.tag_name().name() == "Get")
        .find(|g| {
            g.descendants()
                .any(|v| v.tag_name().name() == "Value" && v.text().map(str::trim) == Some("KVP"))
                || !g.descendants().any(|v| v.tag_name().name() == "Constraint")
        })
        .and_then(|g| {
            g.attributes()
                .find(|a| a.name() == "href")
                .map(|a| a.value().to_string())
        })?;
    let mut url = reqwest::Url::parse(&href).ok()?;
    url.query_pairs_mut()
        .append_pair("SERVICE", "WMTS")
        .append_pair("REQUEST", "GetTile")
        .append_pair("VERSION", "1.0.0")
        .append_pair("LAYER", layer)
        .append_pair("STYLE", style)
        .append_pair("TILEMATRIXSET", matrix_set)
        .append_pair("FORMAT", format);
    Some(format!(
        "{url}&TILEMATRIX={{TileMatrix}}&TILEROW={{TileRow}}&TILECOL={{TileCol}}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: &str = r#"<Capabilities xmlns="http://www.opengis.net/wmts/1.0" xmlns:ows="http://www.opengis.net/ows/1.1">
  <Contents>
    <Layer>
      <ows:Identifier>relief</ows:Identifier>
      <Style isDefault="true"><ows:Identifier>default</ows:Identifier></Style>
      <Format>image/png</Format>
      <TileMatrixSetLink><TileMatrixSet>WebMercatorQuad:0-1</TileMatrixSet></TileMatrixSetLink>
      <ResourceURL format="image/png" resourceType="tile" template="http://up/{TileMatrixSet}/{TileMatrix}/{TileRow}/{TileCol}.png"/>
    </Layer>
    <TileMatrixSet>
      <ows:Identifier>WebMercatorQuad:0-1</ows:Identifier>
      <ows:SupportedCRS>urn:ogc:def:crs:EPSG::3857</ows:SupportedCRS>
      <TileMatrix><ows:Identifier>0</ows:Identifier><ScaleDenominator>559082264.0287178</ScaleDenominator><TopLeftCorner>-20037508.3427892 20037508.3427892</TopLeftCorner><TileWidth>256</TileWidth><TileHeight>256</TileHeight><MatrixWidth>1</MatrixWidth><MatrixHeight>1</MatrixHeight></TileMatrix>
      <TileMatrix><ows:Identifier>1</ows:Identifier><ScaleDenominator>279541132.0143589</ScaleDenominator><TopLeftCorner>-20037508.3427892 20037508.3427892</TopLeftCorner><TileWidth>256</TileWidth><TileHeight>256</TileHeight><MatrixWidth>2</MatrixWidth><MatrixHeight>2</MatrixHeight></TileMatrix>
    </TileMatrixSet>
  </Contents>
</Capabilities>"#;

    fn spec(matrix_set: &str) -> WmtsSourceSpec {
        serde_json::from_value(serde_json::json!({
            "url": "http://up/wmts", "layer": "relief", "matrix_set": matrix_set,
        }))
        .unwrap()
    }

    #[test]
    fn a_grid_asked_for_finds_a_tessera_set_of_some_of_its_zooms() {
        let layer = parse(CAPS, &spec("WebMercatorQuad")).unwrap();
        assert_eq!(layer.matrix_set, "WebMercatorQuad:0-1");
        assert!(
            layer.template.contains("{TileMatrix}"),
            "{}",
            layer.template
        );
        let err = parse(CAPS, &spec("WorldCRS84Quad")).unwrap_err();
        assert!(err.contains("not in tile matrix set"), "{err}");
    }
}
