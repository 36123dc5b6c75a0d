//! Seed inputs for every target, made with the real encoders (RESP requests from
//! `encode_request`, membership messages from `Message::encode`, participant requests
//! from `ferrotx_txn`'s encoders, datagrams from `ferrotx_wire`'s): the fuzzers start
//! from valid inputs and mutate them. `cargo run -p ferrotx-fuzz-support --example
//! fuzz_seeds` writes them into `fuzz/corpus/<target>/`.
//!
//! The structured targets read their inputs with `arbitrary`'s [`Unstructured`]
//! (little-endian integers, a byte whose low bit is a bool, a continue-bool before each
//! element of a list, a `u32` scaled to an enum's variant count); [`Writer`] writes that
//! format, so a seed is a sequence of operations spelled out. A seed that no longer
//! decodes as meant after a type changes is still a valid input, only a less useful one.
//!
//! [`Unstructured`]: arbitrary::Unstructured

use ferrotx_membership::{Body, Message};
use ferrotx_redis_exec::encode_request;
use ferrotx_store::{Key, TableId};
use ferrotx_txn::messages::{
    LockRecord, ReadItem, TxId, Write, encode_count, encode_read, encode_scan, encode_truncate,
    encode_tx, encode_validate,
};
use ferrotx_txn::reclaim::{ReclaimRequest, encode_reclaim};
use ferrotx_txn::refill::{FetchRequest, FetchWhat, encode_fetch};
use ferrotx_wire::{
    EndpointId, FragmentInfo, MessageFields, MessageKind, RequestType, Status, ViewId,
    push_message, start_datagram,
};

/// Writes values as [`arbitrary::Unstructured`] reads them back.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// A `u8`.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    /// A `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `bool`.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
    /// Variant `index` of an enum of `count` variants (derived `Arbitrary` scales a
    /// `u32`: the variant is `tag * count >> 32`).
    pub fn variant(&mut self, index: u32, count: u32) -> &mut Self {
        assert!(index < count);
        let tag = (u64::from(index) << 32).div_ceil(u64::from(count));
        self.0
            .extend_from_slice(&u32::try_from(tag).expect("below 2^32").to_le_bytes());
        self
    }
    /// A `Vec<u8>`.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        for &b in bytes {
            self.u8(1).u8(b);
        }
        self.u8(0)
    }
    /// A list: `item` writes each element.
    pub fn list<T>(&mut self, items: &[T], mut item: impl FnMut(&mut Self, &T)) -> &mut Self {
        for element in items {
            self.u8(1);
            item(self, element);
        }
        self.u8(0)
    }
}

/// Seeds for `target`: (a name, the input).
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "decode" => decode(),
        "resp_parser" => resp_parser(),
        "redis_session" => redis_session(),
        "membership" => membership(),
        "participant" => participant(),
        _ => panic!("no target {target}"),
    }
}

fn named(seeds: Vec<(&str, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    seeds
        .into_iter()
        .map(|(name, data)| (format!("seed-{name}"), data))
        .collect()
}

fn decode() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (name, payloads) in [
        ("empty", vec![]),
        ("one", vec![b"a request".to_vec()]),
        ("three", vec![b"x".to_vec(), vec![], vec![7; 100]]),
    ] {
        let mut buf = Vec::with_capacity(1400);
        start_datagram(
            &mut buf,
            EndpointId::new(1, 2),
            EndpointId::new(3, 0),
            ViewId(5),
            1,
            2,
        );
        for (i, payload) in payloads.iter().enumerate() {
            let fields = MessageFields {
                kind: if i % 2 == 0 {
                    MessageKind::Request
                } else {
                    MessageKind::Response
                },
                request_type: RequestType::Lock.into(),
                status: Status::Ok,
                slot: i as u8,
                request_number: 40 + i as u64,
            };
            assert!(push_message(
                &mut buf,
                fields,
                FragmentInfo::whole(payload.len() as u32),
                payload
            ));
        }
        seeds.push((name, buf));
    }
    // A fragment of a larger message.
    let mut buf = Vec::with_capacity(1400);
    start_datagram(
        &mut buf,
        EndpointId::new(0, 0),
        EndpointId::new(1, 1),
        ViewId(1),
        1,
        1,
    );
    let fields = MessageFields {
        kind: MessageKind::Request,
        request_type: RequestType::CommitBackup.into(),
        status: Status::Ok,
        slot: 0,
        request_number: 1,
    };
    let fragment = FragmentInfo {
        message_len: 3000,
        offset: 1000,
        packet_index: 1,
        packet_count: 3,
    };
    assert!(push_message(&mut buf, fields, fragment, &[1; 1000]));
    seeds.push(("fragment", buf));
    named(seeds)
}

