//! TATP (the Telecom Application Transaction Processing benchmark) as FaSST runs it: five
//! tables of a mobile network's subscribers, seven transaction types, 80% of them reads.
//! Every row of a subscriber is keyed by its id first (a partition key of 8 bytes), so a
//! subscriber's rows share a partition; SecondarySubscriber is keyed by the subscriber's
//! number (a 15-digit string), so it lives elsewhere, as in the specification.

use ferrotx_exec::Co;
use ferrotx_store::{Key, StoreError, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator, Txn};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::record::{self, Recorder};
use crate::workload::{Done, Effect, Loader, SettingsError, ensure, pick_kind};

/// Subscriber: s_id -> bits, hex digits, bytes, locations (32 bytes).
pub const SUBSCRIBER: TableId = TableId(1);
/// SecondarySubscriber: sub_nbr (15 digits) -> s_id.
pub const SECONDARY_SUBSCRIBER: TableId = TableId(2);
/// AccessInfo: (s_id, ai_type) -> data1..data4.
pub const ACCESS_INFO: TableId = TableId(3);
/// SpecialFacility: (s_id, sf_type) -> is_active, error_cntrl, data_a, data_b.
pub const SPECIAL_FACILITY: TableId = TableId(4);
/// CallForwarding: (s_id, sf_type, start_time) -> end_time, numberx.
pub const CALL_FORWARDING: TableId = TableId(5);

/// The transaction types, in the order of [`TatpWorkload::MIX`].
pub const TYPES: [&str; 7] = [
    "GetSubscriberData",
    "GetNewDestination",
    "GetAccessData",
    "UpdateSubscriberData",
    "UpdateLocation",
    "InsertCallForwarding",
    "DeleteCallForwarding",
];

/// Settings of TATP.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TatpWorkload {
    /// Subscribers in the whole cluster (ids 1 to this).
    pub subscribers: u64,
}

impl TatpWorkload {
    /// The specification's mix, in percent, in the order of [`TYPES`].
    pub const MIX: [u32; 7] = [35, 10, 35, 2, 14, 2, 2];

    /// The share of each type that finds its rows, from the population rules as FaSST
    /// reads them (its app/tatp/README.md): an AccessInfo or SpecialFacility row of a
    /// given type exists with probability 0.625, a facility is active with 0.85, and at
    /// steady state each CallForwarding start time of a facility exists with 0.5, with
    /// an end time unrelated to the start time. That makes GetAccessData and
    /// UpdateSubscriberData 62.5%, Insert- and DeleteCallForwarding 31.25%, and
    /// GetNewDestination 22.0% (computed exactly over its parameters; the
    /// specification's 23.9% does not follow from its own rules, as FaSST notes).
    pub const EXPECTED_SUCCESS: [f64; 7] = [1.0, 0.2199, 0.625, 0.625, 1.0, 0.3125, 0.3125];

    /// The tables.
    pub fn schema() -> Vec<TableSpec> {
        vec![
            TableSpec::fixed(SUBSCRIBER.0, "subscriber", 32).with_partition_key(8),
            TableSpec::fixed(SECONDARY_SUBSCRIBER.0, "secondary_subscriber", 8),
            TableSpec::fixed(ACCESS_INFO.0, "access_info", 16).with_partition_key(8),
            TableSpec::fixed(SPECIAL_FACILITY.0, "special_facility", 8).with_partition_key(8),
            TableSpec::fixed(CALL_FORWARDING.0, "call_forwarding", 16).with_partition_key(8),
        ]
    }

    /// Checks the settings.
    pub fn check(&self) -> Result<(), SettingsError> {
        ensure!(
            self.subscribers >= 1 && self.subscribers <= 999_999_999_999_999,
            "--subscribers must be in 1..=999999999999999"
        );
        Ok(())
    }

    /// The constant A of the specification's non-uniform subscriber ids.
    fn nurand_a(&self) -> u64 {
        match self.subscribers {
            0..=1_000_000 => 65_535,
            1_000_001..=10_000_000 => 1_048_575,
            _ => 2_097_151,
        }
    }

    /// A subscriber id, non-uniform as the specification says:
    /// `((random(0, A) | random(1, P)) % P) + 1`.
    fn subscriber(&self, rng: &mut ChaCha8Rng) -> u64 {
        let p = self.subscribers;
        ((rng.random_range(0..=self.nurand_a()) | rng.random_range(1..=p)) % p) + 1
    }

