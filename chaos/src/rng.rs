//! The fault schedule and the job mix come from the seed, so a run's choices can be
//! replayed (its timing cannot): the workspace's one seeded generator.

pub use baton_rng::SplitMix64 as Rng;
