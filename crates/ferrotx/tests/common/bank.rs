//! A bank under transfers (hostile_cluster.rs): `accounts` accounts, client threads moving
//! money between them with MULTI / DECRBY / INCRBY / EXEC through every node, each
//! transfer's effect kept once acknowledged (or as of unknown outcome), and audits that
//! read every balance in one MULTI/EXEC and must see all the money. Every error a client
//! sees is recorded: under attacks that do not hold the cluster key there should be none.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrotx_redis_exec::RespValue;

use super::client::{Conn, call_until_answered, certainly_no_effect, cmd, integer_of, text};

/// Balance of every account before the first transfer.
pub const INITIAL: i64 = 1_000;
/// One operation in this many of a client is an audit.
const AUDIT_EVERY: u64 = 10;
/// Most transfers of unknown outcome whose subsets the final check searches.
const UNCERTAIN_MAX: usize = 16;

/// What the bank's clients share.
pub struct Bank {
    addrs: Vec<SocketAddr>,
    accounts: u64,
    start: Instant,
    stop: AtomicBool,
    /// Per account, the sum of the acknowledged transfers' effects.
    acknowledged: Mutex<Vec<i64>>,
    /// Transfers of unknown outcome: from, to, amount.
    uncertain: Mutex<Vec<(u64, u64, i64)>>,
    transfers: AtomicU64,
    audits: AtomicU64,
    /// Every error reply and lost connection, with when (seconds since the start).
    errors: Mutex<Vec<String>>,
    /// Replies no correct server sends (an audit short of money, a malformed EXEC).
    problems: Mutex<Vec<String>>,
}

fn account(i: u64) -> String {
    format!("bank:{i}")
}

impl Bank {
    /// Opens `accounts` accounts of `INITIAL` through `addrs[0]`, waits until every node
    /// serves them; no client runs yet.
    pub fn open(addrs: &[SocketAddr], accounts: u64) -> Arc<Self> {
        let mut mset = vec![b"MSET".to_vec()];
        for i in 0..accounts {
            mset.push(account(i).into_bytes());
            mset.push(INITIAL.to_string().into_bytes());
        }
        assert_eq!(call_until_answered(addrs[0], &mset), RespValue::ok());
        let bank = Arc::new(Self {
            addrs: addrs.to_vec(),
            accounts,
            start: Instant::now(),
            stop: AtomicBool::new(false),
            acknowledged: Mutex::new(vec![0; accounts as usize]),
            uncertain: Mutex::new(Vec::new()),
            transfers: AtomicU64::new(0),
            audits: AtomicU64::new(0),
            errors: Mutex::new(Vec::new()),
            problems: Mutex::new(Vec::new()),
        });
        for &addr in addrs {
            let balances = bank.balances(addr);
            assert!(balances.iter().all(|&b| b == INITIAL), "{balances:?}");
        }
        bank
    }

    /// Starts `clients` client threads, client `c` through node `c % nodes`.
    pub fn start(self: &Arc<Self>, clients: usize) -> Vec<JoinHandle<()>> {
        (0..clients)
            .map(|c| {
                let bank = self.clone();
                std::thread::spawn(move || bank.client(c))
            })
            .collect()
    }

    /// Stops the clients (each after its operation in flight) and waits for them.
    pub fn stop(&self, clients: Vec<JoinHandle<()>>) {
        self.stop.store(true, Ordering::SeqCst);
        for client in clients {
            client.join().expect("a bank client panicked");
        }
    }

    /// Transfers acknowledged so far.
    pub fn transfers(&self) -> u64 {
        self.transfers.load(Ordering::SeqCst)
    }

