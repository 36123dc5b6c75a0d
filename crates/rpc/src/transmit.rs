//! Transmitting: queued messages become datagrams, coalesced per destination.

use ferrotx_wire::auth::{Sealer, TRAILER_BYTES};
use ferrotx_wire::batch::TxBatch;
use ferrotx_wire::{
    FragmentInfo, MessageFields, MessageKind, Status, message_count, push_message, start_datagram,
};

use crate::engine::{CONNECT_REQUEST_TYPE, Engine};
use crate::session::{ServerState, TxOp};

impl Engine {
    /// Writes queued messages into `tx` as datagrams. Messages to the same destination
    /// share datagrams up to `datagram_bytes` (unless coalescing is off); the batch then
    /// holds everything this loop iteration produced, for one `sendmmsg`. Returns when
    /// nothing is left to write or the batch is full; in the latter case, send the batch,
    /// clear it, and call again.
    pub fn poll_transmit(&mut self, tx: &mut TxBatch) {
        assert!(tx.datagram_bytes() >= self.config.datagram_bytes);
        while let Some(&p) = self.tx_peers.front() {
            if !self.write_peer(p, tx) {
                return;
            }
            self.tx_peers.pop_front();
            let peer = &mut self.peers[p as usize];
            peer.tx.clear();
            peer.tx_done = 0;
            peer.tx_packet = 0;
            peer.queued = false;
        }
    }

    /// Writes peer `p`'s queued messages; false if `tx` filled up first.
    fn write_peer(&mut self, p: u32, tx: &mut TxBatch) -> bool {
        let Engine {
            peers,
            callers,
            config,
            local,
            stats,
            sealer,
            ..
        } = self;
        let peer = &mut peers[p as usize];
        let target = peer.endpoint;
        let target_incarnation = peer.incarnation;
        let fragment_bytes = config.fragment_bytes();
        let mut datagram = Datagram {
            open: false,
            capacity: config.datagram_bytes - TRAILER_BYTES,
            sealer: sealer.as_ref(),
        };
        while peer.tx_done < peer.tx.len() {
            // The op leaves the queue now (or once its interrupted write completes, below);
            // from then on, a new duplicate may queue it again.
            match peer.tx[peer.tx_done] {
                TxOp::Request(slot) => peer.client[usize::from(slot)].queued = false,
                TxOp::Response(slot) => peer.server[usize::from(slot)].queued = false,
                TxOp::Overtaken(slot) => peer.server[usize::from(slot)].overtaken_queued = false,
                TxOp::Connect => peer.connect_queued = false,
                TxOp::ConnectReply => peer.connect_reply_queued = false,
            }
            // `round` counts earlier transmissions of the message: split messages start each
            // round at another packet (see `first_packet`).
            let slot_number_bytes;
            let (fields, payload, round) = match peer.tx[peer.tx_done] {
                TxOp::Request(slot) => match peer.client[usize::from(slot)].waiting {
                    Some(w) => {
                        let call = &callers[usize::from(w.caller.0)].calls[usize::from(w.index)];
                        let fields = MessageFields {
                            kind: MessageKind::Request,
                            request_type: call.request_type,
                            status: Status::Ok,
                            slot,
                            request_number: w.request_number,
                        };
                        (fields, call.request.as_slice(), w.retransmits)
                    }
                    // Answered since it was queued.
                    None => {
                        // Its write may have been interrupted by a full batch: the packet
                        // position belongs to it, not to the next message.
                        peer.tx_packet = 0;
                        peer.tx_done += 1;
                        continue;
                    }
                },
                TxOp::Connect | TxOp::ConnectReply => {
                    let kind = match peer.tx[peer.tx_done] {
                        TxOp::Connect => MessageKind::Request,
                        _ => MessageKind::Response,
                    };
                    let fields = MessageFields {
                        kind,
                        request_type: CONNECT_REQUEST_TYPE,
                        status: Status::Ok,
                        slot: 0,
                        request_number: 0,
                    };
                    (fields, &[][..], 0)
                }
                TxOp::Response(slot) => {
                    let s = &peer.server[usize::from(slot)];
                    if s.state != ServerState::Done {
                        // As above: do not leave a packet position to the next message.
                        peer.tx_packet = 0;
                        peer.tx_done += 1;
                        continue;
                    }
                    let fields = MessageFields {
                        kind: MessageKind::Response,
                        request_type: s.request_type,
                        status: s.status,
                        slot,
                        request_number: s.request_number,
                    };
                    (fields, s.response.as_slice(), s.resends)
                }
                TxOp::Overtaken(slot) => {
                    let s = &peer.server[usize::from(slot)];
                    let fields = MessageFields {
                        kind: MessageKind::Response,
                        request_type: s.request_type,
                        status: Status::Overtaken,
                        slot,
                        request_number: s.overtaken,
                    };
                    slot_number_bytes = s.request_number.to_le_bytes();
                    (fields, &slot_number_bytes[..], 0)
                }
            };
            // A message that fits one packet could be written as the case
            // `packet_count == 1` of the loop below, but that cost about 4% of
            // `bench rpc --transport mem` throughput (same run, before/after), so small
            // messages, nearly all of them, take this shorter path.
            let message_len = payload.len() as u32;
            if payload.len() <= fragment_bytes {
                let fragment = FragmentInfo::whole(message_len);
                if !datagram.push(
                    tx,
                    stats,
                    *local,
                    (target, target_incarnation),
                    config,
                    &mut peer.tx_seq,
                    fields,
                    fragment,
                    payload,
                ) {
                    return false;
                }
            } else {
                let packet_count = payload.len().div_ceil(fragment_bytes) as u16;
                let first = first_packet(round, packet_count);
                while peer.tx_packet < packet_count {
                    let packet_index = ((u32::from(first) + u32::from(peer.tx_packet))
                        % u32::from(packet_count)) as u16;
                    let offset = usize::from(packet_index) * fragment_bytes;
                    let end = (offset + fragment_bytes).min(payload.len());
                    let fragment = FragmentInfo {
                        message_len,
                        offset: offset as u32,
                        packet_index,
                        packet_count,
                    };
                    let bytes = &payload[offset..end];
                    if !datagram.push(
                        tx,
                        stats,
                        *local,
                        (target, target_incarnation),
                        config,
                        &mut peer.tx_seq,
                        fields,
                        fragment,
                        bytes,
                    ) {
                        return false;
                    }
                    peer.tx_packet += 1;
                }
            }
            // Reset here rather than only after a split message: the op at `tx_done` may
            // have changed since a write of it was interrupted (its slot now holds a
            // single-packet message), and a stale position would skip the first packets
            // of the next split message.
            peer.tx_packet = 0;
            peer.tx_done += 1;
            if !config.coalesce {
                datagram.close(tx, stats, target, &mut peer.tx_seq);
            }
        }
        datagram.close(tx, stats, target, &mut peer.tx_seq);
        true
    }
}

