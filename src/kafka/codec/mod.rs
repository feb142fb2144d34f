//! Wire codecs of our own, where kafka-protocol's do not fit: ShareFetch and ShareAcknowledge
//! v1–v2 (kafka-protocol 0.18 lacks v2), and v2 record batches (kafka-protocol merges repeated
//! header keys). Decoding is bounded by the bytes received. No I/O.

pub(crate) mod record_batch;
pub(crate) mod share_v2;
