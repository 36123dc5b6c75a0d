//! Placement: computing a partition map from the members.

use std::collections::BTreeMap;

use crate::error::ConfigError;
use crate::member::Member;
use crate::partition_map::{PartitionMap, Replicas, check_shape};

impl PartitionMap {
    /// Places `partition_count` partitions of `replicas` replicas each (f + 1) on
    /// `members`.
    ///
    /// The result depends only on the set of members (not on the order they are listed),
    /// the count and `replicas`: every node computes the same map.
    ///
    /// - Primaries go round robin over the nodes in id order (partition `p` on the
    ///   `p mod n`-th node), so every node has the same number of primaries, within one.
    /// - Backups are chosen one at a time, partition by partition, among the nodes that do
    ///   not already hold a replica of that partition, preferring in this order: a failure
    ///   domain holding the fewest of the partition's replicas so far (so the replicas are
    ///   in distinct domains whenever there are at least `replicas` domains, and spread as
    ///   evenly as the domains allow otherwise); the fewest backups so far (balance); the
    ///   fewest backups so far of this primary's partitions, then the fewest partitions
    ///   shared with the replicas already chosen (so that a failed node's partitions have
    ///   their backups, one of which is promoted in its place, on many nodes, which then
    ///   share its load and recover it in parallel, FaRM sections 5.2 and 5.4); and last the
    ///   next node after the primary in id order, round the ring.
    /// - The greedy choice can leave backup counts two apart (a node is never a backup of
    ///   its own partitions, and may be passed over at the wrong moments), so last,
    ///   partition by partition, a backup moves to the lightest node with at least two
    ///   backups fewer, where the move keeps the partition's replicas on distinct nodes
    ///   and no more crowded in a failure domain; until no such move is left.
    ///
    /// Failure domains come before balance: with uneven domains (say one node alone in
    /// its rack) that node takes more backups than the others. Where domains do not get
    /// in the way, backups are balanced within one (within two with equal-sized domains,
    /// where a move may need a chain of moves, which this does not search for).
    ///
    /// It runs once, when a configuration is built: about a second at the limits
    /// ([`crate::MEMBERS_MAX`] members, [`crate::PARTITIONS_MAX`] partitions), a few
    /// milliseconds for tens of nodes.
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use ferrotx_cluster::{Member, PartitionMap};
    /// use ferrotx_store::PartitionId;
    ///
    /// let members: Vec<Member> = (0..4)
    ///     .map(|node| Member {
    ///         node,
    ///         failure_domain: format!("rack-{}", node % 2),
    ///         host: Ipv4Addr::LOCALHOST.into(),
    ///         rpc_port_base: 7000 + node * 10,
    ///         resp_port: None,
    ///         resp: None,
    ///         lease_port: None,
    ///     })
    ///     .collect();
    /// let map = PartitionMap::place(&members, 8, 2)?;
    /// let first = map.replicas(PartitionId(0));
    /// assert_eq!(first.primary, 0);
    /// // Its backup is in the other rack.
    /// assert_eq!(first.backups[0] % 2, 1);
    /// assert_eq!(map.primaries_on(3).count(), 2);
    /// assert_eq!(map.backups_on(3).count(), 2);
    /// # Ok::<(), ferrotx_cluster::ConfigError>(())
    /// ```
    pub fn place(
        members: &[Member],
        partition_count: u32,
        replicas: u8,
    ) -> Result<Self, ConfigError> {
        check_shape(members, partition_count, replicas)?;
        // Nodes in id order, so that the order of the file does not matter.
        let mut nodes: Vec<&Member> = members.iter().collect();
        nodes.sort_by_key(|member| member.node);
        // Failure domains as indexes, in order of first appearance among the nodes.
        let mut domain_indexes: BTreeMap<&str, usize> = BTreeMap::new();
        let domain_of: Vec<usize> = nodes
            .iter()
            .map(|member| {
                let next = domain_indexes.len();
                *domain_indexes
                    .entry(member.failure_domain.as_str())
                    .or_insert(next)
            })
            .collect();

        let mut placed = choose(&domain_of, partition_count as usize, usize::from(replicas));
        rebalance(&domain_of, &mut placed);

        let assignments = placed
            .iter()
            .map(|chosen| {
                assert_eq!(chosen.len(), usize::from(replicas));
                Replicas {
                    primary: nodes[chosen[0]].node,
                    backups: chosen[1..].iter().map(|&index| nodes[index].node).collect(),
                }
            })
            .collect();
        Ok(Self::from_placed(replicas, assignments))
    }
}

