//! Datagrams a node dropped before acting on them, by reason: what INFO and `ferrotx
//! status` show, so that an operator sees a forger, a replayer, a node of another cluster
//! or a corrupting link at a glance.

use std::sync::atomic::{AtomicU64, Ordering};

use ferrotx_rpc::Stats;
use ferrotx_wire::auth::Refusal;

/// Datagrams dropped, by reason, RPC and lease sockets together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropStats {
    /// The MAC did not match: forged, corrupted, or under another key of the same
    /// fingerprint.
    pub bad_mac: u64,
    /// Seen before, too old for the replay window, or from an earlier life of its sender.
    pub replay: u64,
    /// Sealed for another cluster id.
    pub other_cluster: u64,
    /// Sealed with a key this node does not hold.
    pub unknown_key: u64,
    /// Malformed: no valid authentication trailer, or authentic but undecodable.
    pub malformed: u64,
    /// Of another view (configuration) than the node's, older or newer.
    pub other_view: u64,
    /// From a node or life that is not a member, or from an address other than the
    /// endpoint it claims, or addressed to another endpoint.
    pub not_member: u64,
}

impl DropStats {
    /// Number of counters.
    const COUNT: usize = 7;

    /// The drops one RPC engine counted.
    pub fn of_rpc(stats: &Stats) -> Self {
        let refused = |r: Refusal| stats.auth_refused[r.index()];
        Self {
            bad_mac: refused(Refusal::BadMac),
            replay: refused(Refusal::Replay) + stats.stale_incarnation,
            other_cluster: refused(Refusal::OtherCluster),
            unknown_key: refused(Refusal::UnknownKey),
            malformed: refused(Refusal::Malformed) + stats.decode_errors_total(),
            other_view: stats.wrong_configuration
                + stats.stale_configuration
                + stats.newer_configuration,
            not_member: stats.not_member
                + stats.forged_source
                + stats.misdirected
                + refused(Refusal::OtherReceiver),
        }
    }

    /// The drops a lease thread's membership counted.
    pub fn of_membership(stats: &ferrotx_membership::Stats) -> Self {
        let refused = |r: Refusal| stats.auth_refused[r.index()];
        Self {
            bad_mac: refused(Refusal::BadMac),
            replay: refused(Refusal::Replay),
            other_cluster: refused(Refusal::OtherCluster),
            unknown_key: refused(Refusal::UnknownKey),
            malformed: refused(Refusal::Malformed) + stats.undecodable,
            other_view: 0,
            not_member: refused(Refusal::OtherReceiver),
        }
    }

    /// The counters with their names, as INFO shows them (`dropped_<name>`).
    pub fn fields(&self) -> [(&'static str, u64); Self::COUNT] {
        [
            ("bad_mac", self.bad_mac),
            ("replay", self.replay),
            ("other_cluster", self.other_cluster),
            ("unknown_key", self.unknown_key),
            ("malformed", self.malformed),
            ("other_view", self.other_view),
            ("not_member", self.not_member),
        ]
    }

    /// Adds `other`'s counters to these.
    pub fn add(&mut self, other: &DropStats) {
        let (a, b) = (self.fields(), other.fields());
        *self = Self::from_values(std::array::from_fn(|i| a[i].1 + b[i].1));
    }

    fn from_values(
        [
            bad_mac,
            replay,
            other_cluster,
            unknown_key,
            malformed,
            other_view,
            not_member,
        ]: [u64; Self::COUNT],
    ) -> Self {
        Self {
            bad_mac,
            replay,
            other_cluster,
            unknown_key,
            malformed,
            other_view,
            not_member,
        }
    }
}

/// One worker thread's [`DropStats`] as its worker last published them (every 32 loop
/// iterations when they changed: seven relaxed stores).
#[derive(Default)]
pub(crate) struct PublishedDrops([AtomicU64; DropStats::COUNT]);

impl PublishedDrops {
    pub(crate) fn store(&self, stats: &DropStats) {
        for (published, (_, value)) in self.0.iter().zip(stats.fields()) {
            published.store(value, Ordering::Relaxed);
        }
    }

    pub(crate) fn load(&self) -> DropStats {
        DropStats::from_values(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }
}
