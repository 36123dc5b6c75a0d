//! A node process the cluster removes while it is alive comes back by itself, as a new
//! life of its node (docs/membership.md, "Reconfiguration"). Three `ferrotx node`
//! processes, three copies of every partition, a short lease; one node is paused
//! (SIGSTOP) until the others commit a view without it, then resumed (SIGCONT). Resumed,
//! it learns it was removed and:
//!
//! - by default replaces itself (same pid) with a new life, which joins the cluster with
//!   a greater incarnation and is refilled until every copy equals its primary; what was
//!   written before the pause reads back through it;
//! - with `--no-rejoin`, exits with code 3 and the others go on;
//! - under `cluster local`, the same as by default, and the launcher reports no dead node;
//! - as a benchmark's node (`bench bank --pause`), the same inside its process: the new
//!   life is refilled, the workload goes on there, and money is conserved.
//!
//! The tests take turns (as kill_under_load's): each runs a cluster with short leases.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrotx_cluster::Configuration;
use serde_json::Value;

use common::client::{call_until_answered, cmd};
use common::copies::check_copies_equal;
use common::nodes::{Nodes, one_cluster_at_a_time, settled_members, try_status};
use common::{bench, ferrotx, interrupt, temp_path, test_ports};

/// The nodes' lease (kill_under_load's): a paused node is removed within about two.
const LEASE_MS: u64 = 300;
const NODES: u16 = 3;
/// The lease of the cluster whose paused node runs with `--no-rejoin`: `ferrotx node`'s
/// default, chosen to give no false positive on a loaded machine.
const NO_REJOIN_LEASE_MS: u64 = 1_000;
/// Keys written before the pause, read back through the new life.
const KEYS: usize = 50;

/// Seconds a status may take to get where a test waits for it: generous, for a loaded
/// two-core machine running a debug build.
const STATUS_SECS: u64 = 60;

fn configuration(test: u16) -> Configuration {
    Configuration::local(NODES, 3, 1, 4, test_ports(test)).expect("configuration")
}

/// The life of `node` in the view of `status`, if it is a member.
fn life_of(status: &Value, node: u16) -> Option<u64> {
    status["members"]
        .as_array()?
        .iter()
        .find(|m| m["node"] == u64::from(node))?["incarnation"]
        .as_u64()
}

/// True if `status` shows `nodes` members, all settled (alive, in their life, at the
/// view), and `node` in a life other than `old_life`.
fn back_as_new_life(status: &Value, node: u16, old_life: u64) -> bool {
    settled_members(status).is_some_and(|m| m.len() == usize::from(NODES))
        && life_of(status, node).is_some_and(|life| life != old_life)
}

/// The removed life process `pid` was handed (`FERROTX_PREVIOUS_LIFE` in its
/// environment): `None` for a process as started.
fn previous_life_of(pid: u32) -> Option<u64> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"FERROTX_PREVIOUS_LIFE="))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
}

