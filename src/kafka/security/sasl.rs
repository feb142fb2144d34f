//! The SASL mechanisms' exchanges, as state machines without I/O: the connection sends what
//! [`start`] and [`Exchange::next`] return in SaslAuthenticate requests and feeds back the
//! broker's answers.

use super::scram::ScramClient;
use super::{Mechanism, SaslSettings, SettingError};

/// The most SaslAuthenticate round trips one exchange may take (SCRAM takes two).
pub(crate) const MAX_ROUNDS: usize = 4;

/// Checks what can be checked of SASL settings before connecting.
pub(crate) fn check(settings: &SaslSettings) -> Result<(), SettingError> {
    let jaas = "sasl.jaas.config";
    match &settings.mechanism {
        Mechanism::Plain { username, password } => {
            if username.is_empty() {
                return Err(SettingError::new(jaas, "PLAIN needs a non-empty username"));
            }
            if username.contains('\0') || password.expose().contains('\0') {
                return Err(SettingError::new(
                    jaas,
                    "PLAIN user names and passwords cannot contain NUL characters",
                ));
            }
        }
        Mechanism::Scram { username, .. } => {
            if username.is_empty() {
                return Err(SettingError::new(
                    jaas,
                    format!("{} needs a non-empty username", settings.mechanism()),
                ));
            }
        }
        Mechanism::OAuthBearer { .. } => {}
    }
    Ok(())
}

/// An exchange in progress.
#[derive(Debug)]
pub(crate) enum Exchange {
    /// PLAIN: one message, an empty answer.
    Plain,
    /// SCRAM: the server-first answer is awaited (`answered` false), then the server-final.
    Scram {
        client: ScramClient,
        password: super::Secret,
        answered: bool,
    },
    /// OAUTHBEARER: an empty answer is success; anything else is the broker's error, to be
    /// acknowledged with a single 0x01 byte, after which the broker fails the exchange.
    OAuthBearer {
        /// The broker's error answer, once it sent one.
        refused: Option<String>,
    },
}

/// Starts an exchange: the first message to send. OAUTHBEARER asks its provider for a token
/// here. Errors are reasons for an authentication failure.
///
/// # Cancel safety
///
/// Cancel safe: nothing is sent here.
pub(crate) async fn start(settings: &SaslSettings) -> Result<(Exchange, Vec<u8>), String> {
    match &settings.mechanism {
        Mechanism::Plain { username, password } => {
            let mut message = Vec::with_capacity(2 + username.len() + password.expose().len());
            message.push(0);
            message.extend_from_slice(username.as_bytes());
            message.push(0);
            message.extend_from_slice(password.expose().as_bytes());
            Ok((Exchange::Plain, message))
        }
        Mechanism::Scram {
            hash,
            username,
            password,
            token_auth,
        } => {
            let (client, first) = ScramClient::start(*hash, username, *token_auth)?;
            Ok((
                Exchange::Scram {
                    client,
                    password: password.clone(),
                    answered: false,
                },
                first,
            ))
        }
        Mechanism::OAuthBearer { provider } => {
            let token = provider
                .0
                .token()
                .await
                .map_err(|e| format!("the OAUTHBEARER token provider failed: {e}"))?;
            let message = token
                .initial_response()
                .map_err(|e| format!("the OAUTHBEARER token provider gave a bad token: {e}"))?;
            Ok((Exchange::OAuthBearer { refused: None }, message))
        }
    }
}

impl Exchange {
    /// Takes the broker's answer (error code 0); the next message to send, or `None` when
    /// the client is done. Errors are reasons for an authentication failure.
    pub(crate) fn next(&mut self, answer: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self {
            Self::Plain => Ok(None),
            Self::Scram {
                client,
                password,
                answered,
            } => {
                if *answered {
                    client.finish(answer)?;
                    Ok(None)
                } else {
                    *answered = true;
                    Ok(Some(client.answer(answer, password.expose())?))
                }
            }
            Self::OAuthBearer { refused } => {
                if let Some(refused) = refused {
                    return Err(format!(
                        "the broker refused the OAUTHBEARER token: {refused}"
                    ));
                }
                if answer.is_empty() {
                    return Ok(None);
                }
                // The broker's JSON error, e.g. {"status":"invalid_token"}: shown, bounded.
                let text = String::from_utf8_lossy(&answer[..answer.len().min(512)]);
                *refused = Some(text.escape_debug().to_string());
                Ok(Some(vec![1]))
            }
        }
    }

    /// The broker's refusal an OAUTHBEARER exchange saw before the final error, if any.
    pub(crate) fn refusal(&self) -> Option<&str> {
        match self {
            Self::OAuthBearer { refused } => refused.as_deref(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::kafka::security::UnsecuredJwsTokenProvider;

    #[tokio::test]
    async fn plain_sends_the_rfc_4616_message_once() {
        let (mut exchange, first) = start(&SaslSettings::plain("alice", "alice-secret"))
            .await
            .expect("start");
        assert_eq!(first, b"\0alice\0alice-secret");
        assert_eq!(exchange.next(b"").expect("done"), None);
    }

    #[tokio::test]
    async fn oauthbearer_acknowledges_a_refusal_then_fails() {
        let provider = Arc::new(UnsecuredJwsTokenProvider::new("alice"));
        let (mut exchange, first) = start(&SaslSettings::oauthbearer(provider))
            .await
            .expect("start");
        assert!(first.starts_with(b"n,,\x01auth=Bearer "));
        let refusal = br#"{"status":"invalid_token"}"#;
        assert_eq!(exchange.next(refusal).expect("ack"), Some(vec![1]));
        assert_eq!(
            exchange.refusal(),
            Some(r#"{\"status\":\"invalid_token\"}"#)
        );
        let error = exchange.next(b"").expect_err("refused");
        assert!(error.contains("invalid_token"), "{error}");
    }

    #[test]
    fn plain_credentials_are_checked() {
        assert_eq!(
            check(&SaslSettings::plain("", "x")).expect_err("empty").key,
            "sasl.jaas.config"
        );
        let error = check(&SaslSettings::plain("a", "b\0c")).expect_err("NUL");
        assert!(error.reason.contains("NUL"), "{error:?}");
        assert!(check(&SaslSettings::scram_sha256("", "x")).is_err());
        assert!(check(&SaslSettings::scram_sha256("a", "x")).is_ok());
    }
}
