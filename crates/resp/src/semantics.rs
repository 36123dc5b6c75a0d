//! The data commands' semantics, run against an [`Overlay`] of the values a transaction
//! read.
//!
//! A transaction of one command, or of a whole MULTI/EXEC block, runs in two phases so
//! that the node reads all its keys in one round of reads:
//!
//! 1. [`DataCommand::keys`] (or [`crate::Plan::keys_to_read`] for a block) names every
//!    key the commands touch; the node reads them all in the transaction and fills an
//!    [`Overlay`] with what it found ([`Overlay::insert_read`], or
//!    [`Overlay::insert_stored`] with the raw stored bytes);
//! 2. [`apply`] runs each command in order against the overlay, which records the writes,
//!    so a later command sees an earlier one's writes (`SET a 1` then `INCR a` gives 2);
//!    the node then writes [`Overlay::writes`] and commits.
//!
//! The semantics are Redis 7's for strings and expiry. ferrotx stores only strings, so
//! WRONGTYPE never arises. A key whose store key holds another Redis key (a hash
//! collision, practically impossible) fails any command that touches it, before the
//! command changes anything.
//!
//! Expiry: the overlay knows the time the transaction runs at (`now_ms`, Unix time in
//! milliseconds, the node's wall clock). A key read with a deadline at or before it is
//! absent for every command; a plan that writes deletes such keys it touched, unless a
//! command wrote them ([`Overlay::set_remove_expired`]). Commands that replace a value
//! (SET without KEEPTTL, GETSET, MSET, MSETNX, SETNX) clear its expiry; those that edit
//! it in place (INCR and its kin, APPEND, SET KEEPTTL) keep it.

use std::collections::BTreeMap;

use crate::command::{DataCommand, GetExExpiry, NOT_AN_INTEGER, SetCondition, SetExpiry};
use crate::keys::{self, COLLISION_ERROR, DecodeError, Lookup};
use crate::number::{i64_text, parse_i64};
use crate::reply::Reply;

/// The reply to a write whose stored value would be over the store's limit (Redis's
/// message for strings over `proto-max-bulk-len`).
pub const TOO_LARGE_ERROR: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// Most bytes the replies of one plan (a command, a pipelined run, or a MULTI block) may
/// hold. A plan's replies are built whole before the first is sent, and the client
/// chooses how many values they carry: an MGET naming one 1 MiB key a million times
/// asks a node for 1 TiB with a request of 10 MB. 64 MiB is also the default limit on a
/// request (`max_request_bytes`), so a connection's buffers stay within a few times that
/// in both directions; it takes 63 values of 1 MiB.
pub const PLAN_REPLY_BYTES_MAX: usize = 64 << 20;

/// The reply to a command whose values would take its plan's replies past
/// [`PLAN_REPLY_BYTES_MAX`]: it does not run (it changes nothing); the commands before it
/// do.
pub const REPLY_TOO_LARGE_ERROR: &str = "ERR ferrotx: the values asked for would make a reply \
     of over 64 MiB (the replies of one command, pipelined run or MULTI block); ask for \
     fewer at a time";

/// Bytes a reply carrying `key`'s value takes at most (RESP2 or RESP3): the value, its
/// length and line ends; a missing key's null.
fn value_reply_bytes(overlay: &Overlay, key: &[u8]) -> usize {
    overlay.value(key).map_or(5, |value| value.len() + 16)
}

/// Bytes of values `command`'s reply would carry if it ran now against `overlay` (at
/// most; before the command changes anything): the values of GET and its kin, and
/// every key's of MGET. Other replies (integers, statuses, errors) are a few dozen bytes
/// and count as none. Panics if a key the command looks at was not read.
pub fn reply_bytes_max(command: &DataCommand, overlay: &Overlay) -> usize {
    match command {
        DataCommand::Get { key }
        | DataCommand::GetEx { key, .. }
        | DataCommand::GetSet { key, .. }
        | DataCommand::GetDel { key }
        | DataCommand::Set { key, get: true, .. } => value_reply_bytes(overlay, key),
        DataCommand::MGet { keys } => keys
            .iter()
            .map(|key| value_reply_bytes(overlay, key))
            .fold(16, usize::saturating_add),
        _ => 0,
    }
}

