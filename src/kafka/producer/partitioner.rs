//! Partition choice of Kafka's Java producer: an explicit partition wins; a keyed record goes
//! to murmur2 of the key bytes (`org.apache.kafka.common.utils.Utils.murmur2`), made positive,
//! modulo the partition count; an unkeyed record to the topic's sticky partition, which
//! changes when the batch it fills is closed (full or sent).

use super::fast_map::FastMap;
use std::sync::Arc;

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

/// The sticky partitions of unkeyed records, one per topic.
#[derive(Debug)]
pub(crate) struct Sticky {
    /// Per topic: the sticky partition (`None` after its batch closed) and the one before.
    topics: FastMap<Arc<str>, (Option<i32>, Option<i32>)>,
    /// xorshift state for picking the next sticky partition.
    seed: u64,
}

impl Sticky {
    /// A partitioner whose random choices start from `seed` (any value; 0 is replaced).
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            topics: FastMap::default(),
            seed: seed.max(1),
        }
    }

    fn random(&mut self) -> u64 {
        let mut x = self.seed;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed = x;
        x
    }

    /// The partition (of `partitions`, at least 1) for a record of `topic` with this key.
    pub(crate) fn partition(
        &mut self,
        topic: &Arc<str>,
        key: Option<&[u8]>,
        partitions: usize,
    ) -> i32 {
        let partitions = partitions.clamp(1, i32::MAX as usize);
        if let Some(key) = key {
            return i32::try_from(partition_for_key(key, partitions)).unwrap_or(0);
        }
        let (current, previous) = self.topics.get(topic).copied().unwrap_or((None, None));
        if let Some(p) = current.filter(|p| usize::try_from(*p).is_ok_and(|p| p < partitions)) {
            return p;
        }
        let count = partitions as u64;
        let mut pick = (self.random() % count) as i32;
        if partitions > 1 && Some(pick) == previous {
            pick = ((pick as u64 + 1) % count) as i32;
        }
        self.topics
            .insert(Arc::clone(topic), (Some(pick), previous));
        pick
    }

    /// The batch of `topic`/`partition` was closed (full or handed to the sender): unkeyed
    /// records move to another partition if that was the sticky one.
    pub(crate) fn batch_closed(&mut self, topic: &str, partition: i32) {
        if let Some(entry) = self.topics.get_mut(topic)
            && entry.0 == Some(partition)
        {
            *entry = (None, Some(partition));
        }
    }
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

    #[test]
    fn explicit_keys_hash_and_unkeyed_records_stick_until_the_batch_closes() {
        let topic: Arc<str> = Arc::from("t");
        let mut sticky = Sticky::new(42);
        assert_eq!(sticky.partition(&topic, Some(b"foobar"), 4), 2);
        let first = sticky.partition(&topic, None, 4);
        for _ in 0..10 {
            assert_eq!(sticky.partition(&topic, None, 4), first);
        }
        // Another partition's batch closing changes nothing.
        sticky.batch_closed("t", (first + 1) % 4);
        assert_eq!(sticky.partition(&topic, None, 4), first);
        sticky.batch_closed("t", first);
        let second = sticky.partition(&topic, None, 4);
        assert_ne!(second, first, "a closed batch moves unkeyed records on");
        assert_eq!(sticky.partition(&topic, None, 4), second);
        // One partition: always 0.
        let single: Arc<str> = Arc::from("one");
        sticky.batch_closed("one", 0);
        assert_eq!(sticky.partition(&single, None, 1), 0);
        sticky.batch_closed("one", 0);
        assert_eq!(sticky.partition(&single, None, 1), 0);
        // Fewer partitions than the sticky one: a new pick in range.
        let p = sticky.partition(&topic, None, 1);
        assert_eq!(p, 0);
    }
}
