//! One node's membership state machine: leases, suspicion, probes, the view's
//! compare-and-swap, NEW-CONFIG, NEW-CONFIG-ACK and NEW-CONFIG-COMMIT, and joining.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use ferrotx_cluster::{Configuration, CoordinationError, View, ViewMember};
use ferrotx_wire::auth::{Auth, Refusal, ReplayWindow, Sealer, Sender};

use crate::message::{Body, Message};

/// Lease requests remembered for matching their grants.
const REQUESTS_REMEMBERED: usize = 16;

/// How long leases are and how the state machine times things.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Length of a lease. Renewed every fifth of it.
    pub lease_ns: u64,
    /// Bound on how much faster or slower one node's clock runs than another's, in parts
    /// per million. Leases are shortened, and waits lengthened, by twice it.
    pub drift_ppm: u64,
    /// How many backup CMs take over when the CM fails ([`View::backup_cms`]: the members
    /// after the CM in node order, in failure domains other than the CM's and each
    /// other's first); at most [`ferrotx_cluster::BACKUP_CMS_MAX`].
    pub backup_cms: usize,
    /// Least time the CM waits for every member to switch to a new view (NEW-CONFIG-ACK)
    /// before leaving out those that did not: at least a lease, and never less than this,
    /// since a member switches its workers (and a new one starts them) before it answers.
    pub ack_timeout_min_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            lease_ns: 2_000_000_000,
            drift_ppm: 1_000,
            backup_cms: 2,
            ack_timeout_min_ns: 500_000_000,
        }
    }
}

impl Options {
    /// Options with a lease of `lease_ms` milliseconds.
    pub fn with_lease_ms(lease_ms: u64) -> Self {
        Self {
            lease_ns: lease_ms.max(1) * 1_000_000,
            ..Self::default()
        }
    }

    /// Interval between lease renewals: a fifth of the lease.
    pub fn renew_ns(&self) -> u64 {
        (self.lease_ns / 5).max(1)
    }

    /// How long the CM waits for NEW-CONFIG-ACKs.
    pub fn ack_timeout_ns(&self) -> u64 {
        self.lease_ns.max(self.ack_timeout_min_ns)
    }

    /// How long a probe waits for answers.
    pub fn probe_timeout_ns(&self) -> u64 {
        (self.lease_ns / 4).max(1)
    }

    /// `duration` lengthened by the drift bound (for waiting out another node's lease).
    fn lengthened(&self, duration: u64) -> u64 {
        duration + duration / 1_000_000 * 2 * self.drift_ppm + 2 * self.drift_ppm
    }

    /// `duration` shortened by the drift bound (for a lease timed on this node's clock).
    fn shortened(&self, duration: u64) -> u64 {
        duration.saturating_sub(duration / 1_000_000 * 2 * self.drift_ppm)
    }
}

/// What the caller must do for the state machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `message` to node `to`'s lease socket.
    Send {
        /// The node.
        to: u16,
        /// The message.
        message: Message,
    },
    /// Read the coordination service; answer with [`Membership::handle_read`].
    Read,
    /// Compare-and-swap the view; answer with [`Membership::handle_cas`].
    Cas {
        /// The id the current view must have (`None`: no view yet).
        expected: Option<u64>,
        /// The view to store.
        next: View,
    },
    /// Switch every worker (and front end) to this view: new client transactions wait,
    /// calls outstanding under the old view fail, non-members are no longer talked to.
    /// Call [`Membership::handle_installed`] once all have switched.
    Install(View),
    /// The view of this id is committed: serve clients again.
    Commit(u64),
    /// This process is not a member of the current view (it was removed, or the cluster
    /// admitted another life of its node): it must stop serving, for good.
    Removed {
        /// The view that does not have it.
        view: u64,
    },
}

/// Where a node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not a member yet: asking to be admitted.
    Joining,
    /// A member of a view not yet committed (switching, or waiting for the commit).
    Installing,
    /// A member of a committed view.
    Member,
    /// Suspended ([`View::suspended`]): cut off while holding the last copies of some
    /// partitions. Not serving; keeps its data and asks to be readmitted, as this life.
    Suspended,
    /// Removed: stopped for good.
    Removed,
}

/// Counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Times this node's lease (or, on the CM, its majority of leases) ran out while it
    /// was a member of a committed view.
    pub lease_expirations: u64,
    /// Restarts without every node that waited on, for nodes holding the only copies of
    /// some partitions.
    pub restart_waits: u64,
    /// Lease grants received (renewals).
    pub renewals: u64,
    /// Suspicions raised (a member by the CM, or the CM by a backup).
    pub suspicions: u64,
    /// Probe rounds started.
    pub probes: u64,
    /// Probe rounds that did not reach a majority.
    pub probes_without_majority: u64,
    /// Views this node swapped in at the coordination service.
    pub views_swapped: u64,
    /// Swaps that lost a race.
    pub swaps_lost: u64,
    /// Swaps whose outcome was unknown (timed out, answer lost), settled by a read.
    pub swaps_unknown: u64,
    /// Times the coordination service answered with a view older than this node's (a
    /// store restored from an old copy, or another store): reported, never swapped
    /// against.
    pub store_went_back: u64,
    /// Lease requests the CM left unanswered because the view it is storing drops their
    /// sender.
    pub renewals_refused: u64,
    /// Views committed here.
    pub views_committed: u64,
    /// Messages dropped: from non-members, older views, or not matching anything.
    pub dropped: u64,
    /// Messages refused as undecodable.
    pub undecodable: u64,
    /// Datagrams refused by authentication, by reason (`Refusal::index`): no valid
    /// trailer, another cluster, an unknown key, a bad MAC, a replay.
    pub auth_refused: [u64; Refusal::COUNT],
    /// Round trips of lease renewals (request sent to grant received): counts by power of
    /// two of nanoseconds (bucket `i` holds round trips in `[2^i, 2^(i+1))`).
    pub renewal_rtt_log2: [u64; 48],
    /// The longest renewal round trip, in nanoseconds.
    pub renewal_rtt_max_ns: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            lease_expirations: 0,
            restart_waits: 0,
            renewals: 0,
            suspicions: 0,
            probes: 0,
            probes_without_majority: 0,
            views_swapped: 0,
            swaps_lost: 0,
            swaps_unknown: 0,
            store_went_back: 0,
            renewals_refused: 0,
            views_committed: 0,
            dropped: 0,
            undecodable: 0,
            auth_refused: [0; Refusal::COUNT],
            renewal_rtt_log2: [0; 48],
            renewal_rtt_max_ns: 0,
        }
    }
}

impl Stats {
    /// The `q` quantile (0 to 1) of renewal round trips, in nanoseconds, as the upper
    /// bound of its power-of-two bucket (the maximum for the last one); 0 without any.
    pub fn renewal_rtt_quantile_ns(&self, q: f64) -> u64 {
        let total: u64 = self.renewal_rtt_log2.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, count) in self.renewal_rtt_log2.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return (1u64 << (i + 1)).min(self.renewal_rtt_max_ns.max(1));
            }
        }
        self.renewal_rtt_max_ns
    }
}

/// The timers of one node's state machine: each fires at most once per deadline, and
/// [`Membership::poll_timeout`] is the earliest one armed after the last
/// [`Membership::handle_timeout`]. The renewal, read and reconfiguration timers are set
/// where what they time starts; the lease timers follow the leases
/// ([`Membership::arm_lease_timers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    /// Holder: the next lease request (a member), JOIN (a joiner or a suspended life), or
    /// NEW-CONFIG-ACK again (installing).
    Renew,
    /// The next read of the coordination service (not while one is under way).
    Read,
    /// Holder: its lease at the CM ends (a member that is not the CM).
    LeaseEnd,
    /// Backup CM: the CM has been silent for a lease (plus a delay by rank): take over.
    Takeover,
    /// CM: its leases at a majority of the view end.
    CmLeaseEnd,
    /// CM: the next member whose lease at the CM ends (it is suspected then).
    Suspect,
    /// CM, idle: the next reconfiguration may start.
    Retry,
    /// CM: the probe round, or the wait for NEW-CONFIG-ACKs, ends.
    RoundEnd,
    /// CM: probes, or NEW-CONFIG, go again to those that have not answered.
    Resend,
    /// CM: every lease of a node that left has run out: commit.
    Commit,
}

impl Timer {
    const COUNT: usize = 10;
}

/// When each [`Timer`] fires (`None`: not armed). Quinn's timer table: one slot per
/// timer, not a minimum of deadlines taken by hand.
#[derive(Clone, Copy, Debug, Default)]
struct TimerTable([Option<u64>; Timer::COUNT]);

impl TimerTable {
    fn set(&mut self, timer: Timer, at: u64) {
        self.0[timer as usize] = Some(at);
    }

    fn stop(&mut self, timer: Timer) {
        self.0[timer as usize] = None;
    }

    fn get(&self, timer: Timer) -> Option<u64> {
        self.0[timer as usize]
    }

    /// Armed and due at `now_ns`.
    fn expired(&self, timer: Timer, now_ns: u64) -> bool {
        self.get(timer).is_some_and(|at| now_ns >= at)
    }

    /// Not armed, or due at `now_ns`.
    fn due(&self, timer: Timer, now_ns: u64) -> bool {
        self.get(timer).is_none_or(|at| now_ns >= at)
    }

    /// The earliest deadline after `after`, leaving out `skip`.
    fn next_after(&self, after: u64, skip: Option<Timer>) -> Option<u64> {
        self.0
            .iter()
            .enumerate()
            .filter(|&(i, _)| skip.is_none_or(|t| t as usize != i))
            .filter_map(|(_, at)| *at)
            .filter(|&at| at > after)
            .min()
    }
}

/// What the CM knows of one member's lease (FaRM 5.1's three-way handshake).
#[derive(Clone, Copy, Debug, Default)]
struct Grant {
    /// Until when the CM counts the member alive (its last request plus a lease).
    alive_until: u64,
    /// Until when the member's lease may run, as granted (CM's clock).
    granted_until: u64,
    /// The last grant: its sequence number and when it was sent.
    last_grant: (u64, u64),
    /// Until when the CM holds its lease at the member.
    cm_until: u64,
    /// The sequence number of the member's last NEW-CONFIG-ACK (the commit answers it).
    last_ack_seq: u64,
}

