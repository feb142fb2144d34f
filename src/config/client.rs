//! The settings of the Kafka clients a connector uses, resolved as Connect's worker does:
//! the share consumer, and the dead-letter queue's producer and admin client.

use std::collections::HashMap;
use std::time::Duration;

use crate::consumer::AcknowledgementMode;
use crate::kafka::ShareAcquireMode;
use crate::kafka::security::{Security, keys as security_keys};

use super::error::ConfigError;
use super::keys::{
    ACKNOWLEDGEMENT_MODE, ADMIN_OVERRIDE_PREFIX, ADMIN_PREFIX, BOOTSTRAP_SERVERS, CLIENT_ID,
    CONSUMER_OVERRIDE_PREFIX, CONSUMER_PREFIX, GROUP_ID, GROUP_PROTOCOL, PRODUCER_OVERRIDE_PREFIX,
    PRODUCER_PREFIX, SHARE_GROUP_ID, is_known_consumer_key, is_unused_consumer_key,
    share_unsupported,
};
use super::override_policy::ClientOverridePolicy;
use super::properties::Properties;
use super::value;

/// The typed consumer settings the native consumer takes, checked at resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConsumerSettings {
    pub(crate) client_id: String,
    pub(crate) max_poll_records: Option<i32>,
    pub(crate) fetch_min_bytes: Option<i32>,
    pub(crate) fetch_max_bytes: Option<i32>,
    pub(crate) fetch_max_wait: Option<Duration>,
    pub(crate) request_timeout: Option<Duration>,
    pub(crate) connect_timeout: Option<Duration>,
    /// `reconnect.backoff.ms`.
    pub(crate) reconnect_backoff: Option<Duration>,
    /// `reconnect.backoff.max.ms`.
    pub(crate) reconnect_backoff_max: Option<Duration>,
    /// `share.acquire.mode`.
    pub(crate) share_acquire_mode: Option<ShareAcquireMode>,
    /// `max.partition.fetch.bytes`.
    pub(crate) max_partition_fetch_bytes: Option<i32>,
    /// `security.protocol` with its `ssl.*` and `sasl.*` settings.
    pub(crate) security: Security,
}

/// The resolved client settings of one connector task.
#[derive(Debug)]
pub(crate) struct Clients {
    pub(crate) consumer: Properties,
    pub(crate) consumer_settings: ConsumerSettings,
    pub(crate) group_id: String,
    pub(crate) acknowledgement_mode: AcknowledgementMode,
    pub(crate) producer: Properties,
    /// The producer's `security.protocol` with its `ssl.*` and `sasl.*` settings.
    pub(crate) producer_security: Security,
    pub(crate) admin: Properties,
    /// Consumer keys (as written) that no share consumer knows.
    pub(crate) unknown: Vec<String>,
    /// Consumer keys (as written) that Java's share consumer knows and the native one does
    /// not use.
    pub(crate) unused: Vec<String>,
    /// Producer and admin keys (as written) that the dead-letter queue does not use.
    pub(crate) unused_by_dead_letter_queue: Vec<String>,
}

/// Where a merged consumer setting came from.
struct Origin {
    /// The key as written, with its prefix.
    written: String,
    /// True for a connector `consumer.override.*` key, false for a worker `consumer.*` one.
    is_override: bool,
}

