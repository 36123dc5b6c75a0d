//! A node's data directory and logs (issue 32: `flush` and `sync` modes).
//!
//! `DIR/ferrotx-data.toml` names the format, the cluster and the node the directory
//! belongs to and the mode it was written in; a directory of another cluster, node or
//! format version is refused with an error naming it. Each life of the node logs in a
//! directory of its own, `DIR/life-{incarnation:016x}/`, one log per worker thread (`w0`,
//! `w1`, ...) synced by one sync thread ([`crate::SyncThread`]). A new life never writes
//! into an earlier life's logs (it is not that life); restart from them is not built yet
//! (docs/durability.md says what is).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrotx_cluster::{Configuration, DurabilityMode};
use ferrotx_txn::durable::LogMode;
use ferrotx_wal::WalConfig;

use crate::group_commit::{SyncThread, WorkerLog};

/// The data directory's format version; another is refused.
pub const DATA_FORMAT_VERSION: u32 = 1;

/// The file naming what a data directory holds.
pub const DATA_META_FILE: &str = "ferrotx-data.toml";

/// Each log segment's preallocated size by default (`[durability] segment_mb`).
pub const SEGMENT_BYTES: u64 = 64 << 20;

/// Each log segment's size (for tools that read the logs back).
pub fn durability_segment_bytes() -> u64 {
    SEGMENT_BYTES
}

/// A data directory that cannot be used, with why: names the path.
#[derive(Debug)]
pub struct DataDirError(pub String);

impl fmt::Display for DataDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DataDirError {}

/// The 16 bytes naming the cluster in every log segment: its configuration id.
pub fn cluster_id_bytes(config: &Configuration) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&config.id().to_le_bytes());
    id[8..].copy_from_slice(b"ferrotx\0");
    id
}

/// A node life's logs: the sync thread, and one log per worker thread for the workers
/// to take when they start.
pub struct NodeLogs {
    mode: LogMode,
    dir: PathBuf,
    sync: SyncThread,
    logs: Mutex<Vec<Option<WorkerLog>>>,
}

impl fmt::Debug for NodeLogs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeLogs")
            .field("mode", &self.mode)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl NodeLogs {
    /// Opens (or makes) data directory `dir` for node `node` of `config` in its
    /// durability mode, and starts this life's logs. `None` in `memory` mode.
    pub fn open(
        dir: &Path,
        config: &Configuration,
        node: u16,
        incarnation: u64,
    ) -> Result<Option<Arc<Self>>, DataDirError> {
        let durability = config.durability();
        if durability.mode == DurabilityMode::Memory {
            return Ok(None);
        }
        check_or_make(dir, config, node)?;
        let life = dir.join(format!("life-{incarnation:016x}"));
        if life.exists() {
            return Err(DataDirError(format!(
                "{}: this life's directory exists already (an incarnation must be new)",
                life.display()
            )));
        }
        std::fs::create_dir_all(&life)
            .map_err(|e| DataDirError(format!("{}: {e}", life.display())))?;
        let configs = (0..config.threads_per_node())
            .map(|thread| WalConfig {
                log_name: format!("w{thread}"),
                cluster_id: cluster_id_bytes(config),
                node_id: node,
                segment_size_bytes: durability.segment_mb << 20,
            })
            .collect();
        let gap = match durability.mode {
            DurabilityMode::Flush => Duration::from_millis(durability.flush_interval_ms),
            _ => Duration::ZERO,
        };
        let (sync, logs) = SyncThread::start_paced(&life, configs, gap)
            .map_err(|e| DataDirError(format!("{}: {e}", life.display())))?;
        Ok(Some(Arc::new(Self {
            mode: LogMode {
                wait: durability.mode == DurabilityMode::Sync,
            },
            dir: life,
            sync,
            logs: Mutex::new(logs.into_iter().map(Some).collect()),
        })))
    }

    /// Worker `thread`'s log, taken once.
    pub fn take(&self, thread: u16) -> Option<(WorkerLog, LogMode)> {
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        logs.get_mut(usize::from(thread))
            .and_then(Option::take)
            .map(|log| (log, self.mode))
    }

    /// Records in this life's directory that it loaded its copies from life `life`'s
    /// logs ([`crate::restore`]): a later restart of this life reads that chain. Synced
    /// (file and directory) before it returns.
    pub fn note_restored_from(&self, life: u64) -> Result<(), DataDirError> {
        let path = self.dir.join(crate::restore::RESTORED_FROM_FILE);
        let err = |e: std::io::Error| DataDirError(format!("{}: {e}", path.display()));
        std::fs::write(&path, format!("{life:016x}\n")).map_err(err)?;
        std::fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(err)?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)
    }

    /// Removes this life's record that it loaded its copies from an earlier life's logs
    /// ([`NodeLogs::note_restored_from`]): the restart went on without this life, which
    /// joined later, refilled, so a later restart must not read the earlier lives. Best
    /// effort: a link left behind only makes a later restart read logs that this life's
    /// fills supersede.
    pub fn forget_restored_from(&self) {
        let path = self.dir.join(crate::restore::RESTORED_FROM_FILE);
        if std::fs::remove_file(&path).is_ok()
            && let Ok(dir) = std::fs::File::open(&self.dir)
        {
            let _ = dir.sync_all();
        }
    }

    /// Removes the directories of this node's other lives: once this life completed a
    /// checkpoint, a restart needs none of them (the chain of lives stops at the newest
    /// life with a complete checkpoint, and a view names one life per node). Returns
    /// how many went.
    pub fn remove_other_lives(&self) -> Result<usize, DataDirError> {
        let Some(parent) = self.dir.parent() else {
            return Ok(0);
        };
        let err = |p: &Path, e: std::io::Error| DataDirError(format!("{}: {e}", p.display()));
        let mut removed = 0;
        for entry in std::fs::read_dir(parent).map_err(|e| err(parent, e))? {
            let entry = entry.map_err(|e| err(parent, e))?;
            let path = entry.path();
            let is_life = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("life-"));
            if is_life && path != self.dir && path.is_dir() {
                std::fs::remove_dir_all(&path).map_err(|e| err(&path, e))?;
                removed += 1;
            }
        }
        if removed > 0 {
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(|e| err(parent, e))?;
        }
        Ok(removed)
    }

    /// Whether a sync of one of this life's logs failed: the kernel may have dropped the
    /// pages it could not write, so nothing more of that log can be trusted durable.
    pub fn failed(&self) -> bool {
        self.sync.any_failed()
    }

    /// Segments the sync thread removed after checkpoints covered them.
    pub fn segments_removed(&self) -> u64 {
        self.sync.segments_removed()
    }

    /// This life's log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Rounds of syncs and syncs made so far.
    pub fn sync_counts(&self) -> (u64, u64) {
        self.sync.counts()
    }
}

