//! Scenarios that attack transaction-state recovery (`ferrotx sim --workload
//! recovery-...`, all of them with `--workload recovery`): a node fails exactly at a
//! boundary of the commit protocol, with membership on, under a writing workload.
//!
//! The simulator steps one worker at a time, so a trap armed at a fault point of the
//! commit protocol (`ferrotx_buggify::arm_trap`) tells which worker reached it; right
//! after that worker's step the simulator crashes, pauses past the lease, or cuts off its
//! node ([`crate::cluster::Attack`]). At a coordinator's delay point the trap makes the
//! point fire, so the coroutine stops right there and nothing of the next phase leaves
//! before the fault. At a participant's point (a primary handling LOCK or VALIDATE) the
//! point behaves as usual and the node fails once its step, answer included, is done.
//!
//! The workload is drawn from the seed (`seed % 7` over the writing workloads), the point
//! and its visit (over every worker) from the seed, and so are restarts (a new life
//! holding no data). Every scenario stays within f = 2 of 3 replicas: one failure on 3
//! nodes, two on 5.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::{Attack, SimCluster, TrapAction};
use crate::faults::{FaultEvent, FaultKind, FaultPlan};
use crate::membership::default_options;
use crate::run::{Checked, RunOptions, RunReport, Scenario};
use crate::scenarios;

/// Every recovery scenario, in the order `--workload recovery` runs them.
pub const NAMES: [&str; 13] = [
    "recovery-crash-coordinator",
    "recovery-crash-primary",
    "recovery-crash-backup",
    "recovery-pause",
    "recovery-partition",
    "recovery-crash-during-recovery",
    "recovery-two-crashes",
    "recovery-crash-filler",
    "recovery-crash-during-fill",
    "recovery-isolate-filler",
    "recovery-sever-filler",
    "recovery-domain",
    "recovery-full-node",
];

/// What `recovery-domain`'s detail line says of its attack.
const DOMAIN_FAILS: &str = "whole failure domain crashes:";

/// What `recovery-full-node`'s detail line says of its attack.
const FULL_NODE: &str = "memory limit of 1 byte (always full):";

/// The fault point of data recovery: a node filling a new backup applied a FETCH.
pub const REFILL_POINT: &str = "txn.refill.after_fetch";

/// The workloads the recovery scenarios run (every one writes), by `seed % 7`.
pub const WORKLOADS: [&str; 7] = [
    "bank",
    "kv",
    "list-append",
    "smallbank",
    "tatp",
    "resp-bank",
    "resp-list-append",
];

/// The coordinator's delay points of the commit, in protocol order: a trap there stops
/// the coroutine right at the boundary (forced), so the fault falls between two phases.
pub const COORDINATOR_POINTS: [&str; 7] = [
    "txn.commit.before_lock",
    "txn.commit.after_lock",
    "txn.commit.after_validate",
    "txn.commit.after_commit_backup",
    "txn.commit.between_commit_primaries",
    "txn.commit.before_truncate",
    "txn.commit.before_release",
];

/// A primary's points: it handles a LOCK (of a partition the transaction writes) or a
/// VALIDATE. The trap does not force them (they would refuse).
pub const PARTICIPANT_POINTS: [&str; 2] = [
    "txn.participant.lock.refuse",
    "txn.participant.validate.refuse",
];

/// Whether `name` is a recovery scenario.
pub fn is_recovery(name: &str) -> bool {
    NAMES.contains(&name)
}

fn canonical(name: &str) -> &'static str {
    NAMES
        .into_iter()
        .find(|n| *n == name)
        .unwrap_or_else(|| panic!("no recovery scenario {name:?}; they are {NAMES:?}"))
}

/// The workload of scenario runs with `seed`.
pub fn workload_of(seed: u64) -> &'static str {
    WORKLOADS[(seed % WORKLOADS.len() as u64) as usize]
}

/// A workload scenario reported under the recovery scenario's name.
struct Named {
    name: &'static str,
    inner: Box<dyn Scenario>,
}

