//! Scenarios that attack membership (`ferrotx sim --workload membership-...`): each a
//! fault plan written by hand, its timing drawn from the seed, run with membership on
//! (see [`crate::membership`]) under light transactional load (the kv workload) and
//! light network faults (loss, duplication, reordering drawn from the seed).
//!
//! Times are from the moment the cluster has bootstrapped; `L` is the lease.

use ferrotx_cluster::Configuration;
use ferrotx_workload::workload::{KvWorkload, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::faults::{CLOCK_OFFSET_NS_MAX, DRIFT_PPM_MAX, FaultEvent, FaultKind, FaultPlan};
use crate::membership::default_options;
use crate::plot::{Cue, Plot, Strike};
use crate::run::{RunOptions, RunReport, Scenario};
use crate::scenarios::WorkloadScenario;
use crate::simulator::NodeClock;

/// Every membership scenario, in the order `--workload membership` runs them.
pub const NAMES: [&str; 19] = [
    "membership-crash",
    "membership-crash-cm",
    "membership-pause",
    "membership-partition-minority",
    "membership-partition-majority",
    "membership-one-way",
    "membership-cm-during-reconfig",
    "membership-race",
    "membership-drift",
    "membership-two-failures",
    "membership-random",
    "membership-random-writes",
    "membership-slow-install",
    "membership-cm-cut-during-join",
    "membership-cm-isolated-member-paused",
    "membership-last-holder-readmitted",
    "membership-false-positive-rejoin",
    "membership-seed-7",
    "membership-store-back",
];

/// The scenarios of issue 30, one for each situation membership got wrong or nearly did,
/// each with its faults placed by hand (some on a cue: [`crate::plot`]), its timing drawn
/// from the seed, under a paced writing load. They pass only with every checker clean
/// (nothing excused: no healthy member removed, no partition lost, every live node
/// serving in the latest view within 20 leases of the last fault, full strength, the
/// workload's checkers), and only if the run reached its situation ([`reached`]).
pub const SITUATIONS: [&str; 5] = [
    "membership-cm-cut-during-join",
    "membership-cm-isolated-member-paused",
    "membership-last-holder-readmitted",
    "membership-false-positive-rejoin",
    "membership-seed-7",
];

/// Transactions each client of a [`SITUATIONS`] scenario runs, pausing up to a lease
/// between two (so the load spans the faults).
const SITUATION_TRANSACTIONS: usize = 16;

/// The scenarios whose load writes. Runs that stay within f must pass every checker
/// (transaction recovery handles interrupted commits); the others run a read-only load.
pub const WRITING: [&str; 1] = ["membership-random-writes"];

/// The scenarios whose faults may strike more than f = replicas - 1 nodes at once (a
/// crash, pauses and partitions drawn at random): a partition may lose every copy, and a
/// view may lose its majority for good, as FaRM intends.
pub const BEYOND_F: [&str; 2] = ["membership-random", "membership-random-writes"];

/// Transactions each client runs.
const TRANSACTIONS: usize = 12;

/// The longest install delay of `membership-slow-install`, in leases.
const SLOW_INSTALL_LEASES: u64 = 5;

/// The CM's ack timeout in `membership-slow-install`, in leases.
const SLOW_INSTALL_ACK_TIMEOUT_LEASES: u64 = 8;

/// Whether `name` is a membership scenario.
pub fn is_membership(name: &str) -> bool {
    NAMES.contains(&name)
}

/// The light load every membership scenario runs: one kv client per worker.
///
/// # Panics
///
/// If `name` is not one of [`NAMES`].
pub fn scenario(name: &str) -> Box<dyn Scenario> {
    let name = NAMES
        .into_iter()
        .find(|n| *n == name)
        .unwrap_or_else(|| panic!("no membership scenario {name:?}; they are {NAMES:?}"));
    let situation = SITUATIONS.contains(&name);
    let scenario = WorkloadScenario::custom(
        name,
        Workload::Kv(KvWorkload {
            keys_per_txn: 2,
            write_share: if WRITING.contains(&name) || situation {
                0.5
            } else {
                0.0
            },
            key_count: 24,
            value_bytes: 8,
            zipf: 0.0,
            ship: false,
            delete_share: 0.0,
        }),
        1,
        if situation {
            SITUATION_TRANSACTIONS
        } else {
            TRANSACTIONS
        },
    );
    if situation {
        Box::new(scenario.paced(default_options().lease_ns))
    } else {
        Box::new(scenario)
    }
}

/// The run options of scenario `name` for `seed`: membership on, its nodes, and its plan.
///
/// # Panics
///
/// If `name` is not one of [`NAMES`].
pub fn options(name: &str, seed: u64) -> RunOptions {
    if SITUATIONS.contains(&name) {
        return situation_options(name, seed);
    }
    let mut membership = default_options();
    let lease = membership.lease_ns;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x3e3b_e125);
    let nodes: u16 = match name {
        "membership-crash" | "membership-crash-cm" | "membership-pause" | "membership-drift" => 3,
        "membership-one-way" | "membership-slow-install" => rng.random_range(3..=5),
        _ => 5,
    };
    let light = [FaultKind::Loss, FaultKind::Dup, FaultKind::Reorder];
    let mut plan = FaultPlan::draw(seed, &light, nodes, 1);
    // Light network faults: at most 2% loss and duplication.
    plan.network.loss /= 2.5;
    plan.network.duplicate /= 2.5;
    let mut at = |lo: u64, hi: u64| rng.random_range(lo..=hi);
    let t = at(lease / 10, lease);
    let mut schedule = Vec::new();
    let mut install_delay_max_ns = Vec::new();
    match name {
        "membership-crash" | "membership-crash-cm" => {
            let node = if name == "membership-crash-cm" {
                0
            } else {
                u16::try_from(at(1, u64::from(nodes) - 1)).expect("a node id")
            };
            schedule.push((t, FaultEvent::Crash { node }));
            if at(0, 1) == 1 {
                schedule.push((t + at(lease, 6 * lease), FaultEvent::Restart { node }));
            }
        }
        "membership-pause" => {
            let node = u16::try_from(at(0, u64::from(nodes) - 1)).expect("a node id");
            let for_ns = at(lease + lease / 2, 4 * lease);
            schedule.push((t, FaultEvent::Pause { node, for_ns }));
        }
        "membership-partition-minority" | "membership-partition-majority" => {
            // Minority: the CM's side is the smaller one (it loses its majority);
            // majority: the CM keeps a majority and the other side is removed.
            let other = u16::try_from(at(1, 4)).expect("a node id");
            let (side_a, side_b): (Vec<u16>, Vec<u16>) = if name.ends_with("minority") {
                (0..nodes).partition(|&n| n == 0 || n == other)
            } else {
                let second = 1 + (other % 4);
                (0..nodes).partition(|&n| n == other || n == second)
            };
            schedule.push((t, FaultEvent::Partition { side_a, side_b }));
            schedule.push((t + at(2 * lease, 6 * lease), FaultEvent::Heal));
        }
        "membership-one-way" => {
            let node = u16::try_from(at(0, u64::from(nodes) - 1)).expect("a node id");
            let others: Vec<u16> = (0..nodes).filter(|&n| n != node).collect();
            let event = if at(0, 1) == 0 {
                FaultEvent::OneWay {
                    from: vec![node],
                    to: others,
                }
            } else {
                FaultEvent::OneWay {
                    from: others,
                    to: vec![node],
                }
            };
            schedule.push((t, event));
            schedule.push((t + at(2 * lease, 6 * lease), FaultEvent::Heal));
        }
        "membership-store-back" => {
            // The coordination service is restored from an old copy: it holds the view
            // before the current one for 6 to 10 leases, until the operator restores the
            // right copy. A member crashed first (so that there is an older view), and
            // another crashes while the store is behind. Every live node saw the current
            // view: each finds the store behind when it reads, refuses to swap against
            // it, and serves on; the second crash is handled once the store is right.
            plan.coord = Some(0.0);
            let first = u16::try_from(at(1, u64::from(nodes) - 1)).expect("a node id");
            let second = 1 + (first + u16::try_from(at(0, 2)).expect("small")) % (nodes - 1);
            let back = at(6 * lease, 10 * lease);
            let t_back = t + 4 * lease;
            schedule.push((t, FaultEvent::Crash { node: first }));
            schedule.push((t_back, FaultEvent::CoordBack { for_ns: back }));
            schedule.push((
                t_back + at(lease, 2 * lease),
                FaultEvent::Crash { node: second },
            ));
        }
        "membership-cm-during-reconfig" => {
            // A member fails; the CM fails while it handles that (suspecting, probing,
            // swapping, waiting for acks or for old leases to end).
            let node = u16::try_from(at(1, 4)).expect("a node id");
            schedule.push((t, FaultEvent::Crash { node }));
            schedule.push((t + at(lease / 2, 2 * lease), FaultEvent::Crash { node: 0 }));
        }
        "membership-race" => {
            // Node 2 stops hearing the CM a quarter lease before the CM dies: the first
            // two backup CMs (1 and 2, staggered by a quarter lease) suspect it together.
            schedule.push((
                t,
                FaultEvent::OneWay {
                    from: vec![0],
                    to: vec![2],
                },
            ));
            let gap = lease / 4 - lease / 20 + at(0, lease / 10);
            schedule.push((t + gap, FaultEvent::Crash { node: 0 }));
            schedule.push((t + gap + 4 * lease, FaultEvent::Heal));
        }
        "membership-drift" => {
            for clock in &mut plan.clocks {
                let drift = match at(0, 2) {
                    0 => DRIFT_PPM_MAX,
                    1 => -DRIFT_PPM_MAX,
                    _ => {
                        i32::try_from(at(0, 2 * DRIFT_PPM_MAX.unsigned_abs() as u64))
                            .expect("small")
                            - DRIFT_PPM_MAX
                    }
                };
                *clock = NodeClock {
                    offset_ns: at(0, CLOCK_OFFSET_NS_MAX),
                    drift_ppm: drift,
                };
            }
            let node = u16::try_from(at(0, u64::from(nodes) - 1)).expect("a node id");
            schedule.push((t, FaultEvent::Crash { node }));
        }
        "membership-two-failures" => {
            let a = u16::try_from(at(0, 4)).expect("a node id");
            let b = (a + u16::try_from(at(1, 4)).expect("a node id")) % 5;
            schedule.push((t, FaultEvent::Crash { node: a }));
            schedule.push((t + at(3 * lease, 5 * lease), FaultEvent::Crash { node: b }));
        }
        "membership-random" | "membership-random-writes" => {
            let mut kinds = FaultKind::ALL.to_vec();
            // Power cuts need a disk (`--durability sync`, and `--faults power` says so);
            // these scenarios run in memory, where a cut loses everything.
            kinds.retain(|k| !matches!(k, FaultKind::Buggify | FaultKind::Power));
            plan = FaultPlan::draw(seed, &kinds, nodes, 5 * lease);
            plan.network.loss /= 2.5;
            plan.network.duplicate /= 2.5;
            schedule = std::mem::take(&mut plan.schedule);
        }
        "membership-slow-install" => {
            // No fault but slow installs: every node takes between 0 and 5 leases (drawn
            // per install) to switch its workers to a new view before it acknowledges
            // it, as a real node's threads may at bootstrap. The CM waits for the
            // slowest ack up to its ack timeout, here 8 leases (above the slowest
            // install, with room for a lost NEW-CONFIG or ack); a member that switched
            // fast must not take that wait for a failed CM. Nothing fails, so the
            // cluster stays in its first view (see [`failure`]).
            membership.ack_timeout_min_ns = SLOW_INSTALL_ACK_TIMEOUT_LEASES * lease;
            install_delay_max_ns = vec![SLOW_INSTALL_LEASES * lease; usize::from(nodes)];
        }
        other => panic!("no membership scenario {other:?}; they are {NAMES:?}"),
    }
    schedule.sort_by_key(|(at, _)| *at);
    plan.schedule = schedule;
    RunOptions {
        nodes,
        faults: light.to_vec(),
        deadline_ns: 30 * lease,
        plan: Some(plan),
        membership: Some(membership),
        install_delay_max_ns,
        ..RunOptions::new(seed)
    }
}

