//! A small deterministic harness: nodes exchange messages with a fixed latency over cuttable
//! links and share an in-memory coordination service. After every event it checks that
//! every node that serves is in the latest committed view (so a removed node never serves
//! once a view without it is committed) and that views are stored with growing ids.

use super::*;
use ferrotx_cluster::{CoordinationService, MemoryCoordination};

const LEASE_NS: u64 = 10_000_000;
const LATENCY_NS: u64 = 100_000;

struct Harness {
    now: u64,
    config: Arc<Configuration>,
    nodes: Vec<Option<Membership>>,
    incarnations: Vec<u64>,
    coordination: MemoryCoordination,
    queue: Vec<(u64, u16, Message)>,
    cut: BTreeSet<(u16, u16)>,
    committed_max: u64,
    removed: BTreeSet<u16>,
    /// The next compare-and-swap answers "outcome unknown": `Some(true)` after storing
    /// the view, `Some(false)` without; `conflict_if_stored` answers a stored one with a
    /// conflict carrying it instead (a retried swap whose first attempt went in).
    cas_unknown: Option<bool>,
    conflict_if_stored: bool,
}

impl Harness {
    fn new(nodes: u16) -> Self {
        Self::with_replicas(nodes, 3.min(nodes as u8))
    }

    fn with_replicas(nodes: u16, replicas: u8) -> Self {
        let config = Arc::new(Configuration::local(nodes, replicas, 1, 4, 9000).unwrap());
        let mut h = Self {
            now: 1_000,
            config,
            nodes: Vec::new(),
            incarnations: vec![0; nodes as usize],
            coordination: MemoryCoordination::new(),
            queue: Vec::new(),
            cut: BTreeSet::new(),
            committed_max: 0,
            removed: BTreeSet::new(),
            cas_unknown: None,
            conflict_if_stored: false,
        };
        for n in 0..nodes {
            h.nodes.push(None);
            h.start(n);
        }
        h
    }

    fn options() -> Options {
        Options {
            lease_ns: LEASE_NS,
            ack_timeout_min_ns: 0,
            ..Options::default()
        }
    }

    fn start(&mut self, n: u16) {
        self.incarnations[n as usize] += 1;
        let m = Membership::new(
            n,
            self.incarnations[n as usize],
            self.config.clone(),
            Self::options(),
            self.now,
        );
        self.nodes[n as usize] = Some(m);
        self.removed.remove(&n);
        self.drain(n);
    }

    fn kill(&mut self, n: u16) {
        self.nodes[n as usize] = None;
    }

    fn drain(&mut self, n: u16) {
        loop {
            let Some(m) = self.nodes[n as usize].as_mut() else {
                return;
            };
            let Some(action) = m.poll_action() else {
                return;
            };
            match action {
                Action::Send { to, message } => {
                    if !self.cut.contains(&(n, to)) {
                        self.queue.push((self.now + LATENCY_NS, to, message));
                    }
                }
                Action::Read => {
                    let r = self.coordination.read();
                    m.handle_read(self.now, r);
                }
                Action::Cas { expected, next } => {
                    let r = match self.cas_unknown.take() {
                        None => self.coordination.compare_and_swap(expected, &next),
                        Some(store) => {
                            if store {
                                self.coordination.compare_and_swap(expected, &next).unwrap();
                            }
                            if store && self.conflict_if_stored {
                                Err(CoordinationError::Conflict(Some(Box::new(next))))
                            } else {
                                Err(CoordinationError::Unknown("timed out".into()))
                            }
                        }
                    };
                    m.handle_cas(self.now, r);
                }
                Action::Install(v) => m.handle_installed(self.now, v.id),
                Action::Commit(id) => {
                    assert!(
                        id >= self.committed_max,
                        "commit of {id} after {}",
                        self.committed_max
                    );
                    self.committed_max = id;
                }
                Action::Removed { .. } => {
                    self.removed.insert(n);
                }
            }
        }
    }

    fn check(&self) {
        for (n, m) in self.nodes.iter().enumerate() {
            let Some(m) = m else { continue };
            if m.serving_until() > self.now {
                let id = m.view().unwrap().id;
                assert_eq!(
                    id, self.committed_max,
                    "node {n} serves in view {id} while view {} is committed",
                    self.committed_max
                );
            }
        }
        let history = self.coordination.history();
        for w in history.windows(2) {
            assert!(w[1].id > w[0].id);
        }
    }

