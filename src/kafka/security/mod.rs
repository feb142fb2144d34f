//! TLS and SASL for every connection the crate opens: the settings ([`Security`],
//! [`TlsSettings`], [`SaslSettings`]), read from Java's configuration keys or built in code,
//! and what a client builds from them once ([`SecurityContext`]: the rustls configuration,
//! the SASL mechanism and credentials).
//!
//! - `tls`: the rustls client configuration (trust roots, client certificate, hostname
//!   check) and the messages of TLS failures.
//! - `sasl`: the mechanisms' exchanges (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), without I/O;
//!   the connection runs them.
//! - `scram`: the SCRAM client.
//! - `jaas`: the `sasl.jaas.config` reader.
//! - `keys`: the Java keys (`security.protocol`, `ssl.*`, `sasl.*`) read into a [`Security`].
//! - `oauth`: [`TokenProvider`] and the unsecured tokens of Kafka's default login module.

pub(crate) mod jaas;
pub(crate) mod keys;
mod oauth;
pub(crate) mod sasl;
pub(crate) mod scram;
pub(crate) mod tls;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

pub use self::oauth::{OAuthToken, TokenProvider, UnsecuredJwsTokenProvider};
use self::scram::ScramHash;
use crate::config::secret::REDACTED;

/// A secret value (a password, a private key, a token): kept out of `Debug`, errors and logs.
///
/// ```
/// use kafka_share_sink::Secret;
/// let secret = Secret::from("hunter2");
/// assert_eq!(format!("{secret:?}"), "[redacted]");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(Arc::from(value.into()))
    }

    /// The value, for the one place that sends it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

/// Java's `security.protocol`: how a client talks to the brokers' listener.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// No TLS, no SASL (the default).
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// The name Kafka gives it, e.g. `SASL_SSL`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// True for `SSL` and `SASL_SSL`.
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// True for `SASL_PLAINTEXT` and `SASL_SSL`.
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `security.protocol` value that is not one of Kafka's four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")]
pub struct ParseSecurityProtocolError;

impl FromStr for SecurityProtocol {
    type Err = ParseSecurityProtocolError;

    /// Kafka's names, case ignored, surrounding whitespace ignored.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        [
            Self::Plaintext,
            Self::Ssl,
            Self::SaslPlaintext,
            Self::SaslSsl,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(text))
        .ok_or(ParseSecurityProtocolError)
    }
}

/// Where PEM text comes from: a file, or the text itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Pem {
    /// A file (`*.location` keys).
    File(PathBuf),
    /// Inline text (`ssl.truststore.certificates`, `ssl.keystore.key`, ...), redacted in
    /// `Debug`: Kafka classes these keys as passwords.
    Inline(Secret),
}

/// The client certificate and its private key, for brokers that require one (mutual TLS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClientIdentity {
    /// One PEM file with the private key and the certificate chain (`ssl.keystore.location`
    /// with `ssl.keystore.type=PEM`).
    File(PathBuf),
    /// The key and the chain as text (`ssl.keystore.key` and
    /// `ssl.keystore.certificate.chain`).
    Inline {
        /// The PEM private key.
        key: Secret,
        /// The PEM certificate chain, leaf first.
        chain: Secret,
    },
}

/// TLS settings: which certificate authorities to trust, the client certificate for mutual
/// TLS, and whether the broker's name is checked.
///
/// Only PEM is read. Java keystores (JKS) and PKCS#12 files are refused with the commands
/// that convert them.
///
/// ```
/// use kafka_share_sink::TlsSettings;
/// // The CA that signed the brokers' certificates, and a client certificate:
/// let mutual = TlsSettings::ca_pem_file("/etc/kafka/ca.pem").client_pem_file("/etc/kafka/client.pem");
/// // Or the system's trust store (Mozilla's roots, compiled in, when it is empty):
/// let public = TlsSettings::system_roots();
/// assert_ne!(mutual, public);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub(crate) ca: Option<Pem>,
    pub(crate) client: Option<ClientIdentity>,
    pub(crate) key_password: Option<Secret>,
    pub(crate) verify_hostname: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        Self::system_roots()
    }
}

impl TlsSettings {
    /// Trusts the system's certificate authorities (on Linux the OpenSSL bundle files, which
    /// `SSL_CERT_FILE` and `SSL_CERT_DIR` may point elsewhere), or Mozilla's, compiled in, when
    /// the system has none. Java's behaviour without `ssl.truststore.*`.
    pub fn system_roots() -> Self {
        Self {
            ca: None,
            client: None,
            key_password: None,
            verify_hostname: true,
        }
    }

