//! Bounds on requests partly received: the bytes buffered to reassemble requests split
//! into packets, per peer and per engine, and the eviction of stale ones to make room.
//!
//! A packet that starts a reassembly sizes its buffer to the whole message (up to
//! `MAX_MESSAGE_BYTES`), so without a bound one peer could make a server hold a
//! mebibyte on each of its 256 slots, and every peer could (issue 29). A packet that would
//! start a reassembly past a bound is dropped and counted; its client retransmits, and by
//! then stale reassemblies can make room.

use crate::engine::Engine;
use crate::session::ServerSlot;

/// Bytes of partly received requests one peer may have buffered here. Twice the default
/// session window (`Config::window_bytes`, 4 MiB): a client with default settings never
/// has more request bytes outstanding to one server, so never more partly received; and
/// one request of the largest size always fits, as a client sends one however large its
/// window.
pub(crate) const PEER_PARTIAL_REQUEST_BYTES_MAX: usize = 8 << 20;

/// Bytes of partly received requests all peers together may have buffered in one engine:
/// eight peers' full windows at once. A node runs one engine per worker thread, so a dozen
/// threads hold under 1 GiB of partial requests however many peers send them.
pub(crate) const ENGINE_PARTIAL_REQUEST_BYTES_MAX: usize = 64 << 20;

impl ServerSlot {
    /// Drops the slot's partly received request, if any, and its buffer; returns the
    /// bytes that were buffered for it.
    pub(crate) fn free_partial(&mut self) -> usize {
        let bytes = self.reassembly.buffered_bytes();
        self.reassembly.reset();
        if self.request.capacity() > 0 {
            self.request = Vec::new();
        }
        bytes
    }
}

impl Engine {
    /// Bytes buffered now for requests partly received, from all peers (bounded by
    /// `ENGINE_PARTIAL_REQUEST_BYTES_MAX`).
    pub fn partial_request_bytes(&self) -> usize {
        self.partial_request_bytes
    }

    /// Accounts for a change of the bytes peer `p` has buffered for partial requests.
    pub(crate) fn account_partial(&mut self, p: u32, before: usize, after: usize) {
        let peer = &mut self.peers[p as usize];
        peer.partial_request_bytes = peer.partial_request_bytes - before + after;
        self.partial_request_bytes = self.partial_request_bytes - before + after;
        debug_assert!(peer.partial_request_bytes <= self.partial_request_bytes);
    }

    /// Makes room for a partial request of `len` bytes on server slot `slot` of peer `p`,
    /// in place of what that slot buffers: within both bounds, evicting stale partial
    /// requests (of `p` for its own bound, of the peer buffering most for the engine's) if
    /// needed. False if there is no room.
    pub(crate) fn room_for_partial(&mut self, p: u32, slot: u8, len: usize, now_ns: u64) -> bool {
        let replaced = self.peers[p as usize].server[usize::from(slot)]
            .reassembly
            .buffered_bytes();
        while self.peers[p as usize].partial_request_bytes - replaced + len
            > PEER_PARTIAL_REQUEST_BYTES_MAX
        {
            if !self.evict_stalest_partial(p, Some(slot), now_ns) {
                return false;
            }
        }
        while self.partial_request_bytes - replaced + len > ENGINE_PARTIAL_REQUEST_BYTES_MAX {
            // The peer buffering most: a scan of the peer table, only when the engine's
            // bound is reached.
            let fullest = (0..self.peers.len())
                .max_by_key(|&q| self.peers[q].partial_request_bytes)
                .expect("bytes are buffered, so some peer buffers them")
                as u32;
            let except = (fullest == p).then_some(slot);
            if !self.evict_stalest_partial(fullest, except, now_ns) {
                return false;
            }
        }
        true
    }

    /// Drops the partial request of peer `p` (on a slot other than `except`) that has
    /// gone longest without a packet, if that is at least `Config::rto_max_ns`: a client
    /// retransmits what is unanswered within its largest timeout, and every retransmission
    /// brings packets, so a reassembly that long silent was given up (or never genuine).
    /// Its client's next retransmission starts it again. False if none is that stale.
    fn evict_stalest_partial(&mut self, p: u32, except: Option<u8>, now_ns: u64) -> bool {
        let stale_ns = self.config.rto_max_ns;
        let peer = &mut self.peers[p as usize];
        let stalest = peer
            .server
            .iter()
            .enumerate()
            .filter(|&(i, s)| {
                Some(i) != except.map(usize::from)
                    && s.reassembly.buffered_bytes() > 0
                    && now_ns.saturating_sub(s.progress_ns) >= stale_ns
            })
            .min_by_key(|(_, s)| s.progress_ns)
            .map(|(i, _)| i);
        let Some(i) = stalest else {
            return false;
        };
        let freed = peer.server[i].free_partial();
        self.account_partial(p, freed, 0);
        self.stats.partial_requests_evicted += 1;
        true
    }
}
