//! Bank transfers between accounts on different partitions, in a 3-node cluster with 3
//! replicas inside this process; the total is checked at the end, on every replica.
//!
//! `cargo run --release -p ferrotx-node --example bank`

use std::rc::Rc;

use ferrotx_cluster::Configuration;
use ferrotx_exec::Co;
use ferrotx_node::LocalCluster;
use ferrotx_store::{Key, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator};

const ACCOUNTS: TableId = TableId(1);
const ACCOUNT_COUNT: u64 = 1_000;
const INITIAL_BALANCE: u64 = 1_000;
const TRANSFERS_PER_COROUTINE: u64 = 500;
const COROUTINES_PER_THREAD: u16 = 8;

fn balance(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| {
        u64::from_le_bytes(v.try_into().expect("8-byte balance"))
    })
}

/// Moves `amount` from one account to another if the first has it. Both reads and
/// both writes are one transaction; any conflict aborts it whole.
async fn transfer(
    co: &Co,
    coordinator: &Coordinator,
    from: u64,
    to: u64,
    amount: u64,
) -> Result<bool, Abort> {
    let mut tx = coordinator.begin(co);
    let moved = async {
        let a = balance(tx.read(ACCOUNTS, Key::from(from)).await?);
        let b = balance(tx.read(ACCOUNTS, Key::from(to)).await?);
        if a < amount {
            return Ok(false);
        }
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
        Ok(true)
    }
    .await?;
    tx.commit().await?;
    Ok(moved)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Three nodes, three replicas (f = 2), two worker threads each, four partitions per
    // node. The ports are unused: this cluster talks over in-process queues.
    let config = Configuration::local(3, 3, 2, 4, 40_000)?;
    let threads = config.threads_per_node();
    let cluster = LocalCluster::start(config, vec![TableSpec::fixed(1, "accounts", 8)]);
    for account in 0..ACCOUNT_COUNT {
        cluster.load(ACCOUNTS, Key::from(account), &INITIAL_BALANCE.to_le_bytes())?;
    }
    let started = std::time::Instant::now();
    let mut runs = Vec::new();
    for node in cluster.nodes() {
        for thread in 0..threads {
            for c in 0..COROUTINES_PER_THREAD {
                let seed = (u64::from(node) << 32) | (u64::from(thread) << 16) | u64::from(c);
                runs.push(cluster.spawn(
                    node,
                    thread,
                    move |co, coordinator: Rc<Coordinator>| async move {
                        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                        let mut random = move || {
                            state ^= state << 13;
                            state ^= state >> 7;
                            state ^= state << 17;
                            state
                        };
                        let (mut committed, mut aborted) = (0u64, 0u64);
                        for _ in 0..TRANSFERS_PER_COROUTINE {
                            let from = random() % ACCOUNT_COUNT;
                            let to = (from + 1 + random() % (ACCOUNT_COUNT - 1)) % ACCOUNT_COUNT;
                            match transfer(&co, &coordinator, from, to, 1 + random() % 100).await {
                                Ok(_) => committed += 1,
                                Err(_) => aborted += 1,
                            }
                        }
                        (committed, aborted)
                    },
                ));
            }
        }
    }
    let (mut committed, mut aborted) = (0, 0);
    for run in runs {
        let (c, a) = run.recv()?;
        committed += c;
        aborted += a;
    }
    let elapsed = started.elapsed();
    // Let every coordinator push its last truncation mark so backups catch up.
    let nodes = cluster.nodes();
    let flushes: Vec<_> = nodes
        .iter()
        .flat_map(|&node| (0..threads).map(move |thread| (node, thread)))
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
        flush.recv()?;
    }
    let mut total = 0;
    let mut out = Vec::new();
    for account in 0..ACCOUNT_COUNT {
        cluster
            .read_primary(ACCOUNTS, &Key::from(account), &mut out)
            .expect("quiet cluster");
        total += u64::from_le_bytes(out[..8].try_into()?);
    }
    let differ = cluster.replicas_differ(ACCOUNTS, (0..ACCOUNT_COUNT).map(Key::from));
    println!(
        "{committed} transfers committed, {aborted} aborted in {:.2} s ({:.0} committed/s)",
        elapsed.as_secs_f64(),
        committed as f64 / elapsed.as_secs_f64()
    );
    println!(
        "total balance {total} (expected {}), replicas differing: {}",
        ACCOUNT_COUNT * INITIAL_BALANCE,
        differ.len()
    );
    cluster.stop();
    if total != ACCOUNT_COUNT * INITIAL_BALANCE || !differ.is_empty() {
        return Err("money was created or destroyed, or a replica diverged".into());
    }
    Ok(())
}
