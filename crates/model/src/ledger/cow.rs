//! Copy-on-write tables for the ledger's large parts (nodes, queues, charges).
//!
//! The scheduler works on a clone of the ledger every cycle, and most cycles change only a
//! few nodes and queues. Cloning the tables element by element cost more than deciding
//! (7-8 ms on 10,000 nodes whose accounts grew one placement at a time). Here a table is a
//! list of shared chunks: a clone copies one pointer per chunk, and the first change to a
//! chunk copies that chunk alone.

use std::fmt;
use std::ops::{Index, IndexMut};
use std::sync::Arc;

use super::fxhash::FxMap;

/// Elements per chunk: small enough that changing one element copies little, large enough
/// that a clone of 10,000 nodes copies ~160 pointers.
const CHUNK: usize = 64;

/// A vector whose clone shares its chunks until one is changed.
#[derive(Clone)]
pub struct CowVec<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Default for CowVec<T> {
    fn default() -> Self {
        CowVec { chunks: Vec::new(), len: 0 }
    }
}

impl<T: Clone> CowVec<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, value: T) {
        if self.len % CHUNK == 0 {
            self.chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
        }
        let last = self.chunks.last_mut().expect("a chunk with room");
        Arc::make_mut(last).push(value);
        self.len += 1;
    }

    pub fn iter(&self) -> Iter<'_, T> {
        self.into_iter()
    }
}

fn chunk_iter<T>(c: &Arc<Vec<T>>) -> std::slice::Iter<'_, T> {
    c.iter()
}

pub type Iter<'a, T> = std::iter::FlatMap<
    std::slice::Iter<'a, Arc<Vec<T>>>,
    std::slice::Iter<'a, T>,
    fn(&'a Arc<Vec<T>>) -> std::slice::Iter<'a, T>,
>;

impl<'a, T> IntoIterator for &'a CowVec<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.chunks.iter().flat_map(chunk_iter as fn(&'a Arc<Vec<T>>) -> std::slice::Iter<'a, T>)
    }
}

impl<T: Clone> Index<usize> for CowVec<T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        assert!(i < self.len, "index {i} out of a table of {}", self.len);
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl<T: Clone> IndexMut<usize> for CowVec<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        assert!(i < self.len, "index {i} out of a table of {}", self.len);
        &mut Arc::make_mut(&mut self.chunks[i / CHUNK])[i % CHUNK]
    }
}

impl<T: Clone> FromIterator<T> for CowVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut v = CowVec::new();
        for x in iter {
            v.push(x);
        }
        v
    }
}

impl<T: Clone + fmt::Debug> fmt::Debug for CowVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Clone + PartialEq> PartialEq for CowVec<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

/// A map from job ids whose clone shares its buckets until one is changed. Ids are
/// handed out in sequence, so the jobs of a bucket (ids `64k..64k+63`) are neighbours.
#[derive(Clone)]
pub struct CowMap<V> {
    buckets: FxMap<u64, Arc<FxMap<u64, V>>>,
}

impl<V> Default for CowMap<V> {
    fn default() -> Self {
        CowMap { buckets: FxMap::default() }
    }
}

fn bucket(id: u64) -> u64 {
    id / CHUNK as u64
}

impl<V: Clone> CowMap<V> {
    pub fn get(&self, id: &u64) -> Option<&V> {
        self.buckets.get(&bucket(*id))?.get(id)
    }

    /// Unshares the bucket only when it holds `id`.
    pub fn get_mut(&mut self, id: &u64) -> Option<&mut V> {
        let b = self.buckets.get_mut(&bucket(*id))?;
        if !b.contains_key(id) {
            return None;
        }
        Arc::make_mut(b).get_mut(id)
    }

    /// The value for `id`, inserted by `make` if absent.
    pub fn get_or_insert_with(&mut self, id: u64, make: impl FnOnce() -> V) -> &mut V {
        Arc::make_mut(self.buckets.entry(bucket(id)).or_default()).entry(id).or_insert_with(make)
    }

    pub fn remove(&mut self, id: &u64) -> Option<V> {
        let key = bucket(*id);
        let b = self.buckets.get_mut(&key)?;
        if !b.contains_key(id) {
            return None;
        }
        let old = Arc::make_mut(b).remove(id);
        // Empty buckets go, so the outer map stays bounded by the live jobs.
        if b.is_empty() {
            self.buckets.remove(&key);
        }
        old
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &V)> + '_ {
        self.buckets.values().flat_map(|b| b.iter())
    }
}

impl<V: Clone + fmt::Debug> fmt::Debug for CowMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut entries: Vec<(&u64, &V)> = self.iter().collect();
        entries.sort_by_key(|(id, _)| **id);
        f.debug_map().entries(entries).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_to_a_clone_leaves_the_original_alone() {
        let a: CowVec<u32> = (0..200).collect();
        let mut b = a.clone();
        b[130] = 7;
        b.push(200);
        assert_eq!(a[130], 130);
        assert_eq!(b[130], 7);
        assert_eq!((a.len(), b.len()), (200, 201));
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), (0..200).collect::<Vec<_>>());
        // Chunks nobody changed are still shared.
        assert!(Arc::ptr_eq(&a.chunks[0], &b.chunks[0]));
        assert!(!Arc::ptr_eq(&a.chunks[2], &b.chunks[2]));
    }

    #[test]
    #[should_panic(expected = "index 3 out of a table of 3")]
    fn an_index_past_the_end_panics_even_inside_the_last_chunk() {
        let v: CowVec<u8> = (0..3).collect();
        let _ = v[3];
    }

    #[test]
    fn map_counts_and_unshares_only_what_changes() {
        let mut a: CowMap<String> = CowMap::default();
        for id in 0..300u64 {
            a.get_or_insert_with(id, || id.to_string());
        }
        let mut b = a.clone();
        assert_eq!(b.remove(&5).as_deref(), Some("5"));
        assert_eq!(b.remove(&5), None);
        *b.get_or_insert_with(1000, || "new".into()) += "!";
        b.get_mut(&299).expect("present").push('x');
        assert_eq!(b.get_mut(&5000), None);
        assert_eq!((a.iter().count(), b.iter().count()), (300, 300));
        assert_eq!(a.get(&5).map(String::as_str), Some("5"));
        assert_eq!(a.get(&299).map(String::as_str), Some("299"));
        assert_eq!(b.get(&299).map(String::as_str), Some("299x"));
        assert_eq!(b.get(&1000).map(String::as_str), Some("new!"));
        assert!(Arc::ptr_eq(&a.buckets[&2], &b.buckets[&2]));
        for id in 0..300u64 {
            b.remove(&id);
        }
        assert_eq!(b.iter().count(), 1);
        assert_eq!(b.buckets.len(), 1, "empty buckets are dropped");
    }
}
