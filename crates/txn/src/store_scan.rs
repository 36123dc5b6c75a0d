//! The one call into the store's scan of a partition, and the contract SCAN relies on.
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

use ferrotx_store::{Key, Partition, StoreError, TableId};

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
