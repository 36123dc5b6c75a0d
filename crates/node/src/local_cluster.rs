//! A whole cluster inside one process, over in-process queues: for tests, examples and
//! embedding.

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use ferrotx_cluster::Configuration;
use ferrotx_exec::Co;
use ferrotx_store::{Key, Partition, PartitionId, ReadOutcome, StoreError, TableId, TableSpec};
use ferrotx_transport::Transport;
use ferrotx_transport::mem::{MemNetwork, MemTransport};
use ferrotx_txn::coordinator::{Coordinator, Placement};
use ferrotx_txn::participant::Role;
use ferrotx_wire::EndpointId;

use crate::node::{Node, NodeHandle, NodeOptions};
use crate::placement::ClusterPlacement;

/// What [`LocalCluster::read_copies`] gives for one copy: its node, its role, and its
/// version and value (`None` if absent or deleted), or `None` if it cannot be read.
pub type CopyRead = (u16, Role, Option<(u64, Option<Vec<u8>>)>);

/// Every node of a configuration, each worker thread an OS thread of this process, talking
/// over in-process queues. Data is loaded with [`LocalCluster::load`] before transactions
/// run; transactions are coroutines started with [`LocalCluster::spawn`].
pub struct LocalCluster {
    config: Arc<Configuration>,
    placement: ClusterPlacement,
    nodes: Vec<Node>,
}

impl LocalCluster {
    /// Starts every node of `config` with the tables of `schema`.
    ///
    /// # Panics
    ///
    /// If `schema` is not a valid schema (empty, or ids or names repeated).
    pub fn start(config: Configuration, schema: Vec<TableSpec>) -> Self {
        Self::start_with(config, schema, &NodeOptions::default())
    }

    /// Starts every node of `config` with the tables of `schema` and `options`.
    pub fn start_with(
        config: Configuration,
        schema: Vec<TableSpec>,
        options: &NodeOptions,
    ) -> Self {
        Self::start_wrapped(config, schema, options, |_, transport| transport)
    }

    /// Starts every node of `config` with the tables of `schema` and `options`, each
    /// worker's in-process transport wrapped by `wrap` (given its endpoint), for example
    /// to drop datagrams.
    pub fn start_wrapped<T: Transport + Send + 'static>(
        config: Configuration,
        schema: Vec<TableSpec>,
        options: &NodeOptions,
        wrap: impl Fn(EndpointId, MemTransport) -> T,
    ) -> Self {
        let config = Arc::new(config.with_tables(schema).expect("a valid schema"));
        let network = MemNetwork::new();
        let epoch = Instant::now();
        let nodes = config
            .members()
            .iter()
            .map(|member| {
                let transports = (0..config.threads_per_node())
                    .map(|t| {
                        let local = EndpointId::new(member.node, t);
                        wrap(local, network.endpoint(local))
                    })
                    .collect();
                Node::start(config.clone(), member.node, transports, options, epoch)
            })
            .collect();
        let placement = ClusterPlacement::new(config.clone(), None);
        Self {
            config,
            placement,
            nodes,
        }
    }

    fn node(&self, node: u16) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id() == node)
            .unwrap_or_else(|| panic!("no node {node} in this cluster"))
    }

    /// Every copy of `partition`, the primary first.
    fn copies_of(&self, partition: PartitionId) -> Vec<(u16, Arc<Partition>)> {
        self.config
            .partitions()
            .replicas(partition)
            .nodes()
            .enumerate()
            .map(|(i, node)| {
                let role = if i == 0 { Role::Primary } else { Role::Backup };
                let copy = self.node(node).copy(partition, role).expect("hosted");
                (node, copy)
            })
            .collect()
    }

    /// The configuration.
    pub fn config(&self) -> &Configuration {
        &self.config
    }

    /// Stores `value` under `key` on every copy of its partition, at version 1. For
    /// loading before transactions run; returns false if the key exists.
    pub fn load(&self, table: TableId, key: Key, value: &[u8]) -> Result<bool, StoreError> {
        let partition = self.partition_of(table, &key);
        let mut inserted = true;
        for (_, copy) in self.copies_of(partition) {
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
        self.node(node).spawn(thread, body)
    }

    /// Has every coordinator thread push its last truncation mark to every node, and waits
    /// for them all: afterwards backups have applied every committed write, so copies can
    /// be compared (once no transaction runs).
    ///
    /// # Panics
    ///
    /// If a worker thread has stopped.
    pub fn flush_truncation(&self) {
        let nodes = self.nodes();
        let flushes: Vec<_> = nodes
            .iter()
            .flat_map(|&node| (0..self.config.threads_per_node()).map(move |t| (node, t)))
            .map(|(node, thread)| {
                let nodes = nodes.clone();
                self.spawn(node, thread, move |co, coordinator| async move {
                    coordinator.flush_truncation(&co, &nodes).await;
                })
            })
            .collect();
        for flush in flushes {
            flush.recv().expect("a worker thread stopped");
        }
    }

    /// A handle that starts coroutines on node `node` from any thread (to serve a front
    /// end, such as the Redis protocol, from it).
    pub fn handle(&self, node: u16) -> NodeHandle {
        self.node(node).handle()
    }

    /// Reads `key` at its primary, outside any transaction (for checks).
    pub fn read_primary(
        &self,
        table: TableId,
        key: &Key,
        out: &mut Vec<u8>,
    ) -> Option<ReadOutcome> {
        let partition = self.partition_of(table, key);
        let (_, primary) = self.copies_of(partition).swap_remove(0);
        primary.read(table, key, out).ok()?.ok()
    }

    /// What every copy of `key` of `table` holds, the primary first: node, role, version
    /// (0 for a key that never had an object) and value (`None` if absent or deleted).
    /// For checks, once the cluster is quiet; `None` for a copy that cannot be read
    /// (unknown table, or an object locked).
    pub fn read_copies(&self, table: TableId, key: &Key) -> Vec<CopyRead> {
        self.copies_of(self.partition_of(table, key))
            .into_iter()
            .enumerate()
            .map(|(i, (node, copy))| {
                let role = if i == 0 { Role::Primary } else { Role::Backup };
                let mut value = Vec::new();
                let seen = copy.read(table, key, &mut value).ok().and_then(|r| r.ok());
                (
                    node,
                    role,
                    seen.map(|s| (s.version, s.present.then_some(value))),
                )
            })
            .collect()
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
            let copies = self.copies_of(self.partition_of(table, &key));
            a.clear();
            let primary = copies[0]
                .1
                .read(table, &key, &mut a)
                .ok()
                .and_then(|r| r.ok());
            for (node, backup) in &copies[1..] {
                let node = *node;
                b.clear();
                let copy = backup.read(table, &key, &mut b).ok().and_then(|r| r.ok());
                if copy != primary || a != b {
                    differ.push((key, node));
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
    pub fn stop(self) {
        for node in self.nodes {
            node.stop();
        }
    }
}
