//! The share-session core, free of I/O and of any clock of its own:
//!
//! - [`book`]: the share sessions per leader and the acknowledgements pending, in flight and
//!   answered, as a state machine the engine drives;
//! - [`acquired`]: what one partition of a ShareFetch answer holds for this member (records,
//!   GAPs, corrupt and cut-off offsets), decompressed within a budget per answer;
//! - [`acks`] and [`ranges`]: acknowledgements and offsets as inclusive ranges, never one
//!   entry per offset.

pub(crate) mod acks;
pub(crate) mod acquired;
pub(crate) mod book;
pub(crate) mod ranges;
