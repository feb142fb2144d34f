//! Transforms and predicates: Filter under each predicate, stage order, original
//! coordinates, failures, and building chains from Connect class names.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kafka_share_sink::transform::{
    DropHeaders, Filter, HasHeaderKey, InsertHeader, RecordIsTombstone, TopicNameMatches,
    predicate_fn, transform_fn,
};
use kafka_share_sink::{
    ChainStageSpec, PluginError, PluginKind, Plugins, Predicate, SinkHeader, SinkRecord, Stage,
    StageError, Transform, TransformChain, TransformError, Value,
};

fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn record(topic: &str, offset: i64) -> SinkRecord {
    SinkRecord::new(topic, 0, offset).with_value(Value::from("v"))
}

fn with_header(record: SinkRecord, key: &str) -> SinkRecord {
    record.with_headers(vec![SinkHeader::new(key, Value::Null)])
}

/// The offsets of the records the chain keeps.
fn kept(chain: &TransformChain, records: Vec<SinkRecord>) -> Vec<i64> {
    records
        .into_iter()
        .filter_map(|r| chain.apply(r).expect("no failure"))
        .map(|r| r.offset())
        .collect()
}

/// One record matching each predicate, and one matching none: offsets 1 (header `audit`),
/// 2 (topic `orders-eu`), 3 (tombstone), 4 (nothing).
fn sample() -> Vec<SinkRecord> {
    vec![
        with_header(record("orders", 1), "audit"),
        record("orders-eu", 2),
        SinkRecord::new("orders", 0, 3),
        record("orders", 4),
    ]
}

#[test]
fn filter_under_each_predicate_and_its_negation() {
    let predicates: Vec<(Arc<dyn Predicate>, i64)> = vec![
        (Arc::new(HasHeaderKey::new("audit")), 1),
        (Arc::new(TopicNameMatches::new("orders-.*").unwrap()), 2),
        (Arc::new(RecordIsTombstone), 3),
    ];
    for (predicate, matching) in predicates {
        let drop_matching = TransformChain::new().then_if(Filter, predicate.clone(), false);
        let mut expected: Vec<i64> = vec![1, 2, 3, 4];
        expected.retain(|&o| o != matching);
        assert_eq!(kept(&drop_matching, sample()), expected, "{predicate:?}");

        let keep_matching = TransformChain::new().then_if(Filter, predicate.clone(), true);
        assert_eq!(
            kept(&keep_matching, sample()),
            [matching],
            "{predicate:?} negated"
        );
    }
    // Without a predicate, Filter drops everything.
    assert!(kept(&TransformChain::new().then(Filter), sample()).is_empty());
}

#[test]
fn stages_run_in_order_and_stop_at_a_drop() {
    let chain = TransformChain::new()
        .then(InsertHeader::new("step", Value::from("first")))
        .then(InsertHeader::new("step", Value::from("second")))
        // Drop what already has a `stop` header: the stage after it must not run on it.
        .then_if(Filter, HasHeaderKey::new("stop"), false)
        .then(InsertHeader::new("step", Value::from("third")));
    let out = chain.apply(record("t", 0)).unwrap().unwrap();
    let steps: Vec<&str> = out
        .headers()
        .iter()
        .filter_map(|h| h.value().as_str())
        .collect();
    assert_eq!(steps, ["first", "second", "third"]);
    assert!(
        chain
            .apply(with_header(record("t", 1), "stop"))
            .unwrap()
            .is_none()
    );

    // A predicate sees the record as the earlier stages left it.
    let route_then_filter = TransformChain::new()
        .then(transform_fn(|r: SinkRecord| {
            let p = r.partition();
            Ok(Some(r.with_topic_partition("orders-eu", p)))
        }))
        .then_if(Filter, TopicNameMatches::new("orders-eu").unwrap(), false);
    assert!(
        route_then_filter
            .apply(record("orders", 0))
            .unwrap()
            .is_none()
    );
}

#[test]
fn topic_changing_transform_keeps_original_coordinates() {
    let chain = TransformChain::new().then(transform_fn(|r: SinkRecord| {
        let topic = format!("{}-archive", r.topic());
        Ok(Some(r.with_topic_partition(topic, 9)))
    }));
    let input = SinkRecord::new("orders", 2, 41).with_value(Value::from("v"));
    let out = chain.apply(input).unwrap().unwrap();
    assert_eq!((out.topic(), out.partition()), ("orders-archive", 9));
    assert_eq!(
        (
            out.original_topic(),
            out.original_partition(),
            out.original_offset(),
            out.offset()
        ),
        ("orders", 2, 41, 41)
    );
}

