//! Converts the `payload` of a JsonConverter envelope as its schema says.

use std::collections::HashMap;
use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use bytes::Bytes;

use super::path::Path;
use super::tree::{Json, MAX_DEPTH};
use crate::convert::schema::{Schema, SchemaType};
use crate::record::Value;

/// Standard base64, padding optional, as Jackson reads `bytes` payloads.
static BASE64: LazyLock<GeneralPurpose> = LazyLock::new(|| {
    GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    )
});

const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";

/// Objects with more members than this are indexed before struct fields are looked up.
const INDEX_ABOVE: usize = 16;

/// The bytes the copies of schema defaults may take per byte of the record (see
/// [`CopyBudget`]), and at least.
const COPY_PER_INPUT_BYTE: usize = 16;
const COPY_AT_LEAST: usize = 1 << 20;

/// What the copies of schema defaults may weigh together while one record converts. A null
/// takes a copy of its schema's default, and a default's own nulls take copies of theirs
/// (defaults are built the same way), so each level of nesting can multiply the copies: an
/// envelope of a few hundred bytes could ask for gigabytes. Connect shares one default object
/// among its uses; here each use owns its copy, so the copies are counted (the size of their
/// nodes and strings) and a record whose copies would outgrow
/// `max(16 × its bytes, 1 MiB)` is refused with an error.
#[derive(Debug)]
pub(crate) struct CopyBudget {
    left: usize,
}

impl CopyBudget {
    /// The budget of a record of `input` bytes.
    pub(crate) fn for_input(input: usize) -> Self {
        Self {
            left: input.saturating_mul(COPY_PER_INPUT_BYTE).max(COPY_AT_LEAST),
        }
    }

    /// Takes the weight of a copy of `value` out of what is left, or says where it ran out.
    fn copy(&mut self, value: &Value, path: &Path<'_>) -> Result<Value, String> {
        match weight_within(value, self.left) {
            Some(weight) => {
                self.left -= weight;
                Ok(value.clone())
            }
            None => Err(format!(
                "{path}: the copies of the schema's defaults this record needs would outgrow \
                 {COPY_PER_INPUT_BYTE} times its size (at least {COPY_AT_LEAST} bytes): defaults \
                 nested in defaults multiply; send the values instead of nulls, or use smaller \
                 defaults"
            )),
        }
    }
}

/// The bytes a copy of `value` takes (its nodes, and the text of its strings and keys), or
/// `None` when that is more than `limit`.
fn weight_within(value: &Value, limit: usize) -> Option<usize> {
    let mut total: usize = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        total = total.checked_add(std::mem::size_of::<Value>())?;
        match v {
            Value::String(s) => total = total.checked_add(s.len())?,
            Value::Array(items) => stack.extend(items),
            Value::Map(entries) => {
                for (k, v) in entries {
                    stack.push(k);
                    stack.push(v);
                }
            }
            Value::Struct(fields) => {
                for (name, v) in fields {
                    total = total.checked_add(name.len())?;
                    stack.push(v);
                }
            }
            // `Bytes` copies share their buffer.
            Value::Null | Value::Bytes(_) | Value::Boolean(_) | Value::Int(_) | Value::Float(_) => {
            }
        }
        if total > limit {
            return None;
        }
    }
    Some(total)
}

