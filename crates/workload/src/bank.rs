//! Bank accounts (`bench bank`, the simulator's bank, the node example and tests): money
//! moves between accounts and must be conserved. Besides plain transfers, a mix can hold
//! transfers with a guard read (a third account read and not written, so read-write
//! transactions validate too, FaRM 4 step 2), audits (read-only transactions reading
//! every account, which must see the initial total), single-key lock-free reads, and two
//! "tag" keys written together by blind writes (`Txn::put`) and read together by
//! read-only transactions, which must see them equal.

use ferrotx_exec::Co;
use ferrotx_store::{Key, StoreError, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator, Txn};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::history::{Note, Row};
use crate::record::{self, Recorder};
use crate::workload::{Done, Effect, Loader, SettingsError, ensure, pick_kind};

/// The accounts (and the tags).
pub const ACCOUNTS: TableId = TableId(1);
/// The first tag key, outside the accounts' ids.
pub const TAG_A: u64 = 1 << 40;
/// The second tag key, always written with the first.
pub const TAG_B: u64 = TAG_A + 1;

/// The transaction types, in the order of [`BankMix`]'s fields.
pub const TYPES: [&str; 4] = ["transfer", "audit", "read one", "tags"];

/// Shares of the transaction types, in percent, summing to 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BankMix {
    /// Transfers between two accounts.
    pub transfer: u32,
    /// Audits: read-only transactions summing every account.
    pub audit: u32,
    /// Single-key lock-free reads of one account.
    pub read_one: u32,
    /// Tag transactions: half blind writes of both tags, half read-only reads of both.
    pub tags: u32,
}

impl BankMix {
    fn shares(&self) -> [u32; 4] {
        [self.transfer, self.audit, self.read_one, self.tags]
    }
}

/// Settings of the bank.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BankWorkload {
    /// Accounts (keys 0 to this, exclusive).
    pub accounts: u64,
    /// Balance of every account at the start.
    pub initial_balance: u64,
    /// The largest amount one transfer moves (amounts are uniform in 1 to this).
    pub amount_max: u64,
    /// Whether a transfer also reads a third account and goes ahead only while the
    /// source and that account together hold twice the amount.
    pub guard_read: bool,
    /// The mix of transaction types.
    pub mix: BankMix,
}

impl BankWorkload {
    /// Plain transfers of 1 to 10 (`bench bank`).
    pub fn transfers(accounts: u64, initial_balance: u64) -> Self {
        Self {
            accounts,
            initial_balance,
            amount_max: 10,
            guard_read: false,
            mix: BankMix {
                transfer: 100,
                audit: 0,
                read_one: 0,
                tags: 0,
            },
        }
    }

    /// The checked mix (the simulator's and the tests'): transfers of 1 to 60 with a
    /// guard read, 20% audits, 20% single-key reads, 15% tag transactions. With few
    /// accounts and a balance of 100 they conflict often.
    pub fn mixed(accounts: u64, initial_balance: u64) -> Self {
        Self {
            accounts,
            initial_balance,
            amount_max: 60,
            guard_read: true,
            mix: BankMix {
                transfer: 45,
                audit: 20,
                read_one: 20,
                tags: 15,
            },
        }
    }

    /// The tables.
    pub fn schema() -> Vec<TableSpec> {
        vec![TableSpec::fixed(ACCOUNTS.0, "accounts", 8)]
    }

