//! Loading a node's copies from its data directory (issue 32: whole-cluster restart).
//!
//! A cluster whose every process died, in `flush` or `sync` mode, leaves its last view
//! in the coordination service; the first node to start again ends it "on disk"
//! ([`View::ended_on_disk`]): every life suspended with the copies it held. Each node's
//! new life then loads, before it asks to join, the copies that view gives its node's
//! earlier life, from that life's logs ([`load`]), and the restarted cluster's first
//! view ([`View::restarted`]) gives them to it again.
//!
//! A life's logs hold what it logged itself; a life that was itself restarted names the
//! life it loaded in `restored-from`, so loading reads the chain of lives, oldest
//! first, each worker's log in order, and replays each worker's records
//! ([`ferrotx_txn::participant::restore`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrotx_cluster::{Configuration, View};
use ferrotx_store::{Epoch, Partition, PartitionId, TableSpec};
use ferrotx_txn::checkpoint::{decode_checkpoint_end, page_round};
use ferrotx_txn::durable::{RECORD_CHECKPOINT, RECORD_CHECKPOINT_PAGE};
use ferrotx_txn::participant::restore::{
    FillViews, Replay, ReplayStats, fill_views, replay, settle_locks,
};
use ferrotx_txn::participant::{NodeStore, Role};
use ferrotx_wal::{WalConfig, WalError, recover_with};

use crate::DataDirError;
use crate::disk::FsStorage;
use crate::durability::{SEGMENT_BYTES, cluster_id_bytes};

/// The file of a life's directory naming the life it loaded its copies from.
pub const RESTORED_FROM_FILE: &str = "restored-from";

/// Most lives one chain may hold (a loop in `restored-from` files is refused).
const CHAIN_MAX: usize = 10_000;

/// The directory of life `life` in data directory `dir`.
pub fn life_dir(dir: &Path, life: u64) -> PathBuf {
    dir.join(format!("life-{life:016x}"))
}

/// What a node loaded from its data directory: the copies, and each worker's
/// transactions in doubt for its participant.
pub struct Restored {
    /// The life whose copies these are, and the chain of lives read (oldest first).
    pub life: u64,
    pub chain: Vec<u64>,
    partitions: Vec<(PartitionId, Role, Arc<Partition>)>,
    replays: Mutex<Vec<Option<Replay>>>,
    /// What replay did, over every worker's log.
    pub stats: ReplayStats,
    /// Bytes of records read, and how long loading took.
    pub bytes: u64,
    pub elapsed: Duration,
}

