//! The messages of the commit protocol and their encoding.
//!
//! Little-endian, length-prefixed, no padding. Decoding is total: a message either decodes
//! whole or is refused with a [`DecodeError`]; a participant answers a refused message
//! with an error and changes nothing.

use ferrotx_store::{Key, TableId};
use ferrotx_wire::ViewId;

/// A transaction id: view, coordinator node, thread and incarnation, and a
/// counter that grows per coordinator thread. The incarnation (the RPC engine's, which
/// grows with each start of the process) keeps a restarted coordinator's counters, which
/// start again at 1, from meeting its earlier life's in logs and lock tables.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct TxId {
    /// The view the transaction started in.
    pub view: ViewId,
    /// Coordinator node.
    pub node: u16,
    /// Coordinator thread.
    pub thread: u16,
    /// Incarnation of the coordinator's process.
    pub incarnation: u64,
    /// Per-coordinator-thread counter.
    pub counter: u64,
}

/// The version of a write that did not read its object (a blind write, `Txn::put`): the
/// primary locks the object at whatever version it has and answers with that version, and
/// the coordinator sends the backups the version the primary locked.
pub const VERSION_ANY: u64 = u64::MAX;

/// Why bytes are not a message.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum DecodeError {
    /// The bytes end inside a field.
    #[error("message truncated")]
    Truncated,
    /// Bytes are left after the message.
    #[error("bytes after the end of the message")]
    TrailingBytes,
    /// A key longer than the store allows.
    #[error("key too long")]
    KeyTooLong,
    /// A field holds a value no message uses.
    #[error("invalid field value")]
    Invalid,
}

/// A written object: table, key, the version the transaction read, and its new value
/// (`None` deletes it).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Write {
    /// Partition of the key, as the coordinator placed it.
    pub partition: u32,
    /// Table.
    pub table: TableId,
    /// Key.
    pub key: Key,
    /// Version read (0 for a key with no object).
    pub version: u64,
    /// New value, or `None` for a delete.
    pub value: Option<Vec<u8>>,
}

/// An object read but not written: table, key and the version read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReadItem {
    /// Partition of the key.
    pub partition: u32,
    /// Table.
    pub table: TableId,
    /// Key.
    pub key: Key,
    /// Version read.
    pub version: u64,
}

/// LOCK and COMMIT-BACKUP carry the same record (FaRM table 1): the transaction, the
/// partitions it writes (for recovery), and its writes at the destination.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LockRecord {
    /// The transaction.
    pub tx: TxId,
    /// Every partition the transaction writes.
    pub partitions: Vec<u32>,
    /// Its writes to objects of the destination's partitions.
    pub writes: Vec<Write>,
    /// The coordinator's truncation mark: every transaction of this coordinator thread
    /// with a counter up to this one has committed everywhere (0: none yet).
    pub truncate_up_to: u64,
}

/// Appends bytes.
pub struct Writer<'a>(pub &'a mut Vec<u8>);

impl Writer<'_> {
    /// A u8.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    /// A u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Bytes with a u32 length.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    /// A key: its length in one byte, then its bytes.
    pub fn key(&mut self, key: &Key) -> &mut Self {
        let bytes = key.as_bytes();
        self.u8(bytes.len() as u8);
        self.0.extend_from_slice(bytes);
        self
    }
    /// A view id.
    pub fn view(&mut self, view: ViewId) -> &mut Self {
        self.u64(view.0)
    }
    /// A transaction id.
    pub fn tx(&mut self, tx: &TxId) -> &mut Self {
        self.view(tx.view)
            .u16(tx.node)
            .u16(tx.thread)
            .u64(tx.incarnation)
            .u64(tx.counter)
    }
}

/// Reads fields from bytes, refusing anything out of bounds.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    /// A u8.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    /// A u16.
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    /// A u32.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    /// A u64.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// Bytes with a u32 length.
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }
    /// A key.
    pub fn key(&mut self) -> Result<Key, DecodeError> {
        let len = usize::from(self.u8()?);
        Key::from_bytes(self.take(len)?).map_err(|_| DecodeError::KeyTooLong)
    }
    /// A view id.
    pub fn view(&mut self) -> Result<ViewId, DecodeError> {
        self.u64().map(ViewId)
    }
    /// A transaction id.
    pub fn tx(&mut self) -> Result<TxId, DecodeError> {
        Ok(TxId {
            view: self.view()?,
            node: self.u16()?,
            thread: self.u16()?,
            incarnation: self.u64()?,
            counter: self.u64()?,
        })
    }
    /// Succeeds only if every byte was read.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }
}

