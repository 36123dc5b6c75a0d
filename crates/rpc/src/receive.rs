//! Receiving: datagram checks, the server half (execute once, answer duplicates) and the
//! client half (match responses to waiting requests).

use ferrotx_wire::auth::Refusal;
use ferrotx_wire::{Datagram, EndpointId, MAX_MESSAGE_BYTES, Message, MessageKind, Status, decode};

use crate::caller::Outcome;
use crate::engine::{CONNECT_REQUEST_TYPE, Engine, Event};
use crate::error::RpcError;
use crate::handler::{Deferred, Registered, Request};
use crate::session::{
    Fragment, REQUEST_NUMBER_MAX, REQUEST_NUMBER_WINDOW, Reassembly, ServerSlot, ServerState, TxOp,
};
use crate::stats::Stats;

impl Engine {
    /// Takes one received datagram. `from` is the endpoint the transport saw it come from
    /// (`None` for an unknown address). Invalid datagrams are dropped and counted; nothing
    /// a peer sends can make this panic. With authentication on, the datagram is decrypted
    /// in place: `bytes` no longer hold what arrived.
    pub fn handle_datagram(&mut self, now_ns: u64, from: Option<EndpointId>, bytes: &mut [u8]) {
        self.stats.datagrams_received += 1;
        // Nothing is decoded before its MAC is checked: a datagram that did not come from
        // a holder of the cluster key is dropped here, whatever it says.
        let (bytes, seq) = match &mut self.sealer {
            Some(sealer) => match sealer.open(bytes, self.local.0) {
                Ok((body, seq)) => (body, Some(seq)),
                Err(refusal) => {
                    self.stats.auth_refused[refusal.index()] += 1;
                    return;
                }
            },
            None => (&*bytes, None),
        };
        let datagram = match decode(bytes) {
            Ok(d) => d,
            Err(e) => {
                self.stats.decode_errors[e.index()] += 1;
                return;
            }
        };
        if datagram.target() != self.local {
            self.stats.misdirected += 1;
            return;
        }
        if self.membership {
            self.handle_member_datagram(now_ns, from, &datagram, seq);
            return;
        }
        if datagram.view() != self.config.view {
            self.stats.wrong_configuration += 1;
            return;
        }
        let source = datagram.source();
        if from != Some(source) {
            self.stats.forged_source += 1;
            return;
        }
        let Some(p) = self.peer(source) else {
            self.stats.peers_exhausted += 1;
            return;
        };
        if !self.fresh(p, datagram.incarnation(), seq) {
            return;
        }
        let peer = &mut self.peers[p as usize];
        let incarnation = datagram.incarnation();
        // Incarnation 0 means "unknown" and no endpoint has it (`Config::check`).
        if incarnation < peer.incarnation || incarnation == 0 {
            self.stats.stale_incarnation += 1;
            return;
        }
        let learned = peer.incarnation == 0;
        let restarted = !learned && incarnation > peer.incarnation;
        if incarnation > peer.incarnation {
            peer.incarnation = incarnation;
        }
        peer.last_heard_ns = now_ns;
        let recovered = std::mem::replace(&mut peer.suspect, false);
        if restarted {
            self.partial_request_bytes -= peer.reset_for_restart();
            self.stats.peer_restarts += 1;
            self.fail_outstanding(p);
        }
        if recovered {
            self.push_event(Event::Recovered(source));
        }
        self.handle_messages(now_ns, p, source, &datagram);
        if learned {
            // Anything from the peer tells its incarnation, a connect reply or not.
            self.connected(p, now_ns);
        } else if restarted {
            self.release_backlog(p, now_ns);
        }
    }

