//! Clusters of node processes over UDP on loopback: `bench bank`, `bench kv`, `node` and
//! `cluster local`, run as a user would.

mod common;

use std::process::{Command, Stdio};

use common::{bench, ferrotx, lines_until, number, temp_path, test_ports};
use std::time::{Duration, Instant};

/// A port range of its own for each test, so tests running at once do not collide.
fn port_base(test: u16) -> String {
    test_ports(test).to_string()
}

/// The Redis ports of test `test`'s local cluster: after its 3 nodes' RPC ports (and in
/// place of the Redis ports the generated configuration would put there).
fn resp_port_base(test: u16) -> String {
    (port_base(test).parse::<u16>().unwrap() + 3).to_string()
}

fn checks_passed(report: &serde_json::Value) {
    let checks = &report["checks"];
    assert_eq!(checks["ok"], true, "{checks}");
    assert_eq!(checks["replicas_equal"], true, "{checks}");
    assert_eq!(
        checks["primary_sum"], checks["primary_sum_expected"],
        "{checks}"
    );
    assert_eq!(checks["errors"], 0, "{checks}");
    assert_eq!(checks["primary_missing"], 0, "{checks}");
}

#[test]
fn bank_transfers_from_every_node_conserve_money_and_replicas_agree() {
    // Three node processes, two worker threads each, every node transferring between
    // few accounts (so transactions conflict), three copies of every partition.
    let r = bench(
        "bank",
        "bank",
        &[
            "--duration",
            "2",
            "--accounts",
            "50",
            "--threads",
            "2",
            "--coroutines",
            "8",
            "--port-base",
            &port_base(1),
        ],
    );
    checks_passed(&r);
    assert!(number(&r, "committed") > 100.0, "{r}");
    assert!(number(&r, "committed_total") >= number(&r, "committed"));
    // Few accounts and many coroutines: some transfers conflict and abort.
    assert!(number(&r, "aborted") > 0.0, "{r}");
    // 50 accounts of 1,000 at the start, all still there; none went below zero (a
    // negative balance would wrap to a huge number).
    assert_eq!(r["checks"]["primary_sum"], 50_000);
    assert!(number(&r["checks"], "primary_max") <= 50_000.0);
}

#[test]
fn bench_kv_reports_every_field_and_loses_no_write() {
    let r = bench(
        "kv",
        "kv",
        &[
            "--duration",
            "1",
            "--key-count",
            "10000",
            "--keys-per-txn",
            "4",
            "--write-share",
            "0.5",
            "--zipf",
            "0.99",
            "--port-base",
            &port_base(2),
        ],
    );
    for key in [
        "committed",
        "aborted",
        "duration_s",
        "throughput_per_s",
        "cpu_s",
        "throughput_per_cpu_s",
        "rpcs_per_commit",
        "datagrams_per_commit",
    ] {
        number(&r, key);
    }
    for key in ["p50", "p99", "p999"] {
        assert!(r["latency_us"][key].as_f64().is_some(), "latency_us.{key}");
    }
    assert!(number(&r, "committed") > 0.0, "{r}");
    assert!(number(&r, "cpu_s") > 0.0, "{r}");
    // The nodes ran as members, with the default lease.
    assert_eq!(r["leases"]["lease_ms"], 1000, "{r}");
    assert_eq!(r["leases"]["reconfigured"], false, "{r}");
    // Every committed transaction added 1 to the counters of its 2 written keys: the sum
    // of all counters at the primaries shows a lost or doubled write.
    checks_passed(&r);
    assert_eq!(
        number(&r["checks"], "primary_sum"),
        2.0 * number(&r, "committed_total")
    );
}

