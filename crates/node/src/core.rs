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
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, Weak};

use ferrotx_cluster::{Configuration, View};
use ferrotx_rpc::{Config, Engine};
use ferrotx_store::{Epoch, Key, Memory, Partition, PartitionId, StoreError, TableId, TableSpec};
use ferrotx_transport::Transport;
use ferrotx_txn::checkpoint::{CheckpointOptions, Checkpoints, run_checkpoints};
use ferrotx_txn::coordinator::{Coordinator, Placement, REFILL_SLOTS, RefillThread};
use ferrotx_txn::durable::{CommitLog, LogMode};
use ferrotx_txn::participant::{LOG_RECORDS_MAX, NodeStore, Participant, Role};
use ferrotx_txn::reclaim::ReclaimOptions;
use ferrotx_txn::refill::{Fill, FillProgress, RefillOptions};
use ferrotx_txn::ship::{Executors, Procedures, Shipping};
use ferrotx_wire::{EndpointId, ViewId};

use crate::copies::{CopiesError, CopyDigests, ViewStore, digests_of_view_store};
use crate::placement::ClusterPlacement;
use crate::worker::Worker;

/// How often a node sums its copies' bytes for its memory figures ([`NodeCore::memory`]):
/// a write may pass the limit by what the node stores in this time.
pub const MEMORY_REFRESH_NS: u64 = 10_000_000;

/// Slots of an index growth under way that each refresh of the memory figures moves on,
/// per table: a few microseconds under the table's lock.
const SETTLE_SLOTS: usize = 4096;

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
    /// The operations callers may ship to this node's primaries ([`ferrotx_txn::ship`]):
    /// the Redis front end registers its commands here.
    pub procedures: Procedures,
    /// How each worker runs shipped operations' batches.
    pub ship_executors: Executors,
    /// How new backups are filled (data recovery).
    pub refill: RefillOptions,
    /// How deleted objects are reclaimed ([`ferrotx_txn::reclaim`]).
    pub reclaim: ReclaimOptions,
    /// When the node checkpoints its copies into its logs (`flush` and `sync` modes,
    /// [`ferrotx_txn::checkpoint`]).
    pub checkpoint: CheckpointOptions,
}

impl Default for CoreOptions {
    fn default() -> Self {
        Self {
            coroutines: 20,
            rpc: Config::default(),
            log_records_max: LOG_RECORDS_MAX,
            procedures: Procedures::default(),
            ship_executors: Executors::default(),
            refill: RefillOptions::default(),
            reclaim: ReclaimOptions::default(),
            checkpoint: CheckpointOptions::default(),
        }
    }
}

impl<T: Transport> CoreWorker<T> {
    /// The configuration switched to is committed: new transactions may start.
    pub fn commit_configuration(&self) {
        self.coordinator.set_accepting(true);
        self.worker.shared().notify_all(self.coordinator.opened());
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

/// One partition copy a node hosts: the partition, its role (in the view it was made
/// for) and its data.
pub type HostedCopy = (PartitionId, Role, Arc<Partition>);

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
    /// The copies this node hosts: partition, role (in the view it was made for), data.
    /// Data recovery adds backups; a copy the newest view no longer gives the node is
    /// dropped.
    copies: Arc<Mutex<Vec<HostedCopy>>>,
    /// The backups this node fills (data recovery), kept across views while they stay
    /// filling.
    fills: Arc<Mutex<BTreeMap<u32, Arc<Fill>>>>,
    /// The store of the last view switched to, shared by the node's threads (its
    /// recovery blocks count them): the view's id and the store.
    view_store: Arc<ViewStore>,
    /// The node's memory figures and limit (`maxmemory`), refreshed from its copies.
    memory: Arc<Memory>,
    /// The epoch its partitions' lookups pin: the process's, or a simulation's own.
    epoch: Epoch,
    /// What its workers share of its checkpoints ([`ferrotx_txn::checkpoint`]).
    checkpoints: Arc<Checkpoints>,
}

impl NodeCore {
    /// The core of node `node` of `config` in its life `incarnation` (which must grow
    /// with every start of the node): every copy the partition map gives it, empty.
    ///
    /// # Panics
    ///
    /// If `node` is not a member of `config`, or `incarnation` is 0.
    pub fn new(config: Arc<Configuration>, node: u16, incarnation: u64) -> Self {
        Self::new_in(config, node, incarnation, Epoch::process())
    }