    /// Every row, the same on every node (each subscriber's rows from its own seed).
    pub fn load(&self, load: &mut Loader<'_>) -> Result<(), StoreError> {
        for s_id in 1..=self.subscribers {
            let mut rng = ChaCha8Rng::seed_from_u64(s_id ^ 0x7a7f);
            let mut subscriber = [0u8; 32];
            rng.fill(&mut subscriber[..25]);
            load(SUBSCRIBER, Key::from(s_id), &subscriber)?;
            load(SECONDARY_SUBSCRIBER, sub_nbr(s_id), &s_id.to_le_bytes())?;
            for ai_type in types_present(&mut rng) {
                let mut data = [0u8; 16];
                rng.fill(&mut data[..10]);
                load(ACCESS_INFO, row_key(s_id, ai_type, 0), &data)?;
            }
            for sf_type in types_present(&mut rng) {
                let active = u8::from(rng.random_range(0..100) < 85);
                let mut data = [active, 0, 0, 0, 0, 0, 0, 0];
                rng.fill(&mut data[1..]);
                load(SPECIAL_FACILITY, row_key(s_id, sf_type, 0), &data)?;
                for start_time in [0u8, 8, 16] {
                    // Each of the three start times with probability 1/2 (0 to 3 rows).
                    if rng.random_bool(0.5) {
                        // At steady state (FaSST's reading, after the inserts and
                        // deletes), a row's end time is unrelated to its start time.
                        let end_time = rng.random_range(1..=24);
                        load(
                            CALL_FORWARDING,
                            row_key(s_id, sf_type, start_time),
                            &call_forwarding(end_time, &mut rng),
                        )?;
                    }
                }
            }
        }
        Ok(())
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
        let s_id = self.subscriber(rng);
        let mut row = Vec::new();
        if kind == 0 || kind == 2 {
            // GetSubscriberData and GetAccessData: single-key lock-free reads.
            let (table, key) = if kind == 0 {
                (SUBSCRIBER, Key::from(s_id))
            } else {
                (ACCESS_INFO, row_key(s_id, rng.random_range(1..=4), 0))
            };
            let result = record::read_one(co, coordinator, recorder, table, key, &mut row)
                .await
                .map(|found| {
                    if found {
                        Effect::succeeded(0)
                    } else {
                        Effect::failed()
                    }
                });
            return Done { kind, result };
        }
        let index = recorder.open();
        let mut txn = if kind == 1 {
            coordinator.begin_read_only(co)
        } else {
            coordinator.begin(co)
        };
        let executed = match kind {
            1 => {
                let sf_type = rng.random_range(1..=4);
                let start_time = [0u8, 8, 16][rng.random_range(0..3)];
                let end_time = rng.random_range(0..24);
                get_new_destination(&mut txn, s_id, sf_type, start_time, end_time).await
            }
            3 => {
                let bit = rng.random_range(0..2u8);
                let data_a = rng.random::<u8>();
                update_subscriber_data(&mut txn, s_id, rng.random_range(1..=4), bit, data_a).await
            }
            4 => update_location(&mut txn, s_id, rng.random::<u32>()).await,
            5 => {
                let sf_type = rng.random_range(1..=4);
                let start_time = [0u8, 8, 16][rng.random_range(0..3)];
                let end_time = rng.random_range(0..24);
                let row = call_forwarding(end_time, rng);
                insert_call_forwarding(&mut txn, s_id, sf_type, start_time, row).await
            }
            _ => {
                let sf_type = rng.random_range(1..=4);
                let start_time = [0u8, 8, 16][rng.random_range(0..3)];
                delete_call_forwarding(&mut txn, s_id, sf_type, start_time).await
            }
        };
        let result = record::finish(txn, executed, recorder, index).await;
        Done { kind, result }
    }
}

/// Of the four types 1 to 4, between one and four, at random (AccessInfo and
/// SpecialFacility rows of a subscriber).
fn types_present(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let count = rng.random_range(1..=4);
    let mut types = vec![1u8, 2, 3, 4];
    for i in 0..4 {
        let j = rng.random_range(i..4);
        types.swap(i, j);
    }
    types.truncate(count);
    types
}

/// The subscriber number: `s_id` as 15 decimal digits (its own key, placed by its own
/// hash).
fn sub_nbr(s_id: u64) -> Key {
    Key::from_bytes(format!("{s_id:015}").as_bytes()).expect("15 bytes")
}

/// A row key of a subscriber's table: its id (the partition key), then the type and the
/// start time.
fn row_key(s_id: u64, kind: u8, start_time: u8) -> Key {
    let mut bytes = [0u8; 10];
    bytes[..8].copy_from_slice(&s_id.to_be_bytes());
    bytes[8] = kind;
    bytes[9] = start_time;
    Key::from_bytes(&bytes).expect("10 bytes")
}

/// A CallForwarding row: end time, then a 15-digit number.
fn call_forwarding(end_time: u8, rng: &mut ChaCha8Rng) -> [u8; 16] {
    let mut row = [0u8; 16];
    row[0] = end_time;
    for digit in &mut row[1..] {
        *digit = b'0' + rng.random_range(0..10);
    }
    row
}

