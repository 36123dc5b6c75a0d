//! Simulated Redis clients ([`RespClient`]) on an in-process cluster: RESP bytes through
//! the same connection core and work as the server's, each client in one coroutine of a
//! node's worker.

use std::rc::Rc;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use ferrotx_cluster::{Configuration, default_tables};
use ferrotx_exec::Co;
use ferrotx_node::LocalCluster;
use ferrotx_redis_exec::{RespClient, RespValue, encode_request};
use ferrotx_resp::SessionConfig;
use ferrotx_txn::coordinator::Coordinator;

/// 3 nodes, 3 replicas, 2 worker threads each, 2 partitions per node (the RPC ports are
/// not used: in-process queues).
fn cluster() -> LocalCluster {
    let config = Configuration::local(3, 3, 2, 2, 52_000).unwrap();
    LocalCluster::start(config, default_tables())
}

fn client(cluster: &LocalCluster, client_id: u64) -> RespClient {
    RespClient::for_config(cluster.config(), client_id, SessionConfig::default()).unwrap()
}

fn wait<R>(result: Receiver<R>) -> R {
    result
        .recv_timeout(Duration::from_secs(60))
        .expect("the coroutine finished")
}

fn bulk(text: &str) -> RespValue {
    RespValue::bulk(text)
}

fn error_code(reply: &RespValue) -> String {
    let message = reply.error_message().unwrap_or_else(|| panic!("{reply:?}"));
    String::from_utf8_lossy(message).into_owned()
}

#[test]
fn set_then_get_and_a_blind_write_seen_from_another_node() {
    let cluster = cluster();
    let mut writer = client(&cluster, 1);
    let writer = wait(
        cluster.spawn(0, 0, |co: Co, coordinator: Rc<Coordinator>| async move {
            let replies = writer
                .request(&co, &coordinator, b"SET greeting hello\r\nGET greeting\r\n")
                .await;
            assert_eq!(replies, [RespValue::ok(), bulk("hello")]);
            // A blind write: SET reads nothing (the key is written unread), then GET reads
            // what it wrote.
            assert_eq!(
                writer
                    .command(&co, &coordinator, &["SET", "blind", "v1"])
                    .await,
                RespValue::ok()
            );
            assert_eq!(
                writer.command(&co, &coordinator, &["GET", "blind"]).await,
                bulk("v1")
            );
            assert_eq!(
                writer.command(&co, &coordinator, &["GET", "absent"]).await,
                RespValue::Null
            );
            let error = writer.command(&co, &coordinator, &["GET"]).await;
            assert!(error_code(&error).starts_with("ERR wrong number of arguments"));
            writer
        }),
    );
    assert_eq!(writer.counters().commands_processed, 6);
    assert_eq!(writer.counters().error_replies, 1);
    assert_eq!(writer.counters().transactions_committed, 4);

    let mut reader = client(&cluster, 2);
    wait(
        cluster.spawn(2, 1, |co: Co, coordinator: Rc<Coordinator>| async move {
            assert_eq!(
                reader.command(&co, &coordinator, &["GET", "blind"]).await,
                bulk("v1")
            );
            assert_eq!(
                reader
                    .command(&co, &coordinator, &["MGET", "greeting", "blind", "absent"])
                    .await,
                RespValue::Array(vec![bulk("hello"), bulk("v1"), RespValue::Null])
            );
        }),
    );
    cluster.stop();
}

#[test]
fn exec_answers_null_when_another_client_changed_a_watched_key() {
    let cluster = cluster();
    let mut watcher = client(&cluster, 1);
    // The watcher watches on node 0...
    let mut watcher =
        wait(
            cluster.spawn(0, 0, |co: Co, coordinator: Rc<Coordinator>| async move {
                assert_eq!(
                    watcher.command(&co, &coordinator, &["SET", "k", "0"]).await,
                    RespValue::ok()
                );
                assert_eq!(
                    watcher.command(&co, &coordinator, &["WATCH", "k"]).await,
                    RespValue::ok()
                );
                watcher
            }),
        );
    // ...another client changes the key from node 1...
    let mut other = client(&cluster, 2);
    wait(
        cluster.spawn(1, 0, |co: Co, coordinator: Rc<Coordinator>| async move {
            assert_eq!(
                other
                    .command(&co, &coordinator, &["SET", "k", "other"])
                    .await,
                RespValue::ok()
            );
        }),
    );
    // ...so the watcher's EXEC fails, and changes nothing; unwatched, it commits.
    wait(
        cluster.spawn(0, 1, |co: Co, coordinator: Rc<Coordinator>| async move {
            let replies = watcher
                .request(
                    &co,
                    &coordinator,
                    b"MULTI\r\nSET k mine\r\nGET k\r\nEXEC\r\nGET k\r\n",
                )
                .await;
            let queued = RespValue::simple("QUEUED");
            assert_eq!(
                replies,
                [
                    RespValue::ok(),
                    queued.clone(),
                    queued.clone(),
                    RespValue::NullArray,
                    bulk("other"),
                ]
            );
            assert!(
                watcher.session().watched_keys().is_empty(),
                "EXEC unwatches"
            );
            let replies = watcher
                .request(
                    &co,
                    &coordinator,
                    b"WATCH k\r\nMULTI\r\nAPPEND k ,e\r\nGET k\r\nEXEC\r\n",
                )
                .await;
            assert_eq!(
                replies,
                [
                    RespValue::ok(),
                    RespValue::ok(),
                    queued.clone(),
                    queued,
                    RespValue::Array(vec![RespValue::Integer(7), bulk("other,e")]),
                ]
            );
        }),
    );
    cluster.stop();
}

