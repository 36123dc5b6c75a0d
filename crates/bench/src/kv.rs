//! `ferrotx bench kv` and `ferrotx bench bank`: a cluster of node processes on loopback
//! over UDP, every node running workload coroutines on every worker thread (FaSST's
//! symmetric model: clients are coroutines inside the nodes), measured over a window after
//! a warm-up, then checked once quiet.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use ferrotx_cluster::Configuration;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::driver::{
    CheckResult, DriveOptions, NodeLeases, NodeTotals, Rejoin, RunResult, new_histogram,
};
use crate::processes::ProcessCluster;
use crate::rpc::Latency;
use crate::timeline::{Kill, NodeTimeline, TimelineReport};
use crate::workload::{TABLE, Workload};

/// Settings of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterBenchOptions {
    /// The workload.
    pub workload: Workload,
    /// Node processes.
    pub nodes: u16,
    /// Copies of each partition (f + 1).
    pub replicas: u8,
    /// Worker threads per node.
    pub threads: u16,
    /// Workload coroutines per worker thread.
    pub coroutines: usize,
    /// Partitions per node.
    pub partitions_per_node: u32,
    /// Measured seconds.
    pub duration_s: f64,
    /// Seconds run before measuring.
    pub warmup_s: f64,
    /// First UDP port of the cluster.
    pub port_base: u16,
    /// Seed of the workload's random numbers.
    pub seed: u64,
    /// How long an idle worker polls before it sleeps, in microseconds.
    pub spin_us: u64,
    /// Whether a polling worker yields its core to other runnable threads.
    pub yield_while_polling: bool,
    /// Nodes that run workload coroutines (the first ones); the others only serve.
    pub client_nodes: u16,
    /// Share of datagrams every node drops on purpose before sending, in [0, 1).
    pub loss: f64,
    /// Length of the nodes' leases in milliseconds: the nodes run as members of the
    /// cluster, with the lease thread and the coordination file, as `ferrotx node` does.
    /// 0: static nodes without membership (the benchmarks before leases).
    #[serde(default)]
    pub lease_ms: u64,
    /// What the nodes' lease threads do to stay on time (memory locked, real-time
    /// priority), each where the process may.
    #[serde(default)]
    pub tuning: ferrotx_node::LeaseTuning,
    /// Nodes send datagrams without MACs and accept them so: a switch for benchmarks only,
    /// to measure what authentication costs against the same run with it.
    #[serde(default)]
    pub no_auth: bool,
    /// Failure domains: node `n` in domain `d{n % domains}`, and the partition map
    /// placed for them. 0: every node its own domain (`node-N`).
    #[serde(default)]
    pub domains: u16,
    /// Kill a node, a domain or the CM in the measured window, and record the timeline
    /// of the recovery ([`crate::timeline`]). Needs `lease_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill: Option<Kill>,
    /// With a kill: how long the run goes on after the window, at most, for the cluster
    /// to get back to full strength (the workload runs on, and the timeline with it).
    #[serde(default)]
    pub rereplication_deadline_s: f64,
    /// Stop a node process (`SIGSTOP`) in the measured window for a while, then resume it
    /// (`SIGCONT`): a false positive made on purpose, as a machine that stalls a process
    /// past its lease makes one. Needs `lease_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
    /// The cluster's `[durability] mode` (docs/durability.md): in `flush` and `sync`
    /// each node logs to `node-N` beside the run's configuration, on this host's disk
    /// under the temporary directory.
    #[serde(default)]
    pub durability: ferrotx_cluster::DurabilityMode,
    /// `[durability] checkpoint_log_mb`, if not the default: how much log a node writes
    /// between checkpoints (to measure what a round costs).
    #[serde(default)]
    pub checkpoint_log_mb: Option<u64>,
}

/// A node paused in the measured window ([`ClusterBenchOptions::pause`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pause {
    /// The node.
    pub node: u16,
    /// Seconds into the window.
    pub at_s: f64,
    /// How long, in milliseconds.
    pub for_ms: u64,
}

impl Pause {
    /// Parses `NODE@SECS` (`--pause`), for `for_ms` milliseconds.
    pub fn parse(spec: &str, for_ms: u64) -> anyhow::Result<Self> {
        let (node, at) = spec
            .split_once('@')
            .with_context(|| format!("--pause {spec:?} is not NODE@SECS"))?;
        let node = node
            .parse()
            .with_context(|| format!("--pause {spec:?}: {node:?} is not a node id"))?;
        let at_s: f64 = at
            .parse()
            .with_context(|| format!("--pause {spec:?}: {at:?} is not a number of seconds"))?;
        ensure!(
            at_s.is_finite() && at_s >= 0.0,
            "--pause {spec:?}: the time must be a number of seconds, 0 or more"
        );
        ensure!(for_ms > 0, "--pause-ms must be at least 1");
        Ok(Self { node, at_s, for_ms })
    }

    /// How long a pause must be, by default, for the cluster to remove the node: a lease
    /// for the CM to suspect it, a quarter more for the probe round, and as much again
    /// for the new view's commit, on a loaded machine.
    pub fn default_ms(lease_ms: u64) -> u64 {
        (5 * lease_ms).max(500)
    }
}

impl ClusterBenchOptions {
    fn check(&self) -> anyhow::Result<Configuration> {
        self.workload.check()?;
        ensure!(self.nodes >= 1, "--nodes must be at least 1");
        ensure!(
            self.replicas >= 1 && u16::from(self.replicas) <= self.nodes,
            "--replicas must be in 1..=--nodes"
        );
        ensure!(self.threads >= 1, "--threads must be at least 1");
        ensure!(
            (1..=self.nodes).contains(&self.client_nodes),
            "--client-nodes must be in 1..=--nodes"
        );
        ensure!(
            (1..=254).contains(&self.coroutines),
            "--coroutines must be in 1..=254"
        );
        ensure!(self.duration_s > 0.0, "--duration must be positive");
        ensure!((0.0..1.0).contains(&self.loss), "--loss must be in [0, 1)");
        ensure!(
            self.domains <= self.nodes,
            "--domains must be at most --nodes"
        );
        let mut config = Configuration::local(
            self.nodes,
            self.replicas,
            self.threads,
            self.partitions_per_node,
            self.port_base,
        )?
        .with_tables(self.workload.schema())?
        .with_durability(ferrotx_cluster::Durability {
            mode: self.durability,
            checkpoint_log_mb: self
                .checkpoint_log_mb
                .unwrap_or(ferrotx_cluster::DEFAULT_CHECKPOINT_LOG_MB),
            ..ferrotx_cluster::Durability::default()
        });
        if self.domains > 0 {
            let domains = self.domains;
            config = config.with_failure_domains(|n| format!("d{}", n % domains))?;
        }
        if let Some(pause) = &self.pause {
            ensure!(
                self.lease_ms > 0,
                "a pause needs the nodes to run with leases (--lease-ms above 0)"
            );
            ensure!(self.kill.is_none(), "a run pauses or kills, not both");
            ensure!(
                pause.node < self.nodes,
                "--pause: there is no node {} (nodes 0..{})",
                pause.node,
                self.nodes
            );
            ensure!(
                pause.at_s < self.duration_s,
                "the pause ({} s into the window) must come before its end ({} s)",
                pause.at_s,
                self.duration_s
            );
        }
        if let Some(kill) = &self.kill {
            ensure!(
                self.lease_ms > 0,
                "a kill needs the nodes to run with leases (--lease-ms above 0)"
            );
            ensure!(
                kill.at_s() < self.duration_s,
                "the kill ({} s into the window) must come before its end ({} s)",
                kill.at_s(),
                self.duration_s
            );
            match kill {
                Kill::Node { node, .. } => ensure!(
                    *node < self.nodes,
                    "--kill: there is no node {node} (nodes 0..{})",
                    self.nodes
                ),
                Kill::Domain { domain, .. } => ensure!(
                    config.members().iter().any(|m| &m.failure_domain == domain),
                    "--kill-domain: no node is in domain {domain:?} (the domains are {:?})",
                    config
                        .members()
                        .iter()
                        .map(|m| m.failure_domain.as_str())
                        .collect::<std::collections::BTreeSet<_>>()
                ),
                Kill::Cm { .. } => {}
            }
            // Membership reconfigures only with a majority of the view's members.
            let killed = match kill {
                Kill::Domain { domain, .. } => config
                    .members()
                    .iter()
                    .filter(|m| &m.failure_domain == domain)
                    .count(),
                Kill::Node { .. } | Kill::Cm { .. } => 1,
            };
            let nodes = usize::from(self.nodes);
            ensure!(
                2 * (nodes - killed) > nodes,
                "killing {} leaves {} of {nodes} nodes, not a majority: the survivors could \
                 not make a new view (use more nodes or domains)",
                kill.describe(),
                nodes - killed
            );
        }
        Ok(config)
    }
}

