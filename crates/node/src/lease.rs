//! The lease thread: a node's membership state machine on a thread and UDP socket of its
//! own (FaRM 5.1), and what it shares with the worker threads.
//!
//! The thread owns the [`Membership`] state machine and the lease socket; the
//! coordination service belongs to a coordination thread of its own
//! ([`crate::coordination`]), which the thread hands the membership's calls and whose
//! answers it takes (so a slow disk or a lock held elsewhere never holds up a lease).
//! It publishes to the workers, through [`Link`], the view to
//! switch to (a generation counter they check once per loop iteration: one relaxed load),
//! the committed view id, and until when the node may serve (its lease). Workers report
//! the generation they switched to; once all have, the thread answers NEW-CONFIG-ACK.
//! Nothing here is on the data path: the workers read three atomics per iteration and
//! take the view's mutex only when its generation changes.
//!
//! FaRM keeps its lease manager on time with a dedicated thread at the highest priority,
//! its memory preallocated and its code paged in and pinned. This thread does what Linux
//! allows of that ([`LeaseTuning`]), each step where the process may and reported in
//! [`LeaseStatus`] either way:
//!
//! - **Memory locked.** Before the thread starts, the process locks its memory, once per
//!   process ([`MemoryLock`]): by default every page it maps stays in memory from its
//!   first touch, and its code is paged in now (`mlockall(MCL_CURRENT | MCL_FUTURE |
//!   MCL_ONFAULT)`, then `mlock` of every executable mapping), so that nothing the thread
//!   runs or touches is ever paged out; [`MemoryLock::All`] faults in every mapping
//!   when it is made as well (`mlockall(MCL_CURRENT | MCL_FUTURE)`), which makes the
//!   allocator's reserved arenas resident at once (measured: twice the memory). Only
//!   where locking cannot make a later allocation fail: with `CAP_IPC_LOCK` or no
//!   `RLIMIT_MEMLOCK` limit. Otherwise it logs once and locks nothing.
//! - **Real-time priority.** The thread asks for `SCHED_FIFO` (priority
//!   [`REALTIME_PRIORITY`]), so that busy workers cannot delay renewals past a lease.
//!   Without the privilege (`CAP_SYS_NICE`, or an `RLIMIT_RTPRIO` limit) it logs so and
//!   runs at normal priority: the default lease is long enough for that; short leases
//!   want the privilege.
//! - **No allocation.** Once the node is a member, renewing (a request, its grant and ack,
//!   the CM's grants, status and memory figures) allocates nothing on this thread: the
//!   buffers are made when it starts (`tests/lease_allocations.rs` counts).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrotx_cluster::{Configuration, CoordinationService, View};
use ferrotx_membership::{Action, MESSAGE_BYTES_MAX, Membership, Options, Phase, Stats};
use ferrotx_transport::Doorbell;
use ferrotx_wire::auth::TRAILER_BYTES;

use crate::coordination::{Answer, Call, CoordinationHealth, Coordinator, call_timeout};
use crate::keys::ClusterKeys;

/// How often the lease thread hands the node the members past their memory limits
/// ([`ferrotx_store::Memory::set_over_nodes`]): as often as the node refreshes its own
/// figures.
const OVER_NODES_NS: u64 = crate::core::MEMORY_REFRESH_NS;

/// The `SCHED_FIFO` priority the lease thread asks for: above every normal thread, and
/// below the kernel's own real-time threads (priority 50 and up on a `PREEMPT_RT` kernel)
/// and tools such as `cyclictest` (99), which must stay able to preempt it.
pub const REALTIME_PRIORITY: i32 = 10;

/// How a node process locks its memory for its lease thread (`--mlock`,
/// `FERROTX_MLOCK`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryLock {
    /// Nothing locked.
    Off,
    /// Every page locked from its first touch, the code paged in at once
    /// (`mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)`, `mlock` of the executable
    /// mappings): nothing is ever paged out, and nothing is made resident that would not
    /// be anyway.
    #[default]
    Fault,
    /// Every mapping faulted in and locked when it is made (`mlockall(MCL_CURRENT |
    /// MCL_FUTURE)`): no page fault after a mapping is made, but the allocator's reserved
    /// arenas become resident whole.
    All,
}

