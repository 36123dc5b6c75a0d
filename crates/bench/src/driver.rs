//! The node side of a benchmark: a node process that loads a workload's data, runs its
//! transactions on every worker thread when told, and reports. It is spoken to over stdin
//! and stdout, one line per command and one line per answer:
//!
//! - (on start) `ready` once the node listens and its data is loaded;
//! - `run`: start `coroutines` workload coroutines on every worker thread;
//! - `window-start` / `window-end`: count committed transactions and latencies between
//!   the two, and CPU time;
//! - `stop`: let every coroutine finish its transaction, flush this node's truncation
//!   marks to every node, and answer with a [`RunResult`];
//! - `check` (once every node has stopped): answer with a [`CheckResult`] of the data;
//! - `exit`: stop the workers and answer with [`NodeTotals`].

use std::io::{BufRead, Write};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ferrotx_cluster::Configuration;
use ferrotx_node::{BATCH_DATAGRAMS, Node, NodeOptions};
use ferrotx_store::{PartitionId, ReadOutcome};
use ferrotx_transport::{Transport, UDP_MAX_PAYLOAD_BYTES};
use ferrotx_txn::coordinator::Abort;
use ferrotx_txn::participant::Role;
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::cpu::process_cpu_s;
use crate::lossy::Lossy;
use crate::workload::{Runner, TABLE, Workload};

/// What a driven node runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriveOptions {
    /// The workload.
    pub workload: Workload,
    /// Workload coroutines per worker thread.
    pub coroutines: usize,
    /// Seed of the coroutines' random numbers (each mixes in its node, thread and index).
    pub seed: u64,
    /// How long an idle worker polls before it sleeps in the kernel, in microseconds.
    pub spin_us: u64,
    /// Whether a polling worker yields its core to other runnable threads.
    pub yield_while_polling: bool,
    /// Nodes that run workload coroutines: those with ids below this (the others only
    /// serve).
    pub client_nodes: u16,
    /// Share of datagrams every node drops on purpose before sending, in [0, 1).
    pub loss: f64,
}

/// Latency histogram bounds: 1 ns to 60 s, 3 significant digits.
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// What one node's coroutines did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// Transactions committed inside the window.
    pub window_committed: u64,
    /// Transactions aborted inside the window.
    pub window_aborted: u64,
    /// Over the whole run.
    pub committed: u64,
    /// Over the whole run.
    pub aborted: u64,
    /// Transactions refused as bad input or by a participant (must be 0).
    pub errors: u64,
    /// Latencies of transactions committed in the window: (nanoseconds, count).
    pub latency_ns: Vec<(u64, u64)>,
    /// The same for the transactions among them that waited for an RPC (the others
    /// touched only this node's partitions).
    pub remote_latency_ns: Vec<(u64, u64)>,
    /// CPU seconds of this process in the window.
    pub cpu_s: f64,
    /// Seconds between this node's window-start and window-end.
    pub window_s: f64,
}

/// One copy of a partition as a digest of its objects.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CopyDigest {
    /// The partition.
    pub partition: u32,
    /// Whether this copy is the primary.
    pub primary: bool,
    /// A hash of every (key, version, value) in key order.
    pub digest: u64,
}

/// The data of one node once quiet.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CheckResult {
    /// Each copy hosted here.
    pub copies: Vec<CopyDigest>,
    /// Sum of the first 8 bytes (little-endian) of every value at primaries here: the
    /// money of the bank, or the read-modify-write counters of kv.
    pub primary_sum: u128,
    /// Largest such number at a primary here (a negative balance would wrap to a huge one).
    pub primary_max: u64,
    /// Keys absent or locked at a primary here (must be 0).
    pub primary_missing: u64,
}

/// A node's RPC counters over the whole run.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct NodeTotals {
    /// RPCs its coordinators completed (each a request and its response).
    pub rpcs: u64,
    /// Datagrams it sent.
    pub datagrams_sent: u64,
    /// Requests retransmitted.
    pub retransmissions: u64,
    /// Datagrams of another configuration dropped.
    pub wrong_configuration: u64,
}

fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn check(node: &Node, workload: &Workload) -> CheckResult {
    let mut result = CheckResult::default();
    let mut digests: Vec<(PartitionId, Role, u64)> = node
        .copies()
        .map(|(id, role, _)| (id, role, 0xcbf2_9ce4_8422_2325))
        .collect();
    let mut value = Vec::new();
    for key in workload.keys() {
        let partition = node.partition_of(TABLE, &key);
        for (id, role, digest) in digests.iter_mut().filter(|(id, _, _)| *id == partition) {
            let copy = node.copy(*id, *role).expect("hosted");
            let outcome = copy.read(TABLE, &key, &mut value).expect("table exists");
            let (present, version) = match outcome {
                Ok(ReadOutcome { present, version }) => (present, version),
                Err(_) => (false, u64::MAX),
            };
            *digest = fnv(*digest, key.as_bytes());
            *digest = fnv(*digest, &version.to_le_bytes());
            *digest = fnv(*digest, &[u8::from(present)]);
            if present {
                *digest = fnv(*digest, &value);
            }
            if *role == Role::Primary {
                if present && value.len() >= 8 {
                    let n = u64::from_le_bytes(value[..8].try_into().expect("8 bytes"));
                    result.primary_sum += u128::from(n);
                    result.primary_max = result.primary_max.max(n);
                } else {
                    result.primary_missing += 1;
                }
            }
        }
    }
    result.copies = digests
        .into_iter()
        .map(|(id, role, digest)| CopyDigest {
            partition: id.0,
            primary: role == Role::Primary,
            digest,
        })
        .collect();
    result
}

/// What one coroutine measured.
struct CoroutineResult {
    run: RunResult,
}

thread_local! {
    /// Latencies of the workload coroutines of this worker thread: one histogram per
    /// thread, not per coroutine, keeps the counters in cache.
    static LATENCIES: std::cell::RefCell<[Histogram<u64>; 2]> =
        std::cell::RefCell::new([new_histogram(), new_histogram()]);
}

/// Main of a driven node process: node `id` of `config`, running `drive`.
pub fn serve(config: Arc<Configuration>, id: u16, drive: &DriveOptions) -> anyhow::Result<()> {
    drive.workload.check()?;
    let options = NodeOptions {
        // One slot more than the workload's, for the truncation flush at the end.
        coroutines: drive.coroutines + 1,
        idle: ferrotx_node::Idle {
            spin: Duration::from_micros(drive.spin_us),
            yield_while_polling: drive.yield_while_polling,
            ..NodeOptions::default().idle
        },
        ..NodeOptions::default()
    };
    let transports = Node::udp_transports(&config, id, &options)
        .with_context(|| format!("starting node {id} over UDP"))?
        .into_iter()
        .map(|t| {
            let seed = drive.seed ^ u64::from(t.local().0) ^ 0x1055;
            Lossy::new(t, drive.loss, seed, BATCH_DATAGRAMS, UDP_MAX_PAYLOAD_BYTES)
        })
        .collect();
    let node = Node::start(config.clone(), id, transports, &options, Instant::now());
    let value = drive.workload.initial_value();
    // Primaries first: the objects reads and locks touch end up together in memory.
    for role in [Role::Primary, Role::Backup] {
        for key in drive.workload.keys() {
            node.load_as(role, TABLE, key, &value)?;
        }
    }
    let mut out = std::io::stdout().lock();
    let mut answer = |line: &str| -> anyhow::Result<()> {
        writeln!(out, "{line}")?;
        out.flush()?;
        Ok(())
    };
    answer("ready")?;
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut running = Vec::new();
    let mut cpu_start = 0.0;
    let mut cpu_s = 0.0;
    let mut window_start = Instant::now();
    let mut window_s = 0.0;
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "run" => {
                let clients = if id < drive.client_nodes {
                    config.threads_per_node()
                } else {
                    0
                };
                for thread in 0..clients {
                    for index in 0..drive.coroutines {
                        let seed = drive.seed
                            ^ (u64::from(id) << 48)
                            ^ (u64::from(thread) << 32)
                            ^ index as u64;
                        let runner =
                            Runner::new(drive.workload.clone(), ChaCha8Rng::seed_from_u64(seed));
                        let (measuring, stop) = (measuring.clone(), stop.clone());
                        running.push(node.spawn(thread, move |co, coordinator| {
                            coroutine(co, coordinator, runner, measuring, stop)
                        }));
                    }
                }
                answer("running")?;
            }
            "window-start" => {
                cpu_start = process_cpu_s();
                window_start = Instant::now();
                measuring.store(true, Ordering::Relaxed);
                answer("ok")?;
            }
            "window-end" => {
                measuring.store(false, Ordering::Relaxed);
                window_s = window_start.elapsed().as_secs_f64();
                cpu_s = process_cpu_s() - cpu_start;
                answer("ok")?;
            }
            "stop" => {
                stop.store(true, Ordering::Relaxed);
                let mut run = RunResult::default();
                let (mut histogram, mut remote) = (new_histogram(), new_histogram());
                for receiver in running.drain(..) {
                    let c = receiver
                        .recv_timeout(Duration::from_secs(60))
                        .context("a workload coroutine did not finish in 60 s")?;
                    run.window_committed += c.run.window_committed;
                    run.window_aborted += c.run.window_aborted;
                    run.committed += c.run.committed;
                    run.aborted += c.run.aborted;
                    run.errors += c.run.errors;
                }
                for thread in 0..config.threads_per_node() {
                    let taken = node.spawn(thread, |_, _| async {
                        LATENCIES.with(|h| {
                            std::mem::replace(
                                &mut *h.borrow_mut(),
                                [new_histogram(), new_histogram()],
                            )
                        })
                    });
                    let [all, waited] = taken
                        .recv_timeout(Duration::from_secs(60))
                        .context("collecting latencies")?;
                    histogram.add(&all).expect("same bounds");
                    remote.add(&waited).expect("same bounds");
                }
                let pairs = |h: &Histogram<u64>| -> Vec<(u64, u64)> {
                    h.iter_recorded()
                        .map(|v| (v.value_iterated_to(), v.count_at_value()))
                        .collect()
                };
                run.latency_ns = pairs(&histogram);
                run.remote_latency_ns = pairs(&remote);
                run.cpu_s = cpu_s;
                run.window_s = window_s;
                flush_truncation(&node)?;
                answer(&serde_json::to_string(&run)?)?;
            }
            "check" => answer(&serde_json::to_string(&check(&node, &drive.workload))?)?,
            "exit" => break,
            other => bail!("unknown command {other:?}"),
        }
    }
    let mut totals = NodeTotals::default();
    for report in node.stop() {
        totals.rpcs += report.rpc.calls_completed;
        totals.datagrams_sent += report.rpc.datagrams_sent;
        totals.retransmissions += report.rpc.retransmissions;
        totals.wrong_configuration += report.rpc.wrong_configuration;
    }
    answer(&serde_json::to_string(&totals)?)?;
    Ok(())
}

