//! The store: partitions of tables of objects, in memory, shared by a node's worker
//! threads.
//!
//! An object is a header word (lock bit, allocated bit, 62-bit version; see [`Header`])
//! and a value. Following FaRM, writers lock an object by compare-and-swap on its header
//! at the version they read, install the new value in place, and publish it with a new
//! version, which unlocks it. Readers take no lock: they copy the value between two reads
//! of the header and retry if the header changed (a seqlock), so a reader never blocks a
//! writer and never sees a torn value. A reader that finds the object locked gets
//! [`ReadError::Locked`] and decides itself whether to retry or abort: the transaction
//! holding the lock may already be committed (ARCHITECTURE.md, "Transactions").
//!
//! Absent keys are objects too, once anyone has locked them: an insert locks the key at
//! version 0 (no object yet) or at the version of a deleted object, and a delete publishes
//! the object as not allocated with a new version. So a read of an absent key still
//! returns a version, and validation catches an insert or delete in between like any
//! other write.

mod epoch;
mod error;
mod header;
mod index;
mod key;
mod memory;
mod object;
mod partition;
mod sync;
mod table;
mod value;

pub use epoch::Epoch;
pub use error::{LockError, ReadError, StoreError};
pub use header::{Header, HeaderWord, VERSION_MAX};
pub use index::FLOOR_BUCKETS;
pub use key::{KEY_BYTES_MAX, Key};
pub use memory::{Memory, parse_memory};
pub use object::{Object, ReadOutcome};
pub use partition::{Partition, PartitionId};
pub use table::{TableId, TableSpec, VALUE_BYTES_MAX, ValueSize};