impl Clients {
    pub(crate) fn resolve(
        worker: &Properties,
        connector: &Properties,
        policy: &ClientOverridePolicy,
        name: &str,
        task_id: u32,
    ) -> Result<Self, ConfigError> {
        let mut merged = Properties::new();
        let mut origins: HashMap<String, Origin> = HashMap::new();
        let mut unknown = Vec::new();
        let mut unused = Vec::new();
        let sources = [
            (worker, CONSUMER_PREFIX, false),
            (connector, CONSUMER_OVERRIDE_PREFIX, true),
        ];
        for (props, prefix, is_override) in sources {
            for (setting, raw) in props.with_prefix(prefix) {
                let written = format!("{prefix}{setting}");
                if setting == GROUP_PROTOCOL {
                    if !raw.trim().eq_ignore_ascii_case("share") {
                        return Err(ConfigError::NotShareGroup {
                            value: super::secret::shown(&written, raw),
                            key: written,
                        });
                    }
                } else if let Some(instead) = share_unsupported(setting) {
                    return Err(ConfigError::UnsupportedByShareGroup {
                        key: written,
                        instead: instead.to_owned(),
                    });
                }
                if is_override {
                    policy.check(&written, setting)?;
                }
                if setting == GROUP_PROTOCOL {
                    // The Connect-side switch; a share consumer refuses it.
                    continue;
                }
                if !is_known_consumer_key(setting) {
                    unknown.push(written.clone());
                } else if is_unused_consumer_key(setting) {
                    unused.push(written.clone());
                }
                if setting.is_empty() {
                    continue;
                }
                merged.insert(setting, raw);
                origins.insert(
                    setting.to_owned(),
                    Origin {
                        written,
                        is_override,
                    },
                );
            }
        }

        let written = |setting: &str| {
            origins
                .get(setting)
                .map_or(setting.to_owned(), |o| o.written.clone())
        };
        let group_id = connector_or_consumer(
            connector,
            SHARE_GROUP_ID,
            &merged,
            &origins,
            GROUP_ID,
            &format!("connect-{name}"),
            |a, b| a == b,
        )?;
        let mode_text = connector_or_consumer(
            connector,
            ACKNOWLEDGEMENT_MODE,
            &merged,
            &origins,
            ACKNOWLEDGEMENT_MODE,
            "explicit",
            str::eq_ignore_ascii_case,
        )?;
        let acknowledgement_mode = mode_text.parse::<AcknowledgementMode>().map_err(|e| {
            let key = if connector.contains_key(ACKNOWLEDGEMENT_MODE) {
                ACKNOWLEDGEMENT_MODE.to_owned()
            } else {
                written(ACKNOWLEDGEMENT_MODE)
            };
            ConfigError::invalid_because(&key, &mode_text, "`explicit` or `implicit`", e)
        })?;
        let client_id = merged.get(CLIENT_ID).map_or_else(
            || format!("connector-consumer-{name}-{task_id}"),
            str::to_owned,
        );

        let int = |setting: &str, min: i64| -> Result<Option<i32>, ConfigError> {
            merged
                .get(setting)
                .map(|raw| {
                    let key = written(setting);
                    let max = i64::from(i32::MAX);
                    value::whole(&key, raw, min, max, &value::range_text(min, max))
                        .map(|v| i32::try_from(v).unwrap_or(i32::MAX))
                })
                .transpose()
        };
        let ms = |setting: &str, max: i64| -> Result<Option<Duration>, ConfigError> {
            merged
                .get(setting)
                .map(|raw| value::millis(&written(setting), raw, 0, max))
                .transpose()
        };
        let consumer_settings = ConsumerSettings {
            client_id: client_id.clone(),
            max_poll_records: int("max.poll.records", 1)?,
            fetch_min_bytes: int("fetch.min.bytes", 0)?,
            fetch_max_bytes: int("fetch.max.bytes", 0)?,
            fetch_max_wait: ms("fetch.max.wait.ms", value::INT_MAX)?,
            request_timeout: ms("request.timeout.ms", value::INT_MAX)?,
            connect_timeout: ms("socket.connection.setup.timeout.ms", value::LONG_MAX)?,
            reconnect_backoff: ms("reconnect.backoff.ms", value::LONG_MAX)?,
            reconnect_backoff_max: ms("reconnect.backoff.max.ms", value::LONG_MAX)?,
            max_partition_fetch_bytes: int("max.partition.fetch.bytes", 1)?,
            share_acquire_mode: merged
                .get("share.acquire.mode")
                .map(|raw| {
                    raw.parse::<ShareAcquireMode>().map_err(|e| {
                        ConfigError::invalid_because(
                            &written("share.acquire.mode"),
                            raw,
                            "batch_optimized or record_limit",
                            e,
                        )
                    })
                })
                .transpose()?,
            security: security_keys::read(&merged, &written)?,
        };

        // Connect's own defaults first, then the merged settings over them.
        let mut consumer = Properties::new();
        if let Some(servers) = worker.get(BOOTSTRAP_SERVERS) {
            consumer.insert(BOOTSTRAP_SERVERS, servers);
        }
        consumer.insert(GROUP_ID, group_id.clone());
        consumer.insert(CLIENT_ID, client_id);
        consumer.insert(ACKNOWLEDGEMENT_MODE, acknowledgement_mode.to_string());
        for (setting, raw) in merged.iter() {
            if setting != GROUP_ID && setting != ACKNOWLEDGEMENT_MODE && setting != CLIENT_ID {
                consumer.insert(setting, raw);
            }
        }

        let mut producer = Properties::new();
        if let Some(servers) = worker.get(BOOTSTRAP_SERVERS) {
            producer.insert(BOOTSTRAP_SERVERS, servers);
        }
        producer.extend([
            (
                CLIENT_ID,
                format!("connector-dlq-producer-{name}-{task_id}"),
            ),
            ("acks", "all".to_owned()),
            ("enable.idempotence", "false".to_owned()),
            ("max.in.flight.requests.per.connection", "1".to_owned()),
            ("max.block.ms", i64::MAX.to_string()),
            ("delivery.timeout.ms", i32::MAX.to_string()),
        ]);
        let mut producer_origins = HashMap::new();
        layer(
            &mut producer,
            worker,
            PRODUCER_PREFIX,
            None,
            Some(&mut producer_origins),
        )?;
        layer(
            &mut producer,
            connector,
            PRODUCER_OVERRIDE_PREFIX,
            Some(policy),
            Some(&mut producer_origins),
        )?;
        let producer_security = security_keys::read(&producer, &|setting| {
            producer_origins
                .get(setting)
                .cloned()
                .unwrap_or_else(|| setting.to_owned())
        })?;

        // The dead-letter queue's producer takes its address, its delivery timeout and its
        // security settings from these; it keeps its own defaults for everything else.
        let mut unused_by_dead_letter_queue: Vec<String> = producer_origins
            .iter()
            .filter(|(setting, _)| {
                setting.as_str() != BOOTSTRAP_SERVERS
                    && setting.as_str() != "delivery.timeout.ms"
                    && !crate::kafka::security::keys::is_known(setting)
            })
            .map(|(_, written)| written.clone())
            .collect();
        // The topic is created over the producer's connection: no admin client is built.
        for (props, prefix) in [(worker, ADMIN_PREFIX), (connector, ADMIN_OVERRIDE_PREFIX)] {
            unused_by_dead_letter_queue.extend(
                props
                    .with_prefix(prefix)
                    .map(|(setting, _)| format!("{prefix}{setting}")),
            );
        }
        unused_by_dead_letter_queue.sort();

        let mut admin = Properties::new();
        if let Some(servers) = worker.get(BOOTSTRAP_SERVERS) {
            admin.insert(BOOTSTRAP_SERVERS, servers);
        }
        admin.insert(CLIENT_ID, "connector-dlq-adminclient-");
        for (key, raw) in worker.iter().filter(|(k, _)| {
            !k.starts_with(ADMIN_PREFIX)
                && !k.starts_with(PRODUCER_PREFIX)
                && !k.starts_with(CONSUMER_PREFIX)
        }) {
            admin.insert(key, raw);
        }
        layer(&mut admin, worker, ADMIN_PREFIX, None, None)?;
        layer(
            &mut admin,
            connector,
            ADMIN_OVERRIDE_PREFIX,
            Some(policy),
            None,
        )?;

        Ok(Self {
            consumer,
            consumer_settings,
            group_id,
            acknowledgement_mode,
            producer,
            producer_security,
            admin,
            unknown,
            unused,
            unused_by_dead_letter_queue,
        })
    }
}

