//! Clusters of `ferrotx node` processes that tests kill with SIGKILL and restart with
//! `--join` (kill_under_load.rs, domain_kill.rs): the processes, the cluster's status as
//! `ferrotx status --json` reports it, and waiting for a state of the cluster.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferrotx_cluster::Configuration;
use serde_json::Value;

use super::{ferrotx, temp_path};

/// The tests of a file that run clusters of node processes take turns: each runs node
/// processes with short leases, and two clusters at once would compete for the machine's
/// cores. (Test binaries run one after the other.)
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// Holds the turn of the calling test until dropped.
pub fn one_cluster_at_a_time() -> MutexGuard<'static, ()> {
    // A test that failed holding it leaves nothing to clean up.
    ONE_CLUSTER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Longest wait for the cluster to form, a kill to be detected, a restart admitted, the
/// cluster back at full strength.
pub const MEMBERSHIP_DEADLINE: Duration = Duration::from_secs(30);

/// The cluster's node processes, killed when dropped. The run's directory (configuration,
/// coordination file, node logs, history) is removed then, unless the test failed or
/// `KILL_TEST_KEEP` is set.
pub struct Nodes {
    pub dir: PathBuf,
    pub config: PathBuf,
    /// Each node's Redis address, in node order.
    pub addrs: Vec<SocketAddr>,
    /// Each node's lease, passed as `--lease-ms`.
    lease_ms: u64,
    /// Each node's current process (`None` while killed).
    children: Vec<Option<Child>>,
    /// Processes started per node, naming their log files.
    lives: Vec<u32>,
    /// Arguments added to every `ferrotx node` of each node.
    extra_args: Vec<Vec<String>>,
}

impl Nodes {
    /// Starts a node process for every member of `config` (written to a new run directory
    /// named after `name`), each with a lease of `lease_ms`; waits until they formed a
    /// cluster.
    pub fn start_cluster(name: &str, config: &Configuration, lease_ms: u64) -> Self {
        Self::start_cluster_with(name, config, lease_ms, |_| Vec::new())
    }

    /// The same, each node's processes given the arguments `extra_args(node)` too.
    pub fn start_cluster_with(
        name: &str,
        config: &Configuration,
        lease_ms: u64,
        extra_args: impl Fn(u16) -> Vec<String>,
    ) -> Self {
        let dir = temp_path(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let addrs: Vec<SocketAddr> = config
            .members()
            .iter()
            .map(|m| m.resp_addr().expect("a Redis address"))
            .collect();
        let config_path = dir.join("cluster.toml");
        std::fs::write(&config_path, config.to_toml_string()).unwrap();
        let count = addrs.len();
        let mut nodes = Self {
            dir,
            config: config_path,
            addrs,
            lease_ms,
            children: (0..count).map(|_| None).collect(),
            lives: vec![0; count],
            extra_args: (0..count as u16).map(extra_args).collect(),
        };
        for node in 0..count {
            nodes.start(node as u16);
        }
        nodes.wait_status("the cluster to form", |s| {
            settled_members(s).is_some_and(|m| m.len() == count)
        });
        nodes
    }

    /// The nodes of the configuration file.
    pub fn count(&self) -> usize {
        self.children.len()
    }

    /// Starts a process for `node`: its first, or a restart, which joins the running
    /// cluster (`--join`), as an operator restarts a node.
    pub fn start(&mut self, node: u16) {
        let join = self.lives[usize::from(node)] > 0;
        self.start_as(node, join);
    }

    /// Starts a process for `node`, with `--join` if `join` (without: a node of a whole
    /// cluster started again, which restarts from disk in `flush` and `sync` modes).
    pub fn start_as(&mut self, node: u16, join: bool) {
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
            .args(["--lease-ms", &self.lease_ms.to_string()]);
        if join {
            command.arg("--join");
        }
        command.args(&self.extra_args[i]);
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start ferrotx node");
        self.children[i] = Some(child);
    }

    /// SIGKILL of `node`'s process (a child of this test), and its reaping.
    pub fn kill(&mut self, node: u16) {
        self.kill_together(&[node]);
    }

    /// SIGKILL of the processes of `nodes`, sent one right after the other before any is
    /// reaped (a failure domain going down at once), then their reaping.
    pub fn kill_together(&mut self, nodes: &[u16]) {
        let mut children: Vec<Child> = nodes
            .iter()
            .map(|&node| {
                let mut child = self.children[usize::from(node)]
                    .take()
                    .unwrap_or_else(|| panic!("node {node} does not run"));
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "node {node} had exited before its kill"
                );
                child
            })
            .collect();
        for child in &mut children {
            child.kill().expect("SIGKILL");
        }
        for mut child in children {
            child.wait().expect("reap a killed node");
        }
    }

