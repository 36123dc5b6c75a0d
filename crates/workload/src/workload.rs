//! The workloads, as one enum that benchmarks, the simulator and tests share: what each
//! node loads, what one transaction of a coroutine does (recorded or not), and what is
//! checked at the end. KV and the latency workload live here; the bank, TATP and
//! SmallBank in their own files.

use std::collections::BTreeSet;

use ferrotx_exec::Co;
use ferrotx_store::{Key, StoreError, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator};
use ferrotx_txn::ship::Procedures;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};

pub use crate::bank::BankWorkload;
use crate::check::{self, lost_write, money, replicas, serializability};
use crate::history::{History, Note, Outcome, Row};
use crate::kv_ship::{self, NotShipped};
use crate::record::{self, Recorder};
pub use crate::smallbank::SmallBankWorkload;
use crate::state::StateReader;
pub use crate::tatp::TatpWorkload;

/// Settings with which a workload cannot run; the message names the flag to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// Returns a [`SettingsError`] with the formatted message unless the condition holds.
macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err($crate::workload::SettingsError(format!($($message)+)));
        }
    };
}
pub(crate) use ensure;

/// The table of both workloads.
pub const TABLE: TableId = TableId(1);

/// A YCSB-like key-value workload (`bench kv`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KvWorkload {
    /// Keys per transaction.
    pub keys_per_txn: usize,
    /// Share of a transaction's keys that are read-modify-written, in [0, 1].
    pub write_share: f64,
    /// Keys in the table.
    pub key_count: u64,
    /// Bytes of every value.
    pub value_bytes: usize,
    /// Zipf exponent of key popularity; 0 is uniform.
    pub zipf: f64,
    /// Whether one-key read-modify-writes ([`KvWorkload::ships`]) are shipped to their
    /// key's primary ([`crate::kv_ship`]), whose node must run the procedures of
    /// [`Workload::procedures`]; false: every transaction is an optimistic transaction
    /// coordinated by its caller (`bench kv --no-ship`, and every report before shipping).
    #[serde(default)]
    pub ship: bool,
    /// Share of read-modify-writes of a present key that delete it instead, in [0, 1]
    /// (the next one of that key inserts it again): churn, so that deleted objects are
    /// reclaimed and their keys come back ([`ferrotx_txn::reclaim`]).
    #[serde(default)]
    pub delete_share: f64,
}

impl KvWorkload {
    /// Keys each transaction read-modify-writes.
    pub fn writes_per_txn(&self) -> usize {
        ((self.keys_per_txn as f64) * self.write_share).round() as usize
    }

    /// Whether transactions are single-key lock-free reads.
    pub fn single_reads(&self) -> bool {
        self.keys_per_txn == 1 && self.writes_per_txn() == 0
    }

    /// Whether transactions are one-key read-modify-writes shipped to the key's primary.
    pub fn ships(&self) -> bool {
        self.ship && self.keys_per_txn == 1 && self.writes_per_txn() == 1
    }
}

/// A workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Workload {
    /// `bench kv`.
    Kv(KvWorkload),
    /// `bench bank`.
    Bank(BankWorkload),
    /// `bench smallbank`.
    SmallBank(SmallBankWorkload),
    /// `bench tatp`.
    Tatp(TatpWorkload),
    /// `bench latency`: reads and writes of objects of RAMCloud's sizes.
    Latency(LatencyWorkload),
}

/// Reads and writes of one object at a time, of the sizes of RAMCloud's latency table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyWorkload {
    /// Objects of each size.
    pub objects_per_size: u64,
}

impl LatencyWorkload {
    /// The sizes, in bytes: RAMCloud's 100 B, 1 KB, 10 KB, 100 KB and 1 MB.
    pub const SIZES: [usize; 5] = [100, 1_000, 10_000, 100_000, 1_000_000];
    /// Transaction types: a read and a write of each size, in that order.
    pub const TYPES: [&'static str; 10] = [
        "read 100 B",
        "write 100 B",
        "read 1 KB",
        "write 1 KB",
        "read 10 KB",
        "write 10 KB",
        "read 100 KB",
        "write 100 KB",
        "read 1 MB",
        "write 1 MB",
    ];

