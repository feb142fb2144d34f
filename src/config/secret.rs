//! Which settings are secrets, and how their values are shown: never.

use std::borrow::Cow;
use std::fmt;

/// What a secret value is replaced with wherever a setting is shown.
pub(crate) const REDACTED: &str = "[redacted]";

/// True when the value of `key` must never be shown, with or without a client or plugin
/// prefix: `sasl.jaas.config`, any `*.password` and `*.passphrase`, `basic.auth.user.info`,
/// `ssl.keystore.key`, `ssl.keystore.certificate.chain`, `ssl.truststore.certificates` (Java
/// classes these as passwords too), any `*.key` (`snowflake.private.key`,
/// `azblob.account.key`), any key containing `secret`, and any containing `token`,
/// `credential`, `apikey` or `api.key` (`bearer.auth.token`, `splunk.hec.token`) unless it
/// names where or what kind a credential is (ending in `.url`, `.uri`, `.endpoint`, `.id`,
/// `.class`, `.type`: `sasl.oauthbearer.token.endpoint.url`). Case is ignored. A sink's own
/// settings are not declared to this crate, so the rule errs on the side of hiding: a value
/// hidden for nothing costs a look at the file, a value shown can cost a credential.
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
        || named("passphrase")
        || named("key")
        || named("ssl.keystore.certificate.chain")
        || named("ssl.truststore.certificates")
        || key.contains("secret")
        || (["token", "credential", "apikey", "api.key"]
            .iter()
            .any(|part| key.contains(part))
            // Where to find a credential, or its kind, is no credential (a URL's own
            // password is hidden anyway, see `shown`).
            && ![".url", ".uri", ".endpoint", ".id", ".class", ".type"]
                .iter()
                .any(|end| key.ends_with(end)))
}

/// The value of `key` as it may be shown in a message or log: redacted for a secret,
/// otherwise with the password of any `scheme://user:password@host` hidden and control
/// characters escaped (so a value cannot forge log lines).
pub(crate) fn shown(key: &str, value: &str) -> String {
    visible(key, value).escape_debug().to_string()
}

/// The value of `key` with what must not be shown replaced: [`REDACTED`] for a secret, the
/// password of a URL's user information otherwise.
pub(crate) fn visible<'a>(key: &str, value: &'a str) -> Cow<'a, str> {
    if is_secret(key) {
        Cow::Borrowed(REDACTED)
    } else {
        without_url_passwords(value)
    }
}

/// `value` with the passwords it holds replaced by [`REDACTED`]: that of every
/// `scheme://user:password@host` (`connection.url=mongodb://app:hunter2@db:27017`), and the
/// value of every parameter whose name says it is one (`password=`, `pwd=`, a secret's name,
/// see [`is_secret`]) in a query or a `;`-separated list
/// (`jdbc:sqlserver://db;user=app;password=hunter2`, `jdbc:postgresql://db/x?password=hunter2`).
fn without_url_passwords(value: &str) -> Cow<'_, str> {
    match without_password_parameters(value) {
        Cow::Borrowed(_) => without_userinfo_passwords(value),
        Cow::Owned(masked) => Cow::Owned(without_userinfo_passwords(&masked).into_owned()),
    }
}

/// `value` with the value of each `name=value` parameter whose name is a password's replaced
/// (parameters are separated by `;`, `&` or `?`, as in JDBC URLs and queries).
fn without_password_parameters(value: &str) -> Cow<'_, str> {
    if !value.contains('=') {
        return Cow::Borrowed(value);
    }
    let secret_name = |name: &str| {
        let name = name.trim().to_ascii_lowercase();
        name.contains("password") || name.contains("passwd") || name == "pwd" || is_secret(&name)
    };
    let separator = |piece: &str| {
        piece
            .chars()
            .last()
            .filter(|c| matches!(c, ';' | '&' | '?'))
    };
    let mut out = String::with_capacity(value.len());
    let mut changed = false;
    // After a password, the separator that ends it: pieces up to the next `name=` are taken
    // for the rest of the password (which may hold a separator: `password=Pa;ss&w0rd`).
    let mut in_password: Option<Option<char>> = None;
    for piece in value.split_inclusive([';', '&', '?']) {
        let parameter = piece.split_once('=');
        if parameter.is_none() {
            if let Some(end) = in_password.as_mut() {
                *end = separator(piece);
                continue;
            }
        }
        if let Some(end) = in_password.take().flatten() {
            out.push(end);
        }
        match parameter {
            Some((name, rest)) if secret_name(name) => {
                out.push_str(name);
                out.push('=');
                out.push_str(REDACTED);
                in_password = Some(separator(rest));
                changed = true;
            }
            _ => out.push_str(piece),
        }
    }
    if let Some(end) = in_password.flatten() {
        out.push(end);
    }
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(value)
    }
}

/// `value` with the password of every `scheme://user:password@host` in it replaced.
fn without_userinfo_passwords(value: &str) -> Cow<'_, str> {
    if !value.contains("://") {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let authority_start = at + 3;
        out.push_str(&rest[..authority_start]);
        let after = &rest[authority_start..];
        // The authority ends at the path, the query, the fragment, a blank or a list's comma.
        let authority_len = after
            .find(|c: char| matches!(c, '/' | '?' | '#' | ',' | ';') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..authority_len];
        match authority.rfind('@') {
            Some(user_end) => {
                let userinfo = &authority[..user_end];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..=colon]);
                        out.push_str(REDACTED);
                        changed = true;
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[user_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[authority_len..];
    }
    out.push_str(rest);
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(value)
    }
}

