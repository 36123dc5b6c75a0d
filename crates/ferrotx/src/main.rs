//! The `ferrotx` command line. It parses arguments and calls into the library crates;
//! `processes` starts and stops node processes.

mod check;
mod processes;
mod rejoin;
mod sim;

/// See the `mimalloc` feature in Cargo.toml.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use ferrotx_bench::kv::ClusterBenchOptions;
use ferrotx_bench::rpc::{RpcBenchOptions, TransportKind};
use ferrotx_bench::workload::{
    BankWorkload, KvWorkload, SmallBankWorkload, TatpWorkload, Workload,
};

#[derive(Parser)]
#[command(
    name = "ferrotx",
    version,
    about = "ferrotx: a distributed in-memory transactional key-value store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant (a benchmark's flags) costs
// nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run one node of a cluster until Ctrl-C (SIGINT) or SIGTERM. Removed from the
    /// cluster while alive, it rejoins by itself as a new life (unless --no-rejoin).
    Node(NodeArgs),
    /// Show a running cluster: its configuration id, members and their state, the CM, the
    /// partition map with copies per partition, and lease health.
    Status(StatusArgs),
    /// Run a cluster.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(Bench),
    /// Run whole clusters in simulation, one thread per seed, under faults, and check
    /// every history (strict serializability, money, lost writes, replicas).
    Sim(sim::SimArgs),
    /// Write a new cluster key to PATH (mode 0600; never over an existing file), or print
    /// one key line for a rotation (see docs/operations.md, "Cluster key").
    Keygen(KeygenArgs),
    /// Check a recorded history (Jepsen's JSON format, as scripts/nemesis.py writes it).
    #[command(subcommand)]
    Check(CheckCommand),
}

#[derive(Subcommand)]
enum CheckCommand {
    /// Elle's list-append analysis (the `adya` crate) for strict serializability: prints
    /// the verdict and the anomalies found; exits 1 on an anomaly, 2 if undecided,
    /// 3 if the history cannot be read.
    ListAppend(CheckListAppendArgs),
}

#[derive(Args)]
struct CheckListAppendArgs {
    /// The history: one JSON operation per line (or a JSON array of them); operations
    /// whose `f` is not "txn" are skipped.
    #[arg(long)]
    history: PathBuf,
    /// Print adya's report as JSON (valid, anomaly_types, anomalies, not, also_not).
    #[arg(long)]
    json: bool,
    /// Budget of the cycle search in each strongly connected component, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout_s: u64,
}

#[derive(Args)]
struct KeygenArgs {
    /// The key file to create.
    #[arg(required_unless_present = "print")]
    path: Option<PathBuf>,
    /// Print one new key line on stdout instead (to add to a key file when rotating).
    #[arg(long, conflicts_with = "path")]
    print: bool,
}

#[derive(Args)]
struct NodeArgs {
    /// The cluster configuration (TOML; see crates/cluster/config/example.toml).
    #[arg(long)]
    config: PathBuf,
    /// This node's id in the configuration.
    #[arg(long)]
    id: u16,
    /// Run a benchmark workload driven over stdin (set by `bench kv`; not for direct use).
    #[arg(long, hide = true)]
    drive: Option<String>,
    /// Length of a lease, in milliseconds (FaRM 5.1): a node that cannot renew its lease
    /// for this long stops serving, and the cluster reconfigures without it. Shorter
    /// detects failures sooner; too short for the machine's load gives false positives.
    #[arg(long, default_value_t = processes::DEFAULT_LEASE_MS)]
    lease_ms: u64,
    /// The coordination service holding the cluster's current view: a file on this host,
    /// shared by the cluster's node processes. Default: the configuration file's path
    /// with `.state.toml` appended.
    #[arg(long)]
    coordination: Option<PathBuf>,
    /// Microseconds an idle worker keeps polling for work (yielding its core to other
    /// runnable threads meanwhile) before it sleeps in the kernel [default: 200]. Polling
    /// answers peers' messages without a wake-up; 0 leaves the cores to other processes.
    #[arg(long, value_name = "US")]
    spin_us: Option<u64>,
    /// Only join a running cluster (a restarted or new node): fail, rather than start a
    /// new empty cluster, if no member of the stored view is alive. Admitted, the node
    /// holds no data at first and receives backups to fill (data recovery).
    #[arg(long)]
    join: bool,
    /// This node's data directory: its logs, in the configuration's `[durability]` modes
    /// `flush` and `sync` (required then). Refused if it belongs to another cluster or
    /// node. See docs/durability.md for what is built.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Exit with code 3 when the cluster removes this node (it was partitioned away, or
    /// paused past its lease), as an operator's supervisor may want. By default the
    /// process comes back by itself: it replaces itself (same pid) with a new life of the
    /// node that joins the running cluster and is refilled by data recovery.
    #[arg(long)]
    no_rejoin: bool,
    /// How the process locks its memory for its lease thread, where it may lock all it maps
    /// (CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK): `fault` (every page from its first
    /// touch, the code at once), `all` (every mapping faulted in when made: the
    /// allocator's reserved arenas become resident), `off` [default: FERROTX_MLOCK, or
    /// fault].
    #[arg(long, value_enum, value_name = "MODE")]
    mlock: Option<MlockArg>,
    /// Run the lease thread at normal priority (by default it asks for SCHED_FIFO where
    /// the process may have it). Also FERROTX_REALTIME=0.
    #[arg(long)]
    no_realtime: bool,
}

