//! A disk in memory that fails the way real disks do, deterministically.
//!
//! Each file keeps the bytes that are durable and the writes made since its last sync.
//! Reads see every write. [`SimDisk::crash`] keeps what was durable and, of the unsynced
//! writes, applies a random subset in a random order (the page cache flushes pages in any
//! order), may tear the last one it applies (only a prefix reached the platter), and
//! drops the rest. A file never synced may vanish. [`SimDisk::flip_bit`] corrupts a stored
//! bit; a capacity makes writes fail with `NoSpace`; a sync can be made to fail.
//!
//! Randomness comes only from the generator the caller passes to `crash`, so a run is
//! replayed exactly from its seed.

use std::collections::BTreeMap;

use rand::Rng;
use rand::seq::SliceRandom;

use crate::storage::{Storage, StorageError};

/// One change to a file that no sync has made durable yet.
#[derive(Debug, Clone)]
enum Pending {
    /// `write_at(offset, bytes)`.
    Write { offset: u64, bytes: Vec<u8> },
    /// `set_len(len)`.
    SetLen(u64),
}

/// One simulated file.
#[derive(Debug, Clone, Default)]
struct SimFile {
    /// The bytes a crash keeps; `None` while the file was never synced (a crash may then
    /// lose the file itself).
    durable: Option<Vec<u8>>,
    /// What reads see: `durable` with every pending change applied in order.
    current: Vec<u8>,
    /// The changes since the last successful sync, oldest first.
    pending: Vec<Pending>,
}

/// What a crash did, for tests and the simulator's logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unsynced changes that reached the disk (whole or torn).
    pub applied: usize,
    /// Unsynced changes that were lost.
    pub dropped: usize,
    /// Whether the last applied change was a write that only partly reached the disk.
    pub torn: bool,
    /// Files that were never synced and vanished.
    pub vanished: usize,
}

/// An in-memory [`Storage`] with crash, tear, reorder, bit-flip, full-disk and failed-sync
/// faults.
#[derive(Debug, Clone)]
pub struct SimDisk {
    files: BTreeMap<String, SimFile>,
    /// The most bytes all files together may hold (their current lengths).
    capacity_bytes: u64,
    /// How many of the next syncs fail.
    failing_syncs: u32,
}

impl SimDisk {
    /// An empty disk that holds at most `capacity_bytes`.
    pub fn new(capacity_bytes: u64) -> Self {
        SimDisk {
            files: BTreeMap::new(),
            capacity_bytes,
            failing_syncs: 0,
        }
    }

    /// Changes the capacity (a disk that fills up, or one that is freed).
    pub fn set_capacity(&mut self, capacity_bytes: u64) {
        self.capacity_bytes = capacity_bytes;
    }

    /// The bytes all files hold now.
    pub fn used_bytes(&self) -> u64 {
        self.files.values().map(|f| f.current.len() as u64).sum()
    }

    /// Makes the next `count` syncs fail with [`StorageError::SyncFailed`]. The writes they
    /// should have made durable stay unsynced: a crash decides their fate.
    pub fn fail_syncs(&mut self, count: u32) {
        self.failing_syncs = count;
    }

    /// How many changes to `name` are waiting for a sync (0 if there is no such file).
    pub fn unsynced_changes(&self, name: &str) -> usize {
        self.files.get(name).map_or(0, |f| f.pending.len())
    }

    /// The process crashed: every file keeps its durable bytes plus a random subset of its
    /// unsynced changes, applied in a random order, the last one possibly torn. Files never
    /// synced vanish with probability 1/2.
    pub fn crash<R: Rng + ?Sized>(&mut self, rng: &mut R) -> CrashReport {
        let mut report = CrashReport::default();
        let names: Vec<String> = self.files.keys().cloned().collect();
        for name in names {
            let file = self.files.get_mut(&name).expect("listed above");
            let never_synced = file.durable.is_none();
            if never_synced && rng.random_bool(0.5) {
                report.dropped += file.pending.len();
                report.vanished += 1;
                self.files.remove(&name);
                continue;
            }
            let mut bytes = file.durable.take().unwrap_or_default();
            let mut kept: Vec<Pending> = Vec::new();
            for change in file.pending.drain(..) {
                if rng.random_bool(0.5) {
                    kept.push(change);
                } else {
                    report.dropped += 1;
                }
            }
            kept.shuffle(rng);
            let count = kept.len();
            for (index, change) in kept.into_iter().enumerate() {
                report.applied += 1;
                let last = index + 1 == count;
                match change {
                    Pending::Write {
                        offset,
                        bytes: data,
                    } => {
                        let keep = if last && !data.is_empty() && rng.random_bool(0.5) {
                            report.torn = true;
                            rng.random_range(0..data.len())
                        } else {
                            data.len()
                        };
                        apply_write(&mut bytes, offset, &data[..keep]);
                    }
                    Pending::SetLen(len) => bytes.resize(to_usize(len), 0),
                }
            }
            file.current = bytes.clone();
            file.durable = Some(bytes);
        }
        self.failing_syncs = 0;
        report
    }

