//! The cluster configuration as the transaction layer's placement.

use std::sync::Arc;

use ferrotx_cluster::{Configuration, View};
use ferrotx_store::{Key, TableId};
use ferrotx_txn::coordinator::Placement;

/// Keys go to partitions by the configuration's stable hash of their partition key: the
/// whole key, or its first bytes for a table with a locality hint
/// (`TableSpec::with_partition_key` in the configuration's schema), so that rows sharing
/// that prefix share a partition. The partition map says which nodes hold each: the
/// view's, once the node runs with membership, else the configuration file's.
pub struct ClusterPlacement {
    config: Arc<Configuration>,
    /// Primary, backups, then backups being filled, of each partition, from the view if
    /// there is one.
    copies: Vec<Vec<u16>>,
    /// How many of each partition's `copies` are being filled (at the end).
    filling: Vec<u8>,
}

impl ClusterPlacement {
    /// The placement of `config`, with the partition map of `view` if given.
    pub fn new(config: Arc<Configuration>, view: Option<&View>) -> Self {
        let (copies, filling) = match view {
            Some(v) => (
                (0..v.copies.len())
                    .map(|p| {
                        let mut nodes = v.copies[p].clone();
                        // Fills of a partition with no copy (which a checked view never
                        // has) would make one its primary: left out.
                        if !nodes.is_empty() {
                            nodes.extend_from_slice(v.filling(p as u32));
                        }
                        nodes
                    })
                    .collect(),
                (0..v.copies.len())
                    .map(|p| {
                        if v.copies[p].is_empty() {
                            0
                        } else {
                            v.filling(p as u32).len() as u8
                        }
                    })
                    .collect(),
            ),
            None => (
                config
                    .partitions()
                    .iter()
                    .map(|(_, r)| r.nodes().collect())
                    .collect(),
                vec![0; config.partitions().partition_count() as usize],
            ),
        };
        Self {
            config,
            copies,
            filling,
        }
    }
}

impl Placement for ClusterPlacement {
    fn partition_of(&self, table: TableId, key: &Key) -> u32 {
        let partition_key = match self.config.tables().iter().find(|t| t.id == table) {
            Some(spec) => spec.partition_key(key),
            // Not in the schema: the coordinator refuses such keys before placing them;
            // anything else (loading, checks) places them by the whole key.
            None => key.as_bytes(),
        };
        self.config.partition_of_key(partition_key).0
    }

    // A partition number may come from the network (a SHIP request names its own): one
    // out of range has no copies rather than indexing out of bounds (issue 29).
    fn primary(&self, partition: u32) -> u16 {
        self.copies
            .get(partition as usize)
            .and_then(|copies| copies.first())
            .copied()
            .unwrap_or(ferrotx_txn::coordinator::NO_PRIMARY)
    }

    fn backups(&self, partition: u32) -> &[u16] {
        match self.copies.get(partition as usize).map(Vec::as_slice) {
            None | Some([]) => &[],
            Some([_, backups @ ..]) => backups,
        }
    }

    fn filling(&self, partition: u32) -> &[u16] {
        let backups = self.backups(partition);
        let filling = self.filling.get(partition as usize).copied().unwrap_or(0);
        // The view's fills are among its backups (`new`): internal, so asserted.
        assert!(usize::from(filling) <= backups.len());
        &backups[backups.len() - usize::from(filling)..]
    }

    fn contains(&self, partition: u32) -> bool {
        (partition as usize) < self.copies.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotx_store::TableSpec;

    /// Issue 29: a SHIP request names its partition, and a forged one named one past the
    /// configuration's: the placement indexed out of bounds and the worker panicked.
    #[test]
    fn a_partition_out_of_range_has_no_copies_and_no_panic() {
        let config = Configuration::local(3, 3, 1, 12, 7000).unwrap();
        let count = config.partitions().partition_count();
        let placement = ClusterPlacement::new(Arc::new(config), None);
        assert!(placement.contains(count - 1));
        assert_ne!(
            placement.primary(count - 1),
            ferrotx_txn::coordinator::NO_PRIMARY
        );
        for partition in [count, count + 1, u32::MAX] {
            assert!(!placement.contains(partition));
            assert_eq!(
                placement.primary(partition),
                ferrotx_txn::coordinator::NO_PRIMARY
            );
            assert!(placement.backups(partition).is_empty());
            assert!(placement.filling(partition).is_empty());
        }
    }

    #[test]
    fn rows_sharing_a_partition_key_share_a_partition() {
        let config = Configuration::local(3, 3, 1, 12, 7000)
            .unwrap()
            .with_tables(vec![
                TableSpec::fixed(1, "plain", 8),
                TableSpec::fixed(2, "grouped", 8).with_partition_key(8),
            ])
            .unwrap();
        let placement = ClusterPlacement::new(Arc::new(config), None);
        let (plain, grouped) = (TableId(1), TableId(2));
        for group in 0..50u64 {
            let first = placement.partition_of(grouped, &Key::from_pair(group, 0));
            for row in 1..20 {
                assert_eq!(
                    placement.partition_of(grouped, &Key::from_pair(group, row)),
                    first
                );
            }
            // The group's partition is its partition key's, as the whole key is placed
            // in a table without the hint.
            assert_eq!(first, placement.partition_of(plain, &Key::from(group)));
        }
        // Without the hint the same keys spread over the partitions.
        let spread: std::collections::BTreeSet<u32> = (0..20)
            .map(|row| placement.partition_of(plain, &Key::from_pair(0, row)))
            .collect();
        assert!(spread.len() > 1);
        // Groups spread too.
        let groups: std::collections::BTreeSet<u32> = (0..50)
            .map(|group| placement.partition_of(grouped, &Key::from_pair(group, 0)))
            .collect();
        assert!(groups.len() > 1);
    }
}
