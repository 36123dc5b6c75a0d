//! A partition: one hash index per table, shared by a node's worker threads.

use crossbeam_epoch::Guard;

use crate::epoch::Epoch;
use crate::error::{LockError, ReadError, StoreError};
use crate::header::VERSION_MAX;
use crate::index::Index;
use crate::key::Key;
use crate::object::{ObjectRef, ReadOutcome};
use crate::table::{TableId, TableSpec};

/// A partition's number within the cluster's partition map.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct PartitionId(pub u32);

/// The object of `key`, inserting an absent placeholder if there is none: at `version`,
/// or at the key's floor for `None` (a primary's, whose readers saw the key absent at
/// its floor).
fn object_or_absent<'g>(
    index: &'g Index,
    key: &Key,
    version: Option<u64>,
    guard: &'g Guard,
) -> ObjectRef<'g> {
    match index.get(key, guard) {
        Some(object) => object,
        None => match index.insert(*key, version, None, guard) {
            Ok(object) | Err(object) => object,
        },
    }
}

/// Checks a version that came from elsewhere (a backup's apply) before any header holds
/// it.
fn check_version(version: u64) -> Result<(), StoreError> {
    if version > VERSION_MAX {
        return Err(StoreError::VersionTooLarge {
            version,
            max: VERSION_MAX,
        });
    }
    Ok(())
}

/// Lookups of a key with no object, while reclaims keep raising its floor, before a read
/// reports [`ReadError::Contended`].
const ABSENT_READ_ATTEMPTS: usize = 64;

fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// A finaliser (MurmurHash3's), so that sums of hashes do not cancel in patterns.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// One partition of every table.
pub struct Partition {
    id: PartitionId,
    tables: Vec<(TableSpec, Index)>,
}

impl Partition {
    /// An empty partition of the tables of `schema`, in the process's epoch.
    pub fn new(id: PartitionId, schema: &[TableSpec]) -> Self {
        Self::with_epoch(id, schema, &Epoch::process())
    }

    /// An empty partition of the tables of `schema`, whose lookups pin `epoch` (a
    /// simulation's own, see [`Epoch`]).
    pub fn with_epoch(id: PartitionId, schema: &[TableSpec], epoch: &Epoch) -> Self {
        let tables = schema
            .iter()
            .map(|spec| {
                let index = Index::new(u64::from(id.0), spec.value_size, epoch.clone());
                (spec.clone(), index)
            })
            .collect();
        Self { id, tables }
    }

    /// Its id.
    pub fn id(&self) -> PartitionId {
        self.id
    }

    fn table(&self, table: TableId) -> Result<&(TableSpec, Index), StoreError> {
        self.tables
            .iter()
            .find(|(spec, _)| spec.id == table)
            .ok_or(StoreError::UnknownTable(table))
    }

    /// Lock-free read of `key` into `out`. A key with no object reads as absent at its
    /// floor: 0 until an object of its bucket of key hashes is reclaimed, then at least
    /// the version of every such object reclaimed (so a key's versions never go back).
    pub fn read(
        &self,
        table: TableId,
        key: &Key,
        out: &mut Vec<u8>,
    ) -> Result<Result<ReadOutcome, ReadError>, StoreError> {
        let (_, index) = self.table(table)?;
        let guard = index.pin();
        let hash = index.hash(key);
        // A key with an object (the common case) needs no floor.
        if let Some(object) = index.get_hashed(hash, key, &guard) {
            return Ok(object.read(out));
        }
        for _ in 0..ABSENT_READ_ATTEMPTS {
            // The floor before and after the lookup: with the floor after alone, a key
            // made just after the lookup (at the floor then) and a reclaim raising the
            // floor before the second load would read above the key's first version;
            // with the floor before alone, a key reclaimed between the two would read
            // below its last. Equal, neither happened.
            let before = index.floor(hash);
            match index.get_hashed(hash, key, &guard) {
                Some(object) => return Ok(object.read(out)),
                None if index.floor(hash) == before => {
                    out.clear();
                    return Ok(Ok(ReadOutcome {
                        version: before,
                        present: false,
                    }));
                }
                None => {}
            }
        }
        Ok(Err(ReadError::Contended))
    }