/// The keys a command touches, in argument order (repeats included).
#[derive(Clone, Debug)]
pub enum Keys<'a> {
    /// One key (or none left).
    One(Option<&'a [u8]>),
    /// A list of keys.
    Many(std::slice::Iter<'a, Vec<u8>>),
    /// The keys of key and value pairs.
    Pairs(std::slice::Iter<'a, (Vec<u8>, Vec<u8>)>),
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match self {
            Self::One(key) => key.take(),
            Self::Many(keys) => keys.next().map(Vec::as_slice),
            Self::Pairs(pairs) => pairs.next().map(|(key, _)| key.as_slice()),
        }
    }
}

impl DataCommand {
    /// Every key the command reads or writes (the node reads them all before
    /// [`apply`]).
    pub fn keys(&self) -> Keys<'_> {
        match self {
            Self::Get { key }
            | Self::Set { key, .. }
            | Self::SetNx { key, .. }
            | Self::GetSet { key, .. }
            | Self::GetDel { key }
            | Self::GetEx { key, .. }
            | Self::IncrBy { key, .. }
            | Self::Append { key, .. }
            | Self::Strlen { key }
            | Self::Type { key }
            | Self::Expire { key, .. }
            | Self::Ttl { key, .. }
            | Self::Persist { key } => Keys::One(Some(key)),
            Self::Del { keys } | Self::Exists { keys } | Self::MGet { keys } => {
                Keys::Many(keys.iter())
            }
            Self::MSet { pairs } | Self::MSetNx { pairs } => Keys::Pairs(pairs.iter()),
        }
    }

    /// True if the command writes its keys without looking at them (SET without NX, XX,
    /// GET or KEEPTTL, SETEX and PSETEX; MSET): a plan in which every command on a key is
    /// such a write need not read the key ([`Overlay::insert_unread`]).
    pub fn writes_blindly(&self) -> bool {
        match self {
            Self::Set {
                condition: SetCondition::Always,
                get: false,
                expiry,
                ..
            } => *expiry != SetExpiry::Keep,
            Self::MSet { .. } => true,
            _ => false,
        }
    }

    /// True if the command never writes (GET, EXISTS, STRLEN, TYPE, MGET, TTL, PTTL,
    /// EXPIRETIME, PEXPIRETIME).
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Self::Get { .. }
                | Self::Exists { .. }
                | Self::Strlen { .. }
                | Self::Type { .. }
                | Self::MGet { .. }
                | Self::Ttl { .. }
        )
    }
}

/// Every key `command` reads or writes, in argument order (repeats included): phase one,
/// the keys the node reads before [`apply`]. The same as [`DataCommand::keys`].
pub fn keys_to_read(command: &DataCommand) -> Keys<'_> {
    command.keys()
}

/// A live value and its deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stored {
    value: Vec<u8>,
    /// Unix time in milliseconds; `None`: no expiry.
    expires_at_ms: Option<u64>,
}

/// What a key held when the transaction read it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Read {
    Absent,
    Value(Stored),
    /// Stored, but its deadline had passed: absent for the commands.
    Expired,
    /// Another Redis key with the same store key.
    Collision,
    /// Not read: the plan only writes it blindly ([`DataCommand::writes_blindly`]).
    Unread,
}

/// One key of the overlay.
#[derive(Clone, Debug)]
struct Entry {
    read: Read,
    /// The value written by the commands so far (`Some(None)`: deleted), if any.
    written: Option<Option<Stored>>,
}

impl Entry {
    /// The key's value and deadline now.
    fn stored(&self) -> Option<&Stored> {
        match &self.written {
            Some(written) => written.as_ref(),
            None => match &self.read {
                Read::Absent | Read::Collision | Read::Expired => None,
                Read::Value(stored) => Some(stored),
                Read::Unread => panic!("a command looked at a key its plan did not read"),
            },
        }
    }
}

/// One write of a transaction's final write set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write<'a> {
    /// The Redis key.
    pub key: &'a [u8],
    /// Its new value; `None` deletes it.
    pub value: Option<&'a [u8]>,
    /// The new value's deadline (Unix time in milliseconds), if it expires.
    pub expires_at_ms: Option<u64>,
}

/// The values one transaction read, and the writes its commands made on top of them.
///
/// Fill it with every key of the commands before applying any ([`Overlay::insert_read`]
/// or [`Overlay::insert_stored`]); applying a command to a key that was not read is a
/// bug and panics.
#[derive(Clone, Debug)]
pub struct Overlay {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// Largest stored value (Redis key and value encoded, [`keys::encoded_len`]) a write
    /// may make: the store's value limit.
    stored_bytes_max: usize,
    /// The time the commands run at: Unix time in milliseconds.
    now_ms: u64,
    /// Delete keys read expired that no command wrote ([`Overlay::set_remove_expired`]).
    remove_expired: bool,
}

