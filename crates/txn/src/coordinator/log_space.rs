//! Log space reservation (FaRM 4, "reservations"): a commit reserves a record in the log
//! of each of its backups before it locks anything, so a backup never refuses a record.

use ferrotx_exec::Co;

use super::{Abort, Coordinator};

/// Attempts at reserving log space before a commit gives up with [`Abort::LogFull`].
/// Each attempt after the first sends the full backups an explicit TRUNCATE (a round trip
/// that frees what finished meanwhile) or, if they are all on this node, yields.
const LOG_SPACE_ATTEMPTS_MAX: usize = 64;

/// This coordinator thread's records in one backup's log, as far as it knows.
#[derive(Default)]
struct BackupLog {
    /// Highest truncation mark the backup acknowledged: it holds no record up to it.
    acked_mark: u64,
    /// Counters of the records reserved there and not covered by `acked_mark`, ascending
    /// (counters are taken in reservation order).
    records: Vec<u64>,
}

/// Log space reservation (FaRM 4, "reservations"): the backup's log of this coordinator
/// thread holds at most `limit` records, so the coordinator counts, per backup node, the
/// records it may have there, and starts a commit only when every backup of the
/// transaction has room. A record counts from its reservation (before LOCK) until the
/// backup acknowledges a message carrying a truncation mark that covers it (the backup
/// applies a message's mark before appending its record, and only ever raises its mark),
/// or until its transaction aborts before COMMIT-BACKUP was sent. The count is an upper
/// bound of what the log holds, so the backup never refuses a record for lack of space.
pub(super) struct LogSpace {
    pub(super) limit: usize,
    /// By node id.
    backups: Vec<BackupLog>,
}

impl LogSpace {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit,
            backups: Vec::new(),
        }
    }

    fn backup(&mut self, node: u16) -> &mut BackupLog {
        let i = usize::from(node);
        if self.backups.len() <= i {
            self.backups.resize_with(i + 1, BackupLog::default);
        }
        &mut self.backups[i]
    }

    fn held(&self, node: u16) -> usize {
        self.backups
            .get(usize::from(node))
            .map_or(0, |b| b.records.len())
    }

    /// The nodes of `nodes` whose log has no room for one more record.
    pub(super) fn full<'a>(&'a self, nodes: &'a [u16]) -> impl Iterator<Item = u16> + 'a {
        nodes
            .iter()
            .copied()
            .filter(|&n| self.held(n) >= self.limit)
    }

    /// Reserves a record of transaction `counter` at each of `nodes` if all have room.
    pub(super) fn try_reserve(&mut self, nodes: &[u16], counter: u64) -> bool {
        if self.full(nodes).next().is_some() {
            return false;
        }
        for &node in nodes {
            let records = &mut self.backup(node).records;
            debug_assert!(records.last().is_none_or(|&c| c < counter));
            records.push(counter);
        }
        true
    }

    /// Returns the reservations of `counter` at `nodes`: its record was never sent.
    pub(super) fn release(&mut self, nodes: &[u16], counter: u64) {
        for &node in nodes {
            let records = &mut self.backup(node).records;
            if let Ok(i) = records.binary_search(&counter) {
                records.remove(i);
            }
        }
    }

    /// The backups holding records that `mark` covers and that they have not been told
    /// of: an idle coordinator sends them the mark (docs/recovery.md, "quiet").
    pub(super) fn behind(&self, mark: u64) -> Vec<u16> {
        self.backups
            .iter()
            .enumerate()
            .filter(|(_, b)| b.acked_mark < mark && b.records.first().is_some_and(|&c| c <= mark))
            .map(|(n, _)| n as u16)
            .collect()
    }

    /// `node` acknowledged a message carrying truncation mark `mark`.
    pub(super) fn acknowledged(&mut self, node: u16, mark: u64) {
        let backup = self.backup(node);
        if mark > backup.acked_mark {
            backup.acked_mark = mark;
            let covered = backup.records.partition_point(|&c| c <= mark);
            backup.records.drain(..covered);
        }
    }
}

