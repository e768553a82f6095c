//! Each host's clock rate. A host's oscillator runs fast or slow by a number of parts per
//! million drawn from the seed, for the whole run (a quartz drifts about 100 ppm). What a
//! host measures as an interval (a lease, a node's silence, the time it waits between beats
//! or cycles) it measures on its own clock; the checker and the history read true time.
//!
//! The timing argument (docs/protocol.md, `baton_proto::lease_fits`) allows two clocks to
//! measure one interval differently by 1 % (`CLOCK_DRIFT_DIVISOR`), so by default every
//! host drifts by at most `DRIFT_PPM` either way: two hosts drifting the most, in opposite
//! ways, part by just under 1 %. A run given more drift than that may break the lease (a
//! test does, to show the drift reaches both sides of it).
//!
//! Wall clocks (the time commands carry) do not drift here: NTP disciplines them, so they
//! stay within their drawn offset; a rate matters over the intervals a host times itself.
//! openraft's own timers (elections, heartbeats) run on true simulated time.

use std::time::Duration;

use baton_proto::CLOCK_DRIFT_DIVISOR;
use baton_rng::SplitMix64;

const MILLION: i64 = 1_000_000;

/// The default bound on each host's drift, either way.
pub const DRIFT_PPM: u64 = 4_900;
// Two hosts at the bound in opposite ways part by less than the timing argument allows:
// (1 + d) / (1 - d) < 1 + 1 / CLOCK_DRIFT_DIVISOR.
const _: () = assert!(
    (MILLION + DRIFT_PPM as i64) * (CLOCK_DRIFT_DIVISOR as i64)
        < (MILLION - DRIFT_PPM as i64) * (CLOCK_DRIFT_DIVISOR as i64 + 1)
);

/// The most a run may let a clock drift: a clock that stops or runs backwards is no clock.
pub const MAX_DRIFT_PPM: u64 = 900_000;

/// A clock's rate: how many parts per million it runs fast (or slow, below 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rate {
    ppm: i64,
}

impl Rate {
    /// # Panics
    /// Past `MAX_DRIFT_PPM` either way (the options are checked before a run).
    pub fn new(ppm: i64) -> Rate {
        assert!(ppm.unsigned_abs() <= MAX_DRIFT_PPM, "a clock drifting {ppm} ppm");
        Rate { ppm }
    }

    /// A rate within `bound_ppm` either way, drawn from `rng`.
    pub fn draw(rng: &mut SplitMix64, bound_ppm: u64) -> Rate {
        let bound_ppm = bound_ppm.min(MAX_DRIFT_PPM);
        Rate::new(rng.below(2 * bound_ppm + 1) as i64 - bound_ppm as i64)
    }

    pub fn ppm(self) -> i64 {
        self.ppm
    }

    /// What this clock has counted after `true_ms` of true time.
    pub fn local_ms(self, true_ms: u64) -> u64 {
        let local = i128::from(true_ms) * i128::from(MILLION + self.ppm) / i128::from(MILLION);
        u64::try_from(local).unwrap_or(u64::MAX)
    }

    /// The true time this clock takes to count `local_ms` (rounded up, so that a wait of
    /// it never ends early on this clock).
    pub fn true_ms(self, local_ms: u64) -> u64 {
        let per = i128::from(MILLION + self.ppm);
        let t = (i128::from(local_ms) * i128::from(MILLION) + per - 1) / per;
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// Now on this clock (inside a host: simulated time since the run began).
    pub fn now_ms(self) -> u64 {
        self.local_ms(crate::now_ms())
    }

    /// A wait of `local_ms` on this clock, in true simulated time.
    pub fn wait(self, local_ms: u64) -> Duration {
        Duration::from_millis(self.true_ms(local_ms))
    }
}

/// The server's leader times its silences and quorum proofs on a `Clock`: in the simulator,
/// the replica's drifting one.
impl baton_server::clock::Clock for Rate {
    fn now_ms(&self) -> u64 {
        Rate::now_ms(*self)
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ppm {
            0 => write!(f, "true"),
            p if p > 0 => write!(f, "{p} ppm fast"),
            p => write!(f, "{} ppm slow", -p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_clock_counts_more_and_a_wait_on_it_takes_less_true_time() {
        let fast = Rate::new(10_000);
        assert_eq!(fast.local_ms(100_000), 101_000);
        assert_eq!(fast.true_ms(101_000), 100_000);
        let slow = Rate::new(-500_000);
        assert_eq!(slow.local_ms(6_000), 3_000);
        assert_eq!(slow.true_ms(3_000), 6_000, "a lease of 3 s on a clock at half speed lasts 6 s");
        assert_eq!(Rate::default().local_ms(1_234), 1_234);
    }

    #[test]
    fn a_wait_never_ends_early_on_the_clock_that_waits() {
        for ppm in [-900_000, -4_900, -1, 0, 1, 4_900, 333_333, 900_000] {
            let r = Rate::new(ppm);
            for local in [0, 1, 7, 400, 3_000, 86_400_000] {
                let t = r.true_ms(local);
                assert!(r.local_ms(t) >= local, "{r}: a wait of {local} ms ended at {}", r.local_ms(t));
                assert!(t == 0 || r.local_ms(t - 1) < local, "{r}: a wait of {local} ms took a millisecond more");
            }
        }
    }

    #[test]
    fn drawn_rates_stay_within_their_bound_and_reach_both_sides() {
        let mut rng = SplitMix64::new(7);
        let rates: Vec<i64> = (0..1_000).map(|_| Rate::draw(&mut rng, DRIFT_PPM).ppm()).collect();
        assert!(rates.iter().all(|p| p.unsigned_abs() <= DRIFT_PPM));
        assert!(rates.iter().any(|p| *p > 0) && rates.iter().any(|p| *p < 0));
    }

    #[test]
    fn names_say_which_way_a_clock_drifts() {
        assert_eq!(Rate::new(25).to_string(), "25 ppm fast");
        assert_eq!(Rate::new(-25).to_string(), "25 ppm slow");
        assert_eq!(Rate::new(0).to_string(), "true");
    }
}