impl Overlay {
    /// An empty overlay whose writes may store at most `stored_bytes_max` bytes per key
    /// (the store's value limit, 1 MiB in ferrotx), for commands running at `now_ms`
    /// (Unix time in milliseconds: keys whose deadline is at or before it are expired,
    /// and relative expiry times count from it).
    pub fn new(stored_bytes_max: usize, now_ms: u64) -> Self {
        Self {
            entries: BTreeMap::new(),
            stored_bytes_max,
            now_ms,
            remove_expired: false,
        }
    }

    /// The time the commands run at (Unix time in milliseconds).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// If `remove`, [`Overlay::writes`] deletes every key read expired that no command
    /// wrote, so that expired keys go when a writing transaction touches them
    /// ([`crate::Plan::apply`] sets it for plans that may write; a read-only
    /// transaction must not).
    pub fn set_remove_expired(&mut self, remove: bool) {
        self.remove_expired = remove;
    }

    /// Records that `key` held `value` (`None`: absent), without expiry, when read.
    /// Panics if `key` was recorded already.
    pub fn insert_read(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.insert_read_expiring(key, value.map(|value| (value, None)));
    }

    /// Records that `key` held `value` with its deadline (`None`: absent) when read: a
    /// deadline at or before [`Overlay::now_ms`] makes it expired. Panics if `key` was
    /// recorded already.
    pub fn insert_read_expiring(&mut self, key: Vec<u8>, value: Option<(Vec<u8>, Option<u64>)>) {
        let read = match value {
            None => Read::Absent,
            Some((_, Some(deadline))) if deadline <= self.now_ms => Read::Expired,
            Some((value, expires_at_ms)) => Read::Value(Stored {
                value,
                expires_at_ms,
            }),
        };
        self.insert(key, read);
    }

    /// Records that the plan writes `key` without reading it: every command on it writes
    /// blindly ([`DataCommand::writes_blindly`], [`crate::Plan::keys_written_unread`]).
    /// Its stored value is replaced whatever it held, even another Redis key of the same
    /// store key (a 128-bit hash collision). Panics if `key` was recorded already.
    pub fn insert_unread(&mut self, key: Vec<u8>) {
        self.insert(key, Read::Unread);
    }

    /// Records that `key`'s store key held another Redis key (a hash collision): every
    /// command on `key` fails with "ERR ferrotx key hash collision".
    pub fn insert_collision(&mut self, key: Vec<u8>) {
        self.insert(key, Read::Collision);
    }

    /// Records what was read under `key`'s store key ([`keys::store_key`]): `stored` is
    /// the raw stored value, `None` if absent. Fails, recording nothing, if the stored
    /// value cannot be decoded.
    pub fn insert_stored(
        &mut self,
        key: Vec<u8>,
        stored: Option<&[u8]>,
    ) -> Result<(), DecodeError> {
        let read = match keys::lookup(&key, stored, self.now_ms)? {
            Lookup::Absent => Read::Absent,
            Lookup::Value {
                value,
                expires_at_ms,
            } => Read::Value(Stored {
                value: value.to_vec(),
                expires_at_ms,
            }),
            Lookup::Expired => Read::Expired,
            Lookup::Collision => Read::Collision,
        };
        self.insert(key, read);
        Ok(())
    }

    fn insert(&mut self, key: Vec<u8>, read: Read) {
        let previous = self.entries.insert(
            key,
            Entry {
                read,
                written: None,
            },
        );
        assert!(previous.is_none(), "a key read twice into one overlay");
    }

