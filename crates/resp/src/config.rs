//! CONFIG GET and CONFIG SET over the parameters a ferrotx node has at run time.
//!
//! The parameters are Redis's names for what ferrotx has: `maxmemory` (the node's memory
//! limit in bytes, 0 for none; settable, with Redis's units: `100mb`, `1gb`, `512k`)
//! and `maxmemory-policy` (`noeviction`, the only policy: past the limit, writes that
//! would grow memory are refused with `-OOM`, and nothing is evicted). CONFIG GET takes
//! glob patterns, as Redis does; CONFIG SET sets every pair or none.

use ferrotx_store::parse_memory;

use crate::glob::matches_nocase;
use crate::protocol::Args;
use crate::reply::Reply;

/// The only `maxmemory-policy`.
pub const MAXMEMORY_POLICY: &str = "noeviction";

/// CONFIG GET or CONFIG SET, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigRequest {
    /// CONFIG GET pattern [pattern ...].
    Get(Vec<Vec<u8>>),
    /// CONFIG SET parameter value [parameter value ...].
    Set(Vec<(Vec<u8>, Vec<u8>)>),
}

/// The node's values of the parameters, read for GET and changed by SET.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConfigValues {
    /// The memory limit in bytes; 0: none.
    pub maxmemory: u64,
}

/// The parameters, in the order CONFIG GET lists them.
const PARAMETERS: [&str; 2] = ["maxmemory", "maxmemory-policy"];

impl ConfigRequest {
    /// CONFIG GET's arguments (after `CONFIG GET`); the arity check left at least one.
    pub(crate) fn get(args: Args<'_>) -> Self {
        Self::Get(args.to_vecs_from(2))
    }

    /// CONFIG SET's arguments: pairs, or Redis's error for a parameter without a value.
    pub(crate) fn set(args: Args<'_>) -> Result<Self, Reply> {
        let rest = args.to_vecs_from(2);
        if !rest.len().is_multiple_of(2) {
            return Err(Reply::error_static("ERR syntax error"));
        }
        let mut pairs = Vec::with_capacity(rest.len() / 2);
        let mut rest = rest.into_iter();
        while let (Some(name), Some(value)) = (rest.next(), rest.next()) {
            pairs.push((name, value));
        }
        Ok(Self::Set(pairs))
    }

    /// The reply, reading `values` for GET; for SET, checks every pair, then (all good)
    /// changes `values`, as Redis sets all or nothing.
    pub fn reply(&self, values: &mut ConfigValues) -> Reply {
        match self {
            Self::Get(patterns) => {
                let mut pairs = Vec::new();
                for name in PARAMETERS {
                    if patterns.iter().any(|p| matches_nocase(p, name.as_bytes())) {
                        pairs.push((
                            Reply::bulk(name.as_bytes().to_vec()),
                            Reply::bulk(value_of(name, values).into_bytes()),
                        ));
                    }
                }
                Reply::Map(pairs)
            }
            Self::Set(pairs) => {
                let mut new = *values;
                for (i, (name, value)) in pairs.iter().enumerate() {
                    let lower = name.to_ascii_lowercase();
                    if pairs[..i]
                        .iter()
                        .any(|(other, _)| other.eq_ignore_ascii_case(&lower))
                    {
                        return Reply::error(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{}') - \
                             duplicate parameter",
                            String::from_utf8_lossy(name)
                        ));
                    }
                    let failed = |why: &str| {
                        Reply::error(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{}') - {why}",
                            String::from_utf8_lossy(name)
                        ))
                    };
                    match &lower[..] {
                        b"maxmemory" => match parse_memory(value) {
                            Some(bytes) => new.maxmemory = bytes,
                            None => return failed("argument must be a memory value"),
                        },
                        b"maxmemory-policy" => {
                            if !value.eq_ignore_ascii_case(MAXMEMORY_POLICY.as_bytes()) {
                                return failed(
                                    "ferrotx has one policy, noeviction (it never evicts keys)",
                                );
                            }
                        }
                        _ => {
                            return Reply::error(format!(
                                "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                                String::from_utf8_lossy(name)
                            ));
                        }
                    }
                }
                *values = new;
                Reply::ok()
            }
        }
    }
}

fn value_of(name: &str, values: &ConfigValues) -> String {
    match name {
        "maxmemory" => values.maxmemory.to_string(),
        "maxmemory-policy" => MAXMEMORY_POLICY.to_owned(),
        _ => unreachable!("a parameter of PARAMETERS"),
    }
}

/// Bytes as Redis's INFO writes them beside the exact figure (`bytesToHuman`): `512B`,
/// `1.50K`, `2.00M`, `3.25G`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "P"),
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size {
            return format!("{:.2}{unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_in_human_form() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(3 << 20), "3.00M");
        assert_eq!(human_bytes(5 << 30), "5.00G");
    }

    fn get(values: &mut ConfigValues, patterns: &[&str]) -> Reply {
        ConfigRequest::Get(patterns.iter().map(|p| p.as_bytes().to_vec()).collect()).reply(values)
    }

    fn set(values: &mut ConfigValues, pairs: &[(&str, &str)]) -> Reply {
        ConfigRequest::Set(
            pairs
                .iter()
                .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
        )
        .reply(values)
    }

    #[test]
    fn get_matches_patterns_and_set_changes_all_or_nothing() {
        let mut values = ConfigValues { maxmemory: 0 };
        let pair = |n: &str, v: &str| {
            (
                Reply::bulk(n.as_bytes().to_vec()),
                Reply::bulk(v.as_bytes().to_vec()),
            )
        };
        assert_eq!(
            get(&mut values, &["maxmemory"]),
            Reply::Map(vec![pair("maxmemory", "0")])
        );
        assert_eq!(
            get(&mut values, &["MAXMEMORY*"]),
            Reply::Map(vec![
                pair("maxmemory", "0"),
                pair("maxmemory-policy", "noeviction")
            ])
        );
        assert_eq!(get(&mut values, &["save"]), Reply::Map(vec![]));
        assert_eq!(set(&mut values, &[("maxmemory", "10mb")]), Reply::ok());
        assert_eq!(values.maxmemory, 10 << 20);
        // One bad pair: nothing changes.
        let refused = set(
            &mut values,
            &[("maxmemory", "1"), ("maxmemory-policy", "allkeys-lru")],
        );
        assert!(
            refused
                .error_message()
                .unwrap()
                .starts_with(b"ERR CONFIG SET failed"),
            "{refused:?}"
        );
        assert_eq!(values.maxmemory, 10 << 20);
        let unknown = set(&mut values, &[("save", "")]);
        assert!(
            unknown
                .error_message()
                .unwrap()
                .starts_with(b"ERR Unknown option"),
            "{unknown:?}"
        );
        let bad = set(&mut values, &[("maxmemory", "lots")]);
        assert!(bad.error_message().is_some());
        let twice = set(&mut values, &[("maxmemory", "1"), ("MAXMEMORY", "2")]);
        assert!(twice.error_message().is_some());
        assert_eq!(values.maxmemory, 10 << 20);
        assert_eq!(
            set(
                &mut values,
                &[("maxmemory-policy", "NOEVICTION"), ("maxmemory", "0")]
            ),
            Reply::ok()
        );
        assert_eq!(values.maxmemory, 0);
    }
}
