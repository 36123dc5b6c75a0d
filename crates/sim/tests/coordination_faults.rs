//! Issue 31: whole clusters against a coordination service that is slow, down, and that
//! answers swaps "outcome unknown" (stored or not): random plans with the `coord` fault
//! kind beside crashes, pauses, partitions and loss. Every checker holds, and the runs
//! went through each of those answers. (A store gone back is not drawn: it can fork the
//! views, see `FaultPlan::draw`.)

use ferrotx_sim::FaultKind;
use ferrotx_sim::membership::CoordCounts;
use ferrotx_sim::run::{RunOptions, run};

#[test]
fn clusters_live_through_a_misbehaving_coordination_service() {
    let faults = vec![
        FaultKind::Crash,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Loss,
        FaultKind::Coord,
    ];
    let mut failed = Vec::new();
    let mut seen = CoordCounts::default();
    for workload in ["bank", "kv", "resp-list-append"] {
        for seed in 0..40 {
            let options = RunOptions {
                faults: faults.clone(),
                membership: Some(ferrotx_sim::membership::default_options()),
                ..RunOptions::new(seed)
            };
            let report = run(&mut *ferrotx_sim::scenarios::scenario(workload), &options);
            let m = report.membership.as_ref().expect("membership ran");
            let c = m.coord.expect("coordination faults ran");
            seen.delayed += c.delayed;
            seen.unavailable += c.unavailable;
            seen.unknown_stored += c.unknown_stored;
            seen.unknown_not_stored += c.unknown_not_stored;
            seen.went_back += c.went_back;
            if !report.passed() || !m.excused.is_empty() || m.stuck != 0 {
                failed.push((workload, seed, report.checked.violations.clone(), m.clone()));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(
        seen.delayed > 0
            && seen.unavailable > 0
            && seen.unknown_stored > 0
            && seen.unknown_not_stored > 0,
        "every answer happened: {seen:?}"
    );
}

/// Issue 31: the coordination service goes back (restored from an old copy holding the
/// view before the current one) while a member crashes (`membership-store-back`). Every
/// live node saw the current view, so each finds the store behind and refuses to swap
/// against it; nothing is stored twice under one id (check (a)), and the crash is
/// handled once the right copy is back. With nodes adopting the older view instead
/// (`handle_view_read` without its check), every seed fails.
#[test]
fn a_store_gone_back_is_refused_and_forks_nothing() {
    let name = "membership-store-back";
    let mut failed = Vec::new();
    for seed in 0..60 {
        let options = ferrotx_sim::membership_scenarios::options(name, seed);
        let report = run(
            &mut *ferrotx_sim::membership_scenarios::scenario(name),
            &options,
        );
        let m = report.membership.as_ref().expect("membership ran");
        let reached = ferrotx_sim::membership_scenarios::reached(name, &report);
        if !report.passed() || !m.excused.is_empty() || reached.is_err() {
            failed.push((seed, reached, m.violations.clone()));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
