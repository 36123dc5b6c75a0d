//! A checker of strict serializability for list-append histories, from values alone.
//!
//! The store's versions are not trusted (a Redis client never sees them): as in Elle's
//! list-append checker (Kingsbury and Alvaro, "Elle: Inferring Isolation Anomalies from
//! Experimental Observations", VLDB 2020), every key holds a list, transactions append
//! elements that are unique per key and read whole lists, so each element names its
//! writer and each read names a prefix of the key's version order.
//!
//! The check, in order:
//!
//! 1. Index every append by `(key, element)`; an element appended twice is reported.
//! 2. Decide which transactions are in the graph: the committed ones, and the
//!    indeterminate ones whose appends some observed read saw (that proves they
//!    committed). An indeterminate transaction never observed is left out: it may have
//!    aborted, and leaving it out can only hide anomalies, never invent one. A proven
//!    transaction's own recorded reads are observations too, so this repeats until no
//!    more are proven (once, unless indeterminate transactions recorded reads).
//! 3. Check each observed read (reads of transactions in the graph, and the final reads
//!    taken after the history): no element twice, no element nobody appended (garbage),
//!    none appended only by an aborted transaction (G1a), not ending in a transaction's
//!    non-final append to that key (G1b), and a transaction's read agrees with its own
//!    earlier reads and appends (internal consistency).
//! 4. Infer each key's version order as its longest observed read; every other read must
//!    be a prefix of it. A committed append missing from the key's final read is lost.
//!    An append that no read saw has no place in the order and takes part in no edge:
//!    without final reads, a stale read of the last appends to a key goes unseen, so a
//!    run should end with them.
//! 5. Build the dependency graph (Adya): `ww` from the writer of element i to the writer
//!    of element i+1, `wr` from the writer of the last element a read saw to the reader,
//!    `rw` from that reader to the writer of the next element (a read of the empty list
//!    anti-depends on the writer of the first), and real time. Real-time edges are not
//!    added pairwise: every start and every end is an event node on one chain ordered by
//!    time, a transaction points to its end event and its start event points to it, so
//!    T1 reaches T2 through the chain exactly when T1 ended before T2 started. An
//!    indeterminate transaction has no end event (its client never learned when it
//!    committed, so nothing is known to follow it).
//! 6. Find the strongly connected components (Tarjan); in each with a cycle, search for
//!    the weakest anomaly it holds, from G0 (ww only) through G1c (ww, wr), G-single
//!    (exactly one rw) to G2, first without real-time edges and then with them, and
//!    report the shortest cycle that search finds, named as Elle names them: `G0`,
//!    `G1c`, `G-single-item`, `G2-item` (every anti-dependency here is on an item, not a
//!    predicate), with `-realtime` when the cycle needs a real-time edge.
//!
//! Everything is linear in the size of the history (the total length of its reads)
//! except the cycle search inside a cyclic component, which is a bounded number of
//! passes over the component ([`CYCLE_STARTS_MAX`], [`REACHABILITY_PASSES_MAX`]). Only
//! the elements of each key's longest read and of reads that are not its prefixes are
//! looked up one by one: a prefix holds nothing the longest does not.
//! Any history is accepted: malformed ones yield violations, never a panic.
//!
//! Why not the `adya` crate (0.1.0, an Elle port): it takes Jepsen's JSON or EDN
//! histories rather than values, always pulls in `clap`, keys its maps with std's
//! randomly seeded hasher, and adds one real-time edge from every operation on the
//! frontier of those completed so far to each that follows (more edges the more
//! concurrency), where the simulator needs a deterministic, dependency-light library
//! call whose real-time edges stay linear.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use super::graph;
use foldhash::fast::FixedState;

/// A key of the list-append workload.
pub type ListKey = u64;

/// An element appended to a list; unique per key across a history.
pub type Element = u64;

type Map<K, V> = hashbrown::HashMap<K, V, FixedState>;
type Set<K> = hashbrown::HashSet<K, FixedState>;

fn new_map<K, V>() -> Map<K, V> {
    Map::with_hasher(FixedState::default())
}

fn new_set<K>() -> Set<K> {
    Set::with_hasher(FixedState::default())
}

/// The most transactions of one cyclic component a plain cycle search starts from; the
/// shortest cycle found from them is reported. Each start costs a breadth-first search
/// of the component, so this bounds the search to a constant number of passes.
pub const CYCLE_STARTS_MAX: usize = 16;

/// The most passes over a cyclic component that decide which anti-dependencies close a
/// G-single cycle, each for 64 readers; past 1024 readers a G-single may be reported as
/// the G2 it also is (a less specific name, never a false one).
pub const REACHABILITY_PASSES_MAX: usize = 16;

