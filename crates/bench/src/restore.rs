//! `ferrotx bench restore`: how fast a node loads its copies from its data directory
//! (issue 32's restart target: a node holding 1 M TATP subscribers loads at 300 MB/s or
//! half the disk's bandwidth, whichever is lower).
//!
//! One node of a one-node `sync` cluster holds TATP's tables for `subscribers`
//! subscribers, loaded into its copies. Its checkpoint is written into a new life's logs
//! through the node's own log writer and sync thread, exactly as a checkpoint round
//! writes it (`ferrotx_txn::checkpoint::encode_pages`, one worker's log per partition
//! share). Then the page cache is dropped (a SIGKILL keeps it; a power cut does not),
//! the life's files are read once to measure the disk's sequential bandwidth, the cache
//! is dropped again, and the node's restart path (`ferrotx_node::restore::load`: read,
//! checksum, replay into new copies) is timed. The copies loaded are compared, object by
//! object, with the ones written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use serde::{Deserialize, Serialize};

use ferrotx_cluster::{Configuration, Durability, DurabilityMode, View, ViewMember};
use ferrotx_node::{NodeCore, NodeLogs};
use ferrotx_txn::checkpoint::{encode_checkpoint_end, encode_pages};
use ferrotx_txn::durable::{RECORD_CHECKPOINT, RECORD_CHECKPOINT_PAGE};
use ferrotx_workload::tatp::TatpWorkload;

/// What to measure.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RestoreBenchOptions {
    /// Where the data directory is made (and removed at the end).
    pub dir: PathBuf,
    /// TATP subscribers on the node.
    pub subscribers: u64,
    /// Worker threads (one log each).
    pub threads: u16,
    /// Partitions of the node.
    pub partitions: u32,
}

/// What it measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RestoreBenchReport {
    pub options: RestoreBenchOptions,
    /// Objects in the checkpoint, the bytes of its records, and of its log files on disk
    /// (segments are preallocated: the last one's tail is zeroes).
    pub objects: u64,
    pub record_bytes: u64,
    pub file_bytes: u64,
    /// Whether the page cache could be dropped before each read (root only).
    pub cache_dropped: bool,
    /// Reading the files once, sequentially: the disk's bandwidth (MB/s, 10^6 bytes).
    pub disk_read_s: f64,
    pub disk_mb_per_s: f64,
    /// The node's load: seconds, MB/s of records, objects per second.
    pub load_s: f64,
    pub load_mb_per_s: f64,
    pub load_objects_per_s: f64,
    /// Objects the load gave back (equal to `objects`, checked).
    pub loaded_objects: u64,
}

