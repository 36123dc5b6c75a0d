//! Data recovery (FaRM 5.4): filling a new backup of a partition from its primary.
//!
//! A view may name, per partition, backups being filled (`View::filling`). From the
//! view that names it, a filling backup receives every commit of its partition as any
//! backup does (COMMIT-BACKUP, recovery's replicated records and decisions), so what it
//! lacks is only what was committed before. Its node copies that from the primary in the
//! background with FETCH requests: pages of objects in the order of the primary's index
//! (`Partition::copy_out`), each applied only if its version is newer than the copy's
//! (`Partition::apply`), so a commit that lands during the copy is never overwritten by
//! an older value. An object a transaction holds locked is not read: its key is fetched
//! again until it is free, since the transaction holding it may abort and leave the
//! value the copy still lacks. Once every table was copied and no key is left waiting,
//! the copy takes the primary's floors of each table, bucket by bucket (the versions
//! keys with no object read at, which cover the objects reclaimed there before the copy
//! saw them; reclaims after that go through the copy as a backup). Then the fill is
//! done; the node reports it to the CM, and a later view counts the backup
//! as a copy. docs/recovery.md, "Data recovery", argues why nothing is missed.
//!
//! A primary blocked by transaction-state recovery answers "not ready": its objects are
//! not final until the transactions that wrote them are decided. A fill restarts from
//! the beginning when its partition's primary changes (another index order).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ferrotx_store::{FLOOR_BUCKETS, Key, Partition, TableId};

use crate::messages::{DecodeError, Reader, Writer};

/// Most keys one FETCH names (the retries of locked keys) or answers.
pub const FETCH_KEYS_MAX: usize = 1024;

/// Bytes of objects after which a FETCH answer takes no more, whatever the request asks:
/// with one object of the largest value (1 MiB) and the locked keys, an answer stays
/// within the RPC layer's message limit (1 MiB and 64 KiB), which a handler's answer
/// must not pass.
pub const FETCH_RESPONSE_BYTES_MAX: usize = 32 << 10;

// The largest FETCH answer: its header, objects up to the budget or one object of the
// largest value (which an answer takes when it comes first), and every key of the page
// named as locked. It must fit one RPC message.
const _: () = {
    use ferrotx_store::{KEY_BYTES_MAX, VALUE_BYTES_MAX};
    let header = 1 + 8 + 4;
    let object_max = 1 + KEY_BYTES_MAX + 8 + 1 + 4 + VALUE_BYTES_MAX;
    let objects_max = if object_max > FETCH_RESPONSE_BYTES_MAX {
        object_max
    } else {
        FETCH_RESPONSE_BYTES_MAX
    };
    let locked_max = 4 + FETCH_KEYS_MAX * (1 + KEY_BYTES_MAX);
    assert!(header + objects_max + locked_max <= ferrotx_wire::MAX_MESSAGE_BYTES as usize);
};

/// How a node fills its new backups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefillOptions {
    /// Most objects one FETCH visits.
    pub objects_per_fetch: u32,
    /// Bytes of objects past which a FETCH's answer takes no more (it stops before the
    /// object that would pass them, unless that object comes first).
    pub bytes_per_fetch: u32,
    /// Time between two FETCHes of one worker thread: the pace that keeps foreground
    /// transactions going. A random part of it delays the first one.
    pub interval_ns: u64,
    /// After a FETCH, the wait is at least this many times as long as the FETCH took
    /// (its round trip, with the primary's work and queue, and applying its answer): a
    /// thread spends at most about `1 / (1 + pace)` of its time copying, and a loaded
    /// cluster, whose round trips grow, copies slower.
    pub pace: u64,
    /// The waits are divided by this for a partition left with one copy (its data is
    /// one failure away from being lost).
    pub last_copy_speedup: u64,
}

impl Default for RefillOptions {
    fn default() -> Self {
        Self {
            objects_per_fetch: 512,
            bytes_per_fetch: 32 << 10,
            interval_ns: 500_000,
            pace: 8,
            last_copy_speedup: 4,
        }
    }
}

