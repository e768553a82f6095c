//! One scheduling cycle: `cycle(&State, now_ms) -> Plan`.
//!
//! Pure business logic over a read-only snapshot, like Nomad's scheduler: no IO, no clocks,
//! no tokio. The leader and `baton sim` run the same code. The plan goes through the
//! replicated log, where `State::apply` re-checks every decision.
//!
//! Layout:
//! - `cycle`: the loop: resume suspended jobs, then decide each pending job in order.
//! - `order`: the order of pending jobs (docs/policy.md section 2).
//! - `view`, `index`: the working copy of the ledger and a free-GPU bucket index.
//! - `needs`, `pack`, `nodes`: what a job needs and gang placement (section 3).
//! - `failures`, `nofit`, `reason`'s caches: what a cycle learns as it goes (room and
//!   victims only get scarcer), so later jobs of the same shape are decided cheaply.
//! - `preempt`: who may be preempted, the greedy walk with fill-back, set scoring
//!   (sections 4 to 6); candidates kept between the preemptors of a cycle (`kept`).
//! - `reason`: why a job waits, in words a person can act on; `refresh`: how many reasons a
//!   cycle rewrites only because a live amount in them moved.
//! - `reserve`: starving jobs' reservations and backfill (section 9).
//! - `elastic`: elastic gangs' sizes at admission and their growth (decisions.md
//!   section 13).
//! - `fair`: usage over time and per-user limits (decisions.md section 12).
//! - `windows`: maintenance windows ahead, closed to the jobs that would not end before
//!   them (decisions.md section 14).

// Resource vectors are indexed by kind across several arrays at once; an index loop
// reads better there than zipped iterators.
#![allow(clippy::needless_range_loop)]

mod cycle;
mod elastic;
mod failures;
mod fair;
mod index;
pub mod invariants;
mod needs;
mod nodes;
mod nofit;
mod order;
mod pack;
mod preempt;
mod reason;
mod refresh;
mod reserve;
mod view;
mod windows;

pub use cycle::{MAX_PREEMPTION_PLANS_PER_CYCLE, cycle};
pub use refresh::{MAX_AMOUNT_REFRESHES_PER_CYCLE, is_amount_refresh};

#[cfg(test)]
mod after_props;
#[cfg(test)]
mod array_props;
#[cfg(test)]
mod elastic_props;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod stale_props;
#[cfg(test)]
mod starving_props;
#[cfg(test)]
mod usage_props;