    /// Trusts only the certificates of a PEM file (`ssl.truststore.location` with
    /// `ssl.truststore.type=PEM`).
    pub fn ca_pem_file(path: impl Into<PathBuf>) -> Self {
        Self {
            ca: Some(Pem::File(path.into())),
            ..Self::system_roots()
        }
    }

    /// Trusts only the certificates of PEM text (`ssl.truststore.certificates`).
    pub fn ca_pem(pem: impl Into<String>) -> Self {
        Self {
            ca: Some(Pem::Inline(Secret::new(pem))),
            ..Self::system_roots()
        }
    }

    /// Presents the client certificate of a PEM file holding the private key and the
    /// certificate chain (`ssl.keystore.location` with `ssl.keystore.type=PEM`).
    pub fn client_pem_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.client = Some(ClientIdentity::File(path.into()));
        self
    }

    /// Presents a client certificate given as PEM text: the private key
    /// (`ssl.keystore.key`) and the certificate chain, leaf first
    /// (`ssl.keystore.certificate.chain`).
    pub fn client_pem(mut self, key: impl Into<Secret>, chain: impl Into<String>) -> Self {
        self.client = Some(ClientIdentity::Inline {
            key: key.into(),
            chain: Secret::new(chain),
        });
        self
    }

    /// `ssl.key.password`: the password of an encrypted private key. Encrypted keys are not
    /// read by this client: connecting then fails with the `openssl` command that decrypts
    /// the key.
    pub fn key_password(mut self, password: impl Into<Secret>) -> Self {
        self.key_password = Some(password.into());
        self
    }

    /// Whether the broker's certificate must name the host dialled (default true, Java's
    /// `ssl.endpoint.identification.algorithm=https`). False, Java's empty value, still
    /// checks that a trusted authority signed the certificate, and logs a warning.
    pub fn verify_hostname(mut self, verify: bool) -> Self {
        self.verify_hostname = verify;
        self
    }
}

/// How the credentials of a SASL mechanism are obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mechanism {
    /// PLAIN (RFC 4616).
    Plain {
        /// The user name.
        username: String,
        /// The password.
        password: Secret,
    },
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    Scram {
        /// The hash.
        hash: ScramHash,
        /// The user name (the token id with `token_auth`).
        username: String,
        /// The password (the token HMAC with `token_auth`).
        password: Secret,
        /// A delegation token (`tokenauth=true`).
        token_auth: bool,
    },
    /// OAUTHBEARER with tokens from a provider, asked again before each re-authentication.
    OAuthBearer {
        /// Where tokens come from.
        provider: ProviderHandle,
    },
}

/// A shared token provider; equal to another handle of the same provider. `Debug` does not
/// ask the provider: a derived `Debug` of a provider would show the client secret it holds.
#[derive(Clone)]
pub(crate) struct ProviderHandle(pub(crate) Arc<dyn TokenProvider>);

impl fmt::Debug for ProviderHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProviderHandle(<TokenProvider>)")
    }
}

impl PartialEq for ProviderHandle {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}

impl Eq for ProviderHandle {}

/// SASL settings: the mechanism and where its credentials come from.
///
/// ```
/// use kafka_share_sink::SaslSettings;
/// let sasl = SaslSettings::scram_sha512("alice", "alice-secret");
/// assert_eq!(sasl.mechanism(), "SCRAM-SHA-512");
/// assert!(!format!("{sasl:?}").contains("alice-secret"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaslSettings {
    pub(crate) mechanism: Mechanism,
}

impl SaslSettings {
    /// PLAIN: the user name and password in clear, so over TLS (`SASL_SSL`) only in
    /// production.
    pub fn plain(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self {
            mechanism: Mechanism::Plain {
                username: username.into(),
                password: password.into(),
            },
        }
    }

    /// SCRAM-SHA-256.
    pub fn scram_sha256(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self::scram(ScramHash::Sha256, username.into(), password.into())
    }

    /// SCRAM-SHA-512.
    pub fn scram_sha512(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self::scram(ScramHash::Sha512, username.into(), password.into())
    }

    fn scram(hash: ScramHash, username: String, password: Secret) -> Self {
        Self {
            mechanism: Mechanism::Scram {
                hash,
                username,
                password,
                token_auth: false,
            },
        }
    }

