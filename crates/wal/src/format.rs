//! The on-disk format of a log: segment headers and records. Little-endian throughout.
//!
//! A segment file, preallocated to `segment_size_bytes` (zeroes):
//!
//! ```text
//! offset  size  segment header (SEGMENT_HEADER_BYTES = 64)
//!      0     8  magic b"FTXWAL\r\n"
//!      8     4  format version (FORMAT_VERSION)
//!     12     2  node id
//!     14     2  reserved, zero
//!     16    16  cluster id
//!     32     8  segment sequence number (0, 1, 2, ... in the order segments are made)
//!     40     8  first LSN: the LSN the segment's first record has (or will have)
//!     48     8  segment size in bytes (its preallocated length)
//!     56     4  reserved, zero
//!     60     4  CRC32C of bytes 0..60
//! ```
//!
//! Then records, each starting at a multiple of 8:
//!
//! ```text
//! offset  size  record header (RECORD_HEADER_BYTES = 32)
//!      0     4  payload length
//!      4     4  CRC32C of bytes 0..4 and 8..(32 + payload length)
//!      8     8  LSN (the previous record's + 1)
//!     16     8  durable LSN: every record up to this one was durable when this was written
//!     24     1  kind (never 0)
//!     25     7  reserved, zero
//!     32     n  payload, then zeroes up to a multiple of 8
//! ```
//!
//! The durable LSN is what tells a torn tail from corruption: after a crash, unsynced
//! records may reach the disk in any order, so a valid record after a bad one is normal,
//! unless it says the bad one was already durable.

/// Magic bytes at the start of every segment (the `\r\n` catches text-mode mangling).
pub const MAGIC: [u8; 8] = *b"FTXWAL\r\n";
/// The format this code writes and the only one it reads. Bumped on any layout change.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of a segment header; records start here.
pub const SEGMENT_HEADER_BYTES: u64 = 64;
/// Bytes of a record header.
pub const RECORD_HEADER_BYTES: u64 = 32;
/// Records start at multiples of this, so that recovery can look for valid records after a
/// bad one without trying every byte.
pub const RECORD_ALIGN: u64 = 8;
/// The largest payload: a commit record holds up to a few 1 MiB values (the RESP front
/// end's value limit) with their keys; 4 MiB bounds what recovery reads at once.
pub const MAX_PAYLOAD_BYTES: u64 = 4 << 20;

/// A log sequence number: 1 for a log's first record, then consecutive.
pub type Lsn = u64;

/// The decoded fields of a segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Format version found in the header.
    pub version: u32,
    /// The node that wrote the segment.
    pub node_id: u16,
    /// The cluster the node belongs to.
    pub cluster_id: [u8; 16],
    /// The segment's place in its log.
    pub sequence: u64,
    /// The LSN of the segment's first record.
    pub first_lsn: Lsn,
    /// The segment's preallocated size.
    pub segment_size_bytes: u64,
}

/// Why a segment header did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderProblem {
    /// The file is shorter than a header, or the header is all zeroes (never written).
    Missing,
    /// The magic is wrong: not a ferrotx log segment.
    BadMagic,
    /// A version this code does not read (checked before the checksum, whose place may
    /// differ in another version).
    UnknownVersion(u32),
    /// The checksum does not match.
    BadChecksum,
}

/// The decoded fields of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload length.
    pub payload_bytes: u64,
    /// The record's LSN.
    pub lsn: Lsn,
    /// Durable LSN when it was written.
    pub durable_lsn: Lsn,
    /// The kind byte.
    pub kind: u8,
}

/// CRC32C of `parts`, chained.
fn checksum(parts: &[&[u8]]) -> u32 {
    parts
        .iter()
        .fold(0, |crc, part| crc32c::crc32c_append(crc, part))
}

