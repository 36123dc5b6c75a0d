"""The differential suite: the command scripts of scripts/ run against ferrotx and a real
redis-server, every reply compared byte for byte, in RESP2 and again in RESP3 (each
connection sends HELLO 3 first), except where a line names a documented difference.

Script format (one command per line, as redis-cli reads them):

    # a comment; blank lines are skipped
    SET key value              arguments split and unquoted as redis-cli does
                               ("..." with \\n \\r \\t \\xHH escapes, '...' literal)
    [2] GET key                on connection 2 (connections open on first use; 1 is the
                               default)
    @differs ID COMMAND ...    a documented difference: the replies are not compared
                               byte for byte; DIFFERENCES[ID] checks them instead (and
                               docs/redis.md lists ID with its reason)
    @near N COMMAND ...        a reply that depends on the time (TTL, PTTL, EXPIRETIME
                               of a relative expiry): both integers at most N apart
                               (the servers run the line at slightly different times),
                               or else byte for byte the same
    @raw "bytes" ...           sends the bytes (the tokens joined by nothing) as they are
                               and compares the next reply; @raw:N compares N replies,
                               @raw:0 none
    @closed                    the server must have closed the connection (after QUIT, a
                               protocol error); whatever came before the close is compared;
                               the next line on that connection reconnects

Before each script (and each pass) every key is deleted on both servers.
"""

import os
import unittest

from harness import Closed, RespConn, delete_all_keys

SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")

NOT_IN_MULTI = b"-ERR Command not allowed inside a transaction\r\n"


# ---------------------------------------------------------------------------------------
# Tokens


def split_args(line):
    """Splits a line like redis-cli (sdssplitargs): returns the arguments as bytes, or
    raises ValueError for unbalanced quotes."""
    args = []
    i, n = 0, len(line)
    hexdigits = "0123456789abcdefABCDEF"
    while True:
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            return args
        current = bytearray()
        in_double = in_single = False
        while True:
            if in_double:
                if i >= n:
                    raise ValueError(f"unbalanced quotes: {line}")
                c = line[i]
                if c == "\\" and i + 3 < n and line[i + 1] == "x" and line[i + 2] in hexdigits \
                        and line[i + 3] in hexdigits:
                    current.append(int(line[i + 2:i + 4], 16))
                    i += 3
                elif c == "\\" and i + 1 < n:
                    i += 1
                    current += {"n": b"\n", "r": b"\r", "t": b"\t", "b": b"\b",
                                "a": b"\a"}.get(line[i], line[i].encode())
                elif c == '"':
                    if i + 1 < n and not line[i + 1].isspace():
                        raise ValueError(f"a closing quote must be followed by a space: {line}")
                    in_double = False
                    i += 1
                    break
                else:
                    current += c.encode()
            elif in_single:
                if i >= n:
                    raise ValueError(f"unbalanced quotes: {line}")
                c = line[i]
                if c == "\\" and i + 1 < n and line[i + 1] == "'":
                    i += 1
                    current += b"'"
                elif c == "'":
                    if i + 1 < n and not line[i + 1].isspace():
                        raise ValueError(f"a closing quote must be followed by a space: {line}")
                    in_single = False
                    i += 1
                    break
                else:
                    current += c.encode()
            else:
                if i >= n or line[i].isspace():
                    break
                c = line[i]
                if c == '"':
                    in_double = True
                elif c == "'":
                    in_single = True
                else:
                    current += c.encode()
            i += 1
        args.append(bytes(current))


class Line:
    """One script line, parsed."""

    def __init__(self, path, number, text):
        self.where = f"{os.path.basename(path)}:{number}"
        self.text = text
        self.conn = 1
        self.difference = None
        self.near = None  # @near: the largest difference allowed between integer replies
        self.raw = None  # bytes to send as they are
        self.replies = 1
        self.closed = False
        tokens = split_args(text)
        if tokens and tokens[0].startswith(b"[") and tokens[0].endswith(b"]"):
            self.conn = int(tokens[0][1:-1])
            tokens = tokens[1:]
        if tokens and tokens[0] == b"@differs":
            self.difference = tokens[1].decode()
            if self.difference not in DIFFERENCES:
                raise ValueError(f"{self.where}: unknown difference {self.difference}")
            tokens = tokens[2:]
        elif tokens and tokens[0] == b"@near":
            self.near = int(tokens[1])
            tokens = tokens[2:]
        if tokens and (tokens[0] == b"@raw" or tokens[0].startswith(b"@raw:")):
            if b":" in tokens[0]:
                self.replies = int(tokens[0].split(b":")[1])
            self.raw = b"".join(tokens[1:])
            tokens = []
        elif tokens == [b"@closed"]:
            self.closed = True
            self.replies = 0
            tokens = []
        elif tokens and tokens[0].startswith(b"@"):
            raise ValueError(f"{self.where}: unknown directive {tokens[0]!r}")
        self.args = tokens
        if not self.args and self.raw is None and not self.closed:
            raise ValueError(f"{self.where}: no command")


