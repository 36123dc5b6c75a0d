//! Hostile input against live endpoints.
//!
//! A server and a client, each a real UDP worker on loopback with its own thread, exchange
//! RPCs (small ones, and ones split over several datagrams in either direction) while a
//! sprayer thread with a socket of its own sends both of them random bytes, truncated
//! datagrams, datagrams with one forged field, and well-formed datagrams that claim to come
//! from the other endpoint, aimed at the slots and request numbers the client is using. The
//! test requires that:
//!
//! - every RPC completes with the response the server derives from its request;
//! - the server executes each request of the client exactly once and nothing else, so no
//!   forged request ran and no forged restart reset the client's session;
//! - every datagram that arrived from the sprayer was dropped, each counted under the reason
//!   the sprayer predicted when it wrote it, and no datagram of the real endpoints was.
//!
//! Nothing here is timed: the deadline only stops a hung run so that it fails instead of
//! hanging. Set `FERROTX_HOSTILE_SEED` to repeat a run's hostile traffic and request sizes
//! (thread scheduling still varies).

use std::cell::RefCell;
use std::collections::HashSet;
use std::mem::offset_of;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrotx_node::{Idle, Worker};
use ferrotx_rpc::{Config, Engine, HandlerError, Request, Stats};
use ferrotx_transport::udp::{UdpConfig, UdpTransport};
use ferrotx_transport::{AddressBook, Transport, TransportStats, UDP_MAX_PAYLOAD_BYTES};
use ferrotx_wire::{
    DecodeError, EndpointId, FORMAT_VERSION, FragmentInfo, MAGIC, MAX_MESSAGE_BYTES,
    MAX_PACKETS_PER_MESSAGE, MessageFields, MessageHeader, MessageKind, PACKET_HEADER_BYTES,
    PacketHeader, Status, ViewId, decode, push_message, start_datagram,
};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SERVER: EndpointId = EndpointId::new(0, 0);
const CLIENT: EndpointId = EndpointId::new(1, 0);
/// Configuration id of the two real endpoints; the sprayer forges others.
const CONFIGURATION: u64 = 0x00c0_ffee;
/// Incarnation of both real endpoints; the sprayer forges higher and lower ones.
const INCARNATION: u64 = 1_000;
/// The one request type the server handles.
const CHECKED_ECHO: u8 = 7;

/// Client coroutines, batches per coroutine and requests per batch: 1,200 RPCs, three in
/// ten of them split over several datagrams one way or both, which keeps the client busy
/// for about half a second while the sprayer runs.
const COROUTINES: usize = 4;
const BATCHES: usize = 50;
const BATCH: usize = 6;
const REQUESTS_TOTAL: u64 = (COROUTINES * BATCHES * BATCH) as u64;
/// Client slots per session: every request of every coroutine can be in flight at once.
const CREDITS: u8 = (COROUTINES * BATCH) as u8;

/// Bytes at the start of every request: its id (u64) and the length of the response it
/// asks for (u32). Pattern bytes derived from the id fill the rest.
const REQUEST_HEADER_BYTES: usize = 12;
/// Bytes at the start of every response: the request's id and a checksum of the request.
const RESPONSE_HEADER_BYTES: usize = 16;
/// Largest response a request asks for; a request asking for more is corrupt.
const RESPONSE_BYTES_MAX: usize = 150_000;

/// The sprayer sends at least this many datagrams even if the client finishes first, so
/// that every kind of hostile datagram (21 kinds, to two endpoints) arrives over a
/// thousand times and every drop counter is exercised.
const SPRAY_MIN: u64 = 60_000;
/// While the client runs, the sprayer stays at most `SPRAY_AHEAD` datagrams plus
/// `SPRAY_PER_REQUEST` per request issued ahead of it. With large socket buffers the
/// client stays well ahead of that (it needs about 50 datagrams' time per request), so
/// the limit does not bind; where they are small (no `CAP_NET_ADMIN` and a low
/// `net.core.rmem_max`) it keeps the flood from starving the real traffic, which would
/// only make the run slow. It also bounds the spray: at most `SPRAY_AHEAD +
/// REQUESTS_TOTAL * SPRAY_PER_REQUEST` datagrams, or `SPRAY_MIN` if that is more.
const SPRAY_AHEAD: u64 = 10_000;
const SPRAY_PER_REQUEST: u64 = 200;
/// Each drop reason must be sprayed at each endpoint at least this often, and then be
/// counted at least once: receive buffers may overflow and lose sprayed datagrams, but
/// not this many of one kind.
const SENT_ENOUGH_TO_COUNT: u64 = 100;
/// Safety net: a run still going after this is stopped and fails. A healthy run takes
/// about a second.
const RUN_LIMIT: Duration = Duration::from_secs(20);
/// Workers poll briefly, yielding, then sleep: three busy threads share two cores in CI.
const IDLE: Idle = Idle {
    spin: Duration::from_micros(50),
    sleep_max: Duration::from_millis(10),
    yield_while_polling: true,
};

/// Payload bytes of the fragments of the split messages the sprayer forges.
const FORGED_FRAGMENT_BYTES: u32 = 1_200;

