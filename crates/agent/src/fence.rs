//! Fencing leaders by `(term, leader_id)`. Pure: the caller persists what `check` says to
//! remember, and only then acts on the directive.
//!
//! - A term below the highest seen comes from a deposed leader: refused.
//! - An equal term from another leader id is refused: Raft elects at most one leader per
//!   term, so two ids in one term means one of them is not the leader this agent followed.
//! - A term more than `MAX_TERM_JUMP` above the highest seen is refused and never persisted:
//!   remembering a damaged or hostile term near `u64::MAX` would make the agent refuse every
//!   real leader from then on. Real terms grow by one per election; no cluster holds 2^32
//!   elections while an agent is away.
//!
//! A refused directive never changes what is remembered.

/// How far above the highest seen term a directive's term may be.
pub const MAX_TERM_JUMP: u64 = 1 << 32;

/// The highest term seen and the leader first seen in it (`None`: not known, e.g. a
/// journal written before leader ids were remembered, or term 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fence {
    pub term: u64,
    pub leader_id: Option<u64>,
}

/// Why a directive (or reply) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("term {term} is below the highest seen ({seen}): a deposed leader")]
    LowerTerm { term: u64, seen: u64 },
    #[error("term {term} comes from leader {leader_id}, but leader {first} was seen first in that term")]
    OtherLeader { term: u64, leader_id: u64, first: u64 },
    #[error("term {term} is more than 2^32 above the highest seen ({seen}): not believed, not remembered")]
    TooFarAhead { term: u64, seen: u64 },
}

impl Fence {
    /// Whether a message of `(term, leader_id)` may be obeyed; if so, the fence to remember
    /// from then on (equal to `self` when nothing new was learnt).
    pub fn check(&self, term: u64, leader_id: u64) -> Result<Fence, Refused> {
        if term < self.term {
            return Err(Refused::LowerTerm { term, seen: self.term });
        }
        if term - self.term > MAX_TERM_JUMP {
            return Err(Refused::TooFarAhead { term, seen: self.term });
        }
        if term > self.term {
            return Ok(Fence { term, leader_id: Some(leader_id) });
        }
        match self.leader_id {
            Some(first) if first != leader_id => Err(Refused::OtherLeader { term, leader_id, first }),
            _ => Ok(Fence { term, leader_id: Some(leader_id) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fence(term: u64, leader: Option<u64>) -> Fence {
        Fence { term, leader_id: leader }
    }

    #[test]
    fn table() {
        let cases: &[(Fence, u64, u64, Result<Fence, Refused>)] = &[
            // Fresh agent: the first leader is remembered.
            (fence(0, None), 1, 7, Ok(fence(1, Some(7)))),
            (fence(0, None), 0, 7, Ok(fence(0, Some(7)))),
            // Same leader, same term: nothing new.
            (fence(5, Some(7)), 5, 7, Ok(fence(5, Some(7)))),
            // A higher term from anyone: the new leader.
            (fence(5, Some(7)), 6, 8, Ok(fence(6, Some(8)))),
            (fence(5, Some(7)), 6, 7, Ok(fence(6, Some(7)))),
            // Lower term: deposed.
            (fence(5, Some(7)), 4, 7, Err(Refused::LowerTerm { term: 4, seen: 5 })),
            // Equal term, another leader: refused.
            (fence(5, Some(7)), 5, 8, Err(Refused::OtherLeader { term: 5, leader_id: 8, first: 7 })),
            // Equal term, leader not known yet (older journal): remembered now.
            (fence(5, None), 5, 8, Ok(fence(5, Some(8)))),
            // Far ahead: refused.
            (fence(5, Some(7)), 5 + MAX_TERM_JUMP, 8, Ok(fence(5 + MAX_TERM_JUMP, Some(8)))),
            (fence(5, Some(7)), 6 + MAX_TERM_JUMP, 8, Err(Refused::TooFarAhead { term: 6 + MAX_TERM_JUMP, seen: 5 })),
            (fence(0, None), u64::MAX, 1, Err(Refused::TooFarAhead { term: u64::MAX, seen: 0 })),
        ];
        for (f, term, leader, want) in cases {
            assert_eq!(f.check(*term, *leader), *want, "{f:?} given term {term} leader {leader}");
        }
    }

    proptest! {
        /// Walking any sequence of messages, remembering only what is accepted: the term
        /// never goes down, every accepted message has the highest term seen so far, and
        /// within one term only one leader is ever accepted.
        #[test]
        fn one_leader_per_term_and_terms_never_fall(
            msgs in proptest::collection::vec((0u64..8, 0u64..3), 0..50)
        ) {
            let mut f = Fence::default();
            let mut accepted_in: std::collections::BTreeMap<u64, u64> = Default::default();
            for (term, leader) in msgs {
                let before = f;
                match f.check(term, leader) {
                    Ok(next) => {
                        prop_assert!(next.term >= before.term);
                        prop_assert_eq!(next.term, term);
                        let first = *accepted_in.entry(term).or_insert(leader);
                        prop_assert_eq!(first, leader, "two leaders accepted in term {}", term);
                        f = next;
                    }
                    Err(_) => prop_assert!(term < before.term || before.leader_id.is_some_and(|l| l != leader)),
                }
            }
        }

        /// A refused message leaves the fence exactly as it was (the caller remembers only
        /// an accepted one), and a term far above is never accepted.
        #[test]
        fn refusals_remember_nothing(seen in 0u64..u64::MAX / 2, jump in 0u64..u64::MAX / 2, leader in 0u64..4) {
            let f = Fence { term: seen, leader_id: Some(1) };
            let r = f.check(seen + jump, leader);
            if jump > MAX_TERM_JUMP {
                let far = matches!(r, Err(Refused::TooFarAhead { .. }));
                prop_assert!(far, "{:?}", r);
            }
            if let Ok(next) = r {
                prop_assert!(next.term - seen <= MAX_TERM_JUMP);
            }
        }
    }
}