/// Sends every coordinator thread's truncation mark to every node, so that backups apply
/// every finished transaction to their copies.
fn flush_truncation(node: &Node) -> anyhow::Result<()> {
    let nodes: Vec<u16> = node.config().members().iter().map(|m| m.node).collect();
    let flushes: Vec<_> = (0..node.config().threads_per_node())
        .map(|thread| {
            let nodes = nodes.clone();
            node.spawn(thread, move |co, coordinator| async move {
                coordinator.flush_truncation(&co, &nodes).await;
            })
        })
        .collect();
    for flush in flushes {
        flush
            .recv_timeout(Duration::from_secs(60))
            .context("flushing truncation did not finish in 60 s")?;
    }
    Ok(())
}

async fn coroutine(
    co: ferrotx_exec::Co,
    coordinator: Rc<ferrotx_txn::coordinator::Coordinator>,
    mut runner: Runner,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> CoroutineResult {
    let mut run = RunResult::default();
    while !stop.load(Ordering::Relaxed) {
        // The loop's clock (set once per iteration) tells whether the transaction waited.
        // One that waited is timed on that clock, from the iteration that started it to
        // the one that resumed it with its last answer, as `bench rpc` times an RPC (so
        // the two compare); one that never waited, on the real clock.
        let start = co.now_ns();
        let started = Instant::now();
        let outcome = runner.run_one(&co, &coordinator).await;
        let waited = co.now_ns() != start;
        let window = measuring.load(Ordering::Relaxed);
        match outcome {
            Ok(()) => {
                run.committed += 1;
                if window {
                    run.window_committed += 1;
                    let latency = if waited {
                        co.now_ns() - start
                    } else {
                        (started.elapsed().as_nanos() as u64).max(1)
                    };
                    LATENCIES.with(|h| {
                        let mut h = h.borrow_mut();
                        let _ = h[0].record(latency);
                        if waited {
                            let _ = h[1].record(latency);
                        }
                    });
                }
            }
            Err(Abort::Conflict | Abort::Locked | Abort::LogFull) => {
                run.aborted += 1;
                run.window_aborted += u64::from(window);
            }
            Err(_) => run.errors += 1,
        }
        // Let the worker receive and send between transactions when a transaction
        // touched only local partitions and never waited (the clock, set once per loop
        // iteration, has not moved).
        if !waited {
            co.yield_now().await;
        }
    }
    CoroutineResult { run }
}
