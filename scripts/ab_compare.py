#!/usr/bin/env python3
"""Compares two ferrotx binaries on `bench tatp`, `bench kv` and `bench rpc`, alternating
runs in one session, and reports the median ratio (B / A) with the range of each.

Machines here are shared and noisy, so a change to the data path is judged by runs of the
old and the new build taken in turn (A, B, A, B, ...), never by figures from different
sessions. Writes the raw figures and the summary as JSON and Markdown.

Usage:
  python3 scripts/ab_compare.py --a OLD_BINARY --b NEW_BINARY [--runs 5] [--duration 5]
                                [--json PATH] [--md PATH] [--benches tatp,kv,rpc]
                                [--a-args=FLAGS] [--b-args=FLAGS]

A and B may be the same binary with other flags: `--a-args=--lease-ms 0` compares static
nodes (A) with nodes holding leases (B, the default).
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import tempfile
import time

# What each benchmark runs (the same flags for both binaries: defaults may differ between
# builds, so the scale is always given) and the figure compared.
BENCHES = {
    "tatp": (["bench", "tatp", "--subscribers-per-node", "200000"], "throughput_per_s"),
    "kv": (["bench", "kv", "--key-count", "1000000"], "throughput_per_s"),
    "rpc": (["bench", "rpc"], "rpcs_per_s"),
}

# The work done per CPU-second, which scheduling noise on shared cores moves less than
# throughput: a change that costs CPU shows here even when throughput hides it.
PER_CPU = {
    "tatp": "throughput_per_cpu_s",
    "kv": "throughput_per_cpu_s",
    "rpc": "rpcs_per_cpu_s",
}


def run_once(binary, bench, duration, extra=()):
    args, figure = BENCHES[bench]
    args = args + list(extra)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [binary] + args + ["--duration", str(duration), "--json", path]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(path) as f:
        report = json.load(f)
    os.unlink(path)
    return report[figure], report[PER_CPU[bench]]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--a", required=True, help="the build before")
    parser.add_argument("--b", required=True, help="the build after")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--benches", default="tatp,kv,rpc")
    parser.add_argument("--json")
    parser.add_argument("--a-args", default="", help="flags added to A's runs")
    parser.add_argument("--b-args", default="", help="flags added to B's runs")
    parser.add_argument("--md")
    args = parser.parse_args()

    results = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for bench in args.benches.split(","):
        a, b, a_cpu, b_cpu = [], [], [], []
        for i in range(args.runs):
            # Alternate which goes first, so drift during a pair favours neither.
            order = [("a", args.a, shlex.split(args.a_args)),
                     ("b", args.b, shlex.split(args.b_args))]
            if i % 2 == 1:
                order.reverse()
            for side, binary, extra in order:
                value, per_cpu = run_once(binary, bench, args.duration, extra)
                (a if side == "a" else b).append(value)
                (a_cpu if side == "a" else b_cpu).append(per_cpu)
                print("%-5s run %d %s: %.0f (%.0f per CPU-s)" % (bench, i + 1, side, value,
                                                                per_cpu), flush=True)
        ratios = [y / x for x, y in zip(a, b)]
        results[bench] = {
            "a": a,
            "b": b,
            "a_median": statistics.median(a),
            "b_median": statistics.median(b),
            "median_ratio": statistics.median(b) / statistics.median(a),
            "pair_ratios": ratios,
            "a_per_cpu": a_cpu,
            "b_per_cpu": b_cpu,
            "per_cpu_median_ratio": statistics.median(b_cpu) / statistics.median(a_cpu),
        }
        r = results[bench]
        print("%-5s A median %.0f (%.0f..%.0f), B median %.0f (%.0f..%.0f), B/A %.3f; "
              "per CPU-s B/A %.3f"
              % (bench, r["a_median"], min(a), max(a), r["b_median"], min(b), max(b),
                 r["median_ratio"], r["per_cpu_median_ratio"]), flush=True)

    report = {
        "date": started,
        "a": args.a,
        "b": args.b,
        "a_args": args.a_args,
        "b_args": args.b_args,
        "runs": args.runs,
        "duration_s": args.duration,
        "commands": {k: " ".join(v[0]) for k, v in BENCHES.items()},
        "results": results,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.md:
        with open(args.md, "w") as f:
            f.write("# A/B: %s %s against %s %s\n\n"
                    % (args.b, args.b_args, args.a, args.a_args))
            f.write("%s, %d alternating runs of %g s each, one session "
                    "(`python3 scripts/ab_compare.py --runs %d --duration %g`).\n\n"
                    % (started, args.runs, args.duration, args.runs, args.duration))
            f.write("| bench | figure | A median (range) | B median (range) | B / A "
                    "| per CPU-s B / A |\n")
            f.write("| --- | --- | ---: | ---: | ---: | ---: |\n")
            for bench, r in results.items():
                f.write("| `ferrotx %s` | %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | **%.3f** "
                        "| %.3f |\n"
                        % (" ".join(BENCHES[bench][0]), BENCHES[bench][1], r["a_median"],
                           min(r["a"]), max(r["a"]), r["b_median"], min(r["b"]),
                           max(r["b"]), r["median_ratio"], r["per_cpu_median_ratio"]))


if __name__ == "__main__":
    main()
