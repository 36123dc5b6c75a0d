//! The node side of a benchmark: a node process that loads a workload's data, runs its
//! transactions on every worker thread when told, and reports. It is spoken to over stdin
//! and stdout, one line per command and one line per answer:
//!
//! - (on start) `ready` once the node listens and its data is loaded;
//! - `run` or `run N`: start `coroutines` (or N, at most `coroutines`) workload
//!   coroutines on every worker thread; after `stop`, another `run` may follow, with
//!   other random numbers;
//! - `window-start` / `window-end`: count committed transactions and latencies between
//!   the two, and CPU time;
//! - `stop`: let every coroutine finish its transaction, flush this node's truncation
//!   marks to every node, and answer with a [`RunResult`];
//! - `check` (once every node has stopped): answer with a [`CheckResult`] of the data;
//! - `leases`: answer with the lease thread's [`NodeLeases`] (JSON `null` when the node
//!   runs without membership); asked before `exit`, while every node still runs, so that
//!   nodes stopping one after the other count no expiration;
//! - `timeline START_UNIX_NS LENGTH_MS`: count this node's committed transactions in
//!   1 ms buckets from `START_UNIX_NS` (the machine's real-time clock) for `LENGTH_MS`
//!   ms, and watch its lease thread for the events of a recovery ([`crate::timeline`]);
//!   answers `ok`; once per process;
//! - `events`: answer with the [`crate::timeline::NodeEvents`] so far;
//! - `timeline-get`: answer with the [`crate::timeline::NodeTimeline`] so far;
//! - `settled`: `yes` once every life that replaced a removed one (below) saw the cluster
//!   back at full strength, its refill done; `no` before;
//! - `exit`: stop the workers and answer with [`NodeTotals`].
//!
//! A driven node the cluster removes (a false positive: nothing fails in a benchmark)
//! comes back as a new life, as `ferrotx node` does ([`ferrotx_node::lives`]), but inside
//! its process, so that this protocol and its counters go on: it stops the removed life
//! (its workers, sockets and lease thread; the workload coroutines running there are
//! dropped, their commits counted and a transaction each was in counted as of unknown
//! outcome), waits if that life was removed quickly, and starts a new one that joins the
//! running cluster, holds nothing at first and is given backups to fill. A run going on
//! starts its coroutines again there. `leases` reports every removal and what each cost
//! ([`Rejoin`]: the time to rejoin and to refill) beside the lease figures of all lives.

use std::io::{BufRead, Write};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use ferrotx_cluster::Configuration;
use ferrotx_node::{BATCH_DATAGRAMS, Node, NodeOptions, ShipStats, WorkerReport};
use ferrotx_store::ReadOutcome;
use ferrotx_transport::{Transport, UDP_MAX_PAYLOAD_BYTES};
use ferrotx_txn::coordinator::Abort;
use ferrotx_txn::participant::Role;
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::cpu::process_cpu_s;
use crate::lossy::Lossy;
use crate::timeline::{Monitor, NodeTimeline, Recorder, RecorderSlot};
use crate::workload::{Runner, Workload};
use ferrotx_workload::record::NoRecorder;

/// What a driven node runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriveOptions {
    /// The workload.
    pub workload: Workload,
    /// Workload coroutines per worker thread.
    pub coroutines: usize,
    /// Seed of the coroutines' random numbers (each mixes in its node, thread and index).
    pub seed: u64,
    /// How long an idle worker polls before it sleeps in the kernel, in microseconds.
    pub spin_us: u64,
    /// Whether a polling worker yields its core to other runnable threads.
    pub yield_while_polling: bool,
    /// Nodes that run workload coroutines: those with ids below this (the others only
    /// serve).
    pub client_nodes: u16,
    /// Share of datagrams every node drops on purpose before sending, in [0, 1).
    pub loss: f64,
    /// Run as a member of the cluster with leases of this many milliseconds, as `ferrotx
    /// node` does (the coordination file next to the configuration file, the lease
    /// thread, admission into the first view); `None`: a static node without membership.
    #[serde(default)]
    pub lease_ms: Option<u64>,
    /// What the lease thread does to stay on time (`ClusterBenchOptions::tuning`).
    #[serde(default)]
    pub tuning: ferrotx_node::LeaseTuning,
    /// Datagrams without MACs (see `ClusterBenchOptions::no_auth`).
    #[serde(default)]
    pub no_auth: bool,
}

/// How long a benchmark node waits to be admitted into the cluster.
const ADMIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A node's lease thread over the whole run, answered to `leases`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeLeases {
    /// The node.
    pub node: u16,
    /// Times its lease (or, on the CM, its majority of leases) ran out while it was a
    /// member of a committed view. Nothing fails in a benchmark: each is a false positive.
    pub expirations: u64,
    /// Lease grants received.
    pub renewals: u64,
    /// Suspicions it raised.
    pub suspicions: u64,
    /// Views committed here (1 without reconfiguration).
    pub views_committed: u64,
    /// The id of the last view it knows.
    pub view_id: u64,
    /// Members of that view.
    pub view_members: usize,
    /// Renewal round trips by power of two of nanoseconds (`Stats::renewal_rtt_log2`).
    pub renewal_rtt_log2: Vec<u64>,
    /// The longest renewal round trip, in nanoseconds.
    pub renewal_rtt_max_ns: u64,
    /// Whether its lease thread ran at real-time priority (`SCHED_FIFO`).
    pub realtime: bool,
    /// Longest gap between two iterations of its lease thread's loop, in microseconds.
    pub max_wake_late_us: u64,
    /// Whether its process's memory was locked (`mlockall`).
    #[serde(default)]
    pub memory_locked: bool,
    /// Page faults its lease thread took, minor and major, and the times the kernel
    /// preempted it (involuntary context switches), over its lives.
    #[serde(default)]
    pub faults_minor: u64,
    /// Major page faults (read from disk).
    #[serde(default)]
    pub faults_major: u64,
    /// Involuntary context switches.
    #[serde(default)]
    pub preempted: u64,
    /// Lives of this node the cluster removed (each replaced by a new life).
    #[serde(default)]
    pub removals: u64,
    /// What each removal cost.
    #[serde(default)]
    pub rejoins: Vec<Rejoin>,
}

