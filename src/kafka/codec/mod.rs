//! Wire codecs of our own, where kafka-protocol's do not fit: ShareFetch and ShareAcknowledge
//! v1–v2 (kafka-protocol 0.18 lacks v2), and v2 record batches (kafka-protocol merges repeated
//! header keys), and the Produce request, whose record batches go to the wire without a copy.
//! Decoding is bounded by the bytes received. No I/O.

pub(crate) mod produce;
pub(crate) mod record_batch;
pub(crate) mod share_v2;

use kafka_protocol::messages::{BrokerId, ListOffsetsRequest};

/// A ListOffsets request as a client sends it: replica id -1. kafka-protocol's default (0)
/// makes the broker answer as to broker 0's replica fetcher, which ignores the isolation
/// level (no last stable offset for `read_committed`).
pub(crate) fn client_list_offsets() -> ListOffsetsRequest {
    ListOffsetsRequest::default().with_replica_id(BrokerId(-1))
}

/// An unsigned varint (7 bits a byte, least significant group first, high bit = more
/// follows): its bytes and how many of them.
pub(crate) fn uvarint(mut value: u32) -> ([u8; 5], usize) {
    let mut bytes = [0u8; 5];
    let mut n = 0;
    while value >= 0x80 {
        bytes[n] = (value & 0x7f) as u8 | 0x80;
        value >>= 7;
        n += 1;
    }
    bytes[n] = value as u8;
    (bytes, n + 1)
}
