//! A view: the part of a cluster's configuration that reconfiguration changes (FaRM
//! section 5.2). The [`Configuration`] file says which nodes may exist, where they listen
//! and the schema; the view says which lives of them are members now, which member is the
//! configuration manager (CM), and which members hold each partition.
//!
//! Views live in the coordination service ([`crate::CoordinationService`]) and change only
//! by compare-and-swap on their id, so at most one view has each id. Every datagram carries
//! the id of its sender's view.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::configuration::Configuration;

/// Marks a partition with no copy left in [`View::primary`]: no node serves it.
pub const NO_NODE: u16 = u16::MAX;

/// Most backup CMs a view names ([`View::backup_cms`]).
pub const BACKUP_CMS_MAX: usize = 8;

/// Most backups a member fills at a time to move a copy out of a crowded failure domain
/// ([`View::rereplicate`], step 4). Each fill is paced like any (one FETCH in flight per
/// worker thread, which takes its fills in turn), so this does not bound the copying
/// rate; it bounds how many partitions are held at one copy more than needed (each such
/// commit goes to one more backup) and how many one view change counts, while letting
/// a returning domain fill a few at once (a view change per partition would interrupt
/// the transactions in flight once per partition moved).
pub const MOVE_FILLS_PER_NODE: usize = 4;

/// Whether a member that reported `used` bytes against a `limit` (0: none) must not be
/// given a new copy (a fill, a move) when it hosts `copies` copies: one more copy of the
/// average size it holds would reach the limit (`used + used / max(1, copies) >= limit`),
/// or it is at the limit already. Never with no limit.
pub fn memory_full(used: u64, limit: u64, copies: usize) -> bool {
    if limit == 0 {
        return false;
    }
    let average = used / (copies.max(1) as u64);
    used >= limit || used.saturating_add(average) >= limit
}

/// The incarnation of `node`'s life in `lives`, if it has one.
fn life_in(lives: &[ViewMember], node: u16) -> Option<u64> {
    lives.iter().find(|m| m.node == node).map(|m| m.incarnation)
}

/// One member: a node id and the life (incarnation) of the process admitted as it. A new
/// life of a node is a new member: the earlier one failed, and its data went with it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct ViewMember {
    /// The node id (its entry in the configuration file).
    pub node: u16,
    /// The incarnation of the process admitted for it.
    pub incarnation: u64,
}

/// The members, the CM and the partition map of one configuration id.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct View {
    /// The configuration id: grows by one with each change.
    pub id: u64,
    /// The configuration manager: a member, which grants leases and reconfigures.
    pub cm: u16,
    /// The members, in node order. Empty for a cluster that ended (every member died): its
    /// id is kept, so that the next cluster started on this coordination service uses
    /// higher ids.
    pub members: Vec<ViewMember>,
    /// Copies of each partition (partition `p` at index `p`): the primary first, then the
    /// backups in the order they would be promoted. Empty for a partition whose every copy
    /// was lost.
    pub copies: Vec<Vec<u16>>,
    /// New backups being filled (FaRM 5.4), per partition (`p` at index `p`; empty, or
    /// shorter than `copies`, where none are). A filling backup receives every commit of
    /// its partition like a backup, and copies the rest from the primary in the
    /// background; it does not count as a copy (it is never promoted, and a partition
    /// whose copies all died is lost however far its fill got) until a later view moves
    /// it into `copies` once it reported the copy complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filling: Vec<Vec<u16>>,
    /// Lives that held the last copies of some partitions when they became unreachable (a
    /// partition, a pause, a lost lease): not members (no lease, no acknowledgement awaited,
    /// nothing sent to them), but not removed either, since they may be alive with the
    /// data. In node order. A suspended life that answers again is readmitted with its
    /// copies; a newer life of its node proves it dead, and so does an operator who accepts
    /// the loss (`ferrotx cluster forget`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspended: Vec<ViewMember>,
    /// Per partition (`p` at index `p`; empty, or shorter than `copies`, where none are):
    /// the suspended lives' copies, in promotion order, of a partition that has no copy on
    /// a member. Such a partition is unavailable (its keys answer `-CLUSTERDOWN`, like a
    /// lost one's) but not lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspended_copies: Vec<Vec<u16>>,
}

/// Why a view could not be made or read.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum ViewError {
    /// The text is not a view.
    #[error("not a valid view: {0}")]
    Parse(String),
    /// The view names a node the configuration file does not have, or repeats one.
    #[error("view {id}: {what}")]
    Invalid {
        /// The view's id.
        id: u64,
        /// What is wrong.
        what: String,
    },
}

impl View {
    /// Makes `self` a copy of `other`, reusing `self`'s buffers (the derived
    /// `clone_from` would allocate afresh): a scratch view cloned into every lease
    /// allocates nothing once its buffers have grown to the view's size.
    pub fn copy_from(&mut self, other: &View) {
        self.id = other.id;
        self.cm = other.cm;
        self.members.clone_from(&other.members);
        self.copies.clone_from(&other.copies);
        self.filling.clone_from(&other.filling);
        self.suspended.clone_from(&other.suspended);
        self.suspended_copies.clone_from(&other.suspended_copies);
    }

    /// The first view of a cluster started from `config`, with the given lives of its
    /// members, the partition map of the configuration file, and the member of lowest node
    /// id as CM.
    pub fn initial(id: u64, config: &Configuration, members: Vec<ViewMember>) -> Self {
        let mut members = members;
        members.sort();
        let cm = members.first().map_or(NO_NODE, |m| m.node);
        let copies = config
            .partitions()
            .iter()
            .map(|(_, r)| r.nodes().collect())
            .collect();
        Self {
            id,
            cm,
            members,
            copies,
            filling: Vec::new(),
            suspended: Vec::new(),
            suspended_copies: Vec::new(),
        }
    }

    /// The view of a cluster that ended: no members, no copies, only its id (see
    /// [`View::members`]).
    pub fn ended(id: u64, partition_count: usize) -> Self {
        Self {
            id,
            cm: NO_NODE,
            members: Vec::new(),
            copies: vec![Vec::new(); partition_count],
            filling: Vec::new(),
            suspended: Vec::new(),
            suspended_copies: Vec::new(),
        }
    }

    /// True for the view of a cluster that ended.
    pub fn is_ended(&self) -> bool {
        self.members.is_empty()
    }

    /// The view of a cluster that ended with its copies on disk (issue 32, whole-cluster
    /// restart): ended (no members: [`View::is_ended`]), with the same id, every life of
    /// `self` (members and suspended) suspended, and the copies each partition had (on
    /// members, or else on suspended lives) as its suspended copies. A partition being
    /// filled counts only its copies, as in any view. The first view of the restarted
    /// cluster ([`View::restarted`]) gives these copies to the new lives of the same
    /// nodes, which loaded them from their data directories.
    pub fn ended_on_disk(&self) -> Self {
        let mut suspended: Vec<ViewMember> = self
            .members
            .iter()
            .chain(&self.suspended)
            .copied()
            .collect();
        suspended.sort();
        let suspended_copies: Vec<Vec<u16>> = (0..self.copies.len())
            .map(|p| {
                if self.copies[p].is_empty() {
                    self.suspended_copies(p as u32).to_vec()
                } else {
                    self.copies[p].clone()
                }
            })
            .collect();
        let mut ended = Self {
            suspended,
            suspended_copies,
            ..Self::ended(self.id, self.copies.len())
        };
        if ended.suspended_copies.iter().all(Vec::is_empty) {
            ended.suspended_copies.clear();
        }
        ended
    }