impl NodeLeases {
    fn of(node: u16, status: &ferrotx_node::LeaseStatus) -> Self {
        let stats = &status.stats;
        Self {
            node,
            expirations: stats.lease_expirations,
            renewals: stats.renewals,
            suspicions: stats.suspicions,
            views_committed: stats.views_committed,
            view_id: status.view.as_ref().map_or(0, |v| v.id),
            view_members: status.view.as_ref().map_or(0, |v| v.members.len()),
            renewal_rtt_log2: stats.renewal_rtt_log2.to_vec(),
            renewal_rtt_max_ns: stats.renewal_rtt_max_ns,
            realtime: status.realtime,
            max_wake_late_us: status.max_wake_late_us,
            memory_locked: status.memory_locked,
            faults_minor: status.faults_minor,
            faults_major: status.faults_major,
            preempted: status.preempted,
            removals: 0,
            rejoins: Vec::new(),
        }
    }
}

/// Latency histogram bounds: 1 ns to 60 s, 3 significant digits.
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// What one node's coroutines did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// Transactions committed inside the window.
    pub window_committed: u64,
    /// Transactions aborted inside the window.
    pub window_aborted: u64,
    /// Over the whole run.
    pub committed: u64,
    /// Over the whole run.
    pub aborted: u64,
    /// Transactions refused as bad input or by a participant (must be 0).
    pub errors: u64,
    /// Transactions refused because the cluster was reconfiguring or a partition had no
    /// copy (nothing changed): must be 0 unless the run kills a node.
    #[serde(default)]
    pub unavailable: u64,
    /// Latencies of transactions committed in the window: (nanoseconds, count).
    pub latency_ns: Vec<(u64, u64)>,
    /// The same for the transactions among them that waited for an RPC (the others
    /// touched only this node's partitions).
    pub remote_latency_ns: Vec<(u64, u64)>,
    /// CPU seconds of this process in the window.
    pub cpu_s: f64,
    /// Seconds between this node's window-start and window-end.
    pub window_s: f64,
    /// Money the committed transactions created (or, negative, destroyed) over the
    /// whole run (SmallBank).
    pub money: i128,
    /// Per transaction type (in the order of `Workload::types`), inside the window.
    pub types: Vec<TypeResult>,
    /// Coroutines that did not finish when told to stop, because the node no longer
    /// served (its lease ran out and it was neither renewed nor removed): must be 0.
    #[serde(default)]
    pub unfinished: u64,
    /// Coroutines dropped with a life the cluster removed (their commits are counted,
    /// a transaction one was in is in `unknown`); a run going on started others on the
    /// new life.
    #[serde(default)]
    pub dropped: u64,
    /// Transactions whose outcome the caller never learned ([`Abort::OutcomeUnknown`]: a
    /// failure cut off a commit, or a shipped operation's answer), over the whole run: they
    /// may have committed or not. Nothing fails in a benchmark, so this must be 0.
    #[serde(default)]
    pub unknown: u64,
    /// Shipping's counters of this node's coordinator threads over the run.
    #[serde(default)]
    pub shipping: ShipStats,
    /// The most memory this node process had resident so far, in bytes.
    #[serde(default)]
    pub rss_peak_bytes: u64,
    /// Objects in the copies this node holds at the end of the run, over every table (one
    /// per key that ever had a value; deleted keys keep theirs).
    #[serde(default)]
    pub objects: u64,
    /// Bytes those copies' records and index slots take, as allocated
    /// (`Partition::bytes`): the store's share of `rss_peak_bytes`.
    #[serde(default)]
    pub store_bytes: u64,
}

/// One transaction type's results inside the window.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TypeResult {
    /// Committed.
    pub committed: u64,
    /// Committed and found what they looked for.
    pub succeeded: u64,
    /// Aborted (conflicts).
    pub aborted: u64,
    /// Latencies of the committed ones: (nanoseconds, count).
    pub latency_ns: Vec<(u64, u64)>,
}

impl RunResult {
    pub(crate) fn add_counts(&mut self, other: &RunResult) {
        self.window_committed += other.window_committed;
        self.window_aborted += other.window_aborted;
        self.committed += other.committed;
        self.aborted += other.aborted;
        self.errors += other.errors;
        self.unavailable += other.unavailable;
        self.unfinished += other.unfinished;
        self.dropped += other.dropped;
        self.unknown += other.unknown;
        self.shipping.add(&other.shipping);
        self.money += other.money;
        if self.types.len() < other.types.len() {
            self.types.resize(other.types.len(), TypeResult::default());
        }
        for (mine, theirs) in self.types.iter_mut().zip(&other.types) {
            mine.committed += theirs.committed;
            mine.succeeded += theirs.succeeded;
            mine.aborted += theirs.aborted;
        }
    }
}

/// One copy of one table of a partition, as a digest of its objects.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CopyDigest {
    /// The partition.
    pub partition: u32,
    /// The table.
    pub table: u16,
    /// Whether this copy is the primary.
    pub primary: bool,
    /// `Partition::digest`: every present object's key, version and value.
    pub digest: u64,
    /// Objects present.
    pub objects: usize,
}

/// The data of one node once quiet.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CheckResult {
    /// Each table of each copy hosted here.
    pub copies: Vec<CopyDigest>,
    /// Sum of the first 8 bytes (little-endian; signed for SmallBank) of the values the
    /// workload sums, at primaries here: money, or read-modify-write counters.
    pub primary_sum: i128,
    /// Largest such number at a primary here (a negative balance would wrap to a huge one).
    pub primary_max: u64,
    /// Summed keys absent or locked at a primary here (must be 0).
    pub primary_missing: u64,
}

/// A node's RPC counters over the whole run.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct NodeTotals {
    /// RPCs its coordinators completed (each a request and its response).
    pub rpcs: u64,
    /// Datagrams it sent.
    pub datagrams_sent: u64,
    /// Requests retransmitted.
    pub retransmissions: u64,
    /// Datagrams of another configuration dropped.
    pub wrong_configuration: u64,
}

impl NodeTotals {
    /// Adds what one worker thread did.
    fn add(&mut self, report: &WorkerReport) {
        self.rpcs += report.rpc.calls_completed;
        self.datagrams_sent += report.rpc.datagrams_sent;
        self.retransmissions += report.rpc.retransmissions;
        self.wrong_configuration += report.rpc.wrong_configuration;
    }
}

