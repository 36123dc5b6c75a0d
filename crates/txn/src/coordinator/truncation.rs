//! The truncation mark (FaRM 4 step 5): the counter up to which every transaction of
//! this coordinator thread has finished, which backups may apply and free.

use std::collections::BTreeSet;

use ferrotx_exec::Co;
use ferrotx_wire::RequestType;

use super::Coordinator;
use super::round::yes;
use crate::messages::encode_truncate;

/// Tracks which transactions of this coordinator thread have finished, to compute the
/// truncation mark (FaRM 4 step 5): every counter up to the mark is done.
#[derive(Default)]
pub(super) struct Truncation {
    pub(super) mark: u64,
    done_above_mark: BTreeSet<u64>,
}

impl Truncation {
    pub(super) fn finish(&mut self, counter: u64) {
        self.done_above_mark.insert(counter);
        while self.done_above_mark.remove(&(self.mark + 1)) {
            self.mark += 1;
        }
    }

    /// Whether the transaction of `counter` has ended (it joined the mark, or is done
    /// above it). One that took its id and has not ended is still committing, or its
    /// client was told "outcome unknown" (recovery ends it).
    pub(super) fn ended(&self, counter: u64) -> bool {
        counter <= self.mark || self.done_above_mark.contains(&counter)
    }
}

impl Coordinator {
    /// The current truncation mark.
    pub fn truncation_mark(&self) -> u64 {
        self.truncation.borrow().mark
    }

    /// Sends this coordinator's truncation mark to `nodes`, so their backup copies apply
    /// every finished transaction (normally the mark rides on later commits).
    pub async fn flush_truncation(&self, co: &Co, nodes: &[u16]) {
        self.send_truncate(co, nodes, self.truncation_mark()).await;
    }

    /// Sends TRUNCATE with `mark` to `nodes` and records their acknowledgements.
    pub(super) async fn send_truncate(&self, co: &Co, nodes: &[u16], mark: u64) {
        let id = (self.local.node(), self.local.thread(), self.incarnation);
        self.count(|s| s.truncate_messages += nodes.len() as u64);
        let answers = self
            .round(
                co,
                RequestType::Truncate,
                nodes,
                |_, buffer| encode_truncate(id, mark, buffer),
                yes,
            )
            .await;
        let mut space = self.log_space.borrow_mut();
        for (node, acknowledged) in answers {
            if acknowledged {
                space.acknowledged(node, mark);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_truncation_mark_covers_only_finished_prefixes() {
        let mut t = Truncation::default();
        t.finish(2);
        assert_eq!(t.mark, 0);
        t.finish(1);
        assert_eq!(t.mark, 2);
        t.finish(4);
        t.finish(3);
        assert_eq!(t.mark, 4);
        assert!(t.done_above_mark.is_empty());
    }
}
