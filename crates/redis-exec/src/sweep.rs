//! Active expiry: a coroutine per worker thread that removes expired keys in the
//! background, as Redis's active expiry cycle does, besides the lazy removal by the
//! writing commands that touch them.
//!
//! Every [`SWEEP_INTERVAL_NS`] (of `co`'s clock, so the simulator drives it), the sweeper
//! of worker thread `t` visits the partitions of the `kv` table whose primary is its node
//! and whose index is `t` modulo the node's threads (so each partition has one sweeper),
//! scans at most [`SWEEP_OBJECTS_PER_PARTITION`] objects of each from where the last pass
//! stopped (a whole partition is covered over several passes, as Redis samples), and
//! deletes the keys expired at its node's clock ([`KvTable::now_ms`]) in transactions of
//! at most [`FLUSH_KEYS_PER_TRANSACTION`] keys. Each transaction reads its keys again and
//! deletes only those still expired, so a key written meanwhile (a new value, or its
//! expiry removed) survives; one that aborts (a conflict with a client's write, a node
//! unreachable) is left for a later pass: nothing is retried or reported.

use std::cell::Cell;

use ferrotx_exec::Co;
use ferrotx_resp::keys;
use ferrotx_store::Key;
use ferrotx_txn::coordinator::{Abort, Coordinator};

use crate::flush::FLUSH_KEYS_PER_TRANSACTION;
use crate::kv_table::KvTable;

/// Time between the starts of two passes of a sweeper: 100 ms, Redis's `hz 10`.
pub const SWEEP_INTERVAL_NS: u64 = 100_000_000;

/// Most objects a pass scans of one partition (Redis's active expiry samples, too).
pub const SWEEP_OBJECTS_PER_PARTITION: u32 = 256;

/// What a sweeper did, for tests and the caller's numbers.
#[derive(Debug, Default)]
pub struct SweepStats {
    /// Passes completed.
    pub passes: Cell<u64>,
    /// Objects scanned.
    pub scanned: Cell<u64>,
    /// Expired keys deleted.
    pub deleted: Cell<u64>,
    /// Delete transactions (or scans) that failed; their keys wait for a later pass.
    pub failed: Cell<u64>,
}

impl SweepStats {
    fn add(cell: &Cell<u64>, n: u64) {
        cell.set(cell.get().saturating_add(n));
    }
}

/// Removes expired keys of the `kv` table's `partitions` partitions whose primary is
/// `co`'s node and whose index is `co`'s thread modulo `threads` (the node's worker
/// threads), one pass every [`SWEEP_INTERVAL_NS`], until `stop()` is true (checked
/// before each pass). Counts into `stats`.
pub async fn run_sweeper(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    partitions: u32,
    threads: u16,
    stats: &SweepStats,
    stop: impl Fn() -> bool,
) {
    let mut cursors = vec![0u64; partitions as usize];
    let mut next_ns = co.now_ns();
    while !stop() {
        sweep_pass(co, coordinator, kv, threads, &mut cursors, stats).await;
        next_ns = next_ns.saturating_add(SWEEP_INTERVAL_NS).max(co.now_ns());
        co.sleep_until(next_ns).await;
    }
}

/// One pass over this sweeper's partitions, from `cursors` (one per partition, kept
/// between passes).
pub async fn sweep_pass(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    threads: u16,
    cursors: &mut [u64],
    stats: &SweepStats,
) {
    let local = co.local();
    for (partition, cursor) in (0u32..).zip(cursors.iter_mut()) {
        let mine = partition % u32::from(threads.max(1)) == u32::from(local.thread());
        if !mine || coordinator.primary_of_partition(partition) != local.node() {
            continue;
        }
        let page = match coordinator
            .scan_partition(co, partition, kv.id, *cursor, SWEEP_OBJECTS_PER_PARTITION)
            .await
        {
            Ok(page) => page,
            Err(_) => {
                // Not the primary any more, or unreachable: a later pass looks again.
                SweepStats::add(&stats.failed, 1);
                *cursor = 0;
                continue;
            }
        };
        SweepStats::add(&stats.scanned, u64::from(page.visited));
        // A page that stopped before a locked object (next_cursor unchanged) is asked
        // again next pass.
        *cursor = page.next_cursor;
        let now_ms = kv.now_ms(co);
        let expired: Vec<Key> = page
            .objects
            .iter()
            .filter(|(_, stored)| keys::expired(stored, now_ms))
            .map(|(key, _)| *key)
            .collect();
        for chunk in expired.chunks(FLUSH_KEYS_PER_TRANSACTION) {
            match delete_if_expired(co, coordinator, kv, chunk).await {
                Ok(deleted) => SweepStats::add(&stats.deleted, deleted),
                Err(_) => SweepStats::add(&stats.failed, 1),
            }
        }
        // A page is read in memory without a pause: let the worker's other coroutines
        // and its event loop run between partitions.
        co.yield_now().await;
    }
    SweepStats::add(&stats.passes, 1);
}

