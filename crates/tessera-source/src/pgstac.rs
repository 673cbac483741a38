//! A STAC search in a pgSTAC database or a STAC API as a source (`type:
//! stac`): for each window, the items the search finds there (in pgSTAC,
//! the query its `search` function runs, as pgSTAC's own functions write
//! it; from an API, its `POST /search`) are read through GDAL, each its
//! asset's window, and combined pixel by pixel by the chosen method, in the
//! search's order; `first` stops as soon as the window is full. At most
//! `max_items` items and `max_seconds` per window: past either, the window
//! is what was read (logged), never a hang.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tessera_grid::BBox;
use tessera_image::{BandData, Raster};

mod hydrate;

use crate::stac_api::{NextPage, StacApi};
use crate::{
    Crs, GdalSettings, GdalSource, GdalSourceSpec, HttpSettings, NetworkPolicy, Resampling,
};
use crate::{Source, SourceError, SourceInfo, WindowRequest};

/// How the items' pixels are combined.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The first item (in the search's order) with data at the pixel.
    #[default]
    First,
    /// The highest value of each band among the items with data.
    Highest,
    /// The lowest value of each band among the items with data.
    Lowest,
    /// The mean of each band over the items with data.
    Mean,
    /// The median of each band over the items with data.
    Median,
    /// The newest item (by `datetime`) with data at the pixel.
    Latest,
}

/// `source: { type: stac, pgstac: postgres://... | stac_api: https://...,
/// search: {...}, ... }`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StacSpec {
    /// A `postgres://` URL of a database with pgSTAC installed (`pypgstac
    /// migrate`); credentials through `${ENV}`. Or `stac_api`.
    #[serde(default)]
    pub pgstac: Option<String>,
    /// The landing page of a STAC API with item search (`POST {url}/search`,
    /// paged by its `next` links); instead of `pgstac`.
    #[serde(default)]
    pub stac_api: Option<String>,
    /// How the STAC API is asked (timeouts, retries, `max_body_bytes` of
    /// a page).
    #[serde(default)]
    pub http: HttpSettings,
    /// The STAC API search body (`collections`, `ids`, `datetime`, `bbox`,
    /// `intersects`, `filter` (CQL2-JSON), `sortby`): each window adds its
    /// own bounding box and `limit`.
    #[serde(default)]
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub search: Value,
    /// The asset read from each item, all its bands (`visual`).
    #[serde(default)]
    pub asset: Option<String>,
    /// Single-band assets read from each item, one per band, in order
    /// (`[B04, B03, B02]`); instead of `asset`.
    #[serde(default)]
    pub assets: Vec<String>,
    /// How items are combined (default `first`).
    #[serde(default)]
    pub method: Method,
    /// Resampling of each item's window (default bilinear).
    #[serde(default)]
    pub resampling: Resampling,
    /// Most items read for one window (default 50).
    #[serde(default = "default_max_items")]
    pub max_items: usize,
    /// Items asked of the catalogue at a time by `first` and `latest`,
    /// which stop once the window is full (default 8; the other methods
    /// ask for every item at once).
    #[serde(default = "default_page")]
    pub page: usize,
    /// Longest time reading one window's items, in seconds (default 10):
    /// past it the window is what was read.
    #[serde(default = "default_max_seconds")]
    pub max_seconds: f64,
    /// The database's `statement_timeout` and connection timeout, in
    /// milliseconds (default 10,000).
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
    /// How long, in seconds, the catalogue's state over a tile (the ids and
    /// versions of its items, which cached tiles are keyed by) is trusted
    /// before it is asked again (default 0: asked on every tile request,
    /// one indexed query in pgSTAC, one search of a STAC API).
    #[serde(default)]
    pub freshness: f64,
}

impl StacSpec {
    /// The catalogue named for messages, without credentials.
    pub fn shown(&self) -> String {
        match (&self.pgstac, &self.stac_api) {
            (Some(url), _) => shown_url(url),
            (None, Some(url)) => reqwest::Url::parse(url).map_or_else(
                |_| "stac api (a URL that does not parse)".into(),
                |u| format!("stac api {}", crate::upstream::client::redacted(&u)),
            ),
            (None, None) => "stac (no catalogue)".into(),
        }
    }
}

fn default_max_items() -> usize {
    50
}

fn default_page() -> usize {
    8
}

fn default_max_seconds() -> f64 {
    10.0
}

fn default_statement_timeout_ms() -> u64 {
    10_000
}

/// Items' datasets kept open, by asset href.
const OPENED_KEPT: usize = 256;

/// States kept for `freshness`, by window.
const STATES_KEPT: usize = 4096;

/// Where the items are found.
enum Catalogue {
    /// pgSTAC, through its SQL functions (a pool shared by the sources on
    /// one database).
    Pg(Arc<Pg>),
    /// A STAC API, over HTTP.
    Api(StacApi),
}

/// A pgSTAC database: pooled connections.
struct Pg {
    config: postgres::Config,
    idle: Mutex<Vec<Conn>>,
    shown: String,
    /// Collections' `base_item`s, as read when (a collection updated
    /// with new `item_assets` has a new one): items are hydrated with them
    /// here ([`hydrate::hydrate`]).
    base_items: Mutex<HashMap<String, (Instant, Arc<Value>)>>,
    /// pgSTAC's version, as it answered when the pool was opened.
    version: String,
}

/// How long a collection's `base_item` is used before it is read again.
const BASE_ITEM_KEPT: Duration = Duration::from_mins(1);

/// Idle connections a pool keeps; one given back past this is closed.
const IDLE_KEPT: usize = 32;

/// Statements kept prepared on one connection (each search's state and
/// page queries: the sources on one database share its connections); past
/// this they are all forgotten.
const PREPARED_KEPT: usize = 256;

/// A pooled connection and the statements prepared on it: a query asked
/// again (every tile's state and page, the window as parameters) is one
/// round trip, parsed and planned by the server once.
struct Conn {
    client: postgres::Client,
    prepared: HashMap<String, postgres::Statement>,
}

impl Conn {
    /// `sql` prepared on this connection, prepared now if it is not yet.
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let statement = self.client.prepare(sql)?;
        if self.prepared.len() >= PREPARED_KEPT {
            self.prepared.clear();
        }
        self.prepared.insert(sql.to_string(), statement.clone());
        Ok(statement)
    }
}

/// A search as pgSTAC writes it in SQL (`stac_search_to_where`,
/// `sort_sqlorderby`), without a window.
#[derive(Debug, Clone, Default)]
struct SearchSql {
    where_sql: String,
    order_sql: String,
}

