//! Parity with a real Kafka Connect worker: the records of `tests/fixtures/connect_dlq/
//! records.json` go through the crate's driver on the embedded share group, with the
//! converters, transform, tolerance and dead-letter settings of each connector captured by
//! `scripts/connect-dlq-fixtures.sh` from Kafka Connect 4.4, and the outcome is compared with
//! what Connect did, record by record:
//!
//! - the same records become dead letters (and the others reach the task);
//! - a dead letter keeps the original key, value and headers, and has the same header names in
//!   the same order;
//! - every `__connect.errors.*` header is Connect's, the exception class name and message
//!   exactly; the stack trace by its first line and the classes of its `Caused by:` lines
//!   (the messages of those carry our own detail, and Connect's frames are not ours);
//! - what the converters made of a record that was not dead-lettered is what Connect made of
//!   it (the Java class and text the capture sink wrote).
//!
//! The few differences kept on purpose are listed, each with its reason, in
//! [`VALUE_DIFFERENCES`] and [`MESSAGE_DIFFERENCES`]; a listed case must still differ, so the
//! lists cannot hide a change.
//!
//! No broker is needed. Connect's own transform and sink task are stood in for: the
//! `ExtractField$Value` transform by a closure with its behaviour and message, and the capture
//! sink's "report:" records (which it hands to Connect's `ErrantRecordReporter`) by a task that
//! fails `put` with the same message, which the driver dead-letters as `TASK_PUT`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, GroupConfig, ProduceRecord, RecordState,
};
use kafka_share_sink::transform::transform_fn;
use kafka_share_sink::{
    ConsumerRecord, Converters, DriverConfig, Error, ErrorHandling, ErrorTolerance, Plugins,
    Schema, SchemaType, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError, TransformChain,
    TransformError, Value,
};
use serde_json::Value as Json;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/connect_dlq");
const INPUT: &str = "connect-dlq-input";
const GROUP: &str = "parity";
const CONTEXT: &str = "__connect.errors.";
const STACKTRACE: &str = "__connect.errors.exception.stacktrace";

/// The connectors whose values come from Connect's JsonConverter without schemas.
const JSON_VALUES: &[&str] = &[
    "connect-dlq-json",
    "connect-dlq-json-headers",
    "connect-dlq-put",
];

/// Converted values that differ from Connect's on purpose: (connectors, case, reason). Each
/// must still differ: a listed case that matches Connect fails the test.
const VALUE_DIFFERENCES: &[(&[&str], &str, &str)] = &[
    (
        JSON_VALUES,
        "escaped-lone-surrogate",
        "Java keeps a lone surrogate in a String; a Rust String cannot hold one, so it is U+FFFD",
    ),
    (
        JSON_VALUES,
        "big-integer",
        "Connect keeps the low 64 bits of an integer beyond i64 (a wrong Long); we give the \
         rounded double",
    ),
    (
        JSON_VALUES,
        "long-max-plus-one",
        "Connect keeps the low 64 bits of an integer beyond i64 (a wrong Long); we give the \
         rounded double",
    ),
    (
        JSON_VALUES,
        "digits-1000",
        "Connect keeps the low 64 bits of an integer beyond i64 (a wrong Long); we give the \
         rounded double (here infinite)",
    ),
];

/// Dead letters that differ from Connect's on purpose: (connectors, case, reason). Each must
/// still differ. The transform stand-in names the Java class of the value it refuses, so a
/// value of another type (see [`VALUE_DIFFERENCES`]) changes its message.
const MESSAGE_DIFFERENCES: &[(&[&str], &str, &str)] = &[
    (
        &["connect-dlq-transform"],
        "big-integer",
        "the value is a Double here, a Long in Connect (see VALUE_DIFFERENCES)",
    ),
    (
        &["connect-dlq-transform"],
        "long-max-plus-one",
        "the value is a Double here, a Long in Connect (see VALUE_DIFFERENCES)",
    ),
    (
        &["connect-dlq-transform"],
        "digits-1000",
        "the value is a Double here, a Long in Connect (see VALUE_DIFFERENCES)",
    ),
];

/// The reason `case` is listed as different for `connector`, if it is.
fn listed(
    list: &[(&[&str], &'static str, &'static str)],
    connector: &str,
    case: &str,
) -> Option<&'static str> {
    list.iter()
        .find(|(connectors, k, _)| connectors.contains(&connector) && *k == case)
        .map(|(_, _, reason)| *reason)
}