/// A key as it may be shown in a message or log: as written when it reads like the name of
/// a setting, otherwise only its length. A value cut at a line end goes on as keys of its own
/// (the second line of a PEM key, of a JAAS entry, see [`Properties::parse`]): such a key is
/// secret material, and an unknown key is warned about.
///
/// [`Properties::parse`]: super::Properties::parse
pub(crate) fn shown_key(key: &str) -> String {
    if reads_like_a_setting(key) {
        key.to_owned()
    } else {
        format!(
            "[a key of {} characters that is no setting's name: a value cut at a line end?]",
            key.chars().count()
        )
    }
}

/// True for a setting's name: letters, digits, `.`, `-` and `_`, at most 128 of them, and a
/// `.` in it unless it is short (`name`, `topics`, a sink's `file`).
fn reads_like_a_setting(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 128
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        && (key.contains('.') || key.len() <= 24)
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
                map.entry(&key, &without_url_passwords(value));
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
    fn secrets_a_sink_may_have_are_recognised_too() {
        for key in [
            "snowflake.private.key",
            "azblob.account.key",
            "splunk.hec.token",
            "auth.token",
            "gcs.credentials.json",
            "datadog.apikey",
            "http.api.key",
            "key",
        ] {
            assert!(is_secret(key), "{key} should be secret");
        }
        for key in [
            "sasl.oauthbearer.token.endpoint.url",
            "sasl.oauthbearer.client.credentials.client.id",
            "aws.credentials.provider.class",
            "key.converter",
            "ssl.key.type",
            "keys",
            "topics",
            "connection.url",
        ] {
            assert!(!is_secret(key), "{key} should not be secret");
        }
    }

    #[test]
    fn url_passwords_are_hidden_in_values_that_are_no_secret() {
        assert_eq!(
            shown(
                "connection.url",
                "mongodb://app:hunter2@db:27017/orders?x=1"
            ),
            "mongodb://app:[redacted]@db:27017/orders?x=1"
        );
        assert_eq!(
            shown(
                "hosts",
                "http://a:p1@h1:9200,https://b:p:2@h2, http://h3, ftp://user@h4"
            ),
            "http://a:[redacted]@h1:9200,https://b:[redacted]@h2, http://h3, ftp://user@h4"
        );
        assert_eq!(
            shown("bootstrap.servers", "k1:9092,k2:9092"),
            "k1:9092,k2:9092"
        );
        let pairs = [("connection.url", "jdbc:postgresql://u:hunter2@db/x")];
        let debug = format!("{:?}", RedactedMap(pairs.iter().copied()));
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("u:[redacted]@db"), "{debug}");
    }

    #[test]
    fn password_parameters_are_hidden_in_values_that_are_no_secret() {
        for (value, expected) in [
            (
                "jdbc:sqlserver://db:1433;user=app;password=hunter2;encrypt=true",
                "jdbc:sqlserver://db:1433;user=app;password=[redacted];encrypt=true",
            ),
            (
                "jdbc:postgresql://db/x?user=app&password=hunter2",
                "jdbc:postgresql://db/x?user=app&password=[redacted]",
            ),
            (
                "jdbc:mysql://db/x?PWD=hunter2&sslMode=REQUIRED",
                "jdbc:mysql://db/x?PWD=[redacted]&sslMode=REQUIRED",
            ),
            (
                "user=app;sslpassword=hunter2",
                "user=app;sslpassword=[redacted]",
            ),
            ("a=1;b=2", "a=1;b=2"),
            (
                "jdbc:sqlserver://db;user=app;password=Pa&ss?w0rd;encrypt=true",
                "jdbc:sqlserver://db;user=app;password=[redacted];encrypt=true",
            ),
            (
                "jdbc:postgresql://db/x?password=ab;cd&user=app",
                "jdbc:postgresql://db/x?password=[redacted]&user=app",
            ),
            ("password=p;", "password=[redacted];"),
        ] {
            assert_eq!(shown("connection.url", value), expected);
        }
        let pairs = [(
            "connection.url",
            "jdbc:sqlserver://u:pw1@db;password=hunter2",
        )];
        let debug = format!("{:?}", RedactedMap(pairs.iter().copied()));
        assert!(
            !debug.contains("hunter2") && !debug.contains("pw1"),
            "{debug}"
        );
    }

    #[test]
    fn keys_that_are_no_settings_name_are_shown_by_length_only() {
        for key in [
            "name",
            "topics",
            "file",
            "consumer.override.max.poll.records",
            "a-b_c.d",
        ] {
            assert_eq!(shown_key(key), key);
        }
        for key in [
            "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQghzPtCG1OS3q9tSgj",
            "9UfN1CWv2pKCL1RcZFQApzLzt87QS8aigPAMXC++zgy8Wse1Xj3n7jlz",
            "Ab3+",
            "username=\"alice\"",
            "",
        ] {
            let shown = shown_key(key);
            assert!(shown.starts_with("[a key of"), "{shown}");
            assert!(key.is_empty() || !shown.contains(key), "{shown}");
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
