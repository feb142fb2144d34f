//! [`Outstanding`]: the record ids a producer has taken and not yet completed, for `flush`,
//! and the bytes they hold, for `buffer.memory`.

use std::collections::VecDeque;

/// The ids of records not yet complete (written, failed or expired), with their sizes.
///
/// Ids are handed out in increasing order, one per `send`, and complete in any order;
/// `flush` asks whether every id below a mark is complete, and `ready` how many bytes the
/// outstanding records hold. The ids from the oldest one still outstanding to the newest are
/// kept as a window of sizes, so taking an id, completing one and asking cost O(1)
/// (amortised), with no allocation per record as a tree set had. It spans the ids from the
/// oldest outstanding one to the newest, completed ones between them included: four bytes
/// each.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    /// The id of `sizes[0]`.
    base: u64,
    /// Per id from `base`: its size while outstanding (at least 1), 0 once complete. The
    /// front, when there is one, is outstanding.
    sizes: VecDeque<u32>,
    /// The sum of the outstanding sizes.
    bytes: usize,
}

impl Outstanding {
    /// Notes `id`, a record of `size` bytes, as outstanding. Noting an id that is already
    /// outstanding does nothing (its size counts once); ids skipped over (taken by a `send`
    /// that then failed) count as complete.
    pub(crate) fn insert(&mut self, id: u64, size: usize) {
        let size = u32::try_from(size).unwrap_or(u32::MAX).max(1);
        if self.sizes.is_empty() {
            self.base = id;
        } else {
            let Some(offset) = id.checked_sub(self.base) else {
                // Older than every outstanding id: already complete.
                return;
            };
            let Ok(offset) = usize::try_from(offset) else {
                return;
            };
            if offset < self.sizes.len() {
                return;
            }
            self.sizes.resize(offset, 0);
        }
        self.sizes.push_back(size);
        self.bytes = self.bytes.saturating_add(size as usize);
    }

    /// Marks `id` complete.
    pub(crate) fn remove(&mut self, id: u64) {
        let Some(offset) = id
            .checked_sub(self.base)
            .and_then(|o| usize::try_from(o).ok())
        else {
            return;
        };
        if let Some(size) = self.sizes.get_mut(offset) {
            self.bytes = self.bytes.saturating_sub(std::mem::take(size) as usize);
        }
        while self.sizes.front() == Some(&0) {
            self.sizes.pop_front();
            self.base = self.base.saturating_add(1);
        }
    }

    /// True when no id below `upto` is outstanding.
    pub(crate) fn none_below(&self, upto: u64) -> bool {
        self.sizes.is_empty() || self.base >= upto
    }

    /// The bytes the outstanding records hold, as `send` estimated them.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The window answers as the set of outstanding ids it replaces, and holds the sum of
        /// their sizes.
        #[test]
        fn answers_as_a_set_of_ids(ops in proptest::collection::vec((0u8..3, 0u64..40), 1..200)) {
            let mut window = Outstanding::default();
            let mut set = BTreeMap::new();
            let mut next = 0u64;
            for (op, arg) in ops {
                match op {
                    // A send: the next id (sometimes skipped, as a send that failed).
                    0 => {
                        next += arg % 3;
                        let size = (arg as usize + 1) * 10;
                        set.insert(next, size);
                        window.insert(next, size);
                        next += 1;
                    }
                    // An id noted again (a record that waited for metadata).
                    1 => {
                        if let Some(id) = set.keys().nth(arg as usize % set.len().max(1)).copied() {
                            window.insert(id, 7);
                        }
                    }
                    // A completion.
                    _ => {
                        if let Some(id) = set.keys().nth(arg as usize % set.len().max(1)).copied() {
                            set.remove(&id);
                            window.remove(id);
                        }
                    }
                }
                for upto in [0, next / 2, next, next + 1] {
                    let expected = set.first_key_value().is_none_or(|(first, _)| *first >= upto);
                    prop_assert_eq!(window.none_below(upto), expected, "upto {}", upto);
                }
                prop_assert_eq!(window.bytes(), set.values().sum::<usize>());
            }
        }
    }
}
