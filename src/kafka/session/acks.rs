//! Acknowledgements as offset ranges, the way they travel on the wire.
//!
//! A ShareFetch or ShareAcknowledge carries acknowledgement batches: an inclusive offset range
//! and either one type for the whole range or one type per offset. Records acknowledged one
//! by one become short ranges; the consumer's own GAP, RELEASE and REJECT acknowledgements of
//! whole acquired ranges stay one range however many offsets they span, so no acknowledgement
//! ever costs memory per offset.

use crate::kafka::codec::share_v2::AcknowledgementBatch;

/// Wire code of GAP: an acquired offset with no data record (a control record, compaction).
pub(crate) const GAP: i8 = 0;
/// Wire code of ACCEPT.
#[cfg(test)]
pub(crate) const ACCEPT: i8 = 1;
/// Wire code of RELEASE.
pub(crate) const RELEASE: i8 = 2;
/// Wire code of REJECT.
pub(crate) const REJECT: i8 = 3;
/// Wire code of RENEW (KIP-1222; only in a ShareAcknowledge, or a ShareFetch v2 that fetches
/// nothing).
pub(crate) const RENEW: i8 = 4;

/// One acknowledgement type for every offset of `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AckRange {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) code: i8,
}

impl AckRange {
    /// A range of one offset.
    pub(crate) fn one(offset: i64, code: i8) -> Self {
        Self {
            first: offset,
            last: offset,
            code,
        }
    }
}

/// Sorts `ranges` by first offset and makes them disjoint. Where two overlap, the one that
/// starts first keeps the shared offsets (on equal starts, the one added first), so an offset
/// is never acknowledged twice in one request. Adjacent ranges of one type are merged. Work
/// and memory are linear in the number of ranges, whatever offsets they span.
pub(crate) fn normalize(ranges: &mut Vec<AckRange>) {
    ranges.retain(|r| r.first <= r.last);
    ranges.sort_by_key(|r| r.first); // stable: on equal starts the earlier one comes first
    let mut out: Vec<AckRange> = Vec::with_capacity(ranges.len());
    for mut r in ranges.drain(..) {
        if let Some(prev) = out.last_mut() {
            if prev.last >= r.first {
                // Overlap: clip the later range to what follows the earlier one.
                match prev.last.checked_add(1) {
                    Some(next) if next <= r.last => r.first = next,
                    _ => continue,
                }
            }
            if prev.code == r.code && prev.last.checked_add(1) == Some(r.first) {
                prev.last = r.last;
                continue;
            }
        }
        out.push(r);
    }
    *ranges = out;
}

/// Acknowledgement batches for normalized `ranges`: one batch per run of one type.
pub(crate) fn batches(ranges: &[AckRange]) -> Vec<AcknowledgementBatch> {
    ranges
        .iter()
        .map(|r| AcknowledgementBatch {
            first_offset: r.first,
            last_offset: r.last,
            acknowledge_types: vec![r.code],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn r(first: i64, last: i64, code: i8) -> AckRange {
        AckRange { first, last, code }
    }

    #[test]
    fn contiguous_offsets_of_one_type_become_one_range() {
        let mut acks = vec![
            AckRange::one(3, ACCEPT),
            AckRange::one(1, ACCEPT),
            AckRange::one(2, ACCEPT),
            AckRange::one(5, RELEASE),
            AckRange::one(6, ACCEPT),
            AckRange::one(9, REJECT),
        ];
        normalize(&mut acks);
        assert_eq!(
            acks,
            vec![
                r(1, 3, ACCEPT),
                r(5, 5, RELEASE),
                r(6, 6, ACCEPT),
                r(9, 9, REJECT)
            ]
        );
        let wire: Vec<(i64, i64, Vec<i8>)> = batches(&acks)
            .into_iter()
            .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types))
            .collect();
        assert_eq!(wire[0], (1, 3, vec![ACCEPT]));
        assert_eq!(wire.len(), 4);
    }

    #[test]
    fn an_offset_acknowledged_twice_keeps_the_first() {
        let mut acks = vec![AckRange::one(4, ACCEPT), AckRange::one(4, RELEASE)];
        normalize(&mut acks);
        assert_eq!(acks, vec![r(4, 4, ACCEPT)]);
    }

    #[test]
    fn huge_ranges_cost_one_entry() {
        let mut acks = vec![r(0, i64::MAX, GAP), r(10, 20, ACCEPT), r(-5, -1, GAP)];
        normalize(&mut acks);
        assert_eq!(
            acks,
            vec![r(-5, i64::MAX, GAP)],
            "adjacent GAP ranges merge"
        );
        let mut acks = vec![
            r(i64::MAX, i64::MAX, RELEASE),
            r(i64::MAX - 1, i64::MAX, RELEASE),
        ];
        normalize(&mut acks);
        assert_eq!(acks, vec![r(i64::MAX - 1, i64::MAX, RELEASE)]);
    }

    proptest! {
        /// Whatever comes in, what goes out is sorted, disjoint, and covers exactly the
        /// offsets that came in, each with the type of the range that starts first.
        #[test]
        fn normalized_ranges_cover_the_same_offsets(
            input in proptest::collection::vec((0i64..60, 0i64..8, 0i8..5), 0..40)
        ) {
            let mut acks: Vec<AckRange> =
                input.iter().map(|&(f, len, c)| r(f, f + len, c)).collect();
            let original = acks.clone();
            normalize(&mut acks);
            for pair in acks.windows(2) {
                prop_assert!(pair[0].last < pair[1].first);
                prop_assert!(pair[0].code != pair[1].code || pair[0].last + 1 < pair[1].first);
            }
            for offset in 0..70 {
                let mut sorted = original.clone();
                sorted.sort_by_key(|r| r.first);
                let want = sorted.iter().find(|r| r.first <= offset && offset <= r.last);
                let got = acks.iter().find(|r| r.first <= offset && offset <= r.last);
                prop_assert_eq!(want.is_some(), got.is_some(), "offset {}", offset);
                if let (Some(w), Some(g)) = (want, got) {
                    prop_assert_eq!(w.code, g.code, "offset {}", offset);
                }
            }
        }
    }
}