impl MemoryLock {
    /// The mode a word names: `0`, `off`, `false`, `no`; `fault`, `on`, `1`; `all`.
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim() {
            "0" | "off" | "false" | "no" => Some(Self::Off),
            "fault" | "on" | "1" | "true" | "yes" => Some(Self::Fault),
            "all" => Some(Self::All),
            _ => None,
        }
    }
}

/// What the lease thread does to stay on time (FaRM 5.1), each where Linux allows it.
/// By default both; `FERROTX_MLOCK` (`off`, `fault`, `all`) and `FERROTX_REALTIME=0`
/// change them ([`LeaseTuning::from_env`]), as do `--mlock` and `--no-realtime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseTuning {
    /// How the process's memory is locked before the lease thread starts, if the process
    /// may lock all it will ever map.
    pub lock_memory: MemoryLock,
    /// Run the lease thread at `SCHED_FIFO` priority [`REALTIME_PRIORITY`], if the process
    /// may.
    pub realtime: bool,
}

impl Default for LeaseTuning {
    fn default() -> Self {
        Self {
            lock_memory: MemoryLock::default(),
            realtime: true,
        }
    }
}

impl LeaseTuning {
    /// Neither step: a lease thread at normal priority in unlocked memory.
    pub const NONE: Self = Self {
        lock_memory: MemoryLock::Off,
        realtime: false,
    };

    /// The default, with the memory lock `FERROTX_MLOCK` names ([`MemoryLock::parse`];
    /// a word it does not know leaves the default) and real-time priority off if
    /// `FERROTX_REALTIME` is `0` (or `off`, `false`, `no`).
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`LeaseTuning::from_env`] with the variables `var` gives.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let off = |name: &str| {
            var(name).is_some_and(|v| matches!(v.trim(), "0" | "off" | "false" | "no"))
        };
        Self {
            lock_memory: var("FERROTX_MLOCK")
                .and_then(|v| MemoryLock::parse(&v))
                .unwrap_or_default(),
            realtime: !off("FERROTX_REALTIME"),
        }
    }
}

/// What the lease thread shares with the workers and the process.
pub struct Link {
    /// Grows with every view to switch to.
    generation: AtomicU64,
    /// The view of the current generation.
    view: Mutex<Option<Arc<View>>>,
    /// The id of the last committed view.
    committed: AtomicU64,
    /// Until when (nanoseconds since the node's epoch) the node may serve.
    serving_until: AtomicU64,
    /// The generation each worker switched to.
    switched: Box<[AtomicU64]>,
    /// The highest configuration id a worker heard of.
    newer: AtomicU64,
    /// This process was removed from the cluster.
    removed: AtomicBool,
    /// Tells the thread to stop.
    stop: AtomicBool,
    /// Wake sleeping workers on a switch.
    doorbells: Mutex<Vec<Arc<Doorbell>>>,
    /// Counters and phase, for status.
    status: Mutex<LeaseStatus>,
    /// The lease thread's id in the kernel (`gettid`), once it runs: for `chrt -p`, and for
    /// tests that count what it allocates.
    thread_id: AtomicI32,
    /// The node's core once its workers run: the lease thread reports its filled backups
    /// (data recovery) to the CM.
    core: Mutex<Option<crate::NodeCore>>,
    /// The node's memory budget ([`crate::NodeCore::memory`]), set with the core: the
    /// lease thread sends its figures with every lease request (and probe reply), for the
    /// CM's placement of new copies. Read without a lock.
    memory: OnceLock<Arc<ferrotx_store::Memory>>,
}

