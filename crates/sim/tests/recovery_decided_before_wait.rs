//! A commit interrupted by a view change after COMMIT-BACKUP waits for recovery's
//! decision (`Coordinator::await_recovery`). When the new view has a single member (its
//! other members removed at once: one crashed, one cut off), that member's recovery
//! round has no remote step: it gathered, decided "commit", applied and sent
//! TRUNCATE-RECOVERY within the instant of the view change, before the interrupted
//! coroutine resumed from its failed COMMIT-PRIMARY and registered to wait. The decision
//! found no waiter and was dropped; the replicas forgot it; the coroutine then waited, its
//! transaction was recovered again, every partition voted "unknown" (no record left
//! anywhere) and it was aborted: the client was told "nothing changed" of a transaction
//! whose writes were installed (`ReadOfUnwrittenVersion`; retried list appends doubled).
//!
//! These random-plan seeds (3 nodes, membership, crash, pause, partition, loss) failed
//! so at commit 8e9764e, whose membership first made such views.

use ferrotx_sim::FaultKind;
use ferrotx_sim::run::{RunOptions, run};

#[test]
fn bug_a_commit_decided_before_its_coroutine_waited_was_told_aborted() {
    let faults = vec![
        FaultKind::Crash,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Loss,
    ];
    let mut failed = Vec::new();
    for (workload, seed) in [("bank", 56), ("kv", 127), ("resp-list-append", 87)] {
        let options = RunOptions {
            faults: faults.clone(),
            membership: Some(ferrotx_sim::membership::default_options()),
            ..RunOptions::new(seed)
        };
        let report = run(&mut *ferrotx_sim::scenarios::scenario(workload), &options);
        let membership = report.membership.as_ref().expect("membership ran");
        if !report.checked.violations.is_empty() || !membership.violations.is_empty() {
            failed.push((
                workload,
                seed,
                report.checked.violations.clone(),
                membership.violations.clone(),
            ));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