    /// [`NodeCore::new`] with partitions whose lookups pin `epoch` (a simulation gives
    /// each cluster its own, so that a run replays whatever else the process runs).
    pub fn new_in(config: Arc<Configuration>, node: u16, incarnation: u64, epoch: Epoch) -> Self {
        assert!(config.member(node).is_some(), "node {node} is not a member");
        assert!(incarnation > 0, "incarnations start at 1");
        // The configuration file's map, as the first view of a cluster would give it.
        let members = config
            .members()
            .iter()
            .map(|m| ferrotx_cluster::ViewMember {
                node: m.node,
                incarnation: if m.node == node { incarnation } else { 1 },
            })
            .collect();
        let first = View::initial(config.id(), &config, members);
        let core = Self::from_view_in(config.clone(), &first, node, incarnation, epoch);
        Self {
            placement: Arc::new(ClusterPlacement::new(config, None)),
            ..core
        }
    }

    /// The core of node `node` in its life `incarnation`, admitted into `view`: the copies
    /// the view gives it, empty (none for a life admitted into a running cluster, which
    /// holds no partition until data recovery gives it some).
    ///
    /// # Panics
    ///
    /// If (`node`, `incarnation`) is not a member of `view`.
    pub fn from_view(config: Arc<Configuration>, view: &View, node: u16, incarnation: u64) -> Self {
        Self::from_view_in(config, view, node, incarnation, Epoch::process())
    }

    /// [`NodeCore::from_view`] with partitions whose lookups pin `epoch` (see
    /// [`NodeCore::new_in`]).
    pub fn from_view_in(
        config: Arc<Configuration>,
        view: &View,
        node: u16,
        incarnation: u64,
        epoch: Epoch,
    ) -> Self {
        Self::from_view_loaded(config, view, node, incarnation, epoch, &[])
    }

    /// [`NodeCore::from_view_in`] for a life that loaded copies from its data directory
    /// (issue 32: [`crate::restore`]): the copies `view` gives it are the `loaded` ones
    /// where it has them (empty where not), and each partition it is primary of is
    /// blocked until this view's transaction-state recovery is done, as a promoted
    /// backup's is (the loaded copy's locks in doubt may lack what another copy logged).
    /// With nothing `loaded`, exactly [`NodeCore::from_view_in`].
    pub fn from_view_loaded(
        config: Arc<Configuration>,
        view: &View,
        node: u16,
        incarnation: u64,
        epoch: Epoch,
        loaded: &[(PartitionId, Role, Arc<Partition>)],
    ) -> Self {
        assert!(
            view.is_member(node, incarnation),
            "node {node} is not a member of view {}",
            view.id
        );
        let schema: Arc<[TableSpec]> = Arc::from(config.tables().to_vec());
        let mut copies = Vec::new();
        for (index, nodes) in view.copies.iter().enumerate() {
            let id = PartitionId(u32::try_from(index).expect("at most PARTITIONS_MAX partitions"));
            if let Some(i) = nodes.iter().position(|&n| n == node) {
                let role = if i == 0 { Role::Primary } else { Role::Backup };
                let partition = loaded.iter().find(|(p, _, _)| *p == id).map_or_else(
                    || Arc::new(Partition::with_epoch(id, &schema, &epoch)),
                    |(_, _, partition)| partition.clone(),
                );
                copies.push((id, role, partition));
            }
        }
        let empty = Arc::new(NodeStore::new());
        let config_threads = config.threads_per_node();
        let mut core = Self {
            node,
            incarnation,
            placement: Arc::new(ClusterPlacement::new(config.clone(), Some(view))),
            config,
            schema,
            view_store: Arc::new(Mutex::new((view.id, empty.clone()))),
            store: empty,
            copies: Arc::new(Mutex::new(copies)),
            fills: Arc::new(Mutex::new(BTreeMap::new())),
            memory: Arc::new(Memory::unlimited()),
            checkpoints: Arc::new(Checkpoints::new(config_threads)),
            epoch,
        };
        // The view's copies, and the backups it has this node fill.
        let mut store = core.build_store(view, true);
        if !loaded.is_empty() {
            let threads = u32::from(core.config.threads_per_node());
            let primaries: Vec<u32> = store
                .hosted()
                .filter(|&(_, role)| role == Role::Primary)
                .map(|(p, _)| p)
                .collect();
            for p in primaries {
                store.block(p, threads);
            }
        }
        let store = Arc::new(store);
        *core.view_store.lock().expect("view store lock") = (view.id, store.clone());
        core.store = store;
        core
    }