/// Whether the data was right at the end.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Checks {
    /// Every backup copy equals its primary.
    pub replicas_equal: bool,
    /// Copies that differ from their primary.
    pub replicas_differing: usize,
    /// The copies that differ: which, and their objects beside the primary's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<DifferingCopy>,
    /// Partitions (tables of) with copies but none of them primary in the view its node
    /// serves: their keys would go unsummed.
    #[serde(default)]
    pub without_primary: usize,
    /// Sum over the summed keys of the first 8 bytes of the value at the primary.
    pub primary_sum: i128,
    /// What that sum must be: the money at the start (bank), plus what committed
    /// transactions created or destroyed (SmallBank), or the number of committed
    /// read-modify-writes (kv), so a lost or doubled write shows. TATP sums nothing.
    pub primary_sum_expected: i128,
    /// Largest balance or counter: a negative balance would wrap to a huge number.
    pub primary_max: u64,
    /// Keys absent or still locked at their primary.
    pub primary_missing: u64,
    /// Transactions refused as bad input or by a participant.
    pub errors: u64,
    /// Transactions whose outcome the client never learned (a commit or a shipped
    /// operation cut off by a failure): each may have committed or not, so they are in
    /// neither `committed` nor `aborted`, and the sum may exceed what is expected by up to
    /// this many times the writes of a transaction. Must be 0 unless the run kills a node
    /// or the cluster reconfigured (a false positive).
    #[serde(default)]
    pub unknown: u64,
    /// Transactions refused because the cluster was reconfiguring or a partition had no
    /// copy (nothing changed): 0 unless the run kills a node or the cluster reconfigured
    /// (a false positive).
    #[serde(default)]
    pub unavailable: u64,
    /// Everything above holds.
    pub ok: bool,
}

/// A copy whose digest differs from its primary's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DifferingCopy {
    /// The partition and table.
    pub partition: u32,
    /// The table.
    pub table: u16,
    /// The node that holds it, as the index of its answer (node order, killed nodes left
    /// out).
    pub answer: usize,
    /// Its objects.
    pub objects: usize,
    /// The primary's node (as `answer`), and its objects.
    pub primary_answer: usize,
    /// The primary's objects.
    pub primary_objects: usize,
}

/// `bench kv`'s one-key read-modify-writes shipped to their key's primary, over the whole
/// run (warm-up included), from the coordinator threads' counters.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShippingReport {
    /// Operations the clients shipped that came back with an outcome (committed, or
    /// refused after the primary's retries ran out).
    pub shipped: u64,
    /// Operations the primaries ran and answered. Each node counts when it stops, while
    /// the clients of nodes told to stop after it may still ship to it: this may miss up
    /// to one operation per such client.
    pub operations: u64,
    /// Batches the primaries committed: one transaction each.
    pub batches: u64,
    /// `operations / batches`: how many operations one commit carried (combining).
    pub operations_per_batch: f64,
    /// Attempts of batches that aborted on a conflict and were retried at the primary:
    /// the clients do not see them (they are not in `aborted`).
    pub batch_retries: u64,
    /// Requests the primaries answered "retry" (nothing ran; the client asked again).
    pub retries_asked: u64,
}

/// One transaction type's results inside the window.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TypeReport {
    /// Its name.
    pub name: String,
    /// Committed.
    pub committed: u64,
    /// Committed and found what they looked for.
    pub succeeded: u64,
    /// Aborted (conflicts).
    pub aborted: u64,
    /// `succeeded / committed`.
    pub success_rate: f64,
    /// Latency of the committed ones.
    pub latency_us: Latency,
}

/// The result of a run, as written to `--json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterBenchReport {
    /// The settings.
    pub options: ClusterBenchOptions,
    /// Transactions committed inside the window (single-key reads count as transactions).
    pub committed: u64,
    /// Transactions aborted inside the window.
    pub aborted: u64,
    /// Length of the window.
    pub duration_s: f64,
    /// `committed / duration_s`.
    pub throughput_per_s: f64,
    /// User plus system CPU seconds of all node processes over the window.
    pub cpu_s: f64,
    /// `committed / cpu_s`.
    pub throughput_per_cpu_s: f64,
    /// Latency of a committed transaction, from its start to its commit being reported.
    pub latency_us: Latency,
    /// The same, for the committed transactions that waited for at least one RPC (a
    /// single-key read at this node's own primary does not).
    pub remote_latency_us: Latency,
    /// Per transaction type, inside the window.
    pub types: Vec<TypeReport>,
    /// `aborted / (committed + aborted)` in the window.
    pub abort_rate: f64,
    /// RPCs (request and response over the network) per committed transaction, over the
    /// whole run; partitions of the coordinator's own node are reached without RPC.
    pub rpcs_per_commit: f64,
    /// Datagrams sent per committed transaction, over the whole run.
    pub datagrams_per_commit: f64,
    /// Requests retransmitted over the whole run.
    pub retransmissions: u64,
    /// Committed over the whole run.
    pub committed_total: u64,
    /// The checks of the data.
    pub checks: Checks,
    /// The nodes' leases over the whole run (loading included), when they ran with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases: Option<LeasesReport>,
    /// Per node, in node order: what the clients (coroutines) of each node did inside
    /// the window. With hot keys, how evenly the nodes share them.
    #[serde(default)]
    pub nodes: Vec<NodeReport>,
    /// `bench kv` shipping its one-key read-modify-writes: what shipping did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shipping: Option<ShippingReport>,
    /// With a kill (`--kill`, `--kill-domain`, `--kill-cm`): the failure timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<TimelineReport>,
    /// What the nodes' data costs in memory.
    #[serde(default)]
    pub memory: MemoryReport,
}