/// RESP requests as clients send them.
fn request(commands: &[&[&str]]) -> Vec<u8> {
    let mut out = Vec::new();
    for command in commands {
        encode_request(command, &mut out);
    }
    out
}

fn resp_parser() -> Vec<(String, Vec<u8>)> {
    let with = |flags: u8, seed: u8, input: &[u8]| {
        let mut data = vec![flags, seed];
        data.extend_from_slice(input);
        data
    };
    let pipeline = request(&[
        &["SET", "key", "value"],
        &["GET", "key"],
        &["MSET", "a", "1", "b", "2"],
    ]);
    named(vec![
        ("multibulk", with(0, 1, &pipeline)),
        ("multibulk-auth", with(1, 9, &pipeline)),
        ("multibulk-small-limits", with(0b11110, 3, &pipeline)),
        (
            "inline",
            with(0, 5, b"PING\r\nSET k \"a b\\x41\" 'c'\nECHO hi\r\n"),
        ),
        ("empty-requests", with(0, 2, b"\r\n*0\r\n*-1\r\n\n")),
        (
            "binary-argument",
            with(0, 7, b"*2\r\n$3\r\nSET\r\n$4\r\n\x00\r\n\xff\r\n"),
        ),
        ("bad-dollar", with(0, 0, b"*1\r\n+3\r\nGET\r\n")),
        ("bad-count", with(0, 0, b"*x\r\n")),
        ("unbalanced", with(0, 0, b"SET \"k\r\n")),
    ])
}

/// Ops of the redis_session target (see its `Op`).
mod session_op {
    pub const COUNT: u32 = 9;
    pub const RAW: u32 = 0;
    pub const COMPLETE: u32 = 4;
    pub const TOUCH: u32 = 5;
    pub const READ: u32 = 6;
    pub const SLEEP: u32 = 7;
    pub const MEMORY: u32 = 8;
}