    fn run_for(&mut self, duration_ns: u64) {
        let end = self.now + duration_ns;
        while self.now < end {
            let mut next = end;
            for m in self.nodes.iter_mut().flatten() {
                next = next.min(m.poll_timeout());
            }
            for (at, _, _) in &self.queue {
                next = next.min(*at);
            }
            self.now = next.max(self.now);
            let due: Vec<(u64, u16, Message)>;
            (due, self.queue) = std::mem::take(&mut self.queue)
                .into_iter()
                .partition(|(at, _, _)| *at <= self.now);
            for (_, to, message) in due {
                if let Some(m) = self.nodes[to as usize].as_mut() {
                    m.handle_message(self.now, message);
                    self.drain(to);
                }
            }
            for n in 0..self.nodes.len() as u16 {
                if let Some(m) = self.nodes[n as usize].as_mut() {
                    if m.poll_timeout() <= self.now {
                        m.handle_timeout(self.now);
                    }
                    self.drain(n);
                }
            }
            self.check();
        }
    }

    fn node(&self, n: u16) -> &Membership {
        self.nodes[n as usize].as_ref().unwrap()
    }

    fn members_of_current(&self) -> Vec<u16> {
        self.coordination
            .current()
            .unwrap()
            .members
            .iter()
            .map(|m| m.node)
            .collect()
    }

    fn all_serving(&self, nodes: &[u16]) -> bool {
        nodes.iter().all(|&n| {
            let m = self.node(n);
            m.phase() == Phase::Member && m.serving_until() > self.now
        })
    }
}

#[test]
fn a_cluster_bootstraps_and_renews_without_expiring() {
    let mut h = Harness::new(3);
    h.run_for(20 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 1, 2]);
    assert!(h.all_serving(&[0, 1, 2]));
    for n in 0..3 {
        assert_eq!(h.node(n).stats().lease_expirations, 0, "node {n}");
    }
    assert!(h.node(1).stats().renewals > 50);
}

#[test]
fn a_killed_member_is_removed_and_its_partitions_promoted() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    let before = h.coordination.current().unwrap();
    h.kill(2);
    let killed_at = h.now;
    h.run_for(3 * LEASE_NS);
    let after = h.coordination.current().unwrap();
    assert_eq!(h.members_of_current(), vec![0, 1]);
    assert_eq!(after.id, before.id + 1);
    assert!(after.copies.iter().all(|c| c.len() == 2 && !c.contains(&2)));
    assert!(h.all_serving(&[0, 1]));
    assert!(h.committed_max == after.id);
    let _ = killed_at;
}

#[test]
fn a_killed_cm_is_replaced_by_a_backup() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    h.kill(0);
    h.run_for(5 * LEASE_NS);
    let v = h.coordination.current().unwrap();
    assert_eq!(h.members_of_current(), vec![1, 2]);
    assert_eq!(v.cm, 1);
    assert!(h.all_serving(&[1, 2]));
}

#[test]
fn a_restarted_node_joins_as_a_new_member_holding_nothing() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    h.kill(2);
    h.start(2);
    h.run_for(5 * LEASE_NS);
    let v = h.coordination.current().unwrap();
    assert_eq!(h.members_of_current(), vec![0, 1, 2]);
    assert!(v.is_member(2, h.incarnations[2]));
    assert!(v.copies.iter().all(|c| !c.contains(&2)));
    assert!(h.all_serving(&[0, 1, 2]));
}

#[test]
fn a_minority_partition_cannot_reconfigure_and_stops_serving() {
    let mut h = Harness::new(5);
    h.run_for(5 * LEASE_NS);
    // The CM (0) and node 1 on one side, 2, 3, 4 on the other.
    for a in [0u16, 1] {
        for b in [2u16, 3, 4] {
            h.cut.insert((a, b));
            h.cut.insert((b, a));
        }
    }
    h.run_for(6 * LEASE_NS);
    let v = h.coordination.current().unwrap();
    assert_eq!(h.members_of_current(), vec![2, 3, 4]);
    assert_eq!(v.cm, 2);
    assert!(h.all_serving(&[2, 3, 4]));
    assert!(h.node(0).serving_until() < h.now && h.node(1).serving_until() < h.now);
    // Healed: the old side learns it was removed.
    h.cut.clear();
    h.run_for(4 * LEASE_NS);
    assert!(h.removed.contains(&0) && h.removed.contains(&1));
}

#[test]
fn two_failures_in_a_row_on_five_nodes() {
    let mut h = Harness::new(5);
    h.run_for(5 * LEASE_NS);
    h.kill(4);
    h.run_for(4 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 1, 2, 3]);
    h.kill(0);
    h.run_for(6 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![1, 2, 3]);
    assert!(h.all_serving(&[1, 2, 3]));
    // A third failure leaves 2 of 3: still a majority of the view.
    h.kill(3);
    h.run_for(6 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![1, 2]);
}