/// Memory of the node processes at the end of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MemoryReport {
    /// Each node process's peak resident memory, summed over the nodes (clients and
    /// their buffers included: the workload runs inside the nodes).
    pub rss_bytes: u64,
    /// Object copies the nodes hold, over every table and replica.
    pub objects: u64,
    /// `rss_bytes / objects`: what one stored copy of a row costs, all overheads in.
    pub bytes_per_object: f64,
    /// Bytes the copies' records and index slots take, as allocated, summed over the
    /// nodes: what of `rss_bytes` is the store's (the rest is the processes' buffers,
    /// the allocator's slack and the clients).
    #[serde(default)]
    pub store_bytes: u64,
}

/// `bench kv` keys of which [`NodeReport::primary_keys`] is reported: up to this many
/// keys in the table (hot keys), where which node is their primary matters.
pub const PRIMARY_KEYS_REPORTED_MAX: u64 = 4096;

/// One node's clients inside the window: the transactions the coroutines on this node
/// ran (as coordinators), wherever their keys were.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node.
    pub node: u16,
    /// Whether it ran workload coroutines (`--client-nodes`).
    pub clients: bool,
    /// Transactions its clients committed inside its window.
    pub committed: u64,
    /// Transaction attempts its clients saw abort inside its window (an aborted `bench`
    /// transaction is not retried: each attempt is a transaction of its own).
    pub aborted: u64,
    /// Its window, in seconds.
    pub duration_s: f64,
    /// `committed / duration_s`.
    pub throughput_per_s: f64,
    /// Its share of the cluster's commits inside the window.
    pub share: f64,
    /// `aborted / (committed + aborted)`: aborted attempts over attempts.
    pub abort_rate: f64,
    /// Latency of its committed transactions.
    pub latency_us: Latency,
    /// `bench kv` with at most [`PRIMARY_KEYS_REPORTED_MAX`] keys (`--hot-keys`): how
    /// many of the table's keys this node holds the primary copy of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_keys: Option<u64>,
}

/// The nodes' leases over a run: false positives (nothing fails in a benchmark) and
/// renewal round trips.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LeasesReport {
    /// Length of a lease, in milliseconds.
    pub lease_ms: u64,
    /// Lease expirations, summed over the nodes: all false positives. The target is 0.
    pub expirations: u64,
    /// Of those, the ones before the workload started: while the cluster formed and the
    /// data loaded.
    pub expirations_before_workload: u64,
    /// Renewals (lease grants received), summed over the nodes.
    pub renewals: u64,
    /// Suspicions raised, summed over the nodes.
    pub suspicions: u64,
    /// Whether every node committed a view: with leases too short for the machine, the
    /// first view may never commit (every member must acknowledge it within a lease, once
    /// its workers started), and then nothing renews, expires or commits.
    pub formed: bool,
    /// Whether any node ended in another view than the cluster's first (view 1: the
    /// benchmark starts a new cluster), so the cluster reconfigured (false positives).
    pub reconfigured: bool,
    /// Renewal round trip (request sent to grant received) over every node's renewals,
    /// median, in microseconds: the upper bound of its power-of-two bucket of nanoseconds
    /// (so within a factor of 2 above the true value).
    pub renewal_rtt_p50_us: f64,
    /// The same, 99th percentile.
    pub renewal_rtt_p99_us: f64,
    /// The longest renewal round trip, exact, in microseconds.
    pub renewal_rtt_max_us: f64,
    /// Every node's lease thread ran at real-time priority.
    pub realtime: bool,
    /// Every node process locked its memory (`mlockall`).
    #[serde(default)]
    pub memory_locked: bool,
    /// The latest any node's lease thread woke after it meant to (a timeout due), in
    /// microseconds: how far the machine delays a real-time thread.
    pub max_wake_late_us: u64,
    /// Page faults the lease threads took, minor and major, summed over the nodes.
    #[serde(default)]
    pub faults_minor: u64,
    /// Major page faults (read from disk).
    #[serde(default)]
    pub faults_major: u64,
    /// Times the kernel preempted a lease thread (involuntary context switches), summed.
    #[serde(default)]
    pub preempted: u64,
    /// Lives the cluster removed (false positives that went as far as a removal), summed
    /// over the nodes. Each came back as a new life, refilled by data recovery.
    #[serde(default)]
    pub removals: u64,
    /// What each removal cost, with its node.
    #[serde(default)]
    pub rejoins: Vec<NodeRejoin>,
    /// Per node.
    pub nodes: Vec<NodeLeasesReport>,
}

/// One removal of a node's life and its new life's rejoin and refill.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeRejoin {
    /// The node.
    pub node: u16,
    /// What it cost.
    #[serde(flatten)]
    pub rejoin: Rejoin,
}

/// One node's leases over a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeLeasesReport {
    /// The node.
    pub node: u16,
    /// Lease expirations (false positives).
    pub expirations: u64,
    /// Renewals.
    pub renewals: u64,
    /// Renewal round trip quantiles as in [`LeasesReport`], in microseconds.
    pub renewal_rtt_p50_us: f64,
    /// 99th percentile.
    pub renewal_rtt_p99_us: f64,
    /// Longest.
    pub renewal_rtt_max_us: f64,
    /// Its lease thread ran at real-time priority (`SCHED_FIFO`).
    pub realtime: bool,
    /// Its process's memory was locked (`mlockall`).
    #[serde(default)]
    pub memory_locked: bool,
    /// The latest its lease thread woke after it meant to, in microseconds.
    pub max_wake_late_us: u64,
    /// Page faults its lease thread took (minor, major) and times it was preempted.
    #[serde(default)]
    pub faults_minor: u64,
    /// Major page faults.
    #[serde(default)]
    pub faults_major: u64,
    /// Involuntary context switches.
    #[serde(default)]
    pub preempted: u64,
    /// Its lives the cluster removed.
    #[serde(default)]
    pub removals: u64,
    /// The id of the last view it knew, and how many members that view had.
    pub view_id: u64,
    /// Members of that view.
    pub view_members: usize,
    /// Views committed at this node (0: the cluster never formed).
    pub views_committed: u64,
}

/// Renewal round trip quantiles (p50, p99, max) in microseconds of log2 buckets of
/// nanoseconds and the exact maximum.
fn rtt_us(log2: &[u64], max_ns: u64) -> (f64, f64, f64) {
    let mut stats = ferrotx_membership::Stats::default();
    for (mine, &theirs) in stats.renewal_rtt_log2.iter_mut().zip(log2) {
        *mine += theirs;
    }
    stats.renewal_rtt_max_ns = max_ns;
    let us = |ns: u64| ns as f64 / 1e3;
    (
        us(stats.renewal_rtt_quantile_ns(0.5)),
        us(stats.renewal_rtt_quantile_ns(0.99)),
        us(max_ns),
    )
}