fn check(node: &Node, workload: &Workload) -> CheckResult {
    let mut result = CheckResult::default();
    // Each copy's role in the view the node serves now (a backup promoted where a
    // primary left is the primary), not the one it was made with (`Node::copies`); a
    // static node's never changes.
    let view = node.membership().and_then(|link| link.view());
    let copies: Vec<(u32, Role, Arc<ferrotx_store::Partition>)> = node
        .copies()
        .into_iter()
        .filter_map(|(id, role, copy)| {
            let role = match &view {
                Some(view) => node.core().role_in(view, id)?,
                None => role,
            };
            Some((id.0, role, copy))
        })
        .collect();
    // A backup still being filled (data recovery) holds part of its partition: not a
    // copy yet, so not compared.
    let filling: Vec<u32> = node
        .core()
        .fill_progress()
        .iter()
        .filter(|f| !f.done)
        .map(|f| f.partition)
        .collect();
    for (id, role, copy) in &copies {
        if filling.contains(id) {
            continue;
        }
        for table in workload.schema() {
            let (digest, objects) = copy.digest(table.id).expect("table exists");
            result.copies.push(CopyDigest {
                partition: *id,
                table: table.id.0,
                primary: *role == Role::Primary,
                digest,
                objects,
            });
        }
    }
    let (summed, signed) = workload.summed();
    let mut value = Vec::new();
    for (table, key) in summed {
        let partition = node.partition_of(table, &key);
        let Some((_, _, primary)) = copies
            .iter()
            .find(|(id, role, _)| *id == partition.0 && *role == Role::Primary)
        else {
            continue;
        };
        match primary.read(table, &key, &mut value).expect("table exists") {
            Ok(ReadOutcome { present: true, .. }) if value.len() >= 8 => {
                let bytes: [u8; 8] = value[..8].try_into().expect("8 bytes");
                let n = u64::from_le_bytes(bytes);
                result.primary_sum += if signed {
                    i128::from(i64::from_le_bytes(bytes))
                } else {
                    i128::from(n)
                };
                result.primary_max = result.primary_max.max(n);
            }
            _ => result.primary_missing += 1,
        }
    }
    result
}

thread_local! {
    /// Latencies of the workload coroutines of this worker thread: one histogram per
    /// thread, not per coroutine, keeps the counters in cache.
    static LATENCIES: std::cell::RefCell<[Histogram<u64>; 2]> =
        std::cell::RefCell::new([new_histogram(), new_histogram()]);
    /// The same per transaction type.
    static TYPE_LATENCIES: std::cell::RefCell<Vec<Histogram<u64>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Starts a life of node `id` of `config` (read from `config_path`) as a member of the
/// cluster with leases of `lease_ms`, as `ferrotx node` does: the coordination file next
/// to the configuration, the lease thread, then the workers once admitted. The first life
/// (`previous` `None`) retires a view left there by a cluster that died, so a run never
/// waits for dead members; a later one (after the life `previous` was removed) only joins
/// the running cluster, as `ferrotx node --join` does, with an incarnation above the
/// removed one's.
#[allow(clippy::too_many_arguments)]
fn start_member<T: Transport + Send + 'static>(
    config: &Arc<Configuration>,
    config_path: &Path,
    id: u16,
    lease_ms: u64,
    tuning: ferrotx_node::LeaseTuning,
    previous: Option<u64>,
    transports: Vec<T>,
    options: &NodeOptions,
) -> anyhow::Result<(Node, u64)> {
    let keys = options.keys.clone();
    ensure!(lease_ms >= 1, "leases must be at least 1 ms long");
    let state = ferrotx_coord::default_state_path(config_path);
    let incarnation =
        ferrotx_node::lives::next_incarnation(previous, ferrotx_node::incarnation_from_clock());
    let mut coordination = ferrotx_coord::FileCoordination::open_life(&state, id, incarnation)
        .with_context(|| format!("opening the coordination file {}", state.display()))?;
    match previous {
        None => {
            coordination
                .retire_if_dead()
                .with_context(|| format!("retiring a stale view in {}", state.display()))?;
        }
        Some(_) => {
            // Into the running cluster only: never the first node of a new, empty one.
            let running = coordination
                .running_cluster()
                .with_context(|| format!("reading {}", state.display()))?;
            ensure!(
                running.is_some(),
                "node {id}: removed, and no cluster runs on {} any more to rejoin",
                state.display()
            );
        }
    }
    let options = &with_logs(options, config, config_path, id, incarnation)?;
    let membership = ferrotx_membership::Options::with_lease_ms(lease_ms);
    // A lock held elsewhere fails a swap for certain, before the call's deadline.
    coordination.set_lock_timeout(ferrotx_node::call_timeout(&membership) / 2);
    let lease = ferrotx_node::LeaseThread::start(
        config.clone(),
        id,
        incarnation,
        membership,
        Box::new(coordination),
        Instant::now(),
        keys,
        tuning,
    )
    .with_context(|| format!("starting node {id}'s lease thread"))?;
    let node = Node::start_member(transports, options, lease, ADMIT_TIMEOUT)
        .with_context(|| format!("starting node {id} as a member"))?;
    Ok((node, incarnation))
}

/// `options` with this life's logs, in `flush` and `sync` modes: in `node-N` beside the
/// configuration, as `cluster local --data-dir` lays them out.
fn with_logs(
    options: &NodeOptions,
    config: &Configuration,
    config_path: &Path,
    id: u16,
    incarnation: u64,
) -> anyhow::Result<NodeOptions> {
    let dir = config_path
        .parent()
        .unwrap_or(Path::new("."))
        .join(format!("node-{id}"));
    let logs = ferrotx_node::NodeLogs::open(&dir, config, id, incarnation)
        .with_context(|| format!("node {id}: opening its data directory"))?;
    Ok(NodeOptions {
        logs,
        ..options.clone()
    })
}

