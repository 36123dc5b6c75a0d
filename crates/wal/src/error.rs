//! The log's errors.

use thiserror::Error;

use crate::format::FORMAT_VERSION;
use crate::storage::StorageError;

/// Why a log operation or a recovery failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WalError {
    /// The disk is full: a new segment could not be preallocated, so the record was not
    /// appended. Commits fail until space is freed; nothing already logged is affected.
    #[error(
        "disk full: cannot preallocate log segment {file}; free space in the data directory (commits fail until then)"
    )]
    NoSpace {
        /// The segment that could not be made.
        file: String,
    },
    /// A storage operation other than sync failed.
    #[error("I/O error on log file {file}: {source}")]
    Io {
        /// The file the operation was on.
        file: String,
        /// What the storage reported.
        source: StorageError,
    },
    /// A sync failed. Fatal for this copy of the log: the writer refuses every later call.
    #[error(
        "sync of log file {file} failed ({reason}); this copy of the log is lost: restart the node so that it recovers from the other copies"
    )]
    SyncFailed {
        /// The file whose sync failed.
        file: String,
        /// What the storage reported.
        reason: String,
    },
    /// An earlier sync failed; the writer is poisoned.
    #[error("the log is unusable since a sync failed ({reason}); restart the node")]
    Poisoned {
        /// The failure that poisoned the writer.
        reason: String,
    },
    /// A segment belongs to another cluster.
    #[error(
        "{file} belongs to cluster {found}, not to this cluster ({expected}): give the node its own data directory"
    )]
    ForeignCluster {
        /// The segment.
        file: String,
        /// Its cluster id, in hex.
        found: String,
        /// This cluster's id, in hex.
        expected: String,
    },
    /// A segment was written by another node.
    #[error(
        "{file} was written by node {found}, not by this node ({expected}): give each node its own data directory"
    )]
    ForeignNode {
        /// The segment.
        file: String,
        /// The node id in its header.
        found: u16,
        /// This node's id.
        expected: u16,
    },
    /// A segment has a format version this build does not read.
    #[error(
        "{file} has log format version {found}; this build reads only version {FORMAT_VERSION}: run a build that matches the data directory"
    )]
    UnknownVersion {
        /// The segment.
        file: String,
        /// The version in its header.
        found: u32,
    },
    /// The log is damaged somewhere other than an unsynced tail.
    #[error(
        "log corrupt in {file} at byte {offset}: {reason}; this copy cannot be trusted: recover the node from the other copies"
    )]
    Corrupt {
        /// The segment.
        file: String,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A payload larger than a record may hold.
    #[error("a record payload of {payload_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    RecordTooLarge {
        /// The payload's size.
        payload_bytes: u64,
        /// The largest payload this log takes.
        max_bytes: u64,
    },
    /// `LogWriter::create` found segments of a log of the same name.
    #[error("a log already exists ({file}): recover it and resume instead of creating one")]
    AlreadyExists {
        /// One of its segments.
        file: String,
    },
    /// The configuration cannot work.
    #[error("invalid log configuration: {0}")]
    Config(String),
}

/// Hex of a cluster id, for messages.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
