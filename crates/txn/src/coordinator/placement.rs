//! Where keys live: the placement the coordinator asks for a key's partition and that
//! partition's primary and backups.

use ferrotx_store::{Key, TableId};

/// Where keys live: the partition of a key and the nodes of a partition.
pub trait Placement {
    /// The partition of `key` of `table`.
    fn partition_of(&self, table: TableId, key: &Key) -> u32;
    /// The node that is primary for `partition`; [`NO_PRIMARY`] for a partition with no
    /// copy left, or that does not exist.
    ///
    /// [`NO_PRIMARY`]: crate::coordinator::NO_PRIMARY
    fn primary(&self, partition: u32) -> u16;
    /// The nodes that are its backups: those counted as copies, then those being filled
    /// (data recovery), which receive its commits as well. None for a partition that does
    /// not exist.
    fn backups(&self, partition: u32) -> &[u16];
    /// Whether `partition` exists. Messages from the network name partitions (a SHIP
    /// request names its own): one past the configuration's is refused, not looked up.
    fn contains(&self, partition: u32) -> bool {
        let _ = partition;
        true
    }
    /// The last of [`Placement::backups`] that are being filled, not yet counted as
    /// copies.
    fn filling(&self, partition: u32) -> &[u16] {
        let _ = partition;
        &[]
    }
}