/// The keys of a driven node, as `ferrotx node` has them: the key file next to the
/// configuration (made by the lowest node) and the cluster id from the coordination file
/// (opened for that only, and closed again before the node starts). `no_auth`: none, the
/// benchmarks' switch for measuring what authentication costs.
fn drive_keys(
    config: &Configuration,
    config_path: &Path,
    id: u16,
    no_auth: bool,
) -> anyhow::Result<Option<Arc<ferrotx_node::ClusterKeys>>> {
    if no_auth {
        return Ok(Some(ferrotx_node::ClusterKeys::fixed(None)));
    }
    let (keys, _) = ferrotx_node::load_keys(config_path, config, id, ferrotx_node::KEY_WAIT)?;
    let state = ferrotx_coord::default_state_path(config_path);
    let mut coordination = ferrotx_coord::FileCoordination::open(&state, id)
        .with_context(|| format!("opening the coordination file {}", state.display()))?;
    let cluster = ferrotx_node::cluster_id(&mut coordination)?;
    Ok(Some(ferrotx_node::ClusterKeys::fixed(Some(
        ferrotx_node::process_auth(keys, cluster)?,
    ))))
}

/// One life of a driven node that the cluster removed, and the life that replaced it
/// (nothing fails in a benchmark: each is a false positive, and this is what it cost).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Rejoin {
    /// The view the removed life learned it was not in (0 if it did not say).
    pub removed_in_view: u64,
    /// Milliseconds the removed life had been a member.
    pub lasted_ms: f64,
    /// Milliseconds waited before the new life: a life removed within a second of its
    /// admission waits ([`ferrotx_node::lives::next_backoff`]).
    pub backoff_ms: f64,
    /// Milliseconds from the removal being noticed until the new life was admitted into
    /// the cluster (the wait included).
    pub rejoin_ms: f64,
    /// Milliseconds from the new life's admission until the view it knows has it as a
    /// member, every partition with all its copies and no backup left to fill (data
    /// recovery, its refill, done and counted); `None` if not yet when asked.
    pub refill_ms: Option<f64>,
    /// Objects the new life's fills copied by then (as last seen before the view counted
    /// them; the driver looks every 20 ms or so).
    pub refill_objects: u64,
    /// Bytes of their keys and values.
    pub refill_bytes: u64,
    /// Workload coroutines that ran on the removed life and were dropped with it (their
    /// commits counted; a transaction one was in is of unknown outcome). Those of a run
    /// going on start again on the new life.
    pub coroutines_dropped: u64,
}

/// Whether the cluster is back at full strength for life `incarnation` of node `node`, by
/// `view`: it is a member, no partition is short of copies (or lost) and no backup is
/// being filled.
fn full_strength(
    view: &ferrotx_cluster::View,
    node: u16,
    incarnation: u64,
    replicas: usize,
) -> bool {
    view.is_member(node, incarnation)
        && view.fills().next().is_none()
        && view.short_and_lost(replicas) == (0, 0)
}

/// A driven node's leases over its lives: the removed lives' figures added up, so that a
/// false positive stays counted after the life that suffered it is gone.
fn merge_leases(past: &[NodeLeases], current: NodeLeases) -> NodeLeases {
    let mut all = current;
    for p in past {
        all.expirations += p.expirations;
        all.renewals += p.renewals;
        all.suspicions += p.suspicions;
        all.views_committed += p.views_committed;
        if all.renewal_rtt_log2.len() < p.renewal_rtt_log2.len() {
            all.renewal_rtt_log2.resize(p.renewal_rtt_log2.len(), 0);
        }
        for (sum, n) in all.renewal_rtt_log2.iter_mut().zip(&p.renewal_rtt_log2) {
            *sum += n;
        }
        all.renewal_rtt_max_ns = all.renewal_rtt_max_ns.max(p.renewal_rtt_max_ns);
        all.realtime &= p.realtime;
        all.memory_locked &= p.memory_locked;
        all.max_wake_late_us = all.max_wake_late_us.max(p.max_wake_late_us);
        all.faults_minor += p.faults_minor;
        all.faults_major += p.faults_major;
        all.preempted += p.preempted;
    }
    all
}

/// A workload coroutine's results, sent when it ends however it ends: when it returns,
/// or when its node is stopped under it (a removed life's coroutines are dropped). Then
/// its commits still count, and a transaction it was in is of unknown outcome.
struct Report {
    run: RunResult,
    /// The run it belongs to.
    id: u64,
    /// Inside a transaction.
    in_flight: bool,
    /// Returned (not dropped).
    finished: bool,
    to: mpsc::Sender<RunReport>,
}

/// A coroutine's results, with the number of the run it belongs to.
type RunReport = (u64, RunResult);

impl Drop for Report {
    fn drop(&mut self) {
        let mut run = std::mem::take(&mut self.run);
        if !self.finished {
            run.dropped += 1;
            if self.in_flight {
                run.unknown += 1;
            }
        }
        let _ = self.to.send((self.id, run));
    }
}

/// The workload run going on: what its coroutines share and how to start more of them
/// (on a new life).
struct Running {
    /// Its number (results of an earlier run that come late are not its).
    id: u64,
    /// Coroutines per thread.
    coroutines: usize,
    /// Its random numbers' seed.
    seed: u64,
    /// Coroutines started that have not reported.
    outstanding: usize,
    /// What those that reported did (on this life and removed ones).
    result: RunResult,
}

/// A driven node over its lives, and what its workload coroutines share with it.
struct Driven<'a> {
    config: Arc<Configuration>,
    config_path: &'a Path,
    id: u16,
    drive: &'a DriveOptions,
    options: NodeOptions,
    /// The current life's node (none only while one life is replaced by the next), its
    /// incarnation, when it was admitted and the wait before it.
    node: Option<Node>,
    incarnation: u64,
    admitted: Instant,
    backoff: Duration,
    /// The removed lives' leases and the rejoins that replaced them.
    past: Vec<NodeLeases>,
    rejoins: Vec<Rejoin>,
    /// A rejoin whose refill is not done yet.
    refilling: bool,
    /// The removed lives' RPC counters.
    totals: NodeTotals,
    /// Shipping's counters at the end of the previous run (they only grow within a life).
    shipping_before: ShipStats,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicU64>,
    recorder: RecorderSlot,
    monitor: Option<Monitor>,
    results: (mpsc::Sender<RunReport>, mpsc::Receiver<RunReport>),
    running: Option<Running>,
}

