//! The serving process's background work, each a task that runs until
//! the process ends and follows reloads (it asks [`Live`] for the service
//! current at each turn): dimension values looked at again, PostGIS tables
//! listed again, the JWKS read again, and a reload on each SIGHUP.

use std::sync::Arc;

use super::live::Live;
use crate::http::Reload as _;

/// Looks at where the layers' dimension values come from every
/// `refresh_secs` (the shortest configured; nothing when none is) and
/// reloads the configuration when they changed, so new values (a new
/// date's files) are served without a restart.
pub(super) async fn refresh_dimension_values(live: Arc<Live>) {
    use crate::assemble::{refresh_interval, values_signature};
    let mut seen: Option<u128> = None;
    loop {
        let config = live.current().config.clone();
        let Some(every) = refresh_interval(&config) else {
            // Asked again after a while: a reload may add a refresh.
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            seen = None;
            continue;
        };
        if seen.is_none() {
            let first = config.clone();
            seen = tokio::task::spawn_blocking(move || values_signature(&first))
                .await
                .ok();
        }
        tokio::time::sleep(every).await;
        let signature = tokio::task::spawn_blocking(move || values_signature(&config))
            .await
            .ok();
        match (seen, signature) {
            (Some(before), Some(now)) if before != now => {
                tracing::info!("dimension values changed: reloading the configuration");
                if reload(
                    &live,
                    false,
                    "reloading for new dimension values failed; the old values keep serving",
                )
                .await
                {
                    seen = signature;
                }
            }
            _ => seen = signature.or(seen),
        }
    }
}

/// Lists the tables of `postgis_auto` sources again every `refresh_secs`
/// (the shortest; nothing when none is) and reloads when the layers they
/// make changed: new tables are served, dropped ones no longer.
pub(super) async fn refresh_found_tables(live: Arc<Live>) {
    loop {
        let Some(secs) = live.current().config.watch_secs else {
            // Asked again after a while: a reload may add a refresh.
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            continue;
        };
        tokio::time::sleep(std::time::Duration::from_secs_f64(secs.max(0.5))).await;
        let probing = live.clone();
        let found = tokio::task::spawn_blocking(move || {
            probing
                .source()
                .load()
                .map(|c| c.layers.into_iter().map(|l| l.name).collect::<Vec<_>>())
        })
        .await;
        let served: Vec<String> = live
            .current()
            .config
            .layers
            .iter()
            .map(|l| l.name.clone())
            .collect();
        match found {
            Ok(Ok(names)) if names != served => {
                tracing::info!("the database's tables changed: reloading the configuration");
                reload(
                    &live,
                    true,
                    "reloading for the database's tables failed; the old layers keep serving",
                )
                .await;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = &e as &dyn std::error::Error,
                "listing the database's tables failed; the layers served stay"
            ),
            Err(e) => tracing::error!(
                error = &e as &dyn std::error::Error,
                "the table listing failed"
            ),
        }
    }
}

/// Reads the JWKS URL of `auth.jwt` at once, then every `refresh_secs`;
/// a failed read keeps the last good keys (and is logged). Follows
/// reloads: a new configuration's verifier is read at once.
pub(super) async fn refresh_jwks(live: Arc<Live>) {
    let mut last: Option<Arc<crate::auth::Access>> = None;
    let mut next = tokio::time::Instant::now();
    loop {
        let access = live.current().access.clone();
        let changed = match (&access, &last) {
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            (a, b) => a.is_some() != b.is_some(),
        };
        last.clone_from(&access);
        let verifier = access.as_ref().and_then(|a| a.verifier());
        if let Some(v) = verifier
            && v.jwks_url().is_some()
            && (changed || tokio::time::Instant::now() >= next)
        {
            match v.refresh().await {
                Ok(n) => tracing::debug!(keys = n, "read the JWKS"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the JWKS; the last good keys stay");
                }
            }
            next = tokio::time::Instant::now() + v.refresh_every();
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Reloads the configuration on each SIGHUP; a config that fails, or that
/// drops layers served now (which only `POST /admin/reload?remove_layers=true`
/// or a restart may do), is logged and the current one keeps serving.
pub(super) async fn reload_on_hangup(live: Arc<Live>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: reload with POST /admin/reload");
            return;
        };
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            reload(
                &live,
                false,
                "the new configuration was refused; the old one keeps serving",
            )
            .await;
        }
    }
}

/// Reloads the configuration served by `live` on a blocking thread
/// (`remove_layers` as `POST /admin/reload` takes it); whether the new one
/// is served. A refusal is logged with `refused` (what keeps serving).
async fn reload(live: &Arc<Live>, remove_layers: bool, refused: &'static str) -> bool {
    let reloading = live.clone();
    match tokio::task::spawn_blocking(move || reloading.reload(remove_layers)).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            tracing::error!(error = &e as &dyn std::error::Error, "{refused}");
            false
        }
        Err(e) => {
            tracing::error!(error = &e as &dyn std::error::Error, "the reload failed");
            false
        }
    }
}
