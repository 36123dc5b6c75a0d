//! Per-peer session state: the client half (our requests to the peer) and the server half
//! (the peer's requests to us), and what is queued for transmission to the peer.

use std::collections::VecDeque;

use ferrotx_wire::auth::ReplayWindow;
use ferrotx_wire::{EndpointId, MAX_PACKETS_PER_MESSAGE, MessageHeader, Status};

use crate::caller::CallerId;
use crate::rto::RttEstimator;

const BITMAP_WORDS: usize = MAX_PACKETS_PER_MESSAGE as usize / 64;

/// How far past the highest request number a server accepted from a session a new
/// request's number may be. A client numbers its requests to one life of a peer 1, 2, 3
/// and so on, and takes a number only for a free slot, so when it sends number n, every
/// number below n but those still outstanding (fewer than its credits, at most 255) was
/// answered, and so seen by the server; only calls failed by a configuration change leave
/// numbers the server may never see, at most 255 per change. 2^20 covers thousands of
/// such changes in a row, so a genuine request is never refused, while a forged or broken
/// request cannot jump a slot arbitrarily far: exhausting the 64-bit numbers would take
/// 2^44 of them, each counted (`Stats::request_number_jumps`).
pub(crate) const REQUEST_NUMBER_WINDOW: u64 = 1 << 20;

/// A client does not number requests past this on an `Overtaken` answer (see
/// `Status::Overtaken`): far beyond what a session reaches (2^62 requests are 146 years at
/// a billion a second), it leaves the arithmetic of request numbers room to never
/// overflow, whatever a forged answer claims.
pub(crate) const REQUEST_NUMBER_MAX: u64 = 1 << 62;

/// Reassembly of a message split into packets: which packets have arrived.
pub(crate) struct Reassembly {
    message_len: u32,
    packet_count: u16,
    received: u16,
    bitmap: [u64; BITMAP_WORDS],
}

/// What a fragment did to a reassembly.
#[derive(PartialEq, Eq, Debug)]
pub(crate) enum Fragment {
    /// New data: copy it in. `first` if the reassembly (re)started with it, so the buffer
    /// must be sized; `complete` if it was the last missing packet; `restarted` if it
    /// disagreed with the packets seen before (another length or packet count), which
    /// were dropped.
    New {
        first: bool,
        complete: bool,
        restarted: bool,
    },
    /// A packet already received.
    Duplicate,
}

impl Reassembly {
    pub(crate) fn new() -> Self {
        Self {
            message_len: 0,
            packet_count: 0,
            received: 0,
            bitmap: [0; BITMAP_WORDS],
        }
    }

    pub(crate) fn reset(&mut self) {
        if self.received > 0 {
            self.bitmap = [0; BITMAP_WORDS];
        }
        self.message_len = 0;
        self.packet_count = 0;
        self.received = 0;
    }

    /// Bytes its buffer holds for a message not complete yet (0 when empty or complete).
    pub(crate) fn buffered_bytes(&self) -> usize {
        if self.received > 0 && self.received < self.packet_count {
            self.message_len as usize
        } else {
            0
        }
    }

    /// True if `header`'s packet would start the reassembly (again): nothing received
    /// yet, or packets of another length or count (see `accept`).
    pub(crate) fn starts_with(&self, header: &MessageHeader) -> bool {
        self.received == 0
            || self.message_len != header.message_len.get()
            || self.packet_count != header.packet_count.get()
    }

    /// Accounts for one packet of a multi-packet message (decoder-validated header).
    ///
    /// A packet that disagrees with the earlier ones comes from another transmission of
    /// the message with other contents (a peer that restarted and ran the request again,
    /// or a broken one): the reassembly starts over from it rather than rejecting it, or
    /// it could never complete.
    pub(crate) fn accept(&mut self, header: &MessageHeader) -> Fragment {
        let count = header.packet_count.get();
        let len = header.message_len.get();
        let restarted =
            self.received > 0 && (self.message_len != len || self.packet_count != count);
        if restarted {
            self.reset();
        }
        let first = self.received == 0;
        if first {
            self.message_len = len;
            self.packet_count = count;
        }
        let index = usize::from(header.packet_index.get());
        let (word, bit) = (index / 64, 1u64 << (index % 64));
        if self.bitmap[word] & bit != 0 {
            return Fragment::Duplicate;
        }
        self.bitmap[word] |= bit;
        self.received += 1;
        Fragment::New {
            first,
            complete: self.received == self.packet_count,
            restarted,
        }
    }
}