#[test]
fn one_key_read_modify_writes_shipped_or_not_lose_no_write_with_few_rpcs() {
    let r = bench(
        "kv",
        "rmw",
        &[
            "--duration",
            "1",
            "--key-count",
            "100000",
            "--no-ship",
            "--port-base",
            &port_base(3),
        ],
    );
    checks_passed(&r);
    assert!(r.get("shipping").is_none(), "{r}");
    assert_eq!(r["options"]["workload"]["Kv"]["ship"], false, "{r}");
    // 3 nodes, f = 2. The coordinator's own node is the primary a third of the time (no
    // RPC to read, lock or commit it, two remote backups) and a backup otherwise (read,
    // lock and commit the primary over RPC, one remote backup): on average
    // 2/3 + 2/3 + (1/3 * 2 + 2/3 * 1) + 2/3 = 3.33 RPCs; truncation rides on them.
    let rpcs = number(&r, "rpcs_per_commit");
    assert!((3.2..3.5).contains(&rpcs), "{rpcs} RPCs per commit: {r}");

    // Shipped (the default), on the same ports: the first run's nodes have exited (a
    // cluster takes 9 of the test's 16 ports).
    let ports = port_base(3);
    let r = bench(
        "kv",
        "rmw-shipped",
        &[
            "--duration",
            "1",
            "--key-count",
            "100000",
            "--port-base",
            &ports,
        ],
    );
    // The same end check: the counters add up to the commits, copies equal primaries.
    checks_passed(&r);
    assert_eq!(r["options"]["workload"]["Kv"]["ship"], true, "{r}");
    let shipping = &r["shipping"];
    // Every read-modify-write was shipped and committed: only batches write the keys, so
    // none conflicts.
    assert_eq!(
        number(shipping, "shipped"),
        number(&r, "committed_total"),
        "{r}"
    );
    // Each node counts its primaries' operations when it stops, and the others' clients
    // may still ship to it then (one operation per coroutine at most).
    let operations = number(shipping, "operations");
    assert!(operations <= number(shipping, "shipped"), "{r}");
    assert!(
        operations >= number(shipping, "shipped") - 2.0 * 20.0,
        "{r}"
    );
    assert_eq!(number(&r, "aborted"), 0.0, "{r}");
    assert!(number(shipping, "batches") >= 1.0, "{r}");
    // A SHIP to a remote primary (two in three) and the batch's two COMMIT-BACKUPs,
    // shared by the operations it combined: at most 2/3 + 2 = 2.67 RPCs per commit.
    let rpcs = number(&r, "rpcs_per_commit");
    assert!(rpcs < 2.7, "{rpcs} RPCs per commit: {r}");
}

#[test]
fn single_key_reads_take_one_rpc_at_most() {
    let r = bench(
        "kv",
        "reads",
        &[
            "--duration",
            "1",
            "--key-count",
            "100000",
            "--write-share",
            "0",
            "--port-base",
            &port_base(4),
        ],
    );
    checks_passed(&r);
    assert_eq!(number(&r, "aborted"), 0.0);
    // A read at a remote primary is one RPC; two primaries in three are remote.
    let rpcs = number(&r, "rpcs_per_commit");
    assert!((0.6..0.72).contains(&rpcs), "{rpcs}: {r}");
}

#[test]
fn bad_bench_flags_get_a_clear_error() {
    for (args, needle) in [
        (vec!["kv", "--write-share", "1.5"], "--write-share"),
        (vec!["kv", "--keys-per-txn", "0"], "--keys-per-txn"),
        (vec!["kv", "--value-bytes", "4"], "--value-bytes"),
        (vec!["kv", "--replicas", "4"], "--replicas"),
        (vec!["bank", "--accounts", "1"], "--accounts"),
    ] {
        let output = ferrotx()
            .arg("bench")
            .args(&args)
            .output()
            .expect("run ferrotx");
        assert!(!output.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn a_node_refuses_a_bad_configuration_or_id() {
    let output = ferrotx()
        .args(["node", "--config", "/nonexistent/cluster.toml", "--id", "0"])
        .output()
        .expect("run ferrotx");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/cluster.toml"), "{stderr}");

    let path = temp_path("example.toml");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../cluster/config/example.toml"
        ),
        &path,
    )
    .unwrap();
    let output = ferrotx()
        .args(["node", "--config"])
        .arg(&path)
        .args(["--id", "9"])
        .output()
        .expect("run ferrotx");
    let _ = std::fs::remove_file(&path);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("node 9 is not a member"), "{stderr}");
}

/// Starts `ferrotx cluster local` and waits until it says how to stop it.
fn start_local_cluster(test: u16) -> (std::process::Child, Vec<String>) {
    let mut child = ferrotx()
        .args(["cluster", "local", "--nodes", "3", "--replicas", "3"])
        .args(["--port-base", &port_base(test)])
        .args(["--resp-port-base", &resp_port_base(test)])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run ferrotx cluster local");
    let lines = lines_until(&mut child, "Ctrl-C stops the cluster");
    (child, lines)
}