#[test]
fn a_node_restarted_after_its_removal_is_admitted_promptly() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    h.kill(2);
    h.run_for(5 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 1]);
    h.start(2);
    // Admitted within a few renewals, not at the next expiry.
    h.run_for(LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 1, 2]);
    assert!(h.all_serving(&[0, 1, 2]));
}

#[test]
fn a_rejoined_node_fills_backups_that_count_once_it_reports_them() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    h.kill(2);
    h.start(2);
    h.run_for(5 * LEASE_NS);
    let v = h.coordination.current().unwrap();
    let partitions = v.copies.len() as u32;
    // Admitted holding nothing, with every partition to fill (the others hold 2 copies).
    assert!((0..partitions).all(|p| v.filling(p) == [2]));
    assert!(v.copies.iter().all(|c| c.len() == 2));
    // A report of partitions it does not fill, and of half of those it does: only the
    // half counts, and only after the CM's batching wait (a lease).
    let half: Vec<u32> = (0..partitions / 2).collect();
    let m = h.nodes[2].as_mut().unwrap();
    m.handle_filled(h.now, &[partitions + 7]);
    m.handle_filled(h.now, &half);
    h.drain(2);
    h.run_for(LEASE_NS / 2);
    assert_eq!(
        h.coordination.current().unwrap().id,
        v.id,
        "counted before the wait"
    );
    h.run_for(2 * LEASE_NS);
    let w = h.coordination.current().unwrap();
    assert!(w.id > v.id);
    for p in 0..partitions {
        if half.contains(&p) {
            assert_eq!(w.copies[p as usize].len(), 3, "partition {p}");
            assert_eq!(w.copies[p as usize].last(), Some(&2));
            assert!(w.filling(p).is_empty());
        } else {
            assert_eq!(w.copies[p as usize].len(), 2, "partition {p}");
            assert_eq!(w.filling(p), [2]);
        }
    }
    // The rest reported: every partition back to 3 copies, nothing filling, and no
    // further view change after that.
    let all: Vec<u32> = (0..partitions).collect();
    let m = h.nodes[2].as_mut().unwrap();
    m.handle_filled(h.now, &all);
    h.drain(2);
    h.run_for(LEASE_NS);
    let full = h.coordination.current().unwrap();
    assert!(full.copies.iter().all(|c| c.len() == 3));
    assert!(full.filling.is_empty());
    h.run_for(5 * LEASE_NS);
    assert_eq!(h.coordination.current().unwrap().id, full.id);
    assert!(h.all_serving(&[0, 1, 2]));
}

impl Harness {
    /// Node `n`'s host sets its memory figures.
    fn set_memory(&mut self, n: u16, used: u64, limit: u64) {
        self.nodes[n as usize]
            .as_mut()
            .unwrap()
            .set_memory(used, limit);
    }

    /// The fills of the current view, as (partition, node).
    fn fills(&self) -> Vec<(u32, u16)> {
        self.coordination.current().unwrap().fills().collect()
    }
}

/// Five nodes (3 replicas), `full` reporting figures with no room for another copy (none
/// if `None`), then node `killed` fails: the view that removes it, with its fills.
fn five_nodes_one_full_one_killed(full: Option<u16>, killed: u16) -> (Harness, View, View) {
    let mut h = Harness::new(5);
    h.run_for(5 * LEASE_NS);
    if let Some(full) = full {
        // A limit of 1000 bytes and 995 used: one more copy of the average (995 / 6
        // copies) would pass it.
        h.set_memory(full, 995, 1000);
    }
    h.run_for(LEASE_NS);
    let before = h.coordination.current().unwrap();
    h.kill(killed);
    h.run_for(6 * LEASE_NS);
    let after = h.coordination.current().unwrap();
    assert!(!after.members.iter().any(|m| m.node == killed));
    assert!(h.all_serving(&after.members.iter().map(|m| m.node).collect::<Vec<_>>()));
    (h, before, after)
}

/// Every partition `killed` held is short in `after`: each has one fill, on no node of
/// `full`.
fn filled_elsewhere(before: &View, after: &View, killed: u16, full: u16) {
    for (p, copies) in before.copies.iter().enumerate() {
        let p = p as u32;
        assert!(
            !after.filling(p).contains(&full),
            "partition {p}: {after:?}"
        );
        if copies.contains(&killed) {
            assert_eq!(after.filling(p).len(), 1, "partition {p}: {after:?}");
        } else {
            assert!(after.filling(p).is_empty(), "partition {p}");
        }
        // No new copy on the full node either.
        assert_eq!(
            after.copies[p as usize].contains(&full),
            copies.contains(&full),
            "partition {p}"
        );
    }
}

