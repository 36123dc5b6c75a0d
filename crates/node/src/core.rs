//! The deterministic core of a node, shared by the real node and the simulator.
//!
//! [`NodeCore::new`] builds a node's partitions from a [`Configuration`]: the copies the
//! partition map gives it, empty, with the configuration's schema. [`NodeCore::worker`]
//! then assembles one worker thread's endpoint over any [`Transport`]: its RPC engine,
//! its participant (the handlers of the commit protocol, over the node's partitions) and
//! its coordinator (which places keys with the configuration's key hash, locality hints
//! and partition map). Nothing here reads a clock, draws randomness or opens a socket:
//! [`Node::start`](crate::Node::start) runs the workers on OS threads with UDP or
//! in-process queues and the real clock, and the simulator runs the same workers in one
//! thread over its simulated network and time.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_cluster::Configuration;
use ferrotx_rpc::{Config, Engine};
use ferrotx_store::{Key, Partition, PartitionId, StoreError, TableId, TableSpec};
use ferrotx_transport::Transport;
use ferrotx_txn::coordinator::{Coordinator, Placement};
use ferrotx_txn::participant::{LOG_RECORDS_MAX, NodeStore, Participant, Role};
use ferrotx_wire::EndpointId;

use crate::placement::ClusterPlacement;
use crate::worker::Worker;

/// How a node core builds its workers.
#[derive(Clone, Debug)]
pub struct CoreOptions {
    /// Coroutine slots per worker (FaSST: about 20 hide the network's latency).
    pub coroutines: usize,
    /// The RPC engine's settings; the core sets the endpoint's configuration id,
    /// incarnation and callers (`coroutines`) itself.
    pub rpc: Config,
    /// Records each coordinator thread may keep in one backup's log (FaRM's log
    /// reservations); small values make commits wait for log space, which the simulator
    /// uses to test it.
    pub log_records_max: usize,
}

impl Default for CoreOptions {
    fn default() -> Self {
        Self {
            coroutines: 20,
            rpc: Config::default(),
            log_records_max: LOG_RECORDS_MAX,
        }
    }
}

/// One worker's endpoint, assembled by [`NodeCore::worker`]: the worker to step, and the
/// coordinator its coroutines run transactions with.
pub struct CoreWorker<T: Transport> {
    /// The event loop: transport, RPC engine, executor.
    pub worker: Worker<T>,
    /// The coordinator of this thread's coroutines.
    pub coordinator: Rc<Coordinator>,
    /// The participant answering this endpoint's requests (for its counters).
    pub participant: Rc<RefCell<Participant>>,
}

/// A node's partitions, built from its configuration, and the way to assemble its
/// workers. Cheap to clone: the partitions are shared, as the worker threads of one node
/// share them.
#[derive(Clone)]
pub struct NodeCore {
    node: u16,
    incarnation: u64,
    config: Arc<Configuration>,
    schema: Arc<[TableSpec]>,
    placement: Arc<ClusterPlacement>,
    store: Arc<NodeStore>,
    /// The copies this node hosts: partition, role, data.
    copies: Arc<[(PartitionId, Role, Arc<Partition>)]>,
}

impl NodeCore {
    /// The core of node `node` of `config` in its life `incarnation` (which must grow
    /// with every start of the node): every copy the partition map gives it, empty.
    ///
    /// # Panics
    ///
    /// If `node` is not a member of `config`, or `incarnation` is 0.
    pub fn new(config: Arc<Configuration>, node: u16, incarnation: u64) -> Self {
        assert!(config.member(node).is_some(), "node {node} is not a member");
        assert!(incarnation > 0, "incarnations start at 1");
        let schema: Arc<[TableSpec]> = Arc::from(config.tables().to_vec());
        let mut store = NodeStore::new();
        let mut copies = Vec::new();
        for (id, replicas) in config.partitions().iter() {
            for (i, replica) in replicas.nodes().enumerate() {
                if replica == node {
                    let role = if i == 0 { Role::Primary } else { Role::Backup };
                    let partition = Arc::new(Partition::new(id, &schema));
                    store.host(role, partition.clone());
                    copies.push((id, role, partition));
                }
            }
        }
        Self {
            node,
            incarnation,
            placement: Arc::new(ClusterPlacement(config.clone())),
            config,
            schema,
            store: Arc::new(store),
            copies: copies.into(),
        }
    }

    /// The node's id.
    pub fn id(&self) -> u16 {
        self.node
    }

    /// This life's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<Configuration> {
        &self.config
    }

    /// Assembles worker thread `thread` over `transport`: an RPC engine for the
    /// transport's endpoint, the participant over this node's partitions, registered
    /// with the engine, and a coordinator placing keys by the configuration.
    ///
    /// # Panics
    ///
    /// If `transport` is not endpoint (`node`, `thread`).
    pub fn worker<T: Transport>(
        &self,
        thread: u16,
        transport: T,
        options: &CoreOptions,
    ) -> CoreWorker<T> {
        let local = EndpointId::new(self.node, thread);
        assert_eq!(transport.local(), local, "a transport of another endpoint");
        assert!(thread < self.config.threads_per_node());
        let mut engine = Engine::new(
            local,
            Config {
                configuration: self.config.id(),
                incarnation: self.incarnation,
                callers: options.coroutines,
                ..options.rpc.clone()
            },
        );
        let participant = Rc::new(RefCell::new(Participant::new(self.store.clone())));
        Participant::register(&participant, &mut engine);
        let placement: Arc<dyn Placement> = self.placement.clone();
        let coordinator = Rc::new(
            Coordinator::new(
                local,
                self.config.id(),
                self.incarnation,
                participant.clone(),
                placement,
                self.schema.clone(),
            )
            .with_log_records_max(options.log_records_max),
        );
        CoreWorker {
            worker: Worker::new(transport, engine),
            coordinator,
            participant,
        }
    }

    /// The partition of `key` of `table`.
    pub fn partition_of(&self, table: TableId, key: &Key) -> PartitionId {
        PartitionId(self.placement.partition_of(table, key))
    }

    /// Stores `value` under `key` in this node's copies of its partition, at version 1.
    /// For loading before transactions run: every node loads the same data, each keeping
    /// the keys of the partitions it hosts. Returns whether this node hosts the key (and
    /// it was absent).
    pub fn load(&self, table: TableId, key: Key, value: &[u8]) -> Result<bool, StoreError> {
        let partition = self.partition_of(table, &key);
        let mut stored = false;
        for (_, _, copy) in self.copies.iter().filter(|(id, _, _)| *id == partition) {
            stored = copy.load(table, key, value)?;
        }
        Ok(stored)
    }

    /// Stores `value` under `key` in this node's copy of its partition if this node is its
    /// `role` (primary or backup), at version 1; returns whether it did.
    pub fn load_as(
        &self,
        role: Role,
        table: TableId,
        key: Key,
        value: &[u8],
    ) -> Result<bool, StoreError> {
        let partition = self.partition_of(table, &key);
        match self.copy(partition, role) {
            Some(copy) => copy.load(table, key, value),
            None => Ok(false),
        }
    }

    /// The copies of partitions this node hosts, with its role for each.
    pub fn copies(&self) -> impl Iterator<Item = (PartitionId, Role, &Partition)> + '_ {
        self.copies.iter().map(|(id, role, p)| (*id, *role, &**p))
    }

    /// This node's copy of `partition` in `role`, if it hosts one.
    pub fn copy(&self, partition: PartitionId, role: Role) -> Option<&Partition> {
        self.copies
            .iter()
            .find(|(id, r, _)| *id == partition && *r == role)
            .map(|(_, _, p)| &**p)
    }
}
