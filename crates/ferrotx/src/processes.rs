//! `ferrotx node` and `ferrotx cluster local`: node processes, started and stopped.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
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

/// What node `node` of `config` is: its endpoints and the partitions the configuration
/// file gives it (those of a new cluster's first view).
fn describe(config: &Configuration, node: u16) -> String {
    let members = config
        .members()
        .iter()
        .map(|m| ferrotx_cluster::ViewMember {
            node: m.node,
            incarnation: 1,
        })
        .collect();
    let first = ferrotx_cluster::View::initial(config.id(), config, members);
    describe_in(config, &first, node)
}

/// The default lease: long enough that a debug build of the whole test suite, run in
/// parallel on two cores, renews in time; benchmarks and operators choose shorter ones
/// (`--lease-ms`), down to FaRM's 10 ms on a machine kept for it.
pub const DEFAULT_LEASE_MS: u64 = 1_000;

/// How long a starting node waits to be admitted into the cluster.
const ADMIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Exit code of a node removed from the cluster that does not come back by itself: run
/// with `--no-rejoin`, or a newer life of its node is a member (another process runs as
/// this node). Restarted, it rejoins as a new member.
pub const EXIT_REMOVED: i32 = 3;

/// What `ferrotx node` runs (its command line).
pub struct NodeSpec<'a> {
    /// The configuration file.
    pub config: &'a Path,
    /// This node's id in it.
    pub id: u16,
    /// A benchmark's workload, driven over stdin (`--drive`).
    pub drive: Option<&'a str>,
    /// The lease, in milliseconds.
    pub lease_ms: u64,
    /// The coordination file (default: next to the configuration).
    pub coordination: Option<&'a Path>,
    /// How long idle workers poll (`--spin-us`).
    pub spin_us: Option<u64>,
    /// Only join a running cluster (`--join`).
    pub join: bool,
    /// The data directory (`--data-dir`), for the `flush` and `sync` modes.
    pub data_dir: Option<&'a Path>,
    /// Come back as a new life when removed (not `--no-rejoin`).
    pub rejoin: bool,
    /// What the lease thread does to stay on time (`--no-mlock`, `--no-realtime`).
    pub tuning: ferrotx_node::LeaseTuning,
}

