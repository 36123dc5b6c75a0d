//! `ferrotx bench failover`: kill -9 nodes of one cluster of `ferrotx node` processes
//! under Redis load, one after another, and measure what clients see and how the cluster
//! gets back to full strength.
//!
//! The cluster is started once (one configuration file in a temporary directory, its
//! nodes started as `ferrotx node --config FILE --id N --lease-ms MS`, as `cluster local`
//! does); the run waits until `ferrotx status` shows the first view at every node and
//! every partition is served through every node. Then, for each kill:
//!
//! 1. a few Redis clients run over TCP (INCR of a few counters, SET of keys each written
//!    once); after a warm-up, one node chosen by a seeded generator (any node, the CM
//!    too) is sent SIGKILL, and from the kill the run measures
//!    - `detect_ms`: until the coordination file (the view `ferrotx status` reads) holds a
//!      newer view without the killed node: the CM's compare-and-swap of the view, polled
//!      every 2 ms. Members adopt and commit it a little later;
//!    - `recovery_ms`: until one probe pass succeeds: through every survivor's Redis port,
//!      a GET and a SET of one key of every partition, all answered without error. Passes
//!      are repeated every 2 ms until a deadline; a kill that never passes is "not
//!      recovered";
//! 2. the killed node is restarted with `--join` (a new member, without data: data
//!    recovery gives it backups to fill), and from the restart the run measures
//!    - `rejoin_ms`: until a view has it as a member again;
//!    - `rereplicated_ms`: until the coordination file holds a view at full strength:
//!      every node a member, every partition with its configured copies, no backup being
//!      filled (polled every 2 ms). `ferrotx status --json` must then show the same
//!      (every member alive at that view, `backups_filling` 0, `short_of_copies` 0);
//!      a kill that does not get there within its deadline counts as not at full
//!      strength;
//! 3. the load runs a little longer and stops, and every write it acknowledged is read
//!    back through the kill's survivors: every acknowledged `SET key:K:T:N N` must read
//!    `N`, every counter at least the increments acknowledged since the cluster started
//!    (and at least the largest value an INCR answered). Whatever is missing is counted
//!    as lost.
//!
//! The next kill runs on the same cluster, with new load clients; a kill is only made on
//! a cluster that can take it without losing a partition (every node a member, every
//! partition with two copies or more), else the run stops early and says why. At the end
//! every write acknowledged during the whole run is read back again through every live
//! member: the run's `acknowledged_lost`. Nothing here retries to hide an error: every
//! error reply and timeout the clients saw is counted by kind.
//!
//! `--fresh-cluster-per-kill` runs each kill on a cluster of its own instead (the first
//! version of this benchmark): the same steps, the cluster stopped after the read-back.
//!
//! Every wait has a deadline; node processes are stopped (only the ones this started)
//! and the temporary directory removed when a run ends, however it ends; it is kept
//! (and its path printed) with `--keep-logs`, or when a kill was not recovered, did not
//! get back to full strength, or lost an acknowledged write.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ferrotx_cluster::{Configuration, View};
use ferrotx_coord::FileCoordination;
use ferrotx_redis_exec::{RespValue, encode_request, parse_reply, store_key};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::processes::node_command;

/// Copies of each partition (at most the number of nodes).
const REPLICAS: u8 = 3;
/// Worker threads per node (as `cluster local`'s default).
const THREADS_PER_NODE: u16 = 1;
/// Partitions per node (as `cluster local`'s default).
const PARTITIONS_PER_NODE: u32 = 4;
/// Counters the clients INCR (`ctr:0` ..).
const COUNTERS: usize = 8;
/// How often detection and recovery are polled.
const POLL: Duration = Duration::from_millis(2);
/// Longest wait for a new cluster to form (every node a member, alive, at the view).
const FORM_DEADLINE: Duration = Duration::from_secs(60);
/// Longest wait for a `ferrotx status` process.
const STATUS_DEADLINE: Duration = Duration::from_secs(10);
/// Longest the read-back of acknowledged writes may take in all.
const CHECK_DEADLINE: Duration = Duration::from_secs(120);
/// Attempts at reading one key back before it counts as unverified (each may take the
/// server's 2 s of retries of a transaction that keeps aborting).
const CHECK_ATTEMPTS: u32 = 3;
/// Longest a node is given to stop after SIGTERM before it is killed.
const STOP_DEADLINE: Duration = Duration::from_secs(5);
/// Distinct "other" error messages kept per run.
const OTHER_MESSAGES_MAX: usize = 8;
/// Lost writes named per run.
const LOST_EXAMPLES_MAX: usize = 8;

/// What `ferrotx bench failover` runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FailoverOptions {
    /// Kills, in a row on one cluster (or each on a fresh cluster, with
    /// `fresh_cluster_per_kill`).
    pub kills: u32,
    /// Node processes per cluster.
    pub nodes: u16,
    /// The nodes' lease, in milliseconds.
    pub lease_ms: u64,
    /// Seed of the choice of nodes to kill and of the clients' commands.
    pub seed: u64,
    /// Redis client threads.
    pub clients: usize,
    /// First port: the cluster uses `nodes * (threads + 2)` consecutive ports from here.
    pub port_base: u16,
    /// Load before the kill, in milliseconds.
    pub warmup_ms: u64,
    /// Load after the killed node was restarted, in milliseconds.
    pub after_restart_ms: u64,
    /// Longest time from the kill to a successful probe pass, in milliseconds.
    pub recovery_deadline_ms: u64,
    /// A client's timeout for one request, in milliseconds.
    pub request_timeout_ms: u64,
    /// Longest time from the restart of a killed node until the cluster is back at full
    /// strength, in milliseconds.
    pub full_strength_deadline_ms: u64,
    /// Run each kill on a cluster of its own (started for it, stopped after it).
    pub fresh_cluster_per_kill: bool,
    /// Keep each run's directory (configuration, coordination file, node logs).
    pub keep_logs: bool,
}

impl FailoverOptions {
    /// The defaults of `ferrotx bench failover` for `kills` kills from `port_base`.
    pub fn new(kills: u32, port_base: u16) -> Self {
        Self {
            kills,
            nodes: 3,
            lease_ms: 100,
            seed: 1,
            clients: 4,
            port_base,
            warmup_ms: 1_000,
            after_restart_ms: 1_000,
            recovery_deadline_ms: 20_000,
            request_timeout_ms: 5_000,
            full_strength_deadline_ms: 60_000,
            fresh_cluster_per_kill: false,
            keep_logs: false,
        }
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.max(1))
    }
}

/// Error replies and failed requests, by kind.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Errors {
    /// `-TRYAGAIN ...`.
    pub tryagain: u64,
    /// `-CLUSTERDOWN ...` (ferrotx: reconfiguring, or a partition without a copy).
    pub clusterdown: u64,
    /// An error saying the outcome is unknown (the write may or may not have happened).
    pub outcome_unknown: u64,
    /// Any other error reply, or an unexpected reply.
    pub other: u64,
    /// No reply within the client's timeout (the connection is then dropped).
    pub timeout: u64,
    /// The connection broke (closed, reset) while a request was outstanding.
    pub connection: u64,
}

impl Errors {
    fn add(&mut self, other: &Errors) {
        self.tryagain += other.tryagain;
        self.clusterdown += other.clusterdown;
        self.outcome_unknown += other.outcome_unknown;
        self.other += other.other;
        self.timeout += other.timeout;
        self.connection += other.connection;
    }

    /// `self` less `earlier` (counts of an earlier moment).
    fn since(&self, earlier: &Errors) -> Errors {
        Errors {
            tryagain: self.tryagain - earlier.tryagain,
            clusterdown: self.clusterdown - earlier.clusterdown,
            outcome_unknown: self.outcome_unknown - earlier.outcome_unknown,
            other: self.other - earlier.other,
            timeout: self.timeout - earlier.timeout,
            connection: self.connection - earlier.connection,
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.tryagain
            + self.clusterdown
            + self.outcome_unknown
            + self.other
            + self.timeout
            + self.connection
    }
}

/// Errors of the requests sent before the kill, between the kill and the restart of the
/// killed node, and after the restart (while the cluster gets back to full strength, and
/// after).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ErrorsByPhase {
    pub before_kill: Errors,
    pub after_kill: Errors,
    pub after_restart: Errors,
}

