//! An object: header word and value, with the operations of FaRM's protocol.

use crate::error::{LockError, ReadError};
use crate::header::{Header, HeaderWord};
use crate::table::ValueSize;
use crate::value::ValueCell;

/// Attempts of a lock-free read before it reports contention. Each attempt fails only if
/// a writer published during the copy; 64 in a row means the object is written nonstop,
/// and the caller had better back off.
const READ_ATTEMPTS_MAX: usize = 64;

/// What a consistent read saw.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReadOutcome {
    /// The object's version (0 for a key that never had an object).
    pub version: u64,
    /// True if the object exists; false for an absent or deleted key (the value buffer
    /// is then left empty).
    pub present: bool,
}

/// Bytes to reserve for a new object's value: a fixed size whole, a variable size as it
/// comes.
fn initial_capacity(size: ValueSize) -> usize {
    match size {
        ValueSize::Fixed(n) => n,
        ValueSize::Variable(_) => 0,
    }
}

/// One object of a table.
pub struct Object {
    header: Header,
    value: ValueCell,
}

impl Object {
    /// An object of a table whose values are of `size`, holding `value` at `version`.
    pub fn new(version: u64, value: &[u8], size: ValueSize) -> Self {
        let cell = ValueCell::new(initial_capacity(size).max(value.len()));
        cell.write(value);
        Self {
            header: Header::new(HeaderWord::new(version, true)),
            value: cell,
        }
    }

    /// The placeholder of an absent key, at version 0, so it can be locked for an insert.
    pub fn absent(size: ValueSize) -> Self {
        Self {
            header: Header::new(HeaderWord::new(0, false)),
            value: ValueCell::new(initial_capacity(size)),
        }
    }

    /// The header word.
    pub fn header(&self) -> HeaderWord {
        self.header.load()
    }

    /// Copies the value into `out` if the object is unlocked and stays unchanged during
    /// the copy; retries a bounded number of times if a writer got in between.
    pub fn read(&self, out: &mut Vec<u8>) -> Result<ReadOutcome, ReadError> {
        for _ in 0..READ_ATTEMPTS_MAX {
            let before = self.header.begin_read();
            if before.locked() {
                return Err(ReadError::Locked);
            }
            if before.allocated() {
                self.value.copy_into(out);
            } else {
                out.clear();
            }
            if self.header.end_read() == before {
                return Ok(ReadOutcome {
                    version: before.version(),
                    present: before.allocated(),
                });
            }
        }
        Err(ReadError::Contended)
    }

    /// True if the object is unlocked at `version` (FaRM's validation).
    pub fn validate(&self, version: u64) -> bool {
        let word = self.header.load();
        !word.locked() && word.version() == version
    }

    /// Locks the object if it is unlocked at `version`.
    pub fn try_lock(&self, version: u64) -> Result<(), LockError> {
        self.header.try_lock(version).map(|_| ())
    }

    /// Locks the object at whatever version it has (a blind write), returning it.
    pub fn try_lock_any(&self) -> Result<u64, LockError> {
        self.header.try_lock_any()
    }

    /// Writes `value` (or deletes the object, for `None`) and publishes it at the next
    /// version, unlocking. Returns that version. Only the lock holder may call this.
    pub fn install(&self, value: Option<&[u8]>) -> u64 {
        let word = self.header.load();
        assert!(word.locked(), "install without the lock");
        let version = word.version() + 1;
        if let Some(value) = value {
            self.value.write(value);
        }
        self.header.publish(version, value.is_some());
        version
    }

    /// Brings a backup's copy up to `version` with `value` (`None`: deleted), unless it
    /// already is at `version` or later: backups apply logged writes of different
    /// coordinators in any order, and versions order them. Spins while another apply
    /// holds the lock (applies are short and only backups' copies are applied to).
    /// Returns true if it changed the object.
    pub fn apply(&self, version: u64, value: Option<&[u8]>) -> bool {
        loop {
            let word = self.header.load();
            if word.version() >= version {
                return false;
            }
            if word.locked() {
                std::hint::spin_loop();
                continue;
            }
            if self.header.try_lock(word.version()).is_ok() {
                if let Some(value) = value {
                    self.value.write(value);
                }
                self.header.publish(version, value.is_some());
                return true;
            }
        }
    }

    /// [`Object::apply`] for a copy that may be a primary's (a backup promoted by a
    /// reconfiguration): `None`, and no change, if a transaction holds the object locked,
    /// rather than spinning until it lets go.
    pub fn apply_unless_locked(&self, version: u64, value: Option<&[u8]>) -> Option<bool> {
        loop {
            let word = self.header.load();
            if word.version() >= version {
                return Some(false);
            }
            if word.locked() {
                return None;
            }
            if self.header.try_lock(word.version()).is_ok() {
                if let Some(value) = value {
                    self.value.write(value);
                }
                self.header.publish(version, value.is_some());
                return Some(true);
            }
        }
    }

    /// Releases the lock without a change (abort).
    pub fn unlock(&self) {
        self.header.unlock();
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
