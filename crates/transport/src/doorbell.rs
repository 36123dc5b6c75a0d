//! Waking a worker that sleeps in [`crate::Transport::wait`] from another thread, for work
//! that does not arrive as a datagram (a coroutine to start, a client's request).
//!
//! The handshake, with no lost wake-up and no system call while the worker is awake:
//! - the worker [`Doorbell::arm`]s, then looks for work once more, then waits (or
//!   [`Doorbell::disarm`]s and runs the work it found);
//! - another thread publishes its work, then [`Doorbell::ring`]s, which makes a system call
//!   only if the bell is armed.
//!
//! Both sides put a sequentially consistent fence between their write and their read, so
//! either the worker sees the work, or the ringer sees the bell armed and wakes it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering, fence};
use std::thread::{self, Thread};

/// A worker's doorbell (see the module's documentation).
#[derive(Debug)]
pub struct Doorbell {
    armed: AtomicBool,
    wake: Wake,
    /// A descriptor the worker's sleep also watches ([`Doorbell::watch`]), or -1.
    watched: AtomicI32,
    /// Set when a sleep ended with `watched` readable.
    watched_ready: AtomicBool,
}

#[derive(Debug)]
enum Wake {
    /// An `eventfd` the transport polls beside its socket.
    EventFd(OwnedFd),
    /// The worker's thread, which the transport parks.
    Thread(OnceLock<Thread>),
}

impl Doorbell {
    /// A bell that writes an `eventfd`, for a transport that polls file descriptors.
    pub(crate) fn event_fd() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative result is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            armed: AtomicBool::new(false),
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            wake: Wake::EventFd(unsafe { OwnedFd::from_raw_fd(fd) }),
            watched: AtomicI32::new(-1),
            watched_ready: AtomicBool::new(false),
        })
    }

    /// A bell that unparks the worker's thread, for a transport that parks it.
    pub(crate) fn thread() -> Self {
        Self {
            armed: AtomicBool::new(false),
            wake: Wake::Thread(OnceLock::new()),
            watched: AtomicI32::new(-1),
            watched_ready: AtomicBool::new(false),
        }
    }

    /// Worker: about to sleep. Look for work after this, then wait or disarm.
    pub fn arm(&self) {
        if let Wake::Thread(thread) = &self.wake {
            thread.get_or_init(thread::current);
        }
        self.armed.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Worker: awake again (after waiting, or instead of it).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }

    /// Any thread, after publishing work for the worker: wakes it if it sleeps or is about
    /// to. Costs one atomic load while the worker is awake.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if !self.armed.load(Ordering::Relaxed) || !self.armed.swap(false, Ordering::Relaxed) {
            return;
        }
        match &self.wake {
            Wake::EventFd(fd) => {
                let one = 1u64.to_ne_bytes();
                // SAFETY: writes 8 bytes from a live buffer to a descriptor we own. A full
                // counter (EAGAIN) means the worker is woken anyway.
                let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            }
            Wake::Thread(thread) => {
                if let Some(thread) = thread.get() {
                    thread.unpark();
                }
            }
        }
    }

    /// The descriptor to poll, for an `eventfd` bell.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        match &self.wake {
            Wake::EventFd(fd) => Some(fd.as_raw_fd()),
            Wake::Thread(_) => None,
        }
    }

    /// Whether [`Doorbell::watch`] works: the bell's transport polls descriptors.
    pub fn can_watch(&self) -> bool {
        matches!(self.wake, Wake::EventFd(_))
    }

    /// Worker: its sleep also ends when `fd` becomes readable (an epoll descriptor of
    /// sockets it serves itself), for a transport that polls descriptors; `None` stops
    /// watching. The descriptor must stay open while watched.
    pub fn watch(&self, fd: Option<RawFd>) {
        self.watched.store(fd.unwrap_or(-1), Ordering::Relaxed);
    }

    /// The descriptor watched, if any (for the transport's poll).
    pub(crate) fn watched(&self) -> Option<RawFd> {
        let fd = self.watched.load(Ordering::Relaxed);
        (fd >= 0).then_some(fd)
    }

    /// Transport: a sleep ended with the watched descriptor readable.
    pub(crate) fn set_watched_ready(&self) {
        self.watched_ready.store(true, Ordering::Relaxed);
    }

    /// Worker: whether the watched descriptor was found readable since the last call.
    pub fn take_watched_ready(&self) -> bool {
        self.watched_ready.load(Ordering::Relaxed)
            && self.watched_ready.swap(false, Ordering::Relaxed)
    }

    /// Consumes the rings an `eventfd` bell holds, so that the next poll sleeps.
    pub(crate) fn clear(&self) {
        if let Wake::EventFd(fd) = &self.wake {
            let mut count = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a live buffer from a descriptor we own;
            // nonblocking, so an empty counter returns EAGAIN at once.
            let _ = unsafe { libc::read(fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
        }
    }
}