impl LeasesReport {
    /// The report of every node's answer to `leases`; `None` if the nodes ran without.
    /// `before` are the nodes' answers once the data was loaded, before the workload.
    pub fn of(
        lease_ms: u64,
        before: &[Option<NodeLeases>],
        nodes: &[Option<NodeLeases>],
    ) -> Option<Self> {
        let nodes: Vec<&NodeLeases> = nodes.iter().flatten().collect();
        if nodes.is_empty() {
            return None;
        }
        let mut log2 = vec![0u64; nodes.iter().map(|n| n.renewal_rtt_log2.len()).max()?];
        for n in &nodes {
            for (sum, count) in log2.iter_mut().zip(&n.renewal_rtt_log2) {
                *sum += count;
            }
        }
        let max_ns = nodes.iter().map(|n| n.renewal_rtt_max_ns).max()?;
        let (p50, p99, max) = rtt_us(&log2, max_ns);
        Some(Self {
            lease_ms,
            expirations: nodes.iter().map(|n| n.expirations).sum(),
            expirations_before_workload: before.iter().flatten().map(|n| n.expirations).sum(),
            renewals: nodes.iter().map(|n| n.renewals).sum(),
            suspicions: nodes.iter().map(|n| n.suspicions).sum(),
            formed: nodes.iter().all(|n| n.views_committed > 0),
            reconfigured: nodes.iter().any(|n| n.view_id != 1),
            renewal_rtt_p50_us: p50,
            renewal_rtt_p99_us: p99,
            renewal_rtt_max_us: max,
            realtime: nodes.iter().all(|n| n.realtime),
            memory_locked: nodes.iter().all(|n| n.memory_locked),
            max_wake_late_us: nodes.iter().map(|n| n.max_wake_late_us).max()?,
            faults_minor: nodes.iter().map(|n| n.faults_minor).sum(),
            faults_major: nodes.iter().map(|n| n.faults_major).sum(),
            preempted: nodes.iter().map(|n| n.preempted).sum(),
            removals: nodes.iter().map(|n| n.removals).sum(),
            rejoins: nodes
                .iter()
                .flat_map(|n| {
                    n.rejoins.iter().map(|r| NodeRejoin {
                        node: n.node,
                        rejoin: r.clone(),
                    })
                })
                .collect(),
            nodes: nodes
                .iter()
                .map(|n| {
                    let (p50, p99, max) = rtt_us(&n.renewal_rtt_log2, n.renewal_rtt_max_ns);
                    NodeLeasesReport {
                        node: n.node,
                        expirations: n.expirations,
                        renewals: n.renewals,
                        renewal_rtt_p50_us: p50,
                        renewal_rtt_p99_us: p99,
                        renewal_rtt_max_us: max,
                        realtime: n.realtime,
                        memory_locked: n.memory_locked,
                        max_wake_late_us: n.max_wake_late_us,
                        faults_minor: n.faults_minor,
                        faults_major: n.faults_major,
                        preempted: n.preempted,
                        removals: n.removals,
                        view_id: n.view_id,
                        view_members: n.view_members,
                        views_committed: n.views_committed,
                    }
                })
                .collect(),
        })
    }
}

/// Prints the leases of a run as a table.
pub fn print_leases(leases: &LeasesReport) {
    println!(
        "  leases of {} ms: {} expirations (false positives; {} before the workload), {} \
         removals, {} renewals, renewal round trip p50 {:.0} us, p99 {:.0} us, max {:.0} us{}",
        leases.lease_ms,
        leases.expirations,
        leases.expirations_before_workload,
        leases.removals,
        leases.renewals,
        leases.renewal_rtt_p50_us,
        leases.renewal_rtt_p99_us,
        leases.renewal_rtt_max_us,
        if !leases.formed {
            "; the cluster NEVER FORMED (a view was not committed at every node)"
        } else if leases.reconfigured {
            "; the cluster RECONFIGURED"
        } else {
            ""
        }
    );
    println!(
        "  lease threads: memory locked {}, real-time {}; {} minor and {} major page faults, \
         preempted {} times",
        if leases.memory_locked { "yes" } else { "no" },
        if leases.realtime { "yes" } else { "no" },
        leases.faults_minor,
        leases.faults_major,
        leases.preempted
    );
    println!(
        "  {:>4} {:>11} {:>8} {:>8} {:>10} {:>10} {:>10} {:>8} {:>6} {:>12} {:>7} {:>9} {:>5}",
        "node",
        "expirations",
        "removals",
        "renewals",
        "p50 us",
        "p99 us",
        "max us",
        "realtime",
        "mlock",
        "wake late us",
        "faults",
        "preempted",
        "view"
    );
    for n in &leases.nodes {
        println!(
            "  {:>4} {:>11} {:>8} {:>8} {:>10.0} {:>10.0} {:>10.0} {:>8} {:>6} {:>12} {:>7} {:>9} {:>5}",
            n.node,
            n.expirations,
            n.removals,
            n.renewals,
            n.renewal_rtt_p50_us,
            n.renewal_rtt_p99_us,
            n.renewal_rtt_max_us,
            if n.realtime { "yes" } else { "no" },
            if n.memory_locked { "yes" } else { "no" },
            n.max_wake_late_us,
            n.faults_minor + n.faults_major,
            n.preempted,
            n.view_id
        );
    }
    for r in &leases.rejoins {
        let refill = match r.rejoin.refill_ms {
            Some(ms) => format!(
                "back at full strength {:.0} ms after it ({} objects, {:.1} MB refilled)",
                ms,
                r.rejoin.refill_objects,
                r.rejoin.refill_bytes as f64 / 1e6
            ),
            None => "NOT back at full strength by the end".to_string(),
        };
        println!(
            "  node {} removed in view {} after {:.1} s as a member: new life admitted {:.0} ms \
             later (waited {:.0} ms), {refill}; {} coroutines dropped",
            r.node,
            r.rejoin.removed_in_view,
            r.rejoin.lasted_ms / 1e3,
            r.rejoin.rejoin_ms,
            r.rejoin.backoff_ms,
            r.rejoin.coroutines_dropped
        );
    }
}

/// Runs the benchmark: starts the node processes, runs the workload, checks the data.
pub fn run(options: &ClusterBenchOptions) -> anyhow::Result<ClusterBenchReport> {
    let mut reports = run_points(options, &[options.coroutines])?;
    Ok(reports.pop().expect("one point"))
}

