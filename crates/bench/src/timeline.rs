//! Failure timelines, as FaRM's Figures 9 and 10: a cluster benchmark (`bench tatp`, or
//! any `bench` of [`crate::kv`]) kills a node, a failure domain or the CM with SIGKILL
//! in the middle of its measured window, and records
//!
//! - the transactions every node's clients commit, in 1 ms buckets of a clock common
//!   to the node processes (the machine's real-time clock: they run on one machine);
//! - the events of the recovery, as each surviving node sees them (polled every 500 us
//!   by a thread of the node process): a suspicion raised, each view committed, the
//!   partitions it was made primary of unblocked by transaction-state recovery, and the
//!   view that is back at full strength (no backup being filled, every partition with
//!   its copies);
//!
//! and derives from them [`TimelineReport`]: the time from the kill until the survivors
//! are back to 80% of their throughput, how long re-replication took, and the
//! survivors' throughput while it ran. The node side is [`Recorder`] (the buckets) and
//! [`Monitor`] (the events); the benchmark's side is [`analyze`] and [`plot`].

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use serde::{Deserialize, Serialize};

/// The moving average the 80% rule is judged on, in 1 ms buckets (as the issue and
/// FaRM's figures: 10 ms).
pub const AVERAGE_MS: usize = crate::plot::TIMELINE_AVERAGE_MS;
/// The share of the throughput before the kill the survivors must get back to.
pub const BACK_TO: f64 = 0.8;
/// Suspicions a node's monitor keeps (the times it saw the count grow).
const SUSPICIONS_KEPT: usize = 64;
/// How often a node's monitor looks at its lease thread and store.
const MONITOR_EVERY: Duration = Duration::from_micros(500);

/// What to kill, and when (seconds after the measured window starts).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Kill {
    /// One node (`--kill NODE@SECS`).
    Node { node: u16, at_s: f64 },
    /// Every node of a failure domain at once (`--kill-domain DOMAIN@SECS`).
    Domain { domain: String, at_s: f64 },
    /// The configuration manager of the moment (`--kill-cm SECS`).
    Cm { at_s: f64 },
}

impl Kill {
    /// Parses `NODE@SECS` (`--kill`).
    pub fn node(spec: &str) -> anyhow::Result<Self> {
        let (node, at_s) = split_at(spec, "NODE@SECS")?;
        let node = node
            .parse()
            .with_context(|| format!("--kill {spec:?}: {node:?} is not a node id"))?;
        Ok(Self::Node { node, at_s })
    }

    /// Parses `DOMAIN@SECS` (`--kill-domain`).
    pub fn domain(spec: &str) -> anyhow::Result<Self> {
        let (domain, at_s) = split_at(spec, "DOMAIN@SECS")?;
        ensure!(!domain.is_empty(), "--kill-domain {spec:?}: no domain");
        Ok(Self::Domain {
            domain: domain.to_owned(),
            at_s,
        })
    }

    /// `--kill-cm SECS`.
    pub fn cm(at_s: f64) -> anyhow::Result<Self> {
        check_seconds(at_s, "--kill-cm")?;
        Ok(Self::Cm { at_s })
    }

    /// Seconds after the window starts.
    pub fn at_s(&self) -> f64 {
        match self {
            Self::Node { at_s, .. } | Self::Domain { at_s, .. } | Self::Cm { at_s } => *at_s,
        }
    }

    /// For titles and tables: "node 2", "domain d1", "the CM".
    pub fn describe(&self) -> String {
        match self {
            Self::Node { node, .. } => format!("node {node}"),
            Self::Domain { domain, .. } => format!("domain {domain}"),
            Self::Cm { .. } => "the CM".to_owned(),
        }
    }
}