/// Where the next page of a window's items starts.
enum Cursor {
    /// The offset of the next page's first item, in pgSTAC.
    Offset(usize),
    /// A STAC API's next page.
    Api(NextPage),
}

/// The source of a STAC search in pgSTAC or a STAC API.
pub struct StacSource {
    spec: StacSpec,
    shown: String,
    /// Shared by the source at each period of a time dimension.
    catalogue: Arc<Catalogue>,
    /// The search as SQL, in pgSTAC.
    sql: SearchSql,
    gdal: GdalSettings,
    opened: Arc<Mutex<lru::LruCache<String, Arc<GdalSource>>>>,
    info: SourceInfo,
    report: Vec<String>,
    /// States asked within `freshness`, by window.
    states: Mutex<lru::LruCache<String, (Instant, String)>>,
}

impl std::fmt::Debug for StacSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StacSource")
            .field("catalogue", &self.shown)
            .field("method", &self.spec.method)
            .finish_non_exhaustive()
    }
}

/// The database named without its credentials, for messages.
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!(
            "pgstac {}:{}{}",
            u.host_str().unwrap_or("?"),
            u.port().unwrap_or(5432),
            u.path()
        ),
        Err(_) => "pgstac (a URL that does not parse)".into(),
    }
}

/// How pgSTAC at `url` is connected to: `spec`'s statement and connection
/// timeouts, pgSTAC's schema first on the search path, its notices quiet.
fn db_config(url: &str, spec: &StacSpec) -> Result<postgres::Config, String> {
    let mut config: postgres::Config = url
        .parse()
        .map_err(|e: postgres::Error| format!("pgstac URL: {e}"))?;
    config.connect_timeout(Duration::from_millis(spec.statement_timeout_ms.max(1000)));
    config.options(&format!(
        "-c statement_timeout={} -c search_path=pgstac,public -c client_min_messages=warning",
        spec.statement_timeout_ms
    ));
    config.application_name("tessera");
    Ok(config)
}

/// The pgSTAC databases open in the process, by URL and statement
/// timeout: every source on one database (each registered search is one)
/// shares its pool, its prepared statements and its base items, so that a
/// thousand searches do not hold a thousand pools of connections.
static SHARED: LazyLock<Mutex<HashMap<String, Weak<Pg>>>> = LazyLock::new(Mutex::default);

