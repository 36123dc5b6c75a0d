//! An object: header word, key and value in one record of a table's memory, with the
//! operations of FaRM's protocol.
//!
//! A record is words: the header (lock bit, allocated bit, key length, version), the key
//! in two words, then the value. A fixed-size table's value is its words, inside the
//! record, so an object of TATP's tables takes 32 to 56 bytes with its key; a
//! variable-size table's is a [`ValueCell`] (its first 32 bytes inside, larger values in
//! a buffer of their own). Records are written in place in the memory of their table
//! (see `Index`), or of an [`Object`] of their own.

use std::alloc::Layout;
use std::ptr::NonNull;
// Counters outside the protocol: std's, whatever the `shuttle` feature.
use std::sync::atomic::{AtomicIsize, Ordering as Counter};

use crossbeam_utils::CachePadded;

use crate::error::{LockError, ReadError};
use crate::header::{Header, HeaderWord};
use crate::key::Key;
use crate::sync::{AtomicU64, Ordering};
use crate::table::ValueSize;
use crate::value::{SMALL_BYTES, ValueCell, copy_words, store_words};

/// Attempts of a lock-free read before it reports contention. Each attempt fails only if
/// a writer published during the copy; 64 in a row means the object is written nonstop,
/// and the caller had better back off.
const READ_ATTEMPTS_MAX: usize = 64;

/// Largest fixed-size value kept in its record's words; a larger one lives in a
/// [`ValueCell`]'s buffer, so that a table's first records do not take megabytes.
const INLINE_BYTES_MAX: usize = 1024;

const WORD: usize = size_of::<AtomicU64>();
/// Where the key's two words start in a record, and the value after them.
const KEY_AT: usize = WORD;
const VALUE_AT: usize = 3 * WORD;

/// What a consistent read saw.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReadOutcome {
    /// The object's version (0 for a key that never had an object).
    pub version: u64,
    /// True if the object exists; false for an absent or deleted key (the value buffer
    /// is then left empty).
    pub present: bool,
}

/// Where a table's values live in its records.
#[derive(Clone, Copy, Debug)]
enum ValueKind {
    /// Exactly `len` bytes, in `len` / 8 words (rounded up) inside the record.
    Inline { len: usize },
    /// A value cell inside the record, made with room for `capacity` bytes.
    Cell { capacity: usize },
}

/// The shape of one table's records, and the bytes of their values kept out of line.
#[derive(Debug)]
pub(crate) struct RecordLayout {
    kind: ValueKind,
    stride: usize,
    /// Bytes of the value cells' buffers (values too large for their record): changed
    /// only when a buffer is made, grows or is let go, not per write.
    buffers: CachePadded<AtomicIsize>,
}

impl RecordLayout {
    /// The records of a table whose values are of `size`.
    pub(crate) fn of(size: ValueSize) -> Self {
        let kind = match size {
            ValueSize::Fixed(len) if len <= INLINE_BYTES_MAX => ValueKind::Inline { len },
            ValueSize::Fixed(len) => ValueKind::Cell { capacity: len },
            ValueSize::Variable(_) => ValueKind::Cell { capacity: 0 },
        };
        let value = match kind {
            ValueKind::Inline { len } => len.div_ceil(8) * WORD,
            ValueKind::Cell { .. } => size_of::<ValueCell>(),
        };
        let stride = (VALUE_AT + value).next_multiple_of(Self::ALIGN);
        Self {
            kind,
            stride,
            buffers: CachePadded::new(AtomicIsize::new(0)),
        }
    }