fn redis_session() -> Vec<(String, Vec<u8>)> {
    use session_op::*;
    // Settings: password, queued_commands_max, watched_keys_max, pipeline_commands_max,
    // small_requests.
    let settings = |w: &mut Writer, password: bool| {
        w.bool(password).u8(7).u8(7).u8(3).bool(false);
    };
    let raw = |w: &mut Writer, commands: &[&[&str]]| {
        w.variant(RAW, COUNT).bytes(&request(commands));
    };
    let complete = |w: &mut Writer, fate: u32| {
        w.variant(COMPLETE, COUNT).variant(fate, 3);
    };
    let mut seeds = Vec::new();

    let mut w = Writer::default();
    settings(&mut w, false);
    raw(
        &mut w,
        &[
            &["SET", "k", "v"],
            &["GET", "k"],
            &["APPEND", "k", "w"],
            &["STRLEN", "k"],
        ],
    );
    seeds.push(("pipeline", w.0));

    let mut w = Writer::default();
    settings(&mut w, false);
    raw(
        &mut w,
        &[
            &["MULTI"],
            &["SET", "counter", "1"],
            &["INCR", "counter"],
            &["GET", "counter"],
            &["EXEC"],
        ],
    );
    seeds.push(("multi-exec", w.0));

    let mut w = Writer::default();
    settings(&mut w, false);
    raw(&mut w, &[&["SET", "k", "1"], &["WATCH", "k"]]);
    complete(&mut w, 0);
    complete(&mut w, 0);
    w.variant(TOUCH, COUNT).u8(0);
    raw(
        &mut w,
        &[&["MULTI"], &["SET", "k", "2"], &["EXEC"], &["GET", "k"]],
    );
    seeds.push(("watch-changed", w.0));

    let mut w = Writer::default();
    settings(&mut w, false);
    raw(
        &mut w,
        &[
            &["MULTI"],
            &["SET", "k"],
            &["GET", "k"],
            &["EXEC"],
            &["MULTI"],
            &["DISCARD"],
            &["UNWATCH"],
        ],
    );
    seeds.push(("multi-execabort", w.0));

    let mut w = Writer::default();
    settings(&mut w, false);
    raw(
        &mut w,
        &[
            &["HELLO", "3"],
            &["SET", "k", "v", "EX", "10"],
            &["TTL", "k"],
            &["MGET", "k", "k2"],
        ],
    );
    complete(&mut w, 0);
    w.variant(SLEEP, COUNT).u16(20_000);
    raw(
        &mut w,
        &[
            &["GET", "k"],
            &["GETEX", "k", "PERSIST"],
            &["EXPIRE", "k", "100", "NX"],
            &["PTTL", "k"],
        ],
    );
    seeds.push(("resp3-expiry", w.0));

    let mut w = Writer::default();
    settings(&mut w, true);
    raw(
        &mut w,
        &[
            &["GET", "k"],
            &["AUTH", "wrong"],
            &["AUTH", "secret"],
            &["SET", "k", "v"],
            &["CLIENT", "SETNAME", "me"],
            &["CLIENT", "GETNAME"],
            &["CLIENT", "ID"],
        ],
    );
    seeds.push(("auth", w.0));

    let mut w = Writer::default();
    settings(&mut w, false);
    raw(
        &mut w,
        &[
            &["MSET", "k", "1", "k2", "2"],
            &["SCAN", "0", "MATCH", "k*", "COUNT", "10"],
            &["KEYS", "*"],
            &["DBSIZE"],
            &["FLUSHALL"],
            &["DBSIZE"],
        ],
    );
    seeds.push(("keyspace", w.0));

    let mut w = Writer::default();
    settings(&mut w, false);
    raw(
        &mut w,
        &[
            &["INFO", "server"],
            &["CONFIG", "GET", "maxmemory"],
            &["COMMAND", "COUNT"],
            &["COMMAND", "INFO", "get"],
            &["FERROTX", "COPIES"],
            &["PING"],
            &["ECHO", "x"],
        ],
    );
    complete(&mut w, 2);
    seeds.push(("admin", w.0));

    let mut w = Writer::default();
    settings(&mut w, false);
    w.variant(MEMORY, COUNT).bool(true);
    raw(
        &mut w,
        &[
            &["SET", "k", "v"],
            &["GET", "k"],
            &["MULTI"],
            &["SET", "k", "v"],
            &["EXEC"],
        ],
    );
    w.variant(MEMORY, COUNT).bool(false);
    complete(&mut w, 1);
    w.variant(READ, COUNT).u16(3);
    seeds.push(("out-of-memory", w.0));

    let mut w = Writer::default();
    settings(&mut w, false);
    w.variant(RAW, COUNT)
        .bytes(b"PING\r\nSET k \"a b\"\r\nGET k\r\n*1\r\n$x\r\n");
    seeds.push(("inline-then-protocol-error", w.0));

    named(seeds)
}

fn membership() -> Vec<(String, Vec<u8>)> {
    let view = ferrotx_cluster::View {
        id: 2,
        cm: 0,
        members: (0..3)
            .map(|node| ferrotx_cluster::ViewMember {
                node,
                incarnation: 1,
            })
            .collect(),
        copies: vec![vec![0, 1, 2], vec![1, 2, 0], vec![2, 0, 1], vec![0, 2]],
        filling: vec![vec![], vec![], vec![], vec![1]],
        suspended: Vec::new(),
        suspended_copies: Vec::new(),
    };
    let bodies = [
        (
            "lease-request",
            Body::LeaseRequest {
                used: 1 << 20,
                limit: 1 << 30,
            },
        ),
        (
            "lease-grant",
            Body::LeaseGrant {
                duration_ns: 10_000_000,
                over: vec![2],
            },
        ),
        ("lease-ack", Body::LeaseAck),
        ("probe", Body::Probe),
        ("probe-reply", Body::ProbeReply { used: 5, limit: 0 }),
        ("new-config", Body::NewConfig(view)),
        (
            "new-config-ack",
            Body::NewConfigAck {
                old_cm_lease_ns: 3_000_000,
            },
        ),
        (
            "new-config-commit",
            Body::NewConfigCommit {
                duration_ns: 10_000_000,
            },
        ),
        ("join", Body::Join),
        ("stale", Body::Stale),
        (
            "filled",
            Body::Filled {
                partitions: vec![3],
            },
        ),
    ];
    let mut seeds: Vec<(String, Vec<u8>)> = bodies
        .into_iter()
        .map(|(name, body)| {
            let mut bytes = Vec::new();
            Message {
                from: 1,
                incarnation: 1,
                view: 2,
                seq: 3,
                body,
            }
            .encode(&mut bytes);
            (format!("seed-message-{name}"), bytes)
        })
        .collect();
    // Schedules: three nodes bootstrap (Run is op 0 of 14), then one dies, or the
    // coordination service fails, and the cluster runs on.
    const OPS: u32 = 14;
    let run = |w: &mut Writer, rounds: u8| {
        w.variant(0, OPS).u8(rounds);
    };
    let mut w = Writer::default();
    w.u8(2);
    for _ in 0..4 {
        run(&mut w, 63);
    }
    w.variant(8, OPS).u8(2);
    for _ in 0..8 {
        run(&mut w, 63);
    }
    seeds.push(("seed-schedule-kill".into(), w.0));
    let mut w = Writer::default();
    w.u8(3);
    for _ in 0..4 {
        run(&mut w, 63);
    }
    w.variant(10, OPS).bool(true);
    w.variant(5, OPS).u16(5_000);
    w.variant(10, OPS).bool(false);
    w.variant(9, OPS).u8(1);
    for _ in 0..8 {
        run(&mut w, 63);
    }
    seeds.push(("seed-schedule-restart".into(), w.0));
    seeds
}

