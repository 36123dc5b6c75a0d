//! The commit of a transaction (FaRM 4, steps 1-5).

use ferrotx_store::{Key, TableId};
use ferrotx_wire::RequestType;

use super::execution::Txn;
use super::round::yes;
use super::{Abort, Placement, buggify_delay};
use crate::answer::Answer;

/// Longest a commit interrupted by a view change waits for recovery's decision before
/// it answers [`Abort::OutcomeUnknown`].
pub const RECOVERY_WAIT_NS: u64 = 3_000_000_000;
use crate::messages::{
    LockRecord, ReadItem, TxId, VERSION_ANY, Write, append_record_note, encode_record, encode_tx,
    encode_validate, record_note_len,
};

/// Times a COMMIT-PRIMARY or ABORT overtaken in the RPC layer is sent in all (see
/// `Txn::send_again_if_overtaken`): each overtaking takes a forged or broken request, so
/// a few tries get through; past them the objects stay locked until a configuration
/// change runs recovery.
const SENDS_IF_OVERTAKEN_MAX: usize = 4;

/// One read-write commit in progress: its id, where its messages go, and how far it
/// got. Each phase asserts that the ones before it finished.
struct Commit {
    tx: TxId,
    /// The truncation mark its records carry (FaRM 4 step 5).
    mark: u64,
    /// The written partitions, ascending.
    partitions: Vec<u32>,
    /// Their primaries, ascending and distinct.
    primaries: Vec<u16>,
    /// Their backups, ascending and distinct.
    backups: Vec<u16>,
    /// The primaries that granted LOCK (all of them once step 1 succeeded).
    locked: Vec<u16>,
    /// Whether step 2 found every read current.
    validated: bool,
    /// Backups that acknowledged COMMIT-BACKUP (all of them once step 3 succeeded).
    logged: usize,
}

/// Whether a write belongs in the message to primary `node`.
fn at_primary(placement: &dyn Placement, node: u16) -> impl Fn(&&Write) -> bool + Clone + '_ {
    move |w| placement.primary(w.partition) == node
}

/// Whether a write belongs in the record for backup `node`.
fn at_backup(placement: &dyn Placement, node: u16) -> impl Fn(&&Write) -> bool + Clone + '_ {
    move |w| placement.backups(w.partition).contains(&node)
}

