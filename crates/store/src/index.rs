//! The hash index of one table of one partition: key to object, read without locks.
//!
//! - Objects are records in the table's own memory (see `object`): header, key and value
//!   together, in buckets of records that double in size and never move: no allocation
//!   per key. A record is numbered in the order it was made, and that number is its
//!   place.
//! - The table is open addressing with linear probing over 8-byte slots: the top 32 bits
//!   of the key's hash (the tag), then the record's number plus one (0: empty), stored
//!   in one word. The tag's low bits are the home slot, so a growth moves a slot without
//!   reading its key; its high bits spare most probes a look at a record. Kept at most
//!   three quarters full, tombstones included. A lookup is one cache miss for the slot
//!   (a probe rarely leaves its cache line) and one for the record.
//! - Inserting a new key takes the index's mutex (an object is created once per key;
//!   lookups, locks and writes of existing keys take none).
//! - Growing is incremental, as in Redis: it publishes an empty table twice the size, and
//!   each insert after it moves a few slots of the previous table into it, so no insert
//!   rebuilds a whole table under the mutex on a worker (tens of milliseconds at a few
//!   hundred thousand keys, a backup being filled among them; seconds at tens of
//!   millions). Meanwhile a lookup that misses in the new table looks in the previous
//!   one, which holds every key inserted before the growth. Once the move ends, the
//!   previous table is freed through epoch-based reclamation (`crossbeam-epoch`).
//! - Reclaiming a deleted (or never written) key's object ([`Index::reclaim`]) locks it
//!   for good, marks its record dead (no lookup matches it any more) and its slot a
//!   tombstone (a probe goes on past it; the next table leaves it behind), and raises
//!   the floor of the key's bucket to its version: a key with no object reads at its
//!   bucket's floor, and a new object starts there, so versions never go back. Floors
//!   are per bucket of key hashes, not per table, so that reclaiming one key does not
//!   move the version every other absent key reads at (which would fail every
//!   transaction that read one absent, or inserts one, while the reclaimer works).
//!   The record is made again for another key only after the epoch's grace period:
//!   every caller holds a pin while it uses an object (the guard [`Index::get`] takes),
//!   so none still reads it. A lookup that reaches it later, through a slot of a table
//!   being moved from, reads its header first, and a record made again writes its
//!   header last.
//! - Record numbers give scans a cursor that survives growth.

use std::alloc::Layout;
use std::hash::BuildHasher;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use crate::sync::Mutex;

use crossbeam_epoch::Guard;
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use foldhash::fast::FixedState;

use crate::epoch::Epoch;
use crate::key::Key;
use crate::object::{ObjectRef, RecordLayout};
use crate::table::ValueSize;

/// Slots of a new index.
const INITIAL_SLOTS: usize = 16;

/// Slots of the previous table moved into the new one per insert while growing. A table
/// of S slots grows at 3S/4 entries and its successor at 3S/2: 3S/4 inserts later, by
/// when the S slots moved at 4/3 per insert. 8 leaves a margin (and growing finishes the
/// move if one is left).
const MOVE_PER_INSERT: usize = 8;

/// Buckets of key hashes with a floor each (a power of two): a reclaim moves the version
/// absent keys read at only in its key's bucket. A batch of `RECLAIM_KEYS_MAX` (256)
/// reclaims raises about 6% of them; 32 KiB per table of a partition.
pub const FLOOR_BUCKETS: usize = 4096;

/// Bytes of a table's first bucket of records, about (later ones double).
const FIRST_BUCKET_BYTES: usize = 4096;

/// Buckets of records: enough for 2^32 records from a first bucket of one.
const BUCKETS: usize = 33;

/// Records a table holds at most: numbers fit the 32 bits of a slot, with 0 for empty.
const RECORDS_MAX: usize = u32::MAX as usize - 1;

/// One table of slots, a power of two of them.
struct Slots {
    mask: usize,
    slots: Box<[AtomicU64]>,
}

