//! A whole cluster of real node cores in one thread: built from a [`Configuration`], so
//! the simulator runs the placement, key hash, locality hints and partition map that
//! production runs, over the simulated network and clocks; nodes can be paused, crashed
//! (their memory is gone) and restarted as new incarnations.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_cluster::{Configuration, CoordinationError, CoordinationService, View, ViewMember};
use ferrotx_exec::Co;
use ferrotx_membership::{Action, Membership, Options, Phase};
use ferrotx_node::{ClusterPlacement, CoreOptions, CoreWorker, NodeCore};
use ferrotx_rpc::Event;
use ferrotx_store::{Epoch, Key, Partition, PartitionId, TableId};
use ferrotx_transport::Transport;
use ferrotx_txn::coordinator::{Coordinator, Placement};
use ferrotx_txn::participant::{Participant, RecoveryStats, Role};
use ferrotx_wire::EndpointId;
use rand::Rng;

use crate::faults::FaultEvent;
use crate::membership::{CoordCall, MembershipState, lease_endpoint};
use crate::network::{Faults, SimNetwork};
use crate::plot::{Cue, Plot, PlotState, Situations, Strike};
use crate::simulator::{NodeClock, Simulator};

/// One node's life in the simulation.
struct SimNode {
    /// Its partitions and the way to build its workers; `None` while crashed.
    core: Option<NodeCore>,
    /// Its workers' coordinators and participants, in thread order (empty while crashed).
    coordinators: Vec<Rc<Coordinator>>,
    participants: Vec<Rc<RefCell<Participant>>>,
    /// Lives so far (the first start is incarnation 1).
    incarnation: u64,
    /// Whether the process runs (with membership, its workers exist only once its first
    /// view is installed).
    up: bool,
    /// Its membership state machine, when the cluster runs membership.
    membership: Option<Membership>,
    /// The fills last reported to its membership: view id and fills done then.
    fills_reported: (u64, usize),
    /// Its memory limit in bytes, set on the memory budget of each of its lives' cores
    /// (0: none).
    memory_limit: u64,
    /// What this life loaded from its disk at a power-on, for its first view's copies
    /// and its participants (`None` otherwise).
    restored: Option<ferrotx_node::restore::Restored>,
}

/// How far apart in simulated time `sync` mode's power cut is checked
/// ([`SimCluster::power_cut_check`]): about a sync's length, so that most of the windows
/// between a record's write and its sync are looked into.
const POWER_CUT_PROBE_NS: u64 = 250_000;

/// A simulated cluster of every member of a configuration.
pub struct SimCluster {
    /// The simulator: workers, network, clocks, pauses.
    pub sim: Simulator,
    config: Arc<Configuration>,
    /// The configuration's placement, as every node's coordinator has it.
    placement: ClusterPlacement,
    options: CoreOptions,
    nodes: Vec<SimNode>,
    /// Crashes so far.
    pub crashes: u64,
    /// Restarts so far.
    pub restarts: u64,
    /// Whole-cluster power cuts so far, and the nodes whose disks could not be replayed
    /// at a power-on (each a finding: a node must never start empty over its data).
    pub power_cuts: u64,
    /// Checkpoint counters of node lives that ended.
    retired_checkpoints: ferrotx_txn::checkpoint::CheckpointStats,
    pub restore_failures: Vec<String>,
    /// Power-ons that found a node's disk damaged with its copies covered by others
    /// (the node rejoined as a new life), and those whose damaged node held the only
    /// copy of a partition (a real node refuses to start; loaded whole here).
    pub damaged_disks: u64,
    pub damage_refused: u64,
    /// Nodes whose damaged disks keep them down until the cluster runs again.
    damaged_waiting: Vec<u16>,
    /// A break for tests: a node restarted from disk loads nothing (it serves its
    /// partitions before their newest copies are back).
    pub restore_nothing: bool,
    /// Pauses so far.
    pub pauses: u64,
    /// Membership, when the cluster runs it ([`SimCluster::with_membership`]).
    pub membership: Option<MembershipState>,
    /// Recovery counters of the workers of node lives that ended (crashed or stopped).
    retired_recovery: RecoveryStats,
    /// LOCKs refused for memory by node lives that ended.
    retired_locks_refused_memory: u64,
    /// The attack of a `recovery-*` scenario: what to do when a trap springs.
    attack: Option<Attack>,
    /// The trap armed now, if any.
    armed: Option<ferrotx_buggify::Armed>,
    /// Events the attack scheduled itself (restarts, heals, a second crash), by time.
    scheduled: Vec<(u64, FaultEvent)>,
    /// After the first trap sprang: once a view newer than this one commits, crash another
    /// node this long after (and this pick among the nodes up).
    after_commit: Option<(u64, u64, u64)>,
    /// What the attack did, in order (for reports).
    pub attack_log: Vec<String>,
    /// Nodes the attack struck (crashed, paused, cut off).
    pub attack_struck: std::collections::BTreeSet<u16>,
    /// The epoch every node's partitions pin, the cluster's own: reclaimed records are
    /// made again, and so keys numbered and scanned, at points the run alone decides, not
    /// when other threads of the process (other seeds) let the process's epoch advance.
    epoch: Epoch,
    /// A fault placed on a cue (a hand-written membership scenario), while it waits.
    plot: Option<PlotState>,
    /// The simulated disks of the participants' logs, in the configuration's `flush`
    /// and `sync` modes (issue 32).
    pub disks: Option<crate::disk::SimDisks>,
    /// What [`SimCluster::power_cut_check`] found at the instants it ran (`sync` mode).
    pub disk_violations: Vec<String>,
    /// Instants checked so far, and the next.
    pub power_cut_probes: u64,
    next_power_cut_probe: u64,
    /// Keys loaded before the run, at version 1 (no log record installs them).
    loaded: RefCell<std::collections::HashSet<(u16, Key)>>,
    /// What the run went through: the plot's strike, and what the membership scenarios
    /// must reach (the history's part is filled in at the end of the run).
    pub situations: Situations,
}

/// What the simulator does to a node when a trap armed at a fault point springs there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrapAction {
    /// Crash the node whose worker reached the point; restart it (a new life, no data)
    /// this long after, if set.
    Crash {
        /// Restart after this long.
        restart_after_ns: Option<u64>,
    },
    /// Crash another node that is up (the `pick`-th of them, modulo), not the one whose
    /// worker reached the point; restart it this long after, if set.
    CrashOther {
        /// Which of the other nodes up.
        pick: u64,
        /// Restart after this long.
        restart_after_ns: Option<u64>,
    },
    /// Pause the node for this long (past the lease).
    Pause {
        /// How long.
        for_ns: u64,
    },
    /// Cut the node off from every other (both ways), healed this long after.
    Isolate {
        /// Heal after this long.
        heal_after_ns: u64,
    },
    /// Cut the node off from every other but the CM of the latest view (both ways),
    /// healed this long after: it keeps its lease, so no view changes, and whatever it
    /// asks the others waits for the heal.
    Sever {
        /// Heal after this long.
        heal_after_ns: u64,
    },
}

/// A trap at a fault point of the commit protocol and what happens when it springs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attack {
    /// The fault point (`txn.commit.after_lock`, ...).
    pub point: &'static str,
    /// The visit of the point (over every worker of the run) at which the trap springs.
    pub visit: u64,
    /// Whether the point fires when the trap springs (delay points: the coroutine stops
    /// right at it, so nothing of the next phase is sent before the fault).
    pub force: bool,
    /// What happens to the node.
    pub action: TrapAction,
    /// Once the first view after the fault commits, crash another node up (the pick-th,
    /// modulo) this long after: a failure during recovery.
    pub then_after_commit: Option<(u64, u64)>,
    /// A second trap, armed once this one sprang.
    pub then: Option<Box<Attack>>,
}

impl SimCluster {
    /// Starts every member of `config` (node ids 0 to n-1) on a simulated network whose
    /// faults come from `seed`, each worker built with `options`.
    ///
    /// # Panics
    ///
    /// If the members are not numbered 0 to n-1.
    pub fn new(config: Configuration, options: CoreOptions, seed: u64, faults: Faults) -> Self {
        Self::build(config, options, seed, faults, &[], None)
    }

