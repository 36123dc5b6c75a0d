//! A simulated disk per node life for the participants' logs (issue 32), and the check
//! that `sync` mode's promise holds at a power cut.
//!
//! Each worker's log is a [`SimLog`]: its records, with the simulated time each was
//! written, and a sync thread modelled as the node's is: it syncs back to back (in
//! `flush` mode, rounds start at least the interval apart), each sync covering what was
//! written when it started and taking a latency drawn from the run's seed. A record is
//! durable once a sync that started after it ends. Everything happens in the
//! simulator's global time, so the state at any instant follows from the appends alone.
//!
//! A power cut at time `t` keeps, of every log of every life, the records durable at
//! `t`: the rest never reached the disk. [`SimDisks::power_cut_check`] then checks FaRM's
//! rule for its NVRAM, which `sync` mode promises: every write installed at a primary
//! (visible to readers, and acknowledged once its COMMIT-PRIMARY is) is in a record
//! that some disk holds. The byte-level faults of a disk (torn and reordered writes,
//! flipped bits) are the log's own tests' (`crates/wal`), on `SimDisk`.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use ferrotx_store::Key;
use ferrotx_txn::durable::{
    CommitLog, LogFailed, LogMode, RECORD_APPLIED, RECORD_COMMIT_BACKUP, RECORD_COMMIT_PRIMARY,
    RECORD_LOCK,
};
use ferrotx_txn::messages::RecordView;

use crate::network::SimNetwork;

/// A sync's simulated latency: 100 to 400 us, as this project's machines measure
/// (`ferrotx bench disk`).
const SYNC_NS_MIN: u64 = 100_000;
const SYNC_NS_SPREAD: u64 = 300_000;

/// One worker's log in one node life.
#[derive(Debug)]
pub struct SimLogState {
    pub node: u16,
    pub incarnation: u64,
    pub thread: u16,
    /// (LSN, kind, payload, written at), in order.
    records: Vec<(u64, u8, Vec<u8>, u64)>,
    durable: u64,
    /// The sync under way: (ends at, covers up to LSN).
    syncing: Option<(u64, u64)>,
    /// When the last round of syncs started, and when the last sync ended.
    last_start: Option<u64>,
    last_end: u64,
    gap_ns: u64,
    rng: u64,
    /// The life ended (crash or power cut) at this time: nothing more reaches the disk.
    ended_at: Option<u64>,
    /// Durable records up to this LSN are in [`SimDisks::durable_writes`]'s set.
    indexed: u64,
    /// Records up to this LSN were truncated (a checkpoint covers them): a restart no
    /// longer finds them. They are dropped once the power-cut check indexed them.
    truncated: u64,
    /// The last LSN appended.
    last_lsn: u64,
}

impl SimLogState {
    /// Drops the records both truncated and indexed: nothing reads them again.
    fn drop_done(&mut self) {
        let upto = self.indexed.min(self.truncated);
        let gone = self.records.partition_point(|r| r.0 <= upto);
        if gone > 0 {
            self.records.drain(..gone);
        }
    }

    fn next_latency(&mut self) -> u64 {
        // xorshift64*: deterministic from the run's seed.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        SYNC_NS_MIN + self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % SYNC_NS_SPREAD
    }

    /// Moves the modelled sync thread on to time `now`.
    fn advance(&mut self, now: u64) {
        let now = self.ended_at.map_or(now, |end| end.min(now));
        loop {
            if let Some((end, cover)) = self.syncing {
                if end > now {
                    return;
                }
                self.durable = self.durable.max(cover);
                self.syncing = None;
                self.last_end = end;
            }
            // The first record not durable, and when a sync could start for it.
            let Some(first) = self.records.iter().find(|r| r.0 > self.durable) else {
                return;
            };
            let earliest = self.last_start.map_or(0, |s| s + self.gap_ns);
            let start = first.3.max(earliest).max(self.last_end);
            if start > now {
                return;
            }
            let cover = self
                .records
                .iter()
                .take_while(|r| r.3 <= start)
                .last()
                .map_or(self.durable, |r| r.0);
            let latency = self.next_latency();
            self.last_start = Some(start);
            self.syncing = Some((start + latency, cover));
        }
    }
}