/// A run's failure, if any: a violation of (a), (b) or (d), an unknown panic, a failed
/// bootstrap, the step bound, a liveness failure of a run that lost no member; and (c)
/// or a read-only workload's finding, unless the run removed a healthy member (the
/// known bugs below, which then explain a cluster left without a majority or a
/// partition left without a copy). In `membership-slow-install`, where nothing fails,
/// also any healthy member removed or any view after the first. The [`SITUATIONS`]
/// excuse nothing, and fail a run that did not reach its situation ([`reached`]).
pub fn failure(name: &str, report: &RunReport) -> Option<String> {
    if SITUATIONS.contains(&name) {
        return situation_failure(name, report);
    }
    let Some(m) = report.membership.as_ref() else {
        return Some("membership did not run".to_string());
    };
    if name == "membership-slow-install" {
        // Nothing fails: a removal, or any view after the first, is a false suspicion.
        if !m.healthy_removed.is_empty() {
            return Some(format!(
                "healthy members removed (node, view): {:?}; views {:?}",
                m.healthy_removed, m.views
            ));
        }
        if m.views.len() > 1 {
            return Some(format!(
                "no node failed, yet views after the first were stored: {:?}",
                m.views
            ));
        }
    }
    let explained = !m.healthy_removed.is_empty() || !m.stale_commits.is_empty();
    let beyond_f = BEYOND_F.contains(&name);
    let hard: Vec<&String> = m
        .violations
        .iter()
        .filter(|v| !((explained || (beyond_f && m.majority_down)) && v.starts_with("(c)")))
        .collect();
    if !hard.is_empty() {
        return Some(format!("membership: {hard:?}"));
    }
    if let Some(l) = &report.liveness {
        return Some(format!("liveness: {l}"));
    }
    if !report.checked.violations.is_empty() {
        return Some(format!("workload: {:?}", report.checked.violations));
    }
    if !WRITING.contains(&name)
        && !m.excused.is_empty()
        && !explained
        && !(beyond_f && (m.lost_partitions > 0 || m.majority_down))
    {
        return Some(format!("read-only workload: {:?}", m.excused));
    }
    None
}