/// What the lease thread reports, for `status` and logs.
#[derive(Clone, Debug, Default)]
pub struct LeaseStatus {
    /// The membership state machine's counters.
    pub stats: Stats,
    /// The last view known.
    pub view: Option<View>,
    /// Where the node stands.
    pub phase: Option<Phase>,
    /// Whether the lease thread runs at real-time priority.
    pub realtime: bool,
    /// Whether the process's memory is locked (`mlockall`), current and future.
    pub memory_locked: bool,
    /// Page faults the lease thread took, minor (no disk) and major (read from disk), and
    /// the times the kernel switched it out while it could run (preempted), from
    /// `getrusage(RUSAGE_THREAD)` when the status was published.
    pub faults_minor: u64,
    /// Major page faults (see `faults_minor`).
    pub faults_major: u64,
    /// Involuntary context switches (see `faults_minor`).
    pub preempted: u64,
    /// The latest the lease thread woke after it meant to (a timeout due), in microseconds.
    pub max_wake_late_us: u64,
    /// The backups this node is filling (data recovery), with their progress.
    pub fills: Vec<ferrotx_txn::refill::FillProgress>,
    /// How the coordination service has been answering.
    pub coordination: CoordinationHealth,
    /// How long a coordination call may take before it is given up on, in milliseconds.
    pub coordination_timeout_ms: u64,
}

impl Link {
    fn new(threads: usize) -> Self {
        Self {
            generation: AtomicU64::new(0),
            view: Mutex::new(None),
            committed: AtomicU64::new(0),
            serving_until: AtomicU64::new(0),
            switched: (0..threads).map(|_| AtomicU64::new(0)).collect(),
            newer: AtomicU64::new(0),
            removed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            doorbells: Mutex::new(Vec::new()),
            status: Mutex::new(LeaseStatus::default()),
            thread_id: AtomicI32::new(0),
            core: Mutex::new(None),
            memory: OnceLock::new(),
        }
    }

    /// Gives the lease thread the node's core (its workers started), and with it the
    /// node's memory budget.
    pub(crate) fn set_core(&self, core: crate::NodeCore) {
        let _ = self.memory.set(core.memory().clone());
        *self.core.lock().expect("core lock") = Some(core);
    }

    /// The node's memory budget, once its core is set: the figures the lease thread sends.
    pub fn memory(&self) -> Option<&Arc<ferrotx_store::Memory>> {
        self.memory.get()
    }

    /// The current generation (one relaxed load; workers call it every iteration).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The view of the current generation.
    pub fn view(&self) -> Option<Arc<View>> {
        self.view.lock().expect("view lock").clone()
    }

    /// The id of the last committed view.
    #[inline]
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Until when the node may serve.
    #[inline]
    pub fn serving_until(&self) -> u64 {
        self.serving_until.load(Ordering::Relaxed)
    }

    /// Worker `thread` has switched to `generation`.
    pub fn switched(&self, thread: u16, generation: u64) {
        self.switched[usize::from(thread)].store(generation, Ordering::Release);
    }

    /// A worker heard of configuration `id`.
    pub fn heard_of(&self, id: u64) {
        self.newer.fetch_max(id, Ordering::Relaxed);
    }

    /// True once this process was removed from the cluster: it must stop.
    pub fn removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }

    /// The lease thread's id in the kernel (`gettid`); 0 until it runs.
    pub fn thread_id(&self) -> i32 {
        self.thread_id.load(Ordering::Acquire)
    }

    /// A copy of the lease thread's status.
    pub fn status(&self) -> LeaseStatus {
        self.status.lock().expect("status lock").clone()
    }

    /// Registers a worker's doorbell, rung on every switch.
    pub fn add_doorbell(&self, bell: Arc<Doorbell>) {
        self.doorbells.lock().expect("doorbells lock").push(bell);
    }
}

/// The running lease thread.
pub struct LeaseThread {
    link: Arc<Link>,
    thread: Option<JoinHandle<()>>,
    config: Arc<Configuration>,
    node: u16,
    incarnation: u64,
    epoch: Instant,
}

