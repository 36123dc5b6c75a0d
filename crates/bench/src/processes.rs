//! A cluster of node processes on loopback, each started as `ferrotx node --config FILE
//! --id N` from this executable, driven over their stdin and stdout (see [`crate::driver`]).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use ferrotx_cluster::Configuration;
use indicatif::{ProgressBar, ProgressStyle};

use crate::driver::DriveOptions;

/// Longest a node may take to answer a command (loading a million keys, or finishing
/// its coroutines, takes seconds).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// glibc's tunable that backs its heap with transparent huge pages (`madvise`), which
/// machines set to `madvise` mode otherwise give to no one.
const HUGE_PAGES_TUNABLE: &str = "glibc.malloc.hugetlb=1";

/// `exe node --config CONFIG --id NODE`, with glibc asked to back the heap with huge
/// pages unless the caller set `GLIBC_TUNABLES` itself: a node's indexes are gigabytes of
/// randomly read memory, and TATP at 1 M subscribers per node ran 4.5% more transactions
/// per second with them (400 K against 418 K, one pair of runs). This matters for a
/// `ferrotx` built without its default `mimalloc` feature; mimalloc ignores the tunable
/// (and ran TATP 3% and 8% faster than glibc with it, two pairs of runs).
pub fn node_command(exe: &std::path::Path, config: &std::path::Path, node: u16) -> Command {
    let mut command = Command::new(exe);
    command
        .arg("node")
        .arg("--config")
        .arg(config)
        .arg("--id")
        .arg(node.to_string());
    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        command.env("GLIBC_TUNABLES", HUGE_PAGES_TUNABLE);
    }
    command
}

/// One node process.
struct NodeProcess {
    node: u16,
    child: Child,
    stdin: ChildStdin,
    /// Lines of its stdout, read by a thread of their own so that a silent node cannot
    /// block the benchmark past [`ANSWER_TIMEOUT`].
    lines: mpsc::Receiver<String>,
    /// Killed on purpose ([`ProcessCluster::kill`]): spoken to no more.
    killed: bool,
}

