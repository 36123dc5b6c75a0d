//! `bench kv`'s one-key read-modify-write shipped to its key's primary
//! ([`ferrotx_txn::ship`]): the caller sends the key's id, and the primary's executor adds 1
//! to the counter in the value's first 8 bytes, in a batch with the other operations
//! queued there (one commit for all of them). The end check is the unshipped one: the
//! counters at the primaries add up to the read-modify-writes committed.

use std::sync::Arc;

use ferrotx_exec::Co;
use ferrotx_store::{Key, TableId};
use ferrotx_txn::coordinator::{Abort, Coordinator};
use ferrotx_txn::ship::{BatchView, Procedure, Procedures};

use crate::workload::{KvWorkload, TABLE};

/// The id of the procedure. The Redis front end's plan procedure is 1; a node runs one
/// front end's procedures or the other's, but distinct ids keep a mix-up an error
/// ("unknown procedure") rather than a wrong run.
pub const KV_INCREMENT: u8 = 2;

/// Bytes of the arguments: the key's id, little-endian.
const ARGS_BYTES: usize = 8;

/// How long a shipped read-modify-write may wait for a primary (a configuration change
/// in progress) before it gives up: as long as the executor retries conflicts, so that a
/// caller gives up only after the primary did.
pub const SHIP_DEADLINE_NS: u64 = 2_000_000_000;

/// The procedures a `bench kv` node registers: [`KV_INCREMENT`] for values of
/// `value_bytes` bytes.
pub fn procedures(kv: &KvWorkload) -> Procedures {
    Procedures::default().with(
        KV_INCREMENT,
        Arc::new(KvIncrement {
            value_bytes: kv.value_bytes,
        }),
    )
}

/// Adds 1 to the counter of a key of [`TABLE`].
struct KvIncrement {
    value_bytes: usize,
}

impl Procedure for KvIncrement {
    fn keys(&self, args: &[u8], keys: &mut Vec<(TableId, Key)>) -> Result<(), String> {
        keys.push((TABLE, Key::from(key_id(args)?)));
        Ok(())
    }

    fn apply(&self, args: &[u8], view: &mut BatchView, _now_ns: u64, result: &mut Vec<u8>) {
        // `keys` accepted the arguments, and the executor read the key: anything else
        // writes nothing and says why, which the caller counts as an error.
        let Ok(id) = key_id(args) else {
            result.extend_from_slice(REFUSED);
            return;
        };
        let key = Key::from(id);
        let Some(stored) = view.get(TABLE, &key) else {
            result.extend_from_slice(REFUSED);
            return;
        };
        // As the unshipped transaction does: an absent key counts from 0, and the value
        // keeps the table's size.
        let mut value = stored.unwrap_or(&[0; 8]).to_vec();
        value.resize(self.value_bytes.max(8), 0);
        let count = u64::from_le_bytes(value[..8].try_into().expect("8 bytes")) + 1;
        value[..8].copy_from_slice(&count.to_le_bytes());
        let written = view.put(TABLE, &key, Some(value));
        assert!(written, "the key was read, so it can be written");
        // The result stays empty: every replica remembers it by origin, per operation
        // (`ShipResults`), and an empty one costs no allocation there.
    }
}

/// The result of an increment that wrote nothing (a committed one's is empty).
const REFUSED: &[u8] = b"kv increment: the key was not read";

/// The key id of the arguments.
fn key_id(args: &[u8]) -> Result<u64, String> {
    let bytes: [u8; ARGS_BYTES] = args
        .try_into()
        .map_err(|_| format!("kv increment: {} bytes of arguments, not 8", args.len()))?;
    Ok(u64::from_le_bytes(bytes))
}

/// How [`ship_increment`] ended, when it did not commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotShipped {
    /// The primary could not run it (a node without the procedure, a request over the
    /// message limit): nothing changed, and no earlier request of it may have run, so
    /// the caller runs it as an ordinary transaction instead (as the Redis front end
    /// does).
    RunHere,
    /// It ended without committing, or with its outcome unknown, as this abort says:
    /// [`Abort::Conflict`] (the primary's retries ran out, nothing changed),
    /// [`Abort::Unavailable`] (no primary answered in time, nothing changed),
    /// [`Abort::OutcomeUnknown`] (it may have committed).
    Ended(Abort),
}

/// Ships the read-modify-write of key `id` to its primary; `Ok` once it committed there.
pub async fn ship_increment(co: &Co, coordinator: &Coordinator, id: u64) -> Result<(), NotShipped> {
    let partition = coordinator.partition_of(TABLE, &Key::from(id));
    let deadline_ns = co.now_ns().saturating_add(SHIP_DEADLINE_NS);
    match coordinator
        .ship(co, KV_INCREMENT, partition, &id.to_le_bytes(), deadline_ns)
        .await
    {
        Ok(result) if result.is_empty() => Ok(()),
        // The procedure wrote nothing (it could not read the key): a bug, counted as an
        // error by the caller.
        Ok(_) => Err(NotShipped::Ended(Abort::Protocol)),
        // `Coordinator::ship` answers these only when nothing changed and no earlier
        // request may have run (otherwise `OutcomeUnknown`).
        Err(Abort::Protocol | Abort::TooLarge) => Err(NotShipped::RunHere),
        Err(abort) => Err(NotShipped::Ended(abort)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_name_one_key_and_malformed_ones_are_refused() {
        let procedure = KvIncrement { value_bytes: 16 };
        let mut keys = Vec::new();
        procedure.keys(&7u64.to_le_bytes(), &mut keys).unwrap();
        assert_eq!(keys, [(TABLE, Key::from(7))]);
        for bad in [&[][..], &[1; 7], &[1; 9]] {
            assert!(procedure.keys(bad, &mut keys).is_err());
        }
        assert_eq!(keys.len(), 1);
    }
}
