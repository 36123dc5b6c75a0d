//! What a participant writes to its node's disk (issue 32), and how COMMIT-BACKUP waits
//! for it in `sync` mode.
//!
//! Sans-IO: the participant appends records to a [`CommitLog`] that its node gives it
//! (a per-worker write-ahead log synced by the node's sync thread, `ferrotx_node`'s group
//! commit; a simulated disk in the simulator) and asks it how far it is durable. It never
//! waits on the disk itself.
//!
//! - COMMIT-BACKUP: the backup appends the record it logs ([`RECORD_COMMIT_BACKUP`]: the
//!   bytes the request carried) before it keeps it in memory. In `sync` mode
//!   ([`LogMode::wait`]) its answer is deferred ([`ferrotx_rpc::Engine::register_deferred`])
//!   until the log is durable past the record: the coordinator sends COMMIT-PRIMARY only
//!   after every backup answered, so no write is installed at a primary (visible) before
//!   it is on the disk of every backup, which is FaRM's rule for its NVRAM. A
//!   coordinator's COMMIT-BACKUP to its own node waits the same way
//!   ([`Participant::wait_durable`]).
//! - LOCK (`sync` mode): the primary appends the LOCK record ([`RECORD_LOCK`]) and answers
//!   at once. It installs the writes (at COMMIT-PRIMARY, or when recovery decides a
//!   commit) only once that record is durable, and COMMIT-PRIMARY's answer waits for
//!   it: the record's sync runs while the backups log theirs, so it rarely adds to the
//!   commit's latency. With no backups (f = 0) this is what makes a commit durable.
//! - COMMIT-PRIMARY: in `flush` mode the primary appends the LOCK record it installs
//!   ([`RECORD_COMMIT_PRIMARY`]); in `sync` mode a marker that it installed
//!   ([`RECORD_INSTALLED`]), and the install waits for the marker too: a write readers
//!   saw is never one a restart finds only locked here (in doubt, its commit resting on
//!   the backups' records alone).
//! - ABORT: a backup that had logged the record, or a primary that had logged its LOCK
//!   record, appends its id ([`RECORD_ABORT`]), so that a replay never applies it.
//! - Recovery's decisions ([`RECORD_DECIDED`]) on what a replica held.
//!
//! A record that cannot be appended (a full disk, a log whose sync failed) makes
//! COMMIT-BACKUP refuse with the reason: the coordinator aborts the transaction and its
//! client gets an error; nothing is acknowledged that is not on disk.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use ferrotx_exec::{Co, Shared, Signal};
use ferrotx_rpc::{Deferred, Engine, HandlerError};
use ferrotx_wire::RequestType;

use crate::answer::Answer;
use crate::participant::Participant;

/// A record kind: a backup's COMMIT-BACKUP record (the request's bytes).
pub const RECORD_COMMIT_BACKUP: u8 = 1;
/// A record kind: the LOCK record a primary installed at COMMIT-PRIMARY.
pub const RECORD_COMMIT_PRIMARY: u8 = 2;
/// A record kind: an ABORT of a transaction whose COMMIT-BACKUP record was logged here
/// (the message's bytes: its transaction id).
pub const RECORD_ABORT: u8 = 3;
/// A record kind (`sync` mode): the LOCK record a primary locked, with the versions it
/// locked at. FaRM writes LOCK records into its primaries' non-volatile logs; here the
/// primary installs only once its LOCK record is durable, so every write visible at a
/// primary is on its disk, whether COMMIT-PRIMARY or recovery installs it and whether
/// or not the partition has backups.
pub const RECORD_LOCK: u8 = 4;
/// A record kind (`sync` mode): the primary installed the transaction whose LOCK record
/// it logged (the COMMIT-PRIMARY message's bytes: its transaction id).
pub const RECORD_INSTALLED: u8 = 5;

/// A record kind: recovery's decision on a transaction this replica held something of
/// (a record, a lock), so that a restart replays it as decided rather than asking again
/// (a transaction aborted by recovery must never commit at a later one): 1 for commit,
/// 0 for abort, then the DECISION message's bytes ([`crate::recovery::encode_decision`]).
pub const RECORD_DECIDED: u8 = 6;

