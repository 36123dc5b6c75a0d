//! The engine: its tables and its public interface. Receiving, transmitting and the
//! retransmission scan live in `receive.rs`, `transmit.rs` and `retransmit.rs`.

use std::collections::VecDeque;

use ferrotx_wire::auth::{Auth, Sealer, Sender};
use ferrotx_wire::{EndpointId, MAX_MESSAGE_BYTES, RequestType, Status, ViewId};
use foldhash::fast::FixedState;
use hashbrown::HashMap;

use crate::caller::{BatchState, Call, Caller, CallerId, Outcome};
use crate::config::Config;
use crate::error::{HandlerError, RpcError};
use crate::handler::{Deferred, DeferredHandler, Handler, Registered};
use crate::session::{Peer, ServerState, TxOp, Waiting};
use crate::stats::Stats;

/// Most peers one engine talks to. Each costs a few tens of KiB of session state; 4,096
/// endpoints cover a cluster of hundreds of nodes of a dozen threads.
pub const MAX_PEERS: usize = 4096;

/// The request type the engine keeps for itself: a connect request, answered by the
/// engine with its incarnation (see `docs/rpc.md`, "Connecting"). Handlers cannot be
/// registered for it. Its entry in the registry of request types is
/// [`RequestType::Connect`]; this is its byte, as the engine's generic API takes it.
pub const CONNECT_REQUEST_TYPE: u8 = RequestType::Connect as u8;

/// Pending events are bounded: each peer is suspect at most once until heard from again.
const MAX_EVENTS: usize = MAX_PEERS;

/// Something the layer above should know.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Event {
    /// Requests wait on this peer and it has answered nothing for `suspect_after_ns`.
    /// The engine keeps retransmitting; the membership layer decides what to do.
    Suspect(EndpointId),
    /// A peer reported suspect was heard from again.
    Recovered(EndpointId),
    /// Membership mode: a datagram of this configuration id, newer than the engine's, was
    /// received (and dropped). Reported once per id higher than any reported before, so a
    /// flood of them makes one event; the membership layer should fetch the new
    /// configuration and call `Engine::switch_configuration`.
    NewerConfiguration(ViewId),
}

/// Who an engine seals as: its endpoint's life.
fn rpc_sender(local: EndpointId, config: &Config) -> Sender {
    Sender::Rpc {
        endpoint: local.0,
        incarnation: config.incarnation,
    }
}

/// The RPC engine of one endpoint. See the crate documentation for the order of calls.
pub struct Engine {
    pub(crate) config: Config,
    pub(crate) local: EndpointId,
    pub(crate) handlers: Vec<Option<Registered>>,
    pub(crate) callers: Vec<Caller>,
    pub(crate) ready: VecDeque<CallerId>,
    pub(crate) peers: Vec<Peer>,
    pub(crate) peer_index: HashMap<EndpointId, u32, FixedState>,
    /// Peers with queued transmissions, in the order they were queued.
    pub(crate) tx_peers: VecDeque<u32>,
    /// Requests waiting on all peers together.
    pub(crate) outstanding: usize,
    /// Peers we are connecting to (their incarnation unknown, requests waiting).
    pub(crate) connecting: usize,
    pub(crate) next_scan_ns: u64,
    pub(crate) events: VecDeque<Event>,
    pub(crate) stats: Stats,
    /// Set by the first [`Engine::switch_configuration`]: membership is then precise.
    pub(crate) membership: bool,
    /// Membership mode: the members' nodes and their incarnations.
    pub(crate) members: HashMap<u16, u64, FixedState>,
    /// Highest configuration id reported as `Event::NewerConfiguration`.
    pub(crate) newest_reported: ViewId,
    /// Bytes buffered for partly received requests, all peers together (`partial.rs`).
    pub(crate) partial_request_bytes: usize,
    /// This endpoint life's sealer, made from `config.auth`.
    pub(crate) sealer: Option<Sealer>,
}

impl Engine {
    /// An engine for endpoint `local`.
    pub fn new(local: EndpointId, config: Config) -> Self {
        config.check();
        Self {
            local,
            handlers: (0..=u8::MAX).map(|_| None).collect(),
            callers: (0..config.callers).map(|_| Caller::new()).collect(),
            ready: VecDeque::with_capacity(config.callers),
            peers: Vec::new(),
            peer_index: HashMap::with_hasher(FixedState::with_seed(0)),
            tx_peers: VecDeque::new(),
            outstanding: 0,
            connecting: 0,
            next_scan_ns: 0,
            events: VecDeque::new(),
            stats: Stats::default(),
            membership: false,
            members: HashMap::with_hasher(FixedState::with_seed(0)),
            newest_reported: ViewId::NONE,
            partial_request_bytes: 0,
            sealer: config
                .auth
                .as_ref()
                .map(|auth| auth.sealer(rpc_sender(local, &config))),
            config,
        }
    }

