//! `ferrotx node` and `ferrotx cluster local`: node processes, started and stopped.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use ferrotx_bench::driver::DriveOptions;
use ferrotx_cluster::{Configuration, RespSettings};
use ferrotx_node::{Node, NodeOptions};
use ferrotx_server::{RespServer, ServerOptions};

/// A flag raised by SIGINT (Ctrl-C) or SIGTERM.
fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal, while the first one's clean stop hangs, exits at once.
        signal_hook::flag::register_conditional_shutdown(signal, 1, flag.clone())
            .context("installing signal handlers")?;
        signal_hook::flag::register(signal, flag.clone()).context("installing signal handlers")?;
    }
    Ok(flag)
}

/// What node `node` of `config` is: its endpoints and the partitions it holds.
fn describe(config: &Configuration, node: u16) -> String {
    let member = config.member(node).expect("a member");
    let (mut primary, mut backup) = (Vec::new(), Vec::new());
    for (id, replicas) in config.partitions().iter() {
        if replicas.primary == node {
            primary.push(id.0);
        } else if replicas.backups.contains(&node) {
            backup.push(id.0);
        }
    }
    let last = member.rpc_addr(config.threads_per_node() - 1);
    let redis = match member.resp_addr() {
        Some(addr) => format!("Redis on {addr}; "),
        None => String::new(),
    };
    format!(
        "node {node} ({}): {} threads, UDP {}..{}; {redis}primary of partitions {primary:?}, \
         backup of {backup:?}",
        member.failure_domain,
        config.threads_per_node(),
        member.rpc_addr(0),
        last.port()
    )
}

