//! The Produce request, versions 3 to 13, encoded as chunks: the fields in small buffers and
//! each record batch as the [`Bytes`] it already is, so that a request of a megabyte of
//! batches is neither copied nor allocated again before the socket takes it (one vectored
//! write, see `net::body`). The bytes are those kafka-protocol's `ProduceRequest` encodes, for
//! every version (a test compares them).
//!
//! Fields (Apache Kafka `ProduceRequest.json`; flexible from v9): `TransactionalId` (nullable
//! string), `Acks` (int16), `TimeoutMs` (int32), `TopicData` (array: `Name` string up to
//! v12, `TopicId` uuid from v13, `PartitionData` (array: `Index` int32, `Records` nullable
//! bytes)).

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

/// The Produce versions this encoder writes.
pub(crate) const VERSIONS: std::ops::RangeInclusive<i16> = 3..=13;

/// First flexible version (compact lengths, tagged fields).
const FLEXIBLE: i16 = 9;

/// First version that names topics by id instead of by name.
const TOPIC_IDS: i16 = 13;

/// One topic's batches in a Produce request.
#[derive(Debug)]
pub(crate) struct ProduceTopic<'a> {
    /// Its name (versions up to 12).
    pub(crate) name: &'a str,
    /// Its id (version 13).
    pub(crate) id: Uuid,
    /// Partition index and record batch, one per partition.
    pub(crate) partitions: Vec<(i32, Bytes)>,
}

/// A Produce request.
#[derive(Debug)]
pub(crate) struct ProduceRequestParts<'a> {
    /// The transactional id, for the batches of a transaction.
    pub(crate) transactional_id: Option<&'a str>,
    /// `acks`: -1, 0 or 1.
    pub(crate) acks: i16,
    /// How long the broker may wait for the replication `acks` asks for.
    pub(crate) timeout_ms: i32,
    /// The topics.
    pub(crate) topics: Vec<ProduceTopic<'a>>,
}

/// A Produce request that cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProduceEncodeError {
    /// A version outside [`VERSIONS`].
    #[error("Produce version {0} cannot be encoded (3 to 13 can)")]
    UnsupportedVersion(i16),
    /// A string, batch or array longer than its length field can say.
    #[error("Produce request field {field} is too long ({len})")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
}

/// Writes the small fields; each batch ends the chunk before it and is a chunk itself.
struct Chunks {
    version: i16,
    current: BytesMut,
    done: Vec<Bytes>,
}

impl Chunks {
    fn flexible(&self) -> bool {
        self.version >= FLEXIBLE
    }

    fn uvarint(&mut self, value: u32) {
        let (bytes, n) = super::uvarint(value);
        self.current.put_slice(&bytes[..n]);
    }

    /// The length of a string, byte string or array: compact (`len + 1`, 0 for null) or
    /// classic (`int16` for strings, `int32` otherwise; -1 for null).
    fn len(
        &mut self,
        field: &'static str,
        len: Option<usize>,
        short: bool,
    ) -> Result<(), ProduceEncodeError> {
        let too_long = || ProduceEncodeError::TooLong {
            field,
            len: len.unwrap_or(0),
        };
        // Null is -1; a length past its field's type (Java's `short` or `int`) is refused,
        // compact or classic.
        let max = if short { i32::from(i16::MAX) } else { i32::MAX };
        let wire = match len {
            None => -1,
            Some(len) => i32::try_from(len)
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(too_long)?,
        };
        if self.flexible() {
            // Compact: `length + 1`, so 0 is null.
            let prefix = u32::try_from(i64::from(wire) + 1).map_err(|_| too_long())?;
            self.uvarint(prefix);
        } else if short {
            self.current
                .put_i16(i16::try_from(wire).map_err(|_| too_long())?);
        } else {
            self.current.put_i32(wire);
        }
        Ok(())
    }

    fn string(
        &mut self,
        field: &'static str,
        value: Option<&str>,
    ) -> Result<(), ProduceEncodeError> {
        self.len(field, value.map(str::len), true)?;
        if let Some(value) = value {
            self.current.put_slice(value.as_bytes());
        }
        Ok(())
    }

    fn tagged_fields(&mut self) {
        if self.flexible() {
            self.uvarint(0);
        }
    }

    fn batch(&mut self, batch: &Bytes) -> Result<(), ProduceEncodeError> {
        self.len("Records", Some(batch.len()), false)?;
        if !batch.is_empty() {
            let fields = self.current.split().freeze();
            self.done.push(fields);
            self.done.push(batch.clone());
        }
        Ok(())
    }
}

