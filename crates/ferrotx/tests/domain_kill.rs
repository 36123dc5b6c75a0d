//! Whole failure domains killed at once under Redis load. Three failure domains (racks
//! `rack-0`, `rack-1`, `rack-2`) of two `ferrotx node` processes each (nodes 0 and 1 in
//! `rack-0`, 2 and 3 in `rack-1`, 4 and 5 in `rack-2`), three copies of every partition,
//! a short lease. Placement puts the three copies of each partition in three domains,
//! which the test checks first. Under a light write load (SETs of new keys and INCRs of
//! one counter, every acknowledged write recorded, over keys written first), both
//! processes of one domain are SIGKILLed at the same instant; each domain in turn: first
//! one without the CM, then the CM's, then the last one. After each kill the survivors
//! must remove the domain's nodes (a backup CM taking over when the CM died), keep
//! serving, and re-replicate to full strength (every partition three copies, none being
//! filled), each partition with copies in both surviving domains; then every acknowledged
//! write must read back through the survivors and every copy of every partition equal its
//! primary (`FERROTX COPIES`). Then the domain's nodes restart with `--join`; every
//! partition then has its three copies in the two surviving domains, and the CM must move
//! one copy of each back onto the returning domain (docs/recovery.md, "Moves"): the test
//! waits until the whole cluster is at full strength with every partition's copies in
//! three domains (within the status deadline), then the same read-back and copy checks,
//! before the next domain is killed. So no kill may leave a partition with a single copy:
//! checked on the placement before each kill and on the view that removes the domain.
//!
//! Every partition has a copy in the first domain killed, so every partition is filled
//! after that kill, and moved after the restart. After the third kill no node holds a copy
//! it held at the start: only data recovery kept the writes acknowledged before, and the
//! read-back sees it, while after the first two kills only the copy check can notice a
//! wrong fill (a copy from the start survives each of them and serves the reads).
//!
//! A second test kills only the CM's domain, with three nodes per domain: the CM and the
//! two members after it in node order are then all in it, and the backup CMs must be
//! chosen in other domains for anyone to take over.
//!
//! The tests run one at a time (as kill_under_load's). `KILL_TEST_SEED=N` picks which
//! domain without the CM is killed first; `KILL_TEST_KEEP=1` keeps the run's directory
//! (node logs, configuration) even when the test passes. A failing run always keeps it.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrotx_cluster::Configuration;
use serde_json::Value;

use common::copies::check_copies_equal;
use common::nodes::{Nodes, full_strength, one_cluster_at_a_time, settled_members};
use common::rolling::Rolling;
use common::test_ports;

/// The nodes' lease, as kill_under_load's: a killed node is removed within about two.
const LEASE_MS: u64 = 300;
const REPLICAS: u8 = 3;
/// Node `n` is in domain `DOMAINS[n / nodes per domain]`.
const DOMAINS: [&str; 3] = ["rack-0", "rack-1", "rack-2"];
/// Keys written before the load: what the survivors copy to their new backups.
const PRELOADED: u64 = 5_000;
/// Writers of the light load running at once.
const WRITERS: usize = 3;
/// Load before each kill and after each restart, at full strength.
const AT_FULL_STRENGTH: Duration = Duration::from_millis(500);
/// The default seed: which domain without the CM is killed first.
const SEED: u64 = 0x646f_6d61;

/// Which domain a kill takes.
#[derive(Clone, Copy)]
enum Kill {
    /// One without the CM, chosen by the seed.
    WithoutCm,
    /// The CM's.
    Cm,
    /// The first not killed yet.
    NotYetKilled,
}

/// The cluster: `DOMAINS.len()` domains of `per_domain` nodes each, in node order.
#[derive(Clone, Copy)]
struct Layout {
    per_domain: u16,
}

impl Layout {
    fn nodes(self) -> u16 {
        self.per_domain * DOMAINS.len() as u16
    }

    fn domain_of(self, node: u64) -> &'static str {
        DOMAINS[(node / u64::from(self.per_domain)) as usize]
    }

    fn nodes_of(self, domain: &str) -> Vec<u16> {
        (0..self.nodes())
            .filter(|&n| self.domain_of(u64::from(n)) == domain)
            .collect()
    }

    /// `Configuration::local`'s nodes (one worker thread, 4 partitions per node, three
    /// copies each) on the ports from test `test`'s first (three per node: 16 per test,
    /// so a cluster of more than five nodes takes the next tests' ports too), in the
    /// domains of `domain_of`.
    fn configuration(self, test: u16) -> Configuration {
        let config = Configuration::local(self.nodes(), REPLICAS, 1, 4, test_ports(test))
            .and_then(|c| c.with_failure_domains(|n| self.domain_of(u64::from(n)).to_owned()))
            .expect("configuration");
        let text = config.to_toml_string();
        assert!(text.contains("failure_domain = \"rack-2\""), "{text}");
        config
    }

    /// The partitions of status `s` whose copies are not in as many distinct domains as
    /// the live `domains` allow (one copy per domain, up to the copies a partition has),
    /// each with its copies and their domains.
    fn badly_placed(self, s: &Value, domains: usize) -> Vec<String> {
        copies(s)
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                let spread: BTreeSet<&str> = c.iter().map(|&n| self.domain_of(n)).collect();
                spread.len() < c.len().min(domains)
            })
            .map(|(p, c)| {
                let on: Vec<String> = c
                    .iter()
                    .map(|&n| format!("{n} ({})", self.domain_of(n)))
                    .collect();
                format!("partition {p} on {}", on.join(", "))
            })
            .collect()
    }
}