/// A record kind: a fill of a partition (data recovery) starts here from nothing, in a
/// view: [u32 partition][u64 view]. On replay, writes to the partition from
/// transactions of older views are the old copy's, superseded by the fill's pages.
pub const RECORD_FILL_BEGIN: u8 = 7;
/// A record kind: one page a fill copied into a partition: [u32 partition][u64 view]
/// [u16 table][u8 1 for the table's floors, 0 for objects] then the FETCH answer's bytes.
pub const RECORD_FILL: u8 = 8;
/// A record kind: a committed record recovery applied here that this node had not
/// logged (REPLICATE-TX-STATE brought it): the record's bytes.
pub const RECORD_APPLIED: u8 = 9;

/// A record kind: an object loaded before any transaction ran (a benchmark's or the
/// simulator's data, at version 1): [u32 partition][u16 table][u16 key length][key]
/// [value].
pub const RECORD_LOAD: u8 = 10;

/// A record kind: one page of a checkpoint of this node's copies
/// ([`crate::checkpoint`]): [u64 round][u32 partition][u16 table][u8 1 for the table's
/// floors, 0 for objects] then a FETCH answer's bytes, as a fill's page.
pub const RECORD_CHECKPOINT_PAGE: u8 = 11;
/// A record kind: this worker's part of checkpoint round `round` is written
/// ([`crate::checkpoint`]): [u64 round][u64 covered: every record of this log up to this
/// position is in the checkpoint][u32 count] then `count` truncation marks, each
/// [u16 node][u16 thread][u64 incarnation][u64 mark]. A round is complete once every
/// worker's log holds its record.
pub const RECORD_CHECKPOINT: u8 = 12;

/// How often a waiting answer looks at how far the log is durable. A sync takes about
/// 0.1 to 0.3 ms on this project's machines, so this adds at most a fifth of one.
pub const DURABLE_POLL_NS: u64 = 20_000;

/// How often a `flush`-mode wait for the log ([`Participant::wait_durable`]: a fill's
/// pages, a checkpoint's end) looks again: a hundredth of the default interval.
pub const FLUSH_POLL_NS: u64 = 1_000_000;

/// Why a record could not be appended, or why nothing more will be durable: the reason
/// a COMMIT-BACKUP refused carries to its coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogFailed(pub &'static str);

/// The disk a participant logs to: one log per worker thread.
pub trait CommitLog {
    /// Appends a record of `kind`; returns its position (LSN), which grows by one with
    /// each record from 1. It is durable once [`CommitLog::durable`] reaches it.
    fn append(&mut self, kind: u8, payload: &[u8]) -> Result<u64, LogFailed>;

    /// Writes what was appended since the last call (a log may buffer appends and write
    /// them together: the worker's loop calls this once per iteration). Nothing is
    /// durable before it is written. A failure shows in the next append or in
    /// [`CommitLog::failed`].
    fn write(&mut self) {}

    /// The highest position durable at `now_ns` (the worker's clock: the simulator's
    /// disk is timed by it; a real one ignores it).
    fn durable(&mut self, now_ns: u64) -> u64;

    /// Why nothing more will be durable (a sync failed: the kernel may have dropped the
    /// pages it did not write, so no retry), if so.
    fn failed(&self) -> Option<LogFailed>;

    /// Records up to position `covered` are no longer needed (a complete checkpoint holds
    /// what they did): the log may drop them, in whole segments. Never blocks the
    /// worker (a real log hands the files to its sync thread to remove).
    fn truncate(&mut self, covered: u64) {
        let _ = covered;
    }
}

/// How a participant uses its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogMode {
    /// COMMIT-BACKUP answers once its record is durable (`sync` mode); otherwise at once
    /// (`flush`: the node's sync thread syncs at least every interval).
    pub wait: bool,
}

/// An answer that waits for the log.
struct Waiting {
    lsn: u64,
    token: Deferred,
    answer: Result<Answer, HandlerError>,
    /// A COMMIT-PRIMARY whose install waits: if the view changes first, the install is
    /// dropped (recovery decides the transaction, as for any commit message of an older
    /// view) and the answer is [`Answer::Undecided`].
    install_of: Option<crate::messages::TxId>,
}