impl Pg {
    /// The pool of pgSTAC at `url`, shared with the other sources on it
    /// (connected and checked once: pgSTAC is installed), and pgSTAC's
    /// version.
    fn open(url: &str, spec: &StacSpec) -> Result<(Arc<Pg>, String), String> {
        let key = format!("{url}\n{}", spec.statement_timeout_ms);
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pg) = shared.get(&key).and_then(Weak::upgrade) {
            let version = pg.version.clone();
            return Ok((pg, version));
        }
        let mut pg = Pg {
            config: db_config(url, spec)?,
            idle: Mutex::new(Vec::new()),
            shown: shown_url(url),
            base_items: Mutex::default(),
            version: String::new(),
        };
        pg.version = pg
            .query_one("SELECT pgstac.get_version()", &[])
            .map_err(|e| format!("is pgSTAC installed (pypgstac migrate)? {e}"))?;
        let pg = Arc::new(pg);
        shared.retain(|_, p| p.strong_count() > 0);
        shared.insert(key, Arc::downgrade(&pg));
        let version = pg.version.clone();
        Ok((pg, version))
    }

    /// `search` (a window-less search body) as pgSTAC writes it in SQL.
    fn search_sql(&self, search: &Value) -> Result<SearchSql, String> {
        let where_sql = self
            .query_one(
                "SELECT pgstac.stac_search_to_where($1::text::jsonb)",
                &[&search.to_string()],
            )
            .map_err(|e| format!("the search: {e}"))?;
        let order_sql = self
            .query_one(
                "SELECT pgstac.sort_sqlorderby($1::text::jsonb)",
                &[&search.to_string()],
            )
            .map_err(|e| e.to_string())?;
        Ok(SearchSql {
            where_sql,
            order_sql,
        })
    }

    /// The starts of the `period`s (newest first, at most `most`) in which
    /// items `sql` finds have their `datetime`, as RFC 3339 UTC.
    fn periods(
        &self,
        sql: &SearchSql,
        period: Period,
        most: usize,
    ) -> Result<Vec<String>, SourceError> {
        let most = i64::try_from(most).unwrap_or(i64::MAX);
        let query = format!(
            "SELECT coalesce(jsonb_agg(v ORDER BY v DESC), '[]')::text FROM ( \
               SELECT DISTINCT to_char(date_trunc('{}', datetime AT TIME ZONE 'UTC'), \
                 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS v \
               FROM pgstac.items WHERE ({}) ORDER BY v DESC LIMIT $1) listed",
            period.sql(),
            sql.where_sql
        );
        let listed: String = self.query_one(&query, &[&most])?;
        serde_json::from_str(&listed).map_err(|e| SourceError::Read {
            path: self.shown.clone(),
            source: e.to_string().into(),
        })
    }

    /// Runs `sql` returning one value on a pooled connection.
    fn query_one<T: for<'a> postgres::types::FromSql<'a>>(
        &self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<T, SourceError> {
        let mut conn = self.client()?;
        let row = conn
            .statement(sql)
            .and_then(|statement| conn.client.query_one(&statement, params))
            .map_err(|e| self.upstream(&e))?;
        let value = row.try_get(0).map_err(|e| self.upstream(&e))?;
        self.give_back(conn);
        Ok(value)
    }

    /// The database's error, with its own message (a CQL2 filter pgSTAC
    /// refuses, a statement timeout, a lost connection).
    fn upstream(&self, e: &postgres::Error) -> SourceError {
        let message = e
            .as_db_error()
            .map_or_else(|| e.to_string(), |d| d.message().to_string());
        SourceError::Upstream {
            url: self.shown.clone(),
            message,
        }
    }

    /// One page of the search `sql` over `area` (lon/lat; none: anywhere):
    /// at most `limit` items from the `offset`th, in the search's order,
    /// whole, and whether more follow. The query is the one pgSTAC's
    /// `search` runs, without its counting and paging machinery (6 ms a
    /// page there), and without `content_hydrate` (0.6 ms an item): the
    /// rows come as pgSTAC keeps them and are hydrated here with their
    /// collection's base item, as `content_hydrate` would.
    fn page(
        &self,
        sql: &SearchSql,
        area: Option<&BBox>,
        limit: usize,
        offset: usize,
    ) -> Result<(Vec<Value>, bool), SourceError> {
        // The window is a parameter, so that every tile's page is the
        // same prepared statement.
        let window = if area.is_some() {
            " AND st_intersects(geometry, st_makeenvelope($3, $4, $5, $6, 4326))"
        } else {
            ""
        };
        let query = format!(
            "SELECT i.id, i.collection, i.content::text FROM pgstac.items i \
             WHERE ({}){window} ORDER BY {} LIMIT $1 OFFSET $2",
            sql.where_sql, sql.order_sql
        );
        let asked = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let from = i64::try_from(offset).unwrap_or(i64::MAX);
        let mut conn = self.client()?;
        let rows = conn
            .statement(&query)
            .and_then(|statement| match area {
                Some(b) => conn.client.query(
                    &statement,
                    &[&asked, &from, &b.min_x, &b.min_y, &b.max_x, &b.max_y],
                ),
                None => conn.client.query(&statement, &[&asked, &from]),
            })
            .map_err(|e| self.upstream(&e))?;
        let more = rows.len() > limit;
        let mut items = Vec::with_capacity(rows.len().min(limit));
        for row in rows.iter().take(limit) {
            let read = || -> Result<(String, Option<String>, String), postgres::Error> {
                Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
            };
            let (id, collection, content) = read().map_err(|e| self.upstream(&e))?;
            let content: Value = serde_json::from_str(&content).map_err(|e| SourceError::Read {
                path: self.shown.clone(),
                source: e.to_string().into(),
            })?;
            let collection = collection.unwrap_or_default();
            let base = self.base_item(&mut conn, &collection)?;
            items.push(hydrate::hydrate(&id, &collection, content, &base));
        }
        self.give_back(conn);
        Ok((items, more))
    }

    /// The `base_item` of `collection` (`Value::Null` when it has none or
    /// is gone), read on `conn` when it was not read in the last
    /// [`BASE_ITEM_KEPT`].
    fn base_item(&self, conn: &mut Conn, collection: &str) -> Result<Arc<Value>, SourceError> {
        if let Some((read, base)) = self
            .base_items
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(collection)
            && read.elapsed() < BASE_ITEM_KEPT
        {
            return Ok(base.clone());
        }
        let rows = conn
            .statement("SELECT base_item::text FROM pgstac.collections WHERE id = $1")
            .and_then(|statement| conn.client.query(&statement, &[&collection]))
            .map_err(|e| self.upstream(&e))?;
        let base = match rows.first().map(|r| r.try_get::<_, Option<String>>(0)) {
            Some(Ok(Some(text))) => serde_json::from_str(&text).map_err(|e| SourceError::Read {
                path: self.shown.clone(),
                source: e.to_string().into(),
            })?,
            Some(Err(e)) => return Err(self.upstream(&e)),
            _ => Value::Null,
        };
        let base = Arc::new(base);
        self.base_items
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(collection.to_string(), (Instant::now(), base.clone()));
        Ok(base)
    }

    /// An idle pooled connection, or a new one.
    fn client(&self) -> Result<Conn, SourceError> {
        match self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            Some(c) => Ok(c),
            None => self
                .config
                .connect(postgres::NoTls)
                .map(|client| Conn {
                    client,
                    prepared: HashMap::new(),
                })
                .map_err(|e| self.upstream(&e)),
        }
    }

    /// Returns `conn` to the pool.
    fn give_back(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_KEPT {
            idle.push(conn);
        }
    }

    /// The ids and row versions (`xmin`: a new one for every insert or
    /// update) of the first `limit` items in the search's order over
    /// `area`, as a set.
    fn state(&self, sql: &SearchSql, area: &BBox, limit: usize) -> Result<String, SourceError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT coalesce(string_agg(id || '@' || v, ',' ORDER BY id), '') FROM ( \
               SELECT id, xmin::text AS v FROM pgstac.items WHERE ({}) \
               AND st_intersects(geometry, st_makeenvelope($1, $2, $3, $4, 4326)) \
               ORDER BY {} LIMIT $5) drawn",
            sql.where_sql, sql.order_sql
        );
        self.query_one(
            &sql,
            &[&area.min_x, &area.min_y, &area.max_x, &area.max_y, &limit],
        )
    }

    /// The union of `collections`' spatial extents (all collections when
    /// none is named); `None` when none has one.
    fn extent(&self, collections: &[String]) -> Result<Option<BBox>, SourceError> {
        let extents: String = self.query_one(
            "SELECT coalesce(jsonb_agg(content->'extent'->'spatial'->'bbox'->0), '[]')::text \
             FROM pgstac.collections WHERE cardinality($1::text[]) = 0 OR id = ANY($1::text[])",
            &[&collections],
        )?;
        let extents: Value = serde_json::from_str(&extents).map_err(|e| SourceError::Read {
            path: self.shown.clone(),
            source: e.to_string().into(),
        })?;
        let mut out: Option<BBox> = None;
        for b in extents.as_array().into_iter().flatten() {
            let v: Vec<f64> = b
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            if let [x0, y0, x1, y1] = v[..]
                && let Ok(b) = BBox::new(x0, y0, x1, y1)
            {
                out = Some(out.map_or(b, |o| o.union(&b)));
            }
        }
        Ok(out)
    }
}

impl Drop for Pg {
    /// The idle connections are closed on a thread of their own: a
    /// blocking client may not be dropped on the async runtime that drops
    /// a reloaded configuration's sources.
    fn drop(&mut self) {
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(PoisonError::into_inner));
        if !idle.is_empty() {
            std::thread::spawn(move || drop(idle));
        }
    }
}

/// `spec`'s search body for a window of `bbox` (lon/lat) and `limit`
/// items: the window's box in place of the search's, newest first for
/// `latest`.
fn body_of(spec: &StacSpec, bbox: Option<&BBox>, limit: usize) -> Value {
    let mut body = match &spec.search {
        Value::Object(m) => m.clone(),
        _ => serde_json::Map::new(),
    };
    if let Some(b) = bbox {
        body.insert("bbox".into(), json!([b.min_x, b.min_y, b.max_x, b.max_y]));
        // A window's box replaces the search's (intersected first).
        body.remove("intersects");
    }
    if spec.method == Method::Latest {
        body.insert(
            "sortby".into(),
            json!([{"field": "properties.datetime", "direction": "desc"}]),
        );
    }
    body.insert("limit".into(), json!(limit));
    Value::Object(body)
}

/// `spec`'s search without a window (as each window's: its box in place
/// of the search's own).
fn unwindowed(spec: &StacSpec) -> Value {
    let mut body = body_of(spec, None, 1);
    if let Some(map) = body.as_object_mut() {
        map.remove("bbox");
        map.remove("intersects");
        map.remove("limit");
    }
    body
}

