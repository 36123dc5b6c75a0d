//! One node of a cluster: its partitions, and one worker thread per RPC endpoint, each with
//! its transport, RPC engine, participant and coordinator.

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrotx_txn::ship::Procedures;

use ferrotx_cluster::Configuration;
use ferrotx_exec::{Co, Executor};
use ferrotx_rpc::{Config, Stats};
use ferrotx_store::{Key, Memory, Partition, PartitionId, StoreError, TableId};
use ferrotx_transport::udp::{UdpConfig, UdpTransport};
use ferrotx_transport::{Doorbell, Transport, TransportError, UDP_MAX_PAYLOAD_BYTES};
use ferrotx_txn::coordinator::Coordinator;
use ferrotx_txn::participant::{ParticipantStats, RecoveryStats, Role};
use ferrotx_wire::EndpointId;

use crate::copies::{CopiesError, CopyDigests, ViewStore, digests_of_view_store};
use crate::core::{CoreOptions, CoreWorker, NodeCore};
use crate::drops::{DropStats, PublishedDrops};
use crate::keys::ClusterKeys;
use crate::lease::{LeaseThread, Link};
use crate::poller::{Polled, Poller};
use crate::runtime::{Flow, Idle, run_with};
use crate::worker::Worker;
use ferrotx_rpc::Event;

/// Work handed to a worker thread: spawn a coroutine there.
type Spawn = Box<dyn FnOnce(&mut Executor, &Rc<Coordinator>) + Send>;

/// What reaches a worker thread through its channel.
enum Handoff {
    Spawn(Spawn),
    /// Taken whether or not a coroutine slot is free.
    Attach(Box<dyn Poller>),
}

/// How a node runs.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// Coroutine slots per worker thread (FaSST: about 20 hide the network's latency).
    pub coroutines: usize,
    /// How idle workers wait.
    pub idle: Idle,
    /// This start's incarnation, carried by every datagram: it must grow with each start
    /// of the node. `None` (the default) takes the wall clock in microseconds when the
    /// node starts, so options can be reused for a restart.
    pub incarnation: Option<u64>,
    /// Socket settings over UDP.
    pub udp: UdpConfig,
    /// The operations callers may ship to this node's primaries
    /// ([`ferrotx_txn::ship`]); the Redis front end registers its commands.
    pub procedures: Procedures,
    /// The keys every datagram is sealed and opened with (`ferrotx_wire::auth`), which
    /// the workers take again whenever they change (a key rotation). `None`: datagrams
    /// carry no MAC, for tests that write datagrams by hand and for measuring what
    /// authentication costs; a node serving real traffic always has keys.
    pub keys: Option<Arc<ClusterKeys>>,
    /// This life's logs (`flush` and `sync` modes: [`crate::NodeLogs::open`]); `None` in
    /// `memory` mode. Each worker takes its own when it starts.
    pub logs: Option<Arc<crate::NodeLogs>>,
    /// The copies this life loaded from its data directory, for a cluster restarted from
    /// disk ([`crate::restore`]): the first view's copies of this node are these, and
    /// each worker's participant takes its transactions in doubt.
    pub restored: Option<Arc<crate::restore::Restored>>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            coroutines: 20,
            // A cluster's nodes often share cores with each other (a local cluster) or
            // with clients: polling yields to them (see `Idle::yield_while_polling`).
            idle: Idle {
                yield_while_polling: true,
                ..Idle::default()
            },
            incarnation: None,
            udp: UdpConfig::default(),
            procedures: Procedures::default(),
            keys: None,
            logs: None,
            restored: None,
        }
    }
}

/// This process's resident memory now, in bytes (`/proc/self/statm`); 0 where it cannot
/// be read. A file read: for INFO and a node's start, not per request.
pub fn resident_bytes() -> u64 {
    // SAFETY: sysconf only reads a system setting.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// Microseconds since the Unix epoch (at least 1): grows from one start to the next.
pub fn incarnation_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1)
        .max(1)
}

/// What one worker thread did, reported when the node stops.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkerReport {
    /// Its RPC engine's counters.
    pub rpc: Stats,
    /// Its participant's counters.
    pub participant: ParticipantStats,
}

/// How coroutines reach a worker thread: a channel, and how many wait in it.
#[derive(Clone)]
struct Spawner {
    sender: mpsc::Sender<Handoff>,
    pending: Arc<AtomicUsize>,
    /// Wakes the worker if it sleeps.
    doorbell: Option<Arc<Doorbell>>,
    /// A poller is attached to the thread, or on its way (one at a time).
    attached: Arc<AtomicBool>,
}