    /// Its transaction types that can occur (only "transfer" for plain transfers).
    pub fn types(&self) -> &'static [&'static str] {
        let last = self.mix.shares().iter().rposition(|&s| s > 0).unwrap_or(0);
        &TYPES[..=last]
    }

    /// Checks the settings.
    pub fn check(&self) -> Result<(), SettingsError> {
        ensure!(self.accounts >= 2, "--accounts must be at least 2");
        ensure!(
            self.accounts < TAG_A,
            "--accounts must be below {TAG_A} (the tags' keys)"
        );
        ensure!(
            self.amount_max >= 1,
            "the largest amount must be at least 1"
        );
        ensure!(
            self.mix.shares().iter().sum::<u32>() == 100,
            "the bank's mix must sum to 100"
        );
        Ok(())
    }

    /// Every account, at the initial balance (the tags start absent).
    pub fn load(&self, load: &mut Loader<'_>) -> Result<(), StoreError> {
        let value = self.initial_balance.to_le_bytes();
        for account in 0..self.accounts {
            load(ACCOUNTS, Key::from(account), &value)?;
        }
        Ok(())
    }

    /// The money in the bank, at the start and at every moment.
    pub fn total(&self) -> i128 {
        i128::from(self.accounts) * i128::from(self.initial_balance)
    }

    /// The keys whose balances sum to [`BankWorkload::total`].
    pub fn account_rows(&self) -> impl Iterator<Item = Row> + use<> {
        (0..self.accounts).map(|a| (ACCOUNTS, Key::from(a)))
    }

    /// The keys of the tags.
    pub fn tag_rows() -> [Row; 2] {
        [(ACCOUNTS, Key::from(TAG_A)), (ACCOUNTS, Key::from(TAG_B))]
    }

    /// Runs one transaction of the mix.
    pub async fn run_one<R: Recorder>(
        &self,
        co: &Co,
        coordinator: &Coordinator,
        rng: &mut ChaCha8Rng,
        recorder: &mut R,
    ) -> Done {
        let kind = pick_kind(&self.mix.shares(), rng);
        let read_only = match kind {
            0 => false,
            1 => true,
            2 => {
                let account = Key::from(rng.random_range(0..self.accounts));
                let mut value = Vec::new();
                let result =
                    record::read_one(co, coordinator, recorder, ACCOUNTS, account, &mut value)
                        .await
                        .map(|_| Effect::succeeded(0));
                return Done { kind, result };
            }
            // Tags: half write both, half read both.
            _ => rng.random_bool(0.5),
        };
        let index = recorder.open();
        let mut txn = if read_only {
            coordinator.begin_read_only(co)
        } else {
            coordinator.begin(co)
        };
        let executed = match kind {
            0 => {
                let from = rng.random_range(0..self.accounts);
                let to = (from + rng.random_range(1..self.accounts)) % self.accounts;
                let amount = rng.random_range(1..=self.amount_max);
                self.transfer(&mut txn, from, to, amount).await
            }
            1 => self
                .audit(&mut txn, rng.random_bool(0.5))
                .await
                .map(|total| {
                    recorder.note(index, Note::Total(total));
                    Effect::succeeded(0)
                }),
            _ if read_only => read_tags(&mut txn).await.map(|equal| {
                if !equal {
                    recorder.note(index, Note::TagsDiffer);
                }
                Effect::succeeded(0)
            }),
            _ => {
                // Both tags set to one random value, without reading them.
                let [(_, a), (_, b)] = Self::tag_rows();
                let value = bytes(rng.random());
                txn.put(ACCOUNTS, a, value.clone())
                    .and_then(|()| txn.put(ACCOUNTS, b, value))
                    .map(|()| Effect::succeeded(0))
            }
        };
        let result = record::finish(txn, executed, recorder, index).await;
        Done { kind, result }
    }

    /// Moves `amount` from `from` to `to` if there is enough (with the guard read, if
    /// set); otherwise only reads.
    async fn transfer(
        &self,
        txn: &mut Txn<'_>,
        from: u64,
        to: u64,
        amount: u64,
    ) -> Result<Effect, Abort> {
        let both = txn
            .read_many(ACCOUNTS, &[Key::from(from), Key::from(to)])
            .await?;
        let (a, b) = (balance(both[0].as_deref()), balance(both[1].as_deref()));
        let enough = if self.guard_read {
            // With two accounts the guard is the source itself.
            let guard = (to + 1) % self.accounts;
            let g = if guard == from {
                a
            } else {
                balance(txn.read(ACCOUNTS, Key::from(guard)).await?)
            };
            a >= amount && a + g >= 2 * amount
        } else {
            a >= amount
        };
        if !enough {
            // Not enough money: commit the reads only.
            return Ok(Effect::failed());
        }
        txn.write(ACCOUNTS, Key::from(from), bytes(a - amount))
            .await?;
        txn.write(ACCOUNTS, Key::from(to), bytes(b + amount))
            .await?;
        Ok(Effect::succeeded(0))
    }

    /// The total of every account, read in one batch or one by one.
    async fn audit(&self, txn: &mut Txn<'_>, batch: bool) -> Result<i128, Abort> {
        let mut total = 0i128;
        if batch {
            let keys: Vec<Key> = (0..self.accounts).map(Key::from).collect();
            for value in txn.read_many(ACCOUNTS, &keys).await? {
                total += i128::from(balance(value));
            }
        } else {
            for account in 0..self.accounts {
                let value = txn.read(ACCOUNTS, Key::from(account)).await?;
                total += i128::from(balance(value));
            }
        }
        Ok(total)
    }
}

/// Reads both tags in one (read-only) transaction: whether they are equal.
async fn read_tags(txn: &mut Txn<'_>) -> Result<bool, Abort> {
    let [(_, a), (_, b)] = BankWorkload::tag_rows();
    let values = txn.read_many(ACCOUNTS, &[a, b]).await?;
    Ok(values[0] == values[1])
}

/// The balance in `value` (0 if absent).
pub fn balance(value: Option<impl AsRef<[u8]>>) -> u64 {
    value.map_or(0, |v| {
        u64::from_le_bytes(v.as_ref()[..8].try_into().expect("8-byte balance"))
    })
}

fn bytes(balance: u64) -> Option<Vec<u8>> {
    Some(balance.to_le_bytes().to_vec())
}
