#!/usr/bin/env python3
"""redis-benchmark against a local ferrotx cluster and against redis-server, in one run.

What it does, in order:

1. Builds the release binary (`cargo build --release -p ferrotx`) unless --bin is given.
2. Starts a private redis-server (loopback, a free port, `--save '' --appendonly no
   --databases 1`, in a temporary directory) and a ferrotx local cluster (`ferrotx
   cluster local`: 3 node processes, 3 replicas of every partition, 1 worker thread
   each, on free ports), with tests/redis/harness.py.
3. For each pipeline depth (`-P 1`, i.e. none, and `-P 16`) and each test of --tests
   (GET, SET, INCR, MSET of 10 keys), runs redis-benchmark with `-c 50 -r KEYSPACE`:
   against redis-server; against node 0 of the cluster; and (unless --no-spread) as
   three redis-benchmark processes at once, one per node, with the 50 clients split
   17/17/16, all their requests over the longest one's time. Each measurement is
   preceded by a short calibration run that sets -n so that it lasts about --duration
   seconds (rounded to whole pipelines per process, see whole_pipelines). The servers
   alternate within each test, so drift in the machine's load hits both alike.
4. Reads redis-benchmark's `--csv` lines (requests/s, average, p50, p95, p99 latency),
   and counts the errors it printed ("Error from server").
5. Checks the data: the `counter:*` keys INCR wrote must add up to every INCR request
   sent to that server (each INCR is one committed transaction in ferrotx).
6. Prints one table, and writes --json and --md (docs/results/redis.{json,md} by
   default) with every figure, the command line and the machine.
7. Stops everything, also on errors, Ctrl-C and SIGTERM.

redis-benchmark without -r sends every request of a test to one key; -r spreads them over
KEYSPACE keys (--keyspace 0 leaves -r out).

Usage:
  python3 scripts/redis_compare.py [--bin target/release/ferrotx] [--duration 6]
      [--tests get,set,incr,mset] [--clients 50] [--keyspace 100000] [--no-spread]
      [--resp-pipeline-max N] [--json PATH] [--md PATH]
"""

import argparse
import csv
import io
import json
import os
import platform
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "redis"))

import harness  # noqa: E402

TARGETS = {"GET": 0.50, "SET": 0.25}


def log(message):
    print(message, flush=True)


class Stop(Exception):
    pass


def on_sigterm(signum, frame):
    raise Stop()


def parse_csv(text):
    """redis-benchmark --csv output: {test name: {rps, avg, p50, p95, p99, max}}."""
    rows = {}
    reader = csv.reader(io.StringIO(text))
    header = None
    for row in reader:
        if not row:
            continue
        if row[0] == "test":
            header = row
            continue
        if header is None:
            continue
        values = dict(zip(header, row))
        rows[values["test"]] = {
            "rps": float(values["rps"]),
            "avg_ms": float(values["avg_latency_ms"]),
            "p50_ms": float(values["p50_latency_ms"]),
            "p95_ms": float(values["p95_latency_ms"]),
            "p99_ms": float(values["p99_latency_ms"]),
            "max_ms": float(values["max_latency_ms"]),
        }
    return rows


def benchmark_argv(port, test, clients, requests, pipeline, keyspace):
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", test,
            "-c", str(clients), "-n", str(requests), "--csv"]
    if pipeline > 1:
        argv += ["-P", str(pipeline)]
    if keyspace:
        argv += ["-r", str(keyspace)]
    return argv


