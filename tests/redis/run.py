#!/usr/bin/env python3
"""ferrotx with real Redis clients: runs every suite of tests/redis in one command.

    python3 tests/redis/run.py [--ferrotx target/debug/ferrotx] [--only NAME ...]
    python3 tests/redis/run.py --check-deps

It starts what the suites need and stops it at the end, also on a failure, Ctrl-C or
SIGTERM: a ferrotx local cluster (`ferrotx cluster local`, 3 nodes, 3 replicas, on free
loopback ports through --port-base and --resp-port-base) and a private redis-server
(a free port, `--save '' --appendonly no --databases 1`, in a temporary directory).

The suites:

- differential.py: the command scripts of scripts/ against both servers, replies
  compared byte for byte in RESP2 and RESP3, apart from the documented differences;
- test_clients.py: redis-py and redis-cli against both servers (the same calls must give
  the same results), and redis-cli's --pipe, --scan and MULTI/EXEC from standard input;
- test_concurrency.py: concurrent redis-py clients on every node of the cluster: bank
  transfers with WATCH/MULTI/EXEC retries (money conserved exactly), concurrent INCR
  (exact sums), atomic multi-partition blocks read whole, WATCH conflicts across nodes;
- test_memory.py: CONFIG SET maxmemory, INFO memory, -OOM for writes that would grow a
  full node (through it, or through another node to keys whose primary is full), reads
  and deletes served meanwhile, and writes taken again after deletes.

Needs redis-server and redis-cli (Debian: redis-server, redis-tools) and redis-py
(Debian: python3-redis; or PyPI: redis). If this Python lacks redis-py and Debian's
/usr/bin/python3 has it, the script runs itself with that one. --check-deps exits 0 when
everything is there, and 77 (printing what is missing) when not.

The last line is "redis: N passed, N failed"; the exit status is 0 only if none failed.
"""

import argparse
import os
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import harness  # noqa: E402

MISSING_EXIT = 77
DEBIAN_PYTHON = "/usr/bin/python3"


def missing_dependencies():
    missing = []
    for program, package in (("redis-server", "redis-server"), ("redis-cli", "redis-tools")):
        if harness.find_program(program) is None:
            missing.append(f"{program} (Debian package {package})")
    if not harness.python_has_redis():
        missing.append("redis-py (Debian package python3-redis, or PyPI redis)")
    return missing


def reexec_with_debian_python():
    """Runs this script with Debian's Python if this one lacks redis-py and that one
    has it (a pyenv or venv python3 first on PATH does not see Debian's packages)."""
    if harness.python_has_redis() or os.environ.get("FERROTX_REDIS_REEXEC"):
        return
    if not os.path.exists(DEBIAN_PYTHON) or os.path.realpath(sys.executable) == \
            os.path.realpath(DEBIAN_PYTHON):
        return
    probe = os.system(f"{DEBIAN_PYTHON} -c 'import redis' >/dev/null 2>&1")
    if probe == 0:
        os.environ["FERROTX_REDIS_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])


def default_binary():
    candidates = [os.path.join(ROOT, "target", profile, "ferrotx") for profile in ("debug", "release")]
    existing = [path for path in candidates if os.path.exists(path)]
    if not existing:
        return None
    return max(existing, key=os.path.getmtime)


def on_sigterm(signum, frame):
    # As Ctrl-C: unittest lets KeyboardInterrupt through (and only it).
    raise KeyboardInterrupt()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ferrotx", help="the ferrotx binary (default: the newest of "
                        "target/debug/ferrotx and target/release/ferrotx)")
    parser.add_argument("--only", nargs="*", help="run only the suites or scripts whose "
                        "names contain one of these (differential, clients, concurrency, "
                        "or a script name such as strings)")
    parser.add_argument("--check-deps", action="store_true",
                        help="only check that redis-server, redis-cli and redis-py exist")
    parser.add_argument("-q", "--quiet", action="store_true", help="one line per failure only")
    args = parser.parse_args()

    reexec_with_debian_python()
    missing = missing_dependencies()
    if missing:
        print("missing: " + "; ".join(missing), file=sys.stderr)
        print("install them with: apt-get install -y redis-server redis-tools python3-redis",
              file=sys.stderr)
        return MISSING_EXIT
    if args.check_deps:
        print(f"redis suites: every dependency found ({sys.executable})")
        return 0

    binary = args.ferrotx or default_binary()
    if binary is None or not os.path.exists(binary):
        print("no ferrotx binary: build one (cargo build -p ferrotx) or pass --ferrotx",
              file=sys.stderr)
        return 2
    binary = os.path.abspath(binary)

    # Imported only now: they need redis-py.
    import differential
    import test_clients
    import test_concurrency
    import test_memory

    signal.signal(signal.SIGTERM, on_sigterm)
    servers = harness.Servers(binary)
    started = time.monotonic()
    result = None
    try:
        servers.start()
        print(f"ferrotx ({binary}) on ports {servers.ferrotx_ports}; redis-server on port "
              f"{servers.redis_port}", flush=True)
        only = args.only or []
        suite = unittest.TestSuite()

        def wanted(name):
            return not only or any(word in name for word in only)

        if wanted("differential"):
            suite.addTest(differential.make_suite(servers))
        elif only:
            scripts = [word for word in only if word not in ("clients", "concurrency", "memory")]
            if scripts:
                suite.addTest(differential.make_suite(servers, scripts))
        if wanted("clients"):
            suite.addTest(test_clients.make_suite(servers))
        if wanted("concurrency"):
            suite.addTest(test_concurrency.make_suite(servers))
        if wanted("memory"):
            suite.addTest(test_memory.make_suite(servers))
        runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=1 if args.quiet else 2)
        result = runner.run(suite)
    except harness.Fatal as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: stopping the servers", file=sys.stderr)
        return 130
    finally:
        servers.stop()
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - len(result.skipped)
    print(f"({time.monotonic() - started:.1f} s)")
    print(f"redis: {passed} passed, {failed} failed")
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
