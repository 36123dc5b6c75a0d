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

use ferrotx_cluster::{Configuration, View};
use ferrotx_node::CoreOptions;
use ferrotx_rpc::Config;
use ferrotx_store::TableSpec;

use crate::cluster::{Attack, SimCluster};
use crate::faults::{FaultKind, FaultPlan};
use crate::membership::CONVERGENCE_LEASES;
use crate::plot::{Plot, Situations};

/// Leases a run with membership goes on after the cluster converged (after the last
/// fault), so that every client still waiting gets its answer: transaction recovery
/// decides in a few round trips once the view is committed.
pub const LIVENESS_LEASES: u64 = 5;

/// Leases an attack may lengthen a run by, at most (a trap that springs late).
const ATTACK_LEASES_MAX: u64 = 100;

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
    /// Run membership (leases and reconfiguration) with these options: the cluster
    /// bootstraps through the protocol, the plan's timed faults start once it has, and
    /// `deadline_ns` counts from then. `None`: the static configuration, as before.
    pub membership: Option<ferrotx_membership::Options>,
    /// With membership: tick each node's state machine only when its timeout is due
    /// (see [`crate::membership::MembershipState::strict_ticks`]).
    pub membership_strict_ticks: bool,
    /// With membership: each node's longest install delay, in ns of its clock (a node
    /// past the end has none): how long a node takes to switch its workers to a new view
    /// before it acknowledges it. Each install draws its delay from the seed (see
    /// [`crate::membership::MembershipState::install_delay_max_ns`]). Empty: every node
    /// acknowledges at once.
    pub install_delay_max_ns: Vec<u64>,
    /// With membership: a trap at a fault point of the commit protocol, armed once the
    /// cluster serves, and what happens to the node whose worker reaches it (the
    /// `recovery-*` scenarios).
    pub attack: Option<Attack>,
    /// What the run's clients run, when the scenario name does not say (a `recovery-*`
    /// scenario's workload, drawn from the seed); shown in reports.
    pub detail: Option<String>,
    /// Failure domains: node n in domain `d{n % domains}`, the partition map placed for
    /// them. `None`: each node its own domain.
    pub domains: Option<u16>,
    /// With membership: nodes whose memory budget has a limit of 1 byte, so full from the
    /// first byte they hold. No view may give them a fill or a new copy (checked over
    /// the history), and the end check wants each partition at full strength on the
    /// other members only.
    pub full_nodes: Vec<u16>,
    /// With membership: a fault placed on a cue rather than at a time (see
    /// [`crate::plot`]), armed when the clients start.
    pub plot: Option<Plot>,
    /// Data recovery's pace ([`ferrotx_txn::refill::RefillOptions::pace`]): 1 by default,
    /// so that fills finish within short runs; real nodes' 8 where pacing is attacked.
    pub refill_pace: u64,
    /// The RPC layer's largest retransmission timeout, if not its default (100 ms, ten
    /// simulated leases): scenarios timing what follows a heal set it to a lease, the
    /// share of a lease it is on real nodes.
    pub rto_max_ns: Option<u64>,
    /// The configuration's `[durability] mode`: in `flush` and `sync`, every worker logs
    /// to a simulated disk ([`crate::disk`]); in `sync`, a power cut is checked every
    /// quarter of a millisecond.
    pub durability: ferrotx_cluster::DurabilityMode,
    /// A deliberate break for the checker's own test: the simulated disks answer as if
    /// every record were durable at once (acknowledging before the sync).
    pub disk_lie: bool,
    /// A deliberate break: a node restarted from disk (`--faults power`) loads nothing.
    pub restore_nothing: bool,
    /// `flush` and `sync` modes: a node starts a checkpoint round once its logs grew
    /// this much since the last ([`ferrotx_txn::checkpoint`]; 0: never). Small by
    /// default, so that runs checkpoint and truncate many times.
    pub checkpoint_log_bytes: u64,
    /// A deliberate break: checkpoints copy without waiting for what was in doubt to
    /// settle ([`ferrotx_txn::checkpoint::CheckpointOptions::break_unsettled`]).
    pub checkpoint_unsettled: bool,
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
            membership: None,
            membership_strict_ticks: false,
            install_delay_max_ns: Vec::new(),
            attack: None,
            detail: None,
            domains: None,
            full_nodes: Vec::new(),
            plot: None,
            refill_pace: 1,
            rto_max_ns: None,
            durability: ferrotx_cluster::DurabilityMode::Memory,
            disk_lie: false,
            restore_nothing: false,
            checkpoint_log_bytes: 16 << 10,
            checkpoint_unsettled: false,
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
    /// Operations shipped to their primary that came back with an outcome (the nodes up
    /// at the end).
    pub shipped: u64,
    /// Batches the primaries committed them in (the nodes up at the end).
    pub ship_batches: u64,
    /// Shipped requests answered from a remembered result: asked again after a
    /// configuration change cut the first one off.
    pub ship_answered_again: u64,
    /// Datagrams cut by partitions.
    pub partitioned: u64,
    /// Checkpoint rounds completed and abandoned, over every node life
    /// ([`ferrotx_txn::checkpoint`]).
    pub checkpoints: ferrotx_txn::checkpoint::CheckpointStats,
    /// Whole-cluster power cuts, power-ons that found a node's disk damaged (it rejoined
    /// refilled), and those whose damaged node held a partition's only copy (loaded).
    pub power_cuts: u64,
    pub damaged_disks: u64,
    pub damage_refused: u64,
    /// What membership did and its checkers found, when the run had membership.
    pub membership: Option<MembershipReport>,
    /// Transaction-state recovery's counters, summed over every worker of the run: the
    /// nodes up at the end and the last counters of every node life that ended.
    pub recovery: ferrotx_txn::participant::RecoveryStats,
    /// The run's attack (a trap at a commit point) as it happened, and the workload of a
    /// `recovery-*` scenario.
    pub attack: Vec<String>,
}