fn split_at<'a>(spec: &'a str, form: &str) -> anyhow::Result<(&'a str, f64)> {
    let Some((what, at)) = spec.split_once('@') else {
        bail!("{spec:?} is not {form}");
    };
    let at_s: f64 = at
        .parse()
        .with_context(|| format!("{spec:?}: {at:?} is not a number of seconds"))?;
    check_seconds(at_s, spec)?;
    Ok((what, at_s))
}

fn check_seconds(at_s: f64, what: &str) -> anyhow::Result<()> {
    ensure!(
        at_s.is_finite() && at_s >= 0.0,
        "{what}: the time of the kill must be a number of seconds, 0 or more"
    );
    Ok(())
}

/// Nanoseconds since the Unix epoch on the machine's real-time clock: the processes of
/// one run agree on it (they share the machine), so it dates a timeline's start.
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The `Instant` of this process that was `unix_ns` on the real-time clock.
fn instant_of(unix_ns_then: u64) -> Instant {
    let now = Instant::now();
    let ago = Duration::from_nanos(unix_ns().saturating_sub(unix_ns_then));
    now.checked_sub(ago).unwrap_or(now)
}

/// A node's committed transactions per 1 ms bucket from a start, shared by its
/// coroutines: a relaxed add per commit, no allocation (the buckets are made once).
pub struct Recorder {
    epoch: Instant,
    buckets: Box<[AtomicU32]>,
}