impl std::fmt::Debug for Restored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Restored")
            .field("life", &self.life)
            .field("chain", &self.chain)
            .field("partitions", &self.partitions.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Restored {
    /// The copies loaded, with the roles the ended view gave them.
    pub fn partitions(&self) -> &[(PartitionId, Role, Arc<Partition>)] {
        &self.partitions
    }

    /// Whether `view`, the first this life is admitted into, gives it back the copies it
    /// loaded: it took part in the restart (the restarted view keeps each present life's
    /// copies). A life the restart went on without (it came back too late, or was
    /// paused) is admitted later as a new life with nothing but fills: what it loaded,
    /// its copies and its transactions in doubt, must then be dropped, or its in-doubt
    /// records would vote in a later recovery on transactions the restart's recovery
    /// decided without them (`power` seed 213 of kv-full: a commit-backup record brought
    /// back that way committed at the backups a write the primary had aborted).
    pub fn given_back(&self, view: &View, node: u16) -> bool {
        self.partitions.iter().any(|(p, _, _)| {
            view.copies
                .get(p.0 as usize)
                .is_some_and(|nodes| nodes.contains(&node))
        })
    }

    /// Worker `thread`'s transactions in doubt, taken once.
    pub fn take_replay(&self, thread: u16) -> Option<Replay> {
        self.replays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(usize::from(thread))
            .and_then(Option::take)
    }
}

/// The life of `node` whose copies `ended` (a view ended on disk) keeps, and those copies
/// (partition, and whether it is the primary); `None` if it keeps none of `node`'s.
pub fn copies_on_disk(ended: &View, node: u16) -> Option<(u64, Vec<(u32, Role)>)> {
    let life = ended.suspended_incarnation(node)?;
    let copies: Vec<(u32, Role)> = (0..ended.copies.len() as u32)
        .filter_map(|p| {
            let held = ended.suspended_copies(p);
            let i = held.iter().position(|&n| n == node)?;
            Some((p, if i == 0 { Role::Primary } else { Role::Backup }))
        })
        .collect();
    (!copies.is_empty()).then_some((life, copies))
}

/// Why a node's copies could not be loaded from its data directory.
#[derive(Debug)]
pub enum LoadError {
    /// Its logs are damaged (a checksum, sequence or position that does not hold
    /// anywhere but in an unsynced tail, or a record that is not what its kind says):
    /// names the file and offset, or the record. The copies cannot be trusted; the
    /// cluster's other copies of them can.
    Damaged(DataDirError),
    /// The directory cannot be used for another reason (missing, unreadable, foreign):
    /// names the path.
    Unusable(DataDirError),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Damaged(e) | Self::Unusable(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LoadError {}

/// The partitions of which `ended` (a view ended on disk) keeps a copy on `node` and no
/// copy on any other node: those a node whose logs are damaged cannot leave to its
/// peers.
pub fn only_copies_on(ended: &View, node: u16) -> Vec<u32> {
    (0..ended.copies.len() as u32)
        .filter(|&p| {
            let held = ended.suspended_copies(p);
            held.contains(&node) && held.iter().all(|&n| n == node)
        })
        .collect()
}

/// One worker's log: its records (position, kind, payload), in order.
pub type WorkerRecords = Vec<(u64, u8, Vec<u8>)>;

/// One life's logs: each worker's records, in order.
pub type LifeLogs = Vec<WorkerRecords>;

/// The newest checkpoint round complete in `life` (every worker's log holds its
/// [`RECORD_CHECKPOINT`]), and the position each worker's record says the round covers.
pub fn complete_round(life: &LifeLogs) -> Option<(u64, Vec<u64>)> {
    let mut rounds: Vec<std::collections::HashMap<u64, u64>> = Vec::with_capacity(life.len());
    for records in life {
        let mut ends = std::collections::HashMap::new();
        for (_, kind, payload) in records {
            if *kind == RECORD_CHECKPOINT
                && let Some((round, covered, _)) = decode_checkpoint_end(payload)
            {
                ends.insert(round, covered);
            }
        }
        rounds.push(ends);
    }
    let first = rounds.first()?;
    let mut candidates: Vec<u64> = first.keys().copied().collect();
    candidates.sort_unstable_by(|a, b| b.cmp(a));
    candidates.into_iter().find_map(|round| {
        rounds
            .iter()
            .map(|ends| ends.get(&round).copied())
            .collect::<Option<Vec<u64>>>()
            .map(|covered| (round, covered))
    })
}

/// Each worker's records to replay from `lives` (oldest first): from the newest life
/// with a complete checkpoint round, that round's pages and the records after the
/// position it covers; from each later life, every record but checkpoint pages (their
/// rounds are not complete: a life whose round is complete would start the chain).
fn select(lives: &[LifeLogs], threads: usize) -> Vec<Vec<(u8, &[u8])>> {
    let start = lives
        .iter()
        .rposition(|life| complete_round(life).is_some())
        .unwrap_or(0);
    let mut out: Vec<Vec<(u8, &[u8])>> = vec![Vec::new(); threads];
    for (i, life) in lives.iter().enumerate().skip(start) {
        let round = if i == start {
            complete_round(life)
        } else {
            None
        };
        for (thread, records) in life.iter().enumerate().take(threads) {
            let (round, covered) = match &round {
                Some((round, covered)) => (Some(*round), covered[thread]),
                None => (None, 0),
            };
            out[thread].extend(
                records
                    .iter()
                    .filter(|(lsn, kind, payload)| {
                        *lsn > covered
                            && (*kind != RECORD_CHECKPOINT_PAGE
                                || round.is_some() && page_round(payload) == round)
                    })
                    .map(|(_, kind, payload)| (*kind, &payload[..])),
            );
        }
    }
    out
}

/// Reads one life's logs (every worker's) from its directory.
fn read_life(
    dir: &Path,
    config: &Configuration,
    node: u16,
    life: u64,
    bytes: &mut u64,
) -> Result<LifeLogs, LoadError> {
    let dir_of = life_dir(dir, life);
    if !dir_of.is_dir() {
        return Err(LoadError::Unusable(DataDirError(format!(
            "{}: missing: the cluster's last view has copies on this node's life {life:x}, \
             whose logs are not in this data directory (another node's directory, or one \
             restored from an older backup?)",
            dir_of.display()
        ))));
    }
    // Each worker's log on a thread of its own (checksums and copies run beside the
    // reads of the other logs).
    let read_one = |thread: u16| -> Result<(WorkerRecords, u64), LoadError> {
        let storage = FsStorage::open(&dir_of)
            .map_err(|e| LoadError::Unusable(DataDirError(format!("{}: {e}", dir_of.display()))))?;
        let wal = WalConfig {
            log_name: format!("w{thread}"),
            cluster_id: cluster_id_bytes(config),
            node_id: node,
            segment_size_bytes: SEGMENT_BYTES,
        };
        let mut records = Vec::new();
        let mut read = 0u64;
        recover_with(&storage, &wal, |record| {
            read += record.payload.len() as u64;
            records.push((record.lsn, record.kind, record.payload.to_vec()));
            Ok::<(), WalError>(())
        })
        .map_err(|e| {
            let damaged = matches!(e, WalError::Corrupt { .. });
            let e = DataDirError(format!(
                "{}: log w{thread} cannot be read: {e}",
                dir_of.display()
            ));
            if damaged {
                LoadError::Damaged(e)
            } else {
                LoadError::Unusable(e)
            }
        })?;
        Ok((records, read))
    };
    type Read = Result<(WorkerRecords, u64), LoadError>;
    let read: Vec<Read> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.threads_per_node())
            .map(|thread| scope.spawn(move || read_one(thread)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(LoadError::Unusable(DataDirError(
                        "a log reading thread panicked".into(),
                    )))
                })
            })
            .collect()
    });
    let mut logs = Vec::with_capacity(read.len());
    for one in read {
        let (records, read) = one?;
        *bytes += read;
        logs.push(records);
    }
    Ok(logs)
}