    /// Flips bit `bit` (0-7) of the byte at `offset` of `name`, in what is stored and in what
    /// reads see: a media error.
    pub fn flip_bit(&mut self, name: &str, offset: u64, bit: u8) -> Result<(), StorageError> {
        assert!(bit < 8, "a byte has 8 bits");
        let file = self
            .files
            .get_mut(name)
            .ok_or_else(|| StorageError::NotFound(name.into()))?;
        let at = to_usize(offset);
        if at >= file.current.len() {
            return Err(StorageError::Io(format!(
                "flip at {offset} past the end of {name}"
            )));
        }
        file.current[at] ^= 1 << bit;
        if let Some(durable) = file.durable.as_mut()
            && at < durable.len()
        {
            durable[at] ^= 1 << bit;
        }
        Ok(())
    }

    fn file(&self, name: &str) -> Result<&SimFile, StorageError> {
        self.files
            .get(name)
            .ok_or_else(|| StorageError::NotFound(name.into()))
    }

    /// Fails with `NoSpace` if `name` growing to `new_len` would overfill the disk.
    fn check_space(&self, name: &str, new_len: u64) -> Result<(), StorageError> {
        let old_len = self.files.get(name).map_or(0, |f| f.current.len() as u64);
        let others = self.used_bytes() - old_len;
        if new_len > old_len && others + new_len > self.capacity_bytes {
            return Err(StorageError::NoSpace);
        }
        Ok(())
    }
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).expect("a simulated file fits in memory")
}

/// Writes `data` at `offset` of `bytes`, zero-filling any gap.
fn apply_write(bytes: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = to_usize(offset);
    let end = start + data.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[start..end].copy_from_slice(data);
}