/// One backup being filled on this node: shared by the node's threads and kept across
/// views while the backup stays filling.
#[derive(Debug)]
pub struct Fill {
    partition: u32,
    done: AtomicBool,
    objects: AtomicU64,
    bytes: AtomicU64,
    restarts: AtomicU64,
}

/// What a fill has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillProgress {
    /// The partition.
    pub partition: u32,
    /// Copied whole.
    pub done: bool,
    /// Objects applied from FETCH answers (including those already up to date).
    pub objects: u64,
    /// Bytes of their keys and values.
    pub bytes: u64,
    /// Times the copy started again from the beginning (a new primary).
    pub restarts: u64,
}

impl Fill {
    /// A fill of `partition`, not started.
    pub fn new(partition: u32) -> Self {
        Self {
            partition,
            done: AtomicBool::new(false),
            objects: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
        }
    }

    /// The partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// Whether the copy is complete.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Marks the copy complete: the fill's last step, once every object and the floors
    /// of every table were copied.
    pub fn set_done(&self) {
        self.done.store(true, Ordering::Release);
    }

    pub(crate) fn copied(&self, objects: u64, bytes: u64) {
        self.objects.fetch_add(objects, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Its progress.
    pub fn progress(&self) -> FillProgress {
        FillProgress {
            partition: self.partition,
            done: self.is_done(),
            objects: self.objects.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            restarts: self.restarts.load(Ordering::Relaxed),
        }
    }
}

/// What a FETCH asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchWhat {
    /// Objects of the table from a cursor (0 starts).
    Page {
        /// Where to start.
        cursor: u64,
        /// Most objects to visit.
        count: u32,
        /// Bytes after which to stop.
        bytes_max: u32,
    },
    /// These keys of the table (locked when last visited).
    Keys(Vec<Key>),
    /// The table's floors, one per bucket of key hashes (after its objects).
    Floors,
}

/// A FETCH request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchRequest {
    /// The partition.
    pub partition: u32,
    /// The table.
    pub table: TableId,
    /// What to read.
    pub what: FetchWhat,
}

/// How the primary answered a FETCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FetchStatus {
    /// The objects follow.
    Ok = 0,
    /// Blocked by transaction-state recovery: ask again later.
    NotReady = 1,
    /// Not the primary of the partition, or no such table.
    Refused = 2,
}

/// Encodes a FETCH request.
pub fn encode_fetch(request: &FetchRequest, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u32(request.partition).u16(request.table.0);
    match &request.what {
        FetchWhat::Page {
            cursor,
            count,
            bytes_max,
        } => {
            w.u8(0).u64(*cursor).u32(*count).u32(*bytes_max);
        }
        FetchWhat::Keys(keys) => {
            w.u8(1).u32(keys.len() as u32);
            for key in keys {
                w.key(key);
            }
        }
        FetchWhat::Floors => {
            w.u8(2);
        }
    }
}

/// Decodes a FETCH request.
pub fn decode_fetch(bytes: &[u8]) -> Result<FetchRequest, DecodeError> {
    let mut r = Reader(bytes);
    let partition = r.u32()?;
    let table = TableId(r.u16()?);
    let what = match r.u8()? {
        0 => FetchWhat::Page {
            cursor: r.u64()?,
            count: r.u32()?,
            bytes_max: r.u32()?,
        },
        1 => {
            let n = r.u32()? as usize;
            if n > FETCH_KEYS_MAX {
                return Err(DecodeError::Invalid);
            }
            let mut keys = Vec::with_capacity(n);
            for _ in 0..n {
                keys.push(r.key()?);
            }
            FetchWhat::Keys(keys)
        }
        2 => FetchWhat::Floors,
        _ => return Err(DecodeError::Invalid),
    };
    r.finish()?;
    Ok(FetchRequest {
        partition,
        table,
        what,
    })
}

