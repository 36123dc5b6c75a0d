//! Membership messages and their encoding: one message per datagram, on each node's lease
//! socket (FaRM 5.1 gives leases their own socket and thread, so that a loaded data path
//! cannot delay them).
//!
//! Layout, little-endian: magic `0xF7`, version 3 (1 had no fills, 2 no memory figures in lease
//! requests and probe replies), kind (u8), then the envelope
//! (`from` node u16, `incarnation` u64, `view` id u64, `seq` u64), then the body of the
//! kind. Decoding checks every length and never panics.

use ferrotx_cluster::{View, ViewMember};

const MAGIC: u8 = 0xF7;
const VERSION: u8 = 3;
/// Bytes before a body.
#[cfg(test)]
const HEADER_BYTES: usize = 3 + 2 + 8 + 8 + 8;
/// Largest datagram a membership message may take (a view of thousands of partitions).
pub const MESSAGE_BYTES_MAX: usize = 65_000;

/// What a message says.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Body {
    /// Member to CM: renew my lease (sent every fifth of the lease). Carries the member's
    /// memory figures, which the CM's placement of new copies reads.
    LeaseRequest {
        /// Bytes the member uses (see `ferrotx_store::Memory::used`).
        used: u64,
        /// Its memory limit in bytes; 0: none.
        limit: u64,
    },
    /// CM to member: your lease, timed from when you sent request `seq`, lasts
    /// `duration_ns` (0 while the CM holds no lease itself); and please grant me mine.
    LeaseGrant {
        /// Length of the lease granted.
        duration_ns: u64,
        /// The members past their memory limit by the figures the CM holds: every
        /// partition with a copy on one refuses writes that would grow memory.
        over: Vec<u16>,
    },
    /// Member to CM: the CM's lease at this member, timed from when the CM sent its grant
    /// `seq`.
    LeaseAck,
    /// A node reconfiguring to members: are you alive?
    Probe,
    /// Answer to a probe, in the prober's view id. Carries the answering node's memory
    /// figures as a lease request does: a backup CM taking over has had no lease request
    /// from the members, and places copies in the view it makes from the answers.
    ProbeReply {
        /// Bytes the node uses.
        used: u64,
        /// Its memory limit in bytes; 0: none.
        limit: u64,
    },
    /// The CM to every member of a new view (FaRM's NEW-CONFIG).
    NewConfig(View),
    /// A member has switched every thread to view `view` (FaRM's NEW-CONFIG-ACK). Also
    /// grants the CM a lease, timed from its NEW-CONFIG. Carries how long the lease this
    /// member last granted to the previous CM may still run (its clock), so that a new
    /// CM can wait it out.
    NewConfigAck {
        /// Remaining length of the lease granted to the previous CM, if it was another.
        old_cm_lease_ns: u64,
    },
    /// The CM: view `view` is committed; serve (FaRM's NEW-CONFIG-COMMIT). Also a lease
    /// grant, timed from the member's NEW-CONFIG-ACK.
    NewConfigCommit {
        /// Length of the lease granted.
        duration_ns: u64,
    },
    /// A process that is not a member (a new node, or a new life of one) asks the CM to
    /// admit it.
    Join,
    /// A member tells a node it does not know (a non-member, or a member of an older
    /// view) which view it is in, so it reads the coordination service.
    Stale,
    /// Member to CM: these partitions, which the sender's view has it fill (a new
    /// backup), are copied whole; a later view may count them as copies (FaRM 5.4). Sent
    /// again every renewal until a view no longer has them filling.
    Filled {
        /// The partitions.
        partitions: Vec<u32>,
    },
}

/// A message with its envelope.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Message {
    /// The sender's node id.
    pub from: u16,
    /// The sender's life.
    pub incarnation: u64,
    /// The sender's view id (0 before it has one).
    pub view: u64,
    /// Pairs requests with answers (lease requests and grants, probes and replies).
    pub seq: u64,
    /// What it says.
    pub body: Body,
}

/// Why bytes are not a message.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum DecodeError {
    /// Too short, or a length runs past the end.
    #[error("truncated")]
    Truncated,
    /// Not a membership message, or another version.
    #[error("bad magic or version")]
    BadMagic,
    /// Unknown kind.
    #[error("unknown kind {0}")]
    UnknownKind(u8),
    /// Bytes left over after the body.
    #[error("trailing bytes")]
    Trailing,
}

impl Message {
    /// The sender as a member.
    pub fn sender(&self) -> ViewMember {
        ViewMember {
            node: self.from,
            incarnation: self.incarnation,
        }
    }