/// Checks that `dir` belongs to this cluster and node in this format, or makes it (with
/// its `ferrotx-data.toml`): an error naming the file and what differs.
pub fn check_data_dir(dir: &Path, config: &Configuration, node: u16) -> Result<(), DataDirError> {
    check_or_make(dir, config, node)
}

fn check_or_make(dir: &Path, config: &Configuration, node: u16) -> Result<(), DataDirError> {
    let meta = dir.join(DATA_META_FILE);
    let err = |e: std::io::Error| DataDirError(format!("{}: {e}", meta.display()));
    match std::fs::read_to_string(&meta) {
        Ok(text) => {
            let field = |name: &str| -> Option<String> {
                text.lines().find_map(|line| {
                    let (k, v) = line.split_once('=')?;
                    (k.trim() == name).then(|| v.trim().trim_matches('"').to_string())
                })
            };
            let version = field("format").and_then(|v| v.parse::<u32>().ok());
            if version != Some(DATA_FORMAT_VERSION) {
                return Err(DataDirError(format!(
                    "{}: data directory of format version {}; this build reads version \
                     {DATA_FORMAT_VERSION}",
                    meta.display(),
                    field("format").unwrap_or_else(|| "(none)".into())
                )));
            }
            let cluster = field("cluster").and_then(|v| v.parse::<u64>().ok());
            if cluster != Some(config.id()) {
                return Err(DataDirError(format!(
                    "{}: data directory of cluster {}, not of this cluster ({})",
                    meta.display(),
                    field("cluster").unwrap_or_else(|| "(none)".into()),
                    config.id()
                )));
            }
            let owner = field("node").and_then(|v| v.parse::<u16>().ok());
            if owner != Some(node) {
                return Err(DataDirError(format!(
                    "{}: data directory of node {}, not of node {node}",
                    meta.display(),
                    field("node").unwrap_or_else(|| "(none)".into()),
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)
                .map_err(|e| DataDirError(format!("{}: {e}", dir.display())))?;
            let text = format!(
                "# ferrotx data directory: do not edit\nformat = {DATA_FORMAT_VERSION}\n\
                 cluster = {}\nnode = {node}\nmode = \"{}\"\n",
                config.id(),
                config.durability().mode.name()
            );
            let tmp = dir.join(format!("{DATA_META_FILE}.tmp"));
            std::fs::write(&tmp, text).map_err(err)?;
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(err)?;
            std::fs::rename(&tmp, &meta).map_err(err)?;
            std::fs::File::open(dir)
                .and_then(|f| f.sync_all())
                .map_err(err)?;
            Ok(())
        }
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotx_cluster::Durability;

    fn config(id: u64, mode: DurabilityMode) -> Configuration {
        let local = Configuration::local(3, 2, 2, 3, 20_000).unwrap();
        let text = local.to_toml_string().replacen(
            &format!("id = {}", local.id()),
            &format!("id = {id}"),
            1,
        );
        Configuration::from_toml_str(&text)
            .unwrap()
            .with_durability(Durability {
                mode,
                ..Durability::default()
            })
    }

    #[test]
    fn a_directory_of_another_cluster_node_or_version_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("ferrotx-datadir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ours = config(7, DurabilityMode::Sync);
        assert!(
            NodeLogs::open(&dir, &config(7, DurabilityMode::Memory), 0, 1)
                .unwrap()
                .is_none()
        );
        let logs = NodeLogs::open(&dir, &ours, 1, 5).unwrap().unwrap();
        assert!(logs.take(0).is_some() && logs.take(0).is_none() && logs.take(1).is_some());
        drop(logs);
        // The next life of the same node opens it; the same life again does not.
        assert!(NodeLogs::open(&dir, &ours, 1, 6).unwrap().is_some());
        let again = NodeLogs::open(&dir, &ours, 1, 6).unwrap_err().to_string();
        assert!(again.contains("life-0000000000000006"), "{again}");
        let node = NodeLogs::open(&dir, &ours, 2, 7).unwrap_err().to_string();
        assert!(
            node.contains("ferrotx-data.toml") && node.contains("node 1"),
            "{node}"
        );
        let cluster = NodeLogs::open(&dir, &config(8, DurabilityMode::Sync), 1, 8)
            .unwrap_err()
            .to_string();
        assert!(cluster.contains("cluster 7"), "{cluster}");
        let meta = dir.join(DATA_META_FILE);
        let text = std::fs::read_to_string(&meta).unwrap();
        std::fs::write(&meta, text.replace("format = 1", "format = 9")).unwrap();
        let version = NodeLogs::open(&dir, &ours, 1, 9).unwrap_err().to_string();
        assert!(version.contains("format version 9"), "{version}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
