//! The coordination thread: a node's calls to its coordination service, made off the
//! lease thread, one at a time, each with a deadline.
//!
//! The lease thread must never wait on anything but its socket and its timers: a CM that
//! stops granting leases for as long as a disk takes to fsync, or for as long as another
//! process holds the coordination file's lock, takes the whole cluster down with it. So
//! the service (the file, later etcd) belongs to a thread of its own, and the lease
//! thread only posts calls to it and takes its answers ([`Coordinator`]):
//!
//! - **One call in flight.** A call asked for while another is under way waits in a
//!   queue, in order. The thread takes the next only when the last returned.
//! - **A deadline per call** ([`Coordinator::timeout_ns`], from when it was asked for).
//!   A compare-and-swap not answered by then is handed to the membership as
//!   [`CoordinationError::Unknown`]: it may yet go in, so the membership reads the
//!   service to learn whether it did. A read not answered is
//!   [`CoordinationError::Unavailable`], and the membership reads again later. A call
//!   still queued at its deadline is answered `Unavailable` the same way and never made.
//!   The answer a late call brings after its deadline is dropped: the membership has been
//!   told already.
//! - **Woken through an `eventfd`.** The thread writes it when an answer is ready; the
//!   lease thread polls it beside its socket, so an answer is taken at once, not at the
//!   next timer.
//! - **Health for operators** ([`CoordinationHealth`]): calls, failures, timeouts, the
//!   call under way and since when, the last error; shown by INFO and `ferrotx status`.
//!
//! Nothing here runs while the cluster is steady: the service is called only to change
//! or learn the view. The lease thread's share is a poll of one more descriptor and a
//! few comparisons per iteration, allocating nothing.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrotx_cluster::{CoordinationError, CoordinationService, View};

/// The least time a call may take before it is given up on (longer with longer leases:
/// [`Coordinator::timeout_ns`] is the larger of this and a lease).
pub const CALL_TIMEOUT_MIN: Duration = Duration::from_secs(1);

/// How long a node's coordination calls may take before they are given up on, with
/// leases of `options`: a lease, and never less than [`CALL_TIMEOUT_MIN`]. A file
/// coordination service's lock timeout is best set to half of it, so that a lock held
/// elsewhere fails a swap for certain rather than leave its outcome unknown.
pub fn call_timeout(options: &ferrotx_membership::Options) -> Duration {
    Duration::from_nanos(options.lease_ns).max(CALL_TIMEOUT_MIN)
}

/// A call to the coordination service.
#[derive(Debug)]
pub(crate) enum Call {
    /// Read the current view.
    Read,
    /// Swap in `next` if the stored view's id is `expected`.
    Cas {
        /// The id expected.
        expected: Option<u64>,
        /// The view to store.
        next: View,
    },
}

/// A call's answer.
#[derive(Debug)]
pub(crate) enum Answer {
    /// To [`Call::Read`].
    Read(Result<Option<View>, CoordinationError>),
    /// To [`Call::Cas`].
    Cas(Result<(), CoordinationError>),
}

impl Answer {
    fn error(&self) -> Option<&CoordinationError> {
        match self {
            Answer::Read(Err(e)) | Answer::Cas(Err(e)) => Some(e),
            _ => None,
        }
    }
}

/// How the coordination service has been answering this node, for `status` and INFO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoordinationHealth {
    /// Calls asked for (reads and swaps).
    pub calls: u64,
    /// Calls answered with an error other than a lost race (unavailable, outcome unknown),
    /// timeouts included.
    pub failures: u64,
    /// Calls given up on at their deadline, made or still queued.
    pub timeouts: u64,
    /// Answers that came after their call's deadline (dropped).
    pub late: u64,
    /// How long the call under way has been, in milliseconds, if one is (also when given
    /// up on: the thread is still in it).
    pub in_flight_ms: Option<u64>,
    /// Milliseconds since the service last answered without failing, if it ever did.
    pub last_ok_ms_ago: Option<u64>,
    /// The last failure's text, if the last answer failed (cleared by a good one).
    pub last_error: Option<String>,
    /// The view id the service went back to, below this node's view, if it did
    /// ([`ferrotx_membership::Membership::store_behind`]).
    pub store_behind: Option<u64>,
}

impl CoordinationHealth {
    /// One word for the service's state: `ok`, `slow` (a call under way past half its
    /// deadline), `failing` (the last answer failed), or `went_back` (the store holds a
    /// view older than this node's).
    pub fn state(&self, timeout_ms: u64) -> &'static str {
        if self.store_behind.is_some() {
            "went_back"
        } else if self.in_flight_ms.is_some_and(|ms| ms >= timeout_ms / 2) {
            "slow"
        } else if self.last_error.is_some() {
            "failing"
        } else {
            "ok"
        }
    }
}

