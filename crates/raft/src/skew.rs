//! How far this replica's wall clock is from the other voters', learned from their replies
//! (`RaftReply::now_ms`), so that a leader whose clock runs ahead of the quorum's does not
//! move the replicated clock with it. The replicated clock never goes back, so one leader a
//! few days ahead would end every job's time limit and expire every reservation for good.
//!
//! Each reply to a call of this replica's is a sample: the peer's clock minus the midpoint of
//! the call on this one's (a reply that took long is not used). The quorum's offset is the
//! median over the voters, this replica counting 0, once a majority of them has a fresh
//! sample. It stamps nothing later than the quorum's time plus `MAX_CLOCK_SKEW_MS`, judged
//! when a command is proposed (a stamp read before a step back of this replica's clock is
//! held too); a clock within that bound stamps its own time. A replica behind the quorum
//! changes nothing: the replicated clock takes the later stamp.
//!
//! A replica without a majority of samples (it restarted and leads again from its own vote,
//! its peers answer too slowly, ...) has no quorum to compare with. It stamps nothing later
//! than the replicated clock as it first saw it plus the monotonic time since ([`Anchor`]):
//! a clock stepped days ahead just before such a lead would otherwise move the replicated
//! clock with it. A peer of an older build, which does not say its time, vouches for this
//! replica's clock (as before its samples existed).
//!
//! A sample remembers this replica's wall and monotonic clocks when it was taken, so that a
//! step of this replica's own wall clock since (NTP, an operator) is seen at once: read as it
//! was, a sample from before the step would say the quorum agrees with the stepped clock, and
//! the first stamps after a step two days ahead went out two days ahead (the simulator's
//! `clock-jump` fault, within 60 ms of the step). Read through the step, it would assume the
//! peer's clock did not step too, and a peer sampled while its clock was days ahead (set
//! right since) vouched for this replica's own step days ahead (seed 25 of 10 minutes). So a
//! sample from before a step of more than the bound no longer counts: until fresh replies
//! come, a heartbeat apart, the replica has no majority of samples, and [`Anchor`] bounds it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

// tokio's clock: the monotonic clock, and the simulator's when it pauses time.
use tokio::time::Instant;

use crate::types::NodeId;

/// How far ahead of the quorum's clock a replica's may run before its stamps are held back:
/// well above what NTP leaves between hosts, well below a time limit.
pub const MAX_CLOCK_SKEW_MS: u64 = 2_000;
/// A sample older than this is not used (a peer's clock may have been corrected since).
const SAMPLE_TTL: Duration = Duration::from_secs(30);
/// A reply that took longer than this is not sampled: its midpoint says too little.
const MAX_SAMPLE_RTT_MS: u64 = 500;

/// One peer's clock as a reply said it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Its clock minus this replica's, when taken.
    offset_ms: i64,
    /// This replica's wall clock then (the call's midpoint).
    wall_ms: u64,
    /// This replica's monotonic clock then.
    at: Instant,
    /// From a peer that does not say its time: offset 0 whatever this replica's clock does.
    vouches_for_ours: bool,
}

impl Sample {
    /// How far this replica's wall clock, reading `wall_ms` at `now`, moved beyond its
    /// monotonic clock since the sample: what it stepped (or slewed) by.
    fn stepped_ms(&self, wall_ms: u64, now: Instant) -> i64 {
        let wall_moved = wall_ms as i64 - self.wall_ms as i64;
        let time_moved = now.saturating_duration_since(self.at).as_millis() as i64;
        wall_moved - time_moved
    }

    /// The offset now, this replica's wall clock reading `wall_ms` at `now`.
    fn offset_at(&self, wall_ms: u64, now: Instant) -> i64 {
        if self.vouches_for_ours {
            return 0;
        }
        self.offset_ms - self.stepped_ms(wall_ms, now)
    }

