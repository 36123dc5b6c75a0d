//! A commit interrupted after COMMIT-BACKUP waits for recovery's decision
//! (`Coordinator::await_recovery`). If its node's life is suspended (cut off while it
//! held the last copies of a partition) and later readmitted as the same life, the views
//! in between recover its transactions without it: a recovery coordinator decides the
//! commit, the replicas apply it and forget the decision at TRUNCATE-RECOVERY. Back in
//! the readmission view, the coroutine still waited: its transaction was recovered
//! again, every partition voted "unknown" (no record left anywhere) and it was aborted,
//! so the client was told "nothing changed" of a transaction whose writes were
//! installed.
//!
//! Random plans on 5 nodes with 2 replicas (membership; crash, pause, partition, loss)
//! at commit d2cd1a8. resp-bank seed 118: node 4's transaction (view 1, thread 0,
//! counter 4) is committed by node 3 in view 2 (node 4 suspended), then aborted by node
//! 4's recovery in view 3 (votes unknown, unknown); the balances moved by a transfer
//! the client saw aborted. kv-churn seed 161: node 3's (view 1, thread 1, counter 16),
//! committed in view 2 and aborted in view 4 (`ReadOfUnwrittenVersion`,
//! `AbsentReadOfPresentKey`).
//!
//! Only an abort decided after skipped views is doubtful (a commit vote needs a
//! commit-backup record or an install, which a forgotten abort leaves nowhere), so a
//! commit decided then is trusted: list-append seeds 102 and 183 (same plans) have
//! readmitted lives whose interrupted commits touched a partition only they held, so no
//! view decided them without them; giving up on those decisions too recorded them
//! aborted (list-append took "outcome unknown" for an abort) and failed G1a.

mod common;

#[test]
fn bug_a_readmitted_life_was_told_aborted_of_what_committed_without_it() {
    let failed = common::failing(
        &[
            ("resp-bank", 118),
            ("kv-churn", 161),
            ("list-append", 102),
            ("list-append", 183),
        ],
        5,
        2,
    );
    assert!(failed.is_empty(), "{failed:#?}");
}