/// What the two threads share.
struct Shared {
    slot: Mutex<Slot>,
    posted: Condvar,
    /// Written by the coordination thread when an answer is ready.
    event: OwnedFd,
}

#[derive(Default)]
struct Slot {
    call: Option<(u64, Call)>,
    answer: Option<(u64, Answer)>,
    stop: bool,
}

/// The call the thread is in.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    seq: u64,
    cas: bool,
    /// When it was asked for (the lease thread's clock).
    asked_ns: u64,
    /// Given up on: its answer, when it comes, is dropped.
    abandoned: bool,
}

/// The lease thread's end of the coordination thread (see the module's documentation).
pub(crate) struct Coordinator {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    timeout_ns: u64,
    seq: u64,
    in_flight: Option<InFlight>,
    /// Calls asked for while another was under way, with when each was asked for.
    queued: VecDeque<(Call, u64)>,
    health: CoordinationHealth,
    /// When the service last answered without failing.
    last_ok_ns: Option<u64>,
}

impl Coordinator {
    /// Starts node `node`'s coordination thread, which owns `service`; calls not answered
    /// within `timeout_ns` are given up on.
    pub fn start(
        service: Box<dyn CoordinationService + Send>,
        node: u16,
        timeout_ns: u64,
    ) -> std::io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative result is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            posted: Condvar::new(),
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            event: unsafe { OwnedFd::from_raw_fd(fd) },
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ferrotx-coord-{node}"))
            .spawn(move || serve(service, &thread_shared))?;
        Ok(Self {
            shared,
            thread: Some(thread),
            timeout_ns,
            seq: 0,
            in_flight: None,
            queued: VecDeque::with_capacity(4),
            health: CoordinationHealth::default(),
            last_ok_ns: None,
        })
    }

    /// The descriptor that becomes readable when an answer is ready.
    pub fn fd(&self) -> RawFd {
        self.shared.event.as_raw_fd()
    }

    /// How long a call may take before it is given up on.
    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }

    /// Asks for `call` at `now_ns` (the lease thread's clock): made at once if no call is
    /// under way, else when those before it are done. Its answer comes from
    /// [`Coordinator::next_answer`].
    pub fn call(&mut self, now_ns: u64, call: Call) {
        self.health.calls += 1;
        self.queued.push_back((call, now_ns));
        self.post_next(now_ns);
    }

    /// The next answer to hand the membership at `now_ns`, if any: one the thread
    /// brought, or the failure of a call past its deadline.
    pub fn next_answer(&mut self, now_ns: u64) -> Option<Answer> {
        self.post_next(now_ns);
        if let Some(answer) = self.take_answer(now_ns) {
            return Some(answer);
        }
        let timeout_ns = self.timeout_ns;
        if let Some(f) = &mut self.in_flight
            && !f.abandoned
            && now_ns >= f.asked_ns + timeout_ns
        {
            f.abandoned = true;
            let ms = timeout_ns / 1_000_000;
            let answer = if f.cas {
                Answer::Cas(Err(CoordinationError::Unknown(format!(
                    "no answer within {ms} ms"
                ))))
            } else {
                Answer::Read(Err(CoordinationError::Unavailable(format!(
                    "no answer within {ms} ms"
                ))))
            };
            self.timed_out(&answer);
            return Some(answer);
        }
        if let Some((_, asked)) = self.queued.front()
            && now_ns >= asked + timeout_ns
        {
            let (call, _) = self.queued.pop_front().expect("a queued call");
            let why = CoordinationError::Unavailable(format!(
                "not made: the call before it has been under way for over {} ms",
                timeout_ns / 1_000_000
            ));
            let answer = match call {
                Call::Read => Answer::Read(Err(why)),
                Call::Cas { .. } => Answer::Cas(Err(why)),
            };
            self.timed_out(&answer);
            return Some(answer);
        }
        None
    }

    /// When [`Coordinator::next_answer`] next has a deadline to act on, if a call is
    /// under way or queued (answers themselves wake the lease thread through
    /// [`Coordinator::fd`]).
    pub fn deadline_ns(&self) -> Option<u64> {
        if self.in_flight.is_none() && !self.queued.is_empty() {
            // A call not yet posted (the slot was busy): at once.
            return Some(0);
        }
        let in_flight = self
            .in_flight
            .filter(|f| !f.abandoned)
            .map(|f| f.asked_ns + self.timeout_ns);
        let queued = self
            .queued
            .front()
            .map(|(_, asked)| asked + self.timeout_ns);
        match (in_flight, queued) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The service's health as of `now_ns`, with the store-went-back id the membership
    /// reports.
    #[cfg(test)]
    pub fn health(&self, now_ns: u64, store_behind: Option<u64>) -> CoordinationHealth {
        let mut health = CoordinationHealth::default();
        self.health_into(now_ns, store_behind, &mut health);
        health
    }

    /// [`Coordinator::health`] into `out`, reusing its buffer for the last error (no
    /// allocation unless that error's text grew).
    pub fn health_into(
        &self,
        now_ns: u64,
        store_behind: Option<u64>,
        out: &mut CoordinationHealth,
    ) {
        let h = &self.health;
        out.calls = h.calls;
        out.failures = h.failures;
        out.timeouts = h.timeouts;
        out.late = h.late;
        out.in_flight_ms = self
            .in_flight
            .map(|f| now_ns.saturating_sub(f.asked_ns) / 1_000_000);
        out.last_ok_ms_ago = self
            .last_ok_ns
            .map(|t| now_ns.saturating_sub(t) / 1_000_000);
        out.last_error.clone_from(&h.last_error);
        out.store_behind = store_behind;
    }

    fn timed_out(&mut self, answer: &Answer) {
        self.health.timeouts += 1;
        self.failed(answer);
    }

    fn failed(&mut self, answer: &Answer) {
        if let Some(e) = answer.error() {
            self.health.failures += 1;
            tracing::warn!("coordination service: {e}");
            self.health.last_error = Some(e.to_string());
        }
    }

    /// The answer the thread brought, if any; posts the next queued call.
    fn take_answer(&mut self, now_ns: u64) -> Option<Answer> {
        // Drain the eventfd first, whatever it held (a late answer's wake too), then
        // look in the slot.
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `count`, which outlives the call; the
        // descriptor is nonblocking.
        let _ = unsafe { libc::read(self.fd(), count.as_mut_ptr().cast(), count.len()) };
        let f = self.in_flight?;
        // Never waiting for the lock: the coordination thread holds it only to move a
        // call or an answer, and a real-time thread must not wait on a preempted one.
        // If it is posting an answer, it writes the eventfd after, which wakes us again.
        let answer = {
            let Ok(mut slot) = self.shared.slot.try_lock() else {
                return None;
            };
            match slot.answer.take() {
                Some((seq, answer)) if seq == f.seq => answer,
                Some(_) | None => return None,
            }
        };
        self.in_flight = None;
        self.post_next(now_ns);
        if f.abandoned {
            self.health.late += 1;
            return None;
        }
        match answer.error() {
            None | Some(CoordinationError::Conflict(_)) => {
                if let Some(e) = self.health.last_error.take() {
                    tracing::info!("coordination service answers again (last failure: {e})");
                }
                self.last_ok_ns = Some(now_ns);
            }
            Some(_) => self.failed(&answer),
        }
        Some(answer)
    }

    /// Posts the first queued call if none is under way and its deadline has not passed
    /// at `now_ns` (one past it stays queued, and [`Coordinator::next_answer`] fails it
    /// unmade).
    fn post_next(&mut self, now_ns: u64) {
        if self.in_flight.is_some() {
            return;
        }
        match self.queued.front() {
            Some((_, asked)) if now_ns < asked + self.timeout_ns => {}
            _ => return,
        }
        // As in `take_answer`, never waiting for the lock: busy, the call stays queued
        // and [`Coordinator::deadline_ns`] has the lease thread come back at once.
        let Ok(mut slot) = self.shared.slot.try_lock() else {
            return;
        };
        let (call, asked_ns) = self.queued.pop_front().expect("a queued call");
        self.seq += 1;
        self.in_flight = Some(InFlight {
            seq: self.seq,
            cas: matches!(call, Call::Cas { .. }),
            asked_ns,
            abandoned: false,
        });
        slot.call = Some((self.seq, call));
        drop(slot);
        self.shared.posted.notify_one();
    }
}

