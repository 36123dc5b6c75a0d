//! Reclamation frees a delete's tombstone once no copy can still receive an older write
//! of its key: every thread of every copy answers RECLAIM-CHECK *clear* only if its copy
//! applied the delete and none of its logs (logged or replicated records) writes the key.
//! Transaction-state recovery broke that premise. A backup's NEED-RECOVERY carries its
//! untruncated records to the partition's primary, which keeps them in its gather until
//! every backup has reported, then replicates each record to the replicas lacking it. A
//! record there is in no log: the backup that reported it may truncate it meanwhile, the
//! key may be deleted and reclaimed everywhere, and the record, replicated afterwards to
//! a copy that never had it, brought the key's old value back at its old version on that
//! copy when the (rightly) committed decision applied it.
//!
//! Random plans on 3 nodes with 3 replicas (membership; crash, pause, partition, loss) at
//! commit f88dac3, resp-expiry seed 943. Node 0 crashes at 1.07 ms and comes back as a
//! new life (view 3 at 20.37 ms fills it, view 4 at 22.39 ms counts its copies).
//! Transaction (view 2, node 2, thread 1, counter 1) wrote `exp:0` at version 36 in
//! partition 0 (installed at primary node 1 at 13.59 ms); node 2's thread 1 kept its
//! COMMIT-BACKUP record untruncated. In view 4 node 2 reported it to node 1 (22.54 ms),
//! whose thread 1 waited for node 0's NEED-RECOVERY, which came only at 27.45 ms. Meanwhile
//! node 2 truncated the record (25.31 ms), `exp:0` was deleted at version 50 and its
//! tombstone reclaimed on all three copies (26.63 ms: every thread answered clear). Then
//! node 1 replicated the record to node 0 (27.56 ms), and the commit decision (27.77 ms)
//! applied version 36 to node 0's copy, where the key had no object: `exp:0: the copy
//! on node 0 (version 36) differs from the primary on node 1 (version 50)`, and the
//! membership check found partition 0 never back to equal copies.

use ferrotx_sim::FaultKind;
use ferrotx_sim::run::{RunOptions, run};

#[test]
fn bug_recovery_replicated_an_old_write_of_a_key_reclaimed_meanwhile() {
    let options = RunOptions {
        nodes: 3,
        replicas: 3,
        faults: vec![
            FaultKind::Crash,
            FaultKind::Pause,
            FaultKind::Partition,
            FaultKind::Loss,
        ],
        membership: Some(ferrotx_sim::membership::default_options()),
        ..RunOptions::new(943)
    };
    let report = run(
        &mut *ferrotx_sim::scenarios::scenario("resp-expiry"),
        &options,
    );
    let membership = report.membership.as_ref().expect("membership ran");
    assert!(
        report.checked.violations.is_empty()
            && membership.violations.is_empty()
            && report.liveness.is_none(),
        "resp-expiry seed 943: {:#?} {:#?} {:#?}",
        report.checked.violations,
        membership.violations,
        report.liveness
    );
}
