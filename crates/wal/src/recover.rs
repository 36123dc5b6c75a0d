//! Reading a log back after a restart: every segment in order, every header and record
//! verified, a torn tail found and reported, any other damage refused.
//!
//! The rules (docs/durability.md, "Bad disks"):
//! - A segment from another cluster, another node or an unknown format version is refused
//!   with an error naming the file.
//! - Segments before the last were synced whole before the next one was made, so a bad
//!   record in one is corruption. So is a gap in the sequence numbers or in the LSNs.
//! - In the last segment, the first bad record ends the log: a torn tail, cut at its
//!   offset. Unless a valid record after it says (by its durable LSN) that the bad one had
//!   been synced: then the damage is corruption. Unsynced records reach the disk in any
//!   order at a crash, so a valid record after a hole is not by itself a sign of damage.
//! - A last segment whose header is unreadable and which holds nothing else was being
//!   created at the crash (the writer syncs a header before writing records after it).

use crate::config::WalConfig;
use crate::error::{WalError, hex};
use crate::format::{
    HeaderProblem, Lsn, RECORD_ALIGN, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SegmentHeader,
    decode_record, record_bytes,
};
use crate::storage::Storage;

/// One recovered record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its LSN.
    pub lsn: Lsn,
    /// Its kind byte (never 0).
    pub kind: u8,
    /// Its payload.
    pub payload: Vec<u8>,
    /// The segment holding it.
    pub file: String,
    /// Its offset in that segment.
    pub offset: u64,
}

/// One segment found by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Its file name.
    pub file: String,
    /// Its sequence number.
    pub sequence: u64,
    /// The LSN of its first record.
    pub first_lsn: Lsn,
}

/// Where recovery cut a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The last segment.
    pub file: String,
    /// Bytes from here on are not part of the log. 0 means the segment's header itself
    /// was torn: the whole file goes.
    pub offset: u64,
}

/// What recovery found: the log's records, in LSN order, and where it ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Every record, oldest first, with consecutive LSNs.
    pub records: Vec<Record>,
    /// Segments with a valid header, oldest first.
    pub segments: Vec<SegmentInfo>,
    /// The LSN the next record gets.
    pub next_lsn: Lsn,
    /// Where the records of the last segment end (its first free offset); 0 if there is
    /// no segment.
    pub end_offset: u64,
    /// The torn tail that was cut off, if any (reported; `LogWriter::resume` removes it).
    pub torn_tail: Option<TornTail>,
    /// The sequence number of the last segment file, torn or not.
    pub last_sequence: Option<u64>,
}

/// Reads the log named by `config` from `storage`. Reads only; nothing is changed.
pub fn recover<S: Storage + ?Sized>(storage: &S, config: &WalConfig) -> Result<Recovery, WalError> {
    config.validate()?;
    let io = |file: &str| {
        let file = file.to_owned();
        move |source| WalError::Io { file, source }
    };
    let mut sequences: Vec<(u64, String)> = storage
        .list()
        .map_err(io("(directory)"))?
        .into_iter()
        .filter_map(|name| config.parse_segment_name(&name).map(|seq| (seq, name)))
        .collect();
    sequences.sort();
    let mut recovery = Recovery {
        next_lsn: 1,
        ..Recovery::default()
    };
    let count = sequences.len();
    for (index, (sequence, file)) in sequences.into_iter().enumerate() {
        let last = index + 1 == count;
        let length = storage.len(&file).map_err(io(&file))?;
        let mut bytes = vec![0; usize::try_from(length).expect("segment fits in memory")];
        let read = storage.read_at(&file, 0, &mut bytes).map_err(io(&file))?;
        bytes.truncate(read);
        recovery.last_sequence = Some(sequence);
        let Some(header) = check_header(config, &file, &bytes, last)? else {
            recovery.torn_tail = Some(TornTail { file, offset: 0 });
            break;
        };
        if let Some(previous) = recovery.segments.last()
            && sequence != previous.sequence + 1
        {
            return Err(corrupt(
                &file,
                0,
                format!("segment {} is missing", previous.sequence + 1),
            ));
        }
        if header.sequence != sequence {
            return Err(corrupt(
                &file,
                0,
                format!("header says segment {}", header.sequence),
            ));
        }
        if !recovery.segments.is_empty() && header.first_lsn != recovery.next_lsn {
            return Err(corrupt(
                &file,
                0,
                format!(
                    "first LSN {} but the previous segment ends before {}",
                    header.first_lsn, recovery.next_lsn
                ),
            ));
        }
        if header.first_lsn == 0 {
            return Err(corrupt(&file, 0, "first LSN 0".into()));
        }
        recovery.next_lsn = header.first_lsn;
        recovery.segments.push(SegmentInfo {
            file: file.clone(),
            sequence,
            first_lsn: header.first_lsn,
        });
        let end = scan_records(&file, &bytes, last, &mut recovery)?;
        recovery.end_offset = end;
    }
    Ok(recovery)
}

