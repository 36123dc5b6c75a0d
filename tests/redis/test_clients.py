"""redis-py and redis-cli against ferrotx and redis-server.

Each scenario runs the same client calls against node 0 of the ferrotx cluster and
against redis-server (every key deleted first) and requires the same observations
(return values, or exception types and messages), then checks some of them outright.
A few tests are ferrotx's alone: its documented limits, and its cluster (every node
sees the same data).
"""

import random
import subprocess
import threading
import time
import unittest

import redis

from harness import RespConn, delete_all_keys, encode_command


def observe(call):
    """The result of `call()`, or its exception as (type name, message)."""
    try:
        return ("ok", call())
    except redis.RedisError as error:
        return ("error", type(error).__name__, str(error))


def results_of_pipeline(results):
    """A pipeline's results with exceptions made comparable."""
    return [("error", type(r).__name__, str(r)) if isinstance(r, Exception) else r
            for r in results]


class BothServers(unittest.TestCase):
    servers = None

    def client(self, port, **kwargs):
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30, **kwargs)
        self.addCleanup(client.close)
        return client

    def ports(self):
        return {"ferrotx": self.servers.ferrotx_ports[0], "redis": self.servers.redis_port}

    def both(self, scenario, **kwargs):
        """Runs scenario(client, port) on both servers (from no keys); requires equal
        observations and returns ferrotx's."""
        seen = {}
        for name, port in self.ports().items():
            delete_all_keys(port)
            seen[name] = scenario(self.client(port, **kwargs), port)
        self.assertEqual(seen["ferrotx"], seen["redis"], "ferrotx differs from redis-server")
        self.servers.check_alive()
        return seen["ferrotx"]

    def cli(self, port, *args, stdin=None, raw=None):
        argv = ["redis-cli", "-h", "127.0.0.1", "-p", str(port)]
        argv += list(args)
        result = subprocess.run(argv, input=stdin, capture_output=True, timeout=60)
        return result.returncode, result.stdout, result.stderr


