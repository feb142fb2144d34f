//! Typed values from strings, as Connect's `ConfigDef` reads them: surrounding whitespace is
//! ignored, booleans are `true`/`false` in any case, lists are comma-separated.

use std::time::Duration;

use super::error::ConfigError;

/// `true` or `false`, any case.
pub(crate) fn boolean(key: &str, raw: &str) -> Result<bool, ConfigError> {
    let value = raw.trim();
    if value.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(ConfigError::invalid(key, raw, "`true` or `false`"))
    }
}

/// A whole number between `min` and `max` (inclusive); `expected` describes the form.
pub(crate) fn whole(
    key: &str,
    raw: &str,
    min: i64,
    max: i64,
    expected: &str,
) -> Result<i64, ConfigError> {
    let value = raw
        .trim()
        .parse::<i64>()
        .map_err(|e| ConfigError::invalid_because(key, raw, expected, e))?;
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::invalid(key, raw, expected))
    }
}

/// The largest value of a Kafka `INT` setting, such as `request.timeout.ms`.
pub(crate) const INT_MAX: i64 = i32::MAX as i64;

/// The largest value of a Kafka `LONG` setting, such as `offset.flush.interval.ms`.
pub(crate) const LONG_MAX: i64 = i64::MAX;

/// A whole number of milliseconds from `min` (0 or more) to `max`: [`INT_MAX`] for a key
/// Kafka types `INT`, [`LONG_MAX`] for a `LONG` one, as Kafka refuses what its type cannot
/// hold. Durations this long are safe: deadlines built from them saturate.
pub(crate) fn millis(key: &str, raw: &str, min: u64, max: i64) -> Result<Duration, ConfigError> {
    let expected = match (min, max) {
        (0, LONG_MAX) => "a whole number of milliseconds, 0 or more".to_owned(),
        (min, LONG_MAX) => format!("a whole number of milliseconds, at least {min}"),
        (min, max) => format!("a whole number of milliseconds from {min} to {max}"),
    };
    let min = i64::try_from(min).unwrap_or(i64::MAX);
    let ms = whole(key, raw, min, max, &expected)?;
    Ok(Duration::from_millis(ms.unsigned_abs()))
}

/// Checks that the value of a `*.ms` key is a whole number, as Kafka's configs require.
pub(crate) fn check_ms_key(key: &str, raw: &str) -> Result<(), ConfigError> {
    if key.ends_with(".ms") {
        whole(
            key,
            raw,
            i64::MIN,
            i64::MAX,
            "a whole number of milliseconds (every `*.ms` setting is one)",
        )?;
    }
    Ok(())
}

/// A comma-separated list, entries trimmed, empty entries kept; an empty text is an empty
/// list (Connect's `LIST` type).
pub(crate) fn list(raw: &str) -> Vec<String> {
    let raw = raw.trim();
    if raw.is_empty() {
        Vec::new()
    } else {
        raw.split(',').map(|s| s.trim().to_owned()).collect()
    }
}

/// The expected form of a whole number in `min..=max`.
pub(crate) fn range_text(min: i64, max: i64) -> String {
    if max == i64::MAX {
        format!("a whole number, at least {min}")
    } else {
        format!("a whole number from {min} to {max}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans() {
        assert!(boolean("k", " TRUE ").unwrap());
        assert!(!boolean("k", "false").unwrap());
        let err = boolean("errors.log.enable", "yes").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`errors.log.enable` = `yes` is invalid: expected `true` or `false`"
        );
    }

    #[test]
    fn numbers_and_millis() {
        assert_eq!(whole("k", " 7 ", 1, 10, "x").unwrap(), 7);
        assert!(whole("k", "11", 1, 10, "x").is_err());
        let err = whole("k", "seven", 1, 10, "x").unwrap_err();
        assert!(std::error::Error::source(&err).is_some());
        assert_eq!(
            millis("k", "1500", 0, LONG_MAX).unwrap(),
            Duration::from_millis(1500)
        );
        assert!(millis("k", "-1", 0, LONG_MAX).is_err());
        assert!(millis("k", "0", 1, LONG_MAX).is_err());
        assert_eq!(
            millis("k", "9223372036854775807", 0, LONG_MAX).unwrap(),
            Duration::from_millis(i64::MAX.unsigned_abs())
        );
        assert!(millis("k", "2147483647", 0, INT_MAX).is_ok());
        let err = millis("request.timeout.ms", "2147483648", 0, INT_MAX).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`request.timeout.ms` = `2147483648` is invalid: expected a whole number of \
             milliseconds from 0 to 2147483647"
        );
        assert!(check_ms_key("fetch.max.wait.ms", "5s").is_err());
        assert!(check_ms_key("fetch.max.wait.ms", " -5 ").is_ok());
        assert!(check_ms_key("not.millis", "5s").is_ok());
    }

    #[test]
    fn lists() {
        assert!(list("  ").is_empty());
        assert_eq!(list(" a , b,,c "), ["a", "b", "", "c"]);
    }
}
