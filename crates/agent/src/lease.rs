//! The agent's lease: how long it may keep running its replicas without hearing from a
//! leader that proved its leadership. Pure: times are milliseconds on the agent's own
//! monotonic clock, passed in by the caller.
//!
//! A lease is counted from when the agent SENT the report whose reply granted it, not from
//! when the reply arrived. The leader grants `lease_ms` only after a quorum confirmed it
//! leads, which happened after the report was sent; so however long the request and the
//! reply were delayed, the lease ends no later than `lease_ms` after the leader's proof, on
//! the agent's clock. Counting from the reply would stretch the lease by the reply's delay.

/// The lease an agent holds, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lease {
    /// Monotonic ms at which it ends; `None` before the first grant.
    expires_at_ms: Option<u64>,
    /// The newest leader state a grant came from (see [`Lease::floor`]).
    floor: Floor,
    /// Grants that found the lease run out (see [`Lease::renew`]).
    lapses: u64,
    /// When the lease ran out before the newest lapse's renewal (monotonic ms): how late
    /// whoever acts on that lapse is (`Lease::ran_out_at_ms`).
    lapsed_at_ms: Option<u64>,
}

/// How new a leader's state is: its term, then how many commands it had applied
/// (`ReportReply.state_index`, `Directive.state_index`). Ordered term first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Floor {
    pub term: u64,
    pub state_index: u64,
}

/// What the lease says about the replicas at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// No lease was ever granted (the agent just started): replicas it re-adopted keep
    /// running until a leader directs otherwise or the first lease runs out.
    NeverGranted,
    /// Held for this many more ms.
    Held { left_ms: u64 },
    /// Ran out this many ms ago: every replica must be stopped.
    Expired { ago_ms: u64 },
}

impl Lease {
    /// A lease that ends at `expires_at_ms` (one a previous run of the agent held).
    pub fn until(expires_at_ms: u64) -> Lease {
        Lease { expires_at_ms: Some(expires_at_ms), floor: Floor::default(), lapses: 0, lapsed_at_ms: None }
    }

    /// Records that a grant came from a leader whose state was `from` when it granted it.
    /// Never lowered: an older reply arriving late says nothing newer.
    pub fn granted_from(&mut self, from: Floor) {
        self.floor = self.floor.max(from);
    }

    /// The newest leader state a grant came from. An agent whose lease ran out obeys, once
    /// it is renewed, no directive built from an older state: a leader that declared the
    /// node lost has placed its jobs elsewhere since, and a directive sent before (read
    /// off the connection after a stall) still asks for them here.
    pub fn floor(&self) -> Floor {
        self.floor
    }

    /// Records a reply to a report sent at `sent_at_ms` that granted `lease_ms` (0: none).
    /// A grant never shortens a lease already held: a delayed reply to an older report must
    /// not take back time that a newer one granted.
    pub fn grant(&mut self, sent_at_ms: u64, lease_ms: u64) {
        if lease_ms == 0 {
            return;
        }
        let end = sent_at_ms.saturating_add(lease_ms);
        self.expires_at_ms = Some(self.expires_at_ms.map_or(end, |cur| cur.max(end)));
    }

    /// [`Lease::grant`], received at `now_ms`: a grant that finds the lease run out counts
    /// a lapse. Why: whoever acts on an expiry (the supervisor, on its tick) may look only
    /// after the renewal, and must still act on the lapse it did not see as on an expiry.
    pub fn renew(&mut self, sent_at_ms: u64, lease_ms: u64, now_ms: u64) {
        if lease_ms > 0 && self.expired(now_ms) {
            self.lapses += 1;
            self.lapsed_at_ms = self.expires_at_ms;
        }
        self.grant(sent_at_ms, lease_ms);
    }

    /// When the lease last ran out, as seen at `now_ms`: its end while it is run out, else
    /// the end a renewal found passed (its newest lapse); `None` while held and never lapsed.
    /// A stop for the lease must end by then plus the slack and grace of the timing argument,
    /// whoever acts late (an agent stopped or frozen, its renewal come first).
    pub fn ran_out_at_ms(&self, now_ms: u64) -> Option<u64> {
        match self.standing(now_ms) {
            Standing::Expired { ago_ms } => Some(now_ms - ago_ms),
            _ => self.lapsed_at_ms,
        }
    }

    /// How many times a renewal found the lease run out.
    pub fn lapses(&self) -> u64 {
        self.lapses
    }

    /// Where the lease stands at `now_ms`.
    pub fn standing(&self, now_ms: u64) -> Standing {
        match self.expires_at_ms {
            None => Standing::NeverGranted,
            Some(end) if now_ms < end => Standing::Held { left_ms: end - now_ms },
            Some(end) => Standing::Expired { ago_ms: now_ms - end },
        }
    }

