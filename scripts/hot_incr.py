#!/usr/bin/env python3
"""One hot key INCRed from every node of a ferrotx cluster, beside one redis-server.

What it does, per run (--runs, each on a fresh cluster and a fresh redis-server):

1. Starts `ferrotx cluster local` (3 node processes, 3 replicas of every partition, 1
   worker thread each) on free ports, with tests/redis/harness.py, and checks that
   redis-benchmark works against it (a one-request PING run, which also measures the
   error replies redis-benchmark itself causes: it asks for CONFIG, which ferrotx does
   not have).
2. Runs three `redis-benchmark -t incr -n N -c C` at once, one against each node's Redis
   port. Without -r, redis-benchmark INCRs one fixed key (`counter:__rand_int__`), so
   every client of every node INCRs the same key.
3. redis-benchmark 7 exits at the first error reply ("Error from server: ..."; ferrotx
   answers `-TRYAGAIN ... aborted after N retries` when a command kept conflicting for 2
   s), so one that errors out prints no figures. What each node did is read from the
   node instead: INFO's `transactions_committed` (INCRs that took effect: one
   transaction each, since nothing is pipelined), `transactions_aborted` (attempts the
   node retried) and `total_error_replies` (less redis-benchmark's own CONFIG errors), as
   differences from before the run, once the node is quiet (commands still retrying
   when their redis-benchmark exited may still commit). The key's final value must
   equal the INCRs committed at every node together.
4. Reports per node: INCRs committed, INCR/s over its redis-benchmark's own run and over
   the whole window (from the start of the three to the end of the last), its share of
   the total, aborted attempts and their rate, error replies, redis-benchmark's exit
   status and first error line, and redis-benchmark's own figures when it finished; and
   the total: INCRs committed by all nodes over the window.
5. Stops the cluster, starts a private redis-server (loopback, a free port, `--save ''
   --appendonly no`), runs the same three redis-benchmark processes at once against it,
   and reports its total (the key's value over the window), and ferrotx / redis-server.

It exits non-zero only when something could not be set up or run (a server that does not
start, redis-benchmark missing or failing other than by an error reply, a check of the
key that fails), never because of the figures.

Usage:
  python3 scripts/hot_incr.py [--bin target/release/ferrotx] [-n 100000] [-c 20]
      [--runs 1] [--json PATH] [--md PATH]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "redis"))

import harness  # noqa: E402
from redis_compare import machine  # noqa: E402  (the same description of the machine)

KEY = "counter:__rand_int__"
NODES = 3


def log(message):
    print(message, flush=True)


class Stop(Exception):
    pass


def on_sigterm(signum, frame):
    raise Stop()


def info(port):
    """INFO's numeric fields of the node or server on `port`, as a dict."""
    conn = harness.RespConn(port, timeout=30)
    try:
        _, reply = conn.call("INFO", "everything")
    finally:
        conn.close()
    if reply[0] != "bulk" or reply[1] is None:
        raise harness.Fatal(f"INFO on port {port} answered {reply!r}")
    fields = {}
    for line in reply[1].decode(errors="replace").splitlines():
        name, sep, value = line.partition(":")
        if sep:
            try:
                fields[name] = int(value)
            except ValueError:
                pass
    return fields


def key_value(port):
    conn = harness.RespConn(port, timeout=30)
    try:
        _, reply = conn.call("GET", KEY)
    finally:
        conn.close()
    if reply[0] != "bulk":
        raise harness.Fatal(f"GET {KEY} on port {port} answered {reply!r}")
    return 0 if reply[1] is None else int(reply[1])


def counters(port):
    fields = info(port)
    return {name: fields.get(name, 0) for name in
            ("transactions_committed", "transactions_aborted", "total_error_replies",
             "total_commands_processed")}


def quiet_counters(ports, settle_s=1.0, limit_s=15.0):
    """Every node's counters once none of them changed for `settle_s` (a command that
    kept conflicting retries for up to 2 s after its client left)."""
    deadline = time.monotonic() + limit_s
    last = [counters(port) for port in ports]
    while time.monotonic() < deadline:
        time.sleep(settle_s)
        now = [counters(port) for port in ports]
        # INFO itself is a command processed: compare the rest.
        strip = [{k: v for k, v in c.items() if k != "total_commands_processed"} for c in now]
        if strip == [{k: v for k, v in c.items() if k != "total_commands_processed"}
                     for c in last]:
            return now
        last = now
    log(f"  (the nodes were still busy {limit_s:.0f} s after the benchmarks ended)")
    return last


def parse_csv_row(text):
    """redis-benchmark --csv: the INCR row as a dict, or None."""
    header = None
    for line in text.splitlines():
        cells = [cell.strip('"') for cell in line.strip().split(",")]
        if cells and cells[0] == "test":
            header = cells
        elif header and len(cells) == len(header):
            row = dict(zip(header, cells))
            return {"rps": float(row["rps"]), "avg_ms": float(row["avg_latency_ms"]),
                    "p50_ms": float(row["p50_latency_ms"]),
                    "p99_ms": float(row["p99_latency_ms"]),
                    "max_ms": float(row["max_latency_ms"])}
    return None


