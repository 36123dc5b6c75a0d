use std::collections::BTreeMap;

use super::*;
use crate::command::{ScanRequest, keys_pattern_matches, keys_reply};
use crate::protocol::{ArgsBuf, Parsed, RequestParser};

/// A node of one partition in memory: every key has a value (or none) and a version
/// that every write of it increases.
#[derive(Default)]
struct Node {
    keys: BTreeMap<Vec<u8>, (Option<Vec<u8>>, u64)>,
    /// The deadlines of the keys that have one (Unix time in milliseconds).
    deadlines: BTreeMap<Vec<u8>, u64>,
    /// The time now (Unix time in milliseconds).
    now_ms: u64,
    /// Plans run, for checks.
    plans: Vec<Plan>,
    /// CONFIG's values.
    config: crate::config::ConfigValues,
}

impl Node {
    fn version(&self, key: &[u8]) -> u64 {
        self.keys.get(key).map_or(0, |(_, version)| *version)
    }

    /// True if `key` is stored and not expired.
    fn live(&self, key: &[u8]) -> bool {
        self.keys.get(key).is_some_and(|(value, _)| value.is_some())
            && self
                .deadlines
                .get(key)
                .is_none_or(|&deadline| deadline > self.now_ms)
    }

    /// Runs a plan as one transaction.
    fn run(&mut self, plan: &Plan) -> Outcome {
        self.plans.push(plan.clone());
        if plan.watched().iter().any(|watched| {
            !watched
                .version
                .unchanged(self.version(&watched.key), self.now_ms)
        }) {
            return Outcome::WatchedKeyChanged;
        }
        let mut overlay = Overlay::new(1 << 20, self.now_ms);
        for key in plan.keys_to_read() {
            let value = self.keys.get(key).and_then(|(value, _)| value.clone());
            let deadline = self.deadlines.get(key).copied();
            overlay.insert_read_expiring(key.to_vec(), value.map(|value| (value, deadline)));
        }
        for key in plan.keys_written_unread() {
            overlay.insert_unread(key.to_vec());
        }
        let replies = plan.apply(&mut overlay);
        for write in overlay.writes() {
            let entry = self.keys.entry(write.key.to_vec()).or_insert((None, 0));
            entry.0 = write.value.map(<[u8]>::to_vec);
            entry.1 += 1;
            match write.expires_at_ms {
                Some(deadline) => self.deadlines.insert(write.key.to_vec(), deadline),
                None => self.deadlines.remove(write.key),
            };
        }
        Outcome::Committed(replies)
    }

    fn live_keys(&self) -> Vec<Vec<u8>> {
        self.keys
            .keys()
            .filter(|key| self.live(key))
            .cloned()
            .collect()
    }

    /// Does what `action` says: the reply bytes, and whether to close.
    fn act(&mut self, session: &mut Session, action: Action) -> (Vec<u8>, bool) {
        let (reply, close) = match action {
            Action::Reply(reply) => (Some(reply), false),
            Action::Close(reply) => (reply, true),
            Action::Run(plan) => {
                let outcome = self.run(&plan);
                let mut replies = Vec::new();
                session.complete(outcome, &mut replies);
                let mut out = Vec::new();
                for reply in replies {
                    reply.encode(session.protocol(), &mut out);
                }
                return (out, false);
            }
            Action::ReadVersions(keys) => {
                let versions: Vec<WatchVersion> = keys
                    .iter()
                    .map(|key| WatchVersion {
                        store_version: self.version(key),
                        expires_at_ms: self
                            .live(key)
                            .then(|| self.deadlines.get(key).copied())
                            .flatten(),
                    })
                    .collect();
                (Some(session.watched(&versions)), false)
            }
            Action::Keyspace(KeyspaceRequest::DbSize) => {
                (Some(Reply::Integer(self.live_keys().len() as i64)), false)
            }
            Action::Keyspace(KeyspaceRequest::Flush) => {
                for (value, version) in self.keys.values_mut() {
                    if value.take().is_some() {
                        *version += 1;
                    }
                }
                self.deadlines.clear();
                (Some(Reply::ok()), false)
            }
            Action::Keyspace(KeyspaceRequest::Keys { pattern }) => {
                let keys = self
                    .live_keys()
                    .into_iter()
                    .filter(|key| keys_pattern_matches(&pattern, key))
                    .collect();
                (Some(keys_reply(keys)), false)
            }
            Action::Keyspace(KeyspaceRequest::Scan(scan)) => {
                let keys = self
                    .live_keys()
                    .into_iter()
                    .filter(|key| scan.matches(key))
                    .collect();
                (Some(ScanRequest::reply(0, keys)), false)
            }
            Action::Info(request) => (
                Some(session.info_reply(&request, &InfoStats::default())),
                false,
            ),
            Action::Admin(AdminRequest::Copies) => (Some(Reply::Array(Vec::new())), false),
            Action::Config(request) => (Some(request.reply(&mut self.config)), false),
        };
        let mut out = Vec::new();
        if let Some(reply) = reply {
            reply.encode(session.protocol(), &mut out);
        }
        (out, close)
    }

