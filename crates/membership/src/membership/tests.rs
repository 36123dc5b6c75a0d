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
}

impl Harness {
    fn new(nodes: u16) -> Self {
        let config = Arc::new(Configuration::local(nodes, 3.min(nodes as u8), 1, 4, 9000).unwrap());
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
                    m.on_read(self.now, r);
                }
                Action::Cas { expected, next } => {
                    let r = self.coordination.compare_and_swap(expected, &next);
                    m.on_cas(self.now, r);
                }
                Action::Install(v) => m.installed(self.now, v.id),
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
            for m in self.nodes.iter().flatten() {
                next = next.min(m.next_timeout_ns());
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
                    m.on_message(self.now, message);
                    self.drain(to);
                }
            }
            for n in 0..self.nodes.len() as u16 {
                if let Some(m) = self.nodes[n as usize].as_mut() {
                    if m.next_timeout_ns() <= self.now {
                        m.tick(self.now);
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
    m.set_filled(h.now, &[partitions + 7]);
    m.set_filled(h.now, &half);
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
    m.set_filled(h.now, &all);
    h.drain(2);
    h.run_for(LEASE_NS);
    let full = h.coordination.current().unwrap();
    assert!(full.copies.iter().all(|c| c.len() == 3));
    assert!(full.filling.is_empty());
    h.run_for(5 * LEASE_NS);
    assert_eq!(h.coordination.current().unwrap().id, full.id);
    assert!(h.all_serving(&[0, 1, 2]));
}