def benchmark_argv(port, requests, clients, test="incr"):
    return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", test,
            "-n", str(requests), "-c", str(clients), "--csv"]


def run_at_once(ports, requests, clients):
    """One redis-benchmark per entry of `ports`, all started at once; per process: exit
    code, wall seconds, its figures if it finished, the error lines it printed."""
    started = time.monotonic()
    procs = [subprocess.Popen(benchmark_argv(port, requests, clients),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL) for port in ports]
    ended = [None] * len(procs)
    while any(end is None for end in ended):
        for i, proc in enumerate(procs):
            if ended[i] is None and proc.poll() is not None:
                ended[i] = time.monotonic()
        if time.monotonic() - started > 900:
            for proc in procs:
                proc.kill()
            raise harness.Fatal("redis-benchmark ran for more than 900 s")
        time.sleep(0.002)
    results = []
    for i, proc in enumerate(procs):
        out, err = proc.communicate()
        out, err = out.decode(errors="replace"), err.decode(errors="replace")
        errors = [line.strip() for line in (out + "\n" + err).splitlines()
                  if line.strip().startswith("Error from server")]
        row = parse_csv_row(out)
        if proc.returncode != 0 and not errors:
            raise harness.Fatal(f"redis-benchmark on port {ports[i]} failed "
                                f"({proc.returncode}) without an error reply: {err[-500:]}")
        results.append({"port": ports[i], "exit_code": proc.returncode,
                        "wall_s": round(ended[i] - started, 3), "finished": row is not None,
                        "redis_benchmark": row, "error_lines": errors})
    return results, max(ended) - started


def measure_ferrotx(binary, args):
    servers = harness.Servers(binary, nodes=NODES, replicas=3)
    try:
        servers._start_cluster()
        ports = servers.ferrotx_ports
        log(f"  ferrotx cluster local on Redis ports {ports}")
        # redis-benchmark's own error replies (CONFIG GET) per invocation.
        before = counters(ports[0])
        probe = subprocess.run(benchmark_argv(ports[0], 1, 1, "ping"), capture_output=True,
                               text=True, timeout=60)
        if probe.returncode != 0:
            raise harness.Fatal(f"redis-benchmark against ferrotx failed: {probe.stderr[-500:]}")
        own_errors = counters(ports[0])["total_error_replies"] - before["total_error_replies"]
        start_value = key_value(ports[0])
        before = [counters(port) for port in ports]
        log(f"  3 x redis-benchmark -t incr -n {args.requests} -c {args.clients}, one per node")
        procs, window = run_at_once(ports, args.requests, args.clients)
        after = quiet_counters(ports)
        servers.check_alive()
        value = key_value(ports[1]) - start_value
    finally:
        servers.stop()
    nodes = []
    for node, (proc, b, a) in enumerate(zip(procs, before, after)):
        committed = a["transactions_committed"] - b["transactions_committed"]
        aborted = a["transactions_aborted"] - b["transactions_aborted"]
        error_replies = a["total_error_replies"] - b["total_error_replies"] - own_errors
        nodes.append({
            "node": node, "port": proc["port"], "committed": committed,
            "incr_per_s_own_run": committed / max(proc["wall_s"], 1e-3),
            "incr_per_s_window": committed / max(window, 1e-3),
            "aborted_attempts": aborted,
            "abort_rate": aborted / max(committed + aborted, 1),
            "error_replies": error_replies,
            **{k: proc[k] for k in ("exit_code", "wall_s", "finished", "redis_benchmark")},
            "first_error": proc["error_lines"][0] if proc["error_lines"] else None,
        })
    total = sum(n["committed"] for n in nodes)
    for n in nodes:
        n["share"] = n["committed"] / max(total, 1)
    if value != total:
        raise harness.Fatal(f"the key went up by {value:,} but the nodes committed {total:,} "
                            "INCRs")
    return {"window_s": round(window, 3), "committed": total,
            "incr_per_s": total / max(window, 1e-3), "key_value": value,
            "redis_benchmark_config_errors": own_errors, "nodes": nodes}


def measure_redis(args):
    servers = harness.Servers(None)
    try:
        servers._start_redis()
        port = servers.redis_port
        log(f"  redis-server on port {port}: 3 x redis-benchmark -t incr -n {args.requests} "
            f"-c {args.clients} at once")
        start_value = key_value(port)
        procs, window = run_at_once([port] * NODES, args.requests, args.clients)
        value = key_value(port) - start_value
        servers.check_alive()
    finally:
        servers.stop()
    errors = sum(len(p["error_lines"]) for p in procs)
    if value != NODES * args.requests or errors:
        raise harness.Fatal(f"redis-server: the key went up by {value:,} for "
                            f"{NODES * args.requests:,} INCRs ({errors} error lines)")
    return {"window_s": round(window, 3), "committed": value,
            "incr_per_s": value / max(window, 1e-3),
            "processes": [{k: p[k] for k in ("exit_code", "wall_s", "redis_benchmark")}
                          for p in procs]}