impl Slots {
    fn new(len: usize) -> Self {
        debug_assert!(len.is_power_of_two());
        // Zeroed by the allocator, not written slot by slot: a large table comes from
        // fresh pages, already zero, whose first touches are then spread over the inserts
        // that fill them.
        let layout = Layout::array::<AtomicU64>(len).expect("a table's size fits");
        // SAFETY: the layout has a nonzero size (a table has at least INITIAL_SLOTS).
        let first = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicU64>();
        if first.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Self {
            mask: len - 1,
            // SAFETY: `len` atomics allocated with the global allocator in their array
            // layout, as a box of them is; zero is a valid (empty) slot.
            slots: unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(first, len)) },
        }
    }

    /// Puts a slot word (of a key not in the table) in the first empty slot from its
    /// home. Only under the index's mutex.
    fn place(&self, word: u64) {
        let mut i = home(word >> 32) & self.mask;
        loop {
            let slot = &self.slots[i];
            if slot.load(Ordering::Relaxed) == 0 {
                slot.store(word, Ordering::Release);
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    fn bytes(&self) -> usize {
        self.slots.len() * size_of::<AtomicU64>()
    }
}

/// A key's home slot, before masking: its tag.
#[inline]
fn home(tag: u64) -> usize {
    tag as usize
}

/// The records of one table: bucket `b` holds `first << b` of them, so record `n` is in
/// bucket `log2(n / first + 1)`; a bucket is allocated when its first record is made and
/// never moves.
struct Records {
    layout: RecordLayout,
    /// log2 of the first bucket's records.
    first_shift: u32,
    buckets: [AtomicPtr<u8>; BUCKETS],
}

impl Records {
    fn new(layout: RecordLayout) -> Self {
        let first = (FIRST_BUCKET_BYTES / layout.stride())
            .max(1)
            .next_power_of_two();
        Self {
            layout,
            first_shift: first.trailing_zeros(),
            buckets: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// Record `n`'s bucket and place in it.
    #[inline]
    fn locate(&self, n: usize) -> (usize, usize) {
        let shifted = n + (1 << self.first_shift);
        let bucket = (usize::BITS - 1 - shifted.leading_zeros() - self.first_shift) as usize;
        (bucket, shifted - (1 << (bucket as u32 + self.first_shift)))
    }

    fn bucket_layout(&self, bucket: usize) -> Layout {
        Layout::from_size_align(
            self.layout.stride() << (bucket as u32 + self.first_shift),
            RecordLayout::ALIGN,
        )
        .expect("a bucket's size fits")
    }

    /// The address of record `n`, whose bucket exists.
    #[inline]
    fn at(&self, n: usize) -> NonNull<u8> {
        let (bucket, place) = self.locate(n);
        let start = self.buckets[bucket].load(Ordering::Acquire);
        debug_assert!(!start.is_null());
        // SAFETY: record `n` was made, so its bucket is allocated, and `place` is within
        // it.
        unsafe { NonNull::new_unchecked(start.add(place * self.layout.stride())) }
    }

    /// The address for a new record `n`, allocating its bucket if it is the first.
    /// Only under the index's mutex.
    fn make_room(&self, n: usize) -> NonNull<u8> {
        let (bucket, _) = self.locate(n);
        if self.buckets[bucket].load(Ordering::Relaxed).is_null() {
            let layout = self.bucket_layout(bucket);
            // Zeroed as the slots are: fresh pages, first touched by the records.
            // SAFETY: a bucket is never of size 0.
            let start = unsafe { std::alloc::alloc_zeroed(layout) };
            if start.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            self.buckets[bucket].store(start, Ordering::Release);
        }
        self.at(n)
    }

    /// Bytes of the buckets allocated.
    fn bytes(&self) -> usize {
        (0..BUCKETS)
            .filter(|&b| !self.buckets[b].load(Ordering::Relaxed).is_null())
            .map(|b| self.bucket_layout(b).size())
            .sum()
    }
}

/// What only the mutex holder touches.
struct Inner {
    /// Records made (numbers handed out); some may be dead, waiting to be made again.
    made: usize,
    /// Keys with a slot (each has a live record).
    live: usize,
    /// Slots of the current table holding a key or a tombstone.
    occupied: usize,
    /// While growing: the next slot of the previous table to move into the current one.
    moved: usize,
}

/// A slot whose key was reclaimed: a probe goes on past it; only a new table drops it.
const TOMBSTONE: u64 = u64::MAX;

/// The record number a slot word holds, or `None` for a tombstone.
#[inline]
fn record_of(word: u64) -> Option<usize> {
    let low = word as u32;
    (low != u32::MAX).then(|| (low - 1) as usize)
}

/// The index of one table of one partition, and its objects.
pub(crate) struct Index {
    hasher: FixedState,
    records: Records,
    /// The current table (owned by the index: freed when it drops, or retired through
    /// the epoch once it is no longer current and its move has ended).
    current: AtomicPtr<Slots>,
    /// While growing, the previous table (whose slots are being moved into the current
    /// one); null once every one of them is there.
    previous: AtomicPtr<Slots>,
    /// Per bucket of key hashes (the hash's low bits), at least the version of every
    /// object of the bucket reclaimed so far: the version a key with no object reads at,
    /// and a new object starts from, so that a key's versions never go back when its
    /// object is reclaimed and made again. Raised under the mutex.
    floors: Box<[AtomicU64]>,
    /// Set when an absent or deleted object may have appeared (an absent placeholder
    /// made, a delete installed or applied), cleared when a walk for them starts: the
    /// reclaimer walks only tables that may have some.
    tombstones_maybe: AtomicBool,
    /// Numbers of reclaimed records no lookup can still be reading, to make again.
    free: Arc<SegQueue<u32>>,
    /// The epoch lookups pin and reclaims wait for (see [`Epoch`]).
    epoch: Epoch,
    /// Bytes of live records and of tables of slots (see [`Index::used_bytes`]); changed
    /// under the mutex, read by anyone.
    used: CachePadded<std::sync::atomic::AtomicUsize>,
    inner: Mutex<Inner>,
}

// SAFETY: the raw pointers are to records and tables the index owns; records are shared
// through their own atomics (the header's protocol), and tables are atomics, replaced
// only under the mutex and freed only after every reader pinned before is done.
unsafe impl Send for Index {}
// SAFETY: as above.
unsafe impl Sync for Index {}

/// Where a key's slot is, under the mutex: the table, the slot and the record.
type Found<'a> = (&'a Slots, usize, usize);

impl Index {
    /// An empty index of a table whose values are of `size`, hashing with `seed`, whose
    /// lookups pin `epoch`.
    pub(crate) fn new(seed: u64, size: ValueSize, epoch: Epoch) -> Self {
        let first = Box::new(Slots::new(INITIAL_SLOTS));
        let floors: Box<[AtomicU64]> = (0..FLOOR_BUCKETS).map(|_| AtomicU64::new(0)).collect();
        let used = CachePadded::new(std::sync::atomic::AtomicUsize::new(
            first.bytes() + std::mem::size_of_val(&*floors),
        ));
        let first = Box::into_raw(first);
        Self {
            hasher: FixedState::with_seed(seed),
            records: Records::new(RecordLayout::of(size)),
            current: AtomicPtr::new(first),
            previous: AtomicPtr::new(std::ptr::null_mut()),
            floors,
            tombstones_maybe: AtomicBool::new(false),
            free: Arc::new(SegQueue::new()),
            epoch,
            used,
            inner: Mutex::new(Inner {
                made: 0,
                live: 0,
                occupied: 0,
                moved: 0,
            }),
        }
    }

    fn lock(&self) -> impl std::ops::DerefMut<Target = Inner> + '_ {
        // The index is consistent at every step a panic could interrupt.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Record `n`'s object.
    #[inline]
    fn object(&self, n: usize) -> ObjectRef<'_> {
        // SAFETY: record `n` was made (its number was published in a slot, or is below
        // `made`), and records live as long as the index.
        unsafe { ObjectRef::new(self.records.at(n), &self.records.layout) }
    }

    /// The hash of `key`: its tag is the high half, its floor's bucket the low bits.
    #[inline]
    pub(crate) fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn floor_cell(&self, hash: u64) -> &AtomicU64 {
        &self.floors[hash as usize & (FLOOR_BUCKETS - 1)]
    }

    /// The version a key of `hash` with no object reads at (see [`Index::floors`]).
    #[inline]
    pub(crate) fn floor(&self, hash: u64) -> u64 {
        // In one total order with the raises and the floor new objects start from, so
        // that a read's loads before and after its lookup bracket them (`Partition::read`).
        self.floor_cell(hash).load(Ordering::SeqCst)
    }

    /// The highest floor of any bucket.
    pub(crate) fn floor_max(&self) -> u64 {
        self.floors
            .iter()
            .map(|f| f.load(Ordering::SeqCst))
            .max()
            .unwrap_or(0)
    }

    /// Appends every bucket's floor, in bucket order, to `out`.
    pub(crate) fn floors(&self, out: &mut Vec<u64>) {
        out.extend(self.floors.iter().map(|f| f.load(Ordering::SeqCst)));
    }

    /// Raises each bucket's floor to at least the same bucket's in `floors` (another
    /// copy's, from [`Index::floors`]). Under the mutex, as new objects read them.
    pub(crate) fn raise_floors(&self, floors: &[u64]) {
        let _inner = self.lock();
        for (floor, &version) in self.floors.iter().zip(floors) {
            if floor.load(Ordering::Relaxed) < version {
                floor.fetch_max(version, Ordering::SeqCst);
            }
        }
    }

    /// Raises the floor of `key`'s bucket to at least `version`: a backup, told by its
    /// primary before the primary reclaims the key's object at that version. Under the
    /// mutex, as new objects read it.
    pub(crate) fn raise_floor(&self, key: &Key, version: u64) {
        let _inner = self.lock();
        self.floor_cell(self.hash(key))
            .fetch_max(version, Ordering::SeqCst);
    }

    /// Notes that an absent or deleted object may have appeared (see
    /// [`Index::take_tombstones_maybe`]). A load first: no write while it is set.
    #[inline]
    pub(crate) fn note_tombstone(&self) {
        if !self.tombstones_maybe.load(Ordering::Relaxed) {
            self.tombstones_maybe.store(true, Ordering::Release);
        }
    }

    /// Whether an absent or deleted object may have appeared since the last call, which
    /// starts a walk for them: one appearing during the walk sets it again.
    pub(crate) fn take_tombstones_maybe(&self) -> bool {
        self.tombstones_maybe.swap(false, Ordering::AcqRel)
    }

    /// Pins the index's epoch: the guard that lookups take ([`Index::get`]).
    #[inline]
    pub(crate) fn pin(&self) -> Guard {
        self.epoch.pin()
    }

    /// The object of `key`, if it has one. Takes no lock; `guard` (from [`Index::pin`])
    /// keeps the object's record from being made again for another key while it is used.
    #[inline]
    pub(crate) fn get<'g>(&'g self, key: &Key, guard: &'g Guard) -> Option<ObjectRef<'g>> {
        self.find(self.hash(key) >> 32, key, guard)
    }

    /// [`Index::get`] of a key whose [`Index::hash`] is known.
    #[inline]
    pub(crate) fn get_hashed<'g>(
        &'g self,
        hash: u64,
        key: &Key,
        guard: &'g Guard,
    ) -> Option<ObjectRef<'g>> {
        self.find(hash >> 32, key, guard)
    }

    #[inline]
    fn find<'g>(&'g self, tag: u64, key: &Key, guard: &'g Guard) -> Option<ObjectRef<'g>> {
        debug_assert!(
            self.epoch.pinned_by(guard),
            "a lookup pinned another epoch than its index's"
        );
        let (len, words) = key.to_words();
        // The current table, then (on a miss) the previous one. Growing publishes
        // `previous` before `current` and clears it only after the move, so a reader that
        // loads `current` and then `previous` gets either the table behind it, or null
        // (or a later table) with the move into `current` visible. Both are loaded before
        // probing: a move that ends during the probe of `current` is still covered.
        let current = self.current.load(Ordering::Acquire);
        let previous = self.previous.load(Ordering::Acquire);
        // SAFETY: `current` is a live table (freed only through the epoch, after the
        // caller's pin).
        if let Some((_, n)) = self.probe(unsafe { &*current }, tag, len, words) {
            return Some(self.object(n));
        }
        if previous.is_null() || previous == current {
            return None;
        }
        // SAFETY: as above.
        self.probe(unsafe { &*previous }, tag, len, words)
            .map(|(_, n)| self.object(n))
    }

    /// The slot and record of the key in `table`, if it has one there.
    #[inline]
    fn probe(
        &self,
        table: &Slots,
        tag: u64,
        len: usize,
        words: [u64; 2],
    ) -> Option<(usize, usize)> {
        let mut i = home(tag) & table.mask;
        loop {
            let word = table.slots[i].load(Ordering::Acquire);
            if word == 0 {
                return None;
            }
            if word >> 32 == tag
                && let Some(n) = record_of(word)
                && self.object(n).has_key(len, words)
            {
                return Some((i, n));
            }
            i = (i + 1) & table.mask;
        }
    }

    /// Under the mutex: where `key`'s slot is, in the current table or, while a move is
    /// under way, in the previous one.
    fn locate(&self, tag: u64, key: &Key) -> Option<Found<'_>> {
        let (len, words) = key.to_words();
        // SAFETY: under the mutex no table is retired.
        let current = unsafe { &*self.current.load(Ordering::Relaxed) };
        if let Some((i, n)) = self.probe(current, tag, len, words) {
            return Some((current, i, n));
        }
        // SAFETY: as above.
        let previous = unsafe { self.previous.load(Ordering::Relaxed).as_ref()? };
        self.probe(previous, tag, len, words)
            .map(|(i, n)| (previous, i, n))
    }

    /// The object of `key`, made at `version` (`None`: its floor, read under the mutex,
    /// so that no reclaim raises it in between) with `value` (`None`: absent or deleted)
    /// if there is none; `Err` with the existing object if there was one.
    pub(crate) fn insert<'g>(
        &'g self,
        key: Key,
        version: Option<u64>,
        value: Option<&[u8]>,
        guard: &'g Guard,
    ) -> Result<ObjectRef<'g>, ObjectRef<'g>> {
        let hash = self.hash(&key);
        let tag = hash >> 32;
        if let Some(object) = self.find(tag, &key, guard) {
            return Err(object);
        }
        let mut inner = self.lock();
        // Another thread may have inserted it since.
        if let Some(object) = self.find(tag, &key, guard) {
            return Err(object);
        }
        // SAFETY: only the mutex holder replaces `current`, and frees a table only after
        // it stopped being current.
        let len = unsafe { &*self.current.load(Ordering::Relaxed) }
            .slots
            .len();
        if (inner.occupied + 1) * 4 > len * 3 {
            // A new table at most half full of the live keys: twice the size when every
            // slot holds a key, the same or half when many hold tombstones; moved into a
            // few slots per insert.
            let want = ((inner.live + 1) * 2)
                .next_power_of_two()
                .max(len / 2)
                .max(INITIAL_SLOTS);
            // A move still under way ends first (it never is, at MOVE_PER_INSERT).
            self.move_slots(&mut inner, usize::MAX);
            let grown = Box::new(Slots::new(want));
            self.add_used(grown.bytes() as isize);
            let grown = Box::into_raw(grown);
            // `previous` before `current`: whoever sees the new table sees the old one
            // behind it.
            self.previous
                .store(self.current.load(Ordering::Relaxed), Ordering::Release);
            self.current.store(grown, Ordering::Release);
            inner.moved = 0;
            inner.occupied = 0;
        }
        let version = version.unwrap_or_else(|| self.floor(hash));
        if value.is_none() {
            self.note_tombstone();
        }
        let n = match self.free.pop() {
            Some(n) => {
                let n = n as usize;
                // SAFETY: a dead record whose reclaim's grace period is over: no lookup
                // that could have seen it alive is still reading it.
                unsafe {
                    self.records
                        .layout
                        .reinit(self.records.at(n), &key, version, value);
                }
                n
            }
            None => {
                let n = inner.made;
                assert!(
                    n < RECORDS_MAX,
                    "a table of one partition holds at most 2^32 - 2 keys"
                );
                let at = self.records.make_room(n);
                // SAFETY: room for record `n`, which nothing holds yet.
                unsafe { self.records.layout.init(at, &key, version, value) };
                inner.made = n + 1;
                n
            }
        };
        // SAFETY: as above.
        let current = unsafe { &*self.current.load(Ordering::Relaxed) };
        current.place(tag << 32 | (n as u64 + 1));
        inner.occupied += 1;
        inner.live += 1;
        self.add_used(self.records.layout.stride() as isize);
        self.move_slots(&mut inner, MOVE_PER_INSERT);
        Ok(self.object(n))
    }

    /// Reclaims `key`'s object if it is an unlocked absent or deleted object at
    /// `version`: raises its floor to `version`, marks the record dead and its slot a
    /// tombstone, and hands the record back for another key once no lookup can still be
    /// reading it. Returns false, changing nothing but perhaps the floor, otherwise.
    pub(crate) fn reclaim(&self, key: &Key, version: u64) -> bool {
        let hash = self.hash(key);
        let tag = hash >> 32;
        let mut inner = self.lock();
        let Some((table, i, n)) = self.locate(tag, key) else {
            return false;
        };
        let object = self.object(n);
        let word = object.header();
        if word.allocated() || word.locked() || word.version() != version {
            return false;
        }
        // The floor first: a lookup that no longer finds the key reads a version at least
        // its last.
        self.floor_cell(hash).fetch_max(version, Ordering::SeqCst);
        if !object.reclaim(version) {
            return false;
        }
        table.slots[i].store(TOMBSTONE, Ordering::Release);
        inner.live -= 1;
        self.add_used(-(self.records.layout.stride() as isize));
        let free = Arc::clone(&self.free);
        let guard = self.epoch.pin();
        guard.defer(move || free.push(n as u32));
        guard.flush();
        true
    }

    /// Moves up to `count` slots of a growth still under way (inserts move a few each,
    /// but a node past its memory limit refuses inserts, and the previous table counts
    /// until it is retired). A load and nothing more when no growth is under way.
    pub(crate) fn settle(&self, count: usize) {
        if self.previous.load(Ordering::Relaxed).is_null() {
            return;
        }
        let mut inner = self.lock();
        self.move_slots(&mut inner, count);
    }

    /// Moves up to `count` slots of the previous table into the current one; once all
    /// are, clears `previous` (lookups then stop looking there) and retires it.
    fn move_slots(&self, inner: &mut Inner, count: usize) {
        let previous = self.previous.load(Ordering::Relaxed);
        if previous.is_null() {
            return;
        }
        // SAFETY: tables are freed only by the mutex holder, after they stop being
        // current or previous.
        let (from, to) = unsafe { (&*previous, &*self.current.load(Ordering::Relaxed)) };
        let end = inner.moved.saturating_add(count).min(from.slots.len());
        for slot in &from.slots[inner.moved..end] {
            let word = slot.load(Ordering::Relaxed);
            // Tombstones stay behind.
            if word != 0 && word != TOMBSTONE {
                to.place(word);
                inner.occupied += 1;
            }
        }
        inner.moved = end;
        if end == from.slots.len() {
            // After every move: a reader that sees null sees all of them in `current`.
            self.previous.store(std::ptr::null_mut(), Ordering::Release);
            self.add_used(-(from.bytes() as isize));
            let retired = previous as usize;
            let guard = self.epoch.pin();
            // SAFETY: no longer reachable from the index; lookups that may still probe it
            // were pinned before this, and the epoch frees it only after they unpin.
            unsafe {
                guard.defer_unchecked(move || drop(Box::from_raw(retired as *mut Slots)));
            }
            guard.flush();
        }
    }

    /// Calls `visit` on up to `count` records in the order of their numbers from number
    /// `cursor` (dead ones included: `visit` skips them), stopping early (before the
    /// record) when it returns false; returns the number of the next one to visit. Holds
    /// the mutex meanwhile (new keys wait, and no record is made again): for scans and
    /// checks, not the hot path.
    pub(crate) fn scan(
        &self,
        cursor: usize,
        count: usize,
        mut visit: impl FnMut(ObjectRef<'_>) -> bool,
    ) -> usize {
        let inner = self.lock();
        let end = cursor.saturating_add(count).min(inner.made);
        let mut next = cursor;
        for n in cursor..end {
            if !visit(self.object(n)) {
                break;
            }
            next += 1;
        }
        next
    }

    /// Records a scan visits (see [`Index::scan`]).
    pub(crate) fn records(&self) -> usize {
        self.lock().made
    }

    /// Number of objects: keys that have one (present, deleted, or absent placeholders
    /// not reclaimed yet).
    pub(crate) fn len(&self) -> usize {
        self.lock().live
    }

    /// Bytes in use: live records (a reclaimed one is free for the next key, although its
    /// bucket stays allocated), tables of slots, and values kept out of line. Atomic
    /// loads, no lock: for the memory limit.
    pub(crate) fn used_bytes(&self) -> usize {
        self.used.load(std::sync::atomic::Ordering::Relaxed) + self.records.layout.buffer_bytes()
    }

    /// Under the mutex.
    fn add_used(&self, bytes: isize) {
        if bytes >= 0 {
            self.used
                .fetch_add(bytes as usize, std::sync::atomic::Ordering::Relaxed);
        } else {
            self.used
                .fetch_sub(bytes.unsigned_abs(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Bytes the index holds: its records' buckets and its tables of slots.
    pub(crate) fn bytes(&self) -> usize {
        let _inner = self.lock();
        // SAFETY: under the mutex, no table is retired.
        let tables = unsafe {
            (*self.current.load(Ordering::Relaxed)).bytes()
                + self
                    .previous
                    .load(Ordering::Relaxed)
                    .as_ref()
                    .map_or(0, Slots::bytes)
        };
        self.records.bytes() + tables
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        let made = self
            .inner
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .made;
        for n in 0..made {
            // SAFETY: records 0..len were made, and nothing borrows the index any more.
            unsafe { self.records.layout.drop_in_place(self.records.at(n)) };
        }
        for bucket in 0..BUCKETS {
            let start = *self.records.buckets[bucket].get_mut();
            if !start.is_null() {
                // SAFETY: allocated in `make_room` with this layout, freed once.
                unsafe { std::alloc::dealloc(start, self.records.bucket_layout(bucket)) };
            }
        }
        let current = *self.current.get_mut();
        let previous = *self.previous.get_mut();
        // SAFETY: the index's own tables (a retired one is the epoch's, and neither of
        // these); no reader remains.
        unsafe {
            drop(Box::from_raw(current));
            if !previous.is_null() && previous != current {
                drop(Box::from_raw(previous));
            }
        }
    }
}

// Objects use shuttle's atomics under its feature, which only work inside its scheduler.
#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;
    use crossbeam_epoch as epoch;

    fn index(seed: u64) -> Index {
        Index::new(seed, ValueSize::Fixed(8), Epoch::process())
    }

    /// Inserts `key` at `version`, holding the version as its value.
    fn insert<'g>(
        index: &'g Index,
        key: u64,
        version: u64,
        guard: &'g Guard,
    ) -> Result<ObjectRef<'g>, ObjectRef<'g>> {
        index.insert(
            Key::from(key),
            Some(version),
            Some(&version.to_le_bytes()),
            guard,
        )
    }

    fn version(object: ObjectRef<'_>) -> u64 {
        object.header().version()
    }

    #[test]
    fn finds_what_it_holds_through_growth() {
        let index = index(7);
        for i in 0..10_000u64 {
            assert!(insert(&index, i, i + 1, &epoch::pin()).is_ok());
            // Everything inserted so far, still there after each growth.
            if i.is_power_of_two() {
                for j in 0..=i {
                    assert_eq!(
                        version(index.get(&Key::from(j), &epoch::pin()).unwrap()),
                        j + 1
                    );
                }
            }
        }
        assert_eq!(index.len(), 10_000);
        assert!(index.get(&Key::from(10_000), &epoch::pin()).is_none());
        // A second insert of a key returns the first entry and makes nothing.
        let guard = epoch::pin();
        let Err(existing) = index.insert(Key::from(5), Some(99), None, &guard) else {
            panic!("a second entry for one key");
        };
        assert_eq!(version(existing), 6);
        // Keys that differ only in length are different keys.
        assert!(
            index
                .get(&Key::from_bytes(&[0; 7]).unwrap(), &epoch::pin())
                .is_none()
        );
    }

    #[test]
    fn records_of_every_shape_keep_their_keys_and_values() {
        // Fixed values of odd sizes, inline and in a cell; variable ones in and out of
        // the record; keys of every length.
        for size in [
            ValueSize::Fixed(0),
            ValueSize::Fixed(3),
            ValueSize::Fixed(32),
            ValueSize::Fixed(2000),
            ValueSize::Variable(1 << 20),
        ] {
            let index = Index::new(9, size, Epoch::process());
            let value = |i: usize| -> Vec<u8> {
                let len = match size {
                    ValueSize::Fixed(n) => n,
                    ValueSize::Variable(_) => i % 100,
                };
                (0..len).map(|b| (b + i) as u8).collect()
            };
            let key = |i: usize| Key::from_bytes(&i.to_le_bytes()[..i % 9]).unwrap();
            // Distinct keys only: a key of n bytes per i below 256 * n.
            let keys: Vec<usize> = (0..600).filter(|i| i % 9 == 0 || *i < 256).collect();
            let mut made = Vec::new();
            for &i in &keys {
                if index
                    .insert(key(i), Some(i as u64 + 1), Some(&value(i)), &epoch::pin())
                    .is_ok()
                {
                    made.push(i);
                }
            }
            let mut out = Vec::new();
            for &i in &made {
                let guard = epoch::pin();
                let object = index.get(&key(i), &guard).expect("made");
                assert_eq!(object.key(), key(i));
                let read = object.read(&mut out).unwrap();
                assert_eq!((read.version, read.present), (i as u64 + 1, true));
                assert_eq!(out, value(i), "{size:?} key {i}");
            }
            assert_eq!(index.len(), made.len());
            assert!(index.bytes() >= made.len() * index.records.layout.stride());
        }
    }

    /// Deletes `key` (lock, install nothing) and returns the tombstone's version.
    fn delete(index: &Index, key: u64) -> u64 {
        let guard = index.pin();
        let object = index.get(&Key::from(key), &guard).expect("a key to delete");
        let version = object.try_lock_any().unwrap();
        object.install(None);
        version + 1
    }

    /// Lets the epoch run deferred work until `done` (bounded: other tests may hold pins
    /// for a while).
    #[expect(
        clippy::disallowed_methods,
        reason = "a test waits for other threads' epoch pins, by the wall clock"
    )]
    fn until(mut done: impl FnMut() -> bool) {
        // By time, not by tries: under a loaded machine other tests' threads hold the
        // epoch back for long (100,000 tries ran out in a CI run).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if done() {
                return;
            }
            epoch::pin().flush();
            std::thread::yield_now();
        }
        panic!("the epoch never advanced in 30 s");
    }

    /// Pins of `index`'s epoch (each flushed) after a reclaim until its record comes back,
    /// while another thread holds the process's epoch pinned if `pinned`.
    #[expect(
        clippy::disallowed_methods,
        reason = "another thread pins the process's epoch meanwhile"
    )]
    fn pins_until_a_record_comes_back(index: &Index, pinned: bool) -> Option<usize> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = pinned.then(|| {
            std::thread::spawn(move || {
                let _guard = epoch::pin();
                ready_tx.send(()).unwrap();
                // Until the sender is dropped.
                let _ = done_rx.recv();
            })
        });
        if other.is_some() {
            ready_rx.recv().unwrap();
        }
        let key = 1_000 + index.records() as u64;
        insert(index, key, 5, &index.pin()).unwrap();
        let version = delete(index, key);
        assert!(index.reclaim(&Key::from(key), version));
        let pins = (1..=1_000).find(|_| {
            index.pin().flush();
            !index.free.is_empty()
        });
        while index.free.pop().is_some() {}
        drop(done_tx);
        if let Some(other) = other {
            other.join().unwrap();
        }
        pins
    }

    #[test]
    fn in_a_private_epoch_records_come_back_whatever_other_threads_pin() {
        // A simulation's stores: which record a new key gets (the order scans visit keys
        // in) must not depend on other threads, or a seed would not replay.
        let private = Index::new(3, ValueSize::Fixed(8), Epoch::private());
        let alone = pins_until_a_record_comes_back(&private, false);
        assert!(alone.is_some(), "the private epoch advances");
        assert_eq!(pins_until_a_record_comes_back(&private, true), alone);
        assert_eq!(pins_until_a_record_comes_back(&private, false), alone);
        // The process's epoch, which node threads share, waits for every thread.
        let shared = index(3);
        assert_eq!(pins_until_a_record_comes_back(&shared, true), None);
    }

    #[test]
    fn reclaimed_keys_are_gone_their_records_made_again_and_versions_never_go_back() {
        let index = index(13);
        for i in 0..100 {
            insert(&index, i, 5, &epoch::pin()).unwrap();
        }
        // Only an unlocked absent or deleted object at the version given.
        assert!(!index.reclaim(&Key::from(1), 5), "present");
        let tombstone = delete(&index, 1);
        assert_eq!(tombstone, 6);
        assert!(!index.reclaim(&Key::from(1), 5), "another version");
        assert!(!index.reclaim(&Key::from(1000), 6), "no such key");
        let floor_of = |key: u64| index.floor(index.hash(&Key::from(key)));
        assert_eq!(floor_of(1), 0);
        {
            let guard = epoch::pin();
            let object = index.get(&Key::from(1), &guard).unwrap();
            object.try_lock(6).unwrap();
            assert!(!index.reclaim(&Key::from(1), 6), "locked");
            object.unlock();
        }
        assert!(index.reclaim(&Key::from(1), 6));
        assert!(index.get(&Key::from(1), &epoch::pin()).is_none());
        assert_eq!(floor_of(1), 6);
        // Only key 1's bucket: other absent keys read where they did.
        let elsewhere = (1000u64..)
            .find(|&k| index.hash(&Key::from(k)) % 4096 != index.hash(&Key::from(1u64)) % 4096)
            .unwrap();
        assert_eq!(floor_of(elsewhere), 0);
        assert_eq!(index.floor_max(), 6);
        assert_eq!(index.len(), 99);
        assert!(!index.reclaim(&Key::from(1), 6), "twice");
        // Its record comes back, for another key, once the epoch says so.
        until(|| !index.free.is_empty());
        let guard = epoch::pin();
        let made = index.insert(Key::from(500), None, None, &guard).unwrap();
        assert_eq!(made.key(), Key::from(500));
        assert_eq!(made.header().version(), floor_of(500));
        assert_eq!(index.records(), 100, "record 1 made again, not a new one");
        // The old key is still gone; the new one and every other are found.
        assert!(index.get(&Key::from(1), &guard).is_none());
        // Key 1 made again starts at its floor, past its reclaimed version.
        let again = index.insert(Key::from(1), None, None, &guard).unwrap();
        assert_eq!(
            again.header().version(),
            6,
            "a new object starts at the floor"
        );
        assert_eq!(
            index.get(&Key::from(500), &guard).unwrap().key(),
            Key::from(500)
        );
        for i in (0..100).filter(|&i| i != 1) {
            assert_eq!(
                index.get(&Key::from(i), &guard).unwrap().key(),
                Key::from(i)
            );
        }
        // A scan skips nothing live and shows the dead as dead.
        let mut keys = Vec::new();
        index.scan(0, usize::MAX, |o| {
            if !o.header().dead() {
                keys.push(o.key());
            }
            true
        });
        assert_eq!(keys.len(), 101);
    }

    #[test]
    fn distinct_keys_set_and_reclaimed_leave_the_index_its_size() {
        // Sessions, caches, queues: every key set once, then deleted. The live keys stay
        // at about 1,000; the index must not grow with the 200,000 keys that passed.
        let index = index(17);
        let mut bytes_after_warmup = 0;
        for i in 0..200_000u64 {
            insert(
                &index,
                i,
                index.floor(index.hash(&Key::from(i))),
                &epoch::pin(),
            )
            .unwrap();
            if i >= 1_000 {
                let old = i - 1_000;
                let version = delete(&index, old);
                assert!(index.reclaim(&Key::from(old), version));
            }
            if i == 20_000 {
                bytes_after_warmup = index.bytes();
            }
            if i % 1_000 == 0 {
                epoch::pin().flush();
            }
        }
        assert_eq!(index.len(), 1_000);
        for i in 199_000..200_000 {
            assert!(index.get(&Key::from(i), &epoch::pin()).is_some());
        }
        assert!(index.get(&Key::from(198_999), &epoch::pin()).is_none());
        // Without reclamation: 200,000 records of 32 bytes (6.4 MB) and their slots. With
        // it, about what the warm-up left, or a few buckets more when other tests' threads
        // hold the epoch back and records wait longer for their grace period (seen on a
        // loaded machine: 0.55 MB after a warm-up of 0.08), so the bounds are absolute.
        assert!(
            index.bytes() <= 2 << 20,
            "{} bytes after 200,000 keys, {} after 20,000",
            index.bytes(),
            bytes_after_warmup
        );
        // Records are made again rather than new ones made (a few wait for the epoch).
        assert!(index.records() < 50_000, "{} records made", index.records());
    }

    #[test]
    fn used_bytes_follow_live_records_tables_and_large_values() {
        let index = index(23);
        let stride = index.records.layout.stride();
        let empty = index.used_bytes();
        assert_eq!(empty, INITIAL_SLOTS * 8 + FLOOR_BUCKETS * 8);
        for i in 0..10_000u64 {
            insert(&index, i, 1, &epoch::pin()).unwrap();
        }
        // The tables grown to, settled: every slot moved.
        let slots = index.used_bytes() - 10_000 * stride - FLOOR_BUCKETS * 8;
        assert!(
            slots.is_power_of_two() && slots >= 10_000 * 8,
            "{slots} bytes of slots"
        );
        for i in 0..10_000u64 {
            let version = delete(&index, i);
            assert!(index.reclaim(&Key::from(i), version));
        }
        // Records reclaimed are no longer used, although their buckets stay.
        assert_eq!(index.used_bytes(), slots + FLOOR_BUCKETS * 8);
        assert!(index.bytes() >= 10_000 * stride);

        // Values out of line count for what their buffers hold.
        let large = Index::new(5, ValueSize::Variable(1 << 20), Epoch::process());
        let base = large.used_bytes();
        let stride = large.records.layout.stride();
        let guard = epoch::pin();
        let object = large
            .insert(Key::from(1u64), Some(1), Some(&[7; 1000]), &guard)
            .unwrap();
        assert_eq!(large.used_bytes(), base + stride + 1000);
        object.try_lock_any().unwrap();
        object.install(Some(&[8; 4000]));
        assert_eq!(large.used_bytes(), base + stride + 4000);
        assert!(object.has_room(4000) && !object.has_room(4001));
        object.try_lock_any().unwrap();
        object.install(Some(&[9; 10]));
        // A value that shrinks back into the record keeps its buffer for the next one.
        assert_eq!(large.used_bytes(), base + stride + 4000);
        object.try_lock_any().unwrap();
        let version = object.install(None);
        drop(guard);
        assert!(large.reclaim(&Key::from(1u64), version));
        assert_eq!(large.used_bytes(), base);
    }

    #[test]
    fn finds_every_key_after_every_insert_while_a_growth_moves_slots() {
        let index = index(11);
        for i in 0..3_000u64 {
            assert!(insert(&index, i, i + 1, &epoch::pin()).is_ok());
            let moving = !index.previous.load(Ordering::Relaxed).is_null();
            for j in 0..=i {
                let guard = epoch::pin();
                let found = index.get(&Key::from(j), &guard);
                assert_eq!(
                    found.map(version),
                    Some(j + 1),
                    "key {j} after {i} (moving: {moving})"
                );
            }
            assert!(index.get(&Key::from(i + 1), &epoch::pin()).is_none());
        }
        // Each growth ended its move before the next: the last table holds every key.
        let inner = index.lock();
        // SAFETY: under the mutex, the current table stays.
        let last = unsafe { &*index.current.load(Ordering::Relaxed) };
        let held = last
            .slots
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count();
        let moving = !index.previous.load(Ordering::Relaxed).is_null();
        assert!(!moving || inner.moved < last.slots.len() / 2);
        if !moving {
            assert_eq!(held, 3_000);
        }
        assert!(
            held * 4 <= last.slots.len() * 3,
            "at most three quarters full"
        );
        // Doubling, not more: 3,000 keys need 4,096 slots at three quarters.
        assert_eq!(last.slots.len(), 4096);
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
        let index = Arc::new(index(5));
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
                            let guard = epoch::pin();
                            let found = index.get(&Key::from(k), &guard);
                            assert_eq!(found.map(version), Some(k + 1), "key {k} of {n}");
                            lookups += 1;
                        }
                    }
                    lookups
                })
            })
            .collect();
        for i in 0..KEYS {
            assert!(insert(&index, i, i + 1, &epoch::pin()).is_ok());
            inserted.store(i + 1, Ordering::Release);
        }
        done.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    }

    #[test]
    fn scans_in_insertion_order_whatever_grows_in_between() {
        let index = index(1);
        let mut seen = Vec::new();
        let mut cursor = 0;
        let mut stopped_once = false;
        for i in 0..1_000u64 {
            assert!(insert(&index, i * 7919, 1, &epoch::pin()).is_ok());
            if i % 10 == 9 {
                cursor = index.scan(cursor, 3, |e| {
                    seen.push(e.key());
                    true
                });
            }
        }
        loop {
            // Stops once before key 500 (as a scan does at a locked object), then goes on.
            let mut stopped = false;
            let next = index.scan(cursor, 64, |e| {
                if e.key() == Key::from(500 * 7919) && !stopped_once {
                    stopped = true;
                    return false;
                }
                seen.push(e.key());
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
        assert_eq!(index.scan(10, 5, |e| e.key() != Key::from(12 * 7919)), 12);
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "a concurrency test: the index's lock-free inserts under real threads"
    )]
    fn concurrent_inserts_and_lookups_agree() {
        use std::sync::Arc;
        let index = Arc::new(index(3));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let index = index.clone();
                std::thread::spawn(move || {
                    // Every thread inserts the same keys in a different order; each key
                    // gets one entry, whoever made it, and lookups always find it after.
                    for n in 0..20_000u64 {
                        let i = (n * (2 * t + 1)) % 20_000;
                        let guard = epoch::pin();
                        let entry = match insert(&index, i, i + 1, &guard) {
                            Ok(e) | Err(e) => e,
                        };
                        assert_eq!(version(entry), i + 1);
                        let guard = epoch::pin();
                        let found = index.get(&Key::from(i), &guard).expect("inserted");
                        assert_eq!(found.key(), entry.key());
                        assert!(std::ptr::eq(found.header_cell(), entry.header_cell()));
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
