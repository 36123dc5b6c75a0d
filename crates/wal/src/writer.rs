//! Appending to a log and making it durable.

use std::collections::VecDeque;

use crate::config::WalConfig;
use crate::error::WalError;
use crate::format::{
    FORMAT_VERSION, Lsn, SEGMENT_HEADER_BYTES, SegmentHeader, encode_record, record_bytes,
};
use crate::recover::{Recovery, SegmentInfo};
use crate::storage::{Storage, StorageError};

/// Appends records to one log's segments, over a [`Storage`].
///
/// Order of calls: [`LogWriter::create`] for a new log, or [`crate::recover`] and then
/// [`LogWriter::resume`] for an existing one; then any mix of [`LogWriter::append`] and
/// [`LogWriter::sync`]. A record is durable once a `sync` that started after its `append`
/// returned has returned `Ok` (group commit: one sync covers every record appended
/// before it). After a failed sync every call fails with [`WalError::Poisoned`]: what
/// reached the disk is unknown, and retrying could report a record durable that is not.
#[derive(Debug)]
pub struct LogWriter<S: Storage> {
    storage: S,
    config: WalConfig,
    /// Live segments, oldest first; the last is the one appended to.
    segments: VecDeque<SegmentInfo>,
    /// Where the next record goes in the last segment.
    offset: u64,
    /// The LSN the next record gets.
    next_lsn: Lsn,
    /// Every record up to this LSN is durable.
    durable_lsn: Lsn,
    /// Why the writer stopped, after a failed sync.
    poisoned: Option<String>,
    /// The encoding buffer, kept to avoid an allocation per record.
    buffer: Vec<u8>,
    /// Records appended by [`LogWriter::append_buffered`] and not written yet: their
    /// bytes, where in the last segment they go, and how many. Kept between uses (no
    /// allocation once warm).
    pending: Vec<u8>,
    pending_offset: u64,
    pending_records: u64,
}

/// Buffered records are written once they take this many bytes, at the latest.
pub const PENDING_BYTES_MAX: usize = 256 << 10;

impl<S: Storage> LogWriter<S> {
    /// Starts a new, empty log. Fails if the storage holds a segment of this log already.
    pub fn create(storage: S, config: WalConfig) -> Result<Self, WalError> {
        config.validate()?;
        let names = storage.list().map_err(|source| WalError::Io {
            file: "(directory)".into(),
            source,
        })?;
        if let Some(file) = names
            .into_iter()
            .find(|name| config.parse_segment_name(name).is_some())
        {
            return Err(WalError::AlreadyExists { file });
        }
        let mut writer = LogWriter {
            storage,
            config,
            segments: VecDeque::new(),
            offset: 0,
            next_lsn: 1,
            durable_lsn: 0,
            poisoned: None,
            buffer: Vec::new(),
            pending: Vec::new(),
            pending_offset: 0,
            pending_records: 0,
        };
        writer.start_segment(0)?;
        Ok(writer)
    }

    /// Continues the log that `recovery` read from this storage: cuts its torn tail (if any)
    /// and starts a fresh segment, so that no byte of the old tail sits after new records.
    pub fn resume(storage: S, config: WalConfig, recovery: &Recovery) -> Result<Self, WalError> {
        config.validate()?;
        let Some(last_sequence) = recovery.last_sequence else {
            return Self::create(storage, config);
        };
        let mut writer = LogWriter {
            storage,
            config,
            segments: recovery.segments.iter().cloned().collect(),
            offset: 0,
            next_lsn: recovery.next_lsn,
            durable_lsn: recovery.next_lsn - 1,
            poisoned: None,
            buffer: Vec::new(),
            pending: Vec::new(),
            pending_offset: 0,
            pending_records: 0,
        };
        if let Some(torn) = &recovery.torn_tail {
            let io = |source| WalError::Io {
                file: torn.file.clone(),
                source,
            };
            if torn.offset == 0 {
                writer.storage.remove(&torn.file).map_err(io)?;
            } else {
                writer
                    .storage
                    .set_len(&torn.file, torn.offset)
                    .map_err(io)?;
            }
        }
        // What recovery read may sit only in the page cache (the process died, the machine
        // did not): make it durable before counting it so.
        if let Some(last) = writer.segments.back() {
            let file = last.file.clone();
            writer.sync_file(&file)?;
        }
        let torn_creation = recovery
            .torn_tail
            .as_ref()
            .is_some_and(|torn| torn.offset == 0);
        let sequence = if torn_creation {
            last_sequence
        } else {
            last_sequence + 1
        };
        writer.start_segment(sequence)?;
        Ok(writer)
    }

