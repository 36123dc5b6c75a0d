//! A whole cluster of real node cores in one thread: built from a [`Configuration`], so
//! the simulator runs the placement, key hash, locality hints and partition map that
//! production runs, over the simulated network and clocks; nodes can be paused, crashed
//! (their memory is gone) and restarted as new incarnations.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_cluster::Configuration;
use ferrotx_exec::Co;
use ferrotx_node::{ClusterPlacement, CoreOptions, CoreWorker, NodeCore};
use ferrotx_store::{Key, Partition, PartitionId, TableId};
use ferrotx_transport::Transport;
use ferrotx_txn::coordinator::{Coordinator, Placement};
use ferrotx_txn::participant::{Participant, Role};
use ferrotx_wire::EndpointId;

use crate::network::{Faults, SimNetwork};
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
}

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
    /// Pauses so far.
    pub pauses: u64,
}

impl SimCluster {
    /// Starts every member of `config` (node ids 0 to n-1) on a simulated network whose
    /// faults come from `seed`, each worker built with `options`.
    ///
    /// # Panics
    ///
    /// If the members are not numbered 0 to n-1.
    pub fn new(config: Configuration, options: CoreOptions, seed: u64, faults: Faults) -> Self {
        let config = Arc::new(config);
        for (i, member) in config.members().iter().enumerate() {
            assert_eq!(usize::from(member.node), i, "members numbered from 0");
        }
        let network = SimNetwork::new(seed, faults);
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
                })
                .collect(),
            placement: ClusterPlacement::new(config.clone(), None),
            config,
            options,
            crashes: 0,
            restarts: 0,
            pauses: 0,
        };
        for node in 0..cluster.node_count() {
            cluster.start(node);
        }
        cluster
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
        self.core(node).is_some()
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
        for node in self.nodes.iter().filter_map(|n| n.core.as_ref()) {
            node.load(table, key, value).expect("loading a valid key");
        }
    }

    /// Every copy of `partition` on a node that is up, the primary first (by the
    /// configuration's partition map), with its node and role.
    pub fn copies_of(&self, partition: PartitionId) -> Vec<(u16, Role, &Partition)> {
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
        let slot = &mut self.nodes[usize::from(node)];
        if slot.core.take().is_none() {
            return;
        }
        self.crashes += 1;
        slot.coordinators.clear();
        slot.participants.clear();
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
    }

    /// Restarts a crashed node as its next incarnation: empty partitions, new workers,
    /// nothing of its earlier life. Does nothing if it is up.
    pub fn restart(&mut self, node: u16) {
        if self.is_up(node) {
            return;
        }
        self.restarts += 1;
        self.start(node);
    }

    fn start(&mut self, node: u16) {
        let slot = &mut self.nodes[usize::from(node)];
        assert!(slot.core.is_none());
        slot.incarnation += 1;
        let core = NodeCore::new(self.config.clone(), node, slot.incarnation);
        for thread in 0..self.config.threads_per_node() {
            let local = EndpointId::new(node, thread);
            let transport = SimNetwork::endpoint(&self.sim.network, local);
            let CoreWorker {
                worker,
                coordinator,
                participant,
            } = core.worker(thread, transport, &self.options);
            slot.coordinators.push(coordinator);
            slot.participants.push(participant);
            self.sim.workers.push(worker);
        }
        slot.core = Some(core);
    }

    /// Coroutines that have not finished, on the nodes that are up.
    pub fn coroutines_live(&self) -> usize {
        self.sim.workers.iter().map(|w| w.coroutines_live()).sum()
    }

    /// Runs until simulated time `until_ns` (or until nothing is left to happen).
    pub fn run_until(&mut self, until_ns: u64) -> u64 {
        self.sim.run_until(until_ns)
    }
}
