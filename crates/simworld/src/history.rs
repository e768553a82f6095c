//! A run's history: every line goes into a digest (FNV-1a, 64 bits), the last
//! `KEPT_LINES` are kept to print around a violation. Two runs of one seed must give the
//! same digest: that is what makes a failing seed a replayable bug report.

use std::collections::VecDeque;

/// Lines kept for the report around a violation, unless told otherwise (`keeping`).
pub const KEPT_LINES: usize = 200;
/// The most lines a run may be told to keep: about 100 MB of history.
pub const MAX_KEPT_LINES: usize = 1_000_000;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a of `bytes`, continuing from `h` (`fnv1a(FNV_OFFSET, ..)` starts afresh).
fn fnv1a(h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// The 64-bit FNV-1a hash of `bytes`.
pub fn hash(bytes: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, bytes.iter().copied())
}

/// [`hash`] of everything written to it, in pieces: a state's encoding is hashed as it is
/// made instead of copied into one buffer first (that buffer's growth and frees were a third
/// of a long run's time, the state being encoded for each replica every check).
pub struct Hasher(u64);

impl Default for Hasher {
    fn default() -> Self {
        Hasher(FNV_OFFSET)
    }
}

impl Hasher {
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl std::io::Write for Hasher {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 = fnv1a(self.0, bytes.iter().copied());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct History {
    digest: u64,
    lines: u64,
    last: VecDeque<String>,
    /// How many of the last lines `last` keeps.
    kept: usize,
}

impl Default for History {
    fn default() -> Self {
        History::keeping(KEPT_LINES)
    }
}

impl History {
    /// A history that keeps its last `kept` lines (at least 1, at most `MAX_KEPT_LINES`).
    pub fn keeping(kept: usize) -> History {
        let kept = kept.clamp(1, MAX_KEPT_LINES);
        History { digest: FNV_OFFSET, lines: 0, last: VecDeque::with_capacity(kept.min(KEPT_LINES)), kept }
    }

    /// Records `line` at simulated time `at_ms`.
    pub fn record(&mut self, at_ms: u64, line: impl AsRef<str>) {
        let text = format!("{}.{:03} {}", at_ms / 1000, at_ms % 1000, line.as_ref());
        self.digest = fnv1a(self.digest, text.bytes().chain(std::iter::once(b'\n')));
        self.lines += 1;
        if self.last.len() == self.kept {
            self.last.pop_front();
        }
        self.last.push_back(text);
    }

    pub fn digest(&self) -> u64 {
        self.digest
    }

    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The last lines, oldest first.
    pub fn tail(&self) -> Vec<String> {
        self.last.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_hashed_in_pieces_hash_as_one_buffer() {
        use std::io::Write;
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1_000).collect();
        let mut h = Hasher::default();
        for piece in bytes.chunks(7) {
            h.write_all(piece).unwrap();
        }
        assert_eq!(h.finish(), hash(&bytes));
        assert_ne!(h.finish(), hash(&bytes[1..]));
    }

    #[test]
    fn the_digest_follows_every_line_and_its_time() {
        let (mut a, mut b, mut c) = (History::default(), History::default(), History::default());
        a.record(1, "x");
        b.record(1, "x");
        c.record(2, "x");
        assert_eq!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
        b.record(1, "y");
        assert_ne!(a.digest(), b.digest());
    }

    #[test]
    fn only_the_last_lines_are_kept() {
        let mut h = History::default();
        for i in 0..(KEPT_LINES as u64 + 5) {
            h.record(i, format!("line {i}"));
        }
        let tail = h.tail();
        assert_eq!(tail.len(), KEPT_LINES);
        assert!(tail[0].ends_with("line 5"), "{}", tail[0]);
        assert_eq!(h.lines(), KEPT_LINES as u64 + 5);
    }

    #[test]
    fn a_history_keeps_as_many_lines_as_told_within_its_bound() {
        let mut h = History::keeping(3);
        for i in 0..10 {
            h.record(i, format!("line {i}"));
        }
        assert_eq!(h.tail().len(), 3);
        assert!(h.tail()[0].ends_with("line 7"));
        assert_eq!(History::keeping(0).kept, 1);
        assert_eq!(History::keeping(usize::MAX).kept, MAX_KEPT_LINES);
    }
}
