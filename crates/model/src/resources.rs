//! Named resource quantities: `{gpu: 8, cpu: 64, memory: 512Gi}`. `gpu` is the one resource
//! handed out by index (a job gets GPUs 0-3 of a node, not "four GPUs").

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::MAX_NAME_LEN;
use crate::quantity::Human;

/// The resource whose units are devices with indices.
pub const GPU: &str = "gpu";

/// A MIG slice is a resource of its own, named by its profile with this prefix
/// (`mig-1g.10gb`; decisions.md section 11). The leader counts slices as it counts any
/// resource; the node's agent, which owns the devices, gives each replica distinct slices.
pub const SLICE_PREFIX: &str = "mig-";

/// `gpu` or the shared GPU's fraction: the two keys that together say a request's GPUs.
pub fn is_gpu_key(name: &str) -> bool {
    name == GPU || name == GPU_FRACTION
}

/// Whether `name` is a MIG slice profile (`mig-` and a profile after it).
pub fn is_slice_profile(name: &str) -> bool {
    name.len() > SLICE_PREFIX.len() && name.starts_with(SLICE_PREFIX)
}

/// Thousandths of one shared GPU (decisions.md section 11: `gpu: 0.5` is 500 of these).
/// Held apart from `gpu`, which stays a count of whole GPUs handed out by index; a request
/// has one or the other, and a sum carries whole thousands into `gpu`. Only a task's request
/// may name it; a node offers whole GPUs.
pub const GPU_FRACTION: &str = "gpu.milli";

/// Thousandths in one GPU.
const MILLI_PER_GPU: u64 = 1000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceNameError {
    #[error("bad resource name {0:?}: use letters, digits, '.', '_', '-' and '/', at most {MAX_NAME_LEN} characters")]
    Bad(String),
}

pub fn validate_resource_name(name: &str) -> Result<(), ResourceNameError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if ok { Ok(()) } else { Err(ResourceNameError::Bad(name.to_string())) }
}

/// A sparse map of resource name to whole numbers of its smallest unit (CPUs in
/// thousandths, bytes, whole GPUs; see `quantity`). Zero entries are never stored, so two
/// equal amounts compare equal however they were built.
#[derive(Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Resources(BTreeMap<String, u64>);

impl Resources {
    pub fn new() -> Resources {
        Resources::default()
    }

    /// Builds from pairs; for fixtures and tests. Names are not validated here.
    pub fn of(pairs: &[(&str, u64)]) -> Resources {
        let mut r = Resources::new();
        for (k, v) in pairs {
            r.set(k, *v);
        }
        r
    }

    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    pub fn set(&mut self, name: &str, value: u64) {
        if value == 0 {
            self.0.remove(name);
        } else {
            self.0.insert(name.to_string(), value);
        }
    }

    /// Whole GPUs (a shared GPU's fraction is `gpu_fraction`).
    pub fn gpus(&self) -> u64 {
        self.get(GPU)
    }

    /// Thousandths of one shared GPU asked for (0 for none).
    pub fn gpu_fraction(&self) -> u64 {
        self.get(GPU_FRACTION)
    }

    /// Whole GPUs and a fraction, in thousandths of a GPU.
    pub fn gpus_milli(&self) -> u64 {
        self.gpus().saturating_mul(MILLI_PER_GPU).saturating_add(self.gpu_fraction())
    }

