//! The commit of a transaction (FaRM 4, steps 1-5).

use ferrotx_store::{Key, TableId};

use super::Abort;
use super::execution::Txn;
use super::round::yes;
use crate::messages::{
    LockRecord, ReadItem, TxId, VERSION_ANY, Write, encode_record, encode_tx, encode_validate,
    request_type,
};
use crate::participant::Participant;

impl Txn<'_> {
    /// Commits: FaRM's lock, validate, commit-backup, commit-primary (steps 1-4), after
    /// reserving log space at the backups. Truncation (step 5) rides on later
    /// commit-backup messages. A read-only transaction only validates its reads.
    pub async fn commit(mut self) -> Result<(), Abort> {
        self.commit_and_finish().await
    }

    async fn commit_and_finish(&mut self) -> Result<(), Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        let result = self.commit_inner().await;
        self.finish(result.is_ok());
        result
    }

    /// [`Txn::commit`], returning the version each write installed (for histories: a
    /// blind write learns its version only at LOCK).
    pub async fn commit_installed(mut self) -> Result<Vec<(TableId, Key, u64)>, Abort> {
        self.commit_and_finish().await?;
        Ok(self
            .writes
            .iter()
            .map(|w| (w.table, w.key, w.version + 1))
            .collect())
    }

    async fn commit_inner(&mut self) -> Result<(), Abort> {
        let coordinator = self.coordinator;
        let placement = &*coordinator.placement;
        let read_only: Vec<ReadItem> = self
            .reads
            .iter()
            .filter(|r| {
                !self
                    .writes
                    .iter()
                    .any(|w| w.table == r.table && w.key == r.key)
            })
            .copied()
            .collect();
        if self.validation_too_large(&read_only) {
            return Err(Abort::TooLarge);
        }
        if self.writes.is_empty() {
            // Read-only: serializable at its last read if every read is still current.
            if read_only.len() <= 1 {
                return Ok(());
            }
            return if self.validate(&read_only).await {
                Ok(())
            } else {
                Err(Abort::Conflict)
            };
        }
        let mut partitions: Vec<u32> = self.writes.iter().map(|w| w.partition).collect();
        partitions.sort_unstable();
        partitions.dedup();
        let mut primaries: Vec<u16> = partitions.iter().map(|&p| placement.primary(p)).collect();
        primaries.sort_unstable();
        primaries.dedup();
        let mut backups: Vec<u16> = partitions
            .iter()
            .flat_map(|&p| placement.backups(p).iter().copied())
            .collect();
        backups.sort_unstable();
        backups.dedup();
        let at_primary = |node: u16| move |w: &&Write| placement.primary(w.partition) == node;
        let at_backup =
            |node: u16| move |w: &&Write| placement.backups(w.partition).contains(&node);

        // Every message of the commit is checked against the limits before anything is
        // reserved or locked: a refusal after LOCK would leave locks behind.
        let too_large = |len: usize| len > ferrotx_wire::MAX_MESSAGE_BYTES as usize;
        if self.writes.len() > crate::messages::ITEMS_MAX
            || partitions.len() > crate::messages::ITEMS_MAX
            || primaries.iter().any(|&n| {
                too_large(LockRecord::encoded_len(
                    partitions.len(),
                    self.writes.iter().filter(at_primary(n)),
                ))
            })
            || backups.iter().any(|&n| {
                too_large(LockRecord::encoded_len(
                    partitions.len(),
                    self.writes.iter().filter(at_backup(n)),
                ))
            })
        {
            return Err(Abort::TooLarge);
        }

        // Log space at every backup, and with it the transaction's id.
        let counter = coordinator.reserve_log_space(self.co, &backups).await?;
        let tx = TxId {
            configuration: coordinator.configuration,
            node: coordinator.local.node(),
            thread: coordinator.local.thread(),
            incarnation: coordinator.incarnation,
            counter,
        };
        self.tx = Some(tx);
        let mark = coordinator.truncation_mark();
        let abort = |abort: Abort| {
            // No record was sent: the reservations are free again.
            coordinator
                .log_space
                .borrow_mut()
                .release(&backups, counter);
            abort
        };

        // 1. LOCK at every written primary. Each answers with the versions it locked at,
        // which blind writes (`Txn::put`) learn here for their commit-backup records.
        coordinator.count(|s| s.lock_messages += primaries.len() as u64);
        let blind = self.writes.iter().any(|w| w.version == VERSION_ANY);
        let mut versions: Vec<(u16, Vec<u64>)> = Vec::new();
        let answers = {
            let writes = &self.writes;
            coordinator
                .round(
                    self.co,
                    request_type::LOCK,
                    Participant::lock,
                    &primaries,
                    |node, buffer| {
                        encode_record(
                            &tx,
                            mark,
                            &partitions,
                            writes.iter().filter(at_primary(node)),
                            buffer,
                        )
                    },
                    |node, answer| {
                        if answer.first() != Some(&1) {
                            return false;
                        }
                        if blind {
                            let locked_at = answer[1..]
                                .chunks_exact(8)
                                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                                .collect();
                            versions.push((node, locked_at));
                        }
                        true
                    },
                )
                .await
        };
        let locked: Vec<u16> = answers
            .iter()
            .filter(|(_, granted)| *granted)
            .map(|(n, _)| *n)
            .collect();
        if locked.len() < primaries.len() {
            self.release(&locked).await;
            return Err(abort(Abort::Conflict));
        }
        for (node, locked_at) in versions {
            let here = self
                .writes
                .iter_mut()
                .filter(|w| placement.primary(w.partition) == node);
            for (write, version) in here.zip(locked_at) {
                write.version = version;
            }
        }
        let writes = &self.writes;
        let record = |writes_here: &dyn Fn(&&Write) -> bool, buffer: &mut Vec<u8>| {
            encode_record(
                &tx,
                mark,
                &partitions,
                writes.iter().filter(writes_here),
                buffer,
            );
        };
        // 2. VALIDATE what was read but not written.
        if !read_only.is_empty() && !self.validate(&read_only).await {
            self.release(&locked).await;
            return Err(abort(Abort::Conflict));
        }
        // 3. COMMIT-BACKUP at every backup of a written partition.
        coordinator.count(|s| s.commit_backup_messages += backups.len() as u64);
        let answers = coordinator
            .round(
                self.co,
                request_type::COMMIT_BACKUP,
                Participant::commit_backup,
                &backups,
                |node, buffer| record(&at_backup(node), buffer),
                yes,
            )
            .await;
        assert!(
            answers.iter().all(|(_, logged)| *logged),
            "a backup refused a commit record: the configuration is inconsistent"
        );
        {
            let mut space = coordinator.log_space.borrow_mut();
            for &(node, _) in &answers {
                space.acknowledged(node, mark);
            }
        }
        // 4. COMMIT-PRIMARY. Reported once the primaries acknowledged (FaRM reports at the
        // first; with batches the coroutine resumes when all have).
        coordinator
            .round(
                self.co,
                request_type::COMMIT_PRIMARY,
                Participant::commit_primary,
                &locked,
                |_, buffer| encode_tx(&tx, buffer),
                yes,
            )
            .await;
        Ok(())
    }

    /// Whether a VALIDATE message would carry more items than a message may.
    fn validation_too_large(&self, items: &[ReadItem]) -> bool {
        if items.len() <= crate::messages::ITEMS_MAX {
            return false;
        }
        let placement = &*self.coordinator.placement;
        let mut nodes: Vec<u16> = items
            .iter()
            .map(|r| placement.primary(r.partition))
            .collect();
        nodes.sort_unstable();
        nodes
            .chunk_by(|a, b| a == b)
            .any(|same| same.len() > crate::messages::ITEMS_MAX)
    }

    async fn validate(&self, items: &[ReadItem]) -> bool {
        let placement = &*self.coordinator.placement;
        let mut nodes: Vec<u16> = items
            .iter()
            .map(|r| placement.primary(r.partition))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let answers = self
            .coordinator
            .round(
                self.co,
                request_type::VALIDATE,
                Participant::validate,
                &nodes,
                |node, buffer| {
                    encode_validate(
                        items
                            .iter()
                            .filter(|r| placement.primary(r.partition) == node),
                        buffer,
                    )
                },
                yes,
            )
            .await;
        answers.iter().all(|(_, valid)| *valid)
    }

    /// Releases the locks taken at `nodes` (ABORT).
    async fn release(&self, nodes: &[u16]) {
        let Some(tx) = self.tx else { return };
        self.coordinator
            .round(
                self.co,
                request_type::ABORT,
                Participant::abort,
                nodes,
                |_, buffer| encode_tx(&tx, buffer),
                yes,
            )
            .await;
    }
}
