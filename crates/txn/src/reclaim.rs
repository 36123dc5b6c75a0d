//! Reclaiming deleted objects: a delete's tombstone is freed on every copy of its
//! partition once no older write of its key can still reach any of them.
//!
//! A delete leaves an object that orders it against later inserts (a tombstone, at the
//! delete's version); an aborted insert leaves an absent placeholder. The store frees
//! either with `Partition::reclaim`, raising the key's floor (the version keys with no
//! object read at, one per bucket of key hashes) so that the key's versions never go
//! back. What the store cannot know
//! is when that is safe on a backup: backups apply logged writes at truncation, in any
//! order, by version, and a key with no object takes any version. An older write of the
//! key applied after its tombstone was freed would bring the key back.
//!
//! So each partition's primary drives reclamation, in rounds over batches of its
//! tombstones (`Coordinator::run_reclaim`):
//!
//! 1. **RECLAIM-CHECK** to every worker thread of every copy's node, the primary's own
//!    included (a thread's backup logs are its own). A thread answers, per key, whether
//!    it is *clear*: the node's copy holds the key at the tombstone's version or later
//!    (the delete was applied), and no record in this thread's logs writes the key (none
//!    is waiting to be applied). Once the tombstone exists, every older write of the key
//!    is already logged at every backup (it committed before the delete could lock the
//!    key, and a commit waits for every backup's COMMIT-BACKUP answer), so a key clear
//!    now stays clear: none can arrive later. A copy still being filled refuses: a
//!    FETCH answer read before the delete may still be on its way to it. So does a
//!    primary's thread whose transaction-state recovery round has not yet replicated the
//!    partition's records: recovery carries records outside the logs (a backup's
//!    NEED-RECOVERY, the primary's gather) to replicas that never logged them
//!    (`Participant::recovery_replicated`).
//! 2. **RECLAIM** to every backup: the backup raises each key's floor to the key's
//!    version, then frees each tombstone still at its version. Only
//!    if the view did not change since the check (a backup named since was not asked).
//! 3. Once every backup answered, the primary frees its own: its floor rises only after
//!    every backup's did, so a backup promoted later never reads a key at a lower version
//!    than its primary did.
//!
//! A key found unclear, a lost answer or a view change leaves the tombstone for a later
//! round. docs/transactions.md, "Reclaiming deleted objects", has the argument.

use ferrotx_store::{Key, Partition, TableId};

use crate::answer::Answer;
use crate::messages::{DecodeError, ITEMS_MAX, Reader, Writer};

/// Most keys one round names.
pub const RECLAIM_KEYS_MAX: usize = 256;

/// How a node reclaims its partitions' tombstones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReclaimOptions {
    /// Records of a table one step looks through for tombstones.
    pub records_per_step: usize,
    /// Time between two steps of one worker thread with nothing found.
    pub interval_ns: u64,
    /// Time between two steps while tombstones keep being found (a churning workload).
    pub busy_interval_ns: u64,
}

impl Default for ReclaimOptions {
    fn default() -> Self {
        Self {
            records_per_step: 4096,
            interval_ns: 50_000_000,
            busy_interval_ns: 1_000_000,
        }
    }
}

/// A RECLAIM-CHECK or RECLAIM request: a partition's table and tombstones by key and
/// version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReclaimRequest {
    /// The partition.
    pub partition: u32,
    /// Its table.
    pub table: TableId,
    /// Tombstones: key and version.
    pub keys: Vec<(Key, u64)>,
}

/// Encodes a RECLAIM-CHECK or RECLAIM request.
pub fn encode_reclaim(request: &ReclaimRequest, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u32(request.partition)
        .u16(request.table.0)
        .u16(request.keys.len() as u16);
    for (key, version) in &request.keys {
        w.key(key).u64(*version);
    }
}

/// Decodes a RECLAIM-CHECK or RECLAIM request.
pub fn decode_reclaim(bytes: &[u8]) -> Result<ReclaimRequest, DecodeError> {
    let mut r = Reader(bytes);
    let partition = r.u32()?;
    let table = TableId(r.u16()?);
    let n = usize::from(r.u16()?);
    if n > ITEMS_MAX {
        return Err(DecodeError::Invalid);
    }
    let mut keys = Vec::with_capacity(n);
    for _ in 0..n {
        keys.push((r.key()?, r.u64()?));
    }
    r.finish()?;
    Ok(ReclaimRequest {
        partition,
        table,
        keys,
    })
}

/// RECLAIM-CHECK's answer for the keys of `request` on `copy` (`None`: this node has no
/// copy of the partition, refused), with `pending(key)` true if a record of this
/// thread's logs writes the key: [`Answer::Granted`] then one byte per key, 1 if clear;
/// or [`Answer::Refused`].
pub fn answer_check(
    request: &ReclaimRequest,
    copy: Option<&Partition>,
    mut pending: impl FnMut(&Key) -> bool,
    response: &mut Vec<u8>,
) {
    let Some(copy) = copy else {
        Answer::Refused.encode(response);
        return;
    };
    Answer::Granted.encode(response);
    let mut value = Vec::new();
    for (key, version) in &request.keys {
        let applied = matches!(
            copy.read(request.table, key, &mut value),
            Ok(Ok(read)) if read.version >= *version
        );
        response.push(u8::from(applied && !pending(key)));
    }
}

