//! `source: { type: postgis_auto, ... }`: every table and view of a
//! PostGIS database that has a geometry column, found in its
//! `geometry_columns` (which lists views too), one layer each; the server
//! expands the source into those layers, and finds them again on reload.

use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::spec::redact;
use crate::SourceError;

/// Most tables one source publishes by default.
const DEFAULT_MAX_TABLES: usize = 1000;

fn default_max_tables() -> usize {
    DEFAULT_MAX_TABLES
}

/// The settings of a `postgis_auto` source.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgisAutoSpec {
    /// A `postgres://` URL or a `PG:` connection string.
    pub path: String,
    /// The schemas published (default: every schema but PostgreSQL's and
    /// PostGIS's own).
    #[serde(default)]
    pub schemas: Vec<String>,
    /// Tables left out, as `schema.table` (`*` matches any run of
    /// characters: `staging.*`).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// How often the tables are listed again, in seconds, so that new ones
    /// are served and dropped ones are not (none: at start and on reload).
    #[serde(default)]
    pub refresh_secs: Option<f64>,
    /// Most tables published; more is an error.
    #[serde(default = "default_max_tables")]
    pub max_tables: usize,
}

/// A table (or view) with a geometry column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpatialTable {
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub table: String,
    /// Its (first) geometry column.
    pub geometry: String,
    /// The geometry type `geometry_columns` records (`MULTIPOLYGON`...).
    pub kind: String,
    /// The SRID.
    pub srid: i32,
    /// Its other columns that vector tiles can carry (text, numbers,
    /// booleans, dates; not its primary key, which is the features' id),
    /// in table order.
    pub columns: Vec<String>,
}

/// Schemas never published.
const SYSTEM_SCHEMAS: &[&str] = &[
    "pg_catalog",
    "information_schema",
    "topology",
    "tiger",
    "tiger_data",
];

/// Whether `name` matches `pattern`, where `*` matches any run of
/// characters.
fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else if let Some(at) = rest.find(part) {
            rest = &rest[at + part.len()..];
        } else {
            return false;
        }
    }
    true
}

impl PostgisAutoSpec {
    /// The tables it publishes now, in schema and table order.
    pub fn discover(&self) -> Result<Vec<SpatialTable>, SourceError> {
        let shown = redact(&self.path);
        let failed = |what: String| SourceError::Open {
            path: shown.clone(),
            source: what.into(),
        };
        let text = self.path.strip_prefix("PG:").unwrap_or(&self.path);
        let mut config = postgres::Config::from_str(text).map_err(|e| {
            failed(format!(
                "not a connection string: {}",
                redact(&e.to_string())
            ))
        })?;
        config.connect_timeout(Duration::from_secs(10));
        config.options("-c statement_timeout=10000");
        config.application_name("tessera");
        let mut client = config
            .connect(postgres::NoTls)
            .map_err(|e| failed(format!("cannot connect: {}", redact(&e.to_string()))))?;
        let rows = client
            .query(
                "SELECT f_table_schema::text, f_table_name::text, f_geometry_column::text, \
                 type::text, srid FROM geometry_columns ORDER BY 1, 2, 3",
                &[],
            )
            .map_err(|e| {
                failed(format!(
                    "cannot list geometry_columns (is PostGIS installed?): {e}"
                ))
            })?;
        let mut found: Vec<SpatialTable> = Vec::new();
        for row in rows {
            let table = SpatialTable {
                schema: row.get(0),
                table: row.get(1),
                geometry: row.get(2),
                kind: row.get(3),
                srid: row.get(4),
                columns: Vec::new(),
            };
            let qualified = format!("{}.{}", table.schema, table.table);
            let wanted = if self.schemas.is_empty() {
                !SYSTEM_SCHEMAS.contains(&table.schema.as_str())
            } else {
                self.schemas.contains(&table.schema)
            };
            let same = found
                .last()
                .is_some_and(|t| t.schema == table.schema && t.table == table.table);
            if wanted && !same && !self.exclude.iter().any(|p| matches(p, &qualified)) {
                found.push(table);
            }
        }
        if found.len() > self.max_tables {
            return Err(failed(format!(
                "{} tables with geometry, more than max_tables ({}); narrow `schemas` or `exclude`",
                found.len(),
                self.max_tables
            )));
        }
        // A table without a geometry yet has no extent to serve: it is
        // served once it has one (found again on reload or refresh).
        let quote = |n: &str| format!("\"{}\"", n.replace('"', "\"\""));
        let mut kept = Vec::with_capacity(found.len());
        for mut table in found {
            let any = format!(
                "SELECT EXISTS (SELECT 1 FROM {}.{} WHERE {} IS NOT NULL)",
                quote(&table.schema),
                quote(&table.table),
                quote(&table.geometry)
            );
            let has: bool = client.query_one(&any, &[]).map(|r| r.get(0)).map_err(|e| {
                failed(format!("cannot read {}.{}: {e}", table.schema, table.table))
            })?;
            if !has {
                tracing::info!(table = %format!("{}.{}", table.schema, table.table), "a table without geometries is not served yet");
                continue;
            }
            table.columns = client
                .query(
                    "SELECT column_name::text FROM information_schema.columns \
                     WHERE table_schema = $1 AND table_name = $2 \
                     AND data_type NOT IN ('USER-DEFINED', 'bytea', 'ARRAY', 'json', 'jsonb') \
                     AND column_name NOT IN (SELECT a.attname FROM pg_index i JOIN pg_attribute a \
                       ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                       WHERE i.indisprimary \
                       AND i.indrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass) \
                     ORDER BY ordinal_position",
                    &[&table.schema, &table.table],
                )
                .map_err(|e| {
                    failed(format!(
                        "cannot list the columns of {}.{}: {e}",
                        table.schema, table.table
                    ))
                })?
                .iter()
                .map(|r| r.get(0))
                .collect();
            kept.push(table);
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_match_with_stars() {
        assert!(matches("staging.*", "staging.roads"));
        assert!(matches("*.tmp_*", "public.tmp_x"));
        assert!(matches("public.roads", "public.roads"));
        assert!(!matches("public.roads", "public.roads2"));
        assert!(!matches("staging.*", "public.staging"));
    }
}
