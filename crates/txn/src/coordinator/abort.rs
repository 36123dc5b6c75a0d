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
    /// The transaction already ended; begin a new one.
    #[error("the transaction already ended")]
    Finished,
    /// A participant refused a message or answered it in a way the protocol does not
    /// allow, or restarted during the commit (a bug, a configuration mismatch, or a node
    /// that lost its state). The transaction did not commit: what it had locked or logged
    /// was released.
    #[error("aborted: a participant refused the protocol")]
    Protocol,
}
