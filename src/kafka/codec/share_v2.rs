//! ShareFetch (API key 78) and ShareAcknowledge (API key 79), versions 1 **and 2**, with our own
//! codec.
//!
//! kafka-protocol 0.18.0 only has v1 of both RPCs (the Kafka 4.1 schema). Kafka 4.2 added v2:
//! ShareFetch v2 carries `ShareAcquireMode` (KIP-1206, `record_limit`) and `IsRenewAck`
//! (KIP-1222, acknowledge type 4 = RENEW); ShareAcknowledge v2 carries `IsRenewAck` in the
//! request and `AcquisitionLockTimeoutMs` in the response. The types here are version-aware,
//! so one type serves v1 and v2: [`VERSIONS`] is `1..=2`, and v1 is byte-for-byte what
//! kafka-protocol encodes (tested below).
//!
//! Each struct of the schema is declared once, as a list of its fields (kind, schema name,
//! the version a later field exists `since`), and `wire_struct!` writes the struct and its
//! encoder and decoder from that list, as Kafka's generator does from the JSON: no field is
//! encoded in one place and decoded in another by hand.
//!
//! # Schema source
//!
//! Apache Kafka `clients/src/main/resources/common/message/{ShareFetchRequest,
//! ShareFetchResponse,ShareAcknowledgeRequest,ShareAcknowledgeResponse}.json` as released: the
//! four files are identical blobs (`1357858c`, `8ddb0514`, `fd831405`, `d08d4a14`) on the
//! `4.2`, `4.3`, `4.4` and `trunk` branches, read from the `confluentinc/kafka` community mirror
//! (branch `4.4` at `8d3916cfe15f13a2d878c79d302ba2d63172f0af`; the Apache commits keep their
//! hashes there). Last schema changes:
//! - `05c9322ba9ce` KAFKA-19814 (#20732): v2 of both RPCs, `IsRenewAck` in both requests,
//!   acknowledge type 4 (Renew).
//! - `c205e6910ff4` KAFKA-19020 (#20246): `ShareAcquireMode` in ShareFetchRequest v2.
//! - `214bb07d6a47` KAFKA-19845 (#20838): last edit of ShareFetchRequest.json (doc text only).
//! - `169e21199791` KAFKA-19892 (#20901) and `d51f195463e9` (#20934): `AcquisitionLockTimeoutMs`
//!   in ShareAcknowledgeResponse v2, made ignorable.
//!
//! The field lists were also checked against `SCHEMAS[1]`/`SCHEMAS[2]` of the generated
//! `ShareFetchRequestData` etc. classes in the released `kafka-clients-4.2.0.jar` and
//! `kafka-clients-4.4.0.jar`, which agree with the JSON. Those classes also parse the golden
//! v2 bytes of the tests (and our v1/v2 encodings of the test fixtures) and write them back
//! byte for byte, and wrote the ShareFetchResponse v2 bytes the tests decode.
//!
//! **Not** the in-development draft of `ShareFetchRequest.json` (commit `08c855f4`, a PR
//! branch) that has `ShareAcquireMode` "0:Batch-optimized,1:Record-limit,255:Renew" and no
//! `IsRenewAck`: the released v2 has both fields, and Renew is an acknowledge type (4), not an
//! acquire mode.
//!
//! # Wire format (every version here is flexible: `"flexibleVersions": "0+"`)
//!
//! - Headers: request header **v2** (client id as a nullable *non-compact* string, then a tagged
//!   field section), response header **v1** (correlation id, tagged field section). Both are
//!   written and read by kafka-protocol's `RequestHeader`/`ResponseHeader`; [`HeaderVersion`] on
//!   our types gives the numbers.
//! - `string`: compact, i.e. unsigned varint `length + 1` then UTF-8; a nullable string encodes
//!   null as varint `0`. Java refuses strings longer than `0x7fff` bytes in both directions, so
//!   do we.
//! - `[]T`: compact array, unsigned varint `count + 1`, then the elements. No array in these
//!   messages is nullable, so a `0` count is an error.
//! - `records`: compact bytes (varint `length + 1`, then the raw record batches).
//! - `uuid`: 16 bytes, most significant first (Java writes two big-endian longs).
//! - `int8/16/32/64`: big-endian; `bool`: one byte, non-zero is true on decode.
//! - Every struct, the top-level message included, and also the `CurrentLeader` struct field,
//!   ends with its own tagged field section (varint count, then `tag`, `size`, bytes each).
//! - **No field of these four messages is tagged** (no `taggedVersions` in the schemas), so we
//!   always write an empty section (`0x00`). On decode, unknown tagged fields are validated and
//!   skipped; they are not kept, so a decode-encode round trip drops them.
//!
//! # Field order (v1 | v2; `*` = new in v2)
//!
//! ShareFetchRequest: `GroupId` nullable string, `MemberId` nullable string,
//! `ShareSessionEpoch` i32, `MaxWaitMs` i32, `MinBytes` i32, `MaxBytes` i32 (default
//! `0x7fffffff`), `MaxRecords` i32 (1+), `BatchSize` i32 (1+), `*ShareAcquireMode` i8 (2+,
//! default 0, **ignorable**), `*IsRenewAck` bool (2+, default false, not ignorable), `Topics`
//! `[]{TopicId uuid, Partitions []{PartitionIndex i32, AcknowledgementBatches []{FirstOffset i64,
//! LastOffset i64, AcknowledgeTypes []i8}}}`, `ForgottenTopicsData []{TopicId uuid, Partitions
//! []i32}`. `PartitionMaxBytes` is version **0 only** and so absent from v1 and v2.
//!
//! ShareFetchResponse (v1 and v2 identical): `ThrottleTimeMs` i32, `ErrorCode` i16,
//! `ErrorMessage` nullable string, `AcquisitionLockTimeoutMs` i32 (1+), `Responses []{TopicId uuid,
//! Partitions []{PartitionIndex i32, ErrorCode i16, ErrorMessage nullable string,
//! AcknowledgeErrorCode i16, AcknowledgeErrorMessage nullable string, CurrentLeader {LeaderId i32,
//! LeaderEpoch i32}, Records records, AcquiredRecords []{FirstOffset i64, LastOffset i64,
//! DeliveryCount i16}}}`, `NodeEndpoints []{NodeId i32, Host string, Port i32, Rack nullable
//! string}`. `Records` is nullable in v0 only; see [`ShareFetchPartitionData::records`].
//!
//! ShareAcknowledgeRequest: `GroupId` nullable string, `MemberId` nullable string,
//! `ShareSessionEpoch` i32, `*IsRenewAck` bool (2+, default false, not ignorable), `Topics` (same
//! shape as ShareFetch's, without the fetch-only fields).
//!
//! ShareAcknowledgeResponse: `ThrottleTimeMs` i32, `ErrorCode` i16, `ErrorMessage` nullable
//! string, `*AcquisitionLockTimeoutMs` i32 (2+, **ignorable**), `Responses []{TopicId uuid,
//! Partitions []{PartitionIndex i32, ErrorCode i16, ErrorMessage nullable string, CurrentLeader
//! {LeaderId i32, LeaderEpoch i32}}}`, `NodeEndpoints` (as above).
//!
//! Version rules follow Java's generated code: encoding a non-default value of a field that
//! the version lacks fails, unless the field is *ignorable*, which is then silently left out.
//! So `is_renew_ack = true` at v1 is an error, while `share_acquire_mode` at v1 is dropped:
//! callers that rely on `record_limit` must check that v2 was negotiated. Decoding a version
//! that lacks a field leaves that field at its default.
//!
//! # Decoding untrusted bytes
//!
//! Decoding never panics: a truncated buffer, a varint longer than 5 bytes, a null where the
//! schema has none, invalid UTF-8, and an array count that cannot fit in the remaining bytes
//! (each element has a known minimum encoded size) are all [`CodecError`]s, and at most
//! [`MAX_PREALLOCATED_ITEMS`] elements are allocated ahead of decoding them.
//!
//! # kafka-protocol's `Encodable`/`Decodable`
//!
//! The messages implement kafka-protocol's traits (and `Request`), so they go through
//! `connection::request` like every generated message. The inherent
//! `encode_wire`/`wire_size`/`decode_wire` do the work and report a [`CodecError`].

#![allow(
    dead_code,
    reason = "the consumer does not use every field and constant yet (record_limit acquire mode, node endpoints)"
)]

use bytes::{Buf, BufMut, Bytes};
use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};
use kafka_protocol::protocol::{HeaderVersion, Message, StrBytes, VersionRange};
use uuid::Uuid;

/// API key of ShareFetch.
pub(crate) const SHARE_FETCH_KEY: i16 = 78;
/// API key of ShareAcknowledge.
pub(crate) const SHARE_ACKNOWLEDGE_KEY: i16 = 79;
/// Versions of ShareFetch and ShareAcknowledge this module encodes and decodes (both RPCs
/// have 1 and 2; version 0 was the 4.0 early access, removed in 4.1).
pub(crate) const VERSIONS: VersionRange = VersionRange { min: 1, max: 2 };
/// Request header version for every version in [`VERSIONS`] (flexible).
pub(crate) const REQUEST_HEADER_VERSION: i16 = 2;
/// Response header version for every version in [`VERSIONS`] (flexible).
pub(crate) const RESPONSE_HEADER_VERSION: i16 = 1;

/// `ShareAcquireMode` 0: acquire whole batches, may exceed `MaxRecords` (the only v1 behaviour).
pub(crate) const SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED: i8 = 0;
/// `ShareAcquireMode` 1 (KIP-1206): acquire at most `MaxRecords` records.
pub(crate) const SHARE_ACQUIRE_MODE_RECORD_LIMIT: i8 = 1;
/// Acknowledge type 4 (KIP-1222, v2 only): restart the acquisition lock; needs `IsRenewAck`.
pub(crate) const ACKNOWLEDGE_TYPE_RENEW: i8 = 4;

/// At most this many array elements are allocated before they are decoded; longer arrays grow
/// as their elements actually arrive.
pub(crate) const MAX_PREALLOCATED_ITEMS: usize = 1024;

/// Longest string Java writes or reads (`0x7fff` bytes).
const MAX_STRING_LEN: usize = 0x7fff;
/// Longest array or byte string: its `length + 1` must fit Java's `int`.
const MAX_LEN: usize = i32::MAX as usize - 1;

