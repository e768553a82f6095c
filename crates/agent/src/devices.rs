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
    /// Each GPU's memory by device index, for a shared GPU's MPS memory limit.
    memory_bytes: HashMap<u32, u64>,
}

/// What one replica was given: device indices of its whole GPUs and its slices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Given {
    pub gpus: Vec<u32>,
    pub slices: Vec<Slice>,
    /// For a replica on a shared GPU (its one GPU in `gpus`): its share.
    pub shared: Option<SharedGpu>,
}

/// A replica's share of one GPU it shares with others (decisions.md section 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedGpu {
    /// Thousandths of the GPU.
    pub milli: u32,
    /// The GPU's memory, when the inventory knows it.
    pub memory_bytes: u64,
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
        let memory_bytes = inventory.gpus.iter().map(|g| (g.index, g.memory_bytes)).collect();
        Devices { whole_gpus: inventory.whole_gpus(), slices: inventory.slices.clone(), memory_bytes }
    }

    /// Every whole GPU's number (as the leader hands them out): what a replica holds whose
    /// holdings are not known.
    pub fn every_gpu(&self) -> Vec<u32> {
        (0..self.whole_gpus.len() as u32).collect()
    }

    /// Every MIG slice's UUID.
    pub fn every_slice(&self) -> Vec<String> {
        self.slices.iter().map(|s| s.uuid.clone()).collect()
    }

    /// The devices for a replica given GPU numbers `gpus` (one it shares when `gpu_milli`,
    /// its thousandths of it, is not 0) and slices by profile `asked`, none of them among
    /// `held` (the UUIDs of the slices other replicas here hold).
    pub fn give(
        &self,
        gpus: &[u32],
        gpu_milli: u32,
        asked: &HashMap<String, u32>,
        held: &[&str],
    ) -> Result<Given, TooFewSlices> {
        // A number past the whole GPUs (a leader that counted otherwise) names the device of
        // that index, as before MIG: the agent never invents a mapping it was not told.
        let gpus: Vec<u32> = gpus.iter().map(|&n| self.whole_gpus.get(n as usize).copied().unwrap_or(n)).collect();
        let shared = (gpu_milli > 0).then(|| SharedGpu {
            milli: gpu_milli,
            memory_bytes: gpus.first().and_then(|g| self.memory_bytes.get(g)).copied().unwrap_or(0),
        });
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
        Ok(Given { gpus, slices, shared })
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

    /// The MPS limits for a replica on a shared GPU, where the site runs NVIDIA MPS (CUDA
    /// reads them only as an MPS client): its share of the GPU's threads, in whole percent
    /// rounded up, and of its memory, in MiB rounded down (for the one device the replica
    /// sees, 0); and `BATON_GPU_FRACTION` for the job itself (`0.5`). Nothing for whole GPUs.
    pub fn mps_env(&self) -> Vec<(String, String)> {
        let Some(s) = self.shared else { return Vec::new() };
        let mut env = vec![
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(), s.milli.div_ceil(10).max(1).to_string()),
            ("BATON_GPU_FRACTION".to_string(), baton_model::quantity::thousandths(u64::from(s.milli))),
        ];
        if s.memory_bytes > 0 {
            let mib = (u128::from(s.memory_bytes) * u128::from(s.milli) / 1000 / (1 << 20)) as u64;
            env.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(), format!("0={mib}M")));
        }
        env
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
        let first = d.give(&[], 0, &asked(2), &[]).unwrap();
        assert_eq!(first.slice_uuids(), ["MIG-dev-n1-2-0", "MIG-dev-n1-2-1"]);
        let held: Vec<String> = first.slice_uuids();
        let held: Vec<&str> = held.iter().map(String::as_str).collect();
        let second = d.give(&[], 0, &asked(1), &held).unwrap();
        assert_eq!(second.slice_uuids(), ["MIG-dev-n1-2-2"]);
        let err = d.give(&[], 0, &asked(2), &held).unwrap_err();
        assert_eq!(err.to_string(), "2 slices of mig-1g.10gb asked, 1 free here");
        assert!(d.give(&[], 0, &HashMap::from([("mig-3g.40gb".to_string(), 1)]), &[]).is_err(), "no such profile here");
    }

    /// A replica on half of a shared GPU gets half its threads and memory under MPS; one of
    /// whole GPUs gets no MPS limit.
    #[test]
    fn a_share_of_a_gpu_sets_the_mps_limits() {
        let mut inv = development_inventory("n1", 2);
        inv.gpus[1].memory_bytes = 80 << 30;
        let d = Devices::of(&inv);
        let g = d.give(&[1], 500, &HashMap::new(), &[]).unwrap();
        let env: HashMap<String, String> = g.mps_env().into_iter().collect();
        assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=40960M", "half of 80 GiB");
        assert_eq!(env["BATON_GPU_FRACTION"], "0.5");
        assert_eq!(g.visible(), "1");
        let quarter = d.give(&[0], 255, &HashMap::new(), &[]).unwrap().mps_env();
        assert_eq!(quarter[0].1, "26", "a part of a percent rounds up");
        assert_eq!(quarter.len(), 2, "no memory limit where the GPU's memory is not known");
        assert!(d.give(&[0, 1], 0, &HashMap::new(), &[]).unwrap().mps_env().is_empty());
    }

    #[test]
    fn visible_devices_name_whole_gpus_by_index_then_slices_by_uuid() {
        let d = node();
        let g = d.give(&[1], 0, &asked(1), &[]).unwrap();
        assert_eq!(g.visible(), "1,MIG-dev-n1-2-0");
        assert_eq!(g.device_gpus(), [1, 2], "the slice's GPU may be opened too");
        assert_eq!(d.give(&[0, 1], 0, &HashMap::new(), &[]).unwrap().visible(), "0,1");
    }

    /// GPUs in MIG mode are skipped: the leader's number 1 is the third device when the
    /// second is in MIG mode.
    #[test]
    fn the_leaders_gpu_numbers_skip_gpus_in_mig_mode() {
        let mut inv = development_inventory("n1", 3);
        inv.gpus[1].mig = true;
        let d = Devices::of(&inv);
        assert_eq!(d.give(&[0, 1], 0, &HashMap::new(), &[]).unwrap().gpus, [0, 2]);
    }
}
