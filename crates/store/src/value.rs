//! Value storage: words written in place under the object's lock and copied by readers
//! without one (see `Header` for the protocol that makes the copy consistent).

use arc_swap::ArcSwap;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// A value's bytes in atomic words, so a reader racing a writer reads stale or mixed
/// words (which the header check then rejects), never undefined behaviour.
struct Words {
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

/// The value of one object. Its buffer is replaced only to grow (a variable-size value
/// outgrowing it); readers that still hold the old buffer read an unchanged old value,
/// and `arc-swap` frees it once the last of them is done.
pub(crate) struct ValueCell {
    words: ArcSwap<Words>,
}

impl ValueCell {
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        Self {
            words: ArcSwap::from_pointee(Words::with_capacity(capacity_bytes)),
        }
    }

    /// Copies the value into `out` (cleared first). Without the header check around it
    /// the copy may be torn.
    pub(crate) fn copy_into(&self, out: &mut Vec<u8>) {
        let words = self.words.load();
        // The length and the words are read racily; a length never exceeds the capacity
        // of the buffer it was written to, so the copy stays in bounds.
        let len = words.len.load(Ordering::Relaxed).min(words.capacity());
        out.clear();
        out.reserve(len);
        let full = len / 8;
        for word in &words.data[..full] {
            out.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
        let rest = len % 8;
        if rest > 0 {
            let last = words.data[full].load(Ordering::Relaxed).to_le_bytes();
            out.extend_from_slice(&last[..rest]);
        }
    }

    /// Writes `value`. Only the holder of the object's lock may call this.
    pub(crate) fn write(&self, value: &[u8]) {
        let words = self.words.load();
        if value.len() > words.capacity() {
            drop(words);
            let grown = Words::with_capacity(value.len());
            store_words(&grown, value);
            self.words.store(std::sync::Arc::new(grown));
            return;
        }
        store_words(&words, value);
    }
}

fn store_words(words: &Words, value: &[u8]) {
    for (word, chunk) in words.data.iter().zip(value.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
    }
    words.len.store(value.len(), Ordering::Relaxed);
}
