//! Converters: each built-in's success and failure, header conversion, class names, and the
//! byte-array fast path.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use kafka_share_sink::convert::{
    ByteArrayConverter, JsonConverter, SimpleHeaderConverter, StringConverter,
};
use kafka_share_sink::{
    ConsumerRecord, ConvertError, Converter, ConverterType, Converters, HeaderConverter, Headers,
    Plugins, SchemaAndValue, SchemaType, SinkHeader, SinkRecord, Stage, TimestampType, Value,
};
use proptest::prelude::*;

fn bytes(data: &'static [u8]) -> Option<Bytes> {
    Some(Bytes::from_static(data))
}

fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Converts `data` as a record value with `converter`.
fn value(converter: &dyn Converter, data: Option<Bytes>) -> Result<SchemaAndValue, ConvertError> {
    converter.to_sink_data("orders", &Headers::new(), data.as_ref())
}

/// The error message of converting `data` as a record value.
fn value_error(converter: &dyn Converter, data: &'static [u8]) -> String {
    value(converter, bytes(data))
        .expect_err("conversion should fail")
        .to_string()
}

/// The message of the last cause of converting `data` as a record value: where the built-in
/// converters say what was wrong, under Connect's own message.
fn value_cause(converter: &dyn Converter, data: &[u8]) -> String {
    let err =
        value(converter, Some(Bytes::copy_from_slice(data))).expect_err("conversion should fail");
    last_cause(&err)
}

fn last_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut last = err;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// Connect's message for JSON that cannot be read.
const JSON_FAILED: &str =
    "Converting byte[] to Kafka Connect data failed due to serialization error: ";

/// Connect's message for JSON that is not an envelope while schemas.enable=true.
const NOT_AN_ENVELOPE: &str = "JsonConverter with schemas.enable requires \"schema\" and \
    \"payload\" fields and may not contain additional fields. If you are trying to deserialize \
    plain JSON data, set schemas.enable=false in your converter configuration.";

/// A value converter built from config, as the driver's config would.
fn plugin(class: &str, pairs: &[(&str, &str)]) -> Arc<dyn Converter> {
    Plugins::new()
        .build_converter(class, &configs(pairs), false)
        .expect("builds")
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

// --- ByteArrayConverter ---------------------------------------------------------------

#[test]
fn byte_array_passes_any_bytes_and_null() {
    let raw = Bytes::from_static(b"\x00\xff not utf-8 {");
    let converted = value(&ByteArrayConverter, Some(raw.clone())).unwrap();
    assert_eq!(converted.value(), &Value::Bytes(raw));
    let schema = converted.schema().unwrap();
    assert_eq!(schema.schema_type(), SchemaType::Bytes);
    assert!(schema.is_optional());
    assert!(value(&ByteArrayConverter, None).unwrap().value().is_null());
}

// --- StringConverter ------------------------------------------------------------------

#[test]
fn string_decodes_utf8() {
    let converted = value(&StringConverter::new(), bytes("žluť".as_bytes())).unwrap();
    assert_eq!(converted.value(), &Value::from("žluť"));
    assert_eq!(
        converted.schema().unwrap().schema_type(),
        SchemaType::String
    );
    assert!(
        value(&StringConverter::new(), None)
            .unwrap()
            .value()
            .is_null()
    );
}

#[test]
fn string_replaces_bad_utf8_as_connect_does_and_strict_refuses_it() {
    let key = StringConverter::new().converter_type(ConverterType::Key);
    assert_eq!(
        value(&key, bytes(b"ok\xe2\x82")).unwrap().value(),
        &Value::from("ok\u{fffd}")
    );
    let strict = key.strict(true);
    assert_eq!(
        value_error(&strict, b"ok\xe2\x82"),
        "Failed to deserialize string: "
    );
    assert_eq!(
        value_cause(&strict, b"ok\xe2\x82"),
        "key is not valid UTF-8: invalid byte at offset 2 (of 4 bytes); use the \
         ByteArrayConverter, or fix the producer to write UTF-8 (string.strict=true)"
    );
    // Built from config, the converter knows it converts values.
    let strict = plugin("StringConverter", &[("string.strict", "true")]);
    let err = value_cause(&*strict, b"\xff");
    assert!(
        err.starts_with("value is not valid UTF-8: invalid byte at offset 0"),
        "{err}"
    );
    assert!(value(&*plugin("StringConverter", &[]), bytes(b"\xff")).is_ok());
}

#[test]
fn string_encoding_other_than_utf8_is_rejected_at_build_time() {
    let err = Plugins::new()
        .build_converter(
            "org.apache.kafka.connect.storage.StringConverter",
            &configs(&[("converter.encoding", "UTF-16")]),
            true,
        )
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "key.converter org.apache.kafka.connect.storage.StringConverter: config \
         `converter.encoding` has invalid value `UTF-16`: only UTF-8 is supported; convert the \
         data to UTF-8 or use the ByteArrayConverter"
    );
    assert!(
        Plugins::new()
            .build_converter(
                "StringConverter",
                &configs(&[("converter.encoding", "utf-8")]),
                true
            )
            .is_ok()
    );
}