/// The greedy placement of `count` partitions of `replicas` replicas on the nodes whose
/// failure domains are `domain_of` (indexes of nodes, in id order): for each partition,
/// the indexes of its replicas' nodes, primary first.
fn choose(domain_of: &[usize], count: usize, replicas: usize) -> Vec<Vec<usize>> {
    let node_count = domain_of.len();
    let domain_count = domain_of.iter().max().map_or(0, |&d| d + 1);
    assert!(0 < replicas && replicas <= node_count);
    // Backups held by each node so far.
    let mut backup_load = vec![0u32; node_count];
    // shared[a * node_count + b]: partitions with replicas on both a and b so far.
    let mut shared = vec![0u32; node_count * node_count];
    // backed_up[a * node_count + b]: partitions with their primary on a and a backup on b
    // so far.
    let mut backed_up = vec![0u32; node_count * node_count];
    // Replicas of the current partition in each failure domain.
    let mut in_domain = vec![0usize; domain_count];

    let mut placed = Vec::with_capacity(count);
    for partition in 0..count {
        let primary = partition % node_count;
        let mut chosen = Vec::with_capacity(replicas);
        chosen.push(primary);
        in_domain.fill(0);
        in_domain[domain_of[primary]] += 1;
        for _ in 1..replicas {
            let backup = (0..node_count)
                .filter(|candidate| !chosen.contains(candidate))
                .min_by_key(|&candidate| {
                    let together: u32 = chosen
                        .iter()
                        .map(|&replica| shared[replica * node_count + candidate])
                        .sum();
                    let distance = (candidate + node_count - primary) % node_count;
                    (
                        in_domain[domain_of[candidate]],
                        backup_load[candidate],
                        backed_up[primary * node_count + candidate],
                        together,
                        distance,
                    )
                })
                .expect("replicas <= members leaves a node without a replica");
            backup_load[backup] += 1;
            backed_up[primary * node_count + backup] += 1;
            for &replica in &chosen {
                shared[replica * node_count + backup] += 1;
                shared[backup * node_count + replica] += 1;
            }
            in_domain[domain_of[backup]] += 1;
            chosen.push(backup);
        }
        placed.push(chosen);
    }
    placed
}

/// Moves backups from more loaded nodes to nodes with at least two fewer, while any such
/// move keeps the partition's replicas on distinct nodes and no more crowded in a failure
/// domain than before. Partitions are taken in order, and the lightest eligible node first,
/// so the result is deterministic; every move lowers the sum of the squared loads, so the
/// passes end.
fn rebalance(domain_of: &[usize], placed: &mut [Vec<usize>]) {
    let node_count = domain_of.len();
    let domain_count = domain_of.iter().max().map_or(0, |&d| d + 1);
    let mut load = vec![0usize; node_count];
    for chosen in placed.iter() {
        for &backup in &chosen[1..] {
            load[backup] += 1;
        }
    }
    loop {
        // A snapshot of the loads, ordered: the nodes of each domain lightest first, and
        // the domains by their lightest node. Moves during the pass make it stale, which
        // only hides some moves until the next pass; a pass that moves nothing saw it
        // exact, so the loop ends with no move left.
        let snapshot = load.clone();
        let mut domain_nodes: Vec<Vec<usize>> = vec![Vec::new(); domain_count];
        for node in 0..node_count {
            domain_nodes[domain_of[node]].push(node);
        }
        for nodes in &mut domain_nodes {
            nodes.sort_by_key(|&node| (snapshot[node], node));
        }
        let mut domains: Vec<usize> = (0..domain_count).collect();
        domains.sort_by_key(|&domain| (snapshot[domain_nodes[domain][0]], domain));
        let order = LoadOrder {
            domain_of,
            snapshot: &snapshot,
            domains: &domains,
            domain_nodes: &domain_nodes,
        };

        let mut moved = false;
        for chosen in placed.iter_mut() {
            for slot in 1..chosen.len() {
                let from = chosen[slot];
                if let Some(to) = order.lighter_node(chosen, slot, &load) {
                    debug_assert!(load[to] + 2 <= load[from]);
                    chosen[slot] = to;
                    load[from] -= 1;
                    load[to] += 1;
                    moved = true;
                }
            }
        }
        if !moved {
            return;
        }
    }
}

