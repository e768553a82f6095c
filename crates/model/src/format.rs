//! Data formats: which format introduced each command, and the gate that keeps a leader from
//! committing a command some member of the cluster cannot decode.
//!
//! The log carries [`Op`]s encoded by their variant's position (bincode), so a build decodes
//! exactly the variants it was built with: a variant added later fails to decode there, and a
//! replica that cannot decode a committed entry can follow the log no further. During a
//! rolling upgrade replicas of two builds run side by side, so the leader must not commit a
//! command that a member's build lacks. Each build knows the newest format it reads
//! ([`DATA_FORMAT`]), each replica reports it to the others (the raft crate's Identify call),
//! and [`check`] refuses a command that needs a newer format than some member reads.
//!
//! The rule, for whoever changes an encoding:
//! - a new `Op` or `Observed` variant goes at the end of its enum and gets the format after
//!   the newest one a build exists of: raise [`DATA_FORMAT`] and give it that number in
//!   [`Op::format`] / [`Observed::format`] (the `format_gate` test freezes what each released
//!   format reads, so a variant cannot join an older format);
//! - a change to a type an existing variant carries changes that variant's encoding for every
//!   build: add a new variant carrying the new type instead (as `SubmitRunAs` did `Submit`);
//! - a new snapshot layout (the `State`'s encoding) also raises [`DATA_FORMAT`] and makes
//!   [`STATE_LAYOUT_FORMAT`] that format. The gate does not cover snapshots: the leader
//!   sends its own layout, stamped with the format its state needs, and a replica that
//!   reads less refuses it (the raft crate; see docs/ops.md).

use serde::{Deserialize, Serialize};

use crate::command::{Observed, Op};

/// The newest data format this build reads and writes: the log's commands, the snapshot's
/// layout, the raft records. 1: before the field existed. 2: the same encodings, marked.
/// 3: snapshots also record the completing ranks and the last placements; `SubmitRunAs`,
/// `SetTenancy` and `Observed::NotStarted`. 4: the first format whose builds report it and
/// hold back what others cannot read; `GrantQueueAdmin`, the create-if-absent and
/// compare-and-set writes (`CreateQueue`, `UpdateQueue`, `CreateCohort`, `CreateClass`) and
/// `Observed::LeaseStopped`, which builds marked format 3 did not all read. 5:
/// `Observed::KilledHere`. 6: `CreateQueueVisible`, `UpdateQueueVisible`, and snapshots
/// that record the queues' visibility (written in format 5's layout while every queue has
/// the default, so a format-5 follower reads them until a visibility is set, which the gate
/// holds back until every member reads format 6). 7: `SubmitAfter`, `CreateMaintenance`,
/// `DeleteMaintenance`, the events `DependenciesMet`, `MaintenanceStarted`,
/// `MaintenanceEnded`, `MaintenanceStop`, `StopWhy::Maintenance`, and snapshots that record
/// the jobs waiting for others and the maintenance windows (written in format 6's layout
/// while there are none). 8: `ReportGpu`, `SetGpuHealth`, the events `GpuUnhealthy`,
/// `GpuHealthy`, `GpuFaultStop`, `StopWhy::GpuFault`, and snapshots that record the
/// unhealthy GPUs (written in format 7's layout while there are none). 9: `SubmitArray`,
/// `CancelArray`, `SubmitElastic`, `Decision::Grow` (a plan carrying one needs format 9),
/// `StopWhy::Grow`, the events `Resized` and `Growing`, `SetUsage`, `SetUserLimit`,
/// `SetAccounting`, `StartAccounting`, `Observed::Suspended`, and snapshots that record the arrays, the elastic
/// gangs, usage over time and accounting (written in format 8's layout while there is none
/// of them and accounting is off). 10: `SetBehaviour` to behaviour 2 (request ids bounded
/// per user; see `behaviour`), and snapshots that record the behaviour (written in format
/// 9's layout while it is the baseline). 11: `StateDigest` (see `digest`),
/// `Observed::RankCheckpointed`, `SetBehaviour` to behaviour 3 (the state tallies the ranks'
/// checkpoints), and snapshots that record that tally (written in format 10's layout while
/// it is empty). 12: `SetTopologyLevels`, `SetNodeDomains`, a submit whose job names
/// topology levels (`Topology::Levels`), and snapshots that record the levels and the nodes'
/// domains (written in format 11's layout while there are none). 13: a submit whose job asks
/// a fraction of a shared GPU (`gpu.milli`; decisions.md section 11), which a build of format
/// 12 would refuse as a resource no node has, so the two would part. 14: `SetBehaviour` to
/// behaviour 4 (a job on MIG slices preempted in mode `suspend` is checkpointed and
/// requeued; see `behaviour`). 15: `SetBehaviour` to behaviour 5 (lends follow the ranks that
/// run on them; see `behaviour`). 16: `SetBehaviour` to behaviour 6 (membership changes
/// record the replicas they remove; see `behaviour`), and snapshots that record them
/// (written in format 15's layout while there is none). 17: `SetBehaviour` to behaviour 7
/// (a rank that ended before its job was suspended in place stays ended; see `behaviour`).
/// 18: `Observed::Unrecorded` (a rank its agent could not start, its journal taking no
/// writes: the node is taken out). 19: `SetBehaviour` to behaviour 8 (a rank that ended
/// before its job's suspension was cut short stays ended; see `behaviour`).
pub const DATA_FORMAT: u32 = 19;

