//! An attacker without the cluster key, against real node processes (issue 29, "Tests").
//! Every RPC and lease datagram carries a MAC under the cluster key and a sequence number
//! that the receiver's replay window takes once (crates/wire/src/auth.rs); these tests
//! check that what someone on the network can do without the key changes nothing a client
//! or an operator sees, and that each refusal is counted by its reason (INFO's
//! `dropped_*`, `ferrotx status --json`'s "recovery" -> "dropped").
//!
//! 1. Capture and replay: three nodes (three copies of every partition) serve a bank's
//!    transfers through every node; the cluster's datagrams are captured for 2 s on the
//!    loopback interface (a raw `AF_PACKET` socket), then sent again, exactly and with the
//!    original source address (a raw IP socket), and from an ordinary UDP socket: as they
//!    were, with a bit flipped, truncated, to another port of the cluster, as random
//!    garbage, and as a flood of such datagrams. No node may exit, no member be removed
//!    (same view, same lives), no money be lost and every acknowledged transfer stay.
//! 2. Forged membership messages: NEW-CONFIG (a view without a member, a higher id, "from
//!    the CM"), JOIN (a new life of a member) and FILLED, made with the real encoder and
//!    sent to every lease socket without a trailer, with a random one, with one naming an
//!    unknown key, and with one of the right key's fingerprint and a made-up tag.
//!    And a lease datagram captured on its way to one node (a `ferrotx status` probe) and
//!    sent to the others: they must refuse it as the node it was for does. (They took it
//!    until lease datagrams were sealed for their receiver: a membership message names
//!    none.)
//! 3. Key rotation under load: the key file rewritten (old, new), then (new, old), then
//!    (new), 3 s apart, while clients run: no client error, no view change, and then the
//!    old key is refused and the new one taken. And a node whose key file others can read
//!    refuses to start, saying `chmod 600`.
//!
//! Tests 1 and 2 capture and spoof with raw sockets, which need CAP_NET_RAW: without it
//! they are skipped, loudly, unless `FERROTX_REQUIRE_RAW=1` (CI runs as root and sets it).
//! `HOSTILE_TEST_SEED=N` repeats a run's random choices; `KILL_TEST_KEEP=1` keeps the run's
//! directory (node logs, configuration).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use ferrotx_cluster::{Configuration, View};
use ferrotx_membership::{Body, Message};
use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys, Sealer, TRAILER_BYTES};

use common::bank::Bank;
use common::capture::{Capture, Captured, Spoofer, raw_sockets_or_skip};
use common::nodes::{Nodes, one_cluster_at_a_time, settled_members};
use common::rolling::Rolling;
use common::{ferrotx, temp_path, test_ports};

/// The nodes' lease, as in kill_under_load.rs: short, so that a member that stopped
/// renewing under the attack would be removed within the test.
const LEASE_MS: u64 = 300;
const NODES: u16 = 3;
const ACCOUNTS: u64 = 20;
/// Bank clients, client `c` through node `c % NODES`.
const CLIENTS: usize = 3;

/// Load before the first observation, and after the attack before the last.
const WARMUP: Duration = Duration::from_secs(1);
const AFTER_ATTACK: Duration = Duration::from_secs(1);
/// How long the cluster's datagrams are captured.
const CAPTURE: Duration = Duration::from_secs(2);
/// Corrupted and misdirected copies of captured datagrams, and garbage, sent in test 1
/// after the exact replays: this many of each of the four kinds, paced.
const MUTATED_EACH: usize = 20_000;
/// Then a flood, unpaced: as fast as one thread can send, of the same four kinds.
const FLOOD: usize = 60_000;
/// The replays and corruptions are paced: this many datagrams, then `ATTACK_PAUSE`
/// (100,000 a second at most, several times what the cluster itself sends under the bank's
/// load). Unpaced, most of them would be lost in the receivers' socket buffers before a
/// node saw them, which tests less; the flood tests that.
const ATTACK_BURST: usize = 1_000;
const ATTACK_PAUSE: Duration = Duration::from_millis(10);
/// Forged membership messages are each sent this many times to each lease socket.
const FORGED_REPEATS: usize = 20;
/// Between key file rewrites: three of the nodes' reloads (`ferrotx_node::KEY_RELOAD`).
const ROTATION_STEP: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------
// The cluster, and what must not change.

