//! [`FsStorage`]: the write-ahead log's [`Storage`] over real files in one directory (a
//! node's data directory, issue 32). The log's logic (`ferrotx_wal`) is sans-IO; this is
//! its only file I/O.
//!
//! - **Durability.** `sync` is `fdatasync` (the data and the size needed to read it back);
//!   the first sync of a file created since also fsyncs the directory, so the file's name
//!   survives a crash too. `remove` fsyncs the directory before it returns.
//! - **Preallocation.** Extending a file (`set_len` past its end) is `posix_fallocate`:
//!   the blocks are reserved, so writes inside a preallocated segment never find the disk
//!   full (a plain `ftruncate` would make a sparse file, whose writes can still fail).
//! - **Errors.** `ENOSPC` (and `EDQUOT`) is [`StorageError::NoSpace`]; a failed sync is
//!   [`StorageError::SyncFailed`], which the log treats as fatal for the copy (after a
//!   failed fsync Linux may have dropped the dirty pages, so no retry can be trusted).
//! - **Names** are plain file names inside the directory: no separator, not `.` or `..`.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use ferrotx_wal::{Storage, StorageError};

/// A [`Storage`] over the files of one directory (see the module's documentation).
#[derive(Debug)]
pub struct FsStorage {
    dir: PathBuf,
    /// Open files, by name.
    files: HashMap<String, File>,
    /// Files created since the directory was last synced.
    unsynced_names: HashSet<String>,
}

impl FsStorage {
    /// Opens directory `dir` (created, with its parents, if missing).
    pub fn open(dir: impl AsRef<Path>) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            files: HashMap::new(),
            unsynced_names: HashSet::new(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes this value's descriptor of file `name`, if open (a sync thread done with a
    /// log's old segment); the next operation on it opens it again.
    pub fn close(&mut self, name: &str) {
        self.files.remove(name);
    }

    fn path(&self, name: &str) -> Result<PathBuf, StorageError> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(StorageError::Io(format!(
                "{name:?} is not a file name in {}",
                self.dir.display()
            )));
        }
        Ok(self.dir.join(name))
    }

    /// The open file `name`, opened now if it exists.
    fn file(&mut self, name: &str) -> Result<&File, StorageError> {
        if !self.files.contains_key(name) {
            let path = self.path(name)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| error(&path, &e))?;
            self.files.insert(name.to_owned(), file);
        }
        Ok(&self.files[name])
    }

    /// A file to read: the open one, or opened read-only for the call.
    fn reader(&self, name: &str) -> Result<ReadFile<'_>, StorageError> {
        if let Some(file) = self.files.get(name) {
            return Ok(ReadFile::Open(file));
        }
        let path = self.path(name)?;
        File::open(&path)
            .map(ReadFile::Owned)
            .map_err(|e| error(&path, &e))
    }

    fn sync_dir(&self) -> Result<(), StorageError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StorageError::SyncFailed(format!("directory {}: {e}", self.dir.display())))
    }
}

enum ReadFile<'a> {
    Open(&'a File),
    Owned(File),
}

impl ReadFile<'_> {
    fn get(&self) -> &File {
        match self {
            ReadFile::Open(f) => f,
            ReadFile::Owned(f) => f,
        }
    }
}

/// An I/O error on `path` as a [`StorageError`].
fn error(path: &Path, e: &io::Error) -> StorageError {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => StorageError::NoSpace,
        _ if e.kind() == io::ErrorKind::NotFound => {
            StorageError::NotFound(path.display().to_string())
        }
        _ => StorageError::Io(format!("{}: {e}", path.display())),
    }
}

