//! Membership mode (`Engine::switch_configuration`): FaRM's precise membership in the RPC
//! engine, through its public interface only. As in `tests/engine.rs`, two engines are
//! wired back to back by the test, which decides what happens to every datagram.

use ferrotx_rpc::{CONNECT_REQUEST_TYPE, CallerId, Config, Engine, Event, RpcError};
use ferrotx_wire::batch::TxBatch;
use ferrotx_wire::{
    EndpointId, FragmentInfo, MessageFields, MessageKind, Status, ViewId, decode, push_message,
    start_datagram,
};

const CLIENT: EndpointId = EndpointId::new(0, 0);
const SERVER: EndpointId = EndpointId::new(1, 0);
/// Another thread of the server's node.
const SERVER_1: EndpointId = EndpointId::new(1, 1);
/// An endpoint of a node that is never a member.
const OTHER: EndpointId = EndpointId::new(2, 0);

const ECHO: u8 = 7;
const CALLER: CallerId = CallerId(0);

/// Both nodes, in their first life (incarnation 1, as `Config::default()`).
const BOTH: &[(u16, u64)] = &[(0, 1), (1, 1)];

fn answer(payload: &[u8]) -> Vec<u8> {
    payload.iter().rev().map(|b| b ^ 0x5a).collect()
}

fn server_at(local: EndpointId, config: Config) -> Engine {
    let mut engine = Engine::new(local, config);
    engine.register(
        ECHO,
        Box::new(|request, response| {
            response.extend_from_slice(&answer(request.payload));
            Ok(())
        }),
    );
    engine
}

fn server(config: Config) -> Engine {
    server_at(SERVER, config)
}

/// Pushes one echo request per payload to `target` and submits; returns what `submit`
/// returned (true: complete already, nothing to send).
fn send_to(engine: &mut Engine, now_ns: u64, target: EndpointId, payloads: &[&[u8]]) -> bool {
    for payload in payloads {
        engine
            .batch_push(CALLER, target, ECHO)
            .extend_from_slice(payload);
    }
    engine.submit(CALLER, now_ns)
}

fn send(engine: &mut Engine, now_ns: u64, payloads: &[&[u8]]) {
    assert!(!send_to(engine, now_ns, SERVER, payloads));
}

fn transmit(engine: &mut Engine) -> Vec<Vec<u8>> {
    let mut tx = TxBatch::new(16, engine.config().datagram_bytes);
    let mut out = Vec::new();
    loop {
        engine.poll_transmit(&mut tx);
        if tx.is_empty() {
            return out;
        }
        out.extend(tx.iter().map(|(_, d)| d.to_vec()));
        tx.clear();
    }
}

fn deliver(engine: &mut Engine, now_ns: u64, from: EndpointId, datagrams: &[Vec<u8>]) {
    for datagram in datagrams {
        engine.handle_datagram(now_ns, Some(from), &mut datagram.to_vec());
    }
}

/// Exchanges datagrams until both engines are quiet.
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

/// The caller's batch is ready (once); its results.
fn results(engine: &mut Engine) -> Vec<Result<Vec<u8>, RpcError>> {
    assert_eq!(engine.poll_ready(), Some(CALLER));
    assert_eq!(
        engine.poll_ready(),
        None,
        "a batch was reported ready twice"
    );
    collect(engine)
}

fn collect(engine: &Engine) -> Vec<Result<Vec<u8>, RpcError>> {
    assert!(engine.is_done(CALLER));
    (0..engine.batch_len(CALLER))
        .map(|i| engine.result(CALLER, i).map(<[u8]>::to_vec))
        .collect()
}

