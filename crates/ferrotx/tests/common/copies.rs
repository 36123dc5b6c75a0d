//! Every copy equal: `FERROTX COPIES` on every node, once the cluster is back at full
//! strength.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrotx_redis_exec::RespValue;
use serde_json::Value;

use super::client::{Conn, cmd, text};
use super::nodes::{Nodes, full_strength, settled_members};

/// Longest the copies may take to agree once the cluster is back at full strength and the
/// load has stopped: a backup applies a coordinator's last writes a few milliseconds after
/// the coordinator goes quiet.
const COPIES_AGREE_DEADLINE: Duration = Duration::from_secs(5);

/// One table of a copy, as FERROTX COPIES reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TableCopy {
    table: i64,
    name: String,
    digest: String,
    objects: i64,
}

/// One copy a node reports.
#[derive(Clone, Debug)]
struct CopyReport {
    node: u64,
    partition: u64,
    role: String,
    view: u64,
    tables: Vec<TableCopy>,
}

/// The value of `name` in a RESP2 map (a flat array of names and values).
fn map_field<'a>(pairs: &'a [RespValue], name: &str) -> Result<&'a RespValue, String> {
    pairs
        .chunks(2)
        .find(|pair| pair[0].as_bytes() == Some(name.as_bytes()))
        .and_then(|pair| pair.get(1))
        .ok_or_else(|| format!("no {name:?} in {pairs:?}"))
}

fn field_integer(pairs: &[RespValue], name: &str) -> Result<i64, String> {
    let value = map_field(pairs, name)?;
    value
        .as_integer()
        .ok_or_else(|| format!("{name} is {value:?}"))
}

fn field_text(pairs: &[RespValue], name: &str) -> Result<String, String> {
    let value = map_field(pairs, name)?;
    value
        .as_bytes()
        .map(text)
        .ok_or_else(|| format!("{name} is {value:?}"))
}

/// FERROTX COPIES of the node at `addr`: the copies it holds.
fn copies_of(addr: SocketAddr) -> Result<Vec<CopyReport>, String> {
    let mut conn = Conn::open(addr).ok_or("no connection")?;
    let reply = conn
        .call(cmd(&[&"FERROTX", &"COPIES"]))
        .map_err(|e| e.to_string())?;
    let RespValue::Array(entries) = reply else {
        return Err(format!("FERROTX COPIES answered {reply:?}"));
    };
    entries
        .iter()
        .map(|entry| {
            let pairs = entry.as_array().ok_or(format!("an entry {entry:?}"))?;
            let tables = map_field(pairs, "tables")?
                .as_array()
                .ok_or("tables is not an array")?
                .iter()
                .map(|t| {
                    let t = t.as_array().ok_or(format!("a table {t:?}"))?;
                    Ok(TableCopy {
                        table: field_integer(t, "table")?,
                        name: field_text(t, "name")?,
                        digest: field_text(t, "digest")?,
                        objects: field_integer(t, "objects")?,
                    })
                })
                .collect::<Result<_, String>>()?;
            Ok(CopyReport {
                node: field_integer(pairs, "node")? as u64,
                partition: field_integer(pairs, "partition")? as u64,
                role: field_text(pairs, "role")?,
                view: field_integer(pairs, "view")? as u64,
                tables,
            })
        })
        .collect()
}

/// What the members of status `s` (at full strength) report with FERROTX COPIES, checked
/// against the view's copies, and the copies of each partition against each other: a
/// summary if every copy equals its primary, else what differs.
fn compare_copies(s: &Value, addrs: &[SocketAddr]) -> Result<String, Vec<String>> {
    let view = s["configuration"].as_u64().expect("a view");
    let expected: Vec<Vec<u64>> = serde_json::from_value(s["copies"].clone()).expect("copies");
    let mut differences = Vec::new();
    let mut held: BTreeMap<u64, Vec<CopyReport>> = BTreeMap::new();
    for node in settled_members(s).expect("settled") {
        match copies_of(addrs[node as usize]) {
            Ok(copies) => {
                for copy in copies {
                    if copy.node != node || copy.view != view {
                        differences.push(format!(
                            "node {node} reports a copy of node {} in view {} (the cluster is at \
                             view {view})",
                            copy.node, copy.view
                        ));
                    }
                    held.entry(copy.partition).or_default().push(copy);
                }
            }
            Err(e) => differences.push(format!("node {node}: FERROTX COPIES: {e}")),
        }
    }
    if !differences.is_empty() {
        return Err(differences);
    }
    let mut objects: BTreeMap<String, i64> = BTreeMap::new();
    for (p, nodes) in expected.iter().enumerate() {
        let copies = held.remove(&(p as u64)).unwrap_or_default();
        let describe = || -> String {
            copies
                .iter()
                .map(|c| {
                    let tables: Vec<String> = c
                        .tables
                        .iter()
                        .map(|t| format!("{} {} ({} objects)", t.name, t.digest, t.objects))
                        .collect();
                    format!("node {} ({}): {}", c.node, c.role, tables.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let holders: BTreeSet<u64> = copies.iter().map(|c| c.node).collect();
        let roles_right = copies.iter().all(|c| {
            let primary = nodes.first() == Some(&c.node);
            c.role == if primary { "primary" } else { "backup" }
        });
        if holders != nodes.iter().copied().collect() || !roles_right {
            differences.push(format!(
                "partition {p}: the view has its copies on {nodes:?} (primary first), the nodes \
                 report {}",
                describe()
            ));
            continue;
        }
        if copies.windows(2).any(|w| w[0].tables != w[1].tables) {
            differences.push(format!("partition {p}: copies differ: {}", describe()));
            continue;
        }
        if let Some(first) = copies.first() {
            for t in &first.tables {
                *objects.entry(t.name.clone()).or_default() += t.objects;
            }
        }
    }
    for (p, copies) in held {
        differences.push(format!(
            "partition {p}: reported by {:?}, not a partition of the view",
            copies.iter().map(|c| c.node).collect::<Vec<_>>()
        ));
    }
    if !differences.is_empty() {
        return Err(differences);
    }
    let objects: Vec<String> = objects
        .iter()
        .map(|(name, n)| format!("{n} objects in {name}"))
        .collect();
    Ok(format!(
        "view {view}: {} partitions, each with {} equal copies ({})",
        expected.len(),
        expected.first().map_or(0, Vec::len),
        objects.join(", ")
    ))
}

/// Waits (up to `MEMBERSHIP_DEADLINE`) until the cluster is back at full strength with
/// `members` members, then until FERROTX COPIES of every member shows every copy of every
/// partition equal to its primary, for at most `COPIES_AGREE_DEADLINE` once at full
/// strength; panics with what differs if they do not agree. Returns a summary.
pub fn check_copies_equal(nodes: &mut Nodes, members: usize) -> String {
    let started = Instant::now();
    let mut agree_by: Option<Instant> = None;
    let addrs = nodes.addrs.clone();
    loop {
        let s = nodes.wait_status(
            "full strength (every partition's copies, none filling)",
            |s| full_strength(s, members),
        );
        let agree_by = *agree_by.get_or_insert_with(|| Instant::now() + COPIES_AGREE_DEADLINE);
        match compare_copies(&s, &addrs) {
            Ok(summary) => {
                return format!(
                    "{summary}; checked in {:.2} s",
                    started.elapsed().as_secs_f64()
                );
            }
            Err(differences) if Instant::now() >= agree_by => panic!(
                "the copies are not all equal {COPIES_AGREE_DEADLINE:?} after the cluster was back \
                 at full strength:\n  {}\nstatus: {s}",
                differences.join("\n  ")
            ),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
