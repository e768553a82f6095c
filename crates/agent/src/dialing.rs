//! Which replica an agent dials next, and how long it waits first: the replicas in turn, a
//! follower's hint at once, and a back-off only once every replica has failed in a row.
//!
//! When a leader dies, the replicas that remain name it as leader until they elect
//! another, and the dead one refuses connections: most dials fail for an election's
//! length. Backing off after each failure, as before, left an agent up to three back-offs
//! (a second each at most) from the new leader once it was elected; the tail of a failover
//! at 1,000 nodes was 1.8 s past the new leader's first directive. Backing off once per
//! round of the replicas leaves it at most one.

use crate::backoff::Backoff;
use crate::limits::MAX_HINTS_IN_A_ROW;

/// How one attach ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tried {
    /// A stream was served, then lost.
    Served,
    /// A follower named the leader.
    Redirect(String),
    /// Refused, unreachable, or no answer.
    Failed,
}

#[derive(Debug, Clone)]
pub struct Dialing {
    servers: Vec<String>,
    next: usize,
    hint: Option<String>,
    hints_in_a_row: u32,
    /// Dials failed since the last success or back-off.
    failed_in_a_row: usize,
    backoff: Backoff,
}

impl Dialing {
    /// Dials `servers` in turn from the `first`-th (agents that start together spread
    /// their first dials), drawing back-offs from `seed`.
    pub fn new(servers: Vec<String>, first: usize, seed: u64) -> Dialing {
        assert!(!servers.is_empty(), "an agent needs at least one replica to dial");
        Dialing { servers, next: first, hint: None, hints_in_a_row: 0, failed_in_a_row: 0, backoff: Backoff::new(seed) }
    }

    /// The replica to dial now: the last hint, else the next in turn.
    pub fn next_addr(&mut self) -> String {
        if let Some(h) = self.hint.take() {
            return h;
        }
        let addr = self.servers[self.next % self.servers.len()].clone();
        self.next = self.next.wrapping_add(1);
        addr
    }

    /// How long to wait, in ms, before the next dial after `tried` (0: at once).
    pub fn wait_ms(&mut self, tried: Tried) -> u64 {
        match tried {
            Tried::Served => {
                (self.hints_in_a_row, self.failed_in_a_row) = (0, 0);
                self.backoff.lost();
                return self.backoff.next_delay_ms();
            }
            Tried::Redirect(leader) => {
                self.hint = Some(leader);
                self.hints_in_a_row += 1;
                // Following a fresh hint is no failure; stale hints passed around must not spin.
                if self.hints_in_a_row <= MAX_HINTS_IN_A_ROW {
                    return 0;
                }
            }
            Tried::Failed => {}
        }
        self.hints_in_a_row = 0;
        self.failed_in_a_row += 1;
        if self.failed_in_a_row < self.servers.len() {
            return 0;
        }
        self.failed_in_a_row = 0;
        self.backoff.next_delay_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{MAX_BACKOFF_MS, MIN_BACKOFF_MS, REATTACH_SPREAD_MS};

    fn three() -> Dialing {
        Dialing::new(vec!["a".into(), "b".into(), "c".into()], 1, 7)
    }

    #[test]
    fn every_replica_is_tried_before_a_back_off() {
        let mut d = three();
        let mut dialed = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..6 {
            dialed.push(d.next_addr());
            waits.push(d.wait_ms(Tried::Failed));
        }
        assert_eq!(dialed, ["b", "c", "a", "b", "c", "a"]);
        assert_eq!(waits[..2], [0, 0]);
        assert!((MIN_BACKOFF_MS / 2..=MIN_BACKOFF_MS).contains(&waits[2]), "{waits:?}");
        assert_eq!(waits[3..5], [0, 0]);
        assert!((MIN_BACKOFF_MS..=2 * MIN_BACKOFF_MS).contains(&waits[5]), "the step doubles: {waits:?}");
    }

    #[test]
    fn a_hint_is_followed_at_once_a_few_times_in_a_row() {
        let mut d = three();
        for _ in 0..MAX_HINTS_IN_A_ROW {
            d.next_addr();
            assert_eq!(d.wait_ms(Tried::Redirect("c".into())), 0);
            assert_eq!(d.next_addr(), "c");
        }
        // One hint too many counts as a failure, and its hint is kept for the next dial.
        assert_eq!(d.wait_ms(Tried::Redirect("c".into())), 0, "the first failure of a round goes on at once");
        assert_eq!(d.next_addr(), "c");
        // A dead leader that the followers still name: its refusal is one more failure.
        assert_eq!(d.wait_ms(Tried::Failed), 0);
        assert!(d.wait_ms(Tried::Failed) > 0, "three failures in a row: a back-off");
    }

    #[test]
    fn a_lost_stream_waits_within_the_spread_and_starts_the_round_over() {
        let mut d = three();
        d.wait_ms(Tried::Failed);
        d.wait_ms(Tried::Failed);
        let spread = d.wait_ms(Tried::Served);
        assert!(spread <= REATTACH_SPREAD_MS, "{spread}");
        assert_eq!(d.wait_ms(Tried::Failed), 0, "a new round after a loss");
        assert_eq!(d.wait_ms(Tried::Failed), 0);
        assert!(d.wait_ms(Tried::Failed) <= MAX_BACKOFF_MS);
    }

    #[test]
    fn a_lone_replica_backs_off_after_each_failure() {
        let mut d = Dialing::new(vec!["a".into()], 0, 1);
        assert_eq!(d.next_addr(), "a");
        assert!(d.wait_ms(Tried::Failed) >= MIN_BACKOFF_MS / 2);
        assert!(d.wait_ms(Tried::Failed) >= MIN_BACKOFF_MS);
    }
}
