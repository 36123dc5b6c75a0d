#!/usr/bin/env python3
"""Runs TATP at FaSST's scale (1 M subscribers per node) in one go, beside `bench rpc`.

Measures `ferrotx bench rpc` at one coroutine (the RPC round trip), then `ferrotx bench
tatp` (3 node processes, 1 M subscribers each, 3 replicas, UDP) as a sweep of the offered
load on one cluster loaded once: from 1 coroutine per node (low load, for the latency
target) up to the saturating loads (for throughput), then `bench rpc` again to show drift.
Writes docs/results/tatp.json and docs/results/tatp.md, and docs/img/tatp_sweep.svg and
.png (both drawn by ferrotx).

Usage: python3 scripts/bench_tatp.py [--duration SECONDS] [--coroutines 1,2,4,...]
       [--subscribers-per-node N] [--bin PATH (default: build target/release/ferrotx)]
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "ferrotx")


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def rpc_latency(duration):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    run([BIN, "bench", "rpc", "--duration", str(duration), "--coroutines", "1", "--batch", "1",
         "--json", path], stdout=subprocess.DEVNULL)
    with open(path) as f:
        report = json.load(f)
    os.unlink(path)
    print("  bench rpc, 1 coroutine: p50 %.1f us, p99 %.1f us"
          % (report["latency_us"]["p50"], report["latency_us"]["p99"]), flush=True)
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--coroutines", default="1,2,4,8,16,20,32,48,64")
    parser.add_argument("--subscribers-per-node", type=int, default=1000000)
    parser.add_argument("--bin", default=None,
                        help="a ferrotx binary to measure instead of building this checkout")
    args = parser.parse_args()

    global BIN
    if args.bin:
        BIN = os.path.abspath(args.bin)
    else:
        run(["cargo", "build", "--release", "--locked", "-p", "ferrotx"], cwd=ROOT)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    rpc_before = rpc_latency(args.duration)
    work = tempfile.mkdtemp(prefix="ferrotx-tatp-")
    try:
        prefix = os.path.join(work, "tatp_sweep")
        tatp_cmd = ["bench", "tatp", "--duration", str(args.duration),
                    "--subscribers-per-node", str(args.subscribers_per_node),
                    "--sweep-coroutines", args.coroutines, "--sweep", "PREFIX"]
        run([BIN] + tatp_cmd[:-1] + [prefix])
        with open(prefix + ".json") as f:
            sweep = json.load(f)
        img = os.path.join(ROOT, "docs", "img")
        os.makedirs(img, exist_ok=True)
        for ext in ("svg", "png"):
            shutil.copy(prefix + "." + ext, os.path.join(img, "tatp_sweep." + ext))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rpc_after = rpc_latency(args.duration)

    runs = sweep["runs"]
    low = min(runs, key=lambda r: r["options"]["coroutines"])
    best = max(runs, key=lambda r: r["throughput_per_s"])
    rtt = rpc_before["latency_us"]["p50"]
    rtt_after = rpc_after["latency_us"]["p50"]
    targets = [
        ("TATP p50 at %d coroutine per node / bench rpc p50 (1 coroutine)"
         % low["options"]["coroutines"], low["latency_us"]["p50"] / rtt, "<= 3"),
        ("TATP committed per CPU-second, at the best throughput (%d coroutines per node)"
         % best["options"]["coroutines"], best["throughput_per_cpu_s"], ">= 200,000"),
        ("TATP committed per second, best of the sweep", best["throughput_per_s"],
         "(10x PostgreSQL: scripts/postgres_compare.py)"),
    ]
    out = {"started": started, "rpc_p50_us": rtt, "rpc_p50_us_after": rtt_after,
           "command": "ferrotx " + " ".join(tatp_cmd),
           "targets": [{"what": w, "measured": m, "goal": g} for w, m, g in targets],
           "sweep": sweep, "rpc_before": rpc_before, "rpc_after": rpc_after}
    res = os.path.join(ROOT, "docs", "results")
    os.makedirs(res, exist_ok=True)
    with open(os.path.join(res, "tatp.json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    lines = ["# bench tatp results", "",
             "Written by `python3 scripts/bench_tatp.py --duration %s --coroutines %s "
             "--subscribers-per-node %d`, started %s, on the project's 2-core machine. "
             "3 node processes, 1 worker thread each, 3 replicas (f = 2), UDP on loopback; "
             "%d subscribers in all, loaded once for the whole sweep. `bench rpc` p50 at one "
             "coroutine: %.1f us before the sweep, %.1f us after it."
             % (args.duration, args.coroutines, args.subscribers_per_node, started,
                3 * args.subscribers_per_node, rtt, rtt_after), "",
             "| target | measured | goal |", "| --- | --- | --- |"]
    for w, m, g in targets:
        lines.append("| %s | %s | %s |" % (w, "{:,.2f}".format(m) if m < 100
                                            else "{:,.0f}".format(m), g))
    lines += ["", "| coroutines per node | txn/s | txn per cpu-s | p50 us | p99 us | p99.9 us "
              "| aborts | RPCs/txn | datagrams/txn | checks |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for rep in runs:
        lat = rep["latency_us"]
        lines.append("| %d | %.0f | %.0f | %.1f | %.1f | %.1f | %.2f%% | %.2f | %.2f | %s |"
                     % (rep["options"]["coroutines"], rep["throughput_per_s"],
                        rep["throughput_per_cpu_s"], lat["p50"], lat["p99"], lat["p999"],
                        100 * rep["abort_rate"], rep["rpcs_per_commit"],
                        rep["datagrams_per_commit"], "ok" if rep["checks"]["ok"] else "FAILED"))
    lines += ["", "Per transaction type at %d coroutines per node (the best throughput):"
              % best["options"]["coroutines"], "",
              "| type | committed | success | aborted | p50 us | p99 us |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for t in best["types"]:
        lines.append("| %s | %d | %.1f%% | %d | %.1f | %.1f |"
                     % (t["name"], t["committed"], 100 * t["success_rate"], t["aborted"],
                        t["latency_us"]["p50"], t["latency_us"]["p99"]))
    lines += ["", "![TATP latency against throughput](../img/tatp_sweep.svg)"]
    with open(os.path.join(res, "tatp.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