/// The format of the snapshot layout this build writes (the `State`'s encoding; builds
/// marked format 3 did not all write it): a snapshot needs at least it, and the newest
/// format of the commands committed into its state beyond it.
pub const STATE_LAYOUT_FORMAT: u32 = 4;

/// The format taken for a member that says nothing about it: a build from before replicas
/// reported their format (they read at least format 3's commands when they read format-3
/// snapshots), or one not heard from yet. A command of this format or older is never held.
pub const UNREPORTED_FORMAT: u32 = 3;

/// Longest list of members named in one refusal (clusters have 3 to 7 voters; the bound is
/// for a membership that grew by mistake).
pub const MAX_NAMED_MEMBERS: usize = 16;

/// What the leader knows of the newest format a member reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reads {
    /// It said so (or, a build from before reporting, said nothing: [`UNREPORTED_FORMAT`]).
    Format(u32),
    /// Not heard from yet: it is taken to read the newest format the cluster has already
    /// used (a member that could not read that has no log to follow), and nothing newer:
    /// it may be an older build that comes back to entries it cannot read.
    Unknown,
}

impl Reads {
    /// The newest format it is taken to read, the cluster having used formats up to `used`.
    pub fn newest(self, used: u32) -> u32 {
        match self {
            Reads::Format(f) => f,
            Reads::Unknown => used.max(UNREPORTED_FORMAT),
        }
    }
}

impl std::fmt::Display for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reads::Format(n) => write!(f, "reads formats up to {n}"),
            Reads::Unknown => write!(f, "not heard from yet"),
        }
    }
}

/// A command refused because a member of the cluster could not decode it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error(
    "{op} needs data format {needs}, which {} not read yet: upgrade {} (every replica must read a command before the cluster commits it); commands of older formats still work",
    describe(behind),
    names(behind)
)]
pub struct FormatBehind {
    /// The command (the one inside `As`) that needs the format.
    pub op: String,
    pub needs: u32,
    /// The members behind, by replica id, with what they read (at most
    /// [`MAX_NAMED_MEMBERS`]).
    pub behind: Vec<(u64, Reads)>,
}

fn describe(behind: &[(u64, Reads)]) -> String {
    let list: Vec<String> = behind.iter().map(|(id, r)| format!("replica {id} ({r})")).collect();
    let verb = if behind.len() == 1 { "does" } else { "do" };
    format!("{} {verb}", list.join(", "))
}

fn names(behind: &[(u64, Reads)]) -> String {
    let ids: Vec<String> = behind.iter().map(|(id, _)| format!("replica {id}")).collect();
    ids.join(", ")
}

