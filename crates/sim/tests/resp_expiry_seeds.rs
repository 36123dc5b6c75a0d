//! `resp-expiry` (Redis key expiry under clock drift, issue 14): 100 seeds under the
//! default faults; 100 seeds with every node's clock offset and drifting, with loss,
//! duplication, reordering and fault points but no crash, pause or partition, where any
//! `-TRYAGAIN` fails the seed (contention alone must not fail a client); and every
//! `recovery-*` attack with resp-expiry as the workload, 5 seeds each.
//!
//! `FERROTX_SIM_SEEDS=N` and `FERROTX_SIM_SEED_BASE` change the seeds of all three; replay one
//! with `FERROTX_SIM_SEED=<seed> cargo test -p ferrotx-sim --test resp_expiry_seeds --
//! --nocapture`, or `ferrotx sim --workload resp-expiry --seed S` (with `--faults
//! loss,dup,reorder,drift,buggify` for the second sweep).

use ferrotx_sim::faults::FaultKind;
use ferrotx_sim::recovery_scenarios::{self, failure, sprung};
use ferrotx_sim::run::{RunOptions, run};
use ferrotx_sim::scenarios::resp_expiry::{ExpiryStats, RespExpiry};
use ferrotx_sim::seeds::{self, SeedPlan};

/// Requests per client, as `ferrotx sim` runs the scenario.
const REQUESTS: usize = 24;

fn range(default: u64) -> std::ops::Range<u64> {
    match seeds::from_env_with_default(default) {
        SeedPlan::Replay(seed) => seed..seed + 1,
        SeedPlan::Sweep(range) => range,
    }
}

/// Runs resp-expiry over `seeds` with `options`; the sums of what the runs exercised.
fn sweep(
    what: &str,
    seeds: std::ops::Range<u64>,
    options: impl Fn(u64) -> RunOptions,
) -> (u64, ExpiryStats) {
    let (mut ok, mut total) = (0, ExpiryStats::default());
    let mut failed = Vec::new();
    for seed in seeds.clone() {
        let mut scenario = RespExpiry::new(REQUESTS);
        let report = run(&mut scenario, &options(seed));
        ok += report.checked.committed;
        let s = scenario.stats();
        total.ops += s.ops;
        total.values_read += s.values_read;
        total.expired_seen += s.expired_seen;
        total.watch_failed += s.watch_failed;
        total.swept += s.swept;
        total.clean_sweepers += s.clean_sweepers;
        let mut violations = report.checked.violations.clone();
        violations.extend(report.liveness.clone());
        seeds::note_failure(seed, &violations, &mut failed);
    }
    println!(
        "resp-expiry {what}: {} seeds, {ok} operations ok; {total:?}",
        seeds.end - seeds.start
    );
    assert!(
        failed.is_empty(),
        "resp-expiry {what}: seeds failed: {failed:?}"
    );
    (ok, total)
}

/// What every sweep must have exercised: values read, expiries seen by readers, keys
/// removed by the sweepers, WATCH failures.
fn exercised(ok: u64, s: &ExpiryStats) {
    assert!(ok > 0, "nothing acknowledged");
    assert!(s.values_read > 0, "no value read");
    assert!(s.expired_seen > 0, "no reader saw a key expire");
    assert!(s.swept > 0, "no sweeper removed a key");
    assert!(s.clean_sweepers > 0, "no sweeper finished cleanly");
}

#[test]
fn no_expired_key_is_read_under_the_default_faults() {
    let (ok, stats) = sweep("default faults", range(100), RunOptions::new);
    exercised(ok, &stats);
}

#[test]
fn no_expired_key_is_read_under_drift_and_contention_fails_no_client() {
    let faults = [
        FaultKind::Loss,
        FaultKind::Dup,
        FaultKind::Reorder,
        FaultKind::Drift,
        FaultKind::Buggify,
    ];
    let (ok, stats) = sweep("drift", range(100), |seed| RunOptions {
        faults: faults.to_vec(),
        ..RunOptions::new(seed)
    });
    exercised(ok, &stats);
}

/// Every `recovery-*` attack (membership on; a node crashed, paused or cut off at a
/// commit point) with resp-expiry as the workload. The attacks' runs end 0.3 simulated
/// seconds after the clients start, unless something is still running; the sweepers go on
/// after the clients until the latest deadline, so the bound is raised to 10 s.
#[test]
fn expiry_survives_every_recovery_attack() {
    let mut failed = Vec::new();
    for name in recovery_scenarios::NAMES {
        let (mut seeds_run, mut sprang, mut ok) = (0, 0, 0);
        for seed in range(5) {
            let mut scenario = RespExpiry::new(REQUESTS);
            let options = RunOptions {
                deadline_ns: 10_000_000_000,
                ..recovery_scenarios::options(name, seed)
            };
            let report = run(&mut scenario, &options);
            seeds_run += 1;
            sprang += u64::from(sprung(&report));
            ok += report.checked.committed;
            if let Some(why) = failure(&report) {
                eprintln!(
                    "{name} seed {seed} with resp-expiry FAILED: {why}\n  attack: {:?}",
                    report.attack
                );
                failed.push((name, seed));
            }
        }
        println!("{name} with resp-expiry: trap sprang in {sprang} of {seeds_run} seeds; {ok} ok");
        assert!(sprang > 0, "{name}: no trap sprang: no attack happened");
    }
    assert!(failed.is_empty(), "seeds failed: {failed:?}");
}
