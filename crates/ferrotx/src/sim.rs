//! `ferrotx sim`: whole clusters in simulation, many seeds, with a progress bar, a summary
//! per workload, a JSON report, and the exact command that replays a failing seed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use ferrotx_sim::FaultKind;
use ferrotx_sim::run::Scenario;
use ferrotx_sim::run::{RunOptions, RunReport, run};
use ferrotx_sim::{RecoveryStats, VOTES};
use ferrotx_sim::{membership, membership_scenarios, recovery_scenarios, scenarios};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

#[derive(Args)]
pub struct SimArgs {
    /// Workloads to run, comma-separated, or `all` (the workloads), or `membership` (every
    /// membership-* scenario: hand-written attacks on membership, which set their own
    /// nodes and faults and always run membership), or `recovery` (every recovery-*
    /// scenario: a node crashed, paused or cut off exactly at a commit-protocol fault
    /// point, with membership, under a writing workload drawn from the seed).
    #[arg(long, value_delimiter = ',', default_value = "bank")]
    workload: Vec<String>,
    /// Seeds per workload, from --seed-base.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed of the sweep.
    #[arg(long, default_value_t = 0)]
    seed_base: u64,
    /// Run this one seed only (replay), and print its digest.
    #[arg(long)]
    seed: Option<u64>,
    /// Fault kinds to inject, comma-separated (loss, dup, reorder, partition, pause,
    /// drift, crash, buggify, corrupt, coord, power), or `none`. Default: every kind but
    /// crash, coord and power. Crash and power turn --membership on: a crashed node's
    /// memory is gone, and only membership (its new life admitted, data recovery) makes
    /// that a fault a cluster survives. Power (every node at once, then all started
    /// again from their disks) needs --durability sync.
    #[arg(long, value_delimiter = ',')]
    faults: Option<Vec<String>>,
    /// Nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Copies of each partition (f + 1; at most --nodes).
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Threads running seeds at once (default: the machine's cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run membership (leases and reconfiguration, a 10 ms lease) in every node: the
    /// cluster bootstraps through the protocol, faults start once it serves, and the
    /// membership checkers run at every step.
    #[arg(long)]
    membership: bool,
    /// With membership: tick each node's state machine only when its timeout is due (the
    /// state machine's contract), not also after each delivery.
    #[arg(long)]
    strict_ticks: bool,
    /// The cluster's `[durability] mode`: `flush` and `sync` give each node life a
    /// simulated disk for its logs; in `sync`, every quarter of a simulated millisecond
    /// the run checks that a power cut then would lose no write installed at a primary
    /// (docs/durability.md). Applies to every workload and scenario of the run.
    #[arg(long, default_value = "memory", value_parser = ["memory", "flush", "sync"])]
    durability: String,
    /// A deliberate break, to see the power-cut check fail: the simulated disks answer
    /// as if every record were durable at once (acknowledging before the sync).
    #[arg(long, hide = true)]
    disk_lie: bool,
    /// `flush` and `sync` modes: a node starts a checkpoint round once its logs grew by
    /// this many bytes since the last (0: never checkpoint, never truncate). Small by
    /// default so that every run checkpoints and truncates many times.
    #[arg(long, default_value_t = 16 << 10)]
    checkpoint_log_bytes: u64,
    /// A deliberate break, to see the checks fail: checkpoints copy without waiting for
    /// what was in doubt to settle.
    #[arg(long, hide = true)]
    checkpoint_unsettled: bool,
}

fn scenario_of(name: &str, seed: u64) -> Box<dyn Scenario> {
    if recovery_scenarios::is_recovery(name) {
        recovery_scenarios::scenario(name, seed)
    } else if membership_scenarios::is_membership(name) {
        membership_scenarios::scenario(name)
    } else {
        scenarios::scenario(name)
    }
}

/// The totals of one workload.
#[derive(Default, Serialize)]
struct WorkloadSummary {
    seeds: u64,
    passed: u64,
    /// Seeds with a safety violation.
    failed_seeds: Vec<u64>,
    /// Seeds whose clients never finished (a liveness report).
    stalled_seeds: Vec<u64>,
    committed: u64,
    aborted: u64,
    indeterminate: u64,
    simulated_s: f64,
    /// Transaction-state recovery's counters over every worker of every seed (the nodes
    /// up at the end and the last counters of every node life that ended).
    recovery: RecoverySummary,
    /// Redis plans shipped to their keys' primary and answered.
    shipped: u64,
    /// Recovery scenarios: seeds whose trap sprang (the attack happened).
    #[serde(skip_serializing_if = "Option::is_none")]
    traps_sprung: Option<u64>,
    /// Seeds that went beyond f (a partition lost every copy to crashes, or no majority
    /// of processes left): their findings were reported, not failed.
    beyond_f_seeds: Vec<u64>,
    /// Seeds with a view that admitted a new life while dropping a member (see
    /// `Report::admitted_while_dropping`).
    admitted_while_dropping_seeds: Vec<u64>,
    /// Data recovery: backups given to fill, and filled ones counted as copies.
    fills_assigned: u64,
    fills_counted: u64,
}

/// Recovery counters as the JSON report has them.
#[derive(Default, Serialize)]
struct RecoverySummary {
    decisions: BTreeMap<&'static str, u64>,
    votes: BTreeMap<&'static str, u64>,
    rounds: u64,
    waited: u64,
}

impl RecoverySummary {
    fn add(&mut self, stats: &RecoveryStats) {
        *self.decisions.entry("commit").or_default() += stats.committed;
        *self.decisions.entry("abort").or_default() += stats.aborted;
        for (vote, n) in VOTES.iter().zip(stats.votes) {
            *self.votes.entry(vote.name()).or_default() += n;
        }
        self.rounds += stats.rounds;
        self.waited += stats.waited;
    }