/// Checks a segment's header: `Ok(None)` for a last segment torn at creation.
fn check_header(
    config: &WalConfig,
    file: &str,
    bytes: &[u8],
    last: bool,
) -> Result<Option<SegmentHeader>, WalError> {
    let header_bytes = SEGMENT_HEADER_BYTES as usize;
    let body_is_blank = bytes
        .get(header_bytes..)
        .is_none_or(|body| body.iter().all(|&b| b == 0));
    let problem = match SegmentHeader::decode(bytes) {
        Ok(header) => {
            if header.cluster_id != config.cluster_id {
                return Err(WalError::ForeignCluster {
                    file: file.into(),
                    found: hex(&header.cluster_id),
                    expected: hex(&config.cluster_id),
                });
            }
            if header.node_id != config.node_id {
                return Err(WalError::ForeignNode {
                    file: file.into(),
                    found: header.node_id,
                    expected: config.node_id,
                });
            }
            return Ok(Some(header));
        }
        Err(HeaderProblem::UnknownVersion(found)) => {
            return Err(WalError::UnknownVersion {
                file: file.into(),
                found,
            });
        }
        Err(problem) => problem,
    };
    if last && body_is_blank {
        return Ok(None);
    }
    Err(corrupt(
        file,
        0,
        format!("segment header unreadable ({problem:?})"),
    ))
}

/// Reads the records of one segment into `recovery`; returns where they end.
fn scan_records(
    file: &str,
    bytes: &[u8],
    last: bool,
    recovery: &mut Recovery,
) -> Result<u64, WalError> {
    let mut offset = SEGMENT_HEADER_BYTES as usize;
    loop {
        let rest = bytes.get(offset..).unwrap_or(&[]);
        let blank = rest.len() < RECORD_HEADER_BYTES as usize
            || rest[..RECORD_HEADER_BYTES as usize].iter().all(|&b| b == 0);
        if let Some((header, payload)) = decode_record(rest) {
            if header.lsn != recovery.next_lsn {
                return Err(corrupt(
                    file,
                    offset as u64,
                    format!(
                        "record has LSN {} where {} was expected",
                        header.lsn, recovery.next_lsn
                    ),
                ));
            }
            recovery.records.push(Record {
                lsn: header.lsn,
                kind: header.kind,
                payload: payload.to_vec(),
                file: file.into(),
                offset: offset as u64,
            });
            recovery.next_lsn += 1;
            offset += record_bytes(header.payload_bytes) as usize;
            continue;
        }
        // The records end here: cleanly, torn, or damaged.
        if !last {
            if blank {
                return Ok(offset as u64);
            }
            return Err(corrupt(
                file,
                offset as u64,
                "bad record in a segment synced whole".into(),
            ));
        }
        if let Some(witness) = durable_witness(bytes, offset, recovery.next_lsn) {
            return Err(corrupt(
                file,
                offset as u64,
                format!(
                    "bad record with LSN {}, which the record at byte {witness} says was durable",
                    recovery.next_lsn
                ),
            ));
        }
        let tail_is_blank = rest.iter().all(|&b| b == 0);
        if !tail_is_blank {
            recovery.torn_tail = Some(TornTail {
                file: file.into(),
                offset: offset as u64,
            });
        }
        return Ok(offset as u64);
    }
}

/// The offset of a valid record after `from` whose durable LSN covers `lsn`, if any: proof
/// that the record expected at `from` had been synced.
fn durable_witness(bytes: &[u8], from: usize, lsn: Lsn) -> Option<usize> {
    let step = RECORD_ALIGN as usize;
    (from + step..bytes.len()).step_by(step).find(|&at| {
        decode_record(&bytes[at..]).is_some_and(|(header, _)| header.durable_lsn >= lsn)
    })
}

fn corrupt(file: &str, offset: u64, reason: String) -> WalError {
    WalError::Corrupt {
        file: file.into(),
        offset,
        reason,
    }
}
