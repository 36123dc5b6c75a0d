//! Group commit (issue 32): one write-ahead log per worker thread, one sync thread per
//! node that syncs them back to back.
//!
//! A worker appends to its own log ([`WorkerLog::append`]: a `pwrite`, no lock, no
//! syscall to the sync thread unless it sleeps) and publishes how far the log is written.
//! The sync thread ([`SyncThread`]) loops: for each log, it reads how far it is written,
//! `fdatasync`s its current segment through a storage of its own (a second descriptor of
//! the same file: `fdatasync` flushes the file, whoever wrote it), and publishes that
//! position as durable. So a record is durable once the first sync that *started after
//! it was written* returns: a commit waits for at most one sync in progress and the next
//! one, never for a timer. Nothing is added to raise the batch: it grows with the load
//! (what the workers write while a sync runs goes in the next one), and the report counts
//! records per sync.
//!
//! Ordering: a worker publishes the segment it writes to before the LSN it wrote
//! (Release), and the sync thread reads the LSN before the segment (Acquire). When a log
//! moves to a new segment, its writer syncs the old one first (`LogWriter::append`), so
//! whatever the sync thread read, syncing the segment it then reads covers the LSN.
//!
//! A failed `fdatasync` is fatal for the log: the sync thread marks it failed and never
//! reports it durable again; the worker's next call fails (after a failed fsync Linux
//! may have dropped the dirty pages, so nothing written before can be trusted durable).
//!
//! Not wired into commits yet: this is the machinery `sync` mode will wait on (the
//! backup's COMMIT-BACKUP answer deferred until its record's LSN is durable).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use ferrotx_txn::durable::LogFailed;
use ferrotx_wal::{LogWriter, Lsn, Storage, WalConfig, WalError};

use crate::FsStorage;

/// What a worker's log shares with the sync thread.
#[derive(Debug, Default)]
pub struct LogShare {
    /// The sequence number of the segment the worker appends to.
    segment: AtomicU64,
    /// The highest LSN written.
    written: AtomicU64,
    /// The highest LSN made durable by the sync thread.
    durable: AtomicU64,
    /// A sync of this log failed: nothing more is durable.
    failed: AtomicBool,
    /// Segments a checkpoint covers, for the sync thread to remove (the worker never
    /// waits on the file system for it), and whether there are any.
    to_remove: std::sync::Mutex<Vec<String>>,
    removing: AtomicBool,
    /// Segments removed so far.
    removed: AtomicU64,
}

impl LogShare {
    /// The highest LSN the sync thread made durable.
    pub fn durable(&self) -> Lsn {
        self.durable.load(Ordering::Acquire)
    }

    /// Whether a sync of this log failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Segments removed after checkpoints covered them.
    pub fn removed(&self) -> u64 {
        self.removed.load(Ordering::Relaxed)
    }
}

/// What the sync thread and the workers share.
#[derive(Debug)]
struct Shared {
    logs: Vec<(WalConfig, Arc<LogShare>)>,
    /// The sync thread sleeps: a worker that writes wakes it.
    sleeping: AtomicBool,
    stop: AtomicBool,
    thread: std::sync::OnceLock<Thread>,
    /// Rounds of syncs that synced something, and syncs made.
    rounds: AtomicU64,
    syncs: AtomicU64,
    /// The shortest time from the start of one round of syncs to the next: zero syncs
    /// back to back (`sync` mode); `flush` mode's interval lets writes gather.
    round_gap: Duration,
}

impl Shared {
    fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
    }
}

impl ferrotx_txn::durable::CommitLog for WorkerLog {
    fn append(&mut self, kind: u8, payload: &[u8]) -> Result<u64, LogFailed> {
        WorkerLog::append_buffered(self, kind, payload).map_err(log_failed)
    }

    fn write(&mut self) {
        // A failure poisons the writer: the next append says why.
        let _ = WorkerLog::write(self);
    }

    fn durable(&mut self, _now_ns: u64) -> u64 {
        self.share.durable()
    }

    fn failed(&self) -> Option<LogFailed> {
        self.share.failed().then_some(LOG_FAILED)
    }

    fn truncate(&mut self, covered: u64) {
        let names = self.writer.take_segments_below(covered.saturating_add(1));
        if names.is_empty() {
            return;
        }
        self.share
            .to_remove
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(names);
        self.share.removing.store(true, Ordering::Release);
        self.shared.wake();
    }
}

/// What a participant's COMMIT-BACKUP or LOCK refusal says of a log error.
fn log_failed(e: WalError) -> LogFailed {
    match e {
        WalError::NoSpace { .. } => LogFailed(
            "MISCONF disk full: this node cannot log commits (free space in its data \
                 directory); nothing unlogged was acknowledged",
        ),
        WalError::Poisoned { .. } | WalError::SyncFailed { .. } => LOG_FAILED,
        _ => LogFailed("MISCONF the node's log could not be written: see its log"),
    }
}

const LOG_FAILED: LogFailed = LogFailed(
    "MISCONF a sync of this node's log failed: it logs nothing more (restart it on a \
     working disk)",
);