    /// True if `key` is unlocked at `version` (a key with no object: at its floor).
    pub fn validate(&self, table: TableId, key: &Key, version: u64) -> Result<bool, StoreError> {
        let (_, index) = self.table(table)?;
        let guard = index.pin();
        let hash = index.hash(key);
        if let Some(object) = index.get_hashed(hash, key, &guard) {
            return Ok(object.validate(version));
        }
        let before = index.floor(hash);
        Ok(match index.get_hashed(hash, key, &guard) {
            Some(object) => object.validate(version),
            // As a read (see `read`): a floor that moved during the lookup fails it.
            None => version == before && index.floor(hash) == before,
        })
    }

    /// Locks `key` at `version`, creating its placeholder if the key has no object (for
    /// an insert, at the version it was read absent at: its floor).
    pub fn lock(
        &self,
        table: TableId,
        key: &Key,
        version: u64,
    ) -> Result<Result<(), LockError>, StoreError> {
        let (_, index) = self.table(table)?;
        let guard = index.pin();
        let hash = index.hash(key);
        let object = match index.get_hashed(hash, key, &guard) {
            Some(object) => object,
            None if version == index.floor(hash) => object_or_absent(index, key, None, &guard),
            None => {
                return Ok(Err(LockError::VersionChanged {
                    current: index.floor(hash),
                }));
            }
        };
        Ok(object.try_lock(version))
    }

    /// Locks `key` at whatever version it has (creating its placeholder, at its floor, if
    /// it has no object) and returns that version: for a write that did not
    /// read the object.
    pub fn lock_any(
        &self,
        table: TableId,
        key: &Key,
    ) -> Result<Result<u64, LockError>, StoreError> {
        let (spec, index) = self.table(table)?;
        spec.check_key(key)?;
        let guard = index.pin();
        Ok(object_or_absent(index, key, None, &guard).try_lock_any())
    }

    /// Whether this partition has `table`.
    pub fn has_table(&self, table: TableId) -> bool {
        self.table(table).is_ok()
    }

    /// Checks that `value` fits `table`, without changing anything: a transaction checks
    /// its writes before it starts to commit.
    pub fn check_value(&self, table: TableId, value: &[u8]) -> Result<(), StoreError> {
        self.table(table)?.0.check_value(value)
    }

    /// Installs `value` (`None`: deletes) in the locked object of `key` and unlocks it;
    /// returns the new version. Panics if the key is not locked: only the lock holder may
    /// install.
    pub fn install(
        &self,
        table: TableId,
        key: &Key,
        value: Option<&[u8]>,
    ) -> Result<u64, StoreError> {
        let (spec, index) = self.table(table)?;
        if let Some(value) = value {
            spec.check_value(value)?;
        }
        if value.is_none() {
            index.note_tombstone();
        }
        let guard = index.pin();
        let object = index
            .get(key, &guard)
            .expect("install into a key that was never locked");
        Ok(object.install(value))
    }

    /// Unlocks the locked `key` without a change. Panics if it is not locked.
    pub fn unlock(&self, table: TableId, key: &Key) -> Result<(), StoreError> {
        let (_, index) = self.table(table)?;
        let guard = index.pin();
        index
            .get(key, &guard)
            .expect("unlock of a key that was never locked")
            .unlock();
        Ok(())
    }

    /// Brings this (backup) copy of `key` to `version` with `value` (`None`: deleted)
    /// unless it is there already; see `Object::apply`. Returns true if it changed.
    pub fn apply(
        &self,
        table: TableId,
        key: &Key,
        version: u64,
        value: Option<&[u8]>,
    ) -> Result<bool, StoreError> {
        let (spec, index) = self.table(table)?;
        check_version(version)?;
        if let Some(value) = value {
            spec.check_value(value)?;
        }
        // At version 0, not the floor: a backup applies its primary's versions, and a
        // new key's first one may be below this copy's floor for it (see
        // `Partition::reclaim`).
        if value.is_none() {
            index.note_tombstone();
        }
        let guard = index.pin();
        Ok(object_or_absent(index, key, Some(0), &guard).apply(version, value))
    }

