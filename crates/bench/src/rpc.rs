//! `ferrotx bench rpc`: a server and a client exchanging RPCs as fast as they can.
//!
//! Over UDP the server is a second OS process, so every datagram takes the kernel's real
//! loopback path; over in-process channels both sides are threads of this process. Client
//! worker thread `t` talks to server worker thread `t` (FaSST's thread-to-thread
//! endpoints). Each client coroutine sends batches of `batch` requests and waits for each
//! whole batch. Measurements cover a window after a warm-up; then every coroutine finishes
//! its batch, so every request issued is accounted for, and the server's execution count
//! must equal it exactly (at-most-once, and nothing lost).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use ferrotx_node::{Idle, Worker};
use ferrotx_rpc::{Config, Engine, Stats};
use ferrotx_transport::mem::MemNetwork;
use ferrotx_transport::udp::{UdpConfig, UdpTransport};
use ferrotx_transport::{AddressBook, Transport, UDP_MAX_PAYLOAD_BYTES};
use ferrotx_wire::EndpointId;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::cpu::process_cpu_s;
use crate::lossy::Lossy;

/// The request type the benchmark server answers.
const BENCH_REQUEST: u8 = 1;
/// Node number of the server's endpoints; the client is node 1.
const SERVER_NODE: u16 = 0;
const CLIENT_NODE: u16 = 1;

/// Which transport carries the datagrams.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// Kernel UDP on loopback, server in a second process.
    Udp,
    /// In-process queues, server in threads of this process.
    Mem,
}

/// Settings of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RpcBenchOptions {
    /// Transport.
    pub transport: TransportKind,
    /// Worker threads on each side.
    pub threads: u16,
    /// Coroutines per client thread.
    pub coroutines: usize,
    /// Requests per coroutine batch.
    pub batch: usize,
    /// Request payload bytes.
    pub req_bytes: usize,
    /// Response payload bytes.
    pub resp_bytes: usize,
    /// Coalesce messages to one destination into shared datagrams.
    pub coalesce: bool,
    /// Share of datagrams dropped on purpose, on both sides.
    pub loss: f64,
    /// Measured seconds.
    pub duration_s: f64,
    /// Seconds run before measuring.
    pub warmup_s: f64,
    /// First UDP port; endpoints use consecutive ports from here.
    pub port_base: u16,
    /// Socket send and receive buffer size to ask the kernel for.
    pub socket_buffer_bytes: usize,
    /// Seal and open every datagram (`ferrotx_wire::auth`), as nodes do; off only to
    /// measure what it costs.
    pub auth: bool,
}

impl RpcBenchOptions {
    fn engine_config(&self, incarnation: u64, callers: usize) -> Config {
        Config {
            incarnation,
            callers,
            max_batch: self.batch,
            // Enough credits for every request of every coroutine of a thread, within the
            // one-byte slot number, so the window does not throttle the benchmark.
            credits: (self.coroutines * self.batch).clamp(1, 255) as u8,
            datagram_bytes: UDP_MAX_PAYLOAD_BYTES,
            coalesce: self.coalesce,
            // One key for both sides, made for the run.
            auth: self.auth.then(|| {
                ferrotx_wire::auth::Auth::new(
                    ferrotx_wire::auth::Keys::one(ferrotx_wire::auth::Key::from_material(
                        &[0x42; ferrotx_wire::auth::KEY_BYTES],
                    )),
                    ferrotx_wire::auth::ClusterId([7; 16]),
                    [9; 16],
                )
            }),
            ..Config::default()
        }
    }

    fn udp_config(&self) -> UdpConfig {
        UdpConfig {
            recv_buffer_bytes: self.socket_buffer_bytes,
            send_buffer_bytes: self.socket_buffer_bytes,
            ..UdpConfig::default()
        }
    }

    fn addresses(&self) -> AddressBook {
        AddressBook::loopback(self.port_base, 2, self.threads)
    }