impl Driven<'_> {
    /// The current life's node.
    fn node(&self) -> &Node {
        self.node.as_ref().expect("a life runs")
    }

    /// The node's transports, over UDP with the benchmark's loss.
    fn transports(&self) -> anyhow::Result<Vec<Lossy<ferrotx_transport::udp::UdpTransport>>> {
        let drive = self.drive;
        Ok(Node::udp_transports(&self.config, self.id, &self.options)
            .with_context(|| format!("starting node {} over UDP", self.id))?
            .into_iter()
            .map(|t| {
                let seed = drive.seed ^ u64::from(t.local().0) ^ 0x1055;
                Lossy::new(t, drive.loss, seed, BATCH_DATAGRAMS, UDP_MAX_PAYLOAD_BYTES)
            })
            .collect())
    }

    /// Starts `coroutines` workload coroutines per worker thread of the current life
    /// (none on a node without clients), for run `run`.
    fn spawn_coroutines(&mut self, coroutines: usize, seed: u64) -> usize {
        let (id, drive) = (self.id, self.drive);
        let clients = if id < drive.client_nodes {
            self.config.threads_per_node()
        } else {
            0
        };
        let run = self.running.as_ref().map_or(0, |r| r.id);
        let mut started = 0;
        for thread in 0..clients {
            for index in 0..coroutines {
                let seed = seed ^ (u64::from(id) << 48) ^ (u64::from(thread) << 32) ^ index as u64;
                let runner = Runner::new(drive.workload.clone(), ChaCha8Rng::seed_from_u64(seed));
                let shared = Shared {
                    measuring: self.measuring.clone(),
                    stop: self.stop.clone(),
                    progress: self.progress.clone(),
                    recorder: self.recorder.clone(),
                };
                let report = Report {
                    run: RunResult::default(),
                    id: run,
                    in_flight: false,
                    finished: false,
                    to: self.results.0.clone(),
                };
                // Its results come through `report`, whether it returns or is dropped.
                drop(self.node().spawn(thread, move |co, coordinator| {
                    coroutine(co, coordinator, runner, shared, report)
                }));
                started += 1;
            }
        }
        started
    }

    /// Takes the current run's coroutines' results that have come (`wait`: waits up to it
    /// for the first); results of earlier runs, come late, are dropped.
    fn take_results(&mut self, wait: Duration) {
        let Some(running) = &mut self.running else {
            return;
        };
        let mut next = self.results.1.recv_timeout(wait).ok();
        while let Some((id, result)) = next {
            if id == running.id {
                running.result.add_counts(&result);
                running.outstanding = running.outstanding.saturating_sub(1);
            }
            next = self.results.1.try_recv().ok();
        }
    }

    /// Replaces the current life with a new one if the cluster removed it, and notes when
    /// a new life's refill is done. Called between commands and while waiting.
    fn watch(&mut self) -> anyhow::Result<()> {
        let Some(link) = self.node().membership().cloned() else {
            return Ok(());
        };
        if link.removed() {
            return self.rejoin(&link);
        }
        if self.refilling {
            // The fills' progress as it grows (they are forgotten once the view counts
            // them as copies).
            let fills = self.node().core().fill_progress();
            let (objects, bytes) = fills
                .iter()
                .fold((0, 0), |(o, b), f| (o + f.objects, b + f.bytes));
            let replicas = usize::from(self.config.replicas());
            let full = link
                .status()
                .view
                .as_ref()
                .is_some_and(|v| full_strength(v, self.id, self.incarnation, replicas));
            let admitted = self.admitted;
            let rejoin = self.rejoins.last_mut().expect("a rejoin refilling");
            rejoin.refill_objects = rejoin.refill_objects.max(objects);
            rejoin.refill_bytes = rejoin.refill_bytes.max(bytes);
            if full {
                rejoin.refill_ms = Some(admitted.elapsed().as_secs_f64() * 1e3);
                self.refilling = false;
            }
        }
        Ok(())
    }

    /// The current life was removed: stops it (its coroutines are dropped and report),
    /// waits if it was removed quickly, and starts a new life that joins the running
    /// cluster and is refilled; a run going on starts its coroutines again there.
    fn rejoin(&mut self, link: &Arc<ferrotx_node::Link>) -> anyhow::Result<()> {
        let noticed = Instant::now();
        let lasted = self.admitted.elapsed();
        // The view that removed it, once the lease thread published it (right after
        // raising `removed`).
        let mut status = link.status();
        while status.phase != Some(ferrotx_membership::Phase::Removed)
            && noticed.elapsed() < Duration::from_millis(200)
        {
            std::thread::sleep(Duration::from_millis(5));
            status = link.status();
        }
        let removed_in_view = status.view.as_ref().map_or(0, |v| v.id);
        eprintln!(
            "node {}: removed from configuration {removed_in_view} (life {}) after {:.1} s \
             as a member; rejoining as a new life",
            self.id,
            self.incarnation,
            lasted.as_secs_f64()
        );
        self.past.push(NodeLeases::of(self.id, &status));
        self.monitor = None;
        // Sockets closed, the liveness lock released; its coroutines are dropped.
        let node = self.node.take().expect("a life runs");
        for report in node.stop() {
            self.totals.add(&report);
        }
        // Every coroutine of the stopped life has reported (dropped with its worker).
        let dropped_before = self.running.as_ref().map_or(0, |r| r.result.dropped);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.running.as_ref().is_some_and(|r| r.outstanding > 0) && Instant::now() < deadline
        {
            self.take_results(Duration::from_millis(50));
        }
        let dropped = self.running.as_ref().map_or(0, |r| r.result.dropped) - dropped_before;
        let backoff = ferrotx_node::lives::next_backoff(lasted, self.backoff);
        std::thread::sleep(backoff);
        let lease_ms = self.drive.lease_ms.expect("a member has leases");
        let transports = self.transports()?;
        let (node, incarnation) = start_member(
            &self.config,
            self.config_path,
            self.id,
            lease_ms,
            self.drive.tuning,
            Some(self.incarnation),
            transports,
            &self.options,
        )?;
        self.node = Some(node);
        self.incarnation = incarnation;
        self.admitted = Instant::now();
        self.backoff = backoff;
        self.shipping_before = ShipStats::default();
        self.rejoins.push(Rejoin {
            removed_in_view,
            lasted_ms: lasted.as_secs_f64() * 1e3,
            backoff_ms: backoff.as_secs_f64() * 1e3,
            rejoin_ms: noticed.elapsed().as_secs_f64() * 1e3,
            coroutines_dropped: dropped,
            ..Rejoin::default()
        });
        self.refilling = true;
        eprintln!(
            "node {}: life {incarnation} admitted {:.0} ms after the removal",
            self.id,
            noticed.elapsed().as_secs_f64() * 1e3
        );
        if self.recorder.get().is_some() {
            self.monitor = Monitor::start(self.node(), &self.recorder);
        }
        // A run going on goes on here, with other random numbers.
        if let Some(running) = &self.running
            && !self.stop.load(Ordering::Relaxed)
        {
            let (coroutines, seed) = (
                running.coroutines,
                running.seed ^ (self.rejoins.len() as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            );
            let started = self.spawn_coroutines(coroutines, seed);
            if let Some(running) = &mut self.running {
                running.outstanding += started;
            }
        }
        Ok(())
    }
}