#[test]
fn hostile_datagrams_do_not_disturb_live_rpcs() {
    let seed = seed();
    println!("hostile: seed {seed} (set FERROTX_HOSTILE_SEED={seed} to repeat)");
    let started = Instant::now();
    let deadline = started + RUN_LIMIT;

    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let bind = |local| {
        UdpTransport::bind(local, loopback, &AddressBook::new(), UdpConfig::default())
            .expect("binding a loopback socket")
    };
    let (mut server_transport, mut client_transport) = (bind(SERVER), bind(CLIENT));
    let (server_addr, client_addr) = (server_transport.local_addr(), client_transport.local_addr());
    server_transport
        .insert_peer(CLIENT, client_addr)
        .expect("client address");
    client_transport
        .insert_peer(SERVER, server_addr)
        .expect("server address");

    let stop = Arc::new(AtomicBool::new(false));
    let client_done = Arc::new(AtomicBool::new(false));
    let issued = Arc::new(AtomicU64::new(0));
    let server = run_server(server_transport, started, stop.clone());
    let client = run_client(
        client_transport,
        seed,
        started,
        stop.clone(),
        client_done.clone(),
        issued.clone(),
    );
    let sprayer = {
        let (stop, client_done) = (stop.clone(), client_done.clone());
        std::thread::Builder::new()
            .name("hostile-sprayer".into())
            .spawn(move || {
                spray(
                    seed,
                    [server_addr, client_addr],
                    &issued,
                    &client_done,
                    &stop,
                    deadline,
                )
            })
            .expect("spawning the sprayer")
    };

    // Wait for the client's RPCs; a thread that ends early has panicked.
    while !client_done.load(Ordering::Relaxed)
        && Instant::now() < deadline
        && !server.is_finished()
        && !client.is_finished()
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    if !client_done.load(Ordering::Relaxed) {
        stop.store(true, Ordering::Relaxed);
    }
    // The sprayer goes on until it has sent `SPRAY_MIN`; the workers keep counting.
    let sprayed = sprayer.join().expect("the sprayer panicked");
    stop.store(true, Ordering::Relaxed);
    let server = server.join().expect("the server thread panicked");
    let client = client.join().expect("the client thread panicked");
    let elapsed = started.elapsed();
    print_report(&sprayed, &server, &client, elapsed);

    // Every real RPC completed with its own response.
    assert!(
        client_done.load(Ordering::Relaxed),
        "the client did not finish within {RUN_LIMIT:?}: {} of {REQUESTS_TOTAL} RPCs \
         answered; client {:?}; server {:?}",
        client.correct + client.wrong,
        client.counters.stats,
        server.counters.stats
    );
    assert_eq!(client.issued, REQUESTS_TOTAL);
    assert_eq!(
        client.wrong,
        0,
        "wrong responses, the first: {}",
        client.first_wrong.as_deref().unwrap_or("")
    );
    assert_eq!(client.correct, REQUESTS_TOTAL);
    assert_eq!(client.counters.stats.calls_completed, REQUESTS_TOTAL);

    // The server ran each request of the client once, and nothing forged.
    assert_eq!(server.corrupt, 0, "requests reached the handler corrupted");
    assert_eq!(
        server.foreign, 0,
        "a request of another source was executed"
    );
    assert_eq!(server.executed_twice, 0, "a request was executed twice");
    assert_eq!(server.counters.stats.requests_executed, REQUESTS_TOTAL);
    let expected_ids: HashSet<u64> = (1..=REQUESTS_TOTAL).collect();
    assert_eq!(server.executed_ids, expected_ids);
    assert_eq!(
        client.counters.stats.requests_executed, 0,
        "the client executed a forged request"
    );
    for (side, stats) in [
        ("server", &server.counters.stats),
        ("client", &client.counters.stats),
    ] {
        assert_eq!(
            stats.peer_restarts, 0,
            "{side}: a forged restart reset a session"
        );
        assert_eq!(
            stats.stale_incarnation, 0,
            "{side}: a forged incarnation was taken"
        );
        assert_eq!(
            stats.inconsistent_fragments, 0,
            "{side}: forged fragments were taken"
        );
        assert_eq!(stats.peers_exhausted, 0, "{side}: the peer table filled up");
    }

    // Every datagram from the sprayer was dropped, under the predicted reason, and only
    // those were.
    for (side, outcome, sent) in [
        ("server", &server.counters, &sprayed.sent_by_reason[0]),
        ("client", &client.counters, &sprayed.sent_by_reason[1]),
    ] {
        let Counters { stats, transport } = outcome;
        assert_eq!(
            stats.datagrams_received, transport.datagrams_received,
            "{side}: the engine did not see every datagram the transport received"
        );
        assert_eq!(
            stats.datagrams_dropped(),
            transport.unknown_sender,
            "{side}: dropped datagrams differ from those received from the sprayer"
        );
        let counted = dropped_by_reason(stats);
        assert_eq!(counted.iter().sum::<u64>(), stats.datagrams_dropped());
        for reason in 0..REASONS {
            let name = reason_name(reason);
            // Every reason is sprayed, and often enough that it must be counted.
            assert!(
                sent[reason] >= SENT_ENOUGH_TO_COUNT,
                "{side}: the sprayer sent only {} datagrams to be dropped as {name}",
                sent[reason]
            );
            assert!(
                counted[reason] <= sent[reason],
                "{side}: {} datagrams dropped as {name}, but the sprayer sent {} such",
                counted[reason],
                sent[reason]
            );
            assert!(
                counted[reason] > 0,
                "{side}: none of the {} datagrams sprayed as {name} was counted",
                sent[reason]
            );
        }
    }
}

