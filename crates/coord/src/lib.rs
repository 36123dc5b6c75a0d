//! A file-backed [`CoordinationService`]: the embedded default for clusters whose nodes
//! all run on one host (several `ferrotx node` processes on one machine share it).
//!
//! # Why a file
//!
//! A cluster on one host needs a place for its current [`View`] that outlives every node
//! process and that every node can change by compare-and-swap. A file next to the
//! configuration file does that with no setup: no daemon to start, nothing to install.
//! Clusters over several hosts will use etcd instead (same trait, a transaction comparing
//! the key's value or mod revision); a file only coordinates processes that share a file
//! system with working `flock`-style locks, that is one host.
//!
//! # Files
//!
//! For a state file `PATH` (by default the configuration file's path with `.state.toml`
//! appended, see [`default_state_path`]):
//!
//! - `PATH`: the current view as TOML ([`View::to_text`]). Absent until the first view is
//!   stored: no cluster has run on it yet.
//! - `PATH.lock`: the state lock, an exclusive lock ([`File::lock`]) taken for the
//!   duration of every change ([`FileCoordination::compare_and_swap`],
//!   [`FileCoordination::retire_if_dead`]). The file itself stays empty.
//! - `PATH.node-N.lock`: node `N`'s liveness lock, held exclusively ([`File::try_lock`])
//!   by the [`FileCoordination`] of node `N` for as long as it lives, so by the node
//!   process. The operating system releases it when the process dies, however it dies, so
//!   a lock that can be taken means no process runs as node `N`. It also stops two
//!   processes from running as the same node on one state file.
//! - `PATH.tmp`: a new view being written (only under the state lock).
//!
//! # Atomic replace
//!
//! A change writes the new view to `PATH.tmp`, fsyncs it, renames it over `PATH` and
//! fsyncs the directory. A reader therefore sees the whole old view or the whole new one,
//! never a partly written file, and a change that returned is on disk; reads take no lock.
//! Compare-and-swap reads the current view id and replaces the file under the state lock,
//! so two changes never both succeed from the same id.
//!
//! # A cluster that died
//!
//! When every node of a cluster died (a crash, or a test run that ended), the stored view
//! still names them as members. A node started later calls
//! [`FileCoordination::retire_if_dead`]: if no member's liveness lock is held, the view is
//! replaced by an ended one ([`View::ended`]) with the same id, so that the next cluster
//! starts afresh and still uses higher ids.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferrotx_cluster::{CoordinationError, CoordinationService, View};
use ferrotx_wire::auth::ClusterId;

/// How often [`FileCoordination::open`] tries the liveness lock before concluding that
/// another process holds it: [`FileCoordination::retire_if_dead`] probes other nodes' locks
/// by taking them for an instant, which must not make a node starting at that moment fail.
const LIVENESS_LOCK_TRIES: u32 = 20;

/// The pause between two of those tries.
const LIVENESS_LOCK_PAUSE: Duration = Duration::from_millis(5);

/// How long a change waits for the state lock by default before it fails
/// ([`FileCoordination::set_lock_timeout`]): another process holding it that long is
/// stuck, and a node must not be.
pub const STATE_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest pause between two tries of the state lock.
const STATE_LOCK_PAUSE_MAX: Duration = Duration::from_millis(20);

/// Why [`FileCoordination::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another live process, or another [`FileCoordination`] in this one, holds the node's
    /// liveness lock: it runs as this node on this coordination file.
    #[error("node {node} already runs on this coordination file (lock held: {})", .lock.display())]
    NodeRunning {
        /// The node id.
        node: u16,
        /// The liveness lock file.
        lock: PathBuf,
    },
    /// A file or directory could not be created, opened or locked.
    #[error("coordination file: cannot {what} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl From<OpenError> for CoordinationError {
    fn from(e: OpenError) -> Self {
        CoordinationError::Unavailable(e.to_string())
    }
}

/// The state file path for a configuration file: its path with `.state.toml` appended to
/// the file name (`cluster.toml` gives `cluster.toml.state.toml`).
pub fn default_state_path(config_path: &Path) -> PathBuf {
    with_suffix(config_path, ".state.toml")
}