/// Membership in one run.
#[derive(Clone, Debug, Default)]
pub struct MembershipReport {
    /// Simulated time the bootstrap took (every node serving in the first view).
    pub bootstrap_ns: u64,
    /// Views stored at the coordination service, as (id, members, CM).
    pub views: Vec<(u64, Vec<u16>, u16)>,
    /// Nodes removed (and stopped): (simulated time, node, view without it).
    pub removed: Vec<(u64, u16, u64)>,
    /// Simulated time from the end of the last fault until every live node served in
    /// the latest view (`None`: never within the run).
    pub converged_after_ns: Option<u64>,
    /// Simulated time from the end of the last fault until the views stored were at
    /// full strength for good (each partition with a copy has its replicas, or every
    /// member, and none is being filled), 0 if they already were; `None` if the last is
    /// not.
    pub strength_after_ns: Option<u64>,
    /// What the coordination service's faults did ([`FaultKind::Coord`]), if any ran.
    pub coord: Option<crate::membership::CoordCounts>,
    /// Client coroutines still running at the end of a run that went beyond f (a
    /// partition with no copy left, or half the view down): reported, not failed. Within
    /// f they are a liveness failure.
    pub stuck: usize,
    /// The workload's own checkers' findings in runs beyond f (a partition lost every
    /// copy, or half the view is down for good): data is gone, so they are reported, not
    /// failed. Within f they fail the run.
    pub excused: Vec<String>,
    /// The membership checkers' violations (a failed seed).
    pub violations: Vec<String>,
    /// A panic that ended the run early, with where it happened: it fails the seed.
    pub panic: Option<String>,
    /// Commits of a view older than one committed before (see
    /// [`crate::membership::MembershipState::stale_commits`]).
    pub stale_commits: Vec<String>,
    /// Partitions with no copy left in the latest view (every node holding one was
    /// removed or crashed: their data is gone until data recovery exists).
    pub lost_partitions: usize,
    /// Removals of members the plan never struck (never crashed, paused or cut off on
    /// the smaller side of a partition): (node, view without it). A healthy member
    /// removed is a membership bug (see `tests/membership_seeds.rs`).
    pub healthy_removed: Vec<(u16, u64)>,
    /// Whether at the end at least half of the latest view's members are down (crashed,
    /// or a later life): without a majority no view can follow, as FaRM intends.
    pub majority_down: bool,
    /// Simulator steps taken.
    pub steps: u64,
    /// Hints of newer configurations the workers gave membership.
    pub hints: u64,
    /// Data recovery: backups views gave nodes to fill, and fills a later view counted
    /// as copies.
    pub fills_assigned: u64,
    /// See `fills_assigned`.
    pub fills_counted: u64,
    /// Fills given to a partition that was not short of copies: a copy moving into a
    /// failure domain that held none of the partition's (a domain back after it failed).
    pub moves: u64,
    /// What the run went through: its plot's strike, suspended lives readmitted, removed
    /// processes back as new lives and refilled (see [`Situations`]).
    pub situations: Situations,
}