/// One worker thread's recovery counters ([`RecoveryStats`]) as its worker last
/// published them, for other threads to read.
///
/// The worker compares its participant's counters with what it published once per loop
/// iteration (a `RefCell` borrow and ten integer comparisons: no allocation, lock or
/// system call) and stores them here, with relaxed atomics, only when they changed, which
/// is during recovery, after a configuration change. A reader sees each counter as of
/// the end of one of the worker's loop iterations, within a step of the worker's own;
/// counters of one thread read together may come from two consecutive publications.
#[derive(Default)]
struct PublishedRecovery {
    rounds: AtomicU64,
    committed: AtomicU64,
    aborted: AtomicU64,
    votes: [AtomicU64; 6],
    waited: AtomicU64,
}

/// Counters of shipped operations ([`ferrotx_txn::ship`]) of coordinator threads: a
/// node's, summed over its worker threads ([`NodeHandle::ship_stats`]), or a benchmark
/// run's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShipStats {
    /// Operations this node's callers shipped that came back with an outcome.
    pub shipped: u64,
    /// As a primary: shipped operations run and answered.
    pub operations: u64,
    /// As a primary: batches committed (operations / batches is the combining).
    pub batches: u64,
    /// As a primary: batch attempts that conflicted and were retried.
    pub batch_retries: u64,
    /// As a primary: requests answered from a remembered result.
    pub answered_again: u64,
    /// As a primary: requests answered "ask again".
    pub retries_asked: u64,
    /// As a primary: requests refused without running (malformed, an unknown procedure
    /// or partition, another thread's partition).
    pub refused: u64,
}

impl ShipStats {
    /// The shipping counters of a coordinator thread's counters.
    pub fn of(stats: &ferrotx_txn::coordinator::CoordinatorStats) -> Self {
        Self {
            shipped: stats.shipped,
            operations: stats.ship_operations,
            batches: stats.ship_batches,
            batch_retries: stats.ship_batch_retries,
            answered_again: stats.ship_answered_again,
            retries_asked: stats.ship_retries_asked,
            refused: stats.ship_refused,
        }
    }

    /// Adds `other`'s counters to these.
    pub fn add(&mut self, other: &ShipStats) {
        self.shipped += other.shipped;
        self.operations += other.operations;
        self.batches += other.batches;
        self.batch_retries += other.batch_retries;
        self.answered_again += other.answered_again;
        self.retries_asked += other.retries_asked;
        self.refused += other.refused;
    }

    /// `self - earlier`, counter by counter (counters only grow).
    pub fn since(&self, earlier: &ShipStats) -> Self {
        Self {
            shipped: self.shipped - earlier.shipped,
            operations: self.operations - earlier.operations,
            batches: self.batches - earlier.batches,
            batch_retries: self.batch_retries - earlier.batch_retries,
            answered_again: self.answered_again - earlier.answered_again,
            retries_asked: self.retries_asked - earlier.retries_asked,
            refused: self.refused - earlier.refused,
        }
    }
}

/// One worker thread's [`ShipStats`] as its worker last published them (every 32 loop
/// iterations when they changed: seven relaxed stores).
#[derive(Default)]
struct PublishedShip([AtomicU64; 7]);

impl PublishedShip {
    fn store(&self, stats: &ShipStats) {
        let values = [
            stats.shipped,
            stats.operations,
            stats.batches,
            stats.batch_retries,
            stats.answered_again,
            stats.retries_asked,
            stats.refused,
        ];
        for (published, value) in self.0.iter().zip(values) {
            published.store(value, Ordering::Relaxed);
        }
    }

    fn add_to(&self, sum: &mut ShipStats) {
        let [a, b, c, d, e, f, g] = &self.0;
        sum.shipped += a.load(Ordering::Relaxed);
        sum.operations += b.load(Ordering::Relaxed);
        sum.batches += c.load(Ordering::Relaxed);
        sum.batch_retries += d.load(Ordering::Relaxed);
        sum.answered_again += e.load(Ordering::Relaxed);
        sum.retries_asked += f.load(Ordering::Relaxed);
        sum.refused += g.load(Ordering::Relaxed);
    }
}

impl PublishedRecovery {
    fn store(&self, stats: &RecoveryStats) {
        self.rounds.store(stats.rounds, Ordering::Relaxed);
        self.committed.store(stats.committed, Ordering::Relaxed);
        self.aborted.store(stats.aborted, Ordering::Relaxed);
        for (published, n) in self.votes.iter().zip(stats.votes) {
            published.store(n, Ordering::Relaxed);
        }
        self.waited.store(stats.waited, Ordering::Relaxed);
    }

