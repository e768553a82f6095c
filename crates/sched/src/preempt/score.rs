//! Comparing victim sets across placements and pools (docs/policy.md section 5): fewest
//! victims from the preemptor's own queue, then the victims' priorities from the highest
//! down, then fewer victims, less lost work, the victims' ranks, fewer racks, node order.
//! Jobs already leaving cost nothing.

use std::cmp::Ordering;

use super::cand::{Cand, RankKey};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Score {
    own: u32,
    /// (priority, how many victims at it), highest priority first.
    priorities: Vec<(i32, u32)>,
    count: u32,
    lost: u128,
    ranks: Vec<RankKey>,
    racks: u32,
    nodes: Vec<usize>,
}

impl Score {
    pub fn of(victims: &[&Cand], now_ms: u64, racks: u32, mut nodes: Vec<usize>) -> Score {
        let costly: Vec<&&Cand> = victims.iter().filter(|c| !c.leaving).collect();
        let mut priorities: Vec<(i32, u32)> = Vec::new();
        let mut prios: Vec<i32> = costly.iter().map(|c| c.priority).collect();
        prios.sort_unstable_by(|a, b| b.cmp(a));
        for p in prios {
            match priorities.last_mut() {
                Some((q, n)) if *q == p => *n += 1,
                _ => priorities.push((p, 1)),
            }
        }
        let mut ranks: Vec<RankKey> = victims.iter().map(|c| c.rank()).collect();
        ranks.sort_unstable();
        nodes.sort_unstable();
        Score {
            own: costly.iter().filter(|c| c.own).count() as u32,
            priorities,
            count: costly.len() as u32,
            lost: costly.iter().map(|c| c.lost_work(now_ms)).sum(),
            ranks,
            racks,
            nodes,
        }
    }
}

fn cmp_priorities(a: &[(i32, u32)], b: &[(i32, u32)]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        // A lower highest priority is better; at the same priority, fewer victims.
        let o = x.0.cmp(&y.0).then(x.1.cmp(&y.1));
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

impl Ord for Score {
    fn cmp(&self, o: &Self) -> Ordering {
        self.own
            .cmp(&o.own)
            .then_with(|| cmp_priorities(&self.priorities, &o.priorities))
            .then_with(|| self.count.cmp(&o.count))
            .then_with(|| self.lost.cmp(&o.lost))
            .then_with(|| self.ranks.cmp(&o.ranks))
            .then_with(|| self.racks.cmp(&o.racks))
            .then_with(|| self.nodes.cmp(&o.nodes))
    }
}

impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(job: u64, priority: i32, own: bool) -> Cand {
        Cand { job, queue: 0, own, leaving: false, priority, progress_mark_ms: 0, submitted: (0, job), gpus: 1 }
    }

    #[test]
    fn a_set_topped_by_priority_50_beats_one_that_preempts_a_75() {
        let (a, b, c) = (cand(1, 50, false), cand(2, 50, false), cand(3, 75, false));
        let two_at_50 = Score::of(&[&a, &b], 10, 1, vec![0]);
        let one_at_75 = Score::of(&[&c], 10, 1, vec![0]);
        assert!(two_at_50 < one_at_75);
    }

    #[test]
    fn rank_bits_order_like_rank() {
        let mut all = Vec::new();
        for (job, leaving, own, priority, mark, submitted) in [
            (1, false, false, -5, 10, (3, 1)),
            (2, true, false, 7, 0, (0, 0)),
            (3, false, true, i32::MIN, u64::MAX, (u64::MAX, 2)),
            (4, false, false, i32::MAX, 10, (3, 2)),
            (5, false, false, -5, 10, (3, 0)),
            (6, false, false, -5, 11, (3, 1)),
            (7, false, true, 0, 0, (0, 9)),
            (8, false, false, -5, 10, (3, 1)),
        ] {
            let mut c = cand(job, priority, own);
            (c.leaving, c.progress_mark_ms, c.submitted) = (leaving, mark, submitted);
            all.push(c);
        }
        for a in &all {
            for b in &all {
                assert_eq!(a.rank().cmp(&b.rank()), a.rank_bits().cmp(&b.rank_bits()), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn own_queue_victims_weigh_first_then_count() {
        let (a, b, c) = (cand(1, 10, true), cand(2, 10, false), cand(3, 10, false));
        assert!(Score::of(&[&b, &c], 0, 1, vec![0]) < Score::of(&[&a], 0, 1, vec![0]));
        assert!(Score::of(&[&b], 0, 1, vec![0]) < Score::of(&[&b, &c], 0, 1, vec![0]));
    }
}
