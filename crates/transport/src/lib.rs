//! Moving batches of datagrams between endpoints.
//!
//! A [`Transport`] sends a [`TxBatch`] and fills an [`RxBatch`]; it knows nothing of RPCs.
//! Both batches own their packet buffers and are reused for the life of a worker, so
//! moving datagrams allocates nothing once a worker runs.
//!
//! Implementations: [`udp::UdpTransport`] (one kernel UDP socket per worker thread, whole
//! batches through `sendmmsg`/`recvmmsg`), [`mem::MemTransport`] (in-process queues for a
//! cluster inside one process), and the simulated network in `ferrotx-sim`.

mod address_book;
mod doorbell;
mod error;
pub mod mem;
#[cfg(target_os = "linux")]
pub mod udp;

use std::sync::Arc;
use std::time::Duration;

pub use address_book::AddressBook;
pub use doorbell::Doorbell;
pub use error::TransportError;
use ferrotx_wire::EndpointId;
// The batches and the datagram size limit belong to the packet format (`ferrotx-wire`),
// so that protocol crates need not link this crate; re-exported here for transports and
// their callers.
pub use ferrotx_wire::batch::{RxBatch, TxBatch, UDP_MAX_PAYLOAD_BYTES};

/// Counters every transport keeps.
#[derive(Clone, Copy, Default, Debug)]
pub struct TransportStats {
    /// Datagrams handed to the kernel or queue.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Send calls (`sendmmsg` or queue pushes grouped per batch).
    pub send_calls: u64,
    /// Datagrams that could not be sent (no route, buffer full); the RPC layer retransmits.
    pub send_dropped: u64,
    /// Datagrams received from an address that is not a known endpoint.
    pub unknown_sender: u64,
}

/// Moves batches of datagrams for one endpoint. Implementations are driven by one worker
/// thread; none of the methods blocks except [`Transport::wait`].
pub trait Transport {
    /// The endpoint this transport sends from.
    fn local(&self) -> EndpointId;

    /// Sends every packet of `batch` (in one system call where the implementation allows),
    /// returning how many left. Packets that cannot be sent are counted and dropped.
    fn send_batch(&mut self, batch: &TxBatch) -> usize;

    /// Receives whatever has arrived, up to the batch's capacity, without blocking.
    /// Clears `batch` first and returns the number of datagrams received.
    fn recv_batch(&mut self, batch: &mut RxBatch) -> usize;

    /// Blocks until a datagram may be ready to receive, or `timeout` passes (`None`: no
    /// limit). Spurious returns are allowed.
    fn wait(&mut self, timeout: Option<Duration>);

    /// Counters so far.
    fn stats(&self) -> TransportStats;

    /// The bell that makes [`Transport::wait`] return early when another thread has work
    /// for this worker, if the transport has one.
    fn doorbell(&self) -> Option<Arc<Doorbell>> {
        None
    }
}