    /// Appends the encoded message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let kind: u8 = match self.body {
            Body::LeaseRequest { .. } => 1,
            Body::LeaseGrant { .. } => 2,
            Body::LeaseAck => 3,
            Body::Probe => 4,
            Body::ProbeReply { .. } => 5,
            Body::NewConfig(_) => 6,
            Body::NewConfigAck { .. } => 7,
            Body::NewConfigCommit { .. } => 8,
            Body::Join => 9,
            Body::Stale => 10,
            Body::Filled { .. } => 11,
        };
        out.extend_from_slice(&[MAGIC, VERSION, kind]);
        out.extend_from_slice(&self.from.to_le_bytes());
        out.extend_from_slice(&self.incarnation.to_le_bytes());
        out.extend_from_slice(&self.view.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        match &self.body {
            Body::LeaseGrant { duration_ns, over } => {
                out.extend_from_slice(&duration_ns.to_le_bytes());
                out.extend_from_slice(&(over.len() as u16).to_le_bytes());
                for node in over {
                    out.extend_from_slice(&node.to_le_bytes());
                }
            }
            Body::NewConfigCommit { duration_ns } => {
                out.extend_from_slice(&duration_ns.to_le_bytes())
            }
            Body::NewConfigAck { old_cm_lease_ns } => {
                out.extend_from_slice(&old_cm_lease_ns.to_le_bytes())
            }
            Body::LeaseRequest { used, limit } | Body::ProbeReply { used, limit } => {
                out.extend_from_slice(&used.to_le_bytes());
                out.extend_from_slice(&limit.to_le_bytes());
            }
            Body::NewConfig(view) => encode_view(view, out),
            Body::Filled { partitions } => {
                out.extend_from_slice(&(partitions.len() as u32).to_le_bytes());
                for p in partitions {
                    out.extend_from_slice(&p.to_le_bytes());
                }
            }
            _ => {}
        }
    }

    /// The message in `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let head = r.take(3)?;
        if head[0] != MAGIC || head[1] != VERSION {
            return Err(DecodeError::BadMagic);
        }
        let kind = head[2];
        let from = r.u16()?;
        let incarnation = r.u64()?;
        let view = r.u64()?;
        let seq = r.u64()?;
        let body = match kind {
            1 => Body::LeaseRequest {
                used: r.u64()?,
                limit: r.u64()?,
            },
            2 => {
                let duration_ns = r.u64()?;
                let n = usize::from(r.u16()?);
                if n > r.left() / 2 {
                    return Err(DecodeError::Truncated);
                }
                let mut over = Vec::with_capacity(n);
                for _ in 0..n {
                    over.push(r.u16()?);
                }
                Body::LeaseGrant { duration_ns, over }
            }
            3 => Body::LeaseAck,
            4 => Body::Probe,
            5 => Body::ProbeReply {
                used: r.u64()?,
                limit: r.u64()?,
            },
            6 => Body::NewConfig(decode_view(&mut r)?),
            7 => Body::NewConfigAck {
                old_cm_lease_ns: r.u64()?,
            },
            8 => Body::NewConfigCommit {
                duration_ns: r.u64()?,
            },
            9 => Body::Join,
            10 => Body::Stale,
            11 => {
                let n = r.u32()? as usize;
                if n > r.left() / 4 {
                    return Err(DecodeError::Truncated);
                }
                let mut partitions = Vec::with_capacity(n);
                for _ in 0..n {
                    partitions.push(r.u32()?);
                }
                Body::Filled { partitions }
            }
            k => return Err(DecodeError::UnknownKind(k)),
        };
        if r.at != bytes.len() {
            return Err(DecodeError::Trailing);
        }
        Ok(Self {
            from,
            incarnation,
            view,
            seq,
            body,
        })
    }
}

fn encode_view(view: &View, out: &mut Vec<u8>) {
    out.extend_from_slice(&view.id.to_le_bytes());
    out.extend_from_slice(&view.cm.to_le_bytes());
    out.extend_from_slice(&(view.members.len() as u32).to_le_bytes());
    for m in &view.members {
        out.extend_from_slice(&m.node.to_le_bytes());
        out.extend_from_slice(&m.incarnation.to_le_bytes());
    }
    encode_map(&view.copies, out);
    encode_map(&view.filling, out);
    out.extend_from_slice(&(view.suspended.len() as u32).to_le_bytes());
    for m in &view.suspended {
        out.extend_from_slice(&m.node.to_le_bytes());
        out.extend_from_slice(&m.incarnation.to_le_bytes());
    }
    encode_map(&view.suspended_copies, out);
}

