//! [`KafkaProducerConfig`]: the producer's settings, typed or from Kafka's Java key names.

use std::time::Duration;

use crate::config::Properties;
use crate::config::secret::shown_key;
use crate::kafka::codec::record_batch::Compression;
use crate::kafka::security::Security;
use crate::producer::ProducerError;

/// The most batches Java lets an idempotent producer keep in flight per connection.
pub(crate) const MAX_IN_FLIGHT_IDEMPOTENT: usize = 5;

/// `acks`: how many replicas must have a batch before the leader answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acks {
    /// `acks=1`: the leader alone. (`acks=0` is not supported: this producer always waits
    /// for an answer.)
    Leader,
    /// `acks=all` (or `-1`, the default): every in-sync replica.
    All,
}

impl Acks {
    pub(crate) fn wire(self) -> i16 {
        match self {
            Self::Leader => 1,
            Self::All => -1,
        }
    }
}

/// Settings of a [`KafkaProducer`](crate::producer::KafkaProducer), with the Java producer's
/// names and defaults.
///
/// Idempotence is on by default (`enable.idempotence=true`, `acks=all`); a transactional id
/// implies it. Settings that contradict each other (idempotence with `acks=1`, a
/// transactional id without idempotence, more than 5 requests in flight with idempotence)
/// are refused by [`validate`](Self::validate), which `connect` calls.
///
/// ```
/// use kafka_share_sink::producer::KafkaProducerConfig;
/// use std::time::Duration;
/// let config = KafkaProducerConfig::new("127.0.0.1:9092")
///     .linger(Duration::from_millis(5))
///     .transactional_id("orders-writer-0");
/// config.validate()?;
///
/// let mut from_keys = KafkaProducerConfig::new("127.0.0.1:9092");
/// from_keys.set("compression.type", "zstd")?;
/// assert!(from_keys.set("acks", "2").is_err());
/// # Ok::<(), kafka_share_sink::producer::ProducerError>(())
/// ```
#[derive(Debug, Clone)]
pub struct KafkaProducerConfig {
    pub(crate) bootstrap: String,
    pub(crate) client_id: String,
    pub(crate) acks: Acks,
    /// `None` when not set explicitly: then true unless `acks=1`.
    pub(crate) idempotence: Option<bool>,
    pub(crate) acks_explicit: bool,
    pub(crate) transactional_id: Option<String>,
    pub(crate) transaction_timeout: Duration,
    pub(crate) delivery_timeout: Duration,
    pub(crate) linger: Duration,
    pub(crate) batch_size: usize,
    pub(crate) max_request_size: usize,
    pub(crate) compression: Compression,
    pub(crate) max_in_flight: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) retry_backoff: Duration,
    pub(crate) retry_backoff_max: Duration,
    /// `buffer.memory`: the bytes of records not yet written past which
    /// [`ready`](crate::producer::Producer::ready) waits.
    pub(crate) buffer_memory: usize,
    /// `max.block.ms`: how long [`ready`](crate::producer::Producer::ready) waits at most.
    pub(crate) max_block: Duration,
    pub(crate) security: Security,
}

fn config_error(key: &str, reason: impl Into<String>) -> ProducerError {
    ProducerError::Config {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

fn parse_ms(key: &str, value: &str, min: u64) -> Result<Duration, ProducerError> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms >= min => Ok(Duration::from_millis(ms)),
        _ => Err(config_error(
            key,
            format!("`{value}` is not a number of milliseconds >= {min}"),
        )),
    }
}

fn parse_count(key: &str, value: &str, min: usize, max: usize) -> Result<usize, ProducerError> {
    match value.trim().parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(config_error(
            key,
            format!("`{value}` is not a whole number between {min} and {max}"),
        )),
    }
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ProducerError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(config_error(
            key,
            format!("`{value}` is not `true` or `false`"),
        )),
    }
}

