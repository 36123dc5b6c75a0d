use super::table::{COMMANDS, CommandSpec};
use super::*;
use crate::protocol::ArgsBuf;
use crate::reply::ProtocolVersion::{Resp2, Resp3};

/// Looks up and parses `args` as the session does.
fn run(args: &[&[u8]]) -> Result<Command, Reply> {
    let buf = ArgsBuf::new(args);
    let spec = lookup(buf.args())?;
    parse(spec, buf.args())
}

/// The error bytes of a request that must fail (lookup or parse).
fn error(args: &[&[u8]]) -> Vec<u8> {
    match run(args) {
        Err(reply) => reply.to_bytes(Resp2),
        Ok(command) => panic!("{args:?} parsed as {command:?}"),
    }
}

fn data(args: &[&[u8]]) -> DataCommand {
    match run(args) {
        Ok(Command::Data(command)) => command,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn v(bytes: &[u8]) -> Vec<u8> {
    bytes.to_vec()
}

#[test]
fn names_are_case_insensitive() {
    assert_eq!(data(&[b"gEt", b"k"]), DataCommand::Get { key: v(b"k") });
    assert!(matches!(
        run(&[b"Client", b"GetName"]),
        Ok(Command::Connection(ConnectionCommand::ClientGetName))
    ));
}

#[test]
fn unknown_commands() {
    assert_eq!(
        error(&[b"foo", b"bar", b"baz"]),
        b"-ERR unknown command 'foo', with args beginning with: 'bar' 'baz' \r\n"
    );
    assert_eq!(
        error(&[b"foo"]),
        b"-ERR unknown command 'foo', with args beginning with: \r\n"
    );
    // Quoted arguments stop once the list reaches 128 bytes, each cut to what is left.
    let a120 = vec![b'a'; 120];
    let mut expected = b"-ERR unknown command 'foo', with args beginning with: '".to_vec();
    expected.extend_from_slice(&a120);
    expected.extend_from_slice(b"' 'bcdef' \r\n");
    assert_eq!(
        error(&[b"foo", &a120, b"bcdefghijklmnopqrstu", b"more"]),
        expected
    );
    let a200 = vec![b'a'; 200];
    let mut expected = b"-ERR unknown command 'foo', with args beginning with: '".to_vec();
    expected.extend_from_slice(&a200[..128]);
    expected.extend_from_slice(b"' \r\n");
    assert_eq!(error(&[b"foo", &a200, b"bar"]), expected);
    // CR and LF become spaces; a NUL ends an argument (C strings).
    assert_eq!(
        error(&[b"f\r\noo", b"a\nb\0c", b"bar"]),
        b"-ERR unknown command 'f  oo', with args beginning with: 'a b' 'bar' \r\n"
    );
    // The name is cut at 128 bytes.
    let long_name = vec![b'x'; 300];
    let mut expected = b"-ERR unknown command '".to_vec();
    expected.extend_from_slice(&long_name[..128]);
    expected.extend_from_slice(b"', with args beginning with: \r\n");
    assert_eq!(error(&[&long_name]), expected);
}

#[test]
fn unknown_subcommands() {
    assert_eq!(
        error(&[b"client", b"foo"]),
        b"-ERR unknown subcommand 'foo'. Try CLIENT HELP.\r\n"
    );
    assert_eq!(
        error(&[b"Command", b"SetInfo", b"x"]),
        b"-ERR unknown subcommand 'SetInfo'. Try COMMAND HELP.\r\n"
    );
    assert_eq!(
        error(&[b"client", b"setinfo", b"lib-name", b"redis-py"]),
        b"-ERR unknown subcommand 'setinfo'. Try CLIENT HELP.\r\n"
    );
}

/// Argument lists of `argc` arguments for `spec` (its subcommand name included).
fn args_for(spec: &CommandSpec, argc: usize) -> Vec<Vec<u8>> {
    let mut args: Vec<Vec<u8>> = spec
        .name
        .split('|')
        .map(|part| part.as_bytes().to_vec())
        .collect();
    while args.len() < argc {
        args.push(b"x".to_vec());
    }
    args.truncate(argc);
    args
}

#[test]
fn arity_errors_for_every_command() {
    let mut checked = 0;
    let all = COMMANDS
        .iter()
        .chain(COMMANDS.iter().flat_map(|spec| spec.subcommands.iter()));
    for spec in all {
        let name_parts = spec.name.split('|').count();
        let arity = spec.arity.unsigned_abs() as usize;
        let mut wrong = Vec::new();
        if spec.arity > 0 {
            wrong.push(arity + 1);
            if arity > name_parts {
                wrong.push(arity - 1);
            }
        } else if arity > name_parts {
            wrong.push(arity - 1);
        }
        for argc in wrong {
            let args = args_for(spec, argc);
            let buf = ArgsBuf::new(&args);
            let expected = format!(
                "-ERR wrong number of arguments for '{}' command\r\n",
                spec.name
            );
            let reply = lookup(buf.args()).expect_err(spec.name);
            assert_eq!(
                String::from_utf8(reply.to_bytes(Resp2)).unwrap(),
                expected,
                "{} with {argc} arguments",
                spec.name
            );
            checked += 1;
        }
        // The right number is accepted by lookup (containers need a subcommand).
        if !spec.subcommands.is_empty() {
            continue;
        }
        let argc = arity.max(name_parts);
        assert!(
            lookup(ArgsBuf::new(args_for(spec, argc)).args()).is_ok(),
            "{}",
            spec.name
        );
    }
    assert!(checked >= 40, "{checked} arity checks");
    // A container without its subcommand: CLIENT needs one, COMMAND alone lists all.
    assert_eq!(
        error(&[b"CLIENT"]),
        b"-ERR wrong number of arguments for 'client' command\r\n"
    );
    assert!(matches!(
        run(&[b"COMMAND"]),
        Ok(Command::Connection(ConnectionCommand::CommandAll))
    ));
}

#[test]
fn run_time_arity_errors() {
    // PING's and MSET's table arity lets these through; the command refuses them.
    assert_eq!(
        error(&[b"PING", b"a", b"b"]),
        b"-ERR wrong number of arguments for 'ping' command\r\n"
    );
    assert_eq!(
        error(&[b"MSET", b"a", b"1", b"b"]),
        b"-ERR wrong number of arguments for 'mset' command\r\n"
    );
    assert_eq!(
        error(&[b"msetnx", b"a", b"1", b"b"]),
        b"-ERR wrong number of arguments for 'msetnx' command\r\n"
    );
}

fn set(args: &[&[u8]]) -> Result<(SetCondition, bool, SetExpiry), Vec<u8>> {
    let mut full: Vec<&[u8]> = vec![b"SET", b"k", b"v"];
    full.extend_from_slice(args);
    match run(&full) {
        Ok(Command::Data(DataCommand::Set {
            key,
            value,
            condition,
            get,
            expiry,
        })) => {
            assert_eq!((key, value), (v(b"k"), v(b"v")));
            Ok((condition, get, expiry))
        }
        Ok(other) => panic!("{other:?}"),
        Err(reply) => Err(reply.to_bytes(Resp2)),
    }
}

#[test]
fn set_options() {
    use SetCondition::{Always, IfAbsent, IfPresent};
    use SetExpiry::{At, Clear, Keep};
    let syntax = Err(b"-ERR syntax error\r\n".to_vec());
    let not_integer = Err(b"-ERR value is not an integer or out of range\r\n".to_vec());
    let time = |amount, millis, absolute| {
        At(ExpireTime {
            amount,
            millis,
            absolute,
            command: "set",
        })
    };
    for (options, expected) in [
        (&[][..], Ok((Always, false, Clear))),
        (&[&b"NX"[..]], Ok((IfAbsent, false, Clear))),
        (&[b"nx"], Ok((IfAbsent, false, Clear))),
        (&[b"XX"], Ok((IfPresent, false, Clear))),
        (&[b"GET"], Ok((Always, true, Clear))),
        (&[b"NX", b"GET"], Ok((IfAbsent, true, Clear))),
        (&[b"get", b"xx"], Ok((IfPresent, true, Clear))),
        (&[b"GET", b"GET"], Ok((Always, true, Clear))),
        (&[b"NX", b"NX"], Ok((IfAbsent, false, Clear))),
        (&[b"NX", b"XX"], syntax.clone()),
        (&[b"XX", b"NX"], syntax.clone()),
        (&[b"FOO"], syntax.clone()),
        (&[b"NXX"], syntax.clone()),
        (&[b"EX"], syntax.clone()),
        (&[b"EX", b"10", b"PX", b"10"], syntax.clone()),
        (&[b"KEEPTTL", b"EX", b"10"], syntax.clone()),
        (&[b"EX", b"10", b"KEEPTTL"], syntax.clone()),
        (&[b"PERSIST"], syntax.clone()),
        (&[b"EX", b"10"], Ok((Always, false, time(10, false, false)))),
        (&[b"px", b"10"], Ok((Always, false, time(10, true, false)))),
        (
            &[b"EXAT", b"10"],
            Ok((Always, false, time(10, false, true))),
        ),
        (
            &[b"PXAT", b"10", b"NX", b"GET"],
            Ok((IfAbsent, true, time(10, true, true))),
        ),
        (&[b"KEEPTTL"], Ok((Always, false, Keep))),
        (&[b"KEEPTTL", b"keepttl"], Ok((Always, false, Keep))),
        // A later time of the same option wins.
        (
            &[b"EX", b"10", b"EX", b"20"],
            Ok((Always, false, time(20, false, false))),
        ),
        (&[b"EX", b"x"], not_integer.clone()),
        // The time's range is checked when the command runs (it needs the time then).
        (&[b"EX", b"-1"], Ok((Always, false, time(-1, false, false)))),
        // Options are C strings to Redis: a NUL ends one.
        (&[b"NX\0junk"], Ok((IfAbsent, false, Clear))),
    ] {
        assert_eq!(set(options), expected, "SET k v {options:?}");
    }
}

#[test]
fn integer_arguments() {
    assert_eq!(
        data(&[b"INCR", b"k"]),
        DataCommand::IncrBy {
            key: v(b"k"),
            delta: 1
        }
    );
    assert_eq!(
        data(&[b"DECR", b"k"]),
        DataCommand::IncrBy {
            key: v(b"k"),
            delta: -1
        }
    );
    assert_eq!(
        data(&[b"INCRBY", b"k", b"-9223372036854775808"]),
        DataCommand::IncrBy {
            key: v(b"k"),
            delta: i64::MIN
        }
    );
    assert_eq!(
        data(&[b"DECRBY", b"k", b"5"]),
        DataCommand::IncrBy {
            key: v(b"k"),
            delta: -5
        }
    );
    for bad in [
        &b"x"[..],
        b"1.5",
        b" 1",
        b"+1",
        b"01",
        b"",
        b"99999999999999999999",
    ] {
        assert_eq!(
            error(&[b"INCRBY", b"k", bad]),
            b"-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(
            error(&[b"DECRBY", b"k", bad]),
            b"-ERR value is not an integer or out of range\r\n"
        );
    }
    assert_eq!(
        error(&[b"DECRBY", b"k", b"-9223372036854775808"]),
        b"-ERR decrement would overflow\r\n"
    );
}

#[test]
fn variadic_commands() {
    assert_eq!(
        data(&[b"DEL", b"a", b"b", b"a"]),
        DataCommand::Del {
            keys: vec![v(b"a"), v(b"b"), v(b"a")]
        }
    );
    assert_eq!(
        data(&[b"EXISTS", b"a"]),
        DataCommand::Exists {
            keys: vec![v(b"a")]
        }
    );
    assert_eq!(
        data(&[b"MGET", b"a", b"b"]),
        DataCommand::MGet {
            keys: vec![v(b"a"), v(b"b")]
        }
    );
    assert_eq!(
        data(&[b"MSET", b"a", b"1", b"b", b"2"]),
        DataCommand::MSet {
            pairs: vec![(v(b"a"), v(b"1")), (v(b"b"), v(b"2"))]
        }
    );
    assert_eq!(
        data(&[b"MSETNX", b"a", b"1"]),
        DataCommand::MSetNx {
            pairs: vec![(v(b"a"), v(b"1"))]
        }
    );
}

#[test]
fn select() {
    assert!(matches!(
        run(&[b"SELECT", b"0"]),
        Ok(Command::Connection(ConnectionCommand::Select))
    ));
    assert_eq!(
        error(&[b"SELECT", b"1"]),
        b"-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        error(&[b"SELECT", b"-1"]),
        b"-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        error(&[b"SELECT", b"x"]),
        b"-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        error(&[b"SELECT", b"2147483648"]),
        &b"-ERR value is out of range, value must between -2147483648 and 2147483647\r\n"[..]
    );
}

fn scan(args: &[&[u8]]) -> Result<ScanRequest, Vec<u8>> {
    let mut full: Vec<&[u8]> = vec![b"SCAN"];
    full.extend_from_slice(args);
    match run(&full) {
        Ok(Command::Keyspace(KeyspaceRequest::Scan(scan))) => Ok(scan),
        Ok(other) => panic!("{other:?}"),
        Err(reply) => Err(reply.to_bytes(Resp2)),
    }
}

#[test]
fn scan_options() {
    let plain = ScanRequest {
        cursor: 0,
        pattern: None,
        count: 10,
        type_name: None,
    };
    assert_eq!(scan(&[b"0"]), Ok(plain.clone()));
    assert_eq!(
        scan(&[
            b"17", b"MATCH", b"user:*", b"count", b"100", b"TYPE", b"string"
        ]),
        Ok(ScanRequest {
            cursor: 17,
            pattern: Some(v(b"user:*")),
            count: 100,
            type_name: Some(v(b"string")),
        })
    );
    assert_eq!(scan(&[b"0", b"MATCH", b"*"]), Ok(plain.clone()));
    assert_eq!(
        scan(&[b"0", b"COUNT", b"5", b"COUNT", b"7"]).map(|scan| scan.count),
        Ok(7)
    );
    assert_eq!(scan(&[b"-1"]).map(|scan| scan.cursor), Ok(u64::MAX));
    let syntax = Err(b"-ERR syntax error\r\n".to_vec());
    assert_eq!(scan(&[b"0", b"COUNT", b"0"]), syntax);
    assert_eq!(scan(&[b"0", b"COUNT", b"-1"]), syntax);
    assert_eq!(scan(&[b"0", b"MATCH"]), syntax);
    assert_eq!(scan(&[b"0", b"FOO", b"bar"]), syntax);
    assert_eq!(
        scan(&[b"0", b"COUNT", b"x"]),
        Err(b"-ERR value is not an integer or out of range\r\n".to_vec())
    );
    for cursor in [&b"x"[..], b" 1", b"18446744073709551616"] {
        assert_eq!(scan(&[cursor]), Err(b"-ERR invalid cursor\r\n".to_vec()));
    }
    // A bad cursor is reported before bad options.
    assert_eq!(
        scan(&[b"x", b"FOO"]),
        Err(b"-ERR invalid cursor\r\n".to_vec())
    );
}

#[test]
fn scan_matching() {
    let mut scan = scan(&[b"0", b"MATCH", b"a*"]).unwrap();
    assert!(scan.matches(b"abc"));
    assert!(!scan.matches(b"bc"));
    scan.type_name = Some(v(b"STRING"));
    assert!(scan.matches(b"abc"));
    scan.type_name = Some(v(b"hash"));
    assert!(!scan.matches(b"abc"));
    assert!(!scan.type_matches());
    assert_eq!(
        ScanRequest::reply(42, vec![v(b"a"), v(b"b")]).to_bytes(Resp2),
        b"*2\r\n$2\r\n42\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        ScanRequest::reply(0, Vec::new()).to_bytes(Resp3),
        b"*2\r\n$1\r\n0\r\n*0\r\n"
    );
}

#[test]
fn keyspace_and_info_commands() {
    assert_eq!(
        run(&[b"DBSIZE"]),
        Ok(Command::Keyspace(KeyspaceRequest::DbSize))
    );
    assert_eq!(
        run(&[b"KEYS", b"h?llo"]),
        Ok(Command::Keyspace(KeyspaceRequest::Keys {
            pattern: v(b"h?llo")
        }))
    );
    assert!(matches!(run(&[b"INFO", b"server"]), Ok(Command::Info(_))));
    assert_eq!(
        run(&[b"FERROTX", b"copies"]),
        Ok(Command::Admin(AdminRequest::Copies))
    );
}

fn hello(args: &[&[u8]]) -> Result<HelloCommand, Vec<u8>> {
    let mut full: Vec<&[u8]> = vec![b"HELLO"];
    full.extend_from_slice(args);
    match run(&full) {
        Ok(Command::Connection(ConnectionCommand::Hello(hello))) => Ok(hello),
        Ok(other) => panic!("{other:?}"),
        Err(reply) => Err(reply.to_bytes(Resp2)),
    }
}

#[test]
fn hello_arguments() {
    assert_eq!(
        hello(&[]),
        Ok(HelloCommand {
            version: None,
            options: vec![]
        })
    );
    assert_eq!(
        hello(&[b"3", b"auth", b"default", b"pw", b"SETNAME", b"me"]),
        Ok(HelloCommand {
            version: Some(ProtocolVersion::Resp3),
            options: vec![
                HelloOption::Auth {
                    username: v(b"default"),
                    password: v(b"pw")
                },
                HelloOption::SetName(v(b"me")),
            ]
        })
    );
    assert_eq!(
        hello(&[b"2", b"AUTH", b"default"]),
        Ok(HelloCommand {
            version: Some(ProtocolVersion::Resp2),
            options: vec![HelloOption::Invalid(v(b"AUTH"))]
        })
    );
    assert_eq!(
        hello(&[b"4"]),
        Err(b"-NOPROTO unsupported protocol version\r\n".to_vec())
    );
    assert_eq!(
        hello(&[b"1"]),
        Err(b"-NOPROTO unsupported protocol version\r\n".to_vec())
    );
    assert_eq!(
        hello(&[b"x"]),
        Err(b"-ERR Protocol version is not an integer or out of range\r\n".to_vec())
    );
    assert_eq!(
        hello(&[b"AUTH", b"default", b"pw"]),
        Err(b"-ERR Protocol version is not an integer or out of range\r\n".to_vec())
    );
}

#[test]
fn auth_arguments() {
    assert_eq!(
        run(&[b"AUTH", b"pw"]),
        Ok(Command::Connection(ConnectionCommand::Auth {
            username: None,
            password: v(b"pw")
        }))
    );
    assert_eq!(
        run(&[b"AUTH", b"u", b"pw"]),
        Ok(Command::Connection(ConnectionCommand::Auth {
            username: Some(v(b"u")),
            password: v(b"pw")
        }))
    );
    assert_eq!(
        error(&[b"AUTH", b"a", b"b", b"c"]),
        b"-ERR syntax error\r\n"
    );
}

#[test]
fn client_names() {
    assert!(valid_client_name(b""));
    assert!(valid_client_name(b"worker-1!~"));
    assert!(!valid_client_name(b"a b"));
    assert!(!valid_client_name(b"a\nb"));
    assert!(!valid_client_name(b"\xc3\xa9"));
    assert_eq!(
        error(&[b"CLIENT", b"SETNAME", b"a b"]),
        b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
}

#[test]
fn command_info_matches_redis() {
    let get_and_mset = introspection::info_of(&[v(b"get"), v(b"MSET")]);
    assert_eq!(
        get_and_mset.to_bytes(Resp2),
        &b"*2\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*3\r\n\
           +@read\r\n+@string\r\n+@fast\r\n*0\r\n*1\r\n*6\r\n$5\r\nflags\r\n*2\r\n+RO\r\n\
           +access\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n\
           *2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n\
           $4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n\
           :0\r\n*0\r\n*10\r\n$4\r\nmset\r\n:-3\r\n*2\r\n+write\r\n+denyoom\r\n:1\r\n:-1\r\n\
           :2\r\n*3\r\n+@write\r\n+@string\r\n+@slow\r\n*2\r\n$26\r\n\
           request_policy:multi_shard\r\n$29\r\nresponse_policy:all_succeeded\r\n*1\r\n*6\r\n\
           $5\r\nflags\r\n*2\r\n+OW\r\n+update\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n\
           $5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n\
           $4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:-1\r\n$7\r\n\
           keystep\r\n:2\r\n$5\r\nlimit\r\n:0\r\n*0\r\n"[..]
    );
    let set = introspection::info_of(&[v(b"set")]);
    assert_eq!(
        set.to_bytes(Resp3),
        &b"*1\r\n*10\r\n$3\r\nset\r\n:-3\r\n~2\r\n+write\r\n+denyoom\r\n:1\r\n:1\r\n:1\r\n~3\r\n\
           +@write\r\n+@string\r\n+@slow\r\n~0\r\n~1\r\n%4\r\n$5\r\nnotes\r\n$48\r\n\
           RW and ACCESS due to the optional `GET` argument\r\n$5\r\nflags\r\n~4\r\n+RW\r\n\
           +access\r\n+update\r\n+variable_flags\r\n$12\r\nbegin_search\r\n%2\r\n$4\r\ntype\r\n\
           $5\r\nindex\r\n$4\r\nspec\r\n%1\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n%2\r\n\
           $4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n%3\r\n$7\r\nlastkey\r\n:0\r\n$7\r\n\
           keystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n~0\r\n"[..]
    );
    let sub = introspection::info_of(&[v(b"client|setname"), v(b"nosuch")]);
    assert_eq!(
        sub.to_bytes(Resp2),
        &b"*2\r\n*10\r\n$14\r\nclient|setname\r\n:3\r\n*3\r\n+noscript\r\n+loading\r\n\
           +stale\r\n:0\r\n:0\r\n:0\r\n*2\r\n+@slow\r\n+@connection\r\n*0\r\n*0\r\n*0\r\n\
           $-1\r\n"[..]
    );
}

#[test]
fn command_docs_match_redis_for_commands_without_arguments() {
    let docs = introspection::docs_of(&[v(b"quit"), v(b"nosuch"), v(b"multi")]);
    assert_eq!(
        docs.to_bytes(Resp2),
        &b"*4\r\n$4\r\nquit\r\n*8\r\n$7\r\nsummary\r\n$20\r\nClose the connection\r\n$5\r\n\
           since\r\n$5\r\n1.0.0\r\n$5\r\ngroup\r\n$10\r\nconnection\r\n$10\r\ncomplexity\r\n\
           $4\r\nO(1)\r\n$5\r\nmulti\r\n*8\r\n$7\r\nsummary\r\n$37\r\n\
           Mark the start of a transaction block\r\n$5\r\nsince\r\n$5\r\n1.2.0\r\n$5\r\n\
           group\r\n$12\r\ntransactions\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n"[..]
    );
    let Reply::Map(all) = introspection::docs_of(&[]) else {
        panic!("a map");
    };
    assert_eq!(all.len(), COMMANDS.len());
    // Containers document their subcommands (redis-cli counts them).
    let Reply::Map(client) = introspection::docs_of(&[v(b"client")]) else {
        panic!("a map");
    };
    let Reply::Map(fields) = &client[0].1 else {
        panic!("a map");
    };
    assert_eq!(fields.last().unwrap().0, Reply::bulk_static("subcommands"));
}

#[test]
fn command_listing() {
    assert_eq!(
        introspection::count(),
        Reply::Integer(COMMANDS.len() as i64)
    );
    assert_eq!(COMMANDS.len(), 50);
    let Reply::Array(all) = introspection::all_commands() else {
        panic!("an array");
    };
    assert_eq!(all.len(), COMMANDS.len());
    assert_eq!(introspection::info_of(&[]), introspection::all_commands());
    assert_eq!(lookup_by_name(b"GET").map(|spec| spec.name), Some("get"));
    assert_eq!(
        lookup_by_name(b"client").map(|spec| spec.name),
        Some("client")
    );
    assert_eq!(
        lookup_by_name(b"CLIENT|GETNAME").map(|spec| spec.name),
        Some("client|getname")
    );
    assert!(lookup_by_name(b"get|x").is_none());
    assert!(lookup_by_name(b"client|x").is_none());
    assert!(lookup_by_name(b"client|id|x").is_none());
    assert!(lookup_by_name(b"").is_none());
}

#[test]
fn table_metadata() {
    let get = lookup_by_name(b"get").unwrap();
    assert!(get.is_readonly() && get.is_fast() && !get.is_write());
    let set = lookup_by_name(b"set").unwrap();
    assert!(set.is_write() && !set.is_fast());
    assert_eq!(set.key_positions(), (1, 1, 1));
    assert_eq!(lookup_by_name(b"mset").unwrap().key_positions(), (1, -1, 2));
    assert_eq!(lookup_by_name(b"ping").unwrap().key_positions(), (0, 0, 0));
    for name in [&b"auth"[..], b"hello", b"quit"] {
        assert!(lookup_by_name(name).unwrap().allowed_without_auth());
    }
    assert!(!get.allowed_without_auth());
    // Names are unique and lower case; ids belong to one entry each.
    let all: Vec<&CommandSpec> = COMMANDS
        .iter()
        .chain(COMMANDS.iter().flat_map(|spec| spec.subcommands.iter()))
        .collect();
    for (index, spec) in all.iter().enumerate() {
        assert_eq!(spec.name, spec.name.to_lowercase());
        assert!(!spec.docs.summary.is_empty(), "{}", spec.name);
        for other in &all[index + 1..] {
            assert_ne!(spec.name, other.name);
            assert_ne!(spec.id, other.id);
        }
    }
}