// ---- The real RPCs ----

/// What a worker thread counted, read after it stopped.
struct Counters {
    stats: Stats,
    transport: TransportStats,
}

/// What the server thread saw.
struct ServerOutcome {
    counters: Counters,
    executed_ids: HashSet<u64>,
    executed_twice: u64,
    corrupt: u64,
    foreign: u64,
}

#[derive(Default)]
struct ServerTally {
    executed_ids: HashSet<u64>,
    executed_twice: u64,
    corrupt: u64,
    foreign: u64,
}

impl ServerTally {
    /// The handler: checks the request, records its id, answers with the response
    /// derived from it.
    fn execute(
        &mut self,
        request: &Request<'_>,
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        if request.source != CLIENT {
            self.foreign += 1;
            return Err(HandlerError("the test server serves only the test client"));
        }
        let Some(id) = check_request(request.payload) else {
            self.corrupt += 1;
            return Err(HandlerError("corrupt request payload"));
        };
        if !self.executed_ids.insert(id) {
            self.executed_twice += 1;
        }
        write_response(request.payload, response);
        Ok(())
    }
}

/// What the client thread saw.
struct ClientOutcome {
    counters: Counters,
    issued: u64,
    correct: u64,
    wrong: u64,
    first_wrong: Option<String>,
}

#[derive(Default)]
struct ClientTally {
    next_id: u64,
    correct: u64,
    wrong: u64,
    first_wrong: Option<String>,
    finished_coroutines: usize,
}

fn engine_config(callers: usize) -> Config {
    Config {
        view: ViewId(CONFIGURATION),
        incarnation: INCARNATION,
        callers,
        max_batch: BATCH,
        credits: CREDITS,
        ..Config::default()
    }
}

fn run_server(
    transport: UdpTransport,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> JoinHandle<ServerOutcome> {
    std::thread::Builder::new()
        .name("hostile-server".into())
        .spawn(move || {
            let tally = Rc::new(RefCell::new(ServerTally::default()));
            let mut engine = Engine::new(SERVER, engine_config(1));
            let handler_tally = tally.clone();
            engine.register(
                CHECKED_ECHO,
                Box::new(move |request, response| {
                    handler_tally.borrow_mut().execute(request, response)
                }),
            );
            let mut worker = Worker::new(transport, engine);
            ferrotx_node::run(&mut worker, epoch, IDLE, |_| !stop.load(Ordering::Relaxed));
            let stats = *worker.executor().shared().engine().stats();
            let tally = std::mem::take(&mut *tally.borrow_mut());
            ServerOutcome {
                counters: Counters {
                    stats,
                    transport: worker.transport().stats(),
                },
                executed_ids: tally.executed_ids,
                executed_twice: tally.executed_twice,
                corrupt: tally.corrupt,
                foreign: tally.foreign,
            }
        })
        .expect("spawning the server thread")
}

fn run_client(
    transport: UdpTransport,
    seed: u64,
    epoch: Instant,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    issued: Arc<AtomicU64>,
) -> JoinHandle<ClientOutcome> {
    std::thread::Builder::new()
        .name("hostile-client".into())
        .spawn(move || {
            let mut worker = Worker::new(transport, Engine::new(CLIENT, engine_config(COROUTINES)));
            let tally = Rc::new(RefCell::new(ClientTally {
                next_id: 1,
                ..ClientTally::default()
            }));
            for coroutine in 0..COROUTINES {
                let tally = tally.clone();
                let done = done.clone();
                let issued = issued.clone();
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((coroutine as u64 + 1) << 32));
                worker.executor().spawn(move |co| async move {
                    let mut requests: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
                    let mut expected = Vec::new();
                    for _ in 0..BATCHES {
                        requests.clear();
                        for _ in 0..BATCH {
                            let id = {
                                let mut t = tally.borrow_mut();
                                t.next_id += 1;
                                t.next_id - 1
                            };
                            let request = make_request(&mut rng, id);
                            co.push(SERVER, CHECKED_ECHO, &request);
                            requests.push(request);
                            // The sprayer aims its forgeries at request numbers near this.
                            issued.fetch_add(1, Ordering::Relaxed);
                        }
                        co.call().await;
                        for (index, request) in requests.iter().enumerate() {
                            expected.clear();
                            write_response(request, &mut expected);
                            let verdict = co.result(index, |result| match result {
                                Ok(response) if response == expected.as_slice() => None,
                                Ok(response) => Some(format!(
                                    "request {} of {} bytes: {} response bytes, not the {} \
                                     expected",
                                    request_id(request),
                                    request.len(),
                                    response.len(),
                                    expected.len()
                                )),
                                Err(e) => Some(format!(
                                    "request {} of {} bytes: {e}",
                                    request_id(request),
                                    request.len()
                                )),
                            });
                            let mut t = tally.borrow_mut();
                            match verdict {
                                None => t.correct += 1,
                                Some(text) => {
                                    t.wrong += 1;
                                    t.first_wrong.get_or_insert(text);
                                }
                            }
                        }
                    }
                    let mut t = tally.borrow_mut();
                    t.finished_coroutines += 1;
                    if t.finished_coroutines == COROUTINES {
                        done.store(true, Ordering::Relaxed);
                    }
                });
            }
            // The worker keeps serving (and counting hostile datagrams) after its
            // coroutines finish, until the test stops it.
            ferrotx_node::run(&mut worker, epoch, IDLE, |_| !stop.load(Ordering::Relaxed));
            let stats = *worker.executor().shared().engine().stats();
            let tally = std::mem::take(&mut *tally.borrow_mut());
            ClientOutcome {
                counters: Counters {
                    stats,
                    transport: worker.transport().stats(),
                },
                issued: tally.next_id - 1,
                correct: tally.correct,
                wrong: tally.wrong,
                first_wrong: tally.first_wrong,
            }
        })
        .expect("spawning the client thread")
}

