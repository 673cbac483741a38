//! Coordination of several processes through the store they share: lease
//! objects that make one node render a metatile while the others wait, and
//! per-layer generation objects that tell every node a layer was truncated.
//!
//! Both live beside the tiles, so no other server is needed:
//! - a lease is `<prefix>/<layer>/<grid>/<z>/leases/<min_x>-<min_y>-<max_x>-<max_y>.<ext>`,
//!   a small JSON object (`node`, `expires_ms`) created with a create-only
//!   PUT (`If-None-Match: *`); an expired lease is taken over with a PUT
//!   conditional on the ETag that was read (`If-Match`), so of two nodes
//!   taking it over exactly one wins. The holder renews it with the same
//!   conditional PUT and deletes it when the tiles are stored.
//! - a generation is `<prefix>/<layer>/generation` on an object store, or
//!   `<root>/.generations/<layer>` for stores in a directory; a truncate
//!   rewrites it, and nodes ask for it with `If-None-Match` on the ETag
//!   they saw last (a `304` costs no body).
//!
//! Leases need conditional overwrites, which S3, GCS, Azure and MinIO
//! honour; a directory (the local file system) only offers create-only
//! writes, so [`Coordinator::supports_leases`] is false there.

use std::collections::BTreeMap;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};
use serde::{Deserialize, Serialize};
use tessera_grid::{TileFormat, TileRange};

use crate::object::ObjectLocation;
use crate::{StoreError, StoreSpec};

/// The shared place where nodes coordinate: the bucket (and prefix) or the
/// directory of a store.
#[derive(Debug, Clone)]
pub struct Coordinator {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// `true` for object stores (generation at `<prefix>/<layer>/generation`),
    /// `false` for a directory (`.generations/<layer>`).
    bucket: bool,
    conditional_put: bool,
    name: String,
}

/// What a lease object holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LeaseInfo {
    /// The node that holds it.
    pub node: String,
    /// When it expires, in milliseconds since the Unix epoch.
    pub expires_ms: u64,
}

/// How far ahead a lease may claim to run, in lease TTLs: a holder writes
/// `now + ttl` at every renewal, so a claim further ahead than this comes
/// from a skewed clock or a bad writer and counts as expired.
pub const MOST_TTLS_CLAIMED: u32 = 2;

/// Largest lease object read; a bigger one is foreign and counts as expired.
pub const MOST_LEASE_BYTES: u64 = 4096;

impl LeaseInfo {
    /// Whether it has expired at `now`.
    pub fn expired(&self, now: SystemTime) -> bool {
        millis(now) >= self.expires_ms
    }

    /// Whether it has expired at `now`, or claims to run further ahead
    /// than [`MOST_TTLS_CLAIMED`] times `ttl` (leases of this cluster are
    /// written with `ttl`): such a lease would block its metatile for as
    /// long as it claims.
    pub fn expired_for(&self, now: SystemTime, ttl: Duration) -> bool {
        let most = millis(now + ttl * MOST_TTLS_CLAIMED);
        self.expired(now) || self.expires_ms > most
    }

    /// Time left before it expires (zero when it has).
    pub fn remaining(&self, now: SystemTime) -> Duration {
        Duration::from_millis(self.expires_ms.saturating_sub(millis(now)))
    }
}

/// A lease this node holds: where it is and the version it wrote.
#[derive(Debug, Clone)]
pub struct HeldLease {
    path: Path,
    version: UpdateVersion,
    node: String,
}

impl HeldLease {
    /// The lease object's key.
    pub fn key(&self) -> &str {
        self.path.as_ref()
    }
}

/// The answer to a lease request.
#[derive(Debug, Clone)]
pub enum Acquired {
    /// Created: no one held it.
    Won(HeldLease),
    /// It had expired and this node took it over.
    TakenOver(HeldLease),
    /// Another node holds it.
    Held(LeaseInfo),
}

/// The answer to a generation check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Generation {
    /// The same as last seen (or still absent).
    Unchanged,
    /// Changed (or appeared): the new ETag to ask with next time.
    Changed(Option<String>),
}

