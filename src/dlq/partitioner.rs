//! Partition choice of Kafka's Java producer for keyed records: murmur2 of the key bytes
//! (`org.apache.kafka.common.utils.Utils.murmur2`), made positive, modulo the partition count.

/// Kafka's murmur2 seed.
const SEED: u32 = 0x9747_b28c;
/// Murmur2's multiplier.
const M: u32 = 0x5bd1_e995;
/// Murmur2's shift.
const R: u32 = 24;

/// Kafka's 32-bit murmur2 hash of `data`, as the signed `int` the Java client returns.
pub(crate) fn murmur2(data: &[u8]) -> i32 {
    // Java hashes with the length as an int; keys never come near 2 GiB.
    let mut h = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java producer's default partitioner picks for a record with this key
/// among `partitions` (at least 1): `toPositive(murmur2(key)) % partitions`.
pub(crate) fn partition_for_key(key: &[u8], partitions: usize) -> usize {
    let positive = (murmur2(key) & 0x7fff_ffff) as usize;
    positive % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `UtilsTest.testMurmur2` vectors (`Utils.murmur2(s.getBytes())`).
    const JAVA: [(&[u8], i32); 6] = [
        (b"21", -973_932_308),
        (b"foobar", -790_332_482),
        (b"a-little-bit-long-string", -985_981_536),
        (b"a-little-bit-longer-string", -1_486_304_829),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        (b"abc", 479_470_107),
    ];

    #[test]
    fn murmur2_matches_the_java_client() {
        for (key, hash) in JAVA {
            assert_eq!(murmur2(key), hash, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn partition_is_the_positive_hash_modulo_the_count() {
        // -790332482 & 0x7fffffff = 1357151166; % 4 = 2, % 5 = 1.
        assert_eq!(partition_for_key(b"foobar", 4), 2);
        assert_eq!(partition_for_key(b"foobar", 5), 1);
        assert_eq!(partition_for_key(b"foobar", 1), 0);
        for (key, _) in JAVA {
            assert!(partition_for_key(key, 7) < 7);
        }
    }
}
