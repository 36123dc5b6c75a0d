//! `ferrotx bench failover`: kill -9 one node of a fresh cluster of `ferrotx node`
//! processes under Redis load, and measure what clients see.
//!
//! Each kill starts a new cluster (one configuration file in a temporary directory, its
//! nodes started as `ferrotx node --config FILE --id N --lease-ms MS`, as `cluster local`
//! does), waits until `ferrotx status` shows the first view at every node, and runs a few
//! Redis clients over TCP (INCR of a few counters, SET of keys each written once). After
//! a warm-up it SIGKILLs one node chosen by a seeded generator and measures, from the
//! kill:
//!
//! - `detect_ms`: until the coordination file (the view `ferrotx status` reads) holds a
//!   newer view without the killed node: the CM's compare-and-swap of the view, polled
//!   every 2 ms. Members adopt and commit it a little later;
//! - `recovery_ms`: until one probe pass succeeds: through every survivor's Redis port, a
//!   GET and a SET of one key of every partition, all answered without error. Passes are
//!   repeated every 2 ms until a deadline; a kill that never passes is "not recovered".
//!
//! Then it restarts the killed node (a new member, without data), lets the load run a
//! little longer, stops it and reads back every acknowledged write through a survivor:
//! every acknowledged `SET key:T:N N` must read `N`, every counter at least its
//! acknowledged increments (and at least the largest value an INCR answered). Whatever
//! is missing is counted as lost. Nothing here retries to hide an error: every error
//! reply and timeout the clients saw is counted by kind.
//!
//! Every wait has a deadline; node processes are stopped (only the ones this started)
//! and the temporary directory removed when a run ends, however it ends.

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
/// Longest wait for the restarted node to be admitted.
const REJOIN_DEADLINE: Duration = Duration::from_secs(20);
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
    /// Kills, each on a fresh cluster.
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
/// killed node, and after the restart.
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
    /// From the restart of the killed node to a view with it again.
    pub rejoin_ms: Option<f64>,
    /// From the kill to the last error any client saw (null: none after the kill).
    pub last_error_after_kill_ms: Option<f64>,
    /// Requests the load clients sent.
    pub requests: u64,
    /// SETs answered +OK.
    pub acknowledged_sets: u64,
    /// INCRs answered with an integer.
    pub acknowledged_increments: u64,
    /// Both.
    pub acknowledged_writes: u64,
    /// Acknowledged SET keys read back without their value.
    pub lost_sets: u64,
    /// Increments missing from counters (below the acknowledged count or the largest
    /// acknowledged value).
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
    /// The `recovery` field of `ferrotx status --json` at the end of the run, if any.
    pub recovery: Option<serde_json::Value>,
    /// Anything else worth knowing (a node that exited, a view that lost a survivor).
    pub notes: Vec<String>,
}

/// What `ferrotx bench failover` reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FailoverReport {
    pub kills: u32,
    pub nodes: u16,
    pub replicas: u8,
    pub lease_ms: u64,
    pub seed: u64,
    pub clients: usize,
    pub recovery_ms: Summary,
    pub detect_ms: Summary,
    pub not_recovered: usize,
    pub not_detected: usize,
    pub acknowledged_writes: u64,
    pub acknowledged_lost: u64,
    pub unverified: u64,
    pub errors: Errors,
    pub errors_by_phase: ErrorsByPhase,
    pub runs: Vec<RunReport>,
    /// The runs' `recovery` objects (`{"per_run": [...]}`) if `ferrotx status --json` had
    /// that field in any run; else null.
    pub recovery: Option<serde_json::Value>,
}