/// A request of ours in flight on a client slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waiting {
    pub(crate) caller: CallerId,
    pub(crate) index: u16,
    pub(crate) request_number: u64,
    /// First transmission, for round-trip samples.
    pub(crate) first_sent_ns: u64,
    /// Latest transmission, for the retransmission timer.
    pub(crate) sent_ns: u64,
    /// Latest packet of a split response, so a long response still arriving is not
    /// mistaken for a lost request.
    pub(crate) progress_ns: u64,
    pub(crate) retransmits: u32,
    /// Length of the request, counted against the session's window while it waits.
    pub(crate) request_bytes: usize,
}

pub(crate) struct ClientSlot {
    pub(crate) waiting: Option<Waiting>,
    pub(crate) reassembly: Reassembly,
    /// A `TxOp::Request` for this slot is in the peer's queue.
    pub(crate) queued: bool,
}

/// Where the server half of a slot stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ServerState {
    /// No request seen on this slot yet.
    Empty,
    /// Packets of request `request_number` are arriving.
    Receiving,
    /// Request `request_number` runs in a deferred handler, which answers later
    /// (`Engine::respond`); duplicates are ignored meanwhile.
    Running,
    /// Request `request_number` ran; `response` is saved for duplicates.
    Done,
}

pub(crate) struct ServerSlot {
    pub(crate) request_number: u64,
    pub(crate) state: ServerState,
    pub(crate) request_type: u8,
    pub(crate) status: Status,
    /// Reassembly buffer of a multi-packet request; empty (no capacity) unless one is
    /// partly received (see `partial.rs`).
    pub(crate) request: Vec<u8>,
    /// When the latest packet of a partly received request arrived.
    pub(crate) progress_ns: u64,
    /// The saved response of the last finished request.
    pub(crate) response: Vec<u8>,
    /// Times the saved response was sent again (for `transmit::first_packet`).
    pub(crate) resends: u32,
    /// A `TxOp::Response` for this slot is in the peer's queue.
    pub(crate) queued: bool,
    /// The number of the latest request older than `request_number` that arrived, to be
    /// answered `Status::Overtaken` (`TxOp::Overtaken`).
    pub(crate) overtaken: u64,
    /// A `TxOp::Overtaken` for this slot is in the peer's queue.
    pub(crate) overtaken_queued: bool,
    pub(crate) reassembly: Reassembly,
}

impl ServerSlot {
    fn new() -> Self {
        Self {
            request_number: 0,
            state: ServerState::Empty,
            request_type: 0,
            status: Status::Ok,
            request: Vec::new(),
            progress_ns: 0,
            response: Vec::new(),
            resends: 0,
            queued: false,
            overtaken: 0,
            overtaken_queued: false,
            reassembly: Reassembly::new(),
        }
    }
}

/// A message queued for the peer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TxOp {
    /// The request waiting on this client slot.
    Request(u8),
    /// The saved response of this server slot.
    Response(u8),
    /// The answer `Status::Overtaken` to an older request on this server slot.
    Overtaken(u8),
    /// A connect request: learn the peer's incarnation before sending it any request.
    Connect,
    /// The answer to a peer's connect request.
    ConnectReply,
}

pub(crate) struct Peer {
    pub(crate) endpoint: EndpointId,
    /// Latest incarnation heard from the peer; 0 before the first datagram. In membership
    /// mode, the incarnation the configuration names (pinned).
    pub(crate) incarnation: u64,
    /// The peer's node is a member of the configuration. Always true outside membership
    /// mode; a non-member is sent nothing and heard from not at all.
    pub(crate) member: bool,

    // Client half.
    /// Number of our next request to the peer's current life: 1 for its first, then one
    /// more per request (see `REQUEST_NUMBER_WINDOW`).
    pub(crate) next_request_number: u64,
    pub(crate) client: Vec<ClientSlot>,
    pub(crate) free_slots: Vec<u8>,
    /// Calls waiting for a credit, in submission order.
    pub(crate) backlog: VecDeque<(CallerId, u16)>,
    /// Request bytes outstanding (sent, unanswered), bounded by `Config::window_bytes`.
    pub(crate) outstanding_bytes: usize,
    pub(crate) rtt: RttEstimator,
    /// The session's timeout is the estimate doubled this many times (see
    /// `handle_timeout`).
    pub(crate) backoff_shift: u32,
    /// When the backoff last grew; a request sent since then and answered at the first
    /// try shows the timeout fits again.
    pub(crate) backoff_since_ns: u64,
    /// Last time the peer was heard from, or time its first outstanding request left.
    pub(crate) last_heard_ns: u64,
    pub(crate) suspect: bool,

