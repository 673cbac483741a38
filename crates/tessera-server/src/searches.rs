//! STAC searches registered at run time (`POST /searches`, as
//! titiler-pgstac registers them): each is kept in pgSTAC's own `searches`
//! table (its id is pgSTAC's hash of the search, so a server restarted, or
//! titiler-pgstac on the same database, knows it by the same id) and served
//! as layer `search:{id}`, the configured `type: stac` layer
//! `searches.layer` with the registered search in place of its own. At
//! most `max_searches` at a time; one unused for `expire_after_secs` is
//! forgotten.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tessera_source::SourceSpec;
use tessera_source::pgstac::{SearchTable, SearchTableError, StacSpec};

use crate::assemble::{self, WrapSource};
use crate::config::{Config, ConfigError, LayerConfig, SearchesConfig};
use crate::registry::Registry;

/// The keys of a STAC API search body a registered search may have
/// (`limit`, `token` and `fields` are each window's own).
const SEARCH_KEYS: [&str; 9] = [
    "collections",
    "ids",
    "datetime",
    "bbox",
    "intersects",
    "filter",
    "filter-lang",
    "sortby",
    "query",
];

/// The prefix of a registered search's layer name.
pub const LAYER_PREFIX: &str = "search:";

/// Seconds since the epoch, now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why a search was not registered.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The body is not a search tessera takes (the message says why).
    #[error("{0}")]
    Invalid(String),
    /// pgSTAC refused the search (a CQL2 filter it cannot read), with its
    /// message.
    #[error("pgSTAC refused the search: {0}")]
    Refused(String),
    /// `max_searches` are registered and none has expired.
    #[error(
        "{0} searches are registered (searches.max_searches); one is forgotten {1} s after its last use"
    )]
    Full(usize, u64),
    /// The catalogue did not answer.
    #[error("the catalogue did not answer: {0}")]
    Unavailable(String),
}

impl From<SearchTableError> for SearchError {
    fn from(e: SearchTableError) -> SearchError {
        match e {
            SearchTableError::Refused(m) => SearchError::Refused(m),
            e @ SearchTableError::Unavailable(..) => SearchError::Unavailable(e.to_string()),
        }
    }
}

/// A registered search.
#[derive(Debug, Clone)]
struct Registered {
    search: Value,
    metadata: Value,
    since: u64,
    used: Arc<AtomicU64>,
}

/// The registered searches of one service.
#[derive(Debug)]
pub struct Searches {
    /// The `searches:` section.
    pub config: SearchesConfig,
    template: LayerConfig,
    spec: StacSpec,
    table: SearchTable,
    registered: Mutex<HashMap<String, Registered>>,
}

impl Searches {
    /// The registered searches of `config` (none registered yet); `None`
    /// without a `searches:` section. Fails when `searches.layer` is not a
    /// configured `type: stac` layer.
    pub fn open(config: &Config) -> Result<Option<Searches>, ConfigError> {
        let Some(sc) = &config.searches else {
            return Ok(None);
        };
        let invalid = |m: String| ConfigError::Invalid(format!("searches: {m}"));
        let template = config
            .layers
            .iter()
            .find(|l| l.name == sc.layer)
            .ok_or_else(|| invalid(format!("layer {:?} is not configured", sc.layer)))?;
        let SourceSpec::Stac(spec) = &template.source else {
            return Err(invalid(format!(
                "layer {:?} is not a `type: stac` layer: a registered search is served like one",
                sc.layer
            )));
        };
        if sc.max_searches == 0 || sc.expire_after_secs == 0 {
            return Err(invalid(
                "max_searches and expire_after_secs must be at least 1".into(),
            ));
        }
        let table = SearchTable::new(spec).map_err(|e| invalid(e.to_string()))?;
        Ok(Some(Searches {
            config: sc.clone(),
            template: template.clone(),
            spec: (**spec).clone(),
            table,
            registered: Mutex::new(HashMap::new()),
        }))
    }