/// Polls `ferrotx status` of the cluster of `config` (which may have no view yet) until
/// `done` holds for it, for at most `STATUS_SECS`; returns that status.
fn wait_status(config: &Path, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(STATUS_SECS);
    loop {
        let s = try_status(config);
        if let Some(s) = &s
            && done(s)
        {
            return s.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {STATUS_SECS} s; last status {s:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Pauses `victim` until the others have settled on a view without it, then resumes it.
fn pause_until_removed(nodes: &mut Nodes, victim: u16) {
    nodes.signal(victim, libc::SIGSTOP);
    nodes.wait_status("a view without the paused node", |s| {
        settled_members(s).is_some_and(|m| !m.contains(&u64::from(victim)))
    });
    nodes.signal(victim, libc::SIGCONT);
}

#[test]
fn a_removed_live_node_rejoins_as_a_new_life_and_is_refilled() {
    let _serial = one_cluster_at_a_time();
    let mut nodes = Nodes::start_cluster("rejoin-new-life", &configuration(0), LEASE_MS);
    let before = nodes.wait_status("the cluster to form", |s| {
        settled_members(s).is_some_and(|m| m.len() == usize::from(NODES))
    });
    // A member that is not the CM: the common case, where the CM stays.
    let cm = before["cm"].as_u64().unwrap() as u16;
    let victim = (0..NODES).rev().find(|&n| n != cm).unwrap();
    let old_life = life_of(&before, victim).unwrap();
    let pid = nodes.pid(victim);
    for k in 0..KEYS {
        let (key, value) = (format!("rejoin:{k}"), format!("value {k}"));
        call_until_answered(nodes.addrs[usize::from(cm)], &cmd(&[&"SET", &key, &value]));
    }

    pause_until_removed(&mut nodes, victim);
    // `wait_status` fails as soon as a node process exits: the removed one must not.
    let after = nodes.wait_status("the paused node back as a new life", |s| {
        back_as_new_life(s, victim, old_life)
    });
    let new_life = life_of(&after, victim).unwrap();
    assert!(new_life > old_life, "life {new_life} after {old_life}");
    // The same process, replaced by execve and handed the removed life (or, after more
    // removals on a loaded machine, a later one).
    assert_eq!(nodes.pid(victim), pid);
    let handed = previous_life_of(pid);
    assert!(
        handed.is_some_and(|l| old_life <= l && l < new_life),
        "pid {pid} was handed {handed:?}, not a life from {old_life} to {new_life}"
    );
    let log = nodes.log(victim);
    let said = "removed from configuration";
    let line = format!("(life {old_life}); rejoining as a new life");
    assert!(
        log.lines().any(|l| l.contains(said) && l.contains(&line)),
        "node {victim}'s log:\n{log}"
    );

    // Refilled: full strength, every copy equal to its primary.
    let summary = check_copies_equal(&mut nodes, usize::from(NODES));
    // What was written before the pause reads back through the new life.
    let through = nodes.addrs[usize::from(victim)];
    for k in 0..KEYS {
        let key = format!("rejoin:{k}");
        let value = call_until_answered(through, &cmd(&[&"GET", &key]));
        assert_eq!(
            value.as_bytes(),
            Some(format!("value {k}").as_bytes()),
            "{key} through node {victim}"
        );
    }
    eprintln!(
        "rejoin: node {victim} (pid {pid}) removed and back as life {new_life} (was {old_life}); {summary}"
    );
}

#[test]
fn with_no_rejoin_a_removed_node_exits_with_code_3() {
    let _serial = one_cluster_at_a_time();
    let victim = NODES - 1;
    // The default lease: a false positive before the pause, which the other tests
    // survive by rejoining, would end this node too soon.
    let mut nodes = Nodes::start_cluster_with(
        "rejoin-no-rejoin",
        &configuration(1),
        NO_REJOIN_LEASE_MS,
        |n| {
            if n == victim {
                vec!["--no-rejoin".to_string()]
            } else {
                Vec::new()
            }
        },
    );
    pause_until_removed(&mut nodes, victim);
    let status = nodes.wait_exit(victim);
    assert_eq!(status.code(), Some(3), "{status}");
    let log = nodes.log(victim);
    assert!(log.contains("exiting (--no-rejoin)"), "{log}");
    assert!(!log.contains("rejoining as a new life"), "{log}");
    // The others go on without it.
    let s = nodes.wait_status("the others settled without it", |s| {
        settled_members(s).is_some_and(|m| m.len() == usize::from(NODES) - 1)
    });
    assert_eq!(life_of(&s, victim), None);
}

/// A `cluster local` process, stopped with its nodes (SIGTERM) if a test fails with it
/// running.
struct Launcher(Option<Child>);

impl Drop for Launcher {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            // SAFETY: kill(2) on a child of this test that has not been reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(15);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn under_cluster_local_a_removed_node_rejoins_and_is_not_reported_dead() {
    let _serial = one_cluster_at_a_time();
    let ports = test_ports(2);
    let dir = temp_path("rejoin-local");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("cluster.toml");
    let mut launcher = Launcher(Some(
        ferrotx()
            .args(["cluster", "local", "--nodes", "3", "--replicas", "3"])
            .args(["--port-base", &ports.to_string()])
            // In place of the generated configuration's Redis ports, after the RPC ports.
            .args(["--resp-port-base", &(ports + 3).to_string()])
            .args(["--lease-ms", &LEASE_MS.to_string()])
            .arg("--config-out")
            .arg(&config)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run ferrotx cluster local"),
    ));
    let launcher_child = launcher.0.as_mut().unwrap();
    // Up to its prompt, then every later line kept: a dead node would be reported there.
    let mut stdout = BufReader::new(launcher_child.stdout.take().unwrap());
    let mut started = Vec::new();
    while !started.iter().any(|l: &String| l.contains("Ctrl-C stops")) {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "{started:?}");
        started.push(line.trim().to_owned());
    }
    let later = Arc::new(Mutex::new(Vec::new()));
    let sink = later.clone();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    let victim = 2u16;
    let pid: u32 = started
        .iter()
        .find(|l| l.contains(&format!("node {victim} (")))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("node {victim}'s pid: {started:?}"));
    let before = wait_status(&config, "the cluster to form", |s| {
        settled_members(s).is_some_and(|m| m.len() == usize::from(NODES))
    });
    let old_life = life_of(&before, victim).unwrap();

    // SAFETY: kill(2) on a grandchild of this test, alive as the launcher reported it.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    wait_status(&config, "a view without the paused node", |s| {
        settled_members(s).is_some_and(|m| !m.contains(&u64::from(victim)))
    });
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) }, 0);
    let after = wait_status(&config, "the paused node back as a new life", |s| {
        back_as_new_life(s, victim, old_life)
    });
    assert!(life_of(&after, victim).unwrap() > old_life);
    assert!(
        previous_life_of(pid).is_some_and(|l| l >= old_life),
        "pid {pid} is not a new life"
    );
    let launcher_child = launcher.0.as_mut().unwrap();
    assert!(
        launcher_child.try_wait().unwrap().is_none(),
        "the launcher ended"
    );
    let reported = later.lock().unwrap().clone();
    assert!(
        !reported.iter().any(|l| l.contains("exited")),
        "the launcher reported a dead node: {reported:?}"
    );
    // Ctrl-C stops the launcher and every node, the new life too.
    interrupt(launcher.0.take().unwrap());
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z "),
        "node {victim} (pid {pid}) still runs after the launcher stopped"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A benchmark's node that the cluster removes (paused past its lease by `--pause`) comes