    /// For SCRAM: authenticate with a delegation token (the token id as user name, its HMAC
    /// as password), as `tokenauth="true"` does in Java's `ScramLoginModule`. No effect on
    /// other mechanisms.
    pub fn delegation_token(mut self, token_auth: bool) -> Self {
        if let Mechanism::Scram { token_auth: t, .. } = &mut self.mechanism {
            *t = token_auth;
        }
        self
    }

    /// OAUTHBEARER with tokens from `provider`, asked for a fresh one at every connection
    /// and before every re-authentication.
    pub fn oauthbearer(provider: Arc<dyn TokenProvider>) -> Self {
        Self {
            mechanism: Mechanism::OAuthBearer {
                provider: ProviderHandle(provider),
            },
        }
    }

    /// The mechanism's name, e.g. `SCRAM-SHA-512`.
    pub fn mechanism(&self) -> &'static str {
        match &self.mechanism {
            Mechanism::Plain { .. } => "PLAIN",
            Mechanism::Scram { hash, .. } => hash.mechanism(),
            Mechanism::OAuthBearer { .. } => "OAUTHBEARER",
        }
    }

    /// The user name, when the mechanism has one in the settings (shown in errors, as Java
    /// shows it).
    pub(crate) fn username(&self) -> Option<&str> {
        match &self.mechanism {
            Mechanism::Plain { username, .. } | Mechanism::Scram { username, .. } => Some(username),
            Mechanism::OAuthBearer { .. } => None,
        }
    }
}

/// How a client secures its connections: Java's `security.protocol` with its TLS and SASL
/// settings. The default is `PLAINTEXT`.
///
/// ```
/// use kafka_share_sink::{SaslSettings, Security, SecurityProtocol, TlsSettings};
/// let security = Security::sasl_ssl(
///     SaslSettings::scram_sha512("alice", "alice-secret"),
///     TlsSettings::ca_pem_file("/etc/kafka/ca.pem"),
/// );
/// assert_eq!(security.protocol(), SecurityProtocol::SaslSsl);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    pub(crate) protocol: SecurityProtocol,
    pub(crate) tls: Option<TlsSettings>,
    pub(crate) sasl: Option<SaslSettings>,
}

impl Security {
    /// `PLAINTEXT`: neither TLS nor SASL.
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// `SSL`: TLS, with a client certificate if the settings have one.
    pub fn ssl(tls: TlsSettings) -> Self {
        Self {
            protocol: SecurityProtocol::Ssl,
            tls: Some(tls),
            sasl: None,
        }
    }

    /// `SASL_PLAINTEXT`: SASL without TLS.
    pub fn sasl_plaintext(sasl: SaslSettings) -> Self {
        Self {
            protocol: SecurityProtocol::SaslPlaintext,
            tls: None,
            sasl: Some(sasl),
        }
    }

    /// `SASL_SSL`: SASL over TLS.
    pub fn sasl_ssl(sasl: SaslSettings, tls: TlsSettings) -> Self {
        Self {
            protocol: SecurityProtocol::SaslSsl,
            tls: Some(tls),
            sasl: Some(sasl),
        }
    }

    /// Reads Java's keys from client settings without prefix (`security.protocol`,
    /// `ssl.truststore.location`, `sasl.mechanism`, `sasl.jaas.config`, ...): see the README's
    /// "Connecting securely" for the keys and values accepted. Errors name the key.
    ///
    /// ```
    /// use kafka_share_sink::{Properties, Security, SecurityProtocol};
    /// let props = Properties::parse(
    ///     "security.protocol=SASL_SSL\n\
    ///      sasl.mechanism=PLAIN\n\
    ///      sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"alice-secret\";\n",
    /// )?;
    /// let security = Security::from_properties(&props)?;
    /// assert_eq!(security.protocol(), SecurityProtocol::SaslSsl);
    /// # Ok::<(), kafka_share_sink::ConfigError>(())
    /// ```
    pub fn from_properties(
        props: &crate::config::Properties,
    ) -> Result<Self, crate::config::ConfigError> {
        keys::read(props, &|key| key.to_owned())
    }

    /// The protocol.
    pub fn protocol(&self) -> SecurityProtocol {
        self.protocol
    }

    /// The TLS settings, for `SSL` and `SASL_SSL`.
    pub fn tls(&self) -> Option<&TlsSettings> {
        self.tls.as_ref()
    }

    /// The SASL settings, for `SASL_PLAINTEXT` and `SASL_SSL`.
    pub fn sasl(&self) -> Option<&SaslSettings> {
        self.sasl.as_ref()
    }
}