impl RunReport {
    /// Whether the run is correct and live.
    pub fn passed(&self) -> bool {
        self.checked.violations.is_empty()
            && self.liveness.is_none()
            && self
                .membership
                .as_ref()
                .is_none_or(|m| m.violations.is_empty())
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

/// The key and cluster id a simulated cluster seals its datagrams with, from its seed. Its
/// nodes share the process's random bits too (they run in one process): their senders'
/// salts differ by id and incarnation.
pub fn sim_auth(seed: u64) -> ferrotx_wire::auth::Auth {
    use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys};
    let mut material = [0u8; KEY_BYTES];
    material[..8].copy_from_slice(&seed.to_le_bytes());
    material[8] = 0x5e;
    let mut cluster = [0u8; 16];
    cluster[..8].copy_from_slice(&(!seed).to_le_bytes());
    let mut random = [0u8; 16];
    random[..8].copy_from_slice(&seed.rotate_left(17).to_le_bytes());
    Auth::new(
        Keys::one(Key::from_material(&material)),
        ClusterId(cluster),
        random,
    )
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
    .and_then(|c| match options.domains {
        Some(domains) => c.with_failure_domains(|n| format!("d{}", n % domains.max(1))),
        None => Ok(c),
    })
    .map(|c| {
        c.with_durability(ferrotx_cluster::Durability {
            mode: options.durability,
            ..ferrotx_cluster::Durability::default()
        })
    })
    .expect("a valid simulated configuration");
    let core = CoreOptions {
        coroutines: options.coroutines,
        rpc: Config {
            // Small datagrams, so that messages split into packets and coalescing fills
            // them, as on a real network's MTU.
            datagram_bytes: 1_400,
            rto_min_ns: 200_000,
            rto_max_ns: options.rto_max_ns.unwrap_or(Config::default().rto_max_ns),
            suspect_after_ns: 5_000_000,
            // Every datagram sealed and opened, as on real nodes, with a key and a
            // cluster id drawn from the seed.
            auth: Some(sim_auth(options.seed)),
            ..Config::default()
        },
        log_records_max: options.log_records_max,
        // Redis commands whose keys share a primary are shipped there, as on real nodes.
        procedures: ferrotx_redis_exec::KvTable::find(&config)
            .map(ferrotx_redis_exec::procedures)
            .unwrap_or_default(),
        // Batches side by side whenever a request waits, so that the simulator attacks
        // what keeps concurrent batches apart (their keys, a request asked again).
        ship_executors: ferrotx_txn::ship::Executors {
            count: 3,
            parallel_after: 1,
        },
        // Small pages, often: a fill spans many steps, so that commits, failures and
        // view changes land in the middle of it.
        refill: ferrotx_txn::refill::RefillOptions {
            objects_per_fetch: 5,
            bytes_per_fetch: 256,
            interval_ns: 200_000,
            pace: options.refill_pace,
            last_copy_speedup: 4,
        },
        // Small steps, often: rounds land between commits, failures and view changes.
        reclaim: ferrotx_txn::reclaim::ReclaimOptions {
            records_per_step: 16,
            interval_ns: 2_000_000,
            busy_interval_ns: 500_000,
        },
        // Checkpoints of small pages, often (`flush` and `sync` modes): rounds land
        // between commits, failures, view changes and power cuts, and restarts load
        // from them.
        checkpoint: ferrotx_txn::checkpoint::CheckpointOptions {
            log_bytes: options.checkpoint_log_bytes,
            poll_ns: 2_000_000,
            page_bytes: 512,
            round_timeout_ns: 300_000_000,
            break_unsettled: options.checkpoint_unsettled,
        },
    };
    // A crash loses the node's memory: only membership (a new life, data recovery) makes
    // that a fault the cluster survives, so crash plans always run with it. (Restarting a
    // crashed node empty as the same member tested nothing real.)
    let membership = options.membership.or_else(|| {
        options
            .faults
            .iter()
            .any(|k| matches!(k, FaultKind::Crash | FaultKind::Power))
            .then(crate::membership::default_options)
    });
    if let Some(membership) = membership {
        return run_with_membership(scenario, options, plan, config, core, membership);
    }
    let mut cluster = SimCluster::new(config, core, options.seed, plan.network.clone());
    if let Some(disks) = cluster.disks.as_mut() {
        disks.set_lie(options.disk_lie);
    }
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
    let mut checked = scenario.check(&cluster);
    checked.violations.append(&mut cluster.disk_violations);
    finish(
        scenario, options, &plan, &cluster, checked, liveness, buggify, None,
    )
}

/// A run with membership: bootstrap through the protocol, then the workload under the
/// plan's faults (shifted to start once the cluster serves), with the membership
/// checkers at every step and at the end.
fn run_with_membership(
    scenario: &mut dyn Scenario,
    options: &RunOptions,
    mut plan: FaultPlan,
    config: Configuration,
    core: CoreOptions,
    membership: ferrotx_membership::Options,
) -> RunReport {
    let lease = membership.lease_ns;
    let mut cluster = SimCluster::with_membership(
        config,
        core,
        options.seed,
        plan.network.clone(),
        &plan.clocks,
        membership,
    );
    for &node in &options.full_nodes {
        cluster.set_memory_limit(node, 1);
    }
    if let Some(disks) = cluster.disks.as_mut() {
        disks.set_lie(options.disk_lie);
    }
    cluster.restore_nothing = options.restore_nothing;
    let state = cluster.membership.as_mut().expect("membership runs");
    state.strict_ticks = options.membership_strict_ticks;
    state.delay_installs(options.install_delay_max_ns.clone(), options.seed);
    if let Some(unknown) = plan.coord {
        state.coord_faults(unknown, options.seed);
    }
    let mut report = MembershipReport::default();
    // Bootstrap: every node joins, the node of lowest id swaps in the first view, every
    // node installs it and serves. Bounded by simulated time.
    let mut now = 0;
    while !cluster.converged() && now < 100 * lease && !cluster.out_of_steps() {
        now += lease / 10;
        cluster.run_until(now);
    }
    report.bootstrap_ns = now;
    let bootstrapped = cluster.converged();
    let mut liveness = None;
    let buggify = plan.buggify.then(|| ferrotx_buggify::enable(options.seed));
    let mut stuck = 0;
    let mut live = 0;
    let mut why = "";
    if bootstrapped {
        scenario.load(&cluster);
        // Loaded data is on disk before any client starts.
        let now_ns = cluster.sim.now_ns();
        if let Some(disks) = cluster.disks.as_mut() {
            disks.sync_all(now_ns);
        }
        if let Some(attack) = options.attack.clone() {
            cluster.arm(attack);
        }
        scenario.start_clients(&mut cluster, options.seed);
        plan.delay(now);
        let faults_over = plan.last_event_ns().unwrap_or(now).max(now);
        let state = cluster.membership.as_mut().expect("membership runs");
        state.faults_over_ns = Some(faults_over);
        let start = now;
        if let Some(plot) = options.plot.clone() {
            cluster.set_plot(plot, start);
        }
        // The run lasts the options' deadline at least, and always until the cluster had
        // CONVERGENCE_LEASES to converge after the last fault, then LIVENESS_LEASES more
        // for every client to get its answer. An attack's trap moves the last fault on.
        let bounds = |cluster: &SimCluster| {
            let over = cluster
                .membership
                .as_ref()
                .and_then(|s| s.faults_over_ns)
                .unwrap_or(start);
            let converge_by = over.saturating_add(CONVERGENCE_LEASES * lease);
            let mut deadline = (start + options.deadline_ns)
                .max(converge_by.saturating_add(LIVENESS_LEASES * lease))
                .min(start + options.deadline_ns + ATTACK_LEASES_MAX * lease);
            // Beyond f (a partition lost every copy to crashes), clients waiting on it wait
            // for ever: they get LIVENESS_LEASES once the cluster had its time to converge,
            // and are reported stuck.
            if cluster
                .membership
                .as_ref()
                .is_some_and(|s| s.lost_partitions() > 0)
            {
                deadline = deadline.min(converge_by.saturating_add(LIVENESS_LEASES * lease));
            }
            (converge_by, deadline)
        };
        let ran = catch_panic(|| {
            loop {
                let (converge_by, deadline) = bounds(&cluster);
                if !((cluster.coroutines_live() > 0 || now <= converge_by)
                    && now < deadline
                    && !cluster.out_of_steps())
                {
                    break;
                }
                let until = plan.next_event_ns().map_or(deadline, |at| at.min(deadline));
                let until = if now <= converge_by {
                    until.min(converge_by + 1)
                } else {
                    until
                };
                let reached = cluster.run_until(until);
                if reached < until && !cluster.out_of_steps() {
                    // Nothing is left to happen before `until` (every node down, waiting
                    // for the power to come back): time moves on to it.
                    let mut network = cluster.sim.network.borrow_mut();
                    let at = until.max(network.now_ns());
                    network.advance(at);
                    drop(network);
                    now = at.max(now);
                } else {
                    now = reached.max(now);
                }
                if now >= until {
                    plan.apply_due(now, &mut cluster);
                }
            }
        });
        if let Err(panic) = ran {
            report.panic = Some(panic);
        }
        let state = cluster.membership.as_ref().expect("membership runs");
        let faults_over = state.faults_over_ns.unwrap_or(faults_over);
        report.converged_after_ns = state.converged_ns.map(|t| t.saturating_sub(faults_over));
        live = cluster.coroutines_live();
        // Data recovery: once the clients are done and the faults over, every partition
        // gets back to its full count of copies, all equal (checked below).
        let settle_by = now + SETTLE_LEASES * lease;
        while report.panic.is_none()
            && full_strength(&cluster).is_err()
            && now < settle_by
            && !cluster.out_of_steps()
        {
            let until = (now + lease / 4).min(settle_by);
            if let Err(panic) = catch_panic(|| {
                cluster.run_until(until);
            }) {
                report.panic = Some(panic);
            }
            now = until;
        }
        why = if cluster.out_of_steps() {
            "the step bound was reached"
        } else {
            "the deadline passed"
        };
    }
    let out_of_steps = cluster.out_of_steps();
    // A cluster restarting from its disks waits for every node of the file: one crashed
    // for good in the meantime keeps it down (beyond f, below).
    let restart_waits_for_a_dead_node = cluster
        .membership
        .as_ref()
        .and_then(|s| s.coordination.current())
        .is_some_and(|v| v.is_ended_on_disk())
        && (0..cluster.node_count()).any(|n| !cluster.is_up(n));
    let state = cluster.membership.as_mut().expect("membership runs");
    if let Some(panic) = &report.panic {
        state.violation(format!("panic: {panic}"));
    } else if !bootstrapped {
        state.violation(format!(
            "the cluster did not bootstrap (every node serving in the first view) within {} leases",
            now / lease
        ));
    } else if report
        .converged_after_ns
        .is_none_or(|t| t > CONVERGENCE_LEASES * lease)
        && !restart_waits_for_a_dead_node
    {
        state.violation(format!(
            "(c) live nodes did not all serve in the latest view within {CONVERGENCE_LEASES} leases of the last fault (converged after {:?} ns)",
            report.converged_after_ns
        ));
    }
    if out_of_steps {
        state.violation(format!(
            "the run reached the bound of {} simulator steps at {now} ns",
            state.steps_max
        ));
    }
    state.check_history();
    for what in std::mem::take(&mut cluster.disk_violations) {
        state.violation(what);
    }
    for what in placed_on_full(&state.history(), &options.full_nodes) {
        state.violation(what);
    }
    let state = cluster.membership.as_ref().expect("membership runs");
    report.coord = state.coord.as_ref().map(|c| c.counts);
    report.strength_after_ns = strength_since(&state.history(), &state.stored_at, options.replicas)
        .map(|t| t.saturating_sub(state.faults_over_ns.unwrap_or(0)));
    report.views = state
        .history()
        .iter()
        .map(|v| (v.id, v.members.iter().map(|m| m.node).collect(), v.cm))
        .collect();
    report.removed = state
        .removed
        .iter()
        .map(|&(t, n, _, v)| (t, n, v))
        .collect();
    report.violations = state.violations.clone();
    if state.violations_count > state.violations.len() as u64 {
        report
            .violations
            .push(format!("... {} violations in all", state.violations_count));
    }
    report.steps = state.steps;
    report.stale_commits = state.stale_commits.clone();
    if let Some(current) = state.coordination.current() {
        // No majority can answer a probe (membership's rule: of the view's members' nodes,
        // any life, or of the configuration's nodes): no view can follow.
        let up = |node: u16| cluster.is_up(node);
        let of_view = current.members.iter().filter(|m| up(m.node)).count();
        let of_file = (0..cluster.node_count()).filter(|&n| up(n)).count();
        report.majority_down = 2 * of_view <= current.members.len()
            && 2 * of_file <= usize::from(cluster.node_count());
        // A cluster restarting from its disks waits for every node of the file (each
        // holds copies only its disk has): one down for good keeps it down, as FaRM's
        // rule keeps a cluster without a majority down. Beyond f.
        if current.is_ended_on_disk() && of_file < usize::from(cluster.node_count()) {
            report.majority_down = true;
        }
    }
    let mut struck = plan.struck_nodes(options.nodes);
    struck.extend(cluster.attack_struck.iter().copied());
    let history = state.history();
    for w in history.windows(2) {
        for m in &w[0].members {
            if !w[1].is_member(m.node, m.incarnation) && !struck.contains(&m.node) {
                report.healthy_removed.push((m.node, w[1].id));
            }
        }
    }
    report.lost_partitions = state.lost_partitions();
    report.situations = cluster.situations.clone();
    report.situations.from_history(&history, &state.removed);
    for w in history.windows(2) {
        for (p, n) in w[1].fills() {
            let new = !w[0].filling(p).contains(&n);
            report.fills_assigned += u64::from(new);
            let want = usize::from(cluster.config().replicas()).min(w[1].members.len());
            report.moves += u64::from(new && w[1].copies[p as usize].len() >= want);
        }
        for (p, n) in w[0].fills() {
            report.fills_counted += u64::from(w[1].copies[p as usize].contains(&n));
        }
    }
    report.hints = state.hints;
    // Beyond f: a partition lost every copy, or half the view is down for good. Data is
    // gone or no view can follow, as FaRM intends: the workload's findings and clients
    // still waiting are reported, not failed. Within f (any number of members lost and
    // replaced one at a time), recovery must leave every checker satisfied and every
    // client answered.
    let beyond_f = report.lost_partitions > 0 || report.majority_down;
    if live > 0 {
        if beyond_f {
            stuck = live;
        } else {
            let down: Vec<u16> = (0..options.nodes).filter(|&n| !cluster.is_up(n)).collect();
            liveness = Some(format!(
                "{live} client coroutines never finished by {:.3} simulated s ({why}; nodes down: {down:?}; within f; at {:?})",
                now as f64 / 1e9,
                cluster.coroutines_live_at()
            ));
        }
    }
    report.stuck = stuck;
    if bootstrapped
        && report.panic.is_none()
        && !beyond_f
        && !out_of_steps
        && let Err(short) = full_strength(&cluster)
    {
        let state = cluster.membership.as_mut().expect("membership runs");
        state.violation(format!(
            "(d) not back to full strength {SETTLE_LEASES} leases after the clients finished: {short}"
        ));
        report.violations = state.violations.clone();
    }
    let mut checked = if bootstrapped && report.panic.is_none() {
        scenario.check(&cluster)
    } else {
        Checked::default()
    };
    if beyond_f {
        report.excused = std::mem::take(&mut checked.violations);
    }
    // A node that could not replay its disk at a power-on started empty: never excused.
    checked.violations.extend(
        cluster
            .restore_failures
            .iter()
            .map(|e| format!("restore: {e}")),
    );
    finish(
        scenario,
        options,
        &plan,
        &cluster,
        checked,
        liveness,
        buggify,
        Some(report),
    )
}

/// Fills and new copies that `history` (views in id order) gives one of `full` (nodes
/// always full: their memory limit is 1 byte): a fill on one, or a partition whose copies
/// on one (the same life) are more than in the view before.
pub fn placed_on_full(history: &[View], full: &[u16]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, view) in history.iter().enumerate() {
        for (p, n) in view.fills() {
            if full.contains(&n) {
                found.push(format!(
                    "view {} has node {n}, whose memory is full, fill partition {p}",
                    view.id
                ));
            }
        }
        let Some(before) = i.checked_sub(1).map(|j| &history[j]) else {
            continue;
        };
        for &n in full {
            let Some(life) = view.incarnation(n) else {
                continue;
            };
            for (p, copies) in view.copies.iter().enumerate() {
                let had = before.is_member(n, life) && before.copies[p].contains(&n);
                if copies.contains(&n) && !had {
                    found.push(format!(
                        "view {} gives node {n}, whose memory is full, a new copy of partition {p}",
                        view.id
                    ));
                }
            }
        }
    }
    found
}

