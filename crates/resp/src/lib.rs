//! ferrotx's Redis protocol front end, without I/O.
//!
//! Everything a node needs to serve Redis clients except the sockets and the
//! transactions themselves, as deterministic code that runs unchanged in the simulator:
//!
//! - [`protocol`]: an incremental request parser (RESP multibulk and inline commands)
//!   with Redis 7's exact protocol errors;
//! - [`reply`]: replies and their RESP2 / RESP3 encodings;
//! - [`command`]: the command table (arity, flags, keys, COMMAND INFO / DOCS) and the
//!   parsing of arguments into typed [`Command`]s with Redis's syntax errors;
//! - [`semantics`]: the data commands run against an [`Overlay`] of values read by the
//!   node, in two phases (the keys to read, then apply) so that the node reads every key
//!   of a command or of a whole MULTI/EXEC block in one round of reads;
//! - [`session`]: the per-connection state machine (authentication, RESP version,
//!   MULTI/EXEC queue, WATCH) that turns one parsed request into one [`Action`];
//! - [`info`]: INFO's sections, formatted from numbers the node gathers;
//! - [`glob`]: Redis's glob matcher (`stringmatchlen`) for SCAN MATCH and KEYS;
//! - [`keys`]: the mapping of Redis keys (any length) to ferrotx's 16-byte store keys and
//!   the stored value's format.
//!
//! ferrotx stores only strings: no list, hash, set or sorted set exists, so Redis's
//! `WRONGTYPE` error never arises, and `SCAN ... TYPE string` matches every key. Keys may
//! expire (SET's EX / PX / EXAT / PXAT / KEEPTTL, SETEX, GETEX, EXPIRE, ...): the
//! deadline is stored with the value ([`keys`]), and the caller gives the time
//! ([`Overlay::new`]'s `now_ms`), so this crate reads no clock.
//!
//! A node serves a connection like this:
//!
//! ```
//! use ferrotx_resp::{Action, Outcome, Overlay, Parsed, RequestParser, Session, SessionConfig};
//!
//! let mut parser = RequestParser::default();
//! let mut session = Session::new(SessionConfig::default(), 1);
//! let mut input = b"SET greeting hello\r\nGET greeting\r\n".to_vec();
//! let mut output = Vec::new();
//! let mut store = std::collections::BTreeMap::<Vec<u8>, Vec<u8>>::new();
//! loop {
//!     let consumed = match parser.parse(&input, session.auth_required()).unwrap() {
//!         Parsed::Incomplete => break,
//!         Parsed::Empty { consumed } => consumed,
//!         Parsed::Command { args, consumed } => {
//!             let protocol = session.protocol();
//!             match session.handle(args) {
//!                 Action::Reply(reply) => reply.encode(protocol, &mut output),
//!                 Action::Run(plan) => {
//!                     // A real node runs this as one transaction (and first lets
//!                     // `Session::join` add the data commands pipelined behind it).
//!                     let mut overlay = Overlay::new(1 << 20, 1_700_000_000_000);
//!                     for key in plan.keys_to_read() {
//!                         overlay.insert_read(key.to_vec(), store.get(key).cloned());
//!                     }
//!                     for key in plan.keys_written_unread() {
//!                         overlay.insert_unread(key.to_vec());
//!                     }
//!                     let replies = plan.apply(&mut overlay);
//!                     for write in overlay.writes() {
//!                         match write.value {
//!                             Some(value) => store.insert(write.key.to_vec(), value.to_vec()),
//!                             None => store.remove(write.key),
//!                         };
//!                     }
//!                     let mut out = Vec::new();
//!                     session.complete(Outcome::Committed(replies), &mut out);
//!                     for reply in out {
//!                         reply.encode(session.protocol(), &mut output);
//!                     }
//!                 }
//!                 _ => unreachable!("not in this example"),
//!             }
//!             consumed
//!         }
//!     };
//!     input.drain(..consumed);
//! }
//! assert_eq!(output, b"+OK\r\n$5\r\nhello\r\n");
//! ```

pub mod command;
pub mod config;
pub mod glob;
pub mod info;
pub mod keys;
mod number;
pub mod protocol;
pub mod reply;
pub mod semantics;
pub mod session;

pub use command::{AdminRequest, Command, CommandSpec, DataCommand, KeyspaceRequest, ScanRequest};
pub use config::{ConfigRequest, ConfigValues};
pub use info::{InfoRequest, InfoStats};
pub use protocol::{Args, ArgsBuf, Parsed, ParserLimits, ProtocolError, RequestParser};
pub use reply::{ProtocolVersion, Reply};
pub use semantics::Overlay;
pub use session::{Action, Outcome, Plan, Session, SessionConfig, WatchVersion, WatchedKey};
