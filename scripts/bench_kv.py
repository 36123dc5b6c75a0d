#!/usr/bin/env python3
"""Runs the transaction benchmarks of docs/benchmarks.md in one go, beside `bench rpc`.

Measures `ferrotx bench rpc` (the RPC round trip at one coroutine, and under the default
load), then `ferrotx bench kv` on 3 node processes with 3 replicas over UDP in the
configurations issue 3's targets name, a few more workloads, a sweep of coroutines for
the one-key read-modify-write (latency against throughput), and `bench rpc` again at the
end to show drift. Everything runs in one session so the ratios compare like with like.
Writes docs/results/kv.json and docs/results/kv.md, and docs/img/kv_rmw_sweep.{svg,png}
when matplotlib is installed (`pip install matplotlib`).

Usage: python3 scripts/bench_kv.py [--duration SECONDS] [--no-sweep]
"""

import argparse
import json
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "ferrotx")


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def bench(what, name, args, duration, results):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [BIN, "bench", what, "--duration", str(duration), "--json", path] + args
    run(cmd, stdout=subprocess.DEVNULL)
    with open(path) as f:
        report = json.load(f)
    os.unlink(path)
    report["command"] = "ferrotx bench %s --duration %s %s" % (what, duration, " ".join(args))
    results[name] = report
    lat = report["latency_us"]
    if what == "rpc":
        print("  %-24s %12.0f rpc/s  p50 %8.1f us  p99 %8.1f us"
              % (name, report["rpcs_per_s"], lat["p50"], lat["p99"]), flush=True)
    else:
        print("  %-24s %12.0f txn/s  %9.0f txn/cpu-s  p50 %8.1f us  p99 %8.1f us  "
              "abort %5.1f%%  %5.2f rpc/txn  %5.2f dgram/txn  checks %s"
              % (name, report["throughput_per_s"], report["throughput_per_cpu_s"], lat["p50"],
                 lat["p99"], 100 * report["abort_rate"], report["rpcs_per_commit"],
                 report["datagrams_per_commit"], "ok" if report["checks"]["ok"] else "FAILED"),
              flush=True)
    return report


