use super::*;

use ferrotx_exec::{Co, Executor};
use ferrotx_rpc::{Config, Engine};
use ferrotx_store::{Partition, PartitionId};
use ferrotx_wire::ViewId;

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
    let coordinator = Coordinator::new(local, ViewId(1), 1, participant, Arc::new(OneNode), schema);
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

/// A transaction whose commit may start only in one view (`Txn::commit_only_in`, a
/// shipped batch's) is refused, nothing written, once the view changed, including while
/// its commit waited for the next view to be committed.
#[test]
fn a_commit_pinned_to_a_view_starts_in_no_other() {
    let (mut executor, coordinator, partitions) = one_node();
    partitions[0].load(KV, key(0, 1), b"one").unwrap();
    let switch = |coordinator: &Coordinator, view: u64| {
        coordinator.switch_configuration(
            ViewId(view),
            Arc::from(vec![(0u16, 1u64)]),
            coordinator.placement(),
            coordinator.store(),
        );
    };
    let outcomes = run(&mut executor, &coordinator, async move |co, coordinator| {
        let mut outcomes = Vec::new();
        // In its view: committed.
        let mut txn = coordinator.begin(co);
        txn.commit_only_in(ViewId(1));
        txn.read(KV, key(0, 1)).await.unwrap();
        txn.put(KV, key(0, 1), Some(b"two".to_vec())).unwrap();
        outcomes.push(txn.commit().await);
        // The view changes between its reads and its commit: refused.
        let mut txn = coordinator.begin(co);
        txn.commit_only_in(ViewId(1));
        txn.read(KV, key(0, 1)).await.unwrap();
        txn.put(KV, key(0, 1), Some(b"three".to_vec())).unwrap();
        switch(coordinator, 2);
        outcomes.push(txn.commit().await);
        // The same without the pin: committed in the new view.
        let mut txn = coordinator.begin(co);
        txn.read(KV, key(0, 1)).await.unwrap();
        txn.put(KV, key(0, 1), Some(b"four".to_vec())).unwrap();
        outcomes.push(txn.commit().await);
        let mut value = Vec::new();
        let read = coordinator
            .read_one_with_version(co, KV, key(0, 1), &mut value)
            .await
            .map(|o| o.version);
        (outcomes, read, value)
    });
    assert_eq!(
        outcomes,
        (
            vec![Ok(()), Err(Abort::Unavailable), Ok(())],
            Ok(3),
            b"four".to_vec()
        )
    );
    // Pinned to view 2, its commit waits for view 2 to be committed; view 3 comes first.
    coordinator.set_accepting(false);
    let result = Rc::new(RefCell::new(None));
    let (slot, c) = (result.clone(), coordinator.clone());
    executor.spawn(move |co| async move {
        let mut txn = c.begin(&co);
        txn.commit_only_in(ViewId(2));
        txn.put(KV, key(0, 1), Some(b"five".to_vec())).unwrap();
        *slot.borrow_mut() = Some(txn.commit().await);
    });
    executor.run();
    assert_eq!(executor.live(), 1);
    switch(&coordinator, 3);
    coordinator.set_accepting(true);
    executor.shared().notify_all(coordinator.opened());
    executor.run();
    assert_eq!(executor.live(), 0);
    assert_eq!(result.take(), Some(Err(Abort::Unavailable)));
    let read = run(&mut executor, &coordinator, async |co, coordinator| {
        let mut value = Vec::new();
        let version = coordinator
            .read_one_with_version(co, KV, key(0, 1), &mut value)
            .await
            .map(|o| o.version);
        (version, value)
    });
    assert_eq!(read, (Ok(3), b"four".to_vec()));
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

/// [`run`] for a coroutine that may sleep (a fault point's delay): when nothing else can
/// run, the executor's time jumps to the next sleeper's deadline.
fn run_with_time<R: 'static>(
    executor: &mut Executor,
    coordinator: &Rc<Coordinator>,
    body: impl AsyncFnOnce(&Co, &Coordinator) -> R + 'static,
) -> R {
    let result = Rc::new(RefCell::new(None));
    let (slot, coordinator) = (result.clone(), coordinator.clone());
    executor.spawn(move |co| async move {
        *slot.borrow_mut() = Some(body(&co, &coordinator).await);
    });
    for _ in 0..100_000 {
        executor.run();
        if executor.live() == 0 {
            break;
        }
        if let Some(deadline) = executor.next_timer_ns() {
            let now = executor.shared().now_ns();
            executor.shared().set_now_ns(deadline.max(now));
        }
    }
    result.take().expect("the coroutine finished")
}

