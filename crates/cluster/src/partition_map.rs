//! The partition map: which nodes hold each partition.

use std::collections::BTreeSet;

use ferrotx_store::PartitionId;

use crate::error::ConfigError;
use crate::key_hash::reduce;
use crate::limits::PARTITIONS_MAX;
use crate::member::Member;

/// The nodes holding one partition: its primary, which serves reads and locks, and its
/// backups, which log and apply committed writes (FaRM section 4).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Replicas {
    /// The node of the primary.
    pub primary: u16,
    /// The nodes of the backups, in the order they were chosen (the first is the one a
    /// reconfiguration would promote first), all distinct from each other and from the
    /// primary.
    pub backups: Vec<u16>,
}

impl Replicas {
    /// The primary, then the backups.
    pub fn nodes(&self) -> impl Iterator<Item = u16> + '_ {
        std::iter::once(self.primary).chain(self.backups.iter().copied())
    }

    /// True if `node` holds a replica of the partition.
    pub fn contains(&self, node: u16) -> bool {
        self.nodes().any(|n| n == node)
    }
}

/// Where every partition lives: partition `p` is entry `p`.
///
/// Built by [`PartitionMap::place`] (the usual way) or from an explicit list with
/// [`PartitionMap::from_assignments`]; both check that every partition has the same number
/// of replicas, on distinct member nodes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PartitionMap {
    replicas_per_partition: u8,
    assignments: Vec<Replicas>,
}

impl PartitionMap {
    /// A map of the partitions listed in `assignments` (partition `p` at index `p`), each
    /// with `replicas` replicas on distinct nodes of `members`.
    pub fn from_assignments(
        members: &[Member],
        replicas: u8,
        assignments: Vec<Replicas>,
    ) -> Result<Self, ConfigError> {
        let count = u32::try_from(assignments.len()).unwrap_or(u32::MAX);
        check_shape(members, count, replicas)?;
        let nodes: BTreeSet<u16> = members.iter().map(|m| m.node).collect();
        for (index, assignment) in assignments.iter().enumerate() {
            let partition = u32::try_from(index).expect("count checked");
            let count = 1 + assignment.backups.len();
            if count != usize::from(replicas) {
                return Err(ConfigError::WrongReplicaCount {
                    partition,
                    count,
                    expected: replicas,
                });
            }
            let mut seen = BTreeSet::new();
            for node in assignment.nodes() {
                if !nodes.contains(&node) {
                    return Err(ConfigError::UnknownNode { partition, node });
                }
                if !seen.insert(node) {
                    return Err(ConfigError::RepeatedNode { partition, node });
                }
            }
        }
        Ok(Self {
            replicas_per_partition: replicas,
            assignments,
        })
    }

    /// Wraps assignments made by the placement, checked there.
    pub(crate) fn from_placed(replicas: u8, assignments: Vec<Replicas>) -> Self {
        debug_assert!(
            assignments
                .iter()
                .all(|a| 1 + a.backups.len() == usize::from(replicas))
        );
        Self {
            replicas_per_partition: replicas,
            assignments,
        }
    }

    /// Number of partitions.
    pub fn partition_count(&self) -> u32 {
        u32::try_from(self.assignments.len()).expect("at most PARTITIONS_MAX partitions")
    }

    /// Replicas of each partition (f + 1): its primary and its backups.
    pub fn replicas_per_partition(&self) -> u8 {
        self.replicas_per_partition
    }

    /// The replicas of `partition`.
    ///
    /// # Panics
    ///
    /// If `partition` is not below [`Self::partition_count`]: partition ids come from
    /// [`Self::partition_of`] or this map, so another one is a bug.
    pub fn replicas(&self, partition: PartitionId) -> &Replicas {
        self.get(partition).unwrap_or_else(|| {
            panic!(
                "{partition:?} is not in a map of {} partitions",
                self.assignments.len()
            )
        })
    }

    /// The replicas of `partition`, or `None` if the map has no such partition.
    pub fn get(&self, partition: PartitionId) -> Option<&Replicas> {
        self.assignments.get(usize::try_from(partition.0).ok()?)
    }

    /// The node of the primary of `partition`; panics like [`Self::replicas`].
    pub fn primary(&self, partition: PartitionId) -> u16 {
        self.replicas(partition).primary
    }

    /// The partition of a key whose hash is `key_hash` (from
    /// [`crate::hash_partition_key`]). It depends only on the hash and the number of
    /// partitions, which no reconfiguration changes, so a key stays in its partition
    /// while the partition moves between nodes.
    pub fn partition_of(&self, key_hash: u64) -> PartitionId {
        PartitionId(reduce(key_hash, self.partition_count()))
    }

