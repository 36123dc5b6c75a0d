//! The one-byte answers of the protocol's requests: one enum, its encoder and its total
//! decoder side by side (the requests are in the registry, `ferrotx_wire::RequestType`).
//!
//! Most requests are answered by one byte: LOCK, VALIDATE, COMMIT-BACKUP, COMMIT-PRIMARY,
//! ABORT, TRUNCATE, RECLAIM, and recovery's NEED-RECOVERY, REPLICATE-TX-STATE,
//! RECOVERY-VOTE, COMMIT-RECOVERY, ABORT-RECOVERY and TRUNCATE-RECOVERY. A granted LOCK
//! is followed by the versions it locked at. Requests with richer answers (READ, SCAN,
//! COUNT, FETCH, RECLAIM-CHECK, REQUEST-VOTE, SHIP) have their own status enums next to
//! their messages. The values are the wire format: never renumber one.

use crate::messages::DecodeError;

/// A participant's answer to a request (its first byte, for a granted LOCK).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum Answer {
    /// Refused: not locked (FaRM 4 step 1 fails), not valid, not applied.
    Refused = 0,
    /// Granted: locked (a LOCK's versions follow), valid, logged, installed, done.
    Granted = 1,
    /// A commit message (LOCK, COMMIT-BACKUP, COMMIT-PRIMARY) of a transaction of an
    /// older view than the participant's: its outcome is recovery's, never "aborted".
    Undecided = 2,
    /// LOCK only: a write would grow the store of a partition whose primary (or a copy's
    /// node) is past its memory limit; nothing was locked.
    OutOfMemory = 3,
    /// Recovery only: the primary has not gathered its backups' records yet (an answer
    /// to NEED-RECOVERY, or a byte of REQUEST-VOTE's answer in place of a vote): ask
    /// again.
    NotReady = 0xff,
}

impl Answer {
    /// Every answer.
    pub const ALL: [Answer; 5] = [
        Self::Refused,
        Self::Granted,
        Self::Undecided,
        Self::OutOfMemory,
        Self::NotReady,
    ];

    /// `Granted` if `granted`, else `Refused`.
    pub fn granted_if(granted: bool) -> Self {
        if granted {
            Self::Granted
        } else {
            Self::Refused
        }
    }

    /// Appends the answer's byte.
    pub fn encode(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }

    /// The answer of one byte; an unknown byte is [`DecodeError::Invalid`].
    pub fn from_u8(byte: u8) -> Result<Self, DecodeError> {
        match byte {
            0 => Ok(Self::Refused),
            1 => Ok(Self::Granted),
            2 => Ok(Self::Undecided),
            3 => Ok(Self::OutOfMemory),
            0xff => Ok(Self::NotReady),
            _ => Err(DecodeError::Invalid),
        }
    }

    /// Decodes an answer that is exactly one byte.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        match bytes {
            [] => Err(DecodeError::Truncated),
            [byte] => Self::from_u8(*byte),
            _ => Err(DecodeError::TrailingBytes),
        }
    }

    /// Decodes the answer at the start of `bytes`, and the bytes after it (a granted
    /// LOCK's versions).
    pub fn decode_prefix(bytes: &[u8]) -> Result<(Self, &[u8]), DecodeError> {
        let (&byte, rest) = bytes.split_first().ok_or(DecodeError::Truncated)?;
        Ok((Self::from_u8(byte)?, rest))
    }

    /// Whether `bytes` is exactly the answer [`Answer::Granted`]: the yes of most
    /// phases.
    pub fn is_granted(bytes: &[u8]) -> bool {
        Self::decode(bytes) == Ok(Self::Granted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_values_are_the_wire_format() {
        let bytes: Vec<u8> = Answer::ALL.iter().map(|&a| a as u8).collect();
        assert_eq!(bytes, [0, 1, 2, 3, 0xff]);
    }

    #[test]
    fn every_answer_round_trips_and_every_other_byte_is_refused() {
        for answer in Answer::ALL {
            let mut out = Vec::new();
            answer.encode(&mut out);
            assert_eq!(Answer::decode(&out), Ok(answer));
            out.extend_from_slice(b"versions");
            assert_eq!(Answer::decode_prefix(&out), Ok((answer, &b"versions"[..])));
            assert_eq!(Answer::decode(&out), Err(DecodeError::TrailingBytes));
        }
        for byte in 0..=u8::MAX {
            let known = Answer::ALL.iter().any(|&a| a as u8 == byte);
            assert_eq!(Answer::from_u8(byte).is_ok(), known, "byte {byte}");
        }
        assert_eq!(Answer::decode(&[]), Err(DecodeError::Truncated));
        assert_eq!(Answer::decode_prefix(&[]), Err(DecodeError::Truncated));
        assert!(Answer::is_granted(&[1]));
        assert!(!Answer::is_granted(&[1, 0]));
        assert!(!Answer::is_granted(&[0]));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let whole = Answer::decode(&bytes);
            if let Ok((answer, rest)) = Answer::decode_prefix(&bytes) {
                prop_assert_eq!(whole.is_ok(), rest.is_empty());
                prop_assert_eq!(answer as u8, bytes[0]);
            } else {
                prop_assert!(whole.is_err());
            }
        }
    }
}
