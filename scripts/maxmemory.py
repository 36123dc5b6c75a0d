#!/usr/bin/env python3
"""Fills a local cluster up to a memory limit through redis-py and reports how close the
nodes stop to it: keys written before -OOM, used_memory against maxmemory, and how the
nodes' resident memory grew against their own account (used_memory).

    python3 scripts/maxmemory.py [--ferrotx target/release/ferrotx] [--room-mb 100]
                                 [--value-bytes 1000] [--json PATH]

It starts `ferrotx cluster local` (3 nodes, 3 replicas: every node holds every key), sets
each node's maxmemory to what it uses plus --room-mb with CONFIG SET, writes keys in
pipelines of 100 through node 0 until a whole pipeline is refused with -OOM, reads INFO
memory on every node, deletes every key, waits until a write is accepted again, and
stops the cluster. Needs redis-py (Debian: python3-redis).
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "redis"))

import harness  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ferrotx", default=os.path.join(ROOT, "target", "release", "ferrotx"))
    parser.add_argument("--room-mb", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--json")
    args = parser.parse_args()
    import redis

    servers = harness.Servers(os.path.abspath(args.ferrotx))
    servers._start_cluster()
    try:
        clients = [redis.Redis(host="127.0.0.1", port=p) for p in servers.ferrotx_ports]
        pid = servers.cluster.proc.pid
        rss_before = harness.node_rss_bytes(pid)[0]
        limits = []
        for client in clients:
            used = client.info("memory")["used_memory"]
            limits.append(used + (args.room_mb << 20))
            client.config_set("maxmemory", limits[-1])
        value = b"v" * args.value_bytes
        written, started = 0, time.monotonic()
        while True:
            pipe = clients[0].pipeline(transaction=False)
            for i in range(written, written + 100):
                pipe.set(f"fill:{i}", value)
            replies = pipe.execute(raise_on_error=False)
            accepted = sum(1 for r in replies if r is True)
            written += accepted
            if accepted == 0:
                break
        seconds = time.monotonic() - started
        infos = [c.info("memory") for c in clients]
        rss_after = harness.node_rss_bytes(pid)[0]
        for i in range(0, written, 1000):
            clients[0].delete(*[f"fill:{k}" for k in range(i, min(i + 1000, written))])
        deleted_at = time.monotonic()
        while True:
            try:
                clients[0].set("fill:after", value)
                break
            except redis.exceptions.ResponseError:
                time.sleep(0.02)
        again_s = time.monotonic() - deleted_at
        report = {
            "room_bytes": args.room_mb << 20,
            "value_bytes": args.value_bytes,
            "keys_written": written,
            "fill_seconds": seconds,
            "nodes": [
                {
                    "maxmemory": limits[n],
                    "used_memory": infos[n]["used_memory"],
                    "over_limit_bytes": infos[n]["used_memory"] - limits[n],
                    "used_memory_dataset": infos[n]["used_memory_dataset"],
                    "used_memory_rss": infos[n]["used_memory_rss"],
                }
                for n in range(len(clients))
            ],
            "rss_growth_bytes_all_nodes": rss_after - rss_before,
            "writes_again_after_deletes_s": again_s,
        }
        print(f"{written} keys of {args.value_bytes} B written in {seconds:.1f} s into "
              f"{args.room_mb} MB of room per node ({(args.room_mb << 20) / written:.0f} B "
              "per key per node, all copies)")
        for n, node in enumerate(report["nodes"]):
            print(f"node {n}: used_memory {node['used_memory']:,} of maxmemory "
                  f"{node['maxmemory']:,} ({node['over_limit_bytes']:+,} B), rss "
                  f"{node['used_memory_rss']:,}")
        print(f"nodes' resident memory grew {report['rss_growth_bytes_all_nodes'] / 1e6:.1f} MB "
              f"for {3 * args.room_mb} MB of room counted; writes accepted again "
              f"{again_s * 1000:.0f} ms after the deletes")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