    /// [`Partition::apply`] that leaves a locked object alone (`Ok(None)`): for a copy
    /// promoted to primary, whose objects transactions lock.
    pub fn apply_unless_locked(
        &self,
        table: TableId,
        key: &Key,
        version: u64,
        value: Option<&[u8]>,
    ) -> Result<Option<bool>, StoreError> {
        let (spec, index) = self.table(table)?;
        check_version(version)?;
        if let Some(value) = value {
            spec.check_value(value)?;
        }
        if value.is_none() {
            index.note_tombstone();
        }
        let guard = index.pin();
        Ok(object_or_absent(index, key, Some(0), &guard).apply_unless_locked(version, value))
    }

    /// Stores `value` at version 1 if `key` has no object: for loading data before any
    /// transaction runs. Returns false (and changes nothing) if the key has an object.
    pub fn load(&self, table: TableId, key: Key, value: &[u8]) -> Result<bool, StoreError> {
        let (spec, index) = self.table(table)?;
        spec.check_key(&key)?;
        spec.check_value(value)?;
        let guard = index.pin();
        Ok(index.insert(key, Some(1), Some(value), &guard).is_ok())
    }

    /// A digest of every present object of `table` (key, version, value), the same for
    /// two copies holding the same objects whatever the order they were inserted in
    /// (a sum of per-object hashes). Objects that never existed or were deleted are left
    /// out, so a backup that never saw an aborted insert's placeholder agrees with its
    /// primary. Walks the whole table, and reads each object as a reader would: for
    /// checks once the cluster is quiet, not the hot path. Locked objects count as
    /// `u64::MAX` (a quiet copy has none).
    pub fn digest(&self, table: TableId) -> Result<(u64, usize), StoreError> {
        let (_, index) = self.table(table)?;
        let mut value = Vec::new();
        let (mut sum, mut count) = (0u64, 0);
        index.scan(0, usize::MAX, |object| {
            if object.header().dead() {
                return true;
            }
            let hash = match object.read(&mut value) {
                Ok(outcome) if !outcome.present => return true,
                Ok(outcome) => {
                    let mut h = fnv(0xcbf2_9ce4_8422_2325, object.key().as_bytes());
                    h = fnv(h, &outcome.version.to_le_bytes());
                    fnv(h, &value)
                }
                Err(_) => u64::MAX,
            };
            sum = sum.wrapping_add(mix(hash));
            count += 1;
            true
        });
        Ok((sum, count))
    }

    /// Number of keys of `table` whose object exists (not absent, not deleted). Walks
    /// the whole table: for statistics and tests, not the hot path.
    pub fn count_present(&self, table: TableId) -> Result<usize, StoreError> {
        let (_, index) = self.table(table)?;
        let mut count = 0;
        index.scan(0, usize::MAX, |object| {
            let word = object.header();
            count += usize::from(word.allocated() && !word.dead());
            true
        });
        Ok(count)
    }

    /// Number of objects `table` holds: one per key that has one (present, or deleted
    /// and not reclaimed yet). Takes the table index's lock once: for statistics.
    pub fn objects(&self, table: TableId) -> Result<usize, StoreError> {
        let (_, index) = self.table(table)?;
        Ok(index.len())
    }

    /// Bytes the objects of `table` and its index take (records and slots, as
    /// allocated; not what the allocator keeps around them). Takes the table index's
    /// lock once: for statistics and the memory limit.
    pub fn bytes(&self, table: TableId) -> Result<usize, StoreError> {
        let (_, index) = self.table(table)?;
        Ok(index.bytes())
    }

    /// Bytes the partition uses: its live objects' records, its tables of slots, and the
    /// values kept out of line (not the records reclaimed and waiting for new keys, nor
    /// what the allocator keeps around them). A few atomic loads per table, no lock: for
    /// the memory limit ([`crate::Memory`]).
    pub fn used_bytes(&self) -> usize {
        self.tables
            .iter()
            .map(|(_, index)| index.used_bytes())
            .sum()
    }

