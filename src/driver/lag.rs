//! The driver's side of the share group's lag: the reader it starts for itself, or the one
//! a supervisor shares with it.

use super::ShareSinkTask;
use crate::consumer::ShareConsumer;
use crate::lag::{LagReader, ShareGroupLag};

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// The share group's lag as last read, with when it was read
    /// ([`ShareGroupLag::age`]); `None` before the first read answered, when reading is off
    /// ([`DriverConfig::lag_refresh_interval`](crate::DriverConfig::lag_refresh_interval)
    /// zero), when the consumer has no [`lag_source`](ShareConsumer::lag_source), and after
    /// [`close`](Self::close).
    ///
    /// The lag is read in the background, every refresh interval, from
    /// [`initialize`](Self::initialize) on (by the driver, or by the supervisor that runs
    /// it); this never waits for the cluster. A read that fails keeps the last value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
    /// use kafka_share_sink::{DriverConfig, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError};
    ///
    /// struct Discard;
    /// #[async_trait::async_trait]
    /// impl SinkTask for Discard {
    ///     async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> { Ok(()) }
    ///     async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> { Ok(()) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("events", 1)?;
    /// broker.set_group_config("sink", GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest))?;
    /// let config = DriverConfig::new(["events"])
    ///     .poll_timeout(Duration::from_millis(10))
    ///     .lag_refresh_interval(Duration::from_millis(100));
    /// let mut driver = ShareSinkTask::new(Box::new(Discard), broker.share_consumer("sink"), config);
    /// driver.initialize().await?;
    /// driver.iteration().await?; // the group starts reading the partition
    /// for i in 0..3 {
    ///     broker.produce("events", ProduceRecord::new().value(format!("{i}")))?;
    /// }
    /// // Three records to finish, once the next read is in.
    /// let mut reads = driver.lag_reader().expect("reading").subscribe();
    /// reads.wait_for(|lag| lag.as_ref().is_some_and(|l| l.total() == 3)).await?;
    /// assert_eq!(driver.lag().map(|l| l.total()), Some(3));
    /// driver.close().await?;
    /// # Ok(()) }
    /// ```
    pub fn lag(&self) -> Option<ShareGroupLag> {
        self.lag.as_ref().and_then(LagReader::snapshot)
    }

    /// The reader of the share group's lag this driver uses, if any: to wait for a read
    /// ([`LagReader::subscribe`]), read at once ([`LagReader::refresh`]) or count failed
    /// reads.
    pub fn lag_reader(&self) -> Option<&LagReader> {
        self.lag.as_ref()
    }

    /// Uses `reader` for the share group's lag instead of starting a reader of its own at
    /// [`initialize`](Self::initialize): several drivers of one group in one process share
    /// one reader, and so one read per interval (a
    /// [`Supervisor`](crate::supervisor::Supervisor) does this for its tasks).
    pub fn use_lag_reader(&mut self, reader: LagReader) {
        self.lag = Some(reader);
    }

    /// Starts reading the lag, unless a reader was given, reading is off, or the consumer
    /// cannot tell.
    pub(super) fn start_lag_reader(&mut self) {
        if self.lag.is_none() {
            self.lag = LagReader::of_consumer(&self.consumer, self.config.lag_refresh_interval);
        }
    }
}