    /// Feeds `input` (any requests) to the session: everything written back, until a
    /// close. Data commands pipelined behind one join its plan, as the server does.
    fn feed(&mut self, session: &mut Session, input: &str) -> String {
        let mut parser = RequestParser::default();
        let mut buffer = input.as_bytes().to_vec();
        let mut out = Vec::new();
        loop {
            let auth_required = session.auth_required();
            let (mut action, consumed) = match parser.parse(&buffer, auth_required) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Empty { consumed }) => (None, consumed),
                Ok(Parsed::Command { args, consumed }) => (Some(session.handle(args)), consumed),
                Err(error) => {
                    error.reply().encode(session.protocol(), &mut out);
                    break;
                }
            };
            buffer.drain(..consumed);
            if let Some(Action::Run(plan)) = &mut action {
                loop {
                    let consumed = match parser.parse(&buffer, session.auth_required()) {
                        Ok(Parsed::Empty { consumed }) => consumed,
                        Ok(Parsed::Command { args, consumed }) if session.join(plan, args) => {
                            consumed
                        }
                        _ => break,
                    };
                    buffer.drain(..consumed);
                }
            }
            if let Some(action) = action {
                let (bytes, close) = self.act(session, action);
                out.extend_from_slice(&bytes);
                if close {
                    out.extend_from_slice(b"<closed>");
                    break;
                }
            }
        }
        String::from_utf8(out).unwrap()
    }
}

/// The one reply of a plan of one command (or EXEC's).
fn complete_one(session: &mut Session, outcome: Outcome) -> Reply {
    let mut replies = Vec::new();
    session.complete(outcome, &mut replies);
    assert_eq!(replies.len(), 1, "{replies:?}");
    replies.pop().unwrap()
}

fn session() -> Session {
    Session::new(SessionConfig::default(), 7)
}

fn with_password() -> Session {
    Session::new(
        SessionConfig {
            password: Some(b"secret".to_vec()),
            ..SessionConfig::default()
        },
        8,
    )
}

/// One connection's exchange with a fresh node.
fn exchange(session: &mut Session, input: &str) -> String {
    Node::default().feed(session, input)
}

#[test]
fn connection_commands() {
    let mut session = session();
    assert_eq!(
        exchange(
            &mut session,
            "PING\r\nPING hi\r\nECHO \"a b\"\r\nSELECT 0\r\nSELECT 1\r\nCLIENT ID\r\n\
             CLIENT GETNAME\r\nCLIENT SETNAME me\r\nCLIENT GETNAME\r\nCLIENT SETNAME \"\"\r\n\
             CLIENT GETNAME\r\n"
        ),
        "+PONG\r\n$2\r\nhi\r\n$3\r\na b\r\n+OK\r\n-ERR DB index is out of range\r\n:7\r\n\
         $-1\r\n+OK\r\n$2\r\nme\r\n+OK\r\n$-1\r\n"
    );
    assert_eq!(session.name(), None);
    assert_eq!(session.client_id(), 7);
}

#[test]
fn out_of_memory_refuses_what_may_grow_memory_and_runs_the_rest() {
    let mut node = Node::default();
    let mut session = session();
    assert_eq!(
        node.feed(&mut session, "SET a 1\r\nSET b 2\r\n"),
        "+OK\r\n+OK\r\n"
    );
    session.set_out_of_memory(true);
    let oom = format!("-{OOM}\r\n");
    // Writes that may grow memory are refused; reads, deletes and the rest run, also
    // pipelined behind a refused one.
    assert_eq!(node.feed(&mut session, "SET c 3\r\n"), oom);
    assert_eq!(node.feed(&mut session, "INCR a\r\n"), oom);
    assert_eq!(
        node.feed(
            &mut session,
            "GET a\r\nSET c 3\r\nGET b\r\nDEL b\r\nEXISTS b\r\nPING\r\n"
        ),
        format!("$1\r\n1\r\n{oom}$1\r\n2\r\n:1\r\n:0\r\n+PONG\r\n")
    );
    // Inside MULTI, as in Redis, every command is refused (queuing takes memory), and
    // EXEC fails; DISCARD still works.
    let aborted = "-EXECABORT Transaction discarded because of previous errors.\r\n";
    assert_eq!(
        node.feed(&mut session, "MULTI\r\nSET c 3\r\nGET a\r\nEXEC\r\n"),
        format!("+OK\r\n{oom}{oom}{aborted}")
    );
    assert_eq!(
        node.feed(&mut session, "MULTI\r\nGET a\r\nDISCARD\r\nGET a\r\n"),
        format!("+OK\r\n{oom}+OK\r\n$1\r\n1\r\n")
    );
    // A write queued before the node ran out: EXEC is refused, as Redis refuses it.
    session.set_out_of_memory(false);
    assert_eq!(
        node.feed(&mut session, "MULTI\r\nSET d 4\r\n"),
        "+OK\r\n+QUEUED\r\n"
    );
    session.set_out_of_memory(true);
    assert_eq!(
        node.feed(&mut session, "EXEC\r\n"),
        format!("-EXECABORT Transaction discarded because of: {OOM}\r\n")
    );
    assert_eq!(node.feed(&mut session, "EXISTS d\r\n"), ":0\r\n");
    // Back under the limit: writes run again.
    session.set_out_of_memory(false);
    assert_eq!(node.feed(&mut session, "SET c 3\r\n"), "+OK\r\n");
}