/// An encoding or decoding failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CodecError {
    /// The version is outside [`VERSIONS`].
    #[error("{message} version {version} is not supported (supported: 1 to 2)")]
    UnsupportedVersion {
        /// The message name, e.g. `ShareFetchRequest`.
        message: &'static str,
        /// The version asked for.
        version: i16,
    },
    /// A field without a value for this version was set to a non-default value, and the
    /// field is not ignorable.
    #[error("{field} cannot be sent at version {version} (needs version 2)")]
    FieldNotSupported {
        /// The field, e.g. `ShareFetchRequest.IsRenewAck`.
        field: &'static str,
        /// The version being encoded.
        version: i16,
    },
    /// A string, byte string or array is too long for the wire format.
    #[error("{field} is too long to encode ({len} > {max})")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length in bytes (strings, bytes) or elements (arrays).
        len: usize,
        /// The largest length allowed.
        max: usize,
    },
    /// The buffer ends before the field does.
    #[error("buffer ends inside {field}: {needed} bytes needed, {remaining} left")]
    Truncated {
        /// The field being decoded.
        field: &'static str,
        /// Bytes the next read needs.
        needed: usize,
        /// Bytes left in the buffer.
        remaining: usize,
    },
    /// The bytes cannot be a valid encoding of the field.
    #[error("malformed {field}: {reason}")]
    Malformed {
        /// The field being decoded.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

fn malformed(field: &'static str, reason: impl Into<String>) -> CodecError {
    CodecError::Malformed {
        field,
        reason: reason.into(),
    }
}

fn check_version(message: &'static str, version: i16) -> Result<(), CodecError> {
    if (VERSIONS.min..=VERSIONS.max).contains(&version) {
        Ok(())
    } else {
        Err(CodecError::UnsupportedVersion { message, version })
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding: one code path writes to a buffer or only counts bytes, so `wire_size` always
// agrees with `encode_wire`.

/// Where encoded bytes go.
trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

/// Counts bytes instead of writing them.
#[derive(Debug, Default)]
struct SizeCounter(usize);

impl Sink for SizeCounter {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

/// Writes into a `BufMut`.
#[derive(Debug)]
struct BufSink<'a, B>(&'a mut B);

impl<B: BufMut> Sink for BufSink<'_, B> {
    fn put(&mut self, bytes: &[u8]) {
        self.0.put_slice(bytes);
    }
}

fn put_i8<S: Sink>(s: &mut S, value: i8) {
    s.put(&value.to_be_bytes());
}

fn put_bool<S: Sink>(s: &mut S, value: bool) {
    s.put(&[u8::from(value)]);
}

fn put_i16<S: Sink>(s: &mut S, value: i16) {
    s.put(&value.to_be_bytes());
}

fn put_i32<S: Sink>(s: &mut S, value: i32) {
    s.put(&value.to_be_bytes());
}

fn put_i64<S: Sink>(s: &mut S, value: i64) {
    s.put(&value.to_be_bytes());
}

fn put_uuid<S: Sink>(s: &mut S, value: &Uuid) {
    s.put(value.as_bytes());
}

fn put_uvarint<S: Sink>(s: &mut S, value: u32) {
    let (bytes, n) = super::uvarint(value);
    s.put(&bytes[..n]);
}

/// The `length + 1` prefix of a compact string, byte string or array.
fn put_compact_len<S: Sink>(
    s: &mut S,
    field: &'static str,
    len: usize,
    max: usize,
) -> Result<(), CodecError> {
    match u32::try_from(len + 1) {
        Ok(prefix) if len <= max => {
            put_uvarint(s, prefix);
            Ok(())
        }
        _ => Err(CodecError::TooLong { field, len, max }),
    }
}

fn put_nullable_string<S: Sink>(
    s: &mut S,
    field: &'static str,
    value: Option<&StrBytes>,
) -> Result<(), CodecError> {
    match value {
        None => {
            put_uvarint(s, 0);
            Ok(())
        }
        Some(value) => put_string(s, field, value),
    }
}

fn put_string<S: Sink>(s: &mut S, field: &'static str, value: &StrBytes) -> Result<(), CodecError> {
    put_compact_len(s, field, value.len(), MAX_STRING_LEN)?;
    s.put(value.as_bytes());
    Ok(())
}

fn put_nullable_bytes<S: Sink>(
    s: &mut S,
    field: &'static str,
    value: Option<&Bytes>,
) -> Result<(), CodecError> {
    match value {
        None => {
            put_uvarint(s, 0);
            Ok(())
        }
        Some(value) => {
            put_compact_len(s, field, value.len(), MAX_LEN)?;
            s.put(value);
            Ok(())
        }
    }
}

fn put_array<S: Sink, T>(
    s: &mut S,
    field: &'static str,
    items: &[T],
    mut put_item: impl FnMut(&mut S, &T) -> Result<(), CodecError>,
) -> Result<(), CodecError> {
    put_compact_len(s, field, items.len(), MAX_LEN)?;
    items.iter().try_for_each(|item| put_item(s, item))
}

fn put_structs<S: Sink, T: Wire>(
    s: &mut S,
    field: &'static str,
    items: &[T],
    version: i16,
) -> Result<(), CodecError> {
    put_array(s, field, items, |s, item| item.write(s, version))
}

/// The (empty) tagged field section that ends every struct.
fn put_no_tagged_fields<S: Sink>(s: &mut S) {
    put_uvarint(s, 0);
}

// ---------------------------------------------------------------------------------------------
// Decoding: every read checks the remaining length first.

fn need<B: Buf>(buf: &B, field: &'static str, needed: usize) -> Result<(), CodecError> {
    let remaining = buf.remaining();
    if remaining < needed {
        Err(CodecError::Truncated {
            field,
            needed,
            remaining,
        })
    } else {
        Ok(())
    }
}

fn get_i8<B: Buf>(buf: &mut B, field: &'static str) -> Result<i8, CodecError> {
    need(buf, field, 1)?;
    Ok(buf.get_i8())
}

fn get_bool<B: Buf>(buf: &mut B, field: &'static str) -> Result<bool, CodecError> {
    need(buf, field, 1)?;
    Ok(buf.get_u8() != 0)
}

fn get_i16<B: Buf>(buf: &mut B, field: &'static str) -> Result<i16, CodecError> {
    need(buf, field, 2)?;
    Ok(buf.get_i16())
}

fn get_i32<B: Buf>(buf: &mut B, field: &'static str) -> Result<i32, CodecError> {
    need(buf, field, 4)?;
    Ok(buf.get_i32())
}

fn get_i64<B: Buf>(buf: &mut B, field: &'static str) -> Result<i64, CodecError> {
    need(buf, field, 8)?;
    Ok(buf.get_i64())
}

fn get_uuid<B: Buf>(buf: &mut B, field: &'static str) -> Result<Uuid, CodecError> {
    need(buf, field, 16)?;
    let mut bytes = [0u8; 16];
    buf.copy_to_slice(&mut bytes);
    Ok(Uuid::from_bytes(bytes))
}

/// An unsigned varint of at most 5 bytes whose value fits in 32 bits.
fn get_uvarint<B: Buf>(buf: &mut B, field: &'static str) -> Result<u32, CodecError> {
    let mut value = 0u32;
    for i in 0..5 {
        need(buf, field, 1)?;
        let byte = buf.get_u8();
        if i == 4 && byte > 0x0f {
            return Err(malformed(field, "unsigned varint longer than 32 bits"));
        }
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(malformed(field, "unsigned varint longer than 5 bytes"))
}

/// The length of a compact string, byte string or array; `None` for null.
fn get_compact_len<B: Buf>(buf: &mut B, field: &'static str) -> Result<Option<usize>, CodecError> {
    let prefix = get_uvarint(buf, field)?;
    Ok(prefix.checked_sub(1).map(|len| len as usize))
}

fn get_nullable_string<B: ByteBuf>(
    buf: &mut B,
    field: &'static str,
) -> Result<Option<StrBytes>, CodecError> {
    let Some(len) = get_compact_len(buf, field)? else {
        return Ok(None);
    };
    if len > MAX_STRING_LEN {
        return Err(malformed(
            field,
            format!("string length {len} exceeds {MAX_STRING_LEN}"),
        ));
    }
    need(buf, field, len)?;
    StrBytes::from_utf8(buf.get_bytes(len))
        .map(Some)
        .map_err(|error| malformed(field, format!("invalid UTF-8: {error}")))
}

fn get_string<B: ByteBuf>(buf: &mut B, field: &'static str) -> Result<StrBytes, CodecError> {
    get_nullable_string(buf, field)?
        .ok_or_else(|| malformed(field, "null in a non-nullable string"))
}

fn get_nullable_bytes<B: ByteBuf>(
    buf: &mut B,
    field: &'static str,
) -> Result<Option<Bytes>, CodecError> {
    let Some(len) = get_compact_len(buf, field)? else {
        return Ok(None);
    };
    need(buf, field, len)?;
    Ok(Some(buf.get_bytes(len)))
}

/// A non-nullable compact array whose elements take at least `min_item_size` bytes each.
fn get_array<B: Buf, T>(
    buf: &mut B,
    field: &'static str,
    min_item_size: usize,
    mut get_item: impl FnMut(&mut B) -> Result<T, CodecError>,
) -> Result<Vec<T>, CodecError> {
    let Some(len) = get_compact_len(buf, field)? else {
        return Err(malformed(field, "null in a non-nullable array"));
    };
    let remaining = buf.remaining();
    if len > remaining / min_item_size.max(1) {
        return Err(malformed(
            field,
            format!(
                "{len} elements of at least {min_item_size} bytes each cannot fit in the \
                 {remaining} bytes left"
            ),
        ));
    }
    let mut items = Vec::with_capacity(len.min(MAX_PREALLOCATED_ITEMS));
    for _ in 0..len {
        items.push(get_item(buf)?);
    }
    Ok(items)
}

fn get_structs<B: ByteBuf, T: Wire>(
    buf: &mut B,
    field: &'static str,
    version: i16,
) -> Result<Vec<T>, CodecError> {
    get_array(buf, field, T::MIN_SIZE, |buf| T::read(buf, version))
}

/// Checks and skips a tagged field section; none of these messages has known tagged fields.
fn skip_tagged_fields<B: Buf>(buf: &mut B, field: &'static str) -> Result<(), CodecError> {
    let count = get_uvarint(buf, field)? as usize;
    // Every tagged field takes at least two bytes: its tag and its size.
    if count > buf.remaining() / 2 {
        return Err(malformed(
            field,
            format!(
                "{count} tagged fields cannot fit in the {} bytes left",
                buf.remaining()
            ),
        ));
    }
    for _ in 0..count {
        let _tag = get_uvarint(buf, field)?;
        let size = get_uvarint(buf, field)? as usize;
        need(buf, field, size)?;
        buf.advance(size);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Messages.

/// One struct of the schema: its encoding at a version, and its decoding.
trait Wire: Sized {
    /// The fewest bytes an encoding takes (empty strings and arrays); bounds array counts on
    /// decode.
    const MIN_SIZE: usize;
    /// Writes the fields in schema order, then the tagged field section.
    fn write<S: Sink>(&self, s: &mut S, version: i16) -> Result<(), CodecError>;
    /// Reads what [`Wire::write`] writes.
    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self, CodecError>;
}

/// A field's part in a `wire_struct!`: its fewest bytes (`min`), its encoding (`put`) and
/// its decoding (`get`), by the kind of schema field.
macro_rules! wire_field {
    (min i8, $ty:ty) => {
        1
    };
    (min bool, $ty:ty) => {
        1
    };
    (min i16, $ty:ty) => {
        2
    };
    (min i32, $ty:ty) => {
        4
    };
    (min i64, $ty:ty) => {
        8
    };
    (min uuid, $ty:ty) => {
        16
    };
    (min nested, $ty:ty) => {
        <$ty as Wire>::MIN_SIZE
    };
    // Strings, bytes and arrays: a compact length of one byte at the least.
    (min $kind:ident, $ty:ty) => {
        1
    };

    (put i8, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_i8($s, *$v)
    };
    (put bool, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_bool($s, *$v)
    };
    (put i16, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_i16($s, *$v)
    };
    (put i32, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_i32($s, *$v)
    };
    (put i64, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_i64($s, *$v)
    };
    (put uuid, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_uuid($s, $v)
    };
    (put string, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_string($s, $name, $v)?
    };
    (put nullable_string, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_nullable_string($s, $name, $v.as_ref())?
    };
    (put nullable_bytes, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_nullable_bytes($s, $name, $v.as_ref())?
    };
    (put structs, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_structs($s, $name, $v, $version)?
    };
    (put nested, $s:ident, $name:expr, $v:expr, $version:ident) => {
        $v.write($s, $version)?
    };
    (put array_i8, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_array($s, $name, $v, |s, &x| {
            put_i8(s, x);
            Ok(())
        })?
    };
    (put array_i32, $s:ident, $name:expr, $v:expr, $version:ident) => {
        put_array($s, $name, $v, |s, &x| {
            put_i32(s, x);
            Ok(())
        })?
    };

    (get i8, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_i8($buf, $name)?
    };
    (get bool, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_bool($buf, $name)?
    };
    (get i16, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_i16($buf, $name)?
    };
    (get i32, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_i32($buf, $name)?
    };
    (get i64, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_i64($buf, $name)?
    };
    (get uuid, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_uuid($buf, $name)?
    };
    (get string, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_string($buf, $name)?
    };
    (get nullable_string, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_nullable_string($buf, $name)?
    };
    (get nullable_bytes, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_nullable_bytes($buf, $name)?
    };
    (get structs, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_structs($buf, $name, $version)?
    };
    (get nested, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        <$ty as Wire>::read($buf, $version)?
    };
    (get array_i8, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_array($buf, $name, 1, |buf| get_i8(buf, $name))?
    };
    (get array_i32, $ty:ty, $buf:ident, $name:expr, $version:ident) => {
        get_array($buf, $name, 4, |buf| get_i32(buf, $name))?
    };
}

/// A field at the versions it exists at: every version, or `since` one (left out below it,
/// and read as its default there); a `strict` field cannot carry a value other than its
/// default below that version (the schema does not make it ignorable), and encoding fails
/// with [`CodecError::FieldNotSupported`] instead of dropping it. "Default" is the Rust
/// type's (`false`, 0): right for every later field of these schemas; a later field whose
/// schema default is not zero would need its own.
macro_rules! wire_versioned {
    (min $kind:ident, $ty:ty;) => { wire_field!(min $kind, $ty) };
    (min $kind:ident, $ty:ty; $since:literal $($strict:ident)?) => { 0 };

    (put $kind:ident, $ty:ty, $s:ident, $name:expr, $v:expr, $version:ident;) => {
        wire_field!(put $kind, $s, $name, $v, $version)
    };
    (put $kind:ident, $ty:ty, $s:ident, $name:expr, $v:expr, $version:ident; $since:literal) => {
        if $version >= $since {
            wire_field!(put $kind, $s, $name, $v, $version);
        }
    };
    (
        put $kind:ident, $ty:ty, $s:ident, $name:expr, $v:expr, $version:ident;
        $since:literal strict
    ) => {
        if $version >= $since {
            wire_field!(put $kind, $s, $name, $v, $version);
        }
    };

    // Before anything is written: a strict field that cannot be written fails the encoding.
    (refuse $ty:ty, $name:expr, $v:expr, $version:ident; $since:literal strict) => {
        if $version < $since && *$v != <$ty>::default() {
            return Err(CodecError::FieldNotSupported {
                field: $name,
                version: $version,
            });
        }
    };
    (refuse $ty:ty, $name:expr, $v:expr, $version:ident; $($since:literal)?) => {};

    (get $kind:ident, $ty:ty, $buf:ident, $name:expr, $version:ident;) => {
        wire_field!(get $kind, $ty, $buf, $name, $version)
    };
    (
        get $kind:ident, $ty:ty, $buf:ident, $name:expr, $version:ident;
        $since:literal $($strict:ident)?
    ) => {
        if $version >= $since {
            wire_field!(get $kind, $ty, $buf, $name, $version)
        } else {
            <$ty>::default()
        }
    };
}

/// A struct of the schema: the struct, and its [`Wire`] codec written from one list of fields,
/// each with its kind, its name in the schema (errors name it as `Prefix.Field`, as the
/// schema's JSON does) and, for a field added later, the version it exists `since`. A
/// top-level `message` also checks the version against [`VERSIONS`] first. `MIN_SIZE` is the
/// sum of the fewest bytes of the fields of every version and the tagged field section's one.
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        $what:ident $name:ident in $prefix:literal {
            $(
                $(#[$field_meta:meta])*
                $field:ident: $ty:ty = $kind:ident $wire:literal
                    $(since $since:literal $($strict:ident)?)?,
            )*
        }
    ) => {
        $(#[$meta])*
        pub(crate) struct $name {
            $(
                $(#[$field_meta])*
                pub(crate) $field: $ty,
            )*
        }

        impl Wire for $name {
            const MIN_SIZE: usize = 1 $(+ wire_versioned!(min $kind, $ty; $($since $($strict)?)?))*;

            #[allow(unused_variables)]
            fn write<S: Sink>(&self, s: &mut S, version: i16) -> Result<(), CodecError> {
                wire_struct!(@check $what, $prefix, version);
                $(
                    wire_versioned!(
                        refuse $ty, concat!($prefix, ".", $wire), &self.$field, version;
                        $($since $($strict)?)?
                    );
                )*
                $(
                    wire_versioned!(
                        put $kind, $ty, s, concat!($prefix, ".", $wire), &self.$field, version;
                        $($since $($strict)?)?
                    );
                )*
                put_no_tagged_fields(s);
                Ok(())
            }

            #[allow(unused_variables)]
            fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self, CodecError> {
                wire_struct!(@check $what, $prefix, version);
                $(
                    let $field = wire_versioned!(
                        get $kind, $ty, buf, concat!($prefix, ".", $wire), version;
                        $($since $($strict)?)?
                    );
                )*
                skip_tagged_fields(buf, concat!($prefix, " tagged fields"))?;
                Ok(Self { $($field),* })
            }
        }
    };
    (@check message, $prefix:literal, $version:ident) => {
        check_version($prefix, $version)?
    };
    (@check struct, $prefix:literal, $version:ident) => {};
}

wire_struct! {
    /// `AcknowledgementBatch` of both requests: a range of offsets and their acknowledge types.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct AcknowledgementBatch in "AcknowledgementBatch" {
        /// First offset of the batch.
        first_offset: i64 = i64 "FirstOffset",
        /// Last offset of the batch, inclusive.
        last_offset: i64 = i64 "LastOffset",
        /// One type for the whole range, or one per offset: 0 Gap, 1 Accept, 2 Release, 3 Reject,
        /// 4 Renew (v2 with `is_renew_ack` only).
        acknowledge_types: Vec<i8> = array_i8 "AcknowledgeTypes",
    }
}

wire_struct! {
    /// `FetchPartition` of ShareFetchRequest (v1+: no `PartitionMaxBytes`), which has the same
    /// wire shape as ShareAcknowledgeRequest's `AcknowledgePartition`.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct FetchPartition in "Partitions[]" {
        /// The partition index.
        partition_index: i32 = i32 "PartitionIndex",
        /// The acknowledgements for this partition, ascending and non-overlapping.
        acknowledgement_batches: Vec<AcknowledgementBatch> = structs "AcknowledgementBatches",
    }
}

/// `AcknowledgePartition` of ShareAcknowledgeRequest: the same wire shape as [`FetchPartition`].
pub(crate) type AcknowledgePartition = FetchPartition;

wire_struct! {
    /// `FetchTopic` of ShareFetchRequest, which has the same wire shape as
    /// ShareAcknowledgeRequest's `AcknowledgeTopic`.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct FetchTopic in "Topics[]" {
        /// The topic id.
        topic_id: Uuid = uuid "TopicId",
        /// The partitions to fetch (or acknowledge).
        partitions: Vec<FetchPartition> = structs "Partitions",
    }
}

/// `AcknowledgeTopic` of ShareAcknowledgeRequest: the same wire shape as [`FetchTopic`].
pub(crate) type AcknowledgeTopic = FetchTopic;

wire_struct! {
    /// `ForgottenTopic` of ShareFetchRequest: partitions to remove from the share session.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct ForgottenTopic in "ForgottenTopicsData[]" {
        /// The topic id.
        topic_id: Uuid = uuid "TopicId",
        /// The partition indexes to forget.
        partitions: Vec<i32> = array_i32 "Partitions",
    }
}

wire_struct! {
    /// ShareFetchRequest v1/v2: fetch records of a share session, and acknowledge earlier ones.
    #[derive(Debug, Clone, PartialEq, Eq)]
    message ShareFetchRequest in "ShareFetchRequest" {
        /// The share group id (the broker refuses null).
        group_id: Option<StrBytes> = nullable_string "GroupId",
        /// The member id from ShareGroupHeartbeat.
        member_id: Option<StrBytes> = nullable_string "MemberId",
        /// 0 opens a share session, -1 closes it, otherwise the next epoch.
        share_session_epoch: i32 = i32 "ShareSessionEpoch",
        /// Longest time the broker may wait for `min_bytes`.
        max_wait_ms: i32 = i32 "MaxWaitMs",
        /// Bytes to accumulate before answering.
        min_bytes: i32 = i32 "MinBytes",
        /// Most bytes to return (default `0x7fffffff`).
        max_bytes: i32 = i32 "MaxBytes",
        /// Most records to acquire (exceeded for batch alignment unless `record_limit`).
        max_records: i32 = i32 "MaxRecords",
        /// Optimal number of records in batches of acquired records and acknowledgements.
        batch_size: i32 = i32 "BatchSize",
        /// v2, ignorable (dropped at v1): [`SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED`] or
        /// [`SHARE_ACQUIRE_MODE_RECORD_LIMIT`].
        share_acquire_mode: i8 = i8 "ShareAcquireMode" since 2,
        /// v2, not ignorable (v1 refuses `true`): the acknowledgements contain Renew (4). The
        /// broker then fetches nothing and wants `max_wait_ms`, `min_bytes`, `max_bytes` and
        /// `max_records` all 0.
        is_renew_ack: bool = bool "IsRenewAck" since 2 strict,
        /// Partitions to add to the session, with acknowledgements.
        topics: Vec<FetchTopic> = structs "Topics",
        /// Partitions to remove from the session.
        forgotten_topics_data: Vec<ForgottenTopic> = structs "ForgottenTopicsData",
    }
}

impl Default for ShareFetchRequest {
    /// The schema defaults (`MaxBytes` `0x7fffffff`, `MemberId` empty), as kafka-protocol has.
    fn default() -> Self {
        Self {
            group_id: None,
            member_id: Some(StrBytes::default()),
            share_session_epoch: 0,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 0x7fff_ffff,
            max_records: 0,
            batch_size: 0,
            share_acquire_mode: SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED,
            is_renew_ack: false,
            topics: Vec::new(),
            forgotten_topics_data: Vec::new(),
        }
    }
}

wire_struct! {
    /// `CurrentLeader` (`LeaderIdAndEpoch`) of both responses.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    struct LeaderIdAndEpoch in "CurrentLeader" {
        /// The current leader, or -1 if unknown.
        leader_id: i32 = i32 "LeaderId",
        /// The latest known leader epoch.
        leader_epoch: i32 = i32 "LeaderEpoch",
    }
}

wire_struct! {
    /// `NodeEndpoint` of both responses: leaders named by NOT_LEADER_OR_FOLLOWER partitions.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct NodeEndpoint in "NodeEndpoints[]" {
        /// The broker id.
        node_id: i32 = i32 "NodeId",
        /// The broker's host name.
        host: StrBytes = string "Host",
        /// The broker's port.
        port: i32 = i32 "Port",
        /// The broker's rack, if it has one.
        rack: Option<StrBytes> = nullable_string "Rack",
    }
}

