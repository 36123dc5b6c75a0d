//! The header word of an object: lock bit, allocated bit, the length of the object's key
//! and its version, in one atomic u64.

use crate::error::LockError;
use crate::sync::{AtomicU64, Ordering, fence};

const LOCK_BIT: u64 = 1 << 63;
const ALLOCATED_BIT: u64 = 1 << 62;
/// The key's length (0 to 16) in 5 bits: a record keeps its key in two words, and its
/// length here rather than in a word of its own (8 bytes per object). It never changes
/// while the object lives: locking, publishing and unlocking keep it.
const KEY_LEN_SHIFT: u32 = 57;
const KEY_LEN_MASK: u64 = 0x1f << KEY_LEN_SHIFT;
const VERSION_MASK: u64 = (1 << KEY_LEN_SHIFT) - 1;

/// Largest version: 57 bits. At a billion writes per second to one object, 4.5 years; at
/// the ten million a second one object can take here, 450.
pub const VERSION_MAX: u64 = VERSION_MASK;

/// A value of the header word.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HeaderWord(u64);

impl HeaderWord {
    /// An unlocked word.
    pub fn new(version: u64, allocated: bool) -> Self {
        assert!(version <= VERSION_MAX, "version overflow");
        Self(version | if allocated { ALLOCATED_BIT } else { 0 })
    }

    /// True while a transaction holds the lock.
    pub fn locked(self) -> bool {
        self.0 & LOCK_BIT != 0
    }

    /// True if the object exists (not absent, not deleted).
    pub fn allocated(self) -> bool {
        self.0 & ALLOCATED_BIT != 0
    }

    /// The version: grows by one with every published write.
    pub fn version(self) -> u64 {
        self.0 & VERSION_MASK
    }

    fn with_lock(self) -> Self {
        Self(self.0 | LOCK_BIT)
    }

    /// The same word for an object whose key is `len` bytes long (at most 16).
    pub(crate) fn with_key_len(self, len: usize) -> Self {
        debug_assert!(len <= 16);
        Self((self.0 & !KEY_LEN_MASK) | ((len as u64) << KEY_LEN_SHIFT))
    }

    /// The length of the object's key.
    pub(crate) fn key_len(self) -> usize {
        ((self.0 & KEY_LEN_MASK) >> KEY_LEN_SHIFT) as usize
    }

    /// True for a reclaimed record: locked for good, and its key length one no key has,
    /// so no lookup matches it any more.
    pub(crate) fn dead(self) -> bool {
        self.0 & KEY_LEN_MASK == KEY_LEN_MASK
    }
}

/// The header word of one object.
///
/// Protocol (FaRM 4, over shared memory): a writer [`Header::try_lock`]s at the version it
/// read, changes the value, then [`Header::publish`]es a higher version (or
/// [`Header::unlock`]s to abort). A reader loads the header with [`Header::begin_read`],
/// copies the value, and accepts the copy only if [`Header::end_read`] returns the same
/// word.
#[repr(transparent)]
pub struct Header(AtomicU64);

impl Header {
    /// A header for an object at `version`, unlocked.
    pub fn new(word: HeaderWord) -> Self {
        assert!(!word.locked());
        Self(AtomicU64::new(word.0))
    }

    /// The current word.
    pub fn load(&self) -> HeaderWord {
        HeaderWord(self.0.load(Ordering::Acquire))
    }