/// `ferrotx node`: runs node `id` of the configuration at `path` until SIGINT or SIGTERM
/// (or, with `drive`, as a benchmark's node spoken to over stdin).
pub fn node(path: &Path, id: u16, drive: Option<&str>) -> anyhow::Result<()> {
    let config = Arc::new(Configuration::load(path)?);
    if config.member(id).is_none() {
        let members: Vec<u16> = config.members().iter().map(|m| m.node).collect();
        bail!(
            "node {id} is not a member of {} (its members are {members:?})",
            path.display()
        );
    }
    if let Some(drive) = drive {
        let drive: DriveOptions = serde_json::from_str(drive).context("parsing --drive")?;
        return ferrotx_bench::driver::serve(config, id, &drive);
    }
    let stop = stop_on_signals()?;
    let node = Node::start_udp(config.clone(), id, &NodeOptions::default())
        .with_context(|| format!("starting node {id}"))?;
    // The Redis front end, if the member has an address for it.
    let server = match ServerOptions::from_config(&config, id) {
        Ok(options) => Some(
            RespServer::start(node.handle(), &options)
                .with_context(|| format!("starting node {id}'s Redis front end"))?,
        ),
        Err(_) => None,
    };
    println!("{}", describe(&config, id));
    println!(
        "node {id}: running configuration {} with {} tables; Ctrl-C stops it",
        config.id(),
        config.tables().len()
    );
    if let Some(server) = &server {
        println!(
            "node {id}: serving Redis clients on {}",
            server.local_addr()
        );
    }
    while !stop.load(Ordering::Relaxed) {
        if node.any_worker_ended() {
            // Dropping the node joins its threads without propagating a panic (which has
            // already been printed), so this message is the last word.
            drop(server);
            drop(node);
            bail!("node {id}: a worker thread ended unexpectedly");
        }
        if server.as_ref().is_some_and(RespServer::has_ended) {
            drop(server);
            drop(node);
            bail!("node {id}: the Redis front end ended unexpectedly");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Clients first, so that none waits on a stopped worker.
    if let Some(server) = server {
        server.stop();
    }
    let reports = node.stop();
    let served: u64 = reports.iter().map(|r| r.rpc.requests_executed).sum();
    println!("node {id}: stopped after serving {served} requests");
    Ok(())
}

/// The shape of a local cluster.
pub struct LocalCluster {
    pub nodes: u16,
    pub replicas: u8,
    pub threads: u16,
    pub partitions_per_node: u32,
    pub port_base: u16,
    /// Node i serves Redis clients on 127.0.0.1, port `resp_port_base + i`.
    pub resp_port_base: u16,
    /// `[resp] pipeline_commands_max`.
    pub resp_pipeline_max: usize,
}

/// Node processes, terminated and reaped when dropped.
struct Children(Vec<(u16, Child)>);

impl Children {
    /// Sends SIGTERM to every live child and waits up to 5 s for each, then kills.
    fn stop(&mut self) {
        for (_, child) in &mut self.0 {
            if child.try_wait().ok().flatten().is_none() {
                // SAFETY: kill(2) on a child we started and have not reaped yet.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (node, child) in &mut self.0 {
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if child.try_wait().ok().flatten().is_none() {
                eprintln!("node {node} did not stop in 5 s; killing it");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `ferrotx cluster local`: starts the nodes as processes, prints what runs where, and
/// stops them all on Ctrl-C or SIGTERM, or when any of them dies (then it fails).
pub fn cluster_local(spec: &LocalCluster, config_out: Option<&Path>) -> anyhow::Result<()> {
    ensure!(
        spec.replicas >= 1 && u16::from(spec.replicas) <= spec.nodes,
        "--replicas must be in 1..=--nodes"
    );
    ensure!(
        u32::from(spec.resp_port_base) + u32::from(spec.nodes) <= u32::from(u16::MAX) + 1,
        "--resp-port-base {} leaves no port for node {}: lower it",
        spec.resp_port_base,
        spec.nodes.saturating_sub(1)
    );
    let config = Configuration::local(
        spec.nodes,
        spec.replicas,
        spec.threads,
        spec.partitions_per_node,
        spec.port_base,
    )?
    .with_resp_addrs(|member| {
        let port = spec.resp_port_base + member.node;
        Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
    })
    .context("--resp-port-base")?
    .with_resp(RespSettings {
        pipeline_commands_max: spec.resp_pipeline_max,
        ..RespSettings::default()
    })
    .context("--resp-pipeline-max")?;
    let (path, temp_dir) = match config_out {
        Some(path) => (path.to_path_buf(), None),
        None => {
            let dir = std::env::temp_dir().join(format!("ferrotx-cluster-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            (dir.join("cluster.toml"), Some(dir))
        }
    };
    std::fs::write(&path, config.to_toml_string())
        .with_context(|| format!("writing {}", path.display()))?;
    let result = run_children(&config, &path);
    if let Some(dir) = temp_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

fn run_children(config: &Configuration, path: &Path) -> anyhow::Result<()> {
    let stop = stop_on_signals()?;
    let exe = std::env::current_exe().context("finding this executable to start nodes")?;
    println!(
        "ferrotx local cluster: {} nodes, {} replicas per partition, {} partitions, \
         configuration in {}",
        config.members().len(),
        config.replicas(),
        config.partitions().partition_count(),
        path.display()
    );
    let mut children = Children(Vec::new());
    for member in config.members() {
        let child = ferrotx_bench::processes::node_command(&exe, path, member.node)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting node {}", member.node))?;
        println!("  pid {:>7}  {}", child.id(), describe(config, member.node));
        children.0.push((member.node, child));
    }
    let redis: Vec<String> = config
        .members()
        .iter()
        .filter_map(|member| member.resp_addr())
        .map(|addr| addr.to_string())
        .collect();
    println!("Redis clients: {}", redis.join(", "));
    println!("Ctrl-C stops the cluster.");
    let failed = loop {
        if stop.load(Ordering::Relaxed) {
            break None;
        }
        let dead = children
            .0
            .iter_mut()
            .find_map(|(node, child)| child.try_wait().ok().flatten().map(|s| (*node, s)));
        if let Some(dead) = dead {
            break Some(dead);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    children.stop();
    if let Some((node, status)) = failed {
        bail!("node {node} exited ({status}); stopped the others");
    }
    println!("stopped all {} nodes", config.members().len());
    Ok(())
}
