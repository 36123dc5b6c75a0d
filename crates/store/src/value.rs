//! Value storage: words written in place under the object's lock and copied by readers
//! without one (see `Header` for the protocol that makes the copy consistent).

use arc_swap::ArcSwap;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crate::table::ValueSize;

/// A value's bytes in atomic words, so a reader racing a writer reads stale or mixed
/// words (which the header check then rejects), never undefined behaviour.
pub(crate) struct Words {
    len: AtomicUsize,
    data: Box<[AtomicU64]>,
}

impl Words {
    fn with_capacity(bytes: usize) -> Self {
        Self {
            len: AtomicUsize::new(0),
            data: (0..bytes.div_ceil(8)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn capacity(&self) -> usize {
        self.data.len() * 8
    }
}

/// Largest fixed value kept inside the object itself: 32 bytes, the size of YCSB-like
/// and TATP values, so reading one touches the index entry and nothing else.
pub(crate) const INLINE_BYTES: usize = 32;

/// The value of one object.
pub(crate) enum ValueCell {
    /// A value of a fixed-size table of at most [`INLINE_BYTES`]: its words are part of
    /// the object (one cache miss fewer per read, and no reference count to touch).
    Inline {
        len: AtomicUsize,
        data: [AtomicU64; INLINE_BYTES / 8],
    },
    /// A larger or variable-size value in its own buffer. The buffer is replaced only to
    /// grow (a variable-size value outgrowing it); readers that still hold the old buffer
    /// read an unchanged old value, and `arc-swap` frees it once the last of them is done.
    Heap(ArcSwap<Words>),
}

impl ValueCell {
    /// A cell for the values of a table of `size`, with room for `capacity_bytes` at
    /// first.
    pub(crate) fn new(size: ValueSize, capacity_bytes: usize) -> Self {
        match size {
            ValueSize::Fixed(n) if n <= INLINE_BYTES && capacity_bytes <= INLINE_BYTES => {
                Self::Inline {
                    len: AtomicUsize::new(0),
                    data: std::array::from_fn(|_| AtomicU64::new(0)),
                }
            }
            _ => Self::Heap(ArcSwap::from_pointee(Words::with_capacity(capacity_bytes))),
        }
    }

    /// Copies the value into `out` (cleared first). Without the header check around it
    /// the copy may be torn.
    pub(crate) fn copy_into(&self, out: &mut Vec<u8>) {
        match self {
            Self::Inline { len, data } => copy_words(len, data, out),
            Self::Heap(words) => {
                let words = words.load();
                copy_words(&words.len, &words.data, out);
            }
        }
    }

    /// Writes `value`. Only the holder of the object's lock may call this.
    pub(crate) fn write(&self, value: &[u8]) {
        match self {
            Self::Inline { len, data } => {
                assert!(
                    value.len() <= INLINE_BYTES,
                    "a fixed-size value is checked before it is written"
                );
                store_words(len, data, value);
            }
            Self::Heap(cell) => {
                let words = cell.load();
                if value.len() > words.capacity() {
                    drop(words);
                    let grown = Words::with_capacity(value.len());
                    store_words(&grown.len, &grown.data, value);
                    cell.store(std::sync::Arc::new(grown));
                    return;
                }
                store_words(&words.len, &words.data, value);
            }
        }
    }
}

fn copy_words(len: &AtomicUsize, data: &[AtomicU64], out: &mut Vec<u8>) {
    // The length and the words are read racily; a length never exceeds the capacity of
    // the buffer it was written to, so the copy stays in bounds.
    let len = len.load(Ordering::Relaxed).min(data.len() * 8);
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

fn store_words(len: &AtomicUsize, data: &[AtomicU64], value: &[u8]) {
    for (word, chunk) in data.iter().zip(value.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
    }
    len.store(value.len(), Ordering::Relaxed);
}
