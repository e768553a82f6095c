//! Evaluating `expect:` blocks against the state once an instant has settled.

use std::collections::BTreeMap;
use std::fmt;

use baton_model::job::Job;
use baton_model::name::Name;
use baton_model::resources::Resources;
use baton_model::state::State;

use crate::output::Secs;
use crate::scenario::{Expect, JobExpect, NodesExpect, UsageExpect};

/// An expectation that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub at_ms: u64,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}s (line {}): {}", Secs(self.at_ms), self.line, self.message)
    }
}

struct Checker {
    at_ms: u64,
    checked: usize,
    failures: Vec<Failure>,
}

impl Checker {
    fn expect(&mut self, line: usize, ok: bool, message: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.failures.push(Failure { at_ms: self.at_ms, line, message: message() });
        }
    }
}

/// Checks one block; returns how many things were checked and what failed.
pub fn check(e: &Expect, state: &State, victims: &BTreeMap<Name, Vec<Name>>) -> (usize, Vec<Failure>) {
    let mut c = Checker { at_ms: e.at_ms, checked: 0, failures: Vec::new() };
    for j in &e.jobs {
        let (name, want) = &j.v;
        match state.job_by_name(name.as_str()) {
            Some(job) => check_job(&mut c, j.line, state, job, want),
            None => c.expect(j.line, false, || format!("job {name}: not submitted yet")),
        }
    }
    for q in &e.queues {
        let (name, want) = &q.v;
        let actual = crate::output::queues(state);
        let Some(got) = actual.get(name) else {
            continue;
        };
        check_usage(&mut c, q.line, &format!("queue {name}"), &to_res(&got.usage), &to_res(&got.nominal), &want.total);
        for (pool, want) in &want.pools {
            let (u, n) = got.pools.get(pool).map(|p| (to_res(&p.usage), to_res(&p.nominal))).unwrap_or_default();
            check_usage(&mut c, q.line, &format!("queue {name} in pool {pool}"), &u, &n, want);
        }
    }
    for v in &e.victims_of {
        let (name, want) = &v.v;
        let mut got: Vec<Name> = victims.get(name).cloned().unwrap_or_default();
        got.sort();
        got.dedup();
        let mut want = want.clone();
        want.sort();
        c.expect(v.line, got == want, || format!("victims of {name} are {}, expected {}", list(&got), list(&want)));
    }
    for v in &e.victims_count {
        let (name, want) = &v.v;
        let got = victims.get(name).map_or(0, Vec::len);
        c.expect(v.line, got == *want as usize, || format!("{name} preempted {got} jobs so far, expected {want}"));
    }
    for p in &e.placed_on {
        let (name, want) = &p.v;
        let got: Vec<Name> =
            state.job_by_name(name.as_str()).map(|j| j.nodes().into_keys().collect()).unwrap_or_default();
        let mut want = want.clone();
        want.sort();
        c.expect(p.line, got == want, || format!("{name} runs on {}, expected {}", list(&got), list(&want)));
    }
    let users = crate::output::users(state, e.at_ms);
    for u in &e.users {
        let (name, want) = &u.v;
        for (r, w) in want {
            let got = users.get(name).and_then(|x| x.usage.get(r)).copied().unwrap_or(0.0);
            // Written rounded: within a thousandth, or half a resource-second.
            let close = (got - w).abs() <= (w.abs() * 1e-3).max(0.5);
            c.expect(u.line, close, || format!("user {name}'s decayed {r} usage is {got:.3}, expected {w}"));
        }
    }
    for n in &e.counts {
        let (st, want) = n.v;
        let got = state.jobs().values().filter(|j| j.state == st).count();
        c.expect(n.line, got == want as usize, || format!("{got} jobs are {}, expected {want}", st.as_str()));
    }
    (c.checked, c.failures)
}

fn list(v: &[Name]) -> String {
    let names: Vec<&str> = v.iter().map(Name::as_str).collect();
    format!("[{}]", names.join(", "))
}

fn to_res(m: &BTreeMap<String, u64>) -> Resources {
    m.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

fn check_job(c: &mut Checker, line: usize, state: &State, job: &Job, want: &JobExpect) {
    let name = &job.spec.name;
    if let Some(s) = want.state {
        c.expect(line, job.state == s, || {
            format!("job {name}: state is {}, expected {}", job.state.as_str(), s.as_str())
        });
    }
    if let Some(g) = want.gpus {
        let (got, th) = (job.gpus_milli(), baton_model::quantity::thousandths);
        c.expect(line, got == g, || format!("job {name}: holds {} GPUs, expected {}", th(got), th(g)));
    }
    if let Some(a) = want.attempt {
        c.expect(line, job.attempt == a, || format!("job {name}: attempt is {}, expected {a}", job.attempt));
    }
    if let Some(by) = &want.preempted_by {
        let got = job.preempted_by.and_then(|p| state.job(p)).map(|p| p.spec.name.clone());
        let show = |n: &Option<Name>| n.as_ref().map_or("nobody".to_string(), Name::to_string);
        c.expect(line, &got == by, || format!("job {name}: preempted by {}, expected {}", show(&got), show(by)));
    }
    if let Some(p) = &want.pool {
        let got = job.replicas.first().and_then(|r| state.nodes().get(&r.node)).map(|n| n.spec.pool.clone());
        c.expect(line, got.as_ref() == Some(p), || {
            format!(
                "job {name}: pool is {}, expected {p}",
                got.as_ref().map_or("none (not placed)".into(), Name::to_string)
            )
        });
    }
    if let Some(n) = &want.nodes {
        let got = job.nodes();
        let ok = match n {
            NodesExpect::Names(names) => {
                let mut w = names.clone();
                w.sort();
                got.keys().cloned().collect::<Vec<_>>() == w
            }
            NodesExpect::Exact(m) => &got == m,
        };
        c.expect(line, ok, || format!("job {name}: runs on {got:?}, expected {n:?}"));
    }
    if let Some(q) = &want.queue {
        c.expect(line, &job.spec.queue == q, || format!("job {name}: queue is {}, expected {q}", job.spec.queue));
    }
    if let Some(r) = &want.reason {
        c.expect(line, job.reason.contains(r.as_str()), || {
            format!("job {name}: reason is {:?}, expected it to contain {r:?}", job.reason)
        });
    }
}

fn check_usage(c: &mut Checker, line: usize, what: &str, usage: &Resources, nominal: &Resources, want: &UsageExpect) {
    for (label, got, want) in [("usage", usage, &want.usage), ("nominal", nominal, &want.nominal)] {
        let Some(want) = want else { continue };
        for (k, v) in want.iter().filter(|(k, _)| *k != baton_model::resources::GPU_FRACTION) {
            if k == baton_model::resources::GPU {
                let (g, v, th) = (got.gpus_milli(), want.gpus_milli(), baton_model::quantity::thousandths);
                c.expect(line, g == v, || format!("{what}: {label} of gpu is {}, expected {}", th(g), th(v)));
                continue;
            }
            let g = got.get(k);
            c.expect(line, g == v, || format!("{what}: {label} of {k} is {g}, expected {v}"));
        }
    }
}