/// A security setting that cannot be used: the Java key it corresponds to, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettingError {
    /// The Java key, e.g. `ssl.truststore.location`.
    pub(crate) key: &'static str,
    /// What is wrong and what to do; never a secret value.
    pub(crate) reason: String,
}

impl SettingError {
    pub(crate) fn new(key: &'static str, reason: impl Into<String>) -> Self {
        Self {
            key,
            reason: reason.into(),
        }
    }

    /// As a consumer error.
    pub(crate) fn into_consumer(self) -> crate::consumer::ConsumerError {
        crate::consumer::ConsumerError::Config {
            key: self.key.to_owned(),
            reason: self.reason,
        }
    }
}

/// What a client builds once from its [`Security`] and every connection uses: the rustls
/// configuration (PEM files read, trust store loaded) and the SASL settings.
#[derive(Clone, Debug, Default)]
pub(crate) struct SecurityContext {
    /// TLS, for `SSL` and `SASL_SSL`.
    pub(crate) tls: Option<tls::TlsContext>,
    /// SASL, for `SASL_PLAINTEXT` and `SASL_SSL`.
    pub(crate) sasl: Option<Arc<SaslSettings>>,
}

impl SecurityContext {
    /// Reads the files and checks the settings: the one validation both the typed settings
    /// and the Java keys go through.
    pub(crate) fn build(security: &Security) -> Result<Self, SettingError> {
        let tls = match (security.protocol.uses_tls(), &security.tls) {
            (true, Some(settings)) => Some(tls::TlsContext::build(settings)?),
            (true, None) => Some(tls::TlsContext::build(&TlsSettings::system_roots())?),
            (false, _) => None,
        };
        let sasl = match (security.protocol.uses_sasl(), &security.sasl) {
            (true, Some(settings)) => {
                sasl::check(settings)?;
                Some(Arc::new(settings.clone()))
            }
            (true, None) => {
                return Err(SettingError::new(
                    "sasl.mechanism",
                    format!(
                        "security.protocol={} needs a SASL mechanism and its credentials",
                        security.protocol
                    ),
                ));
            }
            (false, _) => None,
        };
        Ok(Self { tls, sasl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_as_kafka_names_them() {
        for protocol in [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ] {
            assert_eq!(protocol.name().parse::<SecurityProtocol>(), Ok(protocol));
            assert_eq!(
                format!(" {} ", protocol.name().to_lowercase()).parse::<SecurityProtocol>(),
                Ok(protocol)
            );
        }
        assert!("TLS".parse::<SecurityProtocol>().is_err());
        assert!(SecurityProtocol::SaslSsl.uses_tls() && SecurityProtocol::SaslSsl.uses_sasl());
        assert!(!SecurityProtocol::Ssl.uses_sasl());
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let settings = [
            format!("{:?}", SaslSettings::plain("alice", "hunter2")),
            format!("{:?}", SaslSettings::scram_sha256("alice", "hunter2")),
            format!(
                "{:?}",
                Security::sasl_ssl(
                    SaslSettings::scram_sha512("alice", "hunter2"),
                    TlsSettings::ca_pem("hunter2-ca")
                        .client_pem("hunter2-key", "hunter2-chain")
                        .key_password("hunter2-pw"),
                )
            ),
        ];
        for debug in settings {
            assert!(!debug.contains("hunter2"), "{debug}");
            assert!(debug.contains("alice"), "{debug}");
        }
    }

    /// A provider that derives `Debug` over its client secret, as a user may write one.
    #[derive(Debug)]
    struct SecretHolder {
        client_secret: String,
    }

    #[async_trait::async_trait]
    impl TokenProvider for SecretHolder {
        async fn token(&self) -> Result<OAuthToken, crate::error::BoxError> {
            Err(format!(
                "no token ({} characters of secret)",
                self.client_secret.len()
            )
            .into())
        }
    }

    #[test]
    fn a_token_providers_own_debug_is_never_called() {
        let provider = Arc::new(SecretHolder {
            client_secret: "hunter2".to_owned(),
        });
        let security = Security::sasl_ssl(
            SaslSettings::oauthbearer(provider),
            TlsSettings::ca_pem("ca"),
        );
        let debug = format!("{security:?} {security:#?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("<TokenProvider>"), "{debug}");
    }

    #[test]
    fn sasl_without_settings_is_refused_with_the_key() {
        let security = Security {
            protocol: SecurityProtocol::SaslPlaintext,
            tls: None,
            sasl: None,
        };
        let error = SecurityContext::build(&security).expect_err("no mechanism");
        assert_eq!(error.key, "sasl.mechanism");
    }
}