    /// The node's partitions with their roles in `view` (a backup promoted where the
    /// primary was lost); copies the view no longer gives this node are left out.
    pub fn store_for(&self, view: &View) -> Arc<NodeStore> {
        let mut cached = self.view_store.lock().expect("view store lock");
        if cached.0 == view.id {
            return cached.1.clone();
        }
        if view.id < cached.0 {
            // A thread late to switch to a view the node has left already: it switches
            // again at once. Its store is its own (not cached: the node's threads must
            // share the newest view's, whose blocks count them).
            // It creates no fill: the node's fills follow its newest view.
            return Arc::new(self.build_store(view, false));
        }
        let previous = cached.1.clone();
        if view.id > cached.0 + 1 {
            // The node skipped views: its fills may have been dropped in one of them and
            // given again since, and commits made there were not sent to it. A view that
            // names this node is committed only once its workers switched to it, so the
            // views skipped were not committed or did not have this life as a member (it
            // was suspended, and this view readmits it). Either way its fills start again
            // from nothing (`build_store` makes a new copy for a fill it lacks): kept,
            // their copies lack what those views committed, and a fill already done (or
            // past a key) would be counted without it (membership-random-writes seeds
            // 1626 and 2850).
            self.fills.lock().expect("fills lock").clear();
        }
        let mut store = self.build_store(view, true);
        // The newest view: copies it does not give this node are dropped, and so are
        // fills it no longer names.
        self.copies
            .lock()
            .expect("copies lock")
            .retain(|(id, _, _)| view.holds(id.0, self.node));
        self.fills
            .lock()
            .expect("fills lock")
            .retain(|&p, _| view.filling(p).contains(&self.node));
        // A partition this node becomes primary of (a promoted backup) is blocked until
        // every thread's recovery decided the transactions that wrote it.
        let threads = u32::from(self.config.threads_per_node());
        // So is one still blocked in the previous view (its recovery was cut short by
        // this change): it stays blocked until this view's recovery is done.
        let promoted: Vec<u32> = store
            .hosted()
            .filter(|&(p, role)| {
                role == Role::Primary
                    && (previous.get(p, Role::Backup).is_some() || previous.is_recovering(p))
            })
            .map(|(p, _)| p)
            .collect();
        for p in promoted {
            store.block(p, threads);
        }
        let store = Arc::new(store);
        *cached = (view.id, store.clone());
        store
    }

    /// The store of `view`; `create`: start the fills it names that this node lacks
    /// (false for a view older than the newest, whose fills may have been counted or
    /// dropped since).
    fn build_store(&self, view: &View, create: bool) -> NodeStore {
        let mut store = NodeStore::new();
        let mut copies = self.copies.lock().expect("copies lock");
        for (id, _, partition) in copies.iter() {
            let Some(nodes) = view.copies.get(id.0 as usize) else {
                continue;
            };
            if let Some(i) = nodes.iter().position(|&n| n == self.node) {
                let role = if i == 0 { Role::Primary } else { Role::Backup };
                store.host(role, partition.clone());
            }
        }
        // Backups to fill: hosted as backups, empty the first time (data recovery).
        let mut fills = self.fills.lock().expect("fills lock");
        for (p, _) in view.fills().filter(|&(_, n)| n == self.node) {
            let found = copies.iter().find(|(id, _, _)| id.0 == p);
            let (partition, fill) = match (found, fills.get(&p)) {
                (Some((_, _, partition)), Some(fill)) => (partition.clone(), fill.clone()),
                _ if !create => continue,
                _ => {
                    // A fill starts from nothing: a copy this node holds without a fill of
                    // it is left from a view it no longer served (it was cut off, the
                    // partition moved on without it), and stale; so is a fill of a copy
                    // it no longer holds.
                    let partition = Arc::new(Partition::with_epoch(
                        PartitionId(p),
                        &self.schema,
                        &self.epoch,
                    ));
                    copies.retain(|(id, _, _)| id.0 != p);
                    copies.push((PartitionId(p), Role::Backup, partition.clone()));
                    let fill = Arc::new(Fill::new(p));
                    fills.insert(p, fill.clone());
                    (partition, fill)
                }
            };
            store.host_filling(partition, fill);
        }
        store
    }