/// Adds the differences of one record to `problems`, or, for a record listed as different
/// on purpose, checks that it still differs.
fn expect(
    problems: &mut Vec<String>,
    listed: Option<&str>,
    what: &str,
    compare: impl FnOnce(&mut Vec<String>),
) {
    let mut found = Vec::new();
    compare(&mut found);
    match listed {
        None => problems.extend(found),
        Some(reason) if found.is_empty() => {
            problems.push(format!(
                "{what}: listed as different ({reason}) but matches Connect"
            ));
        }
        Some(_) => {}
    }
}

// --- The fixtures -----------------------------------------------------------------------------

fn read_json(name: &str) -> Json {
    let path = format!("{FIXTURES}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The byte notation of the fixtures: a string is UTF-8, `{"hex"}` raw bytes, `{"repeat",
/// "times"}` and `{"concat"}` build longer ones, null is null.
fn bytes_of(spec: &Json) -> Option<Bytes> {
    fn append(spec: &Json, out: &mut Vec<u8>) {
        match spec {
            Json::String(s) => out.extend_from_slice(s.as_bytes()),
            Json::Object(o) if o.contains_key("hex") => {
                let hex = o["hex"].as_str().expect("hex string");
                for pair in hex.as_bytes().chunks(2) {
                    let pair = std::str::from_utf8(pair).expect("ASCII");
                    out.push(u8::from_str_radix(pair, 16).expect("hex digits"));
                }
            }
            Json::Object(o) if o.contains_key("repeat") => {
                for _ in 0..o["times"].as_u64().expect("times") {
                    append(&o["repeat"], out);
                }
            }
            Json::Object(o) if o.contains_key("concat") => {
                for part in o["concat"].as_array().expect("parts") {
                    append(part, out);
                }
            }
            other => panic!("not a byte notation: {other}"),
        }
    }
    if spec.is_null() {
        return None;
    }
    let mut out = Vec::new();
    append(spec, &mut out);
    Some(Bytes::from(out))
}

/// One record of records.json.
#[derive(Debug, Clone)]
struct Input {
    case: String,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(String, Option<Bytes>)>,
}

fn inputs() -> Vec<Input> {
    let doc = read_json("records.json");
    doc["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| Input {
            case: r["case"].as_str().expect("case").to_owned(),
            key: bytes_of(&r["key"]),
            value: bytes_of(&r["value"]),
            headers: r
                .get("headers")
                .and_then(Json::as_array)
                .map(|hs| {
                    hs.iter()
                        .map(|h| (h[0].as_str().expect("name").to_owned(), bytes_of(&h[1])))
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// What Connect did with each record for one connector.
struct Capture {
    name: String,
    config: BTreeMap<String, String>,
    records: Vec<Json>,
}

fn capture(connector: &str) -> Capture {
    let doc = read_json(&format!("{connector}.json"));
    let config = doc["connector"]
        .as_object()
        .expect("connector config")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string config").to_owned()))
        .collect::<BTreeMap<_, _>>();
    Capture {
        name: config["name"].clone(),
        config,
        records: doc["records"].as_array().expect("records").clone(),
    }
}

/// The headers of a captured dead letter: (name, value as fixture notation).
fn captured_headers(dead_letter: &Json) -> Vec<(String, Json)> {
    dead_letter["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| (h[0].as_str().expect("name").to_owned(), h[1].clone()))
        .collect()
}

// --- Our side ---------------------------------------------------------------------------------

/// The settings of `prefix` (`value.converter.`) in a connector config, prefix removed.
fn sub_configs(config: &BTreeMap<String, String>, prefix: &str) -> BTreeMap<String, String> {
    config
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_owned(), v.clone())))
        .collect()
}

/// The converters of the captured connector, built by the crate from its config; the header
/// converter is the worker's default, SimpleHeaderConverter, unless the connector names one.
fn converters(config: &BTreeMap<String, String>) -> Converters {
    let plugins = Plugins::new();
    let key = plugins
        .build_converter(
            &config["key.converter"],
            &sub_configs(config, "key.converter."),
            true,
        )
        .expect("key converter");
    let value = plugins
        .build_converter(
            &config["value.converter"],
            &sub_configs(config, "value.converter."),
            false,
        )
        .expect("value converter");
    let header_class = config.get("header.converter").map_or(
        "org.apache.kafka.connect.storage.SimpleHeaderConverter",
        String::as_str,
    );
    let header = plugins
        .build_header_converter(header_class, &sub_configs(config, "header.converter."))
        .expect("header converter");
    Converters::new(key, value, header)
}

/// The Java class Connect gives a value with this schema (Connect's integer and float widths).
fn java_class_with(value: &Value, schema: Option<&Schema>) -> &'static str {
    match (value, schema.map(Schema::schema_type)) {
        (Value::Int(_), Some(SchemaType::Int8)) => "java.lang.Byte",
        (Value::Int(_), Some(SchemaType::Int16)) => "java.lang.Short",
        (Value::Int(_), Some(SchemaType::Int32)) => "java.lang.Integer",
        (Value::Float(_), Some(SchemaType::Float32)) => "java.lang.Float",
        _ => java_class(value),
    }
}

/// The Java class Connect's JsonConverter gives a value of this kind (schemaless).
fn java_class(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bytes(_) => "[B",
        Value::String(_) => "java.lang.String",
        Value::Boolean(_) => "java.lang.Boolean",
        Value::Int(_) => "java.lang.Long",
        Value::Float(_) => "java.lang.Double",
        Value::Array(_) => "java.util.ArrayList",
        Value::Map(_) => "java.util.HashMap",
        Value::Struct(_) => "org.apache.kafka.connect.data.Struct",
        _ => "unknown",
    }
}

/// The transforms of the captured connector: a stand-in for Connect's `ExtractField$Value`
/// (schemaless: a map gives its field, null stays null, anything else is refused with the
/// transform's message).
fn transforms(config: &BTreeMap<String, String>) -> TransformChain {
    let Some(alias) = config.get("transforms") else {
        return TransformChain::new();
    };
    let class = &config[&format!("transforms.{alias}.type")];
    assert_eq!(
        class, "org.apache.kafka.connect.transforms.ExtractField$Value",
        "no stand-in for {class}"
    );
    let field = Value::from(config[&format!("transforms.{alias}.field")].as_str());
    let extract = transform_fn(move |record: SinkRecord| {
        let extracted = match record.value() {
            Value::Null => Value::Null,
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| *k == field)
                .map_or(Value::Null, |(_, v)| v.clone()),
            other => {
                return Err(TransformError::new(format!(
                    "Only Map objects supported in absence of schema for [field extraction], \
                     found: {}",
                    java_class(other)
                )));
            }
        };
        Ok(Some(record.with_value(extracted)))
    })
    .named(class.clone());
    TransformChain::new().then(extract)
}

type Seen = Arc<Mutex<Vec<SinkRecord>>>;

/// Keeps what it is given; with `report`, fails `put` for a "report:" string, as the capture
/// sink reports it.
struct Task {
    seen: Seen,
    report: bool,
}

#[async_trait]
impl SinkTask for Task {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        for record in records {
            if let (true, Value::String(s)) = (self.report, record.value()) {
                if let Some(message) = s.strip_prefix("report:") {
                    return Err(TaskError::fatal(message.trim().to_owned()));
                }
            }
        }
        self.seen.lock().unwrap().extend_from_slice(records);
        Ok(())
    }
}

