//! Authenticated, encrypted datagrams: AEGIS-128X2 under the cluster key on every
//! datagram, RPC and lease alike, and a replay window per sender.
//!
//! A sealed datagram is the datagram's bytes, encrypted, followed by a [`TRAILER_BYTES`]
//! trailer:
//!
//! | bytes | field |
//! |---|---|
//! | 16 | cluster id ([`ClusterId`]), 128 random bits made when the cluster first formed |
//! | 4 | fingerprint of the cluster key ([`Key::fingerprint`]) |
//! | 4 | receiver: the endpoint (RPC) or node (lease) the datagram is for, little-endian |
//! | 16 | salt: names the sender's life ([`Auth::sealer`]) |
//! | 8 | sequence number, per sender life and receiver, little-endian |
//! | 16 | the AEGIS tag over the encrypted bytes |
//!
//! The fields in the clear are not hashed again as associated data: each one already
//! chooses what the tag is checked with. The fingerprint names the cluster key, the
//! cluster id and the salt make the sender life's key from it, and the receiver and the
//! sequence number are the nonce, so changing any of them changes the key or the nonce,
//! and the tag fails.
//!
//! **Keys and nonces.** Each sender life seals under a key of its own: BLAKE3's keyed hash
//! of the cluster id and the salt under the cluster key's root makes a 128-bit key. The
//! nonce is the receiver and the sequence number, which a sender never gives twice to one
//! receiver in a life, so no (key, nonce) pair is ever used twice: AEGIS's security, like
//! AES-GCM's, rests on that. The salt is hashed from the sender's role, id and incarnation and 128
//! random bits its process drew ([`Auth::new`]), so two lives share a key with a chance
//! of 2^-128, even if a clock that went back gave a node an incarnation it had before.
//!
//! **What a receiver checks.** The tag covers the whole datagram, its receiver and its
//! sender's life, so a datagram captured on its way to one endpoint is refused by every
//! other, and everything the datagram says of its sender (the RPC packet header's source
//! endpoint and incarnation, a lease message's `from` and incarnation) is authentic once
//! the tag checks. Nothing is decoded before that. Then the sequence number goes through
//! the [`ReplayWindow`] the receiver keeps for that sender and life, so a captured
//! datagram sent again to the same receiver life is dropped, as is one of an earlier
//! sender life. A restarted receiver starts with empty windows: the sealed fields name
//! the receiver, not its life (docs/rpc.md, "Authentication").
//!
//! One shared key keeps outsiders out: whoever does not hold it can neither read, forge
//! nor alter a datagram. It does not stop a rogue member, which holds the key and can
//! claim to be any node (see docs/operations.md, "Cluster key").
//!
//! Two keys may be held at once ([`Keys`]), for rotation without downtime: datagrams are
//! sealed with the first and accepted under either, chosen by the trailer's fingerprint.
//!
//! **Why AEGIS-128X2.** AEGIS is an AEAD built from the AES round function (a CAESAR
//! final-portfolio cipher, specified by the IRTF's draft-irtf-cfrg-aegis-aead, in
//! libsodium and the Linux kernel); AEGIS-128X2 runs two AEGIS-128L states side by side
//! in 256-bit vector registers. It is used through the `aegis` crate, which compiles
//! libaegis (by an author of the draft) and picks its AES-NI, VAES or AVX-512 code at
//! run time. `cargo run --release -p ferrotx-bench --example mac_cost` compares it here:
//! sealing 64 bytes took 53 ns and 9,600 bytes 327 ns (0.035 ns a byte), where ring's
//! AES-128-GCM took 75 ns and 1,067 ns; BLAKE3's keyed hash (this module's first MAC)
//! took 1.1 ns a byte below 4 KiB. On the data path, a coalesced datagram of 160 RPCs is
//! sealed and opened once each way in every round trip of `bench rpc`: with AES-GCM it
//! ran at 0.873 of `--no-auth`, with AEGIS-128X2 at 1.012 (docs/results.md,
//! "Authentication", has the runs). The crate's own randomness (a feature
//! left off) is never used: protocol code takes randomness from its caller, and
//! `scripts/check_sans_io.sh` checks it.

use std::fmt;

use foldhash::fast::FixedState;
use hashbrown::HashMap;

use aegis::aegis128x2::Aegis128X2;

/// Bytes of key material in a key file.
pub const KEY_BYTES: usize = 32;

/// Bytes of a cluster id.
pub const CLUSTER_ID_BYTES: usize = 16;