    /// Bytes of the values kept out of line, in their cells' buffers.
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.buffers.load(Counter::Relaxed).max(0) as usize
    }

    fn note_buffers(&self, bytes: isize) {
        if bytes != 0 {
            self.buffers.fetch_add(bytes, Counter::Relaxed);
        }
    }

    /// The alignment of every record.
    pub(crate) const ALIGN: usize = if align_of::<AtomicU64>() > align_of::<ValueCell>() {
        align_of::<AtomicU64>()
    } else {
        align_of::<ValueCell>()
    };

    /// Bytes per record (a multiple of [`RecordLayout::ALIGN`]).
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    /// Writes a record at `at`: `key`, at `version`, holding `value` (`None`: absent or
    /// deleted).
    ///
    /// # Safety
    /// `at` is valid for writes of [`RecordLayout::stride`] bytes, aligned to
    /// [`RecordLayout::ALIGN`], and holds no record (or one already dropped).
    pub(crate) unsafe fn init(
        &self,
        at: NonNull<u8>,
        key: &Key,
        version: u64,
        value: Option<&[u8]>,
    ) {
        let (key_len, key_words) = key.to_words();
        let word = HeaderWord::new(version, value.is_some()).with_key_len(key_len);
        let at = at.as_ptr();
        // SAFETY: in bounds of the record and aligned (every field is at a multiple of
        // WORD from an aligned start); nothing is there to drop.
        unsafe {
            at.cast::<Header>().write(Header::new(word));
            let key_at = at.add(KEY_AT).cast::<AtomicU64>();
            key_at.write(AtomicU64::new(key_words[0]));
            key_at.add(1).write(AtomicU64::new(key_words[1]));
            match self.kind {
                ValueKind::Inline { len } => {
                    let words = at.add(VALUE_AT).cast::<AtomicU64>();
                    for i in 0..len.div_ceil(8) {
                        words.add(i).write(AtomicU64::new(0));
                    }
                }
                ValueKind::Cell { capacity } => {
                    let capacity = capacity.max(value.map_or(0, <[u8]>::len));
                    let cell = ValueCell::new(capacity);
                    self.note_buffers(cell.buffer_bytes() as isize);
                    at.add(VALUE_AT).cast::<ValueCell>().write(cell);
                }
            }
        }
        if let Some(value) = value {
            // SAFETY: just written, as this layout's record.
            unsafe { ObjectRef::new(NonNull::new_unchecked(at), self) }.value_write(value);
        }
    }

    /// Makes the reclaimed record at `at` again, for `key`, as [`RecordLayout::init`]
    /// would, with atomic stores: lookups may still reach it through a slot of a table
    /// being moved from, and they must read it either dead or whole. The header comes
    /// last.
    ///
    /// # Safety
    /// `at` holds a dead record of this layout (see [`ObjectRef::reclaim`]) that no one
    /// else writes.
    pub(crate) unsafe fn reinit(
        &self,
        at: NonNull<u8>,
        key: &Key,
        version: u64,
        value: Option<&[u8]>,
    ) {
        // SAFETY: a record of this layout.
        let object = unsafe { ObjectRef::new(at, self) };
        debug_assert!(object.header().dead());
        let (key_len, key_words) = key.to_words();
        let words = object.key_words();
        words[0].store(key_words[0], Ordering::Relaxed);
        words[1].store(key_words[1], Ordering::Relaxed);
        if let Some(value) = value {
            object.value_write(value);
        }
        let word = HeaderWord::new(version, value.is_some()).with_key_len(key_len);
        object.header_cell().reset(word);
    }

    /// Drops the record at `at` (a value cell's buffer, and shuttle's atomics).
    ///
    /// # Safety
    /// `at` holds a record of this layout, which no one uses any more.
    pub(crate) unsafe fn drop_in_place(&self, at: NonNull<u8>) {
        let at = at.as_ptr();
        // SAFETY: the fields `init` wrote, each dropped once.
        unsafe {
            std::ptr::drop_in_place(at.cast::<Header>());
            let key_at = at.add(KEY_AT).cast::<AtomicU64>();
            std::ptr::drop_in_place(key_at);
            std::ptr::drop_in_place(key_at.add(1));
            match self.kind {
                ValueKind::Inline { len } => {
                    let words = at.add(VALUE_AT).cast::<AtomicU64>();
                    for i in 0..len.div_ceil(8) {
                        std::ptr::drop_in_place(words.add(i));
                    }
                }
                ValueKind::Cell { .. } => {
                    std::ptr::drop_in_place(at.add(VALUE_AT).cast::<ValueCell>());
                }
            }
        }
    }
}

/// One object in its record: a view that borrows the memory holding it.
#[derive(Clone, Copy)]
pub(crate) struct ObjectRef<'a> {
    at: NonNull<u8>,
    layout: &'a RecordLayout,
}

impl std::fmt::Debug for ObjectRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRef")
            .field("key", &self.key())
            .field("header", &self.header())
            .finish()
    }
}

