//! Every workload on an in-process cluster (3 nodes, 3 replicas, 2 threads each) with tiny
//! populations, so that transactions conflict often; each run's history and final state
//! pass the workload's end checks. And the checkers catch a deliberately broken state.

use ferrotx_cluster::Configuration;
use ferrotx_node::LocalCluster;
use ferrotx_store::{Key, TableId};
use ferrotx_txn::coordinator::Abort;
use ferrotx_txn::participant::Role;
use ferrotx_workload::bank::{ACCOUNTS, BankWorkload};
use ferrotx_workload::check::{Violation, money, serializability};
use ferrotx_workload::history::{History, Outcome};
use ferrotx_workload::record::{HistoryRecorder, NoRecorder};
use ferrotx_workload::smallbank::SmallBankWorkload;
use ferrotx_workload::state::CopyState;
use ferrotx_workload::tatp::TatpWorkload;
use ferrotx_workload::workload::{KvWorkload, Runner, TABLE, Workload};
use std::sync::mpsc::Receiver;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const THREADS: u16 = 2;
const COROUTINES: u64 = 3;
const TRANSACTIONS: usize = 40;

/// Starts a cluster with `workload` loaded and `transactions` transactions running in
/// every coroutine (`usize::MAX`: until the cluster stops), all recorded by one recorder;
/// returns the cluster, the recorder and each coroutine's end.
fn start(
    workload: &Workload,
    seed: u64,
    transactions: usize,
) -> (LocalCluster, HistoryRecorder, Vec<Receiver<()>>) {
    let config = Configuration::local(3, 3, THREADS, 2, 42_000).expect("configuration");
    let cluster = LocalCluster::start(config, workload.schema());
    workload
        .load(&mut |table, key, value| cluster.load(table, key, value))
        .expect("load");
    let recorder = HistoryRecorder::new();
    let mut runs = Vec::new();
    for node in cluster.nodes() {
        for thread in 0..THREADS {
            for c in 0..COROUTINES {
                let rng = ChaCha8Rng::seed_from_u64(
                    seed ^ (u64::from(node) << 32) ^ (u64::from(thread) << 16) ^ c,
                );
                let mut runner = Runner::new(workload.clone(), rng);
                let mut recorder = recorder.clone();
                runs.push(
                    cluster.spawn(node, thread, move |co, coordinator| async move {
                        for _ in 0..transactions {
                            runner.run_one(&co, &coordinator, &mut recorder).await;
                        }
                    }),
                );
            }
        }
    }
    (cluster, recorder, runs)
}

/// Runs `workload` from every coroutine, recording one history; returns the cluster
/// (quiet, truncation flushed) and the history.
fn run(workload: &Workload, seed: u64) -> (LocalCluster, History) {
    let (cluster, recorder, runs) = start(workload, seed, TRANSACTIONS);
    runs.into_iter()
        .for_each(|run| run.recv().expect("coroutine"));
    // Every coordinator pushes its last truncation mark, so backups apply every write.
    cluster.flush_truncation();
    (cluster, recorder.history())
}

/// Runs `workload` and checks it clean; returns the history for further checks.
fn run_clean(workload: Workload, seed: u64) -> History {
    let (cluster, history) = run(&workload, seed);
    let state = |table: TableId, key: &Key| {
        cluster
            .read_copies(table, key)
            .into_iter()
            .map(CopyState::from)
    };
    let violations = workload.end_checks(&history, &state);
    cluster.stop();
    assert_eq!(violations, [], "{} broke", workload.name());
    let committed = history
        .records
        .iter()
        .filter(|r| r.outcome() == Outcome::Committed)
        .count();
    assert!(committed > 0, "{}: nothing committed", workload.name());
    assert!(
        history
            .records
            .iter()
            .any(|r| r.committed && !r.reads.is_empty() && !r.writes.is_empty()),
        "{}: no committed read-write transaction to check",
        workload.name()
    );
    assert!(
        history
            .records
            .iter()
            .all(|r| r.outcome() != Outcome::Indeterminate),
        "no node crashed, so every outcome is known"
    );
    history
}

#[test]
fn the_bank_mix_is_strictly_serializable_and_conserves_money() {
    let history = run_clean(Workload::Bank(BankWorkload::mixed(5, 100)), 1);
    // Audits ran and committed (each one's total was checked).
    assert!(
        history.notes_of(Outcome::Committed).count() > 0,
        "no audit committed"
    );
}