impl Scenario for Named {
    fn name(&self) -> &'static str {
        self.name
    }
    fn schema(&self) -> Vec<ferrotx_store::TableSpec> {
        self.inner.schema()
    }
    fn load(&self, cluster: &SimCluster) {
        self.inner.load(cluster);
    }
    fn start_clients(&mut self, cluster: &mut SimCluster, seed: u64) {
        self.inner.start_clients(cluster, seed);
    }
    fn check(&self, cluster: &SimCluster) -> Checked {
        self.inner.check(cluster)
    }
}

/// Scenario `name` for `seed`: the seed's workload under the scenario's name.
///
/// # Panics
///
/// If `name` is not one of [`NAMES`].
pub fn scenario(name: &str, seed: u64) -> Box<dyn Scenario> {
    Box::new(Named {
        name: canonical(name),
        inner: scenarios::scenario(workload_of(seed)),
    })
}

/// The run options of scenario `name` for `seed`: membership on, its nodes, light
/// network faults, and the attack.
///
/// # Panics
///
/// If `name` is not one of [`NAMES`].
pub fn options(name: &str, seed: u64) -> RunOptions {
    let name = canonical(name);
    let membership = default_options();
    let lease = membership.lease_ns;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7ec0_7e57);
    if name == "recovery-domain" {
        return domain_options(seed);
    }
    if name == "recovery-full-node" {
        return full_node_options(seed);
    }
    let nodes: u16 = match name {
        "recovery-crash-during-recovery"
        | "recovery-two-crashes"
        | "recovery-crash-during-fill" => 5,
        "recovery-isolate-filler" | "recovery-sever-filler" => 4,
        _ => 3,
    };
    let plan = light_plan(seed, nodes);
    let restart = |rng: &mut ChaCha8Rng| {
        rng.random_bool(0.5)
            .then(|| rng.random_range(lease..=6 * lease))
    };
    let coordinator_point = |rng: &mut ChaCha8Rng| {
        let point = COORDINATOR_POINTS[rng.random_range(0..COORDINATOR_POINTS.len())];
        let visit = match point {
            // Reached only by transactions writing several primaries, or aborting.
            "txn.commit.between_commit_primaries" | "txn.commit.before_release" => {
                rng.random_range(1..=6)
            }
            _ => rng.random_range(1..=24),
        };
        (point, visit, true)
    };
    let participant_point = |rng: &mut ChaCha8Rng| {
        let point = if rng.random_bool(0.75) {
            PARTICIPANT_POINTS[0]
        } else {
            PARTICIPANT_POINTS[1]
        };
        (point, rng.random_range(1..=24), false)
    };
    let any_point = |rng: &mut ChaCha8Rng| {
        if rng.random_bool(0.75) {
            coordinator_point(rng)
        } else {
            participant_point(rng)
        }
    };
    let attack = |(point, visit, force): (&'static str, u64, bool), action| Attack {
        point,
        visit,
        force,
        action,
        then_after_commit: None,
        then: None,
    };
    let attack = match name {
        "recovery-crash-coordinator" => {
            let at = coordinator_point(&mut rng);
            let restart_after_ns = restart(&mut rng);
            attack(at, TrapAction::Crash { restart_after_ns })
        }
        "recovery-crash-primary" => {
            let at = participant_point(&mut rng);
            let restart_after_ns = restart(&mut rng);
            attack(at, TrapAction::Crash { restart_after_ns })
        }
        "recovery-crash-backup" => {
            // After LOCK, so records are (about to be) logged at the backups: another node
            // fails while this coordinator commits. With 3 replicas on 3 nodes every node
            // holds a copy of every partition: the victim is a backup of every written
            // partition it is not primary of.
            let points = &COORDINATOR_POINTS[1..5];
            let point = points[rng.random_range(0..points.len())];
            let visit = if point == "txn.commit.between_commit_primaries" {
                rng.random_range(1..=6)
            } else {
                rng.random_range(1..=24)
            };
            let pick = rng.random_range(0..4);
            let restart_after_ns = restart(&mut rng);
            attack(
                (point, visit, true),
                TrapAction::CrashOther {
                    pick,
                    restart_after_ns,
                },
            )
        }
        "recovery-pause" => {
            let at = any_point(&mut rng);
            let for_ns = rng.random_range(lease + lease / 2..=4 * lease);
            attack(at, TrapAction::Pause { for_ns })
        }
        "recovery-partition" => {
            let at = any_point(&mut rng);
            let heal_after_ns = rng.random_range(2 * lease..=6 * lease);
            attack(at, TrapAction::Isolate { heal_after_ns })
        }
        "recovery-crash-during-recovery" => {
            let at = any_point(&mut rng);
            let restart_after_ns = restart(&mut rng);
            let mut a = attack(at, TrapAction::Crash { restart_after_ns });
            // Recovery starts at NEW-CONFIG and exchanges from NEW-CONFIG-COMMIT on: a
            // second crash within a fifth of a lease of the commit falls in it.
            a.then_after_commit = Some((rng.random_range(0..=lease / 5), rng.random_range(0..4)));
            a
        }
        "recovery-two-crashes" => {
            let first = any_point(&mut rng);
            let restart_after_ns = restart(&mut rng);
            let second = any_point(&mut rng);
            let second_restart = restart(&mut rng);
            let mut a = attack(first, TrapAction::Crash { restart_after_ns });
            let mut b = attack(
                (second.0, rng.random_range(1..=8), second.2),
                TrapAction::Crash {
                    restart_after_ns: second_restart,
                },
            );
            b.then = None;
            a.then = Some(Box::new(b));
            a
        }
        // Data recovery: a first crash (the node restarts, joins and is given backups to
        // fill, or others are), then a fault while a node fills.
        "recovery-crash-filler"
        | "recovery-crash-during-fill"
        | "recovery-isolate-filler"
        | "recovery-sever-filler" => {
            let first = any_point(&mut rng);
            let restart_after_ns = Some(rng.random_range(lease..=3 * lease));
            // `recovery-sever-filler`'s crashed node stays down: its new life joining
            // would change the view during the cut and end the FETCHes waiting.
            let restart_after_ns = restart_after_ns.filter(|_| name != "recovery-sever-filler");
            let mut a = attack(first, TrapAction::Crash { restart_after_ns });
            let fill = (REFILL_POINT, rng.random_range(1..=12), false);
            let action = match name {
                // The filling node itself fails; it restarts later as a new life.
                "recovery-crash-filler" => TrapAction::Crash {
                    restart_after_ns: restart(&mut rng),
                },
                // A second failure before data recovery ends: another node, perhaps the
                // primary copied from.
                "recovery-crash-during-fill" => TrapAction::CrashOther {
                    pick: rng.random_range(0..4),
                    restart_after_ns: restart(&mut rng),
                },
                // The filling node cut off from every node but the CM: it keeps its
                // lease, no view changes, and FETCHes from the primaries cut off wait
                // for the heal. Once healed, data recovery must go on at its pace
                // (`SEVER_STRENGTH_LEASES`), whatever the FETCHes waited.
                "recovery-sever-filler" => TrapAction::Sever {
                    heal_after_ns: rng.random_range(2 * lease..=6 * lease),
                },
                _ => TrapAction::Isolate {
                    heal_after_ns: rng.random_range(2 * lease..=6 * lease),
                },
            };
            a.then = Some(Box::new(attack(fill, action)));
            a
        }
        other => panic!("no recovery scenario {other:?}; they are {NAMES:?}"),
    };
    let sever = name == "recovery-sever-filler";
    RunOptions {
        nodes,
        faults: LIGHT.to_vec(),
        deadline_ns: 30 * lease,
        // Real nodes' pace, and a retransmission timeout at most a lease, as on real
        // nodes: what follows the heal is timed.
        refill_pace: if sever {
            ferrotx_txn::refill::RefillOptions::default().pace
        } else {
            1
        },
        rto_max_ns: sever.then_some(lease),
        plan: Some(plan),
        membership: Some(membership),
        detail: Some(format!(
            "workload {}; trap {} visit {}{}: {:?}{}",
            workload_of(seed),
            attack.point,
            attack.visit,
            if attack.force { " (forced)" } else { "" },
            attack.action,
            match (&attack.then_after_commit, &attack.then) {
                (Some((delay, _)), _) => format!(
                    "; then a crash {:.3} ms after the next view commits",
                    *delay as f64 / 1e6
                ),
                (None, Some(b)) =>
                    format!("; then trap {} visit {}: {:?}", b.point, b.visit, b.action),
                (None, None) => String::new(),
            }
        )),
        attack: Some(attack),
        ..RunOptions::new(seed)
    }
}

