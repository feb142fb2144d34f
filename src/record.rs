//! Records: what a share consumer delivers ([`ConsumerRecord`]) and what a sink task sees
//! ([`SinkRecord`]).
//!
//! Topic names are [`TopicName`]s and payloads are [`Bytes`], so moving a record from the
//! consumer to the task copies no payload byte (and a topic name read from the cluster not
//! even a reference count).

use std::fmt;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;

use crate::convert::SchemaAndValue;
use crate::convert::schema::{Schema, optional_bytes};
use crate::topic_name::TopicName;

/// A topic and a partition number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    topic: TopicName,
    partition: i32,
}

impl TopicPartition {
    /// Creates a topic-partition.
    pub fn new(topic: impl Into<TopicName>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The topic name, cheap to clone.
    pub fn topic_name(&self) -> &TopicName {
        &self.topic
    }

    /// The partition number.
    pub fn partition(&self) -> i32 {
        self.partition
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Where a record lives: topic, partition and offset. This is what acknowledgements name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId {
    topic: TopicName,
    partition: i32,
    offset: i64,
}

impl RecordId {
    /// Creates a record id.
    pub fn new(topic: impl Into<TopicName>, partition: i32, offset: i64) -> Self {
        Self {
            topic: topic.into(),
            partition,
            offset,
        }
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The topic name, cheap to clone.
    pub fn topic_name(&self) -> &TopicName {
        &self.topic
    }

    /// The partition number.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The offset within the partition.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The topic-partition of this record.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition {
            topic: self.topic.clone(),
            partition: self.partition,
        }
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}@{}", self.topic, self.partition, self.offset)
    }
}

/// What a record timestamp means, as in Kafka's record batch attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TimestampType {
    /// The record carries no timestamp (the timestamp is -1).
    #[default]
    NoTimestampType,
    /// Set by the producer when the record was created.
    CreateTime,
    /// Set by the broker when the record was appended to the log.
    LogAppendTime,
}

/// One record header. Keys may repeat and values may be null; order is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    key: String,
    value: Option<Bytes>,
}

impl Header {
    /// Creates a header; `None` is a null value, which Kafka distinguishes from an empty one.
    pub fn new(key: impl Into<String>, value: Option<Bytes>) -> Self {
        Self {
            key: key.into(),
            value,
        }
    }

    /// The header key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The header value; `None` for a null value.
    pub fn value(&self) -> Option<&Bytes> {
        self.value.as_ref()
    }
}

/// Ordered record headers, duplicates and null values allowed, as on the wire.
///
/// ```
/// use kafka_share_sink::Headers;
/// let mut headers = Headers::new();
/// headers.push("trace", Some("a".into()));
/// headers.push("trace", Some("b".into()));
/// headers.push("tombstone", None);
/// assert_eq!(headers.len(), 3);
/// assert_eq!(headers.last("trace").unwrap().value().unwrap().as_ref(), b"b");
/// assert_eq!(headers.get_all("trace").count(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Headers(Vec<Header>);

impl Headers {
    /// No headers. Does not allocate.
    pub const fn new() -> Self {
        Self(Vec::new())
    }

    /// Appends a header at the end, keeping any header with the same key.
    pub fn push(&mut self, key: impl Into<String>, value: Option<Bytes>) {
        self.0.push(Header::new(key, value));
    }

    /// Number of headers, duplicates included.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no headers.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// All headers in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Header> {
        self.0.iter()
    }

    /// Every header with this key, in order.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Header> + 'a {
        self.0.iter().filter(move |h| h.key == key)
    }

    /// The last header with this key (Kafka's `Headers.lastHeader`).
    pub fn last(&self, key: &str) -> Option<&Header> {
        self.0.iter().rev().find(|h| h.key == key)
    }
}

impl FromIterator<Header> for Headers {
    fn from_iter<I: IntoIterator<Item = Header>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = &'a Header;
    type IntoIter = std::slice::Iter<'a, Header>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A record as a share consumer delivers it: raw bytes plus the share-group delivery count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    topic: TopicName,
    partition: i32,
    offset: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Headers,
    timestamp: i64,
    timestamp_type: TimestampType,
    delivery_count: u16,
    leader_epoch: Option<i32>,
}