/// Encodes `request` at `version`: the chunks that, in order, are the request body.
pub(crate) fn encode_produce(
    request: &ProduceRequestParts<'_>,
    version: i16,
) -> Result<Vec<Bytes>, ProduceEncodeError> {
    if !VERSIONS.contains(&version) {
        return Err(ProduceEncodeError::UnsupportedVersion(version));
    }
    let mut out = Chunks {
        version,
        current: BytesMut::with_capacity(64),
        done: Vec::with_capacity(
            2 * request
                .topics
                .iter()
                .map(|t| t.partitions.len())
                .sum::<usize>()
                + 1,
        ),
    };
    out.string("TransactionalId", request.transactional_id)?;
    out.current.put_i16(request.acks);
    out.current.put_i32(request.timeout_ms);
    out.len("TopicData", Some(request.topics.len()), false)?;
    for topic in &request.topics {
        if version >= TOPIC_IDS {
            out.current.put_slice(topic.id.as_bytes());
        } else {
            out.string("Name", Some(topic.name))?;
        }
        out.len("PartitionData", Some(topic.partitions.len()), false)?;
        for (index, batch) in &topic.partitions {
            out.current.put_i32(*index);
            out.batch(batch)?;
            out.tagged_fields();
        }
        out.tagged_fields();
    }
    out.tagged_fields();
    let mut chunks = out.done;
    if !out.current.is_empty() {
        chunks.push(out.current.freeze());
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::produce_request::{
        PartitionProduceData, ProduceRequest, TopicProduceData,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use proptest::prelude::*;

    use super::*;

    /// kafka-protocol's encoding of the same request.
    fn reference(request: &ProduceRequestParts<'_>, version: i16) -> Vec<u8> {
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|(index, batch)| {
                        PartitionProduceData::default()
                            .with_index(*index)
                            .with_records(Some(batch.clone()))
                    })
                    .collect();
                let data = TopicProduceData::default().with_partition_data(partitions);
                if version >= TOPIC_IDS {
                    data.with_topic_id(topic.id)
                } else {
                    data.with_name(TopicName(StrBytes::from_string(topic.name.to_owned())))
                }
            })
            .collect();
        let request = ProduceRequest::default()
            .with_transactional_id(
                request
                    .transactional_id
                    .map(|t| StrBytes::from_string(t.to_owned()).into()),
            )
            .with_acks(request.acks)
            .with_timeout_ms(request.timeout_ms)
            .with_topic_data(topics);
        let mut buf = BytesMut::new();
        request
            .encode(&mut buf, version)
            .expect("kafka-protocol encodes it");
        buf.to_vec()
    }

    fn concatenated(chunks: &[Bytes]) -> Vec<u8> {
        chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    proptest! {
        /// Every version, any topics, partitions, batches and transactional id: the chunks
        /// make the bytes kafka-protocol encodes, and every non-empty batch is a chunk of
        /// its own, not a copy.
        #[test]
        fn chunks_are_kafka_protocols_bytes(
            version in VERSIONS,
            transactional_id in proptest::option::of("[a-z]{0,12}"),
            acks in prop_oneof![Just(-1i16), Just(0), Just(1)],
            timeout_ms in any::<i32>(),
            topics in proptest::collection::vec(
                ("[a-z.]{1,20}", any::<u128>(), proptest::collection::vec(
                    (any::<i32>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..4)),
                0..4),
        ) {
            let batches: Vec<Vec<(i32, Bytes)>> = topics
                .iter()
                .map(|(_, _, p)| p.iter().map(|(i, b)| (*i, Bytes::from(b.clone()))).collect())
                .collect();
            let request = ProduceRequestParts {
                transactional_id: transactional_id.as_deref(),
                acks,
                timeout_ms,
                topics: topics
                    .iter()
                    .zip(&batches)
                    .map(|((name, id, _), partitions)| ProduceTopic {
                        name,
                        id: Uuid::from_u128(*id),
                        partitions: partitions.clone(),
                    })
                    .collect(),
            };
            let chunks = encode_produce(&request, version).expect("encodes");
            prop_assert_eq!(concatenated(&chunks), reference(&request, version));
            for (_, batch) in batches.iter().flatten().filter(|(_, b)| !b.is_empty()) {
                prop_assert!(
                    chunks.iter().any(|c| c.as_ptr() == batch.as_ptr() && c.len() == batch.len()),
                    "a batch was copied"
                );
            }
        }
    }

    #[test]
    fn versions_outside_3_to_13_are_refused() {
        let request = ProduceRequestParts {
            transactional_id: None,
            acks: -1,
            timeout_ms: 30_000,
            topics: Vec::new(),
        };
        for version in [-1, 0, 2, 14] {
            assert_eq!(
                encode_produce(&request, version).unwrap_err(),
                ProduceEncodeError::UnsupportedVersion(version)
            );
        }
    }

    #[test]
    fn a_name_longer_than_its_length_field_is_refused() {
        let name = "t".repeat(40_000);
        let request = ProduceRequestParts {
            transactional_id: None,
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![ProduceTopic {
                name: &name,
                id: Uuid::nil(),
                partitions: Vec::new(),
            }],
        };
        for version in [3, 9, 12] {
            assert_eq!(
                encode_produce(&request, version).unwrap_err(),
                ProduceEncodeError::TooLong {
                    field: "Name",
                    len: 40_000
                }
            );
        }
    }
}
