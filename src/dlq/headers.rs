//! The names of Kafka Connect's dead-letter context headers
//! (`errors.deadletterqueue.context.headers.enable`), in the order they are written.
//!
//! Every value is UTF-8 text; numbers are decimal.

/// The topic the failed record was consumed from.
pub const TOPIC: &str = "__connect.errors.topic";
/// The partition the failed record was consumed from.
pub const PARTITION: &str = "__connect.errors.partition";
/// The offset of the failed record.
pub const OFFSET: &str = "__connect.errors.offset";
/// The connector name.
pub const CONNECTOR_NAME: &str = "__connect.errors.connector.name";
/// The task number.
pub const TASK_ID: &str = "__connect.errors.task.id";
/// The pipeline stage that failed, e.g. `VALUE_CONVERTER` or `TASK_PUT`.
pub const STAGE: &str = "__connect.errors.stage";
/// The class that failed: a converter or transform, or the sink task.
pub const CLASS_NAME: &str = "__connect.errors.class.name";
/// The Java exception class Connect would write for the error, e.g.
/// `org.apache.kafka.connect.errors.DataException`.
pub const EXCEPTION_CLASS_NAME: &str = "__connect.errors.exception.class.name";
/// The exception's message; a null value when the message is empty.
pub const EXCEPTION_MESSAGE: &str = "__connect.errors.exception.message";
/// The exception and its causes as Java prints them, without frames: `<class>: <message>`,
/// then a `Caused by: <class>: <message>` line per cause.
pub const EXCEPTION_STACKTRACE: &str = "__connect.errors.exception.stacktrace";
/// Not Connect's: why the driver gave up on the record, one short and stable word
/// ([`DeadLetterReason`](crate::DeadLetterReason): `conversion`, `transform`, `put`,
/// `delivery.limit`, `flush`, `record.too.large`, `output.refused`). Written on every dead
/// letter the driver writes, after the other headers, also when the context headers are off.
pub const REASON: &str = "__connect.errors.reason";