#[test]
fn config_get_and_set() {
    let mut node = Node::default();
    let mut session = session();
    assert_eq!(
        node.feed(
            &mut session,
            "CONFIG SET maxmemory 1mb\r\nCONFIG GET maxmemory\r\n"
        ),
        "+OK\r\n*2\r\n$9\r\nmaxmemory\r\n$7\r\n1048576\r\n"
    );
    assert_eq!(node.config.maxmemory, 1 << 20);
    assert_eq!(
        node.feed(&mut session, "CONFIG GET maxmemory-policy\r\n"),
        "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n"
    );
    assert_eq!(
        node.feed(&mut session, "CONFIG SET maxmemory\r\n"),
        "-ERR wrong number of arguments for 'config|set' command\r\n"
    );
    assert_eq!(
        node.feed(&mut session, "CONFIG SET maxmemory 1 maxmemory-policy\r\n"),
        "-ERR syntax error\r\n"
    );
    assert!(
        node.feed(&mut session, "CONFIG\r\n")
            .starts_with("-ERR wrong number of arguments")
    );
    assert_eq!(
        node.feed(&mut session, "MULTI\r\nCONFIG GET maxmemory\r\nEXEC\r\n"),
        "+OK\r\n-ERR Command not allowed inside a transaction\r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n"
    );
}

#[test]
fn quit_closes_after_ok() {
    assert_eq!(
        exchange(&mut session(), "PING\r\nQUIT\r\nPING\r\n"),
        "+PONG\r\n+OK\r\n<closed>"
    );
    assert_eq!(
        exchange(&mut session(), "MULTI\r\nQUIT\r\n"),
        "+OK\r\n+OK\r\n<closed>"
    );
    // HTTP-looking requests are dropped without a reply, as Redis does.
    assert_eq!(exchange(&mut session(), "POST / HTTP/1.1\r\n"), "<closed>");
    assert_eq!(exchange(&mut session(), "Host: example\r\n"), "<closed>");
}

#[test]
fn hello_replies() {
    let mut session = session();
    assert_eq!(
        exchange(&mut session, "HELLO\r\n"),
        "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n\
         :2\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\n\
         master\r\n$7\r\nmodules\r\n*0\r\n"
    );
    assert_eq!(
        exchange(&mut session, "HELLO 3 SETNAME worker\r\nGET nothing\r\n"),
        "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n\
         :3\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\n\
         master\r\n$7\r\nmodules\r\n*0\r\n_\r\n"
    );
    assert_eq!(session.protocol(), ProtocolVersion::Resp3);
    assert_eq!(session.name(), Some(&b"worker"[..]));
    assert_eq!(
        exchange(&mut session, "HELLO 2\r\nGET nothing\r\n").rsplit_once("*0\r\n"),
        Some((
            "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n\
              :2\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\n\
              master\r\n$7\r\nmodules\r\n",
            "$-1\r\n"
        ))
    );
}