    /// A decoded, correctly addressed datagram in membership mode: only the current
    /// configuration, only members, only the incarnation the configuration names. A new
    /// life of a member is not a restart here: it is dropped until the membership layer
    /// admits it with a later configuration.
    fn handle_member_datagram(
        &mut self,
        now_ns: u64,
        from: Option<EndpointId>,
        datagram: &Datagram<'_>,
        seq: Option<u64>,
    ) {
        let source = datagram.source();
        // Checked first here, so that a forged datagram cannot raise a newer configuration.
        if from != Some(source) {
            self.stats.forged_source += 1;
            return;
        }
        let view = datagram.view();
        if view != self.config.view {
            if view < self.config.view {
                self.stats.stale_configuration += 1;
            } else {
                self.stats.newer_configuration += 1;
                if view > self.newest_reported {
                    self.newest_reported = view;
                    self.push_event(Event::NewerConfiguration(view));
                }
            }
            return;
        }
        let p = match self.member_peer(source) {
            Ok(p) => p,
            Err(RpcError::NotMember) => {
                self.stats.not_member += 1;
                return;
            }
            Err(_) => {
                self.stats.peers_exhausted += 1;
                return;
            }
        };
        if datagram.incarnation() != self.peers[p as usize].incarnation {
            self.stats.not_member += 1;
            return;
        }
        if !self.fresh(p, datagram.incarnation(), seq) {
            return;
        }
        let peer = &mut self.peers[p as usize];
        peer.last_heard_ns = now_ns;
        if std::mem::replace(&mut peer.suspect, false) {
            self.push_event(Event::Recovered(source));
        }
        self.handle_messages(now_ns, p, source, datagram);
    }

    /// Whether an authentic datagram from peer `p`'s life `incarnation` with sequence
    /// number `seq` is new (remembered from now on), or a replay (counted). Always true
    /// without authentication (`seq` is `None`).
    #[inline(always)]
    fn fresh(&mut self, p: u32, incarnation: u64, seq: Option<u64>) -> bool {
        let Some(seq) = seq else {
            return true;
        };
        if self.peers[p as usize].rx_window.accept(incarnation, seq) {
            return true;
        }
        self.stats.auth_refused[Refusal::Replay.index()] += 1;
        false
    }

    /// The messages of a datagram accepted from peer `p`.
    #[inline(always)]
    fn handle_messages(
        &mut self,
        now_ns: u64,
        p: u32,
        source: EndpointId,
        datagram: &Datagram<'_>,
    ) {
        // Messages must name this incarnation. Responses to an earlier life answer requests
        // it no longer has, though they may carry the slot and request number of new
        // ones: dropped. Requests to an earlier life may have run in it already: not run
        // again, but answered, so the client learns of the restart (see `on_request`).
        // Clients connect before sending requests (connect requests are exempt), so a
        // request naming no incarnation (0) is refused the same way.
        let current = datagram.target_incarnation() == self.config.incarnation;
        for message in datagram.messages() {
            match message.kind() {
                MessageKind::Request => self.on_request(now_ns, p, source, &message, current),
                MessageKind::Response if current => self.on_response(p, &message, now_ns),
                MessageKind::Response => self.stats.stale_responses += 1,
            }
        }
    }

