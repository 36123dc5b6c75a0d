//! The hash index of one table of one partition: key to object, read without locks.
//!
//! Objects are never removed while the partition lives (a deleted key keeps an object that
//! orders the delete against later inserts), and that makes a simple design safe:
//!
//! - Each key's entry (key and object) is allocated once and never moves or is freed
//!   before the index, so a lookup hands out a plain reference that lives as long as the
//!   index, with no guard or epoch.
//! - The table is open addressing with linear probing over 16-byte slots (the key's full
//!   hash and its entry's address), kept at most half full. A lookup is one cache miss for
//!   the slot (a probe rarely leaves its cache line) and one for the entry, where `papaya`'s
//!   separate metadata, pointer and entry arrays cost three (measured in TATP at 1 M
//!   subscribers per node: the three loads took 86% of `Partition::read`'s samples,
//!   and the index a quarter of all CPU).
//! - Slots are only ever filled, never emptied, so an empty slot ends a probe.
//! - Inserting a new key takes the index's mutex (an object is created once per key;
//!   lookups, locks and writes of existing keys take none). Growing builds a table twice
//!   the size under the mutex and publishes it; readers still on the old table finish
//!   there (it stays allocated until the index drops: the retired tables together are
//!   smaller than the current one).
//! - The entries' insertion order is kept, which gives scans a cursor that survives
//!   growth.

use std::hash::BuildHasher;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use foldhash::fast::FixedState;

use crate::key::Key;
use crate::object::Object;

/// Slots of a new index.
const INITIAL_SLOTS: usize = 16;

/// One key's object.
pub(crate) struct Entry {
    pub(crate) key: Key,
    pub(crate) object: Object,
}

/// A slot: the hash of its key, then its entry's address (0: empty). The hash is written
/// before the address is published, and read after the address is seen.
struct Slot {
    hash: AtomicU64,
    entry: AtomicUsize,
}

/// One table of slots, a power of two of them.
struct Slots {
    mask: usize,
    slots: Box<[Slot]>,
}

impl Slots {
    fn new(len: usize) -> Self {
        debug_assert!(len.is_power_of_two());
        Self {
            mask: len - 1,
            slots: (0..len)
                .map(|_| Slot {
                    hash: AtomicU64::new(0),
                    entry: AtomicUsize::new(0),
                })
                .collect(),
        }
    }

    /// Puts `entry` (of a key not in the table) in the first empty slot from `hash`'s.
    /// Only under the index's mutex.
    fn place(&self, hash: u64, entry: *const Entry) {
        let mut i = hash as usize & self.mask;
        loop {
            let slot = &self.slots[i];
            if slot.entry.load(Ordering::Relaxed) == 0 {
                slot.hash.store(hash, Ordering::Relaxed);
                slot.entry.store(entry as usize, Ordering::Release);
                return;
            }
            i = (i + 1) & self.mask;
        }
    }
}

/// What only the mutex holder touches.
struct Inner {
    /// Every table so far; the last one is current, the others stay for readers that
    /// may still probe them. Boxed: `current` holds a table's address, which must not
    /// move when this vector grows.
    #[allow(clippy::vec_box)]
    tables: Vec<Box<Slots>>,
    /// Every entry, in insertion order; owned by the index (freed when it drops).
    entries: Vec<*const Entry>,
}

/// The index of one table of one partition.
pub(crate) struct Index {
    hasher: FixedState,
    /// The current table (a `*const Slots` owned by `inner.tables`).
    current: AtomicUsize,
    inner: Mutex<Inner>,
}

// SAFETY: the raw pointers are to entries and tables the index owns and frees only when
// it drops; entries are shared read-only apart from their objects, which synchronize
// through their own atomics (`Object` is `Sync`), and keys are plain bytes.
unsafe impl Send for Index {}
// SAFETY: as above; every mutation outside the objects happens under `inner`'s mutex, and
// readers see published slots through release/acquire on the slot's address.
unsafe impl Sync for Index {}