    /// Like [`SimCluster::new`], but every node runs membership with `membership`
    /// options on the clock `clocks` gives it: the cluster bootstraps through the
    /// protocol (every node joins, the node of lowest id swaps in the first view), and a
    /// node's workers are built from the first view that admits it, when it installs it.
    pub fn with_membership(
        config: Configuration,
        options: CoreOptions,
        seed: u64,
        faults: Faults,
        clocks: &[NodeClock],
        membership: Options,
    ) -> Self {
        Self::build(config, options, seed, faults, clocks, Some(membership))
    }

    fn build(
        config: Configuration,
        options: CoreOptions,
        seed: u64,
        faults: Faults,
        clocks: &[NodeClock],
        membership: Option<Options>,
    ) -> Self {
        let config = Arc::new(config);
        for (i, member) in config.members().iter().enumerate() {
            assert_eq!(usize::from(member.node), i, "members numbered from 0");
        }
        let network = SimNetwork::new(seed, faults);
        let durability = config.durability();
        let disks = (durability.mode != ferrotx_cluster::DurabilityMode::Memory).then(|| {
            let sync = durability.mode == ferrotx_cluster::DurabilityMode::Sync;
            crate::disk::SimDisks::new(
                ferrotx_txn::durable::LogMode { wait: sync },
                if sync {
                    0
                } else {
                    durability.flush_interval_ms * 1_000_000
                },
                seed,
            )
        });
        let mut cluster = Self {
            sim: Simulator::new(network),
            nodes: config
                .members()
                .iter()
                .map(|_| SimNode {
                    core: None,
                    coordinators: Vec::new(),
                    participants: Vec::new(),
                    incarnation: 0,
                    up: false,
                    membership: None,
                    fills_reported: (0, 0),
                    memory_limit: 0,
                    restored: None,
                })
                .collect(),
            placement: ClusterPlacement::new(config.clone(), None),
            config,
            options,
            crashes: 0,
            restarts: 0,
            power_cuts: 0,
            retired_checkpoints: Default::default(),
            restore_failures: Vec::new(),
            damaged_disks: 0,
            damage_refused: 0,
            damaged_waiting: Vec::new(),
            restore_nothing: false,
            pauses: 0,
            membership: membership.map(MembershipState::new),
            retired_recovery: RecoveryStats::default(),
            retired_locks_refused_memory: 0,
            attack: None,
            armed: None,
            scheduled: Vec::new(),
            after_commit: None,
            attack_log: Vec::new(),
            attack_struck: std::collections::BTreeSet::new(),
            epoch: Epoch::private(),
            plot: None,
            disks,
            disk_violations: Vec::new(),
            power_cut_probes: 0,
            next_power_cut_probe: POWER_CUT_PROBE_NS / 2 + seed % POWER_CUT_PROBE_NS,
            loaded: RefCell::new(std::collections::HashSet::new()),
            situations: Situations::default(),
        };
        for (node, clock) in clocks.iter().enumerate() {
            cluster.set_clock(u16::try_from(node).expect("node ids are u16"), *clock);
        }
        for node in 0..cluster.node_count() {
            cluster.start(node);
        }
        cluster
    }

    /// Node `node`'s membership state machine, if the cluster runs membership and the
    /// node is up.
    pub fn node_membership(&self, node: u16) -> Option<&Membership> {
        self.nodes[usize::from(node)].membership.as_ref()
    }

