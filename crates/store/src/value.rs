//! Value storage: words written in place under the object's lock and copied by readers
//! without one (see `Header` for the protocol that makes the copy consistent).

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// A value's bytes in atomic words, so a reader racing a writer reads stale or mixed
/// words (which the header check then rejects), never undefined behaviour.
pub(crate) struct Words {
    data: Box<[AtomicU64]>,
}

impl Words {
    fn with_capacity(bytes: usize) -> Self {
        Self {
            data: (0..bytes.div_ceil(8)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn capacity(&self) -> usize {
        self.data.len() * 8
    }
}

/// Largest value kept inside the object itself: 32 bytes, the size of YCSB-like and TATP
/// values, and of a Redis key's stored value with a 16-byte key and a short value. A value
/// in a buffer of its own costs each read and write two more cache misses (the buffer's
/// header, then its words): with every Redis value in a buffer, writing them took a third
/// of a node's time under `redis-benchmark -P 16 -t set`.
pub(crate) const SMALL_BYTES: usize = 32;

/// The value of one object: in `small` while it has at most [`SMALL_BYTES`] (`len` says
/// which), otherwise in `large`, a buffer replaced only to grow. Readers that still hold
/// an old buffer read an unchanged old value, and `arc-swap` frees it once the last of
/// them is done; a value that shrinks back into `small` keeps the buffer for the next
/// large one. 48 bytes, whatever the table.
pub(crate) struct ValueCell {
    len: AtomicUsize,
    small: [AtomicU64; SMALL_BYTES / 8],
    large: ArcSwapOption<Words>,
}

impl ValueCell {
    /// A cell with room for `capacity_bytes` at first (a fixed-size table's values, or
    /// the first value of a variable-size one).
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        Self {
            len: AtomicUsize::new(0),
            small: std::array::from_fn(|_| AtomicU64::new(0)),
            large: ArcSwapOption::new(
                (capacity_bytes > SMALL_BYTES)
                    .then(|| Arc::new(Words::with_capacity(capacity_bytes))),
            ),
        }
    }

    /// Copies the value into `out` (cleared first). Without the header check around it
    /// the copy may be torn.
    pub(crate) fn copy_into(&self, out: &mut Vec<u8>) {
        let len = self.len.load(Ordering::Relaxed);
        if len <= SMALL_BYTES {
            copy_words(len, &self.small, out);
        } else {
            match &*self.large.load() {
                Some(words) => copy_words(len, &words.data, out),
                // Torn: a writer is between the two; the header check rejects the copy.
                None => out.clear(),
            }
        }
    }

    /// Bytes of the buffer of large values, if any.
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.large
            .load()
            .as_ref()
            .map_or(0, |words| words.capacity())
    }

    /// Lets go of the buffer of large values, if any (readers still copying from it keep
    /// it until they are done), returning its bytes. For a reclaimed object, whose value
    /// no one reads again.
    pub(crate) fn release_buffer(&self) -> usize {
        let bytes = self.buffer_bytes();
        if bytes > 0 {
            self.large.store(None);
        }
        bytes
    }

    /// Writes `value`, returning the bytes its buffer grew by (a larger one replaced it).
    /// Only the holder of the object's lock may call this.
    pub(crate) fn write(&self, value: &[u8]) -> isize {
        let mut grown = 0;
        if value.len() <= SMALL_BYTES {
            store_words(&self.small, value);
        } else {
            let words = self.large.load();
            match &*words {
                Some(words) if words.capacity() >= value.len() => {
                    store_words(&words.data, value);
                }
                _ => {
                    let before = words.as_ref().map_or(0, |words| words.capacity());
                    drop(words);
                    let larger = Words::with_capacity(value.len());
                    store_words(&larger.data, value);
                    grown = larger.capacity() as isize - before as isize;
                    self.large.store(Some(Arc::new(larger)));
                }
            }
        }
        self.len.store(value.len(), Ordering::Relaxed);
        grown
    }
}

/// Copies the first `len` bytes of `data` into `out`. The length and the words are read
/// racily; `len` is clamped to the words there are, so the copy stays in bounds.
pub(crate) fn copy_words(len: usize, data: &[AtomicU64], out: &mut Vec<u8>) {
    let len = len.min(data.len() * 8);
    out.clear();
    out.reserve(len);
    let full = len / 8;
    for word in &data[..full] {
        out.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
    let rest = len % 8;
    if rest > 0 {
        let last = data[full].load(Ordering::Relaxed).to_le_bytes();
        out.extend_from_slice(&last[..rest]);
    }
}

/// Writes `value` into the first words of `data` (which must have room).
pub(crate) fn store_words(data: &[AtomicU64], value: &[u8]) {
    debug_assert!(value.len() <= data.len() * 8);
    for (word, chunk) in data.iter().zip(value.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    fn read(cell: &ValueCell) -> Vec<u8> {
        let mut out = vec![0xaa; 3];
        cell.copy_into(&mut out);
        out
    }

    #[test]
    fn values_move_between_the_object_and_a_buffer() {
        assert_eq!(std::mem::size_of::<ValueCell>(), 48);
        let cell = ValueCell::new(0);
        assert!(cell.large.load().is_none());
        assert_eq!(read(&cell), b"");
        let sizes = [
            5,
            SMALL_BYTES,
            SMALL_BYTES + 1,
            1000,
            7,
            0,
            999,
            4000,
            SMALL_BYTES,
        ];
        for (i, size) in sizes.into_iter().enumerate() {
            let value: Vec<u8> = (0..size).map(|b| (b * 7 + i) as u8).collect();
            cell.write(&value);
            assert_eq!(read(&cell), value, "{size} bytes");
        }
        // Small values never made a buffer; the buffer grew only when it had to.
        assert_eq!(cell.large.load().as_ref().unwrap().capacity(), 4000);
        // A cell for large values starts with its buffer; one for small ones without.
        let large = ValueCell::new(100);
        assert_eq!(large.large.load().as_ref().unwrap().capacity(), 104);
        large.write(&[3; 100]);
        assert_eq!(read(&large), [3; 100]);
        let small = ValueCell::new(SMALL_BYTES);
        assert!(small.large.load().is_none());
        small.write(&[4; SMALL_BYTES]);
        assert_eq!(read(&small), [4; SMALL_BYTES]);
    }
}
