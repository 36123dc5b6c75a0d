//! Checkers of histories and final states, one file each. Each returns what it finds
//! wrong as values and never panics on a bad history.

mod graph;
pub mod list_append;
pub mod lost_write;
pub mod money;
pub mod replicas;
pub mod serializability;

/// Anything a workload's end checks find wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Not strictly serializable.
    Serializability(serializability::Violation),
    /// Money created or destroyed.
    Money(money::Violation),
    /// An acknowledged write lost (or a version invented).
    LostWrite(lost_write::Violation),
    /// A backup differs from its primary.
    Replica(replicas::Violation),
    /// A committed transaction saw two values written together differ.
    TagsDiffer {
        /// Its record id.
        id: u64,
    },
}
