//! A 3-node cluster with 3 replicas inside one process: concurrent transfers from every
//! node and thread; money is conserved and every backup equals its primary at the end.
//! Also the transaction API's other parts: single-key lock-free reads (which allocate
//! nothing once warm), read-only transactions, insert and delete, locality hints, bad
//! input refused with a clear error that changes nothing, and many open transactions.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::rc::Rc;

use ferrotx_cluster::Configuration;
use ferrotx_node::LocalCluster;
use ferrotx_store::{KEY_BYTES_MAX, Key, StoreError, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator};
use ferrotx_txn::participant::LOG_RECORDS_MAX;
use ferrotx_workload::bank::{BankWorkload, balance};
use ferrotx_workload::record::HistoryRecorder;
use ferrotx_workload::state::CopyState;
use ferrotx_workload::workload::{Runner, Workload};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Counts the allocations of each thread, so a coroutine can count its own worker
/// thread's (other threads allocate as they like).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_allocation() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the thread-local
// counter (const-initialised, no destructor, so it never allocates) is the only addition.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded with the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (through `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded unchanged; `ptr` and `layout` come from this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const ACCOUNTS: TableId = TableId(1);
const COUNT: u64 = 50;
const INITIAL: u64 = 100;

#[test]
fn transfers_conserve_money_and_replicas_agree() {
    let config = Configuration::local(3, 3, 2, 2, 41_000).unwrap();
    let workload = Workload::Bank(BankWorkload {
        amount_max: 30,
        ..BankWorkload::transfers(COUNT, INITIAL)
    });
    let cluster = LocalCluster::start(config, workload.schema());
    workload
        .load(&mut |table, key, value| {
            assert!(cluster.load(table, key, value)?);
            Ok(true)
        })
        .unwrap();
    let recorder = HistoryRecorder::new();
    let mut runs = Vec::new();
    for node in cluster.nodes() {
        for thread in 0..2 {
            for c in 0..3u64 {
                let seed = (u64::from(node) << 8) | (u64::from(thread) << 4) | c;
                let mut runner = Runner::new(workload.clone(), ChaCha8Rng::seed_from_u64(seed));
                let mut recorder = recorder.clone();
                runs.push(cluster.spawn(
                    node,
                    thread,
                    move |co, coordinator: Rc<Coordinator>| async move {
                        let mut committed = 0u32;
                        for _ in 0..60 {
                            let done = runner.run_one(&co, &coordinator, &mut recorder).await;
                            committed += u32::from(done.result.is_ok());
                        }
                        // Bad input is refused with a clear error and changes nothing.
                        let mut tx = coordinator.begin(&co);
                        let refused = tx.write(TableId(9), Key::from(1), Some(vec![0; 8])).await;
                        assert_eq!(
                            refused,
                            Err(Abort::Refused(StoreError::UnknownTable(TableId(9))))
                        );
                        let too_short = tx.write(ACCOUNTS, Key::from(1), Some(vec![0; 3])).await;
                        assert_eq!(
                            too_short,
                            Err(Abort::Refused(StoreError::WrongValueSize {
                                len: 3,
                                expected: 8
                            }))
                        );
                        assert!(tx.commit().await.is_ok(), "an empty transaction commits");
                        committed
                    },
                ));
            }
        }
    }
    let mut committed = 0;
    for run in runs {
        committed += run.recv().unwrap();
    }
    assert!(committed > 0);
    cluster.flush_truncation();
    // Money conserved, strictly serializable, no write lost, replicas equal.
    let state = |table: TableId, key: &Key| {
        cluster
            .read_copies(table, key)
            .into_iter()
            .map(CopyState::from)
    };
    assert_eq!(workload.end_checks(&recorder.history(), &state), []);
    cluster.stop();
}

/// A transaction whose commit-backup record would not fit one message is refused before
/// it locks anything, even when each of its lock messages would fit.
#[test]
fn a_transaction_too_large_for_a_backup_is_refused_before_locking() {
    const BLOBS: TableId = TableId(2);
    let config = Configuration::local(3, 3, 1, 2, 42_000).unwrap();
    let cluster = LocalCluster::start(config, vec![TableSpec::variable(2, "blobs", 1 << 20)]);
    // Two keys whose partitions have different primaries: with 3 replicas on 3 nodes, a
    // third node backs up both.
    let primary_of = |key: u64| {
        let partition = cluster.partition_of(BLOBS, &Key::from(key));
        cluster.config().partitions().primary(partition)
    };
    let first = 0;
    let second = (1..1000)
        .find(|&k| primary_of(k) != primary_of(first))
        .unwrap();
    let node = cluster.nodes()[0];
    let outcome = cluster
        .spawn(
            node,
            0,
            move |co, coordinator: Rc<Coordinator>| async move {
                let big = vec![7u8; 700 << 10];
                let mut tx = coordinator.begin(&co);
                tx.write(BLOBS, Key::from(first), Some(big.clone()))
                    .await
                    .unwrap();
                tx.write(BLOBS, Key::from(second), Some(big)).await.unwrap();
                let refused = tx.commit().await;
                // Nothing was left locked: a smaller transaction on the same keys commits.
                let mut tx = coordinator.begin(&co);
                tx.write(BLOBS, Key::from(first), Some(vec![1; 10]))
                    .await
                    .unwrap();
                tx.write(BLOBS, Key::from(second), Some(vec![2; 10]))
                    .await
                    .unwrap();
                (refused, tx.commit().await)
            },
        )
        .recv()
        .unwrap();
    assert_eq!(outcome, (Err(Abort::TooLarge), Ok(())));
    cluster.stop();
}

