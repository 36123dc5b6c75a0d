#!/usr/bin/env python3
"""Two hot keys on two primaries, incremented together from every node of a ferrotx cluster.

Issue 14 asks that a transaction that keeps losing eventually wins, whichever node
coordinates it. A MULTI block over keys of one primary is shipped there and served in
order (scripts/hot_incr.py measures that); this measures the other case, the optimistic
transaction over several primaries, which ages and reservations make fair
(docs/transactions.md, "Fairness").

What it does, per run (--runs, each on a fresh cluster):

1. Starts `ferrotx cluster local` (3 node processes, 3 replicas) with
   tests/redis/harness.py.
2. Finds two keys whose primaries differ: a MULTI block writing keys of one primary is
   shipped (INFO's `ship_calls` grows), one over two primaries is not.
3. Starts one client process per node, each with --clients threads, each with its own
   connection to its node, and runs for --duration seconds: MULTI, INCR a, INCR b, EXEC,
   again and again. Every reply is recorded: its latency, and whether it was an error.
4. Checks atomicity: both keys end at the same value, equal to the EXECs that succeeded.
5. Reports per node: blocks committed, its share, error replies (-TRYAGAIN after 2 s of
   retries), and latency percentiles (p50, p99, max) of the committed blocks; and
   INFO's `transactions_aborted` per node.

Usage:
  python3 scripts/hot_pair.py [--bin target/release/ferrotx] [--clients 6]
      [--duration 10] [--runs 1] [--json PATH]
"""

import argparse
import json
import multiprocessing
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "redis"))

import harness  # noqa: E402
from hot_incr import info  # noqa: E402  (INFO's numeric fields)

NODES = 3


def log(message):
    print(message, flush=True)


def number(port, field):
    return info(port).get(field, 0)


def find_pair(port):
    """Two keys whose primaries differ: a MULTI block over them is not shipped."""
    import redis
    client = redis.Redis(host="127.0.0.1", port=port)
    first = "pair:a"
    for i in range(200):
        other = f"pair:b{i}"
        before = number(port, "ship_calls")
        pipe = client.pipeline(transaction=True)
        pipe.incr(first)
        pipe.incr(other)
        pipe.execute()
        # Workers publish their counters every few loop iterations: let them.
        time.sleep(0.1)
        if number(port, "ship_calls") == before:
            client.close()
            return first, other
    raise harness.Fatal("no key on another primary than pair:a in 200 tries")


def client_process(port, keys, clients, duration, queue):
    """`clients` threads on one node for `duration` s; puts (latencies, errors) on `queue`."""
    import redis
    latencies, errors, first_errors = [], 0, []
    lock = threading.Lock()
    start = time.monotonic()

    def run():
        nonlocal errors
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
        mine = []
        while time.monotonic() - start < duration:
            t0 = time.monotonic()
            try:
                pipe = client.pipeline(transaction=True)
                pipe.incr(keys[0])
                pipe.incr(keys[1])
                pipe.execute()
                mine.append(time.monotonic() - t0)
            except redis.RedisError as error:
                with lock:
                    errors += 1
                    if len(first_errors) < 3:
                        first_errors.append(str(error)[:200])
        client.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put((latencies, errors, first_errors))


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def measure(binary, args):
    servers = harness.Servers(binary, nodes=NODES, replicas=3)
    try:
        servers._start_cluster()
        ports = servers.ferrotx_ports
        keys = find_pair(ports[0])
        log(f"  cluster on Redis ports {ports}; keys {keys[0]} and {keys[1]} on two primaries")
        import redis
        start_values = [int(redis.Redis(port=ports[0]).get(k) or 0) for k in keys]
        aborted_before = [number(p, "transactions_aborted") for p in ports]
        queues = [multiprocessing.Queue() for _ in ports]
        procs = [multiprocessing.Process(target=client_process,
                                         args=(port, keys, args.clients, args.duration, q))
                 for port, q in zip(ports, queues)]
        for p in procs:
            p.start()
        results = [q.get(timeout=args.duration + 120) for q in queues]
        for p in procs:
            p.join()
        time.sleep(0.5)
        servers.check_alive()
        values = [int(redis.Redis(port=ports[1]).get(k) or 0) - s
                  for k, s in zip(keys, start_values)]
        aborted = [number(p, "transactions_aborted") - b for p, b in zip(ports, aborted_before)]
    finally:
        servers.stop()
    nodes = []
    for node, ((latencies, errors, first_errors), ab) in enumerate(zip(results, aborted)):
        s = sorted(latencies)
        nodes.append({
            "node": node, "committed": len(s), "errors": errors,
            "first_errors": first_errors, "aborted_attempts": ab,
            "p50_ms": percentile(s, 0.50) and percentile(s, 0.50) * 1e3,
            "p99_ms": percentile(s, 0.99) and percentile(s, 0.99) * 1e3,
            "max_ms": s[-1] * 1e3 if s else None,
        })
    total = sum(n["committed"] for n in nodes)
    for n in nodes:
        n["share"] = n["committed"] / max(total, 1)
    if values[0] != values[1] or values[0] < total:
        raise harness.Fatal(f"not atomic: the keys went up by {values} but {total} EXECs "
                            "succeeded")
    all_latencies = sorted(x for r in results for x in r[0])
    return {
        "keys": list(keys), "committed": total, "per_s": total / args.duration,
        "key_increase": values[0],
        "errors": sum(n["errors"] for n in nodes),
        "p99_ms": percentile(all_latencies, 0.99) * 1e3 if all_latencies else None,
        "max_ms": all_latencies[-1] * 1e3 if all_latencies else None,
        "nodes": nodes,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "ferrotx"))
    parser.add_argument("--clients", type=int, default=6, help="client threads per node")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        log(f"run {i + 1} of {args.runs}: {args.bin}")
        run = measure(args.bin, args)
        runs.append(run)
        log(f"  {run['committed']:,} blocks ({run['per_s']:,.0f}/s), {run['errors']} errors, "
            f"p99 {run['p99_ms']:.1f} ms, max {run['max_ms']:.1f} ms; keys +{run['key_increase']:,}")
        for n in run["nodes"]:
            log(f"    node {n['node']}: {n['committed']:,} ({n['share']:.1%}), "
                f"{n['errors']} errors, {n['aborted_attempts']:,} aborted attempts, "
                f"p50 {n['p50_ms'] or 0:.2f} ms, p99 {n['p99_ms'] or 0:.1f} ms, "
                f"max {n['max_ms'] or 0:.1f} ms"
                + (f"; first error: {n['first_errors'][0]}" if n["first_errors"] else ""))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"bin": args.bin, "clients_per_node": args.clients,
                       "duration_s": args.duration, "runs": runs}, out, indent=1)


if __name__ == "__main__":
    try:
        main()
    except harness.Fatal as error:
        print(f"hot_pair: {error}", file=sys.stderr)
        sys.exit(1)