impl ConsumerRecord {
    /// A record with no key, value, headers or timestamp, delivered for the first time.
    /// Use the `with_*` methods to fill it in (handy in tests of your own sink).
    pub fn new(topic: impl Into<TopicName>, partition: i32, offset: i64) -> Self {
        Self {
            topic: topic.into(),
            partition,
            offset,
            key: None,
            value: None,
            headers: Headers::new(),
            timestamp: -1,
            timestamp_type: TimestampType::NoTimestampType,
            delivery_count: 1,
            leader_epoch: None,
        }
    }

    /// Sets the leader epoch of the batch the record came in (`None` when unknown).
    pub fn with_leader_epoch(mut self, leader_epoch: Option<i32>) -> Self {
        self.leader_epoch = leader_epoch;
        self
    }

    /// The leader epoch of the partition when the record was appended (the record batch's
    /// `partitionLeaderEpoch`, Java's `ConsumerRecord.leaderEpoch()`), if known.
    pub fn leader_epoch(&self) -> Option<i32> {
        self.leader_epoch
    }

    /// Sets the key (`None` is a null key).
    pub fn with_key(mut self, key: Option<Bytes>) -> Self {
        self.key = key;
        self
    }

    /// Sets the value (`None` is a null value, a tombstone).
    pub fn with_value(mut self, value: Option<Bytes>) -> Self {
        self.value = value;
        self
    }

    /// Sets the headers.
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the timestamp (milliseconds since the epoch) and its type.
    pub fn with_timestamp(mut self, timestamp: i64, timestamp_type: TimestampType) -> Self {
        self.timestamp = timestamp;
        self.timestamp_type = timestamp_type;
        self
    }

    /// Sets the delivery count (1 on the first delivery).
    pub fn with_delivery_count(mut self, delivery_count: u16) -> Self {
        self.delivery_count = delivery_count;
        self
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The topic name, cheap to clone.
    pub fn topic_name(&self) -> &TopicName {
        &self.topic
    }

    /// The partition number.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The offset within the partition.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The key bytes; `None` for a null key.
    pub fn key(&self) -> Option<&Bytes> {
        self.key.as_ref()
    }

    /// The value bytes; `None` for a null value.
    pub fn value(&self) -> Option<&Bytes> {
        self.value.as_ref()
    }

    /// The headers, in order.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The timestamp in milliseconds since the epoch, -1 when there is none.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// What the timestamp means.
    pub fn timestamp_type(&self) -> TimestampType {
        self.timestamp_type
    }

    /// How many times the share group has handed this record out, this delivery included
    /// (1 on the first delivery).
    #[inline]
    pub fn delivery_count(&self) -> u16 {
        self.delivery_count
    }

    /// The record's topic-partition.
    pub(crate) fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }

    /// The record's coordinates.
    pub fn id(&self) -> RecordId {
        RecordId {
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.offset,
        }
    }

    /// Builds a record from its parts.
    #[inline]
    pub(crate) fn from_parts(parts: RecordParts) -> Self {
        Self {
            topic: parts.topic,
            partition: parts.partition,
            offset: parts.offset,
            key: parts.key,
            value: parts.value,
            headers: parts.headers,
            timestamp: parts.timestamp,
            timestamp_type: parts.timestamp_type,
            delivery_count: parts.delivery_count,
            leader_epoch: parts.leader_epoch,
        }
    }
}

/// The fields of a [`ConsumerRecord`], for conversion inside the crate.
#[derive(Debug)]
pub(crate) struct RecordParts {
    pub(crate) topic: TopicName,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Headers,
    pub(crate) timestamp: i64,
    pub(crate) timestamp_type: TimestampType,
    pub(crate) delivery_count: u16,
    pub(crate) leader_epoch: Option<i32>,
}