#[test]
fn a_full_member_is_given_no_fill_in_the_next_view() {
    // Without figures, node 3 takes some of node 4's partitions: the test bites.
    let (_, _, after) = five_nodes_one_full_one_killed(None, 4);
    assert!(after.fills().any(|(_, n)| n == 3), "{after:?}");
    // With them, none, and the CM holds what 3's lease requests carried.
    let (h, before, after) = five_nodes_one_full_one_killed(Some(3), 4);
    assert_eq!(h.node(0).memory_of(3), Some((1, 995, 1000)));
    assert_eq!(h.node(0).memory_of(1), Some((1, 0, 0)));
    filled_elsewhere(&before, &after, 4, 3);
    assert!(!h.fills().is_empty());
}

#[test]
fn a_full_cm_gives_itself_no_fill() {
    let (_, _, after) = five_nodes_one_full_one_killed(None, 4);
    assert!(after.fills().any(|(_, n)| n == 0), "{after:?}");
    let (_, before, after) = five_nodes_one_full_one_killed(Some(0), 4);
    assert_eq!(after.cm, 0);
    filled_elsewhere(&before, &after, 4, 0);
}

#[test]
fn a_backup_cm_taking_over_learns_the_figures_from_the_probe() {
    // The CM (0) fails: node 1 takes over having had no lease request; the members'
    // probe replies carry their figures.
    let (_, _, after) = five_nodes_one_full_one_killed(None, 0);
    assert!(after.fills().any(|(_, n)| n == 2), "{after:?}");
    let (h, before, after) = five_nodes_one_full_one_killed(Some(2), 0);
    assert_eq!(after.cm, 1);
    assert_eq!(h.node(1).memory_of(2).map(|f| f.1), Some(995));
    filled_elsewhere(&before, &after, 0, 2);
}

/// Five nodes, 0 to 3 full, then node 4 killed: the view without it, which leaves
/// partitions short (no member has room for a fill).
fn four_full_and_the_fifth_killed() -> (Harness, View) {
    let mut h = Harness::new(5);
    h.run_for(5 * LEASE_NS);
    for n in 0..4 {
        h.set_memory(n, 10_000, 1);
    }
    h.run_for(LEASE_NS);
    h.kill(4);
    h.run_for(6 * LEASE_NS);
    let v = h.coordination.current().unwrap();
    assert_eq!(h.members_of_current(), vec![0, 1, 2, 3]);
    assert!(v.filling.iter().all(Vec::is_empty), "{v:?}");
    assert!(v.short_and_lost(3).0 > 0);
    (h, v)
}

#[test]
fn every_member_full_leaves_partitions_short_until_one_has_room() {
    let (mut h, _) = four_full_and_the_fifth_killed();
    // Node 2 has room again (its limit lifted): the next view (a reconfiguration, here
    // node 3 failing too) fills there, and only there.
    h.set_memory(2, 10, 0);
    h.run_for(LEASE_NS);
    h.kill(3);
    h.run_for(6 * LEASE_NS);
    let w = h.coordination.current().unwrap();
    assert_eq!(h.members_of_current(), vec![0, 1, 2]);
    assert!(w.fills().all(|(_, n)| n == 2), "{w:?}");
    assert!(w.fills().any(|(_, n)| n == 2), "{w:?}");
}

#[test]
fn every_member_learns_from_its_lease_grants_which_members_are_past_their_limits() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    assert!((0..3).all(|n| h.node(n).members_over().is_empty()));
    // Node 2 past its limit, node 1 at it (not past: Redis's test is "used > maxmemory").
    h.set_memory(2, 2_000, 1_000);
    h.set_memory(1, 1_000, 1_000);
    h.run_for(3 * LEASE_NS);
    for n in 0..3 {
        assert_eq!(h.node(n).members_over(), vec![2], "node {n}");
    }
    h.set_memory(2, 10, 1_000);
    h.run_for(3 * LEASE_NS);
    assert!((0..3).all(|n| h.node(n).members_over().is_empty()));
}

#[test]
fn room_made_on_a_member_fills_a_short_partition_without_another_failure() {
    let (mut h, v) = four_full_and_the_fifth_killed();
    // Nothing changes while every member stays full.
    h.run_for(4 * LEASE_NS);
    assert_eq!(h.coordination.current().unwrap().id, v.id);
    // Node 2 frees memory (deletes reclaimed, or its limit raised): within a few leases,
    // and with no other member failing, a view fills the short partitions there.
    h.set_memory(2, 10, 0);
    h.run_for(4 * LEASE_NS);
    let w = h.coordination.current().unwrap();
    assert!(w.id > v.id, "no new view");
    assert_eq!(h.members_of_current(), vec![0, 1, 2, 3]);
    assert!(w.fills().any(|(_, n)| n == 2), "{w:?}");
    assert!(w.fills().all(|(_, n)| n == 2), "{w:?}");
}