/// A reconfiguration (FaRM 5.2), on the CM or on a backup CM taking over. Its deadlines
/// are timers ([`Timer::Retry`], [`Timer::RoundEnd`], [`Timer::Resend`],
/// [`Timer::Commit`]).
#[derive(Debug)]
enum Reconfig {
    /// None under way; the next may start at [`Timer::Retry`] (now if not armed).
    Idle,
    /// Step 2: probes sent; the round ends at [`Timer::RoundEnd`].
    Probing {
        seq: u64,
        /// Members taken as failed whatever they answer (they did not acknowledge a view).
        exclude: BTreeSet<u16>,
        /// The nodes probed: the members but this node and `exclude`, the suspended lives
        /// and the joiners. Probed again at [`Timer::Resend`] until they answer, so that
        /// one lost datagram does not remove a live member.
        probed: BTreeSet<u16>,
        /// The lives that answered this round (only this round's answers count).
        replies: BTreeSet<ViewMember>,
    },
    /// Step 3: the compare-and-swap of `next` is under way.
    Swapping {
        next: View,
        /// The commit of `next` waits until then at least (leases of dead lives).
        commit_after_ns: u64,
    },
    /// Step 3, its outcome unknown (the swap timed out, or its answer was lost): reading
    /// the service tells whether `next` went in, and then this node goes on as its CM.
    Confirming { next: View, commit_after_ns: u64 },
    /// Steps 4-5: NEW-CONFIG sent; collecting NEW-CONFIG-ACKs until [`Timer::RoundEnd`].
    Acks {
        id: u64,
        sent_ns: u64,
        /// Member and until when the lease it granted the previous CM may run.
        acks: BTreeMap<u16, u64>,
    },
    /// Step 6: every member switched; the commit waits old leases out ([`Timer::Commit`]).
    Waiting { id: u64 },
}

/// The holder's side of leases and views (FaRM 5.1): this node's lease at the CM, the
/// leases it granted CMs, and what it reports to the CM.
struct Holder {
    /// The last requests (lease requests, NEW-CONFIG-ACKs): sequence number and when sent,
    /// to time the lease a grant or commit answering one gives.
    requests: [(u64, u64); REQUESTS_REMEMBERED],
    /// Until when this node's lease at the CM runs (its clock).
    lease_until: u64,
    /// The leases this node granted CMs (lease acks, NEW-CONFIG-ACKs): until when each
    /// may run, by CM.
    granted_cms: BTreeMap<u16, u64>,
    /// When this node installed its current view (a backup CM takes over a CM that does
    /// not commit it).
    installed_at_ns: u64,
    /// When this node last heard from its CM (a grant of any length, NEW-CONFIG, a
    /// commit): it suspects the CM after a lease of silence, not when its own lease ends,
    /// which capped grants may shorten while the CM is alive.
    last_heard_cm_ns: u64,
    /// The partitions this node's host reported filled (it fills them in its current
    /// view); reported to the CM every renewal while the view has them filling.
    filled: Vec<u32>,
    /// This node's memory figures as its host last set them (bytes used, limit or 0),
    /// sent with every lease request and probe reply.
    memory: (u64, u64),
    /// The members past their memory limit, as the CM's last lease grant said.
    members_over: Vec<u16>,
}

impl Grant {
    /// The member is alive until `until` at least: its lease at the CM only moves on.
    fn keep_alive(&mut self, until: u64) {
        self.alive_until = self.alive_until.max(until);
    }

    /// The CM holds its lease at the member until `until` at least: it only moves on.
    fn hold_until(&mut self, until: u64) {
        self.cm_until = self.cm_until.max(until);
    }
}

/// The CM's side (FaRM 5.2): the members' leases, the reconfiguration under way, the
/// processes asking to join. A backup CM uses it when it takes over.
struct Manager {
    grants: BTreeMap<u16, Grant>,
    reconfig: Reconfig,
    /// Processes asking to be admitted. Every member keeps them, not only the CM: a
    /// backup CM that takes over probes them too.
    joiners: BTreeMap<u16, u64>,
    /// The view being installed is not committed before then (leases that dead lives
    /// granted: see [`Membership::finish_probe`]).
    commit_after_ns: u64,
    /// Backups of the current view reported filled (partition, node), with when the first
    /// report came; the next view counts them as copies.
    filled: BTreeMap<(u32, u16), u64>,
    /// The latest memory figures each member reported (its life, bytes used, limit or 0).
    /// Only the life that reported them counts; a member that left is forgotten at the
    /// next commit.
    memory: BTreeMap<u16, (u64, u64, u64)>,
    /// When next to look whether the members' figures now leave room for a copy the view
    /// could not place (memory freed, a limit raised): once a lease.
    next_room_check_ns: u64,
    /// The view [`Membership::room_due_now`] places copies in: kept, so that the check
    /// made once a lease on the lease thread allocates nothing once it has grown.
    scratch: Option<View>,
}

/// One node's membership state machine (see the crate documentation). Sans-IO, as
/// Quinn's: inputs come through `handle_*`, outputs go out through `poll_*`.
pub struct Membership {
    me: u16,
    incarnation: u64,
    /// Seals the datagrams this node sends and opens those it receives (see
    /// [`Membership::set_auth`]); `None`: neither.
    auth: Option<Sealer>,
    /// Sequence number of the last datagram sealed for each receiver: consecutive at each
    /// receiver, so its replay window measures reordering only, however many members.
    /// At most one entry per node id the configuration names, made when sending.
    auth_seq: BTreeMap<u16, u64>,
    /// The sequence numbers seen from each node's lease socket, per life. An entry is
    /// made only for an authentic datagram, so outsiders cannot grow it; at most one per
    /// node id (and one for `ferrotx status`, which probes as node `u16::MAX`).
    windows: BTreeMap<u16, ReplayWindow>,
    options: Options,
    config: Arc<Configuration>,
    /// The latest view known, member of it or not.
    view: Option<View>,
    phase: Phase,
    /// The workers switched to `view`.
    installed: bool,
    /// The last sequence number this node used (requests, acks, probe rounds).
    seq: u64,
    holder: Holder,
    cm: Manager,
    timers: TimerTable,
    /// The time of the last tick: timeouts are always after it.
    last_tick_ns: u64,
    /// Whether the lease had run out at the last check (to count each expiration once).
    expired: bool,
    /// Reading the coordination service ([`Timer::Read`] waits for the answer).
    read_pending: bool,
    /// The id of this node's view when the pending read was asked for (0: none): a read
    /// answered below the view adopted since, but not below this, was overtaken (the
    /// view was adopted from a NEW-CONFIG while the read was on its way), not a
    /// service that went back.
    read_asked_at: u64,
    /// The id of a view older than this node's that the coordination service answered
    /// with (it went back), until it answers this node's view or a newer one.
    store_behind: Option<u64>,
    /// The last view this node saw committed: its CM is the one that may still serve.
    last_committed: Option<View>,
    /// When this node first saw the cluster's view ended on disk (a restart from the
    /// data directories): after [`RESTART_WAIT_LEASES`] it starts with the nodes that
    /// came back, if their copies cover every partition.
    restart_seen_ns: Option<u64>,
    actions: VecDeque<Action>,
    stats: Stats,
}

/// How many leases a cluster restarting from its data directories waits for every node
/// of its last view before it starts with the nodes that came back, when their copies
/// cover every partition (in `sync` mode each copy holds every acknowledged commit). A
/// node that comes back later joins as a new life and is refilled.
pub const RESTART_WAIT_LEASES: u64 = 10;

