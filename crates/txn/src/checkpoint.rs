//! Checkpoints of a node's copies into its logs, and the truncation of what they cover
//! (issue 32).
//!
//! Without checkpoints a node's logs grow without bound and a restart replays every one
//! of them. A checkpoint round copies every partition copy the node holds into its own
//! logs, page by page, as a fill copies a partition from its primary (consistent by
//! version: each object at some version, every later write in a later record), while
//! the workers go on serving; once the round is complete, each worker's log drops the
//! segments the round covers. No fork, no pause: the memory a round costs is one page.
//!
//! A round, run by one coroutine per worker ([`run_checkpoints`]) over the state the node's
//! workers share ([`Checkpoints`]):
//!
//! 1. Worker 0 starts round `r` once the node's logs grew by
//!    [`CheckpointOptions::log_bytes`] since the last round began, if no fill is under
//!    way and no partition is blocked by recovery, in view `v`.
//! 2. Each worker notes the position `L` of its log and what its participant holds in
//!    doubt then (records not applied yet, locks not installed yet). Once all of that is
//!    settled (applied, installed or aborted), every record up to `L` has its effect in
//!    the copies, and the worker reports `L`.
//! 3. Once every worker reported, each copies its share of the copies (partition `p` by
//!    worker `p mod threads`) into its log: pages of objects ([`RECORD_CHECKPOINT_PAGE`],
//!    versions and deleted objects included; locked keys read again once unlocked), then
//!    each table's floors. Then it appends [`RECORD_CHECKPOINT`] (`r`, `L`, its
//!    coordinators' truncation marks) and waits for it to be durable.
//! 4. Once every worker's record is durable, the round is complete: each worker's log
//!    drops what is at or below its `L` ([`CommitLog::truncate`]).
//!
//! A view change (or a worker not in `v`) abandons the round: its pages are never used,
//! the next round starts over. A restart uses the newest round complete in every
//! worker's log of a life: its pages, then each worker's records after its `L`
//! (`ferrotx_node::restore`). Pages of a partition a later fill began again are
//! superseded by the fill's.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Mutex;

use ferrotx_exec::Co;
use ferrotx_store::{Key, TableId};
use ferrotx_wire::ViewId;

use crate::durable::{RECORD_CHECKPOINT, RECORD_CHECKPOINT_PAGE};
use crate::messages::CoordinatorId;
use crate::participant::Participant;
use crate::refill::{FETCH_KEYS_MAX, FetchRequest, FetchWhat, answer_fetch};

/// When and how a node checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// A round starts once the node's logs grew by this many bytes of records since the
    /// last round started (0: never).
    pub log_bytes: u64,
    /// How often each worker's checkpoint coroutine looks (simulated or real ns).
    pub poll_ns: u64,
    /// Bytes of objects per page.
    pub page_bytes: u32,
    /// A round not complete after this long is abandoned (a transaction in doubt that
    /// recovery has not decided yet, say); the next starts over.
    pub round_timeout_ns: u64,
    /// A deliberate break for the simulator's own test: copy without waiting for what
    /// was in doubt to settle (records truncated before their effect is in the copies).
    pub break_unsettled: bool,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        Self {
            log_bytes: 256 << 20,
            poll_ns: 100_000_000,
            page_bytes: 48 << 10,
            round_timeout_ns: 60_000_000_000,
            break_unsettled: false,
        }
    }
}

/// Counters of a node's checkpoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Rounds started, completed and abandoned.
    pub started: u64,
    pub completed: u64,
    pub abandoned: u64,
    /// Pages and objects written by completed and abandoned rounds, and their bytes.
    pub pages: u64,
    pub objects: u64,
    pub bytes: u64,
    /// The last complete round's duration (ns, the workers' clock).
    pub last_round_ns: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// The round under way or last run (0: none yet).
    round: u64,
    active: bool,
    view: ViewId,
    started_ns: u64,
    /// Each worker's log position the round covers, once its doubts settled.
    covered: Vec<Option<u64>>,
    /// Each worker's RECORD_CHECKPOINT is durable.
    ended: Vec<bool>,
    /// The bytes each worker's log had appended when last looked at, and their sum when
    /// the last round started.
    appended: Vec<u64>,
    appended_at_start: u64,
    /// The last complete round.
    completed: u64,
    stats: CheckpointStats,
}

/// What a node's workers share of its checkpoints.
#[derive(Debug)]
pub struct Checkpoints {
    threads: usize,
    inner: Mutex<Inner>,
}