/// Lays the `prefix` settings of `props` over `into`, prefix removed; `policy` checks each
/// one when they are connector overrides; `origins`, when given, learns the key each
/// setting was written as.
fn layer(
    into: &mut Properties,
    props: &Properties,
    prefix: &str,
    policy: Option<&ClientOverridePolicy>,
    mut origins: Option<&mut HashMap<String, String>>,
) -> Result<(), ConfigError> {
    for (setting, raw) in props.with_prefix(prefix) {
        let written = format!("{prefix}{setting}");
        if let Some(policy) = policy {
            policy.check(&written, setting)?;
        }
        if !setting.is_empty() {
            into.insert(setting, raw);
            if let Some(origins) = origins.as_deref_mut() {
                origins.insert(setting.to_owned(), written);
            }
        }
    }
    Ok(())
}

/// A setting with a connector key of its own (`share.group.id`) and a consumer key
/// (`group.id`): the connector key wins over a worker `consumer.*` value; a
/// `consumer.override.*` value that disagrees with it (by `same`, on trimmed values) is a
/// conflict. Either value is trimmed and must not be blank.
fn connector_or_consumer(
    connector: &Properties,
    connector_key: &str,
    merged: &Properties,
    origins: &HashMap<String, Origin>,
    setting: &str,
    default: &str,
    same: fn(&str, &str) -> bool,
) -> Result<String, ConfigError> {
    let own = connector.get(connector_key).map(|raw| (connector_key, raw));
    let consumer = merged.get(setting).map(|raw| {
        let origin = origins.get(setting);
        (
            origin.map_or(setting, |o| o.written.as_str()),
            raw,
            origin.is_some_and(|o| o.is_override),
        )
    });
    if let (Some((key, raw)), Some((other_key, other_raw, true))) = (own, consumer) {
        if !same(raw.trim(), other_raw.trim()) {
            return Err(ConfigError::conflict(key, raw, other_key, other_raw));
        }
    }
    let chosen = own.or(consumer.map(|(key, raw, _)| (key, raw)));
    match chosen {
        None => Ok(default.to_owned()),
        Some((key, raw)) if raw.trim().is_empty() => {
            Err(ConfigError::invalid(key, raw, "a non-empty value"))
        }
        Some((_, raw)) => Ok(raw.trim().to_owned()),
    }
}