/// Deletes those of `keys` (store keys of the `kv` table) that are expired at `co`'s
/// clock when read, in one transaction: each is read again and deleted only if it is
/// still expired, and the commit's validation aborts it if one changed since. Returns
/// how many it deleted; an abort is returned, not retried.
pub(crate) async fn delete_if_expired(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    keys: &[Key],
) -> Result<u64, Abort> {
    let mut txn = coordinator.begin(co);
    txn.set_deadline(co.now_ns().saturating_add(kv.command_timeout_ns));
    let values = txn.read_many(kv.id, keys).await?;
    let now_ms = kv.now_ms(co);
    let mut deleted = 0;
    for (&key, stored) in keys.iter().zip(&values) {
        if stored
            .as_deref()
            .is_some_and(|stored| keys::expired(stored, now_ms))
        {
            txn.put(kv.id, key, None)?;
            deleted += 1;
        }
    }
    if deleted == 0 {
        // Nothing to write: dropping the transaction abandons it.
        return Ok(0);
    }
    txn.commit().await?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use ferrotx_cluster::{Configuration, default_tables};
    use ferrotx_node::LocalCluster;
    use ferrotx_resp::SessionConfig;

    use crate::kv_table::store_key;
    use crate::{RespClient, RespValue, encode_request};

    use super::*;

    /// A client and where it runs.
    struct Command<'a>(RespClient, &'a Co, &'a Coordinator);

    impl Command<'_> {
        async fn run(&mut self, args: &[&str]) -> RespValue {
            self.0.command(self.1, self.2, args).await
        }
    }

    #[test]
    fn a_key_written_again_without_expiry_after_the_scan_is_not_deleted() {
        let config = Configuration::local(3, 3, 1, 2, 52_600).unwrap();
        let kv = KvTable::find(&config.clone().with_tables(default_tables()).unwrap()).unwrap();
        let cluster = LocalCluster::start(config, default_tables());
        let client = RespClient::for_config(cluster.config(), 1, SessionConfig::default()).unwrap();
        let done = cluster.spawn(
            0,
            0,
            move |co: Co, coordinator: Rc<Coordinator>| async move {
                let mut command = Command(client, &co, &coordinator);
                for args in [
                    &["SET", "a", "1", "PX", "20"][..],
                    &["SET", "b", "1", "PX", "20"],
                ] {
                    assert_eq!(command.run(args).await, RespValue::ok());
                }
                assert_eq!(command.run(&["SET", "c", "1"]).await, RespValue::ok());
                co.sleep_until(co.now_ns() + 50_000_000).await;
                // A scan found a, b and c (c never expires); then a is set again, without
                // expiry, before the delete transaction reads it.
                assert_eq!(command.run(&["SET", "a", "2"]).await, RespValue::ok());
                let found = [store_key(b"a"), store_key(b"b"), store_key(b"c")];
                assert_eq!(
                    delete_if_expired(&co, &coordinator, kv, &found).await,
                    Ok(1)
                );
                assert_eq!(command.run(&["DBSIZE"]).await, RespValue::Integer(2));
                assert_eq!(command.run(&["GET", "a"]).await, RespValue::bulk("2"));
                assert_eq!(command.run(&["GET", "c"]).await, RespValue::bulk("1"));
                assert_eq!(
                    delete_if_expired(&co, &coordinator, kv, &found).await,
                    Ok(0)
                );
            },
        );
        done.recv_timeout(Duration::from_secs(60)).unwrap();
    }

    #[test]
    fn sweepers_remove_expired_keys_nobody_touches_and_only_those() {
        // 6 partitions, 2 worker threads per node: every thread sweeps one partition.
        let config = Configuration::local(3, 3, 2, 2, 52_700).unwrap();
        let kv = KvTable::find(&config.clone().with_tables(default_tables()).unwrap()).unwrap();
        let partitions = config.partitions().partition_count();
        let threads = config.threads_per_node();
        let cluster = LocalCluster::start(config, default_tables());
        let client = RespClient::for_config(cluster.config(), 1, SessionConfig::default()).unwrap();
        // 2000 expiring keys: about 333 a partition, more than one pass scans.
        let expiring = 2000;
        let load = cluster.spawn(
            0,
            0,
            move |co: Co, coordinator: Rc<Coordinator>| async move {
                let mut command = Command(client, &co, &coordinator);
                for batch in 0..expiring / 100 {
                    let mut bytes = Vec::new();
                    for i in 0..100 {
                        let key = format!("exp{}", batch * 100 + i);
                        encode_request(&["SET", &key, "v", "PX", "50"], &mut bytes);
                    }
                    let replies = command.0.request(&co, &coordinator, &bytes).await;
                    assert!(replies.iter().all(|r| *r == RespValue::ok()), "{replies:?}");
                }
                for i in 0..20 {
                    let key = format!("kept{i}");
                    assert_eq!(command.run(&["SET", &key, "v"]).await, RespValue::ok());
                    let key = format!("again{i}");
                    assert_eq!(
                        command.run(&["SET", &key, "v", "PX", "50"]).await,
                        RespValue::ok()
                    );
                    assert_eq!(command.run(&["SET", &key, "w"]).await, RespValue::ok());
                }
                // Past every deadline, without touching a key: DBSIZE counts them all.
                co.sleep_until(co.now_ns() + 100_000_000).await;
                let dbsize = command.run(&["DBSIZE"]).await;
                assert_eq!(dbsize, RespValue::Integer(expiring + 40));
                command.0
            },
        );
        let client = load.recv_timeout(Duration::from_secs(60)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let sweepers: Vec<_> = cluster
            .nodes()
            .into_iter()
            .flat_map(|node| (0..threads).map(move |thread| (node, thread)))
            .map(|(node, thread)| {
                let stop = stop.clone();
                cluster.spawn(
                    node,
                    thread,
                    move |co: Co, coordinator: Rc<Coordinator>| async move {
                        let stats = SweepStats::default();
                        let stop = || stop.load(Ordering::Relaxed);
                        run_sweeper(&co, &coordinator, kv, partitions, threads, &stats, stop).await;
                        (stats.deleted.get(), stats.passes.get())
                    },
                )
            })
            .collect();
        let check = cluster.spawn(
            1,
            1,
            move |co: Co, coordinator: Rc<Coordinator>| async move {
                let mut command = Command(client, &co, &coordinator);
                let give_up = co.now_ns() + 10_000_000_000;
                let mut dbsize = command.run(&["DBSIZE"]).await;
                while dbsize != RespValue::Integer(40) && co.now_ns() < give_up {
                    co.sleep_until(co.now_ns() + 20_000_000).await;
                    dbsize = command.run(&["DBSIZE"]).await;
                }
                assert_eq!(dbsize, RespValue::Integer(40));
                assert_eq!(command.run(&["GET", "kept7"]).await, RespValue::bulk("v"));
                assert_eq!(command.run(&["GET", "again7"]).await, RespValue::bulk("w"));
            },
        );
        let checked = check.recv_timeout(Duration::from_secs(60));
        stop.store(true, Ordering::Relaxed);
        let counts: Vec<(u64, u64)> = sweepers
            .into_iter()
            .map(|sweeper| sweeper.recv_timeout(Duration::from_secs(60)).unwrap())
            .collect();
        checked.unwrap();
        let deleted: u64 = counts.iter().map(|(deleted, _)| deleted).sum();
        assert_eq!(deleted, expiring as u64, "{counts:?}");
        // One sweeper per partition, and more expired keys in a partition than one pass
        // scans: a sweeper went on from where its last pass stopped.
        let most = counts.iter().map(|&(deleted, _)| deleted).max().unwrap();
        assert!(most > u64::from(SWEEP_OBJECTS_PER_PARTITION), "{counts:?}");
    }
}
