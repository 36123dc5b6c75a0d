//! The stable hash that places keys in partitions.
//!
//! Every process of every build and version must send a key to the same partition, so this
//! hash is written out here rather than taken from a hasher whose output may change
//! (`std`'s `DefaultHasher`, `foldhash`, which also seed per process). Changing it moves
//! every key: it is part of the data format, pinned by test vectors.

/// FNV-1a 64-bit offset basis.
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The hash of a partition key: version 1 of ferrotx's key hash.
///
/// It is FNV-1a 64 over `bytes`, followed by MurmurHash3's 64-bit finalizer (`fmix64`).
/// FNV-1a alone mixes poorly into the low and high bits (its low `k` bits depend only on
/// the low `k` bits of each byte), and keys are often small big-endian integers; the
/// finalizer spreads every input bit over the whole word.
///
/// Which bytes to hash is the caller's choice and must be the same everywhere: a row of a
/// table with a locality hint hashes its partition key (e.g. TPC-C's warehouse id, TATP's
/// subscriber id), so that related rows share a partition; any other row hashes its whole
/// key (`Key::as_bytes`). Table ids are not hashed, so rows of different tables with the
/// same partition key land together.
///
/// ```
/// use ferrotx_cluster::hash_partition_key;
/// // Pinned: this value may never change.
/// assert_eq!(hash_partition_key(b"ferrotx"), 0x3cbe_a20f_7407_9ee0);
/// ```
pub fn hash_partition_key(bytes: &[u8]) -> u64 {
    fmix64(fnv1a64(bytes))
}

/// FNV-1a, 64 bits.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET_BASIS;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// MurmurHash3's 64-bit finalizer: a bijection in which every input bit changes each
/// output bit with probability close to one half.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// The partition of `key_hash` among `partition_count` partitions: the high bits of the
/// product `key_hash * partition_count` (Lemire's multiply-shift range reduction, which
/// needs no division and spreads a uniform hash evenly). Stable like the hash itself.
pub(crate) fn reduce(key_hash: u64, partition_count: u32) -> u32 {
    debug_assert!(partition_count > 0);
    let partition = (u128::from(key_hash) * u128::from(partition_count)) >> 64;
    u32::try_from(partition).expect("the product's high word is below partition_count")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        // From the FNV reference test suite (Fowler, Noll, Vo).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn fmix64_matches_murmur3() {
        assert_eq!(fmix64(0), 0);
        assert_eq!(fmix64(1), FMIX64_OF_1);
    }

    /// `fmix64(1)`, computed independently of this code.
    const FMIX64_OF_1: u64 = 0xb456_bcfc_34c2_cb2c;

    #[test]
    fn key_hash_is_pinned() {
        // These values are part of the data format: if this test fails, keys would move
        // to other partitions. Do not update them; restore the hash.
        let vectors: [(&[u8], u64); 9] = [
            (b"", 0xefd0_1f60_ba99_2926),
            (b"a", 0x82a2_a958_a9be_ce5b),
            (b"foobar", 0x2c22_1949_22d1_672b),
            (b"ferrotx", 0x3cbe_a20f_7407_9ee0),
            (&0u64.to_be_bytes(), 0x7bd3_144f_29c0_cc9e),
            (&1u64.to_be_bytes(), 0x0d4a_d0eb_39c5_0357),
            (&42u64.to_be_bytes(), 0x641d_ede4_f097_3e8c),
            (
                &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
                0xf110_b958_da43_f7e6,
            ),
            (b"warehouse:0001", 0xa5a4_4dd7_a53f_f159),
        ];
        for (bytes, hash) in vectors {
            assert_eq!(hash_partition_key(bytes), hash, "{bytes:02x?}");
        }
    }

    #[test]
    fn reduction_is_pinned_and_in_range() {
        assert_eq!(reduce(0, 7), 0);
        assert_eq!(reduce(u64::MAX, 7), 6);
        assert_eq!(reduce(1 << 63, 10), 5);
        assert_eq!(reduce(u64::MAX, 1), 0);
        for count in [1, 2, 3, 10, 1000, u32::MAX] {
            for hash in [0, 1, 12_345, u64::MAX / 3, u64::MAX] {
                assert!(reduce(hash, count) < count);
            }
        }
    }

    #[test]
    fn small_integer_keys_spread_over_partitions() {
        // Big-endian u64 keys 0..N differ only in their last bytes; the finalizer must still
        // spread them evenly, including over a power-of-two partition count.
        for count in [8u32, 12, 64] {
            let keys = 64 * count;
            let mut hits = vec![0u32; count as usize];
            for key in 0..u64::from(keys) {
                hits[reduce(hash_partition_key(&key.to_be_bytes()), count) as usize] += 1;
            }
            let (min, max) = (hits.iter().min().unwrap(), hits.iter().max().unwrap());
            assert!(*min >= 32 && *max <= 96, "{count} partitions: {hits:?}");
        }
    }
}
