//! Streams per client identity: watch streams (`max_watch_streams_per_client`) and log
//! streams (`max_log_streams_per_client`), so that one user cannot take every slot of a
//! replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic::Status;

use crate::auth::Caller;

/// Open streams of one kind by identity. An identity is removed when its last stream
/// closes, so the map never holds more entries than streams are open (bounded by the
/// replica's own bound on that kind, `max_watch_streams` or `max_log_streams`).
pub struct Watchers {
    open: Mutex<HashMap<String, usize>>,
    /// What a slot is, for the refusal ("watch streams").
    what: &'static str,
    /// The setting that bounds it, for the refusal ("max_watch_streams_per_client").
    setting: &'static str,
}

/// One open stream of an identity; dropping it frees the slot.
pub struct WatcherSlot {
    watchers: Arc<Watchers>,
    who: String,
}

impl Watchers {
    /// Watch streams, bounded by `max_watch_streams_per_client`.
    pub fn watch_streams() -> Watchers {
        Watchers::new("watch streams", "max_watch_streams_per_client")
    }

    /// Log streams read through this replica, bounded by `max_log_streams_per_client`.
    pub fn log_streams() -> Watchers {
        Watchers::new("log streams", "max_log_streams_per_client")
    }

    /// The dashboard's event streams, bounded by `dash::MAX_EVENT_STREAMS_PER_CLIENT`.
    pub fn dashboard_streams() -> Watchers {
        Watchers::new("dashboard event streams", "MAX_EVENT_STREAMS_PER_CLIENT")
    }

    fn new(what: &'static str, setting: &'static str) -> Watchers {
        Watchers { open: Mutex::default(), what, setting }
    }

    /// A slot for `who`, or RESOURCE_EXHAUSTED naming the bound.
    pub fn acquire(self: &Arc<Self>, who: String, max: usize) -> Result<WatcherSlot, Status> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(who.clone()).or_default();
        if *n >= max {
            let (what, setting) = (self.what, self.setting);
            return Err(Status::resource_exhausted(format!(
                "{who} has {n} {what} open on this replica ({setting} {max}); close one first"
            )));
        }
        *n += 1;
        Ok(WatcherSlot { watchers: self.clone(), who })
    }
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        let mut open = self.watchers.open.lock().unwrap_or_else(|p| p.into_inner());
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
