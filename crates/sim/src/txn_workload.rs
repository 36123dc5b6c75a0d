//! Bank transfers, audits (read-only transactions) and single-key lock-free reads over a
//! simulated cluster, checked for strict serializability (with `serializability::check`),
//! conservation of money, no lost acknowledged write, replicas equal to their primaries
//! once quiet, and backup logs within the coordinators' reservations.

use std::cell::RefCell;
use std::rc::Rc;

use ferrotx_cluster::Configuration;
use ferrotx_node::CoreOptions;
use ferrotx_rpc::Config;
use ferrotx_store::{Key, TableId, TableSpec};
use ferrotx_txn::coordinator::Abort;
use ferrotx_txn::participant::LOG_RECORDS_MAX;
use ferrotx_wire::EndpointId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::SimCluster;
use crate::network::Faults;
use crate::serializability::{TxnRecord, Violation, check};

const ACCOUNTS: TableId = TableId(1);
/// Two keys outside the accounts, written only together by blind writes.
const TAG_A: u64 = 1 << 40;
const TAG_B: u64 = (1 << 40) + 1;
const INITIAL_BALANCE: u64 = 100;
/// The simulated configuration's addresses are never bound; any valid port base does.
const PORT_BASE_UNUSED: u16 = 40_000;

/// Shape of the bank workload.
#[derive(Clone, Debug)]
pub struct BankWorkload {
    /// Nodes.
    pub nodes: u16,
    /// Copies of each partition (f + 1).
    pub replicas: u16,
    /// Worker threads per node.
    pub threads: u16,
    /// Coroutines per thread.
    pub coroutines: usize,
    /// Transactions per coroutine.
    pub transactions: usize,
    /// Accounts (keys).
    pub accounts: u64,
    /// Partitions per node.
    pub partitions_per_node: u32,
    /// Network faults.
    pub faults: Faults,
    /// Share of transactions on two tag keys, written together by blind writes
    /// (`Txn::put`) and read together by read-only transactions, which must see them
    /// equal.
    pub tag_share: f64,
    /// Share of transactions that are audits (read-only transactions reading every
    /// account).
    pub audit_share: f64,
    /// Share of transactions that are single-key lock-free reads of one account.
    pub read_one_share: f64,
    /// A partition between node 0 and the others, from and to these times (it heals).
    pub partition_ns: Option<(u64, u64)>,
    /// Records each coordinator thread may keep in a backup's log: small values make
    /// commits wait for log space (and explicit truncation) often.
    pub log_records: usize,
}

impl BankWorkload {
    /// The CI workload with faults from `seed`: 3 nodes, 3 replicas (f = 2), 2 threads, 3
    /// coroutines each, few accounts (so transactions conflict), loss up to 5%,
    /// duplication up to 5%, delays of 1 to 200 us, in half the seeds a partition of node
    /// 0 from the others for up to 20 ms, which then heals, and in a third of them backup
    /// logs of 2 to 6 records, so that commits wait for log space.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xba4c);
        Self {
            nodes: 3,
            replicas: 3,
            threads: 2,
            coroutines: 3,
            transactions: 8,
            accounts: rng.random_range(3..10),
            partitions_per_node: 2,
            faults: Faults {
                loss: rng.random_range(0.0..0.05),
                duplicate: rng.random_range(0.0..0.05),
                delay_min_ns: 1_000,
                delay_max_ns: rng.random_range(1_000..200_000),
            },
            audit_share: 0.2,
            read_one_share: 0.2,
            tag_share: 0.15,
            partition_ns: rng.random_bool(0.5).then(|| {
                let start = rng.random_range(0..2_000_000);
                (start, start + rng.random_range(0..20_000_000))
            }),
            log_records: if rng.random_bool(1.0 / 3.0) {
                rng.random_range(2..=6)
            } else {
                LOG_RECORDS_MAX
            },
        }
    }
}

