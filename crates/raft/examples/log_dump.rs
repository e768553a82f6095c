//! Prints a stopped replica's raft log, one entry a line: index, term, and each command's
//! kind; `--job ID` also prints the commands that name that job (reports, plans), and
//! `--detail FROM-TO` every command of the entries FROM to TO (indexes). For reading what a
//! replica held after a chaos run kept its directory.
//!
//! ```text
//! log_dump DATA_DIR [--job ID] [--detail FROM-TO]
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use baton_model::command::Op;
use baton_model::plan::Decision;
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
        eprintln!("usage: log_dump DATA_DIR [--job ID] [--detail FROM-TO]");
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
    for e in entries {
        let (term, index) = (e.log_id.leader_id.term, e.log_id.index);
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
    ExitCode::SUCCESS
}