impl Txn<'_> {
    /// Commits: FaRM's lock, validate, commit-backup, commit-primary (steps 1-4), after
    /// reserving log space at the backups. Truncation (step 5) rides on later
    /// commit-backup messages. A read-only transaction only validates its reads. An
    /// answer outside the protocol (a refusal, a malformed answer, a participant that
    /// restarted before logging the record) fails it with [`Abort::Protocol`], having
    /// committed nothing and released what it held.
    pub async fn commit(mut self) -> Result<(), Abort> {
        self.commit_and_finish().await
    }

    async fn commit_and_finish(&mut self) -> Result<(), Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        let result = self.commit_inner().await;
        // Fault point: the coordinator is slow to end the transaction after its last
        // phase, so its counter joins the truncation mark late (TRUNCATE, step 5, is held
        // back: backups keep the record logged and unapplied longer) and the application
        // hears of the outcome late.
        if ferrotx_buggify::fires("txn.commit.before_truncate") {
            buggify_delay(self.co).await;
        }
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

    /// The commit of a transaction that has not ended: a read-only one validates its
    /// reads; a read-write one is checked against the message limits, reserves log space
    /// (taking its id), then runs FaRM 4's steps 1-4 ([`Txn::lock`], [`Txn::validate`],
    /// [`Txn::commit_backup`], [`Txn::commit_primary`]); step 5 ([`Txn::truncate`])
    /// follows when the transaction finishes.
    async fn commit_inner(&mut self) -> Result<(), Abort> {
        assert!(!self.finished);
        assert!(
            self.tx.is_none(),
            "a transaction takes its id once, at commit"
        );
        let coordinator = self.coordinator;
        // Between NEW-CONFIG and NEW-CONFIG-COMMIT nothing commits: wait for the commit.
        // A partition with no copy takes no write. Both are refused before anything was
        // sent.
        if !coordinator.accepting.get()
            && !coordinator.wait_accepting(self.co, self.deadline_ns).await
        {
            return Err(Abort::Unavailable);
        }
        let placement_now = coordinator.placement();
        let placement = &*placement_now;
        // The view the placement belongs to: the transaction must be of this view, or its
        // messages would go to one view's nodes under another view's id.
        let view = coordinator.view.get();
        if self.only_in.is_some_and(|only| only != view) {
            // Its caller's reason to run it held in another view (`Txn::commit_only_in`);
            // from here on the commit is of this view (it aborts if the view changes
            // before COMMIT-BACKUP, and this view's successor recovers it after).
            return Err(Abort::Unavailable);
        }
        if self
            .writes
            .iter()
            .any(|w| placement.primary(w.partition) == super::NO_PRIMARY)
        {
            return Err(Abort::Unavailable);
        }
        let read_only: Vec<ReadItem> = self
            .reads
            .iter()
            .filter(|r| self.index.write(&self.writes, r.table, &r.key).is_none())
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
            // Fault point: a pause between the last read and VALIDATE, the window in
            // which a writer may change what was read.
            if ferrotx_buggify::fires("txn.commit.before_validate_reads") {
                buggify_delay(self.co).await;
            }
            return if self.validate_reads(&read_only).await {
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

        // Every message of the commit is checked against the limits before anything is
        // reserved or locked: a refusal after LOCK would leave locks behind.
        let too_large = |len: usize| len > ferrotx_wire::MAX_MESSAGE_BYTES as usize;
        if self.writes.len() > crate::messages::ITEMS_MAX
            || partitions.len() > crate::messages::ITEMS_MAX
            || primaries.iter().any(|&n| {
                too_large(
                    LockRecord::encoded_len(
                        partitions.len(),
                        self.writes.iter().filter(at_primary(placement, n)),
                    ) + record_note_len(&self.note),
                )
            })
            || backups.iter().any(|&n| {
                too_large(
                    LockRecord::encoded_len(
                        partitions.len(),
                        self.writes.iter().filter(at_backup(placement, n)),
                    ) + record_note_len(&self.note),
                )
            })
        {
            return Err(Abort::TooLarge);
        }

        // Log space at every backup, and with it the transaction's id.
        let counter = coordinator.reserve_log_space(self.co, &backups).await?;
        let tx = TxId {
            view: coordinator.view.get(),
            node: coordinator.local.node(),
            thread: coordinator.local.thread(),
            incarnation: coordinator.incarnation,
            counter,
        };
        self.tx = Some(tx);
        let mut commit = Commit {
            tx,
            mark: coordinator.truncation_mark(),
            partitions,
            primaries,
            backups,
            locked: Vec::new(),
            validated: false,
            logged: 0,
        };
        let abort = |commit: &Commit, abort: Abort| {
            // No record was sent: the reservations are free again.
            coordinator
                .log_space
                .borrow_mut()
                .release(&commit.backups, counter);
            abort
        };
        if tx.view != view {
            // The view changed while log space was reserved: the primaries and backups
            // computed above are the old view's, and the new one may have others (a
            // promoted primary, a backup being filled) that would never see this commit.
            // Nothing was sent: abort, as a view change before LOCK does. (Found by a
            // review: smallbank --membership --nodes 5 --seed 61 with crash and buggify
            // lost a write, its LOCK sent to no primary.)
            return Err(abort(&commit, Abort::Unavailable));
        }
        // Fault point: a pause between reserving log space and LOCK, so the reads may
        // go stale and the reservations are held longer.
        if ferrotx_buggify::fires("txn.commit.before_lock") {
            buggify_delay(self.co).await;
        }
        let result = self.lock(&mut commit).await;
        if coordinator.view() != tx.view {
            // The view changed before any COMMIT-BACKUP: recovery can only abort it
            // (and releases what the old view's LOCKs hold). Nothing took effect.
            return Err(abort(&commit, Abort::Unavailable));
        }
        if let Err(refused) = result {
            return Err(abort(&commit, refused));
        }
        // Fault point: a pause with every lock held, before VALIDATE: readers of the
        // written objects find them locked and retry, other commits' LOCKs are refused,
        // and the objects read may change before they are validated.
        if ferrotx_buggify::fires("txn.commit.after_lock") {
            buggify_delay(self.co).await;
        }
        // Fault point: the coordinator gives up after LOCK (FaRM lets it abort any time
        // before COMMIT-BACKUP): the locks are released and the transaction aborts as if
        // in conflict.
        if ferrotx_buggify::fires("txn.commit.abort_after_lock") {
            self.release(&commit.locked).await;
            return Err(abort(&commit, Abort::Conflict));
        }
        let result = self.validate(&mut commit, &read_only).await;
        if coordinator.view() != tx.view {
            return Err(abort(&commit, Abort::Unavailable));
        }
        if let Err(conflict) = result {
            return Err(abort(&commit, conflict));
        }
        // Fault point: a pause between VALIDATE and COMMIT-BACKUP: the reads were found
        // current and may change now (the transaction serializes at its locks, so that is
        // allowed), and the locks are held longer.
        if ferrotx_buggify::fires("txn.commit.after_validate") {
            buggify_delay(self.co).await;
        }
        // Fault point: the coordinator gives up after VALIDATE, the last moment it may:
        // no record was sent, so the locks are released and the reservations returned.
        if ferrotx_buggify::fires("txn.commit.abort_after_validate") {
            self.release(&commit.locked).await;
            return Err(abort(&commit, Abort::Conflict));
        }
        // The records go out now: an abort from here on keeps the reservations, and from
        // a view change on the outcome is recovery's.
        let logged_everywhere = self.commit_backup(&mut commit).await?;
        if !logged_everywhere || coordinator.view() != tx.view {
            return self.await_recovery(&commit).await;
        }
        // Fault point: a pause between COMMIT-BACKUP and COMMIT-PRIMARY: the transaction
        // is committed (every backup logged it) but nothing is installed, and every
        // written object stays locked.
        if ferrotx_buggify::fires("txn.commit.after_commit_backup") {
            buggify_delay(self.co).await;
        }
        if !self.commit_primary(&commit).await && coordinator.view() != tx.view {
            return self.await_recovery(&commit).await;
        }
        Ok(())
    }

    /// The outcome of a commit a view change interrupted after COMMIT-BACKUP went out:
    /// recovery's decision ([`crate::recovery`]), waited for up to [`RECOVERY_WAIT_NS`].
    async fn await_recovery(&mut self, commit: &Commit) -> Result<(), Abort> {
        let coordinator = self.coordinator;
        let deadline = (self.co.now_ns() + RECOVERY_WAIT_NS).min(self.deadline_ns);
        match coordinator
            .await_recovery(self.co, commit.tx, &commit.partitions, deadline)
            .await
        {
            Some(true) => Ok(()),
            // Aborted by recovery after views this thread skipped (its life suspended,
            // then readmitted): those views' recovery may have committed it and every
            // replica forgotten that, so this abort may be a second decision taken on
            // "unknown" votes. A commit decision cannot be one: it needs a commit-backup
            // record or an install, which a forgotten abort leaves nowhere. Decided
            // all the same: the transaction ends.
            Some(false) if commit.tx.view < coordinator.skipped_to.get() => {
                Err(Abort::OutcomeUnknown)
            }
            // Aborted by recovery: nothing took effect.
            Some(false) => Err(Abort::Unavailable),
            None => {
                // Recovery ends it later; it must not join the truncation mark now
                // (truncation would apply its logged writes).
                self.undecided = true;
                Err(Abort::OutcomeUnknown)
            }
        }
    }

    /// FaRM 4 step 1, LOCK: one message to every primary of a written partition, carrying
    /// the writes there with the versions read. A primary locks every object at its
    /// version or none, and answers with the versions it locked at, which blind writes
    /// ([`Txn::put`]) learn here for their commit-backup records. If a primary refused,
    /// the others' locks are released (ABORT) and the transaction aborts.
    async fn lock(&mut self, commit: &mut Commit) -> Result<(), Abort> {
        assert_eq!(self.tx, Some(commit.tx));
        assert!(!self.writes.is_empty());
        assert!(!commit.primaries.is_empty());
        assert!(commit.locked.is_empty(), "LOCK is sent once");
        let coordinator = self.coordinator;
        let placement_now = coordinator.placement();
        let placement = &*placement_now;
        let Commit {
            tx,
            mark,
            partitions,
            primaries,
            ..
        } = &*commit;
        coordinator.count(|s| s.lock_messages += primaries.len() as u64);
        let blind = self.writes.iter().any(|w| w.version == VERSION_ANY);
        let mut versions: Vec<(u16, Vec<u64>)> = Vec::new();
        // A grant whose versions cannot be used: the primary may hold the locks, so it is
        // counted as locked (and released below), and the commit fails.
        let mut malformed = false;
        // A primary past its memory limit refused a write that would grow it.
        let mut out_of_memory = false;
        let age = self.age;
        let lock_type = match age {
            None => RequestType::Lock,
            Some(_) => RequestType::LockAged,
        };
        let answers = {
            let writes = &self.writes;
            let note = &self.note;
            coordinator
                .round_results(
                    self.co,
                    lock_type,
                    primaries,
                    |node, buffer| {
                        if let Some(age) = age {
                            age.encode(buffer);
                        }
                        encode_record(
                            tx,
                            *mark,
                            partitions,
                            writes.iter().filter(at_primary(placement, node)),
                            buffer,
                        );
                        append_record_note(note, buffer);
                    },
                    |node, result| {
                        let answer = match result {
                            Ok(answer) => answer,
                            // A later request took the primary's RPC slot (forged, or a
                            // broken peer's): this LOCK may have run and hold locks there,
                            // so it is counted as locked, released, and the commit fails.
                            Err(ferrotx_rpc::RpcError::Overtaken) => {
                                malformed = true;
                                return true;
                            }
                            Err(_) => return false,
                        };
                        let locked_at = match Answer::decode_prefix(answer) {
                            Ok((Answer::Granted, locked_at)) => locked_at,
                            Ok((Answer::OutOfMemory, rest)) => {
                                out_of_memory |= rest.is_empty();
                                return false;
                            }
                            _ => return false,
                        };
                        if blind {
                            let expected = writes.iter().filter(at_primary(placement, node));
                            if locked_at.len() != expected.count() * 8 {
                                malformed = true;
                                return true;
                            }
                            let locked_at = locked_at
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
        commit.locked = answers
            .iter()
            .filter(|(_, granted)| *granted)
            .map(|(n, _)| *n)
            .collect();
        if commit.locked.len() < commit.primaries.len() {
            self.release(&commit.locked).await;
            return Err(if malformed {
                Abort::Protocol
            } else if out_of_memory {
                Abort::OutOfMemory
            } else {
                Abort::Conflict
            });
        }
        for (node, locked_at) in versions {
            let here = self
                .writes
                .iter_mut()
                .filter(|w| placement.primary(w.partition) == node);
            for (write, version) in here.zip(locked_at) {
                // A primary locks at the version read, or for a blind write at the one it
                // has; VERSION_ANY is never an object's version.
                let read = write.version;
                if version == VERSION_ANY || (read != VERSION_ANY && read != version) {
                    malformed = true;
                    break;
                }
                write.version = version;
            }
        }
        if malformed {
            self.release(&commit.locked).await;
            return Err(Abort::Protocol);
        }
        assert_eq!(commit.locked.len(), commit.primaries.len());
        Ok(())
    }

    /// FaRM 4 step 2, VALIDATE: once every lock is held (the serialization point), one
    /// message to every primary of a partition read but not written: each object read is
    /// still at the version read and unlocked. If not, the locks are released (ABORT) and
    /// the transaction aborts.
    async fn validate(&mut self, commit: &mut Commit, read_only: &[ReadItem]) -> Result<(), Abort> {
        assert!(!commit.validated, "VALIDATE is sent once");
        assert_eq!(
            commit.locked.len(),
            commit.primaries.len(),
            "validation follows the serialization point: every lock held"
        );
        if !read_only.is_empty() && !self.validate_reads(read_only).await {
            self.release(&commit.locked).await;
            return Err(Abort::Conflict);
        }
        commit.validated = true;
        Ok(())
    }

    /// FaRM 4 step 3, COMMIT-BACKUP: one message to every backup of a written partition,
    /// the same record as LOCK's with the versions locked, appended to this coordinator
    /// thread's log there (whose space was reserved before LOCK). The messages carry the
    /// truncation mark, so each acknowledgement also frees the space of the records it
    /// covers.
    ///
    /// If a backup certainly did not log the record (it refused it, the call was never
    /// sent, or it restarted, losing its log), the transaction cannot commit: it is
    /// aborted, with ABORT to every primary (releasing the locks) and to every backup
    /// (dropping the record where it was logged, so truncation never applies it), and it
    /// fails with [`Abort::Protocol`]. The records were sent, so their reservations stay
    /// counted until a truncation mark covers them. If a backup may have logged it (the
    /// view changed while the call was out, or the backup answered "undecided" from a
    /// newer view), the outcome is recovery's: `Ok(false)`, and the caller waits for the
    /// decision.
    async fn commit_backup(&mut self, commit: &mut Commit) -> Result<bool, Abort> {
        assert_eq!(
            commit.locked.len(),
            commit.primaries.len(),
            "records are logged only with every written object locked"
        );
        assert!(commit.validated, "records are logged only after validation");
        assert_eq!(commit.logged, 0, "COMMIT-BACKUP is sent once");
        debug_assert!(
            self.writes.iter().all(|w| w.version != VERSION_ANY),
            "every write carries the version it was locked at"
        );
        debug_assert!(
            self.writes.iter().all(|w| self
                .read_version(w.table, &w.key)
                .is_none_or(|v| v == w.version)),
            "the versions locked are the versions read"
        );
        let coordinator = self.coordinator;
        let placement_now = coordinator.placement();
        let placement = &*placement_now;
        let Commit {
            tx,
            mark,
            partitions,
            backups,
            ..
        } = &*commit;
        coordinator.count(|s| s.commit_backup_messages += backups.len() as u64);
        // Backups that certainly did not log the record: a refusal in this view, a call
        // never sent, or a restarted backup (whose log died with its earlier life). The
        // others that did not answer "logged" (the view changed while the call was out,
        // or the backup's view is newer: "undecided") may have logged it.
        let mut not_logged = 0;
        let answers = coordinator
            .round_results(
                self.co,
                RequestType::CommitBackup,
                backups,
                |node, buffer| {
                    encode_record(
                        tx,
                        *mark,
                        partitions,
                        self.writes.iter().filter(at_backup(placement, node)),
                        buffer,
                    );
                    append_record_note(&self.note, buffer);
                },
                |_, result| {
                    use ferrotx_rpc::RpcError;
                    let certain_no = match result {
                        Ok(answer) => !matches!(
                            Answer::decode(answer),
                            Ok(Answer::Granted | Answer::Undecided)
                        ),
                        // It may have been logged (before a later request took its slot).
                        Err(RpcError::ConfigurationChanged | RpcError::Overtaken) => false,
                        Err(_) => true,
                    };
                    not_logged += usize::from(certain_no);
                    result.is_ok_and(Answer::is_granted)
                },
            )
            .await;
        let mut logged = 0;
        {
            // A backup that logged the record also applied the mark it carried.
            let mut space = coordinator.log_space.borrow_mut();
            for &(node, yes) in &answers {
                if yes {
                    space.acknowledged(node, *mark);
                    logged += 1;
                }
            }
        }
        let missing = commit.backups.len() - logged;
        if missing > 0 && (not_logged < missing || coordinator.view() != tx.view) {
            // A backup did not answer (the call failed: its view changed) or answered
            // "undecided" (a newer view there): it may have logged the record, and
            // recovery in the next view decides the transaction (the caller waits).
            commit.logged = logged;
            return Ok(false);
        }
        if logged < commit.backups.len() {
            let mut holders: Vec<u16> = commit.locked.clone();
            holders.extend_from_slice(&commit.backups);
            holders.sort_unstable();
            holders.dedup();
            if !self.release(&holders).await || coordinator.view() != tx.view {
                // Some holder may keep its lock or record into the next view, whose
                // recovery then decides: the outcome is recovery's.
                return Ok(false);
            }
            return Err(Abort::Protocol);
        }
        commit.logged = logged;
        Ok(true)
    }

    /// FaRM 4 step 4, COMMIT-PRIMARY: once every backup logged the record, one message to
    /// every primary that locked: install the writes, bump the versions, unlock. The
    /// commit is reported once the primaries acknowledged (FaRM reports at the first;
    /// with batches the coroutine resumes when all have).
    async fn commit_primary(&self, commit: &Commit) -> bool {
        assert_eq!(
            commit.logged,
            commit.backups.len(),
            "COMMIT-PRIMARY follows every backup's acknowledgement"
        );
        let mut all = true;
        assert_eq!(commit.locked.len(), commit.primaries.len());
        assert!(commit.validated);
        let tx = commit.tx;
        let mut primaries = &commit.locked[..];
        // Fault point: FaRM tells the application at the first primary's acknowledgement
        // and the others install later. Here the first primary is sent COMMIT-PRIMARY on
        // its own, then a pause, then the rest: meanwhile one primary shows the new
        // values unlocked while the others still hold theirs locked (a reader must retry
        // those, never return their old values).
        if primaries.len() > 1 && ferrotx_buggify::fires("txn.commit.between_commit_primaries") {
            let (first, rest) = primaries.split_at(1);
            all &= self
                .send_again_if_overtaken(RequestType::CommitPrimary, &tx, first)
                .await;
            buggify_delay(self.co).await;
            primaries = rest;
        }
        all &= self
            .send_again_if_overtaken(RequestType::CommitPrimary, &tx, primaries)
            .await;
        all
    }

    /// Sends COMMIT-PRIMARY or ABORT (`request_type`) of `tx` to `nodes`: true if every
    /// one acknowledged. One overtaken in the RPC layer (`RpcError::Overtaken`: a forged
    /// or broken request took its slot, so it may not have run) is sent again, at most
    /// `SENDS_IF_OVERTAKEN_MAX` times in all: not run, it would leave the transaction's
    /// objects locked there, and both are idempotent (run again, they find nothing locked
    /// and acknowledge all the same).
    async fn send_again_if_overtaken(
        &self,
        request_type: RequestType,
        tx: &TxId,
        nodes: &[u16],
    ) -> bool {
        assert!(
            matches!(
                request_type,
                RequestType::CommitPrimary | RequestType::Abort
            ),
            "only COMMIT-PRIMARY and ABORT are sent again"
        );
        let mut nodes = nodes.to_vec();
        let mut all = true;
        for _ in 0..SENDS_IF_OVERTAKEN_MAX {
            let mut overtaken = Vec::new();
            let answers = self
                .coordinator
                .round_results(
                    self.co,
                    request_type,
                    &nodes,
                    |_, buffer| encode_tx(tx, buffer),
                    |node, result| match result {
                        Ok(answer) => Answer::is_granted(answer),
                        Err(ferrotx_rpc::RpcError::Overtaken) => {
                            overtaken.push(node);
                            false
                        }
                        Err(_) => false,
                    },
                )
                .await;
            all &= answers
                .iter()
                .all(|(node, ok)| *ok || overtaken.contains(node));
            if overtaken.is_empty() {
                return all;
            }
            nodes = overtaken;
        }
        false
    }

    /// FaRM 4 step 5, TRUNCATE, lazily: the transaction has ended (committed at every
    /// primary, or aborted), so its counter may join this thread's truncation mark, which
    /// later COMMIT-BACKUP messages (or an explicit TRUNCATE) carry to the backups; they
    /// then apply the logged writes and free the records. A transaction that took no id
    /// (read-only, or ended before its commit reserved log space) has nothing to truncate.
    pub(super) fn truncate(&self) {
        assert!(self.finished, "only an ended transaction is truncated");
        if self.undecided {
            return;
        }
        if let Some(tx) = self.tx {
            self.coordinator.truncation.borrow_mut().finish(tx.counter);
            // A decision recovery kept for this commit, which ended without waiting for
            // it (every primary acknowledged before the view changed).
            let mut outcomes = self.coordinator.outcomes.borrow_mut();
            if !outcomes.is_empty() {
                outcomes.remove(&tx);
            }
        }
    }

    /// Whether a VALIDATE message would carry more items than a message may.
    fn validation_too_large(&self, items: &[ReadItem]) -> bool {
        if items.len() <= crate::messages::ITEMS_MAX {
            return false;
        }
        let placement_now = self.coordinator.placement();
        let placement = &*placement_now;
        let mut nodes: Vec<u16> = items
            .iter()
            .map(|r| placement.primary(r.partition))
            .collect();
        nodes.sort_unstable();
        nodes
            .chunk_by(|a, b| a == b)
            .any(|same| same.len() > crate::messages::ITEMS_MAX)
    }

    /// Whether every object of `items` is still at the version read and unlocked at its
    /// primary (VALIDATE, FaRM 4 step 2): the check of read-write transactions after
    /// locking, and the whole commit of read-only ones.
    async fn validate_reads(&self, items: &[ReadItem]) -> bool {
        let placement_now = self.coordinator.placement();
        let placement = &*placement_now;
        let mut nodes: Vec<u16> = items
            .iter()
            .map(|r| placement.primary(r.partition))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let age = self.age;
        let validate_type = match age {
            None => RequestType::Validate,
            Some(_) => RequestType::ValidateAged,
        };
        let answers = self
            .coordinator
            .round(
                self.co,
                validate_type,
                &nodes,
                |node, buffer| {
                    if let Some(age) = age {
                        age.encode(buffer);
                    }
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

    /// Releases what the transaction holds at `nodes` (ABORT): locks at primaries, and its
    /// logged record at backups. The way out of steps 1 to 3.
    async fn release(&self, nodes: &[u16]) -> bool {
        let Some(tx) = self.tx else { return true };
        // Fault point: a pause between deciding to abort and ABORT: the transaction holds
        // its locks (and its record, if logged) longer than it needs to, so other
        // transactions find its objects locked and readers retry.
        if ferrotx_buggify::fires("txn.commit.before_release") {
            buggify_delay(self.co).await;
        }
        self.send_again_if_overtaken(RequestType::Abort, &tx, nodes)
            .await
    }
}