fn wait_with_deadline(
    child: &mut std::process::Child,
    limit: Duration,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pid_of_node(lines: &[String], node: u16) -> String {
    let line = lines
        .iter()
        .find(|l| l.contains(&format!("node {node} (")))
        .unwrap_or_else(|| panic!("node {node} not listed: {lines:?}"));
    line.split_whitespace().nth(1).unwrap().to_owned()
}

#[test]
fn a_local_cluster_stops_cleanly_on_ctrl_c() {
    let (mut child, lines) = start_local_cluster(5);
    for node in 0..3 {
        pid_of_node(&lines, node);
    }
    assert!(
        lines.iter().any(|l| l.contains("primary of partitions")),
        "{lines:?}"
    );
    let redis = format!("Redis on 127.0.0.1:{}", resp_port_base(5));
    assert!(lines.iter().any(|l| l.contains(&redis)), "{lines:?}");
    std::thread::sleep(Duration::from_millis(300));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = wait_with_deadline(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{status}");
}

#[test]
fn a_local_cluster_reports_a_dead_node_and_keeps_the_others_running() {
    let (mut child, lines) = start_local_cluster(6);
    std::thread::sleep(Duration::from_millis(300));
    let victim = pid_of_node(&lines, 1);
    let status = Command::new("kill")
        .args(["-KILL", &victim])
        .status()
        .unwrap();
    assert!(status.success());
    // The survivors agree on a configuration without node 1 (the launcher's own
    // configuration file is in its temporary directory).
    let config = std::env::temp_dir()
        .join(format!("ferrotx-cluster-{}", child.id()))
        .join("cluster.toml");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = ferrotx()
            .args(["status", "--json", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let members: Vec<u64> = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|s| {
                s["members"]
                    .as_array()
                    .map(|m| m.iter().filter_map(|m| m["node"].as_u64()).collect())
            })
            .unwrap_or_default();
        if members == [0, 2] {
            break;
        }
        assert!(Instant::now() < deadline, "members {members:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(child.try_wait().unwrap().is_none(), "the launcher stopped");
    for node in [0, 2] {
        let pid = pid_of_node(&lines, node);
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(alive, "node {node} (pid {pid}) stopped");
    }
    // Ctrl-C still stops it cleanly.
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = wait_with_deadline(&mut child, Duration::from_secs(15));
    assert!(status.success(), "{status}");
}

#[test]
fn bank_transfers_survive_datagram_loss_over_udp() {
    // Every node drops 5% of the datagrams it sends: requests and responses are
    // retransmitted, and the money and the replicas must still come out right.
    let r = bench(
        "bank",
        "bank-loss",
        &[
            "--duration",
            "2",
            "--accounts",
            "200",
            "--coroutines",
            "8",
            "--loss",
            "0.05",
            "--port-base",
            &port_base(7),
        ],
    );
    checks_passed(&r);
    assert!(number(&r, "committed") > 100.0, "{r}");
    assert!(number(&r, "retransmissions") > 0.0, "{r}");
    assert_eq!(r["checks"]["primary_sum"], 200_000);
}

/// Runs `ferrotx ARGS --sweep PREFIX` (PREFIX a temporary path named after `name`), asserts
/// it succeeded, and returns the sweep's JSON, its SVG and PNG files' contents (removed
/// afterwards) and the command's stderr.
fn sweep(name: &str, args: &[&str]) -> (serde_json::Value, String, Vec<u8>, String) {
    let prefix = temp_path(name);
    let output = ferrotx()
        .args(args)
        .arg("--sweep")
        .arg(&prefix)
        .output()
        .expect("run ferrotx");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{}\n{stderr}",
        String::from_utf8_lossy(&output.stdout)
    );
    let read = |extension: &str| {
        let path = prefix.with_extension(extension);
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(path);
        bytes
    };
    let json = serde_json::from_slice(&read("json")).unwrap();
    let svg = String::from_utf8(read("svg")).unwrap();
    (json, svg, read("png"), stderr)
}

#[test]
fn tatp_success_rates_match_the_population_rules() {
    // Two runs on one cluster: the second starts from the population the first left, and
    // must draw other transactions (replaying the first run's inserts and deletes, every
    // one would fail).
    let port_base = port_base(8);
    let (sweep, _, _, _) = sweep(
        "tatp-rates",
        &[
            "bench",
            "tatp",
            "--duration",
            "1.5",
            "--subscribers-per-node",
            "2000",
            "--sweep-coroutines",
            "20,20",
            "--port-base",
            &port_base,
        ],
    );
    let runs = sweep["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    // FaSST's reading of the population rules (see ferrotx_bench::tatp::TatpWorkload).
    let expected = [
        ("GetSubscriberData", 1.0),
        ("GetNewDestination", 0.2199),
        ("GetAccessData", 0.625),
        ("UpdateSubscriberData", 0.625),
        ("UpdateLocation", 1.0),
        ("InsertCallForwarding", 0.3125),
        ("DeleteCallForwarding", 0.3125),
    ];
    for r in runs {
        checks_passed(r);
        let types = r["types"].as_array().expect("types");
        assert_eq!(types.len(), expected.len());
        for (t, (name, rate)) in types.iter().zip(expected) {
            assert_eq!(t["name"], name);
            let committed = number(t, "committed");
            // The rarest types (2% of the mix) see a few hundred transactions at least.
            assert!(committed > 100.0, "{t}");
            // Within five standard deviations of the expected rate.
            let sigma = (rate * (1.0 - rate) / committed).sqrt();
            let measured = number(t, "success_rate");
            assert!(
                (measured - rate).abs() <= 5.0 * sigma + 1e-9,
                "{name}: {measured} against {rate} ({t})"
            );
        }
    }
}

#[test]
fn smallbank_money_changes_only_by_what_transactions_did() {
    let r = bench(
        "smallbank",
        "smallbank",
        &[
            "--duration",
            "2",
            "--accounts-per-node",
            "1000",
            "--hot-accounts-per-node",
            "10",
            "--port-base",
            &port_base(9),
        ],
    );
    // The total at the primaries is the initial money plus what deposits and savings
    // transactions created, minus checks written, as the coroutines counted it.
    checks_passed(&r);
    assert!(number(&r, "committed") > 100.0, "{r}");
    // A hot set of 30 accounts makes transactions conflict.
    assert!(number(&r, "aborted") > 0.0, "{r}");
    let types = r["types"].as_array().expect("types");
    assert_eq!(types.len(), 6);
    for t in types {
        assert!(number(t, "committed") > 0.0, "{t}");
    }
}

#[test]
fn bench_latency_reports_every_size_beside_ramcloud() {
    let json = temp_path("latency");
    let output = ferrotx()
        .args([
            "bench",
            "latency",
            "--duration",
            "2",
            "--objects-per-size",
            "16",
        ])
        .args(["--port-base", &port_base(10), "--json"])
        .arg(&json)
        .output()
        .expect("run ferrotx");
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(json);
    assert!(number(&r, "rpc_rtt_p50_us") > 0.0, "{r}");
    let rows = r["rows"].as_array().expect("rows");
    let mut seen = Vec::new();
    for row in rows {
        let op = row["op"].as_str().unwrap();
        let size = number(row, "size_bytes") as u64;
        seen.push((op.to_owned(), size));
        assert!(number(row, "p50_us") > 0.0, "{row}");
        assert!(number(row, "p99_us") >= number(row, "p50_us"), "{row}");
    }
    let mut expected = Vec::new();
    for size in [100, 1_000, 10_000, 100_000, 1_000_000] {
        expected.push(("read".to_owned(), size));
        expected.push(("write".to_owned(), size));
    }
    assert_eq!(seen, expected);
    assert_eq!(r["cluster"]["checks"]["ok"], true);
}

#[test]
fn a_sweep_writes_its_data_and_a_plot() {
    let port_base = port_base(11);
    let (r, plot, image, _) = sweep(
        "sweep",
        &[
            "bench",
            "tatp",
            "--subscribers-per-node",
            "500",
            "--duration",
            "0.5",
            "--sweep-coroutines",
            "1,4",
            "--port-base",
            &port_base,
        ],
    );
    assert!(image.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let points = r["points"].as_array().expect("points");
    assert_eq!(points.len(), 2);
    assert_eq!(points[0]["coroutines"], 1);
    assert_eq!(points[1]["coroutines"], 4);
    for p in points {
        assert!(number(p, "throughput_per_s") > 0.0, "{p}");
    }
    assert_eq!(plot.matches("<circle").count(), 4);
}

#[test]
fn a_sweep_runs_every_point_on_one_cluster_and_checks_the_money_of_all() {
    // SmallBank's money check expects the initial money plus what every committed
    // transaction of every point created or destroyed: checked only after the last point,
    // it fails if any point's transactions were left out.
    let port_base = port_base(12);
    let (r, _, _, stderr) = sweep(
        "smallbank-sweep",
        &[
            "bench",
            "smallbank",
            "--accounts-per-node",
            "2000",
            "--hot-accounts-per-node",
            "20",
            "--duration",
            "0.5",
            "--sweep-coroutines",
            "2,8,4",
            "--port-base",
            &port_base,
        ],
    );
    // Loaded once, run three times.
    assert_eq!(stderr.matches("loaded in").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("then measuring").count(), 3, "{stderr}");
    let runs = r["runs"].as_array().expect("runs");
    let coroutines: Vec<u64> = runs
        .iter()
        .map(|run| run["options"]["coroutines"].as_u64().unwrap())
        .collect();
    assert_eq!(coroutines, [2, 8, 4]);
    let mut committed_in_windows = 0;
    for run in runs {
        checks_passed(run);
        committed_in_windows += run["committed"].as_u64().unwrap();
    }
    // Every report carries the totals of the whole cluster's life, warm-ups included.
    let total = runs[0]["committed_total"].as_u64().unwrap();
    assert!(
        total >= committed_in_windows,
        "{total} < {committed_in_windows}"
    );
    assert!(
        runs.iter()
            .all(|run| run["committed_total"] == runs[0]["committed_total"])
    );
}

#[test]
fn bench_leases_reports_expirations_renewals_and_round_trips() {
    // The nodes run as members with leases (the default lease, so that a debug build of
    // the whole suite on two cores gives no false positive), under a small TATP load.
    let r = bench(
        "leases",
        "leases",
        &[
            "--duration",
            "1.5",
            "--lease-ms",
            "1000",
            "--subscribers-per-node",
            "2000",
            "--port-base",
            &port_base(13),
        ],
    );
    assert_eq!(r["lease_ms"], 1000, "{r}");
    for field in [
        "expirations",
        "expirations_before_workload",
        "renewals",
        "suspicions",
        "renewal_rtt_p50_us",
        "renewal_rtt_p99_us",
        "renewal_rtt_max_us",
        "max_wake_late_us",
        "throughput_per_s",
        "faults_minor",
        "faults_major",
        "preempted",
        "removals",
    ] {
        number(&r, field);
    }
    assert!(r["realtime"].is_boolean(), "{r}");
    // Each step of the lease thread is reported, taken or not (memory locked, real-time).
    assert!(r["memory_locked"].is_boolean(), "{r}");
    // Each removal (none expected with the default lease) has its rejoin.
    assert_eq!(
        r["rejoins"].as_array().map(Vec::len),
        r["removals"].as_u64().map(|n| n as usize),
        "{r}"
    );
    assert_eq!(r["formed"], true, "{r}");
    assert!(number(&r, "renewals") > 0.0, "{r}");
    assert!(number(&r, "throughput_per_s") > 0.0, "{r}");
    let p50 = number(&r, "renewal_rtt_p50_us");
    assert!(p50 > 0.0 && p50 <= number(&r, "renewal_rtt_p99_us"), "{r}");
    assert!(number(&r, "renewal_rtt_p99_us") <= number(&r, "renewal_rtt_max_us") * 2.0);
    let nodes = r["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{r}");
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["node"], i, "{n}");
        assert!(n["realtime"].is_boolean(), "{n}");
        assert!(n["memory_locked"].is_boolean(), "{n}");
        number(n, "expirations");
        number(n, "removals");
        number(n, "renewal_rtt_max_us");
        assert_eq!(n["view_members"], 3, "{n}");
    }
    // The TATP run is there in full, with its own copy of the leases.
    checks_passed(&r["tatp"]);
    assert_eq!(r["tatp"]["leases"]["renewals"], r["renewals"]);
}

#[test]
fn bench_kv_without_leases_has_no_leases_object() {
    let r = bench(
        "kv",
        "kv-no-leases",
        &[
            "--duration",
            "0.5",
            "--key-count",
            "1000",
            "--lease-ms",
            "0",
            "--port-base",
            &port_base(14),
        ],
    );
    checks_passed(&r);
    assert!(r.get("leases").is_none(), "{r}");
    assert_eq!(r["options"]["lease_ms"], 0);
}