#[test]
fn hello_errors() {
    let mut session = session();
    assert_eq!(
        exchange(
            &mut session,
            "HELLO 4\r\nHELLO x\r\nHELLO 3 FOO\r\nHELLO 3 SETNAME \"a b\"\r\n\
             HELLO 3 AUTH default\r\nHELLO 3 AUTH nobody pw\r\n"
        ),
        "-NOPROTO unsupported protocol version\r\n\
         -ERR Protocol version is not an integer or out of range\r\n\
         -ERR Syntax error in HELLO option 'FOO'\r\n\
         -ERR Client names cannot contain spaces, newlines or special characters.\r\n\
         -ERR Syntax error in HELLO option 'AUTH'\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    // None of them switched the protocol.
    assert_eq!(session.protocol(), ProtocolVersion::Resp2);
    // Options before a bad one take effect.
    exchange(&mut session, "HELLO 3 SETNAME early BAD\r\n");
    assert_eq!(session.name(), Some(&b"early"[..]));
    assert_eq!(session.protocol(), ProtocolVersion::Resp2);
}

#[test]
fn auth_without_a_password() {
    let mut session = session();
    assert!(!session.auth_required());
    assert_eq!(
        exchange(
            &mut session,
            "AUTH x\r\nAUTH default anything\r\nAUTH someone x\r\nAUTH a b c\r\n"
        ),
        "-ERR AUTH <password> called without any password configured for the default user. \
         Are you sure your configuration is correct?\r\n\
         +OK\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -ERR syntax error\r\n"
    );
}

#[test]
fn auth_with_a_password() {
    let mut session = with_password();
    assert!(session.auth_required());
    // Unknown commands and arity errors come before NOAUTH, as in Redis.
    assert_eq!(
        exchange(
            &mut session,
            "GET a\r\nFOO\r\nGET\r\nPING\r\nMULTI\r\nAUTH wrong\r\nAUTH default wrong\r\n\
             HELLO 3\r\nHELLO 3 AUTH default wrong\r\nEXEC\r\n"
        ),
        "-NOAUTH Authentication required.\r\n\
         -ERR unknown command 'FOO', with args beginning with: \r\n\
         -ERR wrong number of arguments for 'get' command\r\n\
         -NOAUTH Authentication required.\r\n\
         -NOAUTH Authentication required.\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -NOAUTH HELLO must be called with the client already authenticated, otherwise the \
         HELLO AUTH <user> <pass> option can be used to authenticate the client and select \
         the RESP protocol version at the same time\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -EXECABORT Transaction discarded because of: NOAUTH Authentication required.\r\n"
    );
    assert!(session.auth_required());
    assert_eq!(
        exchange(&mut session, "AUTH secret\r\nAUTH wrong\r\nGET a\r\n"),
        "+OK\r\n-WRONGPASS invalid username-password pair or user is disabled.\r\n$-1\r\n"
    );
    // A failed AUTH does not undo an earlier success.
    assert!(!session.auth_required());

    let mut session = with_password();
    let hello = exchange(&mut session, "HELLO 3 AUTH default secret\r\n");
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert!(!session.auth_required());

    let mut session = with_password();
    assert_eq!(exchange(&mut session, "AUTH default secret\r\n"), "+OK\r\n");
}

#[test]
fn unauthenticated_clients_get_smaller_limits() {
    let mut session = with_password();
    assert_eq!(
        exchange(&mut session, "*11\r\n"),
        "-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
}

#[test]
fn multi_exec() {
    let mut node = Node::default();
    let mut session = session();
    assert_eq!(
        node.feed(
            &mut session,
            "MULTI\r\nSET a 1\r\nINCR a\r\nPING\r\nECHO x\r\nGET a\r\nUNWATCH\r\nEXEC\r\n"
        ),
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
         *6\r\n+OK\r\n:2\r\n+PONG\r\n$1\r\nx\r\n$1\r\n2\r\n+OK\r\n"
    );
    // One transaction for the whole block, reading each key once.
    assert_eq!(node.plans.len(), 1);
    assert_eq!(node.plans[0].commands().len(), 3);
    assert_eq!(node.plans[0].keys_to_read(), vec![&b"a"[..]]);
    assert!(!node.plans[0].is_read_only());
    assert!(!session.in_multi());
}

#[test]
fn empty_and_session_only_blocks_need_no_transaction() {
    let mut node = Node::default();
    let mut session = session();
    assert_eq!(
        node.feed(&mut session, "MULTI\r\nEXEC\r\nMULTI\r\nPING\r\nEXEC\r\n"),
        "+OK\r\n*0\r\n+OK\r\n+QUEUED\r\n*1\r\n+PONG\r\n"
    );
    assert!(node.plans.is_empty());
}

#[test]
fn errors_while_queuing_abort_exec() {
    let mut session = session();
    assert_eq!(
        exchange(&mut session, "MULTI\r\nGET\r\nSET a 1\r\nEXEC\r\nEXEC\r\n"),
        "+OK\r\n-ERR wrong number of arguments for 'get' command\r\n+QUEUED\r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n\
         -ERR EXEC without MULTI\r\n"
    );
    assert_eq!(
        exchange(&mut session, "MULTI\r\nNOPE 1\r\nEXEC\r\n"),
        "+OK\r\n-ERR unknown command 'NOPE', with args beginning with: '1' \r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(
        exchange(&mut session, "MULTI\r\nDBSIZE\r\nEXEC\r\n"),
        "+OK\r\n-ERR Command not allowed inside a transaction\r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(
        exchange(&mut session, "MULTI\r\nFERROTX COPIES\r\nEXEC\r\n"),
        "+OK\r\n-ERR Command not allowed inside a transaction\r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n"
    );
}

#[test]
fn ferrotx_copies_is_the_nodes_to_answer() {
    let mut session = session();
    let buf = ArgsBuf::new(&[&b"ferrotx"[..], b"Copies"]);
    assert!(matches!(
        session.handle(buf.args()),
        Action::Admin(AdminRequest::Copies)
    ));
    assert!(!session.is_waiting(), "the session does not wait for it");
    assert_eq!(exchange(&mut session, "FERROTX COPIES\r\n"), "*0\r\n");
    assert_eq!(
        exchange(
            &mut session,
            "FERROTX\r\nFERROTX COPIES x\r\nFERROTX NOPE\r\n"
        ),
        "-ERR wrong number of arguments for 'ferrotx' command\r\n\
         -ERR wrong number of arguments for 'ferrotx|copies' command\r\n\
         -ERR unknown subcommand 'NOPE'. Try FERROTX HELP.\r\n"
    );
}

#[test]
fn run_time_errors_are_entries_of_exec() {
    // Byte for byte what Redis 7.0 answers.
    assert_eq!(
        exchange(
            &mut session(),
            "MULTI\r\nSET a b NX XX\r\nMSET a b c\r\nPING a b\r\nGET a\r\nEXEC\r\n"
        ),
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n-ERR syntax error\r\n\
         -ERR wrong number of arguments for 'mset' command\r\n\
         -ERR wrong number of arguments for 'ping' command\r\n$-1\r\n"
    );
    let mut node = Node::default();
    node.feed(&mut session(), "SET s text\r\n");
    assert_eq!(
        node.feed(
            &mut session(),
            "MULTI\r\nINCR s\r\nSET t 1\r\nINCRBY t x\r\nINCR t\r\nEXEC\r\n"
        ),
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n\
         -ERR value is not an integer or out of range\r\n+OK\r\n\
         -ERR value is not an integer or out of range\r\n:2\r\n"
    );
}

#[test]
fn exec_and_discard_edge_cases() {
    let mut session = session();
    assert_eq!(
        exchange(
            &mut session,
            "EXEC\r\nDISCARD\r\nMULTI\r\nMULTI\r\nEXEC\r\nMULTI\r\nSET a 1\r\nDISCARD\r\n\
             GET a\r\nMULTI\r\nEXEC foo\r\nEXEC\r\nEXEC foo\r\n"
        ),
        "-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n\
         -ERR MULTI calls can not be nested\r\n*0\r\n+OK\r\n+QUEUED\r\n+OK\r\n$-1\r\n+OK\r\n\
         -EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' \
         command\r\n-ERR EXEC without MULTI\r\n\
         -EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' \
         command\r\n"
    );
    assert_eq!(
        exchange(&mut session, "MULTI\r\nWATCH a\r\nEXEC\r\n"),
        "+OK\r\n-ERR WATCH inside MULTI is not allowed\r\n*0\r\n"
    );
}

#[test]
fn watch_sees_this_clients_own_writes() {
    let mut node = Node::default();
    let mut session = session();
    assert_eq!(
        node.feed(
            &mut session,
            "WATCH a\r\nSET a 1\r\nMULTI\r\nGET a\r\nEXEC\r\nMULTI\r\nGET a\r\nEXEC\r\n"
        ),
        "+OK\r\n+OK\r\n+OK\r\n+QUEUED\r\n*-1\r\n+OK\r\n+QUEUED\r\n*1\r\n$1\r\n1\r\n"
    );
    assert!(session.watched_keys().is_empty());
}

#[test]
fn watch_against_another_client() {
    let mut node = Node::default();
    let mut watcher = session();
    let mut other = Session::new(SessionConfig::default(), 9);
    node.feed(&mut watcher, "WATCH a b\r\nMULTI\r\nINCR a\r\n");
    assert_eq!(watcher.watched_keys().len(), 2);
    node.feed(&mut other, "SET b 1\r\n");
    assert_eq!(node.feed(&mut watcher, "EXEC\r\n"), "*-1\r\n");
    assert_eq!(node.feed(&mut other, "GET a\r\n"), "$-1\r\n");

    // Unchanged keys let EXEC through; RESP3's null is `_`.
    node.feed(&mut watcher, "WATCH a b\r\n");
    node.feed(&mut other, "GET b\r\n");
    assert_eq!(
        node.feed(&mut watcher, "MULTI\r\nINCR a\r\nEXEC\r\n"),
        "+OK\r\n+QUEUED\r\n*1\r\n:1\r\n"
    );
    node.feed(&mut watcher, "HELLO 3\r\nWATCH a\r\n");
    node.feed(&mut other, "DEL a\r\n");
    assert_eq!(
        node.feed(&mut watcher, "MULTI\r\nGET a\r\nEXEC\r\n"),
        "+OK\r\n+QUEUED\r\n_\r\n"
    );
}

#[test]
fn watch_with_no_data_commands_still_checks() {
    let mut node = Node::default();
    let mut session = session();
    node.feed(&mut session, "WATCH a\r\nSET a 1\r\n");
    assert_eq!(
        node.feed(&mut session, "MULTI\r\nPING\r\nEXEC\r\n"),
        "+OK\r\n+QUEUED\r\n*-1\r\n"
    );
    let plan = node.plans.last().unwrap();
    assert!(plan.commands().is_empty());
    assert_eq!(plan.watched().len(), 1);
}

#[test]
fn watch_bookkeeping() {
    let mut session = session();
    let args = ArgsBuf::new(["WATCH", "a", "a", "b"]);
    let Action::ReadVersions(keys) = session.handle(args.args()) else {
        panic!("versions to read");
    };
    assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
    assert!(session.is_waiting());
    let version = |store_version| WatchVersion {
        store_version,
        expires_at_ms: None,
    };
    assert_eq!(session.watched(&[version(3), version(4)]), Reply::ok());
    assert_eq!(
        session.watched_keys(),
        &[
            WatchedKey {
                key: b"a".to_vec(),
                version: version(3)
            },
            WatchedKey {
                key: b"b".to_vec(),
                version: version(4)
            }
        ]
    );
    // Keys watched already keep their first version: nothing to read.
    let again = ArgsBuf::new(["WATCH", "b", "a"]);
    assert!(matches!(session.handle(again.args()), Action::Reply(reply) if reply == Reply::ok()));
    assert_eq!(exchange(&mut session, "UNWATCH\r\n"), "+OK\r\n");
    assert!(session.watched_keys().is_empty());
    // DISCARD unwatches too.
    let mut node = Node::default();
    node.feed(&mut session, "WATCH a\r\nMULTI\r\nDISCARD\r\n");
    assert!(session.watched_keys().is_empty());
}

#[test]
fn limits_on_blocks_and_watches() {
    let config = SessionConfig {
        queued_commands_max: 2,
        watched_keys_max: 2,
        ..SessionConfig::default()
    };
    let mut session = Session::new(config, 1);
    assert_eq!(
        exchange(
            &mut session,
            "MULTI\r\nGET a\r\nGET b\r\nGET c\r\nEXEC\r\nWATCH a b c\r\nWATCH a b\r\nWATCH c\r\n"
        ),
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n-ERR ferrotx transactions hold at most 2 commands\r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n\
         -ERR ferrotx watches at most 2 keys per connection\r\n+OK\r\n\
         -ERR ferrotx watches at most 2 keys per connection\r\n"
    );
}

/// A WATCH of many keys is refused in a time that does not grow with their count: the
/// search for keys named twice stops at the limit. It went on over every key sent, in
/// time quadratic in their count (50,000 keys: over 10 s in a debug build).
#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "a test of running time: it measures the wall clock, not protocol time"
)]
fn a_watch_of_many_keys_is_refused_in_bounded_time() {
    let mut session = Session::new(SessionConfig::default(), 1);
    let keys = (0..50_000u32).map(|k| k.to_le_bytes().to_vec());
    let args = ArgsBuf::new(std::iter::once(b"WATCH".to_vec()).chain(keys));
    let started = std::time::Instant::now();
    let action = session.handle(args.args());
    let elapsed = started.elapsed();
    let limit =
        format!("ERR ferrotx watches at most {WATCHED_KEYS_MAX_DEFAULT} keys per connection");
    assert!(matches!(action, Action::Reply(reply) if reply == Reply::error(limit)));
    assert!(session.watched_keys().is_empty());
    assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
}

