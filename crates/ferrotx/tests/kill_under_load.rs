//! kill -9 of node processes under Redis load, checked as Jepsen would: three `ferrotx
//! node` processes (three copies of every partition, a short lease) serve bank transfers
//! and an Elle list-append workload over RESP from test threads, each operation recorded
//! as invoke, then ok / fail (certainly no effect) / info (maybe). A node is SIGKILLed
//! (a non-CM node chosen by the seed), the load runs through detection and recovery, the
//! node is restarted (same id, a new process, a new member holding no data), and then the
//! same again for the CM. At the end: no other node process exited, every acknowledged
//! write reads back (money conserved and explained by the transfers, every acknowledged
//! append in its list), the list-append history is strictly serializable (the `adya`
//! checker, Elle's analysis), and once the cluster is back at full strength (every
//! partition with its three copies, none being filled) every copy of every partition
//! equals its primary: `FERROTX COPIES` on every node, the digests and object counts of
//! each partition's copies compared. That last check is what notices a data recovery
//! that filled the restarted nodes' copies wrong: the node never killed keeps a good copy
//! of everything, which the reads see.
//!
//! A second test kills and restarts each of the three nodes in turn under a light load,
//! each restart back at full strength before the next kill, so that in the end no node
//! holds a copy it held at the start: only data recovery keeps the acknowledged writes.
//! The tests run one at a time.
//!
//! `KILL_TEST_SEED=N` picks another seed; `KILL_TEST_KEEP=1` keeps the run's directory
//! (node logs, configuration, `history.jsonl`) even when the test passes. A failing run
//! always keeps it and names it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adya::{History, Opts, Valid, Workload};
use ferrotx_cluster::Configuration;
use ferrotx_redis_exec::{RespValue, encode_request, parse_reply};
use serde_json::{Value, json};

use common::{ferrotx, temp_path, test_ports};

/// The nodes' lease: a killed node is removed within about two of them.
const LEASE_MS: u64 = 300;
const NODES: u16 = 3;
/// The default seed: which non-CM node is killed first, and every client's choices.
const SEED: u64 = 0x6b69_6c6c;

/// Bank accounts, each starting with `INITIAL`.
const ACCOUNTS: u64 = 8;
const INITIAL: i64 = 100;
const TOTAL: i64 = ACCOUNTS as i64 * INITIAL;
/// Every this many bank operations of a client, one is an audit (every balance in one
/// MULTI/EXEC), which must see `TOTAL`.
const AUDIT_EVERY: u64 = 8;

/// List-append keys in use at once; the window moves one key on every
/// `APPENDS_PER_SHIFT` appends, so that lists stay short (Elle's key rotation).
const ACTIVE_KEYS: u64 = 5;
const APPENDS_PER_SHIFT: u64 = 100;

const BANK_CLIENTS: usize = 3;
const LIST_CLIENTS: usize = 3;

/// Longest a client waits for a reply (the server answers every command within 5 s).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Load before the first kill, after each detection, and after each restart.
const WARMUP: Duration = Duration::from_secs(2);
const AFTER_DETECTION: Duration = Duration::from_secs(2);
const AFTER_RESTART: Duration = Duration::from_secs(2);
/// Longest wait for the cluster to form, a kill to be detected, a restart admitted.
const MEMBERSHIP_DEADLINE: Duration = Duration::from_secs(30);

/// Phases, as recorded with each completion.
const PHASES: [&str; 5] = [
    "before the kills",
    "after kill 1",
    "after restart 1",
    "after kill 2",
    "after restart 2",
];

// ---------------------------------------------------------------------------------------
// Node processes.

/// The cluster's node processes, killed when dropped. The run's directory (configuration,
/// coordination file, node logs, history) is removed then, unless the test failed or
/// `KILL_TEST_KEEP` is set.
struct Nodes {
    dir: PathBuf,
    config: PathBuf,
    /// Each node's current process (`None` while killed).
    children: Vec<Option<Child>>,
    /// Processes started per node, naming their log files.
    lives: Vec<u32>,
}

