//! The coordinator side: transactions run by coroutines (FaRM 4; docs/transactions.md).

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_exec::Co;
use ferrotx_store::{Key, StoreError, TableId, TableSpec};
use ferrotx_wire::EndpointId;

use crate::messages::{
    LockRecord, ReadItem, ReadStatus, TxId, Write, decode_read_response, encode_read,
    encode_truncate, encode_tx, encode_validate, request_type,
};
use crate::participant::{Participant, ParticipantHandler};

/// Where keys live: the partition of a key and the nodes of a partition.
pub trait Placement {
    /// The partition of `key` of `table`.
    fn partition_of(&self, table: TableId, key: &Key) -> u32;
    /// The node that is primary for `partition`.
    fn primary(&self, partition: u32) -> u16;
    /// The nodes that are its backups.
    fn backups(&self, partition: u32) -> &[u16];
}

/// Attempts at reading a locked object before the transaction aborts. The lock holder is
/// committing (its COMMIT-PRIMARY is one round trip away), so a few retries usually see
/// the new version; many mean contention, and aborting frees the coroutine.
const LOCKED_READ_ATTEMPTS_MAX: usize = 32;

/// Why a transaction did not commit.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum Abort {
    /// An object read or written changed, or was locked, before the commit point.
    #[error("aborted: conflict with another transaction")]
    Conflict,
    /// An object stayed locked through every read attempt.
    #[error("aborted: an object stayed locked")]
    Locked,
    /// Bad input: unknown table, a value that does not fit; nothing was changed.
    #[error("refused: {0}")]
    Refused(StoreError),
    /// The transaction's writes do not fit one message of the commit protocol.
    #[error("refused: the transaction is larger than the commit log allows")]
    TooLarge,
    /// The transaction already aborted; begin a new one.
    #[error("the transaction already aborted")]
    Finished,
    /// A participant refused a message (a bug or a configuration mismatch).
    #[error("aborted: a participant refused the protocol")]
    Protocol,
}

/// Tracks which transactions of this coordinator thread have finished, to compute the
/// truncation mark (FaRM 4 step 5): every counter up to the mark is done.
#[derive(Default)]
struct Truncation {
    mark: u64,
    done_above_mark: BTreeSet<u64>,
}

impl Truncation {
    fn finish(&mut self, counter: u64) {
        self.done_above_mark.insert(counter);
        while self.done_above_mark.remove(&(self.mark + 1)) {
            self.mark += 1;
        }
    }
}

/// The coordinator of one worker thread, shared by its coroutines.
pub struct Coordinator {
    local: EndpointId,
    configuration: u64,
    incarnation: u64,
    participant: Rc<RefCell<Participant>>,
    placement: Arc<dyn Placement>,
    schema: Arc<[TableSpec]>,
    next_counter: Cell<u64>,
    truncation: RefCell<Truncation>,
}

impl Coordinator {
    /// The coordinator of endpoint `local`, using the thread's `participant` for the
    /// partitions of its own node (accessed in memory, without RPC), `placement` to find
    /// the others, and `schema` to refuse bad input before anything is sent.
    pub fn new(
        local: EndpointId,
        configuration: u64,
        incarnation: u64,
        participant: Rc<RefCell<Participant>>,
        placement: Arc<dyn Placement>,
        schema: Arc<[TableSpec]>,
    ) -> Self {
        Self {
            local,
            configuration,
            incarnation,
            participant,
            placement,
            schema,
            next_counter: Cell::new(1),
            truncation: RefCell::new(Truncation::default()),
        }
    }

    /// Begins a transaction.
    pub fn begin<'a>(&'a self, co: &'a Co) -> Txn<'a> {
        let counter = self.next_counter.get();
        self.next_counter.set(counter + 1);
        Txn {
            coordinator: self,
            co,
            tx: TxId {
                configuration: self.configuration,
                node: self.local.node(),
                thread: self.local.thread(),
                incarnation: self.incarnation,
                counter,
            },
            reads: Vec::new(),
            values: Vec::new(),
            writes: Vec::new(),
            finished: false,
        }
    }

