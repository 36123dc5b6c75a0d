use std::collections::BTreeMap;

use rand::SeedableRng;

use super::*;
use crate::check::list_append::check;

#[test]
fn a_generator_is_deterministic_and_its_elements_unique() {
    let run = |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut generator = Generator::new(3, 5, 1_000);
        (0..200)
            .map(|_| generator.next_ops(&mut rng))
            .collect::<Vec<_>>()
    };
    let first = run(9);
    assert_eq!(first, run(9));
    assert_ne!(first, run(10));
    let mut elements = std::collections::BTreeSet::new();
    for ops in &first {
        assert!((1..=OPS_PER_TXN_MAX as usize).contains(&ops.len()));
        for op in ops {
            match op {
                MicroOp::Append { key, element } => {
                    assert!(*key < 5);
                    assert_eq!(element >> 32, 3, "the client id is in the high half");
                    assert!(elements.insert(*element), "element {element} twice");
                }
                MicroOp::Read { key, list } => assert!(*key < 5 && list.is_none()),
            }
        }
    }
    assert!(!elements.is_empty());
}

#[test]
fn a_generator_stops_appending_to_a_key_at_its_bound() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut generator = Generator::new(0, 2, 3);
    let appends = (0..500)
        .flat_map(|_| generator.next_ops(&mut rng))
        .filter(|op| matches!(op, MicroOp::Append { .. }))
        .count();
    assert_eq!(appends, 6);
}

#[test]
fn lists_round_trip_through_the_store_encoding() {
    let list = [1, 2 << 32 | 7, u64::from(u32::MAX)];
    assert_eq!(decode_list(&encode_list(&list)), list);
    assert_eq!(decode_list(&[]), Vec::<Element>::new());
    assert_eq!(decode_list(&[1, 0, 0]), [MALFORMED_ELEMENT]);
}

#[test]
fn a_transaction_becomes_resp_commands() {
    let ops = [
        MicroOp::Append {
            key: 1,
            element: 42,
        },
        MicroOp::Read { key: 2, list: None },
    ];
    assert_eq!(
        redis_request(&ops),
        b"*1\r\n$5\r\nMULTI\r\n\
          *3\r\n$6\r\nAPPEND\r\n$6\r\nlist:1\r\n$3\r\n42,\r\n\
          *2\r\n$3\r\nGET\r\n$6\r\nlist:2\r\n\
          *1\r\n$4\r\nEXEC\r\n"
    );
}

fn ops() -> Vec<MicroOp> {
    vec![
        MicroOp::Append {
            key: 1,
            element: 42,
        },
        MicroOp::Read { key: 1, list: None },
        MicroOp::Read { key: 2, list: None },
    ]
}

#[test]
fn exec_replies_become_recorded_operations() {
    let reply = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n:6\r\n$5\r\n7,42,\r\n$-1\r\n";
    let (outcome, recorded, used) = parse_redis_reply(&ops(), reply).unwrap();
    assert_eq!(outcome, Outcome::Committed);
    assert_eq!(used, reply.len());
    assert_eq!(
        recorded,
        [
            MicroOp::Append {
                key: 1,
                element: 42
            },
            MicroOp::Read {
                key: 1,
                list: Some(vec![7, 42])
            },
            MicroOp::Read {
                key: 2,
                list: Some(vec![])
            },
        ]
    );
    // Every proper prefix is incomplete, never an error or a panic.
    for cut in 0..reply.len() {
        assert_eq!(
            parse_redis_reply(&ops(), &reply[..cut]),
            Err(ReplyError::Incomplete),
            "cut at {cut}"
        );
    }
}