/// A participant's log and what waits for it.
pub(crate) struct Durable {
    pub(crate) log: Box<dyn CommitLog>,
    pub(crate) mode: LogMode,
    /// The position the answer of the handler now running must wait for (0: none).
    pub(crate) wait_for: u64,
    /// The position of the last record appended.
    pub(crate) last_lsn: u64,
    waiting: VecDeque<Waiting>,
    /// Locks of aborted transactions whose LOCK records were logged, held until the
    /// record of the abort is durable (its position, the LOCK record): until then a
    /// replay finds the transaction in doubt, so no later transaction may lock its
    /// objects at the versions it locked (a restart would find both in doubt, in
    /// different workers' logs, with no order between them: `power` seeds).
    pub(crate) releases: VecDeque<(u64, Vec<u8>)>,
    /// Transactions to install once their LOCK record and INSTALLED marker are durable,
    /// by the later one's position, and
    /// whether recovery decided them (installed whatever view follows: a decision is
    /// final, and the next view's recovery finds it decided and installs nothing) or
    /// COMMIT-PRIMARY asked (dropped if the view changes first: recovery decides it).
    pub(crate) installs: VecDeque<(u64, crate::messages::TxId, bool)>,
    /// Rung when something starts waiting.
    arrived: Rc<Signal>,
    /// Rung when the log became durable further, or failed: coroutines of this worker
    /// waiting in [`Participant::wait_durable`] (a coordinator's own COMMIT-BACKUP and
    /// COMMIT-PRIMARY), how many, and the durable position last rung for.
    advanced: Rc<Signal>,
    local_waiters: usize,
    rung_at: u64,
    /// The worker's executor, to ring `arrived` from a handler.
    shared: Weak<Shared>,
}

impl Durable {
    pub(crate) fn new(log: Box<dyn CommitLog>, mode: LogMode, callers: usize) -> Self {
        Self {
            log,
            mode,
            wait_for: 0,
            last_lsn: 0,
            waiting: VecDeque::new(),
            installs: VecDeque::new(),
            releases: VecDeque::new(),
            arrived: Rc::new(Signal::new(callers)),
            advanced: Rc::new(Signal::new(callers)),
            local_waiters: 0,
            rung_at: 0,
            shared: Weak::new(),
        }
    }

    /// Wakes the coroutine that answers and installs ([`Participant::run_durable_answers`]).
    pub(crate) fn ring(&self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.notify_all(&self.arrived);
        }
    }
}

/// Counters of a participant's log.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct LogStats {
    /// Records appended, and their payloads' bytes.
    pub appended: u64,
    pub appended_bytes: u64,
    /// Of those bytes, what checkpoints wrote ([`crate::checkpoint`]: not counted toward
    /// the next round, or a copy larger than the threshold would checkpoint for ever).
    pub checkpoint_bytes: u64,
    /// Appends refused (a full disk, a failed log).
    pub append_failures: u64,
    /// Answers that waited for the log (`sync` mode), and the most waiting at once.
    pub answers_waited: u64,
    pub waiting_high_water: u64,
}

/// Appends a record to `durable`'s log, counting it in `stats`.
pub(crate) fn append(
    durable: &mut Durable,
    stats: &mut LogStats,
    kind: u8,
    payload: &[u8],
) -> Result<u64, LogFailed> {
    match durable.log.append(kind, payload) {
        Ok(lsn) => {
            durable.last_lsn = lsn;
            stats.appended += 1;
            stats.appended_bytes += payload.len() as u64;
            Ok(lsn)
        }
        Err(e) => {
            stats.append_failures += 1;
            Err(e)
        }
    }
}

impl Participant {
    /// Logs what this participant commits to `log` (see the module). Before
    /// [`Participant::register`] and [`Participant::register_durable`].
    pub fn set_log(&mut self, log: Box<dyn CommitLog>, mode: LogMode, callers: usize) {
        self.durable = Some(Durable::new(log, mode, callers));
    }

    /// Whether COMMIT-BACKUP answers wait for the disk.
    pub fn waits_for_disk(&self) -> bool {
        self.durable.as_ref().is_some_and(|d| d.mode.wait)
    }

