//! Every interval and bound of the simulated cluster, in simulated milliseconds. The lease
//! rules are the real ones: an agent's lease `LEASE_MS` counts from when it sent the beat a
//! grant answers, its processes are stopped within `STOP_BOUND_MS` of it running out, and a
//! leader declares a node lost after `HEARTBEAT_TIMEOUT_MS` of silence, which the timing
//! argument (`baton_proto::lease_fits`) must accept.

/// Commands carry `EPOCH_MS + simulated time`.
pub const EPOCH_MS: u64 = 1_700_000_000_000;
/// A leader plans this often.
pub const CYCLE_MS: u64 = 500;
/// An agent beats this often.
pub const BEAT_MS: u64 = 400;
/// How long a grant lets an agent run its processes.
pub const LEASE_MS: u64 = 3_000;
/// An agent stops its processes within this of its lease running out.
pub const STOP_BOUND_MS: u64 = 1_500;
/// A leader declares a node lost after this long without a beat.
pub const HEARTBEAT_TIMEOUT_MS: u64 = 6_000;
/// A replica a beat lists that its directive does not place is recorded as a stray once
/// listed this long (the server's `--resend-ms`: a beat may cross the directive that
/// dropped it). A replica the directive runs that beats stop listing is declared vanished
/// after `HEARTBEAT_TIMEOUT_MS`, as the server declares it.
pub const STRAY_SETTLE_MS: u64 = 2_000;
/// How often a leader writes a state digest (the server's `--state-digest-interval-ms`,
/// shorter here so that every run checks many).
pub const STATE_DIGEST_MS: u64 = 10_000;
/// A client's write or read gives up after this long (it may still land).
pub const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// A job's ranks run between these many milliseconds before exiting 0.
pub const WORK_MS: (u64, u64) = (5_000, 120_000);
/// A stopped rank writes its checkpoint within this many milliseconds.
pub const CHECKPOINT_MS: (u64, u64) = (100, 4_000);
/// The grace a job is given to checkpoint when preempted.
pub const GRACE_MS: u64 = 3_000;
/// After the load and the faults end, the cluster has this long to settle before the final
/// checks (every acknowledged write visible, replicas at one state).
pub const SETTLE_MS: u64 = 60_000;
/// How often the step loop compares the replicas' states and checks their invariants.
pub const CHECK_EVERY_MS: u64 = 100;
/// A state's deep checks (its digest against the other replicas', its invariants, its jobs'
/// ends) encode and read the whole state, so they cost in proportion to its size, which
/// grows through a long run (10,000 finished jobs are kept). Every check is deep while the
/// largest state encodes to at most this many bytes (a seed of ten minutes stays under it);
/// past it deep checks come as much less often as the state is larger, so that their cost
/// per simulated second stays that of a state this size.
pub const DEEP_CHECK_BYTES: u64 = 256 << 10;
/// The longest gap between deep checks, however large the state.
pub const DEEP_CHECK_MAX_EVERY_MS: u64 = 10_000;

/// The simulated milliseconds from one deep check to the next once the largest state
/// checked encodes to `bytes`; 0: at every check.
pub fn deep_check_every_ms(bytes: u64) -> u64 {
    if bytes <= DEEP_CHECK_BYTES {
        return 0;
    }
    (CHECK_EVERY_MS * bytes / DEEP_CHECK_BYTES).min(DEEP_CHECK_MAX_EVERY_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_checks_thin_out_in_proportion_to_the_state_past_its_budget_up_to_a_bound() {
        assert_eq!(deep_check_every_ms(0), 0);
        assert_eq!(deep_check_every_ms(DEEP_CHECK_BYTES), 0, "at the budget every check is deep");
        assert_eq!(deep_check_every_ms(4 * DEEP_CHECK_BYTES), 4 * CHECK_EVERY_MS);
        // Bytes checked per simulated second stay the budget's: four times the state, a
        // quarter of the checks.
        let per_s = |bytes: u64| bytes * 1_000 / deep_check_every_ms(bytes);
        assert_eq!(per_s(4 * DEEP_CHECK_BYTES), per_s(8 * DEEP_CHECK_BYTES));
        assert_eq!(deep_check_every_ms(u64::MAX / CHECK_EVERY_MS), DEEP_CHECK_MAX_EVERY_MS);
    }
}