impl KafkaProducerConfig {
    /// `bootstrap.servers` (comma-separated `host:port`), Java's defaults otherwise.
    pub fn new(bootstrap: impl Into<String>) -> Self {
        Self {
            bootstrap: bootstrap.into(),
            client_id: "kafka-share-sink-producer".to_owned(),
            acks: Acks::All,
            idempotence: None,
            acks_explicit: false,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
            delivery_timeout: Duration::from_secs(120),
            linger: Duration::from_millis(5),
            batch_size: 16_384,
            max_request_size: 1_048_576,
            compression: Compression::None,
            max_in_flight: MAX_IN_FLIGHT_IDEMPOTENT,
            request_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            buffer_memory: 32 * 1024 * 1024,
            max_block: Duration::from_secs(60),
            security: Security::plaintext(),
        }
    }

    /// Reads Java's keys: `bootstrap.servers` (required) and any of the keys [`set`](Self::set)
    /// takes. Errors name the key.
    ///
    /// # Errors
    ///
    /// [`ProducerError::Config`] for a missing `bootstrap.servers`, an unknown key, or a value
    /// out of range.
    pub fn from_properties(props: &Properties) -> Result<Self, ProducerError> {
        let bootstrap = props
            .get("bootstrap.servers")
            .filter(|b| !b.trim().is_empty())
            .ok_or_else(|| config_error("bootstrap.servers", "is required (host:port,...)"))?;
        let mut config = Self::new(bootstrap);
        let mut security = Properties::new();
        for (key, value) in props.iter() {
            if crate::kafka::security::keys::is_known(key) {
                security.insert(key, value);
            } else {
                config.set(key, value)?;
            }
        }
        if !security.is_empty() {
            config.security = Security::from_properties(&security)
                .map_err(|e| config_error(e.key().unwrap_or("security.protocol"), e.to_string()))?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets one setting by its Java name: `bootstrap.servers`, `client.id`, `acks` (`all`,
    /// `-1`, `1`), `enable.idempotence`, `transactional.id`, `transaction.timeout.ms`,
    /// `delivery.timeout.ms`, `linger.ms`, `batch.size`, `max.request.size`,
    /// `compression.type` (`none`, `gzip`, `snappy`, `lz4`, `zstd`),
    /// `max.in.flight.requests.per.connection`, `request.timeout.ms`, `retry.backoff.ms`,
    /// `retry.backoff.max.ms`, `buffer.memory`, `max.block.ms`. Security keys go through
    /// [`from_properties`](Self::from_properties) or [`security`](Self::security).
    ///
    /// # Errors
    ///
    /// [`ProducerError::Config`] naming the key and what it accepts.
    pub fn set(&mut self, key: &str, value: &str) -> Result<&mut Self, ProducerError> {
        match key {
            "bootstrap.servers" => self.bootstrap = value.trim().to_owned(),
            "client.id" => self.client_id = value.trim().to_owned(),
            "acks" => {
                self.acks = match value.trim().to_ascii_lowercase().as_str() {
                    "all" | "-1" => Acks::All,
                    "1" => Acks::Leader,
                    _ => {
                        return Err(config_error(
                            key,
                            format!("`{value}` is not accepted: use `all` (or `-1`) or `1`"),
                        ));
                    }
                };
                self.acks_explicit = true;
            }
            "enable.idempotence" => self.idempotence = Some(parse_bool(key, value)?),
            "transactional.id" => {
                let id = value.trim();
                self.transactional_id = (!id.is_empty()).then(|| id.to_owned());
            }
            "transaction.timeout.ms" => {
                self.transaction_timeout = parse_ms(key, value, 1)?;
                if self.transaction_timeout.as_millis() > i32::MAX as u128 {
                    return Err(config_error(key, "must fit in 32 bits of milliseconds"));
                }
            }
            "delivery.timeout.ms" => self.delivery_timeout = parse_ms(key, value, 1)?,
            "linger.ms" => self.linger = parse_ms(key, value, 0)?,
            "batch.size" => self.batch_size = parse_count(key, value, 0, 1 << 30)?,
            "max.request.size" => {
                self.max_request_size = parse_count(key, value, 1024, 1 << 30)?;
            }
            "compression.type" => {
                self.compression = match value.trim().to_ascii_lowercase().as_str() {
                    "none" => Compression::None,
                    "gzip" => Compression::Gzip,
                    "snappy" => Compression::Snappy,
                    "lz4" => Compression::Lz4,
                    "zstd" => Compression::Zstd,
                    _ => {
                        return Err(config_error(
                            key,
                            format!(
                                "`{value}` is not a codec: use none, gzip, snappy, lz4 or zstd"
                            ),
                        ));
                    }
                };
            }
            "max.in.flight.requests.per.connection" => {
                self.max_in_flight = parse_count(key, value, 1, 1000)?;
            }
            "request.timeout.ms" => self.request_timeout = parse_ms(key, value, 1)?,
            "retry.backoff.ms" => self.retry_backoff = parse_ms(key, value, 0)?,
            "retry.backoff.max.ms" => self.retry_backoff_max = parse_ms(key, value, 0)?,
            "buffer.memory" => self.buffer_memory = parse_count(key, value, 1, usize::MAX)?,
            "max.block.ms" => self.max_block = parse_ms(key, value, 0)?,
            // Java producer keys without an effect here, accepted so that Java configs load.
            "retries"
            | "partitioner.ignore.keys"
            | "metadata.max.age.ms"
            | "send.buffer.bytes"
            | "receive.buffer.bytes"
            | "key.serializer"
            | "value.serializer" => {}
            _ => {
                return Err(config_error(
                    &shown_key(key),
                    "is not a producer setting this client knows (see KafkaProducerConfig::set)",
                ));
            }
        }
        Ok(self)
    }

    /// `client.id`.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = id.into();
        self
    }

    /// `acks`: [`Acks::All`] (default) or [`Acks::Leader`] (needs idempotence off).
    pub fn acks(mut self, acks: Acks) -> Self {
        self.acks = acks;
        self.acks_explicit = true;
        self
    }

    /// `enable.idempotence` (default true).
    pub fn idempotence(mut self, on: bool) -> Self {
        self.idempotence = Some(on);
        self
    }

    /// `transactional.id`: makes the producer transactional (and idempotent).
    pub fn transactional_id(mut self, id: impl Into<String>) -> Self {
        self.transactional_id = Some(id.into());
        self
    }

    /// `transaction.timeout.ms` (default 60 s): the coordinator aborts a transaction open
    /// longer than this.
    pub fn transaction_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }

    /// `delivery.timeout.ms` (default 120 s): the bound on each record's delivery, retries
    /// included.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// `buffer.memory` (default 32 MiB, as Java's): the bytes of records sent and not yet
    /// written (or failed) past which [`Producer::ready`](crate::producer::Producer::ready)
    /// waits, and the largest record [`send`](crate::producer::Producer::send) takes.
    pub fn buffer_memory(mut self, bytes: usize) -> Self {
        self.buffer_memory = bytes;
        self
    }

    /// `max.block.ms` (default 60 s, as Java's): how long
    /// [`Producer::ready`](crate::producer::Producer::ready) waits at most for the buffer to
    /// have room.
    pub fn max_block(mut self, timeout: Duration) -> Self {
        self.max_block = timeout;
        self
    }

    /// `linger.ms` (default 5 ms): how long a batch waits for more records.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// `batch.size` (default 16384): a batch is sent once it holds this many bytes.
    ///
    /// Unlike Java's producer, a batch whose partition cannot send it yet (a batch waits
    /// ahead of it, or `max.in.flight.requests.per.connection` batches of the partition are
    /// in flight) goes on taking records past `batch.size`, up to the smaller of
    /// `max.request.size` and 256 KiB (within the broker's default `message.max.bytes`): a burst, such
    /// as a transaction's records before its commit, then goes out in a few full requests
    /// instead of one `batch.size` per round trip. A batch grows no larger than its topic's
    /// `max.message.bytes`, read once with the topic's first metadata (DescribeConfigs); where
    /// it cannot be read (no DESCRIBE_CONFIGS permission), a grown batch over the topic's
    /// limit is refused (MESSAGE_TOO_LARGE), split and sent again, as Java's producer does,
    /// and the topic's batches grow no more; only a single record over the limit fails.
    pub fn batch_size(mut self, bytes: usize) -> Self {
        self.batch_size = bytes;
        self
    }

    /// `max.request.size` (default 1 MiB): the largest record accepted.
    pub fn max_request_size(mut self, bytes: usize) -> Self {
        self.max_request_size = bytes;
        self
    }

    /// `compression.type` by name: `none` (default), `gzip`, `snappy`, `lz4`, `zstd`.
    ///
    /// # Errors
    ///
    /// [`ProducerError::Config`] for another name.
    pub fn compression(mut self, codec: &str) -> Result<Self, ProducerError> {
        self.set("compression.type", codec)?;
        Ok(self)
    }

    /// `max.in.flight.requests.per.connection` (default 5; at most 5 with idempotence).
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.max_in_flight = requests;
        self
    }