/// back as a new life inside its process, as `ferrotx node` and `cluster local` nodes do:
/// the report counts the removal and its rejoin and refill, the coroutines of the removed
/// life are counted (their commits kept, a transaction each was in of unknown outcome),
/// and the checks hold: every copy equals its primary and the money is all there.
#[test]
fn a_removed_benchmark_node_rejoins_and_its_checks_hold() {
    let _serial = one_cluster_at_a_time();
    let lease_ms = LEASE_MS.to_string();
    let port_base = test_ports(3).to_string();
    let r = bench(
        "bank",
        "rejoin-bench",
        &[
            "--lease-ms",
            &lease_ms,
            "--duration",
            "5",
            "--pause",
            "1@1",
            "--accounts",
            "200",
            "--coroutines",
            "4",
            "--port-base",
            &port_base,
        ],
    );
    let checks = &r["checks"];
    assert_eq!(checks["ok"], true, "{checks}");
    assert_eq!(checks["replicas_equal"], true, "{checks}");
    assert_eq!(checks["without_primary"], 0, "{checks}");
    assert_eq!(checks["primary_sum"], 200 * 1000, "{checks}");
    assert_eq!(checks["errors"], 0, "{checks}");
    let leases = &r["leases"];
    assert!(leases["removals"].as_u64() >= Some(1), "{leases}");
    let rejoins = leases["rejoins"].as_array().expect("rejoins");
    assert_eq!(
        rejoins.len() as u64,
        leases["removals"].as_u64().unwrap(),
        "{leases}"
    );
    assert!(rejoins.iter().any(|j| j["node"] == 1), "{leases}");
    for j in rejoins {
        // Each new life was admitted and saw the cluster back at full strength.
        assert!(j["rejoin_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{j}");
        assert!(j["refill_ms"].as_f64().is_some(), "{j}");
    }
    // Node 1's clients ran on its new life after the pause.
    assert!(number_at(&r["nodes"][1], "committed") > 0.0, "{r}");
}

fn number_at(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}