impl Storage for FsStorage {
    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        let path = self.path(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| error(&path, &e))?;
        self.files.insert(name.to_owned(), file);
        self.unsynced_names.insert(name.to_owned());
        Ok(())
    }

    fn write_at(&mut self, name: &str, offset: u64, bytes: &[u8]) -> Result<(), StorageError> {
        let path = self.path(name)?;
        self.file(name)?
            .write_all_at(bytes, offset)
            .map_err(|e| error(&path, &e))
    }

    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        let path = self.path(name)?;
        self.file(name)?
            .sync_data()
            .map_err(|e| StorageError::SyncFailed(format!("{}: {e}", path.display())))?;
        if self.unsynced_names.contains(name) {
            self.sync_dir()?;
            self.unsynced_names.remove(name);
        }
        Ok(())
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let path = self.path(name)?;
        let file = self.reader(name)?;
        let mut read = 0;
        while read < buf.len() {
            match file.get().read_at(&mut buf[read..], offset + read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(error(&path, &e)),
            }
        }
        Ok(read)
    }

    fn len(&self, name: &str) -> Result<u64, StorageError> {
        let path = self.path(name)?;
        let file = self.reader(name)?;
        file.get()
            .metadata()
            .map(|m| m.len())
            .map_err(|e| error(&path, &e))
    }

    fn set_len(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        let path = self.path(name)?;
        let file = self.file(name)?;
        let current = file.metadata().map_err(|e| error(&path, &e))?.len();
        if len <= current {
            return file.set_len(len).map_err(|e| error(&path, &e));
        }
        let length = libc::off_t::try_from(len)
            .map_err(|_| StorageError::Io(format!("{}: length {len} too large", path.display())))?;
        // SAFETY: posix_fallocate on a descriptor this value owns; no pointers.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, length) };
        if r == 0 {
            Ok(())
        } else {
            Err(error(&path, &io::Error::from_raw_os_error(r)))
        }
    }

    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        let path = self.path(name)?;
        self.files.remove(name);
        self.unsynced_names.remove(name);
        fs::remove_file(&path).map_err(|e| error(&path, &e))?;
        self.sync_dir()
    }

    fn list(&self) -> Result<Vec<String>, StorageError> {
        let entries = fs::read_dir(&self.dir).map_err(|e| error(&self.dir, &e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| error(&self.dir, &e))?;
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            if let (true, Some(name)) = (is_file, entry.file_name().to_str()) {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotx_wal::{LogWriter, WalConfig, WalError, recover};

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("ferrotx-disk-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn files_are_written_preallocated_read_listed_and_removed() {
        let dir = TempDir::new("ops");
        let mut s = FsStorage::open(dir.0.join("data")).unwrap();
        s.create("a").unwrap();
        assert!(matches!(s.create("a"), Err(StorageError::Io(_))));
        s.set_len("a", 1 << 16).unwrap();
        assert_eq!(s.len("a").unwrap(), 1 << 16);
        // Preallocated: the blocks are there, not a hole.
        let blocks = {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(dir.0.join("data/a")).unwrap().blocks()
        };
        assert!(blocks * 512 >= 1 << 16, "{blocks} blocks");
        s.write_at("a", 100, b"hello").unwrap();
        s.sync("a").unwrap();
        let mut buf = [0u8; 7];
        assert_eq!(s.read_at("a", 99, &mut buf).unwrap(), 7);
        assert_eq!(&buf, b"\0hello\0");
        // Another value over the same directory reads what the first synced.
        let other = FsStorage::open(dir.0.join("data")).unwrap();
        let mut five = [0u8; 5];
        assert_eq!(other.read_at("a", 100, &mut five).unwrap(), 5);
        assert_eq!(&five, b"hello");
        // Past the end: fewer bytes, no error.
        assert_eq!(s.read_at("a", (1 << 16) - 2, &mut buf).unwrap(), 2);
        s.set_len("a", 10).unwrap();
        assert_eq!(s.len("a").unwrap(), 10);
        s.create("b").unwrap();
        assert_eq!(s.list().unwrap(), ["a", "b"]);
        s.remove("b").unwrap();
        assert_eq!(s.list().unwrap(), ["a"]);
        assert!(matches!(s.len("b"), Err(StorageError::NotFound(_))));
        for bad in ["", ".", "..", "x/y"] {
            assert!(matches!(s.create(bad), Err(StorageError::Io(_))), "{bad}");
        }
    }

    fn config() -> WalConfig {
        WalConfig {
            log_name: "w0".into(),
            cluster_id: [7; 16],
            node_id: 1,
            segment_size_bytes: 4096,
        }
    }

    /// A log written through real files recovers whole after its writer is dropped (as a
    /// process killed after its syncs), a flipped bit in a synced record is corruption
    /// naming the file, and another cluster's directory is refused by name.
    #[test]
    fn a_log_on_real_files_recovers_and_refuses_damage() {
        let dir = TempDir::new("log");
        let storage = FsStorage::open(&dir.0).unwrap();
        let mut writer = LogWriter::create(storage, config()).unwrap();
        for i in 0..200u32 {
            writer.append(1, &i.to_le_bytes().repeat(5)).unwrap();
            if i % 7 == 0 {
                writer.sync().unwrap();
            }
        }
        writer.sync().unwrap();
        drop(writer);
        let storage = FsStorage::open(&dir.0).unwrap();
        let recovery = recover(&storage, &config()).unwrap();
        assert_eq!(recovery.records.len(), 200);
        assert!(recovery.segments.len() > 1, "{:?}", recovery.segments);
        for (i, r) in recovery.records.iter().enumerate() {
            assert_eq!(r.payload, (i as u32).to_le_bytes().repeat(5));
        }
        let other = WalConfig {
            cluster_id: [8; 16],
            ..config()
        };
        match recover(&storage, &other) {
            Err(e) => assert!(e.to_string().contains("w0-"), "{e}"),
            Ok(_) => panic!("another cluster's log accepted"),
        }
        // Flip a bit in the first segment's first record.
        let first = &recovery.segments[0].file;
        let path = dir.0.join(first);
        let mut bytes = fs::read(&path).unwrap();
        bytes[64 + 40] ^= 0x10;
        fs::write(&path, bytes).unwrap();
        let storage = FsStorage::open(&dir.0).unwrap();
        match recover(&storage, &config()) {
            Err(WalError::Corrupt { file, .. }) => assert_eq!(&file, first),
            other => panic!("{other:?}"),
        }
    }
}