    /// `request.timeout.ms` (default 30 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// `retry.backoff.ms` (default 100 ms) and `retry.backoff.max.ms` (default 1 s).
    pub fn retry_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.retry_backoff = first;
        self.retry_backoff_max = max;
        self
    }

    /// `security.protocol` with its TLS and SASL settings (default `PLAINTEXT`).
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// The transactional id, if any.
    pub fn transactional_id_value(&self) -> Option<&str> {
        self.transactional_id.as_deref()
    }

    /// True when the producer will be idempotent: explicitly, by default (unless `acks=1`
    /// was set explicitly), or because it is transactional.
    pub fn is_idempotent(&self) -> bool {
        match self.idempotence {
            Some(on) => on,
            None => self.transactional_id.is_some() || self.acks == Acks::All,
        }
    }

    /// Checks the settings together, as Java's producer does.
    ///
    /// # Errors
    ///
    /// [`ProducerError::Config`] naming the setting that conflicts and what to change.
    pub fn validate(&self) -> Result<(), ProducerError> {
        if self.bootstrap.trim().is_empty() {
            return Err(config_error(
                "bootstrap.servers",
                "is required (host:port,...)",
            ));
        }
        if self.transactional_id.is_some() && self.idempotence == Some(false) {
            return Err(config_error(
                "enable.idempotence",
                "must be true (or unset) when transactional.id is set",
            ));
        }
        let idempotent = self.is_idempotent();
        if idempotent && self.acks != Acks::All {
            let key = if self.idempotence == Some(true) || self.transactional_id.is_some() {
                "acks"
            } else {
                "enable.idempotence"
            };
            return Err(config_error(
                key,
                "idempotence (and transactions) need acks=all: set acks=all or \
                 enable.idempotence=false",
            ));
        }
        if idempotent && self.max_in_flight > MAX_IN_FLIGHT_IDEMPOTENT {
            return Err(config_error(
                "max.in.flight.requests.per.connection",
                format!(
                    "{} is too many with idempotence: at most {MAX_IN_FLIGHT_IDEMPOTENT}",
                    self.max_in_flight
                ),
            ));
        }
        if self.max_in_flight == 0 {
            return Err(config_error(
                "max.in.flight.requests.per.connection",
                "must be at least 1",
            ));
        }
        if self.retry_backoff_max < self.retry_backoff {
            return Err(config_error(
                "retry.backoff.max.ms",
                "must not be below retry.backoff.ms",
            ));
        }
        if self.transaction_timeout.is_zero()
            || self.transaction_timeout.as_millis() > i32::MAX as u128
        {
            return Err(config_error(
                "transaction.timeout.ms",
                "must be between 1 and 2147483647",
            ));
        }
        if self.delivery_timeout.is_zero() {
            return Err(config_error("delivery.timeout.ms", "must be at least 1"));
        }
        if self.buffer_memory == 0 {
            return Err(config_error("buffer.memory", "must be at least 1"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(error: ProducerError) -> String {
        match error {
            ProducerError::Config { key, .. } => key,
            other => panic!("not a config error: {other:?}"),
        }
    }

    #[test]
    fn defaults_are_javas_idempotent_acks_all() {
        let config = KafkaProducerConfig::new("b:9092");
        assert!(config.is_idempotent());
        assert_eq!(config.acks, Acks::All);
        config.validate().expect("defaults are valid");
    }

    #[test]
    fn acks_one_alone_turns_default_idempotence_off() {
        let mut config = KafkaProducerConfig::new("b:9092");
        config.set("acks", "1").expect("acks=1");
        assert!(!config.is_idempotent());
        config
            .validate()
            .expect("acks=1 without explicit idempotence");
        config.set("enable.idempotence", "true").expect("bool");
        assert_eq!(key_of(config.validate().unwrap_err()), "acks");
    }

    #[test]
    fn transactional_id_implies_idempotence_and_conflicts_with_it_off() {
        let mut config = KafkaProducerConfig::new("b:9092");
        config.set("transactional.id", "t").expect("id");
        assert!(config.is_idempotent());
        config.set("enable.idempotence", "false").expect("bool");
        assert_eq!(key_of(config.validate().unwrap_err()), "enable.idempotence");
    }

    #[test]
    fn bad_values_name_the_key_and_what_is_accepted() {
        let mut config = KafkaProducerConfig::new("b:9092");
        for (key, value, hint) in [
            ("acks", "0", "all"),
            ("compression.type", "brotli", "zstd"),
            ("linger.ms", "-1", "milliseconds"),
            ("enable.idempotence", "yes", "true"),
            ("batch.size", "x", "whole number"),
            ("buffer.memory", "0", "whole number"),
            ("max.block.ms", "-5", "milliseconds"),
            ("no.such.key", "1", "not a producer setting"),
        ] {
            let error = config.set(key, value).map(|_| ()).unwrap_err();
            let text = error.to_string();
            assert_eq!(key_of(error), key);
            assert!(text.contains(hint), "{text}");
        }
    }

    #[test]
    fn buffer_memory_and_max_block_are_read_with_javas_defaults() {
        let mut config = KafkaProducerConfig::new("b:9092");
        assert_eq!(config.buffer_memory, 33_554_432);
        assert_eq!(config.max_block, Duration::from_secs(60));
        config
            .set("buffer.memory", "1048576")
            .expect("buffer.memory");
        config.set("max.block.ms", "0").expect("max.block.ms");
        assert_eq!(config.buffer_memory, 1_048_576);
        assert_eq!(config.max_block, Duration::ZERO);
        config.validate().expect("valid");
        assert_eq!(
            key_of(config.clone().buffer_memory(0).validate().unwrap_err()),
            "buffer.memory"
        );
    }

    #[test]
    fn more_than_five_in_flight_needs_idempotence_off() {
        let mut config = KafkaProducerConfig::new("b:9092");
        config
            .set("max.in.flight.requests.per.connection", "6")
            .expect("a count");
        assert_eq!(
            key_of(config.validate().unwrap_err()),
            "max.in.flight.requests.per.connection"
        );
        config.set("enable.idempotence", "false").expect("bool");
        config.validate().expect("6 without idempotence");
    }

    #[test]
    fn from_properties_reads_every_key_and_the_security_keys() {
        let props = Properties::parse(
            "bootstrap.servers=a:1,b:2\nacks=all\nenable.idempotence=true\n\
             transactional.id=tx-1\ntransaction.timeout.ms=2000\ndelivery.timeout.ms=5000\n\
             linger.ms=0\nbatch.size=100\ncompression.type=lz4\n\
             max.in.flight.requests.per.connection=3\nrequest.timeout.ms=1000\n\
             retry.backoff.ms=10\nretry.backoff.max.ms=20\nclient.id=me\n\
             security.protocol=PLAINTEXT\n",
        )
        .expect("parse");
        let config = KafkaProducerConfig::from_properties(&props).expect("valid");
        assert_eq!(config.bootstrap, "a:1,b:2");
        assert_eq!(config.transactional_id_value(), Some("tx-1"));
        assert_eq!(config.transaction_timeout, Duration::from_secs(2));
        assert_eq!(config.delivery_timeout, Duration::from_secs(5));
        assert_eq!(config.linger, Duration::ZERO);
        assert_eq!(config.batch_size, 100);
        assert_eq!(config.compression, Compression::Lz4);
        assert_eq!(config.max_in_flight, 3);
        assert_eq!(config.retry_backoff_max, Duration::from_millis(20));
        assert_eq!(config.client_id, "me");

        let bad =
            Properties::parse("bootstrap.servers=a:1\nsecurity.protocol=BOGUS\n").expect("parse");
        assert_eq!(
            key_of(KafkaProducerConfig::from_properties(&bad).unwrap_err()),
            "security.protocol"
        );
        let none = Properties::parse("acks=all\n").expect("parse");
        assert_eq!(
            key_of(KafkaProducerConfig::from_properties(&none).unwrap_err()),
            "bootstrap.servers"
        );
    }
}
