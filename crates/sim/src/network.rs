//! The simulated network.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use ferrotx_transport::{RxBatch, Transport, TransportStats, TxBatch};
use ferrotx_wire::EndpointId;
use foldhash::fast::FixedState;
use hashbrown::{HashMap, HashSet};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Datagrams an endpoint's inbox holds before it drops, like a socket's receive buffer.
const INBOX_DATAGRAMS_MAX: usize = 4096;

/// What the network does to datagrams. Probabilities are per datagram.
#[derive(Clone, Debug)]
pub struct Faults {
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram is delivered twice (each copy delayed independently).
    pub duplicate: f64,
    /// Probability that a damaged copy of a datagram is delivered besides it: one bit
    /// flipped, cut short, or to another endpoint of the target's node.
    pub corrupt: f64,
    /// Smallest one-way delay.
    pub delay_min_ns: u64,
    /// Largest one-way delay; delays are uniform in between, which reorders datagrams.
    pub delay_max_ns: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            delay_min_ns: 1_000,
            delay_max_ns: 5_000,
        }
    }
}

struct InFlight {
    source: EndpointId,
    target: EndpointId,
    bytes: Vec<u8>,
}

/// The network: datagrams in flight ordered by delivery time, one inbox per endpoint.
pub struct SimNetwork {
    rng: ChaCha8Rng,
    faults: Faults,
    now_ns: u64,
    sequence: u64,
    in_flight: BinaryHeap<Reverse<(u64, u64)>>,
    payloads: HashMap<u64, InFlight, FixedState>,
    inboxes: HashMap<EndpointId, VecDeque<(EndpointId, Vec<u8>)>, FixedState>,
    /// Directed pairs (from, to) of nodes: datagrams from the first to the second are
    /// dropped. A symmetric partition cuts both directions.
    cut: HashSet<(u16, u16), FixedState>,
    /// A digest of every datagram delivered (time, source, target, bytes): two runs of one
    /// seed replay exactly when their digests are equal.
    digest: u64,
    /// The latest send sequence delivered on each path (source, target), to count
    /// reordering.
    last_delivered: HashMap<(EndpointId, EndpointId), u64, FixedState>,
    /// Datagrams sent, lost, duplicated, cut by a partition, dropped at a full inbox.
    pub counters: NetworkCounters,
}

/// What the network did.
#[derive(Clone, Copy, Default, Debug)]
pub struct NetworkCounters {
    /// Datagrams handed to the network.
    pub sent: u64,
    /// Lost at random.
    pub lost: u64,
    /// Delivered twice.
    pub duplicated: u64,
    /// Damaged copies delivered besides the originals.
    pub corrupted: u64,
    /// Dropped by a partition.
    pub partitioned: u64,
    /// Dropped at a full inbox.
    pub overflowed: u64,
    /// Dropped because the target endpoint no longer exists (its node crashed).
    pub to_crashed: u64,
    /// Delivered before a datagram sent earlier on the same path (source to target).
    pub reordered: u64,
    /// Put in an inbox.
    pub delivered: u64,
}