/// `ferrotx node`: runs node `spec.id` of the configuration at `spec.config` until SIGINT
/// or SIGTERM (or, with `drive`, as a benchmark's node spoken to over stdin), as a member
/// of the cluster: it joins through the coordination service (default: next to the
/// configuration), holds a lease of `lease_ms`, and follows reconfigurations. Removed
/// from the cluster, it replaces itself with a new life ([`crate::rejoin`]), or with
/// `rejoin` false exits with [`EXIT_REMOVED`]. A driven node comes back too, as a new
/// life inside its process ([`ferrotx_bench::driver`]), so that its stdin protocol and
/// counters go on.
pub fn node(spec: &NodeSpec) -> anyhow::Result<()> {
    let NodeSpec {
        config: path,
        id,
        drive,
        lease_ms,
        coordination,
        spin_us,
        join,
        data_dir,
        rejoin,
        tuning,
    } = *spec;
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
        return ferrotx_bench::driver::serve(config, path, id, &drive);
    }
    ensure!(lease_ms >= 1, "--lease-ms must be at least 1");
    let previous = crate::rejoin::PreviousLife::from_env()?;
    let stop = stop_on_signals()?;
    let state = coordination
        .map(Path::to_path_buf)
        .unwrap_or_else(|| ferrotx_coord::default_state_path(path));
    let incarnation = previous.incarnation(ferrotx_node::incarnation_from_clock());
    let mut coordination = ferrotx_coord::FileCoordination::open_life(&state, id, incarnation)
        .with_context(|| format!("opening the coordination file {}", state.display()))?;
    let mode = config.durability().mode;
    if mode != ferrotx_cluster::DurabilityMode::Memory && data_dir.is_none() {
        bail!(
            "node {id}: the configuration's [durability] mode is {:?}, which logs to disk: \
             give the node its data directory with --data-dir DIR",
            mode.name()
        );
    }
    if mode == ferrotx_cluster::DurabilityMode::Memory && data_dir.is_some() {
        eprintln!(
            "node {id}: --data-dir given, but the configuration's [durability] mode is \
             \"memory\": nothing is written there"
        );
    }
    if let Some(dir) = data_dir.filter(|_| mode != ferrotx_cluster::DurabilityMode::Memory) {
        ferrotx_node::check_data_dir(dir, &config, id)
            .with_context(|| format!("node {id}: its data directory"))?;
    }
    let earlier_lives = data_dir
        .filter(|_| mode != ferrotx_cluster::DurabilityMode::Memory)
        .map(earlier_lives)
        .transpose()?
        .unwrap_or_default();
    let mut ended_on_disk: Option<ferrotx_cluster::View> = None;
    if mode != ferrotx_cluster::DurabilityMode::Memory && earlier_lives > 0 && !join {
        // Processes of a cluster killed at once release their liveness locks as they
        // exit: one started again at once may find a member still "alive" for a few
        // milliseconds, and would wait to join a cluster that is gone.
        let deadline = Instant::now() + Duration::from_secs(1);
        while coordination.running_cluster()?.is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    if join {
        // Into a running cluster only: never the first node of a new, empty one.
        let Some(view) = coordination.running_cluster()? else {
            bail!(
                "node {id}: --join, but no cluster runs on {} (no live member in its view); \
                 start without --join to begin a new cluster",
                state.display()
            );
        };
        println!("node {id}: joining the running cluster at configuration {view}");
    } else if mode != ferrotx_cluster::DurabilityMode::Memory
        && coordination.running_cluster()?.is_none()
    {
        // A cluster whose every process died restarts from its data directories: its
        // last view is ended "on disk" (every life suspended with its copies), and this
        // life loads its node's copies before it asks to join (`ferrotx_node::restore`).
        match coordination.end_on_disk_if_dead()? {
            Some(ended) => {
                println!(
                    "node {id}: the cluster of configuration {} in {} has no live member: \
                     restarting it from its data directories (the nodes of {} are awaited \
                     for {} leases; then the cluster starts with those back if they hold a \
                     copy of every partition, and the others join later, refilled)",
                    ended.id,
                    state.display(),
                    path.display(),
                    ferrotx_membership::RESTART_WAIT_LEASES
                );
                ended_on_disk = Some(ended);
            }
            None if earlier_lives > 0 => {
                // Never a new, empty cluster over logs of an earlier one.
                bail!(
                    "node {id}: the data directory {} holds the logs of {earlier_lives} \
                     earlier life(s) of this node, but {} holds no view of a cluster that \
                     ended with copies on disk (it is new, or its cluster ended in memory \
                     mode): starting a new, empty cluster over them would drop that data. \
                     Start the node with the coordination file of its cluster; to start \
                     empty on purpose, move the directory away (or use another --data-dir)",
                    data_dir.map_or_else(String::new, |d| d.display().to_string()),
                    state.display()
                );
            }
            None => {}
        }
    } else if let Some(ended) = coordination.retire_if_dead()? {
        println!(
            "node {id}: the cluster of configuration {ended} in {} has no live member: starting a new one",
            state.display()
        );
    }
    // Every datagram this node sends, RPC and lease, is sealed under the cluster key and
    // the cluster's id; it accepts no other.
    let (keys, key_path) = ferrotx_node::load_keys(path, &config, id, ferrotx_node::KEY_WAIT)?;
    let cluster = ferrotx_node::cluster_id(&mut coordination)?;
    let keys = ferrotx_node::ClusterKeys::watch(key_path.clone(), keys, cluster)
        .context("reading /dev/urandom for this process's sender salts")?;
    // The workers' clock counts from `epoch`; Unix time is that plus the offset read now.
    let epoch = Instant::now();
    let wall_offset_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        .saturating_sub(epoch.elapsed().as_nanos() as u64);
    // Redis commands whose keys share a primary are shipped to it and run there, with
    // key expiry judged by its clock.
    let procedures = ferrotx_redis_exec::KvTable::find(&config)
        .map(|kv| ferrotx_redis_exec::procedures(kv.with_wall_offset_ns(wall_offset_ns)))
        .unwrap_or_default();
    let logs = match data_dir {
        Some(dir) => ferrotx_node::NodeLogs::open(dir, &config, id, incarnation)
            .with_context(|| format!("node {id}: opening its data directory"))?,
        None => None,
    };
    if let Some(logs) = &logs {
        println!(
            "node {id}: durability {}: logging to {}",
            mode.name(),
            logs.dir().display()
        );
    }
    // While it loads and the cluster forms again, its Redis clients are answered
    // -LOADING, as Redis answers while it loads its dataset.
    let loading = match (&ended_on_disk, ServerOptions::from_config(&config, id)) {
        (Some(_), Ok(options)) => match ferrotx_server::LoadingResponder::start(options.addr) {
            Ok(responder) => Some(responder),
            Err(e) => {
                eprintln!(
                    "node {id}: cannot answer -LOADING on {} while it loads: {e}",
                    options.addr
                );
                None
            }
        },
        _ => None,
    };
    let restored = match (&ended_on_disk, data_dir, &logs) {
        (Some(ended), Some(dir), Some(logs)) => {
            let restored = match ferrotx_node::restore::load(dir, &config, id, ended) {
                Ok(restored) => restored,
                Err(ferrotx_node::restore::LoadError::Damaged(e)) => {
                    rejoin_after_damage(&mut coordination, id, ended, dir, &e)?;
                    None
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("node {id}: loading its copies from {}", dir.display())
                    });
                }
            };
            if let Some(restored) = &restored {
                logs.note_restored_from(restored.life)
                    .with_context(|| format!("node {id}: its data directory"))?;
                let s = &restored.stats;
                println!(
                    "node {id}: loaded {} copies of life {:x} ({} lives' logs, {} records, \
                     {} bytes) in {:.3} s: {} transactions committed, {} aborted, {} locks \
                     and {} records in doubt for recovery",
                    restored.partitions().len(),
                    restored.life,
                    restored.chain.len(),
                    s.records,
                    restored.bytes,
                    restored.elapsed.as_secs_f64(),
                    s.committed,
                    s.aborted,
                    s.locks_in_doubt,
                    s.records_in_doubt
                );
            }
            restored.map(Arc::new)
        }
        _ => None,
    };
    let life_logs = logs.clone();
    let mut options = NodeOptions {
        procedures,
        keys: Some(keys.clone()),
        logs,
        restored,
        ..NodeOptions::default()
    };
    if let Some(spin_us) = spin_us {
        options.idle.spin = Duration::from_micros(spin_us);
    }
    let membership = ferrotx_membership::Options::with_lease_ms(lease_ms);
    // A lock held elsewhere fails a swap for certain, before the call's deadline.
    coordination.set_lock_timeout(ferrotx_node::call_timeout(&membership) / 2);
    let lease = ferrotx_node::LeaseThread::start(
        config.clone(),
        id,
        incarnation,
        membership,
        Box::new(coordination),
        epoch,
        Some(keys),
        tuning,
    )?;
    let transports = Node::udp_transports(&config, id, &options)
        .with_context(|| format!("binding node {id}'s sockets"))?;
    println!(
        "node {id}: life {incarnation} joining the cluster {cluster} (coordination {}, key {})",
        state.display(),
        key_path.display()
    );
    let node = match Node::start_member(transports, &options, lease, ADMIT_TIMEOUT) {
        Ok(node) => node,
        Err(ferrotx_node::StartError::Removed) => {
            // Never a new life here: the newer one is another process, alive, or this
            // host's clock stepped back below an earlier life's; either way an operator
            // must look, and a loop of lives would only fight the other process.
            eprintln!(
                "node {id}: a newer life of this node than this one ({incarnation}) is a member: \
                 another process runs as node {id}, or the clock stepped back; exiting"
            );
            std::process::exit(EXIT_REMOVED);
        }
        Err(e) => return Err(e).with_context(|| format!("starting node {id}")),
    };
    // What the node holds besides its store counts toward its memory limit: its logs,
    // buffers and code, resident before any data arrived.
    node.handle()
        .memory()
        .set_fixed(ferrotx_node::resident_bytes());
    let admitted = Instant::now();
    let link = node.membership().expect("a member node").clone();
    let view = link.view().expect("admitted into a view");
    // The Redis front end, if the member has an address for it.
    if let Some(loading) = loading {
        loading.stop();
    }
    let server = match ServerOptions::from_config(&config, id) {
        Ok(options) => Some(
            RespServer::start(node.handle(), &options)
                .with_context(|| format!("starting node {id}'s Redis front end"))?,
        ),
        Err(_) => None,
    };
    println!("{}", describe_in(&config, &view, id));
    println!(
        "node {id}: member of configuration {} (CM: node {}) with {} tables; Ctrl-C stops it",
        view.id,
        view.cm,
        config.tables().len()
    );
    if let Some(server) = &server {
        println!(
            "node {id}: serving Redis clients on {}",
            server.local_addr()
        );
    }
    let mut checkpoints_seen = 0;
    while !stop.load(Ordering::Relaxed) {
        if life_logs.as_ref().is_some_and(|logs| logs.failed()) {
            // FaRM's failed machine: a node that can no longer make its log durable
            // stops, and the others' leases see it gone and recover its copies from
            // theirs. Serving on would only refuse every commit it takes part in.
            drop(server);
            drop(node);
            bail!(
                "node {id}: a sync of its log failed (the disk under {} lost writes); \
                 stopping so that the other copies take over: restart it on a working disk",
                life_logs
                    .as_ref()
                    .map_or_else(String::new, |l| l.dir().display().to_string())
            );
        }
        if let Some(logs) = &life_logs {
            let checkpoints = node.core().checkpoints().stats();
            if checkpoints.completed > checkpoints_seen {
                if checkpoints_seen == 0 {
                    // This life's logs now hold all a restart needs.
                    match logs.remove_other_lives() {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(
                            node = id,
                            "checkpoint complete; removed {n} earlier lives' logs"
                        ),
                        Err(e) => {
                            tracing::warn!(node = id, "removing earlier lives' logs: {e}");
                        }
                    }
                }
                checkpoints_seen = checkpoints.completed;
                tracing::info!(
                    node = id,
                    "checkpoint {} complete in {:.3} s ({} objects and {} bytes copied by \
                     every round so far); {} log segments removed so far",
                    checkpoints.completed,
                    checkpoints.last_round_ns as f64 / 1e9,
                    checkpoints.objects,
                    checkpoints.bytes,
                    logs.segments_removed()
                );
            }
        }
        if link.removed() {
            let removing = removing_view(&link);
            // Sockets closed, the liveness lock released: nothing of this life is left
            // for the next one to trip over.
            drop(server);
            drop(node);
            if !rejoin {
                eprintln!(
                    "node {id}: removed from configuration {removing} (life {incarnation}); \
                     exiting (--no-rejoin): restart it to rejoin as a new member"
                );
                std::process::exit(EXIT_REMOVED);
            }
            eprintln!(
                "node {id}: removed from configuration {removing} (life {incarnation}); \
                 rejoining as a new life"
            );
            crate::rejoin::replace_with_new_life(id, incarnation, admitted, previous, &stop)
                .unwrap_or_else(|e| {
                    eprintln!("node {id}: {e:#}; exiting: restart it to rejoin as a new member");
                    std::process::exit(EXIT_REMOVED);
                });
            // Stopped by a signal while it waited to rejoin.
            println!("node {id}: stopped before rejoining");
            return Ok(());
        }
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

/// The id of the view that removed this process, once the lease thread published it
/// (right after raising `removed`; waited for 200 ms at most).
fn removing_view(link: &ferrotx_node::Link) -> u64 {
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        let status = link.status();
        let known = status.view.map_or(0, |v| v.id);
        if status.phase == Some(ferrotx_membership::Phase::Removed) || Instant::now() >= deadline {
            return known;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What node `node` is in `view`: its endpoints and the partitions it holds there.
fn describe_in(config: &Configuration, view: &ferrotx_cluster::View, node: u16) -> String {
    let member = config.member(node).expect("a member");
    let (mut primary, mut backup) = (Vec::new(), Vec::new());
    for (p, copies) in view.copies.iter().enumerate() {
        match copies.iter().position(|&n| n == node) {
            Some(0) => primary.push(p),
            Some(_) => backup.push(p),
            None => {}
        }
    }
    let last = member.rpc_addr(config.threads_per_node() - 1);
    let redis = match member.resp_addr() {
        Some(addr) => format!("Redis on {addr}; "),
        None => String::new(),
    };
    format!(
        "node {node} ({}): {} threads, UDP {}..{}, lease {}; {redis}primary of partitions {primary:?}, \
         backup of {backup:?}",
        member.failure_domain,
        config.threads_per_node(),
        member.rpc_addr(0),
        last.port(),
        member.lease_addr(config.threads_per_node()),
    )
}

/// `ferrotx status`: the cluster's current view from its coordination file, each
/// member probed on its lease socket (alive, its view, its life, round trip), and the
/// recovery counters of each member with a Redis address (from INFO).
pub fn status(path: &Path, coordination: Option<&Path>, json: bool) -> anyhow::Result<()> {
    let config = Configuration::load(path)?;
    let state = coordination
        .map(Path::to_path_buf)
        .unwrap_or_else(|| ferrotx_coord::default_state_path(path));
    let view = ferrotx_coord::FileCoordination::read_path(&state)?
        .with_context(|| format!("no cluster has run on {} yet", state.display()))?;
    // Probes are sealed like any lease datagram: without the key, no member answers.
    let auth = match status_auth(path, &config, &state) {
        Ok(auth) => Some(auth),
        Err(e) => {
            eprintln!("warning: {e:#}: members cannot be probed");
            None
        }
    };
    let probes = probe_members(&config, &view, auth.as_ref());
    let infos = query_info(&config, &view);
    let recoveries: Vec<Option<RecoveryCounters>> = infos
        .iter()
        .map(|t| t.as_deref().and_then(RecoveryCounters::from_info))
        .collect();
    let coordination: Vec<Option<CoordinationInfo>> = infos
        .iter()
        .map(|t| t.as_deref().and_then(CoordinationInfo::from_info))
        .collect();
    let answered: Vec<&RecoveryCounters> = recoveries.iter().flatten().collect();
    let total = (!answered.is_empty()).then(|| RecoveryCounters::sum(&answered));
    let replicas = usize::from(config.replicas());
    let (short, lost) = view.short_and_lost(replicas);
    let filling = view.fills().count();
    let suspended_probes = probe_members(
        &config,
        &ferrotx_cluster::View {
            members: view.suspended.clone(),
            ..ferrotx_cluster::View::ended(view.id, 0)
        },
        auth.as_ref(),
    );
    let held = |node: u16| -> Vec<u32> {
        (0..view.copies.len() as u32)
            .filter(|&p| view.suspended_copies(p).contains(&node))
            .collect()
    };
    if json {
        let suspended: Vec<serde_json::Value> = view
            .suspended
            .iter()
            .zip(&suspended_probes)
            .map(|(m, p)| {
                serde_json::json!({
                    "node": m.node,
                    "incarnation": m.incarnation,
                    "alive": p.is_some(),
                    "same_life": p.map(|p| p.incarnation == m.incarnation),
                    "partitions": held(m.node),
                })
            })
            .collect();
        let members: Vec<serde_json::Value> = view
            .members
            .iter()
            .zip(&probes)
            .zip(&recoveries)
            .zip(&coordination)
            .map(|(((m, p), r), c)| {
                serde_json::json!({
                    "node": m.node,
                    "incarnation": m.incarnation,
                    "cm": m.node == view.cm,
                    "alive": p.is_some(),
                    "view": p.map(|p| p.view),
                    "same_life": p.map(|p| p.incarnation == m.incarnation),
                    "rtt_us": p.map(|p| p.rtt_us),
                    "recovery": r.as_ref().map(RecoveryCounters::json),
                    "coordination": c.as_ref().map(CoordinationInfo::json),
                })
            })
            .collect();
        let report = serde_json::json!({
            "configuration": view.id,
            "cm": view.cm,
            "members": members,
            "partitions": view.copies.len(),
            "replicas": replicas,
            "copies": view.copies,
            "filling": (0..view.copies.len()).map(|p| view.filling(p as u32)).collect::<Vec<_>>(),
            "backups_filling": filling,
            "short_of_copies": short,
            "without_copy": lost,
            "suspended": suspended,
            "unavailable": view.unavailable(),
            "lost": view.lost(),
            "recovery": total.as_ref().map(|t| {
                let mut json = t.json();
                json["members"] = answered.len().into();
                json
            }),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "configuration {} (coordination {})",
        view.id,
        state.display()
    );
    if view.is_ended() {
        println!("no live member: the cluster ended");
        return Ok(());
    }
    println!("CM: node {}", view.cm);
    println!("members:");
    for (m, p) in view.members.iter().zip(&probes) {
        let role = if m.node == view.cm { " (CM)" } else { "" };
        let state = match p {
            None => "not answering".to_string(),
            Some(p) if p.incarnation != m.incarnation => {
                format!("another life answers ({}), view {}", p.incarnation, p.view)
            }
            Some(p) if p.view != view.id => {
                format!("alive, behind at view {}, rtt {} us", p.view, p.rtt_us)
            }
            Some(p) => format!("alive, view {}, rtt {} us", p.view, p.rtt_us),
        };
        println!("  node {}{role}: life {}: {state}", m.node, m.incarnation);
    }
    for (m, p) in view.suspended.iter().zip(&suspended_probes) {
        let state = match p {
            None => "not answering".to_string(),
            Some(p) if p.incarnation != m.incarnation => {
                format!("another life answers ({})", p.incarnation)
            }
            Some(_) => "alive (being readmitted)".to_string(),
        };
        println!(
            "  node {}: life {}: SUSPENDED, holds the only copies of partitions {:?}: {state} \
             (back by itself when reachable; `ferrotx cluster forget --node {}` accepts their loss)",
            m.node,
            m.incarnation,
            held(m.node),
            m.node
        );
    }
    for m in config.members() {
        if view.life(m.node).is_none() {
            println!("  node {}: not a member", m.node);
        }
    }
    println!("recovery (INFO over Redis):");
    for (m, r) in view.members.iter().zip(&recoveries) {
        match r {
            Some(r) => println!("  node {}: {}", m.node, r.line()),
            None if config.member(m.node).and_then(|c| c.resp_addr()).is_none() => {
                println!("  node {}: no Redis address", m.node)
            }
            None => println!("  node {}: no answer to INFO", m.node),
        }
    }
    if let Some(t) = &total {
        println!("  all {} answering: {}", answered.len(), t.line());
    }
    println!("coordination service, as each member finds it (INFO over Redis):");
    for (m, c) in view.members.iter().zip(&coordination) {
        if let Some(c) = c {
            println!("  node {}: {}", m.node, c.line());
        }
    }
    println!("datagrams dropped (INFO over Redis):");
    for (m, r) in view.members.iter().zip(&recoveries) {
        if let Some(r) = r {
            println!("  node {}: {}", m.node, r.dropped_line());
        }
    }
    println!(
        "partitions: {} with {} copies each wanted; {} short of copies, {} with no copy \
         ({} of them unavailable until a suspended node is back, {} lost); \
         {filling} new backups being filled (data recovery)",
        view.copies.len(),
        replicas,
        short,
        lost,
        view.unavailable(),
        view.lost()
    );
    for (p, copies) in view.copies.iter().enumerate() {
        let fills = view.filling(p as u32);
        if copies.len() < replicas || !fills.is_empty() {
            let fills = if fills.is_empty() {
                String::new()
            } else {
                format!(", filling on {fills:?}")
            };
            println!(
                "  partition {p}: copies on {copies:?} ({} of {replicas}){fills}",
                copies.len()
            );
        }
    }
    Ok(())
}

/// `ferrotx cluster forget`: drops suspended node `node`'s life from the view (its
/// partitions that no member holds become lost), by compare-and-swap, then probes the
/// members with the new view's id so that they read it at once.
pub fn forget(
    path: &Path,
    coordination: Option<&Path>,
    node: u16,
    accept_data_loss: bool,
) -> anyhow::Result<()> {
    use ferrotx_cluster::CoordinationService;
    let config = Configuration::load(path)?;
    let state = coordination
        .map(Path::to_path_buf)
        .unwrap_or_else(|| ferrotx_coord::default_state_path(path));
    // As the node itself: refused while its process runs here (it holds the lock).
    let mut service = ferrotx_coord::FileCoordination::open(&state, node).with_context(|| {
        format!("node {node}'s process seems to run on this host: it is not lost; stop it, or let it be readmitted")
    })?;
    let view = service
        .read()?
        .with_context(|| format!("no cluster has run on {} yet", state.display()))?;
    let Some(incarnation) = view.suspended_incarnation(node) else {
        bail!(
            "node {node} is not suspended in configuration {} (suspended: {:?}); nothing to forget",
            view.id,
            view.suspended.iter().map(|m| m.node).collect::<Vec<_>>()
        );
    };
    let held: Vec<u32> = (0..view.copies.len() as u32)
        .filter(|&p| view.suspended_copies(p).contains(&node))
        .collect();
    let life = ferrotx_cluster::ViewMember { node, incarnation };
    let next = view.forgetting(&[life].into_iter().collect());
    let lost: Vec<u32> = held
        .iter()
        .copied()
        .filter(|&p| next.suspended_copies(p).is_empty() && next.copies[p as usize].is_empty())
        .collect();
    if !accept_data_loss {
        bail!(
            "forgetting node {node} (life {incarnation}) loses partitions {lost:?} for good              (their only copies are on it); pass --accept-data-loss to do so"
        );
    }
    service
        .compare_and_swap(Some(view.id), &next)
        .with_context(|| format!("storing configuration {}", next.id))?;
    println!(
        "configuration {}: node {node} (life {incarnation}) forgotten; partitions {lost:?} lost",
        next.id
    );
    // The members read the coordination service when a datagram names a newer view.
    let auth = status_auth(path, &config, &state).ok();
    let _ = probe_members_in(&config, &next, auth.as_ref(), next.id);
    Ok(())
}

/// How long `ferrotx status` waits for a member's INFO (connecting, then the reply).
const INFO_TIMEOUT: Duration = Duration::from_millis(300);

/// A node's transaction-state recovery counters, from the `recovery_*` fields of its INFO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RecoveryCounters {
    rounds: u64,
    commit: u64,
    abort: u64,
    /// By kind, in [`ferrotx_node::RECOVERY_VOTES`] order.
    votes: [u64; 6],
    waited: u64,
    /// Datagrams dropped, by reason, in [`ferrotx_node::DropStats::fields`] order (the
    /// `dropped_*` fields; zero where absent).
    dropped: [u64; 7],
}

impl RecoveryCounters {
    /// The counters in INFO's text, or `None` if it has none (not a ferrotx node, or one
    /// without them).
    fn from_info(text: &str) -> Option<Self> {
        let fields: std::collections::HashMap<&str, u64> = text
            .lines()
            .filter_map(|line| line.trim_end().split_once(':'))
            .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
            .collect();
        let field = |name: &str| fields.get(name).copied();
        let mut votes = [0; 6];
        for (n, kind) in votes.iter_mut().zip(ferrotx_node::RECOVERY_VOTES) {
            *n = field(&format!("recovery_votes_{}", kind.name()))?;
        }
        let mut dropped = [0; 7];
        for (n, (name, _)) in dropped
            .iter_mut()
            .zip(ferrotx_node::DropStats::default().fields())
        {
            *n = field(&format!("dropped_{name}")).unwrap_or(0);
        }
        Some(Self {
            dropped,
            rounds: field("recovery_rounds")?,
            commit: field("recovery_decided_commit")?,
            abort: field("recovery_decided_abort")?,
            votes,
            waited: field("recovery_waited")?,
        })
    }

    fn sum(all: &[&Self]) -> Self {
        let mut sum = Self::default();
        for r in all {
            sum.rounds += r.rounds;
            sum.commit += r.commit;
            sum.abort += r.abort;
            for (s, n) in sum.votes.iter_mut().zip(r.votes) {
                *s += n;
            }
            sum.waited += r.waited;
            for (s, n) in sum.dropped.iter_mut().zip(r.dropped) {
                *s += n;
            }
        }
        sum
    }

    fn json(&self) -> serde_json::Value {
        let votes: serde_json::Map<String, serde_json::Value> = ferrotx_node::RECOVERY_VOTES
            .iter()
            .zip(self.votes)
            .map(|(kind, n)| (kind.name().to_owned(), n.into()))
            .collect();
        let dropped: serde_json::Map<String, serde_json::Value> =
            ferrotx_node::DropStats::default()
                .fields()
                .iter()
                .zip(self.dropped)
                .map(|((name, _), n)| ((*name).to_owned(), n.into()))
                .collect();
        serde_json::json!({
            "dropped": dropped,
            "rounds": self.rounds,
            "decisions": { "commit": self.commit, "abort": self.abort },
            "votes": votes,
            "waited": self.waited,
        })
    }

    /// The datagrams dropped, as one line of `ferrotx status`.
    fn dropped_line(&self) -> String {
        let fields: Vec<String> = ferrotx_node::DropStats::default()
            .fields()
            .iter()
            .zip(self.dropped)
            .map(|((name, _), n)| format!("{name} {n}"))
            .collect();
        fields.join(", ")
    }

    /// One line of `ferrotx status`.
    fn line(&self) -> String {
        let votes: Vec<String> = ferrotx_node::RECOVERY_VOTES
            .iter()
            .zip(self.votes)
            .map(|(kind, n)| format!("{} {n}", kind.name()))
            .collect();
        format!(
            "{} rounds, decided {} commit / {} abort, votes {}, {} waited",
            self.rounds,
            self.commit,
            self.abort,
            votes.join(" "),
            self.waited
        )
    }
}

/// How the coordination service answers a node, from the `coordination_*` fields of its
/// INFO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct CoordinationInfo {
    state: String,
    calls: u64,
    failures: u64,
    timeouts: u64,
    in_flight_ms: u64,
    last_ok_ms_ago: u64,
    store_behind: u64,
    last_error: Option<String>,
}

impl CoordinationInfo {
    /// The fields in INFO's text, or `None` if it has none (a node without them).
    fn from_info(text: &str) -> Option<Self> {
        let fields: std::collections::HashMap<&str, &str> = text
            .lines()
            .filter_map(|line| line.trim_end().split_once(':'))
            .collect();
        let number = |name: &str| fields.get(name)?.parse::<u64>().ok();
        Some(Self {
            state: fields.get("coordination_state")?.to_string(),
            calls: number("coordination_calls")?,
            failures: number("coordination_failures")?,
            timeouts: number("coordination_timeouts")?,
            in_flight_ms: number("coordination_call_in_flight_ms")?,
            last_ok_ms_ago: number("coordination_last_ok_ms_ago")?,
            store_behind: number("coordination_store_behind")?,
            last_error: fields.get("coordination_last_error").map(|e| e.to_string()),
        })
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "state": self.state,
            "calls": self.calls,
            "failures": self.failures,
            "timeouts": self.timeouts,
            "call_in_flight_ms": self.in_flight_ms,
            "last_ok_ms_ago": self.last_ok_ms_ago,
            "store_behind": self.store_behind,
            "last_error": self.last_error,
        })
    }

    /// One line of `ferrotx status`.
    fn line(&self) -> String {
        let mut line = format!(
            "{}: {} calls, {} failed ({} timed out)",
            self.state, self.calls, self.failures, self.timeouts
        );
        if self.in_flight_ms > 0 {
            line += &format!(", a call under way for {} ms", self.in_flight_ms);
        }
        if self.store_behind > 0 {
            line += &format!(", went back to view {}", self.store_behind);
        }
        if let Some(e) = &self.last_error {
            line += &format!("; last error: {e}");
        }
        line
    }
}

/// The INFO text of every member of `view` with a Redis address, asked over TCP, all at
/// once, each within [`INFO_TIMEOUT`]; `None` for a member without an address or that
/// did not answer in time.
fn query_info(config: &Configuration, view: &ferrotx_cluster::View) -> Vec<Option<String>> {
    let password = config.resp().requirepass.as_deref();
    std::thread::scope(|scope| {
        let asks: Vec<_> = view
            .members
            .iter()
            .map(|m| {
                let addr = config.member(m.node).and_then(|c| c.resp_addr());
                scope.spawn(move || {
                    let mut addr = addr?;
                    if addr.ip().is_unspecified() {
                        addr.set_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
                    }
                    info_over_tcp(addr, password, INFO_TIMEOUT)
                })
            })
            .collect();
        asks.into_iter()
            .map(|ask| ask.join().ok().flatten())
            .collect()
    })
}

/// `INFO ferrotx` (after `AUTH` with `password`, if any) on the Redis port `addr`: the
/// reply's text, or `None` on an error reply, a malformed one or no whole reply within
/// `timeout` of the start.
fn info_over_tcp(addr: SocketAddr, password: Option<&str>, timeout: Duration) -> Option<String> {
    fn bulk(out: &mut Vec<u8>, arg: &[u8]) {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    let deadline = Instant::now() + timeout;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    let _ = stream.set_nodelay(true);
    let mut request = Vec::new();
    if let Some(password) = password {
        request.extend_from_slice(b"*2\r\n");
        bulk(&mut request, b"AUTH");
        bulk(&mut request, password.as_bytes());
    }
    request.extend_from_slice(b"*2\r\n");
    bulk(&mut request, b"INFO");
    bulk(&mut request, b"ferrotx");
    stream
        .set_write_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ))
        .ok()?;
    stream.write_all(&request).ok()?;
    let mut input = Vec::new();
    let mut at = 0;
    if password.is_some() {
        // `+OK`, or an error (then no INFO either).
        at = read_line(&mut stream, &mut input, 0, deadline)?;
        if !input.starts_with(b"+") {
            return None;
        }
    }
    // RESP2: `$<len>` then the text (INFO's verbatim string as a bulk string).
    let end = read_line(&mut stream, &mut input, at, deadline)?;
    let header = std::str::from_utf8(input.get(at..end - 2)?).ok()?;
    let len: usize = header.strip_prefix('$')?.parse().ok()?;
    while input.len() < end + len + 2 {
        read_some(&mut stream, &mut input, deadline)?;
    }
    String::from_utf8(input[end..end + len].to_vec()).ok()
}