    /// Whether the sample still counts: fresh, and taken since this replica's wall clock last
    /// stepped by more than the bound. Read through a step, an older sample assumes the peer's
    /// clock did not step too; a peer sampled while a fault had put it days ahead, and set
    /// right since, then vouches for this replica's own step days ahead (simulator seed 25 of
    /// 10 minutes, stop 75). Until fresh replies come (a heartbeat apart), `Anchor` bounds
    /// the stamps.
    fn counts_at(&self, wall_ms: u64, now: Instant) -> bool {
        let fresh = now.saturating_duration_since(self.at) < SAMPLE_TTL;
        fresh && (self.vouches_for_ours || self.stepped_ms(wall_ms, now).unsigned_abs() <= MAX_CLOCK_SKEW_MS)
    }
}

/// The newest sample of each peer's clock offset (its clock minus this one's).
#[derive(Default)]
pub struct ClockSkew {
    samples: Mutex<BTreeMap<NodeId, Sample>>,
}

impl ClockSkew {
    /// A reply from `peer` saying `peer_now_ms`, to a call sent at `sent_ms` and answered at
    /// `received_ms` on this replica's clock.
    pub fn note(&self, peer: NodeId, sent_ms: u64, received_ms: u64, peer_now_ms: u64) {
        self.note_at(peer, sent_ms, received_ms, peer_now_ms, Instant::now());
    }

    fn note_at(&self, peer: NodeId, sent_ms: u64, received_ms: u64, peer_now_ms: u64, at: Instant) {
        if received_ms < sent_ms || received_ms - sent_ms > MAX_SAMPLE_RTT_MS {
            return;
        }
        let mid = sent_ms + (received_ms - sent_ms) / 2;
        let sample = if peer_now_ms == 0 {
            // A replica of an older build, which does not say its time: it vouches for this
            // replica's clock, whatever that reads (what every replica did before samples).
            Sample { offset_ms: 0, wall_ms: mid, at, vouches_for_ours: true }
        } else {
            Sample { offset_ms: peer_now_ms as i64 - mid as i64, wall_ms: mid, at, vouches_for_ours: false }
        };
        self.samples.lock().unwrap_or_else(|p| p.into_inner()).insert(peer, sample);
    }

    /// The quorum's clock minus this replica's, whose wall clock reads `local_ms`: the median
    /// over `voters` (this replica, if a voter, counting 0) with a fresh sample, once a
    /// majority has one. Of two middle values the one nearer 0, if they agree within the
    /// bound; `None` if they do not (this replica and a single peer that disagree).
    pub fn quorum_offset_ms(&self, self_id: NodeId, voters: &BTreeSet<NodeId>, local_ms: u64) -> Option<i64> {
        self.quorum_offset_at(self_id, voters, local_ms, Instant::now())
    }

    fn quorum_offset_at(&self, self_id: NodeId, voters: &BTreeSet<NodeId>, local_ms: u64, now: Instant) -> Option<i64> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let mut offsets: Vec<i64> = voters
            .iter()
            .filter_map(|v| match samples.get(v) {
                _ if *v == self_id => Some(0),
                Some(s) if s.counts_at(local_ms, now) => Some(s.offset_at(local_ms, now)),
                _ => None,
            })
            .collect();
        if offsets.len() * 2 <= voters.len() {
            return None;
        }
        offsets.sort_unstable();
        let n = offsets.len();
        let (low, high) = (offsets[(n - 1) / 2], offsets[n / 2]);
        // Two middle values apart (this replica and one peer of three, disagreeing): no
        // majority agrees, and either clock may be the wrong one.
        if high - low > MAX_CLOCK_SKEW_MS as i64 {
            return None;
        }
        Some(if low.abs() <= high.abs() { low } else { high })
    }
}

/// The replicated clock as this replica first saw it, and when on its monotonic clock: the
/// latest time it may stamp without a majority of samples is that reading plus the time
/// since. A newer reading replaces it only when it is later than that projection (another
/// leader stamped the replicated clock further), so stamps held to it never lift it beyond
/// the pace of the monotonic clock: no runaway, however often it is read.
#[derive(Default)]
pub struct Anchor {
    seen: Mutex<Option<(u64, Instant)>>,
}

