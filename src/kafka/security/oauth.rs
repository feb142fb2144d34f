//! OAUTHBEARER tokens: [`TokenProvider`], the hook an application fills (an OIDC client, an
//! Amazon MSK IAM signer, ...), and [`UnsecuredJwsTokenProvider`], the unsigned tokens of
//! Kafka's default login module, which brokers accept only with their default (unsecured)
//! validator: for tests and development clusters.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::Secret;
use crate::error::BoxError;

/// A bearer token and the SASL extensions sent with it (KIP-342), e.g. Confluent Cloud's
/// `logicalCluster` and `identityPoolId`.
///
/// ```
/// use kafka_share_sink::OAuthToken;
/// let token = OAuthToken::new("eyJhbGciOi...").with_extension("logicalCluster", "lkc-123");
/// assert!(!format!("{token:?}").contains("eyJ"));
/// ```
#[derive(Clone, Debug)]
pub struct OAuthToken {
    pub(crate) value: Secret,
    pub(crate) extensions: Vec<(String, String)>,
}

impl OAuthToken {
    /// A token (the compact JWS, or whatever the brokers' validator takes).
    pub fn new(value: impl Into<Secret>) -> Self {
        Self {
            value: value.into(),
            extensions: Vec::new(),
        }
    }

    /// Adds a SASL extension: the key of ASCII letters (not `auth`), the value of printable
    /// ASCII, spaces and tabs.
    pub fn with_extension(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extensions.push((key.into(), value.into()));
        self
    }

    /// The client's first (and only) OAUTHBEARER message (RFC 7628 section 3.1, as Kafka's
    /// `OAuthBearerClientInitialResponse` writes it), or why the token cannot be sent.
    pub(crate) fn initial_response(&self) -> Result<Vec<u8>, String> {
        let token = self.value.expose();
        let body_ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
        };
        if !body_ok(token.trim_end_matches('=')) {
            return Err(
                "the token is not a bearer token (RFC 6750: letters, digits, `-._~+/`, then `=` padding)"
                    .to_owned(),
            );
        }
        let mut message = format!("n,,\u{1}auth=Bearer {token}");
        for (key, value) in &self.extensions {
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) || key == "auth" {
                return Err(format!(
                    "the SASL extension name `{}` is invalid: use ASCII letters, not `auth`",
                    key.escape_debug()
                ));
            }
            if value.is_empty()
                || !value
                    .bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) || b" \t\r\n".contains(&b))
            {
                return Err(format!(
                    "the value of the SASL extension `{key}` is invalid: use printable ASCII"
                ));
            }
            message.push('\u{1}');
            message.push_str(key);
            message.push('=');
            message.push_str(value);
        }
        message.push_str("\u{1}\u{1}");
        Ok(message.into_bytes())
    }
}

/// Where OAUTHBEARER tokens come from. Asked at every new connection and before every
/// re-authentication, so it should cache a token until shortly before it expires.
///
/// An error fails the connection with [`ConnectionError::Authentication`](crate::ConnectionError::Authentication)
/// (its text is shown, so it must not contain secrets). The `Debug` this trait asks for is
/// never called by this crate's own `Debug` output (a configuration holding a provider shows
/// `<TokenProvider>`); still, do not derive it on a provider that holds a client secret.
#[async_trait]
pub trait TokenProvider: Send + Sync + fmt::Debug {
    /// A token valid now.
    ///
    /// # Cancel safety
    ///
    /// The future may be dropped (a connection timed out): implementations must leave their
    /// cache consistent at every `.await`.
    async fn token(&self) -> Result<OAuthToken, BoxError>;
}

/// Unsigned (`alg: none`) tokens as Kafka's default OAUTHBEARER login module makes them
/// (`unsecuredLoginStringClaim_sub`, `unsecuredLoginLifetimeSeconds`): only brokers with the
/// default, unsecured validator accept them. For tests and development clusters.
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::UnsecuredJwsTokenProvider;
/// let provider = UnsecuredJwsTokenProvider::new("alice").lifetime(Duration::from_secs(60));
/// # let _ = provider;
/// ```
#[derive(Clone, Debug)]
pub struct UnsecuredJwsTokenProvider {
    subject: String,
    lifetime: Duration,
    extensions: Vec<(String, String)>,
}

impl UnsecuredJwsTokenProvider {
    /// Tokens for the principal `subject` (the `sub` claim), valid for an hour, Java's
    /// default.
    pub fn new(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            lifetime: Duration::from_secs(3600),
            extensions: Vec::new(),
        }
    }

    /// How long each token is valid (`unsecuredLoginLifetimeSeconds`, whole seconds, at
    /// least one).
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime.max(Duration::from_secs(1));
        self
    }

    /// A SASL extension sent with every token.
    pub fn extension(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extensions.push((key.into(), value.into()));
        self
    }

    /// A token issued now.
    pub(crate) fn mint(&self) -> OAuthToken {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let expires = now.saturating_add(self.lifetime.as_secs().max(1));
        let claims = serde_json::json!({ "sub": self.subject, "iat": now, "exp": expires });
        let value = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut token = OAuthToken::new(value);
        token.extensions.clone_from(&self.extensions);
        token
    }
}

#[async_trait]
impl TokenProvider for UnsecuredJwsTokenProvider {
    async fn token(&self) -> Result<OAuthToken, BoxError> {
        Ok(self.mint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_responses_are_framed_as_kafka_frames_them() {
        let token = OAuthToken::new("abc.def.");
        assert_eq!(
            token.initial_response().expect("valid"),
            b"n,,\x01auth=Bearer abc.def.\x01\x01"
        );
        let token = token.with_extension("traceId", "a b");
        assert_eq!(
            token.initial_response().expect("valid"),
            b"n,,\x01auth=Bearer abc.def.\x01traceId=a b\x01\x01"
        );
        for bad in [
            OAuthToken::new(""),
            OAuthToken::new("a b"),
            OAuthToken::new("x").with_extension("auth", "v"),
            OAuthToken::new("x").with_extension("k1", "v"),
            OAuthToken::new("x").with_extension("k", "\u{1}"),
            OAuthToken::new("x").with_extension("k", ""),
        ] {
            let error = bad.initial_response().expect_err("invalid");
            assert!(!error.contains('\u{1}'), "{error}");
        }
    }

    #[test]
    fn unsecured_tokens_carry_the_subject_and_expiry() {
        let token = UnsecuredJwsTokenProvider::new("al\"ice")
            .lifetime(Duration::from_secs(30))
            .mint();
        let value = token.value.expose().to_owned();
        let mut parts = value.split('.');
        let header = URL_SAFE_NO_PAD
            .decode(parts.next().expect("header"))
            .expect("b64");
        assert_eq!(header, br#"{"alg":"none"}"#);
        let claims: serde_json::Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(parts.next().expect("claims"))
                .expect("b64"),
        )
        .expect("json");
        assert_eq!(claims["sub"], "al\"ice");
        let iat = claims["iat"].as_u64().expect("iat");
        assert_eq!(claims["exp"].as_u64(), Some(iat + 30));
        assert_eq!(parts.next(), Some(""));
        token.initial_response().expect("sendable");
    }
}
