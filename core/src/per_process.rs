//! What a process opens once per key and shares (stores by URL, clients by store), fork-aware.
//!
//! A forked child starts with an empty map. The parent's values hold connections whose tasks ran
//! on the parent's runtime threads, which the child does not have, and a file store's random
//! temp-file names would repeat in every forked sibling; the child leaks the parent's entries
//! rather than dropping them (dropping could touch that runtime).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use crate::error::Result;

pub(crate) struct PerProcess<K, V> {
    /// The process the values belong to, and the values.
    slot: Mutex<Option<(u32, HashMap<K, V>)>>,
}

impl<K: Eq + Hash + Clone, V> PerProcess<K, V> {
    pub(crate) const fn new() -> Self {
        PerProcess {
            slot: Mutex::new(None),
        }
    }

    /// Call `f` with this process's map (under its lock).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut HashMap<K, V>) -> R) -> R {
        let me = std::process::id();
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_none_or(|(pid, _)| *pid != me) {
            std::mem::forget(slot.take());
            *slot = Some((me, HashMap::new()));
        }
        f(&mut slot.as_mut().expect("set above").1)
    }

    /// The value of `key` in this process, opened by `open` on first use (under the map's lock,
    /// so two threads never open two values for one key).
    pub(crate) fn get_or_open(&self, key: &K, open: impl FnOnce() -> Result<V>) -> Result<V>
    where
        V: Clone,
    {
        self.with(|values| {
            if let Some(value) = values.get(key) {
                return Ok(value.clone());
            }
            let value = open()?;
            values.insert(key.clone(), value.clone());
            Ok(value)
        })
    }
}