    /// True if `key` was read into the overlay.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.entries.contains_key(key)
    }

    /// `key`'s value now (after the writes so far); `None` if absent or expired. Panics
    /// if `key` was not read.
    pub fn value(&self, key: &[u8]) -> Option<&[u8]> {
        self.entry(key)
            .stored()
            .map(|stored| stored.value.as_slice())
    }

    /// `key`'s deadline now (Unix time in milliseconds); `None` if it has none or is
    /// absent. Panics if `key` was not read.
    pub fn expires_at_ms(&self, key: &[u8]) -> Option<u64> {
        self.entry(key)
            .stored()
            .and_then(|stored| stored.expires_at_ms)
    }

    /// The final write set, in key order: every key a command wrote, with its final
    /// value (`None`: delete), even a key absent when read and deleted in the end (a
    /// WATCH of it must see the write, as in Redis); and, if
    /// [`Overlay::set_remove_expired`], a delete of every key read expired that no
    /// command wrote. Write it all in the transaction, then commit.
    pub fn writes(&self) -> impl Iterator<Item = Write<'_>> + '_ {
        self.entries
            .iter()
            .filter_map(|(key, entry)| match &entry.written {
                Some(written) => Some(Write {
                    key,
                    value: written.as_ref().map(|stored| stored.value.as_slice()),
                    expires_at_ms: written.as_ref().and_then(|stored| stored.expires_at_ms),
                }),
                None if self.remove_expired && entry.read == Read::Expired => Some(Write {
                    key,
                    value: None,
                    expires_at_ms: None,
                }),
                None => None,
            })
    }

    /// The final write set in store form: each store key ([`keys::store_key`]) with the
    /// stored value to write ([`keys::encode_expiring`]), or `None` to delete.
    pub fn encoded_writes(
        &self,
    ) -> impl Iterator<Item = ([u8; keys::STORE_KEY_BYTES], Option<Vec<u8>>)> + '_ {
        self.writes().map(|write| {
            let stored = write.value.map(|value| {
                let mut stored = Vec::new();
                keys::encode_expiring(write.key, value, write.expires_at_ms, &mut stored);
                stored
            });
            (keys::store_key(write.key), stored)
        })
    }

    /// True if the transaction must commit writes ([`Overlay::writes`] is not empty).
    pub fn has_writes(&self) -> bool {
        self.writes().next().is_some()
    }

    /// What each key read held (before any command's writes), in key order; keys
    /// written unread are left out.
    pub fn reads(&self) -> impl Iterator<Item = (&[u8], Lookup<'_>)> + '_ {
        self.entries.iter().filter_map(|(key, entry)| {
            let read = match &entry.read {
                Read::Absent => Lookup::Absent,
                Read::Value(stored) => Lookup::Value {
                    value: &stored.value,
                    expires_at_ms: stored.expires_at_ms,
                },
                Read::Expired => Lookup::Expired,
                Read::Collision => Lookup::Collision,
                Read::Unread => return None,
            };
            Some((key.as_slice(), read))
        })
    }

    fn entry(&self, key: &[u8]) -> &Entry {
        self.entries
            .get(key)
            .expect("the node reads every key of a command before applying it")
    }

    fn entry_mut(&mut self, key: &[u8]) -> &mut Entry {
        self.entries
            .get_mut(key)
            .expect("the node reads every key of a command before applying it")
    }

    /// Sets `key` to `value`, expiring at `deadline_ms` if given; a deadline at or
    /// before now deletes the key instead (Redis sets it and deletes it at once).
    fn set(&mut self, key: &[u8], value: Vec<u8>, deadline_ms: Option<i64>) {
        let now = i64::try_from(self.now_ms).unwrap_or(i64::MAX);
        let written = match deadline_ms {
            None => Some(Stored {
                value,
                expires_at_ms: None,
            }),
            Some(deadline) if deadline <= now => None,
            Some(deadline) => Some(Stored {
                value,
                expires_at_ms: Some(deadline.unsigned_abs()),
            }),
        };
        self.entry_mut(key).written = Some(written);
    }

    /// Sets `key` to `value`, keeping its deadline.
    fn set_keeping_ttl(&mut self, key: &[u8], value: Vec<u8>) {
        let deadline = self.expires_at_ms(key).map(deadline_i64);
        self.set(key, value, deadline);
    }

    /// Deletes `key`, which exists.
    fn delete(&mut self, key: &[u8]) {
        debug_assert!(self.value(key).is_some());
        self.entry_mut(key).written = Some(None);
    }

    /// Gives the existing `key` the deadline `deadline_ms` (`None`: no expiry); one at
    /// or before now deletes it.
    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<i64>) {
        let value = self.value(key).expect("the key exists").to_vec();
        self.set(key, value, deadline_ms);
    }

    /// True if `key` holding `value_len` bytes, with a deadline if `expiring`, would fit
    /// in the store.
    fn fits(&self, key: &[u8], value_len: usize, expiring: bool) -> bool {
        keys::stored_len(key.len(), value_len, expiring) <= self.stored_bytes_max
    }

    /// The value of `key` as a GET reply.
    fn get_reply(&self, key: &[u8]) -> Reply {
        match self.value(key) {
            Some(value) => Reply::bulk(value),
            None => Reply::Null,
        }
    }
}

