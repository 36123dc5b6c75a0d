//! SmallBank as FaSST runs it (after H-Store's definition): savings and checking balances
//! per account, six transaction types, most transactions on a small hot set of accounts.
//! Both tables are keyed by the account id, so an account's two rows share a partition.

use ferrotx_exec::Co;
use ferrotx_store::{Key, StoreError, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator, Txn};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::history::{Note, Row};
use crate::record::{self, Recorder};
use crate::workload::{Done, Effect, Loader, SettingsError, ensure, pick_kind};

/// Savings balances.
pub const SAVINGS: TableId = TableId(1);
/// Checking balances.
pub const CHECKING: TableId = TableId(2);

/// The transaction types, in the order of [`SmallBankWorkload::MIX`].
pub const TYPES: [&str; 6] = [
    "SendPayment",
    "Amalgamate",
    "Balance",
    "DepositChecking",
    "TransactSaving",
    "WriteCheck",
];

/// Settings of SmallBank.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SmallBankWorkload {
    /// Accounts in the whole cluster.
    pub accounts: u64,
    /// Accounts in the hot set.
    pub hot_accounts: u64,
    /// Percentage of transactions whose accounts come from the hot set.
    pub hot_percent: u32,
    /// Balance of every savings and checking row at the start.
    pub initial_balance: i64,
}

impl SmallBankWorkload {
    /// FaSST's mix, in percent, in the order of [`TYPES`].
    pub const MIX: [u32; 6] = [25, 15, 15, 15, 15, 15];

    /// The tables.
    pub fn schema() -> Vec<TableSpec> {
        vec![
            TableSpec::fixed(SAVINGS.0, "savings", 8),
            TableSpec::fixed(CHECKING.0, "checking", 8),
        ]
    }

    /// Checks the settings.
    pub fn check(&self) -> Result<(), SettingsError> {
        ensure!(self.accounts >= 2, "--accounts must be at least 2");
        ensure!(
            self.hot_accounts >= 2 && self.hot_accounts <= self.accounts,
            "--hot-accounts must be in 2..=--accounts"
        );
        ensure!(self.hot_percent <= 100, "--hot-percent must be at most 100");
        Ok(())
    }

    /// Every row: both balances of every account.
    pub fn load(&self, load: &mut Loader<'_>) -> Result<(), StoreError> {
        let balance = self.initial_balance.to_le_bytes();
        for account in 0..self.accounts {
            load(SAVINGS, Key::from(account), &balance)?;
            load(CHECKING, Key::from(account), &balance)?;
        }
        Ok(())
    }

    /// The money in the bank at the start.
    pub fn initial_total(&self) -> i128 {
        i128::from(self.accounts) * 2 * i128::from(self.initial_balance)
    }

    fn account(&self, rng: &mut ChaCha8Rng) -> u64 {
        if rng.random_range(0..100) < self.hot_percent {
            rng.random_range(0..self.hot_accounts)
        } else {
            rng.random_range(0..self.accounts)
        }
    }

    fn two_accounts(&self, rng: &mut ChaCha8Rng) -> (u64, u64) {
        let a = self.account(rng);
        loop {
            let b = self.account(rng);
            if b != a {
                return (a, b);
            }
        }
    }

    /// Both balances of every account.
    pub fn rows(&self) -> impl Iterator<Item = Row> + use<> {
        (0..self.accounts).flat_map(|k| [(SAVINGS, Key::from(k)), (CHECKING, Key::from(k))])
    }

    /// Runs one transaction of the mix.
    pub async fn run_one<R: Recorder>(
        &self,
        co: &Co,
        coordinator: &Coordinator,
        rng: &mut ChaCha8Rng,
        recorder: &mut R,
    ) -> Done {
        let kind = pick_kind(&Self::MIX, rng);
        let index = recorder.open();
        // Balance only reads.
        let mut txn = if kind == 2 {
            coordinator.begin_read_only(co)
        } else {
            coordinator.begin(co)
        };
        let executed = match kind {
            0 => {
                let (from, to) = self.two_accounts(rng);
                send_payment(&mut txn, from, to, rng.random_range(1..=10)).await
            }
            1 => {
                let (from, to) = self.two_accounts(rng);
                amalgamate(&mut txn, from, to).await
            }
            2 => balance(&mut txn, self.account(rng)).await,
            3 => deposit_checking(&mut txn, self.account(rng), rng.random_range(1..=10)).await,
            4 => transact_saving(&mut txn, self.account(rng), rng.random_range(-10..=10)).await,
            _ => write_check(&mut txn, self.account(rng), rng.random_range(1..=10)).await,
        };
        match &executed {
            Ok(effect) if effect.money != 0 => recorder.note(index, Note::Money(effect.money)),
            _ => {}
        }
        let result = record::finish(txn, executed, recorder, index).await;
        Done { kind, result }
    }
}

