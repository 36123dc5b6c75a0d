//! Faults placed where a membership situation arises, not at a time fixed in advance: a
//! [`Plot`] waits for its [`Cue`] (the CM took the first answer of a probe round that
//! probes a joiner; a view without some life was stored; a time) and then strikes
//! ([`Strike`]). The hand-written scenarios of issue 30 use them
//! ([`crate::membership_scenarios`]), and count what the run went through in
//! [`Situations`], so that a scenario that never reached its situation fails rather than
//! passing for nothing.

use std::collections::{BTreeMap, BTreeSet};

use ferrotx_cluster::{View, ViewMember};
use ferrotx_membership::{Body, Message};

/// What a plotted fault waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cue {
    /// The CM of its view takes the first answer of a probe round that probes a new life
    /// (a joiner: a process whose life is neither a member nor suspended in the CM's
    /// view) while others probed in that round have not answered. The strike comes at
    /// once: the CM takes no other datagram of that instant (they are cut on arrival).
    CmFirstReplyOfJoinProbe,
    /// A view is stored that no longer has as a member the life of `node` that the view
    /// before it had (that life was removed or suspended).
    ViewWithout {
        /// The node.
        node: u16,
    },
    /// This long after the clients started.
    After {
        /// Simulated ns.
        ns: u64,
    },
}

/// What a plotted fault does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Strike {
    /// Cut the node the cue names (the CM whose probe it was) off from every other node,
    /// both ways; healed this long after.
    IsolateCued {
        /// Heal after this long.
        heal_after_ns: u64,
    },
    /// Cut `node` off from every other node, both ways; healed this long after.
    Isolate {
        /// The node.
        node: u16,
        /// Heal after this long.
        heal_after_ns: u64,
    },
    /// Cut the CM of the latest stored view off, both ways; healed this long after.
    IsolateCm {
        /// Heal after this long.
        heal_after_ns: u64,
    },
    /// Crash `node`, and restart it (a new life, empty) this long after, if set.
    Crash {
        /// The node.
        node: u16,
        /// Restart after this long.
        restart_after_ns: Option<u64>,
    },
}

/// A fault placed on a cue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plot {
    /// What it waits for.
    pub cue: Cue,
    /// How long after the cue it strikes (`CmFirstReplyOfJoinProbe` strikes at once).
    pub delay_ns: u64,
    /// What it does.
    pub strike: Strike,
    /// If the cue has not come this long after the clients started, the plot is dropped
    /// (and the run's [`Situations::plot`] says so): the run then ends as if it had no
    /// plot, and its scenario fails for not reaching its situation.
    pub expires_after_ns: u64,
}

/// What a run went through, for the scenarios that must reach a situation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Situations {
    /// What the plot did, in order (empty: the run had none).
    pub plot: Vec<String>,
    /// Whether the plot's cue came and its strike was carried out.
    pub struck: bool,
    /// Times a CM was cut off after taking the first answer of a probe round that probed
    /// a joiner, with others of the round still to answer.
    pub cm_cut_between_replies: u64,
    /// Of those, the times the first answer was the joiner's (else a member's).
    pub cm_cut_after_joiner_answer: u64,
    /// Times the CM was cut off while a member of its view was paused.
    pub cm_isolated_while_paused: u64,
    /// Nodes the plot crashed, each with the members of the latest stored view then.
    pub crashed_in_view: Vec<(u16, Vec<u16>)>,
    /// Lives some view suspended (cut off holding the last copies of partitions).
    pub suspended: u64,
    /// Suspended lives a later view lists as members again, as the same life, holding
    /// (not filling) copies of partitions they held while suspended: readmitted with
    /// their data.
    pub readmitted: u64,
    /// Lives removed while alive (their process learned it and stopped) whose node had a
    /// newer life admitted later: the process came back by itself.
    pub rejoined: u64,
    /// Of those newer lives, the ones given backups to fill that a later view counted as
    /// copies: refilled by data recovery.
    pub refilled: u64,
    /// Views that admitted a life new to the view before (neither a member nor suspended
    /// there) while dropping (removing or suspending) a member of it. Membership's rule 4
    /// (joiners are admitted in a view of their own) makes it 0, and check (f) fails a run
    /// with such a view; counted too, so that a sweep shows where.
    pub admitted_while_dropping: u64,
}

impl Situations {
    /// Fills in what the history of views (in id order) shows; `removed` are the lives
    /// whose process learned it was removed: (simulated time, node, life, view).
    pub fn from_history(&mut self, history: &[View], removed: &[(u64, u16, u64, u64)]) {
        let mut suspended: BTreeSet<ViewMember> = BTreeSet::new();
        let mut readmitted: BTreeSet<ViewMember> = BTreeSet::new();
        for (i, view) in history.iter().enumerate() {
            for life in &view.suspended {
                suspended.insert(*life);
                let held: Vec<u32> = (0..view.copies.len() as u32)
                    .filter(|&p| view.suspended_copies(p).contains(&life.node))
                    .collect();
                let back = history[i + 1..].iter().any(|later| {
                    later.is_member(life.node, life.incarnation)
                        && held
                            .iter()
                            .any(|&p| later.copies[p as usize].contains(&life.node))
                });
                if back {
                    readmitted.insert(*life);
                }
            }
        }
        self.suspended = suspended.len() as u64;
        self.readmitted = readmitted.len() as u64;
        let mut rejoined: BTreeSet<ViewMember> = BTreeSet::new();
        let mut refilled: BTreeSet<ViewMember> = BTreeSet::new();
        for &(_, node, incarnation, _) in removed {
            let newer: BTreeSet<u64> = history
                .iter()
                .filter_map(|v| v.incarnation(node))
                .filter(|&i| i > incarnation)
                .collect();
            for life in newer {
                rejoined.insert(ViewMember {
                    node,
                    incarnation: life,
                });
                let filled = history.windows(2).any(|w| {
                    w[0].is_member(node, life)
                        && w[1].is_member(node, life)
                        && w[0]
                            .fills()
                            .any(|(p, n)| n == node && w[1].copies[p as usize].contains(&node))
                });
                if filled {
                    refilled.insert(ViewMember {
                        node,
                        incarnation: life,
                    });
                }
            }
        }
        self.rejoined = rejoined.len() as u64;
        self.refilled = refilled.len() as u64;
        self.admitted_while_dropping = history
            .windows(2)
            .filter(|w| !w[0].is_ended() && !w[1].is_ended())
            .filter(|w| {
                let admits = w[1].members.iter().any(|m| {
                    !w[0].is_member(m.node, m.incarnation)
                        && !w[0].is_suspended(m.node, m.incarnation)
                });
                let drops = w[0]
                    .members
                    .iter()
                    .any(|m| !w[1].is_member(m.node, m.incarnation));
                admits && drops
            })
            .count() as u64;
    }
}