/// The network faults of every recovery scenario: light loss, duplication, reordering.
const LIGHT: [FaultKind; 3] = [FaultKind::Loss, FaultKind::Dup, FaultKind::Reorder];

/// The plan of [`LIGHT`] faults for `seed`, loss and duplication at 40% of their draw.
fn light_plan(seed: u64, nodes: u16) -> FaultPlan {
    let mut plan = FaultPlan::draw(seed, &LIGHT, nodes, 1);
    plan.network.loss /= 2.5;
    plan.network.duplicate /= 2.5;
    plan
}

/// `recovery-domain`: 6 nodes in 3 failure domains of 2 (node n in `d{n % 3}`), 3
/// replicas, so every partition has a copy in each domain. A whole domain fails at once
/// (both its nodes crash) while the clients run: the survivors fill the lost copies, two
/// to a domain, there being no third. Both nodes restart and join after 2 to 6 leases,
/// often while those fills run; then a copy of every partition must move back into the
/// returned domain (a fill there, the crowded copy dropped once it counts), which the
/// end check asks for (`full_strength`: copies in as many domains as the members allow).
fn domain_options(seed: u64) -> RunOptions {
    // Its detail line says DOMAIN_FAILS, which `sprung` looks for.
    let membership = default_options();
    let lease = membership.lease_ns;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd0_3a17);
    let (nodes, domains) = (6u16, 3u16);
    let mut plan = light_plan(seed, nodes);
    let domain = rng.random_range(0..domains);
    let failed: Vec<u16> = (0..nodes).filter(|n| n % domains == domain).collect();
    let at = rng.random_range(lease / 2..=3 * lease);
    let back = at + rng.random_range(2 * lease..=6 * lease);
    // The second node a little after the first, or at once.
    let apart = rng.random_range(0..=lease / 4);
    for (i, &node) in failed.iter().enumerate() {
        let offset = if i == 0 { 0 } else { apart };
        plan.schedule
            .push((at + offset, FaultEvent::Crash { node }));
        plan.schedule
            .push((back + offset, FaultEvent::Restart { node }));
    }
    plan.schedule.sort_by_key(|(t, _)| *t);
    RunOptions {
        nodes,
        domains: Some(domains),
        faults: LIGHT.to_vec(),
        // Twice the nodes of the others, and four times their time: 48 clients of hot
        // counters (resp-counter-spread) need more than 30 leases on 6 nodes even with no
        // crash (23 of 40 seeds did not finish in 30; all did in 120).
        deadline_ns: 120 * lease,
        detail: Some(format!(
            "workload {}; {DOMAIN_FAILS} d{domain} (nodes {failed:?}) at {:.1} ms, {:.3} ms apart, back at {:.1} ms",
            workload_of(seed),
            at as f64 / 1e6,
            apart as f64 / 1e6,
            back as f64 / 1e6
        )),
        plan: Some(plan),
        membership: Some(membership),
        ..RunOptions::new(seed)
    }
}