    fn check(&self) -> anyhow::Result<()> {
        ensure!(self.threads >= 1, "--threads must be at least 1");
        ensure!(
            self.coroutines >= 1 && self.coroutines <= 1024,
            "--coroutines must be in 1..=1024"
        );
        ensure!(
            self.batch >= 1 && self.batch <= 4096,
            "--batch must be in 1..=4096"
        );
        let limit = ferrotx_wire::MAX_MESSAGE_BYTES as usize;
        ensure!(
            self.req_bytes <= limit,
            "--req-bytes must be at most {limit}"
        );
        ensure!(
            self.resp_bytes <= limit,
            "--resp-bytes must be at most {limit}"
        );
        ensure!((0.0..1.0).contains(&self.loss), "--loss must be in [0, 1)");
        ensure!(self.duration_s > 0.0, "--duration must be positive");
        ensure!(
            self.socket_buffer_bytes >= 4096,
            "--socket-buffer-kib must be at least 4"
        );
        ensure!(
            u32::from(self.port_base) + 2 * u32::from(self.threads) <= 65_535,
            "--port-base too high for {} threads",
            self.threads
        );
        Ok(())
    }
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// The result of a run, as written to `--json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RpcBenchReport {
    /// The settings.
    pub options: RpcBenchOptions,
    /// RPCs completed inside the measured window.
    pub rpcs_completed: u64,
    /// Length of the window.
    pub duration_s: f64,
    /// `rpcs_completed / duration_s`.
    pub rpcs_per_s: f64,
    /// User plus system CPU seconds of both processes over the window.
    pub cpu_s: f64,
    /// `rpcs_completed / cpu_s`.
    pub rpcs_per_cpu_s: f64,
    /// Latency of one RPC: from its batch's submission to the batch's completion.
    pub latency_us: Latency,
    /// Request payload gigabytes (1e9 bytes) per second.
    pub request_gbytes_per_s: f64,
    /// Datagrams written by both sides over the whole run.
    pub datagrams_sent: u64,
    /// Messages per datagram over the whole run: how many RPCs share a datagram in each
    /// direction.
    pub rpcs_per_datagram: f64,
    /// Requests retransmitted by the client over the whole run.
    pub retransmissions: u64,
    /// Datagrams dropped on purpose (`--loss`).
    pub datagrams_dropped: u64,
    /// Requests the client issued over the whole run.
    pub rpcs_issued: u64,
    /// Requests the server executed over the whole run; equal to `rpcs_issued` when every
    /// RPC completed exactly once.
    pub rpcs_executed: u64,
    /// Duplicate requests answered from a saved response.
    pub duplicates_answered: u64,
}

/// What one side's workers did, summed.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct SideTotals {
    datagrams_sent: u64,
    messages_sent: u64,
    retransmissions: u64,
    executed: u64,
    duplicates_answered: u64,
    dropped: u64,
    cpu_s: f64,
}

impl SideTotals {
    fn add(&mut self, stats: &Stats, dropped: u64) {
        self.datagrams_sent += stats.datagrams_sent;
        self.messages_sent += stats.messages_sent;
        self.retransmissions += stats.retransmissions;
        self.executed += stats.requests_executed;
        self.duplicates_answered += stats.duplicate_requests_answered;
        self.dropped += dropped;
    }
}

/// What a client thread measured.
struct ClientResult {
    histogram: Histogram<u64>,
    window_rpcs: u64,
    issued: u64,
    stats: Stats,
    dropped: u64,
}

/// A wall-clock instant shared by all threads of this process.
fn incarnation_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1)
}

/// Runs the benchmark.
pub fn run(options: &RpcBenchOptions) -> anyhow::Result<RpcBenchReport> {
    options.check()?;
    match options.transport {
        TransportKind::Udp => run_udp(options),
        TransportKind::Mem => run_mem(options),
    }
}

fn server_thread<T: Transport + Send + 'static>(
    transport: T,
    options: &RpcBenchOptions,
    stop: Arc<AtomicBool>,
    epoch: Instant,
) -> JoinHandle<(Stats, u64)> {
    let options = options.clone();
    std::thread::spawn(move || {
        let resp_bytes = options.resp_bytes;
        let seed = u64::from(transport.local().0);
        let transport = Lossy::new(
            transport,
            options.loss,
            seed,
            ferrotx_node::BATCH_DATAGRAMS,
            UDP_MAX_PAYLOAD_BYTES,
        );
        let mut engine = Engine::new(
            transport.local(),
            options.engine_config(incarnation_now(), 1),
        );
        engine.register(
            BENCH_REQUEST,
            Box::new(move |_request, response| {
                response.resize(resp_bytes, 0xab);
                Ok(())
            }),
        );
        let mut worker = Worker::new(transport, engine);
        ferrotx_node::run(&mut worker, epoch, Idle::default(), |_| {
            !stop.load(Ordering::Relaxed)
        });
        let stats = *worker.executor().shared().engine().stats();
        (stats, worker.transport().dropped)
    })
}