impl<'a> ObjectRef<'a> {
    /// The object of the record at `at`.
    ///
    /// # Safety
    /// `at` holds a record of `layout` (written by [`RecordLayout::init`]) that stays
    /// for `'a`.
    pub(crate) unsafe fn new(at: NonNull<u8>, layout: &'a RecordLayout) -> Self {
        Self { at, layout }
    }

    pub(crate) fn header_cell(&self) -> &'a Header {
        // SAFETY: a record starts with its header (`Header` is a transparent atomic).
        unsafe { self.at.cast::<Header>().as_ref() }
    }

    fn key_words(&self) -> &'a [AtomicU64; 2] {
        // SAFETY: the key's two words follow the header.
        unsafe { self.at.add(KEY_AT).cast::<[AtomicU64; 2]>().as_ref() }
    }

    /// The object's key.
    pub(crate) fn key(&self) -> Key {
        let words = self.key_words();
        Key::from_words(
            self.header().key_len(),
            [
                words[0].load(Ordering::Relaxed),
                words[1].load(Ordering::Relaxed),
            ],
        )
    }

    /// True if this is the object of the key `len` bytes long made of `words` (as
    /// [`Key::to_words`] gives them). A dead record has no key. The header is read
    /// first: a record made again for another key writes its header last.
    #[inline]
    pub(crate) fn has_key(&self, len: usize, words: [u64; 2]) -> bool {
        if self.header().key_len() != len {
            return false;
        }
        let mine = self.key_words();
        mine[0].load(Ordering::Relaxed) == words[0] && mine[1].load(Ordering::Relaxed) == words[1]
    }

    /// Reclaims the object if it is an unlocked absent or deleted object at `version`:
    /// locks it for good and marks it dead (a lookup no longer matches it), and lets go
    /// of its value's buffer. Returns false, changing nothing, otherwise.
    pub(crate) fn reclaim(&self, version: u64) -> bool {
        let word = self.header();
        if word.allocated() || word.dead() || self.try_lock(version).is_err() {
            return false;
        }
        // Locked at `version`: still not allocated (a write needs the lock).
        if let ValueKind::Cell { .. } = self.layout.kind {
            self.layout
                .note_buffers(-(self.cell().release_buffer() as isize));
        }
        self.header_cell().mark_dead();
        true
    }

    fn inline_words(&self, len: usize) -> &'a [AtomicU64] {
        // SAFETY: an inline value's words follow the key, `len` / 8 of them rounded up.
        unsafe {
            std::slice::from_raw_parts(
                self.at.add(VALUE_AT).cast::<AtomicU64>().as_ptr(),
                len.div_ceil(8),
            )
        }
    }

    fn cell(&self) -> &'a ValueCell {
        // SAFETY: a cell's record holds it after the key.
        unsafe { self.at.add(VALUE_AT).cast::<ValueCell>().as_ref() }
    }

    /// Copies the value into `out`. Without the header check around it the copy may be
    /// torn.
    fn value_copy(&self, out: &mut Vec<u8>) {
        match self.layout.kind {
            ValueKind::Inline { len } => copy_words(len, self.inline_words(len), out),
            ValueKind::Cell { .. } => self.cell().copy_into(out),
        }
    }

    /// Writes the value. Only the holder of the lock (or the maker of the record) may.
    /// Tables check a value's length before it gets here; an inline value of another
    /// length than its table's is cut to it (a shorter one leaves old bytes after it).
    fn value_write(&self, value: &[u8]) {
        match self.layout.kind {
            ValueKind::Inline { len } => {
                store_words(self.inline_words(len), &value[..value.len().min(len)]);
            }
            ValueKind::Cell { .. } => self.layout.note_buffers(self.cell().write(value)),
        }
    }

    /// The header word.
    pub(crate) fn header(&self) -> HeaderWord {
        self.header_cell().load()
    }

    /// Copies the value into `out` if the object is unlocked and stays unchanged during
    /// the copy; retries a bounded number of times if a writer got in between.
    pub(crate) fn read(&self, out: &mut Vec<u8>) -> Result<ReadOutcome, ReadError> {
        let header = self.header_cell();
        for _ in 0..READ_ATTEMPTS_MAX {
            let before = header.begin_read();
            if before.locked() {
                return Err(ReadError::Locked);
            }
            if before.allocated() {
                self.value_copy(out);
            } else {
                out.clear();
            }
            if header.end_read() == before {
                return Ok(ReadOutcome {
                    version: before.version(),
                    present: before.allocated(),
                });
            }
        }
        Err(ReadError::Contended)
    }

    /// True if the object is unlocked at `version` (FaRM's validation).
    pub(crate) fn validate(&self, version: u64) -> bool {
        let word = self.header();
        !word.locked() && word.version() == version
    }

    /// Locks the object if it is unlocked at `version`.
    pub(crate) fn try_lock(&self, version: u64) -> Result<(), LockError> {
        self.header_cell().try_lock(version).map(|_| ())
    }

    /// Locks the object at whatever version it has (a blind write), returning it.
    pub(crate) fn try_lock_any(&self) -> Result<u64, LockError> {
        self.header_cell().try_lock_any()
    }

    /// Writes `value` (or deletes the object, for `None`) and publishes it at the next
    /// version, unlocking. Returns that version. Only the lock holder may call this.
    pub(crate) fn install(&self, value: Option<&[u8]>) -> u64 {
        let word = self.header();
        assert!(word.locked(), "install without the lock");
        let version = word.version() + 1;
        if let Some(value) = value {
            self.value_write(value);
        }
        self.header_cell().publish(version, value.is_some());
        version
    }

    /// Brings a backup's copy up to `version` with `value` (`None`: deleted), unless it
    /// already is at `version` or later: backups apply logged writes of different
    /// coordinators in any order, and versions order them. Spins while another apply
    /// holds the lock (applies are short and only backups' copies are applied to).
    /// Returns true if it changed the object.
    pub(crate) fn apply(&self, version: u64, value: Option<&[u8]>) -> bool {
        loop {
            match self.apply_unless_locked(version, value) {
                Some(changed) => return changed,
                None => std::hint::spin_loop(),
            }
        }
    }

    /// [`ObjectRef::apply`] for a copy that may be a primary's (a backup promoted by a
    /// reconfiguration): `None`, and no change, if a transaction holds the object locked,
    /// rather than spinning until it lets go.
    pub(crate) fn apply_unless_locked(&self, version: u64, value: Option<&[u8]>) -> Option<bool> {
        let header = self.header_cell();
        loop {
            let word = header.load();
            if word.version() >= version {
                return Some(false);
            }
            if word.locked() {
                return None;
            }
            if header.try_lock(word.version()).is_ok() {
                if let Some(value) = value {
                    self.value_write(value);
                }
                header.publish(version, value.is_some());
                return Some(true);
            }
        }
    }

    /// Releases the lock without a change (abort).
    pub(crate) fn unlock(&self) {
        self.header_cell().unlock();
    }

    /// True if a value of `len` bytes fits where the object keeps its value now (an
    /// inline value always does: its table's values all have one size).
    pub(crate) fn has_room(&self, len: usize) -> bool {
        match self.layout.kind {
            ValueKind::Inline { .. } => true,
            ValueKind::Cell { .. } => len <= SMALL_BYTES || len <= self.cell().buffer_bytes(),
        }
    }
}

