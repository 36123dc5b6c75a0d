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
//!
//! Reading is streaming: [`LogReader`] (and [`recover_with`]) reads each segment through
//! one reusable buffer in chunks of [`DEFAULT_READ_CHUNK_BYTES`] and hands every record to
//! a callback with its payload borrowed, so a restart costs no allocation per record and
//! no memory per segment. A record that crosses a chunk's end is moved to the front of the
//! buffer with the rest of the chunk and the buffer is filled up behind it (grown only for
//! a record larger than a chunk). [`recover`] is the same reader collecting owned records.

use crate::config::WalConfig;
use crate::error::{WalError, hex};
use crate::format::{
    HeaderProblem, Lsn, MAX_PAYLOAD_BYTES, RECORD_ALIGN, RECORD_HEADER_BYTES, RecordHeader,
    SEGMENT_HEADER_BYTES, SegmentHeader, decode_record, record_bytes,
};
use crate::storage::{Storage, StorageError};

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

/// A record as the streaming reader hands it out: the payload borrows the reader's buffer,
/// valid only during the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Its LSN.
    pub lsn: Lsn,
    /// Its kind byte (never 0).
    pub kind: u8,
    /// Its payload.
    pub payload: &'a [u8],
    /// The segment holding it.
    pub file: &'a str,
    /// Its offset in that segment.
    pub offset: u64,
}

impl RecordRef<'_> {
    /// An owned copy.
    pub fn to_record(&self) -> Record {
        Record {
            lsn: self.lsn,
            kind: self.kind,
            payload: self.payload.to_vec(),
            file: self.file.to_owned(),
            offset: self.offset,
        }
    }
}

/// Bytes the streaming reader asks the storage for at once, by default.
pub const DEFAULT_READ_CHUNK_BYTES: usize = 1 << 20;

/// Reads the log named by `config` from `storage`. Reads only; nothing is changed.
///
/// Every record is copied into the returned [`Recovery`]; a restart that only replays
/// records should use [`recover_with`], which checks the same things without the copies.
pub fn recover<S: Storage + ?Sized>(storage: &S, config: &WalConfig) -> Result<Recovery, WalError> {
    let mut records = Vec::new();
    let mut recovery = LogReader::new().read(storage, config, |record| {
        records.push(record.to_record());
        Ok::<(), WalError>(())
    })?;
    recovery.records = records;
    Ok(recovery)
}

/// Reads the log named by `config` from `storage` in bounded chunks, handing each record
/// to `on_record` in LSN order, with its payload borrowed: [`LogReader::read`] with the
/// default chunk size.
pub fn recover_with<S, E, F>(storage: &S, config: &WalConfig, on_record: F) -> Result<Recovery, E>
where
    S: Storage + ?Sized,
    E: From<WalError>,
    F: FnMut(RecordRef<'_>) -> Result<(), E>,
{
    LogReader::new().read(storage, config, on_record)
}

/// The streaming reader: reads each segment through one reusable buffer of
/// `chunk_bytes` (grown only to hold a record larger than that, at most
/// [`crate::format::MAX_PAYLOAD_BYTES`] and its header), and checks exactly what
/// [`recover`] checks, with the same errors and offsets.
#[derive(Debug, Clone)]
pub struct LogReader {
    chunk_bytes: usize,
    buf: Vec<u8>,
}

impl Default for LogReader {
    fn default() -> Self {
        Self::new()
    }
}

impl LogReader {
    /// A reader with the default chunk size ([`DEFAULT_READ_CHUNK_BYTES`]).
    pub fn new() -> Self {
        Self::with_chunk_bytes(DEFAULT_READ_CHUNK_BYTES)
    }

    /// A reader that asks the storage for `chunk_bytes` at a time (at least 1; tests use
    /// a few dozen bytes so that records straddle chunks).
    pub fn with_chunk_bytes(chunk_bytes: usize) -> Self {
        LogReader {
            chunk_bytes: chunk_bytes.max(1),
            buf: Vec::new(),
        }
    }

    /// Reads the log named by `config` from `storage`, handing each valid record to
    /// `on_record`, oldest first. Reads only; nothing is changed.
    ///
    /// Returns what [`recover`] returns, except that `records` is empty: the records went
    /// to `on_record`. That is what [`crate::LogWriter::resume`] needs.
    ///
    /// Records are handed out as they are verified, before the rest of the log is: if
    /// this returns an error (corruption found later, or `on_record`'s own), the records
    /// already handed out must be thrown away with the rest. A torn tail is never handed
    /// out. `on_record`'s error stops the read and is returned as is.
    pub fn read<S, E, F>(
        &mut self,
        storage: &S,
        config: &WalConfig,
        mut on_record: F,
    ) -> Result<Recovery, E>
    where
        S: Storage + ?Sized,
        E: From<WalError>,
        F: FnMut(RecordRef<'_>) -> Result<(), E>,
    {
        config.validate()?;
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
            let mut segment = Segment {
                storage,
                file: &file,
                length,
                buf: &mut self.buf,
                chunk_bytes: self.chunk_bytes,
                base: 0,
                filled: 0,
            };
            recovery.last_sequence = Some(sequence);
            let Some(header) = check_header(config, &mut segment, last)? else {
                recovery.torn_tail = Some(TornTail {
                    file: file.clone(),
                    offset: 0,
                });
                break;
            };
            if let Some(previous) = recovery.segments.last()
                && sequence != previous.sequence + 1
            {
                return Err(corrupt(
                    &file,
                    0,
                    format!("segment {} is missing", previous.sequence + 1),
                )
                .into());
            }
            if header.sequence != sequence {
                return Err(
                    corrupt(&file, 0, format!("header says segment {}", header.sequence)).into(),
                );
            }
            if !recovery.segments.is_empty() && header.first_lsn != recovery.next_lsn {
                return Err(corrupt(
                    &file,
                    0,
                    format!(
                        "first LSN {} but the previous segment ends before {}",
                        header.first_lsn, recovery.next_lsn
                    ),
                )
                .into());
            }
            if header.first_lsn == 0 {
                return Err(corrupt(&file, 0, "first LSN 0".into()).into());
            }
            recovery.next_lsn = header.first_lsn;
            recovery.segments.push(SegmentInfo {
                file: file.clone(),
                sequence,
                first_lsn: header.first_lsn,
            });
            let end = scan_records(&mut segment, last, &mut recovery, &mut on_record)?;
            recovery.end_offset = end;
        }
        Ok(recovery)
    }
}

fn io(file: &str) -> impl FnOnce(StorageError) -> WalError + use<> {
    let file = file.to_owned();
    move |source| WalError::Io { file, source }
}

/// One segment seen through a window of the reader's buffer: `buf[..filled]` holds the
/// segment's bytes from `base` on. Reads mostly move forward; one that goes back (the
/// torn-tail checks) refills the window from there.
struct Segment<'a, S: ?Sized> {
    storage: &'a S,
    file: &'a str,
    /// Where the segment's bytes end: its length when the read began, or where a read
    /// came back short (the end of the file, by the `Storage` contract).
    length: u64,
    buf: &'a mut Vec<u8>,
    chunk_bytes: usize,
    base: u64,
    filled: usize,
}

