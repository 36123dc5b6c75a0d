use super::*;

use ferrotx_exec::{Co, Executor};
use ferrotx_rpc::{Config, Engine};
use ferrotx_store::{Partition, PartitionId};

use crate::participant::Role;

const KV: TableId = TableId(1);

/// Two partitions, both with their primary on node 0 and no backup: every read and
/// commit of a coordinator on node 0 stays in memory, so its coroutines finish
/// within one `Executor::run`.
struct OneNode;

impl Placement for OneNode {
    fn partition_of(&self, _: TableId, key: &Key) -> u32 {
        u32::from(key.as_bytes()[0] % 2)
    }
    fn primary(&self, _: u32) -> u16 {
        0
    }
    fn backups(&self, _: u32) -> &[u16] {
        &[]
    }
}

/// A coordinator of node 0 over two partitions, with its executor.
fn one_node() -> (Executor, Rc<Coordinator>, [Arc<Partition>; 2]) {
    let local = EndpointId::new(0, 0);
    let schema: Arc<[TableSpec]> = Arc::from(vec![TableSpec::variable(1, "kv", 1 << 20)]);
    let partitions = [0, 1].map(|id| Arc::new(Partition::new(PartitionId(id), &schema)));
    let mut store = NodeStore::new();
    for partition in &partitions {
        store.host(Role::Primary, partition.clone());
    }
    let participant = Rc::new(RefCell::new(Participant::new(Arc::new(store))));
    let coordinator = Coordinator::new(local, 1, 1, participant, Arc::new(OneNode), schema);
    let executor = Executor::new(Engine::new(local, Config::default()));
    (executor, Rc::new(coordinator), partitions)
}

/// Runs `body` as a coroutine to its end and returns its result.
fn run<R: 'static>(
    executor: &mut Executor,
    coordinator: &Rc<Coordinator>,
    body: impl AsyncFnOnce(&Co, &Coordinator) -> R + 'static,
) -> R {
    let result = Rc::new(RefCell::new(None));
    let (slot, coordinator) = (result.clone(), coordinator.clone());
    executor.spawn(move |co| async move {
        *slot.borrow_mut() = Some(body(&co, &coordinator).await);
    });
    for _ in 0..100 {
        executor.run();
        if executor.live() == 0 {
            break;
        }
    }
    result.take().expect("the coroutine finished")
}

fn key(first: u8, rest: u8) -> Key {
    Key::from_bytes(&[first, rest]).unwrap()
}

#[test]
fn a_transaction_reports_the_versions_it_read() {
    let (mut executor, coordinator, partitions) = one_node();
    partitions[0].load(KV, key(0, 1), b"one").unwrap();
    let versions = run(&mut executor, &coordinator, async |co, coordinator| {
        // Version 1 after loading; commit a new value.
        let mut txn = coordinator.begin(co);
        txn.read(KV, key(0, 1)).await.unwrap();
        txn.put(KV, key(0, 1), Some(b"two".to_vec())).unwrap();
        txn.commit().await.unwrap();
        // A new transaction reads it at version 2; an absent key at 0; a blind
        // write reads nothing.
        let mut txn = coordinator.begin(co);
        txn.read_many(KV, &[key(0, 1), key(1, 9)]).await.unwrap();
        txn.put(KV, key(1, 7), Some(b"blind".to_vec())).unwrap();
        [
            txn.read_version(KV, &key(0, 1)),
            txn.read_version(KV, &key(1, 9)),
            txn.read_version(KV, &key(1, 7)),
            txn.read_version(TableId(9), &key(0, 1)),
        ]
    });
    assert_eq!(versions, [Some(2), Some(0), None, None]);
}

#[test]
fn scans_and_counts_visit_every_present_object_of_a_partition() {
    let (mut executor, coordinator, partitions) = one_node();
    for i in 0..50u8 {
        let partition = &partitions[usize::from(i % 2)];
        partition.load(KV, key(i % 2, i), &[i; 3]).unwrap();
    }
    // A deleted key is not present: lock at its version, install nothing.
    partitions[1].lock(KV, &key(1, 1), 1).unwrap().unwrap();
    partitions[1].install(KV, &key(1, 1), None).unwrap();
    let (pages, counts, refused) = run(&mut executor, &coordinator, async |co, coordinator| {
        let mut pages = Vec::new();
        for partition in [0, 1] {
            let (mut cursor, mut seen) = (0, Vec::new());
            loop {
                let page = coordinator
                    .scan_partition(co, partition, KV, cursor, 7)
                    .await
                    .unwrap();
                assert!(page.visited <= 7);
                seen.extend(page.objects);
                cursor = page.next_cursor;
                if cursor == 0 {
                    break;
                }
            }
            pages.push(seen);
        }
        let counts = [
            coordinator.count_present(co, KV, &[0]).await.unwrap(),
            coordinator.count_present(co, KV, &[0, 1]).await.unwrap(),
        ];
        let refused = coordinator
            .scan_partition(co, 0, TableId(9), 0, 7)
            .await
            .unwrap_err();
        (pages, counts, refused)
    });
    // In insertion order, each once, with its value; the deleted key left out.
    let expected = |first: u8| -> Vec<(Key, Vec<u8>)> {
        (0..50u8)
            .filter(|i| i % 2 == first && (first, *i) != (1, 1))
            .map(|i| (key(first, i), vec![i; 3]))
            .collect()
    };
    assert_eq!(pages[0], expected(0));
    assert_eq!(pages[1], expected(1));
    assert_eq!(counts, [25, 49]);
    assert_eq!(
        refused,
        Abort::Refused(StoreError::UnknownTable(TableId(9)))
    );
}
