//! The periodic scan: retransmit requests whose timeout passed, report silent peers.

use crate::engine::{Engine, Event};
use crate::session::TxOp;

/// Exponential backoff stops doubling after this many retransmissions (2^10 times the
/// base timeout is past any sensible `rto_max_ns` anyway).
const BACKOFF_DOUBLINGS_MAX: u32 = 10;

/// The session's timeout doubles at most this often. Once is enough to end a storm of
/// spurious retransmissions (answers slower than the timeout): under the doubled timeout
/// requests are answered in time again and their samples lift the estimate. More hurts
/// under real, persistent loss (a burst of large messages overflowing a small socket
/// buffer), where few requests are answered at their first try to end the backoff: with
/// no cap, `bench rpc --req-bytes 1048576 --coroutines 8 --batch 1 --socket-buffer-kib
/// 208` fell from about 1,600 to 15 RPCs/s; with this cap it keeps about 1,000, while
/// `--no-coalesce --batch 16` keeps its gain (a few hundred retransmissions, not 700,000).
const SESSION_BACKOFF_DOUBLINGS_MAX: u32 = 1;

impl Engine {
    /// Runs the retransmission scan if its time has come (see
    /// [`Engine::next_timeout_ns`]). Calling it early does nothing.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        if (self.outstanding == 0 && self.connecting == 0) || now_ns < self.next_scan_ns {
            return;
        }
        self.next_scan_ns = now_ns + self.scan_interval_ns();
        let (rto_min, rto_max) = (self.config.rto_min_ns, self.config.rto_max_ns);
        let suspect_after = self.config.suspect_after_ns;
        for p in 0..self.peers.len() {
            let peer = &mut self.peers[p];
            if peer.outstanding() == 0 && peer.connect_sent_ns.is_none() {
                continue;
            }
            // The session's backoff applies to every request, new ones included: while the
            // peer is slower than the estimate says, requests answered in time are the
            // fast ones, so the samples alone would keep the estimate low and every slow
            // answer would be sent for again, loading the peer further.
            let base = (peer.rtt.rto_ns(rto_min, rto_max) << peer.backoff_shift).min(rto_max);
            let mut expired = 0usize;
            for slot in 0..peer.client.len() {
                let Some(w) = peer.client[slot].waiting.as_mut() else {
                    continue;
                };
                // Allow the time to push the request through at 1 byte per nanosecond
                // (about 1 GB/s), so a large request is not resent while it still flows.
                let rto = (base << w.retransmits.min(BACKOFF_DOUBLINGS_MAX)).min(rto_max)
                    + w.request_bytes as u64;
                if now_ns.saturating_sub(w.sent_ns.max(w.progress_ns)) >= rto {
                    w.sent_ns = now_ns;
                    w.retransmits += 1;
                    expired += 1;
                    let client_slot = &mut peer.client[slot];
                    if !client_slot.queued {
                        client_slot.queued = true;
                        peer.tx.push(TxOp::Request(slot as u8));
                    }
                }
            }
            if let Some(sent_ns) = peer.connect_sent_ns {
                let rto =
                    (base << peer.connect_retransmits.min(BACKOFF_DOUBLINGS_MAX)).min(rto_max);
                if now_ns.saturating_sub(sent_ns) >= rto {
                    peer.connect_sent_ns = Some(now_ns);
                    peer.connect_retransmits += 1;
                    self.stats.retransmissions += 1;
                    if !peer.connect_queued {
                        peer.connect_queued = true;
                        peer.tx.push(TxOp::Connect);
                        if !peer.queued {
                            peer.queued = true;
                            self.tx_peers.push_back(p as u32);
                        }
                    }
                }
            }
            if expired > 0 {
                // TCP's backoff (RFC 6298, 5.5), per session: kept until a request sent
                // after it is answered without retransmission (see `on_response`).
                peer.backoff_shift = (peer.backoff_shift + 1).min(SESSION_BACKOFF_DOUBLINGS_MAX);
                peer.backoff_since_ns = now_ns;
                self.stats.retransmissions += expired as u64;
                if !peer.queued {
                    peer.queued = true;
                    self.tx_peers.push_back(p as u32);
                }
            }
            if !peer.suspect && now_ns.saturating_sub(peer.last_heard_ns) >= suspect_after {
                peer.suspect = true;
                let endpoint = peer.endpoint;
                self.stats.suspects += 1;
                self.push_event(Event::Suspect(endpoint));
            }
        }
    }
}