    fn key(size: usize, object: u64) -> Key {
        Key::from(size as u64 * 1_000_000 + object)
    }
}

impl Workload {
    /// Its tables.
    pub fn schema(&self) -> Vec<TableSpec> {
        match self {
            Self::Kv(kv) => vec![TableSpec::fixed(TABLE.0, "kv", kv.value_bytes)],
            Self::Bank(_) => BankWorkload::schema(),
            Self::SmallBank(_) => SmallBankWorkload::schema(),
            Self::Tatp(_) => TatpWorkload::schema(),
            Self::Latency(_) => vec![TableSpec::variable(
                TABLE.0,
                "objects",
                ferrotx_store::VALUE_BYTES_MAX,
            )],
        }
    }

    /// The procedures every node must run for callers to ship to it ([`ferrotx_txn::ship`]):
    /// `bench kv`'s increment when it ships, none otherwise.
    pub fn procedures(&self) -> Procedures {
        match self {
            Self::Kv(kv) if kv.ships() => kv_ship::procedures(kv),
            _ => Procedures::default(),
        }
    }

    /// Whether a transaction that touched only this node's partitions counts in the
    /// per-type latencies (`bench latency` measures operations across the network).
    pub fn counts_local(&self) -> bool {
        !matches!(self, Self::Latency(_))
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Kv(_) => "kv",
            Self::Bank(_) => "bank",
            Self::SmallBank(_) => "smallbank",
            Self::Tatp(_) => "tatp",
            Self::Latency(_) => "latency",
        }
    }

    /// Its transaction types, for the breakdown of results.
    pub fn types(&self) -> &'static [&'static str] {
        match self {
            Self::Kv(_) => &["kv"],
            Self::Bank(bank) => bank.types(),
            Self::SmallBank(_) => &crate::smallbank::TYPES,
            Self::Tatp(_) => &crate::tatp::TYPES,
            Self::Latency(_) => &LatencyWorkload::TYPES,
        }
    }

    /// The tables and keys whose first 8 bytes are summed at the end (a number every
    /// transaction keeps track of: money, counters), with whether they are signed.
    pub fn summed(&self) -> (Vec<(TableId, Key)>, bool) {
        match self {
            Self::Kv(kv) => (
                (0..kv.key_count).map(|k| (TABLE, Key::from(k))).collect(),
                false,
            ),
            Self::Bank(bank) => (bank.account_rows().collect(), false),
            Self::SmallBank(bank) => (bank.rows().collect(), true),
            Self::Tatp(_) | Self::Latency(_) => (Vec::new(), false),
        }
    }

    /// About how many rows [`Workload::load`] generates (TATP's are random; this is their
    /// expectation), for progress reports.
    pub fn rows(&self) -> u64 {
        match self {
            Self::Kv(kv) => kv.key_count,
            Self::Bank(bank) => bank.accounts,
            Self::SmallBank(bank) => 2 * bank.accounts,
            // A subscriber, its number, 2.5 access infos, 2.5 facilities, 3.75 forwardings.
            Self::Tatp(tatp) => tatp.subscribers * 43 / 4,
            Self::Latency(latency) => 5 * latency.objects_per_size,
        }
    }

    /// Generates every row of the workload, the same on every node, and gives each to
    /// `load` (which keeps the ones the node holds).
    pub fn load(&self, load: &mut Loader<'_>) -> Result<(), StoreError> {
        match self {
            Self::Kv(kv) => {
                let value = vec![0; kv.value_bytes];
                for k in 0..kv.key_count {
                    load(TABLE, Key::from(k), &value)?;
                }
            }
            Self::Bank(bank) => bank.load(load)?,
            Self::SmallBank(bank) => bank.load(load)?,
            Self::Tatp(tatp) => tatp.load(load)?,
            Self::Latency(latency) => {
                for size in LatencyWorkload::SIZES {
                    let value = vec![0x5a; size];
                    for object in 0..latency.objects_per_size {
                        load(TABLE, LatencyWorkload::key(size, object), &value)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks the settings, with a message naming the flag to change.
    pub fn check(&self) -> Result<(), SettingsError> {
        match self {
            Self::Kv(kv) => {
                ensure!(kv.key_count >= 1, "--key-count must be at least 1");
                ensure!(
                    kv.keys_per_txn >= 1 && kv.keys_per_txn as u64 <= kv.key_count,
                    "--keys-per-txn must be in 1..=--key-count"
                );
                ensure!(kv.keys_per_txn <= 64, "--keys-per-txn must be at most 64");
                ensure!(
                    (0.0..=1.0).contains(&kv.write_share),
                    "--write-share must be in [0, 1]"
                );
                ensure!(
                    kv.value_bytes >= 8 && kv.value_bytes <= ferrotx_store::VALUE_BYTES_MAX,
                    "--value-bytes must be in 8..={}",
                    ferrotx_store::VALUE_BYTES_MAX
                );
                ensure!(
                    kv.zipf >= 0.0 && kv.zipf.is_finite(),
                    "--zipf must be 0 (uniform) or positive"
                );
            }
            Self::Bank(bank) => bank.check()?,
            Self::SmallBank(bank) => bank.check()?,
            Self::Tatp(tatp) => tatp.check()?,
            Self::Latency(latency) => {
                ensure!(
                    (1..=1000).contains(&latency.objects_per_size),
                    "--objects-per-size must be in 1..=1000"
                );
            }
        }
        Ok(())
    }

    /// Every row the workload loads, for the end checks (TATP's are many at benchmark
    /// sizes: this is for the small populations of tests and simulations).
    pub fn loaded_rows(&self) -> BTreeSet<Row> {
        let mut rows = BTreeSet::new();
        self.load(&mut |table, key, _| {
            rows.insert((table, key));
            Ok(true)
        })
        .expect("collecting rows never fails");
        rows
    }

    /// Checks a finished run from its `history` and the cluster's final `state` (read once
    /// the cluster is quiet and every coordinator has flushed its truncation): strict
    /// serializability, no acknowledged write lost, replicas equal to their primaries,
    /// and for the bank and SmallBank money conserved (and the bank's audits and tags).
    pub fn end_checks(&self, history: &History, state: &impl StateReader) -> Vec<check::Violation> {
        let loaded = self.loaded_rows();
        // Loaded rows are at version 1; every other key starts absent, at version 0.
        let initial_version = |row: &Row| u64::from(loaded.contains(row));
        let mut violations: Vec<check::Violation> =
            serializability::check(&history.records, |row, version| {
                version == initial_version(row)
            })
            .into_iter()
            .map(check::Violation::Serializability)
            .collect();
        violations.extend(
            lost_write::check(
                &history.records,
                loaded.iter().copied(),
                initial_version,
                state,
            )
            .into_iter()
            .map(check::Violation::LostWrite),
        );
        let mut rows = loaded.clone();
        for record in &history.records {
            rows.extend(record.writes.iter().map(|(row, _)| *row));
        }
        violations.extend(
            replicas::check(rows, state)
                .into_iter()
                .map(check::Violation::Replica),
        );
        let money = match self {
            Self::Bank(bank) => {
                let mut found =
                    money::conserved(history, bank.total(), bank.account_rows(), false, state);
                found.extend(money::audits(history, bank.total()));
                found
            }
            Self::SmallBank(bank) => {
                money::conserved(history, bank.initial_total(), bank.rows(), true, state)
            }
            Self::Kv(_) | Self::Tatp(_) | Self::Latency(_) => Vec::new(),
        };
        violations.extend(money.into_iter().map(check::Violation::Money));
        violations.extend(
            history
                .notes_of(Outcome::Committed)
                .filter(|&(_, note)| note == Note::TagsDiffer)
                .map(|(index, _)| check::Violation::TagsDiffer {
                    id: history.records[index].id,
                }),
        );
        violations
    }
}

/// Picks keys: uniform, or Zipf-distributed over ranks that are the key ids.
pub enum KeyChooser {
    /// Every key equally likely.
    Uniform(u64),
    /// Key `r - 1` with probability proportional to `1 / r^theta`.
    Zipf(Zipf<f64>),
}

impl KeyChooser {
    /// The chooser of `count` keys with exponent `theta` (0: uniform).
    pub fn new(count: u64, theta: f64) -> Self {
        if theta == 0.0 {
            Self::Uniform(count)
        } else {
            Self::Zipf(Zipf::new(count as f64, theta).expect("checked parameters"))
        }
    }

    /// One key id.
    pub fn pick(&self, rng: &mut ChaCha8Rng) -> u64 {
        match self {
            Self::Uniform(count) => rng.random_range(0..*count),
            Self::Zipf(zipf) => zipf.sample(rng) as u64 - 1,
        }
    }
}

/// A transaction type drawn from `mix` (percentages summing to 100): its index.
pub fn pick_kind(mix: &[u32], rng: &mut ChaCha8Rng) -> usize {
    let mut pick = rng.random_range(0..100);
    mix.iter()
        .position(|&share| {
            if pick < share {
                true
            } else {
                pick -= share;
                false
            }
        })
        .expect("the mix sums to 100")
}

/// Where a workload's generated rows go: table, key, value; returns whether the row was
/// stored here.
pub type Loader<'a> = dyn FnMut(TableId, Key, &[u8]) -> Result<bool, StoreError> + 'a;

/// What a committed transaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effect {
    /// It found what it looked for (TATP counts the others as failed, though committed).
    pub succeeded: bool,
    /// Money it created (positive) or destroyed (negative): SmallBank's checked total.
    pub money: i64,
}

impl Effect {
    /// Found what it looked for; created `money`.
    pub fn succeeded(money: i64) -> Self {
        Self {
            succeeded: true,
            money,
        }
    }

    /// Did not find what it looked for.
    pub fn failed() -> Self {
        Self {
            succeeded: false,
            money: 0,
        }
    }
}

/// One transaction attempt: its type (an index into [`Workload::types`]) and how it ended.
pub struct Done {
    /// Its type.
    pub kind: usize,
    /// Committed, with what it did, or aborted.
    pub result: Result<Effect, Abort>,
}

/// State of one coroutine running a workload: its random numbers and buffers. Create one
/// per coroutine, from a seed of its own, and call [`Runner::run_one`] in a loop.
pub struct Runner {
    workload: Workload,
    chooser: KeyChooser,
    rng: ChaCha8Rng,
    ids: Vec<u64>,
    keys: Vec<Key>,
    value: Vec<u8>,
    /// Operations done (`bench latency` takes them in turn).
    turn: usize,
}

impl Runner {
    /// A runner of `workload` with random numbers from `rng`.
    pub fn new(workload: Workload, rng: ChaCha8Rng) -> Self {
        let chooser = match &workload {
            Workload::Kv(kv) => KeyChooser::new(kv.key_count, kv.zipf),
            Workload::Bank(_) | Workload::SmallBank(_) | Workload::Tatp(_) => {
                KeyChooser::new(1, 0.0)
            }
            Workload::Latency(latency) => KeyChooser::new(latency.objects_per_size, 0.0),
        };
        Self {
            workload,
            chooser,
            rng,
            ids: Vec::new(),
            keys: Vec::new(),
            value: Vec::new(),
            turn: 0,
        }
    }

    /// The workload.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// Runs one transaction, recorded by `recorder`.
    pub async fn run_one<R: Recorder>(
        &mut self,
        co: &Co,
        coordinator: &Coordinator,
        recorder: &mut R,
    ) -> Done {
        match &self.workload {
            Workload::Kv(kv) => {
                let kv = kv.clone();
                let result = self.kv(co, coordinator, &kv, recorder).await;
                Done {
                    kind: 0,
                    result: result.map(|()| Effect::succeeded(0)),
                }
            }
            Workload::Bank(bank) => bank.run_one(co, coordinator, &mut self.rng, recorder).await,
            Workload::SmallBank(bank) => {
                bank.run_one(co, coordinator, &mut self.rng, recorder).await
            }
            Workload::Tatp(tatp) => tatp.run_one(co, coordinator, &mut self.rng, recorder).await,
            Workload::Latency(_) => self.latency(co, coordinator, recorder).await,
        }
    }

    /// The next of the ten operations: runs of 64 of each, in turn (so that an operation
    /// follows one like itself, as when each size is measured on its own).
    async fn latency<R: Recorder>(
        &mut self,
        co: &Co,
        coordinator: &Coordinator,
        recorder: &mut R,
    ) -> Done {
        let kind = (self.turn / 64) % LatencyWorkload::TYPES.len();
        self.turn += 1;
        let size = LatencyWorkload::SIZES[kind / 2];
        // An object at another node's primary, as RAMCloud's client reads from a remote
        // master (any object if every one of this size is local).
        let mut key = LatencyWorkload::key(size, self.chooser.pick(&mut self.rng));
        for _ in 0..64 {
            if !coordinator.is_local(TABLE, &key) {
                break;
            }
            key = LatencyWorkload::key(size, self.chooser.pick(&mut self.rng));
        }
        let result = if kind & 1 == 0 {
            record::read_one(co, coordinator, recorder, TABLE, key, &mut self.value)
                .await
                .map(|_| Effect::succeeded(0))
        } else {
            // An overwrite, as RAMCloud's write: a blind write (no read first).
            let index = recorder.open();
            let mut txn = coordinator.begin(co);
            self.value.clear();
            self.value.resize(size, (self.turn % 251) as u8);
            let executed = txn.put(TABLE, key, Some(self.value.clone()));
            record::finish(txn, executed, recorder, index)
                .await
                .map(|()| Effect::succeeded(0))
        };
        Done { kind, result }
    }

    /// Distinct key ids, `n` of them.
    fn pick_distinct(&mut self, n: usize) {
        self.ids.clear();
        while self.ids.len() < n {
            let id = self.chooser.pick(&mut self.rng);
            if !self.ids.contains(&id) {
                self.ids.push(id);
            }
        }
    }

    async fn kv<R: Recorder>(
        &mut self,
        co: &Co,
        coordinator: &Coordinator,
        kv: &KvWorkload,
        recorder: &mut R,
    ) -> Result<(), Abort> {
        self.pick_distinct(kv.keys_per_txn);
        let writes = kv.writes_per_txn();
        if kv.single_reads() {
            // Single-key lock-free read: one READ at the primary, no transaction.
            let key = Key::from(self.ids[0]);
            record::read_one(co, coordinator, recorder, TABLE, key, &mut self.value).await?;
            return Ok(());
        }
        // A recorded run (the simulator, tests) keeps to transactions: the history's
        // checkers need the versions a transaction read and installed, which a shipped
        // operation's result does not carry (and in a combined batch, several operations
        // read and write one version of a key).
        if kv.ships() && !recorder.enabled() {
            match kv_ship::ship_increment(co, coordinator, self.ids[0]).await {
                Ok(()) => return Ok(()),
                Err(NotShipped::Ended(abort)) => return Err(abort),
                // Nothing changed at the primary: the transaction below runs it here.
                Err(NotShipped::RunHere) => {}
            }
        }
        let index = recorder.open();
        let mut txn = if writes == 0 {
            coordinator.begin_read_only(co)
        } else {
            coordinator.begin(co)
        };
        // Every key in one batch of reads (one round trip to each remote primary).
        self.keys.clear();
        self.keys.extend(self.ids.iter().map(|&id| Key::from(id)));
        let executed = async {
            let values = txn.read_many(TABLE, &self.keys).await?;
            for (i, (&id, value)) in self.ids.iter().zip(values).enumerate() {
                if i < writes {
                    if value.is_some()
                        && kv.delete_share > 0.0
                        && self.rng.random_bool(kv.delete_share.min(1.0))
                    {
                        txn.write(TABLE, Key::from(id), None).await?;
                        continue;
                    }
                    // Read-modify-write: bump the counter in the value's first 8 bytes.
                    self.value.clear();
                    self.value
                        .extend_from_slice(value.as_deref().unwrap_or(&[0; 8]));
                    self.value.resize(kv.value_bytes, 0);
                    let count = u64::from_le_bytes(self.value[..8].try_into().expect("8 bytes"));
                    self.value[..8].copy_from_slice(&(count + 1).to_le_bytes());
                    txn.write(TABLE, Key::from(id), Some(self.value.clone()))
                        .await?;
                }
            }
            Ok(())
        }
        .await;
        record::finish(txn, executed, recorder, index).await
    }
}