/// The period of a time dimension's values over items' `datetime`: one
/// value per period with items.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    /// An hour.
    Hour,
    /// A day (UTC).
    #[default]
    Day,
    /// A month.
    Month,
    /// A year.
    Year,
}

impl Period {
    /// Its name in SQL's `date_trunc`.
    fn sql(self) -> &'static str {
        match self {
            Period::Hour => "hour",
            Period::Day => "day",
            Period::Month => "month",
            Period::Year => "year",
        }
    }

    /// The start of the period after the one starting at `start`.
    pub fn next(self, start: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
        match self {
            Period::Hour => start + chrono::TimeDelta::hours(1),
            Period::Day => start + chrono::TimeDelta::days(1),
            Period::Month => start
                .checked_add_months(chrono::Months::new(1))
                .unwrap_or(start),
            Period::Year => start
                .checked_add_months(chrono::Months::new(12))
                .unwrap_or(start),
        }
    }
}

impl StacSource {
    /// The search body it was opened with (a [`StacSource::within`]'s
    /// narrowed to its period).
    pub fn search(&self) -> &Value {
        &self.spec.search
    }

    /// The starts (RFC 3339 UTC, newest first, at most `most`) of the
    /// `period`s in which the search finds items (by their `datetime`):
    /// one SQL query in pgSTAC; from a STAC API, its items' datetimes read
    /// page by page (at most `most` x 10 items).
    pub fn periods(&self, period: Period, most: usize) -> Result<Vec<String>, SourceError> {
        match &*self.catalogue {
            Catalogue::Pg(pg) => pg.periods(&self.sql, period, most),
            Catalogue::Api(_) => {
                let mut starts = std::collections::BTreeSet::new();
                let (mut from, mut read) = (None, 0);
                while read < most.saturating_mul(10) {
                    let (items, next) = self.page_of(None, 1000, &["properties.datetime"], from)?;
                    read += items.len().max(1);
                    for item in &items {
                        if let Some(t) = item
                            .pointer("/properties/datetime")
                            .and_then(Value::as_str)
                            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        {
                            starts.insert(period_start(period, t.with_timezone(&chrono::Utc)));
                        }
                    }
                    match next {
                        Some(n) if !items.is_empty() => from = Some(n),
                        _ => break,
                    }
                }
                Ok(starts.into_iter().rev().take(most).collect())
            }
        }
    }