/// A worker's log, appended to on the worker's thread.
#[derive(Debug)]
pub struct WorkerLog {
    writer: LogWriter<FsStorage>,
    share: Arc<LogShare>,
    shared: Arc<Shared>,
}

impl WorkerLog {
    /// Appends a record; it is durable once [`WorkerLog::durable`] reaches the LSN
    /// returned.
    pub fn append(&mut self, kind: u8, payload: &[u8]) -> Result<Lsn, WalError> {
        let lsn = self.append_buffered(kind, payload)?;
        self.write()?;
        Ok(lsn)
    }

    /// Appends a record into the log's buffer: written, and handed to the sync thread,
    /// by the next [`WorkerLog::write`] (a worker's loop calls it once per iteration, so
    /// the records of one iteration cost one `pwrite`).
    pub fn append_buffered(&mut self, kind: u8, payload: &[u8]) -> Result<Lsn, WalError> {
        if self.share.failed() {
            return Err(WalError::Poisoned {
                reason: "a sync of this log failed (sync thread)".into(),
            });
        }
        self.writer.note_durable(self.share.durable());
        let lsn = self.writer.append_buffered(kind, payload)?;
        if self.writer.written_lsn() == lsn {
            // Written already (a full buffer, a new segment): the sync thread may go.
            self.publish();
        }
        Ok(lsn)
    }

    /// Writes the buffered records (one `pwrite`) and lets the sync thread sync them.
    /// Does nothing, without a system call, when nothing is buffered.
    pub fn write(&mut self) -> Result<Lsn, WalError> {
        let before = self.writer.written_lsn();
        let written = self.writer.write_pending()?;
        if written > before {
            self.publish();
        }
        Ok(written)
    }

    /// Publishes how far the log is written: its segment, then the LSN (Release), and
    /// wakes the sync thread.
    fn publish(&self) {
        self.share
            .segment
            .store(self.writer.current_sequence(), Ordering::Release);
        self.share
            .written
            .store(self.writer.written_lsn(), Ordering::Release);
        self.shared.wake();
    }

    /// The highest LSN made durable.
    pub fn durable(&self) -> Lsn {
        self.share.durable()
    }

    /// What the sync thread shares with this log.
    pub fn share(&self) -> &Arc<LogShare> {
        &self.share
    }
}

/// A node's sync thread and the logs it syncs (see the module's documentation).
#[derive(Debug)]
pub struct SyncThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// How long the sync thread sleeps at most with nothing to sync (a worker's append wakes
/// it at once).
const IDLE_SLEEP: Duration = Duration::from_millis(100);

impl SyncThread {
    /// Creates a log per configuration in `configs` in directory `dir` (each must be new),
    /// and starts the sync thread over them. Returns the thread and the logs, in order.
    pub fn start(
        dir: &std::path::Path,
        configs: Vec<WalConfig>,
    ) -> Result<(Self, Vec<WorkerLog>), WalError> {
        Self::start_paced(dir, configs, Duration::ZERO)
    }

    /// [`SyncThread::start`], whose rounds of syncs start at least `round_gap` apart
    /// (`flush` mode: what is written within the gap reaches the disk at its end).
    pub fn start_paced(
        dir: &std::path::Path,
        configs: Vec<WalConfig>,
        round_gap: Duration,
    ) -> Result<(Self, Vec<WorkerLog>), WalError> {
        let io = |e: std::io::Error| WalError::Io {
            file: dir.display().to_string(),
            source: ferrotx_wal::StorageError::Io(e.to_string()),
        };
        let mut writers = Vec::new();
        let mut logs = Vec::new();
        for config in configs {
            let writer = LogWriter::create(FsStorage::open(dir).map_err(io)?, config.clone())?;
            let share = Arc::new(LogShare::default());
            share
                .segment
                .store(writer.current_sequence(), Ordering::Release);
            logs.push((config, share.clone()));
            writers.push((writer, share));
        }
        let shared = Arc::new(Shared {
            logs,
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
            rounds: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            round_gap,
        });
        let storage = FsStorage::open(dir).map_err(io)?;
        let thread_shared = shared.clone();
        let thread = thread::Builder::new()
            .name("ferrotx-sync".into())
            .spawn(move || run(&thread_shared, storage))
            .map_err(io)?;
        let _ = shared.thread.set(thread.thread().clone());
        let logs = writers
            .into_iter()
            .map(|(writer, share)| WorkerLog {
                writer,
                share,
                shared: shared.clone(),
            })
            .collect();
        Ok((
            Self {
                shared,
                thread: Some(thread),
            },
            logs,
        ))
    }

    /// Whether a sync of any of its logs failed (nothing more of that log is durable).
    pub fn any_failed(&self) -> bool {
        self.shared.logs.iter().any(|(_, share)| share.failed())
    }

    /// Segments removed after checkpoints covered them, over every log.
    pub fn segments_removed(&self) -> u64 {
        self.shared
            .logs
            .iter()
            .map(|(_, share)| share.removed())
            .sum()
    }