class RedisPy(BothServers):
    """redis-py's commands, pipelines and transactions on both servers."""

    def test_string_commands(self):
        def scenario(r, port):
            seen = []
            for call in [
                lambda: r.ping(),
                lambda: r.echo("hello"),
                lambda: r.get("k"),
                lambda: r.set("k", "v"),
                lambda: r.get("k"),
                lambda: r.set("k", "w", nx=True),
                lambda: r.set("k", "w", xx=True),
                lambda: r.set("k", "x", get=True),
                lambda: r.set("absent", "x", xx=True),
                lambda: r.setnx("k", "y"),
                lambda: r.setnx("n", "y"),
                lambda: r.getset("k", "z"),
                lambda: r.getdel("k"),
                lambda: r.getdel("k"),
                lambda: r.append("a", "abc"),
                lambda: r.append("a", "def"),
                lambda: r.strlen("a"),
                lambda: r.incr("c"),
                lambda: r.incrby("c", 41),
                lambda: r.decr("c"),
                lambda: r.decrby("c", 2),
                lambda: r.incr("a"),
                lambda: r.exists("a", "c", "nope", "a"),
                lambda: r.mset({"m1": "1", "m2": "2", "m3": "3"}),
                lambda: r.mget("m1", "m2", "nope", "m3"),
                lambda: r.msetnx({"m3": "x", "m4": "4"}),
                lambda: r.msetnx({"m4": "4", "m5": "5"}),
                lambda: r.delete("m1", "m2", "nope"),
                lambda: r.dbsize(),
                lambda: sorted(r.keys("*")),
                lambda: sorted(r.keys("m*")),
                lambda: sorted(r.scan_iter(match="m*", count=2)),
                lambda: sorted(r.scan_iter()),
                lambda: r.client_setname("py"),
                lambda: r.client_getname(),
                lambda: type(r.client_id()).__name__,
                lambda: r.execute_command("SELECT", 0),
                lambda: r.execute_command("NOSUCHCOMMAND", "x"),
                lambda: r.execute_command("GET"),
            ]:
                seen.append(observe(call))
            return seen

        seen = self.both(scenario)
        self.assertEqual(seen[4], ("ok", b"v"))
        self.assertEqual(seen[-3][0], "ok")

    def test_binary_keys_and_values(self):
        every_byte = bytes(range(256))
        rng = random.Random(5)
        big = bytes(rng.getrandbits(8) for _ in range(512 * 1024))

        def scenario(r, port):
            r.set(every_byte, every_byte[::-1])
            r.set(b"big", big)
            r.append(b"big", every_byte)
            r.mset({b"\x00": b"", b"\r\n": b"\r\n\x00"})
            return [
                r.get(every_byte) == every_byte[::-1],
                r.get(b"big") == big + every_byte,
                r.strlen(b"big"),
                r.mget(b"\x00", b"\r\n", b"missing"),
                sorted(r.keys()),
            ]

        seen = self.both(scenario)
        self.assertEqual(seen[:2], [True, True])

    def test_pipelines_and_transactions(self):
        def scenario(r, port):
            seen = []
            pipe = r.pipeline(transaction=False)
            for i in range(500):
                pipe.set(f"p{i}", i)
                pipe.incr(f"p{i}")
            pipe.mget([f"p{i}" for i in range(0, 500, 50)])
            seen.append(results_of_pipeline(pipe.execute()))
            # MULTI/EXEC over keys of every partition.
            pipe = r.pipeline(transaction=True)
            for i in range(40):
                pipe.incrby(f"p{i}", 1000)
            pipe.mget([f"p{i}" for i in range(40)])
            pipe.delete(*[f"p{i}" for i in range(20)])
            seen.append(results_of_pipeline(pipe.execute()))
            # An error inside EXEC: redis-py raises the first one; the rest committed.
            r.set("s", "not a number")
            pipe = r.pipeline(transaction=True)
            pipe.set("t", 1).incr("s").incr("t")
            seen.append(observe(pipe.execute))
            seen.append(r.mget("s", "t"))
            pipe = r.pipeline(transaction=True)
            pipe.set("t", 1).incr("s").incr("t")
            seen.append(results_of_pipeline(pipe.execute(raise_on_error=False)))
            # A command refused while queuing: EXECABORT.
            pipe = r.pipeline(transaction=True)
            pipe.set("u", 1).execute_command("NOSUCHCOMMAND").set("v", 1)
            seen.append(observe(pipe.execute))
            seen.append(r.mget("u", "v"))
            seen.append(r.dbsize())
            return seen

        seen = self.both(scenario)
        self.assertEqual(seen[1][-2], [str(1001 + i).encode() for i in range(40)])

    def test_watch(self):
        def scenario(r, port):
            other = self.client(port)
            seen = []
            r.set("k", 1)
            # Unchanged: the transaction commits.
            with r.pipeline() as pipe:
                pipe.watch("k")
                value = int(pipe.get("k"))
                pipe.multi()
                pipe.set("k", value + 1)
                seen.append(observe(pipe.execute))
            # Changed by another client: WatchError, nothing written.
            with r.pipeline() as pipe:
                pipe.watch("k", "missing")
                value = int(pipe.get("k"))
                other.set("missing", "now")
                pipe.multi()
                pipe.set("k", value + 10)
                seen.append(observe(pipe.execute))
            seen.append(r.get("k"))
            # redis-py's transaction helper retries until it commits.
            calls = []

            def increment(pipe):
                value = int(pipe.get("k"))
                if not calls:
                    other.incr("k")
                calls.append(value)
                pipe.multi()
                pipe.set("k", value * 2)

            seen.append(r.transaction(increment, "k"))
            seen.append(calls)
            seen.append(r.get("k"))
            # UNWATCH.
            with r.pipeline() as pipe:
                pipe.watch("k")
                other.set("k", 0)
                pipe.unwatch()
                pipe.multi()
                pipe.incr("k")
                seen.append(observe(pipe.execute))
            return seen

        seen = self.both(scenario)
        self.assertEqual(seen[1], ("error", "WatchError", "Watched variable changed."))
        self.assertEqual(seen[4], [2, 3])
        self.assertEqual(seen[5], b"6")

    def test_connection_commands_and_introspection(self):
        def scenario(r, port):
            info = r.info()
            server = r.info("server")
            return [
                "redis_version" in info,
                info.get("redis_version"),
                "redis_mode" in server,
                "connected_clients" in r.info("clients"),
                r.client_setname("abc"),
                r.client_getname(),
                observe(lambda: r.client_setname("a b")),
                r.execute_command("COMMAND", "INFO", "GET"),
                observe(lambda: r.execute_command("HELLO", "4")),
            ]

        self.both(scenario)

    def test_connection_pool_under_threads(self):
        def scenario(r, port):
            def work(t):
                for i in range(100):
                    r.incr(f"t{t % 3}")
                    r.set(f"v{t}-{i}", i)

            threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return [r.mget("t0", "t1", "t2"), r.dbsize()]

        seen = self.both(scenario)
        self.assertEqual(seen, [[b"200", b"200", b"200"], 603])

    def test_keys_expire(self):
        # Short expiries, on both servers: the keys are gone for every command, SCAN and
        # KEYS once their time has passed, and the others stay.
        def scenario(r, port):
            r.set("short", "v", px=200)
            r.psetex("short2", 200, "v")
            r.set("long", "v", ex=1000)
            r.set("plain", "v")
            r.set("moved", "v", px=200)
            r.pexpire("moved", 100000)
            before = [r.exists("short", "short2", "long", "plain"), r.get("short"),
                      sorted(r.keys("*"))]
            time.sleep(0.4)
            after = [r.get("short"), r.exists("short", "short2", "long", "plain", "moved"),
                     r.ttl("short"), r.pttl("short2"), sorted(r.keys("*")),
                     sorted(r.scan_iter(count=3)), r.incr("short"), r.ttl("short"),
                     r.set("short2", "w", nx=True), r.getex("short2"), r.ttl("short2")]
            return [before, after]

        seen = self.both(scenario)
        self.assertEqual(seen[1][:2], [None, 3])
        self.assertEqual(seen[1][4], [b"long", b"moved", b"plain"])

    def test_expiry_in_multi_and_pipelines(self):
        def scenario(r, port):
            pipe = r.pipeline(transaction=True)
            pipe.set("m", "v", exat=4000000000).expiretime("m").set("m", "w", keepttl=True)
            pipe.pexpiretime("m").getex("m", persist=True).ttl("m").expire("m", -1)
            pipe.exists("m").set("n", 5, px=100000).incrby("n", 2).pttl("n")
            results = pipe.execute()
            results[-1] = 99000 <= results[-1] <= 100000
            pipe = r.pipeline(transaction=False)
            pipe.setex("p", 1000, "v").ttl("p").persist("p").ttl("p").expireat("p", 1)
            pipe.get("p")
            return [results, pipe.execute()]

        self.both(scenario)

    def test_expired_keys_are_gone_on_every_node(self):
        # ferrotx alone: keys set with PX 200 through one node are gone, after the
        # deadline, for the clients of every node (each node's clock decides).
        clients = [self.client(port) for port in self.servers.ferrotx_ports]
        names = [f"px{i}" for i in range(20)]
        clients[0].set("stays", "v", ex=1000)
        before = clients[2].dbsize()
        for i, name in enumerate(names):
            clients[i % 3].set(name, "v", px=200)
        for client in clients:
            self.assertEqual(client.exists(*names), len(names))
        self.assertEqual(clients[2].dbsize(), before + len(names))
        time.sleep(0.5)
        for client in clients:
            self.assertEqual(client.exists(*names), 0)
            self.assertEqual(client.mget(names), [None] * len(names))
            self.assertEqual(client.keys("px*"), [])
            self.assertEqual(list(client.scan_iter(match="px*")), [])
            self.assertEqual(client.ttl(names[0]), -2)
            self.assertTrue(990 <= client.ttl("stays") <= 1000)
        # No command touched them, yet they leave DBSIZE (which counts expired keys until
        # they are removed, as Redis's does): the primaries remove them in the background,
        # every 100 ms.
        give_up = time.monotonic() + 2
        while clients[2].dbsize() != before and time.monotonic() < give_up:
            time.sleep(0.05)
        self.assertEqual(clients[2].dbsize(), before)
        self.assertEqual(clients[1].delete(*names), 0)

    def test_watch_fails_when_a_watched_key_expires(self):
        def scenario(r, port):
            outcomes = []
            for setup, wait in ((lambda: r.set("w", "v", px=200), 0.4),
                                (lambda: r.set("w", "v", px=100000), 0.05),
                                (lambda: r.delete("w"), 0.05)):
                setup()
                with r.pipeline() as pipe:
                    pipe.watch("w")
                    time.sleep(wait)
                    pipe.multi()
                    pipe.get("other")
                    try:
                        outcomes.append(pipe.execute())
                    except redis.WatchError:
                        outcomes.append("WatchError")
            return outcomes

        seen = self.both(scenario)
        self.assertEqual(seen, ["WatchError", [None], [None]])

    def test_watch_fails_when_a_key_is_set_and_deleted(self):
        def scenario(r, port):
            other = self.client(port)
            outcomes = []
            for change in (lambda: other.transaction(
                                   lambda pipe: pipe.multi() or pipe.set("sd", 1).delete("sd")),
                           lambda: (other.set("sd", 1), other.delete("sd")),
                           lambda: other.delete("sd")):
                with r.pipeline() as pipe:
                    pipe.watch("sd")
                    change()
                    pipe.multi()
                    pipe.get("sd")
                    try:
                        outcomes.append(pipe.execute())
                    except redis.WatchError:
                        outcomes.append("WatchError")
            return outcomes

        seen = self.both(scenario)
        self.assertEqual(seen, ["WatchError", "WatchError", [None]])

    def test_flushall_empties_every_node(self):
        # FLUSHDB through one node, then DBSIZE 0 and every key gone on every node.
        clients = [self.client(port) for port in self.servers.ferrotx_ports]
        names = [f"f{i}" for i in range(300)]
        clients[1].mset({name: "v" for name in names})
        clients[2].set("fttl", "v", ex=1000)
        self.assertTrue(clients[0].flushdb())
        for client in clients:
            self.assertEqual(client.dbsize(), 0)
            self.assertEqual(client.exists(*names, "fttl"), 0)
            self.assertEqual(client.keys("*"), [])
        clients[0].set("again", 1)
        self.assertTrue(clients[2].flushall(asynchronous=True))
        self.assertEqual(clients[1].dbsize(), 0)
        with self.assertRaises(redis.ResponseError) as caught:
            clients[0].execute_command("FLUSHALL", "NOW")
        self.assertEqual(str(caught.exception), "syntax error")

    def test_ferrotx_limits(self):
        # Documented differences `value-size`, `transaction-size`, `request-limits`.
        port = self.servers.ferrotx_ports[0]
        r = self.client(port)
        with self.assertRaises(redis.ResponseError) as caught:
            r.set("huge", b"x" * (1024 * 1024 + 1))
        self.assertIn("proto-max-bulk-len", str(caught.exception))
        r.set("near", b"x" * (1024 * 1024 - 100))
        with self.assertRaises(redis.ResponseError):
            r.append("near", b"y" * 200)
        self.assertEqual(r.strlen("near"), 1024 * 1024 - 100)
        # `reply-size`: the values of one command's reply are at most 64 MiB; asking
        # for one value many times does not make the node build gigabytes.
        self.assertEqual(len(r.mget(["near"] * 63)), 63)
        with self.assertRaises(redis.ResponseError) as caught:
            r.mget(["near"] * 1000)
        self.assertIn("would make a reply of over 64 MiB", str(caught.exception))
        r.delete("near")
        pipe = r.pipeline(transaction=True)
        for i in range(1025):
            pipe.incr("many")
        with self.assertRaises(redis.ResponseError) as caught:
            pipe.execute()
        self.assertIn("ferrotx transactions hold at most 1024 commands", str(caught.exception))
        self.assertIsNone(r.get("many"))
        pipe = r.pipeline(transaction=True)
        for i in range(1024):
            pipe.incr("many")
        self.assertEqual(pipe.execute()[-1], 1024)
        # `request-limits`: counts and lengths a client chooses are refused before the
        # node buffers anything for them.
        for request, error in [
            (b"*1048577\r\n", b"invalid multibulk length"),
            (b"*2147483647\r\n", b"invalid multibulk length"),
            (b"*1\r\n$1000000000\r\n", b"invalid bulk length"),
            (b"*2\r\n$3\r\nGET\r\n$67108865\r\n", b"invalid bulk length"),
        ]:
            conn = RespConn(port)
            conn.send_raw(request)
            raw, _ = conn.read_reply()
            self.assertEqual(raw, b"-ERR Protocol error: " + error + b"\r\n", request)
            self.assertTrue(conn.wait_closed()[0])
            conn.close()
        self.assertTrue(r.ping())

    def test_every_node_serves_the_same_data(self):
        clients = [self.client(port) for port in self.servers.ferrotx_ports]
        clients[0].mset({f"n{i}": i for i in range(30)})
        for client in clients:
            self.assertEqual(client.mget([f"n{i}" for i in range(30)]),
                             [str(i).encode() for i in range(30)])
            self.assertEqual(sorted(client.scan_iter(match="n*", count=5)),
                             sorted(f"n{i}".encode() for i in range(30)))
        clients[2].delete(*[f"n{i}" for i in range(30)])
        for client in clients:
            self.assertEqual(client.exists(*[f"n{i}" for i in range(30)]), 0)
        info = clients[1].info("ferrotx")
        self.assertEqual((info["cluster_nodes"], info["replicas"], info["node_id"]), (3, 3, 1))

    def test_scan_keys_and_flushall_of_large_values_through_every_node(self):
        # Issue 29: a SCAN page of the primary added objects until it passed 256 KiB, so
        # a page that ended on a value near 1 MiB went over the RPC message limit and the
        # primary's handler assert killed the node. Values of the largest size a SET
        # takes and of 200 KiB, written through one node, then SCAN, KEYS and FLUSHALL
        # through every node: every node must stay up and every key be listed.
        delete_all_keys(self.servers.ferrotx_ports[0])
        clients = [self.client(port) for port in self.servers.ferrotx_ports]
        # Interleaved, so that in each partition's order (the order written) values of
        # 200 KiB come before values of 1 MiB.
        names = []
        for i in range(40):
            for name, size in ((f"mid{i}", 200 * 1024), (f"big{i}", 1024 * 1024 - 100)):
                clients[0].set(name, bytes([i]) * size)
                names.append(name.encode())
        names.sort()
        for node, client in enumerate(clients):
            self.assertEqual(sorted(client.scan_iter(count=1000)), names, f"SCAN via node {node}")
            self.assertEqual(sorted(client.scan_iter(count=3)), names, f"SCAN via node {node}")
            self.assertEqual(sorted(client.keys("*")), names, f"KEYS via node {node}")
        for node, client in enumerate(clients):
            self.assertTrue(client.ping(), f"node {node} answers after the scans")
        self.assertTrue(clients[1].flushall())
        for node, client in enumerate(clients):
            self.assertEqual(client.dbsize(), 0, f"DBSIZE via node {node}")
            self.assertTrue(client.ping(), f"node {node} answers after FLUSHALL")
        self.servers.check_alive()

    def test_requests_split_into_single_bytes(self):
        # A pipeline of requests sent one byte at a time parses as when sent whole.
        def scenario(r, port):
            conn = RespConn(port)
            request = (encode_command(["SET", "split", "a\r\nb"]) + b"GET split\r\n"
                       + encode_command(["MGET", "split", "x"]) + b"PING\r\n")
            for i in range(len(request)):
                conn.send_raw(request[i:i + 1])
            replies = [conn.read_reply()[0] for _ in range(4)]
            conn.close()
            return replies

        self.both(scenario)