def load_script(path):
    lines = []
    with open(path, encoding="utf-8") as script:
        for number, text in enumerate(script, 1):
            text = text.rstrip("\n")
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            lines.append(Line(path, number, text.strip()))
    return lines


def script_paths():
    return sorted(
        os.path.join(SCRIPTS_DIR, name)
        for name in os.listdir(SCRIPTS_DIR)
        if name.endswith(".redis")
    )


# ---------------------------------------------------------------------------------------
# Documented differences: each ID is a row of docs/redis.md's table, and its check says
# what ferrotx must answer instead (None: fine; otherwise what is wrong).


def _mask_ids(value, top=True):
    """The value with CLIENT ID's integer (at the top) and HELLO's `id` field (at any
    depth) replaced by a marker."""
    kind = value[0]
    if kind == "int" and top:
        return ("int", "<id>")
    if kind == "map":
        return ("map", [(k, ("int", "<id>") if k == ("bulk", b"id") else _mask_ids(v, False))
                        for k, v in value[1]])
    if kind == "array" and value[1] is not None:
        items = [_mask_ids(item, False) for item in value[1]]
        for i in range(0, len(items) - 1):
            if items[i] == ("bulk", b"id") and items[i + 1][0] == "int":
                items[i + 1] = ("int", "<id>")
        return ("array", items)
    return value


def check_client_id(ferrotx, redis):
    if _mask_ids(ferrotx[1]) != _mask_ids(redis[1]):
        return "differ in more than the client id"
    return None


def _text_of(value):
    if value[0] == "bulk":
        return value[1]
    if value[0] == "verbatim":
        return value[2]
    return None


def check_info(ferrotx, redis):
    text, theirs = _text_of(ferrotx[1]), _text_of(redis[1])
    if text is None or theirs is None:
        return "INFO must answer a (verbatim) string on both"
    if ferrotx[1][0] != redis[1][0]:
        return "INFO's reply types differ"
    if not text.endswith(b"\r\n") or (text and b"\r\n\r\n\r\n" in text):
        return "INFO's text is not Redis's format"
    for section in (b"# Server", b"# Clients", b"# Memory", b"# Stats"):
        if (section in theirs) != (section in text):
            return f"section {section!r} in one reply only"
    if b"# Server" in text and b"redis_version:7.0.15\r\n" not in text:
        return "no redis_version"
    return None


def check_command_table(ferrotx, redis):
    if ferrotx[1][0] != redis[1][0]:
        return f"reply types differ ({ferrotx[1][0]} / {redis[1][0]})"
    if ferrotx[1][0] == "error":
        return "an error"
    return None


def check_near(ferrotx, redis, most):
    """@near: integer replies at most `most` apart, anything else byte for byte."""
    if ferrotx[1][0] == "int" and redis[1][0] == "int":
        if abs(ferrotx[1][1] - redis[1][1]) <= most:
            return None
        return f"integers more than {most} apart"
    if ferrotx[0] != redis[0]:
        return "not integers, and different"
    return None


def check_key_order(ferrotx, redis):
    if ferrotx[1][0] != redis[1][0] or ferrotx[1][0] not in ("array", "set"):
        return "not both arrays"
    if sorted(ferrotx[1][1]) != sorted(redis[1][1]):
        return "different keys"
    return None


def check_keyspace_in_multi(ferrotx, redis):
    if ferrotx[0] == NOT_IN_MULTI:
        return None
    if ferrotx[0].startswith(b"-EXECABORT Transaction discarded because of previous errors"):
        return None
    return f"expected {NOT_IN_MULTI!r} (or EXECABORT for EXEC)"


