//! The log against the simulated disk: unit tests of the writer and recovery, and
//! randomized crash tests over many seeds.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::format::{FORMAT_VERSION, SKIP_RECORD_CHECKSUM};
use crate::{LogWriter, Recovery, SimDisk, Storage, WalConfig, WalError, recover};

const CLUSTER: [u8; 16] = [0xab; 16];

fn config(segment_size_bytes: u64) -> WalConfig {
    WalConfig {
        log_name: "w0".into(),
        cluster_id: CLUSTER,
        node_id: 1,
        segment_size_bytes,
    }
}

fn payloads(recovery: &Recovery) -> Vec<Vec<u8>> {
    recovery.records.iter().map(|r| r.payload.clone()).collect()
}

#[test]
fn append_sync_recover_round_trip_across_segments() {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(256)).unwrap();
    let written: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; usize::from(i) * 3]).collect();
    for (i, payload) in written.iter().enumerate() {
        assert_eq!(writer.append(7, payload).unwrap(), i as u64 + 1);
    }
    assert_eq!(writer.sync().unwrap(), 20);
    assert!(writer.segments().count() > 3, "small segments roll");
    let recovery = recover(&disk, &config(256)).unwrap();
    assert_eq!(payloads(&recovery), written);
    assert_eq!(recovery.next_lsn, 21);
    assert_eq!(recovery.torn_tail, None);
    assert!(recovery.records.iter().all(|r| r.kind == 7));
}

#[test]
fn resume_continues_the_lsns_in_a_fresh_segment() {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(4096)).unwrap();
    writer.append(1, b"a").unwrap();
    writer.sync().unwrap();
    let recovery = recover(&disk, &config(4096)).unwrap();
    let mut writer = LogWriter::resume(&mut disk, config(4096), &recovery).unwrap();
    assert_eq!(writer.append(1, b"b").unwrap(), 2);
    writer.sync().unwrap();
    let recovery = recover(&disk, &config(4096)).unwrap();
    assert_eq!(payloads(&recovery), [b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(recovery.segments.len(), 2);
}

#[test]
fn create_refuses_an_existing_log() {
    let mut disk = SimDisk::new(1 << 20);
    LogWriter::create(&mut disk, config(4096)).unwrap();
    assert!(matches!(
        LogWriter::create(&mut disk, config(4096)),
        Err(WalError::AlreadyExists { .. })
    ));
    // Another log name in the same directory is another log.
    let other = WalConfig {
        log_name: "w1".into(),
        ..config(4096)
    };
    LogWriter::create(&mut disk, other).unwrap();
}

#[test]
fn foreign_cluster_node_and_version_are_refused_by_name() {
    let mut disk = SimDisk::new(1 << 20);
    LogWriter::create(&mut disk, config(4096)).unwrap();
    let other_cluster = WalConfig {
        cluster_id: [1; 16],
        ..config(4096)
    };
    let error = recover(&disk, &other_cluster).unwrap_err();
    assert!(
        matches!(&error, WalError::ForeignCluster { file, .. } if file == "w0-0000000000000000.wal")
    );
    assert!(
        error.to_string().contains("w0-0000000000000000.wal"),
        "{error}"
    );
    let other_node = WalConfig {
        node_id: 9,
        ..config(4096)
    };
    assert!(matches!(
        recover(&disk, &other_node),
        Err(WalError::ForeignNode { found: 1, .. })
    ));
    // A segment of format version 2.
    disk.write_at(
        "w0-0000000000000000.wal",
        8,
        &(FORMAT_VERSION + 1).to_le_bytes(),
    )
    .unwrap();
    let error = recover(&disk, &config(4096)).unwrap_err();
    assert_eq!(
        error,
        WalError::UnknownVersion {
            file: "w0-0000000000000000.wal".into(),
            found: 2
        }
    );
    assert!(
        error.to_string().contains("w0-0000000000000000.wal"),
        "{error}"
    );
}

#[test]
fn failed_sync_poisons_the_writer() {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(4096)).unwrap();
    writer.append(1, b"a").unwrap();
    writer.storage_mut().fail_syncs(1);
    assert!(matches!(writer.sync(), Err(WalError::SyncFailed { .. })));
    // No retry: the next sync would succeed on the disk, but the writer refuses.
    assert!(matches!(writer.sync(), Err(WalError::Poisoned { .. })));
    assert!(matches!(
        writer.append(1, b"b"),
        Err(WalError::Poisoned { .. })
    ));
    assert_eq!(writer.durable_lsn(), 0);
}