fn client_thread<T: Transport + Send + 'static>(
    transport: T,
    options: &RpcBenchOptions,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> JoinHandle<ClientResult> {
    let options = options.clone();
    let window_start_ns = (options.warmup_s * 1e9) as u64;
    let window_end_ns = window_start_ns + (options.duration_s * 1e9) as u64;
    std::thread::spawn(move || {
        let target = EndpointId::new(SERVER_NODE, transport.local().thread());
        let seed = u64::from(transport.local().0);
        let transport = Lossy::new(
            transport,
            options.loss,
            seed,
            ferrotx_node::BATCH_DATAGRAMS,
            UDP_MAX_PAYLOAD_BYTES,
        );
        let engine = Engine::new(
            transport.local(),
            options.engine_config(incarnation_now(), options.coroutines),
        );
        let mut worker = Worker::new(transport, engine);
        let histogram = std::rc::Rc::new(std::cell::RefCell::new(
            Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds"),
        ));
        let counts = std::rc::Rc::new(std::cell::Cell::new((0u64, 0u64)));
        let request = vec![0x5au8; options.req_bytes];
        for _ in 0..options.coroutines {
            let histogram = histogram.clone();
            let counts = counts.clone();
            let request = request.clone();
            let batch = options.batch;
            worker.executor().spawn(move |co| async move {
                while co.now_ns() < window_end_ns {
                    for _ in 0..batch {
                        co.push(target, BENCH_REQUEST, &request);
                    }
                    let start = co.now_ns();
                    co.call().await;
                    let end = co.now_ns();
                    let (window, issued) = counts.get();
                    let mut in_window = 0;
                    if start >= window_start_ns && end <= window_end_ns {
                        in_window = batch as u64;
                        let _ = histogram
                            .borrow_mut()
                            .record_n((end - start).max(1), batch as u64);
                    }
                    counts.set((window + in_window, issued + batch as u64));
                }
            });
        }
        ferrotx_node::run(&mut worker, epoch, Idle::default(), |w| {
            w.coroutines_live() > 0 && !stop.load(Ordering::Relaxed)
        });
        let stats = *worker.executor().shared().engine().stats();
        let (window_rpcs, issued) = counts.get();
        let histogram = histogram.borrow().clone();
        ClientResult {
            histogram,
            window_rpcs,
            issued,
            stats,
            dropped: worker.transport().dropped,
        }
    })
}

/// Sleeps until `epoch + at`.
fn sleep_until(epoch: Instant, at: Duration) {
    if let Some(left) = at.checked_sub(epoch.elapsed()) {
        std::thread::sleep(left);
    }
}

fn run_clients<T: Transport + Send + 'static>(
    options: &RpcBenchOptions,
    transports: Vec<T>,
    epoch: Instant,
    mut on_window: impl FnMut(bool) -> anyhow::Result<()>,
) -> anyhow::Result<(Vec<ClientResult>, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = transports
        .into_iter()
        .map(|t| client_thread(t, options, epoch, stop.clone()))
        .collect();
    let window_start = Duration::from_secs_f64(options.warmup_s);
    let window_end = window_start + Duration::from_secs_f64(options.duration_s);
    sleep_until(epoch, window_start);
    let cpu_start = process_cpu_s();
    on_window(true)?;
    sleep_until(epoch, window_end);
    let cpu_end = process_cpu_s();
    on_window(false)?;
    // Every coroutine now finishes the batch it has in flight; a run that cannot drain in
    // a generous time (a lost peer) is stopped and reported as incomplete.
    let drain_deadline = Instant::now() + Duration::from_secs(30);
    while clients.iter().any(|c| !c.is_finished()) && Instant::now() < drain_deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let results = clients
        .into_iter()
        .map(|c| c.join().expect("client thread panicked"))
        .collect();
    Ok((results, cpu_end - cpu_start))
}

fn run_mem(options: &RpcBenchOptions) -> anyhow::Result<RpcBenchReport> {
    let network = MemNetwork::new();
    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let servers: Vec<_> = (0..options.threads)
        .map(|t| {
            server_thread(
                network.endpoint(EndpointId::new(SERVER_NODE, t)),
                options,
                stop.clone(),
                epoch,
            )
        })
        .collect();
    let transports = (0..options.threads)
        .map(|t| network.endpoint(EndpointId::new(CLIENT_NODE, t)))
        .collect();
    let (clients, cpu_s) = run_clients(options, transports, epoch, |_| Ok(()))?;
    stop.store(true, Ordering::Relaxed);
    let mut server = SideTotals::default();
    for s in servers {
        let (stats, dropped) = s.join().expect("server thread panicked");
        server.add(&stats, dropped);
    }
    // Both sides share this process, so its CPU time covers both.
    server.cpu_s = 0.0;
    Ok(report(options, clients, server, cpu_s))
}

