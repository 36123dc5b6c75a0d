//! Transaction-state recovery under attack: every `recovery-*` scenario (a node crashed,
//! paused past its lease or cut off exactly when a worker of it reaches a fault point of
//! the commit protocol; a crash during recovery; two crashes in a row) over the first
//! seeds, each run within f and so required to pass every checker: membership's, the
//! workload's (strict serializability, lost acknowledged writes, replicas, money,
//! list-append), no panic, and every client answered once the faults are over.
//!
//! `FERROTX_SIM_SEEDS=N` (default 20 per scenario, 10 scenarios) and
//! `FERROTX_SIM_SEED_BASE`; replay one seed with `FERROTX_SIM_SEED=<seed> cargo test -p
//! ferrotx-sim --test recovery_seeds -- --nocapture`, or `ferrotx sim --workload
//! recovery-crash-coordinator --seed S`.
//!
//! Seeds that failed the first cut of recovery (commit 8922ee6: records matched to
//! partitions by the transaction's partition list, and blocks lost at a second view
//! change) are in [`FIRST_CUT_FAILURES`], which must pass too.

use ferrotx_sim::recovery_scenarios::{self, NAMES, failure, sprung};
use ferrotx_sim::run::{RunReport, run};
use ferrotx_sim::seeds::{self, SeedPlan};

/// Seeds of the default sweep (0 to 19) that failed at commit 8922ee6's recovery. Every
/// failing seed of the first 200 then, with its first violation, is in
/// `known_recovery_failures.txt` next to this file; all pass now.
const FIRST_CUT_FAILURES: [(&str, u64); 13] = [
    ("recovery-crash-backup", 10),
    ("recovery-crash-backup", 14),
    ("recovery-crash-during-recovery", 0),
    ("recovery-crash-during-recovery", 5),
    ("recovery-crash-during-recovery", 7),
    ("recovery-crash-during-recovery", 8),
    ("recovery-crash-during-recovery", 11),
    ("recovery-crash-during-recovery", 12),
    ("recovery-crash-during-recovery", 17),
    ("recovery-crash-during-recovery", 18),
    ("recovery-crash-primary", 16),
    ("recovery-pause", 19),
    ("recovery-two-crashes", 17),
];

fn run_seed(name: &str, seed: u64) -> RunReport {
    run(
        &mut *recovery_scenarios::scenario(name, seed),
        &recovery_scenarios::options(name, seed),
    )
}

#[test]
fn recovery_holds_under_every_attack() {
    let (range, verbose) = match seeds::from_env_with_default(20) {
        SeedPlan::Replay(seed) => (seed..seed + 1, true),
        SeedPlan::Sweep(range) => (range, false),
    };
    let mut failed = Vec::new();
    let (mut rounds, mut decisions) = (0, 0);
    for name in NAMES {
        let (mut seeds_run, mut sprang) = (0, 0);
        for seed in range.clone() {
            let report = run_seed(name, seed);
            if verbose {
                println!("{name} seed {seed}: {report:#?}");
            }
            seeds_run += 1;
            sprang += u64::from(sprung(&report));
            rounds += report.recovery.rounds;
            decisions += report.recovery.committed + report.recovery.aborted;
            if let Some(why) = failure(&report) {
                eprintln!(
                    "{name} seed {seed} FAILED: {why}\n  attack: {:?}\n  replay: ferrotx sim --workload {name} --seed {seed}",
                    report.attack
                );
                failed.push((name, seed));
            }
        }
        println!("{name}: trap sprang in {sprang} of {seeds_run} seeds");
        if !verbose {
            // The attack happens in nearly every seed (a trap whose visit never comes
            // leaves a run without fault).
            // The data-recovery scenarios' trap is their second, at a fill's FETCH: a
            // seed whose fills end before its visit comes has no fault there (about
            // three seeds in four spring it).
            let percent = if name.contains("fill") { 55 } else { 80 };
            assert!(
                sprang * 100 >= seeds_run * percent,
                "{name}: the trap sprang in only {sprang} of {seeds_run} seeds"
            );
        }
    }
    println!("recovery: {rounds} rounds, {decisions} decisions");
    assert!(
        verbose || (rounds > 0 && decisions > 0),
        "recovery never ran"
    );
    assert!(
        failed.is_empty(),
        "failing seeds {failed:?}; replay one with FERROTX_SIM_SEED=S or ferrotx sim --workload NAME --seed S"
    );
}