#[test]
fn full_disk_fails_appends_clearly_and_recovers_when_freed() {
    let mut disk = SimDisk::new(3 * 256);
    let mut writer = LogWriter::create(&mut disk, config(256)).unwrap();
    let mut appended = 0;
    let error = loop {
        match writer.append(1, &[5; 100]) {
            Ok(_) => appended += 1,
            Err(error) => break error,
        }
    };
    assert!(matches!(&error, WalError::NoSpace { .. }), "{error}");
    assert!(error.to_string().contains("disk full"));
    assert_eq!(
        writer.durable_lsn(),
        appended,
        "the roll synced what was there"
    );
    writer.storage_mut().set_capacity(1 << 20);
    writer.append(1, &[5; 100]).unwrap();
    writer.sync().unwrap();
    assert_eq!(
        recover(&disk, &config(256)).unwrap().records.len() as u64,
        appended + 1
    );
}

#[test]
fn oversized_record_is_refused() {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(256)).unwrap();
    let max = config(256).max_payload_bytes();
    writer.append(1, &vec![0; max as usize]).unwrap();
    assert!(matches!(
        writer.append(1, &vec![0; max as usize + 1]),
        Err(WalError::RecordTooLarge { .. })
    ));
}

#[test]
fn remove_segments_below_keeps_every_later_record() {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(256)).unwrap();
    for i in 0..30u8 {
        writer.append(1, &[i; 40]).unwrap();
    }
    writer.sync().unwrap();
    let before = writer.segments().count();
    let removed = writer.remove_segments_below(15).unwrap();
    assert!(removed > 0 && removed < before);
    let recovery = recover(&disk, &config(256)).unwrap();
    let first = recovery.records[0].lsn;
    assert!(first <= 15, "no record at or above the bound is gone");
    assert_eq!(recovery.records.last().unwrap().lsn, 30);
    assert!(
        recovery
            .records
            .windows(2)
            .all(|w| w[1].lsn == w[0].lsn + 1)
    );
    // A segment missing in the middle is corruption.
    let middle = recovery.segments[1].file.clone();
    disk.remove(&middle).unwrap();
    assert!(matches!(
        recover(&disk, &config(256)),
        Err(WalError::Corrupt { .. })
    ));
}

#[test]
fn bit_flip_in_a_synced_record_is_corruption_with_file_and_offset() {
    for checked in [true, false] {
        let (disk, victim) = log_with_a_flip_in_the_middle(3);
        let result = with_checksums(checked, || recover(&disk, &config(512)));
        if checked {
            assert_eq!(
                result,
                Err(WalError::Corrupt {
                    file: victim.file.clone(),
                    offset: victim.offset,
                    reason: result.clone().unwrap_err().reason_for_tests(),
                })
            );
        } else {
            // The deliberate break: without checksums the flipped payload is served.
            let recovery = result.expect("a reader that does not verify accepts the flip");
            let served = &recovery.records[victim.lsn as usize - 1];
            assert_ne!(served.payload, victim.payload, "wrong data served");
        }
    }
}

/// A synced log of 3 segments; a bit of the payload of a record in the middle segment
/// flipped. Returns the disk and the record as written.
fn log_with_a_flip_in_the_middle(seed: u64) -> (SimDisk, crate::Record) {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(512)).unwrap();
    for i in 0..24u8 {
        writer.append(2, &[i; 50]).unwrap();
    }
    writer.sync().unwrap();
    let recovery = recover(&disk, &config(512)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let victim = recovery.records[rng.random_range(8..16)].clone();
    disk.flip_bit(
        &victim.file,
        victim.offset + 32 + rng.random_range(0..50),
        rng.random_range(0..8),
    )
    .unwrap();
    (disk, victim)
}