#[test]
fn aborted_and_failed_execs_are_told_apart() {
    let queued = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n".to_vec();
    let outcome = |exec: &[u8]| {
        let reply = [&queued[..], exec].concat();
        let (outcome, recorded, _) = parse_redis_reply(&ops(), &reply).unwrap();
        assert!(
            recorded
                .iter()
                .all(|op| !matches!(op, MicroOp::Read { list: Some(_), .. }))
        );
        outcome
    };
    assert_eq!(outcome(b"*-1\r\n"), Outcome::Aborted);
    assert_eq!(outcome(b"_\r\n"), Outcome::Aborted);
    assert_eq!(
        outcome(b"-EXECABORT Transaction discarded because of previous errors.\r\n"),
        Outcome::Aborted
    );
    assert_eq!(
        outcome(b"-ERR ferrotx: aborted\r\n"),
        Outcome::Indeterminate
    );
    assert!(matches!(
        parse_redis_reply(
            &ops(),
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n:1\r\n"
        ),
        Err(ReplyError::Unexpected(_))
    ));
    assert!(matches!(
        parse_redis_reply(&ops(), b"?what\r\n"),
        Err(ReplyError::Unexpected(_))
    ));
}

#[test]
fn malformed_redis_lists_read_as_garbage() {
    assert_eq!(parse_redis_list(b""), Vec::<Element>::new());
    assert_eq!(parse_redis_list(b"1,2,"), [1, 2]);
    assert_eq!(parse_redis_list(b"1,2"), [1, 2, MALFORMED_ELEMENT]);
    assert_eq!(parse_redis_list(b"1,x,"), [1, MALFORMED_ELEMENT]);
}

/// A Redis server in miniature: applies each transaction whole, in order, and replies
/// as Redis would. `lose` drops the append of that element (a bug to catch).
fn serve(state: &mut BTreeMap<ListKey, Vec<u8>>, ops: &[MicroOp], lose: Element) -> Vec<u8> {
    let mut reply = b"+OK\r\n".to_vec();
    for _ in ops {
        reply.extend_from_slice(b"+QUEUED\r\n");
    }
    reply.extend_from_slice(format!("*{}\r\n", ops.len()).as_bytes());
    for op in ops {
        match op {
            MicroOp::Append { key, element } => {
                let value = state.entry(*key).or_default();
                if *element != lose {
                    value.extend_from_slice(format!("{element},").as_bytes());
                }
                reply.extend_from_slice(format!(":{}\r\n", value.len()).as_bytes());
            }
            MicroOp::Read { key, .. } => match state.get(key) {
                Some(value) => {
                    reply.extend_from_slice(format!("${}\r\n", value.len()).as_bytes());
                    reply.extend_from_slice(value);
                    reply.extend_from_slice(b"\r\n");
                }
                None => reply.extend_from_slice(b"$-1\r\n"),
            },
        }
    }
    reply
}

/// Runs 300 transactions of 3 clients through [`serve`], one at a time, and checks the
/// history with the final reads.
fn redis_history(lose: Element) -> Vec<String> {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut generators: Vec<Generator> = (0..3).map(|c| Generator::new(c, 4, 100)).collect();
    let mut state = BTreeMap::new();
    let mut history = Vec::new();
    for id in 0..300u64 {
        let client = usize::try_from(id % 3).unwrap();
        let ops = generators[client].next_ops(&mut rng);
        assert!(!redis_request(&ops).is_empty());
        let reply = serve(&mut state, &ops, lose);
        let (outcome, recorded, used) = parse_redis_reply(&ops, &reply).unwrap();
        assert_eq!(used, reply.len());
        history.push(Transaction {
            id,
            start: 2 * id,
            end: 2 * id + 1,
            outcome,
            ops: recorded,
        });
    }
    let final_reads = (0..4)
        .map(|key| {
            let list = state
                .get(&key)
                .map_or_else(Vec::new, |v| parse_redis_list(v));
            (key, list)
        })
        .collect();
    check(&history, &final_reads)
        .iter()
        .map(|v| v.name())
        .collect()
}

#[test]
fn a_serial_redis_history_is_clean() {
    assert!(redis_history(0).is_empty());
}

#[test]
fn a_redis_server_losing_an_append_is_caught() {
    // Client 1's first element.
    let found = redis_history(1 << 32 | 1);
    assert!(found.contains(&"lost-append".to_owned()), "{found:?}");
}
