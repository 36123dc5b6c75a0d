//! DBSIZE, SCAN, KEYS, FLUSHALL and FLUSHDB: whole-keyspace commands, answered by asking
//! every partition's primary in a coroutine of a worker thread (FLUSHALL: [`crate::flush`]).
//!
//! None of them is a transaction (Redis Cluster's are not either): each partition is read
//! as it is when its request reaches it, so keys written meanwhile may or may not be
//! counted or listed. SCAN and KEYS leave out keys expired by the node's clock (not yet
//! removed from the store); DBSIZE counts them until they are removed, as Redis does. Per partition the store's scan visits every key present for the
//! whole scan, in insertion order, so a SCAN iteration from cursor 0 to 0 returns every
//! key present throughout it, as Redis guarantees.
//!
//! A SCAN cursor is (partition cursor << [`PARTITION_BITS`]) | partition index: the
//! iteration walks the partitions in order, each with the store's own cursor. Cursor 0
//! starts at partition 0, and a returned 0 means the iteration is over.

use ferrotx_cluster::PARTITIONS_MAX;
use ferrotx_exec::Co;
use ferrotx_resp::command::{keys_pattern_matches, keys_reply};
use ferrotx_resp::{KeyspaceRequest, Reply, ScanRequest, keys};
use ferrotx_txn::coordinator::Coordinator;
use ferrotx_txn::messages::ScanPage;
use ferrotx_txn::participant::SCAN_OBJECTS_MAX;

use crate::backoff::Backoff;
use crate::flush::run_flush;
use crate::kv_table::KvTable;

/// Low bits of a SCAN cursor that hold the partition index.
pub const PARTITION_BITS: u32 = 16;

const _: () = assert!(PARTITIONS_MAX <= 1 << PARTITION_BITS);

/// Pages in a row that find a locked object at the same cursor before SCAN returns what
/// it has (the client goes on later): a lock is held for one commit's round trips, so a
/// few dozen yields usually outlast it. KEYS, which must list every key, waits instead
/// with a transaction's back-off ([`Backoff`]), and gives up only when one key stayed
/// locked for as long as a transaction is retried: with clients writing a hot key from
/// every node, that key is locked most of the time, and 64 yields were too few.
const STALLED_PAGES_MAX: u32 = 64;

/// The cursor of `partition` at its store cursor `cursor`, or `None` if the store's
/// cursor does not fit beside the partition index.
fn join(partition: u32, cursor: u64) -> Option<u64> {
    (cursor >> (64 - PARTITION_BITS) == 0)
        .then(|| (cursor << PARTITION_BITS) | u64::from(partition))
}

/// The partition index and store cursor of a SCAN cursor.
fn split(cursor: u64) -> (u32, u64) {
    let partition = u32::try_from(cursor & ((1 << PARTITION_BITS) - 1)).expect("16 bits");
    (partition, cursor >> PARTITION_BITS)
}

/// Answers `request` over the `partitions` partitions of the `kv` table; `seed` draws
/// KEYS's back-off.
pub async fn run_keyspace(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    partitions: u32,
    request: &KeyspaceRequest,
    seed: u64,
) -> Reply {
    let result = match request {
        KeyspaceRequest::DbSize => {
            let all: Vec<u32> = (0..partitions).collect();
            coordinator
                .count_present(co, kv.id, &all)
                .await
                .map(|count| Reply::Integer(i64::try_from(count).unwrap_or(i64::MAX)))
                .map_err(|abort| format!("ERR ferrotx: DBSIZE failed: {abort}"))
        }
        KeyspaceRequest::Scan(scan) => run_scan(co, coordinator, kv, partitions, scan).await,
        KeyspaceRequest::Keys { pattern } => {
            run_keys(co, coordinator, kv, partitions, pattern, seed).await
        }
        KeyspaceRequest::Flush => run_flush(co, coordinator, kv, partitions, seed)
            .await
            .map(|()| Reply::ok()),
    };
    result.unwrap_or_else(Reply::error)
}

/// One page of `partition` from `cursor`, with errors as reply text.
pub(crate) async fn page(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    partition: u32,
    cursor: u64,
    count: u32,
) -> Result<ScanPage, String> {
    coordinator
        .scan_partition(co, partition, kv.id, cursor, count)
        .await
        .map_err(|abort| format!("ERR ferrotx: scanning partition {partition} failed: {abort}"))
}

