//! Java's security keys (`security.protocol`, `ssl.*`, `sasl.*`) read into a [`Security`],
//! with the checks Java makes and the ones this client needs (PEM only, the mechanisms it
//! speaks). Every error names the key as written and never shows a secret value.

use std::time::Duration;

use super::jaas;
use super::tls::CONVERSION_HINT;
use super::{ClientIdentity, Pem, SaslSettings, Secret, Security, SecurityProtocol, TlsSettings};
use crate::config::{ConfigError, Properties};

/// Java's client security keys this client knows (`SslConfigs`, `SaslConfigs`, and
/// `security.providers`). A key outside this list under `ssl.` or `sasl.` is unknown.
pub(crate) const KNOWN_KEYS: &[&str] = &[
    "security.protocol",
    "security.providers",
    "ssl.protocol",
    "ssl.enabled.protocols",
    "ssl.provider",
    "ssl.cipher.suites",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.endpoint.identification.algorithm",
    "ssl.secure.random.implementation",
    "ssl.engine.factory.class",
    "sasl.mechanism",
    "sasl.jaas.config",
    "sasl.client.callback.handler.class",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.kerberos.service.name",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
    "sasl.login.retry.backoff.max.ms",
    "sasl.login.retry.backoff.ms",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    "sasl.oauthbearer.clock.skew.seconds",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.header.urlencode",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.jwt.retriever.class",
    "sasl.oauthbearer.jwt.validator.class",
    "sasl.oauthbearer.assertion.algorithm",
    "sasl.oauthbearer.assertion.claim.aud",
    "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss",
    "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds",
    "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.file",
    "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.template.file",
];

/// Keys whose features this client lacks: any value is refused, with what to do instead.
const NOT_SUPPORTED: &[(&str, &str)] = &[
    (
        "sasl.login.callback.handler.class",
        "Java callback classes cannot run here: give the consumer a TokenProvider in code \
         (SaslSettings::oauthbearer), or use the unsecured login options in sasl.jaas.config",
    ),
    (
        "sasl.client.callback.handler.class",
        "Java callback classes cannot run here: give the consumer a TokenProvider in code \
         (SaslSettings::oauthbearer)",
    ),
    (
        "sasl.login.class",
        "Java login classes cannot run here; remove the key",
    ),
    (
        "sasl.oauthbearer.token.endpoint.url",
        "this client does not fetch OAuth tokens itself (OIDC client credentials): give the \
         consumer a TokenProvider in code (SaslSettings::oauthbearer) that fetches them",
    ),
    (
        "sasl.oauthbearer.jwt.retriever.class",
        "Java classes cannot run here: give the consumer a TokenProvider in code",
    ),
    (
        "ssl.engine.factory.class",
        "Java SSL engine factories cannot run here; this client uses rustls",
    ),
    (
        "ssl.provider",
        "this client uses rustls with the ring provider (or the rustls provider the \
         application installed); remove the key",
    ),
    (
        "security.providers",
        "this client uses rustls; install a rustls CryptoProvider in the application instead",
    ),
];

/// Keys that may stay at Java's default only.
const DEFAULT_ONLY: &[(&str, &[&str])] = &[
    ("ssl.keymanager.algorithm", &["SunX509", "PKIX"]),
    ("ssl.trustmanager.algorithm", &["PKIX", "SunX509"]),
    ("ssl.secure.random.implementation", &[]),
    ("ssl.cipher.suites", &[]),
];

const PLAIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
const SCRAM_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";
const OAUTH_MODULE: &str = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";

