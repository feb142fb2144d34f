//! Connect's built-in predicates: [`HasHeaderKey`], [`TopicNameMatches`],
//! [`RecordIsTombstone`].

use std::collections::BTreeMap;

use regex::Regex;

use super::traits::Predicate;
use crate::plugins::{PluginError, configs};
use crate::record::SinkRecord;

/// Matches records with at least one header with this key (whatever its value), like
/// Connect's `org.apache.kafka.connect.transforms.predicates.HasHeaderKey` (config `name`).
///
/// ```
/// use kafka_share_sink::{Predicate, SinkHeader, SinkRecord, Value};
/// use kafka_share_sink::transform::HasHeaderKey;
///
/// let has_trace = HasHeaderKey::new("trace");
/// let record = SinkRecord::new("t", 0, 0).with_headers(vec![SinkHeader::new("trace", Value::Null)]);
/// assert!(has_trace.test(&record));
/// assert!(!has_trace.test(&SinkRecord::new("t", 0, 0)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HasHeaderKey {
    name: String,
}

impl HasHeaderKey {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str =
        "org.apache.kafka.connect.transforms.predicates.HasHeaderKey";

    /// Matches records with a header called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }

    /// Builds the predicate from its required config `name`.
    pub fn from_configs(configs: &BTreeMap<String, String>) -> Result<Self, PluginError> {
        Ok(Self::new(configs::required_non_empty(configs, "name")?))
    }

    /// The header key looked for.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Predicate for HasHeaderKey {
    fn test(&self, record: &SinkRecord) -> bool {
        record.headers().iter().any(|h| h.key() == self.name)
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}

/// Matches records whose current topic name matches a regular expression as a whole (as
/// Java's `Matcher.matches()`), like Connect's
/// `org.apache.kafka.connect.transforms.predicates.TopicNameMatches` (config `pattern`).
///
/// The syntax is the `regex` crate's, which is Java's without look-around and
/// back-references.
///
/// ```
/// use kafka_share_sink::{Predicate, SinkRecord};
/// use kafka_share_sink::transform::TopicNameMatches;
///
/// let eu = TopicNameMatches::new("orders-(eu|uk)").unwrap();
/// assert!(eu.test(&SinkRecord::new("orders-eu", 0, 0)));
/// assert!(!eu.test(&SinkRecord::new("orders-eu-dlq", 0, 0)));
/// assert!(TopicNameMatches::new("orders-(").is_err());
/// ```
#[derive(Debug, Clone)]
pub struct TopicNameMatches {
    pattern: String,
    regex: Regex,
}

impl TopicNameMatches {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str =
        "org.apache.kafka.connect.transforms.predicates.TopicNameMatches";

    /// Matches topic names that `pattern` matches entirely; an invalid pattern is a
    /// [`PluginError::InvalidConfig`] for `pattern` saying why.
    pub fn new(pattern: impl Into<String>) -> Result<Self, PluginError> {
        let pattern = pattern.into();
        let invalid = |e: regex::Error| {
            PluginError::invalid_config(
                "pattern",
                pattern.as_str(),
                format!(
                    "not a valid regular expression: {}",
                    one_line(&e.to_string())
                ),
            )
        };
        // Checked on its own first: wrapped unchecked, `a)|(?:.*` would escape the anchors
        // and match every topic, where Java refuses it.
        Regex::new(&pattern).map_err(invalid)?;
        let regex = Regex::new(&format!(r"\A(?:{pattern})\z")).map_err(invalid)?;
        Ok(Self { pattern, regex })
    }

    /// Builds the predicate from its required config `pattern`.
    pub fn from_configs(configs: &BTreeMap<String, String>) -> Result<Self, PluginError> {
        Self::new(configs::required_non_empty(configs, "pattern")?)
    }

    /// The pattern, as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }
}

/// The regex crate's multi-line error text on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Predicate for TopicNameMatches {
    fn test(&self, record: &SinkRecord) -> bool {
        self.regex.is_match(record.topic())
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}

/// Matches tombstones: records whose value is null, like Connect's
/// `org.apache.kafka.connect.transforms.predicates.RecordIsTombstone`.
///
/// ```
/// use kafka_share_sink::{Predicate, SinkRecord, Value};
/// use kafka_share_sink::transform::RecordIsTombstone;
///
/// assert!(RecordIsTombstone.test(&SinkRecord::new("t", 0, 0)));
/// assert!(!RecordIsTombstone.test(&SinkRecord::new("t", 0, 0).with_value(Value::from(""))));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordIsTombstone;

impl RecordIsTombstone {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str =
        "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone";
}

impl Predicate for RecordIsTombstone {
    fn test(&self, record: &SinkRecord) -> bool {
        record.value().is_null()
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_pattern_must_match_the_whole_name() {
        let p = TopicNameMatches::new("a|b").unwrap();
        assert!(p.test(&SinkRecord::new("a", 0, 0)));
        assert!(p.test(&SinkRecord::new("b", 0, 0)));
        assert!(!p.test(&SinkRecord::new("ab", 0, 0)));
        // Flags inside the pattern do not undo the anchors.
        let m = TopicNameMatches::new("(?m)x$").unwrap();
        assert!(!m.test(&SinkRecord::new("x\ny", 0, 0)));
    }

    #[test]
    fn bad_pattern_names_the_key_and_pattern() {
        let err = TopicNameMatches::new("(unclosed").unwrap_err().to_string();
        assert!(
            err.starts_with(
                "config `pattern` has invalid value `(unclosed`: not a valid regular expression:"
            ),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn a_pattern_cannot_escape_its_anchors() {
        // Wrapped as `\A(?:a)|(?:.*)\z` it would match every topic; Java refuses it.
        assert!(TopicNameMatches::new("a)|(?:.*").is_err());
    }

    #[test]
    fn settings_are_trimmed_and_must_not_be_empty() {
        let c = configs::configs(&[("pattern", "orders-.* ")]);
        let p = TopicNameMatches::from_configs(&c).unwrap();
        assert_eq!(p.pattern(), "orders-.*");
        assert!(p.test(&SinkRecord::new("orders-eu", 0, 0)));
        let c = configs::configs(&[("pattern", " "), ("name", "")]);
        assert!(TopicNameMatches::from_configs(&c).is_err());
        assert!(HasHeaderKey::from_configs(&c).is_err());
        let c = configs::configs(&[("name", " trace ")]);
        assert_eq!(HasHeaderKey::from_configs(&c).unwrap().name(), "trace");
    }
}