/// Most items in one message: bounds what a decoder allocates for a forged count.
pub const ITEMS_MAX: usize = 4096;

fn count(reader: &mut Reader<'_>) -> Result<usize, DecodeError> {
    let n = usize::from(reader.u16()?);
    if n > ITEMS_MAX {
        return Err(DecodeError::Invalid);
    }
    Ok(n)
}

/// Bytes of a record before its partitions and writes: transaction id (28), mark (8) and
/// the two counts (2 each).
const RECORD_HEADER_BYTES: usize = 28 + 8 + 2 + 2;

impl Write {
    /// Bytes of its encoding in a record.
    pub fn encoded_len(&self) -> usize {
        4 + 2
            + 1
            + self.key.as_bytes().len()
            + 8
            + 1
            + self.value.as_ref().map_or(0, |v| 4 + v.len())
    }
}

impl LockRecord {
    /// The length of the encoding of a record of `partitions` partitions and `writes`,
    /// computed without encoding it: the coordinator checks its messages against the
    /// limits before it takes a transaction id or reserves log space.
    pub fn encoded_len<'a>(
        partitions: usize,
        writes: impl IntoIterator<Item = &'a Write>,
    ) -> usize {
        RECORD_HEADER_BYTES
            + 4 * partitions
            + writes.into_iter().map(Write::encoded_len).sum::<usize>()
    }

    /// Encodes the record.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_record(
            &self.tx,
            self.truncate_up_to,
            &self.partitions,
            self.writes.iter(),
            out,
        );
    }

    /// Decodes a record.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(bytes);
        let tx = r.tx()?;
        let truncate_up_to = r.u64()?;
        let partitions = (0..count(&mut r)?)
            .map(|_| r.u32())
            .collect::<Result<_, _>>()?;
        let n = count(&mut r)?;
        let mut writes = Vec::with_capacity(n);
        for _ in 0..n {
            let w = read_write(&mut r)?;
            writes.push(Write {
                partition: w.partition,
                table: w.table,
                key: w.key,
                version: w.version,
                value: w.value.map(<[u8]>::to_vec),
            });
        }
        read_note(&mut r)?;
        r.finish()?;
        Ok(Self {
            tx,
            partitions,
            writes,
            truncate_up_to,
        })
    }
}

/// Appends a note to a record just encoded: bytes the participants keep with the record
/// and do not interpret (a shipped batch's callers and results, [`crate::ship`]). A
/// record has at most one; an empty note is none.
pub fn append_record_note(note: &[u8], out: &mut Vec<u8>) {
    if !note.is_empty() {
        Writer(out).bytes(note);
    }
}

/// Bytes a note adds to a record.
pub fn record_note_len(note: &[u8]) -> usize {
    if note.is_empty() { 0 } else { 4 + note.len() }
}

/// The note after a record's writes, if any (empty otherwise).
fn read_note<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    if r.0.is_empty() {
        return Ok(&[]);
    }
    r.bytes()
}

/// Encodes a LOCK or COMMIT-BACKUP record of `tx` with `writes`, straight from the
/// coordinator's write set (no intermediate [`LockRecord`]).
pub fn encode_record<'a>(
    tx: &TxId,
    truncate_up_to: u64,
    partitions: &[u32],
    writes: impl Iterator<Item = &'a Write> + Clone,
    out: &mut Vec<u8>,
) {
    let mut w = Writer(out);
    w.tx(tx).u64(truncate_up_to).u16(partitions.len() as u16);
    for &p in partitions {
        w.u32(p);
    }
    w.u16(writes.clone().count() as u16);
    for write in writes {
        w.u32(write.partition)
            .u16(write.table.0)
            .key(&write.key)
            .u64(write.version);
        match &write.value {
            Some(value) => {
                w.u8(1).bytes(value);
            }
            None => {
                w.u8(0);
            }
        }
    }
}

/// A write inside an encoded record, its value borrowed from the record's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WriteRef<'a> {
    /// Partition of the key.
    pub partition: u32,
    /// Table.
    pub table: TableId,
    /// Key.
    pub key: Key,
    /// Version read.
    pub version: u64,
    /// New value, or `None` for a delete.
    pub value: Option<&'a [u8]>,
}

