//! Everything the server can serve, and the lookups into it: layers by
//! name, grids by identifier, stores by name, and the CRSs requests name.
//! Built by [`crate::assemble`]; read by the protocols and batch plans.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tessera_source::{Crs, SourceError};
use tessera_store::TileStore;
use tessera_store::cluster::Coordinator;

use crate::model::{Grid, Layer};
use crate::suggest::Unknown;

/// CRSs remembered from requests; further distinct CRSs are parsed per request.
const MAX_CACHED_CRS: usize = 256;

/// Everything the server can serve.
#[derive(Debug)]
pub struct Registry {
    /// Layers in configuration order, then layers added while running
    /// (uploaded sources).
    layers: std::sync::RwLock<Vec<Arc<Layer>>>,
    /// Grids by identifier.
    pub grids: HashMap<String, Arc<Grid>>,
    /// Tile stores by name.
    pub stores: HashMap<String, Arc<dyn TileStore>>,
    /// The coordinators of the stores other processes can share, by store
    /// name.
    pub coordinators: HashMap<String, Arc<Coordinator>>,
    crs_cache: Mutex<HashMap<String, Arc<Crs>>>,
}

impl Registry {
    /// A registry of `grids` and `stores` (with the `coordinators` of the
    /// stores other processes can share), holding no layer yet.
    pub fn new(
        grids: HashMap<String, Arc<Grid>>,
        stores: HashMap<String, Arc<dyn TileStore>>,
        coordinators: HashMap<String, Arc<Coordinator>>,
    ) -> Registry {
        Registry {
            layers: std::sync::RwLock::new(Vec::new()),
            grids,
            stores,
            coordinators,
            crs_cache: Mutex::new(HashMap::new()),
        }
    }

    /// Appends a layer (building the registry).
    pub fn push_layer(&mut self, layer: Arc<Layer>) {
        self.layers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(layer);
    }

    /// Adds a layer while serving, or replaces the added layer of that
    /// name (the caller has checked that no configured layer has it).
    pub fn add_layer(&self, layer: Arc<Layer>) {
        let mut layers = self
            .layers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        layers.retain(|l| l.name != layer.name);
        layers.push(layer);
    }

    /// Removes the layer added while serving named `name`; whether there
    /// was one.
    pub fn remove_layer(&self, name: &str) -> bool {
        let mut layers = self
            .layers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = layers.len();
        layers.retain(|l| l.name != name);
        layers.len() != before
    }

    /// Every layer, in order (a snapshot).
    pub fn layers(&self) -> Vec<Arc<Layer>> {
        self.layers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A layer by name.
    pub fn layer(&self, name: &str) -> Option<Arc<Layer>> {
        self.layers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|l| l.name == name)
            .cloned()
    }

    /// A layer by name, or what the name could have meant among the
    /// layers `sees` lets the asker know of (a caller's
    /// [`crate::auth::Caller::sees`]: a hint never names a layer the
    /// caller may not read).
    pub fn find_layer(
        &self,
        name: &str,
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<Arc<Layer>, Unknown> {
        self.layer(name).ok_or_else(|| {
            let layers = self.layers();
            let seen = layers.iter().map(|l| l.name.as_str()).filter(|n| sees(n));
            Unknown::among(name, "layers", seen)
        })
    }

    /// Names of the opened stores.
    pub fn store_names(&self) -> impl Iterator<Item = &str> {
        self.stores.keys().map(String::as_str)
    }

    /// A grid by identifier.
    pub fn grid(&self, id: &str) -> Option<&Arc<Grid>> {
        self.grids.get(id)
    }

    /// Parses a CRS named in a request, remembering a bounded number of them.
    pub fn crs(&self, text: &str) -> Result<Arc<Crs>, SourceError> {
        let key = text.to_ascii_uppercase();
        if let Ok(cache) = self.crs_cache.lock()
            && let Some(c) = cache.get(&key)
        {
            return Ok(c.clone());
        }
        let crs = Arc::new(Crs::parse(text)?);
        if let Ok(mut cache) = self.crs_cache.lock()
            && cache.len() < MAX_CACHED_CRS
        {
            cache.insert(key, crs.clone());
        }
        Ok(crs)
    }
}
