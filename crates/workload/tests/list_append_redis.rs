//! The list-append workload's Redis form through ferrotx's real Redis session code
//! (`ferrotx-resp`, sans I/O) over an in-memory store that runs each plan whole: the
//! request bytes are accepted, the replies parse back, and the history is clean; a store
//! that loses an append is caught.

use std::collections::BTreeMap;

use ferrotx_resp::protocol::{Parsed, RequestParser};
use ferrotx_resp::{Action, Overlay, Session, SessionConfig};
use ferrotx_workload::check::list_append::{Element, ListKey, MicroOp, Transaction, check};
use ferrotx_workload::list_append::{Generator, parse_redis_reply, redis_request};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const KEYS: u64 = 4;
const CLIENTS: u32 = 3;
const TXNS: u64 = 300;

/// Every key's stored value; `lose` names a value an append must not make (a bug).
struct Store {
    values: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    lose: Option<Vec<u8>>,
}

impl Store {
    /// Feeds one request through `session` and returns every reply byte.
    fn exchange(&mut self, session: &mut Session, request: &[u8]) -> Vec<u8> {
        let mut parser = RequestParser::default();
        let mut buffer = request.to_vec();
        let mut out = Vec::new();
        loop {
            let (action, consumed) = match parser.parse(&buffer, session.auth_required()) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Empty { consumed }) => (None, consumed),
                Ok(Parsed::Command { args, consumed }) => (Some(session.handle(args)), consumed),
                Err(error) => panic!("the request is not RESP: {error:?}"),
            };
            buffer.drain(..consumed);
            match action {
                None => {}
                Some(Action::Reply(reply)) => reply.encode(session.protocol(), &mut out),
                Some(Action::Run(plan)) => {
                    let mut overlay = Overlay::new(1 << 20, 0);
                    for key in plan.keys_to_read() {
                        let value = self.values.get(key).cloned().flatten();
                        overlay.insert_read(key.to_vec(), value);
                    }
                    for key in plan.keys_written_unread() {
                        overlay.insert_unread(key.to_vec());
                    }
                    let replies = plan.apply(&mut overlay);
                    for write in overlay.writes() {
                        let value = write.value.map(<[u8]>::to_vec);
                        if value.is_some() && value == self.lose {
                            continue;
                        }
                        self.values.insert(write.key.to_vec(), value);
                    }
                    let mut completed = Vec::new();
                    session.complete(ferrotx_resp::Outcome::Committed(replies), &mut completed);
                    for reply in completed {
                        reply.encode(session.protocol(), &mut out);
                    }
                }
                Some(other) => panic!("unexpected action {other:?}"),
            }
        }
        out
    }
}

/// Runs the workload one transaction at a time, then reads every list in one more
/// transaction, and checks.
fn run(lose: Option<&[u8]>) -> Vec<String> {
    let mut store = Store {
        values: BTreeMap::new(),
        lose: lose.map(<[u8]>::to_vec),
    };
    let mut sessions: Vec<Session> = (0..CLIENTS)
        .map(|c| Session::new(SessionConfig::default(), u64::from(c)))
        .collect();
    let mut generators: Vec<Generator> =
        (0..CLIENTS).map(|c| Generator::new(c, KEYS, 100)).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut history = Vec::new();
    let mut clock = 0;
    for id in 0..TXNS {
        let client = usize::try_from(id % u64::from(CLIENTS)).unwrap();
        let ops = generators[client].next_ops(&mut rng);
        let reply = store.exchange(&mut sessions[client], &redis_request(&ops));
        let (outcome, recorded, used) = parse_redis_reply(&ops, &reply).unwrap();
        assert_eq!(used, reply.len());
        history.push(Transaction {
            id,
            start: clock,
            end: clock + 1,
            outcome,
            ops: recorded,
        });
        clock += 2;
    }
    let reads: Vec<MicroOp> = (0..KEYS)
        .map(|key| MicroOp::Read { key, list: None })
        .collect();
    let reply = store.exchange(&mut sessions[0], &redis_request(&reads));
    let (_, recorded, _) = parse_redis_reply(&reads, &reply).unwrap();
    let final_reads: BTreeMap<ListKey, Vec<Element>> = recorded
        .into_iter()
        .filter_map(|op| match op {
            MicroOp::Read { key, list } => Some((key, list?)),
            MicroOp::Append { .. } => None,
        })
        .collect();
    assert_eq!(final_reads.len(), 4);
    assert!(final_reads.values().any(|l| l.len() > 10));
    check(&history, &final_reads)
        .iter()
        .map(|v| v.name())
        .collect()
}

#[test]
fn the_redis_form_runs_through_the_session_and_checks_clean() {
    assert_eq!(run(None), Vec::<String>::new());
}

#[test]
fn a_redis_store_losing_an_append_is_caught() {
    // Client 0's first element, alone in its list: the store never keeps "1,".
    let found = run(Some(b"1,"));
    assert!(found.contains(&"lost-append".to_owned()), "{found:?}");
}