#[derive(Args)]
struct StatusArgs {
    /// The cluster configuration (TOML).
    #[arg(long)]
    config: PathBuf,
    /// The coordination file (default: the configuration's path with `.state.toml`).
    #[arg(long)]
    coordination: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Start a cluster of node processes on this machine (loopback) and run it until
    /// Ctrl-C. A node that dies is reported; the others go on serving.
    Local(LocalArgs),
    /// Accept the loss of a suspended node's data: a node cut off while it held the last
    /// copies of some partitions is suspended (those partitions answer -CLUSTERDOWN until
    /// it is back); when it will not come back (its host is gone), this drops it from the
    /// view and its partitions become lost, serving again empty. Like Redis Cluster's
    /// CLUSTER FAILOVER TAKEOVER, it overrides the safety rule: use it only on a node you
    /// know is dead. Refused while the node's process runs on this host.
    Forget(ForgetArgs),
}

#[derive(Args)]
struct ForgetArgs {
    /// The cluster configuration (TOML).
    #[arg(long)]
    config: PathBuf,
    /// The coordination file (default: the configuration's path with `.state.toml`).
    #[arg(long)]
    coordination: Option<PathBuf>,
    /// The suspended node whose copies are given up.
    #[arg(long)]
    node: u16,
    /// Required: says that the data only this node holds may be lost for good.
    #[arg(long)]
    accept_data_loss: bool,
}

#[derive(Args)]
struct LocalArgs {
    /// Node processes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Copies of each partition (f + 1; at most --nodes).
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Worker threads per node.
    #[arg(long, default_value_t = 1)]
    threads: u16,
    /// Partitions per node.
    #[arg(long, default_value_t = 4)]
    partitions_per_node: u32,
    /// First UDP port: the nodes' worker threads use nodes x threads consecutive ports
    /// from here.
    #[arg(long, default_value_t = 7000)]
    port_base: u16,
    /// First Redis port: node i serves Redis clients on 127.0.0.1, port P + i.
    #[arg(long, value_name = "P", default_value_t = 7379)]
    resp_port_base: u16,
    /// Most data commands a Redis client pipelines that run as one transaction (the
    /// configuration's `[resp] pipeline_commands_max`); 1: each its own transaction.
    #[arg(long, value_name = "N", default_value_t = ferrotx_cluster::RESP_PIPELINE_COMMANDS_MAX_DEFAULT)]
    resp_pipeline_max: usize,
    /// Length of the nodes' leases, in milliseconds (see `ferrotx node --lease-ms`).
    #[arg(long, default_value_t = processes::DEFAULT_LEASE_MS)]
    lease_ms: u64,
    /// How long the nodes' idle workers poll (see `ferrotx node --spin-us`).
    #[arg(long, value_name = "US")]
    spin_us: Option<u64>,
    /// Write the generated configuration here (default: a temporary file, or
    /// DIR/cluster.toml with --data-dir).
    #[arg(long)]
    config_out: Option<PathBuf>,
    /// What reaches the disk before a commit is acknowledged: `memory` (nothing),
    /// `flush` (logged, synced every 100 ms), `sync` (a backup acknowledges once its log
    /// is synced). `flush` and `sync` need --data-dir. See docs/durability.md.
    #[arg(long, value_name = "MODE", default_value = "memory", value_parser = ["memory", "flush", "sync"])]
    durability: String,
    /// The cluster's directory: its configuration and key, and each node's data
    /// directory (DIR/node-N).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// How each node process locks its memory for its lease thread, where it may lock all it maps
    /// (CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK): `fault` (every page from its first
    /// touch, the code at once), `all` (every mapping faulted in when made: the
    /// allocator's reserved arenas become resident), `off` [default: FERROTX_MLOCK, or
    /// fault].
    #[arg(long, value_enum, value_name = "MODE")]
    mlock: Option<MlockArg>,
    /// The nodes run their lease threads at normal priority (by default it asks for SCHED_FIFO where
    /// the process may have it). Also FERROTX_REALTIME=0.
    #[arg(long)]
    no_realtime: bool,
}