def check_unsupported(ferrotx, redis):
    if not (ferrotx[0].startswith(b"-ERR unknown command '")
            or ferrotx[0].startswith(b"-ERR unknown subcommand '")):
        return "expected ferrotx's unknown (sub)command error"
    if redis[0].startswith(b"-ERR unknown command"):
        return "redis-server does not know it either: not a difference"
    return None


def check_scan(ferrotx, redis):
    # Run by the runner: (sorted keys, sorted keys) of whole iterations.
    if ferrotx != redis:
        return "different keys over a whole SCAN iteration"
    return None


class Difference:
    def __init__(self, summary, check):
        self.summary = summary
        self.check = check


DIFFERENCES = {
    "client-id": Difference("CLIENT ID and HELLO's id values", check_client_id),
    "info": Difference("INFO's fields", check_info),
    "command-table": Difference("COMMAND, COMMAND COUNT/DOCS and COMMAND INFO of containers",
                                check_command_table),
    "key-order": Difference("the order of KEYS", check_key_order),
    "scan-cursor": Difference("SCAN's cursors and the order and grouping of its keys",
                              check_scan),
    "keyspace-in-multi": Difference("DBSIZE, SCAN, KEYS and INFO inside MULTI",
                                    check_keyspace_in_multi),
    "unsupported-command": Difference("commands ferrotx does not have", check_unsupported),
}

# Differences of docs/redis.md's table that no script shows: test_clients.py checks the
# limits (value-size, transaction-size, request-limits), test_memory.py CONFIG (config);
# deleted-keys is the store's.
OTHER_DIFFERENCES = ("value-size", "transaction-size", "request-limits", "deleted-keys",
                     "config")


# ---------------------------------------------------------------------------------------
# Running a script


