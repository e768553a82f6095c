//! What a seed needs besides itself to give one history: tokio's own random choices seeded.
//!
//! `tokio::select!` without `biased` starts at a branch drawn from the runtime's generator,
//! and openraft's replication backoff, the campaign loop and others use it. Tokio seeds that
//! generator from the OS unless the build has `--cfg tokio_unstable`, the only way a runtime
//! takes a given seed (turmoil gives each host's runtime one drawn from the simulation's
//! seed). Without it two runs of one seed part where two branches are ready at once: rare,
//! so a seed replays most of the time and a failing one cannot be trusted to.
//! `.cargo/config.toml` sets the flag for every build of the workspace; `RUSTFLAGS`, where
//! set, replaces that file's flags, hence the check here.

/// Whether this build seeds tokio's random choices (see the module's doc).
pub const SEEDED: bool = cfg!(tokio_unstable);

/// Why a build that does not seed them cannot replay a seed, for the commands that refuse.
pub const UNSEEDED: &str = "this build cannot replay a seed: tokio's select! picks branches \
from an unseeded generator unless the build has --cfg tokio_unstable (.cargo/config.toml sets \
it; RUSTFLAGS, where set, replaces that file's flags: add --cfg tokio_unstable to it)";

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    /// The branches `select!` took, on a host of a simulation seeded with `seed`, when both
    /// of its branches were ready.
    fn choices(seed: u64) -> Vec<u8> {
        let out = Arc::new(Mutex::new(Vec::new()));
        let mut sim = turmoil::Builder::new().rng_seed(seed).build();
        let seen = out.clone();
        sim.client("c", async move {
            for _ in 0..64 {
                let took = tokio::select! {
                    _ = std::future::ready(()) => 0u8,
                    _ = std::future::ready(()) => 1u8,
                };
                seen.lock().expect("not poisoned").push(took);
            }
            Ok(())
        });
        sim.run().expect("the host ends");
        out.lock().expect("not poisoned").clone()
    }

    #[test]
    fn one_seed_makes_one_series_of_select_choices() {
        let (a, b) = (choices(7), choices(7));
        assert!(a.contains(&0) && a.contains(&1), "select! always took one branch: {a:?}");
        // Fails in a build without the flag: CI's build must replay seeds.
        assert_eq!(a, b, "{}", super::UNSEEDED);
    }
}