    /// The partitions this node has filled whole and `view` still has it fill: to report
    /// to the CM.
    pub fn filled(&self, view: &View) -> Vec<u32> {
        self.fills
            .lock()
            .expect("fills lock")
            .iter()
            .filter(|(p, f)| f.is_done() && view.filling(**p).contains(&self.node))
            .map(|(p, _)| *p)
            .collect()
    }

    /// How many of this node's fills are done (cheap: to notice a change).
    pub fn fills_done(&self) -> usize {
        self.fills
            .lock()
            .expect("fills lock")
            .values()
            .filter(|f| f.is_done())
            .count()
    }

    /// [`Self::fills_done`], or `None` at once if another thread holds the fills (the
    /// lease thread, at real-time priority, never waits for a lock a worker may hold
    /// while it is preempted).
    pub fn try_fills_done(&self) -> Option<usize> {
        let fills = self.fills.try_lock().ok()?;
        Some(fills.values().filter(|f| f.is_done()).count())
    }

    /// [`Self::fill_progress`] into `out` (cleared first; no allocation once it has the
    /// room), or false at once if another thread holds the fills.
    pub fn try_fill_progress_into(&self, out: &mut Vec<FillProgress>) -> bool {
        let Ok(fills) = self.fills.try_lock() else {
            return false;
        };
        out.clear();
        out.extend(fills.values().map(|f| f.progress()));
        true
    }

    /// The progress of every backup this node is filling.
    pub fn fill_progress(&self) -> Vec<FillProgress> {
        self.fills
            .lock()
            .expect("fills lock")
            .values()
            .map(|f| f.progress())
            .collect()
    }

    /// This node's role for `partition` in `view`, if it holds a copy there.
    pub fn role_in(&self, view: &View, partition: PartitionId) -> Option<Role> {
        let nodes = view.copies.get(partition.0 as usize)?;
        let i = nodes.iter().position(|&n| n == self.node)?;
        self.copies
            .lock()
            .expect("copies lock")
            .iter()
            .any(|(id, _, _)| *id == partition)
            .then_some(if i == 0 { Role::Primary } else { Role::Backup })
    }

    /// The placement of keys in `view`.
    pub fn placement_for(&self, view: &View) -> Arc<dyn Placement> {
        Arc::new(ClusterPlacement::new(self.config.clone(), Some(view)))
    }

    /// Switches worker `worker` to `view` at `now_ns` (FaRM 5.2 step 6): its engine
    /// talks only to the view's members and fails every call outstanding under the old
    /// configuration; its coordinator places keys by the view and stops starting
    /// transactions until [`CoreWorker::commit_configuration`]; its participant serves
    /// the roles of the view.
    pub fn switch_worker<T: Transport>(
        &self,
        worker: &mut CoreWorker<T>,
        now_ns: u64,
        view: &View,
    ) {
        self.switch_parts(&mut worker.worker, &worker.coordinator, now_ns, view);
    }

    /// [`NodeCore::switch_worker`] for a worker whose parts are held apart.
    pub fn switch_parts<T: Transport>(
        &self,
        worker: &mut Worker<T>,
        coordinator: &Coordinator,
        now_ns: u64,
        view: &View,
    ) {
        let members: Vec<(u16, u64)> = view
            .members
            .iter()
            .map(|m| (m.node, m.incarnation))
            .collect();
        worker
            .executor()
            .shared()
            .engine()
            .switch_configuration(now_ns, ViewId(view.id), &members);
        coordinator.set_accepting(false);
        coordinator.switch_configuration(
            ViewId(view.id),
            members.into(),
            self.placement_for(view),
            self.store_for(view),
        );
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
        self.worker_logged(thread, transport, options, None)
    }

