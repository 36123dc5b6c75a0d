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
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adya::{History, Opts, Valid, Workload};
use ferrotx_cluster::Configuration;
use ferrotx_redis_exec::RespValue;
use serde_json::{Value, json};

use common::client::{Conn, certainly_no_effect, cmd, integer_of, text};
use common::copies::check_copies_equal;
use common::nodes::{
    MEMBERSHIP_DEADLINE, Nodes, full_strength, one_cluster_at_a_time, settled_members,
};
use common::rolling::Rolling;
use common::test_ports;

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

/// Load before the first kill, after each detection, and after each restart.
const WARMUP: Duration = Duration::from_secs(2);
const AFTER_DETECTION: Duration = Duration::from_secs(2);
const AFTER_RESTART: Duration = Duration::from_secs(2);

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

/// Starts `NODES` node processes, one worker thread each, 4 partitions per node, three
/// copies of each (as `cluster local` and `bench failover`), on the ports of test `test`
/// of this file, in a new run directory named after `name`; waits until they formed a
/// cluster.
fn start_cluster(name: &str, test: u16) -> Nodes {
    let config = Configuration::local(NODES, 3, 1, 4, test_ports(test)).expect("configuration");
    Nodes::start_cluster(name, &config, LEASE_MS)
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
// The test.

#[test]
fn sigkill_under_load_loses_no_acknowledged_write_and_stays_strictly_serializable() {
    let _serial = one_cluster_at_a_time();
    let started = Instant::now();
    let seed = std::env::var("KILL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let mut nodes = start_cluster("kill-under-load", 0);
    let addrs = nodes.addrs.clone();
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
        let s = nodes.wait_status("a settled view before the kill", |s| {
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
        let removed = nodes.wait_status("the killed node's removal", |s| {
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
        nodes.wait_status("the restarted node's admission", |s| {
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
    let copies = check_copies_equal(&mut nodes, usize::from(NODES));
    println!(
        "  copies: {copies}; {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// Every node killed in turn: only data recovery keeps the data.

/// Keys written before the first kill.
const PRELOADED: u64 = 200;
/// Load before the first kill, and after each restart once back at full strength.
const AT_FULL_STRENGTH: Duration = Duration::from_millis(500);
const WRITERS: usize = 2;

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
    let mut nodes = start_cluster("kill-each-in-turn", 1);
    let addrs = nodes.addrs.clone();
    // Data before the kills, then every node serves it.
    let load = Rolling::preload(&addrs, PRELOADED);
    let formed_in = started.elapsed();
    let writers = load.start(0..WRITERS);
    std::thread::sleep(AT_FULL_STRENGTH);

    let mut timings = Vec::new();
    for (round, victim) in (0..NODES).enumerate() {
        let s = nodes.wait_status("full strength before the kill", |s| {
            full_strength(s, usize::from(NODES))
        });
        let view = s["configuration"].as_u64().unwrap();
        let role = if s["cm"].as_u64() == Some(u64::from(victim)) {
            "the CM"
        } else {
            "not the CM"
        };
        load.round.store(round as u8 + 1, Ordering::SeqCst);
        let killed_at = Instant::now();
        nodes.kill(victim);
        let removed = nodes.wait_status("the killed node's removal", |s| {
            s["configuration"].as_u64().is_some_and(|c| c > view)
                && settled_members(s).is_some_and(|m| !m.contains(&u64::from(victim)))
        });
        let detected = killed_at.elapsed();
        let after = removed["configuration"].as_u64().unwrap();
        let restarted_at = Instant::now();
        nodes.start(victim);
        nodes.wait_status("the restarted node's copies filled", |s| {
            s["configuration"].as_u64().is_some_and(|c| c > after)
                && full_strength(s, usize::from(NODES))
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
    load.stop(writers);
    let exited = nodes.exited();
    assert!(exited.is_empty(), "node processes exited: {exited:?}");

    // Every acknowledged write reads back, through any node: none of them holds a copy
    // it held when the writes before the last kill were acknowledged.
    let per_round = load.acknowledged_per_round(NODES as u8 + 1);
    println!(
        "kill_each_in_turn: formed in {:.2} s\n  {}\n  SETs acknowledged before the kills and \
         after each kill: {per_round:?}",
        formed_in.as_secs_f64(),
        timings.join("\n  "),
    );
    let read_back = load.check_read_back(&addrs, "every node was killed in turn");
    println!("  {read_back}");
    assert!(
        per_round.iter().all(|&n| n > 0),
        "writes were not acknowledged in every round: {per_round:?}"
    );
    let copies = check_copies_equal(&mut nodes, usize::from(NODES));
    println!(
        "  copies: {copies}; {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}
