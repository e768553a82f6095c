//! A simulated disk for power-loss tests: it keeps what was synced and loses, at a power
//! cut, any suffix of what was not.
//!
//! A [`PowerLossDisk`] outlives the replicas that use it. Each start takes a fresh
//! [`PowerLossKv`] handle from it. [`PowerLossDisk::power_loss`] keeps every flushed write,
//! keeps a prefix of the unflushed ones (the page cache got that far before the power went),
//! drops the rest, and cuts off every handle taken before it: a writer thread of the dead
//! replica that is still running afterwards fails instead of writing to the next life's disk.
//! Which prefix survives is chosen by the caller's random number, so a seed replays a run.
//!
//! Unflushed writes are lost in whole groups: a group is the run of one batch's writes to
//! one space, which the real store applies atomically (see [`KvStore::write`]).
//!
//! A disk can be made slow ([`PowerLossDisk::set_sync_ms`]): each sync then takes that long
//! before it is acknowledged ([`KvStore::sync_delay_ms`]), and a power cut meanwhile loses
//! what it had not yet made durable. It can fill up ([`PowerLossDisk::set_full`]: writes
//! fail, nothing of them lands), and a sync can fail ([`PowerLossDisk::fail_next_sync`]) as
//! Linux's `fsync` does on an I/O error: the unsynced writes are dropped (the kernel marks
//! the dirty pages clean and forgets them), so a sync retried afterwards succeeds over data
//! that is gone.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::kv::{KvError, KvStore, Space, Write};

type Records = BTreeMap<(Space, u64), Vec<u8>>;

/// What a full disk's write fails with.
const FULL: &str = "no space left on device";
/// What a failed sync fails with.
const SYNC_FAILED: &str = "input/output error at sync; the writes not yet synced are lost";

#[derive(Default)]
struct Disk {
    /// What a power cut keeps.
    synced: Records,
    /// What readers see: `synced` with every group in `unsynced` applied.
    visible: Records,
    /// Groups written since the last flush, oldest first.
    unsynced: Vec<Vec<Write>>,
    /// Bumped at every power cut; handles of an older life fail.
    life: u64,
    flushes: u64,
    /// How long each sync takes now (a slow disk); 0: at once.
    sync_ms: u64,
    /// Writes fail while set (no space left).
    full: bool,
    /// The next sync fails and drops what was not synced.
    fail_sync: bool,
    /// Errors returned so far, over every life: a replica that stopped after one had a cause.
    errors: u64,
}

/// One simulated disk, shared by every life of one replica.
#[derive(Clone, Default)]
pub struct PowerLossDisk {
    disk: Arc<Mutex<Disk>>,
    name: String,
}

/// What a power cut did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerCut {
    /// Unflushed write groups that reached the disk anyway.
    pub kept_groups: usize,
    /// Unflushed write groups lost.
    pub lost_groups: usize,
}

/// A handle on a [`PowerLossDisk`] for one life of a replica.
pub struct PowerLossKv {
    disk: PowerLossDisk,
    life: u64,
}

fn apply(records: &mut Records, group: &[Write]) {
    for w in group {
        match w {
            Write::Put(space, key, value) => {
                records.insert((*space, *key), value.clone());
            }
            Write::Remove(space, keys) if keys.start < keys.end => {
                let doomed: Vec<(Space, u64)> =
                    records.range((*space, keys.start)..(*space, keys.end)).map(|(k, _)| *k).collect();
                for k in doomed {
                    records.remove(&k);
                }
            }
            Write::Remove(..) => {}
        }
    }
}

/// Splits a batch into runs of consecutive writes to one space.
fn groups(batch: &[Write]) -> Vec<Vec<Write>> {
    let mut out: Vec<Vec<Write>> = Vec::new();
    for w in batch.iter().cloned() {
        let space = space_of(&w);
        match out.last_mut() {
            Some(g) if space_of(&g[0]) == space => g.push(w),
            _ => out.push(vec![w]),
        }
    }
    out
}

fn space_of(w: &Write) -> Space {
    match w {
        Write::Put(s, _, _) | Write::Remove(s, _) => *s,
    }
}