wire_struct! {
    /// `AcquiredRecords` of ShareFetchResponse: a range of offsets acquired for this member.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    struct AcquiredRecords in "AcquiredRecords[]" {
        /// First acquired offset.
        first_offset: i64 = i64 "FirstOffset",
        /// Last acquired offset, inclusive.
        last_offset: i64 = i64 "LastOffset",
        /// How often these records have been delivered, this time included.
        delivery_count: i16 = i16 "DeliveryCount",
    }
}

wire_struct! {
    /// `PartitionData` of ShareFetchResponse.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct ShareFetchPartitionData in "Partitions[]" {
        /// The partition index.
        partition_index: i32 = i32 "PartitionIndex",
        /// The fetch error code, 0 for none.
        error_code: i16 = i16 "ErrorCode",
        /// The fetch error message.
        error_message: Option<StrBytes> = nullable_string "ErrorMessage",
        /// The error code of the piggybacked acknowledgements, 0 for none.
        acknowledge_error_code: i16 = i16 "AcknowledgeErrorCode",
        /// The error message of the piggybacked acknowledgements.
        acknowledge_error_message: Option<StrBytes> =
            nullable_string "AcknowledgeErrorMessage",
        /// The current leader of the partition.
        current_leader: LeaderIdAndEpoch = nested "CurrentLeader",
        /// The raw record batches, not decoded. The schema makes them nullable in v0 only and
        /// brokers send empty rather than null; a null is still accepted (`None`) and written
        /// back as null, as kafka-protocol does.
        records: Option<Bytes> = nullable_bytes "Records",
        /// The offset ranges acquired for this member; records outside them must be skipped.
        acquired_records: Vec<AcquiredRecords> = structs "AcquiredRecords",
    }
}

impl Default for ShareFetchPartitionData {
    /// Empty (not null) records, as kafka-protocol has.
    fn default() -> Self {
        Self {
            partition_index: 0,
            error_code: 0,
            error_message: None,
            acknowledge_error_code: 0,
            acknowledge_error_message: None,
            current_leader: LeaderIdAndEpoch::default(),
            records: Some(Bytes::new()),
            acquired_records: Vec::new(),
        }
    }
}

wire_struct! {
    /// `ShareFetchableTopicResponse` of ShareFetchResponse.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct ShareFetchTopicResponse in "Responses[]" {
        /// The topic id.
        topic_id: Uuid = uuid "TopicId",
        /// The partitions of the topic.
        partitions: Vec<ShareFetchPartitionData> = structs "Partitions",
    }
}

