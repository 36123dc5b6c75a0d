//! The replies of COMMAND, COMMAND COUNT, COMMAND INFO and COMMAND DOCS.
//!
//! COMMAND INFO's ten fields are Redis 7's (`addReplyCommandInfo`). COMMAND DOCS gives
//! each command's summary, since, group and complexity (and its subcommands): enough for
//! redis-cli's help, which reads those fields, but without Redis's `arguments` and
//! `history` entries, so the replies for commands that have those differ from Redis's.

use super::table::{COMMANDS, CommandSpec, KeySpec, lookup_by_name};
use crate::reply::Reply;

/// COMMAND: every command's details.
pub fn all_commands() -> Reply {
    Reply::Array(COMMANDS.iter().map(info).collect())
}

/// COMMAND COUNT: how many (top-level) commands there are.
pub fn count() -> Reply {
    Reply::Integer(i64::try_from(COMMANDS.len()).expect("a small table"))
}

/// COMMAND INFO `names`: each named command's details, or a null for an unknown name;
/// every command's if no name is given.
pub fn info_of(names: &[Vec<u8>]) -> Reply {
    if names.is_empty() {
        return all_commands();
    }
    Reply::Array(
        names
            .iter()
            .map(|name| lookup_by_name(name).map_or(Reply::Null, info))
            .collect(),
    )
}

/// COMMAND DOCS `names`: a map from each known command's full name to its documentation
/// (unknown names are left out); every command's if no name is given.
pub fn docs_of(names: &[Vec<u8>]) -> Reply {
    let specs: Vec<&CommandSpec> = if names.is_empty() {
        COMMANDS.iter().collect()
    } else {
        names
            .iter()
            .filter_map(|name| lookup_by_name(name))
            .collect()
    };
    Reply::Map(
        specs
            .into_iter()
            .map(|spec| (Reply::bulk_static(spec.name), docs(spec)))
            .collect(),
    )
}

/// One command's details: name, arity, flags, first key, last key, step, ACL
/// categories, tips, key specifications, subcommands.
pub fn info(spec: &CommandSpec) -> Reply {
    let (first, last, step) = spec.key_positions();
    Reply::Array(vec![
        Reply::bulk_static(spec.name),
        Reply::Integer(i64::from(spec.arity)),
        Reply::Set(spec.flags.names().map(Reply::simple_static).collect()),
        Reply::Integer(first),
        Reply::Integer(last),
        Reply::Integer(step),
        Reply::Set(
            spec.acl_categories
                .iter()
                .map(|category| Reply::simple_static(category))
                .collect(),
        ),
        Reply::Set(
            spec.tips
                .iter()
                .map(|tip| Reply::bulk_static(tip))
                .collect(),
        ),
        Reply::Set(spec.key_specs.iter().map(key_spec).collect()),
        if spec.subcommands.is_empty() {
            // Redis answers an empty set here, and an array when there are subcommands.
            Reply::Set(Vec::new())
        } else {
            Reply::Array(spec.subcommands.iter().map(info).collect())
        },
    ])
}

/// One key specification as COMMAND INFO shows it.
fn key_spec(spec: &KeySpec) -> Reply {
    let mut fields = Vec::with_capacity(4);
    if let Some(notes) = spec.notes {
        fields.push((Reply::bulk_static("notes"), Reply::bulk_static(notes)));
    }
    fields.push((
        Reply::bulk_static("flags"),
        Reply::Set(
            spec.flags
                .iter()
                .map(|flag| Reply::simple_static(flag))
                .collect(),
        ),
    ));
    fields.push((
        Reply::bulk_static("begin_search"),
        Reply::Map(vec![
            (Reply::bulk_static("type"), Reply::bulk_static("index")),
            (
                Reply::bulk_static("spec"),
                Reply::Map(vec![(
                    Reply::bulk_static("index"),
                    Reply::Integer(spec.begin_index),
                )]),
            ),
        ]),
    ));
    fields.push((
        Reply::bulk_static("find_keys"),
        Reply::Map(vec![
            (Reply::bulk_static("type"), Reply::bulk_static("range")),
            (
                Reply::bulk_static("spec"),
                Reply::Map(vec![
                    (Reply::bulk_static("lastkey"), Reply::Integer(spec.last_key)),
                    (Reply::bulk_static("keystep"), Reply::Integer(spec.key_step)),
                    (Reply::bulk_static("limit"), Reply::Integer(spec.limit)),
                ]),
            ),
        ]),
    ));
    Reply::Map(fields)
}

/// One command's documentation.
fn docs(spec: &CommandSpec) -> Reply {
    let mut fields = vec![
        (
            Reply::bulk_static("summary"),
            Reply::bulk_static(spec.docs.summary),
        ),
        (
            Reply::bulk_static("since"),
            Reply::bulk_static(spec.docs.since),
        ),
        (
            Reply::bulk_static("group"),
            Reply::bulk_static(spec.docs.group),
        ),
        (
            Reply::bulk_static("complexity"),
            Reply::bulk_static(spec.docs.complexity),
        ),
    ];
    if !spec.subcommands.is_empty() {
        fields.push((
            Reply::bulk_static("subcommands"),
            Reply::Map(
                spec.subcommands
                    .iter()
                    .map(|sub| (Reply::bulk_static(sub.name), docs(sub)))
                    .collect(),
            ),
        ));
    }
    Reply::Map(fields)
}
