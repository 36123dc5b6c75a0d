//! Issue 32, `sync` mode: at every instant a power cut could strike (checked every
//! quarter of a simulated millisecond, `ferrotx_sim::disk`), every write installed at a
//! primary is in a record some node's disk holds, under crashes, pauses, partitions and
//! loss with membership. A simulated disk that acknowledges before its sync is caught.

use ferrotx_cluster::DurabilityMode;
use ferrotx_sim::FaultKind;
use ferrotx_sim::run::{RunOptions, RunReport, run};

/// The power sweeps' faults: every node's power cut once, with crashes, pauses,
/// partitions and loss around it.
const POWER_FAULTS: [FaultKind; 5] = [
    FaultKind::Power,
    FaultKind::Crash,
    FaultKind::Pause,
    FaultKind::Partition,
    FaultKind::Loss,
];

fn sync_run(workload: &str, seed: u64, lie: bool) -> RunReport {
    sync_run_with(
        workload,
        seed,
        lie,
        &[
            FaultKind::Crash,
            FaultKind::Pause,
            FaultKind::Partition,
            FaultKind::Loss,
        ],
        false,
    )
}

fn sync_run_with(
    workload: &str,
    seed: u64,
    lie: bool,
    faults: &[FaultKind],
    restore_nothing: bool,
) -> RunReport {
    let options = RunOptions {
        faults: faults.to_vec(),
        restore_nothing,
        membership: Some(ferrotx_sim::membership::default_options()),
        durability: DurabilityMode::Sync,
        disk_lie: lie,
        ..RunOptions::new(seed)
    };
    run(&mut *ferrotx_sim::scenarios::scenario(workload), &options)
}

/// The runs of `seeds` (workload, seed) in `sync` mode that a checker faults, with what.
fn failing(seeds: &[(&str, u64)]) -> Vec<String> {
    seeds
        .iter()
        .filter_map(|&(workload, seed)| {
            let found = problems(&sync_run(workload, seed, false));
            (!found.is_empty()).then(|| format!("{workload} seed {seed}: {found:?}"))
        })
        .collect()
}

fn problems(report: &RunReport) -> Vec<String> {
    let mut found = report.checked.violations.clone();
    if let Some(m) = &report.membership {
        found.extend(m.violations.iter().cloned());
    }
    found
}

