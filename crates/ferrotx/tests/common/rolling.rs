//! A light write load whose every acknowledged write can be read back: writers
//! alternating SETs of new keys and INCRs of one counter, over keys written first
//! (kill_under_load.rs, domain_kill.rs).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ferrotx_redis_exec::RespValue;

use super::client::{Conn, call_until_answered, certainly_no_effect, cmd, integer_of};

/// What each writer waits between its writes.
const WRITE_PAUSE: Duration = Duration::from_millis(2);
/// The key every writer increments too (a hot key: its increments run at its primary).
const COUNTER: &str = "rolling:counter";

/// What the light load's writers share.
pub struct Rolling {
    addrs: Vec<SocketAddr>,
    /// Keys written before the load: `preloaded:<i>` = `i` for `i` below it.
    preloaded: u64,
    stop: AtomicBool,
    /// Which round of kills the cluster is in (0 before the first).
    pub round: AtomicU8,
    /// Acknowledged SETs: key, value, and the round they were acknowledged in.
    acked: Mutex<Vec<(String, String, u8)>>,
    /// SETs whose outcome is unknown.
    uncertain: AtomicU64,
    /// The largest value an acknowledged INCR of `COUNTER` returned, and how many INCRs
    /// may have taken effect (acknowledged or of unknown outcome).
    counter_acked: AtomicI64,
    counter_maybe: AtomicI64,
    problems: Mutex<Vec<String>>,
}

impl Rolling {
    /// Writes `preloaded` keys through `addrs[0]` and waits until every node of `addrs`
    /// serves them; returns the load's state, no writer running yet.
    pub fn preload(addrs: &[SocketAddr], preloaded: u64) -> Arc<Self> {
        assert!(preloaded > 0);
        for chunk in (0..preloaded).collect::<Vec<_>>().chunks(50) {
            let mut mset = vec![b"MSET".to_vec()];
            for &i in chunk {
                mset.push(format!("preloaded:{i}").into_bytes());
                mset.push(i.to_string().into_bytes());
            }
            assert_eq!(call_until_answered(addrs[0], &mset), RespValue::ok());
        }
        let last = cmd(&[&"GET", &format!("preloaded:{}", preloaded - 1)]);
        for &addr in addrs {
            let value = call_until_answered(addr, &last);
            assert_eq!(integer_of(&value), Some(preloaded as i64 - 1), "{value:?}");
        }
        Arc::new(Self {
            addrs: addrs.to_vec(),
            preloaded,
            stop: AtomicBool::new(false),
            round: AtomicU8::new(0),
            acked: Mutex::new(Vec::new()),
            uncertain: AtomicU64::new(0),
            counter_acked: AtomicI64::new(0),
            counter_maybe: AtomicI64::new(0),
            problems: Mutex::new(Vec::new()),
        })
    }

    /// Starts the writers numbered `writers` (each number once over the load's life: it
    /// names the writer's keys).
    pub fn start(self: &Arc<Self>, writers: std::ops::Range<usize>) -> Vec<JoinHandle<()>> {
        writers
            .map(|writer| {
                let load = self.clone();
                std::thread::spawn(move || rolling_writer(&load, writer))
            })
            .collect()
    }

    /// Stops the `writers` (each ends after its write in flight) and waits for them; the
    /// load can be started again with other writers.
    pub fn stop(&self, writers: Vec<JoinHandle<()>>) {
        self.stop.store(true, Ordering::SeqCst);
        for writer in writers {
            writer.join().expect("a writer panicked");
        }
        self.stop.store(false, Ordering::SeqCst);
    }

    /// Acknowledged SETs in each of rounds `0..rounds`.
    pub fn acknowledged_per_round(&self, rounds: u8) -> Vec<usize> {
        let acked = self.acked.lock().unwrap();
        (0..rounds)
            .map(|r| acked.iter().filter(|(_, _, round)| *round == r).count())
            .collect()
    }