class Connections(BothServers):
    """Connections that read slowly, idle, vanish mid-request or send garbage."""

    def test_large_replies_to_a_slow_reader(self):
        value = bytes(range(256)) * 1024  # 256 KiB

        def scenario(r, port):
            r.set("big", value)
            conn = RespConn(port)
            # 200 GETs (50 MiB of replies) sent at once, read only after a pause.
            conn.send_raw(encode_command(["GET", "big"]) * 200 + b"PING\r\n")
            time.sleep(0.3)
            same = sum(conn.read_reply()[1] == ("bulk", value) for _ in range(200))
            last = conn.read_reply()[0]
            conn.close()
            return [same, last]

        self.assertEqual(self.both(scenario), [200, b"+PONG\r\n"])

    def test_a_thousand_idle_connections(self):
        def scenario(r, port):
            conns = [RespConn(port) for _ in range(1000)]
            try:
                for i, conn in enumerate(conns[::50]):
                    conn.send_raw(encode_command(["INCR", "idle"]))
                # Answered in any order: they run at once on the node's workers.
                replies = sorted(conn.read_reply()[0] for conn in conns[::50])
                clients = r.info("clients")["connected_clients"]
            finally:
                for conn in conns:
                    conn.close()
            return [replies, clients >= 1000]

        seen = self.both(scenario)
        self.assertEqual(seen[0], sorted(b":%d\r\n" % i for i in range(1, 21)))

    def test_clients_that_close_mid_request(self):
        def scenario(r, port):
            for i in range(150):
                gone = RespConn(port)
                block = [encode_command(["MULTI"])]
                block += [encode_command(["SET", f"block:{k}", i]) for k in range(10)]
                block.append(encode_command(["EXEC"]))
                # Half the block, or all of it, then the connection closes at once.
                data = b"".join(block)
                gone.send_raw(data if i % 2 else data[:len(data) // 2])
                gone.close()
                fresh = RespConn(port)
                raw, _ = fresh.call("ECHO", f"mine-{i}")
                fresh.close()
                if raw != b"$%d\r\nmine-%d\r\n" % (len(f"mine-{i}"), i):
                    return ["a reply went to the wrong client", raw]
            # Each block ran whole or not at all.
            values = r.mget([f"block:{k}" for k in range(10)])
            return [len(set(values)) == 1]

        self.assertEqual(self.both(scenario), [True])

    def test_garbage_does_not_disturb_other_clients(self):
        def scenario(r, port):
            errors = []
            stop = threading.Event()

            def honest():
                client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
                try:
                    for _ in range(300):
                        client.incr("honest")
                except redis.RedisError as error:
                    errors.append(error)
                finally:
                    client.close()
                    stop.set()

            thread = threading.Thread(target=honest)
            thread.start()
            garbage = [b"*1\r\n$x\r\n", b"*2\r\n$3\r\nGET\r\n$-2\r\n",
                       b"*2\r\n$3\r\nGET\r\n:1\r\n", b'GET "unbalanced\r\n']
            replies = set()
            rounds = 0
            # Every kind of garbage at least three times, and until the honest client
            # is done.
            while rounds < 3 or not stop.is_set():
                for request in garbage:
                    conn = RespConn(port)
                    conn.send_raw(request)
                    replies.add(conn.wait_closed()[1])
                    conn.close()
                rounds += 1
            thread.join()
            return [errors, r.get("honest"), sorted(replies)]

        seen = self.both(scenario)
        self.assertEqual(seen[1], b"300")


class ProtocolLimits(BothServers):
    """Requests too big for the protocol's own limits: the same error, then a close."""

    def scenario_for(self, request):
        def scenario(r, port):
            conn = RespConn(port)
            conn.send_raw(request)
            closed, rest = conn.wait_closed()
            conn.close()
            return [closed, rest]

        return scenario

    def test_an_inline_request_without_its_end(self):
        seen = self.both(self.scenario_for(b"GET " + b"a" * (70 * 1024)))
        self.assertEqual(seen, [True, b"-ERR Protocol error: too big inline request\r\n"])

    def test_a_multibulk_header_without_its_end(self):
        seen = self.both(self.scenario_for(b"*" + b"1" * (70 * 1024)))
        self.assertEqual(seen, [True, b"-ERR Protocol error: too big mbulk count string\r\n"])

    def test_a_bulk_header_without_its_end(self):
        seen = self.both(self.scenario_for(b"*1\r\n$" + b"1" * (70 * 1024)))
        self.assertEqual(seen, [True, b"-ERR Protocol error: too big bulk count string\r\n"])

    def test_a_bulk_longer_than_redis_allows(self):
        seen = self.both(self.scenario_for(b"*1\r\n$536870913\r\n"))
        self.assertEqual(seen, [True, b"-ERR Protocol error: invalid bulk length\r\n"])


class RedisCli(BothServers):
    """redis-cli as people use it: arguments, standard input, --pipe, --scan."""

    def test_arguments(self):
        def scenario(r, port):
            return [
                self.cli(port, "SET", "a", "1"),
                self.cli(port, "GET", "a"),
                self.cli(port, "INCR", "a"),
                self.cli(port, "MGET", "a", "nope"),
                self.cli(port, "--no-raw", "MGET", "a", "nope"),
                self.cli(port, "-3", "MGET", "a", "nope"),
                self.cli(port, "DEL", "a"),
                self.cli(port, "NOSUCHCOMMAND"),
                self.cli(port, "SET", "a"),
                self.cli(port, "PING"),
            ]

        seen = self.both(scenario)
        self.assertEqual(seen[0], (0, b"OK\n", b""))
        self.assertEqual(seen[1], (0, b"1\n", b""))

    def test_multi_exec_from_standard_input(self):
        commands = (b"MULTI\nSET acct:a 100\nSET acct:b 50\nDECRBY acct:a 30\n"
                    b"INCRBY acct:b 30\nMGET acct:a acct:b\nEXEC\n"
                    b"MULTI\nINCR acct:a\nNOSUCHCOMMAND\nEXEC\nGET acct:a\n"
                    b"SET \"bin\\x00key\" \"v\\r\\n\"\nSTRLEN \"bin\\x00key\"\n")

        def scenario(r, port):
            return [self.cli(port, stdin=commands), self.cli(port, "--no-raw", stdin=commands)]

        seen = self.both(scenario)
        self.assertIn(b"70\n80\n", seen[0][1])

    def test_pipe(self):
        count = 5000
        protocol = b"".join(
            encode_command(["SET", f"pipe:{i}", i]) + encode_command(["INCR", f"pipe:{i}"])
            for i in range(count))
        protocol += encode_command(["MSET"] + [f"pipe:m{i}" if j == 0 else "v"
                                                for i in range(50) for j in range(2)])

        def scenario(r, port):
            code, out, err = self.cli(port, "--pipe", stdin=protocol)
            return [code, out.splitlines()[-1], r.dbsize(), r.get(f"pipe:{count - 1}")]

        seen = self.both(scenario)
        self.assertEqual(seen[1], b"errors: 0, replies: %d" % (2 * count + 1))
        self.assertEqual(seen[3], str(count).encode())

    def test_scan_and_keys(self):
        def scenario(r, port):
            r.mset({f"scan:{i}": i for i in range(100)})
            code, out, err = self.cli(port, "--scan", "--pattern", "scan:1*")
            keys_code, keys_out, _ = self.cli(port, "KEYS", "scan:2*")
            return [code, sorted(out.split()), keys_code, sorted(keys_out.split()),
                    self.cli(port, "DBSIZE")]

        seen = self.both(scenario)
        self.assertEqual(len(seen[1]), 11)

    def test_bigkeys(self):
        # --bigkeys walks the keyspace with SCAN, asks each key's TYPE, then STRLEN.
        def scenario(r, port):
            r.mset({"bigkeys:small": "x", "bigkeys:large": "y" * 1000})
            code, out, err = self.cli(port, "--bigkeys")
            strings = [line for line in out.splitlines() if b" strings with " in line]
            # The same count and bytes of strings as redis-server's (the same keys).
            return [code, strings]

        seen = self.both(scenario)
        self.assertEqual(seen[0], 0)
        self.assertEqual(len(seen[1]), 1)

    def test_interactive_style_commands(self):
        # What redis-cli sends on its own: COMMAND DOCS for hints (interactive), HELLO
        # with -3, AUTH with -a (no password here: an error, as from Redis).
        def scenario(r, port):
            return [
                self.cli(port, "-3", "HELLO", "3")[0],
                self.cli(port, "-a", "secret", "--no-auth-warning", "PING"),
                self.cli(port, "--user", "default", "--pass", "x", "--no-auth-warning", "PING"),
            ]

        self.both(scenario)


def make_suite(servers):
    suite = unittest.TestSuite()
    for case in (RedisPy, Connections, ProtocolLimits, RedisCli):
        case.servers = servers
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    return suite