/// The seeds that found a primary installing writes no disk held, before primaries
/// logged their LOCK records and installed only once those were durable: a partition
/// left with its primary alone (f = 0) after crashes, and transactions recovery decided
/// and installed. `ferrotx sim --workload W --seed S --faults
/// crash,pause,partition,loss --durability sync` (3 nodes, 3 replicas).
#[test]
fn bug_primary_installed_writes_no_disk_held() {
    let seeds = [
        ("bank", 5),
        ("kv", 7),
        ("kv", 14),
        ("kv-churn", 7),
        ("resp-bank", 10),
        ("resp-bank", 11),
        ("resp-bank", 12),
        ("resp-counter-spread", 8),
        ("resp-expiry", 9),
        ("smallbank", 1),
    ];
    let failed = failing(&seeds);
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The seeds that found a COMMIT-PRIMARY whose install waited for its LOCK record's sync
/// installing after the view had changed, when the transaction was recovery's: versions
/// written twice (strict serializability failed), writes and appends lost. The install is
/// now dropped and answered "undecided". Same plans as above.
#[test]
fn bug_install_after_a_view_change_wrote_versions_twice() {
    let seeds = [
        ("kv", 85),
        ("kv-churn", 85),
        ("kv-churn", 153),
        ("list-append", 85),
        ("resp-counter", 158),
        ("resp-list-append", 32),
        ("smallbank", 85),
        ("smallbank", 142),
    ];
    let failed = failing(&seeds);
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The seeds that found recovery's commit decision never installed at a primary whose
/// LOCK record was not yet durable: the install waited, and the install queue dropped it
/// as a commit of an older view (the transaction's id carries the view it began in),
/// so the primary kept the old versions and its backups the new (lost writes, copies
/// differing, overlapping INCRs). A decided install is now never dropped. Same plans
/// as above (found by `--seeds 200 --seed-base 1000`).
#[test]
fn bug_recovery_decided_install_dropped_at_the_primary() {
    let seeds = [
        ("kv-churn", 1165),
        ("list-append", 1149),
        ("resp-counter", 1076),
    ];
    let failed = failing(&seeds);
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn sync_mode_keeps_every_visible_write_on_a_disk() {
    let mut failed = Vec::new();
    for workload in ["bank", "tatp", "resp-list-append"] {
        for seed in 100..112 {
            let found = problems(&sync_run(workload, seed, false));
            if !found.is_empty() {
                failed.push(format!("{workload} seed {seed}: {found:?}"));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The check can fail: disks that answer "durable" at once (acknowledging before the
/// sync) are caught at a power cut in most runs.
#[test]
fn acknowledging_before_the_sync_is_caught() {
    let runs: Vec<(&str, u64)> = ["bank", "kv"]
        .into_iter()
        .flat_map(|w| (200..210).map(move |s| (w, s)))
        .collect();
    let caught = runs
        .iter()
        .filter(|&&(workload, seed)| {
            problems(&sync_run(workload, seed, true))
                .iter()
                .any(|p| p.contains("power cut") && p.contains("on no disk"))
        })
        .count();
    assert!(
        caught * 2 > runs.len(),
        "only {caught} of {} runs caught the early acknowledgement",
        runs.len()
    );
}

/// The power faults: every node loses power at once and all start again from their
/// simulated disks (a whole-cluster restart: the view ended on disk, each life's
/// durable records replayed, recovery deciding what was in flight), with crashes,
/// pauses, partitions and loss around it. Every acknowledged write is in the final
/// copies and every history is strictly serializable.
#[test]
fn a_cluster_whose_power_went_restarts_from_its_disks() {
    let faults = POWER_FAULTS;
    let mut failed = Vec::new();
    let mut cuts = 0;
    for workload in ["bank", "kv", "list-append", "resp-counter"] {
        for seed in 0..12 {
            let report = sync_run_with(workload, seed, false, &faults, false);
            cuts += report.faults.get("power").copied().unwrap_or(0);
            let found = problems(&report);
            if !found.is_empty() {
                failed.push(format!("{workload} seed {seed}: {found:?}"));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(cuts, 48, "every run cut the power once");
}

/// The check can fail: a restart that serves the partitions before their copies are
/// back (each node starting empty over its disk) loses acknowledged writes in most runs.
#[test]
fn restarting_without_loading_the_disk_is_caught() {
    let faults = [FaultKind::Power, FaultKind::Loss];
    let runs: Vec<(&str, u64)> = ["bank", "kv"]
        .into_iter()
        .flat_map(|w| (0..10).map(move |s| (w, s)))
        .collect();
    let caught = runs
        .iter()
        .filter(|&&(w, s)| !problems(&sync_run_with(w, s, false, &faults, true)).is_empty())
        .count();
    eprintln!(
        "a restart loading nothing: caught in {caught} of {} runs",
        runs.len()
    );
    assert!(
        caught >= runs.len() * 3 / 4,
        "caught {caught} of {}",
        runs.len()
    );
}

/// Checkpoints (`ferrotx_txn::checkpoint`: each node copies its copies into its logs
/// and truncates what they cover, here every 16 KiB of log) keep every acknowledged
/// write across power cuts, and the check sees a round that truncates records before
/// their effect is in the copies (copying without waiting for what was in doubt): these
/// runs fail with it (copies differ after the restart), pass without. The break is seen
/// in few runs (2 of 1,440 of `--seeds 40 --seed-base 100..=300 --faults
/// power,crash,pause,partition,loss` in session 11; in session 12, after installs
/// waited for their markers, 1 of 4,320 of `--seed-base 100..=900`: kv 108, the only
/// seed left here): the loss persists only if the power goes before the next round
/// copies the write. A weak check, said so in docs/durability.md.
#[test]
fn a_checkpoint_that_truncates_what_was_in_doubt_is_caught() {
    let faults = POWER_FAULTS;
    let (workload, seed) = ("kv", 108);
    let with = |unsettled: bool| {
        let options = RunOptions {
            faults: faults.to_vec(),
            membership: Some(ferrotx_sim::membership::default_options()),
            durability: DurabilityMode::Sync,
            checkpoint_unsettled: unsettled,
            ..RunOptions::new(seed)
        };
        run(&mut *ferrotx_sim::scenarios::scenario(workload), &options)
    };
    let good = with(false);
    assert!(
        problems(&good).is_empty(),
        "{workload} {seed}: {:?}",
        problems(&good)
    );
    let broken = with(true);
    assert!(
        broken.checkpoints.completed > 0,
        "{workload} {seed}: no checkpoint"
    );
    assert!(
        !problems(&broken).is_empty(),
        "{workload} {seed}: the break went unseen"
    );
}

/// `flush` mode: a fill counts as done once its pages are on disk, and waited for that
/// on a signal only `sync` mode's answering coroutine rings, so after a crash no fill
/// ever completed (the cluster never came back to full strength: 228 of 360 runs of
/// `ferrotx sim --workload all --seeds 30 --faults crash,pause,partition,loss
/// --durability flush`). A `flush`-mode wait now polls the log.
#[test]
fn bug_flush_mode_fills_never_completed() {
    for (workload, seed) in [("bank", 1), ("bank", 2), ("kv", 5), ("list-append", 7)] {
        let options = RunOptions {
            faults: vec![
                FaultKind::Crash,
                FaultKind::Pause,
                FaultKind::Partition,
                FaultKind::Loss,
            ],
            membership: Some(ferrotx_sim::membership::default_options()),
            durability: DurabilityMode::Flush,
            ..RunOptions::new(seed)
        };
        let report = run(&mut *ferrotx_sim::scenarios::scenario(workload), &options);
        let found = problems(&report);
        assert!(found.is_empty(), "{workload} seed {seed}: {found:?}");
    }
}

/// A `power` seed (`--faults power,crash,pause,partition,loss --durability sync`, found
/// by `--seeds 30 --seed-base 700`), kv 714 and every other workload: a node joining
/// read the view while it was live; its members died and the first new life ended it on
/// disk under the same id, which the joiner ignored as not newer: it kept asking dead
/// lives to admit it and, as the bootstrap CM, never restarted the cluster. A joiner now
/// takes the ended view. (Found and fixed by a helper.)
#[test]
fn bug_power_seed_joiner_ignored_the_ended_view() {
    let faults = POWER_FAULTS;
    for (workload, seed) in [("kv", 714), ("bank", 714)] {
        let found = problems(&sync_run_with(workload, seed, false, &faults, false));
        assert!(found.is_empty(), "{workload} seed {seed}: {found:?}");
    }
}

/// `power` seeds of this session's fixes (`--faults power,crash,pause,partition,loss
/// --durability sync`):
/// - resp-counter 525: a primary installed (readers saw the write) once its LOCK record
///   was durable, before its INSTALLED marker; the restart found the commit only locked
///   there, its only backup crashed before the first recovery, and recovery aborted a
///   write a read had seen. Installs now wait for the marker too.
/// - list-append 431: a coordinator that aborted, whose ABORT never reached a primary (a
///   view changed), ends the transaction all the same; its mark then covered the LOCK
///   record, which a restart replayed as committed (an aborted append came back). A
///   marked LOCK record without its marker is now aborted; and a primary whose install
///   waits for its marker votes commit-primary, as its replay would.
/// - kv-full 213 (a node's disk found damaged at the power-on, another paused): the
///   restart went on without them; the paused one came back later with what it had
///   loaded, and its commit-backup record in doubt voted in a later recovery on a
///   transaction the restart's recovery had aborted: committed at the backups, aborted
///   at the primary. A life the restart went on without now drops what it loaded.
/// - smallbank and list-append 919 (a disk damaged at the power-on): recovery's commit
///   reached its client before the primary's decision was durable; the restart, without
///   the damaged backup that held the record, found the lock alone and aborted an
///   acknowledged write. COMMIT-RECOVERY and ABORT-RECOVERY now answer once what they
///   logged is durable.
/// - kv 431 (found once recovery's answers waited for the disk): a decision of view 2's
///   recovery, arriving on one worker thread after the switch to view 3's store, counted
///   toward unblocking that store's partition while another thread's transaction in
///   doubt there was undecided; a LOCK then took its object at the old version (two
///   writers of one version). Only the gather of the store's own view unblocks it now.
#[test]
fn bug_power_seeds_marker_mark_and_late_restored_life() {
    let faults = POWER_FAULTS;
    for (workload, seed) in [
        ("resp-counter", 525),
        ("list-append", 431),
        ("kv-full", 213),
        ("smallbank", 919),
        ("list-append", 919),
        ("kv", 431),
    ] {
        let report = sync_run_with(workload, seed, false, &faults, false);
        let found = problems(&report);
        assert!(found.is_empty(), "{workload} seed {seed}: {found:?}");
        if matches!(seed, 213 | 919) {
            assert_eq!(report.damaged_disks, 1, "the seed still damages a disk");
        }
    }
}