/// One operation of a transaction, as the client recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MicroOp {
    /// Appends `element` to the list under `key`.
    Append {
        /// The list.
        key: ListKey,
        /// The element, unique per key.
        element: Element,
    },
    /// Reads the whole list under `key`.
    Read {
        /// The list.
        key: ListKey,
        /// The list as read, oldest element first; `None` if the read was not done or
        /// its result is unknown.
        list: Option<Vec<Element>>,
    },
}

/// What the client learned of a transaction's fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It committed.
    Committed,
    /// It did not commit, and never will.
    Aborted,
    /// The client never learned: it may or may not have committed.
    Indeterminate,
}

/// One transaction of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    /// Unique id, for reports.
    pub id: u64,
    /// When the client invoked it, on a counter of events shared by every client.
    pub start: u64,
    /// When the client learned its outcome, on the same counter. T1 precedes T2 in real
    /// time only if `T1.end < T2.start`; equal values count as concurrent. Ignored for an
    /// indeterminate transaction (it may have committed at any time after `start`).
    pub end: u64,
    /// Its outcome.
    pub outcome: Outcome,
    /// Its operations, in the order it did them.
    pub ops: Vec<MicroOp>,
}

/// Kinds of dependency edges.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Edge {
    /// Write-write: the next append to the key.
    Ww,
    /// Write-read: the reader saw the writer's append last.
    Wr,
    /// Read-write (anti-dependency): the writer appended the element the reader missed.
    Rw,
    /// Real time: the first ended before the second started.
    Rt,
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Edge::Ww => "ww",
            Edge::Wr => "wr",
            Edge::Rw => "rw",
            Edge::Rt => "rt",
        })
    }
}

/// One step of a cycle: a transaction and the edge from it to the next step's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Step {
    /// The transaction's id.
    pub txn: u64,
    /// The kind of the edge to the next transaction of the cycle.
    pub edge: Edge,
    /// The key that edge is about (`None` for real time).
    pub key: Option<ListKey>,
}

/// Adya's classes of dependency cycles, weakest first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum CycleAnomaly {
    /// Write cycle: only ww edges.
    G0,
    /// Circular information flow: ww and wr edges, at least one wr.
    G1c,
    /// Exactly one anti-dependency edge (on an item).
    GSingleItem,
    /// Two or more anti-dependency edges (on items).
    G2Item,
}

/// Who made an observed read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reader {
    /// The transaction with this id.
    Txn(u64),
    /// The final read of the key, taken after the history ended.
    Final,
}

impl fmt::Display for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reader::Txn(id) => write!(f, "T{id}"),
            Reader::Final => f.write_str("the final read"),
        }
    }
}

/// Something the history shows that strict serializability forbids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A dependency cycle.
    Cycle {
        /// Its class.
        anomaly: CycleAnomaly,
        /// True if the cycle needs a real-time edge.
        realtime: bool,
        /// The transactions of the cycle, in order, each with the edge to the next (the
        /// last one's edge leads back to the first).
        steps: Vec<Step>,
    },
    /// G1a: a read saw an element that only an aborted transaction appended.
    AbortedRead {
        /// The reader.
        reader: Reader,
        /// The key.
        key: ListKey,
        /// The element.
        element: Element,
        /// The aborted appender.
        writer: u64,
    },
    /// G1b: a read ended at an append of a transaction that appended to the key again
    /// later, so it saw that transaction's intermediate state.
    IntermediateRead {
        /// The reader.
        reader: Reader,
        /// The key.
        key: ListKey,
        /// The non-final element the read ended with.
        element: Element,
        /// Its appender.
        writer: u64,
    },
    /// A read saw an element that no transaction appended.
    GarbageRead {
        /// The reader.
        reader: Reader,
        /// The key.
        key: ListKey,
        /// The element.
        element: Element,
    },
    /// A read saw an element more than once.
    DuplicateElements {
        /// The reader.
        reader: Reader,
        /// The key.
        key: ListKey,
        /// The element seen twice.
        element: Element,
    },
    /// Two appends of the same element to one key: the history breaks the workload's
    /// promise of unique elements, so the writer of that element is unknown.
    DuplicateAppend {
        /// The key.
        key: ListKey,
        /// The element.
        element: Element,
        /// The two appenders (the same id twice if one transaction appended it twice).
        writers: (u64, u64),
    },
    /// A transaction's read disagreed with its own earlier reads and appends of the key.
    Internal {
        /// The transaction.
        txn: u64,
        /// The key.
        key: ListKey,
        /// What it read.
        read: Vec<Element>,
        /// What it should have read: the whole list if `whole`, else the list's end (the
        /// transaction appended these without having read the key before).
        expected: Vec<Element>,
        /// Whether `expected` is the whole list or only its end.
        whole: bool,
    },
    /// Two reads of a key of which neither is a prefix of the other: no single order of
    /// appends explains both.
    IncompatibleOrder {
        /// The key.
        key: ListKey,
        /// The read that is not a prefix of the longest.
        reader: Reader,
        /// What it read.
        read: Vec<Element>,
        /// The longest read of the key.
        longest_reader: Reader,
        /// What that read.
        longest: Vec<Element>,
    },
    /// A committed append missing from the final read of its key.
    LostAppend {
        /// The key.
        key: ListKey,
        /// The element lost.
        element: Element,
        /// The transaction that appended it and was told it committed.
        writer: u64,
    },
}