    /// With no writer running: panics if a writer got a reply no correct server sends, if
    /// an acknowledged write (the preloaded keys, the acknowledged SETs) does not read back
    /// through the nodes of `through` (taken in turn), or if the counter is not between its
    /// last acknowledged value and the increments that may have taken effect. `why` says
    /// what makes a loss likely (what the nodes went through). Returns a summary.
    pub fn check_read_back(&self, through: &[SocketAddr], why: &str) -> String {
        let problems = self.problems.lock().unwrap().clone();
        assert!(problems.is_empty(), "while running: {problems:#?}");
        let acked = self.acked.lock().unwrap().clone();
        let mut expected: Vec<(String, String)> = (0..self.preloaded)
            .map(|i| (format!("preloaded:{i}"), i.to_string()))
            .collect();
        expected.extend(acked.iter().map(|(k, v, _)| (k.clone(), v.clone())));
        let mut lost = Vec::new();
        for (i, chunk) in expected.chunks(500).enumerate() {
            let mut mget = vec![b"MGET".to_vec()];
            mget.extend(chunk.iter().map(|(k, _)| k.clone().into_bytes()));
            let RespValue::Array(values) = call_until_answered(through[i % through.len()], &mget)
            else {
                panic!("MGET answered no array");
            };
            for ((key, value), read) in chunk.iter().zip(&values) {
                if read.as_bytes() != Some(value.as_bytes()) {
                    lost.push(format!("{key}: wrote {value}, read {read:?}"));
                }
            }
        }
        let counter = integer_of(&call_until_answered(through[0], &cmd(&[&"GET", &COUNTER])));
        let (counter_acked, counter_maybe) = (
            self.counter_acked.load(Ordering::SeqCst),
            self.counter_maybe.load(Ordering::SeqCst),
        );
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged writes lost ({why}), the first: {:#?}",
            lost.len(),
            expected.len(),
            &lost[..lost.len().min(20)]
        );
        let counter = counter.expect("the counter is an integer");
        assert!(
            (counter_acked..=counter_maybe).contains(&counter),
            "the counter is {counter}: an increment acknowledged it at {counter_acked}, and at \
             most {counter_maybe} increments may have taken effect"
        );
        format!(
            "{} keys preloaded and {} SETs acknowledged read back, {} SETs of unknown \
             outcome; counter {counter} (acknowledged up to {counter_acked}, at most \
             {counter_maybe} increments)",
            self.preloaded,
            acked.len(),
            self.uncertain.load(Ordering::SeqCst),
        )
    }
}

/// One writer of the light load: SETs of new keys `rolling:<writer>:<n>` and INCRs of
/// `COUNTER`, alternately, through one connection, replaced (another node first) once it
/// fails.
fn rolling_writer(load: &Rolling, writer: usize) {
    let mut conn: Option<Conn> = None;
    let mut preferred = writer;
    let mut n = 0u64;
    while !load.stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            let count = load.addrs.len();
            conn = (0..count).find_map(|i| Conn::open(load.addrs[(preferred + i) % count]));
            preferred += 1;
            if conn.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        let increment = n % 2 == 1;
        let (key, value) = (format!("rolling:{writer}:{n}"), n.to_string());
        let command = if increment {
            cmd(&[&"INCR", &COUNTER])
        } else {
            cmd(&[&"SET", &key, &value])
        };
        let round = load.round.load(Ordering::SeqCst);
        let keep = match (increment, c.call(command)) {
            (false, Ok(RespValue::Simple(ok))) if ok == b"OK" => {
                load.acked.lock().unwrap().push((key, value, round));
                true
            }
            (true, Ok(RespValue::Integer(value))) => {
                load.counter_acked.fetch_max(value, Ordering::SeqCst);
                load.counter_maybe.fetch_add(1, Ordering::SeqCst);
                true
            }
            (_, Ok(RespValue::Error(e))) if certainly_no_effect(&e) => true,
            (_, Ok(RespValue::Error(_)) | Err(_)) => {
                if increment {
                    load.counter_maybe.fetch_add(1, Ordering::SeqCst);
                } else {
                    load.uncertain.fetch_add(1, Ordering::SeqCst);
                }
                false
            }
            (_, Ok(other)) => {
                load.problems.lock().unwrap().push(format!(
                    "{} answered {other:?}",
                    if increment { "INCR" } else { "SET" }
                ));
                false
            }
        };
        if !keep {
            conn = None;
        }
        n += 1;
        std::thread::sleep(WRITE_PAUSE);
    }
}
