//! Bank transfers and audits on a simulated 3-node cluster with f = 2, under loss,
//! duplication, delay, reordering and partitions that heal; every history is checked for
//! strict serializability, conservation of money, lost writes and replica equality.
//!
//! `FERROTX_SIM_SEEDS=N` (default 1,000) and `FERROTX_SIM_SEED_BASE`; replay one seed with
//! `FERROTX_SIM_SEED=<seed> cargo test -p ferrotx-sim --test txn_seeds -- --nocapture`.

use ferrotx_sim::seeds::{self, SeedPlan};
use ferrotx_sim::txn_workload::{BankWorkload, run};

#[test]
fn bank_histories_are_strictly_serializable() {
    let range = match seeds::from_env() {
        SeedPlan::Replay(seed) => {
            let workload = BankWorkload::from_seed(seed);
            let outcome = run(seed, &workload);
            println!("seed {seed}: {workload:#?}\n{outcome:#?}");
            assert!(outcome.violations.is_empty());
            return;
        }
        SeedPlan::Sweep(range) => range,
    };
    let seeds = range.end - range.start;
    let (mut committed, mut aborted, mut partitioned) = (0, 0, 0);
    let mut failed = Vec::new();
    for seed in range {
        let outcome = run(seed, &BankWorkload::from_seed(seed));
        committed += outcome.committed;
        aborted += outcome.aborted;
        partitioned += outcome.partitioned;
        seeds::note_failure(seed, &outcome.violations, &mut failed);
    }
    println!(
        "{seeds} seeds: {committed} committed, {aborted} aborted, {partitioned} datagrams cut"
    );
    assert!(
        committed > 0 && aborted > 0,
        "no contention: the workload tests little"
    );
    assert!(partitioned > 0, "the partitions cut nothing");
    assert!(
        failed.is_empty(),
        "failing seeds {failed:?}; replay one with FERROTX_SIM_SEED=<seed>"
    );
}