    /// Whether the lease was granted once and has run out by `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        matches!(self.standing(now_ms), Standing::Expired { .. })
    }

    /// When it ends, on the monotonic clock the grants were counted on.
    pub fn expires_at_ms(&self) -> Option<u64> {
        self.expires_at_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Grants as (sent_at, lease_ms), the time asked about, the standing expected.
    type Case = (&'static [(u64, u64)], u64, Standing);

    #[test]
    fn table() {
        let cases: &[Case] = &[
            (&[], 0, Standing::NeverGranted),
            (&[], 1_000_000, Standing::NeverGranted),
            (&[(0, 0)], 10, Standing::NeverGranted),
            (&[(100, 2_000)], 100, Standing::Held { left_ms: 2_000 }),
            (&[(100, 2_000)], 2_099, Standing::Held { left_ms: 1 }),
            (&[(100, 2_000)], 2_100, Standing::Expired { ago_ms: 0 }),
            (&[(100, 2_000)], 5_000, Standing::Expired { ago_ms: 2_900 }),
            // A later report renews.
            (&[(100, 2_000), (1_000, 2_000)], 2_500, Standing::Held { left_ms: 500 }),
            // A delayed reply to an older report does not shorten it.
            (&[(1_000, 2_000), (100, 2_000)], 2_500, Standing::Held { left_ms: 500 }),
            // A reply without a lease neither renews nor shortens.
            (&[(100, 2_000), (1_500, 0)], 2_100, Standing::Expired { ago_ms: 0 }),
            (&[(u64::MAX - 1, 2_000)], u64::MAX - 1, Standing::Held { left_ms: 1 }),
        ];
        for (grants, now, want) in cases {
            let mut l = Lease::default();
            for (sent, ms) in *grants {
                l.grant(*sent, *ms);
            }
            assert_eq!(l.standing(*now), *want, "grants {grants:?} at {now}");
        }
    }

    #[test]
    fn the_floor_is_the_newest_state_granted_from_term_first() {
        let mut l = Lease::default();
        assert_eq!(l.floor(), Floor::default());
        for (term, state_index) in [(1, 9), (1, 4), (2, 3), (1, 50)] {
            l.granted_from(Floor { term, state_index });
        }
        assert_eq!(l.floor(), Floor { term: 2, state_index: 3 });
    }

    #[test]
    fn a_renewal_that_finds_the_lease_run_out_counts_a_lapse() {
        let mut l = Lease::default();
        l.renew(0, 2_000, 10);
        assert_eq!(l.lapses(), 0, "a first grant ends no lapse");
        l.renew(1_000, 2_000, 1_999);
        assert_eq!(l.lapses(), 0, "renewed while held");
        // Runs out at 3,000; a reply to a report sent before that arrives after it.
        l.renew(2_900, 2_000, 3_000);
        assert_eq!((l.lapses(), l.standing(3_000)), (1, Standing::Held { left_ms: 1_900 }));
        l.renew(6_000, 0, 7_000);
        assert_eq!(l.lapses(), 1, "a reply that grants nothing renews nothing");
        l.renew(7_000, 2_000, 7_000);
        assert_eq!(l.lapses(), 2);
    }

    /// Issue 31, a whole node frozen: an agent thawed after its lease ran out may find it
    /// renewed before it looks, and must still know how long ago it ran out.
    #[test]
    fn the_lease_says_when_it_ran_out_also_once_renewed() {
        let mut l = Lease::default();
        assert_eq!(l.ran_out_at_ms(5), None, "never granted");
        l.renew(0, 2_000, 10);
        assert_eq!(l.ran_out_at_ms(1_000), None, "held");
        assert_eq!(l.ran_out_at_ms(9_000), Some(2_000), "run out");
        l.renew(9_000, 2_000, 9_500);
        assert_eq!(l.ran_out_at_ms(9_600), Some(2_000), "renewed: the lapse it ended");
        l.renew(12_000, 2_000, 13_000);
        assert_eq!(l.ran_out_at_ms(13_100), Some(11_000), "the newest lapse");
    }

    proptest! {
        /// The lease ends exactly at the latest sent time plus its grant, whatever order
        /// replies arrive in: never later (safety), never earlier (no needless stops).
        #[test]
        fn ends_at_the_latest_grant(grants in proptest::collection::vec((0u64..1_000_000, 0u64..10_000), 0..20)) {
            let mut l = Lease::default();
            for (sent, ms) in &grants {
                l.grant(*sent, *ms);
            }
            let want = grants.iter().filter(|(_, ms)| *ms > 0).map(|(s, ms)| s + ms).max();
            prop_assert_eq!(l.expires_at_ms(), want);
        }

        /// Held strictly before the end, expired from it on; the two add up.
        #[test]
        fn held_then_expired(sent in 0u64..1_000_000, ms in 1u64..100_000, now in 0u64..2_000_000) {
            let mut l = Lease::default();
            l.grant(sent, ms);
            match l.standing(now) {
                Standing::Held { left_ms } => prop_assert_eq!(now + left_ms, sent + ms),
                Standing::Expired { ago_ms } => prop_assert_eq!(now - ago_ms, sent + ms),
                Standing::NeverGranted => prop_assert!(false, "granted"),
            }
            prop_assert_eq!(l.expired(now), now >= sent + ms);
        }
    }
}