/// A converted key, value or header value, as the sink task sees it.
///
/// The byte-array converter yields [`Value::Bytes`], the string converter [`Value::String`],
/// the JSON converter any variant. Integers of every width are [`Value::Int`] and floats of
/// both widths [`Value::Float`]; a [`Schema`], when the converter gives one,
/// tells the declared width.
///
/// `Value` is `PartialEq` but not `Eq`, because of [`Value::Float`].
///
/// ```
/// use kafka_share_sink::Value;
///
/// let order = Value::Struct(vec![
///     ("id".to_owned(), Value::Int(7)),
///     ("paid".to_owned(), Value::Boolean(true)),
/// ]);
/// assert_eq!(order.get("id").and_then(Value::as_i64), Some(7));
/// assert_eq!(order.get("paid").and_then(Value::as_bool), Some(true));
/// assert!(order.get("missing").is_none());
/// assert_eq!(Value::from("text").as_str(), Some("text"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// A null key, value or header value.
    Null,
    /// Raw bytes.
    Bytes(Bytes),
    /// Text.
    String(String),
    /// `true` or `false`.
    Boolean(bool),
    /// An integer (int8 to int64).
    Int(i64),
    /// A floating-point number (float32 or float64).
    Float(f64),
    /// A list.
    Array(Vec<Value>),
    /// Key-value pairs in their original order: a schemaless JSON object (string keys) or a
    /// value with a map schema (keys of the key schema's type).
    Map(Vec<(Value, Value)>),
    /// The fields of a value with a struct schema, in the schema's field order.
    Struct(Vec<(String, Value)>),
}

impl Value {
    /// True for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }

    /// The bytes of a [`Value::Bytes`], or the UTF-8 bytes of a [`Value::String`].
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Bytes(b) => Some(b),
            Self::String(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// The text of a [`Value::String`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer of a [`Value::Int`].
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The number of a [`Value::Float`].
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Self::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// The flag of a [`Value::Boolean`].
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// The field of a [`Value::Struct`], or the entry of a [`Value::Map`] whose key is this
    /// string (the last one, if the key repeats).
    pub fn get(&self, name: &str) -> Option<&Value> {
        match self {
            Self::Struct(fields) => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            Self::Map(entries) => entries
                .iter()
                .rev()
                .find(|(k, _)| k.as_str() == Some(name))
                .map(|(_, v)| v),
            _ => None,
        }
    }
}

impl From<Option<Bytes>> for Value {
    #[inline]
    fn from(bytes: Option<Bytes>) -> Self {
        // Not `map_or(Self::Null, ..)`: that builds a `Null` and drops it for every value.
        match bytes {
            Some(bytes) => Self::Bytes(bytes),
            None => Self::Null,
        }
    }
}

impl From<Bytes> for Value {
    fn from(bytes: Bytes) -> Self {
        Self::Bytes(bytes)
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Self::String(s)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Self::Boolean(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Self::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Self::Float(f)
    }
}

/// A converted header, as the sink task sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkHeader {
    key: String,
    value: Value,
}

impl SinkHeader {
    /// Creates a header.
    pub fn new(key: impl Into<String>, value: Value) -> Self {
        Self {
            key: key.into(),
            value,
        }
    }