/// Runs every input through the driver as `capture` configures it; what was put, by offset,
/// and the dead letters, by original offset.
async fn run(
    capture: &Capture,
    inputs: &[Input],
) -> (BTreeMap<i64, SinkRecord>, BTreeMap<i64, ConsumerRecord>) {
    let broker = EmbeddedBroker::new();
    broker.create_topic(INPUT, 1).unwrap();
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .unwrap();
    for input in inputs {
        let mut record = ProduceRecord::new()
            .partition(0)
            .timestamp(1_700_000_000_000);
        if let Some(key) = &input.key {
            record = record.key(key.clone());
        }
        if let Some(value) = &input.value {
            record = record.value(value.clone());
        }
        for (name, value) in &input.headers {
            record = match value {
                Some(v) => record.header(name.clone(), v.clone()),
                None => record.null_header(name.clone()),
            };
        }
        broker.produce(INPUT, record).unwrap();
    }
    let config = &capture.config;
    assert_eq!(config["errors.tolerance"], "all");
    assert_eq!(
        config["errors.deadletterqueue.context.headers.enable"],
        "true"
    );
    let dlq_topic = &config["errors.deadletterqueue.topic.name"];
    let dlq = Arc::new(broker.dead_letter_queue(dlq_topic).unwrap());
    let report = config.get("capture.report").is_some_and(|r| r == "true");
    let seen = Seen::default();
    let n = i64::try_from(inputs.len()).unwrap();
    let settled = |broker: &EmbeddedBroker| {
        (0..n).all(|offset| {
            let state = broker
                .record_state(GROUP, INPUT, 0, offset)
                .map(|v| v.state());
            matches!(
                state,
                Some(RecordState::Acknowledged | RecordState::Archived)
            )
        })
    };
    // A failed put stops a driver; the next one goes on with the rest. One record a poll, so
    // a failed put concerns one record, as Connect's reporter does.
    let options = ConsumerOptions::new().max_poll_records(if report { 1 } else { 500 });
    let mut iterations = 0;
    while !settled(&broker) {
        let driver_config = DriverConfig::new([INPUT])
            .poll_timeout(Duration::from_millis(10))
            .converters(converters(config))
            .transforms(transforms(config))
            .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
            .dead_letter_queue(dlq.clone(), true)
            .connector(capture.name.clone(), 0);
        let mut driver = ShareSinkTask::new(
            Box::new(Task {
                seen: Arc::clone(&seen),
                report,
            }),
            broker.share_consumer_with(GROUP, options.clone()),
            driver_config,
        );
        driver.initialize().await.unwrap();
        while !settled(&broker) {
            iterations += 1;
            assert!(
                iterations < 10_000,
                "{}: the records do not settle",
                capture.name
            );
            match driver.iteration().await {
                Ok(_) => {}
                Err(Error::Task { .. }) if report => break,
                Err(e) => panic!("{}: {e}", capture.name),
            }
        }
        let _ = driver.close().await;
    }
    let put = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.original_id().offset(), r.clone()))
        .collect();
    let letters = broker
        .read_log(dlq_topic, 0)
        .unwrap()
        .into_iter()
        .map(|letter| {
            let offset = letter
                .headers()
                .last("__connect.errors.offset")
                .and_then(|h| h.value())
                .map(|v| String::from_utf8_lossy(v).parse::<i64>().unwrap())
                .expect("an offset header");
            (offset, letter)
        })
        .collect();
    (put, letters)
}

