//! Reliability semantics of the RPC engine, through its public interface only.
//!
//! Two engines are wired back to back by the test itself, which decides what happens to
//! every datagram (delivered, dropped, duplicated, reordered, replayed late) and when time
//! passes. Datagrams are inspected with `ferrotx_wire::decode`, and forged ones are built
//! with `start_datagram`/`push_message`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use ferrotx_rpc::{CallerId, Config, Engine, Event, HandlerError, RpcError};
use ferrotx_wire::batch::TxBatch;
use ferrotx_wire::{
    EndpointId, FragmentInfo, MAX_MESSAGE_BYTES, MessageFields, MessageKind, Status, ViewId,
    decode, push_message, start_datagram,
};
use proptest::prelude::*;

const CLIENT: EndpointId = EndpointId::new(0, 0);
const SERVER: EndpointId = EndpointId::new(1, 0);
/// A third endpoint, for misdirected and forged datagrams.
const OTHER: EndpointId = EndpointId::new(2, 0);

/// Request type of the server's echo handler (see [`answer`]).
const ECHO: u8 = 7;
/// Request type of a handler whose response changes with every execution.
const COUNT: u8 = 8;
/// Request type of a handler that always fails.
const FAIL: u8 = 9;
/// Request type no engine registers.
const UNKNOWN: u8 = 200;

const CALLER: CallerId = CallerId(0);

/// Payloads of the requests a server's handlers executed, in order.
type Log = Rc<RefCell<Vec<Vec<u8>>>>;

/// The echo handler's response: the payload reversed and scrambled, so that a response
/// reassembled out of order, or matched to the wrong request, does not compare equal.
fn answer(payload: &[u8]) -> Vec<u8> {
    payload.iter().rev().map(|b| b ^ 0x5a).collect()
}

/// `len` pseudo-random bytes from `seed` (xorshift), different at every position.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A server engine with the echo handler (logging what it executes) and a counting one.
fn server(config: Config) -> (Engine, Log) {
    let mut engine = Engine::new(SERVER, config);
    let log: Log = Rc::default();
    let echo_log = log.clone();
    engine.register(
        ECHO,
        Box::new(move |request, response| {
            echo_log.borrow_mut().push(request.payload.to_vec());
            response.extend_from_slice(&answer(request.payload));
            Ok(())
        }),
    );
    let count_log = log.clone();
    let mut executions = 0u32;
    engine.register(
        COUNT,
        Box::new(move |request, response| {
            count_log.borrow_mut().push(request.payload.to_vec());
            executions += 1;
            response.extend_from_slice(request.payload);
            response.extend_from_slice(&executions.to_le_bytes());
            Ok(())
        }),
    );
    (engine, log)
}

/// A client that knows the server's first incarnation (1), as a membership layer would
/// tell it, so that its requests go out at once; `connecting_client` learns it instead.
fn client(config: Config) -> Engine {
    let mut engine = Engine::new(CLIENT, config);
    engine.set_peer_incarnation(SERVER, 1);
    engine
}

/// A client that must learn the server's incarnation with a connect round trip.
fn connecting_client(config: Config) -> Engine {
    Engine::new(CLIENT, config)
}

/// Configuration with small datagrams, so that a few KiB make a multi-packet message.
fn small_datagrams() -> Config {
    Config {
        datagram_bytes: 1200,
        ..Config::default()
    }
}

/// Pushes one echo request per payload on `CALLER` and submits the batch.
fn send(client: &mut Engine, now_ns: u64, payloads: &[Vec<u8>]) {
    send_typed(client, now_ns, ECHO, payloads);
}

fn send_typed(client: &mut Engine, now_ns: u64, request_type: u8, payloads: &[Vec<u8>]) {
    for payload in payloads {
        client
            .batch_push(CALLER, SERVER, request_type)
            .extend_from_slice(payload);
    }
    assert!(
        !client.submit(CALLER, now_ns),
        "a batch of requests to send cannot be complete on submission"
    );
}

/// Every datagram `engine` has to send, polling until nothing is left.
fn transmit(engine: &mut Engine) -> Vec<Vec<u8>> {
    let mut tx = TxBatch::new(16, engine.config().datagram_bytes);
    let mut out = Vec::new();
    loop {
        engine.poll_transmit(&mut tx);
        if tx.is_empty() {
            return out;
        }
        for (_, datagram) in tx.iter() {
            assert!(datagram.len() <= engine.config().datagram_bytes);
            out.push(datagram.to_vec());
        }
        tx.clear();
    }
}

fn deliver(engine: &mut Engine, now_ns: u64, from: EndpointId, datagrams: &[Vec<u8>]) {
    for datagram in datagrams {
        engine.handle_datagram(now_ns, Some(from), &mut datagram.to_vec());
    }
}

/// Exchanges datagrams between the two engines, losing nothing, until both are quiet.
fn settle(client: &mut Engine, server: &mut Engine, now_ns: u64) {
    for _ in 0..100 {
        let requests = transmit(client);
        deliver(server, now_ns, client.local(), &requests);
        let responses = transmit(server);
        deliver(client, now_ns, server.local(), &responses);
        if requests.is_empty() && responses.is_empty() {
            return;
        }
    }
    panic!("the engines did not settle");
}

/// Runs the retransmission scan at the engine's next timeout, moving `now_ns` there.
fn fire_timeout(engine: &mut Engine, now_ns: &mut u64) {
    let due = engine
        .next_timeout_ns()
        .expect("a request is outstanding, so a timer must be set");
    *now_ns = (*now_ns).max(due);
    engine.handle_timeout(*now_ns);
}

/// Runs timeouts until the engine retransmits, and returns what it sent then.
fn next_retransmission(engine: &mut Engine, now_ns: &mut u64) -> Vec<Vec<u8>> {
    for _ in 0..1000 {
        fire_timeout(engine, now_ns);
        let datagrams = transmit(engine);
        if !datagrams.is_empty() {
            return datagrams;
        }
    }
    panic!("no retransmission after 1,000 timeouts");
}

/// Checks that `CALLER`'s batch is reported ready, once, and that request `i` was
/// answered with `answer(payloads[i])`.
fn assert_answered(client: &mut Engine, payloads: &[Vec<u8>]) {
    assert_eq!(client.poll_ready(), Some(CALLER));
    assert_eq!(
        client.poll_ready(),
        None,
        "a batch was reported ready twice"
    );
    assert!(client.is_done(CALLER));
    assert_eq!(client.batch_len(CALLER), payloads.len());
    for (i, payload) in payloads.iter().enumerate() {
        let response = client.result(CALLER, i).expect("request answered");
        assert!(
            response == answer(payload).as_slice(),
            "request {i}: wrong response ({} bytes, expected {})",
            response.len(),
            payload.len()
        );
    }
}

/// What the tests look at in one message of a datagram.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Seen {
    kind: MessageKind,
    request_type: u8,
    status: Status,
    slot: u8,
    request_number: u64,
    packet_index: u16,
    packet_count: u16,
}

fn messages(datagram: &[u8]) -> Vec<Seen> {
    let datagram = decode(datagram).expect("the engine wrote a valid datagram");
    datagram
        .messages()
        .map(|m| Seen {
            kind: m.kind(),
            request_type: m.header.request_type,
            status: m.status(),
            slot: m.header.slot,
            request_number: m.header.request_number.get(),
            packet_index: m.header.packet_index.get(),
            packet_count: m.header.packet_count.get(),
        })
        .collect()
}

/// The only message of a datagram.
fn only_message(datagram: &[u8]) -> Seen {
    let seen = messages(datagram);
    assert_eq!(seen.len(), 1, "expected a datagram of one message");
    seen[0]
}

/// Re-encodes each message of `datagram` as a datagram of its own with the same packet
/// header, so that messages coalesced by the sender can be delivered one at a time.
fn split(datagram: &[u8]) -> Vec<Vec<u8>> {
    let d = decode(datagram).expect("the engine wrote a valid datagram");
    d.messages()
        .map(|m| {
            let mut buf = Vec::with_capacity(datagram.len());
            start_datagram(
                &mut buf,
                d.source(),
                d.target(),
                d.view(),
                d.incarnation(),
                d.target_incarnation(),
            );
            let h = m.header;
            let fields = MessageFields {
                kind: m.kind(),
                request_type: h.request_type,
                status: m.status(),
                slot: h.slot,
                request_number: h.request_number.get(),
            };
            let fragment = FragmentInfo {
                message_len: h.message_len.get(),
                offset: h.offset.get(),
                packet_index: h.packet_index.get(),
                packet_count: h.packet_count.get(),
            };
            assert!(push_message(&mut buf, fields, fragment, m.fragment));
            buf
        })
        .collect()
}

/// Header fields of a hand-made datagram.
#[derive(Clone, Copy)]
struct Forge {
    source: EndpointId,
    target: EndpointId,
    view: ViewId,
    incarnation: u64,
    target_incarnation: u64,
}

impl Forge {
    /// A datagram as `source` of `Config::default()` would write it to `target`.
    fn new(source: EndpointId, target: EndpointId) -> Self {
        Self {
            source,
            target,
            view: Config::default().view,
            incarnation: Config::default().incarnation,
            target_incarnation: Config::default().incarnation,
        }
    }

    /// A datagram holding one whole message.
    fn message(self, kind: MessageKind, slot: u8, request_number: u64, payload: &[u8]) -> Vec<u8> {
        let mut buf = Vec::with_capacity(2048);
        start_datagram(
            &mut buf,
            self.source,
            self.target,
            self.view,
            self.incarnation,
            self.target_incarnation,
        );
        let fields = MessageFields {
            kind,
            request_type: ECHO,
            status: Status::Ok,
            slot,
            request_number,
        };
        let fragment = FragmentInfo::whole(payload.len() as u32);
        assert!(push_message(&mut buf, fields, fragment, payload));
        buf
    }

    /// A datagram holding the first packet (of two) of a request of `message_len` bytes.
    fn first_packet(self, slot: u8, request_number: u64, message_len: u32) -> Vec<u8> {
        let mut buf = Vec::with_capacity(2048);
        start_datagram(
            &mut buf,
            self.source,
            self.target,
            self.view,
            self.incarnation,
            self.target_incarnation,
        );
        let fields = MessageFields {
            kind: MessageKind::Request,
            request_type: ECHO,
            status: Status::Ok,
            slot,
            request_number,
        };
        let fragment = FragmentInfo {
            message_len,
            offset: 0,
            packet_index: 0,
            packet_count: 2,
        };
        assert!(push_message(&mut buf, fields, fragment, &[1; 16]));
        buf
    }
}