    /// The pid of `node`'s current process.
    pub fn pid(&self, node: u16) -> u32 {
        self.children[usize::from(node)]
            .as_ref()
            .unwrap_or_else(|| panic!("node {node} does not run"))
            .id()
    }

    /// The log of `node`'s current process (its stdout and stderr).
    pub fn log(&self, node: u16) -> String {
        let i = usize::from(node);
        let path = self
            .dir
            .join(format!("node-{node}-life-{}.log", self.lives[i]));
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// Sends `signal` to `node`'s process (a child of this test, not reaped).
    pub fn signal(&mut self, node: u16, signal: i32) {
        let pid = self.pid(node);
        // SAFETY: kill(2) on a child of this test that has not been reaped.
        let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
        assert_eq!(sent, 0, "signal {signal} to node {node} (pid {pid})");
    }

    /// Waits (up to `MEMBERSHIP_DEADLINE`) until `node`'s process exits by itself, and
    /// returns how; the node then has no process.
    pub fn wait_exit(&mut self, node: u16) -> std::process::ExitStatus {
        let deadline = Instant::now() + MEMBERSHIP_DEADLINE;
        let child = self.children[usize::from(node)]
            .as_mut()
            .unwrap_or_else(|| panic!("node {node} does not run"));
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.children[usize::from(node)] = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "node {node} did not exit within {MEMBERSHIP_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The nodes whose current process has exited (none was killed by this test).
    pub fn exited(&mut self) -> Vec<String> {
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

    /// Polls the cluster's status until `done` holds for it; returns that status. Panics
    /// after `MEMBERSHIP_DEADLINE`, or as soon as a node process not killed by the test
    /// exits.
    pub fn wait_status(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + MEMBERSHIP_DEADLINE;
        loop {
            let s = try_status(&self.config);
            if let Some(s) = &s
                && done(s)
            {
                return s.clone();
            }
            let exited = self.exited();
            assert!(exited.is_empty(), "waiting for {what}: {exited:?}");
            assert!(
                Instant::now() < deadline,
                "{what}: not within {MEMBERSHIP_DEADLINE:?}; last status {s:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() || std::env::var_os("KILL_TEST_KEEP").is_some() {
            eprintln!("the run's directory is kept: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `ferrotx status --json` of the cluster, or `None` if it failed.
pub fn try_status(config: &Path) -> Option<Value> {
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
pub fn settled_members(s: &Value) -> Option<Vec<u64>> {
    let members = s["members"].as_array()?;
    let settled = members
        .iter()
        .all(|m| m["alive"] == true && m["same_life"] == true && m["view"] == s["configuration"]);
    settled.then(|| members.iter().filter_map(|m| m["node"].as_u64()).collect())
}

/// True if the status shows the cluster at full strength with `members` members: every
/// one alive, in its life, at the current view, and every partition with its full count
/// of copies (the replicas asked for, or every member if fewer) and no backup being
/// filled.
pub fn full_strength(s: &Value, members: usize) -> bool {
    let Some(settled) = settled_members(s) else {
        return false;
    };
    if settled.len() != members {
        return false;
    }
    let Some(replicas) = s["replicas"].as_u64() else {
        return false;
    };
    let want = replicas.min(members as u64) as usize;
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