// --- Comparing --------------------------------------------------------------------------------

/// Header bytes in the fixture notation: text when UTF-8, else `{"hex"}`.
fn notation(value: Option<&Bytes>) -> Json {
    match value {
        None => Json::Null,
        Some(v) => match std::str::from_utf8(v) {
            Ok(text) => Json::String(text.to_owned()),
            Err(_) => {
                let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                serde_json::json!({ "hex": hex })
            }
        },
    }
}

/// The class names of the `Caused by:` lines of a stack trace.
fn caused_by_classes(trace: &str) -> Vec<&str> {
    trace
        .lines()
        .filter_map(|l| l.strip_prefix("Caused by: "))
        .map(|l| l.split(": ").next().unwrap_or(l))
        .collect()
}

/// Compares one dead letter with Connect's; the differences, as text.
fn compare_dead_letter(
    connector: &str,
    input: &Input,
    ours: &ConsumerRecord,
    theirs: &Json,
    problems: &mut Vec<String>,
) {
    let case = &input.case;
    let mut problem = |p: String| problems.push(format!("{connector} {case}: {p}"));
    assert_eq!(
        theirs["original_preserved"],
        Json::Bool(true),
        "Connect kept the original"
    );
    if ours.key() != input.key.as_ref() || ours.value() != input.value.as_ref() {
        problem("the dead letter's key or value is not the original".into());
    }
    // Our own reason header comes last; Connect writes none.
    if ours
        .headers()
        .last(kafka_share_sink::dlq::headers::REASON)
        .is_none()
    {
        problem("no __connect.errors.reason header".into());
    }
    let ours_headers: Vec<(String, Json)> = ours
        .headers()
        .iter()
        .filter(|h| h.key() != kafka_share_sink::dlq::headers::REASON)
        .map(|h| (h.key().to_owned(), notation(h.value())))
        .collect();
    let theirs_headers = captured_headers(theirs);
    let names = |hs: &[(String, Json)]| hs.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    if names(&ours_headers) != names(&theirs_headers) {
        problem(format!(
            "header names {:?}, Connect's {:?}",
            names(&ours_headers),
            names(&theirs_headers)
        ));
        return;
    }
    for ((name, ours), (_, theirs)) in ours_headers.iter().zip(&theirs_headers) {
        if !name.starts_with(CONTEXT) {
            if ours != theirs {
                problem(format!(
                    "original header {name}: {ours}, Connect's {theirs}"
                ));
            }
            continue;
        }
        if name == STACKTRACE {
            let (Some(ours), Some(theirs)) = (ours.as_str(), theirs.as_str()) else {
                problem(format!("{name}: {ours} / {theirs}"));
                continue;
            };
            let first = |t: &str| t.lines().next().unwrap_or("").to_owned();
            if first(ours) != first(theirs) {
                problem(format!(
                    "stack trace first line {:?}, Connect's {:?}",
                    first(ours),
                    first(theirs)
                ));
            }
            if caused_by_classes(ours) != caused_by_classes(theirs) {
                problem(format!(
                    "Caused by: {:?}, Connect's {:?}",
                    caused_by_classes(ours),
                    caused_by_classes(theirs)
                ));
            }
        } else if ours != theirs {
            problem(format!("{name}: {ours}, Connect's {theirs}"));
        }
    }
}

