//! [`ClientOverridePolicy`]: which client settings a connector may override.

use super::error::ConfigError;
use super::keys::{OVERRIDE_ALLOWLIST, OVERRIDE_POLICY, PRINCIPAL_KEYS};
use super::properties::Properties;
use super::value;

const POLICY_PACKAGE: &str = "org.apache.kafka.connect.connector.policy.";
const POLICY_SUFFIX: &str = "ConnectorClientConfigOverridePolicy";

/// The worker's `connector.client.config.override.policy`: which settings a connector may
/// override with `consumer.override.*`, `producer.override.*` and `admin.override.*`.
///
/// The worker config names it by alias (`None`, `Principal`, `All`, `Allowlist`), by class
/// name (`AllConnectorClientConfigOverridePolicy`) or by full class name
/// (`org.apache.kafka.connect.connector.policy.AllConnectorClientConfigOverridePolicy`), in
/// any case. Without it the policy is `All`, Connect 4.x's default.
///
/// ```
/// use kafka_share_sink::config::ClientOverridePolicy;
/// use kafka_share_sink::{ConnectorConfig, Properties};
///
/// let worker: Properties = [
///     ("connector.client.config.override.policy", "Allowlist"),
///     ("connector.client.config.override.allowlist", "max.poll.records, client.rack"),
/// ]
/// .into_iter()
/// .collect();
/// let connector: Properties = [("name", "s"), ("topics", "t")].into_iter().collect();
/// let config = ConnectorConfig::resolve(&worker, &connector)?;
/// let policy = config.override_policy();
/// assert!(matches!(policy, ClientOverridePolicy::Allowlist(list) if list.len() == 2));
/// assert_eq!(policy.name(), "Allowlist");
/// assert!(policy.allows("client.rack"));
/// assert!(!policy.allows("sasl.jaas.config"));
/// # Ok::<(), kafka_share_sink::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ClientOverridePolicy {
    /// `None`: no overrides.
    None,
    /// `Principal`: only `sasl.jaas.config`, `sasl.mechanism` and `security.protocol`
    /// (deprecated in Kafka 4.2, to be removed in 5.0). Until TLS/SASL exist, only
    /// `security.protocol=PLAINTEXT` passes: the other two are refused in any case.
    Principal,
    /// `All` (the default): every override.
    #[default]
    All,
    /// `Allowlist`: only the settings listed in the worker's
    /// `connector.client.config.override.allowlist` (names without prefix; empty by default,
    /// so nothing). Kafka 4.2+; the default from Kafka 5.0.
    Allowlist(Vec<String>),
}

impl ClientOverridePolicy {
    /// The policy's alias, as Connect's error messages name it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Principal => "Principal",
            Self::All => "All",
            Self::Allowlist(_) => "Allowlist",
        }
    }

    /// True if a connector may override the client setting `name` (without prefix).
    pub fn allows(&self, name: &str) -> bool {
        match self {
            Self::None => false,
            Self::Principal => PRINCIPAL_KEYS.contains(&name),
            Self::All => true,
            Self::Allowlist(allowed) => allowed.iter().any(|a| a == name),
        }
    }

    /// Reads the policy (and its allowlist) from a worker config.
    pub(crate) fn from_worker(worker: &Properties) -> Result<Self, ConfigError> {
        let Some(raw) = worker.get(OVERRIDE_POLICY) else {
            return Ok(Self::All);
        };
        let value = raw.trim();
        let bare = strip_prefix_ignore_case(value, POLICY_PACKAGE).unwrap_or(value);
        let alias = strip_suffix_ignore_case(bare, POLICY_SUFFIX).unwrap_or(bare);
        match alias.to_ascii_lowercase().as_str() {
            "none" => Ok(Self::None),
            "principal" => Ok(Self::Principal),
            "all" => Ok(Self::All),
            "allowlist" => Ok(Self::Allowlist(
                worker
                    .get(OVERRIDE_ALLOWLIST)
                    .map(value::list)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|name| !name.is_empty())
                    .collect(),
            )),
            _ => Err(ConfigError::invalid(
                OVERRIDE_POLICY,
                raw,
                "one of `None`, `Principal`, `All`, `Allowlist`, or the class name of one of \
                 them (such as `org.apache.kafka.connect.connector.policy.AllConnectorClientConfigOverridePolicy`)",
            )),
        }
    }

    /// Fails if the connector key `key`, which overrides the client setting `name`, is not
    /// allowed.
    pub(crate) fn check(&self, key: &str, name: &str) -> Result<(), ConfigError> {
        if self.allows(name) {
            Ok(())
        } else {
            Err(ConfigError::OverrideNotAllowed {
                key: key.to_owned(),
                name: name.to_owned(),
                policy: self.name().to_owned(),
            })
        }
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

fn strip_suffix_ignore_case<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    let tail = s.get(cut..)?;
    tail.eq_ignore_ascii_case(suffix).then(|| &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(value: &str) -> Result<ClientOverridePolicy, ConfigError> {
        ClientOverridePolicy::from_worker(&[(OVERRIDE_POLICY, value)].into_iter().collect())
    }

    #[test]
    fn aliases_and_class_names() {
        assert_eq!(
            ClientOverridePolicy::from_worker(&Properties::new()).unwrap(),
            ClientOverridePolicy::All
        );
        for (value, expected) in [
            ("None", ClientOverridePolicy::None),
            ("principal", ClientOverridePolicy::Principal),
            (" All ", ClientOverridePolicy::All),
            ("Allowlist", ClientOverridePolicy::Allowlist(vec![])),
            (
                "NoneConnectorClientConfigOverridePolicy",
                ClientOverridePolicy::None,
            ),
            (
                "org.apache.kafka.connect.connector.policy.PrincipalConnectorClientConfigOverridePolicy",
                ClientOverridePolicy::Principal,
            ),
        ] {
            assert_eq!(policy(value).unwrap(), expected, "{value}");
        }
        let err = policy("Some").unwrap_err();
        assert_eq!(err.key(), Some(OVERRIDE_POLICY));
        assert!(policy("ConnectorClientConfigOverridePolicy").is_err());
        assert!(policy("é").is_err());
    }

    #[test]
    fn check_uses_connects_wording() {
        let err = ClientOverridePolicy::None
            .check("consumer.override.max.poll.records", "max.poll.records")
            .unwrap_err();
        assert!(err.to_string().contains(
            "The 'None' policy does not allow 'max.poll.records' to be overridden in the connector configuration."
        ));
        assert_eq!(err.key(), Some("consumer.override.max.poll.records"));
        assert!(
            ClientOverridePolicy::Principal
                .check("producer.override.security.protocol", "security.protocol")
                .is_ok()
        );
    }
}
