//! `ferrotx bench disk`: what the disk under a data directory gives the write-ahead log
//! (issue 32), measured through the log itself (`ferrotx_wal` over the node's
//! `FsStorage`):
//!
//! - **One synced write**: a 4 KiB write and `fdatasync` in a loop, the latency of each
//!   (the floor of a `sync`-mode commit: one round of syncs stands before every
//!   acknowledgement).
//! - **Group commit**: the log's appends of `--record-bytes` records, `b` of them per
//!   sync, for each `b` of `--batches`: records and syncs per second, and the latency
//!   from a batch's first append to its sync's return (what a commit in it waits).
//! - **Reading back**: the log written, its pages dropped from the page cache
//!   (`posix_fadvise(DONTNEED)` on each segment, after its sync: no root needed, and the
//!   rest of the machine's cache is left alone), then read and checked by `recover` (every
//!   record copied out), by the streaming reader `recover_with` (the restart path: the
//!   same checks, payloads borrowed), and the same bytes read raw: MB/s of each.
//!
//! Everything is written under `--dir` (a directory of its own, removed at the end), which
//! must be on the disk the data directories will use.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrotx_node::FsStorage;
use ferrotx_wal::{LogWriter, Storage, WalConfig, WalError, recover, recover_with};
use serde::Serialize;

/// What `bench disk` runs.
#[derive(Clone, Debug, Serialize)]
pub struct DiskBenchOptions {
    /// The directory to write in (created; removed at the end).
    pub dir: PathBuf,
    /// Seconds per measurement (the synced writes, and each batch size).
    pub duration_s: f64,
    /// Bytes of each log record's payload.
    pub record_bytes: usize,
    /// Records per sync, one measurement each.
    pub batches: Vec<usize>,
    /// Megabytes of log written for the read-back measurement.
    pub read_mb: u64,
    /// Worker threads of the sync-thread measurement (each its own log).
    pub writers: usize,
    /// Commits each writer keeps outstanding (as a worker's coroutines do).
    pub outstanding: usize,
}

/// Group commit through the node's sync thread: `writers` threads, each appending to its
/// own log and keeping `outstanding` commits waiting for durability.
#[derive(Clone, Debug, Serialize)]
pub struct SyncThreadReport {
    /// Writer threads.
    pub writers: usize,
    /// Commits each keeps outstanding.
    pub outstanding: usize,
    /// Commits (records made durable) per second, all writers.
    pub commits_per_s: f64,
    /// Syncs (`fdatasync` of one log) per second.
    pub syncs_per_s: f64,
    /// Commits per sync.
    pub commits_per_sync: f64,
    /// From the first append of a writer's batch to its last record durable.
    pub commit_latency_us: LatencyUs,
}

