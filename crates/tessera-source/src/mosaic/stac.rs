//! STAC items as mosaic pieces: a local ItemCollection (`FeatureCollection`
//! of items), one item, or a static catalog whose `item` and `child` links
//! lead to items. Each item's chosen asset is a piece, its `bbox` the
//! piece's footprint, its properties what a dimension's `from_field` reads.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tessera_grid::BBox;

/// Distinct catalog files followed at most (a huge tree stops here with an
/// error; links to a file already followed are not followed again).
const MAX_FILES: usize = 10_000;

/// Bytes of one STAC file read at most.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// One item: its piece's path, footprint and properties.
pub(crate) struct Item {
    pub path: String,
    pub footprint: Option<BBox>,
    pub properties: serde_json::Map<String, Value>,
}

/// The items reachable from `root` (an ItemCollection, an item or a
/// catalog), each with the href of its asset `asset` (default: the first
/// asset whose media type is a TIFF, or whose href ends in `.tif`), taken
/// against the file it was written in when relative.
pub(crate) fn read_items(root: &str, asset: Option<&str>) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut queue = vec![PathBuf::from(root)];
    // Every file queued, by its canonical path: a link back to a file
    // already queued (a catalog linking to itself or its parent, `./a`
    // and `a`) is not followed again.
    let mut queued = std::collections::HashSet::from([canonical(Path::new(root))]);
    while let Some(file) = queue.pop() {
        let doc = read_json(&file)?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        match doc.get("type").and_then(Value::as_str) {
            Some("FeatureCollection") => {
                for feature in doc
                    .get("features")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    items.push(item(feature, &base, asset, &file)?);
                }
            }
            Some("Feature") => items.push(item(&doc, &base, asset, &file)?),
            Some("Catalog" | "Collection") => {
                for link in doc
                    .get("links")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let rel = link.get("rel").and_then(Value::as_str);
                    if let (Some("item" | "child"), Some(href)) =
                        (rel, link.get("href").and_then(Value::as_str))
                    {
                        let next = PathBuf::from(resolve(&base, href));
                        if queued.insert(canonical(&next)) {
                            if queued.len() > MAX_FILES {
                                return Err(format!("{root}: more than {MAX_FILES} catalog files"));
                            }
                            queue.push(next);
                        }
                    }
                }
            }
            other => {
                return Err(format!(
                    "{}: not a STAC ItemCollection, item or catalog (type {other:?})",
                    file.display()
                ));
            }
        }
    }
    if items.is_empty() {
        return Err(format!("{root} lists no STAC item"));
    }
    Ok(items)
}

fn read_json(file: &Path) -> Result<Value, String> {
    let text = crate::local_file::read_regular_file(file, MAX_FILE_BYTES)?;
    serde_json::from_slice(&text).map_err(|e| format!("{} is not JSON: {e}", file.display()))
}

fn item(feature: &Value, base: &Path, asset: Option<&str>, file: &Path) -> Result<Item, String> {
    let id = feature.get("id").and_then(Value::as_str).unwrap_or("?");
    let assets = feature
        .get("assets")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{}: item {id:?} has no assets", file.display()))?;
    let chosen = match asset {
        Some(key) => assets.get(key),
        None => assets.values().find(|a| {
            let media = a.get("type").and_then(Value::as_str).unwrap_or("");
            let href = a.get("href").and_then(Value::as_str).unwrap_or("");
            let extension = Path::new(href).extension().and_then(|e| e.to_str());
            media.starts_with("image/tiff")
                || extension.is_some_and(|e| {
                    e.eq_ignore_ascii_case("tif") || e.eq_ignore_ascii_case("tiff")
                })
        }),
    };
    let href = chosen
        .and_then(|a| a.get("href"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            format!(
                "{}: item {id:?} has no asset {}",
                file.display(),
                asset.map_or_else(|| "that is a GeoTIFF".to_string(), |k| format!("{k:?}"))
            )
        })?;
    let footprint = feature.get("bbox").and_then(Value::as_array).and_then(|b| {
        let n: Vec<f64> = b.iter().filter_map(Value::as_f64).collect();
        match n[..] {
            [a, b, c, d] | [a, b, _, c, d, _] => BBox::new(a, b, c, d).ok(),
            _ => None,
        }
    });
    Ok(Item {
        path: resolve(base, href),
        footprint,
        properties: feature
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    })
}

