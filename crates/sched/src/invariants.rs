//! The invariants every state must hold, checked by the property tests after each change and
//! by the whole-cluster simulator after each applied command on every replica.

use std::collections::{BTreeMap, BTreeSet};

use baton_model::alloc::gpu_mask;
use baton_model::job::{JobId, JobState};
use baton_model::ledger::{GPU_KIND, Vector, ZERO, add};
use baton_model::limits::MAX_RESOURCE_KINDS;
use baton_model::name::Name;
use baton_model::state::State;

/// Every invariant of a state, whatever commands led to it: the ledger agrees with a
/// rebuild, gangs are whole, no node is over-allocated (counting what suspended jobs hold)
/// and no GPU used twice (a suspended job's only by the job it lends them to), no queue
/// borrows beyond its limit. The first broken one, named.
pub fn check_state(s: &State) -> Result<(), String> {
    s.ledger_consistent()?;
    let l = s.ledger();
    let mut used: BTreeMap<Name, (Vector, u64)> = BTreeMap::new();
    let mut shared: BTreeMap<(Name, u32), u64> = BTreeMap::new();
    for j in s.jobs().values() {
        let expected = if matches!(j.state, JobState::Running | JobState::Preempting | JobState::Suspended) {
            j.spec.replica_count() as usize
        } else {
            0
        };
        if j.replicas.len() != expected {
            return Err(format!(
                "job {} is {:?} with {} of {} replicas (gangs are all or nothing)",
                j.spec.name,
                j.state,
                j.replicas.len(),
                expected
            ));
        }
        let held = j.state == JobState::Suspended;
        if !j.state.is_active() && !held && s.completing(j.id).is_none() {
            continue;
        }
        // The ranks of an ended attempt still being stopped hold their GPUs too.
        let completing = s.completing(j.id).map(|c| c.ranks.values().collect::<Vec<_>>()).unwrap_or_default();
        for r in j.replicas.iter().chain(completing) {
            let mut need = l.kinds.vector_lossy(&j.spec.tasks[r.task as usize].resources);
            let fraction = j.spec.tasks[r.task as usize].resources.gpu_fraction();
            if fraction > 0 {
                // A fraction of a shared GPU (decisions.md section 11): summed per GPU below.
                for &g in &r.gpus {
                    *shared.entry((r.node.clone(), g)).or_insert(0) += fraction;
                }
                let e = used.entry(r.node.clone()).or_insert(([0; MAX_RESOURCE_KINDS], 0));
                (0..MAX_RESOURCE_KINDS).for_each(|k| e.0[k] += need[k]);
                continue;
            }
            let mut m = gpu_mask(&r.gpus);
            if !j.state.is_active() {
                // A job suspended in place holds its share but what it lends to the job
                // that runs on it; so do its ranks being stopped once it is requeued.
                let (lent, lent_gpus) = lent_by(s, j.id, &r.node);
                baton_model::ledger::sub(&mut need, &lent);
                m &= !lent_gpus;
            }
            let e = used.entry(r.node.clone()).or_insert(([0; MAX_RESOURCE_KINDS], 0));
            for k in 0..MAX_RESOURCE_KINDS {
                e.0[k] += need[k];
            }
            if e.1 & m != 0 {
                return Err(format!("a GPU on {} is used by two replicas at once", r.node));
            }
            e.1 |= m;
        }
    }
    for ((node, g), milli) in &shared {
        if *milli > baton_model::ledger::GPU_MILLI {
            return Err(format!("GPU {g} of {node} holds fractions adding up to {milli} thousandths"));
        }
        if used.get(node).is_some_and(|e| e.1 & (1u64 << g) != 0) {
            return Err(format!("GPU {g} of {node} holds a fraction and is given whole too"));
        }
    }
    for (node, (amount, _)) in &used {
        let cap = l.kinds.vector_lossy(&s.nodes()[node].spec.resources);
        if (0..MAX_RESOURCE_KINDS).any(|k| amount[k] > cap[k]) {
            return Err(format!("node {node} is over-allocated: {amount:?} > {cap:?}; {}", holders_of(s, node)));
        }
    }
    // A suspended job's GPUs are used only by the job it lends them to.
    for v in s.jobs().values().filter(|j| j.state == JobState::Suspended) {
        for r in &v.replicas {
            for other in s.jobs().values().filter(|j| j.state.is_active()) {
                let theirs: BTreeSet<u32> =
                    other.replicas.iter().filter(|x| x.node == r.node).flat_map(|x| x.gpus.clone()).collect();
                let lent: BTreeSet<u32> = other
                    .lent_from
                    .iter()
                    .filter(|x| x.from == v.id && x.node == r.node)
                    .flat_map(|x| x.gpus.clone())
                    .collect();
                if let Some(g) = r.gpus.iter().find(|g| theirs.contains(g) && !lent.contains(g)) {
                    return Err(format!(
                        "suspended {}'s GPU {g} on {} is used by {}",
                        v.spec.name, r.node, other.spec.name
                    ));
                }
            }
        }
    }
    check_gpu_usage(s)?;
    check_levels(s)?;
    check_waits(s)?;
    check_windows(s)?;
    check_gpu_faults(s)?;
    check_arrays(s)?;
    check_elastic(s)?;
    for q in &l.queues {
        for p in 0..l.pools.len() {
            for k in 0..MAX_RESOURCE_KINDS {
                if q.borrowed(p, k) > q.borrow_limit[p][k] {
                    return Err(format!(
                        "queue {} borrows {} > limit {}",
                        q.name,
                        q.borrowed(p, k),
                        q.borrow_limit[p][k]
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Quota counts GPUs exactly (decisions.md section 11: fractions too): each queue's GPU usage
/// in each pool, in thousandths, is what its running jobs that are not leaving hold there,
/// and what its preemptors' reservations hold for them.
fn check_gpu_usage(s: &State) -> Result<(), String> {
    let l = s.ledger();
    let mut held: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let mut count = |queue: &Name, task: &baton_model::job::TaskSpec, node: &Name| {
        let (Some(&q), Some(&n)) = (l.queue_ix.get(queue.as_str()), l.node_ix.get(node.as_str())) else { return };
        *held.entry((q, l.nodes[n].pool)).or_default() += task.resources.gpus_milli();
    };
    for j in s.jobs().values().filter(|j| j.state == JobState::Running && !j.is_leaving()) {
        for r in &j.replicas {
            count(&j.spec.queue, &j.spec.tasks[r.task as usize], &r.node);
        }
    }
    for r in s.reservations().values() {
        let j = &s.jobs()[&r.job];
        for a in &r.replicas {
            count(&j.spec.queue, &j.spec.tasks[a.task as usize], &a.node);
        }
    }
    for (qi, q) in l.queues.iter().enumerate() {
        for p in 0..l.pools.len() {
            let (charged, runs) = (q.usage[p][GPU_KIND], held.get(&(qi, p)).copied().unwrap_or(0));
            if charged != runs {
                return Err(format!(
                    "queue {} is charged {charged} thousandths of GPUs in pool {} but holds {runs}",
                    q.name, l.pools[p].name
                ));
            }
        }
    }
    Ok(())
}

/// decisions.md section 10: a job that requires a topology level runs (or is reserved) in
/// one domain of it.
fn check_levels(s: &State) -> Result<(), String> {
    let l = s.ledger();
    for j in s.jobs().values().filter(|j| !j.replicas.is_empty()) {
        let Some(required) = j.spec.topology.and_then(|t| t.required()) else { continue };
        let nodes: BTreeSet<usize> = j.replicas.iter().filter_map(|r| l.node(r.node.as_str())).collect();
        let domains: BTreeSet<u32> = match l.level(&required) {
            _ if required.is_node() => nodes.iter().map(|&n| n as u32).collect(),
            Some(level) => nodes.iter().map(|&n| l.nodes[n].domains[level]).collect(),
            None => return Err(format!("job {} requires level {required}, which is not declared", j.spec.name)),
        };
        if domains.len() > 1 {
            return Err(format!("job {} requires one {required} and spans {} of them", j.spec.name, domains.len()));
        }
    }
    Ok(())
}

/// decisions.md section 13: a held job is unfinished and has never started (a held array
/// has no element yet), and waits only for what does not hold yet and still can (a
/// dependency that held or broke is settled in the command that decided it).
fn check_waits(s: &State) -> Result<(), String> {
    use baton_model::after::{Standing, standing};
    for (id, waits) in s.waits() {
        let name = match (s.job(*id), s.array(*id)) {
            (Some(j), _) if j.state.is_finished() || j.attempt > 0 || waits.is_empty() => {
                return Err(format!("job {} is held while {:?} at attempt {}", j.spec.name, j.state, j.attempt));
            }
            (Some(j), _) => &j.spec.name,
            (None, Some(a)) if a.created > 0 || a.is_finished() => {
                return Err(format!("array {} is held with {} elements created", a.spec.name, a.created));
            }
            (None, Some(a)) => &a.spec.name,
            (None, None) => return Err(format!("job {id} waits but is not kept")),
        };
        for w in waits {
            let (target, st) = match (s.job(w.job), s.array(w.job)) {
                (Some(t), _) => (&t.spec.name, standing(w.when, t)),
                (None, Some(a)) => (&a.spec.name, a.standing(w.when)),
                (None, None) => return Err(format!("{name} waits for job {}, not kept", w.job)),
            };
            if st != Standing::Waits {
                return Err(format!("{name} still waits for {target} ({:?}), which stands {st:?}", w.when));
            }
        }
    }
    Ok(())
}

/// decisions.md section 13: an array has at most `max_running` elements unfinished and at
/// most the window of elements that never started; its live elements are its unfinished
/// ones; it has ended exactly when every element has.
fn check_arrays(s: &State) -> Result<(), String> {
    use baton_model::limits::ARRAY_PENDING_WINDOW;
    for a in s.arrays().values() {
        let n = &a.spec.name;
        let mut never_started = 0;
        for (index, id) in &a.live {
            let j = s.job(*id).ok_or_else(|| format!("element {index} of array {n} (job {id}) is not kept"))?;
            if j.state.is_finished() || s.element_of(*id).map(|(x, i)| (x.id, i)) != Some((a.id, *index)) {
                return Err(format!("element {index} of array {n} is live while {:?}", j.state));
            }
            never_started += u32::from(j.attempt == 0);
        }
        if a.array.max_running.is_some_and(|m| a.live.len() > m as usize) {
            return Err(format!(
                "array {n} has {} elements unfinished, max_running {:?}",
                a.live.len(),
                a.array.max_running
            ));
        }
        if never_started > ARRAY_PENDING_WINDOW {
            return Err(format!("array {n} has {never_started} elements created and never started"));
        }
        let ended = a.live.is_empty() && (a.cancelled || a.created == a.array.count);
        if a.is_finished() != ended || a.tally.ended() > a.array.count {
            return Err(format!("array {n}: finished {}, tally {:?}, {} live", a.is_finished(), a.tally, a.live.len()));
        }
    }
    Ok(())
}

/// decisions.md section 13: an elastic gang never runs below its minimum nor above its
/// `replicas`; its spec holds the size it runs with, and its placement covers exactly that
/// (ranks 0..size); a gang to start again at once is stopping to grow or preempted (then
/// it shrinks to exactly its minimum), and one stopping to grow knows where.
fn check_elastic(s: &State) -> Result<(), String> {
    for (&id, e) in s.elastic_gangs() {
        let j = s.job(id).ok_or(format!("elastic job {id} is not kept"))?;
        let n = &j.spec.name;
        let size = e.size(&j.spec);
        if !e.allows(size) {
            return Err(format!("elastic gang {n}: its spec holds {size} replicas, range {}..={}", e.min, e.max));
        }
        if j.state.is_active() || j.state == JobState::Suspended {
            let mut indices: Vec<u32> = j.replicas.iter().filter(|r| r.task == e.task).map(|r| r.index).collect();
            indices.sort_unstable();
            if indices != (0..size).collect::<Vec<_>>() {
                return Err(format!("elastic gang {n} ({:?}) runs ranks {indices:?}, its spec says {size}", j.state));
            }
        }
        use baton_model::job::StopWhy;
        let why = j.stopping.map(|st| st.why);
        let restarts = s.restart_of(id).is_some();
        let may_restart = matches!(why, Some(StopWhy::Grow | StopWhy::Preempted { .. }));
        if restarts && !may_restart || why == Some(StopWhy::Grow) && !restarts {
            return Err(format!(
                "elastic gang {n} ({:?}, {why:?}): where it starts again and its stop disagree",
                j.state
            ));
        }
        if let Some(kept) = s.restart_of(id).filter(|_| matches!(why, Some(StopWhy::Preempted { .. })))
            && kept.iter().filter(|r| r.task == e.task).count() as u32 != e.min
        {
            return Err(format!("elastic gang {n} shrinks to {} replicas, not its minimum {}", kept.len(), e.min));
        }
    }
    Ok(())
}

/// decisions.md section 14: a started window's nodes are out of the capacity, and no job
/// runs there (the command that starts a window begins the stop of what ran there, and
/// nothing is placed there until its end).
fn check_windows(s: &State) -> Result<(), String> {
    let l = s.ledger();
    for w in s.windows().values().filter(|w| w.active) {
        for node in &w.spec.nodes {
            if l.node(node.as_str()).is_some_and(|n| l.nodes[n].schedulable) {
                return Err(format!("node {node} of started window {} is schedulable", w.spec.name));
            }
            let running =
                |j: &&baton_model::job::Job| j.state == JobState::Running && j.replicas.iter().any(|r| &r.node == node);
            if let Some(j) = s.jobs().values().find(running) {
                return Err(format!("{} runs on {node} during maintenance window {}", j.spec.name, w.spec.name));
            }
        }
    }
    Ok(())
}

/// decisions.md section 14: no job runs on an unhealthy GPU (the command that records the
/// fault begins the stop of what ran there, and nothing is placed there until it is
/// cleared), and the GPU is out of its node's free GPUs.
fn check_gpu_faults(s: &State) -> Result<(), String> {
    let l = s.ledger();
    for node in s.gpu_faults().keys() {
        let bad = s.unhealthy_gpus(node);
        if let Some(n) = l.node(node.as_str())
            && l.nodes[n].free_gpus & bad != 0
        {
            return Err(format!("an unhealthy GPU of {node} is counted free"));
        }
        let on_bad = |j: &&baton_model::job::Job| {
            j.state == JobState::Running && j.replicas.iter().any(|r| &r.node == node && gpu_mask(&r.gpus) & bad != 0)
        };
        if let Some(j) = s.jobs().values().find(on_bad) {
            return Err(format!("{} runs on an unhealthy GPU of {node}", j.spec.name));
        }
    }
    Ok(())
}

/// Who holds `node`, as the jobs and the ledger say, for the message that names an
/// over-allocation (built only then: the check runs after every change).
fn holders_of(s: &State, node: &Name) -> String {
    let jobs: Vec<String> = s
        .jobs()
        .values()
        .filter(|j| {
            let completing = s.completing(j.id).is_some_and(|c| c.ranks.values().any(|r| r.node == *node));
            let here = j.replicas.iter().any(|r| r.node == *node);
            completing || ((j.state.is_active() || j.state == JobState::Suspended) && here)
        })
        .map(|j| {
            let lends: Vec<String> = j
                .lent_from
                .iter()
                .filter(|x| x.node == *node)
                .map(|x| format!("{:?} from job {}", x.resources, x.from))
                .collect();
            format!("job {} {:?} (suspended for {:?}, borrows [{}])", j.id, j.state, j.suspended_for, lends.join(", "))
        })
        .collect();
    let l = s.ledger();
    let occupants = l.node(node.as_str()).map(|n| format!("{:?}", l.nodes[n].occupants)).unwrap_or_default();
    format!("held by {}; the ledger's occupants: {occupants}", jobs.join(", "))
}

/// What running jobs record as lent to them by `holder` on `node`.
fn lent_by(s: &State, holder: JobId, node: &Name) -> (Vector, u64) {
    let l = s.ledger();
    let (mut amount, mut gpus) = (ZERO, 0u64);
    // A borrower lends back nothing while it runs on the lent part, nothing while its
    // rank there is being stopped either (it was requeued or cancelled): the ledger keeps
    // the lend until that rank is gone (`keep_borrowed`), and nothing while it is itself
    // suspended there (what it holds, the lend included, is lent on to its own preemptor,
    // or held against everyone else).
    let still_there = |j: &baton_model::job::Job| {
        let suspended_here = j.state == JobState::Suspended && j.replicas.iter().any(|r| r.node == *node);
        j.state.is_active()
            || suspended_here
            || s.completing(j.id).is_some_and(|c| c.ranks.values().any(|r| r.node == *node))
    };
    for j in s.jobs().values().filter(|j| still_there(j)) {
        for lend in j.lent_from.iter().filter(|x| x.from == holder && x.node == *node) {
            add(&mut amount, &l.kinds.vector_lossy(&lend.resources));
            gpus |= gpu_mask(&lend.gpus);
        }
    }
    (amount, gpus)
}