    /// This source with its search narrowed to the items whose `datetime`
    /// lies from `from` up to (not including) `to` (RFC 3339): the source
    /// of one value of a time dimension. Shares this one's catalogue
    /// connections and open datasets; in pgSTAC, one query writes the
    /// narrowed search as SQL.
    pub fn within(&self, from: &str, to: &str) -> Result<StacSource, SourceError> {
        let last = chrono::DateTime::parse_from_rfc3339(to)
            .map(|t| {
                (t - chrono::TimeDelta::milliseconds(1))
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            })
            .map_err(|e| self.read_err(&format!("{to:?}: {e}")))?;
        let mut spec = self.spec.clone();
        let mut search = match spec.search {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        search.insert("datetime".into(), json!(format!("{from}/{last}")));
        spec.search = Value::Object(search);
        let sql = match &*self.catalogue {
            Catalogue::Pg(pg) => pg
                .search_sql(&unwindowed(&spec))
                .map_err(|e| self.read_err(&e))?,
            Catalogue::Api(_) => SearchSql::default(),
        };
        Ok(StacSource {
            report: vec![format!("{} at {from}/{last}", self.shown)],
            spec,
            shown: self.shown.clone(),
            catalogue: self.catalogue.clone(),
            sql,
            gdal: self.gdal.clone(),
            opened: self.opened.clone(),
            info: self.info.clone(),
            states: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(STATES_KEPT).expect("a constant above 0"),
            )),
        })
    }

    /// Connects to the catalogue (pgSTAC: checks it is installed), reads
    /// the first item the search finds for the bands, and the search's (or
    /// its collections') extent for the bounds.
    pub fn open(spec: &StacSpec, gdal: &GdalSettings) -> Result<StacSource, SourceError> {
        let shown = spec.shown();
        let open_err = |message: String| SourceError::Open {
            path: shown.clone(),
            source: message.into(),
        };
        if spec.asset.is_some() != spec.assets.is_empty() {
            return Err(open_err(
                "give one `asset` (all its bands) or `assets` (one band each)".into(),
            ));
        }
        if !spec.search.is_object() && !spec.search.is_null() {
            return Err(open_err(
                "`search` is a STAC search body (a mapping)".into(),
            ));
        }
        if spec.max_items == 0
            || spec.page == 0
            || !(spec.max_seconds.is_finite() && spec.max_seconds > 0.0)
            || !(spec.freshness.is_finite() && spec.freshness >= 0.0)
        {
            return Err(open_err(
                "max_items and page must be at least 1, max_seconds above 0 and freshness at least 0"
                    .into(),
            ));
        }
        let unwindowed = unwindowed(spec);
        let policy = NetworkPolicy {
            allow_private_network: gdal.allow_private_network,
            allowed_private_hosts: gdal.allowed_private_hosts.clone(),
        };
        let (catalogue, version) = match (&spec.pgstac, &spec.stac_api) {
            (Some(url), None) => {
                let (pg, version) = Pg::open(url, spec).map_err(open_err)?;
                (Catalogue::Pg(pg), format!("pgSTAC {version}"))
            }
            (None, Some(url)) => (
                Catalogue::Api(StacApi::new(url, &spec.http, policy).map_err(open_err)?),
                "STAC API".to_string(),
            ),
            _ => {
                return Err(open_err(
                    "give one catalogue: `pgstac` (a database URL) or `stac_api` (an API's URL)"
                        .into(),
                ));
            }
        };
        let sql = match &catalogue {
            Catalogue::Pg(pg) => pg.search_sql(&unwindowed).map_err(open_err)?,
            Catalogue::Api(_) => SearchSql::default(),
        };
        let mut source = StacSource {
            spec: spec.clone(),
            shown: shown.clone(),
            catalogue: Arc::new(catalogue),
            sql,
            gdal: gdal.clone(),
            opened: Arc::new(Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(OPENED_KEPT).expect("a constant above 0"),
            ))),
            info: SourceInfo {
                band_count: 0,
                is_byte: true,
                native_crs: Crs::parse("OGC:CRS84")?,
                native_bounds: BBox::new(-180.0, -90.0, 180.0, 90.0)
                    .map_err(|e| open_err(e.to_string()))?,
                lonlat_bounds: BBox::new(-180.0, -90.0, 180.0, 90.0)
                    .map_err(|e| open_err(e.to_string()))?,
                native_resolution: 1.0,
            },
            report: Vec::new(),
            states: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(STATES_KEPT).expect("a constant above 0"),
            )),
        };
        let first = source.search_page(None, 1, None)?.0;
        let Some(item) = first.first() else {
            return Err(open_err(format!(
                "the search finds no item: {}",
                source.search_body(None, 1)
            )));
        };
        let (bands, is_byte, resolution) = source.probe(item)?;
        let bounds = source.bounds()?;
        let native_crs = Crs::parse("OGC:CRS84")?;
        let report = vec![format!(
            "{shown} ({version}): search {}, {bands} band(s) from {}, method {:?}, at most {} items and {} s per window",
            source.search_body(None, spec.max_items),
            spec.asset.clone().unwrap_or_else(|| spec.assets.join(", ")),
            spec.method,
            spec.max_items,
            spec.max_seconds
        )];
        source.info = SourceInfo {
            band_count: bands,
            is_byte,
            native_crs,
            native_bounds: bounds,
            lonlat_bounds: bounds,
            native_resolution: resolution,
        };
        source.report = report;
        Ok(source)
    }

    /// The search body for a window of `bbox` (lon/lat) and `limit` items.
    fn search_body(&self, bbox: Option<&BBox>, limit: usize) -> Value {
        body_of(&self.spec, bbox, limit)
    }

    /// One page of the search in `bbox`: at most `limit` items, from
    /// `from` (where the page before said the next starts), and where the
    /// next page starts if there is one. Items carry only what is read of
    /// them (`include`) unless the search names its `fields`.
    fn page_of(
        &self,
        bbox: Option<&BBox>,
        limit: usize,
        include: &[&str],
        from: Option<Cursor>,
    ) -> Result<(Vec<Value>, Option<Cursor>), SourceError> {
        match (&*self.catalogue, from) {
            (Catalogue::Pg(pg), from) => {
                let offset = match from {
                    Some(Cursor::Offset(n)) => n,
                    _ => 0,
                };
                let (items, more) = pg.page(&self.sql, bbox, limit, offset)?;
                let next = more.then(|| Cursor::Offset(offset + items.len()));
                Ok((items, next))
            }
            (Catalogue::Api(api), from) => {
                let page = match from {
                    Some(Cursor::Api(next)) => next,
                    _ => {
                        let mut body = self.search_body(bbox, limit);
                        if let Some(map) = body.as_object_mut() {
                            map.entry("fields")
                                .or_insert_with(|| json!({ "include": include }));
                        }
                        api.first(&body)
                    }
                };
                let (items, next) = api.page(&page, None)?;
                Ok((items, next.map(Cursor::Api)))
            }
        }
    }

    /// [`StacSource::page_of`] the items to draw (id, collection, assets,
    /// datetime).
    fn search_page(
        &self,
        bbox: Option<&BBox>,
        limit: usize,
        from: Option<Cursor>,
    ) -> Result<(Vec<Value>, Option<Cursor>), SourceError> {
        self.page_of(
            bbox,
            limit,
            &["id", "collection", "assets", "properties.datetime"],
            from,
        )
    }

    /// The search's own `bbox`, else the union of its collections'
    /// spatial extents, else the world.
    fn bounds(&self) -> Result<BBox, SourceError> {
        let world = BBox::new(-180.0, -90.0, 180.0, 90.0).map_err(|e| self.read_err(&e))?;
        if let Some([x0, y0, x1, y1]) = self
            .spec
            .search
            .get("bbox")
            .and_then(Value::as_array)
            .and_then(|b| b.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>())
            .and_then(|b| <[f64; 4]>::try_from(b).ok())
        {
            return BBox::new(x0, y0, x1, y1).map_err(|e| self.read_err(&e));
        }
        let collections: Vec<String> = self
            .spec
            .search
            .get("collections")
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let extent = match &*self.catalogue {
            Catalogue::Pg(pg) => pg.extent(&collections)?,
            Catalogue::Api(api) => api.extent(&collections)?,
        };
        Ok(extent.unwrap_or(world))
    }

    /// What the first `max_items` items a window of `area` (lon/lat) draws
    /// from are now, as a set: in pgSTAC their ids and row versions (one
    /// indexed query), from a STAC API their ids and `updated` (or
    /// `datetime`) properties (a search of those fields); within
    /// `freshness` of the last time `area` was asked, that answer.
    fn state_of(&self, area: &BBox) -> Result<String, SourceError> {
        let window = format!(
            "{} {} {} {}",
            area.min_x, area.min_y, area.max_x, area.max_y
        );
        let trusted = Duration::from_secs_f64(self.spec.freshness);
        if !trusted.is_zero()
            && let Some((at, state)) = self
                .states
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&window)
            && at.elapsed() < trusted
        {
            return Ok(state.clone());
        }
        let state = match &*self.catalogue {
            Catalogue::Pg(pg) => pg.state(&self.sql, area, self.spec.max_items)?,
            Catalogue::Api(_) => {
                let mut versions = Vec::new();
                let mut from = None;
                while versions.len() < self.spec.max_items {
                    let (items, next) = self.page_of(
                        Some(area),
                        self.spec.max_items - versions.len(),
                        &["id", "properties.updated", "properties.datetime"],
                        from,
                    )?;
                    versions.extend(items.iter().map(|i| {
                        let version = i
                            .pointer("/properties/updated")
                            .or_else(|| i.pointer("/properties/datetime"))
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        format!(
                            "{}@{version}",
                            i.get("id").and_then(Value::as_str).unwrap_or("?")
                        )
                    }));
                    match next {
                        Some(n) if !items.is_empty() => from = Some(n),
                        _ => break,
                    }
                }
                versions.sort();
                versions.join(",")
            }
        };
        if !trusted.is_zero() {
            self.states
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .put(window, (Instant::now(), state.clone()));
        }
        Ok(state)
    }

    fn read_err(&self, e: &dyn std::fmt::Display) -> SourceError {
        SourceError::Read {
            path: self.shown.clone(),
            source: e.to_string().into(),
        }
    }

    /// The hrefs of the assets read from `item`, one per asset asked.
    fn hrefs(&self, item: &Value) -> Result<Vec<String>, SourceError> {
        let names: Vec<&str> = match &self.spec.asset {
            Some(a) => vec![a.as_str()],
            None => self.spec.assets.iter().map(String::as_str).collect(),
        };
        let id = item.get("id").and_then(Value::as_str).unwrap_or("?");
        names
            .iter()
            .map(|name| {
                let href = item
                    .pointer(&format!("/assets/{name}/href"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        self.read_err(&format!("item {id:?} has no asset {name:?} with an href"))
                    })?;
                gdal_path(href).ok_or_else(|| {
                    self.read_err(&format!(
                        "item {id:?}: asset {name:?} at {href:?} is refused (file:// URLs are not read)"
                    ))
                })
            })
            .collect()
    }

    /// The GDAL source of `href`, opened once (through the egress guard and
    /// the GDAL settings' policy, as any GDAL source).
    fn dataset(&self, href: &str) -> Result<Arc<GdalSource>, SourceError> {
        if let Some(open) = self
            .opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(href)
        {
            return Ok(open.clone());
        }
        let spec = GdalSourceSpec {
            path: href.to_string(),
            resampling: self.spec.resampling,
            bands: Vec::new(),
        };
        let source = Arc::new(GdalSource::open(&spec, &self.gdal)?);
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(href.to_string(), source.clone());
        Ok(source)
    }

    /// The bands, whether all are bytes, and the resolution in degrees of
    /// `item`'s assets.
    fn probe(&self, item: &Value) -> Result<(usize, bool, f64), SourceError> {
        let mut bands = 0;
        let mut is_byte = true;
        let mut resolution = f64::INFINITY;
        for href in self.hrefs(item)? {
            let info = self.dataset(&href)?.info().clone();
            bands += if self.spec.asset.is_some() {
                info.band_count
            } else {
                1
            };
            is_byte &= info.is_byte;
            let degrees = if info.native_crs.geographic {
                info.native_resolution
            } else {
                info.native_resolution * info.native_crs.meters_per_unit
                    / tessera_grid::METERS_PER_DEGREE
            };
            resolution = resolution.min(degrees);
        }
        Ok((bands, is_byte, resolution))
    }

    /// `item`'s pixels for `req`: its asset's bands, or its single-band
    /// assets stacked (valid where all are).
    fn read_item(&self, item: &Value, req: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        let hrefs = self.hrefs(item)?;
        let mut out: Option<Raster> = None;
        for href in hrefs {
            let raster = self.dataset(&href)?.read(req)?;
            out = Some(match out {
                None if self.spec.asset.is_some() => raster,
                None => Raster {
                    bands: raster.bands.into_iter().take(1).collect(),
                    ..raster
                },
                Some(mut stacked) => {
                    stacked.bands.extend(raster.bands.into_iter().take(1));
                    for (v, w) in stacked.valid.iter_mut().zip(&raster.valid) {
                        *v = (*v).min(*w);
                    }
                    stacked
                }
            });
        }
        out.ok_or_else(|| self.read_err(&"an item without assets"))
    }
}

