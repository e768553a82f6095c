//! Writes per user: a queue user's commands are bounded to `max_user_writes_per_s` a second,
//! with bursts of twice that, so that one user's script cannot fill the log and the leader's
//! apply queue for everyone (a token bucket per user). Admins and operators are not bounded
//! (they run the cluster, and the benchmarks as admins), nor is a cluster without tokens.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tonic::Status;

use crate::auth::Caller;

/// Users tracked at once; past it, users whose bucket is full again are forgotten first (a
/// full bucket is what a new entry starts with, so forgetting one changes nothing).
const MAX_TRACKED_USERS: usize = 65_536;

/// A bucket per user: how many writes it may still send now, and when that was counted.
#[derive(Default)]
pub struct WriteRates {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl WriteRates {
    /// Takes one write for `who` at `per_s` a second (bursts of `2 * per_s`), or
    /// RESOURCE_EXHAUSTED naming the bound.
    pub fn admit(&self, who: &Caller, per_s: u32) -> Result<(), Status> {
        let Some(user) = bounded_user(who) else { return Ok(()) };
        let (rate, burst) = (f64::from(per_s), 2.0 * f64::from(per_s));
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_TRACKED_USERS && !buckets.contains_key(user) {
            buckets.retain(|_, (left, at)| *left + rate * now.duration_since(*at).as_secs_f64() < burst);
        }
        let (left, at) = buckets.entry(user.to_string()).or_insert((burst, now));
        *left = (*left + rate * now.duration_since(*at).as_secs_f64()).min(burst);
        *at = now;
        if *left < 1.0 {
            return Err(Status::resource_exhausted(format!(
                "user {user} sends writes faster than {per_s} a second (max_user_writes_per_s); slow down and retry"
            )));
        }
        *left -= 1.0;
        Ok(())
    }
}

/// The user whose writes are bounded: a token's, unless it is an admin or an operator.
fn bounded_user(who: &Caller) -> Option<&str> {
    let t = who.token()?;
    let runs_the_cluster = t.has(baton_model::access::Role::Admin) || t.has(baton_model::access::Role::Operator);
    (!runs_the_cluster).then_some(t.spec.user.as_str())
}