#[test]
fn figures_of_a_member_that_left_are_forgotten() {
    // Node 3 full, then it fails: the view without it forgets its figures.
    let (h, _, after) = five_nodes_one_full_one_killed(Some(3), 3);
    assert_eq!(after.cm, 0);
    assert_eq!(h.node(0).memory_of(3), None);
    assert!(h.node(0).memory_of(1).is_some());
}

#[test]
fn a_new_life_is_not_held_to_its_earlier_life_s_figures() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    h.set_memory(2, 995, 1000);
    h.run_for(LEASE_NS);
    assert_eq!(h.node(0).memory_of(2), Some((1, 995, 1000)));
    // A new life of node 2 (no figures yet): admitted holding nothing, it is given
    // every partition to fill, as without limits.
    h.kill(2);
    h.start(2);
    h.run_for(5 * LEASE_NS);
    let v = h.coordination.current().unwrap();
    assert!(v.is_member(2, 2));
    assert!(
        (0..v.copies.len() as u32).all(|p| v.filling(p) == [2]),
        "{v:?}"
    );
    assert!(h.node(0).memory_of(2).is_none_or(|(life, _, _)| life == 2));
}

/// Keys for the tests of sealed lease datagrams.
fn test_auth(material: u8) -> Auth {
    use ferrotx_wire::auth::{ClusterId, KEY_BYTES, Key, Keys};
    Auth::new(
        Keys::one(Key::from_material(&[material; KEY_BYTES])),
        ClusterId([3; 16]),
        [material; 16],
    )
}

/// A NEW-CONFIG that removes node 1, from the CM, with the next view id.
fn forged_removal(h: &Harness) -> Message {
    let mut view = h.coordination.current().unwrap();
    view.id += 1;
    view.members.retain(|m| m.node != 1);
    for copies in &mut view.copies {
        copies.retain(|&n| n != 1);
    }
    Message {
        from: view.cm,
        incarnation: h.incarnations[view.cm as usize],
        view: view.id,
        seq: 1,
        body: Body::NewConfig(view),
    }
}

#[test]
fn lease_datagrams_without_the_key_change_nothing() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    let before = h.coordination.current().unwrap();
    let forged = forged_removal(&h);
    let join = Message {
        from: 1,
        incarnation: h.incarnations[1] + 1,
        view: before.id,
        seq: 1,
        body: Body::Join,
    };
    let filled = Message {
        from: 2,
        incarnation: h.incarnations[2],
        view: before.id,
        seq: 1,
        body: Body::Filled {
            partitions: vec![0, 1],
        },
    };
    let now = h.now;
    for n in 0..3u16 {
        let m = h.nodes[n as usize].as_mut().unwrap();
        m.set_auth(Some(test_auth(1)));
        for message in [&forged, &join, &filled] {
            // Unsealed, sealed under another key, and sealed then altered.
            let mut plain = Vec::new();
            message.encode(&mut plain);
            m.handle_datagram(now, &mut plain.to_vec());
            let mut other = Vec::new();
            Membership::new(n, 99, h.config.clone(), Harness::options(), now).encode_with(
                test_auth(2),
                n,
                message,
                &mut other,
            );
            m.handle_datagram(now, &mut other.to_vec());
            let mut flipped = Vec::new();
            Membership::new(n, 99, h.config.clone(), Harness::options(), now).encode_with(
                test_auth(1),
                n,
                message,
                &mut flipped,
            );
            flipped[5] ^= 1;
            m.handle_datagram(now, &mut flipped.to_vec());
        }
        let stats = m.stats();
        assert_eq!(stats.auth_refused.iter().sum::<u64>(), 9, "node {n}");
        assert_eq!(stats.auth_refused[Refusal::UnknownKey.index()], 3);
        assert_eq!(stats.auth_refused[Refusal::BadMac.index()], 3);
        h.drain(n);
    }
    h.run_for(5 * LEASE_NS);
    assert_eq!(h.coordination.current().unwrap(), before, "no new view");
    assert!(h.all_serving(&[0, 1, 2]));
    assert!(h.removed.is_empty());
}

