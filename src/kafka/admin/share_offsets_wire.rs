//! DescribeShareGroupOffsets (API key 90), versions 0 **and 1**, with our own response decoder.
//!
//! kafka-protocol 0.18.0 has only v0. Kafka 4.4 added v1 (KIP-1226): the response's partition
//! gains `Lag` (int64, default -1, ignorable) between `LeaderEpoch` and `ErrorCode`; the request
//! is the same in both versions.
//!
//! # Schema source
//!
//! `common/message/DescribeShareGroupOffsets{Request,Response}.json` of the released
//! `kafka-clients-4.4.0.jar` (`"validVersions": "0-1"`, `"flexibleVersions": "0+"`).
//!
//! # Wire format of the response (flexible: compact strings and arrays, tagged fields)
//!
//! `ThrottleTimeMs` i32, `Groups []{GroupId string, Topics []{TopicName string, TopicId uuid,
//! Partitions []{PartitionIndex i32, StartOffset i64, LeaderEpoch i32, Lag i64 (1+), ErrorCode
//! i16, ErrorMessage nullable string}}, ErrorCode i16, ErrorMessage nullable string}`; every
//! struct and the message end with a tagged field section. None of the fields is tagged, so
//! tagged fields are read and skipped.
//!
//! Counts and lengths come from the wire: no allocation is sized beyond the bytes left.

use crate::kafka::codec::share_v2::MAX_PREALLOCATED_ITEMS;
use bytes::{Buf, Bytes};
use kafka_protocol::messages::DescribeShareGroupOffsetsRequest;
use kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, Message, VersionRange, buf::ByteBuf, buf::ByteBufMut,
};

/// The versions we speak.
pub(super) const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

/// The request, v0 or v1 (the same bytes): kafka-protocol's v0 type, encoded at v0.
#[derive(Debug, Clone, Default)]
pub(super) struct OffsetsRequest(pub(super) DescribeShareGroupOffsetsRequest);

impl Message for OffsetsRequest {
    const VERSIONS: VersionRange = VERSIONS;
    const DEPRECATED_VERSIONS: Option<VersionRange> = None;
}

impl HeaderVersion for OffsetsRequest {
    fn header_version(_version: i16) -> i16 {
        2
    }
}

impl Encodable for OffsetsRequest {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        check_version(version)?;
        self.0.encode(buf, 0)
    }

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
        check_version(version)?;
        self.0.compute_size(0)
    }
}

/// The response, v0 or v1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct OffsetsResponse {
    pub(super) groups: Vec<GroupOffsets>,
}

/// One group of the response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct GroupOffsets {
    pub(super) group_id: String,
    pub(super) topics: Vec<TopicOffsets>,
    pub(super) error_code: i16,
    pub(super) error_message: Option<String>,
}

/// One topic of a group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct TopicOffsets {
    pub(super) name: String,
    pub(super) partitions: Vec<PartitionOffset>,
}

/// One partition of a topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PartitionOffset {
    pub(super) partition: i32,
    pub(super) start_offset: i64,
    pub(super) leader_epoch: i32,
    /// -1 (unknown) in v0.
    pub(super) lag: i64,
    pub(super) error_code: i16,
    pub(super) error_message: Option<String>,
}

impl HeaderVersion for OffsetsResponse {
    fn header_version(_version: i16) -> i16 {
        1
    }
}

impl Decodable for OffsetsResponse {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> anyhow::Result<Self> {
        check_version(version)?;
        let mut bytes = buf.copy_to_bytes(buf.remaining());
        let response = read_response(&mut bytes, version)?;
        Ok(response)
    }
}

fn check_version(version: i16) -> anyhow::Result<()> {
    if (VERSIONS.min..=VERSIONS.max).contains(&version) {
        Ok(())
    } else {
        anyhow::bail!("DescribeShareGroupOffsets v{version} is not supported (v0-v1 are)")
    }
}

/// The fewest bytes a partition takes on the wire (v0: fields, null message, no tags).
const MIN_PARTITION: usize = 4 + 8 + 4 + 2 + 1 + 1;
/// The fewest bytes a topic takes (empty name, id, empty array, no tags).
const MIN_TOPIC: usize = 1 + 16 + 1 + 1;
/// The fewest bytes a group takes.
const MIN_GROUP: usize = 1 + 1 + 2 + 1 + 1;

fn read_response(buf: &mut Bytes, version: i16) -> anyhow::Result<OffsetsResponse> {
    let _throttle = get_i32(buf, "ThrottleTimeMs")?;
    let groups = read_array(buf, "Groups", MIN_GROUP, |buf| read_group(buf, version))?;
    skip_tagged_fields(buf)?;
    Ok(OffsetsResponse { groups })
}

fn read_group(buf: &mut Bytes, version: i16) -> anyhow::Result<GroupOffsets> {
    let group_id = get_string(buf, "GroupId")?;
    let topics = read_array(buf, "Topics", MIN_TOPIC, |buf| read_topic(buf, version))?;
    let error_code = get_i16(buf, "ErrorCode")?;
    let error_message = get_nullable_string(buf, "ErrorMessage")?;
    skip_tagged_fields(buf)?;
    Ok(GroupOffsets {
        group_id,
        topics,
        error_code,
        error_message,
    })
}