/// An object in memory of its own, outside any table: the protocol of [`ObjectRef`] on
/// one record, for tests of the protocol (tables keep their objects in records of
/// their own memory).
pub struct Object {
    layout: RecordLayout,
    at: NonNull<u8>,
}

// SAFETY: the record's fields are atomics and a value cell, shared through the protocol
// of `Header`; the memory is the object's own.
unsafe impl Send for Object {}
// SAFETY: as above.
unsafe impl Sync for Object {}

impl Object {
    fn make(size: ValueSize, version: u64, value: Option<&[u8]>) -> Self {
        let layout = RecordLayout::of(size);
        let memory = Layout::from_size_align(layout.stride, RecordLayout::ALIGN)
            .expect("a record's size fits");
        // SAFETY: a record is never of size 0 (its header and key).
        let at = NonNull::new(unsafe { std::alloc::alloc(memory) })
            .unwrap_or_else(|| std::alloc::handle_alloc_error(memory));
        // SAFETY: fresh memory of the layout's size and alignment.
        unsafe { layout.init(at, &Key::from(0), version, value) };
        Self { layout, at }
    }

    /// An object of a table whose values are of `size`, holding `value` at `version`.
    pub fn new(version: u64, value: &[u8], size: ValueSize) -> Self {
        Self::make(size, version, Some(value))
    }