/// The packet a transmission of a split message starts at. A first transmission starts at
/// packet 0. A retransmission is needed when packets were lost, typically the tail of a
/// burst that overflowed the receiver's socket buffer; sent in the same order again, the
/// same tail would be lost again. Each round starts elsewhere instead (steps of the golden
/// ratio spread the starts evenly), and the receiver, which ignores packets it has, keeps
/// the ones it was missing.
fn first_packet(round: u32, packet_count: u16) -> u16 {
    const GOLDEN_RATIO_FRACTION: u64 = 0x9e37_79b9; // 2^32 / phi
    let fraction = u64::from(round).wrapping_mul(GOLDEN_RATIO_FRACTION) & 0xffff_ffff;
    ((fraction * u64::from(packet_count)) >> 32) as u16
}

/// The datagram being filled for one destination: the buffer at the end of the batch.
struct Datagram<'a> {
    open: bool,
    capacity: usize,
    /// Seals it when it closes (`Config::auth`).
    sealer: Option<&'a Sealer>,
}

impl Datagram<'_> {
    /// Appends a message, closing a full datagram and opening another as needed; false if
    /// a new datagram was needed and the batch is full (nothing written, nothing open).
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        tx: &mut TxBatch,
        stats: &mut crate::stats::Stats,
        local: ferrotx_wire::EndpointId,
        (target, target_incarnation): (ferrotx_wire::EndpointId, u64),
        config: &crate::config::Config,
        tx_seq: &mut u64,
        fields: MessageFields,
        fragment: FragmentInfo,
        payload: &[u8],
    ) -> bool {
        loop {
            if !self.open {
                let Some(buf) = tx.open() else {
                    return false;
                };
                start_datagram(
                    buf,
                    local,
                    target,
                    config.view,
                    config.incarnation,
                    target_incarnation,
                );
                // Limit the datagram to the configured size even if the buffer is larger.
                self.open = true;
            }
            let buf = tx.pending_mut();
            if buf.len() + ferrotx_wire::MESSAGE_OVERHEAD_BYTES + payload.len() <= self.capacity
                && push_message(buf, fields, fragment, payload)
            {
                stats.messages_sent += 1;
                return true;
            }
            assert!(
                message_count(buf) > 0,
                "a message that fits no datagram was queued"
            );
            self.close(tx, stats, target, tx_seq);
        }
    }

    /// Seals the open datagram (`Config::auth`) with the peer's next sequence number and
    /// adds it to the batch. The peer's count never goes back in this endpoint's life, so
    /// no nonce is used twice under its key.
    fn close(
        &mut self,
        tx: &mut TxBatch,
        stats: &mut crate::stats::Stats,
        target: ferrotx_wire::EndpointId,
        tx_seq: &mut u64,
    ) {
        if self.open {
            if let Some(sealer) = self.sealer {
                *tx_seq += 1;
                sealer.seal(tx.pending_mut(), target.0, *tx_seq);
            }
            tx.commit(target);
            stats.datagrams_sent += 1;
            self.open = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::first_packet;

    #[test]
    fn rounds_start_at_spread_packets() {
        assert_eq!(first_packet(0, 17), 0);
        let starts: Vec<u16> = (0..17).map(|r| first_packet(r, 17)).collect();
        assert!(starts.iter().all(|&s| s < 17));
        let mut distinct = starts.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() >= 12, "{starts:?}");
        assert_eq!(first_packet(u32::MAX, 1), 0);
    }
}
