//! The workloads `ferrotx sim` runs, each a [`Scenario`]: the workload crate's workloads
//! over the Rust transaction API (bank, kv, TATP, SmallBank, list-append), and Redis
//! clients sending RESP bytes through the node's own session and plan-execution code
//! (resp-bank, resp-list-append).
//!
//! Every scenario runs small populations, so that its transactions conflict, and checks
//! its history and the final state once the run is over.

mod list_append;
mod resp;
pub mod resp_counter;
pub mod resp_expiry;
mod workloads;

pub use workloads::WorkloadScenario;

use std::cell::Cell;
use std::rc::Rc;

use ferrotx_store::Key;
use ferrotx_workload::state::CopyState;

use crate::cluster::SimCluster;
use crate::run::Scenario;

/// Every scenario's name, in the order `--workload all` runs them.
pub const NAMES: [&str; 12] = [
    "bank",
    "kv",
    "kv-churn",
    "kv-full",
    "tatp",
    "smallbank",
    "list-append",
    "resp-bank",
    "resp-list-append",
    "resp-counter",
    "resp-counter-spread",
    "resp-expiry",
];

/// Transactions each client runs.
const TRANSACTIONS_PER_CLIENT: usize = 8;

/// Operations each `resp-counter` client runs (single commands: many, so that the hot
/// keys' primaries combine them).
const COUNTER_OPERATIONS_PER_CLIENT: usize = 24;

/// Requests each `resp-expiry` client sends.
const EXPIRY_REQUESTS_PER_CLIENT: usize = 24;

/// The scenario called `name`.
///
/// # Panics
///
/// If `name` is not one of [`NAMES`].
pub fn scenario(name: &str) -> Box<dyn Scenario> {
    match name {
        "bank" | "kv" | "kv-churn" | "kv-full" | "tatp" | "smallbank" => Box::new(
            workloads::WorkloadScenario::new(name, TRANSACTIONS_PER_CLIENT),
        ),
        "list-append" => Box::new(list_append::ListAppend::new(TRANSACTIONS_PER_CLIENT)),
        "resp-bank" => Box::new(resp::RespBank::new(TRANSACTIONS_PER_CLIENT)),
        "resp-list-append" => Box::new(resp::RespListAppend::new(TRANSACTIONS_PER_CLIENT)),
        "resp-counter" => Box::new(resp_counter::RespCounter::new(
            COUNTER_OPERATIONS_PER_CLIENT,
        )),
        "resp-counter-spread" => Box::new(resp_counter::RespCounter::spread(
            COUNTER_OPERATIONS_PER_CLIENT,
        )),
        "resp-expiry" => Box::new(resp_expiry::RespExpiry::new(EXPIRY_REQUESTS_PER_CLIENT)),
        other => panic!("no scenario {other:?}; the scenarios are {NAMES:?}"),
    }
}

/// Every client coroutine of a run: (node, thread, coroutine slot), in spawn order.
fn clients(cluster: &SimCluster, coroutines: usize) -> Vec<(u16, u16, usize)> {
    let threads = cluster.config().threads_per_node();
    (0..cluster.node_count())
        .flat_map(|node| {
            (0..threads).flat_map(move |thread| (0..coroutines).map(move |c| (node, thread, c)))
        })
        .collect()
}

/// A client's unique number: node, thread and slot.
fn client_id(node: u16, thread: u16, slot: usize) -> u64 {
    (u64::from(node) << 24) | (u64::from(thread) << 16) | slot as u64
}

/// An event counter shared by a run's clients: every start and end takes the next tick.
/// Simulated time stands still within a loop iteration, so it cannot order two events of
/// one instant; the simulator runs everything on one thread, so the order in which
/// coroutines take ticks is real-time order, without ties.
#[derive(Clone, Default)]
struct Ticks(Rc<Cell<u64>>);

impl Ticks {
    fn tick(&self) -> u64 {
        self.0.set(self.0.get() + 1);
        self.0.get()
    }
}

/// Every copy of `key` of `table` on the nodes that are up, as the checkers read them.
fn copies(cluster: &SimCluster, table: ferrotx_store::TableId, key: &Key) -> Vec<CopyState> {
    let mut out = Vec::new();
    cluster
        .copies_of(cluster.partition_of(table, key))
        .into_iter()
        .map(|(node, role, copy)| {
            out.clear();
            let seen = match copy.read(table, key, &mut out) {
                Ok(Ok(seen)) => Some((seen.version, seen.present.then(|| out.clone()))),
                Ok(Err(_)) => None,
                Err(_) => None,
            };
            CopyState::from((node, role, seen))
        })
        .collect()
}

/// The log-bound check every scenario shares: no backup's log held more records of one
/// coordinator thread than it reserved.
fn log_bound_violations(cluster: &SimCluster, limit: usize) -> Vec<String> {
    let limit = limit as u64;
    let high = cluster
        .participants()
        .map(|p| p.borrow().stats().log_records_high_water)
        .max()
        .unwrap_or(0);
    if high > limit {
        vec![format!(
            "a backup log held {high} records of one coordinator thread, over the reservation limit of {limit}"
        )]
    } else {
        Vec::new()
    }
}