    /// Node `node`'s current incarnation.
    pub fn incarnation(&self, node: u16) -> u64 {
        self.nodes[usize::from(node)].incarnation
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<Configuration> {
        &self.config
    }

    /// How its workers are built.
    pub fn options(&self) -> &CoreOptions {
        &self.options
    }

    /// Nodes in the cluster (up or not).
    pub fn node_count(&self) -> u16 {
        u16::try_from(self.nodes.len()).expect("node ids are u16")
    }

    /// Node `node`'s core, unless it is crashed.
    pub fn core(&self, node: u16) -> Option<&NodeCore> {
        self.nodes[usize::from(node)].core.as_ref()
    }

    /// Whether node `node` is up (not crashed; it may be paused).
    pub fn is_up(&self, node: u16) -> bool {
        self.nodes[usize::from(node)].up
    }

    /// The coordinator of worker `thread` of node `node`, unless it is crashed.
    pub fn coordinator(&self, node: u16, thread: u16) -> Option<&Rc<Coordinator>> {
        self.nodes[usize::from(node)]
            .coordinators
            .get(usize::from(thread))
    }

    /// Every participant of the nodes that are up (for their counters).
    pub fn participants(&self) -> impl Iterator<Item = &Rc<RefCell<Participant>>> {
        self.nodes.iter().flat_map(|n| n.participants.iter())
    }

    /// Every coordinator of the nodes that are up.
    pub fn coordinators(&self) -> impl Iterator<Item = &Rc<Coordinator>> {
        self.nodes.iter().flat_map(|n| n.coordinators.iter())
    }

    /// Recovery counters summed over every worker of the run: the nodes up now, and the
    /// last counters of every node life that ended (crashed, stopped or removed).
    pub fn recovery_stats(&self) -> RecoveryStats {
        let mut sum = self.retired_recovery;
        for participant in self.participants() {
            add_recovery(&mut sum, &participant.borrow().recovery_stats());
        }
        sum
    }

    /// Arms `attack`'s trap: from now on, the worker step that reaches its point at its
    /// visit is followed at once by its action on that worker's node.
    pub fn arm(&mut self, attack: Attack) {
        self.armed = None;
        self.armed = Some(ferrotx_buggify::arm_trap(
            attack.point,
            attack.visit,
            attack.force,
        ));
        self.attack = Some(attack);
    }

    /// Whether every trap armed sprang (true when none was).
    pub fn traps_sprung(&self) -> bool {
        self.attack.is_none()
    }

    /// The nodes up now.
    fn nodes_up(&self) -> Vec<u16> {
        (0..self.node_count()).filter(|&n| self.is_up(n)).collect()
    }

    /// Applies a timed fault event now.
    fn apply_event(&mut self, now: u64, event: &FaultEvent) {
        match event {
            FaultEvent::Partition { side_a, side_b } => {
                self.sim.network.borrow_mut().partition(side_a, side_b);
            }
            FaultEvent::OneWay { from, to } => self.sim.network.borrow_mut().cut_one_way(from, to),
            FaultEvent::Heal => self.sim.network.borrow_mut().heal(),
            FaultEvent::Pause { node, for_ns } => self.pause(*node, now + for_ns),
            FaultEvent::Crash { node } => self.crash(*node),
            FaultEvent::Restart { node } => self.restart(*node),
            FaultEvent::PowerCut => self.power_cut(),
            FaultEvent::PowerOn { damaged } => self.power_on(*damaged),
            FaultEvent::CoordSlow { .. }
            | FaultEvent::CoordDown { .. }
            | FaultEvent::CoordBack { .. } => {
                self.coord_fault(now, event);
                return;
            }
        }
        self.attack_log
            .push(format!("{:.3} ms: {event:?}", now as f64 / 1e6));
    }

    /// Cuts `node` off (both ways) from every other node but `spare`, healed
    /// `heal_after_ns` after `now`, and counts it struck; returns when the cut heals.
    fn cut_off(&mut self, now: u64, node: u16, spare: Option<u16>, heal_after_ns: u64) -> u64 {
        self.attack_struck.insert(node);
        let rest: Vec<u16> = (0..self.node_count())
            .filter(|&n| n != node && Some(n) != spare)
            .collect();
        self.apply_event(
            now,
            &FaultEvent::Partition {
                side_a: vec![node],
                side_b: rest,
            },
        );
        self.scheduled.push((now + heal_after_ns, FaultEvent::Heal));
        now + heal_after_ns
    }

    /// Marks the faults as going on until `until` (convergence is timed from the last).
    fn faults_until(&mut self, until: u64) {
        if let Some(state) = self.membership.as_mut() {
            state.faults_over_ns = Some(state.faults_over_ns.unwrap_or(0).max(until));
            state.converged_ns = None;
        }
    }

    /// A trap sprang at `point` in worker `endpoint` at `now`: carry out the attack.
    fn trap_sprung(&mut self, now: u64, endpoint: EndpointId, point: &'static str) {
        let Some(attack) = self.attack.take() else {
            return;
        };
        self.armed = None;
        let node = endpoint.node();
        self.attack_log.push(format!(
            "{:.3} ms: trap {point} (visit {}) sprang in worker {node}.{}",
            now as f64 / 1e6,
            attack.visit,
            endpoint.thread()
        ));
        let view = self
            .node_membership(node)
            .and_then(|m| m.view().map(|v| v.id))
            .unwrap_or(0);
        let mut last = now;
        match attack.action {
            TrapAction::Crash { restart_after_ns } => {
                self.attack_struck.insert(node);
                self.apply_event(now, &FaultEvent::Crash { node });
                if let Some(after) = restart_after_ns {
                    self.scheduled
                        .push((now + after, FaultEvent::Restart { node }));
                    last = now + after;
                }
            }
            TrapAction::CrashOther {
                pick,
                restart_after_ns,
            } => {
                let others: Vec<u16> = self.nodes_up().into_iter().filter(|&n| n != node).collect();
                if let Some(&victim) = others.get((pick % others.len().max(1) as u64) as usize) {
                    self.attack_struck.insert(victim);
                    self.apply_event(now, &FaultEvent::Crash { node: victim });
                    if let Some(after) = restart_after_ns {
                        self.scheduled
                            .push((now + after, FaultEvent::Restart { node: victim }));
                        last = now + after;
                    }
                }
            }
            TrapAction::Pause { for_ns } => {
                self.attack_struck.insert(node);
                self.apply_event(now, &FaultEvent::Pause { node, for_ns });
                last = now + for_ns;
            }
            TrapAction::Isolate { heal_after_ns } => {
                last = self.cut_off(now, node, None, heal_after_ns);
            }
            TrapAction::Sever { heal_after_ns } => {
                let cm = self
                    .membership
                    .as_ref()
                    .and_then(|s| s.coordination.current())
                    .map(|v| v.cm);
                if cm == Some(node) {
                    self.attack_struck.insert(node);
                    // The CM cut off from the others would be isolated, which
                    // `recovery-isolate-filler` attacks: nothing is cut.
                    self.attack_log.push(format!(
                        "{:.3} ms: node {node} is the CM: nothing cut",
                        now as f64 / 1e6
                    ));
                    self.faults_until(now);
                    if let Some(next) = attack.then {
                        self.arm(*next);
                    }
                    return;
                }
                last = self.cut_off(now, node, cm, heal_after_ns);
            }
        }
        if let Some((delay, pick)) = attack.then_after_commit {
            self.after_commit = Some((view, delay, pick));
            // Faults go on until that crash happened.
            last = u64::MAX / 4;
        }
        self.faults_until(last);
        if let Some(next) = attack.then {
            self.arm(*next);
        }
    }

    /// The attack's own events due at `now`, and a crash due once a view commits.
    fn attack_step(&mut self, now: u64) {
        if let Some((view, delay, pick)) = self.after_commit {
            let committed = self.membership.as_ref().map_or(0, |s| s.committed_max);
            if committed > view {
                self.after_commit = None;
                let up = self.nodes_up();
                let candidates: Vec<u16> = up
                    .into_iter()
                    .filter(|n| !self.attack_struck.contains(n))
                    .collect();
                if let Some(&victim) =
                    candidates.get((pick % candidates.len().max(1) as u64) as usize)
                {
                    self.attack_log.push(format!(
                        "{:.3} ms: view {committed} committed; crash node {victim} in {:.3} ms",
                        now as f64 / 1e6,
                        delay as f64 / 1e6
                    ));
                    self.attack_struck.insert(victim);
                    self.scheduled
                        .push((now + delay, FaultEvent::Crash { node: victim }));
                }
                let last = self
                    .scheduled
                    .iter()
                    .map(|(at, _)| *at)
                    .max()
                    .unwrap_or(0)
                    .max(now + delay);
                if let Some(state) = self.membership.as_mut() {
                    state.faults_over_ns = Some(last);
                    state.converged_ns = None;
                }
            }
        }
        self.scheduled.sort_by_key(|(at, _)| *at);
        while self.scheduled.first().is_some_and(|(at, _)| *at <= now) {
            let (_, event) = self.scheduled.remove(0);
            self.apply_event(now, &event);
        }
    }

    /// Places `plot` (a fault on a cue) on a run whose clients started at `start_ns`.
    /// Until it has struck, or its cue failed to come in time, the faults are not over
    /// (convergence is timed from its strike).
    pub fn set_plot(&mut self, plot: Plot, start_ns: u64) {
        let state = self.membership.as_mut().expect("plots need membership");
        let over = state.faults_over_ns.unwrap_or(start_ns);
        state.faults_over_ns = Some(u64::MAX / 4);
        state.converged_ns = None;
        self.situations.plot.push(format!(
            "waiting for {:?} to strike {:?}",
            plot.cue, plot.strike
        ));
        self.plot = Some(PlotState::new(plot, start_ns, over));
    }

    /// Node `node` (the CM of its view) took `from`'s answer to its probe round: if the
    /// plot waits for that, and it is the round's first answer, others are awaited and the
    /// round probes a joiner, strike now. Returns whether it struck.
    fn first_reply_of_join_probe(&mut self, now: u64, node: u16, from: u16) -> bool {
        let Some(plot) = self.plot.as_mut() else {
            return false;
        };
        let Some(probed) = plot.first_reply(node, from) else {
            return false;
        };
        let Some(view) = self.nodes[usize::from(node)]
            .membership
            .as_ref()
            .and_then(Membership::view)
            .filter(|v| v.cm == node)
            .cloned()
        else {
            return false;
        };
        let joiners: Vec<(u16, u64)> = probed
            .iter()
            .map(|&n| (n, self.nodes[usize::from(n)].incarnation))
            .filter(|&(n, life)| {
                self.nodes[usize::from(n)].up
                    && !view.is_member(n, life)
                    && !view.is_suspended(n, life)
            })
            .collect();
        if joiners.is_empty() {
            return false;
        }
        let plot = self.plot.as_mut().expect("checked above");
        plot.cue(now, Some(node));
        self.situations.cm_cut_between_replies += 1;
        self.situations.cm_cut_after_joiner_answer +=
            u64::from(joiners.iter().any(|&(n, _)| n == from));
        self.situations.plot.push(format!(
            "{:.3} ms: CM {node} (view {}) took node {from}'s answer, the first of a round probing {probed:?} with joiners (node, life) {joiners:?}",
            now as f64 / 1e6,
            view.id
        ));
        self.plot_step(now);
        true
    }

    /// The plot's strike, when due; or the plot dropped, if its cue has not come in time.
    fn plot_step(&mut self, now: u64) {
        let Some(plot) = self.plot.as_mut() else {
            return;
        };
        if !plot.cued && !plot.dropped && now >= plot.expires_ns() {
            plot.dropped = true;
            let over = plot.faults_over_ns;
            self.situations.plot.push(format!(
                "{:.3} ms: the cue never came; plot dropped",
                now as f64 / 1e6
            ));
            if let Some(state) = self.membership.as_mut() {
                state.faults_over_ns = Some(over.max(now));
                state.converged_ns = None;
            }
            return;
        }
        let Some((at, cued)) = plot.due else { return };
        if now < at {
            return;
        }
        plot.due = None;
        let (strike, over) = (plot.plot.strike.clone(), plot.faults_over_ns);
        let mut last = now;
        let isolate = |cluster: &mut Self, node: u16, heal_after_ns: u64| {
            cluster.cut_off(now, node, None, heal_after_ns)
        };
        let current = self
            .membership
            .as_ref()
            .and_then(|s| s.coordination.current());
        match strike {
            Strike::IsolateCued { heal_after_ns } => {
                let node = cued.expect("a cue that names a node");
                last = isolate(self, node, heal_after_ns);
            }
            Strike::Isolate {
                node,
                heal_after_ns,
            } => {
                last = isolate(self, node, heal_after_ns);
            }
            Strike::IsolateCm { heal_after_ns } => {
                let view = current.expect("a view stored");
                let paused: Vec<u16> = view
                    .members
                    .iter()
                    .filter(|m| {
                        m.node != view.cm
                            && self.nodes[usize::from(m.node)].incarnation == m.incarnation
                            && now < self.sim.paused_until(m.node)
                    })
                    .map(|m| m.node)
                    .collect();
                self.situations.cm_isolated_while_paused += u64::from(!paused.is_empty());
                self.situations.plot.push(format!(
                    "{:.3} ms: CM {} of view {} cut off; members paused then: {paused:?}",
                    now as f64 / 1e6,
                    view.cm,
                    view.id
                ));
                last = isolate(self, view.cm, heal_after_ns);
            }
            Strike::Crash {
                node,
                restart_after_ns,
            } => {
                let members: Vec<u16> = current
                    .map(|v| v.members.iter().map(|m| m.node).collect())
                    .unwrap_or_default();
                self.situations.crashed_in_view.push((node, members));
                self.attack_struck.insert(node);
                self.apply_event(now, &FaultEvent::Crash { node });
                if let Some(after) = restart_after_ns {
                    self.scheduled
                        .push((now + after, FaultEvent::Restart { node }));
                    last = now + after;
                }
            }
        }
        self.situations.struck = true;
        let log = self.attack_log.iter().rev().take(1).cloned();
        self.situations.plot.extend(log);
        if let Some(state) = self.membership.as_mut() {
            state.faults_over_ns = Some(over.max(last));
            state.converged_ns = None;
        }
    }

    /// Sets node `node`'s clock.
    pub fn set_clock(&mut self, node: u16, clock: NodeClock) {
        let index = usize::from(node);
        if self.sim.clocks.len() <= index {
            self.sim.clocks.resize(index + 1, NodeClock::default());
        }
        self.sim.clocks[index] = clock;
    }

    /// Stores `value` under `key` on every copy of its partition held by a node that is
    /// up, at version 1 (loading before transactions run).
    pub fn load(&self, table: TableId, key: Key, value: &[u8]) {
        if self.disks.is_some() {
            self.loaded.borrow_mut().insert((table.0, key));
        }
        let partition = self.partition_of(table, &key);
        for node in &self.nodes {
            let Some(core) = node.core.as_ref() else {
                continue;
            };
            if core.load(table, key, value).expect("loading a valid key")
                && let Some(participant) = node.participants.first()
            {
                // On its disk too, for a restart (`flush` and `sync` modes).
                participant
                    .borrow_mut()
                    .log_load(partition.0, table, &key, value);
            }
        }
    }

    /// Checkpoint counters over every node life, ended or up.
    pub fn checkpoint_stats(&self) -> ferrotx_txn::checkpoint::CheckpointStats {
        let mut total = self.retired_checkpoints;
        for node in &self.nodes {
            if let Some(core) = &node.core {
                add_checkpoints(&mut total, &core.checkpoints().stats());
            }
        }
        total
    }

    /// If the power went now, on every node at once: the writes installed at a primary
    /// (visible, or acknowledged) that no disk holds, in `sync` mode's promise (FaRM's
    /// NVRAM rule). Empty in `memory` mode. See [`crate::disk`].
    pub fn power_cut_check(&self) -> Vec<String> {
        let Some(disks) = &self.disks else {
            return Vec::new();
        };
        let writes = disks.durable_writes(self.sim.now_ns());
        let loaded = self.loaded.borrow();
        let mut lost = Vec::new();
        for (node, slot) in self.nodes.iter().enumerate() {
            let Some(core) = &slot.core else {
                continue;
            };
            for (partition, role, copy) in core.copies() {
                if role != Role::Primary {
                    continue;
                }
                let copies = self.copies_of(partition).len();
                for table in copy.tables().collect::<Vec<_>>() {
                    let mut cursor = 0;
                    loop {
                        let next = copy
                            .copy_out(
                                table,
                                cursor,
                                1024,
                                |key, version, _| {
                                    let was_loaded =
                                        version == 1 && loaded.contains(&(table.0, *key));
                                    if !was_loaded && !writes.contains(&(table.0, *key, version)) {
                                        lost.push(format!(
                                            "node {node} primary of partition {}: table {} key \
                                             {key:?} at version {version} is on no disk \
                                             ({copies} copies up)",
                                            partition.0, table.0
                                        ));
                                    }
                                    true
                                },
                                |_| {},
                            )
                            .expect("a table of the copy");
                        if next == 0 {
                            break;
                        }
                        cursor = next;
                    }
                }
            }
        }
        lost
    }

    /// Every copy of `partition` on a node that is up, the primary first (by the
    /// configuration's partition map), with its node and role.
    pub fn copies_of(&self, partition: PartitionId) -> Vec<(u16, Role, Arc<Partition>)> {
        if let Some(state) = &self.membership {
            // With membership the current view says who holds the partition: a backup
            // may have been promoted, and a new life holds nothing.
            let Some(view) = state.coordination.current() else {
                return Vec::new();
            };
            let Some(nodes) = view.copies.get(partition.0 as usize) else {
                return Vec::new();
            };
            return nodes
                .iter()
                .enumerate()
                .filter_map(|(i, &node)| {
                    let role = if i == 0 { Role::Primary } else { Role::Backup };
                    if !view.is_member(node, self.incarnation(node)) {
                        return None;
                    }
                    let (_, _, copy) = self
                        .core(node)?
                        .copies()
                        .into_iter()
                        .find(|(id, _, _)| *id == partition)?;
                    Some((node, role, copy))
                })
                .collect();
        }
        self.config
            .partitions()
            .replicas(partition)
            .nodes()
            .enumerate()
            .filter_map(|(i, node)| {
                let role = if i == 0 { Role::Primary } else { Role::Backup };
                let copy = self.core(node)?.copy(partition, role)?;
                Some((node, role, copy))
            })
            .collect()
    }

    /// The partition of `key` of `table`, by the configuration.
    pub fn partition_of(&self, table: TableId, key: &Key) -> PartitionId {
        PartitionId(self.placement.partition_of(table, key))
    }

    /// Starts `body` as a coroutine on worker `thread` of node `node`, with that worker's
    /// coordinator. Returns false, starting nothing, if the node is crashed or every
    /// coroutine slot is taken.
    pub fn spawn<F, Fut>(&mut self, node: u16, thread: u16, body: F) -> bool
    where
        F: FnOnce(Co, Rc<Coordinator>) -> Fut + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let Some(coordinator) = self.coordinator(node, thread).cloned() else {
            return false;
        };
        let local = EndpointId::new(node, thread);
        let Some(worker) = self
            .sim
            .workers
            .iter_mut()
            .find(|w| w.transport().local() == local)
        else {
            return false;
        };
        if worker.executor().free_slots() == 0 {
            return false;
        }
        worker
            .executor()
            .spawn(move |co| async move { body(co, coordinator).await });
        true
    }