/// Why the lease thread could not start.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The node is not a member of the configuration file.
    #[error("node {0} is not in the configuration")]
    NotInConfiguration(u16),
    /// The coordination thread could not start.
    #[error("starting the coordination thread: {0}")]
    CoordinationThread(std::io::Error),
    /// Its lease socket could not be bound.
    #[error("binding the lease socket {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl LeaseThread {
    /// Starts the lease thread of life `incarnation` of node `node`, timing from `epoch`,
    /// tuned by `tuning` (memory locked first, if asked and allowed).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        config: Arc<Configuration>,
        node: u16,
        incarnation: u64,
        options: Options,
        coordination: Box<dyn CoordinationService + Send>,
        epoch: Instant,
        keys: Option<Arc<ClusterKeys>>,
        tuning: LeaseTuning,
    ) -> Result<Self, LeaseError> {
        let addr = config
            .lease_addr(node)
            .ok_or(LeaseError::NotInConfiguration(node))?;
        let socket = UdpSocket::bind(addr).map_err(|source| LeaseError::Bind { addr, source })?;
        let timeout_ns = call_timeout(&options).as_nanos() as u64;
        let coordination = Coordinator::start(coordination, node, timeout_ns)
            .map_err(LeaseError::CoordinationThread)?;
        let link = Arc::new(Link::new(usize::from(config.threads_per_node())));
        // Before the thread starts, so that its stack is locked and faulted in as well.
        let memory_locked = match tuning.lock_memory {
            MemoryLock::Off => memory_locked(),
            mode => lock_memory(mode),
        };
        let thread_link = link.clone();
        let thread_config = config.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ferrotx-lease-{node}"))
            .spawn(move || {
                // SAFETY: gettid takes no argument and cannot fail.
                let tid = unsafe { libc::gettid() };
                thread_link.thread_id.store(tid, Ordering::Release);
                let realtime = tuning.realtime && set_realtime_priority();
                let config = thread_config;
                let mut lease = LeaseLoop {
                    membership: Membership::new(node, incarnation, config.clone(), options, 0),
                    config,
                    socket,
                    coordination,
                    link: thread_link,
                    epoch,
                    out: Vec::with_capacity(MESSAGE_BYTES_MAX + TRAILER_BYTES),
                    // Any UDP datagram, so that none is cut to look like another.
                    buf: vec![0; 1 << 16],
                    keys,
                    keys_seen: 0,
                    pending_install: None,
                    reply_to: None,
                    heard: 0,
                    realtime,
                    memory_locked,
                    late_us: 0,
                    fills_reported: (0, 0),
                    status_due: false,
                    over_nodes_due: 0,
                };
                lease.run();
            })
            .expect("starting the lease thread");
        Ok(Self {
            link,
            thread: Some(thread),
            config,
            node,
            incarnation,
            epoch,
        })
    }

    /// The configuration file's cluster.
    pub fn config(&self) -> &Arc<Configuration> {
        &self.config
    }

    /// The node.
    pub fn node(&self) -> u16 {
        self.node
    }

    /// This process's life.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The instant its clock counts from.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// What it shares with the workers.
    pub fn link(&self) -> &Arc<Link> {
        &self.link
    }

    /// Waits until this node is admitted into a view (its first [`Action::Install`]), or
    /// `timeout` passes, or the process is removed.
    pub fn wait_admitted(&self, timeout: Duration) -> Option<Arc<View>> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.link.generation() > 0 {
                return self.link.view();
            }
            if self.thread.as_ref().is_none_or(JoinHandle::is_finished) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// Whether the thread has ended.
    pub fn has_ended(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for LeaseThread {
    fn drop(&mut self) {
        self.link.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct LeaseLoop {
    membership: Membership,
    config: Arc<Configuration>,
    socket: UdpSocket,
    /// The coordination thread, which makes the calls to the service.
    coordination: Coordinator,
    link: Arc<Link>,
    epoch: Instant,
    /// Preallocated buffers: an encoded message, a received datagram.
    out: Vec<u8>,
    buf: Vec<u8>,
    /// The keys lease datagrams are sealed and opened with, and their generation last
    /// given to the membership.
    keys: Option<Arc<ClusterKeys>>,
    keys_seen: u64,
    /// A view being switched to: its generation and id.
    pending_install: Option<(u64, u64)>,
    /// Where the datagram being handled came from.
    reply_to: Option<SocketAddr>,
    heard: u64,
    realtime: bool,
    memory_locked: bool,
    late_us: u64,
    /// The fills last reported to the membership: view id and fills done then.
    fills_reported: (u64, usize),
    /// A status to publish that a reader kept from being published.
    status_due: bool,
    /// When to give the node the members past their limits next (its clock).
    over_nodes_due: u64,
}

impl LeaseLoop {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn run(&mut self) {
        let mut last_status = 0;
        // Timeouts due before the thread ran (its start, the memory lock, counted from an
        // epoch taken before them) are no late wake-up.
        let running_since = self.now();
        // What it runs with (real-time priority, memory locked) is known from the start.
        let _ = self.publish_status();
        // Nonblocking: the loop waits in `ppoll`, whose timeout is precise, where a
        // socket's receive timeout is rounded up to the kernel's tick (4 ms at 250 Hz,
        // which would stretch a 2 ms renewal period to 8).
        let _ = self.socket.set_nonblocking(true);
        while !self.link.stop.load(Ordering::Relaxed) {
            let now = self.now();
            let heard = self.link.newer.load(Ordering::Relaxed);
            if heard > self.heard {
                self.heard = heard;
                self.membership.handle_newer_config(now, heard);
            }
            self.set_memory(now);
            if let Some(keys) = &self.keys {
                let generation = keys.generation();
                if generation != self.keys_seen {
                    self.keys_seen = generation;
                    self.membership.set_auth(keys.current());
                }
            }
            let due = self.membership.poll_timeout();
            if now >= due {
                if due >= running_since {
                    self.late_us = self.late_us.max((now - due) / 1_000);
                }
                self.membership.handle_timeout(now);
            }
            self.perform(now);
            self.take_answers(now);
            self.check_switched(now);
            self.report_fills(now);
            self.link
                .serving_until
                .store(self.membership.serving_until(), Ordering::Relaxed);
            if (now - last_status > 50_000_000 || self.status_due) && self.publish_status() {
                last_status = now;
                self.status_due = false;
            }
            // Wait for a datagram until the next timeout (at most 1 ms while workers
            // switch, so their acks are noticed soon; at most 20 ms otherwise).
            let now = self.now();
            let cap = if self.pending_install.is_some() {
                1_000_000
            } else {
                20_000_000
            };
            let due = match self.coordination.deadline_ns() {
                Some(deadline) => self.membership.poll_timeout().min(deadline),
                None => self.membership.poll_timeout(),
            };
            let wait = due.saturating_sub(now).min(cap);
            if wait > 0 && !self.wait_readable(wait) {
                continue;
            }
            // Take every datagram that arrived.
            let now = self.now();
            while let Ok((n, from)) = self.socket.recv_from(&mut self.buf) {
                self.membership.handle_datagram(now, &mut self.buf[..n]);
                self.reply_to = Some(from);
                self.perform(now);
            }
            self.reply_to = None;
        }
        // The last status, for whoever asks after the thread ended.
        while !self.publish_status() {
            std::thread::yield_now();
        }
    }

    /// Waits up to `timeout_ns` for the socket to be readable, or the coordination
    /// thread to bring an answer; false on timeout, or if only the answer came.
    fn wait_readable(&self, timeout_ns: u64) -> bool {
        let mut fds = [
            libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.coordination.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: `fds` and `timeout` are valid for the call; a null signal mask leaves
        // the thread's mask as it is.
        let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &timeout, std::ptr::null()) };
        r > 0 && fds[0].revents != 0
    }

    /// Hands the membership the coordination thread's answers, and the failures of calls
    /// past their deadline.
    fn take_answers(&mut self, now: u64) {
        while let Some(answer) = self.coordination.next_answer(now) {
            match answer {
                Answer::Read(result) => self.membership.handle_read(now, result),
                Answer::Cas(result) => self.membership.handle_cas(now, result),
            }
            self.perform(now);
            self.status_due = true;
        }
    }

    /// Gives the membership the node's memory figures (two relaxed loads), which every
    /// lease request and probe reply carries; none (0, 0) until the core is set. Every
    /// [`OVER_NODES_NS`], gives the node the members past their limits by the CM's figures.
    fn set_memory(&mut self, now: u64) {
        if let Some(memory) = self.link.memory.get() {
            self.membership
                .set_memory(memory.used(), memory.limit().unwrap_or(0));
            if now >= self.over_nodes_due {
                memory.set_over_nodes(&self.membership.members_over());
                self.over_nodes_due = now + OVER_NODES_NS;
            }
        }
    }

    /// Tells the membership which backups this node filled whole, when that changed.
    fn report_fills(&mut self, now: u64) {
        let Some(view) = self.membership.view() else {
            return;
        };
        // Never waiting for a lock another thread holds: a worker preempted while it
        // holds one would hold this real-time thread back past its lease. Busy: the
        // next iteration asks again.
        let link = self.link.clone();
        let Ok(core) = link.core.try_lock() else {
            return;
        };
        let Some(core) = core.as_ref() else {
            return;
        };
        let Some(done) = core.try_fills_done() else {
            return;
        };
        let seen = (view.id, done);
        if seen == self.fills_reported {
            return;
        }
        let filled = core.filled(view);
        for p in &filled {
            tracing::info!(
                node = core.id(),
                partition = p,
                view = view.id,
                "backup filled"
            );
        }
        self.fills_reported = seen;
        self.membership.handle_filled(now, &filled);
        self.perform(now);
    }

    /// Publishes the status for readers ([`Link::status`]); false if a reader held it
    /// (then nothing is published: this real-time thread never waits for a reader).
    fn publish_status(&self) -> bool {
        let Ok(mut status) = self.link.status.try_lock() else {
            return false;
        };
        status.stats = self.membership.stats();
        // The view is copied only when it changed (no allocation in the steady state).
        let id = self.membership.view().map(|v| v.id);
        if status.view.as_ref().map(|v| v.id) != id {
            status.view = self.membership.view().cloned();
        }
        status.phase = Some(self.membership.phase());
        status.realtime = self.realtime;
        status.memory_locked = self.memory_locked;
        status.max_wake_late_us = self.late_us;
        self.coordination.health_into(
            self.now(),
            self.membership.store_behind(),
            &mut status.coordination,
        );
        status.coordination_timeout_ms = self.coordination.timeout_ns() / 1_000_000;
        if let Some(usage) = thread_usage() {
            status.faults_minor = usage.ru_minflt as u64;
            status.faults_major = usage.ru_majflt as u64;
            status.preempted = usage.ru_nivcsw as u64;
        }
        if let Ok(core) = self.link.core.try_lock()
            && let Some(core) = core.as_ref()
        {
            // Left as it was if a worker holds the fills.
            let _ = core.try_fill_progress_into(&mut status.fills);
        }
        true
    }

    fn perform(&mut self, now: u64) {
        while let Some(action) = self.membership.poll_action() {
            match action {
                Action::Send { to, message } => {
                    // Nodes of the configuration at their lease address; anyone else (a
                    // `status` probe) at the address its datagram came from.
                    let Some(addr) = self.config.lease_addr(to).or(self.reply_to) else {
                        continue;
                    };
                    self.membership.encode(to, &message, &mut self.out);
                    let _ = self.socket.send_to(&self.out, addr);
                }
                Action::Read => self.coordination.call(now, Call::Read),
                Action::Cas { expected, next } => {
                    self.coordination.call(now, Call::Cas { expected, next });
                }
                Action::Install(view) => {
                    let id = view.id;
                    *self.link.view.lock().expect("view lock") = Some(Arc::new(view));
                    let generation = self.link.generation.fetch_add(1, Ordering::AcqRel) + 1;
                    self.pending_install = Some((generation, id));
                    for bell in self.link.doorbells.lock().expect("doorbells lock").iter() {
                        bell.ring();
                    }
                }
                Action::Commit(id) => {
                    self.link.committed.store(id, Ordering::Release);
                    for bell in self.link.doorbells.lock().expect("doorbells lock").iter() {
                        bell.ring();
                    }
                    self.status_due = !self.publish_status();
                }
                Action::Removed { .. } => {
                    self.link.removed.store(true, Ordering::Relaxed);
                    self.link.serving_until.store(0, Ordering::Relaxed);
                    self.status_due = !self.publish_status();
                }
            }
        }
    }

    /// Answers NEW-CONFIG-ACK once every worker switched to the pending view.
    fn check_switched(&mut self, now: u64) {
        let Some((generation, id)) = self.pending_install else {
            return;
        };
        if self
            .link
            .switched
            .iter()
            .all(|s| s.load(Ordering::Acquire) >= generation)
        {
            self.pending_install = None;
            self.membership.handle_installed(now, id);
            self.perform(now);
        }
    }
}

/// The calling thread's resource usage (page faults, context switches); `None` if the
/// kernel refuses (it does not on Linux).
fn thread_usage() -> Option<libc::rusage> {
    // SAFETY: `rusage` is plain integers, for which all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD fills the struct `usage` points to, which outlives the call.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    (r == 0).then_some(usage)
}

/// Whether this process locked its memory ([`lock_memory`] succeeded), for lives that
/// did not ask (the lock stays for the process's life).
static MEMORY_LOCKED: OnceLock<bool> = OnceLock::new();

/// Whether this process's memory is locked.
fn memory_locked() -> bool {
    MEMORY_LOCKED.get().copied().unwrap_or(false)
}

/// `CAP_IPC_LOCK` (linux/capability.h): locking memory past `RLIMIT_MEMLOCK`.
const CAP_IPC_LOCK: u32 = 14;

/// Whether this process has capability `cap` in its effective set (`CapEff` in
/// `/proc/self/status`); false if that cannot be read.
fn has_capability(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| effective_capabilities(&status))
        .is_some_and(|caps| caps >> cap & 1 == 1)
}

/// The `CapEff` mask of a `/proc/PID/status` text.
fn effective_capabilities(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// Why this process may not lock all its memory, current and future: without
/// `CAP_IPC_LOCK`, every mapping past `RLIMIT_MEMLOCK` would then fail (an allocation
/// failure, which aborts), so the limit must be infinite. `None` if it may.
fn lock_refusal() -> Option<String> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct `limit` points to, which outlives the call.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    if r == 0 && limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    if has_capability(CAP_IPC_LOCK) {
        return None;
    }
    Some(if r == 0 {
        format!(
            "RLIMIT_MEMLOCK is {} KiB and the process lacks CAP_IPC_LOCK: every allocation \
             past the limit would fail (ulimit -l unlimited, or the capability, allows it)",
            limit.rlim_cur / 1024
        )
    } else {
        "RLIMIT_MEMLOCK could not be read and the process lacks CAP_IPC_LOCK".to_string()
    })
}

/// Locks the process's memory as `mode` says, once per process (the first life's mode
/// holds for its later ones), if that cannot make a later allocation fail; true if it is
/// locked. Refused, it logs why once and locks nothing.
fn lock_memory(mode: MemoryLock) -> bool {
    *MEMORY_LOCKED.get_or_init(|| {
        if let Some(why) = lock_refusal() {
            tracing::warn!("lease thread: memory not locked: {why}");
            return false;
        }
        let started = Instant::now();
        let flags = match mode {
            MemoryLock::Off => return false,
            MemoryLock::Fault => libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT,
            MemoryLock::All => libc::MCL_CURRENT | libc::MCL_FUTURE,
        };
        // SAFETY: mlockall takes flags and touches no memory of ours.
        let r = unsafe { libc::mlockall(flags) };
        if r != 0 {
            tracing::warn!(
                "lease thread: memory not locked: mlockall: {}",
                std::io::Error::last_os_error()
            );
            return false;
        }
        let code = if mode == MemoryLock::Fault {
            page_in_code()
        } else {
            0
        };
        tracing::info!(
            ?mode,
            code_bytes = code,
            ms = started.elapsed().as_millis() as u64,
            "lease thread: process memory locked"
        );
        true
    })
}

/// Pages in and locks every executable file mapping of the process (its code and its
/// libraries'), as `mlockall(MCL_CURRENT)` without `MCL_ONFAULT` would, but nothing
/// else; returns the bytes locked. A mapping that cannot be locked is left as it is.
fn page_in_code() -> usize {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let mut locked = 0;
    for (start, end) in code_mappings(&maps) {
        // SAFETY: mlock only changes how the kernel holds the pages of a range this
        // process has mapped (read from /proc/self/maps just now); it touches no memory
        // of ours, and fails harmlessly if the range changed since.
        if unsafe { libc::mlock(start as *const libc::c_void, end - start) } == 0 {
            locked += end - start;
        }
    }
    locked
}

/// The address ranges of the executable file mappings in a `/proc/PID/maps` text (not
/// the kernel's `[vdso]` and such, which have no file).
fn code_mappings(maps: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    maps.lines().filter_map(|line| {
        let mut fields = line.split_whitespace();
        let range = fields.next()?;
        let perms = fields.next()?;
        let path = fields.nth(3)?;
        if !perms.contains('x') || !path.starts_with('/') {
            return None;
        }
        let (start, end) = range.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        (end > start).then_some((start, end))
    })
}

/// Asks for `SCHED_FIFO` at [`REALTIME_PRIORITY`] for the calling thread; false (and a
/// log line) where the process may not have it.
fn set_realtime_priority() -> bool {
    let param = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: `sched_setscheduler` with pid 0 changes the calling thread's policy and
    // reads `param`, a valid struct that outlives the call.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if r == 0 {
        true
    } else {
        tracing::info!(
            "lease thread: no real-time priority ({}); running at normal priority",
            std::io::Error::last_os_error()
        );
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_capabilities_are_read_from_the_status_text() {
        let status = "Name:\tferrotx\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\n\
                      CapEff:\t0000000000004000\nCapBnd:\t000001fffeffffff\n";
        let caps = effective_capabilities(status).unwrap();
        assert_eq!(caps >> CAP_IPC_LOCK & 1, 1);
        assert_eq!(caps >> 13 & 1, 0);
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
        assert_eq!(effective_capabilities("CapEff:\tzz\n"), None);
    }

    #[test]
    fn code_mappings_are_the_executable_file_ones() {
        let maps = "55d0c0000000-55d0c0100000 r--p 00000000 08:01 123 /usr/bin/ferrotx\n\
                    55d0c0100000-55d0c0900000 r-xp 00100000 08:01 123 /usr/bin/ferrotx\n\
                    7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n\
                    7f1000000000-7f1000200000 r-xp 00000000 08:01 456 /lib/libc.so.6\n\
                    7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0 [vdso]\n";
        let code: Vec<_> = code_mappings(maps).collect();
        assert_eq!(
            code,
            [
                (0x55d0_c010_0000, 0x55d0_c090_0000),
                (0x7f10_0000_0000, 0x7f10_0020_0000)
            ]
        );
    }

    #[test]
    fn each_step_is_turned_off_by_its_own_variable() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(LeaseTuning::from_vars(vars(&[])), LeaseTuning::default());
        assert_eq!(LeaseTuning::default().lock_memory, MemoryLock::Fault);
        let tuning = LeaseTuning::from_vars(vars(&[("FERROTX_MLOCK", "0")]));
        assert!(tuning.lock_memory == MemoryLock::Off && tuning.realtime);
        let tuning = LeaseTuning::from_vars(vars(&[("FERROTX_MLOCK", "all")]));
        assert_eq!(tuning.lock_memory, MemoryLock::All);
        let tuning = LeaseTuning::from_vars(vars(&[("FERROTX_REALTIME", "off")]));
        assert!(tuning.lock_memory == MemoryLock::Fault && !tuning.realtime);
        // Anything else leaves the default.
        let tuning =
            LeaseTuning::from_vars(vars(&[("FERROTX_MLOCK", "lots"), ("FERROTX_REALTIME", "")]));
        assert_eq!(tuning, LeaseTuning::default());
    }
}