    /// Adds these counters to `sum`.
    fn add_to(&self, sum: &mut RecoveryStats) {
        sum.rounds += self.rounds.load(Ordering::Relaxed);
        sum.committed += self.committed.load(Ordering::Relaxed);
        sum.aborted += self.aborted.load(Ordering::Relaxed);
        for (total, published) in sum.votes.iter_mut().zip(&self.votes) {
            *total += published.load(Ordering::Relaxed);
        }
        sum.waited += self.waited.load(Ordering::Relaxed);
    }
}

/// A running node. Data is loaded with [`Node::load`] before transactions run;
/// transactions are coroutines started on a worker thread with [`Node::spawn`], or from
/// other threads with a [`NodeHandle`].
pub struct Node {
    /// Its partitions, shared with its worker threads.
    core: NodeCore,
    handle: NodeHandle,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<WorkerReport>>,
    /// Its lease thread, if it runs with membership (stopped after the workers).
    lease: Option<LeaseThread>,
    /// Its logs and their sync thread (`flush` and `sync` modes), stopped after the
    /// workers.
    logs: Option<Arc<crate::NodeLogs>>,
}

/// Why a node with membership did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The cluster did not admit it in time.
    #[error(
        "not admitted into the cluster within {0:?}: is the configuration manager (or, for a new cluster, the node of lowest id) running?"
    )]
    NotAdmitted(Duration),
    /// The cluster has admitted a newer life of this node.
    #[error("removed from the cluster: a newer life of this node is a member")]
    Removed,
}

/// A worker's side of membership: switches to each new view, opens for transactions
/// once it is committed, and serves only within the lease.
struct WorkerMembership {
    link: Arc<Link>,
    thread: u16,
    generation: u64,
    view_id: u64,
    accepting: bool,
}

impl WorkerMembership {
    fn new(link: Arc<Link>, thread: u16) -> Self {
        Self {
            link,
            thread,
            generation: 0,
            view_id: 0,
            accepting: false,
        }
    }

    /// Once per loop iteration: three atomic loads unless something changed.
    #[inline]
    fn check<T: Transport>(
        &mut self,
        core: &NodeCore,
        worker: &mut Worker<T>,
        coordinator: &Coordinator,
        epoch: Instant,
    ) {
        let generation = self.link.generation();
        if generation != self.generation {
            if let Some(view) = self.link.view() {
                let now = epoch.elapsed().as_nanos() as u64;
                core.switch_parts(worker, coordinator, now, &view);
                self.view_id = view.id;
                self.accepting = false;
            }
            self.generation = generation;
            self.link.switched(self.thread, generation);
        }
        if !self.accepting && self.view_id != 0 && self.link.committed() == self.view_id {
            coordinator.set_accepting(true);
            worker.shared().notify_all(coordinator.opened());
            self.accepting = true;
        }
        worker.set_serving_until(self.link.serving_until());
        if !worker.events().is_empty() {
            for event in worker.events().drain(..) {
                if let Event::NewerConfiguration(id) = event {
                    self.link.heard_of(id.get());
                }
            }
        }
    }
}

/// What starts coroutines on a node's worker threads, for other threads (a front end's
/// I/O thread): cheap to clone, `Send` and `Sync`. It outlives the node harmlessly: once
/// the node has stopped, [`NodeHandle::spawn`] says so.
#[derive(Clone)]
pub struct NodeHandle {
    node: u16,
    config: Arc<Configuration>,
    spawners: Arc<[Spawner]>,
    /// Each worker thread's recovery counters, in thread order.
    recovery: Arc<[PublishedRecovery]>,
    ship: Arc<[PublishedShip]>,
    /// Each worker thread's dropped datagrams.
    drops: Arc<[PublishedDrops]>,
    /// The lease thread's link, if the node runs with membership: its dropped datagrams.
    link: Option<Arc<Link>>,
    /// The node's store of its current view: not kept alive by the handle.
    view_store: std::sync::Weak<ViewStore>,
    /// The node's memory figures and limit.
    memory: Arc<Memory>,
}

/// Why a coroutine could not be started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The worker thread has ended: the node stopped (or the thread panicked).
    #[error("worker thread {thread} of node {node} has stopped")]
    Stopped {
        /// The node.
        node: u16,
        /// The thread.
        thread: u16,
    },
}