/// The phases of a run, as the load clients see them.
const PHASE_BEFORE_KILL: u8 = 0;
const PHASE_AFTER_KILL: u8 = 1;
const PHASE_AFTER_RESTART: u8 = 2;

/// Median, maximum and number of measurements (null when there are none).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Summary {
    pub p50: Option<f64>,
    pub max: Option<f64>,
    pub count: usize,
}

impl Summary {
    fn of(values: impl Iterator<Item = f64>) -> Self {
        let mut values: Vec<f64> = values.collect();
        values.sort_by(f64::total_cmp);
        Self {
            p50: (!values.is_empty()).then(|| values[(values.len() - 1) / 2]),
            max: values.last().copied(),
            count: values.len(),
        }
    }
}

/// One kill.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    /// 1-based.
    pub kill: u32,
    /// The node killed.
    pub node_killed: u16,
    /// The killed node was the CM of the view before the kill.
    pub killed_was_cm: bool,
    /// The view before the kill.
    pub view_before: u64,
    /// The first view without the killed node, if one came before the deadline.
    pub view_after: Option<u64>,
    /// Members of that view.
    pub members_after: Option<Vec<u16>>,
    /// From the kill to the view without the killed node in the coordination file.
    pub detect_ms: Option<f64>,
    /// From the kill to the end of the first successful probe pass; null if none passed
    /// before the deadline.
    pub recovery_ms: Option<f64>,
    /// Probe passes tried (the last one succeeded if recovered).
    pub probe_passes: u64,
    /// Why the last failed probe pass failed.
    pub last_probe_failure: Option<String>,
    /// From the restart of the killed node (with `--join`) to a view with it again.
    pub rejoin_ms: Option<f64>,
    /// That view: the first with the restarted node.
    pub view_admitted: Option<u64>,
    /// Backups that view gave to fill (partition, node), the restarted node's and others'.
    pub fills_admitted: Option<Vec<(u32, u16)>>,
    /// From the restart of the killed node to the first view at full strength in the
    /// coordination file: every node a member, every partition with its configured
    /// copies, no backup being filled. Null if none came before the deadline.
    pub rereplicated_ms: Option<f64>,
    /// That view.
    pub view_full_strength: Option<u64>,
    /// The cluster got back to full strength: the view above came, and `ferrotx status
    /// --json` then showed it at every member with `backups_filling` 0 and
    /// `short_of_copies` 0, all before the deadline.
    pub full_strength: bool,
    /// If not, the last `ferrotx status --json` seen (or the view, if status failed).
    pub short_of_full_strength: Option<serde_json::Value>,
    /// From the kill to the last error any client saw (null: none after the kill).
    pub last_error_after_kill_ms: Option<f64>,
    /// Requests this kill's load clients sent.
    pub requests: u64,
    /// SETs answered +OK.
    pub acknowledged_sets: u64,
    /// INCRs answered with an integer.
    pub acknowledged_increments: u64,
    /// Both.
    pub acknowledged_writes: u64,
    /// This kill's acknowledged SET keys read back (through the kill's survivors, after
    /// it) without their value.
    pub lost_sets: u64,
    /// Increments missing from counters (below the count acknowledged since the cluster
    /// started or the largest acknowledged value).
    pub lost_increments: u64,
    /// Both.
    pub lost: u64,
    /// Acknowledged writes that could not be read back (every attempt failed with an
    /// error or timeout, or the read-back's deadline passed first): neither lost nor kept.
    pub unverified: u64,
    /// Of those, the ones not even tried: the read-back's deadline had passed.
    pub unchecked: u64,
    /// How long the read-back took.
    pub check_ms: f64,
    /// A few of the lost writes.
    pub lost_examples: Vec<String>,
    /// A few of the unverified keys, with the last error reading them.
    pub unverified_examples: Vec<String>,
    /// Errors the load clients saw, by kind.
    pub errors: Errors,
    /// The same by the phase in which the request was sent.
    pub errors_by_phase: ErrorsByPhase,
    /// Connections the clients opened again after one broke or timed out.
    pub reconnects: u64,
    /// Distinct messages of the "other" errors (digits as #), with counts.
    pub other_errors: BTreeMap<String, u64>,
    /// The recovery counters of `ferrotx status --json` that grew during this kill: for
    /// each member's life, its counters after the kill's read-back less those after the
    /// kill before (a new life's in full), summed; `members` says how many answered. Null
    /// if none did.
    pub recovery: Option<serde_json::Value>,
    /// Anything else worth knowing (a node that exited, a view that lost a survivor).
    pub notes: Vec<String>,
}

/// A read-back of every write acknowledged since a cluster started, after its last kill.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReadBack {
    /// The kills the cluster went through.
    pub kills: u32,
    /// The members it was read through.
    pub through: Vec<u16>,
    pub acknowledged_writes: u64,
    pub lost_sets: u64,
    pub lost_increments: u64,
    pub lost: u64,
    pub unverified: u64,
    pub unchecked: u64,
    pub check_ms: f64,
    pub lost_examples: Vec<String>,
    pub unverified_examples: Vec<String>,
}

/// What `ferrotx bench failover` reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FailoverReport {
    /// Kills asked for.
    pub kills: u32,
    /// Kills made (fewer if the run stopped early).
    pub kills_done: u32,
    pub nodes: u16,
    pub replicas: u8,
    pub lease_ms: u64,
    pub seed: u64,
    pub clients: usize,
    /// Each kill on a cluster of its own, rather than all on one.
    pub fresh_cluster_per_kill: bool,
    pub recovery_ms: Summary,
    pub detect_ms: Summary,
    pub rejoin_ms: Summary,
    pub rereplicated_ms: Summary,
    pub not_recovered: usize,
    pub not_detected: usize,
    /// Kills after which the cluster did not get back to full strength.
    pub not_full_strength: usize,
    /// Why the run stopped before its last kill, if it did.
    pub stopped_early: Option<String>,
    /// Writes acknowledged during the whole run.
    pub acknowledged_writes: u64,
    /// Of those, lost: the whole-run read-back's on one cluster, the sum of every kill's
    /// with a cluster per kill (each kill's read-back covers its cluster's whole run).
    pub acknowledged_lost: u64,
    /// Of those, not read back (every attempt failed).
    pub unverified: u64,
    /// The read-back of every write of the whole run after the last kill (one cluster
    /// only; null with a cluster per kill).
    pub read_back: Option<ReadBack>,
    pub errors: Errors,
    pub errors_by_phase: ErrorsByPhase,
    pub runs: Vec<RunReport>,
    /// The kills' `recovery` objects summed (`total`) and each (`per_run`), if any member
    /// answered in any kill; else null.
    pub recovery: Option<serde_json::Value>,
}

