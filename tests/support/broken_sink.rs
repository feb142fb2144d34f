//! A sink task whose every non-empty `put` fails fatally, as a sink whose target refuses
//! everything.

use async_trait::async_trait;
use kafka_share_sink::{SinkRecord, SinkTask, TaskConfig, TaskError};

pub(crate) struct Broken;

#[async_trait]
impl SinkTask for Broken {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        Err(TaskError::fatal("the target refuses every row"))
    }
}