    /// The header key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The converted header value.
    pub fn value(&self) -> &Value {
        &self.value
    }
}

/// The record a [`SinkTask`](crate::SinkTask) receives, like Kafka Connect's `SinkRecord`.
///
/// `topic`, `partition`, key, value and headers may be changed by transforms; the `original_*`
/// coordinates never change and are what acknowledgements and
/// [`SinkTask::pre_commit`](crate::SinkTask::pre_commit) use.
#[derive(Clone)]
pub struct SinkRecord {
    /// The current topic when a transform changed it; `None` while it is the original one,
    /// which saves a reference count on the topic name per record (two atomic operations,
    /// building and dropping it).
    topic: Option<TopicName>,
    partition: i32,
    key_schema: Option<SchemaRef>,
    key: Value,
    value_schema: Option<SchemaRef>,
    value: Value,
    headers: Vec<SinkHeader>,
    /// [`NO_TIMESTAMP`] for none: an `Option<i64>` would take 16 bytes of a record the
    /// driver writes and reads several times per record.
    timestamp: i64,
    timestamp_type: TimestampType,
    delivery_count: u16,
    /// Where the record was polled from.
    original: RecordId,
}

/// A [`SinkRecord`] without a timestamp.
const NO_TIMESTAMP: i64 = i64::MIN;

/// A polled record's timestamp as a sink record keeps it: -1 (or any negative) is none.
fn sink_timestamp(timestamp: i64) -> i64 {
    if timestamp >= 0 {
        timestamp
    } else {
        NO_TIMESTAMP
    }
}

impl PartialEq for SinkRecord {
    fn eq(&self, other: &Self) -> bool {
        // By the topic name, wherever it is kept.
        self.topic() == other.topic()
            && self.partition == other.partition
            && self.key_schema == other.key_schema
            && self.key == other.key
            && self.value_schema == other.value_schema
            && self.value == other.value
            && self.headers == other.headers
            && self.timestamp() == other.timestamp()
            && self.timestamp_type == other.timestamp_type
            && self.delivery_count == other.delivery_count
            && self.original_id() == other.original_id()
    }
}

impl fmt::Debug for SinkRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkRecord")
            .field("topic", &self.topic())
            .field("partition", &self.partition)
            .field("key_schema", &self.key_schema)
            .field("key", &self.key)
            .field("value_schema", &self.value_schema)
            .field("value", &self.value)
            .field("headers", &self.headers)
            .field("timestamp", &self.timestamp())
            .field("timestamp_type", &self.timestamp_type)
            .field("delivery_count", &self.delivery_count)
            .field("original", self.original_id())
            .finish()
    }
}

/// The schema of a record's key or value: shared through its reference count, or one of
/// Connect's constant schemas, which every record of a batch refers to without touching a
/// count (two atomic operations saved per schema and record, building and dropping it).
#[derive(Clone)]
enum SchemaRef {
    Static(&'static Arc<Schema>),
    Shared(Arc<Schema>),
}

impl SchemaRef {
    fn arc(&self) -> &Arc<Schema> {
        match self {
            Self::Static(schema) => schema,
            Self::Shared(schema) => schema,
        }
    }
}

impl From<Arc<Schema>> for SchemaRef {
    fn from(schema: Arc<Schema>) -> Self {
        Self::Shared(schema)
    }
}

impl PartialEq for SchemaRef {
    fn eq(&self, other: &Self) -> bool {
        self.arc() == other.arc()
    }
}

impl fmt::Debug for SchemaRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.arc(), f)
    }
}

impl SinkRecord {
    /// A record with null key and value, no schemas, no headers and no timestamp, delivered
    /// once. Meant for tests of your own sink task and transforms; the driver builds records
    /// from what it polled.
    pub fn new(topic: impl Into<TopicName>, partition: i32, offset: i64) -> Self {
        Self {
            original: RecordId::new(topic, partition, offset),
            topic: None,
            partition,
            key_schema: None,
            key: Value::Null,
            value_schema: None,
            value: Value::Null,
            headers: Vec::new(),
            timestamp: NO_TIMESTAMP,
            timestamp_type: TimestampType::NoTimestampType,
            delivery_count: 1,
        }
    }

    /// Sets the converted key.
    pub fn with_key(mut self, key: Value) -> Self {
        self.key = key;
        self
    }

    /// Sets the converted value.
    pub fn with_value(mut self, value: Value) -> Self {
        self.value = value;
        self
    }

    /// Sets the schema of the key (`None`: schemaless).
    pub fn with_key_schema(mut self, schema: Option<Arc<Schema>>) -> Self {
        self.key_schema = schema.map(SchemaRef::from);
        self
    }

    /// Sets the schema of the value (`None`: schemaless).
    pub fn with_value_schema(mut self, schema: Option<Arc<Schema>>) -> Self {
        self.value_schema = schema.map(SchemaRef::from);
        self
    }

    /// Sets the converted headers.
    pub fn with_headers(mut self, headers: Vec<SinkHeader>) -> Self {
        self.headers = headers;
        self
    }

