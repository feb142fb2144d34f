//! [`Stage`]: where in the pipeline an error happened, with Kafka Connect's names.

use std::fmt;

/// A step of the sink pipeline, named as Kafka Connect names it in logs and in the
/// `__connect.errors.stage` dead-letter header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stage {
    /// Polling the share consumer (`TASK_POLL`).
    TaskPoll,
    /// The key converter (`KEY_CONVERTER`).
    KeyConverter,
    /// The value converter (`VALUE_CONVERTER`).
    ValueConverter,
    /// The header converter (`HEADER_CONVERTER`).
    HeaderConverter,
    /// A transform or its predicate (`TRANSFORMATION`).
    Transformation,
    /// The sink task's `put` (`TASK_PUT`).
    TaskPut,
    /// Producing to Kafka, such as the dead-letter queue (`KAFKA_PRODUCE`).
    KafkaProduce,
    /// Consuming from Kafka (`KAFKA_CONSUME`).
    KafkaConsume,
}

impl Stage {
    /// Connect's name of the stage, as written to the `__connect.errors.stage` header.
    ///
    /// ```
    /// assert_eq!(kafka_share_sink::Stage::ValueConverter.connect_name(), "VALUE_CONVERTER");
    /// ```
    pub fn connect_name(self) -> &'static str {
        match self {
            Self::TaskPoll => "TASK_POLL",
            Self::KeyConverter => "KEY_CONVERTER",
            Self::ValueConverter => "VALUE_CONVERTER",
            Self::HeaderConverter => "HEADER_CONVERTER",
            Self::Transformation => "TRANSFORMATION",
            Self::TaskPut => "TASK_PUT",
            Self::KafkaProduce => "KAFKA_PRODUCE",
            Self::KafkaConsume => "KAFKA_CONSUME",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.connect_name())
    }
}