impl Index {
    /// An empty index hashing with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        let first = Box::new(Slots::new(INITIAL_SLOTS));
        let current = &*first as *const Slots as usize;
        Self {
            hasher: FixedState::with_seed(seed),
            current: AtomicUsize::new(current),
            inner: Mutex::new(Inner {
                tables: vec![first],
                entries: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The index is consistent at every step a panic could interrupt.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entry of `key`, if it has one. Takes no lock.
    #[inline]
    pub(crate) fn get(&self, key: &Key) -> Option<&Entry> {
        self.find(self.hasher.hash_one(key), key)
    }

    #[inline]
    fn find(&self, hash: u64, key: &Key) -> Option<&Entry> {
        // SAFETY: `current` always holds the address of a table owned by `inner.tables`,
        // which keeps every table until the index drops.
        let table = unsafe { &*(self.current.load(Ordering::Acquire) as *const Slots) };
        let mut i = hash as usize & table.mask;
        loop {
            let slot = &table.slots[i];
            let entry = slot.entry.load(Ordering::Acquire);
            if entry == 0 {
                return None;
            }
            if slot.hash.load(Ordering::Relaxed) == hash {
                // SAFETY: a published address is of an entry the index owns until it
                // drops, fully written before its release store.
                let entry = unsafe { &*(entry as *const Entry) };
                if entry.key == *key {
                    return Some(entry);
                }
            }
            i = (i + 1) & table.mask;
        }
    }

    /// The entry of `key`, inserted with `make()`'s object if there is none; `Err` with
    /// the existing entry if there was one (then `make` is not called).
    pub(crate) fn insert(&self, key: Key, make: impl FnOnce() -> Object) -> Result<&Entry, &Entry> {
        let hash = self.hasher.hash_one(key);
        if let Some(entry) = self.find(hash, &key) {
            return Err(entry);
        }
        let mut inner = self.lock();
        // Another thread may have inserted it since.
        if let Some(entry) = self.find(hash, &key) {
            return Err(entry);
        }
        let table = inner.tables.last().expect("a table");
        if (inner.entries.len() + 1) * 2 > table.slots.len() {
            let grown = Box::new(Slots::new(table.slots.len() * 2));
            for &entry in &inner.entries {
                // SAFETY: entries are owned by the index and live until it drops.
                let key = unsafe { &(*entry).key };
                grown.place(self.hasher.hash_one(key), entry);
            }
            self.current
                .store(&*grown as *const Slots as usize, Ordering::Release);
            inner.tables.push(grown);
        }
        let entry: *const Entry = Box::into_raw(Box::new(Entry {
            key,
            object: make(),
        }));
        inner.entries.push(entry);
        inner.tables.last().expect("a table").place(hash, entry);
        // SAFETY: just allocated; freed only when the index drops.
        Ok(unsafe { &*entry })
    }

    /// Calls `visit` on up to `count` entries in insertion order from number `cursor`,
    /// stopping early (before the entry) when it returns false; returns the number of the
    /// next entry to visit. Holds the mutex meanwhile (new keys wait): for scans and
    /// checks, not the hot path.
    pub(crate) fn scan(
        &self,
        cursor: usize,
        count: usize,
        mut visit: impl FnMut(&Entry) -> bool,
    ) -> usize {
        let inner = self.lock();
        let end = cursor.saturating_add(count).min(inner.entries.len());
        let mut next = cursor;
        for &entry in inner.entries.get(cursor..end).unwrap_or(&[]) {
            // SAFETY: entries are owned by the index and live until it drops.
            if !visit(unsafe { &*entry }) {
                break;
            }
            next += 1;
        }
        next
    }

    /// Number of entries (keys that ever had an object).
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        let inner = self
            .inner
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for &entry in &inner.entries {
            // SAFETY: each came from `Box::into_raw` once and is freed once, here, when
            // no reference to it can remain (they borrow the index).
            drop(unsafe { Box::from_raw(entry.cast_mut()) });
        }
    }
}

// Objects use shuttle's atomics under its feature, which only work inside its scheduler.
#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;
    use crate::table::ValueSize;

    fn object(version: u64) -> Object {
        Object::new(version, &version.to_le_bytes(), ValueSize::Fixed(8))
    }

    fn version(entry: &Entry) -> u64 {
        entry.object.header().version()
    }

    #[test]
    fn finds_what_it_holds_through_growth() {
        let index = Index::new(7);
        for i in 0..10_000u64 {
            assert!(index.insert(Key::from(i), || object(i + 1)).is_ok());
            // Everything inserted so far, still there after each growth.
            if i.is_power_of_two() {
                for j in 0..=i {
                    assert_eq!(version(index.get(&Key::from(j)).unwrap()), j + 1);
                }
            }
        }
        assert_eq!(index.len(), 10_000);
        assert!(index.get(&Key::from(10_000)).is_none());
        // A second insert of a key returns the first entry and makes nothing.
        let Err(existing) = index.insert(Key::from(5), || panic!("not called")) else {
            panic!("a second entry for one key");
        };
        assert_eq!(version(existing), 6);
        // Keys that differ only in length are different keys.
        assert!(index.get(&Key::from_bytes(&[0; 7]).unwrap()).is_none());
    }

    #[test]
    fn scans_in_insertion_order_whatever_grows_in_between() {
        let index = Index::new(1);
        let mut seen = Vec::new();
        let mut cursor = 0;
        let mut stopped_once = false;
        for i in 0..1_000u64 {
            assert!(index.insert(Key::from(i * 7919), || object(1)).is_ok());
            if i % 10 == 9 {
                cursor = index.scan(cursor, 3, |e| {
                    seen.push(e.key);
                    true
                });
            }
        }
        loop {
            // Stops once before key 500 (as a scan does at a locked object), then goes on.
            let mut stopped = false;
            let next = index.scan(cursor, 64, |e| {
                if e.key == Key::from(500 * 7919) && !stopped_once {
                    stopped = true;
                    return false;
                }
                seen.push(e.key);
                true
            });
            stopped_once |= stopped;
            if next == cursor && !stopped {
                break;
            }
            cursor = next;
        }
        let expected: Vec<Key> = (0..1_000u64).map(|i| Key::from(i * 7919)).collect();
        assert!(stopped_once);
        assert_eq!(seen, expected);
        assert_eq!(index.scan(5_000, 10, |_| panic!("past the end")), 5_000);
        // Stopping visits nothing more and resumes at the entry it stopped before.
        assert_eq!(index.scan(10, 5, |e| e.key != Key::from(12 * 7919)), 12);
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "a concurrency test: the index's lock-free inserts under real threads"
    )]
    fn concurrent_inserts_and_lookups_agree() {
        use std::sync::Arc;
        let index = Arc::new(Index::new(3));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let index = index.clone();
                std::thread::spawn(move || {
                    // Every thread inserts the same keys in a different order; each key
                    // gets one entry, whoever made it, and lookups always find it after.
                    for n in 0..20_000u64 {
                        let i = (n * (2 * t + 1)) % 20_000;
                        let entry = match index.insert(Key::from(i), || object(i + 1)) {
                            Ok(e) | Err(e) => e,
                        };
                        assert_eq!(version(entry), i + 1);
                        let found = index.get(&Key::from(i)).expect("inserted");
                        assert!(std::ptr::eq(found, entry));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(index.len(), 20_000);
    }
}
