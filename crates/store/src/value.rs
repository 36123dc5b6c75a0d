//! Value storage: words written in place under the object's lock and copied by readers
//! without one (see `Header` for the protocol that makes the copy consistent).

use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};

use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crate::table::ValueSize;

/// A value's bytes in atomic words, so a reader racing a writer reads stale or mixed
/// words (which the header check then rejects), never undefined behaviour.
pub(crate) struct Words {
    /// The value's length in a [`ValueCell::Heap`] buffer (a [`ValueCell::Variable`]
    /// keeps its own, beside the small value's words).
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

/// Largest value of a variable-size table kept inside the object itself. A Redis key's
/// stored value is its key and value with a small header, so this holds a 16-byte key
/// with a value of 20-odd bytes. A value in its own buffer costs every read and write two
/// more cache misses (the buffer's header, then its words): with values in buffers,
/// writing them took a third of a node's time under `redis-benchmark -P 16 -t set`.
pub(crate) const SMALL_BYTES: usize = 48;

/// The value of one object.
pub(crate) enum ValueCell {
    /// A value of a fixed-size table of at most [`INLINE_BYTES`]: its words are part of
    /// the object (one cache miss fewer per read, and no reference count to touch).
    Inline {
        len: AtomicUsize,
        data: [AtomicU64; INLINE_BYTES / 8],
    },
    /// A larger fixed-size value in its own buffer, which never changes.
    Heap(ArcSwap<Words>),
    /// A value of a variable-size table: in `small` while it has at most [`SMALL_BYTES`]
    /// (`len` says which), otherwise in `large`, a buffer replaced only to grow; readers
    /// that still hold the old buffer read an unchanged old value, and `arc-swap` frees it
    /// once the last of them is done. A value that shrinks back into `small` keeps the
    /// buffer for the next large one.
    Variable {
        len: AtomicUsize,
        small: [AtomicU64; SMALL_BYTES / 8],
        large: ArcSwapOption<Words>,
    },
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
            ValueSize::Fixed(_) => {
                Self::Heap(ArcSwap::from_pointee(Words::with_capacity(capacity_bytes)))
            }
            ValueSize::Variable(_) => Self::Variable {
                len: AtomicUsize::new(0),
                small: std::array::from_fn(|_| AtomicU64::new(0)),
                large: ArcSwapOption::new(
                    (capacity_bytes > SMALL_BYTES)
                        .then(|| Arc::new(Words::with_capacity(capacity_bytes))),
                ),
            },
        }
    }

    /// Copies the value into `out` (cleared first). Without the header check around it
    /// the copy may be torn.
    pub(crate) fn copy_into(&self, out: &mut Vec<u8>) {
        match self {
            Self::Inline { len, data } => copy_words(len.load(Ordering::Relaxed), data, out),
            Self::Heap(words) => {
                let words = words.load();
                copy_words(words.len.load(Ordering::Relaxed), &words.data, out);
            }
            Self::Variable { len, small, large } => {
                let len = len.load(Ordering::Relaxed);
                if len <= SMALL_BYTES {
                    copy_words(len, small, out);
                } else {
                    match &*large.load() {
                        Some(words) => copy_words(len, &words.data, out),
                        // Torn: a writer is between the two; the header check rejects it.
                        None => out.clear(),
                    }
                }
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
                store_words(data, value);
                len.store(value.len(), Ordering::Relaxed);
            }
            Self::Heap(cell) => {
                let words = cell.load();
                if value.len() > words.capacity() {
                    drop(words);
                    let grown = Words::with_capacity(value.len());
                    store_words(&grown.data, value);
                    grown.len.store(value.len(), Ordering::Relaxed);
                    cell.store(Arc::new(grown));
                    return;
                }
                store_words(&words.data, value);
                words.len.store(value.len(), Ordering::Relaxed);
            }
            Self::Variable { len, small, large } => {
                if value.len() <= SMALL_BYTES {
                    store_words(small, value);
                } else {
                    let words = large.load();
                    match &*words {
                        Some(words) if words.capacity() >= value.len() => {
                            store_words(&words.data, value);
                        }
                        _ => {
                            drop(words);
                            let grown = Words::with_capacity(value.len());
                            store_words(&grown.data, value);
                            large.store(Some(Arc::new(grown)));
                        }
                    }
                }
                len.store(value.len(), Ordering::Relaxed);
            }
        }
    }
}

/// Copies the first `len` bytes of `data` into `out`. The length and the words are read
/// racily; `len` is clamped to the words there are, so the copy stays in bounds.
fn copy_words(len: usize, data: &[AtomicU64], out: &mut Vec<u8>) {
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
fn store_words(data: &[AtomicU64], value: &[u8]) {
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
    fn variable_values_move_between_the_object_and_a_buffer() {
        let cell = ValueCell::new(ValueSize::Variable(1 << 20), 0);
        assert!(matches!(&cell, ValueCell::Variable { large, .. } if large.load().is_none()));
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
        let ValueCell::Variable { large, .. } = &cell else {
            unreachable!()
        };
        assert_eq!(large.load().as_ref().unwrap().capacity(), 4000);
        // A new cell for a large value starts with its buffer.
        let large = ValueCell::new(ValueSize::Variable(1 << 20), 100);
        large.write(&[3; 100]);
        assert_eq!(read(&large), [3; 100]);
    }

    #[test]
    fn fixed_values_inline_and_in_a_buffer() {
        let inline = ValueCell::new(ValueSize::Fixed(20), 20);
        assert!(matches!(inline, ValueCell::Inline { .. }));
        inline.write(&[1; 20]);
        assert_eq!(read(&inline), [1; 20]);
        let heap = ValueCell::new(ValueSize::Fixed(100), 100);
        assert!(matches!(heap, ValueCell::Heap(_)));
        heap.write(&[2; 100]);
        assert_eq!(read(&heap), [2; 100]);
    }
}
