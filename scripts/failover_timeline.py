#!/usr/bin/env python3
"""FaRM's failure timelines (its Figures 9 and 10), repeated: `ferrotx bench tatp --kill`.

Each run starts a fresh cluster of node processes (4 nodes, 3 replicas, 250,000 TATP
subscribers per node by default), runs TATP on every node, kills one node with SIGKILL
in the middle of the measured window (nodes 1, 2, 3 in turn; node 0 starts as the CM
and is not killed, as in FaRM's Figure 9; `--kill-cm` kills the CM instead, as in its
Figure 10), and records the surviving nodes' commits in 1 ms buckets with the recovery's
events. Each run's JSON and plot go to a work directory; this script then writes

  OUT.json   every run's figures (without their buckets), their median and maximum;
  OUT.md     a table of them, and the plot of the median run;
  OUT.svg, OUT.png   the timeline of the median run (by time back to 80%), and
  OUT-zoom.svg, OUT-zoom.png   the same from 200 ms before the kill to 500 ms after.

It fails (exit 1) if any run failed the bench's checks (every copy equal, no error), or
never got back to 80%, or never back to full strength.

    python3 scripts/failover_timeline.py --ferrotx target/release/ferrotx --runs 20 \
        --out docs/results/failover
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

FIGURES = [
    # (key in the timeline, label, format)
    ("time_to_80pct_ms", "back to 80% (ms)", "{:.1f}"),
    ("suspected_after_kill_ms", "suspected (ms)", "{:.1f}"),
    ("new_view_after_kill_ms", "new view (ms)", "{:.1f}"),
    ("recovered_after_kill_ms", "recovered (ms)", "{:.1f}"),
    ("rereplicated_s", "re-replicated (s)", "{:.2f}"),
    ("rereplicated_mb_per_s", "copy (MB/s)", "{:.1f}"),
    ("during_rereplication_share", "throughput while copying", "{:.0%}"),
    ("lowest_100ms_share", "lowest 100 ms while copying", "{:.0%}"),
]


def one_run(args, index, work):
    if args.kill_cm:
        kill = ["--kill-cm", str(args.kill_at)]
        what = "the CM"
    else:
        node = 1 + (index % (args.nodes - 1))
        kill = ["--kill", f"{node}@{args.kill_at}"]
        what = f"node {node}"
    stem = os.path.join(work, f"run{index + 1}")
    command = [
        args.ferrotx, "bench", "tatp",
        "--nodes", str(args.nodes),
        "--replicas", str(args.replicas),
        "--subscribers-per-node", str(args.subscribers_per_node),
        "--lease-ms", str(args.lease_ms),
        "--duration", str(args.duration),
        "--seed", str(index + 1),
        "--json", stem + ".json",
        "--timeline", stem,
    ] + kill
    started = time.time()
    if not args.summarize:
        out = subprocess.run(command, capture_output=True, text=True)
        with open(stem + ".log", "w") as f:
            f.write(" ".join(command) + "\n" + out.stdout + out.stderr)
        if not os.path.exists(stem + ".json"):
            sys.exit(f"run {index + 1} ({what}) wrote no report (exit {out.returncode}); "
                     f"see {stem}.log")
    with open(stem + ".json") as f:
        report = json.load(f)
    t = report["timeline"]
    after = lambda key: None if t.get(key) is None else t[key] - t["kill_ms"]
    run = {
        "run": index + 1,
        "killed": what,
        "killed_nodes": t["killed"],
        "seconds": round(time.time() - started, 1),
        "checks_ok": report["checks"]["ok"],
        # A false positive before the kill (while loading) left another cluster than the
        # one meant: the node to kill may be gone already, and the kill measures nothing.
        "reconfigured_before_kill": any(
            v["id"] > 1 and v["seen_ms"] < t["kill_ms"]
            for e in t["events"] for v in e["views"]),
        "replicas_equal": report["checks"]["replicas_equal"],
        "before_per_s": t["before_per_s"],
        "time_to_80pct_ms": t["time_to_80pct_ms"],
        "lowest_share": t["lowest_share"],
        "suspected_after_kill_ms": after("suspected_ms"),
        "new_view_after_kill_ms": after("new_view_committed_ms"),
        "recovered_after_kill_ms": after("recovered_ms"),
        "rereplicated_after_kill_ms": after("rereplicated_ms"),
        "rereplicated_s": t["rereplicated_s"],
        "rereplicated_bytes": t["rereplicated_bytes"],
        "rereplicated_objects": t["rereplicated_objects"],
        "rereplicated_mb_per_s": None if t["rereplicated_bytes_per_s"] is None
        else t["rereplicated_bytes_per_s"] / 1e6,
        "during_rereplication_share": t["during_rereplication_share"],
        "lowest_100ms_share": t["during_rereplication_lowest_100ms_share"],
        "unavailable": report["checks"].get("unavailable", 0),
        # Lease expirations with no node killed: while loading, and in all.
        "expirations_while_loading": (report.get("leases") or {}).get(
            "expirations_before_workload"),
        "expirations": (report.get("leases") or {}).get("expirations"),
        "max_wake_late_ms": (report.get("leases") or {}).get("max_wake_late_us", 0) / 1e3,
        "unknown": report["checks"]["unknown"],
        "stem": stem,
    }
    print(f"run {index + 1:>2} ({what}): back to 80% "
          f"{fmt(run['time_to_80pct_ms'], '{:.1f}')} ms, new view "
          f"{fmt(run['new_view_after_kill_ms'], '{:.1f}')} ms, recovered "
          f"{fmt(run['recovered_after_kill_ms'], '{:.1f}')} ms, re-replicated "
          f"{fmt(run['rereplicated_s'], '{:.2f}')} s "
          f"({fmt(run['rereplicated_mb_per_s'], '{:.1f}')} MB/s, throughput meanwhile "
          f"{fmt(run['during_rereplication_share'], '{:.0%}')}), checks "
          f"{'ok' if run['checks_ok'] else 'FAILED'}", flush=True)
    return run


def check(run):
    if run.get("reconfigured_before_kill"):
        return "reconfigured before the kill" + ("" if run["checks_ok"] else ", FAILED")
    return "ok" if run["checks_ok"] else "FAILED"


def fmt(value, form):
    return "-" if value is None else form.format(value)


def summary(runs, key):
    values = [r[key] for r in runs if r[key] is not None]
    if not values:
        return {"median": None, "max": None, "min": None, "missing": len(runs)}
    return {
        "median": statistics.median(values),
        "max": max(values),
        "min": min(values),
        "missing": len(runs) - len(values),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ferrotx", default="target/release/ferrotx")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--subscribers-per-node", type=int, default=250_000)
    p.add_argument("--lease-ms", type=int, default=10)
    p.add_argument("--duration", type=float, default=4.0,
                   help="measured seconds of each run (the kill comes at --kill-at)")
    p.add_argument("--kill-at", type=float, default=2.0)
    p.add_argument("--kill-cm", action="store_true",
                   help="kill the CM of the moment (FaRM's Figure 10) instead of nodes 1..")
    p.add_argument("--out", default="docs/results/failover",
                   help="writes OUT.json, OUT.md, OUT.svg and OUT.png")
    p.add_argument("--work", help="keep every run's report, log and plot here")
    p.add_argument("--summarize", action="store_true",
                   help="run nothing: summarize the --runs runs already in --work")
    args = p.parse_args()
    if args.nodes < 2:
        sys.exit("--nodes must be at least 2")
    work = args.work or tempfile.mkdtemp(prefix="ferrotx-timelines-")
    os.makedirs(work, exist_ok=True)
    version = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
    runs = [one_run(args, i, work) for i in range(args.runs)]

    # Figures of the runs whose checks passed and whose cluster was still the one started
    # at the kill (a false positive before it leaves nothing to measure); every run is
    # in the table.
    measured = [r for r in runs if r["checks_ok"] and not r.get("reconfigured_before_kill")]
    summaries = {key: summary(measured, key) for key, _, _ in FIGURES}
    summaries["lowest_share"] = summary(measured, "lowest_share")
    # The median run by time back to 80% (runs that never came back last).
    # Among the runs whose checks passed, if any.
    good = measured or runs
    ranked = sorted(good, key=lambda r: (r["time_to_80pct_ms"] is None,
                                         r["time_to_80pct_ms"] or 0))
    median_run = ranked[(len(ranked) - 1) // 2]
    for suffix in ("", "-zoom"):
        for ext in ("svg", "png"):
            shutil.copyfile(f"{median_run['stem']}{suffix}.{ext}",
                            f"{args.out}{suffix}.{ext}")
    failed = [r["run"] for r in runs
              if not r["checks_ok"] or r["time_to_80pct_ms"] is None
              or r["rereplicated_s"] is None]
    result = {
        # The environment ferrotx reads (FERROTX_THP=0: no transparent huge pages).
        "command": " ".join(
            [f"FERROTX_THP={os.environ['FERROTX_THP']}"] * ("FERROTX_THP" in os.environ)
            + sys.argv),
        "commit": version,
        "nodes": args.nodes,
        "replicas": args.replicas,
        "subscribers_per_node": args.subscribers_per_node,
        "lease_ms": args.lease_ms,
        "kill": "the CM" if args.kill_cm else "nodes 1.. in turn",
        "runs": [{k: v for k, v in r.items() if k not in ("stem", "seconds")}
                 for r in runs],
        "summary": summaries,
        "median_run": median_run["run"],
        "failed_runs": failed,
    }
    with open(f"{args.out}.json", "w") as f:
        json.dump(result, f, indent=1)
    name = os.path.basename(args.out)
    lines = [
        "# Failure timelines: TATP, a node killed",
        "",
        f"`{result['command']}` at commit `{version}`: {args.runs} runs, each a fresh "
        f"cluster of {args.nodes} node processes, {args.replicas} replicas, "
        f"{args.subscribers_per_node:,} subscribers per node, leases of {args.lease_ms} "
        f"ms, {result['kill']} killed with SIGKILL {args.kill_at} s into the window. "
        "Times are from the kill.",
        "",
        f"![timeline of the median run]({name}.svg)",
        "",
        f"![the kill, closer]({name}-zoom.svg)",
        "",
        f"The plot is run {median_run['run']} (the median by time back to 80%). The figures "
        f"below are of the {len(measured)} runs of {len(runs)} whose checks passed with "
        f"the cluster unchanged until the kill (no false positive while loading).",
        "",
        "| figure | median | max | min |",
        "|---|---|---|---|",
    ]
    for key, label, form in FIGURES:
        s = summaries[key]
        lines.append(f"| {label} | {fmt(s['median'], form)} | {fmt(s['max'], form)} | "
                     f"{fmt(s['min'], form)} |")
    lines += [
        "",
        "| run | killed | back to 80% (ms) | lowest | suspected | new view | recovered "
        "| re-replicated (s) | MB/s | throughput while copying | lowest 100 ms | checks "
        "| lease expirations while loading | lease thread late (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['run']} | {r['killed']} | {fmt(r['time_to_80pct_ms'], '{:.1f}')} "
            f"| {fmt(r['lowest_share'], '{:.0%}')} "
            f"| {fmt(r['suspected_after_kill_ms'], '{:.1f}')} "
            f"| {fmt(r['new_view_after_kill_ms'], '{:.1f}')} "
            f"| {fmt(r['recovered_after_kill_ms'], '{:.1f}')} "
            f"| {fmt(r['rereplicated_s'], '{:.2f}')} "
            f"| {fmt(r['rereplicated_mb_per_s'], '{:.1f}')} "
            f"| {fmt(r['during_rereplication_share'], '{:.0%}')} "
            f"| {fmt(r['lowest_100ms_share'], '{:.0%}')} "
            f"| {check(r)} "
            f"| {fmt(r['expirations_while_loading'], '{}')} "
            f"| {fmt(r['max_wake_late_ms'], '{:.0f}')} |")
    lines.append("")
    with open(f"{args.out}.md", "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}.json, .md, .svg, .png (median run {median_run['run']}); "
          f"runs in {work}")
    if failed:
        sys.exit(f"runs {failed} failed their checks, or never got back to 80% or to full "
                 "strength (see the table)")


if __name__ == "__main__":
    main()