wire_struct! {
    /// ShareFetchResponse v1/v2 (the same on the wire).
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    message ShareFetchResponse in "ShareFetchResponse" {
        /// Time the request was throttled for, in ms.
        throttle_time_ms: i32 = i32 "ThrottleTimeMs",
        /// The top-level error code, 0 for none.
        error_code: i16 = i16 "ErrorCode",
        /// The top-level error message.
        error_message: Option<StrBytes> = nullable_string "ErrorMessage",
        /// How long the acquired records stay locked, in ms.
        acquisition_lock_timeout_ms: i32 = i32 "AcquisitionLockTimeoutMs",
        /// The topics.
        responses: Vec<ShareFetchTopicResponse> = structs "Responses",
        /// Endpoints of new leaders.
        node_endpoints: Vec<NodeEndpoint> = structs "NodeEndpoints",
    }
}

wire_struct! {
    /// ShareAcknowledgeRequest v1/v2: acknowledge records without fetching.
    #[derive(Debug, Clone, PartialEq, Eq)]
    message ShareAcknowledgeRequest in "ShareAcknowledgeRequest" {
        /// The share group id.
        group_id: Option<StrBytes> = nullable_string "GroupId",
        /// The member id from ShareGroupHeartbeat.
        member_id: Option<StrBytes> = nullable_string "MemberId",
        /// The next session epoch, or -1 to close the session (0 is refused).
        share_session_epoch: i32 = i32 "ShareSessionEpoch",
        /// v2, not ignorable (v1 refuses `true`): the acknowledgements contain Renew (4).
        is_renew_ack: bool = bool "IsRenewAck" since 2 strict,
        /// The acknowledgements.
        topics: Vec<AcknowledgeTopic> = structs "Topics",
    }
}

impl Default for ShareAcknowledgeRequest {
    /// The schema defaults (`MemberId` empty), as kafka-protocol has.
    fn default() -> Self {
        Self {
            group_id: None,
            member_id: Some(StrBytes::default()),
            share_session_epoch: 0,
            is_renew_ack: false,
            topics: Vec::new(),
        }
    }
}

wire_struct! {
    /// `PartitionData` of ShareAcknowledgeResponse.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct ShareAcknowledgePartitionData in "Partitions[]" {
        /// The partition index.
        partition_index: i32 = i32 "PartitionIndex",
        /// The error code, 0 for none.
        error_code: i16 = i16 "ErrorCode",
        /// The error message.
        error_message: Option<StrBytes> = nullable_string "ErrorMessage",
        /// The current leader of the partition.
        current_leader: LeaderIdAndEpoch = nested "CurrentLeader",
    }
}

wire_struct! {
    /// `ShareAcknowledgeTopicResponse` of ShareAcknowledgeResponse.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct ShareAcknowledgeTopicResponse in "Responses[]" {
        /// The topic id.
        topic_id: Uuid = uuid "TopicId",
        /// The partitions of the topic.
        partitions: Vec<ShareAcknowledgePartitionData> = structs "Partitions",
    }
}

wire_struct! {
    /// ShareAcknowledgeResponse v1/v2.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    message ShareAcknowledgeResponse in "ShareAcknowledgeResponse" {
        /// Time the request was throttled for, in ms.
        throttle_time_ms: i32 = i32 "ThrottleTimeMs",
        /// The top-level error code, 0 for none.
        error_code: i16 = i16 "ErrorCode",
        /// The top-level error message.
        error_message: Option<StrBytes> = nullable_string "ErrorMessage",
        /// v2 (ignorable, 0 at v1): how long the (renewed) acquired records stay locked, in ms.
        acquisition_lock_timeout_ms: i32 = i32 "AcquisitionLockTimeoutMs" since 2,
        /// The topics.
        responses: Vec<ShareAcknowledgeTopicResponse> = structs "Responses",
        /// Endpoints of new leaders.
        node_endpoints: Vec<NodeEndpoint> = structs "NodeEndpoints",
    }
}

/// The public face of a top-level message: inherent codec methods, [`Message`],
/// [`HeaderVersion`], and (behind the cfg, see the module docs) kafka-protocol's
/// `Encodable`/`Decodable`.
macro_rules! top_level_message {
    ($ty:ident, header_version: $header_version:expr) => {
        impl $ty {
            /// Encodes the message body (no header) at `version` into `buf`. On error `buf` may
            /// hold part of the encoding.
            pub(crate) fn encode_wire<B: ByteBufMut>(
                &self,
                buf: &mut B,
                version: i16,
            ) -> Result<(), CodecError> {
                Wire::write(self, &mut BufSink(buf), version)
            }

            /// The number of bytes [`Self::encode_wire`] writes at `version`.
            pub(crate) fn wire_size(&self, version: i16) -> Result<usize, CodecError> {
                let mut counter = SizeCounter::default();
                Wire::write(self, &mut counter, version)?;
                Ok(counter.0)
            }

            /// Decodes a message body (no header) of `version` from `buf`.
            pub(crate) fn decode_wire<B: ByteBuf>(
                buf: &mut B,
                version: i16,
            ) -> Result<Self, CodecError> {
                <Self as Wire>::read(buf, version)
            }
        }

        impl Message for $ty {
            const VERSIONS: VersionRange = VERSIONS;
            const DEPRECATED_VERSIONS: Option<VersionRange> = None;
        }

        impl HeaderVersion for $ty {
            fn header_version(_version: i16) -> i16 {
                $header_version
            }
        }

        impl kafka_protocol::protocol::Encodable for $ty {
            fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
                Ok(self.encode_wire(buf, version)?)
            }

            fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
                Ok(self.wire_size(version)?)
            }
        }

        impl kafka_protocol::protocol::Decodable for $ty {
            fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> anyhow::Result<Self> {
                Ok(Self::decode_wire(buf, version)?)
            }
        }
    };
}

top_level_message!(ShareFetchRequest, header_version: REQUEST_HEADER_VERSION);
top_level_message!(ShareFetchResponse, header_version: RESPONSE_HEADER_VERSION);
top_level_message!(ShareAcknowledgeRequest, header_version: REQUEST_HEADER_VERSION);
top_level_message!(ShareAcknowledgeResponse, header_version: RESPONSE_HEADER_VERSION);

impl kafka_protocol::protocol::Request for ShareFetchRequest {
    const KEY: i16 = SHARE_FETCH_KEY;
    type Response = ShareFetchResponse;
}

impl kafka_protocol::protocol::Request for ShareAcknowledgeRequest {
    const KEY: i16 = SHARE_ACKNOWLEDGE_KEY;
    type Response = ShareAcknowledgeResponse;
}

#[cfg(test)]
mod tests {
    use super::*;

