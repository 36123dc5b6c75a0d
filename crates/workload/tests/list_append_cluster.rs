//! The list-append workload on a 3-node in-process cluster: clients on every node and
//! thread append and read concurrently, and the history they record, with final reads
//! of every list, is strictly serializable.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrotx_cluster::Configuration;
use ferrotx_node::LocalCluster;
use ferrotx_store::TableId;
use ferrotx_txn::coordinator::Coordinator;
use ferrotx_workload::check::list_append::{MicroOp, Outcome, Transaction, check};
use ferrotx_workload::list_append::{Generator, read_lists, run_one, table_spec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const LISTS: TableId = TableId(7);
const KEYS: u64 = 5;
const TXNS_PER_CLIENT: u64 = 60;
const CLIENTS_PER_THREAD: u32 = 3;
/// Final reads retried this often if they abort (the cluster is quiet by then, so one
/// attempt should do).
const FINAL_READ_ATTEMPTS_MAX: usize = 16;

#[test]
fn concurrent_list_appends_are_strictly_serializable() {
    let config = Configuration::local(3, 3, 2, 2, 47_000).unwrap();
    let cluster = LocalCluster::start(config, vec![table_spec(LISTS.0)]);
    // The history's event counter, shared by every client thread.
    let clock = Arc::new(AtomicU64::new(0));
    let mut runs = Vec::new();
    let mut client = 0u32;
    for node in cluster.nodes() {
        for thread in 0..2 {
            for _ in 0..CLIENTS_PER_THREAD {
                let clock = Arc::clone(&clock);
                let id = client;
                client += 1;
                runs.push(cluster.spawn(
                    node,
                    thread,
                    move |co, coordinator: Rc<Coordinator>| async move {
                        let mut rng = ChaCha8Rng::seed_from_u64(u64::from(id));
                        let mut generator = Generator::new(id, KEYS, 64);
                        let tick = || clock.fetch_add(1, Ordering::SeqCst);
                        let mut history = Vec::new();
                        for i in 0..TXNS_PER_CLIENT {
                            let ops = generator.next_ops(&mut rng);
                            let txn_id = u64::from(id) << 32 | i;
                            history
                                .push(run_one(&co, &coordinator, LISTS, txn_id, &ops, &tick).await);
                        }
                        history
                    },
                ));
            }
        }
    }
    let history: Vec<_> = runs.into_iter().flat_map(|r| r.recv().unwrap()).collect();
    let committed = history
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .count();
    assert!(
        committed > history.len() / 4,
        "{committed} of {} committed",
        history.len()
    );

    // Final reads, in one read-only transaction after every client finished.
    let finals = cluster.spawn(0, 0, |co, coordinator: Rc<Coordinator>| async move {
        for _ in 0..FINAL_READ_ATTEMPTS_MAX {
            if let Ok(lists) = read_lists(&co, &coordinator, LISTS, KEYS).await {
                return Some(lists);
            }
        }
        None
    });
    let final_reads = finals.recv().unwrap().expect("the final reads commit");
    assert!(final_reads.values().any(|l| !l.is_empty()));

    let elements: usize = final_reads.values().map(Vec::len).sum();
    eprintln!(
        "{} transactions, {committed} committed; {elements} elements in the final lists",
        history.len()
    );
    let violations = check(&history, &final_reads);
    assert!(
        violations.is_empty(),
        "{} violations, the first: {}",
        violations.len(),
        violations[0]
    );

    // The same history with the last append to a list lost is caught: the check sees
    // this history, not an empty one.
    let mut damaged = final_reads.clone();
    let list = damaged
        .values_mut()
        .find(|l| !l.is_empty())
        .expect("a list was appended to");
    list.pop();
    let names: Vec<String> = check(&history, &damaged).iter().map(|v| v.name()).collect();
    assert!(names.contains(&"lost-append".to_owned()), "{names:?}");
    // And so is a read, after everything ended, of an appended list as still empty.
    let (&key, _) = final_reads
        .iter()
        .find(|(_, l)| !l.is_empty())
        .expect("a list was appended to");
    let last = history.iter().map(|t| t.end).max().unwrap();
    let mut stale = history.clone();
    stale.push(Transaction {
        id: u64::MAX,
        start: last + 1,
        end: last + 2,
        outcome: Outcome::Committed,
        ops: vec![MicroOp::Read {
            key,
            list: Some(Vec::new()),
        }],
    });
    let names: Vec<String> = check(&stale, &final_reads)
        .iter()
        .map(|v| v.name())
        .collect();
    assert_eq!(names, ["G-single-item-realtime"]);
    cluster.stop();
}