impl PowerLossDisk {
    /// An empty disk; `name` appears in error messages.
    pub fn new(name: impl Into<String>) -> PowerLossDisk {
        PowerLossDisk { disk: Arc::default(), name: name.into() }
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        // Every mutation below completes or leaves the maps as they were before it.
        self.disk.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A handle for the next life of the replica.
    pub fn open(&self) -> PowerLossKv {
        PowerLossKv { disk: self.clone(), life: self.lock().life }
    }

    /// Cuts the power: keeps the synced records and the first `random % (unsynced + 1)`
    /// unsynced groups, loses the rest, and ends the current life.
    pub fn power_loss(&self, random: u64) -> PowerCut {
        let mut d = self.lock();
        let unsynced = std::mem::take(&mut d.unsynced);
        let keep = usize::try_from(random % (unsynced.len() as u64 + 1)).expect("at most the group count");
        for g in &unsynced[..keep] {
            apply(&mut d.synced, g);
        }
        d.visible = d.synced.clone();
        d.life += 1;
        PowerCut { kept_groups: keep, lost_groups: unsynced.len() - keep }
    }

    /// Puts a new, empty disk in this one's place (a replaced machine): every record is gone,
    /// and the current life ends.
    pub fn wipe(&self) {
        let mut d = self.lock();
        d.synced.clear();
        d.visible.clear();
        d.unsynced.clear();
        d.life += 1;
    }

    /// Makes every later sync take `sync_ms` (0: at once again), as a failing drive that
    /// retries or a saturated volume does.
    pub fn set_sync_ms(&self, sync_ms: u64) {
        self.lock().sync_ms = sync_ms;
    }

    /// Flushes so far, over every life.
    pub fn flushes(&self) -> u64 {
        self.lock().flushes
    }

    /// Makes every later write fail, as a full disk does, until `set_full(false)`.
    pub fn set_full(&self, full: bool) {
        self.lock().full = full;
    }

    /// Makes the next sync fail, losing every write not yet synced (even from readers).
    pub fn fail_next_sync(&self) {
        self.lock().fail_sync = true;
    }

    /// Writes and syncs refused so far, over every life.
    pub fn errors(&self) -> u64 {
        self.lock().errors
    }

    /// Whether this disk refused a write or a sync since it had refused `errors_before`, and
    /// `why` (a replica's reason to stop) tells such an error: the stop had that cause.
    pub fn caused(&self, errors_before: u64, why: &str) -> bool {
        self.errors() > errors_before && (why.contains(FULL) || why.contains(SYNC_FAILED))
    }
}

impl PowerLossKv {
    fn live(&self) -> Result<MutexGuard<'_, Disk>, KvError> {
        let d = self.disk.lock();
        if d.life != self.life {
            return Err(KvError {
                location: self.disk.name.clone(),
                message: "the power was cut: this handle belongs to an earlier life".into(),
            });
        }
        Ok(d)
    }

    fn error(&self, message: &str) -> KvError {
        KvError { location: self.disk.name.clone(), message: message.into() }
    }
}

impl KvStore for PowerLossKv {
    fn get(&self, space: Space, key: u64) -> Result<Option<Vec<u8>>, KvError> {
        Ok(self.live()?.visible.get(&(space, key)).cloned())
    }

