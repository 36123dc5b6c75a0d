//! The lease thread: a node's membership state machine on a thread and UDP socket of its
//! own (FaRM 5.1), and what it shares with the worker threads.
//!
//! The thread owns the [`Membership`] state machine, the lease socket and the
//! coordination service. It publishes to the workers, through [`Link`], the view to
//! switch to (a generation counter they check once per loop iteration: one relaxed load),
//! the committed view id, and until when the node may serve (its lease). Workers report
//! the generation they switched to; once all have, the thread answers NEW-CONFIG-ACK.
//! Nothing here is on the data path: the workers read three atomics per iteration and
//! take the view's mutex only when its generation changes.
//!
//! The thread asks for real-time scheduling (`SCHED_FIFO`), so that a loaded machine
//! cannot delay renewals past a lease. Without the privilege (`CAP_SYS_NICE`, or an
//! `RLIMIT_RTPRIO` limit) it logs so and runs at normal priority: the default lease is
//! long enough for that; short leases want the privilege.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrotx_cluster::{Configuration, CoordinationService, View};
use ferrotx_membership::{Action, MESSAGE_BYTES_MAX, Membership, Options, Phase, Stats};
use ferrotx_transport::Doorbell;
use ferrotx_wire::auth::TRAILER_BYTES;

use crate::keys::ClusterKeys;

/// How often the lease thread hands the node the members past their memory limits
/// ([`ferrotx_store::Memory::set_over_nodes`]): as often as the node refreshes its own
/// figures.
const OVER_NODES_NS: u64 = crate::core::MEMORY_REFRESH_NS;

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
    /// The latest the lease thread woke after it meant to (a timeout due), in microseconds.
    pub max_wake_late_us: u64,
    /// The backups this node is filling (data recovery), with their progress.
    pub fills: Vec<ferrotx_txn::refill::FillProgress>,
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
    /// Starts the lease thread of life `incarnation` of node `node`, timing from `epoch`.
    pub fn start(
        config: Arc<Configuration>,
        node: u16,
        incarnation: u64,
        options: Options,
        coordination: Box<dyn CoordinationService + Send>,
        epoch: Instant,
        keys: Option<Arc<ClusterKeys>>,
    ) -> Result<Self, LeaseError> {
        let addr = config
            .lease_addr(node)
            .ok_or(LeaseError::NotInConfiguration(node))?;
        let socket = UdpSocket::bind(addr).map_err(|source| LeaseError::Bind { addr, source })?;
        let link = Arc::new(Link::new(usize::from(config.threads_per_node())));
        let thread_link = link.clone();
        let thread_config = config.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ferrotx-lease-{node}"))
            .spawn(move || {
                let realtime = set_realtime_priority();
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
    coordination: Box<dyn CoordinationService + Send>,
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
                self.late_us = self.late_us.max((now - due) / 1_000);
                self.membership.handle_timeout(now);
            }
            self.perform(now);
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
            let wait = self.membership.poll_timeout().saturating_sub(now).min(cap);
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

    /// Waits up to `timeout_ns` for the socket to be readable; false on timeout.
    fn wait_readable(&self, timeout_ns: u64) -> bool {
        let mut fd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: `fd` and `timeout` are valid for the call; a null signal mask leaves the
        // thread's mask as it is.
        let r = unsafe { libc::ppoll(&mut fd, 1, &timeout, std::ptr::null()) };
        r > 0
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
        status.max_wake_late_us = self.late_us;
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
                Action::Read => {
                    let result = self.coordination.read();
                    self.membership.handle_read(now, result);
                }
                Action::Cas { expected, next } => {
                    let result = self.coordination.compare_and_swap(expected, &next);
                    self.membership.handle_cas(now, result);
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

/// Asks for `SCHED_FIFO` at a low real-time priority for the calling thread; false (and a
/// log line) where the process may not have it.
fn set_realtime_priority() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
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