#[test]
fn pipelined_incrs_run_as_one_group_and_reply_in_order() {
    let cluster = cluster();
    let mut pipeliner = client(&cluster, 7);
    let pipeliner = wait(
        cluster.spawn(1, 1, |co: Co, coordinator: Rc<Coordinator>| async move {
            let mut bytes = Vec::new();
            for _ in 0..20 {
                encode_request(&["INCR", "counter"], &mut bytes);
            }
            encode_request(&["GET", "counter"], &mut bytes);
            // The last request arrives in two parts: its reply comes with the second.
            let (first, rest) = bytes.split_at(bytes.len() - 5);
            let replies = pipeliner.request(&co, &coordinator, first).await;
            let expected: Vec<RespValue> = (1..=20).map(RespValue::Integer).collect();
            assert_eq!(replies, expected);
            assert_eq!(pipeliner.received(), b"");
            let replies = pipeliner.request(&co, &coordinator, rest).await;
            assert_eq!(replies, [bulk("20")]);
            // Inline commands too.
            let replies = pipeliner
                .request(&co, &coordinator, b"INCRBY counter 5\r\nPING\r\n")
                .await;
            assert_eq!(replies, [RespValue::Integer(25), RespValue::simple("PONG")]);
            pipeliner
        }),
    );
    let counters = pipeliner.counters();
    assert_eq!(counters.commands_processed, 23);
    // The INCRs after the first joined its plan: one transaction for all twenty.
    assert_eq!(counters.commands_pipelined, 19);
    cluster.stop();
}

#[test]
fn concurrent_watch_multi_increments_lose_nothing() {
    // Clients on every node increment one counter with WATCH, GET, MULTI, SET, EXEC,
    // retrying when EXEC answers null: the counter ends at the number of EXECs that
    // committed.
    const ROUNDS: usize = 15;
    let cluster = cluster();
    let mut runs = Vec::new();
    for node in cluster.nodes() {
        for thread in 0..2u16 {
            let id = u64::from(node) * 10 + u64::from(thread) + 1;
            let mut client = client(&cluster, id);
            runs.push(cluster.spawn(
                node,
                thread,
                move |co: Co, coordinator: Rc<Coordinator>| async move {
                    let (mut committed, mut conflicts) = (0u64, 0u64);
                    while committed < ROUNDS as u64 {
                        let watch = client.command(&co, &coordinator, &["WATCH", "n"]).await;
                        assert_eq!(watch, RespValue::ok());
                        let value = client.command(&co, &coordinator, &["GET", "n"]).await;
                        let n: u64 = value.as_bytes().map_or(0, |bytes| {
                            std::str::from_utf8(bytes).unwrap().parse().unwrap()
                        });
                        let mut bytes = b"MULTI\r\n".to_vec();
                        encode_request(&["SET", "n", &(n + 1).to_string()], &mut bytes);
                        bytes.extend_from_slice(b"EXEC\r\n");
                        let replies = client.request(&co, &coordinator, &bytes).await;
                        assert_eq!(replies.len(), 3, "{replies:?}");
                        match &replies[2] {
                            RespValue::NullArray => conflicts += 1,
                            RespValue::Array(items) => {
                                assert_eq!(items, &[RespValue::ok()]);
                                committed += 1;
                            }
                            other => panic!("EXEC answered {other:?}"),
                        }
                    }
                    (committed, conflicts)
                },
            ));
        }
    }
    let mut total = 0;
    for run in runs {
        let (committed, _conflicts) = wait(run);
        total += committed;
    }
    let mut reader = client(&cluster, 100);
    let value = wait(
        cluster.spawn(0, 0, |co: Co, coordinator: Rc<Coordinator>| async move {
            reader.command(&co, &coordinator, &["GET", "n"]).await
        }),
    );
    assert_eq!(value, bulk(&total.to_string()));
    assert_eq!(total, 6 * ROUNDS as u64);
    cluster.stop();
}

#[test]
fn keyspace_info_and_quit() {
    let cluster = cluster();
    let mut client = client(&cluster, 3);
    let client = wait(
        cluster.spawn(2, 0, |co: Co, coordinator: Rc<Coordinator>| async move {
            let replies = client
                .request(
                    &co,
                    &coordinator,
                    b"MSET a 1 b 2 c 3\r\nDBSIZE\r\nKEYS *\r\n",
                )
                .await;
            assert_eq!(replies[..2], [RespValue::ok(), RespValue::Integer(3)]);
            let mut keys: Vec<&[u8]> = replies[2]
                .as_array()
                .unwrap()
                .iter()
                .map(|key| key.as_bytes().unwrap())
                .collect();
            keys.sort_unstable();
            assert_eq!(keys, [b"a", b"b", b"c"]);
            let info = client.command(&co, &coordinator, &["INFO", "stats"]).await;
            let text = String::from_utf8(info.as_bytes().unwrap().to_vec()).unwrap();
            assert!(text.contains("total_commands_processed:4"), "{text}");
            // HELLO 3 switches the replies to RESP3.
            let hello = client.command(&co, &coordinator, &["HELLO", "3"]).await;
            assert!(matches!(hello, RespValue::Map(_)), "{hello:?}");
            assert_eq!(
                client.command(&co, &coordinator, &["GET", "nothing"]).await,
                RespValue::Null
            );
            let replies = client.request(&co, &coordinator, b"QUIT\r\nPING\r\n").await;
            assert_eq!(replies, [RespValue::ok()]);
            assert!(client.is_closed());
            // A closed connection handles nothing more.
            assert_eq!(client.request(&co, &coordinator, b"PING\r\n").await, []);
            client
        }),
    );
    assert!(client.is_closed());
    cluster.stop();
}
