//! An archive at an HTTP(S) URL: byte ranges by range requests of the
//! upstream client (timeouts, retries, the egress guard). Built with the
//! `upstream` feature.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::upstream::client::{UpstreamClient, redacted};
use crate::{HttpSettings, NetworkPolicy};
use tessera_archive::bytes::{ArchiveBytes, Ranged};

/// An archive at an HTTP(S) URL, read by range requests.
#[derive(Debug)]
pub struct HttpBytes {
    url: reqwest::Url,
    client: Arc<UpstreamClient>,
}

impl HttpBytes {
    /// A reader of `url` (checked against the egress policy).
    pub fn open(
        url: &str,
        settings: HttpSettings,
        policy: NetworkPolicy,
    ) -> Result<HttpBytes, String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        let client = UpstreamClient::new(
            &url,
            settings,
            policy,
            &std::collections::BTreeMap::new(),
            None,
        )?;
        Ok(HttpBytes {
            url,
            client: Arc::new(client),
        })
    }
}

impl ArchiveBytes for HttpBytes {
    fn read(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<Ranged, String>> {
        let asked = self.client.get_range(self.url.clone(), offset, len);
        let name = redacted(&self.url);
        Box::pin(async move {
            let fetched = asked.await.map_err(|e| format!("{name}: {e}"))?;
            if fetched.status != 206 {
                return Err(format!(
                    "{name} answered {} to a range request",
                    fetched.status
                ));
            }
            let mut bytes = fetched.body;
            let most = usize::try_from(len).unwrap_or(usize::MAX);
            if bytes.len() > most {
                bytes.truncate(most);
            }
            Ok(Ranged {
                bytes,
                version: fetched.etag,
            })
        })
    }

    fn name(&self) -> String {
        redacted(&self.url)
    }
}