#[test]
fn a_sealed_lease_datagram_is_taken_once() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    let forged = forged_removal(&h);
    let cm = forged.from;
    let now = h.now;
    let mut sealed = Vec::new();
    h.nodes[cm as usize]
        .as_mut()
        .unwrap()
        .encode_with(test_auth(1), 1, &forged, &mut sealed);
    let m = h.nodes[1].as_mut().unwrap();
    m.set_auth(Some(test_auth(1)));
    // The control: with the key, the removal is taken (so the test above could fail).
    m.handle_datagram(now, &mut sealed.to_vec());
    assert_eq!(m.view().unwrap().id, forged.view, "adopted with the key");
    m.handle_datagram(now, &mut sealed.to_vec());
    assert_eq!(m.stats().auth_refused[Refusal::Replay.index()], 1);
    // Sealed for node 1, it is refused by node 2 even the first time.
    let m2 = h.nodes[2].as_mut().unwrap();
    m2.set_auth(Some(test_auth(1)));
    m2.handle_datagram(now, &mut sealed.to_vec());
    assert_eq!(m2.stats().auth_refused[Refusal::OtherReceiver.index()], 1);
    assert_ne!(m2.view().unwrap().id, forged.view);
}

/// Lease datagrams are numbered per receiver: each receiver sees consecutive numbers,
/// so its replay window of 128 measures reordering only, however many members a CM
/// writes to between two datagrams to it (review of issue 29: one counter for all
/// receivers put a CM's datagrams to one member of a 40-node cluster over 128 apart).
#[test]
fn lease_sequence_numbers_are_counted_per_receiver() {
    use ferrotx_wire::auth::TAG_BYTES;
    let h = Harness::new(3);
    let mut m = Membership::new(0, 7, h.config.clone(), Harness::options(), 0);
    m.set_auth(Some(test_auth(1)));
    let probe = Message {
        from: 0,
        incarnation: 7,
        view: 0,
        seq: 1,
        body: Body::Probe,
    };
    let mut seqs = Vec::new();
    for to in [1u16, 2, 2, 1, 2] {
        let mut out = Vec::new();
        m.encode(to, &probe, &mut out);
        let at = out.len() - TAG_BYTES - 8;
        seqs.push(u64::from_le_bytes(out[at..at + 8].try_into().unwrap()));
    }
    assert_eq!(seqs, [1, 1, 2, 2, 3]);
}

#[test]
fn a_new_config_the_cm_could_never_make_is_refused() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    let before = h.coordination.current().unwrap();
    let mut twice = forged_removal(&h);
    if let Body::NewConfig(view) = &mut twice.body {
        // Node 1 back, listed twice (found by the membership fuzz target: backup_cms
        // panicked on it).
        let one = *before.members.iter().find(|m| m.node == 1).unwrap();
        view.members.push(one);
        view.members.push(one);
    }
    let now = h.now;
    for n in 0..3u16 {
        h.nodes[n as usize]
            .as_mut()
            .unwrap()
            .handle_message(now, twice.clone());
        h.drain(n);
        assert_eq!(h.node(n).view().unwrap().id, before.id, "node {n} took it");
    }
    h.run_for(5 * LEASE_NS);
    assert_eq!(h.coordination.current().unwrap(), before);
    assert!(h.all_serving(&[0, 1, 2]));
}

/// Cuts node `n` off from every other node, both ways.
fn isolate(h: &mut Harness, n: u16) {
    for o in 0..h.nodes.len() as u16 {
        if o != n {
            h.cut.insert((n, o));
            h.cut.insert((o, n));
        }
    }
}

/// Whether some stored view dropped a member of the view before it while that member's
/// node was never struck (`struck`).
fn removed_healthy(h: &Harness, struck: &[u16]) -> Vec<(u16, u64)> {
    let history = h.coordination.history();
    let mut found = Vec::new();
    for w in history.windows(2) {
        for m in &w[0].members {
            if !w[1].is_member(m.node, m.incarnation) && !struck.contains(&m.node) {
                found.push((m.node, w[1].id));
            }
        }
    }
    found
}

#[test]
fn a_cm_cut_off_from_everyone_removes_no_one() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    isolate(&mut h, 0);
    h.run_for(10 * LEASE_NS);
    // The cut-off CM made no view; a backup CM on the majority side took over.
    for v in h.coordination.history() {
        assert!(
            v.cm != 0
                || v.members.iter().any(|m| m.node == 1) && v.members.iter().any(|m| m.node == 2),
            "the cut-off CM made view {v:?}"
        );
    }
    assert_eq!(h.members_of_current(), vec![1, 2]);
    assert!(h.all_serving(&[1, 2]));
    // Healed: the old CM learns it was removed, and its next life is admitted.
    h.cut.clear();
    h.run_for(4 * LEASE_NS);
    assert!(h.removed.contains(&0));
    h.start(0);
    h.run_for(4 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 1, 2]);
    assert!(h.all_serving(&[0, 1, 2]));
}