impl Drop for Coordinator {
    /// Stops the thread; waits for it (and so for the service, with its locks, to be
    /// dropped) unless it is stuck in a call, which it then finishes alone.
    fn drop(&mut self) {
        if let Ok(mut slot) = self.shared.slot.lock() {
            slot.stop = true;
        }
        self.shared.posted.notify_one();
        let Some(thread) = self.thread.take() else {
            return;
        };
        let deadline = Instant::now() + Duration::from_nanos(self.timeout_ns);
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            tracing::warn!("coordination thread still in a call at shutdown: left to finish");
        }
    }
}

/// The coordination thread: makes each call posted, one at a time, and posts its answer.
fn serve(mut service: Box<dyn CoordinationService + Send>, shared: &Shared) {
    loop {
        let (seq, call) = {
            let mut slot = shared.slot.lock().expect("coordination slot");
            loop {
                if slot.stop {
                    return;
                }
                if let Some(call) = slot.call.take() {
                    break call;
                }
                slot = shared.posted.wait(slot).expect("coordination slot");
            }
        };
        let answer = match call {
            Call::Read => Answer::Read(service.read()),
            Call::Cas { expected, next } => Answer::Cas(service.compare_and_swap(expected, &next)),
        };
        shared.slot.lock().expect("coordination slot").answer = Some((seq, answer));
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from `one`, which outlives the call, to our eventfd.
        let _ = unsafe { libc::write(shared.event.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A service whose calls take `delay_ms` (shared, so a test changes it mid-way).
    struct Slow {
        delay_ms: Arc<AtomicU64>,
        view: Option<View>,
    }

    impl CoordinationService for Slow {
        fn read(&mut self) -> Result<Option<View>, CoordinationError> {
            std::thread::sleep(Duration::from_millis(self.delay_ms.load(Ordering::Relaxed)));
            Ok(self.view.clone())
        }
        fn cluster_id(&mut self, proposed: [u8; 16]) -> Result<[u8; 16], CoordinationError> {
            Ok(proposed)
        }
        fn compare_and_swap(
            &mut self,
            expected: Option<u64>,
            next: &View,
        ) -> Result<(), CoordinationError> {
            std::thread::sleep(Duration::from_millis(self.delay_ms.load(Ordering::Relaxed)));
            if self.view.as_ref().map(|v| v.id) != expected {
                return Err(CoordinationError::Conflict(self.view.clone().map(Box::new)));
            }
            self.view = Some(next.clone());
            Ok(())
        }
    }

    fn now(epoch: Instant) -> u64 {
        epoch.elapsed().as_nanos() as u64
    }

    /// Waits (up to 5 s) for an answer, polling as the lease thread does.
    fn wait(c: &mut Coordinator, epoch: Instant) -> Answer {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Some(a) = c.next_answer(now(epoch)) {
                return a;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("no answer within 5 s");
    }

    #[test]
    fn answers_come_in_order_and_a_stuck_call_is_given_up_on() {
        let delay = Arc::new(AtomicU64::new(0));
        let service = Slow {
            delay_ms: delay.clone(),
            view: None,
        };
        let epoch = Instant::now();
        let mut c = Coordinator::start(Box::new(service), 0, 200_000_000).unwrap();
        let v1 = View::ended(1, 1);
        c.call(
            now(epoch),
            Call::Cas {
                expected: None,
                next: v1.clone(),
            },
        );
        c.call(now(epoch), Call::Read);
        assert!(matches!(wait(&mut c, epoch), Answer::Cas(Ok(()))));
        assert!(matches!(wait(&mut c, epoch), Answer::Read(Ok(Some(v))) if v == v1));
        assert_eq!(c.health(now(epoch), None).failures, 0);

        // The service stalls for 600 ms: the swap is given up on at 200 ms as unknown,
        // and the read asked behind it as unavailable, never made.
        delay.store(600, Ordering::Relaxed);
        let asked = Instant::now();
        c.call(
            now(epoch),
            Call::Cas {
                expected: Some(1),
                next: View::ended(2, 1),
            },
        );
        c.call(now(epoch), Call::Read);
        assert!(matches!(
            wait(&mut c, epoch),
            Answer::Cas(Err(CoordinationError::Unknown(_)))
        ));
        let took = asked.elapsed();
        assert!(took >= Duration::from_millis(200) && took < Duration::from_millis(550));
        assert!(matches!(
            wait(&mut c, epoch),
            Answer::Read(Err(CoordinationError::Unavailable(_)))
        ));
        let h = c.health(now(epoch), None);
        assert_eq!((h.timeouts, h.failures), (2, 2));
        assert!(h.in_flight_ms.is_some() && h.last_error.is_some(), "{h:?}");
        assert_eq!(h.state(200), "slow");

        // Once the stalled swap returns (it went in), its late answer is dropped, and the
        // next read finds the view it stored.
        delay.store(0, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(500));
        c.call(now(epoch), Call::Read);
        assert!(matches!(wait(&mut c, epoch), Answer::Read(Ok(Some(v))) if v.id == 2));
        let h = c.health(now(epoch), None);
        assert_eq!(h.late, 1);
        assert_eq!(h.last_error, None);
        assert_eq!(h.state(200), "ok");
    }
}