/// Each partition's copies in the status `s` (primary first).
fn copies(s: &Value) -> Vec<Vec<u64>> {
    serde_json::from_value(s["copies"].clone()).expect("copies")
}

/// Starts the cluster of `layout` on the ports from test `test`'s first, writes the
/// preloaded keys, and kills domains as `kills` says, each in turn under load and
/// restarted, checking after each kill and each restart what the file's documentation
/// says.
fn kill_domains(name: &str, test: u16, layout: Layout, kills: &[Kill]) {
    let _serial = one_cluster_at_a_time();
    let started = Instant::now();
    let seed = std::env::var("KILL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let mut nodes = Nodes::start_cluster(name, &layout.configuration(test), LEASE_MS);
    let addrs = nodes.addrs.clone();
    let all = usize::from(layout.nodes());

    // Placement: every partition's three copies in three domains.
    let s = nodes.wait_status("full strength at the start", |s| full_strength(s, all));
    let bad = layout.badly_placed(&s, DOMAINS.len());
    assert!(
        bad.is_empty(),
        "partitions with two copies in one domain at the start: {bad:#?}"
    );
    let partitions = copies(&s).len();

    let load = Rolling::preload(&addrs, PRELOADED);
    let formed_in = started.elapsed();
    // Each start of the load, new writers (a writer's number names its keys).
    let mut sessions = 0..;
    let mut writers = || {
        let session = sessions.next().unwrap();
        session * WRITERS..(session + 1) * WRITERS
    };

    let mut report = Vec::new();
    let mut killed: Vec<&str> = Vec::new();
    for (round, &kill) in (0u8..).zip(kills) {
        let s = nodes.wait_status("full strength before the kill", |s| full_strength(s, all));
        let running = load.start(writers());
        std::thread::sleep(AT_FULL_STRENGTH);
        let view = s["configuration"].as_u64().unwrap();
        let cm = s["cm"].as_u64().expect("a CM");
        let cm_domain = layout.domain_of(cm);
        let domain = match kill {
            Kill::WithoutCm => {
                let others: Vec<&str> = DOMAINS
                    .iter()
                    .copied()
                    .filter(|&d| d != cm_domain)
                    .collect();
                others[(seed % others.len() as u64) as usize]
            }
            Kill::Cm => cm_domain,
            Kill::NotYetKilled => DOMAINS
                .iter()
                .copied()
                .find(|d| !killed.contains(d))
                .expect("a domain not killed yet"),
        };
        killed.push(domain);
        let victims = layout.nodes_of(domain);
        // Partitions the kill would leave with a single copy (two of theirs in the
        // domain): none, once the moves after each restart are done.
        let placed = copies(&s);
        let single: Vec<&Vec<u64>> = placed
            .iter()
            .filter(|c| {
                c.iter()
                    .filter(|&&n| !victims.contains(&(n as u16)))
                    .count()
                    < 2
            })
            .collect();
        assert!(
            single.is_empty(),
            "killing {domain} would leave partitions with one copy: {single:?}"
        );
        let role = if domain == cm_domain {
            format!("the CM's, node {cm}")
        } else {
            format!("not the CM's: the CM, node {cm}, is in {cm_domain}")
        };

        // The domain's nodes at once, under load.
        load.round.store(2 * round + 1, Ordering::SeqCst);
        let killed_at = Instant::now();
        nodes.kill_together(&victims);
        let left = all - victims.len();
        let gone = |s: &Value| {
            s["configuration"].as_u64().is_some_and(|c| c > view)
                && settled_members(s).is_some_and(|m| {
                    m.len() == left && victims.iter().all(|&v| !m.contains(&u64::from(v)))
                })
        };
        let removed = nodes.wait_status("the killed domain's removal", gone);
        let detected = killed_at.elapsed();
        let thin: Vec<(usize, Vec<u64>)> = copies(&removed)
            .into_iter()
            .enumerate()
            .filter(|(_, c)| c.len() < 2)
            .collect();
        assert!(
            thin.is_empty(),
            "after {domain} was killed, partitions with fewer than two copies: {thin:?}"
        );
        let new_cm = removed["cm"].as_u64().expect("a CM");
        assert!(
            !victims.contains(&(new_cm as u16)),
            "node {new_cm}, killed, is still the CM: {removed}"
        );
        // Data recovery, still under load: back to three copies of every partition on
        // the survivors, in both surviving domains.
        let s = nodes.wait_status("full strength on the survivors", |s| {
            gone(s) && full_strength(s, left)
        });
        let refilled = killed_at.elapsed();
        load.stop(running);
        let bad = layout.badly_placed(&s, DOMAINS.len() - 1);
        assert!(
            bad.is_empty(),
            "after {domain} was killed, partitions without a copy in each surviving domain: \
             {bad:#?}"
        );
        let through: Vec<SocketAddr> = (0..layout.nodes())
            .filter(|n| !victims.contains(n))
            .map(|n| addrs[usize::from(n)])
            .collect();
        let read_back =
            load.check_read_back(&through, &format!("{domain} killed, through the survivors"));
        let equal = check_copies_equal(&mut nodes, left);
        report.push(format!(
            "kill {}: {domain} ({role}) nodes {victims:?} SIGKILLed at once at view {view}, \
             leaving every partition two copies or more; removed in {:.2} s (view {}, CM node \
             {new_cm}), back to {REPLICAS} copies of all {partitions} partitions on the {left} \
             survivors {:.2} s after the kill\n    {read_back}\n    copies: {equal}",
            round + 1,
            detected.as_secs_f64(),
            removed["configuration"],
            refilled.as_secs_f64(),
        ));

        // The domain back: its nodes restarted with --join, under load.
        load.round.store(2 * round + 2, Ordering::SeqCst);
        let running = load.start(writers());
        let after = s["configuration"].as_u64().unwrap();
        let restarted_at = Instant::now();
        for &v in &victims {
            nodes.start(v);
        }
        let admitted = nodes.wait_status("the restarted domain admitted", |s| {
            s["configuration"].as_u64().is_some_and(|c| c > after)
                && settled_members(s).is_some_and(|m| m.len() == all)
        });
        let admitted_in = restarted_at.elapsed();
        // A returning node holds nothing, and every partition has its copies already:
        // the CM moves one copy of each partition with two in one domain onto the
        // returning domain, a few at a time. Full strength (no fill left) with every
        // partition in three domains.
        let s = nodes.wait_status(
            "the restarted domain back at full strength, every partition in three domains",
            |s| full_strength(s, all) && layout.badly_placed(s, DOMAINS.len()).is_empty(),
        );
        let placed_in = restarted_at.elapsed();
        let bad = layout.badly_placed(&s, DOMAINS.len());
        assert!(
            bad.is_empty(),
            "after {domain} came back, partitions with two copies in one domain: {bad:#?}"
        );
        let moved: usize = copies(&s)
            .iter()
            .map(|c| c.iter().filter(|&&n| victims.contains(&(n as u16))).count())
            .sum();
        std::thread::sleep(AT_FULL_STRENGTH);
        load.stop(running);
        let read_back = load.check_read_back(&addrs, &format!("{domain} killed and restarted"));
        let equal = check_copies_equal(&mut nodes, all);
        report.push(format!(
            "restart {}: {domain} admitted in {:.2} s (view {}); {moved} copies moved onto it \
             and the cluster of {all} at full strength, every partition in {} domains, in \
             {:.2} s (view {})\n    {read_back}\n    copies: {equal}",
            round + 1,
            admitted_in.as_secs_f64(),
            admitted["configuration"],
            DOMAINS.len(),
            placed_in.as_secs_f64(),
            s["configuration"],
        ));
    }
    let exited = nodes.exited();
    assert!(exited.is_empty(), "node processes exited: {exited:?}");
    let per_round = load.acknowledged_per_round(1 + 2 * kills.len() as u8);
    println!(
        "{name}: {all} nodes in {} domains, {REPLICAS} copies, lease {LEASE_MS} ms, seed \
         {seed}, formed in {:.2} s\n  {}\n  SETs acknowledged before the kills, then after each \
         kill and each restart: {per_round:?}; {:.1} s in all",
        DOMAINS.len(),
        formed_in.as_secs_f64(),
        report.join("\n  "),
        started.elapsed().as_secs_f64()
    );
    assert!(
        per_round.iter().all(|&n| n > 0),
        "writes were not acknowledged in every round: {per_round:?}"
    );
}

/// Each domain of two nodes killed in turn: first one without the CM, then the CM's (the
/// CM dies with the member after it, a backup CM takes over), then the last.
#[test]
fn killing_each_failure_domain_whole_loses_no_acknowledged_write() {
    kill_domains(
        "domain-kill",
        0,
        Layout { per_domain: 2 },
        &[Kill::WithoutCm, Kill::Cm, Kill::NotYetKilled],
    );
}

/// The CM's domain of three nodes killed: the CM and the two members after it die
/// together. With the backup CMs taken as the two members after the CM, no one took over
/// and the survivors, a majority, stopped serving for good.
#[test]
fn killing_the_cms_domain_of_three_leaves_a_backup_cm() {
    kill_domains("domain-kill-cm", 2, Layout { per_domain: 3 }, &[Kill::Cm]);
}
