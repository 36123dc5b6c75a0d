//! Reusable batches of packet buffers: what the RPC layer fills and a transport sends
//! ([`TxBatch`]), and what a transport fills and the RPC layer decodes ([`RxBatch`]).
//!
//! They live here, beside the packet format, rather than in `ferrotx-transport`, so that
//! the protocol crates that build and read datagrams do not link the crate that opens
//! sockets; `ferrotx-transport` re-exports them. Their small methods are `#[inline]`:
//! the transports and the RPC engine call them per datagram from other crates, where
//! without it they would be calls (no LTO in the release profile).

use crate::EndpointId;

/// Largest UDP payload over IPv4 (65,535 minus the IP and UDP headers).
pub const UDP_MAX_PAYLOAD_BYTES: usize = 65_507;

/// Datagrams to send, each with its target. Buffers keep their capacity between batches.
pub struct TxBatch {
    buffers: Vec<Vec<u8>>,
    targets: Vec<EndpointId>,
    len: usize,
    datagram_bytes: usize,
}

impl TxBatch {
    /// A batch of up to `max_packets` datagrams of up to `datagram_bytes` each.
    pub fn new(max_packets: usize, datagram_bytes: usize) -> Self {
        assert!(max_packets > 0 && datagram_bytes > 0);
        Self {
            buffers: (0..max_packets)
                .map(|_| Vec::with_capacity(datagram_bytes))
                .collect(),
            targets: vec![EndpointId::default(); max_packets],
            len: 0,
            datagram_bytes,
        }
    }

    /// Largest datagram a buffer of this batch holds.
    #[inline]
    pub fn datagram_bytes(&self) -> usize {
        self.datagram_bytes
    }

    /// Number of datagrams in the batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the batch holds no datagram.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if no further datagram fits.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == self.buffers.len()
    }

    /// Forgets every datagram, keeping the buffers.
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The next free buffer, cleared, with capacity `datagram_bytes`; `None` if the batch
    /// is full. What is written there becomes part of the batch only through
    /// [`TxBatch::commit`].
    #[inline]
    pub fn open(&mut self) -> Option<&mut Vec<u8>> {
        let buf = self.buffers.get_mut(self.len)?;
        buf.clear();
        debug_assert!(buf.capacity() >= self.datagram_bytes);
        Some(buf)
    }

    /// The buffer last returned by [`TxBatch::open`], not yet committed, to append more.
    /// Panics if the batch is full.
    #[inline]
    pub fn pending_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buffers[self.len]
    }

    /// Adds the buffer last returned by [`TxBatch::open`] to the batch, addressed to
    /// `target`, unless it was left empty.
    #[inline]
    pub fn commit(&mut self, target: EndpointId) {
        let buf = &self.buffers[self.len];
        assert!(
            buf.len() <= self.datagram_bytes,
            "datagram grew past its buffer"
        );
        if !buf.is_empty() {
            self.targets[self.len] = target;
            self.len += 1;
        }
    }

    /// Copies a finished datagram into the batch; false if the batch is full or the
    /// datagram too large.
    #[inline]
    pub fn push(&mut self, target: EndpointId, datagram: &[u8]) -> bool {
        if datagram.len() > self.datagram_bytes {
            return false;
        }
        match self.open() {
            Some(buf) => buf.extend_from_slice(datagram),
            None => return false,
        }
        self.commit(target);
        true
    }

    /// The datagram at `index` and its target.
    #[inline]
    pub fn get(&self, index: usize) -> (EndpointId, &[u8]) {
        assert!(index < self.len);
        (self.targets[index], &self.buffers[index])
    }

    /// The datagrams, in order, with their targets.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = (EndpointId, &[u8])> {
        (0..self.len).map(|i| self.get(i))
    }
}

/// Datagrams received, each with the endpoint the transport saw it come from (`None` when
/// the sender's address is not a known endpoint).
///
/// Buffers are allocated once, at construction, and never zero-filled: a transport that
/// receives in place hands their spare capacity to the kernel through
/// [`RxBatch::buffer_pointers`] and then records each datagram with
/// [`RxBatch::set_received`], in order. Transports that copy use [`RxBatch::push`].
pub struct RxBatch {
    buffers: Vec<Vec<u8>>,
    sources: Vec<Option<EndpointId>>,
    len: usize,
    datagram_bytes: usize,
    id: u64,
}