/// Java's `toString` of a converted value, maps with their entries sorted so that Java's
/// `HashMap` order does not matter.
fn java_text(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bytes(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
        Value::String(s) => s.clone(),
        Value::Boolean(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => java_double(*f),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(java_text).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(entries) => {
            let mut entries: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}={}", java_text(k), java_text(v)))
                .collect();
            entries.sort();
            format!("{{{}}}", entries.join(", "))
        }
        other => format!("{other:?}"),
    }
}

/// A double as a canonical text both sides agree on.
fn java_double(f: f64) -> String {
    if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{f:e}")
    }
}

/// Java's `toString` text, with map entries sorted and doubles canonical, as [`java_text`]
/// writes it (for the simple keys and values of the fixtures).
fn canonical_java_text(text: &str, class: &str) -> String {
    fn parse(s: &[u8], i: &mut usize) -> String {
        match s.get(*i) {
            Some(b'{') | Some(b'[') => {
                let (open, close) = (s[*i], if s[*i] == b'{' { b'}' } else { b']' });
                *i += 1;
                let mut items = Vec::new();
                while *i < s.len() && s[*i] != close {
                    let before = *i;
                    items.push(parse(s, i));
                    if *i == before {
                        // Not Java's toString of a map or list: keep the rest as it is.
                        items.push(String::from_utf8_lossy(&s[*i..]).into_owned());
                        *i = s.len();
                    }
                    if s.get(*i) == Some(&b',') {
                        *i += 2;
                    }
                }
                *i += 1;
                if open == b'{' {
                    items.sort();
                }
                let (o, c) = (char::from(open), char::from(close));
                format!("{o}{}{c}", items.join(", "))
            }
            _ => {
                let start = *i;
                while let Some(&b) = s.get(*i) {
                    if matches!(b, b',' | b']' | b'}' | b'{' | b'[') {
                        break;
                    }
                    *i += 1;
                }
                let token = String::from_utf8_lossy(&s[start..*i]).into_owned();
                // A map entry: key=value, the value possibly a container.
                if let Some(key) = token.strip_suffix('=') {
                    return format!("{key}={}", parse(s, i));
                }
                match token.split_once('=') {
                    Some((k, v)) => format!("{k}={}", scalar(v)),
                    None => scalar(&token),
                }
            }
        }
    }
    fn scalar(token: &str) -> String {
        match token.parse::<f64>() {
            Ok(f) if token.contains(['.', 'E']) => java_double(f),
            _ if token == "Infinity" || token == "-Infinity" => token.to_owned(),
            _ => token.to_owned(),
        }
    }
    match class {
        "java.lang.Double" => scalar(text),
        "java.util.HashMap" | "java.util.ArrayList" | "java.util.LinkedHashMap" => {
            parse(text.as_bytes(), &mut 0)
        }
        _ => text.to_owned(),
    }
}

