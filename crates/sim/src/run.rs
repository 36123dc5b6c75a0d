//! One simulated run: a workload's clients on a cluster built from a configuration, the
//! faults its seed draws, then the workload's checks and a liveness verdict.
//!
//! The order of a run:
//! 1. draw the [`FaultPlan`] from the seed, for the kinds enabled;
//! 2. build the cluster ([`SimCluster`]) from a `Configuration` with the workload's
//!    schema, set the node clocks, load the initial data;
//! 3. start the workload's clients (coroutines on every worker);
//! 4. run simulated time, applying the plan's events at their instants (every partition
//!    the plan makes it also heals, and every pause ends), until the clients are done,
//!    nothing is left to happen, or the deadline passes;
//! 5. check: the workload's checkers over its history and the final state, and liveness
//!    (clients that never finished are reported, never waited for).

use std::collections::BTreeMap;

use ferrotx_cluster::Configuration;
use ferrotx_node::CoreOptions;
use ferrotx_rpc::Config;
use ferrotx_store::TableSpec;

use crate::cluster::SimCluster;
use crate::faults::{FaultKind, FaultPlan};

/// The simulated configuration's addresses are never bound; any valid port base does.
const PORT_BASE_UNUSED: u16 = 40_000;

/// A workload as the simulator runs it: its schema and data, its clients, its checks.
pub trait Scenario {
    /// Its name (`ferrotx sim --workload NAME`).
    fn name(&self) -> &'static str;
    /// Its tables.
    fn schema(&self) -> Vec<TableSpec>;
    /// Loads the initial data into every copy (before any client runs).
    fn load(&self, cluster: &SimCluster);
    /// Starts its clients as coroutines on the cluster's workers; `seed` draws what they
    /// do. Clients record their history in the scenario.
    fn start_clients(&mut self, cluster: &mut SimCluster, seed: u64);
    /// Checks the history and the final state, once the run is over.
    fn check(&self, cluster: &SimCluster) -> Checked;
}

/// What a scenario's checks found.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    /// Transactions committed.
    pub committed: u64,
    /// Transactions aborted.
    pub aborted: u64,
    /// Transactions whose outcome the client never learned.
    pub indeterminate: u64,
    /// Everything that is wrong; empty when correct.
    pub violations: Vec<String>,
    /// A digest of the recorded history: with the network's, it shows that a seed
    /// replays exactly.
    pub history_digest: u64,
}

/// The shape of a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The seed: everything of the run is drawn from it.
    pub seed: u64,
    /// Nodes.
    pub nodes: u16,
    /// Copies of each partition (f + 1).
    pub replicas: u8,
    /// Worker threads per node.
    pub threads: u16,
    /// Partitions per node.
    pub partitions_per_node: u32,
    /// Coroutine slots per worker.
    pub coroutines: usize,
    /// The fault kinds enabled.
    pub faults: Vec<FaultKind>,
    /// Simulated time within which the plan's timed faults fall.
    pub fault_horizon_ns: u64,
    /// Simulated time after which clients still running are a liveness failure.
    pub deadline_ns: u64,
    /// Records each coordinator thread may keep in one backup's log (small values make
    /// commits wait for log space).
    pub log_records_max: usize,
    /// The faults to inject instead of those drawn from the seed (a scenario written by
    /// hand).
    pub plan: Option<FaultPlan>,
}

impl RunOptions {
    /// The defaults of `ferrotx sim` for `seed`: 3 nodes, 3 replicas, 2 threads of 4
    /// coroutines, 2 partitions per node, every fault kind but crashes.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            nodes: 3,
            replicas: 3,
            threads: 2,
            partitions_per_node: 2,
            coroutines: 4,
            faults: FaultKind::DEFAULT.to_vec(),
            fault_horizon_ns: 20_000_000,
            deadline_ns: 60_000_000_000,
            log_records_max: ferrotx_txn::participant::LOG_RECORDS_MAX,
            plan: None,
        }
    }
}

/// What one run did and found.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// The workload.
    pub workload: &'static str,
    /// The scenario's checks.
    pub checked: Checked,
    /// Clients that never finished, if any, with what was down or cut at the end: a
    /// liveness failure, reported rather than waited for.
    pub liveness: Option<String>,
    /// Faults injected, by kind name.
    pub faults: BTreeMap<&'static str, u64>,
    /// Production fault points reached, with how often each fired.
    pub buggify: BTreeMap<&'static str, u64>,
    /// Simulated time at the end.
    pub simulated_ns: u64,
    /// Digest of every datagram delivered and of the history: equal for two runs of
    /// one seed.
    pub digest: u64,
    /// Commits that waited for log space at a backup.
    pub log_space_waits: u64,
    /// Datagrams cut by partitions.
    pub partitioned: u64,
}