/// Runs every kill.
pub fn run(options: &FailoverOptions) -> anyhow::Result<FailoverReport> {
    anyhow::ensure!(options.kills >= 1, "--kills must be at least 1");
    anyhow::ensure!(options.nodes >= 2, "--nodes must be at least 2");
    anyhow::ensure!(options.lease_ms >= 1, "--lease-ms must be at least 1");
    anyhow::ensure!(options.clients >= 1, "--clients must be at least 1");
    let exe = std::env::current_exe().context("finding this executable to start nodes")?;
    let timeout = options.request_timeout();
    let mut runs = Vec::new();
    let mut cluster: Option<Cluster> = None;
    let mut stopped_early = None;
    let mut read_back = None;
    for kill in 1..=options.kills {
        if cluster.is_none() {
            let label = if options.fresh_cluster_per_kill {
                format!("kill {kill}: ")
            } else {
                String::new()
            };
            cluster = Some(
                Cluster::start(&exe, options, kill)
                    .with_context(|| format!("{label}starting the cluster"))?,
            );
        }
        let c = cluster.as_mut().expect("started");
        let run = match c.round(options, kill) {
            Ok(run) => run,
            Err(e) => {
                c.keep();
                return Err(e.context(format!("kill {kill}")));
            }
        };
        print_run(&run);
        runs.push(run);
        if options.fresh_cluster_per_kill {
            cluster = None;
        } else if kill < options.kills
            && let Err(why) = c.can_take_a_kill()
        {
            let why = format!("stopped after kill {kill}: {why}");
            println!("          {why}");
            c.keep();
            stopped_early = Some(why);
            break;
        }
    }
    if let Some(mut c) = cluster {
        let r = c.read_back_all(timeout);
        print_read_back(&r);
        if r.lost > 0 || r.unverified > 0 {
            c.keep();
        }
        read_back = Some(r);
    }
    let mut errors = Errors::default();
    let mut errors_by_phase = ErrorsByPhase::default();
    for run in &runs {
        errors.add(&run.errors);
        errors_by_phase
            .before_kill
            .add(&run.errors_by_phase.before_kill);
        errors_by_phase
            .after_kill
            .add(&run.errors_by_phase.after_kill);
        errors_by_phase
            .after_restart
            .add(&run.errors_by_phase.after_restart);
    }
    let recovery = runs.iter().any(|r| r.recovery.is_some()).then(|| {
        // Each kill's counters are those that grew during it, so they add up.
        let mut total = serde_json::Map::new();
        for run in runs.iter().filter_map(|r| r.recovery.as_ref()) {
            sum_into(&mut total, run);
        }
        serde_json::json!({
            "total": serde_json::Value::Object(total),
            "per_run": runs.iter().map(|r| r.recovery.clone()).collect::<Vec<_>>(),
        })
    });
    let (acknowledged_lost, unverified) = match &read_back {
        Some(r) => (r.lost, r.unverified),
        None => (
            runs.iter().map(|r| r.lost).sum(),
            runs.iter().map(|r| r.unverified).sum(),
        ),
    };
    Ok(FailoverReport {
        kills: options.kills,
        kills_done: runs.len() as u32,
        nodes: options.nodes,
        replicas: replicas(options.nodes),
        lease_ms: options.lease_ms,
        seed: options.seed,
        clients: options.clients,
        fresh_cluster_per_kill: options.fresh_cluster_per_kill,
        recovery_ms: Summary::of(runs.iter().filter_map(|r| r.recovery_ms)),
        detect_ms: Summary::of(runs.iter().filter_map(|r| r.detect_ms)),
        rejoin_ms: Summary::of(runs.iter().filter_map(|r| r.rejoin_ms)),
        rereplicated_ms: Summary::of(runs.iter().filter_map(|r| r.rereplicated_ms)),
        not_recovered: runs.iter().filter(|r| r.recovery_ms.is_none()).count(),
        not_detected: runs.iter().filter(|r| r.detect_ms.is_none()).count(),
        not_full_strength: runs.iter().filter(|r| !r.full_strength).count(),
        stopped_early,
        acknowledged_writes: runs.iter().map(|r| r.acknowledged_writes).sum(),
        acknowledged_lost,
        unverified,
        read_back,
        errors,
        errors_by_phase,
        runs,
        recovery,
    })
}

fn replicas(nodes: u16) -> u8 {
    u8::try_from(nodes).unwrap_or(u8::MAX).min(REPLICAS)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
}

/// One line per kill, as it ends.
fn print_run(r: &RunReport) {
    println!(
        "kill {:>3}: node {}{} detect {:>8} ms  recovered {:>8} ms  rejoin {:>8} ms  \
         full strength {:>8} ms{}  views {}..{}  acked {:>7}  lost {:>4}  unverified {:>3}  \
         errors {:>5} (before kill {}, after kill {}, after restart {})",
        r.kill,
        r.node_killed,
        if r.killed_was_cm { " (CM)" } else { "     " },
        opt_ms(r.detect_ms),
        opt_ms(r.recovery_ms),
        opt_ms(r.rejoin_ms),
        opt_ms(r.rereplicated_ms),
        if r.full_strength { "" } else { " (NOT)" },
        r.view_before,
        r.view_full_strength
            .or(r.view_admitted)
            .or(r.view_after)
            .map_or_else(|| "?".to_string(), |v| v.to_string()),
        r.acknowledged_writes,
        r.lost,
        r.unverified,
        r.errors.total(),
        r.errors_by_phase.before_kill.total(),
        r.errors_by_phase.after_kill.total(),
        r.errors_by_phase.after_restart.total()
    );
    for note in &r.notes {
        println!("          note: {note}");
    }
    print_examples(&r.lost_examples, &r.unverified_examples, r.unchecked);
}

/// The writes a read-back found lost or could not verify, and those it had no time for.
fn print_examples(lost: &[String], unverified: &[String], unchecked: u64) {
    for e in lost {
        println!("          lost: {e}");
    }
    for e in unverified {
        println!("          unverified: {e}");
    }
    if unchecked > 0 {
        println!(
            "          {unchecked} acknowledged writes not read back: the read-back's {CHECK_DEADLINE:?} ran out"
        );
    }
}

/// The line of the whole-run read-back.
fn print_read_back(r: &ReadBack) {
    println!(
        "read-back after {} kills through nodes {:?}: acked {}  lost {}  unverified {}  ({:.0} ms)",
        r.kills, r.through, r.acknowledged_writes, r.lost, r.unverified, r.check_ms
    );
    print_examples(&r.lost_examples, &r.unverified_examples, r.unchecked);
}

/// The summary table.
pub fn print_table(report: &FailoverReport) {
    println!(
        "failover: {} kills {}, {} nodes, {} replicas, lease {} ms, {} Redis clients, seed {}",
        report.kills_done,
        if report.fresh_cluster_per_kill {
            "each on a fresh cluster"
        } else {
            "on one cluster"
        },
        report.nodes,
        report.replicas,
        report.lease_ms,
        report.clients,
        report.seed
    );
    println!(
        "  {:<12} {:>10} {:>10} {:>6}",
        "", "p50 ms", "max ms", "count"
    );
    for (name, s) in [
        ("detect", &report.detect_ms),
        ("recovery", &report.recovery_ms),
        ("rejoin", &report.rejoin_ms),
        ("rereplicated", &report.rereplicated_ms),
    ] {
        println!(
            "  {:<12} {:>10} {:>10} {:>6}",
            name,
            opt_ms(s.p50),
            opt_ms(s.max),
            s.count
        );
    }
    println!(
        "  not recovered: {}   not detected: {}   not back to full strength: {}   \
         acknowledged writes: {}   lost: {}   unverified: {}",
        report.not_recovered,
        report.not_detected,
        report.not_full_strength,
        report.acknowledged_writes,
        report.acknowledged_lost,
        report.unverified
    );
    if let Some(why) = &report.stopped_early {
        println!("  {why}");
    }
    let e = &report.errors;
    println!(
        "  errors: TRYAGAIN {}  CLUSTERDOWN {}  outcome unknown {}  other {}  timeout {}  connection {}",
        e.tryagain, e.clusterdown, e.outcome_unknown, e.other, e.timeout, e.connection
    );
    let mut others: BTreeMap<&str, u64> = BTreeMap::new();
    for run in &report.runs {
        for (message, n) in &run.other_errors {
            *others.entry(message).or_default() += n;
        }
    }
    for (message, n) in others {
        println!("    other: {n} x {message}");
    }
    if report.recovery.is_none() {
        println!("  recovery counters: none (ferrotx status --json has no \"recovery\" field)");
    }
}

// ---------------------------------------------------------------------------------------
// The cluster.

/// The node processes of one run, by node id; stopped (SIGTERM, then SIGKILL) on drop.
struct Nodes {
    children: Vec<Option<Child>>,
}

impl Nodes {
    /// Sends SIGKILL to `node` and reaps it; returns the instant just before the signal.
    fn kill(&mut self, node: u16) -> anyhow::Result<Instant> {
        let mut child = self.children[usize::from(node)]
            .take()
            .with_context(|| format!("node {node} does not run"))?;
        let at = Instant::now();
        // `Child::kill` is SIGKILL on Unix.
        child
            .kill()
            .with_context(|| format!("killing node {node}"))?;
        child.wait()?;
        Ok(at)
    }

