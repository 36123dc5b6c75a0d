//! `ferrotx check list-append`: Elle's list-append analysis (the `adya` crate) of a
//! Jepsen-style history recorded by a test harness (scripts/nemesis.py,
//! tests/kill_under_load.rs), for histories recorded outside `cargo test`.
//!
//! The history is JSON: one operation per line (or one array of them), each
//! `{"type": "invoke"|"ok"|"fail"|"info", "f": "txn", "process": P, "value": [...],
//! "index": I, "time": NANOS}` with micro-operations `["append", k, e]` and
//! `["r", k, [e, ...] | null]`. Operations of another `f` (a nemesis, a bank transfer)
//! are skipped.

use std::path::Path;
use std::time::Duration;

use adya::{History, Opts, Valid, Workload};
use anyhow::Context;

/// Exit status of a history with an anomaly, and of one the checker could not decide
/// (no transaction, or the cycle search ran out of time).
pub const EXIT_ANOMALY: i32 = 1;
pub const EXIT_UNKNOWN: i32 = 2;
/// Exit status when the history cannot be read or parsed.
pub const EXIT_ERROR: i32 = 3;

/// Checks the history in `path` for strict serializability; prints the verdict (text, or
/// adya's report as JSON) and returns the exit status: 0 valid, `EXIT_ANOMALY`,
/// `EXIT_UNKNOWN`.
pub fn list_append(path: &Path, json: bool, timeout: Duration) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the history {}", path.display()))?;
    let history = History::from_json(&text)
        .map_err(|e| anyhow::anyhow!("{}: not a history: {e}", path.display()))?;
    let opts = Opts {
        models: vec!["strict-serializable".into()],
        timeout,
        ..Opts::default()
    };
    let report = adya::check(&history, Workload::ListAppend, &opts);
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        let verdict = match report.valid {
            Valid::True => "valid",
            Valid::False => "INVALID",
            Valid::Unknown => "unknown",
        };
        println!(
            "list-append (strict-serializable): {verdict}; {} operations; anomalies: {}",
            history.ops.len(),
            if report.anomaly_types.is_empty() {
                "none".to_owned()
            } else {
                report.anomaly_types.join(", ")
            }
        );
        if !report.not.is_empty() {
            println!("not: {}", report.not.join(", "));
        }
        for (kind, anomalies) in &report.anomalies {
            for anomaly in anomalies.iter().take(3) {
                println!("{kind} (ops {:?}):\n{}", anomaly.ops, anomaly.explanation);
            }
            if anomalies.len() > 3 {
                println!("... and {} more {kind}", anomalies.len() - 3);
            }
        }
    }
    Ok(match report.valid {
        Valid::True => 0,
        Valid::False => EXIT_ANOMALY,
        Valid::Unknown => EXIT_UNKNOWN,
    })
}