    /// This participant's log counters (zero without a log).
    pub fn log_stats(&self) -> LogStats {
        self.log_stats
    }

    /// In `sync` mode, keeps the objects of the aborted transaction whose LOCK record
    /// `bytes` was logged locked until the log is durable past `lsn` (the record of the
    /// abort), then unlocks them ([`Durable::releases`], which takes `bytes`): `None` if
    /// it did so. `Some(bytes)` back (the caller unlocks now) if the record is durable
    /// already, or the log does not wait.
    pub(crate) fn release_after(&mut self, lsn: u64, bytes: Vec<u8>) -> Option<Vec<u8>> {
        let now = self.now_ns();
        let Some(durable) = self.durable.as_mut().filter(|d| d.mode.wait) else {
            return Some(bytes);
        };
        if lsn == 0 || durable.log.durable(now) >= lsn {
            return Some(bytes);
        }
        durable.releases.push_back((lsn, bytes));
        durable.ring();
        None
    }

    /// Appends a record; its position (0 without a log), or why not.
    pub(crate) fn log_append(&mut self, kind: u8, payload: &[u8]) -> Result<u64, LogFailed> {
        match &mut self.durable {
            Some(durable) => append(durable, &mut self.log_stats, kind, payload),
            None => Ok(0),
        }
    }

    /// Logs an object loaded into `partition` before any transaction ran
    /// ([`RECORD_LOAD`]): loading goes around the commit protocol, so a restart finds it
    /// only here.
    pub fn log_load(
        &mut self,
        partition: u32,
        table: ferrotx_store::TableId,
        key: &ferrotx_store::Key,
        value: &[u8],
    ) {
        if self.durable.is_none() {
            return;
        }
        let key = key.as_bytes();
        let mut payload = Vec::with_capacity(8 + key.len() + value.len());
        payload.extend_from_slice(&partition.to_le_bytes());
        payload.extend_from_slice(&table.0.to_le_bytes());
        payload.extend_from_slice(&(key.len() as u16).to_le_bytes());
        payload.extend_from_slice(key);
        payload.extend_from_slice(value);
        let _ = self.log_append(RECORD_LOAD, &payload);
    }

    /// Logs that a fill of `partition` starts from nothing in `view`
    /// ([`RECORD_FILL_BEGIN`]).
    pub(crate) fn log_fill_begin(&mut self, partition: u32, view: ferrotx_wire::ViewId) {
        if self.durable.is_some() {
            let mut payload = [0u8; 12];
            payload[..4].copy_from_slice(&partition.to_le_bytes());
            payload[4..].copy_from_slice(&view.0.to_le_bytes());
            let _ = self.log_append(RECORD_FILL_BEGIN, &payload);
        }
    }

    /// Logs a page a fill of `partition` copied in `view` from `table`: the FETCH
    /// answer `answer`, of the table's floors or of objects ([`RECORD_FILL`]). Its position (0 without a log); `u64::MAX` if
    /// it could not be logged, so that the fill is never counted done.
    pub(crate) fn log_fill(
        &mut self,
        partition: u32,
        view: ferrotx_wire::ViewId,
        table: ferrotx_store::TableId,
        floors: bool,
        answer: &[u8],
    ) -> u64 {
        if self.durable.is_none() {
            return 0;
        }
        let mut payload = Vec::with_capacity(15 + answer.len());
        payload.extend_from_slice(&partition.to_le_bytes());
        payload.extend_from_slice(&view.0.to_le_bytes());
        payload.extend_from_slice(&table.0.to_le_bytes());
        payload.push(u8::from(floors));
        payload.extend_from_slice(answer);
        self.log_append(RECORD_FILL, &payload).unwrap_or(u64::MAX)
    }

    /// Writes what this participant logged since the last call ([`CommitLog::write`]):
    /// the worker's loop calls it once per iteration, so that the records of one
    /// iteration cost one write.
    pub fn write_log(&mut self) {
        if let Some(durable) = &mut self.durable {
            durable.log.write();
        }
    }

