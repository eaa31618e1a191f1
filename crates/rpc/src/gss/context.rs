//! The server's RPCSEC_GSS contexts, by handle: bounded, each until its Kerberos
//! ticket's lifetime ends (RFC 2203 §5.2.3: the server may forget a context at any
//! time; the client then gets RPCSEC_GSS_CREDPROBLEM and creates a new one).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::gssapi::SecContext;
use super::window::SeqWindow;

/// Contexts kept at once; one more evicts the least recently used.
pub const MAX_CONTEXTS: usize = 4096;
/// How long a context may take to be established (the CONTINUE_INIT round trips).
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// One context: the GSS state (not usable by two threads at once) and its window.
pub struct ServerContext {
    pub handle: Bytes,
    state: Mutex<ContextState>,
    /// Nanoseconds since the cache's epoch of the last use (for eviction).
    last_used: AtomicU64,
}

pub struct ContextState {
    pub gss: SecContext,
    pub window: SeqWindow,
    /// The client's principal once the context is complete.
    pub principal: Option<String>,
    pub expires: Instant,
}

impl ServerContext {
    pub fn lock(&self) -> MutexGuard<'_, ContextState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The handle → context table.
pub struct ContextCache {
    map: Mutex<HashMap<Bytes, Arc<ServerContext>>>,
    next_handle: AtomicU64,
    epoch: Instant,
    /// Distinguishes this server's handles from an earlier instance's.
    boot: u64,
}

impl Default for ContextCache {
    fn default() -> Self {
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        ContextCache {
            map: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            epoch: Instant::now(),
            boot,
        }
    }
}

impl ContextCache {
    fn map(&self) -> MutexGuard<'_, HashMap<Bytes, Arc<ServerContext>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A new, not yet established context with a fresh handle.
    pub fn insert_new(&self, gss: SecContext) -> Arc<ServerContext> {
        let n = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let mut handle = Vec::with_capacity(16);
        handle.extend_from_slice(&self.boot.to_be_bytes());
        handle.extend_from_slice(&n.to_be_bytes());
        let ctx = Arc::new(ServerContext {
            handle: Bytes::from(handle),
            state: Mutex::new(ContextState {
                gss,
                window: SeqWindow::default(),
                principal: None,
                expires: Instant::now() + ESTABLISH_TIMEOUT,
            }),
            last_used: AtomicU64::new(self.now()),
        });
        let mut map = self.map();
        if map.len() >= MAX_CONTEXTS {
            Self::evict(&mut map);
        }
        map.insert(ctx.handle.clone(), ctx.clone());
        ctx
    }

    /// Drop expired contexts, and if none were, the least recently used one.
    fn evict(map: &mut HashMap<Bytes, Arc<ServerContext>>) {
        let now = Instant::now();
        let before = map.len();
        map.retain(|_, c| c.lock().expires > now);
        if map.len() < before {
            return;
        }
        let oldest = map
            .values()
            .min_by_key(|c| c.last_used.load(Ordering::Relaxed))
            .map(|c| c.handle.clone());
        if let Some(h) = oldest {
            map.remove(&h);
        }
    }

    pub fn get(&self, handle: &[u8]) -> Option<Arc<ServerContext>> {
        let ctx = self.map().get(handle).cloned()?;
        ctx.last_used.store(self.now(), Ordering::Relaxed);
        Some(ctx)
    }

    pub fn remove(&self, handle: &[u8]) {
        self.map().remove(handle);
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Forget every context.
    pub fn clear(&self) {
        self.map().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_and_the_cache_is_bounded() {
        let cache = ContextCache::default();
        let a = cache.insert_new(SecContext::new());
        let b = cache.insert_new(SecContext::new());
        assert_ne!(a.handle, b.handle);
        assert!(cache.get(&a.handle).is_some());
        cache.remove(&a.handle);
        assert!(cache.get(&a.handle).is_none());
        for _ in 0..MAX_CONTEXTS + 10 {
            cache.insert_new(SecContext::new());
        }
        assert_eq!(cache.len(), MAX_CONTEXTS);
    }

    #[test]
    fn expired_contexts_are_evicted_first() {
        let cache = ContextCache::default();
        let keep = cache.insert_new(SecContext::new());
        let old = cache.insert_new(SecContext::new());
        old.lock().expires = Instant::now() - Duration::from_secs(1);
        for _ in 0..MAX_CONTEXTS - 2 {
            cache.insert_new(SecContext::new());
        }
        // Touch `keep` so it is not the least recently used either way.
        cache.get(&keep.handle);
        cache.insert_new(SecContext::new());
        assert!(cache.get(&old.handle).is_none(), "the expired one went");
        assert!(cache.get(&keep.handle).is_some());
    }
}
