//! Watch streams per client identity (`max_watch_streams_per_client`), so that one user
//! cannot take every watch slot of a replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic::Status;

use crate::auth::Caller;

/// Open watch streams by identity. An identity is removed when its last stream closes, so
/// the map never holds more entries than streams are open (bounded by `max_watch_streams`).
#[derive(Default)]
pub struct Watchers(Mutex<HashMap<String, usize>>);

/// One open stream of an identity; dropping it frees the slot.
pub struct WatcherSlot {
    watchers: Arc<Watchers>,
    who: String,
}

impl Watchers {
    /// A slot for `who`, or RESOURCE_EXHAUSTED naming the bound.
    pub fn acquire(self: &Arc<Self>, who: String, max: usize) -> Result<WatcherSlot, Status> {
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(who.clone()).or_default();
        if *n >= max {
            return Err(Status::resource_exhausted(format!(
                "{who} has {n} watch streams open on this replica (max_watch_streams_per_client {max}); close one first"
            )));
        }
        *n += 1;
        Ok(WatcherSlot { watchers: self.clone(), who })
    }
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        let mut open = self.watchers.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.who);
            }
        }
    }
}

/// Whom the bound counts: the token's user; without tokens, the certificate's name, or one
/// shared identity on plain TCP.
pub fn identity(who: &Caller, peer: Option<&baton_proto::tls::PeerId>) -> String {
    match (who.token(), peer) {
        (Some(t), _) => format!("user {}", t.spec.user),
        (None, Some(p)) => format!("certificate {p}"),
        (None, None) => "the anonymous client".to_string(),
    }
}