/// Runs every (scenario, seed) of `seeds` and fails with those that fail.
fn all_pass(seeds: &[(&str, u64)]) {
    let failed: Vec<(&str, u64, String)> = seeds
        .iter()
        .filter_map(|&(name, seed)| failure(&run_seed(name, seed)).map(|why| (name, seed, why)))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The seeds the first cut of recovery failed (see [`FIRST_CUT_FAILURES`]) pass.
#[test]
fn seeds_that_failed_the_first_cut_pass() {
    all_pass(&FIRST_CUT_FAILURES);
}

/// Seeds that fail when a worker's shipping executors (the simulator runs three, see
/// `ferrotx_txn::ship::Executors`) may run a request beside a running batch on its keys,
/// or asked again beside its first run: operations ran twice (duplicated list elements,
/// money created) after a crash.
const CONCURRENT_EXECUTOR_FAILURES: [(&str, u64); 6] = [
    ("recovery-crash-backup", 13),
    ("recovery-crash-backup", 34),
    ("recovery-crash-backup", 40),
    ("recovery-crash-backup", 47),
    ("recovery-crash-backup", 83),
    ("recovery-crash-backup", 131),
];

/// Concurrent shipping batches never share a key or an origin.
#[test]
fn bug_concurrent_executors_run_an_operation_twice() {
    all_pass(&CONCURRENT_EXECUTOR_FAILURES);
}

/// A commit computed its primaries and backups from one view's map and took its
/// transaction id (its view) after waiting for log space, in the next view: its LOCK went
/// to the old primary (no longer one) and its COMMIT-BACKUP missed the new view's backups
/// (a promoted primary, a backup being filled), yet it committed under the new view's id.
/// Found by a review; these seeds (5 nodes, membership, crashes and buggify, which makes
/// log space look full) lost writes or installed one version twice. Both also failed at
/// 1e020f7, before data recovery.
#[test]
fn bug_a_commit_used_the_map_of_an_older_view() {
    use ferrotx_sim::FaultKind;
    use ferrotx_sim::run::RunOptions;
    let faults = vec![
        FaultKind::Crash,
        FaultKind::Buggify,
        FaultKind::Loss,
        FaultKind::Dup,
        FaultKind::Reorder,
    ];
    for (workload, seed) in [
        ("smallbank", 61),
        ("smallbank", 2722),
        ("bank", 2941),
        ("bank", 3454),
    ] {
        let options = RunOptions {
            nodes: 5,
            faults: faults.clone(),
            membership: Some(ferrotx_sim::membership::default_options()),
            ..RunOptions::new(seed)
        };
        let report = run(&mut *ferrotx_sim::scenarios::scenario(workload), &options);
        assert!(
            report.checked.violations.is_empty(),
            "{workload} seed {seed}: {:?}",
            report.checked.violations
        );
        let membership = report.membership.as_ref().expect("membership ran");
        assert!(
            membership.violations.is_empty(),
            "{workload} seed {seed}: {:?}",
            membership.violations
        );
    }
}

/// Issue 30: a CM cut off from everyone removed a member that was never struck, and a CM
/// on the majority side then removed the first: two partitions were left with no copy
/// although no copy crashed (the issue's `recovery-isolate-filler` seed 3060, which no
/// longer plays the same since the simulator's epoch fix). At 8c41a7b these seeds of the
/// same scenario fail that way ("beyond f (lost partitions 2, ...; healthy removed
/// ...)"). Now a missed answer never removes a member whose lease at the CM runs, and a
/// holder that may be alive is suspended, never dropped.
#[test]
fn bug_a_cut_off_cm_orphaned_partitions() {
    for seed in [2748, 3783, 4587, 4906, 3060] {
        let report = run_seed("recovery-isolate-filler", seed);
        assert_eq!(failure(&report), None, "seed {seed}");
        let m = report.membership.as_ref().expect("membership runs");
        assert_eq!(m.lost_partitions, 0, "seed {seed}: {m:#?}");
        assert!(m.healthy_removed.is_empty(), "seed {seed}: {m:#?}");
    }
}

/// Issue 31: a FETCH that waited on a primary cut off counted its wait as work, so data
/// recovery paused `pace` times the cut after the heal, and one thread's fills all waited
/// behind it. `recovery-sever-filler` cuts the filling node off from every node but the
/// CM (no view changes) and wants the views at full strength within
/// `SEVER_STRENGTH_LEASES` of the heal. Before the fix 82 of its first 300 seeds failed,
/// these among them (2: 89.8 ms, 3: 124.4 ms, 32: 259.5 ms after the heal, 8 leases
/// being 80 ms).
#[test]
fn bug_fills_waited_pace_times_the_cut_after_a_heal() {
    for seed in [2, 3, 7, 17, 28, 31, 32, 36] {
        let report = run_seed("recovery-sever-filler", seed);
        assert_eq!(failure(&report), None, "seed {seed}");
        assert!(sprung(&report), "seed {seed}: the trap did not spring");
    }
}