#[test]
fn plain_bank_transfers_pass_their_checks() {
    run_clean(Workload::Bank(BankWorkload::transfers(4, 50)), 2);
}

#[test]
fn kv_read_modify_writes_pass_their_checks() {
    run_clean(
        Workload::Kv(KvWorkload {
            keys_per_txn: 3,
            write_share: 0.5,
            key_count: 10,
            value_bytes: 16,
            zipf: 0.0,
            ship: false,
            delete_share: 0.0,
        }),
        3,
    );
}

#[test]
fn tatp_with_twenty_subscribers_passes_its_checks() {
    run_clean(Workload::Tatp(TatpWorkload { subscribers: 20 }), 4);
}

#[test]
fn smallbank_with_ten_accounts_passes_its_checks() {
    run_clean(
        Workload::SmallBank(SmallBankWorkload {
            accounts: 10,
            hot_accounts: 4,
            hot_percent: 50,
            initial_balance: 100,
        }),
        5,
    );
}

#[test]
fn the_checkers_catch_money_created_a_replica_differing_a_stale_read_and_a_lost_write() {
    let workload = Workload::Bank(BankWorkload::mixed(4, 100));
    let (cluster, history) = run(&workload, 6);
    // Account 0 gains 7 at every copy (money created), and its backup on one node is
    // also set back one version (a replica differing, and no longer the primary's).
    let broken = |table: TableId, key: &Key| {
        let mut copies: Vec<CopyState> = cluster
            .read_copies(table, key)
            .into_iter()
            .map(CopyState::from)
            .collect();
        if table == ACCOUNTS && *key == Key::from(0) {
            for copy in &mut copies {
                let value = copy.value.as_mut().expect("an account");
                let balance = u64::from_le_bytes(value[..8].try_into().unwrap());
                value[..8].copy_from_slice(&(balance + 7).to_le_bytes());
            }
            copies[1].version -= 1;
        }
        copies
    };
    // And the history: a committed read of account 1's initial version after every
    // transaction ended (stale: a cycle through real time, as account 1 was written since), and an
    // acknowledged write of account 2 above its primary's version (lost).
    let mut history = history;
    let row = |account: u64| (ACCOUNTS, Key::from(account));
    let written = |account: u64| {
        history
            .records
            .iter()
            .any(|r| r.committed && r.writes.iter().any(|(w, _)| *w == row(account)))
    };
    assert!(written(1), "account 1 was never written; pick another seed");
    let index = history.open();
    history.records[index].reads = vec![(row(1), 1)];
    history.close(index, Outcome::Committed);
    let index = history.open();
    history.records[index].writes = vec![(row(2), 1_000)];
    history.close(index, Outcome::Committed);
    let violations = workload.end_checks(&history, &broken);
    cluster.stop();
    assert!(
        violations.iter().any(|v| matches!(
            v,
            Violation::Serializability(serializability::Violation::Cycle { anomaly, .. })
                if anomaly.ends_with("-realtime")
        )),
        "{violations:?}"
    );
    assert!(
        violations.iter().any(
            |v| matches!(v, Violation::LostWrite(lost) if lost.row == row(2) && lost.highest_committed == 1_000)
        ),
        "{violations:?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| matches!(v, Violation::Money(money::Violation::Total { .. }))),
        "{violations:?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| matches!(v, Violation::Replica(_))),
        "{violations:?}"
    );
}