/// The server process of a UDP run, spoken to over its stdin and stdout.
struct ServerProcess {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl ServerProcess {
    fn spawn(options: &RpcBenchOptions) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("finding this executable to start the server")?;
        let mut child = Command::new(exe)
            .args(["bench", "rpc-server", "--options"])
            .arg(serde_json::to_string(options)?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the server process")?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut server = Self {
            child,
            stdin,
            stdout,
        };
        let line = server.read_line()?;
        if line.trim() != "ready" {
            bail!("server process did not start: {line}");
        }
        Ok(server)
    }

    fn read_line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .context("reading from the server process")?;
        ensure!(!line.is_empty(), "the server process exited early");
        Ok(line)
    }

    fn send(&mut self, command: &str) -> anyhow::Result<()> {
        writeln!(self.stdin, "{command}").context("writing to the server process")?;
        self.stdin.flush()?;
        Ok(())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_udp(options: &RpcBenchOptions) -> anyhow::Result<RpcBenchReport> {
    let addresses = options.addresses();
    let mut server = ServerProcess::spawn(options)?;
    let mut transports = Vec::new();
    for t in 0..options.threads {
        let local = EndpointId::new(CLIENT_NODE, t);
        let addr = addresses.get(local).expect("client address");
        transports.push(
            UdpTransport::bind(local, addr, &addresses, options.udp_config()).with_context(
                || format!("binding client endpoint {local} at {addr}; try another --port-base"),
            )?,
        );
    }
    let epoch = Instant::now();
    let (clients, client_cpu_s) = run_clients(options, transports, epoch, |start| {
        server.send(if start { "start" } else { "end" })
    })?;
    server.send("stop")?;
    let line = server.read_line()?;
    let server_totals: SideTotals =
        serde_json::from_str(&line).context("parsing the server's report")?;
    Ok(report(options, clients, server_totals, client_cpu_s))
}

/// Main of the server process (`ferrotx bench rpc-server`): binds, prints `ready`, then
/// obeys `start` (begin CPU accounting), `end` (end it) and `stop` (print totals, exit).
pub fn serve(options: &RpcBenchOptions) -> anyhow::Result<()> {
    let addresses = options.addresses();
    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut servers = Vec::new();
    for t in 0..options.threads {
        let local = EndpointId::new(SERVER_NODE, t);
        let addr = addresses.get(local).expect("server address");
        let transport = UdpTransport::bind(local, addr, &addresses, options.udp_config())
            .with_context(|| {
                format!("binding server endpoint {local} at {addr}; try another --port-base")
            })?;
        servers.push(server_thread(transport, options, stop.clone(), epoch));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let (mut cpu_start, mut cpu_end) = (0.0, 0.0);
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "start" => cpu_start = process_cpu_s(),
            "end" => cpu_end = process_cpu_s(),
            "stop" => break,
            other => bail!("unknown command {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut totals = SideTotals::default();
    for s in servers {
        let (stats, dropped) = s.join().expect("server thread panicked");
        totals.add(&stats, dropped);
    }
    totals.cpu_s = cpu_end - cpu_start;
    writeln!(out, "{}", serde_json::to_string(&totals)?)?;
    out.flush()?;
    Ok(())
}

fn report(
    options: &RpcBenchOptions,
    clients: Vec<ClientResult>,
    server: SideTotals,
    client_cpu_s: f64,
) -> RpcBenchReport {
    let mut histogram =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
    let mut client = SideTotals::default();
    let (mut window_rpcs, mut issued) = (0, 0);
    for c in &clients {
        histogram.add(&c.histogram).expect("same bounds");
        client.add(&c.stats, c.dropped);
        window_rpcs += c.window_rpcs;
        issued += c.issued;
    }
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1e3;
    let cpu_s = client_cpu_s + server.cpu_s;
    let datagrams_sent = client.datagrams_sent + server.datagrams_sent;
    let messages = client.messages_sent + server.messages_sent;
    RpcBenchReport {
        options: options.clone(),
        rpcs_completed: window_rpcs,
        duration_s: options.duration_s,
        rpcs_per_s: window_rpcs as f64 / options.duration_s,
        cpu_s,
        rpcs_per_cpu_s: if cpu_s > 0.0 {
            window_rpcs as f64 / cpu_s
        } else {
            0.0
        },
        latency_us: Latency {
            p50: us(0.5),
            p99: us(0.99),
            p999: us(0.999),
        },
        request_gbytes_per_s: window_rpcs as f64 * options.req_bytes as f64
            / options.duration_s
            / 1e9,
        datagrams_sent,
        rpcs_per_datagram: if datagrams_sent > 0 {
            messages as f64 / datagrams_sent as f64
        } else {
            0.0
        },
        retransmissions: client.retransmissions,
        datagrams_dropped: client.dropped + server.dropped,
        rpcs_issued: issued,
        rpcs_executed: server.executed,
        duplicates_answered: server.duplicates_answered,
    }
}

/// Prints a report as a table.
pub fn print_table(r: &RpcBenchReport) {
    let o = &r.options;
    println!(
        "bench rpc: {:?}, {} thread(s) per side, {} coroutines x batch {}, {} B requests, {} B responses, coalescing {}, loss {}",
        o.transport,
        o.threads,
        o.coroutines,
        o.batch,
        o.req_bytes,
        o.resp_bytes,
        if o.coalesce { "on" } else { "off" },
        o.loss
    );
    let rows: [(&str, String); 12] = [
        ("rpcs completed", format!("{}", r.rpcs_completed)),
        ("duration", format!("{:.2} s", r.duration_s)),
        ("throughput", format!("{:.0} rpc/s", r.rpcs_per_s)),
        ("cpu (both sides)", format!("{:.2} s", r.cpu_s)),
        (
            "per cpu-second",
            format!("{:.0} rpc/cpu-s", r.rpcs_per_cpu_s),
        ),
        (
            "latency p50/p99/p999",
            format!(
                "{:.1} / {:.1} / {:.1} us",
                r.latency_us.p50, r.latency_us.p99, r.latency_us.p999
            ),
        ),
        (
            "request bandwidth",
            format!("{:.3} GB/s", r.request_gbytes_per_s),
        ),
        ("datagrams sent", format!("{}", r.datagrams_sent)),
        ("rpcs per datagram", format!("{:.1}", r.rpcs_per_datagram)),
        ("retransmissions", format!("{}", r.retransmissions)),
        (
            "datagrams dropped (--loss)",
            format!("{}", r.datagrams_dropped),
        ),
        (
            "issued / executed",
            format!("{} / {}", r.rpcs_issued, r.rpcs_executed),
        ),
    ];
    for (name, value) in rows {
        println!("  {name:<28} {value}");
    }
}

/// CPU use of an idle node.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct IdleReport {
    /// Worker threads.
    pub threads: u16,
    /// Measured seconds.
    pub duration_s: f64,
    /// CPU seconds the node used in that time.
    pub cpu_s: f64,
    /// `cpu_s / duration_s` as a percentage of one core.
    pub core_percent: f64,
}

/// Starts a node's RPC server (as `bench rpc` does, in a second process) and measures its
/// CPU time over `duration_s` without traffic.
pub fn idle(threads: u16, duration_s: f64, port_base: u16) -> anyhow::Result<IdleReport> {
    let options = RpcBenchOptions {
        transport: TransportKind::Udp,
        threads,
        coroutines: 1,
        batch: 1,
        req_bytes: 0,
        resp_bytes: 0,
        coalesce: true,
        loss: 0.0,
        duration_s,
        warmup_s: 0.0,
        port_base,
        socket_buffer_bytes: UdpConfig::default().recv_buffer_bytes,
        auth: true,
    };
    options.check()?;
    let mut server = ServerProcess::spawn(&options)?;
    // Let start-up work settle before measuring.
    std::thread::sleep(Duration::from_millis(200));
    server.send("start")?;
    std::thread::sleep(Duration::from_secs_f64(duration_s));
    server.send("end")?;
    server.send("stop")?;
    let totals: SideTotals =
        serde_json::from_str(&server.read_line()?).context("parsing the server's report")?;
    Ok(IdleReport {
        threads,
        duration_s,
        cpu_s: totals.cpu_s,
        core_percent: totals.cpu_s / duration_s * 100.0,
    })
}