async fn get_new_destination(
    txn: &mut Txn<'_>,
    s_id: u64,
    sf_type: u8,
    start_time: u8,
    end_time: u8,
) -> Result<Effect, Abort> {
    let facility = txn
        .read(SPECIAL_FACILITY, row_key(s_id, sf_type, 0))
        .await?;
    if facility.is_none_or(|f| f[0] != 1) {
        return Ok(Effect::failed());
    }
    let keys: Vec<Key> = [0u8, 8, 16]
        .into_iter()
        .filter(|&t| t <= start_time)
        .map(|t| row_key(s_id, sf_type, t))
        .collect();
    let rows = txn.read_many(CALL_FORWARDING, &keys).await?;
    let found = rows.iter().flatten().any(|row| end_time < row[0]);
    Ok(if found {
        Effect::succeeded(0)
    } else {
        Effect::failed()
    })
}

async fn update_subscriber_data(
    txn: &mut Txn<'_>,
    s_id: u64,
    sf_type: u8,
    bit: u8,
    data_a: u8,
) -> Result<Effect, Abort> {
    let key = row_key(s_id, sf_type, 0);
    let Some(mut facility) = txn.read(SPECIAL_FACILITY, key).await? else {
        // No such facility: the update finds no row, and nothing is written.
        return Ok(Effect::failed());
    };
    let Some(mut subscriber) = txn.read(SUBSCRIBER, Key::from(s_id)).await? else {
        // Data lost (see `lookup`): nothing to update.
        return Ok(Effect::failed());
    };
    subscriber[0] = (subscriber[0] & !1) | bit;
    facility[2] = data_a;
    txn.write(SUBSCRIBER, Key::from(s_id), Some(subscriber))
        .await?;
    txn.write(SPECIAL_FACILITY, key, Some(facility)).await?;
    Ok(Effect::succeeded(0))
}

/// The subscriber id of `s_id`'s number, looked up in SecondarySubscriber; `None` if
/// the row is missing. Every loaded subscriber has one, so a missing row is data lost
/// (a primary that came back empty): the transaction finds nothing, and the end checks
/// report the loss. A client never panics on what the store returns.
async fn lookup(txn: &mut Txn<'_>, s_id: u64) -> Result<Option<u64>, Abort> {
    let row = txn.read(SECONDARY_SUBSCRIBER, sub_nbr(s_id)).await?;
    Ok(row.map(|row| u64::from_le_bytes(row[..8].try_into().expect("a fixed 8-byte column"))))
}

async fn update_location(txn: &mut Txn<'_>, s_id: u64, location: u32) -> Result<Effect, Abort> {
    let Some(id) = lookup(txn, s_id).await? else {
        return Ok(Effect::failed());
    };
    let Some(mut subscriber) = txn.read(SUBSCRIBER, Key::from(id)).await? else {
        // Data lost (see `lookup`): nothing to update.
        return Ok(Effect::failed());
    };
    subscriber[21..25].copy_from_slice(&location.to_le_bytes());
    txn.write(SUBSCRIBER, Key::from(id), Some(subscriber))
        .await?;
    Ok(Effect::succeeded(0))
}

async fn insert_call_forwarding(
    txn: &mut Txn<'_>,
    s_id: u64,
    sf_type: u8,
    start_time: u8,
    row: [u8; 16],
) -> Result<Effect, Abort> {
    let Some(id) = lookup(txn, s_id).await? else {
        return Ok(Effect::failed());
    };
    if txn
        .read(SPECIAL_FACILITY, row_key(id, sf_type, 0))
        .await?
        .is_none()
    {
        return Ok(Effect::failed());
    }
    match txn
        .insert(
            CALL_FORWARDING,
            row_key(id, sf_type, start_time),
            row.to_vec(),
        )
        .await
    {
        Ok(()) => {}
        Err(Abort::KeyExists) => {
            return Ok(Effect::failed());
        }
        Err(abort) => return Err(abort),
    }
    Ok(Effect::succeeded(0))
}

async fn delete_call_forwarding(
    txn: &mut Txn<'_>,
    s_id: u64,
    sf_type: u8,
    start_time: u8,
) -> Result<Effect, Abort> {
    let Some(id) = lookup(txn, s_id).await? else {
        return Ok(Effect::failed());
    };
    let key = row_key(id, sf_type, start_time);
    if txn.read(CALL_FORWARDING, key).await?.is_none() {
        return Ok(Effect::failed());
    }
    txn.delete(CALL_FORWARDING, key).await?;
    Ok(Effect::succeeded(0))
}