    /// True for a view of [`View::ended_on_disk`]: a cluster that ended with copies that
    /// its nodes' data directories hold.
    pub fn is_ended_on_disk(&self) -> bool {
        self.is_ended() && !self.suspended.is_empty()
    }

    /// The first view of a cluster restarted from an [`View::ended_on_disk`] view `self`,
    /// with id `id` and the new lives `members` (one per node of the configuration
    /// file): each partition's copies are those it had, in the same order, now on the
    /// new lives of their nodes. The member of lowest node id is CM.
    pub fn restarted(&self, id: u64, members: Vec<ViewMember>) -> Self {
        let mut members = members;
        members.sort();
        let cm = members.first().map_or(NO_NODE, |m| m.node);
        let copies = (0..self.copies.len())
            .map(|p| {
                self.suspended_copies(p as u32)
                    .iter()
                    .copied()
                    .filter(|&n| members.iter().any(|m| m.node == n))
                    .collect()
            })
            .collect();
        Self {
            id,
            cm,
            members,
            copies,
            filling: Vec::new(),
            suspended: Vec::new(),
            suspended_copies: Vec::new(),
        }
    }

    /// The incarnation of member `node`, if it is one.
    pub fn incarnation(&self, node: u16) -> Option<u64> {
        life_in(&self.members, node)
    }

    /// True if (`node`, `incarnation`) is a member.
    pub fn is_member(&self, node: u16, incarnation: u64) -> bool {
        self.incarnation(node) == Some(incarnation)
    }

    /// The incarnation of `node`'s suspended life, if it has one ([`View::suspended`]).
    pub fn suspended_incarnation(&self, node: u16) -> Option<u64> {
        life_in(&self.suspended, node)
    }

    /// True if (`node`, `incarnation`) is suspended ([`View::suspended`]).
    pub fn is_suspended(&self, node: u16, incarnation: u64) -> bool {
        self.suspended_incarnation(node) == Some(incarnation)
    }

    /// The life of `node` this view names, member or suspended.
    pub fn life(&self, node: u16) -> Option<u64> {
        self.incarnation(node)
            .or_else(|| self.suspended_incarnation(node))
    }

    /// The suspended lives holding `partition`'s copies, in promotion order (empty unless
    /// the partition has no copy on a member and a suspended life holds one).
    pub fn suspended_copies(&self, partition: u32) -> &[u16] {
        self.suspended_copies
            .get(partition as usize)
            .map_or(&[], Vec::as_slice)
    }

    /// Partitions with no copy on a member but one on a suspended life: unavailable until
    /// it is readmitted, not lost.
    pub fn unavailable(&self) -> usize {
        (0..self.copies.len())
            .filter(|&p| self.copies[p].is_empty() && !self.suspended_copies(p as u32).is_empty())
            .count()
    }

    /// The node of the primary of `partition`, or [`NO_NODE`] if no copy is left.
    pub fn primary(&self, partition: u32) -> u16 {
        self.copies
            .get(partition as usize)
            .and_then(|c| c.first().copied())
            .unwrap_or(NO_NODE)
    }

    /// The backups of `partition` (empty if it has none or is lost).
    pub fn backups(&self, partition: u32) -> &[u16] {
        match self.copies.get(partition as usize) {
            Some(copies) if !copies.is_empty() => &copies[1..],
            _ => &[],
        }
    }

    /// The backups of `partition` being filled (empty if none).
    pub fn filling(&self, partition: u32) -> &[u16] {
        self.filling
            .get(partition as usize)
            .map_or(&[], Vec::as_slice)
    }

    /// Whether `node` holds a copy of `partition` or is filling one.
    pub fn holds(&self, partition: u32, node: u16) -> bool {
        self.copies
            .get(partition as usize)
            .is_some_and(|c| c.contains(&node))
            || self.filling(partition).contains(&node)
    }

