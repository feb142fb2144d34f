//! Converters: from the bytes of a record's key, value and headers to [`Value`]s with an
//! optional [`Schema`], as Kafka Connect's `Converter` and `HeaderConverter` do.
//!
//! Built-ins, each usable for keys, values and headers: [`ByteArrayConverter`] (the default,
//! zero-copy), [`StringConverter`] (UTF-8) and [`JsonConverter`] (with or without Connect's
//! schema envelope); for headers only, [`SimpleHeaderConverter`]. [`Converters`] bundles the
//! three a sink uses; [`Plugins`](crate::Plugins) builds them from Connect's class names.
//!
//! [`Value`]: crate::Value

/// [`Converter`] and [`HeaderConverter`] for a converter that reads a record's key or value
/// and a header's value alike: its `convert(&self, data, header key)` (the key `None` for a
/// key or value) and its `CLASS_NAME`, as Connect's converters that are both.
macro_rules! value_and_header_converter {
    ($converter:ty) => {
        impl $crate::convert::Converter for $converter {
            fn to_sink_data(
                &self,
                _topic: &str,
                _headers: &$crate::record::Headers,
                data: Option<&bytes::Bytes>,
            ) -> Result<$crate::convert::SchemaAndValue, $crate::convert::ConvertError> {
                self.convert(data, None)
            }

            fn class_name(&self) -> &str {
                Self::CLASS_NAME
            }
        }

        impl $crate::convert::HeaderConverter for $converter {
            fn to_sink_header(
                &self,
                _topic: &str,
                key: &str,
                value: Option<&bytes::Bytes>,
            ) -> Result<$crate::convert::SchemaAndValue, $crate::convert::ConvertError> {
                self.convert(value, Some(key))
            }

            fn class_name(&self) -> &str {
                Self::CLASS_NAME
            }
        }
    };
}

mod byte_array;
mod converter;
mod converters;
pub(crate) mod error;
mod failure;
mod json;
pub(crate) mod schema;
mod simple_header;
mod string;

pub use self::byte_array::ByteArrayConverter;
pub use self::converter::{Converter, ConverterType, HeaderConverter, SchemaAndValue};
pub use self::converters::Converters;
pub use self::error::ConvertError;
pub use self::failure::{StageError, StageFailure};
pub use self::json::JsonConverter;
pub use self::schema::{Field, Schema, SchemaType};
pub use self::simple_header::SimpleHeaderConverter;
pub use self::string::StringConverter;