/// Reads the security settings of one client from `props` (keys without prefix); `written`
/// gives the key as the user wrote it (with its prefix), for errors.
pub(crate) fn read(
    props: &Properties,
    written: &dyn Fn(&str) -> String,
) -> Result<Security, ConfigError> {
    // A key that is not set (a missing mechanism, say) is named with the prefix that
    // `security.protocol` was written with.
    let prefix = written("security.protocol")
        .strip_suffix("security.protocol")
        .unwrap_or_default()
        .to_owned();
    let named = |key: &str| {
        if props.contains_key(key) {
            written(key)
        } else {
            format!("{prefix}{key}")
        }
    };
    let written: &dyn Fn(&str) -> String = &named;
    let protocol = match props.get("security.protocol") {
        None => SecurityProtocol::Plaintext,
        Some(raw) => raw.parse().map_err(|e| {
            ConfigError::invalid_because(
                &written("security.protocol"),
                raw,
                "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
                e,
            )
        })?,
    };
    // As in Java, `ssl.*` settings matter only with TLS and `sasl.*` ones only with SASL.
    let applies = |key: &str| {
        if key.starts_with("ssl.") {
            protocol.uses_tls()
        } else if key.starts_with("sasl.") {
            protocol.uses_sasl()
        } else {
            true
        }
    };
    let set = |key: &str| {
        props
            .get(key)
            .filter(|v| !v.trim().is_empty() && applies(key))
    };
    for (key, instead) in NOT_SUPPORTED {
        if set(key).is_some() {
            return Err(ConfigError::Unsupported {
                key: written(key),
                reason: (*instead).to_owned(),
            });
        }
    }
    for (key, allowed) in DEFAULT_ONLY {
        if let Some(raw) = set(key) {
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(raw.trim())) {
                return Err(ConfigError::Unsupported {
                    key: written(key),
                    reason: "this client uses rustls's defaults here; remove the key".to_owned(),
                });
            }
        }
    }
    let tls = if protocol.uses_tls() {
        Some(tls_settings(props, written)?)
    } else {
        None
    };
    let sasl = if protocol.uses_sasl() {
        let sasl = sasl_settings(props, written)?;
        if protocol == SecurityProtocol::SaslPlaintext && sasl.mechanism() == "PLAIN" {
            tracing::warn!(
                "sasl.mechanism=PLAIN over security.protocol=SASL_PLAINTEXT sends the password \
                 unencrypted; use SASL_SSL outside tests"
            );
        }
        Some(sasl)
    } else {
        None
    };
    Ok(Security {
        protocol,
        tls,
        sasl,
    })
}

/// `ssl.*.type`: unset or PEM; JKS and PKCS12 are refused with the conversion commands.
fn store_type(
    props: &Properties,
    key: &str,
    written: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    match props.get(key).map(str::trim) {
        None | Some("") => Ok(()),
        Some(t) if t.eq_ignore_ascii_case("PEM") => Ok(()),
        Some(t) if t.eq_ignore_ascii_case("JKS") || t.eq_ignore_ascii_case("PKCS12") => {
            Err(ConfigError::Unsupported {
                key: written(key),
                reason: format!("{t} stores are not read: {CONVERSION_HINT}, then set {key}=PEM"),
            })
        }
        Some(_) => Err(ConfigError::invalid(
            &written(key),
            props.get(key).unwrap_or_default(),
            "PEM (JKS and PKCS12 stores must be converted to PEM)",
        )),
    }
}

fn tls_settings(
    props: &Properties,
    written: &dyn Fn(&str) -> String,
) -> Result<TlsSettings, ConfigError> {
    let get = |key: &str| props.get(key).filter(|v| !v.trim().is_empty());
    store_type(props, "ssl.truststore.type", written)?;
    store_type(props, "ssl.keystore.type", written)?;
    for key in ["ssl.protocol", "ssl.enabled.protocols"] {
        if let Some(raw) = get(key) {
            let known = ["TLSv1.2", "TLSv1.3", "TLS"];
            if raw
                .split(',')
                .map(str::trim)
                .any(|p| !known.iter().any(|k| k.eq_ignore_ascii_case(p)))
            {
                return Err(ConfigError::invalid(
                    &written(key),
                    raw,
                    "TLSv1.2 and/or TLSv1.3 (older versions are not supported)",
                ));
            }
        }
    }
    let ca = match (
        get("ssl.truststore.location"),
        get("ssl.truststore.certificates"),
    ) {
        (Some(location), Some(certificates)) => {
            return Err(ConfigError::conflict(
                &written("ssl.truststore.location"),
                location,
                &written("ssl.truststore.certificates"),
                certificates,
            ));
        }
        (Some(location), None) => Some(Pem::File(location.trim().into())),
        (None, Some(certificates)) => Some(Pem::Inline(Secret::new(certificates))),
        (None, None) => None,
    };
    let client = match (
        get("ssl.keystore.location"),
        get("ssl.keystore.key"),
        get("ssl.keystore.certificate.chain"),
    ) {
        (Some(location), key, chain) if key.is_some() || chain.is_some() => {
            let (other, value) = match key {
                Some(key) => ("ssl.keystore.key", key),
                None => ("ssl.keystore.certificate.chain", chain.unwrap_or_default()),
            };
            return Err(ConfigError::conflict(
                &written("ssl.keystore.location"),
                location,
                &written(other),
                value,
            ));
        }
        (Some(location), _, _) => Some(ClientIdentity::File(location.trim().into())),
        (None, Some(key), Some(chain)) => Some(ClientIdentity::Inline {
            key: Secret::new(key),
            chain: Secret::new(chain),
        }),
        (None, Some(_), None) => {
            return Err(ConfigError::missing(
                written("ssl.keystore.certificate.chain"),
                "ssl.keystore.key is set: give the client certificate chain (PEM) too",
            ));
        }
        (None, None, Some(_)) => {
            return Err(ConfigError::missing(
                written("ssl.keystore.key"),
                "ssl.keystore.certificate.chain is set: give the private key (PEM) too",
            ));
        }
        (None, None, None) => None,
    };
    let verify_hostname = match props.get("ssl.endpoint.identification.algorithm") {
        None => true,
        Some(raw) if raw.trim().is_empty() => false,
        Some(raw) if raw.trim().eq_ignore_ascii_case("https") => true,
        Some(raw) => {
            return Err(ConfigError::invalid(
                &written("ssl.endpoint.identification.algorithm"),
                raw,
                "`https` (check the broker's host name, the default) or empty (do not)",
            ));
        }
    };
    Ok(TlsSettings {
        ca,
        client,
        key_password: get("ssl.key.password").map(Secret::new),
        verify_hostname,
    })
}

