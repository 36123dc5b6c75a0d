//! A transport wrapper that drops a share of outgoing datagrams, to measure the RPC layer
//! under loss on a real network path.

use std::time::Duration;

use ferrotx_transport::{RxBatch, Transport, TransportStats, TxBatch};
use ferrotx_wire::EndpointId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Drops each outgoing datagram with probability `loss` before it reaches the inner
/// transport. With `loss == 0` it passes batches through untouched.
pub struct Lossy<T> {
    inner: T,
    loss: f64,
    rng: ChaCha8Rng,
    kept: TxBatch,
    /// Datagrams dropped on purpose.
    pub dropped: u64,
}

impl<T: Transport> Lossy<T> {
    /// Wraps `inner`; `datagram_bytes` and `max_packets` size the copy of kept datagrams.
    pub fn new(inner: T, loss: f64, seed: u64, max_packets: usize, datagram_bytes: usize) -> Self {
        assert!((0.0..1.0).contains(&loss), "loss must be in [0, 1)");
        Self {
            inner,
            loss,
            rng: ChaCha8Rng::seed_from_u64(seed),
            kept: TxBatch::new(max_packets, datagram_bytes),
            dropped: 0,
        }
    }
}

impl<T: Transport> Transport for Lossy<T> {
    fn local(&self) -> EndpointId {
        self.inner.local()
    }

    fn send_batch(&mut self, batch: &TxBatch) -> usize {
        if self.loss == 0.0 {
            return self.inner.send_batch(batch);
        }
        self.kept.clear();
        for (target, bytes) in batch.iter() {
            if self.rng.random_bool(self.loss) {
                self.dropped += 1;
            } else {
                self.kept.push(target, bytes);
            }
        }
        self.inner.send_batch(&self.kept)
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> usize {
        self.inner.recv_batch(batch)
    }

    fn wait(&mut self, timeout: Option<Duration>) {
        self.inner.wait(timeout)
    }

    fn stats(&self) -> TransportStats {
        self.inner.stats()
    }

    fn doorbell(&self) -> Option<std::sync::Arc<ferrotx_transport::Doorbell>> {
        self.inner.doorbell()
    }
}
