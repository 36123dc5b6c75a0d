//! The commit's rounds over real RPC engines: a coordinator on node 0 and participants on
//! the other nodes, each behind its own engine, wired by an in-memory network that
//! delivers every datagram at once and in order. It reaches what a whole-cluster test
//! does not: more remote nodes than one RPC batch holds, and participants that refuse,
//! restart or answer nonsense in the middle of a commit.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_exec::{Co, Executor};
use ferrotx_rpc::{Config, Engine, HandlerError};
use ferrotx_store::{Key, Partition, PartitionId, TableId, TableSpec};
use ferrotx_transport::{TxBatch, UDP_MAX_PAYLOAD_BYTES};
use ferrotx_txn::coordinator::{Abort, Coordinator, Placement};
use ferrotx_txn::participant::{NodeStore, Participant, Role};
use ferrotx_wire::{EndpointId, RequestType, ViewId};

const TABLE: TableId = TableId(1);

/// The coordinator's endpoint: node 0, which hosts no partition.
const COORDINATOR: EndpointId = EndpointId::new(0, 0);

/// Event-loop rounds after which a coroutine that has not finished is stuck.
const STEPS_MAX: usize = 10_000;

/// Partition `p` holds the keys whose number is `p` modulo the partition count, with its
/// primary and backups as listed.
struct Layout {
    primaries: Vec<u16>,
    backups: Vec<Vec<u16>>,
}

impl Placement for Layout {
    fn partition_of(&self, _: TableId, key: &Key) -> u32 {
        let number = u64::from_be_bytes(key.as_bytes()[..8].try_into().unwrap());
        (number % self.primaries.len() as u64) as u32
    }
    fn primary(&self, partition: u32) -> u16 {
        self.primaries[partition as usize]
    }
    fn backups(&self, partition: u32) -> &[u16] {
        &self.backups[partition as usize]
    }
}

/// A node other than the coordinator's: its engine and participant, and the copies it
/// hosts.
struct Node {
    engine: Engine,
    participant: Rc<RefCell<Participant>>,
    copies: Vec<(u32, Role, Arc<Partition>)>,
}

struct Cluster {
    executor: Executor,
    coordinator: Rc<Coordinator>,
    layout: Arc<Layout>,
    schema: Arc<[TableSpec]>,
    /// Node `n` at index `n - 1`.
    nodes: Vec<Node>,
    now_ns: u64,
    /// Decides which datagrams are lost.
    lose: Option<Lose>,
    /// Datagrams to deliver to nodes as if from the coordinator (forged ones), at the
    /// next exchange.
    forged: Forged,
}

/// Decides whether a datagram is lost, given the numbers of its source and target nodes
/// (the coordinator's is 0).
type Lose = Box<dyn FnMut(u16, u16, &[u8]) -> bool>;

/// Datagrams to deliver to nodes (given their numbers) as if from the coordinator.
type Forged = Rc<RefCell<Vec<(u16, Vec<u8>)>>>;

impl Cluster {
    fn new(layout: Layout) -> Self {
        let schema: Arc<[TableSpec]> = Arc::from(vec![TableSpec::fixed(1, "accounts", 8)]);
        let node_count = layout
            .primaries
            .iter()
            .chain(layout.backups.iter().flatten())
            .copied()
            .max()
            .unwrap();
        let layout = Arc::new(layout);
        let nodes = (1..=node_count)
            .map(|node| Self::start(&layout, &schema, node, 1))
            .collect();
        let participant = Rc::new(RefCell::new(Participant::new(Arc::new(NodeStore::new()))));
        let coordinator = Coordinator::new(
            COORDINATOR,
            ViewId(1),
            1,
            participant,
            layout.clone(),
            schema.clone(),
        );
        Self {
            executor: Executor::new(Engine::new(COORDINATOR, Config::default())),
            coordinator: Rc::new(coordinator),
            layout,
            schema,
            nodes,
            now_ns: 0,
            lose: None,
            forged: Rc::default(),
        }
    }

