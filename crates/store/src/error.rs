//! Errors of the store.

use crate::table::TableId;

/// A request the store cannot carry out; it changed nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum StoreError {
    /// No table with this id in the partition.
    #[error("unknown table {0:?}")]
    UnknownTable(TableId),
    /// A key longer than `KEY_BYTES_MAX`.
    #[error("key of {len} bytes is longer than the limit of {max}")]
    KeyTooLong {
        /// Bytes given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A key shorter than its table's partition key (`TableSpec::with_partition_key`).
    #[error("key of {len} bytes is shorter than the table's partition key of {min}")]
    KeyShorterThanPartitionKey {
        /// Bytes given.
        len: usize,
        /// The partition key's length.
        min: usize,
    },
    /// A value longer than its table allows.
    #[error("value of {len} bytes is longer than the table's limit of {max}")]
    ValueTooLarge {
        /// Bytes given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value of another size than its fixed-size table's.
    #[error("value of {len} bytes in a table of {expected}-byte values")]
    WrongValueSize {
        /// Bytes given.
        len: usize,
        /// The table's value size.
        expected: usize,
    },
    /// A version past the largest a header holds (`VERSION_MAX`).
    #[error("version {version} is past the largest, {max}")]
    VersionTooLarge {
        /// The version given.
        version: u64,
        /// The largest.
        max: u64,
    },
}

/// Why a lock-free read returned no value.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum ReadError {
    /// The object is locked by a committing transaction; its value may be about to change.
    #[error("the object is locked")]
    Locked,
    /// The object kept changing while it was copied; the read gave up after its retries.
    #[error("the object changed during every read attempt")]
    Contended,
}

/// Why an object could not be locked.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum LockError {
    /// Another transaction holds the lock.
    #[error("the object is locked")]
    Locked,
    /// The object's version is no longer the one read.
    #[error("the object changed since it was read (now version {current})")]
    VersionChanged {
        /// Its version now.
        current: u64,
    },
}