fn drop_caches() -> bool {
    // SAFETY: sync(2) has no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

fn files_of(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Every object of every copy: (partition, table, key, version, value).
type Objects = Vec<(u32, u16, Vec<u8>, u64, Option<Vec<u8>>)>;

fn objects_of(copies: &[(ferrotx_store::PartitionId, Arc<ferrotx_store::Partition>)]) -> Objects {
    let mut out = Vec::new();
    for (id, copy) in copies {
        for table in copy.tables().collect::<Vec<_>>() {
            let mut cursor = 0;
            loop {
                cursor = copy
                    .copy_out(
                        table,
                        cursor,
                        4096,
                        |key, version, value| {
                            out.push((
                                id.0,
                                table.0,
                                key.as_bytes().to_vec(),
                                version,
                                value.map(<[u8]>::to_vec),
                            ));
                            true
                        },
                        |_| {},
                    )
                    .expect("a table of the copy");
                if cursor == 0 {
                    break;
                }
            }
        }
    }
    out.sort();
    out
}

/// Runs the measurement (see the module).
pub fn run(options: &RestoreBenchOptions) -> anyhow::Result<RestoreBenchReport> {
    ensure!(options.threads > 0, "--threads must be at least 1");
    let config = Arc::new(
        Configuration::local(1, 1, options.threads, options.partitions, 29_000)?
            .with_tables(TatpWorkload::schema())?
            .with_durability(Durability {
                mode: DurabilityMode::Sync,
                ..Durability::default()
            }),
    );
    let dir = options
        .dir
        .join(format!("ferrotx-bench-restore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = measure(options, &config, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(
    options: &RestoreBenchOptions,
    config: &Arc<Configuration>,
    dir: &Path,
) -> anyhow::Result<RestoreBenchReport> {
    let life = 1;
    let core = NodeCore::new(config.clone(), 0, life);
    let workload = TatpWorkload {
        subscribers: options.subscribers,
    };
    let started = Instant::now();
    workload.load(&mut |table, key, value| core.load(table, key, value))?;
    let copies: Vec<_> = core.copies().into_iter().map(|(p, _, c)| (p, c)).collect();
    eprintln!(
        "loaded {} subscribers into {} partitions in {:.1} s; writing the checkpoint",
        options.subscribers,
        copies.len(),
        started.elapsed().as_secs_f64()
    );
    // The checkpoint, through the node's log writers and sync thread.
    let logs = NodeLogs::open(dir, config, 0, life)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .context("a sync-mode data directory")?;
    let mut writers: Vec<_> = (0..options.threads)
        .map(|t| logs.take(t).expect("one log per worker").0)
        .collect();
    let mut objects = 0;
    for (id, copy) in &copies {
        let count = writers.len();
        let writer = &mut writers[id.0 as usize % count];
        let mut failed = None;
        objects += encode_pages(copy, 1, 48 << 10, |page| {
            if failed.is_none()
                && let Err(e) = writer.append(RECORD_CHECKPOINT_PAGE, page)
            {
                failed = Some(e);
            }
        })
        .map_err(|table| anyhow::anyhow!("table {} has a locked key", table.0))?;
        if let Some(e) = failed {
            bail!("writing the checkpoint: {e}");
        }
    }
    for writer in &mut writers {
        let last = writer.append(RECORD_CHECKPOINT, &encode_checkpoint_end(1, 0, &[]))?;
        while writer.durable() < last {
            ensure!(
                !writer.share().failed(),
                "a sync of the checkpoint's log failed"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let life_dir = logs.dir().to_path_buf();
    drop(writers);
    drop(logs);
    let files = files_of(&life_dir)?;
    let file_bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    // The disk's sequential bandwidth over the same files.
    let mut cache_dropped = drop_caches();
    let read_started = Instant::now();
    let mut buffer = vec![0u8; 4 << 20];
    for file in &files {
        use std::io::Read;
        let mut f = std::fs::File::open(file)?;
        while f.read(&mut buffer)? > 0 {}
    }
    let disk_read_s = read_started.elapsed().as_secs_f64();
    // The node's load, as at a restart.
    cache_dropped &= drop_caches();
    let view = View::initial(
        config.id(),
        config,
        vec![ViewMember {
            node: 0,
            incarnation: life,
        }],
    )
    .ended_on_disk();
    let load_started = Instant::now();
    let restored = ferrotx_node::restore::load(dir, config, 0, &view)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .context("the checkpoint's copies")?;
    let load_s = load_started.elapsed().as_secs_f64();
    let loaded: Vec<_> = restored
        .partitions()
        .iter()
        .map(|(p, _, c)| (*p, c.clone()))
        .collect();
    let (want, got) = (objects_of(&copies), objects_of(&loaded));
    ensure!(
        want == got,
        "the load gave back {} objects, not the {} written (or other ones)",
        got.len(),
        want.len()
    );
    Ok(RestoreBenchReport {
        options: options.clone(),
        objects,
        record_bytes: restored.bytes,
        file_bytes,
        cache_dropped,
        disk_read_s,
        disk_mb_per_s: file_bytes as f64 / 1e6 / disk_read_s,
        load_s,
        load_mb_per_s: restored.bytes as f64 / 1e6 / load_s,
        load_objects_per_s: objects as f64 / load_s,
        loaded_objects: got.len() as u64,
    })
}

/// Prints the report.
pub fn print(report: &RestoreBenchReport) {
    let cache = if report.cache_dropped {
        "page cache dropped before each read"
    } else {
        "page cache NOT dropped (not root): figures are the cache's"
    };
    println!(
        "restore: {} subscribers, {} objects, {:.1} MB of checkpoint records in {:.1} MB of \
         {} logs ({cache})",
        report.options.subscribers,
        report.objects,
        report.record_bytes as f64 / 1e6,
        report.file_bytes as f64 / 1e6,
        report.options.threads
    );
    println!(
        "  disk, reading the files once:     {:>7.3} s  {:>8.1} MB/s",
        report.disk_read_s, report.disk_mb_per_s
    );
    println!(
        "  node load (read, check, replay):  {:>7.3} s  {:>8.1} MB/s of records  {:.2} M objects/s \
         ({:.2}x the disk's time)",
        report.load_s,
        report.load_mb_per_s,
        report.load_objects_per_s / 1e6,
        report.load_s / report.disk_read_s
    );
}