// 1. Duplicated request.

#[test]
fn duplicate_request_runs_once_and_gets_the_saved_response() {
    let mut c = client(Config::default());
    let (mut s, log) = server(Config::default());
    let payload = b"increment".to_vec();
    send_typed(&mut c, 0, COUNT, std::slice::from_ref(&payload));
    let requests = transmit(&mut c);
    assert_eq!(requests.len(), 1);

    deliver(&mut s, 10, CLIENT, &requests);
    let first = transmit(&mut s);
    deliver(&mut s, 20, CLIENT, &requests);
    let second = transmit(&mut s);

    // The handler's response differs with each execution, so identical bytes show the
    // duplicate was answered from the saved response, not by running the handler again.
    assert_eq!(log.borrow().len(), 1, "the duplicate ran the handler again");
    assert_eq!(s.stats().requests_executed, 1);
    assert_eq!(s.stats().duplicate_requests_answered, 1);
    assert_eq!(first.len(), 1);
    assert_eq!(first, second, "the duplicate got different response bytes");

    deliver(&mut c, 30, SERVER, &first);
    assert_eq!(c.poll_ready(), Some(CALLER));
    let mut expected = payload.clone();
    expected.extend_from_slice(&1u32.to_le_bytes());
    assert_eq!(c.result(CALLER, 0), Ok(expected.as_slice()));
    // The second copy of the response matches nothing any more.
    deliver(&mut c, 40, SERVER, &second);
    assert_eq!(c.stats().stale_responses, 1);
    assert_eq!(c.stats().calls_completed, 1);
    assert_eq!(c.poll_ready(), None);
}

// 2. Request older than the slot's latest.

/// A late copy of an older request does not run; it is answered `Overtaken` (in case a
/// forged request overtook it, see below), and its client, which has moved on, drops the
/// answer.
#[test]
fn request_older_than_the_slots_latest_is_ignored() {
    // One credit: both requests use slot 0.
    let mut c = client(Config {
        credits: 1,
        ..Config::default()
    });
    let (mut s, log) = server(Config::default());
    let old = vec![b"old".to_vec()];
    send(&mut c, 0, &old);
    let old_requests = transmit(&mut c);
    deliver(&mut s, 0, CLIENT, &old_requests);
    deliver(&mut c, 0, SERVER, &transmit(&mut s));
    assert_answered(&mut c, &old);

    let new = vec![b"new".to_vec()];
    send(&mut c, 10, &new);
    let new_requests = transmit(&mut c);
    let (o, n) = (
        only_message(&old_requests[0]),
        only_message(&new_requests[0]),
    );
    assert_eq!(o.slot, n.slot, "the test needs both requests on one slot");
    assert!(n.request_number > o.request_number);
    deliver(&mut s, 10, CLIENT, &new_requests);
    let new_responses = transmit(&mut s);

    // The old request, replayed late, must not run; its answer says the slot moved on.
    deliver(&mut s, 20, CLIENT, &old_requests);
    assert_eq!(s.stats().overtaken_requests_answered, 1);
    assert_eq!(s.stats().duplicate_requests_answered, 0);
    assert_eq!(*log.borrow(), vec![b"old".to_vec(), b"new".to_vec()]);
    let overtaken = transmit(&mut s);
    let seen = only_message(&overtaken[0]);
    assert_eq!(
        (seen.status, seen.request_number),
        (Status::Overtaken, o.request_number)
    );

    // The client waits for the new request: the answer to the old one matches nothing.
    deliver(&mut c, 20, SERVER, &overtaken);
    assert_eq!(c.stats().stale_responses, 1);
    assert_eq!(c.stats().calls_overtaken, 0);
    deliver(&mut c, 20, SERVER, &new_responses);
    assert_answered(&mut c, &new);
}

/// Sends `payload` as one echo request and exchanges datagrams (with retransmission
/// timeouts) until its batch is done; `None` if it is still waiting after many timeouts.
fn call_until_done(
    c: &mut Engine,
    s: &mut Engine,
    now_ns: &mut u64,
    payload: &[u8],
) -> Option<Result<Vec<u8>, RpcError>> {
    send(c, *now_ns, &[payload.to_vec()]);
    for _ in 0..20 {
        settle(c, s, *now_ns);
        if c.is_done(CALLER) {
            assert_eq!(c.poll_ready(), Some(CALLER));
            return Some(c.result(CALLER, 0).map(<[u8]>::to_vec));
        }
        fire_timeout(c, now_ns);
    }
    None
}

/// Issue 29: a forged request (or a broken member's) with a far higher request number on
/// a slot made every genuine request on it look like an old duplicate, forever. Such a
/// jump cannot be genuine (request numbers grow by one per request of the session, and
/// only a credit's worth can be unseen by the server), so it is refused and counted, and
/// the slot goes on serving its client.
#[test]
fn a_forged_far_higher_request_number_does_not_stall_the_slot() {
    let mut c = client(Config {
        credits: 1,
        ..Config::default()
    });
    let (mut s, log) = server(Config::default());
    let mut now = 0;
    assert_eq!(
        call_until_done(&mut c, &mut s, &mut now, b"first"),
        Some(Ok(answer(b"first")))
    );
    let forged = Forge::new(CLIENT, SERVER).message(MessageKind::Request, 0, 1 << 40, b"jump");
    deliver(&mut s, now, CLIENT, &[forged]);
    deliver(&mut c, now, SERVER, &transmit(&mut s));
    for round in 0..3u8 {
        let payload = [b'a' + round; 4];
        assert_eq!(
            call_until_done(&mut c, &mut s, &mut now, &payload),
            Some(Ok(answer(&payload))),
            "genuine request {round} after the jump"
        );
    }
    assert!(!log.borrow().iter().any(|p| p == b"jump"), "the jump ran");
    assert_eq!(s.stats().request_number_jumps, 1);
}

/// A forged request ahead of the client on its slot but within what could be genuine
/// runs (authentication is what keeps forgeries out); the client's request it overtook
/// then fails as `Overtaken` (it may have run before the forgery), and the client's
/// numbering moves past the forged one, so later requests are served again.
#[test]
fn a_slot_overtaken_by_a_forged_request_serves_its_client_again() {
    let mut c = client(Config {
        credits: 1,
        ..Config::default()
    });
    let (mut s, log) = server(Config::default());
    let mut now = 0;
    assert_eq!(
        call_until_done(&mut c, &mut s, &mut now, b"first"),
        Some(Ok(answer(b"first")))
    );
    // Ten datagrams, each a little further ahead.
    for i in 1..=10u64 {
        let forged =
            Forge::new(CLIENT, SERVER).message(MessageKind::Request, 0, 1 + 100 * i, b"ahead");
        deliver(&mut s, now, CLIENT, &[forged]);
    }
    deliver(&mut c, now, SERVER, &transmit(&mut s));
    assert_eq!(log.borrow().len(), 11, "the forgeries in the window ran");
    let overtaken = call_until_done(&mut c, &mut s, &mut now, b"overtaken");
    assert_eq!(overtaken, Some(Err(RpcError::Overtaken)));
    for round in 0..3u8 {
        let payload = [b'a' + round; 4];
        assert_eq!(
            call_until_done(&mut c, &mut s, &mut now, &payload),
            Some(Ok(answer(&payload))),
            "genuine request {round} after the forgeries"
        );
    }
    assert_eq!(s.stats().overtaken_requests_answered, 1);
    assert_eq!(c.stats().calls_overtaken, 1);
}

/// Issue 29: every peer could open a reassembly on each of 256 slots, each buffering a
/// whole message (up to 1 MiB and 64 KiB) however little of it arrived. The bytes of
/// partial requests are bounded per peer and per engine; beyond, packets are refused and
/// counted, and silent partial requests make room once stale.
#[test]
fn partial_requests_are_bounded_per_peer_and_per_engine() {
    let (mut s, _log) = server(Config::default());
    let largest = MAX_MESSAGE_BYTES;
    let mut now = 0;
    let peer_max = 8 << 20;
    let engine_max = 64 << 20;
    // One peer, every slot.
    for slot in 0..=255u8 {
        let forged = Forge::new(OTHER, SERVER).first_packet(slot, 1, largest);
        s.handle_datagram(now, Some(OTHER), &mut forged.to_vec());
    }
    assert!(
        s.partial_request_bytes() <= peer_max,
        "one peer buffered too much"
    );
    assert!(s.partial_request_bytes() > peer_max - largest as usize);
    assert!(s.stats().partial_requests_refused >= 240);
    // Many peers.
    for node in 3..40u16 {
        let peer = EndpointId::new(node, 0);
        for slot in 0..=255u8 {
            let forged = Forge::new(peer, SERVER).first_packet(slot, 1, largest);
            s.handle_datagram(now, Some(peer), &mut forged.to_vec());
        }
    }
    assert!(
        s.partial_request_bytes() <= engine_max,
        "the engine buffered too much"
    );
    assert!(s.partial_request_bytes() > engine_max - largest as usize);
    assert_eq!(s.stats().partial_requests_evicted, 0, "none is stale yet");

    // A genuine split request now: refused at first, then served once the partial
    // requests are stale and evicted (its client retransmits meanwhile).
    let mut c = client(Config::default());
    let payload = pattern(500_000, 3);
    send(&mut c, now, std::slice::from_ref(&payload));
    let mut done = false;
    for _ in 0..5000 {
        settle(&mut c, &mut s, now);
        if c.is_done(CALLER) {
            done = true;
            break;
        }
        fire_timeout(&mut c, &mut now);
    }
    assert!(done, "the genuine request was never served");
    // Refused while the others were fresh, served once they were stale.
    assert!(now >= Config::default().rto_max_ns);
    assert_answered(&mut c, &[payload]);
    assert!(s.stats().partial_requests_evicted > 0);
    assert!(s.partial_request_bytes() <= engine_max);
}

// 3. Lost request.

