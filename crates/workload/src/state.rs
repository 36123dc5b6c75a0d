//! The final state of a cluster as the checkers see it: every copy of a key. The caller
//! implements [`StateReader`] over what it runs (the simulator's partitions, a
//! `LocalCluster`), once the cluster is quiet and every coordinator has flushed its
//! truncation.

use ferrotx_store::{Key, TableId};

/// What one copy of a key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyState {
    /// The node holding it.
    pub node: u16,
    /// True for the primary, false for a backup.
    pub primary: bool,
    /// The object's version (0 for a key that never had an object).
    pub version: u64,
    /// Its value, or `None` if absent or deleted.
    pub value: Option<Vec<u8>>,
}

/// Reads every copy of a key.
pub trait StateReader {
    /// Every copy of `key` of `table` (the primary and each backup), in any order.
    fn copies(&self, table: TableId, key: &Key) -> Vec<CopyState>;

    /// The primary copy of `key` of `table`, if exactly one copy says it is.
    fn primary(&self, table: TableId, key: &Key) -> Option<CopyState> {
        let mut primaries = self.copies(table, key).into_iter().filter(|c| c.primary);
        let primary = primaries.next()?;
        primaries.next().is_none().then_some(primary)
    }
}
