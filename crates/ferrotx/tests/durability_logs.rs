//! Issue 32: `cluster local --durability sync --data-dir DIR` on real processes. Every
//! SET acknowledged is in the logs of all three copies when every process is killed at
//! once (SIGKILL to the process group), read back through the log's checksums. (A
//! SIGKILL keeps the page cache, so this shows the records are written where and as
//! they should be; whether they were synced before the acknowledgement is the
//! simulator's check, `crates/sim/tests/durability_seeds.rs`.) The data directories are
//! then refused to another cluster, node, or mode, each naming why, and a node whose
//! directory lacks its copies is refused.

mod common;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use ferrotx_node::FsStorage;
use ferrotx_redis_exec::RespValue;
use ferrotx_wal::WalConfig;

use common::client::{Conn, cmd};
use common::{ferrotx, temp_path, test_ports};

const SETS: usize = 300;

/// Every record payload of every log of node directory `dir` (all its lives).
fn payloads(dir: &Path, node: u16, cluster: [u8; 16]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for life in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        if !life.file_name().to_string_lossy().starts_with("life-") {
            continue;
        }
        let storage = FsStorage::open(life.path()).unwrap();
        let config = WalConfig {
            log_name: "w0".into(),
            cluster_id: cluster,
            node_id: node,
            segment_size_bytes: ferrotx_node::durability_segment_bytes(),
        };
        let recovery = ferrotx_wal::recover(&storage, &config)
            .unwrap_or_else(|e| panic!("{}: {e}", life.path().display()));
        out.extend(recovery.records.into_iter().map(|r| r.payload));
    }
    out
}

/// What `ferrotx node` says on stderr when it refuses to start node `id` of `config` on
/// `data_dir`; panics if it starts.
fn node_refused(config: &Path, id: u16, data_dir: Option<&Path>) -> String {
    let mut command = ferrotx();
    command
        .args(["node", "--config"])
        .arg(config)
        .args(["--id", &id.to_string()]);
    if let Some(dir) = data_dir {
        command.arg("--data-dir").arg(dir);
    }
    let output = command.output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "node {id} started: {said}");
    said
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn sync_mode_logs_every_acknowledged_set_on_every_copy() {
    let dir = temp_path("durability-local");
    let _ = std::fs::remove_dir_all(&dir);
    let port_base = test_ports(0);
    let resp_base = port_base + 12;
    let mut cluster = ferrotx()
        .args(["cluster", "local", "--durability", "sync", "--data-dir"])
        .arg(&dir)
        .args(["--port-base", &port_base.to_string()])
        .args(["--resp-port-base", &resp_base.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start cluster local");
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, resp_base));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut acknowledged = Vec::new();
    while acknowledged.len() < SETS {
        assert!(
            Instant::now() < deadline,
            "only {} SETs acknowledged",
            acknowledged.len()
        );
        let Some(mut conn) = Conn::open(addr) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        while acknowledged.len() < SETS {
            let value = format!("durable-{}-{}", std::process::id(), acknowledged.len());
            let key = format!("k{}", acknowledged.len());
            match conn.call(cmd(&[&"SET", &key, &value])) {
                Ok(RespValue::Simple(s)) if s == b"OK" => acknowledged.push(value),
                Ok(_) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break,
            }
        }
    }
    // Every process at once.
    // SAFETY: kill(2) on the process group this test started.
    unsafe { libc::kill(-(cluster.id() as i32), libc::SIGKILL) };
    let _ = cluster.wait();
    std::thread::sleep(Duration::from_millis(200));

    let config = ferrotx_cluster::Configuration::load(dir.join("cluster.toml")).unwrap();
    let cluster_id = ferrotx_node::cluster_id_bytes(&config);
    let logs: Vec<Vec<Vec<u8>>> = (0..3u16)
        .map(|n| payloads(&dir.join(format!("node-{n}")), n, cluster_id))
        .collect();
    for (n, log) in logs.iter().enumerate() {
        assert!(!log.is_empty(), "node {n} logged nothing");
    }
    let missing: Vec<(usize, &String)> = acknowledged
        .iter()
        .flat_map(|value| {
            logs.iter()
                .enumerate()
                .filter(|(_, log)| !log.iter().any(|p| contains(p, value.as_bytes())))
                .map(move |(n, _)| (n, value))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged SETs missing from a copy's log (node, value): {:?}",
        &missing[..missing.len().min(10)]
    );

    // The same directory in another mode: refused, naming it (in its own mode it
    // restarts the cluster: tests/durability_restart.rs).
    let again = ferrotx()
        .args(["cluster", "local", "--durability", "flush", "--data-dir"])
        .arg(&dir)
        .args(["--port-base", &port_base.to_string()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && said.contains("holds a cluster in sync mode"),
        "{said}"
    );
    // Node 1 on node 0's directory, and any node without one: refused.
    let config_path = dir.join("cluster.toml");
    let node_0 = dir.join("node-0");
    let said = node_refused(&config_path, 1, Some(&node_0));
    assert!(
        said.contains("ferrotx-data.toml") && said.contains("node 0"),
        "{said}"
    );
    let said = node_refused(&config_path, 1, None);
    assert!(said.contains("--data-dir"), "{said}");
    // A node of the dead cluster started on an empty directory: its copies are not
    // there, and it never serves as if they were empty.
    let empty = dir.join("node-0-empty");
    let said = node_refused(&config_path, 0, Some(&empty));
    assert!(said.contains("missing") && said.contains("life"), "{said}");
    // And over its earlier lives' logs with a coordination file of no cluster: never a
    // new, empty cluster.
    let said = ferrotx()
        .args(["node", "--config"])
        .arg(&config_path)
        .args(["--id", "0", "--data-dir"])
        .arg(&node_0)
        .arg("--coordination")
        .arg(dir.join("another.state.toml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&said.stderr);
    assert!(
        !said.status.success() && text.contains("earlier") && text.contains("empty cluster"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