/// A participant's log on the simulated disk.
pub struct SimLog {
    state: Rc<RefCell<SimLogState>>,
    network: Rc<RefCell<SimNetwork>>,
    /// A break for tests: answers as if every record were durable at once (acknowledging
    /// before the sync), while the disk still syncs as modelled.
    lie: Rc<std::cell::Cell<bool>>,
}

impl CommitLog for SimLog {
    fn append(&mut self, kind: u8, payload: &[u8]) -> Result<u64, LogFailed> {
        let now = self.network.borrow().now_ns();
        let mut state = self.state.borrow_mut();
        state.advance(now);
        let lsn = state.last_lsn + 1;
        state.last_lsn = lsn;
        state.records.push((lsn, kind, payload.to_vec(), now));
        Ok(lsn)
    }

    fn durable(&mut self, _now_ns: u64) -> u64 {
        let now = self.network.borrow().now_ns();
        let mut state = self.state.borrow_mut();
        state.advance(now);
        if self.lie.get() {
            return state.last_lsn;
        }
        state.durable
    }

    fn failed(&self) -> Option<LogFailed> {
        None
    }

    fn truncate(&mut self, covered: u64) {
        let mut state = self.state.borrow_mut();
        // Only what is durable: a real log removes whole segments behind its sync.
        state.truncated = state.truncated.max(covered.min(state.durable));
        state.drop_done();
    }
}

/// Every simulated log of a run.
pub struct SimDisks {
    pub mode: LogMode,
    /// `flush` mode's interval (0 in `sync` mode).
    pub gap_ns: u64,
    seed: u64,
    logs: Vec<Rc<RefCell<SimLogState>>>,
    /// Acknowledge before the sync (a deliberate break the check must catch).
    lie: Rc<std::cell::Cell<bool>>,
    /// What [`SimDisks::durable_writes`] found so far.
    writes: RefCell<HashSet<(u16, Key, u64)>>,
    /// The life each life restarted from disk loaded (node, life) -> earlier life.
    restored_from: std::collections::BTreeMap<(u16, u64), u64>,
}

impl SimDisks {
    pub fn new(mode: LogMode, gap_ns: u64, seed: u64) -> Self {
        Self {
            mode,
            gap_ns,
            seed,
            logs: Vec::new(),
            lie: Rc::new(std::cell::Cell::new(false)),
            writes: RefCell::new(HashSet::new()),
            restored_from: std::collections::BTreeMap::new(),
        }
    }

    /// Makes every log, open or to come, answer as if each record were durable at once
    /// (a deliberate break: acknowledging before the sync).
    pub fn set_lie(&self, lie: bool) {
        self.lie.set(lie);
    }

    /// A log for worker `thread` of a node life.
    pub fn open(
        &mut self,
        network: &Rc<RefCell<SimNetwork>>,
        node: u16,
        incarnation: u64,
        thread: u16,
    ) -> SimLog {
        let rng = (self.seed ^ (u64::from(node) << 48) ^ (u64::from(thread) << 32) ^ incarnation)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            | 1;
        let state = Rc::new(RefCell::new(SimLogState {
            node,
            incarnation,
            thread,
            records: Vec::new(),
            durable: 0,
            syncing: None,
            last_start: None,
            last_end: 0,
            gap_ns: self.gap_ns,
            rng,
            ended_at: None,
            indexed: 0,
            truncated: 0,
            last_lsn: 0,
        }));
        self.logs.push(state.clone());
        SimLog {
            state,
            network: network.clone(),
            lie: self.lie.clone(),
        }
    }

    /// Node `node`'s life `incarnation` ended at `now` (a crash): its disk keeps what
    /// was durable then.
    pub fn end_life(&mut self, node: u16, incarnation: u64, now: u64) {
        for log in &self.logs {
            let mut log = log.borrow_mut();
            if log.node == node && log.incarnation == incarnation && log.ended_at.is_none() {
                log.advance(now);
                log.ended_at = Some(now);
            }
        }
    }

