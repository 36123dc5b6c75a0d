//! Reads of one key at its primary: single-key lock-free reads (no transaction), and the
//! reads a transaction's execution makes.

use ferrotx_exec::Co;
use ferrotx_store::{Key, ReadError, ReadOutcome, TableId};
use ferrotx_wire::RequestType;

use super::{Abort, Coordinator, buggify_delay};
use crate::messages::{ReadStatus, decode_read_response, encode_read};
use crate::participant::Role;

/// Attempts at reading a locked object before the transaction aborts. The lock holder is
/// committing (its COMMIT-PRIMARY is one round trip away), so a few retries usually see
/// the new version; many mean contention, and aborting frees the coroutine.
const LOCKED_READ_ATTEMPTS_MAX: usize = 32;

/// Longest a read waits for a partition that recovery blocks before it gives up with
/// [`Abort::Unavailable`] (nothing was changed: the caller may retry).
const RECOVERING_READ_WAIT_NS: u64 = 2_000_000_000;

impl Coordinator {
    /// Single-key lock-free read: the committed value of `key` of `table` (`None` if
    /// absent), read at its primary, with no transaction (no id, no validation, nothing
    /// to truncate). Linearizable: the primary installs a transaction's writes before the
    /// transaction is reported committed and keeps them locked until then, and a locked
    /// object is read again rather than returned, so the read returns the latest
    /// committed value at the moment it runs at the primary.
    pub async fn read_one(
        &self,
        co: &Co,
        table: TableId,
        key: Key,
    ) -> Result<Option<Vec<u8>>, Abort> {
        let mut value = Vec::new();
        let present = self.read_one_into(co, table, key, &mut value).await?;
        Ok(present.then_some(value))
    }

    /// [`Coordinator::read_one`] into the caller's buffer (cleared first): returns true
    /// if the key is present. Allocates nothing once `out` has room for the value.
    pub async fn read_one_into(
        &self,
        co: &Co,
        table: TableId,
        key: Key,
        out: &mut Vec<u8>,
    ) -> Result<bool, Abort> {
        Ok(self
            .read_one_with_version(co, table, key, out)
            .await?
            .present)
    }

    /// [`Coordinator::read_one_into`] that also returns the version read (for histories).
    pub async fn read_one_with_version(
        &self,
        co: &Co,
        table: TableId,
        key: Key,
        out: &mut Vec<u8>,
    ) -> Result<ReadOutcome, Abort> {
        self.check_key(table, &key)?;
        let partition = self.placement.borrow().partition_of(table, &key);
        let outcome = self
            .read_at_primary(co, partition, table, &key, out, u64::MAX)
            .await?;
        // Fault point: the answer reaches the caller late, as after a slow reply: the
        // value may be overwritten meanwhile, which a linearizable read allows (it took
        // effect when the primary read it, inside the call).
        if ferrotx_buggify::fires("txn.read_one.before_answer") {
            buggify_delay(co).await;
        }
        self.count(|s| s.single_reads += 1);
        Ok(outcome)
    }

    /// Reads `key` at the primary of `partition` into `out`: in memory if the primary is
    /// this node, else one READ RPC, written straight into the engine's batch (no
    /// allocation). A locked (or contended) object is read again after a yield, up to
    /// [`LOCKED_READ_ATTEMPTS_MAX`] times: its holder may already be reported committed,
    /// so the old value must not be returned.
    pub(super) async fn read_at_primary(
        &self,
        co: &Co,
        partition: u32,
        table: TableId,
        key: &Key,
        out: &mut Vec<u8>,
        deadline_ns: u64,
    ) -> Result<ReadOutcome, Abort> {
        if !self.accepting.get() && !self.wait_accepting(co, deadline_ns).await {
            return Err(Abort::Unavailable);
        }
        let primary = self.placement.borrow().primary(partition);
        if primary == super::NO_PRIMARY {
            return Err(Abort::Unavailable);
        }
        let mut attempts = 0;
        let mut recovering_since = None;
        while attempts < LOCKED_READ_ATTEMPTS_MAX {
            let read: Result<ReadOutcome, Option<ReadError>> = if primary == self.local.node() {
                let store = self.store();
                if store.is_recovering(partition) {
                    Err(None)
                } else {
                    let Some(copy) = store.get(partition, Role::Primary) else {
                        return Err(Abort::Protocol);
                    };
                    copy.read(table, key, out)
                        .map_err(|_| Abort::Protocol)?
                        .map_err(Some)
                }
            } else {
                co.push_with(self.endpoint(primary), RequestType::Read.into(), |buf| {
                    encode_read(partition, table, key, buf);
                });
                co.call().await;
                co.result(0, |response| {
                    let bytes = response.map_err(Abort::from_rpc)?;
                    let (status, version, value) =
                        decode_read_response(bytes).map_err(|_| Abort::Protocol)?;
                    out.clear();
                    Ok(match status {
                        ReadStatus::Present => {
                            out.extend_from_slice(value);
                            Ok(ReadOutcome {
                                version,
                                present: true,
                            })
                        }
                        ReadStatus::Absent => Ok(ReadOutcome {
                            version,
                            present: false,
                        }),
                        ReadStatus::Locked => Err(Some(ReadError::Locked)),
                        ReadStatus::Contended => Err(Some(ReadError::Contended)),
                        ReadStatus::Recovering => Err(None),
                        ReadStatus::Refused => return Err(Abort::Protocol),
                    })
                })?
            };
            match read {
                // Fault point: an object found unlocked is taken for locked, so the read
                // takes the retry path: the value is dropped and read again, which is
                // always allowed (only a locked object's value may not be returned).
                Ok(_) if ferrotx_buggify::fires("txn.read.pretend_locked") => co.yield_now().await,
                Ok(outcome) => return Ok(outcome),
                Err(Some(ReadError::Locked | ReadError::Contended)) => {
                    attempts += 1;
                    co.yield_now().await
                }
                Err(None) => {
                    // The partition's primary changed and recovery has not decided the
                    // transactions that wrote it: wait a little, up to a bound.
                    let now = co.now_ns();
                    let since = *recovering_since.get_or_insert(now);
                    if now >= (since + RECOVERING_READ_WAIT_NS).min(deadline_ns) {
                        return Err(Abort::Unavailable);
                    }
                    co.sleep_until(now + 200_000).await;
                }
            }
        }
        Err(Abort::Locked)
    }
}