impl Violation {
    /// The anomaly's name, as Elle spells it where Elle has one: `G0`, `G1c`,
    /// `G-single-item`, `G2-item` (each with `-realtime` when real time is needed),
    /// `G1a`, `G1b`, `garbage-read`, `duplicate-elements`, `duplicate-append`,
    /// `internal`, `incompatible-order`, `lost-append`.
    pub fn name(&self) -> String {
        match self {
            Violation::Cycle {
                anomaly, realtime, ..
            } => {
                let base = match anomaly {
                    CycleAnomaly::G0 => "G0",
                    CycleAnomaly::G1c => "G1c",
                    CycleAnomaly::GSingleItem => "G-single-item",
                    CycleAnomaly::G2Item => "G2-item",
                };
                if *realtime {
                    format!("{base}-realtime")
                } else {
                    base.to_owned()
                }
            }
            Violation::AbortedRead { .. } => "G1a".to_owned(),
            Violation::IntermediateRead { .. } => "G1b".to_owned(),
            Violation::GarbageRead { .. } => "garbage-read".to_owned(),
            Violation::DuplicateElements { .. } => "duplicate-elements".to_owned(),
            Violation::DuplicateAppend { .. } => "duplicate-append".to_owned(),
            Violation::Internal { .. } => "internal".to_owned(),
            Violation::IncompatibleOrder { .. } => "incompatible-order".to_owned(),
            Violation::LostAppend { .. } => "lost-append".to_owned(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.name())?;
        match self {
            Violation::Cycle { steps, .. } => {
                for step in steps {
                    write!(f, "T{} -{}", step.txn, step.edge)?;
                    if let Some(key) = step.key {
                        write!(f, "({key})")?;
                    }
                    f.write_str("-> ")?;
                }
                match steps.first() {
                    Some(first) => write!(f, "T{}", first.txn),
                    None => f.write_str("(empty)"),
                }
            }
            Violation::AbortedRead {
                reader,
                key,
                element,
                writer,
            } => write!(
                f,
                "{reader} read element {element} of key {key}, appended only by aborted T{writer}"
            ),
            Violation::IntermediateRead {
                reader,
                key,
                element,
                writer,
            } => write!(
                f,
                "{reader} read key {key} ending at element {element}, which T{writer} \
                 appended before appending to the key again"
            ),
            Violation::GarbageRead {
                reader,
                key,
                element,
            } => write!(
                f,
                "{reader} read element {element} of key {key}, which no transaction appended"
            ),
            Violation::DuplicateElements {
                reader,
                key,
                element,
            } => write!(
                f,
                "{reader} read element {element} of key {key} more than once"
            ),
            Violation::DuplicateAppend {
                key,
                element,
                writers,
            } => write!(
                f,
                "element {element} of key {key} appended by both T{} and T{}",
                writers.0, writers.1
            ),
            Violation::Internal {
                txn,
                key,
                read,
                expected,
                whole,
            } => {
                let what = if *whole { "" } else { "a list ending in " };
                write!(
                    f,
                    "T{txn} read {read:?} of key {key}, but its own earlier operations imply \
                     {what}{expected:?}"
                )
            }
            Violation::IncompatibleOrder {
                key,
                reader,
                read,
                longest_reader,
                longest,
            } => write!(
                f,
                "{reader} read {read:?} of key {key}, which is not a prefix of \
                 {longest:?} read by {longest_reader}"
            ),
            Violation::LostAppend {
                key,
                element,
                writer,
            } => write!(
                f,
                "T{writer} committed element {element} of key {key}, missing from the final read"
            ),
        }
    }
}

/// An edge of the dependency graph, kept in its source's list.
#[derive(Clone, Copy, Debug)]
struct Arc {
    to: usize,
    edge: Edge,
    key: Option<ListKey>,
}

/// The graph: nodes `0..txns.len()` are transactions (indices into the history), the
/// rest are real-time events.
struct Graph {
    txns: Vec<usize>,
    arcs: Vec<Vec<Arc>>,
}

impl Graph {
    fn add(&mut self, from: usize, to: usize, edge: Edge, key: Option<ListKey>) {
        if from != to {
            self.arcs[from].push(Arc { to, edge, key });
        }
    }
}

/// One observed read: who read which key and what.
struct Observed<'a> {
    reader: Reader,
    /// The reader's index in the history (`None` for a final read).
    txn: Option<usize>,
    key: ListKey,
    list: &'a [Element],
}