fn read_topic(buf: &mut Bytes, version: i16) -> anyhow::Result<TopicOffsets> {
    let name = get_string(buf, "TopicName")?;
    need(buf, "TopicId", 16)?;
    buf.advance(16);
    let partitions = read_array(buf, "Partitions", MIN_PARTITION, |buf| {
        read_partition(buf, version)
    })?;
    skip_tagged_fields(buf)?;
    Ok(TopicOffsets { name, partitions })
}

fn read_partition(buf: &mut Bytes, version: i16) -> anyhow::Result<PartitionOffset> {
    let partition = get_i32(buf, "PartitionIndex")?;
    let start_offset = get_i64(buf, "StartOffset")?;
    let leader_epoch = get_i32(buf, "LeaderEpoch")?;
    let lag = if version >= 1 {
        get_i64(buf, "Lag")?
    } else {
        -1
    };
    let error_code = get_i16(buf, "ErrorCode")?;
    let error_message = get_nullable_string(buf, "ErrorMessage")?;
    skip_tagged_fields(buf)?;
    Ok(PartitionOffset {
        partition,
        start_offset,
        leader_epoch,
        lag,
        error_code,
        error_message,
    })
}

fn need(buf: &Bytes, field: &str, n: usize) -> anyhow::Result<()> {
    if buf.remaining() < n {
        anyhow::bail!(
            "DescribeShareGroupOffsets response ends inside `{field}`: {n} bytes needed, {} left",
            buf.remaining()
        );
    }
    Ok(())
}

fn get_i16(buf: &mut Bytes, field: &str) -> anyhow::Result<i16> {
    need(buf, field, 2)?;
    Ok(buf.get_i16())
}

fn get_i32(buf: &mut Bytes, field: &str) -> anyhow::Result<i32> {
    need(buf, field, 4)?;
    Ok(buf.get_i32())
}

fn get_i64(buf: &mut Bytes, field: &str) -> anyhow::Result<i64> {
    need(buf, field, 8)?;
    Ok(buf.get_i64())
}

fn get_uvarint(buf: &mut Bytes, field: &str) -> anyhow::Result<u32> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        need(buf, field, 1)?;
        let byte = buf.get_u8();
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            if shift == 28 && byte > 0x0f {
                break;
            }
            return Ok(value);
        }
    }
    anyhow::bail!("DescribeShareGroupOffsets response: `{field}` is not a valid varint")
}