#[test]
fn lost_request_is_retransmitted_with_backoff_and_runs_once() {
    let config = Config {
        rto_min_ns: 1_000_000,
        rto_max_ns: 100_000_000,
        ..Config::default()
    };
    let rto = config.rto_min_ns;
    let mut c = client(config);
    let (mut s, log) = server(Config::default());
    let payloads = vec![b"lost".to_vec()];
    let mut now = 0;
    send(&mut c, now, &payloads);
    let original = transmit(&mut c);
    assert_eq!(original.len(), 1); // Lost.

    // Two retransmissions, both lost too; note when each leaves.
    let mut sent = Vec::new();
    while sent.len() < 2 {
        fire_timeout(&mut c, &mut now);
        let datagrams = transmit(&mut c);
        if !datagrams.is_empty() {
            sent.push((now, datagrams));
        }
        assert!(now < 50 * rto, "no retransmission");
    }
    let (first_ns, second_ns) = (sent[0].0, sent[1].0);
    assert!(first_ns >= rto, "retransmitted before the timeout");
    assert!(
        first_ns <= rto + rto / 2,
        "retransmitted late: {first_ns} ns"
    );
    let (first_wait, second_wait) = (first_ns, second_ns - first_ns);
    assert!(
        second_wait >= 2 * rto && second_wait > first_wait,
        "no backoff: waited {first_wait} ns, then {second_wait} ns"
    );
    assert_eq!(c.stats().retransmissions, 2);
    for (_, datagrams) in &sent {
        assert_eq!(only_message(&datagrams[0]), only_message(&original[0]));
    }

    // The second retransmission arrives and runs.
    deliver(&mut s, now, CLIENT, &sent[1].1);
    assert_eq!(log.borrow().len(), 1);
    deliver(&mut c, now, SERVER, &transmit(&mut s));
    assert_answered(&mut c, &payloads);
    assert_eq!(c.outstanding(), 0);
    assert_eq!(c.next_timeout_ns(), None);

    // The copies thought lost arrive late: answered again, never run again. Both arrive
    // before the server's next transmission, so the saved response goes out once.
    deliver(&mut s, now, CLIENT, &original);
    deliver(&mut s, now, CLIENT, &sent[0].1);
    assert_eq!(log.borrow().len(), 1, "a late copy ran again");
    assert_eq!(s.stats().duplicate_requests_answered, 2);
    let answers = transmit(&mut s);
    assert_eq!(
        answers.len(),
        1,
        "one response per transmission, however many copies"
    );
    deliver(&mut c, now, SERVER, &answers);
    assert_eq!(c.stats().stale_responses, 1);
    assert_eq!(c.poll_ready(), None);
}

// 4. Lost response.

#[test]
fn lost_response_is_resent_from_the_saved_copy() {
    let mut c = client(Config::default());
    let (mut s, log) = server(Config::default());
    let payloads = vec![b"once".to_vec()];
    let mut now = 0;
    send(&mut c, now, &payloads);
    deliver(&mut s, now, CLIENT, &transmit(&mut c));
    let lost = transmit(&mut s);
    assert_eq!(lost.len(), 1);

    let retransmitted = next_retransmission(&mut c, &mut now);
    deliver(&mut s, now, CLIENT, &retransmitted);
    assert_eq!(log.borrow().len(), 1, "the retransmission ran again");
    assert_eq!(s.stats().duplicate_requests_answered, 1);
    let resent = transmit(&mut s);
    assert_eq!(
        resent, lost,
        "the resent response differs from the saved one"
    );
    deliver(&mut c, now, SERVER, &resent);
    assert_answered(&mut c, &payloads);
}

// 5. Multi-packet messages.

/// `datagrams` in the order given by `order` (indexes may repeat: duplicates).
fn reorder(datagrams: &[Vec<u8>], order: &[usize]) -> Vec<Vec<u8>> {
    order.iter().map(|&i| datagrams[i].clone()).collect()
}

#[test]
fn multi_packet_messages_arrive_intact_out_of_order_and_duplicated() {
    let mut c = client(small_datagrams());
    let (mut s, log) = server(small_datagrams());
    let payloads = vec![pattern(5000, 1)];
    send(&mut c, 0, &payloads);

    let requests = transmit(&mut c);
    assert_eq!(requests.len(), 5);
    for (i, d) in requests.iter().enumerate() {
        let m = only_message(d);
        assert_eq!((m.packet_index, m.packet_count), (i as u16, 5));
    }
    // Reversed, with duplicates; the last new packet is packet 0.
    let order = [4, 4, 3, 2, 2, 1, 1];
    deliver(&mut s, 0, CLIENT, &reorder(&requests, &order));
    assert!(
        log.borrow().is_empty(),
        "ran before the request was complete"
    );
    assert!(transmit(&mut s).is_empty());
    deliver(&mut s, 0, CLIENT, &requests[..1]);
    assert_eq!(
        *log.borrow(),
        payloads,
        "the request was reassembled wrongly"
    );
    assert_eq!(s.stats().duplicate_requests_ignored, 3);

    let responses = transmit(&mut s);
    assert_eq!(responses.len(), 5);
    let order = [2, 0, 2, 4, 0, 1];
    deliver(&mut c, 0, SERVER, &reorder(&responses, &order));
    assert_eq!(
        c.poll_ready(),
        None,
        "completed before the response was complete"
    );
    assert_eq!(
        c.stats().stale_responses,
        2,
        "duplicate packets are counted"
    );
    deliver(&mut c, 0, SERVER, &responses[3..4]);
    assert_answered(&mut c, &payloads);
    assert_eq!(s.stats().requests_executed, 1);
}

#[test]
fn one_mebibyte_messages_with_the_default_datagram_size() {
    let mut c = client(Config::default());
    let (mut s, log) = server(Config::default());
    let payloads = vec![pattern(1 << 20, 2)];
    send(&mut c, 0, &payloads);

    let requests = transmit(&mut c);
    let count = requests.len();
    assert_eq!(
        count,
        (1usize << 20).div_ceil(small_fragment(&Config::default()))
    );
    // Packets in a stride permutation, and every third one twice.
    let order: Vec<usize> = (0..count)
        .map(|i| (i * 7) % count)
        .flat_map(|i| if i % 3 == 0 { vec![i, i] } else { vec![i] })
        .collect();
    assert_eq!(order.iter().collect::<BTreeSet<_>>().len(), count);
    deliver(&mut s, 0, CLIENT, &reorder(&requests, &order));
    assert_eq!(log.borrow().len(), 1);
    assert!(
        log.borrow()[0] == payloads[0],
        "the request was reassembled wrongly"
    );

    let responses = transmit(&mut s);
    assert_eq!(responses.len(), count);
    let reversed: Vec<usize> = (0..count).rev().collect();
    deliver(&mut c, 0, SERVER, &reorder(&responses, &reversed));
    assert_answered(&mut c, &payloads);
}

/// Payload bytes per packet of a split message under `config`.
fn small_fragment(config: &Config) -> usize {
    config.datagram_bytes - ferrotx_wire::PACKET_HEADER_BYTES - ferrotx_wire::MESSAGE_OVERHEAD_BYTES
}

#[test]
fn lost_packets_of_split_messages_are_filled_in_by_retransmission() {
    let mut c = client(small_datagrams());
    let (mut s, log) = server(small_datagrams());
    let payloads = vec![pattern(5000, 3)];
    let mut now = 0;
    send(&mut c, now, &payloads);

    // Packets 1 and 3 of the request are lost: nothing runs.
    let requests = transmit(&mut c);
    assert_eq!(requests.len(), 5);
    deliver(&mut s, now, CLIENT, &reorder(&requests, &[0, 2, 4]));
    assert!(log.borrow().is_empty());
    assert!(transmit(&mut s).is_empty());

    // The whole request is sent again, starting at another packet (so a lost tail is
    // not lost again); the missing packets complete it.
    let again = next_retransmission(&mut c, &mut now);
    assert_ne!(
        again, requests,
        "a retransmission repeated the same packet order"
    );
    let (mut sorted_again, mut sorted_requests) = (again.clone(), requests.clone());
    sorted_again.sort();
    sorted_requests.sort();
    assert_eq!(sorted_again, sorted_requests);
    deliver(&mut s, now, CLIENT, &again);
    assert_eq!(*log.borrow(), payloads);
    // Packets 0 and 2 were duplicates of packets being reassembled, and packet 4 arrived
    // after packet 3 completed the request.
    assert_eq!(s.stats().duplicate_requests_ignored, 3);
    assert_eq!(s.stats().duplicate_requests_answered, 0);

    // Packets 0 and 4 of the response are lost: the client keeps waiting.
    let responses = transmit(&mut s);
    assert_eq!(responses.len(), 5);
    deliver(&mut c, now, SERVER, &reorder(&responses, &[1, 2, 3]));
    assert_eq!(c.poll_ready(), None);

    // The client sends the request again; the server answers from the saved response.
    let again = next_retransmission(&mut c, &mut now);
    deliver(&mut s, now, CLIENT, &again);
    assert_eq!(
        log.borrow().len(),
        1,
        "a retransmission ran the handler again"
    );
    let resent = transmit(&mut s);
    deliver(&mut c, now, SERVER, &resent);
    assert_answered(&mut c, &payloads);
    assert_eq!(s.stats().requests_executed, 1);
}

#[test]
fn a_retransmitted_split_request_is_answered_once_not_once_per_packet() {
    let mut c = client(small_datagrams());
    let (mut s, _log) = server(small_datagrams());
    let payloads = vec![pattern(5000, 4)];
    let mut now = 0;
    send(&mut c, now, &payloads);
    deliver(&mut s, now, CLIENT, &transmit(&mut c));
    let lost = transmit(&mut s);
    assert_eq!(lost.len(), 5);

    let again = next_retransmission(&mut c, &mut now);
    assert_eq!(again.len(), 5);
    deliver(&mut s, now, CLIENT, &again);
    // Each packet of the retransmission is a duplicate, but answering each with the whole
    // response would send packets² datagrams: one copy of the response is enough.
    let resent = transmit(&mut s);
    assert_eq!(
        resent.len(),
        lost.len(),
        "the response was sent once per request packet"
    );
    deliver(&mut c, now, SERVER, &resent);
    assert_answered(&mut c, &payloads);
}