#[test]
fn transactions_cut_off_by_a_stopping_cluster_are_indeterminate_and_still_check() {
    let workload = Workload::Bank(BankWorkload::mixed(5, 100));
    let (cluster, recorder, _runs) = start(&workload, 7, usize::MAX);
    while recorder.history().records.len() < 300 {
        #[allow(clippy::disallowed_methods, reason = "a test waits for the cluster")]
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Stopping drops every coroutine where it is, some of them mid-commit.
    cluster.stop();
    let history = recorder.history();
    let open = history
        .records
        .iter()
        .filter(|r| r.outcome() == Outcome::Indeterminate)
        .count();
    assert!(open > 0, "every coroutine was between transactions");
    let loaded = workload.loaded_rows();
    let found = serializability::check(&history.records, |row, version| {
        version == u64::from(loaded.contains(row))
    });
    assert_eq!(found, []);
    let bank = BankWorkload::mixed(5, 100);
    assert_eq!(money::audits(&history, bank.total()), []);
}

/// Runs one-key read-modify-writes of 4 hot keys from every coroutine of an in-process
/// cluster whose nodes run the workload's procedures, without recording (as `bench kv`
/// does), and checks what `bench kv` checks at the end: the counters at the primaries
/// add up to the read-modify-writes committed, and every copy equals its primary.
/// Returns the commits and the operations shipped.
fn one_key_read_modify_writes(ship: bool) -> (u64, u64) {
    let workload = Workload::Kv(KvWorkload {
        keys_per_txn: 1,
        write_share: 1.0,
        key_count: 4,
        value_bytes: 16,
        zipf: 0.0,
        ship,
        delete_share: 0.0,
    });
    let config = Configuration::local(3, 3, THREADS, 2, 42_000).expect("configuration");
    let options = ferrotx_node::NodeOptions {
        procedures: workload.procedures(),
        ..ferrotx_node::NodeOptions::default()
    };
    let cluster = LocalCluster::start_with(config, workload.schema(), &options);
    workload
        .load(&mut |table, key, value| cluster.load(table, key, value))
        .expect("load");
    let mut runs = Vec::new();
    for node in cluster.nodes() {
        for thread in 0..THREADS {
            for c in 0..COROUTINES {
                let seed = (u64::from(node) << 32) ^ (u64::from(thread) << 16) ^ c;
                let mut runner = Runner::new(workload.clone(), ChaCha8Rng::seed_from_u64(seed));
                runs.push(
                    cluster.spawn(node, thread, move |co, coordinator| async move {
                        let (mut committed, mut aborted) = (0u64, 0u64);
                        for _ in 0..TRANSACTIONS {
                            let done = runner.run_one(&co, &coordinator, &mut NoRecorder).await;
                            match done.result {
                                Ok(_) => committed += 1,
                                Err(Abort::Conflict | Abort::Locked | Abort::LogFull) => {
                                    aborted += 1
                                }
                                Err(other) => panic!("a read-modify-write ended with {other}"),
                            }
                        }
                        (committed, aborted)
                    }),
                );
            }
        }
    }
    let (mut committed, mut aborted) = (0, 0);
    for run in runs {
        let (c, a) = run.recv().expect("coroutine");
        committed += c;
        aborted += a;
    }
    let mut shipped = 0;
    for node in cluster.nodes() {
        for thread in 0..THREADS {
            shipped += cluster
                .spawn(node, thread, |_, coordinator| async move {
                    coordinator.stats().shipped
                })
                .recv()
                .expect("stats");
        }
    }
    cluster.flush_truncation();
    let mut sum = 0;
    for id in 0..4 {
        let copies = cluster.read_copies(TABLE, &Key::from(id));
        let (_, role, primary) = &copies[0];
        assert_eq!(*role, Role::Primary);
        let (_, value) = primary.clone().expect("readable");
        let value = value.expect("present");
        assert_eq!(value.len(), 16, "the value keeps the table's size");
        sum += u64::from_le_bytes(value[..8].try_into().unwrap());
        for (node, _, copy) in &copies[1..] {
            assert_eq!(copy, primary, "key {id}: the copy at node {node} differs");
        }
    }
    cluster.stop();
    assert_eq!(sum, committed, "a read-modify-write was lost or doubled");
    assert_eq!(
        committed + aborted,
        3 * u64::from(THREADS) * COROUTINES * TRANSACTIONS as u64
    );
    (committed, shipped)
}

#[test]
fn shipped_one_key_read_modify_writes_pass_the_checks_of_unshipped_ones() {
    let (committed, shipped) = one_key_read_modify_writes(false);
    assert!(committed > 0);
    assert_eq!(shipped, 0, "--no-ship ships nothing");
    let (committed, shipped) = one_key_read_modify_writes(true);
    // Every one was shipped, and none aborted: the primary's executor retries its batch
    // (only batches of one thread write these keys, so they never conflict).
    let all = 3 * u64::from(THREADS) * COROUTINES * TRANSACTIONS as u64;
    assert_eq!(shipped, all);
    assert_eq!(committed, all);
}
