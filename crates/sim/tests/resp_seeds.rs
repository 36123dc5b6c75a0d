//! Redis clients on a simulated cluster under the default faults: list-append over
//! `MULTI`/`APPEND`/`GET`/`EXEC` (pipelined blocks and plain pipelined commands too),
//! checked by the Elle-style checker, and bank transfers under `WATCH` (with
//! `DECRBY`/`INCRBY` or blind `SET`s), unconditional transfers and audits, checked by
//! conservation per account and in total; replicas equal to primaries in both.
//!
//! `FERROTX_SIM_SEEDS=N` (default 200 per scenario) and `FERROTX_SIM_SEED_BASE`; replay
//! one seed with `FERROTX_SIM_SEED=<seed> cargo test -p ferrotx-sim --test resp_seeds --
//! --nocapture`, or `ferrotx sim --workload resp-bank --seed <seed>`.

use ferrotx_sim::run::{RunOptions, run};
use ferrotx_sim::scenarios::scenario;
use ferrotx_sim::seeds::{self, SeedPlan};

/// Seeds per scenario when the environment says nothing.
const SEEDS_DEFAULT: u64 = 200;

fn sweep(name: &str) -> (u64, u64, u64) {
    let range = match seeds::from_env() {
        SeedPlan::Replay(seed) => seed..seed + 1,
        SeedPlan::Sweep(range) if std::env::var("FERROTX_SIM_SEEDS").is_ok() => range,
        SeedPlan::Sweep(range) => range.start..range.start + SEEDS_DEFAULT,
    };
    let (mut committed, mut aborted, mut indeterminate) = (0, 0, 0);
    let mut failed = Vec::new();
    for seed in range.clone() {
        let report = run(&mut *scenario(name), &RunOptions::new(seed));
        committed += report.checked.committed;
        aborted += report.checked.aborted;
        indeterminate += report.checked.indeterminate;
        let mut violations = report.checked.violations.clone();
        violations.extend(report.liveness.clone());
        seeds::note_failure(seed, &violations, &mut failed);
    }
    println!(
        "{name}: {} seeds, {committed} committed, {aborted} aborted, {indeterminate} \
         indeterminate",
        range.end - range.start
    );
    assert!(failed.is_empty(), "{name}: seeds failed: {failed:?}");
    (committed, aborted, indeterminate)
}

#[test]
fn resp_list_append_histories_are_strictly_serializable() {
    let (committed, _, _) = sweep("resp-list-append");
    assert!(committed > 0, "nothing committed");
}

#[test]
fn resp_bank_conserves_money_and_watch_conflicts_happen() {
    let (committed, aborted, _) = sweep("resp-bank");
    assert!(committed > 0, "nothing committed");
    assert!(
        aborted > 0,
        "no EXEC found a watched key changed: no contention"
    );
}