    /// Moves on index growths still under way by up to `slots` slots per table, so that
    /// their previous tables are let go without waiting for inserts (which a node past its
    /// memory limit refuses). Cheap when none is under way: for a periodic task.
    pub fn settle(&self, slots: usize) {
        for (_, index) in &self.tables {
            index.settle(slots);
        }
    }

    /// True if writing `value` (`None`: deleting) to `key` would make the store larger:
    /// a value for a key with no object or a deleted one, or one larger than the room
    /// the object has for it. A node past its memory limit refuses those.
    pub fn grows(
        &self,
        table: TableId,
        key: &Key,
        value: Option<&[u8]>,
    ) -> Result<bool, StoreError> {
        let (_, index) = self.table(table)?;
        let Some(value) = value else {
            return Ok(false);
        };
        let guard = index.pin();
        Ok(match index.get(key, &guard) {
            Some(object) => !object.header().allocated() || !object.has_room(value.len()),
            None => true,
        })
    }

    /// The version `key` reads at in `table` while it has no object (see
    /// [`Partition::read`]).
    pub fn floor(&self, table: TableId, key: &Key) -> Result<u64, StoreError> {
        let index = &self.table(table)?.1;
        Ok(index.floor(index.hash(key)))
    }

    /// The highest version any key of `table` with no object reads at: at least the
    /// version of every object of it reclaimed so far.
    pub fn floor_max(&self, table: TableId) -> Result<u64, StoreError> {
        Ok(self.table(table)?.1.floor_max())
    }

    /// Raises `key`'s floor in `table` to at least `version`: a backup does before its
    /// primary reclaims the key's object at that version, so that promoted, it never
    /// reads the key at a lower version than its primary did.
    pub fn raise_floor(&self, table: TableId, key: &Key, version: u64) -> Result<(), StoreError> {
        check_version(version)?;
        self.table(table)?.1.raise_floor(key, version);
        Ok(())
    }

    /// Appends `table`'s floors, one per bucket of key hashes ([`crate::FLOOR_BUCKETS`]),
    /// in bucket order, to `out`: what a copy being filled takes from its primary.
    pub fn floors(&self, table: TableId, out: &mut Vec<u64>) -> Result<(), StoreError> {
        self.table(table)?.1.floors(out);
        Ok(())
    }

    /// Raises each of `table`'s floors to at least the same bucket's in `floors` (from
    /// [`Partition::floors`] of another copy of this partition, whose keys hash alike):
    /// a copy being filled, to its primary's, bucket by bucket. Exactly, not to their
    /// highest: a copy whose floors pass a sibling copy's could, once promoted, read
    /// keys at versions the sibling, promoted after it, would then read below.
    pub fn raise_floors_each(
        &self,
        table: TableId,
        floors: &[u64; crate::FLOOR_BUCKETS],
    ) -> Result<(), StoreError> {
        let index = &self.table(table)?.1;
        for &version in floors {
            check_version(version)?;
        }
        index.raise_floors(floors);
        Ok(())
    }

    /// Frees `key`'s object if it is an unlocked absent or deleted object at `version`
    /// (its record is made again for another key once no reader can still see it), and
    /// raises its floor to `version`; returns whether it did. Only once no older write
    /// of the key can still be applied to this copy: the caller's protocol makes sure of
    /// that (a backup applies writes in any order, by version, and a key with no object
    /// takes any version).
    pub fn reclaim(&self, table: TableId, key: &Key, version: u64) -> Result<bool, StoreError> {
        let (_, index) = self.table(table)?;
        Ok(index.reclaim(key, version))
    }

