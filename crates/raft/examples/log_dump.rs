//! Prints a stopped replica's raft log, one entry a line: index, term, and each command's
//! kind; `--job ID` also prints the commands that name that job (reports, plans), and
//! `--detail FROM-TO` every command of the entries FROM to TO (indexes); `--state` then
//! applies the whole log to an empty state (when no snapshot took its start) and prints what
//! it ends with: the jobs neither pending nor ended, each node's occupants, the
//! reservations. For reading what a replica held after a chaos run kept its directory.
//!
//! ```text
//! log_dump DATA_DIR [--job ID] [--detail FROM-TO] [--state]
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use baton_model::command::Op;
use baton_model::job::JobState;
use baton_model::plan::Decision;
use baton_model::state::State;
use baton_raft::store::{LogStore, SledKv};
use openraft::storage::RaftLogReader;

fn names_job(op: &Op, job: u64) -> bool {
    match op {
        Op::Report { observations, .. } => observations.iter().any(|o| o.job() == job),
        Op::ApplyPlan(plan) => plan.decisions.iter().any(|d| match d {
            Decision::Preempt { job: j, victims, .. } => *j == job || victims.iter().any(|v| v.job == job),
            other => other.job() == job,
        }),
        _ => false,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        eprintln!("usage: log_dump DATA_DIR [--job ID] [--detail FROM-TO] [--state]");
        return ExitCode::FAILURE;
    };
    let job: Option<u64> = args.iter().position(|a| a == "--job").and_then(|i| args.get(i + 1)?.parse().ok());
    let detail: Option<(u64, u64)> = args.iter().position(|a| a == "--detail").and_then(|i| {
        let (from, to) = args.get(i + 1)?.split_once('-')?;
        Some((from.parse().ok()?, to.parse().ok()?))
    });
    let kv = match SledKv::open(&std::path::Path::new(dir).join("raft.sled")) {
        Ok(kv) => Arc::new(kv),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut log = match LogStore::open(kv, 16) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let entries = match rt.block_on(log.try_get_log_entries(0..u64::MAX)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut state = args.iter().any(|a| a == "--state").then(State::new);
    if let (Some(first), Some(_)) = (entries.first(), &state)
        && first.log_id.index > 1
    {
        eprintln!("--state: the log starts at index {} (a snapshot holds what came before)", first.log_id.index);
        state = None;
    }
    for e in entries {
        let (term, index) = (e.log_id.leader_id.term, e.log_id.index);
        if let (Some(s), openraft::EntryPayload::Normal(batch)) = (state.as_mut(), &e.payload) {
            for c in &batch.commands {
                // A command the model refuses changes nothing, as on the replica.
                let _ = s.apply(c.clone());
            }
        }
        match &e.payload {
            openraft::EntryPayload::Normal(batch) => {
                let kinds: Vec<&str> = batch.commands.iter().map(|c| c.op.name()).collect();
                println!("{index} t{term} {}", kinds.join(","));
                let in_detail = detail.is_some_and(|(from, to)| (from..=to).contains(&index));
                if job.is_some() || in_detail {
                    let named =
                        |c: &&baton_model::command::Command| in_detail || job.is_some_and(|j| names_job(&c.op, j));
                    for c in batch.commands.iter().filter(named) {
                        println!("    at {} ms: {:?}", c.now_ms, c.op);
                    }
                }
            }
            openraft::EntryPayload::Blank => println!("{index} t{term} blank"),
            openraft::EntryPayload::Membership(_) => println!("{index} t{term} membership"),
        }
    }
    if let Some(s) = state {
        print_state(&s);
    }
    ExitCode::SUCCESS
}

/// What a state holds that keeps jobs waiting: jobs placed or stopping, nodes' occupants,
/// reservations.
fn print_state(s: &State) {
    println!("state after {} commands", s.applied());
    let live = |j: &&baton_model::job::Job| !matches!(j.state, JobState::Pending) && !j.state.is_finished();
    for j in s.jobs().values().filter(live) {
        let nodes: Vec<String> = j.replicas.iter().map(|r| r.node.to_string()).collect();
        println!("job {} {} {:?} attempt {} on {nodes:?}", j.id, j.spec.name, j.state, j.attempt);
    }
    for n in &s.ledger().nodes {
        let held: Vec<String> = n.occupants.iter().map(|o| format!("job {} gpus {:#b}", o.job, o.gpus)).collect();
        println!("node {}: occupants {held:?}", n.name);
    }
    for (job, r) in s.reservations() {
        println!("reservation of job {job}: {r:?}");
    }
    for j in s.jobs().values().filter(|j| s.pool_reservation_of(j.id).is_some()) {
        println!("pool reservation of job {}: {:?}", j.id, s.pool_reservation_of(j.id));
    }
}