/// Runs the workload once per entry of `coroutines` (coroutines per thread) on one cluster,
/// loaded once, then checks the data: a report per run, each with the checks of the data
/// as they stand after every run.
pub fn run_points(
    options: &ClusterBenchOptions,
    coroutines: &[usize],
) -> anyhow::Result<Vec<ClusterBenchReport>> {
    let config = options.check()?;
    ensure!(
        !coroutines.is_empty() && !coroutines.contains(&0),
        "coroutines per thread must be at least 1"
    );
    let drive = DriveOptions {
        workload: options.workload.clone(),
        // Slots for the largest run.
        coroutines: coroutines
            .iter()
            .copied()
            .max()
            .unwrap_or(options.coroutines),
        seed: options.seed,
        spin_us: options.spin_us,
        yield_while_polling: options.yield_while_polling,
        client_nodes: options.client_nodes,
        loss: options.loss,
        lease_ms: (options.lease_ms > 0).then_some(options.lease_ms),
        tuning: options.tuning,
        no_auth: options.no_auth,
    };
    // Progress goes to stderr, so that stdout holds only the report.
    let started = std::time::Instant::now();
    eprintln!(
        "starting {} node processes and loading the data...",
        options.nodes
    );
    ensure!(
        (options.kill.is_none() && options.pause.is_none()) || coroutines.len() == 1,
        "a kill or a pause is one run: one point only"
    );
    let mut cluster = ProcessCluster::start(&config, &drive)?;
    eprintln!("loaded in {:.1} s", started.elapsed().as_secs_f64());
    let leases_before: Vec<Option<NodeLeases>> = cluster.command_json("leases")?;
    let mut points = Vec::new();
    let mut timeline = None;
    // Per node, everything every run did: what the checks of the data expect.
    let mut all: Vec<RunResult> = Vec::new();
    for &c in coroutines {
        eprintln!(
            "running {c} coroutines per thread: {:.1} s of warm-up, then measuring {:.1} s...",
            options.warmup_s, options.duration_s
        );
        cluster.command(&format!("run {c}"))?;
        std::thread::sleep(Duration::from_secs_f64(options.warmup_s));
        match &options.kill {
            None => {
                cluster.command("window-start")?;
                let window = std::time::Instant::now();
                if let Some(pause) = &options.pause {
                    measure_with_progress(&mut cluster, pause.at_s)?;
                    eprintln!(
                        "pausing node {} for {} ms (SIGSTOP, then SIGCONT)",
                        pause.node, pause.for_ms
                    );
                    cluster.pause(pause.node, Duration::from_millis(pause.for_ms))?;
                }
                let rest = options.duration_s - window.elapsed().as_secs_f64();
                if rest > 0.0 {
                    measure_with_progress(&mut cluster, rest)?;
                }
                cluster.command("window-end")?;
            }
            Some(kill) => timeline = Some(run_kill(&mut cluster, options, &config, kill)?),
        }
        // Killed nodes answer nothing: their results stay empty, in node order.
        let answers: Vec<RunResult> = cluster.command_json("stop")?;
        let mut runs = vec![RunResult::default(); usize::from(options.nodes)];
        for (node, run) in cluster.running().into_iter().zip(answers) {
            runs[usize::from(node)] = run;
        }
        all.resize(runs.len(), RunResult::default());
        for (sum, run) in all.iter_mut().zip(&runs) {
            sum.add_counts(run);
        }
        points.push((c, runs));
    }
    settle(&mut cluster)?;
    eprintln!("checking the data...");
    // Backups apply a commit's records when the coordinator's truncation reaches them,
    // which a quiet coordinator sends within an idle pass (5 ms): on a loaded machine the
    // first look may come before it. Copies still differing after 2 s are reported.
    let mut checks: Vec<CheckResult> = cluster.command_json("check")?;
    let looked = Instant::now();
    while copies_differ(&checks) && looked.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(100));
        checks = cluster.command_json("check")?;
    }
    // While every node still runs: one stopping would end the others' leases at the CM.
    let leases: Vec<Option<NodeLeases>> = cluster.command_json("leases")?;
    let leases = LeasesReport::of(options.lease_ms, &leases_before, &leases);
    let totals: Vec<NodeTotals> = cluster.exit()?;
    Ok(points
        .iter()
        .map(|(c, runs)| {
            let options = ClusterBenchOptions {
                coroutines: *c,
                ..options.clone()
            };
            let mut report = report(
                &options,
                &config,
                runs,
                &all,
                &checks,
                &totals,
                leases.clone(),
            );
            report.timeline = timeline.clone();
            report
        })
        .collect())
}

/// How long the benchmark waits at the end for the new lives of removed nodes to be
/// refilled (their backups copied and counted), so that it reports what a refill costs.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(180);

/// Whether some copy of a table differs from its primary's in the nodes' answers.
fn copies_differ(checks: &[CheckResult]) -> bool {
    let mut primaries = std::collections::HashMap::new();
    for d in checks.iter().flat_map(|c| &c.copies).filter(|d| d.primary) {
        primaries.insert((d.partition, d.table), (d.digest, d.objects));
    }
    checks
        .iter()
        .flat_map(|c| &c.copies)
        .filter(|d| !d.primary)
        .any(|d| {
            primaries
                .get(&(d.partition, d.table))
                .is_some_and(|&p| p != (d.digest, d.objects))
        })
}

