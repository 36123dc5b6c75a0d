//! Issue 32: a `sync` cluster (`cluster local --durability sync --data-dir DIR`) under
//! load has every process killed at once (SIGKILL to the process group) and is started
//! again on the same directory, round after round (`FERROTX_RESTART_ROUNDS`, default 10).
//! After each restart every acknowledged write reads back: unique SETs, appends (each
//! key's tokens, Elle's list-append over APPEND: every acknowledged token once, each
//! client's in the order acknowledged), and bank transfers (MULTI/EXEC: every balance is
//! its initial one plus the acknowledged transfers plus some of those of unknown
//! outcome, and every audit while running saw all the money).
//!
//! A node restarting answers its Redis clients `-LOADING` until it serves.
//!
//! A SIGKILL keeps the page cache: this shows the restart loads what was logged and
//! recovers the transactions in flight; that the logs were synced before the
//! acknowledgement is the simulator's check (`crates/sim/tests/durability_seeds.rs`).

mod common;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrotx_redis_exec::RespValue;

use common::bank::Bank;
use common::client::{Conn, call_until_answered, certainly_no_effect, cmd};
use common::copies::check_copies_equal;
use common::nodes::{Nodes, full_strength, one_cluster_at_a_time};
use common::{ferrotx, temp_path, test_ports};

const ACCOUNTS: u64 = 8;
const BANK_CLIENTS: usize = 3;
const APPEND_KEYS: usize = 4;

