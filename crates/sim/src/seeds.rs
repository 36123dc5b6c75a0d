//! Which seeds a simulation test runs, from the environment, shared by the seed sweeps.
//!
//! `FERROTX_SIM_SEED=<seed>` replays one seed; otherwise `FERROTX_SIM_SEEDS` seeds
//! (default 1,000) run from `FERROTX_SIM_SEED_BASE` (default 0).

use std::ops::Range;

/// What to run.
#[derive(Clone, Debug)]
pub enum SeedPlan {
    /// Replay this one seed, verbosely.
    Replay(u64),
    /// Sweep these seeds.
    Sweep(Range<u64>),
}

/// Seeds per CI run when the environment says nothing.
const SEEDS_DEFAULT: u64 = 1000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number"))
    })
}

/// The plan the environment asks for.
pub fn from_env() -> SeedPlan {
    from_env_with_default(SEEDS_DEFAULT)
}

/// The plan the environment asks for, sweeping `count` seeds when it does not say.
pub fn from_env_with_default(count: u64) -> SeedPlan {
    if let Some(seed) = env_u64("FERROTX_SIM_SEED") {
        return SeedPlan::Replay(seed);
    }
    let count = env_u64("FERROTX_SIM_SEEDS").unwrap_or(count);
    let base = env_u64("FERROTX_SIM_SEED_BASE").unwrap_or(0);
    SeedPlan::Sweep(base..base + count)
}

/// Records `seed` as failed if it has violations, printing the first few.
pub fn note_failure(seed: u64, violations: &[String], failed: &mut Vec<u64>) {
    if !violations.is_empty() {
        eprintln!(
            "seed {seed} FAILED: {:?}",
            &violations[..violations.len().min(5)]
        );
        failed.push(seed);
    }
}
