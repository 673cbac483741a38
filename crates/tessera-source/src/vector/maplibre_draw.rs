//! A window drawn with a MapLibre style: each style layer in order over
//! the features of its data layer, each feature's paint evaluated for it;
//! symbol layers' text becomes label candidates, placed with the rules'
//! labels once everything is drawn.

use std::borrow::Cow;
use std::collections::HashMap;

use tessera_carto::draw::{Canvas, Shapes};
use tessera_carto::label::{self, Anchor, Candidate, Halo, Label};
use tessera_carto::maplibre::expr::{self, Context};
use tessera_carto::maplibre::{Kind, MapLibreStyle, StyleLayer};
use tessera_carto::style::{Attribute, Color, Marker, Rule, Shape};

use super::{DataLayer, Parts, Projector, VectorSource, attribute, line_length, split};
use crate::{SourceError, WindowRequest};

/// Pixels past the window features are read from (the widest line or
/// circle a style draws reaches about this far).
const REACH: f64 = 32.0;

/// One feature, projected to window pixels.
struct Feature {
    attributes: Vec<Attribute>,
    parts: Parts<(f32, f32)>,
    geometry: &'static str,
}

impl VectorSource {
    /// Draws `style` at `zoom` (the 256-pixel levels of style rules) into
    /// `canvas`; returns its symbols' label candidates.
    pub(super) fn draw_maplibre<'a>(
        &self,
        style: &'a MapLibreStyle,
        canvas: &mut Canvas,
        req: &WindowRequest<'_>,
        zoom: f64,
    ) -> Result<Vec<Candidate<'a>>, SourceError> {
        let zoom = zoom - 1.0;
        let mut read: HashMap<&str, (Vec<String>, Vec<Feature>)> = HashMap::new();
        let mut labels = Vec::new();
        let within = super::label_area(req);
        for (index, layer) in style
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.draws_at(zoom))
        {
            // A style of thousands of layers stops between layers once its
            // render is abandoned (and between features below).
            if super::cancelled(req.cancel) {
                return Err(SourceError::Cancelled);
            }
            let Some(source_layer) = layer.source_layer.as_deref() else {
                let nothing = |_: &str| None;
                let ctx = Context {
                    zoom,
                    get: &nothing,
                    geometry: "",
                };
                let c = layer.color("background-color", &ctx, [0.0, 0.0, 0.0, 1.0]);
                let opacity = layer.number("background-opacity", &ctx, 1.0) as f32;
                canvas.fill_all(color(c), opacity);
                continue;
            };
            let Some(dl) = self.layers.iter().find(|d| d.name == source_layer) else {
                continue;
            };
            if !read.contains_key(source_layer) {
                let fields: Vec<String> = style
                    .fields
                    .iter()
                    .find(|(n, _)| n == source_layer)
                    .map(|(_, f)| {
                        f.iter()
                            .filter(|f| dl.available.contains(f))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                let features = self.features_drawn(dl, req, &fields)?;
                read.insert(source_layer, (fields, features));
            }
            let (fields, features) = &read[source_layer];
            for (n, f) in features.iter().enumerate() {
                if n % 1024 == 1023 && super::cancelled(req.cancel) {
                    return Err(SourceError::Cancelled);
                }
                let get = |name: &str| {
                    fields
                        .iter()
                        .position(|n| n == name)
                        .map(|i| f.attributes[i].clone())
                };
                let ctx = Context {
                    zoom,
                    get: &get,
                    geometry: f.geometry,
                };
                if !layer.admits(&ctx) {
                    continue;
                }
                match layer.kind {
                    Kind::Symbol => labels.extend(symbol(layer, index, f, &ctx, within)),
                    kind => draw(canvas, layer, kind, f, &ctx),
                }
            }
        }
        Ok(labels)
    }

    /// The features of `dl` around the window, with `fields`, in window
    /// pixels.
    fn features_drawn(
        &self,
        dl: &DataLayer,
        req: &WindowRequest<'_>,
        fields: &[String],
    ) -> Result<Vec<Feature>, SourceError> {
        let res_x = req.bbox.width() / f64::from(req.width);
        let res_y = req.bbox.height() / f64::from(req.height);
        let grown = req.bbox.buffered(REACH * res_x, REACH * res_y);
        let Ok(window) = req.crs.transform_bbox(&grown, &dl.crs) else {
            return Ok(Vec::new());
        };
        let features = self
            .pool
            .with_handle(|ds| self.features(ds, dl, &window, fields, req.cancel))?;
        let projector = Projector {
            from: &dl.crs,
            req,
            res_x,
            res_y,
        };
        let mut out = Vec::with_capacity(features.len());
        for (values, geometry) in features {
            let mut parts = Parts::new();
            split(&geometry, &|g, ring| projector.ring(g, ring), &mut parts)?;
            let kind = if !parts.polygons.is_empty() {
                "Polygon"
            } else if !parts.lines.is_empty() {
                "LineString"
            } else {
                "Point"
            };
            out.push(Feature {
                attributes: values.into_iter().map(attribute).collect(),
                parts,
                geometry: kind,
            });
        }
        Ok(out)
    }
}

/// A colour in 0..1 as a rule's.
fn color(c: [f32; 4]) -> Color {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "clamped to a byte"
    )]
    Color {
        rgba: c.map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8),
    }
}

fn float(v: f64) -> f32 {
    v as f32
}

