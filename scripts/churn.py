#!/usr/bin/env python3
"""Distinct keys set and deleted through redis-py, and the nodes' memory meanwhile.

Starts a local cluster (`ferrotx cluster local`: 3 node processes, 3 replicas), then one
redis-py client thread per node sets and deletes distinct keys (`churn:T:I`, a 24-byte
value), in pipelines of --batch SETs and DELs, --keys keys in all. It samples the node
processes' resident memory (VmRSS, summed) after the first --warmup keys and at every
tenth of the run, and once more --settle seconds after the end (reclamation runs behind
the deletes). The target (issue 16): memory at the end within 10% of where it was after
the warm-up. Writes --json and --md.

Usage:
  python3 scripts/churn.py [--ferrotx target/release/ferrotx] [--keys 10000000]
      [--warmup 100000] [--batch 500] [--json PATH] [--md PATH]
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "redis"))

import harness  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ferrotx", default=os.path.join(ROOT, "target", "release", "ferrotx"))
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--warmup", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--json", default=os.path.join(ROOT, "docs", "results", "churn.json"))
    parser.add_argument("--md", default=os.path.join(ROOT, "docs", "results", "churn.md"))
    args = parser.parse_args()
    try:
        import redis  # noqa: E402
    except ImportError:
        # A python3 first on PATH without redis-py: Debian's has it (python3-redis).
        if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
        raise

    servers = harness.Servers(os.path.abspath(args.ferrotx))
    samples = []
    started = time.monotonic()
    try:
        servers._start_cluster()
        pid = servers.cluster.proc.pid
        ports = servers.ferrotx_ports
        threads = len(ports)
        per_thread = args.keys // threads
        done = [0] * threads
        errors = []
        lock = threading.Lock()

        def sample(label):
            rss, nodes = harness.node_rss_bytes(pid)
            with lock:
                samples.append({"after_keys": sum(done), "label": label, "rss_bytes": rss,
                                "nodes": nodes, "at_s": round(time.monotonic() - started, 1)})
            print(f"  {label}: {sum(done):>10} keys, node memory {rss / 1e6:8.1f} MB",
                  flush=True)

        warm = threading.Event()

        def churn(index):
            try:
                client = redis.Redis(host="127.0.0.1", port=ports[index], socket_timeout=60)
                value = "v" * 24
                for start in range(0, per_thread, args.batch):
                    pipe = client.pipeline(transaction=False)
                    end = min(start + args.batch, per_thread)
                    for i in range(start, end):
                        key = f"churn:{index}:{i}"
                        pipe.set(key, value)
                        pipe.delete(key)
                    replies = pipe.execute()
                    if replies != [True, 1] * (end - start):
                        raise RuntimeError(f"unexpected replies near key {start}")
                    done[index] = end
                    if index == 0 and not warm.is_set() and sum(done) >= args.warmup:
                        warm.set()
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)
                warm.set()

        workers = [threading.Thread(target=churn, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        warm.wait()
        sample("warm")
        next_tenth = 1
        while any(worker.is_alive() for worker in workers):
            time.sleep(0.5)
            if sum(done) >= next_tenth * args.keys // 10 and next_tenth < 10:
                sample(f"{next_tenth}0%")
                next_tenth += 1
        for worker in workers:
            worker.join()
        if errors:
            raise errors[0]
        sample("end")
        time.sleep(args.settle)
        sample("settled")
        elapsed = time.monotonic() - started
    finally:
        servers.stop()
    warm_rss = samples[0]["rss_bytes"]
    final = samples[-1]["rss_bytes"]
    ratio = final / warm_rss
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python3 scripts/churn.py " + " ".join(sys.argv[1:]),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform()},
        "ferrotx_commit": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True).stdout.strip(),
        "keys": args.keys,
        "seconds": round(elapsed, 1),
        "samples": samples,
        "warm_rss_bytes": warm_rss,
        "final_rss_bytes": final,
        "final_over_warm": round(ratio, 3),
        "target": "final within 10% of warm",
        "met": ratio <= 1.10,
    }
    with open(args.json, "w", encoding="utf-8") as file:
        json.dump(report, file, indent=1)
    lines = [
        "# Churn: distinct keys set and deleted",
        "",
        f"`{report['command']}` ({report['date']}, commit {report['ferrotx_commit']}, "
        f"{report['machine']['cores']} cores): {args.keys:,} distinct keys, each SET then "
        f"DEL through redis-py (one client thread per node, pipelines of {args.batch}), "
        f"in {elapsed:.0f} s.",
        "",
        "| after | keys | node memory (VmRSS, 3 nodes) |",
        "|---|---|---|",
    ]
    for s in samples:
        lines.append(f"| {s['label']} | {s['after_keys']:,} | {s['rss_bytes'] / 1e6:.1f} MB |")
    lines += ["", f"At the end {ratio:.3f}x the memory after the warm-up "
              f"(target: at most 1.10x): {'met' if report['met'] else 'not met'}.", ""]
    with open(args.md, "w", encoding="utf-8") as file:
        file.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if report["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