#[test]
fn an_interrupted_write_resumes_at_the_right_packet_after_its_message_is_answered() {
    let mut c = client(small_datagrams());
    let (mut s, log) = server(small_datagrams());
    let payloads = vec![pattern(5000, 6), pattern(5000, 7)];
    let mut now = 0;
    send(&mut c, now, &payloads);
    let requests = transmit(&mut c);
    assert_eq!(requests.len(), 10);
    // The first request arrives; its response is delayed. The second request is lost.
    deliver(&mut s, now, CLIENT, &requests[..5]);
    let delayed = transmit(&mut s);
    assert_eq!(delayed.len(), 5);

    // Both are retransmitted; the batch fills after two packets of the first.
    for _ in 0..1000 {
        if c.stats().retransmissions > 0 {
            break;
        }
        fire_timeout(&mut c, &mut now);
    }
    assert_eq!(c.stats().retransmissions, 2);
    let mut tx = TxBatch::new(2, c.config().datagram_bytes);
    c.poll_transmit(&mut tx);
    assert_eq!(tx.len(), 2);
    let first: Vec<Seen> = tx.iter().map(|(_, d)| only_message(d)).collect();
    assert!(first.iter().all(|m| m.slot == 0));

    // The delayed response arrives before the rest is written: the first request needs
    // no more packets, the second needs all of them.
    deliver(&mut c, now, SERVER, &delayed);
    let mut rest = Vec::new();
    loop {
        tx.clear();
        c.poll_transmit(&mut tx);
        if tx.is_empty() {
            break;
        }
        rest.extend(tx.iter().map(|(_, d)| d.to_vec()));
    }
    let second: BTreeSet<u16> = rest
        .iter()
        .map(|d| only_message(d))
        .filter(|m| m.slot == 1)
        .map(|m| m.packet_index)
        .collect();
    assert_eq!(
        second,
        (0..5).collect(),
        "packets of the second request were skipped"
    );
    deliver(&mut s, now, CLIENT, &rest);
    assert_eq!(log.borrow().len(), 2);
    deliver(&mut c, now, SERVER, &transmit(&mut s));
    assert_answered(&mut c, &payloads);
}

#[test]
fn a_split_response_still_arriving_is_not_mistaken_for_a_lost_request() {
    let config = Config {
        rto_min_ns: 1_000_000,
        ..small_datagrams()
    };
    let rto = config.rto_min_ns;
    let mut c = client(config);
    let (mut s, _log) = server(small_datagrams());
    let payloads = vec![pattern(5000, 8)];
    let mut now = 0;
    send(&mut c, now, &payloads);
    deliver(&mut s, now, CLIENT, &transmit(&mut c));
    let responses = transmit(&mut s);
    assert_eq!(responses.len(), 5);
    // A packet every 0.8 timeouts: the whole response takes four timeouts to arrive.
    for (i, packet) in responses.iter().enumerate() {
        let arrival = (i as u64 + 1) * rto * 4 / 5;
        while c.next_timeout_ns().is_some_and(|t| t <= arrival) {
            fire_timeout(&mut c, &mut now);
        }
        now = arrival;
        c.handle_datagram(now, Some(SERVER), &mut packet.to_vec());
        assert!(
            transmit(&mut c).is_empty(),
            "retransmitted while the response flowed"
        );
    }
    assert_eq!(c.stats().retransmissions, 0);
    assert_answered(&mut c, &payloads);
}

// 6. Credits.

#[test]
fn credits_bound_the_requests_outstanding_on_the_wire() {
    const CREDITS: usize = 2;
    let mut c = client(Config {
        credits: CREDITS as u8,
        ..Config::default()
    });
    let (mut s, log) = server(Config::default());
    let payloads: Vec<Vec<u8>> = (0..10).map(|i| pattern(16, i)).collect();
    send(&mut c, 0, &payloads);

    // Requests sent and not yet answered, by (slot, request number).
    let mut on_wire = BTreeSet::new();
    let mut most_on_wire = 0;
    let mut requests_sent = 0;
    let mut now = 0;
    // Sends what the client has to the server, checking the bound.
    let mut pump = |c: &mut Engine, s: &mut Engine, on_wire: &mut BTreeSet<(u8, u64)>, now: u64| {
        for d in transmit(c) {
            for m in messages(&d) {
                assert_eq!(m.kind, MessageKind::Request);
                assert!(usize::from(m.slot) < CREDITS);
                assert!(on_wire.insert((m.slot, m.request_number)), "resent");
                requests_sent += 1;
            }
            assert!(
                on_wire.len() <= CREDITS,
                "{} requests on the wire",
                on_wire.len()
            );
            most_on_wire = most_on_wire.max(on_wire.len());
            s.handle_datagram(now, Some(CLIENT), &mut d.to_vec());
        }
    };
    pump(&mut c, &mut s, &mut on_wire, now);
    loop {
        now += 1000;
        let responses: Vec<Vec<u8>> = transmit(&mut s).iter().flat_map(|d| split(d)).collect();
        if responses.is_empty() {
            break;
        }
        // One response at a time, so that each frees one credit.
        for r in responses {
            let m = only_message(&r);
            assert!(on_wire.remove(&(m.slot, m.request_number)));
            c.handle_datagram(now, Some(SERVER), &mut r.to_vec());
            pump(&mut c, &mut s, &mut on_wire, now);
        }
    }
    assert_eq!(requests_sent, 10);
    assert_eq!(most_on_wire, CREDITS);
    assert_eq!(
        *log.borrow(),
        payloads,
        "requests ran out of submission order"
    );
    assert_answered(&mut c, &payloads);
    assert_eq!(c.stats().retransmissions, 0);
}

// 7. Coalescing.

#[test]
fn small_requests_to_one_peer_share_a_datagram_unless_coalescing_is_off() {
    for coalesce in [true, false] {
        let config = Config {
            coalesce,
            ..Config::default()
        };
        let mut c = client(config.clone());
        let (mut s, _log) = server(config);
        let payloads: Vec<Vec<u8>> = (0..50).map(|i| pattern(24, i)).collect();
        send(&mut c, 0, &payloads);
        let datagrams = if coalesce { 1 } else { 50 };

        let requests = transmit(&mut c);
        assert_eq!(requests.len(), datagrams, "coalesce: {coalesce}");
        let count: usize = requests.iter().map(|d| messages(d).len()).sum();
        assert_eq!(count, 50);
        assert_eq!(c.stats().datagrams_sent, datagrams as u64);
        assert_eq!(c.stats().messages_sent, 50);

        deliver(&mut s, 0, CLIENT, &requests);
        let responses = transmit(&mut s);
        assert_eq!(responses.len(), datagrams, "coalesce: {coalesce}");
        deliver(&mut c, 0, SERVER, &responses);
        assert_answered(&mut c, &payloads);
    }
}

// 8. Incarnations.

#[test]
fn a_restarted_client_is_served_afresh_and_its_old_life_is_ignored() {
    let (mut s, log) = server(Config::default());
    let mut old = client(Config {
        incarnation: 1,
        ..Config::default()
    });
    let first = vec![b"first life".to_vec()];
    send(&mut old, 0, &first);
    let old_requests = transmit(&mut old);
    deliver(&mut s, 0, CLIENT, &old_requests);
    deliver(&mut old, 0, SERVER, &transmit(&mut s));
    assert_answered(&mut old, &first);
    drop(old);

    // The process restarts; its request numbers begin again.
    let mut new = client(Config {
        incarnation: 2,
        ..Config::default()
    });
    let second = vec![b"second life".to_vec()];
    send(&mut new, 10, &second);
    let new_requests = transmit(&mut new);
    let (o, n) = (
        only_message(&old_requests[0]),
        only_message(&new_requests[0]),
    );
    assert_eq!(
        (o.slot, o.request_number),
        (n.slot, n.request_number),
        "the test needs the new life to reuse the old request number"
    );
    deliver(&mut s, 10, CLIENT, &new_requests);
    assert_eq!(s.stats().peer_restarts, 1);
    assert_eq!(*log.borrow(), vec![first[0].clone(), second[0].clone()]);
    deliver(&mut new, 10, SERVER, &transmit(&mut s));
    assert_answered(&mut new, &second);

    // A datagram of the first life, arriving late.
    deliver(&mut s, 20, CLIENT, &old_requests);
    assert_eq!(s.stats().stale_incarnation, 1);
    assert_eq!(s.stats().duplicate_requests_answered, 0);
    assert_eq!(log.borrow().len(), 2);
    assert!(transmit(&mut s).is_empty());
}

/// A request in flight when its server restarts may have run in the server's earlier life;
/// the new life must not run it again (at-most-once across restarts), and the client must
/// learn of the restart rather than wait forever.
#[test]
fn requests_to_a_restarted_server_fail_as_target_restarted() {
    let mut c = client(Config::default());
    let (mut old, old_log) = server(Config::default());
    let payloads = vec![b"before".to_vec()];
    let mut now = 0;
    send(&mut c, now, &payloads);
    settle(&mut c, &mut old, now);
    assert_answered(&mut c, &payloads);

    // The server restarts with no memory of the session while a request is in flight.
    let payloads = vec![b"across".to_vec()];
    send(&mut c, now, &payloads);
    deliver(&mut old, now, CLIENT, &transmit(&mut c));
    let lost_with_the_process = transmit(&mut old);
    assert_eq!(lost_with_the_process.len(), 1);
    drop(old);
    let (mut new, new_log) = server(Config {
        incarnation: 2,
        ..Config::default()
    });

    let again = next_retransmission(&mut c, &mut now);
    deliver(&mut new, now, CLIENT, &again);
    assert!(
        new_log.borrow().is_empty(),
        "the new life ran a request of the old one"
    );
    deliver(&mut c, now, SERVER, &transmit(&mut new));
    assert_eq!(c.poll_ready(), Some(CALLER));
    assert_eq!(c.result(CALLER, 0), Err(RpcError::TargetRestarted));
    assert_eq!(old_log.borrow().len(), 2);
    // Further copies of it get the same answer, and still do not run.
    deliver(&mut new, now, CLIENT, &again);
    assert!(new_log.borrow().is_empty());
    // The server's new incarnation reset nothing it should not have: the next request
    // goes through too.
    let payloads = vec![b"after".to_vec()];
    send(&mut c, now, &payloads);
    settle(&mut c, &mut new, now);
    assert_answered(&mut c, &payloads);
    assert_eq!(*new_log.borrow(), payloads);
    assert_eq!(c.stats().peer_restarts, 1);
}