    /// Rounds that synced something, and syncs made, so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.rounds.load(Ordering::Relaxed),
            self.shared.syncs.load(Ordering::Relaxed),
        )
    }
}

impl Drop for SyncThread {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// The sync thread's loop.
fn run(shared: &Shared, mut storage: FsStorage) {
    let mut synced: Vec<Lsn> = vec![0; shared.logs.len()];
    // The segment each log was last synced in: its descriptor is closed when the log
    // moves on (the writer synced it whole then).
    let mut segments: Vec<Option<u64>> = vec![None; shared.logs.len()];
    while !shared.stop.load(Ordering::SeqCst) {
        let round_start = std::time::Instant::now();
        let mut any = false;
        for (i, (config, share)) in shared.logs.iter().enumerate() {
            if share.removing.swap(false, Ordering::AcqRel) {
                let names =
                    std::mem::take(&mut *share.to_remove.lock().unwrap_or_else(|e| e.into_inner()));
                for name in names {
                    if let Err(e) = storage.remove(&name) {
                        // Space not given back; nothing lost (a restart reads from the
                        // checkpoint on).
                        tracing::warn!(log = %config.log_name, "removing {name}: {e}");
                    } else {
                        share.removed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if share.failed() {
                continue;
            }
            let written = share.written.load(Ordering::Acquire);
            if written <= synced[i] {
                continue;
            }
            let segment = share.segment.load(Ordering::Acquire);
            if let Some(old) = segments[i].filter(|&old| old != segment) {
                storage.close(&config.segment_name(old));
            }
            segments[i] = Some(segment);
            let name = config.segment_name(segment);
            if let Err(e) = storage.sync(&name) {
                tracing::error!(log = %config.log_name, "sync of {name} failed: {e}; the log is lost");
                share.failed.store(true, Ordering::Release);
                continue;
            }
            synced[i] = written;
            share.durable.store(written, Ordering::Release);
            shared.syncs.fetch_add(1, Ordering::Relaxed);
            any = true;
        }
        if any {
            shared.rounds.fetch_add(1, Ordering::Relaxed);
            let next = round_start + shared.round_gap;
            let now = std::time::Instant::now();
            if next > now && !shared.stop.load(Ordering::SeqCst) {
                thread::park_timeout(next - now);
            }
            continue;
        }
        // Nothing to sync: sleep until a worker writes (it unparks us once `sleeping` is
        // set), looking once more after setting it so that no write is missed.
        shared.sleeping.store(true, Ordering::SeqCst);
        let pending = shared
            .logs
            .iter()
            .zip(&synced)
            .any(|((_, s), &done)| !s.failed() && s.written.load(Ordering::Acquire) > done);
        if !pending && !shared.stop.load(Ordering::SeqCst) {
            thread::park_timeout(IDLE_SLEEP);
        }
        shared.sleeping.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn config(name: &str) -> WalConfig {
        WalConfig {
            log_name: name.into(),
            cluster_id: [3; 16],
            node_id: 0,
            segment_size_bytes: 1 << 16,
        }
    }

    /// Two workers commit (append, then wait until their record is durable) against one
    /// sync thread: every commit's record is durable and recovers, logs move across
    /// segments, and one sync covers several records when each worker has several
    /// commits outstanding.
    #[test]
    fn workers_wait_for_the_first_sync_after_their_records() {
        let dir = TempDir(
            std::env::temp_dir().join(format!("ferrotx-group-commit-{}", std::process::id())),
        );
        let _ = std::fs::remove_dir_all(&dir.0);
        let (sync, logs) = SyncThread::start(&dir.0, vec![config("w0"), config("w1")]).unwrap();
        let handles: Vec<_> = logs
            .into_iter()
            .map(|mut log| {
                std::thread::spawn(move || {
                    // 8 commits outstanding at a time, as a worker's coroutines have.
                    for batch in 0..100u32 {
                        let mut last = 0;
                        for i in 0..8u32 {
                            let mut record = [0u8; 100];
                            record[..4].copy_from_slice(&(batch * 8 + i).to_le_bytes());
                            last = log.append(1, &record).unwrap();
                        }
                        while log.durable() < last {
                            std::thread::yield_now();
                        }
                    }
                    log.durable()
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 800);
        }
        let (_rounds, syncs) = sync.counts();
        // At least one sync per batch of each worker; fewer than one per record.
        assert!(
            (200..1600).contains(&syncs),
            "{syncs} syncs for 1600 records"
        );
        drop(sync);
        let storage = FsStorage::open(&dir.0).unwrap();
        for name in ["w0", "w1"] {
            let recovery = ferrotx_wal::recover(&storage, &config(name)).unwrap();
            assert_eq!(recovery.records.len(), 800, "{name}");
            assert!(recovery.segments.len() > 1, "{name}: one segment");
            for (i, r) in recovery.records.iter().enumerate() {
                assert_eq!(r.payload[..4], (i as u32).to_le_bytes());
            }
        }
    }
}