    fn scan(&self, space: Space, keys: Range<u64>, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, KvError> {
        if keys.start >= keys.end {
            return Ok(Vec::new());
        }
        let d = self.live()?;
        Ok(d.visible
            .range((space, keys.start)..(space, keys.end))
            .take(limit)
            .map(|((_, k), v)| (*k, v.clone()))
            .collect())
    }

    fn last(&self, space: Space) -> Result<Option<(u64, Vec<u8>)>, KvError> {
        let d = self.live()?;
        Ok(d.visible.range((space, 0)..=(space, u64::MAX)).next_back().map(|((_, k), v)| (*k, v.clone())))
    }

    fn write(&self, batch: &[Write]) -> Result<(), KvError> {
        let mut d = self.live()?;
        if d.full {
            d.errors += 1;
            return Err(self.error(FULL));
        }
        for g in groups(batch) {
            apply(&mut d.visible, &g);
            d.unsynced.push(g);
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), KvError> {
        let mut d = self.live()?;
        if std::mem::take(&mut d.fail_sync) {
            d.unsynced.clear();
            d.visible = d.synced.clone();
            d.errors += 1;
            return Err(self.error(SYNC_FAILED));
        }
        let unsynced = std::mem::take(&mut d.unsynced);
        for g in &unsynced {
            apply(&mut d.synced, g);
        }
        d.flushes += 1;
        Ok(())
    }

    fn close(&self) -> Result<(), KvError> {
        self.flush()
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn blocks(&self) -> bool {
        false
    }

    fn sync_delay_ms(&self) -> u64 {
        self.disk.lock().sync_ms
    }

    fn location(&self, space: Space) -> String {
        format!("{} ({})", self.disk.name, space.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: u64) -> Write {
        Write::Put(Space::Log, key, vec![key as u8])
    }

    fn keys(kv: &PowerLossKv) -> Vec<u64> {
        kv.scan(Space::Log, 0..u64::MAX, usize::MAX).unwrap().into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn a_power_cut_keeps_what_was_flushed_and_a_prefix_of_the_rest() {
        let disk = PowerLossDisk::new("disk r1");
        let kv = disk.open();
        kv.write(&[put(1), put(2)]).unwrap();
        kv.flush().unwrap();
        kv.write(&[put(3)]).unwrap();
        kv.write(&[Write::Put(Space::Meta, 1, vec![9]), put(4)]).unwrap();
        // Three unflushed groups: [3], [meta], [4]; keep the first.
        assert_eq!(disk.power_loss(1), PowerCut { kept_groups: 1, lost_groups: 2 });
        let next = disk.open();
        assert_eq!(keys(&next), vec![1, 2, 3]);
        assert_eq!(next.get(Space::Meta, 1).unwrap(), None);
    }

    #[test]
    fn a_full_disk_refuses_writes_whole_until_it_has_room() {
        let disk = PowerLossDisk::new("disk r1");
        let kv = disk.open();
        disk.set_full(true);
        let err = kv.write(&[put(1), put(2)]).unwrap_err();
        assert!(err.to_string().contains("no space left"), "{err}");
        assert!(keys(&kv).is_empty(), "nothing of a refused write lands");
        disk.set_full(false);
        kv.write(&[put(3)]).unwrap();
        assert_eq!(keys(&kv), vec![3]);
        assert_eq!(disk.errors(), 1);
    }

    #[test]
    fn a_failed_sync_loses_what_was_not_synced_and_a_retry_succeeds_over_it() {
        let disk = PowerLossDisk::new("disk r1");
        let kv = disk.open();
        kv.write(&[put(1)]).unwrap();
        kv.flush().unwrap();
        kv.write(&[put(2)]).unwrap();
        disk.fail_next_sync();
        let err = kv.flush().unwrap_err();
        assert!(err.to_string().contains("input/output error"), "{err}");
        assert_eq!(keys(&kv), vec![1], "the dirty pages are gone, from readers too");
        // Why a failed sync must never be retried: the retry reports success.
        kv.flush().unwrap();
        disk.power_loss(0);
        assert_eq!(keys(&disk.open()), vec![1]);
    }

    #[test]
    fn a_wiped_disk_is_empty_and_ends_the_life_before() {
        let disk = PowerLossDisk::new("disk r1");
        let old = disk.open();
        old.write(&[put(1)]).unwrap();
        old.flush().unwrap();
        disk.wipe();
        assert!(old.write(&[put(2)]).is_err(), "the replaced disk's handle is dead");
        assert!(keys(&disk.open()).is_empty());
    }

    #[test]
    fn a_handle_of_an_earlier_life_cannot_write() {
        let disk = PowerLossDisk::new("disk r1");
        let old = disk.open();
        disk.power_loss(0);
        let err = old.write(&[put(1)]).unwrap_err();
        assert!(err.to_string().contains("earlier life"), "{err}");
        assert!(keys(&disk.open()).is_empty());
    }
}
