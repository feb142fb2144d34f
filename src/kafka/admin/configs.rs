//! Group configs, e.g. those of share groups, with IncrementalAlterConfigs.

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{AdminError, KafkaAdmin, missing, negotiate_and_send};
use crate::kafka::errors::{api_name, check};

/// IncrementalAlterConfigs resource type GROUP (group configs, e.g. of share groups).
const RESOURCE_TYPE_GROUP: i8 = 32;

/// IncrementalAlterConfigs operation SET.
const CONFIG_OPERATION_SET: i8 = 0;

impl KafkaAdmin {
    /// Sets configs of the group `group_id` (IncrementalAlterConfigs, resource type GROUP,
    /// operation SET), e.g. `share.auto.offset.reset=earliest`, `share.isolation.level`,
    /// `share.record.lock.duration.ms`. The group need not exist yet.
    ///
    /// # Errors
    ///
    /// The group's [`AdminError::Broker`] error, e.g. `INVALID_CONFIG` with the broker's
    /// explanation for an unknown key or a bad value; [`AdminError::Timeout`] and the other
    /// errors of the connection and the request.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but once the request was sent the configs may be set whether
    /// or not the future is dropped. Setting the same values again is harmless.
    pub async fn set_share_group_config(
        &self,
        group_id: &str,
        configs: &[(&str, &str)],
    ) -> Result<(), AdminError> {
        self.call("set_share_group_config", async {
            let connection = self.connection().await?;
            let key = ApiKey::IncrementalAlterConfigs;
            let configs = configs
                .iter()
                .map(|(name, value)| {
                    AlterableConfig::default()
                        .with_name(StrBytes::from_string((*name).to_owned()))
                        .with_config_operation(CONFIG_OPERATION_SET)
                        .with_value(Some(StrBytes::from_string((*value).to_owned())))
                })
                .collect();
            let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(RESOURCE_TYPE_GROUP)
                    .with_resource_name(StrBytes::from_string(group_id.to_owned()))
                    .with_configs(configs),
            ]);
            let response: IncrementalAlterConfigsResponse =
                negotiate_and_send(&connection, key, &request).await?;
            let result = response
                .responses
                .iter()
                .find(|r| {
                    r.resource_type == RESOURCE_TYPE_GROUP && r.resource_name.as_str() == group_id
                })
                .ok_or_else(|| missing(&connection, key, group_id))?;
            Ok(check(
                api_name(key),
                result.error_code,
                result.error_message.as_ref(),
            )?)
        })
        .await
    }
}
