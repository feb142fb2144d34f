//! Which settings are secrets, and how their values are shown: never.

use std::fmt;

/// What a secret value is replaced with wherever a setting is shown.
pub(crate) const REDACTED: &str = "[redacted]";

/// True when the value of `key` must never be shown, with or without a client or plugin
/// prefix: `sasl.jaas.config`, any `*.password` and `*.passphrase`, `basic.auth.user.info`,
/// `bearer.auth.token`, `ssl.keystore.key`, `ssl.keystore.certificate.chain`,
/// `ssl.truststore.certificates` (Java classes these as passwords too), and any key
/// containing `secret`. Case is ignored.
pub(crate) fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let named = |name: &str| {
        key == name
            || key
                .strip_suffix(name)
                .is_some_and(|prefix| prefix.ends_with('.'))
    };
    named("sasl.jaas.config")
        || named("password")
        || named("basic.auth.user.info")
        || named("bearer.auth.token")
        || named("passphrase")
        || named("ssl.keystore.key")
        || named("ssl.keystore.certificate.chain")
        || named("ssl.truststore.certificates")
        || key.contains("secret")
}

/// The value of `key` as it may be shown in a message or log: redacted for a secret,
/// otherwise with control characters escaped (so a value cannot forge log lines).
pub(crate) fn shown(key: &str, value: &str) -> String {
    if is_secret(key) {
        REDACTED.to_owned()
    } else {
        value.escape_debug().to_string()
    }
}

/// `Debug` of key/value pairs as a map, with secret values redacted.
pub(crate) struct RedactedMap<I>(pub(crate) I);

impl<'a, I> fmt::Debug for RedactedMap<I>
where
    I: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (key, value) in self.0.clone() {
            if is_secret(key) {
                map.entry(&key, &Redacted);
            } else {
                map.entry(&key, &value);
            }
        }
        map.finish()
    }
}

/// Shown, unquoted, in place of a secret value.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised_with_and_without_prefixes() {
        for key in [
            "sasl.jaas.config",
            "consumer.override.sasl.jaas.config",
            "producer.SASL.JAAS.CONFIG",
            "ssl.truststore.password",
            "password",
            "connection.password",
            "value.converter.basic.auth.user.info",
            "sasl.oauthbearer.client.credentials.client.secret",
            "my.secret.thing",
            "ssl.keystore.key",
            "value.converter.bearer.auth.token",
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "producer.ssl.keystore.certificate.chain",
            "ssl.truststore.certificates",
        ] {
            assert!(is_secret(key), "{key} should be secret");
        }
        for key in [
            "sasl.mechanism",
            "passwords.enabled",
            "mypassword",
            "ssl.keystore.location",
            "bootstrap.servers",
            "xsasl.jaas.config",
        ] {
            assert!(!is_secret(key), "{key} should not be secret");
        }
    }

    #[test]
    fn shown_redacts_secrets_and_escapes_control_characters() {
        assert_eq!(shown("a.password", "hunter2"), REDACTED);
        assert_eq!(shown("name", "a\nb"), "a\\nb");
        let pairs = [("sasl.jaas.config", "hunter2"), ("acks", "all")];
        let debug = format!("{:?}", RedactedMap(pairs.iter().copied()));
        assert_eq!(debug, r#"{"sasl.jaas.config": [redacted], "acks": "all"}"#);
    }
}
