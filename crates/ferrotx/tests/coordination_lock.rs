//! Issue 31: the coordination file's lock held by another process while a member is
//! killed. Three `ferrotx node` processes, two copies of every partition, 200 ms leases.
//! This test process takes the state lock (`PATH.lock`, `flock`), as a stuck tool or a
//! wedged disk would hold it, then SIGKILLs a member that is not the CM.
//!
//! While the lock is held (4 s, 20 leases), the CM cannot store the view that removes the
//! dead member. The cluster keeps serving: the survivors keep their leases, every
//! partition whose copies all survive takes writes, and every partition whose primary
//! survives answers reads, through either survivor, the whole time (a partition with a
//! copy on the dead member cannot commit until the view leaves it out: FaRM's commit
//! writes every copy). `ferrotx status` shows the CM's coordination service failing with
//! the lock named. Before issue 31 the CM's lease thread waited on the lock
//! itself: every lease ran out within one, and nothing was served until it was released.
//!
//! Once the lock is released, the CM removes the dead member within a few leases, the
//! partitions it was primary of serve again, and every write acknowledged before, during
//! and after the hold reads back.

mod common;

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrotx_cluster::Configuration;
use ferrotx_redis_exec::{RespValue, store_key};
use serde_json::Value;

use common::client::{Conn, call_until_answered, cmd};
use common::nodes::{Nodes, one_cluster_at_a_time, settled_members};
use common::{status, test_ports};

const LEASE_MS: u64 = 200;
/// How long the lock is held after the kill.
const HOLD: Duration = Duration::from_secs(4);

/// One SET through `addr` with a fresh connection: `Ok` if acknowledged.
fn set(addr: SocketAddr, key: &str, value: &str) -> Result<(), String> {
    let mut conn = Conn::open(addr).ok_or("no connection")?;
    match conn.call(cmd(&[&"SET", &key, &value])) {
        Ok(RespValue::Simple(s)) if s == b"OK" => Ok(()),
        Ok(other) => Err(format!("{other:?}")),
        Err(e) => Err(format!("{e:?}")),
    }
}

/// The copies of each partition in a status, primary first.
fn copies(s: &Value) -> Vec<Vec<u64>> {
    s["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c.as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_u64().unwrap())
                .collect()
        })
        .collect()
}

/// One GET through `addr` with a fresh connection: the value, or why not.
fn get(addr: SocketAddr, key: &str) -> Result<RespValue, String> {
    let mut conn = Conn::open(addr).ok_or("no connection")?;
    conn.call(cmd(&[&"GET", &key]))
        .map_err(|e| format!("{e:?}"))
}

