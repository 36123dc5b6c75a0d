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
//! - `exit`: stop the workers and answer with [`NodeTotals`].
//!
//! A driven node the cluster removes stays removed until `exit`: unlike a plain
//! `ferrotx node`, it does not come back as a new life, because this protocol, the data
//! it loaded and its counters belong to one life, and the benchmark must see the false
//! positive (`NodeLeases`, `RunResult::unfinished`) rather than have it hidden by a refill.

use std::io::{BufRead, Write};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use ferrotx_cluster::Configuration;
use ferrotx_node::{BATCH_DATAGRAMS, Node, NodeOptions, ShipStats};
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
    /// served (its lease ran out, or the cluster removed it): must be 0.
    #[serde(default)]
    pub unfinished: u64,
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

fn check(node: &Node, workload: &Workload) -> CheckResult {
    let mut result = CheckResult::default();
    // A backup still being filled (data recovery) holds part of its partition: not a
    // copy yet, so not compared.
    let filling: Vec<u32> = node
        .core()
        .fill_progress()
        .iter()
        .filter(|f| !f.done)
        .map(|f| f.partition)
        .collect();
    for (id, role, copy) in node.copies() {
        if filling.contains(&id.0) {
            continue;
        }
        for table in workload.schema() {
            let (digest, objects) = copy.digest(table.id).expect("table exists");
            result.copies.push(CopyDigest {
                partition: id.0,
                table: table.id.0,
                primary: role == Role::Primary,
                digest,
                objects,
            });
        }
    }
    let (summed, signed) = workload.summed();
    let mut value = Vec::new();
    for (table, key) in summed {
        let partition = node.partition_of(table, &key);
        let Some(primary) = node.copy(partition, Role::Primary) else {
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

/// What one coroutine measured.
struct CoroutineResult {
    run: RunResult,
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

/// Starts node `id` of `config` (read from `config_path`) as a member of the cluster with
/// leases of `lease_ms`, as `ferrotx node` does: the coordination file next to the
/// configuration (a view left there by a cluster that died is retired, so a run never
/// waits for dead members), the lease thread, then the workers once admitted.
fn start_member<T: Transport + Send + 'static>(
    config: &Arc<Configuration>,
    config_path: &Path,
    id: u16,
    lease_ms: u64,
    transports: Vec<T>,
    options: &NodeOptions,
) -> anyhow::Result<Node> {
    let keys = options.keys.clone();
    ensure!(lease_ms >= 1, "leases must be at least 1 ms long");
    let state = ferrotx_coord::default_state_path(config_path);
    let mut coordination = ferrotx_coord::FileCoordination::open(&state, id)
        .with_context(|| format!("opening the coordination file {}", state.display()))?;
    coordination
        .retire_if_dead()
        .with_context(|| format!("retiring a stale view in {}", state.display()))?;
    let lease = ferrotx_node::LeaseThread::start(
        config.clone(),
        id,
        ferrotx_node::incarnation_from_clock(),
        ferrotx_membership::Options::with_lease_ms(lease_ms),
        Box::new(coordination),
        Instant::now(),
        keys,
    )
    .with_context(|| format!("starting node {id}'s lease thread"))?;
    Node::start_member(transports, options, lease, ADMIT_TIMEOUT)
        .with_context(|| format!("starting node {id} as a member"))
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
    let transports = Node::udp_transports(&config, id, &options)
        .with_context(|| format!("starting node {id} over UDP"))?
        .into_iter()
        .map(|t| {
            let seed = drive.seed ^ u64::from(t.local().0) ^ 0x1055;
            Lossy::new(t, drive.loss, seed, BATCH_DATAGRAMS, UDP_MAX_PAYLOAD_BYTES)
        })
        .collect();
    let node = match drive.lease_ms {
        Some(lease_ms) => start_member(&config, config_path, id, lease_ms, transports, &options)?,
        None => Node::start(config.clone(), id, transports, &options, Instant::now()),
    };
    // Primaries first: the objects reads and locks touch end up together in memory. Each
    // pass generates every row; a `loading DONE TOTAL` line goes out every half second.
    let total = 2 * drive.workload.rows();
    let mut done = 0u64;
    let mut reported = Instant::now();
    for role in [Role::Primary, Role::Backup] {
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
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let recorder: RecorderSlot = Arc::default();
    let mut monitor: Option<Monitor> = None;
    let mut runs_started: u64 = 0;
    let mut running = Vec::new();
    let mut cpu_start = 0.0;
    let mut cpu_s = 0.0;
    let mut window_start = Instant::now();
    let mut window_s = 0.0;
    // Shipping's counters at the end of the previous run (they only grow).
    let mut shipping_before = ShipStats::default();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (command, argument) = match line.trim().split_once(' ') {
            Some((command, argument)) => (command, Some(argument)),
            None => (line.trim(), None),
        };
        match command {
            // `run` or `run N`: start the workload with N coroutines per thread (default:
            // the drive options'); `stop` ends it, and another `run` may follow.
            "run" => {
                ensure!(running.is_empty(), "run while a run is going on");
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
                stop.store(false, Ordering::Relaxed);
                // Each run draws other numbers: a run replaying the previous one's inserts
                // and deletes would find them all done already.
                let run_seed = drive.seed ^ runs_started.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                runs_started += 1;
                let clients = if id < drive.client_nodes {
                    config.threads_per_node()
                } else {
                    0
                };
                for thread in 0..clients {
                    for index in 0..coroutines {
                        let seed = run_seed
                            ^ (u64::from(id) << 48)
                            ^ (u64::from(thread) << 32)
                            ^ index as u64;
                        let runner =
                            Runner::new(drive.workload.clone(), ChaCha8Rng::seed_from_u64(seed));
                        let shared = Shared {
                            measuring: measuring.clone(),
                            stop: stop.clone(),
                            progress: progress.clone(),
                            recorder: recorder.clone(),
                        };
                        running.push(node.spawn(thread, move |co, coordinator| {
                            coroutine(co, coordinator, runner, shared)
                        }));
                    }
                }
                answer("running")?;
            }
            "window-start" => {
                progress.store(0, Ordering::Relaxed);
                cpu_start = process_cpu_s();
                window_start = Instant::now();
                measuring.store(true, Ordering::Relaxed);
                answer("ok")?;
            }
            "window-end" => {
                measuring.store(false, Ordering::Relaxed);
                window_s = window_start.elapsed().as_secs_f64();
                cpu_s = process_cpu_s() - cpu_start;
                answer("ok")?;
            }
            "stop" => {
                stop.store(true, Ordering::Relaxed);
                let mut run = RunResult::default();
                let (mut histogram, mut remote) = (new_histogram(), new_histogram());
                // A node whose lease ran out (a false positive: nothing fails here) may
                // serve nothing any more, and its coroutines never finish: after a short
                // wait it reports what it has, so that the run ends with its figures.
                let degraded = || {
                    node.membership().is_some_and(|link| {
                        let stats = link.status().stats;
                        link.removed()
                            || stats.lease_expirations > 0
                            || stats.suspicions > 0
                            || stats.probes > 0
                    })
                };
                let stopped = Instant::now();
                for receiver in running.drain(..) {
                    loop {
                        match receiver.recv_timeout(Duration::from_millis(100)) {
                            Ok(c) => run.add_counts(&c.run),
                            Err(_) if stopped.elapsed() < Duration::from_secs(5) => continue,
                            Err(_) if degraded() => run.unfinished += 1,
                            Err(_) if stopped.elapsed() < Duration::from_secs(60) => continue,
                            Err(_) => bail!("a workload coroutine did not finish in 60 s"),
                        }
                        break;
                    }
                }
                if run.unfinished > 0 {
                    // Its workers run nothing: no latencies to collect, no marks to flush.
                    run.cpu_s = cpu_s;
                    run.window_s = window_s;
                    answer(&serde_json::to_string(&run)?)?;
                    continue;
                }
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
                    let ([all, waited], per_type, ship_counts) = taken
                        .recv_timeout(Duration::from_secs(60))
                        .context("collecting latencies")?;
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
                run.shipping = shipping.since(&shipping_before);
                shipping_before = shipping;
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
                flush_truncation(&node)?;
                answer(&serde_json::to_string(&run)?)?;
            }
            "timeline" => {
                let (start, length) = argument
                    .and_then(|a| a.split_once(' '))
                    .and_then(|(s, l)| Some((s.parse::<u64>().ok()?, l.parse::<usize>().ok()?)))
                    .context("timeline START_UNIX_NS LENGTH_MS")?;
                ensure!(
                    recorder.set(Recorder::new(start, length)).is_ok(),
                    "a second timeline"
                );
                monitor = Monitor::start(&node, &recorder);
                answer("ok")?;
            }
            "events" => answer(&serde_json::to_string(
                &monitor.as_ref().map(Monitor::events).unwrap_or_default(),
            )?)?,
            "timeline-get" => {
                let timeline = NodeTimeline {
                    buckets: recorder.get().map(Recorder::buckets).unwrap_or_default(),
                    events: monitor.as_ref().map(Monitor::events).unwrap_or_default(),
                };
                answer(&serde_json::to_string(&timeline)?)?;
            }
            // Transactions committed in the window so far, for a progress line.
            "progress" => answer(&progress.load(Ordering::Relaxed).to_string())?,
            "check" => answer(&serde_json::to_string(&check(&node, &drive.workload))?)?,
            "leases" => {
                let leases = node
                    .membership()
                    .map(|link| NodeLeases::of(id, &link.status()));
                answer(&serde_json::to_string(&leases)?)?
            }
            "exit" => break,
            other => bail!("unknown command {other:?}"),
        }
    }
    drop(monitor);
    let mut totals = NodeTotals::default();
    for report in node.stop() {
        totals.rpcs += report.rpc.calls_completed;
        totals.datagrams_sent += report.rpc.datagrams_sent;
        totals.retransmissions += report.rpc.retransmissions;
        totals.wrong_configuration += report.rpc.wrong_configuration;
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
        flush
            .recv_timeout(Duration::from_secs(60))
            .context("flushing truncation did not finish in 60 s")?;
    }
    Ok(())
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

async fn coroutine(
    co: ferrotx_exec::Co,
    coordinator: Rc<ferrotx_txn::coordinator::Coordinator>,
    mut runner: Runner,
    shared: Shared,
) -> CoroutineResult {
    let Shared {
        measuring,
        stop,
        progress,
        recorder,
    } = shared;
    let mut run = RunResult::default();
    let counts_local = runner.workload().counts_local();
    while !stop.load(Ordering::Relaxed) {
        // The loop's clock (set once per iteration) tells whether the transaction waited.
        // One that waited is timed on that clock, from the iteration that started it to
        // the one that resumed it with its last answer, as `bench rpc` times an RPC (so
        // the two compare); one that never waited, on the real clock.
        let start = co.now_ns();
        let started = Instant::now();
        let done = runner.run_one(&co, &coordinator, &mut NoRecorder).await;
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
                    if run.window_committed % PROGRESS_STEP == 0 {
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
    CoroutineResult { run }
}
