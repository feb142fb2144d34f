//! Reading plugin configs the way Kafka's `ConfigDef` parses them.

use std::collections::BTreeMap;

use super::PluginError;

/// A required string config, surrounding spaces removed: `ConfigDef` trims every string
/// value (a `.properties` file keeps trailing blanks, so `pattern=orders-.* ` would otherwise
/// never match).
pub(crate) fn required<'a>(
    configs: &'a BTreeMap<String, String>,
    key: &str,
) -> Result<&'a str, PluginError> {
    configs
        .get(key)
        .map(|value| value.trim())
        .ok_or_else(|| PluginError::missing_config(key))
}

/// A required string config that is not empty once trimmed (Connect's `NonEmptyString`).
pub(crate) fn required_non_empty<'a>(
    configs: &'a BTreeMap<String, String>,
    key: &str,
) -> Result<&'a str, PluginError> {
    let value = required(configs, key)?;
    if value.is_empty() {
        return Err(PluginError::invalid_config(
            key,
            value,
            "expected a non-empty string",
        ));
    }
    Ok(value)
}

/// A boolean config: `true` or `false`, any case, surrounding spaces ignored.
pub(crate) fn boolean(
    configs: &BTreeMap<String, String>,
    key: &str,
    default: bool,
) -> Result<bool, PluginError> {
    let Some(raw) = configs.get(key) else {
        return Ok(default);
    };
    let value = raw.trim();
    if value.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(PluginError::invalid_config(
            key,
            raw,
            "expected true or false",
        ))
    }
}

/// A non-negative integer config.
pub(crate) fn non_negative_int(
    configs: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<i32>, PluginError> {
    let Some(raw) = configs.get(key) else {
        return Ok(None);
    };
    match raw.trim().parse::<i32>() {
        Ok(n) if n >= 0 => Ok(Some(n)),
        _ => Err(PluginError::invalid_config(
            key,
            raw,
            "expected an integer from 0 to 2147483647",
        )),
    }
}

/// A required, non-empty, comma-separated list (entries trimmed, empty ones dropped).
pub(crate) fn non_empty_list(
    configs: &BTreeMap<String, String>,
    key: &str,
) -> Result<Vec<String>, PluginError> {
    let raw = configs
        .get(key)
        .ok_or_else(|| PluginError::missing_config(key))?;
    let list: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if list.is_empty() {
        return Err(PluginError::invalid_config(
            key,
            raw,
            "expected a non-empty comma-separated list",
        ));
    }
    Ok(list)
}

/// Plugin settings from `(key, value)` pairs, for the unit tests of plugins.
#[cfg(test)]
pub(crate) fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_parse_like_config_def() {
        let c = configs(&[("a", " TRUE "), ("b", "False"), ("c", "yes")]);
        assert!(boolean(&c, "a", false).unwrap());
        assert!(!boolean(&c, "b", true).unwrap());
        assert!(boolean(&c, "missing", true).unwrap());
        let err = boolean(&c, "c", true).unwrap_err().to_string();
        assert_eq!(
            err,
            "config `c` has invalid value `yes`: expected true or false"
        );
    }

    #[test]
    fn strings_are_trimmed_as_config_def_trims_them() {
        let c = configs(&[("a", " orders-.* "), ("b", "   "), ("c", "")]);
        assert_eq!(required(&c, "a").unwrap(), "orders-.*");
        assert_eq!(required_non_empty(&c, "a").unwrap(), "orders-.*");
        assert_eq!(required(&c, "b").unwrap(), "");
        for key in ["b", "c"] {
            assert!(matches!(
                required_non_empty(&c, key),
                Err(PluginError::InvalidConfig { .. })
            ));
        }
        assert!(matches!(
            required_non_empty(&c, "missing"),
            Err(PluginError::MissingConfig { .. })
        ));
    }

    #[test]
    fn lists_drop_empty_entries_and_must_not_be_empty() {
        let c = configs(&[("a", " x, ,y ,"), ("b", " , ")]);
        assert_eq!(non_empty_list(&c, "a").unwrap(), ["x", "y"]);
        assert!(non_empty_list(&c, "b").is_err());
        assert!(matches!(
            non_empty_list(&c, "missing"),
            Err(PluginError::MissingConfig { .. })
        ));
    }

    #[test]
    fn ints_must_be_non_negative() {
        let c = configs(&[("a", "10"), ("b", "-1"), ("c", "x")]);
        assert_eq!(non_negative_int(&c, "a").unwrap(), Some(10));
        assert!(non_negative_int(&c, "b").is_err());
        assert!(non_negative_int(&c, "c").is_err());
        assert_eq!(non_negative_int(&c, "d").unwrap(), None);
    }
}
