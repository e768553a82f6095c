//! baton's domain model and replicated state machine.
//!
//! Everything that must survive a leader's death lives in [`State`], changed only by
//! [`State::apply`] with a [`Command`] the leader stamped with the time. The crate is pure:
//! no IO, no clocks, no randomness, no tokio. The scheduler (`baton-sched`) reads a `State`
//! and returns a [`Plan`]; the plan goes through the log like any other command and
//! `apply` re-checks it.
//!
//! Layout:
//! - `name`, `quantity`, `resources`: validated names (natural order), exact quantities in
//!   Kubernetes notation (CPUs held in thousandths).
//! - `class`, `node`, `queue`, `job`, `alloc`: configuration and job records.
//! - `command`, `plan`, `event`, `error`: what goes in and comes out of `apply`;
//!   `rejection`: why the plan checker refused a decision (a closed set).
//! - `scheduler`: the scheduler's settings and starving jobs' reservations (section 9).
//! - `cow_tree`: the ordered map of the state's large collections, whose clone (a snapshot)
//!   shares its contents until they change.
//! - `ledger`: derived dense accounting (free per node, usage per queue, what may be borrowed).
//! - `state`: the state machine and its transitions.
//! - `limits`: every bound, in one place.
//! - `fixture`: plain job and node specs for tests.
//! - `format`: the data format each command needs, and the gate on what members read.
//! - `behaviour`: apply semantics, versioned; `digest`: the committed state digests.
//! - `access`: tokens, users, roles and queue grants; who may apply which command.
//! - `runnable`: checks on the command and environment an agent will exec.
//! - `tenancy`: the Unix user each job runs as, and the bounds on jobs per user and queue.
//! - `array`, `after`, `elastic`: workflows (decisions.md section 13): job arrays,
//!   dependencies, elastic gangs' ranges.
//! - `usage`: usage over time and per-user limits (decisions.md section 12).
//! - `topology`: topology levels above the node, a node's domains, a gang's levels.
//! - `word`: the one spelling of each closed set's values (states, modes, orderings, roles).

// Resource vectors are indexed by kind across several arrays at once; an index loop
// reads better there than zipped iterators.
#![allow(clippy::needless_range_loop)]

pub mod access;
pub mod accounting;
pub mod after;
pub mod alloc;
pub mod array;
pub mod behaviour;
pub mod class;
pub mod command;
pub mod cow_tree;
pub mod digest;
pub mod elastic;
pub mod error;
pub mod event;
pub mod fixture;
pub mod format;
pub mod gpu_health;
pub mod job;
pub mod ledger;
pub mod limits;
pub mod maintenance;
pub mod name;
pub mod node;
pub mod plan;
pub mod quantity;
pub mod queue;
pub mod rejection;
pub mod resources;
pub mod runnable;
pub mod scheduler;
pub mod state;
pub mod tenancy;
pub mod topology;
pub mod usage;
pub mod word;

pub use command::{Applied, Command, Op, Outcome, Response};
pub use error::ApplyError;
pub use job::{Job, JobId, JobSpec, JobState};
pub use name::Name;
pub use plan::{Decision, Plan, Victim};
pub use resources::Resources;
pub use state::{Reservation, State};