fn read_write<'a>(r: &mut Reader<'a>) -> Result<WriteRef<'a>, DecodeError> {
    let partition = r.u32()?;
    let table = TableId(r.u16()?);
    let key = r.key()?;
    let version = r.u64()?;
    let value = match r.u8()? {
        0 => None,
        1 => Some(r.bytes()?),
        _ => return Err(DecodeError::Invalid),
    };
    Ok(WriteRef {
        partition,
        table,
        key,
        version,
        value,
    })
}

/// Overwrites the version of each write of the encoded record `bytes` (checked by
/// [`RecordView::parse`]) with the next of `versions` (8 bytes each, little-endian, in the
/// record's order): a primary keeps its LOCK record with the versions it locked blind
/// writes at, so that recovery may replicate it. Allocates nothing.
pub fn set_record_versions(bytes: &mut [u8], versions: &[u8]) -> Result<(), DecodeError> {
    let (header, writes_at) = {
        let mut r = Reader(bytes);
        r.tx()?;
        r.u64()?;
        let partitions = count(&mut r)?;
        r.take(4 * partitions)?;
        let n = count(&mut r)?;
        (n, bytes.len() - r.0.len())
    };
    if versions.len() != 8 * header {
        return Err(DecodeError::Invalid);
    }
    let mut at = writes_at;
    for version in versions.chunks_exact(8) {
        let (version_at, next) = {
            let mut r = Reader(&bytes[at..]);
            r.u32()?;
            r.u16()?;
            r.key()?;
            let version_at = at + (bytes.len() - at - r.0.len());
            r.u64()?;
            match r.u8()? {
                0 => {}
                1 => {
                    r.bytes()?;
                }
                _ => return Err(DecodeError::Invalid),
            }
            (version_at, bytes.len() - r.0.len())
        };
        bytes[version_at..version_at + 8].copy_from_slice(version);
        at = next;
    }
    Ok(())
}

/// The record `bytes` (checked by [`RecordView::parse`]) without its writes to the
/// partitions `drop` names: the same transaction, mark, partitions and note; `None` if no
/// write is left.
pub fn record_without_writes_of(bytes: &[u8], drop: impl Fn(u32) -> bool) -> Option<Vec<u8>> {
    let record = RecordView::parse(bytes).ok()?;
    let kept = record.writes().filter(|w| !drop(w.partition)).count();
    if kept == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut w = Writer(&mut out);
    w.tx(&record.tx).u64(record.truncate_up_to);
    w.u16(record.partitions().len() as u16);
    for p in record.partitions() {
        w.u32(p);
    }
    w.u16(kept as u16);
    for write in record.writes().filter(|w| !drop(w.partition)) {
        w.u32(write.partition)
            .u16(write.table.0)
            .key(&write.key)
            .u64(write.version);
        match write.value {
            Some(value) => {
                w.u8(1).bytes(value);
            }
            None => {
                w.u8(0);
            }
        }
    }
    append_record_note(record.note(), &mut out);
    Some(out)
}

/// A LOCK or COMMIT-BACKUP record read in place: [`RecordView::parse`] checks the whole
/// record once, then its fields and writes are read from the bytes without copying, so a
/// participant can keep the record as the bytes it arrived in.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    /// The transaction.
    pub tx: TxId,
    /// The coordinator's truncation mark.
    pub truncate_up_to: u64,
    partitions: &'a [u8],
    writes: &'a [u8],
    write_count: usize,
    note: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Checks `bytes` as a whole record.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(bytes);
        let tx = r.tx()?;
        let truncate_up_to = r.u64()?;
        let partition_count = count(&mut r)?;
        let partitions = r.take(4 * partition_count)?;
        let write_count = count(&mut r)?;
        let writes = r.0;
        for _ in 0..write_count {
            read_write(&mut r)?;
        }
        let note = read_note(&mut r)?;
        r.finish()?;
        Ok(Self {
            tx,
            truncate_up_to,
            partitions,
            writes,
            write_count,
            note,
        })
    }

    /// The record's note ([`append_record_note`]): empty if it has none.
    pub fn note(&self) -> &'a [u8] {
        self.note
    }

    /// Every partition the transaction writes.
    pub fn partitions(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.partitions
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    /// Number of writes.
    pub fn write_count(&self) -> usize {
        self.write_count
    }

    /// The writes, in order.
    pub fn writes(&self) -> impl Iterator<Item = WriteRef<'a>> + 'a {
        let mut r = Reader(self.writes);
        (0..self.write_count).map(move |_| read_write(&mut r).expect("checked by parse"))
    }
}