    /// Appends a record of `kind` (not 0) and returns its LSN. It is durable only after a
    /// later [`LogWriter::sync`]. Fails with [`WalError::NoSpace`] when a new segment is
    /// needed and the disk is full; the log is unchanged then, and a later append may
    /// succeed.
    pub fn append(&mut self, kind: u8, payload: &[u8]) -> Result<Lsn, WalError> {
        self.write_pending()?;
        let size = self.make_room(kind, payload)?;
        let lsn = self.next_lsn;
        encode_record(&mut self.buffer, lsn, self.durable_lsn, kind, payload);
        // The segment's name borrowed, not cloned: no allocation per record.
        let file = &self
            .segments
            .back()
            .expect("a writer always has a segment")
            .file;
        self.storage
            .write_at(file, self.offset, &self.buffer)
            .map_err(|source| storage_error(file, source))?;
        self.offset += size;
        self.next_lsn += 1;
        debug_assert!(self.offset <= self.config.segment_size_bytes);
        Ok(lsn)
    }

    /// Makes every record appended so far durable; returns the durable LSN. A failure is
    /// fatal: the writer is poisoned.
    pub fn sync(&mut self) -> Result<Lsn, WalError> {
        self.write_pending()?;
        self.check_poisoned()?;
        let written = self.next_lsn - 1;
        if self.durable_lsn < written {
            let file = self.current().file.clone();
            self.sync_file(&file)?;
            self.durable_lsn = written;
        }
        Ok(self.durable_lsn)
    }

    /// Removes whole segments whose records all have LSNs below `lsn` (a checkpoint covers
    /// them). The segment being appended to is never removed. Returns how many went.
    pub fn remove_segments_below(&mut self, lsn: Lsn) -> Result<usize, WalError> {
        self.check_poisoned()?;
        let mut removed = 0;
        while self.segments.len() > 1 && self.segments[1].first_lsn <= lsn {
            let oldest = self.segments.front().expect("two or more").file.clone();
            self.storage
                .remove(&oldest)
                .map_err(|source| WalError::Io {
                    file: oldest,
                    source,
                })?;
            self.segments.pop_front();
            removed += 1;
        }
        Ok(removed)
    }

    /// Forgets, without removing them, the whole segments whose records all have LSNs
    /// below `lsn` (as [`LogWriter::remove_segments_below`] chooses them), and returns
    /// their file names: for a caller that removes them on another thread.
    pub fn take_segments_below(&mut self, lsn: Lsn) -> Vec<String> {
        let mut taken = Vec::new();
        while self.segments.len() > 1 && self.segments[1].first_lsn <= lsn {
            taken.push(self.segments.pop_front().expect("two or more").file);
        }
        taken
    }

    /// Appends a record as [`LogWriter::append`] does, but only into a buffer: it is
    /// written with the records buffered beside it by the next
    /// [`LogWriter::write_pending`] (or `append`, or `sync`), one write for them all, or
    /// at once when the buffer reaches [`PENDING_BYTES_MAX`]. A record not written yet
    /// is not covered by a sync made elsewhere ([`LogWriter::written_lsn`] says how far
    /// the log is written). For a worker that appends many records per loop iteration
    /// and writes them once per iteration.
    pub fn append_buffered(&mut self, kind: u8, payload: &[u8]) -> Result<Lsn, WalError> {
        let size = self.make_room(kind, payload)?;
        let lsn = self.next_lsn;
        encode_record(&mut self.buffer, lsn, self.durable_lsn, kind, payload);
        if self.pending.is_empty() {
            self.pending_offset = self.offset;
        }
        self.pending.extend_from_slice(&self.buffer);
        self.pending_records += 1;
        self.offset += size;
        self.next_lsn += 1;
        debug_assert!(self.offset <= self.config.segment_size_bytes);
        if self.pending.len() >= PENDING_BYTES_MAX {
            self.write_pending()?;
        }
        Ok(lsn)
    }

    /// Checks a record of `kind` with `payload` can be appended, and moves to a new
    /// segment if it does not fit in this one; returns its size on disk.
    fn make_room(&mut self, kind: u8, payload: &[u8]) -> Result<u64, WalError> {
        self.check_poisoned()?;
        assert!(kind != 0, "record kind 0 is reserved");
        let payload_bytes = payload.len() as u64;
        let max_bytes = self.config.max_payload_bytes();
        if payload_bytes > max_bytes {
            return Err(WalError::RecordTooLarge {
                payload_bytes,
                max_bytes,
            });
        }
        let size = record_bytes(payload_bytes);
        if self.offset + size > self.config.segment_size_bytes {
            // Segments before the last are synced whole (buffered records written first):
            // recovery treats any bad record in them as corruption.
            self.sync()?;
            let sequence = self.current().sequence + 1;
            self.start_segment(sequence)?;
        }
        Ok(size)
    }