/// The cluster id stored beside the state file `state` (see
/// [`FileCoordination`]'s `cluster_id`), read without a lock: `None` if no node made one
/// yet. For tools (`ferrotx status`) that are not nodes.
pub fn read_cluster_id(state: &Path) -> Result<Option<[u8; 16]>, CoordinationError> {
    let path = with_suffix(state, ".cluster-id");
    match fs::read_to_string(&path) {
        Ok(text) => parse_cluster_id(&text).map(Some).ok_or_else(|| {
            CoordinationError::Unavailable(format!("{} does not hold a cluster id", path.display()))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(unavailable("read", &path, &e)),
    }
}

/// A cluster id written by [`FileCoordination`]'s `cluster_id`.
fn parse_cluster_id(text: &str) -> Option<[u8; 16]> {
    ClusterId::from_hex(text).map(|id| id.0)
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = OsString::from(path.as_os_str());
    s.push(suffix);
    PathBuf::from(s)
}

/// A [`CoordinationService`] keeping the view in a file (see the crate documentation for
/// the files and the locks). Holds node `node`'s liveness lock for as long as it lives.
#[derive(Debug)]
pub struct FileCoordination {
    /// The state file.
    path: PathBuf,
    /// The node this value runs as.
    node: u16,
    /// The liveness lock file, locked exclusively (released when dropped).
    _liveness: File,
    /// The highest view id this value read or stored: once a view was there, a state
    /// file gone missing is an error that names it, never "no cluster yet".
    seen: Option<u64>,
    /// How long a change waits for the state lock before it fails.
    lock_timeout: Duration,
}

impl FileCoordination {
    /// Opens the coordination state file `path` as node `node`: creates its directory if
    /// missing and takes the node's liveness lock (`PATH.node-N.lock`), held until the
    /// value is dropped. Fails with [`OpenError::NodeRunning`] if another process, or
    /// another value in this one, holds it. The state file itself need not exist.
    pub fn open(path: impl AsRef<Path>, node: u16) -> Result<Self, OpenError> {
        Self::open_inner(path.as_ref(), node, None)
    }

    /// [`FileCoordination::open`] for the process that runs as life `incarnation` of
    /// node `node`: the liveness lock is taken and the life written into its file under
    /// the state lock, at once, so that no other process ever finds the lock held
    /// without knowing by which life. A member of a view is alive only while its own
    /// life holds its node's lock: a newer life of the node holding it proves the member
    /// dead, whether or not that newer life is admitted yet (a whole cluster killed and
    /// started again, each node seeing the others' new processes).
    pub fn open_life(
        path: impl AsRef<Path>,
        node: u16,
        incarnation: u64,
    ) -> Result<Self, OpenError> {
        Self::open_inner(path.as_ref(), node, Some(incarnation))
    }

    fn open_inner(path: &Path, node: u16, life: Option<u64>) -> Result<Self, OpenError> {
        let path = path.to_path_buf();
        let dir = parent_dir(&path);
        fs::create_dir_all(&dir).map_err(|source| OpenError::Io {
            what: "create directory",
            path: dir.clone(),
            source,
        })?;
        let lock_path = node_lock_path(&path, node);
        let file = open_lock_file(&lock_path).map_err(|source| OpenError::Io {
            what: "open",
            path: lock_path.clone(),
            source,
        })?;
        // With a life: under the state lock, so that a liveness check (which holds it)
        // sees the lock free, or held with this life written.
        let state_lock = match life {
            Some(_) => Some(
                Self::take_state_lock(&path, STATE_LOCK_TIMEOUT).map_err(|e| OpenError::Io {
                    what: "lock",
                    path: with_suffix(&path, ".lock"),
                    source: io::Error::other(e.to_string()),
                })?,
            ),
            None => None,
        };
        let mut tries = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    tries += 1;
                    if tries >= LIVENESS_LOCK_TRIES {
                        return Err(OpenError::NodeRunning {
                            node,
                            lock: lock_path,
                        });
                    }
                    std::thread::sleep(LIVENESS_LOCK_PAUSE);
                }
                Err(TryLockError::Error(source)) => {
                    return Err(OpenError::Io {
                        what: "lock",
                        path: lock_path,
                        source,
                    });
                }
            }
        }
        if let Some(life) = life {
            let written = file
                .set_len(0)
                .and_then(|()| (&file).write_all(format!("{life}\n").as_bytes()));
            written.map_err(|source| OpenError::Io {
                what: "write",
                path: lock_path.clone(),
                source,
            })?;
        }
        drop(state_lock);
        Ok(Self {
            path,
            node,
            _liveness: file,
            seen: None,
            lock_timeout: STATE_LOCK_TIMEOUT,
        })
    }

    /// How long a change waits for the state lock, held by another process, before it
    /// fails with [`CoordinationError::Unavailable`] naming the lock (by default
    /// [`STATE_LOCK_TIMEOUT`]). A node sets it below its coordination calls' deadline, so
    /// that a lock held elsewhere fails a swap for certain, not with an unknown outcome.
    pub fn set_lock_timeout(&mut self, timeout: Duration) {
        self.lock_timeout = timeout;
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The node this value runs as (whose liveness lock it holds).
    pub fn node(&self) -> u16 {
        self.node
    }

    /// Retires the stored view if its cluster died: under the state lock, if the view has
    /// members and none of them is alive, replaces it by [`View::ended`] with the same id
    /// and the same partition count, and returns that id. A member is alive if another
    /// process (or another value in this one) holds its liveness lock; a member that is
    /// this node is an earlier life of it, so dead. Returns `None` (and changes nothing) if
    /// there is no view, it has already ended, or a member is alive.
    ///
    /// This is how a node started after a whole cluster died (a test run again on the
    /// same configuration file, say) learns that the stored view is stale. Compare-and-swap
    /// could not do it: the ended view keeps the id, so that the next cluster uses higher
    /// ones.
    pub fn retire_if_dead(&mut self) -> Result<Option<u64>, CoordinationError> {
        let _lock = self.state_lock()?;
        let Some(view) = self.read_file()? else {
            return Ok(None);
        };
        if view.is_ended() || self.any_member_alive(&view)? {
            return Ok(None);
        }
        self.write_file(&View::ended(view.id, view.copies.len()))?;
        Ok(Some(view.id))
    }

    /// [`FileCoordination::retire_if_dead`] for a cluster whose copies are on disk
    /// (`flush` and `sync` modes, issue 32): the stored view, if its cluster died, is
    /// replaced by [`View::ended_on_disk`] (same id, every life suspended with its
    /// copies), from which the restarted cluster's first view gives the copies to the new
    /// lives of the same nodes. Returns the view ended so (stored earlier, or now), or
    /// `None` if there is none, it ended with nothing on disk, or a member is alive.
    pub fn end_on_disk_if_dead(&mut self) -> Result<Option<View>, CoordinationError> {
        let _lock = self.state_lock()?;
        let Some(view) = self.read_file()? else {
            return Ok(None);
        };
        if view.is_ended_on_disk() {
            return Ok(Some(view));
        }
        if view.is_ended() || self.any_member_alive(&view)? {
            return Ok(None);
        }
        let ended = view.ended_on_disk();
        self.write_file(&ended)?;
        Ok(Some(ended))
    }

    /// The id of the stored view if a cluster runs on this service: a view that has not
    /// ended, with a member other than this node alive. A process started with `--join`
    /// checks it, so that it never starts a new, empty cluster by mistake.
    pub fn running_cluster(&mut self) -> Result<Option<u64>, CoordinationError> {
        let _lock = self.state_lock()?;
        match self.read_file()? {
            Some(view) if !view.is_ended() && self.any_member_alive(&view)? => Ok(Some(view.id)),
            _ => Ok(None),
        }
    }

    fn any_member_alive(&self, view: &View) -> Result<bool, CoordinationError> {
        for m in &view.members {
            if m.node != self.node && self.node_alive(m.node, m.incarnation)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// True if node `node`'s liveness lock is held. Takes it for an instant if not.
    /// True if life `incarnation` of node `node` may be alive: its node's liveness lock
    /// is held, and not by another life of the node ([`FileCoordination::open_life`]
    /// writes the holder's life into the lock's file; a holder that wrote none, such as
    /// a tool, counts as alive). Takes the lock for an instant if it is free.
    fn node_alive(&self, node: u16, incarnation: u64) -> Result<bool, CoordinationError> {
        let lock_path = node_lock_path(&self.path, node);
        let mut file = match File::open(&lock_path) {
            Ok(f) => f,
            // Never opened: no process runs as that node.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(unavailable("open", &lock_path, &e)),
        };
        match file.try_lock() {
            // Released when `file` is dropped, right away.
            Ok(()) => Ok(false),
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                Ok(match text.trim().parse::<u64>() {
                    Ok(holder) => holder == incarnation,
                    Err(_) => true,
                })
            }
            Err(TryLockError::Error(e)) => Err(unavailable("probe", &lock_path, &e)),
        }
    }

    /// Takes the state lock, trying for up to the lock timeout; released when the file
    /// returned is dropped.
    fn state_lock(&self) -> Result<File, CoordinationError> {
        Self::take_state_lock(&self.path, self.lock_timeout)
    }

    fn take_state_lock(path: &Path, lock_timeout: Duration) -> Result<File, CoordinationError> {
        let lock_path = with_suffix(path, ".lock");
        let file = open_lock_file(&lock_path).map_err(|e| unavailable("open", &lock_path, &e))?;
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(unavailable("lock", &lock_path, &e)),
            }
            let waited = started.elapsed();
            if waited >= lock_timeout {
                return Err(CoordinationError::Unavailable(format!(
                    "coordination file: the lock {} is held by another process (waited {} ms); nothing was changed",
                    lock_path.display(),
                    waited.as_millis()
                )));
            }
            std::thread::sleep(pause.min(lock_timeout - waited));
            pause = (pause * 2).min(STATE_LOCK_PAUSE_MAX);
        }
    }

    /// The view in the state file, `None` if there is none.
    fn read_file(&self) -> Result<Option<View>, CoordinationError> {
        Self::read_path(&self.path)
    }

    /// Notes the view read; an error if there is none although this value saw one (the
    /// state file was deleted).
    fn check_present(&mut self, view: Option<&View>) -> Result<(), CoordinationError> {
        match (view, self.seen) {
            (Some(v), _) => {
                self.seen = self.seen.max(Some(v.id));
                Ok(())
            }
            (None, Some(id)) => Err(self.missing(id)),
            (None, None) => Ok(()),
        }
    }

    /// The state file is missing although view `id` was stored in it.
    fn missing(&self, id: u64) -> CoordinationError {
        CoordinationError::Unavailable(format!(
            "coordination file {} is missing, though view {id} was stored in it: restore it (with that view or a newer one); no view can be stored until then",
            self.path.display()
        ))
    }

    /// The view in state file `path`, read without opening it as a node (for `status`):
    /// `None` if no cluster has run on it.
    pub fn read_path(path: &Path) -> Result<Option<View>, CoordinationError> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(unavailable("read", path, &e)),
        };
        View::from_text(&text).map(Some).map_err(|e| {
            CoordinationError::Unavailable(format!(
                "coordination file {} is malformed: {e}",
                path.display()
            ))
        })
    }

    /// Replaces the state file by `view`: writes a temporary file in the same directory,
    /// fsyncs it, renames it over the state file and fsyncs the directory. Only under the
    /// state lock.
    fn write_file(&self, view: &View) -> Result<(), CoordinationError> {
        let tmp = with_suffix(&self.path, ".tmp");
        let mut file = File::create(&tmp).map_err(|e| unavailable("create", &tmp, &e))?;
        file.write_all(view.to_text().as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| unavailable("write", &tmp, &e))?;
        drop(file);
        fs::rename(&tmp, &self.path).map_err(|e| unavailable("replace", &self.path, &e))?;
        // Renamed: readers see the new view now. A failure from here on does not undo
        // that, so it is an unknown outcome, never "not stored" (a CM told "unavailable"
        // would swap again and lose the stored view's wait for old leases).
        let dir = parent_dir(&self.path);
        File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| {
            CoordinationError::Unknown(format!(
                "coordination file: the view was written to {} but syncing {} failed: {e}",
                self.path.display(),
                dir.display()
            ))
        })
    }
}

