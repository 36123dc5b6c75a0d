"""Processes and a raw RESP client for the Redis client suites.

- `Servers` starts what the suites talk to: a ferrotx local cluster (`ferrotx cluster
  local` on free ports) and a private redis-server (loopback, a free port, no
  persistence, one database, in a temporary directory), and stops both, also on
  errors, Ctrl-C and SIGTERM (see run.py).
- `RespConn` is a minimal client that sends commands and returns each reply both as the
  exact bytes the server sent and parsed, for RESP2 and RESP3 alike.

Standard library only.
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HOST = "127.0.0.1"


class Fatal(Exception):
    """Something the suites need is missing or did not start: a message, no traceback."""


def log(message):
    print(message, flush=True)


# ---------------------------------------------------------------------------------------
# Free ports


def _bindable(port, kind):
    sock = socket.socket(socket.AF_INET, kind)
    try:
        sock.bind((HOST, port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def free_port_range(count, kind=socket.SOCK_STREAM, avoid=()):
    """The first of `count` consecutive ports of `kind` free on loopback now (away from
    the ports of `avoid`, and from the defaults 6379, 7000.. and 7379..)."""
    rng = random.Random(os.getpid() ^ int(time.time() * 1000))
    for _ in range(500):
        base = rng.randrange(21000, 59000)
        ports = range(base, base + count)
        if any(port in avoid for port in ports):
            continue
        if all(_bindable(port, kind) for port in ports):
            return base
    raise Fatal(f"found no {count} consecutive free ports on {HOST}")


# ---------------------------------------------------------------------------------------
# Processes


class Process:
    """A child in a process group of its own: stopping it stops everything it started."""

    def __init__(self, name, argv, cwd=None, stdout=None):
        self.name = name
        self.argv = argv
        self.log_path = None
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if stdout is not None else subprocess.DEVNULL,
            start_new_session=True,
        )

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=10.0):
        """SIGTERM to the group, then SIGKILL after `timeout` seconds."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop in {timeout:.0f} s: killing it")
        # Whatever is left of the group (a node whose parent died first).
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def wait_for_ping(port, what, proc, timeout=30.0):
    """Waits until the server on `port` answers PING with +PONG."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not proc.alive():
            raise Fatal(f"{what} exited ({proc.proc.returncode}) before answering on port {port}")
        try:
            with socket.create_connection((HOST, port), timeout=2) as sock:
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                reply = sock.recv(64)
                if reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH"):
                    return
        except OSError as error:
            last = error
        time.sleep(0.05)
    raise Fatal(f"{what} did not answer PING on port {port} in {timeout:.0f} s ({last})")


class Servers:
    """A ferrotx local cluster and a redis-server, both on free loopback ports."""

    def __init__(self, ferrotx_bin, nodes=3, replicas=3, redis_server="redis-server",
                 cluster_args=()):
        self.ferrotx_bin = ferrotx_bin
        # Further arguments of `ferrotx cluster local`.
        self.cluster_args = list(cluster_args)
        self.nodes = nodes
        self.replicas = replicas
        self.redis_server = redis_server
        self.tmp = tempfile.mkdtemp(prefix="ferrotx-redis-tests-")
        self.cluster = None
        self.redis = None
        self.ferrotx_ports = []
        self.redis_port = None
        # A second pair with a password (requirepass), started on first use.
        self.password = "sesame"
        self.auth_node = None
        self.auth_redis = None
        self.auth_ports = None

    def start(self):
        self._start_redis()
        self._start_cluster()
        return self

    def _start_redis(self, extra=(), name="redis-server"):
        for attempt in range(5):
            port = free_port_range(1)
            argv = [
                self.redis_server,
                "--port", str(port),
                "--bind", HOST,
                "--save", "",
                "--appendonly", "no",
                "--databases", "1",
                "--dir", self.tmp,
                "--daemonize", "no",
                "--logfile", os.path.join(self.tmp, f"{name}.log"),
                *extra,
            ]
            proc = Process(name, argv, cwd=self.tmp)
            try:
                wait_for_ping(port, name, proc, timeout=15)
            except Fatal:
                proc.stop()
                if attempt == 4:
                    raise
                continue
            if not extra:
                self.redis, self.redis_port = proc, port
            return proc, port

    def password_pair(self):
        """(ferrotx port, redis port) of a one-node ferrotx and a redis-server that both
        require the password `self.password`; started on first use."""
        if self.auth_ports is not None:
            return self.auth_ports
        self.auth_redis, redis_port = self._start_redis(
            ("--requirepass", self.password), "redis-server-auth")
        for attempt in range(5):
            udp = free_port_range(1, socket.SOCK_DGRAM)
            resp = free_port_range(1, avoid={udp})
            config = os.path.join(self.tmp, "auth.toml")
            with open(config, "w", encoding="utf-8") as file:
                file.write(
                    "id = 1\nthreads_per_node = 1\nreplicas = 1\npartition_count = 4\n"
                    f'[resp]\nrequirepass = "{self.password}"\n'
                    '[[member]]\nnode = 0\nfailure_domain = "a"\nhost = "127.0.0.1"\n'
                    f'rpc_port_base = {udp}\nresp = "127.0.0.1:{resp}"\n')
            log_path = os.path.join(self.tmp, f"auth-node-{attempt}.log")
            with open(log_path, "wb") as out:
                self.auth_node = Process(
                    "ferrotx node (requirepass)",
                    [self.ferrotx_bin, "node", "--config", config, "--id", "0"], stdout=out)
            self.auth_node.log_path = log_path
            try:
                wait_for_ping(resp, "ferrotx node", self.auth_node)
            except Fatal:
                self.auth_node.stop()
                if attempt == 4:
                    raise
                continue
            self.auth_ports = (resp, redis_port)
            return self.auth_ports

    def _start_cluster(self):
        for attempt in range(5):
            udp = free_port_range(self.nodes, socket.SOCK_DGRAM)
            resp = free_port_range(self.nodes, avoid=set(range(udp, udp + self.nodes)))
            argv = [
                self.ferrotx_bin, "cluster", "local",
                "--nodes", str(self.nodes),
                "--replicas", str(self.replicas),
                "--port-base", str(udp),
                "--resp-port-base", str(resp),
                "--config-out", os.path.join(self.tmp, "cluster.toml"),
                *self.cluster_args,
            ]
            log_path = os.path.join(self.tmp, f"cluster-{attempt}.log")
            with open(log_path, "wb") as out:
                self.cluster = Process("ferrotx cluster local", argv, stdout=out)
            self.cluster.log_path = log_path
            ports = [resp + i for i in range(self.nodes)]
            try:
                for port in ports:
                    wait_for_ping(port, "ferrotx cluster local", self.cluster)
                self.ferrotx_ports = ports
                return
            except Fatal as error:
                self.cluster.stop()
                with open(log_path, "rb") as out:
                    tail = out.read()[-2000:].decode(errors="replace")
                if attempt == 4:
                    raise Fatal(f"{error}\n{tail}")
                log(f"ferrotx cluster did not start ({error}); trying other ports")

    def check_alive(self):
        """Fails if a server died under the tests."""
        if self.cluster is not None and not self.cluster.alive():
            with open(self.cluster.log_path, "rb") as out:
                tail = out.read()[-2000:].decode(errors="replace")
            raise Fatal(f"the ferrotx cluster exited ({self.cluster.proc.returncode}):\n{tail}")
        if self.redis is not None and not self.redis.alive():
            raise Fatal(f"redis-server exited ({self.redis.proc.returncode})")

    def stop(self):
        for proc in (self.cluster, self.redis, self.auth_node, self.auth_redis):
            if proc is not None:
                proc.stop()
        self.cluster = self.redis = self.auth_node = self.auth_redis = None
        shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# A raw RESP client



def node_rss_bytes(cluster_pid):
    """Resident memory (VmRSS) of the node processes `ferrotx cluster local` started,
    summed, and how many there are."""
    total = 0
    children = []
    task_dir = f"/proc/{cluster_pid}/task"
    for task in os.listdir(task_dir):
        with open(f"{task_dir}/{task}/children", encoding="ascii") as file:
            children.extend(int(pid) for pid in file.read().split())
    for pid in children:
        with open(f"/proc/{pid}/status", encoding="ascii") as file:
            for line in file:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total, len(children)


def encode_command(args):
    """A command as a RESP array of bulk strings (str arguments are UTF-8)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class Closed(Exception):
    """The server closed the connection."""


