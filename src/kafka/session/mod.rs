//! The share-session core, free of I/O: what a fetch answer means for this member.

pub(crate) mod acquired;
pub(crate) mod ranges;