/// The nodes by backup load, as one pass of [`rebalance`] sees them.
struct LoadOrder<'a> {
    domain_of: &'a [usize],
    snapshot: &'a [usize],
    domains: &'a [usize],
    domain_nodes: &'a [Vec<usize>],
}

impl LoadOrder<'_> {
    /// A node that could take the backup at `chosen[slot]`: at least two backups lighter
    /// (by `load`), not a replica of the partition, and in a domain no more crowded by the
    /// partition's other replicas than the current node's.
    fn lighter_node(&self, chosen: &[usize], slot: usize, load: &[usize]) -> Option<usize> {
        let from = chosen[slot];
        let crowding = |domain: usize| {
            chosen
                .iter()
                .enumerate()
                .filter(|&(index, &node)| index != slot && self.domain_of[node] == domain)
                .count()
        };
        let limit = crowding(self.domain_of[from]);
        // Domains in order of their lightest node; stop at the first too heavy. Only
        // domains crowded above `limit` (at most `replicas - 1` of them) and replicas of the
        // partition are passed over, so the search is short.
        for &domain in self.domains {
            if self.snapshot[self.domain_nodes[domain][0]] + 2 > load[from] {
                return None;
            }
            if crowding(domain) > limit {
                continue;
            }
            for &to in &self.domain_nodes[domain] {
                if self.snapshot[to] + 2 > load[from] {
                    break;
                }
                if load[to] + 2 <= load[from] && !chosen.contains(&to) {
                    return Some(to);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;
    use crate::testing::{member, members_in};

    /// Failure-domain layouts of `nodes` nodes, by name.
    fn layouts(nodes: usize) -> Vec<(&'static str, Vec<String>)> {
        let layout = |f: &dyn Fn(usize) -> String| (0..nodes).map(f).collect::<Vec<_>>();
        vec![
            ("own", layout(&|n| format!("node-{n}"))),
            ("single", layout(&|_| "dc".to_owned())),
            ("alternating", layout(&|n| format!("rack-{}", n % 2))),
            ("thirds", layout(&|n| format!("rack-{}", n % 3))),
            ("blocks-of-3", layout(&|n| format!("rack-{}", n / 3))),
            (
                "lonely",
                layout(&|n| if n == 0 { "alone" } else { "crowd" }.to_owned()),
            ),
        ]
    }

    fn domain_count(members: &[Member]) -> usize {
        members
            .iter()
            .map(|m| m.failure_domain.as_str())
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// The properties every placement must have, whatever the layout.
    fn check_placement(members: &[Member], count: u32, replicas: u8, map: &PartitionMap) {
        let context = format!(
            "{} nodes, {count} partitions, {replicas} replicas",
            members.len()
        );
        let domain_of: BTreeMap<u16, &str> = members
            .iter()
            .map(|m| (m.node, m.failure_domain.as_str()))
            .collect();
        assert_eq!(map.partition_count(), count, "{context}");
        assert_eq!(map.replicas_per_partition(), replicas, "{context}");
        assert_eq!(map.iter().len(), count as usize, "{context}");
        let domains = domain_count(members);
        for (partition, r) in map.iter() {
            let nodes: BTreeSet<u16> = r.nodes().collect();
            assert_eq!(
                nodes.len(),
                usize::from(replicas),
                "{context} {partition:?}: {r:?}"
            );
            assert!(nodes.iter().all(|n| domain_of.contains_key(n)), "{context}");
            // Distinct failure domains whenever there are enough; otherwise every domain.
            let used: BTreeSet<&str> = r.nodes().map(|n| domain_of[&n]).collect();
            assert_eq!(
                used.len(),
                usize::from(replicas).min(domains),
                "{context} {partition:?}: {r:?}"
            );
        }
        // Primaries balanced within one.
        let primaries: Vec<usize> = members
            .iter()
            .map(|m| map.primaries_on(m.node).count())
            .collect();
        let (min, max) = (
            primaries.iter().min().unwrap(),
            primaries.iter().max().unwrap(),
        );
        assert!(max - min <= 1, "{context}: primaries {primaries:?}");
        // Every replica is counted once by primaries_on or backups_on.
        let backups: usize = members.iter().map(|m| map.backups_on(m.node).count()).sum();
        assert_eq!(
            backups,
            count as usize * usize::from(replicas - 1),
            "{context}"
        );
    }

    fn domain_sizes_equal(members: &[Member]) -> bool {
        let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in members {
            *sizes.entry(m.failure_domain.as_str()).or_default() += 1;
        }
        sizes.values().min() == sizes.values().max()
    }

    fn backup_loads(members: &[Member], map: &PartitionMap) -> Vec<usize> {
        members
            .iter()
            .map(|m| map.backups_on(m.node).count())
            .collect()
    }

    #[test]
    fn placement_properties_hold_for_many_layouts() {
        for nodes in 1..=9usize {
            for (layout, domains) in layouts(nodes) {
                let domains: Vec<&str> = domains.iter().map(String::as_str).collect();
                let members = members_in(&domains);
                for replicas in 1..=nodes.min(4) as u8 {
                    for count in [1, 2, 3, 5, 8, 13, 24, 50, 97] {
                        let map = PartitionMap::place(&members, count, replicas).unwrap();
                        check_placement(&members, count, replicas, &map);
                        // Deterministic, and blind to the order members are listed in.
                        assert_eq!(PartitionMap::place(&members, count, replicas).unwrap(), map);
                        let mut reversed = members.clone();
                        reversed.reverse();
                        assert_eq!(
                            PartitionMap::place(&reversed, count, replicas).unwrap(),
                            map,
                            "{layout}"
                        );
                        // Where domains do not constrain the choice, backups are balanced
                        // within one; with domains of equal sizes, within two (moving a
                        // backup may then need a chain of moves, which the placement does
                        // not search for).
                        let loads = backup_loads(&members, &map);
                        let spread = loads.iter().max().unwrap() - loads.iter().min().unwrap();
                        let allowed = match layout {
                            "own" | "single" => 1,
                            _ if domain_sizes_equal(&members) => 2,
                            _ => usize::MAX,
                        };
                        assert!(
                            spread <= allowed,
                            "{layout}, {nodes} nodes, {count} partitions, {replicas} \
                             replicas: backups {loads:?}"
                        );
                    }
                }
                // One replica more than there are nodes is refused.
                let too_many = u8::try_from(nodes + 1).unwrap();
                assert!(matches!(
                    PartitionMap::place(&members, 8, too_many),
                    Err(ConfigError::TooManyReplicas { replicas, nodes: n })
                        if replicas == too_many && n == nodes
                ));
            }
        }
    }

    #[test]
    fn even_racks_balance_backups_too() {
        // Two racks of three: every backup goes to the other rack, and the load stays even.
        let members = members_in(&["a", "a", "a", "b", "b", "b"]);
        let map = PartitionMap::place(&members, 24, 2).unwrap();
        assert_eq!(backup_loads(&members, &map), vec![4; 6]);
        for (_, r) in map.iter() {
            assert_ne!(r.primary / 3, r.backups[0] / 3);
        }
    }

    #[test]
    fn a_failed_nodes_backups_are_spread() {
        // When a node fails, FaRM promotes a backup of each of its primaries and recovers
        // its partitions from the other replicas, in parallel. With four primaries on each
        // node, each node's partitions are backed up on four distinct nodes, not on one
        // neighbour, so that the load of a failed node is shared.
        for nodes in [5, 8] {
            let domains: Vec<String> = (0..nodes).map(|n| format!("node-{n}")).collect();
            let domains: Vec<&str> = domains.iter().map(String::as_str).collect();
            let members = members_in(&domains);
            let map = PartitionMap::place(&members, 4 * nodes, 2).unwrap();
            for m in &members {
                let backup_nodes: BTreeSet<u16> = map
                    .primaries_on(m.node)
                    .map(|p| map.replicas(p).backups[0])
                    .collect();
                assert_eq!(backup_nodes.len(), 4, "node {}: {backup_nodes:?}", m.node);
            }
        }
    }

    #[test]
    fn placement_is_pinned() {
        // Every node computes the map itself, so a change to the algorithm is a change of
        // format: nodes of two versions would disagree. Update this only on purpose.
        let members = members_in(&["a", "a", "b", "b", "c"]);
        let map = PartitionMap::place(&members, 6, 3).unwrap();
        let got: Vec<(u16, Vec<u16>)> = map
            .iter()
            .map(|(_, r)| (r.primary, r.backups.clone()))
            .collect();
        // Three racks, three replicas: every partition has one replica in each rack, so
        // node 4, alone in rack c, holds a replica of every partition.
        assert_eq!(
            got,
            vec![
                (0, vec![2, 4]),
                (1, vec![3, 4]),
                (2, vec![1, 4]),
                (3, vec![0, 4]),
                (4, vec![0, 2]),
                (0, vec![3, 4]),
            ]
        );
    }

    #[test]
    fn uneven_domains_prefer_distinct_domains_over_balance() {
        // Node 0 is alone in its rack: it backs up every partition whose primary is in
        // the crowd, so that each partition survives the loss of either rack.
        let members = members_in(&["alone", "crowd", "crowd", "crowd"]);
        let map = PartitionMap::place(&members, 8, 2).unwrap();
        for (_, r) in map.iter() {
            assert!(r.primary == 0 || r.backups == [0], "{r:?}");
        }
        assert_eq!(map.backups_on(0).count(), 6);
    }

    #[test]
    fn shape_errors() {
        let members = members_in(&["a", "b"]);
        assert!(matches!(
            PartitionMap::place(&[], 4, 1),
            Err(ConfigError::NoMembers)
        ));
        assert!(matches!(
            PartitionMap::place(&members, 0, 1),
            Err(ConfigError::ZeroPartitions)
        ));
        assert!(matches!(
            PartitionMap::place(&members, crate::PARTITIONS_MAX + 1, 1),
            Err(ConfigError::TooManyPartitions { .. })
        ));
        assert!(matches!(
            PartitionMap::place(&members, 4, 0),
            Err(ConfigError::ZeroReplicas)
        ));
        assert!(matches!(
            PartitionMap::place(&members, 4, 3),
            Err(ConfigError::TooManyReplicas {
                replicas: 3,
                nodes: 2
            })
        ));
        assert!(matches!(
            PartitionMap::place(&[member(4, "a"), member(4, "b")], 4, 1),
            Err(ConfigError::DuplicateNode { node: 4 })
        ));
    }

    #[test]
    fn the_largest_cluster_places() {
        let members: Vec<Member> = (0..crate::MEMBERS_MAX)
            .map(|n| member(u16::try_from(n).unwrap(), &format!("rack-{}", n % 40)))
            .collect();
        let map = PartitionMap::place(&members, 4 * crate::MEMBERS_MAX as u32, 3).unwrap();
        check_placement(&members, 4 * crate::MEMBERS_MAX as u32, 3, &map);
    }

    proptest! {
        #[test]
        fn random_clusters_place_well(
            layout in proptest::collection::btree_map(any::<u16>(), 0u8..6, 1..12),
            replicas in 1u8..5,
            count in 1u32..200,
            rotate in 0usize..12,
        ) {
            let mut members: Vec<Member> = layout
                .iter()
                .map(|(&node, domain)| member(node, &format!("domain-{domain}")))
                .collect();
            let replicas = replicas.min(u8::try_from(members.len()).unwrap());
            let map = PartitionMap::place(&members, count, replicas).unwrap();
            check_placement(&members, count, replicas, &map);
            // The order members are listed in does not matter.
            let len = members.len();
            members.rotate_left(rotate % len);
            prop_assert_eq!(PartitionMap::place(&members, count, replicas).unwrap(), map);
        }
    }
}