/// A request with id `id`: mostly small, sometimes split over datagrams, sometimes asking
/// for a response that is.
fn make_request(rng: &mut ChaCha8Rng, id: u64) -> Vec<u8> {
    let small = |rng: &mut ChaCha8Rng| rng.random_range(0..600);
    let (request_len, response_len) = match rng.random_range(0..100) {
        0..70 => (small(rng), small(rng)),
        70..80 => (100_000, small(rng)),
        80..90 => (small(rng), RESPONSE_BYTES_MAX),
        _ => (200_000, 130_000),
    };
    let request_len = request_len.max(REQUEST_HEADER_BYTES);
    let response_len = response_len.max(RESPONSE_HEADER_BYTES) as u32;
    let mut request = Vec::with_capacity(request_len);
    request.extend_from_slice(&id.to_le_bytes());
    request.extend_from_slice(&response_len.to_le_bytes());
    request.extend((REQUEST_HEADER_BYTES..request_len).map(|i| pattern(id, i)));
    request
}

/// The id a request carries.
fn request_id(request: &[u8]) -> u64 {
    u64::from_le_bytes(request[..8].try_into().expect("8 bytes"))
}

/// The id of a well-formed request, or `None` if any byte is off.
fn check_request(payload: &[u8]) -> Option<u64> {
    if payload.len() < REQUEST_HEADER_BYTES {
        return None;
    }
    let id = request_id(payload);
    let response_len = u32::from_le_bytes(payload[8..12].try_into().expect("4 bytes")) as usize;
    let pattern_ok = payload[REQUEST_HEADER_BYTES..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(id, REQUEST_HEADER_BYTES + i));
    (pattern_ok && (RESPONSE_HEADER_BYTES..=RESPONSE_BYTES_MAX).contains(&response_len))
        .then_some(id)
}

/// The response to a well-formed request: its id, a checksum of the whole request, and
/// pattern bytes up to the length it asked for.
fn write_response(request: &[u8], response: &mut Vec<u8>) {
    let id = request_id(request);
    let response_len = u32::from_le_bytes(request[8..12].try_into().expect("4 bytes")) as usize;
    response.extend_from_slice(&id.to_le_bytes());
    response.extend_from_slice(&fnv1a(request).to_le_bytes());
    response.extend((RESPONSE_HEADER_BYTES..response_len).map(|i| pattern(!id, i)));
}

/// Byte `i` of the payloads of request `id` (and, with `!id`, of its response): differs
/// between requests and between neighbouring bytes, so a misplaced fragment or a response
/// to another request shows.
fn pattern(id: u64, i: usize) -> u8 {
    let x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (x >> 56) as u8 ^ (x >> 23) as u8
}

/// 64-bit FNV-1a, for the request checksum in a response.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

// ---- Why a datagram is dropped ----

/// Drop reasons, as indexes: the decoder's reasons (`DecodeError::index`), then these.
const MISDIRECTED: usize = DecodeError::COUNT;
const WRONG_CONFIGURATION: usize = DecodeError::COUNT + 1;
const FORGED_SOURCE: usize = DecodeError::COUNT + 2;
const REASONS: usize = DecodeError::COUNT + 3;

fn reason_name(reason: usize) -> &'static str {
    match reason {
        MISDIRECTED => "misdirected",
        WRONG_CONFIGURATION => "wrong_configuration",
        FORGED_SOURCE => "forged_source",
        decode => DecodeError::ALL[decode].name(),
    }
}

/// The engine's drop counters, by reason.
fn dropped_by_reason(stats: &Stats) -> [u64; REASONS] {
    let mut counted = [0; REASONS];
    counted[..DecodeError::COUNT].copy_from_slice(&stats.decode_errors);
    counted[MISDIRECTED] = stats.misdirected;
    counted[WRONG_CONFIGURATION] = stats.wrong_configuration;
    counted[FORGED_SOURCE] = stats.forged_source;
    counted
}

