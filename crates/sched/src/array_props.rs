//! Property tests for decisions.md section 13's arrays, through the real `State::apply`
//! and `cycle`: random arrays (some bounded by `max_running`) and a job waiting for each
//! to succeed, on a node too small for all of them, while elements exit (0 or not), are
//! cancelled one by one or whole, and lose their node. After every command:
//! - at most `max_running` elements of an array are unfinished, hence running;
//! - at most the window of elements that never started exist at once;
//! - the elements created are the first ones, in index order, each named by its index and
//!   carrying it in `BATON_ARRAY_INDEX`; the array's tally is what its elements did;
//! - an array has ended exactly when every element has;
//! - the job waiting for an array is released only once every element succeeded.

use baton_model::after::{After, JobRef, When};
use baton_model::array::{ARRAY_INDEX_ENV, ArraySpec, JobArray};
use baton_model::command::Op;
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::job::{JobId, JobState};
use baton_model::limits::ARRAY_PENDING_WINDOW;
use baton_model::name::Name;
use baton_model::node::NodeStatus;
use baton_model::state::State;
use proptest::prelude::*;

use crate::proptests::{cmd, exit_nth_running, settle};

#[derive(Debug, Clone)]
struct ArrayGen {
    gpus: u64,
    count: u32,
    max_running: Option<u32>,
}

#[derive(Debug, Clone)]
enum Act {
    /// Exit the `n`th running job (by id order), with code 0 or 1.
    Exit(usize, bool),
    /// Cancel the `n`th unfinished job.
    CancelJob(usize),
    /// Cancel array `n` (modulo the count).
    CancelArray(usize),
    /// The node is lost (its jobs go back to the queue), then back.
    LoseNode,
}

fn arrays() -> impl Strategy<Value = Vec<ArrayGen>> {
    let one = (1u64..=2, 1u32..=90, proptest::option::of(1u32..=4)).prop_map(|(gpus, count, max_running)| ArrayGen {
        gpus,
        count,
        max_running,
    });
    proptest::collection::vec(one, 1..4)
}

fn acts() -> impl Strategy<Value = Vec<Act>> {
    proptest::collection::vec(
        prop_oneof![
            8 => (any::<usize>(), any::<bool>()).prop_map(|(n, ok)| Act::Exit(n, ok)),
            1 => any::<usize>().prop_map(Act::CancelJob),
            1 => any::<usize>().prop_map(Act::CancelArray),
            1 => Just(Act::LoseNode),
        ],
        0..60,
    )
}

fn name(i: usize) -> String {
    format!("a{i}")
}

/// Every property above, for array `a` and the job `waiter` that waits for it to succeed.
fn check_array(s: &State, a: &JobArray, waiter: JobId) -> Result<(), String> {
    let n = &a.spec.name;
    let mut unfinished = 0;
    let mut never_started = 0;
    let (mut succeeded, mut failed, mut cancelled) = (0, 0, 0);
    for offset in 0..a.created {
        let index = a.array.first + offset;
        let j = s.job_by_name(&format!("{n}-{index}")).ok_or(format!("{n}-{index} was created and is gone"))?;
        if j.spec.env.get(ARRAY_INDEX_ENV) != Some(&index.to_string()) {
            return Err(format!("{n}-{index} does not carry its index: {:?}", j.spec.env));
        }
        match j.state {
            JobState::Succeeded => succeeded += 1,
            JobState::Failed => failed += 1,
            JobState::Cancelled => cancelled += 1,
            _ => unfinished += 1,
        }
        never_started += u32::from(j.attempt == 0 && !j.state.is_finished());
    }
    let index_past = a.array.first + a.created;
    if s.job_by_name(&format!("{n}-{index_past}")).is_some() {
        return Err(format!("{n}-{index_past} exists beyond the {} created", a.created));
    }
    if let Some(m) = a.array.max_running
        && unfinished > m
    {
        return Err(format!("{n}: {unfinished} elements unfinished, max_running {m}"));
    }
    if never_started > ARRAY_PENDING_WINDOW {
        return Err(format!("{n}: {never_started} elements created and never started"));
    }
    let never_created = if a.cancelled { a.array.count - a.created } else { 0 };
    let counted = (succeeded, failed, cancelled + never_created);
    if (a.tally.succeeded, a.tally.failed, a.tally.cancelled) != counted {
        return Err(format!("{n}: tally {:?}, elements say {counted:?}", a.tally));
    }
    let all_ended = unfinished == 0 && (a.cancelled || a.created == a.array.count);
    if a.is_finished() != all_ended {
        return Err(format!("{n}: finished {} but every element ended: {all_ended}", a.is_finished()));
    }
    let w = s.job(waiter).ok_or("the waiter vanished")?;
    let released = w.state == JobState::Pending && !s.held(waiter) || w.attempt > 0;
    if released && succeeded != a.array.count {
        return Err(format!("{} released with {succeeded} of {} elements succeeded", w.spec.name, a.array.count));
    }
    Ok(())
}