/// Why [`NodeHandle::attach`] failed.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The worker thread has ended.
    #[error(transparent)]
    Stopped(SpawnError),
    /// The worker's transport cannot watch a descriptor in its sleep.
    #[error("the worker's transport cannot watch descriptors")]
    CannotWatch,
    /// Another poller is attached to the worker.
    #[error("the worker already has a poller")]
    Occupied,
}

impl NodeHandle {
    /// The node's id.
    pub fn id(&self) -> u16 {
        self.node
    }

    /// The node's memory figures and limit (`maxmemory`), which its threads share:
    /// reading them is a few atomic loads.
    pub fn memory(&self) -> &Arc<Memory> {
        &self.memory
    }

    /// The configuration the node runs.
    pub fn config(&self) -> &Arc<Configuration> {
        &self.config
    }

    /// The node's worker threads.
    pub fn threads(&self) -> u16 {
        u16::try_from(self.spawners.len()).expect("threads_per_node is a u16")
    }

    /// The node's transaction-state recovery counters (FaRM 5.3), summed over its worker
    /// threads: rounds (one per committed view per thread), the decisions this node's
    /// threads took as recovery coordinators, the partitions' votes they counted (by
    /// kind, in [`ferrotx_txn::recovery::VOTES`] order) and the commits of this node's
    /// coordinators that waited for recovery's decision. Cheap (a few relaxed loads per
    /// thread), never blocks; after the node stopped, its final counters.
    pub fn recovery_stats(&self) -> RecoveryStats {
        let mut sum = RecoveryStats::default();
        for thread in self.recovery.iter() {
            thread.add_to(&mut sum);
        }
        sum
    }

    /// The node's counters of shipped operations, summed over its worker threads, as
    /// published within the last 32 iterations of each worker's loop. Cheap (relaxed
    /// loads), never blocks.
    pub fn ship_stats(&self) -> ShipStats {
        let mut sum = ShipStats::default();
        for thread in self.ship.iter() {
            thread.add_to(&mut sum);
        }
        sum
    }

    /// How the coordination service has been answering the node's lease thread (as last
    /// published, every 50 ms), with the calls' deadline in milliseconds; `None` for a
    /// node without one.
    pub fn coordination_health(&self) -> Option<(crate::CoordinationHealth, u64)> {
        let status = self.link.as_ref()?.status();
        Some((status.coordination, status.coordination_timeout_ms))
    }

    /// Datagrams the node dropped, by reason: its worker threads' RPC engines (as
    /// published within the last 32 iterations of each loop) and its lease thread (as
    /// last published, every 50 ms). Cheap; takes the lease status's lock for an instant.
    pub fn drop_stats(&self) -> DropStats {
        let mut sum = DropStats::default();
        for thread in self.drops.iter() {
            sum.add(&thread.load());
        }
        if let Some(link) = &self.link {
            sum.add(&DropStats::of_membership(&link.status().stats));
        }
        sum
    }

    /// Every partition copy the node holds in the last view its workers switched to,
    /// with its role there and a digest and object count of each table
    /// ([`NodeCore::copy_digests`]); [`CopiesError::Stopped`] once the node has stopped.
    /// Walks every table of every copy on the calling thread, beside the workers (the
    /// partitions are shared, and read as readers read them): call it from a thread of
    /// its own, not a worker or an event loop, and on a quiet cluster for digests that
    /// compare.
    pub fn copy_digests(&self) -> Result<CopyDigests, CopiesError> {
        digests_of_view_store(self.node, &self.view_store, self.config.tables())
    }

    /// Starts `body` as a coroutine on worker thread `thread`, with that thread's
    /// coordinator, and wakes the thread if it sleeps; the result arrives on the returned
    /// channel. The worker starts it when it has a free coroutine slot. Never blocks.
    /// If the node stops before the coroutine ends, the coroutine is dropped (and with it
    /// whatever it holds) and the channel closes.
    ///
    /// # Panics
    ///
    /// If `thread` is not one of the node's worker threads.
    pub fn spawn<F, Fut, R>(&self, thread: u16, body: F) -> Result<mpsc::Receiver<R>, SpawnError>
    where
        F: FnOnce(Co, Rc<Coordinator>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        let (sender, receiver) = mpsc::channel();
        let spawn: Spawn = Box::new(move |executor, coordinator| {
            let coordinator = coordinator.clone();
            executor.spawn(move |co| async move {
                let _ = sender.send(body(co, coordinator).await);
            });
        });
        self.hand_off(thread, Handoff::Spawn(spawn))?;
        Ok(receiver)
    }