/// Main of a driven node process: node `id` of `config` (read from `config_path`),
/// running `drive`.
pub fn serve(
    config: Arc<Configuration>,
    config_path: &Path,
    id: u16,
    drive: &DriveOptions,
) -> anyhow::Result<()> {
    drive.workload.check()?;
    let options = NodeOptions {
        // One slot more than the workload's, for the truncation flush at the end.
        coroutines: drive.coroutines + 1,
        idle: ferrotx_node::Idle {
            spin: Duration::from_micros(drive.spin_us),
            yield_while_polling: drive.yield_while_polling,
            ..NodeOptions::default().idle
        },
        // `bench kv`'s shipped read-modify-writes run here when this node is their key's
        // primary.
        procedures: drive.workload.procedures(),
        keys: drive_keys(&config, config_path, id, drive.no_auth)?,
        ..NodeOptions::default()
    };
    let mut driven = Driven {
        config: config.clone(),
        config_path,
        id,
        drive,
        options,
        node: None,
        incarnation: 0,
        admitted: Instant::now(),
        backoff: Duration::ZERO,
        past: Vec::new(),
        rejoins: Vec::new(),
        refilling: false,
        totals: NodeTotals::default(),
        shipping_before: ShipStats::default(),
        measuring: Arc::new(AtomicBool::new(false)),
        stop: Arc::new(AtomicBool::new(false)),
        progress: Arc::new(AtomicU64::new(0)),
        recorder: Arc::default(),
        monitor: None,
        results: mpsc::channel(),
        running: None,
    };
    let transports = driven.transports()?;
    let (node, incarnation) = match drive.lease_ms {
        Some(lease_ms) => start_member(
            &config,
            config_path,
            id,
            lease_ms,
            drive.tuning,
            None,
            transports,
            &driven.options,
        )?,
        None => {
            let incarnation = ferrotx_node::incarnation_from_clock();
            let mut options = with_logs(&driven.options, &config, config_path, id, incarnation)?;
            options.incarnation = Some(incarnation);
            let node = Node::start(config.clone(), id, transports, &options, Instant::now());
            let incarnation = node.core().incarnation();
            (node, incarnation)
        }
    };
    driven.node = Some(node);
    driven.incarnation = incarnation;
    driven.admitted = Instant::now();
    // Primaries first: the objects reads and locks touch end up together in memory. Each
    // pass generates every row; a `loading DONE TOTAL` line goes out every half second.
    let total = 2 * drive.workload.rows();
    let mut done = 0u64;
    let mut reported = Instant::now();
    for role in [Role::Primary, Role::Backup] {
        let node = driven.node();
        drive.workload.load(&mut |table, key, value| {
            done += 1;
            if done & 4095 == 0 && reported.elapsed() >= Duration::from_millis(500) {
                reported = Instant::now();
                println!("loading {done} {total}");
            }
            node.load_as(role, table, key, value)
        })?;
    }
    let mut out = std::io::stdout().lock();
    let mut answer = |line: &str| -> anyhow::Result<()> {
        writeln!(out, "{line}")?;
        out.flush()?;
        Ok(())
    };
    answer("ready")?;
    // Commands are read on a thread of their own, so that a removal is noticed (and the
    // node rejoins) between them.
    let (lines_in, lines) = mpsc::channel();
    std::thread::Builder::new()
        .name("ferrotx-stdin".to_string())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let end = line.is_err();
                if lines_in.send(line).is_err() || end {
                    break;
                }
            }
        })
        .context("starting the thread that reads commands")?;
    let mut runs_started: u64 = 0;
    let mut cpu_start = 0.0;
    let mut cpu_s = 0.0;
    let mut window_start = Instant::now();
    let mut window_s = 0.0;
    loop {
        driven.watch()?;
        let line = match lines.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => line?,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Results of coroutines dropped with a removed life, or come late.
                driven.take_results(Duration::ZERO);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let (command, argument) = match line.trim().split_once(' ') {
            Some((command, argument)) => (command, Some(argument)),
            None => (line.trim(), None),
        };
        match command {
            // `run` or `run N`: start the workload with N coroutines per thread (default:
            // the drive options'); `stop` ends it, and another `run` may follow.
            "run" => {
                ensure!(driven.running.is_none(), "run while a run is going on");
                let coroutines = match argument {
                    Some(n) => n
                        .parse::<usize>()
                        .with_context(|| format!("coroutines per thread: {n:?}"))?,
                    None => drive.coroutines,
                };
                ensure!(
                    (1..=drive.coroutines).contains(&coroutines),
                    "run {coroutines}: between 1 and {} coroutines per thread (the node's \
                     coroutine slots)",
                    drive.coroutines
                );
                driven.stop.store(false, Ordering::Relaxed);
                // Each run draws other numbers: a run replaying the previous one's inserts
                // and deletes would find them all done already.
                let seed = drive.seed ^ runs_started.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                runs_started += 1;
                driven.running = Some(Running {
                    id: runs_started,
                    coroutines,
                    seed,
                    outstanding: 0,
                    result: RunResult::default(),
                });
                let started = driven.spawn_coroutines(coroutines, seed);
                if let Some(running) = &mut driven.running {
                    running.outstanding += started;
                }
                answer("running")?;
            }
            "window-start" => {
                driven.progress.store(0, Ordering::Relaxed);
                cpu_start = process_cpu_s();
                window_start = Instant::now();
                driven.measuring.store(true, Ordering::Relaxed);
                answer("ok")?;
            }
            "window-end" => {
                driven.measuring.store(false, Ordering::Relaxed);
                window_s = window_start.elapsed().as_secs_f64();
                cpu_s = process_cpu_s() - cpu_start;
                answer("ok")?;
            }
            "stop" => {
                driven.stop.store(true, Ordering::Relaxed);
                // A node whose lease ran out (a false positive: nothing fails here) serves
                // nothing until it renews, and its coroutines wait; one the cluster removed
                // is replaced by a new life, its coroutines dropped and reported. One that
                // is neither after a short wait may never serve again: it reports what it
                // has, so that the run ends with its figures.
                let degraded = |driven: &Driven| {
                    driven.node().membership().is_some_and(|link| {
                        let stats = link.status().stats;
                        link.removed()
                            || stats.lease_expirations > 0
                            || stats.suspicions > 0
                            || stats.probes > 0
                    })
                };
                let stopped = Instant::now();
                while driven.running.as_ref().is_some_and(|r| r.outstanding > 0) {
                    driven.take_results(Duration::from_millis(100));
                    driven.watch()?;
                    let waited = stopped.elapsed();
                    if waited < Duration::from_secs(5) {
                        continue;
                    }
                    if degraded(&driven) {
                        if let Some(running) = &mut driven.running {
                            running.result.unfinished += running.outstanding as u64;
                            running.outstanding = 0;
                        }
                        break;
                    }
                    ensure!(
                        waited < Duration::from_secs(60),
                        "a workload coroutine did not finish in 60 s"
                    );
                }
                let mut run = driven.running.take().map(|r| r.result).unwrap_or_default();
                if run.unfinished > 0 {
                    // Its workers run nothing: no latencies to collect, no marks to flush.
                    run.cpu_s = cpu_s;
                    run.window_s = window_s;
                    answer(&serde_json::to_string(&run)?)?;
                    continue;
                }
                let node = driven.node();
                let (mut histogram, mut remote) = (new_histogram(), new_histogram());
                let types = drive.workload.types().len();
                run.types.resize(types, TypeResult::default());
                let mut by_type: Vec<Histogram<u64>> =
                    (0..types).map(|_| new_histogram()).collect();
                let mut shipping = ShipStats::default();
                for thread in 0..config.threads_per_node() {
                    let taken = node.spawn(thread, |_, coordinator| async move {
                        let all = LATENCIES.with(|h| {
                            std::mem::replace(
                                &mut *h.borrow_mut(),
                                [new_histogram(), new_histogram()],
                            )
                        });
                        let by_type = TYPE_LATENCIES.with(|h| std::mem::take(&mut *h.borrow_mut()));
                        (all, by_type, ShipStats::of(&coordinator.stats()))
                    });
                    // A life removed meanwhile takes its latencies with it.
                    let Some(([all, waited], per_type, ship_counts)) =
                        wait_on_life(node, &taken, "collecting latencies")?
                    else {
                        break;
                    };
                    shipping.add(&ship_counts);
                    histogram.add(&all).expect("same bounds");
                    remote.add(&waited).expect("same bounds");
                    for (mine, theirs) in by_type.iter_mut().zip(&per_type) {
                        mine.add(theirs).expect("same bounds");
                    }
                }
                let pairs = |h: &Histogram<u64>| -> Vec<(u64, u64)> {
                    h.iter_recorded()
                        .map(|v| (v.value_iterated_to(), v.count_at_value()))
                        .collect()
                };
                run.latency_ns = pairs(&histogram);
                run.remote_latency_ns = pairs(&remote);
                for (result, h) in run.types.iter_mut().zip(&by_type) {
                    result.latency_ns = pairs(h);
                }
                run.shipping = shipping.since(&driven.shipping_before);
                run.rss_peak_bytes = crate::cpu::process_peak_rss_bytes();
                run.objects = node
                    .copies()
                    .iter()
                    .flat_map(|(_, _, copy)| copy.tables().map(|t| copy.objects(t).unwrap_or(0)))
                    .sum::<usize>() as u64;
                run.store_bytes = node
                    .copies()
                    .iter()
                    .flat_map(|(_, _, copy)| copy.tables().map(|t| copy.bytes(t).unwrap_or(0)))
                    .sum::<usize>() as u64;
                run.cpu_s = cpu_s;
                run.window_s = window_s;
                flush_truncation(node)?;
                driven.shipping_before = shipping;
                answer(&serde_json::to_string(&run)?)?;
            }
            "timeline" => {
                let (start, length) = argument
                    .and_then(|a| a.split_once(' '))
                    .and_then(|(s, l)| Some((s.parse::<u64>().ok()?, l.parse::<usize>().ok()?)))
                    .context("timeline START_UNIX_NS LENGTH_MS")?;
                ensure!(
                    driven.recorder.set(Recorder::new(start, length)).is_ok(),
                    "a second timeline"
                );
                driven.monitor = Monitor::start(driven.node(), &driven.recorder);
                answer("ok")?;
            }
            "events" => answer(&serde_json::to_string(
                &driven
                    .monitor
                    .as_ref()
                    .map(Monitor::events)
                    .unwrap_or_default(),
            )?)?,
            "timeline-get" => {
                let timeline = NodeTimeline {
                    buckets: driven
                        .recorder
                        .get()
                        .map(Recorder::buckets)
                        .unwrap_or_default(),
                    events: driven
                        .monitor
                        .as_ref()
                        .map(Monitor::events)
                        .unwrap_or_default(),
                };
                answer(&serde_json::to_string(&timeline)?)?;
            }
            // Transactions committed in the window so far, for a progress line.
            "progress" => answer(&driven.progress.load(Ordering::Relaxed).to_string())?,
            "check" => answer(&serde_json::to_string(&check(
                driven.node(),
                &drive.workload,
            ))?)?,
            "leases" => {
                let leases = driven.node().membership().map(|link| {
                    let mut leases = merge_leases(&driven.past, NodeLeases::of(id, &link.status()));
                    leases.removals = driven.past.len() as u64;
                    leases.rejoins = driven.rejoins.clone();
                    leases
                });
                answer(&serde_json::to_string(&leases)?)?
            }
            // Whether every removed life's successor is back with the cluster at full
            // strength (its refill done): `yes` or `no`.
            "settled" => answer(if driven.refilling { "no" } else { "yes" })?,
            "exit" => break,
            other => bail!("unknown command {other:?}"),
        }
    }
    driven.monitor = None;
    let mut totals = driven.totals;
    if let Some(node) = driven.node.take() {
        for report in node.stop() {
            totals.add(&report);
        }
    }
    answer(&serde_json::to_string(&totals)?)?;
    Ok(())
}

