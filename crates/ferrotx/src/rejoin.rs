//! A removed `ferrotx node` process comes back by itself, as a new life of its node.
//!
//! The cluster removes a member it suspects (FaRM 5.2); a member that was only slow (a
//! pause past its lease, a partition that healed) is alive when it learns it. Leaving it
//! stopped turns a false positive into a lost node until an operator notices. Instead the
//! process starts its membership afresh: it stops its workers and its Redis front end,
//! which closes their sockets and releases the node's liveness lock, then replaces itself
//! with a new run of the same executable and arguments (`execve`, so the same pid, which
//! launchers such as `cluster local` keep watching), plus `--join`: a removal means a
//! cluster runs, and the new life must join it, never start an empty one. The new life
//! has a new incarnation, is admitted through the normal JOIN, holds nothing and is given
//! backups to fill (data recovery). A false positive then costs one refill, not a node.
//!
//! The new life's incarnation must be greater than the removed one's, or its datagrams
//! would look like the old life's to the members. The incarnation is the clock in
//! microseconds, which may be coarse or have stepped back, so the removed life's is
//! handed over in [`PREVIOUS_LIFE_ENV`] and the new one takes the greater of the clock
//! and one more than it.
//!
//! A life removed again soon after its admission (a machine too loaded for its lease)
//! waits before the next one, longer each time up to [`ferrotx_node::lives::BACKOFF_MAX`],
//! so that the node does not make the cluster reconfigure in a tight loop. The wait is
//! handed over in [`BACKOFF_ENV`]. A benchmark's driven node follows the same rules
//! ([`ferrotx_node::lives`]), with its new life in the same process.
//!
//! All descriptors Rust's standard library, socket2 and the eventfd doorbells open are
//! close-on-exec, so even one a drop missed is closed by `execve`; the liveness lock
//! (`flock`) goes with the last descriptor of its file.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

/// The incarnation of the life that was removed, set for the life that replaces it.
pub const PREVIOUS_LIFE_ENV: &str = "FERROTX_PREVIOUS_LIFE";

/// The wait before the current life, in milliseconds (absent: none).
pub const BACKOFF_ENV: &str = "FERROTX_REJOIN_BACKOFF_MS";

/// How often the wait looks at the stop flag: Ctrl-C during it stops the node at once.
const BACKOFF_POLL: Duration = Duration::from_millis(50);

/// What the life before this one handed over (nothing for a process an operator or a
/// launcher started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreviousLife {
    /// The incarnation of the removed life.
    pub incarnation: Option<u64>,
    /// The wait taken before this life.
    pub backoff: Duration,
}

impl PreviousLife {
    /// Reads [`PREVIOUS_LIFE_ENV`] and [`BACKOFF_ENV`].
    pub fn from_env() -> anyhow::Result<Self> {
        let number = |name: &str| -> anyhow::Result<Option<u64>> {
            match std::env::var(name) {
                Ok(text) => Ok(Some(text.parse().with_context(|| {
                    format!("{name}={text:?} is not a number (it is set by a removed node for its next life; unset it)")
                })?)),
                Err(_) => Ok(None),
            }
        };
        Ok(Self {
            incarnation: number(PREVIOUS_LIFE_ENV)?,
            backoff: Duration::from_millis(number(BACKOFF_ENV)?.unwrap_or(0)),
        })
    }

    /// This life's incarnation, from the clock's `clock`: greater than the removed life's
    /// ([`ferrotx_node::lives::next_incarnation`]).
    pub fn incarnation(&self, clock: u64) -> u64 {
        ferrotx_node::lives::next_incarnation(self.incarnation, clock)
    }
}

/// The arguments of this process for its next life: the same, with `--join` added if
/// it is not there.
fn next_life_args(mut args: Vec<OsString>) -> Vec<OsString> {
    if !args.iter().any(|a| a == "--join") {
        args.push("--join".into());
    }
    args
}

/// Replaces this process with a new life of node `node` after the life `incarnation`
/// was removed, having been a member since `admitted`; `previous` is what that life was
/// handed. The node's workers, Redis front end and lease thread must have been dropped
/// (their sockets closed, the liveness lock released). Waits first if the life was
/// removed quickly, and returns `Ok` without replacing the process if `stop` is raised
/// meanwhile (the caller then stops as on Ctrl-C); returns the error if `execve` fails.
pub fn replace_with_new_life(
    node: u16,
    incarnation: u64,
    admitted: Instant,
    previous: PreviousLife,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let backoff = ferrotx_node::lives::next_backoff(admitted.elapsed(), previous.backoff);
    if !backoff.is_zero() {
        eprintln!(
            "node {node}: removed {} ms after its admission; waiting {} ms before rejoining",
            admitted.elapsed().as_millis(),
            backoff.as_millis()
        );
    }
    let waited = Instant::now();
    while waited.elapsed() < backoff {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        std::thread::sleep(backoff.saturating_sub(waited.elapsed()).min(BACKOFF_POLL));
    }
    // A SIGTERM or SIGINT from here to `execve` is lost (the new life installs its
    // handlers afresh); the window is microseconds, and launchers that stop nodes kill
    // them after a few seconds anyway.
    if stop.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "ferrotx".into());
    let args = next_life_args(args.collect());
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // `/proc/self/exe` runs this very executable even if its file was replaced or removed
    // since it started: the new life runs the code of the one it replaces.
    let error = Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env(PREVIOUS_LIFE_ENV, incarnation.to_string())
        .env(BACKOFF_ENV, backoff.as_millis().to_string())
        .exec();
    Err(error).context("replacing the removed process with a new life (execve of /proc/self/exe)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_life_is_later_than_the_removed_one_whatever_the_clock() {
        let first = PreviousLife::default();
        assert_eq!(first.incarnation(1_000), 1_000);
        let after = PreviousLife {
            incarnation: Some(1_000),
            backoff: Duration::ZERO,
        };
        // The clock moved on: it is taken.
        assert_eq!(after.incarnation(5_000), 5_000);
        // The same microsecond, or a clock that stepped back: one more than the old life.
        assert_eq!(after.incarnation(1_000), 1_001);
        assert_eq!(after.incarnation(3), 1_001);
    }

    #[test]
    fn the_next_life_joins_once() {
        let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            next_life_args(args(&["node", "--config", "c.toml", "--id", "2"])),
            args(&["node", "--config", "c.toml", "--id", "2", "--join"])
        );
        assert_eq!(
            next_life_args(args(&["node", "--join", "--id", "2"])),
            args(&["node", "--join", "--id", "2"])
        );
    }
}