fn sasl_settings(
    props: &Properties,
    written: &dyn Fn(&str) -> String,
) -> Result<SaslSettings, ConfigError> {
    let mechanisms = "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER";
    let Some(raw) = props.get("sasl.mechanism").filter(|v| !v.trim().is_empty()) else {
        return Err(ConfigError::missing(
            written("sasl.mechanism"),
            format!(
                "security.protocol is SASL_*: set the mechanism ({mechanisms}); Java's default, \
                 GSSAPI (Kerberos), is not supported by this client"
            ),
        ));
    };
    let mechanism = raw.trim().to_ascii_uppercase();
    if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"].contains(&mechanism.as_str()) {
        return Err(ConfigError::Unsupported {
            key: written("sasl.mechanism"),
            reason: format!(
                "the SASL mechanism {} is not supported by this client; use {mechanisms} \
                 (Amazon MSK IAM: OAUTHBEARER with a token provider in code)",
                raw.trim().escape_debug()
            ),
        });
    }
    let jaas_key = written("sasl.jaas.config");
    let Some(text) = props
        .get("sasl.jaas.config")
        .filter(|v| !v.trim().is_empty())
    else {
        return Err(ConfigError::missing(
            jaas_key,
            format!(
                "sasl.mechanism={mechanism} needs credentials, e.g. {}",
                example(&mechanism)
            ),
        ));
    };
    let entry = jaas::parse(text).map_err(|reason| {
        ConfigError::invalid_because(
            &jaas_key,
            text,
            format!("a JAAS entry such as {}", example(&mechanism)),
            reason,
        )
    })?;
    let expected = match mechanism.as_str() {
        "PLAIN" => PLAIN_MODULE,
        "OAUTHBEARER" => OAUTH_MODULE,
        _ => SCRAM_MODULE,
    };
    if entry.module != expected {
        let known = [PLAIN_MODULE, SCRAM_MODULE, OAUTH_MODULE].contains(&entry.module.as_str());
        return Err(ConfigError::Unsupported {
            key: jaas_key,
            reason: if known {
                format!(
                    "the login module {} does not go with sasl.mechanism={mechanism}, which takes {expected}",
                    entry.module
                )
            } else {
                format!(
                    "the login module {} is not supported by this client; sasl.mechanism={mechanism} takes {expected}",
                    jaas::module_name(&entry.module)
                )
            },
        });
    }
    let option = |name: &str| entry.options.get(name).map(String::as_str);
    let credentials = |what: &str| -> Result<(String, Secret), ConfigError> {
        match (option("username"), option("password")) {
            (Some(user), Some(password)) => Ok((user.to_owned(), Secret::new(password))),
            _ => Err(ConfigError::missing(
                jaas_key.clone(),
                format!("{what} needs username=\"...\" and password=\"...\" in the JAAS entry"),
            )),
        }
    };
    Ok(match mechanism.as_str() {
        "PLAIN" => {
            let (user, password) = credentials("PLAIN")?;
            SaslSettings::plain(user, password)
        }
        "SCRAM-SHA-256" | "SCRAM-SHA-512" => {
            let (user, password) = credentials(&mechanism)?;
            let token_auth = option("tokenauth").is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let settings = if mechanism == "SCRAM-SHA-256" {
                SaslSettings::scram_sha256(user, password)
            } else {
                SaslSettings::scram_sha512(user, password)
            };
            settings.delegation_token(token_auth)
        }
        _ => {
            let Some(subject) = option("unsecuredLoginStringClaim_sub") else {
                return Err(ConfigError::Unsupported {
                    key: jaas_key,
                    reason: "from properties this client makes only Kafka's unsecured tokens \
                             (unsecuredLoginStringClaim_sub=\"...\"); for real tokens give the \
                             consumer a TokenProvider in code (SaslSettings::oauthbearer)"
                        .to_owned(),
                });
            };
            let mut provider = super::UnsecuredJwsTokenProvider::new(subject);
            if let Some(raw) = option("unsecuredLoginLifetimeSeconds") {
                let seconds: u64 = raw.trim().parse().map_err(|e| {
                    ConfigError::invalid_because(
                        &jaas_key,
                        text,
                        "unsecuredLoginLifetimeSeconds as a whole number of seconds",
                        e,
                    )
                })?;
                provider = provider.lifetime(Duration::from_secs(seconds));
            }
            for (key, value) in &entry.options {
                let name = key
                    .strip_prefix("unsecuredLoginExtension_")
                    .or_else(|| key.strip_prefix("extension_"));
                if let Some(name) = name {
                    provider = provider.extension(name, value);
                }
            }
            SaslSettings::oauthbearer(std::sync::Arc::new(provider))
        }
    })
}

