//! Replays every committed fuzz input (`fuzz/corpus/<target>/*` and
//! `fuzz/regressions/<target>/*`) through the body its cargo-fuzz target runs, so that CI,
//! which cannot run cargo-fuzz, still checks every input the fuzzers kept and every crash
//! they found. A failure names the file: replay it under the fuzzer with
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <file>` (from `fuzz/`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use ferrotx_fuzz_support::{
    corpus, membership, participant, redis_session, resp_parser, wire_decode,
};

/// Runs every committed input of `target` through `body`; fails with the files that
/// panicked.
fn replay(target: &str, body: fn(&[u8])) {
    let inputs = corpus::inputs(target);
    assert!(
        !inputs.is_empty(),
        "no committed inputs for {target} under {}",
        corpus::fuzz_dir().display()
    );
    let mut failed = Vec::new();
    for path in &inputs {
        let data = std::fs::read(path).expect("a readable corpus file");
        if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: inputs that panic: {failed:#?}"
    );
    println!("{target}: replayed {} inputs", inputs.len());
}

#[test]
fn decode_corpus() {
    replay("decode", wire_decode::run);
}

#[test]
fn resp_parser_corpus() {
    replay("resp_parser", resp_parser::run);
}

#[test]
fn redis_session_corpus() {
    replay("redis_session", redis_session::run);
}

#[test]
fn membership_corpus() {
    replay("membership", membership::run);
}

#[test]
fn participant_corpus() {
    replay("participant", participant::run);
}

/// Reads one committed regression input.
fn regression(target: &str, name: &str) -> Vec<u8> {
    let path = corpus::fuzz_dir()
        .join("regressions")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Fixed on main by fef8ba6 (COMMIT-BACKUP with a version truncation cannot apply is
/// refused); found by the `participant` target: COMMIT-BACKUP logs a write whose version
/// is `VERSION_ANY` (`u64::MAX`, which only LOCK may carry: the coordinator sends backups
/// the version the primary locked), and the truncation that applies the record computes
/// `write.version + 1` (crates/txn/src/participant.rs, `Participant::truncate`):
/// "attempt to add with overflow" with overflow checks, version 0 installed without. The
/// input: LOCK then COMMIT-BACKUP of a record writing partition 1 (a backup here) at
/// `VERSION_ANY`, then the same record as LOCK, whose truncation mark applies it. Until
/// the fix this test was ignored and the target left such COMMIT-BACKUPs out.
#[test]
fn participant_regression_commit_backup_version_any() {
    participant::run_with_open_bugs(&regression("participant", "commit-backup-version-any"));
}

/// Fixed on main by 6ce6fc4 (a NEW-CONFIG's view is checked); found by the `membership`
/// target: a member installs the view of any
/// NEW-CONFIG it accepts without checking it against the configuration
/// (`View::check`, which exists), and a view with a node twice among its members then
/// panics at the next tick in `View::backup_cms_into` (crates/cluster/src/view.rs:246:
/// "fewer backup CMs than members besides the CM"), from `Membership::timers_installing`
/// (crates/membership/src/membership.rs:628). The input: three nodes bootstrap, then node
/// 2 receives a NEW-CONFIG (from node 5, which the configuration does not have) of a view
/// 125 ids ahead whose members are nodes 2, 5, 2. Until the fix this test was ignored
/// and the target did not deliver such NEW-CONFIGs (`Cluster::deliverable`).
#[test]
fn membership_regression_new_config_invalid_view() {
    membership::run_with_open_bugs(&regression("membership", "new-config-invalid-view"));
}