#[test]
fn a_failing_transform_reports_its_stage_and_class_and_stops_the_chain() {
    let after = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&after);
    let chain = TransformChain::new()
        .then(InsertHeader::new("a", Value::Null))
        .then(
            transform_fn(|r: SinkRecord| {
                Err(TransformError::new(format!(
                    "record {} has no `region` field",
                    r.offset()
                )))
            })
            .named("com.example.RouteByRegion"),
        )
        .then(transform_fn(move |r| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(Some(r))
        }));
    let failure = chain.apply(record("t", 5)).unwrap_err();
    assert_eq!(failure.stage(), Stage::Transformation);
    assert_eq!(failure.class_name(), "com.example.RouteByRegion");
    assert!(!failure.is_retriable());
    assert!(matches!(failure.error(), StageError::Transform(_)));
    assert_eq!(
        failure.error().to_string(),
        "record 5 has no `region` field"
    );
    assert_eq!(after.load(Ordering::SeqCst), 0);
}

#[derive(Debug)]
struct Flaky;

impl Transform for Flaky {
    fn apply(&self, _record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
        Err(TransformError::retriable(std::io::Error::other(
            "lookup timed out",
        )))
    }
}

#[test]
fn retriable_transform_errors_stay_retriable_and_default_class_name_is_the_type() {
    let failure = TransformChain::new()
        .then(Flaky)
        .apply(record("t", 0))
        .unwrap_err();
    assert!(failure.is_retriable());
    assert_eq!(failure.class_name(), "transform::Flaky");
    assert_eq!(
        Filter.class_name(),
        "org.apache.kafka.connect.transforms.Filter"
    );
    assert_eq!(
        RecordIsTombstone.class_name(),
        "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"
    );
}

#[test]
fn header_transforms() {
    let chain = TransformChain::new()
        .then(DropHeaders::new(["secret", "token"]))
        .then(InsertHeader::new("source", Value::from("eu")));
    let input = record("t", 0).with_headers(vec![
        SinkHeader::new("secret", Value::from("x")),
        SinkHeader::new("trace", Value::from("1")),
        SinkHeader::new("token", Value::Null),
        SinkHeader::new("secret", Value::from("y")),
    ]);
    let out = chain.apply(input).unwrap().unwrap();
    assert_eq!(
        out.headers(),
        [
            SinkHeader::new("trace", Value::from("1")),
            SinkHeader::new("source", Value::from("eu")),
        ]
    );
}

// --- Plugins ------------------------------------------------------------------------------

#[test]
fn chains_build_from_connect_names_and_aliases() {
    let plugins = Plugins::new();
    let none = BTreeMap::new();
    let audit = configs(&[("name", "audit")]);
    let eu = configs(&[("pattern", "orders-.*")]);
    for (filter, has_header, topic_matches, tombstone) in [
        (
            "org.apache.kafka.connect.transforms.Filter",
            "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
            "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
        ),
        (
            "Filter",
            "HasHeaderKey",
            "TopicNameMatches",
            "RecordIsTombstone",
        ),
    ] {
        let chain = plugins
            .build_chain([
                ChainStageSpec::new("dropAudit", filter, &none)
                    .with_predicate("isAudit", has_header, &audit, false),
                ChainStageSpec::new("dropTombstones", filter, &none).with_predicate(
                    "isTombstone",
                    tombstone,
                    &none,
                    false,
                ),
                // Keep only topics matching orders-.*: negate.
                ChainStageSpec::new("onlyRegional", filter, &none).with_predicate(
                    "isRegional",
                    topic_matches,
                    &eu,
                    true,
                ),
            ])
            .unwrap();
        assert_eq!(
            chain.aliases().collect::<Vec<_>>(),
            [
                Some("dropAudit"),
                Some("dropTombstones"),
                Some("onlyRegional")
            ]
        );
        assert_eq!(kept(&chain, sample()), [2], "{filter}");
    }
}

#[test]
fn header_transforms_build_from_config() {
    let plugins = Plugins::new();
    let insert = configs(&[("header", "source"), ("value.literal", "eu")]);
    let drop = configs(&[("headers", "a, b")]);
    let chain = plugins
        .build_chain([
            ChainStageSpec::new("drop", "DropHeaders", &drop),
            ChainStageSpec::new(
                "insert",
                "org.apache.kafka.connect.transforms.InsertHeader",
                &insert,
            ),
        ])
        .unwrap();
    let input = record("t", 0).with_headers(vec![
        SinkHeader::new("a", Value::Null),
        SinkHeader::new("c", Value::Null),
        SinkHeader::new("b", Value::Null),
    ]);
    let out = chain.apply(input).unwrap().unwrap();
    let keys: Vec<&str> = out.headers().iter().map(SinkHeader::key).collect();
    assert_eq!(keys, ["c", "source"]);
    assert_eq!(out.headers()[1].value(), &Value::from("eu"));
}

#[test]
fn unknown_class_lists_the_known_names() {
    let none = BTreeMap::new();
    let err = Plugins::new()
        .build_chain([ChainStageSpec::new("route", "RegexRouter", &none)])
        .unwrap_err();
    assert!(matches!(
        &err,
        PluginError::UnknownClass { kind: PluginKind::Transform, class, .. } if class == "RegexRouter"
    ));
    assert_eq!(
        err.to_string(),
        "transforms.route (RegexRouter): unknown transform class `RegexRouter`; known: \
         DropHeaders, Filter, InsertHeader, org.apache.kafka.connect.transforms.DropHeaders, \
         org.apache.kafka.connect.transforms.Filter, org.apache.kafka.connect.transforms.InsertHeader"
    );
    let err = Plugins::new()
        .build_predicate("IsFriday", &none)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("predicate IsFriday: unknown predicate class `IsFriday`; known: HasHeaderKey, RecordIsTombstone, TopicNameMatches, org.apache"),
        "{err}"
    );
}