/// Sends every coordinator thread's truncation mark to every node, so that backups apply
/// every finished transaction to their copies.
fn flush_truncation(node: &Node) -> anyhow::Result<()> {
    // With membership, the members of the view (a killed node is not waited for).
    let view = node.membership().and_then(|link| link.status().view);
    let nodes: Vec<u16> = match view {
        Some(view) => view.members.iter().map(|m| m.node).collect(),
        None => node.config().members().iter().map(|m| m.node).collect(),
    };
    let flushes: Vec<_> = (0..node.config().threads_per_node())
        .map(|thread| {
            let nodes = nodes.clone();
            node.spawn(thread, move |co, coordinator| async move {
                coordinator.flush_truncation(&co, &nodes).await;
            })
        })
        .collect();
    for flush in flushes {
        // A life removed meanwhile has nothing left to flush: recovery decides and applies
        // its transactions in the view without it.
        if wait_on_life(node, &flush, "flushing truncation")?.is_none() {
            break;
        }
    }
    Ok(())
}

/// Waits up to 60 s for what a coroutine started on `node` sends to `answer`; `None` if
/// the cluster removes `node`'s life meanwhile (its coroutines never run again; the
/// driver starts a new life at its next look).
fn wait_on_life<T>(
    node: &Node,
    answer: &mpsc::Receiver<T>,
    what: &str,
) -> anyhow::Result<Option<T>> {
    let started = Instant::now();
    loop {
        match answer.recv_timeout(Duration::from_millis(50)) {
            Ok(value) => return Ok(Some(value)),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if node.membership().is_some_and(|link| link.removed()) {
                    return Ok(None);
                }
                ensure!(
                    started.elapsed() < Duration::from_secs(60),
                    "{what} did not finish in 60 s"
                );
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("{what}: the worker stopped"),
        }
    }
}

