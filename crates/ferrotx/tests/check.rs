//! `ferrotx check list-append` on small histories: a strictly serializable one passes
//! (exit 0), one with a G1c cycle (two transactions each reading the other's append) and
//! one with an aborted read (G1a) fail (exit 1) and name the anomaly.

mod common;

use common::{ferrotx, temp_path};

/// Runs `ferrotx check list-append` on `lines` (written to a file) with `args`: the exit
/// code and stdout.
fn check(name: &str, lines: &[&str], args: &[&str]) -> (i32, String) {
    let path = temp_path(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let out = ferrotx()
        .args(["check", "list-append", "--history"])
        .arg(&path)
        .args(args)
        .output()
        .expect("run ferrotx check");
    let _ = std::fs::remove_file(&path);
    (
        out.status.code().expect("an exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const VALID: &[&str] = &[
    r#"{"index":0,"time":0,"type":"invoke","f":"txn","process":0,"value":[["append",1,1]]}"#,
    r#"{"index":1,"time":1,"type":"ok","f":"txn","process":0,"value":[["append",1,1]]}"#,
    r#"{"index":2,"time":2,"type":"info","f":"start","process":"nemesis","value":null}"#,
    r#"{"index":3,"time":3,"type":"invoke","f":"txn","process":1,"value":[["r",1,null],["append",1,2]]}"#,
    r#"{"index":4,"time":4,"type":"ok","f":"txn","process":1,"value":[["r",1,[1]],["append",1,2]]}"#,
    r#"{"index":5,"time":5,"type":"invoke","f":"txn","process":0,"value":[["r",1,null]]}"#,
    r#"{"index":6,"time":6,"type":"ok","f":"txn","process":0,"value":[["r",1,[1,2]]]}"#,
];

/// T1 appends to 1 and reads 2 holding T2's append; T2 appends to 2 and reads 1 holding
/// T1's: each read the other's write, a G1c cycle.
const G1C: &[&str] = &[
    r#"{"index":0,"time":0,"type":"invoke","f":"txn","process":0,"value":[["append",1,1],["r",2,null]]}"#,
    r#"{"index":1,"time":1,"type":"invoke","f":"txn","process":1,"value":[["append",2,1],["r",1,null]]}"#,
    r#"{"index":2,"time":2,"type":"ok","f":"txn","process":0,"value":[["append",1,1],["r",2,[1]]]}"#,
    r#"{"index":3,"time":3,"type":"ok","f":"txn","process":1,"value":[["append",2,1],["r",1,[1]]]}"#,
];

/// A read sees the append of a transaction that failed (certainly took no effect): G1a.
const G1A: &[&str] = &[
    r#"{"index":0,"time":0,"type":"invoke","f":"txn","process":0,"value":[["append",1,1]]}"#,
    r#"{"index":1,"time":1,"type":"fail","f":"txn","process":0,"value":[["append",1,1]]}"#,
    r#"{"index":2,"time":2,"type":"invoke","f":"txn","process":1,"value":[["r",1,null]]}"#,
    r#"{"index":3,"time":3,"type":"ok","f":"txn","process":1,"value":[["r",1,[1]]]}"#,
];

#[test]
fn a_strictly_serializable_history_passes() {
    let (code, out) = check("check-valid", VALID, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("valid; ") && out.contains("anomalies: none"),
        "{out}"
    );
}

#[test]
fn a_g1c_cycle_fails_and_is_named() {
    let (code, out) = check("check-g1c", G1C, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("INVALID") && out.contains("G1c"), "{out}");
    let (code, out) = check("check-g1c-json", G1C, &["--json"]);
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(report["valid"], false);
    assert!(
        report["anomaly_types"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "G1c"),
        "{report}"
    );
}

#[test]
fn an_aborted_read_fails() {
    let (code, out) = check("check-g1a", G1A, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("G1a"), "{out}");
}

#[test]
fn a_file_that_is_no_history_is_an_error() {
    let (code, out) = check("check-garbage", &["not json"], &[]);
    assert_eq!(code, 3, "{out}");
}
