//! Why a transaction did not commit, or why an operation was refused.

use ferrotx_store::StoreError;

/// Why a transaction did not commit, or why an operation was refused.
///
/// The refusals of bad input ([`Abort::Refused`], [`Abort::ReadOnly`],
/// [`Abort::KeyExists`], [`Abort::TooLarge`]) change nothing: the store is untouched, and
/// a transaction refused an operation during execution stays usable (a refused commit
/// has ended it).
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum Abort {
    /// An object read or written changed, or was locked, before the commit point.
    #[error("aborted: conflict with another transaction")]
    Conflict,
    /// An object stayed locked through every read attempt.
    #[error("aborted: an object stayed locked")]
    Locked,
    /// Bad input: unknown table, a key or value that does not fit; nothing was changed.
    #[error("refused: {0}")]
    Refused(StoreError),
    /// A write, insert or delete in a read-only transaction; nothing was changed.
    #[error("refused: a write in a read-only transaction")]
    ReadOnly,
    /// An insert of a key that exists; nothing was changed.
    #[error("refused: insert of a key that exists")]
    KeyExists,
    /// The transaction's writes do not fit one message of the commit protocol.
    #[error("refused: the transaction is larger than the commit log allows")]
    TooLarge,
    /// A backup's log of this coordinator thread stayed full: earlier transactions of the
    /// thread are still committing (a peer unreachable). Nothing was locked.
    #[error("aborted: no log space at a backup (earlier commits of this thread are stuck)")]
    LogFull,
    /// A primary of a key it writes is past its memory limit (`maxmemory`), and the
    /// write would grow memory (a new key, or a value larger than the room it has).
    /// Nothing was changed; deletes and writes that do not grow memory still run.
    #[error("refused: out of memory (a primary of a written key is past its memory limit)")]
    OutOfMemory,
    /// The transaction already ended; begin a new one.
    #[error("the transaction already ended")]
    Finished,
    /// A participant refused a message or answered it in a way the protocol does not
    /// allow, or restarted during the commit (a bug, a configuration mismatch, or a node
    /// that lost its state). The transaction did not commit: what it had locked or logged
    /// was released.
    #[error("aborted: a participant refused the protocol")]
    Protocol,
    /// The cluster is changing configuration, or a key's partition has no copy left, or
    /// this node does not serve (its lease ran out). Nothing was changed: retry later.
    #[error("unavailable: the cluster is reconfiguring or a partition has no copy")]
    Unavailable,
    /// A configuration change interrupted the commit after its records went to the
    /// backups, and transaction-state recovery did not decide it in time: it may have
    /// committed or not. Retrying may apply it twice.
    #[error(
        "outcome unknown: a failure interrupted the commit and recovery has not decided it yet"
    )]
    OutcomeUnknown,
}

impl Abort {
    /// The abort for a request that failed in the RPC layer before the commit point: a
    /// configuration change or a non-member is [`Abort::Unavailable`] (retry), anything
    /// else [`Abort::Protocol`].
    pub(crate) fn from_rpc(error: ferrotx_rpc::RpcError) -> Self {
        use ferrotx_rpc::RpcError;
        match error {
            RpcError::ConfigurationChanged | RpcError::NotSent | RpcError::NotMember => {
                Abort::Unavailable
            }
            _ => Abort::Protocol,
        }
    }
}

/// The node of the primary of a partition with no copy left ([`Placement::primary`]).
///
/// [`Placement::primary`]: crate::coordinator::Placement::primary
pub const NO_PRIMARY: u16 = u16::MAX;
