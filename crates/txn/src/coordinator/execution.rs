//! A transaction's execution (FaRM 4, before the commit): begin, reads, buffered writes,
//! and read-only transactions.

use std::cell::RefCell;

use ferrotx_exec::Co;
use ferrotx_store::{Key, TableId};
use ferrotx_wire::{RequestType, ViewId};

use super::key_index::KeyIndex;
use super::{Abort, Coordinator, buggify_delay};
use crate::messages::{
    ReadItem, ReadStatus, TxId, VERSION_ANY, Write, decode_read_response, encode_read,
};
use crate::participant::Role;

/// Reads [`Txn::read_many`] sends in one batch (the RPC engine's default batch holds 64).
const READ_BATCH_MAX: usize = 32;

/// Most keys the list of keys [`Txn::read_many`] reads keeps room for between calls: a
/// transaction's worth ([`ITEMS_MAX`](crate::messages::ITEMS_MAX)), so that calls in a
/// row reuse one list while a rare huge one does not pin its memory.
const FETCH_SPARE_KEYS_MAX: usize = crate::messages::ITEMS_MAX;

/// The list of keys [`Txn::read_many`] reads, kept by the coordinator between calls so
/// that a call allocates none. A call that finds it taken (another coroutine of the
/// thread is in `read_many`) makes its own.
#[derive(Debug, Default)]
pub(super) struct FetchSpare(RefCell<Vec<(Key, u32)>>);

impl FetchSpare {
    fn take(&self) -> Vec<(Key, u32)> {
        std::mem::take(&mut *self.0.borrow_mut())
    }

    fn give(&self, mut fetch: Vec<(Key, u32)>) {
        if fetch.capacity() <= FETCH_SPARE_KEYS_MAX {
            fetch.clear();
            *self.0.borrow_mut() = fetch;
        }
    }
}

impl Coordinator {
    /// Begins a read-write transaction. It takes no transaction id and reserves nothing
    /// until it commits.
    pub fn begin<'a>(&'a self, co: &'a Co) -> Txn<'a> {
        self.begin_with(co, false)
    }

    /// Begins a read-only transaction: writes, inserts and deletes are refused with
    /// [`Abort::ReadOnly`] (changing nothing), and its commit only validates the reads.
    pub fn begin_read_only<'a>(&'a self, co: &'a Co) -> Txn<'a> {
        self.begin_with(co, true)
    }

    fn begin_with<'a>(&'a self, co: &'a Co, read_only: bool) -> Txn<'a> {
        Txn {
            coordinator: self,
            co,
            tx: None,
            read_only,
            reads: Vec::new(),
            values: Vec::new(),
            writes: Vec::new(),
            index: KeyIndex::default(),
            finished: false,
            undecided: false,
            deadline_ns: u64::MAX,
            note: Vec::new(),
            age: None,
            only_in: None,
        }
    }
}

/// A transaction in a coroutine. Reads see the transaction's own writes; writes are
/// buffered until [`Txn::commit`]. Dropping it uncommitted abandons it (nothing is locked
/// before `commit`).
pub struct Txn<'a> {
    pub(super) coordinator: &'a Coordinator,
    pub(super) co: &'a Co,
    /// Its id, taken when the commit starts (with the log space reservation).
    pub(super) tx: Option<TxId>,
    pub(super) read_only: bool,
    /// Objects read from the store, with the version seen.
    pub(super) reads: Vec<ReadItem>,
    /// Values read, parallel to `reads` (`None`: absent), so repeated reads agree.
    pub(super) values: Vec<Option<Vec<u8>>>,
    pub(super) writes: Vec<Write>,
    /// Where each key is in `reads` and `writes`.
    pub(super) index: KeyIndex,
    pub(super) finished: bool,
    /// Recovery has not decided its commit: it joins the truncation mark only once
    /// recovery decides it.
    pub(super) undecided: bool,
    /// No wait of this transaction (a reconfiguration, a partition being recovered,
    /// recovery's decision) goes past this time: [`Txn::set_deadline`].
    pub(super) deadline_ns: u64,
    /// Bytes its log records carry for the participants ([`Txn::set_note`]).
    pub(super) note: Vec<u8>,
    /// Its age if it is a retry of a transaction that lost ([`Txn::set_age`]).
    pub(super) age: Option<crate::reservation::Age>,
    /// The only configuration its commit may start in ([`Txn::commit_only_in`]).
    pub(super) only_in: Option<ViewId>,
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // A transaction dropped during its commit must still count as finished, or this
        // thread's truncation mark would stop at it and the backups' logs would fill.
        self.finish(false);
        self.index.recycle(&self.coordinator.spare_keys);
    }
}