/// Carries out RECLAIM on `copy`: raises each key's floor to its version (whether or
/// not the tombstone is still there: the primary frees its own next), then frees each
/// tombstone still at its version. Returns how many it freed, or `None` (nothing freed)
/// if a floor could not be raised (no such table, a version no object can have): the
/// primary must then keep its tombstones.
pub fn apply_reclaim(request: &ReclaimRequest, copy: &Partition) -> Option<usize> {
    for (key, version) in &request.keys {
        copy.raise_floor(request.table, key, *version).ok()?;
    }
    Some(
        request
            .keys
            .iter()
            .filter(|(key, version)| copy.reclaim(request.table, key, *version) == Ok(true))
            .count(),
    )
}

/// Decodes RECLAIM-CHECK's answer ([`answer_check`]) for `keys` keys: which are clear,
/// or `None` if refused or malformed.
pub fn decode_check_response(bytes: &[u8], keys: usize) -> Option<Vec<bool>> {
    let (status, clear) = Answer::decode_prefix(bytes).ok()?;
    if status != Answer::Granted || clear.len() != keys || clear.iter().any(|&b| b > 1) {
        return None;
    }
    Some(clear.iter().map(|&b| b == 1).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::strategies;
    use ferrotx_store::{PartitionId, TableSpec};
    use proptest::prelude::*;

    #[test]
    fn requests_round_trip_and_forged_counts_are_refused() {
        let request = ReclaimRequest {
            partition: 9,
            table: TableId(2),
            keys: vec![(Key::from(1), 5), (Key::from_bytes(b"").unwrap(), 0)],
        };
        let mut bytes = Vec::new();
        encode_reclaim(&request, &mut bytes);
        assert_eq!(decode_reclaim(&bytes), Ok(request.clone()));
        assert!(decode_reclaim(&bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_reclaim(&longer).is_err());
        let mut forged = bytes[..6].to_vec();
        forged.extend_from_slice(&u16::MAX.to_le_bytes());
        assert!(decode_reclaim(&forged).is_err());
    }

    #[test]
    fn a_key_is_clear_once_its_delete_is_applied_and_nothing_of_it_waits() {
        let table = TableId(1);
        let copy = Partition::new(PartitionId(0), &[TableSpec::fixed(1, "t", 8)]);
        for k in 0..3u64 {
            copy.apply(table, &Key::from(k), 4, None).unwrap();
        }
        let request = ReclaimRequest {
            partition: 0,
            table,
            keys: vec![
                (Key::from(0), 4),
                (Key::from(1), 4),
                (Key::from(2), 5),
                (Key::from(3), 4),
            ],
        };
        let mut response = Vec::new();
        answer_check(&request, Some(&copy), |k| *k == Key::from(1), &mut response);
        // Applied and not waiting; waiting; not applied yet; never here (the floor, 0,
        // is below the delete).
        assert_eq!(
            decode_check_response(&response, 4),
            Some(vec![true, false, false, false])
        );
        response.clear();
        answer_check(&request, None, |_| false, &mut response);
        assert_eq!(decode_check_response(&response, 4), None);
        // RECLAIM raises each key's floor, then frees what is still at its version.
        let reclaim = ReclaimRequest {
            keys: vec![(Key::from(0), 4), (Key::from(2), 5)],
            ..request
        };
        assert_eq!(apply_reclaim(&reclaim, &copy), Some(1));
        // A floor it cannot raise (a version no object can have): nothing is freed.
        let forged = ReclaimRequest {
            keys: vec![(Key::from(1), 4), (Key::from(2), u64::MAX)],
            ..reclaim.clone()
        };
        assert_eq!(apply_reclaim(&forged, &copy), None);
        assert_eq!(copy.objects(table), Ok(2));
        assert_eq!(copy.floor(table, &Key::from(0)), Ok(4));
        // Key 2 stays (at 4, not 5), but its floor rose: its primary frees its own next.
        assert_eq!(copy.floor(table, &Key::from(2)), Ok(5));
        assert_eq!(copy.floor_max(table), Ok(5));
        assert_eq!(copy.objects(table), Ok(2));
        // Key 0 now reads at its floor, and a later write of it applies.
        let mut out = Vec::new();
        let read = copy.read(table, &Key::from(0), &mut out).unwrap().unwrap();
        assert_eq!((read.version, read.present), (4, false));
        assert_eq!(copy.apply(table, &Key::from(0), 6, Some(&[1; 8])), Ok(true));
    }

    proptest! {
        #[test]
        fn any_request_round_trips(
            partition in any::<u32>(),
            table in strategies::table(),
            keys in proptest::collection::vec((strategies::key(), any::<u64>()), 0..8),
        ) {
            let request = ReclaimRequest { partition, table, keys };
            let mut bytes = Vec::new();
            encode_reclaim(&request, &mut bytes);
            prop_assert_eq!(decode_reclaim(&bytes), Ok(request));
        }

        #[test]
        fn any_check_answer_round_trips(clear in proptest::option::of(proptest::collection::vec(any::<bool>(), 0..8))) {
            // The encoder's shape ([`answer_check`] reads a partition): the status, then
            // a byte per key.
            let mut bytes = Vec::new();
            match &clear {
                None => Answer::Refused.encode(&mut bytes),
                Some(clear) => {
                    Answer::Granted.encode(&mut bytes);
                    bytes.extend(clear.iter().map(|&c| u8::from(c)));
                }
            }
            let keys = clear.as_ref().map_or(0, Vec::len);
            prop_assert_eq!(decode_check_response(&bytes, keys), clear);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), keys in 0usize..8) {
            let _ = decode_reclaim(&bytes);
            let _ = decode_check_response(&bytes, keys);
        }
    }
}
