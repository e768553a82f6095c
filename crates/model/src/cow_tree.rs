//! An ordered map whose clone shares its contents until they change: the state's large
//! collections (jobs, nodes, names) are kept in it so that the leader can take a snapshot
//! of the whole state under the state machine's lock in a few milliseconds and run the
//! scheduling cycle on it after the lock is released.
//!
//! The map is a sorted list of chunks, each a `BTreeMap` behind an `Arc`, keyed by a lower
//! bound of its keys. A clone copies one key and one pointer per chunk; the first change to
//! a chunk after a clone copies that chunk alone (at most `2 * CHUNK` entries). Iteration,
//! lookups and serialization are those of one ordered map: it serializes exactly as a
//! `BTreeMap` with the same entries (a length, then the entries in key order), so snapshots
//! written before it read back unchanged.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, Index, RangeBounds};
use std::sync::Arc;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Entries a chunk is split back to: small enough that the first change after a snapshot
/// copies little, large enough that a snapshot of 100,000 jobs copies ~1,600 pointers.
const CHUNK: usize = 64;

/// An ordered map with cheap clones (see the module's documentation).
#[derive(Clone)]
pub struct CowTree<K, V> {
    /// Chunk `i` holds the keys from its bound up to the next chunk's bound (excluded);
    /// no chunk is empty.
    chunks: BTreeMap<K, Arc<BTreeMap<K, V>>>,
    len: usize,
}

impl<K, V> Default for CowTree<K, V> {
    fn default() -> Self {
        CowTree { chunks: BTreeMap::new(), len: 0 }
    }
}

impl<K: Ord + Clone, V: Clone> CowTree<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk that holds `key` if any chunk does.
    fn chunk<Q>(&self, key: &Q) -> Option<&BTreeMap<K, V>>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunks.range::<Q, _>((Bound::Unbounded, Bound::Included(key))).next_back().map(|(_, c)| &**c)
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunk(key)?.get(key)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Unshares the chunk only when it holds `key`.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (_, chunk) = self.chunks.range_mut::<Q, _>((Bound::Unbounded, Bound::Included(key))).next_back()?;
        if !chunk.contains_key(key) {
            return None;
        }
        Arc::make_mut(chunk).get_mut(key)
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let bound = match self.chunks.range(..=&key).next_back() {
            Some((bound, _)) => bound.clone(),
            None => self.lower_first_bound(&key),
        };
        let chunk = Arc::make_mut(self.chunks.get_mut(&bound).expect("the chunk just found"));
        let old = chunk.insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        if chunk.len() >= 2 * CHUNK {
            let middle = chunk.keys().nth(CHUNK).expect("a full chunk").clone();
            let upper = chunk.split_off(&middle);
            self.chunks.insert(middle, Arc::new(upper));
        }
        old
    }

    /// Makes `key`, which is below every bound, the first chunk's bound (a new chunk if
    /// there is none); returns it.
    fn lower_first_bound(&mut self, key: &K) -> K {
        let chunk = self.chunks.pop_first().map(|(_, c)| c).unwrap_or_default();
        self.chunks.insert(key.clone(), chunk);
        key.clone()
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (bound, chunk) = self.chunks.range_mut::<Q, _>((Bound::Unbounded, Bound::Included(key))).next_back()?;
        if !chunk.contains_key(key) {
            return None;
        }
        let chunk = Arc::make_mut(chunk);
        let old = chunk.remove(key);
        // Empty chunks go, so the list stays bounded by the entries.
        if chunk.is_empty() {
            let bound = bound.clone();
            self.chunks.remove::<K>(&bound);
        }
        self.len -= 1;
        old
    }

    /// Every entry in key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        Iter { chunks: self.chunks.values(), front: None, back: None, left: self.len }
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator + Clone + '_ {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator + Clone + '_ {
        self.iter().map(|(_, v)| v)
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.chunks.values().next()?.first_key_value()
    }

    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.chunks.values().next_back()?.last_key_value()
    }

    /// Every key whose entry may differ between `before` (an earlier clone of this map) and
    /// this map: the keys of the chunks either holds that the other does not share, in key
    /// order. A superset of the changed keys (a chunk changed anywhere names all its keys) at
    /// the cost of the chunks changed, not of the map: a consumer that keeps a clone can
    /// follow the map's changes without walking it. A map not cloned from `before` (one
    /// read back from a snapshot) shares nothing, so every key is named.
    pub fn changed_keys(&self, before: &Self) -> Vec<K> {
        let shared = |a: &Self, bound: &K, chunk: &Arc<BTreeMap<K, V>>| {
            a.chunks.get(bound).is_some_and(|c| Arc::ptr_eq(c, chunk))
        };
        let mut keys = std::collections::BTreeSet::new();
        for (bound, chunk) in &self.chunks {
            if !shared(before, bound, chunk) {
                keys.extend(chunk.keys().cloned());
            }
        }
        for (bound, chunk) in &before.chunks {
            if !shared(self, bound, chunk) {
                keys.extend(chunk.keys().cloned());
            }
        }
        keys.into_iter().collect()
    }

    /// The entries whose keys lie in `range`, in key order.
    pub fn range<'a, R>(&'a self, range: R) -> impl DoubleEndedIterator<Item = (&'a K, &'a V)> + 'a
    where
        R: RangeBounds<K> + Clone + 'a,
    {
        // From the chunk that may hold the start through the last that may hold the end.
        let from = match range.start_bound() {
            Bound::Included(k) | Bound::Excluded(k) => self.chunks.range(..=k).next_back().map(|(b, _)| b),
            Bound::Unbounded => None,
        };
        let to = match range.end_bound() {
            Bound::Included(k) => self.chunks.range(..=k).next_back().map(|(b, _)| b),
            Bound::Excluded(k) => self.chunks.range(..k).next_back().map(|(b, _)| b),
            Bound::Unbounded => self.chunks.keys().next_back(),
        };
        let lo = from.map_or(Bound::Unbounded, Bound::Included);
        let hi = match (from, to) {
            (Some(f), Some(t)) if t >= f => Some(Bound::Included(t)),
            (None, Some(t)) => Some(Bound::Included(t)),
            // No chunk at or below the end, or none between start and end: nothing.
            _ => None,
        };
        hi.map(move |hi| self.chunks.range((lo, hi)).flat_map(move |(_, c)| c.range(range.clone())))
            .into_iter()
            .flatten()
    }
}