/// Bytes of a sender life's salt.
pub const SALT_BYTES: usize = 16;

/// Bytes of a tag: 128 bits make a forgery a 2^-128 guess.
pub const TAG_BYTES: usize = 16;

/// Bytes the trailer adds to every sealed datagram.
pub const TRAILER_BYTES: usize = CLUSTER_ID_BYTES + 4 + 4 + SALT_BYTES + 8 + TAG_BYTES;

/// The trailer's fields, in the clear before the tag (bound by the key and the nonce).
const FIELDS_BYTES: usize = TRAILER_BYTES - TAG_BYTES;

/// How far behind the highest sequence number seen a datagram may arrive and still be
/// accepted (once). Senders number datagrams per receiver, so this is reordering depth
/// between one pair of endpoints: a coalesced burst of one `sendmmsg` is at most 64
/// datagrams (the transports' batch), and twice that leaves room for a network that
/// reorders. A datagram later than that is dropped as a replay: to its sender it is a loss,
/// which the RPC layer's retransmission (with a new sequence number) repairs.
pub const REPLAY_WINDOW: u64 = 128;

/// Sender lives whose keys a [`Sealer`] keeps for opening. Each is an authentic sender
/// life heard (only a datagram whose tag checked, sealed for this receiver, adds one),
/// about 40 bytes each; past this many, one is dropped for each new one.
pub const OPEN_KEYS_MAX: usize = 4_096;

/// Bytes of a sender life's key (AEGIS-128X2's key).
const LIFE_KEY_BYTES: usize = 16;

/// A sender life's key. AEGIS has no key schedule to keep: a datagram's state is made from
/// the key and its nonce.
type LifeKey = [u8; LIFE_KEY_BYTES];

/// BLAKE3 key-derivation contexts: globally unique, fixed strings (BLAKE3's rule).
const ROOT_CONTEXT: &str = "ferrotx 2026-11-27 datagram AEAD root key";
const FINGERPRINT_CONTEXT: &str = "ferrotx 2026-11-27 key fingerprint";
const SALT_CONTEXT: &str = "ferrotx 2026-11-27 sender life salt";

/// A cluster key: the root that sender lives' keys are made from (derived from a key
/// file's material), and the material's fingerprint, which names it on the wire and in
/// logs. `Debug` shows the fingerprint only.
#[derive(Clone)]
pub struct Key {
    root: [u8; 32],
    fingerprint: u32,
}

impl Key {
    /// The key made from `material` (a key file's 32 bytes).
    pub fn from_material(material: &[u8; KEY_BYTES]) -> Self {
        let root = blake3::derive_key(ROOT_CONTEXT, material);
        let print = blake3::derive_key(FINGERPRINT_CONTEXT, material);
        Self {
            root,
            fingerprint: u32::from_le_bytes([print[0], print[1], print[2], print[3]]),
        }
    }

    /// Names the key on the wire and in logs; says nothing of the key itself.
    pub fn fingerprint(&self) -> u32 {
        self.fingerprint
    }

    /// The AEGIS-128X2 key of sender life `salt` in cluster `cluster`: BLAKE3's keyed
    /// hash (a PRF) of both under the root.
    fn life_key(&self, cluster: &ClusterId, salt: &[u8; SALT_BYTES]) -> LifeKey {
        let mut hasher = blake3::Hasher::new_keyed(&self.root);
        hasher.update(&cluster.0);
        hasher.update(salt);
        let mut key = [0u8; LIFE_KEY_BYTES];
        key.copy_from_slice(&hasher.finalize().as_bytes()[..LIFE_KEY_BYTES]);
        key
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

/// Who seals: the sender life a [`Sealer`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    /// An RPC endpoint's life.
    Rpc {
        /// The endpoint's id.
        endpoint: u32,
        /// Its incarnation.
        incarnation: u64,
    },
    /// A node's lease socket (membership), or a tool speaking to lease sockets.
    Lease {
        /// The node's id.
        node: u16,
        /// Its incarnation.
        incarnation: u64,
    },
}

/// What a node holds to seal and open datagrams: the keys, the cluster id, and 128 random
/// bits of this process, which make every sender life's salt its own. Cheap to clone and
/// shared by a process's endpoints; each endpoint life seals through its own [`Sealer`].
#[derive(Clone, Debug)]
pub struct Auth {
    keys: Keys,
    cluster: ClusterId,
    random: [u8; SALT_BYTES],
}

impl Auth {
    /// Seals and opens with `keys` for cluster `cluster`. `random` is drawn afresh by
    /// every process (from the OS; protocol code takes it from its caller, and the
    /// simulator from its seed): the salts of the process's senders are made from it.
    pub fn new(keys: Keys, cluster: ClusterId, random: [u8; SALT_BYTES]) -> Self {
        Self {
            keys,
            cluster,
            random,
        }
    }