/// When the views stored (`history`, stored at the times of `stored_at`) became at
/// full strength for good: copies of each partition that has any on `replicas` nodes (or
/// every member), none being filled. `None` if the last view is not.
fn strength_since(history: &[View], stored_at: &[(u64, u64)], replicas: u8) -> Option<u64> {
    let mut since = None;
    for &(at, id) in stored_at {
        let Some(view) = history.iter().find(|v| v.id == id) else {
            continue;
        };
        let want = usize::from(replicas).min(view.members.len());
        let strong = view.fills().next().is_none()
            && view.copies.iter().all(|c| c.is_empty() || c.len() >= want);
        since = if strong { since.or(Some(at)) } else { None };
    }
    since
}

/// Leases a run with membership gets, after its clients finished, for data recovery to
/// bring every partition back to its full count of equal copies.
pub const SETTLE_LEASES: u64 = 100;

/// Whether every partition has its full count of copies (the replicas asked for, or every
/// member if fewer; members with a memory limit, which the scenarios set only to keep
/// them full, count only where they hold a copy already), none being filled, its copies
/// in as many failure domains as the members allow, and every copy equal (the digest of
/// each table); else what is short.
pub fn full_strength(cluster: &SimCluster) -> Result<(), String> {
    let state = cluster.membership.as_ref().expect("membership runs");
    let Some(view) = state.coordination.current() else {
        return Err("no view".into());
    };
    let config = cluster.config();
    let limited = cluster.memory_limited();
    let room = view
        .members
        .iter()
        .filter(|m| !limited.contains(&m.node))
        .count();
    let domain = |n: u16| config.member(n).map(|m| m.failure_domain.as_str());
    let domains: std::collections::BTreeSet<_> =
        view.members.iter().map(|m| domain(m.node)).collect();
    for (p, copies) in view.copies.iter().enumerate() {
        let p = p as u32;
        let on_limited = copies.iter().filter(|n| limited.contains(n)).count();
        let want = usize::from(config.replicas()).min(room + on_limited);
        if copies.len() < want || !view.filling(p).is_empty() {
            return Err(format!(
                "partition {p} has copies on {copies:?} and fills {:?} in view {}, {want} wanted",
                view.filling(p),
                view.id
            ));
        }
        let spread: std::collections::BTreeSet<_> = copies.iter().map(|&n| domain(n)).collect();
        if spread.len() < copies.len().min(domains.len()) {
            return Err(format!(
                "partition {p} has copies on {copies:?} in {} failure domains of the {} with members, in view {}",
                spread.len(),
                domains.len(),
                view.id
            ));
        }
        let held = cluster.copies_of(ferrotx_store::PartitionId(p));
        if held.len() != copies.len() {
            return Err(format!(
                "partition {p}: {} of its {} copies are on live nodes",
                held.len(),
                copies.len()
            ));
        }
        for table in config.tables() {
            let digests: Vec<_> = held
                .iter()
                .map(|(node, _, copy)| (*node, copy.digest(table.id)))
                .collect();
            if digests.windows(2).any(|w| w[0].1 != w[1].1) {
                return Err(format!(
                    "partition {p} table {}: copies differ (node, (digest, objects)): {digests:?}",
                    table.id.0
                ));
            }
        }
    }
    Ok(())
}

