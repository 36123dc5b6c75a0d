#!/usr/bin/env python3
"""Measures PostgreSQL on TATP and SmallBank on this machine, beside `ferrotx bench tatp`
and `ferrotx bench smallbank`.

What it does, in order:

1. Finds PostgreSQL's binaries under /usr/lib/postgresql/<version>/bin (the newest
   version that has initdb, pg_ctl, postgres, psql and pgbench); if there are none and we
   are root, installs Debian's packages (`apt-get install -y postgresql
   postgresql-contrib`).
2. Creates a private instance in a fresh temporary directory (owned by the `postgres`
   user when we run as root, since the server refuses to run as root), listening only on
   127.0.0.1 at a free port, with settings for a benchmark on a small machine
   (see SERVER_SETTINGS), and starts it.
3. Loads TATP (--subscribers, FaSST's steady-state population as ferrotx loads it) and
   SmallBank (--accounts, balances of 10000) with INSERT ... SELECT over generate_series,
   then builds the indexes, VACUUM ANALYZEs and checkpoints.
4. Runs each mix with pgbench and the custom scripts of scripts/pgbench (one script per
   transaction type, weighted with `-f script@weight`), `-M prepared -n`, over TCP, for
   every client count of --clients, once with synchronous_commit=on (default durability)
   and once with synchronous_commit=off (set per session through PGOPTIONS), and keeps the
   client count with the most transactions per second for each.
5. For every run, records pgbench's tps, the CPU-seconds the server's processes used
   (from /proc: the postmaster's own and reaped children's times plus its live
   children's, before and after), the CPU-seconds of pgbench itself, and the median and
   p99 latency from pgbench's per-transaction log (`-l`).
6. Stops the server and removes the directory, also on errors, Ctrl-C and SIGTERM.
7. With --ferrotx BIN, runs `BIN bench tatp` and `BIN bench smallbank` at the same scale
   and puts their figures in the same tables, with the ratio ferrotx / PostgreSQL
   (synchronous_commit=off; with --ferrotx-durability sync, ferrotx's `sync` mode against
   synchronous_commit=on).

Prints one table per benchmark and, with --json PATH, writes every number (each client
count tried included).

Usage:
  python3 scripts/postgres_compare.py [--subscribers N] [--accounts N] [--hot-accounts N]
      [--clients 2,4,8,16,32] [--duration S] [--ferrotx target/release/ferrotx]
      [--ferrotx-durability memory|flush|sync]
      [--json PATH]
"""

import argparse
import glob
import itertools
import json
import os
import pwd
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts", "pgbench")
PG_TOOLS = ("initdb", "pg_ctl", "postgres", "psql", "pgbench")

# The mixes: (script in scripts/pgbench, weight, transaction type), as in ferrotx's
# crates/bench/src/tatp.rs and smallbank.rs.
TATP_MIX = [
    ("tatp_get_subscriber_data.sql", 35, "GetSubscriberData"),
    ("tatp_get_new_destination.sql", 10, "GetNewDestination"),
    ("tatp_get_access_data.sql", 35, "GetAccessData"),
    ("tatp_update_subscriber_data.sql", 2, "UpdateSubscriberData"),
    ("tatp_update_location.sql", 14, "UpdateLocation"),
    ("tatp_insert_call_forwarding.sql", 2, "InsertCallForwarding"),
    ("tatp_delete_call_forwarding.sql", 2, "DeleteCallForwarding"),
]
SMALLBANK_MIX = [
    ("smallbank_send_payment.sql", 25, "SendPayment"),
    ("smallbank_amalgamate.sql", 15, "Amalgamate"),
    ("smallbank_balance.sql", 15, "Balance"),
    ("smallbank_deposit_checking.sql", 15, "DepositChecking"),
    ("smallbank_transact_saving.sql", 15, "TransactSaving"),
    ("smallbank_write_check.sql", 15, "WriteCheck"),
]

# postgresql.conf for the benchmark (max_connections, shared_buffers, port and socket
# directory are added from the options). Durable by default (fsync, full_page_writes and
# synchronous_commit on); WAL is kept to a minimum (no replication here), checkpoints are
# pushed past the runs (a CHECKPOINT before each run instead), parallel query and JIT are
# off (short OLTP statements on 2 cores).
SERVER_SETTINGS = """
listen_addresses = '127.0.0.1'
huge_pages = try
work_mem = 16MB
maintenance_work_mem = 1GB
effective_cache_size = 16GB
random_page_cost = 1.1
wal_level = minimal
max_wal_senders = 0
wal_buffers = 64MB
max_wal_size = 16GB
min_wal_size = 1GB
checkpoint_timeout = 1h
checkpoint_completion_target = 0.9
fsync = on
full_page_writes = on
synchronous_commit = on
max_parallel_workers_per_gather = 0
max_parallel_maintenance_workers = 2
jit = off
logging_collector = off
log_min_messages = warning
log_checkpoints = off
"""


