//! Committed state digests, the replica's side (the model's `digest` says why): the hash of
//! the applied state at each mark, the newest marks kept, and the judgement of the leader's
//! hash of one.

use std::collections::VecDeque;

use baton_model::State;
use baton_model::digest::{DigestAt, short_hex};
use sha2::{Digest, Sha256};

use crate::codec::CodecError;
use crate::identity::DATA_FORMAT;

/// Marks a replica remembers. The leader checks the newest one it applied, a few seconds
/// before the check commits; a follower far enough behind to miss them all catches up from
/// the log or a snapshot and is checked at the next mark.
pub const MAX_MARKS: usize = 8;

/// SHA-256 of `state`'s encoding (the codec's, as a snapshot holds it), written straight into the hash (a large state is not
/// copied into a buffer first).
pub fn hash_state(state: &State) -> Result<[u8; 32], CodecError> {
    struct Into<'a>(&'a mut Sha256);
    impl std::io::Write for Into<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hasher = Sha256::new();
    crate::codec::encode_into(state, &mut Into(&mut hasher))?;
    Ok(hasher.finalize().into())
}

/// The newest marks this replica applied, with its own hash of each.
#[derive(Debug, Default)]
pub struct Marks {
    kept: VecDeque<(u64, [u8; 32])>,
}

/// What a replica makes of the leader's hash of a mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Agreed,
    /// Not compared, and why (another build's format, a mark this replica did not apply).
    NotCompared(String),
    /// This replica's state at the mark differs from the leader's.
    Parted {
        index: u64,
        mine: String,
        theirs: String,
    },
}

impl Marks {
    /// Remembers this replica's hash of the mark at `index`, forgetting the oldest beyond
    /// [`MAX_MARKS`].
    pub fn insert(&mut self, index: u64, sha256: [u8; 32]) {
        self.kept.retain(|(i, _)| *i != index);
        self.kept.push_back((index, sha256));
        while self.kept.len() > MAX_MARKS {
            self.kept.pop_front();
        }
    }

    /// The newest mark, as the leader writes it into its next `StateDigest`.
    pub fn newest(&self) -> Option<DigestAt> {
        self.kept.back().map(|&(index, sha256)| DigestAt { index, format: DATA_FORMAT, sha256 })
    }

    /// Forgets every mark: the state was replaced by a snapshot, so marks before it say
    /// nothing of the state from here on.
    pub fn clear(&mut self) {
        self.kept.clear();
    }

    /// Compares the leader's hash `theirs` with this replica's own of the same mark.
    pub fn judge(&self, theirs: &DigestAt) -> Verdict {
        if theirs.format != DATA_FORMAT {
            return Verdict::NotCompared(format!(
                "hashed by a build of data format {}, this one writes {DATA_FORMAT}",
                theirs.format
            ));
        }
        let Some((_, mine)) = self.kept.iter().find(|(i, _)| *i == theirs.index) else {
            return Verdict::NotCompared(format!("this replica holds no hash of index {}", theirs.index));
        };
        if *mine == theirs.sha256 {
            Verdict::Agreed
        } else {
            Verdict::Parted { index: theirs.index, mine: short_hex(mine), theirs: theirs.short() }
        }
    }
}

impl Verdict {
    /// The reason this replica stops, for a parted state.
    pub fn stop_reason(&self) -> Option<String> {
        let Verdict::Parted { index, mine, theirs } = self else { return None };
        Some(format!(
            "this replica's state at log index {index} differs from the leader's (state digest {mine}, the leader's {theirs}): \
             it applied the same log into a different state, so it stops applying rather than serve or lead from it; \
             replace its data directory from a healthy replica (docs/ops.md, \"State digests\")"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(index: u64, byte: u8) -> DigestAt {
        DigestAt { index, format: DATA_FORMAT, sha256: [byte; 32] }
    }

    #[test]
    fn equal_hashes_agree_and_different_ones_name_the_index() {
        let mut marks = Marks::default();
        marks.insert(40, [7; 32]);
        assert_eq!(marks.judge(&at(40, 7)), Verdict::Agreed);
        let parted = marks.judge(&at(40, 9));
        assert_eq!(
            parted,
            Verdict::Parted { index: 40, mine: "0707070707070707".into(), theirs: "0909090909090909".into() }
        );
        let reason = parted.stop_reason().unwrap();
        assert!(reason.contains("log index 40") && reason.contains("0707070707070707"), "{reason}");
        assert_eq!(Verdict::Agreed.stop_reason(), None);
    }

    #[test]
    fn another_format_or_an_unknown_mark_is_not_compared() {
        let mut marks = Marks::default();
        marks.insert(40, [7; 32]);
        let other = DigestAt { format: DATA_FORMAT - 1, ..at(40, 9) };
        assert!(matches!(marks.judge(&other), Verdict::NotCompared(why) if why.contains("data format")));
        assert!(matches!(marks.judge(&at(41, 9)), Verdict::NotCompared(why) if why.contains("index 41")));
    }

    #[test]
    fn only_the_newest_marks_are_kept() {
        let mut marks = Marks::default();
        for i in 1..=(MAX_MARKS as u64 + 3) {
            marks.insert(i, [i as u8; 32]);
        }
        assert_eq!(marks.kept.len(), MAX_MARKS);
        assert_eq!(marks.newest().map(|d| d.index), Some(MAX_MARKS as u64 + 3));
        assert!(matches!(marks.judge(&at(1, 1)), Verdict::NotCompared(_)), "the oldest was forgotten");
    }

    #[test]
    fn the_hash_follows_the_state() {
        let empty = hash_state(&State::new()).unwrap();
        assert_eq!(empty, hash_state(&State::new()).unwrap(), "one state, one hash");
        let mut s = State::new();
        s.apply(baton_model::Command { now_ms: 1, op: baton_model::Op::Tick }).unwrap();
        assert_ne!(empty, hash_state(&s).unwrap());
    }
}