/// The life `life` loaded its copies from (its `restored-from` file), if it did.
fn restored_from(dir: &Path, life: u64) -> Result<Option<u64>, DataDirError> {
    let link = life_dir(dir, life).join(RESTORED_FROM_FILE);
    match std::fs::read_to_string(&link) {
        Ok(text) => u64::from_str_radix(text.trim(), 16)
            .map(Some)
            .map_err(|_| DataDirError(format!("{}: not a life's incarnation", link.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(DataDirError(format!("{}: {e}", link.display()))),
    }
}

/// Loads, from data directory `dir`, the copies of node `node` that `ended` (a view
/// ended on disk) keeps: reads the logs of the life it names (and of the lives that life
/// loaded from, back to the newest with a complete checkpoint), replays them into new
/// copies and returns them with each worker's transactions in doubt. `None` if `ended`
/// keeps no copy of `node`'s. An error names the file (and offset) that could not be
/// read: a corrupt record anywhere but at a torn tail is refused, never replayed.
pub fn load(
    dir: &Path,
    config: &Configuration,
    node: u16,
    ended: &View,
) -> Result<Option<Restored>, LoadError> {
    let Some((life, copies)) = copies_on_disk(ended, node) else {
        return Ok(None);
    };
    let started = Instant::now();
    let mut bytes = 0u64;
    // Newest first, back to a life with a complete checkpoint (or the first life).
    let mut chain = vec![life];
    let mut lives = vec![read_life(dir, config, node, life, &mut bytes)?];
    loop {
        if complete_round(lives.last().expect("one")).is_some() {
            break;
        }
        let at = *chain.last().expect("one");
        let Some(earlier) = restored_from(dir, at).map_err(LoadError::Unusable)? else {
            break;
        };
        if chain.len() >= CHAIN_MAX || chain.contains(&earlier) {
            return Err(LoadError::Unusable(DataDirError(format!(
                "{}: the chain of restored lives loops",
                life_dir(dir, at).join(RESTORED_FROM_FILE).display()
            ))));
        }
        lives.push(read_life(dir, config, node, earlier, &mut bytes)?);
        chain.push(earlier);
    }
    chain.reverse();
    lives.reverse();
    // A record whose checksum held but that is not what its kind says is damage too.
    let mut restored = load_records(config, &copies, &lives).map_err(|e| {
        LoadError::Damaged(DataDirError(format!(
            "{}: lives {chain:x?}: {e}",
            dir.display()
        )))
    })?;
    restored.life = life;
    restored.chain = chain;
    restored.bytes = bytes;
    restored.elapsed = started.elapsed();
    Ok(Some(restored))
}

/// Replays `lives` (each life's logs, oldest first, [`select`]ed from the newest
/// complete checkpoint) into new copies of `copies` (partition and role): the
/// storage-free half of [`load`], which the simulator runs on its disks. An error names
/// the worker's log and the record.
pub fn load_records(
    config: &Configuration,
    copies: &[(u32, Role)],
    lives: &[LifeLogs],
) -> Result<Restored, String> {
    let schema: Arc<[TableSpec]> = Arc::from(config.tables().to_vec());
    let epoch = Epoch::process();
    let mut store = NodeStore::new();
    let mut partitions = Vec::new();
    for &(p, role) in copies {
        let partition = Arc::new(Partition::with_epoch(PartitionId(p), &schema, &epoch));
        store.host(role, partition.clone());
        partitions.push((PartitionId(p), role, partition));
    }
    let logs = select(lives, usize::from(config.threads_per_node()));
    // Fills first, over every worker's log: a partition's writes logged by any worker
    // before its last fill began are the replaced copy's.
    let mut fills = FillViews::default();
    for records in &logs {
        fill_views(records.iter().copied(), &mut fills);
    }
    // Each worker's log on a thread of its own, as the workers wrote them: a copy keeps
    // the highest version it is given, so neither the order of the logs nor their
    // interleaving changes the copies.
    let store_ref = &store;
    let fills_ref = &fills;
    let replayed: Vec<Result<Replay, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = logs
            .iter()
            .enumerate()
            .map(|(thread, records)| {
                scope.spawn(move || {
                    replay(store_ref, records.iter().copied(), fills_ref)
                        .map_err(|e| format!("log w{thread}: {e}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a replay thread panicked".into()))
            })
            .collect()
    });
    let mut replays = Vec::with_capacity(replayed.len());
    for r in replayed {
        replays.push(r?);
    }
    settle_locks(&store, &mut replays);
    let mut stats = ReplayStats::default();
    for replayed in &mut replays {
        replayed.keep_primaries(&store);
        stats.add(&replayed.stats);
    }
    Ok(Restored {
        life: 0,
        chain: Vec::new(),
        partitions,
        replays: Mutex::new(replays.into_iter().map(Some).collect()),
        stats,
        bytes: 0,
        elapsed: Duration::ZERO,
    })
}
