//! Vector tiles cut by PostGIS over native PostgreSQL connections
//! (`postgres`, the synchronous rust-postgres client): the tile query is
//! prepared once per connection, the tile's bounds go as parameters and the
//! tile's bytes come back in binary. GDAL's SQL layer would run each query
//! twice (once to learn the result's columns) and send it as text.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use super::spec::{VectorSpec, redact};
use crate::SourceError;

/// One connection and the statements prepared on it.
pub(super) struct Connection {
    client: postgres::Client,
    prepared: HashMap<String, postgres::Statement>,
}

/// The connection settings of the source's `PG:` string or `postgres://`
/// URL, with its connect and statement timeouts; `None` when this client
/// cannot take them (TLS required, keys only GDAL knows), and GDAL's
/// connection is used instead.
pub(super) fn config(spec: &VectorSpec) -> Option<postgres::Config> {
    let text = spec.path.strip_prefix("PG:").unwrap_or(&spec.path);
    let mut config = postgres::Config::from_str(text).ok()?;
    if config.get_ssl_mode() == postgres::config::SslMode::Require {
        return None;
    }
    config.connect_timeout(Duration::from_millis(spec.statement_timeout_ms.max(1000)));
    config.options(&format!(
        "-c statement_timeout={}",
        spec.statement_timeout_ms
    ));
    config.application_name("tessera");
    Some(config)
}

/// A new connection.
pub(super) fn connect(config: &postgres::Config, shown: &str) -> Result<Connection, SourceError> {
    let client = config
        .connect(postgres::NoTls)
        .map_err(|e| SourceError::Open {
            path: shown.to_string(),
            source: redact(&e.to_string()).into(),
        })?;
    Ok(Connection {
        client,
        prepared: HashMap::new(),
    })
}

/// Runs the tile query `sql` (prepared on first use) with `params` (the
/// tile's and the buffered tile's bounds) and returns its bytes. A failure
/// is the database's (an upstream error with its message): a lost
/// connection, a statement timeout.
pub(super) fn tile(
    conn: &mut Connection,
    sql: &str,
    params: &[f64; 8],
    shown: &str,
) -> Result<(bytes::Bytes, u64), SourceError> {
    let upstream = |e: postgres::Error| SourceError::Upstream {
        url: shown.to_string(),
        message: format!(
            "the tile query failed: {}",
            redact(
                &e.as_db_error()
                    .map_or_else(|| e.to_string(), |db| db.message().to_string())
            )
        ),
    };
    let statement = match conn.prepared.get(sql) {
        Some(s) => s.clone(),
        None => {
            let s = conn.client.prepare(sql).map_err(upstream)?;
            conn.prepared.insert(sql.to_string(), s.clone());
            s
        }
    };
    let values: Vec<&(dyn postgres::types::ToSql + Sync)> = params
        .iter()
        .map(|p| p as &(dyn postgres::types::ToSql + Sync))
        .collect();
    let row = conn
        .client
        .query_one(&statement, &values)
        .map_err(upstream)?;
    let bytes: Option<Vec<u8>> = row.try_get(0).map_err(upstream)?;
    let rows: Option<i64> = row.try_get(1).map_err(upstream)?;
    Ok((
        bytes::Bytes::from(bytes.unwrap_or_default()),
        rows.map_or(0, |n| u64::try_from(n).unwrap_or(0)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vector::spec::spec_for_tests as spec;

    #[test]
    fn connection_strings_and_urls_are_taken_with_their_timeouts() {
        let c = config(&spec("PG:host=h port=5433 user=u dbname=d")).unwrap();
        assert_eq!(c.get_ports(), [5433]);
        assert_eq!(c.get_dbname(), Some("d"));
        assert_eq!(c.get_connect_timeout(), Some(&Duration::from_millis(2500)));
        assert_eq!(c.get_options(), Some("-c statement_timeout=2500"));
        let c = config(&spec("postgres://u:p@h:5434/d")).unwrap();
        assert_eq!(c.get_ports(), [5434]);
        // TLS required, or keys only GDAL knows: GDAL's connection is used.
        assert!(config(&spec("PG:host=h dbname=d sslmode=require")).is_none());
        assert!(config(&spec("PG:host=h dbname=d schemas=a,b")).is_none());
    }
}
