//! Names of nodes, pools, cohorts, queues, classes, jobs and tasks, and the natural order
//! ("n2" before "n10") in which baton lists and breaks ties between them.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::limits::MAX_NAME_LEN;

/// A validated name: letters, digits, `.`, `_` and `-`, 1 to 63 characters, never `root`,
/// `.` or `..`, never starting with `-`. Names become file and directory names on agents
/// (job logs, checkpoints) and arguments of commands, so one that is a path step or reads
/// as an option is refused here, where every entry point (CLI, server, simulator) shares it.
/// Orders naturally, so every map keyed by `Name` iterates in the order people expect.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Name(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a name may not be empty")]
    Empty,
    #[error("name {0:?} is longer than {MAX_NAME_LEN} characters")]
    TooLong(String),
    #[error("name {0:?} may only contain letters, digits, '.', '_' and '-'")]
    BadChar(String),
    #[error("the name \"root\" is reserved for the implicit root cohort")]
    Reserved,
    #[error("name {0:?} is a path step (\".\" or \"..\"), not a name")]
    Dots(String),
    #[error("name {0:?} may not start with '-' (it would read as an option)")]
    LeadingDash(String),
}

impl Name {
    pub fn new(s: impl Into<String>) -> Result<Name, NameError> {
        let s = s.into();
        if s.is_empty() {
            return Err(NameError::Empty);
        }
        if s.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong(s));
        }
        if !s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
            return Err(NameError::BadChar(s));
        }
        if s == "root" {
            return Err(NameError::Reserved);
        }
        if s == "." || s == ".." {
            return Err(NameError::Dots(s));
        }
        if s.starts_with('-') {
            return Err(NameError::LeadingDash(s));
        }
        Ok(Name(s))
    }

    /// For names built from already-validated parts in tests and fixtures.
    pub fn lit(s: &str) -> Name {
        Name::new(s).unwrap_or_else(|e| panic!("bad literal name {s:?}: {e}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> Ordering {
        natural_cmp(&self.0, &other.0)
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Name::new(s).map_err(serde::de::Error::custom)
    }
}

/// Natural order: runs of digits compare as numbers, everything else byte by byte.
/// Ties (such as "n01" and "n1") fall back to plain byte order so the order is total.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    // Fast path: up to the first differing byte the strings agree, digits included, so
    // only the digit run around that byte (if any) needs comparing as a number.
    let Some(d) = x.iter().zip(y).position(|(p, q)| p != q) else {
        return x.len().cmp(&y.len());
    };
    let digit_at = |s: &[u8], i: usize| s.get(i).is_some_and(u8::is_ascii_digit);
    let in_run = digit_at(x, d) || digit_at(y, d) || (d > 0 && x[d - 1].is_ascii_digit());
    if !in_run {
        return x[d].cmp(&y[d]);
    }
    let mut start = d;
    while start > 0 && x[start - 1].is_ascii_digit() {
        start -= 1;
    }
    // Runs of the same width without leading zeros compare as bytes; a wider run is larger.
    let run = |s: &[u8]| s[start..].iter().take_while(|c| c.is_ascii_digit()).count();
    let (lx, ly) = (run(x), run(y));
    if lx > 0 && ly > 0 && x[start] != b'0' && y[start] != b'0' {
        if lx != ly {
            return lx.cmp(&ly);
        }
        let ord = x[start..start + lx].cmp(&y[start..start + ly]);
        if ord != Ordering::Equal {
            return ord;
        }
    }
    slow_natural_cmp(&x[start..], &y[start..]).then_with(|| x.cmp(y))
}

/// A key whose byte order is the natural order: each digit run becomes its number of
/// significant digits (as a byte within '0'..='9', so it still compares with other bytes
/// as a digit would) followed by those digits. `None` when a run has 9 or more significant
/// digits or the text holds a byte below 2 (compare with `natural_cmp` then).
pub fn natural_key(s: &str) -> Option<Vec<u8>> {
    let mut key = Vec::with_capacity(s.len() + 8);
    natural_key_into(s, &mut key).then_some(key)
}