    /// Every (partition, node) being filled.
    pub fn fills(&self) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.filling
            .iter()
            .enumerate()
            .flat_map(|(p, nodes)| nodes.iter().map(move |&n| (p as u32, n)))
    }

    /// Partitions with fewer than `replicas` copies, and with none (lost, or held only by
    /// suspended lives: [`View::unavailable`] tells those apart).
    pub fn short_and_lost(&self, replicas: usize) -> (usize, usize) {
        let short = self
            .copies
            .iter()
            .filter(|c| !c.is_empty() && c.len() < replicas)
            .count();
        let lost = self.copies.iter().filter(|c| c.is_empty()).count();
        (short, lost)
    }

    /// Partitions whose every copy is gone: none on a member, none on a suspended life.
    pub fn lost(&self) -> usize {
        self.short_and_lost(1).1 - self.unavailable()
    }

    /// The backup CMs, `count` of them (at most [`BACKUP_CMS_MAX`]): taken one by one from
    /// the members after the CM in node order (wrapping), each the first not yet taken
    /// whose failure domain holds neither the CM nor a backup CM taken before it, or, when
    /// every member left is in such a domain, the first not yet taken. When the CM fails,
    /// the first of them that can reach a majority takes over: so a whole failure domain
    /// that fails with the CM does not take every backup CM with it (with each member its
    /// own domain, as `Configuration::local` makes them, they are simply the members after
    /// the CM).
    pub fn backup_cms(&self, config: &Configuration, count: usize) -> Vec<u16> {
        let mut out = [NO_NODE; BACKUP_CMS_MAX];
        let len = self.backup_cms_into(config, count, &mut out);
        out[..len].to_vec()
    }

    /// The rank of `node` among the first `count` backup CMs ([`View::backup_cms`]), if it
    /// is one; without allocating (the lease thread asks on every iteration).
    pub fn backup_cm_rank(&self, config: &Configuration, node: u16, count: usize) -> Option<usize> {
        let mut out = [NO_NODE; BACKUP_CMS_MAX];
        let len = self.backup_cms_into(config, count, &mut out);
        out[..len].iter().position(|&n| n == node)
    }

    /// [`View::backup_cms`] into `out`; returns how many.
    fn backup_cms_into(
        &self,
        config: &Configuration,
        count: usize,
        out: &mut [u16; BACKUP_CMS_MAX],
    ) -> usize {
        let n = self.members.len();
        let at = self.members.iter().position(|m| m.node == self.cm);
        // The members after the CM, in node order, wrapping (all of them without a CM).
        let others = n - usize::from(at.is_some());
        let ring = |i: usize| match at {
            Some(at) => self.members[(at + 1 + i) % n].node,
            None => self.members[i].node,
        };
        let domain = |node: u16| config.member(node).map(|m| m.failure_domain.as_str());
        let cm_domain = at.and_then(|_| domain(self.cm));
        let count = count.min(BACKUP_CMS_MAX).min(others);
        for len in 0..count {
            let taken = &out[..len];
            let used = |d: Option<&str>| {
                d.is_some() && (d == cm_domain || taken.iter().any(|&t| domain(t) == d))
            };
            let next = (0..others)
                .map(ring)
                .filter(|node| !taken.contains(node))
                .find(|&node| !used(domain(node)))
                .or_else(|| (0..others).map(ring).find(|node| !taken.contains(node)));
            out[len] = next.expect("fewer backup CMs than members besides the CM");
        }
        count
    }

    /// [`View::next_without`] with no life known dead but the earlier lives of nodes that
    /// have a newer one in `members`.
    pub fn next(&self, cm: u16, members: Vec<ViewMember>) -> Self {
        self.next_without(cm, members, &BTreeSet::new())
    }

    /// The next view: id + 1, with `members` (the lives that stay and any admitted) and
    /// `cm`. Remap (FaRM 5.2 step 4), under one rule: a copy is lost only when its life is
    /// dead, which is when it is in `dead` (an operator accepted the loss, a newer life
    /// asked to join) or `members` has a newer life of its node. Each partition's holders
    /// (its copies, or where it has none its suspended lives' copies) become:
    ///
    /// - those that stay members (the same life), in order: where the primary left, its
    ///   first backup that stays is promoted, and a suspended life readmitted in `members`
    ///   serves its copies again. No backup is added: a new, empty backup would count as a
    ///   copy before it holds the data;
    /// - if none stays, the ones not dead, as suspended copies ([`View::suspended`]): the
    ///   partition is unavailable, not lost, while a holder may be alive;
    /// - if every holder is dead, nothing: the partition is lost.
    pub fn next_without(
        &self,
        cm: u16,
        members: Vec<ViewMember>,
        dead: &BTreeSet<ViewMember>,
    ) -> Self {
        let mut members = members;
        members.sort();
        members.dedup_by_key(|m| m.node);
        let life = |node: u16| self.life(node);
        let stays = |n: u16| {
            life(n).is_some_and(|i| members.iter().any(|m| m.node == n && m.incarnation == i))
        };
        let is_dead = |n: u16| {
            life(n).is_none_or(|i| {
                dead.contains(&ViewMember {
                    node: n,
                    incarnation: i,
                }) || members.iter().any(|m| m.node == n && m.incarnation > i)
            })
        };
        let partitions = self.copies.len();
        let mut copies = Vec::with_capacity(partitions);
        let mut suspended_copies = vec![Vec::new(); partitions];
        for (p, held) in suspended_copies.iter_mut().enumerate() {
            let holders: &[u16] = if self.copies[p].is_empty() {
                self.suspended_copies(p as u32)
            } else {
                &self.copies[p]
            };
            let kept: Vec<u16> = holders.iter().copied().filter(|&n| stays(n)).collect();
            if kept.is_empty() {
                *held = holders.iter().copied().filter(|&n| !is_dead(n)).collect();
            }
            copies.push(kept);
        }
        // A fill whose partition has no copy left to serve has nothing to copy from.
        let filling = self
            .filling
            .iter()
            .zip(&copies)
            .map(|(f, c)| {
                if c.is_empty() {
                    Vec::new()
                } else {
                    f.iter().copied().filter(|&n| stays(n)).collect()
                }
            })
            .collect();
        let holding: BTreeSet<u16> = suspended_copies.iter().flatten().copied().collect();
        let suspended = holding
            .into_iter()
            .map(|node| ViewMember {
                node,
                incarnation: life(node).expect("a holder is a life of this view"),
            })
            .collect();
        let mut next = Self {
            id: self.id + 1,
            cm,
            members,
            copies,
            filling,
            suspended,
            suspended_copies,
        };
        next.trim_filling();
        next
    }

    /// The next view, with `lives` forgotten: an operator accepted that they are dead (a
    /// host that will not come back), so partitions that only they hold are lost
    /// ([`View::next_without`] with the same members and CM, and `lives` dead).
    pub fn forgetting(&self, lives: &BTreeSet<ViewMember>) -> Self {
        self.next_without(self.cm, self.members.clone(), lives)
    }

    /// Data recovery's changes to a view made by [`View::next`] (FaRM 5.4), in order:
    ///
    /// 1. each backup in `filled` (partition, node) that is still filling becomes a copy
    ///    (the last backup);
    /// 2. a partition that then has more than `replicas` copies (a move's fill was counted)
    ///    drops backups until it has `replicas`: first one in a failure domain holding two
    ///    of its copies, then on the member hosting the most copies and fills, then of
    ///    highest id; never the primary;
    /// 3. every partition with fewer than `replicas` copies and fills, and a copy left,
    ///    gets new backups to fill, from [`View::choose_backup`], as long as a member can
    ///    take one (a member in `full`, whose memory has no room for another copy, never
    ///    can: the partition stays short until one has room, as with too few members);
    /// 4. moves, only when no partition is left with fewer than `replicas` copies: a
    ///    partition with `replicas` copies, none filling, two of them in one failure
    ///    domain, gets one more backup to fill on a member in a domain holding none of
    ///    its copies ([`View::choose_move`]), at most [`MOVE_FILLS_PER_NODE`] on each
    ///    member at a time, never on a member in `full`. Once counted (1), step 2 drops
    ///    the crowded copy.
    ///
    /// Where a primary was lost, [`View::next`] promotes a backup the member holds
    /// already: `full` does not bear on that.
    pub fn rereplicate(
        &mut self,
        config: &Configuration,
        replicas: usize,
        filled: &BTreeSet<(u32, u16)>,
        full: &BTreeSet<u16>,
    ) {
        self.filling.resize(self.copies.len(), Vec::new());
        for (p, (copies, filling)) in self.copies.iter_mut().zip(&mut self.filling).enumerate() {
            filling.retain(|&n| {
                if filled.contains(&(p as u32, n)) {
                    copies.push(n);
                    false
                } else {
                    true
                }
            });
        }
        for p in 0..self.copies.len() {
            while self.copies[p].len() > replicas.max(1) {
                let drop = self.choose_drop(config, p as u32);
                self.copies[p].retain(|&n| n != drop);
            }
        }
        for p in 0..self.copies.len() {
            if self.copies[p].is_empty() {
                continue;
            }
            while self.copies[p].len() + self.filling[p].len() < replicas {
                let Some(node) = self.choose_backup(config, p as u32, full) else {
                    break;
                };
                self.filling[p].push(node);
            }
        }
        if self.short_and_lost(replicas).0 == 0 {
            for p in 0..self.copies.len() {
                if self.copies[p].len() == replicas
                    && self.filling[p].is_empty()
                    && let Some(node) = self.choose_move(config, p as u32, full)
                {
                    self.filling[p].push(node);
                }
            }
        }
        self.trim_filling();
    }

    /// The member to fill a new backup of `partition` on, if any may: one not in `full`
    /// (no room in its memory for another copy) that holds no copy of it and fills none,
    /// in a failure domain holding none of its copies or fills if there is such a member,
    /// then hosting the fewest copies and fills of any partition (balance), then of
    /// lowest node id.
    pub fn choose_backup(
        &self,
        config: &Configuration,
        partition: u32,
        full: &BTreeSet<u16>,
    ) -> Option<u16> {
        let domain = |node: u16| config.member(node).map(|m| m.failure_domain.as_str());
        let taken = self.domains_of(config, partition);
        self.members
            .iter()
            .map(|m| m.node)
            .filter(|&n| !full.contains(&n) && !self.holds(partition, n))
            .min_by_key(|&n| (taken.contains(&domain(n)), self.hosted(n), n))
    }

    /// The member to move a copy of `partition` to, if it should move ([`View::rereplicate`]
    /// step 4): when two of its copies share a failure domain, [`View::choose_backup`]'s
    /// choice among the members in a domain holding none of its copies or fills that fill
    /// fewer than [`MOVE_FILLS_PER_NODE`] backups and are not in `full`; `None` when its
    /// copies are in distinct domains or no such member exists (so with each node its own
    /// domain, never).
    pub fn choose_move(
        &self,
        config: &Configuration,
        partition: u32,
        full: &BTreeSet<u16>,
    ) -> Option<u16> {
        let domain = |node: u16| config.member(node).map(|m| m.failure_domain.as_str());
        let copies = &self.copies[partition as usize];
        let crowded = copies
            .iter()
            .enumerate()
            .any(|(i, &a)| copies[..i].iter().any(|&b| domain(a) == domain(b)));
        if !crowded {
            return None;
        }
        let taken = self.domains_of(config, partition);
        let filling = |node: u16| self.fills().filter(|&(_, n)| n == node).count();
        self.members
            .iter()
            .map(|m| m.node)
            .filter(|&n| {
                !full.contains(&n)
                    && !self.holds(partition, n)
                    && !taken.contains(&domain(n))
                    && filling(n) < MOVE_FILLS_PER_NODE
            })
            .min_by_key(|&n| (self.hosted(n), n))
    }

    /// The backup of `partition` to drop when it has copies to spare ([`View::rereplicate`]
    /// step 2): one in a failure domain holding two or more of its copies if there is one,
    /// then on the member hosting the most copies and fills, then of highest id. Never the
    /// primary.
    ///
    /// # Panics
    ///
    /// If the partition has no backup.
    fn choose_drop(&self, config: &Configuration, partition: u32) -> u16 {
        let domain = |node: u16| config.member(node).map(|m| m.failure_domain.as_str());
        let copies = &self.copies[partition as usize];
        let sharing = |node: u16| {
            copies
                .iter()
                .filter(|&&c| domain(c) == domain(node))
                .count()
        };
        copies[1..]
            .iter()
            .copied()
            .max_by_key(|&n| (sharing(n) > 1, self.hosted(n), n))
            .expect("a backup to drop")
    }

    /// The failure domains holding a copy or a fill of `partition`.
    fn domains_of<'c>(
        &self,
        config: &'c Configuration,
        partition: u32,
    ) -> BTreeSet<Option<&'c str>> {
        self.copies[partition as usize]
            .iter()
            .chain(self.filling(partition))
            .map(|&n| config.member(n).map(|m| m.failure_domain.as_str()))
            .collect()
    }

    /// How many copies (not fills) of any partition `node` holds.
    pub fn copies_on(&self, node: u16) -> usize {
        self.copies.iter().filter(|c| c.contains(&node)).count()
    }

    /// How many copies and fills of any partition `node` hosts.
    fn hosted(&self, node: u16) -> usize {
        self.copies
            .iter()
            .chain(&self.filling)
            .filter(|c| c.contains(&node))
            .count()
    }

    /// Drops the filling list when nothing is being filled, so that views without data
    /// recovery read and compare as before it existed.
    fn trim_filling(&mut self) {
        if self.filling.iter().all(Vec::is_empty) {
            self.filling.clear();
        }
        if self.suspended_copies.iter().all(Vec::is_empty) {
            self.suspended_copies.clear();
        }
    }

    /// Partitions that have a holder in `self` (a copy, or a suspended life's copy) and
    /// none in `next` although a life that held one is not known dead: not in `dead`, and
    /// no newer life of its node is in `next`. A remap that would lose data that may be
    /// alive. Empty for every view made by [`View::next_without`] with the same `dead`.
    pub fn orphaned_in(&self, next: &View, dead: &BTreeSet<ViewMember>) -> Vec<u32> {
        let mut orphaned = Vec::new();
        for p in 0..self.copies.len().min(next.copies.len()) {
            let pi = p as u32;
            if !next.copies[p].is_empty() || !next.suspended_copies(pi).is_empty() {
                continue;
            }
            let holders = self.copies[p].iter().chain(self.suspended_copies(pi));
            let alive = holders
                .filter_map(|&n| self.life(n).map(|i| (n, i)))
                .any(|(n, i)| {
                    !dead.contains(&ViewMember {
                        node: n,
                        incarnation: i,
                    }) && next.life(n).is_none_or(|j| j <= i)
                });
            if alive {
                orphaned.push(pi);
            }
        }
        orphaned
    }

    /// Checks the view against the configuration file: members are nodes of the file,
    /// each once, the CM is a member, every copy is on a member and the partition count is
    /// the file's.
    pub fn check(&self, config: &Configuration) -> Result<(), ViewError> {
        let invalid = |what: String| ViewError::Invalid { id: self.id, what };
        let mut seen = BTreeSet::new();
        for m in &self.members {
            if config.member(m.node).is_none() {
                return Err(invalid(format!(
                    "node {} is not in the configuration file",
                    m.node
                )));
            }
            if !seen.insert(m.node) {
                return Err(invalid(format!("node {} is a member twice", m.node)));
            }
            if m.incarnation == 0 {
                return Err(invalid(format!("node {} has incarnation 0", m.node)));
            }
        }
        if !self.members.is_empty() && !seen.contains(&self.cm) {
            return Err(invalid(format!(
                "the CM, node {}, is not a member",
                self.cm
            )));
        }
        if self.copies.len() != config.partitions().partition_count() as usize {
            return Err(invalid(format!(
                "{} partitions, the configuration file has {}",
                self.copies.len(),
                config.partitions().partition_count()
            )));
        }
        for (p, copies) in self.copies.iter().enumerate() {
            let mut on = BTreeSet::new();
            for n in copies.iter().chain(self.filling(p as u32)) {
                if !seen.contains(n) {
                    return Err(invalid(format!(
                        "partition {p} has a copy on non-member {n}"
                    )));
                }
                if !on.insert(*n) {
                    return Err(invalid(format!("partition {p} has two copies on node {n}")));
                }
            }
            if copies.is_empty() && !self.filling(p as u32).is_empty() {
                return Err(invalid(format!(
                    "partition {p} is filling with no copy to fill from"
                )));
            }
        }
        if self.filling.len() > self.copies.len() {
            return Err(invalid(format!(
                "{} partitions filling, {} partitions",
                self.filling.len(),
                self.copies.len()
            )));
        }
        let mut suspended = BTreeSet::new();
        for m in &self.suspended {
            if config.member(m.node).is_none() || seen.contains(&m.node) {
                return Err(invalid(format!(
                    "node {} is suspended and a member, or not in the configuration file",
                    m.node
                )));
            }
            if !suspended.insert(m.node) || m.incarnation == 0 {
                return Err(invalid(format!(
                    "node {} is suspended twice or with incarnation 0",
                    m.node
                )));
            }
        }
        if self.suspended_copies.len() > self.copies.len() {
            return Err(invalid(format!(
                "{} partitions with suspended copies, {} partitions",
                self.suspended_copies.len(),
                self.copies.len()
            )));
        }
        for (p, held) in self.suspended_copies.iter().enumerate() {
            if !held.is_empty() && !self.copies[p].is_empty() {
                return Err(invalid(format!(
                    "partition {p} has copies on members and on suspended lives"
                )));
            }
            let mut on = BTreeSet::new();
            for n in held {
                if !suspended.contains(n) || !on.insert(*n) {
                    return Err(invalid(format!(
                        "partition {p} has a suspended copy on node {n}, not suspended or twice"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The view as text (TOML), as the coordination service stores it.
    pub fn to_text(&self) -> String {
        toml::to_string(self).expect("a view serializes")
    }

    /// A view from [`View::to_text`]'s text.
    pub fn from_text(text: &str) -> Result<Self, ViewError> {
        toml::from_str(text).map_err(|e| ViewError::Parse(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn view3() -> View {
        let config = Configuration::local(3, 3, 1, 4, 7000).unwrap();
        let members = (0..3)
            .map(|node| ViewMember {
                node,
                incarnation: 10 + u64::from(node),
            })
            .collect();
        View::initial(5, &config, members)
    }

    #[test]
    fn remap_promotes_the_first_surviving_backup_and_adds_no_copy() {
        let v = view3();
        let survivors: Vec<_> = v.members.iter().copied().filter(|m| m.node != 0).collect();
        let next = v.next(1, survivors);
        assert_eq!(next.id, 6);
        for (old, new) in v.copies.iter().zip(&next.copies) {
            let kept: Vec<u16> = old.iter().copied().filter(|&n| n != 0).collect();
            assert_eq!(&kept, new);
            assert_eq!(new.len(), 2);
        }
        assert!(v.orphaned_in(&next, &BTreeSet::new()).is_empty());
        assert_eq!(next.short_and_lost(3), (12, 0));
    }

    #[test]
    fn a_view_ended_on_disk_gives_its_copies_to_the_new_lives_of_their_nodes() {
        let config = Configuration::local(3, 3, 1, 4, 7000).unwrap();
        let v = view3();
        let ended = v.ended_on_disk();
        assert!(ended.is_ended() && ended.is_ended_on_disk());
        assert_eq!(ended.id, v.id);
        assert_eq!(ended.suspended, v.members);
        for p in 0..v.copies.len() as u32 {
            assert!(ended.copies[p as usize].is_empty());
            assert_eq!(ended.suspended_copies(p), v.copies[p as usize].as_slice());
        }
        ended.check(&config).unwrap();
        assert!(!View::ended(5, 12).is_ended_on_disk());
        // The first view after the restart: the same copies, in the same order, on the
        // new lives.
        let lives: Vec<ViewMember> = (0..3)
            .map(|node| ViewMember {
                node,
                incarnation: 20 + u64::from(node),
            })
            .collect();
        let first = ended.restarted(6, lives.clone());
        first.check(&config).unwrap();
        assert_eq!((first.id, first.cm), (6, 0));
        assert_eq!(first.members, lives);
        assert_eq!(first.copies, v.copies);
        // A partition suspended before the end keeps its suspended copies, and one whose
        // copies were all lost stays lost.
        let mut partial = v.clone();
        partial.copies[0].clear();
        partial.copies[1].clear();
        partial.suspended_copies = vec![Vec::new(), vec![2]];
        partial.suspended = vec![partial.members.pop().unwrap()];
        for c in &mut partial.copies {
            c.retain(|&n| n != 2);
        }
        partial.check(&config).unwrap();
        let ended = partial.ended_on_disk();
        ended.check(&config).unwrap();
        assert_eq!(ended.suspended.len(), 3);
        let first = ended.restarted(6, lives);
        assert!(first.copies[0].is_empty());
        assert_eq!(first.copies[1], vec![2]);
        assert_eq!(first.copies[2], vec![0, 1]);
    }

    #[test]
    fn a_new_life_of_a_node_holds_nothing() {
        let v = view3();
        let mut members = v.members.clone();
        members[2].incarnation = 99;
        let next = v.next(0, members);
        assert!(next.copies.iter().all(|c| !c.contains(&2)));
        assert!(next.is_member(2, 99));
        assert!(!next.is_member(2, 12));
    }

    #[test]
    fn partitions_whose_copies_all_died_are_lost_and_an_orphan_is_detected() {
        let config = Configuration::local(3, 1, 1, 2, 7000).unwrap();
        let members = (0..3)
            .map(|node| ViewMember {
                node,
                incarnation: 1,
            })
            .collect();
        let v = View::initial(1, &config, members);
        let dead: BTreeSet<ViewMember> = [v.members[2]].into_iter().collect();
        let next = v.next_without(0, v.members[..2].to_vec(), &dead);
        assert_eq!(next.short_and_lost(1).1, 2);
        assert_eq!(next.lost(), 2);
        assert!(next.suspended.is_empty());
        assert_eq!(
            next.primary(next.copies.iter().position(Vec::is_empty).unwrap() as u32),
            NO_NODE
        );
        assert!(v.orphaned_in(&next, &dead).is_empty());
        // Without knowing node 2 dead, the same map orphans its partitions.
        assert_eq!(v.orphaned_in(&next, &BTreeSet::new()).len(), 2);
        // A hand-made map that drops node 0's copies while node 0 stays a member.
        let mut bad = next.clone();
        for c in &mut bad.copies {
            c.retain(|&n| n != 0);
        }
        assert!(!v.orphaned_in(&bad, &dead).is_empty());
        bad.check(&config).unwrap();
    }

    #[test]
    fn an_unreachable_last_holder_is_suspended_and_readmitted_with_its_copies() {
        let config = Configuration::local(3, 1, 1, 2, 7000).unwrap();
        let members: Vec<ViewMember> = (0..3)
            .map(|node| ViewMember {
                node,
                incarnation: 1,
            })
            .collect();
        let v = View::initial(1, &config, members.clone());
        let held: Vec<u32> = (0..v.copies.len() as u32)
            .filter(|&p| v.primary(p) == 2)
            .collect();
        assert_eq!(held.len(), 2);
        // Node 2 does not answer: with one copy per partition, it keeps its two.
        let next = v.next(0, members[..2].to_vec());
        next.check(&config).unwrap();
        assert!(v.orphaned_in(&next, &BTreeSet::new()).is_empty());
        assert_eq!(next.suspended, vec![members[2]]);
        assert!(!next.is_member(2, 1) && next.is_suspended(2, 1));
        assert_eq!((next.unavailable(), next.lost()), (2, 0));
        for &p in &held {
            assert_eq!(next.primary(p), NO_NODE);
            assert_eq!(next.suspended_copies(p), &[2]);
        }
        // Another change while it is away keeps it suspended.
        let later = next.next(1, members[..2].to_vec());
        later.check(&config).unwrap();
        assert_eq!(later.suspended, vec![members[2]]);
        // Readmitted: the same life serves its copies again, nothing refilled.
        let back = later.next(1, members.clone());
        back.check(&config).unwrap();
        assert!(back.suspended.is_empty() && back.suspended_copies.is_empty());
        assert_eq!(back.copies, v.copies);
        assert!(back.filling.is_empty());
        // A new life of node 2 proves the suspended one dead: its copies are lost.
        let mut renewed = members.clone();
        renewed[2].incarnation = 2;
        let lost = later.next(1, renewed);
        lost.check(&config).unwrap();
        assert!(lost.suspended.is_empty());
        assert_eq!(lost.lost(), 2);
        assert!(later.orphaned_in(&lost, &BTreeSet::new()).is_empty());
        // So does an operator who accepts the loss.
        let forgotten = later.forgetting(&[members[2]].into_iter().collect());
        assert_eq!((forgotten.lost(), forgotten.unavailable()), (2, 0));
        assert!(forgotten.suspended.is_empty());
    }

    #[test]
    fn a_suspended_partition_with_a_surviving_backup_is_served_by_it() {
        // Two copies: when the primary's node is cut off, its backup is promoted and no
        // one is suspended; when both are cut off, both stay, in order.
        let config = Configuration::local(3, 2, 1, 2, 7000).unwrap();
        let members: Vec<ViewMember> = (0..3)
            .map(|node| ViewMember {
                node,
                incarnation: 1,
            })
            .collect();
        let v = View::initial(1, &config, members.clone());
        let one = v.next(0, vec![members[0], members[1]]);
        assert!(one.suspended.is_empty());
        assert_eq!(one.unavailable(), 0);
        let both = v.next(0, vec![members[0]]);
        both.check(&config).unwrap();
        let p = (0..v.copies.len())
            .find(|&p| !v.copies[p].contains(&0))
            .unwrap();
        assert_eq!(both.suspended_copies(p as u32), v.copies[p].as_slice());
        // The backup comes back first: it is promoted; the primary's copy is dropped.
        let back = both.next(0, vec![members[0], v.members[usize::from(v.copies[p][1])]]);
        back.check(&config).unwrap();
        assert_eq!(back.copies[p], vec![v.copies[p][1]]);
    }

    #[test]
    fn views_mixing_member_and_suspended_copies_are_refused() {
        let config = Configuration::local(3, 1, 1, 2, 7000).unwrap();
        let members: Vec<ViewMember> = (0..3)
            .map(|node| ViewMember {
                node,
                incarnation: 1,
            })
            .collect();
        let v = View::initial(1, &config, members.clone());
        let next = v.next(0, members[..2].to_vec());
        let p = next.copies.iter().position(Vec::is_empty).unwrap();
        let mut bad = next.clone();
        bad.copies[p].push(0);
        assert!(bad.check(&config).is_err());
        let mut bad = next.clone();
        bad.members.push(members[2]);
        assert!(bad.check(&config).is_err());
        let mut bad = next.clone();
        bad.suspended.clear();
        assert!(bad.check(&config).is_err());
        let text = next.to_text();
        assert_eq!(View::from_text(&text).unwrap(), next);
    }

    /// A configuration of `nodes` nodes in the failure domains `domains` gives them
    /// (node n in `domains[n]`), 3 replicas, 2 partitions per node.
    fn domained(domains: &[&str]) -> Configuration {
        let local = Configuration::local(domains.len() as u16, 3, 1, 2, 7000).unwrap();
        let members = local
            .members()
            .iter()
            .map(|m| crate::Member {
                failure_domain: domains[usize::from(m.node)].to_string(),
                ..m.clone()
            })
            .collect();
        Configuration::new(
            local.id(),
            1,
            3,
            members,
            local.partitions().partition_count(),
        )
        .unwrap()
    }

    fn lives(config: &Configuration) -> Vec<ViewMember> {
        config
            .members()
            .iter()
            .map(|m| ViewMember {
                node: m.node,
                incarnation: 1,
            })
            .collect()
    }

    #[test]
    fn a_lost_member_is_replaced_by_fills_in_other_domains_balanced() {
        // Racks: a = {0, 1}, b = {2, 3}, c = {4, 5}.
        let config = domained(&["a", "a", "b", "b", "c", "c"]);
        let v = View::initial(1, &config, lives(&config));
        let mut next = v.next(
            1,
            v.members.iter().copied().filter(|m| m.node != 0).collect(),
        );
        next.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        next.check(&config).unwrap();
        let domain = |n: u16| config.member(n).unwrap().failure_domain.clone();
        let mut given = BTreeMap::new();
        for (p, old) in v.copies.iter().enumerate() {
            let p = p as u32;
            if !old.contains(&0) {
                assert!(next.filling(p).is_empty(), "partition {p} lost nothing");
                continue;
            }
            // One fill per partition node 0 held, never on a node holding a copy, and in
            // a domain holding none of its copies (there always is one here).
            assert_eq!(next.filling(p).len(), 1, "partition {p}");
            let n = next.filling(p)[0];
            assert!(!next.copies[p as usize].contains(&n));
            let domains: BTreeSet<String> =
                next.copies[p as usize].iter().map(|&c| domain(c)).collect();
            assert!(
                !domains.contains(&domain(n)),
                "partition {p} filled in a used domain"
            );
            *given.entry(n).or_insert(0) += 1;
        }
        // Spread: no survivor takes more than one more fill than another could.
        let most = given.values().max().unwrap();
        let least = given.values().min().unwrap();
        assert!(most - least <= 2, "{given:?}");
        // The filled ones become copies, the others stay filling.
        let (p, n) = next.fills().next().unwrap();
        let filled: BTreeSet<(u32, u16)> = [(p, n)].into_iter().collect();
        let mut after = next.next(1, next.members.clone());
        after.rereplicate(&config, 3, &filled, &BTreeSet::new());
        assert_eq!(after.copies[p as usize].last(), Some(&n));
        assert_eq!(after.copies[p as usize].len(), 3);
        assert_eq!(after.fills().count(), next.fills().count() - 1);
        after.check(&config).unwrap();
    }

    /// Views from `v` until nothing is filling, each counting every fill of the one before
    /// (the CM's reconfigurations as fills report), checked; the last one.
    fn fill_all(config: &Configuration, v: &View, each: &mut dyn FnMut(&View, &View)) -> View {
        let mut v = v.clone();
        for _ in 0..100 {
            if v.filling.is_empty() {
                return v;
            }
            let filled: BTreeSet<(u32, u16)> = v.fills().collect();
            let mut next = v.next(v.cm, v.members.clone());
            next.rereplicate(config, 3, &filled, &BTreeSet::new());
            next.check(config).unwrap();
            each(&v, &next);
            v = next;
        }
        panic!("still filling after 100 views: {v:?}");
    }

    /// The number of distinct failure domains of each partition's copies.
    fn spread(config: &Configuration, v: &View) -> Vec<usize> {
        v.copies
            .iter()
            .map(|c| {
                c.iter()
                    .map(|&n| config.member(n).unwrap().failure_domain.clone())
                    .collect::<BTreeSet<_>>()
                    .len()
            })
            .collect()
    }

    /// `v`'s members without `gone`, and with `back` as new lives.
    fn without_and_back(v: &View, gone: &[u16], back: &[u16]) -> Vec<ViewMember> {
        let mut members: Vec<ViewMember> = v
            .members
            .iter()
            .copied()
            .filter(|m| !gone.contains(&m.node))
            .collect();
        members.extend(back.iter().map(|&node| ViewMember {
            node,
            incarnation: 2,
        }));
        members
    }

    #[test]
    fn copies_move_back_onto_a_returning_domain_one_per_partition() {
        // Racks: a = {0, 1}, b = {2, 3}, c = {4, 5}. Rack c fails, every partition it held
        // is re-replicated onto a and b; then c's nodes come back holding nothing.
        let config = domained(&["a", "a", "b", "b", "c", "c"]);
        let v = View::initial(1, &config, lives(&config));
        assert!(spread(&config, &v).iter().all(|&d| d == 3));
        let mut down = v.next(0, without_and_back(&v, &[4, 5], &[]));
        down.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        let down = fill_all(&config, &down, &mut |_, _| {});
        assert_eq!(down.short_and_lost(3), (0, 0));
        assert!(spread(&config, &down).iter().all(|&d| d == 2));
        let mut back = down.next(0, without_and_back(&down, &[], &[4, 5]));
        back.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        back.check(&config).unwrap();
        // Every partition at full strength with two copies in one rack: one fill each on
        // rack c, as many as the per-node bound allows.
        let partitions = back.copies.len();
        assert_eq!(
            back.fills().count(),
            partitions.min(2 * MOVE_FILLS_PER_NODE)
        );
        for (p, n) in back.fills() {
            assert!(n == 4 || n == 5, "partition {p} filling on {n}");
            assert_eq!(back.filling(p).len(), 1);
            assert_eq!(back.copies[p as usize].len(), 3);
        }
        for n in [4, 5] {
            assert!(back.fills().filter(|&(_, f)| f == n).count() <= MOVE_FILLS_PER_NODE);
        }
        // Counted fills drop a crowded backup, never the primary: back to 3 copies.
        let primaries: Vec<u16> = (0..partitions as u32).map(|p| back.primary(p)).collect();
        let done = fill_all(&config, &back, &mut |before, after| {
            for (p, c) in after.copies.iter().enumerate() {
                assert_eq!(c.len(), 3, "partition {p}: {c:?}");
                assert_eq!(c[0], primaries[p], "partition {p}'s primary moved");
                for n in after.filling(p as u32) {
                    assert!(!before.copies[p].is_empty() && *n >= 4);
                }
            }
            for n in [4, 5] {
                assert!(after.fills().filter(|&(_, f)| f == n).count() <= MOVE_FILLS_PER_NODE);
            }
        });
        assert!(spread(&config, &done).iter().all(|&d| d == 3), "{done:?}");
        assert_eq!(done.short_and_lost(3), (0, 0));
        // Balanced again: each node hosts its share.
        let hosted: Vec<usize> = (0..6).map(|n| done.hosted(n)).collect();
        let (most, least) = (hosted.iter().max().unwrap(), hosted.iter().min().unwrap());
        assert!(most - least <= 1, "{hosted:?}");
        // And nothing moves once placed.
        let mut again = done.next(0, done.members.clone());
        again.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        assert!(again.filling.is_empty());
        assert_eq!(again.copies, done.copies);
    }

    #[test]
    fn nothing_moves_with_each_node_its_own_domain() {
        let config = domained(&["a", "b", "c", "d", "e", "f"]);
        let v = View::initial(1, &config, lives(&config));
        let mut same = v.next(0, v.members.clone());
        same.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        assert!(same.filling.is_empty());
        assert_eq!(same.copies, v.copies);
        // A node lost and re-replicated, then back as a new life: it is given nothing
        // (every partition has its copies in distinct domains).
        let mut down = v.next(0, without_and_back(&v, &[5], &[]));
        down.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        let down = fill_all(&config, &down, &mut |_, _| {});
        let mut back = down.next(0, without_and_back(&down, &[], &[5]));
        back.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        assert!(back.filling.is_empty());
        assert!(back.copies.iter().all(|c| !c.contains(&5)));
    }

    #[test]
    fn nothing_moves_while_a_partition_is_short_of_copies() {
        let config = domained(&["a", "a", "b", "b", "c", "c"]);
        let v = View::initial(1, &config, lives(&config));
        // Rack c fails, and comes back before its partitions are filled elsewhere.
        let mut down = v.next(0, without_and_back(&v, &[4, 5], &[]));
        down.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        let short = down.short_and_lost(3).0;
        assert!(short > 0);
        let mut back = down.next(0, without_and_back(&down, &[], &[4, 5]));
        back.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        // The fills under way stay; no move starts, on rack c or elsewhere.
        assert_eq!(back.filling, down.filling);
        // Some fills counted, some not: still short, still no move.
        let (p, n) = back.fills().next().unwrap();
        let mut part = back.next(0, back.members.clone());
        part.rereplicate(
            &config,
            3,
            &[(p, n)].into_iter().collect(),
            &BTreeSet::new(),
        );
        assert_eq!(part.short_and_lost(3).0, short - 1);
        assert_eq!(part.fills().count(), back.fills().count() - 1);
        assert!(part.fills().all(|(p, _)| part.copies[p as usize].len() < 3));
        // Once every partition has its copies, the moves start, on rack c.
        let filled: BTreeSet<(u32, u16)> = part.fills().collect();
        let mut full = part.next(0, part.members.clone());
        full.rereplicate(&config, 3, &filled, &BTreeSet::new());
        assert_eq!(full.short_and_lost(3), (0, 0));
        assert!(full.fills().count() > 0);
        assert!(full.fills().all(|(_, n)| n == 4 || n == 5));
    }

    #[test]
    fn a_counted_move_drops_a_crowded_backup_not_the_primary() {
        let config = domained(&["a", "a", "b", "b", "c", "c"]);
        let mut v = View::initial(1, &config, lives(&config));
        // Partition 0 on 0 and 1 (rack a) and 2, filling on 4: counted, 1 goes.
        v.copies[0] = vec![0, 1, 2];
        v.filling = vec![vec![4]];
        let mut next = v.next(0, v.members.clone());
        next.rereplicate(
            &config,
            3,
            &[(0, 4)].into_iter().collect(),
            &BTreeSet::new(),
        );
        assert_eq!(next.copies[0], vec![0, 2, 4]);
        // The primary's rack-mate is a backup in the crowded rack b instead.
        v.copies[0] = vec![1, 2, 3];
        let mut next = v.next(0, v.members.clone());
        next.rereplicate(
            &config,
            3,
            &[(0, 4)].into_iter().collect(),
            &BTreeSet::new(),
        );
        assert_eq!(next.copies[0][0], 1);
        assert_eq!(next.copies[0].len(), 3);
        assert!(next.copies[0].contains(&4));
        assert_eq!(spread(&config, &next)[0], 3);
    }

    #[test]
    fn full_members_are_never_given_a_fill() {
        // Six nodes, each its own domain; node 0 lost: each partition it held is short.
        let config = domained(&["a", "b", "c", "d", "e", "f"]);
        let v = View::initial(1, &config, lives(&config));
        let down = v.next(1, without_and_back(&v, &[0], &[]));
        let short: Vec<u32> = (0..v.copies.len() as u32)
            .filter(|&p| v.copies[p as usize].contains(&0))
            .collect();
        assert!(!short.is_empty());
        // Without a full member: the usual choice, which lands on 3 and 4 somewhere.
        let mut free = down.clone();
        free.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        let chosen: BTreeSet<u16> = free.fills().map(|(_, n)| n).collect();
        assert!(chosen.contains(&3) && chosen.contains(&4), "{chosen:?}");
        // With 3 and 4 full: never on them, and each short partition still gets its fill
        // from the others (two members besides its copies remain for each).
        let full: BTreeSet<u16> = [3, 4].into_iter().collect();
        for &p in &short {
            let n = down
                .choose_backup(&config, p, &full)
                .expect("a member with room");
            assert!(!full.contains(&n));
            // The ordering among the others is kept: the choice without 3 and 4 as
            // members at all is the same one.
            let mut without = down.clone();
            without.members.retain(|m| !full.contains(&m.node));
            assert_eq!(without.choose_backup(&config, p, &BTreeSet::new()), Some(n));
        }
        let mut next = down.clone();
        next.rereplicate(&config, 3, &BTreeSet::new(), &full);
        next.check(&config).unwrap();
        assert!(next.fills().all(|(_, n)| !full.contains(&n)), "{next:?}");
        for &p in &short {
            assert_eq!(next.filling(p).len(), 1, "partition {p}");
        }
        // Every survivor full: no fill at all; the partitions stay short, their primaries
        // promoted as without limits.
        let all: BTreeSet<u16> = down.members.iter().map(|m| m.node).collect();
        let mut none = down.clone();
        none.rereplicate(&config, 3, &BTreeSet::new(), &all);
        assert!(none.filling.is_empty(), "{none:?}");
        assert_eq!(none.copies, down.copies);
        assert_eq!(none.short_and_lost(3).0, short.len());
        for &p in &short {
            assert_eq!(none.choose_backup(&config, p, &all), None);
        }
        // Once one has room again (figures changed), the next view fills there.
        let mut later = none.next(1, none.members.clone());
        let still_full: BTreeSet<u16> = all.iter().copied().filter(|&n| n != 5).collect();
        later.rereplicate(&config, 3, &BTreeSet::new(), &still_full);
        let placed: BTreeSet<u16> = later.fills().map(|(_, n)| n).collect();
        assert!(placed.iter().all(|&n| n == 5), "{placed:?}");
        assert!(!placed.is_empty());
    }

    #[test]
    fn full_members_are_never_given_a_move() {
        // Rack c fails and is re-replicated onto a and b, then comes back: the moves go
        // to rack c, to 4 and 5; with 4 full, to 5 only; with both full, nowhere.
        let config = domained(&["a", "a", "b", "b", "c", "c"]);
        let v = View::initial(1, &config, lives(&config));
        let mut down = v.next(0, without_and_back(&v, &[4, 5], &[]));
        down.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        let down = fill_all(&config, &down, &mut |_, _| {});
        let back = down.next(0, without_and_back(&down, &[], &[4, 5]));
        let mut free = back.clone();
        free.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        assert!(free.fills().any(|(_, n)| n == 4));
        let four: BTreeSet<u16> = [4].into_iter().collect();
        let mut one = back.clone();
        one.rereplicate(&config, 3, &BTreeSet::new(), &four);
        assert!(one.fills().count() > 0);
        assert!(one.fills().all(|(_, n)| n == 5), "{one:?}");
        for p in 0..back.copies.len() as u32 {
            assert_ne!(back.choose_move(&config, p, &four), Some(4));
        }
        let both: BTreeSet<u16> = [4, 5].into_iter().collect();
        let mut none = back.clone();
        none.rereplicate(&config, 3, &BTreeSet::new(), &both);
        assert!(none.filling.is_empty());
        for p in 0..back.copies.len() as u32 {
            assert_eq!(back.choose_move(&config, p, &both), None);
        }
    }

    #[test]
    fn a_member_is_full_when_one_more_average_copy_reaches_its_limit() {
        // No limit: never.
        assert!(!memory_full(u64::MAX, 0, 0));
        // 4 copies of 100 bytes: room for one more below 500, not at 500.
        assert!(!memory_full(400, 501, 4));
        assert!(memory_full(400, 500, 4));
        assert!(memory_full(400, 450, 4));
        // At or past the limit, whatever it holds.
        assert!(memory_full(1, 1, 0));
        assert!(memory_full(1000, 10, 1000));
        // Holding nothing: the whole of what it uses counts as the average.
        assert!(!memory_full(100, 201, 0));
        assert!(memory_full(100, 200, 0));
        assert!(!memory_full(0, 1, 0));
        // No overflow.
        assert!(memory_full(u64::MAX - 1, u64::MAX, 1));
    }

    #[test]
    fn backup_cms_are_in_other_failure_domains_than_the_cm_first() {
        let backups = |domains: &[&str], cm: u16| {
            let config = domained(domains);
            let mut v = View::initial(1, &config, lives(&config));
            v.cm = cm;
            let backups = v.backup_cms(&config, 2);
            for node in 0..domains.len() as u16 {
                assert_eq!(
                    v.backup_cm_rank(&config, node, 2),
                    backups.iter().position(|&n| n == node)
                );
            }
            backups
        };
        // Racks of two: the CM's rack-mate is passed over, and so is the first backup's.
        assert_eq!(backups(&["a", "a", "b", "b", "c", "c"], 0), vec![2, 4]);
        assert_eq!(backups(&["a", "a", "b", "b", "c", "c"], 3), vec![4, 0]);
        // Racks of three: before, CM 0's backups were 1 and 2, its own rack, so that rack
        // failing left no one to take over.
        let racks3 = ["a", "a", "a", "b", "b", "b", "c", "c", "c"];
        assert_eq!(backups(&racks3, 0), vec![3, 6]);
        assert_eq!(backups(&racks3, 7), vec![0, 3]);
        // Two racks: the other rack first, then the next member of the CM's.
        assert_eq!(backups(&["a", "a", "a", "b", "b", "b"], 0), vec![3, 1]);
        // One rack: the members after the CM, as with each node its own domain.
        assert_eq!(backups(&["a", "a", "a"], 1), vec![2, 0]);
        assert_eq!(backups(&["a", "b", "c", "d"], 2), vec![3, 0]);
        // Never more than the members besides the CM.
        assert_eq!(backups(&["a", "b", "c"], 0), vec![1, 2]);
        let config = domained(&["a", "b", "c"]);
        let v = View::initial(1, &config, lives(&config)[..2].to_vec());
        assert_eq!(v.backup_cms(&config, 2), vec![1]);
        assert_eq!(v.backup_cms(&config, 0), Vec::<u16>::new());
    }

    #[test]
    fn a_new_life_fills_what_its_last_life_held_and_fills_never_promote() {
        let config = Configuration::local(3, 3, 1, 4, 7000).unwrap();
        let v = View::initial(1, &config, lives(&config));
        let mut down = v.next(1, v.members[1..].to_vec());
        down.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        // Two survivors hold every partition already: nowhere to fill.
        assert!(down.filling.is_empty());
        let mut back = down.members.clone();
        back.push(ViewMember {
            node: 0,
            incarnation: 2,
        });
        let mut joined = down.next(1, back);
        joined.rereplicate(&config, 3, &BTreeSet::new(), &BTreeSet::new());
        joined.check(&config).unwrap();
        for p in 0..joined.copies.len() as u32 {
            assert_eq!(joined.filling(p), &[0]);
            assert_eq!(joined.copies[p as usize].len(), 2);
        }
        // Every copy dies but the fills: the partitions are lost, the fills dropped.
        let alone = joined.next(
            0,
            vec![ViewMember {
                node: 0,
                incarnation: 2,
            }],
        );
        assert!(alone.copies.iter().all(Vec::is_empty));
        assert!(alone.filling.is_empty());
        // A view without fills encodes as before data recovery existed.
        assert!(!down.to_text().contains("filling"));
        assert_eq!(View::from_text(&joined.to_text()).unwrap(), joined);
    }

    #[test]
    fn text_round_trips_and_bad_views_are_refused() {
        let v = view3();
        let config = Configuration::local(3, 3, 1, 4, 7000).unwrap();
        v.check(&config).unwrap();
        assert_eq!(View::from_text(&v.to_text()).unwrap(), v);
        assert!(View::from_text("id = \"x\"").is_err());
        let mut bad = v.clone();
        bad.members.push(ViewMember {
            node: 7,
            incarnation: 1,
        });
        assert!(bad.check(&config).is_err());
        let mut bad = v.clone();
        bad.cm = 9;
        assert!(bad.check(&config).is_err());
        assert_eq!(v.backup_cms(&config, 2), vec![1, 2]);
        for node in 0..4 {
            assert_eq!(
                v.backup_cm_rank(&config, node, 2),
                v.backup_cms(&config, 2).iter().position(|&n| n == node)
            );
        }
    }
}