/// A plan's replies stay within their bound whatever the client asks: an MGET that names
/// one 1 MiB value many times (a request of a few hundred bytes) made a reply of as many
/// MiB. A command past the bound answers an error and does not run; those before it do.
#[test]
fn the_replies_of_a_plan_stay_within_their_bound() {
    let mut session = session();
    let mut node = Node::default();
    node.keys
        .insert(b"big".to_vec(), (Some(vec![b'x'; 1 << 20]), 1));
    let error = format!("-{REPLY_TOO_LARGE_ERROR}\r\n");
    // 63 values of 1 MiB fit 64 MiB with their framing, 64 do not.
    let fits = node.feed(&mut session, &format!("MGET{}\r\n", " big".repeat(63)));
    assert!(fits.starts_with("*63\r\n$1048576\r\n"), "{}", &fits[..20]);
    assert_eq!(fits.len(), 5 + 63 * (10 + (1 << 20) + 2));
    let over = node.feed(&mut session, &format!("MGET{}\r\n", " big".repeat(128)));
    assert!(over == error, "a reply of {} bytes", over.len());
    // A block: the GETs past the bound answer the error, the others run, and so do the
    // writes (GETDEL past the bound deletes nothing).
    let block = format!(
        "MULTI\r\n{}GETDEL big\r\nSET after 1\r\nEXEC\r\n",
        "GET big\r\n".repeat(63)
    );
    let out = node.feed(&mut session, &block);
    let replies = out.split_once("*65\r\n").expect("EXEC's 65 replies").1;
    assert_eq!(replies.matches("$1048576\r\n").count(), 63);
    assert!(
        replies.ends_with(&format!("{error}+OK\r\n")),
        "{}",
        &replies[replies.len() - 200..]
    );
    assert!(node.live(b"big") && node.live(b"after"));
}