    fn on_request(
        &mut self,
        now_ns: u64,
        p: u32,
        source: EndpointId,
        message: &Message<'_>,
        current: bool,
    ) {
        let header = message.header;
        if header.request_type == CONNECT_REQUEST_TYPE {
            // The reply's packet header carries our incarnation; that is all it says.
            self.queue_tx(p, TxOp::ConnectReply);
            return;
        }
        if !current {
            // Meant for our previous life: never run here (at-most-once across restarts).
            // Answered with a connect reply, whose packet header tells this life's
            // incarnation: its client learns of the restart and fails what it had
            // outstanding to the earlier life (`RpcError::TargetRestarted`). Nothing of
            // the slot changes, as the client numbers its requests to this life afresh.
            self.queue_tx(p, TxOp::ConnectReply);
            return;
        }
        let slot_number = header.slot;
        let request_number = header.request_number.get();
        let single = header.packet_count.get() == 1;
        let peer = &mut self.peers[p as usize];
        let high = peer.request_number_high;
        let slot = peer.server_slot(slot_number);
        if request_number < slot.request_number {
            if header.packet_index.get() != 0 {
                // One answer per transmission of a split request (see below).
                self.stats.duplicate_requests_ignored += 1;
                return;
            }
            // An older request on this slot. From a genuine client, a late duplicate: it
            // has the response and moved on, and drops the answer as matching nothing.
            // Or a request a forged (or broken) one with a higher number overtook: the
            // answer tells its client, which fails it (it may have run before) and numbers
            // its next requests past the slot's, so the slot serves it again (issue 29).
            slot.overtaken = request_number;
            self.stats.overtaken_requests_answered += 1;
            self.queue_tx(p, TxOp::Overtaken(slot_number));
            return;
        }
        if request_number > high.saturating_add(REQUEST_NUMBER_WINDOW) {
            // No genuine client's request is this far ahead (see `REQUEST_NUMBER_WINDOW`).
            self.stats.request_number_jumps += 1;
            return;
        }
        if request_number == slot.request_number {
            match slot.state {
                ServerState::Done if header.packet_index.get() != 0 => {
                    // A retransmitted split request arrives as many packets, each a
                    // duplicate. Answering every one sent the whole response once per
                    // packet (packets² datagrams for a large message); only its first
                    // packet is answered, one response per retransmission as for a
                    // single-packet request.
                    self.stats.duplicate_requests_ignored += 1;
                    return;
                }
                ServerState::Done => {
                    slot.resends = slot.resends.wrapping_add(1);
                    self.stats.duplicate_requests_answered += 1;
                    self.queue_tx(p, TxOp::Response(slot_number));
                    return;
                }
                ServerState::Receiving if !single => {}
                ServerState::Receiving | ServerState::Empty | ServerState::Running => {
                    self.stats.duplicate_requests_ignored += 1;
                    return;
                }
            }
        } else {
            slot.request_number = request_number;
            slot.state = ServerState::Receiving;
            slot.request_type = header.request_type;
            slot.resends = 0;
            // The client has the previous request's response; a partial one is abandoned.
            let freed = slot.free_partial();
            peer.request_number_high = high.max(request_number);
            peer.partial_request_bytes -= freed;
            self.partial_request_bytes -= freed;
        }
        let deferred = Deferred {
            peer: p,
            slot: slot_number,
            request_number,
            incarnation: self.peers[p as usize].incarnation,
            source,
        };
        let slot = &mut self.peers[p as usize].server[usize::from(slot_number)];
        if single {
            if execute(
                &mut self.handlers,
                &mut self.stats,
                slot,
                deferred,
                message.fragment,
            ) {
                self.queue_tx(p, TxOp::Response(slot_number));
            }
            return;
        }
        if header.request_type != slot.request_type {
            self.stats.inconsistent_fragments += 1;
            return;
        }
        if slot.reassembly.starts_with(header)
            && !self.room_for_partial(p, slot_number, header.message_len.get() as usize, now_ns)
        {
            self.stats.partial_requests_refused += 1;
            return;
        }
        let slot = &mut self.peers[p as usize].server[usize::from(slot_number)];
        let before = slot.reassembly.buffered_bytes();
        let outcome = reassemble(
            &mut slot.reassembly,
            &mut slot.request,
            message,
            &mut self.stats,
        );
        let after = slot.reassembly.buffered_bytes();
        slot.progress_ns = now_ns;
        self.account_partial(p, before, after);
        let slot = &mut self.peers[p as usize].server[usize::from(slot_number)];
        match outcome {
            Fragment::New {
                complete: false, ..
            } => {}
            Fragment::New { complete: true, .. } => {
                // The buffer goes with the request it held: kept, up to 256 slots of every
                // peer could each hold a mebibyte outside the bounds of `partial.rs`.
                let request = std::mem::take(&mut slot.request);
                let done = execute(
                    &mut self.handlers,
                    &mut self.stats,
                    slot,
                    deferred,
                    &request,
                );
                if done {
                    self.queue_tx(p, TxOp::Response(slot_number));
                }
            }
            Fragment::Duplicate => self.stats.duplicate_requests_ignored += 1,
        }
    }