    /// The keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The cluster id.
    pub fn cluster(&self) -> ClusterId {
        self.cluster
    }

    /// The sealer of sender life `sender`, whose salt is hashed from `sender` and this
    /// process's random bits. Derives a key (about a microsecond): once per life and key
    /// rotation.
    pub fn sealer(&self, sender: Sender) -> Sealer {
        let mut hasher = blake3::Hasher::new_derive_key(SALT_CONTEXT);
        hasher.update(&self.random);
        match sender {
            Sender::Rpc {
                endpoint,
                incarnation,
            } => {
                hasher.update(&[1]);
                hasher.update(&endpoint.to_le_bytes());
                hasher.update(&incarnation.to_le_bytes());
            }
            Sender::Lease { node, incarnation } => {
                hasher.update(&[2]);
                hasher.update(&node.to_le_bytes());
                hasher.update(&incarnation.to_le_bytes());
            }
        }
        let mut salt = [0u8; SALT_BYTES];
        salt.copy_from_slice(&hasher.finalize().as_bytes()[..SALT_BYTES]);
        Sealer {
            send: self.keys.send.life_key(&self.cluster, &salt),
            salt,
            open: HashMap::with_hasher(FixedState::with_seed(0)),
            auth: self.clone(),
        }
    }
}

/// One sender life's sealing and opening: it seals under its own life's key, and keeps
/// the keys of the sender lives it has heard, to open their datagrams. Not `Clone`: two
/// endpoints sealing through one `Sealer` could use one nonce twice.
pub struct Sealer {
    auth: Auth,
    salt: [u8; SALT_BYTES],
    send: LifeKey,
    /// By salt: the fingerprint of the cluster key and the sender life's key.
    open: HashMap<u128, (u32, LifeKey), FixedState>,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("auth", &self.auth)
            .field("lives_heard", &self.open.len())
            .finish_non_exhaustive()
    }
}

/// The nonce of the datagram with sequence number `seq` to receiver `to`: unique per key,
/// because a sender life never gives one sequence number twice to a receiver.
fn nonce(to: &[u8], seq: &[u8]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..4].copy_from_slice(to);
    bytes[4..12].copy_from_slice(seq);
    bytes
}

impl Sealer {
    /// What this sealer was made from.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// Encrypts the datagram in `datagram` and appends the trailer, for receiver `to` (an
    /// RPC endpoint's id, a node id for lease datagrams), with sequence number `seq`, which
    /// the caller never gives twice to one receiver (the nonce is made of both).
    /// Allocates nothing if `datagram` has room for [`TRAILER_BYTES`] more.
    pub fn seal(&self, datagram: &mut Vec<u8>, to: u32, seq: u64) {
        let state =
            Aegis128X2::<TAG_BYTES>::new(&self.send, &nonce(&to.to_le_bytes(), &seq.to_le_bytes()));
        let tag = state.encrypt_in_place(datagram, &[]);
        datagram.extend_from_slice(&self.auth.cluster.0);
        datagram.extend_from_slice(&self.auth.keys.send.fingerprint.to_le_bytes());
        datagram.extend_from_slice(&to.to_le_bytes());
        datagram.extend_from_slice(&self.salt);
        datagram.extend_from_slice(&seq.to_le_bytes());
        datagram.extend_from_slice(&tag);
    }