/// pgSTAC's table of searches (`pgstac.searches`), where registered
/// searches are kept by their hash, as titiler-pgstac keeps them.
#[derive(Clone)]
pub struct SearchTable {
    pg: Arc<Pg>,
    shown: String,
}

impl std::fmt::Debug for SearchTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchTable")
            .field("shown", &self.shown)
            .finish_non_exhaustive()
    }
}

/// Why the search table did not answer as asked.
#[derive(Debug, thiserror::Error)]
pub enum SearchTableError {
    /// pgSTAC refused the statement (a CQL2 filter it cannot read), with
    /// its message.
    #[error("{0}")]
    Refused(String),
    /// The database did not answer (named without its credentials).
    #[error("{0}: {1}")]
    Unavailable(String, String),
}

/// A search kept in pgSTAC: its hash, the search and its metadata.
pub type KeptSearch = (String, Value, Value);

impl SearchTable {
    /// The search table of the database of `spec`, through the pool the
    /// sources on that database share (connected and checked now).
    pub fn new(spec: &StacSpec) -> Result<SearchTable, SourceError> {
        let shown = spec.shown();
        let Some(url) = &spec.pgstac else {
            return Err(SourceError::Open {
                path: shown,
                source: "registered searches are kept in pgSTAC: the layer needs `pgstac`".into(),
            });
        };
        let (pg, _) = Pg::open(url, spec).map_err(|e| SourceError::Open {
            path: shown.clone(),
            source: e.into(),
        })?;
        Ok(SearchTable { pg, shown })
    }

    fn fail(&self, e: &postgres::Error) -> SearchTableError {
        match e.as_db_error() {
            Some(db) => SearchTableError::Refused(db.message().to_string()),
            None => SearchTableError::Unavailable(self.shown.clone(), e.to_string()),
        }
    }

    /// `f` run on a pooled connection, given back after.
    fn with_client<T>(
        &self,
        f: impl FnOnce(&mut postgres::Client) -> Result<T, postgres::Error>,
    ) -> Result<T, SearchTableError> {
        let mut conn = self
            .pg
            .client()
            .map_err(|e| SearchTableError::Unavailable(self.shown.clone(), e.to_string()))?;
        let out = f(&mut conn.client).map_err(|e| self.fail(&e))?;
        self.pg.give_back(conn);
        Ok(out)
    }

    /// Registers `search` with `metadata` (pgSTAC's `search_query`, which
    /// checks its filter): its hash.
    pub fn register(&self, search: &Value, metadata: &Value) -> Result<String, SearchTableError> {
        self.with_client(|client| {
            client
                .query_one(
                    "SELECT hash FROM pgstac.search_query($1::text::jsonb, false, $2::text::jsonb)",
                    &[&search.to_string(), &metadata.to_string()],
                )?
                .try_get(0)
        })
    }

    /// The searches whose metadata has `key: marker`, used within
    /// `within`, most recent first, at most `most`.
    pub fn recent(
        &self,
        key: &str,
        marker: &Value,
        within: Duration,
        most: usize,
    ) -> Result<Vec<KeptSearch>, SearchTableError> {
        let rows = self.with_client(|client| {
            client.query(
                "SELECT hash, search::text, metadata::text FROM pgstac.searches \
                 WHERE metadata->$1 = $2::text::jsonb \
                 AND lastused > now() - make_interval(secs => $3) \
                 ORDER BY lastused DESC LIMIT $4",
                &[
                    &key,
                    &marker.to_string(),
                    &within.as_secs_f64(),
                    &i64::try_from(most).unwrap_or(i64::MAX),
                ],
            )
        })?;
        let mut kept = Vec::with_capacity(rows.len());
        for row in rows {
            let (hash, search, metadata): (String, String, String) = (
                row.try_get(0).map_err(|e| self.fail(&e))?,
                row.try_get(1).map_err(|e| self.fail(&e))?,
                row.try_get(2).map_err(|e| self.fail(&e))?,
            );
            let parse = |text: &str| {
                serde_json::from_str(text)
                    .map_err(|e| SearchTableError::Refused(format!("search {hash}: {e}")))
            };
            kept.push((hash.clone(), parse(&search)?, parse(&metadata)?));
        }
        Ok(kept)
    }

