//! Fencing leaders by `(term, leader_id)`. Pure: the caller persists what `check` says to
//! remember, and only then acts on the directive.
//!
//! - A term below the highest seen comes from a deposed leader: refused.
//! - Within one term, a leader id below the one seen is refused and one above it is the new
//!   leader. The replicas run openraft's default ("advanced") leader ids: `(term, node_id)`
//!   ordered lexicographically, and a node grants its vote only to a greater one, so a
//!   term may elect more than one leader and the one with the higher node id supersedes the
//!   other. (The old rule, one leader per term, refused that legitimate second leader until
//!   the next election: the simulator found agents ignoring a working leader for that long.)
//! - A term more than `MAX_TERM_JUMP` above the highest seen is refused and never persisted:
//!   remembering a damaged or hostile term near `u64::MAX` would make the agent refuse every
//!   real leader from then on. Real terms grow by one per election; no cluster holds 2^32
//!   elections while an agent is away.
//!
//! A refused directive never changes what is remembered.

/// How far above the highest seen term a directive's term may be.
pub const MAX_TERM_JUMP: u64 = 1 << 32;

/// The highest term seen and the highest leader id seen in it (`None`: not known, e.g. a
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
    #[error("term {term} comes from leader {leader_id}, but leader {seen} was elected after it in that term")]
    EarlierLeader { term: u64, leader_id: u64, seen: u64 },
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
            Some(seen) if leader_id < seen => Err(Refused::EarlierLeader { term, leader_id, seen }),
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
            // Equal term, a later leader (higher id): the new leader.
            (fence(5, Some(7)), 5, 8, Ok(fence(5, Some(8)))),
            // Equal term, an earlier leader (lower id): superseded, refused.
            (fence(5, Some(7)), 5, 6, Err(Refused::EarlierLeader { term: 5, leader_id: 6, seen: 7 })),
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
        /// Walking any sequence of messages, remembering only what is accepted: the
        /// `(term, leader_id)` remembered never goes down, every accepted message is at least
        /// the highest seen so far, and every refused one is below it or too far ahead.
        #[test]
        fn leader_ids_never_fall(msgs in proptest::collection::vec((0u64..8, 0u64..3), 0..50)) {
            let mut f = Fence::default();
            for (term, leader) in msgs {
                let before = f;
                let seen = (before.term, before.leader_id.unwrap_or(0));
                match f.check(term, leader) {
                    Ok(next) => {
                        prop_assert_eq!((next.term, next.leader_id), (term, Some(leader)));
                        prop_assert!((term, leader) >= seen, "{:?} accepted after {:?}", (term, leader), seen);
                        f = next;
                    }
                    Err(_) => prop_assert!((term, leader) < seen),
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