    /// The current truncation mark.
    pub fn truncation_mark(&self) -> u64 {
        self.truncation.borrow().mark
    }

    /// Sends this coordinator's truncation mark to `nodes`, so their backup copies apply
    /// every finished transaction (normally the mark rides on later commits).
    pub async fn flush_truncation(&self, co: &Co, nodes: &[u16]) {
        let mut message = Vec::new();
        encode_truncate(
            (self.local.node(), self.local.thread(), self.incarnation),
            self.truncation_mark(),
            &mut message,
        );
        let messages: Vec<(u16, Vec<u8>)> = nodes.iter().map(|&n| (n, message.clone())).collect();
        self.round(
            co,
            request_type::TRUNCATE,
            Participant::truncate_message,
            &messages,
        )
        .await;
    }

    fn spec(&self, table: TableId) -> Result<&TableSpec, Abort> {
        self.schema
            .iter()
            .find(|spec| spec.id == table)
            .ok_or(Abort::Refused(StoreError::UnknownTable(table)))
    }

    fn endpoint(&self, node: u16) -> EndpointId {
        EndpointId::new(node, self.local.thread())
    }

    /// Sends one message per node: the local one is handled here and now by this
    /// thread's participant, the others as one batch of RPCs. Returns each node's
    /// response (`None` if a participant refused the message).
    async fn round(
        &self,
        co: &Co,
        request_type: u8,
        handler: ParticipantHandler,
        messages: &[(u16, Vec<u8>)],
    ) -> Vec<(u16, Option<Vec<u8>>)> {
        let mut responses = Vec::with_capacity(messages.len());
        let mut remote = Vec::new();
        for (node, payload) in messages {
            if *node == self.local.node() {
                let mut response = Vec::new();
                let ok =
                    handler(&mut self.participant.borrow_mut(), payload, &mut response).is_ok();
                responses.push((*node, ok.then_some(response)));
            } else {
                co.push(self.endpoint(*node), request_type, payload);
                remote.push(*node);
            }
        }
        if !remote.is_empty() {
            co.call().await;
            for (i, node) in remote.into_iter().enumerate() {
                let response = co.result(i, |r| r.ok().map(<[u8]>::to_vec));
                responses.push((node, response));
            }
        }
        responses
    }
}

/// A transaction in a coroutine. Reads see the transaction's own writes; writes are
/// buffered until [`Txn::commit`]. Dropping it uncommitted abandons it (nothing is locked
/// before `commit`).
pub struct Txn<'a> {
    coordinator: &'a Coordinator,
    co: &'a Co,
    tx: TxId,
    /// Objects read from the store, with the version seen.
    reads: Vec<ReadItem>,
    /// Values read, parallel to `reads` (`None`: absent), so repeated reads agree.
    values: Vec<Option<Vec<u8>>>,
    writes: Vec<Write>,
    finished: bool,
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // An abandoned transaction must still count as finished, or this thread's
        // truncation mark would stop at it and the backups' logs would fill.
        self.finish();
    }
}