/// Latency figures in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencyUs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl LatencyUs {
    fn of(mut ns: Vec<u64>) -> Self {
        if ns.is_empty() {
            return Self::default();
        }
        ns.sort_unstable();
        let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        Self {
            p50: at(0.5),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// Group commit at one batch size.
#[derive(Clone, Debug, Serialize)]
pub struct BatchReport {
    /// Records per sync.
    pub records_per_sync: usize,
    /// Records appended and synced per second.
    pub records_per_s: f64,
    /// Syncs per second.
    pub syncs_per_s: f64,
    /// Log bytes written per second (records with their headers), in MB/s.
    pub mb_per_s: f64,
    /// From a batch's first append to its sync's return.
    pub commit_latency_us: LatencyUs,
}

/// What `bench disk` measured.
#[derive(Clone, Debug, Serialize)]
pub struct DiskBenchReport {
    /// The options.
    pub options: DiskBenchOptions,
    /// 4 KiB writes each followed by `fdatasync`: how many per second.
    pub synced_writes_per_s: f64,
    /// Their latency (write and sync).
    pub synced_write_latency_us: LatencyUs,
    /// Group commit, per batch size.
    pub batches: Vec<BatchReport>,
    /// Group commit through the sync thread.
    pub sync_thread: SyncThreadReport,
    /// MB of log read back.
    pub read_mb: f64,
    /// The log read and checked by `recover` with its pages out of the cache, MB/s.
    pub recover_mb_per_s: f64,
    /// The log read and checked by the streaming reader (`recover_with`, payloads
    /// borrowed, 1 MiB reads) with its pages out of the cache, MB/s.
    pub stream_recover_mb_per_s: f64,
    /// The same segments read raw (1 MiB reads), MB/s.
    pub raw_read_mb_per_s: f64,
}

/// A log of 64 MiB segments in `dir`.
fn config(name: &str) -> WalConfig {
    WalConfig {
        log_name: name.to_owned(),
        cluster_id: [0xd1; 16],
        node_id: 0,
        segment_size_bytes: 64 << 20,
    }
}

/// Drops the pages of every file in `dir` from the page cache (they are synced).
fn drop_cached(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let file = std::fs::File::open(entry?.path())?;
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fadvise on a descriptor we own; no pointers.
        let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        anyhow::ensure!(r == 0, "posix_fadvise: error {r}");
    }
    Ok(())
}

/// Runs the measurements.
pub fn run(options: &DiskBenchOptions) -> anyhow::Result<DiskBenchReport> {
    let dir = options
        .dir
        .join(format!("ferrotx-bench-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = measure(options, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(options: &DiskBenchOptions, dir: &Path) -> anyhow::Result<DiskBenchReport> {
    let duration = Duration::from_secs_f64(options.duration_s);
    // One synced 4 KiB write at a time, into a preallocated file (as the log's segments).
    let mut storage = FsStorage::open(dir.join("raw"))?;
    let file_bytes: u64 = 64 << 20;
    storage.create("synced")?;
    storage.set_len("synced", file_bytes)?;
    storage.sync("synced")?;
    let page = vec![0x5a_u8; 4096];
    let mut offset = 0;
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < duration {
        let t = Instant::now();
        storage.write_at("synced", offset, &page)?;
        storage.sync("synced")?;
        latencies.push(t.elapsed().as_nanos() as u64);
        offset = (offset + 4096) % file_bytes;
    }
    let synced_writes_per_s = latencies.len() as f64 / started.elapsed().as_secs_f64();
    let synced_write_latency_us = LatencyUs::of(latencies);
    drop(storage);

    let payload = vec![0xa5_u8; options.record_bytes];
    let mut batches = Vec::new();
    for (i, &b) in options.batches.iter().enumerate() {
        let b = b.max(1);
        let storage = FsStorage::open(dir.join(format!("batch-{i}")))?;
        let mut log = LogWriter::create(storage, config("w0"))?;
        let (mut records, mut syncs) = (0u64, 0u64);
        let mut latencies = Vec::new();
        let started = Instant::now();
        while started.elapsed() < duration {
            let t = Instant::now();
            for _ in 0..b {
                log.append(1, &payload)?;
            }
            log.sync()?;
            latencies.push(t.elapsed().as_nanos() as u64);
            records += b as u64;
            syncs += 1;
        }
        let secs = started.elapsed().as_secs_f64();
        // Each record: a 32-byte header, the payload, padding to 8 bytes.
        let record_size = 32 + options.record_bytes.div_ceil(8) * 8;
        batches.push(BatchReport {
            records_per_sync: b,
            records_per_s: records as f64 / secs,
            syncs_per_s: syncs as f64 / secs,
            mb_per_s: (records as f64 * record_size as f64) / secs / 1e6,
            commit_latency_us: LatencyUs::of(latencies),
        });
        drop(log);
        std::fs::remove_dir_all(dir.join(format!("batch-{i}")))?;
    }

    let sync_thread = measure_sync_thread(options, &dir.join("sync-thread"), &payload)?;

    // Read back: a log of `read_mb`, synced, out of the cache.
    let read_dir = dir.join("read");
    let storage = FsStorage::open(&read_dir)?;
    let mut log = LogWriter::create(storage, config("w0"))?;
    let record = vec![0x3c_u8; 4000];
    let mut written = 0u64;
    while written < options.read_mb << 20 {
        log.append(1, &record)?;
        written += 4032;
    }
    log.sync()?;
    drop(log);
    drop_cached(&read_dir)?;
    let storage = FsStorage::open(&read_dir)?;
    let started = Instant::now();
    let recovery = recover(&storage, &config("w0"))?;
    let recover_s = started.elapsed().as_secs_f64();
    let bytes: u64 = recovery
        .segments
        .iter()
        .map(|s| storage.len(&s.file).unwrap_or(0))
        .sum();
    anyhow::ensure!(
        recovery.records.len() as u64 == written / 4032,
        "recovered {} records of {}",
        recovery.records.len(),
        written / 4032
    );
    drop(recovery);
    drop_cached(&read_dir)?;
    let started = Instant::now();
    let (mut streamed, mut payload_bytes) = (0u64, 0u64);
    recover_with(&storage, &config("w0"), |record| {
        streamed += 1;
        payload_bytes += record.payload.len() as u64;
        Ok::<(), WalError>(())
    })?;
    let stream_s = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        streamed == written / 4032 && payload_bytes == streamed * 4000,
        "streamed {streamed} records of {}",
        written / 4032
    );
    drop_cached(&read_dir)?;
    let mut buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut raw = 0u64;
    for name in storage.list()? {
        let mut offset = 0;
        loop {
            let n = storage.read_at(&name, offset, &mut buf)?;
            if n == 0 {
                break;
            }
            offset += n as u64;
            raw += n as u64;
        }
    }
    let raw_s = started.elapsed().as_secs_f64();
    Ok(DiskBenchReport {
        options: options.clone(),
        synced_writes_per_s,
        synced_write_latency_us,
        batches,
        sync_thread,
        read_mb: bytes as f64 / 1e6,
        recover_mb_per_s: bytes as f64 / recover_s / 1e6,
        stream_recover_mb_per_s: bytes as f64 / stream_s / 1e6,
        raw_read_mb_per_s: raw as f64 / raw_s / 1e6,
    })
}

/// Group commit through [`ferrotx_node::SyncThread`]: `options.writers` threads, each
/// with its own log, appending `options.outstanding` records and waiting until the last
/// is durable, in a loop.
fn measure_sync_thread(
    options: &DiskBenchOptions,
    dir: &Path,
    payload: &[u8],
) -> anyhow::Result<SyncThreadReport> {
    let writers = options.writers.max(1);
    let outstanding = options.outstanding.max(1);
    let configs = (0..writers).map(|w| config(&format!("w{w}"))).collect();
    let (sync, logs) = ferrotx_node::SyncThread::start(dir, configs)?;
    let duration = Duration::from_secs_f64(options.duration_s);
    let started = Instant::now();
    let threads: Vec<_> = logs
        .into_iter()
        .map(|mut log| {
            let payload = payload.to_vec();
            std::thread::spawn(move || -> anyhow::Result<(u64, Vec<u64>)> {
                let (mut commits, mut latencies) = (0u64, Vec::new());
                while started.elapsed() < duration {
                    let t = Instant::now();
                    let mut last = 0;
                    for _ in 0..outstanding {
                        last = log.append(1, &payload)?;
                    }
                    while log.durable() < last {
                        anyhow::ensure!(!log.share().failed(), "a sync failed");
                        std::thread::yield_now();
                    }
                    latencies.push(t.elapsed().as_nanos() as u64);
                    commits += outstanding as u64;
                }
                Ok((commits, latencies))
            })
        })
        .collect();
    let (mut commits, mut latencies) = (0, Vec::new());
    for t in threads {
        let (c, l) = t
            .join()
            .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
        commits += c;
        latencies.extend(l);
    }
    let secs = started.elapsed().as_secs_f64();
    let (_, syncs) = sync.counts();
    drop(sync);
    std::fs::remove_dir_all(dir)?;
    Ok(SyncThreadReport {
        writers,
        outstanding,
        commits_per_s: commits as f64 / secs,
        syncs_per_s: syncs as f64 / secs,
        commits_per_sync: commits as f64 / syncs.max(1) as f64,
        commit_latency_us: LatencyUs::of(latencies),
    })
}

/// The report as lines for a terminal.
pub fn print(report: &DiskBenchReport) {
    let l = &report.synced_write_latency_us;
    println!(
        "synced 4 KiB writes: {:.0}/s, latency p50 {:.0} us, p99 {:.0} us, max {:.0} us",
        report.synced_writes_per_s, l.p50, l.p99, l.max
    );
    for b in &report.batches {
        let l = &b.commit_latency_us;
        println!(
            "group commit, {:>4} records of {} B per sync: {:>9.0} records/s, {:>6.0} syncs/s, {:>6.1} MB/s; commit latency p50 {:.0} us, p99 {:.0} us",
            b.records_per_sync,
            report.options.record_bytes,
            b.records_per_s,
            b.syncs_per_s,
            b.mb_per_s,
            l.p50,
            l.p99
        );
    }
    let t = &report.sync_thread;
    println!(
        "sync thread, {} writers with {} commits outstanding each: {:.0} commits/s, {:.0} syncs/s, {:.1} commits per sync; batch latency p50 {:.0} us, p99 {:.0} us",
        t.writers,
        t.outstanding,
        t.commits_per_s,
        t.syncs_per_s,
        t.commits_per_sync,
        t.commit_latency_us.p50,
        t.commit_latency_us.p99
    );
    println!(
        "read back {:.0} MB out of the page cache: recover {:.0} MB/s, raw reads {:.0} MB/s",
        report.read_mb, report.recover_mb_per_s, report.raw_read_mb_per_s
    );
    println!(
        "read back {:.0} MB out of the page cache: stream_recover {:.0} MB/s",
        report.read_mb, report.stream_recover_mb_per_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_measures_everything_and_leaves_nothing() {
        let dir = std::env::temp_dir().join(format!("ferrotx-disk-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let report = run(&DiskBenchOptions {
            dir: dir.clone(),
            duration_s: 0.05,
            record_bytes: 100,
            batches: vec![1, 8],
            read_mb: 2,
            writers: 2,
            outstanding: 4,
        })
        .unwrap();
        assert!(report.synced_writes_per_s > 0.0, "{report:?}");
        assert_eq!(report.batches.len(), 2);
        assert_eq!(report.batches[1].records_per_sync, 8);
        assert!(report.batches.iter().all(|b| b.records_per_s > 0.0));
        assert!(report.recover_mb_per_s > 0.0 && report.raw_read_mb_per_s > 0.0);
        assert!(report.sync_thread.commits_per_s > 0.0, "{report:?}");
        assert!(report.sync_thread.commits_per_sync >= 1.0, "{report:?}");
        assert!(report.stream_recover_mb_per_s > 0.0);
        // Its own directory is gone.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
