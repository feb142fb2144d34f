//! Value converters that fail retriably for a while, as one whose schema registry is
//! briefly away.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use kafka_share_sink::Headers;
use kafka_share_sink::Value;
use kafka_share_sink::convert::{ConvertError, Converter, SchemaAndValue};

/// Fails retriably a given number of times, then passes bytes through.
#[derive(Debug)]
pub(crate) struct Flaky(pub(crate) AtomicUsize);

impl Converter for Flaky {
    fn to_sink_data(
        &self,
        _topic: &str,
        _headers: &Headers,
        data: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        if take_one(&self.0) {
            return Err(ConvertError::retriable("schema registry unavailable"));
        }
        Ok(SchemaAndValue::schemaless(Value::from(data.cloned())))
    }
}

/// Fails non-retriably on the value `bad`, retriably a given number of times on its `slow`
/// value, and passes other values through.
#[derive(Debug)]
pub(crate) struct SlowOne {
    slow: &'static str,
    failures: AtomicUsize,
}

impl SlowOne {
    /// Fails retriably `failures` times on the value `slow`.
    pub(crate) fn new(slow: &'static str, failures: usize) -> Self {
        Self {
            slow,
            failures: AtomicUsize::new(failures),
        }
    }
}

impl Converter for SlowOne {
    fn to_sink_data(
        &self,
        _topic: &str,
        _headers: &Headers,
        data: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        match data.map(|d| d.as_ref()) {
            Some(b"bad") => return Err(ConvertError::new("not a record")),
            Some(v) if v == self.slow.as_bytes() && take_one(&self.failures) => {
                return Err(ConvertError::retriable("schema registry unavailable"));
            }
            _ => {}
        }
        Ok(SchemaAndValue::schemaless(Value::from(data.cloned())))
    }
}

/// Takes one retriable failure off `left`; false when none is left.
fn take_one(left: &AtomicUsize) -> bool {
    left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}
