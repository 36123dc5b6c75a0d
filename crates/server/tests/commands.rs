//! Redis commands over TCP against a 3-node cluster (3 replicas) in this process: every
//! command a transaction, MULTI/EXEC and WATCH across partitions and nodes, pipelining,
//! whole-keyspace commands.

mod common;

use std::collections::BTreeSet;

use ferrotx_cluster::RespSettings;

use common::{RedisCluster, bulk, bulks, command, parse_bulks};

#[test]
fn ping_echo_and_errors_of_the_session() {
    let cluster = RedisCluster::start();
    let mut client = cluster.client(0);
    assert_eq!(client.text(&["PING"]), "+PONG\r\n");
    assert_eq!(client.call(&["PING", "hi"]), bulk("hi"));
    assert_eq!(client.call(&["ECHO", "x y"]), bulk("x y"));
    assert_eq!(
        client.text(&["NOSUCH", "a"]),
        "-ERR unknown command 'NOSUCH', with args beginning with: 'a' \r\n"
    );
    assert_eq!(
        client.text(&["GET"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(client.text(&["SELECT", "0"]), "+OK\r\n");
    // Inline commands too.
    client.send(b"PING\r\n");
    assert_eq!(client.reply(), b"+PONG\r\n");
    assert_eq!(client.text(&["QUIT"]), "+OK\r\n");
    assert!(client.read_to_end().is_empty());
}

#[test]
fn string_commands_on_keys_of_every_node() {
    let cluster = RedisCluster::start();
    let keys = cluster.keys_with_primaries("k", &[0, 1, 2]);
    let partitions: BTreeSet<u32> = keys
        .iter()
        .map(|k| cluster.partition_of(k.as_bytes()))
        .collect();
    assert_eq!(partitions.len(), 3);
    for node in 0..3 {
        let mut client = cluster.client(node);
        for (i, key) in keys.iter().enumerate() {
            let key = key.as_str();
            let value = format!("v{node}{i}");
            assert_eq!(client.text(&["SET", key, &value]), "+OK\r\n");
            // Read back from every node: reads see the latest commit wherever they run.
            for reader in 0..3 {
                assert_eq!(cluster.client(reader).call(&["GET", key]), bulk(&value));
            }
            assert_eq!(
                client.text(&["INCR", key]),
                "-ERR value is not an integer or out of range\r\n"
            );
            assert_eq!(
                client.text(&["APPEND", key, "!"]),
                format!(":{}\r\n", value.len() + 1)
            );
            assert_eq!(
                client.text(&["STRLEN", key]),
                format!(":{}\r\n", value.len() + 1)
            );
            assert_eq!(client.text(&["DEL", key]), ":1\r\n");
            assert_eq!(client.text(&["GET", key]), "$-1\r\n");
            assert_eq!(client.text(&["INCR", key]), ":1\r\n");
            assert_eq!(client.text(&["INCRBY", key, "41"]), ":42\r\n");
            assert_eq!(client.text(&["DECR", key]), ":41\r\n");
            assert_eq!(client.text(&["SETNX", key, "x"]), ":0\r\n");
            assert_eq!(client.call(&["GETSET", key, "7"]), bulk("41"));
            assert_eq!(client.call(&["GETDEL", key]), bulk("7"));
            assert_eq!(client.text(&["EXISTS", key, key]), ":0\r\n");
            assert_eq!(client.text(&["SET", key, "a", "XX"]), "$-1\r\n");
            assert_eq!(client.text(&["SET", key, "a", "NX"]), "+OK\r\n");
            assert_eq!(client.call(&["SET", key, "b", "GET"]), bulk("a"));
        }
        // One MSET and MGET over keys of three partitions whose primaries are on three
        // nodes: one transaction each.
        let (a, b, c) = (keys[0].as_str(), keys[1].as_str(), keys[2].as_str());
        assert_eq!(client.text(&["MSET", a, "1", b, "2", c, "3"]), "+OK\r\n");
        assert_eq!(client.call(&["MGET", c, "missing", a, b]), {
            let mut expected = b"*4\r\n".to_vec();
            expected.extend(bulk("3"));
            expected.extend(b"$-1\r\n");
            expected.extend(bulk("1"));
            expected.extend(bulk("2"));
            expected
        });
        assert_eq!(client.text(&["MSETNX", a, "x", "fresh", "y"]), ":0\r\n");
        assert_eq!(client.text(&["EXISTS", a, "fresh", b]), ":2\r\n");
        assert_eq!(client.text(&["DEL", a, b, c, "fresh"]), ":3\r\n");
        assert_eq!(
            client.call(&["MGET", a, b, c]),
            b"*3\r\n$-1\r\n$-1\r\n$-1\r\n"
        );
    }
    // Binary-safe keys and values.
    let mut client = cluster.client(1);
    let key: &[u8] = b"bin\x00\r\nkey";
    let value: &[u8] = b"\x00\xff\r\n\x01";
    assert_eq!(client.call_bytes(&[b"SET", key, value]), b"+OK\r\n");
    assert_eq!(
        client.call_bytes(&[b"GET", key]),
        b"$5\r\n\x00\xff\r\n\x01\r\n"
    );
    // Keys expire: the deadline is the node's wall clock (the server measures it).
    assert_eq!(client.text(&["SET", "ttl", "v", "EX", "10"]), "+OK\r\n");
    assert_eq!(client.text(&["TTL", "ttl"]), ":10\r\n");
    assert_eq!(client.text(&["EXPIRE", "ttl", "-1"]), ":1\r\n");
    assert_eq!(client.text(&["EXISTS", "ttl"]), ":0\r\n");
}

#[test]
fn multi_exec_commits_across_partitions_on_different_nodes() {
    let cluster = RedisCluster::start();
    let keys = cluster.keys_with_primaries("tx", &[0, 1, 2]);
    let (a, b, c) = (keys[0].as_str(), keys[1].as_str(), keys[2].as_str());
    let mut client = cluster.client(1);
    assert_eq!(client.text(&["SET", a, "10"]), "+OK\r\n");
    assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.text(&["DECRBY", a, "3"]), "+QUEUED\r\n");
    assert_eq!(client.text(&["INCRBY", b, "3"]), "+QUEUED\r\n");
    assert_eq!(client.text(&["SET", c, "done"]), "+QUEUED\r\n");
    assert_eq!(client.text(&["GET", b]), "+QUEUED\r\n");
    assert_eq!(client.text(&["PING"]), "+QUEUED\r\n");
    assert_eq!(
        client.text(&["EXEC"]),
        "*5\r\n:7\r\n:3\r\n+OK\r\n$1\r\n3\r\n+PONG\r\n"
    );
    let mut other = cluster.client(2);
    assert_eq!(other.call(&["MGET", a, b, c]), bulks(&["7", "3", "done"]));

    // An error inside EXEC is that command's reply; the others commit.
    assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.text(&["INCR", c]), "+QUEUED\r\n");
    assert_eq!(client.text(&["INCR", a]), "+QUEUED\r\n");
    assert_eq!(
        client.text(&["EXEC"]),
        "*2\r\n-ERR value is not an integer or out of range\r\n:8\r\n"
    );
    // A command refused while queuing makes EXEC fail and nothing runs.
    assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.text(&["INCR", a]), "+QUEUED\r\n");
    assert_eq!(
        client.text(&["INCR"]),
        "-ERR wrong number of arguments for 'incr' command\r\n"
    );
    assert_eq!(
        client.text(&["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(other.call(&["GET", a]), bulk("8"));
    assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.text(&["DISCARD"]), "+OK\r\n");
    assert_eq!(client.text(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        client.text(&["KEYS", "*"]),
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(client.text(&["DISCARD"]), "+OK\r\n");
}

#[test]
fn watch_fails_exec_when_another_node_changes_a_watched_key() {
    let cluster = RedisCluster::start();
    let keys = cluster.keys_with_primaries("w", &[2, 0]);
    let (watched, other_key) = (keys[0].as_str(), keys[1].as_str());
    let mut first = cluster.client(0);
    let mut second = cluster.client(1);
    assert_eq!(first.text(&["SET", watched, "1"]), "+OK\r\n");

    // Unchanged: EXEC runs.
    assert_eq!(first.text(&["WATCH", watched, "absent"]), "+OK\r\n");
    assert_eq!(first.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(first.text(&["INCR", watched]), "+QUEUED\r\n");
    assert_eq!(first.text(&["EXEC"]), "*1\r\n:2\r\n");

    // Changed by a client of another node between WATCH and EXEC: EXEC answers nil and
    // writes nothing.
    assert_eq!(first.text(&["WATCH", watched]), "+OK\r\n");
    assert_eq!(second.text(&["SET", watched, "changed"]), "+OK\r\n");
    assert_eq!(first.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        first.text(&["SET", other_key, "should-not-exist"]),
        "+QUEUED\r\n"
    );
    assert_eq!(first.text(&["EXEC"]), "*-1\r\n");
    assert_eq!(second.text(&["EXISTS", other_key]), ":0\r\n");
    assert_eq!(second.call(&["GET", watched]), bulk("changed"));

    // A watched key that did not exist and was created meanwhile counts as changed too.
    assert_eq!(first.text(&["WATCH", "fresh-key"]), "+OK\r\n");
    assert_eq!(second.text(&["SET", "fresh-key", "x"]), "+OK\r\n");
    assert_eq!(first.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(first.text(&["GET", "fresh-key"]), "+QUEUED\r\n");
    assert_eq!(first.text(&["EXEC"]), "*-1\r\n");
    // EXEC unwatched everything: the next one runs.
    assert_eq!(first.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(first.text(&["GET", "fresh-key"]), "+QUEUED\r\n");
    assert_eq!(first.call(&["EXEC"]), {
        let mut expected = b"*1\r\n".to_vec();
        expected.extend(bulk("x"));
        expected
    });
}

#[test]
fn a_thousand_pipelined_commands_in_one_write_answer_in_order() {
    let cluster = RedisCluster::start();
    let mut client = cluster.client(2);
    let mut pipeline = Vec::new();
    for i in 0..500 {
        let (key, value) = (format!("p{i}"), format!("v{i}"));
        pipeline.extend(command(&[b"SET", key.as_bytes(), value.as_bytes()]));
    }
    for i in 0..499 {
        pipeline.extend(command(&[b"GET", format!("p{i}").as_bytes()]));
    }
    pipeline.extend(b"PING\r\n");
    client.send(&pipeline);
    for _ in 0..500 {
        assert_eq!(client.reply(), b"+OK\r\n");
    }
    for i in 0..499 {
        assert_eq!(client.reply(), bulk(&format!("v{i}")), "reply {i}");
    }
    assert_eq!(client.reply(), b"+PONG\r\n");
    // The data commands ran in transactions of up to 64 pipelined commands each (1,000
    // commands in one write: at least 15 transactions; PING joins none).
    let info = client.text(&["INFO", "ferrotx"]);
    let joined: usize = info
        .lines()
        .find_map(|line| line.strip_prefix("pipelined_commands_joined:"))
        .unwrap_or_else(|| panic!("{info}"))
        .parse()
        .unwrap();
    assert!((900..=999 - 15).contains(&joined), "{joined} joined");
    // One client alone never conflicts: no command lost an attempt.
    assert!(
        info.lines().any(|line| line == "transaction_aborts_max:0"),
        "{info}"
    );
}

#[test]
fn pipelined_commands_too_large_together_for_one_commit_run_one_by_one() {
    let cluster = RedisCluster::start();
    let mut client = cluster.client(1);
    // Two 600 KB values whose keys share a primary: APPENDs to both, pipelined, would
    // send that primary 1.2 MB in one LOCK, more than a message may carry.
    let keys = cluster.keys_with_primaries("big", &[2]);
    let more = cluster.keys_with_primaries("big-b", &[2]);
    let (a, b) = (&keys[0], &more[0]);
    let big = "v".repeat(600 << 10);
    for key in [a, b] {
        assert_eq!(client.text(&["SET", key, &big]), "+OK\r\n");
    }
    let mut pipeline = command(&[b"APPEND", a.as_bytes(), b"x"]);
    pipeline.extend(command(&[b"APPEND", b.as_bytes(), b"yz"]));
    pipeline.extend(command(&[b"STRLEN", a.as_bytes()]));
    client.send(&pipeline);
    let len = 600 << 10;
    assert_eq!(client.reply(), format!(":{}\r\n", len + 1).into_bytes());
    assert_eq!(client.reply(), format!(":{}\r\n", len + 2).into_bytes());
    assert_eq!(client.reply(), format!(":{}\r\n", len + 1).into_bytes());
}

#[test]
fn pipelined_increments_from_clients_of_every_node_add_up_exactly_and_in_order() {
    pipelined_increments_add_up(&RedisCluster::start(), 40);
}

#[test]
fn pipelined_increments_add_up_when_a_tenth_of_all_datagrams_is_lost() {
    // Every worker drops 10% of the datagrams it sends: requests and responses of every
    // phase (READ, LOCK, VALIDATE, COMMIT-BACKUP, COMMIT-PRIMARY, TRUNCATE) are lost and
    // retransmitted, some after their first copy ran (answered from the saved response).
    let cluster = RedisCluster::start_lossy(3, 3, 2, 2, RespSettings::default(), 0.1);
    pipelined_increments_add_up(&cluster, 40);
    // Plain pipelined SETs and GETs through the same loss, read back from another node.
    let mut writer = cluster.client(0);
    let mut pipeline = Vec::new();
    for i in 0..200 {
        pipeline.extend(command(&[
            b"SET",
            format!("lossy{i}").as_bytes(),
            format!("{i}").as_bytes(),
        ]));
    }
    writer.send(&pipeline);
    for _ in 0..200 {
        assert_eq!(writer.reply(), b"+OK\r\n");
    }
    let mut reader = cluster.client(2);
    let mut pipeline = Vec::new();
    for i in 0..200 {
        pipeline.extend(command(&[b"GET", format!("lossy{i}").as_bytes()]));
    }
    reader.send(&pipeline);
    for i in 0..200 {
        assert_eq!(reader.reply(), bulk(&i.to_string()));
    }
}

/// Pipelines of increments of four hot keys (primaries on every node), from a client of
/// every node at once, `rounds` pipelines each: their transactions conflict and retry
/// whole. Within a pipeline a key's values only grow (the commands ran in order), and
/// the counters end equal to the increments that committed.
fn pipelined_increments_add_up(cluster: &RedisCluster, rounds: usize) {
    const DEPTH: usize = 24;
    let mut hot = cluster.keys_with_primaries("pipehot", &[0, 1, 2]);
    hot.extend(cluster.keys_with_primaries("pipehot-b", &[0]));
    let counts: Vec<([usize; 4], usize)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..3u16)
            .map(|node| {
                let mut client = cluster.client(node);
                let hot = &hot;
                scope.spawn(move || {
                    let (mut committed, mut gave_up) = ([0; 4], 0);
                    for round in 0..rounds {
                        let targets: Vec<usize> = (0..DEPTH)
                            .map(|i| (i * 7 + round + usize::from(node)) % 4)
                            .collect();
                        let mut pipeline = Vec::new();
                        for &target in &targets {
                            pipeline.extend(command(&[b"INCR", hot[target].as_bytes()]));
                        }
                        client.send(&pipeline);
                        // Within one pipeline a key's values only grow: the commands ran
                        // in order.
                        let mut last = [0i64; 4];
                        for &target in &targets {
                            let reply = String::from_utf8(client.reply()).unwrap();
                            if let Some(value) = reply.strip_prefix(':') {
                                let value: i64 = value.trim_end().parse().unwrap();
                                assert!(value > last[target], "{value} after {}", last[target]);
                                last[target] = value;
                                committed[target] += 1;
                            } else {
                                assert!(reply.starts_with(GAVE_UP), "{reply}");
                                gave_up += 1;
                            }
                        }
                    }
                    (committed, gave_up)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    counters_add_up(
        &mut cluster.client(1),
        &hot,
        &counts,
        3 * rounds * DEPTH,
        10,
    );
}

/// Every committed increment of each of `keys` counted once, none lost, none doubled
/// (`counts`: per client, the increments of each key that committed, and the attempts
/// given up); and giving up the exception, at most one attempt in `one_in` of
/// `attempted`.
fn counters_add_up<const N: usize>(
    client: &mut common::Client,
    keys: &[String],
    counts: &[([usize; N], usize)],
    attempted: usize,
    one_in: usize,
) {
    for (index, key) in keys.iter().enumerate() {
        let expected: usize = counts.iter().map(|(committed, _)| committed[index]).sum();
        assert_eq!(
            client.call(&["GET", key]),
            bulk(&expected.to_string()),
            "{key}"
        );
    }
    let gave_up: usize = counts.iter().map(|(_, gave_up)| gave_up).sum();
    assert!(
        gave_up * one_in <= attempted,
        "{gave_up} of {attempted} gave up"
    );
}

/// The reply to a transaction still conflicting when its retries ran out: allowed under
/// heavy contention (a transaction at a remote primary can lose to one at a local primary
/// again and again), but it must have written nothing.
const GAVE_UP: &str = "-TRYAGAIN ferrotx: transaction aborted after ";

#[test]
fn concurrent_increments_from_clients_of_every_node_add_up_exactly() {
    let cluster = RedisCluster::start();
    // Two clients per node; two counters whose primaries are on nodes 0 and 1.
    const CLIENTS: u16 = 6;
    const ROUNDS: usize = 100;
    let hot = cluster.keys_with_primaries("hot", &[0, 1]);
    // Per client: increments that committed on each counter, and those given up.
    let counts: Vec<([usize; 2], usize)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let mut client = cluster.client(i % 3);
                let hot = &hot;
                scope.spawn(move || {
                    let (mut committed, mut gave_up) = ([0; 2], 0);
                    let own = usize::from(i % 2);
                    for round in 0..ROUNDS {
                        // Its own counter, and every third round both in one MULTI/EXEC.
                        let reply = client.text(&["INCR", &hot[own]]);
                        if reply.starts_with(':') {
                            committed[own] += 1;
                        } else {
                            assert!(reply.starts_with(GAVE_UP), "{reply}");
                            gave_up += 1;
                        }
                        if round % 3 == 0 {
                            assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
                            assert_eq!(client.text(&["INCR", &hot[0]]), "+QUEUED\r\n");
                            assert_eq!(client.text(&["INCR", &hot[1]]), "+QUEUED\r\n");
                            let reply = client.text(&["EXEC"]);
                            if reply.starts_with("*2\r\n:") {
                                committed[0] += 1;
                                committed[1] += 1;
                            } else {
                                assert!(reply.starts_with(GAVE_UP), "{reply}");
                                gave_up += 1;
                            }
                        }
                    }
                    (committed, gave_up)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // Every committed increment counted once; giving up is the exception.
    let attempted = usize::from(CLIENTS) * (ROUNDS + ROUNDS.div_ceil(3));
    counters_add_up(&mut cluster.client(2), &hot, &counts, attempted, 20);
}

#[test]
fn scan_keys_and_dbsize_cover_every_partition_on_every_node() {
    let cluster = RedisCluster::start();
    let mut client = cluster.client(0);
    assert_eq!(client.text(&["DBSIZE"]), ":0\r\n");
    assert_eq!(client.text(&["SCAN", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
    let names: Vec<String> = (0..120).map(|i| format!("scan:{i}")).collect();
    let partitions: BTreeSet<u32> = names
        .iter()
        .map(|k| cluster.partition_of(k.as_bytes()))
        .collect();
    assert_eq!(partitions.len(), 6, "the keys cover every partition");
    for chunk in names.chunks(40) {
        let mut args = vec!["MSET"];
        for name in chunk {
            args.push(name);
            args.push("v");
        }
        assert_eq!(client.text(&args), "+OK\r\n");
    }
    assert_eq!(client.text(&["SET", "other", "v"]), "+OK\r\n");
    let all: BTreeSet<String> = names.iter().cloned().collect();
    for node in 0..3 {
        let mut client = cluster.client(node);
        assert_eq!(client.text(&["DBSIZE"]), ":121\r\n");
        let keys: BTreeSet<String> = parse_bulks(&client.call(&["KEYS", "scan:*"]))
            .into_iter()
            .collect();
        assert_eq!(keys, all);
        let mut some = parse_bulks(&client.call(&["KEYS", "scan:1?"]));
        some.sort();
        let expected: Vec<String> = (10..20).map(|i| format!("scan:{i}")).collect();
        assert_eq!(some, expected);
        assert_eq!(parse_bulks(&client.call(&["KEYS", "*"])).len(), 121);

        // A whole SCAN iteration, a few keys at a time: every key exactly once.
        let (mut cursor, mut seen, mut calls) = ("0".to_owned(), Vec::new(), 0);
        loop {
            let reply = client.call(&["SCAN", &cursor, "MATCH", "scan:*", "COUNT", "7"]);
            let text = String::from_utf8(reply).unwrap();
            let mut lines = text.split("\r\n");
            assert_eq!(lines.next(), Some("*2"));
            lines.next();
            cursor = lines.next().unwrap().to_owned();
            let rest: Vec<&str> = lines.collect();
            seen.extend(parse_bulks(rest.join("\r\n").as_bytes()));
            calls += 1;
            if cursor == "0" {
                break;
            }
        }
        assert!(calls >= 121 / 7, "{calls} calls");
        assert_eq!(seen.len(), 120, "{seen:?}");
        assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), all);
        // TYPE string keeps every key; other types none.
        let reply =
            String::from_utf8(client.call(&["SCAN", "0", "COUNT", "1000", "TYPE", "string"]))
                .unwrap();
        assert!(reply.starts_with("*2\r\n$1\r\n0\r\n*121\r\n"), "{reply}");
        assert_eq!(
            client.text(&["SCAN", "0", "COUNT", "1000", "TYPE", "hash"]),
            "*2\r\n$1\r\n0\r\n*0\r\n"
        );
    }
    // Deleted keys leave the counts.
    assert_eq!(client.text(&["DEL", "scan:1", "scan:2", "other"]), ":3\r\n");
    assert_eq!(client.text(&["DBSIZE"]), ":118\r\n");
    assert_eq!(parse_bulks(&client.call(&["KEYS", "*"])).len(), 118);
    // A cursor this cluster never gave ends the iteration.
    assert_eq!(client.text(&["SCAN", "65535"]), "*2\r\n$1\r\n0\r\n*0\r\n");
}

#[test]
fn expired_keys_nobody_touches_are_removed_in_the_background() {
    let cluster = RedisCluster::start();
    let mut client = cluster.client(0);
    let mut pipeline = Vec::new();
    for i in 0..200 {
        pipeline.extend(command(&[
            b"SET",
            format!("exp:{i}").as_bytes(),
            b"v",
            b"PX",
            b"100",
        ]));
    }
    for i in 0..50 {
        pipeline.extend(command(&[b"SET", format!("keep:{i}").as_bytes(), b"v"]));
    }
    client.send(&pipeline);
    for _ in 0..250 {
        assert_eq!(client.reply(), b"+OK\r\n");
    }
    // DBSIZE counts expired keys until they are removed, and no command touches these:
    // only the sweepers (every 100 ms) bring it down to the keys without expiry.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    for node in 0..3 {
        assert_eq!(cluster.client(node).text(&["DBSIZE"]), ":50\r\n");
    }
    assert_eq!(client.call(&["GET", "keep:7"]), bulk("v"));
}

#[test]
fn keys_answers_while_clients_of_every_node_write_hot_keys() {
    // KEYS reads every partition past keys locked by commits in flight: it waits for
    // them rather than failing while a hot key is being written.
    let cluster = RedisCluster::start();
    let hot = cluster.keys_with_primaries("hot", &[0, 1, 2]);
    let mset = ["MSET", &hot[0], "0", &hot[1], "0", &hot[2], "0"];
    assert_eq!(cluster.client(0).text(&mset), "+OK\r\n");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let failures = std::thread::scope(|scope| {
        for i in 0..6u16 {
            let mut client = cluster.client(i % 3);
            let (hot, stop) = (&hot, &stop);
            scope.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // One hot key per node, and all three in one transaction.
                    let reply = client.text(&["MSET", &hot[0], "1", &hot[1], "2", &hot[2], "3"]);
                    assert!(reply == "+OK\r\n" || reply.starts_with(GAVE_UP), "{reply}");
                    client.text(&["INCR", &hot[usize::from(i % 3)]]);
                }
            });
        }
        let mut client = cluster.client(0);
        let mut failures = Vec::new();
        for _ in 0..100 {
            let reply = client.call(&["KEYS", "*"]);
            if !reply.starts_with(b"*3\r\n") {
                failures.push(String::from_utf8_lossy(&reply).into_owned());
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        failures
    });
    assert_eq!(failures, Vec::<String>::new());
}

#[test]
fn info_reports_the_node_and_the_cluster() {
    let cluster = RedisCluster::start();
    let mut client = cluster.client(1);
    assert_eq!(client.text(&["SET", "a", "1"]), "+OK\r\n");
    let info = String::from_utf8(client.call(&["INFO"])).unwrap();
    for field in [
        "redis_version:7.0.15\r\n",
        "connected_clients:1\r\n",
        "maxclients:10000\r\n",
        "total_commands_processed:2\r\n",
        "node_id:1\r\n",
        "cluster_nodes:3\r\n",
        "partitions:6\r\n",
        "replicas:3\r\n",
        "transactions_committed:1\r\n",
        "configuration_id:1\r\n",
        &format!("tcp_port:{}\r\n", cluster.addr(1).port()),
        &format!("process_id:{}\r\n", std::process::id()),
        "uptime_in_seconds:",
    ] {
        assert!(info.contains(field), "{field:?} not in {info}");
    }
    let clients = String::from_utf8(client.call(&["INFO", "clients"])).unwrap();
    assert!(clients.contains("# Clients\r\n"), "{clients}");
    assert!(!clients.contains("# Server"), "{clients}");
    assert_eq!(client.text(&["CLIENT", "ID"]), ":1\r\n");
}

/// A shipped block whose answer is over the RPC message limit (two 600 KiB values read, no
/// write) and a shipped request over it (an MSET of two): the primary's worker survives,
/// and each command still gets Redis's answer, run by the client's node instead.
#[test]
fn shipped_requests_and_answers_over_the_message_limit_run_here() {
    let cluster = RedisCluster::start();
    let mut client = cluster.client(1);
    let a = &cluster.keys_with_primaries("big-a", &[2])[0];
    let b = &cluster.keys_with_primaries("big-b", &[2])[0];
    let big = "v".repeat(600 << 10);
    for key in [a, b] {
        assert_eq!(client.text(&["SET", key, &big]), "+OK\r\n");
    }
    assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.text(&["GET", a]), "+QUEUED\r\n");
    assert_eq!(client.text(&["GET", b]), "+QUEUED\r\n");
    assert_eq!(client.text(&["SETNX", a, "x"]), "+QUEUED\r\n");
    let bulk = format!("${}\r\n{big}\r\n", big.len());
    let expected = format!("*3\r\n{bulk}{bulk}:0\r\n");
    assert!(
        client.call(&["EXEC"]) == expected.as_bytes(),
        "EXEC's reply"
    );
    let reply = client.text(&["MSET", a, &big, b, &big]);
    assert!(reply.starts_with("-ERR"), "{reply}");
    for node in [0, 2] {
        assert_eq!(cluster.client(node).text(&["PING"]), "+PONG\r\n");
    }
    assert_eq!(
        client.call(&["STRLEN", a]),
        format!(":{}\r\n", 600 << 10).into_bytes()
    );
}

/// FERROTX COPIES on every node: each copy it holds (every partition, with 3 replicas on
/// 3 nodes) with its role, and every copy of a partition with its primary's digest and
/// object count once the backups applied the last writes.
#[test]
fn ferrotx_copies_lists_each_copy_with_the_same_digests_on_every_node() {
    use ferrotx_redis_exec::{RespValue, parse_reply};
    let cluster = RedisCluster::start();
    let mut writer = cluster.client(0);
    for i in 0..40 {
        assert_eq!(
            writer.text(&["SET", &format!("k{i}"), &i.to_string()]),
            "+OK\r\n"
        );
    }
    // Each entry: (node, partition, role, view, [(table, name, digest, objects)]).
    type Entry = (i64, i64, String, i64, Vec<(i64, String, String, i64)>);
    let field = |pairs: &[RespValue], name: &str| -> RespValue {
        let at = pairs
            .chunks(2)
            .position(|pair| pair[0].as_bytes() == Some(name.as_bytes()))
            .unwrap_or_else(|| panic!("no {name} in {pairs:?}"));
        pairs[2 * at + 1].clone()
    };
    let text = |value: RespValue| String::from_utf8(value.as_bytes().unwrap().to_vec()).unwrap();
    let copies = |node: u16| -> Vec<Entry> {
        let bytes = cluster.client(node).call(&["FERROTX", "COPIES"]);
        let (reply, _) = parse_reply(&bytes).unwrap().unwrap();
        let RespValue::Array(entries) = reply else {
            panic!("FERROTX COPIES answered {reply:?}");
        };
        entries
            .iter()
            .map(|entry| {
                let pairs = entry.as_array().unwrap();
                let tables = field(pairs, "tables")
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| {
                        let t = t.as_array().unwrap();
                        (
                            field(t, "table").as_integer().unwrap(),
                            text(field(t, "name")),
                            text(field(t, "digest")),
                            field(t, "objects").as_integer().unwrap(),
                        )
                    })
                    .collect();
                (
                    field(pairs, "node").as_integer().unwrap(),
                    field(pairs, "partition").as_integer().unwrap(),
                    text(field(pairs, "role")),
                    field(pairs, "view").as_integer().unwrap(),
                    tables,
                )
            })
            .collect()
    };
    let config = cluster.cluster.config().clone();
    let partitions = config.partitions().partition_count();
    // The backups apply the last records once the coordinators are quiet (a few ms).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let all: Vec<Vec<Entry>> = (0..3).map(copies).collect();
        for (node, entries) in all.iter().enumerate() {
            assert_eq!(
                entries.len(),
                partitions as usize,
                "node {node}: {entries:?}"
            );
            for (p, (n, partition, role, view, tables)) in entries.iter().enumerate() {
                assert_eq!((*n, *partition), (node as i64, p as i64));
                let primary = config
                    .partitions()
                    .primary(ferrotx_store::PartitionId(p as u32));
                let expected = if usize::from(primary) == node {
                    "primary"
                } else {
                    "backup"
                };
                assert_eq!(role, expected, "node {node} partition {p}");
                assert_eq!(*view, i64::try_from(config.id()).unwrap());
                assert_eq!(tables.len(), 1);
                let (table, name, digest, _) = &tables[0];
                assert_eq!((*table, name.as_str()), (1, "kv"));
                assert!(
                    digest.len() == 16 && digest.chars().all(|c| c.is_ascii_hexdigit()),
                    "{digest}"
                );
            }
        }
        let equal =
            (0..partitions as usize).all(|p| all.iter().all(|entries| entries[p].4 == all[0][p].4));
        let objects: i64 = all[0].iter().map(|e| e.4[0].3).sum();
        if equal {
            assert_eq!(objects, 40, "every key once: {:?}", all[0]);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "copies still differ: {all:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // RESP3: maps. Refused inside MULTI; a wrong arity is refused before it runs.
    let mut client = cluster.client(2);
    client.call(&["HELLO", "3"]);
    let resp3 = client.text(&["FERROTX", "COPIES"]);
    assert!(
        resp3.starts_with(&format!("*{partitions}\r\n%5\r\n$4\r\nnode\r\n:2\r\n")),
        "{resp3}"
    );
    assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        client.text(&["FERROTX", "COPIES"]),
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(client.text(&["DISCARD"]), "+OK\r\n");
    assert_eq!(
        client.text(&["FERROTX", "COPIES", "x"]),
        "-ERR wrong number of arguments for 'ferrotx|copies' command\r\n"
    );
}
