//! Authenticated datagrams through the RPC engine (`Config::auth`): nothing a holder of
//! the cluster key did not send is decoded, a captured datagram is accepted once, and keys
//! rotate without a refused datagram.

use std::cell::RefCell;
use std::rc::Rc;

use ferrotx_rpc::{CallerId, Config, Engine};
use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys, Refusal, Sender};
use ferrotx_wire::batch::TxBatch;
use ferrotx_wire::{
    EndpointId, FragmentInfo, MessageFields, MessageKind, Status, ViewId, push_message,
    start_datagram,
};

const CLIENT: EndpointId = EndpointId::new(0, 0);
const SERVER: EndpointId = EndpointId::new(1, 0);
const COUNT: u8 = 8;
const CALLER: CallerId = CallerId(0);

fn key(material: u8) -> Key {
    Key::from_material(&[material; KEY_BYTES])
}

fn auth(keys: Keys, cluster: u8) -> Option<Auth> {
    Some(Auth::new(keys, ClusterId([cluster; 16]), [cluster; 16]))
}

fn config(auth: Option<Auth>) -> Config {
    Config {
        datagram_bytes: 1200,
        auth,
        ..Config::default()
    }
}

/// A server whose handler counts its executions.
fn server(config: Config) -> (Engine, Rc<RefCell<u32>>) {
    let mut engine = Engine::new(SERVER, config);
    let executed = Rc::new(RefCell::new(0));
    let counter = executed.clone();
    engine.register(
        COUNT,
        Box::new(move |request, response| {
            *counter.borrow_mut() += 1;
            response.extend_from_slice(request.payload);
            Ok(())
        }),
    );
    (engine, executed)
}