#[test]
fn a_member_whose_lease_runs_is_not_removed_for_a_missed_probe() {
    // A joiner makes the CM probe while node 2 is cut off for less than a lease: its
    // lease at the CM still runs, so it stays (and the joiner is admitted).
    let mut h = Harness::new(4);
    h.run_for(5 * LEASE_NS);
    h.kill(3);
    h.run_for(5 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 1, 2]);
    h.start(3);
    isolate(&mut h, 2);
    h.run_for(LEASE_NS / 2);
    h.cut.clear();
    h.run_for(6 * LEASE_NS);
    assert_eq!(removed_healthy(&h, &[3]), vec![]);
    assert_eq!(h.members_of_current(), vec![0, 1, 2, 3]);
    assert!(h.all_serving(&[0, 1, 2, 3]));
}

#[test]
fn a_suspect_that_answers_the_probe_stays() {
    // Node 2 is cut off for a little over a lease: the CM suspects it, but the cut
    // heals while the probe still runs, and it answers a resent probe.
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    isolate(&mut h, 2);
    let suspicions = h.node(0).stats().suspicions;
    h.run_for(LEASE_NS + LEASE_NS / 50);
    h.cut.clear();
    h.run_for(5 * LEASE_NS);
    assert!(
        h.node(0).stats().suspicions > suspicions,
        "the CM suspected node 2"
    );
    assert_eq!(h.members_of_current(), vec![0, 1, 2]);
    assert_eq!(h.coordination.history().len(), 1, "no view after the first");
    assert!(h.all_serving(&[0, 1, 2]));
}

#[test]
fn a_view_whose_other_life_crashed_for_good_converges_with_a_new_life() {
    // Sim seed 7 without the restart: node 1 is removed (cut off), then node 2 crashes
    // and never comes back. The view [0, 2] has no majority left, but node 0 and node
    // 1's new life are a majority of the file, and node 0 is the CM of its committed
    // view: it goes on.
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    isolate(&mut h, 1);
    h.run_for(4 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 2]);
    h.kill(2);
    h.cut.clear();
    h.run_for(3 * LEASE_NS);
    assert!(h.removed.contains(&1));
    h.start(1);
    h.run_for(10 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 1]);
    assert!(h.all_serving(&[0, 1]));
    let v = h.coordination.current().unwrap();
    assert_eq!(v.lost(), 0, "node 0 held every partition");
}

#[test]
fn a_cut_off_last_holder_is_suspended_then_readmitted_with_its_copies() {
    // One copy per partition: node 2, cut off, holds the only copies of its partitions.
    let mut h = Harness::with_replicas(3, 1);
    h.run_for(5 * LEASE_NS);
    let before = h.coordination.current().unwrap();
    let held: Vec<u32> = (0..before.copies.len() as u32)
        .filter(|&p| before.primary(p) == 2)
        .collect();
    assert!(!held.is_empty());
    isolate(&mut h, 2);
    h.run_for(5 * LEASE_NS);
    let v = h.coordination.current().unwrap();
    assert_eq!(h.members_of_current(), vec![0, 1]);
    assert!(v.is_suspended(2, h.incarnations[2]), "{v:?}");
    assert_eq!((v.unavailable(), v.lost()), (held.len(), 0));
    for &p in &held {
        assert_eq!(v.suspended_copies(p), &[2]);
    }
    assert_eq!(h.node(2).phase(), Phase::Suspended);
    assert!(!h.removed.contains(&2));
    // Healed: the same life is readmitted, serving its copies, nothing refilled.
    h.cut.clear();
    h.run_for(5 * LEASE_NS);
    let back = h.coordination.current().unwrap();
    assert!(back.is_member(2, h.incarnations[2]));
    assert!(back.suspended.is_empty());
    for &p in &held {
        assert_eq!(back.copies[p as usize], vec![2]);
    }
    assert!(back.fills().next().is_none());
    assert!(h.all_serving(&[0, 1, 2]));
}

