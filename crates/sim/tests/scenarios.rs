//! Every scenario of `ferrotx sim` over the Rust API over many seeds inside `cargo test`,
//! and scenarios written by hand that attack one mechanism.
//!
//! `FERROTX_SIM_SEEDS=N` (default 200 per scenario) and `FERROTX_SIM_SEED_BASE`; replay one
//! seed with `FERROTX_SIM_SEED=<seed> cargo test -p ferrotx-sim --test scenarios -- --nocapture`,
//! or with `ferrotx sim --workload NAME --seed S`, which prints the same run.

use ferrotx_sim::Faults;
use ferrotx_sim::faults::{FaultEvent, FaultPlan};
use ferrotx_sim::run::{RunOptions, run};
use ferrotx_sim::scenarios::{self, WorkloadScenario};
use ferrotx_sim::seeds::{self, SeedPlan};
use ferrotx_workload::bank::BankWorkload;
use ferrotx_workload::workload::Workload;

#[test]
fn every_scenario_is_correct_under_every_fault_but_crashes() {
    let range = match seeds::from_env_with_default(200) {
        SeedPlan::Replay(seed) => seed..seed + 1,
        SeedPlan::Sweep(range) => range,
    };
    let mut failed = Vec::new();
    // The Redis scenarios have their own test, with their own counters (tests/resp_seeds.rs).
    for name in scenarios::NAMES
        .into_iter()
        .filter(|n| !n.starts_with("resp-"))
    {
        let (mut committed, mut aborted, mut partitioned, mut fired) = (0, 0, 0, 0);
        for seed in range.clone() {
            let report = run(&mut *scenarios::scenario(name), &RunOptions::new(seed));
            committed += report.checked.committed;
            aborted += report.checked.aborted;
            partitioned += report.partitioned;
            fired += report.buggify.values().sum::<u64>();
            if !report.passed() {
                eprintln!(
                    "{name} seed {seed} FAILED: {:?} {:?}",
                    report.liveness,
                    &report.checked.violations[..report.checked.violations.len().min(5)]
                );
                failed.push((name, seed));
            }
        }
        println!(
            "{name}: {committed} committed, {aborted} aborted, {partitioned} datagrams cut, \
             {fired} fault points fired"
        );
        assert!(committed > 0 && aborted > 0, "{name}: no contention");
        assert!(partitioned > 0 && fired > 0, "{name}: faults never struck");
    }
    assert!(
        failed.is_empty(),
        "failing seeds {failed:?}; replay one with ferrotx sim --workload NAME --seed S"
    );
}

/// Log space under pressure: node 0 is cut off for 40 ms, so commits that reached it stay
/// unfinished and hold their coordinator's truncation mark back, while the other
/// coroutines of the same thread keep committing through nodes 1 to 3 until they too
/// reach node 0. Without reservations the backups' logs reach 6 to 8 records of one
/// coordinator thread in these seeds; with them they stay within the limit of 4 (commits
/// wait, or give up with `LogFull`), and everything is still correct.
#[test]
fn reservations_bound_backup_logs_while_a_commit_is_stuck() {
    let mut waits = 0;
    for seed in 0..20 {
        let mut plan = FaultPlan::none(4);
        plan.network = Faults {
            delay_max_ns: 20_000,
            ..Faults::default()
        };
        plan.schedule = vec![
            (
                100_000,
                FaultEvent::Partition {
                    side_a: vec![0],
                    side_b: vec![1, 2, 3],
                },
            ),
            (40_000_000, FaultEvent::Heal),
        ];
        let options = RunOptions {
            nodes: 4,
            replicas: 2,
            threads: 1,
            coroutines: 8,
            log_records_max: 4,
            plan: Some(plan),
            ..RunOptions::new(seed)
        };
        let mut bank = WorkloadScenario::custom(
            "bank",
            Workload::Bank(BankWorkload::transfers(200, 100)),
            8,
            100,
        );
        let report = run(&mut bank, &options);
        assert!(report.passed(), "seed {seed}: {report:?}");
        waits += report.log_space_waits;
    }
    assert!(waits > 0, "no commit waited for log space");
}
