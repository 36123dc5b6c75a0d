//! Authenticated datagrams: a MAC under the cluster key on every datagram, RPC and lease
//! alike, and a replay window per sender.
//!
//! A sealed datagram is the datagram's own bytes followed by a [`TRAILER_BYTES`] trailer:
//!
//! | bytes | field |
//! |---|---|
//! | 16 | cluster id ([`ClusterId`]), 128 random bits made when the cluster first formed |
//! | 4 | fingerprint of the key that made the tag ([`Key::fingerprint`]) |
//! | 4 | receiver: the endpoint (RPC) or node (lease) the datagram is for, little-endian |
//! | 8 | sequence number, per sender and life, little-endian |
//! | 16 | tag: BLAKE3 in keyed mode over every byte before it, truncated to 128 bits |
//!
//! The tag covers the whole datagram and the receiver, so a datagram captured on its way
//! to one node is refused by every other (lease messages name no receiver of their own),
//! and it binds everything the datagram says of its sender: the RPC packet header's source endpoint and incarnation, a lease message's
//! `from` and incarnation. A receiver checks the tag before it decodes anything, then
//! checks the sequence number against the [`ReplayWindow`] it keeps for that sender and
//! life, so a captured datagram sent again is dropped, as is one of an earlier life.
//!
//! One shared key keeps outsiders out: whoever does not hold it can neither forge nor
//! alter a datagram. It does not stop a rogue member, which holds the key and can claim to
//! be any node (see docs/operations.md, "Cluster key").
//!
//! Two keys may be held at once ([`Keys`]), for rotation without downtime: datagrams are
//! sealed with the first and accepted under either, chosen by the trailer's fingerprint.
//!
//! BLAKE3 (the `blake3` crate) rather than an AEAD: only integrity is needed, and a keyed
//! hash needs no nonce, so no sender state can make it unsafe (a reused GCM nonce would
//! give the key away). The keys the MAC uses are derived from the file's key material with
//! BLAKE3's key derivation, so the same material never serves two purposes.

use std::fmt;

/// Bytes of key material in a key file.
pub const KEY_BYTES: usize = 32;

/// Bytes of a cluster id.
pub const CLUSTER_ID_BYTES: usize = 16;

/// Bytes of a tag: 128 bits make a forgery a 2^-128 guess.
pub const TAG_BYTES: usize = 16;

/// Bytes the trailer adds to every sealed datagram.
pub const TRAILER_BYTES: usize = CLUSTER_ID_BYTES + 4 + 4 + 8 + TAG_BYTES;

/// How far behind the highest sequence number seen a datagram may arrive and still be
/// accepted (once). Senders number datagrams per receiver, so this is reordering depth
/// between one pair of endpoints: a coalesced burst of one `sendmmsg` is at most 64
/// datagrams (the transports' batch), and twice that leaves room for a network that
/// reorders. A datagram later than that is dropped as a replay: to its sender it is a loss,
/// which the RPC layer's retransmission (with a new sequence number) repairs.
pub const REPLAY_WINDOW: u64 = 128;

/// BLAKE3 key-derivation contexts: globally unique, fixed strings (BLAKE3's rule).
const MAC_CONTEXT: &str = "ferrotx 2026-11-27 datagram MAC key";
const FINGERPRINT_CONTEXT: &str = "ferrotx 2026-11-27 key fingerprint";

/// A cluster key: the MAC key derived from a key file's material, and the material's
/// fingerprint, which names it on the wire and in logs. `Debug` shows the fingerprint
/// only.
#[derive(Clone)]
pub struct Key {
    mac: [u8; 32],
    fingerprint: u32,
}

impl Key {
    /// The key made from `material` (a key file's 32 bytes).
    pub fn from_material(material: &[u8; KEY_BYTES]) -> Self {
        let mac = blake3::derive_key(MAC_CONTEXT, material);
        let print = blake3::derive_key(FINGERPRINT_CONTEXT, material);
        Self {
            mac,
            fingerprint: u32::from_le_bytes([print[0], print[1], print[2], print[3]]),
        }
    }

    /// Names the key on the wire and in logs; says nothing of the key itself.
    pub fn fingerprint(&self) -> u32 {
        self.fingerprint
    }

    fn tag(&self, bytes: &[u8]) -> [u8; TAG_BYTES] {
        let hash = blake3::keyed_hash(&self.mac, bytes);
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&hash.as_bytes()[..TAG_BYTES]);
        tag
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:08x})", self.fingerprint)
    }
}