/// (request type, request number) of every message of `datagrams`.
fn requests(datagrams: &[Vec<u8>]) -> Vec<(u8, u64)> {
    datagrams
        .iter()
        .flat_map(|d| {
            decode(d)
                .expect("valid datagram")
                .messages()
                .filter(|m| m.kind() == MessageKind::Request)
                .map(|m| (m.header.request_type, m.header.request_number.get()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A hand-made datagram of one echo message.
fn forge(
    source: EndpointId,
    target: EndpointId,
    view: u64,
    incarnation: u64,
    target_incarnation: u64,
    kind: MessageKind,
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(2048);
    start_datagram(
        &mut buf,
        source,
        target,
        ViewId(view),
        incarnation,
        target_incarnation,
    );
    let fields = MessageFields {
        kind,
        request_type: ECHO,
        status: Status::Ok,
        slot: 0,
        request_number: 1,
    };
    assert!(push_message(&mut buf, fields, FragmentInfo::whole(1), b"x"));
    buf
}

fn events(engine: &mut Engine) -> Vec<Event> {
    std::iter::from_fn(|| engine.poll_event()).collect()
}

#[test]
fn calls_sent_under_the_old_configuration_fail_as_configuration_changed() {
    let mut c = Engine::new(CLIENT, Config::default());
    c.set_peer_incarnation(SERVER, 1);
    let mut s = server(Config::default());
    send(&mut c, 0, &[b"a", b"b"]);
    let sent = transmit(&mut c);
    assert_eq!(requests(&sent).len(), 2);
    assert_eq!(c.outstanding(), 2);

    c.switch_configuration(10, ViewId(2), BOTH);
    assert_eq!(
        results(&mut c),
        vec![
            Err(RpcError::ConfigurationChanged),
            Err(RpcError::ConfigurationChanged)
        ]
    );
    assert_eq!(c.outstanding(), 0);
    assert_eq!(c.next_timeout_ns(), None, "nothing is left to retransmit");
    assert_eq!(c.stats().calls_failed_by_reconfiguration, 2);
    assert_eq!(c.config().view, ViewId(2));
    assert!(transmit(&mut c).is_empty());

    // The server, switched too, drops the late requests of configuration 1 unrun, and
    // the client drops late responses of configuration 1 (here: a server that has not
    // switched yet answers them).
    let mut late = server(Config::default());
    deliver(&mut late, 20, CLIENT, &sent);
    let answers = transmit(&mut late);
    assert!(!answers.is_empty());
    deliver(&mut c, 20, SERVER, &answers);
    assert_eq!(c.stats().stale_configuration, answers.len() as u64);
    assert_eq!(c.poll_ready(), None);

    s.switch_configuration(10, ViewId(2), BOTH);
    deliver(&mut s, 20, CLIENT, &sent);
    assert_eq!(s.stats().stale_configuration, sent.len() as u64);
    assert_eq!(s.stats().requests_executed, 0);
    assert!(!s.wants_transmit());
}

#[test]
fn calls_never_sent_fail_as_not_sent() {
    // One credit: the second and third requests wait in the backlog.
    let config = Config {
        credits: 1,
        ..Config::default()
    };
    let mut c = Engine::new(CLIENT, config);
    c.set_peer_incarnation(SERVER, 1);
    send(&mut c, 0, &[b"a", b"b", b"c"]);
    assert_eq!(requests(&transmit(&mut c)).len(), 1);
    c.switch_configuration(10, ViewId(2), BOTH);
    assert_eq!(
        results(&mut c),
        vec![
            Err(RpcError::ConfigurationChanged),
            Err(RpcError::NotSent),
            Err(RpcError::NotSent)
        ]
    );

    // Submitted but not yet written by `poll_transmit`: never left either.
    let mut c = Engine::new(CLIENT, Config::default());
    c.set_peer_incarnation(SERVER, 1);
    send(&mut c, 0, &[b"a"]);
    c.switch_configuration(10, ViewId(2), BOTH);
    assert_eq!(results(&mut c), vec![Err(RpcError::NotSent)]);
    assert!(transmit(&mut c).is_empty(), "a failed call was sent");

    // Waiting for a connect: never sent, and the connect is abandoned.
    let mut c = Engine::new(CLIENT, Config::default());
    send(&mut c, 0, &[b"a"]);
    let connect = transmit(&mut c);
    assert_eq!(requests(&connect), vec![(CONNECT_REQUEST_TYPE, 0)]);
    assert!(c.next_timeout_ns().is_some());
    c.switch_configuration(10, ViewId(2), BOTH);
    assert_eq!(results(&mut c), vec![Err(RpcError::NotSent)]);
    assert_eq!(c.next_timeout_ns(), None);
    c.handle_timeout(1_000_000_000);
    assert!(transmit(&mut c).is_empty());
}

#[test]
fn a_batch_spanning_sent_waiting_and_non_member_targets_completes_once() {
    let config = Config {
        credits: 1,
        ..Config::default()
    };
    let mut c = Engine::new(CLIENT, config);
    c.set_peer_incarnation(SERVER, 1);
    c.switch_configuration(0, ViewId(1), &[(0, 1), (1, 1)]);
    for (target, payload) in [(SERVER, b"a"), (SERVER, b"b"), (OTHER, b"c")] {
        c.batch_push(CALLER, target, ECHO)
            .extend_from_slice(payload);
    }
    assert!(!c.submit(CALLER, 0));
    assert_eq!(c.poll_ready(), None);
    assert_eq!(requests(&transmit(&mut c)).len(), 1);
    c.switch_configuration(5, ViewId(2), BOTH);
    assert_eq!(
        results(&mut c),
        vec![
            Err(RpcError::ConfigurationChanged),
            Err(RpcError::NotSent),
            Err(RpcError::NotMember)
        ]
    );
}

#[test]
fn requests_to_a_node_not_in_the_configuration_fail_without_being_sent() {
    let mut c = Engine::new(CLIENT, Config::default());
    let mut s = server(Config::default());
    c.switch_configuration(0, ViewId(2), BOTH);
    s.switch_configuration(0, ViewId(2), BOTH);
    send(&mut c, 0, &[b"a"]);
    settle(&mut c, &mut s, 0);
    assert_eq!(results(&mut c), vec![Ok(answer(b"a"))]);

    // The server's node leaves the configuration.
    c.switch_configuration(10, ViewId(3), &[(0, 1)]);
    for target in [SERVER, SERVER_1, OTHER] {
        assert!(
            send_to(&mut c, 20, target, &[b"b", b"c"]),
            "a batch to a non-member completes at submit"
        );
        assert_eq!(
            c.poll_ready(),
            None,
            "complete at submit: not reported ready"
        );
        assert_eq!(
            collect(&c),
            vec![Err(RpcError::NotMember), Err(RpcError::NotMember)]
        );
        assert!(
            transmit(&mut c).is_empty(),
            "a request to a non-member was sent"
        );
    }
    assert_eq!(c.stats().requests_to_non_members, 6);
    assert_eq!(c.outstanding(), 0);
    assert_eq!(c.next_timeout_ns(), None);

    // Its datagrams are dropped too, requests and responses.
    deliver(
        &mut c,
        30,
        SERVER,
        &[
            forge(SERVER, CLIENT, 3, 1, 1, MessageKind::Request),
            forge(SERVER, CLIENT, 3, 1, 1, MessageKind::Response),
        ],
    );
    assert_eq!(c.stats().not_member, 2);
    assert_eq!(c.stats().requests_executed, 0);
    assert!(!c.wants_transmit());
}

#[test]
fn datagrams_of_other_configurations_are_dropped_and_a_newer_one_reported_once() {
    let mut s = server(Config::default());
    s.switch_configuration(0, ViewId(5), BOTH);
    let request = |configuration| forge(CLIENT, SERVER, configuration, 1, 1, MessageKind::Request);

    deliver(&mut s, 0, CLIENT, &[request(1), request(4)]);
    assert_eq!(s.stats().stale_configuration, 2);
    assert!(events(&mut s).is_empty());

    // A flood of a newer configuration makes one event.
    for _ in 0..1000 {
        deliver(&mut s, 0, CLIENT, &[request(6)]);
    }
    assert_eq!(s.stats().newer_configuration, 1000);
    assert_eq!(events(&mut s), vec![Event::NewerConfiguration(ViewId(6))]);
    // A still newer one is reported; one in between or lower, not again.
    deliver(
        &mut s,
        0,
        CLIENT,
        &[request(8), request(7), request(6), request(8)],
    );
    assert_eq!(events(&mut s), vec![Event::NewerConfiguration(ViewId(8))]);
    assert_eq!(s.stats().newer_configuration, 1004);
    // A datagram whose source is forged raises nothing.
    s.handle_datagram(0, Some(OTHER), &mut request(9));
    s.handle_datagram(0, None, &mut request(9));
    assert_eq!(s.stats().forged_source, 2);
    assert!(events(&mut s).is_empty());

    assert_eq!(s.stats().requests_executed, 0);
    assert_eq!(s.stats().wrong_configuration, 0);
    assert_eq!(s.stats().datagrams_dropped(), 2 + 1004 + 2);
    assert!(!s.wants_transmit());

    // The current configuration is served.
    deliver(&mut s, 0, CLIENT, &[request(5)]);
    assert_eq!(s.stats().requests_executed, 1);
    assert_eq!(transmit(&mut s).len(), 1);

    // After switching past them, ids up to the switch are no longer newer.
    s.switch_configuration(0, ViewId(8), BOTH);
    deliver(&mut s, 0, CLIENT, &[request(8), request(9)]);
    assert_eq!(events(&mut s), vec![Event::NewerConfiguration(ViewId(9))]);
}

#[test]
fn a_new_life_of_a_member_is_dropped_until_a_configuration_admits_it() {
    let mut c = Engine::new(CLIENT, Config::default());
    let mut s = server(Config::default());
    c.switch_configuration(0, ViewId(2), BOTH);
    s.switch_configuration(0, ViewId(2), BOTH);
    send(&mut c, 0, &[b"a"]);
    settle(&mut c, &mut s, 0);
    assert_eq!(results(&mut c), vec![Ok(answer(b"a"))]);

    // The server restarts; its new life (incarnation 2) is not a member of configuration 2,
    // which names incarnation 1: the client drops everything from it, and it is no
    // restart (calls to the server keep waiting for the life the configuration names).
    let mut reborn = server(Config {
        incarnation: 2,
        ..Config::default()
    });
    reborn.switch_configuration(0, ViewId(2), &[(0, 1), (1, 2)]);
    let mut now = 10;
    send(&mut c, now, &[b"b"]);
    for round in 0..3 {
        let sent = transmit(&mut c);
        assert!(!sent.is_empty(), "round {round}: nothing sent");
        deliver(&mut reborn, now, CLIENT, &sent);
        // It answers (the request names its earlier life: `TargetRestarted`).
        let answers = transmit(&mut reborn);
        assert!(!answers.is_empty());
        deliver(&mut c, now, SERVER, &answers);
        let hello = forge(SERVER, CLIENT, 2, 2, 1, MessageKind::Request);
        c.handle_datagram(now, Some(SERVER), &mut hello.to_vec());
        assert_eq!(
            c.poll_ready(),
            None,
            "round {round}: answered by a non-member"
        );
        // The call waits on, retransmitted.
        while !c.wants_transmit() {
            now = c.next_timeout_ns().expect("the call waits");
            c.handle_timeout(now);
        }
    }
    assert!(c.stats().not_member >= 6);
    assert_eq!(c.stats().peer_restarts, 0);
    assert_eq!(c.stats().requests_executed, 0);

    // The membership layer admits the new life.
    now += 1;
    c.switch_configuration(now, ViewId(3), &[(0, 1), (1, 2)]);
    assert_eq!(results(&mut c), vec![Err(RpcError::ConfigurationChanged)]);
    reborn.switch_configuration(now, ViewId(3), &[(0, 1), (1, 2)]);
    send(&mut c, now, &[b"c", b"d"]);
    settle(&mut c, &mut reborn, now);
    assert_eq!(results(&mut c), vec![Ok(answer(b"c")), Ok(answer(b"d"))]);
    assert_eq!(c.stats().peer_restarts, 0);
}

#[test]
fn a_restarted_client_is_ignored_by_the_server_until_admitted() {
    let mut s = server(Config::default());
    s.switch_configuration(0, ViewId(2), BOTH);
    let mut reborn = Engine::new(
        CLIENT,
        Config {
            incarnation: 2,
            ..Config::default()
        },
    );
    reborn.switch_configuration(0, ViewId(2), &[(0, 2), (1, 1)]);
    send(&mut reborn, 0, &[b"a"]);
    let sent = transmit(&mut reborn);
    deliver(&mut s, 0, CLIENT, &sent);
    assert_eq!(s.stats().not_member, sent.len() as u64);
    assert_eq!(s.stats().requests_executed, 0);
    assert_eq!(s.stats().peer_restarts, 0);
    assert!(!s.wants_transmit());

    s.switch_configuration(10, ViewId(3), &[(0, 2), (1, 1)]);
    reborn.switch_configuration(10, ViewId(3), &[(0, 2), (1, 1)]);
    assert_eq!(
        results(&mut reborn),
        vec![Err(RpcError::ConfigurationChanged)]
    );
    send(&mut reborn, 20, &[b"b"]);
    settle(&mut reborn, &mut s, 20);
    assert_eq!(results(&mut reborn), vec![Ok(answer(b"b"))]);
}

#[test]
fn engines_in_the_same_configuration_call_each_other_without_connecting() {
    // Neither engine was told the other's incarnation but by the configuration.
    let mut c = Engine::new(CLIENT, Config::default());
    let mut s = server(Config::default());
    let mut s1 = server_at(SERVER_1, Config::default());
    for engine in [&mut c, &mut s, &mut s1] {
        engine.switch_configuration(0, ViewId(2), BOTH);
    }
    send(&mut c, 0, &[b"a", b"b"]);
    let sent = transmit(&mut c);
    assert_eq!(
        requests(&sent),
        vec![(ECHO, 1), (ECHO, 2)],
        "requests go at once, no connect first"
    );
    deliver(&mut s, 0, CLIENT, &sent);
    let answers = transmit(&mut s);
    deliver(&mut c, 0, SERVER, &answers);
    assert_eq!(results(&mut c), vec![Ok(answer(b"a")), Ok(answer(b"b"))]);

    // Another thread of a member node, never contacted before: no connect either.
    assert!(!send_to(&mut c, 0, SERVER_1, &[b"z"]));
    let sent = transmit(&mut c);
    assert_eq!(requests(&sent), vec![(ECHO, 1)]);
    deliver(&mut s1, 0, CLIENT, &sent);
    deliver(&mut c, 0, SERVER_1, &transmit(&mut s1));
    assert_eq!(results(&mut c), vec![Ok(answer(b"z"))]);

    // The sessions continue across a configuration with the same members: request
    // numbers keep growing, and the server runs each request once.
    c.switch_configuration(10, ViewId(3), BOTH);
    s.switch_configuration(10, ViewId(3), BOTH);
    send(&mut c, 20, &[b"c"]);
    let sent = transmit(&mut c);
    assert_eq!(requests(&sent), vec![(ECHO, 3)]);
    deliver(&mut s, 20, CLIENT, &sent);
    deliver(&mut s, 20, CLIENT, &sent);
    deliver(&mut c, 20, SERVER, &transmit(&mut s));
    assert_eq!(results(&mut c), vec![Ok(answer(b"c"))]);
    assert_eq!(s.stats().requests_executed, 3);
    assert_eq!(c.stats().stale_responses, 0);
}

#[test]
fn a_session_learned_by_connecting_carries_into_membership_mode() {
    let mut c = Engine::new(CLIENT, Config::default());
    let mut s = server(Config::default());
    send(&mut c, 0, &[b"a"]);
    settle(&mut c, &mut s, 0);
    assert_eq!(results(&mut c), vec![Ok(answer(b"a"))]);
    for engine in [&mut c, &mut s] {
        engine.switch_configuration(10, ViewId(2), BOTH);
    }
    send(&mut c, 20, &[b"b"]);
    let sent = transmit(&mut c);
    assert_eq!(requests(&sent), vec![(ECHO, 2)]);
    deliver(&mut s, 20, CLIENT, &sent);
    deliver(&mut c, 20, SERVER, &transmit(&mut s));
    assert_eq!(results(&mut c), vec![Ok(answer(b"b"))]);
}

#[test]
fn no_combination_of_header_fields_panics_a_member_engine() {
    let mut s = server(Config::default());
    s.switch_configuration(0, ViewId(2), BOTH);
    let mut c = Engine::new(CLIENT, Config::default());
    c.switch_configuration(0, ViewId(2), BOTH);
    send(&mut c, 0, &[b"pending"]);
    let _ = transmit(&mut c);
    let mut now = 0;
    for source in [CLIENT, SERVER, SERVER_1, OTHER] {
        for target in [CLIENT, SERVER, OTHER] {
            for configuration in [0, 1, 2, 3, u64::MAX] {
                for incarnation in [0, 1, 2, u64::MAX] {
                    for target_incarnation in [0, 1, 2] {
                        for kind in [MessageKind::Request, MessageKind::Response] {
                            let d = forge(
                                source,
                                target,
                                configuration,
                                incarnation,
                                target_incarnation,
                                kind,
                            );
                            now += 1000;
                            for engine in [&mut s, &mut c] {
                                engine.handle_datagram(now, Some(source), &mut d.to_vec());
                                engine.handle_timeout(now);
                                let _ = transmit(engine);
                            }
                        }
                    }
                }
            }
        }
        // Switch back and forth between member sets, with a call outstanding.
        c.switch_configuration(now, c.config().view.next(), &[(0, 1)]);
        let _ = c.poll_ready();
        let members: &[(u16, u64)] = if source == OTHER { &[] } else { BOTH };
        c.switch_configuration(now, c.config().view.next(), members);
        s.switch_configuration(now, c.config().view, members);
        let _ = send_to(&mut c, now, SERVER, &[b"again"]);
        let _ = transmit(&mut c);
    }
    let _ = events(&mut s);
    assert!(s.stats().datagrams_dropped() > 0);
}