/// Source of [`RxBatch::id`].
static NEXT_RX_BATCH_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl RxBatch {
    /// A batch of up to `max_packets` datagrams of up to `datagram_bytes` each.
    pub fn new(max_packets: usize, datagram_bytes: usize) -> Self {
        assert!(max_packets > 0 && datagram_bytes > 0);
        Self {
            buffers: (0..max_packets)
                .map(|_| Vec::with_capacity(datagram_bytes))
                .collect(),
            sources: vec![None; max_packets],
            len: 0,
            datagram_bytes,
            id: NEXT_RX_BATCH_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// A number no other batch of this process has. A batch's buffers never move or
    /// reallocate while it lives (nothing writes past a buffer's capacity), so a transport
    /// that prepared system-call arrays pointing at a batch's buffers may reuse them for
    /// as long as it is given the batch with the same id.
    #[inline]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Largest datagram a buffer of this batch holds; longer ones are truncated.
    #[inline]
    pub fn datagram_bytes(&self) -> usize {
        self.datagram_bytes
    }

    /// Number of datagrams received into the batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the batch holds no datagram.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of datagrams the batch can hold.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buffers.len()
    }

    /// Forgets every datagram.
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The datagram at `index` and the endpoint it came from.
    #[inline]
    pub fn get(&self, index: usize) -> (Option<EndpointId>, &[u8]) {
        assert!(index < self.len);
        (self.sources[index], &self.buffers[index])
    }

    /// The datagram at `index`, writable (authentication decrypts in place), and the
    /// endpoint it came from.
    #[inline]
    pub fn get_mut(&mut self, index: usize) -> (Option<EndpointId>, &mut [u8]) {
        assert!(index < self.len);
        (self.sources[index], &mut self.buffers[index])
    }

    /// Copies a datagram in; false if the batch is full. Longer datagrams are truncated
    /// to [`RxBatch::datagram_bytes`], as the kernel does, and the decoder then rejects them.
    #[inline]
    pub fn push(&mut self, source: Option<EndpointId>, datagram: &[u8]) -> bool {
        let Some(buf) = self.buffers.get_mut(self.len) else {
            return false;
        };
        let n = datagram.len().min(self.datagram_bytes);
        buf.clear();
        buf.extend_from_slice(&datagram[..n]);
        debug_assert!(
            buf.capacity() >= self.datagram_bytes,
            "push reallocated a buffer"
        );
        self.sources[self.len] = source;
        self.len += 1;
        true
    }

    /// For transports that receive in place and keep pointers across calls: each buffer's
    /// start and the bytes it can take, taken with `Vec::as_mut_ptr`, which creates no
    /// reference to the contents, so the pointers stay usable while the batch lives (see
    /// [`RxBatch::id`]).
    #[inline]
    pub fn buffer_pointers(&mut self) -> impl ExactSizeIterator<Item = (*mut u8, usize)> + '_ {
        let datagram_bytes = self.datagram_bytes;
        self.buffers
            .iter_mut()
            .map(move |buf| (buf.as_mut_ptr(), datagram_bytes))
    }

    /// For transports that receive in place: records that the buffer at index
    /// [`RxBatch::len`] now holds a datagram of `bytes` bytes from `source`.
    ///
    /// # Safety
    ///
    /// The first `bytes` bytes of that buffer must have been written (by the kernel or
    /// otherwise) through a pointer from [`RxBatch::buffer_pointers`], so that they are
    /// initialised.
    pub unsafe fn set_received(&mut self, bytes: usize, source: Option<EndpointId>) {
        assert!(
            self.len < self.buffers.len(),
            "set_received on a full batch"
        );
        assert!(
            bytes <= self.datagram_bytes,
            "datagram longer than its buffer"
        );
        let buf = &mut self.buffers[self.len];
        debug_assert!(buf.capacity() >= self.datagram_bytes);
        // SAFETY: `bytes` is within the buffer's capacity (asserted above: it is at most
        // `datagram_bytes`, which the capacity covers since construction), and the caller
        // guarantees that those bytes were initialised.
        unsafe { buf.set_len(bytes) };
        self.sources[self.len] = source;
        self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rx_push_truncates_and_keeps_capacity() {
        let mut batch = RxBatch::new(2, 4);
        assert!(batch.push(Some(EndpointId(1)), b"abcdef"));
        assert!(batch.push(None, b"xy"));
        assert!(!batch.push(None, b"z"));
        assert_eq!(batch.get(0), (Some(EndpointId(1)), &b"abcd"[..]));
        assert_eq!(batch.get(1), (None, &b"xy"[..]));
    }

    #[test]
    fn rx_in_place_receive() {
        let mut batch = RxBatch::new(3, 8);
        assert!(batch.push(None, b"first"));
        let spare: Vec<*mut u8> = batch
            .buffer_pointers()
            .skip(1)
            .map(|(ptr, _)| ptr)
            .collect();
        assert_eq!(spare.len(), 2);
        // SAFETY: the pointer addresses 8 bytes of the second buffer's capacity, which
        // nothing else borrows now; three of them are written.
        unsafe { spare[0].copy_from_nonoverlapping(b"abc".as_ptr(), 3) };
        // SAFETY: the three bytes recorded were written just above.
        unsafe { batch.set_received(3, Some(EndpointId(5))) };
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.get(0), (None, &b"first"[..]));
        assert_eq!(batch.get(1), (Some(EndpointId(5)), &b"abc"[..]));
    }

    #[test]
    fn tx_open_commit_push() {
        let mut batch = TxBatch::new(2, 4);
        batch.open().unwrap().extend_from_slice(b"ab");
        batch.commit(EndpointId(3));
        batch.open().unwrap();
        batch.commit(EndpointId(4)); // left empty: not added
        assert_eq!(batch.len(), 1);
        assert!(!batch.push(EndpointId(4), b"toolong"));
        assert!(batch.push(EndpointId(4), b"cd"));
        assert!(batch.is_full());
        let all: Vec<_> = batch.iter().collect();
        assert_eq!(
            all,
            vec![(EndpointId(3), &b"ab"[..]), (EndpointId(4), &b"cd"[..])]
        );
    }
}