    /// The converted headers, to change in place (as a transform does). Order is kept and
    /// keys may repeat.
    ///
    /// ```
    /// use kafka_share_sink::{SinkHeader, SinkRecord, Value};
    ///
    /// let mut record = SinkRecord::new("orders", 0, 1)
    ///     .with_headers(vec![SinkHeader::new("trace", Value::from("a"))]);
    /// record.headers_mut().push(SinkHeader::new("source", Value::from("eu")));
    /// record.headers_mut().retain(|h| h.key() != "trace");
    /// assert_eq!(record.headers().len(), 1);
    /// assert_eq!(record.headers()[0].key(), "source");
    /// ```
    pub fn headers_mut(&mut self) -> &mut Vec<SinkHeader> {
        &mut self.headers
    }

    /// Sets the timestamp and its type. (`Some(i64::MIN)`, hundreds of millions of years
    /// before the epoch, reads back as `None`.)
    pub fn with_timestamp(mut self, timestamp: Option<i64>, timestamp_type: TimestampType) -> Self {
        self.timestamp = timestamp.unwrap_or(NO_TIMESTAMP);
        self.timestamp_type = timestamp_type;
        self
    }

    /// Sets the delivery count.
    pub fn with_delivery_count(mut self, delivery_count: u16) -> Self {
        self.delivery_count = delivery_count;
        self
    }

    /// Changes the current topic and partition, as a topic-routing transform would. The
    /// original coordinates stay as they were.
    pub fn with_topic_partition(mut self, topic: impl Into<TopicName>, partition: i32) -> Self {
        self.topic = Some(topic.into());
        self.partition = partition;
        self
    }

    /// Builds the sink record of a polled record with the byte-array converter: key, value
    /// and header values stay bytes (the key and value schemas are Connect's optional bytes
    /// schema, as `ByteArrayConverter` gives), a timestamp of -1 becomes `None`.
    #[inline]
    pub(crate) fn from_consumer_record(mut record: ConsumerRecord) -> Self {
        if record.headers.is_empty() {
            return Self::from_consumer_record_without_headers(record);
        }
        let headers = std::mem::take(&mut record.headers);
        let mut sink = Self::from_consumer_record_without_headers(record);
        sink.headers = headers
            .0
            .into_iter()
            .map(|h| SinkHeader::new(h.key, Value::from(h.value)))
            .collect();
        sink
    }

    /// [`from_consumer_record`](Self::from_consumer_record) of a record without headers
    /// (any it has are dropped).
    #[inline(always)]
    pub(crate) fn from_consumer_record_without_headers(mut record: ConsumerRecord) -> Self {
        Self::take_from_consumer_record_without_headers(&mut record, Self::optional_bytes_schema())
    }

