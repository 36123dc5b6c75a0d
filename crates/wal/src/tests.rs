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

/// Buffered appends write nothing until `write_pending` (or a sync, or a new segment):
/// then one write holds them all, in order, and recovery reads the same log as unbuffered
/// appends make. What was never written is lost at a crash, and nothing else.
#[test]
fn buffered_appends_are_written_together_and_read_back_alike() {
    let written: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; usize::from(i % 7) * 5]).collect();
    let mut plain = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut plain, config(512)).unwrap();
    for payload in &written {
        writer.append(3, payload).unwrap();
    }
    writer.sync().unwrap();
    let expected = recover(&plain, &config(512)).unwrap();

    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(512)).unwrap();
    for (i, payload) in written.iter().enumerate() {
        let written_before = writer.written_lsn();
        assert_eq!(writer.append_buffered(3, payload).unwrap(), i as u64 + 1);
        // Not written until asked, unless the record opened a new segment (which writes
        // and syncs what came before it).
        assert!(writer.written_lsn() <= i as u64);
        assert!(writer.written_lsn() >= written_before);
        if i % 5 == 4 {
            assert_eq!(writer.write_pending().unwrap(), i as u64 + 1);
        }
    }
    writer.sync().unwrap();
    let recovery = recover(&disk, &config(512)).unwrap();
    assert_eq!(payloads(&recovery), payloads(&expected));
    assert_eq!(recovery.next_lsn, expected.next_lsn);

    // Records left in the buffer at a crash are simply not there; the rest are.
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(1 << 16)).unwrap();
    for payload in &written[..10] {
        writer.append_buffered(3, payload).unwrap();
    }
    writer.write_pending().unwrap();
    writer.sync().unwrap();
    for payload in &written[10..15] {
        writer.append_buffered(3, payload).unwrap();
    }
    assert_eq!(writer.written_lsn(), 10);
    drop(writer);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    disk.crash(&mut rng);
    let recovery = recover(&disk, &config(1 << 16)).unwrap();
    assert_eq!(payloads(&recovery), written[..10].to_vec());
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

// The streaming reader (`LogReader`, `recover_with`) against the whole-segment reader it
// replaced (kept below as `whole_segment_reference`), on the crash corpus and on damage.

/// Chunk sizes for the comparisons: 1, 64 and 100 bytes put nearly every record across a
/// chunk boundary (100 is not a multiple of 8, so the boundaries fall inside headers);
/// 4096 and the default hold many records.
const CHUNKS: [usize; 5] = [1, 64, 100, 4096, crate::DEFAULT_READ_CHUNK_BYTES];

/// The log read by the streaming reader with `chunk_bytes`, its records collected.
fn stream(disk: &SimDisk, config: &WalConfig, chunk_bytes: usize) -> Result<Recovery, WalError> {
    let mut records = Vec::new();
    let mut recovery =
        crate::LogReader::with_chunk_bytes(chunk_bytes).read(disk, config, |record| {
            records.push(record.to_record());
            Ok::<(), WalError>(())
        })?;
    assert!(recovery.records.is_empty(), "records go to the callback");
    recovery.records = records;
    Ok(recovery)
}

/// Checks that `recover` and the streaming reader at every chunk size return exactly what
/// the whole-segment reader returns (records, segments, end, torn tail, or the error with
/// its file, offset and reason). Returns that.
fn assert_readers_agree(
    disk: &SimDisk,
    config: &WalConfig,
    context: &str,
) -> Result<Recovery, WalError> {
    let reference = whole_segment_reference::recover(disk, config);
    assert_eq!(recover(disk, config), reference, "{context}: recover");
    for chunk in CHUNKS {
        assert_eq!(
            stream(disk, config, chunk),
            reference,
            "{context}: chunk {chunk}"
        );
    }
    reference
}

/// What the damaged copies of the corpus came to, to show the comparisons reach each case.
#[derive(Debug, Default)]
struct Outcomes {
    clean: usize,
    torn: usize,
    corrupt: usize,
    other_errors: usize,
}

impl Outcomes {
    fn count(&mut self, result: &Result<Recovery, WalError>) {
        match result {
            Ok(recovery) if recovery.torn_tail.is_some() => self.torn += 1,
            Ok(_) => self.clean += 1,
            Err(WalError::Corrupt { .. }) => self.corrupt += 1,
            Err(_) => self.other_errors += 1,
        }
    }
}