/// The run options of a [`SITUATIONS`] scenario for `seed`: its nodes and copies, its
/// hand-written schedule and plot, light network faults. Times are from the clients'
/// start; `L` is the lease.
fn situation_options(name: &str, seed: u64) -> RunOptions {
    let membership = default_options();
    let lease = membership.lease_ns;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5174_a710);
    let mut at = |lo: u64, hi: u64| rng.random_range(lo..=hi);
    let node = |n: u64| u16::try_from(n).expect("a node id");
    let t = at(lease / 10, lease);
    let mut schedule = Vec::new();
    let mut plot = None;
    let others =
        |nodes: u16, cut: &[u16]| -> Vec<u16> { (0..nodes).filter(|n| !cut.contains(n)).collect() };
    let (nodes, replicas): (u16, u8) = match name {
        "membership-cm-cut-during-join" => {
            // A node (not the CM) crashes and restarts as a new life, before or after
            // its removal; when the CM takes the first answer of a probe round that
            // probes the joiner, with others still to answer, the CM is cut off from
            // every node, and healed 1 to 5 L later.
            let nodes = node(at(3, 5));
            let replicas = u8::try_from(at(2, 3)).expect("2 or 3");
            let joiner = node(at(1, u64::from(nodes) - 1));
            schedule.push((t, FaultEvent::Crash { node: joiner }));
            schedule.push((
                t + at(lease / 2, 4 * lease),
                FaultEvent::Restart { node: joiner },
            ));
            plot = Some(Plot {
                cue: Cue::CmFirstReplyOfJoinProbe,
                delay_ns: 0,
                strike: Strike::IsolateCued {
                    heal_after_ns: at(lease, 5 * lease),
                },
                expires_after_ns: 40 * lease,
            });
            (nodes, replicas)
        }
        "membership-cm-isolated-member-paused" => {
            // A member (not the CM) is paused for 2 to 4 L; within half a lease of the
            // pause's start, while the member is still in the view (the CM suspects it
            // about a lease after its last lease request, 0.6 L after the pause starts
            // at the earliest if one request was lost, and removes it after a probe of a
            // quarter lease), the CM is cut off from every node, healed 2 to 6 L later.
            let nodes = if at(0, 1) == 0 { 3 } else { 5 };
            let replicas = if nodes == 5 {
                u8::try_from(at(2, 3)).expect("2 or 3")
            } else {
                3
            };
            let member = node(at(1, u64::from(nodes) - 1));
            let for_ns = at(2 * lease, 4 * lease);
            schedule.push((
                t,
                FaultEvent::Pause {
                    node: member,
                    for_ns,
                },
            ));
            plot = Some(Plot {
                cue: Cue::After {
                    ns: t + at(0, lease / 2),
                },
                delay_ns: 0,
                strike: Strike::IsolateCm {
                    heal_after_ns: at(2 * lease, 6 * lease),
                },
                expires_after_ns: 40 * lease,
            });
            (nodes, replicas)
        }
        "membership-last-holder-readmitted" => {
            // Two copies of every partition. Either both holders of a partition are cut
            // off together (5 nodes: a minority), or one crashes and the other is cut
            // off the moment a view without the crashed one is stored (4 or 5 nodes),
            // before any new backup of the partition is filled (healed 2 to 6 L later,
            // or 4 to 8 L). Either way the partition's last holder is cut off and
            // suspended, and once healed it must be readmitted as the same life with its
            // copies.
            let both = at(0, 1) == 0;
            let nodes = if both { 5 } else { node(at(4, 5)) };
            let replicas = 2;
            let config = Configuration::local(nodes, replicas, 2, 2, 40_000)
                .expect("a valid simulated configuration");
            let partition =
                u32::try_from(at(0, u64::from(config.partitions().partition_count()) - 1))
                    .expect("a partition");
            let holders: Vec<u16> = config
                .partitions()
                .replicas(ferrotx_store::PartitionId(partition))
                .nodes()
                .collect();
            // The holder cut off may be the CM that just stored the view (or that the
            // crash made CM): a backup CM takes over an uncommitted view only after the
            // ack timeout plus two leases, so that variant stays cut off for 4 to 8 L.
            let heal_after_ns = if both {
                at(2 * lease, 6 * lease)
            } else {
                at(4 * lease, 8 * lease)
            };
            if both {
                schedule.push((
                    t,
                    FaultEvent::Partition {
                        side_a: holders.clone(),
                        side_b: others(nodes, &holders),
                    },
                ));
                schedule.push((t + heal_after_ns, FaultEvent::Heal));
            } else {
                let i = usize::try_from(at(0, 1)).expect("0 or 1");
                let (crashed, last) = (holders[i], holders[1 - i]);
                schedule.push((t, FaultEvent::Crash { node: crashed }));
                if at(0, 1) == 1 {
                    schedule.push((
                        t + at(6 * lease, 10 * lease),
                        FaultEvent::Restart { node: crashed },
                    ));
                }
                plot = Some(Plot {
                    cue: Cue::ViewWithout { node: crashed },
                    delay_ns: 0,
                    strike: Strike::Isolate {
                        node: last,
                        heal_after_ns,
                    },
                    expires_after_ns: 40 * lease,
                });
            }
            (nodes, replicas)
        }
        "membership-false-positive-rejoin" => {
            // A member (not the CM) is paused for 2 to 4 L, or cut off for 2 to 5 L: it
            // is removed while alive, learns it, and its process comes back by itself as
            // a new life (the simulator restarts it a lease after it stopped, empty, as
            // `ferrotx node` re-executes itself), admitted and refilled.
            let nodes = 3;
            let member = node(at(1, 2));
            if at(0, 1) == 0 {
                schedule.push((
                    t,
                    FaultEvent::Pause {
                        node: member,
                        for_ns: at(2 * lease, 4 * lease),
                    },
                ));
            } else {
                schedule.push((
                    t,
                    FaultEvent::Partition {
                        side_a: vec![member],
                        side_b: others(nodes, &[member]),
                    },
                ));
                schedule.push((t + at(2 * lease, 5 * lease), FaultEvent::Heal));
            }
            (nodes, 3)
        }
        "membership-seed-7" => {
            // The cluster of sim seed 7: 3 nodes, 3 copies; node 1 is removed while
            // alive (paused 2 to 4 L, or cut off 2 to 4 L), so the view is [0, 2]; up to
            // half a lease after that view is stored (before node 1's new life can be
            // admitted), node 0 or node 2 crashes for good. The view [0, 2] can never
            // have a majority again; the survivor and node 1's new life, a majority of
            // the configuration's nodes, must go on.
            let nodes = 3;
            if at(0, 1) == 0 {
                schedule.push((
                    t,
                    FaultEvent::Pause {
                        node: 1,
                        for_ns: at(2 * lease, 4 * lease),
                    },
                ));
            } else {
                schedule.push((
                    t,
                    FaultEvent::Partition {
                        side_a: vec![1],
                        side_b: vec![0, 2],
                    },
                ));
                schedule.push((t + at(2 * lease, 4 * lease), FaultEvent::Heal));
            }
            let crashed = if at(0, 1) == 0 { 0 } else { 2 };
            plot = Some(Plot {
                cue: Cue::ViewWithout { node: 1 },
                delay_ns: at(0, lease / 2),
                strike: Strike::Crash {
                    node: crashed,
                    restart_after_ns: None,
                },
                expires_after_ns: 40 * lease,
            });
            (nodes, 3)
        }
        other => panic!("no situation scenario {other:?}; they are {SITUATIONS:?}"),
    };
    let light = [FaultKind::Loss, FaultKind::Dup, FaultKind::Reorder];
    let mut plan = FaultPlan::draw(seed, &light, nodes, 1);
    plan.network.loss /= 2.5;
    plan.network.duplicate /= 2.5;
    schedule.sort_by_key(|(at, _)| *at);
    plan.schedule = schedule;
    RunOptions {
        nodes,
        replicas,
        faults: light.to_vec(),
        deadline_ns: 30 * lease,
        plan: Some(plan),
        membership: Some(membership),
        plot,
        ..RunOptions::new(seed)
    }
}