    /// Pauses node `node` from now until `until_ns`: its workers stop, its clock runs on.
    pub fn pause(&mut self, node: u16, until_ns: u64) {
        self.pauses += 1;
        self.sim.pause(node, until_ns);
    }

    /// Crashes node `node`: its workers and their coroutines are dropped, its partitions
    /// (its memory) are gone, and datagrams to it are lost. Does nothing if it is down.
    pub fn crash(&mut self, node: u16) {
        let life = ViewMember {
            node,
            incarnation: self.nodes[usize::from(node)].incarnation,
        };
        if !self.stop(node) {
            return;
        }
        if let Some(disks) = self.disks.as_mut() {
            disks.end_life(node, life.incarnation, self.sim.now_ns());
        }
        if let Some(state) = self.membership.as_mut() {
            state.crashed.insert(life);
        }
        self.crashes += 1;
    }

    /// Every node up loses power at the same instant: each life ends with what its disk
    /// had synced (a crash of all at once). Memory mode keeps nothing.
    pub fn power_cut(&mut self) {
        for node in 0..self.node_count() {
            self.crash(node);
        }
        self.power_cuts += 1;
    }

    /// Every node down starts again from its disk (issue 32, a whole-cluster restart):
    /// the stored view is ended on disk ([`View::ended_on_disk`]), as the first real
    /// node to start does, and each node's new life loads the copies that view keeps of
    /// its earlier life from that life's durable records (and the lives it loaded from)
    /// before it joins; the first view gives them back. A node whose records cannot be
    /// replayed starts empty and is reported.
    ///
    /// `damaged`: that node's disk is found damaged as it loads. If every copy it held
    /// has another copy in the view ended on disk, it stays down (a real node takes no
    /// part in the restart) and starts as a new, empty life once the cluster runs again
    /// without it, refilled from those copies ([`SimCluster::rejoin_damaged`]); if it
    /// held the only copy of a partition (a real node refuses to start), it loads as
    /// the others do, counted in [`SimCluster::damage_refused`].
    pub fn power_on(&mut self, damaged: Option<u16>) {
        let damaged = damaged.filter(|&node| {
            if self.disks.is_none() || self.membership.is_none() || self.is_up(node) {
                return false;
            }
            let Some(ended) = self.ended_on_disk() else {
                return false;
            };
            if ferrotx_node::restore::copies_on_disk(&ended, node).is_none() {
                return false;
            }
            let covered = ferrotx_node::restore::only_copies_on(&ended, node).is_empty();
            if !covered {
                self.damage_refused += 1;
            }
            covered
        });
        for node in 0..self.node_count() {
            if Some(node) == damaged {
                self.damaged_disks += 1;
                self.damaged_waiting.push(node);
                continue;
            }
            if !self.is_up(node) {
                self.restart_from_disk(node);
            }
        }
    }