    use bytes::BytesMut;
    use kafka_protocol::messages::{
        BrokerId, GroupId, share_acknowledge_request as kp_ack_req,
        share_acknowledge_response as kp_ack_resp, share_fetch_request as kp_fetch_req,
        share_fetch_response as kp_fetch_resp,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn s(value: &'static str) -> StrBytes {
        StrBytes::from_static_str(value)
    }

    fn topic(first: u8) -> Uuid {
        Uuid::from_bytes(std::array::from_fn(|i| first + i as u8))
    }

    /// Encodes with our codec and checks that `wire_size` agrees.
    fn ours<T: Wire>(message: &T, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        message.write(&mut BufSink(&mut buf), version).unwrap();
        let mut counter = SizeCounter::default();
        message.write(&mut counter, version).unwrap();
        assert_eq!(
            counter.0,
            buf.len(),
            "wire_size disagrees with the encoding"
        );
        buf.freeze()
    }

    /// Encodes a kafka-protocol message and checks its own `compute_size`.
    fn theirs<T: Encodable>(message: &T, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        message.encode(&mut buf, version).unwrap();
        assert_eq!(message.compute_size(version).unwrap(), buf.len());
        buf.freeze()
    }

    /// Encodes, then decodes again.
    fn round_trip<T: Wire>(message: &T, version: i16) -> T {
        decode_all(&ours(message, version), version).unwrap()
    }

    /// Decodes all of `bytes`, insisting that nothing is left over.
    fn decode_all<T: Wire>(bytes: &[u8], version: i16) -> Result<T, CodecError> {
        let mut buf = Bytes::copy_from_slice(bytes);
        let message = T::read(&mut buf, version)?;
        assert_eq!(buf.remaining(), 0, "bytes left over after decoding");
        Ok(message)
    }

    // --- conversions to kafka-protocol's v1 types --------------------------------------------

    fn kp_fetch_request(r: &ShareFetchRequest) -> kp_fetch_req::ShareFetchRequest {
        let batch = |b: &AcknowledgementBatch| {
            kp_fetch_req::AcknowledgementBatch::default()
                .with_first_offset(b.first_offset)
                .with_last_offset(b.last_offset)
                .with_acknowledge_types(b.acknowledge_types.clone())
        };
        let partition = |p: &FetchPartition| {
            kp_fetch_req::FetchPartition::default()
                .with_partition_index(p.partition_index)
                .with_acknowledgement_batches(p.acknowledgement_batches.iter().map(batch).collect())
        };
        let topic = |t: &FetchTopic| {
            kp_fetch_req::FetchTopic::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions.iter().map(partition).collect())
        };
        let forgotten = |t: &ForgottenTopic| {
            kp_fetch_req::ForgottenTopic::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions.clone())
        };
        kp_fetch_req::ShareFetchRequest::default()
            .with_group_id(r.group_id.clone().map(GroupId))
            .with_member_id(r.member_id.clone())
            .with_share_session_epoch(r.share_session_epoch)
            .with_max_wait_ms(r.max_wait_ms)
            .with_min_bytes(r.min_bytes)
            .with_max_bytes(r.max_bytes)
            .with_max_records(r.max_records)
            .with_batch_size(r.batch_size)
            .with_topics(r.topics.iter().map(topic).collect())
            .with_forgotten_topics_data(r.forgotten_topics_data.iter().map(forgotten).collect())
    }

    fn kp_ack_request(r: &ShareAcknowledgeRequest) -> kp_ack_req::ShareAcknowledgeRequest {
        let batch = |b: &AcknowledgementBatch| {
            kp_ack_req::AcknowledgementBatch::default()
                .with_first_offset(b.first_offset)
                .with_last_offset(b.last_offset)
                .with_acknowledge_types(b.acknowledge_types.clone())
        };
        let partition = |p: &AcknowledgePartition| {
            kp_ack_req::AcknowledgePartition::default()
                .with_partition_index(p.partition_index)
                .with_acknowledgement_batches(p.acknowledgement_batches.iter().map(batch).collect())
        };
        let topic = |t: &AcknowledgeTopic| {
            kp_ack_req::AcknowledgeTopic::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions.iter().map(partition).collect())
        };
        kp_ack_req::ShareAcknowledgeRequest::default()
            .with_group_id(r.group_id.clone().map(GroupId))
            .with_member_id(r.member_id.clone())
            .with_share_session_epoch(r.share_session_epoch)
            .with_topics(r.topics.iter().map(topic).collect())
    }

    fn kp_fetch_response(r: &ShareFetchResponse) -> kp_fetch_resp::ShareFetchResponse {
        let acquired = |a: &AcquiredRecords| {
            kp_fetch_resp::AcquiredRecords::default()
                .with_first_offset(a.first_offset)
                .with_last_offset(a.last_offset)
                .with_delivery_count(a.delivery_count)
        };
        let partition = |p: &ShareFetchPartitionData| {
            kp_fetch_resp::PartitionData::default()
                .with_partition_index(p.partition_index)
                .with_error_code(p.error_code)
                .with_error_message(p.error_message.clone())
                .with_acknowledge_error_code(p.acknowledge_error_code)
                .with_acknowledge_error_message(p.acknowledge_error_message.clone())
                .with_current_leader(
                    kp_fetch_resp::LeaderIdAndEpoch::default()
                        .with_leader_id(p.current_leader.leader_id)
                        .with_leader_epoch(p.current_leader.leader_epoch),
                )
                .with_records(p.records.clone())
                .with_acquired_records(p.acquired_records.iter().map(acquired).collect())
        };
        let topic = |t: &ShareFetchTopicResponse| {
            kp_fetch_resp::ShareFetchableTopicResponse::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions.iter().map(partition).collect())
        };
        let endpoint = |n: &NodeEndpoint| {
            kp_fetch_resp::NodeEndpoint::default()
                .with_node_id(BrokerId(n.node_id))
                .with_host(n.host.clone())
                .with_port(n.port)
                .with_rack(n.rack.clone())
        };
        kp_fetch_resp::ShareFetchResponse::default()
            .with_throttle_time_ms(r.throttle_time_ms)
            .with_error_code(r.error_code)
            .with_error_message(r.error_message.clone())
            .with_acquisition_lock_timeout_ms(r.acquisition_lock_timeout_ms)
            .with_responses(r.responses.iter().map(topic).collect())
            .with_node_endpoints(r.node_endpoints.iter().map(endpoint).collect())
    }

    fn kp_ack_response(r: &ShareAcknowledgeResponse) -> kp_ack_resp::ShareAcknowledgeResponse {
        let partition = |p: &ShareAcknowledgePartitionData| {
            kp_ack_resp::PartitionData::default()
                .with_partition_index(p.partition_index)
                .with_error_code(p.error_code)
                .with_error_message(p.error_message.clone())
                .with_current_leader(
                    kp_ack_resp::LeaderIdAndEpoch::default()
                        .with_leader_id(p.current_leader.leader_id)
                        .with_leader_epoch(p.current_leader.leader_epoch),
                )
        };
        let topic = |t: &ShareAcknowledgeTopicResponse| {
            kp_ack_resp::ShareAcknowledgeTopicResponse::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions.iter().map(partition).collect())
        };
        let endpoint = |n: &NodeEndpoint| {
            kp_ack_resp::NodeEndpoint::default()
                .with_node_id(BrokerId(n.node_id))
                .with_host(n.host.clone())
                .with_port(n.port)
                .with_rack(n.rack.clone())
        };
        kp_ack_resp::ShareAcknowledgeResponse::default()
            .with_throttle_time_ms(r.throttle_time_ms)
            .with_error_code(r.error_code)
            .with_error_message(r.error_message.clone())
            .with_responses(r.responses.iter().map(topic).collect())
            .with_node_endpoints(r.node_endpoints.iter().map(endpoint).collect())
    }

    // --- fixtures ----------------------------------------------------------------------------

    fn batch(first_offset: i64, last_offset: i64, types: &[i8]) -> AcknowledgementBatch {
        AcknowledgementBatch {
            first_offset,
            last_offset,
            acknowledge_types: types.to_vec(),
        }
    }

    fn fetch_request() -> ShareFetchRequest {
        ShareFetchRequest {
            group_id: Some(s("sink-group")),
            member_id: Some(s("Mw3g6MxbQxqbbSI1ANg3Ig")),
            share_session_epoch: 7,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 52_428_800,
            max_records: 500,
            batch_size: 500,
            share_acquire_mode: SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED,
            is_renew_ack: false,
            topics: vec![
                FetchTopic {
                    topic_id: topic(1),
                    partitions: vec![
                        FetchPartition {
                            partition_index: 0,
                            acknowledgement_batches: vec![
                                batch(0, 9, &[1]),
                                batch(10, 12, &[1, 0, 2]),
                            ],
                        },
                        FetchPartition {
                            partition_index: 1,
                            acknowledgement_batches: Vec::new(),
                        },
                    ],
                },
                FetchTopic {
                    topic_id: topic(100),
                    partitions: vec![FetchPartition {
                        partition_index: 5,
                        acknowledgement_batches: vec![batch(
                            1_000_000_000_000,
                            1_000_000_000_000,
                            &[3],
                        )],
                    }],
                },
            ],
            forgotten_topics_data: vec![ForgottenTopic {
                topic_id: topic(200),
                partitions: vec![2, 3, 4],
            }],
        }
    }

    fn ack_request() -> ShareAcknowledgeRequest {
        ShareAcknowledgeRequest {
            group_id: Some(s("sink-group")),
            member_id: None,
            share_session_epoch: -1,
            is_renew_ack: false,
            topics: fetch_request().topics,
        }
    }

    fn fetch_response() -> ShareFetchResponse {
        ShareFetchResponse {
            throttle_time_ms: 3,
            error_code: 0,
            error_message: None,
            acquisition_lock_timeout_ms: 30_000,
            responses: vec![ShareFetchTopicResponse {
                topic_id: topic(1),
                partitions: vec![
                    ShareFetchPartitionData {
                        partition_index: 0,
                        error_code: 0,
                        error_message: None,
                        acknowledge_error_code: 121,
                        acknowledge_error_message: Some(s("invalid record state")),
                        current_leader: LeaderIdAndEpoch {
                            leader_id: 1,
                            leader_epoch: 4,
                        },
                        records: Some(Bytes::from_static(b"not really a record batch")),
                        acquired_records: vec![
                            AcquiredRecords {
                                first_offset: 13,
                                last_offset: 20,
                                delivery_count: 1,
                            },
                            AcquiredRecords {
                                first_offset: 22,
                                last_offset: 22,
                                delivery_count: 5,
                            },
                        ],
                    },
                    ShareFetchPartitionData {
                        partition_index: 1,
                        error_code: 6,
                        error_message: Some(s("not leader")),
                        current_leader: LeaderIdAndEpoch {
                            leader_id: 2,
                            leader_epoch: 9,
                        },
                        records: None,
                        ..ShareFetchPartitionData::default()
                    },
                ],
            }],
            node_endpoints: vec![
                NodeEndpoint {
                    node_id: 2,
                    host: s("broker-2.example"),
                    port: 9092,
                    rack: Some(s("rack-b")),
                },
                NodeEndpoint {
                    node_id: 3,
                    host: s("broker-3.example"),
                    port: 9093,
                    rack: None,
                },
            ],
        }
    }

    fn ack_response() -> ShareAcknowledgeResponse {
        ShareAcknowledgeResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            acquisition_lock_timeout_ms: 0,
            responses: vec![ShareAcknowledgeTopicResponse {
                topic_id: topic(1),
                partitions: vec![
                    ShareAcknowledgePartitionData {
                        partition_index: 0,
                        error_code: 0,
                        error_message: None,
                        current_leader: LeaderIdAndEpoch {
                            leader_id: 1,
                            leader_epoch: 4,
                        },
                    },
                    ShareAcknowledgePartitionData {
                        partition_index: 1,
                        error_code: 121,
                        error_message: Some(s("The record state is invalid.")),
                        current_leader: LeaderIdAndEpoch {
                            leader_id: -1,
                            leader_epoch: -1,
                        },
                    },
                ],
            }],
            node_endpoints: vec![NodeEndpoint {
                node_id: 1,
                host: s("localhost"),
                port: 9092,
                rack: None,
            }],
        }
    }

    // --- v1: byte-for-byte what kafka-protocol 0.18 does -------------------------------------

    /// The fewest bytes of each struct, as the schema gives them (fixed fields, one byte for
    /// each compact length and each tagged field section): what bounds array counts on decode.
    #[test]
    fn the_fewest_bytes_of_each_struct_are_the_schemas() {
        assert_eq!(AcknowledgementBatch::MIN_SIZE, 8 + 8 + 1 + 1);
        assert_eq!(FetchPartition::MIN_SIZE, 4 + 1 + 1);
        assert_eq!(FetchTopic::MIN_SIZE, 16 + 1 + 1);
        assert_eq!(ForgottenTopic::MIN_SIZE, 16 + 1 + 1);
        assert_eq!(LeaderIdAndEpoch::MIN_SIZE, 4 + 4 + 1);
        assert_eq!(NodeEndpoint::MIN_SIZE, 4 + 1 + 4 + 1 + 1);
        assert_eq!(AcquiredRecords::MIN_SIZE, 8 + 8 + 2 + 1);
        assert_eq!(
            ShareFetchPartitionData::MIN_SIZE,
            4 + 2 + 1 + 2 + 1 + (4 + 4 + 1) + 1 + 1 + 1
        );
        assert_eq!(ShareFetchTopicResponse::MIN_SIZE, 16 + 1 + 1);
        assert_eq!(
            ShareAcknowledgePartitionData::MIN_SIZE,
            4 + 2 + 1 + (4 + 4 + 1) + 1
        );
        assert_eq!(ShareAcknowledgeTopicResponse::MIN_SIZE, 16 + 1 + 1);
        // The top-level messages, without the fields of v2 only.
        assert_eq!(ShareFetchRequest::MIN_SIZE, 1 + 1 + 6 * 4 + 1 + 1 + 1);
        assert_eq!(ShareFetchResponse::MIN_SIZE, 4 + 2 + 1 + 4 + 1 + 1 + 1);
        assert_eq!(ShareAcknowledgeRequest::MIN_SIZE, 1 + 1 + 4 + 1 + 1);
        assert_eq!(ShareAcknowledgeResponse::MIN_SIZE, 4 + 2 + 1 + 1 + 1 + 1);
    }
    #[test]
    fn v1_share_fetch_request_encodes_like_kafka_protocol() {
        let request = fetch_request();
        let bytes = ours(&request, 1);
        assert_eq!(bytes, theirs(&kp_fetch_request(&request), 1));
        assert_eq!(request.wire_size(1).unwrap(), bytes.len());
        // kafka-protocol (the broker side) reads it back, and so do we.
        let mut buf = bytes.clone();
        let decoded = kp_fetch_req::ShareFetchRequest::decode(&mut buf, 1).unwrap();
        assert_eq!(decoded, kp_fetch_request(&request));
        assert_eq!(decode_all::<ShareFetchRequest>(&bytes, 1).unwrap(), request);
        // The schema defaults encode alike too.
        assert_eq!(
            ours(&ShareFetchRequest::default(), 1),
            theirs(&kp_fetch_req::ShareFetchRequest::default(), 1)
        );
    }

    #[test]
    fn v1_share_acknowledge_request_encodes_like_kafka_protocol() {
        let request = ack_request();
        let bytes = ours(&request, 1);
        assert_eq!(bytes, theirs(&kp_ack_request(&request), 1));
        let mut buf = bytes.clone();
        let decoded = kp_ack_req::ShareAcknowledgeRequest::decode(&mut buf, 1).unwrap();
        assert_eq!(decoded, kp_ack_request(&request));
        assert_eq!(
            decode_all::<ShareAcknowledgeRequest>(&bytes, 1).unwrap(),
            request
        );
        assert_eq!(
            ours(&ShareAcknowledgeRequest::default(), 1),
            theirs(&kp_ack_req::ShareAcknowledgeRequest::default(), 1)
        );
    }

    #[test]
    fn v1_share_fetch_response_from_kafka_protocol_decodes() {
        let expected = fetch_response();
        let bytes = theirs(&kp_fetch_response(&expected), 1);
        let decoded: ShareFetchResponse = decode_all(&bytes, 1).unwrap();
        assert_eq!(decoded, expected);
        // Spot checks, in case a conversion bug hid in both sides of the comparison.
        let partition = &decoded.responses[0].partitions[0];
        assert_eq!(decoded.acquisition_lock_timeout_ms, 30_000);
        assert_eq!(partition.acknowledge_error_code, 121);
        assert_eq!(partition.current_leader.leader_epoch, 4);
        assert_eq!(
            partition.records.as_deref(),
            Some(&b"not really a record batch"[..])
        );
        assert_eq!(partition.acquired_records[1].delivery_count, 5);
        assert_eq!(decoded.responses[0].partitions[1].records, None);
        assert_eq!(decoded.node_endpoints[0].rack.as_deref(), Some("rack-b"));
        // Our encoder writes the same bytes.
        assert_eq!(ours(&expected, 1), bytes);
    }

    #[test]
    fn v1_share_acknowledge_response_from_kafka_protocol_decodes() {
        let expected = ack_response();
        let bytes = theirs(&kp_ack_response(&expected), 1);
        let decoded: ShareAcknowledgeResponse = decode_all(&bytes, 1).unwrap();
        assert_eq!(decoded, expected);
        assert_eq!(decoded.responses[0].partitions[1].error_code, 121);
        assert_eq!(
            decoded.responses[0].partitions[1].current_leader.leader_id,
            -1
        );
        assert_eq!(decoded.node_endpoints[0].host.as_str(), "localhost");
        assert_eq!(ours(&expected, 1), bytes);
    }

    #[test]
    fn unknown_tagged_fields_are_skipped() {
        let expected = fetch_response();
        let mut theirs_response = kp_fetch_response(&expected)
            .with_unknown_tagged_field(7, Bytes::from_static(b"top"))
            .with_unknown_tagged_field(300, Bytes::from(vec![0xee; 200]));
        theirs_response.responses[0].partitions[0] = theirs_response.responses[0].partitions[0]
            .clone()
            .with_unknown_tagged_field(0, Bytes::new());
        theirs_response.responses[0].partitions[0].current_leader = theirs_response.responses[0]
            .partitions[0]
            .current_leader
            .clone()
            .with_unknown_tagged_field(1, Bytes::from_static(b"x"));
        theirs_response.node_endpoints[1] = theirs_response.node_endpoints[1]
            .clone()
            .with_unknown_tagged_field(2, Bytes::from_static(b"rack?"));
        let bytes = theirs(&theirs_response, 1);
        assert_eq!(
            decode_all::<ShareFetchResponse>(&bytes, 1).unwrap(),
            expected
        );
    }

    // --- v2: golden bytes from the released schema -------------------------------------------

    #[test]
    fn v2_share_fetch_request_golden_bytes() {
        let request = ShareFetchRequest {
            group_id: Some(s("g")),
            member_id: Some(s("m")),
            share_session_epoch: 1,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 0x0010_0000,
            max_records: 500,
            batch_size: 250,
            share_acquire_mode: SHARE_ACQUIRE_MODE_RECORD_LIMIT,
            is_renew_ack: false,
            topics: vec![FetchTopic {
                topic_id: topic(0x00),
                partitions: vec![FetchPartition {
                    partition_index: 3,
                    acknowledgement_batches: vec![batch(10, 12, &[1, 0, 2])],
                }],
            }],
            forgotten_topics_data: vec![ForgottenTopic {
                topic_id: topic(0xf0),
                partitions: vec![7, 8],
            }],
        };
        #[rustfmt::skip]
        let expected: &[u8] = &[
            0x02, b'g',                         // GroupId: compact nullable string, len 1 + 1
            0x02, b'm',                         // MemberId
            0x00, 0x00, 0x00, 0x01,             // ShareSessionEpoch = 1
            0x00, 0x00, 0x01, 0xf4,             // MaxWaitMs = 500
            0x00, 0x00, 0x00, 0x01,             // MinBytes = 1
            0x00, 0x10, 0x00, 0x00,             // MaxBytes = 1 MiB
            0x00, 0x00, 0x01, 0xf4,             // MaxRecords = 500 (v1+)
            0x00, 0x00, 0x00, 0xfa,             // BatchSize = 250 (v1+)
            0x01,                               // ShareAcquireMode = 1 record_limit (v2+)
            0x00,                               // IsRenewAck = false (v2+)
            0x02,                               // Topics: compact array, 1 element + 1
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, //   TopicId (uuid, 16 bytes)
            0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
            0x02,                               //   Partitions: 1 element
            0x00, 0x00, 0x00, 0x03,             //     PartitionIndex = 3
            0x02,                               //     AcknowledgementBatches: 1 element
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // FirstOffset = 10
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, // LastOffset = 12
            0x04, 0x01, 0x00, 0x02,             //       AcknowledgeTypes: [Accept, Gap, Release]
            0x00,                               //       (batch tagged fields: none)
            0x00,                               //     (partition tagged fields)
            0x00,                               //   (topic tagged fields)
            0x02,                               // ForgottenTopicsData: 1 element
            0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, //   TopicId
            0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
            0x03, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x08, // Partitions: [7, 8]
            0x00,                               //   (forgotten topic tagged fields)
            0x00,                               // (request tagged fields)
        ];
        assert_eq!(&ours(&request, 2)[..], expected);
        assert_eq!(request.wire_size(2).unwrap(), expected.len());
        assert_eq!(
            decode_all::<ShareFetchRequest>(expected, 2).unwrap(),
            request
        );
    }

    #[test]
    fn v2_share_acknowledge_request_golden_bytes() {
        let request = ShareAcknowledgeRequest {
            group_id: Some(s("grp")),
            member_id: None,
            share_session_epoch: 5,
            is_renew_ack: true,
            topics: vec![AcknowledgeTopic {
                topic_id: topic(0x10),
                partitions: vec![AcknowledgePartition {
                    partition_index: 0,
                    acknowledgement_batches: vec![batch(100, 101, &[ACKNOWLEDGE_TYPE_RENEW])],
                }],
            }],
        };
        #[rustfmt::skip]
        let expected: &[u8] = &[
            0x04, b'g', b'r', b'p',             // GroupId = "grp"
            0x00,                               // MemberId = null
            0x00, 0x00, 0x00, 0x05,             // ShareSessionEpoch = 5
            0x01,                               // IsRenewAck = true (v2+)
            0x02,                               // Topics: 1 element
            0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, //   TopicId
            0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
            0x02,                               //   Partitions: 1 element
            0x00, 0x00, 0x00, 0x00,             //     PartitionIndex = 0
            0x02,                               //     AcknowledgementBatches: 1 element
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x64, // FirstOffset = 100
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x65, // LastOffset = 101
            0x02, 0x04,                         //       AcknowledgeTypes: [Renew]
            0x00, 0x00, 0x00,                   //   (batch, partition, topic tagged fields)
            0x00,                               // (request tagged fields)
        ];
        assert_eq!(&ours(&request, 2)[..], expected);
        assert_eq!(
            decode_all::<ShareAcknowledgeRequest>(expected, 2).unwrap(),
            request
        );
    }

    #[test]
    fn v2_share_acknowledge_response_golden_bytes() {
        #[rustfmt::skip]
        let bytes: &[u8] = &[
            0x00, 0x00, 0x00, 0x00,             // ThrottleTimeMs = 0
            0x00, 0x00,                         // ErrorCode = 0
            0x00,                               // ErrorMessage = null
            0x00, 0x00, 0x75, 0x30,             // AcquisitionLockTimeoutMs = 30000 (v2+)
            0x02,                               // Responses: 1 element
            0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, //   TopicId
            0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
            0x02,                               //   Partitions: 1 element
            0x00, 0x00, 0x00, 0x02,             //     PartitionIndex = 2
            0x00, 0x79,                         //     ErrorCode = 121 INVALID_RECORD_STATE
            0x02, b'x',                         //     ErrorMessage = "x"
            0x00, 0x00, 0x00, 0x01,             //     CurrentLeader.LeaderId = 1
            0x00, 0x00, 0x00, 0x07,             //     CurrentLeader.LeaderEpoch = 7
            0x00,                               //     (CurrentLeader tagged fields)
            0x00,                               //   (partition tagged fields)
            0x00,                               //   (topic tagged fields)
            0x02,                               // NodeEndpoints: 1 element
            0x00, 0x00, 0x00, 0x01,             //   NodeId = 1
            0x02, b'h',                         //   Host = "h"
            0x00, 0x00, 0x23, 0x84,             //   Port = 9092
            0x00,                               //   Rack = null
            0x00,                               //   (endpoint tagged fields)
            0x00,                               // (response tagged fields)
        ];
        let expected = ShareAcknowledgeResponse {
            acquisition_lock_timeout_ms: 30_000,
            responses: vec![ShareAcknowledgeTopicResponse {
                topic_id: topic(0x20),
                partitions: vec![ShareAcknowledgePartitionData {
                    partition_index: 2,
                    error_code: 121,
                    error_message: Some(s("x")),
                    current_leader: LeaderIdAndEpoch {
                        leader_id: 1,
                        leader_epoch: 7,
                    },
                }],
            }],
            node_endpoints: vec![NodeEndpoint {
                node_id: 1,
                host: s("h"),
                port: 9092,
                rack: None,
            }],
            ..ShareAcknowledgeResponse::default()
        };
        assert_eq!(
            decode_all::<ShareAcknowledgeResponse>(bytes, 2).unwrap(),
            expected
        );
        assert_eq!(&ours(&expected, 2)[..], bytes);
        // v1 lacks the lock timeout: the same message is 4 bytes shorter, and decodes with 0.
        let v1 = ours(&expected, 1);
        assert_eq!(v1.len(), bytes.len() - 4);
        assert_eq!(&v1[..7], &bytes[..7]);
        assert_eq!(&v1[7..], &bytes[11..]);
        assert_eq!(
            decode_all::<ShareAcknowledgeResponse>(&v1, 1).unwrap(),
            ShareAcknowledgeResponse {
                acquisition_lock_timeout_ms: 0,
                ..expected
            }
        );
    }

    /// Bytes written by the released Java client (`ShareFetchResponseData.write` of
    /// kafka-clients 4.2.0 and 4.4.0, identical) for version 2.
    #[test]
    fn v2_share_fetch_response_written_by_java_decodes() {
        let bytes = JAVA_SHARE_FETCH_RESPONSE_V2;
        let decoded: ShareFetchResponse = decode_all(bytes, 2).unwrap();
        let expected = ShareFetchResponse {
            throttle_time_ms: 5,
            error_code: 0,
            error_message: None,
            acquisition_lock_timeout_ms: 15_000,
            responses: vec![ShareFetchTopicResponse {
                topic_id: topic(0x30),
                partitions: vec![ShareFetchPartitionData {
                    partition_index: 4,
                    error_code: 0,
                    error_message: None,
                    acknowledge_error_code: 0,
                    acknowledge_error_message: None,
                    current_leader: LeaderIdAndEpoch {
                        leader_id: 1,
                        leader_epoch: 2,
                    },
                    records: Some(Bytes::from_static(b"\x01\x02\x03")),
                    acquired_records: vec![AcquiredRecords {
                        first_offset: 40,
                        last_offset: 49,
                        delivery_count: 2,
                    }],
                }],
            }],
            node_endpoints: vec![NodeEndpoint {
                node_id: 1,
                host: s("localhost"),
                port: 9092,
                rack: Some(s("r1")),
            }],
        };
        assert_eq!(decoded, expected);
        assert_eq!(&ours(&expected, 2)[..], bytes);
        // The response did not change in v2.
        assert_eq!(ours(&expected, 1), ours(&expected, 2));
    }

    /// See [`v2_share_fetch_response_written_by_java_decodes`].
    #[rustfmt::skip]
    const JAVA_SHARE_FETCH_RESPONSE_V2: &[u8] = &[
        0x00, 0x00, 0x00, 0x05,                 // ThrottleTimeMs = 5
        0x00, 0x00,                             // ErrorCode = 0
        0x00,                                   // ErrorMessage = null
        0x00, 0x00, 0x3a, 0x98,                 // AcquisitionLockTimeoutMs = 15000
        0x02,                                   // Responses: 1 element
        0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, //   TopicId
        0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f,
        0x02,                                   //   Partitions: 1 element
        0x00, 0x00, 0x00, 0x04,                 //     PartitionIndex = 4
        0x00, 0x00,                             //     ErrorCode = 0
        0x00,                                   //     ErrorMessage = null
        0x00, 0x00,                             //     AcknowledgeErrorCode = 0
        0x00,                                   //     AcknowledgeErrorMessage = null
        0x00, 0x00, 0x00, 0x01,                 //     CurrentLeader.LeaderId = 1
        0x00, 0x00, 0x00, 0x02,                 //     CurrentLeader.LeaderEpoch = 2
        0x00,                                   //     (CurrentLeader tagged fields)
        0x04, 0x01, 0x02, 0x03,                 //     Records: compact bytes, 3 bytes
        0x02,                                   //     AcquiredRecords: 1 element
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x28, // FirstOffset = 40
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x31, // LastOffset = 49
        0x00, 0x02,                             //       DeliveryCount = 2
        0x00,                                   //       (acquired records tagged fields)
        0x00,                                   //     (partition tagged fields)
        0x00,                                   //   (topic tagged fields)
        0x02,                                   // NodeEndpoints: 1 element
        0x00, 0x00, 0x00, 0x01,                 //   NodeId = 1
        0x0a, b'l', b'o', b'c', b'a', b'l', b'h', b'o', b's', b't', // Host = "localhost"
        0x00, 0x00, 0x23, 0x84,                 //   Port = 9092
        0x03, b'r', b'1',                       //   Rack = "r1"
        0x00,                                   //   (endpoint tagged fields)
        0x00,                                   // (response tagged fields)
    ];

    #[test]
    fn v2_share_fetch_request_is_v1_plus_two_bytes_after_batch_size() {
        let request = ShareFetchRequest {
            share_acquire_mode: SHARE_ACQUIRE_MODE_RECORD_LIMIT,
            ..fetch_request()
        };
        let v1 = ours(&request, 1);
        let v2 = ours(&request, 2);
        // GroupId (1 + 10) and MemberId (1 + 22), then six int32s: 58 bytes before the new fields.
        let at = 1 + 10 + 1 + 22 + 6 * 4;
        assert_eq!(v2.len(), v1.len() + 2);
        assert_eq!(&v2[..at], &v1[..at]);
        assert_eq!(&v2[at..at + 2], &[0x01, 0x00]);
        assert_eq!(&v2[at + 2..], &v1[at..]);

        let renew = ShareAcknowledgeRequest {
            is_renew_ack: true,
            ..ack_request()
        };
        let v1 = ours(
            &ShareAcknowledgeRequest {
                is_renew_ack: false,
                ..renew.clone()
            },
            1,
        );
        let v2 = ours(&renew, 2);
        let at = 1 + 10 + 1 + 4;
        assert_eq!(&v2[..at], &v1[..at]);
        assert_eq!(v2[at], 0x01);
        assert_eq!(&v2[at + 1..], &v1[at..]);
    }

    #[test]
    fn v1_refuses_is_renew_ack_and_drops_the_ignorable_acquire_mode() {
        let renew = ShareFetchRequest {
            is_renew_ack: true,
            ..ShareFetchRequest::default()
        };
        let error = renew.wire_size(1).unwrap_err();
        assert_eq!(
            error,
            CodecError::FieldNotSupported {
                field: "ShareFetchRequest.IsRenewAck",
                version: 1
            }
        );
        let mut buf = BytesMut::new();
        assert!(renew.encode_wire(&mut buf, 1).is_err());
        assert!(buf.is_empty(), "nothing is written for a refused field");
        assert!(
            ShareAcknowledgeRequest {
                is_renew_ack: true,
                ..ShareAcknowledgeRequest::default()
            }
            .wire_size(1)
            .is_err()
        );

        let record_limit = ShareFetchRequest {
            share_acquire_mode: SHARE_ACQUIRE_MODE_RECORD_LIMIT,
            ..fetch_request()
        };
        assert_eq!(ours(&record_limit, 1), ours(&fetch_request(), 1));
        // The v2-only response field is ignorable as well.
        let response = ShareAcknowledgeResponse {
            acquisition_lock_timeout_ms: 1,
            ..ack_response()
        };
        assert_eq!(ours(&response, 1), ours(&ack_response(), 1));
    }

    #[test]
    fn versions_outside_one_to_two_are_errors() {
        for version in [-1, 0, 3, i16::MAX] {
            let unsupported = |e: CodecError| matches!(e, CodecError::UnsupportedVersion { .. });
            assert!(unsupported(fetch_request().wire_size(version).unwrap_err()));
            assert!(unsupported(ack_request().wire_size(version).unwrap_err()));
            assert!(unsupported(
                fetch_response().wire_size(version).unwrap_err()
            ));
            assert!(unsupported(ack_response().wire_size(version).unwrap_err()));
            let bytes = ours(&fetch_response(), 1);
            assert!(unsupported(
                ShareFetchResponse::decode_wire(&mut bytes.clone(), version).unwrap_err()
            ));
            let bytes = ours(&ack_response(), 1);
            assert!(unsupported(
                ShareAcknowledgeResponse::decode_wire(&mut bytes.clone(), version).unwrap_err()
            ));
        }
    }

    #[test]
    fn message_and_header_versions() {
        assert_eq!(
            <ShareFetchRequest as Message>::VERSIONS,
            VersionRange { min: 1, max: 2 }
        );
        assert_eq!(<ShareAcknowledgeResponse as Message>::VERSIONS, VERSIONS);
        assert_eq!(<ShareFetchRequest as Message>::DEPRECATED_VERSIONS, None);
        for version in [1, 2] {
            assert_eq!(ShareFetchRequest::header_version(version), 2);
            assert_eq!(ShareAcknowledgeRequest::header_version(version), 2);
            assert_eq!(ShareFetchResponse::header_version(version), 1);
            assert_eq!(ShareAcknowledgeResponse::header_version(version), 1);
        }
        // The same numbers kafka-protocol uses for v1, and what ApiKey picks for the header.
        assert_eq!(kp_fetch_req::ShareFetchRequest::header_version(1), 2);
        assert_eq!(kp_fetch_resp::ShareFetchResponse::header_version(1), 1);
        use kafka_protocol::messages::ApiKey;
        assert_eq!(ApiKey::ShareFetch as i16, SHARE_FETCH_KEY);
        assert_eq!(ApiKey::ShareAcknowledge as i16, SHARE_ACKNOWLEDGE_KEY);
        assert_eq!(
            ApiKey::ShareFetch.request_header_version(2),
            REQUEST_HEADER_VERSION
        );
        assert_eq!(
            ApiKey::ShareAcknowledge.response_header_version(2),
            RESPONSE_HEADER_VERSION
        );
    }

    #[test]
    fn min_sizes_are_the_sizes_of_empty_encodings() {
        fn check<T: Wire + Default>() {
            assert_eq!(
                ours(&T::default(), 1).len(),
                T::MIN_SIZE,
                "{}",
                std::any::type_name::<T>()
            );
        }
        check::<AcknowledgementBatch>();
        check::<FetchPartition>();
        check::<FetchTopic>();
        check::<ForgottenTopic>();
        check::<LeaderIdAndEpoch>();
        check::<NodeEndpoint>();
        check::<AcquiredRecords>();
        check::<ShareFetchPartitionData>();
        check::<ShareFetchTopicResponse>();
        check::<ShareAcknowledgePartitionData>();
        check::<ShareAcknowledgeTopicResponse>();
        check::<ShareFetchResponse>();
        check::<ShareFetchRequest>();
        check::<ShareAcknowledgeRequest>();
        check::<ShareAcknowledgeResponse>();
    }

    #[test]
    fn unsigned_varints() {
        for (value, encoded) in [
            (0u32, &[0x00][..]),
            (1, &[0x01]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (16_384, &[0x80, 0x80, 0x01]),
            (u32::MAX, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ] {
            let mut buf = BytesMut::new();
            put_uvarint(&mut BufSink(&mut buf), value);
            assert_eq!(&buf[..], encoded, "{value}");
            let mut read = &buf[..];
            assert_eq!(get_uvarint(&mut read, "v").unwrap(), value);
            assert!(read.is_empty());
        }
        // A long array prefix: 200 acknowledge types need a two-byte count (201).
        let long = batch(0, 199, &[1; 200]);
        let bytes = ours(&long, 2);
        assert_eq!(&bytes[16..18], &[0xc9, 0x01]);
        assert_eq!(decode_all::<AcknowledgementBatch>(&bytes, 2).unwrap(), long);
    }

    /// Only with `--cfg share_v2_kafka_traits` and `anyhow` in `[dependencies]`.
    #[test]
    fn kafka_protocol_traits_delegate_to_the_codec() {
        use kafka_protocol::protocol::Request;

        let request = fetch_request();
        let mut buf = BytesMut::new();
        Encodable::encode(&request, &mut buf, 2).unwrap();
        assert_eq!(buf.freeze(), ours(&request, 2));
        assert_eq!(
            Encodable::compute_size(&request, 2).unwrap(),
            ours(&request, 2).len()
        );
        let renew = ShareFetchRequest {
            is_renew_ack: true,
            ..fetch_request()
        };
        let error = Encodable::encode(&renew, &mut BytesMut::new(), 1).unwrap_err();
        assert!(error.downcast_ref::<CodecError>().is_some());

        let mut bytes = ours(&fetch_response(), 2);
        let decoded = <ShareFetchResponse as Decodable>::decode(&mut bytes, 2).unwrap();
        assert_eq!(decoded, fetch_response());
        let mut bytes = ours(&ack_response(), 1);
        let decoded = <ShareAcknowledgeResponse as Decodable>::decode(&mut bytes, 1).unwrap();
        assert_eq!(decoded, ack_response());
        assert!(<ShareAcknowledgeResponse as Decodable>::decode(&mut Bytes::new(), 2).is_err());

        assert_eq!(<ShareFetchRequest as Request>::KEY, SHARE_FETCH_KEY);
        assert_eq!(
            <ShareAcknowledgeRequest as Request>::KEY,
            SHARE_ACKNOWLEDGE_KEY
        );
        let _: ShareAcknowledgeResponse =
            <<ShareAcknowledgeRequest as Request>::Response as Default>::default();
    }

    // --- malformed input ---------------------------------------------------------------------

    /// Every strict prefix of a valid encoding is an error (never a panic, never a success).
    fn every_prefix_fails<T: Wire + std::fmt::Debug>(bytes: &[u8], version: i16) {
        for len in 0..bytes.len() {
            let mut buf = Bytes::copy_from_slice(&bytes[..len]);
            let result = T::read(&mut buf, version);
            assert!(
                result.is_err(),
                "prefix of {len}/{} bytes decoded: {result:?}",
                bytes.len()
            );
        }
        // The same through a slice and a BytesMut.
        for len in 0..bytes.len() {
            let mut slice = &bytes[..len];
            assert!(T::read(&mut slice, version).is_err());
            let mut buf = BytesMut::from(&bytes[..len]);
            assert!(T::read(&mut buf, version).is_err());
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [1, 2] {
            every_prefix_fails::<ShareFetchRequest>(&ours(&fetch_request(), version), version);
            every_prefix_fails::<ShareAcknowledgeRequest>(&ours(&ack_request(), version), version);
            every_prefix_fails::<ShareFetchResponse>(&ours(&fetch_response(), version), version);
            every_prefix_fails::<ShareAcknowledgeResponse>(
                &ours(&ack_response(), version),
                version,
            );
        }
        every_prefix_fails::<ShareFetchResponse>(JAVA_SHARE_FETCH_RESPONSE_V2, 2);
    }

    #[test]
    fn malformed_inputs_are_errors() {
        fn malformed_field(result: Result<impl std::fmt::Debug, CodecError>) -> &'static str {
            match result {
                Err(CodecError::Malformed { field, .. }) => field,
                other => panic!("expected Malformed, got {other:?}"),
            }
        }
        // An empty ShareFetchResponse up to its Responses array: 4 + 2 + 1 + 4 bytes.
        let head = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let with = |tail: &[u8]| [&head[..], tail].concat();

        // A huge array count is refused before anything is allocated.
        let huge = with(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x00]);
        assert_eq!(
            malformed_field(decode_all::<ShareFetchResponse>(&huge, 1)),
            "ShareFetchResponse.Responses"
        );
        // So is a count that merely exceeds what the rest of the buffer can hold.
        let too_many = with(&[0x03, 0x01, 0x00]);
        assert!(decode_all::<ShareFetchResponse>(&too_many, 1).is_err());
        // A null (0) array where the schema has no nullable array.
        let null_array = with(&[0x00, 0x01, 0x00]);
        assert_eq!(
            malformed_field(decode_all::<ShareFetchResponse>(&null_array, 1)),
            "ShareFetchResponse.Responses"
        );
        // A varint longer than five bytes, or with more than 32 bits.
        let long_varint = with(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x01, 0x00]);
        assert!(decode_all::<ShareFetchResponse>(&long_varint, 1).is_err());
        let wide_varint = with(&[0x80, 0x80, 0x80, 0x80, 0x10, 0x01, 0x00]);
        assert!(decode_all::<ShareFetchResponse>(&wide_varint, 1).is_err());
        // Invalid UTF-8 in a string.
        let mut bad_utf8 = head.to_vec();
        bad_utf8[6] = 0x03;
        bad_utf8.splice(7..7, [0xc3, 0x28]);
        assert_eq!(
            malformed_field(decode_all::<ShareFetchResponse>(&bad_utf8, 1)),
            "ShareFetchResponse.ErrorMessage"
        );
        // A null host, which is not nullable.
        let null_host = with(&[0x01, 0x02, 0, 0, 0, 1, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x00]);
        assert_eq!(
            malformed_field(decode_all::<ShareFetchResponse>(&null_host, 1)),
            "NodeEndpoints[].Host"
        );
        // A string longer than Java allows.
        let mut long_string = head[..6].to_vec();
        long_string.extend([0x81, 0x80, 0x02]); // 0x8001 = 32769 = length 32768 + 1
        long_string.extend(vec![b'a'; 0x8000]);
        long_string.extend([0, 0, 0, 0, 0x01, 0x01, 0x00]);
        assert!(decode_all::<ShareFetchResponse>(&long_string, 1).is_err());
        // A tagged field section claiming more fields than bytes, or a field larger than the rest.
        let tags = with(&[0x01, 0x01, 0x7f]);
        assert!(decode_all::<ShareFetchResponse>(&tags, 1).is_err());
        let tag_size = with(&[0x01, 0x01, 0x01, 0x00, 0x05, 0x00]);
        assert!(decode_all::<ShareFetchResponse>(&tag_size, 1).is_err());
        // Records longer than the buffer.
        let mut records = ours(&fetch_response(), 1).to_vec();
        let at = records
            .windows(26)
            .position(|w| w == b"\x1anot really a record batch")
            .unwrap();
        records[at] = 0x7f;
        assert!(decode_all::<ShareFetchResponse>(&records, 1).is_err());
    }

    #[test]
    fn encoding_refuses_what_java_cannot_read() {
        let long = ShareFetchRequest {
            group_id: Some(StrBytes::from_string("g".repeat(0x8000))),
            ..ShareFetchRequest::default()
        };
        assert!(matches!(
            long.wire_size(1),
            Err(CodecError::TooLong {
                field: "ShareFetchRequest.GroupId",
                len: 0x8000,
                max: 0x7fff
            })
        ));
        let longest = ShareFetchRequest {
            group_id: Some(StrBytes::from_string("g".repeat(0x7fff))),
            ..ShareFetchRequest::default()
        };
        let bytes = ours(&longest, 2);
        assert_eq!(decode_all::<ShareFetchRequest>(&bytes, 2).unwrap(), longest);
    }

    // --- properties --------------------------------------------------------------------------

    fn str_bytes() -> impl Strategy<Value = StrBytes> {
        "\\PC{0,12}".prop_map(StrBytes::from_string)
    }

    fn uuid() -> impl Strategy<Value = Uuid> {
        any::<[u8; 16]>().prop_map(Uuid::from_bytes)
    }

    fn ack_batch() -> impl Strategy<Value = AcknowledgementBatch> {
        (any::<i64>(), any::<i64>(), vec(any::<i8>(), 0..5)).prop_map(
            |(first_offset, last_offset, acknowledge_types)| AcknowledgementBatch {
                first_offset,
                last_offset,
                acknowledge_types,
            },
        )
    }

    fn fetch_topics() -> impl Strategy<Value = Vec<FetchTopic>> {
        let partition = (any::<i32>(), vec(ack_batch(), 0..3)).prop_map(
            |(partition_index, acknowledgement_batches)| FetchPartition {
                partition_index,
                acknowledgement_batches,
            },
        );
        vec(
            (uuid(), vec(partition, 0..3)).prop_map(|(topic_id, partitions)| FetchTopic {
                topic_id,
                partitions,
            }),
            0..3,
        )
    }

    prop_compose! {
        fn any_fetch_request(v2: bool)(
            group_id in proptest::option::of(str_bytes()),
            member_id in proptest::option::of(str_bytes()),
            ints in any::<[i32; 6]>(),
            share_acquire_mode in any::<i8>(),
            is_renew_ack in any::<bool>(),
            topics in fetch_topics(),
            forgotten_topics_data in vec(
                (uuid(), vec(any::<i32>(), 0..4))
                    .prop_map(|(topic_id, partitions)| ForgottenTopic { topic_id, partitions }),
                0..3,
            ),
        ) -> ShareFetchRequest {
            ShareFetchRequest {
                group_id,
                member_id,
                share_session_epoch: ints[0],
                max_wait_ms: ints[1],
                min_bytes: ints[2],
                max_bytes: ints[3],
                max_records: ints[4],
                batch_size: ints[5],
                share_acquire_mode: if v2 { share_acquire_mode } else { 0 },
                is_renew_ack: v2 && is_renew_ack,
                topics,
                forgotten_topics_data,
            }
        }
    }

    prop_compose! {
        fn any_ack_request(v2: bool)(
            group_id in proptest::option::of(str_bytes()),
            member_id in proptest::option::of(str_bytes()),
            share_session_epoch in any::<i32>(),
            is_renew_ack in any::<bool>(),
            topics in fetch_topics(),
        ) -> ShareAcknowledgeRequest {
            ShareAcknowledgeRequest {
                group_id,
                member_id,
                share_session_epoch,
                is_renew_ack: v2 && is_renew_ack,
                topics,
            }
        }
    }

    fn leader() -> impl Strategy<Value = LeaderIdAndEpoch> {
        (any::<i32>(), any::<i32>()).prop_map(|(leader_id, leader_epoch)| LeaderIdAndEpoch {
            leader_id,
            leader_epoch,
        })
    }

    fn node_endpoints() -> impl Strategy<Value = Vec<NodeEndpoint>> {
        vec(
            (
                any::<i32>(),
                str_bytes(),
                any::<i32>(),
                proptest::option::of(str_bytes()),
            )
                .prop_map(|(node_id, host, port, rack)| NodeEndpoint {
                    node_id,
                    host,
                    port,
                    rack,
                }),
            0..3,
        )
    }

    prop_compose! {
        fn fetch_partition_data()(
            partition_index in any::<i32>(),
            codes in any::<[i16; 2]>(),
            error_message in proptest::option::of(str_bytes()),
            acknowledge_error_message in proptest::option::of(str_bytes()),
            current_leader in leader(),
            records in proptest::option::of(vec(any::<u8>(), 0..40).prop_map(Bytes::from)),
            acquired_records in vec(
                (any::<i64>(), any::<i64>(), any::<i16>()).prop_map(
                    |(first_offset, last_offset, delivery_count)| AcquiredRecords {
                        first_offset,
                        last_offset,
                        delivery_count,
                    },
                ),
                0..3,
            ),
        ) -> ShareFetchPartitionData {
            ShareFetchPartitionData {
                partition_index,
                error_code: codes[0],
                error_message,
                acknowledge_error_code: codes[1],
                acknowledge_error_message,
                current_leader,
                records,
                acquired_records,
            }
        }
    }

    prop_compose! {
        fn any_fetch_response()(
            throttle_time_ms in any::<i32>(),
            error_code in any::<i16>(),
            error_message in proptest::option::of(str_bytes()),
            acquisition_lock_timeout_ms in any::<i32>(),
            responses in vec(
                (uuid(), vec(fetch_partition_data(), 0..3)).prop_map(|(topic_id, partitions)| {
                    ShareFetchTopicResponse { topic_id, partitions }
                }),
                0..3,
            ),
            node_endpoints in node_endpoints(),
        ) -> ShareFetchResponse {
            ShareFetchResponse {
                throttle_time_ms,
                error_code,
                error_message,
                acquisition_lock_timeout_ms,
                responses,
                node_endpoints,
            }
        }
    }

    fn ack_partition_data() -> impl Strategy<Value = ShareAcknowledgePartitionData> {
        let message = proptest::option::of(str_bytes());
        (any::<i32>(), any::<i16>(), message, leader()).prop_map(
            |(partition_index, error_code, error_message, current_leader)| {
                ShareAcknowledgePartitionData {
                    partition_index,
                    error_code,
                    error_message,
                    current_leader,
                }
            },
        )
    }

    prop_compose! {
        fn any_ack_response(v2: bool)(
            throttle_time_ms in any::<i32>(),
            error_code in any::<i16>(),
            error_message in proptest::option::of(str_bytes()),
            acquisition_lock_timeout_ms in any::<i32>(),
            responses in vec(
                (
                    uuid(),
                    vec(ack_partition_data(), 0..3),
                )
                    .prop_map(|(topic_id, partitions)| ShareAcknowledgeTopicResponse {
                        topic_id,
                        partitions,
                    }),
                0..3,
            ),
            node_endpoints in node_endpoints(),
        ) -> ShareAcknowledgeResponse {
            ShareAcknowledgeResponse {
                throttle_time_ms,
                error_code,
                error_message,
                acquisition_lock_timeout_ms: if v2 { acquisition_lock_timeout_ms } else { 0 },
                responses,
                node_endpoints,
            }
        }
    }

    /// Flips bytes of a valid encoding and decodes the result; only a panic fails.
    fn mutated<T: Wire>(bytes: &[u8], flips: &[(usize, u8)], version: i16) {
        let mut bytes = bytes.to_vec();
        if bytes.is_empty() {
            return;
        }
        for &(at, xor) in flips {
            let at = at % bytes.len();
            bytes[at] ^= xor;
        }
        let _ = T::read(&mut Bytes::from(bytes), version);
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn requests_round_trip(
            fetch1 in any_fetch_request(false),
            fetch2 in any_fetch_request(true),
            ack1 in any_ack_request(false),
            ack2 in any_ack_request(true),
        ) {
            prop_assert_eq!(round_trip(&fetch1, 1), fetch1);
            prop_assert_eq!(round_trip(&fetch2, 2), fetch2);
            prop_assert_eq!(round_trip(&ack1, 1), ack1);
            prop_assert_eq!(round_trip(&ack2, 2), ack2);
        }

        #[test]
        fn responses_round_trip(
            fetch in any_fetch_response(),
            ack1 in any_ack_response(false),
            ack2 in any_ack_response(true),
        ) {
            for version in [1, 2] {
                prop_assert_eq!(
                    round_trip(&fetch, version),
                    fetch.clone()
                );
            }
            prop_assert_eq!(round_trip(&ack1, 1), ack1);
            prop_assert_eq!(round_trip(&ack2, 2), ack2);
        }

        #[test]
        fn v1_matches_kafka_protocol(
            fetch_request in any_fetch_request(false),
            ack_request in any_ack_request(false),
            fetch_response in any_fetch_response(),
            ack_response in any_ack_response(false),
        ) {
            prop_assert_eq!(ours(&fetch_request, 1), theirs(&kp_fetch_request(&fetch_request), 1));
            prop_assert_eq!(ours(&ack_request, 1), theirs(&kp_ack_request(&ack_request), 1));
            let bytes = theirs(&kp_fetch_response(&fetch_response), 1);
            prop_assert_eq!(decode_all::<ShareFetchResponse>(&bytes, 1).unwrap(), fetch_response);
            let bytes = theirs(&kp_ack_response(&ack_response), 1);
            let decoded = decode_all::<ShareAcknowledgeResponse>(&bytes, 1).unwrap();
            prop_assert_eq!(decoded, ack_response);
        }

        #[test]
        fn truncated_random_messages_are_errors(
            fetch in any_fetch_response(),
            ack in any_ack_request(true),
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = ours(&fetch, 2);
            let len = cut.index(bytes.len());
            prop_assert!(ShareFetchResponse::decode_wire(&mut bytes.slice(..len), 2).is_err());
            let bytes = ours(&ack, 2);
            let len = cut.index(bytes.len());
            prop_assert!(ShareAcknowledgeRequest::decode_wire(&mut bytes.slice(..len), 2).is_err());
        }

        #[test]
        fn garbage_never_panics(garbage in vec(any::<u8>(), 0..256), version in 0i16..4) {
            let _ = ShareFetchRequest::decode_wire(&mut Bytes::from(garbage.clone()), version);
            let _ = ShareFetchResponse::decode_wire(&mut Bytes::from(garbage.clone()), version);
            let _ = ShareAcknowledgeRequest::decode_wire(&mut &garbage[..], version);
            let mut buf = BytesMut::from(&garbage[..]);
            let _ = ShareAcknowledgeResponse::decode_wire(&mut buf, version);
        }

        #[test]
        fn corrupted_messages_never_panic(
            fetch_response in any_fetch_response(),
            fetch_request in any_fetch_request(true),
            ack_response in any_ack_response(true),
            flips in vec((any::<usize>(), 1u8..), 1..4),
        ) {
            for version in [1, 2] {
                mutated::<ShareFetchResponse>(&ours(&fetch_response, version), &flips, version);
                mutated::<ShareAcknowledgeResponse>(&ours(&ack_response, 2), &flips, version);
            }
            mutated::<ShareFetchRequest>(&ours(&fetch_request, 2), &flips, 2);
            mutated::<ShareFetchRequest>(&ours(&fetch_request, 2), &flips, 1);
        }
    }
}