fn rounds() -> usize {
    std::env::var("FERROTX_RESTART_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

fn start(dir: &Path, port_base: u16, resp_base: u16, round: usize) -> Child {
    let log = std::fs::File::create(dir.with_extension(format!("round-{round}.log")))
        .expect("the round's log");
    ferrotx()
        .args(["cluster", "local", "--durability", "sync", "--data-dir"])
        .arg(dir)
        .args(["--port-base", &port_base.to_string()])
        .args(["--resp-port-base", &resp_base.to_string()])
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("start cluster local")
}

/// SIGKILL to every process of the cluster at once; returns once all are gone.
fn kill_all(mut cluster: Child) {
    let group = -(cluster.id() as i32);
    // SAFETY: kill(2) on the process group this test started.
    unsafe { libc::kill(group, libc::SIGKILL) };
    let _ = cluster.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: signal 0 only asks whether a process of the group is left.
    while unsafe { libc::kill(group, 0) } == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the writers had acknowledged.
#[derive(Default)]
struct Acknowledged {
    /// Unique SETs: key and value.
    sets: BTreeMap<String, String>,
    /// Appends: per key, the tokens acknowledged, in order.
    appends: BTreeMap<String, Vec<String>>,
    /// Appends of unknown outcome: per key, tokens that may or may not be there.
    maybe: BTreeMap<String, Vec<String>>,
}

/// Writes unique SETs through `addr` until `stop`.
fn setter(addr: SocketAddr, round: usize, stop: &AtomicBool, acked: &Mutex<Acknowledged>) {
    let mut conn = None;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            conn = Conn::open(addr);
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let (key, value) = (format!("set:{round}:{n}"), format!("v{round}-{n}"));
        n += 1;
        match c.call(cmd(&[&"SET", &key, &value])) {
            Ok(RespValue::Simple(s)) if s == b"OK" => {
                acked.lock().unwrap().sets.insert(key, value);
            }
            Ok(_) => {}
            Err(_) => conn = None,
        }
    }
}

/// Appends tokens `" {client}:{n}"` to a few keys through `addr` until `stop`.
fn appender(
    addr: SocketAddr,
    client: usize,
    round: usize,
    stop: &AtomicBool,
    acked: &Mutex<Acknowledged>,
) {
    let mut conn = None;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            conn = Conn::open(addr);
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let key = format!("list:{}", n as usize % APPEND_KEYS);
        let token = format!("{client}.{round}.{n}");
        n += 1;
        match c.call(cmd(&[&"APPEND", &key, &format!(" {token}")])) {
            Ok(RespValue::Integer(_)) => {
                acked
                    .lock()
                    .unwrap()
                    .appends
                    .entry(key)
                    .or_default()
                    .push(token);
            }
            Ok(RespValue::Error(e)) if certainly_no_effect(&e) => {}
            Ok(_) | Err(_) => {
                acked
                    .lock()
                    .unwrap()
                    .maybe
                    .entry(key)
                    .or_default()
                    .push(token);
                conn = None;
            }
        }
    }
}

/// Panics unless every acknowledged write reads back through `addrs`.
fn check_read_back(addrs: &[SocketAddr], acked: &Acknowledged, round: usize) {
    for (i, (key, value)) in acked.sets.iter().enumerate() {
        let got = call_until_answered(addrs[i % addrs.len()], &cmd(&[&"GET", key]));
        assert_eq!(
            got.as_bytes(),
            Some(value.as_bytes()),
            "round {round}: acknowledged SET {key} = {value} read back as {got:?}"
        );
    }
    for key in (0..APPEND_KEYS).map(|k| format!("list:{k}")) {
        let got = call_until_answered(addrs[0], &cmd(&[&"GET", &key]));
        let text = String::from_utf8_lossy(got.as_bytes().unwrap_or_default()).into_owned();
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let mut seen = std::collections::HashSet::new();
        for t in &tokens {
            assert!(
                seen.insert(*t),
                "round {round}: {key} holds {t} twice: {text}"
            );
        }
        let acked_here = acked.appends.get(&key).map_or(&[][..], Vec::as_slice);
        let maybe = acked.maybe.get(&key).map_or(&[][..], Vec::as_slice);
        for t in &tokens {
            assert!(
                acked_here.iter().any(|a| a == t) || maybe.iter().any(|m| m == t),
                "round {round}: {key} holds {t}, which no client appended: {text}"
            );
        }
        // Every acknowledged token, and each client's in the order acknowledged.
        let position: BTreeMap<&str, usize> =
            tokens.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let mut last: BTreeMap<&str, usize> = BTreeMap::new();
        for t in acked_here {
            let Some(&at) = position.get(t.as_str()) else {
                panic!("round {round}: acknowledged append {t} missing from {key}: {text}");
            };
            let client = t.split('.').next().unwrap();
            if let Some(&before) = last.get(client) {
                assert!(
                    at > before,
                    "round {round}: {key}: client {client}'s appends out of order: {text}"
                );
            }
            last.insert(client, at);
        }
    }
}

#[test]
fn sync_cluster_killed_at_once_restarts_with_every_acknowledged_write() {
    let dir = temp_path("durability-restart");
    let _ = std::fs::remove_dir_all(&dir);
    let port_base = test_ports(0);
    let resp_base = port_base + 12;
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|i| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, resp_base + i)))
        .collect();
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let mut bank: Option<Arc<Bank>> = None;
    let rounds = rounds();
    let started = Instant::now();
    for round in 0..=rounds {
        let cluster = start(&dir, port_base, resp_base, round);
        // Everything acknowledged before the last kill reads back.
        check_read_back(&addrs, &acked.lock().unwrap(), round);
        if let Some(bank) = bank.take() {
            let summary = bank.check(addrs[round % addrs.len()]);
            eprintln!("round {round}: bank after the restart: {summary}");
        }
        if round == rounds {
            kill_all(cluster);
            break;
        }
        // Load, then every process killed at once in the middle of it.
        let b = Bank::open(&addrs, ACCOUNTS);
        let clients = b.start(BANK_CLIENTS);
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::new();
        for (i, &addr) in addrs.iter().enumerate() {
            let (stop, acked) = (stop.clone(), acked.clone());
            writers.push(std::thread::spawn(move || {
                if i == 0 {
                    setter(addr, round, &stop, &acked);
                } else {
                    appender(addr, i, round, &stop, &acked);
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(300 + 150 * (round as u64 % 6)));
        kill_all(cluster);
        stop.store(true, Ordering::SeqCst);
        b.stop(clients);
        for w in writers {
            w.join().unwrap();
        }
        let a = acked.lock().unwrap();
        eprintln!(
            "round {round}: killed after {} transfers, {} SETs and {} appends acknowledged in all",
            b.transfers(),
            a.sets.len(),
            a.appends.values().map(Vec::len).sum::<usize>()
        );
        assert!(b.transfers() > 0, "round {round}: no transfer went through");
        bank = Some(b);
        if round == 0 {
            // From now on the nodes checkpoint every MiB of log into 1 MiB segments:
            // restarts load from checkpoints and truncated logs, and earlier lives'
            // directories go once a life completed one.
            let path = dir.join("cluster.toml");
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.replacen(
                "mode = \"sync\"\n",
                "mode = \"sync\"\ncheckpoint_log_mb = 1\nsegment_mb = 1\n",
                1,
            );
            assert!(text.contains("checkpoint_log_mb"), "{text}");
            std::fs::write(&path, text).unwrap();
        }
    }
    let lives: usize = (0..3)
        .map(|n| {
            std::fs::read_dir(dir.join(format!("node-{n}")))
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("life-"))
                })
                .count()
        })
        .sum();
    eprintln!(
        "{rounds} rounds of SIGKILL and restart in {:.1} s; {lives} lives' directories left of {}",
        started.elapsed().as_secs_f64(),
        3 * (rounds + 1)
    );
    if rounds >= 3 {
        assert!(
            lives < 3 * (rounds + 1),
            "no checkpoint completed: every life's logs are still there"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A copy filled from its peers (data recovery, after its node was killed and came back
/// as a new life) is on that node's disk too: the fill's pages are logged, and the
/// writes its node logged before the fill are not replayed over them. After the whole
/// cluster is killed and started again, every copy equals its primary and every
/// acknowledged SET reads back.
#[test]
fn a_refilled_copy_comes_back_whole_after_a_whole_cluster_restart() {
    let _serial = one_cluster_at_a_time();
    let (mut nodes, data) = start_sync_nodes("durability-refill", 1, 3, 1000);
    let addrs = nodes.addrs.clone();
    let mut acked = Acknowledged::default();
    // Through the first `through` nodes.
    let set = |acked: &mut Acknowledged, from: usize, to: usize, through: usize| {
        for i in from..to {
            let (key, value) = (format!("refill:{i}"), format!("r{i}"));
            let got = call_until_answered(addrs[i % through], &cmd(&[&"SET", &key, &value]));
            assert_eq!(got, RespValue::ok());
            acked.sets.insert(key, value);
        }
    };
    set(&mut acked, 0, 200, 3);
    // Node 2 killed and back as a new life: removed, admitted, refilled.
    nodes.kill(2);
    set(&mut acked, 200, 300, 2);
    nodes.start(2);
    nodes.wait_status("node 2 refilled", |s| full_strength(s, 3));
    set(&mut acked, 300, 400, 3);
    // Every process at once, then all started again (no --join: from disk). Node 0,
    // alone at first, answers -LOADING until the cluster is back, as Redis does while
    // it loads.
    nodes.kill_together(&[0, 1, 2]);
    nodes.start_as(0, false);
    let deadline = Instant::now() + Duration::from_secs(30);
    let loading = loop {
        let reply = Conn::open(addrs[0]).map(|mut c| c.call(cmd(&[&"GET", &"refill:0"])));
        if let Some(Ok(reply)) = reply {
            break reply;
        }
        assert!(
            Instant::now() < deadline,
            "node 0 never answered while loading"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        matches!(&loading, RespValue::Error(e) if e.starts_with(b"LOADING")),
        "{loading:?}"
    );
    for node in 1..3 {
        nodes.start_as(node, false);
    }
    check_read_back(&nodes.addrs, &acked, 1);
    let summary = check_copies_equal(&mut nodes, 3);
    eprintln!("after the restart: {summary}");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&data);
}

/// A whole-cluster restart goes on without a node that does not come back: after
/// `RESTART_WAIT_LEASES` leases the nodes that did, whose copies cover every partition
/// (in `sync` mode each copy holds every acknowledged write), start the cluster, even
/// without node 0 (the lowest id, which leads a restart of every node). Every
/// acknowledged SET reads back through them. Node 0, started later, joins as a new
/// life, is refilled, and the cluster is back at full strength with equal copies.
#[test]
fn a_restart_goes_on_without_a_node_that_does_not_come_back() {
    let _serial = one_cluster_at_a_time();
    let (mut nodes, data) = start_sync_nodes("durability-partial", 2, 3, 500);
    let addrs = nodes.addrs.clone();
    let mut acked = Acknowledged::default();
    for i in 0..200 {
        let (key, value) = (format!("partial:{i}"), format!("p{i}"));
        let got = call_until_answered(addrs[i % 3], &cmd(&[&"SET", &key, &value]));
        assert_eq!(got, RespValue::ok());
        acked.sets.insert(key, value);
    }
    nodes.kill_together(&[0, 1, 2]);
    let started = Instant::now();
    nodes.start_as(1, false);
    nodes.start_as(2, false);
    check_read_back(&addrs[1..], &acked, 1);
    let waited = started.elapsed();
    eprintln!(
        "nodes 1 and 2 served again {:.1} s after they started, without node 0",
        waited.as_secs_f64()
    );
    assert!(
        waited >= Duration::from_millis(500 * ferrotx_membership::RESTART_WAIT_LEASES / 2),
        "served after {waited:?}: before waiting for node 0 at all?"
    );
    nodes.start_as(0, false);
    nodes.wait_status("node 0 back as a new life, refilled", |s| {
        full_strength(s, 3)
    });
    check_read_back(&addrs, &acked, 2);
    let summary = check_copies_equal(&mut nodes, 3);
    eprintln!("after node 0 came back: {summary}");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&data);
}

/// A 3-node `sync` cluster of `ferrotx node` processes (`replicas` copies of each
/// partition, ports of test number `test`), each node with its own data directory under
/// a fresh temporary directory named `name`, which is returned with the nodes.
fn start_sync_nodes(
    name: &str,
    test: u16,
    replicas: u8,
    lease_ms: u64,
) -> (Nodes, std::path::PathBuf) {
    let config = ferrotx_cluster::Configuration::local(3, replicas, 1, 4, test_ports(test))
        .expect("configuration")
        .with_durability(ferrotx_cluster::Durability {
            mode: ferrotx_cluster::DurabilityMode::Sync,
            ..ferrotx_cluster::Durability::default()
        });
    let data = temp_path(name);
    let _ = std::fs::remove_dir_all(&data);
    let dirs = data.clone();
    let nodes = Nodes::start_cluster_with(name, &config, lease_ms, move |n| {
        vec![
            "--data-dir".into(),
            dirs.join(format!("node-{n}")).display().to_string(),
        ]
    });
    (nodes, data)
}

/// Flips one bit in the middle of what the newest life of the node whose data directory
/// is `node_dir` logged (its first worker's first segment); returns the segment's path.
fn damage_newest_log(node_dir: &Path) -> std::path::PathBuf {
    let mut lives: Vec<_> = std::fs::read_dir(node_dir)
        .expect("the node's data directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("life-"))
        })
        .collect();
    lives.sort();
    let life = lives.last().expect("a life");
    let segment = life.join("w0-0000000000000000.wal");
    let mut bytes = std::fs::read(&segment).expect("the segment");
    // Segments are preallocated with zeros: the records end before them.
    let used = bytes.iter().rposition(|&b| b != 0).expect("records") + 1;
    bytes[used / 2] ^= 0x10;
    std::fs::write(&segment, &bytes).expect("write the damage");
    segment
}

/// Issue 32's bad disks at a whole-cluster restart: a bit flipped in the middle of one
/// node's log. With three copies, that node takes no part in the restart (it names the
/// file and offset), the others restart without it, and it then joins as a new life,
/// refilled from them: every acknowledged SET reads back through every node, and the
/// copies are equal. With one copy (nothing else holds its partitions) it refuses to
/// start, naming the file and offset, and never serves.
#[test]
fn a_damaged_log_is_refilled_from_the_other_copies_or_refused() {
    let _serial = one_cluster_at_a_time();
    for replicas in [3u8, 1] {
        let (mut nodes, data) =
            start_sync_nodes(&format!("durability-damaged-{replicas}"), 3, replicas, 500);
        let addrs = nodes.addrs.clone();
        let mut acked = Acknowledged::default();
        for i in 0..300 {
            let (key, value) = (format!("damaged:{i}"), format!("d{i}"));
            let got = call_until_answered(addrs[i % 3], &cmd(&[&"SET", &key, &value]));
            assert_eq!(got, RespValue::ok());
            acked.sets.insert(key, value);
        }
        nodes.kill_together(&[0, 1, 2]);
        let segment = damage_newest_log(&data.join("node-1"));
        let file = segment.file_name().unwrap().to_string_lossy().into_owned();
        for node in 0..3 {
            nodes.start_as(node, false);
        }
        if replicas == 3 {
            check_read_back(&addrs, &acked, 1);
            nodes.wait_status("node 1 refilled", |s| full_strength(s, 3));
            let summary = check_copies_equal(&mut nodes, 3);
            eprintln!("after the restart without node 1's damaged logs: {summary}");
            let log = nodes.log(1);
            assert!(
                log.contains("is damaged") && log.contains(&file) && log.contains("at byte"),
                "node 1 did not name the damage: {log}"
            );
        } else {
            let status = nodes.wait_exit(1);
            assert!(!status.success());
            let log = nodes.log(1);
            assert!(
                log.contains("refusing to start") && log.contains(&file) && log.contains("at byte"),
                "node 1 did not refuse naming the damage: {log}"
            );
        }
        drop(nodes);
        let _ = std::fs::remove_dir_all(&data);
    }
}
