//! A checker of strict serializability for histories whose version order is known.
//!
//! In ferrotx every committed write of a key installs the next version of that key, and
//! every read returns the version it saw, so the order of each key's versions is known
//! exactly (Adya's "recoverable" version order, as Elle recovers it from list appends).
//! The checker builds the dependency graph of the committed transactions directly:
//!
//! - `ww`: the writer of version v of a key to the writer of its next version;
//! - `wr`: the writer of version v to each transaction that read v;
//! - `rw` (anti-dependency): each reader of v to the writer of the next version;
//! - `rt` (real time): T1 to T2 when T1 ended before T2 started.
//!
//! A cycle means no serial order agrees with what the transactions saw and with real time:
//! not strictly serializable. Each cycle found is reported with its transactions and edge
//! kinds and named after Adya: G0 (write cycles), G1c (write and read dependencies),
//! G-single (exactly one anti-dependency), G2 (several); "-realtime" when it needs a
//! real-time edge. Reads of versions no committed transaction wrote are G1a/G1b.
//!
//! Indeterminate transactions (whose outcome the client never learned) may or may not have
//! committed. One whose written version another committed transaction read did commit,
//! and counts as committed, with no end in real time (it precedes nothing). The others
//! are left out: their versions are neither required nor forbidden, and a read of a
//! version only they may have written (or of a key one of them wrote blind, at a version
//! it never learned) is not reported.
//!
//! Real-time edges are not added pairwise (quadratic): every start and end is an event
//! node on one chain ordered by time, a transaction points to its end event and its start
//! event points to it, so T1 reaches T2 through the chain exactly when T1 ended before T2
//! started.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use super::graph;
pub use crate::history::TxnRecord;
use crate::history::{Outcome, VERSION_UNKNOWN};

/// Kinds of dependency edges.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Edge {
    /// Write-write.
    Ww,
    /// Write-read.
    Wr,
    /// Read-write (anti-dependency).
    Rw,
    /// Real time.
    Rt,
}

/// Something the history shows that strict serializability forbids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A committed transaction read a version that no committed transaction wrote (and
    /// that is not an initial version).
    ReadOfUnwrittenVersion {
        /// The reader.
        reader: u64,
        /// The key, formatted.
        key: String,
        /// The version read.
        version: u64,
    },
    /// A committed transaction read a key absent at a version no write installed (its
    /// floor) while the key's last version up to there was present.
    AbsentReadOfPresentKey {
        /// The reader.
        reader: u64,
        /// The key, formatted.
        key: String,
        /// The version read.
        version: u64,
    },
    /// Two committed transactions installed the same version of a key.
    DuplicateVersion {
        /// The key, formatted.
        key: String,
        /// The version.
        version: u64,
        /// The two writers.
        writers: (u64, u64),
    },
    /// A dependency cycle.
    Cycle {
        /// Adya's name for it.
        anomaly: String,
        /// The transactions of the cycle, in order, each with the kind of the edge to the
        /// next.
        steps: Vec<(u64, Edge)>,
    },
}

enum Node {
    Txn(usize),
    Event,
}

