//! ferrotx's administrative commands (FERROTX ...), answered from the node's own state on
//! a short-lived thread of their own: they walk whole tables, which neither the event
//! loop nor a worker may spend its time on.
//!
//! `FERROTX COPIES` replies an array with one entry per partition copy the node holds in
//! the last view its workers switched to, by partition; each entry is a map (a flat
//! array of names and values in RESP2):
//!
//! - `node`: this node's id;
//! - `partition`: the partition;
//! - `role`: `primary`, `backup`, `filling` (a new backup being copied from its primary,
//!   data recovery) or `filled` (copied whole, not yet counted by a view);
//! - `view`: the view the role is from;
//! - `tables`: one map per table of the schema: `table` (its id), `name`, `digest` (16
//!   hexadecimal digits: a sum of per-object hashes of key, version and value, over the
//!   objects present) and `objects` (how many are present).
//!
//! Copies holding the same objects at the same versions have equal digests on any node,
//! so on a quiet cluster every copy of a partition must report its primary's.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};

use ferrotx_node::{CopyDigest, CopyDigests, NodeHandle};
use ferrotx_redis_exec::WorkResult;
use ferrotx_resp::{AdminRequest, Reply};

use crate::inbox::Responder;

/// Answers `request` for the node of `node` on a new thread, and sends the reply through
/// `responder`. Never blocks the caller; a thread that cannot start, or a panic while
/// answering, is an error reply.
pub(crate) fn answer(node: &NodeHandle, request: AdminRequest, responder: Responder) {
    // The responder stays reachable here until the thread takes it, so a thread that
    // does not start still answers (dropped unsent, it would say the node is stopping).
    let slot = Arc::new(Mutex::new(Some(responder)));
    let theirs = slot.clone();
    let node = node.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("ferrotx-admin-{}", node.id()))
        .spawn(move || {
            let reply = std::panic::catch_unwind(AssertUnwindSafe(|| reply(&node, request)))
                .unwrap_or_else(|panic| {
                    let why = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Reply::error(format!("ERR ferrotx: {} failed: {why}", name(request)))
                });
            send(&theirs, reply);
        });
    if let Err(error) = spawned {
        let message = format!(
            "ERR ferrotx: {} could not start a thread: {error}",
            name(request)
        );
        send(&slot, Reply::error(message));
    }
}

fn send(slot: &Mutex<Option<Responder>>, reply: Reply) {
    let responder = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(responder) = responder {
        responder.send(WorkResult::Admin(reply));
    }
}

fn name(request: AdminRequest) -> &'static str {
    match request {
        AdminRequest::Copies => "FERROTX COPIES",
    }
}

/// The reply to `request` (walks the node's tables: not on the event loop).
pub(crate) fn reply(node: &NodeHandle, request: AdminRequest) -> Reply {
    match request {
        AdminRequest::Copies => match node.copy_digests() {
            Ok(report) => copies_reply(node, &report),
            Err(error) => Reply::error(format!("ERR ferrotx: FERROTX COPIES: {error}")),
        },
    }
}

/// FERROTX COPIES's reply for `report`, of the node of `node` (see the module's docs).
pub(crate) fn copies_reply(node: &NodeHandle, report: &CopyDigests) -> Reply {
    let entries = report
        .copies
        .iter()
        .map(|copy| copy_entry(node, report.view, copy))
        .collect();
    Reply::Array(entries)
}

fn copy_entry(node: &NodeHandle, view: u64, copy: &CopyDigest) -> Reply {
    let config = node.config();
    let tables = copy
        .tables
        .iter()
        .map(|t| {
            let name = config
                .tables()
                .iter()
                .find(|spec| spec.id == t.table)
                .map_or_else(String::new, |spec| spec.name.clone());
            Reply::Map(vec![
                (field("table"), Reply::Integer(i64::from(t.table.0))),
                (field("name"), Reply::bulk(name)),
                (field("digest"), Reply::bulk(format!("{:016x}", t.digest))),
                (field("objects"), integer(t.objects as u64)),
            ])
        })
        .collect();
    Reply::Map(vec![
        (field("node"), Reply::Integer(i64::from(node.id()))),
        (
            field("partition"),
            Reply::Integer(i64::from(copy.partition)),
        ),
        (field("role"), Reply::bulk_static(copy.role.name())),
        (field("view"), integer(view)),
        (field("tables"), Reply::Array(tables)),
    ])
}

fn field(name: &'static str) -> Reply {
    Reply::bulk_static(name)
}

fn integer(n: u64) -> Reply {
    Reply::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use ferrotx_cluster::Configuration;
    use ferrotx_node::LocalCluster;
    use ferrotx_store::TableSpec;

    use super::*;

    #[test]
    fn a_stopped_node_is_an_error_reply() {
        let config = Configuration::local(1, 1, 1, 2, 52_000).unwrap();
        let cluster = LocalCluster::start(config, vec![TableSpec::fixed(1, "kv", 8)]);
        let handle = cluster.handle(0);
        let Reply::Array(entries) = reply(&handle, AdminRequest::Copies) else {
            panic!("an array");
        };
        assert_eq!(entries.len(), 2, "one entry per partition");
        cluster.stop();
        assert_eq!(
            reply(&handle, AdminRequest::Copies),
            Reply::error("ERR ferrotx: FERROTX COPIES: node 0 has stopped")
        );
    }
}