    fn line(&self) -> String {
        let votes: Vec<String> = VOTES
            .iter()
            .map(|v| format!("{} {}", v.name(), self.votes.get(v.name()).unwrap_or(&0)))
            .collect();
        format!(
            "recovery: {} rounds, decisions commit {} abort {}, votes {}, {} commits waited for a decision",
            self.rounds,
            self.decisions.get("commit").unwrap_or(&0),
            self.decisions.get("abort").unwrap_or(&0),
            votes.join(", "),
            self.waited
        )
    }
}

#[derive(Serialize)]
struct Report {
    seeds: u64,
    wall_s: f64,
    simulated_s: f64,
    simulated_s_per_wall_s: f64,
    fault_kinds: Vec<&'static str>,
    faults_injected: BTreeMap<&'static str, u64>,
    buggify_fired: BTreeMap<&'static str, u64>,
    /// Recovery counters over every workload.
    recovery: RecoverySummary,
    /// Operations shipped to their keys' primary and answered, over every workload.
    shipped: u64,
    /// Batches the primaries ran them in.
    ship_batches: u64,
    /// Shipped requests answered from a remembered result (asked again after a
    /// configuration change).
    ship_answered_again: u64,
    /// Checkpoint rounds started, completed and abandoned (`flush` and `sync` modes).
    checkpoints_started: u64,
    checkpoints_completed: u64,
    checkpoints_abandoned: u64,
    power_cuts: u64,
    damaged_disks: u64,
    damage_refused: u64,
    /// Data recovery: backups views gave nodes to fill, and filled ones a later view
    /// counted as copies.
    fills_assigned: u64,
    fills_counted: u64,
    /// Views that admitted a new life while dropping a member (membership's rule 4 says
    /// never; counted so that a sweep shows a change to that rule was exercised).
    admitted_while_dropping: u64,
    workloads: BTreeMap<&'static str, WorkloadSummary>,
}

pub fn main(args: &SimArgs) -> anyhow::Result<()> {
    let workloads: Vec<&'static str> = if args.workload.iter().any(|w| w == "all") {
        scenarios::NAMES.to_vec()
    } else if args.workload.iter().any(|w| w == "membership") {
        membership_scenarios::NAMES.to_vec()
    } else if args.workload.iter().any(|w| w == "recovery") {
        recovery_scenarios::NAMES.to_vec()
    } else {
        args.workload
            .iter()
            .map(|w| {
                scenarios::NAMES
                    .iter()
                    .chain(membership_scenarios::NAMES.iter())
                    .chain(recovery_scenarios::NAMES.iter())
                    .copied()
                    .find(|n| n == w)
                    .with_context(|| {
                        format!(
                            "unknown workload {w:?}; the workloads are {}, the membership \
                             scenarios {}, and the recovery scenarios {}",
                            scenarios::NAMES.join(", "),
                            membership_scenarios::NAMES.join(", "),
                            recovery_scenarios::NAMES.join(", ")
                        )
                    })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let only_membership = workloads.iter().all(|w| own_verdict(w));
    let kinds: Vec<FaultKind> = match &args.faults {
        // The membership scenarios draw light network faults and write the rest by hand.
        _ if only_membership => vec![FaultKind::Loss, FaultKind::Dup, FaultKind::Reorder],
        None => FaultKind::DEFAULT.to_vec(),
        Some(names) if names.iter().any(|n| n == "none") => Vec::new(),
        Some(names) => names
            .iter()
            .map(|n| n.parse::<FaultKind>().map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?,
    };
    if args.replicas == 0 || u16::from(args.replicas) > args.nodes {
        bail!(
            "--replicas must be between 1 and --nodes ({}), not {}",
            args.nodes,
            args.replicas
        );
    }
    if args.seed.is_none() && args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if args.nodes < 2 && kinds.contains(&FaultKind::Partition) {
        bail!(
            "a partition needs at least 2 nodes: pass --nodes 2 or more, or --faults without \
             partition"
        );
    }
    let durability =
        ferrotx_cluster::DurabilityMode::parse(&args.durability).expect("clap checked it");
    if kinds.contains(&FaultKind::Power) && durability != ferrotx_cluster::DurabilityMode::Sync {
        bail!(
            "--faults power cuts every node's power at once and restarts the cluster from its \
             disks: it needs --durability sync (flush mode's consistent cut at a restart is \
             not built yet; memory mode keeps nothing)"
        );
    }
    let options_for = |workload: &str, seed: u64| {
        if recovery_scenarios::is_recovery(workload) {
            return RunOptions {
                membership_strict_ticks: args.strict_ticks,
                durability,
                disk_lie: args.disk_lie,
                checkpoint_log_bytes: args.checkpoint_log_bytes,
                checkpoint_unsettled: args.checkpoint_unsettled,
                ..recovery_scenarios::options(workload, seed)
            };
        }
        if membership_scenarios::is_membership(workload) {
            return RunOptions {
                membership_strict_ticks: args.strict_ticks,
                durability,
                disk_lie: args.disk_lie,
                checkpoint_log_bytes: args.checkpoint_log_bytes,
                checkpoint_unsettled: args.checkpoint_unsettled,
                ..membership_scenarios::options(workload, seed)
            };
        }
        RunOptions {
            durability,
            disk_lie: args.disk_lie,
            checkpoint_log_bytes: args.checkpoint_log_bytes,
            checkpoint_unsettled: args.checkpoint_unsettled,
            nodes: args.nodes,
            replicas: args.replicas,
            faults: kinds.clone(),
            membership: (args.membership || kinds.contains(&FaultKind::Crash))
                .then(membership::default_options),
            membership_strict_ticks: args.strict_ticks,
            ..RunOptions::new(seed)
        }
    };

    if let Some(seed) = args.seed {
        let mut failed = false;
        for workload in &workloads {
            let mut scenario = scenario_of(workload, seed);
            let report = run(&mut *scenario, &options_for(workload, seed));
            print_replay(&report);
            failed |= !report_passes(&report);
        }
        if failed {
            bail!("seed {seed} failed");
        }
        return Ok(());
    }

    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let total = args.seeds * workloads.len() as u64;
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} seeds ({per_sec}) {msg}",
        )
        .expect("a valid progress template"),
    );
    let next = AtomicU64::new(0);
    let reports: Mutex<Vec<RunReport>> = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let workload = workloads[(i / args.seeds) as usize];
                    let seed = args.seed_base + i % args.seeds;
                    let mut scenario = scenario_of(workload, seed);
                    let report = run(&mut *scenario, &options_for(workload, seed));
                    if !report_passes(&report) {
                        bar.println(format!(
                            "FAILED {workload} seed {seed}: {}",
                            first_problem(&report)
                        ));
                    }
                    reports.lock().expect("no panics").push(report);
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    let wall_s = started.elapsed().as_secs_f64();
    let mut reports = reports.into_inner().expect("no panics");
    reports.sort_by_key(|r| (r.workload, r.seed));

    let mut summary = Report {
        seeds: total,
        wall_s,
        simulated_s: 0.0,
        simulated_s_per_wall_s: 0.0,
        fault_kinds: kinds.iter().map(|k| k.name()).collect(),
        faults_injected: kinds.iter().map(|k| (k.name(), 0)).collect(),
        buggify_fired: BTreeMap::new(),
        recovery: RecoverySummary::default(),
        shipped: 0,
        ship_batches: 0,
        ship_answered_again: 0,
        checkpoints_started: 0,
        checkpoints_completed: 0,
        checkpoints_abandoned: 0,
        power_cuts: 0,
        damaged_disks: 0,
        damage_refused: 0,
        fills_assigned: 0,
        fills_counted: 0,
        admitted_while_dropping: 0,
        workloads: BTreeMap::new(),
    };
    let mut failures = Vec::new();
    for report in &reports {
        let w = summary.workloads.entry(report.workload).or_default();
        w.seeds += 1;
        w.committed += report.checked.committed;
        w.aborted += report.checked.aborted;
        w.indeterminate += report.checked.indeterminate;
        w.simulated_s += report.simulated_ns as f64 / 1e9;
        w.recovery.add(&report.recovery);
        summary.recovery.add(&report.recovery);
        w.shipped += report.shipped;
        summary.shipped += report.shipped;
        summary.ship_batches += report.ship_batches;
        summary.ship_answered_again += report.ship_answered_again;
        summary.checkpoints_started += report.checkpoints.started;
        summary.checkpoints_completed += report.checkpoints.completed;
        summary.checkpoints_abandoned += report.checkpoints.abandoned;
        summary.power_cuts += report.power_cuts;
        summary.damaged_disks += report.damaged_disks;
        summary.damage_refused += report.damage_refused;
        if let Some(m) = &report.membership {
            w.fills_assigned += m.fills_assigned;
            w.fills_counted += m.fills_counted;
            summary.fills_assigned += m.fills_assigned;
            summary.fills_counted += m.fills_counted;
            summary.admitted_while_dropping += m.situations.admitted_while_dropping;
            if m.situations.admitted_while_dropping > 0 {
                w.admitted_while_dropping_seeds.push(report.seed);
            }
            if m.lost_partitions > 0 || m.majority_down {
                w.beyond_f_seeds.push(report.seed);
            }
        }
        summary.simulated_s += report.simulated_ns as f64 / 1e9;
        if recovery_scenarios::is_recovery(report.workload) {
            *w.traps_sprung.get_or_insert(0) += u64::from(recovery_scenarios::sprung(report));
        }
        if own_verdict(report.workload) {
            if report_passes(report) {
                w.passed += 1;
            } else {
                w.failed_seeds.push(report.seed);
                failures.push(report);
            }
        } else if !report.checked.violations.is_empty() || !membership_violations(report).is_empty()
        {
            w.failed_seeds.push(report.seed);
            failures.push(report);
        } else if report.liveness.is_some() {
            w.stalled_seeds.push(report.seed);
            failures.push(report);
        } else {
            w.passed += 1;
        }
        for (kind, n) in &report.faults {
            *summary.faults_injected.entry(kind).or_default() += n;
        }
        for (point, n) in &report.buggify {
            *summary.buggify_fired.entry(point).or_default() += n;
        }
    }
    summary.simulated_s_per_wall_s = summary.simulated_s / wall_s.max(1e-9);

    println!(
        "{} seeds checked in {wall_s:.1} s ({:.1} simulated s per wall s, {jobs} threads); faults: {}",
        total,
        summary.simulated_s_per_wall_s,
        if kinds.is_empty() {
            "none".to_string()
        } else {
            summary.fault_kinds.join(",")
        }
    );
    println!(
        "{:<30} {:>6} {:>6} {:>7} {:>7} {:>10} {:>9} {:>13}",
        "workload", "seeds", "passed", "failed", "stalled", "committed", "aborted", "indeterminate"
    );
    for (name, w) in &summary.workloads {
        println!(
            "{name:<30} {:>6} {:>6} {:>7} {:>7} {:>10} {:>9} {:>13}",
            w.seeds,
            w.passed,
            w.failed_seeds.len(),
            w.stalled_seeds.len(),
            w.committed,
            w.aborted,
            w.indeterminate
        );
    }
    println!("{}", summary.recovery.line());
    println!(
        "shipped: {} operations run at their keys' primary in {} batches; {} asked again after a configuration change",
        summary.shipped, summary.ship_batches, summary.ship_answered_again
    );
    if summary.checkpoints_started > 0 {
        println!(
            "checkpoints: {} rounds started, {} complete (logs truncated), {} abandoned",
            summary.checkpoints_started,
            summary.checkpoints_completed,
            summary.checkpoints_abandoned
        );
    }
    if summary.power_cuts > 0 {
        println!(
            "power: {} whole-cluster power cuts; {} power-ons found a node's disk damaged \
             (it rejoined as a new life, refilled), {} with the only copy of a partition \
             on it (a real node refuses; loaded here)",
            summary.power_cuts, summary.damaged_disks, summary.damage_refused
        );
    }
    if summary.fills_assigned > 0 {
        println!(
            "data recovery: {} backups given to fill, {} filled and counted as copies",
            summary.fills_assigned, summary.fills_counted
        );
    }
    if summary.admitted_while_dropping > 0 {
        println!(
            "membership: {} views admitted a new life while dropping a member",
            summary.admitted_while_dropping
        );
    }
    for (name, w) in &summary.workloads {
        if let Some(sprung) = w.traps_sprung {
            println!("{name}: trap sprang in {sprung} of {} seeds", w.seeds);
        }
    }
    let injected: Vec<String> = summary
        .faults_injected
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!("faults injected: {}", injected.join(", "));
    if !summary.buggify_fired.is_empty() {
        let fired: Vec<String> = summary
            .buggify_fired
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        println!("fault points fired: {}", fired.join(", "));
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    // Every kind enabled must have happened somewhere, or the sweep tested less than it
    // says.
    let silent: Vec<&str> = summary
        .faults_injected
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(k, _)| *k)
        .collect();
    let faults_flag = if kinds.is_empty() {
        "none".to_string()
    } else {
        summary.fault_kinds.join(",")
    };
    for report in failures.iter().take(10) {
        if own_verdict(report.workload) {
            println!(
                "FAILED {} seed {}: {}\n  replay: ferrotx sim --workload {} --seed {}",
                report.workload,
                report.seed,
                first_problem(report),
                report.workload,
                report.seed
            );
            continue;
        }
        println!(
            "FAILED {} seed {}: {}\n  replay: ferrotx sim --workload {} --seed {} --faults {faults_flag} --nodes {} --replicas {}{}",
            report.workload,
            report.seed,
            first_problem(report),
            report.workload,
            report.seed,
            args.nodes,
            args.replicas,
            if report.membership.is_some() {
                " --membership"
            } else {
                ""
            }
        );
        if args.durability != "memory" {
            println!(
                "    (with --durability {} --checkpoint-log-bytes {})",
                args.durability, args.checkpoint_log_bytes
            );
        }
    }
    // The closing line CI counts.
    println!(
        "sim: {} passed, {} failed",
        total - failures.len() as u64,
        failures.len()
    );
    if !failures.is_empty() {
        bail!("{} of {total} seeds failed", failures.len());
    }
    if !silent.is_empty() {
        bail!(
            "fault kinds enabled but never injected in {total} seeds: {}",
            silent.join(", ")
        );
    }
    Ok(())
}

/// Whether a run passes: no violation (of the workload's checkers, or of membership's),
/// and every client answered. Runs beyond f (a partition lost every copy to crashes, or
/// no majority is left) report their findings without failing (see `RunReport`).
fn report_passes(report: &RunReport) -> bool {
    if recovery_scenarios::is_recovery(report.workload) {
        return recovery_scenarios::failure(report).is_none();
    }
    if membership_scenarios::is_membership(report.workload) {
        // Their own verdict: the membership checkers, with what the known membership
        // bugs cause reported rather than failed (see `membership_scenarios::failure`).
        return membership_scenarios::failure(report.workload, report).is_none();
    }
    report.checked.violations.is_empty()
        && membership_violations(report).is_empty()
        && report.liveness.is_none()
}

fn membership_violations(report: &RunReport) -> &[String] {
    report
        .membership
        .as_ref()
        .map_or(&[], |m| m.violations.as_slice())
}

/// Whether a scenario sets its own nodes and faults and gives its own verdict (the
/// membership-* and recovery-* scenarios).
fn own_verdict(workload: &str) -> bool {
    membership_scenarios::is_membership(workload) || recovery_scenarios::is_recovery(workload)
}

fn first_problem(report: &RunReport) -> String {
    if recovery_scenarios::is_recovery(report.workload) {
        let attack = report.attack.join("; ");
        return format!(
            "{} [{attack}]",
            recovery_scenarios::failure(report).unwrap_or_else(|| "passed".to_string())
        );
    }
    if membership_scenarios::is_membership(report.workload) {
        return membership_scenarios::failure(report.workload, report)
            .unwrap_or_else(|| "passed".to_string());
    }
    if let Some(v) = membership_violations(report).first() {
        return format!("membership: {v}");
    }
    match (report.checked.violations.first(), &report.liveness) {
        (Some(v), _) => format!("{v} ({} violations)", report.checked.violations.len()),
        (None, Some(l)) => l.clone(),
        (None, None) => "passed".to_string(),
    }
}

fn print_replay(report: &RunReport) {
    println!(
        "{} seed {}: {} committed, {} aborted, {} indeterminate, {:.3} simulated s",
        report.workload,
        report.seed,
        report.checked.committed,
        report.checked.aborted,
        report.checked.indeterminate,
        report.simulated_ns as f64 / 1e9
    );
    println!("faults injected: {:?}", report.faults);
    for line in &report.attack {
        println!("attack: {line}");
    }
    let mut recovery = RecoverySummary::default();
    recovery.add(&report.recovery);
    println!("{}", recovery.line());
    if !report.buggify.is_empty() {
        println!("fault points: {:?}", report.buggify);
    }
    if let Some(liveness) = &report.liveness {
        println!("liveness: {liveness}");
    }
    if own_verdict(report.workload) && !report_passes(report) {
        println!("failed: {}", first_problem(report));
    }
    for violation in &report.checked.violations {
        println!("violation: {violation}");
    }
    if let Some(m) = &report.membership {
        println!(
            "membership: bootstrapped in {:.1} ms, {} steps, converged {} and views at full strength {} after the last fault",
            m.bootstrap_ns as f64 / 1e6,
            m.steps,
            m.converged_after_ns
                .map_or("never".to_string(), |t| format!("{:.1} ms", t as f64 / 1e6)),
            m.strength_after_ns
                .map_or("never".to_string(), |t| format!("{:.1} ms", t as f64 / 1e6))
        );
        if let Some(c) = &m.coord {
            println!(
                "coordination service: {} calls late, {} unavailable, swaps of unknown outcome {} stored and {} not, went back {} times (found behind by a node {} times)",
                c.delayed,
                c.unavailable,
                c.unknown_stored,
                c.unknown_not_stored,
                c.went_back,
                c.found_behind
            );
        }
        for (id, members, cm) in &m.views {
            println!("  view {id}: members {members:?}, CM {cm}");
        }
        for (at, node, view) in &m.removed {
            println!(
                "  node {node} removed (view {view}) at {:.3} ms",
                *at as f64 / 1e6
            );
        }
        if !m.healthy_removed.is_empty() {
            println!(
                "  healthy members removed (node, view): {:?}",
                m.healthy_removed
            );
        }
        if m.lost_partitions > 0 {
            println!("  partitions with no copy left: {}", m.lost_partitions);
        }
        for stale in &m.stale_commits {
            println!("  stale commit: {stale}");
        }
        if m.stuck > 0 {
            println!(
                "  {} client coroutines stuck in a run beyond f (reported, not failed)",
                m.stuck
            );
        }
        if let Some(panic) = &m.panic {
            println!("  run ended by a panic: {panic}");
        }
        let s = &m.situations;
        for line in &s.plot {
            println!("  plot: {line}");
        }
        if s.admitted_while_dropping > 0 {
            println!(
                "  views that admitted a new life while dropping a member: {}",
                s.admitted_while_dropping
            );
        }
        if s.cm_cut_between_replies + s.cm_isolated_while_paused + s.suspended + s.rejoined > 0
            || !s.crashed_in_view.is_empty()
        {
            println!(
                "  situations: CM cut between two probe answers {}, CM cut off while a member was paused {}, crashes by the plot (node, members then) {:?}, lives suspended {}, readmitted with their copies {}, removed lives back as new ones {}, refilled {}",
                s.cm_cut_between_replies,
                s.cm_isolated_while_paused,
                s.crashed_in_view,
                s.suspended,
                s.readmitted,
                s.rejoined,
                s.refilled
            );
        }
        if !m.excused.is_empty() {
            println!(
                "  {} workload findings in a run beyond f (reported, not failed), first: {}",
                m.excused.len(),
                m.excused[0]
            );
        }
        for violation in &m.violations {
            println!("membership violation: {violation}");
        }
    }
    println!("digest: {:016x}", report.digest);
}