/// Refuses `op` if a member in `members` (replica id, what it reads) cannot decode it, the
/// cluster having used formats up to `used` ([`Reads::newest`]).
pub fn check(op: &Op, members: impl IntoIterator<Item = (u64, Reads)>, used: u32) -> Result<(), FormatBehind> {
    let needs = op.format();
    if needs <= UNREPORTED_FORMAT {
        return Ok(());
    }
    let behind: Vec<(u64, Reads)> =
        members.into_iter().filter(|(_, r)| needs > r.newest(used)).take(MAX_NAMED_MEMBERS).collect();
    if behind.is_empty() {
        return Ok(());
    }
    Err(FormatBehind { op: op.innermost_name().to_string(), needs, behind })
}

impl Op {
    /// The data format that introduced this command: a replica decodes it only if it reads
    /// that format. A command carrying others (`As`, `Report`) takes the newest of them.
    /// Every variant has its line here (no wildcard), so a new one cannot be added without
    /// deciding its format.
    pub fn format(&self) -> u32 {
        self.variant_format().max(self.spec_format())
    }

    /// What the job a submit carries needs: format 12 once it names topology levels, 13 once
    /// a task asks a fraction of a shared GPU.
    fn spec_format(&self) -> u32 {
        match self {
            Op::Submit { spec, .. }
            | Op::SubmitRunAs { spec, .. }
            | Op::SubmitAfter { spec, .. }
            | Op::SubmitArray { spec, .. }
            | Op::SubmitElastic { spec, .. } => {
                let levels = match spec.topology {
                    Some(crate::job::Topology::Levels(_)) => 12,
                    _ => 1,
                };
                let shares = if spec.tasks.iter().any(|t| t.resources.gpu_fraction() > 0) { 13 } else { 1 };
                levels.max(shares)
            }
            _ => 1,
        }
    }

    fn variant_format(&self) -> u32 {
        match self {
            Op::As { op, .. } => op.format(),
            Op::Report { observations, .. } => observations.iter().map(Observed::format).max().unwrap_or(1),
            Op::ApplyPlan(plan) => plan.decisions.iter().map(crate::plan::Decision::format).max().unwrap_or(1),
            Op::PutClass(_)
            | Op::DeleteClass { .. }
            | Op::PutCohort(_)
            | Op::DeleteCohort { .. }
            | Op::PutQueue(_)
            | Op::DeleteQueue { .. }
            | Op::RegisterNode(_)
            | Op::RegisterNodes(_)
            | Op::SetNodeStatus { .. }
            | Op::Cordon { .. }
            | Op::Submit { .. }
            | Op::Cancel { .. }
            | Op::Pause { .. }
            | Op::Resume { .. }
            | Op::JobExited { .. }
            | Op::JobStopped { .. }
            | Op::JobCheckpointed { .. }
            | Op::SetScheduler(_)
            | Op::Tick
            | Op::AddToken { .. }
            | Op::RevokeToken { .. }
            | Op::GrantQueue { .. } => 1,
            Op::SubmitRunAs { .. } | Op::SetTenancy(_) => 3,
            Op::GrantQueueAdmin { .. }
            | Op::CreateQueue(_)
            | Op::UpdateQueue { .. }
            | Op::CreateCohort(_)
            | Op::CreateClass(_) => 4,
            Op::CreateQueueVisible { .. } | Op::UpdateQueueVisible { .. } => 6,
            Op::SubmitAfter { .. } | Op::CreateMaintenance(_) | Op::DeleteMaintenance { .. } => 7,
            Op::ReportGpu { .. } | Op::SetGpuHealth { .. } => 8,
            Op::SubmitArray { .. }
            | Op::CancelArray { .. }
            | Op::SubmitElastic { .. }
            | Op::SetUsage(_)
            | Op::SetUserLimit { .. }
            | Op::SetAccounting(_)
            | Op::StartAccounting => 9,
            Op::SetBehaviour(v) => crate::behaviour::format_of(*v),
            Op::StateDigest(_) => 11,
            Op::SetTopologyLevels(_) | Op::SetNodeDomains(_) => 12,
        }
    }

    /// The name of the command itself, unwrapped from `As`.
    fn innermost_name(&self) -> &'static str {
        match self {
            Op::As { op, .. } => op.innermost_name(),
            other => other.name(),
        }
    }
}