    /// [`NodeCore::worker`], whose participant logs to `log` (issue 32: `flush` and
    /// `sync` modes; [`ferrotx_txn::durable`]).
    pub fn worker_logged<T: Transport>(
        &self,
        thread: u16,
        transport: T,
        options: &CoreOptions,
        log: Option<(Box<dyn CommitLog>, LogMode)>,
    ) -> CoreWorker<T> {
        let local = EndpointId::new(self.node, thread);
        assert_eq!(transport.local(), local, "a transport of another endpoint");
        assert!(thread < self.config.threads_per_node());
        let mut engine = Engine::new(
            local,
            Config {
                view: ViewId(self.config.id()),
                incarnation: self.incarnation,
                // More in the background: recovery, data recovery (REFILL_SLOTS),
                // reclamation, the memory figures, the executors of shipped
                // operations, and in `sync` mode the answers that wait for the disk.
                callers: options.coroutines
                    + 3
                    + usize::from(REFILL_SLOTS)
                    + options.ship_executors.count
                    // `sync` mode's answers to COMMIT-BACKUP, once durable.
                    + usize::from(log.as_ref().is_some_and(|(_, mode)| mode.wait))
                    // The checkpoint coroutine.
                    + usize::from(log.is_some()),
                ..options.rpc.clone()
            },
        );
        let mut participant = Participant::new(self.store.clone());
        let logged = log.is_some();
        if let Some((log, mode)) = log {
            participant.set_log(log, mode, engine.config().callers);
        }
        let participant = Rc::new(RefCell::new(participant));
        Participant::register(&participant, &mut engine);
        let placement: Arc<dyn Placement> = self.placement.clone();
        let coordinator = Rc::new(
            Coordinator::new(
                local,
                ViewId(self.config.id()),
                self.incarnation,
                participant.clone(),
                placement,
                self.schema.clone(),
            )
            .with_log_records_max(options.log_records_max)
            .with_ship_threads(self.config.threads_per_node()),
        );
        let callers = engine.config().callers;
        let mut worker = Worker::new(transport, engine);
        participant.borrow_mut().set_clock(worker.shared());
        participant.borrow_mut().set_memory(self.memory.clone());
        let recovery = coordinator.clone();
        worker
            .executor()
            .spawn_background(move |co| async move { recovery.run_recovery(co).await });
        if logged && participant.borrow().waits_for_disk() {
            let shared = worker.shared().clone();
            Participant::register_durable(&participant, &mut shared.engine(), &shared);
            let answers = participant.clone();
            worker.executor().spawn_background(move |co| async move {
                Participant::run_durable_answers(answers, co).await
            });
        }
        let (refill_options, seed) = (
            options.refill,
            u64::from(self.node) << 48 ^ self.incarnation ^ u64::from(thread) << 32,
        );
        let refill_thread = Rc::new(RefillThread::default());
        for slot in 0..REFILL_SLOTS {
            let (refill, shared) = (coordinator.clone(), refill_thread.clone());
            worker.executor().spawn_background(move |co| async move {
                refill
                    .run_refill(co, refill_options, seed, slot, shared)
                    .await
            });
        }
        if logged {
            let (checkpointing, shared) = (participant.clone(), self.checkpoints.clone());
            let checkpoint = options.checkpoint;
            worker.executor().spawn_background(move |co| async move {
                run_checkpoints(checkpointing, co, shared, thread, checkpoint).await
            });
        }
        let reclaim = coordinator.clone();
        let reclaim_options = options.reclaim;
        worker.executor().spawn_background(move |co| async move {
            reclaim.run_reclaim(co, reclaim_options).await
        });
        if thread == 0 {
            // The node's memory figures, from its copies, and the partitions with a copy
            // on a node past its limit, every MEMORY_REFRESH_NS.
            let (core, current) = (self.clone(), coordinator.clone());
            worker.executor().spawn_background(move |co| async move {
                loop {
                    core.refresh_memory();
                    core.note_crowded(&*current.placement());
                    co.sleep_until(co.now_ns() + MEMORY_REFRESH_NS).await;
                }
            });
        }
        let shipping = Shipping::new(options.procedures.clone(), callers, options.ship_executors);
        coordinator.set_shipping(shipping.clone());
        let shared = worker.shared().clone();
        shipping.register(&mut shared.engine(), &shared);
        for _ in 0..options.ship_executors.count.max(1) {
            let shipping = shipping.clone();
            let executor = coordinator.clone();
            worker
                .executor()
                .spawn_background(move |co| async move { shipping.run(co, executor).await });
        }
        CoreWorker {
            worker,
            coordinator,
            participant,
        }
    }

