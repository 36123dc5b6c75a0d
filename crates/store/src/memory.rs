//! A node's memory budget: what its store uses, its peak, and the limit (`maxmemory`)
//! past which writes that would grow the store are refused.
//!
//! The figure is the store's own account, not the allocator's: the bytes of live objects'
//! records, of index slots and of values kept out of line (see [`crate::Partition::used_bytes`]),
//! plus a fixed part the node sets once (its resident memory before data: logs, buffers,
//! code). It goes down when deleted objects are reclaimed, although their records stay
//! allocated for the next keys, so a node that refused writes takes them again after
//! deletes. Whoever owns the node's copies refreshes it ([`Memory::set_store`]) a few
//! times a second; readers (the participant at LOCK, the Redis front end per command,
//! the lease thread) only load atomics.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;

/// A node's memory figures and limit. Shared by the node's threads.
#[derive(Debug, Default)]
pub struct Memory {
    /// The nodes past their limits by the cluster manager's figures (its lease grants).
    over_nodes: Mutex<Vec<u16>>,
    /// Partitions with a copy on a node past its limit, a bit each: their primary here refuses
    /// writes that would grow memory, so that their backups stay within their limits.
    crowded: ArcSwap<Vec<u64>>,
    /// Whether any bit of `crowded` is set (the common case, none, costs one load).
    crowded_any: AtomicBool,
    /// The limit in bytes; 0: none.
    limit: AtomicU64,
    /// Bytes the node holds besides its store.
    fixed: AtomicU64,
    /// The store's bytes at the last refresh.
    store: AtomicU64,
    /// The highest `fixed + store` seen.
    peak: AtomicU64,
}

impl Memory {
    /// A budget with no limit.
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// A budget of `limit` bytes (0: none).
    pub fn with_limit(limit: u64) -> Self {
        let memory = Self::default();
        memory.set_limit(limit);
        memory
    }

    /// Sets the limit (0: none).
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The limit, if there is one.
    pub fn limit(&self) -> Option<u64> {
        Some(self.limit.load(Ordering::Relaxed)).filter(|&l| l > 0)
    }

    /// Sets the bytes the node holds besides its store.
    pub fn set_fixed(&self, bytes: u64) {
        self.fixed.store(bytes, Ordering::Relaxed);
        self.note_peak();
    }

    /// Records the store's bytes now (the sum of its copies' [`crate::Partition::used_bytes`]).
    pub fn set_store(&self, bytes: u64) {
        self.store.store(bytes, Ordering::Relaxed);
        self.note_peak();
    }

    fn note_peak(&self) {
        self.peak.fetch_max(self.used(), Ordering::Relaxed);
    }

    /// Bytes used: the store's at the last refresh, and the fixed part.
    pub fn used(&self) -> u64 {
        self.fixed.load(Ordering::Relaxed) + self.store.load(Ordering::Relaxed)
    }

    /// The store's bytes at the last refresh.
    pub fn store(&self) -> u64 {
        self.store.load(Ordering::Relaxed)
    }

    /// The highest [`Memory::used`] seen.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Records the nodes past their limits by the cluster manager's figures (its last
    /// lease grant).
    pub fn set_over_nodes(&self, nodes: &[u16]) {
        let mut held = self.over_nodes.lock().unwrap_or_else(|e| e.into_inner());
        if *held != nodes {
            *held = nodes.to_vec();
        }
    }

    /// The nodes past their limits, as the cluster manager last said.
    pub fn over_nodes(&self) -> Vec<u16> {
        self.over_nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records which partitions have a copy on a node past its limit (see
    /// [`Memory::crowded`]).
    pub fn set_crowded(&self, partitions: impl IntoIterator<Item = u32>) {
        let mut bits: Vec<u64> = Vec::new();
        for p in partitions {
            let (word, bit) = ((p / 64) as usize, p % 64);
            if bits.len() <= word {
                bits.resize(word + 1, 0);
            }
            bits[word] |= 1 << bit;
        }
        let any = !bits.is_empty();
        if any || self.crowded_any.load(Ordering::Relaxed) {
            self.crowded.store(std::sync::Arc::new(bits));
        }
        self.crowded_any.store(any, Ordering::Release);
    }

    /// True if some partition has a copy on a node past its limit (one load).
    pub fn any_crowded(&self) -> bool {
        self.crowded_any.load(Ordering::Acquire)
    }

    /// True if `partition` has a copy on a node past its limit (the cluster manager's
    /// word): its primary refuses writes that would grow memory, as if it were past its
    /// own. One load when no partition is.
    pub fn crowded(&self, partition: u32) -> bool {
        if !self.crowded_any.load(Ordering::Acquire) {
            return false;
        }
        let bits = self.crowded.load();
        bits.get((partition / 64) as usize)
            .is_some_and(|word| word & (1 << (partition % 64)) != 0)
    }

    /// True if there is a limit and the node uses more (Redis's test: "used memory >
    /// 'maxmemory'"): writes that would grow the store are refused.
    pub fn over(&self) -> bool {
        self.limit().is_some_and(|limit| self.used() > limit)
    }
}

/// A memory size as Redis reads one (`memtoull`): a whole number of bytes, optionally
/// followed by a unit, without case: `k` (1,000), `kb` (1,024), `m`, `mb`, `g`, `gb`.
/// `None` for anything else, or a size that overflows.
pub fn parse_memory(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?.to_ascii_lowercase();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    if number.is_empty() {
        return None;
    }
    let multiplier: u64 = match unit {
        "" | "b" => 1,
        "k" => 1_000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_read_as_redis_reads_them() {
        assert_eq!(parse_memory(b"0"), Some(0));
        assert_eq!(parse_memory(b"12345"), Some(12_345));
        assert_eq!(parse_memory(b"100mb"), Some(100 << 20));
        assert_eq!(parse_memory(b"100MB"), Some(100 << 20));
        assert_eq!(parse_memory(b"2k"), Some(2_000));
        assert_eq!(parse_memory(b"2kb"), Some(2_048));
        assert_eq!(parse_memory(b"1g"), Some(1_000_000_000));
        assert_eq!(parse_memory(b"1gb"), Some(1 << 30));
        for bad in [
            &b""[..],
            b"mb",
            b"-1",
            b"1.5mb",
            b"1 mb",
            b"1tb",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_memory(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_memory(b"18446744073709551615gb"), None);
    }

    #[test]
    fn over_only_with_a_limit_reached() {
        let memory = Memory::unlimited();
        memory.set_store(1 << 40);
        assert!(!memory.over());
        memory.set_limit(1000);
        assert!(memory.over());
        memory.set_store(900);
        assert!(!memory.over());
        memory.set_fixed(100);
        assert!(!memory.over(), "at the limit, not past it");
        memory.set_fixed(101);
        assert!(memory.over());
        memory.set_fixed(100);
        memory.set_store(0);
        assert!(!memory.over());
        assert_eq!(memory.used(), 100);
        assert_eq!(memory.peak(), 1 << 40);
        assert_eq!(Memory::with_limit(0).limit(), None);
    }

    #[test]
    fn crowded_partitions_are_those_set_last() {
        let memory = Memory::unlimited();
        assert!(!memory.crowded(0));
        memory.set_crowded([3, 64, 200]);
        assert!(memory.crowded(3) && memory.crowded(64) && memory.crowded(200));
        assert!(!memory.crowded(4) && !memory.crowded(65) && !memory.crowded(1 << 16));
        memory.set_crowded([]);
        assert!(!memory.crowded(3));
        memory.set_over_nodes(&[2, 5]);
        assert_eq!(memory.over_nodes(), vec![2, 5]);
    }
}
