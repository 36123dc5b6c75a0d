#!/usr/bin/env python3
"""Jepsen-style faults on real `ferrotx node` processes on a real (namespaced) network.

The harness creates a network namespace (`ip netns add`, its loopback up), enters it,
and runs everything there: one `ferrotx node` process per node, each on its own
loopback address (node i on 127.0.0.(i+2), UDP port 7000, Redis port 6379; the
harness's clients and `ferrotx status` talk from 127.0.0.1), 100 ms leases by default.
redis-py clients run workloads on every node while a seeded schedule of faults runs,
each fault healed and the cluster's convergence awaited before the next:

- isolate      one node cut from every other node, both ways (nftables in the
               namespace: `ip saddr A ip daddr B drop` on the output hook, which every
               datagram between two loopback addresses passes);
- isolate-cm   the same for the configuration manager of the moment (`status --json`);
- oneway       everything one node sends to the other nodes is lost; it still hears them;
- bridge       (5 nodes) a ring: each node hears only its two neighbours, so no two
               halves are clean and every node sees a majority;
- pause        SIGSTOP for one lease, then SIGCONT;
- pause-long   SIGSTOP for 3 to 10 leases (removed, it rejoins as a new life);
- kill         SIGKILL, and a restart (`ferrotx node ... --join`: a new life, refilled).

Client traffic (from 127.0.0.1) is never cut: a client of a cut-off node must get an
error or a timeout from it, never a stale read. Workloads, every operation recorded as
ok, failed (certainly no effect: -TRYAGAIN, -CLUSTERDOWN, EXECABORT, nothing sent) or
unknown (a timeout, a lost connection, any other error):

- list-append: MULTI, `APPEND la:K "E,"` / `GET la:K`, EXEC, unique elements, Elle's key
  rotation (tests/kill_under_load.rs), recorded as a Jepsen history (history.jsonl) and
  checked for strict serializability by `ferrotx check list-append` (the `adya` crate);
- bank: WATCH/GET/MULTI/DECRBY/INCRBY/EXEC transfers between 8 accounts (spread over
  the partitions by the key hash), and audits reading all of them in one MULTI: every
  audit and every final read must see the total;
- set-incr: unique `SET s:T:I` and `INCR c:J`: every acknowledged SET reads back, and
  every counter ends between its acknowledged and its attempted (ok + unknown)
  increments.

A status poller (`ferrotx status --json`, every 100 ms) records views: partitions that
ever had no copy, members removed (a removal is of a "healthy member" if its node was
alive and under no fault from a lease before the previous poll to the poll that saw it
gone; it counts as a failure only in a round whose fault left the CM its majority), and
node processes that exited without the harness killing them. After each heal it times
convergence: every node a member of the latest view, alive in its life, and every
partition with all its copies and none filling (and the first successful client
operation). At the end everything is healed (rules flushed, SIGCONT, dead nodes
restarted), convergence awaited, and every acknowledged write read back through EVERY
node (each read recorded in the history too).

Exit status 0 only if: no anomaly, no acknowledged write lost, every bank read at the
total, no counter above its attempts, no partition ever without a copy, convergence
within --converge-timeout after every heal, no unexpected node exit, and no healthy
member removed in a round where the CM kept its majority. 77: a prerequisite is missing
(root, ip, nft, redis-py). The JSON summary is printed (and written to --json PATH).

Needs root (network namespaces, nftables: Debian `nftables`), iproute2, redis-py (this
script runs itself with /usr/bin/python3 if this Python lacks it; Debian python3-redis).
Everything created (namespace, processes, the run's directory) is removed at exit, also
on an exception, Ctrl-C or SIGTERM; --keep keeps the directory (node logs, config,
history.jsonl, summary.json) when the run fails.

Short form (CI; each about half a minute on 2 busy cores, see docs/testing.md):
  python3 scripts/nemesis.py --nodes 3 --rounds 10 --seed 1 --json /tmp/nemesis-3.json
  python3 scripts/nemesis.py --nodes 5 --rounds 10 --seed 1 --json /tmp/nemesis-5.json

Long run (100 rounds over 3 and 5 nodes):
  python3 scripts/nemesis.py --nodes 3 --rounds 100 --seed 1000 --keep --json nemesis-3-long.json
  python3 scripts/nemesis.py --nodes 5 --rounds 100 --seed 2000 --keep --json nemesis-5-long.json

Usage:
  python3 scripts/nemesis.py [--ferrotx target/release/ferrotx] [--checker BIN]
      [--nodes 3|5] [--rounds 5] [--seed 1] [--lease-ms 100]
      [--fault-kinds isolate,isolate-cm,oneway,bridge,pause,pause-long,kill]
      [--round-seconds 2] [--heal-seconds 1] [--converge-timeout 60] [--json PATH]
      [--keep] [--keep-always]
      [--sabotage lost-write|skip-heal|g1c]   (checks the harness itself can fail)
"""

import argparse
import bisect
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBIAN_PYTHON = "/usr/bin/python3"
MISSING_EXIT = 77

try:
    import redis  # noqa: E402