/// Checks a history. `initial` says which versions of which keys existed before the
/// history (loaded data); version 0 (no object) always exists.
pub fn check<K: Ord + Clone + Debug>(
    history: &[TxnRecord<K>],
    initial: impl Fn(&K, u64) -> bool,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    let proved = committed_or_proved(history);
    let committed: Vec<&TxnRecord<K>> = history
        .iter()
        .zip(&proved)
        .filter_map(|(t, &proved)| proved.then_some(t))
        .collect();
    // Keys an unproved indeterminate transaction wrote, with the versions it would install:
    // reads of these are not reported unwritten.
    let mut maybe: BTreeSet<(&K, u64)> = BTreeSet::new();
    for (t, _) in history
        .iter()
        .zip(&proved)
        .filter(|(t, proved)| !**proved && t.outcome() == Outcome::Indeterminate)
    {
        maybe.extend(t.writes.iter().map(|(key, version)| (key, *version)));
    }

    // Who installed each version of each key.
    let mut writer: BTreeMap<(&K, u64), usize> = BTreeMap::new();
    for (i, t) in committed.iter().enumerate() {
        for (key, version) in t.writes.iter().filter(|(_, v)| *v != VERSION_UNKNOWN) {
            if let Some(&other) = writer.get(&(key, *version)) {
                violations.push(Violation::DuplicateVersion {
                    key: format!("{key:?}"),
                    version: *version,
                    writers: (committed[other].id, t.id),
                });
            } else {
                writer.insert((key, *version), i);
            }
        }
    }

    // Nodes: one per committed transaction, then two events per transaction.
    let n = committed.len();
    let mut nodes: Vec<Node> = (0..n).map(Node::Txn).collect();
    let mut edges: Vec<Vec<(usize, Edge)>> = vec![Vec::new(); n];
    let add = |edges: &mut Vec<Vec<(usize, Edge)>>, from: usize, to: usize, kind: Edge| {
        if from != to {
            edges[from].push((to, kind));
        }
    };

    // ww: consecutive committed versions of each key.
    let mut versions: BTreeMap<&K, BTreeSet<u64>> = BTreeMap::new();
    for &(key, version) in writer.keys() {
        versions.entry(key).or_default().insert(version);
    }
    let next_writer = |key: &K, version: u64| -> Option<usize> {
        let set = versions.get(key)?;
        let next = *set.range(version + 1..).next()?;
        writer.get(&(key, next)).copied()
    };
    for (&(key, version), &w) in &writer {
        if let Some(next) = next_writer(key, version) {
            add(&mut edges, w, next, Edge::Ww);
        }
    }
    // Versions installed by deletes, of committed transactions.
    let deleted: BTreeSet<(&K, u64)> = committed
        .iter()
        .flat_map(|t| t.deletes.iter().map(|(key, version)| (key, *version)))
        .collect();
    // wr and rw.
    for (i, t) in committed.iter().enumerate() {
        for (key, version) in &t.reads {
            match writer.get(&(key, *version)) {
                Some(&w) => add(&mut edges, w, i, Edge::Wr),
                None if *version == 0 || initial(key, *version) => {}
                None if maybe.contains(&(key, *version))
                    || maybe.contains(&(key, VERSION_UNKNOWN)) => {}
                // Absent at a version no write of the key installed: a key with no object
                // reads at its floor, which covers every version the key had. It
                // read the key's last version up to there, which must have deleted it (or
                // there is none, and the key was not loaded).
                None if t.absent.contains(&(key.clone(), *version)) => {
                    let last = versions
                        .get(key)
                        .and_then(|set| set.range(..*version).next_back())
                        .copied();
                    let unsure = maybe.iter().any(|(k, v)| *k == key && *v <= *version);
                    match last {
                        _ if unsure => {}
                        Some(last) if deleted.contains(&(key, last)) => {
                            if let Some(&w) = writer.get(&(key, last)) {
                                add(&mut edges, w, i, Edge::Wr);
                            }
                        }
                        None if !initial(key, 1) => {}
                        _ => violations.push(Violation::AbsentReadOfPresentKey {
                            reader: t.id,
                            key: format!("{key:?}"),
                            version: *version,
                        }),
                    }
                }
                None => violations.push(Violation::ReadOfUnwrittenVersion {
                    reader: t.id,
                    key: format!("{key:?}"),
                    version: *version,
                }),
            }
            if let Some(next) = next_writer(key, *version) {
                add(&mut edges, i, next, Edge::Rw);
            }
        }
    }
    // rt: the event chain. At equal times starts come first, so that only a strictly
    // earlier end precedes a start.
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * n);
    for (i, t) in committed.iter().enumerate() {
        events.push((t.start_ns, 0, i));
        events.push((t.end_ns, 1, i));
    }
    events.sort_unstable();
    let first_event = nodes.len();
    for (e, &(_, kind, i)) in events.iter().enumerate() {
        let node = first_event + e;
        nodes.push(Node::Event);
        edges.push(Vec::new());
        if kind == 0 {
            edges[node].push((i, Edge::Rt));
        } else {
            edges[i].push((node, Edge::Rt));
        }
        if e > 0 {
            edges[node - 1].push((node, Edge::Rt));
        }
    }

    for component in graph::strongly_connected(&edges, |&(w, _)| Some(w), false) {
        let txns: Vec<usize> = component
            .iter()
            .copied()
            .filter(|&v| matches!(nodes[v], Node::Txn(_)))
            .collect();
        if txns.len() < 2 {
            continue;
        }
        let steps = cycle_in(&edges, &nodes, &component, txns[0]);
        violations.push(Violation::Cycle {
            anomaly: name(&steps),
            steps: steps
                .iter()
                .map(|&(t, kind)| (committed[t].id, kind))
                .collect(),
        });
    }
    violations
}