/// Why `victim` will drop this datagram from the sprayer, by the engine's rules in their
/// order. The sprayer's address is no endpoint's, so even a well-formed datagram for the
/// victim naming a real endpoint as its source is forged.
fn classify(bytes: &[u8], victim: EndpointId) -> usize {
    match decode(bytes) {
        Err(e) => e.index(),
        Ok(d) if d.target() != victim => MISDIRECTED,
        Ok(d) if d.view() != ViewId(CONFIGURATION) => WRONG_CONFIGURATION,
        Ok(_) => FORGED_SOURCE,
    }
}

// ---- The sprayer ----

/// Kinds of hostile datagram.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hostile {
    /// Random bytes, 0 to 2,000 of them.
    Random,
    /// Random bytes, up to the largest UDP payload.
    RandomLarge,
    /// A valid packet header followed by random bytes.
    RandomAfterHeader,
    /// A valid datagram with a few random bytes changed.
    Mangled,
    /// A valid datagram cut short at a random point.
    Cut,
    BadMagic,
    BadVersion,
    /// Flags or reserved header bytes set.
    BadReserved,
    /// A message count of zero.
    Empty,
    /// A message count above the messages present.
    CountTooLarge,
    /// A message kind that is neither request nor response.
    BadKind,
    /// A status on a request, or an unknown status on a response.
    BadStatus,
    /// A message length over `MAX_MESSAGE_BYTES`.
    TooLarge,
    /// Packet count, index, offset and lengths that describe no fragment.
    BadFragment,
    /// Bytes after the last message.
    TrailingBytes,
    /// Well-formed, for another endpoint.
    WrongTarget,
    /// Well-formed, of another configuration.
    WrongConfiguration,
    /// Well-formed, claiming to come from the victim's real peer.
    ForgedSource,
    /// Claiming to come from the victim's real peer, restarted (higher incarnation).
    ForgedRestart,
    /// Claiming to come from an earlier incarnation of the victim's real peer.
    ForgedStale,
    /// Claiming to come from another endpoint, sometimes the victim itself.
    ForgedOther,
}

impl Hostile {
    const ALL: [Hostile; 21] = [
        Hostile::Random,
        Hostile::RandomLarge,
        Hostile::RandomAfterHeader,
        Hostile::Mangled,
        Hostile::Cut,
        Hostile::BadMagic,
        Hostile::BadVersion,
        Hostile::BadReserved,
        Hostile::Empty,
        Hostile::CountTooLarge,
        Hostile::BadKind,
        Hostile::BadStatus,
        Hostile::TooLarge,
        Hostile::BadFragment,
        Hostile::TrailingBytes,
        Hostile::WrongTarget,
        Hostile::WrongConfiguration,
        Hostile::ForgedSource,
        Hostile::ForgedRestart,
        Hostile::ForgedStale,
        Hostile::ForgedOther,
    ];

    fn index(self) -> usize {
        Hostile::ALL
            .iter()
            .position(|&k| k == self)
            .expect("every kind is listed")
    }
}

/// What the sprayer sent.
#[derive(Default)]
struct SprayReport {
    sent: u64,
    send_errors: u64,
    /// Times the sprayer waited for the client to catch up.
    waits: u64,
    bytes: u64,
    sent_by_kind: [u64; Hostile::ALL.len()],
    /// Per victim (server, client), datagrams by the reason it will drop them.
    sent_by_reason: [[u64; REASONS]; 2],
}

/// Sends hostile datagrams to the server and the client (`targets`, in that order) until
/// the client is done and `SPRAY_MIN` were sent, the test stops or `deadline` passes.
fn spray(
    seed: u64,
    targets: [SocketAddr; 2],
    issued: &AtomicU64,
    client_done: &AtomicBool,
    stop: &AtomicBool,
    deadline: Instant,
) -> SprayReport {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding the sprayer");
    socket
        .set_write_timeout(Some(Duration::from_secs(1)))
        .expect("setting a write timeout");
    let mut forger = Forger::new(seed);
    let mut report = SprayReport::default();
    loop {
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            break;
        }
        let issued_now = issued.load(Ordering::Relaxed);
        if client_done.load(Ordering::Relaxed) {
            if report.sent >= SPRAY_MIN {
                break;
            }
        } else if report.sent >= SPRAY_AHEAD + issued_now * SPRAY_PER_REQUEST {
            // Let the client catch up (see `SPRAY_AHEAD`).
            report.waits += 1;
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let victim_index = forger.rng.random_range(0..2);
        let victim = [SERVER, CLIENT][victim_index];
        let kind = if forger.rng.random_bool(0.02) {
            Hostile::RandomLarge
        } else {
            loop {
                let kind = Hostile::ALL[forger.rng.random_range(0..Hostile::ALL.len())];
                if kind != Hostile::RandomLarge {
                    break kind;
                }
            }
        };
        let expected = forger.write(kind, victim, issued_now);
        let reason = classify(&forger.buf, victim);
        if let Some(expected) = expected {
            assert_eq!(
                reason_name(reason),
                reason_name(expected),
                "the sprayer's {kind:?} datagram is not dropped for the intended reason"
            );
        }
        match socket.send_to(&forger.buf, targets[victim_index]) {
            Ok(_) => {
                report.sent += 1;
                report.bytes += forger.buf.len() as u64;
                report.sent_by_kind[kind.index()] += 1;
                report.sent_by_reason[victim_index][reason] += 1;
            }
            Err(_) => report.send_errors += 1,
        }
    }
    report
}