    /// Attaches `poller` to worker thread `thread`: the worker polls it from its loop and
    /// its sleep watches the poller's descriptor, until it says it is done or the node
    /// stops (see [`Poller`]). Fails, dropping the poller, if the thread has ended or
    /// its transport cannot watch descriptors (in-process channels).
    ///
    /// # Panics
    ///
    /// If `thread` is not one of the node's worker threads.
    pub fn attach(&self, thread: u16, poller: Box<dyn Poller>) -> Result<(), AttachError> {
        if !self.can_attach(thread) {
            return Err(AttachError::CannotWatch);
        }
        let attached = &self.spawners[usize::from(thread)].attached;
        if attached.swap(true, Ordering::AcqRel) {
            return Err(AttachError::Occupied);
        }
        self.hand_off(thread, Handoff::Attach(poller))
            .inspect_err(|_| attached.store(false, Ordering::Release))
            .map_err(AttachError::Stopped)
    }

    /// Whether worker thread `thread` (if it is one) can take a [`Poller`] now: its
    /// transport watches descriptors in its sleep, and no other poller is attached.
    pub fn can_attach(&self, thread: u16) -> bool {
        self.spawners
            .get(usize::from(thread))
            .is_some_and(|spawner| {
                spawner
                    .doorbell
                    .as_ref()
                    .is_some_and(|bell| bell.can_watch())
                    && !spawner.attached.load(Ordering::Acquire)
            })
    }

    fn hand_off(&self, thread: u16, handoff: Handoff) -> Result<(), SpawnError> {
        let spawner = self
            .spawners
            .get(usize::from(thread))
            .unwrap_or_else(|| panic!("no worker thread {thread} on node {}", self.node));
        // Counted before it is sent, so the count never reads 0 while a hand-off waits.
        spawner.pending.fetch_add(1, Ordering::Relaxed);
        if spawner.sender.send(handoff).is_err() {
            spawner.pending.fetch_sub(1, Ordering::Relaxed);
            return Err(SpawnError::Stopped {
                node: self.node,
                thread,
            });
        }
        if let Some(bell) = &spawner.doorbell {
            bell.ring();
        }
        Ok(())
    }
}