impl Membership {
    /// The state machine of life `incarnation` of node `me` of the cluster described by
    /// `config`, starting at `now_ns`. It first reads the coordination service.
    pub fn new(
        me: u16,
        incarnation: u64,
        config: Arc<Configuration>,
        options: Options,
        now_ns: u64,
    ) -> Self {
        assert!(incarnation > 0, "incarnations start at 1");
        let mut timers = TimerTable::default();
        timers.set(Timer::Renew, now_ns);
        timers.set(Timer::Read, now_ns);
        let mut m = Self {
            me,
            incarnation,
            auth: None,
            auth_seq: BTreeMap::new(),
            windows: BTreeMap::new(),
            options,
            config,
            view: None,
            phase: Phase::Joining,
            installed: false,
            seq: 0,
            holder: Holder {
                requests: [(u64::MAX, 0); REQUESTS_REMEMBERED],
                lease_until: 0,
                granted_cms: BTreeMap::new(),
                installed_at_ns: 0,
                last_heard_cm_ns: 0,
                filled: Vec::new(),
                memory: (0, 0),
                members_over: Vec::new(),
            },
            cm: Manager {
                grants: BTreeMap::new(),
                reconfig: Reconfig::Idle,
                joiners: BTreeMap::new(),
                commit_after_ns: 0,
                filled: BTreeMap::new(),
                memory: BTreeMap::new(),
                next_room_check_ns: 0,
                scratch: None,
            },
            timers,
            last_tick_ns: 0,
            expired: false,
            read_pending: false,
            read_asked_at: 0,
            store_behind: None,
            last_committed: None,
            restart_seen_ns: None,
            actions: VecDeque::new(),
            stats: Stats::default(),
        };
        m.handle_timeout(now_ns);
        m
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Where this node stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The latest view known (this node may not be a member of it).
    pub fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// This node as a member.
    pub fn me(&self) -> ViewMember {
        ViewMember {
            node: self.me,
            incarnation: self.incarnation,
        }
    }

    /// On the CM: until when (its clock) it counts member `node` alive, that is, the
    /// member's lease at the CM (its last request, or answer to a probe, plus a lease).
    /// `None` elsewhere. A member is never removed for a missed probe before then.
    pub fn alive_until(&self, node: u16) -> Option<u64> {
        self.view
            .as_ref()
            .filter(|v| v.cm == self.me)
            .and_then(|_| self.cm.grants.get(&node))
            .map(|g| g.alive_until)
    }

    /// True if this node is the CM of its committed view.
    pub fn is_cm(&self) -> bool {
        self.phase == Phase::Member && self.view.as_ref().is_some_and(|v| v.cm == self.me)
    }

    /// Until when (this node's clock) it may serve reads and commits: 0 unless it is a
    /// member of a committed view; the end of its lease at the CM, or on the CM the end of
    /// its leases at a majority.
    pub fn serving_until(&self) -> u64 {
        if self.phase != Phase::Member {
            return 0;
        }
        if self.is_cm() {
            self.cm_lease_until()
        } else {
            self.holder.lease_until
        }
    }

    /// The CM's lease: it holds one at every member that granted it one, and counts while
    /// a majority of the view (itself included) has.
    fn cm_lease_until(&self) -> u64 {
        let Some(view) = &self.view else { return 0 };
        let majority = view.members.len() / 2 + 1;
        let needed = majority - 1;
        if needed == 0 {
            return u64::MAX;
        }
        // The `needed`-th largest of the members' grants, on the stack for clusters of up
        // to 64 members (called on every iteration of the lease thread).
        let others = view
            .members
            .iter()
            .filter(|m| m.node != self.me)
            .map(|m| self.cm.grants.get(&m.node).map_or(0, |g| g.cm_until));
        let mut stack = [0u64; 64];
        let mut heap = Vec::new();
        let untils: &mut [u64] = if view.members.len() <= stack.len() {
            let mut n = 0;
            for u in others {
                stack[n] = u;
                n += 1;
            }
            &mut stack[..n]
        } else {
            heap.extend(others);
            &mut heap
        };
        untils.sort_unstable_by(|a, b| b.cmp(a));
        untils.get(needed - 1).copied().unwrap_or(0)
    }

    /// When [`Membership::handle_timeout`] should next be called: the earliest timer
    /// armed after the last call (a renewal's interval from it if none is).
    pub fn poll_timeout(&mut self) -> u64 {
        self.arm_lease_timers();
        let after = self.last_tick_ns;
        // A read under way waits for its answer, not for its timer.
        let skip = self.read_pending.then_some(Timer::Read);
        self.timers
            .next_after(after, skip)
            .unwrap_or(after + self.options.renew_ns())
    }

    /// Arms the timers that follow the leases, from where the leases stand: a member's
    /// lease at its CM and a backup CM's takeover, or the CM's own leases and the
    /// members'. Leases move with every grant and ack, so these are read off them when
    /// the caller asks for the next timeout rather than kept by each handler.
    fn arm_lease_timers(&mut self) {
        for timer in [
            Timer::LeaseEnd,
            Timer::Takeover,
            Timer::CmLeaseEnd,
            Timer::Suspect,
        ] {
            self.timers.stop(timer);
        }
        if self.phase != Phase::Member {
            return;
        }
        if self.is_cm() {
            // The members' leases: the first to end after the last tick.
            let after = self.last_tick_ns;
            let suspect = self
                .cm
                .grants
                .values()
                .map(|g| g.alive_until)
                .filter(|&t| t > after)
                .min();
            if let Some(at) = suspect {
                self.timers.set(Timer::Suspect, at);
            }
            let lease = self.cm_lease_until();
            self.timers.set(Timer::CmLeaseEnd, lease);
            return;
        }
        self.timers.set(Timer::LeaseEnd, self.holder.lease_until);
        let rank = self
            .view
            .as_ref()
            .and_then(|v| v.backup_cm_rank(&self.config, self.me, self.options.backup_cms));
        if let Some(rank) = rank {
            let delay = rank as u64 * self.options.probe_timeout_ns();
            let at = self.holder.last_heard_cm_ns + self.options.lease_ns + delay;
            self.timers.set(Timer::Takeover, at);
        }
    }

    /// Moves to reconfiguration state `next`, with no timer of the previous one left.
    fn reconfig_to(&mut self, next: Reconfig) {
        for timer in [Timer::Retry, Timer::RoundEnd, Timer::Resend, Timer::Commit] {
            self.timers.stop(timer);
        }
        self.cm.reconfig = next;
    }

    /// Ends the reconfiguration under way (now idle) and returns it.
    fn take_reconfig(&mut self) -> Reconfig {
        let reconfig = std::mem::replace(&mut self.cm.reconfig, Reconfig::Idle);
        self.reconfig_to(Reconfig::Idle);
        reconfig
    }

    /// Idle, and the next reconfiguration may start now.
    fn may_reconfigure(&self, now_ns: u64) -> bool {
        matches!(self.cm.reconfig, Reconfig::Idle) && self.timers.due(Timer::Retry, now_ns)
    }

    /// Idle, with the next reconfiguration allowed from `at_ns`.
    fn idle_until(&mut self, at_ns: u64) {
        self.reconfig_to(Reconfig::Idle);
        self.timers.set(Timer::Retry, at_ns);
    }

    fn send(&mut self, to: u16, seq: u64, body: Body) {
        let message = Message {
            from: self.me,
            incarnation: self.incarnation,
            view: self.view.as_ref().map_or(0, |v| v.id),
            seq,
            body,
        };
        self.actions.push_back(Action::Send { to, message });
    }

    fn is_member_of_view(&self) -> bool {
        self.view
            .as_ref()
            .is_some_and(|v| v.is_member(self.me, self.incarnation))
    }

    fn request_read(&mut self, now_ns: u64) {
        if !self.read_pending && self.phase != Phase::Removed {
            self.read_pending = true;
            self.read_asked_at = self.view.as_ref().map_or(0, |v| v.id);
            self.timers.set(Timer::Read, now_ns + self.options.lease_ns);
            self.actions.push_back(Action::Read);
        }
    }

    /// Advances timers: renewals, suspicion, probe deadlines, the commit wait, joining.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        self.last_tick_ns = self.last_tick_ns.max(now_ns);
        if self.phase == Phase::Removed {
            return;
        }
        if self.view.is_none() && self.timers.expired(Timer::Read, now_ns) {
            self.request_read(now_ns);
        }
        match self.phase {
            Phase::Joining | Phase::Suspended => self.timers_joining(now_ns),
            Phase::Installing => self.timers_installing(now_ns),
            Phase::Member => self.timers_member(now_ns),
            Phase::Removed => {}
        }
        self.timers_reconfig(now_ns);
    }

    fn timers_joining(&mut self, now_ns: u64) {
        if !self.timers.expired(Timer::Renew, now_ns) {
            return;
        }
        self.timers
            .set(Timer::Renew, now_ns + self.options.renew_ns());
        if self.timers.expired(Timer::Read, now_ns) {
            // The CM may have changed since the view was read.
            self.request_read(now_ns);
        }
        let partial = self.restart_without_all(now_ns);
        let targets: Vec<u16> = match &self.view {
            Some(v) if !v.is_ended() => v.members.iter().map(|m| m.node).collect(),
            // A restart that waited long enough for every node: every node that came
            // back asks every other, and the lowest of them starts the cluster.
            _ if partial => self.config.members().iter().map(|m| m.node).collect(),
            // No cluster yet: the node of lowest id admits the whole file at once.
            _ => vec![self.bootstrap_cm()],
        };
        for to in targets {
            if to != self.me {
                self.send(to, 0, Body::Join);
            }
        }
        if self.view.as_ref().is_none_or(View::is_ended)
            && (self.bootstrap_cm() == self.me || partial && self.restart_cm() == self.me)
        {
            self.try_bootstrap(now_ns);
        }
    }

    /// Whether a restart from the data directories has waited long enough for every node
    /// ([`RESTART_WAIT_LEASES`]): from then, every joining node asks every node, and the
    /// lowest of those that came back starts the cluster with them.
    fn restart_without_all(&mut self, now_ns: u64) -> bool {
        if !self.view.as_ref().is_some_and(View::is_ended_on_disk) {
            return false;
        }
        let since = *self.restart_seen_ns.get_or_insert(now_ns);
        now_ns.saturating_sub(since) >= self.options.lease_ns.saturating_mul(RESTART_WAIT_LEASES)
    }

    /// The node that starts a restart without every node: the lowest that asked.
    fn restart_cm(&self) -> u16 {
        self.cm
            .joiners
            .keys()
            .copied()
            .chain(std::iter::once(self.me))
            .min()
            .unwrap_or(self.me)
    }

    fn bootstrap_cm(&self) -> u16 {
        self.config
            .members()
            .iter()
            .map(|m| m.node)
            .min()
            .unwrap_or(0)
    }

    /// The bootstrap CM swaps in the first view once every node of the file asked to join.
    fn try_bootstrap(&mut self, now_ns: u64) {
        if !self.may_reconfigure(now_ns) {
            return;
        }
        if self.read_pending || self.view.as_ref().is_some_and(|v| !v.is_ended()) {
            return;
        }
        let partial = self.restart_without_all(now_ns);
        if partial && self.restart_cm() != self.me && self.bootstrap_cm() != self.me {
            return;
        }
        let mut members = vec![self.me()];
        let mut missing = Vec::new();
        for m in self.config.members() {
            if m.node == self.me {
                continue;
            }
            match self.cm.joiners.get(&m.node) {
                Some(&incarnation) => members.push(ViewMember {
                    node: m.node,
                    incarnation,
                }),
                None if partial => missing.push(m.node),
                None => return,
            }
        }
        if !missing.is_empty() {
            let ended = self.view.as_ref().expect("ended on disk");
            let uncovered: Vec<u32> = (0..ended.copies.len() as u32)
                .filter(|&p| {
                    !ended
                        .suspended_copies(p)
                        .iter()
                        .any(|n| members.iter().any(|m| m.node == *n))
                })
                .collect();
            if !uncovered.is_empty() {
                if self.stats.restart_waits.is_multiple_of(25) {
                    tracing::warn!(
                        ?missing,
                        partitions = ?uncovered,
                        "restart: waiting for nodes that hold the only copies of partitions"
                    );
                }
                self.stats.restart_waits += 1;
                return;
            }
            tracing::warn!(
                ?missing,
                "restart: starting without nodes that did not come back within {RESTART_WAIT_LEASES} \
                 leases (every partition has a copy on the nodes that did; the others join \
                 later as new lives, refilled)"
            );
        }
        let expected = self.view.as_ref().map(|v| v.id);
        let id = expected.map_or(self.config.id(), |id| id + 1);
        let next = match self.view.as_ref().filter(|v| v.is_ended_on_disk()) {
            // A cluster restarted from its data directories (issue 32): every node's new
            // life loaded its earlier life's copies, and holds them again.
            Some(ended) => {
                tracing::info!(
                    view = id,
                    members = members.len(),
                    "restart: the first view gives each node that came back the copies \
                     its data directory holds"
                );
                ended.restarted(id, members)
            }
            None => {
                tracing::info!(
                    view = id,
                    "bootstrap: every node asked to join; creating the first view"
                );
                View::initial(id, &self.config, members)
            }
        };
        self.reconfig_to(Reconfig::Swapping {
            next: next.clone(),
            commit_after_ns: 0,
        });
        self.actions.push_back(Action::Cas { expected, next });
    }

    fn timers_installing(&mut self, now_ns: u64) {
        if !self.installed || !self.timers.expired(Timer::Renew, now_ns) {
            return;
        }
        self.timers
            .set(Timer::Renew, now_ns + self.options.renew_ns());
        let view = self.view.clone().expect("installing a view");
        if view.cm != self.me {
            // NEW-CONFIG-COMMIT may have been lost: ask again by acking again.
            let cm = view.cm;
            self.send_ack(now_ns, cm);
        } else if self.may_reconfigure(now_ns) {
            // The CM of a view it could neither commit nor replace (a member did not
            // acknowledge, and a probe found no majority): collect the acks again, and
            // reconfigure from this view when some are missing at the deadline.
            self.send_new_config(now_ns, &view);
        }
        if self.timers.expired(Timer::Read, now_ns) {
            // The CM may have failed before committing: another may have taken over.
            self.request_read(now_ns);
        }
        // A CM that does not commit within its wait for acks plus two leases failed: a
        // backup CM takes over. (The CM waits for the slowest member's ack, up to the ack
        // timeout; a member that switched fast must not take that wait for a failure.)
        let backups = view.backup_cms(&self.config, self.options.backup_cms);
        if let Some(rank) = backups.iter().position(|&n| n == self.me) {
            let start = self.holder.installed_at_ns
                + self.options.ack_timeout_ns()
                + 2 * self.options.lease_ns
                + rank as u64 * self.options.probe_timeout_ns();
            if now_ns >= start {
                self.start_probe(now_ns, BTreeSet::new());
            }
        }
    }

