//! [`Outstanding`]: the record ids a producer has taken and not yet completed, for `flush`.

use std::collections::VecDeque;

/// The ids of records not yet complete (written, failed or expired).
///
/// Ids are handed out in increasing order, one per `send`, and complete in any order;
/// `flush` asks whether every id below a mark is complete. The ids from the oldest one still
/// outstanding to the newest are kept as a window of flags, so taking an id, completing one
/// and asking cost O(1) (amortised), with no allocation per record as a tree set had: it
/// spans no more ids than are in the producer's buffer.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    /// The id of `done[0]`.
    base: u64,
    /// Per id from `base`: true once complete. The front, when there is one, is not.
    done: VecDeque<bool>,
}

impl Outstanding {
    /// Notes `id` as outstanding. Noting an id that is already outstanding does nothing; ids
    /// skipped over (taken by a `send` that then failed) count as complete.
    pub(crate) fn insert(&mut self, id: u64) {
        if self.done.is_empty() {
            self.base = id;
            self.done.push_back(false);
            return;
        }
        let Some(offset) = id.checked_sub(self.base) else {
            // Older than every outstanding id: already complete.
            return;
        };
        let Ok(offset) = usize::try_from(offset) else {
            return;
        };
        if offset < self.done.len() {
            return;
        }
        self.done.resize(offset, true);
        self.done.push_back(false);
    }

    /// Marks `id` complete.
    pub(crate) fn remove(&mut self, id: u64) {
        let Some(offset) = id
            .checked_sub(self.base)
            .and_then(|o| usize::try_from(o).ok())
        else {
            return;
        };
        if let Some(flag) = self.done.get_mut(offset) {
            *flag = true;
        }
        while self.done.front() == Some(&true) {
            self.done.pop_front();
            self.base = self.base.saturating_add(1);
        }
    }

    /// True when no id below `upto` is outstanding.
    pub(crate) fn none_below(&self, upto: u64) -> bool {
        self.done.is_empty() || self.base >= upto
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The window answers as the set of outstanding ids it replaces.
        #[test]
        fn answers_as_a_set_of_ids(ops in proptest::collection::vec((0u8..3, 0u64..40), 1..200)) {
            let mut window = Outstanding::default();
            let mut set = BTreeSet::new();
            let mut next = 0u64;
            for (op, arg) in ops {
                match op {
                    // A send: the next id (sometimes skipped, as a send that failed).
                    0 => {
                        next += arg % 3;
                        set.insert(next);
                        window.insert(next);
                        next += 1;
                    }
                    // An id noted again (a record that waited for metadata).
                    1 => {
                        if let Some(id) = set.iter().nth(arg as usize % set.len().max(1)).copied() {
                            window.insert(id);
                        }
                    }
                    // A completion.
                    _ => {
                        if let Some(id) = set.iter().nth(arg as usize % set.len().max(1)).copied() {
                            set.remove(&id);
                            window.remove(id);
                        }
                    }
                }
                for upto in [0, next / 2, next, next + 1] {
                    let expected = set.first().is_none_or(|first| *first >= upto);
                    prop_assert_eq!(window.none_below(upto), expected, "upto {}", upto);
                }
            }
        }
    }
}
