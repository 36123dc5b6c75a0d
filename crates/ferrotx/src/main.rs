//! The `ferrotx` command line. It parses arguments and calls into the library crates; it
//! has no logic of its own.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use ferrotx_bench::rpc::{RpcBenchOptions, TransportKind};

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

#[derive(Subcommand)]
enum Command {
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum Bench {
    /// RPC throughput and latency between a server and a client process on loopback.
    Rpc(RpcArgs),
    /// CPU used by an idle node (RPC server threads with no traffic).
    Idle(IdleArgs),
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

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
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