/// `recovery-full-node`: 5 nodes, 3 replicas, one of them (drawn from the seed, the CM
/// or a backup CM among them) with a memory limit of 1 byte, so full from the start: its
/// lease requests and probe replies say so. Another node crashes while the clients run
/// (the CM in one seed of five), and restarts as a new life after 1 to 6 leases in half
/// the seeds. Data recovery must fill the lost copies on the other nodes only: no view
/// may give the full node a fill or a new copy (`run::placed_on_full`), and every
/// partition ends at full strength on the others.
fn full_node_options(seed: u64) -> RunOptions {
    let membership = default_options();
    let lease = membership.lease_ns;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x00f0_110d);
    let nodes = 5u16;
    let mut plan = light_plan(seed, nodes);
    let full = rng.random_range(0..nodes);
    let victim = (full + rng.random_range(1..nodes)) % nodes;
    let at = rng.random_range(lease / 2..=3 * lease);
    let back = rng
        .random_bool(0.5)
        .then(|| at + rng.random_range(lease..=6 * lease));
    plan.schedule.push((at, FaultEvent::Crash { node: victim }));
    if let Some(back) = back {
        plan.schedule
            .push((back, FaultEvent::Restart { node: victim }));
    }
    plan.schedule.sort_by_key(|(t, _)| *t);
    RunOptions {
        nodes,
        faults: LIGHT.to_vec(),
        // As `recovery-domain`'s: hot counters on 5 nodes need more than 30 leases
        // (`resp-counter-spread` seed 3 did not finish in 30 with no node full).
        deadline_ns: 120 * lease,
        detail: Some(format!(
            "workload {}; node {full} has a {FULL_NODE} node {victim} crashes at {:.1} ms{}",
            workload_of(seed),
            at as f64 / 1e6,
            back.map_or(String::new(), |b| format!(
                ", back at {:.1} ms",
                b as f64 / 1e6
            ))
        )),
        plan: Some(plan),
        membership: Some(membership),
        full_nodes: vec![full],
        ..RunOptions::new(seed)
    }
}