/// What a run did and found.
#[derive(Debug, Default)]
pub struct BankOutcome {
    /// Transactions committed.
    pub committed: u64,
    /// Transactions aborted.
    pub aborted: u64,
    /// Single-key lock-free reads that returned (counted in `committed` too).
    pub single_reads: u64,
    /// Commits that waited for log space at a backup.
    pub log_space_waits: u64,
    /// Most records one coordinator thread's log held at any backup.
    pub log_records_high_water: u64,
    /// Datagrams cut by the partition.
    pub partitioned: u64,
    /// Aborts by reason.
    pub abort_reasons: std::collections::BTreeMap<String, u64>,
    /// Everything wrong; empty when correct.
    pub violations: Vec<String>,
}

#[derive(Default)]
struct History {
    records: Vec<TxnRecord<u64>>,
    violations: Vec<String>,
    abort_reasons: std::collections::BTreeMap<String, u64>,
}

/// Runs the bank workload from `seed` and checks it.
pub fn run(seed: u64, workload: &BankWorkload) -> BankOutcome {
    let schema = vec![TableSpec::fixed(ACCOUNTS.0, "accounts", 8)];
    let config = Configuration::local(
        workload.nodes,
        u8::try_from(workload.replicas).expect("replicas fit a u8"),
        workload.threads,
        workload.partitions_per_node,
        PORT_BASE_UNUSED,
    )
    .and_then(|c| c.with_tables(schema))
    .expect("a valid simulated configuration");
    let options = CoreOptions {
        coroutines: workload.coroutines,
        rpc: Config {
            datagram_bytes: 1_400,
            rto_min_ns: 200_000,
            suspect_after_ns: 5_000_000,
            ..Config::default()
        },
        log_records_max: workload.log_records,
    };
    let mut cluster = SimCluster::new(config, options, seed, workload.faults.clone());
    let network = cluster.sim.network.clone();
    // Every copy of every account, loaded with the initial balance.
    for account in 0..workload.accounts {
        cluster.load(ACCOUNTS, Key::from(account), &INITIAL_BALANCE.to_le_bytes());
    }
    let history = Rc::new(RefCell::new(History::default()));
    // The simulator runs everything in one thread, so the order in which starts and ends
    // happen is real-time order. Counting them gives timestamps with no ties: simulated
    // time stands still within a loop iteration, and a tie would hide a real-time edge
    // from the checker.
    let clock = Rc::new(std::cell::Cell::new(0u64));
    let all_nodes: Vec<u16> = (0..workload.nodes).collect();

    for node in 0..workload.nodes {
        for thread in 0..workload.threads {
            let local = EndpointId::new(node, thread);
            for c in 0..workload.coroutines {
                let history = history.clone();
                let clock = clock.clone();
                let tick = move || {
                    clock.set(clock.get() + 1);
                    clock.get()
                };
                let workload = workload.clone();
                let all_nodes = all_nodes.clone();
                let mut rng =
                    ChaCha8Rng::seed_from_u64(seed ^ (u64::from(local.0) << 20) ^ c as u64);
                let spawned = cluster.spawn(node, thread, move |co, coordinator| async move {
                    for i in 0..workload.transactions {
                        let id = (u64::from(local.node()) << 48)
                            | (u64::from(local.thread()) << 32)
                            | ((c as u64) << 16)
                            | i as u64;
                        let kind = rng.random_range(0.0..1.0);
                        if kind < workload.read_one_share {
                            // A single-key lock-free read: a one-read transaction in the
                            // history, with its real-time bounds.
                            let account = rng.random_range(0..workload.accounts);
                            let start_ns = tick();
                            let mut value = Vec::new();
                            let read = coordinator
                                .read_one_with_version(
                                    &co,
                                    ACCOUNTS,
                                    Key::from(account),
                                    &mut value,
                                )
                                .await;
                            let end_ns = tick();
                            let mut history = history.borrow_mut();
                            let reads = match read {
                                Ok(outcome) => vec![(account, outcome.version)],
                                Err(abort) => {
                                    *history
                                        .abort_reasons
                                        .entry(format!("read_one {abort:?}"))
                                        .or_default() += 1;
                                    Vec::new()
                                }
                            };
                            history.records.push(TxnRecord {
                                id,
                                start_ns,
                                end_ns,
                                committed: read.is_ok(),
                                reads,
                                writes: Vec::new(),
                            });
                            continue;
                        }
                        let tags = kind >= workload.read_one_share + workload.audit_share
                            && kind
                                < workload.read_one_share
                                    + workload.audit_share
                                    + workload.tag_share;
                        if tags {
                            let writer = rng.random_bool(0.5);
                            let start_ns = tick();
                            let (result, reads) = if writer {
                                // Both tags set to this transaction's id, without reading.
                                let mut tx = coordinator.begin(&co);
                                let value = Some(id.to_le_bytes().to_vec());
                                let result = match (
                                    tx.put(ACCOUNTS, Key::from(TAG_A), value.clone()),
                                    tx.put(ACCOUNTS, Key::from(TAG_B), value),
                                ) {
                                    (Ok(()), Ok(())) => tx.commit_installed().await,
                                    (Err(e), _) | (_, Err(e)) => Err(e),
                                };
                                (result, Vec::new())
                            } else {
                                // Both tags in one read-only transaction: always equal.
                                let mut tx = coordinator.begin_read_only(&co);
                                let keys = [Key::from(TAG_A), Key::from(TAG_B)];
                                let seen = tx.read_many(ACCOUNTS, &keys).await;
                                let reads: Vec<(u64, u64)> = tx
                                    .reads()
                                    .iter()
                                    .map(|r| (key_id(&r.key), r.version))
                                    .collect();
                                let result = match seen {
                                    Ok(values) => {
                                        let committed = tx.commit().await;
                                        if committed.is_ok() && values[0] != values[1] {
                                            history.borrow_mut().violations.push(format!(
                                                "tags differ in one read-only transaction: \
                                                 {:?} and {:?}",
                                                values[0], values[1]
                                            ));
                                        }
                                        committed.map(|()| Vec::new())
                                    }
                                    Err(e) => Err(e),
                                };
                                (result, reads)
                            };
                            let end_ns = tick();
                            let mut history = history.borrow_mut();
                            let writes = match &result {
                                Ok(installed) => installed
                                    .iter()
                                    .map(|(_, key, version)| (key_id(key), *version))
                                    .collect(),
                                Err(abort) => {
                                    *history
                                        .abort_reasons
                                        .entry(format!("tags {abort:?}"))
                                        .or_default() += 1;
                                    Vec::new()
                                }
                            };
                            history.records.push(TxnRecord {
                                id,
                                start_ns,
                                end_ns,
                                committed: result.is_ok(),
                                reads,
                                writes,
                            });
                            continue;
                        }
                        let audit = kind < workload.read_one_share + workload.audit_share;
                        let from = rng.random_range(0..workload.accounts);
                        let to =
                            (from + rng.random_range(1..workload.accounts)) % workload.accounts;
                        let amount = rng.random_range(1..=60u64);
                        let start_ns = tick();
                        let mut tx = if audit {
                            coordinator.begin_read_only(&co)
                        } else {
                            coordinator.begin(&co)
                        };
                        let result: Result<Option<u64>, Abort> = async {
                            if audit {
                                // A write is refused and leaves the transaction usable.
                                let refused =
                                    tx.write(ACCOUNTS, Key::from(from), Some(vec![0; 8])).await;
                                if refused != Err(Abort::ReadOnly) {
                                    history.borrow_mut().violations.push(format!(
                                        "a write in a read-only transaction: {refused:?}"
                                    ));
                                }
                                let mut total = 0;
                                if from & 1 == 0 {
                                    // Every account in one batch of reads.
                                    let keys: Vec<Key> =
                                        (0..workload.accounts).map(Key::from).collect();
                                    for value in tx.read_many(ACCOUNTS, &keys).await? {
                                        total += balance(value);
                                    }
                                } else {
                                    for account in 0..workload.accounts {
                                        let value = tx.read(ACCOUNTS, Key::from(account)).await?;
                                        total += balance(value);
                                    }
                                }
                                return Ok(Some(total));
                            }
                            let (a, b) = if to & 1 == 0 {
                                let both = tx
                                    .read_many(ACCOUNTS, &[Key::from(from), Key::from(to)])
                                    .await?;
                                (balance(both[0].clone()), balance(both[1].clone()))
                            } else {
                                (
                                    balance(tx.read(ACCOUNTS, Key::from(from)).await?),
                                    balance(tx.read(ACCOUNTS, Key::from(to)).await?),
                                )
                            };
                            // A third account read and not written, so that read-write
                            // transactions validate too (FaRM step 2): the transfer only
                            // goes ahead while `from` and `guard` together hold twice the
                            // amount.
                            let guard = (to + 1) % workload.accounts;
                            let g = if guard == from {
                                a
                            } else {
                                balance(tx.read(ACCOUNTS, Key::from(guard)).await?)
                            };
                            if a >= amount && a + g >= 2 * amount {
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
                            Ok(None)
                        }
                        .await;
                        let reads: Vec<(u64, u64)> = tx
                            .reads()
                            .iter()
                            .map(|r| (key_id(&r.key), r.version))
                            .collect();
                        let writes: Vec<(u64, u64)> = tx
                            .writes()
                            .iter()
                            .map(|w| (key_id(&w.key), w.version + 1))
                            .collect();
                        let committed = match result {
                            Ok(audit_total) => {
                                let outcome = tx.commit().await;
                                if let (Ok(()), Some(total)) = (outcome, audit_total) {
                                    let expected = INITIAL_BALANCE * workload.accounts;
                                    if total != expected {
                                        history.borrow_mut().violations.push(format!(
                                            "audit {id:#x} saw a total of {total}, not {expected}"
                                        ));
                                    }
                                }
                                if let Err(abort) = outcome {
                                    *history
                                        .borrow_mut()
                                        .abort_reasons
                                        .entry(format!("{abort:?}"))
                                        .or_default() += 1;
                                }
                                outcome.is_ok()
                            }
                            Err(abort) => {
                                *history
                                    .borrow_mut()
                                    .abort_reasons
                                    .entry(format!("execution {abort:?}"))
                                    .or_default() += 1;
                                false
                            }
                        };
                        history.borrow_mut().records.push(TxnRecord {
                            id,
                            start_ns,
                            end_ns: tick(),
                            committed,
                            reads,
                            writes,
                        });
                    }
                    coordinator.flush_truncation(&co, &all_nodes).await;
                });
                assert!(spawned, "a coroutine slot per client");
            }
        }
    }
    if let Some((start, end)) = workload.partition_ns {
        cluster.run_until(start);
        let others: Vec<u16> = (1..workload.nodes).collect();
        network.borrow_mut().partition(&[0], &others);
        cluster.run_until(end);
        network.borrow_mut().heal();
    }
    cluster.run_until(60_000_000_000);

    let history = history.borrow();
    let mut outcome = BankOutcome {
        committed: history.records.iter().filter(|r| r.committed).count() as u64,
        aborted: history.records.iter().filter(|r| !r.committed).count() as u64,
        single_reads: cluster.coordinators().map(|c| c.stats().single_reads).sum(),
        log_space_waits: cluster
            .coordinators()
            .map(|c| c.stats().log_space_waits)
            .sum(),
        log_records_high_water: 0,
        violations: history.violations.clone(),
        abort_reasons: history.abort_reasons.clone(),
        partitioned: network.borrow().counters.partitioned,
    };
    // No backup log ever held more records of one coordinator thread than it reserved.
    outcome.log_records_high_water = cluster
        .participants()
        .map(|p| p.borrow().stats().log_records_high_water)
        .max()
        .unwrap_or(0);
    if outcome.log_records_high_water > workload.log_records as u64 {
        outcome.violations.push(format!(
            "a backup log held {} records, over the reservation limit of {}",
            outcome.log_records_high_water, workload.log_records
        ));
    }
    let unfinished = cluster.coroutines_live();
    if unfinished > 0 {
        outcome
            .violations
            .push(format!("{unfinished} coroutines never finished"));
    }
    // Accounts are loaded at version 1; the tags start absent, at version 0.
    for v in check(&history.records, |&key, version| {
        version == if key >= TAG_A { 0 } else { 1 }
    }) {
        outcome.violations.push(match v {
            Violation::Cycle { anomaly, steps } => format!("{anomaly}: {steps:?}"),
            other => format!("{other:?}"),
        });
    }
    // No acknowledged write is lost: each key's final version at its primary is the
    // highest version a committed transaction installed (1, the loaded one, if none).
    let mut highest: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for record in history.records.iter().filter(|r| r.committed) {
        for &(key, version) in &record.writes {
            let entry = highest.entry(key).or_insert(1);
            *entry = (*entry).max(version);
        }
    }
    // Money is conserved, and every backup equals its primary.
    let mut total = 0;
    let mut out = Vec::new();
    let mut copy = Vec::new();
    for account in 0..workload.accounts {
        let key = Key::from(account);
        let copies = cluster.copies_of(cluster.partition_of(ACCOUNTS, &key));
        let primary = copies[0].2;
        let seen = match primary.read(ACCOUNTS, &key, &mut out).expect("table") {
            Ok(seen) => seen,
            Err(e) => {
                outcome.violations.push(format!(
                    "account {account}: {e} after every transaction ended"
                ));
                continue;
            }
        };
        let expected_version = highest.get(&account).copied().unwrap_or(1);
        if seen.version != expected_version {
            outcome.violations.push(format!(
                "account {account}: primary at version {}, but the last committed write installed {expected_version}",
                seen.version
            ));
        }
        total += balance(Some(out.clone()));
        for (node, _, backup) in &copies[1..] {
            let copy_seen = backup.read(ACCOUNTS, &key, &mut copy).expect("table").ok();
            if copy_seen != Some(seen) || copy != out {
                outcome.violations.push(format!(
                    "account {account}: backup on node {node} at {copy_seen:?}, primary at {seen:?}"
                ));
            }
        }
    }
    // The tags: no lost blind write, and backups equal to the primary.
    for tag in [TAG_A, TAG_B] {
        let key = Key::from(tag);
        let copies = cluster.copies_of(cluster.partition_of(ACCOUNTS, &key));
        let primary = copies[0].2;
        let seen = primary.read(ACCOUNTS, &key, &mut out).expect("table");
        let version = seen.map_or(u64::MAX, |s| s.version);
        let expected_version = highest.get(&tag).copied().unwrap_or(0);
        if version != expected_version {
            outcome.violations.push(format!(
                "tag {tag}: primary at version {version}, but the last committed write installed {expected_version}"
            ));
        }
        for (node, _, backup) in &copies[1..] {
            let copy_seen = backup.read(ACCOUNTS, &key, &mut copy).expect("table");
            if copy_seen.map(|s| (s.version, s.present)) != seen.map(|s| (s.version, s.present))
                || copy != out
            {
                outcome.violations.push(format!(
                    "tag {tag}: backup on node {node} differs from the primary"
                ));
            }
        }
    }
    if total != INITIAL_BALANCE * workload.accounts {
        outcome
            .violations
            .push(format!("money not conserved: {total}"));
    }
    outcome
}

fn balance(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| {
        u64::from_le_bytes(v[..8].try_into().expect("8-byte balance"))
    })
}

fn key_id(key: &Key) -> u64 {
    u64::from_be_bytes(key.as_bytes().try_into().expect("account keys are u64"))
}