/// The keys a node holds: datagrams are sealed with `send` and accepted under `send` or
/// `also` (a key being rotated in or out).
#[derive(Clone, Debug)]
pub struct Keys {
    send: Key,
    also: Option<Key>,
}

impl Keys {
    /// One key.
    pub fn one(key: Key) -> Self {
        Self {
            send: key,
            also: None,
        }
    }

    /// Two keys: seal with `send`, accept `also` as well. `None` if their fingerprints are
    /// equal (the same key twice, or a 2^-32 chance: make another).
    pub fn two(send: Key, also: Key) -> Option<Self> {
        (send.fingerprint != also.fingerprint).then_some(Self {
            send,
            also: Some(also),
        })
    }

    /// The key datagrams are sealed with.
    pub fn send(&self) -> &Key {
        &self.send
    }

    /// The other key accepted, if any.
    pub fn also(&self) -> Option<&Key> {
        self.also.as_ref()
    }

    fn find(&self, fingerprint: u32) -> Option<&Key> {
        if self.send.fingerprint == fingerprint {
            return Some(&self.send);
        }
        self.also.as_ref().filter(|k| k.fingerprint == fingerprint)
    }
}

/// A cluster's id: 128 random bits made when the cluster first formed and kept in the
/// coordination service. Nodes of two clusters never accept each other's datagrams, even
/// under the same key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ClusterId(pub [u8; CLUSTER_ID_BYTES]);

impl ClusterId {
    /// The id as 32 hexadecimal digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The id written by [`ClusterId::to_hex`]; `None` for anything else.
    pub fn from_hex(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.len() != 2 * CLUSTER_ID_BYTES || !text.is_ascii() {
            return None;
        }
        let mut id = [0u8; CLUSTER_ID_BYTES];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Self(id))
    }
}

impl fmt::Debug for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Why a datagram was dropped before it was decoded, or by its replay window.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum Refusal {
    /// Shorter than a trailer.
    #[error("no valid authentication trailer")]
    Malformed,
    /// Sealed for another receiver (captured on its way to another endpoint or node).
    #[error("sealed for another receiver")]
    OtherReceiver,
    /// Sealed for another cluster id.
    #[error("another cluster's datagram")]
    OtherCluster,
    /// Sealed with a key this node does not hold (its fingerprint is unknown).
    #[error("sealed with an unknown key")]
    UnknownKey,
    /// The tag does not match: forged, corrupted, or under another key.
    #[error("bad MAC")]
    BadMac,
    /// Seen before, or too old for the window, or from an earlier life of its sender.
    #[error("replayed")]
    Replay,
}

impl Refusal {
    /// Number of variants, for counter arrays indexed by [`Refusal::index`].
    pub const COUNT: usize = 6;

    /// Every variant, in index order.
    pub const ALL: [Refusal; Self::COUNT] = [
        Self::Malformed,
        Self::OtherReceiver,
        Self::OtherCluster,
        Self::UnknownKey,
        Self::BadMac,
        Self::Replay,
    ];

    /// Position of this variant in [`Refusal::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// A short stable name, for metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Malformed => "auth_malformed",
            Self::OtherReceiver => "other_receiver",
            Self::OtherCluster => "other_cluster",
            Self::UnknownKey => "unknown_key",
            Self::BadMac => "bad_mac",
            Self::Replay => "replay",
        }
    }
}

/// What seals and opens datagrams: the keys and the cluster id. Cheap to clone (two keys
/// and an id), and the same on every endpoint of a node.
#[derive(Clone, Debug)]
pub struct Auth {
    keys: Keys,
    cluster: ClusterId,
}

impl Auth {
    /// Seals and opens with `keys` for cluster `cluster`.
    pub fn new(keys: Keys, cluster: ClusterId) -> Self {
        Self { keys, cluster }
    }

    /// The keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The cluster id.
    pub fn cluster(&self) -> ClusterId {
        self.cluster
    }

    /// Appends the trailer to the datagram in `datagram`, for receiver `to` (an RPC
    /// endpoint's id, a node id for lease datagrams), with sequence number `seq` (which the
    /// caller never gives twice to one receiver in one life). Allocates nothing if
    /// `datagram` has room for [`TRAILER_BYTES`] more.
    pub fn seal(&self, datagram: &mut Vec<u8>, to: u32, seq: u64) {
        let key = &self.keys.send;
        datagram.extend_from_slice(&self.cluster.0);
        datagram.extend_from_slice(&key.fingerprint.to_le_bytes());
        datagram.extend_from_slice(&to.to_le_bytes());
        datagram.extend_from_slice(&seq.to_le_bytes());
        let tag = key.tag(datagram);
        datagram.extend_from_slice(&tag);
    }