    /// Visits up to `count` records of `table` from `cursor` (0 starts) and pushes the
    /// key and version of each unlocked absent or deleted object onto `out`: what
    /// [`Partition::reclaim`] may free. Returns the cursor to go on from, 0 once every
    /// record was visited. Holds the table index's mutex meanwhile. A walk (cursor 0)
    /// starts only if a delete, an applied delete or an absent placeholder came since
    /// the last one started; otherwise it visits nothing and returns 0.
    pub fn tombstones(
        &self,
        table: TableId,
        cursor: u64,
        count: usize,
        out: &mut Vec<(Key, u64)>,
    ) -> Result<u64, StoreError> {
        let (_, index) = self.table(table)?;
        // A walk starts only where some may have appeared since the last one started
        // (a delete or an absent placeholder since sets the mark again).
        if cursor == 0 && !index.take_tombstones_maybe() {
            return Ok(0);
        }
        let start = usize::try_from(cursor.saturating_sub(1)).unwrap_or(usize::MAX);
        let next = index.scan(start, count.max(1), |object| {
            let word = object.header();
            if !word.allocated() && !word.locked() && !word.dead() {
                out.push((object.key(), word.version()));
            }
            true
        });
        Ok(if next >= index.records() {
            0
        } else {
            next as u64 + 1
        })
    }

    /// Marks `table` as holding absent or deleted objects, so that the next walk of
    /// [`Partition::tombstones`] from 0 visits it: for a reclaimer that left some behind.
    pub fn mark_tombstones(&self, table: TableId) -> Result<(), StoreError> {
        self.table(table)?.1.note_tombstone();
        Ok(())
    }

