//! Where keys live: the placement the coordinator asks for a key's partition and that
//! partition's primary and backups.

use ferrotx_store::{Key, TableId};

/// Where keys live: the partition of a key and the nodes of a partition.
pub trait Placement {
    /// The partition of `key` of `table`.
    fn partition_of(&self, table: TableId, key: &Key) -> u32;
    /// The node that is primary for `partition`.
    fn primary(&self, partition: u32) -> u16;
    /// The nodes that are its backups: those counted as copies, then those being filled
    /// (data recovery), which receive its commits as well.
    fn backups(&self, partition: u32) -> &[u16];
    /// The last of [`Placement::backups`] that are being filled, not yet counted as
    /// copies.
    fn filling(&self, partition: u32) -> &[u16] {
        let _ = partition;
        &[]
    }
}
