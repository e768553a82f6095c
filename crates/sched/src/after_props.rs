//! Property tests for decisions.md section 13's dependencies, through the real
//! `State::apply` and `cycle`: random chains of jobs, each waiting for earlier ones with a
//! random condition, on a node too small for all of them, while jobs exit (0 or not) and
//! are cancelled at random. After every command:
//! - nothing has started before every one of its dependencies held;
//! - a held job waits only for what does not hold yet and can still hold (a dependency that
//!   held was dropped, and one that broke ended the job Cancelled);
//! - a job released to its queue has every dependency met.

use baton_model::after::{After, JobRef, Standing, When};
use baton_model::command::Op;
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::job::Job;
use baton_model::job::{JobId, JobState};
use baton_model::name::Name;
use baton_model::state::State;
use proptest::prelude::*;

use crate::proptests::{cmd, exit_nth_running, settle};

#[derive(Debug, Clone)]
struct JobGen {
    gpus: u64,
    /// (index of an earlier job, condition).
    after: Vec<(usize, When)>,
}

#[derive(Debug, Clone)]
enum Act {
    /// Exit the `n`th running job (by id order), with code 0 or 1.
    Exit(usize, bool),
    /// Cancel job `n` (modulo the count).
    Cancel(usize),
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![Just(When::Ok), Just(When::Any), Just(When::NotOk), Just(When::Started)]
}

fn jobs() -> impl Strategy<Value = Vec<JobGen>> {
    proptest::collection::vec((1u64..=4, proptest::collection::vec((any::<usize>(), when()), 0..3)), 2..12).prop_map(
        |raw| {
            raw.into_iter()
                .enumerate()
                .map(|(i, (gpus, deps))| JobGen {
                    gpus,
                    after: if i == 0 { Vec::new() } else { deps.into_iter().map(|(d, w)| (d % i, w)).collect() },
                })
                .collect()
        },
    )
}

fn acts() -> impl Strategy<Value = Vec<Act>> {
    proptest::collection::vec(
        prop_oneof![
            4 => (any::<usize>(), any::<bool>()).prop_map(|(n, ok)| Act::Exit(n, ok)),
            1 => any::<usize>().prop_map(Act::Cancel),
        ],
        0..30,
    )
}

fn name(i: usize) -> String {
    format!("j{i}")
}

/// Where a dependency stands, written out again from section 13's words rather than taken
/// from the model, so that a wrong rule there is caught here.
fn standing(when: When, j: &Job) -> Standing {
    let ended = matches!(j.state, JobState::Succeeded | JobState::Failed | JobState::Cancelled);
    let holds = match when {
        When::Ok => j.state == JobState::Succeeded,
        When::Any => ended,
        When::NotOk => matches!(j.state, JobState::Failed | JobState::Cancelled),
        When::Started => j.attempt > 0,
    };
    match (holds, ended) {
        (true, _) => Standing::Holds,
        (false, true) => Standing::Broken(j.state),
        (false, false) => Standing::Waits,
    }
}

/// Every property above, given each job's dependencies as submitted.
fn check(s: &State, ids: &[JobId], deps: &[Vec<(usize, When)>]) -> Result<(), String> {
    for (i, &id) in ids.iter().enumerate() {
        let j = s.job(id).ok_or("a job vanished")?;
        let standings: Vec<Standing> = deps[i].iter().map(|&(d, w)| standing(w, s.job(ids[d]).unwrap())).collect();
        if j.attempt > 0 && standings.iter().any(|st| *st != Standing::Holds) {
            return Err(format!("{} started although its dependencies stand {standings:?}", name(i)));
        }
        for w in s.waits_of(id) {
            let st = standing(w.when, s.job(w.job).unwrap());
            if st != Standing::Waits {
                return Err(format!("{} still waits for job {} ({:?}), which stands {st:?}", name(i), w.job, w.when));
            }
        }
        let released = j.state == JobState::Pending && !s.held(id);
        if released && standings.iter().any(|st| *st != Standing::Holds) {
            return Err(format!("{} is released although its dependencies stand {standings:?}", name(i)));
        }
        if j.state.is_finished() && j.state != JobState::Cancelled && s.held(id) {
            return Err(format!("{} ended {:?} and still waits", name(i), j.state));
        }
    }
    Ok(())
}

fn run(world: &[JobGen], acts: &[Act]) -> Result<(), String> {
    let mut s = State::new();
    cmd(&mut s, 0, Op::RegisterNodes(vec![gpu_node("n1", 4)])).map_err(|e| e.to_string())?;
    cmd(&mut s, 0, Op::PutQueue(gpu_queue("q", 4))).map_err(|e| e.to_string())?;
    let mut ids = Vec::new();
    for (i, g) in world.iter().enumerate() {
        let after = g.after.iter().map(|&(d, when)| After { job: JobRef::Name(Name::lit(&name(d))), when }).collect();
        let op = Op::SubmitAfter { spec: gpu_job(&name(i), "q", g.gpus), request_id: None, run_as: None, after };
        let applied = cmd(&mut s, 1_000, op).map_err(|e| format!("submit {}: {e}", name(i)))?;
        let Some(id) = s.job_by_name(&name(i)).map(|j| j.id) else {
            return Err(format!("{} not submitted: {:?}", name(i), applied.outcome));
        };
        ids.push(id);
    }
    let deps: Vec<Vec<(usize, When)>> = world.iter().map(|g| g.after.clone()).collect();
    let mut now_ms = 2_000;
    check(&s, &ids, &deps)?;
    for act in acts {
        settle(&mut s, now_ms, false)?;
        check(&s, &ids, &deps)?;
        now_ms += 1_000;
        match *act {
            Act::Exit(n, ok) => exit_nth_running(&mut s, now_ms, n, ok)?,
            Act::Cancel(n) => {
                let id = ids[n % ids.len()];
                if !s.job(id).unwrap().state.is_finished() {
                    cmd(&mut s, now_ms, Op::Cancel { job: id }).map_err(|e| e.to_string())?;
                }
            }
        }
        check(&s, &ids, &deps)?;
    }
    settle(&mut s, now_ms, false)?;
    check(&s, &ids, &deps)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: super::proptests::cases(128), ..ProptestConfig::default() })]

    #[test]
    fn nothing_starts_before_its_dependencies_hold(world in jobs(), acts in acts()) {
        run(&world, &acts).map_err(TestCaseError::fail)?;
    }
}