impl Nodes {
    fn start(&mut self, node: u16) {
        let i = usize::from(node);
        assert!(self.children[i].is_none(), "node {node} already runs");
        self.lives[i] += 1;
        let log = self
            .dir
            .join(format!("node-{node}-life-{}.log", self.lives[i]));
        let log = File::create(&log).expect("node log");
        let mut command = ferrotx();
        command
            .args(["node", "--config"])
            .arg(&self.config)
            .args(["--id", &node.to_string()])
            .args(["--lease-ms", &LEASE_MS.to_string()]);
        if self.lives[i] > 1 {
            // A restart joins the running cluster, as an operator restarts a node.
            command.arg("--join");
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start ferrotx node");
        self.children[i] = Some(child);
    }

    /// SIGKILL of `node`'s process (a child of this test), and its reaping.
    fn kill(&mut self, node: u16) {
        let mut child = self.children[usize::from(node)]
            .take()
            .unwrap_or_else(|| panic!("node {node} does not run"));
        assert!(
            child.try_wait().unwrap().is_none(),
            "node {node} had exited before its kill"
        );
        child.kill().expect("SIGKILL");
        child.wait().expect("reap the killed node");
    }

    /// The nodes whose current process has exited (none was killed by this test).
    fn exited(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for (node, child) in self.children.iter_mut().enumerate() {
            if let Some(child) = child
                && let Some(status) = child.try_wait().unwrap()
            {
                out.push(format!("node {node} (pid {}) exited: {status}", child.id()));
            }
        }
        out
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() || std::env::var_os("KILL_TEST_KEEP").is_some() {
            eprintln!(
                "kill_under_load: the run's directory is kept: {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `ferrotx status --json` of the cluster, or `None` if it failed.
fn status(config: &Path) -> Option<Value> {
    let out = ferrotx()
        .args(["status", "--json", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// The members of the current view, in node order, if every one is alive, in its life
/// and at that view.
fn settled_members(s: &Value) -> Option<Vec<u64>> {
    let members = s["members"].as_array()?;
    let settled = members
        .iter()
        .all(|m| m["alive"] == true && m["same_life"] == true && m["view"] == s["configuration"]);
    settled.then(|| members.iter().filter_map(|m| m["node"].as_u64()).collect())
}

/// Polls the cluster's status until `done` holds for it; returns that status. Panics
/// after `MEMBERSHIP_DEADLINE`, or as soon as a node process other than `killed` exits.
fn wait_status(nodes: &mut Nodes, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + MEMBERSHIP_DEADLINE;
    loop {
        let s = status(&nodes.config);
        if let Some(s) = &s
            && done(s)
        {
            return s.clone();
        }
        let exited = nodes.exited();
        assert!(exited.is_empty(), "waiting for {what}: {exited:?}");
        assert!(
            Instant::now() < deadline,
            "{what}: not within {MEMBERSHIP_DEADLINE:?}; last status {s:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The tests of this file run one at a time: each runs a cluster of node processes with
/// short leases, and two at once would compete for the machine's cores.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    // A test that failed holding it leaves nothing to clean up.
    ONE_CLUSTER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts `NODES` node processes, one worker thread each, 4 partitions per node, three
/// copies of each (as `cluster local` and `bench failover`), on the ports of test `test`
/// of this file, in a new run directory named after `name`; waits until they formed a
/// cluster. Returns them and their Redis addresses, in node order.
fn start_cluster(name: &str, test: u16) -> (Nodes, Vec<SocketAddr>) {
    let dir = temp_path(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = Configuration::local(NODES, 3, 1, 4, test_ports(test)).expect("configuration");
    let addrs: Vec<SocketAddr> = config
        .members()
        .iter()
        .map(|m| m.resp_addr().expect("a Redis address"))
        .collect();
    let config_path = dir.join("cluster.toml");
    std::fs::write(&config_path, config.to_toml_string()).unwrap();
    let mut nodes = Nodes {
        dir,
        config: config_path,
        children: (0..NODES).map(|_| None).collect(),
        lives: vec![0; usize::from(NODES)],
    };
    for node in 0..NODES {
        nodes.start(node);
    }
    wait_status(&mut nodes, "the cluster to form", |s| {
        settled_members(s).is_some_and(|m| m.len() == usize::from(NODES))
    });
    (nodes, addrs)
}

/// True if the status shows the cluster back at full strength: every node a member,
/// alive, in its life, at the current view, and every partition with its full count of
/// copies (the replicas asked for, or every member if fewer) and no backup being filled.
fn full_strength(s: &Value) -> bool {
    let Some(members) = settled_members(s) else {
        return false;
    };
    if members.len() != usize::from(NODES) {
        return false;
    }
    let Some(replicas) = s["replicas"].as_u64() else {
        return false;
    };
    let want = replicas.min(members.len() as u64) as usize;
    let copies_full = s["copies"].as_array().is_some_and(|partitions| {
        partitions
            .iter()
            .all(|c| c.as_array().is_some_and(|c| c.len() == want))
    });
    // The backups being filled, per partition, if the status reports them (a view
    // counts a filled backup among the copies only once it is filled whole).
    let none_filling = match &s["filling"] {
        Value::Null => true,
        Value::Array(partitions) => partitions
            .iter()
            .all(|f| f.is_null() || f.as_array().is_some_and(Vec::is_empty)),
        _ => false,
    };
    copies_full && none_filling
}

// ---------------------------------------------------------------------------------------
// A Redis client.

/// Why a request got no reply: its effect is unknown.
#[derive(Debug)]
enum NoReply {
    Timeout,
    Lost(String),
}

impl std::fmt::Display for NoReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => write!(f, "no reply in {REPLY_TIMEOUT:?}"),
            Self::Lost(why) => write!(f, "connection lost: {why}"),
        }
    }
}

struct Conn {
    stream: TcpStream,
    received: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Option<Self> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        stream.set_nodelay(true).ok()?;
        stream.set_write_timeout(Some(REPLY_TIMEOUT)).ok()?;
        Some(Self {
            stream,
            received: Vec::new(),
        })
    }

    /// Sends `commands` in one write (a pipeline).
    fn send(&mut self, commands: &[Vec<Vec<u8>>]) -> Result<(), NoReply> {
        let mut bytes = Vec::new();
        for command in commands {
            encode_request(command, &mut bytes);
        }
        self.stream
            .write_all(&bytes)
            .map_err(|e| NoReply::Lost(e.to_string()))
    }

    /// The next reply.
    fn reply(&mut self) -> Result<RespValue, NoReply> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut buf = [0u8; 16 * 1024];
        loop {
            match parse_reply(&self.received) {
                Ok(Some((value, used))) => {
                    self.received.drain(..used);
                    return Ok(value);
                }
                Ok(None) => {}
                Err(e) => return Err(NoReply::Lost(format!("malformed reply: {e}"))),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NoReply::Timeout);
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| NoReply::Lost(e.to_string()))?;
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(NoReply::Lost("closed by the server".into())),
                Ok(n) => self.received.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(NoReply::Timeout);
                }
                Err(e) => return Err(NoReply::Lost(e.to_string())),
            }
        }
    }

    /// `commands` pipelined, and one reply per command (stopping at the first failure).
    fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Result<Vec<RespValue>, NoReply> {
        self.send(commands)?;
        commands.iter().map(|_| self.reply()).collect()
    }

    fn call(&mut self, command: Vec<Vec<u8>>) -> Result<RespValue, NoReply> {
        Ok(self.pipeline(&[command])?.remove(0))
    }
}

fn cmd(parts: &[&dyn AsRef<[u8]>]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| (*p).as_ref().to_vec()).collect()
}

/// True for an error after which the command certainly took no effect (docs/redis.md).
fn certainly_no_effect(message: &[u8]) -> bool {
    [&b"EXECABORT"[..], b"TRYAGAIN", b"CLUSTERDOWN"]
        .iter()
        .any(|code| message.starts_with(code))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn integer_of(value: &RespValue) -> Option<i64> {
    std::str::from_utf8(value.as_bytes()?).ok()?.parse().ok()
}

fn account(i: u64) -> String {
    format!("bank:{i}")
}

fn list_key(k: u64) -> String {
    format!("la:{k}")
}

/// A list read back: its elements, or `None` if the string is not `e1,e2,...,en,`.
fn parse_list(value: &RespValue) -> Option<Vec<u64>> {
    match value {
        RespValue::Null => Some(Vec::new()),
        RespValue::Bulk(bytes) => {
            let s = std::str::from_utf8(bytes).ok()?;
            let body = s.strip_suffix(',')?;
            body.split(',').map(|e| e.parse().ok()).collect()
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// The load and its history.

/// SplitMix64: enough randomness for the clients' choices, from the seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the clients share: the cluster's addresses, the history, what went wrong.
struct Shared {
    addrs: Vec<SocketAddr>,
    seed: u64,
    stop: AtomicBool,
    phase: AtomicU8,
    start: Instant,
    /// Jepsen-style operations in real-time order: an invocation is recorded before its
    /// request is sent, a completion after its reply arrived, each with its position
    /// (`index`) and time taken under the lock.
    history: Mutex<Vec<Value>>,
    next_process: AtomicI64,
    next_element: AtomicU64,
    appends: AtomicU64,
    /// The largest list key used.
    max_key: AtomicU64,
    /// Replies no correct front end sends, and broken invariants seen while running.
    problems: Mutex<Vec<String>>,
}

impl Shared {
    fn record(&self, mut op: Value) {
        let mut history = self.history.lock().unwrap();
        op["index"] = json!(history.len());
        op["time"] = json!(self.start.elapsed().as_nanos() as u64);
        history.push(op);
    }

    fn complete(&self, mut op: Value) {
        op["phase"] = json!(self.phase.load(Ordering::SeqCst));
        self.record(op);
    }

    fn problem(&self, what: String) {
        self.problems.lock().unwrap().push(what);
    }

    fn nemesis(&self, what: &str, node: u16) {
        self.record(json!({"type": "info", "process": "nemesis", "f": what, "value": node}));
    }
}

/// A connection, as one Jepsen process.
struct Process {
    conn: Conn,
    id: i64,
}

/// Connects to a node, trying `preferred` first: a new process.
fn connect(shared: &Shared, preferred: usize) -> Option<Process> {
    let n = shared.addrs.len();
    (0..n).find_map(|i| {
        let conn = Conn::open(shared.addrs[(preferred + i) % n])?;
        Some(Process {
            conn,
            id: shared.next_process.fetch_add(1, Ordering::SeqCst),
        })
    })
}

#[derive(Clone, Copy)]
enum Kind {
    Bank,
    List,
}

/// One client thread: operations until told to stop, over a connection that is replaced
/// (a new process) after an indeterminate operation or a lost connection.
fn client(shared: &Shared, thread: usize, kind: Kind) {
    let mut rng = Rng(shared.seed ^ (thread as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut process: Option<Process> = None;
    let mut done = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let Some(p) = process.as_mut() else {
            process = connect(shared, thread);
            if process.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        let keep = match kind {
            Kind::Bank if done % AUDIT_EVERY == AUDIT_EVERY - 1 => audit(shared, p),
            Kind::Bank => transfer(shared, p, &mut rng),
            Kind::List => list_append(shared, p, &mut rng),
        };
        if !keep {
            process = None;
        }
        done += 1;
    }
}

/// UNWATCH after a transfer given up before EXEC (a failed WATCH leaves its keys watched
/// so that EXEC would fail); false if the connection is gone.
fn unwatch(p: &mut Process) -> bool {
    p.conn.call(cmd(&[&"UNWATCH"])).is_ok()
}

/// WATCH from to, GET from, then MULTI, DECRBY from x, INCRBY to x, EXEC (redis-py's
/// retry loop's body, tests/redis/test_concurrency.py). False if the process ends.
fn transfer(shared: &Shared, p: &mut Process, rng: &mut Rng) -> bool {
    let from = rng.below(ACCOUNTS);
    let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
    let amount = 1 + rng.below(20) as i64;
    let value = json!({"from": from, "to": to, "amount": amount});
    let op = |kind: &str, error: Option<String>| json!({"type": kind, "f": "transfer", "process": p.id, "value": value, "error": error});
    shared.record(op("invoke", None));
    let (a, b) = (account(from), account(to));
    // Before EXEC nothing is written: any failure is definite.
    let fail = |error: String| op("fail", Some(error));
    match p.conn.call(cmd(&[&"WATCH", &a, &b])) {
        Ok(RespValue::Simple(s)) if s == b"OK" => {}
        Ok(other) => {
            shared.complete(fail(format!("WATCH: {other:?}")));
            return unwatch(p);
        }
        Err(e) => {
            shared.complete(fail(format!("WATCH: {e}")));
            return false;
        }
    }
    let balance = match p.conn.call(cmd(&[&"GET", &a])) {
        Ok(reply) => match integer_of(&reply) {
            Some(balance) => balance,
            None => {
                if !reply.is_error() {
                    shared.problem(format!("GET {a} answered {reply:?}"));
                }
                shared.complete(fail(format!("GET: {reply:?}")));
                return unwatch(p);
            }
        },
        Err(e) => {
            shared.complete(fail(format!("GET: {e}")));
            return false;
        }
    };
    if balance < amount {
        shared.complete(fail(format!("{a} holds {balance} < {amount}")));
        return unwatch(p);
    }
    let amount_text = amount.to_string();
    let replies = p.conn.pipeline(&[
        cmd(&[&"MULTI"]),
        cmd(&[&"DECRBY", &a, &amount_text]),
        cmd(&[&"INCRBY", &b, &amount_text]),
        cmd(&[&"EXEC"]),
    ]);
    let replies = match replies {
        Ok(replies) => replies,
        Err(e) => {
            // EXEC was sent: it may have committed.
            shared.complete(op("info", Some(e.to_string())));
            return false;
        }
    };
    if replies[0] != RespValue::ok() {
        shared.problem(format!("MULTI answered {:?}", replies[0]));
    }
    match &replies[3] {
        RespValue::Array(results) => match results.as_slice() {
            [RespValue::Integer(left), RespValue::Integer(_)] => {
                if *left < 0 {
                    shared.problem(format!(
                        "a transfer under WATCH left {a} at {left} (read {balance})"
                    ));
                }
                shared.complete(op("ok", None));
                true
            }
            other => {
                shared.problem(format!("transfer EXEC answered {other:?}"));
                shared.complete(op("info", Some(format!("{other:?}"))));
                false
            }
        },
        RespValue::NullArray => {
            shared.complete(fail("a watched key changed".into()));
            true
        }
        RespValue::Error(e) if certainly_no_effect(e) => {
            shared.complete(fail(text(e)));
            true
        }
        RespValue::Error(e) => {
            shared.complete(op("info", Some(text(e))));
            false
        }
        other => {
            shared.problem(format!("transfer EXEC answered {other:?}"));
            shared.complete(op("info", Some(format!("{other:?}"))));
            false
        }
    }
}

/// MULTI, GET of every account, EXEC: a committed audit sees all the money.
fn audit(shared: &Shared, p: &mut Process) -> bool {
    let op = |kind: &str, error: Option<String>| json!({"type": kind, "f": "audit", "process": p.id, "value": null, "error": error});
    shared.record(op("invoke", None));
    let mut commands = vec![cmd(&[&"MULTI"])];
    commands.extend((0..ACCOUNTS).map(|i| cmd(&[&"GET", &account(i)])));
    commands.push(cmd(&[&"EXEC"]));
    let replies = match p.conn.pipeline(&commands) {
        Ok(replies) => replies,
        Err(e) => {
            shared.complete(op("info", Some(e.to_string())));
            return false;
        }
    };
    match replies.last().unwrap() {
        RespValue::Array(values) => {
            let balances: Option<Vec<i64>> = values.iter().map(integer_of).collect();
            match balances {
                Some(b) if b.len() == ACCOUNTS as usize => {
                    if b.iter().sum::<i64>() != TOTAL || b.iter().any(|&x| x < 0) {
                        shared.problem(format!("an audit read {b:?} (total {TOTAL})"));
                    }
                    shared.complete(op("ok", None));
                    true
                }
                _ => {
                    shared.problem(format!("audit EXEC answered {values:?}"));
                    shared.complete(op("info", None));
                    false
                }
            }
        }
        RespValue::Error(e) if certainly_no_effect(e) => {
            shared.complete(op("fail", Some(text(e))));
            true
        }
        RespValue::Error(e) => {
            shared.complete(op("info", Some(text(e))));
            false
        }
        other => {
            shared.problem(format!("audit EXEC answered {other:?}"));
            shared.complete(op("info", None));
            false
        }
    }
}

/// One list-append transaction of 1 to 4 micro-operations over the active keys, as
/// MULTI, `APPEND la:k "e,"` / `GET la:k`, EXEC (crates/sim's resp-list-append).
fn list_append(shared: &Shared, p: &mut Process, rng: &mut Rng) -> bool {
    let base = shared.appends.load(Ordering::SeqCst) / APPENDS_PER_SHIFT;
    let count = 1 + rng.below(4);
    // (key, Some(element)) appends, (key, None) reads.
    let mops: Vec<(u64, Option<u64>)> = (0..count)
        .map(|_| {
            let key = base + rng.below(ACTIVE_KEYS);
            shared.max_key.fetch_max(key, Ordering::SeqCst);
            if rng.below(2) == 0 {
                shared.appends.fetch_add(1, Ordering::SeqCst);
                (
                    key,
                    Some(shared.next_element.fetch_add(1, Ordering::SeqCst)),
                )
            } else {
                (key, None)
            }
        })
        .collect();
    let invoked: Vec<Value> = mops
        .iter()
        .map(|&(k, e)| match e {
            Some(e) => json!(["append", k, e]),
            None => json!(["r", k, null]),
        })
        .collect();
    let op = |kind: &str, value: &[Value], error: Option<String>| json!({"type": kind, "f": "txn", "process": p.id, "value": value, "error": error});
    shared.record(op("invoke", &invoked, None));
    let mut commands = vec![cmd(&[&"MULTI"])];
    for &(k, e) in &mops {
        commands.push(match e {
            Some(e) => cmd(&[&"APPEND", &list_key(k), &format!("{e},")]),
            None => cmd(&[&"GET", &list_key(k)]),
        });
    }
    commands.push(cmd(&[&"EXEC"]));
    let replies = match p.conn.pipeline(&commands) {
        Ok(replies) => replies,
        Err(e) => {
            shared.complete(op("info", &invoked, Some(e.to_string())));
            return false;
        }
    };
    if replies[0] != RespValue::ok() {
        // The commands behind it would have run one by one: no longer one transaction.
        shared.problem(format!("MULTI answered {:?}", replies[0]));
        shared.complete(op("info", &invoked, Some("MULTI refused".into())));
        return false;
    }
    match replies.last().unwrap() {
        RespValue::Array(results) if results.len() == mops.len() => {
            let mut value = Vec::new();
            for (&(k, e), result) in mops.iter().zip(results) {
                match (e, result, parse_list(result)) {
                    (Some(e), RespValue::Integer(_), _) => value.push(json!(["append", k, e])),
                    (None, _, Some(list)) => value.push(json!(["r", k, list])),
                    _ => {
                        shared.problem(format!("EXEC of {invoked:?} answered {results:?}"));
                        shared.complete(op("info", &invoked, Some("unexpected".into())));
                        return false;
                    }
                }
            }
            shared.complete(op("ok", &value, None));
            true
        }
        RespValue::Error(e) if certainly_no_effect(e) => {
            shared.complete(op("fail", &invoked, Some(text(e))));
            true
        }
        RespValue::Error(e) => {
            shared.complete(op("info", &invoked, Some(text(e))));
            false
        }
        other => {
            shared.problem(format!("EXEC of {invoked:?} answered {other:?}"));
            shared.complete(op("info", &invoked, Some("unexpected".into())));
            false
        }
    }
}

/// `commands` in one MULTI/EXEC through `addr`, retried until they commit (at most 30 s):
/// EXEC's results.
fn read_in_one_transaction(addr: SocketAddr, commands: &[Vec<Vec<u8>>]) -> Vec<RespValue> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut all = vec![cmd(&[&"MULTI"])];
    all.extend_from_slice(commands);
    all.push(cmd(&[&"EXEC"]));
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Some(mut conn) = Conn::open(addr) {
            match conn.pipeline(&all) {
                Ok(mut replies) => match replies.pop().unwrap() {
                    RespValue::Array(results) => return results,
                    RespValue::Error(e) => last = text(&e),
                    other => last = format!("{other:?}"),
                },
                Err(e) => last = e.to_string(),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the final read through {addr} never committed: {last}");
}

// ---------------------------------------------------------------------------------------
// Checks.

/// True if some subset of `optional` (per-account deltas) adds up to `residual`.
fn explained(residual: &mut [i64], optional: &[Vec<i64>]) -> bool {
    let Some((first, rest)) = optional.split_first() else {
        return residual.iter().all(|&r| r == 0);
    };
    if explained(residual, rest) {
        return true;
    }
    residual.iter_mut().zip(first).for_each(|(r, d)| *r -= d);
    let with = explained(residual, rest);
    residual.iter_mut().zip(first).for_each(|(r, d)| *r += d);
    with
}

/// Operations of `f` by completion type and phase.
fn counts(history: &[Value], f: &str) -> BTreeMap<(String, u64), u64> {
    let mut out = BTreeMap::new();
    for op in history
        .iter()
        .filter(|op| op["f"] == f && op["type"] != "invoke")
    {
        let key = (
            op["type"].as_str().unwrap_or("?").to_owned(),
            op["phase"].as_u64().unwrap_or(0),
        );
        *out.entry(key).or_default() += 1;
    }
    out
}

fn describe_counts(counts: &BTreeMap<(String, u64), u64>) -> String {
    let total = |t: &str| -> u64 {
        counts
            .iter()
            .filter(|((k, _), _)| k == t)
            .map(|(_, n)| n)
            .sum()
    };
    let per_phase: Vec<String> = (0..PHASES.len() as u64)
        .map(|ph| {
            let n = |t: &str| counts.get(&(t.to_owned(), ph)).copied().unwrap_or(0);
            format!(
                "{}: {}/{}/{}",
                PHASES[ph as usize],
                n("ok"),
                n("fail"),
                n("info")
            )
        })
        .collect();
    format!(
        "ok {} fail {} info {} (ok/fail/info {})",
        total("ok"),
        total("fail"),
        total("info"),
        per_phase.join(", ")
    )
}

/// How many fail and info completions gave each reason (digits shown as `#`).
fn reasons(history: &[Value]) -> String {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for op in history
        .iter()
        .filter(|op| op["type"] == "fail" || (op["type"] == "info" && op["process"] != "nemesis"))
    {
        let error: String = op["error"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(80)
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect();
        let key = format!(
            "{} {} {error}",
            op["f"].as_str().unwrap_or("?"),
            op["type"].as_str().unwrap_or("?")
        );
        *out.entry(key).or_default() += 1;
    }
    out.iter()
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect::<Vec<_>>()
        .join("\n    ")
}

// ---------------------------------------------------------------------------------------
// Every copy equal: FERROTX COPIES on every node, once back at full strength.

/// Longest the copies may take to agree once the cluster is back at full strength and the
/// load has stopped: a backup applies a coordinator's last writes a few milliseconds after
/// the coordinator goes quiet.
const COPIES_AGREE_DEADLINE: Duration = Duration::from_secs(5);

/// One table of a copy, as FERROTX COPIES reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TableCopy {
    table: i64,
    name: String,
    digest: String,
    objects: i64,
}

/// One copy a node reports.
#[derive(Clone, Debug)]
struct CopyReport {
    node: u64,
    partition: u64,
    role: String,
    view: u64,
    tables: Vec<TableCopy>,
}

/// The value of `name` in a RESP2 map (a flat array of names and values).
fn map_field<'a>(pairs: &'a [RespValue], name: &str) -> Result<&'a RespValue, String> {
    pairs
        .chunks(2)
        .find(|pair| pair[0].as_bytes() == Some(name.as_bytes()))
        .and_then(|pair| pair.get(1))
        .ok_or_else(|| format!("no {name:?} in {pairs:?}"))
}

fn field_integer(pairs: &[RespValue], name: &str) -> Result<i64, String> {
    let value = map_field(pairs, name)?;
    value
        .as_integer()
        .ok_or_else(|| format!("{name} is {value:?}"))
}

fn field_text(pairs: &[RespValue], name: &str) -> Result<String, String> {
    let value = map_field(pairs, name)?;
    value
        .as_bytes()
        .map(text)
        .ok_or_else(|| format!("{name} is {value:?}"))
}

/// FERROTX COPIES of the node at `addr`: the copies it holds.
fn copies_of(addr: SocketAddr) -> Result<Vec<CopyReport>, String> {
    let mut conn = Conn::open(addr).ok_or("no connection")?;
    let reply = conn
        .call(cmd(&[&"FERROTX", &"COPIES"]))
        .map_err(|e| e.to_string())?;
    let RespValue::Array(entries) = reply else {
        return Err(format!("FERROTX COPIES answered {reply:?}"));
    };
    entries
        .iter()
        .map(|entry| {
            let pairs = entry.as_array().ok_or(format!("an entry {entry:?}"))?;
            let tables = map_field(pairs, "tables")?
                .as_array()
                .ok_or("tables is not an array")?
                .iter()
                .map(|t| {
                    let t = t.as_array().ok_or(format!("a table {t:?}"))?;
                    Ok(TableCopy {
                        table: field_integer(t, "table")?,
                        name: field_text(t, "name")?,
                        digest: field_text(t, "digest")?,
                        objects: field_integer(t, "objects")?,
                    })
                })
                .collect::<Result<_, String>>()?;
            Ok(CopyReport {
                node: field_integer(pairs, "node")? as u64,
                partition: field_integer(pairs, "partition")? as u64,
                role: field_text(pairs, "role")?,
                view: field_integer(pairs, "view")? as u64,
                tables,
            })
        })
        .collect()
}

/// What the members of status `s` (at full strength) report with FERROTX COPIES, checked
/// against the view's copies, and the copies of each partition against each other: a
/// summary if every copy equals its primary, else what differs.
fn compare_copies(s: &Value, addrs: &[SocketAddr]) -> Result<String, Vec<String>> {
    let view = s["configuration"].as_u64().expect("a view");
    let expected: Vec<Vec<u64>> = serde_json::from_value(s["copies"].clone()).expect("copies");
    let mut differences = Vec::new();
    let mut held: BTreeMap<u64, Vec<CopyReport>> = BTreeMap::new();
    for node in settled_members(s).expect("settled") {
        match copies_of(addrs[node as usize]) {
            Ok(copies) => {
                for copy in copies {
                    if copy.node != node || copy.view != view {
                        differences.push(format!(
                            "node {node} reports a copy of node {} in view {} (the cluster is at \
                             view {view})",
                            copy.node, copy.view
                        ));
                    }
                    held.entry(copy.partition).or_default().push(copy);
                }
            }
            Err(e) => differences.push(format!("node {node}: FERROTX COPIES: {e}")),
        }
    }
    if !differences.is_empty() {
        return Err(differences);
    }
    let mut objects: BTreeMap<String, i64> = BTreeMap::new();
    for (p, nodes) in expected.iter().enumerate() {
        let copies = held.remove(&(p as u64)).unwrap_or_default();
        let describe = || -> String {
            copies
                .iter()
                .map(|c| {
                    let tables: Vec<String> = c
                        .tables
                        .iter()
                        .map(|t| format!("{} {} ({} objects)", t.name, t.digest, t.objects))
                        .collect();
                    format!("node {} ({}): {}", c.node, c.role, tables.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let holders: BTreeSet<u64> = copies.iter().map(|c| c.node).collect();
        let roles_right = copies.iter().all(|c| {
            let primary = nodes.first() == Some(&c.node);
            c.role == if primary { "primary" } else { "backup" }
        });
        if holders != nodes.iter().copied().collect() || !roles_right {
            differences.push(format!(
                "partition {p}: the view has its copies on {nodes:?} (primary first), the nodes \
                 report {}",
                describe()
            ));
            continue;
        }
        if copies.windows(2).any(|w| w[0].tables != w[1].tables) {
            differences.push(format!("partition {p}: copies differ: {}", describe()));
            continue;
        }
        if let Some(first) = copies.first() {
            for t in &first.tables {
                *objects.entry(t.name.clone()).or_default() += t.objects;
            }
        }
    }
    for (p, copies) in held {
        differences.push(format!(
            "partition {p}: reported by {:?}, not a partition of the view",
            copies.iter().map(|c| c.node).collect::<Vec<_>>()
        ));
    }
    if !differences.is_empty() {
        return Err(differences);
    }
    let objects: Vec<String> = objects
        .iter()
        .map(|(name, n)| format!("{n} objects in {name}"))
        .collect();
    Ok(format!(
        "view {view}: {} partitions, each with {} equal copies ({})",
        expected.len(),
        expected.first().map_or(0, Vec::len),
        objects.join(", ")
    ))
}

/// Waits (up to `MEMBERSHIP_DEADLINE`) until the cluster is back at full strength, then
/// until FERROTX COPIES of every member shows every copy of every partition equal to its
/// primary, for at most `COPIES_AGREE_DEADLINE` once at full strength; panics with what
/// differs if they do not agree. Returns a summary.
fn check_copies_equal(nodes: &mut Nodes, addrs: &[SocketAddr]) -> String {
    let started = Instant::now();
    let mut agree_by: Option<Instant> = None;
    loop {
        let s = wait_status(
            nodes,
            "full strength (every partition's copies, none filling)",
            full_strength,
        );
        let agree_by = *agree_by.get_or_insert_with(|| Instant::now() + COPIES_AGREE_DEADLINE);
        match compare_copies(&s, addrs) {
            Ok(summary) => {
                return format!(
                    "{summary}; checked in {:.2} s",
                    started.elapsed().as_secs_f64()
                );
            }
            Err(differences) if Instant::now() >= agree_by => panic!(
                "the copies are not all equal {COPIES_AGREE_DEADLINE:?} after the cluster was back \
                 at full strength:\n  {}\nstatus: {s}",
                differences.join("\n  ")
            ),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The test.

#[test]
fn sigkill_under_load_loses_no_acknowledged_write_and_stays_strictly_serializable() {
    let _serial = one_cluster_at_a_time();
    let started = Instant::now();
    let seed = std::env::var("KILL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let (mut nodes, addrs) = start_cluster("kill-under-load", 0);
    let dir = nodes.dir.clone();
    // The accounts, then every node serves them.
    let mut mset = vec![b"MSET".to_vec()];
    for i in 0..ACCOUNTS {
        mset.push(account(i).into_bytes());
        mset.push(INITIAL.to_string().into_bytes());
    }
    let deadline = Instant::now() + MEMBERSHIP_DEADLINE;
    for (i, &addr) in addrs.iter().enumerate() {
        loop {
            let reply = Conn::open(addr).map(|mut c| {
                if i == 0 {
                    c.call(mset.clone())?;
                }
                c.call(cmd(&[&"GET", &account(ACCOUNTS - 1)]))
            });
            if let Some(Ok(value)) = &reply
                && integer_of(value) == Some(INITIAL)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {i} does not serve: {reply:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let formed_in = started.elapsed();

    let shared = Arc::new(Shared {
        addrs: addrs.clone(),
        seed,
        stop: AtomicBool::new(false),
        phase: AtomicU8::new(0),
        start: Instant::now(),
        history: Mutex::new(Vec::new()),
        next_process: AtomicI64::new(0),
        next_element: AtomicU64::new(0),
        appends: AtomicU64::new(0),
        max_key: AtomicU64::new(0),
        problems: Mutex::new(Vec::new()),
    });
    let clients: Vec<_> = (0..BANK_CLIENTS + LIST_CLIENTS)
        .map(|thread| {
            let shared = shared.clone();
            let kind = if thread < BANK_CLIENTS {
                Kind::Bank
            } else {
                Kind::List
            };
            std::thread::spawn(move || client(&shared, thread, kind))
        })
        .collect();
    std::thread::sleep(WARMUP);

    // Two kills: first a node that is not the CM (chosen by the seed), then the CM.
    let mut killed = Vec::new();
    let mut timings = Vec::new();
    for round in 0..2u8 {
        let s = wait_status(&mut nodes, "a settled view before the kill", |s| {
            settled_members(s).is_some_and(|m| m.len() == usize::from(NODES))
        });
        let cm = s["cm"].as_u64().expect("a CM") as u16;
        let victim = if round == 0 {
            let others: Vec<u16> = (0..NODES).filter(|&n| n != cm).collect();
            others[(seed % others.len() as u64) as usize]
        } else {
            cm
        };
        let role = if victim == cm { "the CM" } else { "not the CM" };
        let view = s["configuration"].as_u64().unwrap();
        shared.nemesis("kill", victim);
        let killed_at = Instant::now();
        shared.phase.store(2 * round + 1, Ordering::SeqCst);
        nodes.kill(victim);
        let removed = wait_status(&mut nodes, "the killed node's removal", |s| {
            s["configuration"].as_u64().is_some_and(|c| c > view)
                && settled_members(s).is_some_and(|m| !m.contains(&u64::from(victim)))
        });
        let detected = killed_at.elapsed();
        std::thread::sleep(AFTER_DETECTION);
        shared.nemesis("restart", victim);
        let restarted_at = Instant::now();
        shared.phase.store(2 * round + 2, Ordering::SeqCst);
        nodes.start(victim);
        let after = removed["configuration"].as_u64().unwrap();
        wait_status(&mut nodes, "the restarted node's admission", |s| {
            s["configuration"].as_u64().is_some_and(|c| c > after)
                && settled_members(s).is_some_and(|m| m.len() == usize::from(NODES))
        });
        let admitted = restarted_at.elapsed();
        std::thread::sleep(AFTER_RESTART);
        killed.push(victim);
        timings.push(format!(
            "kill {}: node {victim} ({role}) removed {:.2} s after SIGKILL, restart admitted in {:.2} s",
            round + 1,
            detected.as_secs_f64(),
            admitted.as_secs_f64()
        ));
    }
    shared.stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().expect("a client thread panicked");
    }

    // (i) No node process exited but those killed (and their restarts still run).
    let exited = nodes.exited();
    assert!(exited.is_empty(), "node processes exited: {exited:?}");

    // The final reads, through a node that ran throughout.
    let survivor = (0..NODES)
        .find(|n| !killed.contains(n))
        .expect("a node never killed");
    let through = addrs[usize::from(survivor)];
    let results = read_in_one_transaction(
        through,
        &(0..ACCOUNTS)
            .map(|i| cmd(&[&"GET", &account(i)]))
            .collect::<Vec<_>>(),
    );
    let balances: Vec<i64> = results
        .iter()
        .map(|v| integer_of(v).unwrap_or_else(|| panic!("a balance: {v:?}")))
        .collect();
    let keys = shared.max_key.load(Ordering::SeqCst) + 1;
    // Histories so far, kept if the test fails from here on.
    let history_path = dir.join("history.jsonl");
    let write_history = |history: &[Value]| {
        let lines: Vec<String> = history.iter().map(Value::to_string).collect();
        std::fs::write(&history_path, lines.join("\n") + "\n").unwrap();
        lines
    };
    write_history(&shared.history.lock().unwrap());
    // The lists, in transactions of at most 1,000 reads (a MULTI block holds at most
    // 1,024 commands), each recorded in the history.
    let mut final_lists: Vec<Vec<u64>> = Vec::new();
    let all_keys: Vec<u64> = (0..keys).collect();
    for chunk in all_keys.chunks(1000) {
        let process = shared.next_process.fetch_add(1, Ordering::SeqCst);
        let reads: Vec<Value> = chunk.iter().map(|k| json!(["r", k, null])).collect();
        shared.record(json!({"type": "invoke", "f": "txn", "process": process, "value": reads}));
        let results = read_in_one_transaction(
            through,
            &chunk
                .iter()
                .map(|&k| cmd(&[&"GET", &list_key(k)]))
                .collect::<Vec<_>>(),
        );
        let lists: Vec<Vec<u64>> = results
            .iter()
            .map(|v| parse_list(v).unwrap_or_else(|| panic!("a list: {v:?}")))
            .collect();
        let reads: Vec<Value> = chunk
            .iter()
            .zip(&lists)
            .map(|(k, list)| json!(["r", k, list]))
            .collect();
        shared.complete(json!({"type": "ok", "f": "txn", "process": process, "value": reads}));
        final_lists.extend(lists);
    }

    let history = shared.history.lock().unwrap().clone();
    let lines = write_history(&history);
    let transfers = counts(&history, "transfer");
    let audits = counts(&history, "audit");
    let txns = counts(&history, "txn");
    let processes = shared.next_process.load(Ordering::SeqCst);
    println!(
        "kill_under_load: seed {seed}, lease {LEASE_MS} ms, formed in {:.2} s\n  {}\n  \
         transfers: {}\n  audits: {}\n  list-append txns: {}\n  fail/info reasons:\n    {}\n  {processes} processes, \
         {} elements appended over {keys} keys\n  final balances {balances:?} (sum {}, \
         expected {TOTAL})\n  history: {} ({} operations)",
        formed_in.as_secs_f64(),
        timings.join("\n  "),
        describe_counts(&transfers),
        describe_counts(&audits),
        describe_counts(&txns),
        reasons(&history),
        shared.next_element.load(Ordering::SeqCst),
        balances.iter().sum::<i64>(),
        history_path.display(),
        history.len()
    );

    let problems = shared.problems.lock().unwrap().clone();
    assert!(problems.is_empty(), "while running: {problems:#?}");

    // The load ran in every phase: the cluster served through detection, recovery and
    // each restart.
    for phase in 0..PHASES.len() as u64 {
        let ok = |c: &BTreeMap<(String, u64), u64>| {
            c.get(&("ok".to_owned(), phase)).copied().unwrap_or(0)
        };
        assert!(
            ok(&txns) > 0 && ok(&transfers) + ok(&audits) > 0,
            "nothing committed {}: transfers {transfers:?}, audits {audits:?}, txns {txns:?}",
            PHASES[phase as usize]
        );
    }

    // (ii) Every acknowledged write reads back. The bank: all the money, no account below
    // zero, and each balance what the acknowledged transfers and some subset of the
    // indeterminate ones made it.
    assert_eq!(
        balances.iter().sum::<i64>(),
        TOTAL,
        "money not conserved: {balances:?}"
    );
    assert!(balances.iter().all(|&b| b >= 0), "{balances:?}");
    let delta = |op: &Value| -> Vec<i64> {
        let v = &op["value"];
        let amount = v["amount"].as_i64().unwrap();
        let mut d = vec![0; ACCOUNTS as usize];
        d[v["from"].as_u64().unwrap() as usize] -= amount;
        d[v["to"].as_u64().unwrap() as usize] += amount;
        d
    };
    let mut residual: Vec<i64> = balances.iter().map(|b| b - INITIAL).collect();
    let mut uncertain = Vec::new();
    for op in history.iter().filter(|op| op["f"] == "transfer") {
        match op["type"].as_str() {
            Some("ok") => residual
                .iter_mut()
                .zip(delta(op))
                .for_each(|(r, d)| *r -= d),
            Some("info") => uncertain.push(delta(op)),
            _ => {}
        }
    }
    assert!(
        uncertain.len() <= 24,
        "{} indeterminate transfers: too many to search their subsets",
        uncertain.len()
    );
    assert!(
        explained(&mut residual, &uncertain),
        "the final balances {balances:?} are not the acknowledged transfers plus some of the \
         {} indeterminate ones (unexplained per account: {residual:?})",
        uncertain.len()
    );
    // The lists: every acknowledged append in its final list, and every element there
    // appended by a transaction that may have committed.
    let mut appended: BTreeMap<(u64, u64), &str> = BTreeMap::new();
    for op in history
        .iter()
        .filter(|op| op["f"] == "txn" && op["type"] != "invoke")
    {
        for mop in op["value"].as_array().unwrap() {
            if mop[0] == "append" {
                let key = (mop[1].as_u64().unwrap(), mop[2].as_u64().unwrap());
                appended.insert(key, op["type"].as_str().unwrap());
            }
        }
    }
    let present: BTreeSet<(u64, u64)> = final_lists
        .iter()
        .enumerate()
        .flat_map(|(k, list)| list.iter().map(move |&e| (k as u64, e)))
        .collect();
    let lost: Vec<_> = appended
        .iter()
        .filter(|(ke, t)| **t == "ok" && !present.contains(ke))
        .map(|(ke, _)| ke)
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged appends (key, element) missing from the final lists: {lost:?}"
    );
    let unexplained: Vec<_> = present
        .iter()
        .filter(|ke| !matches!(appended.get(ke), Some(&"ok" | &"info")))
        .map(|ke| (ke, appended.get(ke)))
        .collect();
    assert!(
        unexplained.is_empty(),
        "elements in the final lists no possibly committed append wrote: {unexplained:?}"
    );

    // (iii) Strict serializability of the list-append history (Elle's analysis).
    let adya_history = History::from_json(&lines.join("\n")).expect("adya reads the history");
    let opts = Opts {
        models: vec!["strict-serializable".into()],
        timeout: Duration::from_secs(30),
        ..Opts::default()
    };
    let report = adya::check(&adya_history, Workload::ListAppend, &opts);
    println!(
        "  adya (strict-serializable): {:?}, anomalies {:?}",
        report.valid, report.anomaly_types,
    );
    if report.valid != Valid::True {
        let mut explanation = String::new();
        for (kind, anomalies) in &report.anomalies {
            for anomaly in anomalies.iter().take(3) {
                explanation += &format!("{kind}:\n{}\n", anomaly.explanation);
            }
        }
        panic!(
            "the list-append history is not strictly serializable ({:?}; not {:?}); \
             history in {}:\n{explanation}",
            report.valid,
            report.not,
            history_path.display()
        );
    }

    // (iv) Back at full strength (the restarted nodes' copies filled from the primaries:
    // data recovery), every copy of every partition equal to its primary.
    let copies = check_copies_equal(&mut nodes, &addrs);
    println!(
        "  copies: {copies}; {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// Every node killed in turn: only data recovery keeps the data.

/// Keys written before the first kill, and what each writer of the light load waits
/// between its writes.
const PRELOADED: u64 = 200;
const WRITE_PAUSE: Duration = Duration::from_millis(2);
/// Load before the first kill, and after each restart once back at full strength.
const AT_FULL_STRENGTH: Duration = Duration::from_millis(500);
const WRITERS: usize = 2;
/// The key every writer increments too (a hot key: its increments run at its primary).
const COUNTER: &str = "rolling:counter";

/// What the light load's writers share.
struct Rolling {
    addrs: Vec<SocketAddr>,
    stop: AtomicBool,
    /// Which round of kills the cluster is in (0 before the first).
    round: AtomicU8,
    /// Acknowledged SETs: key, value, and the round they were acknowledged in.
    acked: Mutex<Vec<(String, String, u8)>>,
    /// SETs whose outcome is unknown.
    uncertain: AtomicU64,
    /// The largest value an acknowledged INCR of `COUNTER` returned, and how many INCRs
    /// may have taken effect (acknowledged or of unknown outcome).
    counter_acked: AtomicI64,
    counter_maybe: AtomicI64,
    problems: Mutex<Vec<String>>,
}

/// One writer of the light load: SETs of new keys `rolling:<writer>:<n>` and INCRs of
/// `COUNTER`, alternately, through one connection, replaced (another node first) once it
/// fails.
fn rolling_writer(load: &Rolling, writer: usize) {
    let mut conn: Option<Conn> = None;
    let mut preferred = writer;
    let mut n = 0u64;
    while !load.stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            let count = load.addrs.len();
            conn = (0..count).find_map(|i| Conn::open(load.addrs[(preferred + i) % count]));
            preferred += 1;
            if conn.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        let increment = n % 2 == 1;
        let (key, value) = (format!("rolling:{writer}:{n}"), n.to_string());
        let command = if increment {
            cmd(&[&"INCR", &COUNTER])
        } else {
            cmd(&[&"SET", &key, &value])
        };
        let round = load.round.load(Ordering::SeqCst);
        let keep = match (increment, c.call(command)) {
            (false, Ok(RespValue::Simple(ok))) if ok == b"OK" => {
                load.acked.lock().unwrap().push((key, value, round));
                true
            }
            (true, Ok(RespValue::Integer(value))) => {
                load.counter_acked.fetch_max(value, Ordering::SeqCst);
                load.counter_maybe.fetch_add(1, Ordering::SeqCst);
                true
            }
            (_, Ok(RespValue::Error(e))) if certainly_no_effect(&e) => true,
            (_, Ok(RespValue::Error(_)) | Err(_)) => {
                if increment {
                    load.counter_maybe.fetch_add(1, Ordering::SeqCst);
                } else {
                    load.uncertain.fetch_add(1, Ordering::SeqCst);
                }
                false
            }
            (_, Ok(other)) => {
                load.problems.lock().unwrap().push(format!(
                    "{} answered {other:?}",
                    if increment { "INCR" } else { "SET" }
                ));
                false
            }
        };
        if !keep {
            conn = None;
        }
        n += 1;
        std::thread::sleep(WRITE_PAUSE);
    }
}

/// `command` through `addr`, retried (a new connection each time) until it gets a reply
/// that is not an error, for at most `MEMBERSHIP_DEADLINE`.
fn call_until_answered(addr: SocketAddr, command: &[Vec<u8>]) -> RespValue {
    let deadline = Instant::now() + MEMBERSHIP_DEADLINE;
    loop {
        let reply = Conn::open(addr).map(|mut c| c.call(command.to_vec()));
        match reply {
            Some(Ok(value)) if !value.is_error() => return value,
            other => assert!(
                Instant::now() < deadline,
                "{} through {addr}: {other:?}",
                text(&command[0])
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills and restarts each node in turn under a light load, waiting after each restart
/// until the cluster is back at full strength: the restarted node, a new life that held
/// nothing, then has copies of every partition again, filled from the primaries (data
/// recovery, FaRM 5.4). After the third kill no node holds a copy it held before the
/// first, so without data recovery every write acknowledged before would be gone. Every
/// acknowledged write must read back, and every copy equal its primary at the end.
#[test]
fn killing_each_node_in_turn_loses_no_acknowledged_write() {
    let _serial = one_cluster_at_a_time();
    let started = Instant::now();
    let (mut nodes, addrs) = start_cluster("kill-each-in-turn", 1);
    // Data before the kills, then every node serves it.
    for chunk in (0..PRELOADED).collect::<Vec<_>>().chunks(50) {
        let mut mset = vec![b"MSET".to_vec()];
        for &i in chunk {
            mset.push(format!("preloaded:{i}").into_bytes());
            mset.push(i.to_string().into_bytes());
        }
        assert_eq!(call_until_answered(addrs[0], &mset), RespValue::ok());
    }
    let last = cmd(&[&"GET", &format!("preloaded:{}", PRELOADED - 1)]);
    for &addr in &addrs {
        let value = call_until_answered(addr, &last);
        assert_eq!(integer_of(&value), Some(PRELOADED as i64 - 1), "{value:?}");
    }
    let formed_in = started.elapsed();

    let load = Arc::new(Rolling {
        addrs: addrs.clone(),
        stop: AtomicBool::new(false),
        round: AtomicU8::new(0),
        acked: Mutex::new(Vec::new()),
        uncertain: AtomicU64::new(0),
        counter_acked: AtomicI64::new(0),
        counter_maybe: AtomicI64::new(0),
        problems: Mutex::new(Vec::new()),
    });
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let load = load.clone();
            std::thread::spawn(move || rolling_writer(&load, writer))
        })
        .collect();
    std::thread::sleep(AT_FULL_STRENGTH);

    let mut timings = Vec::new();
    for (round, victim) in (0..NODES).enumerate() {
        let s = wait_status(&mut nodes, "full strength before the kill", full_strength);
        let view = s["configuration"].as_u64().unwrap();
        let role = if s["cm"].as_u64() == Some(u64::from(victim)) {
            "the CM"
        } else {
            "not the CM"
        };
        load.round.store(round as u8 + 1, Ordering::SeqCst);
        let killed_at = Instant::now();
        nodes.kill(victim);
        let removed = wait_status(&mut nodes, "the killed node's removal", |s| {
            s["configuration"].as_u64().is_some_and(|c| c > view)
                && settled_members(s).is_some_and(|m| !m.contains(&u64::from(victim)))
        });
        let detected = killed_at.elapsed();
        let after = removed["configuration"].as_u64().unwrap();
        let restarted_at = Instant::now();
        nodes.start(victim);
        wait_status(&mut nodes, "the restarted node's copies filled", |s| {
            s["configuration"].as_u64().is_some_and(|c| c > after) && full_strength(s)
        });
        timings.push(format!(
            "node {victim} ({role}) removed {:.2} s after SIGKILL, back at full strength \
             {:.2} s after its restart",
            detected.as_secs_f64(),
            restarted_at.elapsed().as_secs_f64()
        ));
        // Some load at full strength before the next kill.
        std::thread::sleep(AT_FULL_STRENGTH);
    }
    load.stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.join().expect("a writer panicked");
    }
    let exited = nodes.exited();
    assert!(exited.is_empty(), "node processes exited: {exited:?}");
    let problems = load.problems.lock().unwrap().clone();
    assert!(problems.is_empty(), "while running: {problems:#?}");

    // Every acknowledged write reads back, through any node: none of them holds a copy
    // it held when the writes before the last kill were acknowledged.
    let acked = load.acked.lock().unwrap().clone();
    let mut expected: Vec<(String, String)> = (0..PRELOADED)
        .map(|i| (format!("preloaded:{i}"), i.to_string()))
        .collect();
    expected.extend(acked.iter().map(|(k, v, _)| (k.clone(), v.clone())));
    let mut lost = Vec::new();
    for (i, chunk) in expected.chunks(500).enumerate() {
        let mut mget = vec![b"MGET".to_vec()];
        mget.extend(chunk.iter().map(|(k, _)| k.clone().into_bytes()));
        let RespValue::Array(values) = call_until_answered(addrs[i % addrs.len()], &mget) else {
            panic!("MGET answered no array");
        };
        for ((key, value), read) in chunk.iter().zip(&values) {
            if read.as_bytes() != Some(value.as_bytes()) {
                lost.push(format!("{key}: wrote {value}, read {read:?}"));
            }
        }
    }
    let counter = integer_of(&call_until_answered(addrs[0], &cmd(&[&"GET", &COUNTER])));
    let per_round: Vec<usize> = (0..=NODES as u8)
        .map(|r| acked.iter().filter(|(_, _, round)| *round == r).count())
        .collect();
    let (counter_acked, counter_maybe) = (
        load.counter_acked.load(Ordering::SeqCst),
        load.counter_maybe.load(Ordering::SeqCst),
    );
    println!(
        "kill_each_in_turn: formed in {:.2} s\n  {}\n  {} keys preloaded, {} SETs acknowledged \
         (before the kills and after each kill: {per_round:?}), {} of unknown outcome; counter \
         {counter:?} (acknowledged up to {counter_acked}, at most {counter_maybe} increments)",
        formed_in.as_secs_f64(),
        timings.join("\n  "),
        PRELOADED,
        acked.len(),
        load.uncertain.load(Ordering::SeqCst),
    );
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost (every node was killed in turn), the first: {:#?}",
        lost.len(),
        expected.len(),
        &lost[..lost.len().min(20)]
    );
    let counter = counter.expect("the counter is an integer");
    assert!(
        (counter_acked..=counter_maybe).contains(&counter),
        "the counter is {counter}: an increment acknowledged it at {counter_acked}, and at \
         most {counter_maybe} increments may have taken effect"
    );
    assert!(
        per_round.iter().all(|&n| n > 0),
        "writes were not acknowledged in every round: {per_round:?}"
    );
    let copies = check_copies_equal(&mut nodes, &addrs);
    println!(
        "  copies: {copies}; {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}