impl Checkpoints {
    /// The checkpoints of a node of `threads` workers.
    pub fn new(threads: u16) -> Self {
        let threads = usize::from(threads).max(1);
        Self {
            threads,
            inner: Mutex::new(Inner {
                covered: vec![None; threads],
                ended: vec![false; threads],
                appended: vec![0; threads],
                ..Inner::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters so far.
    pub fn stats(&self) -> CheckpointStats {
        self.lock().stats
    }

    /// The last complete round (0: none).
    pub fn completed(&self) -> u64 {
        self.lock().completed
    }

    /// Whether round `round` is still under way.
    fn is_active(&self, round: u64) -> bool {
        let inner = self.lock();
        inner.active && inner.round == round
    }

    /// Abandons round `round` if it is under way.
    fn abandon(&self, round: u64) {
        let mut inner = self.lock();
        if inner.active && inner.round == round {
            inner.active = false;
            inner.stats.abandoned += 1;
        }
    }
}

/// Encodes a RECORD_CHECKPOINT payload.
pub fn encode_checkpoint_end(round: u64, covered: u64, marks: &[(CoordinatorId, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + marks.len() * 20);
    out.extend_from_slice(&round.to_le_bytes());
    out.extend_from_slice(&covered.to_le_bytes());
    out.extend_from_slice(&(marks.len() as u32).to_le_bytes());
    for ((node, thread, incarnation), mark) in marks {
        out.extend_from_slice(&node.to_le_bytes());
        out.extend_from_slice(&thread.to_le_bytes());
        out.extend_from_slice(&incarnation.to_le_bytes());
        out.extend_from_slice(&mark.to_le_bytes());
    }
    out
}

/// Each coordinator's truncation mark, as a RECORD_CHECKPOINT carries them.
pub type Marks = Vec<(CoordinatorId, u64)>;

/// A RECORD_CHECKPOINT payload: round, covered position and truncation marks; `None`
/// if malformed.
pub fn decode_checkpoint_end(payload: &[u8]) -> Option<(u64, u64, Marks)> {
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            payload.get(at..at + 8)?.try_into().ok()?,
        ))
    };
    let round = u64_at(0)?;
    let covered = u64_at(8)?;
    let count = u32::from_le_bytes(payload.get(16..20)?.try_into().ok()?) as usize;
    if payload.len() != 20 + count.checked_mul(20)? {
        return None;
    }
    let mut marks = Vec::with_capacity(count);
    for i in 0..count {
        let at = 20 + i * 20;
        let node = u16::from_le_bytes(payload[at..at + 2].try_into().ok()?);
        let thread = u16::from_le_bytes(payload[at + 2..at + 4].try_into().ok()?);
        marks.push(((node, thread, u64_at(at + 4)?), u64_at(at + 12)?));
    }
    Some((round, covered, marks))
}

/// The round a RECORD_CHECKPOINT_PAGE belongs to.
pub fn page_round(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(payload.get(..8)?.try_into().ok()?))
}

/// One worker's checkpoint coroutine (see the module): runs for the worker's life.
/// Nothing without a log, or with `options.log_bytes` 0.
pub async fn run_checkpoints(
    participant: Rc<RefCell<Participant>>,
    co: Co,
    shared: std::sync::Arc<Checkpoints>,
    thread: u16,
    options: CheckpointOptions,
) {
    if options.log_bytes == 0 || participant.borrow().durable.is_none() {
        return;
    }
    let me = usize::from(thread);
    let mut done_round = 0u64;
    loop {
        co.sleep_until(co.now_ns() + options.poll_ns).await;
        let (appended, view, quiet) = {
            let p = participant.borrow();
            (
                p.log_stats
                    .appended_bytes
                    .saturating_sub(p.log_stats.checkpoint_bytes),
                p.view(),
                p.checkpointable(),
            )
        };
        let round = {
            let mut inner = shared.lock();
            if let Some(slot) = inner.appended.get_mut(me) {
                *slot = appended;
            }
            let grown = inner
                .appended
                .iter()
                .sum::<u64>()
                .saturating_sub(inner.appended_at_start);
            if thread == 0 && !inner.active && quiet && grown >= options.log_bytes {
                inner.round += 1;
                inner.active = true;
                inner.view = view;
                inner.started_ns = co.now_ns();
                inner.covered.iter_mut().for_each(|c| *c = None);
                inner.ended.iter_mut().for_each(|e| *e = false);
                inner.appended_at_start = inner.appended.iter().sum();
                inner.stats.started += 1;
            }
            if inner.active && inner.round > done_round {
                Some((inner.round, inner.view, inner.started_ns))
            } else {
                None
            }
        };
        let Some((round, view, started_ns)) = round else {
            continue;
        };
        done_round = round;
        if !take_part(
            &participant,
            &co,
            &shared,
            me,
            round,
            view,
            started_ns,
            options,
        )
        .await
        {
            shared.abandon(round);
        }
    }
}

/// This worker's part of round `round` (steps 2 to 4 of the module); false if the round
/// must be abandoned.
#[allow(clippy::too_many_arguments)]
async fn take_part(
    participant: &Rc<RefCell<Participant>>,
    co: &Co,
    shared: &Checkpoints,
    me: usize,
    round: u64,
    view: ViewId,
    started_ns: u64,
    options: CheckpointOptions,
) -> bool {
    let deadline = started_ns.saturating_add(options.round_timeout_ns);
    let poll = (options.poll_ns / 100).max(100_000);
    let in_round = |p: &Participant| p.view() == view && shared.is_active(round);
    // 2: note the position, wait for what was in doubt then.
    let (covered, doubts) = {
        let p = participant.borrow();
        if !in_round(&p) || !p.checkpointable() {
            return false;
        }
        (p.log_position(), p.doubts())
    };
    loop {
        {
            let p = participant.borrow();
            if !in_round(&p) || co.now_ns() > deadline {
                return false;
            }
            if options.break_unsettled || p.settled(&doubts) {
                break;
            }
        }
        co.sleep_until(co.now_ns() + poll).await;
    }
    shared.lock().covered[me] = Some(covered);
    loop {
        if !shared.is_active(round) || co.now_ns() > deadline {
            return false;
        }
        if shared.lock().covered.iter().all(Option::is_some) {
            break;
        }
        co.sleep_until(co.now_ns() + poll).await;
    }
    // 3: copy this worker's share of the copies.
    let partitions: Vec<u32> = {
        let p = participant.borrow();
        let mut mine: Vec<u32> = p
            .store()
            .hosted()
            .map(|(id, _)| id)
            .filter(|id| *id as usize % shared.threads == me)
            .collect();
        mine.sort_unstable();
        mine
    };
    let mut out = Vec::new();
    let mut locked: Vec<Key> = Vec::new();
    for partition in partitions {
        let tables: Vec<TableId> = {
            let p = participant.borrow();
            match p.store().get_any(partition) {
                Some(copy) => copy.tables().collect(),
                None => return false,
            }
        };
        for table in tables {
            let mut cursor = 0u64;
            let mut again: Vec<Key> = Vec::new();
            loop {
                let what = FetchWhat::Page {
                    cursor,
                    count: FETCH_KEYS_MAX as u32,
                    bytes_max: options.page_bytes,
                };
                let next = {
                    let mut p = participant.borrow_mut();
                    if !in_round(&p) {
                        return false;
                    }
                    let Some(next) = copy_page(
                        &mut p,
                        shared,
                        round,
                        partition,
                        table,
                        what,
                        &mut locked,
                        &mut out,
                    ) else {
                        return false;
                    };
                    again.append(&mut locked);
                    next
                };
                co.yield_now().await;
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            // Keys locked when visited: their committed values, once unlocked.
            while !again.is_empty() {
                if co.now_ns() > deadline {
                    return false;
                }
                let keys: Vec<Key> = again
                    .drain(..again.len().min(FETCH_KEYS_MAX))
                    .collect::<Vec<_>>();
                {
                    let mut p = participant.borrow_mut();
                    if !in_round(&p) {
                        return false;
                    }
                    if copy_page(
                        &mut p,
                        shared,
                        round,
                        partition,
                        table,
                        FetchWhat::Keys(keys),
                        &mut locked,
                        &mut out,
                    )
                    .is_none()
                    {
                        return false;
                    }
                    again.append(&mut locked);
                }
                if !again.is_empty() {
                    co.sleep_until(co.now_ns() + poll).await;
                }
            }
            let mut p = participant.borrow_mut();
            if !in_round(&p)
                || copy_page(
                    &mut p,
                    shared,
                    round,
                    partition,
                    table,
                    FetchWhat::Floors,
                    &mut locked,
                    &mut out,
                )
                .is_none()
            {
                return false;
            }
        }
    }
    let lsn = {
        let mut p = participant.borrow_mut();
        if !in_round(&p) {
            return false;
        }
        let payload = encode_checkpoint_end(round, covered, &p.marks());
        p.log_stats.checkpoint_bytes += payload.len() as u64;
        match p.log_append(RECORD_CHECKPOINT, &payload) {
            Ok(lsn) => lsn,
            Err(_) => return false,
        }
    };
    if !Participant::wait_durable(participant, co, lsn).await {
        return false;
    }
    // 4: complete once every worker's record is durable.
    {
        let mut inner = shared.lock();
        if !(inner.active && inner.round == round) {
            return false;
        }
        inner.ended[me] = true;
        if inner.ended.iter().all(|e| *e) {
            inner.active = false;
            inner.completed = round;
            inner.stats.completed += 1;
            inner.stats.last_round_ns = co.now_ns().saturating_sub(started_ns);
        }
    }
    loop {
        {
            let inner = shared.lock();
            if inner.completed >= round {
                break;
            }
            if !(inner.active && inner.round == round) {
                return false;
            }
        }
        if co.now_ns() > deadline {
            return false;
        }
        co.sleep_until(co.now_ns() + poll).await;
    }
    if let Some(durable) = participant.borrow_mut().durable.as_mut() {
        durable.log.truncate(covered);
    }
    true
}

/// Encodes every page of a checkpoint of `copy` (a partition no transaction holds
/// locked: loaded, or restored) for round `round`, as [`run_checkpoints`] writes them:
/// each [`RECORD_CHECKPOINT_PAGE`] payload is given to `page`. For tools that write a
/// checkpoint offline (`ferrotx bench restore`). Returns the objects encoded, or the
/// first locked key's table if one is found.
pub fn encode_pages(
    copy: &ferrotx_store::Partition,
    round: u64,
    page_bytes: u32,
    mut page: impl FnMut(&[u8]),
) -> Result<u64, TableId> {
    let partition = copy.id().0;
    let mut answer = Vec::new();
    let mut locked = Vec::new();
    let mut payload = Vec::new();
    let mut objects = 0u64;
    let tables: Vec<TableId> = copy.tables().collect();
    for table in tables {
        let mut cursor = 0;
        let mut floors = false;
        loop {
            let what = if floors {
                FetchWhat::Floors
            } else {
                FetchWhat::Page {
                    cursor,
                    count: FETCH_KEYS_MAX as u32,
                    bytes_max: page_bytes,
                }
            };
            let request = FetchRequest {
                partition,
                table,
                what,
            };
            answer_fetch(&request, Some(copy), false, &mut locked, &mut answer);
            if !locked.is_empty() {
                return Err(table);
            }
            let Ok((crate::refill::FetchStatus::Ok, found)) =
                crate::refill::decode_fetch_response(&answer)
            else {
                return Err(table);
            };
            let next = found.map_or(0, |f| {
                objects += u64::from(f.objects());
                f.next_cursor
            });
            payload.clear();
            page_header(&mut payload, round, partition, table, floors);
            payload.extend_from_slice(&answer);
            page(&payload);
            if floors {
                break;
            }
            if next == 0 {
                floors = true;
            }
            cursor = next;
        }
    }
    Ok(objects)
}

/// A checkpoint page's header: [u64 round][u32 partition][u16 table][u8 floors?].
fn page_header(out: &mut Vec<u8>, round: u64, partition: u32, table: TableId, floors: bool) {
    out.extend_from_slice(&round.to_le_bytes());
    out.extend_from_slice(&partition.to_le_bytes());
    out.extend_from_slice(&table.0.to_le_bytes());
    out.push(u8::from(floors));
}

/// Copies one page of `partition`'s `table` (`what`) into the log as a
/// [`RECORD_CHECKPOINT_PAGE`]; the keys found locked are left in `locked`. The next
/// cursor (0: the table is done), or `None` if the page could not be read or logged.
#[allow(clippy::too_many_arguments)]
fn copy_page(
    p: &mut Participant,
    shared: &Checkpoints,
    round: u64,
    partition: u32,
    table: TableId,
    what: FetchWhat,
    locked: &mut Vec<Key>,
    out: &mut Vec<u8>,
) -> Option<u64> {
    let floors = what == FetchWhat::Floors;
    let request = FetchRequest {
        partition,
        table,
        what,
    };
    let mut answer = std::mem::take(out);
    {
        let copy = p.store().get_any(partition)?;
        answer_fetch(&request, Some(copy), false, locked, &mut answer);
    }
    let (status, page) = crate::refill::decode_fetch_response(&answer).ok()?;
    if status != crate::refill::FetchStatus::Ok {
        return None;
    }
    let (next, objects) = page.map_or((0, 0), |page| (page.next_cursor, page.objects()));
    let mut payload = Vec::with_capacity(15 + answer.len());
    page_header(&mut payload, round, partition, table, floors);
    payload.extend_from_slice(&answer);
    *out = answer;
    p.log_stats.checkpoint_bytes += payload.len() as u64;
    p.log_append(RECORD_CHECKPOINT_PAGE, &payload).ok()?;
    let mut inner = shared.lock();
    inner.stats.pages += 1;
    inner.stats.objects += u64::from(objects);
    inner.stats.bytes += payload.len() as u64;
    Some(next)
}