/// A transaction abandoned without commit still counts as finished: the coordinator's
/// truncation mark moves past it and backups apply the transactions after it.
#[test]
fn an_abandoned_transaction_does_not_stall_truncation() {
    let config = Configuration::local(3, 3, 1, 1, 43_000).unwrap();
    let cluster = LocalCluster::start(config, vec![TableSpec::fixed(1, "accounts", 8)]);
    for account in 0..4 {
        assert!(
            cluster
                .load(ACCOUNTS, Key::from(account), &INITIAL.to_le_bytes())
                .unwrap()
        );
    }
    let nodes = cluster.nodes();
    let node = nodes[0];
    cluster
        .spawn(
            node,
            0,
            move |co, coordinator: Rc<Coordinator>| async move {
                {
                    let mut abandoned = coordinator.begin(&co);
                    let refused = abandoned
                        .write(TableId(9), Key::from(0), Some(vec![0; 8]))
                        .await;
                    assert!(refused.is_err());
                }
                for account in 0..4u64 {
                    let mut tx = coordinator.begin(&co);
                    tx.write(
                        ACCOUNTS,
                        Key::from(account),
                        Some((account * 10).to_le_bytes().to_vec()),
                    )
                    .await
                    .unwrap();
                    tx.commit().await.unwrap();
                }
                coordinator.flush_truncation(&co, &nodes).await;
            },
        )
        .recv()
        .unwrap();
    assert!(
        cluster
            .replicas_differ(ACCOUNTS, (0..4).map(Key::from))
            .is_empty()
    );
    cluster.stop();
}

const BLOBS: TableId = TableId(2);
const ORDERS: TableId = TableId(3);

/// Accounts, blobs of up to 1 KiB, and orders placed by their first 8 bytes (the
/// customer), as `Key::from_pair(customer, order)`.
fn schema() -> Vec<TableSpec> {
    vec![
        TableSpec::fixed(1, "accounts", 8),
        TableSpec::variable(2, "blobs", 1024),
        TableSpec::fixed(3, "orders", 8).with_partition_key(8),
    ]
}

fn primary_of(cluster: &LocalCluster, table: TableId, key: &Key) -> u16 {
    let partition = cluster.partition_of(table, key);
    cluster.config().partitions().primary(partition)
}

fn read(cluster: &LocalCluster, table: TableId, key: &Key) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let outcome = cluster.read_primary(table, key, &mut out).unwrap();
    outcome.present.then_some(out)
}

fn balance_of(cluster: &LocalCluster, account: u64) -> u64 {
    balance(read(cluster, ACCOUNTS, &Key::from(account)))
}

