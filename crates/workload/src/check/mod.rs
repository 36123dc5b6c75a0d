//! Checkers of recorded histories.

pub mod list_append;