/// Encodes a VALIDATE request of `items`.
pub fn encode_validate<'a>(
    items: impl IntoIterator<Item = &'a ReadItem, IntoIter: Clone>,
    out: &mut Vec<u8>,
) {
    let items = items.into_iter();
    let mut w = Writer(out);
    w.u16(items.clone().count() as u16);
    for item in items {
        w.u32(item.partition)
            .u16(item.table.0)
            .key(&item.key)
            .u64(item.version);
    }
}

/// Decodes a VALIDATE request.
pub fn decode_validate(bytes: &[u8]) -> Result<Vec<ReadItem>, DecodeError> {
    let mut r = Reader(bytes);
    let n = count(&mut r)?;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        items.push(ReadItem {
            partition: r.u32()?,
            table: TableId(r.u16()?),
            key: r.key()?,
            version: r.u64()?,
        });
    }
    r.finish()?;
    Ok(items)
}

/// Encodes a READ request.
pub fn encode_read(partition: u32, table: TableId, key: &Key, out: &mut Vec<u8>) {
    Writer(out).u32(partition).u16(table.0).key(key);
}

/// Decodes a READ request: partition, table, key.
pub fn decode_read(bytes: &[u8]) -> Result<(u32, TableId, Key), DecodeError> {
    let mut r = Reader(bytes);
    let read = (r.u32()?, TableId(r.u16()?), r.key()?);
    r.finish()?;
    Ok(read)
}

/// Outcome of a READ, first byte of its response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum ReadStatus {
    /// The object exists: version and value follow.
    Present = 0,
    /// No object (absent or deleted): the version follows.
    Absent = 1,
    /// Locked by a committing transaction.
    Locked = 2,
    /// Written nonstop during every attempt to copy it.
    Contended = 3,
    /// The request named an unknown table or a partition this node is not primary for.
    Refused = 4,
    /// The partition is blocked while transaction-state recovery runs: read again soon.
    Recovering = 5,
}

/// Encodes a READ response.
pub fn encode_read_response(status: ReadStatus, version: u64, value: &[u8], out: &mut Vec<u8>) {
    Writer(out).u8(status as u8).u64(version);
    out.extend_from_slice(value);
}

/// Decodes a READ response: status, version and value.
pub fn decode_read_response(bytes: &[u8]) -> Result<(ReadStatus, u64, &[u8]), DecodeError> {
    let mut r = Reader(bytes);
    let status = match r.u8()? {
        0 => ReadStatus::Present,
        1 => ReadStatus::Absent,
        2 => ReadStatus::Locked,
        3 => ReadStatus::Contended,
        4 => ReadStatus::Refused,
        5 => ReadStatus::Recovering,
        _ => return Err(DecodeError::Invalid),
    };
    let version = r.u64()?;
    Ok((status, version, r.0))
}

/// A coordinator thread in one life of its process: the key of its logs at backups.
pub type CoordinatorId = (u16, u16, u64);

/// Encodes a TRUNCATE request: the coordinator and its mark.
pub fn encode_truncate(coordinator: CoordinatorId, mark: u64, out: &mut Vec<u8>) {
    Writer(out)
        .u16(coordinator.0)
        .u16(coordinator.1)
        .u64(coordinator.2)
        .u64(mark);
}

/// Decodes a TRUNCATE request: the coordinator and its mark.
pub fn decode_truncate(bytes: &[u8]) -> Result<(CoordinatorId, u64), DecodeError> {
    let mut r = Reader(bytes);
    let t = ((r.u16()?, r.u16()?, r.u64()?), r.u64()?);
    r.finish()?;
    Ok(t)
}

/// Encodes a COMMIT-PRIMARY or ABORT request: the transaction.
pub fn encode_tx(tx: &TxId, out: &mut Vec<u8>) {
    Writer(out).tx(tx);
}

/// Decodes a COMMIT-PRIMARY or ABORT request.
pub fn decode_tx(bytes: &[u8]) -> Result<TxId, DecodeError> {
    let mut r = Reader(bytes);
    let tx = r.tx()?;
    r.finish()?;
    Ok(tx)
}

/// Encodes a SCAN request: visit at most `count` objects of `table` at the primary of
/// `partition`, from `cursor` (0 starts).
pub fn encode_scan(partition: u32, table: TableId, cursor: u64, count: u32, out: &mut Vec<u8>) {
    Writer(out)
        .u32(partition)
        .u16(table.0)
        .u64(cursor)
        .u32(count);
}