/// Damages a copy of a log: a flipped bit, random bytes, a truncated or a removed segment.
fn damage(disk: &mut SimDisk, rng: &mut ChaCha8Rng) {
    let files = disk.list().unwrap();
    if files.is_empty() {
        return;
    }
    let file = &files[rng.random_range(0..files.len())];
    let len = disk.len(file).unwrap();
    match rng.random_range(0..5) {
        0 | 1 if len > 0 => {
            for _ in 0..rng.random_range(1..=3) {
                disk.flip_bit(file, rng.random_range(0..len), rng.random_range(0..8))
                    .unwrap();
            }
        }
        2 if len > 0 => {
            let bytes: Vec<u8> = (0..rng.random_range(1..40)).map(|_| rng.random()).collect();
            disk.write_at(file, rng.random_range(0..len), &bytes)
                .unwrap();
        }
        3 => disk.set_len(file, rng.random_range(0..=len)).unwrap(),
        _ => disk.remove(file).unwrap(),
    }
}

/// The writer's log through `lives` crashes, as in `crash_and_recover`; after each crash
/// every reader must agree on the log and on a damaged copy of it.
fn crash_and_compare(seed: u64, lives: usize, outcomes: &mut Outcomes) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let segment_size_bytes = [256, 512, 4096][rng.random_range(0..3)];
    let config = config(segment_size_bytes);
    let mut disk = SimDisk::new(1 << 22);
    let mut recovery = Recovery::default();
    for life in 0..lives {
        let mut writer = if life == 0 {
            LogWriter::create(&mut disk, config.clone()).unwrap()
        } else {
            LogWriter::resume(&mut disk, config.clone(), &recovery).unwrap()
        };
        for _ in 0..rng.random_range(0..60) {
            let payload: Vec<u8> = (0..rng.random_range(0..120))
                .map(|_| rng.random())
                .collect();
            writer.append(rng.random_range(1..=255), &payload).unwrap();
            if rng.random_bool(0.2) {
                writer.sync().unwrap();
            }
        }
        disk.crash(&mut rng);
        let context = format!("seed {seed} life {life}");
        recovery = assert_readers_agree(&disk, &config, &context)
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        outcomes.count(&Ok(recovery.clone()));
        let mut damaged = disk.clone();
        damage(&mut damaged, &mut rng);
        let result = assert_readers_agree(&damaged, &config, &format!("{context}, damaged"));
        outcomes.count(&result);
        // The streaming reader's own result resumes as well as `recover`'s.
        let streamed = crate::LogReader::with_chunk_bytes(64)
            .read(&disk, &config, |_| Ok::<(), WalError>(()))
            .unwrap();
        assert_eq!(
            Recovery {
                records: Vec::new(),
                ..recovery.clone()
            },
            streamed,
            "{context}"
        );
        if rng.random_bool(0.5) {
            recovery = streamed;
        }
    }
}

#[test]
fn streaming_reader_agrees_with_the_whole_segment_reader_on_crashes_and_damage() {
    let mut outcomes = Outcomes::default();
    for seed in 0..300 {
        crash_and_compare(seed, 4, &mut outcomes);
    }
    assert!(
        outcomes.clean > 50 && outcomes.torn > 50 && outcomes.corrupt > 50,
        "{outcomes:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn streaming_reader_agrees_on_random_seeds(seed in any::<u64>(), lives in 1usize..6) {
        crash_and_compare(seed, lives, &mut Outcomes::default());
    }
}

#[test]
fn large_records_straddle_many_chunks() {
    let config = config(64 << 10);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut disk = SimDisk::new(1 << 24);
    let mut writer = LogWriter::create(&mut disk, config.clone()).unwrap();
    let mut written = Vec::new();
    for _ in 0..60 {
        let len = rng.random_range(0..=config.max_payload_bytes() as usize);
        let payload: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        writer.append(3, &payload).unwrap();
        written.push(payload);
    }
    writer.sync().unwrap();
    let recovery = assert_readers_agree(&disk, &config, "large").unwrap();
    assert_eq!(payloads(&recovery), written);
    assert!(recovery.segments.len() > 10);
}

#[test]
fn streaming_reader_with_checksums_off_serves_a_flip_and_with_them_refuses_it() {
    for seed in 0..20 {
        let (disk, victim) = log_with_a_flip_in_the_middle(seed);
        for chunk in [1, 64, 100, 4096] {
            let checked = stream(&disk, &config(512), chunk);
            assert!(
                matches!(&checked, Err(WalError::Corrupt { file, offset, .. }) if *file == victim.file && *offset == victim.offset),
                "seed {seed} chunk {chunk}: {checked:?}"
            );
            // The deliberate break: without checksums the streaming reader serves the flip.
            let unchecked = with_checksums(false, || stream(&disk, &config(512), chunk))
                .expect("a reader that does not verify accepts the flip");
            let served = &unchecked.records[victim.lsn as usize - 1];
            assert_ne!(served.payload, victim.payload, "seed {seed} chunk {chunk}");
        }
    }
}