/// Milliseconds since the Unix epoch.
fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Coordinator {
    /// The coordinator of a store in `spec`: the bucket of an object store,
    /// the directory of a file or MBTiles store. `None` for stores no other
    /// process can share (memory, journal).
    pub fn for_store(name: &str, spec: &StoreSpec) -> Result<Option<Coordinator>, StoreError> {
        match spec {
            StoreSpec::Object(s) => Ok(Some(Coordinator::on_bucket(name, s.location(name)?))),
            StoreSpec::File(s) => Coordinator::in_directory(name, &s.path).map(Some),
            StoreSpec::Mbtiles(s) => Coordinator::in_directory(name, &s.path).map(Some),
            StoreSpec::Journal(_) | StoreSpec::Memory(_) => Ok(None),
        }
    }

    /// A coordinator on an object store location.
    pub fn on_bucket(name: &str, location: ObjectLocation) -> Coordinator {
        Coordinator {
            store: location.store,
            prefix: location.prefix,
            bucket: true,
            conditional_put: location.conditional_put,
            name: name.to_string(),
        }
    }

    /// A coordinator in a directory (generations only: no leases).
    pub fn in_directory(name: &str, dir: &FsPath) -> Result<Coordinator, StoreError> {
        let io = |e: std::io::Error| StoreError::Io {
            store: name.to_string(),
            op: "open",
            key: dir.display().to_string(),
            source: e.into(),
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let fs = LocalFileSystem::new_with_prefix(dir).map_err(|e| StoreError::Io {
            store: name.to_string(),
            op: "open",
            key: dir.display().to_string(),
            source: e.into(),
        })?;
        Ok(Coordinator {
            store: Arc::new(fs),
            prefix: Path::default(),
            bucket: false,
            conditional_put: false,
            name: name.to_string(),
        })
    }

    /// Whether the store honours conditional overwrites, which leases need.
    pub fn supports_leases(&self) -> bool {
        self.conditional_put
    }

    /// The store's name in the configuration.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn err(&self, op: &'static str, key: &str, e: impl Into<crate::Cause>) -> StoreError {
        StoreError::Io {
            store: self.name.clone(),
            op,
            key: key.to_string(),
            source: e.into(),
        }
    }

    /// The key of the lease of a metatile (`range`) of `layer` in `grid`
    /// and `format`.
    pub fn lease_path(
        &self,
        layer: &str,
        grid: &str,
        format: TileFormat,
        range: &TileRange,
    ) -> String {
        self.prefix
            .clone()
            .join(layer)
            .join(grid)
            .join(range.z.to_string().as_str())
            .join("leases")
            .join(
                format!(
                    "{}-{}-{}-{}.{}",
                    range.min_x,
                    range.min_y,
                    range.max_x,
                    range.max_y,
                    format.extension()
                )
                .as_str(),
            )
            .to_string()
    }

    /// Asks for the lease at `key` for `node`, valid for `ttl`.
    pub async fn acquire(
        &self,
        key: &str,
        node: &str,
        ttl: Duration,
    ) -> Result<Acquired, StoreError> {
        if !self.conditional_put {
            return Err(self.err(
                "lease",
                key,
                "this store cannot do conditional writes, which leases need",
            ));
        }
        let path = Path::from(key);
        // A lease deleted between our create and our read is asked for
        // again; a few rounds settle any race.
        for _ in 0..4 {
            if let Some(held) = self.write_lease(&path, node, ttl, PutMode::Create).await? {
                return Ok(Acquired::Won(held));
            }
            let Some((info, version)) = self.read_lease(&path).await? else {
                continue;
            };
            if !info.expired_for(SystemTime::now(), ttl) {
                return Ok(Acquired::Held(info));
            }
            return Ok(
                match self
                    .write_lease(&path, node, ttl, PutMode::Update(version))
                    .await?
                {
                    Some(held) => Acquired::TakenOver(held),
                    // Another node took it over first: it holds it now.
                    None => match self.read_lease(&path).await? {
                        Some((info, _)) => Acquired::Held(info),
                        None => continue,
                    },
                },
            );
        }
        Err(self.err(
            "lease",
            key,
            "the lease kept changing under concurrent requests",
        ))
    }

    /// The lease at `key`, `None` when no one holds it.
    pub async fn lease(&self, key: &str) -> Result<Option<LeaseInfo>, StoreError> {
        Ok(self.read_lease(&Path::from(key)).await?.map(|(i, _)| i))
    }

    /// Extends a held lease to `ttl` from now. `Ok(false)` when it was taken
    /// over by another node (this one was too late to renew it).
    pub async fn renew(&self, held: &mut HeldLease, ttl: Duration) -> Result<bool, StoreError> {
        let mode = PutMode::Update(held.version.clone());
        let node = held.node.clone();
        match self.write_lease(&held.path, &node, ttl, mode).await? {
            Some(renewed) => {
                *held = renewed;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Deletes a held lease (the tiles are stored, or the work failed).
    pub async fn release(&self, held: HeldLease) -> Result<(), StoreError> {
        match self.store.delete(&held.path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("release", held.path.as_ref(), e)),
        }
    }

    async fn write_lease(
        &self,
        path: &Path,
        node: &str,
        ttl: Duration,
        mode: PutMode,
    ) -> Result<Option<HeldLease>, StoreError> {
        let info = LeaseInfo {
            node: node.to_string(),
            expires_ms: millis(SystemTime::now() + ttl),
        };
        let body = serde_json::to_vec(&info).expect("a lease serializes");
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self.store.put_opts(path, PutPayload::from(body), opts).await {
            Ok(r) => Ok(Some(HeldLease {
                path: path.clone(),
                version: UpdateVersion {
                    e_tag: r.e_tag,
                    version: r.version,
                },
                node: info.node,
            })),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                // A conditional update of an object deleted meanwhile.
                | object_store::Error::NotFound { .. },
            ) => Ok(None),
            Err(e) => Err(self.err("lease", path.as_ref(), e)),
        }
    }

    async fn read_lease(
        &self,
        path: &Path,
    ) -> Result<Option<(LeaseInfo, UpdateVersion)>, StoreError> {
        let got = match self.store.get(path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err("lease", path.as_ref(), e)),
        };
        let version = UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        if got.meta.size > MOST_LEASE_BYTES {
            // Not one of ours: never read whole, taken over like a torn one.
            return Ok(Some((
                LeaseInfo {
                    node: String::from("?"),
                    expires_ms: 0,
                },
                version,
            )));
        }
        let bytes = got
            .bytes()
            .await
            .map_err(|e| self.err("lease", path.as_ref(), e))?;
        // An unreadable lease (a foreign or torn object) counts as expired,
        // so it is taken over rather than blocking the metatile for ever.
        let info = serde_json::from_slice(&bytes).unwrap_or(LeaseInfo {
            node: String::from("?"),
            expires_ms: 0,
        });
        Ok(Some((info, version)))
    }

    fn generation_path(&self, layer: &str) -> Path {
        if self.bucket {
            self.prefix.clone().join(layer).join("generation")
        } else {
            Path::from(".generations").join(layer)
        }
    }

    /// Records a new generation of `layer` (after its tiles were
    /// truncated), so every node drops what it holds of them.
    pub async fn bump_generation(&self, layer: &str, node: &str) -> Result<(), StoreError> {
        let path = self.generation_path(layer);
        let body: BTreeMap<&str, String> = [
            ("node", node.to_string()),
            ("at_ms", millis(SystemTime::now()).to_string()),
            ("nonce", format!("{:016x}", rand_u64())),
        ]
        .into_iter()
        .collect();
        let body = serde_json::to_vec(&body).expect("a map serializes");
        self.store
            .put(&path, PutPayload::from(body))
            .await
            .map(|_| ())
            .map_err(|e| self.err("generation", path.as_ref(), e))
    }

    /// Whether `layer`'s generation changed since the ETag `seen` (`None`:
    /// never seen, or absent then).
    pub async fn check_generation(
        &self,
        layer: &str,
        seen: Option<&str>,
    ) -> Result<Generation, StoreError> {
        let path = self.generation_path(layer);
        let opts = GetOptions {
            if_none_match: seen.map(str::to_string),
            head: true,
            ..GetOptions::default()
        };
        match self.store.get_opts(&path, opts).await {
            Ok(r) => Ok(if r.meta.e_tag.as_deref() == seen {
                Generation::Unchanged
            } else {
                Generation::Changed(r.meta.e_tag)
            }),
            Err(object_store::Error::NotModified { .. }) => Ok(Generation::Unchanged),
            Err(object_store::Error::NotFound { .. }) => Ok(if seen.is_none() {
                Generation::Unchanged
            } else {
                Generation::Changed(None)
            }),
            Err(e) => Err(self.err("generation", path.as_ref(), e)),
        }
    }
}