/// A SCAN request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ScanRequest {
    /// The partition, whose primary answers.
    pub partition: u32,
    /// The table.
    pub table: TableId,
    /// Where to go on from (0 starts; otherwise a `next_cursor` of an earlier answer).
    pub cursor: u64,
    /// Most objects to visit.
    pub count: u32,
}

/// Decodes a SCAN request.
pub fn decode_scan(bytes: &[u8]) -> Result<ScanRequest, DecodeError> {
    let mut r = Reader(bytes);
    let request = ScanRequest {
        partition: r.u32()?,
        table: TableId(r.u16()?),
        cursor: r.u64()?,
        count: r.u32()?,
    };
    r.finish()?;
    Ok(request)
}

/// Outcome of a SCAN or COUNT, first byte of its response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum ScanStatus {
    /// Answered: the rest of the response follows.
    Done = 0,
    /// The request named an unknown table or a partition this node is not primary for.
    Refused = 1,
}

/// One page of a scan: what a SCAN answered.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ScanPage {
    /// Where the next SCAN of the partition goes on from; 0 when it has been visited
    /// whole.
    pub next_cursor: u64,
    /// Objects visited (present or not): at most the request's count.
    pub visited: u32,
    /// The present objects visited, with their values, in the order visited.
    pub objects: Vec<(Key, Vec<u8>)>,
}

/// Bytes of a SCAN response before its objects: status, next cursor, visited, count.
pub const SCAN_RESPONSE_HEADER_BYTES: usize = 1 + 8 + 4 + 2;

/// Bytes one object adds to a SCAN response.
pub fn scan_object_len(key: &Key, value: &[u8]) -> usize {
    1 + key.as_bytes().len() + 4 + value.len()
}

/// Starts a SCAN response in `out` (empty): call [`push_scan_object`] for each object,
/// then [`finish_scan_response`].
pub fn start_scan_response(out: &mut Vec<u8>) {
    debug_assert!(out.is_empty());
    Writer(out).u8(ScanStatus::Done as u8).u64(0).u32(0).u16(0);
}

/// Adds one object to a SCAN response started by [`start_scan_response`].
pub fn push_scan_object(key: &Key, value: &[u8], out: &mut Vec<u8>) {
    Writer(out).key(key).bytes(value);
}

/// Completes a SCAN response: where to go on from, how many objects were visited and how
/// many pushed (at most [`ITEMS_MAX`]).
pub fn finish_scan_response(next_cursor: u64, visited: u32, objects: usize, out: &mut [u8]) {
    assert!(
        objects <= ITEMS_MAX,
        "a SCAN answers at most ITEMS_MAX objects"
    );
    out[1..9].copy_from_slice(&next_cursor.to_le_bytes());
    out[9..13].copy_from_slice(&visited.to_le_bytes());
    out[13..15].copy_from_slice(&(objects as u16).to_le_bytes());
}

/// Decodes a SCAN response: `None` if the primary refused the request.
pub fn decode_scan_response(bytes: &[u8]) -> Result<Option<ScanPage>, DecodeError> {
    let mut r = Reader(bytes);
    match r.u8()? {
        0 => {}
        1 => {
            r.finish()?;
            return Ok(None);
        }
        _ => return Err(DecodeError::Invalid),
    }
    let next_cursor = r.u64()?;
    let visited = r.u32()?;
    let n = count(&mut r)?;
    let mut objects = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.key()?;
        objects.push((key, r.bytes()?.to_vec()));
    }
    r.finish()?;
    Ok(Some(ScanPage {
        next_cursor,
        visited,
        objects,
    }))
}

/// Encodes a COUNT request: the present objects of `table` at the primary of
/// `partition`.
pub fn encode_count(partition: u32, table: TableId, out: &mut Vec<u8>) {
    Writer(out).u32(partition).u16(table.0);
}

/// Decodes a COUNT request: partition and table.
pub fn decode_count(bytes: &[u8]) -> Result<(u32, TableId), DecodeError> {
    let mut r = Reader(bytes);
    let request = (r.u32()?, TableId(r.u16()?));
    r.finish()?;
    Ok(request)
}

