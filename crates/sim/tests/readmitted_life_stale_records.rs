//! A life suspended while it held the last copies of a partition keeps its process and
//! is readmitted as the same life, skipping the views in between. Those views moved its
//! other partitions on without it (other replicas promoted, its transactions there
//! recovered and decided, the decisions forgotten), and the readmission view no longer
//! gives it those copies; a later view may give them back as empty copies to fill.
//!
//! Its participants kept what they held for the dropped copies: LOCK records (whose locks
//! were in the dropped copy), logged and replicated records. When a later view made the
//! node a replica of such a partition again, its backup sent those records in
//! NEED-RECOVERY; the recovery coordinator decided the long-decided transaction again
//! and its ABORT-RECOVERY unlocked, in the new empty copy, a key that had no object:
//! `panic: unlock of a key that was never locked` (in a copy that held the key, it would
//! have released another transaction's lock; a logged record would have been applied to
//! the new copy at truncation).
//!
//! Random plans on 5 nodes with 2 replicas (membership; crash, pause, partition, loss) at
//! commit d2cd1a8. kv-full seed 56: node 2 (primary of partitions 2 and 7, backup of 1
//! and 5) is suspended in view 2 holding partition 1, readmitted in view 3 holding only
//! partition 1, and given partitions 0, 2, 5, 6, 7 and 9 to fill in view 4. Seed 163:
//! the same with node 4, partitions 3, 4 and 9.

mod common;

#[test]
fn bug_a_readmitted_life_decided_its_dropped_copies_records_again() {
    let failed = common::failing(&[("kv-full", 56), ("kv-full", 163)], 5, 2);
    assert!(failed.is_empty(), "{failed:#?}");
}