    /// Errors the clients saw so far.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// Every balance, read in one MULTI/EXEC through `addr` (retried until answered).
    pub fn balances(&self, addr: SocketAddr) -> Vec<i64> {
        let deadline = Instant::now() + super::nodes::MEMBERSHIP_DEADLINE;
        loop {
            if let Some(mut conn) = Conn::open(addr)
                && let Ok(replies) = conn.pipeline(&self.audit_commands())
                && let Some(RespValue::Array(values)) = replies.last()
                && let Some(balances) = values.iter().map(integer_of).collect::<Option<Vec<_>>>()
            {
                return balances;
            }
            assert!(Instant::now() < deadline, "no balances through {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn audit_commands(&self) -> Vec<Vec<Vec<u8>>> {
        let mut commands = vec![cmd(&[&"MULTI"])];
        commands.extend((0..self.accounts).map(|i| cmd(&[&"GET", &account(i)])));
        commands.push(cmd(&[&"EXEC"]));
        commands
    }

    fn error(&self, client: usize, what: String) {
        let at = self.start.elapsed().as_secs_f64();
        self.errors
            .lock()
            .unwrap()
            .push(format!("{at:.2} s, client {client}: {what}"));
    }

    fn problem(&self, what: String) {
        self.problems.lock().unwrap().push(what);
    }

    /// One client: transfers and audits through its node until told to stop, over a
    /// connection opened again (to the same node) whenever one fails.
    fn client(&self, client: usize) {
        let addr = self.addrs[client % self.addrs.len()];
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (client as u64 + 1).wrapping_mul(0x2545_f491);
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut conn: Option<Conn> = None;
        let mut done = 0u64;
        while !self.stop.load(Ordering::SeqCst) {
            let Some(c) = conn.as_mut() else {
                conn = Conn::open(addr);
                if conn.is_none() {
                    self.error(client, format!("cannot connect to {addr}"));
                    std::thread::sleep(Duration::from_millis(50));
                }
                continue;
            };
            let keep = if done % AUDIT_EVERY == AUDIT_EVERY - 1 {
                self.audit(client, c)
            } else {
                let from = next() % self.accounts;
                let to = (from + 1 + next() % (self.accounts - 1)) % self.accounts;
                let amount = 1 + (next() % 50) as i64;
                self.transfer(client, c, from, to, amount)
            };
            if !keep {
                conn = None;
            }
            done += 1;
        }
    }

    /// MULTI, DECRBY from, INCRBY to, EXEC; false if the connection is to be replaced.
    fn transfer(&self, client: usize, c: &mut Conn, from: u64, to: u64, amount: i64) -> bool {
        let amount_text = amount.to_string();
        let replies = c.pipeline(&[
            cmd(&[&"MULTI"]),
            cmd(&[&"DECRBY", &account(from), &amount_text]),
            cmd(&[&"INCRBY", &account(to), &amount_text]),
            cmd(&[&"EXEC"]),
        ]);
        let uncertain = |what: String| {
            self.uncertain.lock().unwrap().push((from, to, amount));
            self.error(client, format!("transfer: {what}"));
            false
        };
        let replies = match replies {
            Ok(replies) => replies,
            Err(e) => return uncertain(e.to_string()),
        };
        match &replies[3] {
            RespValue::Array(results)
                if matches!(
                    results.as_slice(),
                    [RespValue::Integer(_), RespValue::Integer(_)]
                ) =>
            {
                let mut acknowledged = self.acknowledged.lock().unwrap();
                acknowledged[from as usize] -= amount;
                acknowledged[to as usize] += amount;
                self.transfers.fetch_add(1, Ordering::SeqCst);
                true
            }
            RespValue::Error(e) if certainly_no_effect(e) => {
                self.error(client, format!("transfer (no effect): {}", text(e)));
                true
            }
            RespValue::Error(e) => uncertain(text(e)),
            other => {
                self.problem(format!("transfer EXEC answered {other:?} ({replies:?})"));
                uncertain(format!("{other:?}"))
            }
        }
    }

    /// Every balance in one MULTI/EXEC: all the money must be there.
    fn audit(&self, client: usize, c: &mut Conn) -> bool {
        let replies = match c.pipeline(&self.audit_commands()) {
            Ok(replies) => replies,
            Err(e) => {
                self.error(client, format!("audit: {e}"));
                return false;
            }
        };
        match replies.last().unwrap() {
            RespValue::Array(values) => {
                let balances: Option<Vec<i64>> = values.iter().map(integer_of).collect();
                match balances {
                    Some(b) if b.iter().sum::<i64>() == self.total() => {
                        self.audits.fetch_add(1, Ordering::SeqCst);
                    }
                    _ => self.problem(format!("an audit read {values:?}")),
                }
                true
            }
            RespValue::Error(e) => {
                self.error(client, format!("audit: {}", text(e)));
                certainly_no_effect(e)
            }
            other => {
                self.problem(format!("audit EXEC answered {other:?}"));
                false
            }
        }
    }

    fn total(&self) -> i64 {
        self.accounts as i64 * INITIAL
    }

    /// With no client running: panics unless every balance read through `through` is its
    /// initial one plus every acknowledged transfer plus some subset of those of unknown
    /// outcome (so all the money is there), and no reply was one no correct server sends.
    /// Returns a summary.
    pub fn check(&self, through: SocketAddr) -> String {
        let problems = self.problems.lock().unwrap().clone();
        assert!(problems.is_empty(), "while running: {problems:#?}");
        let balances = self.balances(through);
        assert_eq!(
            balances.iter().sum::<i64>(),
            self.total(),
            "money not conserved: {balances:?}"
        );
        let acknowledged = self.acknowledged.lock().unwrap().clone();
        let uncertain = self.uncertain.lock().unwrap().clone();
        assert!(
            uncertain.len() <= UNCERTAIN_MAX,
            "{} transfers of unknown outcome; the first errors: {:#?}",
            uncertain.len(),
            &self.errors()[..self.errors().len().min(20)]
        );
        let residual: Vec<i64> = balances
            .iter()
            .zip(&acknowledged)
            .map(|(b, a)| b - INITIAL - a)
            .collect();
        let explained = (0u32..1 << uncertain.len()).any(|subset| {
            let mut r = residual.clone();
            for (i, &(from, to, amount)) in uncertain.iter().enumerate() {
                if subset & (1 << i) != 0 {
                    r[from as usize] += amount;
                    r[to as usize] -= amount;
                }
            }
            r.iter().all(|&x| x == 0)
        });
        assert!(
            explained,
            "the balances {balances:?} are not the acknowledged transfers plus some of the {} \
             of unknown outcome (unexplained per account: {residual:?})",
            uncertain.len()
        );
        format!(
            "{} transfers acknowledged and {} audits passed, {} of unknown outcome, {} client \
             errors; final balances sum to {}",
            self.transfers(),
            self.audits.load(Ordering::SeqCst),
            uncertain.len(),
            self.errors().len(),
            balances.iter().sum::<i64>()
        )
    }
}
