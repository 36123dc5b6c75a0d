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
//!   lookups, locks and writes of existing keys take none).
//! - Growing is incremental, as in Redis: it publishes an empty table twice the size, and
//!   each insert after it moves a few slots of the previous table into it, so no insert
//!   rebuilds a whole table under the mutex on a worker (tens of milliseconds at a few
//!   hundred thousand keys, a backup being filled among them; seconds at tens of
//!   millions). Meanwhile a lookup that misses in the new table looks in the previous
//!   one, which holds every key inserted before the growth.
//!   The move ends long before the next growth. Old tables stay allocated until the index
//!   drops (readers may still probe them; together they are smaller than the current one).
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

/// Slots of the previous table moved into the new one per insert while growing. A table
/// of S slots grows at S/2 entries and its successor at S: S/2 inserts later, by when
/// the S slots moved at 2 per insert. 8 leaves a margin (and growing finishes the move
/// if one is left).
const MOVE_PER_INSERT: usize = 8;

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
        // Zeroed by the allocator, not written slot by slot: a large table comes from
        // fresh pages, already zero, whose first touches are then spread over the inserts
        // that fill them.
        let layout = std::alloc::Layout::array::<Slot>(len).expect("a table's size fits");
        // SAFETY: the layout has a nonzero size (a table has at least INITIAL_SLOTS).
        let first = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Slot>();
        if first.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Self {
            mask: len - 1,
            // SAFETY: `len` slots allocated with the global allocator in `Slot`'s array
            // layout, as a box of them is; a slot of zeros is a valid slot (empty).
            slots: unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(first, len)) },
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
    /// While growing: the next slot of the previous table to move into the current one.
    moved: usize,
}

/// The index of one table of one partition.
pub(crate) struct Index {
    hasher: FixedState,
    /// The current table (a `*const Slots` owned by `inner.tables`).
    current: AtomicUsize,
    /// While growing, the previous table (whose slots are being moved into the current
    /// one); 0 once every one of them is there.
    previous: AtomicUsize,
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
            previous: AtomicUsize::new(0),
            inner: Mutex::new(Inner {
                tables: vec![first],
                entries: Vec::new(),
                moved: 0,
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
        // The current table, then (on a miss) the previous one. Growing publishes
        // `previous` before `current` and clears it only after the move, so a reader that
        // loads `current` and then `previous` gets either the table behind it, or 0 (or a
        // later table) with the move into `current` visible. Both are loaded before
        // probing: a move that ends during the probe of `current` is still covered.
        let current = self.current.load(Ordering::Acquire);
        let previous = self.previous.load(Ordering::Acquire);
        // SAFETY: `current` and `previous` hold 0 or the address of a table owned by
        // `inner.tables`, which keeps every table until the index drops.
        if let Some(entry) = Self::probe(unsafe { &*(current as *const Slots) }, hash, key) {
            return Some(entry);
        }
        if previous == 0 || previous == current {
            return None;
        }
        // SAFETY: as above.
        Self::probe(unsafe { &*(previous as *const Slots) }, hash, key)
    }

    #[inline]
    fn probe<'a>(table: &'a Slots, hash: u64, key: &Key) -> Option<&'a Entry> {
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
        let len = inner.tables.last().expect("a table").slots.len();
        if (inner.entries.len() + 1) * 2 > len {
            // A move still under way ends first (it never is, at MOVE_PER_INSERT).
            self.move_slots(&mut inner, usize::MAX);
            let grown = Box::new(Slots::new(len * 2));
            let previous = self.current.load(Ordering::Relaxed);
            // `previous` before `current`: whoever sees the new table sees the old one
            // behind it.
            self.previous.store(previous, Ordering::Release);
            self.current
                .store(&*grown as *const Slots as usize, Ordering::Release);
            inner.tables.push(grown);
            inner.moved = 0;
        }
        let entry: *const Entry = Box::into_raw(Box::new(Entry {
            key,
            object: make(),
        }));
        inner.entries.push(entry);
        inner.tables.last().expect("a table").place(hash, entry);
        self.move_slots(&mut inner, MOVE_PER_INSERT);
        // SAFETY: just allocated; freed only when the index drops.
        Ok(unsafe { &*entry })
    }

    /// Moves up to `count` slots of the previous table into the current one; once all
    /// are, clears `previous` (lookups then stop looking there).
    fn move_slots(&self, inner: &mut Inner, count: usize) {
        if self.previous.load(Ordering::Relaxed) == 0 {
            return;
        }
        let [.., from, to] = &inner.tables[..] else {
            unreachable!("a previous table while there is only one");
        };
        let end = inner.moved.saturating_add(count).min(from.slots.len());
        for slot in &from.slots[inner.moved..end] {
            let entry = slot.entry.load(Ordering::Relaxed);
            if entry != 0 {
                // The hash is the slot's: no key is read (the entries are scattered in
                // memory; the slots are read in order).
                to.place(slot.hash.load(Ordering::Relaxed), entry as *const Entry);
            }
        }
        inner.moved = end;
        if end == from.slots.len() {
            // After every move: a reader that sees 0 sees all of them in `current`.
            self.previous.store(0, Ordering::Release);
        }
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
    fn finds_every_key_after_every_insert_while_a_growth_moves_slots() {
        let index = Index::new(11);
        for i in 0..3_000u64 {
            assert!(index.insert(Key::from(i), || object(i + 1)).is_ok());
            let moving = index.previous.load(Ordering::Relaxed) != 0;
            for j in 0..=i {
                let found = index.get(&Key::from(j));
                assert_eq!(
                    found.map(version),
                    Some(j + 1),
                    "key {j} after {i} (moving: {moving})"
                );
            }
            assert!(index.get(&Key::from(i + 1)).is_none());
        }
        // Each growth ended its move before the next: the last table holds every key.
        let inner = index.lock();
        let last = inner.tables.last().unwrap();
        let held = last
            .slots
            .iter()
            .filter(|s| s.entry.load(Ordering::Relaxed) != 0)
            .count();
        assert!(index.previous.load(Ordering::Relaxed) == 0 || inner.moved < last.slots.len() / 2);
        if index.previous.load(Ordering::Relaxed) == 0 {
            assert_eq!(held, 3_000);
        }
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "a concurrency test: lock-free lookups under real threads while one grows"
    )]
    fn lookups_during_growth_find_every_key_inserted_before_them() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        const KEYS: u64 = 200_000;
        let index = Arc::new(Index::new(5));
        let inserted = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3u64)
            .map(|t| {
                let (index, inserted, done) = (index.clone(), inserted.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut x = t + 1;
                    let mut lookups = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        let n = inserted.load(Ordering::Acquire);
                        if n == 0 {
                            continue;
                        }
                        // The newest keys (those a move is most likely to be passing) and
                        // random older ones.
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        for k in [n - 1, n.saturating_sub(1 + x % 64), x % n] {
                            let found = index.get(&Key::from(k));
                            assert_eq!(found.map(version), Some(k + 1), "key {k} of {n}");
                            lookups += 1;
                        }
                    }
                    lookups
                })
            })
            .collect();
        for i in 0..KEYS {
            assert!(index.insert(Key::from(i), || object(i + 1)).is_ok());
            inserted.store(i + 1, Ordering::Release);
        }
        done.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
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