/// Runs every kill.
pub fn run(options: &FailoverOptions) -> anyhow::Result<FailoverReport> {
    anyhow::ensure!(options.kills >= 1, "--kills must be at least 1");
    anyhow::ensure!(options.nodes >= 2, "--nodes must be at least 2");
    anyhow::ensure!(options.lease_ms >= 1, "--lease-ms must be at least 1");
    anyhow::ensure!(options.clients >= 1, "--clients must be at least 1");
    let exe = std::env::current_exe().context("finding this executable to start nodes")?;
    let mut runs = Vec::new();
    for kill in 1..=options.kills {
        let run = run_one(&exe, options, kill).with_context(|| format!("kill {kill}"))?;
        print_run(&run);
        runs.push(run);
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
        // The runs' counters summed: recovering transactions by decision and by vote kind
        // (each run is a fresh cluster, so its counters are that run's alone).
        let mut total = serde_json::Map::new();
        for run in runs.iter().filter_map(|r| r.recovery.as_ref()) {
            sum_into(&mut total, run);
        }
        serde_json::json!({
            "total": serde_json::Value::Object(total),
            "per_run": runs.iter().map(|r| r.recovery.clone()).collect::<Vec<_>>(),
        })
    });
    Ok(FailoverReport {
        kills: options.kills,
        nodes: options.nodes,
        replicas: replicas(options.nodes),
        lease_ms: options.lease_ms,
        seed: options.seed,
        clients: options.clients,
        recovery_ms: Summary::of(runs.iter().filter_map(|r| r.recovery_ms)),
        detect_ms: Summary::of(runs.iter().filter_map(|r| r.detect_ms)),
        not_recovered: runs.iter().filter(|r| r.recovery_ms.is_none()).count(),
        not_detected: runs.iter().filter(|r| r.detect_ms.is_none()).count(),
        acknowledged_writes: runs.iter().map(|r| r.acknowledged_writes).sum(),
        acknowledged_lost: runs.iter().map(|r| r.lost).sum(),
        unverified: runs.iter().map(|r| r.unverified).sum(),
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
         acked {:>7}  lost {:>4}  unverified {:>3}  errors {:>5} (before kill {}, after kill {}, \
         after restart {})",
        r.kill,
        r.node_killed,
        if r.killed_was_cm { " (CM)" } else { "     " },
        opt_ms(r.detect_ms),
        opt_ms(r.recovery_ms),
        opt_ms(r.rejoin_ms),
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
    for e in &r.lost_examples {
        println!("          lost: {e}");
    }
    for e in &r.unverified_examples {
        println!("          unverified: {e}");
    }
    if r.unchecked > 0 {
        println!(
            "          {} acknowledged writes not read back: the read-back's {CHECK_DEADLINE:?} ran out",
            r.unchecked
        );
    }
}

/// The summary table.
pub fn print_table(report: &FailoverReport) {
    println!(
        "failover: {} kills, {} nodes, {} replicas, lease {} ms, {} Redis clients, seed {}",
        report.kills, report.nodes, report.replicas, report.lease_ms, report.clients, report.seed
    );
    println!(
        "  {:<12} {:>10} {:>10} {:>6}",
        "", "p50 ms", "max ms", "count"
    );
    for (name, s) in [
        ("detect", &report.detect_ms),
        ("recovery", &report.recovery_ms),
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
        "  not recovered: {}   not detected: {}   acknowledged writes: {}   lost: {}   unverified: {}",
        report.not_recovered,
        report.not_detected,
        report.acknowledged_writes,
        report.acknowledged_lost,
        report.unverified
    );
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

/// Starts `ferrotx node` for `node`, its output appended to `node-N.log` in `dir`.
fn start_node(
    exe: &Path,
    config: &Path,
    dir: &Path,
    node: u16,
    lease_ms: u64,
) -> anyhow::Result<Child> {
    let log_path = dir.join(format!("node-{node}.log"));
    let log = File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    node_command(exe, config, node)
        .arg("--lease-ms")
        .arg(lease_ms.to_string())
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
    /// N of every acknowledged `SET key:T:N N`.
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

/// Load client `thread`: INCR and SET until `stop`, through node `thread % nodes` first
/// and the next node whenever a connection breaks or a request times out.
fn load_client(
    thread: usize,
    addrs: &[SocketAddr],
    stop: &AtomicBool,
    phase: &AtomicU8,
    seed: u64,
    timeout: Duration,
) -> ClientLog {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (thread as u64).wrapping_mul(0x9e37_79b9));
    let mut log = ClientLog::default();
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
            let key = format!("key:{thread}:{n}");
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

/// Reads back every acknowledged write through `survivors`.
fn check(logs: &[ClientLog], survivors: &[SocketAddr], timeout: Duration) -> Check {
    let deadline = Instant::now() + CHECK_DEADLINE;
    // The SETs: one reader per load client.
    let mut checks: Vec<Check> = std::thread::scope(|scope| {
        let readers: Vec<_> = logs
            .iter()
            .enumerate()
            .map(|(thread, log)| {
                scope.spawn(move || {
                    let mut out = Check::default();
                    let mut client = None;
                    let mut next = thread;
                    for &n in &log.sets {
                        let key = format!("key:{thread}:{n}");
                        match read_back(&mut client, &mut next, survivors, &key, timeout, deadline)
                        {
                            Err(why) => unread(&mut out, &key, 1, why),
                            Ok(RespValue::Bulk(v)) if v == n.to_string().as_bytes() => {}
                            Ok(other) => {
                                out.lost_sets += 1;
                                out.lost(format!("{key}: acknowledged {n}, read {other:?}"));
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
        let count: u64 = logs.iter().map(|l| l.increments[k].0).sum();
        let largest: i64 = logs.iter().map(|l| l.increments[k].1).max().unwrap_or(0);
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
// One kill.

fn run_one(exe: &Path, options: &FailoverOptions, kill: u32) -> anyhow::Result<RunReport> {
    let timeout = options.request_timeout();
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
            "ferrotx-failover-{}-{kill}-{}",
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
    let addrs: Vec<SocketAddr> = config
        .members()
        .iter()
        .map(|m| m.resp_addr().context("a member without a Redis address"))
        .collect::<anyhow::Result<_>>()?;
    let mut nodes = Nodes {
        children: Vec::new(),
    };
    for member in config.members() {
        let child = start_node(exe, &path, &dir.path, member.node, options.lease_ms)?;
        nodes.children.push(Some(child));
    }
    let mut notes = Vec::new();

    // Formed: every node a member, alive, at the view; then every partition served
    // through every node.
    let form_deadline = Instant::now() + FORM_DEADLINE;
    loop {
        if status_json(exe, &path).is_some_and(|s| formed(&s, options.nodes)) {
            break;
        }
        let exited = nodes.exited();
        if !exited.is_empty() {
            bail!("the cluster did not form: {}", exited.join("; "));
        }
        if Instant::now() >= form_deadline {
            bail!(
                "the cluster did not form in {FORM_DEADLINE:?} (status: {})",
                status_json(exe, &path).map_or("none".into(), |s| s.to_string())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut prober = Prober {
        keys: probe_keys(&config),
        clients: BTreeMap::new(),
        passes: 0,
        last_failure: None,
    };
    let everyone: Vec<(u16, SocketAddr)> = config
        .members()
        .iter()
        .map(|m| m.node)
        .zip(addrs.iter().copied())
        .collect();
    if prober
        .until_pass(&everyone, timeout, Instant::now() + FORM_DEADLINE)
        .is_none()
    {
        bail!(
            "the new cluster never served every partition through every node: {}",
            prober.last_failure.unwrap_or_default()
        );
    }

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
            std::thread::spawn(move || load_client(thread, &addrs, &stop, &phase, seed, timeout))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(options.warmup_ms));

    // The kill.
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed ^ (u64::from(kill) << 32));
    let victim = rng.random_range(0..options.nodes);
    let before = read_view(&state).context("reading the view before the kill")?;
    if before.members.len() != usize::from(options.nodes) {
        notes.push(format!(
            "before the kill the view {} had members {:?} (a reconfiguration without a kill)",
            before.id,
            before.members.iter().map(|m| m.node).collect::<Vec<_>>()
        ));
    }
    let recovery_deadline = Duration::from_millis(options.recovery_deadline_ms);
    phase.store(PHASE_AFTER_KILL, Ordering::Relaxed);
    let killed_at = nodes.kill(victim)?;
    let deadline = killed_at + recovery_deadline;
    let detector = {
        let state = state.clone();
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
    let survivors: Vec<(u16, SocketAddr)> = everyone
        .iter()
        .copied()
        .filter(|&(node, _)| node != victim)
        .collect();
    prober.clients.remove(&victim);
    let passes_before = prober.passes;
    prober.last_failure = None;
    let recovered = prober.until_pass(&survivors, timeout, deadline);
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

    // The restart: a new process of the same node, admitted as a new member.
    phase.store(PHASE_AFTER_RESTART, Ordering::Relaxed);
    let restarted_at = Instant::now();
    nodes.children[usize::from(victim)] =
        Some(start_node(exe, &path, &dir.path, victim, options.lease_ms)?);
    let after_id = detected.as_ref().map_or(before.id, |(_, v)| v.id);
    let rejoin_deadline = restarted_at + REJOIN_DEADLINE;
    let rejoin_ms = loop {
        if let Some(view) = read_view(&state)
            && view.id > after_id
            && view.incarnation(victim).is_some()
        {
            break Some(ms(restarted_at.elapsed()));
        }
        if Instant::now() >= rejoin_deadline {
            notes.push(format!(
                "the restarted node {victim} was not admitted in {REJOIN_DEADLINE:?}"
            ));
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    std::thread::sleep(Duration::from_millis(options.after_restart_ms));
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<ClientLog> = load
        .into_iter()
        .map(|t| t.join().unwrap_or_default())
        .collect();

    // The read-back, through the survivors.
    let survivor_addrs: Vec<SocketAddr> = survivors.iter().map(|s| s.1).collect();
    let check_started = Instant::now();
    let checked = check(&logs, &survivor_addrs, timeout);
    let check_ms = ms(check_started.elapsed());
    let recovery = status_json(exe, &path).and_then(|s| s.get("recovery").cloned());
    notes.extend(nodes.exited());
    drop(nodes);

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
    let acknowledged_sets: u64 = logs.iter().map(|l| l.sets.len() as u64).sum();
    let acknowledged_increments: u64 = logs
        .iter()
        .flat_map(|l| l.increments.iter().map(|c| c.0))
        .sum();
    let last_error = logs.iter().filter_map(|l| l.last_error).max();
    Ok(RunReport {
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
        probe_passes: prober.passes - passes_before,
        last_probe_failure: prober.last_failure,
        rejoin_ms,
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
    })
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
