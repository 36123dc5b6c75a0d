#!/usr/bin/env python3
"""Suspicion and reconfiguration after a kill -9, over real node processes.

Each round starts a fresh `ferrotx cluster local` (3 nodes, 3 replicas) with the given
lease, waits until its first view is committed, kills one node at random (the CM or
another; each node in turn) with SIGKILL, and reads the nodes' membership log (tracing, UTC timestamps) for:

  detect_ms       from the kill to the first suspicion of the dead node (the CM's, or a
                  backup CM's when the CM died);
  reconfigure_ms  from the kill to the CM's commit of the configuration without it.

It prints a table and writes JSON (median and maximum of each) with --json.

    python3 scripts/kill_timing.py --ferrotx target/release/ferrotx --kills 20 \
        --lease-ms 100 --json docs/results/kill_timing_100ms.json
"""

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

LINE = re.compile(r"^(\S+Z)\s+\w+\s+\S+: (.*)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_log(path):
    events = []
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(ANSI.sub("", raw.strip()))
            if not m:
                continue
            ts = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
            events.append((ts.timestamp(), m.group(2)))
    return events


def status(ferrotx, config):
    out = subprocess.run([ferrotx, "status", "--json", "--config", config],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        return None


def one_round(args, index):
    work = tempfile.mkdtemp(prefix="ferrotx-kill-")
    config = os.path.join(work, "c.toml")
    log = os.path.join(work, "nodes.log")
    base = args.port_base + (index % 4) * 32
    with open(log, "w") as err:
        cluster = subprocess.Popen(
            [args.ferrotx, "cluster", "local", "--nodes", "3", "--replicas", "3",
             "--lease-ms", str(args.lease_ms), "--port-base", str(base),
             "--resp-port-base", str(base + 16), "--config-out", config],
            stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        pids = {}
        for line in cluster.stdout:
            m = re.search(r"pid\s+(\d+)\s+node (\d+) ", line)
            if m:
                pids[int(m.group(2))] = int(m.group(1))
            if "Ctrl-C stops the cluster" in line:
                break
        deadline = time.time() + 30
        view = None
        while time.time() < deadline:
            view = status(args.ferrotx, config)
            if view and len(view["members"]) == 3 and all(m["alive"] for m in view["members"]):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"round {index}: the cluster never formed")
        time.sleep(args.settle_s)
        # Each node in turn: the CM (node 0 of a new cluster) every third kill.
        victim = (index + args.seed) % 3
        was_cm = victim == view["cm"]
        t_kill = time.time()
        os.kill(pids[victim], signal.SIGKILL)
        deadline = time.time() + max(30, 20 * args.lease_ms / 1000)
        while time.time() < deadline:
            s = status(args.ferrotx, config)
            if s and all(m["node"] != victim for m in s["members"]) and s["configuration"] > view["configuration"]:
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"round {index}: no configuration without node {victim}")
        time.sleep(0.2)
        new_id = s["configuration"]
        events = [(t, text) for t, text in parse_log(log) if t >= t_kill - 0.002]
        suspect = next((t for t, text in events
                        if "suspects a member" in text or "lease at the CM ran out" in text
                        or "probing the members" in text), None)
        commit = next((t for t, text in events
                       if "configuration committed (CM)" in text and f"view={new_id}" in text), None)
        if suspect is None or commit is None:
            raise RuntimeError(f"round {index}: log lacks suspicion or commit ({log})")
        return {
            "victim": victim,
            "was_cm": was_cm,
            "detect_ms": max(0.0, (suspect - t_kill) * 1000),
            "reconfigure_ms": max(0.0, (commit - t_kill) * 1000),
        }
    finally:
        cluster.send_signal(signal.SIGINT)
        try:
            cluster.wait(timeout=15)
        except subprocess.TimeoutExpired:
            cluster.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ferrotx", default="target/release/ferrotx")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--lease-ms", type=int, default=1000)
    p.add_argument("--port-base", type=int, default=23000)
    p.add_argument("--settle-s", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json")
    args = p.parse_args()
    rounds = []
    for i in range(args.kills):
        r = one_round(args, i)
        rounds.append(r)
        print(f"kill {i + 1:>2}: node {r['victim']}{' (CM)' if r['was_cm'] else '     '} "
              f"detect {r['detect_ms']:8.1f} ms  reconfigured {r['reconfigure_ms']:8.1f} ms",
              flush=True)
    summary = {}
    for key in ("detect_ms", "reconfigure_ms"):
        values = [r[key] for r in rounds]
        summary[key] = {"median": statistics.median(values), "max": max(values)}
    within = sum(1 for r in rounds if r["reconfigure_ms"] <= 2 * args.lease_ms)
    report = {"lease_ms": args.lease_ms, "kills": len(rounds), **summary,
              "within_two_leases": within, "rounds": rounds}
    print(f"lease {args.lease_ms} ms, {len(rounds)} kills: detect median "
          f"{summary['detect_ms']['median']:.1f} max {summary['detect_ms']['max']:.1f} ms; "
          f"reconfigured median {summary['reconfigure_ms']['median']:.1f} max "
          f"{summary['reconfigure_ms']['max']:.1f} ms; within two leases: {within}/{len(rounds)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