    fn timers_member(&mut self, now_ns: u64) {
        // Nothing here allocates in the steady state: the lease thread runs it often, and
        // an allocation may wait on the process's memory map while other threads fault.
        let view = self.view.as_ref().expect("a member has a view");
        let (cm, view_id) = (view.cm, view.id);
        let rank = view.backup_cm_rank(&self.config, self.me, self.options.backup_cms);
        if cm == self.me {
            if self.timers.expired(Timer::Renew, now_ns) {
                self.timers
                    .set(Timer::Renew, now_ns + self.options.renew_ns());
            }
            self.timers_cm(now_ns);
            return;
        }
        if self.timers.expired(Timer::Renew, now_ns) {
            self.timers
                .set(Timer::Renew, now_ns + self.options.renew_ns());
            self.seq += 1;
            let seq = self.seq;
            self.holder.requests[(seq as usize) % REQUESTS_REMEMBERED] = (seq, now_ns);
            let (used, limit) = self.holder.memory;
            self.send(cm, seq, Body::LeaseRequest { used, limit });
            if !self.holder.filled.is_empty() {
                let partitions = self.holder.filled.clone();
                self.send(cm, 0, Body::Filled { partitions });
            }
        }
        if now_ns >= self.holder.lease_until {
            if !self.expired {
                self.expired = true;
                self.stats.lease_expirations += 1;
                tracing::warn!(
                    node = self.me,
                    cm,
                    view = view_id,
                    "lease at the CM ran out: not serving"
                );
                self.stats.suspicions += 1;
                // Look for a newer view at once, and then every lease.
                self.timers.set(Timer::Read, now_ns);
            }
            if self.timers.expired(Timer::Read, now_ns) {
                self.request_read(now_ns);
            }
        } else {
            self.expired = false;
        }
        // A backup CM takes over a CM silent for a lease, after a delay that grows with
        // its rank, so that the first of them usually wins and the others adopt its view.
        if let Some(rank) = rank {
            let start = self.holder.last_heard_cm_ns
                + self.options.lease_ns
                + rank as u64 * self.options.probe_timeout_ns();
            if now_ns >= start && now_ns >= self.holder.lease_until {
                self.start_probe(now_ns, BTreeSet::new());
            }
        }
    }

    fn timers_cm(&mut self, now_ns: u64) {
        let view = self.view.as_ref().expect("a CM has a view");
        let view_id = view.id;
        let me = self.me;
        let grants = &self.cm.grants;
        let any_suspect = view
            .members
            .iter()
            .any(|m| m.node != me && now_ns >= grants.get(&m.node).map_or(0, |g| g.alive_until));
        // A set is built only when there is something to do.
        let mut suspects = BTreeSet::new();
        if any_suspect {
            for m in &view.members {
                if m.node != me && now_ns >= grants.get(&m.node).map_or(0, |g| g.alive_until) {
                    suspects.insert(m.node);
                }
            }
        }
        let lease = self.cm_lease_until();
        if now_ns >= lease {
            if !self.expired {
                self.expired = true;
                self.stats.lease_expirations += 1;
                tracing::warn!(
                    node = self.me,
                    view = view_id,
                    "CM holds leases at no majority: not serving"
                );
            }
            if self.timers.expired(Timer::Read, now_ns) {
                self.request_read(now_ns);
            }
        } else {
            self.expired = false;
        }
        for &p in &self.holder.filled {
            self.cm.filled.entry((p, me)).or_insert(now_ns);
        }
        if !self.may_reconfigure(now_ns) {
            return;
        }
        if suspects.is_empty() && !self.cm.joiners.is_empty() {
            // Processes ask to join (new lives, or suspended ones back): a probe round
            // settles the members first, then admits them in a view of their own.
            tracing::info!(
                view = view_id,
                joiners = ?self.cm.joiners,
                "processes ask to join: probing"
            );
            self.start_probe(now_ns, suspects);
            return;
        }
        if suspects.is_empty() && self.fills_due(now_ns) {
            // Backups filled: a view counts them as copies.
            tracing::info!(
                view = view_id,
                filled = self.cm.filled.len(),
                "backups filled: reconfiguring to count them"
            );
            self.start_probe(now_ns, suspects);
            return;
        }
        if suspects.is_empty() && self.room_due(now_ns) {
            tracing::info!(
                view = view_id,
                "members have room for copies the view could not place: reconfiguring"
            );
            self.start_probe(now_ns, suspects);
            return;
        }
        if !suspects.is_empty() {
            for s in &suspects {
                tracing::warn!(
                    node = s,
                    view = view_id,
                    "CM suspects a member: its lease ran out"
                );
            }
            self.stats.suspicions += suspects.len() as u64;
            // Suspects are probed too: one that answers stays (a false positive costs a
            // probe round, not a member).
            self.start_probe(now_ns, BTreeSet::new());
        }
    }

    /// Whether the CM should reconfigure to count filled backups as copies: every fill
    /// of the view reported, or the first report is a lease old (a view change interrupts
    /// every transaction in flight, so fills completing within a lease share one).
    fn fills_due(&self, now_ns: u64) -> bool {
        if self.cm.filled.is_empty() || self.phase != Phase::Member {
            return false;
        }
        let Some(view) = &self.view else {
            return false;
        };
        let first = self.cm.filled.values().copied().min().unwrap_or(now_ns);
        view.fills().all(|f| self.cm.filled.contains_key(&f))
            || now_ns >= first.saturating_add(self.options.lease_ns)
    }

    /// Whether a new view would place a fill or move the current one could not (its
    /// members full then, with room now: memory freed by deletes, a limit raised), so that
    /// a partition left short of replicas does not wait for an unrelated reconfiguration.
    /// Looks at most once a lease; exact (the placement the next view would make, from
    /// the same figures), so it never reconfigures for nothing.
    fn room_due(&mut self, now_ns: u64) -> bool {
        if self.phase != Phase::Member || now_ns < self.cm.next_room_check_ns {
            return false;
        }
        self.cm.next_room_check_ns = now_ns.saturating_add(self.options.lease_ns);
        let Some(view) = self.view.take() else {
            return false;
        };
        let due = self.room_due_now(&view);
        self.view = Some(view);
        due
    }

    /// Whether the next view would place copies that `view` could not: exact, from the
    /// members' latest figures ([`Membership::room_due`] looks at most once a lease).
    /// Places them in the kept scratch view, which allocates nothing once grown.
    fn room_due_now(&mut self, view: &View) -> bool {
        if self.phase != Phase::Member {
            return false;
        }
        let mut next = match self.cm.scratch.take() {
            Some(mut scratch) => {
                scratch.copy_from(view);
                scratch
            }
            None => view.clone(),
        };
        let full = self.full_members(view, view);
        next.rereplicate(
            &self.config,
            usize::from(self.config.replicas()),
            &BTreeSet::new(),
            &full,
        );
        let due = !next.fills().eq(view.fills());
        self.cm.scratch = Some(next);
        due
    }

    /// The host's report: these partitions, which this node fills in its current view,
    /// are copied whole. The CM counts them as copies in its next view.
    pub fn handle_filled(&mut self, now_ns: u64, partitions: &[u32]) {
        let Some(view) = &self.view else {
            return;
        };
        let mine: Vec<u32> = partitions
            .iter()
            .copied()
            .filter(|&p| view.filling(p).contains(&self.me))
            .collect();
        if mine == self.holder.filled {
            return;
        }
        self.holder.filled = mine;
        if self.phase != Phase::Member || self.holder.filled.is_empty() {
            return;
        }
        if view.cm != self.me {
            let (cm, partitions) = (view.cm, self.holder.filled.clone());
            self.send(cm, 0, Body::Filled { partitions });
        } else {
            self.timers_cm(now_ns);
        }
    }

    /// The host's memory figures for this node: bytes used and the limit (0: none). Sent
    /// with every lease request and probe reply from now on; the CM places no new copy on
    /// a member whose memory has no room for one ([`ferrotx_cluster::memory_full`]).
    pub fn set_memory(&mut self, used: u64, limit: u64) {
        self.holder.memory = (used, limit);
    }

    /// The memory figures this node, as CM, holds for node `node`: the life that reported
    /// them, bytes used, limit (0: none). `None` if it holds none (never reported, or
    /// forgotten: the member left, or this node is not the CM).
    pub fn memory_of(&self, node: u16) -> Option<(u64, u64, u64)> {
        self.cm.memory.get(&node).copied()
    }

    /// The members past their memory limit (bytes used above it) by the latest figures
    /// the CM of this node's view holds: computed if this node is the CM, else as its
    /// last lease grant said. A primary refuses writes that would grow memory to its
    /// partitions with a copy on one of them, so that backups stay within their limits
    /// too.
    pub fn members_over(&self) -> Vec<u16> {
        match &self.view {
            Some(view) if view.cm == self.me => view
                .members
                .iter()
                .filter(|m| {
                    self.figures_of(m)
                        .is_some_and(|(used, limit)| limit > 0 && used > limit)
                })
                .map(|m| m.node)
                .collect(),
            Some(_) => self.holder.members_over.clone(),
            None => Vec::new(),
        }
    }

    /// CM side: records the figures of the member that sent `m`; a new life's replace
    /// its earlier life's.
    fn note_memory(&mut self, m: &Message, used: u64, limit: u64) {
        self.cm.memory.insert(m.from, (m.incarnation, used, limit));
    }

    /// The members of `next` that must be given no new copy: those whose latest figures
    /// (this node's own for itself) leave no room for one more copy of the average size
    /// they hold in `view` ([`ferrotx_cluster::memory_full`]). A member with no figures
    /// (a process just admitted) is not full.
    fn full_members(&self, view: &View, next: &View) -> BTreeSet<u16> {
        next.members
            .iter()
            .filter(|m| {
                self.figures_of(m).is_some_and(|(used, limit)| {
                    ferrotx_cluster::memory_full(used, limit, view.copies_on(m.node))
                })
            })
            .map(|m| m.node)
            .collect()
    }

    /// The latest figures (bytes used, limit or 0) of member `m`'s life: this node's own
    /// for itself; `None` if that life reported none.
    fn figures_of(&self, m: &ViewMember) -> Option<(u64, u64)> {
        if m.node == self.me {
            Some(self.holder.memory)
        } else {
            self.cm
                .memory
                .get(&m.node)
                .filter(|(i, _, _)| *i == m.incarnation)
                .map(|&(_, used, limit)| (used, limit))
        }
    }