    /// Takes the position the last handler's answer must wait for (0: none).
    pub(crate) fn take_wait(&mut self) -> u64 {
        self.durable
            .as_mut()
            .map_or(0, |d| std::mem::take(&mut d.wait_for))
    }

    /// In `sync` mode, answers COMMIT-BACKUP once its record is durable,
    /// COMMIT-PRIMARY once the LOCK record it installs and its marker are, and recovery's
    /// COMMIT-RECOVERY and ABORT-RECOVERY once what they logged is: replaces the handlers
    /// [`Participant::register`] installed with ones that defer, and a background
    /// coroutine of the worker ([`Participant::run_durable_answers`]) installs and answers.
    /// Without a waiting log it does nothing.
    pub fn register_durable(
        participant: &Rc<RefCell<Self>>,
        engine: &mut Engine,
        shared: &Rc<Shared>,
    ) {
        if !participant.borrow().waits_for_disk() {
            return;
        }
        if let Some(durable) = participant.borrow_mut().durable.as_mut() {
            durable.shared = Rc::downgrade(shared);
        }
        for (request_type, handler) in [
            (
                RequestType::CommitBackup,
                Self::commit_backup as crate::participant::ParticipantHandler,
            ),
            (RequestType::CommitPrimary, Self::commit_primary),
            // Recovery's decisions: a client hears the outcome only once every replica
            // has it on disk (its install marker, decision and the records it applied),
            // as COMMIT-BACKUP's record is before an acknowledgement (`power` seed 919
            // of smallbank: a commit recovery decided reached its client, the power
            // went before the primary's decision was durable, and a restart without the
            // backup that held the record aborted it).
            (RequestType::CommitRecovery, Self::commit_recovery),
            (RequestType::AbortRecovery, Self::abort_recovery),
        ] {
            Self::register_waiting(participant, engine, request_type, handler);
        }
    }

    /// Registers `handler` for `request_type` with its answer deferred until the log is
    /// durable past what the handler asked to wait for ([`Participant::take_wait`]).
    fn register_waiting(
        participant: &Rc<RefCell<Self>>,
        engine: &mut Engine,
        request_type: RequestType,
        handler: crate::participant::ParticipantHandler,
    ) {
        let state = participant.clone();
        let mut response = Vec::with_capacity(8);
        engine.register_deferred(
            request_type.into(),
            Box::new(move |request, token| {
                let mut p = state.borrow_mut();
                response.clear();
                p.take_wait();
                let result = p.handle(handler, request.payload, &mut response);
                let lsn = p.take_wait();
                let install_of = (request_type == RequestType::CommitPrimary && lsn > 0)
                    .then(|| crate::messages::decode_tx(request.payload).ok())
                    .flatten();
                let answer = result.and_then(|()| {
                    response
                        .first()
                        .and_then(|&b| Answer::from_u8(b).ok())
                        .ok_or(HandlerError("malformed answer"))
                });
                let Some(durable) = &mut p.durable else {
                    return;
                };
                durable.waiting.push_back(Waiting {
                    lsn,
                    token,
                    answer,
                    install_of,
                });
                let waiting = durable.waiting.len() as u64;
                durable.ring();
                p.log_stats.answers_waited += 1;
                p.log_stats.waiting_high_water = p.log_stats.waiting_high_water.max(waiting);
            }),
        );
    }