    /// Marks searches `hashes` used now (`lastused`).
    pub fn touch(&self, hashes: &[String]) -> Result<(), SearchTableError> {
        self.with_client(|client| {
            client.execute(
                "UPDATE pgstac.searches SET lastused = now() WHERE hash = ANY($1)",
                &[&hashes],
            )
        })
        .map(drop)
    }
}

/// The path GDAL reads an asset's `href` at: `s3://` and `gs://` as
/// `/vsis3/` and `/vsigs/` (with the process's credentials), others as
/// they are (http(s) URLs and paths, then checked by the GDAL source's
/// location policy and egress guard); `None` for `file://` URLs.
fn gdal_path(href: &str) -> Option<String> {
    if let Some(rest) = href.strip_prefix("s3://") {
        return Some(format!("/vsis3/{rest}"));
    }
    if let Some(rest) = href.strip_prefix("gs://") {
        return Some(format!("/vsigs/{rest}"));
    }
    if href
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("file:"))
    {
        return None;
    }
    Some(href.to_string())
}

/// The start of the `period` holding `t`, as RFC 3339 UTC.
fn period_start(period: Period, t: chrono::DateTime<chrono::Utc>) -> String {
    use chrono::{Datelike, Timelike};
    let (y, m, d, h) = (t.year(), t.month(), t.day(), t.hour());
    match period {
        Period::Hour => format!("{y:04}-{m:02}-{d:02}T{h:02}:00:00Z"),
        Period::Day => format!("{y:04}-{m:02}-{d:02}T00:00:00Z"),
        Period::Month => format!("{y:04}-{m:02}-01T00:00:00Z"),
        Period::Year => format!("{y:04}-01-01T00:00:00Z"),
    }
}

/// Items' pixels combined by a [`Method`].
struct Combined {
    method: Method,
    bands: usize,
    pixels: usize,
    values: Vec<Vec<f32>>,
    count: Vec<u32>,
    stacks: Vec<Vec<Vec<f32>>>,
    full: usize,
    /// `first` and `latest`: the first item's raster as read, its holes
    /// filled from the later items' samples as they are (no conversion).
    picked: Option<Raster>,
}

/// Whether the method takes each pixel from one item.
fn picks(method: Method) -> bool {
    matches!(method, Method::First | Method::Latest)
}

impl Combined {
    fn new(method: Method, bands: usize, pixels: usize) -> Combined {
        Combined {
            method,
            bands,
            pixels,
            values: if picks(method) {
                Vec::new()
            } else {
                vec![vec![0.0; pixels]; bands]
            },
            picked: None,
            count: vec![0; pixels],
            stacks: if method == Method::Median {
                vec![vec![Vec::new(); pixels]; bands]
            } else {
                Vec::new()
            },
            full: 0,
        }
    }

    /// Adds an item's raster; false once no later item can change the
    /// result (`first` and `latest` with every pixel filled).
    fn add(&mut self, raster: Raster) -> bool {
        if picks(self.method) {
            self.pick(raster);
            return !self.is_full();
        }
        for i in 0..self.pixels {
            if raster.valid[i] == 0 {
                continue;
            }
            let fresh = self.count[i] == 0;
            match self.method {
                Method::First | Method::Latest if !fresh => continue,
                _ => {}
            }
            for b in 0..self.bands.min(raster.bands.len()) {
                let v = raster.bands[b].get(i);
                let slot = &mut self.values[b][i];
                match self.method {
                    Method::First | Method::Latest => *slot = v,
                    Method::Highest => *slot = if fresh { v } else { slot.max(v) },
                    Method::Lowest => *slot = if fresh { v } else { slot.min(v) },
                    Method::Mean => *slot += v,
                    Method::Median => self.stacks[b][i].push(v),
                }
            }
            if fresh {
                self.full += 1;
            }
            self.count[i] += 1;
        }
        !self.is_full()
    }

    /// `first` and `latest`: the pixels no earlier item had, from
    /// `raster`, band by band in its own sample type.
    fn pick(&mut self, raster: Raster) {
        let Some(picked) = &mut self.picked else {
            self.full = raster.valid.iter().filter(|&&v| v != 0).count();
            self.picked = Some(raster);
            return;
        };
        let holes: Vec<usize> = (0..self.pixels)
            .filter(|&i| picked.valid[i] == 0 && raster.valid[i] != 0)
            .collect();
        if holes.is_empty() {
            return;
        }
        for (to, from) in picked.bands.iter_mut().zip(&raster.bands) {
            match (to, from) {
                (BandData::U8(to), BandData::U8(from)) => {
                    for &i in &holes {
                        to[i] = from[i];
                    }
                }
                (BandData::F32(to), from) => {
                    for &i in &holes {
                        to[i] = from.get(i);
                    }
                }
                (to @ BandData::U8(_), from) => {
                    // An item of floats after one of bytes: floats from here.
                    let mut floats: Vec<f32> = (0..self.pixels).map(|i| to.get(i)).collect();
                    for &i in &holes {
                        floats[i] = from.get(i);
                    }
                    *to = BandData::F32(floats);
                }
            }
        }
        for &i in &holes {
            picked.valid[i] = raster.valid[i];
        }
        self.full += holes.len();
    }

    /// Whether no later item can change the result (`first` and
    /// `latest` with every pixel filled).
    fn is_full(&self) -> bool {
        matches!(self.method, Method::First | Method::Latest) && self.full == self.pixels
    }

    /// The combined raster, `width` x `height`, bytes when `is_byte`.
    fn finish(mut self, width: u32, height: u32, is_byte: bool) -> Raster {
        if picks(self.method) {
            return self.finish_picked(width, height, is_byte);
        }
        for b in 0..self.bands {
            for i in 0..self.pixels {
                let n = self.count[i];
                if n == 0 {
                    continue;
                }
                match self.method {
                    #[allow(clippy::cast_precision_loss, reason = "at most max_items items")]
                    Method::Mean => self.values[b][i] /= n as f32,
                    Method::Median => {
                        let s = &mut self.stacks[b][i];
                        s.sort_by(f32::total_cmp);
                        let m = s.len() / 2;
                        self.values[b][i] = if s.len() % 2 == 1 {
                            s[m]
                        } else {
                            f32::midpoint(s[m - 1], s[m])
                        };
                    }
                    _ => {}
                }
            }
        }
        let valid = self
            .count
            .iter()
            .map(|&n| if n > 0 { 255 } else { 0 })
            .collect();
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "rounded and clamped to a byte"
        )]
        let bands = self
            .values
            .into_iter()
            .map(|v| {
                if is_byte {
                    BandData::U8(
                        v.iter()
                            .map(|x| x.round().clamp(0.0, 255.0) as u8)
                            .collect(),
                    )
                } else {
                    BandData::F32(v)
                }
            })
            .collect();
        Raster {
            width,
            height,
            bands,
            valid,
        }
    }
}

