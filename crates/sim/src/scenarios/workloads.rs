//! The workload crate's workloads (bank, kv, TATP, SmallBank) as scenarios: each client a
//! coroutine with a [`Runner`] of its own, recording into one history, checked at the end
//! by the workload's own end checks.

use std::rc::Rc;

use ferrotx_store::TableSpec;
use ferrotx_workload::bank::BankWorkload;
use ferrotx_workload::history::Outcome;
use ferrotx_workload::record::HistoryRecorder;
use ferrotx_workload::smallbank::SmallBankWorkload;
use ferrotx_workload::tatp::TatpWorkload;
use ferrotx_workload::workload::{KvWorkload, Runner, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{client_id, clients, copies, log_bound_violations};
use crate::cluster::SimCluster;
use crate::run::{Checked, Scenario, digest_of};

/// Client coroutines per worker.
const CLIENTS_PER_WORKER: usize = 3;

/// A workload of the workload crate, run by clients on every worker.
pub struct WorkloadScenario {
    name: &'static str,
    workload: Workload,
    clients_per_worker: usize,
    transactions: usize,
    recorder: HistoryRecorder,
    /// Each node's memory limit, as bytes below what its store holds once loaded.
    memory_short: Option<u64>,
    /// Longest pause of a client between two transactions (each drawn uniformly up to
    /// it, on the client's node clock); 0: none, transactions back to back.
    gap_max_ns: u64,
}

/// How far below its loaded store `kv-full` limits a node: the records of four of its
/// eight keys (40 bytes each: header, key, 16-byte value; every node holds a copy of
/// each with 3 nodes and 3 replicas). The nodes start past their limit.
const KV_FULL_SHORT: u64 = 4 * 40;

impl WorkloadScenario {
    /// The scenario `name` (bank, kv, tatp or smallbank) at the simulator's small scale,
    /// each client running `transactions` transactions.
    pub fn new(name: &str, transactions: usize) -> Self {
        let (name, workload) = match name {
            // Few accounts and small balances: transfers conflict and run dry.
            "bank" => ("bank", Workload::Bank(BankWorkload::mixed(6, 100))),
            "kv" => (
                "kv",
                Workload::Kv(KvWorkload {
                    keys_per_txn: 3,
                    write_share: 0.67,
                    key_count: 24,
                    value_bytes: 16,
                    zipf: 0.0,
                    ship: false,
                    delete_share: 0.0,
                }),
            ),
            // Few keys, deleted half the time they are written and inserted again: every
            // delete's object is reclaimed on every copy while writes of its key and
            // others' travel, and the key comes back (crate::reclaim of ferrotx-txn).
            "kv-churn" => (
                "kv-churn",
                Workload::Kv(KvWorkload {
                    keys_per_txn: 2,
                    write_share: 1.0,
                    key_count: 8,
                    value_bytes: 16,
                    zipf: 0.0,
                    ship: false,
                    delete_share: 0.5,
                }),
            ),
            // kv-churn on nodes whose memory limit holds about half the keys: primaries
            // refuse inserts past it (Abort::OutOfMemory) while deletes free room,
            // reclaimed on every copy, and inserts go through again.
            "kv-full" => {
                let mut scenario = Self::new("kv-churn", transactions);
                scenario.name = "kv-full";
                scenario.memory_short = Some(KV_FULL_SHORT);
                return scenario;
            }
            "tatp" => ("tatp", Workload::Tatp(TatpWorkload { subscribers: 12 })),
            "smallbank" => (
                "smallbank",
                Workload::SmallBank(SmallBankWorkload {
                    accounts: 10,
                    hot_accounts: 4,
                    hot_percent: 90,
                    initial_balance: 1_000,
                }),
            ),
            other => panic!("{other} is not a workload of the workload crate"),
        };
        Self::custom(name, workload, CLIENTS_PER_WORKER, transactions)
    }

    /// A scenario of `workload` under `name`: `clients_per_worker` clients on every
    /// worker (at most its coroutine slots), each running `transactions` transactions.
    pub fn custom(
        name: &'static str,
        workload: Workload,
        clients_per_worker: usize,
        transactions: usize,
    ) -> Self {
        Self {
            name,
            workload,
            clients_per_worker,
            transactions,
            recorder: HistoryRecorder::new(),
            memory_short: None,
            gap_max_ns: 0,
        }
    }

    /// The same scenario with clients pausing up to `gap_max_ns` (drawn per pause from the
    /// seed) between transactions, so that the load spans the faults of the run rather
    /// than ending before them.
    pub fn paced(mut self, gap_max_ns: u64) -> Self {
        self.gap_max_ns = gap_max_ns;
        self
    }
}

impl Scenario for WorkloadScenario {
    fn name(&self) -> &'static str {
        self.name
    }

    fn schema(&self) -> Vec<TableSpec> {
        self.workload.schema()
    }

    fn load(&self, cluster: &SimCluster) {
        self.workload
            .load(&mut |table, key, value| {
                cluster.load(table, key, value);
                Ok(true)
            })
            .expect("the workload's rows fit its schema");
    }

    fn start_clients(&mut self, cluster: &mut SimCluster, seed: u64) {
        let all_nodes: Rc<[u16]> = (0..cluster.node_count()).collect();
        if let Some(short) = self.memory_short {
            for node in 0..cluster.node_count() {
                if let Some(used) = cluster.core(node).map(|core| core.refresh_memory()) {
                    // Not 0, which is no limit. The node's later lives keep it.
                    cluster.set_memory_limit(node, used.saturating_sub(short).max(1));
                }
            }
        }
        for (node, thread, slot) in clients(cluster, self.clients_per_worker) {
            let rng =
                ChaCha8Rng::seed_from_u64(seed ^ client_id(node, thread, slot).rotate_left(17));
            let mut runner = Runner::new(self.workload.clone(), rng);
            let mut recorder = self.recorder.clone();
            let transactions = self.transactions;
            let all_nodes = all_nodes.clone();
            let gap_max_ns = self.gap_max_ns;
            let mut gaps = ChaCha8Rng::seed_from_u64(
                seed ^ client_id(node, thread, slot).rotate_left(29) ^ 0x9a95_0000,
            );
            let spawned = cluster.spawn(node, thread, move |co, coordinator| async move {
                for _ in 0..transactions {
                    runner.run_one(&co, &coordinator, &mut recorder).await;
                    if gap_max_ns > 0 {
                        let gap = gaps.random_range(0..=gap_max_ns);
                        co.sleep_until(co.now_ns() + gap).await;
                    }
                }
                // Backups apply what the last transactions logged, so that replicas can
                // be compared once the run is over.
                coordinator.flush_truncation(&co, &all_nodes).await;
            });
            assert!(spawned, "a coroutine slot for every client");
        }
    }

    fn check(&self, cluster: &SimCluster) -> Checked {
        let history = self.recorder.history();
        let limit = cluster.options().log_records_max;
        let count = |outcome| {
            history
                .records
                .iter()
                .filter(|r| r.outcome() == outcome)
                .count() as u64
        };
        let state = |table, key: &_| copies(cluster, table, key);
        let mut violations: Vec<String> = self
            .workload
            .end_checks(&history, &state)
            .into_iter()
            .map(|v| format!("{v:?}"))
            .collect();
        violations.extend(log_bound_violations(cluster, limit));
        if self.memory_short.is_some() {
            // The limit must have been reached, or the run attacked nothing.
            let refused = cluster.locks_refused_memory();
            // A power cut ends every client at once, often before any reaches the limit.
            if refused == 0 && cluster.power_cuts == 0 {
                violations
                    .push("no LOCK was refused for memory: the limit was never reached".into());
            }
        }
        Checked {
            committed: count(Outcome::Committed),
            aborted: count(Outcome::Aborted),
            indeterminate: count(Outcome::Indeterminate),
            violations,
            history_digest: digest_of(&history.records),
        }
    }
}