/// Starts `NODES` node processes, one worker thread each, 4 partitions per node, three
/// copies of each, on the ports of test `test` of this file; waits until they formed a
/// cluster.
fn start_cluster(name: &str, test: u16) -> (Configuration, Nodes) {
    let config = Configuration::local(NODES, 3, 1, 4, test_ports(test)).expect("configuration");
    let nodes = Nodes::start_cluster(name, &config, LEASE_MS);
    (config, nodes)
}

/// What an attack must leave as it was (the view and its members' lives), and the drop
/// counters, summed over the members.
#[derive(Debug)]
struct Observed {
    view: u64,
    lives: Vec<(u64, u64)>,
    dropped: BTreeMap<String, u64>,
}

/// The cluster settled (every member alive, in its life, at the view) and every member's
/// INFO answered.
fn observe(nodes: &mut Nodes) -> Observed {
    let s = nodes.wait_status("every member alive, settled and answering INFO", |s| {
        settled_members(s).is_some_and(|m| m.len() == usize::from(NODES))
            && s["members"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["recovery"]["dropped"].is_object())
    });
    let members = s["members"].as_array().unwrap();
    let lives = members
        .iter()
        .map(|m| {
            (
                m["node"].as_u64().unwrap(),
                m["incarnation"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut dropped = BTreeMap::new();
    for m in members {
        for (name, n) in m["recovery"]["dropped"].as_object().unwrap() {
            *dropped.entry(name.clone()).or_insert(0) += n.as_u64().unwrap();
        }
    }
    Observed {
        view: s["configuration"].as_u64().unwrap(),
        lives,
        dropped,
    }
}

/// Panics unless the cluster is as it was `before`: no node process exited, the same
/// view, the same lives. Returns the drops counted since, by reason.
fn assert_unchanged(nodes: &mut Nodes, before: &Observed, what: &str) -> BTreeMap<String, u64> {
    let exited = nodes.exited();
    assert!(
        exited.is_empty(),
        "{what}: node processes exited: {exited:?}"
    );
    let after = observe(nodes);
    assert_eq!(
        (after.view, &after.lives),
        (before.view, &before.lives),
        "{what}: the view or a member's life changed (view, [(node, life)])"
    );
    after
        .dropped
        .iter()
        .map(|(name, n)| {
            let was = before.dropped.get(name).copied().unwrap_or(0);
            (name.clone(), n.saturating_sub(was))
        })
        .collect()
}

/// The drops of `reason` in `dropped`.
fn drops(dropped: &BTreeMap<String, u64>, reason: &str) -> u64 {
    *dropped
        .get(reason)
        .unwrap_or_else(|| panic!("no dropped_{reason} in {dropped:?}"))
}

/// Every UDP port of the cluster: each endpoint's RPC socket, then each lease socket.
fn cluster_ports(config: &Configuration) -> (Vec<SocketAddrV4>, BTreeSet<u16>) {
    let v4 = |addr: SocketAddr| match addr {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => panic!("a local configuration is IPv4"),
    };
    let rpc: Vec<SocketAddrV4> = config.endpoint_addrs().map(|(_, a)| v4(a)).collect();
    let rpc_ports = rpc.iter().map(SocketAddrV4::port).collect();
    let lease = config
        .members()
        .iter()
        .map(|m| v4(config.lease_addr(m.node).expect("a lease address")));
    (rpc.iter().copied().chain(lease).collect(), rpc_ports)
}

/// The run's random choices: xorshift64* from `HOSTILE_TEST_SEED` or the clock (printed).
struct Rng(u64);

impl Rng {
    fn from_env(test: &str) -> Self {
        let seed = std::env::var("HOSTILE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(ferrotx_node::incarnation_from_clock);
        println!("{test}: HOSTILE_TEST_SEED={seed}");
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

// ---------------------------------------------------------------------------------------
// 1. Capture and replay.

/// Datagrams of the attack, by kind.
#[derive(Debug, Default)]
struct Sent {
    /// Captured datagrams sent again from their own source address (raw socket), to the
    /// RPC sockets and to the lease sockets.
    spoofed_rpc: usize,
    spoofed_lease: usize,
    /// Sent again from an ordinary socket, as captured.
    replayed: usize,
    flipped: usize,
    truncated: usize,
    /// To another port of the cluster (another node, or lease <-> RPC).
    redirected: usize,
    garbage: usize,
    /// Of the four kinds above, the flood's share (unpaced).
    flood: usize,
    /// sendto failures (a full socket buffer: ENOBUFS).
    failed: usize,
}

impl Sent {
    fn total(&self) -> usize {
        self.spoofed_rpc
            + self.spoofed_lease
            + self.replayed
            + self.flipped
            + self.truncated
            + self.redirected
            + self.garbage
    }
}

/// Sends datagrams from an ordinary UDP socket, paced or not.
struct Sender {
    socket: UdpSocket,
    in_burst: usize,
}

impl Sender {
    fn send(&mut self, payload: &[u8], target: SocketAddrV4, paced: bool, sent: &mut Sent) {
        if self.socket.send_to(payload, target).is_err() {
            sent.failed += 1;
        }
        if paced {
            pace(&mut self.in_burst);
        }
    }
}

/// Every `ATTACK_BURST` calls, a pause of `ATTACK_PAUSE`.
fn pace(in_burst: &mut usize) {
    *in_burst += 1;
    if *in_burst == ATTACK_BURST {
        *in_burst = 0;
        std::thread::sleep(ATTACK_PAUSE);
    }
}

/// Sends one copy of `d` changed in the way numbered `way` (a bit flipped, truncated, to
/// another port) or, for `way` 3, random garbage to a port of the cluster.
fn send_mutated(
    d: &Captured,
    way: usize,
    targets: &[SocketAddrV4],
    paced: bool,
    sender: &mut Sender,
    sent: &mut Sent,
    rng: &mut Rng,
) {
    match way {
        0 => {
            let mut flipped = d.payload.clone();
            let bit = rng.below(8 * flipped.len());
            flipped[bit / 8] ^= 1 << (bit % 8);
            sender.send(&flipped, d.target, paced, sent);
            sent.flipped += 1;
        }
        1 => {
            let length = rng.below(d.payload.len());
            sender.send(&d.payload[..length], d.target, paced, sent);
            sent.truncated += 1;
        }
        2 => {
            let others: Vec<&SocketAddrV4> = targets.iter().filter(|t| **t != d.target).collect();
            sender.send(&d.payload, *others[rng.below(others.len())], paced, sent);
            sent.redirected += 1;
        }
        _ => {
            let length = rng.below(1_500);
            let garbage = rng.bytes(length);
            sender.send(&garbage, targets[rng.below(targets.len())], paced, sent);
            sent.garbage += 1;
        }
    }
}

/// Sends the attack of test 1 from `captured`: each datagram again exactly, from its own
/// source address; each again from an ordinary socket; `MUTATED_EACH` copies with a bit
/// flipped, truncated, and to another port of the cluster, and as many of random garbage,
/// paced; then a flood of `FLOOD` of those four kinds, unpaced.
fn attack(
    captured: &[Captured],
    targets: &[SocketAddrV4],
    rpc_ports: &BTreeSet<u16>,
    spoofer: &mut Spoofer,
    rng: &mut Rng,
) -> Sent {
    let mut sent = Sent::default();
    let mut in_burst = 0;
    for d in captured {
        if spoofer.send(d.source, d.target, &d.payload).is_err() {
            sent.failed += 1;
        }
        if rpc_ports.contains(&d.target.port()) {
            sent.spoofed_rpc += 1;
        } else {
            sent.spoofed_lease += 1;
        }
        pace(&mut in_burst);
    }
    let mut sender = Sender {
        socket: UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("a UDP socket"),
        in_burst,
    };
    for d in captured {
        sender.send(&d.payload, d.target, true, &mut sent);
        sent.replayed += 1;
    }
    for i in 0..4 * MUTATED_EACH {
        let d = &captured[rng.below(captured.len())];
        send_mutated(d, i % 4, targets, true, &mut sender, &mut sent, rng);
    }
    for i in 0..FLOOD {
        let d = &captured[rng.below(captured.len())];
        send_mutated(d, i % 4, targets, false, &mut sender, &mut sent, rng);
        sent.flood += 1;
    }
    sent
}

/// Captures a loaded cluster's datagrams and sends them again, corrupted, misdirected and
/// with garbage and a flood, under the bank's load: nothing may change but the drop
/// counters.
#[test]
fn replayed_corrupted_and_flooded_datagrams_change_nothing() {
    let _serial = one_cluster_at_a_time();
    let started = Instant::now();
    let test = "replayed_corrupted_and_flooded_datagrams_change_nothing";
    // Raw sockets can be had (the capture's is opened again right before it captures: it
    // queues every packet from its opening on).
    let mut spoofer = match Capture::open().and_then(|_| Spoofer::open()) {
        Ok(raw) => raw,
        Err(e) if raw_sockets_or_skip(test, &e) => return,
        Err(e) => panic!("FERROTX_REQUIRE_RAW=1 and no raw socket: {e}"),
    };
    let mut rng = Rng::from_env(test);
    let (config, mut nodes) = start_cluster("hostile-replay", 0);
    let addrs = nodes.addrs.clone();
    let bank = Bank::open(&addrs, ACCOUNTS);
    let formed_in = started.elapsed();
    let clients = bank.start(CLIENTS);
    std::thread::sleep(WARMUP);
    let before = observe(&mut nodes);

    let (targets, rpc_ports) = cluster_ports(&config);
    let ports: BTreeSet<u16> = targets.iter().map(SocketAddrV4::port).collect();
    let transfers_at_capture = bank.transfers();
    let capture = Capture::open().expect("a capture socket");
    let captured = capture.datagrams_to(&ports, CAPTURE);
    let to_rpc = captured
        .iter()
        .filter(|d| rpc_ports.contains(&d.target.port()))
        .count();
    let to_lease = captured.len() - to_rpc;
    assert!(
        to_rpc > 0 && to_lease > 0,
        "captured {to_rpc} RPC and {to_lease} lease datagrams: the capture saw no traffic"
    );
    assert!(
        captured.iter().all(|d| d.payload.len() > TRAILER_BYTES),
        "a captured datagram without an authentication trailer"
    );
    let transfers_at_attack = bank.transfers();
    let attack_started = Instant::now();
    let sent = attack(&captured, &targets, &rpc_ports, &mut spoofer, &mut rng);
    let attack_took = attack_started.elapsed();
    let transfers_in_attack = bank.transfers() - transfers_at_attack;
    std::thread::sleep(AFTER_ATTACK);
    bank.stop(clients);

    let dropped = assert_unchanged(&mut nodes, &before, "after the attack");
    let summary = bank.check(addrs[0]);
    println!(
        "{test}: formed in {:.2} s\n  captured {to_rpc} RPC and {to_lease} lease datagrams \
         in {CAPTURE:?} ({} transfers meanwhile)\n  sent {} in {:.2} s: {sent:?}\n  \
         dropped since (all nodes): {dropped:?}\n  transfers during the attack: \
         {transfers_in_attack}\n  bank: {summary}\n  {:.1} s in all",
        formed_in.as_secs_f64(),
        transfers_at_attack - transfers_at_capture,
        sent.total(),
        attack_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        transfers_in_attack > 0,
        "no transfer was acknowledged during the attack"
    );
    // Every exact copy from its own source address passed the MAC and was refused by its
    // sender's replay window (a few may be lost in full socket buffers: three quarters
    // must arrive).
    assert!(
        drops(&dropped, "replay") >= (3 * (sent.spoofed_rpc + sent.spoofed_lease) / 4) as u64,
        "{} spoofed replays sent, {} refused as replays",
        sent.spoofed_rpc + sent.spoofed_lease,
        drops(&dropped, "replay")
    );
    // Bit flips land in the body or tag (bad MAC), the cluster id, the key's fingerprint or
    // the reserved bytes (malformed), as do truncations; exact copies from another address
    // are authentic but not from the member they name.
    for reason in [
        "bad_mac",
        "other_cluster",
        "unknown_key",
        "malformed",
        "not_member",
    ] {
        assert!(
            drops(&dropped, reason) > 0,
            "no datagram dropped as {reason}: {dropped:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 2. Forged membership messages.

/// The view in the cluster's coordination file.
fn coordination_view(config_path: &Path) -> View {
    let state = ferrotx_coord::default_state_path(config_path);
    ferrotx_coord::FileCoordination::read_path(&state)
        .expect("the coordination file")
        .expect("a view")
}

/// The cluster's id, as every datagram's trailer shows it.
fn cluster_id(config_path: &Path) -> ClusterId {
    let state = ferrotx_coord::default_state_path(config_path);
    ClusterId(
        ferrotx_coord::read_cluster_id(&state)
            .expect("the cluster id")
            .expect("a cluster id"),
    )
}

/// A trailer as `ferrotx_wire::auth` lays it out, with the fields given and a made-up tag.
fn made_up_trailer(cluster: ClusterId, fingerprint: u32, rng: &mut Rng) -> Vec<u8> {
    let mut trailer = cluster.0.to_vec();
    trailer.extend_from_slice(&fingerprint.to_le_bytes());
    trailer.extend_from_slice(&[0; 4]);
    trailer.extend_from_slice(&rng.next().to_le_bytes());
    trailer.extend(rng.bytes(TRAILER_BYTES - trailer.len()));
    trailer
}

/// Sends NEW-CONFIG (the view without a member, from the CM), JOIN (a new life of that
/// member) and FILLED made with the real encoder but without the key to every lease
/// socket: nothing may change but the drop counters.
#[test]
fn forged_membership_messages_without_the_key_change_nothing() {
    let _serial = one_cluster_at_a_time();
    let started = Instant::now();
    let test = "forged_membership_messages_without_the_key_change_nothing";
    let mut rng = Rng::from_env(test);
    let (config, mut nodes) = start_cluster("hostile-forged", 1);
    let addrs = nodes.addrs.clone();
    let load = Rolling::preload(&addrs, 100);
    let writers = load.start(0..2);
    let before = observe(&mut nodes);
    let view = coordination_view(&nodes.config);
    assert_eq!(view.id, before.view);
    let cm = view.members.iter().find(|m| m.node == view.cm).unwrap();
    let victim = *view.members.iter().find(|m| m.node != view.cm).unwrap();
    // What a forger can know: the view (it is in every NEW-CONFIG), the cluster id and the
    // key's fingerprint (in every trailer). Not the key.
    let cluster = cluster_id(&nodes.config);
    let (keys, _) =
        ferrotx_node::read_key_file(&ferrotx_node::key_path(&nodes.config, &config)).unwrap();
    let fingerprint = keys.send().fingerprint();

    let mut without_victim = view.clone();
    without_victim.id += 1;
    without_victim.members.retain(|m| m.node != victim.node);
    for copies in &mut without_victim.copies {
        copies.retain(|&n| n != victim.node);
    }
    without_victim.filling.clear();
    let partitions = view.copies.len() as u32;
    let forged = [
        Message {
            from: cm.node,
            incarnation: cm.incarnation,
            view: without_victim.id,
            seq: 0,
            body: Body::NewConfig(without_victim),
        },
        Message {
            from: victim.node,
            incarnation: victim.incarnation + 1,
            view: view.id,
            seq: 0,
            body: Body::Join,
        },
        Message {
            from: victim.node,
            incarnation: victim.incarnation,
            view: view.id,
            seq: 0,
            body: Body::Filled {
                partitions: (0..partitions).collect(),
            },
        },
    ];
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut sent = 0;
    for repeat in 0..FORGED_REPEATS {
        for message in &forged {
            let mut message = message.clone();
            message.seq = repeat as u64;
            let mut bare = Vec::new();
            message.encode(&mut bare);
            let trailers = [
                Vec::new(),
                rng.bytes(TRAILER_BYTES),
                made_up_trailer(cluster, fingerprint ^ 1, &mut rng),
                made_up_trailer(cluster, fingerprint, &mut rng),
            ];
            for trailer in trailers {
                let datagram = [&bare[..], &trailer[..]].concat();
                for m in config.members() {
                    socket
                        .send_to(&datagram, config.lease_addr(m.node).unwrap())
                        .unwrap();
                    sent += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(LEASE_MS / 10));
    }
    // Long enough for a removal to show: the victim's lease and a reconfiguration.
    std::thread::sleep(Duration::from_millis(3 * LEASE_MS));
    load.stop(writers);
    let dropped = assert_unchanged(&mut nodes, &before, "after the forged messages");
    let read_back = load.check_read_back(&addrs, "forged membership messages");
    println!(
        "{test}: {sent} forged datagrams (NEW-CONFIG without node {}, JOIN of its next life, \
         FILLED), without a trailer, with a random one, an unknown key's and a made-up tag\n  \
         dropped since (all nodes): {dropped:?}\n  {read_back}\n  {:.1} s in all",
        victim.node,
        started.elapsed().as_secs_f64()
    );
    // Per message and node: the made-up tag is a bad MAC, the other key unknown, the random
    // trailer another cluster's (or malformed), the bare message malformed (or another
    // cluster's, if its last bytes happen to look so).
    let each = (FORGED_REPEATS * forged.len() * config.members().len()) as u64;
    assert!(drops(&dropped, "bad_mac") >= each, "{dropped:?}");
    assert!(drops(&dropped, "unknown_key") >= each, "{dropped:?}");
    assert!(
        drops(&dropped, "malformed") + drops(&dropped, "other_cluster") >= 2 * each,
        "{dropped:?}"
    );
}

/// Waits up to 500 ms for a datagram on `socket`: true if one came that opens under
/// `auth` and is a membership probe's answer.
/// A sealer of `auth` for a prober's life, as `ferrotx status` makes (node `u16::MAX`).
fn prober(auth: &Auth, incarnation: u64) -> Sealer {
    auth.sealer(ferrotx_wire::auth::Sender::Lease {
        node: u16::MAX,
        incarnation,
    })
}

fn probe_answer_arrives(socket: &UdpSocket, auth: &Auth) -> bool {
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        socket.set_read_timeout(Some(left)).unwrap();
        let Ok(n) = socket.recv(&mut buf) else {
            return false;
        };
        if let Ok((body, _)) = prober(auth, 1).open(&mut buf[..n], u32::from(u16::MAX))
            && let Ok(reply) = Message::decode(body)
            && matches!(reply.body, Body::ProbeReply { .. })
        {
            return true;
        }
    }
}

/// A sealed lease datagram is for one receiver: captured on its way to one node and sent
/// to another, it must be refused as it is by the node it was for (replay). The RPC path
/// has this (a packet names its target endpoint: "misdirected", counted as not_member);
/// a membership message names no receiver, and its sender numbers its datagrams with one
/// counter for all receivers, so each node's window has a gap for every datagram the
/// sender sent to the others. Here: a `ferrotx status` probe captured on its way to node
/// 0, sent again to node 0 (refused: a replay) and to the other nodes, which must not
/// answer either. A probe is harmless; a LEASE-GRANT the CM sent to one member, sent to
/// another, is taken by it if that member's request of the same number is outstanding,
/// which extends its lease past what the CM granted it.
#[test]
fn a_lease_datagram_sealed_for_one_node_is_refused_by_another() {
    let _serial = one_cluster_at_a_time();
    let test = "a_lease_datagram_sealed_for_one_node_is_refused_by_another";
    // Raw sockets can be had (the capture's is opened again right before it captures: it
    // queues every packet from its opening on).
    match Capture::open() {
        Ok(_) => {}
        Err(e) if raw_sockets_or_skip(test, &e) => return,
        Err(e) => panic!("FERROTX_REQUIRE_RAW=1 and no raw socket: {e}"),
    };
    let (config, mut nodes) = start_cluster("hostile-redirect", 4);
    let before = observe(&mut nodes);
    let (targets, _) = cluster_ports(&config);
    let cluster_ports: BTreeSet<u16> = targets.iter().map(SocketAddrV4::port).collect();
    let lease: Vec<SocketAddrV4> = targets[targets.len() - usize::from(NODES)..].to_vec();
    let lease_ports = lease.iter().map(SocketAddrV4::port).collect();
    // A status run during the capture: one probe to each member, sealed under the key.
    let config_path = nodes.config.clone();
    let capture = Capture::open().expect("a capture socket");
    let status = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        common::status(&config_path)
    });
    let captured = capture.datagrams_to(&lease_ports, Duration::from_millis(1_500));
    status.join().expect("ferrotx status");
    let probe = captured
        .iter()
        .find(|d| d.target == lease[0] && !cluster_ports.contains(&d.source.port()))
        .expect("the status probe to node 0 captured");
    let cluster = cluster_id(&nodes.config);
    let (keys, _) =
        ferrotx_node::read_key_file(&ferrotx_node::key_path(&nodes.config, &config)).unwrap();
    let auth = Auth::new(keys, cluster, [0; 16]);
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    socket.send_to(&probe.payload, lease[0]).unwrap();
    assert!(
        !probe_answer_arrives(&socket, &auth),
        "node 0 answered a probe it had answered before: its replay window took it again"
    );
    let mut answered = Vec::new();
    for (node, &target) in lease.iter().enumerate().skip(1) {
        socket.send_to(&probe.payload, target).unwrap();
        if probe_answer_arrives(&socket, &auth) {
            answered.push(node);
        }
    }
    let dropped = assert_unchanged(&mut nodes, &before, "after the redirected probes");
    println!(
        "{test}: a status probe to node 0 sent again to node 0: refused; to the other nodes: \
         answered by {answered:?}\n  dropped since (all nodes): {dropped:?}"
    );
    assert!(
        answered.is_empty(),
        "nodes {answered:?} answered a probe sealed for node 0 (captured on its way there and \
         sent to them): a lease datagram is not bound to its receiver, so one captured on its \
         way to one node is taken by every other node once"
    );
}

// ---------------------------------------------------------------------------------------
// 3. Key rotation under load.

/// The first key line of the key file's text.
fn first_key_line(text: &str) -> String {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .find(|l| !l.is_empty())
        .expect("a key line")
        .to_owned()
}

/// Replaces the key file at `path` by one of `lines`, as an operator should: written to a
/// new file of mode 0600 beside it, then renamed over it, so that a node never reads half
/// a file nor one others can read.
fn write_key_file(path: &Path, lines: &[&str]) {
    let temporary = path.with_extension("key.new");
    let _ = std::fs::remove_file(&temporary);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .unwrap();
    file.write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    file.sync_all().unwrap();
    std::fs::rename(&temporary, path).unwrap();
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key file's mode");
}

/// The key of the key line `line` (64 hexadecimal digits).
fn key_of(line: &str) -> Key {
    let mut material = [0u8; KEY_BYTES];
    for (i, byte) in material.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&line[2 * i..2 * i + 2], 16).unwrap();
    }
    Key::from_material(&material)
}

/// Probes node `node`'s lease socket at `addr` as `ferrotx status` does, sealed with `seal`: the
/// fingerprint of the key the answer is sealed with, if one that `open` opens came back
/// within 500 ms.
fn probe(node: u16, addr: SocketAddr, seal: &Auth, open: &Auth) -> Option<u32> {
    let mut out = Vec::new();
    // A life after every earlier prober's, so that no replay window refuses it.
    let incarnation = ferrotx_node::incarnation_from_clock();
    Message {
        from: u16::MAX,
        incarnation,
        view: 0,
        seq: 1,
        body: Body::Probe,
    }
    .encode(&mut out);
    prober(seal, incarnation).seal(&mut out, u32::from(node), 1);
    let mut open = prober(open, incarnation);
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    socket.send_to(&out, addr).unwrap();
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        socket.set_read_timeout(Some(left)).unwrap();
        let n = socket.recv(&mut buf).ok()?;
        if let Ok((body, _)) = open.open(&mut buf[..n], u32::from(u16::MAX))
            && let Ok(reply) = Message::decode(body)
            && matches!(reply.body, Body::ProbeReply { .. })
        {
            // The trailer's fingerprint: after the body and the 16-byte cluster id.
            let at = body.len() + 16;
            return Some(u32::from_le_bytes(buf[at..at + 4].try_into().unwrap()));
        }
    }
}

/// Rotates the cluster key under the bank's load, as docs/operations.md says (old and new,
/// then new and old, then new alone): no client sees an error, the view does not change,
/// no datagram of the cluster's is refused, and after each step every node seals with the
/// file's first key and accepts exactly the file's keys (probes sealed with each).
#[test]
fn rotating_the_key_under_load_costs_no_client_an_error() {
    let _serial = one_cluster_at_a_time();
    let started = Instant::now();
    let test = "rotating_the_key_under_load_costs_no_client_an_error";
    let (config, mut nodes) = start_cluster("hostile-rotation", 2);
    let addrs = nodes.addrs.clone();
    let bank = Bank::open(&addrs, ACCOUNTS);
    let clients = bank.start(CLIENTS);
    std::thread::sleep(WARMUP);
    let before = observe(&mut nodes);
    let key_path = ferrotx_node::key_path(&nodes.config, &config);
    let old = first_key_line(&std::fs::read_to_string(&key_path).unwrap());
    let new = ferrotx_node::new_key_line().unwrap();
    let cluster = cluster_id(&nodes.config);
    let sealed_with = |line: &str| Auth::new(Keys::one(key_of(line)), cluster, [1; 16]);
    let either = Auth::new(
        Keys::two(key_of(&old), key_of(&new)).unwrap(),
        cluster,
        [2; 16],
    );
    let transfers_before = bank.transfers();
    let mut steps = Vec::new();
    let mut refused_probes = 0;
    let rotation = [
        ("old, new", vec![&old[..], &new[..]]),
        ("new, old", vec![&new[..], &old[..]]),
        ("new", vec![&new[..]]),
    ];
    for (step, lines) in rotation {
        write_key_file(&key_path, &lines);
        std::thread::sleep(ROTATION_STEP);
        let errors = bank.errors();
        assert!(
            errors.is_empty(),
            "client errors with the keys ({step}) in the file: {:#?}",
            &errors[..errors.len().min(20)]
        );
        steps.push(bank.transfers());
        let first = key_of(lines[0]).fingerprint();
        for m in config.members() {
            let lease = config.lease_addr(m.node).unwrap();
            for key in [&old, &new] {
                let answer = probe(m.node, lease, &sealed_with(key), &either);
                let expected = lines.contains(&&key[..]).then_some(first);
                assert_eq!(
                    answer.map(|f| format!("{f:08x}")),
                    expected.map(|f| format!("{f:08x}")),
                    "with the keys ({step}) in the file, node {} answers a probe sealed with \
                     the {} key with one sealed with the key of this fingerprint (None: no answer)",
                    m.node,
                    if *key == old { "old" } else { "new" },
                );
                refused_probes += u64::from(expected.is_none());
            }
        }
    }
    bank.stop(clients);
    let dropped = assert_unchanged(&mut nodes, &before, "after the rotation");
    let summary = bank.check(addrs[0]);
    let errors = bank.errors();
    println!(
        "{test}: transfers acknowledged before the rotation {transfers_before}, after each \
         step {steps:?}\n  dropped during the rotation (all nodes): {dropped:?}\n  \
         bank: {summary}\n  {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    assert!(
        errors.is_empty(),
        "client errors: {:#?}",
        &errors[..errors.len().min(20)]
    );
    let per_step: Vec<u64> = [transfers_before]
        .iter()
        .chain(&steps)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1] - w[0])
        .collect();
    assert!(
        per_step.iter().all(|&n| n > 0),
        "no transfer acknowledged in a step of the rotation: {per_step:?}"
    );
    // Nothing refused but the probes sealed with the old key at the end.
    assert_eq!(
        drops(&dropped, "unknown_key"),
        refused_probes,
        "{dropped:?}"
    );
    for reason in ["bad_mac", "replay", "other_cluster", "malformed"] {
        assert_eq!(drops(&dropped, reason), 0, "{dropped:?}");
    }
}

/// A node whose key file others can read refuses to start, and says how to fix it.
#[test]
fn a_node_refuses_a_key_file_others_can_read() {
    let dir = temp_path("hostile-key-mode");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = Configuration::local(NODES, 3, 1, 4, test_ports(3)).unwrap();
    let config_path = dir.join("cluster.toml");
    std::fs::write(&config_path, config.to_toml_string()).unwrap();
    let key_path = ferrotx_node::key_path(&config_path, &config);
    ferrotx_node::write_new_key_file(&key_path).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = ferrotx()
        .args(["node", "--config"])
        .arg(&config_path)
        .args(["--id", "0", "--lease-ms", &LEASE_MS.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "a node with a key file of mode 644 still runs after 20 s:\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!status.success(), "exited with {status}: {stderr}");
    assert!(
        stderr.contains("chmod 600"),
        "{status}, and stderr does not say `chmod 600`: {stderr}"
    );
    println!(
        "a_node_refuses_a_key_file_others_can_read: {status}: {}",
        stderr.lines().next().unwrap_or("")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