class Side:
    """One server's connections for a script run."""

    def __init__(self, name, port, resp3):
        self.name = name
        self.port = port
        self.resp3 = resp3
        self.conns = {}

    def conn(self, number, hello_replies):
        conn = self.conns.get(number)
        if conn is None:
            conn = RespConn(self.port)
            self.conns[number] = conn
            if self.resp3:
                conn.send_raw(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
                hello_replies.append(conn.read_reply())
        return conn

    def forget(self, number):
        conn = self.conns.pop(number, None)
        if conn is not None:
            conn.close()

    def close(self):
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()


def _read_replies(conn, count):
    replies = []
    for _ in range(count):
        try:
            replies.append(conn.read_reply())
        except Closed:
            replies.append((b"<connection closed>", ("closed",)))
            break
    return replies


def _scan_all(conn, args):
    """Runs SCAN from cursor 0 to 0 with `args` (after the cursor): the sorted keys, or
    the first reply if it is not a SCAN page."""
    keys = []
    cursor = b"0"
    for _ in range(100000):
        raw, value = conn.call(b"SCAN", cursor, *args)
        if value[0] != "array" or len(value[1]) != 2:
            return raw
        cursor = value[1][0][1]
        keys += [item[1] for item in value[1][1][1]]
        if cursor == b"0":
            return sorted(keys)
    return "SCAN never ended"


def _show(raw, limit=300):
    text = repr(raw)
    return text if len(text) <= limit else text[:limit] + "..."


def run_script(path, ferrotx_port, redis_port, resp3, password=None):
    """Runs one script on both servers; returns the list of mismatches (strings)."""
    lines = load_script(path)
    delete_all_keys(ferrotx_port, password)
    delete_all_keys(redis_port, password)
    sides = [Side("ferrotx", ferrotx_port, resp3), Side("redis", redis_port, resp3)]
    problems = []
    try:
        for line in lines:
            hellos = [[], []]
            replies = []
            for side, hello in zip(sides, hellos):
                conn = side.conn(line.conn, hello)
                if line.closed:
                    closed, extra = conn.wait_closed()
                    replies.append([(extra + (b"" if closed else b"<still open>"), None)])
                    side.forget(line.conn)
                    continue
                if line.difference == "scan-cursor":
                    if line.args[:2] != [b"SCAN", b"0"]:
                        raise ValueError(f"{line.where}: scan-cursor needs SCAN 0 ...")
                    replies.append([_scan_all(conn, line.args[2:])])
                    continue
                try:
                    conn.send_raw(line.raw if line.raw is not None else _encode(line.args))
                except OSError as error:
                    replies.append([(f"<send failed: {error}>".encode(), ("closed",))])
                    continue
                try:
                    replies.append(_read_replies(conn, line.replies))
                except OSError as error:
                    problems.append(f"{line.where}: {line.text}: {side.name}: {error!r} "
                                    "(the script stops here)")
                    return problems
            # A connection opened for this line: its HELLO 3 must agree too.
            if hellos[0] or hellos[1]:
                if len(hellos[0]) != len(hellos[1]) or check_client_id(hellos[0][0], hellos[1][0]):
                    problems.append(f"{line.where}: HELLO 3 on connect: ferrotx "
                                    f"{_show(hellos[0])} / redis {_show(hellos[1])}")
            ours, theirs = replies
            if line.near is not None:
                if len(ours) != 1 or len(theirs) != 1:
                    problems.append(f"{line.where}: {line.text}: one reply expected")
                    continue
                why = check_near(ours[0], theirs[0], line.near)
                if why is not None:
                    problems.append(f"{line.where}: {line.text}: {why}\n    ferrotx: "
                                    f"{_show(ours[0][0])}\n    redis:   {_show(theirs[0][0])}")
                continue
            if line.difference is not None:
                if len(ours) != 1 or len(theirs) != 1:
                    problems.append(f"{line.where}: {line.text}: one reply expected")
                    continue
                why = DIFFERENCES[line.difference].check(ours[0], theirs[0])
                if why is not None:
                    problems.append(
                        f"{line.where}: {line.text}\n    documented difference "
                        f"{line.difference}: {why}\n    ferrotx: {_show(ours[0][0] if isinstance(ours[0], tuple) else ours[0])}"
                        f"\n    redis:   {_show(theirs[0][0] if isinstance(theirs[0], tuple) else theirs[0])}")
                continue
            ours_raw = [reply[0] for reply in ours]
            theirs_raw = [reply[0] for reply in theirs]
            if ours_raw != theirs_raw:
                problems.append(f"{line.where}: {line.text}\n    ferrotx: "
                                f"{_show(b''.join(ours_raw))}\n    redis:   "
                                f"{_show(b''.join(theirs_raw))}")
            if len(problems) >= 25:
                problems.append("(stopped after 25 differences)")
                break
    finally:
        for side in sides:
            side.close()
    return problems


def _encode(args):
    from harness import encode_command
    return encode_command(args)


# ---------------------------------------------------------------------------------------
# unittest glue


class ScriptTest(unittest.TestCase):
    """One script in one protocol (set by make_suite)."""

    servers = None
    path = None
    resp3 = False

    def runTest(self):
        if os.path.basename(self.path).startswith("auth"):
            # Against the pair that requires a password.
            ferrotx_port, redis_port = self.servers.password_pair()
            problems = run_script(self.path, ferrotx_port, redis_port, self.resp3,
                                  self.servers.password)
        else:
            problems = run_script(self.path, self.servers.ferrotx_ports[0],
                                  self.servers.redis_port, self.resp3)
        self.servers.check_alive()
        if problems:
            self.fail(f"{len(problems)} unexplained difference(s) from redis-server:\n  "
                      + "\n  ".join(problems))

    def __str__(self):
        proto = "RESP3" if self.resp3 else "RESP2"
        return f"differential {os.path.basename(self.path)} ({proto})"


class DocumentedDifferences(unittest.TestCase):
    def test_every_difference_is_in_the_docs(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        docs = os.path.join(root, "docs", "redis.md")
        with open(docs, encoding="utf-8") as file:
            text = file.read()
        missing = [name for name in list(DIFFERENCES) + list(OTHER_DIFFERENCES)
                   if f"`{name}`" not in text]
        self.assertEqual(missing, [], "differences missing from docs/redis.md's table")

    def test_every_script_parses_and_every_difference_is_used(self):
        used = set()
        for path in script_paths():
            used |= {line.difference for line in load_script(path) if line.difference}
        self.assertEqual(sorted(set(DIFFERENCES) - used), [], "differences no script shows")


def make_suite(servers, only=None):
    suite = unittest.TestSuite()
    suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(DocumentedDifferences))
    for path in script_paths():
        if only and not any(name in os.path.basename(path) for name in only):
            continue
        for resp3 in (False, True):
            test = type("ScriptTest", (ScriptTest,), {})()
            test.servers = servers
            test.path = path
            test.resp3 = resp3
            suite.addTest(test)
    return suite
