#!/usr/bin/env python3
"""Runs the RPC benchmarks of docs/benchmarks.md in one go, beside the machine's limit.

Measures the kernel's limit with ../shared/tools/udp_limit.c (ping-pong round trip and
one-way datagram rate), then `ferrotx bench rpc` in the configurations the targets name,
a batch-size sweep with and without coalescing, and `ferrotx bench idle`. Everything runs
in one session so the ratios compare like with like. Writes docs/results/rpc.json and
docs/results/rpc.md, and docs/img/rpc_batch_sweep.{svg,png} when matplotlib is installed
(`pip install matplotlib`).

Usage: python3 scripts/bench_rpc.py [--duration SECONDS] [--no-sweep]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "ferrotx")
UDP_LIMIT_SRC = os.path.join(ROOT, "..", "shared", "tools", "udp_limit.c")


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def udp_limit(exe):
    out = run([exe, "32"], capture_output=True, text=True).stdout
    return json.loads(out)


def bench(name, args, duration, results):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [BIN, "bench", "rpc", "--duration", str(duration), "--json", path] + args
    run(cmd, stdout=subprocess.DEVNULL)
    with open(path) as f:
        report = json.load(f)
    os.unlink(path)
    report["command"] = "ferrotx bench rpc --duration %s %s" % (duration, " ".join(args))
    results[name] = report
    lat = report["latency_us"]
    print("  %-22s %12.0f rpc/s  %10.0f rpc/cpu-s  p50 %8.1f us  p99 %8.1f us  %6.1f rpc/dgram  %d retx"
          % (name, report["rpcs_per_s"], report["rpcs_per_cpu_s"], lat["p50"], lat["p99"],
             report["rpcs_per_datagram"], report["retransmissions"]), flush=True)
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--no-sweep", action="store_true")
    args = parser.parse_args()
    d = args.duration

    run(["cargo", "build", "--release", "--locked", "-p", "ferrotx"], cwd=ROOT)
    limit_exe = os.path.join(tempfile.gettempdir(), "ferrotx_udp_limit")
    run(["cc", "-O2", "-o", limit_exe, UDP_LIMIT_SRC])

    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    limits = [udp_limit(limit_exe)]
    print("  udp_limit:", limits[0], flush=True)
    r = {}
    bench("default", [], d, r)
    bench("latency", ["--coroutines", "1", "--batch", "1"], d, r)
    bench("loss_0.01", ["--loss", "0.01"], d, r)
    bench("no_coalesce", ["--no-coalesce"], d, r)
    bench("mem", ["--transport", "mem"], d, r)
    bench("mem_latency", ["--transport", "mem", "--coroutines", "1", "--batch", "1"], d, r)
    bench("1MiB", ["--req-bytes", "1048576", "--coroutines", "2", "--batch", "1"], d, r)
    bench("1MiB_small_buffers", ["--req-bytes", "1048576", "--coroutines", "8", "--batch", "1",
                                 "--socket-buffer-kib", "208"], d, r)
    sweep = {}
    if not args.no_sweep:
        for coalesce in (True, False):
            for batch in (1, 2, 4, 8, 16, 32):
                extra = ["--batch", str(batch)] + ([] if coalesce else ["--no-coalesce"])
                key = "batch_%d_%s" % (batch, "coalesce" if coalesce else "no_coalesce")
                sweep[key] = bench(key, extra, max(1.0, d / 2), {})
    idle_json = os.path.join(tempfile.gettempdir(), "ferrotx_idle.json")
    run([BIN, "bench", "idle", "--duration", "10", "--json", idle_json])
    with open(idle_json) as f:
        idle = json.load(f)
    limits.append(udp_limit(limit_exe))
    print("  udp_limit:", limits[1], flush=True)

    rtt = sum(l["udp_pingpong_rtt_us"] for l in limits) / len(limits)
    oneway = sum(l["udp_oneway_datagrams_per_s"] for l in limits) / len(limits)
    targets = [
        ("32 B RPCs over UDP, defaults: rpcs_per_s / udp_oneway_datagrams_per_s",
         r["default"]["rpcs_per_s"] / oneway, ">= 5"),
        ("one coroutine, batch 1: p50 latency / udp_pingpong_rtt_us",
         r["latency"]["latency_us"]["p50"] / rtt, "<= 1.3"),
        ("--loss 0.01: rpcs_per_s / loss-free rpcs_per_s",
         r["loss_0.01"]["rpcs_per_s"] / r["default"]["rpcs_per_s"], ">= 0.5"),
        ("--loss 0.01: RPCs issued = executed (every RPC completed exactly once)",
         float(r["loss_0.01"]["rpcs_issued"] == r["loss_0.01"]["rpcs_executed"]), "= 1"),
        ("1 MiB requests: GB/s", r["1MiB"]["request_gbytes_per_s"], "completes"),
        ("idle node, 10 s: % of one core", idle["core_percent"], "< 2"),
    ]
    out = {"started": started, "udp_limit": limits, "runs": r, "sweep": sweep, "idle": idle,
           "targets": [{"what": t, "value": v, "target": g} for t, v, g in targets]}
    os.makedirs(os.path.join(ROOT, "docs", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "docs", "results", "rpc.json"), "w") as f:
        json.dump(out, f, indent=2)

    lines = ["Measured %s with `python3 scripts/bench_rpc.py --duration %s`." % (started, d), "",
             "Machine limit (`udp_limit.c`, 32 B, before and after): ping-pong round trip %s us, "
             "one-way %s datagrams/s." % (
                 " / ".join("%.2f" % l["udp_pingpong_rtt_us"] for l in limits),
                 " / ".join("%.0f" % l["udp_oneway_datagrams_per_s"] for l in limits)), "",
             "| target | measured | goal |", "| --- | --- | --- |"]
    for t, v, g in targets:
        lines.append("| %s | %.2f | %s |" % (t, v, g))
    lines += ["", "| run | command | rpc/s | rpc/cpu-s | p50 us | p99 us | p99.9 us | rpc/datagram | retransmissions |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, rep in list(r.items()) + list(sweep.items()):
        lat = rep["latency_us"]
        lines.append("| %s | `%s` | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %d |" % (
            name, rep["command"], rep["rpcs_per_s"], rep["rpcs_per_cpu_s"], lat["p50"], lat["p99"],
            lat["p999"], rep["rpcs_per_datagram"], rep["retransmissions"]))
    lines.append("")
    lines.append("Idle node (`ferrotx bench idle --duration 10`, %d threads): %.3f CPU-s in %.0f s = %.2f%% of one core."
                 % (idle["threads"], idle["cpu_s"], idle["duration_s"], idle["core_percent"]))
    with open(os.path.join(ROOT, "docs", "results", "rpc.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    if sweep:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib not installed: no plot (pip install matplotlib)")
            return
        batches = [1, 2, 4, 8, 16, 32]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for coalesce, label in ((True, "coalescing on"), (False, "coalescing off")):
            ys = [sweep["batch_%d_%s" % (b, "coalesce" if coalesce else "no_coalesce")]["rpcs_per_s"] / 1e6
                  for b in batches]
            ax.plot(batches, ys, marker="o", label="ferrotx, " + label)
        ax.axhline(oneway / 1e6, color="gray", linestyle="--",
                   label="kernel one-way datagrams/s (udp_limit)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.set_xlabel("requests per coroutine batch (20 coroutines, 1 thread per side)")
        ax.set_ylabel("million RPCs per second")
        ax.set_title("32 B RPCs over loopback UDP, 2 processes, 2 cores")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
        for ext in ("svg", "png"):
            fig.savefig(os.path.join(ROOT, "docs", "img", "rpc_batch_sweep." + ext), dpi=110)
        print("plot written to docs/img/rpc_batch_sweep.{svg,png}")


if __name__ == "__main__":
    sys.exit(main())
