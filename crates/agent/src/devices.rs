//! Which devices a replica gets on this node. The leader hands out whole GPUs by number (0
//! to the count of whole GPUs the agent offered) and MIG slices by count of each profile
//! (decisions.md section 11); the agent, which owns the devices, turns the numbers into
//! device indices (a GPU in MIG mode is never one of them) and picks the slices: distinct
//! from those of every replica it still holds, in inventory order. Pure, so tested alone.

use std::collections::HashMap;

use crate::inventory::{Inventory, Slice};

/// What this node has to give.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Devices {
    /// The device index of each whole GPU, by the leader's number (`Inventory::whole_gpus`).
    whole_gpus: Vec<u32>,
    slices: Vec<Slice>,
}

/// What one replica was given: device indices of its whole GPUs and its slices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Given {
    pub gpus: Vec<u32>,
    pub slices: Vec<Slice>,
}

/// Too few slices of a profile are free here: a replica still stopping holds them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{asked} slices of {profile} asked, {free} free here")]
pub struct TooFewSlices {
    pub profile: String,
    pub asked: u32,
    pub free: u32,
}

impl Devices {
    pub fn of(inventory: &Inventory) -> Devices {
        Devices { whole_gpus: inventory.whole_gpus(), slices: inventory.slices.clone() }
    }

    /// The devices for a replica given GPU numbers `gpus` and slices by profile `asked`,
    /// none of them among `held` (the UUIDs of the slices other replicas here hold).
    pub fn give(&self, gpus: &[u32], asked: &HashMap<String, u32>, held: &[&str]) -> Result<Given, TooFewSlices> {
        // A number past the whole GPUs (a leader that counted otherwise) names the device of
        // that index, as before MIG: the agent never invents a mapping it was not told.
        let gpus = gpus.iter().map(|&n| self.whole_gpus.get(n as usize).copied().unwrap_or(n)).collect();
        let mut profiles: Vec<(&String, &u32)> = asked.iter().filter(|(_, n)| **n > 0).collect();
        profiles.sort();
        let mut slices = Vec::new();
        for (profile, &n) in profiles {
            let free: Vec<&Slice> =
                self.slices.iter().filter(|s| &s.profile == profile && !held.contains(&s.uuid.as_str())).collect();
            if free.len() < n as usize {
                return Err(TooFewSlices { profile: profile.clone(), asked: n, free: free.len() as u32 });
            }
            slices.extend(free.into_iter().take(n as usize).cloned());
        }
        Ok(Given { gpus, slices })
    }
}

impl Given {
    /// `CUDA_VISIBLE_DEVICES`: the whole GPUs by index, then the slices by UUID.
    pub fn visible(&self) -> String {
        let gpus = self.gpus.iter().map(u32::to_string);
        gpus.chain(self.slices.iter().map(|s| s.uuid.clone())).collect::<Vec<_>>().join(",")
    }

    /// The GPUs whose device files the replica may open: its whole GPUs and the GPUs its
    /// slices are part of.
    pub fn device_gpus(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.gpus.iter().copied().chain(self.slices.iter().map(|s| s.gpu)).collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    pub fn slice_uuids(&self) -> Vec<String> {
        self.slices.iter().map(|s| s.uuid.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{DevDevices, add_development_slices, development_inventory};

    fn node() -> Devices {
        let mut inv = development_inventory("n1", 2);
        add_development_slices(&mut inv, "n1", &DevDevices { gpus: None, mig: vec![("mig-1g.10gb".into(), 3)] }.mig);
        Devices::of(&inv)
    }

    fn asked(n: u32) -> HashMap<String, u32> {
        HashMap::from([("mig-1g.10gb".to_string(), n)])
    }

    #[test]
    fn slices_are_distinct_from_those_held_and_too_few_is_said() {
        let d = node();
        let first = d.give(&[], &asked(2), &[]).unwrap();
        assert_eq!(first.slice_uuids(), ["MIG-dev-n1-2-0", "MIG-dev-n1-2-1"]);
        let held: Vec<String> = first.slice_uuids();
        let held: Vec<&str> = held.iter().map(String::as_str).collect();
        let second = d.give(&[], &asked(1), &held).unwrap();
        assert_eq!(second.slice_uuids(), ["MIG-dev-n1-2-2"]);
        let err = d.give(&[], &asked(2), &held).unwrap_err();
        assert_eq!(err.to_string(), "2 slices of mig-1g.10gb asked, 1 free here");
        assert!(d.give(&[], &HashMap::from([("mig-3g.40gb".to_string(), 1)]), &[]).is_err(), "no such profile here");
    }

    #[test]
    fn visible_devices_name_whole_gpus_by_index_then_slices_by_uuid() {
        let d = node();
        let g = d.give(&[1], &asked(1), &[]).unwrap();
        assert_eq!(g.visible(), "1,MIG-dev-n1-2-0");
        assert_eq!(g.device_gpus(), [1, 2], "the slice's GPU may be opened too");
        assert_eq!(d.give(&[0, 1], &HashMap::new(), &[]).unwrap().visible(), "0,1");
    }

    /// GPUs in MIG mode are skipped: the leader's number 1 is the third device when the
    /// second is in MIG mode.
    #[test]
    fn the_leaders_gpu_numbers_skip_gpus_in_mig_mode() {
        let mut inv = development_inventory("n1", 3);
        inv.gpus[1].mig = true;
        let d = Devices::of(&inv);
        assert_eq!(d.give(&[0, 1], &HashMap::new(), &[]).unwrap().gpus, [0, 2]);
    }
}