impl Observed {
    /// The data format that introduced this observation (see [`Op::format`]).
    pub fn format(&self) -> u32 {
        match self {
            Observed::Exited { .. }
            | Observed::Stopped { .. }
            | Observed::Checkpointed { .. }
            | Observed::Unkillable { .. }
            | Observed::Stray { .. }
            | Observed::Vanished { .. }
            | Observed::LeaseExpired { .. } => 1,
            Observed::NotStarted { .. } => 3,
            Observed::LeaseStopped { .. } => 4,
            Observed::KilledHere { .. } => 5,
            Observed::Suspended { .. } => 9,
            Observed::RankCheckpointed { .. } => 11,
            Observed::Unrecorded { .. } => 18,
        }
    }

    /// This observation as a cluster whose members read only up to `format` can take it:
    /// a lease stop becomes the older `LeaseExpired` (the same outcome, without the rank's
    /// own save, which only completes a gang's checkpoint from ranks reported later); a
    /// rank killed here becomes `Vanished`; a rank's checkpoint has none (`None`: the leader
    /// tallies it in memory while a member reads older, and sends `Checkpointed` once the
    /// gang's is complete); a rank its agent could not start becomes one killed here (the
    /// same requeue; the node is not taken out). Agents' reports must not wait for an
    /// upgrade: a refused report renews no lease.
    pub fn for_format(self, format: u32) -> Option<Observed> {
        Some(match self {
            Observed::RankCheckpointed { .. } if format < 11 => return None,
            // The same requeue, without taking the node out: a rank killed here.
            Observed::Unrecorded { job, attempt, rank, .. } if format < 18 => {
                return Observed::KilledHere { job, attempt, rank, rank_saved: false }.for_format(format);
            }
            Observed::LeaseStopped { job, attempt, rank, checkpointed, .. } if format < 4 => {
                Observed::LeaseExpired { job, attempt, rank, checkpointed }
            }
            // The older observation of a rank gone without an exit: the same requeue, with an
            // event that says less (and, in a stop in progress, ignored).
            // As before it: counted for whichever suspension is in progress.
            Observed::Suspended { job, attempt, rank, .. } if format < 9 => {
                Observed::Stopped { job, attempt, rank, checkpointed: false }
            }
            Observed::KilledHere { job, attempt, rank, .. } if format < 5 => {
                Observed::Vanished { job, attempt, rank, missing_ms: 0 }
            }
            other => other,
        })
    }
}

/// A report's observations as a cluster can commit them: each newer than every member reads
/// goes as the older one it replaces (`Observed::for_format`). Every member reads at least
/// the oldest format a member says it reads (`oldest_format`) and the format of the committed
/// apply behaviour (raised only once every member read it). Agents' reports never wait for
/// an upgrade: a refused report renews no lease.
pub fn for_members(observed: Vec<Observed>, oldest_format: u32, behaviour: u32) -> Vec<Observed> {
    let reads = oldest_format.max(crate::behaviour::format_of(behaviour));
    if reads >= DATA_FORMAT {
        return observed;
    }
    observed.into_iter().filter_map(|o| o.for_format(reads)).collect()
}

/// The variant names of enum `T`, in declaration order (the order its encoding numbers
/// them), as serde's derive lists them. For tests that check a table covers every variant.
pub fn variant_names<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
    match T::deserialize(Probe) {
        Err(ProbeError::Variants(names)) => names.to_vec(),
        _ => Vec::new(),
    }
}

/// A deserializer that answers nothing but, asked for an enum, reports its variants.
struct Probe;

#[derive(Debug)]
enum ProbeError {
    Variants(&'static [&'static str]),
    NotEnum,
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Variants(v) => write!(f, "an enum of {} variants", v.len()),
            ProbeError::NotEnum => write!(f, "not an enum"),
        }
    }
}

impl std::error::Error for ProbeError {}

impl serde::de::Error for ProbeError {
    fn custom<M: std::fmt::Display>(_msg: M) -> ProbeError {
        ProbeError::NotEnum
    }
}

impl<'de> serde::Deserializer<'de> for Probe {
    type Error = ProbeError;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _visitor: V) -> Result<V::Value, ProbeError> {
        Err(ProbeError::NotEnum)
    }

    fn deserialize_enum<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, ProbeError> {
        Err(ProbeError::Variants(variants))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}