/// Checks a list-append history for strict serializability. `final_reads` holds, for
/// some keys, the list read after every transaction of the history ended (empty if none
/// were taken); they take part in the version order and reveal lost appends. Returns
/// every violation found (empty: the history is strictly serializable as far as its
/// observations show).
pub fn check(
    history: &[Transaction],
    final_reads: &BTreeMap<ListKey, Vec<Element>>,
) -> Vec<Violation> {
    let mut violations = Vec::new();

    // 1. Who appended each element, and each transaction's last append to each key.
    let mut appender: Map<(ListKey, Element), usize> = new_map();
    let mut last_append: Map<(usize, ListKey), Element> = new_map();
    for (i, txn) in history.iter().enumerate() {
        for op in &txn.ops {
            if let MicroOp::Append { key, element } = *op {
                match appender.entry((key, element)) {
                    hashbrown::hash_map::Entry::Occupied(first) => {
                        violations.push(Violation::DuplicateAppend {
                            key,
                            element,
                            writers: (history[*first.get()].id, txn.id),
                        });
                    }
                    hashbrown::hash_map::Entry::Vacant(slot) => {
                        slot.insert(i);
                    }
                }
                last_append.insert((i, key), element);
            }
        }
    }

    // 2-4. Which transactions are in the graph (committed ones, and indeterminate ones
    // an observed read proves committed), the reads they observed, and each key's version
    // order: its longest observed read, of which every other read must be a prefix. A
    // proven transaction's own reads are observations too, so this repeats until no read
    // proves another; it runs once unless indeterminate transactions recorded reads.
    let mut included: Vec<bool> = history
        .iter()
        .map(|t| t.outcome == Outcome::Committed)
        .collect();
    let (observed, longest, compatible) = loop {
        let observed = observe(history, &included, final_reads);
        let (longest, compatible) = version_orders(&observed);
        let mut proven = false;
        for (r, read) in observed.iter().enumerate() {
            if compatible[r] && longest.get(&read.key) != Some(&r) {
                continue; // A prefix of the longest read shows nothing more.
            }
            for element in read.list {
                if let Some(&w) = appender.get(&(read.key, *element))
                    && !included[w]
                    && history[w].outcome == Outcome::Indeterminate
                {
                    included[w] = true;
                    proven |= history[w]
                        .ops
                        .iter()
                        .any(|op| matches!(op, MicroOp::Read { list: Some(_), .. }));
                }
            }
        }
        if !proven {
            break (observed, longest, compatible);
        }
    };

    // The checks each read needs alone. A compatible read is a prefix of its key's
    // longest, so the longest holds all its elements: only the longest and the
    // incompatible reads are scanned element by element.
    let mut reported: Set<(ListKey, Element)> = new_set();
    for (r, read) in observed.iter().enumerate() {
        if compatible[r] && longest.get(&read.key) != Some(&r) {
            check_last_element(history, &appender, &last_append, read, &mut violations);
            continue;
        }
        check_elements(history, &appender, read, &mut reported, &mut violations);
        check_last_element(history, &appender, &last_append, read, &mut violations);
        if !compatible[r] {
            let l = &observed[longest[&read.key]];
            violations.push(Violation::IncompatibleOrder {
                key: read.key,
                reader: read.reader,
                read: read.list.to_vec(),
                longest_reader: l.reader,
                longest: l.list.to_vec(),
            });
        }
    }
    for (i, txn) in history.iter().enumerate() {
        if included[i] {
            check_internal(txn, &mut violations);
        }
    }

    // A committed append missing from its key's final read was lost.
    let finals: BTreeMap<ListKey, Set<Element>> = final_reads
        .iter()
        .map(|(key, list)| (*key, list.iter().copied().collect()))
        .collect();
    for (i, txn) in history.iter().enumerate() {
        if txn.outcome != Outcome::Committed {
            continue;
        }
        for op in &txn.ops {
            let MicroOp::Append { key, element } = *op else {
                continue;
            };
            let Some(present) = finals.get(&key) else {
                continue;
            };
            // Only the first appender of a duplicated element is its writer.
            if !present.contains(&element) && appender.get(&(key, element)) == Some(&i) {
                violations.push(Violation::LostAppend {
                    key,
                    element,
                    writer: txn.id,
                });
            }
        }
    }

    // 5. The dependency graph.
    let mut node_of: Vec<Option<usize>> = vec![None; history.len()];
    let mut graph = Graph {
        txns: Vec::new(),
        arcs: Vec::new(),
    };
    for (i, &yes) in included.iter().enumerate() {
        if yes {
            node_of[i] = Some(graph.txns.len());
            graph.txns.push(i);
            graph.arcs.push(Vec::new());
        }
    }
    // The writer's node of each element of each key's order.
    let mut order_writers: BTreeMap<ListKey, Vec<Option<usize>>> = BTreeMap::new();
    for (&key, &r) in &longest {
        let writers: Vec<Option<usize>> = observed[r]
            .list
            .iter()
            .map(|e| appender.get(&(key, *e)).and_then(|&w| node_of[w]))
            .collect();
        for pair in writers.windows(2) {
            if let [Some(a), Some(b)] = *pair {
                graph.add(a, b, Edge::Ww, Some(key));
            }
        }
        order_writers.insert(key, writers);
    }
    for (r, read) in observed.iter().enumerate() {
        let Some(reader) = read.txn.and_then(|i| node_of[i]) else {
            continue;
        };
        if !compatible[r] {
            continue;
        }
        let writers = &order_writers[&read.key];
        let seen = read.list.len();
        if let Some(&Some(w)) = seen.checked_sub(1).and_then(|last| writers.get(last)) {
            graph.add(w, reader, Edge::Wr, Some(read.key));
        }
        if let Some(&Some(w)) = writers.get(seen) {
            graph.add(reader, w, Edge::Rw, Some(read.key));
        }
    }
    // Real time: the event chain. At equal times starts come first, so that only a
    // strictly earlier end precedes a start.
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * graph.txns.len());
    for (node, &i) in graph.txns.iter().enumerate() {
        let txn = &history[i];
        events.push((txn.start, 0, node));
        if txn.outcome == Outcome::Committed {
            // A malformed end before the start is read as the start, so that a
            // transaction never precedes itself.
            events.push((txn.end.max(txn.start), 1, node));
        }
    }
    events.sort_unstable();
    for (e, &(_, kind, node)) in events.iter().enumerate() {
        let event = graph.arcs.len();
        graph.arcs.push(Vec::new());
        if kind == 0 {
            graph.add(event, node, Edge::Rt, None);
        } else {
            graph.add(node, event, Edge::Rt, None);
        }
        if e > 0 {
            graph.add(event - 1, event, Edge::Rt, None);
        }
    }

    // 6. Cycles.
    let transactions = graph.txns.len();
    for component in components(&graph.arcs, |_| true) {
        if component.iter().filter(|&&v| v < transactions).count() < 2 {
            continue;
        }
        if let Some((anomaly, realtime, steps)) = weakest_cycle(&graph, &component) {
            violations.push(Violation::Cycle {
                anomaly,
                realtime,
                steps: steps
                    .into_iter()
                    .map(|(node, edge, key)| Step {
                        txn: history[graph.txns[node]].id,
                        edge,
                        key,
                    })
                    .collect(),
            });
        }
    }
    violations
}