/// Every kind of bad input is refused with its own error, changes nothing in the store
/// and leaves the transaction (or, for a refused commit, the coroutine) able to go on.
#[test]
fn bad_input_is_refused_clearly_and_changes_nothing() {
    let config = Configuration::local(3, 3, 1, 6, 44_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    for account in 0..4 {
        assert!(
            cluster
                .load(ACCOUNTS, Key::from(account), &INITIAL.to_le_bytes())
                .unwrap()
        );
    }
    // A key longer than the store allows cannot even be made.
    assert_eq!(
        Key::from_bytes(&[0; KEY_BYTES_MAX + 1]),
        Err(StoreError::KeyTooLong {
            len: KEY_BYTES_MAX + 1,
            max: KEY_BYTES_MAX
        })
    );
    // Loading is checked like transactions.
    assert_eq!(
        cluster.load(ORDERS, Key::from_bytes(b"abc").unwrap(), &[0; 8]),
        Err(StoreError::KeyShorterThanPartitionKey { len: 3, min: 8 })
    );
    // Two blob keys with one primary, so that their writes share one LOCK message.
    let blob_a = Key::from(100);
    let blob_b = (101..1000)
        .map(Key::from)
        .find(|k| primary_of(&cluster, BLOBS, k) == primary_of(&cluster, BLOBS, &blob_a))
        .unwrap();
    let node = cluster.nodes()[0];
    let outcomes = cluster
        .spawn(
            node,
            0,
            move |co, coordinator: Rc<Coordinator>| async move {
                let mut outcomes = Vec::new();
                let unknown = TableId(9);
                let short = Key::from_bytes(b"abc").unwrap();
                let mut tx = coordinator.begin(&co);
                // Unknown table: on read, write, insert, delete and single-key read.
                outcomes.push(tx.read(unknown, Key::from(0)).await.map(|_| ()));
                outcomes.push(tx.write(unknown, Key::from(0), Some(vec![0; 8])).await);
                outcomes.push(tx.insert(unknown, Key::from(0), vec![0; 8]).await);
                outcomes.push(tx.delete(unknown, Key::from(0)).await);
                outcomes.push(
                    coordinator
                        .read_one(&co, unknown, Key::from(0))
                        .await
                        .map(|_| ()),
                );
                // A value over the table's limit, or of the wrong size for a fixed table.
                outcomes.push(tx.write(BLOBS, Key::from(1), Some(vec![0; 1025])).await);
                outcomes.push(tx.insert(BLOBS, Key::from(1), vec![0; 1025]).await);
                outcomes.push(tx.write(ACCOUNTS, Key::from(1), Some(vec![0; 3])).await);
                // A key shorter than the table's partition key.
                outcomes.push(tx.read(ORDERS, short).await.map(|_| ()));
                outcomes.push(tx.write(ORDERS, short, Some(vec![0; 8])).await);
                outcomes.push(coordinator.read_one(&co, ORDERS, short).await.map(|_| ()));
                // An insert of a key that exists.
                outcomes.push(tx.insert(ACCOUNTS, Key::from(2), vec![0; 8]).await);
                // The transaction goes on: its valid writes commit, and only they.
                tx.write(ACCOUNTS, Key::from(0), Some(150u64.to_le_bytes().to_vec()))
                    .await
                    .unwrap();
                tx.insert(BLOBS, Key::from(7), b"new".to_vec())
                    .await
                    .unwrap();
                assert!(tx.reads().iter().all(|r| r.table != unknown));
                assert_eq!(tx.writes().len(), 2);
                tx.commit().await.unwrap();

                // Writes in a read-only transaction, which then reads and commits.
                let mut ro = coordinator.begin_read_only(&co);
                assert!(ro.is_read_only());
                outcomes.push(ro.write(ACCOUNTS, Key::from(1), Some(vec![0; 8])).await);
                outcomes.push(ro.insert(ACCOUNTS, Key::from(9), vec![0; 8]).await);
                outcomes.push(ro.delete(ACCOUNTS, Key::from(1)).await);
                assert!(ro.writes().is_empty());
                assert_eq!(balance(ro.read(ACCOUNTS, Key::from(0)).await.unwrap()), 150);
                assert_eq!(
                    balance(ro.read(ACCOUNTS, Key::from(1)).await.unwrap()),
                    INITIAL
                );
                ro.commit().await.unwrap();

                // A transaction larger than the log allows: refused at commit, before
                // anything is reserved or locked; the next transaction on the same keys
                // commits.
                let mut tx = coordinator.begin(&co);
                for (i, key) in [blob_a, blob_b].into_iter().enumerate() {
                    tx.write(BLOBS, key, Some(vec![i as u8; 1024]))
                        .await
                        .unwrap();
                }
                for k in 0..2000u64 {
                    tx.write(BLOBS, Key::from(10_000 + k), Some(vec![1; 1024]))
                        .await
                        .unwrap();
                }
                outcomes.push(tx.commit().await);
                let mut tx = coordinator.begin(&co);
                tx.write(BLOBS, blob_a, Some(b"a".to_vec())).await.unwrap();
                tx.write(BLOBS, blob_b, Some(b"b".to_vec())).await.unwrap();
                tx.commit().await.unwrap();
                let stats = coordinator.stats();
                (outcomes, stats.committed, stats.log_full_aborts)
            },
        )
        .recv()
        .unwrap();
    let (outcomes, committed, log_full) = outcomes;
    let unknown = Err(Abort::Refused(StoreError::UnknownTable(TableId(9))));
    let too_large = Err(Abort::Refused(StoreError::ValueTooLarge {
        len: 1025,
        max: 1024,
    }));
    let short = Err(Abort::Refused(StoreError::KeyShorterThanPartitionKey {
        len: 3,
        min: 8,
    }));
    assert_eq!(
        outcomes,
        vec![
            unknown,
            unknown,
            unknown,
            unknown,
            unknown,
            too_large,
            too_large,
            Err(Abort::Refused(StoreError::WrongValueSize {
                len: 3,
                expected: 8
            })),
            short,
            short,
            short,
            Err(Abort::KeyExists),
            Err(Abort::ReadOnly),
            Err(Abort::ReadOnly),
            Err(Abort::ReadOnly),
            Err(Abort::TooLarge),
        ]
    );
    assert_eq!((committed, log_full), (3, 0));
    // The store holds exactly what the valid transactions wrote.
    assert_eq!(balance_of(&cluster, 0), 150);
    for account in 1..4 {
        assert_eq!(balance_of(&cluster, account), INITIAL);
    }
    assert_eq!(read(&cluster, ACCOUNTS, &Key::from(9)), None);
    assert_eq!(read(&cluster, BLOBS, &Key::from(1)), None);
    assert_eq!(read(&cluster, BLOBS, &Key::from(7)), Some(b"new".to_vec()));
    assert_eq!(read(&cluster, BLOBS, &blob_a), Some(b"a".to_vec()));
    assert_eq!(read(&cluster, BLOBS, &blob_b), Some(b"b".to_vec()));
    assert_eq!(read(&cluster, BLOBS, &Key::from(10_000)), None);
    cluster.stop();
}

/// A single-key read returns the latest committed value from any node, absent keys as
/// `None`, and needs no transaction.
#[test]
fn single_key_reads_see_every_committed_write() {
    let config = Configuration::local(3, 3, 1, 6, 45_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    assert!(
        cluster
            .load(ACCOUNTS, Key::from(1), &INITIAL.to_le_bytes())
            .unwrap()
    );
    let nodes = cluster.nodes();
    for (round, &writer) in nodes.iter().enumerate() {
        let value = 1000 + round as u64;
        cluster
            .spawn(
                writer,
                0,
                move |co, coordinator: Rc<Coordinator>| async move {
                    let mut tx = coordinator.begin(&co);
                    tx.write(ACCOUNTS, Key::from(1), Some(value.to_le_bytes().to_vec()))
                        .await
                        .unwrap();
                    tx.delete(ACCOUNTS, Key::from(2)).await.unwrap();
                    tx.commit().await.unwrap();
                },
            )
            .recv()
            .unwrap();
        // The commit was reported: every node's single-key read sees it.
        for &reader in &nodes {
            let (seen, deleted, before, stats) = cluster
                .spawn(reader, 0, |co, coordinator: Rc<Coordinator>| async move {
                    let before = coordinator.stats();
                    let seen = coordinator.read_one(&co, ACCOUNTS, Key::from(1)).await;
                    let mut out = vec![9; 4];
                    let deleted = coordinator
                        .read_one_into(&co, ACCOUNTS, Key::from(2), &mut out)
                        .await
                        .map(|present| (present, out.len()));
                    (seen, deleted, before, coordinator.stats())
                })
                .recv()
                .unwrap();
            assert_eq!(seen, Ok(Some(value.to_le_bytes().to_vec())));
            assert_eq!(deleted, Ok((false, 0)));
            // No transaction: nothing counted but the reads.
            assert_eq!(
                (stats.committed, stats.aborted, stats.single_reads),
                (before.committed, before.aborted, before.single_reads + 2)
            );
        }
    }
    cluster.stop();
}

/// Once warm, single-key reads allocate nothing on the worker thread, at a local primary
/// or a remote one. (The in-process transport allocates a datagram buffer when its pool
/// happens to be empty, which depends on thread timing; so some round of 400 reads must
/// allocate nothing, where reads that allocated would do so in every round.)
#[test]
fn single_key_reads_allocate_nothing_once_warm() {
    let config = Configuration::local(3, 3, 1, 6, 46_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    let node = cluster.nodes()[0];
    let keys: Vec<Key> = (0..40).map(Key::from).collect();
    for key in &keys {
        assert!(
            cluster
                .load(ACCOUNTS, *key, &INITIAL.to_le_bytes())
                .unwrap()
        );
    }
    let local = keys
        .iter()
        .filter(|k| primary_of(&cluster, ACCOUNTS, k) == node)
        .count();
    assert!(
        local > 0 && local < keys.len(),
        "reads at local and remote primaries"
    );
    let rounds = cluster
        .spawn(
            node,
            0,
            move |co, coordinator: Rc<Coordinator>| async move {
                let mut out = Vec::with_capacity(64);
                let mut rounds = Vec::new();
                for round in 0..13 {
                    let before = allocations();
                    for _ in 0..10 {
                        for key in &keys {
                            assert!(
                                coordinator
                                    .read_one_into(&co, ACCOUNTS, *key, &mut out)
                                    .await
                                    .unwrap()
                            );
                            assert_eq!(out, INITIAL.to_le_bytes());
                        }
                    }
                    // The first rounds warm up (buffers, sessions).
                    if round >= 3 {
                        rounds.push(allocations() - before);
                    }
                }
                rounds
            },
        )
        .recv()
        .unwrap();
    assert!(
        rounds.contains(&0),
        "allocations in each round of 400 warm single-key reads: {rounds:?}"
    );
    cluster.stop();
}

/// A read-only transaction commits if what it read is unchanged, and aborts if a
/// transaction wrote it in between.
#[test]
fn read_only_transactions_validate_their_reads() {
    let config = Configuration::local(3, 3, 1, 6, 47_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    for account in 0..2 {
        assert!(
            cluster
                .load(ACCOUNTS, Key::from(account), &INITIAL.to_le_bytes())
                .unwrap()
        );
    }
    let node = cluster.nodes()[1];
    let outcomes = cluster
        .spawn(node, 0, |co, coordinator: Rc<Coordinator>| async move {
            let mut unchanged = coordinator.begin_read_only(&co);
            let mut changed = coordinator.begin_read_only(&co);
            for account in 0..2 {
                unchanged.read(ACCOUNTS, Key::from(account)).await.unwrap();
                changed.read(ACCOUNTS, Key::from(account)).await.unwrap();
            }
            let mut writer = coordinator.begin(&co);
            writer
                .write(ACCOUNTS, Key::from(1), Some(7u64.to_le_bytes().to_vec()))
                .await
                .unwrap();
            writer.commit().await.unwrap();
            let changed = changed.commit().await;
            let mut ro = coordinator.begin_read_only(&co);
            ro.read(ACCOUNTS, Key::from(0)).await.unwrap();
            let one = ro.read(ACCOUNTS, Key::from(1)).await.unwrap();
            (
                changed,
                unchanged.commit().await.is_err(),
                ro.commit().await,
                balance(one),
            )
        })
        .recv()
        .unwrap();
    // `unchanged` read account 1 before the write too: it aborts as well.
    assert_eq!(outcomes, (Err(Abort::Conflict), true, Ok(()), 7));
    cluster.stop();
}

/// Rows whose keys share a partition key share a partition: a transaction over two of
/// them locks at one primary (one LOCK message), where two keys of a table without the
/// hint, placed on different primaries, take two.
#[test]
fn rows_sharing_a_partition_key_commit_at_one_primary() {
    let config = Configuration::local(3, 3, 1, 12, 48_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    for customer in 0..20u64 {
        let partition = cluster.partition_of(ORDERS, &Key::from_pair(customer, 0));
        for order in 1..10 {
            assert_eq!(
                cluster.partition_of(ORDERS, &Key::from_pair(customer, order)),
                partition
            );
        }
    }
    let plain_a = Key::from(0);
    let plain_b = (1..1000)
        .map(Key::from)
        .find(|k| primary_of(&cluster, ACCOUNTS, k) != primary_of(&cluster, ACCOUNTS, &plain_a))
        .unwrap();
    let node = cluster.nodes()[0];
    let (grouped, plain) = cluster
        .spawn(
            node,
            0,
            move |co, coordinator: Rc<Coordinator>| async move {
                let mut messages = Vec::new();
                for keys in [
                    [
                        (ORDERS, Key::from_pair(5, 1)),
                        (ORDERS, Key::from_pair(5, 2)),
                    ],
                    [(ACCOUNTS, plain_a), (ACCOUNTS, plain_b)],
                ] {
                    let before = coordinator.stats();
                    let mut tx = coordinator.begin(&co);
                    for (table, key) in keys {
                        tx.insert(table, key, 1u64.to_le_bytes().to_vec())
                            .await
                            .unwrap();
                    }
                    tx.commit().await.unwrap();
                    let after = coordinator.stats();
                    messages.push((
                        after.lock_messages - before.lock_messages,
                        after.commit_backup_messages - before.commit_backup_messages,
                    ));
                }
                (messages[0], messages[1])
            },
        )
        .recv()
        .unwrap();
    // One primary and its two backups; two primaries and (3 nodes, 3 replicas) all
    // three nodes as backups of one or the other.
    assert_eq!(grouped, (1, 2));
    assert_eq!(plain, (2, 3));
    assert_eq!(
        read(&cluster, ORDERS, &Key::from_pair(5, 2)),
        Some(1u64.to_le_bytes().to_vec())
    );
    cluster.stop();
}

/// More transactions open at once than a backup's log holds: an open transaction holds
/// no id and no log space until it commits, so all of them commit, and the backups
/// apply every one.
#[test]
fn more_open_transactions_than_the_log_holds_all_commit() {
    let config = Configuration::local(3, 3, 1, 6, 49_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    let count = LOG_RECORDS_MAX as u64 + 100;
    let nodes = cluster.nodes();
    let node = nodes[2];
    let stats = cluster
        .spawn(
            node,
            0,
            move |co, coordinator: Rc<Coordinator>| async move {
                let mut open = Vec::new();
                for account in 0..count {
                    let mut tx = coordinator.begin(&co);
                    tx.insert(ACCOUNTS, Key::from(account), account.to_le_bytes().to_vec())
                        .await
                        .unwrap();
                    open.push(tx);
                }
                for tx in open {
                    tx.commit().await.unwrap();
                }
                coordinator.flush_truncation(&co, &nodes).await;
                coordinator.stats()
            },
        )
        .recv()
        .unwrap();
    assert_eq!((stats.committed, stats.log_full_aborts), (count, 0));
    for account in (0..count).step_by(97) {
        assert_eq!(balance_of(&cluster, account), account);
    }
    assert!(
        cluster
            .replicas_differ(ACCOUNTS, (0..count).map(Key::from))
            .is_empty()
    );
    cluster.stop();
}

/// `read_many` returns what reading the keys one by one would: own writes, earlier reads,
/// absent keys, keys at local and remote primaries, a repeated key; and its reads are
/// validated at commit like any other.
#[test]
fn read_many_reads_like_reads_one_by_one() {
    let config = Configuration::local(3, 3, 1, 6, 49_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    for account in 0..12 {
        assert!(
            cluster
                .load(ACCOUNTS, Key::from(account), &(100 + account).to_le_bytes())
                .unwrap()
        );
    }
    let node = cluster.nodes()[0];
    // Both local and remote primaries among the keys read.
    let primaries: Vec<u16> = (0..12)
        .map(|a| primary_of(&cluster, ACCOUNTS, &Key::from(a)))
        .collect();
    assert!(primaries.contains(&node) && primaries.iter().any(|&p| p != node));
    let outcomes = cluster
        .spawn(node, 0, |co, coordinator: Rc<Coordinator>| async move {
            let mut txn = coordinator.begin(&co);
            txn.write(ACCOUNTS, Key::from(3), Some(7u64.to_le_bytes().to_vec()))
                .await
                .unwrap();
            txn.read(ACCOUNTS, Key::from(5)).await.unwrap();
            let mut keys: Vec<Key> = (0..12).map(Key::from).collect();
            keys.push(Key::from(99)); // absent
            keys.push(Key::from(4)); // twice
            let many: Vec<u64> = txn
                .read_many(ACCOUNTS, &keys)
                .await
                .unwrap()
                .into_iter()
                .map(|v| v.map_or(u64::MAX, |v| balance(Some(v))))
                .collect();
            let reads = txn.reads().len();
            let unknown = txn.read_many(TableId(9), &[Key::from(1)]).await;
            // A concurrent change to a key read by read_many fails validation.
            let mut other = coordinator.begin(&co);
            other
                .write(ACCOUNTS, Key::from(8), Some(1u64.to_le_bytes().to_vec()))
                .await
                .unwrap();
            other.commit().await.unwrap();
            (many, reads, unknown, txn.commit().await)
        })
        .recv()
        .unwrap();
    let (many, reads, unknown, commit) = outcomes;
    let mut expected: Vec<u64> = (0..12).map(|a| 100 + a).collect();
    expected[3] = 7;
    expected.push(u64::MAX);
    expected.push(104);
    assert_eq!(many, expected);
    // Each key read once: the 12 accounts and the absent key (3 was written, so read
    // by the write; 5 was read before).
    assert_eq!(reads, 13);
    assert_eq!(
        unknown,
        Err(Abort::Refused(StoreError::UnknownTable(TableId(9))))
    );
    assert_eq!(commit, Err(Abort::Conflict));
    // Nothing of the aborted transaction was installed.
    assert_eq!(balance_of(&cluster, 3), 103);
    cluster.stop();
}

/// A transaction that read more objects at one primary than a VALIDATE message may carry
/// is refused as too large, not reported as a conflict (which a caller would retry
/// forever).
#[test]
fn a_validation_too_large_for_one_message_is_refused() {
    let config = Configuration::local(1, 1, 1, 1, 50_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    let keys = ferrotx_txn::messages::ITEMS_MAX as u64 + 2;
    for account in 0..keys {
        cluster
            .load(ACCOUNTS, Key::from(account), &INITIAL.to_le_bytes())
            .unwrap();
    }
    let node = cluster.nodes()[0];
    let outcome = cluster
        .spawn(
            node,
            0,
            move |co, coordinator: Rc<Coordinator>| async move {
                let all: Vec<Key> = (0..keys).map(Key::from).collect();
                let mut ro = coordinator.begin_read_only(&co);
                ro.read_many(ACCOUNTS, &all).await.unwrap();
                let read_only = ro.commit().await;
                let mut rw = coordinator.begin(&co);
                // Every key read, one written: one more read-only object than fits.
                rw.read_many(ACCOUNTS, &all).await.unwrap();
                rw.write(ACCOUNTS, Key::from(0), Some(1u64.to_le_bytes().to_vec()))
                    .await
                    .unwrap();
                let read_write = rw.commit().await;
                let mut fits = coordinator.begin_read_only(&co);
                fits.read_many(ACCOUNTS, &all[2..]).await.unwrap();
                (read_only, read_write, fits.commit().await)
            },
        )
        .recv()
        .unwrap();
    assert_eq!(
        outcome,
        (Err(Abort::TooLarge), Err(Abort::TooLarge), Ok(()))
    );
    assert_eq!(balance_of(&cluster, 0), INITIAL);
    cluster.stop();
}

/// `Txn::put` writes without reading: the primary locks the object at whatever version it
/// has; the backups learn that version and apply the write in order with the others.
#[test]
fn blind_writes_commit_without_a_read_and_reach_the_backups() {
    let config = Configuration::local(3, 3, 1, 6, 51_000).unwrap();
    let cluster = LocalCluster::start(config, schema());
    for account in 0..8 {
        cluster
            .load(ACCOUNTS, Key::from(account), &INITIAL.to_le_bytes())
            .unwrap();
    }
    let nodes = cluster.nodes();
    let outcomes: Vec<_> = nodes
        .iter()
        .map(|&node| {
            cluster.spawn(
                node,
                0,
                move |co, coordinator: Rc<Coordinator>| async move {
                    let mut committed = 0u64;
                    let mut aborts_in_a_row = 0;
                    for i in 0..200u64 {
                        let mut txn = coordinator.begin(&co);
                        // Every node overwrites every account, and inserts one of its own.
                        for account in 0..8u64 {
                            let value = (u64::from(node) * 1_000 + i).to_le_bytes().to_vec();
                            txn.put(ACCOUNTS, Key::from(account), Some(value)).unwrap();
                        }
                        let own = Key::from(100 + u64::from(node) * 1_000 + i);
                        txn.put(ACCOUNTS, own, Some(i.to_le_bytes().to_vec()))
                            .unwrap();
                        // A transaction reads its own blind write.
                        let seen = txn.read(ACCOUNTS, own).await.unwrap();
                        assert_eq!(seen, Some(i.to_le_bytes().to_vec()));
                        if txn.commit().await.is_ok() {
                            committed += 1;
                            aborts_in_a_row = 0;
                        } else {
                            // Every coordinator locks its own node's keys first, in memory,
                            // so three of them overwriting the same keys at once all lose
                            // at the others' primaries: back off, longer after each abort
                            // and for a different time on each node, to break the tie.
                            aborts_in_a_row = (aborts_in_a_row + 1).min(6);
                            let wait_ns = ((u64::from(node) + 1) * 10_000) << aborts_in_a_row;
                            let until = co.now_ns() + wait_ns;
                            while co.now_ns() < until {
                                co.yield_now().await;
                            }
                        }
                    }
                    coordinator.flush_truncation(&co, &[0, 1, 2]).await;
                    committed
                },
            )
        })
        .collect();
    let committed: Vec<u64> = outcomes.into_iter().map(|r| r.recv().unwrap()).collect();
    assert!(committed.iter().sum::<u64>() > 0, "{committed:?}");
    // Every account holds the value of one committed transaction, at a version counting
    // the commits, and the backups agree with the primaries everywhere.
    let mut out = Vec::new();
    let outcome = cluster
        .read_primary(ACCOUNTS, &Key::from(0), &mut out)
        .unwrap();
    assert_eq!(outcome.version, 1 + committed.iter().sum::<u64>());
    let keys = (0..8)
        .chain(
            nodes
                .iter()
                .flat_map(|&n| (0..200).map(move |i| 100 + u64::from(n) * 1_000 + i)),
        )
        .map(Key::from);
    assert!(cluster.replicas_differ(ACCOUNTS, keys).is_empty());
    for account in 1..8 {
        let mut other = Vec::new();
        cluster
            .read_primary(ACCOUNTS, &Key::from(account), &mut other)
            .unwrap();
        // All accounts were written by the same transactions, the last one last.
        assert_eq!(other, out, "account {account}");
    }
    cluster.stop();
}

#[test]
fn a_handle_starts_coroutines_from_any_thread_until_the_node_stops() {
    let config = Configuration::local(2, 2, 2, 1, 41_600).unwrap();
    let cluster = LocalCluster::start(config, vec![TableSpec::fixed(1, "accounts", 8)]);
    cluster
        .load(ACCOUNTS, Key::from(7), &70u64.to_le_bytes())
        .unwrap();
    let handle = cluster.handle(1);
    assert_eq!((handle.id(), handle.threads()), (1, 2));
    assert_eq!(handle.config().members().len(), 2);
    let from_another_thread = {
        let handle = handle.clone();
        std::thread::spawn(move || {
            handle
                .spawn(1, |co, coordinator| async move {
                    coordinator.read_one(&co, ACCOUNTS, Key::from(7)).await
                })
                .unwrap()
                .recv()
                .unwrap()
        })
        .join()
        .unwrap()
    };
    assert_eq!(balance(from_another_thread.unwrap()), 70);
    cluster.stop();
    assert_eq!(
        handle.spawn(0, |_, _| async {}).map(|_| ()).unwrap_err(),
        ferrotx_node::SpawnError::Stopped { node: 1, thread: 0 }
    );
}

/// Backups catch up when quiet: after the last commit, with no explicit TRUNCATE, every
/// backup applies the coordinators' last records within a short idle interval (the
/// truncation mark goes out on its own), so the replicas equal the primaries.
#[test]
fn backups_apply_the_last_commits_once_the_coordinators_are_quiet() {
    let config = Configuration::local(3, 3, 1, 6, 51_400).unwrap();
    let cluster = LocalCluster::start(config, schema());
    let nodes = cluster.nodes();
    let runs: Vec<_> = nodes
        .iter()
        .map(|&node| {
            cluster.spawn(
                node,
                0,
                move |co, coordinator: Rc<Coordinator>| async move {
                    let mut committed = 0u64;
                    for i in 0..20u64 {
                        let mut txn = coordinator.begin(&co);
                        let key = Key::from(1_000 * u64::from(node) + i);
                        txn.put(ACCOUNTS, key, Some(i.to_le_bytes().to_vec()))
                            .unwrap();
                        committed += u64::from(txn.commit().await.is_ok());
                    }
                    committed
                },
            )
        })
        .collect();
    let committed: u64 = runs.into_iter().map(|r| r.recv().unwrap()).sum();
    assert_eq!(committed, 60);
    let keys = || {
        nodes
            .iter()
            .flat_map(|&n| (0..20).map(move |i| Key::from(1_000 * u64::from(n) + i)))
    };
    // No flush: the coordinators' idle passes send their marks.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !cluster.replicas_differ(ACCOUNTS, keys()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "backups still behind: {:?}",
            cluster.replicas_differ(ACCOUNTS, keys())
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    cluster.stop();
}

/// Every node reports each copy it holds, with its role in the configuration's map and a
/// digest of each table: equal for every copy of a partition once they hold the same
/// objects; a handle kept after its node stopped says so.
#[test]
fn copy_digests_agree_across_copies_and_name_each_role() {
    let config = Configuration::local(3, 3, 1, 6, 51_600).unwrap();
    let cluster = LocalCluster::start(config, schema());
    for i in 0..50u64 {
        assert!(
            cluster
                .load(ACCOUNTS, Key::from(i), &i.to_le_bytes())
                .unwrap()
        );
    }
    let config = cluster.config().clone();
    let reports: Vec<(u16, ferrotx_node::CopyDigests)> = cluster
        .nodes()
        .into_iter()
        .map(|node| (node, cluster.handle(node).copy_digests().unwrap()))
        .collect();
    let mut objects = 0;
    for partition in 0..config.partitions().partition_count() {
        let id = ferrotx_store::PartitionId(partition);
        let replicas: Vec<u16> = config.partitions().replicas(id).nodes().collect();
        let mut seen = Vec::new();
        for (node, report) in &reports {
            assert_eq!(report.view, config.id(), "the configuration's first view");
            if let Some(copy) = report.copies.iter().find(|c| c.partition == partition) {
                let role = if replicas[0] == *node {
                    ferrotx_node::CopyRole::Primary
                } else {
                    ferrotx_node::CopyRole::Backup
                };
                assert_eq!(copy.role, role, "node {node}, partition {partition}");
                assert_eq!(copy.tables.len(), schema().len());
                seen.push((*node, copy.tables.clone()));
            }
        }
        assert_eq!(
            seen.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            {
                let mut sorted = replicas.clone();
                sorted.sort_unstable();
                sorted
            },
            "partition {partition}'s copies"
        );
        assert!(
            seen.windows(2).all(|w| w[0].1 == w[1].1),
            "partition {partition}: {seen:?}"
        );
        objects += seen[0].1[0].objects;
    }
    assert_eq!(objects, 50, "every account once, in its partition");
    let handle = cluster.handle(2);
    cluster.stop();
    assert_eq!(
        handle.copy_digests(),
        Err(ferrotx_node::CopiesError::Stopped(2))
    );
}
