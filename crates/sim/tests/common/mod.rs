// Each test binary uses some of these helpers, not all.
#![allow(dead_code)]

//! What the seed-replay tests share: a random plan of crashes, pauses, partitions and
//! loss, with membership on, run again from its seed and judged.

use ferrotx_sim::FaultKind;
use ferrotx_sim::run::{RunOptions, RunReport, run};

/// Every fault a random plan may draw.
pub fn all_faults() -> Vec<FaultKind> {
    vec![
        FaultKind::Crash,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Loss,
    ]
}

/// `workload` at `seed` on a random plan of every fault, with membership, on `nodes`
/// nodes holding `replicas` copies of each partition.
pub fn random_plan(workload: &str, seed: u64, nodes: u16, replicas: u8) -> RunReport {
    let options = RunOptions {
        nodes,
        replicas,
        faults: all_faults(),
        membership: Some(ferrotx_sim::membership::default_options()),
        ..RunOptions::new(seed)
    };
    run(&mut *ferrotx_sim::scenarios::scenario(workload), &options)
}

/// The runs of `runs` (workload, seed) that a checker faults, each with what it found:
/// a workload violation, a membership violation, or live nodes that never served again.
pub fn failing(runs: &[(&str, u64)], nodes: u16, replicas: u8) -> Vec<String> {
    let mut failed = Vec::new();
    for &(workload, seed) in runs {
        let report = random_plan(workload, seed, nodes, replicas);
        let membership = report.membership.as_ref().expect("membership ran");
        if !report.checked.violations.is_empty()
            || !membership.violations.is_empty()
            || report.liveness.is_some()
        {
            failed.push(format!(
                "{workload} seed {seed}: {:?} {:?} {:?}",
                report.checked.violations, membership.violations, report.liveness
            ));
        }
    }
    failed
}