/// A JAAS entry for `mechanism`, with placeholders.
fn example(mechanism: &str) -> String {
    match mechanism {
        "PLAIN" => format!("`{PLAIN_MODULE} required username=\"...\" password=\"...\";`"),
        "OAUTHBEARER" => {
            format!("`{OAUTH_MODULE} required unsecuredLoginStringClaim_sub=\"...\";`")
        }
        _ => format!("`{SCRAM_MODULE} required username=\"...\" password=\"...\";`"),
    }
}

/// True for a Java security key this client knows.
pub(crate) fn is_known(key: &str) -> bool {
    KNOWN_KEYS.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security(pairs: &[(&str, &str)]) -> Result<Security, ConfigError> {
        let props: Properties = pairs.iter().copied().collect();
        read(&props, &|k| format!("consumer.{k}"))
    }

    fn error_key(pairs: &[(&str, &str)]) -> String {
        match security(pairs) {
            Err(e) => e.key().unwrap_or_default().to_owned(),
            Ok(s) => panic!("accepted: {s:?}"),
        }
    }

    const PLAIN_JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"hunter2\";";

    #[test]
    fn every_protocol_reads() {
        let s = security(&[]).expect("plaintext");
        assert_eq!(s.protocol(), SecurityProtocol::Plaintext);
        let s = security(&[
            ("security.protocol", "ssl"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", "/ca.pem"),
            ("ssl.keystore.location", "/client.pem"),
            ("ssl.endpoint.identification.algorithm", ""),
        ])
        .expect("ssl");
        let tls = s.tls().expect("tls");
        assert_eq!(tls.ca, Some(Pem::File("/ca.pem".into())));
        assert_eq!(tls.client, Some(ClientIdentity::File("/client.pem".into())));
        assert!(!tls.verify_hostname);
        let s = security(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", PLAIN_JAAS),
        ])
        .expect("sasl_ssl");
        assert_eq!(s.sasl().expect("sasl").mechanism(), "PLAIN");
        assert!(s.tls().expect("tls").verify_hostname);
        for mechanism in ["SCRAM-SHA-256", "scram-sha-512"] {
            let s = security(&[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", mechanism),
                (
                    "sasl.jaas.config",
                    "org.apache.kafka.common.security.scram.ScramLoginModule required username='alice' password='x' tokenauth=true;",
                ),
            ])
            .expect("scram");
            assert!(s.tls().is_none());
            assert_eq!(
                s.sasl().expect("sasl").mechanism(),
                mechanism.to_ascii_uppercase()
            );
        }
        let s = security(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"alice\" unsecuredLoginLifetimeSeconds=\"30\" extension_traceId=\"t1\";",
            ),
        ])
        .expect("oauthbearer");
        assert_eq!(s.sasl().expect("sasl").mechanism(), "OAUTHBEARER");
    }

    #[test]
    fn inconsistent_settings_name_the_key() {
        let sasl_ssl = ("security.protocol", "SASL_SSL");
        assert_eq!(
            error_key(&[("security.protocol", "TLS")]),
            "consumer.security.protocol"
        );
        assert_eq!(error_key(&[sasl_ssl]), "consumer.sasl.mechanism");
        assert_eq!(
            error_key(&[sasl_ssl, ("sasl.mechanism", "PLAIN")]),
            "consumer.sasl.jaas.config"
        );
        assert_eq!(
            error_key(&[
                sasl_ssl,
                ("sasl.mechanism", "GSSAPI"),
                ("sasl.jaas.config", PLAIN_JAAS)
            ]),
            "consumer.sasl.mechanism"
        );
        assert_eq!(
            error_key(&[
                sasl_ssl,
                ("sasl.mechanism", "SCRAM-SHA-256"),
                ("sasl.jaas.config", PLAIN_JAAS)
            ]),
            "consumer.sasl.jaas.config"
        );
        assert_eq!(
            error_key(&[
                sasl_ssl,
                ("sasl.mechanism", "PLAIN"),
                (
                    "sasl.jaas.config",
                    "com.sun.security.auth.module.Krb5LoginModule required;"
                ),
            ]),
            "consumer.sasl.jaas.config"
        );
        assert_eq!(
            error_key(&[
                sasl_ssl,
                ("sasl.mechanism", "PLAIN"),
                (
                    "sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\";"
                ),
            ]),
            "consumer.sasl.jaas.config"
        );
        let ssl = ("security.protocol", "SSL");
        assert_eq!(
            error_key(&[ssl, ("ssl.keystore.key", "k")]),
            "consumer.ssl.keystore.certificate.chain"
        );
        assert_eq!(
            error_key(&[ssl, ("ssl.keystore.certificate.chain", "c")]),
            "consumer.ssl.keystore.key"
        );
        assert_eq!(
            error_key(&[
                ssl,
                ("ssl.keystore.location", "/k"),
                ("ssl.keystore.key", "k")
            ]),
            "consumer.ssl.keystore.location"
        );
        assert_eq!(
            error_key(&[
                ssl,
                ("ssl.truststore.location", "/a"),
                ("ssl.truststore.certificates", "c")
            ]),
            "consumer.ssl.truststore.location"
        );
        assert_eq!(
            error_key(&[ssl, ("ssl.endpoint.identification.algorithm", "none")]),
            "consumer.ssl.endpoint.identification.algorithm"
        );
        assert_eq!(
            error_key(&[ssl, ("ssl.enabled.protocols", "TLSv1.1")]),
            "consumer.ssl.enabled.protocols"
        );
        assert_eq!(
            error_key(&[ssl, ("ssl.provider", "SunJSSE")]),
            "consumer.ssl.provider"
        );
        assert_eq!(
            error_key(&[ssl, ("ssl.cipher.suites", "X")]),
            "consumer.ssl.cipher.suites"
        );
        assert_eq!(
            error_key(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.oauthbearer.token.endpoint.url", "https://idp")
            ]),
            "consumer.sasl.oauthbearer.token.endpoint.url"
        );
    }

    #[test]
    fn java_stores_are_refused_with_the_conversion_commands() {
        for key in ["ssl.truststore.type", "ssl.keystore.type"] {
            for store in ["JKS", "pkcs12"] {
                let error =
                    security(&[("security.protocol", "SSL"), (key, store)]).expect_err("refused");
                assert_eq!(error.key(), Some(format!("consumer.{key}").as_str()));
                assert!(error.to_string().contains("keytool"), "{error}");
            }
        }
    }

    #[test]
    fn errors_never_show_secrets() {
        for pairs in [
            vec![
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "PLAIN"),
                (
                    "sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"hunter2\"",
                ),
            ],
            vec![
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "SCRAM-SHA-256"),
                ("sasl.jaas.config", PLAIN_JAAS),
            ],
            vec![
                ("security.protocol", "SSL"),
                ("ssl.keystore.location", "/k"),
                ("ssl.keystore.key", "hunter2"),
            ],
            vec![
                ("security.protocol", "SSL"),
                ("ssl.truststore.location", "/k"),
                ("ssl.truststore.certificates", "hunter2"),
            ],
        ] {
            let error = security(&pairs).expect_err("refused");
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        let ok = security(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", PLAIN_JAAS),
            ("ssl.keystore.key", "hunter2-key"),
            ("ssl.keystore.certificate.chain", "hunter2-chain"),
            ("ssl.key.password", "hunter2-pw"),
        ])
        .expect("accepted");
        assert!(!format!("{ok:?}").contains("hunter2"));
    }

    #[test]
    fn every_security_key_is_known() {
        for (key, _) in NOT_SUPPORTED {
            assert!(is_known(key), "{key}");
        }
        for (key, _) in DEFAULT_ONLY {
            assert!(is_known(key), "{key}");
        }
        assert!(!is_known("ssl.truststore.locaton"));
        // Java ignores TLS settings without TLS, and SASL ones without SASL.
        let s = security(&[("ssl.provider", "SunJSSE"), ("sasl.mechanism", "GSSAPI")])
            .expect("ignored under PLAINTEXT");
        assert_eq!(s.protocol(), SecurityProtocol::Plaintext);
    }
}