    /// The tables of this partition, in schema order.
    pub fn tables(&self) -> impl Iterator<Item = TableId> + '_ {
        self.tables.iter().map(|(spec, _)| spec.id)
    }

    /// Copies objects of `table` out for a new backup (data recovery, FaRM 5.4): visits
    /// keys from `cursor` (0 starts) in the order of [`Partition::scan`] and gives
    /// `object` each one that ever had a version, with its value (`None`: deleted), and
    /// `locked` each one a transaction holds (its value cannot be read now: copy it
    /// later). Stops after `count` keys, or at an object `object` does not take (returns
    /// false: the caller's byte budget), which the next call then starts with. Returns
    /// the cursor to go on from, 0 once every key was visited.
    pub fn copy_out(
        &self,
        table: TableId,
        cursor: u64,
        count: usize,
        mut object: impl FnMut(&Key, u64, Option<&[u8]>) -> bool,
        mut locked: impl FnMut(&Key),
    ) -> Result<u64, StoreError> {
        let (_, index) = self.table(table)?;
        let start = usize::try_from(cursor.saturating_sub(1)).unwrap_or(usize::MAX);
        let mut value = Vec::new();
        let next = index.scan(start, count.max(1), |record| {
            match record.read(&mut value) {
                _ if record.header().dead() => true,
                Ok(outcome) if outcome.version == 0 => true,
                Ok(outcome) => object(
                    &record.key(),
                    outcome.version,
                    outcome.present.then_some(&*value),
                ),
                Err(_) => {
                    locked(&record.key());
                    true
                }
            }
        });
        Ok(if next >= index.records() {
            0
        } else {
            next as u64 + 1
        })
    }

    /// Visits up to `count` keys of `table` from `cursor` (0 starts) and pushes those
    /// whose object exists onto `out` with their values; returns the cursor to continue
    /// from, 0 once every key was visited.
    ///
    /// Keys are visited in the order they first had an object, so every key present for
    /// the whole scan is visited exactly once however the table grows meanwhile; keys
    /// inserted during the scan may or may not be. A locked object (a transaction is
    /// writing it) cannot be read, so the batch ends before it and the next call starts
    /// there: a call may return no key and a cursor that does not advance; call again a
    /// little later. (A cursor is the number of the next key to visit plus one, so that
    /// 0 can mean both "start" and "done", as in Redis.) Each value is read like a
    /// lock-free read, not as one snapshot of the table: for Redis's SCAN and KEYS and for
    /// statistics, not for transactions.
    pub fn scan(
        &self,
        table: TableId,
        cursor: u64,
        count: usize,
        out: &mut Vec<(Key, Vec<u8>)>,
    ) -> Result<u64, StoreError> {
        let (_, index) = self.table(table)?;
        let start = usize::try_from(cursor.saturating_sub(1)).unwrap_or(usize::MAX);
        let mut value = Vec::new();
        let next = index.scan(start, count.max(1), |object| {
            match object.read(&mut value) {
                _ if object.header().dead() => true,
                Ok(outcome) => {
                    if outcome.present {
                        out.push((object.key(), value.clone()));
                    }
                    true
                }
                Err(_) => false,
            }
        });
        Ok(if next >= index.records() {
            0
        } else {
            next as u64 + 1
        })
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    #[test]
    fn a_blind_lock_takes_the_current_version() {
        let p = partition();
        p.load(ACCOUNTS, Key::from(1), &1u64.to_le_bytes()).unwrap();
        assert_eq!(p.lock_any(ACCOUNTS, &Key::from(1)).unwrap(), Ok(1));
        assert_eq!(
            p.lock_any(ACCOUNTS, &Key::from(1)).unwrap(),
            Err(LockError::Locked)
        );
        p.install(ACCOUNTS, &Key::from(1), Some(&2u64.to_le_bytes()))
            .unwrap();
        // An absent key is locked at version 0, for an insert.
        assert_eq!(p.lock_any(ACCOUNTS, &Key::from(9)).unwrap(), Ok(0));
        p.install(ACCOUNTS, &Key::from(9), Some(&9u64.to_le_bytes()))
            .unwrap();
        let mut out = Vec::new();
        let read = p.read(ACCOUNTS, &Key::from(9), &mut out).unwrap().unwrap();
        assert_eq!((read.version, read.present), (1, true));
        assert_eq!(
            p.lock_any(TableId(7), &Key::from(1)),
            Err(StoreError::UnknownTable(TableId(7)))
        );
    }

    #[test]
    fn reclaiming_a_key_moves_no_other_absent_keys_version() {
        // Reads, validations and insert locks of keys with no object, at the version
        // they were read absent at, while a reclaimer frees other keys' tombstones: a
        // floor per table failed every one of them (and Redis's WATCH of a missing key).
        let p = partition();
        let mut out = Vec::new();
        let absent: Vec<Key> = (1000..1100u64).map(Key::from).collect();
        let read: Vec<u64> = absent
            .iter()
            .map(|k| p.read(ACCOUNTS, k, &mut out).unwrap().unwrap().version)
            .collect();
        for i in 0..50u64 {
            let key = Key::from(i);
            p.lock(ACCOUNTS, &key, 0).unwrap().unwrap();
            p.install(ACCOUNTS, &key, Some(&i.to_le_bytes())).unwrap();
            p.lock(ACCOUNTS, &key, 1).unwrap().unwrap();
            assert_eq!(p.install(ACCOUNTS, &key, None), Ok(2));
            assert_eq!(p.reclaim(ACCOUNTS, &key, 2), Ok(true));
            // The reclaimed key itself reads at its tombstone's version: never back.
            let again = p.read(ACCOUNTS, &key, &mut out).unwrap().unwrap();
            assert_eq!((again.version, again.present), (2, false));
        }
        let bucket = |k: &Key| p.tables[0].1.hash(k) as usize % crate::index::FLOOR_BUCKETS;
        let reclaimed: Vec<usize> = (0..50u64).map(|i| bucket(&Key::from(i))).collect();
        let mut unmoved = 0;
        for (key, &version) in absent.iter().zip(&read) {
            let shares = reclaimed.contains(&bucket(key));
            assert_eq!(p.validate(ACCOUNTS, key, version), Ok(!shares));
            if !shares {
                unmoved += 1;
                p.lock(ACCOUNTS, key, version).unwrap().unwrap();
                p.install(ACCOUNTS, key, Some(&[1; 8])).unwrap();
            }
        }
        assert!(unmoved >= 90, "{unmoved} of 100 keys kept their version");
    }

    #[test]
    fn digests_agree_whatever_the_order_and_skip_absent_keys() {
        let (a, b) = (partition(), partition());
        for i in 0..100u64 {
            a.load(ACCOUNTS, Key::from(i), &i.to_le_bytes()).unwrap();
            b.load(ACCOUNTS, Key::from(99 - i), &(99 - i).to_le_bytes())
                .unwrap();
        }
        // A placeholder locked for an insert, then unlocked (an aborted insert).
        b.lock(ACCOUNTS, &Key::from(500), 0).unwrap().unwrap();
        b.unlock(ACCOUNTS, &Key::from(500)).unwrap();
        assert_eq!(a.digest(ACCOUNTS).unwrap(), b.digest(ACCOUNTS).unwrap());
        assert_eq!(a.digest(ACCOUNTS).unwrap().1, 100);
        // One version or one byte apart: different.
        b.lock(ACCOUNTS, &Key::from(7), 1).unwrap().unwrap();
        b.install(ACCOUNTS, &Key::from(7), Some(&7u64.to_le_bytes()))
            .unwrap();
        assert_ne!(a.digest(ACCOUNTS).unwrap(), b.digest(ACCOUNTS).unwrap());
    }

    fn partition() -> Partition {
        Partition::new(
            PartitionId(3),
            &[
                TableSpec::fixed(1, "accounts", 8),
                TableSpec::variable(2, "blobs", 1 << 20),
            ],
        )
    }

    const ACCOUNTS: TableId = TableId(1);
    const BLOBS: TableId = TableId(2);

    #[test]
    fn scans_visit_present_keys_once_and_wait_at_locked_ones() {
        let p = partition();
        for i in 0..100u64 {
            assert_eq!(p.load(ACCOUNTS, Key::from(i), &i.to_le_bytes()), Ok(true));
        }
        // Deleted (key 7) and never-written placeholders (key 1000) are not listed.
        p.lock(ACCOUNTS, &Key::from(7), 1).unwrap().unwrap();
        p.install(ACCOUNTS, &Key::from(7), None).unwrap();
        p.lock(ACCOUNTS, &Key::from(1000), 0).unwrap().unwrap();
        p.unlock(ACCOUNTS, &Key::from(1000)).unwrap();
        // A locked object ends a batch before it until it is unlocked.
        p.lock(ACCOUNTS, &Key::from(50), 1).unwrap().unwrap();
        let mut out = Vec::new();
        let mut cursor = 0;
        let mut stalls = 0;
        loop {
            let before = out.len();
            let next = p.scan(ACCOUNTS, cursor, 16, &mut out).unwrap();
            if next == cursor && out.len() == before {
                stalls += 1;
                p.unlock(ACCOUNTS, &Key::from(50)).unwrap();
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(stalls, 1);
        let keys: Vec<Key> = out.iter().map(|(k, _)| *k).collect();
        let expected: Vec<Key> = (0..100u64).filter(|&i| i != 7).map(Key::from).collect();
        assert_eq!(keys, expected);
        assert!(
            out.iter().all(|(k, v)| Key::from(u64::from_le_bytes(
                v.as_slice().try_into().unwrap()
            )) == *k)
        );
        assert_eq!(p.count_present(ACCOUNTS), Ok(99));
        // Objects: the deleted key and the placeholder keep theirs.
        assert_eq!(p.objects(ACCOUNTS), Ok(101));
        assert_eq!(
            p.objects(TableId(9)),
            Err(StoreError::UnknownTable(TableId(9)))
        );
        assert_eq!(
            p.scan(TableId(9), 0, 1, &mut out),
            Err(StoreError::UnknownTable(TableId(9)))
        );
    }

    #[test]
    fn insert_update_delete_through_locks() {
        let p = partition();
        let key = Key::from(42);
        let mut out = Vec::new();
        assert_eq!(
            p.read(ACCOUNTS, &key, &mut out),
            Ok(Ok(ReadOutcome {
                version: 0,
                present: false
            }))
        );
        assert_eq!(p.validate(ACCOUNTS, &key, 0), Ok(true));
        // Insert: lock at version 0.
        assert_eq!(p.lock(ACCOUNTS, &key, 0), Ok(Ok(())));
        assert_eq!(p.validate(ACCOUNTS, &key, 0), Ok(false));
        assert_eq!(
            p.install(ACCOUNTS, &key, Some(&100u64.to_le_bytes())),
            Ok(1)
        );
        assert_eq!(
            p.read(ACCOUNTS, &key, &mut out),
            Ok(Ok(ReadOutcome {
                version: 1,
                present: true
            }))
        );
        assert_eq!(out, 100u64.to_le_bytes());
        // A lock at a stale version fails and changes nothing.
        assert_eq!(
            p.lock(ACCOUNTS, &key, 0),
            Ok(Err(LockError::VersionChanged { current: 1 }))
        );
        // Delete.
        assert_eq!(p.lock(ACCOUNTS, &key, 1), Ok(Ok(())));
        assert_eq!(p.install(ACCOUNTS, &key, None), Ok(2));
        assert_eq!(
            p.read(ACCOUNTS, &key, &mut out),
            Ok(Ok(ReadOutcome {
                version: 2,
                present: false
            }))
        );
        assert_eq!(p.count_present(ACCOUNTS), Ok(0));
        // A lock of a key with no object at a version other than 0 fails.
        assert_eq!(
            p.lock(ACCOUNTS, &Key::from(7), 3),
            Ok(Err(LockError::VersionChanged { current: 0 }))
        );
    }

    #[test]
    fn bad_input_is_an_error_and_changes_nothing() {
        let p = partition();
        let key = Key::from(1);
        assert!(p.load(ACCOUNTS, key, &5u64.to_le_bytes()).unwrap());
        assert!(!p.load(ACCOUNTS, key, &6u64.to_le_bytes()).unwrap());
        assert_eq!(
            p.read(TableId(9), &key, &mut Vec::new()),
            Err(StoreError::UnknownTable(TableId(9)))
        );
        assert_eq!(p.lock(ACCOUNTS, &key, 1), Ok(Ok(())));
        assert_eq!(
            p.install(ACCOUNTS, &key, Some(b"short")),
            Err(StoreError::WrongValueSize {
                len: 5,
                expected: 8
            })
        );
        // Still locked at version 1 with the old value: the caller aborts.
        p.unlock(ACCOUNTS, &key).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            p.read(ACCOUNTS, &key, &mut out),
            Ok(Ok(ReadOutcome {
                version: 1,
                present: true
            }))
        );
        assert_eq!(out, 5u64.to_le_bytes());
        assert_eq!(
            p.check_value(BLOBS, &vec![0; (1 << 20) + 1]),
            Err(StoreError::ValueTooLarge {
                len: (1 << 20) + 1,
                max: 1 << 20
            })
        );
        assert_eq!(p.check_value(BLOBS, &vec![0; 1 << 20]), Ok(()));
    }

    #[test]
    fn variable_values_grow_and_shrink() {
        let p = partition();
        let key = Key::from_bytes(b"blob").unwrap();
        let mut out = Vec::new();
        for (version, len) in [(1, 10usize), (2, 100_000), (3, 3), (4, 1 << 20)] {
            p.lock(BLOBS, &key, version - 1).unwrap().unwrap();
            let value: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            assert_eq!(p.install(BLOBS, &key, Some(&value)), Ok(version));
            p.read(BLOBS, &key, &mut out).unwrap().unwrap();
            assert_eq!(out, value);
        }
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod apply_tests {
    use super::*;

    #[test]
    fn backups_apply_the_newest_version_whatever_the_order() {
        let p = Partition::new(PartitionId(0), &[TableSpec::fixed(1, "t", 1)]);
        let (t, k) = (TableId(1), Key::from(1));
        assert_eq!(p.apply(t, &k, 3, Some(b"c")), Ok(true));
        assert_eq!(p.apply(t, &k, 2, Some(b"b")), Ok(false));
        assert_eq!(p.apply(t, &k, 3, Some(b"c")), Ok(false));
        let mut out = Vec::new();
        assert_eq!(
            p.read(t, &k, &mut out),
            Ok(Ok(ReadOutcome {
                version: 3,
                present: true
            }))
        );
        assert_eq!(out, b"c");
        assert_eq!(p.apply(t, &k, 4, None), Ok(true));
        assert_eq!(
            p.read(t, &k, &mut out),
            Ok(Ok(ReadOutcome {
                version: 4,
                present: false
            }))
        );
    }
}