/// A client numbers its requests to a server's new life afresh; a late request it sent to
/// the earlier life, with a higher number, must not take a slot of the new life (it is
/// answered with the new incarnation and nothing else), or the fresh numbers would look
/// old there.
#[test]
fn a_late_request_to_a_servers_earlier_life_does_not_block_the_new_numbering() {
    let mut c = client(Config {
        credits: 1,
        ..Config::default()
    });
    let (mut old, _old_log) = server(Config::default());
    let mut now = 0;
    let mut late = Vec::new();
    for i in 0..5u8 {
        send(&mut c, now, &[vec![i]]);
        late = transmit(&mut c);
        deliver(&mut old, now, CLIENT, &late);
        deliver(&mut c, now, SERVER, &transmit(&mut old));
        assert_answered(&mut c, &[vec![i]]);
    }
    assert_eq!(only_message(&late[0]).request_number, 5);
    drop(old);
    let (mut new, new_log) = server(Config {
        incarnation: 2,
        ..Config::default()
    });
    deliver(&mut new, now, CLIENT, &late);
    deliver(&mut c, now, SERVER, &transmit(&mut new));
    assert_eq!(c.stats().peer_restarts, 1);
    assert!(new_log.borrow().is_empty());
    for round in 0..3u8 {
        let payload = [b'a' + round; 3];
        send(&mut c, now, &[payload.to_vec()]);
        let requests = transmit(&mut c);
        assert_eq!(
            only_message(&requests[0]).request_number,
            u64::from(round) + 1,
            "numbered afresh for the new life"
        );
        deliver(&mut new, now, CLIENT, &requests);
        // The late request arrives again, between the new ones.
        deliver(&mut new, now, CLIENT, &late);
        deliver(&mut c, now, SERVER, &transmit(&mut new));
        assert_answered(&mut c, &[payload.to_vec()]);
        now += 1;
    }
    assert_eq!(new_log.borrow().len(), 3);
}

/// A response that the server sent to the client's previous life, delayed in the
/// network until the restarted client waits on the same slot and request number, must
/// not be taken as the answer to the new request: it carries the old life's incarnation
/// as its target incarnation.
#[test]
fn a_response_to_a_previous_life_is_not_taken_for_the_new_one() {
    let (mut s, _log) = server(Config::default());
    let mut old = client(Config::default());
    send(&mut old, 0, &[b"first life".to_vec()]);
    deliver(&mut s, 0, CLIENT, &transmit(&mut old));
    let delayed = transmit(&mut s);
    drop(old);

    let mut new = client(Config {
        incarnation: 2,
        ..Config::default()
    });
    let payloads = vec![b"second life".to_vec()];
    send(&mut new, 10, &payloads);
    let _in_flight = transmit(&mut new);
    deliver(&mut new, 10, SERVER, &delayed);
    assert_eq!(new.poll_ready(), None, "took the old life's response");
    assert_eq!(new.stats().stale_responses, 1);
}

// 9. Datagrams dropped before their messages are looked at.

#[test]
fn datagrams_of_another_configuration_target_or_source_are_dropped() {
    let (mut s, log) = server(Config::default());
    let good = Forge::new(CLIENT, SERVER);
    let request = |forge: Forge| forge.message(MessageKind::Request, 0, 1, b"x");
    // The bad datagrams claim a later incarnation: if the engine looked at it before
    // rejecting them, the good datagram would afterwards be dropped as stale.
    let later = Forge {
        incarnation: 5,
        ..good
    };

    s.handle_datagram(
        0,
        Some(CLIENT),
        &mut request(Forge {
            view: ViewId(2),
            ..later
        }),
    );
    assert_eq!(s.stats().wrong_configuration, 1);
    s.handle_datagram(
        0,
        Some(CLIENT),
        &mut request(Forge {
            target: OTHER,
            ..later
        }),
    );
    assert_eq!(s.stats().misdirected, 1);
    s.handle_datagram(0, Some(OTHER), &mut request(later));
    s.handle_datagram(0, None, &mut request(later));
    assert_eq!(s.stats().forged_source, 2);
    let mut garbage = request(later);
    garbage[0] ^= 0xff;
    s.handle_datagram(0, Some(CLIENT), &mut garbage.to_vec());
    assert_eq!(s.stats().decode_errors_total(), 1);

    assert_eq!(s.stats().datagrams_dropped(), 5);
    assert!(log.borrow().is_empty(), "a dropped datagram ran a handler");
    assert_eq!(s.stats().requests_executed, 0);
    assert!(!s.wants_transmit());

    // The same request, correctly addressed, runs: the drops were for the stated reason.
    s.handle_datagram(0, Some(CLIENT), &mut request(good));
    assert_eq!(s.stats().stale_incarnation, 0);
    assert_eq!(*log.borrow(), vec![b"x".to_vec()]);
    assert_eq!(transmit(&mut s).len(), 1);
    assert_eq!(s.stats().datagrams_dropped(), 5);
}

// 10. Errors.

#[test]
fn unknown_request_type_and_handler_errors_reach_the_caller() {
    let mut c = client(Config::default());
    let (mut s, _log) = server(Config::default());
    s.register(
        FAIL,
        Box::new(|_, response| {
            // A partial response must not leak to the caller with the error.
            response.extend_from_slice(b"partial");
            Err(HandlerError("no such key"))
        }),
    );
    c.batch_push(CALLER, SERVER, ECHO)
        .extend_from_slice(b"fine");
    c.batch_push(CALLER, SERVER, UNKNOWN)
        .extend_from_slice(b"what");
    c.batch_push(CALLER, SERVER, FAIL).extend_from_slice(b"key");
    assert!(!c.submit(CALLER, 0));
    settle(&mut c, &mut s, 0);
    assert_eq!(c.poll_ready(), Some(CALLER));
    assert_eq!(c.result(CALLER, 0), Ok(answer(b"fine").as_slice()));
    assert_eq!(c.result(CALLER, 1), Err(RpcError::UnknownRequestType));
    assert_eq!(c.result(CALLER, 2), Err(RpcError::Handler));
    assert_eq!(c.handler_error_text(CALLER, 2), b"no such key");
}

#[test]
fn oversized_requests_fail_without_sending_anything() {
    let mut c = client(Config::default());
    let limit = MAX_MESSAGE_BYTES as usize;
    c.batch_push(CALLER, SERVER, ECHO).resize(limit + 1, 0);
    assert!(
        c.submit(CALLER, 0),
        "a batch that all failed is done at once"
    );
    assert!(c.is_done(CALLER));
    assert_eq!(c.result(CALLER, 0), Err(RpcError::TooLarge));
    assert!(!c.wants_transmit());
    assert!(transmit(&mut c).is_empty());
    assert_eq!(c.outstanding(), 0);
    assert_eq!(c.next_timeout_ns(), None);

    // Next to requests that are sent, including one of exactly the limit.
    let (mut s, log) = server(Config::default());
    let at_limit = pattern(limit, 5);
    c.batch_push(CALLER, SERVER, ECHO).resize(limit + 1, 0);
    c.batch_push(CALLER, SERVER, ECHO)
        .extend_from_slice(&at_limit);
    assert!(!c.submit(CALLER, 0));
    settle(&mut c, &mut s, 0);
    assert_eq!(log.borrow().len(), 1);
    assert_eq!(c.poll_ready(), Some(CALLER));
    assert_eq!(c.result(CALLER, 0), Err(RpcError::TooLarge));
    assert!(c.result(CALLER, 1) == Ok(answer(&at_limit).as_slice()));
}

/// A handler that writes a response over the message limit (a page of values ending on
/// a large one) must not take the server down: the caller gets a handler error, counted.
#[test]
fn a_response_over_the_message_limit_is_refused_not_a_panic() {
    let mut c = client(Config::default());
    let (mut s, _log) = server(Config::default());
    const BIG: u8 = 10;
    s.register(
        BIG,
        Box::new(|_, response| {
            response.resize(MAX_MESSAGE_BYTES as usize + 1, 7);
            Ok(())
        }),
    );
    c.batch_push(CALLER, SERVER, BIG).extend_from_slice(b"page");
    c.batch_push(CALLER, SERVER, ECHO)
        .extend_from_slice(b"fine");
    assert!(!c.submit(CALLER, 0));
    settle(&mut c, &mut s, 0);
    assert_eq!(c.poll_ready(), Some(CALLER));
    assert_eq!(c.result(CALLER, 0), Err(RpcError::Handler));
    assert_eq!(
        c.handler_error_text(CALLER, 0),
        b"response over the message limit"
    );
    assert_eq!(c.result(CALLER, 1), Ok(answer(b"fine").as_slice()));
    assert_eq!(s.stats().responses_over_limit, 1);
}

// 11. Silent peers.

#[test]
fn a_silent_peer_is_suspected_once_and_recovers_when_it_answers() {
    let config = Config {
        rto_min_ns: 1_000_000,
        rto_max_ns: 4_000_000,
        suspect_after_ns: 20_000_000,
        ..Config::default()
    };
    let suspect_after = config.suspect_after_ns;
    let mut c = client(config);
    let (mut s, log) = server(Config::default());
    let payloads = vec![b"anyone there".to_vec()];
    let mut now = 0;
    send(&mut c, now, &payloads);
    let mut last = transmit(&mut c);
    let mut suspects = Vec::new();
    let mut transmissions = 1;
    while now < 5 * suspect_after {
        fire_timeout(&mut c, &mut now);
        let datagrams = transmit(&mut c);
        if !datagrams.is_empty() {
            transmissions += 1;
            last = datagrams;
        }
        while let Some(event) = c.poll_event() {
            suspects.push((now, event));
        }
        assert_eq!(c.poll_ready(), None, "the engine gave up on a call");
    }
    assert_eq!(suspects.len(), 1, "{suspects:?}");
    let (when, event) = suspects[0];
    assert_eq!(event, Event::Suspect(SERVER));
    assert!(when >= suspect_after && when <= suspect_after + suspect_after / 10);
    assert_eq!(c.stats().suspects, 1);
    // Backoff is capped at rto_max, so retransmissions go on at least that often.
    assert!(transmissions > (5 * suspect_after - suspect_after) / 4_000_000);
    assert_eq!(c.outstanding(), 1);
    assert!(!c.is_done(CALLER));

    // The peer wakes up.
    deliver(&mut s, now, CLIENT, &last);
    assert_eq!(log.borrow().len(), 1);
    deliver(&mut c, now, SERVER, &transmit(&mut s));
    assert_eq!(c.poll_event(), Some(Event::Recovered(SERVER)));
    assert_eq!(c.poll_event(), None);
    assert_answered(&mut c, &payloads);
    assert_eq!(c.next_timeout_ns(), None);
}