#[test]
fn the_callbacks_error_stops_the_read() {
    #[derive(Debug, PartialEq)]
    enum Stop {
        Wal(WalError),
        At(u64),
    }
    impl From<WalError> for Stop {
        fn from(error: WalError) -> Self {
            Stop::Wal(error)
        }
    }
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(256)).unwrap();
    for i in 0..20u8 {
        writer.append(1, &[i; 30]).unwrap();
    }
    writer.sync().unwrap();
    let mut seen = Vec::new();
    let result = crate::recover_with(&disk, &config(256), |record| {
        seen.push(record.lsn);
        if record.lsn == 7 {
            return Err(Stop::At(record.lsn));
        }
        Ok(())
    });
    assert_eq!(result, Err(Stop::At(7)));
    assert_eq!(seen, (1..=7).collect::<Vec<_>>());
    // A log error comes back through `From`.
    let other = WalConfig {
        node_id: 2,
        ..config(256)
    };
    assert!(matches!(
        crate::recover_with(&disk, &other, |_| Ok::<(), Stop>(())),
        Err(Stop::Wal(WalError::ForeignNode { .. }))
    ));
}

#[test]
fn empty_directory_and_torn_creation_agree() {
    let disk = SimDisk::new(1 << 20);
    assert_eq!(
        assert_readers_agree(&disk, &config(256), "empty").unwrap(),
        Recovery {
            next_lsn: 1,
            ..Recovery::default()
        }
    );
    let mut disk = SimDisk::new(1 << 20);
    let mut writer = LogWriter::create(&mut disk, config(256)).unwrap();
    writer.append(1, &[1; 100]).unwrap();
    writer.sync().unwrap();
    for (content, body_byte) in [(&[0x46u8, 0x54][..], None), (&[0x46, 0x54][..], Some(200))] {
        let mut torn = disk.clone();
        torn.create("w0-0000000000000001.wal").unwrap();
        torn.write_at("w0-0000000000000001.wal", 0, content)
            .unwrap();
        torn.set_len("w0-0000000000000001.wal", 256).unwrap();
        if let Some(at) = body_byte {
            torn.write_at("w0-0000000000000001.wal", at, &[1]).unwrap();
        }
        let result = assert_readers_agree(&torn, &config(256), "torn creation");
        assert_eq!(result.is_ok(), body_byte.is_none(), "{result:?}");
    }
}

/// The whole-segment reader that `recover` was before the streaming reader (commit
/// 0ad23bb), kept verbatim as the oracle the streaming reader is compared with.
mod whole_segment_reference {
    use crate::config::WalConfig;
    use crate::error::{WalError, hex};
    use crate::format::{
        HeaderProblem, Lsn, RECORD_ALIGN, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SegmentHeader,
        decode_record, record_bytes,
    };
    use crate::recover::{Record, Recovery, SegmentInfo, TornTail};
    use crate::storage::Storage;

    /// Reads the log named by `config` from `storage`. Reads only; nothing is changed.
    pub(super) fn recover<S: Storage + ?Sized>(
        storage: &S,
        config: &WalConfig,
    ) -> Result<Recovery, WalError> {
        config.validate()?;
        let io = |file: &str| {
            let file = file.to_owned();
            move |source| WalError::Io { file, source }
        };
        let mut sequences: Vec<(u64, String)> = storage
            .list()
            .map_err(io("(directory)"))?
            .into_iter()
            .filter_map(|name| config.parse_segment_name(&name).map(|seq| (seq, name)))
            .collect();
        sequences.sort();
        let mut recovery = Recovery {
            next_lsn: 1,
            ..Recovery::default()
        };
        let count = sequences.len();
        for (index, (sequence, file)) in sequences.into_iter().enumerate() {
            let last = index + 1 == count;
            let length = storage.len(&file).map_err(io(&file))?;
            let mut bytes = vec![0; usize::try_from(length).expect("segment fits in memory")];
            let read = storage.read_at(&file, 0, &mut bytes).map_err(io(&file))?;
            bytes.truncate(read);
            recovery.last_sequence = Some(sequence);
            let Some(header) = check_header(config, &file, &bytes, last)? else {
                recovery.torn_tail = Some(TornTail { file, offset: 0 });
                break;
            };
            if let Some(previous) = recovery.segments.last()
                && sequence != previous.sequence + 1
            {
                return Err(corrupt(
                    &file,
                    0,
                    format!("segment {} is missing", previous.sequence + 1),
                ));
            }
            if header.sequence != sequence {
                return Err(corrupt(
                    &file,
                    0,
                    format!("header says segment {}", header.sequence),
                ));
            }
            if !recovery.segments.is_empty() && header.first_lsn != recovery.next_lsn {
                return Err(corrupt(
                    &file,
                    0,
                    format!(
                        "first LSN {} but the previous segment ends before {}",
                        header.first_lsn, recovery.next_lsn
                    ),
                ));
            }
            if header.first_lsn == 0 {
                return Err(corrupt(&file, 0, "first LSN 0".into()));
            }
            recovery.next_lsn = header.first_lsn;
            recovery.segments.push(SegmentInfo {
                file: file.clone(),
                sequence,
                first_lsn: header.first_lsn,
            });
            let end = scan_records(&file, &bytes, last, &mut recovery)?;
            recovery.end_offset = end;
        }
        Ok(recovery)
    }