    /// The marker kept in a search's pgSTAC metadata: the template layer.
    fn marker(&self) -> Value {
        json!(format!("tessera:{}", self.template.name))
    }

    /// Registers `body` (a STAC search, with an optional `metadata`
    /// mapping) in pgSTAC and serves it as a layer of `registry`;
    /// blocking. Returns its id and whether it was new here.
    pub fn register(
        &self,
        body: &Value,
        registry: &Registry,
        config: &Config,
        wrap_source: &Arc<WrapSource>,
    ) -> Result<(String, bool), SearchError> {
        let Value::Object(map) = body else {
            return Err(SearchError::Invalid(
                "a search is a JSON object (collections, datetime, bbox, filter, sortby, ...)"
                    .into(),
            ));
        };
        let mut search = serde_json::Map::new();
        let mut metadata = serde_json::Map::new();
        for (key, value) in map {
            match key.as_str() {
                "metadata" => match value {
                    Value::Object(m) => metadata.extend(m.clone()),
                    _ => return Err(SearchError::Invalid("`metadata` is an object".into())),
                },
                k if SEARCH_KEYS.contains(&k) => {
                    search.insert(key.clone(), value.clone());
                }
                other => {
                    return Err(SearchError::Invalid(format!(
                        "unknown key {other:?}: a search has {}, and `metadata`",
                        SEARCH_KEYS.join(", ")
                    )));
                }
            }
        }
        metadata.insert("tessera".into(), self.marker());
        let (search, metadata) = (Value::Object(search), Value::Object(metadata));
        self.sweep(registry);
        let id = self.table.register(&search, &metadata)?;
        if let Some(known) = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            known.used.store(now_secs(), Ordering::Relaxed);
            return Ok((id, false));
        }
        if self.len() >= self.config.max_searches {
            return Err(SearchError::Full(
                self.config.max_searches,
                self.config.expire_after_secs,
            ));
        }
        self.serve(&id, &search, &metadata, registry, config, wrap_source)
            .map_err(|e| {
                SearchError::Invalid(format!(
                    "the search cannot be served: {}",
                    tessera_source::error_chain(&e)
                ))
            })?;
        Ok((id, true))
    }

    /// Serves the search `id` as layer `search:{id}`.
    fn serve(
        &self,
        id: &str,
        search: &Value,
        metadata: &Value,
        registry: &Registry,
        config: &Config,
        wrap_source: &Arc<WrapSource>,
    ) -> Result<(), ConfigError> {
        let mut lc = self.template.clone();
        lc.name = format!("{LAYER_PREFIX}{id}");
        lc.title = Some(
            metadata
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| format!("STAC search {id}"), String::from),
        );
        let base = self
            .template
            .cache
            .key
            .clone()
            .unwrap_or_else(|| self.template.name.clone());
        lc.cache.key = Some(format!("{base}~search={id}"));
        lc.dimensions.clear();
        lc.source = SourceSpec::Stac(Box::new(StacSpec {
            search: search.clone(),
            ..self.spec.clone()
        }));
        let used = Arc::new(AtomicU64::new(now_secs()));
        let mut layer = assemble::layer(registry, &lc, config, wrap_source)?;
        Arc::make_mut(&mut layer).last_used = Some(used.clone());
        registry.add_layer(layer);
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id.to_string(),
                Registered {
                    search: search.clone(),
                    metadata: metadata.clone(),
                    since: now_secs(),
                    used,
                },
            );
        Ok(())
    }

    /// Serves again the searches of this template pgSTAC holds that were
    /// used within `expire_after_secs` (most recent first, at most
    /// `max_searches`): a restarted or reloaded server keeps them. A
    /// search that cannot be served is logged and left out.
    pub fn restore(&self, registry: &Registry, config: &Config, wrap_source: &Arc<WrapSource>) {
        let within = Duration::from_secs(self.config.expire_after_secs);
        let kept =
            match self
                .table
                .recent("tessera", &self.marker(), within, self.config.max_searches)
            {
                Ok(kept) => kept,
                Err(e) => {
                    tracing::error!(error = %e, "registered searches cannot be read back");
                    return;
                }
            };
        for (id, search, metadata) in kept {
            if let Err(e) = self.serve(&id, &search, &metadata, registry, config, wrap_source) {
                tracing::error!(search = %id, error = &e as &dyn std::error::Error, "a registered search cannot be served");
            }
        }
    }

    /// Forgets the searches unused for `expire_after_secs` (their layers
    /// leave `registry`), and tells pgSTAC when the others were last used
    /// (its `lastused`, read by [`Searches::restore`]).
    pub fn sweep(&self, registry: &Registry) {
        let now = now_secs();
        let expired: Vec<String> = {
            let mut registered = self
                .registered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let expired: Vec<String> = registered
                .iter()
                .filter(|(_, r)| {
                    now.saturating_sub(r.used.load(Ordering::Relaxed))
                        >= self.config.expire_after_secs
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in &expired {
                registered.remove(id);
            }
            expired
        };
        for id in expired {
            registry.remove_layer(&format!("{LAYER_PREFIX}{id}"));
            tracing::info!(search = %id, "a registered search expired unused");
        }
    }

    /// Records in pgSTAC (`lastused`) the searches used since `since`
    /// (seconds since the epoch); blocking. Failures are logged.
    pub fn record_use(&self, since: u64) {
        let used: Vec<String> = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, r)| r.used.load(Ordering::Relaxed) >= since)
            .map(|(id, _)| id.clone())
            .collect();
        if used.is_empty() {
            return;
        }
        if let Err(e) = self.table.touch(&used) {
            tracing::warn!(error = %e, "the use of registered searches cannot be recorded");
        }
    }

    /// How many searches are registered.
    pub fn len(&self) -> usize {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no search is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The registered ids, sorted.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    /// What is known of search `id`: the search, its metadata, when it was
    /// registered here and last used, and when it expires; `None` when it
    /// is not registered.
    pub fn describe(&self, id: &str) -> Option<Value> {
        let registered = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let r = registered.get(id)?;
        let used = r.used.load(Ordering::Relaxed);
        let time = |secs: u64| {
            chrono::DateTime::from_timestamp(i64::try_from(secs).unwrap_or(i64::MAX), 0)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        };
        Some(json!({
            "id": id,
            "search": r.search,
            "metadata": r.metadata,
            "layer": format!("{LAYER_PREFIX}{id}"),
            "served_like": self.template.name,
            "registered": time(r.since),
            "last_used": time(used),
            "expires": time(used.saturating_add(self.config.expire_after_secs)),
        }))
    }

    /// Starts a thread that sweeps the searches (and records their use
    /// in pgSTAC) every minute, or sooner for short expiries, until either
    /// `searches` or `registry` is dropped.
    pub fn keep_swept(searches: &Arc<Searches>, registry: &Arc<Registry>) {
        let every = Duration::from_secs((searches.config.expire_after_secs / 4).clamp(1, 60));
        let (searches, registry): (Weak<Searches>, Weak<Registry>) =
            (Arc::downgrade(searches), Arc::downgrade(registry));
        let spawned = std::thread::Builder::new()
            .name("searches-sweep".into())
            .spawn(move || {
                let mut since = now_secs();
                loop {
                    std::thread::sleep(every);
                    let (Some(s), Some(r)) = (searches.upgrade(), registry.upgrade()) else {
                        return;
                    };
                    s.sweep(&r);
                    let now = now_secs();
                    s.record_use(since);
                    since = now;
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "the sweep of registered searches cannot start");
        }
    }
}

/// Whether `id` is a pgSTAC search hash (32 lowercase hex digits).
pub fn is_search_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_pgstac_hashes() {
        assert!(is_search_id("0123456789abcdef0123456789abcdef"));
        assert!(!is_search_id("0123456789ABCDEF0123456789abcdef"));
        assert!(!is_search_id("../etc"));
    }
}