/// The observed reads: those of the included transactions, then the final reads.
fn observe<'a>(
    history: &'a [Transaction],
    included: &[bool],
    final_reads: &'a BTreeMap<ListKey, Vec<Element>>,
) -> Vec<Observed<'a>> {
    let mut observed = Vec::new();
    for (i, txn) in history.iter().enumerate() {
        if !included[i] {
            continue;
        }
        for op in &txn.ops {
            if let MicroOp::Read {
                key,
                list: Some(list),
            } = op
            {
                observed.push(Observed {
                    reader: Reader::Txn(txn.id),
                    txn: Some(i),
                    key: *key,
                    list,
                });
            }
        }
    }
    for (key, list) in final_reads {
        observed.push(Observed {
            reader: Reader::Final,
            txn: None,
            key: *key,
            list,
        });
    }
    observed
}

/// Each key's longest observed read (the first of equal length), and whether each read
/// is a prefix of its key's longest.
fn version_orders(observed: &[Observed<'_>]) -> (BTreeMap<ListKey, usize>, Vec<bool>) {
    let mut longest: BTreeMap<ListKey, usize> = BTreeMap::new();
    for (r, read) in observed.iter().enumerate() {
        let best = longest.entry(read.key).or_insert(r);
        if observed[*best].list.len() < read.list.len() {
            *best = r;
        }
    }
    let compatible = observed
        .iter()
        .map(|read| observed[longest[&read.key]].list.starts_with(read.list))
        .collect();
    (longest, compatible)
}

/// Checks that each read of `txn` agrees with its earlier reads and appends of the key.
fn check_internal(txn: &Transaction, violations: &mut Vec<Violation>) {
    // Per key: the list last read (if any), and the elements appended since.
    let mut state: BTreeMap<ListKey, (Option<&[Element]>, Vec<Element>)> = BTreeMap::new();
    for op in &txn.ops {
        match op {
            MicroOp::Append { key, element } => state.entry(*key).or_default().1.push(*element),
            MicroOp::Read { key, list } => {
                let Some(list) = list else { continue };
                let (read, appended) = state.entry(*key).or_default();
                let agrees = match read {
                    Some(before) => {
                        list.len() == before.len() + appended.len()
                            && list.starts_with(before)
                            && list.ends_with(appended)
                    }
                    None => list.ends_with(appended),
                };
                if !agrees {
                    let (expected, whole) = match read {
                        Some(before) => ([before, &appended[..]].concat(), true),
                        None => (appended.clone(), false),
                    };
                    violations.push(Violation::Internal {
                        txn: txn.id,
                        key: *key,
                        read: list.clone(),
                        expected,
                        whole,
                    });
                }
                *read = Some(list);
                appended.clear();
            }
        }
    }
}

/// Checks one observed read's elements: duplicates, garbage, G1a. Garbage and G1a are
/// reported once per element.
fn check_elements(
    history: &[Transaction],
    appender: &Map<(ListKey, Element), usize>,
    read: &Observed<'_>,
    reported: &mut Set<(ListKey, Element)>,
    violations: &mut Vec<Violation>,
) {
    let key = read.key;
    let mut seen: Set<Element> = new_set();
    let mut duplicate_reported = false;
    for &element in read.list {
        if !seen.insert(element) && !duplicate_reported {
            duplicate_reported = true;
            violations.push(Violation::DuplicateElements {
                reader: read.reader,
                key,
                element,
            });
        }
        match appender.get(&(key, element)) {
            None => {
                if reported.insert((key, element)) {
                    violations.push(Violation::GarbageRead {
                        reader: read.reader,
                        key,
                        element,
                    });
                }
            }
            Some(&w) if history[w].outcome == Outcome::Aborted => {
                if reported.insert((key, element)) {
                    violations.push(Violation::AbortedRead {
                        reader: read.reader,
                        key,
                        element,
                        writer: history[w].id,
                    });
                }
            }
            Some(_) => {}
        }
    }
}

/// G1b: a read that ends at another transaction's append, which was not that
/// transaction's last append to the key.
fn check_last_element(
    history: &[Transaction],
    appender: &Map<(ListKey, Element), usize>,
    last_append: &Map<(usize, ListKey), Element>,
    read: &Observed<'_>,
    violations: &mut Vec<Violation>,
) {
    let Some(&element) = read.list.last() else {
        return;
    };
    let Some(&w) = appender.get(&(read.key, element)) else {
        return;
    };
    if Some(w) != read.txn
        && history[w].outcome != Outcome::Aborted
        && last_append.get(&(w, read.key)) != Some(&element)
    {
        violations.push(Violation::IntermediateRead {
            reader: read.reader,
            key: read.key,
            element,
            writer: history[w].id,
        });
    }
}

/// The searches for a cycle of a component, weakest class first: the edges allowed, and
/// whether the cycle must hold exactly one anti-dependency.
const LADDER: [(&[Edge], bool); 8] = [
    (&[Edge::Ww], false),
    (&[Edge::Ww, Edge::Wr], false),
    (&[Edge::Ww, Edge::Wr], true),
    (&[Edge::Ww, Edge::Wr, Edge::Rw], false),
    (&[Edge::Ww, Edge::Rt], false),
    (&[Edge::Ww, Edge::Wr, Edge::Rt], false),
    (&[Edge::Ww, Edge::Wr, Edge::Rt], true),
    (&[Edge::Ww, Edge::Wr, Edge::Rw, Edge::Rt], false),
];

/// No cycle is shorter than two edges (a node has no edge to itself), so a search that
/// found one that short can stop.
const SHORTEST_CYCLE: usize = 2;

/// A cycle through transactions: each node (a transaction's graph node) with its edge
/// to the next.
type Cycle = Vec<(usize, Edge, Option<ListKey>)>;

/// The weakest cycle of a strongly connected component that holds one, named.
fn weakest_cycle(graph: &Graph, component: &[usize]) -> Option<(CycleAnomaly, bool, Cycle)> {
    // The component as a graph of its own, so that each search costs its size only.
    let local_of: Map<usize, usize> = component.iter().enumerate().map(|(l, &v)| (v, l)).collect();
    let arcs: Vec<Vec<Arc>> = component
        .iter()
        .map(|&v| {
            graph.arcs[v]
                .iter()
                .filter_map(|a| {
                    local_of.get(&a.to).map(|&to| Arc {
                        to,
                        edge: a.edge,
                        key: a.key,
                    })
                })
                .collect()
        })
        .collect();
    let is_txn = |l: usize| component[l] < graph.txns.len();
    for (allowed, single_rw) in LADDER {
        let allow = |edge: Edge| allowed.contains(&edge);
        let found = if single_rw {
            single_anti_dependency_cycle(&arcs, allow)
        } else {
            plain_cycle(&arcs, allow, is_txn)
        };
        let Some(path) = found else { continue };
        // Fold event nodes: the edge into the event chain is a real-time step of the
        // transaction before it.
        let cycle: Cycle = path
            .into_iter()
            .filter(|&(l, _, _)| is_txn(l))
            .map(|(l, edge, key)| (component[l], edge, key))
            .collect();
        let count = |kind: Edge| cycle.iter().filter(|(_, e, _)| *e == kind).count();
        let anomaly = match (count(Edge::Rw), count(Edge::Wr)) {
            (0, 0) => CycleAnomaly::G0,
            (0, _) => CycleAnomaly::G1c,
            (1, _) => CycleAnomaly::GSingleItem,
            _ => CycleAnomaly::G2Item,
        };
        return Some((anomaly, count(Edge::Rt) > 0, cycle));
    }
    None
}

/// The shortest cycle through allowed edges found from up to [`CYCLE_STARTS_MAX`]
/// transactions of a cyclic part of the allowed subgraph.
fn plain_cycle(
    arcs: &[Vec<Arc>],
    allow: impl Fn(Edge) -> bool + Copy,
    is_txn: impl Fn(usize) -> bool,
) -> Option<Cycle> {
    let part = components(arcs, allow)
        .into_iter()
        .find(|c| c.len() > 1 && c.iter().any(|&v| is_txn(v)))?;
    let mut best: Option<Cycle> = None;
    for &start in part.iter().filter(|&&v| is_txn(v)).take(CYCLE_STARTS_MAX) {
        if let Some(cycle) = shortest_path(arcs, allow, start, start)
            && best.as_ref().is_none_or(|b| cycle.len() < b.len())
        {
            best = Some(cycle);
        }
        if best.as_ref().is_some_and(|b| b.len() <= SHORTEST_CYCLE) {
            break;
        }
    }
    best
}

/// A cycle made of one anti-dependency edge `a -rw-> b` and a shortest path of allowed
/// edges from `b` back to `a`.
///
/// Which anti-dependencies close such a cycle is decided exactly, without a search per
/// edge: over the allowed subgraph's components in reverse topological order (as Tarjan
/// emits them), each component's set of reachable candidate `a`s is the union of its
/// successors' and its own, as bit sets of 64 candidates per pass over the graph
/// (at most [`REACHABILITY_PASSES_MAX`] passes, the most backward readers first, stopping
/// at the first pass that finds one). Two topological orders first rule out
/// the pairs they place the wrong way round, which are most of a long history's (a reader
/// usually misses an append that comes after it). Of the edges that close a cycle, the
/// most backward (a reader far later than the writer it missed, as in a stale read) is
/// reported, after a search of the path back from up to [`CYCLE_STARTS_MAX`] of them.
fn single_anti_dependency_cycle(
    arcs: &[Vec<Arc>],
    allow: impl Fn(Edge) -> bool + Copy,
) -> Option<Cycle> {
    let forward_components = components_ordered(arcs, allow, false);
    let mut component_of = vec![0; arcs.len()];
    for (position, component) in forward_components.iter().enumerate() {
        for &v in component {
            component_of[v] = position;
        }
    }
    let mut backward = vec![0; arcs.len()];
    for (position, component) in components_ordered(arcs, allow, true).iter().enumerate() {
        for &v in component {
            backward[v] = position;
        }
    }
    let forward = &component_of;
    let mut candidates: Vec<(usize, Arc)> = arcs
        .iter()
        .enumerate()
        .flat_map(|(from, out)| out.iter().map(move |a| (from, *a)))
        .filter(|(from, a)| {
            a.edge == Edge::Rw
                && forward[a.to] >= forward[*from]
                && backward[a.to] >= backward[*from]
        })
        .collect();
    candidates.sort_by_key(|(from, a)| std::cmp::Reverse(forward[a.to] - forward[*from]));

    // The distinct readers, most backward first, 64 per pass; the passes stop at the
    // first that finds a closing edge.
    let mut listed = vec![false; arcs.len()];
    let readers: Vec<usize> = candidates
        .iter()
        .map(|(from, _)| *from)
        .filter(|&from| !std::mem::replace(&mut listed[from], true))
        .collect();
    let mut closing: Vec<(usize, Arc)> = Vec::new();
    let mut bit_of = vec![0u64; arcs.len()];
    for chunk in readers.chunks(64).take(REACHABILITY_PASSES_MAX) {
        bit_of.fill(0);
        for (bit, &reader) in chunk.iter().enumerate() {
            bit_of[reader] = 1 << bit;
        }
        let mut reaches = vec![0u64; forward_components.len()];
        for (position, component) in forward_components.iter().enumerate() {
            let mut bits = 0;
            for &v in component {
                bits |= bit_of[v];
                for a in arcs[v].iter().filter(|a| allow(a.edge)) {
                    // Emitted earlier, so already complete (or this component itself).
                    bits |= reaches[component_of[a.to]];
                }
            }
            reaches[position] = bits;
        }
        closing.extend(
            candidates
                .iter()
                .filter(|(from, a)| reaches[component_of[a.to]] & bit_of[*from] != 0),
        );
        if !closing.is_empty() {
            break;
        }
    }
    closing.sort_by_key(|(from, a)| std::cmp::Reverse(forward[a.to] - forward[*from]));
    let mut best: Option<Cycle> = None;
    for &(from, arc) in closing.iter().take(CYCLE_STARTS_MAX) {
        if let Some(back) = shortest_path(arcs, allow, arc.to, from)
            && best.as_ref().is_none_or(|b| back.len() + 1 < b.len())
        {
            let mut cycle = vec![(from, Edge::Rw, arc.key)];
            cycle.extend(back);
            best = Some(cycle);
        }
        if best.as_ref().is_some_and(|b| b.len() <= SHORTEST_CYCLE) {
            break;
        }
    }
    best
}

/// The shortest path of allowed edges from `source` to `target` (a cycle when they are
/// equal), as each node left with the edge it was left by.
fn shortest_path(
    arcs: &[Vec<Arc>],
    allow: impl Fn(Edge) -> bool,
    source: usize,
    target: usize,
) -> Option<Cycle> {
    let mut previous: Vec<Option<(usize, Edge, Option<ListKey>)>> = vec![None; arcs.len()];
    let mut queue = VecDeque::from([source]);
    let mut reached = false;
    'search: while let Some(v) = queue.pop_front() {
        for a in &arcs[v] {
            if !allow(a.edge) || previous[a.to].is_some() {
                continue;
            }
            previous[a.to] = Some((v, a.edge, a.key));
            if a.to == target {
                reached = true;
                break 'search;
            }
            queue.push_back(a.to);
        }
    }
    if !reached {
        return None;
    }
    let mut path = Vec::new();
    let mut v = target;
    loop {
        let (from, edge, key) = previous[v]?;
        path.push((from, edge, key));
        v = from;
        if v == source {
            break;
        }
    }
    path.reverse();
    Some(path)
}

/// Tarjan's strongly connected components over the allowed edges, in reverse
/// topological order (a component comes before every component that reaches it).
fn components(arcs: &[Vec<Arc>], allow: impl Fn(Edge) -> bool) -> Vec<Vec<usize>> {
    components_ordered(arcs, allow, false)
}

/// [`components`], searching from the last node and the last edge of each first when
/// `reverse`, which yields another topological order of the same components.
fn components_ordered(
    arcs: &[Vec<Arc>],
    allow: impl Fn(Edge) -> bool,
    reverse: bool,
) -> Vec<Vec<usize>> {
    graph::strongly_connected(arcs, |a| allow(a.edge).then_some(a.to), reverse)
}

#[cfg(test)]
mod tests;
