//! The driver's side of metric export (feature `metrics`): its counters, under the labels its
//! config and consumer give, recorded through the `metrics` facade.

use super::ShareSinkTask;
use crate::consumer::ShareConsumer;
use crate::telemetry::MetricLabels;

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// The labels of this driver's exported metrics: the connector name and task id of its
    /// [`DriverConfig::connector`](crate::DriverConfig::connector), and the consumer's group.
    pub fn metric_labels(&self) -> MetricLabels {
        MetricLabels::new(
            self.config.connector_name.clone(),
            u32::try_from(self.config.task_id).unwrap_or(0),
            self.consumer.group_metadata().group_id(),
        )
    }

    /// Records the counters through the `metrics` facade; nothing without the feature.
    pub(super) fn export_metrics(&self) {
        #[cfg(feature = "metrics")]
        crate::telemetry::export::driver(
            &self.metric_labels(),
            &self.metrics,
            self.started.elapsed(),
            self.awaiting_flush(),
        );
    }
}
