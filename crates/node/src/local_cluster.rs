//! A whole cluster inside one process, over in-process queues: for tests, examples and
//! embedding.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use ferrotx_cluster::Configuration;
use ferrotx_exec::{Co, Executor};
use ferrotx_rpc::{Config, Engine};
use ferrotx_store::{Key, Partition, PartitionId, ReadOutcome, StoreError, TableId, TableSpec};
use ferrotx_transport::mem::MemNetwork;
use ferrotx_txn::coordinator::{Coordinator, Placement};
use ferrotx_txn::participant::{NodeStore, Participant, Role};
use ferrotx_wire::EndpointId;

use crate::placement::ClusterPlacement;
use crate::runtime::{Idle, run};
use crate::worker::Worker;

/// Coroutine slots per worker thread (FaSST: about 20 hide the network's latency).
const COROUTINES_PER_THREAD: usize = 20;

/// Work handed to a worker thread: spawn a coroutine there.
type Spawn = Box<dyn FnOnce(&mut Executor, &Rc<Coordinator>) + Send>;

/// Every node of a configuration, each worker thread an OS thread of this process, talking
/// over in-process queues. Data is loaded with [`LocalCluster::load`] before transactions
/// run; transactions are coroutines started with [`LocalCluster::spawn`].
pub struct LocalCluster {
    config: Arc<Configuration>,
    placement: ClusterPlacement,
    /// Every copy of every partition: index 0 the primary, then the backups.
    copies: Vec<Vec<(u16, Arc<Partition>)>>,
    spawners: Vec<(EndpointId, mpsc::Sender<Spawn>)>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl LocalCluster {
    /// Starts every node of `config` with the tables of `schema`.
    pub fn start(config: Configuration, schema: Vec<TableSpec>) -> Self {
        let config = Arc::new(config);
        let schema: Arc<[TableSpec]> = Arc::from(schema);
        let mut stores: Vec<NodeStore> =
            config.members().iter().map(|_| NodeStore::new()).collect();
        let node_index = |node: u16| {
            config
                .members()
                .iter()
                .position(|m| m.node == node)
                .expect("a member of the configuration")
        };
        let mut copies = Vec::new();
        for (id, replicas) in config.partitions().iter() {
            let mut these = Vec::new();
            for (i, node) in replicas.nodes().enumerate() {
                let role = if i == 0 { Role::Primary } else { Role::Backup };
                let partition = Arc::new(Partition::new(id, &schema));
                stores[node_index(node)].host(role, partition.clone());
                these.push((node, partition));
            }
            copies.push(these);
        }
        let stores: Vec<Arc<NodeStore>> = stores.into_iter().map(Arc::new).collect();
        let network = MemNetwork::new();
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let mut spawners = Vec::new();
        let mut threads = Vec::new();
        for (index, member) in config.members().iter().enumerate() {
            for thread in 0..config.threads_per_node() {
                let local = EndpointId::new(member.node, thread);
                let (sender, receiver) = mpsc::channel::<Spawn>();
                spawners.push((local, sender));
                let transport = network.endpoint(local);
                let store = stores[index].clone();
                let config = config.clone();
                let schema = schema.clone();
                let stop = stop.clone();
                threads.push(std::thread::spawn(move || {
                    let mut engine = Engine::new(
                        local,
                        Config {
                            configuration: config.id(),
                            callers: COROUTINES_PER_THREAD,
                            ..Config::default()
                        },
                    );
                    let participant = Rc::new(RefCell::new(Participant::new(store)));
                    Participant::register(&participant, &mut engine);
                    let placement: Arc<dyn Placement> = Arc::new(ClusterPlacement(config.clone()));
                    let incarnation = engine.config().incarnation;
                    let coordinator = Rc::new(Coordinator::new(
                        local,
                        config.id(),
                        incarnation,
                        participant,
                        placement,
                        schema,
                    ));
                    let mut worker = Worker::new(transport, engine);
                    run(&mut worker, epoch, Idle::default(), |worker| {
                        while worker.executor().free_slots() > 0 {
                            match receiver.try_recv() {
                                Ok(spawn) => spawn(worker.executor(), &coordinator),
                                Err(_) => break,
                            }
                        }
                        !stop.load(Ordering::Relaxed)
                    });
                }));
            }
        }
        let placement = ClusterPlacement(config.clone());
        Self {
            config,
            placement,
            copies,
            spawners,
            stop,
            threads,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Configuration {
        &self.config
    }

    /// Stores `value` under `key` on every copy of its partition, at version 1. For
    /// loading before transactions run; returns false if the key exists.
    pub fn load(&self, table: TableId, key: Key, value: &[u8]) -> Result<bool, StoreError> {
        let partition = self.placement.partition_of(table, &key);
        let mut inserted = true;
        for (_, copy) in &self.copies[partition as usize] {
            inserted &= copy.load(table, key, value)?;
        }
        Ok(inserted)
    }

    /// Starts `body` as a coroutine on thread `thread` of node `node`, with that thread's
    /// coordinator; its result arrives on the returned channel. Waits (on the worker) for
    /// a free coroutine slot.
    pub fn spawn<F, Fut, R>(&self, node: u16, thread: u16, body: F) -> mpsc::Receiver<R>
    where
        F: FnOnce(Co, Rc<Coordinator>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        let (sender, receiver) = mpsc::channel();
        let endpoint = EndpointId::new(node, thread);
        let (_, spawner) = self
            .spawners
            .iter()
            .find(|(e, _)| *e == endpoint)
            .unwrap_or_else(|| panic!("no worker {endpoint} in this cluster"));
        let spawn: Spawn = Box::new(move |executor, coordinator| {
            let coordinator = coordinator.clone();
            executor.spawn(move |co| async move {
                let _ = sender.send(body(co, coordinator).await);
            });
        });
        spawner.send(spawn).expect("worker thread running");
        receiver
    }

    /// Reads `key` at its primary, outside any transaction (for checks).
    pub fn read_primary(
        &self,
        table: TableId,
        key: &Key,
        out: &mut Vec<u8>,
    ) -> Option<ReadOutcome> {
        let partition = self.placement.partition_of(table, key);
        let (_, primary) = &self.copies[partition as usize][0];
        primary.read(table, key, out).ok()?.ok()
    }

    /// Compares every backup copy of every key of `table` with its primary, once the
    /// cluster is quiet and every coordinator has flushed its truncation; returns the
    /// keys that differ.
    pub fn replicas_differ(
        &self,
        table: TableId,
        keys: impl Iterator<Item = Key>,
    ) -> Vec<(Key, u16)> {
        let mut differ = Vec::new();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for key in keys {
            let partition = self.placement.partition_of(table, &key);
            let copies = &self.copies[partition as usize];
            let primary = copies[0]
                .1
                .read(table, &key, &mut a)
                .ok()
                .and_then(|r| r.ok());
            for (node, backup) in &copies[1..] {
                let copy = backup.read(table, &key, &mut b).ok().and_then(|r| r.ok());
                if copy != primary || a != b {
                    differ.push((key, *node));
                }
            }
        }
        differ
    }

    /// Partition of `key`.
    pub fn partition_of(&self, table: TableId, key: &Key) -> PartitionId {
        PartitionId(self.placement.partition_of(table, key))
    }

    /// Nodes of the cluster.
    pub fn nodes(&self) -> Vec<u16> {
        self.config.members().iter().map(|m| m.node).collect()
    }

    /// Stops every worker thread and waits for them.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            thread.join().expect("worker thread panicked");
        }
    }
}