#[cfg(test)]
thread_local! {
    /// A deliberate break for the tests: when set, records are accepted whatever their
    /// checksum, to show that the tests catch a reader that does not verify.
    pub(crate) static SKIP_RECORD_CHECKSUM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn skip_record_checksum() -> bool {
    #[cfg(test)]
    {
        SKIP_RECORD_CHECKSUM.with(std::cell::Cell::get)
    }
    #[cfg(not(test))]
    {
        false
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

impl SegmentHeader {
    /// Encodes the header with its checksum.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES as usize] {
        let mut out = [0u8; SEGMENT_HEADER_BYTES as usize];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.version.to_le_bytes());
        out[12..14].copy_from_slice(&self.node_id.to_le_bytes());
        out[16..32].copy_from_slice(&self.cluster_id);
        out[32..40].copy_from_slice(&self.sequence.to_le_bytes());
        out[40..48].copy_from_slice(&self.first_lsn.to_le_bytes());
        out[48..56].copy_from_slice(&self.segment_size_bytes.to_le_bytes());
        let crc = checksum(&[&out[0..60]]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a header from the first bytes of a segment. The version and cluster are
    /// returned as found; the caller decides whether it accepts them.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderProblem> {
        let size = SEGMENT_HEADER_BYTES as usize;
        if bytes.len() < size || bytes[..size].iter().all(|&b| b == 0) {
            return Err(HeaderProblem::Missing);
        }
        if bytes[0..8] != MAGIC {
            return Err(HeaderProblem::BadMagic);
        }
        let version = u32_at(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(HeaderProblem::UnknownVersion(version));
        }
        if checksum(&[&bytes[0..60]]) != u32_at(bytes, 60) {
            return Err(HeaderProblem::BadChecksum);
        }
        Ok(SegmentHeader {
            version,
            node_id: u16::from_le_bytes([bytes[12], bytes[13]]),
            cluster_id: bytes[16..32].try_into().expect("16 bytes"),
            sequence: u64_at(bytes, 32),
            first_lsn: u64_at(bytes, 40),
            segment_size_bytes: u64_at(bytes, 48),
        })
    }
}

/// The bytes a record takes on disk, header and padding included.
pub fn record_bytes(payload_bytes: u64) -> u64 {
    (RECORD_HEADER_BYTES + payload_bytes).next_multiple_of(RECORD_ALIGN)
}

/// Encodes a record (header, payload, padding) into `out`, which it clears first.
pub fn encode_record(out: &mut Vec<u8>, lsn: Lsn, durable_lsn: Lsn, kind: u8, payload: &[u8]) {
    assert!(
        kind != 0,
        "record kind 0 is reserved: a zeroed header must never be valid"
    );
    assert!(
        durable_lsn < lsn,
        "a record cannot be durable before it is written"
    );
    let payload_bytes = payload.len() as u64;
    assert!(payload_bytes <= MAX_PAYLOAD_BYTES, "checked by the writer");
    out.clear();
    out.extend_from_slice(&u32::try_from(payload_bytes).expect("bounded").to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&durable_lsn.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&[0; 7]);
    out.extend_from_slice(payload);
    out.resize(record_bytes(payload_bytes) as usize, 0);
    let end = (RECORD_HEADER_BYTES + payload_bytes) as usize;
    let crc = checksum(&[&out[0..4], &out[8..end]]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the record at the start of `bytes` (which runs to the end of the segment's
/// data). `None` if it is not a whole, valid record: too short, a zeroed or implausible
/// header, or a checksum mismatch.
pub fn decode_record(bytes: &[u8]) -> Option<(RecordHeader, &[u8])> {
    let header_bytes = RECORD_HEADER_BYTES as usize;
    if bytes.len() < header_bytes {
        return None;
    }
    let payload_bytes = u64::from(u32_at(bytes, 0));
    let header = RecordHeader {
        payload_bytes,
        lsn: u64_at(bytes, 8),
        durable_lsn: u64_at(bytes, 16),
        kind: bytes[24],
    };
    let plausible = header.kind != 0
        && payload_bytes <= MAX_PAYLOAD_BYTES
        && record_bytes(payload_bytes) <= bytes.len() as u64
        && header.durable_lsn < header.lsn;
    if !plausible {
        return None;
    }
    let end = header_bytes + payload_bytes as usize;
    if !skip_record_checksum() && checksum(&[&bytes[0..4], &bytes[8..end]]) != u32_at(bytes, 4) {
        return None;
    }
    Some((header, &bytes[header_bytes..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SegmentHeader {
        SegmentHeader {
            version: FORMAT_VERSION,
            node_id: 3,
            cluster_id: [7; 16],
            sequence: 9,
            first_lsn: 100,
            segment_size_bytes: 4096,
        }
    }

    #[test]
    fn header_round_trips_and_every_bit_flip_is_caught() {
        let bytes = header().encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header()));
        for bit in 0..(60 * 8) {
            let mut bad = bytes;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(SegmentHeader::decode(&bad).is_err(), "bit {bit}");
        }
        assert_eq!(SegmentHeader::decode(&[0; 64]), Err(HeaderProblem::Missing));
        assert_eq!(
            SegmentHeader::decode(&bytes[..63]),
            Err(HeaderProblem::Missing)
        );
    }

    #[test]
    fn record_round_trips_and_every_bit_flip_is_caught() {
        let mut out = Vec::new();
        encode_record(&mut out, 5, 3, 2, b"payload!x");
        assert_eq!(out.len() as u64, record_bytes(9));
        assert_eq!(out.len() % 8, 0);
        let (header, payload) = decode_record(&out).unwrap();
        assert_eq!((header.lsn, header.durable_lsn, header.kind), (5, 3, 2));
        assert_eq!(payload, b"payload!x");
        let end = (RECORD_HEADER_BYTES + 9) as usize;
        for bit in 0..(end * 8) {
            let mut bad = out.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_record(&bad).is_none(), "bit {bit}");
        }
        assert!(decode_record(&out[..out.len() - 8]).is_none(), "torn");
        assert!(decode_record(&[0; 64]).is_none(), "zeroes");
    }
}
