//! Transforms and predicates: change or drop records between conversion and `put`, as
//! Kafka Connect's single message transforms (SMTs) and predicates do.
//!
//! A [`TransformChain`] runs [`Transform`]s in order, each under an optional [`Predicate`].
//! Built-ins: [`Filter`], [`InsertHeader`], [`DropHeaders`]; predicates [`HasHeaderKey`],
//! [`TopicNameMatches`], [`RecordIsTombstone`]; closures through [`transform_fn`] and
//! [`predicate_fn`]. [`Plugins`](crate::Plugins) builds them from Connect's class names.

mod chain;
mod closure;
mod error;
mod filter;
mod headers;
mod predicates;
mod traits;

pub use self::chain::TransformChain;
pub use self::closure::{FnPredicate, FnTransform, predicate_fn, transform_fn};
pub use self::error::TransformError;
pub use self::filter::Filter;
pub use self::headers::{DropHeaders, InsertHeader};
pub use self::predicates::{HasHeaderKey, RecordIsTombstone, TopicNameMatches};
pub use self::traits::{Predicate, Transform};