#[derive(Subcommand)]
enum Bench {
    /// Transactions over a cluster of node processes (YCSB-like): throughput, latency,
    /// RPCs per commit; the data is checked at the end.
    Kv(KvArgs),
    /// Bank transfers over a cluster of node processes; money must be conserved and
    /// replicas equal at the end.
    Bank(BankArgs),
    /// TATP (FaSST's mix of seven transaction types over five tables of subscribers)
    /// over a cluster of node processes.
    Tatp(TatpArgs),
    /// SmallBank (FaSST's mix of six transaction types over savings and checking, with a
    /// hot set of accounts) over a cluster of node processes; the money is checked.
    Smallbank(SmallBankArgs),
    /// False positives of short leases under load: TATP over a cluster of node processes
    /// whose leases are --lease-ms long; reports lease expirations (nothing fails, so
    /// every one is a false positive; the target is 0), renewals and renewal round trips.
    Leases(LeasesArgs),
    /// Read and write (every replica) latency of 100 B to 1 MB objects, beside RAMCloud's
    /// figures and the RPC round trip of the same run.
    Latency(LatencyArgs),
    /// Failover under Redis load: one cluster of node processes, Redis clients (INCR and
    /// SET) on every node, and kills in a row, each of one node with SIGKILL, which is then
    /// restarted with --join; reports the time to a view without it (detect), until every
    /// partition is read and written through every survivor (recovery), and from the
    /// restart until the cluster is back at full strength (rereplicated), client errors by
    /// kind, and acknowledged writes lost.
    Failover(FailoverArgs),
    /// RPC throughput and latency between a server and a client process on loopback.
    Rpc(RpcArgs),
    /// CPU used by an idle node (RPC server threads with no traffic).
    Idle(IdleArgs),
    /// What the disk under a data directory gives the write-ahead log: synced 4 KiB
    /// writes, group commit at several batch sizes, and reading a log back out of the
    /// page cache (durability, issue 32).
    Disk(DiskArgs),
    /// How fast a node loads its copies from its data directory at a restart: a node's
    /// TATP checkpoint written through its logs, the page cache dropped (root), the load
    /// timed against the disk's read bandwidth (durability, issue 32).
    Restore(RestoreArgs),
    /// The server side of `bench rpc` (started by it; not for direct use).
    #[command(hide = true)]
    RpcServer {
        /// The client's options, as JSON.
        #[arg(long)]
        options: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum TransportArg {
    /// Kernel UDP on loopback, server in a second process.
    Udp,
    /// In-process queues, server in threads of this process.
    Mem,
}

#[derive(Args)]
struct RpcArgs {
    /// Transport between client and server.
    #[arg(long, value_enum, default_value = "udp")]
    transport: TransportArg,
    /// Worker threads on each side.
    #[arg(long, default_value_t = 1)]
    threads: u16,
    /// Coroutines per client thread.
    #[arg(long, default_value_t = 20)]
    coroutines: usize,
    /// Requests per coroutine batch.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Request payload bytes.
    #[arg(long, default_value_t = 32)]
    req_bytes: usize,
    /// Response payload bytes.
    #[arg(long, default_value_t = 32)]
    resp_bytes: usize,
    /// Send one message per datagram.
    #[arg(long)]
    no_coalesce: bool,
    /// Send datagrams without MACs (to measure what authentication costs).
    #[arg(long)]
    no_auth: bool,
    /// Share of datagrams dropped on purpose on both sides, in [0, 1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Measured seconds (after a warm-up of a tenth of it, at most 1 s).
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Socket send and receive buffers to ask the kernel for, in KiB.
    #[arg(long, default_value_t = 8192)]
    socket_buffer_kib: usize,
    /// First UDP port; 2 x threads consecutive ports are used. Default: chosen from the
    /// process id.
    #[arg(long)]
    port_base: Option<u16>,
}

/// The cluster and run settings shared by `bench kv` and `bench bank`.
#[derive(Args)]
struct ClusterRunArgs {
    /// Send datagrams without MACs (for measuring what authentication costs; never for a
    /// cluster that serves anyone).
    #[arg(long)]
    no_auth: bool,
    /// The cluster's durability mode: `memory`, `flush` (logged, synced every 100 ms)
    /// or `sync` (a backup acknowledges once its log is synced); see docs/durability.md.
    /// The logs go under the run's temporary directory.
    #[arg(long, value_name = "MODE", default_value = "memory", value_parser = ["memory", "flush", "sync"])]
    durability: String,
    /// `flush` and `sync` modes: a node checkpoints once its logs grew by this many MiB
    /// (the configuration's `[durability] checkpoint_log_mb`; default 256).
    #[arg(long, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    checkpoint_log_mb: Option<u64>,
    /// Node processes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Copies of each partition (f + 1; at most --nodes).
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Worker threads per node.
    #[arg(long, default_value_t = 1)]
    threads: u16,
    /// Workload coroutines per worker thread.
    #[arg(long, default_value_t = 20)]
    coroutines: usize,
    /// Nodes that run workload coroutines (the first ones; default all); the others
    /// only serve.
    #[arg(long)]
    client_nodes: Option<u16>,
    /// Partitions per node.
    #[arg(long, default_value_t = 4)]
    partitions_per_node: u32,
    /// Measured seconds (after a warm-up of a tenth of it, at most 1 s).
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seed of the workload's random numbers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Share of datagrams every node drops on purpose before sending, in [0, 1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Microseconds an idle worker polls before sleeping in the kernel.
    #[arg(long, default_value_t = 200)]
    spin_us: u64,
    /// While polling, spin instead of yielding the core to other runnable threads
    /// (yielding is much faster when node processes outnumber cores).
    #[arg(long)]
    spin_poll: bool,
    /// First UDP port. Default: chosen from the process id.
    #[arg(long)]
    port_base: Option<u16>,
    /// Length of the nodes' leases in milliseconds: the nodes run as members of the
    /// cluster (lease thread, coordination file, admission), as `ferrotx node` does, and
    /// the report has a `leases` object. 0: static nodes without membership, for
    /// comparison.
    #[arg(long, value_name = "N", default_value_t = processes::DEFAULT_LEASE_MS)]
    lease_ms: u64,
    /// How each node process locks its memory for its lease thread, where it may lock all it maps
    /// (CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK): `fault` (every page from its first
    /// touch, the code at once), `all` (every mapping faulted in when made: the
    /// allocator's reserved arenas become resident), `off` [default: FERROTX_MLOCK, or
    /// fault].
    #[arg(long, value_enum, value_name = "MODE")]
    mlock: Option<MlockArg>,
    /// The nodes run their lease threads at normal priority (by default it asks for SCHED_FIFO where
    /// the process may have it). Also FERROTX_REALTIME=0.
    #[arg(long)]
    no_realtime: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Vary the offered load instead (coroutines per thread: 1, 2, 4, 8, 16, 32, or
    /// --sweep-coroutines) and write PREFIX.json, PREFIX.svg and PREFIX.png (the data and
    /// a throughput-latency plot).
    #[arg(long, value_name = "PREFIX")]
    sweep: Option<PathBuf>,
    /// Coroutines per thread of each point of --sweep.
    #[arg(long, value_delimiter = ',')]
    sweep_coroutines: Option<Vec<usize>>,
    /// Failure domains: node N in domain dK with K = N modulo this, the partition map
    /// placed for them. 0: every node its own domain (node-N).
    #[arg(long, value_name = "N", default_value_t = 0)]
    domains: u16,
    /// Send SIGKILL to node NODE SECS into the measured window, and record the failure
    /// timeline: commits per ms, suspicion, the new view's commit, transactions
    /// recovered, data re-replicated; `time_to_80pct_ms` and `rereplicated_s` in the
    /// JSON's `timeline`. Needs leases (--lease-ms; FaRM's are 10).
    #[arg(long, value_name = "NODE@SECS", conflicts_with_all = ["kill_domain", "kill_cm", "sweep"])]
    kill: Option<String>,
    /// The same, killing every node of failure domain DOMAIN at once (see --domains).
    #[arg(long, value_name = "DOMAIN@SECS", conflicts_with_all = ["kill_cm", "sweep"])]
    kill_domain: Option<String>,
    /// The same, killing the configuration manager of the moment.
    #[arg(long, value_name = "SECS", conflicts_with = "sweep")]
    kill_cm: Option<f64>,
    /// With a kill: the timeline's plot goes to STEM.svg and STEM.png.
    #[arg(long, value_name = "STEM", default_value = "timeline")]
    timeline: PathBuf,
    /// With a kill: how long the workload may run on after the window for the cluster to
    /// get back to full strength, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    rereplication_deadline: f64,
    /// Stop node NODE (SIGSTOP) SECS into the measured window for --pause-ms, then resume
    /// it: a false positive made on purpose. The cluster removes the node, which rejoins
    /// as a new life and is refilled; the report's `leases` says what that cost, and the
    /// checks still hold. Needs leases (--lease-ms).
    #[arg(long, value_name = "NODE@SECS", conflicts_with_all = ["kill", "kill_domain", "kill_cm", "sweep"])]
    pause: Option<String>,
    /// How long --pause stops the node, in milliseconds [default: 5 leases, at least 500].
    #[arg(long, value_name = "MS", requires = "pause")]
    pause_ms: Option<u64>,
}

#[derive(Args)]
struct KvArgs {
    /// Keys per transaction.
    #[arg(long, default_value_t = 1)]
    keys_per_txn: usize,
    /// Share of a transaction's keys that are read-modify-written, 0..1 (0 with one key:
    /// single-key lock-free reads).
    #[arg(long, default_value_t = 1.0)]
    write_share: f64,
    /// Keys in the table.
    #[arg(long, default_value_t = 1_000_000)]
    key_count: u64,
    /// Bytes of every value (at least 8).
    #[arg(long, default_value_t = 32)]
    value_bytes: usize,
    /// Zipf exponent of key popularity (0 = uniform; YCSB uses 0.99).
    #[arg(long, default_value_t = 0.0)]
    zipf: f64,
    /// Hot keys: the table holds only these N keys and every transaction of every
    /// client draws its keys from them, uniformly (the same as --key-count N; excludes
    /// --key-count and --zipf). The report says which node is the primary of how many.
    #[arg(long, value_name = "N", conflicts_with_all = ["key_count", "zipf"])]
    hot_keys: Option<u64>,
    /// Run one-key read-modify-writes as optimistic transactions of their caller, as
    /// before shipping, instead of shipping each to its key's primary (for comparison).
    #[arg(long)]
    no_ship: bool,
    #[command(flatten)]
    run: ClusterRunArgs,
}

#[derive(Args)]
struct BankArgs {
    /// Accounts.
    #[arg(long, default_value_t = 1000)]
    accounts: u64,
    /// Balance of every account at the start.
    #[arg(long, default_value_t = 1000)]
    initial_balance: u64,
    #[command(flatten)]
    run: ClusterRunArgs,
}

#[derive(Args)]
struct FailoverArgs {
    /// Kills, in a row on one cluster.
    #[arg(long, default_value_t = 1)]
    kills: u32,
    /// Node processes per cluster (3 replicas per partition, fewer with fewer nodes).
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Length of the nodes' leases, in milliseconds.
    #[arg(long, default_value_t = 100)]
    lease_ms: u64,
    /// Seed of the nodes killed and of the clients' commands.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Redis client threads of the load.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Longest wait from a kill to the first successful probe of every partition through
    /// every survivor, in milliseconds (past it, the kill counts as not recovered).
    #[arg(long, default_value_t = 20_000)]
    recovery_deadline_ms: u64,
    /// A client's timeout for one request, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    request_timeout_ms: u64,
    /// Longest wait from the restart of a killed node until the cluster is back at full
    /// strength (every node a member, every partition with its copies, no backup being
    /// filled), in milliseconds; past it, the kill counts as not back to full strength.
    #[arg(long, default_value_t = 60_000)]
    full_strength_deadline_ms: u64,
    /// Run each kill on a fresh cluster of its own (started for it, stopped after it)
    /// rather than all on one.
    #[arg(long)]
    fresh_cluster_per_kill: bool,
    /// First port: the cluster uses nodes x 3 consecutive ports from here. Default:
    /// chosen from the process id, below the kernel's ephemeral ports.
    #[arg(long)]
    port_base: Option<u16>,
    /// Keep the run's directory (configuration, coordination file, node logs); it is kept
    /// anyway when a kill was not recovered, did not get back to full strength or lost a
    /// write.
    #[arg(long)]
    keep_logs: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct LatencyArgs {
    /// Node processes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Copies of each object (f + 1; at most --nodes).
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Objects of each size.
    #[arg(long, default_value_t = 16)]
    objects_per_size: u64,
    /// First UDP port. Default: chosen from the process id.
    #[arg(long)]
    port_base: Option<u16>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct TatpArgs {
    /// Subscribers per node. The default, 200,000, fits a 16 GB laptop (about 4 GB in
    /// all with 3 nodes and 3 replicas, where every node holds a copy of every
    /// subscriber); FaSST's scale, 1,000,000, takes about 19 GB.
    #[arg(long, default_value_t = 200_000)]
    subscribers_per_node: u64,
    #[command(flatten)]
    run: ClusterRunArgs,
}

#[derive(Args)]
struct LeasesArgs {
    /// Measured seconds of TATP (after a warm-up of a tenth of it, at most 1 s).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    duration: f64,
    /// Length of a lease, in milliseconds (FaRM's is 10).
    #[arg(long, value_name = "N", default_value_t = 10)]
    lease_ms: u64,
    /// How each node process locks its memory for its lease thread, where it may lock all it maps
    /// (CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK): `fault` (every page from its first
    /// touch, the code at once), `all` (every mapping faulted in when made: the
    /// allocator's reserved arenas become resident), `off` [default: FERROTX_MLOCK, or
    /// fault].
    #[arg(long, value_enum, value_name = "MODE")]
    mlock: Option<MlockArg>,
    /// The nodes run their lease threads at normal priority (by default it asks for SCHED_FIFO where
    /// the process may have it). Also FERROTX_REALTIME=0.
    #[arg(long)]
    no_realtime: bool,

    /// Node processes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Copies of each partition (f + 1; at most --nodes).
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Worker threads per node.
    #[arg(long, default_value_t = 1)]
    threads: u16,
    /// Workload coroutines per worker thread.
    #[arg(long, default_value_t = 20)]
    coroutines: usize,
    /// TATP subscribers per node (as `bench tatp`).
    #[arg(long, default_value_t = 200_000)]
    subscribers_per_node: u64,
    /// Stop node NODE (SIGSTOP) SECS into the measured window for --pause-ms, then resume
    /// it: a false positive made on purpose, to see what one costs (see `bench tatp
    /// --pause`).
    #[arg(long, value_name = "NODE@SECS")]
    pause: Option<String>,
    /// How long --pause stops the node, in milliseconds [default: 5 leases, at least 500].
    #[arg(long, value_name = "MS", requires = "pause")]
    pause_ms: Option<u64>,
    /// First UDP port. Default: chosen from the process id.
    #[arg(long)]
    port_base: Option<u16>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What `bench leases` writes to `--json`: the leases, and the TATP run they served.
#[derive(serde::Serialize)]
struct LeasesBenchReport {
    /// The leases (lease_ms, expirations, renewals, renewal_rtt_*_us, realtime, nodes).
    #[serde(flatten)]
    leases: ferrotx_bench::kv::LeasesReport,
    /// TATP transactions per second over the window.
    throughput_per_s: f64,
    /// The TATP run, as `bench tatp --json` writes it.
    tatp: ferrotx_bench::kv::ClusterBenchReport,
}

#[derive(Args)]
struct SmallBankArgs {
    /// Accounts per node.
    #[arg(long, default_value_t = 100_000)]
    accounts_per_node: u64,
    /// Accounts in the hot set, per node.
    #[arg(long, default_value_t = 4_000)]
    hot_accounts_per_node: u64,
    /// Percentage of transactions on hot accounts.
    #[arg(long, default_value_t = 90)]
    hot_percent: u32,
    /// Savings and checking balance of every account at the start.
    #[arg(long, default_value_t = 10_000)]
    initial_balance: i64,
    #[command(flatten)]
    run: ClusterRunArgs,
}

impl ClusterRunArgs {
    fn options(&self, workload: Workload) -> anyhow::Result<ClusterBenchOptions> {
        use ferrotx_bench::timeline::Kill;
        let kill = match (&self.kill, &self.kill_domain, self.kill_cm) {
            (Some(spec), _, _) => Some(Kill::node(spec)?),
            (_, Some(spec), _) => Some(Kill::domain(spec)?),
            (_, _, Some(at)) => Some(Kill::cm(at)?),
            _ => None,
        };
        Ok(ClusterBenchOptions {
            workload,
            nodes: self.nodes,
            replicas: self.replicas,
            threads: self.threads,
            coroutines: self.coroutines,
            partitions_per_node: self.partitions_per_node,
            duration_s: self.duration,
            warmup_s: (self.duration / 10.0).min(1.0),
            port_base: self.port_base.unwrap_or_else(default_port_base),
            seed: self.seed,
            spin_us: self.spin_us,
            yield_while_polling: !self.spin_poll,
            client_nodes: self.client_nodes.unwrap_or(self.nodes),
            loss: self.loss,
            lease_ms: self.lease_ms,
            tuning: tuning(self.mlock, self.no_realtime),
            no_auth: self.no_auth,
            domains: self.domains,
            kill,
            rereplication_deadline_s: self.rereplication_deadline,
            pause: self
                .pause
                .as_deref()
                .map(|spec| {
                    ferrotx_bench::kv::Pause::parse(
                        spec,
                        self.pause_ms
                            .unwrap_or_else(|| ferrotx_bench::kv::Pause::default_ms(self.lease_ms)),
                    )
                })
                .transpose()?,
            durability: ferrotx_cluster::DurabilityMode::parse(&self.durability)
                .expect("clap checked it"),
            checkpoint_log_mb: self.checkpoint_log_mb,
        })
    }
}

fn run_cluster_bench(options: &ClusterBenchOptions, run: &ClusterRunArgs) -> anyhow::Result<()> {
    let json = &run.json;
    if let Some(prefix) = &run.sweep {
        let loads = run
            .sweep_coroutines
            .clone()
            .unwrap_or_else(|| ferrotx_bench::sweep::DEFAULT_COROUTINES.to_vec());
        let title = format!(
            "{}: {} node processes, {} replicas, UDP",
            options.workload.name(),
            options.nodes,
            options.replicas
        );
        let report = ferrotx_bench::sweep::run(options, &loads, &title)?;
        ferrotx_bench::sweep::write(&report, prefix)?;
        return Ok(());
    }
    let report = ferrotx_bench::kv::run(options)?;
    ferrotx_bench::kv::print_table(&report);
    write_json(json, &report)?;
    if let Some(timeline) = &report.timeline {
        println!();
        ferrotx_bench::timeline::print(timeline);
        let title = format!(
            "{}: {} killed at {:.1} s ({} nodes, {} replicas, {} ms leases)",
            options.workload.name(),
            timeline
                .kill
                .as_ref()
                .map_or_else(String::new, |k| k.describe()),
            timeline.kill_ms / 1e3,
            options.nodes,
            options.replicas,
            options.lease_ms
        );
        ferrotx_bench::timeline::plot(timeline, &title, &run.timeline)?;
        println!(
            "  timeline plots: {0}.svg and .png, {0}-zoom.svg and .png",
            run.timeline.display()
        );
    }
    anyhow::ensure!(
        report.checks.ok,
        "the data is wrong at the end: {:?}",
        report.checks
    );
    Ok(())
}

#[derive(Args)]
struct RestoreArgs {
    /// Where to write (a directory of its own is made there and removed at the end); on
    /// the disk the data directories will use.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// TATP subscribers on the node (FaSST's scale: 1 M per node).
    #[arg(long, default_value_t = 1_000_000)]
    subscribers: u64,
    /// Worker threads, one log each.
    #[arg(long, default_value_t = 2)]
    threads: u16,
    /// Partitions of the node.
    #[arg(long, default_value_t = 8)]
    partitions: u32,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct DiskArgs {
    /// Where to write (a directory of its own is made there and removed at the end); on
    /// the disk the data directories will use.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Bytes of each log record's payload.
    #[arg(long, default_value_t = 128)]
    record_bytes: usize,
    /// Records per sync, one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256")]
    batches: Vec<usize>,
    /// Megabytes of log written and read back.
    #[arg(long, default_value_t = 256)]
    read_mb: u64,
    /// Writer threads for the sync-thread measurement, each with its own log.
    #[arg(long, default_value_t = 2)]
    writers: usize,
    /// Commits each writer keeps outstanding.
    #[arg(long, default_value_t = 16)]
    outstanding: usize,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct IdleArgs {
    /// Seconds to measure.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Worker threads of the idle node.
    #[arg(long, default_value_t = 2)]
    threads: u16,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `--mlock`: how a node process locks its memory (`ferrotx_node::MemoryLock`).
#[derive(Clone, Copy, ValueEnum)]
enum MlockArg {
    /// Nothing locked.
    Off,
    /// Every page locked from its first touch, the code paged in at once.
    Fault,
    /// Every mapping faulted in and locked when it is made.
    All,
}

/// The lease threads' steps (memory locked, real-time priority): the environment's
/// (`FERROTX_MLOCK`, `FERROTX_REALTIME=0`) or the default, with `--mlock` and
/// `--no-realtime` over them.
fn tuning(mlock: Option<MlockArg>, no_realtime: bool) -> ferrotx_node::LeaseTuning {
    use ferrotx_node::MemoryLock;
    let env = ferrotx_node::LeaseTuning::from_env();
    ferrotx_node::LeaseTuning {
        lock_memory: match mlock {
            None => env.lock_memory,
            Some(MlockArg::Off) => MemoryLock::Off,
            Some(MlockArg::Fault) => MemoryLock::Fault,
            Some(MlockArg::All) => MemoryLock::All,
        },
        realtime: env.realtime && !no_realtime,
    }
}

fn default_port_base() -> u16 {
    // Spread concurrent runs over ports 20000-59999 so they rarely collide.
    20_000 + (std::process::id() % 10_000) as u16 * 4
}

fn write_json(path: &Option<PathBuf>, value: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(path) = path {
        let text = serde_json::to_string_pretty(value)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("  report written to {}", path.display());
    }
    Ok(())
}

/// With `FERROTX_THP=0`, turns transparent huge pages off for this process and the node
/// processes it starts (`prctl` is inherited across `fork` and `exec`); returns whether
/// they stay on.
///
/// mimalloc asks for huge pages, and they pay: TATP ran 18% slower without them (median
/// of 7 runs each; docs/operations.md, "Tuning"). But a huge page is zeroed whole at its
/// first touch, and on the VMs measured that took about 5 ms per 2 MiB page: a node
/// filling a backup touches dozens in a row, and its one worker (with every transaction
/// on the node) stops for 30 to 80 ms at a time. Without them the copy ran smoothly (the
/// lowest 100 ms while re-replicating at 57-68% of the rate before the kill, against
/// 12-18%). Redis and MongoDB advise turning them off for the same latency reason.
fn transparent_huge_pages() -> bool {
    if std::env::var_os("FERROTX_THP").is_none_or(|v| v != "0") {
        return true;
    }
    // SAFETY: PR_SET_THP_DISABLE takes an integer argument and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    false
}

fn main() -> anyhow::Result<()> {
    let thp = transparent_huge_pages();
    let cli = Cli::parse();
    // Membership events (suspicion, probes, configuration changes) at info for a node and
    // a local cluster, warnings only elsewhere (benchmark nodes), none in the simulator
    // (thousands of simulated clusters); RUST_LOG overrides. Nothing is logged per message.
    let default_filter = match &cli.command {
        Command::Node(args) if args.drive.is_none() => "info",
        Command::Cluster(_) | Command::Status(_) => "info",
        Command::Sim(_) => "off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if !thp {
        tracing::debug!("transparent huge pages off for this process (FERROTX_THP=0)");
    }
    match cli.command {
        Command::Node(args) => processes::node(&processes::NodeSpec {
            config: &args.config,
            id: args.id,
            drive: args.drive.as_deref(),
            lease_ms: args.lease_ms,
            coordination: args.coordination.as_deref(),
            spin_us: args.spin_us,
            join: args.join,
            data_dir: args.data_dir.as_deref(),
            rejoin: !args.no_rejoin,
            tuning: tuning(args.mlock, args.no_realtime),
        })?,
        Command::Status(args) => {
            processes::status(&args.config, args.coordination.as_deref(), args.json)?
        }
        Command::Sim(args) => sim::main(&args)?,
        Command::Check(CheckCommand::ListAppend(args)) => {
            let status = check::list_append(
                &args.history,
                args.json,
                std::time::Duration::from_secs(args.timeout_s),
            )
            .unwrap_or_else(|e| {
                eprintln!("ferrotx check: {e:#}");
                check::EXIT_ERROR
            });
            std::process::exit(status);
        }
        Command::Keygen(args) => match args.path {
            Some(path) => {
                ferrotx_node::write_new_key_file(&path)?;
                println!("wrote a new cluster key to {}", path.display());
            }
            None => println!("{}", ferrotx_node::new_key_line()?),
        },
        Command::Cluster(ClusterCommand::Forget(args)) => processes::forget(
            &args.config,
            args.coordination.as_deref(),
            args.node,
            args.accept_data_loss,
        )?,
        Command::Cluster(ClusterCommand::Local(args)) => processes::cluster_local(
            &processes::LocalCluster {
                nodes: args.nodes,
                replicas: args.replicas,
                threads: args.threads,
                partitions_per_node: args.partitions_per_node,
                port_base: args.port_base,
                resp_port_base: args.resp_port_base,
                resp_pipeline_max: args.resp_pipeline_max,
                lease_ms: args.lease_ms,
                spin_us: args.spin_us,
                tuning: tuning(args.mlock, args.no_realtime),
                durability: ferrotx_cluster::DurabilityMode::parse(&args.durability)
                    .expect("clap checked it"),
                data_dir: args.data_dir.clone(),
            },
            args.config_out.as_deref(),
        )?,
        Command::Bench(Bench::Kv(args)) => {
            if let Some(hot) = args.hot_keys {
                anyhow::ensure!(
                    hot >= 1 && args.keys_per_txn as u64 <= hot,
                    "--hot-keys must be at least 1 and at least --keys-per-txn"
                );
            }
            let workload = Workload::Kv(KvWorkload {
                keys_per_txn: args.keys_per_txn,
                write_share: args.write_share,
                key_count: args.hot_keys.unwrap_or(args.key_count),
                value_bytes: args.value_bytes,
                zipf: args.zipf,
                ship: !args.no_ship,
                delete_share: 0.0,
            });
            run_cluster_bench(&args.run.options(workload)?, &args.run)?;
        }
        Command::Bench(Bench::Latency(args)) => {
            let report =
                ferrotx_bench::latency::run(&ferrotx_bench::latency::LatencyBenchOptions {
                    nodes: args.nodes,
                    replicas: args.replicas,
                    duration_s: args.duration,
                    objects_per_size: args.objects_per_size,
                    port_base: args.port_base.unwrap_or_else(default_port_base),
                })?;
            ferrotx_bench::latency::print_table(&report);
            write_json(&args.json, &report)?;
        }
        Command::Bench(Bench::Failover(args)) => {
            // Below Linux's ephemeral ports (32768 and up), where the clients' own sockets
            // could take a node's Redis port between a kill and the restart.
            let port_base = args
                .port_base
                .unwrap_or(12_000 + (std::process::id() % 1_000) as u16 * 20);
            let options = ferrotx_bench::failover::FailoverOptions {
                nodes: args.nodes,
                lease_ms: args.lease_ms,
                seed: args.seed,
                clients: args.clients,
                recovery_deadline_ms: args.recovery_deadline_ms,
                request_timeout_ms: args.request_timeout_ms,
                full_strength_deadline_ms: args.full_strength_deadline_ms,
                fresh_cluster_per_kill: args.fresh_cluster_per_kill,
                keep_logs: args.keep_logs,
                ..ferrotx_bench::failover::FailoverOptions::new(args.kills, port_base)
            };
            let report = ferrotx_bench::failover::run(&options)?;
            ferrotx_bench::failover::print_table(&report);
            write_json(&args.json, &report)?;
        }
        Command::Bench(Bench::Tatp(args)) => {
            let workload = Workload::Tatp(TatpWorkload {
                subscribers: args
                    .subscribers_per_node
                    .saturating_mul(u64::from(args.run.nodes)),
            });
            run_cluster_bench(&args.run.options(workload)?, &args.run)?;
        }
        Command::Bench(Bench::Leases(args)) => {
            anyhow::ensure!(args.lease_ms >= 1, "--lease-ms must be at least 1");
            let options = ClusterBenchOptions {
                workload: Workload::Tatp(TatpWorkload {
                    subscribers: args
                        .subscribers_per_node
                        .saturating_mul(u64::from(args.nodes)),
                }),
                nodes: args.nodes,
                replicas: args.replicas,
                threads: args.threads,
                coroutines: args.coroutines,
                partitions_per_node: 4,
                duration_s: args.duration,
                warmup_s: (args.duration / 10.0).min(1.0),
                port_base: args.port_base.unwrap_or_else(default_port_base),
                seed: 1,
                spin_us: 200,
                yield_while_polling: true,
                client_nodes: args.nodes,
                loss: 0.0,
                lease_ms: args.lease_ms,
                tuning: tuning(args.mlock, args.no_realtime),
                no_auth: false,
                domains: 0,
                kill: None,
                rereplication_deadline_s: 0.0,
                pause: args
                    .pause
                    .as_deref()
                    .map(|spec| {
                        ferrotx_bench::kv::Pause::parse(
                            spec,
                            args.pause_ms.unwrap_or_else(|| {
                                ferrotx_bench::kv::Pause::default_ms(args.lease_ms)
                            }),
                        )
                    })
                    .transpose()?,
                durability: ferrotx_cluster::DurabilityMode::Memory,
                checkpoint_log_mb: None,
            };
            let tatp = ferrotx_bench::kv::run(&options)?;
            ferrotx_bench::kv::print_table(&tatp);
            // `print_table` printed them with the run.
            let leases = tatp
                .leases
                .clone()
                .context("the nodes reported no leases")?;
            if !leases.formed {
                println!(
                    "  leases of {} ms are too short for this machine: the cluster never \
                     formed (no view committed at every node), so nothing was renewed",
                    leases.lease_ms
                );
            } else if leases.expirations > 0 || leases.reconfigured {
                println!(
                    "  {} false positives with leases of {} ms on this machine{}",
                    leases.expirations,
                    leases.lease_ms,
                    if leases.removals > 0 {
                        format!(
                            "; {} removed a node, which rejoined as a new life and was refilled \
                             ({} of {} back at full strength by the end); checks {}",
                            leases.removals,
                            leases
                                .rejoins
                                .iter()
                                .filter(|r| r.rejoin.refill_ms.is_some())
                                .count(),
                            leases.rejoins.len(),
                            if tatp.checks.ok { "passed" } else { "FAILED" }
                        )
                    } else if leases.reconfigured {
                        "; the cluster reconfigured without a failed node".to_string()
                    } else {
                        String::new()
                    }
                );
            }
            write_json(
                &args.json,
                &LeasesBenchReport {
                    throughput_per_s: tatp.throughput_per_s,
                    leases,
                    tatp: tatp.clone(),
                },
            )?;
            anyhow::ensure!(
                tatp.checks.ok,
                "the data is wrong at the end: {:?}",
                tatp.checks
            );
        }
        Command::Bench(Bench::Smallbank(args)) => {
            let nodes = u64::from(args.run.nodes);
            let workload = Workload::SmallBank(SmallBankWorkload {
                accounts: args.accounts_per_node.saturating_mul(nodes),
                hot_accounts: args.hot_accounts_per_node.saturating_mul(nodes),
                hot_percent: args.hot_percent,
                initial_balance: args.initial_balance,
            });
            run_cluster_bench(&args.run.options(workload)?, &args.run)?;
        }
        Command::Bench(Bench::Bank(args)) => {
            let workload =
                Workload::Bank(BankWorkload::transfers(args.accounts, args.initial_balance));
            run_cluster_bench(&args.run.options(workload)?, &args.run)?;
        }
        Command::Bench(Bench::Rpc(args)) => {
            let options = RpcBenchOptions {
                transport: match args.transport {
                    TransportArg::Udp => TransportKind::Udp,
                    TransportArg::Mem => TransportKind::Mem,
                },
                threads: args.threads,
                coroutines: args.coroutines,
                batch: args.batch,
                req_bytes: args.req_bytes,
                resp_bytes: args.resp_bytes,
                coalesce: !args.no_coalesce,
                loss: args.loss,
                duration_s: args.duration,
                warmup_s: (args.duration / 10.0).min(1.0),
                port_base: args.port_base.unwrap_or_else(default_port_base),
                socket_buffer_bytes: args.socket_buffer_kib.saturating_mul(1024),
                auth: !args.no_auth,
            };
            let report = ferrotx_bench::rpc::run(&options)?;
            ferrotx_bench::rpc::print_table(&report);
            write_json(&args.json, &report)?;
            anyhow::ensure!(
                report.rpcs_issued == report.rpcs_executed,
                "{} RPCs issued but {} executed: an RPC was lost or ran twice",
                report.rpcs_issued,
                report.rpcs_executed
            );
        }
        Command::Bench(Bench::Disk(args)) => {
            let report = ferrotx_bench::disk::run(&ferrotx_bench::disk::DiskBenchOptions {
                dir: args.dir.clone(),
                duration_s: args.duration,
                record_bytes: args.record_bytes,
                batches: args.batches.clone(),
                read_mb: args.read_mb,
                writers: args.writers,
                outstanding: args.outstanding,
            })?;
            ferrotx_bench::disk::print(&report);
            write_json(&args.json, &report)?;
        }
        Command::Bench(Bench::Restore(args)) => {
            let report =
                ferrotx_bench::restore::run(&ferrotx_bench::restore::RestoreBenchOptions {
                    dir: args.dir.clone(),
                    subscribers: args.subscribers,
                    threads: args.threads,
                    partitions: args.partitions,
                })?;
            ferrotx_bench::restore::print(&report);
            write_json(&args.json, &report)?;
        }
        Command::Bench(Bench::Idle(args)) => {
            let report =
                ferrotx_bench::rpc::idle(args.threads, args.duration, default_port_base())?;
            println!(
                "idle node: {} threads, {:.3} cpu-s over {:.1} s = {:.2}% of one core",
                args.threads, report.cpu_s, report.duration_s, report.core_percent
            );
            write_json(&args.json, &report)?;
        }
        Command::Bench(Bench::RpcServer { options }) => {
            let options: RpcBenchOptions =
                serde_json::from_str(&options).context("parsing --options")?;
            ferrotx_bench::rpc::serve(&options)?;
        }
    }
    Ok(())
}