/// Encodes a COUNT response: `None` if refused, else the count.
pub fn encode_count_response(count: Option<u64>, out: &mut Vec<u8>) {
    match count {
        Some(count) => {
            Writer(out).u8(ScanStatus::Done as u8).u64(count);
        }
        None => {
            Writer(out).u8(ScanStatus::Refused as u8);
        }
    }
}

/// Decodes a COUNT response: `None` if the primary refused the request.
pub fn decode_count_response(bytes: &[u8]) -> Result<Option<u64>, DecodeError> {
    let mut r = Reader(bytes);
    let count = match r.u8()? {
        0 => Some(r.u64()?),
        1 => None,
        _ => return Err(DecodeError::Invalid),
    };
    r.finish()?;
    Ok(count)
}

/// Proptest strategies for the messages' fields, shared by the round-trip tests of every
/// module that encodes messages.
#[cfg(test)]
pub(crate) mod strategies {
    use super::*;
    use ferrotx_store::KEY_BYTES_MAX;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Any transaction id.
    pub(crate) fn tx() -> impl Strategy<Value = TxId> {
        (
            any::<u64>(),
            any::<u16>(),
            any::<u16>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(view, node, thread, incarnation, counter)| TxId {
                view: ViewId(view),
                node,
                thread,
                incarnation,
                counter,
            })
    }

    /// Any key the store accepts.
    pub(crate) fn key() -> impl Strategy<Value = Key> {
        vec(any::<u8>(), 0..=KEY_BYTES_MAX).prop_map(|b| Key::from_bytes(&b).expect("short"))
    }

    /// Any table.
    pub(crate) fn table() -> impl Strategy<Value = TableId> {
        any::<u16>().prop_map(TableId)
    }

    /// Small byte strings (values, records, notes).
    pub(crate) fn bytes() -> impl Strategy<Value = Vec<u8>> {
        vec(any::<u8>(), 0..40)
    }

    /// Any write.
    pub(crate) fn write() -> impl Strategy<Value = Write> {
        (
            any::<u32>(),
            table(),
            key(),
            any::<u64>(),
            proptest::option::of(bytes()),
        )
            .prop_map(|(partition, table, key, version, value)| Write {
                partition,
                table,
                key,
                version,
                value,
            })
    }

    /// Any object read.
    pub(crate) fn read_item() -> impl Strategy<Value = ReadItem> {
        (any::<u32>(), table(), key(), any::<u64>()).prop_map(|(partition, table, key, version)| {
            ReadItem {
                partition,
                table,
                key,
                version,
            }
        })
    }

    /// Any record.
    pub(crate) fn record() -> impl Strategy<Value = LockRecord> {
        (
            tx(),
            vec(any::<u32>(), 0..6),
            vec(write(), 0..6),
            any::<u64>(),
        )
            .prop_map(|(tx, partitions, writes, truncate_up_to)| LockRecord {
                tx,
                partitions,
                writes,
                truncate_up_to,
            })
    }

