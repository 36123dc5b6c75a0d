//! FLUSHALL and FLUSHDB: delete every key, partition by partition.
//!
//! Not atomic, as in Redis Cluster (where FLUSHALL runs on each primary on its own):
//! each partition's primary is scanned, and the keys found are deleted in transactions
//! of at most [`FLUSH_KEYS_PER_TRANSACTION`] keys. A key written while the flush runs
//! may survive it (written after its partition's scan went past it) or not. The reply,
//! `+OK`, comes once every partition has been scanned to its end and every key found
//! deleted.

use ferrotx_exec::Co;
use ferrotx_store::Key;
use ferrotx_txn::coordinator::{Abort, Coordinator};
use ferrotx_txn::participant::SCAN_OBJECTS_MAX;

use crate::backoff::{AGE_AFTER_LOST, Backoff};
use crate::keyspace::page;
use crate::kv_table::KvTable;

/// Most keys one of FLUSHALL's transactions deletes: small enough that a transaction
/// fits one commit and holds few locks, large enough that a flush of many keys costs
/// few commits.
pub const FLUSH_KEYS_PER_TRANSACTION: usize = 64;

/// FLUSHALL / FLUSHDB: deletes every key of the `partitions` partitions of the `kv`
/// table; `seed` draws the back-offs. `Err` is the error to reply (some keys may be
/// deleted already: the client may run it again).
pub async fn run_flush(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    partitions: u32,
    seed: u64,
) -> Result<(), String> {
    for partition in 0..partitions {
        let seed = seed ^ (u64::from(partition) << 32);
        let mut cursor = 0;
        // Waiting for the lock at `cursor`, since this back-off started.
        let mut stalled: Option<Backoff> = None;
        loop {
            let page = page(co, coordinator, kv, partition, cursor, SCAN_OBJECTS_MAX).await?;
            let found: Vec<Key> = page.objects.iter().map(|(key, _)| *key).collect();
            for (i, chunk) in found.chunks(FLUSH_KEYS_PER_TRANSACTION).enumerate() {
                delete(co, coordinator, kv, chunk, seed ^ (i as u64 + 1)).await?;
            }
            if page.next_cursor == 0 {
                break;
            }
            if page.next_cursor == cursor && page.visited == 0 {
                // Stopped before a locked object: wait for it, as KEYS does.
                let backoff = stalled.get_or_insert_with(|| Backoff::new(seed, co.now_ns()));
                if backoff.exhausted(co) {
                    return Err(format!(
                        "ERR ferrotx: a key of partition {partition} stayed locked during \
                         FLUSHALL; try again"
                    ));
                }
                backoff.wait(co).await;
                continue;
            }
            stalled = None;
            cursor = page.next_cursor;
            co.yield_now().await;
        }
    }
    Ok(())
}

/// Deletes the store keys `keys` of the `kv` table in one transaction (blind deletes:
/// whatever each holds when the commit locks it), retrying conflicts with a back-off.
async fn delete(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    keys: &[Key],
    seed: u64,
) -> Result<(), String> {
    let mut backoff = Backoff::new(seed, co.now_ns());
    let deadline_ns = co.now_ns().saturating_add(kv.command_timeout_ns);
    // Retries after lost conflicts carry the age, so that FLUSHALL takes its turn on hot
    // keys (docs/transactions.md, "Fairness").
    let age = coordinator.age();
    let mut lost = 0;
    loop {
        let mut txn = coordinator.begin(co);
        txn.set_deadline(deadline_ns);
        if lost >= AGE_AFTER_LOST {
            txn.set_age(age.after(lost));
        }
        let mut result = Ok(());
        for &key in keys {
            result = txn.put(kv.id, key, None);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = txn.commit().await;
        }
        let abort = match result {
            Ok(()) => return Ok(()),
            Err(abort) => abort,
        };
        let retry = matches!(
            abort,
            Abort::Conflict | Abort::Locked | Abort::LogFull | Abort::Unavailable
        );
        if !retry || backoff.exhausted(co) || co.now_ns() >= deadline_ns {
            return Err(format!("ERR ferrotx: FLUSHALL failed: {abort}"));
        }
        if matches!(abort, Abort::Conflict | Abort::Locked) {
            lost += 1;
        }
        backoff.wait_after(co, lost).await;
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;
    use std::time::Duration;

    use ferrotx_cluster::{Configuration, default_tables};
    use ferrotx_node::LocalCluster;
    use ferrotx_resp::SessionConfig;

    use crate::{RespClient, RespValue};

    use super::*;

    #[test]
    fn flushall_deletes_every_key_of_every_partition_in_bounded_transactions() {
        let config = Configuration::local(3, 3, 1, 2, 52_400).unwrap();
        let cluster = LocalCluster::start(config, default_tables());
        let mut writer =
            RespClient::for_config(cluster.config(), 1, SessionConfig::default()).unwrap();
        let mut reader =
            RespClient::for_config(cluster.config(), 2, SessionConfig::default()).unwrap();
        let keys: Vec<String> = (0..300).map(|i| format!("key{i}")).collect();
        let done = cluster.spawn(
            0,
            0,
            move |co: Co, coordinator: Rc<Coordinator>| async move {
                for chunk in keys.chunks(30) {
                    let mut args = vec!["MSET".to_owned()];
                    for key in chunk {
                        args.push(key.clone());
                        args.push("v".to_owned());
                    }
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    assert_eq!(
                        writer.command(&co, &coordinator, &args).await,
                        RespValue::ok()
                    );
                }
                let dbsize = writer.command(&co, &coordinator, &["DBSIZE"]).await;
                assert_eq!(dbsize, RespValue::Integer(300));
                let commits = coordinator.stats().committed;
                for args in [
                    &["FLUSHALL"][..],
                    &["FLUSHDB", "ASYNC"],
                    &["flushall", "sync"],
                ] {
                    assert_eq!(
                        writer.command(&co, &coordinator, args).await,
                        RespValue::ok()
                    );
                }
                // 300 keys in transactions of at most 64: at least 5 commits, and none for the
                // flushes of nothing.
                assert!(
                    coordinator.stats().committed - commits
                        >= 300 / FLUSH_KEYS_PER_TRANSACTION as u64
                );
                let error = writer
                    .command(&co, &coordinator, &["FLUSHALL", "NOW"])
                    .await;
                assert_eq!(error.error_message(), Some(&b"ERR syntax error"[..]));
            },
        );
        done.recv_timeout(Duration::from_secs(60)).unwrap();
        let done = cluster.spawn(
            2,
            0,
            move |co: Co, coordinator: Rc<Coordinator>| async move {
                assert_eq!(
                    reader.command(&co, &coordinator, &["DBSIZE"]).await,
                    RespValue::Integer(0)
                );
                assert_eq!(
                    reader
                        .command(&co, &coordinator, &["EXISTS", "key0", "key299"])
                        .await,
                    RespValue::Integer(0)
                );
            },
        );
        done.recv_timeout(Duration::from_secs(60)).unwrap();
    }
}