def plot(sweep, path_base):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  matplotlib not installed: no plot (pip install matplotlib)")
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = [r["throughput_per_s"] / 1e3 for r in sweep]
    for key, label in (("p50", "median"), ("p99", "p99")):
        ax.plot(xs, [r["latency_us"][key] for r in sweep], marker="o", label=label)
    for r, x in zip(sweep, xs):
        ax.annotate(str(r["options"]["coroutines"]), (x, r["latency_us"]["p50"]),
                    textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel("committed one-key read-modify-writes per second (thousands)")
    ax.set_ylabel("latency (us)")
    ax.set_yscale("log")
    ax.set_title("bench kv: 3 node processes, f = 2, UDP; labels: coroutines per node")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    for ext in ("svg", "png"):
        fig.savefig("%s.%s" % (path_base, ext), dpi=120)
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--no-sweep", action="store_true")
    args = parser.parse_args()
    d = args.duration

    run(["cargo", "build", "--release", "--locked", "-p", "ferrotx"], cwd=ROOT)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    r = {}
    one = ["--coroutines", "1", "--client-nodes", "1"]
    bench("rpc", "rpc_latency", ["--coroutines", "1", "--batch", "1"], d, r)
    bench("rpc", "rpc_default", [], d, r)
    bench("kv", "reads", ["--write-share", "0"], d, r)
    # One-key read-modify-writes as optimistic transactions (issue 3's targets: FaRM's
    # minimum of RPCs), then shipped to their key's primary (the default since issue 14).
    bench("kv", "rmw", ["--write-share", "1", "--no-ship"], d, r)
    bench("kv", "rmw_shipped", ["--write-share", "1"], d, r)
    bench("kv", "reads_one_client", ["--write-share", "0"] + one, d, r)
    bench("kv", "rmw_one_client", ["--write-share", "1", "--no-ship"] + one, d, r)
    # The same on two node processes (a core each, like bench rpc's two processes): what
    # the third process sharing the two cores adds to each round trip.
    bench("kv", "reads_one_client_2_nodes", ["--write-share", "0", "--nodes", "2",
                                             "--replicas", "2"] + one, d, r)
    bench("kv", "4keys_half_written", ["--keys-per-txn", "4", "--write-share", "0.5"], d, r)
    bench("kv", "4keys_read_only", ["--keys-per-txn", "4", "--write-share", "0"], d, r)
    bench("kv", "rmw_zipf_0.99", ["--write-share", "1", "--zipf", "0.99", "--no-ship"], d, r)
    bench("kv", "rmw_zipf_0.99_shipped", ["--write-share", "1", "--zipf", "0.99"], d, r)
    bench("kv", "rmw_1KiB", ["--write-share", "1", "--value-bytes", "1024",
                             "--key-count", "100000", "--no-ship"], d, r)
    bench("bank", "bank", [], d, r)
    sweep = []
    if not args.no_sweep:
        for c in (1, 2, 4, 8, 20):
            sweep.append(bench("kv", "rmw_sweep_%d" % c, ["--write-share", "1", "--no-ship",
                                                          "--coroutines", str(c)], d, r))
    bench("rpc", "rpc_latency_after", ["--coroutines", "1", "--batch", "1"], d, r)

    rtt = r["rpc_latency"]["latency_us"]["p50"]
    rtt_after = r["rpc_latency_after"]["latency_us"]["p50"]
    targets = [
        ("single-key reads, uniform: txn/s", r["reads"]["throughput_per_s"], ">= 1,000,000"),
        ("one-key RMW (f = 2): commits/s", r["rmw"]["throughput_per_s"], ">= 150,000"),
        ("one-key RMW: RPCs per commit (minimum 3.33 on 3 nodes)",
         r["rmw"]["rpcs_per_commit"], "= 3.33"),
        ("single-key read p50, one client coroutine / bench rpc p50 (1 coroutine)",
         r["reads_one_client"]["latency_us"]["p50"] / rtt, "<= 1.3"),
        ("single-key reads that made an RPC (2 in 3): p50 / bench rpc p50",
         r["reads_one_client"]["remote_latency_us"]["p50"] / rtt, "(stricter reading)"),
        ("the same on 2 node processes (a core each): p50 / bench rpc p50",
         r["reads_one_client_2_nodes"]["remote_latency_us"]["p50"] / rtt, "(context)"),
        ("one-key RMW p50, one client coroutine / bench rpc p50 (1 coroutine)",
         r["rmw_one_client"]["latency_us"]["p50"] / rtt, "<= 4.5"),
        ("single-key read p50 / bench rpc p50, both at default load",
         r["reads"]["latency_us"]["p50"] / r["rpc_default"]["latency_us"]["p50"], "(context)"),
        ("one-key RMW p50 / bench rpc p50, both at default load",
         r["rmw"]["latency_us"]["p50"] / r["rpc_default"]["latency_us"]["p50"], "(context)"),
    ]
    out = {"started": started, "rpc_p50_us": rtt, "rpc_p50_us_after": rtt_after,
           "targets": [{"what": w, "measured": m, "goal": g} for w, m, g in targets],
           "runs": r}
    res = os.path.join(ROOT, "docs", "results")
    os.makedirs(res, exist_ok=True)
    with open(os.path.join(res, "kv.json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    img = os.path.join(ROOT, "docs", "img")
    os.makedirs(img, exist_ok=True)
    plotted = bool(sweep) and plot(sweep, os.path.join(img, "kv_rmw_sweep"))

    lines = ["# bench kv results", "",
             "Written by `python3 scripts/bench_kv.py --duration %s`, started %s, on the "
             "project's 2-core machine. 3 node processes, 1 worker thread each, 3 replicas "
             "(f = 2), UDP on loopback; 1,000,000 keys of 32 bytes unless noted. "
             "`bench rpc` p50 at one coroutine: %.1f us at the start, %.1f us at the end."
             % (d, started, rtt, rtt_after), "",
             "| target | measured | goal |", "| --- | --- | --- |"]
    for w, m, g in targets:
        lines.append("| %s | %s | %s |" % (w, "{:,.2f}".format(m) if m < 100 else "{:,.0f}".format(m), g))
    lines += ["", "| run | txn/s | txn per cpu-s | p50 us | p99 us | p99.9 us | p50 us, with RPCs "
              "| aborts | RPCs/txn | datagrams/txn | checks | command |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, rep in r.items():
        lat = rep["latency_us"]
        if name.startswith("rpc"):
            lines.append("| %s | %.0f rpc/s | %.0f | %.1f | %.1f | %.1f | | | | | | `%s` |"
                         % (name, rep["rpcs_per_s"], rep["rpcs_per_cpu_s"], lat["p50"],
                            lat["p99"], lat["p999"], rep["command"]))
        else:
            lines.append("| %s | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f%% | %.2f | %.2f | %s | `%s` |"
                         % (name, rep["throughput_per_s"], rep["throughput_per_cpu_s"],
                            lat["p50"], lat["p99"], lat["p999"],
                            rep["remote_latency_us"]["p50"], 100 * rep["abort_rate"],
                            rep["rpcs_per_commit"], rep["datagrams_per_commit"],
                            "ok" if rep["checks"]["ok"] else "FAILED", rep["command"]))
    if plotted:
        lines += ["", "![RMW latency against throughput](../img/kv_rmw_sweep.svg)"]
    with open(os.path.join(res, "kv.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