except ImportError:
    # A python3 first on PATH without redis-py (pyenv): Debian's has it (python3-redis).
    if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and \
            os.path.exists(DEBIAN_PYTHON) and not os.environ.get("FERROTX_NEMESIS_REEXEC"):
        os.environ["FERROTX_NEMESIS_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])
    print("nemesis: redis-py is missing (Debian python3-redis, or PyPI redis)", file=sys.stderr)
    sys.exit(MISSING_EXIT)

ALL_KINDS = ["isolate", "isolate-cm", "oneway", "bridge", "pause", "pause-long", "kill"]
# Kinds after which the CM of the moment may have lost its majority (or is the target).
CM_LOSES = {"isolate-cm", "bridge"}

CLIENT_ADDR = "127.0.0.1"
RPC_PORT = 7000
RESP_PORT = 6379
REPLY_TIMEOUT = 10.0  # the server answers every command within 5 s

ACCOUNTS = 8
INITIAL = 100
TOTAL = ACCOUNTS * INITIAL
ACTIVE_KEYS = 5
APPENDS_PER_SHIFT = 100
COUNTERS = 8


def log(message):
    print(f"[nemesis {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Fatal(Exception):
    """A run that cannot go on (a prerequisite, a cluster that does not form)."""


# ---------------------------------------------------------------------------------------
# The network: one namespace on this host. A later backend (several hosts, etcd) keeps
# the same methods: address(node), enter(), drop(pairs), heal(), destroy().


class NamespaceNetwork:
    """A network namespace of this host; node i listens on 127.0.0.(i+2) of its loopback,
    clients talk from 127.0.0.1. Faults are nftables rules inside it."""

    CLONE_NEWNET = 0x40000000

    def __init__(self, name):
        self.name = name
        self.created = False

    @staticmethod
    def address(node):
        return f"127.0.0.{node + 2}"

    def create_and_enter(self):
        """Creates the namespace, brings its loopback up, and moves this process into it
        (before any thread starts, so every thread and child is inside)."""
        import ctypes
        run(["ip", "netns", "add", self.name])
        self.created = True
        run(["ip", "-n", self.name, "link", "set", "lo", "up"])
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            if libc.setns(fd, self.CLONE_NEWNET) != 0:
                raise Fatal(f"setns into {self.name}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)
        nft("add table inet nemesis\n"
            "add chain inet nemesis output { type filter hook output priority 0; policy accept; }\n")

    def drop(self, pairs):
        """Replaces the rules by drops of every datagram from node a to node b, for each
        (a, b) of `pairs`, in one nftables transaction."""
        lines = ["flush chain inet nemesis output"]
        for a, b in sorted(set(pairs)):
            lines.append(f"add rule inet nemesis output ip saddr {self.address(a)} "
                         f"ip daddr {self.address(b)} drop")
        nft("\n".join(lines) + "\n")

    def heal(self):
        nft("flush chain inet nemesis output\n")

    def destroy(self):
        if self.created:
            subprocess.run(["ip", "netns", "del", self.name], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            self.created = False


def run(argv):
    out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        raise Fatal(f"{' '.join(argv)}: {out.stdout.strip()}")
    return out.stdout


def nft(script):
    out = subprocess.run(["nft", "-f", "-"], input=script, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        raise Fatal(f"nft: {out.stdout.strip()}\n{script}")


# ---------------------------------------------------------------------------------------
# The node processes: the configuration, starting (first or --join), signals, exits.


class Nodes:
    def __init__(self, binary, count, lease_ms, network, directory):
        self.binary = binary
        self.count = count
        self.lease_ms = lease_ms
        self.network = network
        self.dir = directory
        self.config = os.path.join(directory, "cluster.toml")
        self.procs = [None] * count
        self.lives = [0] * count
        self.killed = set()   # nodes whose current process the harness killed
        self.paused = set()
        self.exits = []       # processes that exited by themselves
        self.lock = threading.Lock()
        self.setpriv = shutil.which("setpriv")

    def write_config(self):
        lines = ["id = 1", "threads_per_node = 1", f"replicas = {min(3, self.count)}",
                 f"partition_count = {4 * self.count}"]
        for node in range(self.count):
            lines += ["[[member]]", f"node = {node}", f'failure_domain = "d{node}"',
                      f'host = "{self.network.address(node)}"', f"rpc_port_base = {RPC_PORT}",
                      f"resp_port = {RESP_PORT}"]
        with open(self.config, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
        run([self.binary, "keygen", self.config + ".key"])

    def start(self, node):
        """A process for `node`: its first life, or a restart that joins (--join)."""
        self.lives[node] += 1
        argv = [self.binary, "node", "--config", self.config, "--id", str(node),
                "--lease-ms", str(self.lease_ms)]
        if self.lives[node] > 1:
            argv.append("--join")
        if self.setpriv:
            # Killed with the harness even if it is killed itself (called from the main
            # thread, which lives as long as the harness).
            argv = [self.setpriv, "--pdeathsig", "KILL", "--"] + argv
        path = os.path.join(self.dir, f"node-{node}-life-{self.lives[node]}.log")
        with open(path, "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        with self.lock:
            self.procs[node] = proc
            self.killed.discard(node)

    def kill(self, node):
        with self.lock:
            proc = self.procs[node]
            self.killed.add(node)
            self.paused.discard(node)
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()

    def signal(self, node, sig):
        with self.lock:
            proc = self.procs[node]
            if sig == signal.SIGSTOP:
                self.paused.add(node)
            elif sig == signal.SIGCONT:
                self.paused.discard(node)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)

    def alive(self, node):
        proc = self.procs[node]
        return proc is not None and proc.poll() is None

    def check_exits(self, since):
        """Records processes that exited without being killed by the harness."""
        with self.lock:
            for node, proc in enumerate(self.procs):
                if proc is None or node in self.killed:
                    continue
                code = proc.poll()
                if code is not None:
                    self.killed.add(node)  # recorded once; restarted at the final heal
                    path = os.path.join(self.dir, f"node-{node}-life-{self.lives[node]}.log")
                    self.exits.append({"node": node, "life": self.lives[node], "code": code,
                                       "at_s": round(time.monotonic() - since, 2),
                                       "log_tail": tail(path, 1500)})
                    log(f"node {node} exited by itself with {code}")

    def stop_all(self):
        for node, proc in enumerate(self.procs):
            if proc is None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def status(self, timeout=5.0):
        """`ferrotx status --json`, or None."""
        try:
            out = subprocess.run([self.binary, "status", "--json", "--config", self.config],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if out.returncode != 0:
            return None
        try:
            return json.loads(out.stdout)
        except ValueError:
            return None


def tail(path, count):
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - count))
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def full_strength(s, count):
    """Every node of the file a member of the view, alive in its life at that view; every
    partition with its full count of copies and none filling; nobody suspended."""
    if s is None:
        return False
    members = s.get("members") or []
    if sorted(m.get("node") for m in members) != list(range(count)):
        return False
    if not all(m.get("alive") and m.get("same_life") and m.get("view") == s.get("configuration")
               for m in members):
        return False
    want = min(s.get("replicas", 3), count)
    if not all(len(c) == want for c in s.get("copies") or [None]):
        return False
    if any(f for f in s.get("filling") or []):
        return False
    return not s.get("suspended")


# ---------------------------------------------------------------------------------------
# The fault log and the status poller.


class Faults:
    """Which nodes are under a fault, and when: [start, end) per node."""

    def __init__(self):
        self.intervals = []  # (node, start, end or None, kind)
        self.lock = threading.Lock()

    def begin(self, nodes, kind, at):
        with self.lock:
            for node in nodes:
                self.intervals.append([node, at, None, kind])

    def end(self, at):
        with self.lock:
            for interval in self.intervals:
                if interval[2] is None:
                    interval[2] = at

    def touched(self, node, start, end):
        with self.lock:
            return [i[3] for i in self.intervals
                    if i[0] == node and i[1] <= end and (i[2] is None or i[2] >= start)]


class Poller(threading.Thread):
    """Polls `ferrotx status --json` and records what the checks need."""

    def __init__(self, nodes, faults, lease_s, since):
        super().__init__(daemon=True)
        self.nodes = nodes
        self.faults = faults
        self.lease_s = lease_s
        self.since = since
        self.stop = threading.Event()
        self.cond = threading.Condition()
        self.latest = None
        self.latest_at = 0.0
        self.polls = 0
        self.no_copy = {}      # partition -> first time seen without a copy
        self.no_copy_events = []
        self.removals = []
        self.views = []
        self.prev_members = None
        self.prev_config = -1
        self.prev_at = since
        self.round = None      # index of the round running (set by the nemesis)

    def run(self):
        while not self.stop.is_set():
            started = time.monotonic()
            s = self.nodes.status()
            at = time.monotonic()
            self.nodes.check_exits(self.since)
            if s is not None:
                self.observe(s, at)
            with self.cond:
                self.polls += 1
                if s is not None:
                    self.latest, self.latest_at = s, at
                self.cond.notify_all()
            time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))

    def observe(self, s, at):
        config = s.get("configuration", -1)
        copies = s.get("copies") or []
        for p, c in enumerate(copies):
            if not c and p not in self.no_copy:
                self.no_copy[p] = at
                self.no_copy_events.append({
                    "partition": p, "configuration": config,
                    "at_s": round(at - self.since, 2), "round": self.round,
                    "lost": s.get("lost"), "unavailable": s.get("unavailable"),
                    "suspended": s.get("suspended")})
                log(f"partition {p} has no copy in view {config}")
        if config > self.prev_config:
            members = {(m["node"], m["incarnation"]) for m in s.get("members") or []}
            self.views.append({"configuration": config, "cm": s.get("cm"),
                               "at_s": round(at - self.since, 2),
                               "members": sorted(n for n, _ in members)})
            if self.prev_members is not None:
                for node, incarnation in sorted(self.prev_members - members):
                    window = (self.prev_at - self.lease_s, at)
                    faults = self.faults.touched(node, *window)
                    event = {"node": node, "incarnation": incarnation,
                             "configuration": config, "round": self.round,
                             "at_s": round(at - self.since, 2),
                             "faults_in_window": sorted(set(faults)),
                             "healthy": not faults}
                    self.removals.append(event)
                    if not faults:
                        log(f"healthy member removed: node {node} in view {config}")
            self.prev_members, self.prev_config = members, config
        self.prev_at = at

    def wait_until(self, predicate, timeout):
        """Waits for a status satisfying `predicate`; returns its time, or None."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if self.latest is not None and predicate(self.latest):
                    return self.latest_at
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 0.5))

    def fresh(self):
        """The first status taken after this call."""
        with self.cond:
            count = self.polls
            while self.polls < count + 2:
                self.cond.wait(1.0)
            return self.latest


# ---------------------------------------------------------------------------------------
# Clients and the history.


def no_effect(error):
    """True for an error after which the command certainly took no effect."""
    if isinstance(error, redis.exceptions.ExecAbortError):
        return True
    text = str(error)
    return text.startswith("TRYAGAIN") or text.startswith("CLUSTERDOWN")


class Unknown(Exception):
    """A request sent whose reply never came."""


class Client:
    """One connection (a Jepsen process): raw commands pipelined, one reply each."""

    def __init__(self, node, network):
        self.node = node
        self.conn = redis.Connection(host=network.address(node), port=RESP_PORT,
                                     socket_timeout=REPLY_TIMEOUT, socket_connect_timeout=1.0)
        self.conn.connect()  # raises ConnectionError: nothing was sent

    def pipeline(self, commands):
        """Replies (errors as ResponseError values); raises Unknown if a reply is lost."""
        try:
            self.conn.send_packed_command(self.conn.pack_commands(commands))
        except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
            raise Unknown(f"send: {error}") from error
        replies = []
        for _ in commands:
            try:
                replies.append(self.conn.read_response())
            except redis.ResponseError as error:
                replies.append(error)
            except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
                raise Unknown(str(error) or type(error).__name__) from error
        return replies

    def close(self):
        try:
            self.conn.disconnect()
        except Exception:  # noqa: BLE001
            pass


class Shared:
    def __init__(self, network, count, seed, since):
        self.network = network
        self.count = count
        self.seed = seed
        self.since = since
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.history = []
        self.next_process = 0
        self.next_element = 0
        self.appends = 0
        self.max_key = 0
        self.ok_times = []
        self.ok_times_by_node = [[] for _ in range(count)]
        self.counts = {}
        self.problems = []
        self.audits_bad = []
        self.sets = {}        # key -> (value, "ok"|"unknown"|"fail")
        self.incrs = [[0, 0, 0] for _ in range(COUNTERS)]  # ok, unknown, fail

    def record(self, op):
        with self.lock:
            op["index"] = len(self.history)
            op["time"] = int((time.monotonic() - self.since) * 1e9)
            self.history.append(op)

    def process(self):
        with self.lock:
            self.next_process += 1
            return self.next_process - 1

    def outcome(self, workload, kind, node):
        with self.lock:
            entry = self.counts.setdefault(workload, {"ok": 0, "failed": 0, "unknown": 0})
            entry[kind] += 1
            if kind == "ok":
                now = time.monotonic()
                self.ok_times.append(now)
                self.ok_times_by_node[node].append(now)

    def problem(self, text):
        with self.lock:
            if len(self.problems) < 50:
                self.problems.append(text)


def parse_list(value):
    if value is None:
        return []
    text = value.decode() if isinstance(value, bytes) else str(value)
    if not text.endswith(","):
        return None
    try:
        return [int(e) for e in text[:-1].split(",")]
    except ValueError:
        return None


def worker(shared, thread, kind):
    rng = random.Random(shared.seed * 1000 + thread)
    client = None
    node = thread % shared.count
    pid = None
    done = 0
    while not shared.stop.is_set():
        if client is None:
            try:
                client = Client(node, shared.network)
                pid = shared.process()
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                node = (node + 1) % shared.count
                time.sleep(0.05)
                continue
        try:
            if kind == "list":
                keep = list_append(shared, client, pid, rng)
            elif kind == "bank":
                keep = audit(shared, client) if done % 8 == 7 else transfer(shared, client, rng)
            else:
                keep = set_incr(shared, client, thread, done, rng)
        except Exception as error:  # noqa: BLE001 - a harness bug must not hang the run
            shared.problem(f"{kind} client: {type(error).__name__}: {error}")
            keep = False
        done += 1
        if keep and done % 50 == 0:
            # Every node gets clients throughout: move on to the next one now and then.
            keep = False
        if not keep:
            client.close()
            client = None
            node = (node + 1) % shared.count


def list_append(shared, client, pid, rng):
    with shared.lock:
        base = shared.appends // APPENDS_PER_SHIFT
    mops = []
    for _ in range(1 + rng.randrange(4)):
        key = base + rng.randrange(ACTIVE_KEYS)
        with shared.lock:
            shared.max_key = max(shared.max_key, key)
            if rng.randrange(2) == 0:
                shared.appends += 1
                element = shared.next_element
                shared.next_element += 1
            else:
                element = None
        mops.append((key, element))
    invoked = [["append", k, e] if e is not None else ["r", k, None] for k, e in mops]

    def op(kind, value, error=None):
        return {"type": kind, "f": "txn", "process": pid, "value": value, "error": error}

    shared.record(op("invoke", invoked))
    commands = [("MULTI",)]
    for k, e in mops:
        commands.append(("APPEND", f"la:{k}", f"{e},") if e is not None else ("GET", f"la:{k}"))
    commands.append(("EXEC",))
    try:
        replies = client.pipeline(commands)
    except Unknown as error:
        shared.record(op("info", invoked, str(error)))
        shared.outcome("list_append", "unknown", client.node)
        return False
    result = replies[-1]
    if isinstance(result, list) and len(result) == len(mops):
        value = []
        for (k, e), r in zip(mops, result):
            if e is not None and isinstance(r, int):
                value.append(["append", k, e])
            elif e is None and not isinstance(r, Exception) and parse_list(r) is not None:
                value.append(["r", k, parse_list(r)])
            else:
                shared.problem(f"EXEC of {invoked} answered {result!r}")
                shared.record(op("info", invoked, "unexpected"))
                shared.outcome("list_append", "unknown", client.node)
                return False
        shared.record(op("ok", value))
        shared.outcome("list_append", "ok", client.node)
        return True
    if isinstance(result, Exception) and no_effect(result):
        shared.record(op("fail", invoked, str(result)))
        shared.outcome("list_append", "failed", client.node)
        return True
    shared.record(op("info", invoked, repr(result)[:200]))
    shared.outcome("list_append", "unknown", client.node)
    return False


def transfer(shared, client, rng):
    a = rng.randrange(ACCOUNTS)
    b = (a + 1 + rng.randrange(ACCOUNTS - 1)) % ACCOUNTS
    amount = 1 + rng.randrange(20)
    try:
        watch, balance = client.pipeline([("WATCH", f"bank:{a}", f"bank:{b}"), ("GET", f"bank:{a}")])
        if isinstance(watch, Exception) or isinstance(balance, Exception) or balance is None \
                or int(balance) < amount:
            client.pipeline([("UNWATCH",)])
            shared.outcome("bank_transfer", "failed", client.node)
            return True
    except Unknown:
        # Before MULTI/EXEC nothing is written: certainly no effect.
        shared.outcome("bank_transfer", "failed", client.node)
        return False
    try:
        replies = client.pipeline([("MULTI",), ("DECRBY", f"bank:{a}", amount),
                                   ("INCRBY", f"bank:{b}", amount), ("EXEC",)])
    except Unknown:
        shared.outcome("bank_transfer", "unknown", client.node)
        return False
    result = replies[-1]
    if isinstance(result, list) and len(result) == 2 and all(isinstance(r, int) for r in result):
        if result[0] < 0:
            shared.problem(f"a transfer under WATCH left bank:{a} at {result[0]}")
        shared.outcome("bank_transfer", "ok", client.node)
        return True
    if result is None or (isinstance(result, Exception) and no_effect(result)):
        shared.outcome("bank_transfer", "failed", client.node)
        return True
    shared.outcome("bank_transfer", "unknown", client.node)
    return False


def audit(shared, client):
    commands = [("MULTI",)] + [("GET", f"bank:{i}") for i in range(ACCOUNTS)] + [("EXEC",)]
    try:
        replies = client.pipeline(commands)
    except Unknown:
        shared.outcome("bank_audit", "unknown", client.node)
        return False
    result = replies[-1]
    if isinstance(result, list) and len(result) == ACCOUNTS:
        try:
            balances = [int(v) for v in result]
        except (TypeError, ValueError):
            shared.problem(f"an audit answered {result!r}")
            shared.outcome("bank_audit", "unknown", client.node)
            return False
        if sum(balances) != TOTAL or min(balances) < 0:
            with shared.lock:
                shared.audits_bad.append({"node": client.node, "balances": balances,
                                          "at_s": round(time.monotonic() - shared.since, 2)})
            log(f"an audit through node {client.node} read {balances} (sum {sum(balances)})")
        shared.outcome("bank_audit", "ok", client.node)
        return True
    if isinstance(result, Exception) and no_effect(result):
        shared.outcome("bank_audit", "failed", client.node)
        return True
    shared.outcome("bank_audit", "unknown", client.node)
    return False


def set_incr(shared, client, thread, done, rng):
    if done % 2 == 0:
        key, value = f"s:{thread}:{done}", f"v{done}"
        try:
            (reply,) = client.pipeline([("SET", key, value)])
        except Unknown:
            with shared.lock:
                shared.sets[key] = (value, "unknown")
            shared.outcome("set", "unknown", client.node)
            return False
        status = "ok" if reply in (b"OK", "OK", True) else \
            "fail" if isinstance(reply, Exception) and no_effect(reply) else "unknown"
        with shared.lock:
            shared.sets[key] = (value, status)
        shared.outcome("set", {"ok": "ok", "fail": "failed", "unknown": "unknown"}[status], client.node)
        return status != "unknown"
    counter = rng.randrange(COUNTERS)
    try:
        (reply,) = client.pipeline([("INCR", f"c:{counter}")])
    except Unknown:
        with shared.lock:
            shared.incrs[counter][1] += 1
        shared.outcome("incr", "unknown", client.node)
        return False
    if isinstance(reply, int):
        slot, outcome = 0, "ok"
    elif isinstance(reply, Exception) and no_effect(reply):
        slot, outcome = 2, "failed"
    else:
        slot, outcome = 1, "unknown"
    with shared.lock:
        shared.incrs[counter][slot] += 1
    shared.outcome("incr", outcome, client.node)
    return outcome != "unknown"


# ---------------------------------------------------------------------------------------
# The schedule of faults.


def schedule(rng, kinds, rounds, count, lease_ms, round_seconds):
    out = []
    for _ in range(rounds):
        kind = rng.choice(kinds)
        entry = {"kind": kind, "target": rng.randrange(count)}
        if kind == "pause":
            entry["duration_s"] = lease_ms / 1000
        elif kind == "pause-long":
            entry["duration_s"] = rng.randint(3, 10) * lease_ms / 1000
        else:
            entry["duration_s"] = round(round_seconds * rng.uniform(0.6, 1.0), 2)
        out.append(entry)
    return out


def drops_for(kind, target, count):
    others = [n for n in range(count) if n != target]
    if kind in ("isolate", "isolate-cm"):
        return [(target, o) for o in others] + [(o, target) for o in others]
    if kind == "oneway":
        return [(target, o) for o in others]
    if kind == "bridge":
        return [(a, b) for a in range(count) for b in range(count)
                if a != b and (b - a) % count not in (1, count - 1)]
    return []


# ---------------------------------------------------------------------------------------
# The run.


def read_through(shared, node, commands, deadline_s=30.0):
    """`commands` in one MULTI/EXEC through `node`, retried until it commits."""
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        client = None
        try:
            client = Client(node, shared.network)
            replies = client.pipeline([("MULTI",)] + commands + [("EXEC",)])
            if isinstance(replies[-1], list):
                return replies[-1]
            last = replies[-1]
        except (Unknown, redis.ConnectionError, redis.TimeoutError, OSError) as error:
            last = error
        finally:
            if client is not None:
                client.close()
        time.sleep(0.1)
    raise Fatal(f"the final read through node {node} never committed: {last!r}")


def chunks(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


def final_reads(shared, args, summary, sabotage):
    """Every acknowledged write read back through every node."""
    lost = []
    bank_bad = []
    over = []
    keys = list(range(shared.max_key + 1))
    appended = {}
    for op in shared.history:
        if op["f"] == "txn" and op["type"] in ("ok", "info"):
            for mop in op["value"]:
                if mop[0] == "append":
                    appended[(mop[1], mop[2])] = op["type"]
    sets = dict(shared.sets)
    if sabotage == "lost-write":
        # A write never sent, recorded as acknowledged: the check must catch it.
        sets["s:sabotage:0"] = ("never-written", "ok")
    set_keys = sorted(sets)
    for node in range(args.nodes):
        present = set()
        for part in chunks(keys, 500):
            pid = shared.process()
            shared.record({"type": "invoke", "f": "txn", "process": pid,
                           "value": [["r", k, None] for k in part], "final_read_node": node})
            results = read_through(shared, node, [("GET", f"la:{k}") for k in part])
            lists = [parse_list(r) for r in results]
            shared.record({"type": "ok", "f": "txn", "process": pid,
                           "value": [["r", k, lst] for k, lst in zip(part, lists)],
                           "final_read_node": node})
            for k, lst in zip(part, lists):
                if lst is None:
                    shared.problem(f"la:{k} through node {node} is no list")
                    continue
                present.update((k, e) for e in lst)
        for (k, e), t in appended.items():
            if t == "ok" and (k, e) not in present:
                lost.append({"node": node, "what": "append", "key": f"la:{k}", "element": e})
        balances = read_through(shared, node, [("GET", f"bank:{i}") for i in range(ACCOUNTS)])
        balances = [int(b) if b is not None else None for b in balances]
        if None in balances or sum(balances) != TOTAL or min(balances) < 0:
            bank_bad.append({"node": node, "balances": balances})
        for part in chunks(set_keys, 500):
            values = read_through(shared, node, [("GET", k) for k in part])
            for k, v in zip(part, values):
                want, status = sets[k]
                got = v.decode() if isinstance(v, bytes) else v
                if status == "ok" and got != want:
                    lost.append({"node": node, "what": "set", "key": k, "read": got})
                elif status == "fail" and got is not None:
                    over.append({"node": node, "what": "failed set present", "key": k})
        counters = read_through(shared, node, [("GET", f"c:{j}") for j in range(COUNTERS)])
        for j, v in enumerate(counters):
            value = int(v) if v is not None else 0
            ok, unknown, _ = shared.incrs[j]
            if value < ok:
                lost.append({"node": node, "what": "incr", "key": f"c:{j}", "read": value,
                             "acknowledged": ok})
            elif value > ok + unknown:
                over.append({"node": node, "what": "counter above attempts", "key": f"c:{j}",
                             "read": value, "attempted": ok + unknown})
    summary["acknowledged_lost"] = {"count": len(lost), "examples": lost[:20]}
    summary["bank"] = {"total": TOTAL, "audits_not_at_total": len(shared.audits_bad),
                       "audit_examples": shared.audits_bad[:5],
                       "final_reads_not_at_total": bank_bad}
    summary["not_explained"] = {"count": len(over), "examples": over[:20]}
    summary["writes_checked"] = {
        "appends_acknowledged": sum(1 for t in appended.values() if t == "ok"),
        "sets_acknowledged": sum(1 for _, s in sets.values() if s == "ok"),
        "incrs_acknowledged": sum(c[0] for c in shared.incrs),
        "through_nodes": args.nodes}


def check_history(args, path, summary):
    argv = [args.checker, "check", "list-append", "--history", path, "--json"]
    out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        report = json.loads(out.stdout)
    except ValueError:
        summary["anomalies"] = {"valid": None, "count": None, "types": [],
                                "error": f"{' '.join(argv)} exited {out.returncode}: "
                                         f"{out.stderr.strip()[:500]}"}
        return
    anomalies = report.get("anomalies") or {}
    summary["anomalies"] = {
        "valid": report.get("valid"),
        "count": sum(len(v) for v in anomalies.values()),
        "types": report.get("anomaly_types", []),
        "not": report.get("not", []),
        "examples": [{"type": k, "ops": a.get("ops"), "explanation": a.get("explanation")}
                     for k, v in anomalies.items() for a in v[:2]][:6],
        "checker": "ferrotx check list-append (adya, strict-serializable)"}


def first_ok_after(shared, t, nodes=None):
    """Seconds from `t` to the first successful operation (through every node of `nodes`:
    the latest of their first ones), or None."""
    with shared.lock:
        lists = [shared.ok_times] if nodes is None else \
            [shared.ok_times_by_node[n] for n in nodes]
        firsts = []
        for times in lists:
            i = bisect.bisect_left(times, t)
            if i == len(times):
                return None
            firsts.append(times[i] - t)
        return round(max(firsts), 3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ferrotx", default=None,
                        help="the binary (default: target/release/ferrotx or target/debug/ferrotx)")
    parser.add_argument("--checker", default=None,
                        help="a ferrotx binary with `check list-append` (default: --ferrotx)")
    parser.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lease-ms", type=int, default=100)
    parser.add_argument("--fault-kinds", default=",".join(ALL_KINDS))
    parser.add_argument("--round-seconds", type=float, default=2.0,
                        help="how long a partition or a kill lasts (0.6-1.0 of it, by seed)")
    parser.add_argument("--heal-seconds", type=float, default=1.0,
                        help="load at full strength after each convergence")
    parser.add_argument("--converge-timeout", type=float, default=60.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--keep", action="store_true",
                        help="keep the run's directory (logs, history) if the run fails")
    parser.add_argument("--keep-always", action="store_true",
                        help="keep the run's directory even if the run passes")
    parser.add_argument("--sabotage", choices=("lost-write", "skip-heal", "g1c"),
                        help="break the run on purpose: the harness must report a failure")
    args = parser.parse_args()

    kinds = [k.strip() for k in args.fault_kinds.split(",") if k.strip()]
    unknown_kinds = [k for k in kinds if k not in ALL_KINDS]
    if unknown_kinds or not kinds:
        parser.error(f"--fault-kinds: unknown {unknown_kinds}; choose from {ALL_KINDS}")
    if args.nodes < 5 and "bridge" in kinds:
        kinds.remove("bridge")  # a ring needs 5 nodes
        if not kinds:
            parser.error("bridge needs --nodes 5")
    if args.ferrotx is None:
        found = [p for p in (os.path.join(ROOT, "target", b, "ferrotx") for b in ("release", "debug"))
                 if os.path.exists(p)]
        if not found:
            parser.error("no target/release/ferrotx or target/debug/ferrotx: give --ferrotx")
        args.ferrotx = found[0]
    args.ferrotx = os.path.abspath(args.ferrotx)
    args.checker = os.path.abspath(args.checker or args.ferrotx)
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces, nftables)")
    for program, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(program) is None:
            missing.append(f"{program} (Debian {package})")
    if missing:
        print("nemesis: missing: " + ", ".join(missing), file=sys.stderr)
        sys.exit(MISSING_EXIT)

    def terminate(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)

    directory = tempfile.mkdtemp(prefix="ferrotx-nemesis-")
    network = NamespaceNetwork(f"ferrotx-nemesis-{os.getpid()}")
    nodes = Nodes(args.ferrotx, args.nodes, args.lease_ms, network, directory)
    passed = False
    summary = {}
    started = time.monotonic()
    try:
        network.create_and_enter()
        nodes.write_config()
        summary, passed = run_nemesis(args, kinds, network, nodes, directory, started)
    except KeyboardInterrupt as error:
        log(f"interrupted ({error or 'Ctrl-C'}); cleaning up")
        summary = {"passed": False, "failures": ["interrupted"]}
    except Fatal as error:
        log(f"fatal: {error}")
        summary = {"passed": False, "failures": [f"fatal: {error}"]}
    finally:
        # Everything this run created goes, whatever happened.
        nodes.stop_all()
        network.destroy()
        keep = (args.keep and not passed) or args.keep_always
        if keep:
            with open(os.path.join(directory, "summary.json"), "w", encoding="utf-8") as file:
                json.dump(summary, file, indent=1)
            summary["kept"] = directory  # node logs, cluster.toml, history.jsonl
            log(f"the run's directory is kept: {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            file.write(text + "\n")
    sys.exit(0 if passed else 1)


def run_nemesis(args, kinds, network, nodes, directory, started):
    lease_s = args.lease_ms / 1000
    rng = random.Random(args.seed)
    plan = schedule(rng, kinds, args.rounds, args.nodes, args.lease_ms, args.round_seconds)
    faults = Faults()
    poller = Poller(nodes, faults, lease_s, started)
    shared = Shared(network, args.nodes, args.seed, started)
    failures = []
    rounds = []
    log(f"{args.nodes} nodes, lease {args.lease_ms} ms, seed {args.seed}, {args.rounds} rounds "
        f"of {kinds}; binary {args.ferrotx}; directory {directory}")
    for node in range(args.nodes):
        nodes.start(node)
    poller.start()
    try:
        formed = poller.wait_until(lambda s: full_strength(s, args.nodes), 60)
        if formed is None:
            raise Fatal(f"the cluster did not form in 60 s: {poller.latest}")
        # The accounts, then every node serves them.
        values = []
        for i in range(ACCOUNTS):
            values += [f"bank:{i}", INITIAL]
        read_through(shared, 0, [("MSET", *values)])
        for node in range(args.nodes):
            read_through(shared, node, [("GET", f"bank:{ACCOUNTS - 1}")])
        log(f"cluster formed in {formed - started:.2f} s; starting the load")
        threads = []
        for i, kind in enumerate(["list"] * 3 + ["bank"] * 2 + ["setincr"]):
            thread = threading.Thread(target=worker, args=(shared, i, kind), daemon=True)
            thread.start()
            threads.append(thread)
        time.sleep(args.heal_seconds)

        for index, entry in enumerate(plan):
            poller.round = index
            kind = entry["kind"]
            status = poller.latest or {}
            cm = status.get("cm")
            target = cm if kind == "isolate-cm" and cm is not None else entry["target"]
            targets = list(range(args.nodes)) if kind == "bridge" else [target]
            kept = kind not in CM_LOSES and target != cm
            record = {"round": index, "kind": kind, "target": target if kind != "bridge" else None,
                      "cm_at_start": cm, "cm_kept_majority": kept,
                      "view_at_start": status.get("configuration")}
            fault_at = time.monotonic()
            faults.begin(targets, kind, fault_at)
            if kind in ("pause", "pause-long"):
                nodes.signal(target, signal.SIGSTOP)
            elif kind == "kill":
                nodes.kill(target)
            else:
                network.drop(drops_for(kind, target, args.nodes))
            log(f"round {index}: {kind} {targets} for {entry['duration_s']} s (CM {cm})")
            time.sleep(entry["duration_s"])
            heal_at = time.monotonic()
            if args.sabotage == "skip-heal" and index == len(plan) - 1:
                log("sabotage: this round's fault is not healed")
            else:
                if kind in ("pause", "pause-long"):
                    nodes.signal(target, signal.SIGCONT)
                elif kind == "kill":
                    nodes.start(target)
                else:
                    network.heal()
                faults.end(heal_at)
            record["duration_s"] = round(heal_at - fault_at, 3)
            # Only a status taken after the heal counts.
            converged = poller.wait_until(
                lambda s: poller.latest_at > heal_at and full_strength(s, args.nodes),
                args.converge_timeout)
            record["converge_s"] = None if converged is None else round(converged - heal_at, 3)
            if converged is None:
                failures.append(f"round {index} ({kind}): no convergence within "
                                f"{args.converge_timeout} s of the heal")
                log(f"round {index}: NOT converged within {args.converge_timeout} s")
                rounds.append(record)
                break
            time.sleep(args.heal_seconds)
            record["first_ok_after_fault_s"] = first_ok_after(shared, fault_at)
            record["first_ok_after_heal_s"] = first_ok_after(shared, heal_at)
            record["targets_serving_after_heal_s"] = first_ok_after(shared, heal_at, targets)
            rounds.append(record)
            log(f"round {index}: converged {record['converge_s']} s after the heal")

        # The final heal: everything, whatever the rounds left.
        poller.round = len(plan)
        shared.stop.set()
        for thread in threads:
            thread.join(REPLY_TIMEOUT + 5)
        heal_at = time.monotonic()
        network.heal()
        for node in range(args.nodes):
            nodes.signal(node, signal.SIGCONT)
            if not nodes.alive(node):
                nodes.kill(node)
                nodes.start(node)
        faults.end(heal_at)
        converged = poller.wait_until(
            lambda s: poller.latest_at > heal_at and full_strength(s, args.nodes),
            args.converge_timeout)
        final_converge = None if converged is None else round(converged - heal_at, 3)
        if converged is None:
            failures.append(f"no convergence within {args.converge_timeout} s of the final heal")
    finally:
        shared.stop.set()

    summary = {
        "command": "python3 scripts/nemesis.py " + " ".join(sys.argv[1:]),
        "ferrotx": args.ferrotx, "seed": args.seed, "nodes": args.nodes,
        "lease_ms": args.lease_ms, "fault_kinds": kinds, "rounds_planned": args.rounds,
        "rounds": rounds,
    }
    if converged is not None:
        final_reads(shared, args, summary, args.sabotage)
    poller.stop.set()
    poller.join(10)
    nodes.check_exits(started)

    history_path = os.path.join(directory, "history.jsonl")
    history = list(shared.history)
    if args.sabotage == "g1c":
        # Two transactions each reading the other's append: a G1c cycle.
        t = history[-1]["time"] + 1 if history else 0
        base = len(history)
        for i, op in enumerate([
                {"type": "invoke", "process": -1, "value": [["append", -1, 1], ["r", -2, None]]},
                {"type": "invoke", "process": -2, "value": [["append", -2, 1], ["r", -1, None]]},
                {"type": "ok", "process": -1, "value": [["append", -1, 1], ["r", -2, [1]]]},
                {"type": "ok", "process": -2, "value": [["append", -2, 1], ["r", -1, [1]]]}]):
            history.append(dict(op, f="txn", index=base + i, time=t + i))
    with open(history_path, "w", encoding="utf-8") as file:
        for op in history:
            file.write(json.dumps(op) + "\n")
    check_history(args, history_path, summary)

    removals = poller.removals
    healthy = [r for r in removals if r["healthy"]]
    failing_healthy = [r for r in healthy
                       if r["round"] is None or r["round"] >= len(rounds)
                       or rounds[r["round"]]["cm_kept_majority"]]
    converge = [r["converge_s"] for r in rounds if r.get("converge_s") is not None]
    summary.update({
        "transactions": shared.counts,
        "fault_rounds": len(rounds),
        "healthy_members_removed": {"count": len(healthy), "in_rounds_cm_kept_majority":
                                    len(failing_healthy), "events": healthy[:20]},
        "members_removed": len(removals),
        "partitions_ever_without_copy": poller.no_copy_events,
        "node_exits": nodes.exits,
        "convergence": {"bound_s": args.converge_timeout, "per_heal_s": converge,
                        "max_s": max(converge) if converge else None,
                        "final_heal_s": final_converge},
        "views": poller.views,
        "client_problems": shared.problems[:20],
        "wall_seconds": round(time.monotonic() - started, 1),
        "history_operations": len(history),
    })
    if args.sabotage:
        summary["sabotage"] = args.sabotage
    anomalies = summary.get("anomalies", {})
    if anomalies.get("valid") is not True:
        failures.append(f"list-append history not shown strictly serializable: "
                        f"valid={anomalies.get('valid')} {anomalies.get('types')} "
                        f"{anomalies.get('error', '')}")
    if summary.get("acknowledged_lost", {}).get("count"):
        failures.append(f"{summary['acknowledged_lost']['count']} acknowledged writes lost")
    bank = summary.get("bank", {})
    if bank.get("audits_not_at_total") or bank.get("final_reads_not_at_total"):
        failures.append("bank total not conserved")
    if summary.get("not_explained", {}).get("count"):
        failures.append(f"{summary['not_explained']['count']} reads not explained by attempts")
    if poller.no_copy_events:
        failures.append(f"{len(poller.no_copy_events)} partitions had no copy")
    if nodes.exits:
        failures.append(f"{len(nodes.exits)} node processes exited unexpectedly")
    if failing_healthy:
        failures.append(f"{len(failing_healthy)} healthy members removed while the CM kept "
                        f"its majority")
    if shared.problems:
        failures.append(f"{len(shared.problems)} unexpected replies")
    if "acknowledged_lost" not in summary:
        failures.append("final reads not done (no convergence)")
    summary["failures"] = failures
    summary["passed"] = not failures
    log(f"{'PASSED' if not failures else 'FAILED'}: {len(rounds)} rounds in "
        f"{summary['wall_seconds']} s; {failures}")
    return summary, not failures


if __name__ == "__main__":
    main()