    /// Every record written so far is durable now (the data a run loads before its
    /// clients start, as a real load would be synced before it is used).
    pub fn sync_all(&mut self, now: u64) {
        for log in &self.logs {
            let mut log = log.borrow_mut();
            log.advance(now);
            if log.ended_at.is_none() {
                log.durable = log.records.last().map_or(log.durable, |r| r.0);
            }
        }
    }

    /// Node `node`'s life `life` loaded its copies from life `from`'s disk.
    pub fn note_restored(&mut self, node: u16, life: u64, from: u64) {
        self.restored_from.insert((node, life), from);
    }

    /// Forgets that life `life` of node `node` loaded from an earlier life (the restart
    /// went on without it: it joined later, refilled).
    pub fn forget_restored(&mut self, node: u16, life: u64) {
        self.restored_from.remove(&(node, life));
    }

    /// What node `node`'s disk holds of life `life` at `now`, for a restart: each life's
    /// logs over the chain of lives it loaded from (oldest first), each worker's durable
    /// records not truncated (position, kind, payload), in order, as the node's data
    /// directory would give them.
    pub fn durable_records(
        &self,
        node: u16,
        life: u64,
        threads: u16,
        now: u64,
    ) -> Vec<ferrotx_node::restore::LifeLogs> {
        let mut chain = vec![life];
        while let Some(&from) = self.restored_from.get(&(node, *chain.last().expect("one"))) {
            chain.push(from);
        }
        chain.reverse();
        chain
            .iter()
            .map(|&at| {
                (0..threads)
                    .map(|thread| {
                        let mut out = Vec::new();
                        for log in &self.logs {
                            let mut log = log.borrow_mut();
                            if log.node != node || log.incarnation != at || log.thread != thread {
                                continue;
                            }
                            log.advance(now);
                            let (durable, truncated) = (log.durable, log.truncated);
                            out.extend(
                                log.records
                                    .iter()
                                    .take_while(|r| r.0 <= durable)
                                    .filter(|r| r.0 > truncated)
                                    .map(|r| (r.0, r.1, r.2.clone())),
                            );
                        }
                        out
                    })
                    .collect()
            })
            .collect()
    }

    /// Records appended and records durable at `now`, over every log.
    pub fn counts(&self, now: u64) -> (u64, u64) {
        let (mut appended, mut durable) = (0, 0);
        for log in &self.logs {
            let mut log = log.borrow_mut();
            log.advance(now);
            appended += log.records.len() as u64;
            durable += log.durable;
        }
        (appended, durable)
    }

    /// Every (table, key, version) a durable COMMIT-BACKUP, COMMIT-PRIMARY or LOCK record
    /// installs, over every disk, if the power went at `now` (a LOCK record's transaction
    /// may not have committed: the check asks only whether what is visible is on a disk).
    ///
    /// Kept as the run goes (time only moves on, and a record once durable stays so): each
    /// call reads only the records that became durable since the last.
    pub fn durable_writes(&self, now: u64) -> std::cell::Ref<'_, HashSet<(u16, Key, u64)>> {
        {
            let mut writes = self.writes.borrow_mut();
            for log in &self.logs {
                let mut log = log.borrow_mut();
                log.advance(now);
                let from = log.indexed;
                let upto = log.durable;
                for (lsn, kind, payload, _) in &log.records {
                    if *lsn <= from {
                        continue;
                    }
                    if *lsn > upto {
                        break;
                    }
                    if ![
                        RECORD_COMMIT_BACKUP,
                        RECORD_COMMIT_PRIMARY,
                        RECORD_LOCK,
                        RECORD_APPLIED,
                    ]
                    .contains(kind)
                    {
                        continue;
                    }
                    let Ok(record) = RecordView::parse(payload) else {
                        continue;
                    };
                    for write in record.writes() {
                        writes.insert((write.table.0, write.key, write.version + 1));
                    }
                }
                log.indexed = upto;
                log.drop_done();
            }
        }
        self.writes.borrow()
    }
}