/// Answers a FETCH from `partition` (this node's copy, if it is the primary, else
/// `None`), into `out`. `recovering`: the partition is blocked by recovery.
pub(crate) fn answer_fetch(
    request: &FetchRequest,
    partition: Option<&Partition>,
    recovering: bool,
    locked: &mut Vec<Key>,
    out: &mut Vec<u8>,
) {
    out.clear();
    if recovering {
        out.push(FetchStatus::NotReady as u8);
        return;
    }
    let Some(partition) = partition else {
        out.push(FetchStatus::Refused as u8);
        return;
    };
    // Status, next cursor and object count, filled in at the end.
    Writer(out).u8(FetchStatus::Ok as u8).u64(0).u32(0);
    let header = out.len();
    if request.what == FetchWhat::Floors {
        // Read after every object of the table was: they cover every object reclaimed
        // before, which the copy then lacks (crate::reclaim).
        let mut floors = Vec::with_capacity(FLOOR_BUCKETS);
        if partition.floors(request.table, &mut floors).is_err() {
            out.clear();
            out.push(FetchStatus::Refused as u8);
            return;
        }
        let mut w = Writer(out);
        w.u32(floors.len() as u32);
        for floor in floors {
            w.u64(floor);
        }
        return;
    }
    let mut objects = 0u32;
    locked.clear();
    let budget = match &request.what {
        FetchWhat::Page { bytes_max, .. } => (*bytes_max as usize).min(FETCH_RESPONSE_BYTES_MAX),
        FetchWhat::Keys(_) | FetchWhat::Floors => FETCH_RESPONSE_BYTES_MAX,
    };
    // Adds one object unless the answer holds some and this one would pass the budget.
    let push =
        |out: &mut Vec<u8>, objects: &mut u32, key: &Key, version: u64, value: Option<&[u8]>| {
            let len = 1 + key.as_bytes().len() + 8 + 1 + value.map_or(0, |v| 4 + v.len());
            if *objects > 0 && out.len() - header + len > budget {
                return false;
            }
            let mut w = Writer(out);
            w.key(key).u64(version);
            match value {
                Some(v) => w.u8(1).bytes(v),
                None => w.u8(0),
            };
            *objects += 1;
            true
        };
    let next = match &request.what {
        FetchWhat::Page { cursor, count, .. } => {
            let limit = (*count as usize).clamp(1, FETCH_KEYS_MAX);
            let visited = partition.copy_out(
                request.table,
                *cursor,
                limit,
                |key, version, value| push(out, &mut objects, key, version, value),
                |key| locked.push(*key),
            );
            match visited {
                Ok(next) => next,
                Err(_) => {
                    out.clear();
                    out.push(FetchStatus::Refused as u8);
                    return;
                }
            }
        }
        FetchWhat::Keys(keys) => {
            let mut value = Vec::new();
            for key in keys {
                match partition.read(request.table, key, &mut value) {
                    Ok(Ok(o)) => {
                        // Version 0: the key never had an object; nothing to copy. A key
                        // past the budget is answered as locked: asked for again later.
                        let value = o.present.then_some(&*value);
                        if !push(out, &mut objects, key, o.version, value) {
                            locked.push(*key);
                        }
                    }
                    Ok(Err(_)) => locked.push(*key),
                    Err(_) => {
                        out.clear();
                        out.push(FetchStatus::Refused as u8);
                        return;
                    }
                }
            }
            0
        }
        FetchWhat::Floors => unreachable!("answered above"),
    };
    out[1..9].copy_from_slice(&next.to_le_bytes());
    out[9..13].copy_from_slice(&objects.to_le_bytes());
    let mut w = Writer(out);
    w.u32(locked.len() as u32);
    for key in locked.iter() {
        w.key(key);
    }
}

/// A FETCH answer with objects: where to go on, and the objects and locked keys.
pub struct FetchPage<'a> {
    /// The cursor to go on from (0: the table was visited whole; always 0 for keys).
    pub next_cursor: u64,
    objects: u32,
    body: Reader<'a>,
}

/// One object of a FETCH answer.
#[derive(Debug, PartialEq, Eq)]
pub struct FetchedObject<'a> {
    /// The key.
    pub key: Key,
    /// Its version (0: it never had an object).
    pub version: u64,
    /// Its value (`None`: deleted, or never had one).
    pub value: Option<&'a [u8]>,
}