    fn handle_filled_message(&mut self, now_ns: u64, m: &Message, partitions: &[u32]) {
        let Some(view) = &self.view else {
            return;
        };
        if view.cm != self.me || self.phase != Phase::Member {
            self.stats.dropped += 1;
            return;
        }
        for &p in partitions {
            if view.filling(p).contains(&m.from) {
                self.cm.filled.entry((p, m.from)).or_insert(now_ns);
            }
        }
    }

    /// Starts a probe round (FaRM 5.2 step 2): every member but this node and `exclude`
    /// (members taken as failed: they did not acknowledge a view), every suspended life
    /// and every joiner is probed, again every sixteenth of a lease until it answers.
    fn start_probe(&mut self, now_ns: u64, exclude: BTreeSet<u16>) {
        if !self.may_reconfigure(now_ns) {
            return;
        }
        let Some(view) = self.view.clone() else {
            return;
        };
        self.stats.probes += 1;
        self.seq += 1;
        let seq = self.seq;
        let probed: BTreeSet<u16> = view
            .members
            .iter()
            .filter(|m| !exclude.contains(&m.node))
            .chain(&view.suspended)
            .map(|m| m.node)
            .chain(self.cm.joiners.keys().copied())
            .filter(|&n| n != self.me)
            .collect();
        tracing::info!(node = self.me, view = view.id, ?probed, ?exclude, "probing");
        for &to in &probed {
            self.send(to, seq, Body::Probe);
        }
        self.reconfig_to(Reconfig::Probing {
            seq,
            exclude,
            probed,
            replies: BTreeSet::new(),
        });
        let timeout = self.options.probe_timeout_ns();
        self.timers.set(Timer::RoundEnd, now_ns + timeout);
        self.timers.set(Timer::Resend, now_ns + timeout / 4);
        self.probe_done_check(now_ns);
    }

    /// Ends the probe once every node probed answered.
    fn probe_done_check(&mut self, now_ns: u64) {
        let Reconfig::Probing {
            probed, replies, ..
        } = &self.cm.reconfig
        else {
            return;
        };
        if probed.iter().all(|n| replies.iter().any(|r| r.node == *n)) {
            self.finish_probe(now_ns);
        }
    }

    /// Whether this round's answers let this node make the next view, counting nodes,
    /// not lives. Two things are needed.
    ///
    /// 1. **It is not the one cut off**: the answers (this node's own included) come from
    ///    a majority of the view's members, where a member counts if its life answered or
    ///    is proven dead (a newer life of its node answered or asked to join: `dead`), or
    ///    from a majority of the configuration's nodes, any life. The first is FaRM's
    ///    rule; the second lets a cluster whose view lists lives that crashed and never
    ///    came back go on with new lives of other nodes (sim seed 7 without the restart).
    /// 2. **No other CM may be serving** once the next view commits. Only the CM of the
    ///    last committed view (`C`) can be. If that is this node, it knows its own grants.
    ///    If that life is proven dead, its lease ends within a lease of its death, which
    ///    the commit waits out. Otherwise it serves only while a majority of `C` (itself
    ///    included) grants it leases, so enough of `C`'s other members must be accounted
    ///    for (this node, answered, or dead) that every such majority has one of them:
    ///    their acknowledgements report the leases they granted it (dead ones' end
    ///    within a lease, waited out too). FaRM gets this from its probe majority; here
    ///    it is checked as such, since the majority of (1) may be of the file.
    ///
    /// Returns whether the next view's commit must first wait a lease (it counted on a
    /// death), or `None` without both.
    fn quorum(
        &self,
        view: &View,
        replies: &BTreeSet<ViewMember>,
        dead: &BTreeSet<ViewMember>,
        newest: &BTreeMap<u16, u64>,
    ) -> Option<bool> {
        let accounted = |m: &ViewMember| *m == self.me() || replies.contains(m) || dead.contains(m);
        let of_view = view.members.iter().filter(|m| accounted(m)).count();
        let nodes = self.config.members();
        let of_file = nodes
            .iter()
            .filter(|n| n.node == self.me || replies.iter().any(|r| r.node == n.node))
            .count();
        if of_view <= view.members.len() / 2 && of_file <= nodes.len() / 2 {
            return None;
        }
        if self.is_cm() {
            return Some(false);
        }
        let last = self.last_committed.as_ref().unwrap_or(view);
        let Some(incarnation) = last.incarnation(last.cm) else {
            return Some(false);
        };
        let old = ViewMember {
            node: last.cm,
            incarnation,
        };
        if old == self.me() {
            return Some(!dead.is_empty());
        }
        if newest.get(&old.node).is_some_and(|&i| i > old.incarnation) {
            return Some(true);
        }
        let is_dead = |m: &ViewMember| newest.get(&m.node).is_some_and(|&i| i > m.incarnation);
        let needed = last.members.len() / 2;
        let unaccounted = last
            .members
            .iter()
            .filter(|m| **m != old && !accounted(m) && !is_dead(m))
            .count();
        (unaccounted < needed).then(|| !dead.is_empty() || last.members.iter().any(is_dead))
    }

    /// The end of a probe round: the next view, from this round's answers only.
    ///
    /// - With no majority ([`Membership::majority`]), or on a CM that holds no lease at a
    ///   majority of its view, nothing: a node cut off makes no view.
    /// - Lives proven dead: a newer life of their node answered or asked to join.
    /// - A member stays if it answered, or if its lease at this CM still runs (a missed
    ///   answer alone never removes a member); the others leave, and where one held the
    ///   last copies of a partition it is suspended with them, not removed
    ///   ([`View::next_without`]).
    /// - Only when no member leaves (and this node was already the CM), joiners that
    ///   answered, new lives and suspended ones, are admitted, in a view of their own: an
    ///   empty joiner never counts toward a view that drops anything.
    /// - Otherwise filled backups are counted, and copies placed where there is room.
    ///
    /// The next view must orphan nothing that may be alive; checked here, in every build.
    fn finish_probe(&mut self, now_ns: u64) {
        let Reconfig::Probing {
            replies, exclude, ..
        } = self.take_reconfig()
        else {
            return;
        };
        let view = self.view.clone().expect("probing a view");
        let retry = now_ns + self.options.lease_ns;
        let takeover = view.cm != self.me;
        // The newest life heard of per node: answers, and joins (a JOIN is authentic and
        // fresh, so its life runs, and every earlier life of its node is dead).
        let mut newest: BTreeMap<u16, u64> = BTreeMap::new();
        for life in replies.iter().copied().chain(
            self.cm
                .joiners
                .iter()
                .map(|(&node, &incarnation)| ViewMember { node, incarnation }),
        ) {
            let e = newest.entry(life.node).or_insert(0);
            *e = (*e).max(life.incarnation);
        }
        let dead: BTreeSet<ViewMember> = view
            .members
            .iter()
            .chain(&view.suspended)
            .filter(|m| newest.get(&m.node).is_some_and(|&i| i > m.incarnation))
            .copied()
            .collect();
        let Some(wait_for_deaths) = self.quorum(&view, &replies, &dead, &newest) else {
            self.stats.probes_without_majority += 1;
            tracing::warn!(
                node = self.me,
                view = view.id,
                answered = ?replies.iter().map(|r| r.node).collect::<Vec<_>>(),
                "probe reached no majority: not reconfiguring"
            );
            self.idle_until(retry);
            return;
        };
        // Leases a dead life granted a CM, or a dead CM granted, end within a lease of its
        // death, which came before its newer life was heard of.
        let commit_after_ns = if wait_for_deaths {
            now_ns + self.options.lengthened(self.options.lease_ns)
        } else {
            0
        };
        let mut staying = vec![self.me()];
        let mut leaving = Vec::new();
        for m in &view.members {
            if m.node == self.me {
                continue;
            }
            let answered = replies.contains(m) && !exclude.contains(&m.node);
            let leased = !takeover
                && !exclude.contains(&m.node)
                && self
                    .cm
                    .grants
                    .get(&m.node)
                    .is_some_and(|g| g.alive_until > now_ns);
            if !dead.contains(m) && (answered || leased) {
                staying.push(*m);
            } else {
                leaving.push(m.node);
            }
        }
        let changes_members = takeover || !leaving.is_empty() || !dead.is_empty();
        let mut members = staying.clone();
        if !changes_members {
            // Admissions: a joiner that answered this round as the life that asked.
            for r in &replies {
                if self.cm.joiners.get(&r.node) == Some(&r.incarnation)
                    && view.incarnation(r.node).is_none()
                {
                    members.push(*r);
                }
            }
        }
        // A joiner that did not answer asks again if it runs.
        self.cm.joiners.retain(|n, i| {
            replies.contains(&ViewMember {
                node: *n,
                incarnation: *i,
            })
        });
        let admits = members.len() > staying.len();
        if !changes_members && !admits && !self.fills_due(now_ns) && !self.room_due_now(&view) {
            tracing::info!(
                node = self.me,
                view = view.id,
                "every member probed answered or holds a lease: nothing to change"
            );
            self.idle_until(now_ns);
            return;
        }
        let mut next = view.next_without(self.me, members, &dead);
        let filled: BTreeSet<(u32, u16)> = self.cm.filled.keys().copied().collect();
        let full = self.full_members(&view, &next);
        if !full.is_empty() {
            tracing::info!(
                node = self.me,
                ?full,
                "members with no memory for another copy: no fill or move goes to them"
            );
        }
        next.rereplicate(
            &self.config,
            usize::from(self.config.replicas()),
            &filled,
            &full,
        );
        let orphaned = view.orphaned_in(&next, &dead);
        if !orphaned.is_empty() || next.check(&self.config).is_err() {
            // A bug: never store it.
            tracing::error!(
                node = self.me,
                from = view.id,
                ?orphaned,
                check = ?next.check(&self.config).err(),
                "refusing to swap in a view that would orphan partitions or is malformed"
            );
            self.idle_until(retry);
            return;
        }
        tracing::info!(
            node = self.me,
            from = view.id,
            to = next.id,
            members = ?next.members.iter().map(|m| m.node).collect::<Vec<_>>(),
            suspended = ?next.suspended.iter().map(|m| m.node).collect::<Vec<_>>(),
            ?leaving,
            "swapping in the next view"
        );
        self.reconfig_to(Reconfig::Swapping {
            next: next.clone(),
            commit_after_ns,
        });
        self.actions.push_back(Action::Cas {
            expected: Some(view.id),
            next,
        });
    }

