//! The cluster key on disk, and the keys a running node holds.
//!
//! A key file holds one or two keys, one per line, each 64 hexadecimal digits (32 bytes of
//! key material); `#` starts a comment. A file of exactly 32 bytes that is not that is
//! taken as one key's raw material. Datagrams are sealed with the first key and
//! accepted under either (`ferrotx_wire::auth::Keys`), which is how keys rotate without
//! downtime (docs/operations.md, "Cluster key"). The file must be readable by its owner
//! only: a key anyone on the host can read keeps no one out, so ferrotx refuses it.
//!
//! Where it is: the configuration's `key_file`, relative to the configuration file, or
//! else the configuration file's path with `.key` appended. The node with the lowest id
//! creates it when it is missing (mode 0600, never over an existing file); the others
//! wait for it up to [`KEY_WAIT`].
//!
//! A running node reads the file again every [`KEY_RELOAD`] ([`ClusterKeys::watch`]):
//! an edit reaches its worker threads and its lease thread within about that, with no
//! restart.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ferrotx_cluster::{Configuration, CoordinationService};
use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys};

/// How long a node other than the lowest waits for the key file to appear: the lowest
/// node, started at about the same time, creates it within milliseconds.
pub const KEY_WAIT: Duration = Duration::from_secs(10);

/// How often a running node reads its key file again, for rotations.
pub const KEY_RELOAD: Duration = Duration::from_secs(1);

/// Why the cluster key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("cluster key {}: cannot {what}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The key file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Group or others may read (or write) it.
    #[error(
        "cluster key {}: mode {mode:o} lets others read it; make it readable by its owner only (chmod 600 {})",
        .path.display(), .path.display()
    )]
    Readable {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Not one or two lines of 64 hexadecimal digits.
    #[error(
        "cluster key {}: {why}; a key file holds one or two keys of 64 hexadecimal digits, one per line (`ferrotx keygen PATH` writes one)",
        .path.display()
    )]
    Malformed {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Another node was to create it, and it did not appear.
    #[error(
        "cluster key {} does not exist after waiting {}s: the node with the lowest id creates it; on several hosts, copy it here, or write a new one with `ferrotx keygen {}`",
        .path.display(), .waited.as_secs(), .path.display()
    )]
    Missing {
        /// The key file.
        path: PathBuf,
        /// How long this node waited.
        waited: Duration,
    },
    /// The coordination service could not give the cluster id.
    #[error("cluster id: {0}")]
    ClusterId(String),
}

/// The key file of the configuration at `config_path`.
pub fn key_path(config_path: &Path, config: &Configuration) -> PathBuf {
    match config.key_file() {
        Some(file) => {
            let file = Path::new(file);
            if file.is_absolute() {
                file.to_path_buf()
            } else {
                config_path.parent().unwrap_or(Path::new("")).join(file)
            }
        }
        None => {
            let mut path = config_path.as_os_str().to_owned();
            path.push(".key");
            PathBuf::from(path)
        }
    }
}

/// `N` bytes from the operating system's random source.
pub fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// What seals and opens this process's datagrams with `keys` for cluster `cluster`. The
/// process's random bits ([`Auth::new`]) are read from the operating system once, the
/// first time: a rotation later needs no file descriptor, and cannot fall back on anything
/// weaker. Fails only if that first read fails.
pub fn process_auth(keys: Keys, cluster: ClusterId) -> io::Result<Auth> {
    static RANDOM: std::sync::OnceLock<[u8; 16]> = std::sync::OnceLock::new();
    let random = match RANDOM.get() {
        Some(random) => *random,
        None => {
            let drawn: [u8; 16] = random_bytes()?;
            *RANDOM.get_or_init(|| drawn)
        }
    };
    Ok(Auth::new(keys, cluster, random))
}

