//! [`Json`]: a parsed JSON document that keeps object keys in document order (duplicates
//! too), and its conversion to a schemaless [`Value`].

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::record::Value;

/// The deepest nesting of arrays and objects serde_json parses (it stops with "recursion
/// limit exceeded" below that); it bounds every recursion over a [`Json`] tree and over a
/// schema parsed from one.
pub(crate) const MAX_DEPTH: usize = 127;

/// A JSON document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// A negative integer, or any integer up to `i64::MAX`.
    Int(i64),
    /// A positive integer above `i64::MAX`.
    UInt(u64),
    /// Any other number (serde_json also gives integers beyond `u64` as floats).
    Float(f64),
    String(String),
    Array(Vec<Json>),
    /// Members in document order; a repeated key appears more than once.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses one JSON document; trailing content other than whitespace is an error.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The JSON type, for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Bool(_) => "a boolean",
            Self::Int(_) | Self::UInt(_) => "an integer",
            Self::Float(_) => "a number with a fraction or exponent",
            Self::String(_) => "a string",
            Self::Array(_) => "an array",
            Self::Object(_) => "an object",
        }
    }

    /// The last member called `name` of an object.
    pub(crate) fn member(&self, name: &str) -> Option<&Json> {
        match self {
            Self::Object(members) => members
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The schemaless value: objects become [`Value::Map`] with string keys in document
    /// order, integers beyond `i64` become [`Value::Float`] (rounded), like every number
    /// beyond `u64`.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Self::Null => Value::Null,
            Self::Bool(b) => Value::Boolean(b),
            Self::Int(i) => Value::Int(i),
            Self::UInt(u) => Value::Float(u as f64),
            Self::Float(f) => Value::Float(f),
            Self::String(s) => Value::String(s),
            // Depth is at most MAX_DEPTH: the tree came from serde_json.
            Self::Array(items) => Value::Array(items.into_iter().map(Self::into_value).collect()),
            Self::Object(members) => Value::Map(
                members
                    .into_iter()
                    .map(|(k, v)| (Value::String(k), v.into_value()))
                    .collect(),
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(i64::try_from(v).map_or(Json::UInt(v), Json::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        // No size hint from the input is trusted for allocation beyond a small bound.
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element::<Json>()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(entry) = map.next_entry::<String, Json>()? {
            members.push(entry);
        }
        Ok(Json::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_member_order_and_duplicates() {
        let json = Json::parse(br#"{"b":1,"a":2,"b":3}"#).unwrap();
        let Json::Object(members) = &json else {
            panic!("not an object: {json:?}")
        };
        let keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        assert_eq!(json.member("b"), Some(&Json::Int(3)));
    }

    #[test]
    fn numbers_by_range() {
        assert_eq!(Json::parse(b"-5").unwrap(), Json::Int(-5));
        assert_eq!(
            Json::parse(b"9223372036854775807").unwrap(),
            Json::Int(i64::MAX)
        );
        assert_eq!(
            Json::parse(b"9223372036854775808").unwrap(),
            Json::UInt(1 << 63)
        );
        assert_eq!(Json::parse(b"1.5").unwrap(), Json::Float(1.5));
        assert!(matches!(
            Json::parse(b"100000000000000000000000").unwrap(),
            Json::Float(_)
        ));
        // Overflowing to infinity is an error, not a panic.
        assert!(Json::parse(b"1e400").is_err());
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(Json::parse(ok.as_bytes()).is_ok());
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let err = Json::parse(deep.as_bytes()).unwrap_err().to_string();
        assert!(err.starts_with("recursion limit exceeded"), "{err}");
    }

    #[test]
    fn schemaless_values() {
        let value = Json::parse(br#"{"a":[true,null,"x",1.5],"n":18446744073709551615}"#)
            .unwrap()
            .into_value();
        assert_eq!(
            value,
            Value::Map(vec![
                (
                    Value::String("a".into()),
                    Value::Array(vec![
                        Value::Boolean(true),
                        Value::Null,
                        Value::String("x".into()),
                        Value::Float(1.5)
                    ])
                ),
                (Value::String("n".into()), Value::Float(u64::MAX as f64)),
            ])
        );
    }
}