/// For each record: true if it committed, or if it is indeterminate and a transaction
/// counted as committed read a version that only it can have written (which proves it
/// committed, since only a committed transaction's versions can be read). A version a
/// committed transaction installed, or one that two indeterminate transactions would
/// have installed, proves nothing: an indeterminate transaction that read version v and
/// never locked intends v + 1, which another may have installed. Aborted records never
/// count.
pub fn committed_or_proved<K: Ord>(history: &[TxnRecord<K>]) -> Vec<bool> {
    let mut proved: Vec<bool> = history
        .iter()
        .map(|t| t.outcome() == Outcome::Committed)
        .collect();
    let committed_versions: BTreeSet<(&K, u64)> = history
        .iter()
        .filter(|t| t.outcome() == Outcome::Committed)
        .flat_map(|t| t.writes.iter().map(|(key, version)| (key, *version)))
        .collect();
    // The one indeterminate writer of each version (`None`: more than one).
    let mut maybe_writer: BTreeMap<(&K, u64), Option<usize>> = BTreeMap::new();
    for (i, t) in history.iter().enumerate() {
        if t.outcome() == Outcome::Indeterminate {
            for (key, version) in t.writes.iter().filter(|(_, v)| *v != VERSION_UNKNOWN) {
                if !committed_versions.contains(&(key, *version)) {
                    maybe_writer
                        .entry((key, *version))
                        .and_modify(|w| *w = None)
                        .or_insert(Some(i));
                }
            }
        }
    }
    // A proved transaction's reads may prove others: follow them until none is new.
    let mut pending: Vec<usize> = (0..history.len()).filter(|&i| proved[i]).collect();
    while let Some(i) = pending.pop() {
        for (key, version) in &history[i].reads {
            match maybe_writer.get(&(key, *version)) {
                Some(&Some(w)) if !proved[w] => {
                    proved[w] = true;
                    pending.push(w);
                }
                _ => {}
            }
        }
    }
    proved
}

/// Adya's name for a cycle with these edge kinds.
fn name(steps: &[(usize, Edge)]) -> String {
    let count = |kind| steps.iter().filter(|(_, k)| *k == kind).count();
    let base = match (count(Edge::Rw), count(Edge::Wr)) {
        (0, 0) => "G0",
        (0, _) => "G1c",
        (1, _) => "G-single",
        _ => "G2",
    };
    if count(Edge::Rt) > 0 {
        format!("{base}-realtime")
    } else {
        base.to_owned()
    }
}

