//! Engine configuration.

use ferrotx_wire::auth::{Auth, TRAILER_BYTES};
use ferrotx_wire::{MESSAGE_OVERHEAD_BYTES, PACKET_HEADER_BYTES, ViewId};

/// Smallest datagram the engine accepts: room for the packet header, one message header,
/// the authentication trailer and 1 KiB of payload, so that a message of the largest size
/// needs a bounded number of packets (see `ferrotx_wire::MAX_PACKETS_PER_MESSAGE`).
pub const MIN_DATAGRAM_BYTES: usize =
    PACKET_HEADER_BYTES + MESSAGE_OVERHEAD_BYTES + TRAILER_BYTES + 1024;

/// Settings of one engine. All sizes are bounds: the engine allocates its tables once for
/// them and refuses work beyond them.
#[derive(Clone, Debug)]
pub struct Config {
    /// View stamped on every datagram; datagrams of another view are dropped.
    pub view: ViewId,
    /// Incarnation of this endpoint: must grow each time the process starts.
    pub incarnation: u64,
    /// Number of callers (coroutine slots) that can have a batch in flight.
    pub callers: usize,
    /// Largest number of requests in one caller's batch.
    pub max_batch: usize,
    /// Outstanding requests allowed per session (credits); at most 255 (one byte on the
    /// wire). Further requests wait at the client, so a fast sender cannot overrun a slow
    /// receiver.
    pub credits: u8,
    /// Largest datagram written, and the size up to which messages to one destination are
    /// coalesced. At most the transport's datagram size.
    pub datagram_bytes: usize,
    /// Request bytes allowed outstanding per session; one request is always allowed,
    /// however large. Credits bound the number of requests, this bounds their bytes, so a
    /// burst of large requests does not overflow the receiver's socket buffer and lose
    /// most of its packets.
    pub window_bytes: usize,
    /// Coalesce messages to the same destination into shared datagrams. Off sends one
    /// message per datagram (for measuring what coalescing buys).
    pub coalesce: bool,
    /// Smallest retransmission timeout. The timeout follows the measured round trip
    /// (smoothed RTT plus four deviations, as TCP) within `[rto_min_ns, rto_max_ns]`.
    pub rto_min_ns: u64,
    /// Largest retransmission timeout, also the cap of exponential backoff.
    pub rto_max_ns: u64,
    /// A peer that has answered nothing for this long while requests wait on it is
    /// reported suspect.
    pub suspect_after_ns: u64,
    /// Seals every datagram sent and opens every datagram received (AES-GCM under a key
    /// of the sender's life made from the cluster key, a replay window per sender:
    /// `ferrotx_wire::auth`; the engine makes its own life's `Sealer` from it). `None` sends and
    /// accepts datagrams without a trailer: for tests that write datagrams by hand, and
    /// the benchmarks' measure of what authentication costs. Room for the trailer is kept
    /// in every datagram either way, so both modes split messages alike.
    pub auth: Option<Auth>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            view: ViewId(1),
            incarnation: 1,
            callers: 20,
            max_batch: 64,
            credits: 64,
            datagram_bytes: ferrotx_wire::batch::UDP_MAX_PAYLOAD_BYTES,
            // Half of the 8 MiB socket buffers the UDP transport asks for.
            window_bytes: 4 << 20,
            coalesce: true,
            // On loopback an unloaded round trip is a few microseconds and a loaded one
            // tens. Coroutines move in step, so one lost datagram can stall all of them
            // until the timeout: 200 us made `bench rpc --loss 0.01` keep 87% of its
            // loss-free throughput where 1 ms kept 52%, at the cost of about one spurious
            // retransmission per 10,000 RPCs without loss (duplicates are answered from
            // the saved response, so they cost bandwidth, never correctness).
            rto_min_ns: 200_000,
            rto_max_ns: 100_000_000,
            // FaRM uses 10 ms leases; the RPC layer only hints, so it waits longer.
            suspect_after_ns: 50_000_000,
            auth: None,
        }
    }
}

impl Config {
    /// Panics if the configuration is inconsistent; called by `Engine::new`.
    pub(crate) fn check(&self) {
        assert!(
            self.incarnation > 0,
            "incarnation 0 means unknown on the wire"
        );
        assert!(self.callers > 0 && self.callers <= usize::from(u16::MAX));
        assert!(self.max_batch > 0 && self.max_batch <= usize::from(u16::MAX));
        assert!(self.credits > 0);
        assert!(self.window_bytes > 0);
        assert!(self.datagram_bytes >= MIN_DATAGRAM_BYTES);
        assert!(self.rto_min_ns > 0 && self.rto_min_ns <= self.rto_max_ns);
        assert!(self.suspect_after_ns > 0);
    }

    /// Payload bytes one packet of a split message carries.
    pub(crate) fn fragment_bytes(&self) -> usize {
        self.datagram_bytes - PACKET_HEADER_BYTES - MESSAGE_OVERHEAD_BYTES - TRAILER_BYTES
    }
}
