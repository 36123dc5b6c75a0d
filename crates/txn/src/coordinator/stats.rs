//! The coordinator's counters.

/// Counters of one coordinator thread.
#[derive(Clone, Copy, Default, Debug)]
pub struct CoordinatorStats {
    /// Transactions committed (read-write and read-only).
    pub committed: u64,
    /// Transactions that ended without committing (conflicts, refusals at commit,
    /// abandoned ones).
    pub aborted: u64,
    /// Single-key lock-free reads ([`Coordinator::read_one`]) that returned a value or
    /// absence.
    pub single_reads: u64,
    /// LOCK messages sent (one per written primary of a committing transaction).
    pub lock_messages: u64,
    /// COMMIT-BACKUP messages sent (one per backup node of a committing transaction).
    pub commit_backup_messages: u64,
    /// Explicit TRUNCATE messages sent (flushes and log-space waits).
    pub truncate_messages: u64,
    /// Commits that found a backup's log full and had to wait.
    pub log_space_waits: u64,
    /// Commits refused with [`Abort::LogFull`] after waiting.
    pub log_full_aborts: u64,
    /// Operations shipped to their primary that came back with an outcome.
    pub shipped: u64,
    /// As the primary: shipped operations run and answered.
    pub ship_operations: u64,
    /// As the primary: batches of shipped operations committed (or read); operations /
    /// batches is how many each commit combined.
    pub ship_batches: u64,
    /// As the primary: attempts of batches that aborted on a conflict and were retried.
    pub ship_batch_retries: u64,
    /// As the primary: requests answered from a remembered result (asked again after a
    /// configuration change).
    pub ship_answered_again: u64,
    /// As the primary: requests answered "retry" (not the primary, or aborted by a
    /// configuration change).
    pub ship_retries_asked: u64,
    /// As the primary: requests asked again in a configuration that gave their keys
    /// several primaries, unknown here, answered that they cannot run at one primary.
    pub ship_split: u64,
    /// As the primary: requests refused without running, as a malformed request
    /// would be: malformed, an unknown procedure, a partition that does not exist, or
    /// one another thread serves.
    pub ship_refused: u64,
}