    /// Node `node` in incarnation `incarnation`, hosting empty copies of its partitions.
    fn start(layout: &Layout, schema: &[TableSpec], node: u16, incarnation: u64) -> Node {
        let mut store = NodeStore::new();
        let mut copies = Vec::new();
        for partition in 0..layout.primaries.len() as u32 {
            let role = if layout.primary(partition) == node {
                Role::Primary
            } else if layout.backups(partition).contains(&node) {
                Role::Backup
            } else {
                continue;
            };
            let copy = Arc::new(Partition::new(PartitionId(partition), schema));
            store.host(role, copy.clone());
            copies.push((partition, role, copy));
        }
        let participant = Rc::new(RefCell::new(Participant::new(Arc::new(store))));
        let config = Config {
            incarnation,
            ..Config::default()
        };
        let mut engine = Engine::new(EndpointId::new(node, 0), config);
        Participant::register(&participant, &mut engine);
        Node {
            engine,
            participant,
            copies,
        }
    }

    /// Restarts `node`: a new incarnation that remembers nothing (empty copies, no logs,
    /// no locks), so requests meant for its earlier life fail with `TargetRestarted`.
    fn restart(&mut self, node: u16) {
        let i = usize::from(node - 1);
        let incarnation = self.nodes[i].engine.config().incarnation + 1;
        self.nodes[i] = Self::start(&self.layout, &self.schema, node, incarnation);
    }

    fn node(&mut self, node: u16) -> &mut Node {
        &mut self.nodes[usize::from(node - 1)]
    }

