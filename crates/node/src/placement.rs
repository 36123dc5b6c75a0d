//! The cluster configuration as the transaction layer's placement.

use std::sync::Arc;

use ferrotx_cluster::Configuration;
use ferrotx_store::{Key, PartitionId, TableId};
use ferrotx_txn::coordinator::Placement;

/// Keys go to partitions by the configuration's stable hash of the key's bytes; the
/// partition map says which nodes hold each.
pub struct ClusterPlacement(pub Arc<Configuration>);

impl Placement for ClusterPlacement {
    fn partition_of(&self, _table: TableId, key: &Key) -> u32 {
        self.0.partition_of_key(key.as_bytes()).0
    }

    fn primary(&self, partition: u32) -> u16 {
        self.0.partitions().primary(PartitionId(partition))
    }

    fn backups(&self, partition: u32) -> &[u16] {
        &self.0.partitions().replicas(PartitionId(partition)).backups
    }
}