/// Reads until `input` holds a CRLF at or after `from`; returns the index just past it.
fn read_line(
    stream: &mut TcpStream,
    input: &mut Vec<u8>,
    from: usize,
    deadline: Instant,
) -> Option<usize> {
    loop {
        if let Some(i) = input
            .get(from..)
            .and_then(|rest| rest.windows(2).position(|w| w == b"\r\n"))
        {
            return Some(from + i + 2);
        }
        read_some(stream, input, deadline)?;
    }
}

/// One read into `input`, waiting no later than `deadline`; `None` at the deadline, end
/// of stream or an error.
fn read_some(stream: &mut TcpStream, input: &mut Vec<u8>, deadline: Instant) -> Option<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return None;
    }
    stream.set_read_timeout(Some(left)).ok()?;
    let mut buf = [0u8; 4096];
    match stream.read(&mut buf) {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            input.extend_from_slice(&buf[..n]);
            Some(())
        }
    }
}

/// A member's answer to a probe.
#[derive(Clone, Copy)]
struct ProbeAnswer {
    view: u64,
    incarnation: u64,
    rtt_us: u64,
}

/// The cluster key and id that `ferrotx status` seals its probes with: the key file of
/// the configuration at `path`, and the id stored beside the coordination file `state`.
fn status_auth(
    path: &Path,
    config: &Configuration,
    state: &Path,
) -> anyhow::Result<ferrotx_wire::auth::Auth> {
    let (keys, _) = ferrotx_node::read_key_file(&ferrotx_node::key_path(path, config))?;
    let cluster = ferrotx_coord::read_cluster_id(state)?
        .with_context(|| format!("no cluster id beside {} yet", state.display()))?;
    Ok(ferrotx_node::process_auth(
        keys,
        ferrotx_wire::auth::ClusterId(cluster),
    )?)
}

