//! [`FastMap`]: a `HashMap` with a cheap hash for the producer's per-record lookups (a topic's
//! metadata, its partitioner state, a partition's batches), where SipHash's resistance to
//! chosen keys buys nothing: the keys are the application's own topic names and partition
//! numbers, a handful of them, and `send` hashes three or four of them per record.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed with [`WordHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// A multiply-and-rotate hash over 8-byte words (the scheme of rustc's FxHash): a few cycles
/// a word, enough to spread short keys over a small table.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WordHasher {
    hash: u64,
}

/// An odd constant with well-mixed bits (2^64 divided by the golden ratio, made odd).
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(word);
            self.add(u64::from_le_bytes(buf));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            // The length in the top byte: "a" and "a\0" differ.
            buf[7] ^= u8::try_from(rest.len()).unwrap_or(0) << 4;
            self.add(u64::from_le_bytes(buf));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn write_i32(&mut self, value: i32) {
        self.add(u64::from(value as u32));
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, Hash};
    use std::sync::Arc;

    use super::*;

    fn hash(value: impl Hash) -> u64 {
        BuildHasherDefault::<WordHasher>::default().hash_one(value)
    }

    #[test]
    fn topic_partitions_spread_over_the_table() {
        // Many topics of similar names, each with many partitions: the top bits (hashbrown's
        // control bytes) and the low bits (its buckets) both take many values.
        let mut high = HashSet::new();
        let mut low = HashSet::new();
        for t in 0..50 {
            let topic: Arc<str> = format!("orders.eu-west-{t}").into();
            for p in 0..40i32 {
                let h = hash((Arc::clone(&topic), p));
                high.insert(h >> 57);
                low.insert(h & 1023);
            }
        }
        assert!(high.len() > 100, "{} of 128 top-7-bit values", high.len());
        assert!(low.len() > 800, "{} of 1024 bucket values", low.len());
    }

    #[test]
    fn strings_that_differ_in_a_trailing_zero_or_a_word_hash_apart() {
        assert_ne!(hash("a"), hash("a\0"));
        assert_ne!(hash("abcdefgh"), hash("abcdefgh\0"));
        assert_ne!(hash("abcdefghi"), hash("abcdefgi"));
        assert_ne!(hash(("t", 1)), hash(("t", 2)));
    }

    #[test]
    fn a_fast_map_finds_what_it_holds() {
        let mut map: FastMap<(Arc<str>, i32), usize> = FastMap::default();
        for t in 0..20 {
            for p in 0..20 {
                map.insert((format!("topic-{t}").into(), p), t * 100 + p as usize);
            }
        }
        for t in 0..20 {
            for p in 0..20 {
                assert_eq!(map[&(format!("topic-{t}").into(), p)], t * 100 + p as usize);
            }
        }
    }
}
