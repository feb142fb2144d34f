//! [`TransformChain`]: transforms applied in order, each under an optional predicate.

use std::sync::Arc;

use super::traits::{Predicate, Transform};
use crate::convert::StageFailure;
use crate::record::SinkRecord;
use crate::stage::Stage;

/// One stage: a transform, and the predicate that decides whether it runs.
#[derive(Debug, Clone)]
struct ChainStage {
    alias: Option<String>,
    transform: Arc<dyn Transform>,
    predicate: Option<Arc<dyn Predicate>>,
    negate: bool,
}

impl ChainStage {
    /// Connect's `TransformationStage`: run iff `negate XOR predicate.test(record)`, always
    /// when there is no predicate.
    fn runs_on(&self, record: &SinkRecord) -> bool {
        self.predicate
            .as_ref()
            .is_none_or(|p| self.negate != p.test(record))
    }
}

/// The transforms of a sink, applied in order, like Connect's `transforms` list; each stage
/// may have a predicate (Connect's `transforms.<alias>.predicate` and `.negate`).
///
/// ```
/// use kafka_share_sink::{SinkHeader, SinkRecord, TransformChain, Value};
/// use kafka_share_sink::transform::{Filter, HasHeaderKey, RecordIsTombstone, transform_fn};
///
/// let chain = TransformChain::new()
///     // Drop tombstones,
///     .then_if(Filter, RecordIsTombstone, false)
///     // and every record without a `tenant` header.
///     .then_if(Filter, HasHeaderKey::new("tenant"), true)
///     .then(transform_fn(|r: SinkRecord| {
///         let partition = r.partition();
///         Ok(Some(r.with_topic_partition("audited", partition)))
///     }));
/// assert_eq!(chain.len(), 3);
///
/// let kept = SinkRecord::new("orders", 0, 1)
///     .with_value(Value::from("x"))
///     .with_headers(vec![SinkHeader::new("tenant", Value::from("acme"))]);
/// assert_eq!(chain.apply(kept).unwrap().unwrap().topic(), "audited");
/// assert!(chain.apply(SinkRecord::new("orders", 0, 2)).unwrap().is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct TransformChain {
    stages: Vec<ChainStage>,
}

impl TransformChain {
    /// No transforms: records pass unchanged.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a stage that always runs.
    pub fn then<T: Transform + 'static>(self, transform: T) -> Self {
        self.push(None, Arc::new(transform), None, false)
    }

    /// Appends a stage that runs when `predicate` matches, or, with `negate`, when it does
    /// not.
    pub fn then_if<T: Transform + 'static, P: Predicate + 'static>(
        self,
        transform: T,
        predicate: P,
        negate: bool,
    ) -> Self {
        self.push(None, Arc::new(transform), Some(Arc::new(predicate)), negate)
    }

    pub(crate) fn push(
        mut self,
        alias: Option<String>,
        transform: Arc<dyn Transform>,
        predicate: Option<Arc<dyn Predicate>>,
        negate: bool,
    ) -> Self {
        self.stages.push(ChainStage {
            alias,
            transform,
            predicate,
            negate,
        });
        self
    }

    /// True when there are no stages.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The number of stages.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// The aliases of the stages built from a config, in order (`None` for stages added
    /// with [`then`](Self::then) or [`then_if`](Self::then_if)).
    pub fn aliases(&self) -> impl Iterator<Item = Option<&str>> + '_ {
        self.stages.iter().map(|s| s.alias.as_deref())
    }

    /// Runs the stages in order. `Ok(None)` means a stage dropped the record (the rest do
    /// not run); an error names the stage `TRANSFORMATION` and the failing transform's class.
    pub fn apply(&self, mut record: SinkRecord) -> Result<Option<SinkRecord>, StageFailure> {
        for stage in &self.stages {
            if !stage.runs_on(&record) {
                continue;
            }
            match stage.transform.apply(record) {
                Ok(Some(next)) => record = next,
                Ok(None) => return Ok(None),
                Err(e) => {
                    return Err(StageFailure::new(
                        Stage::Transformation,
                        stage.transform.class_name(),
                        e,
                    ));
                }
            }
        }
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::{predicate_fn, transform_fn};

    #[test]
    fn predicate_and_negate_truth_table() {
        for (matches, negate, runs) in [
            (true, false, true),
            (false, false, false),
            (true, true, false),
            (false, true, true),
        ] {
            let chain = TransformChain::new().then_if(
                transform_fn(|_| Ok(None)),
                predicate_fn(move |_| matches),
                negate,
            );
            let dropped = chain.apply(SinkRecord::new("t", 0, 0)).unwrap().is_none();
            assert_eq!(dropped, runs, "matches={matches} negate={negate}");
        }
    }

    #[test]
    fn empty_chain_passes_records() {
        let chain = TransformChain::new();
        assert!(chain.is_empty());
        let record = SinkRecord::new("t", 0, 0);
        assert_eq!(chain.apply(record.clone()).unwrap(), Some(record));
    }
}