/// A compact length: `None` for null (0 on the wire).
fn get_compact_len(buf: &mut Bytes, field: &str) -> anyhow::Result<Option<usize>> {
    let raw = get_uvarint(buf, field)?;
    Ok(raw
        .checked_sub(1)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
}

fn get_nullable_string(buf: &mut Bytes, field: &str) -> anyhow::Result<Option<String>> {
    let Some(len) = get_compact_len(buf, field)? else {
        return Ok(None);
    };
    need(buf, field, len)?;
    let raw = buf.split_to(len);
    match std::str::from_utf8(&raw) {
        Ok(text) => Ok(Some(text.to_owned())),
        Err(_) => anyhow::bail!("DescribeShareGroupOffsets response: `{field}` is not UTF-8"),
    }
}

fn get_string(buf: &mut Bytes, field: &str) -> anyhow::Result<String> {
    match get_nullable_string(buf, field)? {
        Some(text) => Ok(text),
        None => anyhow::bail!("DescribeShareGroupOffsets response: `{field}` is null"),
    }
}

/// A compact array of elements of at least `min_size` bytes each; room is made for no more
/// elements than the bytes left could hold.
fn read_array<T>(
    buf: &mut Bytes,
    field: &str,
    min_size: usize,
    mut read: impl FnMut(&mut Bytes) -> anyhow::Result<T>,
) -> anyhow::Result<Vec<T>> {
    let Some(count) = get_compact_len(buf, field)? else {
        anyhow::bail!("DescribeShareGroupOffsets response: `{field}` is null");
    };
    if count.saturating_mul(min_size) > buf.remaining() {
        anyhow::bail!(
            "DescribeShareGroupOffsets response: `{field}` announces {count} entries, more than \
             the {} bytes left can hold",
            buf.remaining()
        );
    }
    // Each element decoded may be larger than its bytes on the wire: room for the first few
    // only, the rest as they decode.
    let mut items = Vec::with_capacity(count.min(MAX_PREALLOCATED_ITEMS));
    for _ in 0..count {
        items.push(read(buf)?);
    }
    Ok(items)
}

fn skip_tagged_fields(buf: &mut Bytes) -> anyhow::Result<()> {
    let count = get_uvarint(buf, "tagged fields")?;
    for _ in 0..count {
        let _tag = get_uvarint(buf, "tag")?;
        let size = usize::try_from(get_uvarint(buf, "tagged field size")?).unwrap_or(usize::MAX);
        need(buf, "tagged field", size)?;
        buf.advance(size);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::DescribeShareGroupOffsetsResponse;
    use kafka_protocol::messages::describe_share_group_offsets_response::{
        DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
        DescribeShareGroupOffsetsResponseTopic,
    };
    use kafka_protocol::messages::{GroupId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn v0_response() -> DescribeShareGroupOffsetsResponse {
        DescribeShareGroupOffsetsResponse::default().with_groups(vec![
            DescribeShareGroupOffsetsResponseGroup::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_topics(vec![
                    DescribeShareGroupOffsetsResponseTopic::default()
                        .with_topic_name(TopicName(StrBytes::from_static_str("orders")))
                        .with_partitions(vec![
                            DescribeShareGroupOffsetsResponsePartition::default()
                                .with_partition_index(0)
                                .with_start_offset(42)
                                .with_leader_epoch(3),
                            DescribeShareGroupOffsetsResponsePartition::default()
                                .with_partition_index(1)
                                .with_start_offset(-1)
                                .with_leader_epoch(-1)
                                .with_error_code(3)
                                .with_error_message(Some(StrBytes::from_static_str("gone"))),
                        ]),
                ]),
        ])
    }

    #[test]
    fn v0_decodes_as_kafka_protocol_encodes_it_without_lag() {
        let mut bytes = BytesMut::new();
        v0_response().encode(&mut bytes, 0).expect("encodes");
        let decoded = OffsetsResponse::decode(&mut bytes.freeze(), 0).expect("decodes");
        let group = &decoded.groups[0];
        assert_eq!(group.group_id, "g");
        let partitions = &group.topics[0].partitions;
        assert_eq!(group.topics[0].name, "orders");
        assert_eq!(
            (
                partitions[0].partition,
                partitions[0].start_offset,
                partitions[0].leader_epoch,
                partitions[0].lag
            ),
            (0, 42, 3, -1)
        );
        assert_eq!(partitions[1].error_code, 3);
        assert_eq!(partitions[1].error_message.as_deref(), Some("gone"));
    }

    /// v1 bytes: v0's with the 8 bytes of `Lag` after each partition's `LeaderEpoch`.
    fn v1_bytes(lags: [i64; 2]) -> Bytes {
        let mut v0 = BytesMut::new();
        v0_response().encode(&mut v0, 0).expect("encodes");
        // throttle 4, groups 1, "g" 2, topics 1, "orders" 7, id 16, partitions 1 = 32: then
        // partition 0 (index 4, start 8, epoch 4), then its error (2), null message (1),
        // tags (1); then partition 1 the same way.
        let first = 32 + 16;
        let second = first + 4 + 16;
        let mut v1 = BytesMut::new();
        v1.extend_from_slice(&v0[..first]);
        v1.extend_from_slice(&lags[0].to_be_bytes());
        v1.extend_from_slice(&v0[first..second]);
        v1.extend_from_slice(&lags[1].to_be_bytes());
        v1.extend_from_slice(&v0[second..]);
        v1.freeze()
    }

    #[test]
    fn v1_carries_the_lag() {
        let decoded = OffsetsResponse::decode(&mut v1_bytes([7, -1]), 1).expect("decodes");
        let partitions = &decoded.groups[0].topics[0].partitions;
        assert_eq!((partitions[0].start_offset, partitions[0].lag), (42, 7));
        assert_eq!((partitions[1].error_code, partitions[1].lag), (3, -1));
        assert_eq!(partitions[1].error_message.as_deref(), Some("gone"));
    }

    #[test]
    fn truncated_and_hostile_answers_are_errors_not_panics() {
        let whole = v1_bytes([7, 8]);
        for cut in 0..whole.len() {
            let mut part = whole.slice(..cut);
            assert!(
                OffsetsResponse::decode(&mut part, 1).is_err(),
                "cut at {cut}"
            );
        }
        // A group count of u32::MAX - 1 in 5 bytes: refused before any allocation.
        let mut hostile = Bytes::from_static(&[0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0x0f]);
        let error = OffsetsResponse::decode(&mut hostile, 1).expect_err("refused");
        assert!(error.to_string().contains("Groups"), "{error}");
        // A varint longer than five bytes.
        let mut endless = Bytes::from_static(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(OffsetsResponse::decode(&mut endless, 1).is_err());
        assert!(
            OffsetsResponse::decode(&mut Bytes::new(), 2).is_err(),
            "unknown version"
        );
    }

    #[test]
    fn the_request_is_v0_bytes_at_both_versions() {
        let request = OffsetsRequest(DescribeShareGroupOffsetsRequest::default());
        let mut v0 = BytesMut::new();
        let mut v1 = BytesMut::new();
        request.encode(&mut v0, 0).expect("v0");
        request.encode(&mut v1, 1).expect("v1");
        assert_eq!(v0, v1);
        assert_eq!(request.compute_size(1).expect("size"), v1.len());
        assert!(request.encode(&mut BytesMut::new(), 2).is_err());
    }
}