/// Draws one feature of a fill, line or circle layer.
fn draw(canvas: &mut Canvas, layer: &StyleLayer, kind: Kind, f: &Feature, ctx: &Context<'_>) {
    let base = Rule {
        name: None,
        filter: None,
        min_zoom: None,
        max_zoom: None,
        fill: None,
        fill_opacity: 1.0,
        stroke: None,
        stroke_width: 1.0,
        stroke_opacity: 1.0,
        dash: None,
        marker: None,
        label: None,
    };
    let black = [0.0, 0.0, 0.0, 1.0];
    match kind {
        Kind::Fill if !f.parts.polygons.is_empty() => {
            let outline = layer
                .paint("fill-outline-color", ctx)
                .and_then(|v| v.color());
            let rule = Rule {
                fill: Some(color(layer.color("fill-color", ctx, black))),
                fill_opacity: float(layer.number("fill-opacity", ctx, 1.0).clamp(0.0, 1.0)),
                stroke: outline.map(color),
                ..base
            };
            canvas.draw(&Shapes::Polygons(f.parts.polygons.clone()), &rule);
        }
        Kind::Line => {
            let width = float(layer.number("line-width", ctx, 1.0).clamp(0.0, 100.0));
            if width <= 0.0 {
                return;
            }
            let dash = layer.paint("line-dasharray", ctx).and_then(|v| match v {
                expr::Val::Array(items) => {
                    let d: Vec<f32> = items
                        .iter()
                        .filter_map(serde_json::Value::as_f64)
                        .map(|x| float(x) * width)
                        .collect();
                    (d.len() >= 2 && d.len().is_multiple_of(2) && d.iter().all(|x| *x > 0.0))
                        .then_some(d)
                }
                _ => None,
            });
            let rule = Rule {
                stroke: Some(color(layer.color("line-color", ctx, black))),
                stroke_width: width,
                stroke_opacity: float(layer.number("line-opacity", ctx, 1.0).clamp(0.0, 1.0)),
                dash,
                ..base
            };
            let mut lines = f.parts.lines.clone();
            // A line layer over polygons draws their outlines.
            lines.extend(f.parts.polygons.iter().flatten().map(|ring| {
                let mut closed = ring.clone();
                closed.extend(ring.first().copied());
                closed
            }));
            if !lines.is_empty() {
                canvas.draw(&Shapes::Lines(lines), &rule);
            }
        }
        Kind::Circle if !f.parts.points.is_empty() => {
            let radius = float(layer.number("circle-radius", ctx, 5.0).clamp(0.0, 128.0));
            let stroke_width = float(
                layer
                    .number("circle-stroke-width", ctx, 0.0)
                    .clamp(0.0, 100.0),
            );
            let rule = Rule {
                fill: Some(color(layer.color("circle-color", ctx, black))),
                fill_opacity: float(layer.number("circle-opacity", ctx, 1.0).clamp(0.0, 1.0)),
                stroke: (stroke_width > 0.0)
                    .then(|| color(layer.color("circle-stroke-color", ctx, black))),
                stroke_width: stroke_width.max(0.01),
                stroke_opacity: float(
                    layer
                        .number("circle-stroke-opacity", ctx, 1.0)
                        .clamp(0.0, 1.0),
                ),
                marker: Some(Marker {
                    shape: Shape::Circle,
                    size: 2.0 * radius,
                }),
                ..base
            };
            if radius > 0.0 {
                canvas.draw(&Shapes::Points(f.parts.points.clone()), &rule);
            }
        }
        _ => {}
    }
}

/// The label a symbol layer gives a feature: later layers first, as
/// MapLibre places them.
fn symbol<'a>(
    layer: &StyleLayer,
    index: usize,
    f: &Feature,
    ctx: &Context<'_>,
    within: [f32; 4],
) -> Option<Candidate<'a>> {
    let text = layer.text(ctx)?;
    let size = float(layer.number("text-size", ctx, 16.0).clamp(4.0, 128.0));
    let halo_width = float(layer.number("text-halo-width", ctx, 0.0).clamp(0.0, 16.0));
    let offset = match layer.layout("text-offset", ctx) {
        Some(expr::Val::Array(items)) if items.len() == 2 => {
            [0, 1].map(|i| items[i].as_f64().map_or(0.0, |v| float(v) * size))
        }
        _ => [0.0, 0.0],
    };
    let style = Label {
        text: String::new(),
        size,
        color: color(layer.color("text-color", ctx, [0.0, 0.0, 0.0, 1.0])),
        halo: (halo_width > 0.0).then(|| Halo {
            color: color(layer.color("text-halo-color", ctx, [0.0, 0.0, 0.0, 0.0])),
            width: halo_width,
        }),
        priority: None,
        min_zoom: None,
        padding: float(layer.number("text-padding", ctx, 2.0).clamp(0.0, 64.0)),
        offset,
        // MapLibre breaks point labels wider than 10 ems by default.
        max_width: Some(float(
            layer.number("text-max-width", ctx, 10.0).clamp(1.0, 1000.0),
        )),
    };
    let along = layer
        .layout("symbol-placement", ctx)
        .and_then(|v| v.text())
        .is_some_and(|p| p.starts_with("line"));
    let anchor = if along {
        let longest = f
            .parts
            .lines
            .iter()
            .max_by(|a, b| line_length(a).total_cmp(&line_length(b)))?;
        Anchor::Line(longest.clone())
    } else if let Some(&(x, y)) = f.parts.points.first() {
        Anchor::Point(x, y)
    } else if !f.parts.polygons.is_empty() {
        label::polygon_anchor(&f.parts.polygons, 0.0, within)?
    } else {
        return None;
    };
    let priority = index as f64;
    Some(Candidate {
        style: Cow::Owned(style),
        text,
        priority,
        anchor,
    })
}