    /// The stored view ended on disk (ending the current one so, as the first real node
    /// to start does), or `None` without membership or if the cluster ended in memory.
    fn ended_on_disk(&mut self) -> Option<View> {
        self.membership.as_ref().and_then(|state| {
            let current = state.coordination.current()?;
            let ended = if current.is_ended_on_disk() {
                current
            } else if current.is_ended() {
                return None;
            } else {
                current.ended_on_disk()
            };
            state.coordination.restore(Some(ended.clone()));
            Some(ended)
        })
    }

    /// Starts the nodes whose disks a power-on found damaged as new, empty lives once
    /// the cluster runs again (its stored view has members), as a real node does.
    fn rejoin_damaged(&mut self) {
        if self.damaged_waiting.is_empty() {
            return;
        }
        let running = self
            .membership
            .as_ref()
            .is_some_and(|state| state.coordination.current().is_some_and(|v| !v.is_ended()));
        if !running {
            return;
        }
        for node in std::mem::take(&mut self.damaged_waiting) {
            if !self.is_up(node) {
                self.restarts += 1;
                self.start(node);
            }
        }
    }

    /// Starts node `node` (down) as a new life that first loads, from its disk, the
    /// copies the stored view ended on disk keeps of its earlier life (ending it so
    /// first, as the first real node to start does): see [`SimCluster::power_on`].
    fn restart_from_disk(&mut self, node: u16) {
        if self.disks.is_none() {
            // `memory` mode: nothing on disk; a new, empty life.
            self.restarts += 1;
            self.start(node);
            return;
        }
        let now = self.sim.now_ns();
        let ended = self.ended_on_disk();
        let old = self.nodes[usize::from(node)].incarnation;
        let restored = match (&ended, self.disks.as_ref()) {
            (Some(ended), Some(disks)) => ferrotx_node::restore::copies_on_disk(ended, node)
                .and_then(|(life, copies)| {
                    let logs =
                        disks.durable_records(node, life, self.config.threads_per_node(), now);
                    match ferrotx_node::restore::load_records(&self.config, &copies, &logs) {
                        Ok(restored) => Some((life, restored)),
                        Err(e) => {
                            self.restore_failures.push(format!("node {node}: {e}"));
                            None
                        }
                    }
                }),
            _ => None,
        };
        // A deliberate break for tests: the node starts empty over its data.
        let restored = restored.filter(|_| !self.restore_nothing);
        if let Some((life, restored)) = restored {
            if let Some(disks) = self.disks.as_mut() {
                disks.note_restored(node, old + 1, life);
            }
            self.nodes[usize::from(node)].restored = Some(restored);
        }
        self.restarts += 1;
        self.start(node);
    }

    /// Stops node `node`'s process: workers, partitions and membership are gone, and
    /// datagrams to it are lost. Returns false if it was not up.
    fn stop(&mut self, node: u16) -> bool {
        let slot = &mut self.nodes[usize::from(node)];
        if !slot.up {
            return false;
        }
        slot.up = false;
        if let Some(core) = slot.core.take() {
            add_checkpoints(&mut self.retired_checkpoints, &core.checkpoints().stats());
        }
        slot.membership = None;
        // What this life loaded is its own: a next life starts from nothing (or loads
        // again from disk).
        slot.restored = None;
        if let Some(state) = self.membership.as_mut() {
            state.installs_pending.retain(|(_, n, _, _)| *n != node);
        }
        slot.coordinators.clear();
        for participant in slot.participants.drain(..) {
            self.retired_locks_refused_memory += participant.borrow().stats().locks_refused_memory;
            add_recovery(
                &mut self.retired_recovery,
                &participant.borrow().recovery_stats(),
            );
        }
        let mut network = self.sim.network.borrow_mut();
        self.sim.workers.retain(|w| {
            let local = w.transport().local();
            if local.node() == node {
                network.remove_endpoint(local);
                false
            } else {
                true
            }
        });
        network.remove_endpoint(lease_endpoint(node));
        true
    }

    /// Restarts a crashed node as its next incarnation: empty partitions, new workers,
    /// nothing of its earlier life. Does nothing if it is up.
    pub fn restart(&mut self, node: u16) {
        if self.is_up(node) || self.damaged_waiting.contains(&node) {
            return;
        }
        let restarting = self.membership.as_ref().is_some_and(|s| {
            s.coordination
                .current()
                .is_some_and(|v| v.is_ended_on_disk())
        });
        if self.disks.is_some()
            && self.membership.is_some()
            && (self.nodes_up().is_empty() || restarting)
        {
            // Every node is down (the power went), or the cluster is restarting from its
            // disks: a node started now loads its copies first, as a real one does.
            self.restart_from_disk(node);
            return;
        }
        self.restarts += 1;
        self.start(node);
    }

    fn start(&mut self, node: u16) {
        let slot = &mut self.nodes[usize::from(node)];
        assert!(!slot.up);
        slot.incarnation += 1;
        slot.up = true;
        slot.fills_reported = (0, 0);
        let incarnation = slot.incarnation;
        if let Some(state) = &self.membership {
            let now = self.sim.now_ns();
            let local = self.sim.clock(node).local_ns(now);
            self.sim
                .network
                .borrow_mut()
                .add_endpoint(lease_endpoint(node));
            let mut membership =
                Membership::new(node, incarnation, self.config.clone(), state.options, local);
            // Lease datagrams are sealed as the RPC engines' are, with the same keys.
            membership.set_auth(self.options.rpc.auth.clone());
            self.nodes[usize::from(node)].membership = Some(membership);
            self.drain(node, now);
            return;
        }
        let core = NodeCore::new_in(self.config.clone(), node, incarnation, self.epoch.clone());
        self.build_workers(node, core);
    }

    fn build_workers(&mut self, node: u16, core: NodeCore) {
        let slot = &mut self.nodes[usize::from(node)];
        core.memory().set_limit(slot.memory_limit);
        for thread in 0..self.config.threads_per_node() {
            let local = EndpointId::new(node, thread);
            let transport = SimNetwork::endpoint(&self.sim.network, local);
            let log = self.disks.as_mut().map(|disks| {
                let log = disks.open(&self.sim.network, node, slot.incarnation, thread);
                (
                    Box::new(log) as Box<dyn ferrotx_txn::durable::CommitLog>,
                    disks.mode,
                )
            });
            let CoreWorker {
                worker,
                coordinator,
                participant,
            } = core.worker_logged(thread, transport, &self.options, log);
            slot.coordinators.push(coordinator);
            slot.participants.push(participant);
            self.sim.workers.push(worker);
        }
        slot.core = Some(core);
    }

