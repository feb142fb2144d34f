//! The dead-letter circuit breaker's settings (`errors.deadletterqueue.breaker.*`), read from
//! a connector config.

use super::error::ConfigError;
use super::keys::{
    DLQ_BREAKER_MAX_RATIO, DLQ_BREAKER_MAX_RECORDS, DLQ_BREAKER_MIN_RECORDS, DLQ_BREAKER_WINDOW_MS,
};
use super::properties::Properties;
use super::value;
use crate::dlq::DeadLetterBreaker;

/// The breaker of `connector`: [`DeadLetterBreaker::default`] changed by each key set.
///
/// - `errors.deadletterqueue.breaker.max.records`: -1 (no count bound, the default) or a
///   whole number, 0 or more.
/// - `errors.deadletterqueue.breaker.max.ratio`: a decimal from 0 to 1 (default 0.5; 1 turns
///   the share bound off).
/// - `errors.deadletterqueue.breaker.min.records`: a whole number, at least 1 (default 100).
/// - `errors.deadletterqueue.breaker.window.ms`: at least 1 (default 600000).
pub(crate) fn dead_letter_breaker(
    connector: &Properties,
) -> Result<DeadLetterBreaker, ConfigError> {
    let mut breaker = DeadLetterBreaker::default();
    if let Some(raw) = connector.get(DLQ_BREAKER_MAX_RECORDS) {
        let max = value::whole(
            DLQ_BREAKER_MAX_RECORDS,
            raw,
            -1,
            value::LONG_MAX,
            "-1 (no bound) or a whole number of records, 0 or more",
        )?;
        breaker = breaker.max_records(u64::try_from(max).ok());
    }
    if let Some(raw) = connector.get(DLQ_BREAKER_MAX_RATIO) {
        let expected = "a decimal number from 0 to 1 (1: no bound)";
        let ratio = raw
            .trim()
            .parse::<f64>()
            .map_err(|e| ConfigError::invalid_because(DLQ_BREAKER_MAX_RATIO, raw, expected, e))?;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(ConfigError::invalid(DLQ_BREAKER_MAX_RATIO, raw, expected));
        }
        breaker = breaker.max_ratio(Some(ratio));
    }
    if let Some(raw) = connector.get(DLQ_BREAKER_MIN_RECORDS) {
        let min = value::whole(
            DLQ_BREAKER_MIN_RECORDS,
            raw,
            1,
            value::LONG_MAX,
            "a whole number of records, at least 1",
        )?;
        breaker = breaker.min_records(min.unsigned_abs());
    }
    if let Some(raw) = connector.get(DLQ_BREAKER_WINDOW_MS) {
        let window = value::millis(DLQ_BREAKER_WINDOW_MS, raw, 1, value::LONG_MAX)?;
        breaker = breaker.window(window);
    }
    Ok(breaker)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs.iter().copied().collect()
    }

    #[test]
    fn defaults_and_each_key() {
        assert_eq!(
            dead_letter_breaker(&Properties::new()).unwrap(),
            DeadLetterBreaker::default()
        );
        let breaker = dead_letter_breaker(&props(&[
            ("errors.deadletterqueue.breaker.max.records", " 250 "),
            ("errors.deadletterqueue.breaker.max.ratio", "0.25"),
            ("errors.deadletterqueue.breaker.min.records", "20"),
            ("errors.deadletterqueue.breaker.window.ms", "30000"),
        ]))
        .unwrap();
        assert_eq!(breaker.max_records_value(), Some(250));
        assert_eq!(breaker.max_ratio_value(), Some(0.25));
        assert_eq!(breaker.min_records_value(), 20);
        assert_eq!(breaker.window_value(), Duration::from_secs(30));
        let off = dead_letter_breaker(&props(&[
            ("errors.deadletterqueue.breaker.max.records", "-1"),
            ("errors.deadletterqueue.breaker.max.ratio", "1"),
        ]))
        .unwrap();
        assert!(!off.is_enabled());
    }

    #[test]
    fn out_of_range_values_are_refused_naming_the_key() {
        for (key, raw) in [
            ("errors.deadletterqueue.breaker.max.records", "-2"),
            ("errors.deadletterqueue.breaker.max.ratio", "1.5"),
            ("errors.deadletterqueue.breaker.max.ratio", "NaN"),
            ("errors.deadletterqueue.breaker.max.ratio", "half"),
            ("errors.deadletterqueue.breaker.min.records", "0"),
            ("errors.deadletterqueue.breaker.window.ms", "0"),
        ] {
            let error = dead_letter_breaker(&props(&[(key, raw)])).unwrap_err();
            assert_eq!(error.key(), Some(key), "{raw}");
        }
    }
}