// 12. Stale and forged responses.

#[test]
fn responses_matching_no_waiting_request_are_dropped() {
    let mut c = client(Config::default());
    let (mut s, _log) = server(Config::default());
    let payloads = vec![b"real".to_vec()];
    send(&mut c, 0, &payloads);
    let requests = transmit(&mut c);
    let waiting = only_message(&requests[0]);
    assert_eq!((waiting.slot, waiting.request_number), (0, 1));

    let forge = Forge::new(SERVER, CLIENT);
    let forged = [
        (0, 2),   // the waiting slot, another request number
        (0, 0),   // an older request number
        (1, 1),   // a free slot
        (200, 1), // a slot beyond the credits
    ];
    for (slot, request_number) in forged {
        let d = forge.message(MessageKind::Response, slot, request_number, b"forged");
        c.handle_datagram(0, Some(SERVER), &mut d.to_vec());
    }
    assert_eq!(c.stats().stale_responses, forged.len() as u64);
    assert_eq!(c.stats().calls_completed, 0);
    assert_eq!(c.poll_ready(), None);
    assert!(!c.is_done(CALLER));
    assert_eq!(c.outstanding(), 1);

    deliver(&mut s, 0, CLIENT, &requests);
    deliver(&mut c, 0, SERVER, &transmit(&mut s));
    assert_answered(&mut c, &payloads);

    // Once answered, the slot is free: the same slot and number are stale now.
    let d = forge.message(MessageKind::Response, 0, 1, b"forged");
    c.handle_datagram(0, Some(SERVER), &mut d.to_vec());
    assert_eq!(c.stats().stale_responses, forged.len() as u64 + 1);
    assert_eq!(c.result(CALLER, 0), Ok(answer(b"real").as_slice()));
}

// 13. Random faults.

/// Endpoints of the two sides of the property test; each is client and server.
const SIDES: [EndpointId; 2] = [EndpointId::new(0, 0), EndpointId::new(1, 0)];
/// Batches each side issues in one run.
const BATCHES_PER_SIDE: u64 = 8;

/// What the network or the clock does next.
#[derive(Clone, Debug)]
enum Step {
    /// One `poll_transmit` of a side (a batch of at most 4 datagrams) onto the network.
    Transmit(usize),
    /// Delivers the `pick`-th datagram in flight (modulo their number); `keep` leaves a
    /// copy in flight, to be delivered again later.
    Deliver { pick: usize, keep: bool },
    /// Loses the `pick`-th datagram in flight.
    Drop { pick: usize },
    /// Time passes; each side's timeout runs if due.
    Advance { ns: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..2usize).prop_map(Step::Transmit),
        5 => (any::<usize>(), proptest::bool::weighted(0.2))
            .prop_map(|(pick, keep)| Step::Deliver { pick, keep }),
        1 => any::<usize>().prop_map(|pick| Step::Drop { pick }),
        2 => (0..600_000u64).prop_map(|ns| Step::Advance { ns }),
    ]
}

/// A batch in flight: request ids and payloads.
type Batch = Vec<(u64, Vec<u8>)>;

/// One side of the property test.
struct Side {
    engine: Engine,
    /// Executions by request id.
    executed: Rc<RefCell<BTreeMap<u64, u32>>>,
    /// The batch each caller has in flight: request ids and payloads.
    batches: Vec<Option<Batch>>,
    batches_issued: u64,
}

struct World {
    sides: [Side; 2],
    /// Datagrams in flight, with the index of the side they are for.
    network: Vec<(usize, Vec<u8>)>,
    now_ns: u64,
    next_id: u64,
    /// Request payload lengths, used in turn.
    sizes: Vec<usize>,
    completed: BTreeSet<u64>,
    tx: TxBatch,
}

impl World {
    fn new(config: &Config, sizes: Vec<usize>) -> Self {
        let side = |index: usize| {
            let mut engine = Engine::new(SIDES[index], config.clone());
            let executed: Rc<RefCell<BTreeMap<u64, u32>>> = Rc::default();
            let log = executed.clone();
            engine.register(
                ECHO,
                Box::new(move |request, response| {
                    let id = u64::from_le_bytes(request.payload[..8].try_into().unwrap());
                    *log.borrow_mut().entry(id).or_default() += 1;
                    response.extend_from_slice(&answer(request.payload));
                    Ok(())
                }),
            );
            Side {
                engine,
                executed,
                batches: (0..config.callers).map(|_| None).collect(),
                batches_issued: 0,
            }
        };
        Self {
            sides: [side(0), side(1)],
            network: Vec::new(),
            now_ns: 0,
            next_id: 0,
            sizes,
            completed: BTreeSet::new(),
            // A small batch, so that writes of split messages are interrupted and resumed
            // with other events in between.
            tx: TxBatch::new(4, config.datagram_bytes),
        }
    }

    /// Gives every idle caller a new batch, while the budget lasts.
    fn start_batches(&mut self) {
        for index in 0..2 {
            let target = SIDES[1 - index];
            let side = &mut self.sides[index];
            for caller in 0..side.batches.len() {
                if side.batches[caller].is_some() || side.batches_issued == BATCHES_PER_SIDE {
                    continue;
                }
                side.batches_issued += 1;
                let len = 1 + (self.next_id % 3) as usize;
                let mut batch = Vec::new();
                for _ in 0..len {
                    let id = self.next_id;
                    self.next_id += 1;
                    let mut payload = id.to_le_bytes().to_vec();
                    let size = self.sizes[id as usize % self.sizes.len()];
                    payload.extend_from_slice(&pattern(size, id));
                    let caller = CallerId(caller as u16);
                    side.engine
                        .batch_push(caller, target, ECHO)
                        .extend_from_slice(&payload);
                    batch.push((id, payload));
                }
                assert!(!side.engine.submit(CallerId(caller as u16), self.now_ns));
                side.batches[caller] = Some(batch);
            }
        }
    }

    /// Checks the responses of every completed batch.
    fn collect(&mut self) -> Result<(), TestCaseError> {
        for side in &mut self.sides {
            while side.engine.poll_event().is_some() {}
            while let Some(caller) = side.engine.poll_ready() {
                let batch = side.batches[usize::from(caller.0)]
                    .take()
                    .expect("a caller without a batch was reported ready");
                prop_assert_eq!(side.engine.batch_len(caller), batch.len());
                for (i, (id, payload)) in batch.iter().enumerate() {
                    let response = side.engine.result(caller, i);
                    prop_assert!(
                        response == Ok(answer(payload).as_slice()),
                        "request {} got a wrong response",
                        id
                    );
                    prop_assert!(self.completed.insert(*id), "request {} completed twice", id);
                }
            }
        }
        Ok(())
    }

    fn transmit(&mut self, index: usize) {
        self.tx.clear();
        self.sides[index].engine.poll_transmit(&mut self.tx);
        for (target, datagram) in self.tx.iter() {
            assert_eq!(target, SIDES[1 - index]);
            self.network.push((1 - index, datagram.to_vec()));
        }
    }

    fn deliver(&mut self, position: usize, keep: bool) {
        let (index, datagram) = if keep {
            self.network[position].clone()
        } else {
            self.network.remove(position)
        };
        self.sides[index].engine.handle_datagram(
            self.now_ns,
            Some(SIDES[1 - index]),
            &mut datagram.to_vec(),
        );
    }

    fn advance(&mut self, ns: u64) {
        self.now_ns += ns;
        for side in &mut self.sides {
            if side
                .engine
                .next_timeout_ns()
                .is_some_and(|t| self.now_ns >= t)
            {
                side.engine.handle_timeout(self.now_ns);
            }
        }
    }

    fn busy(&self) -> bool {
        self.sides
            .iter()
            .any(|s| s.batches_issued < BATCHES_PER_SIDE || s.batches.iter().any(Option::is_some))
    }