/// A partition map: its length, then each partition's node count and nodes.
fn encode_map(map: &[Vec<u16>], out: &mut Vec<u8>) {
    out.extend_from_slice(&(map.len() as u32).to_le_bytes());
    for nodes in map {
        out.push(nodes.len() as u8);
        for n in nodes {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

fn decode_map(r: &mut Reader<'_>) -> Result<Vec<Vec<u16>>, DecodeError> {
    let partitions = r.u32()? as usize;
    if partitions > r.left() {
        return Err(DecodeError::Truncated);
    }
    let mut map = Vec::with_capacity(partitions);
    for _ in 0..partitions {
        let n = usize::from(r.take(1)?[0]);
        let mut c = Vec::with_capacity(n);
        for _ in 0..n {
            c.push(r.u16()?);
        }
        map.push(c);
    }
    Ok(map)
}

fn decode_view(r: &mut Reader<'_>) -> Result<View, DecodeError> {
    let id = r.u64()?;
    let cm = r.u16()?;
    let members = decode_lives(r)?;
    let copies = decode_map(r)?;
    let filling = decode_map(r)?;
    let suspended = decode_lives(r)?;
    let suspended_copies = decode_map(r)?;
    Ok(View {
        id,
        cm,
        members,
        copies,
        filling,
        suspended,
        suspended_copies,
    })
}

/// A list of lives: its length, then each one's node and incarnation.
fn decode_lives(r: &mut Reader<'_>) -> Result<Vec<ViewMember>, DecodeError> {
    let count = r.u32()? as usize;
    // Each life takes 10 bytes: a count larger than what is left is a lie.
    if count > r.left() / 10 {
        return Err(DecodeError::Truncated);
    }
    let mut list = Vec::with_capacity(count);
    for _ in 0..count {
        list.push(ViewMember {
            node: r.u16()?,
            incarnation: r.u64()?,
        });
    }
    Ok(list)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.left() < n {
            return Err(DecodeError::Truncated);
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_view() -> View {
        View {
            id: 7,
            cm: 1,
            members: vec![
                ViewMember {
                    node: 1,
                    incarnation: 5,
                },
                ViewMember {
                    node: 2,
                    incarnation: 9,
                },
            ],
            copies: vec![vec![1, 2], vec![2], vec![]],
            filling: vec![vec![], vec![1], vec![]],
            suspended: vec![ViewMember {
                node: 3,
                incarnation: 4,
            }],
            suspended_copies: vec![vec![], vec![], vec![3]],
        }
    }

    fn bodies() -> Vec<Body> {
        vec![
            Body::LeaseRequest { used: 0, limit: 0 },
            Body::LeaseRequest {
                used: 0x0102_0304_0506_0708,
                limit: u64::MAX,
            },
            Body::LeaseGrant {
                duration_ns: 123,
                over: vec![2, 7],
            },
            Body::LeaseGrant {
                duration_ns: 0,
                over: Vec::new(),
            },
            Body::LeaseAck,
            Body::Probe,
            Body::ProbeReply { used: 0, limit: 0 },
            Body::ProbeReply {
                used: 77,
                limit: 1 << 40,
            },
            Body::NewConfig(sample_view()),
            Body::NewConfigAck { old_cm_lease_ns: 4 },
            Body::NewConfigCommit { duration_ns: 5 },
            Body::Join,
            Body::Stale,
            Body::Filled {
                partitions: vec![0, 7],
            },
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        for body in bodies() {
            let m = Message {
                from: 3,
                incarnation: 11,
                view: 6,
                seq: 99,
                body,
            };
            let mut out = Vec::new();
            m.encode(&mut out);
            assert!(out.len() >= HEADER_BYTES);
            assert_eq!(Message::decode(&out).unwrap(), m);
            // Every prefix is refused, and so is a trailing byte.
            for n in 0..out.len() {
                assert!(Message::decode(&out[..n]).is_err());
            }
            out.push(0);
            assert_eq!(Message::decode(&out), Err(DecodeError::Trailing));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            kind in 0u8..14,
        ) {
            let _ = Message::decode(&bytes);
            let mut b = bytes.clone();
            if b.len() >= 3 {
                b[0] = MAGIC;
                b[1] = VERSION;
                b[2] = 6;
            }
            let _ = Message::decode(&b);
            // Every kind's body over garbage (lease requests and probe replies with
            // figures among them).
            if b.len() >= 3 {
                b[2] = kind;
            }
            if let Ok(m) = Message::decode(&b) {
                let mut out = Vec::new();
                m.encode(&mut out);
                prop_assert_eq!(out, b);
            }
        }

        #[test]
        fn figures_round_trip(used in any::<u64>(), limit in any::<u64>(), seq in any::<u64>()) {
            for body in [Body::LeaseRequest { used, limit }, Body::ProbeReply { used, limit }] {
                let m = Message { from: 2, incarnation: 3, view: 4, seq, body };
                let mut out = Vec::new();
                m.encode(&mut out);
                prop_assert_eq!(out.len(), HEADER_BYTES + 16);
                prop_assert_eq!(Message::decode(&out).unwrap(), m);
            }
        }
    }

    #[test]
    fn an_earlier_version_is_refused() {
        // A version-2 lease request: the envelope and no figures.
        let mut old = vec![MAGIC, 2, 1];
        old.extend_from_slice(&[0; HEADER_BYTES - 3]);
        assert_eq!(Message::decode(&old), Err(DecodeError::BadMagic));
        // The same bytes as version 3 lack the figures.
        old[1] = VERSION;
        assert_eq!(Message::decode(&old), Err(DecodeError::Truncated));
    }
}