impl<S: Storage + ?Sized> Segment<'_, S> {
    /// The segment's bytes from `at`: `want` of them, or fewer where the segment ends.
    fn bytes(&mut self, at: u64, want: usize) -> Result<&[u8], WalError> {
        let want = want.min(usize::try_from(self.length.saturating_sub(at)).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(&[]);
        }
        let buffered_end = self.base + self.filled as u64;
        if at < self.base || at + want as u64 > buffered_end {
            self.refill(at, want)?;
        }
        let start = (at - self.base) as usize;
        let end = (start + want).min(self.filled);
        Ok(&self.buf[start..end])
    }

    /// Makes the window start at `at` and hold at least `want` bytes (or up to the end).
    fn refill(&mut self, at: u64, want: usize) -> Result<(), WalError> {
        let buffered_end = self.base + self.filled as u64;
        if self.base <= at && at < buffered_end {
            let keep = (at - self.base) as usize..self.filled;
            self.filled = keep.len();
            self.buf.copy_within(keep, 0);
        } else {
            self.filled = 0;
        }
        self.base = at;
        let size = self.chunk_bytes.max(want);
        if self.buf.len() < size {
            self.buf.resize(size, 0);
        }
        let end = (self.length - self.base).min(self.buf.len() as u64) as usize;
        while self.filled < end {
            let offset = self.base + self.filled as u64;
            let asked = end - self.filled;
            let read = self
                .storage
                .read_at(self.file, offset, &mut self.buf[self.filled..end])
                .map_err(io(self.file))?;
            self.filled += read;
            if read < asked {
                self.length = self.base + self.filled as u64;
                break;
            }
        }
        Ok(())
    }

    /// Whether every byte from `from` to the segment's end is zero.
    fn is_blank_from(&mut self, from: u64) -> Result<bool, WalError> {
        let mut at = from;
        let chunk = self.chunk_bytes;
        loop {
            let bytes = self.bytes(at, chunk)?;
            if bytes.is_empty() {
                return Ok(true);
            }
            if !is_zero(bytes) {
                return Ok(false);
            }
            at += bytes.len() as u64;
        }
    }

    /// The record at `at` if it is whole and valid (what `decode_record` says of the
    /// segment's bytes from `at`). `blank` is set when the 32 bytes at `at` are all zero
    /// or the segment ends before them.
    fn record_at(&mut self, at: u64) -> Result<(Option<RecordHeader>, bool), WalError> {
        let header_bytes = RECORD_HEADER_BYTES as usize;
        let head = self.bytes(at, header_bytes)?;
        let blank = head.len() < header_bytes || is_zero(head);
        if head.len() < header_bytes {
            return Ok((None, blank));
        }
        let payload_bytes = u64::from(u32::from_le_bytes(head[0..4].try_into().expect("4")));
        if payload_bytes > MAX_PAYLOAD_BYTES {
            return Ok((None, blank));
        }
        let whole = self.bytes(at, record_bytes(payload_bytes) as usize)?;
        Ok((decode_record(whole).map(|(header, _)| header), blank))
    }

    /// The payload of the record at `at`, which `record_at` found valid.
    fn payload_at(&mut self, at: u64, header: &RecordHeader) -> Result<&[u8], WalError> {
        let whole = self.bytes(at, record_bytes(header.payload_bytes) as usize)?;
        let start = RECORD_HEADER_BYTES as usize;
        Ok(&whole[start..start + header.payload_bytes as usize])
    }
}