    /// Locks the object if it is unlocked at `version`.
    pub fn try_lock(&self, version: u64) -> Result<HeaderWord, LockError> {
        let current = self.load();
        if current.locked() {
            return Err(LockError::Locked);
        }
        if current.version() != version {
            return Err(LockError::VersionChanged {
                current: current.version(),
            });
        }
        match self.0.compare_exchange(
            current.0,
            current.with_lock().0,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // Seqlock: the lock must be visible to any reader that sees a value byte
                // written after it (pairs with the fence in `end_read`).
                fence(Ordering::Release);
                Ok(current)
            }
            Err(now) => {
                let now = HeaderWord(now);
                if now.locked() {
                    Err(LockError::Locked)
                } else {
                    Err(LockError::VersionChanged {
                        current: now.version(),
                    })
                }
            }
        }
    }

    /// Locks the object at whatever version it has, if it is unlocked, and returns that
    /// version: for a write that did not read the object (a blind write).
    pub fn try_lock_any(&self) -> Result<u64, LockError> {
        let current = self.load();
        if current.locked() {
            return Err(LockError::Locked);
        }
        match self.0.compare_exchange(
            current.0,
            current.with_lock().0,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // As in `try_lock`.
                fence(Ordering::Release);
                Ok(current.version())
            }
            // Locked, or written and unlocked again, since the load: the caller's
            // transaction conflicts either way.
            Err(_) => Err(LockError::Locked),
        }
    }

    /// Unlocks without a change (an aborted transaction). Panics if not locked: only the
    /// holder may unlock.
    pub fn unlock(&self) {
        let current = self.load();
        assert!(current.locked(), "unlock of an unlocked object");
        self.0.store(current.0 & !LOCK_BIT, Ordering::Release);
    }

    /// Publishes the value written under the lock at `version`, which must be higher than
    /// the locked one, and unlocks.
    pub fn publish(&self, version: u64, allocated: bool) {
        let current = self.load();
        assert!(current.locked(), "publish without the lock");
        assert!(version > current.version(), "versions must grow");
        let word = HeaderWord::new(version, allocated).with_key_len(current.key_len());
        self.0.store(word.0, Ordering::Release);
    }

    /// Marks the locked object reclaimed ([`HeaderWord::dead`]): it stays locked, at its
    /// version, until its record is made again for another key. Only the lock holder.
    pub(crate) fn mark_dead(&self) {
        let current = self.load();
        assert!(current.locked(), "a record is reclaimed under its lock");
        self.0.store(current.0 | KEY_LEN_MASK, Ordering::Release);
    }

    /// Sets the word of a record made again (for another key) once every other field is
    /// written: a lookup that reads this word (acquire) then reads the new key.
    pub(crate) fn reset(&self, word: HeaderWord) {
        debug_assert!(!word.locked());
        self.0.store(word.0, Ordering::Release);
    }

    /// First half of a lock-free read: the word before the copy.
    pub fn begin_read(&self) -> HeaderWord {
        self.load()
    }

    /// Second half: the word after the copy. The copy is consistent if it equals the
    /// first and is unlocked.
    pub fn end_read(&self) -> HeaderWord {
        fence(Ordering::Acquire);
        HeaderWord(self.0.load(Ordering::Relaxed))
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    #[test]
    fn lock_at_the_version_read_then_publish_or_unlock() {
        let h = Header::new(HeaderWord::new(5, true));
        assert_eq!(h.try_lock(4), Err(LockError::VersionChanged { current: 5 }));
        assert_eq!(h.try_lock(5).unwrap().version(), 5);
        assert!(h.load().locked());
        assert_eq!(h.try_lock(5), Err(LockError::Locked));
        h.unlock();
        assert_eq!(h.load(), HeaderWord::new(5, true));
        h.try_lock(5).unwrap();
        h.publish(6, false);
        assert_eq!(h.load(), HeaderWord::new(6, false));
        assert!(!h.load().allocated());
    }

    #[test]
    fn the_key_length_stays_through_locks_and_writes() {
        let h = Header::new(HeaderWord::new(5, true).with_key_len(16));
        assert_eq!((h.load().key_len(), h.load().version()), (16, 5));
        h.try_lock(5).unwrap();
        assert_eq!(h.load().key_len(), 16);
        h.publish(VERSION_MAX, false);
        let word = h.load();
        assert_eq!((word.key_len(), word.version()), (16, VERSION_MAX));
        assert!(!word.allocated() && !word.locked());
        assert_eq!(h.try_lock_any(), Ok(VERSION_MAX));
        h.unlock();
        assert_eq!(h.load(), word);
    }

    #[test]
    #[should_panic(expected = "versions must grow")]
    fn a_version_never_goes_back() {
        let h = Header::new(HeaderWord::new(5, true));
        h.try_lock(5).unwrap();
        h.publish(5, true);
    }

    #[test]
    #[should_panic(expected = "unlock of an unlocked object")]
    fn only_a_locked_object_unlocks() {
        Header::new(HeaderWord::new(1, true)).unlock();
    }
}