    /// Switches every worker of node `node` to `view` (its local time `local`).
    fn switch_workers(&mut self, node: u16, local: u64, view: &View) {
        let slot = &self.nodes[usize::from(node)];
        let core = slot
            .core
            .clone()
            .expect("switching the workers of a node up");
        for (thread, (coordinator, participant)) in
            slot.coordinators.iter().zip(&slot.participants).enumerate()
        {
            let endpoint =
                EndpointId::new(node, u16::try_from(thread).expect("thread ids are u16"));
            let index = self
                .sim
                .workers
                .iter()
                .position(|w| w.transport().local() == endpoint)
                .expect("a worker for every thread of a node up");
            let worker = self.sim.workers.remove(index);
            let mut core_worker = CoreWorker {
                worker,
                coordinator: coordinator.clone(),
                participant: participant.clone(),
            };
            core.switch_worker(&mut core_worker, local, view);
            self.sim.workers.insert(index, core_worker.worker);
        }
    }

    /// Carries out every action node `node`'s membership asks for, at simulated time
    /// `now`, then sets its workers' lease.
    fn drain(&mut self, node: u16, now: u64) {
        let local = self.sim.clock(node).local_ns(now);
        loop {
            let Some(m) = self.nodes[usize::from(node)].membership.as_mut() else {
                return;
            };
            let Some(action) = m.poll_action() else {
                break;
            };
            let state = self.membership.as_mut().expect("membership runs");
            match action {
                Action::Send { to, message } => {
                    let mut bytes = Vec::new();
                    m.encode(to, &message, &mut bytes);
                    if let Some(plot) = self.plot.as_mut() {
                        plot.sent(node, to, &message, &bytes);
                    }
                    self.sim.network.borrow_mut().send(
                        lease_endpoint(node),
                        lease_endpoint(to),
                        &bytes,
                    );
                }
                Action::Read if state.coord.is_some() => {
                    let life = self.nodes[usize::from(node)].incarnation;
                    state.coord_call(now, node, life, CoordCall::Read);
                }
                Action::Cas { expected, next } if state.coord.is_some() => {
                    let life = self.nodes[usize::from(node)].incarnation;
                    state.coord_call(now, node, life, CoordCall::Cas { expected, next });
                }
                Action::Read => {
                    let read = state.coordination.read();
                    m.handle_read(local, read);
                }
                Action::Cas { expected, next } => {
                    let result = self.store_cas(node, now, local, expected, &next);
                    if let Some(m) = self.nodes[usize::from(node)].membership.as_mut() {
                        m.handle_cas(local, result);
                    }
                }
                Action::Install(view) => {
                    state.installs += 1;
                    let incarnation = self.nodes[usize::from(node)].incarnation;
                    if self.nodes[usize::from(node)].core.is_none() {
                        // What it loaded counts only if the restart took this life in.
                        let restored = self.nodes[usize::from(node)]
                            .restored
                            .take()
                            .filter(|r| r.given_back(&view, node));
                        if restored.is_none()
                            && let Some(disks) = self.disks.as_mut()
                        {
                            disks.forget_restored(node, incarnation);
                        }
                        let core = NodeCore::from_view_loaded(
                            self.config.clone(),
                            &view,
                            node,
                            incarnation,
                            self.epoch.clone(),
                            restored.as_ref().map_or(&[][..], |r| r.partitions()),
                        );
                        self.build_workers(node, core);
                        if let Some(restored) = restored {
                            for (thread, participant) in self.nodes[usize::from(node)]
                                .participants
                                .iter()
                                .enumerate()
                            {
                                if let Some(replay) = restored.take_replay(thread as u16) {
                                    participant.borrow_mut().restore(replay);
                                }
                            }
                        }
                        self.feed_memory(node);
                    }
                    self.switch_workers(node, local, &view);
                    // A real node acknowledges once its worker threads have switched,
                    // which may take a while: with an install delay, `installed` is
                    // called by a timer (its workers switched at once all the same).
                    let state = self.membership.as_mut().expect("membership runs");
                    let delay = state.install_delay(node);
                    if delay == 0 {
                        if let Some(m) = self.nodes[usize::from(node)].membership.as_mut() {
                            m.handle_installed(local, view.id);
                        }
                    } else {
                        let due = self.sim.clock(node).global_ns(local + delay).max(now + 1);
                        state
                            .installs_pending
                            .push((due, node, incarnation, view.id));
                    }
                }
                Action::Commit(id) => {
                    if id < state.committed_max {
                        let max = state.committed_max;
                        let serving = m.serving_until() > local;
                        state.stale_commits.push(format!(
                            "at {now} ns node {node} commits view {id} after view {max} was committed (serving: {serving})"
                        ));
                    }
                    state.committed_max = state.committed_max.max(id);
                    state.commits += 1;
                    for coordinator in &self.nodes[usize::from(node)].coordinators {
                        coordinator.set_accepting(true);
                    }
                }
                Action::Removed { view } => {
                    let incarnation = self.nodes[usize::from(node)].incarnation;
                    state.removed.push((now, node, incarnation, view));
                    if state.restart_removed {
                        let at = now + state.options.lease_ns;
                        state.restarts_pending.push((at, node));
                    }
                    self.stop(node);
                    return;
                }
            }
        }
        let until = self.nodes[usize::from(node)]
            .membership
            .as_ref()
            .map_or(0, Membership::serving_until);
        for worker in &mut self.sim.workers {
            if worker.transport().local().node() == node {
                worker.set_serving_until(until);
            }
        }
    }

    /// Carries out node `node`'s compare-and-swap at the coordination service, with the
    /// checks of a view swapped in ((d), (e), (f)) and the plot's cue.
    fn store_cas(
        &mut self,
        node: u16,
        now: u64,
        local: u64,
        expected: Option<u64>,
        next: &View,
    ) -> Result<(), CoordinationError> {
        let state = self.membership.as_mut().expect("membership runs");
        let current = state.coordination.current();
        if current.as_ref().map(|v| v.id) == expected {
            state.check_swap(now, current.as_ref(), next);
            if let (Some(current), Some(m)) =
                (&current, self.nodes[usize::from(node)].membership.as_ref())
            {
                state.check_leased_kept(now, node, local, m, current, next);
            }
        }
        if std::env::var("SIM_VIEWS").is_ok() {
            eprintln!("CAS by {node} at {now}: {next:?}");
        }
        let result = state.coordination.compare_and_swap(expected, next);
        if result.is_ok() {
            state.stored_at.push((now, next.id));
        }
        if result.is_ok()
            && let (Some(plot), Some(current)) = (self.plot.as_mut(), &current)
            && plot.stored(current, next)
        {
            let Cue::ViewWithout { node: without } = plot.plot.cue else {
                unreachable!("only this cue is a stored view")
            };
            plot.cue(now, Some(without));
            self.situations.plot.push(format!(
                "{:.3} ms: view {} stored without node {without}'s life {:?} (by node {node})",
                now as f64 / 1e6,
                next.id,
                current.incarnation(without)
            ));
        }
        result
    }

    /// A fault of the coordination service ([`crate::FaultKind::Coord`]) begins.
    pub(crate) fn coord_fault(&mut self, now: u64, event: &FaultEvent) {
        self.attack_log
            .push(format!("{:.3} ms: {event:?}", now as f64 / 1e6));
        let Some(state) = self.membership.as_mut() else {
            return;
        };
        let history = state.coordination.history();
        let current = state.coordination.current();
        let Some(coord) = state.coord.as_mut() else {
            return;
        };
        match *event {
            FaultEvent::CoordSlow {
                latency_max_ns,
                for_ns,
            } => {
                coord.latency_max_ns = latency_max_ns;
                coord.slow_until = coord.slow_until.max(now + for_ns);
            }
            FaultEvent::CoordDown { for_ns } => {
                coord.down_until = coord.down_until.max(now + for_ns);
            }
            FaultEvent::CoordBack { for_ns } => {
                let Some(current) = current else { return };
                if coord.back.is_some() {
                    return;
                }
                // The view stored before the current one, as an old copy holds it.
                let older = history.iter().rev().find(|v| v.id < current.id).cloned();
                coord.counts.went_back += 1;
                coord.back = Some((now + for_ns, Some(current)));
                state.coordination.restore(older);
            }
            _ => {}
        }
    }