    /// Runs `body` as a coroutine of node 0 to its end and returns its result.
    fn run<R: 'static>(&mut self, body: impl AsyncFnOnce(&Co, &Coordinator) -> R + 'static) -> R {
        let result = Rc::new(RefCell::new(None));
        let (slot, coordinator) = (result.clone(), self.coordinator.clone());
        self.executor.spawn(move |co| async move {
            *slot.borrow_mut() = Some(body(&co, &coordinator).await);
        });
        for _ in 0..STEPS_MAX {
            self.step();
            if self.executor.live() == 0 {
                break;
            }
        }
        result.take().expect("the coroutine finished")
    }

    /// One event-loop round of node 0, then every datagram delivered until none is left.
    fn step(&mut self) {
        self.now_ns += 1_000;
        let now = self.now_ns;
        self.executor.shared().set_now_ns(now);
        if self.lose.is_some() {
            // Datagrams are lost: the coordinator retransmits.
            self.executor.shared().engine().handle_timeout(now);
        }
        self.executor.run();
        let mut tx = TxBatch::new(64, UDP_MAX_PAYLOAD_BYTES);
        loop {
            let mut moved = false;
            for (node, datagram) in self.forged.borrow_mut().drain(..) {
                let engine = &mut self.nodes[usize::from(node - 1)].engine;
                engine.handle_datagram(now, Some(COORDINATOR), &mut datagram.to_vec());
                moved = true;
            }
            loop {
                self.executor.shared().engine().poll_transmit(&mut tx);
                if tx.is_empty() {
                    break;
                }
                for (target, datagram) in tx.iter() {
                    if let Some(lose) = self.lose.as_mut()
                        && lose(0, target.node(), datagram)
                    {
                        continue;
                    }
                    let engine = &mut self.nodes[usize::from(target.node() - 1)].engine;
                    engine.handle_datagram(now, Some(COORDINATOR), &mut datagram.to_vec());
                }
                tx.clear();
                moved = true;
            }
            for node in &mut self.nodes {
                let source = node.engine.local();
                loop {
                    node.engine.poll_transmit(&mut tx);
                    if tx.is_empty() {
                        break;
                    }
                    for (target, datagram) in tx.iter() {
                        assert_eq!(target, COORDINATOR);
                        if let Some(lose) = self.lose.as_mut()
                            && lose(source.node(), 0, datagram)
                        {
                            continue;
                        }
                        let mut engine = self.executor.shared().engine();
                        engine.handle_datagram(now, Some(source), &mut datagram.to_vec());
                    }
                    tx.clear();
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// The value of `key` in the copy of its partition at `node` (`None`: absent).
    fn value_at(&mut self, node: u16, key: u64) -> Option<u64> {
        let partition = self.layout.partition_of(TABLE, &Key::from(key));
        let (_, _, copy) = self
            .node(node)
            .copies
            .iter()
            .find(|(p, _, _)| *p == partition)
            .expect("the node hosts the key's partition");
        let mut value = Vec::new();
        let outcome = copy
            .read(TABLE, &Key::from(key), &mut value)
            .unwrap()
            .unwrap();
        outcome
            .present
            .then(|| u64::from_le_bytes(value.try_into().unwrap()))
    }
}

fn value(number: u64) -> Option<Vec<u8>> {
    Some(number.to_le_bytes().to_vec())
}

/// A commit whose rounds go to more nodes than one RPC batch holds (the engine's default
/// is 64): LOCK, COMMIT-BACKUP and COMMIT-PRIMARY to 70 nodes, VALIDATE to 69 and 70, and
/// a truncation flush to 70. Each round is sent in batches of at most the engine's limit.
#[test]
fn a_commit_reaches_more_nodes_than_one_batch_holds() {
    const NODES: u16 = 70;
    // Partition p: primary on node p + 1, backup on the next node (wrapping around).
    let mut cluster = Cluster::new(Layout {
        primaries: (1..=NODES).collect(),
        backups: (1..=NODES).map(|n| vec![n % NODES + 1]).collect(),
    });
    let keys: Vec<Key> = (0..u64::from(NODES)).map(Key::from).collect();
    let committed = cluster.run(async move |co, coordinator| {
        // Blind writes of one key per partition: LOCK, COMMIT-BACKUP, COMMIT-PRIMARY.
        let mut txn = coordinator.begin(co);
        for (i, key) in keys.iter().enumerate() {
            txn.put(TABLE, *key, value(i as u64 * 10)).unwrap();
        }
        txn.commit().await?;
        // Every key read, one written: VALIDATE of the other 69.
        let mut txn = coordinator.begin(co);
        let read = txn.read_many(TABLE, &keys).await?;
        assert_eq!(read[1], value(10));
        txn.write(TABLE, keys[0], value(1)).await?;
        txn.commit().await?;
        // A read-only transaction over all of them: VALIDATE of 70.
        let mut txn = coordinator.begin_read_only(co);
        let read = txn.read_many(TABLE, &keys).await?;
        assert_eq!(read[0], value(1));
        txn.commit().await?;
        let all: Vec<u16> = (1..=NODES).collect();
        coordinator.flush_truncation(co, &all).await;
        Ok::<_, Abort>(coordinator.stats())
    });
    let stats = committed.unwrap();
    assert_eq!((stats.committed, stats.aborted), (3, 0));
    assert_eq!(stats.lock_messages, 71);
    for partition in 0..NODES {
        let primary = partition + 1;
        let backup = primary % NODES + 1;
        let expected = if partition == 0 {
            1
        } else {
            u64::from(partition) * 10
        };
        let key = u64::from(partition);
        assert_eq!(cluster.value_at(primary, key), Some(expected));
        assert_eq!(cluster.value_at(backup, key), Some(expected));
    }
}

/// One partition: primary on node 1, backups on nodes 2 and 3.
fn three_nodes() -> Cluster {
    Cluster::new(Layout {
        primaries: vec![1],
        backups: vec![vec![2, 3]],
    })
}

/// Commits a blind write of `number` to key 7, returning the commit's result.
fn put(cluster: &mut Cluster, number: u64) -> Result<(), Abort> {
    cluster.run(async move |co, coordinator| {
        let mut txn = coordinator.begin(co);
        txn.put(TABLE, Key::from(7), value(number)).unwrap();
        txn.commit().await
    })
}

/// After a commit that failed at COMMIT-BACKUP: nothing is locked at the primary, the
/// primary kept the value of the last commit, the backup that had logged the record
/// dropped it (a truncation covering it does not apply it), and the next commit goes
/// through once the backup behaves.
fn assert_nothing_left_of_the_failed_commit(cluster: &mut Cluster, last: u64) {
    assert_eq!(
        cluster.node(1).participant.borrow().locked_transactions(),
        0
    );
    assert_eq!(cluster.value_at(1, 7), Some(last));
    cluster.run(async |co, coordinator| coordinator.flush_truncation(co, &[2]).await);
    assert_eq!(cluster.value_at(2, 7), Some(last));
    put(cluster, last + 1).unwrap();
    cluster.run(async |co, coordinator| coordinator.flush_truncation(co, &[2, 3]).await);
    assert_eq!(cluster.value_at(1, 7), Some(last + 1));
    assert_eq!(cluster.value_at(2, 7), Some(last + 1));
    assert_eq!(cluster.value_at(3, 7), Some(last + 1));
}

/// A backup refuses COMMIT-BACKUP (its handler returns an error): the commit fails with
/// `Abort::Protocol`, its locks are released and no backup keeps its record.
#[test]
fn a_refused_commit_backup_aborts_the_commit() {
    let mut cluster = three_nodes();
    put(&mut cluster, 1).unwrap();
    cluster.node(3).engine.register(
        RequestType::CommitBackup.into(),
        Box::new(|_, _| Err(HandlerError("refused"))),
    );
    assert_eq!(put(&mut cluster, 2), Err(Abort::Protocol));
    let node = cluster.node(3);
    Participant::register(&node.participant, &mut node.engine);
    assert_nothing_left_of_the_failed_commit(&mut cluster, 1);
}

/// A backup answers COMMIT-BACKUP with something other than its one-byte yes.
#[test]
fn a_malformed_commit_backup_answer_aborts_the_commit() {
    let mut cluster = three_nodes();
    put(&mut cluster, 1).unwrap();
    let node = cluster.node(3);
    let participant = node.participant.clone();
    node.engine.register(
        RequestType::CommitBackup.into(),
        Box::new(move |request, response| {
            Participant::commit_backup(&mut participant.borrow_mut(), request.payload, response)?;
            response.push(9);
            Ok(())
        }),
    );
    assert_eq!(put(&mut cluster, 2), Err(Abort::Protocol));
    let node = cluster.node(3);
    Participant::register(&node.participant, &mut node.engine);
    // Node 3 had logged the record before answering wrongly: the abort dropped it there
    // too, so a truncation does not apply it.
    cluster.run(async |co, coordinator| coordinator.flush_truncation(co, &[3]).await);
    assert_eq!(cluster.value_at(3, 7), Some(1));
    assert_nothing_left_of_the_failed_commit(&mut cluster, 1);
}

/// A backup restarts between two commits: the second's COMMIT-BACKUP, addressed to its
/// earlier life, fails with `TargetRestarted`, and the commit fails with
/// `Abort::Protocol`.
#[test]
fn a_backup_restarted_during_the_commit_aborts_it() {
    let mut cluster = three_nodes();
    put(&mut cluster, 1).unwrap();
    cluster.restart(3);
    assert_eq!(put(&mut cluster, 2), Err(Abort::Protocol));
    assert_nothing_left_of_the_failed_commit(&mut cluster, 1);
}

/// A primary grants a LOCK of a blind write without the version it locked at: the
/// coordinator cannot build the commit record, so it releases the locks and the commit
/// fails with `Abort::Protocol`.
#[test]
fn a_lock_granted_without_its_versions_aborts_the_commit() {
    let mut cluster = three_nodes();
    put(&mut cluster, 1).unwrap();
    let node = cluster.node(1);
    let participant = node.participant.clone();
    node.engine.register(
        RequestType::Lock.into(),
        Box::new(move |request, response| {
            Participant::lock(&mut participant.borrow_mut(), request.payload, response)?;
            response.truncate(1);
            Ok(())
        }),
    );
    assert_eq!(put(&mut cluster, 2), Err(Abort::Protocol));
    let node = cluster.node(1);
    Participant::register(&node.participant, &mut node.engine);
    assert_nothing_left_of_the_failed_commit(&mut cluster, 1);
}

/// Loses the first message of `kind` and `request_type` between the coordinator and
/// node 1 and delivers, before the coordinator's retransmission, a forged request with a
/// later number on the same RPC slot: the retransmission is answered `Overtaken`. A lost
/// request did not run; a lost response's request did.
fn overtake_first(
    cluster: &mut Cluster,
    kind: ferrotx_wire::MessageKind,
    request_type: RequestType,
) {
    let forged = cluster.forged.clone();
    let mut lost = false;
    cluster.lose = Some(Box::new(move |source, target, datagram| {
        let datagram = ferrotx_wire::decode(datagram).unwrap();
        let Some(message) = datagram
            .messages()
            .find(|m| m.kind() == kind && m.header.request_type == u8::from(request_type))
        else {
            return false;
        };
        if lost || source.max(target) != 1 {
            return false;
        }
        lost = true;
        let mut buf = Vec::with_capacity(256);
        ferrotx_wire::start_datagram(
            &mut buf,
            COORDINATOR,
            EndpointId::new(1, 0),
            ViewId(1),
            1,
            1,
        );
        let fields = ferrotx_wire::MessageFields {
            kind: ferrotx_wire::MessageKind::Request,
            request_type: RequestType::Read.into(),
            status: ferrotx_wire::Status::Ok,
            slot: message.header.slot,
            request_number: message.header.request_number.get() + 3,
        };
        let whole = ferrotx_wire::FragmentInfo::whole(1);
        assert!(ferrotx_wire::push_message(&mut buf, fields, whole, &[0]));
        forged.borrow_mut().push((1, buf));
        true
    }));
}

/// Issue 29: the primary ran a LOCK and its answer was lost; before the coordinator's
/// retransmission arrived, a forged request with a later number took the RPC slot, so the
/// retransmission fails with `RpcError::Overtaken`. The LOCK may hold locks there: the
/// coordinator counts it as locked and releases it, rather than leave the objects locked
/// for good.
#[test]
fn a_lock_overtaken_by_a_forged_request_is_released() {
    let mut cluster = three_nodes();
    put(&mut cluster, 1).unwrap();
    overtake_first(
        &mut cluster,
        ferrotx_wire::MessageKind::Response,
        RequestType::Lock,
    );
    assert_eq!(put(&mut cluster, 2), Err(Abort::Protocol));
    assert_eq!(
        cluster.executor.shared().engine().stats().calls_overtaken,
        1
    );
    cluster.lose = None;
    assert_nothing_left_of_the_failed_commit(&mut cluster, 1);
}

/// As above for COMMIT-PRIMARY, after every backup logged the record, but the request is
/// lost this time, so the primary never ran it: the transaction is committed, and the
/// primary must still install it, or its objects stay locked. The coordinator sends an
/// overtaken COMMIT-PRIMARY again (had it run, installing twice is installing once).
#[test]
fn a_commit_primary_overtaken_by_a_forged_request_is_sent_again() {
    let mut cluster = three_nodes();
    put(&mut cluster, 1).unwrap();
    overtake_first(
        &mut cluster,
        ferrotx_wire::MessageKind::Request,
        RequestType::CommitPrimary,
    );
    assert_eq!(put(&mut cluster, 2), Ok(()));
    assert_eq!(
        cluster.executor.shared().engine().stats().calls_overtaken,
        1
    );
    cluster.lose = None;
    assert_eq!(
        cluster.node(1).participant.borrow().locked_transactions(),
        0
    );
    assert_eq!(cluster.value_at(1, 7), Some(2));
    put(&mut cluster, 3).unwrap();
    assert_eq!(cluster.value_at(1, 7), Some(3));
}

/// As above for ABORT: a backup refuses COMMIT-BACKUP, and the ABORT to the primary is
/// lost and overtaken. The coordinator sends it again, so the primary lets go of the
/// objects.
#[test]
fn an_abort_overtaken_by_a_forged_request_is_sent_again() {
    let mut cluster = three_nodes();
    put(&mut cluster, 1).unwrap();
    cluster.node(3).engine.register(
        RequestType::CommitBackup.into(),
        Box::new(|_, _| Err(HandlerError("refused"))),
    );
    overtake_first(
        &mut cluster,
        ferrotx_wire::MessageKind::Request,
        RequestType::Abort,
    );
    assert_eq!(put(&mut cluster, 2), Err(Abort::Protocol));
    assert_eq!(
        cluster.executor.shared().engine().stats().calls_overtaken,
        1
    );
    cluster.lose = None;
    let node = cluster.node(3);
    Participant::register(&node.participant, &mut node.engine);
    assert_nothing_left_of_the_failed_commit(&mut cluster, 1);
}