/// `natural_key` written into `key` (cleared first), so that callers building many keys
/// reuse one buffer; false where `natural_key` gives `None` (`key` is then meaningless).
pub fn natural_key_into(s: &str, key: &mut Vec<u8>) -> bool {
    key.clear();
    let b = s.as_bytes();
    // Bytes 0 and 1 end a key; names never contain them, other text may.
    if b.iter().any(|&c| c < 2) {
        return false;
    }
    let mut zeros = false;
    let mut i = 0;
    while i < b.len() {
        let text = b[i..].iter().position(u8::is_ascii_digit).unwrap_or(b.len() - i);
        key.extend_from_slice(&b[i..i + text]);
        i += text;
        let run = b[i..].iter().position(|c| !c.is_ascii_digit()).unwrap_or(b.len() - i);
        if run == 0 {
            break;
        }
        let digits = strip_zeros(&b[i..i + run]);
        zeros |= digits.len() < run;
        if digits.len() >= 9 {
            return false;
        }
        key.push(b'0' + digits.len() as u8);
        key.extend_from_slice(digits);
        i += run;
    }
    // Names equal but for leading zeros order by their raw text, and a name with leading
    // zeros sorts before the same name without ("n01" < "n1"), so only those need the text.
    if zeros {
        key.push(0);
        key.extend_from_slice(b);
    } else {
        key.push(1);
    }
    true
}

/// Natural order from the start of both slices.
fn slow_natural_cmp(x: &[u8], y: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    while i < x.len() && j < y.len() {
        if x[i].is_ascii_digit() && y[j].is_ascii_digit() {
            let (si, sj) = (i, j);
            while i < x.len() && x[i].is_ascii_digit() {
                i += 1;
            }
            while j < y.len() && y[j].is_ascii_digit() {
                j += 1;
            }
            let ord = cmp_digits(&x[si..i], &y[sj..j]);
            if ord != Ordering::Equal {
                return ord;
            }
        } else {
            match x[i].cmp(&y[j]) {
                Ordering::Equal => {
                    i += 1;
                    j += 1;
                }
                ord => return ord,
            }
        }
    }
    (x.len() - i).cmp(&(y.len() - j))
}

fn cmp_digits(a: &[u8], b: &[u8]) -> Ordering {
    let a = strip_zeros(a);
    let b = strip_zeros(b);
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn strip_zeros(d: &[u8]) -> &[u8] {
    let first = d.iter().position(|&c| c != b'0').unwrap_or(d.len());
    &d[first..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_puts_n2_before_n10() {
        let mut v = vec!["n10", "n2", "n1", "gpu-10", "gpu-9", "a", "n01"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a", "gpu-9", "gpu-10", "n01", "n1", "n2", "n10"]);
    }

    #[test]
    fn names_are_validated() {
        assert!(Name::new("project-a.v2_x").is_ok());
        assert_eq!(Name::new(""), Err(NameError::Empty));
        assert_eq!(Name::new("root"), Err(NameError::Reserved));
        assert!(matches!(Name::new("a b"), Err(NameError::BadChar(_))));
        assert!(matches!(Name::new("x".repeat(64)), Err(NameError::TooLong(_))));
        assert!(Name::new("x".repeat(63)).is_ok());
    }

    proptest::proptest! {
        #[test]
        fn natural_keys_order_like_natural_cmp(a in "[a-c/:\\x00\\x01\\x02\\x7f0-9]{0,8}", b in "[a-c/:\\x00\\x01\\x02\\x7f0-9]{0,8}") {
            if let (Some(ka), Some(kb)) = (natural_key(&a), natural_key(&b)) {
                proptest::prop_assert_eq!(ka.cmp(&kb), natural_cmp(&a, &b));
            }
        }

        #[test]
        fn fast_path_agrees_with_the_full_comparison(a in "[ab0-2]{0,7}", b in "[ab0-2]{0,7}") {
            let full = slow_natural_cmp(a.as_bytes(), b.as_bytes()).then_with(|| a.as_bytes().cmp(b.as_bytes()));
            proptest::prop_assert_eq!(natural_cmp(&a, &b), full);
        }

        #[test]
        fn natural_order_is_a_total_order(a in "[a-c0-9]{0,6}", b in "[a-c0-9]{0,6}", c in "[a-c0-9]{0,6}") {
            let ab = natural_cmp(&a, &b);
            proptest::prop_assert_eq!(ab, natural_cmp(&b, &a).reverse());
            proptest::prop_assert_eq!(ab == Ordering::Equal, a == b);
            if ab != Ordering::Greater && natural_cmp(&b, &c) != Ordering::Greater {
                proptest::prop_assert_ne!(natural_cmp(&a, &c), Ordering::Greater);
            }
        }
    }
}