/// Reads `stdout` line by line into a channel until it closes.
fn read_lines(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Node processes of one configuration, stopped (killed if need be) when dropped.
pub struct ProcessCluster {
    nodes: Vec<NodeProcess>,
    dir: PathBuf,
}

impl ProcessCluster {
    /// Writes `config` to a temporary file and starts one process per member, each
    /// driven with `drive`; returns once every node has loaded its data.
    pub fn start(config: &Configuration, drive: &DriveOptions) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("finding this executable to start nodes")?;
        let dir = std::env::temp_dir().join(format!(
            "ferrotx-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("cluster.toml");
        std::fs::write(&path, config.to_toml_string())
            .with_context(|| format!("writing {}", path.display()))?;
        // The nodes' coordination file (with leases) goes next to the configuration: a
        // fresh directory has none, but a view left by an earlier cluster would make the
        // nodes wait for its dead members, so none may remain.
        let state = ferrotx_coord::default_state_path(&path);
        match std::fs::remove_file(&state) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", state.display())),
        }
        let drive = serde_json::to_string(drive)?;
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
        };
        for member in config.members() {
            let mut child = node_command(&exe, &path, member.node)
                .arg("--drive")
                .arg(&drive)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("starting node {}", member.node))?;
            let stdin = child.stdin.take().expect("piped stdin");
            let lines = read_lines(child.stdout.take().expect("piped stdout"));
            cluster.nodes.push(NodeProcess {
                node: member.node,
                child,
                stdin,
                lines,
                killed: false,
            });
        }
        // Each node reports its loading, then `ready`; the first node's progress is shown.
        let bar = ProgressBar::new(0).with_style(
            ProgressStyle::with_template(
                "  loading: [{bar:20}] {percent:>3}% ({human_pos} of ~{human_len} rows, two passes)",
            )
            .expect("a valid progress template")
            .progress_chars("#."),
        );
        for i in 0..cluster.nodes.len() {
            loop {
                let line = cluster.read_one(i)?;
                if line == "ready" {
                    break;
                }
                let progress: Option<(u64, u64)> = line
                    .strip_prefix("loading ")
                    .and_then(|rest| rest.split_once(' '))
                    .and_then(|(done, total)| Some((done.parse().ok()?, total.parse().ok()?)));
                let Some((done, total)) = progress else {
                    bail!("a node did not start: {line}");
                };
                if i == 0 {
                    bar.set_length(total);
                    bar.set_position(done.min(total));
                }
            }
        }
        bar.finish_and_clear();
        Ok(cluster)
    }

    /// The configuration file the nodes run.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("cluster.toml")
    }

    /// Sends SIGKILL to node `node` at once; from then on, commands go to the others only.
    pub fn kill(&mut self, node: u16) -> anyhow::Result<()> {
        let process = self
            .nodes
            .iter_mut()
            .find(|n| n.node == node && !n.killed)
            .with_context(|| format!("no running node {node} to kill"))?;
        process.killed = true;
        process
            .child
            .kill()
            .with_context(|| format!("killing node {node}"))?;
        let _ = process.child.wait();
        Ok(())
    }

    /// Stops node `node`'s process (`SIGSTOP`) for `duration`, then resumes it
    /// (`SIGCONT`): to the cluster it looks like a machine that stalled the process.
    pub fn pause(&mut self, node: u16, duration: Duration) -> anyhow::Result<()> {
        let process = self
            .nodes
            .iter()
            .find(|n| n.node == node && !n.killed)
            .with_context(|| format!("no running node {node} to pause"))?;
        let pid = process.child.id() as libc::pid_t;
        ensure!(
            // SAFETY: kill(2) on a child this cluster started and has not reaped.
            unsafe { libc::kill(pid, libc::SIGSTOP) } == 0,
            "stopping node {node}: {}",
            std::io::Error::last_os_error()
        );
        std::thread::sleep(duration);
        ensure!(
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) } == 0,
            "resuming node {node}: {}",
            std::io::Error::last_os_error()
        );
        Ok(())
    }

    /// The nodes not killed, in node order: the nodes [`Self::command`] answers are from.
    pub fn running(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| !n.killed)
            .map(|n| n.node)
            .collect()
    }

    /// Sends `command` to every node not killed, then reads one answer line from each, in
    /// node order.
    pub fn command(&mut self, command: &str) -> anyhow::Result<Vec<String>> {
        for node in self.nodes.iter_mut().filter(|n| !n.killed) {
            writeln!(node.stdin, "{command}")
                .and_then(|()| node.stdin.flush())
                .with_context(|| format!("node {} is gone (sending {command:?})", node.node))?;
        }
        self.read_all()
    }

    /// Like [`Self::command`], parsing each answer as JSON.
    pub fn command_json<T: serde::de::DeserializeOwned>(
        &mut self,
        command: &str,
    ) -> anyhow::Result<Vec<T>> {
        self.command(command)?
            .iter()
            .map(|line| {
                serde_json::from_str(line)
                    .with_context(|| format!("parsing a node's answer to {command:?}: {line}"))
            })
            .collect()
    }

    fn read_all(&mut self) -> anyhow::Result<Vec<String>> {
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].killed)
            .collect();
        running.into_iter().map(|i| self.read_one(i)).collect()
    }

    /// The next line from node number `i` (in node order).
    fn read_one(&mut self, i: usize) -> anyhow::Result<String> {
        let node = &mut self.nodes[i];
        match node.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => Ok(line.trim().to_owned()),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("node {} did not answer in {ANSWER_TIMEOUT:?}", node.node)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = node.child.wait().ok();
                bail!("node {} exited early ({status:?})", node.node);
            }
        }
    }

    /// Tells every node to exit and waits for them; returns their last answers.
    pub fn exit<T: serde::de::DeserializeOwned>(mut self) -> anyhow::Result<Vec<T>> {
        let totals = self.command_json("exit")?;
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        for node in self.nodes.iter_mut().filter(|n| !n.killed) {
            let status = loop {
                if let Some(status) = node.child.try_wait()? {
                    break status;
                }
                ensure!(
                    Instant::now() < deadline,
                    "node {} did not exit in {ANSWER_TIMEOUT:?}",
                    node.node
                );
                std::thread::sleep(Duration::from_millis(5));
            };
            ensure!(status.success(), "node {} exited with {status}", node.node);
        }
        Ok(totals)
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if node.child.try_wait().ok().flatten().is_none() {
                let _ = node.child.kill();
                let _ = node.child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