    /// Connect's optional bytes schema, the very `Arc` the byte-array converter hands out.
    #[inline]
    pub(crate) fn optional_bytes_schema() -> &'static Arc<Schema> {
        static OPTIONAL_BYTES: LazyLock<Arc<Schema>> = LazyLock::new(optional_bytes);
        &OPTIONAL_BYTES
    }

    /// [`from_consumer_record_without_headers`](Self::from_consumer_record_without_headers)
    /// reading `record` in place: key and value are taken out, the topic name cloned (no
    /// reference count for a name the consumer read from the cluster). Reading fields where
    /// they are spares copying the whole record to the stack first, which a move out of a
    /// vector does. The record is left without key and value, to be dropped. One struct
    /// expression, so the sink record is built where it is stored. `schema` is
    /// [`optional_bytes_schema`](Self::optional_bytes_schema), looked up once per batch by
    /// the caller.
    #[inline(always)]
    pub(crate) fn take_from_consumer_record_without_headers(
        record: &mut ConsumerRecord,
        schema: &'static Arc<Schema>,
    ) -> Self {
        Self {
            original: RecordId {
                topic: record.topic.clone(),
                partition: record.partition,
                offset: record.offset,
            },
            topic: None,
            partition: record.partition,
            key_schema: Some(SchemaRef::Static(schema)),
            key: Value::from(record.key.take()),
            value_schema: Some(SchemaRef::Static(schema)),
            value: Value::from(record.value.take()),
            headers: Vec::new(),
            timestamp: sink_timestamp(record.timestamp),
            timestamp_type: record.timestamp_type,
            delivery_count: record.delivery_count,
        }
    }

    /// Builds the sink record of a polled record from what its converters returned; the
    /// coordinates, timestamp (-1 becomes `None`) and delivery count come from `record`.
    pub(crate) fn from_converted(
        record: &ConsumerRecord,
        key: SchemaAndValue,
        value: SchemaAndValue,
        headers: Vec<SinkHeader>,
    ) -> Self {
        let (key_schema, key) = key.into_parts();
        let (value_schema, value) = value.into_parts();
        Self {
            original: record.id(),
            topic: None,
            partition: record.partition,
            key_schema: key_schema.map(SchemaRef::from),
            key,
            value_schema: value_schema.map(SchemaRef::from),
            value,
            headers,
            timestamp: sink_timestamp(record.timestamp),
            timestamp_type: record.timestamp_type,
            delivery_count: record.delivery_count,
        }
    }

    /// The current topic (transforms may change it).
    pub fn topic(&self) -> &str {
        self.topic.as_deref().unwrap_or(&self.original_id().topic)
    }

    /// The current partition (transforms may change it).
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The offset of the consumed record. Transforms cannot change it.
    pub fn offset(&self) -> i64 {
        self.original_id().offset
    }

    /// The schema of the key; `None` when the converter gave none (schemaless).
    pub fn key_schema(&self) -> Option<&Schema> {
        self.key_schema.as_ref().map(|s| &**s.arc())
    }

    /// The shared schema of the key, cheap to clone into another record.
    pub fn key_schema_arc(&self) -> Option<&Arc<Schema>> {
        self.key_schema.as_ref().map(SchemaRef::arc)
    }

    /// The converted key.
    pub fn key(&self) -> &Value {
        &self.key
    }

    /// The schema of the value; `None` when the converter gave none (schemaless).
    pub fn value_schema(&self) -> Option<&Schema> {
        self.value_schema.as_ref().map(|s| &**s.arc())
    }

    /// The shared schema of the value, cheap to clone into another record.
    pub fn value_schema_arc(&self) -> Option<&Arc<Schema>> {
        self.value_schema.as_ref().map(SchemaRef::arc)
    }

    /// The converted value.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The converted headers, in their original order.
    pub fn headers(&self) -> &[SinkHeader] {
        &self.headers
    }

    /// The timestamp in milliseconds since the epoch; `None` when the record had none.
    pub fn timestamp(&self) -> Option<i64> {
        (self.timestamp != NO_TIMESTAMP).then_some(self.timestamp)
    }

    /// What the timestamp means.
    pub fn timestamp_type(&self) -> TimestampType {
        self.timestamp_type
    }

    /// How many times the share group has handed this record out (1 on the first delivery).
    /// A value above 1 means an earlier delivery was released, timed out or crashed: make
    /// `put` idempotent.
    #[inline]
    pub fn delivery_count(&self) -> u16 {
        self.delivery_count
    }

    /// The topic the record was consumed from, before any transform.
    pub fn original_topic(&self) -> &str {
        &self.original_id().topic
    }

    /// The partition the record was consumed from, before any transform.
    pub fn original_partition(&self) -> i32 {
        self.original_id().partition
    }

    /// The offset the record was consumed from.
    pub fn original_offset(&self) -> i64 {
        self.original_id().offset
    }

    /// The original coordinates, which acknowledgements use.
    #[inline]
    pub fn original_id(&self) -> &RecordId {
        &self.original
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_record_keeps_headers_in_order_with_duplicates_and_nulls() {
        let mut headers = Headers::new();
        headers.push("a", Some(Bytes::from_static(b"1")));
        headers.push("a", None);
        headers.push("b", Some(Bytes::new()));
        let record = ConsumerRecord::new("t", 3, 42)
            .with_key(Some(Bytes::from_static(b"k")))
            .with_headers(headers)
            .with_timestamp(-1, TimestampType::NoTimestampType)
            .with_delivery_count(2);
        let sink = SinkRecord::from_consumer_record(record);
        let got: Vec<(&str, &Value)> = sink
            .headers()
            .iter()
            .map(|h| (h.key(), h.value()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", &Value::Bytes(Bytes::from_static(b"1"))),
                ("a", &Value::Null),
                ("b", &Value::Bytes(Bytes::new())),
            ]
        );
        assert_eq!(sink.key(), &Value::Bytes(Bytes::from_static(b"k")));
        assert!(sink.value().is_null());
        // The byte-array converter's schemas, as ByteArrayConverter gives them.
        for schema in [sink.key_schema(), sink.value_schema()] {
            let schema = schema.expect("a bytes schema");
            assert_eq!(schema.schema_type(), crate::SchemaType::Bytes);
            assert!(schema.is_optional());
        }
        assert_eq!(sink.timestamp(), None);
        assert_eq!(sink.delivery_count(), 2);
        assert_eq!(sink.original_id(), &RecordId::new("t", 3, 42));
    }

    #[test]
    fn a_constant_schema_behaves_like_a_shared_one() {
        let sink = SinkRecord::from_consumer_record(ConsumerRecord::new("t", 0, 1));
        // The same Arc the byte-array converter hands out.
        let converter = optional_bytes();
        assert!(Arc::ptr_eq(sink.key_schema_arc().unwrap(), &converter));
        assert!(Arc::ptr_eq(sink.value_schema_arc().unwrap(), &converter));
        // Equality and Debug look at the schema, not at how the record holds it.
        let shared = sink
            .clone()
            .with_key_schema(Some(Arc::new((*converter).clone())))
            .with_value_schema(Some(Arc::clone(&converter)));
        assert_eq!(shared, sink);
        assert_eq!(format!("{shared:?}"), format!("{sink:?}"));
        assert!(format!("{sink:?}").contains("key_schema: Some(Schema"));
        let other = sink
            .clone()
            .with_key_schema(Some(crate::convert::schema::optional_string()));
        assert_ne!(other, sink);
    }

    #[test]
    fn transforms_do_not_change_original_coordinates() {
        let sink = SinkRecord::new("orders", 1, 7).with_topic_partition("orders-eu", 0);
        assert_eq!((sink.topic(), sink.partition()), ("orders-eu", 0));
        assert_eq!(
            (
                sink.original_topic(),
                sink.original_partition(),
                sink.original_offset()
            ),
            ("orders", 1, 7)
        );
    }

    #[test]
    fn a_topic_is_compared_and_shown_by_name_wherever_it_is_kept() {
        let polled = SinkRecord::from_consumer_record(ConsumerRecord::new("orders", 1, 7));
        let routed = polled.clone().with_topic_partition("orders", 1);
        assert_eq!(
            polled, routed,
            "the same topic name, set again by a transform"
        );
        assert_eq!(format!("{polled:?}"), format!("{routed:?}"));
        assert!(
            format!("{polled:?}").starts_with(r#"SinkRecord { topic: "orders", partition: 1,"#)
        );
        let moved = polled.clone().with_topic_partition("orders-eu", 1);
        assert_ne!(polled, moved);
        assert_eq!(moved.topic(), "orders-eu");
        assert_eq!(moved.original_topic(), "orders");
    }

    #[test]
    fn value_get_reads_struct_fields_and_the_last_map_entry() {
        let map = Value::Map(vec![
            (Value::from("a"), Value::Int(1)),
            (Value::Int(7), Value::Int(2)),
            (Value::from("a"), Value::Int(3)),
        ]);
        assert_eq!(map.get("a"), Some(&Value::Int(3)));
        assert_eq!(map.get("7"), None);
        let fields = Value::Struct(vec![("a".into(), Value::Null)]);
        assert_eq!(fields.get("a"), Some(&Value::Null));
        assert_eq!(Value::Int(1).get("a"), None);
        assert_eq!(Value::from("s").as_bytes(), Some(&b"s"[..]));
        assert_eq!(Value::Float(0.5).as_bytes(), None);
    }

    #[test]
    fn non_negative_timestamp_is_kept() {
        let record = ConsumerRecord::new("t", 0, 0).with_timestamp(0, TimestampType::CreateTime);
        let sink = SinkRecord::from_consumer_record(record);
        assert_eq!(sink.timestamp(), Some(0));
        assert_eq!(sink.timestamp_type(), TimestampType::CreateTime);
    }
}