/// What a node's workload coroutines share with its driver.
struct Shared {
    /// Inside the measured window.
    measuring: Arc<AtomicBool>,
    /// Finish the transaction and return.
    stop: Arc<AtomicBool>,
    /// Committed in the window, in steps, for the progress line.
    progress: Arc<AtomicU64>,
    /// Commits per 1 ms, once a timeline started.
    recorder: RecorderSlot,
}

/// A workload coroutine: transactions until told to stop; what it did goes out through
/// `report` when it returns or is dropped (with its removed life).
async fn coroutine(
    co: ferrotx_exec::Co,
    coordinator: Rc<ferrotx_txn::coordinator::Coordinator>,
    mut runner: Runner,
    shared: Shared,
    mut report: Report,
) {
    let Shared {
        measuring,
        stop,
        progress,
        recorder,
    } = shared;
    let counts_local = runner.workload().counts_local();
    while !stop.load(Ordering::Relaxed) {
        // The loop's clock (set once per iteration) tells whether the transaction waited.
        // One that waited is timed on that clock, from the iteration that started it to
        // the one that resumed it with its last answer, as `bench rpc` times an RPC (so
        // the two compare); one that never waited, on the real clock.
        let start = co.now_ns();
        let started = Instant::now();
        report.in_flight = true;
        let done = runner.run_one(&co, &coordinator, &mut NoRecorder).await;
        report.in_flight = false;
        let run = &mut report.run;
        let waited = co.now_ns() != start;
        let window = measuring.load(Ordering::Relaxed);
        if run.types.len() <= done.kind {
            run.types.resize(done.kind + 1, TypeResult::default());
        }
        match done.result {
            Ok(outcome) => {
                run.committed += 1;
                if let Some(recorder) = recorder.get() {
                    recorder.commit();
                }
                run.money += i128::from(outcome.money);
                if window {
                    run.window_committed += 1;
                    // Counted for the progress line in steps, not one shared write per
                    // transaction.
                    const PROGRESS_STEP: u64 = 256;
                    if run.window_committed.is_multiple_of(PROGRESS_STEP) {
                        progress.fetch_add(PROGRESS_STEP, Ordering::Relaxed);
                    }
                    run.types[done.kind].committed += 1;
                    run.types[done.kind].succeeded += u64::from(outcome.succeeded);
                    let latency = if waited {
                        co.now_ns() - start
                    } else {
                        (started.elapsed().as_nanos() as u64).max(1)
                    };
                    LATENCIES.with(|h| {
                        let mut h = h.borrow_mut();
                        let _ = h[0].record(latency);
                        if waited {
                            let _ = h[1].record(latency);
                        }
                    });
                    if waited || counts_local {
                        TYPE_LATENCIES.with(|h| {
                            let mut h = h.borrow_mut();
                            while h.len() <= done.kind {
                                h.push(new_histogram());
                            }
                            let _ = h[done.kind].record(latency);
                        });
                    }
                }
            }
            // Nothing changed: conflicts (of a shipped operation: the primary's retries
            // ran out), as before shipping.
            Err(Abort::Conflict | Abort::Locked | Abort::LogFull) => {
                run.aborted += 1;
                run.window_aborted += u64::from(window);
                run.types[done.kind].aborted += u64::from(window);
            }
            // It may have committed: neither committed nor aborted (the end check of the
            // counters fails unless there are none, and says so).
            Err(Abort::OutcomeUnknown) => run.unknown += 1,
            // Nothing changed: the cluster reconfigures (a node failed), or a partition
            // has no copy.
            Err(Abort::Unavailable) => run.unavailable += 1,
            Err(_) => run.errors += 1,
        }
        // Let the worker receive and send between transactions when a transaction
        // touched only local partitions and never waited (the clock, set once per loop
        // iteration, has not moved).
        if !waited {
            co.yield_now().await;
        }
    }
    report.finished = true;
}