/// A stored deadline as the signed milliseconds commands compute with (stored deadlines
/// come from i64 ones).
fn deadline_i64(deadline: u64) -> i64 {
    i64::try_from(deadline).unwrap_or(i64::MAX)
}

/// Runs `command` against `overlay` and returns its reply (an error reply changes
/// nothing). Panics if one of its keys was not read into the overlay.
pub fn apply(command: &DataCommand, overlay: &mut Overlay) -> Reply {
    for key in command.keys() {
        if overlay.entry(key).read == Read::Collision {
            return Reply::error_static(COLLISION_ERROR);
        }
    }
    let now_ms = overlay.now_ms;
    match command {
        DataCommand::Get { key } => overlay.get_reply(key),
        DataCommand::Set {
            key,
            value,
            condition,
            get,
            expiry,
        } => {
            // Redis checks the expire time before anything else.
            let deadline = match expiry {
                SetExpiry::At(time) => match time.string_deadline(now_ms) {
                    Some(deadline) => Some(deadline),
                    None => return time.invalid(),
                },
                SetExpiry::Clear | SetExpiry::Keep => None,
            };
            let old = get.then(|| overlay.get_reply(key));
            // A plain SET never looks (its key may be unread).
            let refused = match condition {
                SetCondition::Always => false,
                SetCondition::IfAbsent => overlay.value(key).is_some(),
                SetCondition::IfPresent => overlay.value(key).is_none(),
            };
            if refused {
                // With GET, the old value is the reply whatever happens.
                return old.unwrap_or(Reply::Null);
            }
            let deadline = match expiry {
                SetExpiry::Keep => overlay.expires_at_ms(key).map(deadline_i64),
                SetExpiry::Clear | SetExpiry::At(_) => deadline,
            };
            if !overlay.fits(key, value.len(), deadline.is_some()) {
                return Reply::error_static(TOO_LARGE_ERROR);
            }
            overlay.set(key, value.clone(), deadline);
            old.unwrap_or_else(Reply::ok)
        }
        DataCommand::SetNx { key, value } => {
            if overlay.value(key).is_some() {
                return Reply::Integer(0);
            }
            if !overlay.fits(key, value.len(), false) {
                return Reply::error_static(TOO_LARGE_ERROR);
            }
            overlay.set(key, value.clone(), None);
            Reply::Integer(1)
        }
        DataCommand::GetSet { key, value } => {
            if !overlay.fits(key, value.len(), false) {
                return Reply::error_static(TOO_LARGE_ERROR);
            }
            let old = overlay.get_reply(key);
            overlay.set(key, value.clone(), None);
            old
        }
        DataCommand::GetDel { key } => {
            let old = overlay.get_reply(key);
            if overlay.value(key).is_some() {
                overlay.delete(key);
            }
            old
        }
        DataCommand::GetEx { key, expiry } => {
            let Some(value) = overlay.value(key) else {
                return Reply::Null;
            };
            let reply = Reply::bulk(value);
            match expiry {
                GetExExpiry::Unchanged => {}
                GetExExpiry::Persist => {
                    if overlay.expires_at_ms(key).is_some() {
                        overlay.set_deadline(key, None);
                    }
                }
                GetExExpiry::NotAnInteger => return Reply::error_static(NOT_AN_INTEGER),
                GetExExpiry::At(time) => {
                    let Some(deadline) = time.string_deadline(now_ms) else {
                        return time.invalid();
                    };
                    let len = overlay.value(key).map_or(0, <[u8]>::len);
                    if !overlay.fits(key, len, true) {
                        return Reply::error_static(TOO_LARGE_ERROR);
                    }
                    overlay.set_deadline(key, Some(deadline));
                }
            }
            reply
        }
        DataCommand::Expire {
            key,
            time,
            condition,
        } => {
            let Some(deadline) = time.deadline(now_ms) else {
                return time.invalid();
            };
            let Some(value) = overlay.value(key) else {
                return Reply::Integer(0);
            };
            let len = value.len();
            let current = overlay.expires_at_ms(key).map(deadline_i64);
            if !condition.allows(current, deadline) {
                return Reply::Integer(0);
            }
            if !overlay.fits(key, len, true) {
                return Reply::error_static(TOO_LARGE_ERROR);
            }
            overlay.set_deadline(key, Some(deadline));
            Reply::Integer(1)
        }
        DataCommand::Persist { key } => {
            if overlay.value(key).is_none() || overlay.expires_at_ms(key).is_none() {
                return Reply::Integer(0);
            }
            overlay.set_deadline(key, None);
            Reply::Integer(1)
        }
        DataCommand::Ttl {
            key,
            millis,
            absolute,
        } => {
            if overlay.value(key).is_none() {
                return Reply::Integer(-2);
            }
            let Some(deadline) = overlay.expires_at_ms(key) else {
                return Reply::Integer(-1);
            };
            let ms = if *absolute {
                i128::from(deadline)
            } else {
                (i128::from(deadline) - i128::from(now_ms)).max(0)
            };
            // Seconds are rounded to the nearest (Redis: (ms + 500) / 1000).
            let reply = if *millis { ms } else { (ms + 500) / 1000 };
            Reply::Integer(i64::try_from(reply).unwrap_or(i64::MAX))
        }
        DataCommand::Del { keys } => {
            let mut deleted = 0;
            for key in keys {
                if overlay.value(key).is_some() {
                    overlay.delete(key);
                    deleted += 1;
                }
            }
            Reply::Integer(deleted)
        }
        DataCommand::Exists { keys } => Reply::Integer(
            keys.iter()
                .filter(|key| overlay.value(key).is_some())
                .count()
                .try_into()
                .expect("a count of arguments fits in i64"),
        ),
        DataCommand::IncrBy { key, delta } => {
            let old = match overlay.value(key) {
                None => 0,
                Some(text) => match parse_i64(text) {
                    Some(old) => old,
                    None => return Reply::error_static(NOT_AN_INTEGER),
                },
            };
            let Some(new) = old.checked_add(*delta) else {
                return Reply::error_static("ERR increment or decrement would overflow");
            };
            let text = i64_text(new);
            let expiring = overlay.expires_at_ms(key).is_some();
            if !overlay.fits(key, text.len(), expiring) {
                return Reply::error_static(TOO_LARGE_ERROR);
            }
            overlay.set_keeping_ttl(key, text);
            Reply::Integer(new)
        }
        DataCommand::Append { key, value } => {
            let old = overlay.value(key).unwrap_or_default();
            let expiring = overlay.expires_at_ms(key).is_some();
            if !overlay.fits(key, old.len() + value.len(), expiring) {
                return Reply::error_static(TOO_LARGE_ERROR);
            }
            let mut new = Vec::with_capacity(old.len() + value.len());
            new.extend_from_slice(old);
            new.extend_from_slice(value);
            let len = new.len();
            overlay.set_keeping_ttl(key, new);
            Reply::Integer(len.try_into().expect("a value length fits in i64"))
        }
        DataCommand::Type { key } => Reply::simple_static(if overlay.value(key).is_some() {
            "string"
        } else {
            "none"
        }),
        DataCommand::Strlen { key } => Reply::Integer(
            overlay
                .value(key)
                .map_or(0, <[u8]>::len)
                .try_into()
                .expect("a value length fits in i64"),
        ),
        DataCommand::MGet { keys } => {
            Reply::Array(keys.iter().map(|key| overlay.get_reply(key)).collect())
        }
        DataCommand::MSet { pairs } => {
            set_pairs(overlay, pairs).map_or_else(|e| e, |()| Reply::ok())
        }
        DataCommand::MSetNx { pairs } => {
            if pairs.iter().any(|(key, _)| overlay.value(key).is_some()) {
                return Reply::Integer(0);
            }
            set_pairs(overlay, pairs).map_or_else(|e| e, |()| Reply::Integer(1))
        }
    }
}

/// Sets every key of `pairs` to its value without expiry (MSET, MSETNX), or none if
/// one would not fit: then the error to reply.
fn set_pairs(overlay: &mut Overlay, pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<(), Reply> {
    if pairs
        .iter()
        .any(|(key, value)| !overlay.fits(key, value.len(), false))
    {
        return Err(Reply::error_static(TOO_LARGE_ERROR));
    }
    for (key, value) in pairs {
        overlay.set(key, value.clone(), None);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
