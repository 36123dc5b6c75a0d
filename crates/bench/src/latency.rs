//! `ferrotx bench latency`: the latency of reading and writing (with every replica) one
//! object of 100 B to 1 MB at a time, beside RAMCloud's published figures and beside the
//! RPC round trip measured in the same run.

use serde::{Deserialize, Serialize};

use crate::kv::{ClusterBenchOptions, ClusterBenchReport};
use crate::rpc::{RpcBenchOptions, TransportKind};
use crate::workload::{LatencyWorkload, Workload};

/// RAMCloud's mean end-to-end latencies with 3 replicas, in microseconds, in the order of
/// [`LatencyWorkload::TYPES`] (../shared/seeds/001_*: read 100 B to 1 MB, write 100 B to
/// 1 MB).
pub const RAMCLOUD_US: [f64; 10] = [5.5, 14.9, 7.1, 18.9, 10.4, 37.4, 46.7, 244.2, 429.8, 2400.0];

/// Settings of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyBenchOptions {
    /// Node processes.
    pub nodes: u16,
    /// Copies of each object (f + 1).
    pub replicas: u8,
    /// Measured seconds of the cluster run.
    pub duration_s: f64,
    /// Objects of each size.
    pub objects_per_size: u64,
    /// First UDP port; `bench rpc` uses ports from 1,000 above it.
    pub port_base: u16,
}

/// One line of the table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyRow {
    /// `read` or `write`.
    pub op: String,
    /// Object size.
    pub size_bytes: usize,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Operations measured.
    pub count: u64,
    /// RAMCloud's figure for the same operation and size.
    pub ramcloud_us: f64,
}

/// The result, as written to `--json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyReport {
    /// One row per operation and size.
    pub rows: Vec<LatencyRow>,
    /// Median round trip of `bench rpc` (one coroutine, batch 1) in the same run.
    pub rpc_rtt_p50_us: f64,
    /// The cluster run behind the rows.
    pub cluster: ClusterBenchReport,
}

/// Runs `bench rpc` at one coroutine, then the cluster with one client coroutine taking
/// reads and writes of each size in turn. Only operations at another node's primary are
/// counted (as RAMCloud's client talks to a remote master).
pub fn run(options: &LatencyBenchOptions) -> anyhow::Result<LatencyReport> {
    anyhow::ensure!(options.duration_s > 0.0, "--duration must be positive");
    anyhow::ensure!(
        u32::from(options.port_base) + 1_010 <= 65_535,
        "--port-base too high"
    );
    let rpc = crate::rpc::run(&RpcBenchOptions {
        transport: TransportKind::Udp,
        threads: 1,
        coroutines: 1,
        batch: 1,
        req_bytes: 32,
        resp_bytes: 32,
        coalesce: true,
        loss: 0.0,
        duration_s: 2.0,
        warmup_s: 0.2,
        port_base: options.port_base + 1_000,
        socket_buffer_bytes: 8 << 20,
        auth: true,
    })?;
    let cluster = crate::kv::run(&ClusterBenchOptions {
        workload: Workload::Latency(LatencyWorkload {
            objects_per_size: options.objects_per_size,
        }),
        nodes: options.nodes,
        replicas: options.replicas,
        threads: 1,
        coroutines: 1,
        partitions_per_node: 4,
        duration_s: options.duration_s,
        warmup_s: (options.duration_s / 10.0).min(1.0),
        port_base: options.port_base,
        seed: 1,
        spin_us: 200,
        yield_while_polling: true,
        client_nodes: 1,
        loss: 0.0,
        // Static nodes, as before leases: this benchmark compares with RAMCloud's figures.
        lease_ms: 0,
        tuning: ferrotx_node::LeaseTuning::default(),
        no_auth: false,
        domains: 0,
        kill: None,
        rereplication_deadline_s: 0.0,
        pause: None,
        durability: ferrotx_cluster::DurabilityMode::Memory,
        checkpoint_log_mb: None,
    })?;
    anyhow::ensure!(
        cluster.checks.ok,
        "the data is wrong at the end: {:?}",
        cluster.checks
    );
    let rows = cluster
        .types
        .iter()
        .enumerate()
        .map(|(i, t)| LatencyRow {
            op: if i % 2 == 0 { "read" } else { "write" }.to_owned(),
            size_bytes: LatencyWorkload::SIZES[i / 2],
            p50_us: t.latency_us.p50,
            p99_us: t.latency_us.p99,
            count: t.committed,
            ramcloud_us: RAMCLOUD_US[i],
        })
        .collect();
    Ok(LatencyReport {
        rows,
        rpc_rtt_p50_us: rpc.latency_us.p50,
        cluster,
    })
}

/// Prints the table.
pub fn print_table(report: &LatencyReport) {
    let rtt = report.rpc_rtt_p50_us;
    println!(
        "one object at a time, {} node processes, {} replicas, UDP loopback; \
         bench rpc round trip p50 {rtt:.1} us",
        report.cluster.options.nodes, report.cluster.options.replicas
    );
    println!(
        "  {:<6} {:>9} {:>10} {:>10} {:>8} {:>13} {:>10}",
        "op", "size", "p50 us", "p99 us", "/ rtt", "RAMCloud us", "count"
    );
    for row in &report.rows {
        println!(
            "  {:<6} {:>9} {:>10.1} {:>10.1} {:>8.2} {:>13.1} {:>10}",
            row.op,
            row.size_bytes,
            row.p50_us,
            row.p99_us,
            row.p50_us / rtt,
            row.ramcloud_us,
            row.count
        );
    }
    if let (Some(read), Some(write)) = (report.rows.first(), report.rows.get(1)) {
        println!(
            "  100 B write / 100 B read: {:.2} (RAMCloud {:.2})",
            write.p50_us / read.p50_us,
            write.ramcloud_us / read.ramcloud_us
        );
    }
}
