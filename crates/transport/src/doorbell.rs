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
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::thread::{self, Thread};

/// A worker's doorbell (see the module's documentation).
#[derive(Debug)]
pub struct Doorbell {
    armed: AtomicBool,
    wake: Wake,
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
        })
    }

    /// A bell that unparks the worker's thread, for a transport that parks it.
    pub(crate) fn thread() -> Self {
        Self {
            armed: AtomicBool::new(false),
            wake: Wake::Thread(OnceLock::new()),
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