    /// Checks a segment's header: `Ok(None)` for a last segment torn at creation.
    fn check_header(
        config: &WalConfig,
        file: &str,
        bytes: &[u8],
        last: bool,
    ) -> Result<Option<SegmentHeader>, WalError> {
        let header_bytes = SEGMENT_HEADER_BYTES as usize;
        let body_is_blank = bytes
            .get(header_bytes..)
            .is_none_or(|body| body.iter().all(|&b| b == 0));
        let problem = match SegmentHeader::decode(bytes) {
            Ok(header) => {
                if header.cluster_id != config.cluster_id {
                    return Err(WalError::ForeignCluster {
                        file: file.into(),
                        found: hex(&header.cluster_id),
                        expected: hex(&config.cluster_id),
                    });
                }
                if header.node_id != config.node_id {
                    return Err(WalError::ForeignNode {
                        file: file.into(),
                        found: header.node_id,
                        expected: config.node_id,
                    });
                }
                return Ok(Some(header));
            }
            Err(HeaderProblem::UnknownVersion(found)) => {
                return Err(WalError::UnknownVersion {
                    file: file.into(),
                    found,
                });
            }
            Err(problem) => problem,
        };
        if last && body_is_blank {
            return Ok(None);
        }
        Err(corrupt(
            file,
            0,
            format!("segment header unreadable ({problem:?})"),
        ))
    }

    /// Reads the records of one segment into `recovery`; returns where they end.
    fn scan_records(
        file: &str,
        bytes: &[u8],
        last: bool,
        recovery: &mut Recovery,
    ) -> Result<u64, WalError> {
        let mut offset = SEGMENT_HEADER_BYTES as usize;
        loop {
            let rest = bytes.get(offset..).unwrap_or(&[]);
            let blank = rest.len() < RECORD_HEADER_BYTES as usize
                || rest[..RECORD_HEADER_BYTES as usize].iter().all(|&b| b == 0);
            if let Some((header, payload)) = decode_record(rest) {
                if header.lsn != recovery.next_lsn {
                    return Err(corrupt(
                        file,
                        offset as u64,
                        format!(
                            "record has LSN {} where {} was expected",
                            header.lsn, recovery.next_lsn
                        ),
                    ));
                }
                recovery.records.push(Record {
                    lsn: header.lsn,
                    kind: header.kind,
                    payload: payload.to_vec(),
                    file: file.into(),
                    offset: offset as u64,
                });
                recovery.next_lsn += 1;
                offset += record_bytes(header.payload_bytes) as usize;
                continue;
            }
            // The records end here: cleanly, torn, or damaged.
            if !last {
                if blank {
                    return Ok(offset as u64);
                }
                return Err(corrupt(
                    file,
                    offset as u64,
                    "bad record in a segment synced whole".into(),
                ));
            }
            if let Some(witness) = durable_witness(bytes, offset, recovery.next_lsn) {
                return Err(corrupt(
                    file,
                    offset as u64,
                    format!(
                        "bad record with LSN {}, which the record at byte {witness} says was durable",
                        recovery.next_lsn
                    ),
                ));
            }
            let tail_is_blank = rest.iter().all(|&b| b == 0);
            if !tail_is_blank {
                recovery.torn_tail = Some(TornTail {
                    file: file.into(),
                    offset: offset as u64,
                });
            }
            return Ok(offset as u64);
        }
    }

    /// The offset of a valid record after `from` whose durable LSN covers `lsn`, if any: proof
    /// that the record expected at `from` had been synced.
    fn durable_witness(bytes: &[u8], from: usize, lsn: Lsn) -> Option<usize> {
        let step = RECORD_ALIGN as usize;
        (from + step..bytes.len()).step_by(step).find(|&at| {
            decode_record(&bytes[at..]).is_some_and(|(header, _)| header.durable_lsn >= lsn)
        })
    }

    fn corrupt(file: &str, offset: u64, reason: String) -> WalError {
        WalError::Corrupt {
            file: file.into(),
            offset,
            reason,
        }
    }
}
