//! Topic names: [`TopicName`], the cheaply cloned name records carry, and Kafka's rules for
//! a valid name, checked before a name reaches a broker.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, LazyLock, Mutex};

/// A topic name, as records, record ids and topic-partitions carry it: cheap to clone and
/// to drop.
///
/// Every record names its topic, so a share consumer clones the name once per record and
/// drops it once the record is acknowledged. A name the consumer read from the cluster is
/// kept once for the life of the process and shared by reference, so cloning and dropping
/// it touch no reference count (an atomic operation each, a large part of the cost of a
/// record when the sink does little). A name built from a string (`From<&str>`,
/// `From<String>`, `From<Arc<str>>`) is reference counted. Both kinds compare, hash and
/// order as the string they hold.
///
/// ```
/// use kafka_share_sink::{RecordId, TopicName};
///
/// let topic = TopicName::from("orders");
/// let id = RecordId::new(topic.clone(), 0, 42);
/// assert_eq!(id.topic(), "orders");
/// assert_eq!(id.topic_name(), &topic);
/// assert_eq!(&*topic, "orders");
/// ```
#[derive(Clone)]
pub struct TopicName(Repr);

#[derive(Clone)]
enum Repr {
    /// Thin, as the interned kind is: both fit one pointer beside the tag, and the tag leaves
    /// room for `Option<TopicName>` (and the ids holding one) to take no more space.
    Shared(Arc<Box<str>>),
    /// Kept for the life of the process by [`TopicName::interned`]: a thin reference, so a
    /// `TopicName` is as small as an `Arc<str>`.
    Interned(&'static Kept),
}

/// How many distinct names [`TopicName::interned`] keeps for the life of the process; past
/// it, names are reference counted (correct, and only slower). A share consumer's names come
/// from its subscription, a few in practice; the bound keeps a process that churns through
/// topics from growing without end (at most about 1 MiB of names).
const MAX_INTERNED: usize = 4096;

static INTERNED: LazyLock<Mutex<Interner>> =
    LazyLock::new(|| Mutex::new(Interner::new(MAX_INTERNED)));

/// Names kept for the life of the process, up to a bound.
struct Interner {
    names: HashMap<&'static str, &'static Kept>,
    max: usize,
}

impl Interner {
    fn new(max: usize) -> Self {
        Self {
            names: HashMap::new(),
            max,
        }
    }

    /// The kept `name`, kept now if it was not and there is room.
    fn get(&mut self, name: &str) -> Option<&'static Kept> {
        if let Some(&kept) = self.names.get(name) {
            return Some(kept);
        }
        if self.names.len() >= self.max {
            return None;
        }
        let kept: &'static Kept = Box::leak(Box::new(Kept(Box::from(name))));
        self.names.insert(&kept.0, kept);
        Some(kept)
    }
}

/// An interned name: a box, so a reference to it is thin.
struct Kept(Box<str>);

impl TopicName {
    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Shared(name) => name,
            Repr::Interned(name) => &name.0,
        }
    }

    /// The name, kept once for the life of the process (up to [`MAX_INTERNED`] names), so
    /// its clones cost no atomic operation. For names read from the cluster, once per batch
    /// of records, never per record.
    pub(crate) fn interned(name: &str) -> Self {
        let kept = match INTERNED.lock() {
            Ok(mut names) => names.get(name),
            // A panic while the map was held: shared names still work.
            Err(_) => None,
        };
        match kept {
            Some(kept) => Self(Repr::Interned(kept)),
            None => Self::shared(name),
        }
    }

    /// True when both are the same kept name or the same shared allocation: equal without
    /// comparing the bytes (unequal says nothing).
    pub(crate) fn same(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Shared(a), Repr::Shared(b)) => Arc::ptr_eq(a, b),
            (Repr::Interned(a), Repr::Interned(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }

    /// The name as an `Arc<str>` (a new allocation).
    pub fn to_arc(&self) -> Arc<str> {
        Arc::from(self.as_str())
    }

    fn shared(name: impl Into<Box<str>>) -> Self {
        Self(Repr::Shared(Arc::new(name.into())))
    }
}

impl Deref for TopicName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for TopicName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for TopicName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for TopicName {
    fn eq(&self, other: &Self) -> bool {
        self.same(other) || self.as_str() == other.as_str()
    }
}

impl Eq for TopicName {}

impl PartialEq<str> for TopicName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for TopicName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for TopicName {
    // As the string hashes, which `Borrow<str>` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for TopicName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TopicName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<Arc<str>> for TopicName {
    fn from(name: Arc<str>) -> Self {
        Self::shared(&*name)
    }
}

