//! Kueue's greedy walk with fill-back, on one set of touched nodes: take candidates in rank
//! order until the job fits, then give back, in reverse rank order, every victim it can do
//! without, until none can be given back. What remains is minimal.

use std::collections::BTreeMap;

use baton_model::elastic::gang_of_excess;
use baton_model::job::JobId;
use baton_model::ledger::Removed;

use super::cand::{Cand, Ctx};
use crate::needs::Needs;
use crate::nodes::SetNodes;
use crate::pack::{Packing, pack};
use crate::view::View;

/// decisions.md section 13: which candidates are an elastic gang's part above its minimum
/// and which the rest of that gang, by index. Taking the rest stops the whole gang, so its
/// part is taken with it and never given back while the rest stays taken.
#[derive(Default, PartialEq)]
pub struct Parts {
    part_of_rest: BTreeMap<usize, usize>,
    rest_of_part: BTreeMap<usize, usize>,
}

impl Parts {
    pub fn of(cands: &[Cand]) -> Parts {
        let mut parts = Parts::default();
        // Few parts among many candidates (none without elastic gangs): look them up.
        let part_of_gang: BTreeMap<JobId, usize> =
            cands.iter().enumerate().filter_map(|(i, c)| gang_of_excess(c.job).map(|g| (g, i))).collect();
        if part_of_gang.is_empty() {
            return parts;
        }
        for (rest, c) in cands.iter().enumerate() {
            if let Some(&part) = part_of_gang.get(&c.job) {
                parts.part_of_rest.insert(rest, part);
                parts.rest_of_part.insert(part, rest);
            }
        }
        parts
    }
}

pub struct Walked {
    /// Indices into the candidate list, in rank order.
    pub victims: Vec<usize>,
    pub packing: Packing,
}

/// Does the job fit on `nodes`, quota included, with `removed` gone (their usage is already
/// out of the ledger)?
fn fits(
    view: &View,
    ctx: &Ctx,
    needs: &Needs,
    pool_choice: &[usize],
    nodes: &[usize],
    removed: &[JobId],
) -> Option<Packing> {
    view.ledger.check_admission(ctx.queue, &ctx.demand, ctx.np).ok()?;
    let set = SetNodes::new(view, ctx.job.id, removed, nodes);
    pack(&set, needs, pool_choice)
}

#[allow(clippy::too_many_arguments)]
pub fn walk(
    view: &mut View,
    ctx: &Ctx,
    needs: &Needs,
    pool_choice: &[usize],
    nodes: &[usize],
    cands: &[Cand],
    parts: &Parts,
    on: &[usize],
) -> Option<Walked> {
    let mut taken: Vec<usize> = Vec::new();
    // Taken victims' usage is out of the ledger while the walk looks for room.
    let mut removed = Removed::default();
    let ids = |t: &[usize]| -> Vec<JobId> { t.iter().map(|&i| cands[i].job).collect() };
    loop {
        if fits(view, ctx, needs, pool_choice, nodes, &ids(&taken)).is_some() {
            break;
        }
        let next = on
            .iter()
            .copied()
            .filter(|i| !taken.contains(i) && ctx.valid(&view.ledger, &cands[*i]))
            .min_by(|&a, &b| ctx.cmp_rank(&view.ledger, &cands[a], &cands[b]));
        let Some(i) = next else {
            view.ledger.put_back_all(removed);
            return None;
        };
        view.ledger.remove(&mut removed, cands[i].job);
        taken.push(i);
        if let Some(&part) = parts.part_of_rest.get(&i).filter(|p| !taken.contains(p)) {
            view.ledger.remove(&mut removed, cands[part].job);
            taken.push(part);
        }
    }
    fill_back(view, ctx, needs, pool_choice, nodes, cands, parts, &mut taken, &mut removed);
    let packing = fits(view, ctx, needs, pool_choice, nodes, &ids(&taken));
    view.ledger.put_back_all(removed);
    taken.sort_by(|&a, &b| cands[a].rank().cmp(&cands[b].rank()));
    packing.map(|packing| Walked { victims: taken, packing })
}

#[allow(clippy::too_many_arguments)]
fn fill_back(
    view: &mut View,
    ctx: &Ctx,
    needs: &Needs,
    pool_choice: &[usize],
    nodes: &[usize],
    cands: &[Cand],
    parts: &Parts,
    taken: &mut Vec<usize>,
    removed: &mut Removed,
) {
    loop {
        let mut order = taken.clone();
        order.sort_by(|&a, &b| ctx.cmp_rank(&view.ledger, &cands[b], &cands[a]));
        let mut returned = false;
        for i in order {
            // A gang's part stays taken while the rest of it is.
            if parts.rest_of_part.get(&i).is_some_and(|rest| taken.contains(rest)) {
                continue;
            }
            view.ledger.put_back(removed, cands[i].job);
            let rest: Vec<usize> = taken.iter().copied().filter(|&t| t != i).collect();
            let rest_ids: Vec<JobId> = rest.iter().map(|&t| cands[t].job).collect();
            let still_valid = valid_in_order(view, ctx, cands, parts, &rest, removed);
            if still_valid && fits(view, ctx, needs, pool_choice, nodes, &rest_ids).is_some() {
                *taken = rest;
                returned = true;
            } else {
                view.ledger.remove(removed, cands[i].job);
            }
        }
        if !returned {
            return;
        }
    }
}

/// Whether `set` could have been taken in rank order, each victim valid at its turn with
/// the ones before it gone. Leaves every victim of `set` taken again.
///
/// An elastic gang with both its part and the rest in `set` is one victim, judged once at
/// its first turn (its part ranks just before the rest) by the rest's validity, and taken
/// whole: as the walk takes it (the rest brings its part along; a part taken alone first,
/// the rest was valid then too, with more of its queue still in use). Judged apart, the rest
/// came after its own part had been given up and could be refused where the walk had
/// taken it, so no victim of such a set could be given back, and a set with a victim it
/// did not need was kept (found by the elastic property tests).
fn valid_in_order(
    view: &mut View,
    ctx: &Ctx,
    cands: &[Cand],
    parts: &Parts,
    set: &[usize],
    removed: &mut Removed,
) -> bool {
    for t in set {
        debug_assert!(removed.contains(cands[*t].job), "a taken victim's usage is out of the ledger");
        view.ledger.put_back(removed, cands[*t].job);
    }
    let mut left: Vec<usize> = set.to_vec();
    let mut ok = true;
    while !left.is_empty() {
        let pos = (0..left.len())
            .min_by(|&a, &b| ctx.cmp_rank(&view.ledger, &cands[left[a]], &cands[left[b]]))
            .expect("not empty");
        let t = left.remove(pos);
        // Both halves of a gang in the set: judged by its rest, taken together.
        let (judged, with) = match (parts.rest_of_part.get(&t), parts.part_of_rest.get(&t)) {
            (Some(&rest), _) if left.contains(&rest) => (rest, Some(rest)),
            (_, Some(&part)) if left.contains(&part) => (t, Some(part)),
            _ => (t, None),
        };
        ok &= ctx.valid(&view.ledger, &cands[judged]);
        view.ledger.remove(removed, cands[t].job);
        if let Some(other) = with {
            left.retain(|&l| l != other);
            view.ledger.remove(removed, cands[other].job);
        }
    }
    ok
}