    /// The coordination service's calls due, and the end of a store gone back.
    fn coord_step(&mut self, now: u64) {
        let Some(state) = self.membership.as_mut() else {
            return;
        };
        let Some(coord) = state.coord.as_mut() else {
            return;
        };
        if coord.back.as_ref().is_some_and(|(until, _)| *until <= now) {
            let (_, saved) = coord.back.take().expect("a store gone back");
            // The operator restores the right copy (a swap made meanwhile would be a
            // second view of one id, which check (a) reports).
            if let Some(saved) = saved
                && state.coordination.current().is_none_or(|v| v.id < saved.id)
            {
                state.coordination.restore(Some(saved));
            }
        }
        let coord = state.coord.as_mut().expect("coordination faults");
        if !coord.pending.iter().any(|(at, ..)| *at <= now) {
            return;
        }
        let mut due = Vec::new();
        let lives: Vec<u64> = self.nodes.iter().map(|n| n.incarnation).collect();
        let paused: Vec<bool> = (0..self.nodes.len() as u16)
            .map(|n| now < self.sim.paused_until(n))
            .collect();
        coord.pending.retain(|(at, node, life, call)| {
            let n = usize::from(*node);
            if lives[n] != *life {
                return false;
            }
            if *at > now || paused[n] {
                return true;
            }
            due.push((*node, call.clone()));
            false
        });
        for (node, call) in due {
            if !self.is_up(node) {
                continue;
            }
            let local = self.sim.clock(node).local_ns(now);
            let state = self.membership.as_mut().expect("membership runs");
            let coord = state.coord.as_mut().expect("coordination faults");
            let down = now < coord.down_until;
            if down {
                coord.counts.unavailable += 1;
            }
            match call {
                CoordCall::Read => {
                    let read = if down {
                        Err(CoordinationError::Unavailable("down (simulated)".into()))
                    } else {
                        state.coordination.read()
                    };
                    if let Some(m) = self.nodes[usize::from(node)].membership.as_mut() {
                        m.handle_read(local, read);
                        if m.store_behind().is_some() {
                            coord.counts.found_behind += 1;
                        }
                    }
                }
                CoordCall::Cas { expected, next } => {
                    let unknown = !down && coord.rng.random_bool(coord.unknown);
                    let stored = unknown && coord.rng.random_bool(0.5);
                    let timed_out = || CoordinationError::Unknown("timed out (simulated)".into());
                    let result = if down {
                        Err(CoordinationError::Unavailable("down (simulated)".into()))
                    } else if unknown && !stored {
                        coord.counts.unknown_not_stored += 1;
                        Err(timed_out())
                    } else {
                        let result = self.store_cas(node, now, local, expected, &next);
                        if unknown {
                            let state = self.membership.as_mut().expect("membership runs");
                            state
                                .coord
                                .as_mut()
                                .expect("coordination faults")
                                .counts
                                .unknown_stored += 1;
                            Err(timed_out())
                        } else {
                            result
                        }
                    };
                    if let Some(m) = self.nodes[usize::from(node)].membership.as_mut() {
                        m.handle_cas(local, result);
                        if m.store_behind().is_some() {
                            let state = self.membership.as_mut().expect("membership runs");
                            let coord = state.coord.as_mut().expect("coordination faults");
                            coord.counts.found_behind += 1;
                        }
                    }
                }
            }
            self.drain(node, now);
        }
    }

    /// Tells node `node`'s membership that the views whose install delay is over have
    /// been installed (its workers have switched): it acknowledges them. Installs of an
    /// earlier life are dropped.
    fn installs_due(&mut self, node: u16, now: u64) {
        let incarnation = self.nodes[usize::from(node)].incarnation;
        let state = self.membership.as_mut().expect("membership runs");
        if state.installs_pending.is_empty() {
            return;
        }
        let mut due = Vec::new();
        state.installs_pending.retain(|&(at, n, life, id)| {
            if n != node || (at > now && life == incarnation) {
                return true;
            }
            if life == incarnation {
                due.push(id);
            }
            false
        });
        if due.is_empty() {
            return;
        }
        let local = self.sim.clock(node).local_ns(now);
        for id in due {
            if let Some(m) = self.nodes[usize::from(node)].membership.as_mut() {
                m.handle_installed(local, id);
            }
            self.drain(node, now);
        }
    }

    /// Gives node `node`'s membership its core's memory figures (which the core's worker
    /// 0 refreshes from its copies every `MEMORY_REFRESH_NS`), and its core the members
    /// the CM counts as full, as a real node's lease thread does.
    fn feed_memory(&mut self, node: u16) {
        let slot = &mut self.nodes[usize::from(node)];
        let (Some(core), Some(m)) = (slot.core.as_ref(), slot.membership.as_mut()) else {
            return;
        };
        let memory = core.memory();
        m.set_memory(memory.used(), memory.limit().unwrap_or(0));
        memory.set_over_nodes(&m.members_over());
    }

    /// Sets node `node`'s memory limit in bytes (0: none) on its core's budget now and on
    /// every later life's: its lease requests report it, and the CM places no new copy on
    /// it while it is full (1 byte: always, once it holds anything).
    pub fn set_memory_limit(&mut self, node: u16, limit: u64) {
        let slot = &mut self.nodes[usize::from(node)];
        slot.memory_limit = limit;
        if let Some(core) = &slot.core {
            core.memory().set_limit(limit);
        }
    }

    /// LOCKs refused for memory over the run, by every life of every node.
    pub fn locks_refused_memory(&self) -> u64 {
        self.retired_locks_refused_memory
            + self
                .participants()
                .map(|p| p.borrow().stats().locks_refused_memory)
                .sum::<u64>()
    }

    /// Nodes with a memory limit.
    pub fn memory_limited(&self) -> Vec<u16> {
        (0..self.node_count())
            .filter(|&n| self.nodes[usize::from(n)].memory_limit > 0)
            .collect()
    }

    /// Node `node`'s memory budget, while it runs.
    pub fn memory(&self, node: u16) -> Option<&Arc<ferrotx_store::Memory>> {
        self.nodes[usize::from(node)]
            .core
            .as_ref()
            .map(NodeCore::memory)
    }

    /// Delivers node `node`'s lease datagrams and runs its timers at `now`.
    fn drive(&mut self, node: u16, now: u64) {
        let local = self.sim.clock(node).local_ns(now);
        self.feed_memory(node);
        let datagrams = self
            .sim
            .network
            .borrow_mut()
            .take_inbox(lease_endpoint(node));
        let delivered = !datagrams.is_empty();
        for (_, mut bytes) in datagrams {
            let answer = self
                .plot
                .as_ref()
                .and_then(|p| p.reply_to_round(node, &bytes));
            let Some(m) = self.nodes[usize::from(node)].membership.as_mut() else {
                return;
            };
            m.handle_datagram(local, &mut bytes);
            self.drain(node, now);
            if let Some(from) = answer
                && self.first_reply_of_join_probe(now, node, from)
            {
                // Cut off between two answers: the rest of this instant's datagrams
                // arrive after the cut, which drops them.
                break;
            }
        }
        let strict = self.membership.as_ref().is_some_and(|s| s.strict_ticks);
        let slot = &mut self.nodes[usize::from(node)];
        let Some(m) = slot.membership.as_mut() else {
            return;
        };
        // As a real node's lease thread does: the backups filled whole, when that changed.
        if let (Some(view), Some(core)) = (m.view(), slot.core.as_ref()) {
            let seen = (view.id, core.fills_done());
            if seen != slot.fills_reported {
                slot.fills_reported = seen;
                let filled = core.filled(view);
                m.handle_filled(local, &filled);
            }
        }
        if m.poll_timeout() <= local || (delivered && !strict) {
            m.handle_timeout(local);
        }
        self.drain(node, now);
    }