impl Txn<'_> {
    /// Its id.
    pub fn id(&self) -> TxId {
        self.tx
    }

    /// Objects read from the store so far, with versions (for histories).
    pub fn reads(&self) -> &[ReadItem] {
        &self.reads
    }

    /// Writes buffered so far.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// Reads `key` of `table`: the transaction's own write if any, else the value at its
    /// primary (`None` if absent).
    pub async fn read(&mut self, table: TableId, key: Key) -> Result<Option<Vec<u8>>, Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        if let Some(w) = self
            .writes
            .iter()
            .find(|w| w.table == table && w.key == key)
        {
            return Ok(w.value.clone());
        }
        if let Some(i) = self
            .reads
            .iter()
            .position(|r| r.table == table && r.key == key)
        {
            return Ok(self.values[i].clone());
        }
        let coordinator = self.coordinator;
        if let Err(abort) = coordinator.spec(table) {
            return Err(self.abort_execution(abort).await);
        }
        let partition = coordinator.placement.partition_of(table, &key);
        let primary = coordinator.placement.primary(partition);
        let mut request = Vec::new();
        encode_read(partition, table, &key, &mut request);
        for _ in 0..LOCKED_READ_ATTEMPTS_MAX {
            let response = coordinator
                .round(
                    self.co,
                    request_type::READ,
                    Participant::read,
                    &[(primary, request.clone())],
                )
                .await;
            let Some(Some(bytes)) = response.into_iter().next().map(|(_, r)| r) else {
                return Err(self.abort_execution(Abort::Protocol).await);
            };
            let Ok((status, version, value)) = decode_read_response(&bytes) else {
                return Err(self.abort_execution(Abort::Protocol).await);
            };
            let value = match status {
                ReadStatus::Present => Some(value.to_vec()),
                ReadStatus::Absent => None,
                ReadStatus::Locked | ReadStatus::Contended => {
                    self.co.yield_now().await;
                    continue;
                }
                ReadStatus::Refused => return Err(self.abort_execution(Abort::Protocol).await),
            };
            self.reads.push(ReadItem {
                partition,
                table,
                key,
                version,
            });
            self.values.push(value.clone());
            return Ok(value);
        }
        Err(self.abort_execution(Abort::Locked).await)
    }

    /// Writes `value` to `key` (inserting it if absent); `None` deletes it.
    pub async fn write(
        &mut self,
        table: TableId,
        key: Key,
        value: Option<Vec<u8>>,
    ) -> Result<(), Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        // Bad input is refused before anything happens (the transaction stays usable).
        let spec = self.coordinator.spec(table)?;
        if let Some(value) = &value {
            spec.check_value(value).map_err(Abort::Refused)?;
        }
        let version = match self
            .writes
            .iter_mut()
            .find(|w| w.table == table && w.key == key)
        {
            Some(w) => {
                w.value = value;
                return Ok(());
            }
            None => {
                self.read(table, key).await?;
                let read = self
                    .reads
                    .iter()
                    .find(|r| r.table == table && r.key == key)
                    .expect("just read");
                read.version
            }
        };
        let partition = self.coordinator.placement.partition_of(table, &key);
        self.writes.push(Write {
            partition,
            table,
            key,
            version,
            value,
        });
        Ok(())
    }

    /// Aborts during execution: nothing is locked yet, so nothing to release.
    async fn abort_execution(&mut self, abort: Abort) -> Abort {
        self.finish();
        abort
    }

    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.coordinator
                .truncation
                .borrow_mut()
                .finish(self.tx.counter);
        }
    }

    /// Commits: FaRM's lock, validate, commit-backup, commit-primary (steps 1-4).
    /// Truncation (step 5) rides on later commit-backup messages.
    pub async fn commit(mut self) -> Result<(), Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        let result = self.commit_inner().await;
        self.finish();
        result
    }

    async fn commit_inner(&mut self) -> Result<(), Abort> {
        let coordinator = self.coordinator;
        let placement = &*coordinator.placement;
        let read_only: Vec<ReadItem> = self
            .reads
            .iter()
            .filter(|r| {
                !self
                    .writes
                    .iter()
                    .any(|w| w.table == r.table && w.key == r.key)
            })
            .copied()
            .collect();
        if self.writes.is_empty() {
            // Read-only: serializable at its last read if every read is still current.
            if read_only.len() <= 1 {
                return Ok(());
            }
            return if self.validate(&read_only).await {
                Ok(())
            } else {
                Err(Abort::Conflict)
            };
        }
        let mut partitions: Vec<u32> = self.writes.iter().map(|w| w.partition).collect();
        partitions.sort_unstable();
        partitions.dedup();
        let mark = coordinator.truncation.borrow().mark;
        let record_for = |writes: Vec<Write>| {
            let mut buf = Vec::new();
            LockRecord {
                tx: self.tx,
                partitions: partitions.clone(),
                writes,
                truncate_up_to: mark,
            }
            .encode(&mut buf);
            buf
        };
        let by_node = |node_of: &dyn Fn(u32) -> Vec<u16>| {
            let mut nodes: Vec<u16> = partitions.iter().flat_map(|&p| node_of(p)).collect();
            nodes.sort_unstable();
            nodes.dedup();
            nodes
                .into_iter()
                .map(|node| {
                    let writes: Vec<Write> = self
                        .writes
                        .iter()
                        .filter(|w| node_of(w.partition).contains(&node))
                        .cloned()
                        .collect();
                    (node, record_for(writes))
                })
                .collect::<Vec<_>>()
        };

        // Every message of the commit is built, and checked against the limits, before the
        // first lock is taken: a refusal after LOCK would leave locks behind.
        let locks = by_node(&|p| vec![placement.primary(p)]);
        let backups = by_node(&|p| placement.backups(p).to_vec());
        let too_large = |messages: &[(u16, Vec<u8>)]| {
            messages
                .iter()
                .any(|(_, m)| m.len() > ferrotx_wire::MAX_MESSAGE_BYTES as usize)
        };
        let writes_per_message_max = self.writes.len();
        if too_large(&locks)
            || too_large(&backups)
            || writes_per_message_max > crate::messages::ITEMS_MAX
        {
            return Err(Abort::TooLarge);
        }

        // 1. LOCK at every written primary.
        let answers = coordinator
            .round(self.co, request_type::LOCK, Participant::lock, &locks)
            .await;
        let locked: Vec<u16> = answers
            .iter()
            .filter(|(_, r)| r.as_deref() == Some(&[1]))
            .map(|(n, _)| *n)
            .collect();
        if locked.len() < locks.len() {
            self.release(&locked).await;
            return Err(Abort::Conflict);
        }
        // 2. VALIDATE what was read but not written.
        if !read_only.is_empty() && !self.validate(&read_only).await {
            self.release(&locked).await;
            return Err(Abort::Conflict);
        }
        // 3. COMMIT-BACKUP at every backup of a written partition.
        let answers = coordinator
            .round(
                self.co,
                request_type::COMMIT_BACKUP,
                Participant::commit_backup,
                &backups,
            )
            .await;
        assert!(
            answers.iter().all(|(_, r)| r.as_deref() == Some(&[1])),
            "a backup refused a commit record: the configuration is inconsistent"
        );
        // 4. COMMIT-PRIMARY. Reported once the primaries acknowledged (FaRM reports at the
        // first; with batches the coroutine resumes when all have).
        let mut message = Vec::new();
        encode_tx(&self.tx, &mut message);
        let commits: Vec<(u16, Vec<u8>)> = locked.iter().map(|&n| (n, message.clone())).collect();
        coordinator
            .round(
                self.co,
                request_type::COMMIT_PRIMARY,
                Participant::commit_primary,
                &commits,
            )
            .await;
        Ok(())
    }

    async fn validate(&self, items: &[ReadItem]) -> bool {
        let placement = &*self.coordinator.placement;
        let mut nodes: Vec<u16> = items
            .iter()
            .map(|r| placement.primary(r.partition))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let messages: Vec<(u16, Vec<u8>)> = nodes
            .into_iter()
            .map(|node| {
                let mine: Vec<ReadItem> = items
                    .iter()
                    .filter(|r| placement.primary(r.partition) == node)
                    .copied()
                    .collect();
                let mut buf = Vec::new();
                encode_validate(&mine, &mut buf);
                (node, buf)
            })
            .collect();
        let answers = self
            .coordinator
            .round(
                self.co,
                request_type::VALIDATE,
                Participant::validate,
                &messages,
            )
            .await;
        answers.iter().all(|(_, r)| r.as_deref() == Some(&[1]))
    }

    /// Releases the locks taken at `nodes` (ABORT).
    async fn release(&self, nodes: &[u16]) {
        let mut message = Vec::new();
        encode_tx(&self.tx, &mut message);
        let aborts: Vec<(u16, Vec<u8>)> = nodes.iter().map(|&n| (n, message.clone())).collect();
        self.coordinator
            .round(self.co, request_type::ABORT, Participant::abort, &aborts)
            .await;
    }
}