// --- JsonConverter, schemaless ----------------------------------------------------------

#[test]
fn json_that_connect_accepts_and_strict_refuses() {
    let lenient = JsonConverter::new().schemas_enable(false);
    let strict = lenient.strict(true);
    for (text, expected) in [
        (&b"{\"a\":1,\"a\":2}"[..], map(vec![("a", Value::Int(2))])),
        (b"{\"a\":1} x", map(vec![("a", Value::Int(1))])),
        (b"007", Value::Int(7)),
        (b"\xef\xbb\xbf1", Value::Int(1)),
        (b"\"\\ud800\"", Value::from("\u{fffd}")),
        (b" ", Value::Null),
    ] {
        let shown = String::from_utf8_lossy(text);
        let data = Some(Bytes::copy_from_slice(text));
        assert_eq!(
            value(&lenient, data.clone()).unwrap().value(),
            &expected,
            "{shown}"
        );
        let refused = value(&strict, data).expect_err("strict JSON refuses it");
        assert_eq!(refused.to_string(), JSON_FAILED, "{shown}");
    }
}

#[test]
fn schemaless_json_becomes_a_value_tree() {
    let json = plugin("JsonConverter", &[("schemas.enable", "false")]);
    let converted = value(
        &*json,
        bytes(br#"{"z": 1, "a": [true, null, 2.5, "s"], "o": {}, "big": -9223372036854775808}"#),
    )
    .unwrap();
    assert!(converted.schema().is_none());
    assert_eq!(
        converted.value(),
        &map(vec![
            ("z", Value::Int(1)),
            (
                "a",
                Value::Array(vec![
                    Value::Boolean(true),
                    Value::Null,
                    Value::Float(2.5),
                    Value::from("s"),
                ]),
            ),
            ("o", Value::Map(vec![])),
            ("big", Value::Int(i64::MIN)),
        ])
    );
    assert_eq!(
        value(&*json, bytes(b" 7 ")).unwrap().value(),
        &Value::Int(7)
    );
    assert!(value(&*json, bytes(b"null")).unwrap().value().is_null());
    assert!(value(&*json, None).unwrap().value().is_null());
}

#[test]
fn huge_numbers_do_not_panic() {
    let json = JsonConverter::new().schemas_enable(false);
    // Beyond i64: a rounded float (Connect keeps the low 64 bits).
    assert_eq!(
        value(&json, bytes(b"18446744073709551616"))
            .unwrap()
            .value(),
        &Value::Float(18446744073709551616.0)
    );
    assert_eq!(
        value(&json, bytes(b"9223372036854775808")).unwrap().value(),
        &Value::Float(9223372036854775808.0)
    );
    // Beyond f64: infinite, as Connect reads it; strict JSON refuses it.
    assert_eq!(
        value(&json, bytes(b"[1e400]")).unwrap().value(),
        &Value::Array(vec![Value::Float(f64::INFINITY)])
    );
    let err = value_cause(&json.strict(true), b"[1e400]");
    assert!(
        err.starts_with("data is not valid JSON: number beyond the range of a 64-bit float"),
        "{err}"
    );
}

#[test]
fn malformed_json_gives_connects_message_and_our_line_and_column() {
    let json = plugin("JsonConverter", &[("schemas.enable", "false")]);
    let text = b"{\n  \"a\": 1,\n  \"b\" 2\n}";
    assert_eq!(value_error(&*json, text), JSON_FAILED);
    assert_eq!(
        value_cause(&*json, text),
        "value is not valid JSON: unexpected character '2': expected ':' after a member name at \
         line 3, column 7"
    );
    assert_eq!(
        value_cause(&*json, b"\xff"),
        "value is not valid JSON: invalid UTF-8 start byte 0xff at line 1, column 1"
    );
    // What Connect accepts: no content is null, and what follows a value is not read.
    assert!(value(&*json, bytes(b"")).unwrap().value().is_null());
    assert_eq!(
        value(&*json, bytes(b"{} {}")).unwrap().value(),
        &Value::Map(vec![])
    );
    // Strict JSON refuses both.
    let strict = plugin(
        "JsonConverter",
        &[("schemas.enable", "false"), ("json.strict", "true")],
    );
    assert!(value_cause(&*strict, b"").starts_with("value is not valid JSON: no JSON value"));
    assert!(
        value_cause(&*strict, b"{} {}")
            .starts_with("value is not valid JSON: content after the JSON value"),
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let nested = |n| Bytes::from(format!("{}{}", "[".repeat(n), "]".repeat(n)));
    for converter in [
        JsonConverter::new().schemas_enable(false),
        JsonConverter::new(),
        JsonConverter::new().strict(true),
    ] {
        let err = value_cause(&converter, &nested(100_000));
        assert!(err.contains("nesting deeper than 1000 levels"), "{err}");
    }
    // Connect's limit: 1000 levels are read.
    let schemaless = JsonConverter::new().schemas_enable(false);
    assert!(value(&schemaless, Some(nested(1000))).is_ok());
    // A deep schema inside an envelope is refused too.
    let schema = format!(
        "{}{{\"type\":\"string\"}}{}",
        r#"{"type":"array","items":"#.repeat(200),
        "}".repeat(200)
    );
    let envelope = Bytes::from(format!(r#"{{"schema":{schema},"payload":[]}}"#));
    assert!(value(&JsonConverter::new(), Some(envelope)).is_err());
}

// --- JsonConverter, with schemas --------------------------------------------------------

#[test]
fn envelope_payload_is_converted_per_schema() {
    let json = plugin("org.apache.kafka.connect.json.JsonConverter", &[]);
    let data = br#"{
        "schema": {"type": "struct", "name": "shop.Order", "optional": false, "fields": [
            {"field": "id", "type": "int64"},
            {"field": "qty", "type": "int8"},
            {"field": "price", "type": "double"},
            {"field": "paid", "type": "boolean"},
            {"field": "note", "type": "string", "optional": true},
            {"field": "blob", "type": "bytes"},
            {"field": "tags", "type": "array", "items": {"type": "string"}},
            {"field": "stock", "type": "map", "keys": {"type": "string"}, "values": {"type": "int32"}},
            {"field": "region", "type": "string", "default": "eu"}
        ]},
        "payload": {"id": 42, "qty": -3, "price": 9.5, "paid": true, "blob": "3q2+7w==",
                    "tags": ["a", "b"], "stock": {"x": 1}, "ignored": "yes", "region": null}
    }"#;
    let converted = value(&*json, bytes(data)).unwrap();
    let schema = converted.schema().unwrap();
    assert_eq!(schema.schema_type(), SchemaType::Struct);
    assert_eq!(schema.name(), Some("shop.Order"));
    assert_eq!(
        schema.field("qty").unwrap().schema().schema_type(),
        SchemaType::Int8
    );
    assert_eq!(
        converted.value(),
        &Value::Struct(vec![
            ("id".into(), Value::Int(42)),
            ("qty".into(), Value::Int(-3)),
            ("price".into(), Value::Float(9.5)),
            ("paid".into(), Value::Boolean(true)),
            ("note".into(), Value::Null),
            (
                "blob".into(),
                Value::Bytes(Bytes::from_static(&[0xde, 0xad, 0xbe, 0xef]))
            ),
            (
                "tags".into(),
                Value::Array(vec![Value::from("a"), Value::from("b")])
            ),
            ("stock".into(), map(vec![("x", Value::Int(1))])),
            ("region".into(), Value::from("eu")),
        ])
    );
}

#[test]
fn envelope_with_null_payload_follows_optional() {
    let json = JsonConverter::new();
    let optional = br#"{"schema": {"type": "string", "optional": true}, "payload": null}"#;
    let converted = value(&json, bytes(optional)).unwrap();
    assert!(converted.value().is_null());
    assert!(converted.schema().unwrap().is_optional());
    let required = br#"{"schema": {"type": "string"}, "payload": null}"#;
    assert_eq!(
        value_error(&json, required),
        "data does not match its schema: payload: null or missing, but the string schema is not \
         optional"
    );
}

#[test]
fn missing_envelope_says_to_disable_schemas_in_connects_words() {
    for is_key in [true, false] {
        let json = Plugins::new()
            .build_converter("JsonConverter", &BTreeMap::new(), is_key)
            .unwrap();
        let err = value(&*json, bytes(br#"{"id": 1, "name": "x"}"#)).unwrap_err();
        assert_eq!(err.to_string(), NOT_AN_ENVELOPE);
        assert!(std::error::Error::source(&err).is_none());
    }
    let json = JsonConverter::new();
    for text in [
        &b"[1]"[..],
        br#"{"schema": null}"#,
        br#"{"schema": null, "payload": 1, "extra": 2}"#,
        b"",
        b"null",
    ] {
        let err = value(&json, Some(Bytes::copy_from_slice(text))).unwrap_err();
        assert_eq!(err.to_string(), NOT_AN_ENVELOPE);
    }
}

#[test]
fn payload_not_matching_schema_names_the_place() {
    let json = JsonConverter::new().converter_type(ConverterType::Value);
    let data = br#"{"schema": {"type": "struct", "fields": [
        {"field": "lines", "type": "array", "items": {"type": "struct", "fields": [
            {"field": "sku", "type": "string"}]}}]},
        "payload": {"lines": [{"sku": "a"}, {"sku": 7}]}}"#;
    assert_eq!(
        value_error(&json, data),
        "value does not match its schema: payload.lines[1].sku: expected a string for the string \
         schema, found an integer"
    );
    let not_object = br#"{"schema": {"type": "struct", "fields": []}, "payload": "x"}"#;
    assert!(
        value_error(&json, not_object)
            .ends_with("expected an object for the struct schema, found a string")
    );
}

#[test]
fn integers_out_of_range_are_refused() {
    let json = JsonConverter::new().converter_type(ConverterType::Value);
    let cases: [(&[u8], &str); 4] = [
        (
            br#"{"schema": {"type": "int8"}, "payload": 128}"#,
            "payload: 128 is out of range for int8 (-128 to 127)",
        ),
        (
            br#"{"schema": {"type": "int16"}, "payload": -32769}"#,
            "payload: -32769 is out of range for int16 (-32768 to 32767)",
        ),
        (
            br#"{"schema": {"type": "int32"}, "payload": 2147483648}"#,
            "payload: 2147483648 is out of range for int32 (-2147483648 to 2147483647)",
        ),
        (
            br#"{"schema": {"type": "int64"}, "payload": 9223372036854775808}"#,
            "payload: 9223372036854775808 is out of range for int64",
        ),
    ];
    for (data, expected) in cases {
        let err = value_error(&json, data);
        assert!(
            err.starts_with(&format!("value does not match its schema: {expected}")),
            "{err}"
        );
    }
    let max = br#"{"schema": {"type": "int32"}, "payload": 2147483647}"#;
    assert_eq!(
        value(&json, bytes(max)).unwrap().value(),
        &Value::Int(2147483647)
    );
}

#[test]
fn bad_base64_is_refused() {
    let json = JsonConverter::new().converter_type(ConverterType::Value);
    let err = value_error(
        &json,
        br#"{"schema": {"type": "bytes"}, "payload": "not base64!"}"#,
    );
    assert!(
        err.starts_with(
            "value does not match its schema: payload: invalid base64 for the bytes schema: "
        ),
        "{err}"
    );
    let number = br#"{"schema": {"type": "bytes"}, "payload": 12}"#;
    assert!(
        value_error(&json, number)
            .ends_with("expected a base64 string for the bytes schema, found an integer")
    );
}

#[test]
fn invalid_schemas_are_refused() {
    let json = JsonConverter::new();
    let err = value_error(&json, br#"{"schema": {"type": "decimal"}, "payload": 1}"#);
    assert!(
        err.starts_with("data has an invalid schema: schema.type: unknown schema type `decimal`; expected one of int8"),
        "{err}"
    );
    let err = value_error(&json, br#"{"schema": {"type": "struct"}, "payload": {}}"#);
    assert_eq!(
        err,
        "data has an invalid schema: schema: a struct schema needs `fields`"
    );
}

#[test]
fn json_config_errors_name_converter_and_key() {
    let err = Plugins::new()
        .build_converter(
            "JsonConverter",
            &configs(&[("schemas.enable", "yes")]),
            false,
        )
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "value.converter JsonConverter: config `schemas.enable` has invalid value `yes`: expected \
         true or false"
    );
}

/// Nested schema defaults whose nulls each take a copy of the level below: ten levels of ten
/// nulls would make 10^9 copies (some 32 GB) out of an envelope of a few hundred bytes. The
/// converter refuses the record with an error instead of allocating them (Connect shares one
/// default object among its uses); ordinary uses of defaults still convert.
#[test]
fn defaults_nested_in_defaults_cannot_blow_up_memory() {
    let mut schema = r#"{"type":"int8","default":0}"#.to_owned();
    for _ in 0..10 {
        schema = format!(
            r#"{{"type":"array","items":{schema},"default":[null,null,null,null,null,null,null,null,null,null]}}"#
        );
    }
    let envelope = format!(r#"{{"schema":{schema},"payload":null}}"#);
    let cause = value_cause(&JsonConverter::new(), envelope.as_bytes());
    assert!(cause.contains("copies of the schema's defaults"), "{cause}");

    // A thousand nulls taking a short default, and a default array taking its items'.
    let envelope = format!(
        r#"{{"schema":{{"type":"array","items":{{"type":"string","default":"none"}}}},"payload":[{}]}}"#,
        vec!["null"; 1000].join(",")
    );
    let converted = value(&JsonConverter::new(), Some(Bytes::from(envelope))).unwrap();
    let Value::Array(items) = converted.value() else {
        panic!("{:?}", converted.value());
    };
    assert_eq!(items.len(), 1000);
    assert!(items.iter().all(|v| v == &Value::from("none")));
    let envelope = r#"{"schema":{"type":"array","items":{"type":"int32","default":7},"default":[null,1]},"payload":null}"#;
    let converted = value(&JsonConverter::new(), Some(Bytes::from(envelope))).unwrap();
    assert_eq!(
        converted.value(),
        &Value::Array(vec![Value::Int(7), Value::Int(1)])
    );
}

// --- Headers ------------------------------------------------------------------------------

fn record_with_headers() -> ConsumerRecord {
    let mut headers = Headers::new();
    headers.push("trace", bytes(b"a"));
    headers.push("tenant", None);
    headers.push("trace", bytes(b"b"));
    headers.push("raw", bytes(b"\xfe"));
    ConsumerRecord::new("orders", 3, 17)
        .with_key(bytes(b"k"))
        .with_value(bytes(b"v"))
        .with_headers(headers)
        .with_timestamp(1_700_000_000_000, TimestampType::CreateTime)
        .with_delivery_count(2)
}

#[test]
fn headers_keep_order_duplicates_and_nulls() {
    let converters = Converters::byte_array().with_header(Arc::new(SimpleHeaderConverter));
    let sink = converters.convert(&record_with_headers()).unwrap();
    assert_eq!(
        sink.headers(),
        [
            SinkHeader::new("trace", Value::from("a")),
            SinkHeader::new("tenant", Value::Null),
            SinkHeader::new("trace", Value::from("b")),
            SinkHeader::new("raw", Value::Bytes(Bytes::from_static(b"\xfe"))),
        ]
    );
}

#[test]
fn a_failing_header_converter_reports_its_stage_and_the_header() {
    let header = Plugins::new()
        .build_header_converter("StringConverter", &configs(&[("string.strict", "true")]))
        .unwrap();
    let converters = Converters::byte_array().with_header(header);
    let failure = converters.convert(&record_with_headers()).unwrap_err();
    assert_eq!(failure.stage(), Stage::HeaderConverter);
    assert_eq!(failure.class_name(), StringConverter::CLASS_NAME);
    assert!(!failure.is_retriable());
    assert_eq!(
        failure.error().to_string(),
        "Failed to deserialize string: "
    );
    let cause = last_cause(&failure);
    assert!(
        cause.starts_with("header `raw` is not valid UTF-8"),
        "{cause}"
    );
    // By default, as in Connect, the header is text with U+FFFD.
    let header = Plugins::new()
        .build_header_converter("StringConverter", &BTreeMap::new())
        .unwrap();
    let sink = Converters::byte_array()
        .with_header(header)
        .convert(&record_with_headers())
        .unwrap();
    assert_eq!(
        sink.headers()[3],
        SinkHeader::new("raw", Value::from("\u{fffd}"))
    );
}

#[test]
fn header_converters_by_connect_name() {
    let plugins = Plugins::new();
    for (class, expected) in [
        (
            "org.apache.kafka.connect.storage.SimpleHeaderConverter",
            SimpleHeaderConverter::CLASS_NAME,
        ),
        ("SimpleHeaderConverter", SimpleHeaderConverter::CLASS_NAME),
        (
            "org.apache.kafka.connect.converters.ByteArrayConverter",
            ByteArrayConverter::CLASS_NAME,
        ),
        ("JsonConverter", JsonConverter::CLASS_NAME),
    ] {
        let converter = plugins
            .build_header_converter(class, &BTreeMap::new())
            .unwrap();
        assert_eq!(converter.class_name(), expected);
    }
    // SimpleHeaderConverter converts headers only.
    let err = plugins
        .build_converter("SimpleHeaderConverter", &BTreeMap::new(), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("value.converter SimpleHeaderConverter: unknown converter class `SimpleHeaderConverter`; known: ByteArrayConverter, JsonConverter, StringConverter, org.apache"),
        "{err}"
    );
    // JSON headers with schemas.enable=true need the envelope, and say what to change.
    let json = plugins
        .build_header_converter("JsonConverter", &BTreeMap::new())
        .unwrap();
    let err = json
        .to_sink_header("t", "n", bytes(b"1").as_ref())
        .unwrap_err()
        .to_string();
    assert_eq!(err, NOT_AN_ENVELOPE);
}

// --- Converters bundle ----------------------------------------------------------------

#[test]
fn key_then_value_then_headers_stop_at_the_first_failure() {
    let json: Arc<dyn Converter> = Arc::new(JsonConverter::new().schemas_enable(false));
    let record = ConsumerRecord::new("t", 0, 0)
        .with_key(bytes(b"not json"))
        .with_value(bytes(b"not json either"));
    let both = Converters::byte_array()
        .with_key(json.clone())
        .with_value(json.clone());
    assert_eq!(
        both.convert(&record).unwrap_err().stage(),
        Stage::KeyConverter
    );
    let value_only = Converters::byte_array().with_value(json);
    let failure = value_only.convert(&record).unwrap_err();
    assert_eq!(failure.stage(), Stage::ValueConverter);
    assert_eq!(
        failure.class_name(),
        "org.apache.kafka.connect.json.JsonConverter"
    );
    assert_eq!(
        failure.to_string(),
        "VALUE_CONVERTER failed in org.apache.kafka.connect.json.JsonConverter"
    );
    // Connect's message, then our detail at the end of the chain of sources.
    let source = std::error::Error::source(&failure).unwrap();
    assert_eq!(source.to_string(), JSON_FAILED);
    let detail = last_cause(&failure);
    assert!(detail.starts_with("data is not valid JSON"), "{detail}");
}

#[test]
fn converted_records_keep_coordinates_timestamp_and_delivery_count() {
    let converters = Converters::byte_array()
        .with_key(Arc::new(StringConverter::new()))
        .with_value(Arc::new(StringConverter::new()));
    let sink = converters.convert(&record_with_headers()).unwrap();
    assert_eq!(
        (sink.topic(), sink.partition(), sink.offset()),
        ("orders", 3, 17)
    );
    assert_eq!(sink.original_id(), &record_with_headers().id());
    assert_eq!(sink.timestamp(), Some(1_700_000_000_000));
    assert_eq!(sink.timestamp_type(), TimestampType::CreateTime);
    assert_eq!(sink.delivery_count(), 2);
    assert_eq!(sink.key(), &Value::from("k"));
    assert_eq!(sink.key_schema().unwrap().schema_type(), SchemaType::String);
    assert_eq!(sink.value(), &Value::from("v"));

    let no_timestamp = record_with_headers().with_timestamp(-1, TimestampType::NoTimestampType);
    assert_eq!(converters.convert(&no_timestamp).unwrap().timestamp(), None);
}

/// A converter that claims the byte-array converter's class name but is not it.
#[derive(Debug)]
struct Impostor;

impl Converter for Impostor {
    fn to_sink_data(
        &self,
        _topic: &str,
        _headers: &Headers,
        data: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        Ok(SchemaAndValue::schemaless(Value::from(data.cloned())))
    }

    fn class_name(&self) -> &str {
        ByteArrayConverter::CLASS_NAME
    }
}

#[test]
fn fast_path_is_taken_only_with_byte_array_converters() {
    assert!(Converters::default().is_byte_array());
    assert!(Converters::byte_array().is_byte_array());
    let plugins = Plugins::new();
    let from_config = Converters::new(
        plugins
            .build_converter("ByteArrayConverter", &BTreeMap::new(), true)
            .unwrap(),
        plugins
            .build_converter(
                "org.apache.kafka.connect.converters.ByteArrayConverter",
                &BTreeMap::new(),
                false,
            )
            .unwrap(),
        plugins
            .build_header_converter("ByteArrayConverter", &BTreeMap::new())
            .unwrap(),
    );
    assert!(from_config.is_byte_array());
    assert!(
        !Converters::byte_array()
            .with_key(Arc::new(Impostor))
            .is_byte_array()
    );
    assert!(
        !Converters::byte_array()
            .with_value(Arc::new(StringConverter::new()))
            .is_byte_array()
    );
    assert!(
        !Converters::byte_array()
            .with_header(Arc::new(SimpleHeaderConverter))
            .is_byte_array()
    );
}

#[test]
fn byte_array_conversion_gives_bytes_everywhere() {
    let sink = Converters::default()
        .convert(&record_with_headers())
        .unwrap();
    let expected = SinkRecord::new("orders", 3, 17)
        .with_key_schema(sink.key_schema_arc().cloned())
        .with_key(Value::Bytes(Bytes::from_static(b"k")))
        .with_value_schema(sink.value_schema_arc().cloned())
        .with_value(Value::Bytes(Bytes::from_static(b"v")))
        .with_headers(vec![
            SinkHeader::new("trace", Value::Bytes(Bytes::from_static(b"a"))),
            SinkHeader::new("tenant", Value::Null),
            SinkHeader::new("trace", Value::Bytes(Bytes::from_static(b"b"))),
            SinkHeader::new("raw", Value::Bytes(Bytes::from_static(b"\xfe"))),
        ])
        .with_timestamp(Some(1_700_000_000_000), TimestampType::CreateTime)
        .with_delivery_count(2);
    assert_eq!(sink, expected);
    assert_eq!(
        sink.value_schema().unwrap().schema_type(),
        SchemaType::Bytes
    );
}

// --- Class names and errors of user converters ------------------------------------------

#[derive(Debug)]
struct RegistryDown;

impl Converter for RegistryDown {
    fn to_sink_data(
        &self,
        _topic: &str,
        _headers: &Headers,
        _data: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        Err(ConvertError::retriable(std::io::Error::other(
            "registry unavailable",
        )))
    }
}

#[test]
fn class_names() {
    assert_eq!(
        Converter::class_name(&ByteArrayConverter),
        "org.apache.kafka.connect.converters.ByteArrayConverter"
    );
    assert_eq!(
        Converter::class_name(&StringConverter::new()),
        "org.apache.kafka.connect.storage.StringConverter"
    );
    assert_eq!(
        HeaderConverter::class_name(&JsonConverter::new()),
        "org.apache.kafka.connect.json.JsonConverter"
    );
    assert_eq!(
        SimpleHeaderConverter.class_name(),
        "org.apache.kafka.connect.storage.SimpleHeaderConverter"
    );
    // A user type without its own name reports its Rust type name.
    assert_eq!(RegistryDown.class_name(), "convert::RegistryDown");
}

#[test]
fn retriable_converter_errors_stay_retriable() {
    let mut plugins = Plugins::new();
    plugins.register_converter("com.example.RegistryConverter", |_| {
        Ok(Arc::new(RegistryDown))
    });
    let converter = plugins
        .build_converter("com.example.RegistryConverter", &BTreeMap::new(), false)
        .unwrap();
    let failure = Converters::byte_array()
        .with_value(converter)
        .convert(&record_with_headers())
        .unwrap_err();
    assert!(failure.is_retriable());
    assert_eq!(failure.class_name(), "convert::RegistryDown");
}

#[test]
fn user_converters_see_their_converter_type() {
    let mut plugins = Plugins::new();
    plugins.register_converter("Seen", |configs| {
        let seen = configs.get("converter.type").cloned().unwrap_or_default();
        Err(kafka_share_sink::PluginError::invalid_config(
            "converter.type",
            seen,
            "just looking",
        ))
    });
    let err = plugins
        .build_converter("Seen", &BTreeMap::new(), true)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "key.converter Seen: config `converter.type` has invalid value `key`: just looking"
    );
}

proptest! {
    #[test]
    fn any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let data = Bytes::from(data);
        let _ = value(&JsonConverter::new(), Some(data.clone()));
        let _ = value(&JsonConverter::new().schemas_enable(false), Some(data.clone()));
        let _ = value(&JsonConverter::new().schemas_enable(false).strict(true), Some(data.clone()));
        let strict = value(&StringConverter::new().strict(true), Some(data.clone()));
        let lossy = value(&StringConverter::new(), Some(data.clone()));
        // The lenient string converter never fails, and agrees with the strict one on UTF-8.
        prop_assert!(lossy.is_ok());
        if let Ok(strict) = strict {
            prop_assert_eq!(strict, lossy.unwrap());
        }
        let _ = SimpleHeaderConverter.to_sink_header("t", "k", Some(&data));
    }

    #[test]
    fn any_envelope_text_never_panics(
        schema in "\\{\"type\":\"(int8|int64|float|double|bytes|string|array|map|struct)\"(,\"items\":\\{\"type\":\"int8\"\\})?(,\"fields\":\\[\\])?(,\"optional\":(true|false))?\\}",
        payload in "(null|1|-1|1e3|300|\"AA==\"|\"x\"|\\[1,\\[2\\]\\]|\\{\"a\":1\\}|true|9223372036854775808)",
    ) {
        let data = Bytes::from(format!(r#"{{"schema":{schema},"payload":{payload}}}"#));
        let _ = value(&JsonConverter::new(), Some(data));
    }
}