/// A random number for nonces and jitter (no need for a strong source).
pub fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn coordinator() -> Coordinator {
        Coordinator::on_bucket(
            "test",
            ObjectLocation {
                store: Arc::new(InMemory::new()),
                prefix: Path::from("tiles"),
                conditional_put: true,
            },
        )
    }

    fn range() -> TileRange {
        TileRange {
            z: 3,
            min_x: 4,
            min_y: 0,
            max_x: 7,
            max_y: 3,
        }
    }

    #[tokio::test]
    async fn one_node_wins_the_others_see_the_holder() {
        let c = coordinator();
        let key = c.lease_path("relief", "WebMercatorQuad", TileFormat::Png, &range());
        assert_eq!(key, "tiles/relief/WebMercatorQuad/3/leases/4-0-7-3.png");
        let ttl = Duration::from_secs(30);
        let Acquired::Won(held) = c.acquire(&key, "a", ttl).await.unwrap() else {
            panic!("the first request wins");
        };
        match c.acquire(&key, "b", ttl).await.unwrap() {
            Acquired::Held(info) => assert_eq!(info.node, "a"),
            other => panic!("{other:?}"),
        }
        c.release(held).await.unwrap();
        assert!(c.lease(&key).await.unwrap().is_none());
        assert!(matches!(
            c.acquire(&key, "b", ttl).await.unwrap(),
            Acquired::Won(_)
        ));
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_by_exactly_one_node() {
        let c = coordinator();
        let key = c.lease_path("relief", "g", TileFormat::Png, &range());
        let Acquired::Won(mut stale) = c.acquire(&key, "dead", Duration::ZERO).await.unwrap()
        else {
            panic!();
        };
        let outcomes = futures::future::join_all((0..8).map(|i| {
            let c = c.clone();
            let key = key.clone();
            async move {
                c.acquire(&key, &format!("n{i}"), Duration::from_secs(30))
                    .await
                    .unwrap()
            }
        }))
        .await;
        let taken = outcomes
            .iter()
            .filter(|o| matches!(o, Acquired::TakenOver(_)))
            .count();
        assert_eq!(taken, 1, "{outcomes:?}");
        // The dead holder cannot renew a lease taken from it.
        assert!(!c.renew(&mut stale, Duration::from_secs(30)).await.unwrap());
    }

    #[tokio::test]
    async fn a_lease_claiming_the_far_future_or_too_big_to_be_ours_is_taken_over() {
        let ttl = Duration::from_secs(30);
        let year = 365 * 24 * 3600 * 1000;
        for body in [
            // A skewed clock or a bad writer: expiry a year ahead.
            serde_json::to_vec(&LeaseInfo {
                node: "skewed".into(),
                expires_ms: millis(SystemTime::now()) + year,
            })
            .unwrap(),
            // A foreign object far larger than any lease: never read whole.
            vec![b' '; 1 << 20],
        ] {
            let c = coordinator();
            let key = c.lease_path("relief", "g", TileFormat::Png, &range());
            c.store
                .put(&Path::from(key.as_str()), PutPayload::from(body))
                .await
                .unwrap();
            assert!(
                matches!(
                    c.acquire(&key, "b", ttl).await.unwrap(),
                    Acquired::TakenOver(_)
                ),
                "the lease was not taken over"
            );
        }
        // Within two TTLs (a clock a little ahead) a lease is honoured.
        let info = LeaseInfo {
            node: "ahead".into(),
            expires_ms: millis(SystemTime::now() + ttl + ttl / 2),
        };
        assert!(!info.expired_for(SystemTime::now(), ttl));
    }

    #[tokio::test]
    async fn renewing_extends_the_lease() {
        let c = coordinator();
        let key = c.lease_path("l", "g", TileFormat::Png, &range());
        let Acquired::Won(mut held) = c
            .acquire(&key, "a", Duration::from_millis(1))
            .await
            .unwrap()
        else {
            panic!();
        };
        assert!(c.renew(&mut held, Duration::from_mins(1)).await.unwrap());
        assert!(c.renew(&mut held, Duration::from_mins(1)).await.unwrap());
        let info = c.lease(&key).await.unwrap().unwrap();
        assert!(info.remaining(SystemTime::now()) > Duration::from_secs(50));
        assert!(matches!(
            c.acquire(&key, "b", Duration::from_mins(1)).await.unwrap(),
            Acquired::Held(_)
        ));
    }

    #[tokio::test]
    async fn generations_change_when_bumped() {
        let dir = tempfile::tempdir().unwrap();
        for c in [
            coordinator(),
            Coordinator::in_directory("files", dir.path()).unwrap(),
        ] {
            assert_eq!(
                c.check_generation("l", None).await.unwrap(),
                Generation::Unchanged
            );
            c.bump_generation("l", "a").await.unwrap();
            let Generation::Changed(Some(etag)) = c.check_generation("l", None).await.unwrap()
            else {
                panic!("a new generation is seen");
            };
            assert_eq!(
                c.check_generation("l", Some(&etag)).await.unwrap(),
                Generation::Unchanged
            );
            assert_eq!(
                c.check_generation("other", None).await.unwrap(),
                Generation::Unchanged
            );
            c.bump_generation("l", "b").await.unwrap();
            assert!(matches!(
                c.check_generation("l", Some(&etag)).await.unwrap(),
                Generation::Changed(Some(_))
            ));
        }
    }

    #[tokio::test]
    async fn a_directory_refuses_leases() {
        let dir = tempfile::tempdir().unwrap();
        let c = Coordinator::in_directory("files", dir.path()).unwrap();
        assert!(!c.supports_leases());
        let e = c
            .acquire("x", "a", Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("lease"), "{e}");
    }
}