/// A cycle through `start` inside `component`, as transactions and the kind of the first
/// edge leaving each (event nodes folded into a real-time step).
fn cycle_in(
    edges: &[Vec<(usize, Edge)>],
    nodes: &[Node],
    component: &[usize],
    start: usize,
) -> Vec<(usize, Edge)> {
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    // Breadth-first search from `start` back to `start` within the component.
    let mut previous: BTreeMap<usize, (usize, Edge)> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    'search: while let Some(v) = queue.pop_front() {
        for &(w, kind) in &edges[v] {
            if !inside.contains(&w) || previous.contains_key(&w) {
                continue;
            }
            previous.insert(w, (v, kind));
            if w == start {
                break 'search;
            }
            queue.push_back(w);
        }
    }
    let mut path = Vec::new();
    let mut v = start;
    loop {
        let (from, kind) = previous[&v];
        path.push((from, kind));
        v = from;
        if v == start {
            break;
        }
    }
    path.reverse();
    // Fold event nodes: an edge into an event chain is a real-time step of the
    // transaction before it.
    let mut steps: Vec<(usize, Edge)> = Vec::new();
    for (node, kind) in path {
        match nodes[node] {
            Node::Txn(t) => steps.push((t, kind)),
            Node::Event => {}
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(
        id: u64,
        span: (u64, u64),
        reads: &[(&'static str, u64)],
        writes: &[(&'static str, u64)],
    ) -> TxnRecord<&'static str> {
        TxnRecord {
            id,
            start_ns: span.0,
            end_ns: span.1,
            committed: true,
            reads: reads.to_vec(),
            writes: writes.to_vec(),
            absent: Vec::new(),
            deletes: Vec::new(),
        }
    }

    fn initial(_: &&str, version: u64) -> bool {
        version == 1
    }

    fn anomalies(history: &[TxnRecord<&'static str>]) -> Vec<String> {
        check(history, initial)
            .into_iter()
            .map(|v| match v {
                Violation::Cycle { anomaly, .. } => anomaly,
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn an_absent_read_at_the_floor_reads_the_last_delete_before_it() {
        // x loaded at 1, deleted at 2 by T1; its object reclaimed, the floor at 5 (another
        // key's delete). T2 reads x absent at 5: after T1. T3 inserts x at 6 (its object
        // made at the floor), after T2's read: T2 -> T3 (rw).
        let mut t1 = txn(1, (0, 10), &[("x", 1)], &[("x", 2)]);
        t1.deletes = vec![("x", 2)];
        let mut t2 = txn(2, (20, 30), &[("x", 5)], &[]);
        t2.absent = vec![("x", 5)];
        let mut t3 = txn(3, (40, 50), &[("x", 5)], &[("x", 6)]);
        t3.absent = vec![("x", 5)];
        assert!(check(&[t1.clone(), t2.clone(), t3.clone()], initial).is_empty());
        // Read absent before the delete in real time: a cycle (T2 -> ... T1 ends before
        // T2 starts is needed for wr; here T2 ends before T1 starts).
        let mut early = t2.clone();
        (early.start_ns, early.end_ns) = (0, 1);
        let mut late_delete = t1.clone();
        (late_delete.start_ns, late_delete.end_ns) = (5, 10);
        assert!(!check(&[late_delete, early], initial).is_empty());
        // Absent at 5 while x's last write up to 5 put a value: a violation.
        let mut put = txn(1, (0, 10), &[("x", 1)], &[("x", 2)]);
        put.deletes.clear();
        assert_eq!(
            check(&[put, t2.clone()], initial),
            vec![Violation::AbsentReadOfPresentKey {
                reader: 2,
                key: "\"x\"".into(),
                version: 5
            }]
        );
        // And a read at 5 that found a value is still a read of an unwritten version.
        let mut present = t2;
        present.absent.clear();
        assert!(matches!(
            check(&[t1, present], initial)[..],
            [Violation::ReadOfUnwrittenVersion { .. }]
        ));
    }

    #[test]
    fn a_serial_history_passes() {
        let h = [
            txn(1, (0, 10), &[("x", 1)], &[("x", 2)]),
            txn(2, (20, 30), &[("x", 2), ("y", 1)], &[("y", 2)]),
            txn(3, (40, 50), &[("x", 2), ("y", 2)], &[]),
        ];
        assert!(check(&h, initial).is_empty());
    }

    #[test]
    fn overlapping_transactions_may_see_older_versions() {
        // T2 overlaps T1, so it may serialize before it and read x@1.
        let h = [
            txn(1, (0, 10), &[("x", 1)], &[("x", 2)]),
            txn(2, (5, 15), &[("x", 1)], &[]),
        ];
        assert!(check(&h, initial).is_empty());
    }

    #[test]
    fn lost_update_is_g_single() {
        // Both read x@1; T2 overwrote T1's write without seeing it.
        let h = [
            txn(1, (0, 10), &[("x", 1)], &[("x", 2)]),
            txn(2, (0, 10), &[("x", 1)], &[("x", 3)]),
        ];
        assert_eq!(anomalies(&h), ["G-single"]);
    }

    #[test]
    fn write_skew_is_g2() {
        let h = [
            txn(1, (0, 10), &[("x", 1), ("y", 1)], &[("x", 2)]),
            txn(2, (0, 10), &[("x", 1), ("y", 1)], &[("y", 2)]),
        ];
        assert_eq!(anomalies(&h), ["G2"]);
    }

    #[test]
    fn a_stale_read_after_an_acknowledged_write_is_a_real_time_anomaly() {
        // T1 committed x@2 before T2 started, yet T2 read x@1.
        let h = [
            txn(1, (0, 10), &[("x", 1)], &[("x", 2)]),
            txn(2, (20, 30), &[("x", 1)], &[]),
        ];
        assert_eq!(anomalies(&h), ["G-single-realtime"]);
    }

    #[test]
    fn equal_times_count_as_concurrent() {
        // T2 starts at the instant T1 ends: concurrent, so reading the old version is
        // allowed. One tick later it is not.
        let h = [
            txn(1, (0, 10), &[("x", 1)], &[("x", 2)]),
            txn(2, (10, 12), &[("x", 1)], &[]),
        ];
        assert!(check(&h, initial).is_empty());
        let h = [
            txn(1, (0, 10), &[("x", 1)], &[("x", 2)]),
            txn(2, (11, 12), &[("x", 1)], &[]),
        ];
        assert_eq!(anomalies(&h), ["G-single-realtime"]);
    }

    #[test]
    fn a_read_of_an_aborted_write_is_reported() {
        let mut aborted = txn(1, (0, 10), &[("x", 1)], &[("x", 2)]);
        aborted.committed = false;
        let h = [aborted, txn(2, (20, 30), &[("x", 2)], &[])];
        assert!(matches!(
            check(&h, initial)[..],
            [Violation::ReadOfUnwrittenVersion {
                reader: 2,
                version: 2,
                ..
            }]
        ));
    }

    #[test]
    fn two_writers_of_one_version_are_reported() {
        let h = [
            txn(1, (0, 10), &[], &[("x", 2)]),
            txn(2, (20, 30), &[], &[("x", 2)]),
        ];
        assert!(matches!(
            check(&h, initial)[..],
            [Violation::DuplicateVersion { version: 2, .. }]
        ));
    }

    #[test]
    fn circular_information_flow_is_g1c() {
        // T1 reads T2's write of y and T2 reads T1's write of x.
        let h = [
            txn(1, (0, 10), &[("y", 2)], &[("x", 2)]),
            txn(2, (0, 10), &[("x", 2)], &[("y", 2)]),
        ];
        assert_eq!(anomalies(&h), ["G1c"]);
    }

    #[test]
    fn a_long_serial_chain_with_real_time_order_passes() {
        let h: Vec<_> = (0..2000u64)
            .map(|i| TxnRecord {
                id: i,
                start_ns: i * 10,
                end_ns: i * 10 + 5,
                committed: true,
                reads: vec![("x", i + 1)],
                writes: vec![("x", i + 2)],
                absent: Vec::new(),
                deletes: Vec::new(),
            })
            .collect();
        assert!(check(&h, initial).is_empty());
    }

    fn indeterminate(mut record: TxnRecord<&'static str>) -> TxnRecord<&'static str> {
        record.end_ns = crate::history::END_UNKNOWN;
        record.committed = false;
        record
    }

    #[test]
    fn an_indeterminate_write_nobody_read_is_neither_required_nor_reported() {
        // T1's commit answer never came; T2, later, still reads x@1: fine, T1 may have
        // failed. Its version 2 is not a duplicate of T3's either.
        let h = [
            indeterminate(txn(1, (0, 10), &[("x", 1)], &[("x", 2)])),
            txn(2, (20, 30), &[("x", 1)], &[]),
            txn(3, (40, 50), &[("x", 1)], &[("x", 2)]),
        ];
        assert!(check(&h, initial).is_empty());
    }

    #[test]
    fn a_read_of_an_indeterminate_write_proves_it_committed() {
        let h = [
            indeterminate(txn(1, (0, 10), &[("x", 1)], &[("x", 2)])),
            txn(2, (20, 30), &[("x", 2)], &[]),
        ];
        assert!(check(&h, initial).is_empty());
        assert_eq!(committed_or_proved(&h), [true, true]);
    }

    #[test]
    fn a_proved_indeterminate_write_then_a_stale_read_is_g_single_realtime() {
        // T2 saw T1's x@2 and ended before T3 started, yet T3 read x@1.
        let h = [
            indeterminate(txn(1, (0, 10), &[("x", 1)], &[("x", 2)])),
            txn(2, (20, 30), &[("x", 2)], &[]),
            txn(3, (40, 50), &[("x", 1)], &[]),
        ];
        assert_eq!(anomalies(&h), ["G-single-realtime"]);
    }

    #[test]
    fn proof_of_commit_follows_chains_of_indeterminate_transactions() {
        // T3 read T2's y@2, T2 (indeterminate) read T1's x@2: both proved; then T1's
        // write is lost to T4, which overwrote x@1 without seeing it.
        let h = [
            indeterminate(txn(1, (0, 10), &[("x", 1)], &[("x", 2)])),
            indeterminate(txn(2, (0, 10), &[("x", 2)], &[("y", 2)])),
            txn(3, (20, 30), &[("y", 2)], &[]),
            txn(4, (0, 10), &[("x", 1)], &[("x", 3)]),
        ];
        assert_eq!(committed_or_proved(&h), [true, true, true, true]);
        let found = anomalies(&h);
        assert!(
            matches!(&found[..], [one] if one.starts_with('G')),
            "{found:?}"
        );
    }

    #[test]
    fn a_read_of_a_version_an_indeterminate_blind_write_may_have_installed_passes() {
        let h = [
            indeterminate(txn(
                1,
                (0, 10),
                &[],
                &[("x", crate::history::VERSION_UNKNOWN)],
            )),
            txn(2, (20, 30), &[("x", 7)], &[]),
        ];
        assert!(check(&h, initial).is_empty());
    }

    #[test]
    fn a_read_of_a_version_a_committed_transaction_installed_proves_no_indeterminate_one() {
        // T1 read x@1 and was cut off before locking; T2 installed x@2, which T3 read.
        // T1 intended x@2 too, but T3's read is T2's.
        let h = [
            indeterminate(txn(1, (0, 10), &[("x", 1)], &[("x", 2)])),
            txn(2, (0, 10), &[("x", 1)], &[("x", 2)]),
            txn(3, (20, 30), &[("x", 2)], &[]),
        ];
        assert_eq!(committed_or_proved(&h), [false, true, true]);
        assert!(check(&h, initial).is_empty());
    }

    #[test]
    fn a_version_two_indeterminate_transactions_intended_proves_neither() {
        let h = [
            indeterminate(txn(1, (0, 10), &[("x", 1)], &[("x", 2)])),
            indeterminate(txn(2, (0, 10), &[("x", 1)], &[("x", 2)])),
            txn(3, (20, 30), &[("x", 2)], &[]),
        ];
        assert_eq!(committed_or_proved(&h), [false, false, true]);
        assert!(check(&h, initial).is_empty());
    }
}