    /// Nodes that exited by themselves, with their status.
    fn exited(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for (node, child) in self.children.iter_mut().enumerate() {
            if let Some(c) = child
                && let Ok(Some(status)) = c.try_wait()
            {
                out.push(format!("node {node} exited by itself ({status})"));
                *child = None;
            }
        }
        out
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            if child.try_wait().ok().flatten().is_none() {
                // SAFETY: kill(2) on a child this process started and has not reaped.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + STOP_DEADLINE;
        for child in self.children.iter_mut().flatten() {
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A run's temporary directory, removed on drop unless kept.
struct RunDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("  kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Starts `ferrotx node` for `node`, its output appended to `node-N.log` in `dir`; with
/// `join`, as a restarted node that only joins the running cluster (`--join`).
fn start_node(
    exe: &Path,
    config: &Path,
    dir: &Path,
    node: u16,
    lease_ms: u64,
    join: bool,
) -> anyhow::Result<Child> {
    let log_path = dir.join(format!("node-{node}.log"));
    let log = File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let mut command = node_command(exe, config, node);
    command.arg("--lease-ms").arg(lease_ms.to_string());
    if join {
        command.arg("--join");
    }
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting node {node}"))
}

/// Runs `command`, killing it if it takes longer than `deadline`.
fn output_within(mut command: Command, deadline: Duration) -> Option<Output> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let end = Instant::now() + deadline;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().ok(),
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// `ferrotx status --json` of the cluster of `config`, or `None` if it failed.
fn status_json(exe: &Path, config: &Path) -> Option<serde_json::Value> {
    let mut command = Command::new(exe);
    command.args(["status", "--json", "--config"]).arg(config);
    let output = output_within(command, STATUS_DEADLINE)?;
    if !output.status.success() {
        return None;
    }
    serde_json::from_slice(&output.stdout).ok()
}

/// True if `status` shows every one of `nodes` nodes a member, alive, in its life, at
/// the current view.
fn formed(status: &serde_json::Value, nodes: u16) -> bool {
    let Some(members) = status["members"].as_array() else {
        return false;
    };
    members.len() == usize::from(nodes)
        && members.iter().all(|m| {
            m["alive"] == true && m["same_life"] == true && m["view"] == status["configuration"]
        })
}

/// The view in the coordination file, if it can be read.
fn read_view(state: &Path) -> Option<View> {
    FileCoordination::read_path(state).ok().flatten()
}

// ---------------------------------------------------------------------------------------
// Redis clients.

/// Why a request got no reply.
enum CallError {
    Timeout,
    Connection(String),
}

/// A blocking Redis client with a timeout per request.
struct Client {
    stream: TcpStream,
    received: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            received: Vec::new(),
        })
    }

    /// Sends one command, waits up to `timeout` for its reply.
    fn call(&mut self, args: &[&[u8]], timeout: Duration) -> Result<RespValue, CallError> {
        let deadline = Instant::now() + timeout;
        let mut request = Vec::new();
        encode_request(args, &mut request);
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => CallError::Timeout,
            _ => CallError::Connection(e.to_string()),
        };
        self.stream.set_write_timeout(Some(timeout)).map_err(io)?;
        self.stream.write_all(&request).map_err(io)?;
        let mut buf = [0u8; 16 * 1024];
        loop {
            match parse_reply(&self.received) {
                Ok(Some((value, used))) => {
                    self.received.drain(..used);
                    return Ok(value);
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(CallError::Connection(format!(
                        "malformed reply: {}",
                        e.problem
                    )));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CallError::Timeout);
            }
            self.stream.set_read_timeout(Some(left)).map_err(io)?;
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(CallError::Connection("connection closed".into())),
                Ok(n) => self.received.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
    }
}

/// The kind of an error reply, or `None` for "other".
fn error_kind<'e>(errors: &'e mut Errors, message: &[u8]) -> Option<&'e mut u64> {
    let text = String::from_utf8_lossy(message).to_ascii_lowercase();
    if text.starts_with("tryagain") {
        Some(&mut errors.tryagain)
    } else if text.starts_with("clusterdown") {
        Some(&mut errors.clusterdown)
    } else if text.contains("outcome unknown") || text.contains("unknown outcome") {
        Some(&mut errors.outcome_unknown)
    } else {
        None
    }
}

/// A message with its digits as `#`, cut short: the key of `other_errors`.
fn message_key(message: &[u8]) -> String {
    String::from_utf8_lossy(message)
        .chars()
        .take(100)
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect()
}

/// What one load client did.
#[derive(Default)]
struct ClientLog {
    /// The kill it ran for (K of its keys).
    round: u32,
    /// The client (T of its keys).
    thread: usize,
    /// N of every acknowledged `SET key:K:T:N N`.
    sets: Vec<u64>,
    /// Per counter: acknowledged INCRs, and the largest value one answered.
    increments: [(u64, i64); COUNTERS],
    requests: u64,
    errors: Errors,
    reconnects: u64,
    other_errors: BTreeMap<String, u64>,
    last_error: Option<Instant>,
    /// The phase of the request being sent.
    phase: u8,
    /// `errors` when each phase began (index 0 unused).
    phase_starts: [Option<Errors>; 3],
}

impl ClientLog {
    /// Enters `phase` (and any it skipped).
    fn enter(&mut self, phase: u8) {
        while self.phase < phase {
            self.phase += 1;
            self.phase_starts[usize::from(self.phase)] = Some(self.errors.clone());
        }
    }

    /// Errors by the phase their request was sent in.
    fn by_phase(&self) -> ErrorsByPhase {
        let start = |p: usize| self.phase_starts[p].clone();
        let after_kill = start(1).unwrap_or_else(|| self.errors.clone());
        let after_restart = start(2).unwrap_or_else(|| self.errors.clone());
        ErrorsByPhase {
            before_kill: after_kill.clone(),
            after_kill: after_restart.since(&after_kill),
            after_restart: self.errors.since(&after_restart),
        }
    }

    fn error_reply(&mut self, message: &[u8]) {
        self.last_error = Some(Instant::now());
        match error_kind(&mut self.errors, message) {
            Some(count) => *count += 1,
            None => self.other(message_key(message)),
        }
    }

    fn other(&mut self, key: String) {
        self.last_error = Some(Instant::now());
        self.errors.other += 1;
        if self.other_errors.len() < OTHER_MESSAGES_MAX || self.other_errors.contains_key(&key) {
            *self.other_errors.entry(key).or_default() += 1;
        }
    }
}

/// Load client `thread` of kill `round`: INCR and SET until `stop`, through node `thread
/// % nodes` first and the next node whenever a connection breaks or a request times out.
fn load_client(
    round: u32,
    thread: usize,
    addrs: &[SocketAddr],
    stop: &AtomicBool,
    phase: &AtomicU8,
    seed: u64,
    timeout: Duration,
) -> ClientLog {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (thread as u64).wrapping_mul(0x9e37_79b9));
    let mut log = ClientLog {
        round,
        thread,
        ..ClientLog::default()
    };
    let mut node = thread % addrs.len();
    let mut client: Option<Client> = None;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = client.as_mut() else {
            match Client::connect(addrs[node], timeout) {
                Ok(c) => client = Some(c),
                Err(_) => {
                    node = (node + 1) % addrs.len();
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            continue;
        };
        log.enter(phase.load(Ordering::Relaxed));
        log.requests += 1;
        let (result, counter) = if rng.random_bool(0.5) {
            let k = rng.random_range(0..COUNTERS);
            let key = format!("ctr:{k}");
            (c.call(&[b"INCR", key.as_bytes()], timeout), Some(k))
        } else {
            n += 1;
            let key = format!("key:{round}:{thread}:{n}");
            let value = n.to_string();
            let args: [&[u8]; 3] = [b"SET", key.as_bytes(), value.as_bytes()];
            (c.call(&args, timeout), None)
        };
        match (result, counter) {
            (Ok(RespValue::Integer(v)), Some(k)) => {
                let (count, max) = &mut log.increments[k];
                *count += 1;
                *max = (*max).max(v);
            }
            (Ok(RespValue::Simple(s)), None) if s == b"OK" => log.sets.push(n),
            (Ok(RespValue::Error(message)), _) => log.error_reply(&message),
            (Ok(other), _) => log.other(format!("unexpected reply {other:?}")),
            (Err(e), _) => {
                log.last_error = Some(Instant::now());
                match e {
                    CallError::Timeout => log.errors.timeout += 1,
                    CallError::Connection(_) => log.errors.connection += 1,
                }
                client = None;
                log.reconnects += 1;
                node = (node + 1) % addrs.len();
            }
        }
    }
    log
}