/// Iterator over a [`CowTree`]'s entries in key order.
#[derive(Clone)]
pub struct Iter<'a, K, V> {
    chunks: std::collections::btree_map::Values<'a, K, Arc<BTreeMap<K, V>>>,
    front: Option<std::collections::btree_map::Iter<'a, K, V>>,
    back: Option<std::collections::btree_map::Iter<'a, K, V>>,
    left: usize,
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.front.as_mut().and_then(Iterator::next) {
                self.left -= 1;
                return Some(e);
            }
            match self.chunks.next() {
                Some(c) => self.front = Some(c.iter()),
                None => {
                    let e = self.back.as_mut().and_then(Iterator::next);
                    if e.is_some() {
                        self.left -= 1;
                    }
                    return e;
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<K, V> DoubleEndedIterator for Iter<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.back.as_mut().and_then(DoubleEndedIterator::next_back) {
                self.left -= 1;
                return Some(e);
            }
            match self.chunks.next_back() {
                Some(c) => self.back = Some(c.iter()),
                None => {
                    let e = self.front.as_mut().and_then(DoubleEndedIterator::next_back);
                    if e.is_some() {
                        self.left -= 1;
                    }
                    return e;
                }
            }
        }
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}

impl<'a, K: Ord + Clone, V: Clone> IntoIterator for &'a CowTree<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Iter<'a, K, V> {
        self.iter()
    }
}

/// As a `BTreeMap`'s: panics when the key is absent.
impl<K, V, Q> Index<&Q> for CowTree<K, V>
where
    K: Ord + Clone + Borrow<Q>,
    V: Clone,
    Q: Ord + ?Sized,
{
    type Output = V;

    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for CowTree<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut t = CowTree::new();
        for (k, v) in iter {
            t.insert(k, v);
        }
        t
    }
}

impl<K: Ord + Clone, V: Clone> From<BTreeMap<K, V>> for CowTree<K, V> {
    fn from(map: BTreeMap<K, V>) -> Self {
        map.into_iter().collect()
    }
}

impl<K: Ord + Clone, V: Clone + PartialEq> PartialEq for CowTree<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<K: Ord + Clone, V: Clone + Eq> Eq for CowTree<K, V> {}

impl<K: Ord + Clone + fmt::Debug, V: Clone + fmt::Debug> fmt::Debug for CowTree<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// As a `BTreeMap` serializes: the length, then each entry in key order.
impl<K: Ord + Clone + Serialize, V: Clone + Serialize> Serialize for CowTree<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len))?;
        for (k, v) in self {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, K, V> Deserialize<'de> for CowTree<K, V>
where
    K: Ord + Clone + Deserialize<'de>,
    V: Clone + Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_map(TreeVisitor(PhantomData))
    }
}

struct TreeVisitor<K, V>(PhantomData<(K, V)>);

