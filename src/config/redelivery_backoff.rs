//! `redelivery.backoff.ms` and `redelivery.backoff.max.ms`, read from a connector config.
//!
//! Named apart from the consumer's `retry.backoff.ms` and `retry.backoff.max.ms`, which pace
//! the client's own request retries and reach the consumer through `consumer.override.*`.

use std::time::Duration;

use super::error::ConfigError;
use super::keys::{REDELIVERY_BACKOFF_MAX_MS, REDELIVERY_BACKOFF_MS};
use super::properties::Properties;
use super::value;
use crate::{DEFAULT_REDELIVERY_BACKOFF, DEFAULT_REDELIVERY_BACKOFF_MAX};

/// The first delay and the cap. A cap set below the first delay is an error; the first
/// delay set alone above the default cap raises the cap to it.
pub(crate) fn redelivery_backoff(
    connector: &Properties,
) -> Result<(Duration, Duration), ConfigError> {
    let read = |key| {
        connector
            .get(key)
            .map(|raw| value::millis(key, raw, 0, value::LONG_MAX).map(|d| (raw, d)))
            .transpose()
    };
    let initial = read(REDELIVERY_BACKOFF_MS)?;
    let max = read(REDELIVERY_BACKOFF_MAX_MS)?;
    if let (Some((raw, initial)), Some((max_raw, max))) = (initial, max) {
        if max < initial {
            return Err(ConfigError::invalid(
                REDELIVERY_BACKOFF_MAX_MS,
                max_raw,
                format!(
                    "at least `{REDELIVERY_BACKOFF_MS}` ({}): the cap cannot be below the first \
                     delay; raise it or lower `{REDELIVERY_BACKOFF_MS}`",
                    raw.trim()
                ),
            ));
        }
    }
    let initial = initial.map_or(DEFAULT_REDELIVERY_BACKOFF, |(_, d)| d);
    let max = max.map_or(DEFAULT_REDELIVERY_BACKOFF_MAX.max(initial), |(_, d)| d);
    Ok((initial, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<(Duration, Duration), ConfigError> {
        redelivery_backoff(&pairs.iter().copied().collect())
    }

    #[test]
    fn defaults_settings_and_a_raised_cap() {
        let s = Duration::from_secs;
        assert_eq!(read(&[]).unwrap(), (s(3), s(60)));
        assert_eq!(
            read(&[
                ("redelivery.backoff.ms", "500"),
                ("redelivery.backoff.max.ms", "10000")
            ])
            .unwrap(),
            (Duration::from_millis(500), s(10))
        );
        assert_eq!(
            read(&[("redelivery.backoff.ms", "0")]).unwrap(),
            (Duration::ZERO, s(60)),
            "0 turns it off"
        );
        assert_eq!(
            read(&[("redelivery.backoff.ms", "120000")]).unwrap(),
            (s(120), s(120)),
            "alone above the default cap, it raises the cap"
        );
    }

    #[test]
    fn the_connector_config_knows_the_keys_and_carries_them_to_the_driver() {
        use crate::ConnectorConfig;
        use crate::driver::RedeliveryBackoff;
        let s = Duration::from_secs;
        let connector: Properties = [
            ("name", "s"),
            ("topics", "t"),
            ("redelivery.backoff.ms", "1000"),
            ("redelivery.backoff.max.ms", "8000"),
        ]
        .into_iter()
        .collect();
        let config = ConnectorConfig::from_properties(&connector).unwrap();
        assert!(
            config.unknown_keys().is_empty(),
            "{:?}",
            config.unknown_keys()
        );
        assert_eq!(config.redelivery_backoff(), (s(1), s(8)));
        assert_eq!(
            config.driver_config().redelivery_backoff,
            RedeliveryBackoff::new(s(1), s(8))
        );
        let built = ConnectorConfig::builder("s")
            .topics(["t"])
            .redelivery_backoff(s(1), s(8))
            .build()
            .unwrap();
        assert_eq!(built, config);
        let defaults = ConnectorConfig::from_properties(
            &[("name", "s"), ("topics", "t")].into_iter().collect(),
        )
        .unwrap();
        assert_eq!(
            defaults.driver_config().redelivery_backoff,
            RedeliveryBackoff::default()
        );
    }

    #[test]
    fn a_cap_below_the_first_delay_or_a_bad_number_names_the_key() {
        let err = read(&[
            ("redelivery.backoff.ms", "5000"),
            ("redelivery.backoff.max.ms", "1000"),
        ])
        .unwrap_err();
        assert_eq!(err.key(), Some("redelivery.backoff.max.ms"));
        assert!(
            err.to_string().contains("redelivery.backoff.ms` (5000)"),
            "{err}"
        );
        let err = read(&[("redelivery.backoff.ms", "-1")]).unwrap_err();
        assert_eq!(err.key(), Some("redelivery.backoff.ms"));
        let err = read(&[("redelivery.backoff.max.ms", "soon")]).unwrap_err();
        assert_eq!(err.key(), Some("redelivery.backoff.max.ms"));
    }
}