/// A plot as a run carries it out.
#[derive(Debug)]
pub(crate) struct PlotState {
    pub(crate) plot: Plot,
    /// Whether the cue came.
    pub(crate) cued: bool,
    /// Whether it is dropped (the cue never came).
    pub(crate) dropped: bool,
    /// When the clients started, and when the run's other faults are over.
    pub(crate) start_ns: u64,
    pub(crate) faults_over_ns: u64,
    /// The strike due, with the node the cue named: (time, node).
    pub(crate) due: Option<(u64, Option<u16>)>,
    /// Probe rounds each node sent last: (round number, the nodes probed).
    probes: BTreeMap<u16, (u64, BTreeSet<u16>)>,
    /// Answers each node took in its last round.
    replied: BTreeMap<u16, BTreeSet<u16>>,
    /// Probe answers sent, by a digest of their sealed bytes: (from, to, round).
    replies_sent: BTreeMap<u64, (u16, u16, u64)>,
}

impl PlotState {
    pub(crate) fn new(plot: Plot, start_ns: u64, faults_over_ns: u64) -> Self {
        let due = match plot.cue {
            Cue::After { ns } => Some((start_ns + ns + plot.delay_ns, None)),
            _ => None,
        };
        Self {
            cued: due.is_some(),
            plot,
            dropped: false,
            start_ns,
            faults_over_ns,
            due,
            probes: BTreeMap::new(),
            replied: BTreeMap::new(),
            replies_sent: BTreeMap::new(),
        }
    }

    /// Whether the plot still waits for its cue or its strike.
    pub(crate) fn pending(&self) -> bool {
        !self.dropped && (!self.cued || self.due.is_some())
    }

    /// When the plot is dropped if its cue has not come.
    pub(crate) fn expires_ns(&self) -> u64 {
        self.start_ns + self.plot.expires_after_ns
    }

    fn watches_probes(&self) -> bool {
        !self.cued && !self.dropped && self.plot.cue == Cue::CmFirstReplyOfJoinProbe
    }

    /// Node `node` sends `message` to `to`, sealed as `bytes`.
    pub(crate) fn sent(&mut self, node: u16, to: u16, message: &Message, bytes: &[u8]) {
        if !self.watches_probes() {
            return;
        }
        match message.body {
            Body::Probe => {
                let round = self.probes.entry(node).or_default();
                if round.0 != message.seq {
                    *round = (message.seq, BTreeSet::new());
                    self.replied.remove(&node);
                }
                round.1.insert(to);
            }
            Body::ProbeReply { .. } => {
                self.replies_sent
                    .insert(fnv(bytes), (node, to, message.seq));
            }
            _ => {}
        }
    }

    /// The node whose answer to `node`'s current probe round `bytes` (sealed, as
    /// received) is, if it is one.
    pub(crate) fn reply_to_round(&self, node: u16, bytes: &[u8]) -> Option<u16> {
        if !self.watches_probes() {
            return None;
        }
        let &(from, to, seq) = self.replies_sent.get(&fnv(bytes))?;
        let (round, _) = self.probes.get(&node)?;
        (to == node && *round == seq).then_some(from)
    }

    /// Node `node` took `from`'s answer to its current round: whether that is the first
    /// answer while others are awaited. Returns the nodes probed.
    pub(crate) fn first_reply(&mut self, node: u16, from: u16) -> Option<BTreeSet<u16>> {
        let replied = self.replied.entry(node).or_default();
        replied.insert(from);
        let probed = &self.probes.get(&node)?.1;
        (replied.len() == 1 && probed.len() > 1).then(|| probed.clone())
    }

    /// The cue came at `now`: the strike is due after the plot's delay (named node: the
    /// one the cue names).
    pub(crate) fn cue(&mut self, now: u64, node: Option<u16>) {
        self.cued = true;
        self.due = Some((now + self.plot.delay_ns, node));
        self.probes.clear();
        self.replied.clear();
        self.replies_sent.clear();
    }

    /// A view `next` was stored over `current`: whether that is the cue.
    pub(crate) fn stored(&self, current: &View, next: &View) -> bool {
        if self.cued || self.dropped {
            return false;
        }
        let Cue::ViewWithout { node } = self.plot.cue else {
            return false;
        };
        current
            .incarnation(node)
            .is_some_and(|life| !next.is_member(node, life))
    }
}

/// FNV-1a of `bytes`.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