/// The value of `json` under `schema`, as Connect's `JsonConverter.convertToConnect`, but
/// strict where Java silently truncates or nulls: integers must fit their width, and a
/// boolean, string or bytes schema needs that JSON type.
///
/// A null (or missing struct field) becomes the schema's default when there is one and
/// `replace_null_with_default` is set, null when the schema is optional, an error otherwise.
pub(crate) fn to_value(
    schema: &Schema,
    json: Json,
    path: &Path<'_>,
    replace_null_with_default: bool,
    depth: usize,
    budget: &mut CopyBudget,
) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: nested deeper than {MAX_DEPTH} levels"));
    }
    let schema_type = schema.schema_type();
    if let Json::Null = json {
        if let (Some(default), true) = (schema.default_value(), replace_null_with_default) {
            return budget.copy(default, path);
        }
        if schema.is_optional() {
            return Ok(Value::Null);
        }
        return Err(format!(
            "{path}: null or missing, but the {schema_type} schema is not optional"
        ));
    }
    let mismatch = |expected: &str, json: &Json| {
        format!(
            "{path}: expected {expected} for the {schema_type} schema, found {}",
            json.kind()
        )
    };
    match schema_type {
        SchemaType::Int8 | SchemaType::Int16 | SchemaType::Int32 | SchemaType::Int64 => {
            let (min, max) = schema_type.int_range().unwrap_or((i64::MIN, i64::MAX));
            let out_of_range = |shown: &dyn std::fmt::Display| {
                format!("{path}: {shown} is out of range for {schema_type} ({min} to {max})")
            };
            match json {
                Json::Int(i) if (min..=max).contains(&i) => Ok(Value::Int(i)),
                Json::Int(i) => Err(out_of_range(&i)),
                Json::UInt(u) => Err(out_of_range(&u)),
                // A float with no fraction (`3.0`) is that integer, if it fits.
                Json::Float(f) if f.fract() == 0.0 => {
                    if f >= min as f64 && f < max as f64 + 1.0 {
                        Ok(Value::Int(f as i64))
                    } else {
                        Err(out_of_range(&f))
                    }
                }
                other => Err(mismatch("an integer", &other)),
            }
        }
        SchemaType::Float32 | SchemaType::Float64 => {
            let f = match json {
                Json::Int(i) => i as f64,
                Json::UInt(u) => u as f64,
                Json::Float(f) => f,
                other => return Err(mismatch("a number", &other)),
            };
            if schema_type == SchemaType::Float32 {
                if f.abs() > f64::from(f32::MAX) {
                    return Err(format!("{path}: {f} is out of range for float (32-bit)"));
                }
                Ok(Value::Float(f64::from(f as f32)))
            } else {
                Ok(Value::Float(f))
            }
        }
        SchemaType::Boolean => match json {
            Json::Bool(b) => Ok(Value::Boolean(b)),
            other => Err(mismatch("true or false", &other)),
        },
        SchemaType::String => match json {
            Json::String(s) => Ok(Value::String(s)),
            other => Err(mismatch("a string", &other)),
        },
        SchemaType::Bytes => match json {
            Json::String(s) => BASE64
                .decode(s.as_bytes())
                .map(|b| Value::Bytes(Bytes::from(b)))
                .map_err(|e| format!("{path}: invalid base64 for the bytes schema: {e}")),
            other @ (Json::Int(_) | Json::UInt(_) | Json::Float(_))
                if schema.name() == Some(DECIMAL) =>
            {
                Err(format!(
                    "{path}: a Decimal as a JSON number (decimal.format=NUMERIC) is not \
                     supported, found {}; produce it as base64 bytes (decimal.format=BASE64)",
                    other.kind()
                ))
            }
            other => Err(mismatch("a base64 string", &other)),
        },
        SchemaType::Array => {
            let items_schema = child(schema.items(), path, "items")?;
            let Json::Array(items) = json else {
                return Err(mismatch("an array", &json));
            };
            let mut values = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                values.push(to_value(
                    items_schema,
                    item,
                    &path.index(i),
                    replace_null_with_default,
                    depth + 1,
                    budget,
                )?);
            }
            Ok(Value::Array(values))
        }
        SchemaType::Map => {
            let keys_schema = child(schema.keys(), path, "keys")?;
            let values_schema = child(schema.values(), path, "values")?;
            map_value(
                keys_schema,
                values_schema,
                json,
                path,
                replace_null_with_default,
                depth,
                budget,
            )
        }
        SchemaType::Struct => {
            let Json::Object(members) = json else {
                return Err(mismatch("an object", &json));
            };
            struct_value(
                schema,
                members,
                path,
                replace_null_with_default,
                depth,
                budget,
            )
        }
    }
}

fn child<'s>(
    schema: Option<&'s Schema>,
    path: &Path<'_>,
    name: &str,
) -> Result<&'s Schema, String> {
    schema.ok_or_else(|| format!("{path}: the schema has no `{name}` schema"))
}

/// A map with string keys is a JSON object; any other map is an array of `[key, value]`
/// pairs, as Connect writes them.
fn map_value(
    keys_schema: &Schema,
    values_schema: &Schema,
    json: Json,
    path: &Path<'_>,
    replace: bool,
    depth: usize,
    budget: &mut CopyBudget,
) -> Result<Value, String> {
    let mut entries = Vec::new();
    if keys_schema.schema_type() == SchemaType::String {
        let Json::Object(members) = json else {
            return Err(format!(
                "{path}: a map with string keys must be a JSON object, found {}",
                json.kind()
            ));
        };
        entries.reserve(members.len());
        for (key, value) in members {
            let value = to_value(
                values_schema,
                value,
                &path.member(&key),
                replace,
                depth + 1,
                budget,
            )?;
            entries.push((Value::String(key), value));
        }
    } else {
        let Json::Array(pairs) = json else {
            return Err(format!(
                "{path}: a map with {} keys must be a JSON array of [key, value] pairs, found {}",
                keys_schema.schema_type(),
                json.kind()
            ));
        };
        entries.reserve(pairs.len());
        let mut seen: HashMap<ScalarKey, usize> = HashMap::new();
        for (i, pair) in pairs.into_iter().enumerate() {
            let pair_path = path.index(i);
            let [key, value] = match pair {
                Json::Array(kv) => <[Json; 2]>::try_from(kv).map_err(|kv| {
                    format!(
                        "{pair_path}: expected a [key, value] pair, found an array of {}",
                        kv.len()
                    )
                })?,
                other => {
                    return Err(format!(
                        "{pair_path}: expected a [key, value] pair, found {}",
                        other.kind()
                    ));
                }
            };
            let key = to_value(
                keys_schema,
                key,
                &pair_path.index(0),
                replace,
                depth + 1,
                budget,
            )?;
            let value = to_value(
                values_schema,
                value,
                &pair_path.index(1),
                replace,
                depth + 1,
                budget,
            )?;
            // A key given twice keeps its first place and takes the last value, as a JSON
            // object's repeated member does (Connect reads the pairs into a map: last wins).
            match ScalarKey::of(&key) {
                Some(scalar) => match seen.entry(scalar) {
                    std::collections::hash_map::Entry::Occupied(at) => {
                        entries[*at.get()].1 = value;
                    }
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(entries.len());
                        entries.push((key, value));
                    }
                },
                None => entries.push((key, value)),
            }
        }
    }
    Ok(Value::Map(entries))
}

