//! The one call into the store's scan of a partition, the contract SCAN relies on, and
//! the page of objects a SCAN answers with.
//!
//! `ferrotx_store::Partition::scan(table, cursor, count, out)` visits up to `count`
//! objects of `table` from `cursor` (0 starts), pushes the present ones with their values
//! onto `out`, and returns the cursor to go on from (0 when the table has been visited
//! whole). Objects are visited in the order their keys first had one, and every key
//! present for the whole scan is visited exactly once. A locked object ends the call
//! before it, so a call may return the cursor it was given (or, from 0, the cursor of the
//! first object) without visiting anything: the caller tries again a little later.
//!
//! It was written alongside this code; while it did not exist, the body below was a stub
//! (`partition.has_table(table).then_some(0).ok_or(StoreError::UnknownTable(table))`,
//! scans that end at once), and this is the one place to change if its form changes.

use ferrotx_store::{KEY_BYTES_MAX, Key, Partition, StoreError, TableId, VALUE_BYTES_MAX};

use crate::messages::{
    SCAN_RESPONSE_HEADER_BYTES, finish_scan_response, push_scan_object, scan_object_len,
    start_scan_response,
};

/// Bytes the largest object adds to a SCAN answer (see `messages::scan_object_len`).
const SCAN_OBJECT_BYTES_MAX: usize = 1 + KEY_BYTES_MAX + 4 + VALUE_BYTES_MAX;

// A page always takes its first object, whatever its budget: the answer with one object
// of the largest value must fit one RPC message, or a handler would answer over the limit.
const _: () = assert!(
    SCAN_RESPONSE_HEADER_BYTES + SCAN_OBJECT_BYTES_MAX <= ferrotx_wire::MAX_MESSAGE_BYTES as usize
);

/// Visits up to `count` objects of `table` in `partition` from `cursor`, pushing the
/// present ones onto `out`; returns the next cursor (0: done). See the module docs.
pub(crate) fn scan_primary(
    partition: &Partition,
    table: TableId,
    cursor: u64,
    count: usize,
    out: &mut Vec<(Key, Vec<u8>)>,
) -> Result<u64, StoreError> {
    partition.scan(table, cursor, count, out)
}

/// Writes into `response` (empty) a SCAN answer of `table` in `partition` from `cursor`:
/// up to `count` objects visited, the present ones with their values, and the cursor to
/// go on from. The page stops before a locked object, and before an object that would
/// take the answer past `bytes_max` bytes; the next page starts with that object. The
/// first object is always taken, so that a scan makes progress however large its values
/// are: the answer then holds one object, which fits a message whatever its size.
/// `scratch` holds the object read at each step (kept for reuse).
pub(crate) fn scan_page(
    partition: &Partition,
    table: TableId,
    cursor: u64,
    count: u32,
    bytes_max: usize,
    scratch: &mut Vec<(Key, Vec<u8>)>,
    response: &mut Vec<u8>,
) -> Result<(), StoreError> {
    start_scan_response(response);
    let (mut cursor, mut visited, mut objects) = (cursor, 0, 0);
    // One object per step, so the page stops exactly where its budget or a lock says
    // and the cursor says where the next request goes on.
    while visited < count {
        scratch.clear();
        let next = scan_primary(partition, table, cursor, 1, scratch)?;
        assert!(scratch.len() <= 1, "one object per step");
        if next == cursor && next != 0 {
            // A locked object (a commit installing it): the caller asks again from here
            // a little later.
            break;
        }
        if let Some((key, value)) = scratch.first() {
            if objects > 0 && response.len() + scan_object_len(key, value) > bytes_max {
                break;
            }
            push_scan_object(key, value, response);
            objects += 1;
        }
        visited += 1;
        cursor = next;
        if next == 0 {
            break;
        }
    }
    finish_scan_response(cursor, visited, objects, response);
    assert!(
        objects <= 1 || response.len() <= bytes_max,
        "a page of several objects stays within its budget"
    );
    assert!(
        response.len() <= ferrotx_wire::MAX_MESSAGE_BYTES as usize,
        "a SCAN answer fits one message"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{ScanPage, decode_scan_response};
    use ferrotx_store::{PartitionId, TableSpec};

    const T: TableId = TableId(1);
    const BUDGET: usize = 256 << 10;

    /// Every page from cursor 0 to 0, each checked against the message limit and
    /// `bytes_max`.
    fn pages(partition: &Partition, count: u32, bytes_max: usize) -> Vec<ScanPage> {
        let (mut scratch, mut response, mut pages) = (Vec::new(), Vec::new(), Vec::new());
        let mut cursor = 0;
        loop {
            response.clear();
            scan_page(
                partition,
                T,
                cursor,
                count,
                bytes_max,
                &mut scratch,
                &mut response,
            )
            .unwrap();
            assert!(
                response.len() <= ferrotx_wire::MAX_MESSAGE_BYTES as usize,
                "a page of {} bytes is over the message limit",
                response.len()
            );
            let page = decode_scan_response(&response).unwrap().unwrap();
            assert!(
                page.objects.len() <= 1 || response.len() <= bytes_max,
                "{} objects in {} bytes",
                page.objects.len(),
                response.len()
            );
            assert!(page.visited >= 1, "every page makes progress");
            cursor = page.next_cursor;
            pages.push(page);
            if cursor == 0 {
                return pages;
            }
        }
    }

    /// Issue 29: a page of 200 KiB values that ended on a value of the largest size
    /// (1 MiB) took it past the message limit. Pages now stop before the object that
    /// would pass their budget, take any object that comes first, and list every key once.
    #[test]
    fn pages_of_large_values_stay_within_their_budget_and_the_message_limit() {
        let p = Partition::new(
            PartitionId(0),
            &[TableSpec::variable(1, "kv", VALUE_BYTES_MAX)],
        );
        let mut expected = Vec::new();
        for k in 0..12u64 {
            let len = match k % 3 {
                0 => 200 << 10,
                1 => VALUE_BYTES_MAX,
                _ => 10,
            };
            p.load(T, Key::from(k), &vec![k as u8; len]).unwrap();
            expected.push(Key::from(k));
        }
        for (count, bytes_max) in [(4096, BUDGET), (3, BUDGET), (4096, 0), (1, usize::MAX)] {
            let pages = pages(&p, count, bytes_max);
            let keys: Vec<Key> = pages
                .iter()
                .flat_map(|page| page.objects.iter().map(|(key, _)| *key))
                .collect();
            assert_eq!(keys, expected, "count {count}, budget {bytes_max}");
            for page in &pages {
                for (key, value) in &page.objects {
                    let k = (0..12u64).find(|&k| Key::from(k) == *key).unwrap();
                    assert!(value.iter().all(|&b| b == k as u8));
                }
            }
        }
        // With the 256 KiB budget: a 200 KiB value, then the 1 MiB one alone, then the
        // small one with the next 200 KiB one (together under the budget), and so on.
        let sizes: Vec<usize> = pages(&p, 4096, BUDGET)
            .iter()
            .map(|page| page.objects.len())
            .collect();
        assert_eq!(sizes, [1, 1, 2, 1, 2, 1, 2, 1, 1]);
    }
}