    /// Answers the COMMIT-BACKUPs that wait for the log, in order, as it becomes durable,
    /// runs the installs that wait for it, and wakes this worker's coroutines waiting
    /// for it; refuses the answers if the log failed. The one coroutine of the worker
    /// that looks at the log (every [`DURABLE_POLL_NS`] while anything waits, never
    /// otherwise), forever.
    pub async fn run_durable_answers(participant: Rc<RefCell<Self>>, co: Co) {
        let Some(arrived) = participant
            .borrow()
            .durable
            .as_ref()
            .map(|d| d.arrived.clone())
        else {
            return;
        };
        let mut bytes = Vec::with_capacity(8);
        loop {
            let more = {
                let mut p = participant.borrow_mut();
                // Installs first: an answer that waited for one follows it.
                let upto = {
                    let durable = p.durable.as_mut().expect("checked above");
                    let upto = durable.log.durable(co.now_ns());
                    if durable.local_waiters > 0
                        && (upto > durable.rung_at || durable.log.failed().is_some())
                    {
                        durable.rung_at = upto;
                        co.notify_all(&durable.advanced);
                    }
                    upto
                };
                while let Some(&(lsn, tx, decided)) =
                    p.durable.as_ref().and_then(|d| d.installs.front())
                {
                    if lsn > upto {
                        break;
                    }
                    p.durable
                        .as_mut()
                        .expect("checked above")
                        .installs
                        .pop_front();
                    // A view changed meanwhile: the transaction is recovery's now
                    // (this primary votes commit-primary for it: its marker is
                    // logged), unless recovery decided it already.
                    if decided || tx.view >= p.view() {
                        // Its INSTALLED marker is logged already.
                        p.install_now(&tx, false);
                    }
                }
                while let Some((lsn, _)) = p.durable.as_ref().and_then(|d| d.releases.front()) {
                    if *lsn > upto {
                        break;
                    }
                    let (_, bytes) = p
                        .durable
                        .as_mut()
                        .expect("checked above")
                        .releases
                        .pop_front()
                        .expect("not empty");
                    let record = crate::messages::RecordView::parse(&bytes).expect("locked");
                    for write in record.writes() {
                        if let Some(partition) = p.store_any(write.partition) {
                            let _ = partition.unlock(write.table, &write.key);
                        }
                    }
                }
                let view = p.view();
                let durable = p.durable.as_mut().expect("checked above");
                if durable.waiting.is_empty()
                    && durable.releases.is_empty()
                    && durable.installs.is_empty()
                    && durable.local_waiters == 0
                {
                    None
                } else {
                    let failed = durable.log.failed();
                    let mut engine = co.engine();
                    while let Some(front) = durable.waiting.front() {
                        if failed.is_none() && front.lsn > upto {
                            break;
                        }
                        let w = durable.waiting.pop_front().expect("not empty");
                        let answer = match (failed, w.answer) {
                            (Some(LogFailed(why)), _) if w.lsn > upto => Err(HandlerError(why)),
                            (_, Ok(_)) if w.install_of.is_some_and(|tx| tx.view < view) => {
                                Ok(Answer::Undecided)
                            }
                            (_, answer) => answer,
                        };
                        bytes.clear();
                        let response = answer.map(|a| {
                            a.encode(&mut bytes);
                            &bytes[..]
                        });
                        engine.respond(w.token, response);
                    }
                    Some(
                        !durable.waiting.is_empty()
                            || !durable.installs.is_empty()
                            || !durable.releases.is_empty()
                            || durable.local_waiters > 0,
                    )
                }
            };
            match more {
                None => co.wait(&arrived).await,
                Some(true) => co.sleep_until(co.now_ns() + DURABLE_POLL_NS).await,
                Some(false) => {}
            }
        }
    }

    /// Waits until this participant's log is durable up to `lsn` (a coordinator's
    /// COMMIT-BACKUP to its own node, in `sync` mode). False if the log failed first.
    pub async fn wait_durable(participant: &RefCell<Self>, co: &Co, lsn: u64) -> bool {
        loop {
            let advanced = {
                let mut p = participant.borrow_mut();
                let Some(durable) = p.durable.as_mut() else {
                    return true;
                };
                if durable.log.durable(co.now_ns()) >= lsn {
                    return true;
                }
                if durable.log.failed().is_some() {
                    return false;
                }
                if !durable.mode.wait {
                    // `flush` mode: no coroutine answers from the log, so none rings
                    // `advanced`; the sync thread makes the log durable within its
                    // interval, which a fill or a checkpoint waits out by polling.
                    None
                } else {
                    // The answering coroutine looks for both of us.
                    durable.local_waiters += 1;
                    durable.ring();
                    Some(durable.advanced.clone())
                }
            };
            let Some(advanced) = advanced else {
                co.sleep_until(co.now_ns() + FLUSH_POLL_NS).await;
                continue;
            };
            co.wait(&advanced).await;
            if let Some(durable) = participant.borrow_mut().durable.as_mut() {
                durable.local_waiters -= 1;
            }
        }
    }
}