    /// The reconfiguration's timers: a probe round's end and resends, the wait for
    /// NEW-CONFIG-ACKs and its resends, the commit's wait.
    fn timers_reconfig(&mut self, now_ns: u64) {
        let round_end = self.timers.expired(Timer::RoundEnd, now_ns);
        let resend = self.timers.expired(Timer::Resend, now_ns);
        if matches!(self.cm.reconfig, Reconfig::Confirming { .. })
            && self.timers.expired(Timer::Read, now_ns)
        {
            self.request_read(now_ns);
        }
        match &self.cm.reconfig {
            Reconfig::Probing { .. } if round_end => self.finish_probe(now_ns),
            Reconfig::Probing {
                seq,
                probed,
                replies,
                ..
            } if resend => {
                let seq = *seq;
                let again: Vec<u16> = probed
                    .iter()
                    .copied()
                    .filter(|&n| !replies.iter().any(|r| r.node == n))
                    .collect();
                let timeout = self.options.probe_timeout_ns();
                self.timers.set(Timer::Resend, now_ns + timeout / 4);
                for to in again {
                    self.send(to, seq, Body::Probe);
                }
            }
            Reconfig::Acks { id, acks, .. } if round_end || resend => {
                let id = *id;
                let view = self.view.clone().expect("acks of a view");
                assert_eq!(view.id, id, "the CM collects acks of its own view");
                let missing: Vec<u16> = view
                    .members
                    .iter()
                    .map(|m| m.node)
                    .filter(|n| !acks.contains_key(n))
                    .collect();
                if round_end {
                    // A member did not switch in a whole lease: it failed during the
                    // reconfiguration. Remove it too.
                    let exclude: BTreeSet<u16> =
                        missing.into_iter().filter(|&n| n != self.me).collect();
                    tracing::warn!(
                        view = id,
                        ?exclude,
                        "members did not acknowledge the new view"
                    );
                    self.reconfig_to(Reconfig::Idle);
                    // Reconfigure from the uncommitted view, which stays ours.
                    self.start_probe(now_ns, exclude);
                } else {
                    self.timers
                        .set(Timer::Resend, now_ns + self.options.renew_ns());
                    for to in missing {
                        if to != self.me {
                            self.send(to, 0, Body::NewConfig(view.clone()));
                        }
                    }
                }
            }
            Reconfig::Waiting { id } if self.timers.expired(Timer::Commit, now_ns) => {
                let id = *id;
                self.commit_as_cm(now_ns, id);
            }
            _ => {}
        }
    }

    /// A worker heard of configuration `id` (a datagram of a newer configuration reached
    /// its RPC engine): read the coordination service if it is newer than ours.
    pub fn handle_newer_config(&mut self, now_ns: u64, id: u64) {
        if id > self.view.as_ref().map_or(0, |v| v.id) {
            self.request_read(now_ns);
        }
    }

    /// Seals and opens lease datagrams with `auth` from now on (`None`: neither): the
    /// cluster key and id, as on the RPC path (`ferrotx_wire::auth`). Called once before
    /// the first datagram, and again when the keys rotate.
    pub fn set_auth(&mut self, auth: Option<Auth>) {
        self.auth = auth.map(|auth| auth.sealer(self.sender()));
    }

    /// Who this node's lease datagrams are sealed as.
    fn sender(&self) -> Sender {
        Sender::Lease {
            node: self.me,
            incarnation: self.incarnation,
        }
    }

    /// Writes `message` for node `to` into `out` (cleared first) as a datagram, sealed
    /// for that node if authentication is on. Callers send what [`Action::Send`] asks
    /// through this.
    pub fn encode(&mut self, to: u16, message: &Message, out: &mut Vec<u8>) {
        out.clear();
        message.encode(out);
        if let Some(auth) = &self.auth {
            let seq = self.auth_seq.entry(to).or_insert(0);
            *seq += 1;
            auth.seal(out, u32::from(to), *seq);
        }
    }

    /// [`Membership::encode`] with `auth` in place of this node's own keys, for tests that
    /// seal as another holder of a key would.
    #[cfg(test)]
    fn encode_with(&mut self, auth: Auth, to: u16, message: &Message, out: &mut Vec<u8>) {
        let own = self.auth.replace(auth.sealer(self.sender()));
        self.encode(to, message, out);
        self.auth = own;
    }

    /// Takes a datagram from a lease socket. With authentication on, nothing is decoded
    /// before its MAC is checked, and a datagram whose sequence number its sender's life
    /// has used before is dropped. Refused and undecodable ones are counted.
    pub fn handle_datagram(&mut self, now_ns: u64, bytes: &mut [u8]) {
        let (bytes, seq) = match &mut self.auth {
            Some(auth) => match auth.open(bytes, u32::from(self.me)) {
                Ok((body, seq)) => (body, Some(seq)),
                Err(refusal) => {
                    self.stats.auth_refused[refusal.index()] += 1;
                    return;
                }
            },
            None => (&*bytes, None),
        };
        let m = match Message::decode(bytes) {
            Ok(m) => m,
            Err(_) => {
                self.stats.undecodable += 1;
                return;
            }
        };
        if let Some(seq) = seq
            && !self
                .windows
                .entry(m.from)
                .or_default()
                .accept(m.incarnation, seq)
        {
            self.stats.auth_refused[Refusal::Replay.index()] += 1;
            return;
        }
        self.handle_message(now_ns, m);
    }

    /// Takes a message.
    pub fn handle_message(&mut self, now_ns: u64, m: Message) {
        if self.phase == Phase::Removed {
            self.stats.dropped += 1;
            return;
        }
        let my_id = self.view.as_ref().map_or(0, |v| v.id);
        match m.body {
            Body::Join => return self.handle_join(now_ns, &m),
            Body::NewConfig(ref v) => return self.handle_new_config(now_ns, &m, v.clone()),
            Body::ProbeReply { used, limit } => {
                // From any life of a node of the file: members, suspended lives and
                // joiners are probed. Matched to this round by its number.
                if m.view > my_id {
                    self.request_read(now_ns);
                }
                if matches!(&self.cm.reconfig, Reconfig::Probing { seq, .. } if *seq == m.seq) {
                    self.note_memory(&m, used, limit);
                }
                return self.handle_probe_reply(now_ns, &m);
            }
            Body::Probe => {
                // Answered by anyone: the reply carries our view id, so a prober behind
                // us learns there is a newer view.
                let (used, limit) = self.holder.memory;
                self.send(m.from, m.seq, Body::ProbeReply { used, limit });
                if m.view > my_id {
                    self.request_read(now_ns);
                }
                return;
            }
            _ => {}
        }
        if m.view > my_id {
            // The sender knows a newer view than we do.
            self.stats.dropped += 1;
            self.request_read(now_ns);
            return;
        }
        let sender_is_member = self
            .view
            .as_ref()
            .is_some_and(|v| v.is_member(m.from, m.incarnation));
        if m.view < my_id || !sender_is_member {
            self.stats.dropped += 1;
            if matches!(m.body, Body::LeaseRequest { .. }) {
                // A removed node, or one behind: make it read the view.
                self.send(m.from, m.seq, Body::Stale);
            }
            return;
        }
        match m.body {
            Body::LeaseRequest { used, limit } => {
                self.handle_lease_request(now_ns, &m, used, limit)
            }
            Body::LeaseGrant {
                duration_ns,
                ref over,
            } => self.handle_lease_grant(now_ns, &m, duration_ns, over),
            Body::LeaseAck => self.handle_lease_ack(&m),
            Body::NewConfigAck { old_cm_lease_ns } => {
                self.handle_new_config_ack(now_ns, &m, old_cm_lease_ns)
            }
            Body::NewConfigCommit { duration_ns } => self.handle_commit(now_ns, &m, duration_ns),
            Body::Stale => {
                self.stats.dropped += 1;
            }
            Body::Filled { ref partitions } => self.handle_filled_message(now_ns, &m, partitions),
            Body::Join | Body::NewConfig(_) | Body::Probe | Body::ProbeReply { .. } => {
                unreachable!("handled above")
            }
        }
    }

    fn handle_join(&mut self, now_ns: u64, m: &Message) {
        let joiner = m.sender();
        let Some(view) = self.view.clone().filter(|v| !v.is_ended()) else {
            // No cluster yet: the bootstrap CM collects the file's nodes (after a restart
            // that waited long enough, every node does: the lowest present starts it).
            let partial = self.restart_without_all(now_ns);
            if (self.bootstrap_cm() == self.me || partial)
                && self.config.member(joiner.node).is_some()
                && joiner.node != self.me
            {
                self.cm.joiners.insert(joiner.node, joiner.incarnation);
                if self.bootstrap_cm() == self.me || self.restart_cm() == self.me {
                    self.try_bootstrap(now_ns);
                }
            } else {
                self.stats.dropped += 1;
            }
            return;
        };
        if !matches!(self.phase, Phase::Member | Phase::Installing) {
            self.stats.dropped += 1;
            return;
        }
        if view.is_member(joiner.node, joiner.incarnation) {
            // Admitted already: it missed NEW-CONFIG.
            if view.cm == self.me {
                self.send(joiner.node, 0, Body::NewConfig(view));
            }
            return;
        }
        if self.config.member(joiner.node).is_none()
            || view
                .life(joiner.node)
                .is_some_and(|i| i > joiner.incarnation)
            || self
                .cm
                .joiners
                .get(&joiner.node)
                .is_some_and(|&i| i > joiner.incarnation)
            || joiner.node == self.me
        {
            self.stats.dropped += 1;
            return;
        }
        // Every member keeps the joiners, not only the CM: a backup CM that takes over
        // probes them too, and their answers may be the majority it needs (a view whose
        // other lives crashed).
        if self.cm.joiners.insert(joiner.node, joiner.incarnation) != Some(joiner.incarnation)
            && view.cm == self.me
        {
            tracing::info!(
                node = joiner.node,
                incarnation = joiner.incarnation,
                "a process asks to join"
            );
            if self.phase == Phase::Member {
                // Admit it now rather than at the next timer.
                self.timers_cm(now_ns);
            }
        }
    }

    fn handle_new_config(&mut self, now_ns: u64, m: &Message, v: View) {
        let my_id = self.view.as_ref().map_or(0, |v| v.id);
        if v.id < my_id || v.cm != m.from {
            self.stats.dropped += 1;
            return;
        }
        // A view from the network is checked before anything reads it (a member listed
        // twice, a copy on a non-member, another partition count): a peer with a bug must
        // not make this node install, or panic on, a view the CM could never have made.
        if !v.is_ended()
            && let Err(e) = v.check(&self.config)
        {
            tracing::warn!(from = m.from, "NEW-CONFIG refused: {e}");
            self.stats.dropped += 1;
            return;
        }
        if v.id == my_id {
            if self.installed && self.is_member_of_view() && self.phase != Phase::Joining {
                if self.phase == Phase::Member {
                    // Our ack was lost after the commit: nothing to do, the CM resends
                    // the commit on the next ack. Ack again.
                }
                self.send_ack(now_ns, v.cm);
            }
            return;
        }
        self.adopt(now_ns, v);
    }