fn amount(value: Option<Vec<u8>>) -> i64 {
    value.map_or(0, |v| {
        i64::from_le_bytes(v[..8].try_into().expect("8-byte balance"))
    })
}

fn bytes(balance: i64) -> Option<Vec<u8>> {
    Some(balance.to_le_bytes().to_vec())
}

/// Moves `amount` from `from`'s checking to `to`'s checking if `from` has it.
async fn send_payment(txn: &mut Txn<'_>, from: u64, to: u64, value: i64) -> Result<Effect, Abort> {
    let both = txn
        .read_many(CHECKING, &[Key::from(from), Key::from(to)])
        .await?;
    let (a, b) = (amount(both[0].clone()), amount(both[1].clone()));
    if a < value {
        return Ok(Effect::failed());
    }
    txn.write(CHECKING, Key::from(from), bytes(a - value))
        .await?;
    txn.write(CHECKING, Key::from(to), bytes(b + value)).await?;
    Ok(Effect::succeeded(0))
}

/// Moves everything `from` has, savings and checking, into `to`'s checking.
async fn amalgamate(txn: &mut Txn<'_>, from: u64, to: u64) -> Result<Effect, Abort> {
    let savings = amount(txn.read(SAVINGS, Key::from(from)).await?);
    let checking = txn
        .read_many(CHECKING, &[Key::from(from), Key::from(to)])
        .await?;
    let (c, d) = (amount(checking[0].clone()), amount(checking[1].clone()));
    txn.write(SAVINGS, Key::from(from), bytes(0)).await?;
    txn.write(CHECKING, Key::from(from), bytes(0)).await?;
    txn.write(CHECKING, Key::from(to), bytes(d + savings + c))
        .await?;
    Ok(Effect::succeeded(0))
}

/// Reads both balances (read-only).
async fn balance(txn: &mut Txn<'_>, account: u64) -> Result<Effect, Abort> {
    txn.read(SAVINGS, Key::from(account)).await?;
    txn.read(CHECKING, Key::from(account)).await?;
    Ok(Effect::succeeded(0))
}

/// Adds `value` to checking: money comes in.
async fn deposit_checking(txn: &mut Txn<'_>, account: u64, value: i64) -> Result<Effect, Abort> {
    let c = amount(txn.read(CHECKING, Key::from(account)).await?);
    txn.write(CHECKING, Key::from(account), bytes(c + value))
        .await?;
    Ok(Effect::succeeded(value))
}

/// Adds `value` (which may be negative) to savings, unless that would take it below zero.
async fn transact_saving(txn: &mut Txn<'_>, account: u64, value: i64) -> Result<Effect, Abort> {
    let s = amount(txn.read(SAVINGS, Key::from(account)).await?);
    if s + value < 0 {
        return Ok(Effect::failed());
    }
    txn.write(SAVINGS, Key::from(account), bytes(s + value))
        .await?;
    Ok(Effect::succeeded(value))
}

/// Writes a check of `value` against checking; if savings and checking together do not
/// cover it, the account pays a penalty of 1 (money goes out either way).
async fn write_check(txn: &mut Txn<'_>, account: u64, value: i64) -> Result<Effect, Abort> {
    let s = amount(txn.read(SAVINGS, Key::from(account)).await?);
    let c = amount(txn.read(CHECKING, Key::from(account)).await?);
    let paid = if s + c < value { value + 1 } else { value };
    txn.write(CHECKING, Key::from(account), bytes(c - paid))
        .await?;
    Ok(Effect::succeeded(-paid))
}