/// A map key that can be compared by hashing: any but an array, map or struct (keys of
/// those kinds are kept as they come, repeated or not). Floats compare as Java's
/// `Double.equals` does: by their bits, every NaN alike.
#[derive(PartialEq, Eq, Hash)]
enum ScalarKey {
    Null,
    Bytes(Bytes),
    String(String),
    Boolean(bool),
    Int(i64),
    Float(u64),
}

impl ScalarKey {
    fn of(key: &Value) -> Option<Self> {
        Some(match key {
            Value::Null => Self::Null,
            Value::Bytes(b) => Self::Bytes(b.clone()),
            Value::String(s) => Self::String(s.clone()),
            Value::Boolean(b) => Self::Boolean(*b),
            Value::Int(i) => Self::Int(*i),
            Value::Float(f) if f.is_nan() => Self::Float(f64::NAN.to_bits()),
            Value::Float(f) => Self::Float(f.to_bits()),
            _ => return None,
        })
    }
}

/// The fields of the schema, in its order, from the object's members (the last of a
/// repeated key); members the schema does not name are ignored, as Connect ignores them.
fn struct_value(
    schema: &Schema,
    mut members: Vec<(String, Json)>,
    path: &Path<'_>,
    replace: bool,
    depth: usize,
    budget: &mut CopyBudget,
) -> Result<Value, String> {
    let positions: Vec<Option<usize>> = if members.len() > INDEX_ABOVE {
        let index: HashMap<&str, usize> = members
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.as_str(), i))
            .collect();
        schema
            .fields()
            .iter()
            .map(|f| index.get(f.name()).copied())
            .collect()
    } else {
        schema
            .fields()
            .iter()
            .map(|f| members.iter().rposition(|(k, _)| k == f.name()))
            .collect()
    };
    let mut fields = Vec::with_capacity(schema.fields().len());
    for (field, position) in schema.fields().iter().zip(positions) {
        // Field names are unique, so each member is taken at most once.
        let json = position.map_or(Json::Null, |i| {
            std::mem::replace(&mut members[i].1, Json::Null)
        });
        let value = to_value(
            field.schema(),
            json,
            &path.member(field.name()),
            replace,
            depth + 1,
            budget,
        )?;
        fields.push((field.name().to_owned(), value));
    }
    Ok(Value::Struct(fields))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::schema::Field;

    fn convert(schema: &Schema, payload: &str) -> Result<Value, String> {
        to_value(
            schema,
            Json::parse(payload.as_bytes()).unwrap(),
            &Path::Root("payload"),
            true,
            0,
            &mut CopyBudget::for_input(payload.len()),
        )
    }

    #[test]
    fn integers_are_range_checked() {
        let int8 = Schema::new(SchemaType::Int8);
        assert_eq!(convert(&int8, "-128"), Ok(Value::Int(-128)));
        assert_eq!(convert(&int8, "127.0"), Ok(Value::Int(127)));
        assert_eq!(
            convert(&int8, "128").unwrap_err(),
            "payload: 128 is out of range for int8 (-128 to 127)"
        );
        let int64 = Schema::new(SchemaType::Int64);
        assert!(convert(&int64, "9223372036854775808").is_err());
        assert!(convert(&int64, "9223372036854775808.0").is_err());
        assert!(convert(&int64, "1e300").is_err());
        assert_eq!(
            convert(&int64, "1.5").unwrap_err(),
            "payload: expected an integer for the int64 schema, found a number with a fraction or exponent"
        );
    }

    #[test]
    fn floats_follow_their_width() {
        assert_eq!(
            convert(&Schema::new(SchemaType::Float32), "0.1"),
            Ok(Value::Float(f64::from(0.1f32)))
        );
        assert!(convert(&Schema::new(SchemaType::Float32), "1e39").is_err());
        assert_eq!(
            convert(&Schema::new(SchemaType::Float64), "2"),
            Ok(Value::Float(2.0))
        );
    }

    #[test]
    fn nulls_defaults_and_optional() {
        let required = Schema::new(SchemaType::String);
        assert_eq!(
            convert(&required, "null").unwrap_err(),
            "payload: null or missing, but the string schema is not optional"
        );
        assert_eq!(
            convert(&required.clone().optional(), "null"),
            Ok(Value::Null)
        );
        let with_default = required.with_default(Value::from("n/a"));
        assert_eq!(convert(&with_default, "null"), Ok(Value::from("n/a")));
        let no_replace = to_value(
            &with_default,
            Json::Null,
            &Path::Root("payload"),
            false,
            0,
            &mut CopyBudget::for_input(0),
        );
        assert!(no_replace.is_err());
    }

    #[test]
    fn bytes_are_base64() {
        let bytes = Schema::new(SchemaType::Bytes);
        assert_eq!(
            convert(&bytes, r#""AAEC""#),
            Ok(Value::Bytes(Bytes::from_static(&[0, 1, 2])))
        );
        assert_eq!(
            convert(&bytes, r#""AAE""#),
            Ok(Value::Bytes(Bytes::from_static(&[0, 1])))
        );
        let err = convert(&bytes, r#""A*EC""#).unwrap_err();
        assert!(
            err.starts_with("payload: invalid base64 for the bytes schema:"),
            "{err}"
        );
        let decimal = Schema::new(SchemaType::Bytes).with_name(DECIMAL);
        assert!(
            convert(&decimal, "1.25")
                .unwrap_err()
                .contains("decimal.format=NUMERIC")
        );
    }

    #[test]
    fn structs_take_fields_in_schema_order() {
        let schema = Schema::new_struct(vec![
            Field::new("b", Schema::new(SchemaType::Boolean)),
            Field::new("a", Schema::new(SchemaType::Int32).optional()),
        ]);
        assert_eq!(
            convert(&schema, r#"{"a":1,"extra":"x","b":true,"a":2}"#),
            Ok(Value::Struct(vec![
                ("b".into(), Value::Boolean(true)),
                ("a".into(), Value::Int(2)),
            ]))
        );
        assert_eq!(
            convert(&schema, r#"{"a":1}"#).unwrap_err(),
            "payload.b: null or missing, but the boolean schema is not optional"
        );
    }

    #[test]
    fn large_objects_are_indexed_with_the_same_result() {
        let schema = Schema::new_struct(vec![Field::new("k7", Schema::new(SchemaType::Int32))]);
        let members: Vec<String> = (0..40).map(|i| format!(r#""k{}":{i}"#, i % 20)).collect();
        let payload = format!("{{{}}}", members.join(","));
        assert_eq!(
            convert(&schema, &payload),
            Ok(Value::Struct(vec![("k7".into(), Value::Int(27))]))
        );
    }

    #[test]
    fn maps_by_key_type() {
        let by_name = Schema::map(
            Schema::new(SchemaType::String),
            Schema::new(SchemaType::Int16),
        );
        assert_eq!(
            convert(&by_name, r#"{"x":1}"#),
            Ok(Value::Map(vec![(Value::from("x"), Value::Int(1))]))
        );
        let by_id = Schema::map(
            Schema::new(SchemaType::Int32),
            Schema::new(SchemaType::String),
        );
        assert_eq!(
            convert(&by_id, r#"[[1,"a"],[2,"b"]]"#),
            Ok(Value::Map(vec![
                (Value::Int(1), Value::from("a")),
                (Value::Int(2), Value::from("b"))
            ]))
        );
        assert_eq!(
            convert(&by_id, r#"[[2,"a"],[1,"b"],[2,"c"]]"#),
            Ok(Value::Map(vec![
                (Value::Int(2), Value::from("c")),
                (Value::Int(1), Value::from("b"))
            ])),
            "a repeated key keeps its place and takes the last value"
        );
        assert_eq!(
            convert(&by_id, r#"[[1,"a",3]]"#).unwrap_err(),
            "payload[0]: expected a [key, value] pair, found an array of 3"
        );
        assert!(
            convert(&by_id, r#"{"1":"a"}"#)
                .unwrap_err()
                .contains("[key, value] pairs")
        );
        assert_eq!(
            convert(&by_name, r#"{"x":"1"}"#).unwrap_err(),
            "payload.x: expected an integer for the int16 schema, found a string"
        );
    }

    #[test]
    fn arrays_name_the_element() {
        let schema = Schema::array(Schema::new(SchemaType::String));
        assert_eq!(
            convert(&schema, r#"["a",2]"#).unwrap_err(),
            "payload[1]: expected a string for the string schema, found an integer"
        );
    }
}
