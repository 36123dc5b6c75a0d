//! Elle's list-append over the Rust transaction API: clients append unique elements to a
//! few lists and read them whole; the checker infers every key's order from the values
//! alone and looks for cycles, real-time ones included.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use ferrotx_store::{Key, TableId, TableSpec};
use ferrotx_workload::check::list_append::{
    self as checker, Element, ListKey, MicroOp, Outcome, Transaction,
};
use ferrotx_workload::list_append::{Generator, decode_list, run_one, table_spec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{Ticks, client_id, clients, copies, log_bound_violations};
use crate::cluster::SimCluster;
use crate::run::{Checked, Scenario, digest_of};

/// The lists' table.
const LISTS: TableId = TableId(1);

/// Lists: few, so that transactions conflict.
const KEYS: u64 = 5;

/// Appends one client makes to one list at most (lists stay far below their bound).
const APPENDS_PER_KEY_MAX: u32 = 32;

/// Client coroutines per worker, for both interfaces.
pub(super) const CLIENTS_PER_WORKER: usize = 3;

/// A run's transactions, in the order they started; each starts indeterminate and is
/// replaced by what its client learned, if it learned anything.
pub(super) type Recorded = Rc<RefCell<Vec<Transaction>>>;

/// The list-append scenario over the Rust API.
pub struct ListAppend {
    transactions: usize,
    history: Recorded,
}

impl ListAppend {
    /// Each client runs `transactions` transactions.
    pub fn new(transactions: usize) -> Self {
        Self {
            transactions,
            history: Rc::default(),
        }
    }
}

/// Opens the record of a transaction about to run: indeterminate, with its appends (it
/// may have made them) and no reads (none is known), so that a client dropped mid-commit
/// leaves what the checker needs.
pub(super) fn open(history: &Recorded, id: u64, start: u64, ops: &[MicroOp]) -> usize {
    let mut history = history.borrow_mut();
    history.push(Transaction {
        id,
        start,
        end: u64::MAX,
        outcome: Outcome::Indeterminate,
        ops: ops
            .iter()
            .filter(|op| matches!(op, MicroOp::Append { .. }))
            .cloned()
            .collect(),
    });
    history.len() - 1
}

/// Every list as its primary holds it at the end: the final reads, which show appends
/// acknowledged and then lost.
pub(super) fn final_lists(
    cluster: &SimCluster,
    read: impl Fn(&SimCluster, ListKey) -> Option<Vec<Element>>,
) -> BTreeMap<ListKey, Vec<Element>> {
    (0..KEYS)
        .filter_map(|key| read(cluster, key).map(|list| (key, list)))
        .collect()
}

/// Checks a list-append history with the final lists; counts its outcomes.
pub(super) fn check_history(
    history: &[Transaction],
    finals: &BTreeMap<ListKey, Vec<Element>>,
) -> Checked {
    let count = |outcome| history.iter().filter(|t| t.outcome == outcome).count() as u64;
    Checked {
        committed: count(Outcome::Committed),
        aborted: count(Outcome::Aborted),
        indeterminate: count(Outcome::Indeterminate),
        violations: checker::check(history, finals)
            .iter()
            .map(ToString::to_string)
            .collect(),
        history_digest: digest_of(&history),
    }
}

/// Clients of one run of list-append, over whichever interface: what each does is drawn
/// from `seed` and its client id.
pub(super) fn generator(seed: u64, id: u64) -> (Generator, ChaCha8Rng) {
    let client = u32::try_from(id).expect("client ids fit 32 bits");
    (
        Generator::new(client, KEYS, APPENDS_PER_KEY_MAX),
        ChaCha8Rng::seed_from_u64(seed ^ id.rotate_left(29) ^ 0x11a7),
    )
}

impl Scenario for ListAppend {
    fn name(&self) -> &'static str {
        "list-append"
    }

    fn schema(&self) -> Vec<TableSpec> {
        vec![table_spec(LISTS.0)]
    }

    fn load(&self, _cluster: &SimCluster) {
        // Every list starts absent: empty.
    }

    fn start_clients(&mut self, cluster: &mut SimCluster, seed: u64) {
        let ticks = Ticks::default();
        let all_nodes: Rc<[u16]> = (0..cluster.node_count()).collect();
        for (node, thread, slot) in clients(cluster, CLIENTS_PER_WORKER) {
            let id = client_id(node, thread, slot);
            let (mut generator, mut rng) = generator(seed, id);
            let history = self.history.clone();
            let ticks = ticks.clone();
            let transactions = self.transactions;
            let all_nodes = all_nodes.clone();
            let spawned = cluster.spawn(node, thread, move |co, coordinator| async move {
                for i in 0..transactions {
                    let ops = generator.next_ops(&mut rng);
                    let txn_id = (id << 16) | i as u64;
                    let start = ticks.tick();
                    let index = open(&history, txn_id, start, &ops);
                    let clock = || ticks.tick();
                    let mut done = run_one(&co, &coordinator, LISTS, txn_id, &ops, &clock).await;
                    done.start = start;
                    history.borrow_mut()[index] = done;
                }
                coordinator.flush_truncation(&co, &all_nodes).await;
            });
            assert!(spawned, "a coroutine slot for every client");
        }
    }

    fn check(&self, cluster: &SimCluster) -> Checked {
        let finals = final_lists(cluster, |cluster, key| {
            let copies = copies(cluster, LISTS, &Key::from(key));
            let primary = copies.iter().find(|c| c.primary)?;
            Some(
                primary
                    .value
                    .as_deref()
                    .map(decode_list)
                    .unwrap_or_default(),
            )
        });
        let mut checked = check_history(&self.history.borrow(), &finals);
        checked.violations.extend(log_bound_violations(
            cluster,
            cluster.options().log_records_max,
        ));
        // Every backup holds what its primary holds.
        for key in 0..KEYS {
            let copies = copies(cluster, LISTS, &Key::from(key));
            if let Some(primary) = copies.iter().find(|c| c.primary)
                && let Some(differs) = copies.iter().find(|c| {
                    // Absent on both sides: floors may differ (reclamation).
                    !(c.value.is_none() && primary.value.is_none())
                        && (c.version != primary.version || c.value != primary.value)
                })
            {
                checked.violations.push(format!(
                    "list {key}: the copy on node {} (version {}) differs from the primary on node {} (version {})",
                    differs.node, differs.version, primary.node, primary.version
                ));
            }
        }
        checked
    }
}