fn check(s: &State, arrays: &[JobId], waiters: &[JobId]) -> Result<(), String> {
    for (&id, &w) in arrays.iter().zip(waiters) {
        check_array(s, s.array(id).ok_or("an array vanished")?, w)?;
    }
    Ok(())
}

fn act(s: &mut State, now_ms: u64, act: &Act, arrays: &[JobId]) -> Result<(), String> {
    let e = |e: baton_model::ApplyError| e.to_string();
    match *act {
        Act::Exit(n, ok) => exit_nth_running(s, now_ms, n, ok)?,
        Act::CancelJob(n) => {
            let live: Vec<JobId> = s.jobs().values().filter(|j| !j.state.is_finished()).map(|j| j.id).collect();
            if let Some(&job) = live.get(n % live.len().max(1)) {
                cmd(s, now_ms, Op::Cancel { job }).map_err(e)?;
            }
        }
        Act::CancelArray(n) => {
            cmd(s, now_ms, Op::CancelArray { array: arrays[n % arrays.len()] }).map_err(e)?;
        }
        Act::LoseNode => {
            let node = Name::lit("n1");
            cmd(s, now_ms, Op::SetNodeStatus { node: node.clone(), status: NodeStatus::Lost }).map_err(e)?;
            cmd(s, now_ms, Op::SetNodeStatus { node, status: NodeStatus::Ready }).map_err(e)?;
        }
    }
    Ok(())
}

fn run(world: &[ArrayGen], acts: &[Act]) -> Result<(), String> {
    let mut s = State::new();
    cmd(&mut s, 0, Op::RegisterNodes(vec![gpu_node("n1", 6)])).map_err(|e| e.to_string())?;
    cmd(&mut s, 0, Op::PutQueue(gpu_queue("q", 6))).map_err(|e| e.to_string())?;
    let (mut arrays, mut waiters) = (Vec::new(), Vec::new());
    for (i, g) in world.iter().enumerate() {
        let array = ArraySpec { first: i as u32 * 7, count: g.count, max_running: g.max_running };
        let spec = gpu_job(&name(i), "q", g.gpus);
        let op = Op::SubmitArray { spec, array, request_id: None, run_as: None, after: Vec::new() };
        cmd(&mut s, 1_000, op).map_err(|e| format!("submit {}: {e}", name(i)))?;
        arrays.push(s.array_by_name(&name(i)).ok_or("the array was not kept")?.id);
        let after = vec![After { job: JobRef::Name(Name::lit(&name(i))), when: When::Ok }];
        let op = Op::SubmitAfter { spec: gpu_job(&format!("w{i}"), "q", 1), request_id: None, run_as: None, after };
        cmd(&mut s, 1_000, op).map_err(|e| format!("submit w{i}: {e}"))?;
        waiters.push(s.job_by_name(&format!("w{i}")).ok_or("the waiter was not kept")?.id);
    }
    let mut now_ms = 2_000;
    check(&s, &arrays, &waiters)?;
    for a in acts {
        settle(&mut s, now_ms, false)?;
        check(&s, &arrays, &waiters)?;
        now_ms += 1_000;
        act(&mut s, now_ms, a, &arrays)?;
        check(&s, &arrays, &waiters)?;
    }
    settle(&mut s, now_ms, false)?;
    check(&s, &arrays, &waiters)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: super::proptests::cases(96), ..ProptestConfig::default() })]

    #[test]
    fn an_array_keeps_max_running_its_window_and_its_tally(world in arrays(), acts in acts()) {
        run(&world, &acts).map_err(TestCaseError::fail)?;
    }
}