impl Storage for SimDisk {
    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        if self.files.contains_key(name) {
            return Err(StorageError::Io(format!("{name} already exists")));
        }
        self.files.insert(name.to_owned(), SimFile::default());
        Ok(())
    }

    fn write_at(&mut self, name: &str, offset: u64, bytes: &[u8]) -> Result<(), StorageError> {
        let len = self.file(name)?.current.len() as u64;
        self.check_space(name, len.max(offset + bytes.len() as u64))?;
        let file = self.files.get_mut(name).expect("checked above");
        apply_write(&mut file.current, offset, bytes);
        file.pending.push(Pending::Write {
            offset,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }

    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        self.file(name)?;
        if self.failing_syncs > 0 {
            self.failing_syncs -= 1;
            return Err(StorageError::SyncFailed(format!(
                "injected failure syncing {name}"
            )));
        }
        let file = self.files.get_mut(name).expect("checked above");
        file.durable = Some(file.current.clone());
        file.pending.clear();
        Ok(())
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let current = &self.file(name)?.current;
        let start = to_usize(offset).min(current.len());
        let count = buf.len().min(current.len() - start);
        buf[..count].copy_from_slice(&current[start..start + count]);
        Ok(count)
    }

    fn len(&self, name: &str) -> Result<u64, StorageError> {
        Ok(self.file(name)?.current.len() as u64)
    }

    fn set_len(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        self.file(name)?;
        self.check_space(name, len)?;
        let file = self.files.get_mut(name).expect("checked above");
        file.current.resize(to_usize(len), 0);
        file.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        self.files
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| StorageError::NotFound(name.into()))
    }

    fn list(&self) -> Result<Vec<String>, StorageError> {
        Ok(self.files.keys().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn read_all(disk: &SimDisk, name: &str) -> Vec<u8> {
        let mut buf = vec![0; disk.len(name).unwrap() as usize];
        disk.read_at(name, 0, &mut buf).unwrap();
        buf
    }

    #[test]
    fn synced_writes_survive_every_crash() {
        for seed in 0..200 {
            let mut disk = SimDisk::new(1 << 20);
            disk.create("a").unwrap();
            disk.write_at("a", 0, b"hello").unwrap();
            disk.sync("a").unwrap();
            disk.write_at("a", 5, b" world").unwrap();
            disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            let bytes = read_all(&disk, "a");
            assert_eq!(&bytes[..5], b"hello", "seed {seed}");
            // The unsynced write is whole, a prefix, or absent.
            assert!(b"hello world".starts_with(&bytes), "seed {seed}: {bytes:?}");
        }
    }

    #[test]
    fn crash_loses_tears_and_reorders_unsynced_writes() {
        let (mut lost, mut torn, mut reordered, mut whole) = (0, 0, 0, 0);
        for seed in 0..500 {
            let mut disk = SimDisk::new(1 << 20);
            disk.create("a").unwrap();
            disk.sync("a").unwrap();
            // Two writes of the same bytes: which one survived shows the order.
            disk.write_at("a", 0, &[1; 8]).unwrap();
            disk.write_at("a", 0, &[2; 8]).unwrap();
            let report = disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            assert_eq!(report.applied + report.dropped, 2);
            assert_eq!(disk.unsynced_changes("a"), 0);
            let bytes = read_all(&disk, "a");
            match report.applied {
                0 => {
                    lost += 1;
                    assert!(bytes.is_empty());
                }
                _ if report.torn => torn += 1,
                2 if bytes == [2; 8] => whole += 1,
                2 if bytes == [1; 8] => reordered += 1,
                _ => {}
            }
        }
        assert!(
            lost > 0 && torn > 0 && reordered > 0 && whole > 0,
            "{lost} {torn} {reordered} {whole}"
        );
    }

    #[test]
    fn same_seed_same_crash() {
        let run = |seed| {
            let mut disk = SimDisk::new(1 << 20);
            disk.create("a").unwrap();
            disk.sync("a").unwrap();
            for i in 0..20u8 {
                disk.write_at("a", u64::from(i) * 4, &[i; 4]).unwrap();
            }
            disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            read_all(&disk, "a")
        };
        assert_eq!(run(7), run(7));
        assert!((0..20).any(|seed| run(seed) != run(7)));
    }

    #[test]
    fn never_synced_file_may_vanish() {
        let (mut vanished, mut kept) = (0, 0);
        for seed in 0..100 {
            let mut disk = SimDisk::new(1 << 20);
            disk.create("new").unwrap();
            disk.create("old").unwrap();
            disk.sync("old").unwrap();
            let report = disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            assert!(disk.len("old").is_ok());
            match disk.len("new") {
                Err(StorageError::NotFound(_)) => {
                    vanished += 1;
                    assert_eq!(report.vanished, 1);
                }
                Ok(_) => kept += 1,
                Err(other) => panic!("{other}"),
            }
        }
        assert!(vanished > 0 && kept > 0);
    }

    #[test]
    fn flip_bit_changes_stored_and_read_bytes() {
        let mut disk = SimDisk::new(1 << 20);
        disk.create("a").unwrap();
        disk.write_at("a", 0, &[0; 4]).unwrap();
        disk.sync("a").unwrap();
        disk.flip_bit("a", 2, 3).unwrap();
        assert_eq!(read_all(&disk, "a"), [0, 0, 8, 0]);
        disk.crash(&mut ChaCha8Rng::seed_from_u64(1));
        assert_eq!(
            read_all(&disk, "a"),
            [0, 0, 8, 0],
            "the flip is on the medium"
        );
        assert!(disk.flip_bit("a", 4, 0).is_err());
        assert_eq!(
            disk.flip_bit("b", 0, 0),
            Err(StorageError::NotFound("b".into()))
        );
    }

    #[test]
    fn full_disk_refuses_growth_but_not_overwrites() {
        let mut disk = SimDisk::new(10);
        disk.create("a").unwrap();
        disk.set_len("a", 8).unwrap();
        assert_eq!(disk.write_at("a", 6, &[1; 5]), Err(StorageError::NoSpace));
        assert_eq!(disk.set_len("a", 11), Err(StorageError::NoSpace));
        disk.write_at("a", 0, &[1; 8]).unwrap();
        disk.create("b").unwrap();
        assert_eq!(disk.write_at("b", 0, &[1; 3]), Err(StorageError::NoSpace));
        disk.write_at("b", 0, &[1; 2]).unwrap();
        assert_eq!(disk.used_bytes(), 10);
        disk.remove("a").unwrap();
        disk.write_at("b", 0, &[1; 3]).unwrap();
    }

    #[test]
    fn failed_sync_leaves_writes_unsynced() {
        let mut disk = SimDisk::new(1 << 20);
        disk.create("a").unwrap();
        disk.write_at("a", 0, b"x").unwrap();
        disk.fail_syncs(1);
        assert!(matches!(disk.sync("a"), Err(StorageError::SyncFailed(_))));
        assert_eq!(disk.unsynced_changes("a"), 1, "the write still waits");
        disk.sync("a").unwrap();
        assert_eq!(disk.unsynced_changes("a"), 0);
    }

    #[test]
    fn reads_past_the_end_are_short() {
        let mut disk = SimDisk::new(1 << 20);
        disk.create("a").unwrap();
        disk.write_at("a", 2, b"ab").unwrap();
        let mut buf = [9; 8];
        assert_eq!(disk.read_at("a", 1, &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], &[0, b'a', b'b']);
        assert_eq!(disk.read_at("a", 10, &mut buf).unwrap(), 0);
        assert_eq!(disk.list().unwrap(), vec!["a".to_owned()]);
    }
}