/// The Redis keys of a page's stored values that are live at `now_ms` (Unix time in
/// milliseconds): an expired key is left out, and a value that does not decode is not a
/// Redis key's, and is skipped.
fn redis_keys(page: &ScanPage, now_ms: u64) -> impl Iterator<Item = &[u8]> {
    page.objects.iter().filter_map(move |(_, stored)| {
        let entry = keys::decode(stored).ok()?;
        let live = entry.expires_at_ms.is_none_or(|deadline| deadline > now_ms);
        live.then_some(entry.key)
    })
}

/// SCAN: visits about `count` objects from the cursor, across partitions, and replies the
/// matching keys with the cursor to go on from.
async fn run_scan(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    partitions: u32,
    request: &ScanRequest,
) -> Result<Reply, String> {
    let (mut partition, mut cursor) = split(request.cursor);
    let mut found = Vec::new();
    if partition >= partitions {
        // Not a cursor this cluster returned: the iteration is over.
        return Ok(ScanRequest::reply(0, found));
    }
    let (mut visited, mut stalled) = (0u64, 0);
    loop {
        let ask = (request.count.saturating_sub(visited)).clamp(1, u64::from(SCAN_OBJECTS_MAX));
        let ask = u32::try_from(ask).expect("at most SCAN_OBJECTS_MAX");
        let page = page(co, coordinator, kv, partition, cursor, ask).await?;
        visited += u64::from(page.visited);
        found.extend(
            redis_keys(&page, kv.now_ms(co))
                .filter(|key| request.matches(key))
                .map(<[u8]>::to_vec),
        );
        if page.next_cursor == 0 {
            partition += 1;
            cursor = 0;
            if partition == partitions {
                return Ok(ScanRequest::reply(0, found));
            }
        } else if page.next_cursor == cursor && page.visited == 0 {
            // Stopped before a locked object: try again shortly, or let the client.
            stalled += 1;
            if stalled >= STALLED_PAGES_MAX || !found.is_empty() {
                break;
            }
            co.yield_now().await;
            continue;
        } else {
            cursor = page.next_cursor;
        }
        stalled = 0;
        if visited >= request.count {
            break;
        }
    }
    let next = join(partition, cursor).ok_or_else(|| {
        "ERR ferrotx: a partition's scan cursor is too large for a SCAN cursor".to_owned()
    })?;
    debug_assert_ne!(next, 0, "0 ends the iteration");
    Ok(ScanRequest::reply(next, found))
}

/// KEYS: every key matching `pattern`, from every partition. A page that stops before a
/// locked object is asked again after a back-off, until the object is unlocked or the
/// back-off is exhausted (then KEYS fails; the client may try again).
async fn run_keys(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    partitions: u32,
    pattern: &[u8],
    seed: u64,
) -> Result<Reply, String> {
    let mut found = Vec::new();
    for partition in 0..partitions {
        let mut cursor = 0;
        // Waiting for the lock at `cursor`, since this back-off started.
        let mut stalled: Option<Backoff> = None;
        loop {
            let page = page(co, coordinator, kv, partition, cursor, SCAN_OBJECTS_MAX).await?;
            found.extend(
                redis_keys(&page, kv.now_ms(co))
                    .filter(|key| keys_pattern_matches(pattern, key))
                    .map(<[u8]>::to_vec),
            );
            if page.next_cursor == 0 {
                break;
            }
            if page.next_cursor == cursor && page.visited == 0 {
                let backoff = stalled
                    .get_or_insert_with(|| Backoff::new(seed ^ u64::from(partition), co.now_ns()));
                if backoff.exhausted(co) {
                    return Err(format!(
                        "ERR ferrotx: a key of partition {partition} stayed locked during \
                         KEYS; try again"
                    ));
                }
                backoff.wait(co).await;
                continue;
            }
            stalled = None;
            cursor = page.next_cursor;
            // A page of this node's partitions is read in memory without a pause: let the
            // worker's other coroutines and its event loop run between pages.
            co.yield_now().await;
        }
    }
    Ok(keys_reply(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_hold_the_partition_and_its_store_cursor() {
        assert_eq!(join(0, 0), Some(0));
        assert_eq!(split(0), (0, 0));
        for (partition, cursor) in [(0, 1), (5, 0), (65_535, 12_345), (3, (1 << 48) - 1)] {
            let joined = join(partition, cursor).unwrap();
            assert_ne!(joined, 0);
            assert_eq!(split(joined), (partition, cursor));
        }
        assert_eq!(join(1, 1 << 48), None);
    }
}