    /// This engine's endpoint.
    pub fn local(&self) -> EndpointId {
        self.local
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Replaces the keys and cluster id datagrams are sealed and opened with (a key
    /// rotation: see `ferrotx_wire::auth::Keys`). Peers' sequence numbers and replay
    /// windows carry on: they belong to lives, not keys.
    pub fn set_auth(&mut self, auth: Option<Auth>) {
        self.sealer = auth
            .as_ref()
            .map(|auth| auth.sealer(rpc_sender(self.local, &self.config)));
        self.config.auth = auth;
    }

    /// Counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Registers the handler of `request_type`, replacing any earlier one.
    ///
    /// Panics for `CONNECT_REQUEST_TYPE`, which the engine keeps for itself.
    pub fn register(&mut self, request_type: u8, handler: Handler) {
        assert_ne!(
            request_type, CONNECT_REQUEST_TYPE,
            "request type 0 is the engine's own"
        );
        self.handlers[usize::from(request_type)] = Some(Registered::Now(handler));
    }

    /// Registers a handler of `request_type` that answers later, through
    /// [`Engine::respond`] (a request whose work must wait: a lock queue, a commit). The
    /// request still runs at most once: duplicates are ignored while it runs and get the
    /// saved answer after. Panics for `CONNECT_REQUEST_TYPE`.
    pub fn register_deferred(&mut self, request_type: u8, handler: DeferredHandler) {
        assert_ne!(
            request_type, CONNECT_REQUEST_TYPE,
            "request type 0 is the engine's own"
        );
        self.handlers[usize::from(request_type)] = Some(Registered::Later(handler));
    }

    /// Answers the deferred request `token` with `response` (or a handler error), and
    /// queues the answer for transmission. A response over the message limit is answered
    /// as a handler error. False, doing nothing, if the request is gone:
    /// its client restarted, or the slot carries a later request.
    pub fn respond(&mut self, token: Deferred, response: Result<&[u8], HandlerError>) -> bool {
        let Some(peer) = self.peers.get_mut(token.peer as usize) else {
            return false;
        };
        if peer.incarnation != token.incarnation || peer.endpoint != token.source {
            return false;
        }
        let Some(slot) = peer.server.get_mut(usize::from(token.slot)) else {
            return false;
        };
        if slot.request_number != token.request_number || slot.state != ServerState::Running {
            return false;
        }
        slot.response.clear();
        slot.status = match response {
            Ok(bytes) if bytes.len() <= MAX_MESSAGE_BYTES as usize => {
                slot.response.extend_from_slice(bytes);
                Status::Ok
            }
            Ok(_) => {
                // Never sent over the limit: the caller gets a handler error instead.
                self.stats.responses_over_limit += 1;
                slot.response
                    .extend_from_slice(crate::receive::RESPONSE_OVER_LIMIT.as_bytes());
                Status::HandlerError
            }
            Err(e) => {
                slot.response.extend_from_slice(e.0.as_bytes());
                Status::HandlerError
            }
        };
        slot.state = ServerState::Done;
        self.stats.deferred_answered += 1;
        self.queue_tx(token.peer, TxOp::Response(token.slot));
        true
    }

    /// Tells the engine the incarnation of `endpoint`, as a membership layer that knows it
    /// may, so that requests to it need no connect round trip first. Learning it from the
    /// peer itself (the default) costs one round trip per session.
    ///
    /// In membership mode it does nothing: the configuration pins incarnations (see
    /// [`Engine::switch_configuration`]).
    pub fn set_peer_incarnation(&mut self, endpoint: EndpointId, incarnation: u64) {
        assert!(incarnation > 0, "incarnation 0 means unknown");
        if self.membership {
            return;
        }
        if let Some(p) = self.peer(endpoint) {
            let peer = &mut self.peers[p as usize];
            if peer.incarnation < incarnation {
                peer.incarnation = incarnation;
            }
        }
    }

    /// Switches to configuration `id`, whose members are `members` (node, incarnation),
    /// and puts the engine in membership mode (FaRM's precise membership: no new request
    /// to a machine not in the configuration, nothing accepted from one). Called by the
    /// membership layer when a configuration commits; the first call ends the default mode
    /// (any configuration id accepted as long as it equals ours, incarnations learned by
    /// connecting, a new incarnation a restart). See `docs/rpc.md`, "Membership mode".
    ///
    /// - Datagrams sent from now on carry `id`; received ones of any other id are dropped.
    /// - Every call outstanding under the previous configuration completes at once (its
    ///   caller is reported by [`Engine::poll_ready`] when its batch is done): with
    ///   [`RpcError::ConfigurationChanged`] if it was sent (it may have run), with
    ///   [`RpcError::NotSent`] if it never left (waiting for a credit or a connect, or
    ///   queued but not yet written). Nothing is retransmitted across the change.
    /// - Endpoints of member nodes get the given incarnation, so requests to them need no
    ///   connect. Sessions with members of the same incarnation continue (request numbers
    ///   keep growing); a member with another incarnation than before is a new life, and
    ///   its server half starts afresh.
    /// - Endpoints of other nodes are non-members: requests to them fail at submit with
    ///   [`RpcError::NotMember`], their datagrams are dropped, their server half is freed.
    ///
    /// `id` must not be lower than the current configuration (it may equal it: the
    /// members are replaced and what is outstanding fails all the same). Not for the hot
    /// path: it visits every peer.
    pub fn switch_configuration(&mut self, now_ns: u64, id: ViewId, members: &[(u16, u64)]) {
        assert!(
            id >= self.config.view,
            "view ids only grow: {} after {}",
            id,
            self.config.view
        );
        assert!(
            members.iter().all(|&(_, incarnation)| incarnation > 0),
            "incarnation 0 means unknown"
        );
        self.config.view = id;
        self.membership = true;
        self.members.clear();
        self.members.extend(members.iter().copied());
        for p in 0..self.peers.len() {
            self.fail_for_reconfiguration(p as u32);
            let peer = &mut self.peers[p];
            match self.members.get(&peer.endpoint.node()) {
                Some(&incarnation) => {
                    if peer.incarnation != 0 && peer.incarnation != incarnation {
                        // Another life of the node: its request numbers start again.
                        self.partial_request_bytes -= peer.reset_for_restart();
                    }
                    peer.incarnation = incarnation;
                    peer.member = true;
                    peer.last_heard_ns = now_ns;
                }
                None => {
                    peer.member = false;
                    peer.suspect = false;
                    peer.server.clear();
                    peer.server.shrink_to_fit();
                    self.partial_request_bytes -= std::mem::take(&mut peer.partial_request_bytes);
                }
            }
        }
        debug_assert_eq!(self.outstanding, 0);
        debug_assert_eq!(self.connecting, 0);
    }

    /// Completes every call waiting on peer `p` because the configuration changed, and
    /// drops whatever was queued for it: responses queued now answer requests of the
    /// previous configuration, which its client no longer waits for.
    fn fail_for_reconfiguration(&mut self, p: u32) {
        for slot in 0..self.peers[p as usize].client.len() {
            let peer = &mut self.peers[p as usize];
            let client_slot = &mut peer.client[slot];
            let queued = std::mem::replace(&mut client_slot.queued, false);
            let Some(waiting) = client_slot.waiting.take() else {
                continue;
            };
            client_slot.reassembly.reset();
            peer.free_slots.push(slot as u8);
            peer.outstanding_bytes -= waiting.request_bytes;
            self.outstanding -= 1;
            // Queued and never retransmitted: its first transmission has not been written.
            let error = if queued && waiting.retransmits == 0 {
                RpcError::NotSent
            } else {
                RpcError::ConfigurationChanged
            };
            self.stats.calls_failed_by_reconfiguration += 1;
            self.complete_call(waiting.caller, waiting.index, Outcome::Failed(error));
        }
        while let Some((caller, index)) = self.peers[p as usize].backlog.pop_front() {
            self.stats.calls_failed_by_reconfiguration += 1;
            self.complete_call(caller, index, Outcome::Failed(RpcError::NotSent));
        }
        let peer = &mut self.peers[p as usize];
        if peer.connect_sent_ns.take().is_some() {
            self.connecting -= 1;
        }
        peer.connect_retransmits = 0;
        peer.connect_queued = false;
        peer.connect_reply_queued = false;
        for slot in &mut peer.server {
            slot.queued = false;
            slot.overtaken_queued = false;
        }
        peer.tx.clear();
        peer.tx_done = 0;
        peer.tx_packet = 0;
    }

    /// Adds a request to `caller`'s batch and returns its payload buffer (empty) to write
    /// into. The first push after a batch completed starts a new batch.
    ///
    /// Panics if the caller's batch is in flight or already holds `max_batch` requests.
    pub fn batch_push(
        &mut self,
        caller: CallerId,
        target: EndpointId,
        request_type: u8,
    ) -> &mut Vec<u8> {
        let max_batch = self.config.max_batch;
        let c = &mut self.callers[usize::from(caller.0)];
        match c.state {
            BatchState::Open => {}
            BatchState::Done => {
                c.state = BatchState::Open;
                c.used = 0;
            }
            BatchState::InFlight => panic!("caller {caller:?} pushed while its batch is in flight"),
        }
        assert!(
            c.used < max_batch,
            "caller {caller:?} exceeded max_batch {max_batch}"
        );
        if c.used == c.calls.len() {
            c.calls.push(Call {
                target,
                request_type,
                request: Vec::new(),
                response: Vec::new(),
                outcome: Outcome::Pending,
            });
        }
        let call = &mut c.calls[c.used];
        c.used += 1;
        call.target = target;
        call.request_type = request_type;
        call.outcome = Outcome::Pending;
        call.request.clear();
        call.response.clear();
        &mut call.request
    }

    /// Sends `caller`'s batch. The caller is reported by [`Engine::poll_ready`] once every
    /// request has an outcome, unless that is already so when this returns true (an empty
    /// batch, or one whose requests all failed before sending).
    pub fn submit(&mut self, caller: CallerId, now_ns: u64) -> bool {
        let index = usize::from(caller.0);
        let c = &mut self.callers[index];
        assert_eq!(
            c.state,
            BatchState::Open,
            "caller {caller:?} submitted twice"
        );
        let used = c.used;
        c.pending = used;
        c.state = BatchState::InFlight;
        if used == 0 {
            c.state = BatchState::Done;
            return true;
        }
        for i in 0..used {
            let c = &mut self.callers[index];
            let call = &c.calls[i];
            if call.request.len() > MAX_MESSAGE_BYTES as usize {
                c.complete(i, Outcome::Failed(RpcError::TooLarge));
                self.stats.calls_completed += 1;
                continue;
            }
            let target = call.target;
            let p = match self.member_peer(target) {
                Ok(p) => p,
                Err(e) => {
                    // The peer table is full (fail like an oversized request rather than
                    // waiting forever), or the target is not a member.
                    match e {
                        RpcError::NotMember => self.stats.requests_to_non_members += 1,
                        _ => self.stats.peers_exhausted += 1,
                    }
                    self.stats.calls_completed += 1;
                    self.callers[index].complete(i, Outcome::Failed(e));
                    continue;
                }
            };
            self.start_call(p, caller, i as u16, now_ns);
        }
        self.callers[index].state == BatchState::Done
    }

    /// The next caller whose batch has completed since it was submitted.
    pub fn poll_ready(&mut self) -> Option<CallerId> {
        self.ready.pop_front()
    }

    /// True if some caller's batch completed and has not been taken by `poll_ready`.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// True if `caller`'s batch has completed and not been reopened.
    pub fn is_done(&self, caller: CallerId) -> bool {
        self.callers[usize::from(caller.0)].state == BatchState::Done
    }

    /// Number of requests in `caller`'s current (or last) batch.
    pub fn batch_len(&self, caller: CallerId) -> usize {
        self.callers[usize::from(caller.0)].used
    }

    /// The outcome of request `index` of `caller`'s completed batch: the response payload,
    /// or why there is none.
    pub fn result(&self, caller: CallerId, index: usize) -> Result<&[u8], RpcError> {
        let c = &self.callers[usize::from(caller.0)];
        assert_eq!(
            c.state,
            BatchState::Done,
            "results read before the batch completed"
        );
        assert!(index < c.used);
        let call = &c.calls[index];
        match call.outcome {
            Outcome::Answered(Status::Ok) => Ok(&call.response),
            Outcome::Answered(Status::UnknownRequestType) => Err(RpcError::UnknownRequestType),
            Outcome::Answered(Status::HandlerError) => Err(RpcError::Handler),
            Outcome::Answered(Status::TargetRestarted) => Err(RpcError::TargetRestarted),
            Outcome::Answered(Status::Overtaken) => Err(RpcError::Overtaken),
            Outcome::Failed(e) => Err(e),
            Outcome::Pending => unreachable!("a done batch has no pending call"),
        }
    }

    /// The text a handler returned with its error, for request `index` of a completed
    /// batch whose result is `Err(RpcError::Handler)`.
    pub fn handler_error_text(&self, caller: CallerId, index: usize) -> &[u8] {
        &self.callers[usize::from(caller.0)].calls[index].response
    }

    /// The next event for the layer above.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Requests waiting for an answer, on all peers.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// True if there is something for [`Engine::poll_transmit`] to write.
    pub fn wants_transmit(&self) -> bool {
        !self.tx_peers.is_empty()
    }

    /// When [`Engine::handle_timeout`] should next be called; `None` while no request is
    /// outstanding (an idle engine needs no timer).
    pub fn next_timeout_ns(&self) -> Option<u64> {
        (self.outstanding > 0 || self.connecting > 0).then_some(self.next_scan_ns)
    }

    /// The index of `endpoint`'s session state if its node is a member (always, outside
    /// membership mode), created on first contact: `Err(NotMember)` for a non-member,
    /// `Err(TooManyPeers)` if the table is full. A non-member gets no session state
    /// unless it had one before it left.
    pub(crate) fn member_peer(&mut self, endpoint: EndpointId) -> Result<u32, RpcError> {
        if let Some(&p) = self.peer_index.get(&endpoint) {
            return if self.peers[p as usize].member {
                Ok(p)
            } else {
                Err(RpcError::NotMember)
            };
        }
        let pinned = if self.membership {
            match self.members.get(&endpoint.node()) {
                Some(&incarnation) => incarnation,
                None => return Err(RpcError::NotMember),
            }
        } else {
            0
        };
        let p = self.peer(endpoint).ok_or(RpcError::TooManyPeers)?;
        if self.membership {
            self.peers[p as usize].incarnation = pinned;
        }
        Ok(p)
    }

    /// The index of `endpoint`'s session state, created on first contact.
    pub(crate) fn peer(&mut self, endpoint: EndpointId) -> Option<u32> {
        if let Some(&p) = self.peer_index.get(&endpoint) {
            return Some(p);
        }
        if self.peers.len() >= MAX_PEERS {
            return None;
        }
        let p = self.peers.len() as u32;
        let backlog = self.config.callers * self.config.max_batch;
        self.peers
            .push(Peer::new(endpoint, self.config.credits, backlog));
        self.peer_index.insert(endpoint, p);
        Some(p)
    }

    /// Puts call `index` of `caller` on a free slot of peer `p`, or in its backlog.
    fn start_call(&mut self, p: u32, caller: CallerId, index: u16, now_ns: u64) {
        self.peers[p as usize].backlog.push_back((caller, index));
        self.release_backlog(p, now_ns);
    }

    /// Sends the calls waiting in peer `p`'s backlog, in order, while a slot is free and
    /// the session's window has room for the next one's bytes.
    pub(crate) fn release_backlog(&mut self, p: u32, now_ns: u64) {
        if self.peers[p as usize].incarnation == 0 {
            self.start_connect(p, now_ns);
            return;
        }
        let window_bytes = self.config.window_bytes;
        loop {
            let peer = &mut self.peers[p as usize];
            let Some(&(caller, index)) = peer.backlog.front() else {
                return;
            };
            let bytes = self.callers[usize::from(caller.0)].calls[usize::from(index)]
                .request
                .len();
            // One request may always be outstanding, however large, or it could never go.
            let fits =
                peer.outstanding_bytes == 0 || peer.outstanding_bytes + bytes <= window_bytes;
            if !fits {
                return;
            }
            let Some(slot) = peer.free_slots.pop() else {
                return;
            };
            peer.backlog.pop_front();
            self.assign_slot(p, slot, caller, index, now_ns);
        }
    }

    /// Sends a connect request to peer `p` unless one is in flight. Requests wait in the
    /// backlog until the peer's answer tells its incarnation: a request must name the
    /// incarnation it is meant for, or after a restart of the peer the new life could not
    /// tell it from one its earlier life already ran.
    fn start_connect(&mut self, p: u32, now_ns: u64) {
        let peer = &mut self.peers[p as usize];
        if peer.connect_sent_ns.is_some() {
            return;
        }
        peer.connect_sent_ns = Some(now_ns);
        peer.connect_retransmits = 0;
        peer.last_heard_ns = now_ns;
        if self.outstanding == 0 && self.connecting == 0 {
            self.next_scan_ns = now_ns + self.scan_interval_ns();
        }
        self.connecting += 1;
        self.queue_tx(p, TxOp::Connect);
    }

    /// Peer `p`'s incarnation has just become known: stop connecting and send what waits.
    pub(crate) fn connected(&mut self, p: u32, now_ns: u64) {
        debug_assert_ne!(self.peers[p as usize].incarnation, 0);
        if self.peers[p as usize].connect_sent_ns.take().is_some() {
            self.connecting -= 1;
        }
        self.release_backlog(p, now_ns);
    }

    /// Peer `p` restarted: every request outstanding to it was addressed to its earlier
    /// life, which may or may not have run it. Sent again, it would carry the new
    /// incarnation and could run twice, so each fails with `TargetRestarted` now.
    /// Requests still in the backlog were never sent and go to the new life.
    pub(crate) fn fail_outstanding(&mut self, p: u32) {
        for slot in 0..self.peers[p as usize].client.len() {
            let peer = &mut self.peers[p as usize];
            let Some(waiting) = peer.client[slot].waiting.take() else {
                continue;
            };
            peer.client[slot].reassembly.reset();
            peer.free_slots.push(slot as u8);
            peer.outstanding_bytes -= waiting.request_bytes;
            self.outstanding -= 1;
            self.complete_call(
                waiting.caller,
                waiting.index,
                Outcome::Failed(RpcError::TargetRestarted),
            );
        }
    }

    /// Sends call `index` of `caller` on client slot `slot` of peer `p`.
    pub(crate) fn assign_slot(
        &mut self,
        p: u32,
        slot: u8,
        caller: CallerId,
        index: u16,
        now_ns: u64,
    ) {
        let peer = &mut self.peers[p as usize];
        if peer.outstanding() == 1 {
            // First request after an idle spell: silence is measured from now.
            peer.last_heard_ns = now_ns;
        }
        let request_number = peer.next_request_number;
        peer.next_request_number += 1;
        let request_bytes = self.callers[usize::from(caller.0)].calls[usize::from(index)]
            .request
            .len();
        peer.outstanding_bytes += request_bytes;
        let s = &mut peer.client[usize::from(slot)];
        debug_assert!(s.waiting.is_none());
        s.waiting = Some(Waiting {
            caller,
            index,
            request_number,
            first_sent_ns: now_ns,
            sent_ns: now_ns,
            progress_ns: now_ns,
            retransmits: 0,
            request_bytes,
        });
        s.reassembly.reset();
        if self.outstanding == 0 && self.connecting == 0 {
            self.next_scan_ns = now_ns + self.scan_interval_ns();
        }
        self.outstanding += 1;
        self.queue_tx(p, TxOp::Request(slot));
    }

    /// Queues a message for peer `p`, unless it is queued already: however many
    /// duplicates of a request arrive before the next transmission, its response goes out
    /// once, so a datagram of copies cannot multiply into a flood of answers.
    pub(crate) fn queue_tx(&mut self, p: u32, op: TxOp) {
        let peer = &mut self.peers[p as usize];
        let queued = match op {
            TxOp::Request(slot) => &mut peer.client[usize::from(slot)].queued,
            TxOp::Response(slot) => &mut peer.server[usize::from(slot)].queued,
            TxOp::Overtaken(slot) => &mut peer.server[usize::from(slot)].overtaken_queued,
            TxOp::Connect => &mut peer.connect_queued,
            TxOp::ConnectReply => &mut peer.connect_reply_queued,
        };
        if *queued {
            return;
        }
        *queued = true;
        peer.tx.push(op);
        if !peer.queued {
            peer.queued = true;
            self.tx_peers.push_back(p);
        }
    }

    /// Period of the retransmission scan: a quarter of the smallest timeout, so a lost
    /// request waits at most 1.25 timeouts.
    pub(crate) fn scan_interval_ns(&self) -> u64 {
        (self.config.rto_min_ns / 4).max(1)
    }

    /// Records that call `index` of `caller` has an outcome.
    pub(crate) fn complete_call(&mut self, caller: CallerId, index: u16, outcome: Outcome) {
        self.stats.calls_completed += 1;
        if self.callers[usize::from(caller.0)].complete(usize::from(index), outcome) {
            self.ready.push_back(caller);
        }
    }

    pub(crate) fn push_event(&mut self, event: Event) {
        if self.events.len() < MAX_EVENTS {
            self.events.push_back(event);
        }
    }
}