/// Whether the run of [`SITUATIONS`] scenario `name` reached its situation, by the
/// counters of [`crate::plot::Situations`]; else what it missed.
pub fn reached(name: &str, report: &RunReport) -> Result<(), String> {
    let Some(m) = report.membership.as_ref() else {
        return Err("membership did not run".to_string());
    };
    let s = &m.situations;
    let ok = match name {
        "membership-cm-cut-during-join" => s.cm_cut_between_replies > 0,
        "membership-cm-isolated-member-paused" => s.cm_isolated_while_paused > 0,
        "membership-last-holder-readmitted" => s.suspended > 0 && s.readmitted > 0,
        "membership-false-positive-rejoin" => s.rejoined > 0 && s.refilled > 0,
        "membership-seed-7" => {
            let crashed_in_0_2 = s
                .crashed_in_view
                .iter()
                .find(|(_, members)| members == &[0, 2]);
            let last = m.views.last().map(|(_, members, _)| members.clone());
            crashed_in_0_2.is_some_and(|&(crashed, _)| {
                let mut want = vec![1, 2 - crashed];
                want.sort_unstable();
                last == Some(want)
            }) && s.rejoined > 0
        }
        "membership-store-back" => m
            .coord
            .is_some_and(|c| c.went_back > 0 && c.found_behind > 0),
        _ => return Ok(()),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the run never reached its situation: {s:?}; views {:?}",
            m.views
        ))
    }
}

/// The verdict on a [`SITUATIONS`] scenario: nothing excused, and its situation reached.
fn situation_failure(name: &str, report: &RunReport) -> Option<String> {
    let Some(m) = report.membership.as_ref() else {
        return Some("membership did not run".to_string());
    };
    if !m.violations.is_empty() {
        return Some(format!("membership: {:?}", m.violations));
    }
    if let Some(l) = &report.liveness {
        return Some(format!("liveness: {l}"));
    }
    if !report.checked.violations.is_empty() {
        return Some(format!("workload: {:?}", report.checked.violations));
    }
    if !m.excused.is_empty() || m.stuck > 0 || m.lost_partitions > 0 || m.majority_down {
        return Some(format!(
            "went beyond f ({} partitions lost, majority down: {}, {} clients stuck): {:?}",
            m.lost_partitions, m.majority_down, m.stuck, m.excused
        ));
    }
    if !m.stale_commits.is_empty() {
        return Some(format!("stale commits: {:?}", m.stale_commits));
    }
    reached(name, report).err()
}