#[test]
fn config_errors_name_alias_class_and_key() {
    let plugins = Plugins::new();
    let none = BTreeMap::new();
    let err = plugins
        .build_chain([
            ChainStageSpec::new("dropAudit", "Filter", &none).with_predicate(
                "isAudit",
                "HasHeaderKey",
                &none,
                false,
            ),
        ])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "predicates.isAudit (HasHeaderKey): missing required config `name`"
    );
    assert_eq!(err.plugin(), "predicates.isAudit (HasHeaderKey)");

    let bad = configs(&[("pattern", "orders-[")]);
    let err = plugins
        .build_chain([ChainStageSpec::new("x", "Filter", &none).with_predicate(
            "regional",
            "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            &bad,
            false,
        )])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "predicates.regional (org.apache.kafka.connect.transforms.predicates.TopicNameMatches): \
             config `pattern` has invalid value `orders-[`: not a valid regular expression: "
        ),
        "{err}"
    );

    let err = plugins
        .build_chain([ChainStageSpec::new(
            "ins",
            "InsertHeader",
            &configs(&[("header", "h")]),
        )])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "transforms.ins (InsertHeader): missing required config `value.literal`"
    );

    let err = plugins
        .build_transform("DropHeaders", &configs(&[("headers", " , ")]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "transform DropHeaders: config `headers` has invalid value ` , `: expected a non-empty \
         comma-separated list"
    );
}

/// A user transform: uppercases string values; config `suffix` is appended.
#[derive(Debug)]
struct Shout {
    suffix: String,
}

impl Transform for Shout {
    fn apply(&self, record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
        let Some(text) = record.value().as_str() else {
            return Err(TransformError::new(
                "Shout needs a string value; use the StringConverter",
            ));
        };
        let shouted = format!("{}{}", text.to_uppercase(), self.suffix);
        Ok(Some(record.with_value(Value::String(shouted))))
    }

    fn class_name(&self) -> &str {
        "com.example.Shout"
    }
}

#[test]
fn user_registered_transform_and_predicate() {
    let mut plugins = Plugins::new();
    plugins
        .register_transform("com.example.Shout", |configs| {
            let suffix = configs.get("suffix").cloned().unwrap_or_default();
            if suffix.len() > 3 {
                return Err(PluginError::invalid_config(
                    "suffix",
                    suffix,
                    "at most 3 characters",
                ));
            }
            Ok(Arc::new(Shout { suffix }))
        })
        .register_predicate("com.example.IsRedelivery", |_| {
            Ok(Arc::new(predicate_fn(|r: &SinkRecord| {
                r.delivery_count() > 1
            })))
        });
    let suffix = configs(&[("suffix", "!")]);
    let none = BTreeMap::new();
    let chain =
        plugins
            .build_chain([ChainStageSpec::new("shout", "com.example.Shout", &suffix)
                .with_predicate("redelivered", "com.example.IsRedelivery", &none, true)])
            .unwrap();
    let first = chain.apply(record("t", 0)).unwrap().unwrap();
    assert_eq!(first.value(), &Value::from("V!"));
    let again = chain
        .apply(record("t", 0).with_delivery_count(2))
        .unwrap()
        .unwrap();
    assert_eq!(again.value(), &Value::from("v"));

    let failure = chain.apply(SinkRecord::new("t", 0, 1)).unwrap_err();
    assert_eq!(failure.class_name(), "com.example.Shout");

    let err = plugins
        .build_chain([ChainStageSpec::new(
            "shout",
            "com.example.Shout",
            &configs(&[("suffix", "!!!!")]),
        )])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "transforms.shout (com.example.Shout): config `suffix` has invalid value `!!!!`: at most \
         3 characters"
    );
}

#[test]
fn registering_a_name_again_replaces_it() {
    let mut plugins = Plugins::new();
    plugins.register_transform("Filter", |_| {
        Ok(Arc::new(transform_fn(|r| Ok(Some(r))).named("KeepAll")))
    });
    let keep = plugins.build_transform("Filter", &BTreeMap::new()).unwrap();
    assert_eq!(keep.class_name(), "KeepAll");
    // The full Connect name still builds the built-in.
    let filter = plugins
        .build_transform(
            "org.apache.kafka.connect.transforms.Filter",
            &BTreeMap::new(),
        )
        .unwrap();
    assert!(filter.apply(record("t", 0)).unwrap().is_none());
}

#[test]
fn an_empty_registry_knows_nothing() {
    let err = Plugins::empty()
        .build_transform("Filter", &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "transform Filter: unknown transform class `Filter`; none is registered"
    );
}