    fn run(&mut self, steps: &[Step]) -> Result<(), TestCaseError> {
        self.start_batches();
        for step in steps {
            match *step {
                Step::Transmit(index) => self.transmit(index),
                Step::Deliver { pick, keep } if !self.network.is_empty() => {
                    self.deliver(pick % self.network.len(), keep)
                }
                Step::Drop { pick } if !self.network.is_empty() => {
                    let position = pick % self.network.len();
                    self.network.remove(position);
                }
                Step::Advance { ns } => self.advance(ns),
                Step::Deliver { .. } | Step::Drop { .. } => {}
            }
            self.collect()?;
            self.start_batches();
        }
        // The faults stop: everything in flight is delivered in order, and time passes,
        // until every batch has completed.
        let mut rounds = 0;
        while self.busy() {
            rounds += 1;
            prop_assert!(
                rounds < 10_000,
                "calls did not complete once faults stopped"
            );
            for index in 0..2 {
                loop {
                    self.transmit(index);
                    if self.tx.is_empty() {
                        break;
                    }
                }
            }
            while !self.network.is_empty() {
                self.deliver(0, false);
            }
            self.collect()?;
            self.start_batches();
            self.advance(250_000);
        }
        for side in &self.sides {
            prop_assert_eq!(side.engine.outstanding(), 0);
            prop_assert_eq!(side.engine.next_timeout_ns(), None);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_call_completes_once_under_drops_duplicates_and_reordering(
        credits in 1..4u8,
        coalesce in any::<bool>(),
        sizes in proptest::collection::vec(
            prop_oneof![0..64usize, 0..4000usize],
            1..8,
        ),
        steps in proptest::collection::vec(step(), 0..400),
    ) {
        let config = Config {
            callers: 2,
            max_batch: 3,
            credits,
            coalesce,
            datagram_bytes: 1200,
            rto_min_ns: 200_000,
            rto_max_ns: 2_000_000,
            suspect_after_ns: 10_000_000,
            ..Config::default()
        };
        let mut world = World::new(&config, sizes);
        world.run(&steps)?;
        prop_assert_eq!(world.completed.len() as u64, world.next_id);
        for (index, side) in world.sides.iter().enumerate() {
            // Requests are made by the other side; each ran exactly once, here.
            for (&id, &runs) in side.executed.borrow().iter() {
                prop_assert_eq!(runs, 1, "request {} ran {} times on side {}", id, runs, index);
            }
        }
        let executed: usize = world.sides.iter().map(|s| s.executed.borrow().len()).sum();
        prop_assert_eq!(executed as u64, world.next_id);
    }
}

/// Time from `now_ns` until a lost request of `c`, just sent, is sent again, and what
/// was sent then.
fn wait_until_retransmitted(c: &mut Engine, now_ns: &mut u64) -> (u64, Vec<Vec<u8>>) {
    let sent_ns = *now_ns;
    let again = next_retransmission(c, now_ns);
    assert_eq!(again.len(), 1);
    (*now_ns - sent_ns, again)
}

/// A timeout slows the whole session, not just the request that timed out: a new request
/// waits longer too, until one sent after the timeout is answered at its first try.
#[test]
fn the_session_backs_off_until_a_request_is_answered_in_time() {
    let config = Config {
        rto_min_ns: 1_000_000,
        rto_max_ns: 100_000_000,
        ..Config::default()
    };
    let rto = config.rto_min_ns;
    let mut c = client(config);
    let (mut s, _log) = server(Config::default());
    let mut now = 0;

    // A: lost once, then answered.
    send(&mut c, now, &[b"a".to_vec()]);
    let _lost = transmit(&mut c);
    let (first_wait, again) = wait_until_retransmitted(&mut c, &mut now);
    assert!(first_wait < 2 * rto, "{first_wait}");
    deliver(&mut s, now, CLIENT, &again);
    settle(&mut c, &mut s, now);
    assert_eq!(c.poll_ready(), Some(CALLER));

    // B, a new request, lost: it waits twice as long, though it was never retransmitted.
    send(&mut c, now, &[b"b".to_vec()]);
    let _lost = transmit(&mut c);
    let (backed_off, again) = wait_until_retransmitted(&mut c, &mut now);
    assert!(backed_off >= 2 * rto, "no session backoff: {backed_off}");
    deliver(&mut s, now, CLIENT, &again);
    settle(&mut c, &mut s, now);
    assert_eq!(c.poll_ready(), Some(CALLER));

    // C is answered at its first try, after the backoff: the timeout is back to normal.
    send(&mut c, now, &[b"c".to_vec()]);
    settle(&mut c, &mut s, now);
    assert_eq!(c.poll_ready(), Some(CALLER));
    send(&mut c, now, &[b"d".to_vec()]);
    let _lost = transmit(&mut c);
    let (reset, _) = wait_until_retransmitted(&mut c, &mut now);
    assert!(reset < 2 * rto, "backoff not reset: {reset}");
}

// Restarts in the middle of split responses, floods of duplicates, and random input from
// a member's own address (found in review).

/// A server answering COUNT requests with the payload followed by `4 + extra` bytes of
/// `tag`, so responses of two lives differ in content, and in length if `extra` differs.
fn tagged_server(config: Config, tag: u8, extra: usize) -> Engine {
    let mut engine = Engine::new(SERVER, config);
    engine.register(
        COUNT,
        Box::new(move |request, response| {
            response.extend_from_slice(request.payload);
            response.extend(std::iter::repeat_n(tag, 4 + extra));
            Ok(())
        }),
    );
    engine
}

/// Part of a split response from the server's old life reaches the client; the server
/// restarts. The client's retransmission is addressed to the old life (it heard from it),
/// so the new life refuses it. The client must complete the call with that answer, not
/// wait forever for the missing packets of the old response, nor mix the two.
fn restart_mid_split_response(extra: usize) {
    let mut c = client(small_datagrams());
    let mut old = tagged_server(small_datagrams(), 1, 0);
    let payloads = vec![pattern(5000, 11)];
    let mut now = 0;
    send_typed(&mut c, now, COUNT, &payloads);
    deliver(&mut old, now, CLIENT, &transmit(&mut c));
    let responses = transmit(&mut old);
    assert_eq!(responses.len(), 5);
    deliver(&mut c, now, SERVER, &responses[1..]);
    drop(old);
    let mut new = tagged_server(
        Config {
            incarnation: 2,
            ..small_datagrams()
        },
        2,
        extra,
    );
    for _ in 0..20 {
        let again = next_retransmission(&mut c, &mut now);
        deliver(&mut new, now, CLIENT, &again);
        deliver(&mut c, now, SERVER, &transmit(&mut new));
        if c.poll_ready().is_some() {
            // The request carried the old life's incarnation: the new one refuses it.
            assert_eq!(c.result(CALLER, 0), Err(RpcError::TargetRestarted));
            assert!(c.stats().peer_restarts == 1);
            return;
        }
    }
    panic!("the call never completed after the server restarted");
}

#[test]
fn a_restart_in_the_middle_of_a_split_response_of_another_length_does_not_hang() {
    restart_mid_split_response(2000);
}

#[test]
fn a_restart_in_the_middle_of_a_split_response_of_the_same_length_is_not_spliced() {
    restart_mid_split_response(0);
}

/// Packets of one split response that disagree (another length) restart the reassembly
/// from the newest, so it can complete; the old packets are not mixed in.
#[test]
fn inconsistent_packets_restart_a_reassembly() {
    let mut c = client(small_datagrams());
    let mut first = tagged_server(small_datagrams(), 1, 0);
    let mut second = tagged_server(small_datagrams(), 2, 3000);
    let payloads = vec![pattern(3000, 4)];
    send_typed(&mut c, 0, COUNT, &payloads);
    let request = transmit(&mut c);
    deliver(&mut first, 0, CLIENT, &request);
    deliver(&mut second, 0, CLIENT, &request);
    // Both "servers" share the endpoint and incarnation: to the client they are one peer
    // that answered twice with different contents, as a broken peer might.
    let a = transmit(&mut first);
    let b = transmit(&mut second);
    deliver(&mut c, 0, SERVER, &a[..2]);
    deliver(&mut c, 0, SERVER, &b);
    assert_eq!(c.poll_ready(), Some(CALLER));
    let response = c.result(CALLER, 0).unwrap();
    assert_eq!(response.len(), 3000 + 4 + 3000);
    assert!(response[3000..].iter().all(|&byte| byte == 2), "spliced");
    assert!(c.stats().inconsistent_fragments >= 1);
}

/// A network duplicate of an answered request, delayed past the server's restart and
/// addressed to its earlier life, does not run again.
#[test]
fn a_delayed_duplicate_does_not_run_again_after_the_server_restarts() {
    let mut c = client(Config::default());
    let (mut old, old_log) = server(Config::default());
    let warm = vec![b"warm".to_vec()];
    send(&mut c, 0, &warm);
    settle(&mut c, &mut old, 0);
    assert_answered(&mut c, &warm);
    let payloads = vec![b"transfer 100".to_vec()];
    send(&mut c, 0, &payloads);
    let requests = transmit(&mut c);
    assert_eq!(decode(&requests[0]).unwrap().target_incarnation(), 1);
    deliver(&mut old, 0, CLIENT, &requests);
    deliver(&mut c, 0, SERVER, &transmit(&mut old));
    assert_answered(&mut c, &payloads);
    assert_eq!(old_log.borrow().len(), 2);
    drop(old);
    let (mut new, new_log) = server(Config {
        incarnation: 2,
        ..Config::default()
    });
    deliver(&mut new, 1000, CLIENT, &requests);
    assert!(new_log.borrow().is_empty(), "ran twice across the restart");
}

/// One datagram repeating a finished request many times is answered once, not once per
/// copy.
#[test]
fn copies_of_a_request_in_one_datagram_are_answered_once() {
    let mut c = client(Config::default());
    let (mut s, log) = server(Config::default());
    let payloads = vec![b"once".to_vec()];
    send(&mut c, 0, &payloads);
    let requests = transmit(&mut c);
    deliver(&mut s, 0, CLIENT, &requests);
    assert_eq!(transmit(&mut s).len(), 1);
    let copy = messages(&requests[0]);
    assert_eq!(copy.len(), 1);
    let mut flood = Vec::with_capacity(65_507);
    start_datagram(&mut flood, CLIENT, SERVER, ViewId(1), 1, 1);
    let fields = MessageFields {
        kind: MessageKind::Request,
        request_type: ECHO,
        status: Status::Ok,
        slot: 0,
        request_number: 1,
    };
    let mut copies = 0;
    while push_message(&mut flood, fields, FragmentInfo::whole(4), b"once") {
        copies += 1;
    }
    assert!(copies > 1000);
    s.handle_datagram(0, Some(CLIENT), &mut flood.to_vec());
    assert_eq!(log.borrow().len(), 1);
    let answers = transmit(&mut s);
    assert_eq!(answers.len(), 1);
    assert_eq!(
        messages(&answers[0]).len(),
        1,
        "{copies} copies drew more than one answer"
    );
}

#[test]
#[should_panic(expected = "incarnation 0")]
fn incarnation_zero_is_refused() {
    let _ = client(Config {
        incarnation: 0,
        ..Config::default()
    });
}

#[test]
fn datagrams_claiming_incarnation_zero_are_dropped() {
    let (mut s, log) = server(Config::default());
    let forged = Forge {
        incarnation: 0,
        ..Forge::new(CLIENT, SERVER)
    };
    s.handle_datagram(
        0,
        Some(CLIENT),
        &mut forged.message(MessageKind::Request, 0, 1, b"x"),
    );
    assert!(log.borrow().is_empty());
    assert_eq!(s.stats().stale_incarnation, 1);
}

/// Random well-formed datagrams from the real peers' own addresses (so past the source
/// check that stops the hostile test's sprayer), mixed with real traffic, drops and
/// timeouts: nothing may panic, and the real calls keep completing.
#[test]
fn random_datagrams_from_a_member_never_panic_the_engine() {
    let mut state: u64 = 0x1234_5678_9abc_def1;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut completed = 0;
    for round in 0..200 {
        let mut c = client(Config {
            credits: 4,
            ..small_datagrams()
        });
        let (mut s, _log) = server(small_datagrams());
        let payloads = vec![
            pattern(3000, round),
            pattern(10, round + 1),
            pattern(5000, round + 2),
        ];
        let mut now = 0u64;
        send(&mut c, now, &payloads);
        for _ in 0..200 {
            for (target, source) in [(CLIENT, SERVER), (SERVER, CLIENT)] {
                let mut buf = Vec::with_capacity(1200);
                let incarnation = [0u64, 1, 2, 1, 1, 1][(random() % 6) as usize];
                let target_incarnation = [0u64, 1, 2, 1][(random() % 4) as usize];
                start_datagram(
                    &mut buf,
                    source,
                    target,
                    ViewId(1),
                    incarnation,
                    target_incarnation,
                );
                for _ in 0..(1 + random() % 4) {
                    let kind = if random() % 2 == 0 {
                        MessageKind::Request
                    } else {
                        MessageKind::Response
                    };
                    let status = match kind {
                        MessageKind::Request => Status::Ok,
                        MessageKind::Response => {
                            [Status::Ok, Status::HandlerError, Status::TargetRestarted]
                                [(random() % 3) as usize]
                        }
                    };
                    let count = [1u16, 2, 3, 5, 2048][(random() % 5) as usize];
                    let index = (random() % u64::from(count)) as u16;
                    let message_len = if count == 1 {
                        (random() % 50) as u32
                    } else {
                        [3000u32, 5000, 5004, 40, 1_100_000][(random() % 5) as usize]
                    };
                    let len = if count == 1 {
                        message_len as usize
                    } else {
                        (1 + (random() % 100) as usize).min(message_len as usize)
                    };
                    let offset = if count == 1 {
                        0
                    } else {
                        (random() % u64::from(message_len.saturating_sub(len as u32).max(1))) as u32
                    };
                    let fields = MessageFields {
                        kind,
                        request_type: [ECHO, COUNT, UNKNOWN][(random() % 3) as usize],
                        status,
                        slot: (random() % 6) as u8,
                        request_number: random() % 6,
                    };
                    let fragment = FragmentInfo {
                        message_len,
                        offset,
                        packet_index: index,
                        packet_count: count,
                    };
                    let payload = vec![random() as u8; len];
                    if !push_message(&mut buf, fields, fragment, &payload) {
                        break;
                    }
                }
                if decode(&buf).is_err() {
                    continue;
                }
                let engine = if target == CLIENT { &mut c } else { &mut s };
                engine.handle_datagram(now, Some(source), &mut buf.to_vec());
            }
            let requests = transmit(&mut c);
            if random() % 3 != 0 {
                deliver(&mut s, now, CLIENT, &requests);
            }
            let responses = transmit(&mut s);
            if random() % 3 != 0 {
                deliver(&mut c, now, SERVER, &responses);
            }
            now += 30_000;
            c.handle_timeout(now);
            s.handle_timeout(now);
            while c.poll_ready().is_some() {
                completed += 1;
            }
            if c.is_done(CALLER) {
                send(&mut c, now, &payloads);
            }
        }
    }
    assert!(
        completed > 0,
        "no call completed among the random datagrams"
    );
}

/// A client that does not know the server's incarnation connects first: its requests wait
/// until the reply names the incarnation, and a lost connect request is sent again.
#[test]
fn a_client_connects_before_sending_requests() {
    let mut c = connecting_client(Config::default());
    let (mut s, log) = server(Config::default());
    let payloads = vec![b"after connecting".to_vec()];
    let mut now = 0;
    send(&mut c, now, &payloads);
    let first = transmit(&mut c);
    assert_eq!(first.len(), 1);
    let seen = messages(&first[0]);
    assert_eq!(
        seen.len(),
        1,
        "a request left before the connect was answered"
    );
    assert_eq!(seen[0].request_type, ferrotx_rpc::CONNECT_REQUEST_TYPE);
    // Lost; sent again after the timeout.
    let again = next_retransmission(&mut c, &mut now);
    assert_eq!(
        messages(&again[0])[0].request_type,
        ferrotx_rpc::CONNECT_REQUEST_TYPE
    );
    deliver(&mut s, now, CLIENT, &again);
    assert!(log.borrow().is_empty());
    deliver(&mut c, now, SERVER, &transmit(&mut s));
    settle(&mut c, &mut s, now);
    assert_answered(&mut c, &payloads);
    assert_eq!(*log.borrow(), payloads);
}

/// Requests that name no incarnation (only connect requests may) are not run: they are
/// answered with a connect reply, which tells the client the server's incarnation.
#[test]
fn a_request_naming_no_incarnation_is_refused() {
    let (mut s, log) = server(Config::default());
    let forged = Forge {
        target_incarnation: 0,
        ..Forge::new(CLIENT, SERVER)
    };
    s.handle_datagram(
        0,
        Some(CLIENT),
        &mut forged.message(MessageKind::Request, 0, 1, b"x"),
    );
    assert!(log.borrow().is_empty());
    let answer = messages(&transmit(&mut s)[0]);
    assert_eq!(
        (answer[0].kind, answer[0].request_type),
        (MessageKind::Response, ferrotx_rpc::CONNECT_REQUEST_TYPE)
    );
}

/// When anything from a server's new life arrives, the requests outstanding to its old
/// life fail at once with `TargetRestarted`: sent again they would name the new life and
/// could run twice.
#[test]
fn learning_of_a_restart_fails_the_requests_sent_to_the_earlier_life() {
    let mut c = client(Config::default());
    let (mut old, old_log) = server(Config::default());
    let payloads = vec![b"in flight".to_vec()];
    send(&mut c, 0, &payloads);
    deliver(&mut old, 0, CLIENT, &transmit(&mut c));
    assert_eq!(old_log.borrow().len(), 1);
    drop(old); // The response is lost with the process.
    let (_new, new_log) = server(Config {
        incarnation: 2,
        ..Config::default()
    });
    // The new life speaks first (say, its own request to the client).
    let hello = Forge {
        source: SERVER,
        target: CLIENT,
        incarnation: 2,
        ..Forge::new(SERVER, CLIENT)
    }
    .message(MessageKind::Request, 0, 1, b"hello");
    c.handle_datagram(10, Some(SERVER), &mut hello.to_vec());
    assert_eq!(c.poll_ready(), Some(CALLER));
    assert_eq!(c.result(CALLER, 0), Err(RpcError::TargetRestarted));
    assert_eq!(c.outstanding(), 0);
    assert!(new_log.borrow().is_empty());
}

// Deferred handlers.

/// Request type of a deferred handler (registered by the test that uses it).
const LATER: u8 = 10;

/// What a deferred handler took: each request's payload and token.
type Taken = Rc<RefCell<Vec<(Vec<u8>, ferrotx_rpc::Deferred)>>>;

#[test]
fn a_deferred_request_runs_once_and_is_answered_when_the_layer_above_responds() {
    let mut c = client(Config::default());
    let (mut s, _) = server(Config::default());
    let taken: Taken = Rc::default();
    let sink = taken.clone();
    s.register_deferred(
        LATER,
        Box::new(move |request, token| {
            assert_eq!(token.source, CLIENT);
            sink.borrow_mut().push((request.payload.to_vec(), token));
        }),
    );
    let payload = b"later".to_vec();
    send_typed(&mut c, 0, LATER, std::slice::from_ref(&payload));
    let requests = transmit(&mut c);
    deliver(&mut s, 10, CLIENT, &requests);
    assert!(
        transmit(&mut s).is_empty(),
        "a deferred request answers nothing yet"
    );
    assert_eq!(taken.borrow().len(), 1);
    // Retransmissions while it runs are ignored, and do not run it again.
    let mut now = 10;
    let again = next_retransmission(&mut c, &mut now);
    deliver(&mut s, now, CLIENT, &again);
    assert!(transmit(&mut s).is_empty());
    assert_eq!(taken.borrow().len(), 1, "a duplicate ran the handler again");
    assert_eq!(s.stats().deferred_started, 1);

    let token = taken.borrow()[0].1;
    assert!(s.respond(token, Ok(&answer(&payload))));
    assert!(!s.respond(token, Ok(b"twice")), "a token answers once");
    let responses = transmit(&mut s);
    assert_eq!(responses.len(), 1);
    deliver(&mut c, now, SERVER, &responses);
    assert_answered(&mut c, std::slice::from_ref(&payload));
    // A late duplicate gets the saved answer, not a second run.
    deliver(&mut s, now, CLIENT, &again);
    assert_eq!(transmit(&mut s), responses);
    assert_eq!(taken.borrow().len(), 1);
    assert_eq!(s.stats().deferred_answered, 1);

    // A deferred handler's error reaches the caller as a handler error.
    send_typed(&mut c, now, LATER, &[b"fail".to_vec()]);
    deliver(&mut s, now, CLIENT, &transmit(&mut c));
    let token = taken.borrow()[1].1;
    assert!(s.respond(token, Err(HandlerError("no"))));
    deliver(&mut c, now, SERVER, &transmit(&mut s));
    assert_eq!(c.poll_ready(), Some(CALLER));
    assert_eq!(c.result(CALLER, 0), Err(RpcError::Handler));
}

#[test]
fn a_deferred_answer_to_a_client_that_restarted_is_dropped() {
    let mut c = client(Config::default());
    let (mut s, _) = server(Config::default());
    let taken: Rc<RefCell<Vec<ferrotx_rpc::Deferred>>> = Rc::default();
    let sink = taken.clone();
    s.register_deferred(
        LATER,
        Box::new(move |_, token| sink.borrow_mut().push(token)),
    );
    send_typed(&mut c, 0, LATER, &[b"old life".to_vec()]);
    deliver(&mut s, 10, CLIENT, &transmit(&mut c));
    // The client restarts: its new life's first request reaches the server.
    let mut reborn = Engine::new(
        CLIENT,
        Config {
            incarnation: 2,
            ..Config::default()
        },
    );
    reborn.set_peer_incarnation(SERVER, 1);
    send_typed(&mut reborn, 20, ECHO, &[b"new life".to_vec()]);
    deliver(&mut s, 20, CLIENT, &transmit(&mut reborn));
    let old = taken.borrow()[0];
    assert!(
        !s.respond(old, Ok(b"stale")),
        "the old life's request is gone"
    );
    deliver(&mut reborn, 30, SERVER, &transmit(&mut s));
    assert_answered(&mut reborn, &[b"new life".to_vec()]);
}