    /// Any READ status.
    pub(crate) fn read_status() -> impl Strategy<Value = ReadStatus> {
        prop_oneof![
            Just(ReadStatus::Present),
            Just(ReadStatus::Absent),
            Just(ReadStatus::Locked),
            Just(ReadStatus::Contended),
            Just(ReadStatus::Refused),
            Just(ReadStatus::Recovering),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn scan_and_count_messages_round_trip() {
        let mut buf = Vec::new();
        encode_scan(3, TableId(1), 77, 10, &mut buf);
        assert_eq!(
            decode_scan(&buf),
            Ok(ScanRequest {
                partition: 3,
                table: TableId(1),
                cursor: 77,
                count: 10
            })
        );
        assert_eq!(
            decode_scan(&buf[..buf.len() - 1]),
            Err(DecodeError::Truncated)
        );

        let objects = vec![
            (Key::from(1), b"one".to_vec()),
            (Key::from_bytes(b"k").unwrap(), Vec::new()),
        ];
        let mut buf = Vec::new();
        start_scan_response(&mut buf);
        assert_eq!(buf.len(), SCAN_RESPONSE_HEADER_BYTES);
        for (key, value) in &objects {
            push_scan_object(key, value, &mut buf);
        }
        let expected_len = SCAN_RESPONSE_HEADER_BYTES
            + objects
                .iter()
                .map(|(k, v)| scan_object_len(k, v))
                .sum::<usize>();
        assert_eq!(buf.len(), expected_len);
        finish_scan_response(99, 5, objects.len(), &mut buf);
        assert_eq!(
            decode_scan_response(&buf),
            Ok(Some(ScanPage {
                next_cursor: 99,
                visited: 5,
                objects
            }))
        );
        for len in 0..buf.len() {
            assert!(decode_scan_response(&buf[..len]).is_err(), "prefix {len}");
        }
        assert_eq!(decode_scan_response(&[1]), Ok(None));
        assert_eq!(decode_scan_response(&[2]), Err(DecodeError::Invalid));

        let mut buf = Vec::new();
        encode_count(4, TableId(2), &mut buf);
        assert_eq!(decode_count(&buf), Ok((4, TableId(2))));
        let mut buf = Vec::new();
        encode_count_response(Some(12), &mut buf);
        assert_eq!(decode_count_response(&buf), Ok(Some(12)));
        let mut buf = Vec::new();
        encode_count_response(None, &mut buf);
        assert_eq!(decode_count_response(&buf), Ok(None));
    }

    fn record() -> LockRecord {
        LockRecord {
            tx: TxId {
                view: ViewId(3),
                node: 1,
                thread: 2,
                incarnation: 5,
                counter: 99,
            },
            partitions: vec![4, 7],
            writes: vec![
                Write {
                    partition: 4,
                    table: TableId(1),
                    key: Key::from(5),
                    version: 8,
                    value: Some(b"v".to_vec()),
                },
                Write {
                    partition: 7,
                    table: TableId(2),
                    key: Key::from_bytes(b"k").unwrap(),
                    version: 0,
                    value: None,
                },
            ],
            truncate_up_to: 97,
        }
    }

    #[test]
    fn round_trips() {
        let mut buf = Vec::new();
        record().encode(&mut buf);
        assert_eq!(LockRecord::decode(&buf), Ok(record()));
        assert_eq!(
            LockRecord::encoded_len(record().partitions.len(), &record().writes),
            buf.len()
        );
        for len in 0..buf.len() {
            assert!(
                LockRecord::decode(&buf[..len]).is_err(),
                "prefix {len} accepted"
            );
        }
        // The view reads the same record in place, and refuses what decode refuses.
        let view = RecordView::parse(&buf).unwrap();
        assert_eq!(view.tx, record().tx);
        assert_eq!(view.truncate_up_to, 97);
        assert_eq!(view.partitions().collect::<Vec<_>>(), [4, 7]);
        assert_eq!(view.write_count(), 2);
        let writes: Vec<WriteRef<'_>> = view.writes().collect();
        for (seen, sent) in writes.iter().zip(&record().writes) {
            assert_eq!(
                (
                    seen.partition,
                    seen.table,
                    seen.key,
                    seen.version,
                    seen.value
                ),
                (
                    sent.partition,
                    sent.table,
                    sent.key,
                    sent.version,
                    sent.value.as_deref()
                )
            );
        }
        for len in 0..buf.len() {
            assert!(RecordView::parse(&buf[..len]).is_err(), "prefix {len}");
        }
        // A note follows the writes (its length, then its bytes); anything else after
        // them is refused.
        let plain = buf.clone();
        append_record_note(b"note", &mut buf);
        assert_eq!(LockRecord::decode(&buf), Ok(record()));
        assert_eq!(RecordView::parse(&buf).unwrap().note(), b"note");
        assert_eq!(RecordView::parse(&plain).unwrap().note(), b"");
        for len in plain.len() + 1..buf.len() {
            assert!(RecordView::parse(&buf[..len]).is_err(), "prefix {len}");
        }
        buf.push(0);
        assert_eq!(LockRecord::decode(&buf), Err(DecodeError::TrailingBytes));
        assert!(RecordView::parse(&buf).is_err());
        let mut buf = plain;
        buf.push(0);
        assert!(LockRecord::decode(&buf).is_err());
        assert!(RecordView::parse(&buf).is_err());

        let items = [ReadItem {
            partition: 1,
            table: TableId(1),
            key: Key::from(2),
            version: 3,
        }];
        let mut buf = Vec::new();
        encode_validate(&items, &mut buf);
        assert_eq!(decode_validate(&buf).unwrap(), items);

        let mut buf = Vec::new();
        encode_read_response(ReadStatus::Present, 4, b"val", &mut buf);
        assert_eq!(
            decode_read_response(&buf),
            Ok((ReadStatus::Present, 4, &b"val"[..]))
        );
    }

    proptest! {
        #[test]
        fn records_round_trip(record in strategies::record(), note in strategies::bytes()) {
            let mut buf = Vec::new();
            record.encode(&mut buf);
            prop_assert_eq!(
                LockRecord::encoded_len(record.partitions.len(), &record.writes),
                buf.len()
            );
            append_record_note(&note, &mut buf);
            prop_assert_eq!(LockRecord::decode(&buf), Ok(record.clone()));
            let view = RecordView::parse(&buf).unwrap();
            prop_assert_eq!(view.tx, record.tx);
            prop_assert_eq!(view.truncate_up_to, record.truncate_up_to);
            prop_assert_eq!(view.partitions().collect::<Vec<_>>(), record.partitions.clone());
            prop_assert_eq!(view.note(), &note[..]);
            for (seen, sent) in view.writes().zip(&record.writes) {
                prop_assert_eq!(
                    (seen.partition, seen.table, seen.key, seen.version, seen.value),
                    (sent.partition, sent.table, sent.key, sent.version, sent.value.as_deref())
                );
            }
            // The versions a primary locked at, written into the record in place.
            let versions: Vec<u8> = (0..record.writes.len() as u64)
                .flat_map(|v| (v * 7).to_le_bytes())
                .collect();
            set_record_versions(&mut buf, &versions).unwrap();
            let locked = LockRecord::decode(&buf).unwrap();
            for (i, write) in locked.writes.iter().enumerate() {
                prop_assert_eq!(write.version, i as u64 * 7);
            }
        }

        #[test]
        fn requests_and_answers_round_trip(
            items in proptest::collection::vec(strategies::read_item(), 0..6),
            (partition, table, key) in (any::<u32>(), strategies::table(), strategies::key()),
            (status, version, value) in (strategies::read_status(), any::<u64>(), strategies::bytes()),
            (tx, coordinator, mark) in (strategies::tx(), any::<(u16, u16, u64)>(), any::<u64>()),
            (cursor, count) in (any::<u64>(), any::<u32>()),
            objects in proptest::collection::vec((strategies::key(), strategies::bytes()), 0..6),
            counted in proptest::option::of(any::<u64>()),
        ) {
            let mut buf = Vec::new();
            encode_validate(&items, &mut buf);
            prop_assert_eq!(decode_validate(&buf), Ok(items));

            buf.clear();
            encode_read(partition, table, &key, &mut buf);
            prop_assert_eq!(decode_read(&buf), Ok((partition, table, key)));

            buf.clear();
            encode_read_response(status, version, &value, &mut buf);
            prop_assert_eq!(decode_read_response(&buf), Ok((status, version, &value[..])));

            buf.clear();
            encode_truncate(coordinator, mark, &mut buf);
            prop_assert_eq!(decode_truncate(&buf), Ok((coordinator, mark)));

            buf.clear();
            encode_tx(&tx, &mut buf);
            prop_assert_eq!(decode_tx(&buf), Ok(tx));

            buf.clear();
            encode_scan(partition, table, cursor, count, &mut buf);
            prop_assert_eq!(
                decode_scan(&buf),
                Ok(ScanRequest { partition, table, cursor, count })
            );

            buf.clear();
            start_scan_response(&mut buf);
            for (key, value) in &objects {
                push_scan_object(key, value, &mut buf);
            }
            finish_scan_response(cursor, count, objects.len(), &mut buf);
            prop_assert_eq!(
                decode_scan_response(&buf),
                Ok(Some(ScanPage { next_cursor: cursor, visited: count, objects }))
            );

            buf.clear();
            encode_count(partition, table, &mut buf);
            prop_assert_eq!(decode_count(&buf), Ok((partition, table)));

            buf.clear();
            encode_count_response(counted, &mut buf);
            prop_assert_eq!(decode_count_response(&buf), Ok(counted));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            // The view accepts exactly the records decode accepts.
            prop_assert_eq!(LockRecord::decode(&bytes).is_ok(), RecordView::parse(&bytes).is_ok());
            if let Ok(view) = RecordView::parse(&bytes) {
                prop_assert_eq!(view.writes().count(), view.write_count());
            }
            let _ = decode_validate(&bytes);
            let _ = decode_read(&bytes);
            let _ = decode_read_response(&bytes);
            let _ = decode_tx(&bytes);
            let _ = decode_scan(&bytes);
            let _ = decode_scan_response(&bytes);
            let _ = decode_count(&bytes);
            let _ = decode_count_response(&bytes);
        }
    }
}
