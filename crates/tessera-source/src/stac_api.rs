//! A STAC API's item search over HTTP (`POST {api}/search`, paged by its
//! `next` links, as the STAC API - Item Search specification says), for
//! the STAC source of a catalogue that is not in reach of SQL. Asked
//! through the upstream client: timeouts, retries, the circuit, the egress
//! checks and `http.max_body_bytes` on every page.

use std::sync::Arc;

use serde_json::{Value, json};
use tessera_grid::BBox;

use crate::SourceError;
use crate::upstream::client::{FetchError, UpstreamClient, redacted};
use crate::{HttpSettings, NetworkPolicy};

/// The next page of a search: a body to POST, or a URL to GET.
#[derive(Debug, Clone)]
pub enum NextPage {
    /// `POST` this body to the search endpoint.
    Post(reqwest::Url, Value),
    /// `GET` this URL.
    Get(reqwest::Url),
}

/// A STAC API.
#[derive(Debug)]
pub struct StacApi {
    root: reqwest::Url,
    search: reqwest::Url,
    client: Arc<UpstreamClient>,
    shown: String,
}

impl StacApi {
    /// The API at `root` (its landing page's URL), asked with `http`'s
    /// settings under `policy`.
    pub fn new(root: &str, http: &HttpSettings, policy: NetworkPolicy) -> Result<StacApi, String> {
        let mut root = reqwest::Url::parse(root).map_err(|e| format!("stac_api {root:?}: {e}"))?;
        if !root.path().ends_with('/') {
            let path = format!("{}/", root.path());
            root.set_path(&path);
        }
        let search = root.join("search").map_err(|e| format!("stac_api: {e}"))?;
        let client = UpstreamClient::shared(
            &root,
            http,
            policy,
            &std::collections::BTreeMap::new(),
            None,
        )?;
        let shown = format!("stac api {}", redacted(&root));
        Ok(StacApi {
            root,
            search,
            client,
            shown,
        })
    }

    /// The API named for messages (without credentials).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn failed(&self, message: impl Into<String>) -> SourceError {
        SourceError::Upstream {
            url: self.shown.clone(),
            message: message.into(),
        }
    }

    /// A JSON document from `ask`ed, or the API's refusal with its message.
    fn json(
        &self,
        fetched: Result<crate::upstream::client::Fetched, FetchError>,
    ) -> Result<Value, SourceError> {
        let fetched = fetched.map_err(|e| self.failed(e.to_string()))?;
        if fetched.status != 200 {
            // The API's own message: a filter it cannot read, a bad date.
            let text = String::from_utf8_lossy(&fetched.body);
            let said = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| {
                    v.get("description")
                        .or_else(|| v.get("detail"))
                        .map(|d| d.as_str().map_or_else(|| d.to_string(), String::from))
                })
                .unwrap_or_else(|| crate::excerpt(&fetched.body));
            return Err(self.failed(format!("answered {}: {said}", fetched.status)));
        }
        serde_json::from_slice(&fetched.body)
            .map_err(|e| self.failed(format!("the answer is not JSON: {e}")))
    }

    /// The first page of `body`'s search.
    pub fn first(&self, body: &Value) -> NextPage {
        NextPage::Post(self.search.clone(), body.clone())
    }

    /// One page: its items and the next page, if its `next` link names
    /// one (a `POST` link's `body`, merged into the page's own when it says
    /// `merge: true`; a `GET` link's `href`).
    pub fn page(
        &self,
        page: &NextPage,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<(Vec<Value>, Option<NextPage>), SourceError> {
        let (found, asked_body) = match page {
            NextPage::Post(url, body) => (
                self.json(self.client.post_json(url, body, cancel))?,
                Some(body),
            ),
            NextPage::Get(url) => (self.json(self.client.get(url, cancel))?, None),
        };
        let items = found
            .get("features")
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| self.failed("the answer is not an ItemCollection (no `features`)"))?;
        let next = found
            .get("links")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|l| l.get("rel").and_then(Value::as_str) == Some("next"));
        let Some(link) = next else {
            return Ok((items, None));
        };
        let href = link
            .get("href")
            .and_then(Value::as_str)
            .and_then(|h| self.search.join(h).ok())
            .ok_or_else(|| self.failed("a `next` link without a usable href"))?;
        let method = link.get("method").and_then(Value::as_str).unwrap_or("GET");
        let next = if method.eq_ignore_ascii_case("POST") {
            let mut body = link.get("body").cloned().unwrap_or_else(|| json!({}));
            if link.get("merge").and_then(Value::as_bool) == Some(true)
                && let (Some(Value::Object(asked)), Value::Object(given)) = (asked_body, &body)
            {
                let mut merged = asked.clone();
                merged.extend(given.clone());
                body = Value::Object(merged);
            }
            NextPage::Post(href, body)
        } else {
            NextPage::Get(href)
        };
        Ok((items, Some(next)))
    }

    /// The union of `collections`' spatial extents (`GET
    /// /collections/{id}`); `None` when none has one.
    pub fn extent(&self, collections: &[String]) -> Result<Option<BBox>, SourceError> {
        let mut out: Option<BBox> = None;
        for id in collections {
            let url = self
                .root
                .join(&format!("collections/{id}"))
                .map_err(|e| self.failed(e.to_string()))?;
            let doc = self.json(self.client.get(&url, None))?;
            let b: Vec<f64> = doc
                .pointer("/extent/spatial/bbox/0")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            if let [x0, y0, x1, y1] = b[..]
                && let Ok(b) = BBox::new(x0, y0, x1, y1)
            {
                out = Some(out.map_or(b, |o| o.union(&b)));
            }
        }
        Ok(out)
    }
}
