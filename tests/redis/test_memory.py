"""A node's memory limit through redis-py: CONFIG SET maxmemory, INFO memory, -OOM.

Every node of the test cluster holds every key (3 nodes, 3 replicas), so the limit is
set on all of them, a little above what they use. Writes then fill them until they
answer -OOM; reads, deletes and overwrites that do not grow memory still run; once enough
keys are deleted (and their objects reclaimed), writes run again. A second test limits
only the other nodes: a client of a node under its limit still gets -OOM for new keys,
as each has a copy on a node past its limit (the primary refuses the transaction's LOCK).
"""

import time
import unittest

import redis

from test_concurrency import ClusterClients

OOM = "OOM command not allowed when used memory > 'maxmemory'."


def is_oom(error):
    """Whether `error` is the -OOM reply: redis-py 5 keeps the code in its text, later
    versions raise OutOfMemoryError with the text after the code."""
    return str(error) in (OOM, OOM.removeprefix("OOM "))


VALUE = "v" * 1000
ROOM = 6 << 20


def info_memory(client):
    return client.info("memory")


class MemoryLimit(ClusterClients):
    def setUp(self):
        super().setUp()
        self.nodes = range(len(self.servers.ferrotx_ports))
        for node in self.nodes:
            self.addCleanup(self.client(node).config_set, "maxmemory", 0)
        # Let reclamation of earlier suites' keys settle, so the figure is steady.
        time.sleep(0.5)

    def limit(self, node, room=ROOM):
        """Sets node's maxmemory to what it uses now plus `room`; returns the limit."""
        client = self.client(node)
        limit = info_memory(client)["used_memory"] + room
        self.assertTrue(client.config_set("maxmemory", limit))
        self.assertEqual(client.config_get("maxmemory"), {"maxmemory": str(limit)})
        self.assertEqual(client.config_get("maxmemory-policy"),
                         {"maxmemory-policy": "noeviction"})
        return limit

    def fill(self, client, prefix, most=100_000, batch=100):
        """SETs prefix:i with 1 KB values until a whole pipeline of them is refused with
        -OOM; returns the keys set. (Right at the limit a write may still pass: the
        figure moves by a table of slots when an index's growth ends.)"""
        written = []
        for start in range(0, most, batch):
            pipe = client.pipeline(transaction=False)
            for i in range(start, start + batch):
                pipe.set(f"{prefix}:{i}", VALUE)
            replies = pipe.execute(raise_on_error=False)
            for i, reply in zip(range(start, start + batch), replies):
                if reply is True:
                    written.append(f"{prefix}:{i}")
                else:
                    self.assertIsInstance(reply, redis.exceptions.ResponseError)
                    self.assertTrue(is_oom(reply), str(reply))
            if not any(reply is True for reply in replies):
                return written
        self.fail(f"{most} keys written and never -OOM")

    def wait_for(self, what, check, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                self.fail(f"{what}: not within {timeout} s")
            time.sleep(0.05)

    def test_full_nodes_refuse_growth_serve_reads_and_deletes_then_take_writes_again(self):
        limits = {node: self.limit(node) for node in self.nodes}
        client = self.client(0)
        written = self.fill(client, "mem")
        self.assertGreater(len(written), 1000, "6 MB of room holds thousands of 1 KB values")
        first = info_memory(client)
        print(f"\nmaxmemory: {len(written)} keys of 1 KB written into 6 MB of room; node 0 "
              f"used {first['used_memory']} of {limits[0]} bytes", flush=True)
        for node in self.nodes:
            memory = info_memory(self.client(node))
            self.assertEqual(memory["maxmemory"], limits[node])
            self.assertEqual(memory["maxmemory_policy"], "noeviction")
            # Refused before it grows much past the limit: what lands between two
            # refreshes of the figure (10 ms), on a loopback with pipelines of 100.
            self.assertLessEqual(memory["used_memory"], limits[node] + (2 << 20), memory)
            self.assertGreaterEqual(memory["used_memory_peak"], memory["used_memory"])
            for field in ("used_memory_human", "maxmemory_human", "used_memory_rss"):
                self.assertIn(field, memory)
        # Past the limit: writes that grow memory are refused, in MULTI too; reads,
        # overwrites of the same size and deletes run.
        with self.assertRaisesRegex(redis.exceptions.ResponseError, "^(OOM )?command not allowed"):
            client.set("mem:new", VALUE)
        with self.assertRaisesRegex(
            redis.exceptions.ResponseError, "EXECABORT|OOM|Transaction discarded|command not allowed"
        ):
            pipe = client.pipeline(transaction=True)
            pipe.set("mem:new", "x")
            pipe.execute()
        self.assertEqual(client.get(written[0]), VALUE.encode())
        self.assertEqual(client.exists(*written[:10]), 10)
        self.assertEqual(self.client(1).get(written[-1]), VALUE.encode())
        self.assertEqual(client.delete(written[0]), 1)
        # Delete most keys: once their objects are reclaimed, the nodes take writes again.
        for i in range(1, len(written), 500):
            self.assertEqual(client.delete(*written[i:i + 500]), len(written[i:i + 500]))

        def writes_again():
            try:
                return client.set("mem:after", "x") is True
            except redis.exceptions.ResponseError as error:
                self.assertTrue(is_oom(error), str(error))
                return False

        self.wait_for("a write accepted after the deletes", writes_again)
        for node in self.nodes:
            memory = info_memory(self.client(node))
            self.assertLess(memory["used_memory"], limits[node], memory)
        client.delete("mem:after")

    def test_writes_that_would_grow_a_node_past_its_limit_are_refused_through_any_node(self):
        # Node 0 has no limit; nodes 1 and 2 are past theirs. Every key has a copy on
        # them (3 nodes, 3 replicas), so a new key is refused whichever node coordinates
        # it: by its primary, past its own limit or holding a partition with a copy on a
        # node past its (the cluster manager's figures, a lease or two behind).
        # Overwrites that fit where the value is, and deletes, still run.
        client = self.client(0)
        self.assertTrue(client.set("prim:keep", "x"))
        for node in self.nodes:
            if node != 0:
                self.limit(node, room=-(1 << 20))

        def refused(key):
            try:
                client.set(key, "x")
                client.delete(key)
                return False
            except redis.exceptions.ResponseError as error:
                self.assertTrue(is_oom(error), str(error))
                return True

        probes = iter(range(100_000))
        self.wait_for("a write through node 0 refused", lambda: refused(f"prim:p{next(probes)}"))
        # The first refusals are the full nodes' own, as primaries; node 0 learns which
        # nodes are past their limits from the CM's next lease grants (a lease or two).
        time.sleep(0.5)
        for i in range(100):
            with self.assertRaisesRegex(redis.exceptions.ResponseError, "^(OOM )?command not allowed"):
                client.set(f"prim:{i}", "x")
        self.assertEqual(client.exists(*[f"prim:{i}" for i in range(100)]), 0)
        self.assertTrue(client.set("prim:keep", "y"))
        self.assertEqual(self.client(2).get("prim:keep"), b"y")
        self.assertEqual(client.delete("prim:keep"), 1)
        for node in self.nodes:
            self.client(node).config_set("maxmemory", 0)
        probes = iter(range(100_000))
        self.wait_for("a write accepted once the limits are lifted",
                      lambda: not refused(f"prim:q{next(probes)}"))


def make_suite(servers):
    MemoryLimit.servers = servers
    return unittest.defaultTestLoader.loadTestsFromTestCase(MemoryLimit)