impl Txn<'_> {
    /// Makes this attempt a retry of a transaction that lost before, first tried at
    /// `age` ([`Coordinator::age`]): its LOCK and VALIDATE reserve the objects they name
    /// at their primaries, where nothing younger locks them until it commits (or the
    /// reservation lapses), so that, retried with the same age, it eventually wins
    /// ([`crate::reservation`]). A first attempt needs none: it costs nothing extra.
    pub fn set_age(&mut self, age: crate::reservation::Age) {
        self.age = Some(age);
    }

    /// Lets the commit start only in configuration `view`: a commit that would start in
    /// another (the view changed while the transaction ran, or while its commit waited
    /// for a view to be committed) is refused with [`Abort::Unavailable`] before anything
    /// is sent. For a caller whose reason to run the transaction holds in one view only:
    /// a shipped batch runs only at the primary that found its operations new, in the
    /// view it found them so ([`crate::ship`]).
    pub fn commit_only_in(&mut self, view: ViewId) {
        self.only_in = Some(view);
    }

    /// True for a transaction begun with [`Coordinator::begin_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Objects read from the store so far, with versions (for histories).
    pub fn reads(&self) -> &[ReadItem] {
        &self.reads
    }

    /// The values those reads found, in the same order (`None`: the key was absent or
    /// deleted).
    pub fn read_values(&self) -> &[Option<Vec<u8>>] {
        &self.values
    }

    /// Writes buffered so far.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// The version at which this transaction read `key` of `table` from the store, if
    /// it did (not if it only wrote it blind, [`Txn::put`]). The commit validates or
    /// locks the key at this version, so a caller that compares it with a version seen
    /// earlier (Redis's WATCH) learns whether the key changed in between, up to the
    /// commit point.
    pub fn read_version(&self, table: TableId, key: &Key) -> Option<u64> {
        self.index
            .read(&self.reads, table, key)
            .map(|i| self.reads[i].version)
    }

    /// Reads `key` of `table`: the transaction's own write if any, else the value at its
    /// primary (`None` if absent). Bad input (an unknown table, a key shorter than the
    /// table's partition key) is refused and leaves the transaction usable.
    pub async fn read(&mut self, table: TableId, key: Key) -> Result<Option<Vec<u8>>, Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        if let Some(known) = self.known(table, &key) {
            return Ok(known);
        }
        let coordinator = self.coordinator;
        coordinator.check_key(table, &key)?;
        let partition = coordinator.placement.borrow().partition_of(table, &key);
        let mut value = Vec::new();
        let outcome = match coordinator
            .read_at_primary(
                self.co,
                partition,
                table,
                &key,
                &mut value,
                self.deadline_ns,
            )
            .await
        {
            Ok(outcome) => outcome,
            Err(abort) => return Err(self.abort_execution(abort)),
        };
        // Fault point: the transaction goes on late after a read, widening the window
        // in which a writer changes what it read before its commit validates or locks.
        if ferrotx_buggify::fires("txn.read.before_use") {
            buggify_delay(self.co).await;
        }
        let value = outcome.present.then_some(value);
        self.record_read(partition, table, key, outcome.version, value.clone());
        Ok(value)
    }

    /// Reads several keys of `table` at once, in the order given (`None`: absent), as
    /// [`Txn::read`] would one by one, but with the remote reads sent together: one round
    /// trip for all of them (FaSST issues a transaction's reads as one batch), and the
    /// primaries on this node read in memory meanwhile. A key found locked is read again
    /// on its own. Bad input refuses the whole call before anything is read.
    pub async fn read_many(
        &mut self,
        table: TableId,
        keys: &[Key],
    ) -> Result<Vec<Option<Vec<u8>>>, Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        let coordinator = self.coordinator;
        for key in keys {
            coordinator.check_key(table, key)?;
        }
        // Keys neither written nor read yet, once each, with their partitions: sorted, so
        // that copies of a key lie side by side (O(n log n) for n keys a client chose).
        let mut fetch = coordinator.fetch_spare.take();
        fetch.clear();
        fetch.extend(
            keys.iter()
                .filter(|key| !self.is_known(table, key))
                .map(|&key| {
                    (
                        key,
                        coordinator.placement.borrow().partition_of(table, &key),
                    )
                }),
        );
        fetch.sort_unstable_by_key(|&(key, _)| key);
        fetch.dedup_by_key(|&mut (key, _)| key);
        let local = coordinator.local.node();
        if !coordinator.accepting.get()
            && !coordinator.wait_accepting(self.co, self.deadline_ns).await
        {
            return Err(self.abort_execution(Abort::Unavailable));
        }
        if fetch
            .iter()
            .any(|(_, p)| coordinator.placement.borrow().primary(*p) == super::NO_PRIMARY)
        {
            return Err(self.abort_execution(Abort::Unavailable));
        }
        let mut retry = Vec::new();
        let batch = READ_BATCH_MAX.min(self.co.engine().config().max_batch);
        for (c, chunk) in fetch.chunks(batch).enumerate() {
            // Fault point: a pause between two batches of reads, so the keys of one call
            // are read at different times (each is validated at commit).
            if c > 0 && ferrotx_buggify::fires("txn.read_many.between_batches") {
                buggify_delay(self.co).await;
            }
            // The primaries as the requests are sent: the answers are matched to the same
            // keys after the wait, whatever the placement is by then.
            let placement = coordinator.placement();
            let remote = |&&(_, partition): &&(Key, u32)| placement.primary(partition) != local;
            let mut sent = 0;
            for (key, partition) in chunk.iter().filter(remote) {
                let primary = placement.primary(*partition);
                self.co.push_with(
                    coordinator.endpoint(primary),
                    RequestType::Read.into(),
                    |buf| {
                        encode_read(*partition, table, key, buf);
                    },
                );
                sent += 1;
            }
            if sent > 0 {
                self.co.call().await;
            }
            for (i, &(key, partition)) in chunk.iter().filter(remote).enumerate() {
                let answer = self.co.result(i, |response| {
                    let bytes = response.map_err(Abort::from_rpc)?;
                    let (status, version, value) =
                        decode_read_response(bytes).map_err(|_| Abort::Protocol)?;
                    Ok(match status {
                        ReadStatus::Present => Some((version, Some(value.to_vec()))),
                        ReadStatus::Absent => Some((version, None)),
                        ReadStatus::Locked | ReadStatus::Contended | ReadStatus::Recovering => None,
                        ReadStatus::Refused => return Err(Abort::Protocol),
                    })
                });
                match answer {
                    // Fault point: an unlocked object taken for locked: read again on its
                    // own below (as `read_at_primary`'s `txn.read.pretend_locked`).
                    Ok(Some(_)) if ferrotx_buggify::fires("txn.read_many.pretend_locked") => {
                        retry.push(key)
                    }
                    Ok(Some((version, value))) => {
                        self.record_read(partition, table, key, version, value)
                    }
                    Ok(None) => retry.push(key),
                    Err(abort) => return Err(self.abort_execution(abort)),
                }
            }
            // This node's primaries, in memory (a locked one is retried below).
            for &(key, partition) in chunk {
                if coordinator.placement.borrow().primary(partition) != local {
                    continue;
                }
                let store = coordinator.store();
                if store.is_recovering(partition) {
                    retry.push(key);
                    continue;
                }
                let Some(copy) = store.get(partition, Role::Primary) else {
                    return Err(self.abort_execution(Abort::Protocol));
                };
                let mut value = Vec::new();
                match copy.read(table, &key, &mut value) {
                    Ok(Ok(_)) if ferrotx_buggify::fires("txn.read_many.pretend_locked") => {
                        retry.push(key)
                    }
                    Ok(Ok(outcome)) => {
                        let value = outcome.present.then_some(value);
                        self.record_read(partition, table, key, outcome.version, value);
                    }
                    Ok(Err(_)) => retry.push(key),
                    Err(_) => return Err(self.abort_execution(Abort::Protocol)),
                }
            }
        }
        coordinator.fetch_spare.give(fetch);
        for key in retry {
            self.read(table, key).await?;
        }
        Ok(keys
            .iter()
            .map(|key| self.known(table, key).expect("every key was read"))
            .collect())
    }

    /// True if this transaction wrote or read `key`.
    fn is_known(&self, table: TableId, key: &Key) -> bool {
        self.index.write(&self.writes, table, key).is_some()
            || self.index.read(&self.reads, table, key).is_some()
    }

    /// The value of `key` as this transaction sees it, if it wrote or read it.
    fn known(&self, table: TableId, key: &Key) -> Option<Option<Vec<u8>>> {
        if let Some(i) = self.index.write(&self.writes, table, key) {
            return Some(self.writes[i].value.clone());
        }
        self.index
            .read(&self.reads, table, key)
            .map(|i| self.values[i].clone())
    }

    fn record_read(
        &mut self,
        partition: u32,
        table: TableId,
        key: Key,
        version: u64,
        value: Option<Vec<u8>>,
    ) {
        self.reads.push(ReadItem {
            partition,
            table,
            key,
            version,
        });
        self.values.push(value);
        self.index
            .read_pushed(&self.reads, &self.writes, &self.coordinator.spare_keys);
    }

    /// Refuses a write that cannot be done, before anything happens (the transaction
    /// stays usable).
    fn check_write(&self, table: TableId, key: &Key, value: Option<&[u8]>) -> Result<(), Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        if self.read_only {
            return Err(Abort::ReadOnly);
        }
        let spec = self.coordinator.check_key(table, key)?;
        if let Some(value) = value {
            spec.check_value(value).map_err(Abort::Refused)?;
        }
        Ok(())
    }

    /// Writes `value` to `key` (inserting it if absent); `None` deletes it. The key is
    /// read first if this transaction has not read or written it, so that the commit
    /// locks it at the version read (FaRM's optimistic execution).
    pub async fn write(
        &mut self,
        table: TableId,
        key: Key,
        value: Option<Vec<u8>>,
    ) -> Result<(), Abort> {
        self.check_write(table, &key, value.as_deref())?;
        if self.index.write(&self.writes, table, &key).is_none() {
            self.read(table, key).await?;
        }
        self.put(table, key, value)
    }

    /// Writes `value` to `key` without reading it (a blind write; `None` deletes): at
    /// commit the primary locks the object at whatever version it has then, and the new
    /// value replaces it. The transaction does not depend on the old value, so no read is
    /// needed to keep it serializable, and the write costs one round trip less than
    /// [`Txn::write`]. If the transaction read the key before, this is that read's
    /// ordinary write.
    pub fn put(&mut self, table: TableId, key: Key, value: Option<Vec<u8>>) -> Result<(), Abort> {
        self.check_write(table, &key, value.as_deref())?;
        if let Some(i) = self.index.write(&self.writes, table, &key) {
            self.writes[i].value = value;
            return Ok(());
        }
        let version = self.read_version(table, &key).unwrap_or(VERSION_ANY);
        let partition = self
            .coordinator
            .placement
            .borrow()
            .partition_of(table, &key);
        self.writes.push(Write {
            partition,
            table,
            key,
            version,
            value,
        });
        self.index
            .write_pushed(&self.reads, &self.writes, &self.coordinator.spare_keys);
        Ok(())
    }

    /// Inserts `value` under `key`, which must be absent: if it exists (in the store or
    /// by this transaction's own write), refuses with [`Abort::KeyExists`] and changes
    /// nothing (the transaction stays usable, and its read of the key is validated at
    /// commit like any other).
    pub async fn insert(&mut self, table: TableId, key: Key, value: Vec<u8>) -> Result<(), Abort> {
        self.check_write(table, &key, Some(&value))?;
        if self.read(table, key).await?.is_some() {
            return Err(Abort::KeyExists);
        }
        self.write(table, key, Some(value)).await
    }

    /// Deletes `key` (a write of `None`; deleting an absent key is allowed).
    pub async fn delete(&mut self, table: TableId, key: Key) -> Result<(), Abort> {
        self.write(table, key, None).await
    }

    /// Sets the note the transaction's records carry to every participant (empty: none):
    /// what a participant that applies the records should remember with them (a shipped
    /// batch's callers and results, [`crate::ship`]).
    pub fn set_note(&mut self, note: Vec<u8>) {
        self.note = note;
    }

    /// Bounds every wait of this transaction to `deadline_ns` (the caller's time, as
    /// [`Co::now_ns`]): a wait for a configuration to be committed or for a partition
    /// recovery blocks ends with [`Abort::Unavailable`] (nothing changed), and a wait for
    /// recovery's decision on an interrupted commit with [`Abort::OutcomeUnknown`].
    pub fn set_deadline(&mut self, deadline_ns: u64) {
        self.deadline_ns = deadline_ns;
    }

    /// Aborts during execution: nothing is locked yet, so nothing to release.
    fn abort_execution(&mut self, abort: Abort) -> Abort {
        self.finish(false);
        abort
    }

    /// Ends the transaction: counts it, and its id (if it took one) as done for
    /// truncation.
    pub(super) fn finish(&mut self, committed: bool) {
        if self.finished {
            return;
        }
        self.finished = true;
        let coordinator = self.coordinator;
        if committed {
            coordinator.count(|s| s.committed += 1);
        } else {
            coordinator.count(|s| s.aborted += 1);
        }
        self.truncate();
    }
}