class Fatal(Exception):
    """An error with a message for the user (no traceback)."""


def log(message):
    print(message, flush=True)


# --------------------------------------------------------------------------------------
# Finding or installing PostgreSQL
# --------------------------------------------------------------------------------------

def find_pg_bindir():
    """The newest /usr/lib/postgresql/<version>/bin that has every tool we need, or None."""
    def version(path):
        v = os.path.basename(os.path.dirname(path))
        return [int(x) if x.isdigit() else 0 for x in v.split(".")]
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for bindir in candidates:
        if all(os.access(os.path.join(bindir, t), os.X_OK) for t in PG_TOOLS):
            return bindir
    return None


def ensure_postgres(allow_install):
    bindir = find_pg_bindir()
    if bindir:
        return bindir
    if not allow_install:
        raise Fatal("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin with "
                    + ", ".join(PG_TOOLS) + ") and --no-install was given")
    if os.geteuid() != 0:
        raise Fatal("PostgreSQL is not installed and installing it needs root: run "
                    "`apt-get install -y postgresql postgresql-contrib` first")
    log("PostgreSQL not found: installing Debian's packages")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update"],
                ["apt-get", "install", "-y", "postgresql", "postgresql-contrib"]):
        log("+ " + " ".join(cmd))
        result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            tail = "\n".join(result.stdout.strip().splitlines()[-20:])
            raise Fatal("`%s` failed (exit %d):\n%s" % (" ".join(cmd), result.returncode, tail))
    bindir = find_pg_bindir()
    if not bindir:
        raise Fatal("apt-get installed PostgreSQL, but no /usr/lib/postgresql/*/bin has "
                    + ", ".join(PG_TOOLS))
    return bindir


