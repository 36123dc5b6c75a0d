//! A 3-node cluster with 3 replicas inside one process: concurrent transfers from every
//! node and thread; money is conserved and every backup equals its primary at the end.

use std::rc::Rc;

use ferrotx_cluster::Configuration;
use ferrotx_node::LocalCluster;
use ferrotx_store::{Key, StoreError, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator};

const ACCOUNTS: TableId = TableId(1);
const COUNT: u64 = 50;
const INITIAL: u64 = 100;

fn balance(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| {
        u64::from_le_bytes(v.try_into().expect("8-byte balance"))
    })
}

#[test]
fn transfers_conserve_money_and_replicas_agree() {
    let config = Configuration::local(3, 3, 2, 2, 41_000).unwrap();
    let cluster = LocalCluster::start(config, vec![TableSpec::fixed(1, "accounts", 8)]);
    for account in 0..COUNT {
        assert!(
            cluster
                .load(ACCOUNTS, Key::from(account), &INITIAL.to_le_bytes())
                .unwrap()
        );
    }
    let mut runs = Vec::new();
    for node in cluster.nodes() {
        for thread in 0..2 {
            for c in 0..3u64 {
                let seed = (u64::from(node) << 8) | (u64::from(thread) << 4) | c;
                runs.push(cluster.spawn(
                    node,
                    thread,
                    move |co, coordinator: Rc<Coordinator>| async move {
                        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                        let (mut committed, mut aborted) = (0u32, 0u32);
                        for _ in 0..60 {
                            state ^= state << 13;
                            state ^= state >> 7;
                            state ^= state << 17;
                            let from = state % COUNT;
                            let to = (from + 1 + (state >> 20) % (COUNT - 1)) % COUNT;
                            let amount = 1 + (state >> 40) % 30;
                            let mut tx = coordinator.begin(&co);
                            let run = async {
                                let a = balance(tx.read(ACCOUNTS, Key::from(from)).await?);
                                let b = balance(tx.read(ACCOUNTS, Key::from(to)).await?);
                                if a >= amount {
                                    tx.write(
                                        ACCOUNTS,
                                        Key::from(from),
                                        Some((a - amount).to_le_bytes().to_vec()),
                                    )
                                    .await?;
                                    tx.write(
                                        ACCOUNTS,
                                        Key::from(to),
                                        Some((b + amount).to_le_bytes().to_vec()),
                                    )
                                    .await?;
                                }
                                Ok::<(), Abort>(())
                            }
                            .await;
                            let outcome = match run {
                                Ok(()) => tx.commit().await,
                                Err(abort) => Err(abort),
                            };
                            match outcome {
                                Ok(()) => committed += 1,
                                Err(_) => aborted += 1,
                            }
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
                        (committed, aborted)
                    },
                ));
            }
        }
    }
    let mut committed = 0;
    for run in runs {
        committed += run.recv().unwrap().0;
    }
    assert!(committed > 0);
    let nodes = cluster.nodes();
    let flushes: Vec<_> = nodes
        .iter()
        .flat_map(|&node| (0..2).map(move |thread| (node, thread)))
        .map(|(node, thread)| {
            let nodes = nodes.clone();
            cluster.spawn(
                node,
                thread,
                move |co, coordinator: Rc<Coordinator>| async move {
                    coordinator.flush_truncation(&co, &nodes).await;
                },
            )
        })
        .collect();
    for flush in flushes {
        flush.recv().unwrap();
    }
    let mut total = 0;
    let mut out = Vec::new();
    for account in 0..COUNT {
        cluster
            .read_primary(ACCOUNTS, &Key::from(account), &mut out)
            .unwrap();
        total += balance(Some(out.clone()));
    }
    assert_eq!(total, COUNT * INITIAL, "money created or destroyed");
    assert!(
        cluster
            .replicas_differ(ACCOUNTS, (0..COUNT).map(Key::from))
            .is_empty()
    );
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
