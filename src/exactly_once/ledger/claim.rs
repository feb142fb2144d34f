//! The claim record: which offsets of one source partition a transaction finished.
//!
//! Value layout (big-endian), version 1:
//!
//! ```text
//! magic "KSSC" | version u8 = 1 | topic: u16 length + UTF-8 | partition i32
//! | ranges: u32 count, then (first i64, last i64) each | transactional id: u16 length + UTF-8
//! ```
//!
//! The key is `<topic>/<partition>` in UTF-8, for people reading the ledger with a console
//! consumer; the reader trusts the value only.

use bytes::{BufMut, Bytes, BytesMut};

const MAGIC: &[u8; 4] = b"KSSC";
const VERSION: u8 = 1;

/// A claim of finished offsets of one source partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    /// Inclusive ranges, ascending and disjoint.
    pub(crate) ranges: Vec<(i64, i64)>,
    pub(crate) transactional_id: String,
}

/// Why a ledger value is not a claim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a claim record of this crate: {0}")]
pub(crate) struct BadClaim(&'static str);

impl Claim {
    /// The ranges of `offsets` (any order, duplicates allowed).
    pub(crate) fn ranges_of(offsets: &mut [i64]) -> Vec<(i64, i64)> {
        offsets.sort_unstable();
        let mut ranges: Vec<(i64, i64)> = Vec::new();
        for &o in offsets.iter() {
            match ranges.last_mut() {
                Some((_, last)) if *last == o || last.checked_add(1) == Some(o) => *last = o,
                _ => ranges.push((o, o)),
            }
        }
        ranges
    }

    pub(crate) fn key(&self) -> Bytes {
        Bytes::from(format!("{}/{}", self.topic, self.partition))
    }

    pub(crate) fn encode(&self) -> Result<Bytes, BadClaim> {
        let topic = u16::try_from(self.topic.len()).map_err(|_| BadClaim("topic name too long"))?;
        let id = u16::try_from(self.transactional_id.len())
            .map_err(|_| BadClaim("transactional id too long"))?;
        let count = u32::try_from(self.ranges.len()).map_err(|_| BadClaim("too many ranges"))?;
        let mut out = BytesMut::with_capacity(
            4 + 1
                + 2
                + self.topic.len()
                + 4
                + 4
                + 16 * self.ranges.len()
                + 2
                + self.transactional_id.len(),
        );
        out.put_slice(MAGIC);
        out.put_u8(VERSION);
        out.put_u16(topic);
        out.put_slice(self.topic.as_bytes());
        out.put_i32(self.partition);
        out.put_u32(count);
        for &(first, last) in &self.ranges {
            out.put_i64(first);
            out.put_i64(last);
        }
        out.put_u16(id);
        out.put_slice(self.transactional_id.as_bytes());
        Ok(out.freeze())
    }

    /// Decodes a value; every length is checked against the bytes present, so a hostile
    /// value allocates no more than its own size.
    pub(crate) fn decode(value: &[u8]) -> Result<Self, BadClaim> {
        let mut r = Reader(value);
        if r.take(4)? != MAGIC {
            return Err(BadClaim("wrong magic"));
        }
        let version = r.take(1)?[0];
        if version != VERSION {
            return Err(BadClaim("unknown version (written by a newer release?)"));
        }
        let topic = r.string()?;
        let partition = r.i32()?;
        let count = r.u32()? as usize;
        if count > r.0.len() / 16 {
            return Err(BadClaim("range count larger than the value"));
        }
        let mut ranges = Vec::with_capacity(count);
        for _ in 0..count {
            let first = r.i64()?;
            let last = r.i64()?;
            if first < 0 || last < first {
                return Err(BadClaim("range out of order"));
            }
            ranges.push((first, last));
        }
        let transactional_id = r.string()?;
        Ok(Self {
            topic,
            partition,
            ranges,
            transactional_id,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadClaim> {
        if self.0.len() < n {
            return Err(BadClaim("truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], BadClaim> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn i32(&mut self) -> Result<i32, BadClaim> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, BadClaim> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, BadClaim> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String, BadClaim> {
        let len = u16::from_be_bytes(self.array()?) as usize;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| BadClaim("string not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn offsets_make_sorted_disjoint_ranges() {
        let mut offsets = vec![7, 3, 4, 5, 9, 4, 10];
        assert_eq!(
            Claim::ranges_of(&mut offsets),
            vec![(3, 5), (7, 7), (9, 10)]
        );
    }

    #[test]
    fn round_trip() {
        let claim = Claim {
            topic: "orders".into(),
            partition: 3,
            ranges: vec![(0, 499), (600, 600)],
            transactional_id: "mirror-eos-0".into(),
        };
        assert_eq!(Claim::decode(&claim.encode().unwrap()).unwrap(), claim);
        assert_eq!(claim.key(), Bytes::from("orders/3"));
    }

    proptest! {
        #[test]
        fn no_input_panics_or_allocates_beyond_it(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut framed = b"KSSC\x01".to_vec();
            framed.extend_from_slice(&bytes);
            let _ = Claim::decode(&bytes);
            let _ = Claim::decode(&framed);
        }
    }

    #[test]
    fn a_huge_count_is_refused_without_allocating() {
        let mut value = b"KSSC\x01\x00\x01t\x00\x00\x00\x00".to_vec();
        value.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            Claim::decode(&value),
            Err(BadClaim("range count larger than the value"))
        );
    }
}