def markdown_run(number, run):
    f, r = run["ferrotx"], run["redis"]
    lines = [
        f"Run {number}: ferrotx {f['incr_per_s']:,.0f} INCR/s in all ({f['committed']:,} "
        f"INCRs over {f['window_s']:.2f} s); redis-server {r['incr_per_s']:,.0f} INCR/s "
        f"({r['committed']:,} over {r['window_s']:.2f} s); ferrotx / redis-server "
        f"{run['ratio']:.3f}.",
        "",
        "| node | INCRs committed | share | INCR/s, own run | INCR/s, window | aborted "
        "attempts | abort rate | error replies | redis-benchmark | first error |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for n in f["nodes"]:
        status = (f"finished in {n['wall_s']:.2f} s, {n['redis_benchmark']['rps']:,.0f} "
                  f"req/s" if n["finished"]
                  else f"exit {n['exit_code']} after {n['wall_s']:.2f} s")
        lines.append(
            f"| {n['node']} | {n['committed']:,} | {n['share'] * 100:.1f}% | "
            f"{n['incr_per_s_own_run']:,.0f} | {n['incr_per_s_window']:,.0f} | "
            f"{n['aborted_attempts']:,} | {n['abort_rate'] * 100:.1f}% | "
            f"{n['error_replies']:,} | {status} | "
            f"{'`' + n['first_error'] + '`' if n['first_error'] else ''} |")
    lines += ["", "redis-server, each redis-benchmark process: " + "; ".join(
        f"{p['redis_benchmark']['rps']:,.0f} req/s, finished in {p['wall_s']:.2f} s"
        for p in r["processes"] if p["redis_benchmark"]) + ".", ""]
    return lines


def markdown(report):
    lines = [
        "# One hot key INCRed from every node: ferrotx beside redis-server",
        "",
        f"Written by `scripts/hot_incr.py` on {report['date']}: `{report['command']}`; "
        f"ferrotx {report['machine'].get('ferrotx_commit', '?')}, "
        f"{report['machine'].get('cores')} cores, load average before "
        f"{report['load_average_before'][0]} (1 min).",
        "",
        f"ferrotx: `ferrotx cluster local` (3 node processes, 3 replicas, 1 worker thread "
        f"each), three `redis-benchmark -t incr -n {report['requests']} -c "
        f"{report['clients']}` at once, one per node, all on the one key `{KEY}`. "
        "Per node from its INFO (differences over the run): INCRs committed, aborted "
        "attempts the node retried, error replies (less redis-benchmark's own CONFIG "
        "errors); INCR/s over its redis-benchmark's own run and over the window (start "
        "to the end of the last one). redis-benchmark stops at the first error reply. "
        "redis-server: the same three processes against one private redis-server. "
        "Totals: INCRs that took effect over the window.",
        "",
    ]
    for i, run in enumerate(report["runs"], 1):
        lines += markdown_run(i, run)
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", help="ferrotx binary (default: build target/release/ferrotx)")
    parser.add_argument("-n", "--requests", type=int, default=100000,
                        help="requests per redis-benchmark process (default 100000)")
    parser.add_argument("-c", "--clients", type=int, default=20,
                        help="clients per redis-benchmark process (default 20)")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs, each on a fresh cluster and redis-server (default 1)")
    parser.add_argument("--json", help="write the report as JSON here")
    parser.add_argument("--md", help="write the report as Markdown here")
    args = parser.parse_args()

    for program in ("redis-server", "redis-benchmark"):
        if harness.find_program(program) is None:
            log(f"{program} is missing: apt-get install -y redis-server redis-tools")
            return 2
    binary = args.bin
    if binary is None:
        log("building: cargo build --release -p ferrotx")
        if subprocess.run(["cargo", "build", "--release", "-p", "ferrotx"],
                          cwd=ROOT).returncode != 0:
            return 2
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        binary = os.path.join(target, "release", "ferrotx")
    binary = os.path.abspath(binary)
    if not os.access(binary, os.X_OK):
        log(f"no ferrotx binary at {binary}")
        return 2

    signal.signal(signal.SIGTERM, on_sigterm)
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs = []
    try:
        for number in range(1, args.runs + 1):
            log(f"run {number} of {args.runs}")
            ferrotx = measure_ferrotx(binary, args)
            redis = measure_redis(args)
            run = {"ferrotx": ferrotx, "redis": redis,
                   "ratio": ferrotx["incr_per_s"] / max(redis["incr_per_s"], 1e-9)}
            runs.append(run)
            log("\n".join(markdown_run(number, run)))
    except (KeyboardInterrupt, Stop):
        log("interrupted")
        return 130
    except (harness.Fatal, OSError, subprocess.SubprocessError) as error:
        log(f"error: {error}")
        return 2

    command = "python3 scripts/hot_incr.py " + " ".join(sys.argv[1:])
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": command.strip(),
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "requests": args.requests,
        "clients": args.clients,
        "ferrotx_cluster": {"nodes": NODES, "replicas": 3, "threads_per_node": 1},
        "runs": runs,
    }
    text = markdown(report)
    log("")
    log(text)
    for path, content in ((args.json, json.dumps(report, indent=2) + "\n"), (args.md, text)):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as file:
                file.write(content)
            log(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
