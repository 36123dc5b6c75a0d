//! ferrotx workloads, and checkers of the histories they record.

pub mod check;
pub mod list_append;