impl Coordinator {
    /// Reserves a record at each of `backups` for a transaction about to commit, waiting
    /// while one of their logs is full; returns the transaction's counter, taken with the
    /// reservation (a waiting commit holds no counter, so it never holds the truncation
    /// mark back).
    pub(super) async fn reserve_log_space(&self, co: &Co, backups: &[u16]) -> Result<u64, Abort> {
        // Whether a reservation really failed (a pretended failure is not a wait).
        let mut waited = false;
        for attempt in 0..LOG_SPACE_ATTEMPTS_MAX {
            // Fault point: the first attempt finds the logs full although they have room,
            // so the commit takes the rarely taken path below (an explicit TRUNCATE to
            // every backup, then another attempt). Waiting for space is always allowed.
            let pretend_full = attempt == 0 && ferrotx_buggify::fires("txn.log_space.pretend_full");
            let counter = self.next_counter.get();
            if !pretend_full && self.log_space.borrow_mut().try_reserve(backups, counter) {
                self.next_counter.set(counter + 1);
                return Ok(counter);
            }
            if !pretend_full && !waited {
                waited = true;
                self.count(|s| s.log_space_waits += 1);
            }
            // Free what finished: an explicit TRUNCATE to the full backups (FaRM uses its
            // reservations of truncate records the same way). A remote one is also the
            // wait: a round trip during which this thread's earlier commits progress.
            let full: Vec<u16> = if pretend_full {
                backups.to_vec()
            } else {
                self.log_space.borrow().full(backups).collect()
            };
            self.send_truncate(co, &full, self.truncation_mark()).await;
            if full.iter().all(|&n| n == self.local.node()) {
                co.yield_now().await;
            }
        }
        self.count(|s| s.log_full_aborts += 1);
        Err(Abort::LogFull)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_space_is_reserved_per_backup_and_freed_by_acknowledged_marks() {
        let mut space = LogSpace::new(2);
        // Transaction 1 logs at nodes 1 and 2, transaction 2 at node 1 only.
        assert!(space.try_reserve(&[1, 2], 1));
        assert!(space.try_reserve(&[1], 2));
        // Node 1 is full: a third transaction there waits, nothing is reserved for it.
        assert_eq!(space.full(&[1, 2]).collect::<Vec<_>>(), vec![1]);
        assert!(!space.try_reserve(&[2, 1], 3));
        assert_eq!((space.held(1), space.held(2)), (2, 1));
        // A mark that covers nothing there frees nothing; acknowledgements are per node.
        space.acknowledged(1, 0);
        space.acknowledged(2, 1);
        assert_eq!((space.held(1), space.held(2)), (2, 0));
        // Node 1 acknowledges mark 1: transaction 1's record there is gone.
        space.acknowledged(1, 1);
        assert!(space.try_reserve(&[1, 2], 3));
        assert_eq!((space.held(1), space.held(2)), (2, 1));
        // An older mark arriving late changes nothing.
        space.acknowledged(1, 0);
        assert_eq!(space.held(1), 2);
        // Transaction 3 aborts before COMMIT-BACKUP: its reservations are returned.
        space.release(&[1, 2], 3);
        assert_eq!((space.held(1), space.held(2)), (1, 0));
        // A mark covering everything empties the node.
        space.acknowledged(1, 10);
        assert_eq!(space.held(1), 0);
        // No backups (a single replica): always room.
        assert!(space.try_reserve(&[], 4));
    }

    #[test]
    fn a_full_log_never_admits_more_than_its_limit() {
        // Random reservations, releases and acknowledgements: the count per node never
        // exceeds the limit and always covers every record not yet acknowledged.
        let mut space = LogSpace::new(3);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut logged: Vec<(u16, u64)> = Vec::new();
        let mut marks = [0u64; 4];
        for counter in 1..2000u64 {
            let nodes: Vec<u16> = (0..4u16).filter(|_| next() % 2 == 0).collect();
            if space.try_reserve(&nodes, counter) {
                if next() % 4 == 0 {
                    space.release(&nodes, counter);
                } else {
                    logged.extend(nodes.iter().map(|&n| (n, counter)));
                }
            }
            let node = (next() % 4) as u16;
            let mark = counter.saturating_sub(next() % 8);
            space.acknowledged(node, mark);
            marks[usize::from(node)] = marks[usize::from(node)].max(mark);
            for n in 0..4u16 {
                let outstanding = logged
                    .iter()
                    .filter(|&&(m, c)| m == n && c > marks[usize::from(n)])
                    .count();
                assert!(space.held(n) <= 3);
                assert_eq!(space.held(n), outstanding);
            }
        }
    }
}