def run_benchmarks(ports, test, clients, requests, pipeline, keyspace):
    """Runs one redis-benchmark per port at once (clients and requests split among
    them); returns (summed result, errors, wall seconds, per-process results)."""
    count = len(ports)
    procs = []
    started = time.monotonic()
    for i, port in enumerate(ports):
        share_clients = clients // count + (1 if i < clients % count else 0)
        share_requests = requests // count + (1 if i < requests % count else 0)
        argv = benchmark_argv(port, test, share_clients, share_requests, pipeline, keyspace)
        procs.append((share_requests, subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)))
    results, errors = [], 0
    for share, proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise harness.Fatal(f"redis-benchmark failed ({proc.returncode}): "
                                f"{err.decode(errors='replace')[-500:]}")
        errors += err.count(b"Error from server")
        rows = parse_csv(out.decode())
        if len(rows) != 1:
            raise harness.Fatal(f"unexpected redis-benchmark output: {out[:500]!r}")
        (name, row), = rows.items()
        row["requests"] = share
        results.append((name, row))
    wall = time.monotonic() - started
    name = results[0][0]
    rows = [row for _, row in results]
    total = sum(row["requests"] for row in rows)
    # The processes ran at once: their requests over the longest one's time.
    longest = max(row["requests"] / row["rps"] for row in rows)
    summed = {
        "rps": total / longest,
        # Latencies: request-weighted means of each process's figure.
        **{key: sum(row[key] * row["requests"] for row in rows) / total
           for key in ("avg_ms", "p50_ms", "p95_ms", "p99_ms")},
        "max_ms": max(row["max_ms"] for row in rows),
        "requests": total,
    }
    return name, summed, errors, wall, rows


def whole_pipelines(requests, pipeline, processes):
    """`requests` rounded up so that each process's share is a whole number of
    pipelines: redis-benchmark sends whole pipelines of -P requests, so with -n not a
    multiple of -P it sends (and the server may run) up to -P - 1 more than -n, and the
    INCR check could not be exact."""
    unit = pipeline * processes
    return -(-requests // unit) * unit


def measure(label, ports, test, args, pipeline, sent):
    """A calibration run, then one of about args.duration seconds."""
    probe = whole_pipelines(5000 * pipeline, pipeline, len(ports))
    _, result, errors, wall, _ = run_benchmarks(
        ports, test, args.clients, probe, pipeline, args.keyspace)
    sent[label] = sent.get(label, 0) + (probe if test == "incr" else 0)
    rate = max(result["rps"], probe / max(wall, 1e-3))
    requests = whole_pipelines(max(int(rate * args.duration), probe), pipeline, len(ports))
    name, result, errors, wall, parts = run_benchmarks(
        ports, test, args.clients, requests, pipeline, args.keyspace)
    if test == "incr":
        sent[label] += requests
    result.update({"errors": errors, "wall_s": round(wall, 2), "processes": len(ports)})
    if len(parts) > 1:
        result["per_process_rps"] = [round(part["rps"]) for part in parts]
    log(f"  {name:<16} -P {pipeline:<2} {label:<15} {result['rps']:>11,.0f} req/s  "
        f"p50 {result['p50_ms']:.3f} ms  ({requests:,} requests, {wall:.1f} s"
        f"{f', {errors} errors' if errors else ''})")
    return name, result


def counter_total(port):
    """The sum of every counter:* key (what INCR wrote)."""
    conn = harness.RespConn(port, timeout=120)
    total, cursor = 0, b"0"
    try:
        while True:
            _, reply = conn.call("SCAN", cursor, "MATCH", "counter:*", "COUNT", "1000")
            cursor = reply[1][0][1]
            keys = [item[1] for item in reply[1][1][1]]
            if keys:
                _, values = conn.call("MGET", *keys)
                total += sum(int(item[1]) for item in values[1] if item[1] is not None)
            if cursor == b"0":
                return total
    finally:
        conn.close()


def machine():
    info = {"cores": os.cpu_count(), "platform": platform.platform(),
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            for line in file:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for name, argv in (("redis_server", ["redis-server", "--version"]),
                       ("redis_benchmark", ["redis-benchmark", "--version"])):
        try:
            info[name] = subprocess.run(argv, capture_output=True, text=True).stdout.strip()
        except OSError:
            pass
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "crates"],
                               capture_output=True, text=True).stdout.strip()
        info["ferrotx_commit"] = commit + ("+changes" if dirty else "")
    except OSError:
        pass
    return info