/// One key line: 64 hexadecimal digits of fresh key material.
pub fn new_key_line() -> io::Result<String> {
    let material: [u8; KEY_BYTES] = random_bytes()?;
    Ok(material.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes a new key file at `path` (mode 0600), never over an existing file. The key is
/// written and synced in a file of its own first, then linked in at `path` (which fails
/// if `path` exists), so that a node reading `path` never sees it empty or half written.
pub fn write_new_key_file(path: &Path) -> Result<(), KeyError> {
    let io_error = |what, source| KeyError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    let line = new_key_line().map_err(|e| io_error("read /dev/urandom for", e))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".new-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = fs::remove_file(&tmp);
    let written = (|| -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(format!("{line}\n").as_bytes())?;
        file.sync_all()?;
        fs::hard_link(&tmp, path)
    })();
    let _ = fs::remove_file(&tmp);
    written.map_err(|e| io_error("create", e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Reads and checks the key file at `path`: its keys and the text they came from.
pub fn read_key_file(path: &Path) -> Result<(Keys, String), KeyError> {
    let io_error = |what, source| KeyError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    let mut file = fs::File::open(path).map_err(|e| io_error("open", e))?;
    let mode = file
        .metadata()
        .map_err(|e| io_error("read the permissions of", e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(KeyError::Readable {
            path: path.to_path_buf(),
            mode: mode & 0o777,
        });
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| io_error("read", e))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // 32 bytes that are not a key line are taken as raw key material (a file made with
    // `head -c 32 /dev/urandom`).
    let keys = match <[u8; KEY_BYTES]>::try_from(bytes.as_slice()) {
        Ok(raw) if parse_keys(&text).is_err() => Ok(Keys::one(Key::from_material(&raw))),
        _ => parse_keys(&text),
    }
    .map_err(|why| KeyError::Malformed {
        path: path.to_path_buf(),
        why,
    })?;
    Ok((keys, text))
}

/// The keys in a key file's text.
fn parse_keys(text: &str) -> Result<Keys, String> {
    let mut keys = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if line.len() != 2 * KEY_BYTES || !line.is_ascii() {
            return Err(format!("line {} is not 64 hexadecimal digits", number + 1));
        }
        let mut material = [0u8; KEY_BYTES];
        for (i, byte) in material.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&line[2 * i..2 * i + 2], 16)
                .map_err(|_| format!("line {} is not 64 hexadecimal digits", number + 1))?;
        }
        keys.push(Key::from_material(&material));
    }
    let mut keys = keys.into_iter();
    match (keys.next(), keys.next(), keys.next()) {
        (None, _, _) => Err("it holds no key".to_string()),
        (Some(one), None, _) => Ok(Keys::one(one)),
        (Some(send), Some(also), None) => {
            Keys::two(send, also).ok_or_else(|| "its two keys are the same".to_string())
        }
        (Some(_), Some(_), Some(_)) => Err("it holds more than two keys".to_string()),
    }
}

/// The keys of node `node` of `config` (read from `config_path`): the key file read, or
/// created if this is the lowest node and it is missing, or waited for up to `wait`.
pub fn load_keys(
    config_path: &Path,
    config: &Configuration,
    node: u16,
    wait: Duration,
) -> Result<(Keys, PathBuf), KeyError> {
    let path = key_path(config_path, config);
    let lowest = config.members().iter().map(|m| m.node).min() == Some(node);
    let start = Instant::now();
    loop {
        match read_key_file(&path) {
            Ok((keys, _)) => return Ok((keys, path)),
            Err(KeyError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if lowest {
            match write_new_key_file(&path) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "created the cluster key");
                    continue;
                }
                // Made by another process meanwhile: read it.
                Err(KeyError::Io { source, .. })
                    if source.kind() == io::ErrorKind::AlreadyExists =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        if start.elapsed() >= wait {
            return Err(KeyError::Missing { path, waited: wait });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The cluster's id from the coordination service, made now if the cluster has none.
pub fn cluster_id(coordination: &mut dyn CoordinationService) -> Result<ClusterId, KeyError> {
    let proposed: [u8; 16] = random_bytes().map_err(|source| KeyError::Io {
        what: "read",
        path: PathBuf::from("/dev/urandom"),
        source,
    })?;
    coordination
        .cluster_id(proposed)
        .map(ClusterId)
        .map_err(|e| KeyError::ClusterId(e.to_string()))
}

/// The keys a running node seals and opens datagrams with, shared by its worker threads
/// and its lease thread. A reader compares [`ClusterKeys::generation`] (one relaxed load
/// per loop iteration) with the generation it holds, and takes [`ClusterKeys::current`]
/// (a mutex) only when it changed, which is when the key file changed.
pub struct ClusterKeys {
    generation: AtomicU64,
    current: Mutex<Option<Auth>>,
    /// Rotations taken, and key files refused since the node started.
    reloads: AtomicU64,
    refused: AtomicU64,
}

impl std::fmt::Debug for ClusterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterKeys")
            .field("generation", &self.generation())
            .field("current", &self.current())
            .finish()
    }
}

impl ClusterKeys {
    /// Keys that never change (`None`: no authentication, for benchmarks of its cost).
    pub fn fixed(auth: Option<Auth>) -> Arc<Self> {
        Arc::new(Self {
            generation: AtomicU64::new(1),
            current: Mutex::new(auth),
            reloads: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// Keys read from `path` now, for cluster `cluster`, and again every [`KEY_RELOAD`]
    /// by a thread of their own for as long as anyone holds the value returned. A file
    /// that changed and fails its checks is logged and counted, and the keys held stay.
    /// Fails only if the process's random bits cannot be read ([`process_auth`]).
    pub fn watch(path: PathBuf, keys: Keys, cluster: ClusterId) -> io::Result<Arc<Self>> {
        let this = Self::fixed(Some(process_auth(keys, cluster)?));
        let weak: Weak<Self> = Arc::downgrade(&this);
        let mut loaded = fs::read(&path).unwrap_or_default();
        let spawned = std::thread::Builder::new()
            .name("ferrotx-keys".to_string())
            .spawn(move || {
                loop {
                    std::thread::sleep(KEY_RELOAD);
                    let Some(this) = weak.upgrade() else {
                        return;
                    };
                    let now = fs::read(&path).unwrap_or_default();
                    if now == loaded {
                        continue;
                    }
                    // Read again with its checks (permissions, format); what is looked at
                    // next time is what was there now, taken or refused.
                    loaded = now;
                    match read_key_file(&path) {
                        Ok((keys, _)) => {
                            tracing::info!(
                                path = %path.display(),
                                send = format_args!("{:08x}", keys.send().fingerprint()),
                                also = ?keys.also().map(|k| format!("{:08x}", k.fingerprint())),
                                "cluster key file changed: keys replaced"
                            );
                            match process_auth(keys, cluster) {
                                Ok(auth) => {
                                    this.replace(Some(auth));
                                    this.reloads.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    tracing::error!("{e}: keeping the keys held");
                                    this.refused.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        Err(e) => {
                            tracing::error!("{e}; keeping the keys held");
                            this.refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the key file's watcher ({e}): keys will not reload");
        }
        Ok(this)
    }

    /// Changes with every replacement of the keys.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The keys now.
    pub fn current(&self) -> Option<Auth> {
        self.current.lock().expect("keys lock").clone()
    }

    /// Replaces the keys; readers see a new generation.
    pub fn replace(&self, auth: Option<Auth>) {
        *self.current.lock().expect("keys lock") = auth;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Key files taken since the start, and changed files refused.
    pub fn reloads(&self) -> (u64, u64) {
        (
            self.reloads.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ferrotx-keys-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_new_key_file_is_the_owners_only_and_reads_back() {
        let dir = temp_dir("new");
        let path = dir.join("k");
        write_new_key_file(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        read_key_file(&path).unwrap();
        assert!(
            matches!(write_new_key_file(&path), Err(KeyError::Io { .. })),
            "never over a file"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let dir = temp_dir("mode");
        let path = dir.join("k");
        write_new_key_file(&path).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let e = read_key_file(&path).unwrap_err();
            assert!(matches!(e, KeyError::Readable { .. }), "{mode:o}: {e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
        read_key_file(&path).unwrap();
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn thirty_two_raw_bytes_are_a_key() {
        let dir = temp_dir("raw");
        let path = dir.join("k");
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap();
        file.write_all(&[0xff; 32]).unwrap();
        let (keys, _) = read_key_file(&path).unwrap();
        assert_eq!(
            keys.send().fingerprint(),
            Key::from_material(&[0xff; 32]).fingerprint()
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn key_files_hold_one_or_two_keys() {
        let a = "00".repeat(32);
        let b = "11".repeat(32);
        let one = parse_keys(&format!("# the key\n{a}\n")).unwrap();
        assert!(one.also().is_none());
        let two = parse_keys(&format!("{b}\n{a} # old\n")).unwrap();
        assert_eq!(
            two.send().fingerprint(),
            Key::from_material(&[0x11; 32]).fingerprint()
        );
        assert!(two.also().is_some());
        for bad in [
            "",
            "zz",
            &format!("{a}\n{a}"),
            &format!("{a}\n{b}\n{a}"),
            &a[..60],
        ] {
            assert!(parse_keys(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_key_file_is_next_to_the_configuration_unless_named() {
        let config = Configuration::local(3, 3, 1, 2, 7000).unwrap();
        assert_eq!(
            key_path(Path::new("/etc/ferrotx/c.toml"), &config),
            PathBuf::from("/etc/ferrotx/c.toml.key")
        );
        let named = config.clone().with_key_file(Some("secret/k".to_string()));
        assert_eq!(
            key_path(Path::new("/etc/ferrotx/c.toml"), &named),
            PathBuf::from("/etc/ferrotx/secret/k")
        );
        let absolute = config.with_key_file(Some("/k".to_string()));
        assert_eq!(
            key_path(Path::new("c.toml"), &absolute),
            PathBuf::from("/k")
        );
    }

    #[test]
    fn the_lowest_node_creates_the_key_and_the_others_wait_for_it() {
        let dir = temp_dir("load");
        let config_path = dir.join("c.toml");
        let config = Configuration::local(3, 3, 1, 2, 7000).unwrap();
        let e = load_keys(&config_path, &config, 1, Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("ferrotx keygen"), "{e}");
        let (keys, path) = load_keys(&config_path, &config, 0, KEY_WAIT).unwrap();
        assert_eq!(path, dir.join("c.toml.key"));
        let (again, _) = load_keys(&config_path, &config, 2, KEY_WAIT).unwrap();
        assert_eq!(keys.send().fingerprint(), again.send().fingerprint());
        fs::remove_dir_all(dir).unwrap();
    }
}
