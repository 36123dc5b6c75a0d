//! What identifies a log and shapes its segments.

use crate::error::WalError;
use crate::format::{
    MAX_PAYLOAD_BYTES, RECORD_ALIGN, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, record_bytes,
};

/// The identity and layout of one log (a node has one per worker thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalConfig {
    /// Names the log's segments, `{log_name}-{sequence:016x}.wal`; several logs share a
    /// directory under different names (`w0`, `w1`, ...).
    pub log_name: String,
    /// The cluster this node belongs to; a segment with another id is refused.
    pub cluster_id: [u8; 16],
    /// This node's id; a segment with another id is refused.
    pub node_id: u16,
    /// Each segment's preallocated size, a multiple of 8.
    pub segment_size_bytes: u64,
}

/// The smallest segment: a header and one empty record.
pub const MIN_SEGMENT_BYTES: u64 = SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES;

impl WalConfig {
    /// Checks that segments can hold a record and that names parse back.
    pub fn validate(&self) -> Result<(), WalError> {
        if self.segment_size_bytes < MIN_SEGMENT_BYTES {
            return Err(WalError::Config(format!(
                "segment size {} is below the minimum of {MIN_SEGMENT_BYTES} bytes",
                self.segment_size_bytes
            )));
        }
        if !self.segment_size_bytes.is_multiple_of(RECORD_ALIGN) {
            return Err(WalError::Config(format!(
                "segment size {} is not a multiple of {RECORD_ALIGN}",
                self.segment_size_bytes
            )));
        }
        if self.log_name.is_empty() || self.log_name.contains(['/', '\\']) {
            return Err(WalError::Config(format!(
                "bad log name {:?}",
                self.log_name
            )));
        }
        Ok(())
    }

    /// The largest payload one record may carry: it must fit an empty segment.
    pub fn max_payload_bytes(&self) -> u64 {
        let room = self.segment_size_bytes - SEGMENT_HEADER_BYTES - RECORD_HEADER_BYTES;
        let max = room.min(MAX_PAYLOAD_BYTES);
        debug_assert!(SEGMENT_HEADER_BYTES + record_bytes(max) <= self.segment_size_bytes);
        max
    }

    /// The file name of segment `sequence`.
    pub fn segment_name(&self, sequence: u64) -> String {
        format!("{}-{sequence:016x}.wal", self.log_name)
    }

    /// The sequence number of a file of this log, or `None` for any other file.
    pub fn parse_segment_name(&self, name: &str) -> Option<u64> {
        let rest = name
            .strip_prefix(self.log_name.as_str())?
            .strip_prefix('-')?;
        let hex = rest.strip_suffix(".wal")?;
        if hex.len() != 16 {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()
    }
}