/// A recovery run's failure, if any: every membership violation, a panic, a liveness
/// report, any workload finding; and a run that went beyond f (a partition with no copy
/// left, or half the view down), which these scenarios never should.
pub fn failure(report: &RunReport) -> Option<String> {
    let Some(m) = report.membership.as_ref() else {
        return Some("membership did not run".to_string());
    };
    if let Some(panic) = &m.panic {
        return Some(format!("panic: {panic}"));
    }
    if !m.violations.is_empty() {
        return Some(format!("membership: {:?}", m.violations));
    }
    if let Some(l) = &report.liveness {
        return Some(format!("liveness: {l}"));
    }
    if !report.checked.violations.is_empty() {
        return Some(format!(
            "workload: {} ({} violations)",
            report.checked.violations[0],
            report.checked.violations.len()
        ));
    }
    if report.workload == "recovery-sever-filler" {
        let lease = default_options().lease_ns;
        if m.strength_after_ns
            .is_none_or(|t| t > SEVER_STRENGTH_LEASES * lease)
        {
            return Some(format!(
                "views not at full strength within {SEVER_STRENGTH_LEASES} leases of the heal (after {:?} ms)",
                m.strength_after_ns.map(|t| t as f64 / 1e6)
            ));
        }
    }
    if m.lost_partitions > 0 || m.majority_down {
        return Some(format!(
            "beyond f (lost partitions {}, majority down {}; healthy removed {:?}): stuck {}, findings {:?}",
            m.lost_partitions, m.majority_down, m.healthy_removed, m.stuck, m.excused
        ));
    }
    None
}

/// Leases after the heal within which `recovery-sever-filler`'s views must be back at
/// full strength for good: the fills' copying at their pace, a lease for the CM to count
/// them, and the rest of the run's recovery.
pub const SEVER_STRENGTH_LEASES: u64 = 8;

/// Whether the run's trap sprang (the attack happened).
pub fn sprung(report: &RunReport) -> bool {
    if report.attack.iter().any(|line| line.contains(DOMAIN_FAILS)) {
        // `recovery-domain` (under any workload) has no trap: its attack is the domain's
        // failure and return, and it happened if copies moved back into the domain.
        return report.membership.as_ref().is_some_and(|m| m.moves > 0);
    }
    if report.attack.iter().any(|line| line.contains(FULL_NODE)) {
        // `recovery-full-node` has no trap either: its attack is the crash beside a full
        // node, and it happened if data recovery placed copies while that node was full.
        return report
            .membership
            .as_ref()
            .is_some_and(|m| m.fills_assigned > 0);
    }
    // The data-recovery scenarios' attack is their second trap, at the fill.
    let point = if report.workload.contains("fill") {
        REFILL_POINT
    } else {
        ""
    };
    report
        .attack
        .iter()
        .any(|line| line.contains("sprang") && line.contains(point))
}