impl Anchor {
    /// The latest time this replica may stamp without samples, the replicated clock reading
    /// `replicated_ms` now.
    pub fn ceiling_ms(&self, replicated_ms: u64) -> u64 {
        self.ceiling_at(replicated_ms, Instant::now())
    }

    fn ceiling_at(&self, replicated_ms: u64, now: Instant) -> u64 {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let projected = seen.map(|(ms, at)| ms + now.saturating_duration_since(at).as_millis() as u64);
        match projected {
            Some(p) if p >= replicated_ms => p,
            _ => {
                *seen = Some((replicated_ms, now));
                replicated_ms
            }
        }
    }
}

/// The latest time a replica may stamp, its clock reading `local_ms` at `now`, and whether
/// the other voters' clocks set it: the quorum's time plus the bound once a majority's
/// samples count, else the replicated clock (read by `replicated_ms`, only then) as `anchor`
/// first saw it plus the time since.
pub fn stamp_ceiling_at(
    skew: &ClockSkew,
    anchor: &Anchor,
    self_id: NodeId,
    voters: &BTreeSet<NodeId>,
    local_ms: u64,
    replicated_ms: impl FnOnce() -> u64,
    now: Instant,
) -> (u64, bool) {
    match skew.quorum_offset_at(self_id, voters, local_ms, now) {
        Some(offset) => (ceiling_ms(local_ms, offset), true),
        None => (anchor.ceiling_at(replicated_ms(), now), false),
    }
}