impl Recorder {
    /// Buckets for `length_ms` ms from `start_unix_ns`; commits after them are not counted.
    pub fn new(start_unix_ns: u64, length_ms: usize) -> Self {
        Self {
            epoch: instant_of(start_unix_ns),
            buckets: (0..length_ms).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// A transaction committed now.
    #[inline]
    pub fn commit(&self) {
        let i = self.epoch.elapsed().as_millis() as usize;
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The buckets up to now.
    pub fn buckets(&self) -> Vec<u32> {
        let upto = (self.epoch.elapsed().as_millis() as usize).min(self.buckets.len());
        self.buckets[..upto]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    /// Milliseconds since the start.
    pub fn now_ms(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1e3
    }
}

/// The recorder of a driven node, set by its `timeline` command (once).
pub type RecorderSlot = Arc<OnceLock<Recorder>>;

/// One view as a node saw it, each time in ms since the timeline's start.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ViewEvents {
    /// The view's id.
    pub id: u64,
    /// Its members.
    pub members: usize,
    /// First seen (adopted, or learnt) by this node.
    pub seen_ms: f64,
    /// Committed here.
    pub committed_ms: Option<f64>,
    /// Every partition this node was made primary of in it unblocked by
    /// transaction-state recovery (at once if none was).
    pub recovered_ms: Option<f64>,
    /// The view is at full strength: no backup being filled, every partition with its
    /// copies (as many as the configuration's replicas, or members if fewer).
    pub full_strength: bool,
}

/// What one node saw of the recovery ([`Monitor`]), answered to `events`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeEvents {
    /// The node.
    pub node: u16,
    /// Each time its lease thread raised suspicions, in ms since the start (the first
    /// [`SUSPICIONS_KEPT`]).
    pub suspicions_ms: Vec<f64>,
    /// The views it saw, in order.
    pub views: Vec<ViewEvents>,
    /// Backups it filled (data recovery) since the start: objects and bytes copied, as
    /// its fills last reported them.
    pub filled_objects: u64,
    pub filled_bytes: u64,
}

/// A thread of a driven node that watches its lease thread and store for the events of
/// a timeline until dropped.
pub struct Monitor {
    events: Arc<Mutex<NodeEvents>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    /// Watches `node` (a member, with a lease thread) from the timeline's start.
    pub fn start(node: &ferrotx_node::Node, slot: &RecorderSlot) -> Option<Self> {
        let link = node.membership()?.clone();
        let slot = slot.clone();
        slot.get()?;
        let core = node.core().clone();
        let replicas = usize::from(node.config().replicas());
        let events = Arc::new(Mutex::new(NodeEvents {
            node: node.id(),
            ..NodeEvents::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (events_w, stop_r) = (events.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("timeline".into())
            .spawn(move || {
                let recorder = slot.get().expect("set before the monitor starts");
                let first = link.status().stats;
                let (mut suspicions, mut committed) = (first.suspicions, first.views_committed);
                // Bytes and objects of each fill, as last seen (a fill leaves the status
                // once counted).
                let mut fills: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
                while !stop_r.load(Ordering::Relaxed) {
                    let status = link.status();
                    let (store_view, blocked) = core.recovery_blocked();
                    let now = recorder.now_ms();
                    let mut e = events_w.lock().expect("events lock");
                    if status.stats.suspicions > suspicions
                        && e.suspicions_ms.len() < SUSPICIONS_KEPT
                    {
                        e.suspicions_ms.push(now);
                    }
                    suspicions = status.stats.suspicions;
                    if let Some(view) = &status.view
                        && e.views.last().is_none_or(|v| v.id != view.id)
                    {
                        let short = view.short_and_lost(replicas.min(view.members.len()));
                        e.views.push(ViewEvents {
                            id: view.id,
                            members: view.members.len(),
                            seen_ms: now,
                            full_strength: short == (0, 0) && view.fills().count() == 0,
                            ..ViewEvents::default()
                        });
                    }
                    if let Some(last) = e.views.last_mut() {
                        if status.stats.views_committed > committed && last.committed_ms.is_none() {
                            last.committed_ms = Some(now);
                        }
                        if last.committed_ms.is_some()
                            && last.recovered_ms.is_none()
                            && store_view == last.id
                            && blocked == 0
                        {
                            last.recovered_ms = Some(now);
                        }
                    }
                    committed = status.stats.views_committed;
                    for fill in &status.fills {
                        fills.insert(fill.partition, (fill.objects, fill.bytes));
                    }
                    e.filled_objects = fills.values().map(|f| f.0).sum();
                    e.filled_bytes = fills.values().map(|f| f.1).sum();
                    drop(e);
                    std::thread::sleep(MONITOR_EVERY);
                }
            })
            .ok()?;
        Some(Self {
            events,
            stop,
            thread: Some(thread),
        })
    }

    /// What it saw so far.
    pub fn events(&self) -> NodeEvents {
        self.events.lock().expect("events lock").clone()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A node's answer to `timeline-get`: its buckets and events.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeTimeline {
    /// Committed transactions of its clients per 1 ms from the start.
    pub buckets: Vec<u32>,
    /// What it saw of the recovery (empty without membership).
    pub events: NodeEvents,
}

/// The timeline of a run with a kill, as written to `--json` (`timeline`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TimelineReport {
    /// What was killed.
    pub kill: Option<Kill>,
    /// The nodes killed.
    pub killed: Vec<u16>,
    /// The nodes that ran on.
    pub survivors: Vec<u16>,
    /// When the kill was sent, in ms since the timeline's start (every other time below
    /// is since the start too, except `*_after_kill_ms`, which are since the kill).
    pub kill_ms: f64,
    /// The survivors' commits per second in the second before the kill.
    pub before_per_s: f64,
    /// The first suspicion any survivor raised after the kill.
    pub suspected_ms: Option<f64>,
    /// The first view without the killed nodes committed at every survivor (the last
    /// survivor to commit it).
    pub new_view: Option<u64>,
    pub new_view_committed_ms: Option<f64>,
    /// Every survivor unblocked every partition it was made primary of in that view (or
    /// a later one): all transactions recovered.
    pub recovered_ms: Option<f64>,
    /// The first view at full strength after the kill, seen by every survivor: data
    /// fully re-replicated.
    pub rereplicated_ms: Option<f64>,
    /// `time_to_80pct_ms`: from the kill until the survivors' commits, as a 10 ms moving
    /// average, are back to 80% of `before_per_s`, after having dropped below it (0 if
    /// they never did); `None` if they never came back within the timeline.
    pub time_to_80pct_ms: Option<f64>,
    /// The lowest 10 ms moving average after the kill, as a share of `before_per_s`.
    pub lowest_share: f64,
    /// From the new view's commit to full strength, in seconds: re-replication.
    pub rereplicated_s: Option<f64>,
    /// Bytes and objects the survivors copied into new backups.
    pub rereplicated_bytes: u64,
    pub rereplicated_objects: u64,
    /// `rereplicated_bytes / rereplicated_s`.
    pub rereplicated_bytes_per_s: Option<f64>,
    /// The survivors' commits per second from the time back at 80% to full strength
    /// (while re-replication ran), as a share of `before_per_s`; and the lowest 100 ms
    /// average over that time, as a share.
    pub during_rereplication_share: Option<f64>,
    pub during_rereplication_lowest_100ms_share: Option<f64>,
    /// The survivors' commits per 1 ms bucket from the start (the plot's data).
    pub buckets: Vec<u64>,
    /// Every node's events, survivors only (in node order).
    pub events: Vec<NodeEvents>,
}

/// From the kill (`kill_ms`) until the moving average is back to `share` of `before`
/// (commits per ms), having dropped below it first: the end of the first window back at
/// `share` after the first below it, in ms after the kill. `Some(0.0)` if it never
/// dropped; `None` if it never came back.
fn time_back(average: &[f64], kill_ms: f64, before: f64, share: f64) -> Option<f64> {
    let from = kill_ms.floor().max(0.0) as usize;
    let bar = before * share;
    let dropped = (from..average.len()).find(|&i| average[i] < bar);
    let Some(dropped) = dropped else {
        return Some(0.0);
    };
    let back = (dropped..average.len()).find(|&i| average[i] >= bar)?;
    // Bucket `back` ends at `back + 1` ms.
    Some((back as f64 + 1.0 - kill_ms).max(0.0))
}

/// The latest of the nodes' times, if every node has one.
fn latest(times: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let mut latest: Option<f64> = None;
    for t in times {
        let t = t?;
        latest = Some(latest.map_or(t, |l| l.max(t)));
    }
    latest
}

/// The report of a run that killed `killed` at `kill_ms` (since the timeline's start),
/// from the survivors' timelines (`survivors[i]` is node `survivor_ids[i]`).
pub fn analyze(
    kill: Option<Kill>,
    killed: Vec<u16>,
    kill_ms: f64,
    survivor_ids: Vec<u16>,
    survivors: &[NodeTimeline],
) -> TimelineReport {
    let length = survivors.iter().map(|t| t.buckets.len()).max().unwrap_or(0);
    let mut buckets = vec![0u64; length];
    for t in survivors {
        for (sum, &b) in buckets.iter_mut().zip(&t.buckets) {
            *sum += u64::from(b);
        }
    }
    let kill_at = (kill_ms.floor().max(0.0) as usize).min(length);
    let second = &buckets[kill_at.saturating_sub(1000)..kill_at];
    let before = if second.is_empty() {
        0.0
    } else {
        second.iter().sum::<u64>() as f64 / second.len() as f64
    };
    let average = crate::plot::moving_average(&buckets, AVERAGE_MS);
    let time_to_80pct_ms = time_back(&average, kill_ms, before, BACK_TO);
    let lowest_share = average
        .get(kill_at..)
        .unwrap_or(&[])
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let events: Vec<NodeEvents> = survivors.iter().map(|t| t.events.clone()).collect();
    let after = |t: f64| t >= kill_ms;
    let suspected_ms = events
        .iter()
        .flat_map(|e| e.suspicions_ms.iter().copied().filter(|&t| after(t)))
        .min_by(f64::total_cmp);
    // The first view committed after the kill without the killed nodes: the view with
    // the smallest id among those every survivor committed after the kill.
    let members_after = survivor_ids.len();
    let committed_after = |e: &NodeEvents, id: u64| {
        e.views
            .iter()
            .find(|v| v.id == id)
            .and_then(|v| v.committed_ms)
            .filter(|&t| after(t))
    };
    let candidates: Vec<u64> = events
        .first()
        .map(|e| {
            e.views
                .iter()
                .filter(|v| v.members <= members_after && v.committed_ms.is_some_and(after))
                .map(|v| v.id)
                .collect()
        })
        .unwrap_or_default();
    let new_view = candidates
        .into_iter()
        .find(|&id| events.iter().all(|e| committed_after(e, id).is_some()));
    let new_view_committed_ms =
        new_view.and_then(|id| latest(events.iter().map(|e| committed_after(e, id))));
    let recovered_ms = new_view.and_then(|id| {
        latest(events.iter().map(|e| {
            e.views
                .iter()
                .filter(|v| v.id >= id)
                .find_map(|v| v.recovered_ms)
        }))
    });
    let rereplicated_ms = new_view.and_then(|id| {
        latest(events.iter().map(|e| {
            e.views
                .iter()
                .find(|v| v.id >= id && v.full_strength)
                .map(|v| v.seen_ms)
        }))
    });
    let rereplicated_s = match (new_view_committed_ms, rereplicated_ms) {
        (Some(from), Some(to)) => Some((to - from).max(0.0) / 1e3),
        _ => None,
    };
    let rereplicated_bytes = events.iter().map(|e| e.filled_bytes).sum();
    let rereplicated_objects = events.iter().map(|e| e.filled_objects).sum();
    let share_between = |from: f64, to: f64| -> Option<(f64, f64)> {
        let (from, to) = (from.ceil() as usize, (to.floor() as usize).min(length));
        if to <= from || before <= 0.0 {
            return None;
        }
        let span = &buckets[from..to];
        let mean = span.iter().sum::<u64>() as f64 / span.len() as f64 / before;
        let lowest = span
            .chunks(100)
            .filter(|c| c.len() == 100)
            .map(|c| c.iter().sum::<u64>() as f64 / 100.0 / before)
            .fold(f64::INFINITY, f64::min);
        Some((mean, if lowest.is_finite() { lowest } else { mean }))
    };
    let during = match (time_to_80pct_ms, rereplicated_ms) {
        (Some(back), Some(done)) => share_between(kill_ms + back, done),
        _ => None,
    };
    TimelineReport {
        kill,
        killed,
        survivors: survivor_ids,
        kill_ms,
        before_per_s: before * 1e3,
        suspected_ms,
        new_view,
        new_view_committed_ms,
        recovered_ms,
        rereplicated_ms,
        time_to_80pct_ms,
        lowest_share: if before > 0.0 && lowest_share.is_finite() {
            lowest_share / before
        } else {
            0.0
        },
        rereplicated_s,
        rereplicated_bytes,
        rereplicated_objects,
        rereplicated_bytes_per_s: rereplicated_s
            .filter(|&s| s > 0.0)
            .map(|s| rereplicated_bytes as f64 / s),
        during_rereplication_share: during.map(|d| d.0),
        during_rereplication_lowest_100ms_share: during.map(|d| d.1),
        buckets,
        events,
    }
}

/// Prints the timeline's lines of a report.
pub fn print(t: &TimelineReport) {
    let ms = |v: Option<f64>| v.map_or_else(|| "never".to_owned(), |v| format!("{v:.1} ms"));
    let since = |v: Option<f64>| ms(v.map(|v| v - t.kill_ms));
    println!(
        "  killed {} (nodes {:?}) at {:.1} ms; survivors {:?} committed {:.0}/s in the second before",
        t.kill.as_ref().map_or_else(String::new, Kill::describe),
        t.killed,
        t.kill_ms,
        t.survivors,
        t.before_per_s
    );
    println!(
        "  after the kill: suspected {}, view {} committed {}, transactions recovered {}, \
         re-replicated {}",
        since(t.suspected_ms),
        t.new_view.map_or_else(|| "-".to_owned(), |v| v.to_string()),
        since(t.new_view_committed_ms),
        since(t.recovered_ms),
        since(t.rereplicated_ms)
    );
    println!(
        "  back to 80% of the throughput (10 ms average) {} after the kill (lowest {:.0}%); \
         re-replication {} of {} objects, {} bytes{}{}",
        ms(t.time_to_80pct_ms),
        t.lowest_share * 100.0,
        t.rereplicated_s
            .map_or_else(|| "not done".to_owned(), |s| format!("{s:.2} s")),
        t.rereplicated_objects,
        t.rereplicated_bytes,
        t.rereplicated_bytes_per_s
            .map_or_else(String::new, |b| format!(" ({:.1} MB/s)", b / 1e6)),
        match (
            t.during_rereplication_share,
            t.during_rereplication_lowest_100ms_share
        ) {
            (Some(mean), Some(low)) => format!(
                "; throughput meanwhile {:.0}% (lowest 100 ms: {:.0}%)",
                mean * 100.0,
                low * 100.0
            ),
            _ => String::new(),
        }
    );
}

/// Writes the timeline's plots: `<stem>.svg` and `<stem>.png` from a second before the
/// kill to a second after full strength (or the end), and `<stem>-zoom.svg` and `.png`
/// from 200 ms before the kill to 500 ms after it (FaRM's Figure 9 has the two too).
pub fn plot(t: &TimelineReport, title: &str, stem: &Path) -> anyhow::Result<()> {
    let end = t
        .rereplicated_ms
        .map_or(t.buckets.len() as f64, |r| r + 1000.0);
    plot_span(t, title, stem, 1000.0, end)?;
    let mut zoom = stem.as_os_str().to_owned();
    zoom.push("-zoom");
    plot_span(
        t,
        &format!("{title}, the kill"),
        Path::new(&zoom),
        200.0,
        t.kill_ms + 500.0,
    )
}

/// The plot from `before_ms` before the kill's bucket to `end_ms` (since the start).
fn plot_span(
    t: &TimelineReport,
    title: &str,
    stem: &Path,
    before_ms: f64,
    end_ms: f64,
) -> anyhow::Result<()> {
    // From `before_ms` before the kill's bucket, so that the axis reads 0 at that bucket.
    let kill_bucket = t.kill_ms.floor().max(0.0);
    let from = (kill_bucket - before_ms).max(0.0);
    let end = end_ms.min(t.buckets.len() as f64).max(from);
    let buckets = &t.buckets[from as usize..end as usize];
    let mut markers = vec![(t.kill_ms - from, "kill")];
    let mut add = |at: Option<f64>, label: &'static str| {
        if let Some(at) = at.filter(|&at| at <= end) {
            markers.push((at - from, label));
        }
    };
    add(t.suspected_ms, "suspected");
    add(t.new_view_committed_ms, "new view");
    add(t.recovered_ms, "recovered");
    add(t.time_to_80pct_ms.map(|back| t.kill_ms + back), "80%");
    add(t.rereplicated_ms, "re-replicated");
    crate::plot::timeline(
        stem,
        title,
        buckets,
        from - kill_bucket,
        "time since the kill (ms)",
        &markers,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(buckets: Vec<u32>, events: NodeEvents) -> NodeTimeline {
        NodeTimeline { buckets, events }
    }

    #[test]
    fn parses_kills() {
        assert_eq!(
            Kill::node("2@1.5").unwrap(),
            Kill::Node { node: 2, at_s: 1.5 }
        );
        assert_eq!(
            Kill::domain("rack-1@3").unwrap(),
            Kill::Domain {
                domain: "rack-1".into(),
                at_s: 3.0
            }
        );
        assert!(Kill::node("2").is_err());
        assert!(Kill::node("x@1").is_err());
        assert!(Kill::node("1@-1").is_err());
        assert!(Kill::node("1@nan").is_err());
        assert!(Kill::domain("@1").is_err());
        assert!(Kill::cm(f64::INFINITY).is_err());
    }

    #[test]
    fn back_to_80_percent_after_a_drop() {
        // 10 per ms for 2 s, nothing for 30 ms from the kill at 2000 ms, then 9 per ms.
        let mut b = vec![10u64; 2000];
        b.extend(std::iter::repeat_n(0, 30));
        b.extend(std::iter::repeat_n(9, 500));
        let average = crate::plot::moving_average(&b, AVERAGE_MS);
        // The average reaches 8 once 9 of the last 10 buckets are back (81 / 10): the
        // bucket 2038 ends at 2039 ms, 39 ms after the kill.
        assert_eq!(time_back(&average, 2000.0, 10.0, 0.8), Some(39.0));
        // A throughput that never drops is back at once; one that never comes back, never.
        assert_eq!(
            time_back(
                &crate::plot::moving_average(&[10; 100], 10),
                50.0,
                10.0,
                0.8
            ),
            Some(0.0)
        );
        let mut dead = vec![10u64; 100];
        dead.extend([0; 100]);
        assert_eq!(
            time_back(&crate::plot::moving_average(&dead, 10), 100.0, 10.0, 0.8),
            None
        );
    }

    #[test]
    fn analyzes_the_events_of_every_survivor() {
        let view = |id, members, committed: Option<f64>, recovered, full| ViewEvents {
            id,
            members,
            seen_ms: committed.unwrap_or(0.0),
            committed_ms: committed,
            recovered_ms: recovered,
            full_strength: full,
        };
        let node = |n: u16, commit: f64, recover: f64, full: f64| NodeEvents {
            node: n,
            suspicions_ms: if n == 0 { vec![1012.0] } else { vec![] },
            views: vec![
                view(1, 3, Some(5.0), Some(5.0), true),
                view(2, 2, Some(commit), Some(recover), false),
                view(3, 2, Some(full), Some(full), true),
            ],
            filled_objects: 10,
            filled_bytes: 1000,
        };
        let mut b = vec![4u32; 1000];
        b.extend([0; 20]);
        b.extend([4; 3000]);
        let survivors = [
            timeline(b.clone(), node(0, 1015.0, 1018.0, 3000.0)),
            timeline(b, node(1, 1016.0, 1020.0, 3001.0)),
        ];
        let t = analyze(
            Some(Kill::Node { node: 2, at_s: 1.0 }),
            vec![2],
            1000.0,
            vec![0, 1],
            &survivors,
        );
        assert_eq!(t.before_per_s, 8000.0);
        assert_eq!(t.suspected_ms, Some(1012.0));
        assert_eq!(t.new_view, Some(2));
        assert_eq!(t.new_view_committed_ms, Some(1016.0));
        assert_eq!(t.recovered_ms, Some(1020.0));
        assert_eq!(t.rereplicated_ms, Some(3001.0));
        assert_eq!(t.rereplicated_s, Some((3001.0 - 1016.0) / 1e3));
        assert_eq!(t.rereplicated_bytes, 2000);
        // Back at 8 per ms of 10 when 8 of the last 10 buckets are back: bucket 1027.
        assert_eq!(t.time_to_80pct_ms, Some(28.0));
        assert_eq!(t.lowest_share, 0.0);
        assert_eq!(t.during_rereplication_share, Some(1.0));
        // A survivor that never saw full strength: not re-replicated.
        let mut lagging = survivors.clone();
        lagging[1].events.views.pop();
        let t = analyze(None, vec![2], 1000.0, vec![0, 1], &lagging);
        assert_eq!(t.rereplicated_ms, None);
        assert_eq!(t.rereplicated_s, None);
    }
}
