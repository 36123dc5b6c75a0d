
pub mod bank;
pub mod check;
pub mod history;
pub mod list_append;
pub mod record;
pub mod smallbank;
pub mod state;
pub mod tatp;
pub mod workload;