/// Compares what the converters made of a record with what Connect's made of it.
fn compare_converted(
    connector: &str,
    case: &str,
    ours: &SinkRecord,
    theirs: &Json,
    compare_headers: bool,
    problems: &mut Vec<String>,
) {
    let check = |what: &str,
                 value: &Value,
                 schema: Option<&Schema>,
                 theirs: &Json,
                 problems: &mut Vec<String>| {
        let class = theirs["class"].as_str().unwrap_or("null");
        let text = theirs["text"].as_str().unwrap_or("null");
        let ours_class = java_class_with(value, schema);
        let ours_text = java_text(value);
        let theirs_text = canonical_java_text(text, class);
        if ours_class != class || ours_text != theirs_text {
            problems.push(format!(
                "{connector} {case}: {what} is {ours_class} {ours_text:?}, Connect's {class} \
                 {theirs_text:?}"
            ));
        }
    };
    check(
        "the key",
        ours.key(),
        ours.key_schema(),
        &theirs["key"],
        problems,
    );
    check(
        "the value",
        ours.value(),
        ours.value_schema(),
        &theirs["value"],
        problems,
    );
    let their_headers = theirs["headers"].as_array().expect("headers");
    if their_headers.len() != ours.headers().len() {
        problems.push(format!("{connector} {case}: header count differs"));
        return;
    }
    for (ours, theirs) in ours.headers().iter().zip(their_headers) {
        if ours.key() != theirs[0].as_str().unwrap_or_default() {
            problems.push(format!("{connector} {case}: header names differ"));
        } else if compare_headers {
            check(
                &format!("header {}", ours.key()),
                ours.value(),
                None,
                &theirs[1],
                problems,
            );
        }
    }
}

async fn parity(connector: &str) {
    let capture = capture(connector);
    let inputs = inputs();
    assert_eq!(
        capture.records.len(),
        inputs.len(),
        "the fixture is of records.json"
    );
    let (put, letters) = run(&capture, &inputs).await;
    // Connect's SimpleHeaderConverter infers numbers, lists and maps from header text; ours
    // keeps the text (documented), so header values are compared for other converters only.
    let compare_headers = capture.config.contains_key("header.converter");
    let mut problems = Vec::new();
    for (offset, (input, theirs)) in (0_i64..).zip(inputs.iter().zip(&capture.records)) {
        assert_eq!(theirs["case"].as_str(), Some(input.case.as_str()));
        let case = input.case.as_str();
        match (
            &theirs["dead_letter"],
            letters.get(&offset),
            put.get(&offset),
        ) {
            (Json::Null, None, Some(ours)) => expect(
                &mut problems,
                listed(VALUE_DIFFERENCES, connector, case),
                &format!("{connector} {case}"),
                |found| {
                    compare_converted(
                        connector,
                        case,
                        ours,
                        &theirs["sink"],
                        compare_headers,
                        found,
                    )
                },
            ),
            (Json::Null, Some(letter), _) => {
                let stage = letter
                    .headers()
                    .last("__connect.errors.stage")
                    .and_then(|h| h.value())
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                problems.push(format!(
                    "{connector} {case}: dead-lettered ({stage:?}), Connect accepted it"
                ));
            }
            (Json::Null, None, None) => {
                problems.push(format!("{connector} {case}: neither put nor dead-lettered"));
            }
            (dead, Some(letter), _) => expect(
                &mut problems,
                listed(MESSAGE_DIFFERENCES, connector, case),
                &format!("{connector} {case}"),
                |found| compare_dead_letter(connector, input, letter, dead, found),
            ),
            (_, None, _) => {
                problems.push(format!(
                    "{connector} {case}: Connect dead-lettered it, we did not"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} differences from Connect:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[tokio::test(start_paused = true)]
async fn json_converter_without_schemas() {
    parity("connect-dlq-json").await;
}

#[tokio::test(start_paused = true)]
async fn json_header_converter() {
    parity("connect-dlq-json-headers").await;
}

#[tokio::test(start_paused = true)]
async fn json_converter_with_schemas() {
    parity("connect-dlq-json-schemas").await;
}

#[tokio::test(start_paused = true)]
async fn string_converter() {
    parity("connect-dlq-string").await;
}

#[tokio::test(start_paused = true)]
async fn byte_array_converter() {
    parity("connect-dlq-bytes").await;
}

#[tokio::test(start_paused = true)]
async fn extract_field_transform() {
    parity("connect-dlq-transform").await;
}

#[tokio::test(start_paused = true)]
async fn sink_task_put() {
    parity("connect-dlq-put").await;
}
