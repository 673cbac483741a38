//! pgSTAC's item hydration, done here rather than in the database: pgSTAC
//! keeps an item's content without what its collection's `base_item`
//! holds (dehydrated), and its `content_hydrate` merges them back in
//! layers of SQL functions that cost about 0.6 ms an item (parsed again on
//! every call). [`hydrate`] is the same merge (`merge_jsonb` of pgSTAC
//! 0.8-0.9) over the row's id, collection and content.

use serde_json::{Map, Value};

/// What pgSTAC writes for a field the base item has and the item has not:
/// dropped from the hydrated item.
const REMOVED: &str = "𒍟※";

/// The item of a pgSTAC row (`id`, `collection`, dehydrated `content`)
/// hydrated with its collection's `base_item` (`Value::Null` when the
/// collection has none), as `content_hydrate(item, collection, '{}')`
/// gives it without the geometry: `{id, geometry: null, collection,
/// type} || content` merged over the base item.
pub fn hydrate(id: &str, collection: &str, content: Value, base: &Value) -> Value {
    let mut item = Map::new();
    item.insert("id".into(), Value::String(id.into()));
    item.insert("geometry".into(), Value::Null);
    item.insert("collection".into(), Value::String(collection.into()));
    item.insert("type".into(), Value::String("Feature".into()));
    match content {
        Value::Object(fields) => item.extend(fields),
        other => return other,
    }
    merge(Value::Object(item), Some(base)).unwrap_or(Value::Null)
}

/// pgSTAC's `merge_jsonb(a, b)`: `a` over `b`; `None` is SQL's NULL (a
/// field `b` has and `a` has not, or the removal mark).
fn merge(a: Value, b: Option<&Value>) -> Option<Value> {
    match (a, b) {
        (Value::String(s), _) if s == REMOVED => None,
        (Value::Null, b) => b.cloned(),
        (Value::Object(a), Some(Value::Object(b))) => {
            let mut out: Map<String, Value> = b
                .iter()
                .filter(|(key, _)| !a.contains_key(*key))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            for (key, value) in a {
                if let Some(v) = merge(value, b.get(&key)) {
                    out.insert(key, v);
                }
            }
            Some(strip_nulls(Value::Object(out)))
        }
        (Value::Array(a), Some(Value::Array(b))) if a.len() == b.len() => Some(Value::Array(
            a.into_iter()
                .zip(b)
                .map(|(x, y)| merge(x, Some(y)).unwrap_or(Value::Null))
                .collect(),
        )),
        (a, _) => Some(a),
    }
}

/// `jsonb_strip_nulls`: fields whose value is null removed from every
/// object, however deep (nulls in arrays kept).
fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Each case's expected item is what pgSTAC 0.9's own
    /// `content_hydrate(jsonb_build_object('id', .., 'collection', ..,
    /// 'type', 'Feature') || content, base_item)` returned for it.
    #[test]
    fn hydrates_as_pgstac_does() {
        let base = json!({
            "type": "Feature", "stac_version": "1.0.0", "collection": "c",
            "assets": {
                "visual": {"type": "image/tiff", "roles": ["visual"], "title": "True colour"},
                "thumb": {"type": "image/png", "roles": ["thumbnail"]}
            },
            "properties": {"platform": "sentinel-2a", "gsd": 10}
        });
        let content = json!({
            "bbox": [1, 2, 3, 4],
            "assets": {
                "visual": {"href": "s3://b/v.tif", "title": null},
                "thumb": "𒍟※"
            },
            "properties": {"datetime": "2024-06-01T00:00:00Z", "gsd": 20, "note": null,
                           "nested": {"a": null, "b": [null, {"c": null}]}},
            "links": []
        });
        assert_eq!(
            hydrate("i1", "c", content, &base),
            json!({
                "id": "i1", "collection": "c", "type": "Feature", "stac_version": "1.0.0",
                "bbox": [1, 2, 3, 4], "links": [],
                "assets": {"visual": {"href": "s3://b/v.tif", "type": "image/tiff",
                                      "roles": ["visual"], "title": "True colour"}},
                "properties": {"datetime": "2024-06-01T00:00:00Z", "gsd": 20,
                               "platform": "sentinel-2a", "nested": {"b": [null, {}]}}
            })
        );
    }

    #[test]
    fn arrays_of_the_same_length_merge_item_by_item() {
        let base = json!({"a": [{"x": 1}, {"y": 2}], "b": [1, 2, 3]});
        let content = json!({"a": [{"z": 3}, null], "b": [9]});
        assert_eq!(
            hydrate("i", "c", content, &base),
            json!({"id": "i", "collection": "c", "type": "Feature",
                   "a": [{"x": 1, "z": 3}, {"y": 2}], "b": [9]})
        );
    }

    #[test]
    fn a_collection_without_a_base_item_leaves_the_item_as_it_is() {
        let content = json!({"assets": {"v": {"href": "/x.tif", "title": null}}});
        assert_eq!(
            hydrate("i", "c", content, &Value::Null),
            json!({"id": "i", "collection": "c", "type": "Feature", "geometry": null,
                   "assets": {"v": {"href": "/x.tif", "title": null}}})
        );
    }
}