/// Checks a segment's header: `Ok(None)` for a last segment torn at creation.
fn check_header<S: Storage + ?Sized>(
    config: &WalConfig,
    segment: &mut Segment<'_, S>,
    last: bool,
) -> Result<Option<SegmentHeader>, WalError> {
    let file = segment.file;
    let problem = match SegmentHeader::decode(segment.bytes(0, SEGMENT_HEADER_BYTES as usize)?) {
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
    if last && segment.is_blank_from(SEGMENT_HEADER_BYTES)? {
        return Ok(None);
    }
    Err(corrupt(
        file,
        0,
        format!("segment header unreadable ({problem:?})"),
    ))
}

/// Reads the records of one segment, handing each to `on_record`; returns where they end.
fn scan_records<S, E, F>(
    segment: &mut Segment<'_, S>,
    last: bool,
    recovery: &mut Recovery,
    on_record: &mut F,
) -> Result<u64, E>
where
    S: Storage + ?Sized,
    E: From<WalError>,
    F: FnMut(RecordRef<'_>) -> Result<(), E>,
{
    let file = segment.file;
    let mut offset = SEGMENT_HEADER_BYTES;
    loop {
        let (header, blank) = segment.record_at(offset)?;
        if let Some(header) = header {
            if header.lsn != recovery.next_lsn {
                return Err(corrupt(
                    file,
                    offset,
                    format!(
                        "record has LSN {} where {} was expected",
                        header.lsn, recovery.next_lsn
                    ),
                )
                .into());
            }
            let payload = segment.payload_at(offset, &header)?;
            on_record(RecordRef {
                lsn: header.lsn,
                kind: header.kind,
                payload,
                file,
                offset,
            })?;
            recovery.next_lsn += 1;
            offset += record_bytes(header.payload_bytes);
            continue;
        }
        // The records end here: cleanly, torn, or damaged.
        if !last {
            if blank {
                return Ok(offset);
            }
            return Err(
                corrupt(file, offset, "bad record in a segment synced whole".into()).into(),
            );
        }
        // A blank tail holds no record, so no witness either: the log ended cleanly.
        if segment.is_blank_from(offset)? {
            return Ok(offset);
        }
        if let Some(witness) = durable_witness(segment, offset, recovery.next_lsn)? {
            return Err(corrupt(
                file,
                offset,
                format!(
                    "bad record with LSN {}, which the record at byte {witness} says was durable",
                    recovery.next_lsn
                ),
            )
            .into());
        }
        recovery.torn_tail = Some(TornTail {
            file: file.into(),
            offset,
        });
        return Ok(offset);
    }
}

/// The offset of a valid record after `from` whose durable LSN covers `lsn`, if any: proof
/// that the record expected at `from` had been synced.
fn durable_witness<S: Storage + ?Sized>(
    segment: &mut Segment<'_, S>,
    from: u64,
    lsn: Lsn,
) -> Result<Option<u64>, WalError> {
    let mut at = from + RECORD_ALIGN;
    while at < segment.length {
        // Cheap tests first: only a header with a nonzero kind and a durable LSN that
        // covers `lsn` can be a witness; `record_at` then checks it fully.
        let head = segment.bytes(at, RECORD_HEADER_BYTES as usize)?;
        let candidate = head.len() == RECORD_HEADER_BYTES as usize
            && head[24] != 0
            && u64::from_le_bytes(head[16..24].try_into().expect("8")) >= lsn;
        if candidate
            && let (Some(header), _) = segment.record_at(at)?
            && header.durable_lsn >= lsn
        {
            return Ok(Some(at));
        }
        at += RECORD_ALIGN;
    }
    Ok(None)
}

/// Whether every byte is zero (folded in blocks, which vectorizes, rather than stopping at
/// the first nonzero byte).
fn is_zero(bytes: &[u8]) -> bool {
    bytes
        .chunks(4096)
        .all(|block| block.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

fn corrupt(file: &str, offset: u64, reason: String) -> WalError {
    WalError::Corrupt {
        file: file.into(),
        offset,
        reason,
    }
}