/// Decodes a FETCH answer: its status, and its page if the status is [`FetchStatus::Ok`].
pub fn decode_fetch_response(
    bytes: &[u8],
) -> Result<(FetchStatus, Option<FetchPage<'_>>), DecodeError> {
    let mut r = Reader(bytes);
    let status = match r.u8()? {
        0 => FetchStatus::Ok,
        1 => FetchStatus::NotReady,
        2 => FetchStatus::Refused,
        _ => return Err(DecodeError::Invalid),
    };
    if status != FetchStatus::Ok {
        r.finish()?;
        return Ok((status, None));
    }
    let next_cursor = r.u64()?;
    let objects = r.u32()?;
    Ok((
        status,
        Some(FetchPage {
            next_cursor,
            objects,
            body: r,
        }),
    ))
}

impl<'a> FetchPage<'a> {
    /// How many objects the page holds.
    pub fn objects(&self) -> u32 {
        self.objects
    }

    /// The floors of the answer to [`FetchWhat::Floors`], one per bucket.
    pub fn floors(mut self) -> Result<Box<[u64; FLOOR_BUCKETS]>, DecodeError> {
        let r = &mut self.body;
        if self.objects != 0 || r.u32()? as usize != FLOOR_BUCKETS {
            return Err(DecodeError::Invalid);
        }
        let mut floors = Box::new([0u64; FLOOR_BUCKETS]);
        for floor in floors.iter_mut() {
            *floor = r.u64()?;
        }
        r.finish()?;
        Ok(floors)
    }