    /// Moves to view `v`, newer than ours: install it if we are a member, else stop.
    fn adopt(&mut self, now_ns: u64, v: View) {
        let id = self.view.as_ref().map_or(0, |v| v.id);
        assert!(v.id > id, "view {} adopted after view {id}", v.id);
        let was_member = matches!(self.phase, Phase::Member | Phase::Installing);
        let member = v.is_member(self.me, self.incarnation);
        // Whatever we were reconfiguring is superseded.
        if !matches!(self.cm.reconfig, Reconfig::Idle) {
            self.reconfig_to(Reconfig::Idle);
        }
        if !member && v.is_suspended(self.me, self.incarnation) {
            // Cut off while holding the last copies of some partitions: this life keeps
            // them (its workers stay in their last view, not serving: the lease is out)
            // and asks the view's members to readmit it.
            if self.phase != Phase::Suspended {
                tracing::warn!(
                    node = self.me,
                    view = v.id,
                    "suspended: holding the last copies of partitions; asking to be readmitted"
                );
            }
            self.view = Some(v);
            self.phase = Phase::Suspended;
            self.timers.set(Timer::Renew, now_ns);
            return;
        }
        if !member {
            if was_member
                || self.phase == Phase::Suspended
                || v.life(self.me).is_some_and(|i| i > self.incarnation)
            {
                tracing::error!(
                    node = self.me,
                    view = v.id,
                    "removed from the configuration: this process stops serving for good"
                );
                self.view = Some(v.clone());
                self.phase = Phase::Removed;
                self.actions.push_back(Action::Removed { view: v.id });
            } else {
                // Joining: learn whom to ask.
                self.view = Some(v);
                self.timers.set(Timer::Renew, now_ns);
            }
            return;
        }
        tracing::info!(
            node = self.me,
            view = v.id,
            cm = v.cm,
            "new configuration: switching"
        );
        // Figures are the CM's: a node of a view another CM manages drops them (if it
        // takes over later, its probe's answers bring fresh ones).
        if v.cm != self.me {
            self.cm.memory.clear();
        }
        self.view = Some(v.clone());
        self.phase = Phase::Installing;
        self.installed = false;
        self.expired = false;
        self.cm.filled.clear();
        self.holder.filled.clear();
        self.holder.last_heard_cm_ns = now_ns;
        self.cm.joiners.retain(|n, i| !v.is_member(*n, *i));
        self.actions.push_back(Action::Install(v));
    }

    /// The caller switched every worker to view `id` ([`Action::Install`]).
    pub fn handle_installed(&mut self, now_ns: u64, id: u64) {
        let Some(view) = self.view.clone() else {
            return;
        };
        if view.id != id || self.phase != Phase::Installing || self.installed {
            return;
        }
        self.installed = true;
        self.timers
            .set(Timer::Renew, now_ns + self.options.renew_ns());
        self.holder.installed_at_ns = now_ns;
        if view.cm == self.me {
            self.own_ack(now_ns);
        } else {
            self.send_ack(now_ns, view.cm);
        }
    }

    fn send_ack(&mut self, now_ns: u64, cm: u16) {
        let old_cm_lease_ns = self.old_cm_lease_ns(now_ns, cm);
        // The ack grants the CM a lease too.
        self.grant_cm(now_ns, cm);
        // Numbered like lease requests: the commit answering it names it, and its lease is
        // timed from when this ack was sent.
        self.seq += 1;
        let seq = self.seq;
        self.holder.requests[(seq as usize) % REQUESTS_REMEMBERED] = (seq, now_ns);
        self.send(cm, seq, Body::NewConfigAck { old_cm_lease_ns });
    }

    /// How long the leases this node granted CMs other than `cm` may still run: a new CM
    /// waits them out before committing (a removed CM serves until its leases end, and
    /// so do the leases it granted).
    fn old_cm_lease_ns(&mut self, now_ns: u64, cm: u16) -> u64 {
        self.holder.granted_cms.retain(|_, until| *until > now_ns);
        self.holder
            .granted_cms
            .iter()
            .filter(|(c, _)| **c != cm)
            .map(|(_, until)| until - now_ns)
            .max()
            .unwrap_or(0)
    }

    /// Records that this node granted `cm` a lease, which the CM times from before now.
    fn grant_cm(&mut self, now_ns: u64, cm: u16) {
        let until = now_ns + self.options.lease_ns;
        let e = self.holder.granted_cms.entry(cm).or_insert(until);
        *e = (*e).max(until);
    }

    fn handle_commit(&mut self, now_ns: u64, m: &Message, duration_ns: u64) {
        let view = self.view.as_ref().expect("a member has a view");
        if self.phase != Phase::Installing || !self.installed || m.from != view.cm {
            self.stats.dropped += 1;
            return;
        }
        let id = view.id;
        // The commit answers one of our acks: its lease is timed from that ack. One that
        // answers an ack older than a lease (taken from the inbox after a pause) is
        // dropped: the view it commits may have been superseded meanwhile. A fresh ack
        // gets a fresh commit.
        let (seq, sent) = self.holder.requests[(m.seq as usize) % REQUESTS_REMEMBERED];
        if seq != m.seq || now_ns >= sent + self.options.lease_ns {
            self.stats.dropped += 1;
            return;
        }
        assert!(
            self.is_member_of_view(),
            "a commit of a view without this life"
        );
        self.phase = Phase::Member;
        self.stats.views_committed += 1;
        self.last_committed = Some(view.clone());
        self.holder.last_heard_cm_ns = now_ns;
        self.holder.lease_until = sent + self.options.shortened(duration_ns);
        self.grant_cm(now_ns, m.from);
        // A commit may carry no lease (the CM held none at a majority yet): the first
        // renewal brings one, and a lease never held has not expired.
        self.expired = self.holder.lease_until <= now_ns;
        // Renew at once: the commit's lease is timed from our ack.
        self.timers.set(Timer::Renew, now_ns);
        tracing::info!(
            node = self.me,
            view = id,
            "configuration committed: serving"
        );
        self.actions.push_back(Action::Commit(id));
        self.timers_member(now_ns);
    }

    fn handle_lease_request(&mut self, now_ns: u64, m: &Message, used: u64, limit: u64) {
        if !self.is_cm() {
            self.stats.dropped += 1;
            return;
        }
        self.note_memory(m, used, limit);
        if let Reconfig::Swapping { next, .. } | Reconfig::Confirming { next, .. } =
            &self.cm.reconfig
            && !next.is_member(m.from, m.incarnation)
        {
            // The view being stored drops this member (its lease ran out when the probe
            // round ended). Renewing it now would keep alive a member the next view
            // removes: the swap may take long (a slow coordination service), and the
            // member asks again, to be admitted, once the view is committed.
            self.stats.renewals_refused += 1;
            return;
        }
        let lease = self.options.lease_ns;
        let duration = lease.min(self.cm_lease_until().saturating_sub(now_ns));
        let g = self.cm.grants.entry(m.from).or_default();
        g.keep_alive(now_ns + lease);
        g.granted_until = g.granted_until.max(now_ns + duration);
        g.last_grant = (m.seq, now_ns);
        let over = self.members_over();
        self.send(
            m.from,
            m.seq,
            Body::LeaseGrant {
                duration_ns: duration,
                over,
            },
        );
    }

    fn handle_lease_grant(&mut self, now_ns: u64, m: &Message, duration_ns: u64, over: &[u16]) {
        let view = self.view.as_ref().expect("a member has a view");
        if self.phase != Phase::Member || m.from != view.cm {
            self.stats.dropped += 1;
            return;
        }
        let (seq, sent) = self.holder.requests[(m.seq as usize) % REQUESTS_REMEMBERED];
        if seq != m.seq {
            self.stats.dropped += 1;
            return;
        }
        self.stats.renewals += 1;
        self.holder.last_heard_cm_ns = now_ns;
        if self.holder.members_over != over {
            self.holder.members_over = over.to_vec();
        }
        let rtt = now_ns.saturating_sub(sent).max(1);
        let bucket = (63 - rtt.leading_zeros() as usize).min(self.stats.renewal_rtt_log2.len() - 1);
        self.stats.renewal_rtt_log2[bucket] += 1;
        self.stats.renewal_rtt_max_ns = self.stats.renewal_rtt_max_ns.max(rtt);
        let until = sent + self.options.shortened(duration_ns);
        if until > self.holder.lease_until {
            self.holder.lease_until = until;
        }
        if duration_ns == 0 {
            // The CM has no lease itself: our ack gives it one; ask again soon.
            let soon = self
                .timers
                .get(Timer::Renew)
                .unwrap_or(u64::MAX)
                .min(now_ns + self.options.renew_ns() / 4);
            self.timers.set(Timer::Renew, soon);
        }
        // Our grant of the CM's lease: it times it from its grant, earlier than now.
        self.grant_cm(now_ns, m.from);
        self.send(m.from, m.seq, Body::LeaseAck);
    }

    fn handle_lease_ack(&mut self, m: &Message) {
        if !self.is_cm() {
            self.stats.dropped += 1;
            return;
        }
        let lease = self.options.lease_ns;
        let g = self.cm.grants.entry(m.from).or_default();
        if g.last_grant.0 == m.seq {
            g.hold_until(g.last_grant.1 + self.options.shortened(lease));
        }
    }

    fn handle_probe_reply(&mut self, now_ns: u64, m: &Message) {
        let Reconfig::Probing {
            seq,
            probed,
            replies,
            ..
        } = &mut self.cm.reconfig
        else {
            self.stats.dropped += 1;
            return;
        };
        if *seq != m.seq || !probed.contains(&m.from) {
            self.stats.dropped += 1;
            return;
        }
        replies.insert(m.sender());
        // A member that answers is alive: a suspicion it answers costs no removal, and it
        // is not suspected again before it can renew.
        let member = self
            .view
            .as_ref()
            .is_some_and(|v| v.cm == self.me && v.is_member(m.from, m.incarnation));
        if member {
            let until = now_ns + self.options.lease_ns;
            let g = self.cm.grants.entry(m.from).or_default();
            g.keep_alive(until);
        }
        self.probe_done_check(now_ns);
    }

    fn handle_new_config_ack(&mut self, now_ns: u64, m: &Message, old_cm_lease_ns: u64) {
        let view = self.view.clone().expect("a member has a view");
        if view.cm != self.me {
            self.stats.dropped += 1;
            return;
        }
        match &mut self.cm.reconfig {
            Reconfig::Acks {
                id, sent_ns, acks, ..
            } if *id == view.id => {
                let until = now_ns + self.options.lengthened(old_cm_lease_ns);
                acks.insert(m.from, until);
                let g = self.cm.grants.entry(m.from).or_default();
                g.hold_until(*sent_ns + self.options.shortened(self.options.lease_ns));
                g.last_ack_seq = m.seq;
                self.acks_done_check(now_ns);
            }
            _ if self.phase == Phase::Member => {
                // The member missed NEW-CONFIG-COMMIT (or dropped it as stale).
                let duration = self
                    .options
                    .lease_ns
                    .min(self.cm_lease_until().saturating_sub(now_ns));
                let g = self.cm.grants.entry(m.from).or_default();
                g.granted_until = g.granted_until.max(now_ns + duration);
                self.send(
                    m.from,
                    m.seq,
                    Body::NewConfigCommit {
                        duration_ns: duration,
                    },
                );
            }
            _ => self.stats.dropped += 1,
        }
    }