/// Probes every member of `view` on its lease socket (membership nodes answer probes from
/// any holder of the cluster key), waiting up to 500 ms in all. Each run probes as a new
/// life of node `u16::MAX` (the clock), so that members' replay windows take it afresh.
fn probe_members(
    config: &Configuration,
    view: &ferrotx_cluster::View,
    auth: Option<&ferrotx_wire::auth::Auth>,
) -> Vec<Option<ProbeAnswer>> {
    probe_members_in(config, view, auth, 0)
}

/// [`probe_members`], the probes naming view `hint` (a member behind it reads the
/// coordination service).
fn probe_members_in(
    config: &Configuration,
    view: &ferrotx_cluster::View,
    auth: Option<&ferrotx_wire::auth::Auth>,
    hint: u64,
) -> Vec<Option<ProbeAnswer>> {
    use ferrotx_membership::{Body, Message};
    let incarnation = ferrotx_node::incarnation_from_clock();
    let mut sealer = auth.map(|auth| {
        auth.sealer(ferrotx_wire::auth::Sender::Lease {
            node: u16::MAX,
            incarnation,
        })
    });
    // Probes are numbered from a random base, and an answer counts only with its probe's
    // number and from the member probed: a replayed answer of an earlier run (sealed
    // for node `u16::MAX` too) matches no probe of this one.
    let base = ferrotx_node::random_bytes::<8>().map_or(0, u64::from_le_bytes);
    let mut answers = vec![None; view.members.len()];
    let Ok(socket) = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("0.0.0.0:0"))
    else {
        return answers;
    };
    let start = Instant::now();
    for (i, m) in view.members.iter().enumerate() {
        let Some(addr) = config.lease_addr(m.node) else {
            continue;
        };
        let mut out = Vec::new();
        Message {
            from: u16::MAX,
            incarnation,
            view: hint,
            seq: base.wrapping_add(i as u64),
            body: Body::Probe,
        }
        .encode(&mut out);
        if let Some(sealer) = &sealer {
            sealer.seal(&mut out, u32::from(m.node), i as u64 + 1);
        }
        let _ = socket.send_to(&out, addr);
    }
    let deadline = start + Duration::from_millis(500);
    let mut buf =
        vec![0u8; ferrotx_membership::MESSAGE_BYTES_MAX + ferrotx_wire::auth::TRAILER_BYTES];
    while answers.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let _ = socket.set_read_timeout(Some(left));
        let Ok((n, _)) = socket.recv_from(&mut buf) else {
            break;
        };
        let body = match &mut sealer {
            Some(sealer) => match sealer.open(&mut buf[..n], u32::from(u16::MAX)) {
                Ok((body, _)) => body,
                Err(_) => continue,
            },
            None => &buf[..n],
        };
        let Ok(m) = Message::decode(body) else {
            continue;
        };
        let index = m.seq.wrapping_sub(base);
        let probed = usize::try_from(index).ok().filter(|&i| {
            view.members
                .get(i)
                .is_some_and(|member| member.node == m.from)
        });
        if let (Body::ProbeReply { .. }, Some(slot)) =
            (&m.body, probed.and_then(|i| answers.get_mut(i)))
        {
            *slot = Some(ProbeAnswer {
                view: m.view,
                incarnation: m.incarnation,
                rtt_us: start.elapsed().as_micros() as u64,
            });
        }
    }
    answers
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
    /// The nodes' lease, in milliseconds.
    pub lease_ms: u64,
    /// `ferrotx node --spin-us` (default: its default).
    pub spin_us: Option<u64>,
    /// `ferrotx node --mlock` and `--no-realtime`.
    pub tuning: ferrotx_node::LeaseTuning,
    /// `[durability] mode`.
    pub durability: ferrotx_cluster::DurabilityMode,
    /// The cluster's directory (`--data-dir`): configuration, key, and node N's data
    /// directory in `node-N`.
    pub data_dir: Option<PathBuf>,
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
    .context("--resp-pipeline-max")?
    .with_durability(ferrotx_cluster::Durability {
        mode: spec.durability,
        ..ferrotx_cluster::Durability::default()
    });
    if spec.durability != ferrotx_cluster::DurabilityMode::Memory && spec.data_dir.is_none() {
        bail!(
            "--durability {} logs to disk: give the cluster a directory with --data-dir DIR",
            spec.durability.name()
        );
    }
    if let Some(dir) = &spec.data_dir {
        let existing = dir.join("cluster.toml");
        if existing.exists() && config_out.is_none() {
            // The cluster of this directory, restarted from its configuration, key and
            // nodes' data directories (docs/durability.md, "Whole-cluster restart").
            let stored = Configuration::load(&existing)
                .with_context(|| format!("reading the cluster in {}", dir.display()))?;
            if stored.durability().mode != spec.durability
                && spec.durability != ferrotx_cluster::DurabilityMode::Memory
            {
                bail!(
                    "{} holds a cluster in {} mode, not {}: its configuration decides",
                    dir.display(),
                    stored.durability().mode.name(),
                    spec.durability.name()
                );
            }
            println!(
                "ferrotx local cluster: restarting the cluster in {} ({} mode) from its \
                 configuration and its nodes' data directories; the shape options are not used",
                dir.display(),
                stored.durability().mode.name()
            );
            return run_children(&stored, &existing, spec);
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let (path, temp_dir) = match (config_out, &spec.data_dir) {
        (Some(path), _) => (path.to_path_buf(), None),
        (None, Some(dir)) => (dir.join("cluster.toml"), None),
        (None, None) => {
            let dir = std::env::temp_dir().join(format!("ferrotx-cluster-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            (dir.join("cluster.toml"), Some(dir))
        }
    };
    std::fs::write(&path, config.to_toml_string())
        .with_context(|| format!("writing {}", path.display()))?;
    // The cluster key, in the configuration's directory (kept if one is there).
    let key = ferrotx_node::key_path(&path, &config);
    match ferrotx_node::write_new_key_file(&key) {
        Ok(()) => println!(
            "ferrotx local cluster: new cluster key in {}",
            key.display()
        ),
        Err(ferrotx_node::KeyError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.into()),
    }
    let result = run_children(&config, &path, spec);
    if let Some(dir) = temp_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

fn run_children(config: &Configuration, path: &Path, spec: &LocalCluster) -> anyhow::Result<()> {
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
        let mut command = ferrotx_bench::processes::node_command(&exe, path, member.node);
        command.arg("--lease-ms").arg(spec.lease_ms.to_string());
        if let Some(spin_us) = spec.spin_us {
            command.arg("--spin-us").arg(spin_us.to_string());
        }
        command.arg("--mlock").arg(match spec.tuning.lock_memory {
            ferrotx_node::MemoryLock::Off => "off",
            ferrotx_node::MemoryLock::Fault => "fault",
            ferrotx_node::MemoryLock::All => "all",
        });
        if !spec.tuning.realtime {
            command.arg("--no-realtime");
        }
        if let Some(dir) = &spec.data_dir {
            command
                .arg("--data-dir")
                .arg(dir.join(format!("node-{}", member.node)));
        }
        let child = command
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
    // A node that dies is reported; the cluster reconfigures without it and the others
    // go on serving. The launcher ends on Ctrl-C, or once no node is left.
    let mut reported = std::collections::BTreeSet::new();
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        for (node, child) in children.0.iter_mut() {
            if let Ok(Some(status)) = child.try_wait()
                && reported.insert(*node)
            {
                println!(
                    "node {node} exited ({status}); the others go on without it \
                     (restart it with: ferrotx node --config {} --id {node} --join)",
                    path.display()
                );
            }
        }
        if reported.len() == children.0.len() {
            bail!("every node has exited");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    children.stop();
    println!("stopped all {} nodes", config.members().len());
    Ok(())
}

/// How many earlier lives of this node logged in data directory `dir` (their
/// `life-*` directories); 0 if it does not exist yet.
fn earlier_lives(dir: &Path) -> anyhow::Result<usize> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("life-"))
            .count()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e).with_context(|| format!("reading the data directory {}", dir.display())),
    }
}

/// A node whose logs are damaged at a whole-cluster restart (`damage` names the file and
/// offset): its copies cannot be trusted, so it takes no part in the restart. If every
/// partition it held has a copy on another node of the ended view, it waits until the
/// cluster runs again without it (the others restart once they hold a copy of every
/// partition) and then joins as a new life, refilled from those copies; its damaged
/// lives stay on disk until its first checkpoint removes them. A partition whose only
/// copy was here refuses the start, naming the damage: nothing else holds that data, and
/// serving without it would lose it silently.
fn rejoin_after_damage(
    coordination: &mut ferrotx_coord::FileCoordination,
    id: u16,
    ended: &ferrotx_cluster::View,
    dir: &std::path::Path,
    damage: &ferrotx_node::DataDirError,
) -> anyhow::Result<()> {
    let only_here = ferrotx_node::restore::only_copies_on(ended, id);
    if !only_here.is_empty() {
        bail!(
            "node {id}: its data directory {} is damaged: {damage}. No other node holds a \
             copy of partitions {only_here:?}, so the cluster cannot restart without these \
             logs: refusing to start. Nothing else holds that data: the named file must be \
             repaired (or the directory restored from a copy taken while the cluster was \
             stopped)",
            dir.display()
        );
    }
    eprintln!(
        "node {id}: its data directory {} is damaged: {damage}. Every copy it held has \
         another copy on other nodes: this node takes no part in the restart and, once the \
         cluster runs again without it, joins as a new life refilled from those copies (the \
         damaged logs stay until its first checkpoint)",
        dir.display()
    );
    let mut waited = Instant::now();
    while coordination.running_cluster()?.is_none() {
        if waited.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "node {id}: still waiting for the cluster to restart without it (the other \
                 nodes restart once those back hold a copy of every partition)"
            );
            waited = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("node {id}: the cluster runs again: joining it as a new life, to be refilled");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_counters_from_info() {
        let info = "# ferrotx\r\nnode_id:1\r\nrecovery_rounds:2\r\nrecovery_decided_commit:3\r\n\
                    recovery_decided_abort:1\r\nrecovery_votes_unknown:0\r\n\
                    recovery_votes_truncated:0\r\nrecovery_votes_abort:0\r\n\
                    recovery_votes_lock:1\r\nrecovery_votes_commit_backup:2\r\n\
                    recovery_votes_commit_primary:1\r\nrecovery_waited:4\r\n\
                    dropped_bad_mac:5\r\ndropped_not_member:6\r\n";
        let r = RecoveryCounters::from_info(info).unwrap();
        assert_eq!(
            r,
            RecoveryCounters {
                rounds: 2,
                commit: 3,
                abort: 1,
                votes: [0, 0, 0, 1, 2, 1],
                waited: 4,
                dropped: [5, 0, 0, 0, 0, 0, 6],
            }
        );
        assert_eq!(r.json()["dropped"]["bad_mac"], 5);
        let json = r.json();
        assert_eq!(json["decisions"]["commit"], 3);
        assert_eq!(json["votes"]["commit_backup"], 2);
        assert_eq!(RecoveryCounters::sum(&[&r, &r]).votes[4], 4);
        // A node without the counters (or a cut reply) has none.
        assert_eq!(
            RecoveryCounters::from_info("# ferrotx\r\nnode_id:1\r\n"),
            None
        );
        assert_eq!(
            RecoveryCounters::from_info(&info.replace("recovery_waited:4\r\n", "")),
            None
        );
    }

    #[test]
    fn info_from_a_closed_port_is_none_in_time() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepts (the backlog does) but never answers.
        let started = Instant::now();
        assert_eq!(info_over_tcp(addr, None, INFO_TIMEOUT), None);
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(listener);
        assert_eq!(info_over_tcp(addr, None, INFO_TIMEOUT), None);
    }
}