#[test]
fn connection_commands_inside_multi_run_at_exec() {
    let mut session = with_password();
    exchange(&mut session, "AUTH secret\r\n");
    assert_eq!(
        exchange(
            &mut session,
            "MULTI\r\nCLIENT SETNAME late\r\nCLIENT GETNAME\r\nSELECT 0\r\nSELECT 5\r\nEXEC\r\n"
        ),
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
         *4\r\n+OK\r\n$4\r\nlate\r\n+OK\r\n-ERR DB index is out of range\r\n"
    );
}

#[test]
fn hello_inside_multi_switches_only_the_entries_after_it() {
    // Redis writes EXEC's entries as the commands run: those before HELLO 3 in RESP2,
    // the others (HELLO's own reply included) in RESP3; and back with HELLO 2.
    let mut session = session();
    let reply = exchange(
        &mut session,
        "MULTI\r\nGET a\r\nHELLO 3\r\nGET a\r\nEXEC\r\n",
    );
    let entries = reply
        .strip_prefix("+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n$-1\r\n%7\r\n")
        .unwrap_or_else(|| panic!("{reply}"));
    assert!(entries.ends_with("*0\r\n_\r\n"), "{reply}");
    assert_eq!(session.protocol(), ProtocolVersion::Resp3);
    let reply = exchange(
        &mut session,
        "MULTI\r\nGET a\r\nHELLO 2\r\nGET a\r\nEXEC\r\n",
    );
    let entries = reply
        .strip_prefix("+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n_\r\n*14\r\n")
        .unwrap_or_else(|| panic!("{reply}"));
    assert!(entries.ends_with("*0\r\n$-1\r\n"), "{reply}");
    // Without a switch, no entry is wrapped.
    let mut session = self::session();
    let mut node = Node::default();
    node.feed(&mut session, "MULTI\r\nGET a\r\nPING\r\n");
    let Action::Run(plan) = session.handle(ArgsBuf::new(["EXEC"]).args()) else {
        panic!("EXEC runs a plan");
    };
    let outcome = node.run(&plan);
    let Reply::Array(entries) = complete_one(&mut session, outcome) else {
        panic!("an array");
    };
    assert!(
        entries
            .iter()
            .all(|entry| !matches!(entry, Reply::InProtocol(..))),
        "{entries:?}"
    );
}

