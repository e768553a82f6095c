//! Fractions of shared GPUs (decisions.md section 11): what a job holds of each GPU it
//! shares on one node, and the rule that picks the GPU a new fraction goes on.
//!
//! A GPU that holds any fraction is out of its node's free mask, so it is never given whole;
//! the fractions on it add up to at most one GPU (`GPU_MILLI`).

use super::GPU_MILLI;

/// Thousandths of each shared GPU one job holds on one node: (GPU index, thousandths), by
/// index, one entry per GPU. Empty for a job of whole GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Fractions(Vec<(u32, u64)>);

impl Fractions {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `milli` more of GPU `gpu`.
    pub fn add(&mut self, gpu: u32, milli: u64) {
        match self.0.binary_search_by_key(&gpu, |(g, _)| *g) {
            Ok(i) => self.0[i].1 = self.0[i].1.saturating_add(milli),
            Err(i) => self.0.insert(i, (gpu, milli)),
        }
    }

    pub fn merge(&mut self, other: &Fractions) {
        for &(g, m) in &other.0 {
            self.add(g, m);
        }
    }

    /// Gives back what `other` holds (a part split off), dropping GPUs left with nothing.
    pub fn remove(&mut self, other: &Fractions) {
        for &(g, m) in &other.0 {
            if let Ok(i) = self.0.binary_search_by_key(&g, |(x, _)| *x) {
                self.0[i].1 = self.0[i].1.saturating_sub(m);
            }
        }
        self.0.retain(|&(_, m)| m > 0);
    }

    /// What of GPU `gpu` this holds.
    pub fn on(&self, gpu: u32) -> u64 {
        self.0.binary_search_by_key(&gpu, |(g, _)| *g).map_or(0, |i| self.0[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.0.iter().copied()
    }

    /// The GPUs it shares, as a mask.
    pub fn mask(&self) -> u64 {
        self.0.iter().fold(0, |m, &(g, _)| m | (1u64 << g))
    }

    /// Every thousandth it holds, on all its GPUs.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|&(_, m)| m).sum()
    }
}

/// Thousandths in use on each GPU of one node (64 at most, `MAX_GPUS_PER_NODE`), for the
/// question "which GPU does this fraction go on". A GPU the node does not have, or one out
/// of service, counts as whole-used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuUse {
    used: [u16; 64],
}

impl GpuUse {
    /// Every GPU whole-used except those in `free` (a free GPU has nothing on it).
    pub fn new(free: u64) -> GpuUse {
        let mut used = [GPU_MILLI as u16; 64];
        for (g, u) in used.iter_mut().enumerate() {
            if free & (1u64 << g) != 0 {
                *u = 0;
            }
        }
        GpuUse { used }
    }

    /// `fractions` are on their GPUs (which are not free): their shares are what is used
    /// of those GPUs, instead of the whole. `shared` collects the GPUs seen so far.
    pub fn share(&mut self, fractions: &Fractions, shared: &mut u64) {
        for (g, m) in fractions.iter() {
            let slot = &mut self.used[g as usize];
            if *shared & (1u64 << g) == 0 {
                // First fractions seen on this GPU: it was counted whole-used.
                *slot = 0;
                *shared |= 1u64 << g;
            }
            *slot = (u64::from(*slot) + m).min(GPU_MILLI) as u16;
        }
    }

    /// The GPUs of `mask` are whole-used after all (by a job of whole GPUs, out of service,
    /// or not on the node).
    pub fn take_whole(&mut self, mask: u64) {
        for (g, u) in self.used.iter_mut().enumerate() {
            if mask & (1u64 << g) != 0 {
                *u = GPU_MILLI as u16;
            }
        }
    }

    pub fn used(&self, gpu: u32) -> u64 {
        u64::from(self.used[gpu as usize])
    }

    /// `milli` more on GPU `gpu` (a fraction placed there in this decision).
    pub fn add(&mut self, gpu: u32, milli: u64) {
        let slot = &mut self.used[gpu as usize];
        *slot = (u64::from(*slot) + milli).min(GPU_MILLI) as u16;
    }

    /// Section 11's rule: of the GPUs that still hold `milli`, the most used (so whole GPUs
    /// stay free), then the lowest index.
    pub fn best_fit(&self, milli: u64) -> Option<u32> {
        let mut best: Option<(u64, u32)> = None;
        for g in 0..64u32 {
            let used = self.used(g);
            if used + milli <= GPU_MILLI && best.is_none_or(|(b, _)| used > b) {
                best = Some((used, g));
            }
        }
        best.map(|(_, g)| g)
    }

    /// How many fractions of `milli` the GPUs hold in all.
    pub fn room_for(&self, milli: u64) -> u64 {
        if milli == 0 {
            return u64::MAX;
        }
        self.used.iter().map(|&u| (GPU_MILLI - u64::from(u)) / milli).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fraction_goes_on_the_most_used_gpu_that_holds_it_then_the_lowest_index() {
        // Four GPUs: 0 free, 1 holds 0.5, 2 holds 0.75, 3 is whole-used.
        let mut u = GpuUse::new(0b0001);
        let mut shared = 0;
        let mut f = Fractions::default();
        f.add(1, 500);
        f.add(2, 750);
        u.share(&f, &mut shared);
        assert_eq!(u.best_fit(250), Some(2), "the fullest that still holds it");
        assert_eq!(u.best_fit(500), Some(1));
        assert_eq!(u.best_fit(600), Some(0), "only the free GPU holds it");
        assert_eq!(u.room_for(250), 4 + 2 + 1);
        u.add(0, 600);
        assert_eq!(u.best_fit(400), Some(0), "0.6 used beats 0.5 used");
        u.take_whole(0b0001);
        assert_eq!(u.best_fit(600), None, "no GPU holds it");
    }

    #[test]
    fn fractions_of_one_job_add_up_per_gpu() {
        let mut f = Fractions::default();
        f.add(3, 250);
        f.add(1, 500);
        f.add(3, 250);
        assert_eq!(f.iter().collect::<Vec<_>>(), [(1, 500), (3, 500)]);
        assert_eq!((f.mask(), f.total(), f.on(3), f.on(2)), (0b1010, 1000, 500, 0));
    }
}
