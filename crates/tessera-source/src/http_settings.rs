//! How remote services are asked, as configured (`http:` of an upstream or
//! a remote archive), and which private addresses they may be reached at:
//! plain settings, known to every backend whether or not it asks over HTTP.

use serde::Deserialize;

/// How an upstream is asked (`source.http`); every field has a default.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// Longest wait for a connection, in seconds (default 5).
    pub connect_timeout_secs: f64,
    /// Longest wait for a whole response, in seconds (default 30).
    pub timeout_secs: f64,
    /// Requests in flight to this upstream at most (default 8); more wait.
    pub max_concurrent: usize,
    /// Retries after a connection error, a timeout or a 5xx (default 2).
    pub retries: u32,
    /// Pause before the first retry, in milliseconds (default 200); each
    /// later one waits twice as long, plus up to half again at random.
    pub retry_backoff_ms: u64,
    /// Failed requests in a row (after their retries) that open the circuit
    /// (default 5): requests then fail at once, with 503 and Retry-After.
    pub circuit_failures: u32,
    /// How long the circuit stays open before one request may try again,
    /// in seconds (default 10).
    pub circuit_open_secs: f64,
    /// Largest response body, in bytes (default 64 MiB).
    pub max_body_bytes: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            connect_timeout_secs: 5.0,
            timeout_secs: 30.0,
            max_concurrent: 8,
            retries: 2,
            retry_backoff_ms: 200,
            circuit_failures: 5,
            circuit_open_secs: 10.0,
            max_body_bytes: 64 << 20,
        }
    }
}

impl HttpSettings {
    /// Checks the ranges; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.connect_timeout_secs) || !positive(self.timeout_secs) {
            return Err("http.connect_timeout_secs and http.timeout_secs must be positive".into());
        }
        if !positive(self.circuit_open_secs) {
            return Err("http.circuit_open_secs must be positive".into());
        }
        if self.max_concurrent == 0 || self.circuit_failures == 0 || self.max_body_bytes == 0 {
            return Err(
                "http.max_concurrent, http.circuit_failures and http.max_body_bytes must be at least 1"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Which private addresses an upstream may be reached at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    /// Any address (`gdal.allow_private_network`).
    pub allow_private_network: bool,
    /// Hosts (`name` or `name:port`) that may resolve to private addresses
    /// (`gdal.allowed_private_hosts`).
    pub allowed_private_hosts: Vec<String>,
}