def markdown(report):
    lines = [
        "# redis-benchmark: ferrotx beside redis-server",
        "",
        f"Written by `scripts/redis_compare.py` on {report['date']}: `{report['command']}`.",
        "",
        f"Machine: {report['machine'].get('cores')} cores "
        f"({report['machine'].get('cpu', '?')}); {report['machine'].get('redis_server', '')}; "
        f"load average before the run {report['machine']['load_average_before'][0]}, after "
        f"{report['machine']['load_average_1_5_15'][0]} (1 min). "
        "ferrotx: `ferrotx cluster local`, 3 node processes with 1 worker thread each, 3 "
        "replicas of every partition (every write is applied on 3 nodes before it is "
        "answered)"
        + (f", at most {report['resp_pipeline_max']} pipelined command(s) per transaction"
           if report.get("resp_pipeline_max") else "")
        + "; redis-server: one process, no persistence, no replica. Everything, "
        "redis-benchmark included, shares the machine's cores.",
        "",
        f"redis-benchmark `-c {report['clients']}"
        + (f" -r {report['keyspace']}" if report["keyspace"] else "")
        + " --csv`, with and without `-P 16`; node 0: every client on node 0; all nodes: "
        "three redis-benchmark processes at once, one per node, clients split 17/17/16, "
        "all their requests over the longest one's time, latencies request-weighted. Ratios are ferrotx / redis-server.",
        "",
        "| test | -P | redis-server req/s | ferrotx node 0 req/s | ratio | ferrotx all nodes "
        "req/s | ratio | p50 ms redis / node 0 / all |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in report["rows"]:
        spread = row.get("ferrotx_all_nodes")
        lines.append(
            f"| {row['test']} | {row['pipeline']} | {row['redis']['rps']:,.0f} | "
            f"{row['ferrotx_node0']['rps']:,.0f} | {row['ratio_node0']:.2f} | "
            + (f"{spread['rps']:,.0f} | {row['ratio_all_nodes']:.2f} | " if spread else "- | - | ")
            + f"{row['redis']['p50_ms']:.3f} / {row['ferrotx_node0']['p50_ms']:.3f}"
            + (f" / {spread['p50_ms']:.3f}" if spread else "") + " |")
    lines += ["", "Targets (issue 5, same run, node 0):", ""]
    for target in report["targets"]:
        lines.append(f"- {target['test']} -P {target['pipeline']}: {target['ratio']:.2f} "
                     f"of redis-server's, target {target['target']:.2f}: "
                     f"{'met' if target['met'] else 'NOT met'}")
    checks = report["checks"]
    lines += ["", "Checks:", ""]
    for key, label in (("incr_redis", "redis-server"), ("incr_ferrotx", "ferrotx")):
        if key in checks:
            lines.append(f"- {label}: the counter:* keys add up to {checks[key]['counted']:,} "
                         f"for {checks[key]['sent']:,} INCR requests sent")
    lines.append(f"- errors from the servers (redis-benchmark's \"Error from server\"): "
                 f"{checks['errors_from_servers']}")
    lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", help="ferrotx binary (default: build target/release/ferrotx)")
    parser.add_argument("--duration", type=float, default=6.0,
                        help="seconds each measurement should last (default 6)")
    parser.add_argument("--tests", default="get,set,incr,mset")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--keyspace", type=int, default=100000,
                        help="redis-benchmark -r (0: leave it out)")
    parser.add_argument("--pipelines", default="1,16")
    parser.add_argument("--resp-pipeline-max", type=int, default=None,
                        help="ferrotx's pipelined commands per transaction (cluster local "
                             "--resp-pipeline-max; 1: one transaction per command; default: "
                             "ferrotx's)")
    parser.add_argument("--no-spread", action="store_true",
                        help="skip the runs with one redis-benchmark per node")
    parser.add_argument("--json", default=os.path.join(ROOT, "docs", "results", "redis.json"))
    parser.add_argument("--md", default=os.path.join(ROOT, "docs", "results", "redis.md"))
    args = parser.parse_args()

    for program in ("redis-server", "redis-benchmark"):
        if harness.find_program(program) is None:
            sys.exit(f"{program} is missing: apt-get install -y redis-server redis-tools")
    binary = args.bin
    if binary is None:
        log("building: cargo build --release -p ferrotx")
        subprocess.run(["cargo", "build", "--release", "-p", "ferrotx"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target", "release", "ferrotx")
    binary = os.path.abspath(binary)

    signal.signal(signal.SIGTERM, on_sigterm)
    # The machine's load before the run (other work on the cores skews every figure).
    load_before = [round(x, 2) for x in os.getloadavg()]
    cluster_args = ([] if args.resp_pipeline_max is None
                    else ["--resp-pipeline-max", str(args.resp_pipeline_max)])
    servers = harness.Servers(binary, cluster_args=cluster_args)
    tests = [test.strip().lower() for test in args.tests.split(",") if test.strip()]
    pipelines = [int(p) for p in args.pipelines.split(",")]
    rows = []
    sent = {}
    try:
        servers.start()
        log(f"redis-server on port {servers.redis_port}; ferrotx ({binary}) on ports "
            f"{servers.ferrotx_ports}")
        for pipeline in pipelines:
            for test in tests:
                name, redis_result = measure("redis-server", [servers.redis_port], test,
                                             args, pipeline, sent)
                _, node0 = measure("ferrotx node 0", servers.ferrotx_ports[:1], test,
                                   args, pipeline, sent)
                row = {"test": name, "pipeline": pipeline, "redis": redis_result,
                       "ferrotx_node0": node0,
                       "ratio_node0": node0["rps"] / redis_result["rps"]}
                if not args.no_spread:
                    _, spread = measure("ferrotx all", servers.ferrotx_ports, test, args,
                                        pipeline, sent)
                    row["ferrotx_all_nodes"] = spread
                    row["ratio_all_nodes"] = spread["rps"] / redis_result["rps"]
                rows.append(row)
                servers.check_alive()
        checks = {}
        if "incr" in tests:
            redis_sent = sent.get("redis-server", 0)
            ferrotx_sent = sent.get("ferrotx node 0", 0) + sent.get("ferrotx all", 0)
            checks["incr_redis"] = {"sent": redis_sent,
                                    "counted": counter_total(servers.redis_port)}
            checks["incr_ferrotx"] = {"sent": ferrotx_sent,
                                      "counted": counter_total(servers.ferrotx_ports[1])}
        errors = sum(row[key]["errors"] for row in rows
                     for key in ("redis", "ferrotx_node0", "ferrotx_all_nodes") if key in row)
        checks["errors_from_servers"] = errors
        checks["ok"] = errors == 0 and all(
            check["sent"] == check["counted"] for key, check in checks.items()
            if key.startswith("incr_"))
    except (KeyboardInterrupt, Stop):
        log("interrupted: stopping the servers")
        return 130
    except harness.Fatal as error:
        log(f"error: {error}")
        return 2
    finally:
        servers.stop()

    targets = []
    for row in rows:
        if row["test"] in TARGETS:
            targets.append({"test": row["test"], "pipeline": row["pipeline"],
                            "ratio": row["ratio_node0"], "target": TARGETS[row["test"]],
                            "met": row["ratio_node0"] >= TARGETS[row["test"]]})
    command = "python3 scripts/redis_compare.py " + " ".join(sys.argv[1:])
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": command.strip(),
        "machine": {**machine(), "load_average_before": load_before},
        "clients": args.clients,
        "keyspace": args.keyspace,
        "duration_s": args.duration,
        "ferrotx_cluster": {"nodes": 3, "replicas": 3, "threads_per_node": 1},
        "resp_pipeline_max": args.resp_pipeline_max,
        "rows": rows,
        "targets": targets,
        "checks": checks,
    }
    text = markdown(report)
    log("")
    log(text)
    for path, content in ((args.json, json.dumps(report, indent=2) + "\n"), (args.md, text)):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as file:
                file.write(content)
            log(f"written: {os.path.relpath(path, ROOT)}")
    return 0 if checks.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