thread_local! {
    static CAPTURING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `body`, turning a panic into its message and location (not printed).
fn catch_panic(body: impl FnOnce()) -> Result<(), String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CAPTURING.with(std::cell::Cell::get) {
                let location = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{message} at {location}")));
            } else {
                previous(info);
            }
        }));
    });
    CAPTURING.with(|c| c.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    CAPTURING.with(|c| c.set(false));
    result.map_err(|_| {
        LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| "a panic".to_string())
    })
}

/// The report of a run once its checks are done.
#[allow(clippy::too_many_arguments)]
fn finish(
    scenario: &dyn Scenario,
    options: &RunOptions,
    plan: &FaultPlan,
    cluster: &SimCluster,
    checked: Checked,
    liveness: Option<String>,
    buggify: Option<ferrotx_buggify::Enabled>,
    membership: Option<MembershipReport>,
) -> RunReport {
    let network = cluster.sim.network.borrow();
    let counters = network.counters;
    let mut faults = BTreeMap::new();
    for kind in &options.faults {
        let count = match kind {
            FaultKind::Loss => counters.lost,
            FaultKind::Dup => counters.duplicated,
            FaultKind::Reorder => counters.reordered,
            FaultKind::Partition
            | FaultKind::Pause
            | FaultKind::Crash
            | FaultKind::Coord
            | FaultKind::Power => plan.scheduled(*kind),
            FaultKind::Drift => plan
                .clocks
                .iter()
                .filter(|c| c.drift_ppm != 0 || c.offset_ns != 0)
                .count() as u64,
            FaultKind::Buggify => 0,
            FaultKind::Corrupt => counters.corrupted,
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
    let shipped = cluster.coordinators().map(|c| c.stats().shipped).sum();
    let ship_batches = cluster.coordinators().map(|c| c.stats().ship_batches).sum();
    let ship_answered_again = cluster
        .coordinators()
        .map(|c| c.stats().ship_answered_again)
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
        shipped,
        ship_batches,
        ship_answered_again,
        partitioned: counters.partitioned,
        checkpoints: cluster.checkpoint_stats(),
        power_cuts: cluster.power_cuts,
        damaged_disks: cluster.damaged_disks,
        damage_refused: cluster.damage_refused,
        membership,
        recovery: cluster.recovery_stats(),
        attack: options
            .detail
            .iter()
            .cloned()
            .chain(cluster.attack_log.iter().cloned())
            .collect(),
    }
}