impl<'de, K, V> Visitor<'de> for TreeVisitor<K, V>
where
    K: Ord + Clone + Deserialize<'de>,
    V: Clone + Deserialize<'de>,
{
    type Value = CowTree<K, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut t = CowTree::new();
        while let Some((k, v)) = access.next_entry()? {
            t.insert(k, v);
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_change_to_a_clone_leaves_the_original_alone_and_shares_the_rest() {
        let a: CowTree<u32, String> = (0..1_000).map(|i| (i, i.to_string())).collect();
        let mut b = a.clone();
        b.get_mut(&500).expect("present").push('x');
        b.insert(1_000, "new".into());
        b.remove(&3);
        assert_eq!(a.get(&500).map(String::as_str), Some("500"));
        assert_eq!(b.get(&500).map(String::as_str), Some("500x"));
        assert_eq!((a.len(), b.len()), (1_000, 1_000));
        assert!(a.contains_key(&3) && !b.contains_key(&3));
        let shared = a.chunks.values().zip(b.chunks.values()).filter(|(x, y)| Arc::ptr_eq(x, y)).count();
        assert!(shared >= a.chunks.len() - 3, "only the changed chunks are copied: {shared} of {}", a.chunks.len());
    }

    #[test]
    fn chunks_stay_bounded_and_empty_ones_go() {
        let mut t: CowTree<u64, ()> = (0..10_000).map(|i| (i, ())).collect();
        assert!(t.chunks.values().all(|c| !c.is_empty() && c.len() < 2 * CHUNK));
        assert!(t.chunks.len() <= 10_000 / CHUNK + 1);
        for i in 0..9_990 {
            t.remove(&i);
        }
        assert_eq!(t.chunks.len(), 1);
        assert_eq!(t.keys().copied().collect::<Vec<_>>(), (9_990..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn serializes_as_the_btreemap_with_the_same_entries() {
        let map: BTreeMap<String, u32> = (0..300).map(|i| (format!("n{i}"), i)).collect();
        let tree: CowTree<String, u32> = map.clone().into();
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&map, config).expect("encode");
        assert_eq!(bincode::serde::encode_to_vec(&tree, config).expect("encode"), bytes);
        let (back, _): (CowTree<String, u32>, usize) =
            bincode::serde::decode_from_slice(&bytes, config).expect("decode");
        assert_eq!(back, tree);
        assert_eq!(serde_json::to_string(&tree).expect("json"), serde_json::to_string(&map).expect("json"));
    }

    #[test]
    fn changed_keys_name_what_changed_since_a_clone_and_little_else() {
        let before: CowTree<u64, u64> = (0..10_000).map(|i| (i, i)).collect();
        let mut after = before.clone();
        assert!(after.changed_keys(&before).is_empty(), "a clone shares every chunk");
        *after.get_mut(&5_000).expect("present") += 1;
        after.remove(&7_000);
        after.insert(20_000, 0);
        let changed = after.changed_keys(&before);
        for k in [5_000, 7_000, 20_000] {
            assert!(changed.contains(&k), "{k} changed but is not named");
        }
        assert!(changed.len() <= 3 * 2 * CHUNK, "only the changed chunks are named: {}", changed.len());
        let read_back: CowTree<u64, u64> = after.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(read_back.changed_keys(&before).len(), 10_001, "a map not cloned from it shares nothing");
    }

    proptest! {
        /// Any sequence of inserts and removes, on the map or on a clone taken midway, leaves
        /// each as a `BTreeMap` given the same sequence.
        #[test]
        fn behaves_as_a_btreemap(
            ops in proptest::collection::vec((any::<bool>(), 0u16..600, any::<u8>()), 0..1_500),
            cut in 0usize..1_500,
            lo in 0u16..600,
            hi in 0u16..600,
        ) {
            let mut tree = CowTree::new();
            let mut map = BTreeMap::new();
            let mut kept = None;
            for (i, (insert, k, v)) in ops.into_iter().enumerate() {
                if i == cut {
                    kept = Some((tree.clone(), map.clone()));
                }
                if insert {
                    prop_assert_eq!(tree.insert(k, v), map.insert(k, v));
                } else {
                    prop_assert_eq!(tree.remove(&k), map.remove(&k));
                }
                if let Some(x) = tree.get_mut(&(k / 2)) {
                    *x = x.wrapping_add(1);
                    let y = map.get_mut(&(k / 2)).expect("same keys");
                    *y = y.wrapping_add(1);
                }
            }
            // Every key whose entry differs from the clone's is named as changed.
            if let Some((before, _)) = &kept {
                let changed = tree.changed_keys(before);
                for k in 0..600u16 {
                    if tree.get(&k) != before.get(&k) {
                        prop_assert!(changed.binary_search(&k).is_ok(), "{} changed but is not named", k);
                    }
                }
            }
            for (t, m) in [(tree, map)].into_iter().chain(kept) {
                prop_assert_eq!(t.len(), m.len());
                prop_assert!(t.iter().eq(m.iter()));
                prop_assert!(t.iter().rev().eq(m.iter().rev()));
                prop_assert_eq!(t.first_key_value(), m.first_key_value());
                prop_assert_eq!(t.last_key_value(), m.last_key_value());
                let (lo, hi) = (lo.min(hi), lo.max(hi));
                prop_assert!(t.range(lo..hi).eq(m.range(lo..hi)));
                prop_assert!(t.range(lo..=hi).rev().eq(m.range(lo..=hi).rev()));
                prop_assert!(t.range(lo..).eq(m.range(lo..)));
                prop_assert!(t.range(..hi).eq(m.range(..hi)));
                for k in 0..600u16 {
                    prop_assert_eq!(t.get(&k), m.get(&k));
                }
            }
        }
    }
}
