//! The list-append workload.