    /// Gives `object` each object, then `locked` each locked key; fails on malformed
    /// bytes (what was given before stays given: applying a valid object is always safe).
    pub fn visit(
        mut self,
        mut object: impl FnMut(FetchedObject<'a>),
        mut locked: impl FnMut(Key),
    ) -> Result<(), DecodeError> {
        let r = &mut self.body;
        for _ in 0..self.objects {
            let key = r.key()?;
            let version = r.u64()?;
            let value = match r.u8()? {
                0 => None,
                1 => Some(r.bytes()?),
                _ => return Err(DecodeError::Invalid),
            };
            object(FetchedObject {
                key,
                version,
                value,
            });
        }
        let n = r.u32()? as usize;
        if n > FETCH_KEYS_MAX {
            return Err(DecodeError::Invalid);
        }
        for _ in 0..n {
            locked(r.key()?);
        }
        r.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::strategies;
    use ferrotx_store::{PartitionId, TableSpec};
    use proptest::prelude::*;

    const T: TableId = TableId(1);

    fn partition() -> Partition {
        Partition::new(PartitionId(3), &[TableSpec::fixed(1, "t", 8)])
    }

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        let requests = [
            FetchRequest {
                partition: 3,
                table: T,
                what: FetchWhat::Page {
                    cursor: 9,
                    count: 100,
                    bytes_max: 4096,
                },
            },
            FetchRequest {
                partition: 1,
                table: T,
                what: FetchWhat::Keys(vec![Key::from(1), Key::from(2)]),
            },
            FetchRequest {
                partition: 2,
                table: T,
                what: FetchWhat::Floors,
            },
        ];
        for request in requests {
            let mut buf = Vec::new();
            encode_fetch(&request, &mut buf);
            assert_eq!(decode_fetch(&buf), Ok(request.clone()));
            for cut in 0..buf.len() {
                assert!(decode_fetch(&buf[..cut]).is_err());
            }
        }
        assert!(decode_fetch(&[0, 0, 0, 0, 1, 0, 7]).is_err());
    }

    /// Every object that ever had a version comes out once, with its version and
    /// value, pages cut by count and bytes; a locked key is named for later.
    #[test]
    fn pages_copy_every_object_and_name_locked_keys() {
        let p = partition();
        for k in 0..100u64 {
            p.load(T, Key::from(k), &k.to_le_bytes()).unwrap();
        }
        // Key 7 deleted (version 2), key 8 locked by a transaction.
        p.lock(T, &Key::from(7), 1).unwrap().unwrap();
        p.install(T, &Key::from(7), None).unwrap();
        p.lock(T, &Key::from(8), 1).unwrap().unwrap();
        let (mut copy, mut locked, mut cursor, mut pages) = (Vec::new(), Vec::new(), 0, 0);
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        loop {
            let request = FetchRequest {
                partition: 3,
                table: T,
                what: FetchWhat::Page {
                    cursor,
                    count: 30,
                    bytes_max: 200,
                },
            };
            answer_fetch(&request, Some(&p), false, &mut scratch, &mut out);
            let (status, page) = decode_fetch_response(&out).unwrap();
            assert_eq!(status, FetchStatus::Ok);
            let page = page.unwrap();
            cursor = page.next_cursor;
            page.visit(
                |o| copy.push((o.key, o.version, o.value.map(<[u8]>::to_vec))),
                |k| locked.push(k),
            )
            .unwrap();
            pages += 1;
            if cursor == 0 {
                break;
            }
        }
        assert!(pages > 100 / 30, "bytes cut pages: {pages}");
        assert_eq!(copy.len(), 99);
        assert_eq!(locked, vec![Key::from(8)]);
        assert!(copy.contains(&(Key::from(7), 2, None)));
        assert!(copy.contains(&(Key::from(9), 1, Some(9u64.to_le_bytes().to_vec()))));
        // The locked key, once free, comes by name.
        p.unlock(T, &Key::from(8)).unwrap();
        let request = FetchRequest {
            partition: 3,
            table: T,
            what: FetchWhat::Keys(vec![Key::from(8), Key::from(1000)]),
        };
        answer_fetch(&request, Some(&p), false, &mut scratch, &mut out);
        let (_, page) = decode_fetch_response(&out).unwrap();
        let mut got = Vec::new();
        page.unwrap()
            .visit(|o| got.push((o.key, o.version)), |_| panic!("not locked"))
            .unwrap();
        assert_eq!(got, vec![(Key::from(8), 1), (Key::from(1000), 0)]);
    }

    /// The last step of a fill: the copy takes its primary's floors bucket by bucket, not
    /// their highest (a copy above its sibling copies' floors could, promoted first, read
    /// a key at a version a sibling promoted after it reads below).
    #[test]
    fn a_fill_takes_its_primarys_floors_bucket_by_bucket() {
        let p = partition();
        for k in 0..20u64 {
            let key = Key::from(k);
            p.load(T, key, &k.to_le_bytes()).unwrap();
            // Deleted at version 2 + k (k updates first), then reclaimed.
            for _ in 0..k {
                let version = p.lock_any(T, &key).unwrap().unwrap();
                assert!(version > 0);
                p.install(T, &key, Some(&k.to_le_bytes())).unwrap();
            }
            p.lock_any(T, &key).unwrap().unwrap();
            let tombstone = p.install(T, &key, None).unwrap();
            assert!(p.reclaim(T, &key, tombstone).unwrap());
        }
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        let request = FetchRequest {
            partition: 3,
            table: T,
            what: FetchWhat::Floors,
        };
        answer_fetch(&request, Some(&p), false, &mut scratch, &mut out);
        assert!(out.len() < 64 << 10, "within the message limit");
        let (status, page) = decode_fetch_response(&out).unwrap();
        assert_eq!(status, FetchStatus::Ok);
        let floors = page.unwrap().floors().unwrap();
        let copy = partition();
        copy.raise_floors_each(T, &floors).unwrap();
        let mut untouched = 0;
        for k in 0..5_000u64 {
            let key = Key::from(k);
            assert_eq!(copy.floor(T, &key), p.floor(T, &key), "key {k}");
            untouched += usize::from(copy.floor(T, &key) == Ok(0));
        }
        assert!(untouched > 4_000, "{untouched}: most buckets stay at 0");
        assert_eq!(copy.floor_max(T), Ok(21));
        // A cut or padded answer is refused, whole.
        for bad in [&out[..out.len() - 1], &[&out[..], &[0][..]].concat()[..]] {
            let (_, page) = decode_fetch_response(bad).unwrap();
            assert!(page.unwrap().floors().is_err());
        }
    }

    /// Large values: an answer holds one past the budget at most, never more than the
    /// RPC layer's message limit, whatever the request asks; the rest comes next time
    /// (a page's cursor stops before it; a named key comes back as locked).
    #[test]
    fn answers_stay_within_the_message_limit() {
        let p = Partition::new(PartitionId(3), &[TableSpec::variable(1, "t", 1 << 20)]);
        let big = vec![7u8; 700 << 10];
        for k in 0..3u64 {
            p.load(T, Key::from(k), &big).unwrap();
        }
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        let limit = ferrotx_wire::MAX_MESSAGE_BYTES as usize;
        let (mut cursor, mut got) = (0, 0);
        loop {
            let request = FetchRequest {
                partition: 3,
                table: T,
                what: FetchWhat::Page {
                    cursor,
                    count: 100,
                    bytes_max: u32::MAX,
                },
            };
            answer_fetch(&request, Some(&p), false, &mut scratch, &mut out);
            assert!(out.len() <= limit, "{} bytes", out.len());
            let page = decode_fetch_response(&out).unwrap().1.unwrap();
            cursor = page.next_cursor;
            page.visit(|_| got += 1, |_| panic!("nothing locked"))
                .unwrap();
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(got, 3);
        let request = FetchRequest {
            partition: 3,
            table: T,
            what: FetchWhat::Keys((0..3).map(Key::from).collect()),
        };
        answer_fetch(&request, Some(&p), false, &mut scratch, &mut out);
        assert!(out.len() <= limit, "{} bytes", out.len());
        let (mut answered, mut again) = (0, 0);
        decode_fetch_response(&out)
            .unwrap()
            .1
            .unwrap()
            .visit(|_| answered += 1, |_| again += 1)
            .unwrap();
        assert_eq!((answered, again), (1, 2));
    }

    #[test]
    fn a_recovering_or_missing_primary_says_so() {
        let p = partition();
        let request = FetchRequest {
            partition: 3,
            table: T,
            what: FetchWhat::Keys(vec![]),
        };
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        answer_fetch(&request, Some(&p), true, &mut scratch, &mut out);
        assert_eq!(
            decode_fetch_response(&out).unwrap().0,
            FetchStatus::NotReady
        );
        answer_fetch(&request, None, false, &mut scratch, &mut out);
        assert_eq!(decode_fetch_response(&out).unwrap().0, FetchStatus::Refused);
        let unknown = FetchRequest {
            table: TableId(9),
            what: FetchWhat::Page {
                cursor: 0,
                count: 10,
                bytes_max: 100,
            },
            ..request
        };
        answer_fetch(&unknown, Some(&p), false, &mut scratch, &mut out);
        assert_eq!(decode_fetch_response(&out).unwrap().0, FetchStatus::Refused);
    }

    fn what() -> impl Strategy<Value = FetchWhat> {
        prop_oneof![
            (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(cursor, count, bytes_max)| {
                FetchWhat::Page {
                    cursor,
                    count,
                    bytes_max,
                }
            }),
            proptest::collection::vec(strategies::key(), 0..8).prop_map(FetchWhat::Keys),
            Just(FetchWhat::Floors),
        ]
    }

    proptest! {
        #[test]
        fn any_request_round_trips(
            partition in any::<u32>(),
            table in strategies::table(),
            what in what(),
        ) {
            let request = FetchRequest { partition, table, what };
            let mut bytes = Vec::new();
            encode_fetch(&request, &mut bytes);
            prop_assert_eq!(decode_fetch(&bytes), Ok(request));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_fetch(&bytes);
            if let Ok((_, Some(page))) = decode_fetch_response(&bytes) {
                let _ = page.visit(|_| {}, |_| {});
            }
            if let Ok((_, Some(page))) = decode_fetch_response(&bytes) {
                let _ = page.floors();
            }
        }
    }
}