fn client(config: Config) -> Engine {
    let mut engine = Engine::new(CLIENT, config);
    engine.set_peer_incarnation(SERVER, 1);
    engine
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

/// One request of `len` bytes from `c` to `s`, answered: the request's datagrams.
fn round_trip(c: &mut Engine, s: &mut Engine, now: u64, len: usize) -> Vec<Vec<u8>> {
    c.batch_push(CALLER, SERVER, COUNT)
        .extend_from_slice(&vec![0xab; len]);
    assert!(!c.submit(CALLER, now));
    let requests = transmit(c);
    for d in &requests {
        s.handle_datagram(now, Some(CLIENT), &mut d.to_vec());
    }
    for d in transmit(s) {
        c.handle_datagram(now, Some(SERVER), &mut d.to_vec());
    }
    assert!(c.is_done(CALLER), "answered");
    assert_eq!(c.result(CALLER, 0).unwrap().len(), len);
    while c.poll_ready().is_some() {}
    requests
}

#[test]
fn every_bit_flip_and_truncation_of_a_request_is_refused_before_decoding() {
    let a = auth(Keys::one(key(1)), 1);
    let (mut s, executed) = server(config(a.clone()));
    let mut c = client(config(a));
    let captured = round_trip(&mut c, &mut s, 0, 100);
    assert_eq!(*executed.borrow(), 1);
    assert_eq!(captured.len(), 1);
    let d = &captured[0];
    let mut sent = 0;
    for byte in 0..d.len() {
        for bit in 0..8 {
            let mut f = d.clone();
            f[byte] ^= 1 << bit;
            s.handle_datagram(1, Some(CLIENT), &mut f.to_vec());
            sent += 1;
        }
    }
    for len in 0..d.len() {
        s.handle_datagram(1, Some(CLIENT), &mut d[..len].to_vec());
        sent += 1;
    }
    assert_eq!(*executed.borrow(), 1, "nothing altered ran");
    let stats = s.stats();
    assert_eq!(stats.auth_refused_total(), sent);
    assert_eq!(
        stats.decode_errors_total(),
        0,
        "nothing reached the decoder"
    );
    assert!(stats.auth_refused[Refusal::BadMac.index()] > 0);
    assert!(stats.auth_refused[Refusal::OtherCluster.index()] > 0);
    assert!(stats.auth_refused[Refusal::UnknownKey.index()] > 0);
    assert!(stats.auth_refused[Refusal::Malformed.index()] > 0);
    assert!(transmit(&mut s).is_empty(), "no answer to any of them");
}

#[test]
fn a_captured_datagram_is_accepted_once() {
    let a = auth(Keys::one(key(1)), 1);
    let (mut s, executed) = server(config(a.clone()));
    let mut c = client(config(a));
    // Split requests (several datagrams) and single ones.
    let mut captured = round_trip(&mut c, &mut s, 0, 5_000);
    captured.extend(round_trip(&mut c, &mut s, 0, 10));
    assert_eq!(*executed.borrow(), 2);
    for d in &captured {
        s.handle_datagram(1, Some(CLIENT), &mut d.to_vec());
    }
    assert_eq!(
        s.stats().auth_refused[Refusal::Replay.index()],
        captured.len() as u64
    );
    assert!(transmit(&mut s).is_empty(), "a replay is not even answered");
    // The session goes on.
    round_trip(&mut c, &mut s, 2, 10);
    assert_eq!(*executed.borrow(), 3);
}

#[test]
fn datagrams_without_the_key_change_nothing() {
    let a = auth(Keys::one(key(1)), 1);
    let (mut s, executed) = server(config(a.clone()));
    let mut c = client(config(a));
    round_trip(&mut c, &mut s, 0, 10);
    // A request built with the real encoder, as an attacker can: no trailer, then one
    // under another key, then one of another cluster under the right key.
    let mut forged = Vec::with_capacity(1200);
    start_datagram(&mut forged, CLIENT, SERVER, ViewId(1), 1, 1);
    let fields = MessageFields {
        kind: MessageKind::Request,
        request_type: COUNT,
        status: Status::Ok,
        slot: 0,
        request_number: 1_000,
    };
    assert!(push_message(
        &mut forged,
        fields,
        FragmentInfo::whole(3),
        b"bad"
    ));
    s.handle_datagram(1, Some(CLIENT), &mut forged.to_vec());
    let mut other_key = forged.clone();
    Auth::new(Keys::one(key(2)), ClusterId([1; 16]), [0; 16])
        .sealer(Sender::Rpc {
            endpoint: CLIENT.0,
            incarnation: 1,
        })
        .seal(&mut other_key, SERVER.0, 99);
    s.handle_datagram(1, Some(CLIENT), &mut other_key.to_vec());
    let mut other_cluster = forged.clone();
    Auth::new(Keys::one(key(1)), ClusterId([2; 16]), [0; 16])
        .sealer(Sender::Rpc {
            endpoint: CLIENT.0,
            incarnation: 1,
        })
        .seal(&mut other_cluster, SERVER.0, 99);
    s.handle_datagram(1, Some(CLIENT), &mut other_cluster.to_vec());
    assert_eq!(*executed.borrow(), 1);
    assert_eq!(s.stats().auth_refused_total(), 3);
    // The unsealed one's last bytes are read as a trailer, whatever they hold; the other
    // two are refused for what they are.
    assert!(s.stats().auth_refused[Refusal::UnknownKey.index()] >= 1);
    assert!(s.stats().auth_refused[Refusal::OtherCluster.index()] >= 1);
    // The forged request number 1,000 reached nothing: the next genuine one runs.
    round_trip(&mut c, &mut s, 2, 10);
    assert_eq!(*executed.borrow(), 2);
}

#[test]
fn engines_of_different_keys_or_clusters_never_talk() {
    for (server_auth, client_auth) in [
        (auth(Keys::one(key(1)), 1), auth(Keys::one(key(2)), 1)),
        (auth(Keys::one(key(1)), 1), auth(Keys::one(key(1)), 2)),
        (auth(Keys::one(key(1)), 1), None),
    ] {
        let (mut s, executed) = server(config(server_auth));
        let mut c = client(config(client_auth));
        c.batch_push(CALLER, SERVER, COUNT).extend_from_slice(b"x");
        assert!(!c.submit(CALLER, 0));
        for d in transmit(&mut c) {
            s.handle_datagram(0, Some(CLIENT), &mut d.to_vec());
        }
        assert_eq!(*executed.borrow(), 0);
        assert_eq!(s.stats().auth_refused_total(), 1);
    }
}

#[test]
fn keys_rotate_with_no_datagram_refused() {
    let (old, new) = (key(1), key(2));
    let (mut s, executed) = server(config(auth(Keys::one(old.clone()), 1)));
    let mut c = client(config(auth(Keys::one(old.clone()), 1)));
    let mut now = 0;
    let mut check = |c: &mut Engine, s: &mut Engine| {
        now += 1;
        round_trip(c, s, now, 10);
        round_trip(c, s, now, 3_000);
    };
    check(&mut c, &mut s);
    // 1. Every node accepts the new key, still sealing with the old one.
    let accept_both = auth(Keys::two(old.clone(), new.clone()).unwrap(), 1);
    s.set_auth(accept_both.clone());
    check(&mut c, &mut s);
    c.set_auth(accept_both);
    check(&mut c, &mut s);
    // 2. Every node seals with the new key, still accepting the old one.
    let send_new = auth(Keys::two(new.clone(), old.clone()).unwrap(), 1);
    c.set_auth(send_new.clone());
    check(&mut c, &mut s);
    s.set_auth(send_new);
    check(&mut c, &mut s);
    // 3. The old key is dropped.
    let only_new = auth(Keys::one(new), 1);
    s.set_auth(only_new.clone());
    check(&mut c, &mut s);
    c.set_auth(only_new);
    check(&mut c, &mut s);
    assert_eq!(s.stats().auth_refused_total(), 0);
    assert_eq!(c.stats().auth_refused_total(), 0);
    assert_eq!(*executed.borrow(), 14);
    // A datagram sealed with the old key is refused now.
    let (mut s2, _) = server(config(auth(Keys::one(key(2)), 1)));
    let mut c2 = client(config(auth(Keys::one(old), 1)));
    c2.batch_push(CALLER, SERVER, COUNT).extend_from_slice(b"x");
    assert!(!c2.submit(CALLER, 0));
    for d in transmit(&mut c2) {
        s2.handle_datagram(0, Some(CLIENT), &mut d.to_vec());
    }
    assert_eq!(s2.stats().auth_refused[Refusal::UnknownKey.index()], 1);
}