    /// Writes the records [`LogWriter::append_buffered`] left in its buffer, in one write;
    /// returns how far the log is written. A failed write poisons the writer (those
    /// records have LSNs and are not in the file).
    pub fn write_pending(&mut self) -> Result<Lsn, WalError> {
        self.check_poisoned()?;
        if !self.pending.is_empty() {
            let file = &self
                .segments
                .back()
                .expect("a writer always has a segment")
                .file;
            if let Err(source) = self
                .storage
                .write_at(file, self.pending_offset, &self.pending)
            {
                let error = storage_error(file, source);
                self.poisoned = Some(format!("write of buffered records: {error}"));
                return Err(error);
            }
            self.pending.clear();
            self.pending_records = 0;
        }
        Ok(self.written_lsn())
    }

    /// How far the log is written to its file (records buffered by
    /// [`LogWriter::append_buffered`] and not written yet excluded).
    pub fn written_lsn(&self) -> Lsn {
        self.next_lsn - 1 - self.pending_records
    }

    /// The LSN the next record gets.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// Every record up to this LSN is durable (0: none yet).
    pub fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// Records up to `lsn` were made durable by a sync made elsewhere (a node's sync
    /// thread, which fdatasyncs this log's current segment through a storage of its own
    /// after reading how far the log was written). Later records carry it as their
    /// durable LSN, the witness recovery uses to tell damage from a torn tail, so it must
    /// only be told what a sync that returned `Ok` covered. Clamped to what was appended.
    pub fn note_durable(&mut self, lsn: Lsn) {
        self.durable_lsn = self.durable_lsn.max(lsn.min(self.next_lsn - 1));
    }

    /// The sequence number of the segment appended to now.
    pub fn current_sequence(&self) -> u64 {
        self.current().sequence
    }

    /// The log's configuration.
    pub fn config(&self) -> &WalConfig {
        &self.config
    }

    /// The live segments, oldest first.
    pub fn segments(&self) -> impl Iterator<Item = &SegmentInfo> {
        self.segments.iter()
    }

    /// The storage, to read it.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The storage, to change it (the simulator injects faults through it). Writing to the
    /// log's files behind the writer's back breaks the log.
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// Gives the storage back (a test crashes it, then recovers).
    pub fn into_storage(self) -> S {
        self.storage
    }

    fn current(&self) -> &SegmentInfo {
        self.segments.back().expect("a writer always has a segment")
    }

    fn check_poisoned(&self) -> Result<(), WalError> {
        match &self.poisoned {
            Some(reason) => Err(WalError::Poisoned {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Syncs `file`, poisoning the writer if that fails (any error: the sync's outcome is
    /// unknown either way).
    fn sync_file(&mut self, file: &str) -> Result<(), WalError> {
        if let Err(error) = self.storage.sync(file) {
            let reason = match error {
                StorageError::SyncFailed(text) => text,
                other => other.to_string(),
            };
            self.poisoned = Some(format!("sync of {file}: {reason}"));
            return Err(WalError::SyncFailed {
                file: file.into(),
                reason,
            });
        }
        Ok(())
    }

    /// Makes segment `sequence`, preallocated, its header synced before any record is
    /// written into it (recovery relies on that to tell a torn creation from damage), and
    /// appends to it from now on.
    fn start_segment(&mut self, sequence: u64) -> Result<(), WalError> {
        let file = self.config.segment_name(sequence);
        self.storage
            .create(&file)
            .map_err(|source| storage_error(&file, source))?;
        if let Err(source) = self.storage.set_len(&file, self.config.segment_size_bytes) {
            // Leave no half-made segment behind: a later append tries again.
            let _ = self.storage.remove(&file);
            return Err(storage_error(&file, source));
        }
        let header = SegmentHeader {
            version: FORMAT_VERSION,
            node_id: self.config.node_id,
            cluster_id: self.config.cluster_id,
            sequence,
            first_lsn: self.next_lsn,
            segment_size_bytes: self.config.segment_size_bytes,
        };
        self.storage
            .write_at(&file, 0, &header.encode())
            .map_err(|source| storage_error(&file, source))?;
        self.sync_file(&file)?;
        self.segments.push_back(SegmentInfo {
            file,
            sequence,
            first_lsn: self.next_lsn,
        });
        self.offset = SEGMENT_HEADER_BYTES;
        Ok(())
    }
}

fn storage_error(file: &str, source: StorageError) -> WalError {
    match source {
        StorageError::NoSpace => WalError::NoSpace { file: file.into() },
        source => WalError::Io {
            file: file.into(),
            source,
        },
    }
}