/// Runs `f` with the reader's record checksum verification on or off.
fn with_checksums<T>(checked: bool, f: impl FnOnce() -> T) -> T {
    SKIP_RECORD_CHECKSUM.with(|skip| skip.set(!checked));
    let result = f();
    SKIP_RECORD_CHECKSUM.with(|skip| skip.set(false));
    result
}

impl WalError {
    fn reason_for_tests(self) -> String {
        match self {
            WalError::Corrupt { reason, .. } => reason,
            other => panic!("not corruption: {other}"),
        }
    }
}

#[test]
fn bit_flip_in_the_last_segment_before_a_witness_is_corruption() {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(4096)).unwrap();
    for i in 0..5u8 {
        writer.append(1, &[i; 20]).unwrap();
    }
    writer.sync().unwrap();
    writer.append(1, b"after the sync").unwrap(); // says records 1..=5 are durable
    writer.sync().unwrap();
    let recovery = recover(&disk, &config(4096)).unwrap();
    let victim = &recovery.records[4];
    disk.flip_bit(&victim.file, victim.offset + 40, 0).unwrap();
    let error = recover(&disk, &config(4096)).unwrap_err();
    assert!(
        matches!(&error, WalError::Corrupt { file, offset, .. } if *file == victim.file && *offset == victim.offset),
        "{error}"
    );
}

#[test]
fn bit_flip_in_the_last_record_is_cut_as_a_torn_tail() {
    // Known limit (docs/durability.md, "Bad disks"): the last record's damage looks like a
    // torn write; the other copies hold the record in `sync` mode.
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(4096)).unwrap();
    writer.append(1, b"one").unwrap();
    writer.append(1, b"two").unwrap();
    writer.sync().unwrap();
    let recovery = recover(&disk, &config(4096)).unwrap();
    let last = recovery.records[1].clone();
    disk.flip_bit(&last.file, last.offset + 33, 2).unwrap();
    let recovery = recover(&disk, &config(4096)).unwrap();
    assert_eq!(payloads(&recovery), [b"one".to_vec()]);
    assert_eq!(
        recovery.torn_tail.as_ref().map(|t| t.offset),
        Some(last.offset)
    );
}

#[test]
fn bit_flip_in_a_segment_header_is_corruption() {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(256)).unwrap();
    for _ in 0..10 {
        writer.append(1, &[1; 60]).unwrap();
    }
    writer.sync().unwrap();
    disk.flip_bit("w0-0000000000000000.wal", 35, 1).unwrap();
    let error = recover(&disk, &config(256)).unwrap_err();
    assert!(
        matches!(&error, WalError::Corrupt { file, offset: 0, .. } if file == "w0-0000000000000000.wal"),
        "{error}"
    );
}

/// What the crashes of a randomized run did, to show that the runs reach the cases.
#[derive(Debug, Default)]
struct CrashCounts {
    /// Recoveries that cut a torn tail.
    torn_tails: usize,
    /// Crashes that lost appended records that had not been synced.
    lost_unsynced: usize,
}

/// What one randomized run checks, for a seed: the writer's log through `lives` crashes.
fn crash_and_recover(seed: u64, lives: usize) -> CrashCounts {
    let mut counts = CrashCounts::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let segment_size_bytes = [256, 512, 4096][rng.random_range(0..3)];
    let config = config(segment_size_bytes);
    let mut disk = SimDisk::new(1 << 22);
    // Every record ever appended, by LSN - 1; a crash may cut the unsynced end.
    let mut written: Vec<Vec<u8>> = Vec::new();
    let mut recovery = Recovery::default();
    for life in 0..lives {
        let mut writer = if life == 0 {
            LogWriter::create(&mut disk, config.clone()).unwrap()
        } else {
            LogWriter::resume(&mut disk, config.clone(), &recovery).unwrap()
        };
        let mut synced = writer.durable_lsn();
        for _ in 0..rng.random_range(0..60) {
            let payload: Vec<u8> = (0..rng.random_range(0..120))
                .map(|_| rng.random())
                .collect();
            let lsn = writer.append(rng.random_range(1..=255), &payload).unwrap();
            assert_eq!(lsn as usize, written.len() + 1);
            written.push(payload);
            if rng.random_bool(0.2) {
                synced = writer.sync().unwrap();
            }
        }
        synced = synced.max(writer.durable_lsn()); // rolls sync too
        let report = disk.crash(&mut rng);
        recovery = recover(&disk, &config)
            .unwrap_or_else(|e| panic!("seed {seed} life {life}: {e} ({report:?})"));
        let recovered = recovery.records.len();
        // Every synced record is back, and nothing else but a prefix of what was written.
        assert!(
            recovered as u64 >= synced,
            "seed {seed} life {life}: lost a synced record"
        );
        assert!(
            recovered <= written.len(),
            "seed {seed} life {life}: invented a record"
        );
        for (index, record) in recovery.records.iter().enumerate() {
            assert_eq!(record.lsn, index as u64 + 1, "seed {seed}: hole or reorder");
            assert_eq!(
                record.payload, written[index],
                "seed {seed}: record {} changed",
                record.lsn
            );
        }
        counts.torn_tails += usize::from(recovery.torn_tail.is_some());
        counts.lost_unsynced += usize::from(recovered < written.len());
        written.truncate(recovered);
    }
    counts
}