    /// The placeholder of an absent key, at version 0, so it can be locked for an insert.
    pub fn absent(size: ValueSize) -> Self {
        Self::make(size, 0, None)
    }

    fn view(&self) -> ObjectRef<'_> {
        // SAFETY: the record `make` wrote, kept until the object drops.
        unsafe { ObjectRef::new(self.at, &self.layout) }
    }

    /// The header word.
    pub fn header(&self) -> HeaderWord {
        self.view().header()
    }

    /// See [`ObjectRef::read`].
    pub fn read(&self, out: &mut Vec<u8>) -> Result<ReadOutcome, ReadError> {
        self.view().read(out)
    }

    /// True if the object is unlocked at `version` (FaRM's validation).
    pub fn validate(&self, version: u64) -> bool {
        self.view().validate(version)
    }

    /// Locks the object if it is unlocked at `version`.
    pub fn try_lock(&self, version: u64) -> Result<(), LockError> {
        self.view().try_lock(version)
    }

    /// Locks the object at whatever version it has (a blind write), returning it.
    pub fn try_lock_any(&self) -> Result<u64, LockError> {
        self.view().try_lock_any()
    }

    /// See [`ObjectRef::install`].
    pub fn install(&self, value: Option<&[u8]>) -> u64 {
        self.view().install(value)
    }

    /// See [`ObjectRef::apply`].
    pub fn apply(&self, version: u64, value: Option<&[u8]>) -> bool {
        self.view().apply(version, value)
    }

    /// See [`ObjectRef::apply_unless_locked`].
    pub fn apply_unless_locked(&self, version: u64, value: Option<&[u8]>) -> Option<bool> {
        self.view().apply_unless_locked(version, value)
    }

    /// Releases the lock without a change (abort).
    pub fn unlock(&self) {
        self.view().unlock();
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        // SAFETY: the record `make` wrote, in memory allocated there with this layout;
        // no view outlives `self`.
        unsafe {
            self.layout.drop_in_place(self.at);
            std::alloc::dealloc(
                self.at.as_ptr(),
                Layout::from_size_align_unchecked(self.layout.stride, RecordLayout::ALIGN),
            );
        }
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    #[test]
    fn read_lock_install_delete() {
        let object = Object::new(1, b"hello", ValueSize::Variable(1 << 20));
        let mut out = Vec::new();
        assert_eq!(
            object.read(&mut out),
            Ok(ReadOutcome {
                version: 1,
                present: true
            })
        );
        assert_eq!(out, b"hello");
        object.try_lock(1).unwrap();
        assert_eq!(object.read(&mut out), Err(ReadError::Locked));
        assert!(!object.validate(1));
        assert_eq!(object.install(Some(b"a longer value than before")), 2);
        assert_eq!(
            object.read(&mut out),
            Ok(ReadOutcome {
                version: 2,
                present: true
            })
        );
        assert_eq!(out, b"a longer value than before");
        assert!(object.validate(2));
        object.try_lock(2).unwrap();
        assert_eq!(object.install(None), 3);
        assert_eq!(
            object.read(&mut out),
            Ok(ReadOutcome {
                version: 3,
                present: false
            })
        );
        assert!(out.is_empty());
        object.try_lock(3).unwrap();
        assert_eq!(object.install(Some(b"back")), 4);
        object.read(&mut out).unwrap();
        assert_eq!(out, b"back");
    }

    #[test]
    fn an_absent_key_can_be_locked_for_an_insert() {
        let object = Object::absent(ValueSize::Fixed(8));
        let mut out = vec![1];
        assert_eq!(
            object.read(&mut out),
            Ok(ReadOutcome {
                version: 0,
                present: false
            })
        );
        assert!(out.is_empty());
        object.try_lock(0).unwrap();
        assert_eq!(object.install(Some(&7u64.to_le_bytes())), 1);
        object.read(&mut out).unwrap();
        assert_eq!(out, 7u64.to_le_bytes());
    }

    #[test]
    fn an_aborted_lock_changes_nothing() {
        let object = Object::new(9, b"same", ValueSize::Fixed(4));
        object.try_lock(9).unwrap();
        object.unlock();
        let mut out = Vec::new();
        assert_eq!(
            object.read(&mut out),
            Ok(ReadOutcome {
                version: 9,
                present: true
            })
        );
        assert_eq!(out, b"same");
    }
}