impl RunReport {
    /// Whether the run is correct and live.
    pub fn passed(&self) -> bool {
        self.checked.violations.is_empty() && self.liveness.is_none()
    }
}

/// A digest of anything's debug form, the same in every process and build of one
/// source: FNV-1a.
pub fn digest_of(value: &impl std::fmt::Debug) -> u64 {
    format!("{value:?}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// Runs `scenario` once with `options`.
pub fn run(scenario: &mut dyn Scenario, options: &RunOptions) -> RunReport {
    let mut plan = options.plan.clone().unwrap_or_else(|| {
        FaultPlan::draw(
            options.seed,
            &options.faults,
            options.nodes,
            options.fault_horizon_ns,
        )
    });
    let config = Configuration::local(
        options.nodes,
        options.replicas,
        options.threads,
        options.partitions_per_node,
        PORT_BASE_UNUSED,
    )
    .and_then(|c| c.with_tables(scenario.schema()))
    .expect("a valid simulated configuration");
    let core = CoreOptions {
        coroutines: options.coroutines,
        rpc: Config {
            // Small datagrams, so that messages split into packets and coalescing fills
            // them, as on a real network's MTU.
            datagram_bytes: 1_400,
            rto_min_ns: 200_000,
            suspect_after_ns: 5_000_000,
            ..Config::default()
        },
        log_records_max: options.log_records_max,
    };
    let mut cluster = SimCluster::new(config, core, options.seed, plan.network.clone());
    for (node, clock) in plan.clocks.iter().enumerate() {
        cluster.set_clock(u16::try_from(node).expect("node ids are u16"), *clock);
    }
    scenario.load(&cluster);
    let buggify = plan.buggify.then(|| ferrotx_buggify::enable(options.seed));
    scenario.start_clients(&mut cluster, options.seed);

    let mut now = 0;
    while cluster.coroutines_live() > 0 && now < options.deadline_ns {
        let until = plan
            .next_event_ns()
            .map_or(options.deadline_ns, |at| at.min(options.deadline_ns));
        let reached = cluster.run_until(until);
        if reached < until {
            // Nothing is left to happen before `until`: with no event to come, the
            // clients still running wait for something that never happens.
            if plan.next_event_ns().is_none() {
                now = reached;
                break;
            }
            cluster.sim.network.borrow_mut().advance(until);
        }
        now = until;
        plan.apply_due(now, &mut cluster);
    }
    let live = cluster.coroutines_live();
    let liveness = (live > 0).then(|| {
        let down: Vec<u16> = (0..options.nodes).filter(|&n| !cluster.is_up(n)).collect();
        format!(
            "{live} client coroutines never finished by {:.3} simulated s (nodes down: \
             {down:?}; a node's failure stalls its peers until failure handling exists)",
            now as f64 / 1e9
        )
    });
    let checked = scenario.check(&cluster);
    let network = cluster.sim.network.borrow();
    let counters = network.counters;
    let mut faults = BTreeMap::new();
    for kind in &options.faults {
        let count = match kind {
            FaultKind::Loss => counters.lost,
            FaultKind::Dup => counters.duplicated,
            FaultKind::Reorder => counters.reordered,
            FaultKind::Partition | FaultKind::Pause | FaultKind::Crash => plan.scheduled(*kind),
            FaultKind::Drift => plan
                .clocks
                .iter()
                .filter(|c| c.drift_ppm != 0 || c.offset_ns != 0)
                .count() as u64,
            FaultKind::Buggify => 0,
        };
        faults.insert(kind.name(), count);
    }
    let buggify = buggify.map(|b| b.fired()).unwrap_or_default();
    if options.faults.contains(&FaultKind::Buggify) {
        faults.insert(FaultKind::Buggify.name(), buggify.values().sum());
    }
    let digest = network.digest() ^ checked.history_digest.rotate_left(32);
    let log_space_waits = cluster
        .coordinators()
        .map(|c| c.stats().log_space_waits)
        .sum();
    RunReport {
        seed: options.seed,
        workload: scenario.name(),
        checked,
        liveness,
        faults,
        buggify,
        simulated_ns: cluster.sim.now_ns(),
        digest,
        log_space_waits,
        partitioned: counters.partitioned,
    }
}
