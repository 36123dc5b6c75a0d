//! Bank transfers between accounts on different partitions, in a 3-node cluster with 3
//! replicas inside this process; the total is checked at the end, on every replica. The
//! transfers are the workload crate's bank (`ferrotx_workload::bank`), as `bench bank`
//! and the simulator run it.
//!
//! `cargo run --release -p ferrotx-node --example bank`

use ferrotx_cluster::Configuration;
use ferrotx_node::LocalCluster;
use ferrotx_store::{Key, TableId};
use ferrotx_workload::bank::BankWorkload;
use ferrotx_workload::check::{money, replicas};
use ferrotx_workload::history::History;
use ferrotx_workload::record::NoRecorder;
use ferrotx_workload::state::CopyState;
use ferrotx_workload::workload::{Runner, Workload};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const ACCOUNT_COUNT: u64 = 1_000;
const INITIAL_BALANCE: u64 = 1_000;
const TRANSFERS_PER_COROUTINE: u64 = 500;
const COROUTINES_PER_THREAD: u16 = 8;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Three nodes, three replicas (f = 2), two worker threads each, four partitions per
    // node. The ports are unused: this cluster talks over in-process queues.
    let config = Configuration::local(3, 3, 2, 4, 40_000)?;
    let threads = config.threads_per_node();
    let bank = BankWorkload {
        amount_max: 100,
        ..BankWorkload::transfers(ACCOUNT_COUNT, INITIAL_BALANCE)
    };
    let workload = Workload::Bank(bank.clone());
    let cluster = LocalCluster::start(config, workload.schema());
    workload.load(&mut |table, key, value| cluster.load(table, key, value))?;
    let started = std::time::Instant::now();
    let mut runs = Vec::new();
    for node in cluster.nodes() {
        for thread in 0..threads {
            for c in 0..COROUTINES_PER_THREAD {
                let seed = (u64::from(node) << 32) | (u64::from(thread) << 16) | u64::from(c);
                let mut runner = Runner::new(workload.clone(), ChaCha8Rng::seed_from_u64(seed));
                runs.push(
                    cluster.spawn(node, thread, move |co, coordinator| async move {
                        let mut committed = 0u64;
                        for _ in 0..TRANSFERS_PER_COROUTINE {
                            let done = runner.run_one(&co, &coordinator, &mut NoRecorder).await;
                            committed += u64::from(done.result.is_ok());
                        }
                        committed
                    }),
                );
            }
        }
    }
    let mut committed = 0;
    for run in runs {
        committed += run.recv()?;
    }
    let aborted = runs_total(threads) - committed;
    let elapsed = started.elapsed();
    // Let every coordinator push its last truncation mark so backups catch up.
    cluster.flush_truncation();
    let state = |table: TableId, key: &Key| {
        cluster
            .read_copies(table, key)
            .into_iter()
            .map(CopyState::from)
    };
    // Nothing was recorded, so the total must be the initial one exactly.
    let lost = money::conserved(
        &History::new(),
        bank.total(),
        bank.account_rows(),
        false,
        &state,
    );
    let differ = replicas::check(bank.account_rows(), &state);
    println!(
        "{committed} transfers committed, {aborted} aborted in {:.2} s ({:.0} committed/s)",
        elapsed.as_secs_f64(),
        committed as f64 / elapsed.as_secs_f64()
    );
    println!(
        "money: {}, replicas differing: {}",
        if lost.is_empty() {
            "conserved".to_owned()
        } else {
            format!("{lost:?}")
        },
        differ.len()
    );
    cluster.stop();
    if !lost.is_empty() || !differ.is_empty() {
        return Err("money was created or destroyed, or a replica diverged".into());
    }
    Ok(())
}

/// Transfers started in all.
fn runs_total(threads: u16) -> u64 {
    3 * u64::from(threads) * u64::from(COROUTINES_PER_THREAD) * TRANSFERS_PER_COROUTINE
}