    /// Every partition and its replicas, in partition order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (PartitionId, &Replicas)> + '_ {
        self.assignments
            .iter()
            .enumerate()
            .map(|(index, replicas)| (partition_id(index), replicas))
    }

    /// The partitions whose primary is on `node`, in partition order.
    pub fn primaries_on(&self, node: u16) -> impl Iterator<Item = PartitionId> + '_ {
        self.iter()
            .filter(move |(_, replicas)| replicas.primary == node)
            .map(|(partition, _)| partition)
    }

    /// The partitions with a backup on `node`, in partition order.
    pub fn backups_on(&self, node: u16) -> impl Iterator<Item = PartitionId> + '_ {
        self.iter()
            .filter(move |(_, replicas)| replicas.backups.contains(&node))
            .map(|(partition, _)| partition)
    }
}

/// The id of the partition at `index` of a map.
fn partition_id(index: usize) -> PartitionId {
    PartitionId(u32::try_from(index).expect("at most PARTITIONS_MAX partitions"))
}

/// Checks what any map needs: valid members, `count` partitions within bounds, and
/// `replicas` between 1 and the number of members.
pub(crate) fn check_shape(members: &[Member], count: u32, replicas: u8) -> Result<(), ConfigError> {
    crate::member::check_members(members)?;
    if count == 0 {
        return Err(ConfigError::ZeroPartitions);
    }
    if count > PARTITIONS_MAX {
        return Err(ConfigError::TooManyPartitions {
            count,
            max: PARTITIONS_MAX,
        });
    }
    if replicas == 0 {
        return Err(ConfigError::ZeroReplicas);
    }
    if usize::from(replicas) > members.len() {
        return Err(ConfigError::TooManyReplicas {
            replicas,
            nodes: members.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::members_in;

    fn replicas(primary: u16, backups: &[u16]) -> Replicas {
        Replicas {
            primary,
            backups: backups.to_vec(),
        }
    }

    #[test]
    fn lookups() {
        let members = members_in(&["a", "b", "c"]);
        let map = PartitionMap::from_assignments(
            &members,
            2,
            vec![replicas(0, &[1]), replicas(1, &[2]), replicas(0, &[2])],
        )
        .unwrap();
        assert_eq!(map.partition_count(), 3);
        assert_eq!(map.replicas_per_partition(), 2);
        assert_eq!(map.replicas(PartitionId(1)), &replicas(1, &[2]));
        assert_eq!(map.primary(PartitionId(2)), 0);
        assert_eq!(map.get(PartitionId(3)), None);
        assert_eq!(
            map.primaries_on(0).collect::<Vec<_>>(),
            [PartitionId(0), PartitionId(2)]
        );
        assert_eq!(
            map.backups_on(2).collect::<Vec<_>>(),
            [PartitionId(1), PartitionId(2)]
        );
        assert_eq!(map.backups_on(0).count(), 0);
        assert_eq!(map.iter().map(|(p, _)| p.0).collect::<Vec<_>>(), [0, 1, 2]);
        let r = map.replicas(PartitionId(2));
        assert_eq!(r.nodes().collect::<Vec<_>>(), [0, 2]);
        assert!(r.contains(2) && !r.contains(1));
    }

    #[test]
    #[should_panic(expected = "is not in a map of 3 partitions")]
    fn replicas_of_an_unknown_partition_panics() {
        let map = PartitionMap::place(&members_in(&["a", "b"]), 3, 1).unwrap();
        let _ = map.replicas(PartitionId(3));
    }

    #[test]
    fn partition_of_covers_every_partition_evenly() {
        let map = PartitionMap::place(&members_in(&["a", "b", "c"]), 12, 2).unwrap();
        let mut hits = [0u32; 12];
        for key in 0u64..12_000 {
            let partition = map.partition_of(crate::hash_partition_key(&key.to_be_bytes()));
            hits[partition.0 as usize] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
        // Pinned, like the hash: key 42 is in partition 4 of 12 in every build.
        assert_eq!(
            map.partition_of(crate::hash_partition_key(&42u64.to_be_bytes())),
            PartitionId(4)
        );
    }

    #[test]
    fn explicit_maps_are_checked() {
        let members = members_in(&["a", "b", "c"]);
        let check = |assignments: Vec<Replicas>| {
            PartitionMap::from_assignments(&members, 2, assignments).unwrap_err()
        };
        assert!(matches!(check(vec![]), ConfigError::ZeroPartitions));
        assert!(matches!(
            check(vec![replicas(0, &[1]), replicas(1, &[])]),
            ConfigError::WrongReplicaCount {
                partition: 1,
                count: 1,
                expected: 2
            }
        ));
        assert!(matches!(
            check(vec![replicas(0, &[1, 2])]),
            ConfigError::WrongReplicaCount {
                partition: 0,
                count: 3,
                expected: 2
            }
        ));
        assert!(matches!(
            check(vec![replicas(0, &[1]), replicas(7, &[1])]),
            ConfigError::UnknownNode {
                partition: 1,
                node: 7
            }
        ));
        assert!(matches!(
            check(vec![replicas(2, &[2])]),
            ConfigError::RepeatedNode {
                partition: 0,
                node: 2
            }
        ));
        assert!(matches!(
            PartitionMap::from_assignments(&members, 4, vec![replicas(0, &[1, 2, 0])]),
            Err(ConfigError::TooManyReplicas {
                replicas: 4,
                nodes: 3
            })
        ));
    }
}