    /// The CM sends NEW-CONFIG of `view` to every other member and starts collecting
    /// their acks (its own counts once its workers have switched).
    fn send_new_config(&mut self, now_ns: u64, view: &View) {
        for m in &view.members {
            if m.node != self.me {
                self.send(m.node, 0, Body::NewConfig(view.clone()));
            }
        }
        self.reconfig_to(Reconfig::Acks {
            id: view.id,
            sent_ns: now_ns,
            acks: BTreeMap::new(),
        });
        self.timers
            .set(Timer::RoundEnd, now_ns + self.options.ack_timeout_ns());
        self.timers
            .set(Timer::Resend, now_ns + self.options.renew_ns());
        if self.installed {
            self.own_ack(now_ns);
        }
    }

    /// The CM's own ack: its workers switched. It reports, like every ack, how long the
    /// leases it granted another CM may still run.
    fn own_ack(&mut self, now_ns: u64) {
        let own = self.old_cm_lease_ns(now_ns, self.me);
        let until = now_ns + self.options.lengthened(own);
        if let Reconfig::Acks { acks, .. } = &mut self.cm.reconfig {
            acks.insert(self.me, until);
        }
        self.acks_done_check(now_ns);
    }

    fn acks_done_check(&mut self, now_ns: u64) {
        let Reconfig::Acks { id, acks, .. } = &self.cm.reconfig else {
            return;
        };
        let view = self.view.as_ref().expect("acks of a view");
        if !view.members.iter().all(|m| acks.contains_key(&m.node)) {
            return;
        }
        // FaRM 5.2 step 7: every lease granted to a node that is no longer a member must
        // have run out. Those this CM granted, it knows; those an earlier CM granted end
        // with that CM's own lease, which the acks bound.
        let mut until = acks.values().copied().max().unwrap_or(0);
        for (node, g) in &self.cm.grants {
            if view.incarnation(*node).is_none() {
                let slack = self.options.lengthened(self.options.lease_ns) - self.options.lease_ns;
                until = until.max(g.granted_until + slack);
            }
        }
        let id = *id;
        until = until.max(self.cm.commit_after_ns);
        tracing::info!(
            view = id,
            wait_ms = until.saturating_sub(now_ns) / 1_000_000,
            "every member switched; waiting out old leases"
        );
        self.reconfig_to(Reconfig::Waiting { id });
        self.timers.set(Timer::Commit, until);
        self.timers_reconfig(now_ns);
    }

    fn commit_as_cm(&mut self, now_ns: u64, id: u64) {
        let view = self.view.clone().expect("committing a view");
        assert_eq!(view.id, id, "the CM commits the view it installs");
        assert!(
            self.phase == Phase::Installing && self.installed && view.cm == self.me,
            "the CM commits a view it installed: phase {:?}",
            self.phase
        );
        self.reconfig_to(Reconfig::Idle);
        self.phase = Phase::Member;
        self.stats.views_committed += 1;
        self.last_committed = Some(view.clone());
        // Members not in the view are forgotten; the others count alive for a lease.
        let lease = self.options.lease_ns;
        self.cm.grants.retain(|n, _| view.incarnation(*n).is_some());
        self.cm.memory.retain(|n, (i, _, _)| view.is_member(*n, *i));
        for m in &view.members {
            if m.node != self.me {
                let g = self.cm.grants.entry(m.node).or_default();
                // Timed from now, so never earlier than a lease it had.
                assert!(
                    g.alive_until <= now_ns + lease,
                    "a member's lease at the CM moved back"
                );
                g.alive_until = now_ns + lease;
            }
        }
        self.cm.joiners.retain(|n, i| !view.is_member(*n, *i));
        // A CM that holds no lease at a majority yet (a first view) gets them from the
        // members' first renewals; a lease never held has not expired.
        self.expired = self.cm_lease_until() <= now_ns;
        let duration = lease.min(self.cm_lease_until().saturating_sub(now_ns));
        for m in &view.members {
            if m.node != self.me {
                let g = self.cm.grants.entry(m.node).or_default();
                g.granted_until = g.granted_until.max(now_ns + duration);
                let seq = g.last_ack_seq;
                self.send(
                    m.node,
                    seq,
                    Body::NewConfigCommit {
                        duration_ns: duration,
                    },
                );
            }
        }
        tracing::info!(
            node = self.me,
            view = id,
            "configuration committed (CM): serving"
        );
        self.actions.push_back(Action::Commit(id));
    }

    /// The coordination service's answer to [`Action::Read`].
    pub fn handle_read(&mut self, now_ns: u64, result: Result<Option<View>, CoordinationError>) {
        self.read_pending = false;
        if let Reconfig::Confirming { next, .. } = &self.cm.reconfig
            && let Ok(read) = &result
        {
            let stored = read.as_ref().is_some_and(|v| v == next);
            let Reconfig::Confirming {
                next,
                commit_after_ns,
            } = self.take_reconfig()
            else {
                unreachable!("confirming a swap")
            };
            if stored {
                tracing::info!(
                    node = self.me,
                    view = next.id,
                    "the swap whose outcome was unknown went in"
                );
                self.swapped(now_ns, next, commit_after_ns);
                self.handle_timeout(now_ns);
                return;
            }
            tracing::info!(
                node = self.me,
                view = next.id,
                "the swap whose outcome was unknown did not go in"
            );
            self.stats.swaps_lost += 1;
            self.idle_until(now_ns + self.options.renew_ns());
        }
        match result {
            Ok(Some(v)) => self.handle_view_read(now_ns, v, self.read_asked_at),
            Ok(None) => {
                if self.view.is_none() {
                    self.timers.set(Timer::Renew, now_ns);
                }
            }
            Err(e) => {
                tracing::warn!(node = self.me, "reading the coordination service: {e}");
                self.timers
                    .set(Timer::Read, now_ns + self.options.renew_ns());
            }
        }
        self.handle_timeout(now_ns);
    }

    /// A view read from the coordination service, by a read asked for when this node's
    /// view was `asked_at`.
    fn handle_view_read(&mut self, now_ns: u64, v: View, asked_at: u64) {
        let my_id = self.view.as_ref().map_or(0, |v| v.id);
        if v.id < my_id && v.id >= asked_at {
            // Overtaken: this node adopted a newer view while the read was on its way.
            return;
        }
        if v.id < my_id {
            // The service went back: restored from an old copy, or another store. Never
            // adopted nor swapped against (a swap expects this node's id, so it fails).
            if self.store_behind != Some(v.id) {
                self.store_behind = Some(v.id);
                self.stats.store_went_back += 1;
                tracing::error!(
                    node = self.me,
                    stored = v.id,
                    view = my_id,
                    "the coordination service holds a view older than this node's: it went back (restored from an old copy?); no view can be stored until it holds this node's view again"
                );
            }
            return;
        }
        self.store_behind = None;
        if v.id == my_id {
            // A view ended on disk keeps the id of the view it ended
            // (`View::ended_on_disk`): a joiner that read that view while it was live
            // (its members died since, and the first of their new lives ended it) takes
            // the ended one, or it keeps asking lives that are gone to admit it and, as
            // the bootstrap CM, never restarts the cluster (`power` seed 714).
            if v.is_ended()
                && self.phase == Phase::Joining
                && self.view.as_ref().is_some_and(|mine| !mine.is_ended())
            {
                self.view = Some(v);
                self.timers.set(Timer::Renew, now_ns);
            }
            return;
        }
        if v.is_ended() {
            self.view = Some(v);
            self.timers.set(Timer::Renew, now_ns);
            return;
        }
        self.adopt(now_ns, v);
    }

    /// The coordination service's answer to [`Action::Cas`].
    pub fn handle_cas(&mut self, now_ns: u64, result: Result<(), CoordinationError>) {
        let Reconfig::Swapping {
            next,
            commit_after_ns,
        } = self.take_reconfig()
        else {
            return;
        };
        match result {
            Ok(()) => self.swapped(now_ns, next, commit_after_ns),
            Err(CoordinationError::Conflict(Some(current))) if *current == next => {
                // This very view is stored: an earlier attempt went in and its answer was
                // lost. This node is its CM, not a follower.
                tracing::info!(
                    node = self.me,
                    view = next.id,
                    "the view to swap in is stored already (an earlier attempt went in)"
                );
                self.swapped(now_ns, next, commit_after_ns);
            }
            Err(CoordinationError::Conflict(current)) => {
                self.stats.swaps_lost += 1;
                tracing::info!(
                    node = self.me,
                    "lost the race to swap the view; adopting the winner's"
                );
                if let Some(v) = current {
                    // Read now: never overtaken.
                    self.handle_view_read(now_ns, *v, u64::MAX);
                }
            }
            Err(CoordinationError::Unknown(e)) => {
                self.stats.swaps_unknown += 1;
                tracing::warn!(
                    node = self.me,
                    view = next.id,
                    "swapping the view: {e}; reading the coordination service to learn whether it went in"
                );
                self.reconfig_to(Reconfig::Confirming {
                    next,
                    commit_after_ns,
                });
                self.request_read(now_ns);
            }
            Err(CoordinationError::Unavailable(e)) => {
                tracing::warn!(node = self.me, "coordination service unavailable: {e}");
                self.idle_until(now_ns + self.options.renew_ns());
            }
        }
    }

    /// `next` is stored, with this node as its CM: FaRM 5.2 step 4, NEW-CONFIG.
    fn swapped(&mut self, now_ns: u64, next: View, commit_after_ns: u64) {
        let id = self.view.as_ref().map_or(0, |v| v.id);
        assert!(
            next.id > id && next.is_member(self.me, self.incarnation) && next.cm == self.me,
            "view {} swapped in over view {id} by a node that is not its CM",
            next.id
        );
        self.stats.views_swapped += 1;
        tracing::info!(
            node = self.me,
            view = next.id,
            "new view stored; sending NEW-CONFIG"
        );
        self.store_behind = None;
        self.view = Some(next.clone());
        self.phase = Phase::Installing;
        self.installed = false;
        self.cm.filled.clear();
        self.holder.filled.clear();
        // Admitted: a joiner that then fails to acknowledge is left out by the
        // next round, not admitted again (it asks again if it is alive).
        self.cm.joiners.retain(|n, i| !next.is_member(*n, *i));
        self.cm.commit_after_ns = commit_after_ns;
        self.send_new_config(now_ns, &next);
        self.actions.push_back(Action::Install(next));
    }

    /// The view id the coordination service went back to, below this node's view, if
    /// the last read found it so ([`Stats::store_went_back`]).
    pub fn store_behind(&self) -> Option<u64> {
        self.store_behind
    }
}

#[cfg(test)]
mod tests;