/// `path` with its links and `.`/`..` resolved, to tell two names of one
/// file apart; as given when it cannot be (it does not exist: reading it
/// says so).
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `href` taken against `base` when it is a relative local path
/// (`file://` stripped); URLs and `/vsi` paths as they are.
fn resolve(base: &Path, href: &str) -> String {
    let href = href.strip_prefix("file://").unwrap_or(href);
    if href.contains("://") || href.starts_with("/vsi") || Path::new(href).is_absolute() {
        href.to_string()
    } else {
        base.join(href).display().to_string()
    }
}

/// A property as text: strings as they are, numbers and booleans written
/// out; `None` for a missing or null property, arrays and objects.
pub(crate) fn property_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_of_a_catalog_and_a_collection_with_relative_hrefs() {
        let dir = tempfile::tempdir().unwrap();
        let item = |id: &str, when: &str| {
            serde_json::json!({
                "type": "Feature", "stac_version": "1.0.0", "id": id,
                "bbox": [0, 0, 1, 1],
                "properties": { "datetime": when, "cloud": 3 },
                "assets": { "thumb": { "href": "t.png", "type": "image/png" },
                            "data": { "href": format!("{id}.tif"), "type": "image/tiff; application=geotiff" } }
            })
        };
        std::fs::write(
            dir.path().join("items.json"),
            serde_json::json!({ "type": "FeatureCollection", "features": [item("a", "2024-01-01T00:00:00Z")] }).to_string(),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("sub/b.json"),
            item("b", "2024-02-01T00:00:00Z").to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("catalog.json"),
            serde_json::json!({ "type": "Catalog", "id": "c", "links": [
                { "rel": "self", "href": "catalog.json" },
                { "rel": "child", "href": "./items.json" },
                { "rel": "item", "href": "sub/b.json" } ] })
            .to_string(),
        )
        .unwrap();
        let root = dir.path().join("catalog.json");
        let mut items = read_items(root.to_str().unwrap(), None).unwrap();
        items.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[0].path,
            dir.path().join("a.tif").display().to_string()
        );
        assert_eq!(
            items[1].path,
            dir.path().join("sub/b.tif").display().to_string()
        );
        assert_eq!(
            property_text(items[1].properties.get("datetime")).as_deref(),
            Some("2024-02-01T00:00:00Z")
        );
        assert_eq!(
            property_text(items[0].properties.get("cloud")).as_deref(),
            Some("3")
        );
        assert!(items[0].footprint.is_some());
        let e = read_items(root.to_str().unwrap(), Some("missing"))
            .err()
            .unwrap();
        assert!(e.contains("has no asset \"missing\""), "{e}");
    }

    #[test]
    fn a_file_that_is_not_stac_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.json");
        std::fs::write(&f, "{\"type\": \"Polygon\"}").unwrap();
        let e = read_items(f.to_str().unwrap(), None).err().unwrap();
        assert!(e.contains("not a STAC"), "{e}");
    }

    #[test]
    fn a_catalog_linking_to_itself_a_thousand_times_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let item = serde_json::json!({
            "type": "Feature", "id": "a", "bbox": [0, 0, 1, 1], "properties": {},
            "assets": { "data": { "href": "a.tif" } } });
        std::fs::write(dir.path().join("a.json"), item.to_string()).unwrap();
        let mut links = vec![serde_json::json!({ "rel": "item", "href": "a.json" })];
        for i in 0..1000 {
            let href = if i % 2 == 0 {
                "catalog.json"
            } else {
                "./sub/../catalog.json"
            };
            links.push(serde_json::json!({ "rel": "child", "href": href }));
        }
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let catalog = serde_json::json!({ "type": "Catalog", "id": "c", "links": links });
        let root = dir.path().join("catalog.json");
        std::fs::write(&root, catalog.to_string()).unwrap();
        let items = read_items(root.to_str().unwrap(), None).unwrap();
        assert_eq!(items.len(), 1);
    }

    #[test]
    fn links_to_devices_are_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = serde_json::json!({ "type": "Catalog", "id": "c", "links": [
            { "rel": "child", "href": "/dev/zero" } ] });
        let root = dir.path().join("catalog.json");
        std::fs::write(&root, catalog.to_string()).unwrap();
        let e = read_items(root.to_str().unwrap(), None).err().unwrap();
        assert!(e.contains("/dev/zero is not a regular file"), "{e}");
        let e = read_items("/dev/urandom", None).err().unwrap();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
