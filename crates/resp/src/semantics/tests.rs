use std::collections::BTreeMap;

use super::*;
use crate::command::{self, Command};
use crate::keys::STORE_KEY_BYTES;
use crate::protocol::ArgsBuf;
use crate::reply::ProtocolVersion::Resp2;

/// The time the tests run at (Unix time in milliseconds).
const NOW: u64 = 1_700_000_000_000;

/// A test store of Redis keys and values.
type Store = BTreeMap<Vec<u8>, Vec<u8>>;

fn parse(args: &[&str]) -> DataCommand {
    let buf = ArgsBuf::new(args);
    let spec = command::lookup(buf.args()).expect("known command");
    match command::parse(spec, buf.args()) {
        Ok(Command::Data(command)) => command,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// Runs `commands` as one transaction against `store`, with `limit` bytes per stored
/// value: the replies as RESP2 text.
fn transaction_with_limit(store: &mut Store, limit: usize, commands: &[&[&str]]) -> Vec<String> {
    let commands: Vec<DataCommand> = commands.iter().map(|args| parse(args)).collect();
    let mut overlay = Overlay::new(limit, NOW);
    for command in &commands {
        for key in command.keys() {
            if !overlay.contains(key) {
                overlay.insert_read(key.to_vec(), store.get(key).cloned());
            }
        }
    }
    let replies: Vec<String> = commands
        .iter()
        .map(|command| String::from_utf8(apply(command, &mut overlay).to_bytes(Resp2)).unwrap())
        .collect();
    for write in overlay.writes() {
        match write.value {
            Some(value) => store.insert(write.key.to_vec(), value.to_vec()),
            None => store.remove(write.key),
        };
    }
    replies
}

fn transaction(store: &mut Store, commands: &[&[&str]]) -> Vec<String> {
    transaction_with_limit(store, 1 << 20, commands)
}

/// Runs one command alone.
fn one(store: &mut Store, args: &[&str]) -> String {
    transaction(store, &[args]).pop().unwrap()
}

fn store_of(pairs: &[(&str, &str)]) -> Store {
    pairs
        .iter()
        .map(|(key, value)| (key.as_bytes().to_vec(), value.as_bytes().to_vec()))
        .collect()
}

#[test]
fn get_and_set() {
    let mut store = Store::new();
    assert_eq!(one(&mut store, &["GET", "k"]), "$-1\r\n");
    assert_eq!(one(&mut store, &["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(one(&mut store, &["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(one(&mut store, &["SET", "k", ""]), "+OK\r\n");
    assert_eq!(one(&mut store, &["GET", "k"]), "$0\r\n\r\n");
}

#[test]
fn set_conditions_and_get() {
    // (stored value, SET options, reply, value after)
    for (before, options, reply, after) in [
        (None, &[][..], "+OK\r\n", Some("new")),
        (Some("old"), &[], "+OK\r\n", Some("new")),
        (None, &["NX"], "+OK\r\n", Some("new")),
        (Some("old"), &["NX"], "$-1\r\n", Some("old")),
        (None, &["XX"], "$-1\r\n", None),
        (Some("old"), &["XX"], "+OK\r\n", Some("new")),
        (None, &["GET"], "$-1\r\n", Some("new")),
        (Some("old"), &["GET"], "$3\r\nold\r\n", Some("new")),
        // Redis 7 allows NX with GET: the old value is the reply either way.
        (None, &["NX", "GET"], "$-1\r\n", Some("new")),
        (Some("old"), &["NX", "GET"], "$3\r\nold\r\n", Some("old")),
        (None, &["XX", "GET"], "$-1\r\n", None),
        (Some("old"), &["GET", "XX"], "$3\r\nold\r\n", Some("new")),
    ] {
        let mut store = Store::new();
        if let Some(before) = before {
            store.insert(b"k".to_vec(), before.as_bytes().to_vec());
        }
        let mut args = vec!["SET", "k", "new"];
        args.extend_from_slice(options);
        assert_eq!(one(&mut store, &args), reply, "{before:?} {args:?}");
        assert_eq!(
            store.get(&b"k"[..]).map(|value| value.as_slice()),
            after.map(str::as_bytes),
            "{before:?} {args:?}"
        );
    }
}

#[test]
fn setnx_getset_getdel() {
    let mut store = Store::new();
    assert_eq!(one(&mut store, &["SETNX", "k", "1"]), ":1\r\n");
    assert_eq!(one(&mut store, &["SETNX", "k", "2"]), ":0\r\n");
    assert_eq!(one(&mut store, &["GETSET", "k", "3"]), "$1\r\n1\r\n");
    assert_eq!(one(&mut store, &["GETSET", "other", "4"]), "$-1\r\n");
    assert_eq!(one(&mut store, &["GETDEL", "k"]), "$1\r\n3\r\n");
    assert_eq!(one(&mut store, &["GETDEL", "k"]), "$-1\r\n");
    assert_eq!(store, store_of(&[("other", "4")]));
}

#[test]
fn del_and_exists_count_repeats_as_redis_does() {
    let mut store = store_of(&[("a", "1"), ("b", "2")]);
    assert_eq!(one(&mut store, &["EXISTS", "a", "a", "b", "c"]), ":3\r\n");
    // A key named twice is deleted once.
    assert_eq!(one(&mut store, &["DEL", "a", "a", "c"]), ":1\r\n");
    assert_eq!(store, store_of(&[("b", "2")]));
    assert_eq!(one(&mut store, &["DEL", "nope"]), ":0\r\n");
}

#[test]
fn incr_family() {
    let mut store = Store::new();
    assert_eq!(one(&mut store, &["INCR", "n"]), ":1\r\n");
    assert_eq!(one(&mut store, &["INCRBY", "n", "41"]), ":42\r\n");
    assert_eq!(one(&mut store, &["DECR", "n"]), ":41\r\n");
    assert_eq!(one(&mut store, &["DECRBY", "n", "50"]), ":-9\r\n");
    assert_eq!(store, store_of(&[("n", "-9")]));
    assert_eq!(one(&mut store, &["DECRBY", "absent", "5"]), ":-5\r\n");
}

#[test]
fn incr_of_values_that_are_not_integers() {
    let not_integer = "-ERR value is not an integer or out of range\r\n";
    for value in [
        "1 ",
        " 1",
        "+1",
        "01",
        "",
        "-0",
        "abc",
        "1.5",
        "0x1",
        "9223372036854775808",
        "1\0",
    ] {
        let mut store = store_of(&[("n", value)]);
        assert_eq!(one(&mut store, &["INCR", "n"]), not_integer, "{value:?}");
        assert_eq!(store, store_of(&[("n", value)]), "unchanged");
    }
    for (value, reply) in [("0", ":1\r\n"), ("-1", ":0\r\n"), ("-10", ":-9\r\n")] {
        let mut store = store_of(&[("n", value)]);
        assert_eq!(one(&mut store, &["INCR", "n"]), reply, "{value:?}");
    }
}

#[test]
fn incr_overflow() {
    let overflow = "-ERR increment or decrement would overflow\r\n";
    let mut store = store_of(&[("n", "9223372036854775807")]);
    assert_eq!(one(&mut store, &["INCR", "n"]), overflow);
    assert_eq!(
        one(&mut store, &["INCRBY", "n", "-1"]),
        ":9223372036854775806\r\n"
    );
    let mut store = store_of(&[("n", "-9223372036854775808")]);
    assert_eq!(one(&mut store, &["DECR", "n"]), overflow);
    assert_eq!(one(&mut store, &["INCRBY", "n", "-1"]), overflow);
    assert_eq!(
        one(&mut store, &["INCRBY", "n", "9223372036854775807"]),
        ":-1\r\n"
    );
    let mut store = store_of(&[("n", "1")]);
    assert_eq!(
        one(&mut store, &["INCRBY", "n", "9223372036854775807"]),
        overflow
    );
    assert_eq!(store, store_of(&[("n", "1")]));
}

#[test]
fn append_and_strlen() {
    let mut store = Store::new();
    assert_eq!(one(&mut store, &["STRLEN", "k"]), ":0\r\n");
    // APPEND creates the key, even with nothing to append.
    assert_eq!(one(&mut store, &["APPEND", "k", ""]), ":0\r\n");
    assert_eq!(one(&mut store, &["EXISTS", "k"]), ":1\r\n");
    assert_eq!(one(&mut store, &["APPEND", "k", "ab"]), ":2\r\n");
    assert_eq!(one(&mut store, &["APPEND", "k", "c\0"]), ":4\r\n");
    assert_eq!(one(&mut store, &["STRLEN", "k"]), ":4\r\n");
    assert_eq!(one(&mut store, &["GET", "k"]), "$4\r\nabc\0\r\n");
}

#[test]
fn mget_mset_msetnx() {
    let mut store = Store::new();
    assert_eq!(
        one(&mut store, &["MSET", "a", "1", "b", "2", "a", "3"]),
        "+OK\r\n"
    );
    assert_eq!(
        one(&mut store, &["MGET", "a", "b", "c", "a"]),
        "*4\r\n$1\r\n3\r\n$1\r\n2\r\n$-1\r\n$1\r\n3\r\n"
    );
    // All or nothing: one existing key and nothing is set.
    assert_eq!(one(&mut store, &["MSETNX", "c", "1", "a", "9"]), ":0\r\n");
    assert_eq!(store, store_of(&[("a", "3"), ("b", "2")]));
    assert_eq!(
        one(&mut store, &["MSETNX", "c", "4", "d", "5", "c", "6"]),
        ":1\r\n"
    );
    assert_eq!(
        store,
        store_of(&[("a", "3"), ("b", "2"), ("c", "6"), ("d", "5")])
    );
}

#[test]
fn commands_see_earlier_writes_of_the_transaction() {
    let mut store = Store::new();
    assert_eq!(
        transaction(
            &mut store,
            &[
                &["SET", "a", "1"],
                &["INCR", "a"],
                &["APPEND", "a", "0"],
                &["GET", "a"],
                &["DEL", "a"],
                &["EXISTS", "a"],
                &["SETNX", "a", "x"],
                &["MSETNX", "a", "y", "b", "z"],
            ]
        ),
        vec![
            "+OK\r\n",
            ":2\r\n",
            ":2\r\n",
            "$2\r\n20\r\n",
            ":1\r\n",
            ":0\r\n",
            ":1\r\n",
            ":0\r\n",
        ]
    );
    assert_eq!(store, store_of(&[("a", "x")]));
}

#[test]
fn write_set() {
    let mut overlay = Overlay::new(1 << 20, NOW);
    overlay.insert_read(b"present".to_vec(), Some(b"1".to_vec()));
    overlay.insert_read(b"absent".to_vec(), None);
    overlay.insert_read(b"read".to_vec(), Some(b"r".to_vec()));
    assert!(!overlay.has_writes());
    for args in [
        &["SET", "absent", "x"][..],
        &["DEL", "absent"],
        &["DEL", "present"],
        &["GET", "read"],
    ] {
        apply(&parse(args), &mut overlay);
    }
    // The absent key set and deleted again is written (deleted): a WATCH of it must
    // see the change, as in Redis.
    let writes: Vec<Write<'_>> = overlay.writes().collect();
    assert_eq!(
        writes,
        vec![
            Write {
                key: b"absent",
                value: None,
                expires_at_ms: None,
            },
            Write {
                key: b"present",
                value: None,
                expires_at_ms: None,
            }
        ]
    );
    assert!(overlay.has_writes());
    let reads: Vec<(&[u8], Lookup<'_>)> = overlay.reads().collect();
    assert_eq!(
        reads,
        vec![
            (&b"absent"[..], Lookup::Absent),
            (
                b"present",
                Lookup::Value {
                    value: b"1",
                    expires_at_ms: None
                }
            ),
            (
                b"read",
                Lookup::Value {
                    value: b"r",
                    expires_at_ms: None
                }
            ),
        ]
    );
    assert_eq!(overlay.value(b"present"), None);
    assert_eq!(overlay.value(b"read"), Some(&b"r"[..]));
}

#[test]
fn encoded_writes_use_store_keys() {
    let mut overlay = Overlay::new(1 << 20, NOW);
    overlay.insert_stored(b"k".to_vec(), None).unwrap();
    let mut stored = Vec::new();
    keys::encode(b"gone", b"v", &mut stored);
    overlay
        .insert_stored(b"gone".to_vec(), Some(&stored))
        .unwrap();
    apply(&parse(&["SET", "k", "v"]), &mut overlay);
    apply(&parse(&["DEL", "gone"]), &mut overlay);
    let writes: Vec<([u8; STORE_KEY_BYTES], Option<Vec<u8>>)> = overlay.encoded_writes().collect();
    assert_eq!(
        writes,
        vec![
            (keys::store_key(b"gone"), None),
            (
                keys::store_key(b"k"),
                Some(b"\x01\x01\x00\x00\x00kv".to_vec())
            ),
        ]
    );
    assert!(
        overlay
            .insert_stored(b"bad".to_vec(), Some(b"\x09"))
            .is_err()
    );
    assert!(!overlay.contains(b"bad"));
}

#[test]
fn collisions_fail_without_changes() {
    let mut stored = Vec::new();
    keys::encode(b"someone else", b"theirs", &mut stored);
    let mut overlay = Overlay::new(1 << 20, NOW);
    overlay.insert_stored(b"k".to_vec(), Some(&stored)).unwrap();
    overlay.insert_read(b"ok".to_vec(), None);
    for args in [
        &["GET", "k"][..],
        &["SET", "k", "v"],
        &["MSET", "ok", "1", "k", "2"],
        &["DEL", "ok", "k"],
    ] {
        assert_eq!(
            apply(&parse(args), &mut overlay).to_bytes(Resp2),
            b"-ERR ferrotx key hash collision\r\n",
            "{args:?}"
        );
    }
    assert!(!overlay.has_writes());
    let mut overlay = Overlay::new(1 << 20, NOW);
    overlay.insert_collision(b"k".to_vec());
    assert!(apply(&parse(&["STRLEN", "k"]), &mut overlay).is_error());
}

#[test]
fn blind_writes_of_unread_keys_replace_whatever_was_stored() {
    // A plan that only SETs or MSETs a key does not read it: the write replaces the
    // stored value, even another key's of the same store key (a collision), unseen.
    let mut overlay = Overlay::new(1 << 20, NOW);
    overlay.insert_unread(b"k".to_vec());
    overlay.insert_unread(b"m".to_vec());
    assert!(parse(&["SET", "k", "v"]).writes_blindly());
    assert!(!parse(&["SET", "k", "v", "NX"]).writes_blindly());
    assert!(!parse(&["SET", "k", "v", "GET"]).writes_blindly());
    assert!(!parse(&["INCR", "k"]).writes_blindly());
    assert_eq!(
        apply(&parse(&["SET", "k", "v"]), &mut overlay).to_bytes(Resp2),
        b"+OK\r\n"
    );
    assert_eq!(
        apply(&parse(&["MSET", "m", "1", "k", "w"]), &mut overlay).to_bytes(Resp2),
        b"+OK\r\n"
    );
    let writes: Vec<_> = overlay.writes().map(|w| (w.key, w.value)).collect();
    assert_eq!(writes, [(&b"k"[..], Some(&b"w"[..])), (b"m", Some(b"1"))]);
    assert_eq!(overlay.reads().count(), 0);
}

#[test]
#[should_panic(expected = "a command looked at a key its plan did not read")]
fn looking_at_an_unread_key_is_a_bug() {
    let mut overlay = Overlay::new(1 << 20, NOW);
    overlay.insert_unread(b"k".to_vec());
    let _ = apply(&parse(&["GET", "k"]), &mut overlay);
}

#[test]
fn values_over_the_store_limit_are_refused() {
    let too_large = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    // A stored value of key "k" holds 5 + 1 + value bytes: 10 bytes allow 4.
    let limit = 10;
    let mut store = Store::new();
    assert_eq!(
        transaction_with_limit(&mut store, limit, &[&["SET", "k", "1234"]]),
        vec!["+OK\r\n"]
    );
    assert_eq!(
        transaction_with_limit(
            &mut store,
            limit,
            &[
                &["SET", "k", "12345"],
                &["APPEND", "k", "5"],
                &["MSET", "a", "1", "b", "12345"],
                &["MSETNX", "a", "1", "b", "12345"],
                &["GETSET", "k", "12345"],
                &["SETNX", "z", "12345"],
            ]
        ),
        vec![too_large; 6]
    );
    assert_eq!(store, store_of(&[("k", "1234")]));
    // INCR's result counts too.
    let mut store = store_of(&[("k", "9999")]);
    assert_eq!(
        transaction_with_limit(&mut store, limit, &[&["INCR", "k"]]),
        vec![too_large]
    );
}

#[test]
fn keys_of_commands() {
    let keys = |args: &[&str]| -> Vec<Vec<u8>> { parse(args).keys().map(<[u8]>::to_vec).collect() };
    assert_eq!(keys(&["GET", "a"]), vec![b"a".to_vec()]);
    assert_eq!(keys(&["SET", "a", "v", "GET"]), vec![b"a".to_vec()]);
    assert_eq!(
        keys(&["DEL", "a", "b", "a"]),
        vec![b"a".to_vec(), b"b".to_vec(), b"a".to_vec()]
    );
    assert_eq!(
        keys(&["MSET", "a", "1", "b", "2"]),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
    assert!(parse(&["MGET", "a"]).is_read_only());
    assert!(!parse(&["GETDEL", "a"]).is_read_only());
}

#[test]
#[should_panic(expected = "the node reads every key of a command before applying it")]
fn applying_to_an_unread_key_panics() {
    let mut overlay = Overlay::new(1 << 20, NOW);
    apply(&parse(&["GET", "k"]), &mut overlay);
}

#[test]
#[should_panic(expected = "a key read twice into one overlay")]
fn reading_a_key_twice_panics() {
    let mut overlay = Overlay::new(1 << 20, NOW);
    overlay.insert_read(b"k".to_vec(), None);
    overlay.insert_read(b"k".to_vec(), None);
}

/// A test store in store form: each Redis key with its raw stored value (deadline
/// included).
type RawStore = BTreeMap<Vec<u8>, Vec<u8>>;

/// Runs `commands` as one plan-like transaction at `now` against `store` (stored values,
/// deadlines included), removing expired keys it touches if any command may write:
/// the replies as RESP2 text.
fn at(store: &mut RawStore, now: u64, commands: &[&[&str]]) -> Vec<String> {
    let commands: Vec<DataCommand> = commands.iter().map(|args| parse(args)).collect();
    let mut overlay = Overlay::new(1 << 20, now);
    overlay.set_remove_expired(!commands.iter().all(DataCommand::is_read_only));
    for command in &commands {
        for key in command.keys() {
            if !overlay.contains(key) {
                overlay
                    .insert_stored(key.to_vec(), store.get(key).map(Vec::as_slice))
                    .unwrap();
            }
        }
    }
    let replies = commands
        .iter()
        .map(|command| String::from_utf8(apply(command, &mut overlay).to_bytes(Resp2)).unwrap())
        .collect();
    for write in overlay.writes() {
        match write.value {
            Some(value) => {
                let mut stored = Vec::new();
                keys::encode_expiring(write.key, value, write.expires_at_ms, &mut stored);
                store.insert(write.key.to_vec(), stored)
            }
            None => store.remove(write.key),
        };
    }
    replies
}

fn at1(store: &mut RawStore, now: u64, args: &[&str]) -> String {
    at(store, now, &[args]).pop().unwrap()
}

/// The deadline stored for `key`, if any.
fn deadline(store: &RawStore, key: &str) -> Option<u64> {
    keys::decode(&store[key.as_bytes()]).unwrap().expires_at_ms
}

#[test]
fn set_with_expiry_and_ttls() {
    let mut store = RawStore::new();
    assert_eq!(
        at1(&mut store, NOW, &["SET", "k", "v", "EX", "10"]),
        "+OK\r\n"
    );
    assert_eq!(deadline(&store, "k"), Some(NOW + 10_000));
    // TTL rounds to the nearest second ((ms + 500) / 1000).
    for (now, ttl, pttl) in [
        (NOW, ":10\r\n", ":10000\r\n"),
        (NOW + 499, ":10\r\n", ":9501\r\n"),
        (NOW + 500, ":10\r\n", ":9500\r\n"),
        (NOW + 501, ":9\r\n", ":9499\r\n"),
        (NOW + 9_999, ":0\r\n", ":1\r\n"),
    ] {
        assert_eq!(at1(&mut store, now, &["TTL", "k"]), ttl, "{now}");
        assert_eq!(at1(&mut store, now, &["PTTL", "k"]), pttl, "{now}");
    }
    let expiretime = format!(":{}\r\n", (NOW + 10_000 + 500) / 1000);
    assert_eq!(at1(&mut store, NOW, &["EXPIRETIME", "k"]), expiretime);
    let pexpiretime = format!(":{}\r\n", NOW + 10_000);
    assert_eq!(at1(&mut store, NOW, &["PEXPIRETIME", "k"]), pexpiretime);
    // At the deadline the key is gone for every command, even in the same block.
    let now = NOW + 10_000;
    assert_eq!(
        at(
            &mut store,
            now,
            &[
                &["GET", "k"],
                &["EXISTS", "k"],
                &["TTL", "k"],
                &["PTTL", "k"],
                &["EXPIRETIME", "k"],
                &["STRLEN", "k"],
                &["TYPE", "k"],
                &["MGET", "k"],
            ]
        ),
        [
            "$-1\r\n",
            ":0\r\n",
            ":-2\r\n",
            ":-2\r\n",
            ":-2\r\n",
            ":0\r\n",
            "+none\r\n",
            "*1\r\n$-1\r\n"
        ]
    );
    // A read-only plan leaves it stored; a writing one removes it.
    assert!(store.contains_key(&b"k"[..]));
    assert_eq!(at1(&mut store, now, &["SETNX", "other", "1"]), ":1\r\n");
    assert!(store.contains_key(&b"k"[..]));
    assert_eq!(
        at(&mut store, now, &[&["SETNX", "other", "2"], &["GET", "k"]]),
        [":0\r\n", "$-1\r\n"]
    );
    assert!(!store.contains_key(&b"k"[..]));
    // Without expiry: -1; missing: -2.
    assert_eq!(at1(&mut store, now, &["TTL", "other"]), ":-1\r\n");
    assert_eq!(at1(&mut store, now, &["PEXPIRETIME", "other"]), ":-1\r\n");
    assert_eq!(at1(&mut store, now, &["TTL", "missing"]), ":-2\r\n");
}

#[test]
fn set_expiry_options_and_errors() {
    let mut store = RawStore::new();
    let invalid = "-ERR invalid expire time in 'set' command\r\n";
    for args in [
        &["SET", "k", "v", "EX", "0"][..],
        &["SET", "k", "v", "PX", "-1"],
        &["SET", "k", "v", "EXAT", "0"],
        &["SET", "k", "v", "EX", "9223372036854775"],
        &["SET", "k", "v", "PX", "9223372036854775807"],
        &["SET", "k", "v", "EXAT", "9223372036854776"],
    ] {
        assert_eq!(at1(&mut store, NOW, args), invalid, "{args:?}");
    }
    assert!(store.is_empty());
    assert_eq!(
        at1(&mut store, NOW, &["SETEX", "k", "0", "v"]),
        "-ERR invalid expire time in 'setex' command\r\n"
    );
    assert_eq!(
        at1(&mut store, NOW, &["PSETEX", "k", "-3", "v"]),
        "-ERR invalid expire time in 'psetex' command\r\n"
    );
    // The largest absolute deadlines are fine.
    assert_eq!(
        at1(
            &mut store,
            NOW,
            &["SET", "k", "v", "PXAT", "9223372036854775807"]
        ),
        "+OK\r\n"
    );
    assert_eq!(deadline(&store, "k"), Some(i64::MAX as u64));
    assert_eq!(
        at1(&mut store, NOW, &["EXPIRETIME", "k"]),
        ":9223372036854776\r\n"
    );
    // PXAT, EXAT; KEEPTTL keeps, plain SET clears; NX/XX/GET combined.
    at1(&mut store, NOW, &["SET", "k", "v", "EXAT", "4000000000"]);
    assert_eq!(deadline(&store, "k"), Some(4_000_000_000_000));
    assert_eq!(
        at1(&mut store, NOW, &["SET", "k", "w", "KEEPTTL", "GET"]),
        "$1\r\nv\r\n"
    );
    assert_eq!(deadline(&store, "k"), Some(4_000_000_000_000));
    assert_eq!(
        at1(&mut store, NOW, &["SET", "k", "x", "NX", "PX", "5"]),
        "$-1\r\n"
    );
    assert_eq!(deadline(&store, "k"), Some(4_000_000_000_000));
    assert_eq!(
        at1(&mut store, NOW, &["SET", "k", "x", "XX", "PX", "5"]),
        "+OK\r\n"
    );
    assert_eq!(deadline(&store, "k"), Some(NOW + 5));
    at1(&mut store, NOW, &["SET", "k", "y"]);
    assert_eq!(deadline(&store, "k"), None);
    // A deadline already past: the key is set and gone at once (OK, or the old value).
    assert_eq!(
        at1(&mut store, NOW, &["SET", "k", "z", "PXAT", "1", "GET"]),
        "$1\r\ny\r\n"
    );
    assert!(store.is_empty());
    assert_eq!(
        at1(&mut store, NOW, &["SET", "k", "z", "PXAT", "1"]),
        "+OK\r\n"
    );
    assert!(store.is_empty());
}

#[test]
fn other_commands_keep_or_clear_the_ttl() {
    let mut store = RawStore::new();
    let d = Some(NOW + 100_000);
    at1(&mut store, NOW, &["SET", "c", "1", "PX", "100000"]);
    for args in [
        &["INCR", "c"][..],
        &["INCRBY", "c", "3"],
        &["DECR", "c"],
        &["DECRBY", "c", "2"],
        &["APPEND", "c", "0"],
        &["SET", "c", "9", "KEEPTTL"],
        &["SETNX", "c", "1"],
        &["MSETNX", "c", "1"],
        &["GETEX", "c"],
        &["PERSIST", "missing"],
    ] {
        at1(&mut store, NOW, args);
        assert_eq!(deadline(&store, "c"), d, "{args:?}");
    }
    for args in [
        &["GETSET", "c", "2"][..],
        &["MSET", "c", "3"],
        &["SET", "c", "4"],
    ] {
        at1(&mut store, NOW, &["SET", "c", "1", "PX", "100000"]);
        at1(&mut store, NOW, args);
        assert_eq!(deadline(&store, "c"), None, "{args:?}");
    }
    for args in [&["GETDEL", "c"][..], &["DEL", "c"]] {
        at1(&mut store, NOW, &["SET", "c", "1", "PX", "100000"]);
        at1(&mut store, NOW, args);
        assert_eq!(at1(&mut store, NOW, &["TTL", "c"]), ":-2\r\n", "{args:?}");
    }
}

#[test]
fn getex_expire_and_persist() {
    let mut store = RawStore::new();
    assert_eq!(at1(&mut store, NOW, &["GETEX", "k", "EX", "0"]), "$-1\r\n");
    assert_eq!(
        at1(&mut store, NOW, &["GETEX", "k", "EX", "abc"]),
        "$-1\r\n"
    );
    at1(&mut store, NOW, &["SET", "k", "v"]);
    assert_eq!(
        at1(&mut store, NOW, &["GETEX", "k", "EX", "abc"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        at1(&mut store, NOW, &["GETEX", "k", "PX", "0"]),
        "-ERR invalid expire time in 'getex' command\r\n"
    );
    assert_eq!(
        at1(&mut store, NOW, &["GETEX", "k", "PX", "700"]),
        "$1\r\nv\r\n"
    );
    assert_eq!(deadline(&store, "k"), Some(NOW + 700));
    assert_eq!(
        at1(&mut store, NOW, &["GETEX", "k", "PERSIST"]),
        "$1\r\nv\r\n"
    );
    assert_eq!(deadline(&store, "k"), None);
    assert_eq!(
        at1(&mut store, NOW, &["GETEX", "k", "EXAT", "1"]),
        "$1\r\nv\r\n"
    );
    assert!(store.is_empty());
    // EXPIRE family.
    assert_eq!(at1(&mut store, NOW, &["EXPIRE", "k", "10"]), ":0\r\n");
    assert_eq!(
        at1(&mut store, NOW, &["EXPIRE", "k", "9223372036854775807"]),
        "-ERR invalid expire time in 'expire' command\r\n"
    );
    at1(&mut store, NOW, &["SET", "k", "v"]);
    let steps: [(&[&str], &str, Option<u64>); 12] = [
        (&["EXPIRE", "k", "10", "XX"], ":0\r\n", None),
        (&["EXPIRE", "k", "10", "GT"], ":0\r\n", None),
        (
            &["PEXPIRE", "k", "10000", "NX"],
            ":1\r\n",
            Some(NOW + 10_000),
        ),
        (&["EXPIRE", "k", "20", "NX"], ":0\r\n", Some(NOW + 10_000)),
        (&["EXPIRE", "k", "5", "GT"], ":0\r\n", Some(NOW + 10_000)),
        (&["EXPIRE", "k", "20", "GT"], ":1\r\n", Some(NOW + 20_000)),
        (&["EXPIRE", "k", "30", "LT"], ":0\r\n", Some(NOW + 20_000)),
        (
            &["EXPIRE", "k", "15", "XX", "LT"],
            ":1\r\n",
            Some(NOW + 15_000),
        ),
        (&["PERSIST", "k"], ":1\r\n", None),
        (&["PERSIST", "k"], ":0\r\n", None),
        (&["EXPIRE", "k", "15", "XX", "LT"], ":0\r\n", None),
        (
            &["PEXPIREAT", "k", "4000000000000", "LT"],
            ":1\r\n",
            Some(4_000_000_000_000),
        ),
    ];
    for (args, reply, expected) in steps {
        assert_eq!(at1(&mut store, NOW, args), reply, "{args:?}");
        assert_eq!(deadline(&store, "k"), expected, "{args:?}");
    }
    assert_eq!(
        at1(&mut store, NOW, &["EXPIREAT", "k", "4100000000"]),
        ":1\r\n"
    );
    assert_eq!(deadline(&store, "k"), Some(4_100_000_000_000));
    // A time in the past deletes the key, unless a condition refuses it.
    assert_eq!(at1(&mut store, NOW, &["EXPIRE", "k", "-1", "GT"]), ":0\r\n");
    assert_eq!(at1(&mut store, NOW, &["EXPIRE", "k", "-1"]), ":1\r\n");
    assert!(store.is_empty());
    at1(&mut store, NOW, &["SET", "k", "v"]);
    assert_eq!(
        at1(&mut store, NOW, &["PEXPIRE", "k", "-9223372036854775808"]),
        ":1\r\n"
    );
    assert!(store.is_empty());
}

#[test]
fn a_key_set_and_deleted_is_written_and_expired_keys_go_only_with_writing_plans() {
    let mut overlay = Overlay::new(1 << 20, NOW);
    let mut stored = Vec::new();
    keys::encode_expiring(b"old", b"v", Some(NOW), &mut stored);
    overlay
        .insert_stored(b"old".to_vec(), Some(&stored))
        .unwrap();
    overlay.insert_read(b"new".to_vec(), None);
    assert_eq!(overlay.reads().next(), Some((&b"new"[..], Lookup::Absent)));
    assert_eq!(apply(&parse(&["GET", "old"]), &mut overlay), Reply::Null);
    assert!(!overlay.has_writes());
    overlay.set_remove_expired(true);
    let writes: Vec<_> = overlay.writes().map(|w| (w.key, w.value)).collect();
    assert_eq!(writes, [(&b"old"[..], None)]);
    apply(&parse(&["SET", "new", "x"]), &mut overlay);
    apply(&parse(&["DEL", "new"]), &mut overlay);
    let writes: Vec<_> = overlay.writes().map(|w| (w.key, w.value)).collect();
    assert_eq!(writes, [(&b"new"[..], None), (b"old", None)]);
}
