//! OGC key-value-pair query strings: names in any case, one value per name.

use std::collections::HashMap;

/// Parsed query parameters with case-insensitive names.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Kvp {
    values: HashMap<String, String>,
}

/// Why a query string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvpError {
    /// Longer than the configured limit.
    TooLong(usize),
    /// The same parameter given twice with different values.
    Conflict(String),
    /// A required parameter is missing.
    Missing(&'static str),
    /// SERVICE names another service.
    WrongService {
        /// SERVICE as given.
        given: String,
        /// The service of the endpoint.
        expected: &'static str,
    },
}

impl Kvp {
    /// Parses `query` (without the `?`). A parameter repeated with the same
    /// value is accepted; with a different value it is a conflict.
    pub fn parse(query: &str, max_bytes: usize) -> Result<Kvp, KvpError> {
        if query.len() > max_bytes {
            return Err(KvpError::TooLong(max_bytes));
        }
        let mut values = HashMap::new();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let key = k.to_ascii_lowercase();
            match values.get(&key) {
                Some(existing) if existing != &v => {
                    return Err(KvpError::Conflict(key.to_ascii_uppercase()));
                }
                Some(_) => {}
                None => {
                    values.insert(key, v.into_owned());
                }
            }
        }
        Ok(Kvp { values })
    }

    /// The common OGC preamble: SERVICE, when given, must name `service`;
    /// REQUEST is required and returned.
    pub fn service_request(&self, service: &'static str) -> Result<&str, KvpError> {
        if let Some(given) = self.get("service")
            && !given.eq_ignore_ascii_case(service)
        {
            return Err(KvpError::WrongService {
                given: given.to_string(),
                expected: service,
            });
        }
        self.required("REQUEST")
    }

    /// The value of `name` (any case), which must be given.
    pub fn required(&self, name: &'static str) -> Result<&str, KvpError> {
        self.get(name).ok_or(KvpError::Missing(name))
    }

    /// The value of `name` (any case), if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// Every parameter, names lower case.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_in_any_case() {
        let k = Kvp::parse("Service=WMS&rEqUeSt=GetMap&bbox=1%2C2", 100).unwrap();
        assert_eq!(k.get("SERVICE"), Some("WMS"));
        assert_eq!(k.get("request"), Some("GetMap"));
        assert_eq!(k.get("BBOX"), Some("1,2"));
        assert_eq!(k.get("layers"), None);
    }

    #[test]
    fn conflicting_duplicates_are_refused_and_identical_ones_accepted() {
        assert_eq!(
            Kvp::parse("width=1&WIDTH=2", 100),
            Err(KvpError::Conflict("WIDTH".into()))
        );
        assert!(Kvp::parse("width=1&WIDTH=1", 100).is_ok());
        assert_eq!(Kvp::parse("a=1234", 3), Err(KvpError::TooLong(3)));
    }
}
