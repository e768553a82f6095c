//! How long an agent waits before dialing a replica again. When a leader dies, every agent
//! loses its stream in the same instant; had they all waited the same 50, 100, 200 ms, they
//! would all dial the new leader in the same instant too, thousands of attaches (each
//! committing a node registration) at once. So the waits are jittered: the first dial after
//! a lost stream is spread uniformly over [`REATTACH_SPREAD_MS`], and each later one waits
//! half its step plus a random share of the other half ("equal jitter"), the step doubling
//! from [`MIN_BACKOFF_MS`] up to [`MAX_BACKOFF_MS`]. Each agent draws from its own seed.

use baton_rng::SplitMix64;

use crate::limits::{MAX_BACKOFF_MS, MIN_BACKOFF_MS, REATTACH_SPREAD_MS};

/// The delays between one agent's attach attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    step_ms: u64,
    /// True after a stream was lost: the next wait is spread over the whole window.
    after_loss: bool,
    rng: SplitMix64,
}

impl Backoff {
    /// A backoff whose random draws come from `seed` (see [`seed_for`]).
    pub fn new(seed: u64) -> Backoff {
        Backoff { step_ms: MIN_BACKOFF_MS, after_loss: false, rng: SplitMix64::new(seed) }
    }

    /// A stream that was served ended: the next wait spreads this agent's reattach.
    pub fn lost(&mut self) {
        self.step_ms = MIN_BACKOFF_MS;
        self.after_loss = true;
    }

    /// The wait before the next attempt, in ms; each call is one more failure.
    pub fn next_delay_ms(&mut self) -> u64 {
        let delay_ms = if std::mem::take(&mut self.after_loss) {
            self.rng.below(REATTACH_SPREAD_MS + 1)
        } else {
            let half = self.step_ms / 2;
            half + self.rng.below(self.step_ms - half + 1)
        };
        self.step_ms = (self.step_ms * 2).min(MAX_BACKOFF_MS);
        debug_assert!(delay_ms <= MAX_BACKOFF_MS.max(REATTACH_SPREAD_MS));
        delay_ms
    }
}

/// A seed that differs between agents and between runs of one agent: the node's name, the
/// process id and the time of day. Agents that restart together on identical hosts still
/// draw apart by their names.
pub fn seed_for(node: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(node.as_bytes());
    h.write_u32(std::process::id());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.write_u128(now.as_nanos());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The delays 1,000 agents draw for the same sequence of events, with their own seeds.
    fn delays(events: &[Event]) -> Vec<Vec<u64>> {
        (0..1_000u64)
            .map(|seed| {
                let mut b = Backoff::new(seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
                events
                    .iter()
                    .filter_map(|e| match e {
                        Event::Lost => {
                            b.lost();
                            None
                        }
                        Event::Failed => Some(b.next_delay_ms()),
                    })
                    .collect()
            })
            .collect()
    }

    #[derive(Clone, Copy)]
    enum Event {
        Lost,
        Failed,
    }

    /// How many agents dial in the busiest 10 ms bucket of one attempt.
    fn busiest_bucket(ds: &[u64]) -> usize {
        let mut buckets = std::collections::BTreeMap::new();
        for d in ds {
            *buckets.entry(d / 10).or_insert(0usize) += 1;
        }
        buckets.values().copied().max().unwrap_or(0)
    }

    #[test]
    fn agents_that_lose_their_leader_together_do_not_dial_again_together() {
        let all = delays(&[Event::Lost, Event::Failed, Event::Failed, Event::Failed]);
        for attempt in 0..3 {
            let ds: Vec<u64> = all.iter().map(|d| d[attempt]).collect();
            // Spread evenly, the busiest 10 ms of the first wait (0-250 ms) holds about 40 of
            // 1,000 agents; the later ones (half a step fixed) at most about 200 and 100.
            let limit = [80, 300, 160][attempt];
            assert!(busiest_bucket(&ds) <= limit, "attempt {attempt}: {} agents in one 10 ms", busiest_bucket(&ds));
        }
    }

    #[test]
    fn delays_stay_within_their_step_and_the_cap() {
        for d in delays(&[Event::Failed; 12]) {
            let mut step = MIN_BACKOFF_MS;
            for ms in d {
                assert!((step / 2..=step).contains(&ms), "{ms} ms for a {step} ms step");
                step = (step * 2).min(MAX_BACKOFF_MS);
            }
        }
        for d in delays(&[Event::Failed, Event::Failed, Event::Lost, Event::Failed, Event::Failed]) {
            assert!(d[2] <= REATTACH_SPREAD_MS, "after a loss the wait is within the spread: {}", d[2]);
            assert!((MIN_BACKOFF_MS..=2 * MIN_BACKOFF_MS).contains(&d[3]), "then the steps start over: {}", d[3]);
        }
    }

    #[test]
    fn one_seed_gives_the_same_delays() {
        let mut a = Backoff::new(7);
        let mut b = Backoff::new(7);
        let da: Vec<u64> = (0..8).map(|_| a.next_delay_ms()).collect();
        let db: Vec<u64> = (0..8).map(|_| b.next_delay_ms()).collect();
        assert_eq!(da, db);
    }
}