/// Writes hostile datagrams into `buf`.
struct Forger {
    rng: ChaCha8Rng,
    buf: Vec<u8>,
    /// Offsets in `buf` of the message headers of the last well-formed datagram.
    messages: Vec<usize>,
    payload: Vec<u8>,
}

impl Forger {
    fn new(seed: u64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            buf: Vec::with_capacity(UDP_MAX_PAYLOAD_BYTES),
            messages: Vec::new(),
            payload: Vec::new(),
        }
    }

    /// Writes a datagram of `kind` for `victim` into `buf`; returns the reason it must be
    /// dropped for, when the kind determines it.
    fn write(&mut self, kind: Hostile, victim: EndpointId, issued: u64) -> Option<usize> {
        // Valid-looking datagrams come from the victim's real peer: only the forged
        // field is wrong.
        let peer = if victim == SERVER { CLIENT } else { SERVER };
        let well_formed =
            |f: &mut Self| f.well_formed(peer, victim, CONFIGURATION, INCARNATION, issued);
        match kind {
            Hostile::Random | Hostile::RandomLarge => {
                let len = if kind == Hostile::Random {
                    // Often shorter than a packet header, which is otherwise rare.
                    if self.rng.random_bool(0.25) {
                        self.rng.random_range(0..PACKET_HEADER_BYTES)
                    } else {
                        self.rng.random_range(0..2_000)
                    }
                } else {
                    self.rng.random_range(2_000..=UDP_MAX_PAYLOAD_BYTES)
                };
                self.buf.clear();
                self.buf.resize(len, 0);
                self.rng.fill_bytes(&mut self.buf);
                None
            }
            Hostile::RandomAfterHeader => {
                well_formed(self);
                self.buf.truncate(PACKET_HEADER_BYTES);
                let len = self.rng.random_range(0..2_000);
                self.buf.resize(PACKET_HEADER_BYTES + len, 0);
                self.rng.fill_bytes(&mut self.buf[PACKET_HEADER_BYTES..]);
                None
            }
            Hostile::Mangled => {
                well_formed(self);
                for _ in 0..self.rng.random_range(1..=4) {
                    let at = self.rng.random_range(0..self.buf.len());
                    self.buf[at] = self.rng.random();
                }
                None
            }
            Hostile::Cut => {
                well_formed(self);
                let cut = self.rng.random_range(0..self.buf.len());
                self.buf.truncate(cut);
                Some(if cut < PACKET_HEADER_BYTES {
                    DecodeError::Short.index()
                } else {
                    DecodeError::Truncated.index()
                })
            }
            Hostile::BadMagic => {
                well_formed(self);
                let magic = self.random_except(u64::from(MAGIC), u64::from(u16::MAX));
                self.put_packet(offset_of!(PacketHeader, magic), 2, magic);
                Some(DecodeError::BadMagic.index())
            }
            Hostile::BadVersion => {
                well_formed(self);
                let version = self.random_except(u64::from(FORMAT_VERSION), 255);
                self.put_packet(offset_of!(PacketHeader, version), 1, version);
                Some(DecodeError::BadVersion.index())
            }
            Hostile::BadReserved => {
                well_formed(self);
                if self.rng.random_bool(0.5) {
                    let flags = self.rng.random_range(1..=255);
                    self.put_packet(offset_of!(PacketHeader, flags), 1, flags);
                } else {
                    let reserved = self.rng.random_range(1..=u64::from(u16::MAX));
                    self.put_packet(offset_of!(PacketHeader, reserved), 2, reserved);
                }
                Some(DecodeError::BadReserved.index())
            }
            Hostile::Empty => {
                well_formed(self);
                self.put_packet(offset_of!(PacketHeader, message_count), 2, 0);
                Some(DecodeError::Empty.index())
            }
            Hostile::CountTooLarge => {
                well_formed(self);
                let count = self.messages.len() as u64;
                let claimed = self.rng.random_range(count + 1..=u64::from(u16::MAX));
                self.put_packet(offset_of!(PacketHeader, message_count), 2, claimed);
                Some(DecodeError::Truncated.index())
            }
            Hostile::BadKind => {
                well_formed(self);
                let kind = loop {
                    let kind: u8 = self.rng.random();
                    if kind != MessageKind::Request as u8 && kind != MessageKind::Response as u8 {
                        break kind;
                    }
                };
                let m = self.some_message();
                self.put_message(m, offset_of!(MessageHeader, kind), 1, u64::from(kind));
                Some(DecodeError::BadKind.index())
            }
            Hostile::BadStatus => {
                well_formed(self);
                let m = self.some_message();
                let lowest = if self.buf[m + offset_of!(MessageHeader, kind)]
                    == MessageKind::Request as u8
                {
                    Status::Ok as u64 + 1
                } else {
                    Status::Overtaken as u64 + 1
                };
                let status = self.rng.random_range(lowest..=255);
                self.put_message(m, offset_of!(MessageHeader, status), 1, status);
                Some(DecodeError::BadStatus.index())
            }
            Hostile::TooLarge => {
                well_formed(self);
                let m = self.some_message();
                let len = self
                    .rng
                    .random_range(u64::from(MAX_MESSAGE_BYTES) + 1..=u64::from(u32::MAX));
                self.put_message(m, offset_of!(MessageHeader, message_len), 4, len);
                Some(DecodeError::TooLarge.index())
            }
            Hostile::BadFragment => {
                well_formed(self);
                self.forge_fragment();
                Some(DecodeError::BadFragment.index())
            }
            Hostile::TrailingBytes => {
                well_formed(self);
                for _ in 0..self.rng.random_range(1..=64) {
                    let byte = self.rng.random();
                    self.buf.push(byte);
                }
                Some(DecodeError::TrailingBytes.index())
            }
            Hostile::WrongTarget => {
                let target = if self.rng.random_bool(0.5) {
                    peer
                } else {
                    EndpointId(self.random_except(u64::from(victim.0), u64::from(u32::MAX)) as u32)
                };
                self.well_formed(peer, target, CONFIGURATION, INCARNATION, issued);
                Some(MISDIRECTED)
            }
            Hostile::WrongConfiguration => {
                let configuration = self.random_except(CONFIGURATION, u64::MAX);
                self.well_formed(peer, victim, configuration, INCARNATION, issued);
                Some(WRONG_CONFIGURATION)
            }
            Hostile::ForgedSource => {
                well_formed(self);
                Some(FORGED_SOURCE)
            }
            Hostile::ForgedRestart => {
                let incarnation = self.rng.random_range(INCARNATION + 1..=u64::MAX);
                self.well_formed(peer, victim, CONFIGURATION, incarnation, issued);
                Some(FORGED_SOURCE)
            }
            Hostile::ForgedStale => {
                let incarnation = self.rng.random_range(0..INCARNATION);
                self.well_formed(peer, victim, CONFIGURATION, incarnation, issued);
                Some(FORGED_SOURCE)
            }
            Hostile::ForgedOther => {
                let source = if self.rng.random_bool(0.3) {
                    victim
                } else {
                    EndpointId(self.rng.random())
                };
                let incarnation = self.rng.random();
                self.well_formed(source, victim, CONFIGURATION, incarnation, issued);
                Some(FORGED_SOURCE)
            }
        }
    }

    /// Writes a datagram the decoder accepts: one to four messages, requests and responses,
    /// whole or fragments of split messages, on the slots and near the request numbers the
    /// client is using (`issued` requests so far).
    fn well_formed(
        &mut self,
        source: EndpointId,
        target: EndpointId,
        configuration: u64,
        incarnation: u64,
        issued: u64,
    ) {
        start_datagram(
            &mut self.buf,
            source,
            target,
            ViewId(configuration),
            incarnation,
            0,
        );
        self.messages.clear();
        let count = self.rng.random_range(1..=4);
        for _ in 0..count {
            let rng = &mut self.rng;
            let kind = if rng.random_bool(0.5) {
                MessageKind::Request
            } else {
                MessageKind::Response
            };
            let status = match kind {
                MessageKind::Request => Status::Ok,
                MessageKind::Response => {
                    [Status::Ok, Status::UnknownRequestType, Status::HandlerError]
                        [rng.random_range(0..3)]
                }
            };
            let request_number = if rng.random_bool(0.9) {
                rng.random_range(issued.saturating_sub(2 * u64::from(CREDITS))..=issued + 2)
            } else {
                rng.random()
            };
            let fields = MessageFields {
                kind,
                request_type: if rng.random_bool(0.9) {
                    CHECKED_ECHO
                } else {
                    rng.random()
                },
                status,
                slot: if rng.random_bool(0.9) {
                    rng.random_range(0..CREDITS)
                } else {
                    rng.random()
                },
                request_number,
            };
            let (fragment, len) = if rng.random_bool(0.7) {
                // Whole messages, now and then one as large as a datagram allows.
                let len = if count == 1 && rng.random_bool(0.1) {
                    rng.random_range(0..=60_000)
                } else {
                    rng.random_range(0..=FORGED_FRAGMENT_BYTES)
                };
                (FragmentInfo::whole(len), len)
            } else {
                let packet_count = rng.random_range(2..=4u16);
                let packet_index = rng.random_range(0..packet_count);
                let fragment = FragmentInfo {
                    message_len: u32::from(packet_count) * FORGED_FRAGMENT_BYTES,
                    offset: u32::from(packet_index) * FORGED_FRAGMENT_BYTES,
                    packet_index,
                    packet_count,
                };
                (fragment, rng.random_range(1..=FORGED_FRAGMENT_BYTES))
            };
            self.payload.resize(len as usize, 0);
            self.rng.fill_bytes(&mut self.payload);
            self.messages.push(self.buf.len());
            assert!(
                push_message(&mut self.buf, fields, fragment, &self.payload),
                "a forged message does not fit its datagram"
            );
        }
        debug_assert!(decode(&self.buf).is_ok());
    }

    /// Breaks the fragment fields of one message, one way or another.
    fn forge_fragment(&mut self) {
        let m = self.some_message();
        let field = |f| m + f;
        let get32 = |buf: &[u8], at: usize| {
            u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
        };
        let message_len = u64::from(get32(
            &self.buf,
            field(offset_of!(MessageHeader, message_len)),
        ));
        let fragment_len = u64::from(get32(
            &self.buf,
            field(offset_of!(MessageHeader, fragment_len)),
        ));
        let packet_count_at = offset_of!(MessageHeader, packet_count);
        let count = u64::from(u16::from_le_bytes(
            self.buf[field(packet_count_at)..field(packet_count_at) + 2]
                .try_into()
                .expect("2 bytes"),
        ));
        match self.rng.random_range(0..5) {
            0 => self.put_message(m, packet_count_at, 2, 0),
            1 => {
                let count = self
                    .rng
                    .random_range(u64::from(MAX_PACKETS_PER_MESSAGE) + 1..=u64::from(u16::MAX));
                self.put_message(m, packet_count_at, 2, count);
            }
            2 => {
                let index = self.rng.random_range(count..=u64::from(u16::MAX));
                self.put_message(m, offset_of!(MessageHeader, packet_index), 2, index);
            }
            3 => {
                // The fragment runs past the end of its message.
                let lowest = message_len - fragment_len + 1;
                let offset = self.rng.random_range(lowest..=u64::from(u32::MAX));
                self.put_message(m, offset_of!(MessageHeader, offset), 4, offset);
            }
            _ => {
                // A whole message that is not whole: a longer message length, or a split
                // message that claims to be in one packet.
                if count == 1 {
                    let len = message_len + self.rng.random_range(1..=1_000);
                    self.put_message(m, offset_of!(MessageHeader, message_len), 4, len);
                } else {
                    self.put_message(m, packet_count_at, 2, 1);
                    self.put_message(m, offset_of!(MessageHeader, packet_index), 2, 0);
                }
            }
        }
    }

    /// The offset of one of the messages of the last well-formed datagram.
    fn some_message(&mut self) -> usize {
        self.messages[self.rng.random_range(0..self.messages.len())]
    }

    /// A random number in `0..=max` other than `except`.
    fn random_except(&mut self, except: u64, max: u64) -> u64 {
        loop {
            let value = self.rng.random_range(0..=max);
            if value != except {
                return value;
            }
        }
    }

    /// Overwrites a little-endian field of `bytes` bytes at `at` in the packet header.
    fn put_packet(&mut self, at: usize, bytes: usize, value: u64) {
        self.buf[at..at + bytes].copy_from_slice(&value.to_le_bytes()[..bytes]);
    }

    /// Overwrites a little-endian field of the message whose header starts at `message`.
    fn put_message(&mut self, message: usize, at: usize, bytes: usize, value: u64) {
        self.put_packet(message + at, bytes, value);
    }
}