    /// Sets the GPUs from thousandths: the whole ones as `gpu`, the rest as the fraction.
    pub fn set_gpus_milli(&mut self, milli: u64) {
        self.set(GPU, milli / MILLI_PER_GPU);
        self.set(GPU_FRACTION, milli % MILLI_PER_GPU);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The MIG slices asked for or offered, by profile.
    pub fn slices(&self) -> impl Iterator<Item = (&str, u64)> {
        self.iter().filter(|(k, _)| is_slice_profile(k))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn add(&mut self, other: &Resources) {
        for (k, v) in other.iter() {
            let sum = self.get(k).saturating_add(v);
            self.set(k, sum);
        }
        self.carry_fraction();
    }

    /// `self * n`, saturating: used for a task's replicas.
    pub fn times(&self, n: u64) -> Resources {
        let mut r = Resources::new();
        for (k, v) in self.iter() {
            r.set(k, v.saturating_mul(n));
        }
        r.carry_fraction();
        r
    }

    /// `self - other`, `None` when `other` holds more of something (GPUs with their
    /// fractions, in thousandths: a whole GPU pays for a fraction).
    pub fn checked_sub(&self, other: &Resources) -> Option<Resources> {
        let mut out = self.clone();
        for (k, q) in other.iter().filter(|(k, _)| !is_gpu_key(k)) {
            out.set(k, self.get(k).checked_sub(q)?);
        }
        out.set_gpus_milli(self.gpus_milli().checked_sub(other.gpus_milli())?);
        Some(out)
    }

    /// Whole thousands of a sum's fractions become whole GPUs.
    fn carry_fraction(&mut self) {
        if self.gpu_fraction() >= MILLI_PER_GPU {
            self.set_gpus_milli(self.gpus_milli());
        }
    }

    /// Every quantity of `self` is at most the same quantity of `other` (GPUs with their
    /// fractions, in thousandths).
    pub fn fits_in(&self, other: &Resources) -> bool {
        self.gpus_milli() <= other.gpus_milli()
            && self.iter().filter(|(k, _)| !is_gpu_key(k)).all(|(k, v)| v <= other.get(k))
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// `gpu=8 cpu=64 memory=512Gi`, GPUs first since they matter most here.
impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("nothing");
        }
        let mut first = true;
        if self.gpus_milli() > 0 {
            write!(f, "{} {GPU}", crate::quantity::thousandths(self.gpus_milli()))?;
            first = false;
        }
        for (k, v) in self.0.iter().filter(|(k, _)| !is_gpu_key(k)) {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{} {}", Human { resource: k, value: *v }, k)?;
        }
        Ok(())
    }
}

impl FromIterator<(String, u64)> for Resources {
    fn from_iter<I: IntoIterator<Item = (String, u64)>>(iter: I) -> Self {
        let mut r = Resources::new();
        for (k, v) in iter {
            r.set(&k, v);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_entries_vanish_and_display_puts_gpu_first() {
        let mut r = Resources::of(&[("cpu", 4000), ("gpu", 2), ("memory", 16 << 30)]);
        assert_eq!(r.to_string(), "2 gpu 4 cpu 16Gi memory");
        r.set("cpu", 500);
        assert_eq!(r.to_string(), "2 gpu 500m cpu 16Gi memory");
        r.set("cpu", 0);
        assert_eq!(r, Resources::of(&[("gpu", 2), ("memory", 16 << 30)]));
    }

    #[test]
    fn slice_profiles_are_the_resources_named_mig_something() {
        let r = Resources::of(&[("gpu", 1), ("mig-1g.10gb", 2), ("mig-3g.40gb", 1), ("migration", 1)]);
        let slices: Vec<(&str, u64)> = r.slices().collect();
        assert_eq!(slices, [("mig-1g.10gb", 2), ("mig-3g.40gb", 1)]);
        assert!(!is_slice_profile("mig-"), "a prefix alone names no profile");
    }

    #[test]
    fn a_fraction_reads_as_part_of_a_gpu_and_sums_carry_into_whole_gpus() {
        let mut half = Resources::new();
        half.set_gpus_milli(500);
        assert_eq!((half.gpus(), half.gpu_fraction()), (0, 500));
        assert_eq!(half.to_string(), "0.5 gpu");
        let mut sum = half.times(3);
        assert_eq!((sum.gpus(), sum.gpu_fraction(), sum.to_string().as_str()), (1, 500, "1.5 gpu"));
        sum.add(&half);
        assert_eq!(sum, Resources::of(&[("gpu", 2)]), "no zero fraction is left behind");
        let node = Resources::of(&[("gpu", 1)]);
        assert!(half.fits_in(&node) && !half.times(3).fits_in(&node));
        assert!(half.fits_in(&half) && !node.fits_in(&half));
    }

    #[test]
    fn fits_in_compares_every_quantity() {
        let node = Resources::of(&[("gpu", 8), ("cpu", 64)]);
        assert!(Resources::of(&[("gpu", 8)]).fits_in(&node));
        assert!(!Resources::of(&[("gpu", 9)]).fits_in(&node));
        assert!(!Resources::of(&[("foo", 1)]).fits_in(&node));
    }
}