    fn on_response(&mut self, p: u32, message: &Message<'_>, now_ns: u64) {
        let header = message.header;
        if header.request_type == CONNECT_REQUEST_TYPE {
            // Its packet header told the peer's incarnation (see `handle_datagram`).
            return;
        }
        let slot_number = header.slot;
        let peer = &mut self.peers[p as usize];
        let waiting = match peer
            .client
            .get(usize::from(slot_number))
            .and_then(|s| s.waiting)
        {
            Some(w) if w.request_number == header.request_number.get() => w,
            _ => {
                self.stats.stale_responses += 1;
                return;
            }
        };
        let status = message.status();
        if status == Status::Overtaken {
            // The server's slot holds a later request than ours: number past it.
            let later = <[u8; 8]>::try_from(message.fragment).map(u64::from_le_bytes);
            match later {
                Ok(later) if later > waiting.request_number && later < REQUEST_NUMBER_MAX => {
                    peer.next_request_number = peer.next_request_number.max(later + 1);
                    self.stats.calls_overtaken += 1;
                }
                // Not an answer a server writes: dropped, as a forged one may be.
                _ => {
                    self.stats.stale_responses += 1;
                    return;
                }
            }
        }
        let client_slot = &mut peer.client[usize::from(slot_number)];
        let call =
            &mut self.callers[usize::from(waiting.caller.0)].calls[usize::from(waiting.index)];
        if header.packet_count.get() == 1 {
            call.response.clear();
            call.response.extend_from_slice(message.fragment);
        } else {
            match reassemble(
                &mut client_slot.reassembly,
                &mut call.response,
                message,
                &mut self.stats,
            ) {
                Fragment::New { complete: true, .. } => {}
                Fragment::New {
                    complete: false, ..
                } => {
                    if let Some(w) = client_slot.waiting.as_mut() {
                        w.progress_ns = now_ns;
                    }
                    return;
                }
                Fragment::Duplicate => {
                    self.stats.stale_responses += 1;
                    return;
                }
            }
        }
        // The request is answered: free the slot and its window bytes, learn the round
        // trip, hand the slot to the next calls waiting for a credit.
        client_slot.waiting = None;
        peer.free_slots.push(slot_number);
        peer.outstanding_bytes -= waiting.request_bytes;
        self.outstanding -= 1;
        if waiting.retransmits == 0 && waiting.first_sent_ns >= peer.backoff_since_ns {
            peer.backoff_shift = 0;
        }
        if waiting.retransmits == 0 {
            peer.rtt
                .sample(now_ns.saturating_sub(waiting.first_sent_ns));
        }
        self.complete_call(waiting.caller, waiting.index, Outcome::Answered(status));
        self.release_backlog(p, now_ns);
    }
}

/// Copies one packet of a split message into `buffer` (sized on the first packet).
fn reassemble(
    reassembly: &mut Reassembly,
    buffer: &mut Vec<u8>,
    message: &Message<'_>,
    stats: &mut Stats,
) -> Fragment {
    let outcome = reassembly.accept(message.header);
    if let Fragment::New {
        first, restarted, ..
    } = outcome
    {
        if restarted {
            stats.inconsistent_fragments += 1;
        }
        if first {
            buffer.clear();
            buffer.resize(message.header.message_len.get() as usize, 0);
        }
        let offset = message.header.offset.get() as usize;
        // The decoder checked offset + fragment length <= message length, and every packet
        // of the reassembly has the same message length.
        buffer[offset..offset + message.fragment.len()].copy_from_slice(message.fragment);
    }
    outcome
}

/// The handler error a caller gets for a response over the message limit.
pub(crate) const RESPONSE_OVER_LIMIT: &str = "response over the message limit";

/// Runs the handler of a complete request and saves its response in the slot: true if
/// it answered, false if a deferred handler took it (it answers through
/// `Engine::respond`).
fn execute(
    handlers: &mut [Option<Registered>],
    stats: &mut Stats,
    slot: &mut ServerSlot,
    deferred: Deferred,
    payload: &[u8],
) -> bool {
    debug_assert_eq!(slot.state, ServerState::Receiving);
    slot.response.clear();
    let request = Request {
        source: deferred.source,
        request_type: slot.request_type,
        payload,
    };
    slot.status = match handlers[usize::from(slot.request_type)].as_mut() {
        None => Status::UnknownRequestType,
        Some(Registered::Later(handler)) => {
            slot.state = ServerState::Running;
            stats.deferred_started += 1;
            handler(&request, deferred);
            return false;
        }
        Some(Registered::Now(handler)) => match handler(&request, &mut slot.response) {
            Ok(()) if slot.response.len() <= MAX_MESSAGE_BYTES as usize => Status::Ok,
            Ok(()) => {
                // A handler that wrote more than a message holds (a page ending on a large
                // value) is a bug of that handler, but its input came from the network:
                // the caller gets a handler error, as `Engine::respond` answers a deferred
                // response over the limit, and the node stays up.
                stats.responses_over_limit += 1;
                slot.response.clear();
                slot.response
                    .extend_from_slice(RESPONSE_OVER_LIMIT.as_bytes());
                Status::HandlerError
            }
            Err(e) => {
                slot.response.clear();
                slot.response.extend_from_slice(e.0.as_bytes());
                Status::HandlerError
            }
        },
    };
    slot.state = ServerState::Done;
    stats.requests_executed += 1;
    true
}