/// Ops of the participant target (see its `Op`).
const PARTICIPANT_OPS: u32 = 15;

fn participant() -> Vec<(String, Vec<u8>)> {
    let tx = |counter: u64| TxId {
        view: ViewId(0),
        node: 1,
        thread: 0,
        incarnation: 1,
        counter,
    };
    let write = |partition: u32, key: u64, version: u64, value: Option<u64>| Write {
        partition,
        table: TableId(1),
        key: Key::from(key),
        version,
        value: value.map(|v| v.to_le_bytes().to_vec()),
    };
    let record = |counter, writes: Vec<Write>| LockRecord {
        tx: tx(counter),
        partitions: vec![0, 1],
        writes,
        truncate_up_to: counter.saturating_sub(1),
    };
    let encoded = |encode: &dyn Fn(&mut Vec<u8>)| {
        let mut out = Vec::new();
        encode(&mut out);
        out
    };
    // Raw requests to the handlers by their index in the target's table.
    let requests: Vec<(&str, usize, Vec<u8>)> = vec![
        (
            "truncate",
            0,
            encoded(&|o| encode_truncate((1, 0, 1), 1, o)),
        ),
        (
            "read",
            1,
            encoded(&|o| encode_read(0, TableId(1), &Key::from(1), o)),
        ),
        (
            "lock",
            2,
            encoded(&|o| {
                record(1, vec![write(0, 1, 1, Some(11)), write(0, 7, 0, Some(70))]).encode(o)
            }),
        ),
        (
            "validate",
            4,
            encoded(&|o| {
                encode_validate(
                    &[ReadItem {
                        partition: 0,
                        table: TableId(1),
                        key: Key::from(2),
                        version: 1,
                    }],
                    o,
                )
            }),
        ),
        (
            "commit-backup",
            6,
            encoded(&|o| record(1, vec![write(1, 1, 1, Some(11)), write(1, 2, 1, None)]).encode(o)),
        ),
        ("commit-primary", 7, encoded(&|o| encode_tx(&tx(1), o))),
        ("abort", 8, encoded(&|o| encode_tx(&tx(1), o))),
        (
            "scan",
            9,
            encoded(&|o| encode_scan(0, TableId(1), 0, 16, o)),
        ),
        ("count", 10, encoded(&|o| encode_count(0, TableId(2), o))),
        (
            "fetch-page",
            11,
            encoded(&|o| {
                encode_fetch(
                    &FetchRequest {
                        partition: 0,
                        table: TableId(1),
                        what: FetchWhat::Page {
                            cursor: 0,
                            count: 8,
                            bytes_max: 4096,
                        },
                    },
                    o,
                )
            }),
        ),
        (
            "fetch-keys",
            11,
            encoded(&|o| {
                encode_fetch(
                    &FetchRequest {
                        partition: 0,
                        table: TableId(2),
                        what: FetchWhat::Keys(vec![Key::from(1), Key::from(6)]),
                    },
                    o,
                )
            }),
        ),
        (
            "fetch-floors",
            11,
            encoded(&|o| {
                encode_fetch(
                    &FetchRequest {
                        partition: 0,
                        table: TableId(1),
                        what: FetchWhat::Floors,
                    },
                    o,
                )
            }),
        ),
        (
            "reclaim-check",
            12,
            encoded(&|o| {
                encode_reclaim(
                    &ReclaimRequest {
                        partition: 1,
                        table: TableId(1),
                        keys: vec![(Key::from(2), 2)],
                    },
                    o,
                )
            }),
        ),
        (
            "reclaim",
            13,
            encoded(&|o| {
                encode_reclaim(
                    &ReclaimRequest {
                        partition: 0,
                        table: TableId(1),
                        keys: vec![(Key::from(2), 2)],
                    },
                    o,
                )
            }),
        ),
    ];
    let mut seeds = Vec::new();
    for (name, handler, payload) in &requests {
        let mut w = Writer::default();
        w.variant(12, PARTICIPANT_OPS)
            .u8(*handler as u8)
            .bytes(payload);
        seeds.push((format!("seed-raw-{name}"), w.0));
    }
    // Structured: LOCK then COMMIT-BACKUP then COMMIT-PRIMARY of one transaction (one
    // record written to both partitions), then TRUNCATE; and LOCK then ABORT.
    let tx_fields = |w: &mut Writer, counter: u8| {
        w.u8(0).u8(1).u8(0).u8(0).u8(counter);
    };
    let word_write = |w: &mut Writer, partition: u8, key: u8, version: u8, value: u64| {
        w.u8(partition)
            .u8(0)
            .u8(key)
            .u8(version)
            .variant(1, 3)
            .u64(value);
    };
    let lock_record = |w: &mut Writer, counter: u8| {
        tx_fields(w, counter);
        w.bytes(&[0, 1]);
        w.u8(1);
        word_write(w, 0, 1, 1, 11);
        w.u8(1);
        word_write(w, 1, 1, 1, 11);
        w.u8(0).u8(0);
    };
    let mut w = Writer::default();
    w.variant(0, PARTICIPANT_OPS).bool(false);
    lock_record(&mut w, 1);
    w.variant(5, PARTICIPANT_OPS).u8(0).variant(1, 4);
    w.variant(5, PARTICIPANT_OPS).u8(0).variant(2, 4);
    w.variant(6, PARTICIPANT_OPS).u8(1).u8(0).u8(0).u8(1);
    seeds.push(("seed-lock-commit-truncate".to_string(), w.0));
    let mut w = Writer::default();
    w.variant(0, PARTICIPANT_OPS).bool(true).u8(2).u8(1);
    lock_record(&mut w, 2);
    w.variant(5, PARTICIPANT_OPS).u8(0).variant(3, 4);
    w.variant(9, PARTICIPANT_OPS).u8(0).u8(0).u8(1);
    seeds.push(("seed-aged-lock-abort".to_string(), w.0));
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seed runs through its target without a panic (the corpora start from them).
    #[test]
    fn every_seed_runs() {
        for (target, body) in crate::TARGETS {
            for (name, data) in seeds(target) {
                let _ = &name;
                body(&data);
            }
        }
    }

    #[test]
    fn variants_decode_as_written() {
        for count in [2u32, 3, 9, 14, 15] {
            for index in 0..count {
                let mut w = Writer::default();
                w.variant(index, count);
                let tag = u32::from_le_bytes(w.0.try_into().unwrap());
                assert_eq!((u64::from(tag) * u64::from(count)) >> 32, u64::from(index));
            }
        }
    }
}

#[cfg(test)]
mod show {
    use super::*;

    /// What each seed does, for a reader (`cargo test -p ferrotx-fuzz-support show --
    /// --ignored --nocapture`).
    #[test]
    #[ignore = "prints what the seeds do"]
    fn show_seeds() {
        for (name, data) in seeds("redis_session") {
            let received = crate::redis_session::transcript(&data);
            println!(
                "{name}: {}",
                String::from_utf8_lossy(&received).escape_debug()
            );
        }
        for (name, data) in seeds("membership") {
            println!("{name}: {:?}", crate::membership::summary(&data, true));
        }
    }
}