impl Combined {
    /// `first` and `latest`'s raster: the picked samples, `bands` of them
    /// (bytes when `is_byte`), valid (255) where an item had data.
    fn finish_picked(self, width: u32, height: u32, is_byte: bool) -> Raster {
        let pixels = self.pixels;
        let Some(mut picked) = self.picked else {
            let empty = if is_byte {
                BandData::U8(vec![0; pixels])
            } else {
                BandData::F32(vec![0.0; pixels])
            };
            return Raster {
                width,
                height,
                bands: vec![empty; self.bands],
                valid: vec![0; pixels],
            };
        };
        picked.bands.truncate(self.bands);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "rounded and clamped to a byte"
        )]
        for band in &mut picked.bands {
            match band {
                BandData::F32(v) if is_byte => {
                    *band = BandData::U8(
                        v.iter()
                            .map(|x| x.round().clamp(0.0, 255.0) as u8)
                            .collect(),
                    );
                }
                BandData::U8(v) if !is_byte => {
                    *band = BandData::F32(v.iter().map(|&x| f32::from(x)).collect());
                }
                _ => {}
            }
        }
        for v in &mut picked.valid {
            if *v != 0 {
                *v = 255;
            }
        }
        Raster {
            width,
            height,
            ..picked
        }
    }
}

impl Source for StacSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn state(&self, bbox: &BBox, crs: &Crs) -> Option<Result<String, SourceError>> {
        let Some(area) = crs
            .transform_bbox(bbox, &self.info.native_crs)
            .ok()
            .and_then(|b| b.intersection(&self.info.lonlat_bounds))
        else {
            return Some(Ok(String::new()));
        };
        Some(self.state_of(&area))
    }

    fn changes_while_open(&self) -> bool {
        true
    }

    fn report(&self) -> Vec<String> {
        self.report.clone()
    }

    fn read(&self, req: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        let start = Instant::now();
        let pixels = req.width as usize * req.height as usize;
        let mut combined = Combined::new(self.spec.method, self.info.band_count, pixels);
        let lonlat = req
            .crs
            .transform_bbox(&req.bbox, &self.info.native_crs)
            .ok()
            .and_then(|b| b.intersection(&self.info.lonlat_bounds));
        if let Some(area) = lonlat {
            // `first` and `latest` usually stop after a few items: asked a
            // page at a time; the others read every item, in one page.
            let page = match self.spec.method {
                Method::First | Method::Latest => self.spec.page.min(self.spec.max_items),
                _ => self.spec.max_items,
            };
            let budget = Duration::from_secs_f64(self.spec.max_seconds);
            let (mut read, mut from, mut cut) = (0, None, false);
            'pages: loop {
                let left = self.spec.max_items - read;
                let (items, next) = self.search_page(Some(&area), page.min(left), from.take())?;
                for item in &items {
                    if req
                        .cancel
                        .is_some_and(|c| c.load(std::sync::atomic::Ordering::Acquire))
                    {
                        return Err(SourceError::Cancelled);
                    }
                    if start.elapsed() > budget {
                        crate::partial::note(crate::partial::Partial::MaxSeconds);
                        tracing::warn!(
                            source = %self.shown,
                            read,
                            "a window's items took longer than max_seconds: drawn from those read"
                        );
                        break 'pages;
                    }
                    let raster = self.read_item(item, req)?;
                    read += 1;
                    if !combined.add(raster) {
                        break 'pages;
                    }
                }
                match next {
                    Some(n) if !items.is_empty() && read < self.spec.max_items => from = Some(n),
                    Some(_) if !items.is_empty() => {
                        // More items than max_items lie under the window.
                        cut = true;
                        break;
                    }
                    _ => break,
                }
            }
            if cut && !combined.is_full() {
                crate::partial::note(crate::partial::Partial::MaxItems);
                tracing::debug!(source = %self.shown, "a window read max_items items");
            }
        }
        Ok(combined.finish(req.width, req.height, self.info.is_byte))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raster(values: &[f32], valid: &[u8]) -> Raster {
        Raster {
            width: u32::try_from(values.len()).unwrap(),
            height: 1,
            bands: vec![BandData::F32(values.to_vec())],
            valid: valid.to_vec(),
        }
    }

    fn combine(method: Method, items: &[Raster]) -> Vec<f32> {
        let mut c = Combined::new(method, 1, 3);
        for r in items {
            if !c.add(r.clone()) {
                break;
            }
        }
        match c.finish(3, 1, false).bands.remove(0) {
            BandData::F32(v) => v,
            BandData::U8(_) => unreachable!("asked for floats"),
        }
    }

    #[test]
    fn methods_combine_the_items_with_data() {
        let items = [
            raster(&[1.0, 2.0, 9.0], &[255, 0, 255]),
            raster(&[5.0, 4.0, 3.0], &[255, 255, 255]),
            raster(&[7.0, 8.0, 6.0], &[255, 255, 0]),
        ];
        assert_eq!(combine(Method::First, &items), vec![1.0, 4.0, 9.0]);
        assert_eq!(combine(Method::Highest, &items), vec![7.0, 8.0, 9.0]);
        assert_eq!(combine(Method::Lowest, &items), vec![1.0, 4.0, 3.0]);
        assert_eq!(combine(Method::Mean, &items), vec![13.0 / 3.0, 6.0, 6.0]);
        assert_eq!(combine(Method::Median, &items), vec![5.0, 6.0, 6.0]);
    }

    #[test]
    fn first_stops_once_every_pixel_is_filled() {
        let mut c = Combined::new(Method::First, 1, 2);
        assert!(c.add(raster(&[1.0, 0.0], &[255, 0])));
        assert!(!c.add(raster(&[2.0, 3.0], &[255, 255])));
    }

    #[test]
    fn asset_hrefs_become_gdal_paths_and_file_urls_are_refused() {
        assert_eq!(gdal_path("s3://b/k.tif").unwrap(), "/vsis3/b/k.tif");
        assert_eq!(gdal_path("gs://b/k.tif").unwrap(), "/vsigs/b/k.tif");
        assert_eq!(gdal_path("https://h/k.tif").unwrap(), "https://h/k.tif");
        assert_eq!(gdal_path("FILE:///etc/passwd"), None);
    }

    #[test]
    fn urls_are_shown_without_credentials() {
        assert_eq!(
            shown_url("postgres://u:secret@db.example:5433/stac"),
            "pgstac db.example:5433/stac"
        );
    }
}