    /// Checks `sealed`'s trailer as receiver `me`: the datagram without it and its
    /// sequence number, or why it is refused. The sequence number still has to pass the
    /// sender's [`ReplayWindow`], which the caller finds from the (now authentic) datagram.
    pub fn open<'a>(&self, sealed: &'a [u8], me: u32) -> Result<(&'a [u8], u64), Refusal> {
        let Some(body_len) = sealed.len().checked_sub(TRAILER_BYTES) else {
            return Err(Refusal::Malformed);
        };
        let (body, trailer) = sealed.split_at(body_len);
        let (cluster, rest) = trailer.split_at(CLUSTER_ID_BYTES);
        let (fingerprint, rest) = rest.split_at(4);
        let (receiver, rest) = rest.split_at(4);
        let (seq, tag) = rest.split_at(8);
        if cluster != self.cluster.0 {
            return Err(Refusal::OtherCluster);
        }
        let fingerprint = u32::from_le_bytes([
            fingerprint[0],
            fingerprint[1],
            fingerprint[2],
            fingerprint[3],
        ]);
        let Some(key) = self.keys.find(fingerprint) else {
            return Err(Refusal::UnknownKey);
        };
        let expected = key.tag(&sealed[..sealed.len() - TAG_BYTES]);
        if !constant_time_eq(&expected, tag) {
            return Err(Refusal::BadMac);
        }
        // Checked once authentic, so that the count says where real datagrams went.
        if receiver != me.to_le_bytes() {
            return Err(Refusal::OtherReceiver);
        }
        let mut seq_bytes = [0u8; 8];
        seq_bytes.copy_from_slice(seq);
        Ok((body, u64::from_le_bytes(seq_bytes)))
    }
}

/// Compares two tags in time independent of where they differ, so that timing tells a
/// forger nothing about how much of a guessed tag was right.
fn constant_time_eq(a: &[u8; TAG_BYTES], b: &[u8]) -> bool {
    if b.len() != TAG_BYTES {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // A data dependency the optimiser cannot turn into an early exit.
    std::hint::black_box(diff) == 0
}

/// What a receiver remembers of one sender: its latest life, the highest sequence number
/// seen from it, and which of the [`REPLAY_WINDOW`] numbers below that were seen (the
/// scheme of IPsec's and WireGuard's anti-replay windows). 32 bytes, no allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    incarnation: u64,
    highest: u64,
    /// Bit `i` set: sequence number `highest - i` was seen.
    seen: u128,
}

const _: () = assert!(REPLAY_WINDOW == u128::BITS as u64);

impl ReplayWindow {
    /// Accepts sequence number `seq` of the sender's life `incarnation` once: true if it
    /// is new (and remembers it), false if seen before, too old, or of an earlier life
    /// than one already seen. A later life starts the window afresh.
    pub fn accept(&mut self, incarnation: u64, seq: u64) -> bool {
        if incarnation < self.incarnation {
            return false;
        }
        if incarnation > self.incarnation || self.seen == 0 {
            *self = Self {
                incarnation,
                highest: seq,
                seen: 1,
            };
            return true;
        }
        if seq > self.highest {
            let ahead = seq - self.highest;
            self.seen = if ahead >= REPLAY_WINDOW {
                0
            } else {
                self.seen << ahead
            };
            self.seen |= 1;
            self.highest = seq;
            return true;
        }
        let behind = self.highest - seq;
        if behind >= REPLAY_WINDOW {
            return false;
        }
        let bit = 1u128 << behind;
        if self.seen & bit != 0 {
            return false;
        }
        self.seen |= bit;
        true
    }

