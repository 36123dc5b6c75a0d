//! ferrotx's write-ahead log (issue 32, durability): checksummed, append-only segments in
//! preallocated files, over a [`Storage`] trait so that the log's logic does no I/O of its
//! own. The node gives it real files; the simulator gives each node a [`SimDisk`] that
//! loses, tears and reorders unsynced writes at a crash and flips bits.
//!
//! Not wired into nodes yet: docs/durability.md says what is built and what comes next.
//!
//! Use: [`LogWriter::create`] a log, [`LogWriter::append`] records, [`LogWriter::sync`];
//! after a restart, [`recover`] reads it back (refusing another cluster's directory, an
//! unknown format and corruption; cutting a torn tail) and [`LogWriter::resume`] goes on.
//! [`recover_with`] (or a [`LogReader`]) does the same reading as a stream, handing each
//! record to a callback with a borrowed payload: the restart path.
//! The format is in [`format`].

mod config;
mod error;
pub mod format;
mod recover;
mod sim_disk;
mod storage;
mod writer;

#[cfg(test)]
mod tests;

pub use config::{MIN_SEGMENT_BYTES, WalConfig};
pub use error::WalError;
pub use format::{FORMAT_VERSION, Lsn};
pub use recover::{
    DEFAULT_READ_CHUNK_BYTES, LogReader, Record, RecordRef, Recovery, SegmentInfo, TornTail,
    recover, recover_with,
};
pub use sim_disk::{CrashReport, SimDisk};
pub use storage::{Storage, StorageError};
pub use writer::LogWriter;
