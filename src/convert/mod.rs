//! Converters: from the bytes of a record's key, value and headers to [`Value`]s with an
//! optional [`Schema`], as Kafka Connect's `Converter` and `HeaderConverter` do.
//!
//! [`Value`]: crate::Value

pub(crate) mod schema;

pub use self::schema::{Field, Schema, SchemaType};