    /// The sender's life this window follows (0: none yet).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(material: u8, cluster: u8) -> Auth {
        Auth::new(
            Keys::one(Key::from_material(&[material; KEY_BYTES])),
            ClusterId([cluster; CLUSTER_ID_BYTES]),
        )
    }

    fn sealed(a: &Auth, body: &[u8], seq: u64) -> Vec<u8> {
        let mut d = body.to_vec();
        a.seal(&mut d, 3, seq);
        d
    }

    #[test]
    fn a_sealed_datagram_opens_to_its_body_and_sequence() {
        let a = auth(1, 1);
        let d = sealed(&a, b"hello", 7);
        assert_eq!(d.len(), 5 + TRAILER_BYTES);
        assert_eq!(a.open(&d, 3), Ok((&b"hello"[..], 7)));
        assert_eq!(a.open(&sealed(&a, b"", 0), 3), Ok((&b""[..], 0)));
        assert_eq!(a.open(&d, 4), Err(Refusal::OtherReceiver));
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        let a = auth(1, 1);
        let d = sealed(&a, b"a datagram of some length", 42);
        for byte in 0..d.len() {
            for bit in 0..8 {
                let mut f = d.clone();
                f[byte] ^= 1 << bit;
                assert!(
                    a.open(&f, 3).is_err(),
                    "flip of bit {bit} of byte {byte} accepted"
                );
            }
        }
        for len in 0..d.len() {
            assert!(a.open(&d[..len], 3).is_err(), "truncated to {len} accepted");
        }
    }

    #[test]
    fn other_keys_and_clusters_are_refused_by_reason() {
        let a = auth(1, 1);
        let d = sealed(&a, b"x", 1);
        assert_eq!(auth(1, 2).open(&d, 3), Err(Refusal::OtherCluster));
        assert_eq!(auth(2, 1).open(&d, 3), Err(Refusal::UnknownKey));
        let mut forged = d.clone();
        let n = forged.len();
        forged[n - 1] ^= 1;
        assert_eq!(a.open(&forged, 3), Err(Refusal::BadMac));
        assert_eq!(a.open(&[0; 10], 3), Err(Refusal::Malformed));
    }

    #[test]
    fn two_keys_accept_both_and_seal_with_the_first() {
        let old = Key::from_material(&[1; KEY_BYTES]);
        let new = Key::from_material(&[2; KEY_BYTES]);
        let cluster = ClusterId([9; CLUSTER_ID_BYTES]);
        let only_old = Auth::new(Keys::one(old.clone()), cluster);
        let only_new = Auth::new(Keys::one(new.clone()), cluster);
        let both = Auth::new(Keys::two(new.clone(), old.clone()).unwrap(), cluster);
        assert!(both.open(&sealed(&only_old, b"a", 1), 3).is_ok());
        assert!(both.open(&sealed(&only_new, b"a", 1), 3).is_ok());
        assert!(only_new.open(&sealed(&both, b"a", 1), 3).is_ok());
        assert_eq!(
            only_old.open(&sealed(&both, b"a", 1), 3),
            Err(Refusal::UnknownKey)
        );
        assert!(Keys::two(old.clone(), old).is_none());
    }

    #[test]
    fn the_window_accepts_each_number_once() {
        let mut w = ReplayWindow::default();
        assert!(w.accept(5, 10));
        assert!(!w.accept(5, 10));
        assert!(w.accept(5, 12));
        assert!(w.accept(5, 11), "late but new");
        assert!(!w.accept(5, 11));
        assert!(w.accept(5, 12 + REPLAY_WINDOW - 1 + 100));
        assert!(!w.accept(5, 12), "fell out of the window");
        assert!(!w.accept(4, 1_000_000), "an earlier life");
        assert!(w.accept(6, 1), "a later life starts afresh");
        assert!(!w.accept(5, 1_000_001));
        assert!(!w.accept(6, 1));
        let mut w = ReplayWindow::default();
        assert!(w.accept(1, u64::MAX));
        assert!(!w.accept(1, u64::MAX));
        assert!(w.accept(1, u64::MAX - 1));
    }

    #[test]
    fn the_window_matches_a_set_of_seen_numbers() {
        // Against the obvious model: a number is accepted iff it was never accepted and is
        // within REPLAY_WINDOW of the highest accepted so far.
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..50 {
            let mut w = ReplayWindow::default();
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..2_000 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let seq = (state >> 33) % 600;
                let highest = seen.iter().next_back().copied();
                let fresh = !seen.contains(&seq)
                    && highest.is_none_or(|h| seq > h || h - seq < REPLAY_WINDOW);
                assert_eq!(w.accept(1, seq), fresh, "seq {seq}, highest {highest:?}");
                if fresh {
                    seen.insert(seq);
                }
            }
        }
    }

    #[test]
    fn cluster_ids_print_and_parse() {
        let id = ClusterId([0xab; CLUSTER_ID_BYTES]);
        assert_eq!(ClusterId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(ClusterId::from_hex("zz"), None);
        assert_eq!(ClusterId::from_hex(&"g".repeat(32)), None);
    }
}