#[test]
fn crash_recover_many_seeds() {
    let mut totals = CrashCounts::default();
    for seed in 0..300 {
        let counts = crash_and_recover(seed, 4);
        totals.torn_tails += counts.torn_tails;
        totals.lost_unsynced += counts.lost_unsynced;
    }
    assert!(
        totals.torn_tails > 50 && totals.lost_unsynced > 50,
        "{totals:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn crash_recover_random_seeds(seed in any::<u64>(), lives in 1usize..6) {
        crash_and_recover(seed, lives);
    }

    #[test]
    fn a_flip_in_the_middle_is_never_accepted(seed in any::<u64>()) {
        let (disk, victim) = log_with_a_flip_in_the_middle(seed);
        match recover(&disk, &config(512)) {
            Err(WalError::Corrupt { file, offset, .. }) => {
                prop_assert_eq!(file, victim.file);
                prop_assert_eq!(offset, victim.offset);
            }
            other => prop_assert!(false, "flip accepted: {:?}", other.map(|r| r.records.len())),
        }
    }
}

#[test]
fn torn_segment_creation_is_cut_and_resumed() {
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(256)).unwrap();
    writer.append(1, &[1; 100]).unwrap();
    writer.sync().unwrap();
    // A half-made next segment, as a crash during its creation leaves it.
    disk.create("w0-0000000000000001.wal").unwrap();
    disk.write_at("w0-0000000000000001.wal", 0, &[0x46, 0x54])
        .unwrap();
    disk.set_len("w0-0000000000000001.wal", 256).unwrap();
    let recovery = recover(&disk, &config(256)).unwrap();
    assert_eq!(recovery.records.len(), 1);
    assert_eq!(recovery.torn_tail.as_ref().map(|t| t.offset), Some(0));
    let mut writer = LogWriter::resume(&mut disk, config(256), &recovery).unwrap();
    assert_eq!(writer.append(1, b"x").unwrap(), 2);
    writer.sync().unwrap();
    let recovery = recover(&disk, &config(256)).unwrap();
    assert_eq!(recovery.records.len(), 2);
    assert_eq!(recovery.torn_tail, None);
}

#[test]
fn resume_cuts_the_torn_tail_so_later_recoveries_see_no_garbage() {
    let mut cut = 0;
    for seed in 0..100 {
        let mut disk = SimDisk::new(1 << 20);
        let mut writer = LogWriter::create(&mut disk, config(4096)).unwrap();
        writer.append(1, b"synced").unwrap();
        writer.sync().unwrap();
        for i in 0..5u8 {
            writer.append(1, &[i + 1; 30]).unwrap();
        }
        disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
        let recovery = recover(&disk, &config(4096)).unwrap();
        cut += usize::from(recovery.torn_tail.is_some());
        let kept = recovery.records.len();
        let mut writer = LogWriter::resume(&mut disk, config(4096), &recovery).unwrap();
        writer.append(1, b"next life").unwrap();
        writer.sync().unwrap();
        let again = recover(&disk, &config(4096)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(again.records.len(), kept + 1, "seed {seed}");
        assert_eq!(again.torn_tail, None, "seed {seed}");
    }
    assert!(cut > 10, "{cut}");
}