    // Server half: grown on demand up to 256 slots (the slot number is one byte).
    pub(crate) server: Vec<ServerSlot>,
    /// Highest request number accepted as new from the peer's current life, on any slot.
    pub(crate) request_number_high: u64,
    /// Bytes buffered for the peer's partly received requests (see `partial.rs`).
    pub(crate) partial_request_bytes: usize,

    // Connection: no request is sent before the peer's incarnation is known.
    /// When the pending connect request was last sent; `None` when not connecting.
    pub(crate) connect_sent_ns: Option<u64>,
    /// Connect retransmissions so far, for backoff.
    pub(crate) connect_retransmits: u32,
    /// A `TxOp::Connect` is in the queue.
    pub(crate) connect_queued: bool,
    /// A `TxOp::ConnectReply` is in the queue.
    pub(crate) connect_reply_queued: bool,

    // Transmission.
    pub(crate) tx: Vec<TxOp>,
    /// Ops of `tx` already written.
    pub(crate) tx_done: usize,
    /// Next packet of the op at `tx_done` (for split messages interrupted by a full batch).
    pub(crate) tx_packet: u16,
    /// In the engine's list of peers with something to send.
    pub(crate) queued: bool,

    // Authentication (`Config::auth`).
    /// Sequence number of the last datagram sealed for this peer. Never reset, not even
    /// when the peer restarts: a number is never sealed twice in this engine's life, so a
    /// datagram captured on its way to one life of the peer is a replay to the next.
    pub(crate) tx_seq: u64,
    /// The sequence numbers seen from the peer, per its life.
    pub(crate) rx_window: ReplayWindow,
}

impl Peer {
    pub(crate) fn new(endpoint: EndpointId, credits: u8, backlog: usize) -> Self {
        Self {
            endpoint,
            incarnation: 0,
            member: true,
            next_request_number: 1,
            client: (0..credits)
                .map(|_| ClientSlot {
                    waiting: None,
                    reassembly: Reassembly::new(),
                    queued: false,
                })
                .collect(),
            // Popped from the end: slot 0 is used first.
            free_slots: (0..credits).rev().collect(),
            backlog: VecDeque::with_capacity(backlog),
            outstanding_bytes: 0,
            rtt: RttEstimator::default(),
            backoff_shift: 0,
            backoff_since_ns: 0,
            last_heard_ns: 0,
            suspect: false,
            server: Vec::new(),
            request_number_high: 0,
            partial_request_bytes: 0,
            connect_sent_ns: None,
            connect_retransmits: 0,
            connect_queued: false,
            connect_reply_queued: false,
            tx: Vec::with_capacity(usize::from(credits) * 2),
            tx_done: 0,
            tx_packet: 0,
            queued: false,
            tx_seq: 0,
            rx_window: ReplayWindow::default(),
        }
    }

    /// Requests of ours waiting on this peer.
    pub(crate) fn outstanding(&self) -> usize {
        self.client.len() - self.free_slots.len()
    }

    /// The server half of `slot`, created on first use.
    pub(crate) fn server_slot(&mut self, slot: u8) -> &mut ServerSlot {
        let index = usize::from(slot);
        while self.server.len() <= index {
            self.server.push(ServerSlot::new());
        }
        &mut self.server[index]
    }

    /// The peer restarted. Its request numbers start again, so the server half is
    /// forgotten; responses it had begun to send us belong to its earlier life (the new
    /// one answers retransmissions afresh), so partly reassembled responses are dropped.
    /// Our numbering starts again too: the new life has seen none of our requests, and
    /// accepts numbers only within `REQUEST_NUMBER_WINDOW` of those it has seen. The
    /// caller fails what we had outstanding to the earlier life, and takes the returned
    /// bytes of partial requests freed off the engine's count.
    #[must_use]
    pub(crate) fn reset_for_restart(&mut self) -> usize {
        for slot in &mut self.server {
            slot.request_number = 0;
            slot.state = ServerState::Empty;
            slot.queued = false;
            slot.overtaken_queued = false;
            slot.free_partial();
        }
        let freed = std::mem::take(&mut self.partial_request_bytes);
        self.request_number_high = 0;
        self.next_request_number = 1;
        for slot in &mut self.client {
            slot.reassembly.reset();
        }
        self.tx
            .retain(|op| matches!(op, TxOp::Request(_) | TxOp::Connect));
        self.connect_reply_queued = false;
        self.tx_done = 0;
        self.tx_packet = 0;
        freed
    }
}