#[test]
fn a_held_coordination_lock_delays_reconfiguration_and_stops_nothing() {
    let _turn = one_cluster_at_a_time();
    let config = Configuration::local(3, 2, 1, 4, test_ports(0)).expect("configuration");
    let mut nodes = Nodes::start_cluster("coordination-lock", &config, LEASE_MS);
    let before = status(&nodes.config);
    let cm = before["cm"].as_u64().unwrap();
    let victim = (0..3u64).find(|&n| n != cm).unwrap();
    let survivors: Vec<u64> = (0..3u64).filter(|&n| n != victim).collect();
    // Keys of partitions with no copy on the victim (written throughout), and of
    // partitions whose primary survives but whose backup is the victim (read throughout).
    let copies = copies(&before);
    let partition_of = |key: &str| {
        config
            .partition_of_key(store_key(key.as_bytes()).as_bytes())
            .0 as usize
    };
    let keys = |prefix: &str, wanted: &dyn Fn(&[u64]) -> bool| -> Vec<String> {
        (0..1000)
            .map(|i| format!("{prefix}:{i}"))
            .filter(|k| wanted(&copies[partition_of(k)]))
            .take(8)
            .collect()
    };
    let served_keys = keys("held", &|c: &[u64]| !c.contains(&victim));
    let read_keys = keys("read", &|c: &[u64]| c[0] != victim && c.contains(&victim));
    assert!(
        !served_keys.is_empty() && !read_keys.is_empty(),
        "{copies:?}"
    );
    let mut acked: Vec<(String, String)> = Vec::new();
    for k in served_keys.iter().chain(&read_keys) {
        call_until_answered(nodes.addrs[0], &cmd(&[&"SET", k, &"before"]));
        acked.push((k.clone(), "before".into()));
    }

    // Hold the state lock, as another process would, then kill the victim.
    let lock_path = {
        let mut p = nodes.config.as_os_str().to_owned();
        p.push(".state.toml.lock");
        std::path::PathBuf::from(p)
    };
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .unwrap();
    lock.lock().unwrap();
    nodes.kill(victim as u16);
    let held_since = Instant::now();
    let mut writes = 0;
    let mut failures = Vec::new();
    let mut round = 0;
    while held_since.elapsed() < HOLD {
        for (i, k) in served_keys.iter().enumerate() {
            let through = nodes.addrs[survivors[(i + round) % 2] as usize];
            let value = format!("during-{round}");
            writes += 1;
            match set(through, k, &value) {
                Ok(()) => acked.push((k.clone(), value)),
                Err(e) => failures.push(format!(
                    "{} ms: SET {k} through {through}: {e}",
                    held_since.elapsed().as_millis()
                )),
            }
        }
        for (i, k) in read_keys.iter().enumerate() {
            let through = nodes.addrs[survivors[(i + round) % 2] as usize];
            writes += 1;
            match get(through, k) {
                Ok(RespValue::Bulk(v)) if v == b"before" => {}
                other => failures.push(format!(
                    "{} ms: GET {k} through {through}: {other:?}",
                    held_since.elapsed().as_millis()
                )),
            }
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let during = status(&nodes.config);
    assert!(
        failures.is_empty(),
        "{} of {writes} requests to partitions they should reach failed while the lock was held: {failures:#?}\n{during:#}",
        failures.len()
    );
    assert!(round >= 20, "only {round} rounds of writes in {HOLD:?}");
    // The view could not change: the dead member is still in it.
    assert_eq!(
        during["configuration"], before["configuration"],
        "{during:#}"
    );
    // The CM says why: its coordination service fails, naming the lock.
    let cm_entry = during["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["node"].as_u64() == Some(cm))
        .unwrap()
        .clone();
    let coordination = &cm_entry["coordination"];
    assert!(
        coordination["failures"].as_u64().is_some_and(|n| n > 0),
        "{during:#}"
    );
    let error = coordination["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("held by another process") && error.contains(".lock"),
        "{during:#}"
    );

    // Released: the CM removes the victim within a few leases, and everything serves.
    drop(lock);
    let released = Instant::now();
    let deadline = released + Duration::from_secs(15);
    let after = loop {
        let s = status(&nodes.config);
        if settled_members(&s).is_some_and(|m| m == survivors) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "never reconfigured after the release: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let reconfigured_ms = released.elapsed().as_millis();
    assert!(
        after["configuration"].as_u64() > before["configuration"].as_u64(),
        "{after:#}"
    );
    // Every partition serves, through every survivor.
    for i in 0..32 {
        let k = format!("after:{i}");
        let through = nodes.addrs[survivors[i % 2] as usize];
        assert_eq!(
            call_until_answered(through, &cmd(&[&"SET", &k, &"after"])),
            RespValue::ok()
        );
        acked.push((k, "after".into()));
    }
    // The last acknowledged value of every key reads back through every survivor.
    let mut last = std::collections::BTreeMap::new();
    for (k, v) in &acked {
        last.insert(k.clone(), v.clone());
    }
    for &s in &survivors {
        for (k, v) in &last {
            let got = call_until_answered(nodes.addrs[s as usize], &cmd(&[&"GET", k]));
            assert_eq!(got, RespValue::Bulk(v.clone().into_bytes()), "{k} via {s}");
        }
    }
    println!(
        "lock held {} ms: {writes} requests, all answered; reconfigured {reconfigured_ms} ms after the release",
        HOLD.as_millis()
    );
}