    /// The node's checkpoints ([`ferrotx_txn::checkpoint`]).
    pub fn checkpoints(&self) -> &Arc<Checkpoints> {
        &self.checkpoints
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
        for (_, _, copy) in self
            .copies
            .lock()
            .expect("copies lock")
            .iter()
            .filter(|(id, _, _)| *id == partition)
        {
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

    /// The copies of partitions this node hosts, with its role for each (in the view the
    /// node started with; a backup data recovery added is a backup).
    pub fn copies(&self) -> Vec<HostedCopy> {
        self.copies.lock().expect("copies lock").clone()
    }

    /// This node's copy of `partition` in `role`, if it hosts one.
    pub fn copy(&self, partition: PartitionId, role: Role) -> Option<Arc<Partition>> {
        self.copies
            .lock()
            .expect("copies lock")
            .iter()
            .find(|(id, r, _)| *id == partition && *r == role)
            .map(|(_, _, p)| p.clone())
    }

    /// The view the node's threads last switched to, and how many partitions this node
    /// became primary of in it are still blocked by transaction-state recovery (0: every
    /// transaction that wrote them is decided here). Takes the view store's lock: for
    /// status and benchmarks, not the hot path.
    pub fn recovery_blocked(&self) -> (u64, usize) {
        let cached = self.view_store.lock().expect("view store lock");
        (cached.0, cached.1.blocked_now())
    }

    /// Every copy this node holds in the last view its workers switched to, with its
    /// role there (a backup being filled included) and a digest of each table (see
    /// [`crate::copy_digests`]). Walks every table of every copy: for checks, not the
    /// hot path.
    pub fn copy_digests(&self) -> Result<CopyDigests, CopiesError> {
        digests_of_view_store(self.node, &Arc::downgrade(&self.view_store), &self.schema)
    }

    /// The node's memory figures and limit (`maxmemory`), shared with its threads.
    pub fn memory(&self) -> &Arc<Memory> {
        &self.memory
    }

    /// Bytes the node's copies use now (see [`Partition::used_bytes`]), backups being
    /// filled included (they are copies from their first view); records them in
    /// [`NodeCore::memory`]. Also moves index growths under way on ([`Partition::settle`]).
    /// Takes the copies' lock and loads a few atomics per table: every
    /// [`MEMORY_REFRESH_NS`], not per request.
    pub fn refresh_memory(&self) -> u64 {
        let bytes: u64 = self
            .copies
            .lock()
            .expect("copies lock")
            .iter()
            .map(|(_, _, copy)| {
                // A growth's previous table ends without waiting for more inserts.
                copy.settle(SETTLE_SLOTS);
                copy.used_bytes() as u64
            })
            .sum();
        self.memory.set_store(bytes);
        bytes
    }

    /// Marks in [`NodeCore::memory`] the partitions with a copy (primary, backup or fill)
    /// on a node past its memory limit (the cluster manager's word), in `placement` (the
    /// current view's): this node, as their primary, refuses writes that would grow
    /// memory there. Walks every partition only while some node is past its limit.
    pub fn note_crowded(&self, placement: &dyn Placement) {
        let over = self.memory.over_nodes();
        if over.is_empty() {
            self.memory.set_crowded([]);
            return;
        }
        let count = self.config.partitions().partition_count();
        self.memory.set_crowded((0..count).filter(|&p| {
            over.contains(&placement.primary(p))
                || placement.backups(p).iter().any(|n| over.contains(n))
                || placement.filling(p).iter().any(|n| over.contains(n))
        }));
    }

    /// The store of the last view switched to, for a handle that must not keep the
    /// node's partitions alive once it stopped.
    pub(crate) fn view_store_weak(&self) -> Weak<ViewStore> {
        Arc::downgrade(&self.view_store)
    }
}