    /// Checks and decrypts `sealed` in place as receiver `me`: the datagram's bytes and its
    /// sequence number, or why it is refused (its bytes are then garbage). The sequence
    /// number still has to pass the sender's [`ReplayWindow`], which the caller finds from
    /// the (now authentic) datagram.
    pub fn open<'a>(&mut self, sealed: &'a mut [u8], me: u32) -> Result<(&'a [u8], u64), Refusal> {
        let Some(body_len) = sealed.len().checked_sub(TRAILER_BYTES) else {
            return Err(Refusal::Malformed);
        };
        let (body, trailer) = sealed.split_at_mut(body_len);
        let (fields, tag) = trailer.split_at(FIELDS_BYTES);
        let (cluster, rest) = fields.split_at(CLUSTER_ID_BYTES);
        let (fingerprint, rest) = rest.split_at(4);
        let (receiver, rest) = rest.split_at(4);
        let (salt, seq) = rest.split_at(SALT_BYTES);
        if cluster != self.auth.cluster.0 {
            return Err(Refusal::OtherCluster);
        }
        let fingerprint = u32::from_le_bytes([
            fingerprint[0],
            fingerprint[1],
            fingerprint[2],
            fingerprint[3],
        ]);
        let Some(key) = self.auth.keys.find(fingerprint) else {
            return Err(Refusal::UnknownKey);
        };
        let mut salt_bytes = [0u8; SALT_BYTES];
        salt_bytes.copy_from_slice(salt);
        let salt_id = u128::from_le_bytes(salt_bytes);
        let mut tag_bytes = [0u8; TAG_BYTES];
        tag_bytes.copy_from_slice(tag);
        // A sender life heard before opens with its kept key; another's key is derived,
        // and kept only once a datagram of that life proves authentic.
        let mut derived = None;
        let life_key = match self.open.get(&salt_id) {
            Some((print, kept)) if *print == fingerprint => kept,
            _ => derived.insert(key.life_key(&self.auth.cluster, &salt_bytes)),
        };
        let state = Aegis128X2::<TAG_BYTES>::new(life_key, &nonce(receiver, seq));
        if state.decrypt_in_place(body, &tag_bytes, &[]).is_err() {
            return Err(Refusal::BadMac);
        }
        // Checked once authentic, so that the count says where real datagrams went. A
        // datagram for another receiver leaves no key behind: replays of datagrams captured
        // on their way elsewhere cannot churn the keys kept.
        if receiver != me.to_le_bytes() {
            return Err(Refusal::OtherReceiver);
        }
        if let Some(k) = derived {
            if self.open.len() >= OPEN_KEYS_MAX {
                // One out, not all: the other live senders keep their keys.
                if let Some(&old) = self.open.keys().next() {
                    self.open.remove(&old);
                }
            }
            self.open.insert(salt_id, (fingerprint, k));
        }
        let mut seq_bytes = [0u8; 8];
        seq_bytes.copy_from_slice(seq);
        Ok((body, u64::from_le_bytes(seq_bytes)))
    }
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
            [material ^ cluster; SALT_BYTES],
        )
    }

    fn life(a: &Auth, endpoint: u32) -> Sealer {
        a.sealer(Sender::Rpc {
            endpoint,
            incarnation: 1,
        })
    }

    fn sealed(a: &Auth, body: &[u8], seq: u64) -> Vec<u8> {
        let mut d = body.to_vec();
        life(a, 1).seal(&mut d, 3, seq);
        d
    }

    /// Opens a copy of `d` (opening decrypts in place) with a receiving life of `a`.
    fn open(a: &Auth, d: &[u8], me: u32) -> Result<(Vec<u8>, u64), Refusal> {
        let mut copy = d.to_vec();
        life(a, me)
            .open(&mut copy, me)
            .map(|(body, seq)| (body.to_vec(), seq))
    }

    #[test]
    fn a_sealed_datagram_opens_to_its_body_and_sequence() {
        let a = auth(1, 1);
        let d = sealed(&a, b"hello", 7);
        assert_eq!(d.len(), 5 + TRAILER_BYTES);
        assert_eq!(open(&a, &d, 3), Ok((b"hello".to_vec(), 7)));
        assert_eq!(open(&a, &sealed(&a, b"", 0), 3), Ok((Vec::new(), 0)));
        assert_eq!(open(&a, &d, 4), Err(Refusal::OtherReceiver));
    }

    #[test]
    fn the_bytes_travel_encrypted() {
        let a = auth(1, 1);
        let body = b"a secret worth keeping, a secret worth keeping";
        let d = sealed(&a, body, 7);
        assert!(!d.windows(6).any(|w| w == b"secret"), "{d:?}");
        // The same bytes sealed twice (two sequence numbers) differ.
        assert_ne!(d, sealed(&a, body, 8));
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
                    open(&a, &f, 3).is_err(),
                    "flip of bit {bit} of byte {byte} accepted"
                );
            }
        }
        for len in 0..d.len() {
            assert!(
                open(&a, &d[..len], 3).is_err(),
                "truncated to {len} accepted"
            );
        }
    }

    #[test]
    fn other_keys_and_clusters_are_refused_by_reason() {
        let a = auth(1, 1);
        let d = sealed(&a, b"x", 1);
        assert_eq!(open(&auth(1, 2), &d, 3), Err(Refusal::OtherCluster));
        assert_eq!(open(&auth(2, 1), &d, 3), Err(Refusal::UnknownKey));
        let mut forged = d.clone();
        let n = forged.len();
        forged[n - 1] ^= 1;
        assert_eq!(open(&a, &forged, 3), Err(Refusal::BadMac));
        assert_eq!(open(&a, &[0; 10], 3), Err(Refusal::Malformed));
    }

    #[test]
    fn a_receiver_keeps_the_keys_of_authentic_lives_only() {
        let a = auth(1, 1);
        let mut receiver = life(&a, 3);
        let sender = life(&a, 1);
        for seq in 1..=3 {
            let mut d = b"x".to_vec();
            sender.seal(&mut d, 3, seq);
            assert!(receiver.open(&mut d, 3).is_ok());
        }
        assert_eq!(receiver.open.len(), 1, "one life heard");
        // A forgery naming a new salt derives a key, fails, and is not kept.
        let mut d = b"x".to_vec();
        sender.seal(&mut d, 3, 9);
        let salt_at = d.len() - TAG_BYTES - 8 - SALT_BYTES;
        d[salt_at] ^= 1;
        assert_eq!(receiver.open(&mut d, 3), Err(Refusal::BadMac));
        assert_eq!(receiver.open.len(), 1);
        // An authentic datagram of another life, sealed for another receiver, is refused
        // and leaves no key behind either.
        let mut other = b"x".to_vec();
        life(&a, 2).seal(&mut other, 4, 1);
        assert_eq!(receiver.open(&mut other, 3), Err(Refusal::OtherReceiver));
        assert_eq!(receiver.open.len(), 1);
    }

    #[test]
    fn every_sender_life_seals_under_a_key_of_its_own() {
        // Same process, same sequence number, same receiver, same bytes: another endpoint,
        // another incarnation or another process (random bits) gives other bytes, because
        // each seals under its own key; a nonce repeated across lives is harmless.
        let a = auth(1, 1);
        let seal = |auth: &Auth, sender: Sender| {
            let mut d = b"same bytes".to_vec();
            auth.sealer(sender).seal(&mut d, 3, 5);
            d
        };
        let base = Sender::Rpc {
            endpoint: 1,
            incarnation: 1,
        };
        let first = seal(&a, base);
        assert_eq!(first, seal(&a, base), "deterministic for one life");
        let others = [
            seal(
                &a,
                Sender::Rpc {
                    endpoint: 2,
                    incarnation: 1,
                },
            ),
            seal(
                &a,
                Sender::Rpc {
                    endpoint: 1,
                    incarnation: 2,
                },
            ),
            seal(
                &a,
                Sender::Lease {
                    node: 1,
                    incarnation: 1,
                },
            ),
            seal(
                &Auth::new(a.keys.clone(), a.cluster, [0xee; SALT_BYTES]),
                base,
            ),
        ];
        for other in others {
            assert_ne!(first[..10], other[..10]);
            assert_ne!(
                first[first.len() - TAG_BYTES..],
                other[other.len() - TAG_BYTES..]
            );
            assert_eq!(
                open(&a, &other, 3).map(|(b, _)| b),
                Ok(b"same bytes".to_vec())
            );
        }
    }

    #[test]
    fn two_keys_accept_both_and_seal_with_the_first() {
        let old = Key::from_material(&[1; KEY_BYTES]);
        let new = Key::from_material(&[2; KEY_BYTES]);
        let cluster = ClusterId([9; CLUSTER_ID_BYTES]);
        let only_old = Auth::new(Keys::one(old.clone()), cluster, [1; SALT_BYTES]);
        let only_new = Auth::new(Keys::one(new.clone()), cluster, [2; SALT_BYTES]);
        let both = Auth::new(
            Keys::two(new.clone(), old.clone()).unwrap(),
            cluster,
            [3; SALT_BYTES],
        );
        assert!(open(&both, &sealed(&only_old, b"a", 1), 3).is_ok());
        assert!(open(&both, &sealed(&only_new, b"a", 1), 3).is_ok());
        assert!(open(&only_new, &sealed(&both, b"a", 1), 3).is_ok());
        assert_eq!(
            open(&only_old, &sealed(&both, b"a", 1), 3),
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
