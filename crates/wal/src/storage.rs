//! The file operations a log needs, and nothing more.
//!
//! The log (`LogWriter`, `recover`) never touches a file itself: it calls a [`Storage`].
//! The node will implement it with real files in its data directory; the simulator and the
//! tests use [`crate::SimDisk`], which loses, tears and reorders unsynced writes at a crash.
//!
//! The trait is object-safe (no generic methods, no `Self` in argument position) so that
//! the node can pick an implementation at run time behind a `Box<dyn Storage>`; the log
//! itself is generic over `S: Storage`, so the simulator's and the node's logs are
//! statically dispatched. Files are named by `&str` rather than through handles: a log
//! touches a handful of files, and names keep the simulated disk's state a plain map.

use thiserror::Error;

/// Why a [`Storage`] operation failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StorageError {
    /// The named file does not exist.
    #[error("no such file: {0}")]
    NotFound(String),
    /// The disk is full: the write or the preallocation did not happen.
    #[error("no space left on the device")]
    NoSpace,
    /// Any other failure of a read, write, create, truncate or remove, with the system's text.
    #[error("I/O error: {0}")]
    Io(String),
    /// `sync` failed. What reached the disk is unknown (Linux may drop the dirty pages and
    /// report success to a later fsync), so the log treats it as fatal for this copy and
    /// never retries.
    #[error("sync failed: {0}")]
    SyncFailed(String),
}

/// A directory of files that a log writes, syncs and reads back.
///
/// Contract (what the log relies on, and what an implementation must give):
/// - `write_at` and `set_len` are visible to later reads at once, but may be lost, torn or
///   applied out of order by a crash until the file's next successful `sync`.
/// - After `sync(name)` returns `Ok`, everything written to `name` before the call, its
///   length, and the file's existence survive a crash (a real implementation fsyncs the
///   directory too after creating a file).
/// - `remove` is durable when it returns.
/// - Reading past the end of a file returns fewer bytes, never an error.
pub trait Storage {
    /// Creates an empty file. Fails with [`StorageError::Io`] if it already exists.
    fn create(&mut self, name: &str) -> Result<(), StorageError>;

    /// Writes `bytes` at `offset`, extending the file (with zeroes between the old end and
    /// `offset`) if needed.
    fn write_at(&mut self, name: &str, offset: u64, bytes: &[u8]) -> Result<(), StorageError>;

    /// Makes everything written to the file durable (fdatasync and, for a new file, the
    /// directory). A failure is [`StorageError::SyncFailed`].
    fn sync(&mut self, name: &str) -> Result<(), StorageError>;

    /// Reads into `buf` from `offset`; returns how many bytes were read (fewer than
    /// `buf.len()` only at the end of the file).
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError>;

    /// The file's length in bytes.
    fn len(&self, name: &str) -> Result<u64, StorageError>;

    /// Truncates or extends the file to `len` bytes (new bytes read as zeroes). Extending
    /// is how a log preallocates a segment, so that later writes inside it never find the
    /// disk full.
    fn set_len(&mut self, name: &str, len: u64) -> Result<(), StorageError>;

    /// Removes the file.
    fn remove(&mut self, name: &str) -> Result<(), StorageError>;

    /// The names of every file, sorted.
    fn list(&self) -> Result<Vec<String>, StorageError>;
}

/// A borrowed storage is a storage, so a log can run over `&mut SimDisk` while the test
/// keeps the disk.
impl<S: Storage + ?Sized> Storage for &mut S {
    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).create(name)
    }
    fn write_at(&mut self, name: &str, offset: u64, bytes: &[u8]) -> Result<(), StorageError> {
        (**self).write_at(name, offset, bytes)
    }
    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).sync(name)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        (**self).read_at(name, offset, buf)
    }
    fn len(&self, name: &str) -> Result<u64, StorageError> {
        (**self).len(name)
    }
    fn set_len(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        (**self).set_len(name, len)
    }
    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).remove(name)
    }
    fn list(&self) -> Result<Vec<String>, StorageError> {
        (**self).list()
    }
}

/// A boxed storage is a storage, so the node can choose one at run time.
impl<S: Storage + ?Sized> Storage for Box<S> {
    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).create(name)
    }
    fn write_at(&mut self, name: &str, offset: u64, bytes: &[u8]) -> Result<(), StorageError> {
        (**self).write_at(name, offset, bytes)
    }
    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).sync(name)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        (**self).read_at(name, offset, buf)
    }
    fn len(&self, name: &str) -> Result<u64, StorageError> {
        (**self).len(name)
    }
    fn set_len(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        (**self).set_len(name, len)
    }
    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).remove(name)
    }
    fn list(&self) -> Result<Vec<String>, StorageError> {
        (**self).list()
    }
}