    /// Whether every node is up, a member of the committed view of the highest id, and
    /// has its workers: the cluster has bootstrapped and serves.
    pub fn converged(&self) -> bool {
        let Some(state) = &self.membership else {
            return true;
        };
        if !state.restarts_pending.is_empty() {
            return false;
        }
        let Some(current) = state.coordination.current() else {
            return false;
        };
        let now = self.sim.now_ns();
        for node in 0..self.node_count() {
            let slot = &self.nodes[usize::from(node)];
            let member = current.is_member(node, slot.incarnation);
            if !slot.up {
                if current.incarnation(node).is_some() {
                    return false;
                }
                continue;
            }
            let Some(m) = &slot.membership else {
                return false;
            };
            let local = self.sim.clock(node).local_ns(now);
            if !member
                || m.phase() != Phase::Member
                || m.view().map(|v| v.id) != Some(current.id)
                || m.serving_until() <= local
                || slot.core.is_none()
            {
                return false;
            }
        }
        true
    }

    /// One instant of a cluster running membership: supervisor restarts due, every
    /// running node's membership, every worker, the workers' hints, then the checks.
    /// Returns the time of the next thing to happen.
    fn step_with_membership(&mut self, now: u64) -> Option<u64> {
        self.rejoin_damaged();
        let state = self.membership.as_mut().expect("membership runs");
        let due: Vec<u16> = state
            .restarts_pending
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, n)| *n)
            .collect();
        state.restarts_pending.retain(|(at, _)| *at > now);
        for node in due {
            if !self.is_up(node) {
                self.restarts += 1;
                self.start(node);
            }
        }
        self.coord_step(now);
        for node in 0..self.node_count() {
            if self.is_up(node) && now >= self.sim.paused_until(node) {
                self.installs_due(node, now);
                self.drive(node, now);
            }
        }
        self.attack_step(now);
        self.plot_step(now);
        let mut next = self.sim.step_workers();
        if let Some((at, endpoint, point)) = self.sim.trap_hit.take() {
            self.trap_sprung(at, endpoint, point);
        }
        let events = self.sim.events.len();
        let seen = self.membership.as_ref().map_or(0, |s| s.events_seen);
        for i in seen..events {
            let (_, endpoint, event) = &self.sim.events[i];
            if let Event::NewerConfiguration(id) = event {
                let (node, id) = (endpoint.node(), *id);
                let local = self.sim.clock(node).local_ns(now);
                if now < self.sim.paused_until(node) {
                    continue;
                }
                if let Some(m) = self.nodes[usize::from(node)].membership.as_mut() {
                    m.handle_newer_config(local, id.get());
                    self.membership.as_mut().expect("membership runs").hints += 1;
                    self.drain(node, now);
                }
            }
        }
        self.membership
            .as_mut()
            .expect("membership runs")
            .events_seen = events;
        self.check_serving(now);
        let state = self.membership.as_ref().expect("membership runs");
        let mut consider = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        for (at, _) in &state.restarts_pending {
            consider(*at);
        }
        if let Some(coord) = &state.coord {
            for (at, ..) in &coord.pending {
                // One due while its node is paused waits for the pause's end.
                if *at > now {
                    consider(*at);
                }
            }
            if let Some((until, _)) = &coord.back {
                consider(*until);
            }
        }
        for (at, _, _, _) in &state.installs_pending {
            // One due while its node is paused waits for the pause's end (considered
            // below).
            if *at > now {
                consider(*at);
            }
        }
        for (at, _) in &self.scheduled {
            consider(*at);
        }
        if let Some(plot) = &self.plot {
            if let Some((at, _)) = plot.due {
                consider(at);
            }
            if plot.pending() && !plot.cued {
                consider(plot.expires_ns());
            }
        }
        for node in 0..self.node_count() {
            let Some(m) = self.nodes[usize::from(node)].membership.as_mut() else {
                continue;
            };
            let paused_until = self.sim.paused_until(node);
            if now < paused_until {
                consider(paused_until);
            } else {
                consider(self.sim.clock(node).global_ns(m.poll_timeout()));
            }
        }
        next
    }

    /// Check (b), and the convergence time for (c).
    fn check_serving(&mut self, now: u64) {
        let mut outside = Vec::new();
        let state = self.membership.as_ref().expect("membership runs");
        for node in 0..self.node_count() {
            let Some(m) = &self.nodes[usize::from(node)].membership else {
                continue;
            };
            let local = self.sim.clock(node).local_ns(now);
            let until = m.serving_until();
            let view = m.view().map(|v| v.id);
            if until > local && view != Some(state.committed_max) {
                outside.push((node, view, until, local));
            }
        }
        let converged = state.faults_over_ns.is_some_and(|t| now >= t)
            && state.converged_ns.is_none()
            && self.converged();
        let state = self.membership.as_mut().expect("membership runs");
        for (node, view, until, local) in outside {
            state.serving_outside(now, node, view, until, local);
        }
        if converged {
            state.converged_ns = Some(now);
        }
        state.steps += 1;
    }

    /// Coroutines that have not finished, on the nodes that are up.
    pub fn coroutines_live(&self) -> usize {
        self.sim.workers.iter().map(|w| w.coroutines_live()).sum()
    }

    /// The workers with client coroutines still running, and how many each has.
    pub fn coroutines_live_at(&self) -> Vec<(EndpointId, usize)> {
        self.sim
            .workers
            .iter()
            .filter(|w| w.coroutines_live() > 0)
            .map(|w| (w.transport().local(), w.coroutines_live()))
            .collect()
    }

    /// Runs until simulated time `until_ns` (or until nothing is left to happen; with
    /// membership, until the step bound is reached).
    pub fn run_until(&mut self, until_ns: u64) -> u64 {
        // In `sync` mode, a power cut is checked at instants a fixed step apart: the run
        // stops there, checks, and goes on (nothing is changed).
        loop {
            // Time may have been moved on past a probe while nothing ran (every node
            // down): the next probe is now.
            self.next_power_cut_probe = self.next_power_cut_probe.max(self.sim.now_ns());
            let probe = self
                .disks
                .as_ref()
                .filter(|d| d.mode.wait)
                .map(|_| self.next_power_cut_probe);
            match probe {
                Some(at) if at <= until_ns => {
                    let reached = self.run_until_unprobed(at);
                    if self.disk_violations.len() < 5 {
                        let lost = self.power_cut_check();
                        self.disk_violations.extend(
                            lost.into_iter().take(5).map(|what| {
                                format!("power cut at {} ns: {what}", self.sim.now_ns())
                            }),
                        );
                    }
                    self.power_cut_probes += 1;
                    self.next_power_cut_probe = at + POWER_CUT_PROBE_NS;
                    if reached < at {
                        return reached;
                    }
                }
                _ => return self.run_until_unprobed(until_ns),
            }
        }
    }

    fn run_until_unprobed(&mut self, until_ns: u64) -> u64 {
        if self.membership.is_none() {
            return self.sim.run_until(until_ns);
        }
        loop {
            let now = self.sim.now_ns();
            let next = self.step_with_membership(now);
            let state = self.membership.as_ref().expect("membership runs");
            if state.steps >= state.steps_max {
                return now;
            }
            let Some(next) = self.sim.next_event_ns(next) else {
                return now;
            };
            if next > until_ns {
                self.sim.network.borrow_mut().advance(until_ns);
                return until_ns;
            }
            self.sim.network.borrow_mut().advance(next.max(now + 1));
        }
    }

    /// Whether the run hit the membership step bound.
    pub fn out_of_steps(&self) -> bool {
        self.membership
            .as_ref()
            .is_some_and(|s| s.steps >= s.steps_max)
    }
}

/// Adds `b`'s counters to `a`.
fn add_recovery(a: &mut RecoveryStats, b: &RecoveryStats) {
    a.rounds += b.rounds;
    a.committed += b.committed;
    a.aborted += b.aborted;
    a.waited += b.waited;
    for (x, y) in a.votes.iter_mut().zip(b.votes) {
        *x += y;
    }
}

fn add_checkpoints(
    total: &mut ferrotx_txn::checkpoint::CheckpointStats,
    more: &ferrotx_txn::checkpoint::CheckpointStats,
) {
    total.started += more.started;
    total.completed += more.completed;
    total.abandoned += more.abandoned;
    total.pages += more.pages;
    total.objects += more.objects;
    total.bytes += more.bytes;
}
