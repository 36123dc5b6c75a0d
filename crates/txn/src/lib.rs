//! Transactions: FaRM's commit protocol (lock, validate, commit-backup, commit-primary,
//! truncate) carried by ferrotx RPCs. See docs/transactions.md for the design.
//!
//! This crate is being built: so far it holds the protocol's messages (`messages`),
//! encoded and decoded totally (any bytes decode or are refused with a reason), and the
//! participant side (`participant`): what primaries and backups do with them.

pub mod answer;
pub mod checkpoint;
pub mod coordinator;
pub mod durable;
pub mod messages;
pub mod participant;
pub mod reclaim;
pub mod recovery;
pub mod refill;
pub mod reservation;
pub mod ship;
mod store_scan;
