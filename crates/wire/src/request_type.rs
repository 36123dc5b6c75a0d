//! The registry of request types: every RPC a ferrotx cluster speaks, in one table.
//!
//! A message header carries its request type as one byte ([`crate::MessageHeader`]), and
//! the RPC engine keys its handler table by that byte without knowing what it means, so
//! that tests and tools can run an engine on its own with types of their choosing. The
//! cluster's own protocol, whatever layer sends it, is listed here and nowhere else:
//! every handler a node registers and every request it sends names a [`RequestType`].
//! Values not in the table belong to no node; tests and the simulator's RPC workload use
//! some of them on engines that run no participant.
//!
//! The values are the wire format: never renumber one (the fuzz corpora and any running
//! cluster hold them); a new type takes the next free value.

/// Why a byte is not a [`RequestType`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
#[error("request type {0} is not in the registry")]
pub struct UnknownRequestType(pub u8);

/// Writes the table: the enum, its `name`, `ALL` and the total decoder `TryFrom<u8>`,
/// from one list of `Variant = value, "name", doc` rows (as quinn-proto's `frame_types!`).
macro_rules! request_types {
    ($($(#[doc = $doc:literal])+ $variant:ident = $value:literal, $name:literal;)+) => {
        /// A request type of the cluster's protocol (see the module's documentation).
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        #[repr(u8)]
        pub enum RequestType {
            $($(#[doc = $doc])+ $variant = $value,)+
        }

        impl RequestType {
            /// Every request type, in the table's order.
            pub const ALL: &'static [RequestType] = &[$(Self::$variant,)+];

            /// The name the protocol's documents use (FaRM's, where it has one).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }
        }

        impl TryFrom<u8> for RequestType {
            type Error = UnknownRequestType;

            fn try_from(value: u8) -> Result<Self, UnknownRequestType> {
                match value {
                    $($value => Ok(Self::$variant),)+
                    _ => Err(UnknownRequestType(value)),
                }
            }
        }
    };
}

request_types! {
    // The RPC engine's own (crates/rpc).
    /// Opens a session: the engine answers it itself, and refuses a handler for it.
    Connect = 0, "CONNECT";

    // The commit protocol, FaRM section 4 (crates/txn, `messages`).
    /// Read one object from its primary.
    Read = 10, "READ";
    /// Lock written objects at a primary (FaRM's LOCK record).
    Lock = 11, "LOCK";
    /// Validate objects read but not written.
    Validate = 12, "VALIDATE";
    /// Append a transaction's writes to the coordinator's log at a backup.
    CommitBackup = 13, "COMMIT-BACKUP";
    /// Install a locked transaction's writes at a primary and unlock.
    CommitPrimary = 14, "COMMIT-PRIMARY";
    /// Release a transaction's locks at a primary.
    Abort = 15, "ABORT";
    /// A coordinator's truncation mark on its own, for when no commit-backup carries it
    /// (an idle coordinator flushing its last transactions to the backups' copies).
    Truncate = 16, "TRUNCATE";
    /// Visit objects of one table at a partition's primary from a cursor, outside any
    /// transaction (Redis's SCAN and KEYS).
    Scan = 17, "SCAN";
    /// Count the present objects of one table at a partition's primary, outside any
    /// transaction (Redis's DBSIZE).
    Count = 18, "COUNT";

    // Transaction-state recovery, FaRM section 5.3 (crates/txn, `recovery`).
    /// A backup's records of transactions older than the view, to the partition's
    /// primary (FaRM's NEED-RECOVERY, carrying the records: FETCH-TX-STATE and
    /// SEND-TX-STATE are folded into it).
    NeedRecovery = 19, "NEED-RECOVERY";
    /// A primary's copy of a record to a backup that lacked it.
    ReplicateTxState = 20, "REPLICATE-TX-STATE";
    /// A partition's vote on a recovering transaction, to its recovery coordinator.
    RecoveryVote = 21, "RECOVERY-VOTE";
    /// A recovery coordinator asks a partition's primary for its vote.
    RequestVote = 22, "REQUEST-VOTE";
    /// The decision: commit at every replica.
    CommitRecovery = 23, "COMMIT-RECOVERY";
    /// The decision: abort at every replica.
    AbortRecovery = 24, "ABORT-RECOVERY";
    /// Every replica acknowledged the decision: forget it.
    TruncateRecovery = 25, "TRUNCATE-RECOVERY";

    // Operations shipped to their keys' primary (crates/txn, `ship`).
    /// Run a registered procedure at the primary of its partition. The procedure is named
    /// by an id inside the request, chosen by the layer that registers it (the Redis front
    /// end, the benchmarks' KV workload), not by this table.
    Ship = 26, "SHIP";

    // Contention (crates/txn, `reservation`).
    /// LOCK of a transaction retried after it lost: its age, then the LOCK record. The
    /// primary also reserves the written objects for it.
    LockAged = 27, "LOCK-AGED";
    /// VALIDATE of a retried transaction: its age, then the VALIDATE request. The primary
    /// also reserves the objects for it.
    ValidateAged = 28, "VALIDATE-AGED";

    // Data recovery, FaRM section 5.4 (crates/txn, `refill`).
    /// A page of a partition's objects from its primary, for a backup being filled.
    Fetch = 29, "FETCH";

    // Tombstone reclamation (crates/txn, `reclaim`).
    /// Is each named key's delete applied here, with no older write of it waiting?
    ReclaimCheck = 30, "RECLAIM-CHECK";
    /// Raise these keys' floors, then free their tombstones.
    Reclaim = 31, "RECLAIM";
}

impl From<RequestType> for u8 {
    fn from(request_type: RequestType) -> u8 {
        request_type as u8
    }
}

impl std::fmt::Display for RequestType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_are_the_wire_format() {
        // Written out once more on purpose: a change here is a change of the wire format.
        let expected: [(RequestType, u8); 23] = [
            (RequestType::Connect, 0),
            (RequestType::Read, 10),
            (RequestType::Lock, 11),
            (RequestType::Validate, 12),
            (RequestType::CommitBackup, 13),
            (RequestType::CommitPrimary, 14),
            (RequestType::Abort, 15),
            (RequestType::Truncate, 16),
            (RequestType::Scan, 17),
            (RequestType::Count, 18),
            (RequestType::NeedRecovery, 19),
            (RequestType::ReplicateTxState, 20),
            (RequestType::RecoveryVote, 21),
            (RequestType::RequestVote, 22),
            (RequestType::CommitRecovery, 23),
            (RequestType::AbortRecovery, 24),
            (RequestType::TruncateRecovery, 25),
            (RequestType::Ship, 26),
            (RequestType::LockAged, 27),
            (RequestType::ValidateAged, 28),
            (RequestType::Fetch, 29),
            (RequestType::ReclaimCheck, 30),
            (RequestType::Reclaim, 31),
        ];
        assert_eq!(RequestType::ALL.len(), expected.len());
        for (request_type, value) in expected {
            assert_eq!(u8::from(request_type), value);
        }
    }

    #[test]
    fn names_are_distinct() {
        let names: std::collections::BTreeSet<_> =
            RequestType::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names.len(), RequestType::ALL.len());
    }

    #[test]
    fn every_byte_decodes_to_its_type_or_is_refused() {
        for byte in 0..=u8::MAX {
            match RequestType::try_from(byte) {
                Ok(request_type) => assert_eq!(u8::from(request_type), byte),
                Err(refused) => {
                    assert_eq!(refused, UnknownRequestType(byte));
                    assert!(RequestType::ALL.iter().all(|&t| u8::from(t) != byte));
                }
            }
        }
    }

    #[test]
    fn every_type_round_trips() {
        for &request_type in RequestType::ALL {
            assert_eq!(
                RequestType::try_from(u8::from(request_type)),
                Ok(request_type)
            );
        }
    }
}