impl Node {
    /// Starts node `node` of `config` over `transports`, one per worker thread in thread
    /// order, with time measured from `epoch`.
    pub fn start<T: Transport + Send + 'static>(
        config: Arc<Configuration>,
        node: u16,
        transports: Vec<T>,
        options: &NodeOptions,
        epoch: Instant,
    ) -> Self {
        assert_eq!(transports.len(), usize::from(config.threads_per_node()));
        let incarnation = options.incarnation.unwrap_or_else(incarnation_from_clock);
        let core = NodeCore::new(config.clone(), node, incarnation);
        Self::start_core(core, transports, options, epoch, None)
    }

    /// Starts a node as a member of a cluster with leases and reconfiguration: `lease` is
    /// its lease thread (which says which node, life, configuration and clock), one
    /// transport per worker thread in thread order, and the workers start once the cluster admitted this
    /// life into a view, holding the copies that view gives it. Fails if it is not
    /// admitted within `admit_timeout`.
    pub fn start_member<T: Transport + Send + 'static>(
        transports: Vec<T>,
        options: &NodeOptions,
        lease: LeaseThread,
        admit_timeout: Duration,
    ) -> Result<Self, StartError> {
        let (config, node, incarnation, epoch) = (
            lease.config().clone(),
            lease.node(),
            lease.incarnation(),
            lease.epoch(),
        );
        assert_eq!(transports.len(), usize::from(config.threads_per_node()));
        let Some(view) = lease.wait_admitted(admit_timeout) else {
            return Err(if lease.link().removed() {
                StartError::Removed
            } else {
                StartError::NotAdmitted(admit_timeout)
            });
        };
        // What it loaded counts only if the restart took this life in (else it joined
        // later as a new life: refilled, with nothing of what it loaded).
        let mut options = options.clone();
        if let Some(restored) = &options.restored
            && !restored.given_back(&view, node)
        {
            options.restored = None;
            if let Some(logs) = &options.logs {
                logs.forget_restored_from();
            }
        }
        let options = &options;
        let loaded = options
            .restored
            .as_ref()
            .map_or(&[][..], |r| r.partitions());
        let core = NodeCore::from_view_loaded(
            config,
            &view,
            node,
            incarnation,
            ferrotx_store::Epoch::process(),
            loaded,
        );
        let mut node =
            Self::start_core(core, transports, options, epoch, Some(lease.link().clone()));
        node.lease = Some(lease);
        Ok(node)
    }

    /// The lease thread's link, if the node runs with membership.
    pub fn membership(&self) -> Option<&Arc<Link>> {
        self.lease.as_ref().map(LeaseThread::link)
    }

    fn start_core<T: Transport + Send + 'static>(
        core: NodeCore,
        transports: Vec<T>,
        options: &NodeOptions,
        epoch: Instant,
        link: Option<Arc<Link>>,
    ) -> Self {
        let config = core.config().clone();
        let node = core.id();
        core.memory().set_limit(config.maxmemory().unwrap_or(0));
        if let Some(link) = &link {
            link.set_core(core.clone());
        }
        let core_options = CoreOptions {
            coroutines: options.coroutines,
            rpc: Config {
                datagram_bytes: UDP_MAX_PAYLOAD_BYTES,
                auth: options.keys.as_ref().and_then(|k| k.current()),
                ..Config::default()
            },
            procedures: options.procedures.clone(),
            checkpoint: ferrotx_txn::checkpoint::CheckpointOptions {
                log_bytes: config.durability().checkpoint_log_mb << 20,
                ..Default::default()
            },
            ..CoreOptions::default()
        };
        let stop = Arc::new(AtomicBool::new(false));
        let mut spawners = Vec::new();
        let mut threads = Vec::new();
        let recovery: Arc<[PublishedRecovery]> = (0..transports.len())
            .map(|_| PublishedRecovery::default())
            .collect();
        let ship: Arc<[PublishedShip]> = (0..transports.len())
            .map(|_| PublishedShip::default())
            .collect();
        let drops: Arc<[PublishedDrops]> = (0..transports.len())
            .map(|_| PublishedDrops::default())
            .collect();
        let link_for_handle = link.clone();
        for (thread, transport) in transports.into_iter().enumerate() {
            let thread = u16::try_from(thread).expect("threads_per_node is a u16");
            let local = EndpointId::new(node, thread);
            assert_eq!(transport.local(), local, "transports in thread order");
            let (sender, receiver) = mpsc::channel::<Handoff>();
            let pending = Arc::new(AtomicUsize::new(0));
            let attached = Arc::new(AtomicBool::new(false));
            if let (Some(link), Some(bell)) = (&link, transport.doorbell()) {
                link.add_doorbell(bell);
            }
            let link = link.clone();
            let recovery = recovery.clone();
            let ship = ship.clone();
            let drops = drops.clone();
            spawners.push(Spawner {
                sender,
                pending: pending.clone(),
                doorbell: transport.doorbell(),
                attached: attached.clone(),
            });
            let core = core.clone();
            let core_options = core_options.clone();
            let keys = options.keys.clone();
            let log = options.logs.as_ref().and_then(|logs| logs.take(thread));
            let log_attached = log.is_some();
            let replay = options
                .restored
                .as_ref()
                .and_then(|r| r.take_replay(thread));
            let stop = stop.clone();
            let idle = options.idle;
            let name = format!("ferrotx-{local}");
            let spawn = std::thread::Builder::new().name(name).spawn(move || {
                let CoreWorker {
                    mut worker,
                    coordinator,
                    participant,
                } = core.worker_logged(
                    thread,
                    transport,
                    &core_options,
                    log.map(|(log, mode)| {
                        (
                            Box::new(log) as Box<dyn ferrotx_txn::durable::CommitLog>,
                            mode,
                        )
                    }),
                );
                if let Some(replay) = replay {
                    // What this worker's log held in doubt: recovery decides it in the
                    // first view.
                    participant.borrow_mut().restore(replay);
                }
                let mut membership = link.map(|link| WorkerMembership::new(link, thread));
                if membership.is_some() {
                    // Nothing runs before the first view is switched to.
                    worker.set_serving_until(0);
                    coordinator.set_accepting(false);
                }
                let published = &recovery[usize::from(thread)];
                let mut recovery_seen = RecoveryStats::default();
                let published_ship = &ship[usize::from(thread)];
                let published_drops = &drops[usize::from(thread)];
                let mut drops_seen = DropStats::default();
                let mut ship_seen = ShipStats::default();
                let mut iteration = 0u32;
                // 0: no generation, so the first iteration takes the keys of now.
                let mut keys_seen = 0;
                let doorbell = worker.transport().doorbell();
                let mut poller: Option<Box<dyn Poller>> = None;
                let mut waiting: std::collections::VecDeque<Spawn> =
                    std::collections::VecDeque::new();
                run_with(&mut worker, epoch, idle, |worker, now_ns| {
                    // What the last iteration logged: one write for all of it.
                    if log_attached && let Ok(mut p) = participant.try_borrow_mut() {
                        p.write_log();
                    }
                    // Recovery's counters change only while it runs: published when they
                    // do (see `PublishedRecovery`), looked at every 32 iterations (an idle
                    // worker still wakes every few ms for recovery's idle pass).
                    iteration = iteration.wrapping_add(1);
                    if iteration.is_multiple_of(32)
                        && let Ok(p) = participant.try_borrow()
                    {
                        let stats = p.recovery_stats();
                        if stats != recovery_seen {
                            published.store(&stats);
                            recovery_seen = stats;
                        }
                    }
                    if iteration.is_multiple_of(32) {
                        let stats = ShipStats::of(&coordinator.stats());
                        if stats != ship_seen {
                            published_ship.store(&stats);
                            ship_seen = stats;
                        }
                        let stats = DropStats::of_rpc(worker.shared().engine().stats());
                        if stats != drops_seen {
                            published_drops.store(&stats);
                            drops_seen = stats;
                        }
                    }
                    if let Some(m) = &mut membership {
                        m.check(&core, worker, &coordinator, epoch);
                    }
                    // A key rotation: one atomic load per iteration otherwise.
                    if let Some(keys) = &keys {
                        let generation = keys.generation();
                        if generation != keys_seen {
                            keys_seen = generation;
                            worker.shared().engine().set_auth(keys.current());
                        }
                    }
                    let mut flow = Flow::Go;
                    if let (Some(p), Some(bell)) = (&mut poller, &doorbell) {
                        match p.poll(now_ns, bell.take_watched_ready()) {
                            Polled::Idle => {}
                            Polled::Busy => flow = Flow::Busy,
                            Polled::Done => {
                                bell.watch(None);
                                poller = None;
                                attached.store(false, Ordering::Release);
                            }
                        }
                    }
                    // One relaxed load per iteration when nothing waits, rather than the
                    // channel's receive (1% of a TATP run's CPU in a profile). Spawns that
                    // find no free coroutine slot wait in `waiting`, in order; a poller
                    // behind them is still taken.
                    while !waiting.is_empty() && worker.executor().free_slots() > 0 {
                        let spawn = waiting.pop_front().expect("not empty");
                        pending.fetch_sub(1, Ordering::Relaxed);
                        spawn(worker.executor(), &coordinator);
                    }
                    while pending.load(Ordering::Relaxed) > waiting.len() {
                        match receiver.try_recv() {
                            Ok(Handoff::Spawn(spawn)) => {
                                if waiting.is_empty() && worker.executor().free_slots() > 0 {
                                    pending.fetch_sub(1, Ordering::Relaxed);
                                    spawn(worker.executor(), &coordinator);
                                } else {
                                    waiting.push_back(spawn);
                                }
                            }
                            Ok(Handoff::Attach(new)) => {
                                pending.fetch_sub(1, Ordering::Relaxed);
                                if let Some(bell) = &doorbell {
                                    bell.watch(Some(new.fd()));
                                }
                                // `attach` lets one in at a time.
                                poller = Some(new);
                                flow = Flow::Busy;
                            }
                            Err(_) => break,
                        }
                    }
                    if stop.load(Ordering::Relaxed) {
                        Flow::Stop
                    } else {
                        flow
                    }
                });
                if let Some(bell) = &doorbell {
                    bell.watch(None);
                }
                drop(poller);
                drop(waiting);
                attached.store(false, Ordering::Release);
                let rpc = *worker.executor().shared().engine().stats();
                published.store(&participant.borrow().recovery_stats());
                published_ship.store(&ShipStats::of(&coordinator.stats()));
                published_drops.store(&DropStats::of_rpc(&rpc));
                let participant = participant.borrow().stats();
                WorkerReport { rpc, participant }
            });
            threads.push(spawn.expect("starting a worker thread"));
        }
        let handle = NodeHandle {
            node,
            config: config.clone(),
            spawners: spawners.into(),
            recovery,
            ship,
            drops,
            link: link_for_handle,
            view_store: core.view_store_weak(),
            memory: core.memory().clone(),
        };
        Self {
            core,
            handle,
            stop,
            threads,
            lease: None,
            logs: options.logs.clone(),
        }
    }

    /// Starts node `node` of `config` over UDP, each worker thread on its address in the
    /// configuration.
    pub fn start_udp(
        config: Arc<Configuration>,
        node: u16,
        options: &NodeOptions,
    ) -> Result<Self, TransportError> {
        let transports = Self::udp_transports(&config, node, options)?;
        Ok(Self::start(
            config,
            node,
            transports,
            options,
            Instant::now(),
        ))
    }

    /// The UDP sockets of node `node`'s worker threads, in thread order, each bound to its
    /// address in the configuration (to wrap them before [`Node::start`], for example to
    /// inject loss).
    pub fn udp_transports(
        config: &Configuration,
        node: u16,
        options: &NodeOptions,
    ) -> Result<Vec<UdpTransport>, TransportError> {
        let book: ferrotx_transport::AddressBook = config.endpoint_addrs().collect();
        (0..config.threads_per_node())
            .map(|thread| {
                let local = EndpointId::new(node, thread);
                let addr = config
                    .endpoint_addr(local)
                    .unwrap_or_else(|| panic!("node {node} is not a member"));
                UdpTransport::bind(local, addr, &book, options.udp)
            })
            .collect()
    }

    /// Its node id.
    pub fn id(&self) -> u16 {
        self.core.id()
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<Configuration> {
        self.core.config()
    }

    /// Its partitions (the deterministic core its workers run over).
    pub fn core(&self) -> &NodeCore {
        &self.core
    }

    /// The partition of `key` of `table`.
    pub fn partition_of(&self, table: TableId, key: &Key) -> PartitionId {
        self.core.partition_of(table, key)
    }

    /// Stores `value` under `key` in this node's copies of its partition, at version 1.
    /// For loading before transactions run: every node loads the same data, each keeping
    /// the keys of the partitions it hosts. Returns whether this node hosts the key (and
    /// it was absent).
    pub fn load(&self, table: TableId, key: Key, value: &[u8]) -> Result<bool, StoreError> {
        self.core.load(table, key, value)
    }

    /// Stores `value` under `key` in this node's copy of its partition if this node is its
    /// `role` (primary or backup), at version 1; returns whether it did. Loading every key
    /// into the primaries first, then into the backups, keeps the objects that reads touch
    /// together in memory.
    pub fn load_as(
        &self,
        role: Role,
        table: TableId,
        key: Key,
        value: &[u8],
    ) -> Result<bool, StoreError> {
        self.core.load_as(role, table, key, value)
    }

    /// The copies of partitions this node hosts, with its role for each.
    pub fn copies(&self) -> Vec<(PartitionId, Role, Arc<Partition>)> {
        self.core.copies()
    }

    /// This node's copy of `partition` in `role`, if it hosts one.
    pub fn copy(&self, partition: PartitionId, role: Role) -> Option<Arc<Partition>> {
        self.core.copy(partition, role)
    }

    /// The node's recovery counters, summed over its worker threads (see
    /// [`NodeHandle::recovery_stats`]).
    pub fn recovery_stats(&self) -> RecoveryStats {
        self.handle.recovery_stats()
    }

    /// Its logs (`flush` and `sync` modes).
    pub fn logs(&self) -> Option<&Arc<crate::NodeLogs>> {
        self.logs.as_ref()
    }

    /// A handle that starts coroutines on this node from any thread.
    pub fn handle(&self) -> NodeHandle {
        self.handle.clone()
    }

    /// Starts `body` as a coroutine on worker thread `thread`, with that thread's
    /// coordinator; its result arrives on the returned channel. The worker starts it when
    /// it has a free coroutine slot. Panics if the worker thread has ended.
    pub fn spawn<F, Fut, R>(&self, thread: u16, body: F) -> mpsc::Receiver<R>
    where
        F: FnOnce(Co, Rc<Coordinator>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        self.handle
            .spawn(thread, body)
            .expect("worker thread running")
    }

    /// Whether a worker thread has ended (stopped, or panicked).
    pub fn any_worker_ended(&self) -> bool {
        self.threads.iter().any(JoinHandle::is_finished)
    }

    /// Stops every worker thread, waits for them, and returns what each did (in thread
    /// order). Coroutines still running are dropped.
    pub fn stop(mut self) -> Vec<WorkerReport> {
        self.request_stop();
        self.threads
            .drain(..)
            .map(|t| t.join().expect("worker thread panicked"))
            .collect()
    }
}

impl Node {
    /// Tells every worker to stop, waking those that sleep.
    fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for spawner in self.handle.spawners.iter() {
            if let Some(bell) = &spawner.doorbell {
                bell.ring();
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.request_stop();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        self.lease = None;
    }
}