#[test]
fn an_operator_forgets_a_suspended_node_and_the_cluster_commits_it() {
    let mut h = Harness::with_replicas(3, 1);
    h.run_for(5 * LEASE_NS);
    isolate(&mut h, 2);
    h.run_for(5 * LEASE_NS);
    h.kill(2);
    let v = h.coordination.current().unwrap();
    let held = v.unavailable();
    assert!(held > 0);
    // `ferrotx cluster forget`: the next view, stored by compare-and-swap, then a datagram
    // naming it.
    let life = v.suspended[0];
    let next = v.forgetting(&[life].into_iter().collect());
    h.coordination.compare_and_swap(Some(v.id), &next).unwrap();
    for n in [0u16, 1] {
        let now = h.now;
        h.nodes[n as usize]
            .as_mut()
            .unwrap()
            .handle_newer_config(now, next.id);
        h.drain(n);
    }
    h.run_for(5 * LEASE_NS);
    let after = h.coordination.current().unwrap();
    assert!(after.id >= next.id);
    assert!(after.suspended.is_empty());
    assert_eq!((after.unavailable(), after.lost()), (0, held));
    assert!(h.all_serving(&[0, 1]));
    assert_eq!(h.committed_max, after.id);
}

/// Issue 31: a swap whose outcome is unknown (it timed out) and that went in. The CM reads
/// the service, finds its view, and goes on as its CM: NEW-CONFIG, acks, commit.
/// (Before, it adopted its own view as a follower and never sent NEW-CONFIG.)
#[test]
fn a_swap_that_went_in_with_its_outcome_unknown_is_carried_on_by_its_cm() {
    for conflict in [false, true] {
        let mut h = Harness::new(3);
        h.run_for(5 * LEASE_NS);
        assert!(h.all_serving(&[0, 1, 2]));
        let before = h.coordination.current().unwrap().id;
        h.cas_unknown = Some(true);
        h.conflict_if_stored = conflict;
        h.kill(2);
        h.run_for(10 * LEASE_NS);
        assert_eq!(h.cas_unknown, None, "a swap was made");
        let current = h.coordination.current().unwrap();
        assert_eq!(
            current.id,
            before + 1,
            "no other view after it: {current:?}"
        );
        assert_eq!(h.members_of_current(), vec![0, 1]);
        assert_eq!(h.committed_max, current.id, "the view is committed");
        assert!(h.all_serving(&[0, 1]));
        let cm = h.node(current.cm).stats();
        assert_eq!(
            cm.swaps_unknown,
            u64::from(!conflict),
            "conflict answer {conflict}"
        );
        assert_eq!(cm.swaps_lost, 0, "conflict answer {conflict}");
    }
}

/// The same swap, not stored: the CM reads the old view, and the next round swaps again.
#[test]
fn a_swap_that_did_not_go_in_with_its_outcome_unknown_is_made_again() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    let before = h.coordination.current().unwrap().id;
    h.cas_unknown = Some(false);
    h.kill(2);
    h.run_for(10 * LEASE_NS);
    let current = h.coordination.current().unwrap();
    assert_eq!(current.id, before + 1);
    assert_eq!(h.members_of_current(), vec![0, 1]);
    assert_eq!(h.committed_max, current.id);
    assert!(h.all_serving(&[0, 1]));
    let cm = h.node(current.cm).stats();
    assert_eq!((cm.swaps_unknown, cm.swaps_lost), (1, 1));
}

/// Issue 31: a store that goes back (restored from an old copy). The nodes report it and
/// store nothing over it; leases go on, so the cluster serves; once the store holds the
/// cluster's view again, it reconfigures as before.
#[test]
fn a_store_that_went_back_is_reported_and_never_swapped_against() {
    let mut h = Harness::new(3);
    h.run_for(5 * LEASE_NS);
    let old = h.coordination.current();
    h.kill(2);
    h.run_for(10 * LEASE_NS);
    let current = h.coordination.current().unwrap();
    assert_eq!(h.members_of_current(), vec![0, 1]);
    let stored = h.coordination.history().len();
    h.restore_store(old.clone());
    h.start(2);
    h.run_for(20 * LEASE_NS);
    assert_eq!(
        h.coordination.history().len(),
        stored,
        "nothing stored over it"
    );
    assert!(h.all_serving(&[0, 1]), "leases go on");
    let cm = h.node(current.cm);
    assert!(cm.stats().store_went_back >= 1, "{:?}", cm.stats());
    assert_eq!(cm.store_behind(), old.as_ref().map(|v| v.id));
    // The operator puts the right copy back: node 2's new life is admitted.
    h.restore_store(Some(current));
    h.run_for(20 * LEASE_NS);
    assert_eq!(h.members_of_current(), vec![0, 1, 2]);
    assert!(h.all_serving(&[0, 1, 2]));
    assert_eq!(h.node(0).store_behind(), None);
}

impl Harness {
    fn restore_store(&mut self, view: Option<View>) {
        self.coordination.restore(view);
    }
}