impl SimNetwork {
    /// A network drawing its faults from `seed`.
    pub fn new(seed: u64, faults: Faults) -> Rc<RefCell<Self>> {
        assert!(faults.delay_min_ns <= faults.delay_max_ns);
        Rc::new(RefCell::new(Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            faults,
            now_ns: 0,
            sequence: 0,
            in_flight: BinaryHeap::new(),
            payloads: HashMap::with_hasher(FixedState::with_seed(0)),
            inboxes: HashMap::with_hasher(FixedState::with_seed(0)),
            cut: HashSet::with_hasher(FixedState::with_seed(0)),
            digest: FNV_OFFSET,
            last_delivered: HashMap::with_hasher(FixedState::with_seed(0)),
            counters: NetworkCounters::default(),
        }))
    }

    /// Adds an endpoint and returns its transport.
    pub fn endpoint(network: &Rc<RefCell<Self>>, local: EndpointId) -> SimTransport {
        network.borrow_mut().inboxes.insert(local, VecDeque::new());
        SimTransport {
            network: network.clone(),
            local,
            stats: TransportStats::default(),
        }
    }

    /// Removes an endpoint (its node crashed): datagrams in its inbox are gone, and those
    /// still in flight to it are dropped on arrival. [`SimNetwork::endpoint`] adds it
    /// back, empty, for the node's next life.
    pub fn remove_endpoint(&mut self, local: EndpointId) {
        self.inboxes.remove(&local);
    }

    /// The faults in force.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Changes the faults from now on.
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// Cuts every path between a node of `side_a` and a node of `side_b`, in both
    /// directions, including datagrams already in flight.
    pub fn partition(&mut self, side_a: &[u16], side_b: &[u16]) {
        self.cut_one_way(side_a, side_b);
        self.cut_one_way(side_b, side_a);
    }

    /// Cuts the paths from every node of `from` to every node of `to`, one way only:
    /// datagrams the other way still arrive (a one-way partition, as a broken link or a
    /// firewall rule makes).
    pub fn cut_one_way(&mut self, from: &[u16], to: &[u16]) {
        for &a in from {
            for &b in to {
                if a != b {
                    self.cut.insert((a, b));
                }
            }
        }
    }

    /// A digest of every datagram delivered so far, with its time, source and target.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Heals every partition.
    pub fn heal(&mut self) {
        self.cut.clear();
    }

    fn is_cut(&self, source: EndpointId, target: EndpointId) -> bool {
        self.cut.contains(&(source.node(), target.node()))
    }

    /// Current simulated time.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Delivery time of the next datagram in flight.
    pub fn next_delivery_ns(&self) -> Option<u64> {
        self.in_flight.peek().map(|Reverse((t, _))| *t)
    }

    /// Advances time to `now_ns`, moving every datagram due by then into its inbox.
    pub fn advance(&mut self, now_ns: u64) {
        assert!(now_ns >= self.now_ns);
        self.now_ns = now_ns;
        while let Some(&Reverse((t, sequence))) = self.in_flight.peek() {
            if t > now_ns {
                break;
            }
            self.in_flight.pop();
            let datagram = self
                .payloads
                .remove(&sequence)
                .expect("payload of a datagram in flight");
            if self.is_cut(datagram.source, datagram.target) {
                self.counters.partitioned += 1;
                continue;
            }
            match self.inboxes.get_mut(&datagram.target) {
                Some(inbox) if inbox.len() < INBOX_DATAGRAMS_MAX => {
                    self.digest = fnv1a(self.digest, &t.to_le_bytes());
                    self.digest = fnv1a(self.digest, &datagram.source.0.to_le_bytes());
                    self.digest = fnv1a(self.digest, &datagram.target.0.to_le_bytes());
                    self.digest = fnv1a(self.digest, &datagram.bytes);
                    inbox.push_back((datagram.source, datagram.bytes));
                    self.counters.delivered += 1;
                    let last = self
                        .last_delivered
                        .entry((datagram.source, datagram.target))
                        .or_insert(0);
                    if sequence < *last {
                        self.counters.reordered += 1;
                    }
                    *last = (*last).max(sequence);
                }
                Some(_) => self.counters.overflowed += 1,
                None => self.counters.to_crashed += 1,
            }
        }
    }

    /// Adds an endpoint that is not a worker's (a node's lease socket): the caller sends
    /// with [`SimNetwork::send`] and receives with [`SimNetwork::take_inbox`].
    pub(crate) fn add_endpoint(&mut self, local: EndpointId) {
        self.inboxes.insert(local, VecDeque::new());
    }

    /// Takes every datagram waiting in `local`'s inbox, oldest first.
    pub(crate) fn take_inbox(&mut self, local: EndpointId) -> Vec<(EndpointId, Vec<u8>)> {
        self.inboxes
            .get_mut(&local)
            .map(|inbox| inbox.drain(..).collect())
            .unwrap_or_default()
    }

    /// Sends one datagram from `source` to `target`, subject to every fault in force.
    pub(crate) fn send(&mut self, source: EndpointId, target: EndpointId, bytes: &[u8]) {
        self.counters.sent += 1;
        if self.is_cut(source, target) {
            self.counters.partitioned += 1;
            return;
        }
        if self.rng.random_bool(self.faults.loss) {
            self.counters.lost += 1;
            return;
        }
        let copies = if self.rng.random_bool(self.faults.duplicate) {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            self.put_in_flight(source, target, bytes.to_vec());
        }
        // Checked first, so that a run without this fault draws what it drew before.
        if self.faults.corrupt > 0.0 && self.rng.random_bool(self.faults.corrupt) {
            self.counters.corrupted += 1;
            let mut damaged = bytes.to_vec();
            let mut to = target;
            match self.rng.random_range(0..3) {
                0 if !damaged.is_empty() => {
                    let bit = self.rng.random_range(0..damaged.len() * 8);
                    damaged[bit / 8] ^= 1 << (bit % 8);
                }
                1 => damaged.truncate(self.rng.random_range(0..=damaged.len())),
                _ => to = EndpointId::new(target.node(), self.rng.random_range(0..4)),
            }
            self.put_in_flight(source, to, damaged);
        }
    }

    fn put_in_flight(&mut self, source: EndpointId, target: EndpointId, bytes: Vec<u8>) {
        let delay = self
            .rng
            .random_range(self.faults.delay_min_ns..=self.faults.delay_max_ns);
        let sequence = self.sequence;
        self.sequence += 1;
        self.in_flight
            .push(Reverse((self.now_ns + delay, sequence)));
        self.payloads.insert(
            sequence,
            InFlight {
                source,
                target,
                bytes,
            },
        );
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a: a hash that is the same in every process and every build, for the replay
/// digest.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// One endpoint's view of the simulated network.
pub struct SimTransport {
    network: Rc<RefCell<SimNetwork>>,
    local: EndpointId,
    stats: TransportStats,
}

impl Transport for SimTransport {
    fn local(&self) -> EndpointId {
        self.local
    }

    fn send_batch(&mut self, batch: &TxBatch) -> usize {
        let mut network = self.network.borrow_mut();
        for (target, bytes) in batch.iter() {
            network.send(self.local, target, bytes);
        }
        self.stats.send_calls += 1;
        self.stats.datagrams_sent += batch.len() as u64;
        batch.len()
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> usize {
        batch.clear();
        let mut network = self.network.borrow_mut();
        // An endpoint removed by a crash receives nothing; its worker is gone too.
        let Some(inbox) = network.inboxes.get_mut(&self.local) else {
            return 0;
        };
        while batch.len() < batch.capacity() {
            let Some((source, bytes)) = inbox.pop_front() else {
                break;
            };
            batch.push(Some(source), &bytes);
        }
        self.stats.datagrams_received += batch.len() as u64;
        batch.len()
    }

    fn wait(&mut self, _timeout: Option<Duration>) {
        // The simulator advances time itself; there is nothing to wait for.
    }

    fn stats(&self) -> TransportStats {
        self.stats
    }
}