class RespConn:
    """One connection: send commands or raw bytes, read replies as (raw bytes, value).

    Values: ("simple", b), ("error", b), ("int", n), ("bulk", b or None),
    ("array", [..] or None), ("map", [(k, v), ..]), ("set", [..]), ("null",),
    ("bool", b), ("double", b), ("bignum", b), ("verbatim", fmt, b), ("push", [..]),
    ("attribute", [(k, v), ..], value).
    """

    def __init__(self, port, timeout=15.0):
        self.port = port
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send_raw(self, data):
        self.sock.sendall(data)

    def call(self, *args):
        """Sends one command and returns its reply (raw, value)."""
        self.send_raw(encode_command(args))
        return self.read_reply()

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise Closed()
        if self.pos > 0 and self.pos == len(self.buf):
            self.buf.clear()
            self.pos = 0
        self.buf += data

    def _line(self):
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos:end])
                self.pos = end + 2
                return line
            self._fill()

    def _exact(self, count):
        while len(self.buf) - self.pos < count + 2:
            self._fill()
        data = bytes(self.buf[self.pos:self.pos + count])
        if self.buf[self.pos + count:self.pos + count + 2] != b"\r\n":
            raise ValueError("a bulk string not followed by CRLF")
        self.pos += count + 2
        return data

    def read_reply(self):
        """The next reply: (the exact bytes, the parsed value)."""
        start = self.pos
        value = self._value()
        raw = bytes(self.buf[start:self.pos])
        # Keep the buffer small.
        if self.pos == len(self.buf):
            self.buf.clear()
            self.pos = 0
        return raw, value

    def _aggregate(self, count):
        return [self._value() for _ in range(count)]

    def _value(self):
        line = self._line()
        if not line:
            raise ValueError("an empty RESP line")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return ("simple", rest)
        if kind == b"-":
            return ("error", rest)
        if kind == b":":
            return ("int", int(rest))
        if kind == b"$":
            n = int(rest)
            return ("bulk", None if n < 0 else self._exact(n))
        if kind == b"*":
            n = int(rest)
            return ("array", None if n < 0 else self._aggregate(n))
        if kind == b"%":
            n = int(rest)
            return ("map", [(self._value(), self._value()) for _ in range(n)])
        if kind == b"~":
            return ("set", self._aggregate(int(rest)))
        if kind == b">":
            return ("push", self._aggregate(int(rest)))
        if kind == b"|":
            n = int(rest)
            attrs = [(self._value(), self._value()) for _ in range(n)]
            return ("attribute", attrs, self._value())
        if kind == b"_":
            return ("null",)
        if kind == b"#":
            return ("bool", rest)
        if kind == b",":
            return ("double", rest)
        if kind == b"(":
            return ("bignum", rest)
        if kind == b"=":
            data = self._exact(int(rest))
            return ("verbatim", data[:3], data[4:])
        if kind == b"!":
            return ("error", self._exact(int(rest)))
        raise ValueError(f"not RESP: {line[:80]!r}")

    def wait_closed(self, timeout=5.0):
        """Reads until the server closes the connection; returns what came before."""
        self.sock.settimeout(timeout)
        extra = bytes(self.buf[self.pos:])
        self.buf.clear()
        self.pos = 0
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True, extra
                extra += data
        except (socket.timeout, TimeoutError):
            return False, extra
        except ConnectionResetError:
            return True, extra


def delete_all_keys(port, password=None):
    """Deletes every key (KEYS * then DEL, then FLUSHALL for the expired keys that
    neither server has removed yet: KEYS leaves them out, DBSIZE counts them)."""
    conn = RespConn(port)
    try:
        if password is not None:
            conn.call("AUTH", password)
        raw, keys = conn.call("KEYS", "*")
        if keys[0] != "array":
            raise Fatal(f"port {port}: KEYS * answered {raw[:200]!r}")
        names = [item[1] for item in keys[1]]
        for i in range(0, len(names), 200):
            conn.call("DEL", *names[i:i + 200])
        raw, _ = conn.call("FLUSHALL")
        if raw != b"+OK\r\n":
            raise Fatal(f"port {port}: FLUSHALL answered {raw[:200]!r}")
        _, size = conn.call("DBSIZE")
        if size != ("int", 0):
            raise Fatal(f"port {port}: {size} keys left after deleting every key")
    finally:
        conn.close()


def find_program(name):
    return shutil.which(name)


def python_has_redis():
    import importlib.util
    return importlib.util.find_spec("redis") is not None


if __name__ == "__main__":
    sys.exit("harness.py is a module: run tests/redis/run.py")