impl From<&Arc<str>> for TopicName {
    fn from(name: &Arc<str>) -> Self {
        Self::shared(&**name)
    }
}

impl From<&str> for TopicName {
    fn from(name: &str) -> Self {
        Self::shared(name)
    }
}

impl From<&String> for TopicName {
    fn from(name: &String) -> Self {
        Self::from(name.as_str())
    }
}

impl From<String> for TopicName {
    fn from(name: String) -> Self {
        Self::shared(name)
    }
}

impl From<Box<str>> for TopicName {
    fn from(name: Box<str>) -> Self {
        Self::shared(name)
    }
}

impl From<std::borrow::Cow<'_, str>> for TopicName {
    fn from(name: std::borrow::Cow<'_, str>) -> Self {
        Self::from(name.as_ref())
    }
}

impl From<&TopicName> for TopicName {
    fn from(name: &TopicName) -> Self {
        name.clone()
    }
}

impl From<TopicName> for Arc<str> {
    fn from(name: TopicName) -> Self {
        name.to_arc()
    }
}

/// Why `name` is not a valid Kafka topic name, or `None` when it is one: 1 to 249 characters
/// of ASCII letters, digits, `.`, `_` and `-`, and neither `.` nor `..` (Kafka's
/// `Topic.validate`).
pub(crate) fn topic_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 249 {
        Some("a topic name has 1 to 249 characters")
    } else if name == "." || name == ".." {
        Some("a topic name cannot be `.` or `..`")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("a topic name uses only ASCII letters, digits, '.', '_' and '-'")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interner_keeps_each_name_once_and_no_more_names_than_its_bound() {
        let mut interner = Interner::new(2);
        let a = interner.get("a").expect("room");
        assert!(
            std::ptr::eq(a, interner.get("a").expect("kept")),
            "kept once"
        );
        assert!(interner.get("b").is_some());
        assert!(interner.get("c").is_none(), "past the bound: not kept");
        assert!(interner.get("a").is_some(), "what is kept stays");
        assert_eq!(interner.names.len(), 2);
    }

    #[test]
    fn a_name_is_the_same_string_whichever_way_it_is_kept() {
        use std::collections::HashSet;
        let interned = TopicName::interned("orders-topic-name-test");
        let shared = TopicName::from("orders-topic-name-test");
        assert_eq!(interned, shared);
        assert_eq!(interned.cmp(&shared), std::cmp::Ordering::Equal);
        assert!(!interned.same(&shared));
        // Interned twice: the same kept name, not a second copy.
        assert!(interned.same(&TopicName::interned("orders-topic-name-test")));
        // Hashes as the string, so a set of names is searched by &str.
        let set: HashSet<TopicName> = HashSet::from([interned.clone()]);
        assert!(set.contains("orders-topic-name-test"));
        assert!(set.contains(&shared));
        assert_eq!(
            &*Arc::<str>::from(interned.clone()),
            "orders-topic-name-test"
        );
        assert_eq!(
            format!("{interned} {shared:?}"),
            "orders-topic-name-test \"orders-topic-name-test\""
        );
        assert_eq!(
            TopicName::from("a").cmp(&TopicName::interned("b-topic-name-test")),
            std::cmp::Ordering::Less
        );
        // Records cross threads and tasks.
        fn send_sync<T: Send + Sync>() {}
        send_sync::<TopicName>();
        // As small as the Arc<str> it replaces, and so is an optional one.
        assert_eq!(
            std::mem::size_of::<TopicName>(),
            std::mem::size_of::<Arc<str>>()
        );
        assert_eq!(
            std::mem::size_of::<Option<TopicName>>(),
            std::mem::size_of::<TopicName>()
        );
    }

    #[test]
    fn kafka_names_pass_and_others_say_why_not() {
        for ok in ["orders", "a.b_c-D9", &"x".repeat(249)] {
            assert_eq!(topic_name_problem(ok), None, "{ok}");
        }
        for (bad, why) in [
            ("", "1 to 249"),
            (&"x".repeat(250) as &str, "1 to 249"),
            (".", "`.` or `..`"),
            ("..", "`.` or `..`"),
            ("topic abc", "ASCII letters"),
            ("tôpic", "ASCII letters"),
            ("a/b", "ASCII letters"),
        ] {
            assert!(
                topic_name_problem(bad).is_some_and(|p| p.contains(why)),
                "{bad:?}"
            );
        }
    }
}