def free_port(first):
    """The first port from `first` on that nobody listens on at 127.0.0.1."""
    for port in range(first, min(first + 1000, 65536)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As the server does: a port whose old connections are in TIME_WAIT is free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise Fatal("no free TCP port in %d..%d" % (first, first + 999))


# --------------------------------------------------------------------------------------
# CPU time from /proc
# --------------------------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(pid):
    """(ppid, own ticks, reaped children's ticks) of a process, or None if it is gone (or
    a zombie: an orphaned postmaster may wait for a reaper that never comes)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    fields = data[data.rindex(")") + 2:].split()
    # fields[0] is field 3 of proc(5) (state): ppid is field 4, utime..cstime 14..17.
    if fields[0] in ("Z", "X"):
        return None
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, utime + stime, cutime + cstime


def server_processes(postmaster):
    """The pids of the postmaster's live children."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st and st[0] == postmaster:
                children.append(int(entry))
    return children


def server_cpu_s(postmaster):
    """CPU-seconds used so far by the server: the postmaster, its reaped children (the
    backends of clients that left, autovacuum workers that ended) and its live children."""
    st = proc_stat(postmaster)
    if st is None:
        raise Fatal("the PostgreSQL server (pid %d) is gone; see its log" % postmaster)
    ticks = st[1] + st[2]
    for pid in server_processes(postmaster):
        child = proc_stat(pid)
        if child:
            ticks += child[1] + child[2]
    return ticks / CLOCK_TICKS


def children_cpu_s():
    """CPU-seconds of this script's waited-for children (pgbench)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# --------------------------------------------------------------------------------------
# The private server
# --------------------------------------------------------------------------------------

class Server:
    """A PostgreSQL instance of our own in a temporary directory."""

    def __init__(self, bindir, port, max_connections, shared_buffers, parent_dir):
        self.bindir = bindir
        self.port = port
        self.postmaster = None
        self.as_postgres = os.geteuid() == 0
        self.dir = tempfile.mkdtemp(prefix="ferrotx-pg-", dir=parent_dir)
        self.data = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "server.log")
        if self.as_postgres:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise Fatal("running as root but there is no `postgres` user to run the "
                            "server as (Debian's postgresql-common package creates it)")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            os.chmod(self.dir, 0o755)
        self.max_connections = max_connections
        self.shared_buffers = shared_buffers
        self.version = subprocess.run([self.tool("postgres"), "--version"],
                                      stdout=subprocess.PIPE, text=True).stdout.strip()

    def tool(self, name):
        return os.path.join(self.bindir, name)

    def as_owner(self, cmd):
        """`cmd` run as the user that owns the data directory."""
        if not self.as_postgres:
            return cmd
        if shutil.which("runuser"):
            return ["runuser", "-u", "postgres", "--"] + cmd
        return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(map(shlex.quote, cmd))]

    def run_owner(self, cmd, what, **kw):
        result = subprocess.run(self.as_owner(cmd), cwd=self.dir, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, **kw)
        if result.returncode != 0:
            raise Fatal("%s failed (exit %d):\n%s%s" % (what, result.returncode,
                                                         result.stdout, self.log_tail()))
        return result.stdout

    def log_tail(self, lines=20):
        try:
            with open(self.logfile) as f:
                tail = f.read().splitlines()[-lines:]
        except OSError:
            return ""
        return "\nlast lines of the server log (%s):\n%s" % (self.logfile, "\n".join(tail))

    def start(self):
        log("PostgreSQL: %s, data directory %s, port %d" % (self.version, self.data, self.port))
        self.run_owner([self.tool("initdb"), "-D", self.data, "-U", "postgres",
                        "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"], "initdb")
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# postgres_compare.py\n")
            f.write(SERVER_SETTINGS)
            f.write("port = %d\n" % self.port)
            f.write("unix_socket_directories = '%s'\n" % self.dir)
            f.write("max_connections = %d\n" % self.max_connections)
            f.write("shared_buffers = %s\n" % self.shared_buffers)
        # Its own session, so that Ctrl-C in the terminal reaches only this script, which
        # then stops the server in order.
        self.run_owner([self.tool("pg_ctl"), "-D", self.data, "-l", self.logfile, "-w",
                        "-t", "120", "start"], "starting the server", start_new_session=True)
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            self.postmaster = int(f.readline())

    def stop(self):
        """Stops the server (fast, then immediate, then SIGKILL) and removes the directory."""
        if self.postmaster is not None and proc_stat(self.postmaster) is not None:
            for mode in ("fast", "immediate"):
                result = subprocess.run(
                    self.as_owner([self.tool("pg_ctl"), "-D", self.data, "-m", mode, "-w",
                                   "-t", "60", "stop"]),
                    cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if result.returncode == 0:
                    break
            if proc_stat(self.postmaster) is not None:
                log("warning: the server did not stop: killing pid %d" % self.postmaster)
                for pid in server_processes(self.postmaster) + [self.postmaster]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            # Wait for the last backends to exit before removing their files.
            deadline = time.time() + 10
            while time.time() < deadline and (proc_stat(self.postmaster) is not None
                                              or server_processes(self.postmaster)):
                time.sleep(0.1)
        shutil.rmtree(self.dir, ignore_errors=True)
        log("PostgreSQL stopped, %s removed" % self.dir)

    def conninfo(self, db):
        return ["-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db]

    def psql(self, db, sql, what):
        """Runs SQL (stopping at the first error) and returns its unaligned output."""
        cmd = [self.tool("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"] \
            + self.conninfo(db)
        result = subprocess.run(cmd, input=sql, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise Fatal("%s failed (psql exit %d):\n%s%s" % (what, result.returncode,
                                                              result.stdout, self.log_tail()))
        return result.stdout

    def wait_for_backends(self, baseline, timeout=10.0):
        """Waits until the server is back to `baseline` children (clients' backends have
        exited and been reaped, so their CPU time is in the postmaster's)."""
        deadline = time.time() + timeout
        while time.time() < deadline and len(server_processes(self.postmaster)) > baseline:
            time.sleep(0.05)
        time.sleep(0.1)


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------

def random_letters(n):
    """SQL for a string of n random capital letters."""
    return " || ".join(["chr(65 + floor(random() * 26)::int)"] * n)


def permutations_values():
    """VALUES rows (perm, pos, type): the 24 orders of the types 1..4. A subscriber takes
    the first n types of one order, n uniform in 1..4: n distinct types, uniformly."""
    rows = []
    for perm, order in enumerate(itertools.permutations((1, 2, 3, 4))):
        for pos, t in enumerate(order, 1):
            rows.append("(%d, %d, %d)" % (perm, pos, t))
    return ", ".join(rows)


def tatp_load_sql(subscribers):
    bits = ", ".join("(random() < 0.5)::int" for _ in range(10))
    hexes = ", ".join("floor(random() * 16)::int" for _ in range(10))
    bytes2 = ", ".join("floor(random() * 256)::int" for _ in range(10))

    def cols(prefix, kind):
        return ",\n    ".join("%s_%d %s NOT NULL" % (prefix, i, kind) for i in range(1, 11))

    return """
BEGIN;
-- Created and filled in one transaction: with wal_level = minimal the load skips the WAL.
CREATE TABLE subscriber (
    s_id integer NOT NULL,
    sub_nbr varchar(15) NOT NULL,
    {bit_cols},
    {hex_cols},
    {byte2_cols},
    msc_location integer NOT NULL,
    vlr_location integer NOT NULL
) WITH (fillfactor = 90);
CREATE TABLE access_info (
    s_id integer NOT NULL,
    ai_type smallint NOT NULL,
    data1 smallint NOT NULL,
    data2 smallint NOT NULL,
    data3 char(3) NOT NULL,
    data4 char(5) NOT NULL
);
CREATE TABLE special_facility (
    s_id integer NOT NULL,
    sf_type smallint NOT NULL,
    is_active smallint NOT NULL,
    error_cntrl smallint NOT NULL,
    data_a smallint NOT NULL,
    data_b char(5) NOT NULL
) WITH (fillfactor = 90);
CREATE TABLE call_forwarding (
    s_id integer NOT NULL,
    sf_type smallint NOT NULL,
    start_time smallint NOT NULL,
    end_time smallint NOT NULL,
    numberx varchar(15) NOT NULL
);

-- Subscribers 1..P; sub_nbr is the id as 15 zero-padded digits.
INSERT INTO subscriber
SELECT s, lpad(s::text, 15, '0'), {bits}, {hexes}, {bytes2},
       floor(random() * 2147483647)::int, floor(random() * 2147483647)::int
  FROM generate_series(1, {P}) AS s;

-- 1 to 4 distinct types per subscriber (count uniform in 1..4).
CREATE TEMP TABLE perms (perm int, pos int, t int);
INSERT INTO perms VALUES {perms};

INSERT INTO access_info
WITH pick AS MATERIALIZED (
    SELECT s, 1 + floor(random() * 4)::int AS n, floor(random() * 24)::int AS perm
      FROM generate_series(1, {P}) AS s)
SELECT pick.s, p.t, floor(random() * 256)::int, floor(random() * 256)::int,
       {letters3}, {letters5}
  FROM pick JOIN perms p ON p.perm = pick.perm AND p.pos <= pick.n;

-- 1 to 4 facilities per subscriber, each active with probability 0.85.
INSERT INTO special_facility
WITH pick AS MATERIALIZED (
    SELECT s, 1 + floor(random() * 4)::int AS n, floor(random() * 24)::int AS perm
      FROM generate_series(1, {P}) AS s)
SELECT pick.s, p.t, (random() < 0.85)::int, floor(random() * 256)::int,
       floor(random() * 256)::int, {letters5}
  FROM pick JOIN perms p ON p.perm = pick.perm AND p.pos <= pick.n;

-- FaSST's steady state: for each facility, each start time 0, 8, 16 with probability 1/2,
-- with an end time uniform in 1..24.
INSERT INTO call_forwarding
SELECT sf.s_id, sf.sf_type, st.start_time, 1 + floor(random() * 24)::int,
       lpad(floor(random() * 1e15)::bigint::text, 15, '0')
  FROM special_facility sf CROSS JOIN (VALUES (0), (8), (16)) AS st(start_time)
 WHERE random() < 0.5;

ALTER TABLE subscriber ADD PRIMARY KEY (s_id);
CREATE UNIQUE INDEX subscriber_sub_nbr ON subscriber (sub_nbr);
ALTER TABLE access_info ADD PRIMARY KEY (s_id, ai_type);
ALTER TABLE special_facility ADD PRIMARY KEY (s_id, sf_type);
ALTER TABLE call_forwarding ADD PRIMARY KEY (s_id, sf_type, start_time);
COMMIT;
VACUUM (FREEZE, ANALYZE);
CHECKPOINT;
""".format(P=int(subscribers), bit_cols=cols("bit", "smallint"),
           hex_cols=cols("hex", "smallint"), byte2_cols=cols("byte2", "smallint"),
           bits=bits, hexes=hexes, bytes2=bytes2, perms=permutations_values(),
           letters3=random_letters(3), letters5=random_letters(5))


def smallbank_load_sql(accounts, initial_balance):
    return """
BEGIN;
CREATE TABLE accounts (custid bigint NOT NULL, name varchar(64) NOT NULL);
CREATE TABLE savings (custid bigint NOT NULL, bal bigint NOT NULL) WITH (fillfactor = 80);
CREATE TABLE checking (custid bigint NOT NULL, bal bigint NOT NULL) WITH (fillfactor = 80);
-- Account ids 0..N-1 as in ferrotx (its hot set is 0..hot-1).
INSERT INTO accounts SELECT i, 'customer ' || i FROM generate_series(0, {N} - 1) AS i;
INSERT INTO savings SELECT i, {B} FROM generate_series(0, {N} - 1) AS i;
INSERT INTO checking SELECT i, {B} FROM generate_series(0, {N} - 1) AS i;
ALTER TABLE accounts ADD PRIMARY KEY (custid);
ALTER TABLE savings ADD PRIMARY KEY (custid);
ALTER TABLE checking ADD PRIMARY KEY (custid);
COMMIT;
VACUUM (FREEZE, ANALYZE);
CHECKPOINT;
""".format(N=int(accounts), B=int(initial_balance))


def load(server, bench, args):
    db = bench
    server.psql("postgres", "CREATE DATABASE %s;" % db, "creating database " + db)
    start = time.time()
    if bench == "tatp":
        server.psql(db, tatp_load_sql(args.subscribers), "loading TATP")
        counts = server.psql(db, """
SELECT (SELECT count(*) FROM subscriber), (SELECT count(*) FROM access_info),
       (SELECT count(*) FROM special_facility), (SELECT count(*) FROM call_forwarding),
       (SELECT avg(is_active) FROM special_facility);""", "counting rows").strip().split("|")
        p = args.subscribers
        log("  loaded TATP in %.1f s: %s subscribers, access_info %.2f per subscriber "
            "(expect 2.5), special_facility %.2f (2.5, %.1f%% active, expect 85%%), "
            "call_forwarding %.2f (3.75)"
            % (time.time() - start, counts[0], int(counts[1]) / p, int(counts[2]) / p,
               100 * float(counts[4]), int(counts[3]) / p))
    else:
        server.psql(db, smallbank_load_sql(args.accounts, args.initial_balance),
                    "loading SmallBank")
        log("  loaded SmallBank in %.1f s: %d accounts, hot set %d"
            % (time.time() - start, args.accounts, args.hot_accounts))


# --------------------------------------------------------------------------------------
# pgbench runs
# --------------------------------------------------------------------------------------

def tatp_a(p):
    """TATP's constant A for the non-uniform subscriber ids."""
    return 65535 if p <= 1000000 else 1048575 if p <= 10000000 else 2097151


def bench_setup(bench, args):
    """(the mix, pgbench's -D definitions) of a benchmark."""
    if bench == "tatp":
        return TATP_MIX, {"P": args.subscribers, "A": tatp_a(args.subscribers)}
    return SMALLBANK_MIX, {"accounts": args.accounts, "hot_accounts": args.hot_accounts,
                           "hot_percent": args.hot_percent}


def percentile(sorted_values, q):
    """The q-quantile (0..1) of sorted values, by the nearest rank."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), int(round(q * len(sorted_values) + 0.5))))
    return sorted_values[rank - 1]


def read_latencies(prefix):
    """Latencies in microseconds from pgbench's per-transaction logs (one file per
    thread, `client_id transaction_no time script_no time_epoch time_us [...]`); failed
    transactions ("failed" in the time column) are left out."""
    latencies = []
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    latencies.append(int(fields[2]))
    latencies.sort()
    return latencies


def number(pattern, text, cast=float, default=None):
    m = re.search(pattern, text, re.M)
    return cast(m.group(1)) if m else default


def run_pgbench(server, bench, args, clients, duration, sync_commit, measure=True):
    mix, defines = bench_setup(bench, args)
    threads = max(1, min(clients, args.threads))
    logdir = tempfile.mkdtemp(prefix="pgbench-log-", dir=server.dir)
    prefix = os.path.join(logdir, "log")
    cmd = [server.tool("pgbench"), "-n", "-M", "prepared", "-c", str(clients),
           "-j", str(threads), "-T", str(duration), "--max-tries", str(args.max_tries)]
    if measure:
        cmd += ["-l", "--log-prefix", prefix]
    for name, value in defines.items():
        cmd += ["-D", "%s=%s" % (name, value)]
    for script, weight, _ in mix:
        cmd += ["-f", "%s@%d" % (os.path.join(SCRIPTS, script), weight)]
    cmd += server.conninfo(bench)[:-2] + [bench]
    env = dict(os.environ, PGOPTIONS="-c synchronous_commit=%s" % sync_commit)

    if measure:
        # A fresh checkpoint before each run, so no run pays for another's dirty pages.
        server.psql(bench, "CHECKPOINT;", "checkpoint")
    baseline = len(server_processes(server.postmaster))
    cpu0, client0, t0 = server_cpu_s(server.postmaster), children_cpu_s(), time.time()
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wall = time.time() - t0
    client_cpu = children_cpu_s() - client0
    server.wait_for_backends(baseline)
    server_cpu = server_cpu_s(server.postmaster) - cpu0
    output = result.stdout + result.stderr
    if result.returncode != 0:
        shutil.rmtree(logdir, ignore_errors=True)
        raise Fatal("pgbench failed (exit %d): %s\n%s%s" % (
            result.returncode, " ".join(cmd), "\n".join(output.splitlines()[-30:]),
            server.log_tail()))
    if not measure:
        shutil.rmtree(logdir, ignore_errors=True)
        return None

    latencies = read_latencies(prefix)
    shutil.rmtree(logdir, ignore_errors=True)
    committed = number(r"number of transactions actually processed: (\d+)", output, int, 0)
    failed = number(r"number of failed transactions: (\d+)", output, int, 0)
    retried = number(r"number of transactions retried: (\d+)", output, int, 0)
    tps = number(r"^tps = ([\d.]+)", output)
    if tps is None or not committed:
        raise Fatal("could not read pgbench's results:\n" + output)
    types = {}
    for (script, weight, name), m in zip(mix, re.finditer(
            r"^ - (\d+) transactions \(([\d.]+)% of total, tps = ([\d.]+)\)", output, re.M)):
        types[name] = {"weight": weight, "transactions": int(m.group(1)),
                       "share_percent": float(m.group(2)), "tps": float(m.group(3))}
    return {
        "clients": clients,
        "threads": threads,
        "synchronous_commit": sync_commit,
        "duration_s": duration,
        "wall_s": wall,
        "transactions": committed,
        "failed": failed,
        "retried": retried,
        "tps": tps,
        "server_cpu_s": server_cpu,
        "pgbench_cpu_s": client_cpu,
        "tps_per_server_cpu_s": committed / server_cpu if server_cpu > 0 else None,
        "tps_per_cpu_s_with_clients": (committed / (server_cpu + client_cpu)
                                       if server_cpu + client_cpu > 0 else None),
        "latency_us": {"p50": percentile(latencies, 0.50), "p99": percentile(latencies, 0.99),
                       "p999": percentile(latencies, 0.999), "samples": len(latencies)},
        "types": types,
        "command": " ".join(cmd),
    }


def sweep(server, bench, args):
    """Every client count at both durability settings; the best of each."""
    results = {}
    log("  warm-up: %d clients, %g s" % (args.clients[-1], args.warmup))
    if args.warmup > 0:
        run_pgbench(server, bench, args, args.clients[-1], args.warmup, "off", measure=False)
    for sync_commit in ("on", "off"):
        runs = []
        for clients in args.clients:
            r = run_pgbench(server, bench, args, clients, args.duration, sync_commit)
            runs.append(r)
            log("  synchronous_commit=%-3s clients %3d: %9.0f txn/s  %9.0f txn/server-CPU-s  "
                "%9.0f txn/CPU-s incl. pgbench  p50 %7d us  p99 %7d us%s"
                % (sync_commit, clients, r["tps"], r["tps_per_server_cpu_s"] or 0,
                   r["tps_per_cpu_s_with_clients"] or 0, r["latency_us"]["p50"] or 0,
                   r["latency_us"]["p99"] or 0,
                   "  (%d failed, %d retried)" % (r["failed"], r["retried"])
                   if r["failed"] or r["retried"] else ""))
        best = max(runs, key=lambda r: r["tps"])
        if len(runs) > 1 and best["clients"] == args.clients[-1]:
            log("  note: synchronous_commit=%s is best at the most clients tried (%d); more "
                "may do better (--clients)" % (sync_commit, best["clients"]))
        results["synchronous_commit_" + sync_commit] = {"best": best, "runs": runs}
    return results


# --------------------------------------------------------------------------------------
# ferrotx
# --------------------------------------------------------------------------------------

def wait_for_binary(path, timeout=300):
    """The binary may be rebuilt while we run: wait for it to be back."""
    deadline = time.time() + timeout
    while not os.access(path, os.X_OK):
        if time.time() > deadline:
            raise Fatal("ferrotx binary %s is missing" % path)
        log("  %s is missing (being rebuilt?): waiting" % path)
        time.sleep(5)


def run_ferrotx(binary, bench, args):
    nodes = args.ferrotx_nodes
    if bench == "tatp":
        per_node = args.subscribers // nodes
        scale = ["--subscribers-per-node", str(per_node)]
        if per_node * nodes != args.subscribers:
            log("  note: ferrotx loads %d subscribers (%d per node)" % (per_node * nodes,
                                                                        per_node))
    else:
        per_node = args.accounts // nodes
        scale = ["--accounts-per-node", str(per_node), "--hot-accounts-per-node",
                 str(max(1, args.hot_accounts // nodes)), "--hot-percent",
                 str(args.hot_percent), "--initial-balance", str(args.initial_balance)]
    # Like PostgreSQL's client counts, ferrotx's offered load is swept (coroutines per
    # node, on one cluster loaded once) and the best throughput is kept.
    prefix_dir = tempfile.mkdtemp(prefix="ferrotx-%s-" % bench)
    prefix = os.path.join(prefix_dir, "sweep")
    base = [binary, "bench", bench, "--duration", str(args.duration), "--nodes", str(nodes),
            "--sweep-coroutines", args.ferrotx_coroutines,
            "--durability", args.ferrotx_durability] + scale
    try:
        for attempt in range(3):
            wait_for_binary(binary)
            cmd = base + ["--sweep", prefix]
            log("+ " + " ".join(cmd))
            result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            if result.returncode == 0:
                break
            if not os.access(binary, os.X_OK) and attempt < 2:
                continue  # replaced while it started: try again
            raise Fatal("ferrotx failed (exit %d): %s\n%s" % (
                result.returncode, " ".join(cmd), "\n".join(result.stdout.splitlines()[-20:])))
        with open(prefix + ".json") as f:
            sweep_report = json.load(f)
    finally:
        shutil.rmtree(prefix_dir, ignore_errors=True)
    runs = []
    for report in sweep_report["runs"]:
        opts = report.get("options", {})
        coroutines = opts.get("coroutines", 0) * opts.get("threads", 1) * opts.get(
            "client_nodes", nodes)
        run = {
            "coroutines_per_thread": opts.get("coroutines"),
            "coroutines": coroutines,
            "nodes": opts.get("nodes"),
            "replicas": opts.get("replicas"),
            "throughput_per_s": report["throughput_per_s"],
            "throughput_per_cpu_s": report["throughput_per_cpu_s"],
            "cpu_s": report.get("cpu_s"),
            "abort_rate": report.get("abort_rate"),
            "latency_us": {"p50": report["latency_us"]["p50"],
                           "p99": report["latency_us"]["p99"]},
            "checks_ok": report.get("checks", {}).get("ok"),
        }
        log("  ferrotx %3d coroutines: %9.0f txn/s  %9.0f txn/CPU-s  p50 %7.1f us  p99 %7.1f us"
            % (coroutines, run["throughput_per_s"], run["throughput_per_cpu_s"],
               run["latency_us"]["p50"], run["latency_us"]["p99"]))
        runs.append(run)
    best = dict(max(runs, key=lambda r: r["throughput_per_s"]))
    best["command"] = " ".join(base + ["--sweep", "PREFIX"])
    best["durability"] = args.ferrotx_durability
    best["runs"] = runs
    return best


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------

def fmt(value, digits=0):
    if value is None:
        return "-"
    return "{:,.{}f}".format(value, digits)


def ratio(a, b):
    return "x%.2f" % (a / b) if a is not None and b else "-"


def table(title, results):
    header = ("system", "clients", "txn/s", "txn/CPU-s server", "txn/CPU-s all",
              "p50 us", "p99 us")
    rows = []
    for sync in ("on", "off"):
        best = results["synchronous_commit_" + sync]["best"]
        rows.append(("PostgreSQL synchronous_commit=" + sync, str(best["clients"]),
                     fmt(best["tps"]), fmt(best["tps_per_server_cpu_s"]),
                     fmt(best["tps_per_cpu_s_with_clients"]),
                     fmt(best["latency_us"]["p50"]), fmt(best["latency_us"]["p99"])))
    fx = results.get("ferrotx")
    if fx:
        # Durable against durable: ferrotx's `sync` mode beside synchronous_commit=on,
        # its `memory` and `flush` modes beside synchronous_commit=off.
        against = "on" if fx.get("durability") == "sync" else "off"
        pg = results["synchronous_commit_" + against]["best"]
        rows.append(("ferrotx (%s nodes, %s replicas, %s)" % (fx["nodes"], fx["replicas"],
                                                              fx.get("durability", "memory")),
                     "%d co" % fx["coroutines"], fmt(fx["throughput_per_s"]), "-",
                     fmt(fx["throughput_per_cpu_s"]), fmt(fx["latency_us"]["p50"], 1),
                     fmt(fx["latency_us"]["p99"], 1)))
        rows.append(("ferrotx / PostgreSQL (sync %s)" % against, "",
                     ratio(fx["throughput_per_s"], pg["tps"]), "",
                     ratio(fx["throughput_per_cpu_s"], pg["tps_per_cpu_s_with_clients"]),
                     ratio(fx["latency_us"]["p50"], pg["latency_us"]["p50"]),
                     ratio(fx["latency_us"]["p99"], pg["latency_us"]["p99"])))
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i])
                         for i, c in enumerate(r))

    out = [title, line(header), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(
        description="PostgreSQL on TATP and SmallBank with pgbench, beside ferrotx",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--subscribers", type=int, default=3000000,
                   help="TATP subscribers (FaSST's scale: 1 M per node on ferrotx's 3 nodes)")
    p.add_argument("--accounts", type=int, default=300000, help="SmallBank accounts")
    p.add_argument("--hot-accounts", type=int, default=12000,
                   help="SmallBank accounts in the hot set")
    p.add_argument("--hot-percent", type=int, default=90,
                   help="percentage of SmallBank transactions on the hot set")
    p.add_argument("--initial-balance", type=int, default=10000,
                   help="SmallBank savings and checking balances at the start")
    p.add_argument("--clients", default="2,4,8,16,32",
                   help="pgbench client counts to try (comma-separated)")
    p.add_argument("--threads", type=int, default=2,
                   help="pgbench threads (-j), at most the client count")
    p.add_argument("--duration", type=int, default=10, help="seconds per run (pgbench -T)")
    p.add_argument("--warmup", type=int, default=3,
                   help="seconds of unmeasured pgbench before each benchmark's runs")
    p.add_argument("--max-tries", type=int, default=10,
                   help="pgbench --max-tries (retries after deadlocks or serialization "
                        "failures; none are expected)")
    p.add_argument("--benchmarks", default="tatp,smallbank",
                   help="which benchmarks to run (comma-separated)")
    p.add_argument("--shared-buffers", default="4GB", help="PostgreSQL shared_buffers")
    p.add_argument("--port", type=int, default=54329,
                   help="first TCP port to try for the server (on 127.0.0.1)")
    p.add_argument("--tmpdir", default=tempfile.gettempdir(),
                   help="where the temporary data directory goes")
    p.add_argument("--no-install", action="store_true",
                   help="fail instead of installing PostgreSQL with apt-get")
    p.add_argument("--ferrotx", metavar="BIN", default=None,
                   help="also run BIN bench tatp / bench smallbank at the same scale")
    p.add_argument("--ferrotx-coroutines", default="8,20,32,48,64",
                   help="coroutines per node thread that ferrotx runs with, one run each on "
                        "one loaded cluster; the best throughput is kept, as for "
                        "PostgreSQL's clients")
    p.add_argument("--ferrotx-durability", default="memory",
                   choices=("memory", "flush", "sync"),
                   help="ferrotx's durability mode (bench --durability); `sync` is compared "
                        "with synchronous_commit=on, the others with synchronous_commit=off")
    p.add_argument("--ferrotx-nodes", type=int, default=3,
                   help="ferrotx node processes (the scale is split evenly among them)")
    p.add_argument("--json", metavar="PATH", default=None, help="write every number here")
    args = p.parse_args()
    try:
        args.clients = sorted({int(c) for c in args.clients.split(",") if c.strip()})
    except ValueError:
        p.error("--clients must be comma-separated integers")
    if not args.clients or min(args.clients) < 1:
        p.error("--clients needs at least one count >= 1")
    args.benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    for b in args.benchmarks:
        if b not in ("tatp", "smallbank"):
            p.error("unknown benchmark %r (tatp, smallbank)" % b)
    if args.subscribers < 1:
        p.error("--subscribers must be at least 1")
    if args.accounts < 2 or not 2 <= args.hot_accounts <= args.accounts:
        p.error("need --accounts >= 2 and 2 <= --hot-accounts <= --accounts")
    if not 0 <= args.hot_percent <= 100:
        p.error("--hot-percent must be in 0..100")
    if args.duration <= 0:
        p.error("--duration must be positive")
    if args.ferrotx:
        args.ferrotx = os.path.abspath(args.ferrotx)
    return args


def on_signal(signum, frame):
    # SIGTERM and SIGHUP unwind like Ctrl-C, so the finally blocks stop the server.
    raise KeyboardInterrupt("signal %d" % signum)


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    for script in TATP_MIX + SMALLBANK_MIX:
        if not os.path.exists(os.path.join(SCRIPTS, script[0])):
            raise Fatal("missing pgbench script %s" % os.path.join(SCRIPTS, script[0]))

    bindir = ensure_postgres(not args.no_install)
    port = free_port(args.port)
    report = {
        "settings": {k: v for k, v in vars(args).items()},
        "machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())},
        "postgres": {"bindir": bindir, "port": port, "server_settings": SERVER_SETTINGS.strip()
                     .splitlines()},
    }
    results = {}
    server = Server(bindir, port, max(args.clients) + 20, args.shared_buffers, args.tmpdir)
    report["postgres"]["version"] = server.version
    try:
        server.start()
        for bench in args.benchmarks:
            log("%s:" % bench)
            load(server, bench, args)
            results[bench] = sweep(server, bench, args)
    finally:
        # A second Ctrl-C must not interrupt the cleanup.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, on_signal)

    if args.ferrotx:
        for bench in args.benchmarks:
            log("ferrotx %s:" % bench)
            results[bench]["ferrotx"] = run_ferrotx(args.ferrotx, bench, args)

    report.update(results)
    print()
    titles = {
        "tatp": "TATP, %d subscribers" % args.subscribers,
        "smallbank": "SmallBank, %d accounts (%d hot, %d%% of transactions)"
                     % (args.accounts, args.hot_accounts, args.hot_percent),
    }
    for bench in args.benchmarks:
        print(table("%s, best of clients %s, %g s per run (%s):" % (
            titles[bench], ",".join(map(str, args.clients)), args.duration,
            server.version), results[bench]))
        print()
    print("txn/CPU-s server: per CPU-second of the PostgreSQL processes; txn/CPU-s all: "
          "also counting pgbench's (ferrotx's figure counts its node processes, which run "
          "the clients too). Latencies in microseconds.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        log("wrote " + args.json)


if __name__ == "__main__":
    try:
        main()
    except Fatal as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
