//! The workloads a benchmark cluster runs: what each node loads, what one transaction of a
//! coroutine does, and what is checked at the end.

use std::rc::Rc;

use ferrotx_exec::Co;
use ferrotx_store::{Key, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};

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
}

/// Bank transfers between accounts (`bench bank`): money must be conserved.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BankWorkload {
    /// Accounts.
    pub accounts: u64,
    /// Balance of every account at the start.
    pub initial_balance: u64,
}

/// A workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Workload {
    /// `bench kv`.
    Kv(KvWorkload),
    /// `bench bank`.
    Bank(BankWorkload),
}

impl Workload {
    /// Its tables.
    pub fn schema(&self) -> Vec<TableSpec> {
        match self {
            Self::Kv(kv) => vec![TableSpec::fixed(TABLE.0, "kv", kv.value_bytes)],
            Self::Bank(_) => vec![TableSpec::fixed(TABLE.0, "accounts", 8)],
        }
    }

    /// Every key of the table.
    pub fn keys(&self) -> impl Iterator<Item = Key> {
        let count = match self {
            Self::Kv(kv) => kv.key_count,
            Self::Bank(bank) => bank.accounts,
        };
        (0..count).map(Key::from)
    }

    /// The value every key starts with.
    pub fn initial_value(&self) -> Vec<u8> {
        match self {
            Self::Kv(kv) => vec![0; kv.value_bytes],
            Self::Bank(bank) => bank.initial_balance.to_le_bytes().to_vec(),
        }
    }

    /// Checks the settings, with a message naming the flag to change.
    pub fn check(&self) -> anyhow::Result<()> {
        match self {
            Self::Kv(kv) => {
                anyhow::ensure!(kv.key_count >= 1, "--key-count must be at least 1");
                anyhow::ensure!(
                    kv.keys_per_txn >= 1 && kv.keys_per_txn as u64 <= kv.key_count,
                    "--keys-per-txn must be in 1..=--key-count"
                );
                anyhow::ensure!(kv.keys_per_txn <= 64, "--keys-per-txn must be at most 64");
                anyhow::ensure!(
                    (0.0..=1.0).contains(&kv.write_share),
                    "--write-share must be in [0, 1]"
                );
                anyhow::ensure!(
                    kv.value_bytes >= 8 && kv.value_bytes <= ferrotx_store::VALUE_BYTES_MAX,
                    "--value-bytes must be in 8..={}",
                    ferrotx_store::VALUE_BYTES_MAX
                );
                anyhow::ensure!(
                    kv.zipf >= 0.0 && kv.zipf.is_finite(),
                    "--zipf must be 0 (uniform) or positive"
                );
            }
            Self::Bank(bank) => {
                anyhow::ensure!(bank.accounts >= 2, "--accounts must be at least 2");
            }
        }
        Ok(())
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

/// What one transaction attempt ended with.
pub type Outcome = Result<(), Abort>;

/// State of one coroutine running a workload.
pub struct Runner {
    workload: Workload,
    chooser: KeyChooser,
    rng: ChaCha8Rng,
    ids: Vec<u64>,
    keys: Vec<Key>,
    value: Vec<u8>,
}

impl Runner {
    /// A runner of `workload` with random numbers from `rng`.
    pub fn new(workload: Workload, rng: ChaCha8Rng) -> Self {
        let chooser = match &workload {
            Workload::Kv(kv) => KeyChooser::new(kv.key_count, kv.zipf),
            Workload::Bank(bank) => KeyChooser::new(bank.accounts, 0.0),
        };
        Self {
            workload,
            chooser,
            rng,
            ids: Vec::new(),
            keys: Vec::new(),
            value: Vec::new(),
        }
    }

    /// Runs one transaction.
    pub async fn run_one(&mut self, co: &Co, coordinator: &Rc<Coordinator>) -> Outcome {
        match self.workload.clone() {
            Workload::Kv(kv) => self.kv(co, coordinator, &kv).await,
            Workload::Bank(_) => self.transfer(co, coordinator).await,
        }
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

    async fn kv(&mut self, co: &Co, coordinator: &Rc<Coordinator>, kv: &KvWorkload) -> Outcome {
        self.pick_distinct(kv.keys_per_txn);
        let writes = kv.writes_per_txn();
        if kv.single_reads() {
            // Single-key lock-free read: one READ at the primary, no transaction.
            let key = Key::from(self.ids[0]);
            coordinator
                .read_one_into(co, TABLE, key, &mut self.value)
                .await?;
            return Ok(());
        }
        let mut txn = if writes == 0 {
            coordinator.begin_read_only(co)
        } else {
            coordinator.begin(co)
        };
        // Every key in one batch of reads (one round trip to each remote primary).
        self.keys.clear();
        self.keys.extend(self.ids.iter().map(|&id| Key::from(id)));
        let values = txn.read_many(TABLE, &self.keys).await?;
        for (i, (&id, value)) in self.ids.iter().zip(values).enumerate() {
            if i < writes {
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
        txn.commit().await
    }

    async fn transfer(&mut self, co: &Co, coordinator: &Rc<Coordinator>) -> Outcome {
        self.pick_distinct(2);
        let (from, to) = (Key::from(self.ids[0]), Key::from(self.ids[1]));
        let amount = self.rng.random_range(1..=10u64);
        let mut txn = coordinator.begin(co);
        let balance = |v: Option<Vec<u8>>| {
            v.map(|b| u64::from_le_bytes(b[..8].try_into().expect("8-byte balance")))
                .unwrap_or(0)
        };
        let mut both = txn.read_many(TABLE, &[from, to]).await?.into_iter();
        let from_balance = balance(both.next().expect("two values"));
        let to_balance = balance(both.next().expect("two values"));
        if from_balance < amount {
            // Not enough money: commit the reads only (a read-only transaction).
            return txn.commit().await;
        }
        txn.write(
            TABLE,
            from,
            Some((from_balance - amount).to_le_bytes().to_vec()),
        )
        .await?;
        txn.write(
            TABLE,
            to,
            Some((to_balance + amount).to_le_bytes().to_vec()),
        )
        .await?;
        txn.commit().await
    }
}