/// The latest time this replica may stamp, its clock reading `local_ms` and the quorum's
/// being `offset_ms` from it: the quorum's time plus the bound.
/// A replica whose clock agrees with the quorum's gets a ceiling above its own time, which
/// holds back only a stamp read from its clock before a step back (an NTP correction of a
/// clock that ran days ahead, between a command's stamp and its proposal): a chaos run's
/// leader stamped placements a day ahead that way, once its clock was stepped back.
pub fn ceiling_ms(local_ms: u64, offset_ms: i64) -> u64 {
    (local_ms as i64 + offset_ms).max(0) as u64 + MAX_CLOCK_SKEW_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voters(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    const DAY_MS: u64 = 86_400_000;

    #[test]
    fn a_replica_days_ahead_of_two_peers_is_held_to_their_time() {
        let skew = ClockSkew::default();
        let local = 10 * DAY_MS;
        skew.note(2, local, local + 10, local - 2 * DAY_MS);
        skew.note(3, local, local + 10, local - 2 * DAY_MS + 500);
        let offset = skew.quorum_offset_ms(1, &voters(&[1, 2, 3]), local);
        let ceiling = ceiling_ms(local, offset.expect("a quorum"));
        assert!(ceiling.abs_diff(local - 2 * DAY_MS) <= MAX_CLOCK_SKEW_MS + 1_000, "{ceiling}");
    }

    /// The peers agreed with this replica; then its wall clock stepped two days ahead, and
    /// no reply came since. The samples taken before the step must hold it back at once.
    #[test]
    fn a_step_of_this_replicas_clock_after_the_samples_is_held_back_at_once() {
        let skew = ClockSkew::default();
        let (local, then) = (10 * DAY_MS, Instant::now());
        skew.note_at(2, local, local + 10, local + 5, then);
        skew.note_at(3, local, local + 10, local + 5, then);
        let later = then + Duration::from_millis(40);
        let stepped = local + 40 + 2 * DAY_MS;
        // The samples from before the step no longer count; the anchor holds the stamps to
        // the replicated clock (which followed the quorum's time) and the time since.
        let anchor = Anchor::default();
        let _ = anchor.ceiling_at(local, then);
        let (ceiling, by_samples) =
            stamp_ceiling_at(&skew, &anchor, 1, &voters(&[1, 2, 3]), stepped, || local + 20, later);
        assert!(!by_samples);
        assert!(ceiling.abs_diff(local + 40) <= MAX_CLOCK_SKEW_MS + 10, "{ceiling}");
        // Without a step, time passing moves nothing: its own time is within the ceiling.
        let offset = skew.quorum_offset_at(1, &voters(&[1, 2, 3]), local + 40, later);
        assert!(ceiling_ms(local + 40, offset.expect("a quorum")) >= local + 40);
    }

    /// A peer sampled while a fault had put its clock two days ahead (set right since, while
    /// it was cut off), then this replica's own clock steps two days ahead: read through the
    /// step, the old sample agreed with the stepped clock and outvoted the peer that did not,
    /// and the leader stamped two days ahead (simulator seed 25 of 10 minutes, stop 75).
    #[test]
    fn a_peers_sample_from_before_this_replicas_step_does_not_vouch_for_it() {
        let skew = ClockSkew::default();
        let (local, then) = (10 * DAY_MS, Instant::now());
        skew.note_at(3, local, local + 10, local + 2 * DAY_MS, then);
        skew.note_at(2, local, local + 10, local + 5, then);
        let later = then + Duration::from_millis(11_000);
        let stepped = local + 11_000 + 2 * DAY_MS;
        let offset = skew.quorum_offset_at(1, &voters(&[1, 2, 3]), stepped, later);
        assert!(offset.is_none_or(|o| o < -(DAY_MS as i64)), "the quorum vouches for the step: {offset:?}");
        // Fresh replies after the step say where the quorum stands.
        skew.note_at(2, stepped, stepped + 10, local + 11_005, later);
        skew.note_at(3, stepped, stepped + 10, local + 11_005, later);
        let offset = skew.quorum_offset_at(1, &voters(&[1, 2, 3]), stepped, later);
        let ceiling = ceiling_ms(stepped, offset.expect("a quorum"));
        assert!(ceiling.abs_diff(local + 11_000) <= MAX_CLOCK_SKEW_MS + 10, "{ceiling}");
    }

    /// Issue 31, found by the chaos harness's leader clock jumps: samples taken while this
    /// replica's clock ran two days ahead, then the clock stepped back to the quorum's. A
    /// command stamped just before the step back was proposed just after it: the quorum then
    /// agreed with the clock read at proposal, and the stamp went out two days ahead (the
    /// replicated clock never comes back). The ceiling holds it to the quorum's time.
    #[test]
    fn a_stamp_read_before_this_replicas_clock_stepped_back_is_held_to_the_quorums_time() {
        let skew = ClockSkew::default();
        let (true_ms, then) = (10 * DAY_MS, Instant::now());
        let ahead = true_ms + 2 * DAY_MS;
        skew.note_at(2, ahead, ahead + 10, true_ms + 5, then);
        skew.note_at(3, ahead, ahead + 10, true_ms + 5, then);
        let stamp_ms = ahead + 30;
        let later = then + Duration::from_millis(40);
        // The samples were taken before the step back: the anchor bounds the stamps until
        // fresh ones come, to the replicated clock (held to the quorum's time all along).
        let anchor = Anchor::default();
        let (ceiling, by_samples) =
            stamp_ceiling_at(&skew, &anchor, 1, &voters(&[1, 2, 3]), true_ms + 40, || true_ms + 40, later);
        assert!(!by_samples);
        assert!(stamp_ms > ceiling, "the stamp from before the step back passes: {stamp_ms} <= {ceiling}");
        assert!(ceiling.abs_diff(true_ms + 40) <= MAX_CLOCK_SKEW_MS + 10, "{ceiling}");
        // Fresh replies: the clock agrees with the quorum again, and still holds the stamp.
        skew.note_at(2, true_ms + 40, true_ms + 50, true_ms + 45, later);
        let offset = skew.quorum_offset_at(1, &voters(&[1, 2, 3]), true_ms + 50, later);
        assert!(offset.expect("a quorum").abs() <= 10, "{offset:?}");
        assert!(stamp_ms > ceiling_ms(true_ms + 50, offset.expect("a quorum")));
    }

    #[test]
    fn one_peer_far_off_does_not_move_the_median() {
        let skew = ClockSkew::default();
        skew.note(2, 1_000, 1_010, 1_005 + 3 * DAY_MS);
        skew.note(3, 1_000, 1_010, 1_005 + 30);
        let offset = skew.quorum_offset_ms(1, &voters(&[1, 2, 3]), 1_005);
        assert_eq!(offset, Some(30));
        assert_eq!(ceiling_ms(1_000, offset.expect("a quorum")), 1_030 + MAX_CLOCK_SKEW_MS);
    }

    /// Back from a reboot with its clock two days ahead, a replica hears from one peer of two
    /// first: itself and that peer are a majority of three but disagree, and nothing says
    /// which clock is wrong. Taking the one nearer 0 (its own) stamped two days ahead
    /// (simulator seed 208 of 10 minutes).
    #[test]
    fn this_replica_and_one_peer_that_disagree_are_no_quorum() {
        let skew = ClockSkew::default();
        let local = 10 * DAY_MS;
        skew.note(2, local, local + 10, local - 2 * DAY_MS);
        assert_eq!(skew.quorum_offset_ms(1, &voters(&[1, 2, 3]), local), None);
        // Within the bound, the pair agrees: the one nearer 0.
        let skew = ClockSkew::default();
        skew.note(2, local, local + 10, local + 5 + 1_500);
        assert_eq!(skew.quorum_offset_ms(1, &voters(&[1, 2, 3]), local), Some(0));
    }

    #[test]
    fn without_a_majority_of_samples_nothing_is_bounded() {
        let skew = ClockSkew::default();
        assert_eq!(skew.quorum_offset_ms(1, &voters(&[1, 2, 3]), 0), None);
        skew.note(2, 5 * DAY_MS, 5 * DAY_MS + 10, 1);
        // Two of five voters (this one and replica 2): not a majority.
        assert_eq!(skew.quorum_offset_ms(1, &voters(&[1, 2, 3, 4, 5]), 5 * DAY_MS), None);
    }

    #[test]
    fn a_slow_reply_is_not_a_sample() {
        let skew = ClockSkew::default();
        skew.note(2, 1_000, 1_000 + MAX_SAMPLE_RTT_MS + 1, 99 * DAY_MS);
        assert_eq!(skew.quorum_offset_ms(1, &voters(&[1, 2, 3]), 1_000), None);
    }

    /// During a rolling upgrade the peers of an older build say no time: they vouch for this
    /// replica's clock, even one that stepped since, as every replica did before samples.
    #[test]
    fn a_peer_of_an_older_build_vouches_for_this_replicas_clock() {
        let skew = ClockSkew::default();
        let (local, then) = (10 * DAY_MS, Instant::now());
        skew.note_at(2, local, local + 10, 0, then);
        let later = then + Duration::from_millis(40);
        let offset = skew.quorum_offset_at(1, &voters(&[1, 2, 3]), local + 2 * DAY_MS, later);
        assert_eq!(offset, Some(0));
        assert!(ceiling_ms(local + 2 * DAY_MS, offset.expect("vouched for")) > local + 2 * DAY_MS);
    }

    /// A replica that leads before a majority answers it stamps no later than the replicated
    /// clock as it saw it plus the time since: its own clock may have stepped days ahead.
    #[test]
    fn without_samples_the_replicated_clock_and_the_time_since_bound_the_stamps() {
        let anchor = Anchor::default();
        let then = Instant::now();
        assert_eq!(anchor.ceiling_at(5 * DAY_MS, then), 5 * DAY_MS);
        let later = then + Duration::from_millis(700);
        assert_eq!(anchor.ceiling_at(5 * DAY_MS, later), 5 * DAY_MS + 700);
        // Stamps held to the ceiling move the replicated clock no faster than time passes,
        // however often it is read.
        let (mut replicated, mut at) = (5 * DAY_MS, later);
        for _ in 0..100 {
            at += Duration::from_millis(10);
            replicated = anchor.ceiling_at(replicated, at);
        }
        assert_eq!(replicated, 5 * DAY_MS + 1_700);
        // Another leader stamped the replicated clock further: it is the reading now.
        assert_eq!(anchor.ceiling_at(6 * DAY_MS, at), 6 * DAY_MS);
    }
}