/// One key per partition (`probe:I`, the first I that lands there).
fn probe_keys(config: &Configuration) -> Vec<String> {
    let count = config.partitions().partition_count() as usize;
    let mut keys: Vec<Option<String>> = vec![None; count];
    let mut left = count;
    let mut i = 0u64;
    while left > 0 {
        let key = format!("probe:{i}");
        let p = config
            .partition_of_key(store_key(key.as_bytes()).as_bytes())
            .0 as usize;
        if keys[p].is_none() {
            keys[p] = Some(key);
            left -= 1;
        }
        i += 1;
    }
    keys.into_iter().map(|k| k.expect("found")).collect()
}

/// The probe: a GET and a SET of every partition's key through each of some nodes.
struct Prober {
    keys: Vec<String>,
    clients: BTreeMap<u16, Client>,
    passes: u64,
    last_failure: Option<String>,
}

impl Prober {
    /// One pass through `nodes`, each request given at most `timeout` (and none past
    /// `deadline`); `Err` says what failed first.
    fn pass(
        &mut self,
        nodes: &[(u16, SocketAddr)],
        timeout: Duration,
        deadline: Instant,
    ) -> Result<(), String> {
        self.passes += 1;
        let value = self.passes.to_string();
        for &(node, addr) in nodes {
            let left = || {
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(timeout)
            };
            let client = match self.clients.entry(node) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(
                    Client::connect(addr, left().max(Duration::from_millis(1)))
                        .map_err(|e| format!("node {node}: connect: {e}"))?,
                ),
            };
            for (p, key) in self.keys.iter().enumerate() {
                for args in [
                    vec![&b"GET"[..], key.as_bytes()],
                    vec![&b"SET"[..], key.as_bytes(), value.as_bytes()],
                ] {
                    let what = format!("node {node} partition {p} {}", args[0].escape_ascii());
                    let left = left();
                    if left.is_zero() {
                        return Err(format!("{what}: deadline"));
                    }
                    match client.call(&args, left) {
                        Ok(RespValue::Error(e)) => {
                            return Err(format!("{what}: -{}", e.escape_ascii()));
                        }
                        Ok(RespValue::Bulk(_) | RespValue::Null) if args.len() == 2 => {}
                        Ok(RespValue::Simple(s)) if args.len() == 3 && s == b"OK" => {}
                        Ok(other) => return Err(format!("{what}: unexpected {other:?}")),
                        Err(e) => {
                            self.clients.remove(&node);
                            return Err(match e {
                                CallError::Timeout => format!("{what}: timeout"),
                                CallError::Connection(e) => format!("{what}: {e}"),
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Passes until one succeeds; the time it ended, or `None` at the deadline.
    fn until_pass(
        &mut self,
        nodes: &[(u16, SocketAddr)],
        timeout: Duration,
        deadline: Instant,
    ) -> Option<Instant> {
        loop {
            match self.pass(nodes, timeout, deadline) {
                Ok(()) => return Some(Instant::now()),
                Err(e) => self.last_failure = Some(e),
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }
}

/// What the read-back found.
#[derive(Default)]
struct Check {
    lost_sets: u64,
    lost_increments: u64,
    /// Acknowledged writes whose key no attempt could read.
    unverified: u64,
    /// Of those, the ones not tried because the check's deadline had passed.
    unchecked: u64,
    examples: Vec<String>,
    unverified_examples: Vec<String>,
}

impl Check {
    fn lost(&mut self, example: String) {
        if self.examples.len() < LOST_EXAMPLES_MAX {
            self.examples.push(example);
        }
    }

    fn unverified(&mut self, writes: u64, example: String) {
        self.unverified += writes;
        if self.unverified_examples.len() < LOST_EXAMPLES_MAX {
            self.unverified_examples.push(example);
        }
    }
}

/// Why [`read_back`] has no value.
enum Unread {
    /// The check's deadline passed before it was tried.
    Deadline,
    /// Every attempt failed; the last one's error.
    Failed(String),
}

/// Reads `key` through the survivors (the next one after a failure), at most
/// [`CHECK_ATTEMPTS`] times, until one attempt gets a reply that is not an error.
fn read_back(
    client: &mut Option<Client>,
    next: &mut usize,
    survivors: &[SocketAddr],
    key: &str,
    timeout: Duration,
    deadline: Instant,
) -> Result<RespValue, Unread> {
    let mut last = Unread::Deadline;
    for _ in 0..CHECK_ATTEMPTS {
        if Instant::now() >= deadline {
            return Err(last);
        }
        let addr = survivors[*next % survivors.len()];
        if client.is_none() {
            match Client::connect(addr, timeout) {
                Ok(c) => *client = Some(c),
                Err(e) => last = Unread::Failed(format!("{addr}: connect: {e}")),
            }
        }
        if let Some(c) = client.as_mut() {
            match c.call(&[b"GET", key.as_bytes()], timeout) {
                Ok(RespValue::Error(e)) => {
                    last = Unread::Failed(format!("{addr}: -{}", e.escape_ascii()));
                }
                Ok(value) => return Ok(value),
                Err(CallError::Timeout) => {
                    last = Unread::Failed(format!("{addr}: timeout"));
                    *client = None;
                }
                Err(CallError::Connection(e)) => {
                    last = Unread::Failed(format!("{addr}: {e}"));
                    *client = None;
                }
            }
        }
        *next += 1;
        *client = None;
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(last)
}

/// Records a key [`read_back`] could not read, for `writes` acknowledged writes.
fn unread(out: &mut Check, key: &str, writes: u64, why: Unread) {
    match why {
        Unread::Deadline => {
            out.unchecked += writes;
            out.unverified += writes;
        }
        Unread::Failed(e) => out.unverified(writes, format!("{key}: {e}")),
    }
}

/// Reads back through `survivors` every SET acknowledged in `sets`, and every counter
/// with the increments acknowledged in `counters`.
fn check(
    sets: &[&ClientLog],
    counters: &[&ClientLog],
    survivors: &[SocketAddr],
    timeout: Duration,
) -> Check {
    let deadline = Instant::now() + CHECK_DEADLINE;
    // The SETs: one reader per load client (over every kill's logs of that client).
    let mut by_thread: BTreeMap<usize, Vec<&ClientLog>> = BTreeMap::new();
    for log in sets {
        by_thread.entry(log.thread).or_default().push(log);
    }
    let mut checks: Vec<Check> = std::thread::scope(|scope| {
        let readers: Vec<_> = by_thread
            .into_iter()
            .map(|(thread, logs)| {
                scope.spawn(move || {
                    let mut out = Check::default();
                    let mut client = None;
                    let mut next = thread;
                    for log in logs {
                        for &n in &log.sets {
                            let key = format!("key:{}:{thread}:{n}", log.round);
                            match read_back(
                                &mut client,
                                &mut next,
                                survivors,
                                &key,
                                timeout,
                                deadline,
                            ) {
                                Err(why) => unread(&mut out, &key, 1, why),
                                Ok(RespValue::Bulk(v)) if v == n.to_string().as_bytes() => {}
                                Ok(other) => {
                                    out.lost_sets += 1;
                                    out.lost(format!("{key}: acknowledged {n}, read {other:?}"));
                                }
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().unwrap_or_default())
            .collect()
    });
    let mut out = Check::default();
    // The counters.
    let mut client = None;
    let mut next = 0;
    for k in 0..COUNTERS {
        let count: u64 = counters.iter().map(|l| l.increments[k].0).sum();
        let largest: i64 = counters
            .iter()
            .map(|l| l.increments[k].1)
            .max()
            .unwrap_or(0);
        let at_least = i64::try_from(count).unwrap_or(i64::MAX).max(largest);
        if at_least == 0 {
            continue;
        }
        let key = format!("ctr:{k}");
        let value = match read_back(&mut client, &mut next, survivors, &key, timeout, deadline) {
            Err(why) => {
                unread(&mut out, &key, count, why);
                continue;
            }
            Ok(RespValue::Null) => Some(0),
            Ok(RespValue::Bulk(v)) => std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok()),
            Ok(_) => None,
        };
        match value {
            Some(v) if v >= at_least => {}
            Some(v) => {
                out.lost_increments += (at_least - v) as u64;
                out.lost(format!(
                    "{key}: {count} increments acknowledged (largest answer {largest}), read {v}"
                ));
            }
            None => {
                out.lost_increments += count;
                out.lost(format!(
                    "{key}: {count} increments acknowledged, unreadable"
                ));
            }
        }
    }
    for c in checks.drain(..) {
        out.lost_sets += c.lost_sets;
        out.unverified += c.unverified;
        out.unchecked += c.unchecked;
        for e in c.examples {
            out.lost(e);
        }
        for e in c.unverified_examples {
            if out.unverified_examples.len() < LOST_EXAMPLES_MAX {
                out.unverified_examples.push(e);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The cluster under test, and one kill.

/// A cluster of `ferrotx node` processes, from its start to its last kill.
struct Cluster {
    exe: PathBuf,
    /// Its configuration file.
    path: PathBuf,
    /// Its coordination file.
    state: PathBuf,
    /// Every node, with its Redis address.
    everyone: Vec<(u16, SocketAddr)>,
    prober: Prober,
    /// The load clients' logs of every kill so far.
    logs: Vec<ClientLog>,
    /// Each member life's recovery counters (`ferrotx status --json`) when last read.
    counters: BTreeMap<(u16, u64), serde_json::Value>,
    /// Kills so far.
    kills: u32,
    /// Stopped before `dir` is removed (fields are dropped in order).
    nodes: Nodes,
    dir: RunDir,
}

/// What became of a restarted node, from its restart.
#[derive(Default)]
struct Rejoin {
    rejoin_ms: Option<f64>,
    view_admitted: Option<u64>,
    fills_admitted: Option<Vec<(u32, u16)>>,
    rereplicated_ms: Option<f64>,
    view_full_strength: Option<u64>,
    full_strength: bool,
    short_of_full_strength: Option<serde_json::Value>,
}

impl Cluster {
    /// Starts every node and waits until they formed a cluster and every partition is
    /// served through every node. `first_kill` names its directory.
    fn start(exe: &Path, options: &FailoverOptions, first_kill: u32) -> anyhow::Result<Self> {
        let config = Configuration::local(
            options.nodes,
            replicas(options.nodes),
            THREADS_PER_NODE,
            PARTITIONS_PER_NODE,
            options.port_base,
        )
        .context("the cluster's configuration (--port-base, --nodes)")?;
        let dir = RunDir {
            path: std::env::temp_dir().join(format!(
                "ferrotx-failover-{}-{first_kill}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0)
            )),
            keep: options.keep_logs,
        };
        std::fs::create_dir_all(&dir.path)
            .with_context(|| format!("creating {}", dir.path.display()))?;
        let path = dir.path.join("cluster.toml");
        std::fs::write(&path, config.to_toml_string())
            .with_context(|| format!("writing {}", path.display()))?;
        let state = ferrotx_coord::default_state_path(&path);
        let everyone: Vec<(u16, SocketAddr)> = config
            .members()
            .iter()
            .map(|m| {
                Ok((
                    m.node,
                    m.resp_addr().context("a member without a Redis address")?,
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        let mut cluster = Self {
            exe: exe.to_path_buf(),
            path,
            state,
            everyone,
            prober: Prober {
                keys: probe_keys(&config),
                clients: BTreeMap::new(),
                passes: 0,
                last_failure: None,
            },
            logs: Vec::new(),
            counters: BTreeMap::new(),
            kills: 0,
            nodes: Nodes {
                children: Vec::new(),
            },
            dir,
        };
        for member in config.members() {
            let child = start_node(
                exe,
                &cluster.path,
                &cluster.dir.path,
                member.node,
                options.lease_ms,
                false,
            )?;
            cluster.nodes.children.push(Some(child));
        }

        // Formed: every node a member, alive, at the view; then every partition served
        // through every node.
        let form_deadline = Instant::now() + FORM_DEADLINE;
        loop {
            if status_json(exe, &cluster.path).is_some_and(|s| formed(&s, options.nodes)) {
                break;
            }
            let exited = cluster.nodes.exited();
            if !exited.is_empty() {
                cluster.keep();
                bail!("the cluster did not form: {}", exited.join("; "));
            }
            if Instant::now() >= form_deadline {
                cluster.keep();
                bail!(
                    "the cluster did not form in {FORM_DEADLINE:?} (status: {})",
                    status_json(exe, &cluster.path).map_or("none".into(), |s| s.to_string())
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster.serving(options.request_timeout())?;
        Ok(cluster)
    }

    /// Keeps the directory (configuration, coordination file, node logs).
    fn keep(&mut self) {
        self.dir.keep = true;
    }

    /// Waits until a probe pass succeeds through every node.
    fn serving(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.prober.last_failure = None;
        if self
            .prober
            .until_pass(&self.everyone, timeout, Instant::now() + FORM_DEADLINE)
            .is_none()
        {
            self.keep();
            bail!(
                "the cluster did not serve every partition through every node in \
                 {FORM_DEADLINE:?}: {}",
                self.prober.last_failure.clone().unwrap_or_default()
            );
        }
        Ok(())
    }

    /// `Ok` if a kill of any node cannot leave a partition without a copy: every node a
    /// member and alive, every partition with two copies or more.
    fn can_take_a_kill(&mut self) -> Result<(), String> {
        let exited = self.nodes.exited();
        if !exited.is_empty() {
            return Err(exited.join("; "));
        }
        let view = read_view(&self.state).ok_or("the coordination file holds no view")?;
        let missing: Vec<u16> = self
            .everyone
            .iter()
            .map(|e| e.0)
            .filter(|&n| view.incarnation(n).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(format!("view {} lacks nodes {missing:?}", view.id));
        }
        let thin: Vec<usize> = (0..view.copies.len())
            .filter(|&p| view.copies[p].len() < 2)
            .collect();
        if !thin.is_empty() {
            return Err(format!(
                "in view {} partitions {thin:?} have fewer than two copies: a kill could \
                 leave one without a copy",
                view.id
            ));
        }
        Ok(())
    }

    /// One kill: load, kill, detection and recovery, restart with `--join`, the wait for
    /// full strength, more load, and the read-back of this kill's writes.
    fn round(&mut self, options: &FailoverOptions, kill: u32) -> anyhow::Result<RunReport> {
        let timeout = options.request_timeout();
        let mut notes = Vec::new();
        if self.kills > 0 {
            // The restarted node too: every partition served through every node.
            self.serving(timeout)?;
        }
        self.kills += 1;
        let addrs: Vec<SocketAddr> = self.everyone.iter().map(|e| e.1).collect();

        // The load.
        let stop = Arc::new(AtomicBool::new(false));
        let phase = Arc::new(AtomicU8::new(PHASE_BEFORE_KILL));
        let load: Vec<_> = (0..options.clients)
            .map(|thread| {
                let addrs = addrs.clone();
                let stop = stop.clone();
                let phase = phase.clone();
                let seed = options
                    .seed
                    .wrapping_mul(1_000_003)
                    .wrapping_add(kill.into());
                std::thread::spawn(move || {
                    load_client(kill, thread, &addrs, &stop, &phase, seed, timeout)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(options.warmup_ms));

        // The kill.
        let mut rng = ChaCha8Rng::seed_from_u64(options.seed ^ (u64::from(kill) << 32));
        let victim = rng.random_range(0..options.nodes);
        let before = read_view(&self.state).context("reading the view before the kill")?;
        if before.members.len() != usize::from(options.nodes) {
            notes.push(format!(
                "before the kill the view {} had members {:?}",
                before.id,
                before.members.iter().map(|m| m.node).collect::<Vec<_>>()
            ));
        }
        if !full_strength(&before, options.nodes) {
            notes.push(format!(
                "before the kill the view {} was not at full strength: copies {:?}, filling {:?}",
                before.id, before.copies, before.filling
            ));
        }
        let recovery_deadline = Duration::from_millis(options.recovery_deadline_ms);
        phase.store(PHASE_AFTER_KILL, Ordering::Relaxed);
        let killed_at = self.nodes.kill(victim)?;
        let deadline = killed_at + recovery_deadline;
        let detector = {
            let state = self.state.clone();
            let before = before.id;
            std::thread::spawn(move || {
                loop {
                    if let Some(view) = read_view(&state)
                        && view.id > before
                        && view.incarnation(victim).is_none()
                    {
                        return Some((killed_at.elapsed(), view));
                    }
                    if Instant::now() >= deadline {
                        return None;
                    }
                    std::thread::sleep(POLL);
                }
            })
        };
        let survivors: Vec<(u16, SocketAddr)> = self
            .everyone
            .iter()
            .copied()
            .filter(|&(node, _)| node != victim)
            .collect();
        self.prober.clients.remove(&victim);
        let passes_before = self.prober.passes;
        self.prober.last_failure = None;
        let recovered = self.prober.until_pass(&survivors, timeout, deadline);
        let recovery_ms = recovered.map(|t| ms(t - killed_at));
        let detected = detector.join().unwrap_or(None);
        if let Some((_, view)) = &detected {
            let lost: Vec<u16> = survivors
                .iter()
                .map(|s| s.0)
                .filter(|&n| view.incarnation(n).is_none())
                .collect();
            if !lost.is_empty() {
                notes.push(format!(
                    "view {} without the killed node also lacks survivors {lost:?}",
                    view.id
                ));
            }
        }

        // The restart: a new process of the same node, admitted as a new member, given
        // backups to fill; then the wait until the cluster is back at full strength.
        phase.store(PHASE_AFTER_RESTART, Ordering::Relaxed);
        let restarted_at = Instant::now();
        self.nodes.children[usize::from(victim)] = Some(start_node(
            &self.exe,
            &self.path,
            &self.dir.path,
            victim,
            options.lease_ms,
            true,
        )?);
        let after_id = detected.as_ref().map_or(before.id, |(_, v)| v.id);
        let rejoin = self.rejoin(options, victim, after_id, restarted_at, &mut notes);
        std::thread::sleep(Duration::from_millis(options.after_restart_ms));
        stop.store(true, Ordering::Relaxed);
        let logs: Vec<ClientLog> = load
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect();

        // The read-back, through the survivors: this kill's SETs, and the counters with
        // every increment acknowledged since the cluster started.
        let survivor_addrs: Vec<SocketAddr> = survivors.iter().map(|s| s.1).collect();
        let check_started = Instant::now();
        let checked = {
            let these: Vec<&ClientLog> = logs.iter().collect();
            let all: Vec<&ClientLog> = self.logs.iter().chain(&logs).collect();
            check(&these, &all, &survivor_addrs, timeout)
        };
        let check_ms = ms(check_started.elapsed());
        let recovery = self.recovery_delta();
        notes.extend(self.nodes.exited());

        let mut errors = Errors::default();
        let mut errors_by_phase = ErrorsByPhase::default();
        let mut other_errors = BTreeMap::new();
        for log in &logs {
            errors.add(&log.errors);
            let by_phase = log.by_phase();
            errors_by_phase.before_kill.add(&by_phase.before_kill);
            errors_by_phase.after_kill.add(&by_phase.after_kill);
            errors_by_phase.after_restart.add(&by_phase.after_restart);
            for (m, n) in &log.other_errors {
                *other_errors.entry(m.clone()).or_default() += n;
            }
        }
        let (acknowledged_sets, acknowledged_increments) = acknowledged(logs.iter());
        let last_error = logs.iter().filter_map(|l| l.last_error).max();
        let report = RunReport {
            kill,
            node_killed: victim,
            killed_was_cm: before.cm == victim,
            view_before: before.id,
            view_after: detected.as_ref().map(|(_, v)| v.id),
            members_after: detected
                .as_ref()
                .map(|(_, v)| v.members.iter().map(|m| m.node).collect()),
            detect_ms: detected.as_ref().map(|(d, _)| ms(*d)),
            recovery_ms,
            probe_passes: self.prober.passes - passes_before,
            last_probe_failure: self.prober.last_failure.clone(),
            rejoin_ms: rejoin.rejoin_ms,
            view_admitted: rejoin.view_admitted,
            fills_admitted: rejoin.fills_admitted,
            rereplicated_ms: rejoin.rereplicated_ms,
            view_full_strength: rejoin.view_full_strength,
            full_strength: rejoin.full_strength,
            short_of_full_strength: rejoin.short_of_full_strength,
            last_error_after_kill_ms: last_error
                .filter(|&t| t >= killed_at)
                .map(|t| ms(t - killed_at)),
            requests: logs.iter().map(|l| l.requests).sum(),
            acknowledged_sets,
            acknowledged_increments,
            acknowledged_writes: acknowledged_sets + acknowledged_increments,
            lost_sets: checked.lost_sets,
            lost_increments: checked.lost_increments,
            lost: checked.lost_sets + checked.lost_increments,
            unverified: checked.unverified,
            unchecked: checked.unchecked,
            check_ms,
            lost_examples: checked.examples,
            unverified_examples: checked.unverified_examples,
            errors,
            errors_by_phase,
            reconnects: logs.iter().map(|l| l.reconnects).sum(),
            other_errors,
            recovery,
            notes,
        };
        if report.recovery_ms.is_none()
            || !report.full_strength
            || report.lost > 0
            || report.unverified > 0
        {
            self.keep();
        }
        self.logs.extend(logs);
        Ok(report)
    }

    /// Waits for the node `victim` restarted at `restarted_at` to be admitted (a view
    /// after `after_id` with it), and for a view at full strength, then for `ferrotx
    /// status` to show that view at every member; all within the deadline.
    fn rejoin(
        &mut self,
        options: &FailoverOptions,
        victim: u16,
        after_id: u64,
        restarted_at: Instant,
        notes: &mut Vec<String>,
    ) -> Rejoin {
        let deadline = restarted_at + Duration::from_millis(options.full_strength_deadline_ms);
        let mut out = Rejoin::default();
        let mut last_view = None;
        // The coordination file, polled as detection polls it.
        loop {
            if let Some(view) = read_view(&self.state) {
                if out.view_admitted.is_none()
                    && view.id > after_id
                    && view.incarnation(victim).is_some()
                {
                    out.rejoin_ms = Some(ms(restarted_at.elapsed()));
                    out.view_admitted = Some(view.id);
                    out.fills_admitted = Some(view.fills().collect());
                }
                if view.id > after_id && full_strength(&view, options.nodes) {
                    out.rereplicated_ms = Some(ms(restarted_at.elapsed()));
                    out.view_full_strength = Some(view.id);
                    break;
                }
                last_view = Some(view);
            }
            let exited = self.nodes.exited();
            if !exited.is_empty() {
                notes.extend(exited);
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(POLL);
        }
        // Then what `ferrotx status` shows.
        let mut last_status = None;
        if out.view_full_strength.is_some() {
            loop {
                match status_json(&self.exe, &self.path) {
                    Some(s) if status_full_strength(&s, options.nodes) => {
                        out.full_strength = true;
                        break;
                    }
                    s => last_status = s.or(last_status),
                }
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if !out.full_strength {
            let waited = deadline.saturating_duration_since(restarted_at);
            notes.push(match (out.view_admitted, out.view_full_strength) {
                (None, _) => format!(
                    "the restarted node {victim} was not admitted (no view after {after_id} \
                     with it) in {waited:?}"
                ),
                (Some(v), None) => format!(
                    "the restarted node {victim} was admitted in view {v}, but no view at full \
                     strength came in {waited:?}"
                ),
                (Some(_), Some(v)) => format!(
                    "view {v} is at full strength, but ferrotx status did not show it at every \
                     member in {waited:?}"
                ),
            });
            out.short_of_full_strength = last_status
                .or_else(|| status_json(&self.exe, &self.path))
                .or_else(|| last_view.and_then(|v| serde_json::to_value(v).ok()));
        }
        out
    }

    /// The recovery counters that grew since the last call, from `ferrotx status --json`:
    /// for each member's life, its counters less those it had then (a new life's whole).
    fn recovery_delta(&mut self) -> Option<serde_json::Value> {
        let status = status_json(&self.exe, &self.path)?;
        let mut total = serde_json::Map::new();
        let mut seen = BTreeMap::new();
        for m in status["members"].as_array()? {
            let (Some(node), Some(incarnation)) = (m["node"].as_u64(), m["incarnation"].as_u64())
            else {
                continue;
            };
            let now = &m["recovery"];
            if !now.is_object() {
                continue;
            }
            let life = (node as u16, incarnation);
            sum_into(&mut total, &less(now, self.counters.get(&life)));
            seen.insert(life, now.clone());
        }
        // Lives that left (a killed node's) are forgotten.
        let answered = seen.len();
        self.counters = seen;
        (answered > 0).then(|| {
            total.insert("members".into(), answered.into());
            serde_json::Value::Object(total)
        })
    }

    /// Reads back every write acknowledged since the cluster started, through every node
    /// that runs and is a member.
    fn read_back_all(&mut self, timeout: Duration) -> ReadBack {
        let view = read_view(&self.state);
        let through: Vec<(u16, SocketAddr)> = self
            .everyone
            .iter()
            .copied()
            .filter(|&(n, _)| {
                self.nodes.children[usize::from(n)].is_some()
                    && view.as_ref().is_some_and(|v| v.incarnation(n).is_some())
            })
            .collect();
        let logs: Vec<&ClientLog> = self.logs.iter().collect();
        let (sets, increments) = acknowledged(logs.iter().copied());
        let started = Instant::now();
        let checked = if through.is_empty() {
            let mut c = Check::default();
            c.unverified(sets + increments, "no live member to read through".into());
            c
        } else {
            let addrs: Vec<SocketAddr> = through.iter().map(|t| t.1).collect();
            check(&logs, &logs, &addrs, timeout)
        };
        ReadBack {
            kills: self.kills,
            through: through.iter().map(|t| t.0).collect(),
            acknowledged_writes: sets + increments,
            lost_sets: checked.lost_sets,
            lost_increments: checked.lost_increments,
            lost: checked.lost_sets + checked.lost_increments,
            unverified: checked.unverified,
            unchecked: checked.unchecked,
            check_ms: ms(started.elapsed()),
            lost_examples: checked.examples,
            unverified_examples: checked.unverified_examples,
        }
    }
}

/// Acknowledged SETs and INCRs of `logs`.
fn acknowledged<'l>(logs: impl Iterator<Item = &'l ClientLog>) -> (u64, u64) {
    logs.fold((0, 0), |(sets, increments), l| {
        (
            sets + l.sets.len() as u64,
            increments + l.increments.iter().map(|c| c.0).sum::<u64>(),
        )
    })
}

/// True if `view` has every one of `nodes` nodes as a member, every partition with its
/// configured copies, and no backup being filled.
fn full_strength(view: &View, nodes: u16) -> bool {
    let replicas = usize::from(replicas(nodes));
    view.members.len() == usize::from(nodes)
        && view.fills().next().is_none()
        && view.copies.iter().all(|c| c.len() == replicas)
}

/// True if `status` (`ferrotx status --json`) shows the cluster formed (see [`formed`])
/// and at full strength: every partition with its configured copies, no backup being
/// filled, none short of copies or without one.
fn status_full_strength(status: &serde_json::Value, nodes: u16) -> bool {
    let replicas = u64::from(replicas(nodes));
    formed(status, nodes)
        && status["replicas"].as_u64() == Some(replicas)
        && status["backups_filling"].as_u64() == Some(0)
        && status["short_of_copies"].as_u64() == Some(0)
        && status["without_copy"].as_u64() == Some(0)
        && status["copies"].as_array().is_some_and(|copies| {
            copies
                .iter()
                .all(|c| c.as_array().is_some_and(|c| c.len() as u64 == replicas))
        })
}

/// `now` less `before` (objects of numbers and of such objects, as [`sum_into`] takes);
/// what `before` lacks is kept whole.
fn less(now: &serde_json::Value, before: Option<&serde_json::Value>) -> serde_json::Value {
    match now {
        serde_json::Value::Object(object) => serde_json::Value::Object(
            object
                .iter()
                .map(|(k, v)| (k.clone(), less(v, before.and_then(|b| b.get(k)))))
                .collect(),
        ),
        serde_json::Value::Number(n) => {
            match (n.as_u64(), before.and_then(serde_json::Value::as_u64)) {
                (Some(n), Some(b)) => n.saturating_sub(b).into(),
                _ => now.clone(),
            }
        }
        other => other.clone(),
    }
}

/// Adds the numbers of `value` (an object of numbers and objects of numbers) into `total`.
fn sum_into(total: &mut serde_json::Map<String, serde_json::Value>, value: &serde_json::Value) {
    let Some(object) = value.as_object() else {
        return;
    };
    for (key, v) in object {
        if let Some(n) = v.as_u64() {
            let sum = total
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
                + n;
            total.insert(key.clone(), sum.into());
        } else if v.is_object() {
            let entry = total
                .entry(key.clone())
                .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
            if let Some(inner) = entry.as_object_mut() {
                sum_into(inner, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotx_cluster::ViewMember;

    fn view(members: &[u16], copies: Vec<Vec<u16>>, filling: Vec<Vec<u16>>) -> View {
        View {
            id: 7,
            cm: members[0],
            members: members
                .iter()
                .map(|&node| ViewMember {
                    node,
                    incarnation: 1,
                })
                .collect(),
            copies,
            filling,
            suspended: Vec::new(),
            suspended_copies: Vec::new(),
        }
    }

    #[test]
    fn full_strength_wants_every_node_every_copy_and_no_fill() {
        let all = vec![vec![0, 1, 2], vec![1, 2, 0]];
        assert!(full_strength(&view(&[0, 1, 2], all.clone(), vec![]), 3));
        // A node missing, a copy short, a backup still filling.
        assert!(!full_strength(&view(&[0, 1], all.clone(), vec![]), 3));
        let short = vec![vec![0, 1], vec![1, 2, 0]];
        assert!(!full_strength(&view(&[0, 1, 2], short.clone(), vec![]), 3));
        assert!(!full_strength(
            &view(&[0, 1, 2], short, vec![vec![2], vec![]]),
            3
        ));
    }

    #[test]
    fn status_full_strength_reads_ferrotx_status_json() {
        let member = |node: u16| serde_json::json!({"node": node, "alive": true, "same_life": true, "view": 9});
        let status = |filling: u64, short: u64, copies: serde_json::Value| {
            serde_json::json!({
                "configuration": 9,
                "members": [member(0), member(1), member(2)],
                "replicas": 3,
                "copies": copies,
                "backups_filling": filling,
                "short_of_copies": short,
                "without_copy": 0,
            })
        };
        let full = serde_json::json!([[0, 1, 2], [1, 2, 0]]);
        assert!(status_full_strength(&status(0, 0, full.clone()), 3));
        assert!(!status_full_strength(&status(1, 0, full.clone()), 3));
        assert!(!status_full_strength(
            &status(0, 1, serde_json::json!([[0, 1], [1, 2, 0]])),
            3
        ));
        // A member not yet at the view.
        let mut behind = status(0, 0, full);
        behind["members"][2]["view"] = 8.into();
        assert!(!status_full_strength(&behind, 3));
    }

    #[test]
    fn less_subtracts_counters_and_keeps_a_new_lifes_whole() {
        let before = serde_json::json!({"rounds": 3, "decisions": {"commit": 2, "abort": 1}});
        let now =
            serde_json::json!({"rounds": 5, "decisions": {"commit": 6, "abort": 1}, "waited": 4});
        assert_eq!(
            less(&now, Some(&before)),
            serde_json::json!({"rounds": 2, "decisions": {"commit": 4, "abort": 0}, "waited": 4})
        );
        assert_eq!(less(&now, None), now);
    }
}
