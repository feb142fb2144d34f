//! [`Json`]: a parsed JSON document that keeps object members in document order, and its
//! conversion to a schemaless [`Value`].

use crate::record::Value;

/// The deepest nesting of a schema, and so of a payload converted by one, that the
/// `schemas.enable=true` conversions follow: they recurse, so they stop well before the
/// parser's nesting limit ([`MAX_NESTING`](super::parse::MAX_NESTING)).
pub(crate) const MAX_DEPTH: usize = 127;

/// A JSON document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// A negative integer, or any integer up to `i64::MAX`.
    Int(i64),
    /// A positive integer above `i64::MAX` that fits `u64`.
    UInt(u64),
    /// Any other number, integers beyond `u64` included (rounded).
    Float(f64),
    String(String),
    Array(Vec<Json>),
    /// Members in document order. The lenient parser keeps one member per name (the first
    /// position, the last value); a tree built otherwise may repeat a name.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses one JSON document as Connect does (no content is null), for tests.
    #[cfg(test)]
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, super::parse::ParseError> {
        Ok(super::parse::parse(bytes, false)?.unwrap_or(Self::Null))
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
            // Depth is at most the parser's MAX_NESTING (1000), shallow enough to recurse.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_keeps_its_place_and_takes_the_last_value() {
        let json = Json::parse(br#"{"b":1,"a":2,"b":3}"#).unwrap();
        let Json::Object(members) = &json else {
            panic!("not an object: {json:?}")
        };
        let keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "a"]);
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
        // Beyond a double: infinite, as Connect reads it.
        assert_eq!(Json::parse(b"1e400").unwrap(), Json::Float(f64::INFINITY));
    }

    #[test]
    fn deep_trees_convert() {
        let depth = super::super::parse::MAX_NESTING;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let mut value = Json::parse(text.as_bytes()).unwrap().into_value();
        for _ in 1..depth {
            let Value::Array(mut items) = value else {
                panic!("not an array")
            };
            value = items.pop().expect("one element");
        }
        assert_eq!(value, Value::Array(Vec::new()));
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
