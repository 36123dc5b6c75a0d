//! Checkers of histories and final states. Each returns what it finds wrong as values and
//! never panics on a bad history.

pub mod serializability;