/// Waits until every node that replaced a removed life sees the cluster back at full
/// strength (`settled`), or [`SETTLE_TIMEOUT`] passes (the report then says which refill
/// was not done; the checks skip backups still being filled).
fn settle(cluster: &mut ProcessCluster) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        let answers = cluster.command("settled")?;
        if answers.iter().all(|a| a == "yes") {
            return Ok(());
        }
        if !said {
            eprintln!("waiting for the new lives of removed nodes to be refilled...");
            said = true;
        }
        if started.elapsed() >= SETTLE_TIMEOUT {
            eprintln!(
                "the cluster was not back at full strength {} s after the workload",
                SETTLE_TIMEOUT.as_secs()
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The measured window of a run with a kill: a timeline from its start, the kill at its
/// time, then the window's end, and the workload running on after it until every
/// survivor saw the cluster back at full strength (or `rereplication_deadline_s`).
fn run_kill(
    cluster: &mut ProcessCluster,
    options: &ClusterBenchOptions,
    config: &Configuration,
    kill: &Kill,
) -> anyhow::Result<TimelineReport> {
    let length_ms = ((options.duration_s + options.rereplication_deadline_s + 5.0) * 1e3) as u64;
    let start = crate::timeline::unix_ns();
    cluster.command(&format!("timeline {start} {length_ms}"))?;
    cluster.command("window-start")?;
    let window = std::time::Instant::now();
    measure_with_progress(cluster, kill.at_s())?;
    let victims: Vec<u16> = match kill {
        Kill::Node { node, .. } => vec![*node],
        Kill::Domain { domain, .. } => config
            .members()
            .iter()
            .filter(|m| &m.failure_domain == domain)
            .map(|m| m.node)
            .collect(),
        Kill::Cm { .. } => {
            let state = ferrotx_coord::default_state_path(&cluster.config_path());
            let view = ferrotx_coord::FileCoordination::read_path(&state)?
                .context("no view in the coordination file")?;
            vec![view.cm]
        }
    };
    let killed_at = crate::timeline::unix_ns();
    for &node in &victims {
        cluster.kill(node)?;
    }
    let kill_ms = killed_at.saturating_sub(start) as f64 / 1e6;
    eprintln!(
        "killed {} (nodes {victims:?}) {:.3} s into the window",
        kill.describe(),
        kill_ms / 1e3
    );
    let rest = options.duration_s - window.elapsed().as_secs_f64();
    if rest > 0.0 {
        measure_with_progress(cluster, rest)?;
    }
    cluster.command("window-end")?;
    // The workload runs on until every survivor has seen a view at full strength after
    // the kill.
    let deadline = std::time::Instant::now()
        + Duration::from_secs_f64(options.rereplication_deadline_s.max(0.0));
    loop {
        let events: Vec<crate::timeline::NodeEvents> = cluster.command_json("events")?;
        let full = events.iter().all(|e| {
            e.views.iter().any(|v| {
                v.full_strength && v.seen_ms >= kill_ms && v.members < usize::from(options.nodes)
            })
        });
        if full {
            // A little more load after it, for the plot.
            std::thread::sleep(Duration::from_millis(500));
            break;
        }
        if std::time::Instant::now() >= deadline {
            eprintln!(
                "the cluster was not back at full strength {:.0} s after the window",
                options.rereplication_deadline_s
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let survivors = cluster.running();
    let timelines: Vec<NodeTimeline> = cluster.command_json("timeline-get")?;
    Ok(crate::timeline::analyze(
        Some(kill.clone()),
        victims,
        kill_ms,
        survivors,
        &timelines,
    ))
}

/// Waits out the measured window, with a progress bar on stderr (hidden if that is not a
/// terminal) that shows the throughput so far, updated twice a second.
fn measure_with_progress(cluster: &mut ProcessCluster, duration_s: f64) -> anyhow::Result<()> {
    let bar = ProgressBar::new((duration_s * 1e3) as u64).with_style(
        ProgressStyle::with_template("  measuring: [{bar:30}] {msg}")
            .expect("a valid progress template")
            .progress_chars("#."),
    );
    let started = std::time::Instant::now();
    loop {
        let elapsed = started.elapsed().as_secs_f64();
        if elapsed >= duration_s {
            break;
        }
        std::thread::sleep(Duration::from_secs_f64((duration_s - elapsed).min(0.5)));
        let committed: u64 = cluster
            .command("progress")?
            .iter()
            .map(|line| line.parse::<u64>().unwrap_or(0))
            .sum();
        let elapsed = started.elapsed().as_secs_f64().min(duration_s);
        bar.set_position((elapsed * 1e3) as u64);
        bar.set_message(format!(
            "{elapsed:.1} of {duration_s:.1} s, {:.0} K txn/s",
            committed as f64 / elapsed.max(1e-3) / 1e3
        ));
    }
    bar.finish();
    Ok(())
}

/// How many of a small `bench kv` table's keys each node is the primary of (`None` for
/// other workloads and tables of more than [`PRIMARY_KEYS_REPORTED_MAX`] keys).
fn primary_keys(options: &ClusterBenchOptions, config: &Configuration) -> Option<Vec<u64>> {
    let Workload::Kv(kv) = &options.workload else {
        return None;
    };
    if kv.key_count > PRIMARY_KEYS_REPORTED_MAX {
        return None;
    }
    let schema = options.workload.schema();
    let spec = schema.iter().find(|spec| spec.id == TABLE)?;
    let mut counts = vec![0u64; usize::from(options.nodes)];
    for id in 0..kv.key_count {
        let key = ferrotx_store::Key::from(id);
        let partition = config.partition_of_key(spec.partition_key(&key));
        let primary = config.partitions().primary(partition);
        if let Some(count) = counts.get_mut(usize::from(primary)) {
            *count += 1;
        }
    }
    Some(counts)
}

/// Per node: its clients' commits, aborts, throughput and latency inside the window.
fn node_reports(
    options: &ClusterBenchOptions,
    config: &Configuration,
    runs: &[RunResult],
) -> Vec<NodeReport> {
    let committed: u64 = runs.iter().map(|r| r.window_committed).sum();
    let primaries = primary_keys(options, config);
    runs.iter()
        .enumerate()
        .map(|(i, run)| {
            let mut h = new_histogram();
            for &(ns, count) in &run.latency_ns {
                let _ = h.record_n(ns, count);
            }
            let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
            let attempts = run.window_committed + run.window_aborted;
            NodeReport {
                node: i as u16,
                clients: (i as u16) < options.client_nodes,
                committed: run.window_committed,
                aborted: run.window_aborted,
                duration_s: run.window_s,
                throughput_per_s: if run.window_s > 0.0 {
                    run.window_committed as f64 / run.window_s
                } else {
                    0.0
                },
                share: run.window_committed as f64 / committed.max(1) as f64,
                abort_rate: run.window_aborted as f64 / attempts.max(1) as f64,
                latency_us: Latency {
                    p50: us(0.5),
                    p99: us(0.99),
                    p999: us(0.999),
                },
                primary_keys: primaries.as_ref().and_then(|p| p.get(i).copied()),
            }
        })
        .collect()
}

/// The report of one run (`runs`, a result per node), with the checks of the data after
/// every run (`all`, everything each node's runs did).
fn report(
    options: &ClusterBenchOptions,
    config: &Configuration,
    runs: &[RunResult],
    all: &[RunResult],
    checks: &[CheckResult],
    totals: &[NodeTotals],
    leases: Option<LeasesReport>,
) -> ClusterBenchReport {
    let (mut histogram, mut remote) = (new_histogram(), new_histogram());
    for run in runs {
        for &(ns, count) in &run.latency_ns {
            let _ = histogram.record_n(ns, count);
        }
        for &(ns, count) in &run.remote_latency_ns {
            let _ = remote.record_n(ns, count);
        }
    }
    let sum = |f: fn(&RunResult) -> u64| runs.iter().map(f).sum::<u64>();
    let committed = sum(|r| r.window_committed);
    let aborted = sum(|r| r.window_aborted);
    let committed_total = all.iter().map(|r| r.committed).sum::<u64>();
    // A coroutine that never finished (its node stopped serving) counts as an error.
    let errors = all.iter().map(|r| r.errors + r.unfinished).sum::<u64>();
    let unknown = all.iter().map(|r| r.unknown).sum::<u64>();
    let unavailable = all.iter().map(|r| r.unavailable).sum::<u64>();
    // A kill makes transactions refused as unavailable while the cluster reconfigures,
    // and commits cut off whose outcome their client never learnt: expected then.
    let killing = options.kill.is_some();
    // So does a false positive that made the cluster reconfigure (a lease ran out, the CM
    // probed; or it removed a node, which came back as a new life): nothing was killed,
    // so every client's commits are counted, those of coroutines dropped with a removed
    // life included.
    let reconfigured = leases
        .as_ref()
        .is_some_and(|l| l.removals > 0 || l.reconfigured);
    let shipping = match &options.workload {
        Workload::Kv(kv) if kv.ships() => {
            let mut counts = ferrotx_node::ShipStats::default();
            for run in runs {
                counts.add(&run.shipping);
            }
            Some(ShippingReport {
                shipped: counts.shipped,
                operations: counts.operations,
                batches: counts.batches,
                operations_per_batch: counts.operations as f64 / counts.batches.max(1) as f64,
                batch_retries: counts.batch_retries,
                retries_asked: counts.retries_asked,
            })
        }
        _ => None,
    };
    let cpu_s: f64 = runs.iter().map(|r| r.cpu_s).sum();
    let percentiles = |h: &hdrhistogram::Histogram<u64>| {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        Latency {
            p50: us(0.5),
            p99: us(0.99),
            p999: us(0.999),
        }
    };
    // Each node's own window (they differ by the time a command takes to reach them).
    // Nodes killed in the window have none.
    let windows: Vec<f64> = runs
        .iter()
        .map(|r| r.window_s)
        .filter(|&w| w > 0.0)
        .collect();
    let duration_s = windows.iter().sum::<f64>() / windows.len().max(1) as f64;
    let throughput_per_s: f64 = runs
        .iter()
        .filter(|r| r.window_s > 0.0)
        .map(|r| r.window_committed as f64 / r.window_s)
        .sum();
    let per_commit = |n: u64| n as f64 / committed_total.max(1) as f64;

    // Replicas: every copy of a table of a partition has the primary's digest.
    // ((partition, table), primary, (digest, objects), answer's index).
    type Copy = ((u32, u16), bool, (u64, usize), usize);
    let mut copies: Vec<Copy> = checks
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            c.copies
                .iter()
                .map(move |d| ((d.partition, d.table), d.primary, (d.digest, d.objects), i))
        })
        .collect();
    copies.sort_unstable_by_key(|&(p, primary, _, i)| (p, !primary, i));
    let mut replicas_differing = 0;
    let mut without_primary = 0;
    let mut differing = Vec::new();
    for group in copies.chunk_by(|a, b| a.0 == b.0) {
        let primary = group[0];
        for c in group[1..].iter().filter(|c| c.2 != primary.2) {
            replicas_differing += 1;
            differing.push(DifferingCopy {
                partition: c.0.0,
                table: c.0.1,
                answer: c.3,
                objects: c.2.1,
                primary_answer: primary.3,
                primary_objects: primary.2.1,
            });
        }
        without_primary += usize::from(!group[0].1);
    }
    let money: i128 = all.iter().map(|r| r.money).sum();
    let primary_sum = checks.iter().map(|c| c.primary_sum).sum();
    let primary_max = checks.iter().map(|c| c.primary_max).max().unwrap_or(0);
    let primary_missing = checks.iter().map(|c| c.primary_missing).sum();
    let primary_sum_expected = match &options.workload {
        Workload::Bank(bank) => i128::from(bank.accounts) * i128::from(bank.initial_balance),
        Workload::Kv(kv) => i128::from(committed_total) * kv.writes_per_txn() as i128,
        Workload::SmallBank(bank) => bank.initial_total() + money,
        Workload::Tatp(_) | Workload::Latency(_) => 0,
    };
    let max_allowed = match &options.workload {
        Workload::Bank(bank) => bank.accounts.saturating_mul(bank.initial_balance),
        Workload::Kv(_) if !killing => committed_total,
        Workload::Kv(_) => u64::MAX,
        // Balances may go negative (an overdraft), read as huge unsigned numbers.
        Workload::SmallBank(_) | Workload::Tatp(_) | Workload::Latency(_) => u64::MAX,
    };
    let types = options
        .workload
        .types()
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut h = new_histogram();
            let (mut committed, mut succeeded, mut aborted) = (0, 0, 0);
            for run in runs {
                if let Some(t) = run.types.get(i) {
                    committed += t.committed;
                    succeeded += t.succeeded;
                    aborted += t.aborted;
                    for &(ns, count) in &t.latency_ns {
                        let _ = h.record_n(ns, count);
                    }
                }
            }
            TypeReport {
                name: (*name).to_owned(),
                committed,
                succeeded,
                aborted,
                success_rate: succeeded as f64 / committed.max(1) as f64,
                latency_us: percentiles(&h),
            }
        })
        .collect();
    // With a kill, the killed nodes' clients' commits are not counted, and each
    // transaction of unknown outcome may have committed: a kv sum must be at least what
    // the survivors counted (a lost acknowledged write shows), SmallBank's is not
    // checked. Bank transfers conserve money whatever their outcome.
    // With a reconfiguration and no kill, every commit is counted: a kv sum is at least what was
    // counted (a lost acknowledged write shows) and at most that plus what the
    // transactions of unknown outcome may have added; SmallBank's holds exactly if there
    // are none.
    let unknown_writes = match &options.workload {
        Workload::Kv(kv) => i128::from(unknown) * kv.writes_per_txn() as i128,
        _ => 0,
    };
    let sum_ok = match &options.workload {
        Workload::Kv(_) if killing => primary_sum >= primary_sum_expected,
        Workload::SmallBank(_) if killing => true,
        Workload::Kv(_) if reconfigured => {
            primary_sum >= primary_sum_expected
                && primary_sum <= primary_sum_expected + unknown_writes
        }
        Workload::SmallBank(_) if reconfigured && unknown > 0 => true,
        _ => primary_sum == primary_sum_expected,
    };
    let max_allowed = match &options.workload {
        Workload::Kv(_) if reconfigured && !killing => {
            max_allowed.saturating_add(u64::try_from(unknown_writes).unwrap_or(u64::MAX))
        }
        _ => max_allowed,
    };
    let ok = replicas_differing == 0
        && without_primary == 0
        && sum_ok
        && primary_max <= max_allowed
        && primary_missing == 0
        && errors == 0
        && (killing || reconfigured || (unknown == 0 && unavailable == 0));
    ClusterBenchReport {
        options: options.clone(),
        committed,
        aborted,
        duration_s,
        throughput_per_s,
        cpu_s,
        throughput_per_cpu_s: if cpu_s > 0.0 {
            committed as f64 / cpu_s
        } else {
            0.0
        },
        latency_us: percentiles(&histogram),
        remote_latency_us: percentiles(&remote),
        types,
        abort_rate: aborted as f64 / (committed + aborted).max(1) as f64,
        rpcs_per_commit: per_commit(totals.iter().map(|t| t.rpcs).sum()),
        datagrams_per_commit: per_commit(totals.iter().map(|t| t.datagrams_sent).sum()),
        retransmissions: totals.iter().map(|t| t.retransmissions).sum(),
        committed_total,
        checks: Checks {
            replicas_equal: replicas_differing == 0,
            replicas_differing,
            differing,
            without_primary,
            primary_sum,
            primary_sum_expected,
            primary_max,
            primary_missing,
            errors,
            unknown,
            unavailable,
            ok,
        },
        leases,
        nodes: node_reports(options, config, runs),
        shipping,
        timeline: None,
        memory: {
            let rss_bytes = sum(|r| r.rss_peak_bytes);
            let objects = sum(|r| r.objects);
            MemoryReport {
                rss_bytes,
                objects,
                bytes_per_object: rss_bytes as f64 / objects.max(1) as f64,
                store_bytes: sum(|r| r.store_bytes),
            }
        },
    }
}

/// Prints the per-node figures: each node's clients' commits, aborts and latency.
fn print_nodes(nodes: &[NodeReport]) {
    let keys = nodes.iter().any(|n| n.primary_keys.is_some());
    println!(
        "  {:>4} {:>10} {:>10} {:>6} {:>9} {:>7} {:>9} {:>9}{}",
        "node",
        "committed",
        "txn/s",
        "share",
        "aborted",
        "aborts",
        "p50 us",
        "p99 us",
        if keys { "  primary of keys" } else { "" }
    );
    for n in nodes {
        let primary = match n.primary_keys {
            Some(k) => format!("  {k:>15}"),
            None => String::new(),
        };
        if !n.clients {
            println!("  {:>4} {:>10}{primary}", n.node, "no clients");
            continue;
        }
        println!(
            "  {:>4} {:>10} {:>10.0} {:>5.1}% {:>9} {:>6.1}% {:>9.1} {:>9.1}{primary}",
            n.node,
            n.committed,
            n.throughput_per_s,
            n.share * 100.0,
            n.aborted,
            n.abort_rate * 100.0,
            n.latency_us.p50,
            n.latency_us.p99,
        );
    }
}

/// Prints the report as a few lines for people.
pub fn print_table(report: &ClusterBenchReport) {
    let o = &report.options;
    let what = match &o.workload {
        Workload::Kv(kv) => format!(
            "kv: {} keys/txn, write share {}, {} keys of {} B, zipf {}",
            kv.keys_per_txn, kv.write_share, kv.key_count, kv.value_bytes, kv.zipf
        ),
        Workload::Bank(bank) => format!(
            "bank: transfers between {} accounts of {}",
            bank.accounts, bank.initial_balance
        ),
        Workload::SmallBank(bank) => format!(
            "smallbank: {} accounts, {} of them hot for {}% of transactions",
            bank.accounts, bank.hot_accounts, bank.hot_percent
        ),
        Workload::Tatp(tatp) => format!("tatp: {} subscribers", tatp.subscribers),
        Workload::Latency(latency) => format!(
            "latency: reads and writes of {} objects of each size, in turn",
            latency.objects_per_size
        ),
    };
    println!("{what}");
    println!(
        "cluster: {} node processes x {} threads x {} coroutines (on {} of them), {} replicas, \
         UDP loopback",
        o.nodes, o.threads, o.coroutines, o.client_nodes, o.replicas
    );
    println!(
        "  committed {} in {:.1} s = {:.0} txn/s, aborted {} ({:.1}%)",
        report.committed,
        report.duration_s,
        report.throughput_per_s,
        report.aborted,
        report.abort_rate * 100.0
    );
    print_nodes(&report.nodes);
    println!(
        "  cpu {:.2} s (all nodes) = {:.0} txn per cpu-s",
        report.cpu_s, report.throughput_per_cpu_s
    );
    let memory = &report.memory;
    if memory.objects > 0 {
        println!(
            "  memory {:.1} MB resident at peak (all nodes), {} object copies, {:.0} bytes per object",
            memory.rss_bytes as f64 / 1e6,
            memory.objects,
            memory.bytes_per_object
        );
        println!(
            "  store {:.1} MB in records and index slots = {:.0} bytes per object",
            memory.store_bytes as f64 / 1e6,
            memory.store_bytes as f64 / memory.objects as f64
        );
    }
    println!(
        "  latency p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us",
        report.latency_us.p50, report.latency_us.p99, report.latency_us.p999
    );
    println!(
        "  latency of those that made RPCs: p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us",
        report.remote_latency_us.p50, report.remote_latency_us.p99, report.remote_latency_us.p999
    );
    if o.loss > 0.0 {
        println!("  {:.1}% of datagrams dropped on purpose", o.loss * 100.0);
    }
    println!(
        "  {:.2} RPCs and {:.2} datagrams per commit, {} retransmissions",
        report.rpcs_per_commit, report.datagrams_per_commit, report.retransmissions
    );
    if report.types.len() > 1 {
        println!(
            "  {:<22} {:>10} {:>9} {:>8} {:>9} {:>9}",
            "type", "committed", "success", "aborted", "p50 us", "p99 us"
        );
        for t in &report.types {
            println!(
                "  {:<22} {:>10} {:>8.1}% {:>8} {:>9.1} {:>9.1}",
                t.name,
                t.committed,
                t.success_rate * 100.0,
                t.aborted,
                t.latency_us.p50,
                t.latency_us.p99
            );
        }
    }
    if let Some(s) = &report.shipping {
        println!(
            "  shipped to the keys' primaries (whole run): {} operations answered, {} batches \
             ({:.1} operations per commit), {} batch retries at the primaries, {} \"retry\" \
             answers",
            s.shipped, s.batches, s.operations_per_batch, s.batch_retries, s.retries_asked
        );
    }
    if let Some(leases) = &report.leases {
        print_leases(leases);
    }
    let c = &report.checks;
    println!(
        "  checks: {}; replicas equal: {}; sum {} (expected {}); missing {}; errors {}; \
         outcome unknown {}",
        if c.ok { "passed" } else { "FAILED" },
        c.replicas_equal,
        c.primary_sum,
        c.primary_sum_expected,
        c.primary_missing,
        c.errors,
        c.unknown
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::KvWorkload;

    fn options(key_count: u64, client_nodes: u16) -> ClusterBenchOptions {
        ClusterBenchOptions {
            workload: Workload::Kv(KvWorkload {
                keys_per_txn: 1,
                write_share: 1.0,
                key_count,
                value_bytes: 32,
                zipf: 0.0,
                ship: false,
                delete_share: 0.0,
            }),
            nodes: 3,
            replicas: 3,
            threads: 1,
            coroutines: 20,
            partitions_per_node: 4,
            duration_s: 1.0,
            warmup_s: 0.1,
            port_base: 20_000,
            seed: 1,
            spin_us: 200,
            yield_while_polling: true,
            client_nodes,
            loss: 0.0,
            lease_ms: 0,
            tuning: ferrotx_node::LeaseTuning::default(),
            no_auth: false,
            domains: 0,
            kill: None,
            rereplication_deadline_s: 0.0,
            pause: None,
            durability: ferrotx_cluster::DurabilityMode::Memory,
            checkpoint_log_mb: None,
        }
    }

    fn run(committed: u64, aborted: u64, window_s: f64) -> RunResult {
        RunResult {
            window_committed: committed,
            window_aborted: aborted,
            window_s,
            latency_ns: vec![(10_000, committed)],
            ..RunResult::default()
        }
    }

    #[test]
    fn every_hot_key_has_one_primary_and_big_tables_none() {
        let hot = options(16, 3);
        let config = hot.check().unwrap();
        let counts = primary_keys(&hot, &config).unwrap();
        assert_eq!(counts.len(), 3);
        assert_eq!(counts.iter().sum::<u64>(), 16);
        let one = options(1, 3);
        assert_eq!(primary_keys(&one, &config).unwrap().iter().sum::<u64>(), 1);
        let big = options(PRIMARY_KEYS_REPORTED_MAX + 1, 3);
        assert!(primary_keys(&big, &big.check().unwrap()).is_none());
    }

    #[test]
    fn node_reports_split_commits_and_aborts_by_node() {
        let o = options(1, 2);
        let config = o.check().unwrap();
        let nodes = node_reports(
            &o,
            &config,
            &[run(300, 100, 2.0), run(100, 300, 2.0), run(0, 0, 2.0)],
        );
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].throughput_per_s, 150.0);
        assert_eq!(nodes[0].share, 0.75);
        assert_eq!(nodes[0].abort_rate, 0.25);
        assert_eq!(nodes[1].abort_rate, 0.75);
        assert!(nodes[0].clients && nodes[1].clients && !nodes[2].clients);
        assert_eq!(nodes[2].abort_rate, 0.0);
        assert_eq!(
            nodes.iter().map(|n| n.primary_keys.unwrap()).sum::<u64>(),
            1
        );
        assert!((nodes[0].latency_us.p50 - 10.0).abs() < 0.1);
    }
}