impl CoordinationService for FileCoordination {
    /// Kept in `PATH.cluster-id` as 32 hexadecimal digits, written once under the state
    /// lock (and fsynced, with its directory) by the first node to ask.
    fn cluster_id(&mut self, proposed: [u8; 16]) -> Result<[u8; 16], CoordinationError> {
        let _lock = self.state_lock()?;
        let path = with_suffix(&self.path, ".cluster-id");
        match fs::read_to_string(&path) {
            Ok(text) => return parse_cluster_id(&text).ok_or_else(|| {
                CoordinationError::Unavailable(format!(
                    "{} does not hold a cluster id (32 hexadecimal digits); remove it only if no node of the cluster runs",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(unavailable("read", &path, &e)),
        }
        let text = ClusterId(proposed).to_hex();
        let tmp = with_suffix(&self.path, ".cluster-id.tmp");
        let write = || -> io::Result<()> {
            let mut file = File::create(&tmp)?;
            file.write_all(format!("{text}\n").as_bytes())?;
            file.sync_all()?;
            fs::rename(&tmp, &path)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| unavailable("write", &path, &e))?;
        Ok(proposed)
    }

    fn read(&mut self) -> Result<Option<View>, CoordinationError> {
        let view = self.read_file()?;
        self.check_present(view.as_ref())?;
        Ok(view)
    }

    fn compare_and_swap(
        &mut self,
        expected: Option<u64>,
        next: &View,
    ) -> Result<(), CoordinationError> {
        let _lock = self.state_lock()?;
        let current = self.read_file()?;
        self.check_present(current.as_ref())?;
        if current.is_none()
            && let Some(id) = expected
        {
            return Err(self.missing(id));
        }
        let current_id = current.as_ref().map(|v| v.id);
        if current_id != expected || expected.is_some_and(|id| next.id <= id) {
            return Err(CoordinationError::Conflict(current.map(Box::new)));
        }
        self.write_file(next)?;
        self.seen = self.seen.max(Some(next.id));
        Ok(())
    }
}

/// Node `node`'s liveness lock file for state file `path`.
fn node_lock_path(path: &Path, node: u16) -> PathBuf {
    with_suffix(path, &format!(".node-{node}.lock"))
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Opens (creating if missing) a file used only for its lock.
fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// An I/O failure as [`CoordinationError::Unavailable`], naming the file.
fn unavailable(what: &str, path: &Path, e: &io::Error) -> CoordinationError {
    CoordinationError::Unavailable(format!(
        "coordination file: cannot {what} {}: {e}",
        path.display()
    ))
}

#[cfg(test)]
mod tests;
