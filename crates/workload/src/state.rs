//! The final state of a cluster as the checkers see it: every copy of a key. The caller
//! implements [`StateReader`] over what it runs (the simulator's partitions, a
//! `LocalCluster`), once the cluster is quiet and every coordinator has flushed its
//! truncation.

use ferrotx_store::{Key, TableId};
use ferrotx_txn::participant::Role;

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

/// [`CopyState::version`] of a copy that could not be read (its table unknown, or the
/// object left locked): it equals no real version, so the checkers report it.
pub const VERSION_UNREADABLE: u64 = u64::MAX;

impl From<(u16, Role, Option<(u64, Option<Vec<u8>>)>)> for CopyState {
    /// From a node, a role and what the copy holds (`None`: unreadable), as
    /// `LocalCluster::read_copies` gives them.
    fn from((node, role, seen): (u16, Role, Option<(u64, Option<Vec<u8>>)>)) -> Self {
        let (version, value) = seen.unwrap_or((VERSION_UNREADABLE, None));
        Self {
            node,
            primary: role == Role::Primary,
            version,
            value,
        }
    }
}

/// Any function from a key to its copies reads state, so a caller can pass a closure
/// over its cluster.
impl<F, I> StateReader for F
where
    F: Fn(TableId, &Key) -> I,
    I: IntoIterator<Item = CopyState>,
{
    fn copies(&self, table: TableId, key: &Key) -> Vec<CopyState> {
        self(table, key).into_iter().collect()
    }
}
