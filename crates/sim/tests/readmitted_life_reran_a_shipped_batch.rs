//! A shipped operation (a Redis APPEND, INCR, a MULTI block on one primary) runs in a
//! batch at its partition's primary: `Shipping::take_batch` checks, in the view it runs
//! in, that this node is the primary and knows no run of the operation, and the batch
//! then commits as a transaction of that node's coordinator, retried on conflicts for up
//! to 2 s. A caller cut off by a view change asks the partition's primary of the new
//! view again, which runs it unless a run reached it.
//!
//! The retries did not keep to the view the batch was taken in. A primary cut off with
//! its keys locked (a commit it could not finish) retried its batch on `Locked`; its
//! life was suspended (it held the last copy of another partition) and readmitted as the
//! same life, which no longer held the batch's partition. Its next retry, in the
//! readmission view, read and locked the keys through the placement at the new primary,
//! which had run the operation already for the caller who asked again: the append or
//! increment committed twice.
//!
//! Random plans on 5 nodes with 2 replicas (membership; crash, pause, partition, loss)
//! at commit c3bf31c. resp-list-append seed 243: node 4, primary of partition 9 in view
//! 1, takes origin (node 1, thread 1, seq 4) at 3.0 ms and retries it on `Locked`; its
//! lease ends, view 2 (13.5 ms) promotes node 1 for partition 9 and suspends node 4 with
//! partition 3; view 3 (16.1 ms) readmits node 4 with partition 3 only. Node 1 runs the
//! origin, asked again, at 21.73 ms; node 4's retry, begun at 16.1 ms in view 3, reads
//! at node 1 after that run and commits the same appends at 21.87 ms
//! (`duplicate-elements`, G0). resp-list-append seed 433 (views 2 and 4, partition 9),
//! resp-counter seed 337 and resp-counter-spread seed 468 (partition 4; increments
//! counted twice) are the same.

mod common;

#[test]
fn bug_a_readmitted_life_committed_a_shipped_batch_of_a_view_it_had_left() {
    let failed = common::failing(
        &[
            ("resp-list-append", 243),
            ("resp-list-append", 433),
            ("resp-counter", 337),
            ("resp-counter-spread", 468),
        ],
        5,
        2,
    );
    assert!(failed.is_empty(), "{failed:#?}");
}