/// With the fault points enabled, a lone client sees the same answers as without them,
/// except for the aborts they may legally cause (a conflict where there was none), which
/// it retries: transactions over several batches of reads, read-only transactions and
/// single-key reads return exactly what was committed.
#[test]
fn fault_points_change_no_answer() {
    let mut fired = std::collections::BTreeMap::<&'static str, u64>::new();
    for seed in 0..100 {
        let (mut executor, coordinator, partitions) = one_node();
        for i in 0..100u8 {
            partitions[usize::from(i % 2)]
                .load(KV, key(i % 2, i), &[i])
                .unwrap();
        }
        let buggify = ferrotx_buggify::enable(seed);
        let (values, single) = run_with_time(&mut executor, &coordinator, async |co, c| {
            // More keys than one batch of reads (READ_BATCH_MAX).
            let keys: Vec<Key> = (0..100u8).map(|i| key(i % 2, i)).collect();
            // Adds 1 to every tenth key, retrying what aborts.
            loop {
                let mut txn = c.begin(co);
                let values = txn.read_many(KV, &keys).await.unwrap();
                for (key, value) in keys.iter().zip(values).step_by(10) {
                    txn.put(KV, *key, Some(vec![value.unwrap()[0] + 1]))
                        .unwrap();
                }
                match txn.commit().await {
                    Ok(()) => break,
                    // Fault points refuse a LOCK as a conflict, or as out of memory.
                    Err(abort) => assert!(
                        matches!(abort, Abort::Conflict | Abort::OutOfMemory),
                        "{abort:?}"
                    ),
                }
            }
            let values = loop {
                let mut txn = c.begin_read_only(co);
                let values = txn.read_many(KV, &keys).await.unwrap();
                match txn.commit().await {
                    Ok(()) => break values,
                    Err(abort) => assert_eq!(abort, Abort::Conflict),
                }
            };
            let mut single = Vec::new();
            for key in &keys {
                single.push(c.read_one(co, KV, *key).await.unwrap());
            }
            (values, single)
        });
        let expected: Vec<Option<Vec<u8>>> = (0..100u8)
            .map(|i| Some(vec![i + u8::from(i % 10 == 0)]))
            .collect();
        assert_eq!(values, expected, "seed {seed}");
        assert_eq!(single, expected, "seed {seed}");
        for (point, n) in buggify.fired() {
            *fired.entry(point).or_default() += n;
        }
    }
    // The points on this path fired (a lone node has no backups and no conflicts, so
    // not every point is reached).
    for point in [
        "txn.read_many.between_batches",
        "txn.read_many.pretend_locked",
        "txn.read_one.before_answer",
        "txn.commit.before_lock",
        "txn.commit.abort_after_lock",
        "txn.participant.lock.refuse",
        "txn.participant.lock.out_of_memory",
        "txn.participant.validate.refuse",
        "txn.commit.before_truncate",
    ] {
        assert!(
            fired.get(point).is_some_and(|&n| n > 0),
            "{point}: {fired:?}"
        );
    }
}

#[test]
fn transactions_wait_for_the_configuration_commit_and_give_up_after_a_bound() {
    let (mut executor, coordinator, partitions) = one_node();
    partitions[0].load(KV, key(0, 1), b"one").unwrap();
    coordinator.set_accepting(false);
    let result = Rc::new(RefCell::new(None));
    let (slot, c) = (result.clone(), coordinator.clone());
    executor.spawn(move |co| async move {
        let mut value = Vec::new();
        let read = c
            .read_one_with_version(&co, KV, key(0, 1), &mut value)
            .await;
        *slot.borrow_mut() = Some((read.map(|o| o.version), value));
    });
    // Waiting: parked, not polled again, until notified.
    executor.shared().set_now_ns(1_000);
    executor.run();
    executor.run();
    assert_eq!(executor.live(), 1);
    assert!(!executor.has_work());
    coordinator.set_accepting(true);
    executor.shared().notify_all(coordinator.opened());
    executor.run();
    assert_eq!(executor.live(), 0);
    assert_eq!(result.take(), Some((Ok(1), b"one".to_vec())));
    // Not committed within the bound: refused as unavailable (nothing done).
    coordinator.set_accepting(false);
    let (slot, c) = (result.clone(), coordinator.clone());
    executor.spawn(move |co| async move {
        let mut txn = c.begin(&co);
        txn.put(KV, key(0, 1), Some(b"two".to_vec())).unwrap();
        *slot.borrow_mut() = Some((txn.commit().await.map(|()| 0), Vec::new()));
    });
    executor.run();
    assert_eq!(executor.live(), 1);
    executor.shared().set_now_ns(1_000 + ACCEPT_WAIT_NS + 1);
    executor.run();
    assert_eq!(executor.live(), 0);
    assert_eq!(result.take(), Some((Err(Abort::Unavailable), Vec::new())));
}

/// A transaction of many keys (a Redis MGET, MSET or DEL of as many keys as a client
/// sends) costs time about linear in them. `read_many` removed repeated keys, and every
/// read, write and lookup searched the transaction's keys, linearly: O(n^2) for n keys,
/// 9 s for an MGET of 100,000 keys through redis-cli, and over the 2 s below for these.
#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "a test of running time: it measures the wall clock, not protocol time"
)]
fn a_transaction_of_many_keys_runs_in_time_about_linear_in_them() {
    const KEYS: u32 = 60_000;
    let (mut executor, coordinator, partitions) = one_node();
    let keys: Vec<Key> = (0..KEYS)
        .map(|i| Key::from_bytes(&i.to_le_bytes()).unwrap())
        .collect();
    for key in keys.iter().step_by(2) {
        let partition = usize::from(key.as_bytes()[0] % 2);
        partitions[partition].load(KV, *key, b"v").unwrap();
    }
    let started = std::time::Instant::now();
    let (present, read, written) =
        run(&mut executor, &coordinator, async move |co, coordinator| {
            let mut txn = coordinator.begin(co);
            // Every key twice, and some read before.
            txn.read(KV, keys[0]).await.unwrap();
            let twice: Vec<Key> = keys.iter().chain(&keys).copied().collect();
            let values = txn.read_many(KV, &twice).await.unwrap();
            for key in keys.iter().step_by(3) {
                txn.put(KV, *key, None).unwrap();
            }
            let read = keys
                .iter()
                .filter(|key| txn.read_version(KV, key).is_some())
                .count();
            let present = values.iter().filter(|value| value.is_some()).count();
            (present, read, txn.writes().len())
        });
    let elapsed = started.elapsed();
    let keys = KEYS as usize;
    // Half the keys are present, each asked for twice.
    assert_eq!(present, keys);
    assert_eq!((read, written), (keys, keys.div_ceil(3)));
    assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
}