#[test]
fn keyspace_and_info_actions() {
    let mut node = Node::default();
    let mut session = session();
    node.feed(&mut session, "MSET user:1 a user:2 b other c\r\n");
    assert_eq!(node.feed(&mut session, "DBSIZE\r\n"), ":3\r\n");
    assert_eq!(
        node.feed(&mut session, "KEYS user:*\r\n"),
        "*2\r\n$6\r\nuser:1\r\n$6\r\nuser:2\r\n"
    );
    assert_eq!(
        node.feed(&mut session, "SCAN 0 MATCH *2 COUNT 100\r\n"),
        "*2\r\n$1\r\n0\r\n*1\r\n$6\r\nuser:2\r\n"
    );
    assert_eq!(
        node.feed(&mut session, "SCAN 0 TYPE list\r\n"),
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
    let info = node.feed(&mut session, "INFO server\r\n");
    assert!(info.contains("redis_version:7.0.15\r\n"), "{info}");
    assert_eq!(
        node.feed(&mut session, "SCAN x\r\n"),
        "-ERR invalid cursor\r\n"
    );
}

#[test]
fn failed_transactions() {
    let mut session = session();
    let get = ArgsBuf::new(["GET", "a"]);
    assert!(matches!(session.handle(get.args()), Action::Run(_)));
    let error = Reply::error_static("ERR cluster unavailable");
    assert_eq!(
        complete_one(&mut session, Outcome::Failed(error.clone())),
        error
    );
    for args in [&["MULTI"][..], &["GET", "a"]] {
        let _ = session.handle(ArgsBuf::new(args).args());
    }
    let Action::Run(plan) = session.handle(ArgsBuf::new(["EXEC"]).args()) else {
        panic!("a plan");
    };
    assert!(plan.is_read_only());
    assert_eq!(
        complete_one(&mut session, Outcome::Failed(error.clone())),
        error
    );
    assert!(!session.in_multi());
    // A primary past its memory limit refused the block's write: EXEC answers as Redis
    // answers an EXEC it refuses for memory; the same error outside MULTI stays bare.
    for args in [&["MULTI"][..], &["SET", "a", "1"]] {
        let _ = session.handle(ArgsBuf::new(args).args());
    }
    let Action::Run(_) = session.handle(ArgsBuf::new(["EXEC"]).args()) else {
        panic!("a plan");
    };
    let oom = Reply::error_static(OOM);
    assert_eq!(
        complete_one(&mut session, Outcome::Failed(oom.clone())),
        Reply::error(format!("EXECABORT Transaction discarded because of: {OOM}"))
    );
    let _ = session.handle(ArgsBuf::new(["SET", "a", "1"]).args());
    assert_eq!(
        complete_one(&mut session, Outcome::Failed(oom.clone())),
        oom
    );
}

#[test]
#[should_panic(expected = "a request handled while the session waits for the node")]
fn requests_wait_for_the_node() {
    let mut session = session();
    let get = ArgsBuf::new(["GET", "a"]);
    let _ = session.handle(get.args());
    let _ = session.handle(get.args());
}

#[test]
#[should_panic(expected = "an outcome given when the session ran no plan")]
fn outcomes_need_a_plan() {
    session().complete(Outcome::Committed(Vec::new()), &mut Vec::new());
}

#[test]
fn command_command_through_the_session() {
    let mut session = session();
    assert_eq!(exchange(&mut session, "COMMAND COUNT\r\n"), ":50\r\n");
    assert!(exchange(&mut session, "COMMAND\r\n").starts_with("*50\r\n*10\r\n$4\r\nping\r\n"));
    assert!(exchange(&mut session, "COMMAND DOCS\r\n").starts_with("*100\r\n$4\r\nping\r\n"));
    assert_eq!(
        exchange(&mut session, "COMMAND INFO nosuch\r\nCOMMAND COUNT x\r\n"),
        "*1\r\n$-1\r\n-ERR wrong number of arguments for 'command|count' command\r\n"
    );
}

#[test]
fn passwords_compare_whole() {
    assert!(same_secret(b"secret", b"secret"));
    assert!(!same_secret(b"secret", b"secreT"));
    assert!(!same_secret(b"secret", b"secret!"));
    assert!(same_secret(b"", b""));
}

/// A session that runs each data command as its own plan.
fn unjoined() -> Session {
    Session::new(
        SessionConfig {
            pipeline_commands_max: 1,
            ..SessionConfig::default()
        },
        7,
    )
}

#[test]
fn pipelined_commands_join_one_plan_with_the_replies_of_one_by_one() {
    // Data commands, errors among them, and commands that end a pipelined plan (MULTI,
    // WATCH, PING, DBSIZE, an unknown command, a wrong arity), in one pipeline.
    let script = "SET a 1\r\nINCR a\r\nINCR a\r\nGET a\r\nAPPEND a x\r\nINCR a\r\nGET a\r\n\
                  SET b 5 NX\r\nSET b 6 NX\r\nGETDEL b\r\nEXISTS a b\r\nPING\r\nMSET c 1 d 2\r\n\
                  MGET a b c d\r\nNOSUCH x\r\nGET\r\nINCRBY c 10\r\nWATCH c\r\nINCR c\r\n\
                  MULTI\r\nINCR c\r\nGET d\r\nEXEC\r\nDECR d\r\nDBSIZE\r\nSETNX e 1\r\n\
                  SETNX e 2\r\nSTRLEN e\r\nDEL a c\r\nGETSET d 9\r\nGET d\r\n";
    let mut joined_node = Node::default();
    let joined = joined_node.feed(&mut session(), script);
    let mut alone_node = Node::default();
    let alone = alone_node.feed(&mut unjoined(), script);
    assert_eq!(joined, alone);
    assert!(joined.starts_with("+OK\r\n:2\r\n:3\r\n$1\r\n3\r\n:2\r\n-ERR value is not"));
    // The same values (versions differ: a plan writes each key once).
    assert_eq!(joined_node.live_keys(), alone_node.live_keys());
    for key in joined_node.live_keys() {
        assert_eq!(joined_node.keys[&key].0, alone_node.keys[&key].0);
    }
    // One plan per run of data commands between the others.
    let sizes: Vec<usize> = joined_node
        .plans
        .iter()
        .map(|plan| plan.commands().len())
        .collect();
    assert_eq!(sizes, [11, 2, 1, 1, 2, 1, 6]);
    // One by one, only EXEC's plan has more than one command.
    let alone_sizes: Vec<usize> = alone_node
        .plans
        .iter()
        .map(|plan| plan.commands().len())
        .collect();
    assert_eq!(
        alone_sizes.iter().filter(|&&n| n > 1).collect::<Vec<_>>(),
        [&2]
    );
    assert_eq!(
        alone_sizes.iter().sum::<usize>(),
        sizes.iter().sum::<usize>()
    );
}

#[test]
fn a_pipelined_plan_stays_within_its_bounds() {
    let mut session = Session::new(
        SessionConfig {
            pipeline_commands_max: 3,
            ..SessionConfig::default()
        },
        7,
    );
    let get = ArgsBuf::new(["GET", "a"]);
    let Action::Run(mut plan) = session.handle(get.args()) else {
        panic!("a plan");
    };
    assert!(session.join(&mut plan, get.args()));
    assert!(session.join(&mut plan, get.args()));
    assert!(
        !session.join(&mut plan, get.args()),
        "three commands at most"
    );
    assert_eq!(plan.commands().len(), 3);
    let mut replies = Vec::new();
    let error = Reply::error_static("ERR cluster unavailable");
    session.complete(Outcome::Failed(error.clone()), &mut replies);
    assert_eq!(replies, [error.clone(), error.clone(), error]);
    assert!(!session.is_waiting());

    // Keys: an MGET of almost every key the bound allows, then one key too many.
    let mut session = self::session();
    let mut many = vec!["MGET".to_owned()];
    many.extend((0..PIPELINE_KEYS_MAX - 1).map(|i| format!("k{i}")));
    let many = ArgsBuf::new(many.iter().map(String::as_str));
    let Action::Run(mut plan) = session.handle(many.args()) else {
        panic!("a plan");
    };
    assert!(!session.join(&mut plan, ArgsBuf::new(["MGET", "x", "y"]).args()));
    assert!(session.join(&mut plan, ArgsBuf::new(["GET", "x"]).args()));
    assert!(!session.join(&mut plan, ArgsBuf::new(["GET", "y"]).args()));

    // Written keys: MSETs of the bound's keys, then a SET too many (a GET still joins).
    let mut session = self::session();
    let mut mset = vec!["MSET".to_owned()];
    mset.extend((0..PIPELINE_WRITTEN_KEYS_MAX - 1).flat_map(|i| [format!("k{i}"), "v".into()]));
    let mset = ArgsBuf::new(mset.iter().map(String::as_str));
    let Action::Run(mut plan) = session.handle(mset.args()) else {
        panic!("a plan");
    };
    assert!(!session.join(&mut plan, ArgsBuf::new(["MSET", "x", "1", "y", "2"]).args()));
    assert!(session.join(&mut plan, ArgsBuf::new(["INCR", "x"]).args()));
    assert!(!session.join(&mut plan, ArgsBuf::new(["SET", "y", "1"]).args()));
    assert!(session.join(&mut plan, ArgsBuf::new(["GET", "y"]).args()));

    // Bytes: a value of most of the bound, then one that would pass it.
    let mut session = self::session();
    let big = "v".repeat(PIPELINE_BYTES_MAX - 100);
    let Action::Run(mut plan) = session.handle(ArgsBuf::new(["SET", "a", &big]).args()) else {
        panic!("a plan");
    };
    assert!(!session.join(
        &mut plan,
        ArgsBuf::new(["SET", "b", &"w".repeat(100)]).args()
    ));
    assert!(session.join(&mut plan, ArgsBuf::new(["SET", "b", "w"]).args()));

    // Nothing joins an EXEC's plan, or a plan before authentication.
    let mut session = self::session();
    let _ = session.handle(ArgsBuf::new(["MULTI"]).args());
    let _ = session.handle(get.args());
    let Action::Run(mut plan) = session.handle(ArgsBuf::new(["EXEC"]).args()) else {
        panic!("a plan");
    };
    assert!(!session.join(&mut plan, get.args()));
    let mut session = with_password();
    assert!(matches!(session.handle(get.args()), Action::Reply(_)));
    assert!(!session.is_waiting());
}

#[test]
fn keys_only_written_blindly_are_not_read() {
    let mut session = session();
    let set = ArgsBuf::new(["SET", "a", "1"]);
    let Action::Run(mut plan) = session.handle(set.args()) else {
        panic!("a plan");
    };
    for args in [
        &["MSET", "b", "2", "c", "3"][..],
        &["SET", "b", "4", "GET"],
        &["SET", "d", "5", "NX"],
        &["SET", "a", "6"],
        &["INCR", "e"],
        &["SET", "e", "7"],
    ] {
        assert!(session.join(&mut plan, ArgsBuf::new(args).args()));
    }
    // b, d and e are looked at by some command; a and c only written blindly.
    assert_eq!(plan.keys_to_read(), [&b"b"[..], b"d", b"e"]);
    assert_eq!(plan.keys_written_unread(), [&b"a"[..], b"c"]);
    let mut node = Node::default();
    node.keys.insert(b"a".to_vec(), (Some(b"old".to_vec()), 1));
    node.keys.insert(b"b".to_vec(), (Some(b"old".to_vec()), 1));
    let mut replies = Vec::new();
    session.complete(node.run(&plan), &mut replies);
    let text: Vec<u8> = replies
        .iter()
        .flat_map(|reply| {
            let mut out = Vec::new();
            reply.encode(ProtocolVersion::Resp2, &mut out);
            out
        })
        .collect();
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "+OK\r\n+OK\r\n$1\r\n2\r\n+OK\r\n+OK\r\n:1\r\n+OK\r\n"
    );
    let value = |key: &[u8]| node.keys[key].0.clone().unwrap();
    assert_eq!(value(b"a"), b"6");
    assert_eq!(value(b"b"), b"4");
    assert_eq!(value(b"c"), b"3");
    assert_eq!(value(b"e"), b"7");
}
