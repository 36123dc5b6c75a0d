//! The RPC layer under simulated faults, over many seeds.
//!
//! `FERROTX_SIM_SEEDS=N` sets how many seeds run (default 1,000), starting at
//! `FERROTX_SIM_SEED_BASE` (default 0). A failing seed is printed; replay it alone with
//! `FERROTX_SIM_SEED=<seed> cargo test -p ferrotx-sim --test rpc_seeds -- --nocapture`.

use ferrotx_sim::rpc_workload::{RpcWorkload, run};
use ferrotx_sim::seeds::{self, SeedPlan};

#[test]
fn every_call_completes_once_under_faults() {
    let range = match seeds::from_env() {
        SeedPlan::Replay(seed) => {
            let workload = RpcWorkload::from_seed(seed);
            let outcome = run(seed, &workload);
            println!("seed {seed}: {workload:#?}\n{outcome:#?}");
            assert!(outcome.violations.is_empty());
            return;
        }
        SeedPlan::Sweep(range) => range,
    };
    let seeds = range.end - range.start;
    let mut failed = Vec::new();
    let (mut calls, mut lost, mut partitioned, mut retransmissions) = (0, 0, 0, 0);
    let (mut restarts_seen, mut refused) = (0, 0);
    for seed in range {
        let outcome = run(seed, &RpcWorkload::from_seed(seed));
        calls += outcome.calls;
        lost += outcome.lost;
        partitioned += outcome.partitioned;
        retransmissions += outcome.retransmissions;
        restarts_seen += outcome.restarts_seen;
        refused += outcome.refused;
        seeds::note_failure(seed, &outcome.violations, &mut failed);
    }
    println!(
        "{seeds} seeds: {calls} calls, {lost} datagrams lost, {partitioned} cut, \
         {retransmissions} retransmissions, {restarts_seen} restarts noticed, \
         {refused} calls refused by a restarted target"
    );
    assert!(
        lost > 0 && partitioned > 0 && retransmissions > 0 && restarts_seen > 0,
        "the faults did not happen"
    );
    assert!(
        failed.is_empty(),
        "failing seeds {failed:?}; replay one with FERROTX_SIM_SEED=<seed> cargo test -p ferrotx-sim --test rpc_seeds -- --nocapture"
    );
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 17, 99] {
        let workload = RpcWorkload::from_seed(seed);
        let first = run(seed, &workload);
        let second = run(seed, &workload);
        assert_eq!(first.digest, second.digest, "seed {seed} did not replay");
        assert_eq!(first.end_ns, second.end_ns);
    }
}

#[test]
fn a_partition_makes_peers_suspect_and_calls_finish_after_it_heals() {
    let mut workload = RpcWorkload::from_seed(5);
    workload.faults.loss = 0.0;
    workload.batches = 20;
    workload.partition_ns = Some((100_000, 60_000_000));
    let outcome = run(5, &workload);
    assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
    assert!(
        outcome.suspects > 0,
        "no peer was reported suspect during a 60 ms partition"
    );
    assert!(outcome.end_ns > 60_000_000);
}