// ---- Seed and report ----

fn seed() -> u64 {
    match std::env::var("FERROTX_HOSTILE_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .expect("FERROTX_HOSTILE_SEED must be a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

fn print_report(
    sprayed: &SprayReport,
    server: &ServerOutcome,
    client: &ClientOutcome,
    elapsed: Duration,
) {
    println!(
        "hostile: {:.2} s; {} RPCs correct, {} wrong; {} hostile datagrams ({} MB, {} send \
         errors, {} waits); client retransmissions {}",
        elapsed.as_secs_f64(),
        client.correct,
        client.wrong,
        sprayed.sent,
        sprayed.bytes / 1_000_000,
        sprayed.send_errors,
        sprayed.waits,
        client.counters.stats.retransmissions,
    );
    println!("  sent by kind:");
    for kind in Hostile::ALL {
        println!(
            "    {:<20} {:>8}",
            format!("{kind:?}"),
            sprayed.sent_by_kind[kind.index()]
        );
    }
    println!(
        "  {:<20} {:>10} {:>10} {:>10} {:>10}",
        "dropped as", "to server", "counted", "to client", "counted"
    );
    let server_counted = dropped_by_reason(&server.counters.stats);
    let client_counted = dropped_by_reason(&client.counters.stats);
    for reason in 0..REASONS {
        println!(
            "  {:<20} {:>10} {:>10} {:>10} {:>10}",
            reason_name(reason),
            sprayed.sent_by_reason[0][reason],
            server_counted[reason],
            sprayed.sent_by_reason[1][reason],
            client_counted[reason],
        );
    }
    for (side, counters) in [("server", &server.counters), ("client", &client.counters)] {
        println!(
            "  {side}: {} datagrams received, {} from unknown senders, {} dropped by the engine",
            counters.transport.datagrams_received,
            counters.transport.unknown_sender,
            counters.stats.datagrams_dropped()
        );
    }
}
